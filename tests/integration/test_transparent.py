"""Intercepted tunnels without a CONNECT (docs/interception.md "Transparent
and intercept listeners"): clients that ignore proxy variables.

sluice runs in sidecar mode in the sandbox namespace with real nftables
(its own table there: the nat chain that redirects the sandbox's outbound
TCP to the intercepted ports to the transparent listener). curl runs as an
unprivileged uid with no proxy variables, `--resolve` pointing the name at
an address (the destination the client dials; --connect-to is not used, it
would change nothing the kernel sees):

- the model host at its upstream's address: redirected, intercepted, the
  real credential injected upstream, the run token not;
- an SNI that names no intercepted host: closed, audited
  (route_not_found, sni_not_intercepted), nothing upstream;
- the model host at an address that is not its upstream's: closed,
  audited (destination_denied, destination_mismatch), nothing upstream;
- a client that sends no TLS: closed, audited (client_tls_error, not_tls);
- the intercept listener reached directly with SNI = its host works;
  another SNI fails the handshake (client_tls_error, sni_mismatch);
- the ruleset in the kernel is what `sluice netpolicy show` prints and
  `sluice netpolicy verify` finds no difference.

Topology: netns sbx (sluice, the clients) <-veth-> netns up (fakeup on
198.18.17.2:443, DNS on .53; .3 has no service).
"""

import json
import os
import pwd
import secrets
import shutil
import ssl
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))

import sluicetest as st  # noqa: E402
from sluicetest import header_values, policy as pol  # noqa: E402
from sluicetest.base import CLEANUP, ENV  # noqa: E402
from sluicetest.netns import ns_exec  # noqa: E402

NOBODY = 65534
SLUICE_USER = "daemon"  # an existing non-root account for sluice
MODEL = "model-up.test"
TP_PORT = 15001


def as_nobody(argv):
    return ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY,
            "--clear-groups", "--"] + list(argv)


class TestTransparent(st.ProxyTestCase):
    TAG = "transp"
    X = 17
    UP_HOSTS = (2, 3, 53)

    @classmethod
    def build(cls):
        h, t = cls.h, cls.h.topo
        cert, key = h.ca.issue("model-up", ["DNS:%s" % MODEL])
        cls.up = h.fakeup("main", ["%s:443" % t.v4(2),
                                   "[%s]:443" % t.v6(2)], cert, key)
        h.dns_server({MODEL: {"A": [t.v4(2)], "AAAA": [t.v6(2)]}})
        cls.pub = tempfile.mkdtemp(prefix="sluicetest-transp-pub-")
        os.chmod(cls.pub, 0o755)
        if not ENV.keep:
            CLEANUP.push(shutil.rmtree, cls.pub, True)
        cls.ca_pem = os.path.join(cls.pub, "ca.pem")
        cls.secret = "sk-real-" + secrets.token_hex(16)
        cred = h.secret_value("cred", cls.secret)
        r = pol.route("model", [], "https://%s" % MODEL, h.ca.cert,
                      prefixes=["/v1/messages"],
                      headers=[("x-api-key", cred)])
        r["connect"] = {"enabled": True, "intercept": True, "ports": [443]}
        r["token_header"] = "x-api-key"
        r["upstream"]["strip_token"] = True
        listeners = [
            pol.forward("fwd", "127.0.0.1:808"),
            {"name": "tp", "type": "transparent",
             "listen": "127.0.0.1:%d" % TP_PORT},
            {"name": "tp6", "type": "transparent",
             "listen": "[::1]:%d" % TP_PORT},
            {"name": "ic", "type": "intercept", "listen": "127.0.0.1:443",
             "host": MODEL},
        ]
        # An allowlist route first (no upstream host of its own): the
        # listeners' host and SNI lookups must pass over it (they once
        # compared its NULL host: a crash at load, and per connection).
        pkg = {"audience": "pkgs", "hosts": ["pkg.transp.test"],
               "upstream": {"mode": "as_requested", "ports": [443]}}
        doc = h.policy("main", listeners, [pkg, r])
        doc["user"] = SLUICE_USER
        doc["netpolicy"] = {"mode": "sidecar", "table": "sluicetp",
                            "resolvers": h.resolvers, "log_group": 9,
                            "allow_loopback": True}
        doc["intercept"] = {"ca": "ephemeral", "ca_cert_out": cls.ca_pem}
        # sluice's user reads and writes its state after dropping root.
        uid = pwd.getpwnam(SLUICE_USER).pw_uid
        for d in (os.path.dirname(doc["audit"]["path"]), doc["state_dir"]):
            os.chown(d, uid, -1)
        os.chown(cls.pub, uid, -1)
        cls.audit_path = doc["audit"]["path"]
        cls.policy_path = os.path.join(h.tmp, "main", "policy.json")
        cls.sl = h.sluice("main", doc)
        cls.tok = h.token("model")

    # -- helpers -----------------------------------------------------------

    def ucurl(self, host, addr, port=443, tok=None, path="/v1/messages",
              timeout=10):
        """curl in sbx as nobody, no proxy variables, host resolved to
        addr; returns (rc, status, body)."""
        d = tempfile.mkdtemp(dir=self.pub, prefix="c-")
        os.chown(d, NOBODY, NOBODY)
        out = os.path.join(d, "body")
        argv = ["curl", "-sS", "--max-time", str(timeout),
                "--cacert", self.ca_pem, "-o", out, "-w", "%{http_code}",
                "--resolve", "%s:%d:%s" % (host, port,
                                           "[%s]" % addr if ":" in addr
                                           else addr),
                "-H", "Content-Type: application/json",
                "--data-binary", '{"m":1}']
        if tok is not None:
            argv += ["-H", "x-api-key: " + tok]
        argv.append("https://%s:%d%s" % (host, port, path))
        env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"}
        p = subprocess.run(ns_exec(self.h.sbx, as_nobody(argv)),
                           capture_output=True, timeout=timeout + 10,
                           env=env)
        try:
            with open(out, "rb") as f:
                body = f.read()
        except FileNotFoundError:
            body = b""
        code = p.stdout.decode().strip()
        return p.returncode, int(code) if code.isdigit() else 0, body, \
            p.stderr.decode("utf-8", "replace")

    def audit(self):
        try:
            with open(self.audit_path, encoding="utf-8") as f:
                return [json.loads(x) for x in f if x.strip()]
        except FileNotFoundError:
            return []

    def audit_wait(self, mark, event, pred=lambda e: True, timeout=5.0):
        got = []

        def have():
            got[:] = [e for e in self.audit()[mark:]
                      if e.get("event") == event and pred(e)]
            return got
        st.wait_until(have, timeout)
        return got

    def assertRefused(self, host, addr, reason, detail, listener="tp"):
        m = self.up.log.mark()
        a = len(self.audit())
        rc, status, body, err = self.ucurl(host, addr, tok=self.tok)
        self.assertNotEqual(rc, 0, (status, body, err))
        self.assertEqual(status, 0, body)
        lines = self.audit_wait(a, "connect.tunnel",
                                lambda e: e.get("detail") == detail)
        self.assertEqual(len(lines), 1, self.audit()[a:])
        e = lines[0]
        self.assertEqual(e["decision"], "deny", e)
        self.assertEqual(e["reason"], reason, e)
        self.assertEqual(e["listener"], listener, e)
        self.assertEqual(e["destination"],
                         "[%s]:443" % addr if ":" in addr else
                         "%s:443" % addr, e)
        self.assertNotIn("method", e)
        self.assertEqual([x for x in self.audit()[a:]
                          if x.get("event") == "http.request"], [])
        time.sleep(0.2)
        self.assertNothingUpstream(self.up, m, "for a refused connection")
        return e

    # -- tests -------------------------------------------------------------

    def test_01_ruleset(self):
        nft = subprocess.run(ns_exec(self.h.sbx, ["nft", "list", "table",
                                                  "inet", "sluicetp"]),
                             capture_output=True, text=True, check=True)
        uid = pwd.getpwnam(SLUICE_USER).pw_uid
        self.assertIn("\tchain transparent {\n"
                      "\t\ttype nat hook output priority -100; "
                      "policy accept;\n"
                      "\t\toif != \"lo\" meta skuid != %d tcp dport 443 "
                      "redirect to :%d\n\t}\n" % (uid, TP_PORT), nft.stdout)
        self.assertIn("ip daddr 127.0.0.1 tcp dport %d accept" % TP_PORT,
                      nft.stdout)
        self.assertIn("ip6 daddr ::1 tcp dport %d accept" % TP_PORT,
                      nft.stdout)
        show = subprocess.run([ENV.bin, "netpolicy", "show", "-c",
                               self.policy_path], capture_output=True,
                              text=True)
        self.assertEqual(show.returncode, 0, show.stderr)
        self.assertIn("redirect to :%d" % TP_PORT, show.stdout)
        # The kernel's copy of the nat chain is the one sluice prints.
        def chain(text):
            i = text.index("\tchain transparent {")
            return text[i:text.index("\t}\n", i)]
        self.assertEqual(chain(nft.stdout), chain(show.stdout))
        ver = subprocess.run(ns_exec(self.h.sbx, [
            ENV.bin, "netpolicy", "verify", "-c", self.policy_path]),
            capture_output=True, text=True)
        self.assertEqual(ver.returncode, 0, ver.stdout + ver.stderr)

    def test_02_redirected_intercepted_injected(self):
        m = self.up.log.mark()
        a = len(self.audit())
        rc, status, body, err = self.ucurl(MODEL, self.h.topo.v4(2),
                                           tok=self.tok)
        self.assertEqual(rc, 0, err)
        self.assertEqual(status, 200, body)
        reqs = self.up.log.wait_for(m, "request")
        self.assertEqual(len(reqs), 1, reqs)
        req = reqs[0]
        self.assertEqual(req["method"], "POST")
        self.assertEqual(req["target"], "/v1/messages")
        self.assertEqual(header_values(req, "x-api-key"), [self.secret])
        for n, v in req["headers"]:
            self.assertNotIn(self.tok, v, "run token in %s upstream" % n)
        hr = self.audit_wait(a, "http.request")
        self.assertEqual(len(hr), 1, hr)
        self.assertEqual(hr[0]["decision"], "allow", hr)
        self.assertEqual(hr[0]["via"], "connect", hr)
        self.assertEqual(hr[0]["listener"], "tp", hr)
        self.assertEqual(hr[0]["route"], "model", hr)
        ct = self.audit_wait(a, "connect.tunnel")
        self.assertEqual(len(ct), 1, ct)
        self.assertEqual(ct[0]["decision"], "allow", ct)
        self.assertEqual(ct[0]["intercept"], "tls", ct)
        self.assertEqual(ct[0]["host"], "%s:443" % MODEL, ct)
        self.assertEqual(ct[0]["destination"],
                         "%s:443" % self.h.topo.v4(2), ct)
        self.assertEqual(ct[0]["requests"], 1, ct)

    def test_03_no_token_inside(self):
        # No CONNECT, so no token stands in: the inner request needs one.
        m = self.up.log.mark()
        rc, status, body, err = self.ucurl(MODEL, self.h.topo.v4(2))
        self.assertEqual(rc, 0, err)
        self.assertEqual(status, 401, body)
        self.assertEqual(json.loads(body)["error"], "token_missing")
        time.sleep(0.2)
        self.assertNothingUpstream(self.up, m, "without a token")

    def test_04_sni_not_intercepted(self):
        self.assertRefused("other.test", self.h.topo.v4(2),
                           "route_not_found", "sni_not_intercepted")

    def test_05_destination_mismatch(self):
        e = self.assertRefused(MODEL, self.h.topo.v4(3),
                               "destination_denied", "destination_mismatch")
        self.assertEqual(e["host"], "%s:443" % MODEL, e)

    def test_06_not_tls(self):
        m = self.up.log.mark()
        a = len(self.audit())
        p = subprocess.run(ns_exec(self.h.sbx, as_nobody([
            "curl", "-sS", "--max-time", "5",
            "http://%s:443/v1/messages" % self.h.topo.v4(2)])),
            capture_output=True, timeout=15)
        self.assertNotEqual(p.returncode, 0)
        lines = self.audit_wait(a, "connect.tunnel",
                                lambda e: e.get("detail") == "not_tls")
        self.assertEqual(len(lines), 1, self.audit()[a:])
        self.assertEqual(lines[0]["reason"], "client_tls_error")
        self.assertEqual(lines[0]["decision"], "deny")
        self.assertNothingUpstream(self.up, m, "for plain HTTP")

    def test_07_intercept_listener(self):
        m = self.up.log.mark()
        a = len(self.audit())
        rc, status, body, err = self.ucurl(MODEL, "127.0.0.1",
                                           tok=self.tok)
        self.assertEqual(rc, 0, err)
        self.assertEqual(status, 200, body)
        req = self.up.log.wait_for(m, "request")[0]
        self.assertEqual(header_values(req, "x-api-key"), [self.secret])
        hr = self.audit_wait(a, "http.request")
        self.assertEqual(hr[0]["listener"], "ic", hr)
        ct = self.audit_wait(a, "connect.tunnel")
        self.assertEqual(ct[0]["listener"], "ic", ct)
        self.assertEqual(ct[0]["decision"], "allow", ct)
        self.assertNotIn("destination", ct[0])
        # Another SNI on the intercept listener: the handshake fails.
        m = self.up.log.mark()
        a = len(self.audit())
        rc, status, body, err = self.ucurl("other.test", "127.0.0.1",
                                           tok=self.tok)
        self.assertNotEqual(rc, 0, (status, body))
        ct = self.audit_wait(a, "connect.tunnel")
        self.assertEqual(len(ct), 1, ct)
        self.assertEqual(ct[0]["reason"], "client_tls_error", ct)
        self.assertEqual(ct[0]["detail"], "sni_mismatch", ct)
        self.assertEqual(ct[0]["listener"], "ic", ct)
        self.assertNothingUpstream(self.up, m, "for another SNI")

    def test_08_direct_to_transparent(self):
        # Reached directly, not redirected: no original destination.
        a = len(self.audit())
        p = subprocess.run(ns_exec(self.h.sbx, as_nobody([
            "curl", "-sS", "--max-time", "5", "--cacert", self.ca_pem,
            "--resolve", "%s:%d:127.0.0.1" % (MODEL, TP_PORT),
            "https://%s:%d/v1/messages" % (MODEL, TP_PORT)])),
            capture_output=True, timeout=15)
        self.assertNotEqual(p.returncode, 0)
        lines = self.audit_wait(a, "connect.tunnel")
        self.assertEqual(len(lines), 1, lines)
        self.assertEqual(lines[0]["reason"], "destination_denied", lines)
        self.assertEqual(lines[0]["detail"], "no_original_destination")

    def test_09_sni_missing(self):
        # curl sends no SNI for an address literal.
        m = self.up.log.mark()
        a = len(self.audit())
        p = subprocess.run(ns_exec(self.h.sbx, as_nobody([
            "curl", "-sS", "--max-time", "5", "--cacert", self.ca_pem,
            "https://%s/v1/messages" % self.h.topo.v4(2)])),
            capture_output=True, timeout=15)
        self.assertNotEqual(p.returncode, 0)
        lines = self.audit_wait(a, "connect.tunnel",
                                lambda e: e.get("detail") == "sni_missing")
        self.assertEqual(len(lines), 1, self.audit()[a:])
        self.assertEqual(lines[0]["reason"], "route_not_found")
        self.assertNothingUpstream(self.up, m, "without SNI")

    def raw_refused(self, data, detail, reason, within):
        m = self.up.log.mark()
        a = len(self.audit())
        t0 = time.monotonic()
        with self.h.raw(443, host=self.h.topo.v4(2)) as c:
            c.send(data)
            self.assertClosed(c, timeout=within)
        self.assertLess(time.monotonic() - t0, within)
        lines = self.audit_wait(a, "connect.tunnel",
                                lambda e: e.get("detail") == detail)
        self.assertEqual(len(lines), 1, self.audit()[a:])
        self.assertEqual(lines[0]["reason"], reason, lines)
        self.assertEqual(lines[0]["decision"], "deny", lines)
        self.assertNothingUpstream(self.up, m, "for " + detail)

    def test_10_malformed_clienthello(self):
        # A handshake record whose message is not a ClientHello.
        self.raw_refused(b"\x16\x03\x01\x00\x05\x02\x00\x00\x01\x00",
                         "clienthello_malformed", "client_tls_error", 2.0)

    def test_11_clienthello_timeout(self):
        # Half a record header, then nothing: header_timeout_ms (3 s).
        self.raw_refused(b"\x16\x03", "timeout", "client_tls_error", 6.0)

    def test_12_ipv6(self):
        m = self.up.log.mark()
        a = len(self.audit())
        v6 = self.h.topo.v6(2)
        rc, status, body, err = self.ucurl(MODEL, v6, tok=self.tok)
        self.assertEqual(rc, 0, err)
        self.assertEqual(status, 200, body)
        req = self.up.log.wait_for(m, "request")[0]
        self.assertEqual(header_values(req, "x-api-key"), [self.secret])
        ct = self.audit_wait(a, "connect.tunnel")
        self.assertEqual(ct[0]["listener"], "tp6", ct)
        self.assertEqual(ct[0]["destination"], "[%s]:443" % v6, ct)
        # Another IPv6 address of the up namespace's prefix: refused.
        self.assertRefused(MODEL, self.h.topo.v6(9), "destination_denied",
                           "destination_mismatch", listener="tp6")

    def test_13_trickled_clienthello(self):
        # A ClientHello sent a few bytes at a time is still read whole,
        # and the handshake answered: a ServerHello comes back.
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(self.ca_pem)
        ctx.set_alpn_protocols(["http/1.1"])
        inc, outg = ssl.MemoryBIO(), ssl.MemoryBIO()
        obj = ctx.wrap_bio(inc, outg, server_hostname=MODEL)
        try:
            obj.do_handshake()
        except ssl.SSLWantReadError:
            pass
        hello = outg.read()
        self.assertGreater(len(hello), 100)
        with self.h.raw(443, host=self.h.topo.v4(2)) as c:
            for i in range(0, len(hello), 7):
                c.send(hello[i:i + 7])
                time.sleep(0.003)
            c.sock.settimeout(5)
            first = c.sock.recv(5)
        self.assertEqual(first[:2], b"\x16\x03", first)


if __name__ == "__main__":
    st.main()
