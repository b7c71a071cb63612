#!/usr/bin/env python3
"""Gateway identity (docs/deployment.md "Gateway"): one sluice in a gateway
namespace serving three sandbox namespaces behind sbx-* veths (a and b
registered in the policy, c through the admin socket), plus a host behind
a non-sandbox interface (x) and the upstream (up):

   a 198.18.60.2 --sbx-a-- [gw] --sbx-c-- c 198.18.62.2
   b 198.18.61.2 --sbx-b--  |  \\--ext0-- x 198.18.63.2
                           upl0
                            |
                       up 198.18.64.2 (fakeup)

Each sandbox's gateway-side address is .1 of its /24; sluice listens on
0.0.0.0:3128 in gw. Checked: a token of a's used from b is
token_wrong_sandbox and nothing goes upstream; a source that is no
sandbox's is sandbox_unknown; b forging a's address, or a free address
of its own link, is dropped by the gateway's rules (raw sockets in b);
a cannot use the listener address on b's link; c is dropped until it is
added over the admin socket, served after, kept across a restart, and
gone after `sandbox del` and another restart; b at its connection cap
and over its rate while a is served; a revoked_file updated the way a
Kubernetes ConfigMap is (a symlink swapped), with no signal, refuses the
token within 2 s.

The gateway runs two engines (`workers: 2`): the connection cap and the
rate limit hold for the sandbox over both (shared counts), whichever
engine accepted its connections.
"""

import json
import os
import pwd
import re
import socket
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "lib"))

from sluicetest import case  # noqa: E402
from sluicetest import policy as pol  # noqa: E402
from sluicetest.base import (CLEANUP, ENV, make_tmpdir, run,  # noqa: E402
                             wait_until)
from sluicetest.daemons import Fakeup, Sluice  # noqa: E402
from sluicetest.http import RawClient, build_request  # noqa: E402
from sluicetest.netns import Netns  # noqa: E402
from sluicetest.tokens import mint, mint_python, write_secret  # noqa: E402

USER = "daemon"
CLOCKSHIFT = os.path.join(ENV.tools, "libclockshift.so")
UP = "198.18.64.2"
URL = "http://%s:8080/v1/messages" % UP
NET = {"a": 60, "b": 61, "c": 62, "x": 63}


def addr(n, host):
    return "198.18.%d.%d" % (NET[n], host)


# b, root in its own namespace, sends SYNs from any source (raw socket).
RAW_SYN = r"""
import socket, struct, sys
def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff
src, dst, dport = sys.argv[1], sys.argv[2], int(sys.argv[3])
sip, dip = socket.inet_aton(src), socket.inet_aton(dst)
tcp = struct.pack("!HHIIBBHHH", 40001, dport, 1000, 0, 5 << 4, 0x02, 65535,
                  0, 0)
c = csum(sip + dip + struct.pack("!BBH", 0, 6, len(tcp)) + tcp)
tcp = tcp[:16] + struct.pack("!H", c) + tcp[18:]
ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 9, 0, 64, 6, 0,
                 sip, dip)
r = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
for _ in range(5):
    r.sendto(ip + tcp, (dst, 0))
print("sent")
"""


class GatewayIdentity(case.ProxyTestCase):
    maxDiff = 6000

    @classmethod
    def setUpClass(cls):
        cls.h = None
        tag = "slt%dx%d" % (os.getpid(), 90)
        cls.tmp = make_tmpdir("gwid")
        # sluice's user reads the revoked_file directory after the drop.
        os.chmod(cls.tmp, 0o755)
        cls.gw = Netns(tag + "g")
        cls.ns = {n: Netns(tag + n) for n in ("a", "b", "c", "x")}
        cls.up = Netns(tag + "u")
        for n, ns in cls.ns.items():
            gwif = "ext0" if n == "x" else "sbx-" + n
            run(["ip", "link", "add", gwif, "netns", cls.gw.name, "type",
                 "veth", "peer", "name", "eth0", "netns", ns.name])
            cls.gw.ip("addr", "add", addr(n, 1) + "/24", "dev", gwif)
            cls.gw.ip("link", "set", gwif, "up")
            ns.ip("addr", "add", addr(n, 2) + "/24", "dev", "eth0")
            ns.ip("link", "set", "eth0", "up")
            ns.ip("route", "add", "default", "via", addr(n, 1))
        run(["ip", "link", "add", "upl0", "netns", cls.gw.name, "type",
             "veth", "peer", "name", "eth0", "netns", cls.up.name])
        cls.gw.ip("addr", "add", "198.18.64.1/24", "dev", "upl0")
        cls.gw.ip("link", "set", "upl0", "up")
        cls.up.ip("addr", "add", UP + "/24", "dev", "eth0")
        cls.up.ip("link", "set", "eth0", "up")
        cls.fake = Fakeup(cls.up.name, ["%s:8080" % UP], "fakeup", cls.tmp)
        CLEANUP.push(cls.fake.stop)
        cls.key = write_secret(os.path.join(cls.tmp, "run-token.key"))
        cls.make_configmap()
        cls.doc = pol.policy(os.path.join(cls.tmp, "gw"), cls.key,
                             [pol.forward("forward", "0.0.0.0:3128")],
                             [pol.route("model", [], "http://%s:8080" % UP,
                                        allow_plaintext=True,
                                        prefixes=("/v1/messages",))],
                             [], limits={"per_sandbox_connections": 4,
                                         "per_sandbox_rps": 10})
        cls.doc["user"] = USER
        cls.doc["workers"] = 2
        cls.doc["tokens"]["revoked_file"] = os.path.join(cls.cm,
                                                         "revoked.txt")
        cls.doc["netpolicy"] = {"mode": "gateway", "table": "sluice",
                                "log_group": 11,
                                "sandbox_interfaces": ["sbx-*"]}
        cls.doc["sandboxes"] = [
            {"id": "a", "interface": "sbx-a", "addresses": [addr("a", 2)]},
            {"id": "b", "interface": "sbx-b", "addresses": [addr("b", 2)]}]
        cls.doc["audit"]["path"] = os.path.join(cls.tmp, "gw",
                                                "audit.jsonl")
        cls.path = pol.write(os.path.join(cls.tmp, "gw", "policy.json"),
                             cls.doc)
        cls.sluice = None
        cls.start()

    @classmethod
    def make_configmap(cls):
        """revoked.txt as a Kubernetes ConfigMap volume has it: a link
        to ..data/revoked.txt, ..data a link to a timestamped directory;
        an update swaps ..data with a rename."""
        cls.cm = os.path.join(cls.tmp, "cm")
        os.makedirs(cls.cm)
        cls.cm_gen = 0
        cls.configmap_write("")
        os.symlink("..data/revoked.txt", os.path.join(cls.cm, "revoked.txt"))

    @classmethod
    def configmap_write(cls, text):
        cls.cm_gen += 1
        d = "..2026_%d" % cls.cm_gen
        os.makedirs(os.path.join(cls.cm, d))
        with open(os.path.join(cls.cm, d, "revoked.txt"), "w") as f:
            f.write(text)
        tmp = os.path.join(cls.cm, "..data_tmp")
        os.symlink(d, tmp)
        os.rename(tmp, os.path.join(cls.cm, "..data"))

    @classmethod
    def start(cls):
        # The wall clock of sluice can be stepped (tests/tools/
        # libclockshift.c): test_10. Not under the sanitizers, whose
        # runtime must be the first preloaded library.
        env = None
        if os.path.exists(CLOCKSHIFT) and not ENV.sanitize:
            cls.shift_file = os.path.join(cls.tmp, "clockshift")
            if not os.path.exists(cls.shift_file):
                with open(cls.shift_file, "w") as f:
                    f.write("0".ljust(16) + "\n")
            env = dict(os.environ, LD_PRELOAD=CLOCKSHIFT,
                       CLOCKSHIFT_FILE=cls.shift_file)
        cls.sluice = Sluice(cls.gw.name, cls.path, "sluice-%d" % time.time(),
                            cls.tmp, env=env)
        cls.sluice.wait_ready()

    @classmethod
    def shift_clock(cls, seconds):
        """Step sluice's wall clock (not its monotonic clock)."""
        with open(cls.shift_file, "r+") as f:
            f.write(str(int(seconds)).ljust(16))

    @classmethod
    def restart(cls):
        assert cls.sluice.stop() == 0, cls.sluice.stderr()[-2000:]
        cls.start()

    @classmethod
    def tearDownClass(cls):
        problems = []
        if cls.sluice is not None:
            rep = cls.sluice.sanitizer_report()
            rc = cls.sluice.stop()
            if rc != 0:
                problems.append("sluice: exit %s after SIGTERM" % rc)
            if rep:
                problems.append(rep)
        if problems:
            raise AssertionError("\n".join(problems))

    # -- helpers ---------------------------------------------------------

    def token(self, sub, **kw):
        if "extra" in kw:  # a claim the CLI does not mint
            return mint_python(self.key, "model", sub=sub, **kw)
        return mint(self.key, "model", sub=sub, **kw)

    def lines(self, pred, timeout=3.0):
        """The audit lines pred holds for, once there is one (lines are
        written when a request completes, just after its response)."""
        got = wait_until(lambda: [e for e in self.audit() if pred(e)],
                         timeout)
        return got or []

    def request(self, n, tok, timeout=5.0, source=None):
        """One POST from sandbox n through its own gateway address."""
        c = RawClient(self.ns[n].name, addr(n, 1), 3128, timeout=timeout,
                      source=source)
        try:
            c.send(build_request(
                "POST", URL, host="%s:8080" % UP,
                headers=["Proxy-Authorization: Bearer " + tok],
                body=b"{}"))
            return c.read_response(timeout=timeout)
        finally:
            c.close()

    def admin(self, *words):
        return run([ENV.bin, "admin", "-c", self.path] + list(words),
                   check=False)

    def audit(self):
        with open(self.doc["audit"]["path"]) as f:
            return [json.loads(line) for line in f if line.strip()]

    def connects(self, n, host, port=3128, source=None, timeout=1.5):
        """Whether a TCP connection from namespace n is accepted."""
        try:
            c = RawClient(self.ns[n].name, host, port, timeout=timeout,
                          source=source)
        except OSError:
            return False
        c.close()
        return True

    def drops_since(self, t0, src):
        return [e for e in self.audit()
                if e.get("event") == "net.drop" and e.get("src") == src
                and e["ts"] >= t0]

    # -- tests -----------------------------------------------------------

    def test_01_own_token_served(self):
        mark = self.fake.log.mark()
        r = self.request("a", self.token("a"))
        self.assertEqual(r.status, 200, r)
        self.assertEqual(len(self.fake.log.since(mark, "request")), 1)
        line = self.lines(lambda e: e.get("event") == "http.request" and
                          e.get("decision") == "allow")[-1]
        self.assertEqual((line["sandbox"], line["sub"], line["decision"]),
                         ("a", "a", "allow"))
        # The sbx claim binds instead of sub when present.
        r = self.request("b", self.token("run-17", extra={"sbx": "b"}))
        self.assertEqual(r.status, 200, r)
        # As `sluice token mint --sbx` makes it.
        p = run([ENV.bin, "token", "mint", "--key", self.key, "--alg",
                 "HS256", "--aud", "model", "--sub", "run-18", "--sbx", "b",
                 "--ttl", "600", "--kid", "k1"])
        self.assertEqual(self.request("b", p.stdout.strip()).status, 200)
        self.assertDenied(self.request("a", p.stdout.strip()), 407,
                          "token_wrong_sandbox", auth="proxy")

    def test_02_other_sandbox_token(self):
        mark = self.fake.log.mark()
        r = self.request("b", self.token("a"))
        self.assertDenied(r, 407, "token_wrong_sandbox", auth="proxy")
        self.assertNothingUpstream(self.fake, mark, "for a's token from b")
        r = self.request("a", self.token("run-17", extra={"sbx": "b"}))
        self.assertDenied(r, 407, "token_wrong_sandbox", auth="proxy")
        self.assertNothingUpstream(self.fake, mark)
        line = self.lines(lambda e: e.get("event") == "http.request" and
                          e.get("reason") == "token_wrong_sandbox" and
                          e.get("sub") == "a")[0]
        self.assertEqual((line["sandbox"], line["sub"]), ("b", "a"))

    def test_03_unknown_source(self):
        # x sits behind an interface that is no sandbox interface: the
        # kernel rules leave it alone, the registry does not know it.
        mark = self.fake.log.mark()
        c = RawClient(self.ns["x"].name, addr("x", 1), 3128)
        c.send(build_request("POST", URL, host="%s:8080" % UP,
                             headers=["Proxy-Authorization: Bearer "
                                      + self.token("a")], body=b"{}"))
        r = c.read_response()
        c.close()
        self.assertDenied(r, 403, "sandbox_unknown")
        self.assertNothingUpstream(self.fake, mark)
        line = self.lines(lambda e: e.get("reason") == "sandbox_unknown")[-1]
        self.assertNotIn("sandbox", line)

    def test_04_spoofing_dropped(self):
        t0 = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 1))
        # b takes a's address, and a free one of its own link (which the
        # reverse-path check alone would let through), as secondaries.
        spoof_a, spoof_own = addr("a", 2), addr("b", 77)
        for a in (spoof_a, spoof_own):
            self.ns["b"].ip("addr", "add", a + "/32", "dev", "eth0")
            self.addCleanup(self.ns["b"].ip, "addr", "del", a + "/32",
                            "dev", "eth0")
        for src in (spoof_a, spoof_own):
            self.assertFalse(self.connects("b", addr("b", 1), source=src),
                             "b connected from %s" % src)
            p = run(self.ns["b"].exec_argv([sys.executable, "-c", RAW_SYN,
                                            src, addr("b", 1), "3128"]))
            self.assertEqual(p.stdout.strip(), "sent", p.stderr)
        # Nothing half-open at the gateway, and the rules logged it.
        time.sleep(0.3)
        ss = run(self.gw.exec_argv(["ss", "-Htn", "state", "syn-recv"]))
        self.assertNotIn(spoof_a, ss.stdout)
        self.assertNotIn(spoof_own, ss.stdout)
        for src in (spoof_a, spoof_own):
            self.assertTrue(wait_until(lambda: self.drops_since(t0, src), 3),
                            "no net.drop from %s" % src)
        # b from its own address is still served.
        self.assertEqual(self.request("b", self.token("b")).status, 200)

    def test_05_listener_on_own_link_only(self):
        # The listener is on 0.0.0.0, but a reaches only the gateway's
        # address on its own link, not the one on b's.
        self.assertTrue(self.connects("a", addr("a", 1)))
        self.assertFalse(self.connects("a", addr("b", 1)))
        self.assertFalse(self.connects("a", "198.18.64.1"))

    def test_06_admin_add_restart_del(self):
        # An interface with no sandbox: dropped by the rules.
        self.assertFalse(self.connects("c", addr("c", 1)))
        p = self.admin("sandbox", "add", "c", "sbx-c", addr("c", 2))
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("ok added c", p.stdout)
        self.assertEqual(self.request("c", self.token("c")).status, 200)
        self.assertDenied(self.request("c", self.token("a")), 407,
                          "token_wrong_sandbox", auth="proxy")
        ev = self.lines(lambda e: e.get("event") == "sandbox.add")
        self.assertEqual((ev[-1]["sandbox"], ev[-1]["interface"],
                          ev[-1]["addresses"]), ("c", "sbx-c", addr("c", 2)))
        # Refused: a policy sandbox cannot be deleted, addresses clash.
        p = self.admin("sandbox", "del", "a")
        self.assertEqual(p.returncode, 1)
        self.assertIn("the policy's", p.stdout + p.stderr)
        p = self.admin("sandbox", "add", "d", "sbx-d", addr("a", 2))
        self.assertEqual(p.returncode, 1)
        self.assertIn("addresses: also sandbox a's", p.stdout + p.stderr)
        self.assertEqual(run(self.gw.exec_argv(
            [ENV.bin, "netpolicy", "verify", "-c", self.path]),
            check=False).returncode, 0)
        # Kept across a restart.
        self.restart()
        p = self.admin("sandbox", "list")
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = p.stdout.splitlines()
        self.assertIn("c sbx-c admin %s connections 0" % addr("c", 2), lines)
        self.assertTrue(any(l.startswith("a sbx-a policy ") for l in lines))
        self.assertEqual(self.request("c", self.token("c")).status, 200)
        # Deleted, restarted: gone, and dropped again.
        p = self.admin("sandbox", "del", "c")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertFalse(self.connects("c", addr("c", 1)))
        self.restart()
        p = self.admin("sandbox", "list")
        self.assertNotIn("sbx-c", p.stdout)
        self.assertIn("ok 2 sandboxes", p.stdout)
        self.assertFalse(self.connects("c", addr("c", 1)))
        self.assertEqual([e["sandbox"] for e in self.audit()
                          if e.get("event") == "sandbox.del"], ["c"])

    def serving_pids(self, clients):
        """The pids holding the gateway's side of clients' connections."""
        ports = {c.sock.getsockname()[1] for c in clients}
        p = run(self.gw.exec_argv(["ss", "-Htnp", "state", "established",
                                   "( sport = :3128 )"]))
        pids = set()
        for line in p.stdout.splitlines():
            f = line.split()
            if len(f) > 3 and int(f[3].rpartition(":")[2]) in ports:
                pids |= {int(x) for x in re.findall(r"pid=(\d+)", line)}
        return pids

    def close_held(self, client):
        """Close client's connection and wait until the gateway has closed
        its side too: the cap counts over both engines, and a connection
        made before the engine saw this close would be the one refused."""
        port = client.sock.getsockname()[1]
        argv = self.gw.exec_argv(["ss", "-Htn", "state", "established",
                                  "state", "close-wait",
                                  "( sport = :3128 and dport = :%d )" % port])
        self.assertTrue(run(argv).stdout.strip(), "ss does not see it")
        client.close()
        self.assertTrue(wait_until(lambda: not run(argv).stdout.strip(),
                                   ENV.slow(5.0)),
                        "the gateway still holds the closed connection")

    def test_07a_listener_shard_per_engine(self):
        """workers: 2 binds each listener twice (SO_REUSEPORT): the parent
        keeps both sockets, each engine holds one, not the same one; so
        the kernel, not a race between woken engines, spreads clients."""
        p = run(self.gw.exec_argv(["ss", "-Hltnp", "( sport = :3128 )"]))
        lines = p.stdout.splitlines()
        self.assertEqual(len(lines), 2, p.stdout)
        holders = [{int(x) for x in re.findall(r"pid=(\d+)", l)}
                   for l in lines]
        parent = self.sluice.pid
        for h in holders:
            self.assertIn(parent, h, p.stdout)
            self.assertEqual(len(h), 2, p.stdout)
        engines = [(h - {parent}).pop() for h in holders]
        self.assertNotEqual(engines[0], engines[1], p.stdout)

    def test_07_connection_cap(self):
        # The cap is over both engines: held until both hold some.
        held = []
        try:
            for _ in range(40):
                held.append(RawClient(self.ns["b"].name, addr("b", 1), 3128))
                time.sleep(0.02)
                if len(self.serving_pids(held)) == 2:
                    break
                if len(held) == 4:
                    self.close_held(held.pop(0))
            self.assertEqual(len(self.serving_pids(held)), 2,
                             "b's connections all on one engine")
            while len(held) < 4:
                held.append(RawClient(self.ns["b"].name, addr("b", 1), 3128))
            time.sleep(0.2)
            c = RawClient(self.ns["b"].name, addr("b", 1), 3128)
            r = c.read_response()
            c.close()
            self.assertDenied(r, 503, "too_many_connections")
            self.assertIn("per_sandbox_connections", r.json()["message"])
            # a is served meanwhile.
            self.assertEqual(self.request("a", self.token("a")).status, 200)
        finally:
            for c in held:
                c.close()

    def test_08_rate_limit(self):
        time.sleep(1.2)  # a full bucket
        tok_a, tok_b = self.token("a"), self.token("b")
        t0 = time.monotonic()
        codes = [self.request("b", tok_b).status for _ in range(30)]
        took = time.monotonic() - t0
        self.assertGreater(codes.count(429), 10, codes)
        self.assertGreaterEqual(codes.count(200), 10, codes)
        # One bucket for b over both engines: a burst of 10 and 10 a
        # second (two buckets would grant twice that).
        self.assertLessEqual(codes.count(200), 10 + int(10 * took) + 1,
                             "%r in %.2fs" % (codes, took))
        r = None
        for _ in range(5):
            r = self.request("b", tok_b)
            if r.status == 429:
                break
        self.assertDenied(r, 429, "rate_limited")
        self.assertEqual(r.header("Retry-After"), "1")
        # b's bucket is its own: a is served.
        self.assertEqual(self.request("a", tok_a).status, 200)

    @unittest.skipIf(ENV.sanitize or not os.path.exists(CLOCKSHIFT),
                     "needs the plain build's libclockshift.so")
    def test_10_wall_clock_step_back(self):
        """The wall clock stepped back 20 minutes (an NTP step, date -s)
        under a sandbox that was just served: the rate limit runs on the
        monotonic clock, so the sandbox is served again at once, not
        refused for the 20 minutes its bucket would otherwise look ahead
        (docs/tokens.md "Clocks"). Tokens follow the wall clock: one whose
        exp passed in real time but not on the stepped clock is accepted,
        one issued "in the future" of the stepped clock is not."""
        back = 1200
        now = int(time.time())
        # Valid both before and after the step: iat 30 min ago, exp in 30.
        tok = self.token("a", extra={}, iat=now - 1800, exp=now + 1800)
        time.sleep(1.2)  # a full bucket
        for _ in range(5):
            self.assertEqual(self.request("a", tok).status, 200)
        try:
            self.shift_clock(-back)
            # libevent's cached wall time follows within 5 s.
            time.sleep(6)
            r = self.request("a", tok)
            self.assertEqual(r.status, 200, r)
            # Expired 10 min ago in real time, valid on sluice's clock.
            old = self.token("a", extra={}, iat=now - 1800, exp=now - 600)
            self.assertEqual(self.request("a", old).status, 200)
            # Issued now: 20 min in the future of sluice's clock.
            new = self.token("a", extra={}, iat=now, exp=now + 600)
            self.assertEqual(self.request("a", new).status, 407)
        finally:
            self.shift_clock(0)
        time.sleep(6)
        self.assertEqual(self.request("a", tok).status, 200)

    def test_09_revoked_file_watched(self):
        time.sleep(1.1)
        tok = self.token("a", jti="jti-cm-1")
        self.assertEqual(self.request("a", tok).status, 200)
        self.configmap_write("other-jti\njti-cm-1\n")
        t0 = time.time()
        r = None
        while time.time() - t0 < 2.0:
            r = self.request("a", tok)
            if r.status != 200:
                break
            time.sleep(0.1)
        self.assertDenied(r, 407, "token_revoked", auth="proxy")
        self.assertLess(time.time() - t0, 2.0)
        # An edit in place, through the link, counts as well.
        tok2 = self.token("a", jti="jti-cm-2")
        self.assertEqual(self.request("a", tok2).status, 200)
        with open(os.path.join(self.cm, "revoked.txt"), "a") as f:
            f.write("jti-cm-2\n")
        t0 = time.time()
        while time.time() - t0 < 2.0:
            r = self.request("a", tok2)
            if r.status != 200:
                break
            time.sleep(0.1)
        self.assertDenied(r, 407, "token_revoked", auth="proxy")
        ev = self.lines(lambda e: e.get("event") == "token.revoked_file" and
                        e.get("entries") == 3)
        self.assertTrue(ev, "no token.revoked_file line with 3 entries")


if __name__ == "__main__":
    case.main()
