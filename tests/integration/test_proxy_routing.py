"""How a forward-proxy request selects its route (DESIGN.md "Requests and
routing"): several routes may share one upstream, and a request naming the
shared upstream host goes to the route whose audience the verified token
carries (none: token_wrong_audience), for absolute-form and CONNECT alike;
an absolute-form request to an upstream host selects its route on any
port, while a raw CONNECT needs the upstream's exact host and port.

Topology: netns sbx (sluice, curl) <-veth-> netns up (fakeup on
198.18.47.2:443 as cp.test, fakeup on .3:443 as solo-up.test, DNS on .53).
"""

import json
import os
import sys

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "lib"))

import sluicetest as st  # noqa: E402
from sluicetest import policy as pol  # noqa: E402

FWD = "http://127.0.0.1:3128"


class TestRouting(st.ProxyTestCase):
    TAG = "route"
    X = 47
    UP_HOSTS = (2, 3, 53)

    @classmethod
    def build(cls):
        h, t = cls.h, cls.h.topo
        cert, key = h.ca.issue("cp", ["DNS:cp.test", "IP:" + t.v4(2)])
        solo_cert, solo_key = h.ca.issue("solo", ["DNS:solo-up.test"])
        cls.up = h.fakeup("cp", ["%s:443" % t.v4(2)], cert, key)
        cls.solo = h.fakeup("solo", ["%s:443" % t.v4(3)], solo_cert,
                            solo_key)
        h.dns_server({"cp.test": {"A": [t.v4(2)]},
                      "solo-up.test": {"A": [t.v4(3)]}})
        ca = h.ca.cert
        routes = [
            pol.route("aud-a", [], "https://cp.test/a-base", ca,
                      prefixes=["/v1/messages"]),
            pol.route("aud-b", [], "https://cp.test:443/b-base", ca,
                      prefixes=["/v1/messages", "/v1/b-only"]),
            pol.route("solo", ["solo.test"], "https://solo-up.test/s", ca),
        ]
        listeners = [pol.forward("fwd", "127.0.0.1:3128")]
        cls.doc = h.policy("main", listeners, routes)
        cls.sl = h.sluice("main", cls.doc)
        cls.tok_a = h.token("aud-a")
        cls.tok_b = h.token("aud-b")
        cls.tok_none = h.token("aud-c")

    def fwd(self, tok):
        return ["-x", FWD, "--proxy-header",
                "Proxy-Authorization: Bearer " + tok]

    def post(self, tok, url, extra=()):
        return self.h.curl(self.fwd(tok) + list(extra) + ["-d", "{}"], url)

    def assertRefused(self, r, reason, status=403, connect=False):
        got = r.connect_status if connect else r.status
        self.assertEqual(got, status, r)
        if not connect:
            self.assertEqual(r.header("Sluice-Deny"), reason, r)

    def audit(self):
        with open(self.doc["audit"]["path"], "rb") as f:
            return [json.loads(x) for x in f.read().split(b"\n") if x]

    def last_audit(self, event):
        evs = [e for e in self.audit() if e.get("event") == event]
        self.assertTrue(evs, "no %s audit line" % event)
        return evs[-1]

    def upstream_target(self, fakeup, mark):
        reqs = fakeup.log.wait_for(mark, "request")
        self.assertEqual(len(reqs), 1, reqs)
        return reqs[0]["target"]

    # -- routes sharing an upstream -----------------------------------------

    def test_shared_upstream_token_a(self):
        m = self.up.log.mark()
        r = self.post(self.tok_a, "http://cp.test/v1/messages")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(self.upstream_target(self.up, m),
                         "/a-base/v1/messages")
        self.assertEqual(self.last_audit("http.request")["route"], "aud-a")

    def test_shared_upstream_token_b(self):
        m = self.up.log.mark()
        r = self.post(self.tok_b, "http://cp.test:443/v1/messages")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(self.upstream_target(self.up, m),
                         "/b-base/v1/messages")
        self.assertEqual(self.last_audit("http.request")["route"], "aud-b")

    def test_shared_upstream_route_rules_follow_audience(self):
        # /v1/b-only is aud-b's alone: the audience picked the route, so a
        # token for aud-a does not get there through aud-b's prefixes.
        m = self.up.log.mark()
        r = self.post(self.tok_b, "http://cp.test/v1/b-only/x")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(self.upstream_target(self.up, m),
                         "/b-base/v1/b-only/x")
        m = self.up.log.mark()
        r = self.post(self.tok_a, "http://cp.test/v1/b-only/x")
        self.assertRefused(r, "path_not_allowed")
        self.assertNothingUpstream(self.up, m)

    def test_shared_upstream_token_for_neither(self):
        m = self.up.log.mark()
        r = self.post(self.tok_none, "http://cp.test/v1/messages")
        self.assertRefused(r, "token_wrong_audience", 407)
        self.assertNothingUpstream(self.up, m)

    def test_shared_upstream_token_failure_first(self):
        m = self.up.log.mark()
        r = self.post(self.tok_a[:-4] + "AAAA", "http://cp.test/v1/messages")
        self.assertRefused(r, "token_bad_signature", 407)
        self.assertNothingUpstream(self.up, m)

    def test_connect_to_shared_upstream(self):
        for tok, aud in ((self.tok_a, "aud-a"), (self.tok_b, "aud-b")):
            with self.subTest(aud=aud):
                m = self.up.log.mark()
                r = self.h.curl(self.fwd(tok) + [
                    "-p", "--cacert", self.h.ca.cert, "-d", "{}"],
                    "https://cp.test/v1/messages")
                self.assertEqual(r.connect_status, 200, r)
                self.assertEqual(r.status, 200, r)
                # A raw tunnel: the client's own path, no route prefix.
                self.assertEqual(self.upstream_target(self.up, m),
                                 "/v1/messages")
                ev = st.wait_until(
                    lambda: [e for e in self.audit()
                             if e.get("event") == "connect.tunnel" and
                             e.get("route") == aud], 5)
                self.assertTrue(ev, "no connect.tunnel line for %s" % aud)

    def test_connect_to_shared_upstream_token_for_neither(self):
        m = self.up.log.mark()
        r = self.h.curl(self.fwd(self.tok_none) + [
            "-p", "--cacert", self.h.ca.cert, "-d", "{}"],
            "https://cp.test/v1/messages")
        self.assertRefused(r, "token_wrong_audience", 407, connect=True)
        self.assertNothingUpstream(self.up, m)
        ev = self.last_audit("connect.tunnel")
        self.assertEqual(ev["reason"], "token_wrong_audience", ev)

    # -- the upstream host on any port --------------------------------------

    def test_absolute_form_upstream_host_port_80(self):
        # curl -x ... http://solo-up.test/v1/messages for an https upstream
        m = self.solo.log.mark()
        r = self.post(self.h.token("solo"),
                      "http://solo-up.test/v1/messages")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(self.upstream_target(self.solo, m),
                         "/s/v1/messages")

    def test_absolute_form_upstream_host_other_port(self):
        m = self.solo.log.mark()
        r = self.post(self.h.token("solo"),
                      "http://solo-up.test:8080/v1/messages")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(self.upstream_target(self.solo, m),
                         "/s/v1/messages")

    def test_connect_needs_upstream_port(self):
        m = self.solo.log.mark()
        with self.h.raw(3128) as c:
            c.send(("CONNECT solo-up.test:80 HTTP/1.1\r\n"
                    "Host: solo-up.test:80\r\n"
                    "Proxy-Authorization: Bearer %s\r\n\r\n" %
                    self.h.token("solo")).encode())
            resp = c.read_response()
        self.assertEqual(resp.status, 403, resp)
        self.assertEqual(resp.header("Sluice-Deny"), "route_not_found")
        self.assertNothingUpstream(self.solo, m)


if __name__ == "__main__":
    st.main()
