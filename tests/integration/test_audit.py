"""The audit log and the metrics against the real daemon (issue 5 "Tests",
DESIGN.md "Audit log", docs/audit.md, docs/metrics.md):

- a sequence of allowed and denied requests, tunnels, reloads, a revoke
  and the stop produces exactly the expected events, in order, with the
  right fields and reasons; no token or secret of the test is in the log;
- the hash chain checks out by an independent recomputation here and by
  `sluice audit verify`; an edit of one byte of any line is reported at
  that line;
- SIGUSR1 rotation keeps the chain across files (and across a restart
  after the file was rotated away, through audit.head);
- on_error deny on a full filesystem (a 64 KiB tmpfs mounted here)
  answers 503 audit_unavailable, forwards nothing, keeps running, and
  recovers when space returns, with no broken line;
- GET /metrics on a unix socket parses as Prometheus text, has the
  families the docs list, and its counters follow the requests.

Topology: netns sbx (sluice, curl, raw sockets) <-veth-> netns up
(fakeup on 198.18.41.2:443, DNS on .53). Each test runs its own sluice
(own ports, audit file and state_dir)."""

import errno
import hashlib
import json
import os
import signal
import stat
import sys
import time

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import token_audit_harness as tah  # noqa: E402
from token_audit_harness import st  # noqa: E402
from sluicetest import policy as pol  # noqa: E402

ISS = "control-plane"


def sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class TestAudit(st.ProxyTestCase):
    TAG = "audit"
    X = 41

    @classmethod
    def build(cls):
        h, t = cls.h, cls.h.topo
        cert, key = h.ca.issue("model-up", ["DNS:model-up.test",
                                            "IP:" + t.v4(2)])
        cls.up = h.fakeup("main", ["%s:443" % t.v4(2)], cert, key)
        h.dns_server({"model-up.test": {"A": [t.v4(2)]}})
        cls.cred = "injected-" + os.urandom(16).hex()
        cls.cred_file = h.secret_value("cred", cls.cred)
        cls.upstream_addr = "%s:443" % t.v4(2)
        cls.tokens_used = []  # every token any test sent

    def make_doc(self, name, fport, rport, fsync="interval", audit_path=None,
                 metrics=False):
        h = self.h
        routes = [pol.route("model", ["model.test"],
                            "https://model-up.test/base", h.ca.cert,
                            headers=[("X-Sandbox-Credential",
                                      self.cred_file)])]
        listeners = [pol.forward("fwd", "127.0.0.1:%d" % fport),
                     pol.reverse("rev", "127.0.0.1:%d" % rport, "model")]
        doc = h.policy(name, listeners, routes)
        doc["tokens"]["issuer"] = ISS
        doc["audit"]["fsync"] = fsync
        if audit_path is not None:
            doc["audit"]["path"] = audit_path
        if metrics:
            doc["metrics"] = {"listen": "unix:" + os.path.join(
                h.tmp, name, "metrics.sock")}
        return doc

    def tok(self, **kw):
        kw.setdefault("kid", "k1")
        kw.setdefault("iss", ISS)
        t = tah.mint(self.h.key_file, "model", **kw)
        self.tokens_used.append(t)
        return t

    def rev(self, port, auth, path="/v1/messages", method="POST"):
        return tah.one(self.h, port, tah.rev_req(port, auth, path,
                                                  method=method))

    def fwd(self, port, auth, path="/v1/messages", method="POST"):
        return tah.one(self.h, port, tah.fwd_req("model.test", auth, path,
                                                  method=method))

    def connect(self, port, auth):
        return tah.one(self.h, port,
                       tah.connect_req("model-up.test:443", auth),
                       method="CONNECT")

    def wait_lines(self, path, n):
        """Wait until the log has n complete lines; return its events."""
        ev = tah.wait_events(path, lambda e: len(e) >= n)
        self.assertEqual(len(ev), n, "audit lines: %s" % json.dumps(
            ev, indent=1)[-3000:])
        return ev

    def assertNoSecrets(self, path):
        with open(path, "rb") as f:
            data = f.read()
        secrets = [("HS256 secret", tah.key_bytes(self.h.key_file)),
                   ("injected header value", self.cred.encode())]
        for t in self.tokens_used:
            secrets.append(("token", t.encode()))
            secrets.append(("token signature", t.split(".")[2].encode()))
            secrets.append(("Basic credential",
                            tah.basic("run", t).encode()))
        for what, s in secrets:
            self.assertNotIn(s, data, "%s found in the audit log" % what)

    def assertFields(self, ev, want, absent=()):
        for k, v in want.items():
            self.assertIn(k, ev, "%s lacks %s" % (ev, k))
            if callable(v):
                self.assertTrue(v(ev[k]), "%s: %s=%r" % (
                    ev["event"], k, ev[k]))
            else:
                self.assertEqual(ev[k], v, "%s field %s: %r" % (
                    ev["event"], k, ev))
        for k in absent:
            self.assertNotIn(k, ev, "%s must not carry %s: %r" % (
                ev["event"], k, ev))

    # -- the sequence ------------------------------------------------------

    def check_phases(self, ev):
        """fsync "always" (docs/audit.md): every forwarded request's start
        line comes before a byte went upstream, names who asked for what
        and says nothing of how it went; its end line, later, carries
        that. Here every start has its end (nothing was in flight)."""
        starts = [e for e in ev if e.get("phase") == "start"]
        ends = [e for e in ev if e["event"] in tah.END_OF]
        self.assertEqual(len(starts), 4, starts)  # 3 requests, 1 tunnel
        self.assertEqual(sorted(e["id"] for e in starts),
                         sorted(e["id"] for e in ends))
        seq_of = {e["id"]: e["seq"] for e in starts}
        for e in starts:
            self.assertIn(e["decision"], ("allow", "report"), e)
            self.assertEqual(e["reason"], "ok", e)
            for k in ("status", "bytes_in", "bytes_out", "duration_ms",
                      "upstream"):
                self.assertNotIn(k, e, "a start line: %r" % e)
        for e in ends:
            self.assertGreater(e["seq"], seq_of[e["id"]], e)
            self.assertIn("status", e, e)
            self.assertIn("duration_ms", e, e)
            for k in ("listener", "client", "method", "path", "jti"):
                self.assertNotIn(k, e, "an end line: %r" % e)

    def test_sequence_chain_and_tampering(self):
        fp, rp = 3410, 8410
        doc = self.make_doc("seq", fp, rp, fsync="always")
        s = tah.start_sluice(self.h, "seq", doc)
        log = doc["audit"]["path"]
        policy_sha = sha256_file(s.policy_path)
        tok = self.tok(sub="run-seq")
        jti = tah.claims_of(tok)["jti"]
        once = self.tok(sub="run-once", max_requests=1)
        expired = self.tok(now=int(time.time()) - 7200, ttl=600)
        revoked = self.tok(sub="run-rev")
        # Claims nobody signed: they must not reach the log.
        forged = tah.jws({"alg": "HS256", "kid": "k1"},
                         {"iss": ISS, "sub": "run-forged", "aud": "model",
                          "jti": "jti-forged", "iat": int(time.time()),
                          "exp": int(time.time()) + 600},
                         hs_key=b"not the key" * 4)
        self.tokens_used.append(forged)
        rev_jti = tah.claims_of(revoked)["jti"]
        bearer = "Authorization: Bearer "
        pbearer = "Proxy-Authorization: Bearer "
        n = 2  # daemon.start, policy.load
        self.wait_lines(log, n)
        up_mark = self.up.log.mark()

        def step(fn, status, lines=1):
            nonlocal n
            r = fn()
            got = r.status if hasattr(r, "status") else r
            self.assertEqual(got, status, r)
            n += lines
            self.wait_lines(log, n)

        # fsync "always": a forwarded request has a start and an end line.
        step(lambda: self.rev(rp, [bearer + tok]), 200, 2)
        step(lambda: self.rev(rp, []), 401)
        step(lambda: self.fwd(fp, [pbearer + tok]), 200, 2)
        step(lambda: self.fwd(fp, [pbearer + tok], path="/v1/other"), 403)
        step(lambda: self.fwd(fp, [pbearer + tok], method="GET"), 403)
        step(lambda: self.fwd(fp, [pbearer + expired]), 407)
        step(lambda: self.fwd(fp, [pbearer + forged]), 407)

        def tunnel():
            r = self.h.curl(["-x", "http://127.0.0.1:%d" % fp,
                             "--proxy-header", pbearer + tok, "-p",
                             "--cacert", self.h.ca.cert, "-d", "{}"],
                            "https://model-up.test/v1/messages")
            self.assertEqual(r.connect_status, 200, r)
            return r.status
        # An opaque tunnel: its start line and its connect.end.
        step(tunnel, 200, 2)
        step(lambda: self.connect(fp, []), 407)
        step(lambda: self.fwd(fp, [pbearer + once]), 200, 2)
        step(lambda: self.fwd(fp, [pbearer + once]), 429)

        s.reload()  # the same file: policy.reload
        # ... and engine.exit: the old engine, drained once the new one
        # serves the reloaded policy.
        n += 2
        ev = self.wait_lines(log, n)
        self.assertEqual([e["event"] for e in ev[-2:]],
                         ["policy.reload", "engine.exit"])
        self.assertTrue(ev[-1]["drained"])
        with open(s.policy_path, "rb") as f:
            good = f.read()
        bad = b'{"listeners": [], "bogus": 1}\n'
        with open(s.policy_path, "wb") as f:
            f.write(bad)
        s.reload()
        n += 1
        self.wait_lines(log, n)
        with open(s.policy_path, "wb") as f:
            f.write(good)
        s.reload()
        n += 2  # policy.reload, engine.exit (the old engine, drained)
        self.wait_lines(log, n)
        ans = tah.admin(doc["admin"]["socket"], "revoke " + rev_jti)
        self.assertTrue(ans.startswith("ok"), ans)
        n += 1
        self.wait_lines(log, n)
        step(lambda: self.rev(rp, [bearer + revoked]), 401)
        pid = s.pid
        tah.stop_clean(self, s)
        n += 2  # engine.exit, daemon.stop
        ev = self.wait_lines(log, n)
        # The engines' exits: after each reload and at the stop, drained.
        exits = [e for e in ev if e["event"] == "engine.exit"]
        self.assertEqual(len(exits), 3, exits)
        for e in exits:
            self.assertFields(e, {"drained": True, "status": 0})
        self.assertEqual(ev[-2]["event"], "engine.exit")
        ev = [e for e in ev if e["event"] != "engine.exit"]
        self.check_phases(ev)
        ev = tah.merge_phases(ev)

        # Exactly these events, in this order.
        names = [e["event"] for e in ev]
        self.assertEqual(names, [
            "daemon.start", "policy.load",
            "http.request", "http.request", "http.request", "http.request",
            "http.request", "http.request", "http.request",
            "connect.tunnel",
            "connect.tunnel", "http.request", "http.request",
            "policy.reload", "policy.reload_failed", "policy.reload",
            "token.revoke", "http.request", "daemon.stop"])
        client = (lambda v: isinstance(v, str) and
                  v.startswith("127.0.0.1:"))
        nonneg = (lambda v: isinstance(v, int) and v >= 0)
        pos = (lambda v: isinstance(v, int) and v > 0)
        allow = {"decision": "allow", "reason": "ok", "client": client,
                 "route": "model", "duration_ms": nonneg,
                 "upstream": self.upstream_addr, "bytes_in": pos,
                 "bytes_out": pos}
        self.assertFields(ev[0], {"version": lambda v: isinstance(v, str)
                                  and v != "", "pid": pid})
        self.assertFields(ev[1], {"sha256": policy_sha})
        with self.subTest(line=3):
            self.assertFields(ev[2], dict(
                allow, listener="rev", method="POST", path="/v1/messages",
                status=200, sub="run-seq", jti=jti))
        with self.subTest(line=4):
            self.assertFields(ev[3], dict(
                decision="deny", reason="token_missing", listener="rev",
                method="POST", path="/v1/messages", status=401,
                client=client), absent=("sub", "jti", "upstream"))
        with self.subTest(line=5):
            self.assertFields(ev[4], dict(
                allow, listener="fwd", method="POST", host="model.test",
                path="/v1/messages", status=200, sub="run-seq", jti=jti))
        with self.subTest(line=6):
            self.assertFields(ev[5], dict(
                decision="deny", reason="path_not_allowed", listener="fwd",
                route="model", method="POST", host="model.test",
                path="/v1/other", status=403), absent=("upstream",))
        with self.subTest(line=7):
            self.assertFields(ev[6], dict(
                decision="deny", reason="method_not_allowed",
                listener="fwd", route="model", method="GET",
                host="model.test", path="/v1/messages", status=403),
                absent=("upstream",))
        with self.subTest(line=8):
            # The signature of an expired token verified, so its sub and
            # jti may be logged (docs/audit.md is not explicit here).
            self.assertFields(ev[7], dict(
                decision="deny", reason="token_expired", listener="fwd",
                host="model.test", path="/v1/messages", status=407),
                absent=("upstream",))
            if "sub" in ev[7]:
                self.assertEqual(ev[7]["sub"], "run-1")
        with self.subTest(line=9, what="bad signature"):
            self.assertFields(ev[8], dict(
                decision="deny", reason="token_bad_signature",
                listener="fwd", status=407),
                absent=("sub", "jti", "upstream"))
        with self.subTest(line=10, what="allowed tunnel"):
            self.assertFields(ev[9], dict(
                allow, listener="fwd", status=200, sub="run-seq", jti=jti),
                absent=("path",))
        with self.subTest(line=10, what="allowed tunnel host"):
            self.assertFields(ev[9], dict(host="model-up.test:443"))
        with self.subTest(line=11, what="denied tunnel"):
            # docs/audit.md: host is the CONNECT target host:port, and
            # bytes_* only when an (allowed) tunnel closes.
            self.assertFields(ev[10], dict(
                decision="deny", reason="token_missing", listener="fwd",
                status=407), absent=("path", "sub", "jti", "upstream"))
        with self.subTest(line=11, what="denied tunnel host"):
            self.assertFields(ev[10], dict(host="model-up.test:443"))
        with self.subTest(line=11, what="denied tunnel bytes"):
            self.assertFields(ev[10], {}, absent=("bytes_in", "bytes_out"))
        with self.subTest(line=12):
            self.assertFields(ev[11], dict(allow, listener="fwd",
                                           status=200, sub="run-once"))
        with self.subTest(line=13):
            self.assertFields(ev[12], dict(
                decision="deny", reason="budget_exhausted", listener="fwd",
                route="model", status=429, sub="run-once"),
                absent=("upstream",))
        self.assertFields(ev[13], {"sha256": policy_sha}, absent=("error",))
        with self.subTest(line=15, what="policy.reload_failed"):
            self.assertFields(ev[14], {"error": lambda v: isinstance(v, str)
                                       and s.policy_path in v})
            # docs/audit.md: sha256 "when the file could be read".
            self.assertFields(ev[14], {"sha256": hashlib.sha256(
                bad).hexdigest()})
        self.assertFields(ev[15], {"sha256": policy_sha})
        self.assertFields(ev[16], {"jti": rev_jti, "uid": 0})
        with self.subTest(line=18):
            self.assertFields(ev[17], dict(
                decision="deny", reason="token_revoked", listener="rev",
                status=401))
        self.assertFields(ev[18], {"pid": pid})
        # Upstream: the four allowed requests (one inside the tunnel).
        self.assertEqual(len(self.up.log.since(up_mark, "request")), 4)

        self.assertNoSecrets(log)
        self.assertEqual(stat.S_IMODE(os.stat(log).st_mode), 0o640,
                         "audit file mode (docs/audit.md: 0640)")

        # The chain: independently, then with sluice audit verify.
        lines = tah.read_lines(log)
        self.assertEqual(tah.check_chain(lines, prev=tah.ZERO_HASH,
                                         seq=0), [])
        p = tah.audit_verify([log])
        self.assertEqual(p.returncode, 0, p)
        self.assertIn("%d line(s)" % len(lines), p.stdout)
        self.assertIn(hashlib.sha256(lines[-1]).hexdigest()[:4], p.stdout)
        head = os.path.join(doc["state_dir"], "audit.head")
        with open(head) as f:
            self.assertEqual(f.read(), "%d %s\n" % (
                len(lines), hashlib.sha256(lines[-1]).hexdigest()))
        p = tah.audit_verify([log], head=head)
        self.assertEqual(p.returncode, 0, p)

        self.check_tampering(lines, head)

    def check_tampering(self, lines, head):
        """One byte changed in each line in turn: sluice audit verify
        exits 1 naming that line (the last line only with --head: the
        chain alone cannot see it); the independent check agrees."""
        copy = os.path.join(self.h.tmp, "tampered.jsonl")
        ts_digit = len('{"ts":"2026-11-30T04:22:36.12345')
        for i in range(len(lines)):
            edits = [ts_digit]
            j = lines[i].find(b'"status":')
            if j >= 0:
                edits.append(j + len(b'"status":'))
            for off in edits:
                with self.subTest(line=i + 1, offset=off):
                    b = bytearray(lines[i])
                    self.assertTrue(chr(b[off]).isdigit(), lines[i])
                    b[off] = ord("0") + (b[off] - ord("0") + 1) % 10
                    changed = lines[:i] + [bytes(b)] + lines[i + 1:]
                    with open(copy, "wb") as f:
                        f.write(b"\n".join(changed) + b"\n")
                    last = i == len(lines) - 1
                    p = tah.audit_verify([copy], head=head if last else None)
                    self.assertEqual(p.returncode, 1, p)
                    self.assertIn("%s:%d:" % (copy, i + 1), p.stderr, p)
                    self.assertNotIn("%s:%d:" % (copy, i + 2),
                                     p.stderr.split("\n")[0])
                    if not last:
                        probs = tah.check_chain(changed)
                        self.assertTrue(
                            probs and probs[0].startswith(
                                "line %d:" % (i + 2)), probs)
        # The last line's own prev, without --head.
        b = bytearray(lines[-1])
        k = b.index(b'"prev":"') + len(b'"prev":"')
        b[k] = ord("0") if b[k] != ord("0") else ord("1")
        with open(copy, "wb") as f:
            f.write(b"\n".join(lines[:-1] + [bytes(b)]) + b"\n")
        p = tah.audit_verify([copy])
        self.assertEqual(p.returncode, 1, p)
        self.assertIn("%s:%d:" % (copy, len(lines)), p.stderr, p)

    # -- rotation ----------------------------------------------------------

    def test_rotation_sigusr1(self):
        fp, rp = 3420, 8420
        doc = self.make_doc("rot", fp, rp)
        s = tah.start_sluice(self.h, "rot", doc, "1")
        log = doc["audit"]["path"]
        old = log + ".1"
        tok = self.tok(sub="run-rot")
        auth = ["Authorization: Bearer " + tok]
        for _ in range(2):
            self.assertEqual(self.rev(rp, auth).status, 200)
        self.wait_lines(log, 4)
        os.rename(log, old)
        # Until the signal, lines go on into the renamed file.
        self.assertEqual(self.rev(rp, auth).status, 200)
        self.wait_lines(old, 5)
        s.signal(signal.SIGUSR1)
        self.assertTrue(st.wait_until(lambda: os.path.exists(log),
                                      st.ENV.slow(3)),
                        "SIGUSR1 did not create a new file")
        for _ in range(3):
            self.assertEqual(self.rev(rp, auth).status, 200)
        self.wait_lines(log, 3)
        old_lines = tah.read_lines(old)
        self.assertEqual(len(old_lines), 5, "lines after SIGUSR1 went to "
                         "the old file")
        new_lines = tah.read_lines(log)
        first = dict(tah.parse_line(new_lines[0]))
        last_old = dict(tah.parse_line(old_lines[-1]))
        self.assertEqual(first["prev"],
                         hashlib.sha256(old_lines[-1]).hexdigest())
        self.assertEqual(first["seq"], last_old["seq"] + 1)
        head = os.path.join(doc["state_dir"], "audit.head")
        with open(head) as f:
            self.assertEqual(f.read(), "%d %s\n" % (
                last_old["seq"], hashlib.sha256(old_lines[-1]).hexdigest()))
        self.assertEqual(tah.check_chain(old_lines + new_lines,
                                         prev=tah.ZERO_HASH, seq=0), [])
        p = tah.audit_verify([old, log])
        self.assertEqual(p.returncode, 0, p)
        self.assertIn("2 file(s)", p.stdout)
        self.assertEqual(tah.audit_verify([log]).returncode, 0)
        p = tah.audit_verify([log, old])  # wrong order
        self.assertEqual(p.returncode, 1, p)

        # Rotated away while stopped: the restart continues from
        # audit.head.
        tah.stop_clean(self, s)
        new_lines = tah.read_lines(log)
        old2 = log + ".2"
        os.rename(log, old2)
        s = tah.start_sluice(self.h, "rot", doc, "2")
        self.assertEqual(self.rev(rp, auth).status, 200)
        third = self.wait_lines(log, 3)
        self.assertEqual(third[0]["event"], "daemon.start")
        self.assertEqual(third[0]["seq"],
                         dict(tah.parse_line(new_lines[-1]))["seq"] + 1)
        self.assertEqual(third[0]["prev"],
                         hashlib.sha256(new_lines[-1]).hexdigest())
        tah.stop_clean(self, s)
        p = tah.audit_verify([old, old2, log])
        self.assertEqual(p.returncode, 0, p)
        self.assertNoSecrets(old)

    # -- a full filesystem -------------------------------------------------

    def mount_tmpfs(self, d):
        os.makedirs(d, mode=0o700)
        p = st.run(["mount", "-t", "tmpfs", "-o",
                    "size=64k,mode=0700,nosuid,nodev", "tmpfs", d],
                   check=False)
        if p.returncode != 0:
            self.skipTest("cannot mount a tmpfs: %s" % p.stderr.strip())

        def umount():
            if st.run(["umount", d], check=False).returncode != 0:
                st.run(["umount", "-l", d], check=False)
        st.CLEANUP.push(umount)
        return umount

    def test_full_filesystem_on_error_deny(self):
        fp, rp = 3430, 8430
        fsdir = os.path.join(self.h.tmp, "auditfs")
        umount = self.mount_tmpfs(fsdir)
        log = os.path.join(fsdir, "audit.jsonl")
        doc = self.make_doc("full", fp, rp, fsync="always", audit_path=log,
                            metrics=True)
        self.assertEqual(doc["audit"]["on_error"], "deny")
        msock = doc["metrics"]["listen"][len("unix:"):]
        s = tah.start_sluice(self.h, "full", doc)
        try:
            self.full_filesystem(s, log, fsdir, fp, rp, msock)
        finally:
            s.stop()
            umount()

    def full_filesystem(self, s, log, fsdir, fp, rp, msock):
        tok = self.tok(sub="run-full")
        auth = ["Authorization: Bearer " + tok]
        self.assertEqual(self.rev(rp, auth).status, 200)
        self.wait_lines(log, 4)  # start, policy, and the request's two
        # Fill the filesystem: big writes, then single bytes.
        filler = os.path.join(fsdir, "filler")
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            for size in (4096, 1):
                while True:
                    try:
                        os.write(fd, b"x" * size)
                    except OSError as e:
                        self.assertEqual(e.errno, errno.ENOSPC)
                        break
        finally:
            os.close(fd)
        # Lines still fit in the audit file's last page; requests pass
        # until a line does not fit, then the request is refused. With
        # fsync "always" each request is two lines of different sizes,
        # and each new line retries the write (docs/audit.md): a shorter
        # line that still fits ends the failed state, so the next request
        # may pass again until its own start line does not fit.
        m = self.up.log.mark()
        statuses = []
        for _ in range(40):
            r = self.rev(rp, auth)
            statuses.append(r.status)
            if r.status != 200:
                self.assertDenied(r, 503, "audit_unavailable")
                break
        self.assertEqual(statuses[-1], 503, "never refused: %r" % statuses)
        self.assertEqual(set(statuses[:-1]), {200} if statuses[:-1]
                         else set())
        for _ in range(2):
            for r in (self.rev(rp, auth),
                      self.fwd(fp, ["Proxy-Authorization: Bearer " + tok])):
                statuses.append(r.status)
                if r.status != 200:
                    self.assertDenied(r, 503, "audit_unavailable")
        time.sleep(0.1)
        self.assertTrue(s.alive(), s.stderr()[-1000:])
        _, _, _, _, smp = tah.scrape(msock)
        self.assertGreaterEqual(
            tah.metric(smp, "sluice_audit_write_errors_total"), 1)

        # What is in the file now: whole, chained lines only.
        with open(log, "rb") as f:
            data = f.read()
        self.assertTrue(data.endswith(b"\n"), "a partial line was left")
        lines = tah.read_lines(log)
        self.assertEqual(tah.check_chain(lines, prev=tah.ZERO_HASH,
                                         seq=0), [])
        self.assertEqual(tah.audit_verify([log]).returncode, 0)
        # The promise of "always": nothing went upstream without its
        # start line on disk first. Every request the upstream saw has
        # one, every 200 reached the upstream, no refusal did.
        starts = [e for e in tah.events(log) if e.get("phase") == "start"
                  and e.get("sub") == "run-full"]
        seen = len(self.up.log.since(m, "request"))
        self.assertEqual(seen, statuses.count(200), statuses)
        self.assertEqual(len(starts) - 1, seen,
                         "start lines %d, upstream requests %d after the "
                         "first" % (len(starts), seen))

        # Space returns: the next request passes (docs/audit.md allows
        # one more refusal, whose own line ends the failed state).
        os.unlink(filler)
        after = [self.rev(rp, auth).status]
        if after[0] != 200:
            after.append(self.rev(rp, auth).status)
        self.assertEqual(after[-1], 200, "no recovery: %r" % after)
        self.assertLessEqual(len(after), 2)
        if len(after) == 2:
            print("note: the first request after space returned was "
                  "refused (%r)" % after, file=sys.stderr)
        _, _, _, _, smp = tah.scrape(msock)
        self.assertEqual(tah.metric(smp, "sluice_audit_failed"), 0)
        # The daemon runs as its user and non-dumpable: /proc/self/fd is
        # not readable then, and the probe counts the descriptors.
        fds = tah.metric(smp, "process_open_fds")
        self.assertGreater(fds, 5)  # listeners, audit, budget, sockets
        self.assertLess(fds, 200)
        self.assertGreater(tah.metric(smp, "process_resident_memory_bytes"),
                           1 << 20)
        self.assertAlmostEqual(
            tah.metric(smp, "sluice_policy_last_load_timestamp_seconds"),
            time.time(), delta=120)
        self.assertEqual(tah.metric(smp, "sluice_budget_entries_limit"),
                         65536 // 4 * 3)
        kinds = {l.get("kind") for n, l, v in smp
                 if n == "sluice_upstream_errors_total"}
        self.assertEqual(kinds, {"dns", "destination", "connect", "timeout",
                                 "tls", "tls_verify", "pin"})
        tah.stop_clean(self, s)
        self.assertNoSecrets(log)
        lines = tah.read_lines(log)
        self.assertEqual(tah.check_chain(lines, prev=tah.ZERO_HASH,
                                         seq=0), [])
        p = tah.audit_verify([log])
        self.assertEqual(p.returncode, 0, p)
        self.assertEqual(tah.events(log)[-1]["event"], "daemon.stop")

    # -- metrics -----------------------------------------------------------

    def test_metrics(self):
        fp, rp = 3440, 8440
        doc = self.make_doc("met", fp, rp, metrics=True)
        s = tah.start_sluice(self.h, "met", doc)
        msock = doc["metrics"]["listen"][len("unix:"):]
        self.assertEqual(stat.S_IMODE(os.stat(msock).st_mode), 0o600)
        status, hdrs, types, helps, smp = tah.scrape(msock)
        self.assertEqual(status, 200)
        ctype = dict((n.lower(), v) for n, v in hdrs).get("content-type", "")
        self.assertTrue(ctype.startswith("text/plain; version=0.0.4"), ctype)
        want = {
            "sluice_build_info": "gauge",
            "sluice_requests_total": "counter",
            "sluice_tunnels_total": "counter",
            "sluice_bytes_in_total": "counter",
            "sluice_bytes_out_total": "counter",
            "sluice_request_duration_seconds": "histogram",
            "sluice_tunnel_duration_seconds": "histogram",
            "sluice_upstream_connect_seconds": "histogram",
            "sluice_upstream_tls_handshake_seconds": "histogram",
            "sluice_connections_active": "gauge",
            "sluice_upstream_pool_idle_connections": "gauge",
            "sluice_token_cache_hits_total": "counter",
            "sluice_token_cache_misses_total": "counter",
            "sluice_audit_write_errors_total": "counter",
            "sluice_audit_failed": "gauge",
            "sluice_kernel_drops_total": "counter",
            "sluice_policy_reloads_total": "counter",
            "sluice_policy_last_load_timestamp_seconds": "gauge",
            "sluice_upstream_errors_total": "counter",
            "sluice_budget_entries": "gauge",
            "sluice_budget_entries_limit": "gauge",
            "process_open_fds": "gauge",
            "process_max_fds": "gauge",
            "process_resident_memory_bytes": "gauge",
            "process_start_time_seconds": "gauge",
            "sluice_response_secret_headers_dropped_total": "counter",
            "sluice_upstream_response_seconds": "histogram",
        }
        for fam, typ in want.items():
            with self.subTest(family=fam):
                self.assertEqual(types.get(fam), typ)
                self.assertTrue(helps.get(fam), "no HELP for %s" % fam)
        info = [(l, v) for n, l, v in smp if n == "sluice_build_info"]
        self.assertEqual(len(info), 1, info)
        self.assertTrue(info[0][0].get("version"))
        self.assertEqual(info[0][1], 1)
        self.assertEqual(tah.metric(smp, "sluice_audit_failed"), 0)

        # Traffic: a fresh token used 3 times (1 miss, 2 hits), 2
        # denials, one tunnel, one reload that works and one that fails.
        tok = self.tok(sub="run-met")
        for _ in range(3):
            self.assertEqual(self.rev(rp, ["Authorization: Bearer " + tok])
                             .status, 200)
        for _ in range(2):
            self.assertEqual(self.rev(rp, []).status, 401)
        r = self.h.curl(["-x", "http://127.0.0.1:%d" % fp, "--proxy-header",
                         "Proxy-Authorization: Bearer " + tok, "-p",
                         "--cacert", self.h.ca.cert, "-d", "{}"],
                        "https://model-up.test/v1/messages")
        self.assertEqual(r.status, 200, r)
        log = doc["audit"]["path"]

        def reload_and_wait(event):
            k = len([e for e in tah.events(log) if e["event"] == event])
            s.reload()
            tah.wait_events(log, lambda ev: len(
                [e for e in ev if e["event"] == event]) > k)
        reload_and_wait("policy.reload")
        with open(s.policy_path, "rb") as f:
            good = f.read()
        with open(s.policy_path, "wb") as f:
            f.write(b"{")
        reload_and_wait("policy.reload_failed")
        with open(s.policy_path, "wb") as f:
            f.write(good)

        def scraped():
            _, _, _, _, after = tah.scrape(msock)
            if tah.metric(after, "sluice_tunnels_total", decision="allow"):
                return after
            return None
        after = st.wait_until(scraped, st.ENV.slow(5), 0.1)
        self.assertTrue(after, "the tunnel was never counted")

        def delta(name, **labels):
            return ((tah.metric(after, name, **labels) or 0) -
                    (tah.metric(smp, name, **labels) or 0))
        self.assertEqual(delta("sluice_requests_total", route="model",
                               decision="allow", reason="ok"), 3)
        self.assertEqual(delta("sluice_requests_total", decision="deny",
                               reason="token_missing"), 2)
        self.assertEqual(delta("sluice_tunnels_total", route="model",
                               decision="allow", reason="ok"), 1)
        self.assertEqual(delta("sluice_token_cache_misses_total"), 1)
        self.assertGreaterEqual(delta("sluice_token_cache_hits_total"), 2)
        self.assertGreater(delta("sluice_bytes_in_total", route="model"), 0)
        self.assertGreater(delta("sluice_bytes_out_total", route="model"), 0)
        self.assertGreaterEqual(
            delta("sluice_upstream_response_seconds_count", route="model"), 3)
        self.assertGreaterEqual(
            delta("sluice_request_duration_seconds_count"), 3)
        self.assertEqual(delta("sluice_policy_reloads_total", outcome="ok"),
                         1)
        self.assertEqual(delta("sluice_policy_reloads_total",
                               outcome="failed"), 1)
        self.assertGreaterEqual(
            delta("sluice_upstream_tls_handshake_seconds_count"), 1)
        self.check_histogram(after, "sluice_request_duration_seconds")
        self.check_histogram(after, "sluice_upstream_connect_seconds")

        # Nothing else is served there.
        st_, _, _ = tah.http_unix(msock, b"GET /other HTTP/1.1\r\nHost: s"
                                  b"\r\nConnection: close\r\n\r\n")
        self.assertEqual(st_, 404)
        st_, _, _ = tah.http_unix(msock, b"POST /metrics HTTP/1.1\r\nHost: "
                                  b"s\r\nContent-Length: 0\r\nConnection: "
                                  b"close\r\n\r\n")
        self.assertEqual(st_, 405)
        tah.stop_clean(self, s)
        self.assertNoSecrets(log)

    def check_histogram(self, smp, fam):
        buckets = [(l["le"], v) for n, l, v in smp if n == fam + "_bucket"]
        self.assertTrue(buckets, fam)
        self.assertEqual(buckets[-1][0], "+Inf")
        les = [float(le) for le, _ in buckets]
        self.assertEqual(les, sorted(les), fam)
        vals = [v for _, v in buckets]
        self.assertEqual(vals, sorted(vals), "%s not cumulative" % fam)
        self.assertEqual(vals[-1], tah.metric(smp, fam + "_count"))
        self.assertIsNotNone(tah.metric(smp, fam + "_sum"))


if __name__ == "__main__":
    st.main()
