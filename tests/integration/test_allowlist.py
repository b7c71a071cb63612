#!/usr/bin/env python3
"""Allowlist routes (docs/config.md "Allowing more than the model"): a
route with "upstream": {"mode": "as_requested"} dials the host a request
names when it matches the route's hosts (exact names and "*.suffix"
wildcards), each dial checked as an upstream's is.

Names live under alw.test on the test's own DNS server: pypi.alw.test
(plain fakeup on .2:80) and anything under *.files.alw.test (TLS fakeup on
.3:443) are allowlisted; other.alw.test (.4) is not, though plain.files.alw.test (also .4) is. Allowlisted names
that resolve to 10.0.0.1, 169.254.169.254 or ::ffff:127.0.0.1 must be
refused with destination_denied before any connect: the sandbox side has
no route to the first two, and a listener of the test on 127.0.0.1:443
in sbx would see a dial to the third. Every other address is in
198.18.0.0/15.

A third sluice (127.0.0.1:3131) intercepts its allowlist route: it is the
TLS server of each CONNECT under *.files.alw.test (a leaf of its own CA
for the host asked), checks every request inside (method, path, token)
and is the TLS client of the host, verified against the system store
(SSL_CERT_FILE names the test CA for it, as an operator's store would
hold a public CA). rogue.files.alw.test (.4:443) shows a certificate of
another CA and is refused with upstream_tls_error.

  sbx: sluice 127.0.0.1:3128, curl, trap 127.0.0.1:443  --veth--  up:
       fakeup 198.18.X.2:80 (plain), 198.18.X.3:443 (TLS), .4:80, DNS .53
"""

import json
import os
import re
import socket
import sys
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "lib"))

import sluicetest as st  # noqa: E402
from sluicetest import policy as pol  # noqa: E402
from sluicetest.daemons import header_values  # noqa: E402
from sluicetest.netns import entered  # noqa: E402

FWD = "http://127.0.0.1:3128"
REPORT = "http://127.0.0.1:3129"
ICPT = "http://127.0.0.1:3131"


def allowlist_route(audience, hosts, ports=(80, 443), **extra):
    r = {"audience": audience, "hosts": list(hosts),
         "upstream": {"mode": "as_requested", "ports": list(ports)}}
    r.update(extra)
    return r


class Trap:
    """A listener in sbx on 127.0.0.1:443 that records every accept."""

    def __init__(self, ns):
        with entered(ns):
            self.s = socket.socket()
            self.s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.s.bind(("127.0.0.1", 443))
            self.s.listen(16)
        self.accepts = []
        st.CLEANUP.push(self.s.close)
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while True:
            try:
                c, peer = self.s.accept()
            except OSError:
                return
            self.accepts.append(peer)
            c.close()


class TestAllowlist(st.ProxyTestCase):
    TAG = "allow"
    X = 113
    UP_HOSTS = (2, 3, 4, 53)

    @classmethod
    def build(cls):
        h, t = cls.h, cls.h.topo
        cert, key = h.ca.issue("cdn", ["DNS:cdn.files.alw.test",
                                       "DNS:a.b.files.alw.test"])
        cls.pypi = h.fakeup("pypi", ["%s:80" % t.v4(2)])
        cls.cdn = h.fakeup("cdn", ["%s:443" % t.v4(3)], cert, key)
        cls.other = h.fakeup("other", ["%s:80" % t.v4(4)])
        rogue_ca = st.CA(h.tmp, "rogue")
        rcert, rkey = rogue_ca.issue("rogue", ["DNS:rogue.files.alw.test"])
        cls.rogue = h.fakeup("rogue", ["%s:443" % t.v4(4)], rcert, rkey)
        h.dns_server({
            "pypi.alw.test": {"A": [t.v4(2)]},
            "cdn.files.alw.test": {"A": [t.v4(3)]},
            "a.b.files.alw.test": {"A": [t.v4(3)]},
            "files.alw.test": {"A": [t.v4(3)]},
            "other.alw.test": {"A": [t.v4(4)]},
            "plain.files.alw.test": {"A": [t.v4(4)]},
            "rogue.files.alw.test": {"A": [t.v4(4)]},
            "ten.alw.test": {"A": ["10.0.0.1"]},
            "meta.alw.test": {"A": ["169.254.169.254"]},
            "mapped.alw.test": {"AAAA": ["::ffff:127.0.0.1"]},
        })
        cls.trap = Trap(h.sbx)
        routes = [allowlist_route("pkgs", [
            "pypi.alw.test", "*.files.alw.test", "ten.alw.test",
            "meta.alw.test", "mapped.alw.test"])]
        cls.doc = h.policy("main", [pol.forward("fwd", "127.0.0.1:3128")],
                           routes)
        cls.sl = h.sluice("main", cls.doc)
        cls.tok = h.token("pkgs")
        cls.tok_other = h.token("model")
        # Report mode: only pypi.alw.test is listed; the rest is reported.
        cls.rdoc = h.policy("report", [pol.forward("fwd", REPORT[7:])],
                            [allowlist_route("pkgs", ["pypi.alw.test"])])
        cls.rdoc["enforce"] = "report"
        cls.rsl = h.sluice("report", cls.rdoc)
        # Interception on an allowlist route; the test CA as the system
        # store (OpenSSL's SSL_CERT_FILE).
        cls.icpt_ca = os.path.join(h.tmp, "icpt-ca.pem")
        cls.idoc = h.policy("icpt", [pol.forward("fwd", ICPT[7:])],
                            [allowlist_route(
                                "pkgs", ["*.files.alw.test"], ports=(443,),
                                connect={"enabled": True,
                                         "intercept": True})])
        cls.idoc["intercept"] = {"ca": "ephemeral",
                                 "ca_cert_out": cls.icpt_ca, "ca_days": 1,
                                 "leaf_days": 1, "max_leaves": 8}
        cls.isl = h.sluice("icpt", cls.idoc,
                           env=dict(os.environ, SSL_CERT_FILE=h.ca.cert))

    def proxy(self, tok):
        return ["-x", FWD, "--proxy-header",
                "Proxy-Authorization: Bearer " + tok]

    def audit(self):
        with open(self.doc["audit"]["path"], "rb") as f:
            return [json.loads(x) for x in f.read().split(b"\n") if x]

    def last_audit(self, event, pred=lambda e: True, timeout=5.0):
        """The last line of event matching pred, waited for: a tunnel's
        line comes when sluice sees it close, and the audit file is
        written by sluice's writer thread, not before the response."""
        deadline = time.monotonic() + st.ENV.slow(timeout)
        while True:
            evs = [e for e in self.audit()
                   if e.get("event") == event and pred(e)]
            if evs or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertTrue(evs, "no %s audit line" % event)
        return evs[-1]

    # -- allowed ---------------------------------------------------------

    def test_get_exact_host(self):
        """npm-style: a plain GET with the token in Authorization; the
        registry sees the request as asked and never the token."""
        m = self.pypi.log.mark()
        r = self.h.curl(["-x", FWD, "-H", "Authorization: Bearer " +
                         self.tok], "http://pypi.alw.test/simple/pip/?x=1")
        self.assertEqual(r.status, 200, r)
        req = self.pypi.log.wait_for(m, "request")[0]
        self.assertEqual(req["method"], "GET")
        self.assertEqual(req["target"], "/simple/pip/?x=1")
        self.assertEqual(header_values(req, "Host"), ["pypi.alw.test"])
        self.assertEqual(header_values(req, "Authorization"), [])
        self.assertEqual(header_values(req, "Proxy-Authorization"), [])
        a = self.last_audit("http.request")
        self.assertEqual((a["decision"], a["reason"], a["route"]),
                         ("allow", "ok", "pkgs"))

    def test_get_proxy_authorization(self):
        m = self.pypi.log.mark()
        r = self.h.curl(self.proxy(self.tok) + ["-I"],
                        "http://PYPI.alw.test./simple/")
        self.assertEqual(r.status, 200, r)
        req = self.pypi.log.wait_for(m, "request")[0]
        self.assertEqual(req["method"], "HEAD")
        self.assertEqual(header_values(req, "Authorization"), [])
        self.assertEqual(header_values(req, "Proxy-Authorization"), [])

    def test_connect_wildcard(self):
        """pip-style: CONNECT to a host under *.files.alw.test and TLS
        end to end (sluice sees only bytes)."""
        for host in ("cdn.files.alw.test", "a.b.files.alw.test"):
            m = self.cdn.log.mark()
            r = self.h.curl(self.proxy(self.tok) + [
                "--cacert", self.h.ca.cert],
                "https://%s/packages/x.whl" % host)
            self.assertEqual(r.connect_status, 200, r)
            self.assertEqual(r.status, 200, r)
            req = self.cdn.log.wait_for(m, "request")[0]
            self.assertEqual(req["target"], "/packages/x.whl")
            a = self.last_audit("connect.tunnel",
                                lambda e, h=host: e.get("host") ==
                                h + ":443")
            self.assertEqual((a["decision"], a["route"], a["host"]),
                             ("allow", "pkgs", host + ":443"))

    def test_pool_per_destination(self):
        """Two allowlisted hosts on one client connection: each request
        reaches its own host (the pool is keyed by host:port)."""
        m2, m4 = self.pypi.log.mark(), self.other.log.mark()
        r = self.h.curl(self.proxy(self.tok),
                        ["http://pypi.alw.test/a",
                         "http://plain.files.alw.test/b",
                         "http://pypi.alw.test/c"])
        self.assertEqual(r.status, 200, r)
        self.assertEqual([q["target"] for q in
                          self.pypi.log.wait_for(m2, "request", 2)],
                         ["/a", "/c"])
        got = self.other.log.wait_for(m4, "request")
        self.assertEqual([q["target"] for q in got], ["/b"])
        self.assertEqual(header_values(got[0], "Host"),
                         ["plain.files.alw.test"])

    # -- intercepted -----------------------------------------------------

    def icurl(self, args, urls, tok=None):
        return self.h.curl(["-x", ICPT, "--proxy-header",
                            "Proxy-Authorization: Bearer " +
                            (tok or self.tok), "--cacert", self.icpt_ca] +
                           list(args), urls)

    def iaudit(self, pred, timeout=5.0):
        deadline = time.monotonic() + st.ENV.slow(timeout)
        while True:
            with open(self.idoc["audit"]["path"], "rb") as f:
                evs = [json.loads(x) for x in f.read().split(b"\n") if x]
            got = [e for e in evs if pred(e)]
            if got or time.monotonic() > deadline:
                return got
            time.sleep(0.05)

    def test_intercept_allowlisted(self):
        """pip-style through an intercepting allowlist route: sluice
        terminates TLS with a leaf for each host asked, checks each
        request inside, and dials the host over TLS it verifies; the host
        never sees the run token."""
        for host in ("cdn.files.alw.test", "a.b.files.alw.test"):
            m = self.cdn.log.mark()
            r = self.icurl([], "https://%s/packages/x.whl?v=1" % host)
            self.assertEqual(r.connect_status, 200, r)
            self.assertEqual(r.status, 200, r)
            req = self.cdn.log.wait_for(m, "request")[0]
            self.assertEqual(req["method"], "GET")
            self.assertEqual(req["target"], "/packages/x.whl?v=1")
            self.assertEqual(header_values(req, "Host"), [host])
            self.assertEqual(header_values(req, "Authorization"), [])
            self.assertEqual(header_values(req, "Proxy-Authorization"), [])
            a = self.iaudit(lambda e, h=host: e.get("event") ==
                            "http.request" and e.get("host") == h)
            self.assertTrue(a, "no http.request line for %s" % host)
            self.assertEqual((a[-1]["decision"], a[-1]["route"],
                              a[-1].get("via")), ("allow", "pkgs",
                                                  "connect"), a[-1])

    def test_intercept_checks_each_request(self):
        """Inside the tunnel each request is checked: a POST (the route
        allows GET and HEAD) is refused and nothing reaches the host."""
        m = self.cdn.log.mark()
        r = self.icurl(["-X", "POST", "-d", "x=1"],
                       "https://cdn.files.alw.test/upload")
        self.assertEqual(r.connect_status, 200, r)
        self.assertDenied(r, 403, "method_not_allowed")
        time.sleep(0.2)
        self.assertNothingUpstream(self.cdn, m, "a refused POST")

    def test_intercept_verifies_host(self):
        """The host's certificate must chain to the system store under
        the host's name: rogue's (another CA) is refused, and no request
        is sent to it."""
        m = self.rogue.log.mark()
        r = self.icurl([], "https://rogue.files.alw.test/x")
        self.assertEqual(r.connect_status, 200, r)
        self.assertDenied(r, 502, "upstream_tls_error")
        time.sleep(0.2)
        # It was dialled (its handshake failed): no request reached it.
        self.assertEqual(self.rogue.log.since(m, "request"), [],
                         "a request reached an unverified host")
        self.assertTrue(self.rogue.log.since(m, "accept"),
                        "rogue was never dialled: the test checks nothing")

    def test_intercept_token_required(self):
        """The CONNECT's token stands in for the requests inside; with
        another audience's token they are refused."""
        m = self.cdn.log.mark()
        r = self.icurl([], "https://cdn.files.alw.test/x",
                       tok=self.tok_other)
        self.assertNotEqual(r.status, 200, r)
        time.sleep(0.2)
        self.assertNothingUpstream(self.cdn, m, "a token of another route")

    # -- refused ---------------------------------------------------------

    def test_unlisted_host(self):
        m = self.other.log.mark()
        r = self.h.curl(self.proxy(self.tok), "http://other.alw.test/")
        self.assertEqual(r.status, 403, r)
        self.assertEqual(r.header("Sluice-Deny"), "route_not_found", r)
        r = self.h.curl(self.proxy(self.tok) + ["--cacert", self.h.ca.cert],
                        "https://other.alw.test/")
        self.assertEqual(r.connect_status, 403, r)
        self.assertNothingUpstream(self.other, m)

    def test_wildcard_not_apex(self):
        m = self.cdn.log.mark()
        r = self.h.curl(self.proxy(self.tok) + ["--cacert", self.h.ca.cert],
                        "https://files.alw.test/")
        self.assertEqual(r.connect_status, 403, r)
        self.assertNothingUpstream(self.cdn, m)

    def test_port_not_listed(self):
        m = self.pypi.log.mark()
        r = self.h.curl(self.proxy(self.tok), "http://pypi.alw.test:8080/")
        self.assertEqual(r.header("Sluice-Deny"), "route_not_found", r)
        self.assertNothingUpstream(self.pypi, m)

    def test_token_required(self):
        m = self.pypi.log.mark()
        r = self.h.curl(["-x", FWD], "http://pypi.alw.test/simple/")
        self.assertEqual(r.status, 407, r)
        r = self.h.curl(self.proxy(self.tok_other),
                        "http://pypi.alw.test/simple/")
        self.assertEqual(r.header("Sluice-Deny"), "token_wrong_audience", r)
        self.assertNothingUpstream(self.pypi, m)

    def test_method_default_get_head(self):
        m = self.pypi.log.mark()
        r = self.h.curl(self.proxy(self.tok) + ["-d", "x"],
                        "http://pypi.alw.test/upload")
        self.assertEqual(r.header("Sluice-Deny"), "method_not_allowed", r)
        self.assertNothingUpstream(self.pypi, m)

    def test_private_destinations(self):
        """Names that resolve to private addresses: refused before any
        connect (nothing reaches the trap on 127.0.0.1:443)."""
        before = len(self.trap.accepts)
        for host in ("ten.alw.test", "meta.alw.test", "mapped.alw.test"):
            r = self.h.curl(self.proxy(self.tok), "http://%s/latest" % host)
            self.assertEqual(r.status, 403, (host, r))
            self.assertEqual(r.header("Sluice-Deny"), "destination_denied",
                             (host, r))
            r = self.h.curl(self.proxy(self.tok), "https://%s/" % host)
            self.assertEqual(r.connect_status, 403, (host, r))
            a = self.last_audit("connect.tunnel")
            self.assertEqual((a["decision"], a["reason"]),
                             ("deny", "destination_denied"), (host, a))
        self.assertEqual(self.trap.accepts[before:], [])

    # -- report mode -----------------------------------------------------

    def report_audit(self, event):
        with open(self.rdoc["audit"]["path"], "rb") as f:
            evs = [json.loads(x) for x in f.read().split(b"\n") if x]
        return [e for e in evs if e.get("event") == event]

    def test_report_warns_at_start(self):
        self.assertIn('warning: enforce is "report"', self.rsl.stderr())
        self.assertNotIn("enforce", self.sl.stderr())

    def test_report_unknown_host(self):
        """A host no route lists goes through, audited as "report" with
        the reason it would have had; the token stays home."""
        m = self.other.log.mark()
        r = self.h.curl(["-x", REPORT, "-H", "Authorization: Bearer " +
                         self.tok], "http://other.alw.test/who?q=1")
        self.assertEqual(r.status, 200, r)
        req = self.other.log.wait_for(m, "request")[0]
        self.assertEqual(req["target"], "/who?q=1")
        self.assertEqual(header_values(req, "Authorization"), [])
        a = self.report_audit("http.request")[-1]
        self.assertEqual((a["decision"], a["reason"], a["host"], a["path"]),
                         ("report", "route_not_found", "other.alw.test",
                          "/who"))
        # CONNECT too, and a method the route does not allow.
        m = self.cdn.log.mark()
        r = self.h.curl(["-x", REPORT, "--proxy-header",
                         "Proxy-Authorization: Bearer " + self.tok,
                         "--cacert", self.h.ca.cert],
                        "https://cdn.files.alw.test/x")
        self.assertEqual((r.connect_status, r.status), (200, 200), r)
        a = self.report_audit("connect.tunnel")[-1]
        self.assertEqual((a["decision"], a["reason"], a["host"]),
                         ("report", "route_not_found",
                          "cdn.files.alw.test:443"))
        r = self.h.curl(["-x", REPORT, "--proxy-header",
                         "Proxy-Authorization: Bearer " + self.tok,
                         "-d", "x"], "http://pypi.alw.test/upload")
        self.assertEqual(r.status, 200, r)
        a = self.report_audit("http.request")[-1]
        self.assertEqual((a["decision"], a["reason"], a["route"]),
                         ("report", "method_not_allowed", "pkgs"))

    def test_report_still_refuses(self):
        """Token failures and private destinations are refused in report
        mode too."""
        m = self.other.log.mark()
        bad = self.tok[:-3] + ("AAA" if not self.tok.endswith("AAA")
                               else "BBB")
        r = self.h.curl(["-x", REPORT, "--proxy-header",
                         "Proxy-Authorization: Bearer " + bad],
                        "http://other.alw.test/")
        self.assertEqual(r.status, 407, r)
        self.assertEqual(r.header("Sluice-Deny"), "token_bad_signature", r)
        r = self.h.curl(["-x", REPORT], "http://other.alw.test/")
        self.assertEqual(r.status, 407, r)
        self.assertNothingUpstream(self.other, m)
        before = len(self.trap.accepts)
        for host in ("meta.alw.test", "mapped.alw.test", "ten.alw.test"):
            r = self.h.curl(["-x", REPORT, "--proxy-header",
                             "Proxy-Authorization: Bearer " + self.tok],
                            "http://%s/" % host)
            self.assertEqual(r.header("Sluice-Deny"), "destination_denied",
                             (host, r))
            a = self.report_audit("http.request")[-1]
            self.assertEqual((a["decision"], a["reason"]),
                             ("deny", "destination_denied"))
        self.assertEqual(self.trap.accepts[before:], [])

    def test_report_suggest(self):
        """audit suggest on the report log prints routes that sluice check
        accepts and that, loaded with report mode off, allow the same
        requests."""
        proxy = ["-x", REPORT, "--proxy-header",
                 "Proxy-Authorization: Bearer " + self.tok]
        r = self.h.curl(proxy, ["http://other.alw.test/who/a",
                                "http://OTHER.alw.test./who/b?c=d"])
        self.assertEqual(r.status, 200, r)
        r = self.h.curl(proxy + ["--cacert", self.h.ca.cert],
                        ["https://cdn.files.alw.test/x",
                         "https://a.b.files.alw.test/y"])
        self.assertEqual((r.connect_status, r.status), (200, 200), r)
        p = st.run([st.ENV.bin, "audit", "suggest", "--audience", "drafted",
                    self.rdoc["audit"]["path"]], check=False)
        self.assertEqual(p.returncode, 0, p.stderr)
        routes = json.loads(p.stdout)
        by_host = {tuple(r["hosts"]): r for r in routes}
        self.assertIn(("other.alw.test",), by_host, routes)
        o = by_host[("other.alw.test",)]
        self.assertEqual((o["methods"], o["path_prefixes"],
                          o["upstream"]["ports"], o["connect"]["enabled"]),
                         (["GET"], ["/who"], [80], False), o)
        self.assertRegex(o["comment"], r"[0-9]+ request\(s\) from 1 run")
        self.assertTrue(by_host[("cdn.files.alw.test",)]["connect"]
                        ["enabled"])
        # --wildcards: the two names under files.alw.test become one.
        p = st.run([st.ENV.bin, "audit", "suggest", "--wildcards",
                    self.rdoc["audit"]["path"]], check=False)
        self.assertEqual(p.returncode, 0, p.stderr)
        hosts = [r["hosts"] for r in json.loads(p.stdout)]
        self.assertIn(["*.files.alw.test"], hosts)
        self.assertNotIn(["cdn.files.alw.test"], hosts)
        # Pasted into routes, with report mode off.
        doc = self.h.policy("drafted", [pol.forward("fwd", "127.0.0.1:3130")],
                            self.rdoc["routes"] + routes)
        self.assertNotIn("enforce", doc)
        c = self.check(doc, "drafted")
        self.assertEqual(c.returncode, 0, c.stderr)
        self.h.sluice("drafted", doc)
        tok = self.h.token("drafted")
        proxy = ["-x", "http://127.0.0.1:3130", "--proxy-header",
                 "Proxy-Authorization: Bearer " + tok]
        r = self.h.curl(proxy, "http://other.alw.test/who/a")
        self.assertEqual(r.status, 200, r)
        r = self.h.curl(proxy + ["--cacert", self.h.ca.cert],
                        "https://a.b.files.alw.test/y")
        self.assertEqual((r.connect_status, r.status), (200, 200), r)
        r = self.h.curl(proxy, "http://other.alw.test/elsewhere")
        self.assertEqual(r.header("Sluice-Deny"), "path_not_allowed", r)
        # The parent writes the engine's audit lines a moment after the
        # responses: wait for the third.
        def decisions():
            with open(doc["audit"]["path"]) as f:
                lines = [json.loads(x) for x in f if x.strip()]
            return [e["decision"] for e in lines
                    if e["event"] in ("http.request", "connect.tunnel")]
        st.wait_until(lambda: len(decisions()) >= 3, st.ENV.slow(5.0), 0.05)
        self.assertEqual(decisions(), ["allow", "allow", "deny"])

    def test_suggest_refuses_broken_chain(self):
        path = os.path.join(self.h.tmp, "broken.jsonl")
        with open(self.rdoc["audit"]["path"]) as f:
            lines = f.readlines()
        self.assertGreater(len(lines), 2)
        lines[1] = lines[1].replace('"seq":2', '"seq":7')
        with open(path, "w") as f:
            f.writelines(lines)
        p = st.run([st.ENV.bin, "audit", "suggest", path], check=False)
        self.assertEqual(p.returncode, 1, p.stdout)
        self.assertEqual(p.stdout, "")

    def check(self, doc, name):
        path = self.h.write_policy(name, doc)
        return st.run([st.ENV.bin, "check", "-c", path], check=False)

    def test_check_warnings(self):
        """sluice check warns (stderr, exit 0) about report mode, public
        suffix wildcards, a TCP metrics listener and allow_private on an
        allowlist route; a plain allowlist policy gets none of these."""
        p = self.check(self.doc, "check-plain")
        self.assertEqual(p.returncode, 0, p.stderr)
        err = p.stderr
        for word in ("enforce", "public suffix", "metrics.listen",
                     "allow_private"):
            self.assertNotIn(word, err)
        doc = json.loads(json.dumps(self.rdoc))
        doc["routes"].append(allowlist_route("wide", ["*.com", "*.co.uk",
                                                      "*.example.com"]))
        doc["routes"][0]["upstream"]["allow_private"] = True
        doc["metrics"] = {"listen": "127.0.0.1:9109"}
        p = self.check(doc, "check-risky")
        self.assertEqual(p.returncode, 0, p.stderr)
        err = p.stderr
        self.assertIn('warning: enforce is "report"', err)
        self.assertIn('routes[1].hosts[0] "*.com" covers a whole public '
                      'suffix', err)
        self.assertIn('routes[1].hosts[1] "*.co.uk" covers', err)
        self.assertNotIn("*.example.com", err)
        self.assertIn("metrics.listen 127.0.0.1:9109 is a TCP address", err)
        self.assertIn('routes[0] "pkgs": upstream.allow_private on an '
                      'allowlist route', err)


class TestAllowlistSidecar(st.ProxyTestCase):
    """Sidecar mode: the kernel rules stay default-deny. A dial to an
    allowlisted host puts its address (and port) in the dynamic set before
    the connect, with the DNS TTL raised to the 60 s floor, and the element
    is gone once that runs out; a private answer adds nothing."""
    TAG = "allowsc"
    X = 114
    UP_HOSTS = (2, 53)

    @classmethod
    def build(cls):
        h, t = cls.h, cls.h.topo
        cls.pypi = h.fakeup("pypi", ["%s:80" % t.v4(2)])
        cls.dns = st.DnsServer(h.up, t.v4(53), {
            "pypi.alw.test": {"A": [t.v4(2)]},
            "meta.alw.test": {"A": ["169.254.169.254"]},
        }, ttl=1)
        doc = h.policy("sc", [pol.forward("fwd", "127.0.0.1:808")],
                       [allowlist_route("pkgs", ["pypi.alw.test",
                                                 "meta.alw.test"],
                                        ports=[80])])
        doc["user"] = "daemon"
        doc["netpolicy"] = {"mode": "sidecar", "table": "sluiceallow",
                            "allow_loopback": True,
                            "resolvers": [t.v4(53)], "log_group": 11,
                            "flush_on_exit": True}
        cls.sl = h.sluice("sc", doc)
        cls.tok = h.token("pkgs")

    def upstream_set(self):
        return st.run(st.ns_exec(self.h.sbx, [
            "nft", "list", "set", "inet", "sluiceallow", "upstream4"]),
            check=False).stdout

    def test_dynamic_set(self):
        t = self.h.topo
        elem = "%s . 80" % t.v4(2)
        self.assertNotIn(elem, self.upstream_set())
        proxy = ["-x", "http://127.0.0.1:808", "--proxy-header",
                 "Proxy-Authorization: Bearer " + self.tok]
        m = self.pypi.log.mark()
        r = self.h.curl(proxy, "http://pypi.alw.test/simple/")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(len(self.pypi.log.wait_for(m, "request")), 1)
        listing = self.upstream_set()
        self.assertRegex(listing, re.escape(elem) + r" timeout 1m")
        # Only sluice's uid may use it: the sandbox's own dial is dropped.
        r = self.h.curl(["--connect-timeout", "2"],
                        "http://%s/direct" % t.v4(2), timeout=5)
        self.assertNotEqual(r.status, 200, r)
        # A private answer is refused and never reaches the set.
        r = self.h.curl(proxy, "http://meta.alw.test/latest/")
        self.assertEqual(r.header("Sluice-Deny"), "destination_denied", r)
        self.assertNotIn("169.254", self.upstream_set())
        # The element expires with its timeout (60 s floor; the DNS TTL
        # was 1 s and nothing asked again).
        self.assertTrue(st.wait_until(
            lambda: elem not in self.upstream_set(), 75, step=1.0),
            self.upstream_set())


if __name__ == "__main__":
    st.main()
