"""HTTP/1.1 strictness (DESIGN.md "HTTP/1.1 strictness", RFC 9112) with
byte-exact client input: each violation is a 400 bad_request and a closed
connection, with nothing sent upstream; header section over the limits is
431 headers_too_large, a body over max_body_bytes is 413 body_too_large,
both also closing the connection.

Topology: netns sbx (sluice, raw sockets) <-veth-> netns up (fakeup on
198.18.4.2:443, DNS on .53). Limits: 4096 header bytes, 20 header fields,
65536 body bytes."""

import os
import sys
import time

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "lib"))

import sluicetest as st  # noqa: E402
from sluicetest import policy as pol  # noqa: E402

MAX_HEADER_BYTES = 4096
MAX_HEADERS = 20
MAX_BODY = 65536

REV = "127.0.0.1:8080"


def head(lines):
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class TestStrict(st.ProxyTestCase):
    TAG = "strict"
    X = 4

    @classmethod
    def build(cls):
        h, t = cls.h, cls.h.topo
        cert, key = h.ca.issue("model-up", ["DNS:model-up.test",
                                            "IP:" + t.v4(2)])
        cls.up = h.fakeup("main", ["%s:443" % t.v4(2)], cert, key)
        h.dns_server({"model-up.test": {"A": [t.v4(2)]}})
        routes = [pol.route("model", ["model.test"],
                            "https://model-up.test/base", h.ca.cert)]
        listeners = [pol.forward("fwd", "127.0.0.1:3128"),
                     pol.reverse("rev", REV, "model")]
        limits = {"max_header_bytes": MAX_HEADER_BYTES,
                  "max_headers": MAX_HEADERS, "max_body_bytes": MAX_BODY,
                  "header_timeout_ms": 5000}
        cls.sl = h.sluice("main", h.policy("main", listeners, routes,
                                           limits))
        cls.tok = h.token("model")
        cls.auth = "Authorization: Bearer " + cls.tok
        cls.pauth = "Proxy-Authorization: Bearer " + cls.tok

    # -- helpers -----------------------------------------------------------

    def rq(self, first="POST /v1/messages HTTP/1.1", host="Host: " + REV,
           extra=(), body=b"{}", length=True):
        lines = [first]
        if host:
            lines.append(host)
        lines.append(self.auth)
        lines += list(extra)
        if length:
            lines.append("Content-Length: %d" % len(body))
        return head(lines) + body

    def fq(self, first, host="Host: model.test", extra=(), body=b"{}"):
        lines = [first]
        if host:
            lines.append(host)
        lines.append(self.pauth)
        lines += list(extra)
        lines.append("Content-Length: %d" % len(body))
        return head(lines) + body

    def exchange(self, port, data, timeout=5.0, check_closed=True):
        with self.h.raw(port) as c:
            c.send(data, ignore_errors=True)
            try:
                r = c.read_response(timeout=timeout)
            except st.Closed:
                self.fail("closed without a response to %r" % data[:200])
            closed = c.closed(2.0) if check_closed else None
        return r, closed

    def check_bad(self, port, data, status=400, reason="bad_request",
                  body_error=False):
        m = self.up.log.mark()
        r, closed = self.exchange(port, data)
        self.assertDenied(r, status, reason)
        self.assertTrue(closed, "connection left open after %d" % status)
        if body_error:
            self.assertNoCompleteRequest(self.up, m)
        else:
            time.sleep(0.05)
            self.assertNothingUpstream(self.up, m)

    def check_ok(self, port, data):
        m = self.up.log.mark()
        r, _ = self.exchange(port, data, check_closed=False)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(len(self.up.log.wait_for(m, "request")), 1)

    # -- controls: the same shapes, valid, pass ----------------------------

    def test_controls_pass(self):
        controls = {
            "content-length": self.rq(),
            "chunked": self.rq(extra=["Transfer-Encoding: chunked"],
                               body=b"2\r\n{}\r\n0\r\n\r\n", length=False),
            "chunked upper-case hex and extension":
                self.rq(extra=["Transfer-Encoding: chunked"],
                        body=b"A;x=y\r\n0123456789\r\n0\r\n\r\n",
                        length=False),
            "tab in value": self.rq(extra=["X-A: a\tb"]),
            "obs-text in value": self.rq(extra=["X-A: caf\xe9"]),
            "HTTP/1.0 without Host":
                self.rq("POST /v1/messages HTTP/1.0", host=None),
            "forward absolute-form": self.fq(
                "POST http://model.test/v1/messages HTTP/1.1"),
        }
        for name, data in controls.items():
            with self.subTest(name):
                self.check_ok(3128 if name.startswith("forward") else 8080,
                              data)

    # -- 400 bad_request, head-level ---------------------------------------

    def test_bad_request_head(self):
        a = self.auth
        cases = {
            "bare LF after request line":
                b"POST /v1/messages HTTP/1.1\nHost: h\r\n" + a.encode() +
                b"\r\nContent-Length: 0\r\n\r\n",
            "bare LF after a field":
                b"POST /v1/messages HTTP/1.1\r\nHost: h\n" + a.encode() +
                b"\r\nContent-Length: 0\r\n\r\n",
            "bare LF ending the head":
                b"POST /v1/messages HTTP/1.1\r\nHost: h\r\n" + a.encode() +
                b"\r\nContent-Length: 0\r\n\n",
            "bare CR": self.rq(extra=["X-A: b\rX-B: c"]),
            "obs-fold": self.rq(extra=["X-A: b", " c"]),
            "obs-fold with tab": self.rq(extra=["X-A: b", "\tc"]),
            "whitespace before the first field":
                self.rq(host=" Host: " + REV),
            "space before colon": self.rq(extra=["X-A : b"]),
            "tab before colon": self.rq(extra=["X-A\t: b"]),
            "space in field name": self.rq(extra=["X A: b"]),
            "bad character in field name": self.rq(extra=["X@A: b"]),
            "empty field name": self.rq(extra=[": b"]),
            "bad character in method":
                self.rq("PO(ST /v1/messages HTTP/1.1"),
            "two spaces in request line":
                self.rq("POST  /v1/messages HTTP/1.1"),
            "space in request-target":
                self.rq("POST /v1/mess ages HTTP/1.1"),
            "control character in value": self.rq(extra=["X-A: a\x01b"]),
            "NUL in value": self.rq(extra=["X-A: a\x00b"]),
            "DEL in value": self.rq(extra=["X-A: a\x7fb"]),
            "Content-Length and Transfer-Encoding":
                self.rq(extra=["Transfer-Encoding: chunked"],
                        body=b"2\r\n{}\r\n0\r\n\r\n"),
            "two equal Content-Lengths":
                self.rq(extra=["Content-Length: 2"]),
            "two different Content-Lengths":
                self.rq(extra=["Content-Length: 3"]),
            "Content-Length list": self.rq(
                extra=["Content-Length: 2, 2"], length=False),
            "Content-Length not numeric": self.rq(
                extra=["Content-Length: 2x"], length=False),
            "Content-Length negative": self.rq(
                extra=["Content-Length: -1"], length=False),
            "Content-Length with plus": self.rq(
                extra=["Content-Length: +2"], length=False),
            "Content-Length empty": self.rq(
                extra=["Content-Length: "], length=False),
            "Content-Length overflow": self.rq(
                extra=["Content-Length: 184467440737095516160"],
                length=False),
            "Transfer-Encoding gzip, chunked": self.rq(
                extra=["Transfer-Encoding: gzip, chunked"],
                body=b"2\r\n{}\r\n0\r\n\r\n", length=False),
            "Transfer-Encoding identity": self.rq(
                extra=["Transfer-Encoding: identity"], length=False),
            "Transfer-Encoding chunked, chunked": self.rq(
                extra=["Transfer-Encoding: chunked, chunked"],
                body=b"2\r\n{}\r\n0\r\n\r\n", length=False),
            "two Transfer-Encoding fields": self.rq(
                extra=["Transfer-Encoding: chunked",
                       "Transfer-Encoding: chunked"],
                body=b"2\r\n{}\r\n0\r\n\r\n", length=False),
            "missing Host in HTTP/1.1": self.rq(host=None),
            "two Hosts": self.rq(extra=["Host: " + REV]),
            "HTTP/2.0": self.rq("POST /v1/messages HTTP/2.0"),
            "HTTP/1.2": self.rq("POST /v1/messages HTTP/1.2"),
            "lower-case version": self.rq("POST /v1/messages http/1.1"),
            "no version": self.rq("POST /v1/messages"),
            "Upgrade websocket": self.rq(
                extra=["Connection: Upgrade", "Upgrade: websocket"]),
            "Upgrade h2c": self.rq(
                extra=["Connection: Upgrade, HTTP2-Settings",
                       "Upgrade: h2c", "HTTP2-Settings: AAMAAABkAAQAAP__"]),
        }
        for name, data in cases.items():
            with self.subTest(name):
                self.check_bad(8080, data)

    def test_bad_request_forward_authority(self):
        cases = {
            "Host differs from absolute-form authority": self.fq(
                "POST http://model.test/v1/messages HTTP/1.1",
                host="Host: other.test"),
            "Host port differs from authority": self.fq(
                "POST http://model.test/v1/messages HTTP/1.1",
                host="Host: model.test:8080"),
            "missing Host with absolute-form in HTTP/1.1": self.fq(
                "POST http://model.test/v1/messages HTTP/1.1", host=None),
            "userinfo in URI": self.fq(
                "POST http://user:pw@model.test/v1/messages HTTP/1.1"),
            "user only in URI": self.fq(
                "POST http://user@model.test/v1/messages HTTP/1.1"),
            "Upgrade through the forward listener": self.fq(
                "POST http://model.test/v1/messages HTTP/1.1",
                extra=["Connection: Upgrade", "Upgrade: websocket"]),
        }
        for name, data in cases.items():
            with self.subTest(name):
                self.check_bad(3128, data)

    # -- 400 bad_request, body-level (chunked framing) ---------------------

    def test_bad_request_chunked_body(self):
        te = ["Transfer-Encoding: chunked"]
        cases = {
            "chunk size not hex": b"zz\r\nhello\r\n0\r\n\r\n",
            "chunk size 0x prefix": b"0x5\r\nhello\r\n0\r\n\r\n",
            "chunk size negative": b"-5\r\nhello\r\n0\r\n\r\n",
            "chunk size leading space": b" 5\r\nhello\r\n0\r\n\r\n",
            "chunk size 17 hex digits":
                b"00000000000000005\r\nhello\r\n0\r\n\r\n",
            "chunk size empty": b"\r\nhello\r\n0\r\n\r\n",
            "bare LF after chunk size": b"5\nhello\r\n0\r\n\r\n",
            "no CRLF after chunk data": b"5\r\nhelloX0\r\n\r\n",
            "bare LF after chunk data": b"5\r\nhello\n0\r\n\r\n",
        }
        for name, body in cases.items():
            with self.subTest(name):
                self.check_bad(8080, self.rq(extra=te, body=body,
                                             length=False),
                               body_error=True)

    # -- 431 headers_too_large ---------------------------------------------

    def test_headers_too_large(self):
        cases = {
            "one large field": self.rq(
                extra=["X-Big: " + "a" * (MAX_HEADER_BYTES + 100)]),
            "too many fields": self.rq(
                extra=["X-F%d: v" % i for i in range(MAX_HEADERS + 5)]),
            "unterminated head over the limit":
                ("POST /v1/messages HTTP/1.1\r\nHost: %s\r\nX-Big: %s" % (
                    REV, "a" * (MAX_HEADER_BYTES + 100))).encode(),
        }
        for name, data in cases.items():
            with self.subTest(name):
                self.check_bad(8080, data, 431, "headers_too_large")

    def test_headers_under_limits_pass(self):
        # Host, Authorization and Content-Length plus 15: under 20 fields;
        # about 2 KiB: under 4096 bytes.
        self.check_ok(8080, self.rq(
            extra=["X-F%d: %s" % (i, "v" * 80) for i in range(15)]))

    # -- 413 body_too_large ------------------------------------------------

    def test_body_too_large_content_length(self):
        self.check_bad(8080, self.rq(body=b"x" * (MAX_BODY + 1)), 413,
                       "body_too_large")

    def test_body_too_large_chunked(self):
        piece = b"y" * 8192
        body = b"".join(b"%x\r\n%s\r\n" % (len(piece), piece)
                        for _ in range(MAX_BODY // len(piece) + 1))
        self.check_bad(8080, self.rq(extra=["Transfer-Encoding: chunked"],
                                     body=body + b"0\r\n\r\n", length=False),
                       413, "body_too_large", body_error=True)

    def test_body_at_limit_passes(self):
        self.check_ok(8080, self.rq(body=b"z" * MAX_BODY))


if __name__ == "__main__":
    st.main()
