"""Upstream failures (DESIGN.md "Requests and routing", "Run tokens"
responses): nothing listening or no DNS answer → 502 upstream_unreachable;
a certificate not signed by the route's ca_file, a name mismatch, or an
SPKI pin mismatch → 502 upstream_tls_error (a correct pin passes); no
response in time → 504 upstream_timeout; a malformed response → 502
upstream_bad_response.

Topology: netns sbx (sluice, clients) <-veth-> netns up: fakeup on
198.18.5.2:443 (good certificate), 198.18.5.2:4444 (good CA, wrong
names), 198.18.5.3:443 (another CA); port 81 dropped by an nftables rule
inside the up namespace (connect timeout); DNS on .53."""

import os
import shutil
import sys
import time

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "lib"))

import sluicetest as st  # noqa: E402
from sluicetest import policy as pol  # noqa: E402
from sluicetest.http import build_request  # noqa: E402

RESPONSE_TIMEOUT_MS = 1000
CONNECT_TIMEOUT_MS = 1000
BAD_KINDS = ("clte", "lf", "fold", "twocl", "status", "garbage")


class TestUpstream(st.ProxyTestCase):
    TAG = "upstream"
    X = 5

    @classmethod
    def build(cls):
        h, t = cls.h, cls.h.topo
        cert, key = h.ca.issue("model-up", [
            "DNS:model-up.test", "DNS:pin-up.test", "DNS:pin-good-up.test",
            "IP:" + t.v4(2)])
        wrong_cert, wrong_key = h.ca.issue("wrong-name", [
            "DNS:other.test", "IP:" + t.v4(99)])
        rogue = st.CA(h.tmp, "rogue")
        rogue_cert, rogue_key = rogue.issue("rogue-up", [
            "DNS:rogue-up.test", "IP:" + t.v4(3)])
        cls.up = h.fakeup("main", ["%s:443" % t.v4(2)], cert, key)
        cls.wrong = h.fakeup("wrong", ["%s:4444" % t.v4(2)], wrong_cert,
                             wrong_key)
        cls.rogue = h.fakeup("rogue", ["%s:443" % t.v4(3)], rogue_cert,
                             rogue_key)
        h.dns_server({n: {"A": [t.v4(2)]} for n in (
            "model-up.test", "pin-up.test", "pin-good-up.test")})
        cls.have_nft = shutil.which("nft") is not None
        if cls.have_nft:
            # Only inside the test's own upstream namespace.
            st.run(st.ns_exec(h.up, ["nft", "add table inet slt; "
                   "add chain inet slt in { type filter hook input "
                   "priority 0; policy accept; }; "
                   "add rule inet slt in tcp dport 81 drop"]))
        ca = h.ca.cert
        prefixes = ["/v1/messages", "/v1/hang", "/v1/bad", "/v1/stream",
                    "/v1/fields"]
        routes = [
            pol.route("good", ["good.test"], "https://model-up.test/",
                      ca, prefixes=prefixes),
            pol.route("down", ["down.test"], "https://%s:9/" % t.v4(2), ca),
            pol.route("nx", ["nx.test"], "https://nx-up.test/", ca),
            pol.route("ctimeout", ["ctimeout.test"],
                      "https://%s:81/" % t.v4(2), ca),
            pol.route("badca", ["badca.test"], "https://%s/" % t.v4(3), ca),
            pol.route("badname-ip", ["badname-ip.test"],
                      "https://%s:4444/" % t.v4(2), ca),
            pol.route("badname-dns", ["badname-dns.test"],
                      "https://model-up.test:4444/", ca),
            pol.route("pinbad", ["pinbad.test"], "https://pin-up.test/", ca,
                      pins=[st.spki_pin(rogue_cert)]),
            pol.route("pingood", ["pingood.test"],
                      "https://pin-good-up.test/", ca,
                      pins=[st.spki_pin(rogue_cert), st.spki_pin(cert)]),
        ]
        listeners = [pol.forward("fwd", "127.0.0.1:3128"),
                     pol.reverse("rev", "127.0.0.1:8080", "good"),
                     pol.reverse("rev-badca", "127.0.0.1:8081", "badca")]
        limits = {"upstream_response_timeout_ms": RESPONSE_TIMEOUT_MS,
                  "connect_timeout_ms": CONNECT_TIMEOUT_MS}
        cls.sl = h.sluice("main", h.policy("main", listeners, routes,
                                           limits))

    def fwd(self, aud, path="/v1/messages", timeout=10):
        tok = self.h.token(aud)
        t0 = time.monotonic()
        with self.h.raw(3128) as c:
            r = c.request(build_request(
                "POST", "http://%s.test%s" % (aud, path), aud + ".test",
                ["Proxy-Authorization: Bearer " + tok], b"{}"),
                timeout=timeout)
        r.elapsed = time.monotonic() - t0
        return r

    def test_control_good(self):
        m = self.up.log.mark()
        r = self.fwd("good")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(len(self.up.log.wait_for(m, "request")), 1)

    # -- unreachable -------------------------------------------------------

    def test_nothing_listening(self):
        self.assertDenied(self.fwd("down"), 502, "upstream_unreachable")

    def test_no_dns_answer(self):
        self.assertDenied(self.fwd("nx"), 502, "upstream_unreachable")

    def test_connect_timeout(self):
        if not self.have_nft:
            self.skipTest("nft is not installed")
        r = self.fwd("ctimeout")
        self.assertDenied(r, 504, "upstream_timeout")
        self.assertGreater(r.elapsed, CONNECT_TIMEOUT_MS / 1000.0 * 0.8)
        self.assertLess(r.elapsed, CONNECT_TIMEOUT_MS / 1000.0 + 4)

    # -- TLS ---------------------------------------------------------------

    def test_certificate_from_another_ca(self):
        m = self.rogue.log.mark()
        self.assertDenied(self.fwd("badca"), 502, "upstream_tls_error")
        with self.h.raw(8081) as c:
            r = c.request(build_request(
                "POST", "/v1/messages", "127.0.0.1:8081",
                ["Authorization: Bearer " + self.h.token("badca")], b"{}"))
        self.assertDenied(r, 502, "upstream_tls_error")
        self.assertEqual(self.rogue.log.since(m, ("head", "request")), [])

    def test_certificate_name_mismatch(self):
        for aud in ("badname-ip", "badname-dns"):
            with self.subTest(route=aud):
                m = self.wrong.log.mark()
                self.assertDenied(self.fwd(aud), 502, "upstream_tls_error")
                self.assertEqual(self.wrong.log.since(m, ("head", "request")),
                                 [])

    def test_pin_mismatch_even_after_pooled_use(self):
        # A connection verified for another route to the same address must
        # not carry a request for a pinned route.
        self.assertEqual(self.fwd("good").status, 200)
        m = self.up.log.mark()
        self.assertDenied(self.fwd("pinbad"), 502, "upstream_tls_error")
        self.assertEqual(self.up.log.since(m, ("head", "request")), [])

    def test_pin_match_passes(self):
        m = self.up.log.mark()
        r = self.fwd("pingood")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(len(self.up.log.wait_for(m, "request")), 1)

    # -- response ----------------------------------------------------------

    def test_response_timeout(self):
        m = self.up.log.mark()
        r = self.fwd("good", "/v1/hang")
        self.assertDenied(r, 504, "upstream_timeout")
        self.assertGreater(r.elapsed, RESPONSE_TIMEOUT_MS / 1000.0 * 0.8)
        self.assertLess(r.elapsed, RESPONSE_TIMEOUT_MS / 1000.0 + 4)
        # The hung upstream connection is dropped, not pooled.
        hung = {e["conn"] for e in self.up.log.since(m, "request")}
        self.assertTrue(st.wait_until(
            lambda: hung <= {e["conn"] for e in
                             self.up.log.since(m, "close")}, 3),
            "the timed-out upstream connection was kept")

    def test_response_timeout_reverse(self):
        with self.h.raw(8080) as c:
            r = c.request(build_request(
                "POST", "/v1/hang", "127.0.0.1:8080",
                ["Authorization: Bearer " + self.h.token("good")], b"{}"),
                timeout=10)
        self.assertDenied(r, 504, "upstream_timeout")

    def test_stream_longer_than_response_timeout(self):
        # Events every 300 ms for 1.8 s in all: the response timeout is for
        # an upstream that says nothing, not a cap on a live stream.
        tok = self.h.token("good")
        rc, lines, err = self.h.curl_stream(
            ["-x", "http://127.0.0.1:3128", "--proxy-header",
             "Proxy-Authorization: Bearer " + tok, "-d", "{}"],
            "http://good.test/v1/stream?n=7&gap_ms=300")
        self.assertEqual(rc, 0, err)
        self.assertEqual(len([l for _, l in lines
                              if l.startswith(b"data:")]), 7)

    def test_malformed_responses(self):
        for kind in BAD_KINDS:
            with self.subTest(kind=kind):
                self.assertDenied(self.fwd("good", "/v1/bad?kind=" + kind),
                                  502, "upstream_bad_response")

    def test_response_fields_up_to_the_parser_array(self):
        # sluice parses a response head into an array of 1000 fields:
        # Content-Length and 999 more reach the client whole and in
        # order; one field more is a malformed response.
        r = self.fwd("good", "/v1/fields?n=999")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.body, b"ok")
        self.assertEqual([n for n, _ in r.headers if n.startswith("X-F")],
                         ["X-F%d" % i for i in range(999)])
        self.assertDenied(self.fwd("good", "/v1/fields?n=1000"), 502,
                          "upstream_bad_response")

    def test_malformed_chunked_response_body(self):
        # The head is valid, the body's framing is not: a streaming proxy
        # may already have sent the head, so either a 502 or a response
        # cut short (and the connection closed) is right; a complete
        # response is not.
        tok = self.h.token("good")
        with self.h.raw(3128) as c:
            c.send(build_request(
                "POST", "http://good.test/v1/bad?kind=chunk", "good.test",
                ["Proxy-Authorization: Bearer " + tok], b"{}"))
            try:
                r = c.read_response(timeout=5)
            except st.Closed:
                return
            if r.status == 502:
                self.assertDenied(r, 502, "upstream_bad_response")
                return
            self.assertFalse(r.complete, r)
            self.assertTrue(c.closed(2.0))

    def test_exit_clean_after_failed_dns(self):
        # A DNS lookup that failed must leave nothing behind that the
        # shutdown trips over: SIGTERM afterwards still exits 0.
        h = self.h
        doc = h.policy("dns-exit", [pol.forward("fwd", "127.0.0.1:3138")], [
            pol.route("nx", ["nx.test"], "https://nx-up.test/", h.ca.cert),
            pol.route("good", ["good.test"], "https://model-up.test/",
                      h.ca.cert, prefixes=["/v1/messages", "/v1/bad"]),
            pol.route("down", ["down.test"],
                      "https://%s:9/" % h.topo.v4(2), h.ca.cert)])
        s = h.sluice("dns-exit", doc)
        seq = [("good", "/v1/bad?kind=" + k) for k in BAD_KINDS]
        seq += [("nx", "/v1/messages"), ("down", "/v1/messages")]
        for aud, path in seq:
            tok = h.token(aud)
            with h.raw(3138) as c:
                c.request(build_request(
                    "POST", "http://%s.test%s" % (aud, path), aud + ".test",
                    ["Proxy-Authorization: Bearer " + tok], b"{}"))
        self.assertEqual(s.stop(), 0, s.stderr()[-500:])

    def test_still_serving_after_failures(self):
        self.fwd("down")
        self.fwd("badca")
        self.assertEqual(self.fwd("good").status, 200)


if __name__ == "__main__":
    st.main()
