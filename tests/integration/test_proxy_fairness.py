"""Per-client fairness (issue 8 F and 14; docs/denials.md, docs/config.md
`limits.per_client_*`, docs/audit.md "Aggregated refusals").

- A flood of refused requests from one client: the first refusal of a kind
  is written at once; the repeats become one audit line a second with a
  `count`, so the log grows by a bounded number of lines whose counts add
  up to the refusals sent; past `per_client_refusals_per_s` the client gets
  429 `rate_limited` and a closed connection.
- `per_client_connections`: the 257th connection from one address is
  refused (503 too_many_connections) while another address is served.

Topology: netns sbx (sluice on 198.18.47.1 and 127.0.0.1, clients from
198.18.47.1 and a second address 198.18.47.10) <-veth-> netns up (fakeup
on 198.18.47.2:443, DNS on .53)."""

import json
import os
import re
import socket
import sys
import time

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "lib"))

import sluicetest as st  # noqa: E402
from sluicetest import policy as pol  # noqa: E402
from sluicetest.http import RawClient, build_request  # noqa: E402

DENY_RE = re.compile(rb"\r\nSluice-Deny: ([a-z_]+)\r\n")
STATUS_RE = re.compile(rb"HTTP/1\.1 (\d{3}) ")


class TestFairness(st.ProxyTestCase):
    TAG = "fair"
    X = 47

    @classmethod
    def build(cls):
        h, t = cls.h, cls.h.topo
        cert, key = h.ca.issue("model-up", ["DNS:model-up.test",
                                            "IP:" + t.v4(2)])
        cls.up = h.fakeup("main", ["%s:443" % t.v4(2)], cert, key)
        h.dns_server({"model-up.test": {"A": [t.v4(2)]}})
        cls.addr_a = t.v4(1)
        cls.addr_b = t.v4(10)
        t.sbx.ip("addr", "add", cls.addr_b + "/32", "dev", t.sbx_if)
        cls.tok = h.token("model")
        routes = [pol.route("model", ["model.test"],
                            "https://model-up.test/base", h.ca.cert)]
        # The refusal budget at its default (20) and aggregation.
        cls.flood_doc = h.policy("flood", [
            pol.forward("fwd", "127.0.0.1:3128")], routes,
            {"per_client_refusals_per_s": 20})
        cls.flood = h.sluice("flood", cls.flood_doc)
        # per_client_connections at its default (256), on an address both
        # client addresses reach; heads may take their time.
        cls.conn_doc = h.policy("conns", [
            pol.reverse("rev", "%s:8080" % cls.addr_a, "model")], routes,
            {"max_connections": 1000, "header_timeout_ms": 60000,
             "idle_timeout_ms": 60000})
        cls.conn_doc["metrics"] = {"listen": "%s:9464" % cls.addr_a}
        cls.conns = h.sluice("conns", cls.conn_doc)

    # -- helpers -----------------------------------------------------------

    @staticmethod
    def audit(doc):
        try:
            with open(doc["audit"]["path"], "rb") as f:
                lines = f.read().split(b"\n")[:-1]
        except FileNotFoundError:
            return []
        return [json.loads(x) for x in lines]

    def denials_since(self, doc, n):
        return [e for e in self.audit(doc)[n:]
                if e.get("event") == "http.request" and
                e.get("decision") == "deny"]

    def pipelined(self, count, path):
        """count unauthenticated requests (no body, so a refusal keeps the
        connection) on one connection; every response until the close."""
        one = build_request("GET", "http://model.test" + path, "model.test",
                            [], b"", length=False)
        with self.h.raw(3128, timeout=10.0) as c:
            c.send(one * count, ignore_errors=True)
            deadline = time.monotonic() + 10
            data = b""
            while time.monotonic() < deadline:
                try:
                    d = c.sock.recv(65536)
                except (ConnectionResetError, socket.timeout):
                    break
                if not d:
                    break
                data += d
        return data

    # -- F: refusals --------------------------------------------------------

    def test_a_single_denial_is_written_at_once(self):
        n = len(self.audit(self.flood_doc))
        with self.h.raw(3128) as c:
            r = c.request(build_request("GET", "http://model.test/v1/one",
                                        "model.test", [], b"",
                                        length=False))
        self.assertDenied(r, 407, "token_missing", "proxy")
        rid = r.json()["request_id"]
        # Written in the loop pass that refused it, not at the next tick.
        t0 = time.monotonic()
        self.assertTrue(st.wait_until(lambda: any(
            e.get("id") == rid for e in self.audit(self.flood_doc)[n:]),
            0.5), "the first refusal of a kind was not written at once")
        self.assertLess(time.monotonic() - t0, 0.5)
        line = [e for e in self.audit(self.flood_doc)[n:]
                if e.get("id") == rid][0]
        self.assertNotIn("count", line)
        self.assertEqual(line["path"], "/v1/one")

    def test_flood_is_aggregated_and_rate_limited(self):
        # Start at the top of a second, so the first second's budget is
        # whole.
        time.sleep(1.0 - time.time() % 1.0 + 0.05)
        n = len(self.audit(self.flood_doc))
        sent = {"token_missing": 0, "rate_limited": 0}
        responses = 0
        conns = 0
        end = time.monotonic() + 3.0
        while time.monotonic() < end:
            data = self.pipelined(30, "/v1/flood")
            conns += 1
            reasons = DENY_RE.findall(data)
            statuses = STATUS_RE.findall(data)
            self.assertEqual(len(reasons), len(statuses), data[:300])
            for r in reasons:
                sent[r.decode()] = sent.get(r.decode(), 0) + 1
            responses += len(reasons)
            # Every connection ends: after 64 refusals in a row, or at
            # once with a 429 rate_limited.
            self.assertLessEqual(len(reasons), 30)
            if reasons and reasons[-1] == b"rate_limited":
                self.assertIn(b"429 Too Many Requests (rate_limited)", data)
                self.assertIn(b"x-should-retry: false", data)
                self.assertIn(b"Connection: close", data)
        self.assertEqual(set(sent), {"token_missing", "rate_limited"}, sent)
        # 20 a second (3 or 4 seconds touched), the rest rate_limited.
        self.assertLessEqual(sent["token_missing"], 4 * 20, sent)
        self.assertGreaterEqual(sent["rate_limited"], 100, sent)
        # Later requests, in the same second, get 429 and a close.
        with self.h.raw(3128) as c:
            for _ in range(21):
                c.send(build_request("GET", "http://model.test/v1/late",
                                     "model.test", [], b"", length=False))
            last = None
            while True:
                try:
                    last = c.read_response(timeout=5.0)
                except Exception:  # noqa: BLE001 - closed after the last
                    break
                if last.status == 429:
                    break
            self.assertIsNotNone(last)
            self.assertDenied(last, 429, "rate_limited")
            self.assertClosed(c)
        # The aggregates are written once a second: wait for the last.
        time.sleep(2.5)
        lines = [e for e in self.denials_since(self.flood_doc, n)
                 if e.get("path") == "/v1/flood"]
        total = sum(e.get("count", 1) for e in lines)
        self.assertEqual(total, responses,
                         "counts %r add up to %d, %d refusals were sent" % (
                             [(e["reason"], e.get("count")) for e in lines],
                             total, responses))
        # Bounded: per kind, one line at once and one a second after.
        self.assertLessEqual(len(lines), 2 * (2 + 5), lines)
        self.assertGreater(responses, 10 * len(lines))
        for e in lines:
            self.assertEqual(e["client"].rsplit(":", 1)[0], "127.0.0.1")
            self.assertIn(e["reason"], ("token_missing", "rate_limited"))
            self.assertRegex(e["id"], r"^[0-9a-f]{20}$")
            if "count" in e:
                self.assertGreaterEqual(e["count"], 1)
        self.assertTrue(any("count" in e for e in lines), lines)
        # A new second gives a new budget.
        time.sleep(1.0 - time.time() % 1.0 + 0.05)
        with self.h.raw(3128) as c:
            r = c.request(build_request("GET", "http://model.test/v1/again",
                                        "model.test", [], b"",
                                        length=False))
        self.assertDenied(r, 407, "token_missing", "proxy")

    # -- 14: per_client_connections -----------------------------------------

    def open_from(self, src, n):
        return [RawClient(self.h.sbx, self.addr_a, 8080, source=src)
                for _ in range(n)]

    def post_from(self, src):
        with RawClient(self.h.sbx, self.addr_a, 8080, source=src) as c:
            return c.request(build_request(
                "POST", "/v1/messages", "%s:8080" % self.addr_a,
                ["Authorization: Bearer " + self.tok], b"{}"))

    def test_per_client_connections(self):
        n = len(self.audit(self.conn_doc))
        held = self.open_from(self.addr_a, 256)
        try:
            # Let sluice accept all of them before the next one.
            time.sleep(0.5)
            c = self.open_from(self.addr_a, 1)[0]
            held.append(c)
            r = c.read_response(timeout=5.0)
            self.assertDenied(r, 503, "too_many_connections")
            self.assertIn("per_client_connections", r.json()["message"])
            self.assertClosed(c)
            held.pop().close()
            # Another address is served meanwhile.
            self.assertEqual(self.post_from(self.addr_b).status, 200)
            # One of A's slots frees up: A is served again.
            held.pop().close()
            time.sleep(0.3)
            self.assertEqual(self.post_from(self.addr_a).status, 200)
        finally:
            for s in held:
                s.close()
        refused = [e for e in self.denials_since(self.conn_doc, n)
                   if e.get("reason") == "too_many_connections"]
        self.assertEqual(len(refused), 1, refused)
        self.assertEqual(refused[0]["client"].rsplit(":", 1)[0],
                         self.addr_a)
        self.assertEqual(refused[0]["status"], 503)


    # -- 14: the metrics listener over TCP ----------------------------------

    def metrics(self, raw, timeout=5.0):
        with RawClient(self.h.sbx, self.addr_a, 9464, timeout=timeout) as c:
            c.send(raw)
            r = c.read_response(timeout=timeout)
            self.assertClosed(c)
            return r

    def test_metrics_listener_strict(self):
        r = self.metrics(b"GET /metrics HTTP/1.0\r\n\r\n")
        self.assertEqual(r.status, 200, r)
        self.assertIn(b"sluice_connections_active", r.body)
        for raw in (b"GET /metrics HTTP/1.1\nHost: x\n\n",
                    b"GET /metrics HTTP/1.1\r\n\r\n",
                    b"GET /metrics HTTP/1.1\r\nHost: x\r\n fold\r\n\r\n",
                    b"GET /metrics HTTP/1.0\r\nA : b\r\n\r\n"):
            with self.subTest(raw=raw):
                r = self.metrics(raw)
                self.assertEqual(r.status, 400, r)
                self.assertNotIn(b"sluice_", r.body)
        self.assertEqual(self.metrics(b"GET /x HTTP/1.0\r\n\r\n").status,
                         404)

    def test_metrics_listener_capped(self):
        idle = [RawClient(self.h.sbx, self.addr_a, 9464) for _ in range(16)]
        try:
            time.sleep(0.3)
            r = self.metrics(b"GET /metrics HTTP/1.0\r\n\r\n")
            self.assertEqual(r.status, 503, r)
            self.assertNotIn(b"sluice_", r.body)
            idle.pop().close()
            time.sleep(0.3)
            r = self.metrics(b"GET /metrics HTTP/1.0\r\n\r\n")
            self.assertEqual(r.status, 200, r)
        finally:
            for c in idle:
                c.close()


    def test_metrics_listener_times_out(self):
        # A scrape that never completes its head is closed 10 s after
        # accept (a slowloris cannot keep a slot).
        with RawClient(self.h.sbx, self.addr_a, 9464, timeout=15) as c:
            c.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            t0 = time.monotonic()
            self.assertTrue(c.closed(timeout=13.0), "left open")
            self.assertGreater(time.monotonic() - t0, 8.0)


if __name__ == "__main__":
    st.main()
