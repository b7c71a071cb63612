#!/usr/bin/env python3
"""`sluice exec` end to end (docs/exec.md; issue 10 "Tests (real
components)"): the real binary runs a command in its sandbox, as root and
as an unprivileged user (uid 65534, through a user namespace), inside a
namespace of the test's whose only way out is a veth to the fake upstream
(netns sbx <-veth-> up: fakeup on 198.18.70.2:443, DNS on .53).

A probe inside the sandbox checks the walls: only lo and no route; curl
through the proxy variables it was given reaches the upstream with the
injected credential (and the reverse listener does too), the run token
never reaching it; the environment, /proc/self/environ and the files the
run could point at (the secret's file, the audit log, the state dir, the
run dir, sluice's own /proc entries) never hold the real key; another
host is route_not_found; a TCP connect to the upstream's address, ping, a
UDP send, raw and packet sockets, `unshare -n` and `mount` fail; a name is
NXDOMAIN at the stub and audited as dns.query; NoNewPrivs 1, CapEff 0,
Seccomp 2. Then: exit statuses (7, a signal as 128+N, SIGTERM to sluice
forwarded), the summary line and its counts, --max-requests, --clean-env,
a variable holding the injected secret dropped and named, the default
audit and run directories (XDG), and, with intercepted routes: the DNS
stub's 127.77.0.N for an intercepted host and a direct https:// request to
it (no proxy variables, the CA from SSL_CERT_FILE); --profile anthropic /
openai with curl and the official Node SDKs (streaming too) at the fake
upstream (--upstream; sluice trusts the test CA by SSL_CERT_FILE).
"""

import base64
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import unittest

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))

from sluicetest import base, header_values  # noqa: E402
from sluicetest.base import CLEANUP, ENV  # noqa: E402
from sluicetest.daemons import Fakeup  # noqa: E402
from sluicetest.dnsd import DnsServer  # noqa: E402
from sluicetest.netns import Topology, ns_exec  # noqa: E402
from sluicetest.pki import CA  # noqa: E402

X = 70
NOBODY = 65534
MODEL = "model.test"      # the -c policy's route (not intercepted)
ICPT = "icpt.test"        # the intercepting policy's second route
UPNAME = "model-up.test"  # the fake upstream, by name (DNS in up)
ICPT_UP = "icpt-up.test"  # the same, as the intercepted route names it
OTHER = "other.test"      # no route
SUMMARY = re.compile(r"^sluice: (\d+) allowed, (\d+) denied, (\d+) dns "
                     r"refused; audit (.+)$")

# Runs inside the sandbox: argv[1] is a JSON object of what to do; prints
# one JSON object of what it saw. It never prints a response body whole
# (fakeup's echo carries the injected key back).
PROBE = r"""
import errno, json, os, socket, struct, subprocess, sys
cfg = json.loads(sys.argv[1])
r = {}

def sh(argv, env=None, timeout=20):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, env=env,
                           timeout=timeout)
    except OSError as e:  # ping's file capabilities under no_new_privs
        return -e.errno, "", str(e)
    return p.returncode, p.stdout, p.stderr

def err(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))

def curl(args, env=None):
    # -D to stderr's file: the head; the body on stdout, kept as its
    # echo's method and path only.
    rc, out, e = sh(["curl", "-sS", "--max-time", "10", "-D", "/dev/stderr",
                     "-w", "\n@@%{http_code} %{http_connect}"] + args,
                    env=env)
    body, _, codes = out.rpartition("\n@@")
    code, _, conn = codes.partition(" ")
    res = {"rc": rc, "status": int(code or 0), "connect": int(conn or 0)}
    for line in e.splitlines():
        n, _, v = line.partition(":")
        if n.lower() == "sluice-deny":
            res["deny"] = v.strip()
    try:
        j = json.loads(body)
        res["path"] = j.get("path")
        res["method"] = j.get("method")
        res["error"] = j.get("error")
    except ValueError:
        res["err"] = e[-300:] if rc else ""
    return res

def dns(name, qtype=1):
    q = struct.pack("!HHHHHH", 0x5151, 0x0100, 1, 0, 0, 0)
    for l in name.split("."):
        q += bytes([len(l)]) + l.encode()
    q += b"\0" + struct.pack("!HH", qtype, 1)
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.settimeout(3)
    u.sendto(q, ("127.0.0.53", 53))
    a = u.recv(512)
    u.close()
    rcode = a[3] & 15
    addrs = []
    if rcode == 0 and struct.unpack("!H", a[6:8])[0] > 0:
        addrs.append(".".join(str(b) for b in a[-4:]))
    return rcode, addrs

def read_all(path, out, depth=0):
    # Everything readable under path: contents (latin-1) or the error.
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            names = sorted(os.listdir(path))
            out[path] = {"dir": names}
            if depth < 6:
                for n in names:
                    read_all(os.path.join(path, n), out, depth + 1)
            return
        with open(path, "rb") as f:
            out[path] = f.read(1 << 20).decode("latin-1")
    except OSError as e:
        out[path] = "error: " + errno.errorcode.get(e.errno, str(e.errno))

tok = open(os.environ["SLUICE_TOKEN_FILE"]).read().strip()
r["token"] = tok
r["uid"] = os.getuid()
if cfg.get("walls"):
    far, far6 = cfg["far"], cfg["far6"]
    r["ip_link"] = sh(["ip", "-o", "link"])[1]
    r["ip_route"] = sh(["ip", "route"])[1]
    r["ip6_route"] = sh(["ip", "-6", "route"])[1]
    r["env"] = dict(os.environ)
    r["environ"] = open("/proc/self/environ", "rb").read().decode("latin-1")
    r["proxied"] = curl(["-H", "Content-Type: application/json",
                         "-d", "{}", "http://%s/v1/messages" % cfg["host"]])
    r["reverse"] = curl(["-H", "Authorization: Bearer " + tok, "-d", "{}",
                         "http://127.0.0.1:8080/v1/reverse"])
    r["other"] = curl(["http://%s/v1/messages" % cfg["other"]])
    r["other_tls"] = curl(["https://%s/v1/messages" % cfg["other"]])
    r["connect"] = err(lambda: socket.create_connection((far, 443),
                                                        timeout=3).close())
    r["connect6"] = err(lambda: socket.create_connection((far6, 443),
                                                         timeout=3).close())
    def udp():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.sendto(b"x", (far, 53))
    r["udp"] = err(udp)
    r["ping"] = sh(["ping", "-c", "1", "-W", "1", far])[0]
    r["raw"] = err(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, 1))
    r["packet"] = err(lambda: socket.socket(socket.AF_PACKET,
                                            socket.SOCK_RAW, 0))
    r["unshare"] = sh(["unshare", "-n", "true"])[0]
    r["mount"] = sh(["mount", "-t", "tmpfs", "none", "/mnt"])[0]
    st = {}
    for line in open("/proc/self/status"):
        k, _, v = line.partition(":")
        st[k] = v.strip()
    r["status"] = {k: st.get(k) for k in ("NoNewPrivs", "CapEff", "Seccomp")}
    files = {}
    for p in cfg["paths"] + [os.path.dirname(os.environ["SLUICE_TOKEN_FILE"])]:
        read_all(p, files)
    pp = os.getppid()
    r["ppid"] = pp
    for n in ("environ", "cmdline", "maps", "fd"):
        read_all("/proc/%d/%s" % (pp, n), files)
    r["files"] = files
if cfg.get("dns_icpt"):
    r["dns_icpt"] = [dns(n) for n in cfg["dns_icpt"]]
    r["getent"] = sh(["getent", "ahosts", cfg["dns_icpt"][0]])[1].split()[:1]
    env = {k: v for k, v in os.environ.items()
           if not k.lower().endswith("_proxy") and k != "CURL_CA_BUNDLE"}
    r["direct"] = curl(["-H", "x-api-key: " + tok, "-d", "{}",
                        "https://%s/v1/messages" % cfg["dns_icpt"][0]],
                       env=env)
    import ssl, urllib.request
    ctx = ssl.create_default_context()  # SSL_CERT_FILE
    req = urllib.request.Request(
        "https://%s/v1/python" % cfg["dns_icpt"][0], data=b"{}",
        headers={"x-api-key": tok})
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(
            context=ctx))
    try:
        with opener.open(req, timeout=10) as resp:
            r["direct_py"] = [resp.status, json.loads(resp.read())["path"]]
    except Exception as e:
        r["direct_py"] = [0, repr(e)]
if cfg.get("reverse"):
    r["reverse"] = [curl(["-H", "Authorization: Bearer " + tok, "-d", "{}",
                          "http://127.0.0.1:8080/v1/n%d" % i])
                    for i in range(cfg["reverse"])]
if cfg.get("proxied"):
    r["proxied"] = [curl(["-d", "{}", u]) for u in cfg["proxied"]]
if cfg.get("nx"):
    r["nx"] = dns(cfg["nx"])
print(json.dumps(r))
"""


def as_nobody(argv):
    return ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY,
            "--clear-groups", "--"] + list(argv)


def userns_works():
    p = subprocess.run(as_nobody(["unshare", "-U", "-n", "true"]),
                       capture_output=True)
    return p.returncode == 0


def node_modules():
    """Where scripts/deps installs the Node SDKs (or SLUICE_NODE_MODULES);
    the same places test_intercept.py looks."""
    env = os.environ.get("SLUICE_NODE_MODULES")
    if env:
        return env
    build = os.environ.get("SLUICE_BUILD",
                           os.path.join(ENV.src, "build", "plain"))
    for d in (os.path.join(build, "..", "node", "node_modules"),
              os.path.join(ENV.src, "build", "node", "node_modules")):
        if os.path.isdir(d):
            return os.path.abspath(d)
    return None


def node_missing():
    if shutil.which("node") is None:
        return "node is not installed (apt-get install nodejs npm)"
    nm = node_modules()
    if nm is None:
        return ("the Node SDKs are not installed: run scripts/deps (npm "
                "install into build/node) or set SLUICE_NODE_MODULES")
    for p in ("@anthropic-ai/sdk", "openai"):
        if not os.path.isdir(os.path.join(nm, p)):
            return "%s is missing from %s" % (p, nm)
    return None


def jwt_claims(tok):
    part = tok.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


def auds(claims):
    a = claims.get("aud")
    return sorted([a] if isinstance(a, str) else a)


class Run:
    """One `sluice exec`: exit code, output, the summary line, the audit."""

    def __init__(self, rc, out, err, audit):
        self.rc, self.out, self.err, self.audit_path = rc, out, err, audit
        last = err.rstrip("\n").rsplit("\n", 1)[-1]
        m = SUMMARY.match(last)
        self.summary = None
        if m:
            self.summary = (int(m.group(1)), int(m.group(2)),
                            int(m.group(3)), m.group(4))

    def json(self):
        return json.loads(self.out.strip().splitlines()[-1])

    def audit(self, event=None):
        try:
            with open(self.audit_path, encoding="utf-8") as f:
                ev = [json.loads(x) for x in f if x.strip()]
        except FileNotFoundError:
            return []
        return [e for e in ev if event is None or e.get("event") == event]

    def __repr__(self):
        return "<exec rc=%r out=%r err=%r>" % (self.rc, self.out[-1500:],
                                                self.err[-2500:])


class ExecCase(unittest.TestCase):
    maxDiff = 6000

    @classmethod
    def setUpClass(cls):
        cls.userns = userns_works()
        cls.tmp = base.make_tmpdir("exec")
        os.chmod(cls.tmp, 0o755)  # the unprivileged runs read in here
        try:
            cls.build()
        except BaseException:
            CLEANUP.run()
            raise

    @classmethod
    def build(cls):
        t = cls.topo = Topology(X, up_hosts=(2, 53))
        cls.sbx = t.sbx.name
        cls.far, cls.far6 = t.v4(2), t.v6(2)
        # fakeup's log holds the injected key (request headers): where
        # the sandboxed command has no business reading, root's 0700.
        priv = base.make_tmpdir("exec-private")
        cls.ca = CA(priv, "exec")
        shutil.copy(cls.ca.cert, os.path.join(cls.tmp, "ca.pem"))
        cls.ca_pem = os.path.join(cls.tmp, "ca.pem")
        os.chmod(cls.ca_pem, 0o644)
        cert, key = cls.ca.issue("up", ["DNS:" + UPNAME, "DNS:" + ICPT_UP])
        cls.up = Fakeup(t.up.name, ["%s:443" % cls.far], "up", priv,
                        cert=cert, key=key)
        cls.dns = DnsServer(t.up.name, t.v4(53), {UPNAME: {"A": [cls.far]},
                                                ICPT_UP: {"A": [cls.far]}})
        # sluice resolves the upstream with /etc/resolv.conf: ip netns
        # exec binds /etc/netns/<ns>/resolv.conf there.
        etc = "/etc/netns/" + cls.sbx
        os.makedirs(etc, exist_ok=True)
        CLEANUP.push(shutil.rmtree, etc, True)
        with open(os.path.join(etc, "resolv.conf"), "w") as f:
            f.write("nameserver %s\noptions timeout:1 attempts:2\n" %
                    t.v4(53))
        cls.probe_py = os.path.join(cls.tmp, "probe.py")
        with open(cls.probe_py, "w") as f:
            f.write(PROBE)
        os.chmod(cls.probe_py, 0o644)
        cls.secret = "sk-exec-real-" + secrets.token_hex(16)
        cls.users = {}
        for user in ("root", "nobody"):
            d = os.path.join(cls.tmp, user)
            os.mkdir(d, 0o755)
            uid = 0 if user == "root" else NOBODY
            os.chown(d, uid, uid)
            sec = os.path.join(d, "model.key")
            with open(sec, "w") as f:
                f.write(cls.secret + "\n")
            os.chmod(sec, 0o600)
            os.chown(sec, uid, uid)
            # --key-file for the profiles: the raw key, one line.
            kf = os.path.join(d, "api.key")
            with open(kf, "w") as f:
                f.write(cls.secret + "\n")
            os.chmod(kf, 0o600)
            os.chown(kf, uid, uid)
            pols = {}
            for name, icpt in (("plain", False), ("icpt", True)):
                p = os.path.join(d, name + ".json")
                with open(p, "w") as f:
                    json.dump(cls.policy_doc(sec, icpt), f, indent=1)
                os.chmod(p, 0o600)
                os.chown(p, uid, uid)
                pols[name] = p
            cls.users[user] = {"dir": d, "uid": uid, "secret_file": sec,
                               "key_file": kf, "policy": pols}
        cls.runs = 0

    @classmethod
    def policy_doc(cls, secret_file, icpt):
        # (Each route its own upstream name: exec makes every intercepted
        # route's upstream host a name of the stub too.)
        def route(aud, host, intercept, up):
            r = {"audience": aud, "hosts": [host],
                 "methods": ["GET", "POST"], "path_prefixes": ["/v1"],
                 "max_requests_per_token": 1000000,
                 "connect": {"enabled": True, "intercept": intercept},
                 "upstream": {"url": "https://" + up,
                              "ca_file": cls.ca_pem,
                              "strip_token": True,
                              "headers": [{"name": "x-api-key",
                                           "value_file": secret_file}]}}
            if intercept:
                r["connect"]["ports"] = [443]
                r["token_header"] = "x-api-key"
            return r
        routes = [route("model", MODEL, False, UPNAME)]
        if icpt:
            routes.append(route("icpt", ICPT, True, ICPT_UP))
        return {
            "routes": routes,
            "limits": {"per_client_refusals_per_s": 0,
                       "connect_timeout_ms": 3000,
                       "upstream_response_timeout_ms": 10000,
                       "drain_timeout_ms": 2000},
            "audit": {"fsync": "never"},
        }

    # -- running sluice exec ------------------------------------------------

    def need_user(self, user):
        if user == "nobody" and not self.userns:
            self.skipTest("unprivileged user namespaces are off here")

    def sluice_env(self, user, extra=None):
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
                       "/sbin:/bin",
               "HOME": self.users[user]["dir"], "LANG": "C.UTF-8",
               "TERM": "dumb", "USER": user}
        for k, v in os.environ.items():  # the sanitizers' options
            if k.endswith("SAN_OPTIONS"):
                env[k] = v
        env.update(extra or {})
        return env

    def argv(self, user, opts, cmd):
        argv = [os.path.abspath(ENV.bin), "exec"] + list(opts) + ["--"] + \
            list(cmd)
        if user == "nobody":
            argv = as_nobody(argv)
        return ns_exec(self.sbx, argv)

    def audit_file(self, user):
        type(self).runs += 1
        return os.path.join(self.users[user]["dir"],
                            "audit-%d.jsonl" % self.runs)

    def sluice(self, user, opts, cmd, env=None, audit=True, timeout=60,
               cwd=None):
        """audit: True (a new file), a path, or False (the default)."""
        self.need_user(user)
        path = None
        if audit:
            path = self.audit_file(user) if audit is True else audit
            opts = ["--audit", path] + list(opts)
        p = subprocess.run(self.argv(user, opts, cmd), capture_output=True,
                           text=True, env=self.sluice_env(user, env),
                           stdin=subprocess.DEVNULL, cwd=cwd,
                           timeout=ENV.slow(timeout))
        run = Run(p.returncode, p.stdout, p.stderr, path)
        for m in base.SANITIZER_MARKS:
            self.assertNotIn(m, p.stderr)
        return run

    def policy(self, user, name="plain"):
        return ["-c", self.users[user]["policy"][name]]

    def probe(self, user, cfg, opts=None, env=None, policy="plain",
              audit=True):
        if opts is None:
            opts = self.policy(user, policy)
        r = self.sluice(user, opts,
                        ["python3", self.probe_py, json.dumps(cfg)],
                        env=env, audit=audit)
        self.assertEqual(r.rc, 0, r)
        return r, r.json()

    def intercept_ok(self, r):
        """A run whose policy intercepts: when this binary does not know
        the intercept listener yet, say so (the test fails)."""
        if r.rc != 0 and ("unknown key \"host\"" in r.err or
                          "\"intercept\"" in r.err):
            self.fail("this sluice cannot load an intercept listener "
                      "(the intercept listener type is not merged): %s"
                      % r.err[-500:])

    def assertNoToken(self, req, tok):
        for n, v in req["headers"]:
            self.assertNotIn(tok, v, "run token in %s upstream" % n)
        self.assertEqual(header_values(req, "Proxy-Authorization"), [])

    # -- the walls ----------------------------------------------------------

    def walls(self, user):
        u = self.users[user]
        nx = "exfil-%s.attacker.example" % secrets.token_hex(4)
        audit = self.audit_file(user)
        # What the run's own files are: the secret's file, the audit log,
        # the policy (and the run dir, the probe adds it). Not the whole
        # tree: the user's other files are the user's (a root command
        # reads root's files, capabilities or not).
        cfg = {"walls": True, "far": self.far, "far6": self.far6,
               "host": MODEL, "other": OTHER, "nx": nx,
               "paths": [u["secret_file"], audit,
                         u["policy"]["plain"]]}
        m = self.up.log.mark()
        r, o = self.probe(user, cfg, audit=audit)
        self.assertEqual(o["uid"], NOBODY if user == "nobody" else 0)
        links = o["ip_link"].strip().splitlines()
        self.assertEqual(len(links), 1, o["ip_link"])
        self.assertIn(": lo:", links[0])
        self.assertEqual(o["ip_route"].strip(), "")
        self.assertEqual(o["ip6_route"].strip(), "")
        # Through the proxy variables, and through the reverse listener:
        # the upstream gets the injected key, never the run token.
        tok = o["token"]
        self.assertEqual(o["env"]["HTTPS_PROXY"],
                         "http://run:%s@127.0.0.1:3128" % tok)
        self.assertEqual(o["env"]["http_proxy"], o["env"]["HTTPS_PROXY"])
        self.assertEqual(o["proxied"]["status"], 200, o["proxied"])
        self.assertEqual(o["proxied"]["path"], "/v1/messages")
        self.assertEqual(o["reverse"]["status"], 200, o["reverse"])
        self.assertEqual(o["reverse"]["path"], "/v1/reverse")
        reqs = self.up.log.wait_for(m, "request", count=2)
        self.assertEqual(sorted(q["target"] for q in reqs),
                         ["/v1/messages", "/v1/reverse"])
        for q in reqs:
            self.assertEqual(header_values(q, "x-api-key"), [self.secret])
            self.assertEqual(header_values(q, "Host"), [UPNAME])
            self.assertEqual(header_values(q, "Authorization"), [])
            self.assertNoToken(q, tok)
        claims = jwt_claims(tok)
        self.assertEqual(auds(claims), ["model"])
        self.assertRegex(claims["sub"], r"^exec-\d+$")
        # The real key is nowhere the command can look.
        dump = json.dumps(o)
        self.assertNotIn(self.secret, dump)
        files = o["files"]
        self.assertEqual(files[u["secret_file"]], "")  # the wall's /dev/null
        self.assertEqual(files[r.audit_path], "")
        rundir = os.path.dirname(o["env"]["SLUICE_TOKEN_FILE"])
        self.assertEqual(files[rundir + "/token"].strip(), tok)
        self.assertEqual(files[rundir + "/state"], {"dir": []})
        # sluice's own /proc entries (its memory files hold the key):
        # the command is not allowed to look (ptrace access mode).
        pp = "/proc/%d/" % o["ppid"]
        self.assertEqual(files[pp + "environ"][:7], "error: ")
        self.assertEqual(files[pp + "maps"][:7], "error: ")
        fds = files[pp + "fd"]
        if isinstance(fds, dict):
            self.assertTrue(fds["dir"])
            for fd in fds["dir"]:
                self.assertEqual(files[pp + "fd/" + fd][:7], "error: ",
                                 "%sfd/%s readable" % (pp, fd))
        # Elsewhere: refused.
        self.assertEqual(o["other"]["status"], 403, o["other"])
        self.assertEqual(o["other"]["deny"], "route_not_found")
        self.assertNotEqual(o["other_tls"]["rc"], 0)
        self.assertEqual(o["other_tls"]["connect"], 403, o["other_tls"])
        self.assertEqual(o["connect"], "ENETUNREACH")
        self.assertEqual(o["connect6"], "ENETUNREACH")
        self.assertEqual(o["udp"], "ENETUNREACH")
        self.assertNotEqual(o["ping"], 0)
        self.assertEqual(o["raw"], "EPERM")
        self.assertEqual(o["packet"], "EPERM")
        self.assertNotEqual(o["unshare"], 0)
        self.assertNotEqual(o["mount"], 0)
        self.assertEqual(o["status"], {"NoNewPrivs": "1",
                                       "CapEff": "0000000000000000",
                                       "Seccomp": "2"})
        self.assertEqual(o["nx"], [3, []])  # NXDOMAIN
        # The audit (outside): the requests, the refusal, the query.
        reqs = [e for e in r.audit("http.request")]
        self.assertEqual(sorted(e.get("decision") for e in reqs),
                         ["allow", "allow", "deny"], reqs)
        q = [e for e in r.audit("dns.query") if e.get("name") == nx]
        self.assertEqual(len(q), 1, r.audit("dns.query"))
        self.assertEqual((q[0]["qtype"], q[0]["decision"], q[0]["count"]),
                         ("A", "nxdomain", 1))
        # http, http, CONNECT refused; one query refused.
        self.assertEqual(r.summary, (2, 2, 1, r.audit_path), r)
        self.assertFalse(os.path.exists(rundir), "run dir left behind")

    def test_walls_root(self):
        self.walls("root")

    def test_walls_unprivileged(self):
        self.walls("nobody")

    # -- exit ---------------------------------------------------------------

    def test_exit_status(self):
        for user in ("root", "nobody"):
            with self.subTest(user=user):
                pol = self.policy(user)
                r = self.sluice(user, pol, ["sh", "-c", "exit 7"])
                self.assertEqual(r.rc, 7, r)
                self.assertEqual(r.summary, (0, 0, 0, r.audit_path), r)
                r = self.sluice(user, pol, ["sh", "-c", "kill -TERM $$"])
                self.assertEqual(r.rc, 143, r)
                self.assertIsNotNone(r.summary, r)

    def test_command_not_found(self):
        r = self.sluice("root", self.policy("root"), ["/nonexistent/cmd"])
        self.assertEqual(r.rc, 127, r)
        self.assertIn("/nonexistent/cmd", r.err)
        self.assertEqual(r.summary, (0, 0, 0, r.audit_path), r)

    def test_user_option(self):
        """Root runs the command as --user: that uid, the token file its
        own (0600), the proxy reachable; an unprivileged caller may not."""
        m = self.up.log.mark()
        script = ('id -u; stat -c "%u %a" "$SLUICE_TOKEN_FILE"; '
                  'curl -sS -o /dev/null -w "HTTP=%{http_code}\\n" -d "{}" '
                  'http://' + MODEL + '/v1/as-user')
        r = self.sluice("root", self.policy("root") + ["--user", "nobody"],
                        ["sh", "-c", script])
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.out.splitlines(),
                         [str(NOBODY), "%d 600" % NOBODY, "HTTP=200"])
        req = self.up.log.wait_for(m, "request")[0]
        self.assertEqual(header_values(req, "x-api-key"), [self.secret])
        if self.userns:
            r = self.sluice("nobody", self.policy("nobody") +
                            ["--user", "root"], ["true"])
            self.assertEqual(r.rc, 2, r)
            self.assertIn("--user needs root", r.err)

    def sleeping_child(self, pid):
        def read(path):
            try:
                with open(path) as f:
                    return f.read()
            except OSError:
                return ""

        def find():
            for k in read("/proc/%d/task/%d/children" % (pid, pid)).split():
                if read("/proc/%s/comm" % k).strip() == "sleep":
                    return int(k)
            return None
        return base.wait_until(find, ENV.slow(10))

    def test_sigterm_forwarded(self):
        for user in ("root", "nobody"):
            with self.subTest(user=user):
                self.need_user(user)
                audit = self.audit_file(user)
                argv = self.argv(user, ["--audit", audit] +
                                 self.policy(user), ["sleep", "60"])
                proc = base.Proc(argv, "sleep-%s" % user, self.tmp,
                                 env=self.sluice_env(user))
                kid = self.sleeping_child(proc.pid)
                self.assertIsNotNone(kid, proc.stderr())
                t0 = time.monotonic()
                proc.signal(signal.SIGTERM)
                self.assertEqual(proc.wait(ENV.slow(10)), 143,
                                 proc.stderr())
                self.assertLess(time.monotonic() - t0, ENV.slow(5))
                self.assertFalse(os.path.exists("/proc/%d" % kid))
                last = proc.stderr().rstrip().rsplit("\n", 1)[-1]
                self.assertEqual(last, "sluice: 0 allowed, 0 denied, 0 dns "
                                 "refused; audit %s" % audit)

    # -- budget, environment, defaults ----------------------------------------

    def test_max_requests(self):
        user = "nobody" if self.userns else "root"
        m = self.up.log.mark()
        r, o = self.probe(user, {"reverse": 3},
                          opts=self.policy(user) + ["--max-requests", "2"])
        got = [(c["status"], c.get("deny")) for c in o["reverse"]]
        self.assertEqual(got, [(200, None), (200, None),
                               (429, "budget_exhausted")], o)
        self.assertEqual(len(self.up.log.wait_for(m, "request", count=2)), 2)
        time.sleep(0.2)
        self.assertEqual(len(self.up.log.since(m, "request")), 2)
        self.assertEqual(jwt_claims(o["token"]).get("max_requests"), 2)
        self.assertEqual(r.summary[:3], (2, 1, 0), r)

    def test_clean_env(self):
        extra = {"KEEPME": "no", "XDG_CONFIG_HOME": "/nowhere"}
        r = self.sluice("root", self.policy("root") + ["--clean-env"],
                        ["env"], env=extra)
        self.assertEqual(r.rc, 0, r)
        names = {l.split("=", 1)[0] for l in r.out.splitlines()}
        ours = {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy",
                "https_proxy", "all_proxy", "NO_PROXY", "no_proxy",
                "NODE_USE_ENV_PROXY", "SLUICE_TOKEN_FILE"}
        kept = {"PATH", "HOME", "TERM", "LANG", "USER"}
        self.assertTrue(ours <= names, names)
        self.assertTrue(kept <= names, names)
        self.assertEqual(names - ours - kept, set())
        # Without it, the rest passes through.
        r = self.sluice("root", self.policy("root"), ["env"], env=extra)
        self.assertIn("KEEPME=no", r.out.splitlines())

    def test_secret_variable_removed(self):
        for user in ("root", "nobody"):
            with self.subTest(user=user):
                extra = {"LEAKY_KEY": self.secret, "FINE": "ok"}
                r = self.sluice(user, self.policy(user), ["env"], env=extra)
                self.assertEqual(r.rc, 0, r)
                lines = r.out.splitlines()
                self.assertIn("FINE=ok", lines)
                self.assertNotIn(self.secret, r.out)
                self.assertFalse([l for l in lines
                                  if l.startswith("LEAKY_KEY=")])
                self.assertIn("LEAKY_KEY not passed on", r.err)
                self.assertNotIn(self.secret, r.err)

    def test_bearer_secret_variable_removed(self):
        """An injected "Authorization: Bearer KEY": a variable holding KEY
        alone is a credential too (OPENAI_API_KEY=KEY must not pass)."""
        user = "root"
        u = self.users[user]
        key = "sk-bearer-%d-do-not-leak" % os.getpid()
        sec = os.path.join(u["dir"], "bearer.secret")
        with open(sec, "w") as f:
            f.write("Bearer " + key + "\n")
        os.chmod(sec, 0o600)
        doc = self.policy_doc(sec, False)
        doc["routes"][0]["upstream"]["headers"][0]["name"] = "authorization"
        pol = os.path.join(u["dir"], "bearer.json")
        with open(pol, "w") as f:
            json.dump(doc, f)
        r = self.sluice(user, ["-c", pol], ["env"],
                        env={"OPENAI_API_KEY": key, "FINE": "ok"})
        self.assertEqual(r.rc, 0, r)
        self.assertIn("FINE=ok", r.out.splitlines())
        self.assertNotIn(key, r.out)
        self.assertIn("OPENAI_API_KEY not passed on", r.err)

    def test_default_audit_and_run_dir(self):
        """Without --audit: $XDG_STATE_HOME/sluice/exec-*.jsonl; the run
        dir under $XDG_RUNTIME_DIR, gone after the run."""
        user = "nobody" if self.userns else "root"
        u = self.users[user]
        state = os.path.join(u["dir"], "xdg-state")
        rt = os.path.join(u["dir"], "xdg-run")
        for d in (state, rt):
            os.mkdir(d, 0o700)
            os.chown(d, u["uid"], u["uid"])
        r = self.sluice(user, self.policy(user),
                        ["sh", "-c", "echo $SLUICE_TOKEN_FILE; "
                         "ls -ld $(dirname $SLUICE_TOKEN_FILE)"],
                        env={"XDG_STATE_HOME": state,
                             "XDG_RUNTIME_DIR": rt}, audit=False)
        self.assertEqual(r.rc, 0, r)
        tokf = r.out.splitlines()[0]
        self.assertRegex(tokf, "^%s/sluice-exec-\\d+\\.[A-Za-z0-9]{6}/token$" %
                         re.escape(rt))
        self.assertEqual(os.listdir(rt), [])
        self.assertIsNotNone(r.summary, r)
        audit = r.summary[3]
        self.assertRegex(audit, "^%s/sluice/exec-[0-9TZ]+-\\d+\\.jsonl$" %
                         re.escape(state))
        self.assertTrue(os.path.isfile(audit))
        self.assertEqual(os.stat(audit).st_uid, u["uid"])

    # -- with interception: the DNS stub's path ------------------------------

    def dns_direct(self, user):
        m = self.up.log.mark()
        nx = "nx-%s.example.org" % secrets.token_hex(4)
        r = self.sluice(user, self.policy(user, "icpt"),
                        ["python3", self.probe_py,
                         json.dumps({"dns_icpt": [ICPT, ICPT_UP, MODEL],
                                     "nx": nx})])
        self.intercept_ok(r)
        self.assertEqual(r.rc, 0, r)
        o = r.json()
        self.assertEqual(o["dns_icpt"], [[0, ["127.77.0.1"]],
                                         [0, ["127.77.0.2"]], [3, []]])
        self.assertEqual(o["getent"], ["127.77.0.1"])
        self.assertEqual(o["nx"], [3, []])
        self.assertEqual(o["direct"]["status"], 200, o["direct"])
        self.assertEqual(o["direct"]["path"], "/v1/messages")
        self.assertEqual(o["direct_py"], [200, "/v1/python"])
        reqs = self.up.log.wait_for(m, "request", count=2)
        self.assertEqual(len(reqs), 2, reqs)
        for q in reqs:
            self.assertEqual(header_values(q, "x-api-key"), [self.secret])
            self.assertNoToken(q, o["token"])
        # An intercepted route's token names both audiences.
        self.assertEqual(auds(jwt_claims(o["token"])), ["icpt", "model"])
        q = [e for e in r.audit("dns.query") if e.get("name") == nx]
        self.assertEqual([(e["qtype"], e["decision"]) for e in q],
                         [("A", "nxdomain")], r.audit("dns.query"))

    def test_dns_intercepted_root(self):
        self.dns_direct("root")

    def test_dns_intercepted_unprivileged(self):
        self.dns_direct("nobody")

    # -- profiles (intercepted by design) ------------------------------------

    def profile(self, user, name, cmd, env=None):
        u = self.users[user]
        e = {"SSL_CERT_FILE": self.ca_pem}  # sluice's trust of fakeup
        e.update(env or {})
        r = self.sluice(user, ["--profile", name, "--key-file",
                               u["key_file"], "--upstream",
                               "https://" + UPNAME], cmd, env=e)
        self.intercept_ok(r)
        return r

    def test_profile_env_and_curl(self):
        """--profile anthropic: the base URL and the run token in the SDK's
        variables; curl at the base URL gets through with the real key;
        a variable holding the key is dropped and named; the key file
        reads empty."""
        for user in ("root", "nobody"):
            with self.subTest(user=user):
                u = self.users[user]
                m = self.up.log.mark()
                script = ('cat "%s"; env; curl -sS -o /dev/null -w '
                          '"HTTP=%%{http_code}\\n" -H "x-api-key: '
                          '$ANTHROPIC_API_KEY" -d "{}" '
                          '"$ANTHROPIC_BASE_URL/v1/messages"' %
                          u["key_file"])
                r = self.profile(user, "anthropic", ["sh", "-c", script],
                                 env={"MY_ANTHROPIC_KEY": self.secret})
                self.assertEqual(r.rc, 0, r)
                self.assertNotIn(self.secret, r.out)
                env = dict(l.split("=", 1) for l in r.out.splitlines()
                           if "=" in l and not l.startswith("HTTP="))
                self.assertEqual(env["ANTHROPIC_BASE_URL"],
                                 "http://127.0.0.1:8080")
                tok = env["ANTHROPIC_API_KEY"]
                self.assertEqual(auds(jwt_claims(tok)), ["anthropic"])
                self.assertIn("HTTP=200", r.out.splitlines())
                self.assertNotIn("MY_ANTHROPIC_KEY", env)
                self.assertIn("MY_ANTHROPIC_KEY not passed on", r.err)
                self.assertTrue(env["SSL_CERT_FILE"].endswith(
                    "/ca-bundle.pem"))
                req = self.up.log.wait_for(m, "request")[0]
                self.assertEqual(header_values(req, "x-api-key"),
                                 [self.secret])
                self.assertNoToken(req, tok)
                self.assertEqual(r.summary[:2], (1, 0), r)

    def test_profile_key_file_hidden(self):
        """The real key's file reads empty inside however it was named:
        --key-file relative to the working directory, or
        SLUICE_ANTHROPIC_KEY_FILE with no --key-file."""
        for user in ("root", "nobody"):
            self.need_user(user)
            u = self.users[user]
            kf = u["key_file"]
            cmd = ["sh", "-c", 'cat "%s"; echo "END"' % kf]
            upstream = ["--upstream", "https://" + UPNAME]
            ways = {
                "relative --key-file": (
                    ["--profile", "anthropic", "--key-file",
                     os.path.basename(kf)] + upstream, {}),
                "SLUICE_ANTHROPIC_KEY_FILE": (
                    ["--profile", "anthropic"] + upstream,
                    {"SLUICE_ANTHROPIC_KEY_FILE": kf}),
            }
            for way, (opts, env) in ways.items():
                with self.subTest(user=user, way=way):
                    env["SSL_CERT_FILE"] = self.ca_pem
                    r = self.sluice(user, opts, cmd, env=env, cwd=u["dir"])
                    self.intercept_ok(r)
                    self.assertEqual(r.rc, 0, r)
                    self.assertEqual(r.out, "END\n")
                    with open(kf) as f:  # untouched outside
                        self.assertEqual(f.read(), self.secret + "\n")

    def node(self, user, sdk, stream):
        why = node_missing()
        if why:
            self.skipTest(why)
        cfg = {"sdk": sdk, "stream": stream}
        if stream:
            cfg["query"] = {"sse": "1", "n": "4", "gap_ms": "200"}
            if sdk == "anthropic":
                cfg["query"]["event"] = "content_block_delta"
        m = self.up.log.mark()
        r = self.profile(user, sdk, ["node", os.path.join(
            self.tmp, "exec_node_client.js")],
            env={"NODE_PATH": node_modules(), "SLT_CFG": json.dumps(cfg)})
        self.assertEqual(r.rc, 0, r)
        out = [json.loads(l) for l in r.out.splitlines() if l.startswith("{")]
        self.assertTrue(out and out[-1].get("done"), out)
        req = self.up.log.wait_for(m, "request")[0]
        if sdk == "anthropic":
            self.assertEqual(req["target"].split("?")[0], "/v1/messages")
            self.assertEqual(header_values(req, "x-api-key"), [self.secret])
        else:
            self.assertEqual(req["target"].split("?")[0],
                             "/v1/chat/completions")
            self.assertEqual(header_values(req, "Authorization"),
                             ["Bearer " + self.secret])
        for n, v in req["headers"]:
            self.assertNotIn("eyJ", v, "a JWT in %s upstream" % n)
        if stream:
            evs = [o["event"] for o in out if "event" in o]
            self.assertEqual(evs, [{"i": i} for i in range(4)], out)
            ts = [o["t"] for o in out if "event" in o]
            self.assertGreater(ts[-1] - ts[0], 0.4, "not streamed: %r" % ts)
        else:
            self.assertIn("result", out[0], out)

    @classmethod
    def node_client(cls):
        dst = os.path.join(cls.tmp, "exec_node_client.js")
        if not os.path.exists(dst):
            shutil.copy(os.path.join(HERE, "exec_node_client.js"), dst)
            os.chmod(dst, 0o644)

    def setUp(self):
        self.node_client()

    def test_node_anthropic_sdk(self):
        self.node("root", "anthropic", False)

    def test_node_anthropic_sdk_stream_unprivileged(self):
        self.node("nobody", "anthropic", True)

    def test_node_openai_sdk_unprivileged(self):
        self.node("nobody", "openai", False)

    def test_node_openai_sdk_stream(self):
        self.node("root", "openai", True)


def main():
    base.require_root()
    for tool in ("setpriv", "unshare", "python3"):
        if shutil.which(tool) is None:
            print("skipped: %s is not installed" % tool, file=sys.stderr)
            sys.exit(base.SKIP)
    for p in (ENV.bin, ENV.fakeup):
        if not os.access(p, os.X_OK):
            print("%s not found (set SLUICE_BIN, SLUICE_TOOLS)" % p,
                  file=sys.stderr)
            sys.exit(1)
    base.install_handlers()
    base.sweep_stale_netns()
    prog = unittest.main(exit=False, verbosity=2)
    errors = CLEANUP.run()
    for e in errors:
        print("cleanup: %s" % e, file=sys.stderr)
    sys.exit(0 if prog.result.wasSuccessful() and not errors else 1)


if __name__ == "__main__":
    main()
