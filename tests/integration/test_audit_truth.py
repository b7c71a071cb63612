"""The audit log tells how an exchange really ended (DESIGN.md "Audit
log"): `decision` says whether anything was let out, `reason` how it
ended. A tunnel cut by its token's expiry or revocation, a response cut by
the upstream, a client that goes away before or during the response, and
a shutdown whose drain time ran out each get their own reason, never
`ok`. And the keep-alive race: a request sent on a pooled upstream
connection that the upstream closes at that moment is retried once on a
fresh connection when that cannot repeat what the upstream did.

Topology: netns sbx (sluice, clients) <-veth-> netns up: fakeup over TLS
on 198.18.45.2:443 and :8443, plain HTTP on 198.18.45.2:80."""

import os
import socket
import sys
import time

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "lib"))

import sluicetest as st  # noqa: E402
from sluicetest import policy as pol  # noqa: E402
from sluicetest.http import build_request  # noqa: E402
import token_audit_harness as tah  # noqa: E402


class TestAuditTruth(st.ProxyTestCase):
    TAG = "truth"
    X = 45

    @classmethod
    def build(cls):
        h, t = cls.h, cls.h.topo
        cert, key = h.ca.issue("up", ["DNS:up.test", "IP:" + t.v4(2)])
        cls.up = h.fakeup("tls", ["%s:443" % t.v4(2), "%s:8443" % t.v4(2)],
                           cert, key)
        cls.plain = h.fakeup("plain", ["%s:80" % t.v4(2)])
        ca = h.ca.cert
        prefixes = ["/v1/"]
        routes = [
            pol.route("model", ["model.test"], "https://%s/" % t.v4(2), ca,
                      methods=("GET", "POST"), prefixes=prefixes),
            pol.route("retry", ["retry.test"], "https://%s:8443/" % t.v4(2), ca,
                      methods=("GET", "POST", "PUT"), prefixes=prefixes),
            pol.route("tunnel", ["tunnel.test"], "http://%s:80/" % t.v4(2),
                      None, methods=("GET",), prefixes=prefixes,
                      allow_plaintext=True),
        ]
        listeners = [pol.forward("fwd", "127.0.0.1:3128")]
        doc = h.policy("main", listeners, routes)
        doc["tokens"]["leeway_s"] = 0
        cls.doc = doc
        cls.sl = h.sluice("main", doc)
        cls.audit = doc["audit"]["path"]
        cls.admin = doc["admin"]["socket"]
        cls.tunnel_host = "%s:80" % t.v4(2)

    # -- helpers -----------------------------------------------------------

    def line(self, pred, what, timeout=8.0):
        ev = tah.wait_events(self.audit, lambda evs: any(map(pred, evs)),
                             timeout=timeout)
        ev = [e for e in ev if pred(e)]
        self.assertEqual(len(ev), 1, "audit lines for %s: %r" % (what, ev))
        return ev[0]

    def req(self, aud, method, path, body=b"", tok=None):
        tok = tok or self.h.token(aud)
        return build_request(method, "http://%s.test%s" % (aud, path),
                             aud + ".test",
                             ["Proxy-Authorization: Bearer " + tok], body)

    def open_tunnel(self, tok):
        c = self.h.raw(3128)
        c.send(tah.connect_req(self.tunnel_host,
                               ["Proxy-Authorization: Bearer " + tok]))
        r = c.read_response(head_only=True)
        self.assertEqual(r.status, 200, r)
        return c

    def tunnel_get(self, c, n):
        c.send(("GET /v1/echo?n=%d HTTP/1.1\r\nHost: %s\r\n\r\n" % (
            n, self.tunnel_host)).encode(), ignore_errors=True)

    # -- tunnels cut by their token ----------------------------------------

    def test_tunnel_cut_by_expiry(self):
        tok = self.h.token("tunnel", ttl=2, jti="expiring-tunnel")
        c = self.open_tunnel(tok)
        try:
            r = None
            for i in range(40):
                self.tunnel_get(c, i)
                if c.closed(0.25):
                    break
                r = c.read_response(timeout=2.0)
                self.assertEqual(r.status, 200, r)
            self.assertTrue(c.closed(2.0), "the tunnel outlived its token")
        finally:
            c.close()
        e = self.line(lambda e: e.get("event") == "connect.tunnel" and
                      e.get("jti") == "expiring-tunnel", "the tunnel")
        self.assertEqual((e["decision"], e["reason"]),
                         ("allow", "token_expired"), e)

    def test_tunnel_cut_by_revocation(self):
        tok = self.h.token("tunnel", jti="revoked-tunnel")
        c = self.open_tunnel(tok)
        try:
            self.tunnel_get(c, 0)
            self.assertEqual(c.read_response().status, 200)
            out = tah.admin(self.admin, "revoke revoked-tunnel")
            self.assertNotIn("error", out)
            time.sleep(1.1)  # a tunnel re-checks at most once a second
            for i in range(1, 6):
                self.tunnel_get(c, i)
                if c.closed(0.5):
                    break
            self.assertTrue(c.closed(2.0), "a revoked tunnel stayed open")
        finally:
            c.close()
        e = self.line(lambda e: e.get("event") == "connect.tunnel" and
                      e.get("jti") == "revoked-tunnel", "the tunnel")
        self.assertEqual((e["decision"], e["reason"]),
                         ("allow", "token_revoked"), e)

    # -- exchanges cut -----------------------------------------------------

    def test_upstream_cuts_the_response(self):
        tok = self.h.token("model", jti="cut-response")
        with self.h.raw(3128) as c:
            c.send(self.req("model", "GET", "/v1/cut?bytes=4096", tok=tok))
            self.assertTrue(c.closed(5.0))
        e = self.line(lambda e: e.get("jti") == "cut-response",
                      "the cut response")
        self.assertEqual((e["decision"], e["reason"], e["status"]),
                         ("allow", "upstream_bad_response", 200), e)

    def test_client_closes_before_any_response(self):
        tok = self.h.token("model", jti="gone-before")
        m = self.up.log.mark()
        with self.h.raw(3128) as c:
            c.send(self.req("model", "GET", "/v1/hang", tok=tok))
            self.up.log.wait_for(m, "request")
        e = self.line(lambda e: e.get("jti") == "gone-before",
                      "the abandoned request")
        self.assertEqual((e["decision"], e["reason"]),
                         ("allow", "client_closed"), e)

    def test_client_resets_mid_response(self):
        tok = self.h.token("model", jti="gone-during")
        c = self.h.raw(3128)
        try:
            c.send(self.req("model", "GET", "/v1/stream?n=50&gap_ms=100",
                            tok=tok))
            r = c.read_response(head_only=True)
            self.assertEqual(r.status, 200, r)
            time.sleep(0.3)
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                              b"\x01\x00\x00\x00\x00\x00\x00\x00")
        finally:
            c.close()
        e = self.line(lambda e: e.get("jti") == "gone-during",
                      "the abandoned stream")
        self.assertEqual((e["decision"], e["reason"], e["status"]),
                         ("allow", "client_closed", 200), e)

    def test_drain_timeout_cuts_what_is_in_flight(self):
        doc = dict(self.doc)
        d = os.path.join(self.h.tmp, "drain")
        os.makedirs(d, mode=0o700, exist_ok=True)
        doc["audit"] = dict(doc["audit"], path=os.path.join(d, "audit.jsonl"))
        doc["admin"] = {"socket": os.path.join(d, "admin.sock")}
        doc["ready_file"] = os.path.join(d, "ready")
        doc["state_dir"] = os.path.join(d, "state")
        os.makedirs(doc["state_dir"], mode=0o700, exist_ok=True)
        doc["listeners"] = [pol.forward("fwd2", "127.0.0.1:3129")]
        doc["limits"] = dict(doc["limits"], drain_timeout_ms=500)
        s = tah.start_sluice(self.h, "drain", doc)
        tok = self.h.token("model", jti="drained")
        tok2 = self.h.token("model", jti="drained-stream")
        m = self.up.log.mark()
        c = self.h.raw(3129)
        c2 = self.h.raw(3129)
        try:
            # One request the upstream never answers, one stream whose
            # response began: at the deadline the first gets a 503
            # drain_timeout, the second is cut (its 200 was sent).
            c.send(self.req("model", "GET", "/v1/hang", tok=tok))
            c2.send(self.req("model", "GET",
                             "/v1/stream?n=3&gap_ms=20000", tok=tok2))
            self.assertEqual(c2.read_response(head_only=True).status, 200)
            self.up.log.wait_for(m, "request")
            tah.stop_clean(self, s)
            r = c.read_response(timeout=2.0)
            self.assertEqual(r.status, 503, r.raw[:300])
            self.assertIn(b"drain_timeout", r.body)
            self.assertEqual(r.header("Connection"), "close")
            rest = c2.buf
            try:
                while c2._fill(time.monotonic() + 2.0):
                    rest += c2.buf
                    c2.buf = b""
            except OSError:
                pass
            self.assertNotIn(b"HTTP/1.1 503", rest)
        finally:
            c.close()
            c2.close()
        ev = {e.get("jti"): e for e in tah.events(doc["audit"]["path"])
              if e.get("jti") in ("drained", "drained-stream")}
        self.assertEqual(len(ev), 2, ev)
        self.assertEqual((ev["drained"]["decision"], ev["drained"]["reason"],
                          ev["drained"]["status"]),
                         ("allow", "drain_timeout", 503), ev["drained"])
        e = ev["drained-stream"]
        self.assertEqual((e["decision"], e["reason"], e["status"]),
                         ("allow", "drain_timeout", 200), e)

    def test_denial_is_deny(self):
        """Control: a refusal is still deny with its reason."""
        with self.h.raw(3128) as c:
            r = c.request(self.req("model", "DELETE", "/v1/x"))
        self.assertEqual(r.status, 403)
        e = self.line(lambda e: e.get("event") == "http.request" and
                      e.get("method") == "DELETE", "the refusal")
        self.assertEqual((e["decision"], e["reason"]),
                         ("deny", "method_not_allowed"), e)

    # -- the keep-alive race -----------------------------------------------

    def requests_for(self, mark, target):
        return [e for e in self.up.log.since(mark, "request")
                if e["target"].startswith(target)]

    def test_reused_connection_closed_idempotent_is_retried(self):
        m = self.up.log.mark()
        with self.h.raw(3128) as c:
            r = c.request(self.req("retry", "GET", "/v1/echo"))
            self.assertEqual(r.status, 200, r)
            # The pooled connection is reused, and the upstream closes it
            # on this request without an answer.
            r = c.request(self.req("retry", "GET", "/v1/drop-reused"))
            self.assertEqual(r.status, 200, r)
        got = self.requests_for(m, "/v1/drop-reused")
        self.assertEqual(len(got), 2, got)
        self.assertNotEqual(got[0]["conn"], got[1]["conn"])

    def test_reused_connection_closed_post_is_not_repeated(self):
        m = self.up.log.mark()
        with self.h.raw(3128) as c:
            r = c.request(self.req("retry", "POST", "/v1/echo", b"{}"))
            self.assertEqual(r.status, 200, r)
            r = c.request(self.req("retry", "POST", "/v1/drop-reused",
                                   b'{"charge": 1}'))
        # The upstream had the whole POST: it might have acted on it.
        self.assertEqual(r.status, 502, r)
        self.assertEqual(len(self.requests_for(m, "/v1/drop-reused")), 1)


if __name__ == "__main__":
    st.main()
