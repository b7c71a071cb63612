"""Connection limits and the daemon's life (DESIGN.md "Command line",
STYLE.md §5): the header timeout from accept (slow headers), 503 at
max_connections, SIGHUP reload with a bad and a good policy (and requests
in flight keep their policy), SIGTERM/SIGINT drain and exit 0.

Each test starts its own sluice (its own limits and ports) in the same
topology: netns sbx <-veth-> netns up (fakeup on 198.18.6.2:443, DNS on
.53)."""

import itertools
import json
import os
import signal
import socket
import sys
import threading
import time

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "lib"))

import sluicetest as st  # noqa: E402
from sluicetest import policy as pol  # noqa: E402
from sluicetest.http import StreamReader, build_request  # noqa: E402

_ports = itertools.count(0)


class TestLifecycle(st.ProxyTestCase):
    TAG = "life"
    X = 6

    @classmethod
    def build(cls):
        h, t = cls.h, cls.h.topo
        cert, key = h.ca.issue("model-up", ["DNS:model-up.test",
                                            "IP:" + t.v4(2)])
        cls.up = h.fakeup("main", ["%s:443" % t.v4(2)], cert, key)
        h.dns_server({"model-up.test": {"A": [t.v4(2)]}})
        cls.tok = h.token("model")

    # -- helpers -----------------------------------------------------------

    def start(self, name, limits=None, prefixes=("/v1/messages",
                                                 "/v1/stream", "/v1/hang")):
        """A sluice with a reverse listener on a fresh port; returns
        (sluice, port, policy doc)."""
        port = 9000 + next(_ports)
        doc = self.make_doc(name, port, limits, prefixes)
        return self.h.sluice(name, doc), port, doc

    def make_doc(self, name, port, limits=None, prefixes=()):
        routes = [pol.route("model", ["model.test"],
                            "https://model-up.test/base", self.h.ca.cert,
                            prefixes=list(prefixes))]
        listeners = [pol.reverse("rev", "127.0.0.1:%d" % port, "model")]
        return self.h.policy(name, listeners, routes, limits)

    def post(self, port, path="/v1/messages", timeout=5.0):
        with self.h.raw(port) as c:
            return c.request(build_request(
                "POST", path, "127.0.0.1:%d" % port,
                ["Authorization: Bearer " + self.tok], b"{}"),
                timeout=timeout)

    def stream(self, port, n, gap_ms):
        return StreamReader(self.h.sbx,
                            ["-H", "Authorization: Bearer " + self.tok,
                             "-d", "{}"],
                            "http://127.0.0.1:%d/v1/stream?n=%d&gap_ms=%d" % (
                                port, n, gap_ms))

    def audit_events(self, doc):
        try:
            with open(doc["audit"]["path"], "rb") as f:
                lines = f.read().split(b"\n")[:-1]
        except FileNotFoundError:
            return []
        return [json.loads(l) for l in lines]

    # -- header timeout ----------------------------------------------------

    def test_slow_header_closed_after_header_timeout(self):
        _, port, _ = self.start("slow", {"header_timeout_ms": 500})
        cases = {
            "nothing sent": b"",
            "half a request line": b"POST /v1/mess",
            "request line and part of the head":
                b"POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n",
        }
        for name, data in cases.items():
            with self.subTest(name):
                m = self.up.log.mark()
                with self.h.raw(port) as c:
                    c.send(data)
                    t = c.wait_closed(5.0)
                self.assertIsNotNone(t, "still open after 5 s")
                self.assertGreater(t, 0.4)
                self.assertLess(t, 5.0)
                self.assertNothingUpstream(self.up, m)

    def test_slowloris_trickle_still_closed(self):
        # The header timer runs from accept: bytes trickling in do not
        # reset it.
        _, port, _ = self.start("trickle", {"header_timeout_ms": 500})
        data = b"POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: "
        with self.h.raw(port) as c:
            t0 = time.monotonic()
            closed_at = None
            for i in range(40):
                try:
                    c.send(data[i:i + 1] if i < len(data) else b"a")
                except OSError:
                    closed_at = time.monotonic() - t0
                    break
                if c.closed(0.1):
                    closed_at = time.monotonic() - t0
                    break
        self.assertIsNotNone(closed_at, "a trickled head kept the "
                             "connection open for 4 s")
        self.assertGreater(closed_at, 0.4)
        self.assertLess(closed_at, 3.0)

    # -- max_connections ---------------------------------------------------

    def test_max_connections(self):
        _, port, _ = self.start("maxc", {"max_connections": 2,
                                         "header_timeout_ms": 10000})
        c1 = self.h.raw(port)
        c2 = self.h.raw(port)
        try:
            c1.send(b"POST /v1/mess")
            c2.send(b"POST /v1/mess")
            time.sleep(0.3)
            m = self.up.log.mark()
            with self.h.raw(port) as c3:
                c3.send(build_request("POST", "/v1/messages",
                                      "127.0.0.1:%d" % port,
                                      ["Authorization: Bearer " + self.tok],
                                      b"{}"), ignore_errors=True)
                r = c3.read_response()
                self.assertDenied(r, 503, "too_many_connections")
                self.assertTrue(c3.closed(2.0))
            self.assertNothingUpstream(self.up, m)
            # A freed slot is usable again.
            c1.close()
            time.sleep(0.3)
            self.assertEqual(self.post(port).status, 200)
        finally:
            c1.close()
            c2.close()

    # -- reload ------------------------------------------------------------

    def test_reload_bad_then_good_policy(self):
        sl, port, doc = self.start("reload", prefixes=["/v1/messages"])
        self.assertDenied(self.post(port, "/v1/other"), 403,
                          "path_not_allowed")
        # Bad: an unknown key, then broken JSON. The old policy stays.
        for bad in ('{"listeners": [], "bogus": 1}', '{"listeners": ['):
            with self.subTest(bad=bad):
                with open(sl.policy_path + ".tmp", "w") as f:
                    f.write(bad)
                os.replace(sl.policy_path + ".tmp", sl.policy_path)
                sl.reload()
                time.sleep(0.5)
                self.assertTrue(sl.alive(), sl.stderr()[-500:])
                self.assertEqual(self.post(port).status, 200)
                self.assertDenied(self.post(port, "/v1/other"), 403,
                                  "path_not_allowed")
        # Good: a new prefix is allowed once the reload took effect.
        good = self.make_doc("reload", port,
                             prefixes=["/v1/messages", "/v1/other"])
        pol.write(sl.policy_path, good)
        m = self.up.log.mark()
        sl.reload()
        ok = st.wait_until(
            lambda: self.post(port, "/v1/other").status == 200, 5.0, 0.1)
        self.assertTrue(ok, "the good policy did not take effect")
        self.assertTrue(sl.alive())
        self.assertIn("/base/v1/other",
                      [e["target"] for e in self.up.log.since(m, "request")])

    def test_reload_is_audited(self):
        sl, port, doc = self.start("reload-audit")
        with open(sl.policy_path, "w") as f:
            f.write("{")
        sl.reload()
        got = st.wait_until(lambda: [e for e in self.audit_events(doc)
                                     if e.get("event") ==
                                     "policy.reload_failed"], 3.0)
        self.assertTrue(got, "no policy.reload_failed audit line")
        pol.write(sl.policy_path, doc)
        sl.reload()
        got = st.wait_until(lambda: [e for e in self.audit_events(doc)
                                     if e.get("event") == "policy.reload"],
                            3.0)
        self.assertTrue(got, "no policy.reload audit line")

    def test_reload_keeps_inflight_request_policy(self):
        sl, port, doc = self.start("inflight")
        s = self.stream(port, 6, 300)
        self.assertTrue(st.wait_until(lambda: s.data_lines(), 5.0),
                        "the stream did not start")
        # The new policy no longer allows /v1/stream.
        pol.write(sl.policy_path, self.make_doc(
            "inflight", port, prefixes=["/v1/messages"]))
        sl.reload()
        ok = st.wait_until(lambda: self.post(port, "/v1/stream").status
                           == 403, 5.0, 0.1)
        self.assertTrue(ok, "the reload did not take effect")
        rc, err = s.finish()
        self.assertEqual(rc, 0, err)
        self.assertEqual(len(s.data_lines()), 6)

    # -- signals -----------------------------------------------------------

    def test_sigterm_drains_inflight_stream(self):
        sl, port, _ = self.start("drain", {"drain_timeout_ms": 5000})
        s = self.stream(port, 6, 300)
        self.assertTrue(st.wait_until(lambda: s.data_lines(), 5.0),
                        "the stream did not start")
        sl.signal(signal.SIGTERM)
        time.sleep(0.2)
        # New connections are not served any more.
        served = None
        try:
            with self.h.raw(port, timeout=1.0) as c:
                c.send(build_request("POST", "/v1/messages",
                                     "127.0.0.1:%d" % port,
                                     ["Authorization: Bearer " + self.tok],
                                     b"{}"), ignore_errors=True)
                try:
                    served = c.read_response(timeout=1.0)
                except (st.Closed, socket.timeout, OSError):
                    served = None
        except ConnectionRefusedError:
            served = None
        self.assertIsNone(served, "a new request was served while "
                          "draining: %r" % (served,))
        rc, err = s.finish()
        self.assertEqual(rc, 0, err)
        self.assertEqual(len(s.data_lines()), 6, "the in-flight stream "
                         "was cut short")
        self.assertEqual(sl.wait(10), 0, sl.stderr()[-500:])

    def test_sigterm_drain_timeout(self):
        sl, port, _ = self.start("drain-to", {
            "drain_timeout_ms": 1000, "upstream_response_timeout_ms": 30000})
        result = {}

        def hang():
            try:
                result["r"] = self.post(port, "/v1/hang", timeout=15)
            except Exception as e:  # closed without an answer is fine
                result["e"] = e
        m = self.up.log.mark()
        t = threading.Thread(target=hang, daemon=True)
        t.start()
        self.assertTrue(st.wait_until(
            lambda: self.up.log.since(m, "request"), 5.0),
            "the request did not start")
        time.sleep(0.2)
        t0 = time.monotonic()
        sl.signal(signal.SIGTERM)
        rc = sl.wait(10)
        took = time.monotonic() - t0
        self.assertEqual(rc, 0, sl.stderr()[-500:])
        self.assertGreater(took, 0.7, "did not wait for the drain")
        self.assertLess(took, 4.0, "drain_timeout_ms was not honoured")
        t.join(5)
        self.assertFalse(t.is_alive())

    def test_sigterm_with_idle_keepalive_exits_promptly(self):
        sl, port, _ = self.start("idle", {"drain_timeout_ms": 5000})
        with self.h.raw(port) as c:
            r = c.request(build_request("POST", "/v1/messages",
                                        "127.0.0.1:%d" % port,
                                        ["Authorization: Bearer " + self.tok],
                                        b"{}"))
            self.assertEqual(r.status, 200)
            t0 = time.monotonic()
            sl.signal(signal.SIGTERM)
            rc = sl.wait(10)
            took = time.monotonic() - t0
            self.assertEqual(rc, 0)
            # An idle keep-alive connection holds no request in flight.
            self.assertLess(took, 2.5)
            self.assertTrue(c.closed(1.0))

    def test_sigint_exits_zero(self):
        sl, port, doc = self.start("sigint")
        with open(doc["ready_file"]) as f:
            self.assertEqual(f.read().strip(), str(sl.pid))
        sl.signal(signal.SIGINT)
        self.assertEqual(sl.wait(5), 0)


if __name__ == "__main__":
    st.main()
