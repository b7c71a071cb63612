"""`sluice audit tail` and `sluice audit stats` (docs/audit.md "Reading the
log") with the real binary: lines as the writer makes them, including
hostile strings a sandbox controls (a terminal escape, a forged newline,
C1 controls, bytes that are not UTF-8 after unescaping), aggregated
refusals (`count`), filters, colour, follow across a rotation, and the
stats table's sums.

No network: the log files are written here, in the writer's format."""

import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "lib"))

from sluicetest.base import ENV  # noqa: E402

TS = "2026-12-02T01:02:03.456789Z"


def line(seq, event, **kw):
    d = {"ts": TS, "seq": seq, "event": event}
    d.update(kw)
    return json.dumps(d, separators=(",", ":")) + "\n"


def req(seq, decision, reason, status, **kw):
    d = dict(decision=decision, reason=reason, status=status,
             listener="fwd", client="127.0.0.1:4000", method="POST",
             host="model.test", path="/v1/messages")
    d.update(kw)
    return line(seq, "http.request", **d)


LOG = "".join([
    line(1, "daemon.start", version="0.1.0", pid=1),
    req(2, "allow", "ok", 200, route="model", sub="run-a", bytes_in=10,
        bytes_out=100),
    req(3, "allow", "ok", 200, route="model", sub="run-a", bytes_in=5,
        bytes_out=50),
    req(4, "deny", "path_not_allowed", 403, route="model", sub="run-b",
        path="/v1/\u001b[2J\u001b]0;pwned\u0007\nfake line\u0085x\ufffd"),
    req(5, "deny", "token_missing", 407, count=41),
    line(6, "connect.tunnel", decision="allow", reason="upstream_timeout",
         status=200, route="model", sub="run-b", host="model.test:443",
         bytes_in=7, bytes_out=3),
    line(7, "net.drop", proto="udp", src="198.18.1.2", dst="198.18.9.9",
         dport=53, count=3),
])


class TestAuditView(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="sluice-auditview-")
        self.log = os.path.join(self.tmp, "audit.jsonl")
        with open(self.log, "w") as f:
            f.write(LOG)

    def tearDown(self):
        for n in os.listdir(self.tmp):
            os.unlink(os.path.join(self.tmp, n))
        os.rmdir(self.tmp)

    def run_sluice(self, *args, **kw):
        return subprocess.run([ENV.bin, "audit"] + list(args),
                              capture_output=True, timeout=30, **kw)

    def test_tail_lines_and_escapes(self):
        p = self.run_sluice("tail", self.log)
        self.assertEqual(p.returncode, 0, p)
        out = p.stdout
        lines = out.decode().splitlines()
        self.assertEqual(len(lines), 7, out)
        # Nothing a terminal acts on: no ESC, BEL, C1 or a forged line.
        for bad in (b"\x1b", b"\x07", b"\xc2\x85"):
            self.assertNotIn(bad, out)
        self.assertIn("\\x1b[2J", lines[3])
        self.assertIn("\\x0afake line", lines[3])
        self.assertIn("\\xc2\\x85x\ufffd", lines[3])  # U+FFFD stays
        self.assertTrue(lines[1].startswith("2026-12-02 01:02:03.456 "),
                        lines[1])
        self.assertIn("http.request", lines[1])
        self.assertIn("POST model.test/v1/messages", lines[1])
        self.assertIn("route=model sub=run-a", lines[1])
        self.assertIn(" x41", lines[4])
        self.assertIn("net.drop", lines[6])
        self.assertIn("dst=198.18.9.9", lines[6])

    def test_tail_filters_and_colour(self):
        p = self.run_sluice("tail", "--deny", self.log)
        got = p.stdout.decode().splitlines()
        self.assertEqual(len(got), 2, got)
        self.assertTrue(all(" deny " in g for g in got), got)
        p = self.run_sluice("tail", "--sub", "run-b", self.log)
        got = p.stdout.decode().splitlines()
        self.assertEqual(len(got), 2, got)
        self.assertIn("path_not_allowed", got[0])
        self.assertIn("connect.tunnel", got[1])
        # Not a terminal: no colour unless asked for.
        self.assertNotIn(b"\x1b[", self.run_sluice("tail", self.log).stdout)
        p = self.run_sluice("tail", "--color=always", self.log)
        lines = p.stdout.split(b"\n")
        self.assertTrue(lines[1].startswith(b"\x1b[32m"), lines[1])  # ok
        self.assertTrue(lines[3].startswith(b"\x1b[31m"), lines[3])  # deny
        self.assertTrue(lines[5].startswith(b"\x1b[33m"), lines[5])  # error
        self.assertTrue(lines[1].endswith(b"\x1b[0m"), lines[1])
        for bad in (["tail"], ["tail", "--color=sometimes", self.log],
                    ["tail", self.log, self.log], ["stats"]):
            p = self.run_sluice(*bad)
            self.assertEqual(p.returncode, 2, (bad, p))
            self.assertIn(b"usage: sluice audit", p.stderr)
        p = self.run_sluice("tail", os.path.join(self.tmp, "missing"))
        self.assertEqual(p.returncode, 1, p)

    def test_tail_follow_and_rotation(self):
        proc = subprocess.Popen([ENV.bin, "audit", "tail", "-f", self.log],
                                stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        try:
            time.sleep(0.5)
            with open(self.log, "a") as f:
                f.write(req(8, "deny", "route_not_found", 403, host="x.test"))
            time.sleep(0.6)
            os.rename(self.log, self.log + ".1")
            with open(self.log, "w") as f:
                f.write(req(9, "deny", "method_denied", 403, host="y.test"))
            time.sleep(1.0)
        finally:
            proc.terminate()
            out, err = proc.communicate(timeout=10)
        lines = out.decode().splitlines()
        self.assertEqual(len(lines), 9, (lines, err))
        self.assertIn("route_not_found", lines[7])
        self.assertIn("method_denied", lines[8])  # the new file after rename

    def test_stats(self):
        p = self.run_sluice("stats", self.log, self.log)
        self.assertEqual(p.returncode, 0, p)
        rows = [r.split() for r in p.stdout.decode().splitlines()]
        table = {tuple(r[:3]): r[3:] for r in rows if len(r) == 6}
        # Both files: every count and sum doubled.
        self.assertEqual(table[("model", "allow", "ok")],
                         ["4", "30", "300"])
        self.assertEqual(table[("-", "deny", "token_missing")],
                         ["82", "0", "0"])  # count=41 twice
        self.assertEqual(table[("model", "allow", "upstream_timeout")],
                         ["2", "14", "6"])
        subs = {tuple(r[:2]): r[2:] for r in rows if len(r) == 5}
        self.assertEqual(subs[("run-a", "allow")], ["4", "30", "300"])
        self.assertEqual(subs[("run-b", "deny")], ["2", "0", "0"])
        self.assertIn("14 lines", p.stdout.decode())
        self.assertNotIn(b"\x1b", p.stdout)
        p = self.run_sluice("stats", os.path.join(self.tmp, "missing"))
        self.assertEqual(p.returncode, 1, p)

    def test_stats_joins_start_and_end_lines(self):
        """fsync "always" (docs/audit.md "Two lines with always"): a
        start line and its end line count as one request, with the
        route and sub of the start and the decision, reason and bytes of
        the end; a start without an end (in flight at a crash) counts as
        it started; an end whose start is not in the files is left out."""
        two = "".join([
            req(1, "allow", "ok", 200, id="r1", phase="start",
                route="model", sub="run-c"),
            req(2, "allow", "ok", 200, id="r2", phase="start",
                route="model", sub="run-c"),
            line(3, "http.end", id="r1", decision="allow",
                 reason="upstream_reset", status=200, bytes_in=11,
                 bytes_out=22),
            req(4, "deny", "path_not_allowed", 403, id="r3",
                route="model", sub="run-c"),
            line(5, "http.end", id="r9", decision="allow", reason="ok",
                 status=200, bytes_in=1, bytes_out=1),
        ])
        path = os.path.join(self.tmp, "two.jsonl")
        with open(path, "w") as f:
            f.write(two)
        p = self.run_sluice("stats", path)
        self.assertEqual(p.returncode, 0, p)
        rows = [r.split() for r in p.stdout.decode().splitlines()]
        table = {tuple(r[:3]): r[3:] for r in rows if len(r) == 6}
        self.assertEqual(table, {
            ("model", "allow", "upstream_reset"): ["1", "11", "22"],
            ("model", "allow", "ok"): ["1", "0", "0"],  # r2, in flight
            ("model", "deny", "path_not_allowed"): ["1", "0", "0"],
            ("route", "decision", "reason"): ["requests", "bytes_in",
                                              "bytes_out"]})
        subs = {tuple(r[:2]): r[2:] for r in rows if len(r) == 5}
        self.assertEqual(subs[("run-c", "allow")], ["2", "11", "22"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
