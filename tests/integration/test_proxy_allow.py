"""Allowed calls through the forward listener (absolute-form, CONNECT) and
the reverse listener, and what the upstream receives (DESIGN.md "Requests
and routing": path prefix, Host, injected headers, hop-by-hop headers,
Authorization forwarded unchanged); SSE event by event; keep-alive reuse on
both legs; bodies streamed both ways; the ready file.

Topology: netns sbx (sluice, curl) <-veth-> netns up (fakeup on
198.18.1.2:443 and [2001:2:0:1::2]:443, keep-alive fakeups on .3 and .4,
DNS on .53)."""

import hashlib
import time
import os
import secrets
import sys

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "lib"))

import sluicetest as st  # noqa: E402
from sluicetest import header_values, policy as pol  # noqa: E402
from sluicetest.http import build_request  # noqa: E402

FWD = "http://127.0.0.1:3128"
HOP_BY_HOP = ("Proxy-Authorization", "Keep-Alive", "TE", "Trailer",
              "Proxy-Connection", "Upgrade", "X-Hop")


def pattern(n, off=0):
    return bytes(97 + (off + i) % 26 for i in range(n))


class TestAllow(st.ProxyTestCase):
    TAG = "allow"
    X = 1
    UP_HOSTS = (2, 3, 4, 53)

    @classmethod
    def build(cls):
        h, t = cls.h, cls.h.topo
        cert, key = h.ca.issue("model-up", [
            "DNS:model-up.test", "DNS:v6name-up.test", "IP:" + t.v4(2),
            "IP:" + t.v6(2)])
        aux_cert, aux_key = h.ca.issue("aux", ["IP:" + t.v4(3),
                                               "IP:" + t.v4(4)])
        cls.up = h.fakeup("main", ["%s:443" % t.v4(2),
                                   "[%s]:443" % t.v6(2)], cert, key)
        cls.ka1 = h.fakeup("ka1", ["%s:443" % t.v4(3)], aux_cert, aux_key)
        cls.ka2 = h.fakeup("ka2", ["%s:443" % t.v4(4)], aux_cert, aux_key)
        h.dns_server({"model-up.test": {"A": [t.v4(2)]},
                      "v6name-up.test": {"AAAA": [t.v6(2)]}})
        cls.secret = "cred-" + secrets.token_hex(16)
        cred = h.secret_value("cred", cls.secret)
        ca = h.ca.cert
        prefixes = ["/v1/messages", "/v1/stream", "/v1/big"]
        routes = [
            pol.route("model", ["model.test"], "https://model-up.test/base",
                      ca, prefixes=prefixes,
                      headers=[("X-Sandbox-Credential", cred)]),
            pol.route("ip", ["ip.test"], "https://%s/ipbase" % t.v4(2), ca),
            pol.route("v6", ["v6.test"], "https://[%s]/v6base" % t.v6(2),
                      ca),
            pol.route("v6name", ["v6name.test"],
                      "https://v6name-up.test/v6n", ca),
            pol.route("ka1", ["ka1.test"], "https://%s" % t.v4(3), ca),
            pol.route("ka2", ["ka2.test"], "https://%s" % t.v4(4), ca),
        ]
        listeners = [
            pol.forward("fwd", "127.0.0.1:3128"),
            pol.reverse("rev", "127.0.0.1:8080", "model"),
            pol.reverse("rev-ka2", "127.0.0.1:8082", "ka2"),
        ]
        cls.policy_doc = h.policy("main", listeners, routes)
        cls.sl = h.sluice("main", cls.policy_doc)
        cls.tok = h.token("model")

    def fwd_args(self, tok=None):
        return ["-x", FWD, "--proxy-header",
                "Proxy-Authorization: Bearer " + (tok or self.tok)]

    def one_request(self, fakeup, mark):
        reqs = fakeup.log.wait_for(mark, "request")
        self.assertEqual(len(reqs), 1, "upstream requests: %r" % (reqs,))
        return reqs[0]

    def assertForwardedHeaders(self, req, host="model-up.test",
                               injected=True):
        self.assertEqual(header_values(req, "Host"), [host])
        if injected:
            self.assertEqual(header_values(req, "X-Sandbox-Credential"),
                             [self.secret])
        else:
            self.assertEqual(header_values(req, "X-Sandbox-Credential"), [])
        for name in HOP_BY_HOP:
            self.assertEqual(header_values(req, name), [],
                             "%s reached the upstream" % name)
        for v in header_values(req, "Connection"):
            self.assertNotIn("x-hop", v.lower())

    # -- start-up ----------------------------------------------------------

    def test_ready_file_has_pid(self):
        with open(self.policy_doc["ready_file"]) as f:
            self.assertEqual(f.read().strip(), str(self.sl.pid))

    # -- forward listener: absolute-form -----------------------------------

    def test_forward_absolute_form(self):
        m = self.up.log.mark()
        body = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'
        r = self.h.curl(self.fwd_args() + [
            "-H", "Content-Type: application/json",
            "-H", "X-Sandbox-Credential: forged-by-sandbox",
            "-H", "Connection: X-Hop", "-H", "X-Hop: 1",
            "-H", "Keep-Alive: timeout=5", "-H", "TE: trailers",
            "-H", "Trailer: X-T", "-H", "Proxy-Connection: keep-alive",
            "--data-binary", body],
            "http://model.test/v1/messages?q=1&r=%2F..")
        self.assertEqual(r.status, 200, r)
        echo = r.json()
        self.assertEqual(echo["path"], "/base/v1/messages")
        req = self.one_request(self.up, m)
        self.assertEqual(req["method"], "POST")
        self.assertEqual(req["target"], "/base/v1/messages?q=1&r=%2F..")
        self.assertEqual(req["version"], "HTTP/1.1")
        self.assertForwardedHeaders(req)
        self.assertEqual(header_values(req, "Content-Type"),
                         ["application/json"])
        self.assertEqual(req["body_bytes"], len(body))
        self.assertEqual(req["body_sha256"], hashlib.sha256(body).hexdigest())

    def test_forward_basic_carrier(self):
        # HTTPS_PROXY=http://run:<jwt>@host:port style (DESIGN "Carriers").
        m = self.up.log.mark()
        r = self.h.curl(["-x", "http://run:%s@127.0.0.1:3128" % self.tok,
                         "-d", "{}"], "http://model.test/v1/messages")
        self.assertEqual(r.status, 200, r)
        req = self.one_request(self.up, m)
        self.assertForwardedHeaders(req)

    def test_forward_authorization_unchanged(self):
        m = self.up.log.mark()
        r = self.h.curl(self.fwd_args() + [
            "-H", "Authorization: Bearer " + self.tok, "-d", "{}"],
            "http://model.test/v1/messages")
        self.assertEqual(r.status, 200, r)
        req = self.one_request(self.up, m)
        self.assertEqual(header_values(req, "Authorization"),
                         ["Bearer " + self.tok])
        self.assertForwardedHeaders(req)

    def test_forward_ipv6_upstream(self):
        m = self.up.log.mark()
        r = self.h.curl(self.fwd_args(self.h.token("v6")) + ["-d", "{}"],
                        "http://v6.test/v1/messages")
        self.assertEqual(r.status, 200, r)
        req = self.one_request(self.up, m)
        self.assertEqual(req["target"], "/v6base/v1/messages")
        self.assertEqual(header_values(req, "Host"),
                         ["[%s]" % self.h.topo.v6(2)])
        acc = [e for e in self.up.log.since(m, "accept")
               if e["conn"] == req["conn"]]
        # A reused pooled connection has no new accept; a new one must be
        # on the IPv6 address.
        for e in acc:
            self.assertEqual(e["local"], "[%s]:443" % self.h.topo.v6(2))

    def test_forward_upstream_name_with_aaaa_only(self):
        m = self.up.log.mark()
        r = self.h.curl(self.fwd_args(self.h.token("v6name")) + ["-d", "{}"],
                        "http://v6name.test/v1/messages")
        self.assertEqual(r.status, 200, r)
        req = self.one_request(self.up, m)
        self.assertEqual(req["target"], "/v6n/v1/messages")
        self.assertEqual(header_values(req, "Host"), ["v6name-up.test"])
        self.assertIn(("v6name-up.test", 28), self.h.dns.queries)

    # -- forward listener: CONNECT -----------------------------------------

    def test_connect_tunnel_by_upstream_name(self):
        m = self.up.log.mark()
        r = self.h.curl(self.fwd_args() + [
            "-p", "--cacert", self.h.ca.cert, "-d", '{"x":1}'],
            "https://model-up.test/v1/messages")
        self.assertEqual(r.connect_status, 200, r)
        self.assertEqual(r.status, 200, r)
        hs = self.up.log.wait_for(m, "handshake")
        self.assertEqual([e["sni"] for e in hs], ["model-up.test"])
        req = self.one_request(self.up, m)
        # A raw tunnel carries the client's bytes: no prefix, no injection.
        self.assertEqual(req["target"], "/v1/messages")
        self.assertEqual(header_values(req, "Host"), ["model-up.test"])
        self.assertEqual(header_values(req, "X-Sandbox-Credential"), [])
        self.assertEqual(header_values(req, "Proxy-Authorization"), [])

    def test_connect_tunnel_by_upstream_ip(self):
        t = self.h.topo
        m = self.up.log.mark()
        r = self.h.curl(self.fwd_args(self.h.token("ip")) + [
            "-p", "--cacert", self.h.ca.cert, "-d", "{}"],
            "https://%s/v1/messages" % t.v4(2))
        self.assertEqual(r.connect_status, 200, r)
        self.assertEqual(r.status, 200, r)
        req = self.one_request(self.up, m)
        self.assertEqual(req["target"], "/v1/messages")
        self.assertEqual(header_values(req, "Host"), [t.v4(2)])

    # -- reverse listener --------------------------------------------------

    def test_reverse_origin_form(self):
        m = self.up.log.mark()
        body = b'{"stream":false}'
        r = self.h.curl(["-H", "Authorization: Bearer " + self.tok,
                         "-H", "Content-Type: application/json",
                         "--data-binary", body],
                        "http://127.0.0.1:8080/v1/messages?beta=true")
        self.assertEqual(r.status, 200, r)
        req = self.one_request(self.up, m)
        self.assertEqual(req["target"], "/base/v1/messages?beta=true")
        self.assertForwardedHeaders(req)
        self.assertEqual(header_values(req, "Authorization"),
                         ["Bearer " + self.tok])
        self.assertEqual(req["body_sha256"], hashlib.sha256(body).hexdigest())

    def test_reverse_replaces_forged_credential_any_case(self):
        m = self.up.log.mark()
        with self.h.raw(8080) as c:
            r = c.request(build_request(
                "POST", "/v1/messages", "127.0.0.1:8080",
                ["Authorization: Bearer " + self.tok,
                 "x-sandbox-credential: forged1",
                 "X-SANDBOX-CREDENTIAL: forged2"], b"{}"))
        self.assertEqual(r.status, 200, r)
        req = self.one_request(self.up, m)
        self.assertEqual(header_values(req, "X-Sandbox-Credential"),
                         [self.secret])

    def test_reverse_chunked_request_body(self):
        m = self.up.log.mark()
        chunks = [b"hello ", b"chunked ", b"world" * 100]
        body = b"".join(b"%x\r\n%s\r\n" % (len(x), x) for x in chunks)
        raw = build_request("POST", "/v1/messages", "127.0.0.1:8080",
                            ["Authorization: Bearer " + self.tok,
                             "Transfer-Encoding: chunked"], length=False)
        with self.h.raw(8080) as c:
            r = c.request(raw + body + b"0\r\n\r\n")
        self.assertEqual(r.status, 200, r)
        req = self.one_request(self.up, m)
        whole = b"".join(chunks)
        self.assertEqual(req["body_bytes"], len(whole))
        self.assertEqual(req["body_sha256"], hashlib.sha256(whole).hexdigest())

    def body_in_second_write(self, framing, body, wire, forward=False):
        """Warm the upstream pool with one request, then send the next
        request's head and body in two writes on a new client connection
        (what curl does for a file upload)."""
        if forward:
            port, target, host = 3128, "http://model.test/v1/messages", \
                "model.test"
            auth = "Proxy-Authorization: Bearer " + self.tok
        else:
            port, target, host = 8080, "/v1/messages", "127.0.0.1:8080"
            auth = "Authorization: Bearer " + self.tok
        with self.h.raw(port) as c:
            r = c.request(build_request("POST", target, host, [auth], b"{}"))
            self.assertEqual(r.status, 200, r)
        m = self.up.log.mark()
        with self.h.raw(port) as c:
            c.send(build_request("POST", target, host, [auth, framing],
                                 length=False))
            time.sleep(0.1)
            c.send(wire)
            r = c.read_response()
        self.assertEqual(r.status, 200, r)
        req = self.one_request(self.up, m)
        self.assertEqual(req["body_bytes"], len(body))
        self.assertEqual(req["body_sha256"], hashlib.sha256(body).hexdigest())

    def test_reverse_length_body_after_head_pooled_upstream(self):
        body = b'{"sent":"after the head"}' * 4
        self.body_in_second_write("Content-Length: %d" % len(body), body,
                                  body)

    def test_reverse_chunked_body_after_head_pooled_upstream(self):
        body = b'{"sent":"after the head"}'
        wire = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
        self.body_in_second_write("Transfer-Encoding: chunked", body, wire)

    def test_forward_length_body_after_head_pooled_upstream(self):
        body = b'{"sent":"after the head"}' * 4
        self.body_in_second_write("Content-Length: %d" % len(body), body,
                                  body, forward=True)

    def test_reverse_big_response(self):
        for q, n in (("bytes=3000000", 3000000),
                     ("bytes=1500000&chunked=1", 1500000)):
            r = self.h.curl(["-H", "Authorization: Bearer " + self.tok,
                             "-X", "POST"],
                            "http://127.0.0.1:8080/v1/big?" + q)
            self.assertEqual(r.status, 200, r)
            self.assertEqual(len(r.body), n)
            self.assertEqual(hashlib.sha256(r.body).digest(),
                             hashlib.sha256(pattern(n)).digest())

    def test_reverse_big_upload(self):
        data = os.urandom(2 * 1024 * 1024 + 7)
        path = os.path.join(self.h.tmp, "upload.bin")
        with open(path, "wb") as f:
            f.write(data)
        m = self.up.log.mark()
        r = self.h.curl(["-H", "Authorization: Bearer " + self.tok,
                         "--data-binary", "@" + path],
                        "http://127.0.0.1:8080/v1/messages")
        self.assertEqual(r.status, 200, r)
        req = self.one_request(self.up, m)
        self.assertEqual(req["body_bytes"], len(data))
        self.assertEqual(req["body_sha256"], hashlib.sha256(data).hexdigest())

    # -- server-sent events ------------------------------------------------

    def check_sse(self, args, url, n=5, gap_ms=300):
        rc, lines, err = self.h.curl_stream(args + ["-d", "{}"], url)
        self.assertEqual(rc, 0, err)
        data = [(t, l) for t, l in lines if l.startswith(b"data:")]
        self.assertEqual([l for _, l in data],
                         [b'data: {"i":%d}\n' % i for i in range(n)])
        times = [t for t, _ in data]
        gap = gap_ms / 1000.0
        # Event by event: each arrives about gap after the one before,
        # not all together at the end.
        for a, b in zip(times, times[1:]):
            self.assertGreater(b - a, gap * 0.5, "times %r" % (times,))
        self.assertGreater(times[-1] - times[0], (n - 1) * gap * 0.8,
                           "times %r" % (times,))

    def test_sse_forward(self):
        self.check_sse(self.fwd_args(),
                       "http://model.test/v1/stream?n=5&gap_ms=300")

    def test_sse_reverse(self):
        self.check_sse(["-H", "Authorization: Bearer " + self.tok],
                       "http://127.0.0.1:8080/v1/stream?n=5&gap_ms=300")

    # -- keep-alive --------------------------------------------------------

    def test_keepalive_forward_one_upstream_handshake(self):
        n = 5
        m = self.ka1.log.mark()
        urls = ["http://ka1.test/v1/messages?i=%d" % i for i in range(n)]
        r = self.h.curl(self.fwd_args(self.h.token("ka1")) + ["-d", "{}"],
                        urls)
        self.assertEqual([i.get("http_code") for i in r.info], [200] * n, r)
        self.assertEqual(sum(i.get("num_connects", 0) for i in r.info), 1,
                         "curl had to reconnect to sluice: %r" % (r.info,))
        reqs = self.ka1.log.wait_for(m, "request", n)
        self.assertEqual([q["target"] for q in reqs],
                         ["/v1/messages?i=%d" % i for i in range(n)])
        self.assertEqual(len(self.ka1.log.since(m, "handshake")), 1)
        self.assertEqual(len({q["conn"] for q in reqs}), 1)

    def test_keepalive_reverse_one_upstream_handshake(self):
        n = 5
        tok = self.h.token("ka2")
        m = self.ka2.log.mark()
        with self.h.raw(8082) as c:
            for i in range(n):
                r = c.request(build_request(
                    "POST", "/v1/messages?i=%d" % i, "127.0.0.1:8082",
                    ["Authorization: Bearer " + tok], b"{}"))
                self.assertEqual(r.status, 200, r)
        reqs = self.ka2.log.wait_for(m, "request", n)
        self.assertEqual(len(reqs), n)
        self.assertEqual(len(self.ka2.log.since(m, "handshake")), 1)
        self.assertEqual(len({q["conn"] for q in reqs}), 1)


if __name__ == "__main__":
    st.main()
