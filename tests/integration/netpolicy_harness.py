"""Shared pieces of the netpolicy integration tests (test_netpolicy*.py):
namespaces, veth pairs, scripted servers and unprivileged probe clients,
policy files, and the sluice CLI. Python 3 stdlib only.

Rules the tests keep (DESIGN.md "Test hosts"): every namespace, veth and
process is created by the test and removed in a finally/atexit even when a
test fails; addresses come only from 198.18.0.0/15 and 2001:2::/48; the
default namespace is never touched (veths are created inside the test's
namespaces, rules are only applied inside them); processes are ended by
PID only.
"""

import atexit
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

SKIP = 77

# Unprivileged probes need an interpreter they can read (the ctest one may
# live under /root).
PY_ANY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

WORKLOAD_UID = 12345  # the sandbox's code: no passwd entry needed
SLUICE_USER = "daemon"  # an existing, non-root account for sluice


def sluice_bin():
    path = os.environ.get("SLUICE_BIN")
    if not path:
        src = os.environ.get(
            "SLUICE_SRC",
            os.path.abspath(os.path.join(os.path.dirname(__file__), "../..")))
        path = os.path.join(src, "build", "proxy", "sluice")
    return path


def require_root_and_tools():
    """Exit 77 (skip) when the test cannot run here."""
    if os.geteuid() != 0:
        print("skip: needs root (network namespaces, nftables)")
        sys.exit(SKIP)
    for tool in ("ip", "nft", "setpriv"):
        if shutil.which(tool) is None:
            print("skip: %s not installed" % tool)
            sys.exit(SKIP)
    if not os.access(sluice_bin(), os.X_OK):
        print("skip: no sluice binary at %s (set SLUICE_BIN)" % sluice_bin())
        sys.exit(SKIP)


class Cleanup:
    """LIFO of undo actions, run once: at the end of a test module, at exit,
    or on SIGTERM/SIGINT."""

    def __init__(self):
        self.actions = []
        self.done = False
        atexit.register(self.run)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)

    def push(self, fn):
        self.actions.append(fn)

    def _on_signal(self, signum, frame):
        self.run()
        sys.exit(128 + signum)

    def run(self):
        while self.actions:
            fn = self.actions.pop()
            try:
                fn()
            except Exception as e:  # keep cleaning up whatever failed
                print("cleanup: %r" % (e,), file=sys.stderr)


CLEANUP = Cleanup()


def sh(argv, check=True, env=None, input=None, timeout=60):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, env=env, input=input, timeout=timeout)
    if check and p.returncode != 0:
        raise RuntimeError("%s: exit %d: %s%s" % (" ".join(argv), p.returncode,
                                                 p.stdout, p.stderr))
    return p


def stop_pid(proc, sig=signal.SIGTERM, wait=3.0):
    """End a process we started, by its pid: sig, then SIGKILL."""
    if proc.poll() is not None:
        return proc.returncode
    try:
        os.kill(proc.pid, sig)
        return proc.wait(timeout=wait)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        return proc.wait(timeout=wait)
    except ProcessLookupError:
        return proc.wait(timeout=wait)


_seq = [0]


class Netns:
    """A network namespace of this test run, deleted at clean-up."""

    def __init__(self, tag):
        _seq[0] += 1
        self.name = "np%d%s%d" % (os.getpid(), tag, _seq[0])
        sh(["ip", "netns", "add", self.name])
        CLEANUP.push(self.delete)
        self.ip("link", "set", "lo", "up")

    def ip(self, *args):
        return sh(["ip", "-n", self.name] + list(args))

    def argv(self, argv):
        return ["ip", "netns", "exec", self.name] + list(argv)

    def run(self, argv, check=True, **kw):
        return sh(self.argv(argv), check=check, **kw)

    def sysctl(self, key, value):
        self.run(["sysctl", "-q", "-w", "%s=%s" % (key, value)])

    def nft(self, *args, check=True):
        return self.run(["nft"] + list(args), check=check)

    def delete(self):
        # Anything still inside was started by this test: end it by pid.
        p = sh(["ip", "netns", "pids", self.name], check=False)
        for pid in p.stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        sh(["ip", "netns", "del", self.name], check=False)


def veth(a, a_name, b, b_name):
    """A veth pair created inside namespace a, its peer moved to b: the
    default namespace never holds either end."""
    a.ip("link", "add", a_name, "type", "veth", "peer", "name", b_name,
         "netns", b.name)
    a.ip("link", "set", a_name, "up")
    b.ip("link", "set", b_name, "up")


def addr(ns, dev, cidr):
    if ":" in cidr:
        # nodad: the address is usable at once (no tentative state).
        ns.ip("-6", "addr", "add", cidr, "dev", dev, "nodad")
    else:
        ns.ip("addr", "add", cidr, "dev", dev)


SERVER = r"""
import select, socket, sys
socks = []
for spec in sys.argv[1:]:
    kind, host, port = spec.split(",")
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    typ = socket.SOCK_STREAM if kind == "tcp" else socket.SOCK_DGRAM
    s = socket.socket(fam, typ)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, int(port)))
    if kind == "tcp":
        s.listen(64)
    socks.append((kind, host, port, s))
print("ready", flush=True)
while True:
    ready, _, _ = select.select([t[3] for t in socks], [], [])
    for kind, host, port, s in socks:
        if s not in ready:
            continue
        if kind == "tcp":
            c, peer = s.accept()
            print("tcp %s %s %s" % (host, port, peer[0]), flush=True)
            c.close()
        else:
            data, peer = s.recvfrom(2048)
            print("udp %s %s %s" % (host, port, peer[0]), flush=True)
            s.sendto(b"pong", peer)
"""


class Servers:
    """TCP/UDP listeners inside a namespace that report every connection
    and datagram they receive ("tcp HOST PORT PEER")."""

    def __init__(self, ns, specs):
        self.lines = []
        self.lock = threading.Lock()
        self.proc = subprocess.Popen(
            ns.argv([sys.executable, "-u", "-c", SERVER] + list(specs)),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        CLEANUP.push(lambda: stop_pid(self.proc))
        first = self.proc.stdout.readline().strip()
        if first != "ready":
            raise RuntimeError("server did not start: %s %s" %
                               (first, self.proc.stderr.read()))
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            with self.lock:
                self.lines.append(line.strip())

    def seen(self, kind, host, port):
        """Peers that reached kind host:port so far."""
        prefix = "%s %s %s " % (kind, host, port)
        with self.lock:
            return [l[len(prefix):] for l in self.lines if l.startswith(prefix)]

    def clear(self):
        with self.lock:
            self.lines.clear()

    def seen_name(self, name):
        """DNS queries for name so far (Dns only)."""
        with self.lock:
            return [l for l in self.lines if l.startswith("dns %s " % name)]


DNS = r"""
import socket, struct, sys
addr, ttl = sys.argv[1], int(sys.argv[2])
names = dict(a.split("=") for a in sys.argv[3:])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((addr, 53))
print("ready", flush=True)
while True:
    q, peer = s.recvfrom(512)
    if len(q) < 12:
        continue
    qid, flags = struct.unpack("!HH", q[:4])
    off, labels = 12, []
    while off < len(q) and q[off] != 0 and q[off] < 64:
        labels.append(q[off + 1:off + 1 + q[off]].decode("ascii", "replace"))
        off += 1 + q[off]
    off += 1
    if off + 4 > len(q):
        continue
    qtype = struct.unpack("!H", q[off:off + 2])[0]
    name = ".".join(labels).lower()
    ans, rcode = b"", 0
    if name not in names:
        rcode = 3
    elif qtype == 1:
        ans = struct.pack("!HHHIH", 0xC00C, 1, 1, ttl, 4) + \
            socket.inet_aton(names[name])
    # The question goes back byte for byte (sluice randomises its case).
    hdr = struct.pack("!HHHHHH", qid, 0x8480 | (flags & 0x0100) | rcode, 1,
                      1 if ans else 0, 0, 0)
    s.sendto(hdr + q[12:off + 4] + ans, peer)
    print("dns %s %d" % (name, qtype), flush=True)
"""


class Dns(Servers):
    """An authoritative UDP responder for A queries: names maps a name to
    one IPv4 address; every answer carries ttl."""

    def __init__(self, ns, addr, ttl, names):
        self.lines = []
        self.lock = threading.Lock()
        args = [addr, str(ttl)] + ["%s=%s" % kv for kv in names.items()]
        self.proc = subprocess.Popen(
            ns.argv([sys.executable, "-u", "-c", DNS] + args),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        CLEANUP.push(lambda: stop_pid(self.proc))
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("dns did not start: %s" %
                               self.proc.stderr.read())
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()


def jwt_hs256(key, claims, kid):
    """A compact JWS (HS256) over claims, as the control plane mints."""
    import base64
    import hashlib
    import hmac

    def b64(b):
        return base64.urlsafe_b64encode(b).rstrip(b"=")

    head = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": kid},
                          separators=(",", ":")).encode())
    body = b64(json.dumps(claims, separators=(",", ":")).encode())
    sig = b64(hmac.new(key, head + b"." + body, hashlib.sha256).digest())
    return (head + b"." + body + b"." + sig).decode()


HTTP_CLIENT = r"""
import socket, sys
host, port, req = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = socket.create_connection((host, port), timeout=5)
s.sendall(req.encode().replace(b"\n", b"\r\n"))
print(s.recv(4096).split(b"\r\n")[0].decode(errors="replace"))
"""


def http_request(ns, uid, host, port, request):
    """Send request (LF line ends, turned into CRLF) from ns as uid; the
    response's status line."""
    argv = ["setpriv", "--reuid=%d" % uid, "--regid=%d" % uid,
            "--clear-groups", "--inh-caps=-all", PY_ANY, "-c", HTTP_CLIENT,
            host, str(port), request]
    p = ns.run(argv, check=False, timeout=30)
    return p.stdout.strip() or "crash: " + p.stderr.strip()


CLIENT = r"""
import errno, socket, sys
kind, host, port, timeout = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
fam = socket.AF_INET6 if ":" in host else socket.AF_INET
try:
    if kind == "tcp":
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect((host, port))
    elif kind == "udp":
        s = socket.socket(fam, socket.SOCK_DGRAM)
        s.settimeout(timeout)
        s.sendto(b"ping", (host, port))
        s.recvfrom(100)
    else:
        proto = socket.IPPROTO_ICMPV6 if fam == socket.AF_INET6 else socket.IPPROTO_ICMP
        s = socket.socket(fam, socket.SOCK_DGRAM, proto)
        s.settimeout(timeout)
        t = 128 if fam == socket.AF_INET6 else 8
        s.sendto(bytes([t, 0, 0, 0, 0, 0, 0, 1]) + b"sluice", (host, 0))
        s.recvfrom(100)
    print("ok")
except socket.timeout:
    print("timeout")
except OSError as e:
    print("error " + errno.errorcode.get(e.errno, str(e.errno)))
"""


def probe(ns, uid, kind, host, port=0, timeout=1.0):
    """Try one connection/datagram/echo from namespace ns as uid (no
    capabilities, no supplementary groups). Returns "ok", "timeout" or
    "error ECODE"."""
    argv = ["setpriv", "--reuid=%d" % uid, "--regid=%d" % uid,
            "--clear-groups", "--inh-caps=-all", PY_ANY, "-c", CLIENT,
            kind, host, str(port), str(timeout)]
    p = ns.run(argv, check=False, timeout=timeout + 10)
    out = p.stdout.strip()
    if out:
        return out.splitlines()[-1]
    return "crash: " + p.stderr.strip()


def probes(ns, uid, cases, timeout=1.0):
    """Run probes in parallel; cases are (kind, host, port) tuples.
    Returns {case: result}."""
    out = {}
    threads = []

    def one(c):
        out[c] = probe(ns, uid, c[0], c[1], c[2], timeout)

    for c in cases:
        t = threading.Thread(target=one, args=(c,))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    return out


def tmpdir():
    d = tempfile.mkdtemp(prefix="sluice-np-")
    os.chmod(d, 0o755)
    CLEANUP.push(lambda: shutil.rmtree(d, ignore_errors=True))
    return d


def secret_of(d):
    """The HS256 secret write_policy() put in d (the file less its newline)."""
    with open(os.path.join(d, "hs256.key"), "rb") as f:
        return f.read().rstrip(b"\n")


def write_policy(d, name, netpolicy, routes, listeners, extra=None):
    """A complete policy file in d (token key "k1", HS256); returns its
    path."""
    key = os.path.join(d, "hs256.key")
    if not os.path.exists(key):
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(os.urandom(24).hex() + "\n")
        # Owned by sluice's user: the daemon reads it again at SIGHUP,
        # after it dropped root.
        os.chown(key, sluice_uid(), -1)
    pol = {
        "user": SLUICE_USER,
        "listeners": listeners,
        "tokens": {"keys": [{"kid": "k1", "alg": "HS256",
                             "secret_file": key}]},
        "routes": routes,
        "audit": {"path": os.path.join(d, "audit.jsonl"), "fsync": "never"},
        "netpolicy": netpolicy,
        "state_dir": os.path.join(d, "state"),
    }
    if extra:
        pol.update(extra)
    os.makedirs(pol["state_dir"], exist_ok=True)
    path = os.path.join(d, name)
    with open(path, "w") as f:
        json.dump(pol, f, indent=1)
    return path


def route(aud, url):
    return {"audience": aud, "hosts": [aud + ".internal"],
            "methods": ["POST"], "path_prefixes": ["/v1"],
            "upstream": {"url": url, "allow_plaintext": True}}


def sluice(*args, env=None, check=False, timeout=60):
    e = dict(os.environ)
    if env:
        e.update(env)
    return sh([sluice_bin()] + list(args), check=check, env=e,
              timeout=timeout)


def sluice_uid():
    return pwd.getpwnam(SLUICE_USER).pw_uid


class Watch:
    """`sluice netpolicy watch` in the background, collecting its JSON
    lines."""

    def __init__(self, *args):
        self.events = []
        self.lock = threading.Lock()
        self.proc = subprocess.Popen([sluice_bin(), "netpolicy", "watch"] +
                                     list(args), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        CLEANUP.push(lambda: stop_pid(self.proc))
        line = self.proc.stderr.readline()
        if "listening" not in line:
            raise RuntimeError("watch did not start: %s" % line)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                ev = {"unparsed": line}
            with self.lock:
                self.events.append(ev)

    def wait_for(self, pred, timeout=5.0):
        end = time.time() + timeout
        while time.time() < end:
            with self.lock:
                for ev in self.events:
                    if pred(ev):
                        return ev
            time.sleep(0.05)
        return None

    def stop(self):
        return stop_pid(self.proc)


def wait_until(pred, timeout=5.0, step=0.05):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


def main():
    """Run the module's tests (named test_NN_* so that they run in order);
    print the closing line and return the exit code ctest reads."""
    require_root_and_tools()
    prog = unittest.main(exit=False, verbosity=2)
    CLEANUP.run()
    res = prog.result
    n = res.testsRun
    failed = len(res.failures) + len(res.errors)
    skipped = len(res.skipped)
    print("%d passed, %d failed, %d skipped" % (n - failed - skipped, failed,
                                               skipped))
    sys.exit(0 if res.wasSuccessful() else 1)
