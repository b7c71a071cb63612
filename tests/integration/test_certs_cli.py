"""`sluice certs init` and `sluice certs show` (docs/interception.md "Files"),
checked with the real openssl CLI: the files and their modes, the refusal
to overwrite, the name constraints from --permit and --permit-from (which
reads only the intercepted routes of a policy whose key files do not
exist), validity from --days, the subject from --name, the SPKI pin that
`openssl x509 -pubkey | openssl pkey -pubin -outform der | openssl dgst
-sha256 -binary | base64` gives, and the exit codes and messages of usage
errors (2) and bad input (1). No root and no network namespace needed.
"""

import base64
import datetime
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "lib"))

from sluicetest.base import ENV, SKIP  # noqa: E402


def run(*args, input=None):
    return subprocess.run(list(args), capture_output=True, input=input,
                          timeout=ENV.slow(30))


def sluice(*args):
    p = run(ENV.bin, *args)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def openssl_text(pem):
    p = run("openssl", "x509", "-in", pem, "-noout", "-text")
    assert p.returncode == 0, p.stderr
    return p.stdout.decode()


def constraints(text):
    """(permitted, excluded) lines of the Name Constraints extension."""
    if "X509v3 Name Constraints: critical" not in text:
        return None
    block = text.split("X509v3 Name Constraints: critical")[1]
    block = block.split("Signature Algorithm")[0]
    permitted, excluded, cur = [], [], None
    for line in block.splitlines():
        s = line.strip()
        if s == "Permitted:":
            cur = permitted
        elif s == "Excluded:":
            cur = excluded
        elif s.startswith(("DNS:", "IP:")) and cur is not None:
            cur.append(s)
        elif s.startswith("X509v3") or s.startswith("Signature"):
            break
    return permitted, excluded


def openssl_pin(pem):
    """The SPKI pin the way the docs tell an operator to compute it."""
    pub = run("openssl", "x509", "-in", pem, "-noout", "-pubkey")
    der = run("openssl", "pkey", "-pubin", "-outform", "der",
              input=pub.stdout)
    dgst = run("openssl", "dgst", "-sha256", "-binary", input=der.stdout)
    return base64.b64encode(dgst.stdout).decode()


def slurp(path):
    with open(path, "rb") as f:
        return f.read()


def show_fields(out):
    fields = {}
    for line in out.splitlines():
        k, _, v = line.partition(": ")
        fields.setdefault(k, []).append(v)
    return fields


class CertsCli(unittest.TestCase):

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="sluice-certs-cli-")

    def tearDown(self):
        if ENV.keep:
            print("kept: %s" % self.tmp, file=sys.stderr)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, *names):
        return os.path.join(self.tmp, *names)

    def init(self, *args, name="ca"):
        d = self.path(name)
        rc, out, err = sluice("certs", "init", "--dir", d, *args)
        self.assertEqual(rc, 0, "certs init %r: %s%s" % (args, out, err))
        return d

    # -- files -------------------------------------------------------------

    def test_init_writes_key_0600_and_pem(self):
        d = self.init("--permit", "api.example")
        key, pem = os.path.join(d, "ca.key"), os.path.join(d, "ca.pem")
        st_key = os.lstat(key)
        self.assertTrue(stat.S_ISREG(st_key.st_mode))
        self.assertEqual(stat.S_IMODE(st_key.st_mode), 0o600)
        self.assertEqual(stat.S_IMODE(os.lstat(pem).st_mode), 0o644)
        with open(key) as f:
            k = f.read()
        self.assertTrue(k.startswith("-----BEGIN PRIVATE KEY-----"), k[:40])
        p = run("openssl", "pkey", "-in", key, "-noout", "-text")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("ASN1 OID: prime256v1", p.stdout.decode())
        # The key belongs to the certificate.
        a = run("openssl", "pkey", "-in", key, "-pubout")
        b = run("openssl", "x509", "-in", pem, "-noout", "-pubkey")
        self.assertEqual(a.stdout, b.stdout)
        t = openssl_text(pem)
        self.assertIn("Subject: CN = sluice local CA", t)
        self.assertIn("Issuer: CN = sluice local CA", t)
        self.assertIn("X509v3 Basic Constraints: critical\n"
                      "                CA:TRUE, pathlen:0", t)
        self.assertIn("X509v3 Key Usage: critical\n"
                      "                Certificate Sign, CRL Sign", t)
        # A self-signed certificate that verifies against itself.
        v = run("openssl", "verify", "-CAfile", pem, pem)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)

    def test_init_refuses_to_overwrite(self):
        d = self.init("--permit", "api.example")
        key, pem = os.path.join(d, "ca.key"), os.path.join(d, "ca.pem")
        before = (slurp(key), slurp(pem))
        rc, out, err = sluice("certs", "init", "--dir", d, "--permit",
                              "other.example")
        self.assertEqual(rc, 1, out + err)
        self.assertIn("ca.key", err)
        self.assertEqual((slurp(key), slurp(pem)), before)
        # Only ca.pem left behind by someone: still refused, and no new
        # ca.key appears next to the foreign certificate.
        d2 = self.path("pem-only")
        os.mkdir(d2)
        with open(os.path.join(d2, "ca.pem"), "w") as f:
            f.write("not mine\n")
        rc, out, err = sluice("certs", "init", "--dir", d2)
        self.assertEqual(rc, 1, out + err)
        self.assertIn("ca.pem", err)
        self.assertEqual(sorted(os.listdir(d2)), ["ca.pem"])

    def test_init_creates_missing_dir_0700(self):
        d = self.init("--permit", "api.example", name="new")
        self.assertEqual(stat.S_IMODE(os.stat(d).st_mode), 0o700)

    # -- constraints ---------------------------------------------------------

    def test_permit_constraints(self):
        d = self.init("--permit", "api.example", "--permit", "LLM.Example",
                      "--permit", "api.example", "--permit", "198.18.7.1")
        permitted, excluded = constraints(openssl_text(
            os.path.join(d, "ca.pem")))
        self.assertEqual(sorted(permitted), sorted([
            "DNS:api.example", "DNS:llm.example",
            "IP:198.18.7.1/255.255.255.255"]))
        # An IPv4 literal is permitted, so only IPv6 is excluded wholesale.
        self.assertEqual(excluded, ["IP:0:0:0:0:0:0:0:0/0:0:0:0:0:0:0:0"])

    def sign_leaf(self, d, name, san):
        """A leaf for san signed by hand with the CA's key (openssl)."""
        key, csr = self.path(name + ".key"), self.path(name + ".csr")
        crt, ext = self.path(name + ".pem"), self.path(name + ".ext")
        with open(ext, "w") as f:
            f.write("basicConstraints=critical,CA:FALSE\n"
                    "keyUsage=critical,digitalSignature\n"
                    "extendedKeyUsage=serverAuth\n"
                    "subjectAltName=%s\n" % san)
        p = run("openssl", "req", "-new", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:P-256", "-nodes", "-keyout", key,
                "-out", csr, "-subj", "/CN=" + name)
        self.assertEqual(p.returncode, 0, p.stderr)
        p = run("openssl", "x509", "-req", "-in", csr, "-CA",
                os.path.join(d, "ca.pem"), "-CAkey", os.path.join(d, "ca.key"),
                "-CAcreateserial", "-out", crt, "-days", "1", "-extfile", ext)
        self.assertEqual(p.returncode, 0, p.stderr)
        return run("openssl", "verify", "-CAfile", os.path.join(d, "ca.pem"),
                   crt)

    def test_constraints_hold_against_the_ca_key(self):
        # Even with the CA's own key, a leaf outside --permit fails to
        # verify: the constraint is in the CA certificate clients trust.
        d = self.init("--permit", "api.example")
        ok = self.sign_leaf(d, "inside", "DNS:api.example")
        self.assertEqual(ok.returncode, 0, ok.stdout + ok.stderr)
        sub = self.sign_leaf(d, "sub", "DNS:eu.api.example")
        self.assertEqual(sub.returncode, 0, sub.stdout + sub.stderr)
        for name, san in (("evil", "DNS:evil.example"),
                          ("parent", "DNS:example"),
                          ("suffix", "DNS:api.example.evil.example"),
                          ("addr", "IP:198.18.7.9")):
            with self.subTest(san=san):
                p = self.sign_leaf(d, name, san)
                self.assertNotEqual(p.returncode, 0, san)
                out = (p.stdout + p.stderr).decode()
                self.assertRegex(out, r"(permitted|excluded) subtree "
                                 r"violation", san)

    def test_permit_dns_only_excludes_every_address(self):
        d = self.init("--permit", "api.example")
        permitted, excluded = constraints(openssl_text(
            os.path.join(d, "ca.pem")))
        self.assertEqual(permitted, ["DNS:api.example"])
        self.assertEqual(sorted(excluded), sorted([
            "IP:0.0.0.0/0.0.0.0", "IP:0:0:0:0:0:0:0:0/0:0:0:0:0:0:0:0"]))

    def write_policy(self, routes, name="policy.json"):
        doc = {
            "listeners": [{"name": "fwd", "type": "forward",
                           "listen": "127.0.0.1:3128"}],
            # Key and secret files that do not exist: --permit-from must
            # not read them.
            "tokens": {"keys": [{"kid": "k1", "alg": "HS256",
                                 "secret_file": self.path("nope.key")}]},
            "intercept": {"ca": "files",
                          "ca_cert_file": self.path("nope.pem"),
                          "ca_key_file": self.path("nope.key")},
            "routes": routes,
        }
        p = self.path(name)
        with open(p, "w") as f:
            json.dump(doc, f)
        return p

    def route(self, aud, hosts, url, intercept):
        return {"audience": aud, "hosts": hosts,
                "connect": {"enabled": True, "intercept": intercept,
                            "ports": [443]},
                "upstream": {"url": url, "headers": [
                    {"name": "x-api-key",
                     "value_file": self.path("nope.secret")}]}}

    def test_permit_from_policy(self):
        pol = self.write_policy([
            self.route("a", ["model.test", "Alias.Test"],
                       "https://api.anthropic.example/v1", True),
            self.route("b", ["opaque.test"], "https://opaque-up.example",
                       False),
            self.route("c", [], "https://[2001:2:0:9::2]:8443/x", True),
            {"audience": "d", "hosts": ["noconnect.test"],
             "upstream": {"url": "https://noconnect-up.example"}},
        ])
        d = self.init("--permit-from", pol, "--permit", "extra.example")
        permitted, excluded = constraints(openssl_text(
            os.path.join(d, "ca.pem")))
        self.assertEqual(sorted(permitted), sorted([
            "DNS:extra.example", "DNS:model.test", "DNS:alias.test",
            "DNS:api.anthropic.example",
            "IP:2001:2:0:9:0:0:0:2/FFFF:FFFF:FFFF:FFFF:FFFF:FFFF:FFFF:FFFF",
        ]))
        self.assertEqual(excluded, ["IP:0.0.0.0/0.0.0.0"])
        for host in ("opaque.test", "opaque-up.example", "noconnect.test"):
            self.assertNotIn("DNS:" + host, permitted)

    def test_permit_from_without_intercepted_route(self):
        pol = self.write_policy([self.route("b", ["opaque.test"],
                                            "https://opaque-up.example",
                                            False)])
        rc, out, err = sluice("certs", "init", "--dir", self.path("ca"),
                              "--permit-from", pol)
        self.assertEqual(rc, 1, out + err)
        self.assertIn("--permit-from", err)
        self.assertIn("connect.intercept", err)
        self.assertFalse(os.path.exists(self.path("ca", "ca.key")))

    def test_permit_from_bad_host_names_the_field(self):
        pol = self.write_policy([
            self.route("a", ["ok.test"], "https://up.example", True),
            self.route("b", ["ok2.test", "bad_host.test"],
                       "https://up2.example", True)])
        rc, out, err = sluice("certs", "init", "--dir", self.path("ca"),
                              "--permit-from", pol)
        self.assertEqual(rc, 1, out + err)
        self.assertIn("routes[1].hosts[1]", err)
        self.assertFalse(os.path.exists(self.path("ca", "ca.key")))

    def test_permit_from_bad_url_and_bad_json(self):
        pol = self.write_policy([self.route("a", [], "ftp://up.example",
                                            True)])
        rc, out, err = sluice("certs", "init", "--dir", self.path("ca"),
                              "--permit-from", pol)
        self.assertEqual(rc, 1, out + err)
        self.assertIn("routes[0].upstream.url", err)
        bad = self.path("bad.json")
        with open(bad, "w") as f:
            f.write('{"routes": [')
        rc, out, err = sluice("certs", "init", "--dir", self.path("ca"),
                              "--permit-from", bad)
        self.assertEqual(rc, 1, out + err)
        self.assertIn(bad, err)
        rc, out, err = sluice("certs", "init", "--dir", self.path("ca"),
                              "--permit-from", self.path("missing.json"))
        self.assertEqual(rc, 1, out + err)
        self.assertIn("missing.json", err)
        self.assertFalse(os.path.exists(self.path("ca", "ca.key")))

    def test_unconstrained_warns(self):
        d = self.path("ca")
        rc, out, err = sluice("certs", "init", "--dir", d)
        self.assertEqual(rc, 0, out + err)
        self.assertIn("unconstrained", err)
        self.assertIsNone(constraints(openssl_text(
            os.path.join(d, "ca.pem"))))

    # -- days and name -------------------------------------------------------

    def test_days_and_name(self):
        d = self.init("--days", "7", "--name", "Run 42 CA", "--permit",
                      "api.example")
        pem = os.path.join(d, "ca.pem")
        t = openssl_text(pem)
        self.assertIn("Subject: CN = Run 42 CA", t)
        p = run("openssl", "x509", "-in", pem, "-noout", "-startdate",
                "-enddate")
        lines = dict(l.split("=", 1) for l in p.stdout.decode().split("\n")
                     if "=" in l)
        fmt = "%b %d %H:%M:%S %Y GMT"
        nb = datetime.datetime.strptime(" ".join(lines["notBefore"].split()),
                                        fmt)
        na = datetime.datetime.strptime(" ".join(lines["notAfter"].split()),
                                        fmt)
        # notBefore an hour back for clock skew, notAfter now + 7 days.
        self.assertAlmostEqual((na - nb).total_seconds(), 7 * 86400 + 3600,
                               delta=120)
        rc, out, err = sluice("certs", "init", "--dir", self.path("d30"),
                              "--permit", "api.example")
        self.assertEqual(rc, 0, err)
        p = run("openssl", "x509", "-in", self.path("d30", "ca.pem"),
                "-noout", "-checkend", str(29 * 86400))
        self.assertEqual(p.returncode, 0, "default validity < 29 days")
        p = run("openssl", "x509", "-in", self.path("d30", "ca.pem"),
                "-noout", "-checkend", str(31 * 86400))
        self.assertNotEqual(p.returncode, 0, "default validity > 31 days")

    # -- show ----------------------------------------------------------------

    def test_show(self):
        d = self.init("--days", "3", "--permit", "api.example", "--permit",
                      "198.18.7.1")
        pem = os.path.join(d, "ca.pem")
        rc, out, err = sluice("certs", "show", "--dir", d)
        self.assertEqual(rc, 0, err)
        f = show_fields(out)
        self.assertEqual(f["subject"], ["CN=sluice local CA"])
        self.assertEqual(f["issuer"], ["CN=sluice local CA"])
        self.assertEqual(f["key"], ["EC P-256"])
        self.assertEqual(f["ca"], ["true, pathlen 0"])
        self.assertEqual(sorted(f["permitted"]),
                         ["DNS:api.example", "IP:198.18.7.1/32"])
        self.assertEqual(f["excluded"], ["IP:::/0"])
        self.assertIn("not_before", f)
        self.assertIn("not_after", f)
        serial = run("openssl", "x509", "-in", pem, "-noout", "-serial")
        self.assertEqual(f["serial"][0].upper(),
                         serial.stdout.decode().strip().split("=")[1])
        self.assertEqual(f["spki_sha256"], [openssl_pin(pem)])
        # init printed the same description.
        rc, out2, err = sluice("certs", "init", "--dir", self.path("two"),
                               "--permit", "x.example")
        self.assertEqual(rc, 0, err)
        self.assertEqual(show_fields(out2)["spki_sha256"],
                         [openssl_pin(self.path("two", "ca.pem"))])

    def test_show_errors(self):
        rc, out, err = sluice("certs", "show", "--dir", self.path("none"))
        self.assertEqual(rc, 1, out + err)
        self.assertIn(self.path("none", "ca.pem"), err)
        os.mkdir(self.path("junk"))
        with open(self.path("junk", "ca.pem"), "w") as f:
            f.write("-----BEGIN CERTIFICATE-----\nAAAA\n")
        rc, out, err = sluice("certs", "show", "--dir", self.path("junk"))
        self.assertEqual(rc, 1, out + err)
        self.assertIn("not a PEM or DER certificate", err)

    # -- usage and bad input -------------------------------------------------

    def test_usage_errors_exit_2(self):
        cases = [
            (("certs",), "usage"),
            (("certs", "frob"), "frob"),
            (("certs", "init"), "--dir"),
            (("certs", "init", "--dir", self.path("u"), "--days", "0"),
             "--days"),
            (("certs", "init", "--dir", self.path("u"), "--days", "3651"),
             "--days"),
            (("certs", "init", "--dir", self.path("u"), "--days", "7x"),
             "--days"),
            (("certs", "init", "--dir", self.path("u"), "--name", ""),
             "--name"),
            (("certs", "init", "--dir", self.path("u"), "--bogus"),
             "bogus"),
            (("certs", "init", "--dir", self.path("u"), "extra"), "extra"),
            (("certs", "show"), "--dir"),
            (("certs", "show", "--dir", self.path("u"), "extra"), "extra"),
        ]
        for args, needle in cases:
            rc, out, err = sluice(*args)
            self.assertEqual(rc, 2, "%r: %s%s" % (args, out, err))
            self.assertIn(needle, err, args)
        self.assertFalse(os.path.exists(self.path("u")))

    def test_bad_permit_exit_1(self):
        for host in ("bad_host", "*.example", "example.com.", "10.1",
                     "-lead.example", "a" * 64 + ".example"):
            rc, out, err = sluice("certs", "init", "--dir", self.path("b"),
                                  "--permit", "ok.example", "--permit",
                                  host)
            self.assertEqual(rc, 1, "%r: %s%s" % (host, out, err))
            self.assertIn("--permit", err, host)
            self.assertFalse(os.path.exists(self.path("b", "ca.key")), host)


if __name__ == "__main__":
    if shutil.which("openssl") is None or not os.access(ENV.bin, os.X_OK):
        print("skipped: openssl or the sluice binary missing",
              file=sys.stderr)
        sys.exit(SKIP)
    unittest.main(verbosity=2)
