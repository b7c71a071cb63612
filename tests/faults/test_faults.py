"""Faults the suite did not cover before (tests/faults/README.md): what the
audit log holds after a kill -9 with requests and a tunnel in flight under
`audit.fsync: always`, a slow audit disk that must hold up only the
requests waiting for their own lines, never the event loop (a tunnel
already open keeps moving bytes while an fsync takes seconds), and the
log rotated (SIGUSR1) five times under load.

Topology: netns sbx (sluice, clients) <-veth-> netns up: fakeup over TLS
on 198.18.50.2:443, plain HTTP on 198.18.50.2:80."""

import os
import select
import sys
import time
import unittest

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration", "lib"))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import sluicetest as st  # noqa: E402
from sluicetest import policy as pol  # noqa: E402
from sluicetest.http import build_request  # noqa: E402
import token_audit_harness as tah  # noqa: E402

SLOWSYNC = os.path.join(st.ENV.tools, "libslowsync.so")


class TestFaults(st.ProxyTestCase):
    TAG = "faults"
    X = 50

    @classmethod
    def build(cls):
        h, t = cls.h, cls.h.topo
        cert, key = h.ca.issue("up", ["DNS:up.test", "IP:" + t.v4(2)])
        cls.up = h.fakeup("tls", ["%s:443" % t.v4(2)], cert, key)
        cls.plain = h.fakeup("plain", ["%s:80" % t.v4(2)])
        routes = [
            pol.route("model", ["model.test"], "https://%s/" % t.v4(2),
                      h.ca.cert, methods=("GET", "POST"),
                      prefixes=["/v1/"]),
            pol.route("tunnel", ["tunnel.test"], "http://%s:80/" % t.v4(2),
                      None, methods=("GET",), prefixes=["/v1/"],
                      allow_plaintext=True),
        ]
        cls.routes = routes
        cls.tunnel_host = "%s:80" % t.v4(2)

    # -- helpers -----------------------------------------------------------

    def doc_in(self, name, port):
        """A policy of its own (files under <tmp>/name), fsync "always"."""
        h = self.h
        doc = h.policy(name, [pol.forward("fwd", "127.0.0.1:%d" % port)],
                       self.routes)
        d = os.path.join(h.tmp, name)
        os.makedirs(os.path.join(d, "state"), mode=0o700, exist_ok=True)
        doc["audit"] = dict(doc["audit"], path=os.path.join(d, "audit.jsonl"),
                            fsync="always")
        doc["admin"] = {"socket": os.path.join(d, "admin.sock")}
        doc["ready_file"] = os.path.join(d, "ready")
        doc["state_dir"] = os.path.join(d, "state")
        return doc

    def req(self, aud, path, tok):
        return build_request("GET", "http://%s.test%s" % (aud, path),
                             aud + ".test",
                             ["Proxy-Authorization: Bearer " + tok], b"")

    def open_tunnel(self, port, tok):
        c = self.h.raw(port)
        c.send(tah.connect_req(self.tunnel_host,
                               ["Proxy-Authorization: Bearer " + tok]))
        r = c.read_response(head_only=True)
        self.assertEqual(r.status, 200, r)
        return c

    def tunnel_echo(self, c):
        """One GET through an open tunnel to the plain upstream."""
        c.send(("GET /v1/echo HTTP/1.1\r\nHost: %s\r\n\r\n" %
                self.tunnel_host).encode())
        return c.read_response(timeout=10.0)

    # -- kill -9 with requests in flight -----------------------------------

    def test_kill9_in_flight_leaves_start_lines(self):
        """Three SSE streams and a tunnel in flight, kill -9, restart:
        with fsync "always" each has its start line (durable before its
        first byte went upstream), none an end line, and the chain goes
        on unbroken from them (before: no line at all)."""
        doc = self.doc_in("kill", 3140)
        s = tah.start_sluice(self.h, "kill", doc)
        log = doc["audit"]["path"]
        jtis = ["inflight-%d" % i for i in range(3)]
        conns = []
        try:
            for j in jtis:
                c = self.h.raw(3140)
                conns.append(c)
                c.send(self.req("model", "/v1/stream?n=3&gap_ms=20000",
                                self.h.token("model", jti=j)))
                self.assertEqual(c.read_response(head_only=True).status,
                                 200)
            conns.append(self.open_tunnel(
                3140, self.h.token("tunnel", jti="inflight-tunnel")))
            jtis.append("inflight-tunnel")
            tah.kill9(s)
        finally:
            for c in conns:
                c.close()
        ev = tah.events(log)
        mine = [e for e in ev if e.get("jti") in jtis]
        self.assertEqual(sorted(e["jti"] for e in mine), sorted(jtis),
                         "start lines after kill -9: %r" % mine)
        for e in mine:
            self.assertEqual((e.get("phase"), e["decision"], e["reason"]),
                             ("start", "allow", "ok"), e)
        ids = {e["id"] for e in mine}
        self.assertEqual([e for e in ev if e["event"] in tah.END_OF and
                          e.get("id") in ids], [])
        # The restart continues the chain from the last line.
        s2 = tah.start_sluice(self.h, "kill", doc, "2")
        tah.stop_clean(self, s2)
        lines = tah.read_lines(log)
        self.assertEqual(tah.check_chain(lines, prev=tah.ZERO_HASH, seq=0),
                         [])
        p = tah.audit_verify([log])
        self.assertEqual(p.returncode, 0, p.stderr)
        # verify says how many requests have a start and no end.
        self.assertIn("4 request(s) started and not ended", p.stdout)

    # -- a slow audit disk -------------------------------------------------

    def held_while_fsync_sleeps(self, t, c, data, arm):
        """Arm the slow disk, send data on c, and once an fsync is held
        up: a whole exchange through the open tunnel t must go through
        meanwhile, and c must have no answer yet. Then disarm; returns
        c's answer."""
        sleeping = arm + ".sleeping"
        with open(arm, "w"):
            pass
        c.send(data)
        deadline = time.monotonic() + 10.0
        while not os.path.exists(sleeping):
            self.assertLess(time.monotonic(), deadline, "no fsync started")
            time.sleep(0.01)
        r = self.tunnel_echo(t)
        self.assertEqual(r.status, 200)
        self.assertTrue(os.path.exists(sleeping),
                        "the tunnel moved only after the fsync ended")
        rd, _, _ = select.select([c.sock], [], [], 0)
        self.assertEqual(rd, [], "answered before its line was durable")
        os.unlink(arm)
        return c.read_response(timeout=15.0)

    @unittest.skipIf(st.ENV.sanitize or not os.path.exists(SLOWSYNC),
                     "needs the plain build's libslowsync.so")
    def test_slow_fsync_holds_up_only_its_own_request(self):
        """While the fsync of one request's start line takes seconds, a
        tunnel opened before relays a whole exchange (the shim's
        .sleeping file proves the fsync was still held up then), nothing
        of the request goes upstream, and it is answered once its line is
        durable. A refusal's response waits for its line the same way."""
        h = self.h
        doc = self.doc_in("slow", 3141)
        arm = os.path.join(h.tmp, "slowsync.arm")
        path = h.write_policy("slow", doc)
        env = dict(os.environ, LD_PRELOAD=SLOWSYNC, SLOWSYNC_ARM=arm,
                   SLOWSYNC_MS="3000")
        # FAULTS_SLUICE_ARGS=-v: sluice's debug log, for a look by hand.
        extra = tuple(os.environ.get("FAULTS_SLUICE_ARGS", "").split())
        s = st.Sluice(h.sbx, path, "sluice-slow", h.tmp, env=env,
                      extra_args=extra)
        s.expected_exit = None
        h.sluices.append(s)
        s.wait_ready()
        log = doc["audit"]["path"]
        t = self.open_tunnel(3141, h.token("tunnel", jti="slow-tunnel"))
        c = h.raw(3141)
        d = None
        try:
            self.assertEqual(self.tunnel_echo(t).status, 200)
            m = self.up.log.mark()
            r = self.held_while_fsync_sleeps(
                t, c, self.req("model", "/v1/echo",
                               h.token("model", jti="slow-req")), arm)
            self.assertEqual(r.status, 200, r)
            reqs = self.up.log.since(m, "request")
            self.assertEqual(len(reqs), 1, reqs)
            # Its end line is written before the disk is slow again.
            tah.wait_events(log, lambda evs: any(
                e["event"] == "http.end" for e in evs))
            d = h.raw(3141)
            r = self.held_while_fsync_sleeps(
                t, d, self.req("model", "/v1/../admin",
                               h.token("model", jti="slow-deny")), arm)
            self.assertIn(r.status, (400, 403), r)
            self.assertEqual(len(self.up.log.since(m, "request")), 1)
        finally:
            if os.path.exists(arm):
                os.unlink(arm)
            t.close()
            c.close()
            if d is not None:
                d.close()
        tah.stop_clean(self, s)
        ev = tah.merge_phases(tah.events(doc["audit"]["path"]))
        got = {e.get("jti"): e for e in ev
               if e.get("jti") in ("slow-req", "slow-deny")}
        self.assertEqual((got["slow-req"]["decision"],
                          got["slow-req"]["status"]), ("allow", 200))
        self.assertEqual(got["slow-deny"]["decision"], "deny")


    # -- rotation under load -----------------------------------------------

    def rotate_under_load(self, name, port, fsync):
        """Four clients send requests back to back on kept-alive
        connections while the log is renamed and reopened (SIGUSR1) five
        times: every file verifies as one chain in order, and every
        request answered 200 has exactly one line (start and end with
        "always"), none lost, none twice."""
        import signal
        import threading
        h = self.h
        doc = self.doc_in(name, port)
        doc["audit"]["fsync"] = fsync
        s = tah.start_sluice(h, name, doc)
        log = doc["audit"]["path"]
        tok = h.token("model", sub="run-" + name)
        stop = threading.Event()
        oks, errors = [], []

        def client():
            n = 0
            try:
                c = h.raw(port, timeout=10.0)
                while not stop.is_set():
                    c.send(self.req("model", "/v1/echo", tok))
                    r = c.read_response(timeout=10.0)
                    if r.status != 200:
                        errors.append(r.status)
                        break
                    n += 1
                c.close()
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(repr(e))
            oks.append(n)

        threads = [threading.Thread(target=client) for _ in range(4)]
        for t in threads:
            t.start()
        files = []
        try:
            for i in range(5):
                time.sleep(0.2)
                old = "%s.%d" % (log, i + 1)
                os.rename(log, old)
                files.append(old)
                s.signal(signal.SIGUSR1)
                self.assertTrue(st.wait_until(lambda: os.path.exists(log),
                                              st.ENV.slow(5)),
                                "SIGUSR1 did not create a new file")
            time.sleep(0.2)
        finally:
            stop.set()
            for t in threads:
                t.join(30)
        self.assertEqual(errors, [])
        tah.stop_clean(self, s)
        files.append(log)
        p = tah.audit_verify(files)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("%d file(s)" % len(files), p.stdout)
        self.assertNotIn("not ended", p.stdout)
        evs = []
        for f in files:
            evs += tah.events(f)
        mine = [e for e in tah.merge_phases(evs)
                if e.get("sub") == "run-" + name]
        ids = [e["id"] for e in mine]
        self.assertEqual(len(ids), len(set(ids)), "a line twice")
        self.assertEqual(len(mine), sum(oks),
                         "lines %d, 200s %d" % (len(mine), sum(oks)))
        self.assertGreater(sum(oks), 20, oks)
        # Each rotated file got lines of the load.
        for f in files[1:-1]:
            self.assertTrue(any(e.get("sub") == "run-" + name
                                for e in tah.events(f)), f)

    def test_rotation_under_load(self):
        self.rotate_under_load("rot", 3142, "interval")

    def test_rotation_under_load_always(self):
        self.rotate_under_load("rota", 3143, "always")


if __name__ == "__main__":
    st.main()
