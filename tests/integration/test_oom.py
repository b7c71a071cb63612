"""Out of memory after ready (issue: "nothing a sandbox triggers may abort
or corrupt"). sluice runs with an LD_PRELOAD shim (tests/tools/
libfailalloc.c) that, once armed, makes about one allocation in 40 fail,
while clients in the sandbox send allowed requests with bodies, denied
requests, server-sent event streams and CONNECT tunnels. Every answer a
client gets must be a well-formed HTTP response, or a close: one
connection may be given up, mid-response too, but what came before the
close frames exactly as it was sent. sluice must stay up, serve normally
once the failures stop, and exit 0 on SIGTERM.

Not run under the sanitizers (their allocator cannot be preloaded over).
The upstreams are plain HTTP: libevent 2.1's bufferevent_openssl_socket_new()
itself crashes when an allocation inside it fails (its error path frees a
half-made bufferevent), which no caller can prevent; this test covers
sluice's own paths.

Topology: netns sbx (sluice, clients) <-veth-> netns up: fakeup over plain
HTTP on 198.18.46.2:80 and :8080."""

import os
import socket
import sys
import time
import unittest

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "lib"))

import sluicetest as st  # noqa: E402
from sluicetest import policy as pol  # noqa: E402
from sluicetest.http import Closed, build_request  # noqa: E402
import token_audit_harness as tah  # noqa: E402

SHIM = os.path.join(st.ENV.tools, "libfailalloc.so")
STATUSES = {200, 400, 403, 407, 429, 500, 502, 503, 504}


@unittest.skipIf(st.ENV.sanitize or not os.path.exists(SHIM),
                               "needs the plain build's libfailalloc.so")
class TestOutOfMemory(st.ProxyTestCase):
    TAG = "oom"
    X = 46

    @classmethod
    def build(cls):
        h, t = cls.h, cls.h.topo
        cls.plain = h.fakeup("plain", ["%s:80" % t.v4(2),
                                       "%s:8080" % t.v4(2)])
        routes = [
            pol.route("model", ["model.test"], "http://%s:8080/" % t.v4(2),
                      None, methods=("GET", "POST"), prefixes=["/v1/"],
                      allow_plaintext=True),
            pol.route("tunnel", ["tunnel.test"], "http://%s:80/" % t.v4(2),
                      None, methods=("GET",), prefixes=["/v1/"],
                      allow_plaintext=True),
        ]
        doc = h.policy("main", [pol.forward("fwd", "127.0.0.1:3128")],
                       routes)
        path = h.write_policy("main", doc)
        cls.arm = os.path.join(h.tmp, "failalloc.arm")
        # The shim maps this byte: '1' arms it (never truncate the file).
        with open(cls.arm, "wb") as f:
            f.write(b"0")
        env = dict(os.environ, LD_PRELOAD=SHIM, FAILALLOC_ARM=cls.arm,
                   FAILALLOC_EVERY="40")
        cls.sl = st.Sluice(h.sbx, path, "sluice-main", h.tmp, env=env)
        cls.sl.expected_exit = None
        h.sluices.append(cls.sl)
        cls.sl.wait_ready()
        cls.tok = h.token("model")
        cls.ttok = h.token("tunnel")
        cls.thost = "%s:80" % t.v4(2)

    def fwd(self, method, path, body=b"", tok=None):
        auth = [] if tok is None else ["Proxy-Authorization: Bearer " + tok]
        return build_request(method, "http://model.test" + path,
                             "model.test", auth, body)

    def exchange(self, data, method=None, tunnel=False):
        """One exchange; a response must be well-formed, a close is
        accepted. Returns the status, or None for a close."""
        try:
            with self.h.raw(3128, timeout=5.0) as c:
                if tunnel:
                    c.send(tah.connect_req(
                        self.thost, ["Proxy-Authorization: Bearer " +
                                     self.ttok]))
                    r = c.read_response(head_only=True)
                    self.assertIn(r.status, STATUSES, r)
                    if r.status != 200:
                        return r.status
                    data = ("GET /v1/echo HTTP/1.1\r\nHost: %s\r\n\r\n" %
                            self.thost).encode()
                r = c.request(data, method=method, timeout=5.0)
        except (Closed, ConnectionError):
            return None
        except ValueError as e:
            self.fail("corrupt framing: %s" % e)
        except socket.timeout:
            self.fail("no answer and no close within 5 s")
        self.assertTrue(r.version.startswith("HTTP/1."), r)
        self.assertIn(r.status, STATUSES, r)
        # A connection given up mid-response is closed: the client sees a
        # body cut short in valid framing (r.complete false), never bytes
        # that frame differently.
        return r.status if r.complete else None

    def set_arm(self, flag):
        with open(self.arm, "r+b") as f:
            f.write(flag)

    def test_traffic_through_allocation_failures(self):
        body = b'{"prompt": "' + b"x" * 20000 + b'"}'
        kinds = [
            lambda: self.exchange(self.fwd("POST", "/v1/echo", body,
                                           self.tok)),
            lambda: self.exchange(self.fwd("GET", "/v1/echo")),
            lambda: self.exchange(self.fwd(
                "GET", "/v1/stream?n=3&gap_ms=10", tok=self.tok)),
            lambda: self.exchange(b"", tunnel=True),
            lambda: self.exchange(self.fwd("DELETE", "/v1/x", tok=self.tok)),
        ]
        self.set_arm(b"1")
        seen = {}
        try:
            deadline = time.monotonic() + 20
            for i in range(300):
                if time.monotonic() > deadline:
                    break
                st_ = kinds[i % len(kinds)]()
                seen[st_] = seen.get(st_, 0) + 1
                self.assertTrue(self.sl.alive(),
                                "sluice died: %s" % self.sl.stderr()[-2000:])
        finally:
            self.set_arm(b"0")
        # The failures really happened (else this test proves nothing).
        self.assertTrue(seen.get(None, 0) + seen.get(500, 0) +
                        seen.get(503, 0) + seen.get(502, 0) > 0, seen)
        self.assertTrue(self.sl.alive())
        ok = False
        for _ in range(20):
            if self.exchange(self.fwd("POST", "/v1/echo", b"{}",
                                      self.tok)) == 200:
                ok = True
                break
            time.sleep(0.2)
        self.assertTrue(ok, "no recovery after the failures stopped")
        print("statuses seen under failures: %r" % seen, file=sys.stderr)


if __name__ == "__main__":
    st.main()
