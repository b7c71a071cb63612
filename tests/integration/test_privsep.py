#!/usr/bin/env python3
"""Privilege separation (DESIGN.md "Privilege separation and
self-confinement"): `sluice run` is a privileged parent (the pid started;
as `user` with CAP_NET_ADMIN and CAP_SETPCAP only, holding the kernel
rules, the audit file and the admin socket) and an *engine* it forks that
proxies: as `user`, no capabilities at all (bounding set included),
no_new_privs, a seccomp filter, Landlock, no netlink socket.

What is checked, each in sidecar mode with kernel rules and `user`:

1. the parent's and the engine's credentials, capabilities and
   confinement as /proc shows them, and no netlink socket in the engine
   (the parent holding some is the control); Landlock (with gdb): a
   world-readable file cannot be opened by the engine, nor one created;
2. kill -9 of the engine under load: engine.exit (signal 9) audited, a new
   engine within 1 s holding the same listener (no connection refused,
   every request started once the old engine was gone is served), a
   token's budget spent exactly once across the restart, the metrics
   counters kept (shared memory), the nft table unchanged;
3. the SIGSYS test hook: a forbidden syscall kills the engine (31),
   audited, restarted;
4. the badmsg test hooks: a malformed message from the engine gets it
   killed (9); one from the parent makes the engine exit 3; the parent
   lives on and a new engine serves each time;
5. kill -9 of the parent: the engine is gone within 2 s, the rules stay
   and the sandbox still cannot reach the upstream;
6. SIGHUP with an SSE stream in flight: the stream completes on the old
   engine, which then exits drained (status 0); a new request is served
   by the new engine (its pid, seen with ss) under the new policy;
7. `--single-process`: `privsep 0`, no child process, requests served;
8. SIGTERM with a stream in flight: it completes, the engine exits
   drained, daemon.stop is written, exit 0.
9. an engine taken over (the ask test hook) asks the parent for
   destinations no route dials: none is resolved or put in the kernel
   set, while a routed name still is.

`sluice audit verify` (and an independent chain check) passes on every
test's audit log. The hook tests (3, 4, 9) are skipped unless `sluice
--version` says it was built with test hooks (-DSLUICE_TEST_HOOKS=ON).

Topology: netns sbx (sluice, clients as root or uid 12345) <-veth-> netns
up (fakeup, plain HTTP, on 198.18.120.2:80)."""

import errno
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import token_audit_harness as tah  # noqa: E402
from token_audit_harness import st  # noqa: E402
from sluicetest import policy as pol  # noqa: E402
from sluicetest.http import StreamReader, build_request  # noqa: E402

SLUICE_USER = "daemon"  # an existing non-root account
WORKLOAD_UID = 12345    # the sandbox's code (no passwd entry needed)
TABLE = "sluiceps"
PY_ANY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") \
    else sys.executable
CAP_SETPCAP, CAP_NET_ADMIN = 8, 12
PARENT_CAPS = (1 << CAP_SETPCAP) | (1 << CAP_NET_ADMIN)
SIGSYS = 31
HOOK_LINE = "built with test hooks"


# -- /proc -----------------------------------------------------------------

def proc_status(pid):
    """/proc/PID/status as a dict, or None when the pid is gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            text = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    out = {}
    for line in text.splitlines():
        k, _, v = line.partition(":")
        out[k] = v.strip()
    return out


def gone(pid):
    """The process has exited (a zombie not reaped yet counts as gone)."""
    s = proc_status(pid)
    return s is None or s.get("State", "").startswith("Z")


def children(pid):
    """Live processes whose parent is pid."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        s = proc_status(int(d))
        if s and s.get("PPid") == str(pid) and not \
                s.get("State", "").startswith("Z"):
            out.append(int(d))
    return sorted(out)


SCHED_OTHER, SCHED_BATCH = 0, 3


def sched_policies(pid):
    """{tid: scheduling policy} of pid's threads (/proc/PID/task/TID/stat,
    field 41)."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
            # comm (field 2) may hold spaces: count after its ')'.
            fields = f.read().rpartition(")")[2].split()
        out[int(tid)] = int(fields[41 - 3])
    return out


def fd_targets(pid):
    """{fd: readlink target} of a process."""
    out = {}
    d = "/proc/%d/fd" % pid
    for fd in os.listdir(d):
        try:
            out[int(fd)] = os.readlink(os.path.join(d, fd))
        except OSError:
            pass
    return out


def socket_inodes(pid):
    return {int(m.group(1)) for t in fd_targets(pid).values()
            for m in [re.match(r"^socket:\[(\d+)\]$", t)] if m}


def netlink_inodes(pid):
    """Inodes of every netlink socket in pid's network namespace."""
    with open("/proc/%d/net/netlink" % pid) as f:
        lines = f.read().splitlines()
    col = lines[0].split().index("Inode")
    return {int(l.split()[col]) for l in lines[1:] if l.split()}


def unix_inodes(pid, path):
    """Inodes of the unix sockets bound to path in pid's namespace."""
    with open("/proc/%d/net/unix" % pid) as f:
        lines = f.read().splitlines()
    out = set()
    for l in lines[1:]:
        f = l.split()
        if len(f) >= 8 and f[7] == path:
            out.add(int(f[6]))
    return out


def caps(status, name):
    return int(status[name], 16)


# -- other helpers ---------------------------------------------------------

def hooks_built():
    p = st.run([st.ENV.bin, "--version"], check=False)
    return HOOK_LINE in p.stdout


def strip_counters(text):
    """An nft listing without what changes by itself (counters, expiry)."""
    text = re.sub(r"counter packets \d+ bytes \d+ ?", "", text)
    return re.sub(r" expires [0-9hms]+", "", text)


CLIENT = r"""
import socket, sys
s = socket.socket()
s.settimeout(float(sys.argv[3]))
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
    print("ok")
except socket.timeout:
    print("timeout")
except OSError as e:
    print("error %s" % e.errno)
"""


class Result:
    """One request of a load thread: when it started and ended, and its
    outcome (the status, or the name of the exception)."""

    def __init__(self, t0, t1, outcome):
        self.t0, self.t1, self.outcome = t0, t1, outcome

    def __repr__(self):
        return "<%.3f+%.3f %s>" % (self.t0, self.t1 - self.t0, self.outcome)


class TestPrivsep(st.ProxyTestCase):
    TAG = "privsep"
    X = 120
    UP_HOSTS = (2, 3, 53)

    @classmethod
    def build(cls):
        h, t = cls.h, cls.h.topo
        cls.up = h.fakeup("up", ["%s:80" % t.v4(2)])
        cls.hooks = hooks_built()
        cls.uid = pwd.getpwnam(SLUICE_USER).pw_uid
        cls.gid = pwd.getpwnam(SLUICE_USER).pw_gid
        # A reload runs as `user`: it must reach the policy and the key.
        os.chmod(h.tmp, 0o711)
        os.chown(h.key_file, cls.uid, -1)
        cls.tok = h.token("model")

    # -- sluice ------------------------------------------------------------

    def nft(self, *args, check=True):
        return st.run(st.ns_exec(self.h.sbx, ["nft"] + list(args)),
                      check=check)

    def drop_table(self):
        self.nft("delete", "table", "inet", TABLE, check=False)

    def table(self):
        p = self.nft("list", "table", "inet", TABLE, check=False)
        self.assertEqual(p.returncode, 0, "the table is gone: %s" % p.stderr)
        return strip_counters(p.stdout)

    def make_doc(self, name, port, prefixes=("/v1/echo", "/v1/stream")):
        t = self.h.topo
        routes = [pol.route("model", ["model.test"], "http://%s:80/" % t.v4(2),
                            None, methods=("GET", "POST"),
                            prefixes=list(prefixes), connect=False,
                            allow_plaintext=True)]
        doc = self.h.policy(name, [pol.forward("fwd", "127.0.0.1:%d" % port)],
                            routes, {"drain_timeout_ms": 5000})
        doc["user"] = SLUICE_USER
        doc["netpolicy"] = {"mode": "sidecar", "table": TABLE,
                            "allow_loopback": True, "resolvers": [],
                            "log_group": 12, "flush_on_exit": False}
        doc["metrics"] = {"listen": "127.0.0.1:%d" % (port + 1000)}
        return doc

    def write_doc(self, name, doc):
        path = self.h.write_policy(name, doc)
        # Readable by `user` for a reload (the harness writes 0700/0600);
        # the directory is watched for the revoked file.
        os.chmod(os.path.dirname(path), 0o755)
        os.chown(path, self.uid, -1)
        return path

    def start(self, name, port, extra_args=(), hook=None, doc=None):
        """A fresh table, then sluice on its own port; (sluice, doc)."""
        self.drop_table()
        self.addCleanup(self.drop_table)
        if doc is None:
            doc = self.make_doc(name, port)
        path = self.write_doc(name, doc)
        env = dict(os.environ)
        env.pop("SLUICE_TEST_HOOK", None)
        if hook:
            env["SLUICE_TEST_HOOK"] = hook
        s = st.Sluice(self.h.sbx, path, "sluice-" + name, self.h.tmp,
                      extra_args=extra_args, env=env)
        s.expected_exit = None
        self.h.sluices.append(s)
        self.addCleanup(s.stop)
        s.wait_ready()
        s.port, s.mport, s.doc = port, port + 1000, doc
        return s

    def finish(self, s):
        """SIGTERM (unless stopped already), exit 0, the audit log
        verifies."""
        if not s.stopped:
            rc = s.stop()
            self.assertEqual(rc, 0, "exit %s after SIGTERM: %s" % (
                rc, s.stderr()[-1500:]))
        self.verify_audit(s)

    def verify_audit(self, s):
        path = s.doc["audit"]["path"]
        p = tah.audit_verify([path])
        self.assertEqual(p.returncode, 0, "sluice audit verify: %s %s" % (
            p.stdout, p.stderr))
        self.assertEqual(tah.check_chain(tah.read_lines(path)), [])

    def status(self, s):
        out = tah.admin(s.doc["admin"]["socket"], "status")
        d = {}
        for line in out.splitlines():
            k, _, v = line.partition(" ")
            d[k] = v
        return d

    def engines(self, s):
        st_ = self.status(s)
        self.assertIn("engine_pids", st_, st_)
        return [int(p) for p in st_["engine_pids"].split()]

    def engine(self, s):
        pids = self.engines(s)
        self.assertEqual(len(pids), 1, "engine_pids %r" % pids)
        return pids[0]

    def wait_new_engine(self, s, old, timeout=2.0):
        """(pid, seconds) of the single engine that replaced the old ones,
        or (None, timeout)."""
        t0 = time.monotonic()

        def new():
            try:
                pids = self.engines(s)
            except OSError:
                return None
            if len(pids) == 1 and pids[0] not in old and \
                    not gone(pids[0]):
                return pids[0]
            return None
        pid = st.wait_until(new, timeout, 0.005)
        return pid, time.monotonic() - t0

    def audit(self, s):
        return tah.events(s.doc["audit"]["path"])

    def engine_exit(self, s, pid, timeout=5.0):
        """The engine.exit line of pid (exactly one)."""
        evs = tah.wait_events(
            s.doc["audit"]["path"],
            lambda evs: any(e.get("event") == "engine.exit" and
                            e.get("pid") == pid for e in evs), timeout)
        got = [e for e in evs if e.get("event") == "engine.exit" and
               e.get("pid") == pid]
        self.assertEqual(len(got), 1, "engine.exit for %d: %r (all: %r)" % (
            pid, got, [e for e in evs if e.get("event") == "engine.exit"]))
        e = got[0]
        self.assertIsInstance(e.get("drained"), bool, e)
        self.assertIsInstance(e.get("policy_generation"), int, e)
        return e

    def assertKilledBy(self, e, sig):
        self.assertEqual(e.get("signal"), sig, e)
        self.assertIsInstance(e.get("signal_name"), str, e)
        self.assertTrue(e["signal_name"], e)
        self.assertNotIn("status", e, e)

    def req(self, path="/v1/echo", tok=None):
        return build_request("POST", "http://model.test" + path, "model.test",
                             ["Proxy-Authorization: Bearer " +
                              (tok or self.tok)], b"{}")

    def post(self, s, path="/v1/echo", tok=None, timeout=5.0):
        with self.h.raw(s.port, timeout=timeout) as c:
            return c.request(self.req(path, tok), timeout=timeout)

    def spend(self, s, tok, n):
        return [self.post(s, tok=tok).status for _ in range(n)]

    def metrics(self, s):
        with self.h.raw(s.mport) as c:
            r = c.request(build_request("GET", "/metrics", "127.0.0.1",
                                        ["Connection: close"]))
        self.assertEqual(r.status, 200, r)
        return tah.parse_prometheus(r.body.decode("utf-8"))[2]

    def serving_pid(self, s, client):
        """The pid holding the server side of client's connection (ss)."""
        lport = client.sock.getsockname()[1]
        p = st.run(st.ns_exec(self.h.sbx, [
            "ss", "-Htnp", "state", "established",
            "( sport = :%d and dport = :%d )" % (s.port, lport)]))
        pids = {int(x) for x in re.findall(r"pid=(\d+)", p.stdout)}
        self.assertEqual(len(pids), 1, p.stdout)
        return pids.pop()

    def probe_as(self, uid, host, port):
        """A TCP connect from sbx as uid (no capabilities)."""
        p = st.run(st.ns_exec(self.h.sbx, [
            "setpriv", "--reuid=%d" % uid, "--regid=%d" % uid,
            "--clear-groups", "--inh-caps=-all", PY_ANY, "-c", CLIENT, host,
            str(port), "1.0"]), check=False, timeout=15)
        return p.stdout.strip() or "crash: " + p.stderr.strip()

    def assertConfined(self, s, eng):
        """The engine's credentials and confinement, as /proc shows them
        (of an engine that served: between its fork and its confinement a
        new engine still has the parent's credentials)."""
        e = proc_status(eng)
        self.assertIsNotNone(e, "engine %d is gone" % eng)
        self.assertEqual(e["PPid"], str(s.pid), e)
        ids = "\t".join([str(self.uid)] * 4), "\t".join([str(self.gid)] * 4)
        self.assertEqual((e["Uid"], e["Gid"]), ids, e)
        for c in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            self.assertEqual(e[c], "0" * 16, "%s: %r" % (c, e))
        self.assertEqual(e["NoNewPrivs"], "1", e)
        self.assertEqual(e["Seccomp"], "2", e)
        held = socket_inodes(eng) & netlink_inodes(s.pid)
        self.assertEqual(held, set(), "the engine holds netlink socket(s) "
                         "%r: %r" % (held, fd_targets(eng)))

    # -- 1. confinement ----------------------------------------------------

    def test_1_confinement(self):
        s = self.start("conf", 3401)
        self.assertEqual(self.post(s).status, 200)
        stat = self.status(s)
        self.assertEqual(stat.get("privsep"), "1", stat)
        self.assertEqual(stat.get("engine_restarts"), "0", stat)
        eng = self.engine(s)
        self.assertEqual(children(s.pid), [eng],
                         "the parent's children are not just the engine")
        uid = "\t".join([str(self.uid)] * 4)
        gid = "\t".join([str(self.gid)] * 4)

        p = proc_status(s.pid)
        with self.subTest("parent"):
            self.assertEqual(p["Uid"], uid, p)
            self.assertEqual(p["Gid"], gid, p)
            self.assertEqual(caps(p, "CapPrm"), PARENT_CAPS, p)
            self.assertEqual(caps(p, "CapEff"), PARENT_CAPS, p)
            self.assertEqual(caps(p, "CapBnd"), PARENT_CAPS, p)
            self.assertEqual(caps(p, "CapInh"), 0, p)
            self.assertEqual(caps(p, "CapAmb"), 0, p)
            self.assertEqual(p["NoNewPrivs"], "1", p)

        with self.subTest("engine"):
            self.assertConfined(s, eng)

        with self.subTest("scheduling"):
            # The parent's threads (main, audit writer) do not preempt
            # the engine on wake-up; the engine is an ordinary task.
            par = sched_policies(s.pid)
            self.assertGreaterEqual(len(par), 2, "no audit writer thread: "
                                    "%r" % par)
            self.assertEqual(set(par.values()), {SCHED_BATCH}, par)
            self.assertEqual(set(sched_policies(eng).values()),
                             {SCHED_OTHER}, "engine %d" % eng)

        with self.subTest("sockets and files"):
            # Controls: the parent holds the rules' netlink sockets and
            # the admin socket; the engine neither.
            self.assertTrue(socket_inodes(s.pid) & netlink_inodes(s.pid),
                            "the parent holds no netlink socket: the "
                            "check would prove nothing")
            admin = unix_inodes(s.pid, s.doc["admin"]["socket"])
            self.assertTrue(socket_inodes(s.pid) & admin,
                            "the parent does not hold the admin socket")
            self.assertEqual(socket_inodes(eng) & admin, set(),
                             "the engine holds the admin socket")
            for path in (s.policy_path, self.h.key_file):
                self.assertNotIn(path, fd_targets(eng).values())

        # SIGTERM: the engine goes too, daemon.stop is the last line.
        self.finish(s)
        self.assertTrue(st.wait_until(lambda: gone(eng), 2.0))
        evs = self.audit(s)
        self.assertEqual(evs[-1]["event"], "daemon.stop", evs[-3:])
        for ev in evs:
            if ev["event"] == "engine.exit":
                self.assertIs(ev["drained"], True, ev)

    def gdb_print(self, pid, exprs):
        """Evaluate exprs inside pid (gdb -p); their integer values."""
        argv = ["gdb", "-p", str(pid), "-batch", "-nx", "-q"]
        for x in exprs:
            argv += ["-ex", "print " + x]
        p = st.run(argv, check=False, timeout=60)
        vals = {int(m.group(1)): int(m.group(2)) for m in re.finditer(
            r"^\$(\d+) = (-?\d+)$", p.stdout, re.M)}
        return [vals.get(i) for i in range(1, len(exprs) + 1)], \
            p.stdout + p.stderr

    def test_1b_engine_landlock(self):
        if shutil.which("gdb") is None:
            self.skipTest("gdb is not installed")
        if st.ENV.sanitize:
            self.skipTest("sanitizer builds run the engine without Landlock")
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        # landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
        if libc.syscall(444, None, 0, 1) < 1:
            self.skipTest("the kernel has no Landlock")
        s = self.start("landlock", 3411)
        eng = self.engine(s)
        # openat(AT_FDCWD, path, O_RDONLY), as the engine: seccomp lets a
        # read-only openat through, so only Landlock can refuse a
        # world-readable file. Controls: getpid() is the engine's, and a
        # file of the system CA store (Landlock allows those) opens.
        store = "/etc/ssl/certs/ca-certificates.crt"
        exprs = ["(long)getpid()",
                 '(long)syscall(257, -100, "/etc/passwd", 0)',
                 "*(int *)__errno_location()"]
        if os.path.isfile(store):
            exprs += ['(long)syscall(257, -100, "%s", 0)' % store,
                      "(long)close($4)"]
        vals, out = self.gdb_print(eng, exprs)
        self.assertEqual(vals[0], eng, "gdb could not run code in the "
                         "engine: %s" % out)
        self.assertFalse(gone(eng), "the engine died: %s" % out)
        self.assertEqual(vals[1], -1, "the engine opened /etc/passwd: %s" %
                         out)
        self.assertEqual(vals[2], errno.EACCES, out)
        if len(vals) > 3:
            self.assertGreaterEqual(vals[3], 0, "the control (the CA store) "
                                    "did not open: %s" % out)
        # Creating a file in world-writable /tmp: refused (EACCES), or
        # the engine killed by seccomp (an openat that may write).
        probe = "/tmp/sluice-privsep-probe-%d" % os.getpid()
        self.addCleanup(lambda: os.path.exists(probe) and os.unlink(probe))
        vals, out = self.gdb_print(eng, [
            '(long)syscall(257, -100, "%s", 0101, 0600)' % probe,
            "*(int *)__errno_location()"])
        self.assertFalse(os.path.exists(probe), "the engine created %s" %
                         probe)
        if gone(eng):
            self.assertKilledBy(self.engine_exit(s, eng), SIGSYS)
            new, _ = self.wait_new_engine(s, [eng])
            self.assertIsNotNone(new, "no new engine: %r" % self.status(s))
        else:
            self.assertEqual(vals, [-1, errno.EACCES], out)
        self.assertEqual(self.post(s).status, 200)
        self.finish(s)

    # -- 2. kill -9 the engine under load ------------------------------------

    def load(self, s, stop, results):
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                with self.h.raw(s.port, timeout=10) as c:
                    out = c.request(self.req(), timeout=10).status
            except Exception as e:  # the outcome is what we record
                out = type(e).__name__
            results.append(Result(t0, time.monotonic(), out))

    def test_2_kill_engine_under_load(self):
        s = self.start("kill", 3402)
        limit = 5
        metered = self.h.token("model", max_requests=limit)
        table0 = self.table()
        self.assertEqual(self.spend(s, metered, 2), [200, 200])
        old = self.engine(s)
        gen = int(self.status(s)["policy_generation"])

        stop, results, threads = threading.Event(), [], []
        for _ in range(3):
            t = threading.Thread(target=self.load, args=(s, stop, results),
                                 daemon=True)
            t.start()
            threads.append(t)
        try:
            time.sleep(0.5)
            allowed0 = tah.metric(self.metrics(s), "sluice_requests_total",
                                  decision="allow") or 0
            t_kill = time.monotonic()
            os.kill(old, signal.SIGKILL)
            table_during = self.table()
            self.assertTrue(st.wait_until(lambda: gone(old), 2.0, 0.001))
            t_dead = time.monotonic()
            # A connection made now waits in the backlog for the new
            # engine.
            with self.h.raw(s.port, timeout=10) as c:
                first = c.request(self.req(), timeout=10)
            t_first = time.monotonic() - t_dead
            new, took = self.wait_new_engine(s, [old])
            took += t_dead - t_kill
            table_during2 = self.table()
            time.sleep(1.0)
        finally:
            stop.set()
            for t in threads:
                t.join(15)
        self.assertEqual(first.status, 200, first)
        self.assertIsNotNone(new, "no new engine: %r" % self.status(s))
        self.assertLess(took, 1.0, "the new engine came after %.3fs" % took)
        refused = [r for r in results if r.outcome ==
                   "ConnectionRefusedError"]
        self.assertEqual(refused, [], "connections refused: the listener "
                         "was closed during the restart")
        # Begun after the kill (a killed process runs no more code: it
        # accepts nothing new; 2 ms for the signal to land): all served,
        # those begun while it was dying included.
        after = [r for r in results if r.t0 >= t_kill + 0.002]
        dying = [r for r in after if r.t0 < t_dead]
        self.assertTrue(after, "no request made after the kill")
        self.assertEqual([r for r in after if r.outcome != 200], [],
                         "requests made during/after the restart failed")
        # Cut: at most the request each thread had in flight on the
        # engine that was killed.
        cut = [r for r in results if r.t0 < t_kill + 0.002 and
               r.outcome != 200]
        self.assertLessEqual(len(cut), len(threads), cut)
        before = [r for r in results if r.t0 < t_kill and r.outcome == 200]
        self.assertTrue(before, "no load before the kill")
        print("\nkill -9 engine: gone after %.3fs, new engine after %.3fs; "
              "a request made once it was gone took %.3fs; %d requests "
              "before, %d after (%d while it was dying), %d cut in flight; "
              "slowest after %.3fs" % (
                  t_dead - t_kill, took, t_first, len(before), len(after),
                  len(dying), len(cut), max(r.t1 - r.t0 for r in after)),
              file=sys.stderr)

        e = self.engine_exit(s, old)
        self.assertKilledBy(e, 9)
        self.assertIs(e["drained"], False, e)
        self.assertEqual(e["policy_generation"], gen, e)
        stat = self.status(s)
        self.assertEqual(stat.get("engine_restarts"), "1", stat)
        self.assertEqual(self.engines(s), [new])
        self.assertConfined(s, new)
        # Forked by a SCHED_BATCH parent, it serves as SCHED_OTHER.
        self.assertEqual(set(sched_policies(new).values()), {SCHED_OTHER},
                         "engine %d" % new)

        # The budget is one count across both engines: 2 + 3 = limit.
        self.assertEqual(self.spend(s, metered, 4), [200, 200, 200, 429])
        samples = self.metrics(s)
        self.assertEqual(tah.metric(samples, "sluice_engine_restarts_total"),
                         1, "sluice_engine_restarts_total")
        self.assertEqual(tah.metric(samples, "sluice_engines"), 1,
                         "sluice_engines")
        allowed1 = tah.metric(samples, "sluice_requests_total",
                              decision="allow") or 0
        later = [r for r in after if r.t0 >= t_dead]
        self.assertGreaterEqual(allowed1, allowed0 + len(later) + 1 + 3,
                                "the request counters did not survive the "
                                "restart (%s before the kill, %s after)" % (
                                    allowed0, allowed1))
        self.assertEqual(table_during, table0, "nft table changed")
        self.assertEqual(table_during2, table0, "nft table changed")
        self.assertEqual(self.table(), table0, "nft table changed")
        self.finish(s)

    # -- 3, 4. test hooks ------------------------------------------------------

    def need_hooks(self):
        if not self.hooks:
            self.skipTest("sluice built without test hooks "
                          "(-DSLUICE_TEST_HOOKS=ON)")

    def test_3_sigsys_hook(self):
        self.need_hooks()
        s = self.start("sigsys", 3403, hook="sigsys")
        old = self.engine(s)
        gen = int(self.status(s)["policy_generation"])
        os.kill(old, signal.SIGUSR2)
        new, took = self.wait_new_engine(s, [old])
        self.assertIsNotNone(new, "no new engine: %r" % self.status(s))
        self.assertLess(took, 1.0)
        e = self.engine_exit(s, old)
        self.assertKilledBy(e, SIGSYS)
        self.assertIs(e["drained"], False, e)
        self.assertEqual(e["policy_generation"], gen, e)
        self.assertTrue(s.alive())
        self.assertEqual(self.status(s).get("engine_restarts"), "1")
        # Once it serves (it is the only engine), it is confined.
        self.assertEqual(self.post(s).status, 200)
        self.assertConfined(s, new)
        self.finish(s)

    def test_4_badmsg_hooks(self):
        self.need_hooks()
        s = self.start("badmsg", 3404, hook="badmsg")
        seen = [self.engine(s)]
        # The engine sends garbage: the parent kills it (signal 9). Five
        # times (restarts back off 0, 50, 100, 200, 400 ms): the parent
        # must kill it before the engine sees its channel close and exits
        # on its own, a race one round alone may miss.
        rounds = 5
        killed = []
        for _ in range(rounds):
            os.kill(seen[-1], signal.SIGUSR2)
            new, took = self.wait_new_engine(s, seen)
            self.assertIsNotNone(new, "no new engine: %r" % self.status(s))
            self.assertLess(took, 1.0)
            killed.append(self.engine_exit(s, seen[-1]))
            seen.append(new)
            self.assertEqual(self.post(s).status, 200)
        # The parent sends garbage: the engine exits 3; the parent lives.
        os.kill(s.pid, signal.SIGUSR2)
        new, took = self.wait_new_engine(s, seen, timeout=3.0)
        self.assertIsNotNone(new, "no new engine: %r" % self.status(s))
        self.assertLess(took, 2.0)
        ex = self.engine_exit(s, seen[-1])
        self.assertEqual(ex.get("status"), 3, ex)
        self.assertNotIn("signal", ex, ex)
        self.assertTrue(s.alive(), s.stderr()[-1000:])
        self.assertEqual(self.status(s).get("engine_restarts"),
                         str(rounds + 1))
        self.assertEqual(self.post(s).status, 200)
        self.assertConfined(s, new)
        self.finish(s)
        self.assertEqual([(e.get("signal"), e.get("status")) for e in killed],
                         [(9, None)] * rounds, "an engine that sent a malformed "
                         "message was not killed by the parent: %r" % killed)
        for e in killed:
            self.assertKilledBy(e, 9)

    # -- 5. kill -9 the parent ---------------------------------------------

    def test_5_kill9_parent(self):
        t = self.h.topo
        s = self.start("kill9", 3405)
        m = self.up.log.mark()
        self.assertEqual(self.post(s).status, 200)
        # Control: sluice's own path to the upstream works.
        self.assertTrue(self.up.log.wait_for(m, "request"))
        eng = self.engine(s)
        table0 = self.table()
        s.signal(signal.SIGKILL)
        s.wait(5)
        self.assertTrue(st.wait_until(lambda: gone(eng), 2.0, 0.01),
                        "the engine outlived its parent by 2 s: %r" %
                        proc_status(eng))
        self.assertIn("table inet %s" % TABLE,
                      self.nft("list", "tables").stdout)
        self.assertEqual(self.table(), table0)
        m = self.up.log.mark()
        for uid in (WORKLOAD_UID, 0):
            self.assertNotEqual(self.probe_as(uid, t.v4(2), 80), "ok",
                                "uid %d reached the upstream" % uid)
        time.sleep(0.2)
        self.assertNothingUpstream(self.up, m, "after kill -9")
        # Nobody holds the listener any more.
        with self.assertRaises(ConnectionRefusedError):
            self.h.raw(s.port, timeout=2).close()
        self.verify_audit(s)

    # -- 6. reload -----------------------------------------------------------

    def stream(self, s, n, gap_ms):
        return StreamReader(
            self.h.sbx,
            ["-x", "http://127.0.0.1:%d" % s.port, "--proxy-header",
             "Proxy-Authorization: Bearer " + self.tok, "-d", "{}"],
            "http://model.test/v1/stream?n=%d&gap_ms=%d" % (n, gap_ms))

    def test_6_reload_with_stream_in_flight(self):
        s = self.start("reload", 3406)
        old = self.engine(s)
        gen = int(self.status(s)["policy_generation"])
        self.assertEqual(self.post(s, "/v1/new").status, 403)
        sr = self.stream(s, 10, 200)
        self.assertTrue(st.wait_until(lambda: sr.data_lines(), 5.0),
                        "the stream did not start")
        # The new policy allows /v1/new as well.
        self.write_doc("reload", self.make_doc(
            "reload", s.port, ("/v1/echo", "/v1/stream", "/v1/new")))
        s.reload()
        pids = st.wait_until(lambda: [p for p in self.engines(s)
                                      if p != old], 3.0)
        self.assertTrue(pids, "no new engine: %r" % self.status(s))
        new = pids[0]
        # Served under the new policy, by the new engine.
        old_answers = []

        def served_new():
            c = self.h.raw(s.port)
            try:
                r = c.request(self.req("/v1/new"))
            except (st.Closed, OSError) as e:
                r = e
            if getattr(r, "status", None) != 200:
                old_answers.append(getattr(r, "status", r))
                c.close()
                return None
            return c
        c = st.wait_until(served_new, 3.0, 0.02)
        self.assertTrue(c, "the new policy was not served: %r" % old_answers)
        try:
            self.assertEqual(self.serving_pid(s, c), new)
        finally:
            c.close()
        with self.h.raw(s.port) as c2:
            self.assertEqual(c2.request(self.req("/v1/new")).status, 200)
            self.assertEqual(self.serving_pid(s, c2), new)
        # While the old one drains, both are engines.
        if sr.p.poll() is None:
            pids = sorted(self.engines(s))
            engines = tah.metric(self.metrics(s), "sluice_engines")
            if sr.p.poll() is None:
                self.assertEqual(pids, sorted([old, new]))
                self.assertEqual(engines, 2, "sluice_engines")
        # The stream on the old engine completes.
        rc, err = sr.finish()
        self.assertEqual(rc, 0, err)
        self.assertEqual(len(sr.data_lines()), 10, sr.lines)
        e = self.engine_exit(s, old, timeout=8.0)
        self.assertEqual(e.get("status"), 0, e)
        self.assertNotIn("signal", e, e)
        self.assertIs(e["drained"], True, e)
        self.assertEqual(e["policy_generation"], gen, e)
        stat = self.status(s)
        self.assertEqual(self.engines(s), [new])
        self.assertConfined(s, new)
        self.assertGreater(int(stat["policy_generation"]), gen, stat)
        if old_answers:
            print("\nreload: %d request(s) answered %r (the old policy, "
                  "by the old engine) while the new engine started" % (
                      len(old_answers), old_answers), file=sys.stderr)
        self.finish(s)

    # -- 7. --single-process -----------------------------------------------

    def test_7_single_process(self):
        s = self.start("single", 3407, extra_args=["--single-process"])
        stat = self.status(s)
        self.assertEqual(stat.get("privsep"), "0", stat)
        self.assertEqual(stat.get("engine_pids", "").split(), [], stat)
        self.assertEqual(self.post(s).status, 200)
        self.assertEqual(children(s.pid), [])
        self.assertEqual(proc_status(s.pid)["Uid"],
                         "%d\t%d\t%d\t%d" % ((self.uid,) * 4))
        # The one process serves: no SCHED_BATCH for any of its threads.
        self.assertEqual(set(sched_policies(s.pid).values()), {SCHED_OTHER})
        self.finish(s)

    # -- 8. SIGTERM drains the engine --------------------------------------

    def test_8_sigterm_drains(self):
        s = self.start("term", 3408)
        eng = self.engine(s)
        sr = self.stream(s, 6, 200)
        self.assertTrue(st.wait_until(lambda: sr.data_lines(), 5.0),
                        "the stream did not start")
        s.signal(signal.SIGTERM)
        rc, err = sr.finish()
        self.assertEqual(rc, 0, err)
        self.assertEqual(len(sr.data_lines()), 6, "the stream was cut")
        self.assertEqual(s.wait(10), 0, s.stderr()[-1000:])
        self.assertTrue(gone(eng))
        e = self.engine_exit(s, eng)
        self.assertIs(e["drained"], True, e)
        self.assertEqual(e.get("status"), 0, e)
        self.assertEqual(self.audit(s)[-1]["event"], "daemon.stop")
        self.finish(s)

    # -- 9. an engine taken over asks for destinations ----------------------

    def test_9_engine_asks_for_what_no_route_dials(self):
        """An engine someone took over asks the parent for destinations no
        route dials (a name of no route, a routed name on another port, an
        address): the parent resolves none of them and puts nothing in the
        kernel's sets; what a route dials is still resolved and allowed."""
        self.need_hooks()
        t = self.h.topo
        dns = self.h.dns_server({"named.test": {"A": [t.v4(2)]},
                                 "evil.test": {"A": [t.v4(3)]}})
        doc = self.make_doc("ask", 3409)
        doc["routes"].append(pol.route(
            "named", ["named.test"], "http://named.test:80/", None,
            methods=("GET", "POST"), prefixes=["/v1/echo"], connect=False,
            allow_plaintext=True))
        doc["netpolicy"]["resolvers"] = [t.v4(53)]
        s = self.start("ask", 3409, doc=doc,
                       hook="ask=evil.test:443,named.test:8080,%s:80,"
                            "named.test:80" % t.v4(3))
        eng = self.engine(s)
        os.kill(eng, signal.SIGUSR2)
        # The routed one is resolved (the control: the hook did ask) ...
        self.assertTrue(st.wait_until(
            lambda: any(q[0].lower() == "named.test" for q in dns.queries),
            3.0), "named.test was never resolved: %r" % dns.queries)
        time.sleep(0.3)
        names = sorted({q[0].lower() for q in dns.queries})
        self.assertEqual(names, ["named.test"], dns.queries)
        # ... and in the kernel set; the others are not.
        up4 = self.nft("list", "set", "inet", TABLE, "upstream4").stdout
        self.assertIn(t.v4(2), up4)
        self.assertNotIn(t.v4(3), up4)
        err = s.stderr()
        for what in ("evil.test port 443", "named.test port 8080",
                     "%s port 80" % t.v4(3)):
            self.assertIn("asked for %s, which no route dials: refused" %
                          what, err)
        # A refusal is an empty answer, not a reason to restart.
        self.assertEqual(self.engine(s), eng)
        self.assertEqual(self.post(s).status, 200)
        self.finish(s)

    # -- 10. workers: N --------------------------------------------------

    def test_10_workers(self):
        doc = self.make_doc("workers", 3410)
        doc["workers"] = 2
        s = self.start("workers", 3410, doc=doc)
        limit = 30
        metered = self.h.token("model", max_requests=limit)
        pids = self.engines(s)
        self.assertEqual(len(pids), 2, "engine_pids %r" % pids)
        self.assertEqual(children(s.pid), sorted(pids))
        # Each accepts from its own socket of the listener (SO_REUSEPORT):
        # connections held open at once, each served by one of them (ss
        # names the pid), spread by the kernel over both.
        self.assertEqual(set(self.spread(s, 24)), set(pids))
        self.second_refused(s)
        for pid in pids:
            self.assertConfined(s, pid)
        # One budget across both: concurrent charges grant exactly limit.
        outcomes = []

        def spend():
            for _ in range(10):
                try:
                    outcomes.append(self.post(s, tok=metered).status)
                except OSError as e:
                    outcomes.append(type(e).__name__)
        threads = [threading.Thread(target=spend) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(sorted(set(outcomes)), [200, 429], outcomes)
        self.assertEqual(outcomes.count(200), limit, outcomes)
        # One dies: only it is replaced, the other serves on.
        os.kill(pids[0], signal.SIGKILL)
        e = self.engine_exit(s, pids[0])
        self.assertKilledBy(e, 9)

        def two():
            try:
                now = self.engines(s)
            except OSError:
                return None
            return now if len(now) == 2 and pids[0] not in now else None
        now = st.wait_until(two, 2.0, 0.01)
        self.assertIsNotNone(now, "engines %r" % self.status(s))
        self.assertIn(pids[1], now)
        self.assertEqual(self.status(s).get("engine_restarts"), "1")
        # The new one took the dead one's socket: both serve.
        self.assertEqual(set(self.spread(s, 24)), set(now))
        # A reload replaces both, once both new ones serve.
        s.signal(signal.SIGHUP)

        def replaced():
            try:
                cur = self.engines(s)
            except OSError:
                return None
            return cur if len(cur) == 2 and not set(cur) & set(now) else None
        cur = st.wait_until(replaced, 5.0, 0.02)
        self.assertIsNotNone(cur, "engines after the reload %r" %
                             self.status(s))
        self.assertEqual(set(self.spread(s, 24)), set(cur))
        self.assertEqual(tah.metric(self.metrics(s), "sluice_engines"), 2)
        self.finish(s)

    def second_refused(self, s):
        """A second sluice (root too, workers: 2, no rules of its own: they
        would stay in the namespace) on the same address is refused
        EADDRINUSE: it does not join the first one's SO_REUSEPORT group
        and take half of its clients."""
        doc = self.make_doc("workers-second", s.port)
        doc["workers"] = 2
        doc["netpolicy"] = {"mode": "off"}
        doc["metrics"] = {"listen": None}
        path = self.write_doc("workers-second", doc)
        p = subprocess.run(st.ns_exec(self.h.sbx, [st.ENV.bin, "run", "-c",
                                                   path]),
                           capture_output=True, text=True,
                           timeout=st.ENV.slow(10))
        self.assertNotEqual(p.returncode, 0, p.stderr)
        self.assertIn("listeners[0]", p.stderr)
        self.assertIn("Address already in use", p.stderr)
        self.assertEqual(set(self.spread(s, 8)) - set(self.engines(s)),
                         set())

    def spread(self, s, n):
        """n connections held open at once, each served a request: how
        many each engine pid served."""
        held, by = [], {}
        try:
            for _ in range(n):
                c = self.h.raw(s.port, timeout=5)
                held.append(c)
                self.assertEqual(c.request(self.req(), timeout=5).status,
                                 200)
                pid = self.serving_pid(s, c)
                by[pid] = by.get(pid, 0) + 1
        finally:
            for c in held:
                c.close()
        return by


def main():
    for tool in ("nft", "setpriv", "ss"):
        if os.geteuid() == 0 and shutil.which(tool) is None:
            print("skipped: %s is not installed" % tool, file=sys.stderr)
            sys.exit(77)
    st.main()


if __name__ == "__main__":
    main()
