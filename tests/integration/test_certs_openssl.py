"""The certs/ library seen by the real openssl CLI (issue 16 "Tests":
`openssl x509 -text`, `openssl verify`, `openssl s_client`).

A CA made by certs_tool (tests/tools/certs_tool.c, the library's calls) is
read by `openssl x509 -text` (basicConstraints, keyUsage, name
constraints) and so is a minted leaf (SAN, issuer, validity, key type);
a minted leaf verifies; certificates signed by hand with the CA key for
names outside the constraints fail `openssl verify -CAfile ca.pem` with a
name-constraint error; the files' modes and the refusal to overwrite;
and `openssl s_client` against certs_server_ctx() over a Unix socket
(the right SNI, no SNI, a mismatched SNI, an h2-only client). No network
namespace is needed: nothing here uses an address.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "lib"))

from sluicetest.base import ENV, SKIP  # noqa: E402

TOOL = os.path.join(ENV.tools, "certs_tool")


def read(path):
    with open(path) as f:
        return f.read()


def run(*args, check=True, input=None):
    p = subprocess.run(list(args), capture_output=True, text=True,
                       input=input, timeout=ENV.slow(30))
    if check and p.returncode != 0:
        raise AssertionError("%s: exit %d\n%s%s" % (
            " ".join(args), p.returncode, p.stdout, p.stderr))
    return p


class CertsOpenssl(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="sluice-certs-")
        cls.ca = os.path.join(cls.tmp, "ca")
        os.mkdir(cls.ca)
        run(TOOL, "init", cls.ca, "--days", "7", "--permit", "api.example",
            "--permit", "llm.internal.example")
        cls.pem = os.path.join(cls.ca, "ca.pem")
        cls.key = os.path.join(cls.ca, "ca.key")

    @classmethod
    def tearDownClass(cls):
        if ENV.keep:
            print("kept: %s" % cls.tmp, file=sys.stderr)
        else:
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def text(self, pem):
        return run("openssl", "x509", "-in", pem, "-noout", "-text").stdout

    def test_ca_text(self):
        t = self.text(self.pem)
        self.assertIn("Issuer: CN = sluice local CA", t)
        self.assertIn("Subject: CN = sluice local CA", t)
        self.assertIn("X509v3 Basic Constraints: critical\n"
                      "                CA:TRUE, pathlen:0", t)
        self.assertIn("X509v3 Key Usage: critical\n"
                      "                Certificate Sign, CRL Sign", t)
        self.assertIn("X509v3 Subject Key Identifier", t)
        self.assertIn("X509v3 Name Constraints: critical", t)
        permitted = t.split("Permitted:")[1].split("Excluded:")[0]
        self.assertEqual(permitted.split(),
                         ["DNS:api.example", "DNS:llm.internal.example"])
        excluded = t.split("Excluded:")[1].split("Signature Algorithm")[0]
        self.assertEqual(excluded.split(), [
            "IP:0.0.0.0/0.0.0.0",
            "IP:0:0:0:0:0:0:0:0/0:0:0:0:0:0:0:0"])
        self.assertIn("NIST CURVE: P-256", t)
        # 7 days, starting an hour back.
        nb = run("openssl", "x509", "-in", self.pem, "-noout",
                 "-startdate", "-enddate").stdout
        self.assertIn("notBefore=", nb)
        run("openssl", "x509", "-in", self.pem, "-noout",
            "-checkend", str(6 * 86400))
        p = run("openssl", "x509", "-in", self.pem, "-noout",
                "-checkend", str(7 * 86400 + 60), check=False)
        self.assertNotEqual(p.returncode, 0)

    def test_files(self):
        self.assertEqual(os.stat(self.key).st_mode & 0o7777, 0o600)
        self.assertEqual(os.stat(self.pem).st_mode & 0o7777, 0o644)
        before = read(self.key)
        self.assertTrue(before.startswith("-----BEGIN PRIVATE KEY-----\n"))
        p = run(TOOL, "init", self.ca, check=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn("ca.key: exists (refusing to overwrite it)", p.stderr)
        self.assertEqual(read(self.key), before)
        # The ephemeral CA writes its certificate and nothing else.
        d = self.path("eph")
        os.mkdir(d)
        run(TOOL, "ephemeral", os.path.join(d, "ca.pem"), "--permit",
            "api.example")
        self.assertEqual(os.listdir(d), ["ca.pem"])
        self.assertIn("DNS:api.example", self.text(os.path.join(d, "ca.pem")))
        # A bad host name is refused, named.
        p = run(TOOL, "ephemeral", os.path.join(d, "x.pem"), "--permit",
                "*.example.com", check=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn('"*.example.com": wildcard at byte 0', p.stderr)
        # `show`: what `sluice certs show` will print.
        out = run(TOOL, "show", self.ca).stdout
        self.assertIn("permitted: DNS:api.example\n", out)
        self.assertIn("excluded: IP:0.0.0.0/0\n", out)
        pin = run("sh", "-c",
                  "openssl x509 -in '%s' -noout -pubkey | openssl pkey "
                  "-pubin -outform DER | openssl dgst -sha256 -binary | "
                  "openssl base64" % self.pem).stdout.strip()
        self.assertIn("spki_sha256: %s\n" % pin, out)

    def test_leaf_text_and_verify(self):
        leaf = self.path("leaf.pem")
        run(TOOL, "leaf", self.ca, "api.example", leaf)
        t = self.text(leaf)
        self.assertIn("Issuer: CN = sluice local CA", t)
        self.assertIn("Subject: CN = api.example", t)
        self.assertIn("X509v3 Subject Alternative Name: \n"
                      "                DNS:api.example\n", t)
        self.assertIn("CA:FALSE", t)
        self.assertIn("X509v3 Key Usage: critical\n"
                      "                Digital Signature", t)
        self.assertIn("TLS Web Server Authentication", t)
        self.assertIn("X509v3 Authority Key Identifier", t)
        self.assertIn("Public Key Algorithm: id-ecPublicKey", t)
        self.assertIn("NIST CURVE: P-256", t)
        # leaf_days 1: valid a day, not two.
        run("openssl", "x509", "-in", leaf, "-noout", "-checkend",
            str(86400 - 120))
        self.assertNotEqual(run("openssl", "x509", "-in", leaf, "-noout",
                                "-checkend", str(86400 + 60),
                                check=False).returncode, 0)
        p = run("openssl", "verify", "-CAfile", self.pem, "-purpose",
                "sslserver", "-verify_hostname", "api.example", leaf)
        self.assertIn("leaf.pem: OK", p.stdout)
        # A subdomain of a permitted name verifies too (RFC 5280).
        sub = self.path("sub.pem")
        run(TOOL, "leaf", self.ca, "eu.api.example", sub)
        run("openssl", "verify", "-CAfile", self.pem, sub)
        # The tool refuses what the constraints forbid.
        p = run(TOOL, "leaf", self.ca, "evil.example", self.path("no.pem"),
                check=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn("outside the CA's name constraints", p.stderr)
        self.assertFalse(os.path.exists(self.path("no.pem")))

    def hand_signed(self, name, san, subj):
        """A leaf for san signed with the CA key by openssl itself."""
        key = self.path(name + ".key")
        csr = self.path(name + ".csr")
        ext = self.path(name + ".ext")
        crt = self.path(name + ".pem")
        run("openssl", "genpkey", "-algorithm", "EC", "-pkeyopt",
            "ec_paramgen_curve:P-256", "-out", key)
        run("openssl", "req", "-new", "-key", key, "-subj", subj, "-out", csr)
        with open(ext, "w") as f:
            if san:
                f.write("subjectAltName=%s\n" % san)
            f.write("basicConstraints=critical,CA:FALSE\n")
        run("openssl", "x509", "-req", "-in", csr, "-CA", self.pem,
            "-CAkey", self.key, "-CAcreateserial", "-days", "1",
            "-extfile", ext, "-out", crt)
        return crt

    def test_leaked_key_outside_constraints(self):
        cases = [
            ("evil", "DNS:evil.example", "/CN=evil.example",
             "permitted subtree violation"),
            ("suffix", "DNS:api.example.evil", "/CN=api.example.evil",
             "permitted subtree violation"),
            ("ip", "IP:198.18.0.9", "/CN=x", "excluded subtree violation"),
            ("ip6", "IP:2001:2::9", "/CN=x", "excluded subtree violation"),
            # No SAN: OpenSSL checks a host-like CN against the DNS names.
            ("cn", None, "/CN=evil.example", "permitted subtree violation"),
        ]
        for name, san, subj, err in cases:
            with self.subTest(name=name):
                crt = self.hand_signed(name, san, subj)
                p = run("openssl", "verify", "-CAfile", self.pem, crt,
                        check=False)
                self.assertNotEqual(p.returncode, 0, p.stdout)
                self.assertIn(err, p.stdout + p.stderr)
        # The same signing for a permitted name verifies: the refusal
        # above is the constraints', not a broken signature.
        crt = self.hand_signed("good", "DNS:api.example", "/CN=api.example")
        run("openssl", "verify", "-CAfile", self.pem, crt)

    def s_client(self, sock, *args, data="GET / HTTP/1.1\r\n\r\n"):
        return run("openssl", "s_client", "-unix", sock, "-CAfile", self.pem,
                   "-verify_return_error", *args, check=False, input=data)

    def test_s_client(self):
        sock = self.path("s.sock")
        srv = subprocess.Popen([TOOL, "serve", self.ca, sock, "4",
                                "api.example"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        try:
            self.assertEqual(srv.stdout.readline(), "listening\n")
            p = self.s_client(sock, "-servername", "api.example",
                              "-verify_hostname", "api.example",
                              "-alpn", "h2,http/1.1")
            self.assertIn("Verify return code: 0 (ok)", p.stdout)
            self.assertIn("ALPN protocol: http/1.1", p.stdout)
            self.assertEqual(srv.stdout.readline(), "ok GET / HTTP/1.1\n")
            # No SNI: the leaf for the expected host all the same.
            p = self.s_client(sock, "-noservername", "-verify_hostname",
                              "api.example")
            self.assertIn("Verify return code: 0 (ok)", p.stdout)
            self.assertEqual(srv.stdout.readline(), "ok GET / HTTP/1.1\n")
            # Another SNI, even one the CA may sign: refused.
            p = self.s_client(sock, "-servername", "llm.internal.example")
            self.assertIn("unrecognized name", p.stderr)
            self.assertEqual(srv.stdout.readline(), "fail sni_mismatch\n")
            # h2 only: no_application_protocol.
            p = self.s_client(sock, "-servername", "api.example", "-alpn",
                              "h2")
            self.assertIn("no application protocol", p.stderr)
            self.assertEqual(srv.stdout.readline(), "fail alpn_no_http1\n")
            self.assertEqual(srv.wait(timeout=ENV.slow(10)), 0)
            err = srv.stderr.read()
            for mark in ("AddressSanitizer", "LeakSanitizer",
                         "runtime error:"):
                self.assertNotIn(mark, err)
        finally:
            if srv.poll() is None:
                srv.kill()
                srv.wait()
            srv.stdout.close()
            srv.stderr.close()


if __name__ == "__main__":
    if shutil.which("openssl") is None or not os.path.exists(TOOL):
        print("skipped: openssl or certs_tool missing", file=sys.stderr)
        sys.exit(SKIP)
    unittest.main(verbosity=2)
