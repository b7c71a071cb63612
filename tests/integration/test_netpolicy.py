#!/usr/bin/env python3
"""Sidecar kernel rules on a real kernel (DESIGN.md "Kernel rules"):
`sluice netpolicy apply|show|verify|flush|watch` in a namespace the test
makes, checked with nft (an independent reader) and with real traffic.

Topology (all made here, removed at the end):

  sbx (sandbox + sluice)  eth0 198.18.10.2, 2001:2:10::2
        |  veth
  world                   eth0 198.18.10.1 (upstream), .3 (other),
                          .53 (resolver), 2001:2:10::1 (v6 upstream), ::3

The workload runs as uid 12345 without capabilities; sluice's uid is the
"daemon" account.
"""

import json
import os
import re
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netpolicy_harness as h  # noqa: E402

UP4, OTHER4, RES4 = "198.18.10.1", "198.18.10.3", "198.18.10.53"
UP6, OTHER6 = "2001:2:10::1", "2001:2:10::3"
RES6 = "2001:2:10::53"
SBX4, SBX6 = "198.18.10.2", "2001:2:10::2"

# A UDP socket of its own uid that reports every datagram's source.
RECV = r"""
import select, socket, sys
port = int(sys.argv[1])
socks = []
for fam, host in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
    s = socket.socket(fam, socket.SOCK_DGRAM)
    if fam == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s.bind((host, port))
    socks.append(s)
print("ready", flush=True)
while True:
    for s in select.select(socks, [], [])[0]:
        data, peer = s.recvfrom(100)
        print("%s %s" % (peer[0], data.decode()), flush=True)
"""

# Send one datagram from SRC (bound with IP_FREEBIND / IPV6_FREEBIND, which
# need no privilege) to DST:PORT; "sent" or the errno's name.
FORGE = r"""
import errno, socket, sys
src, dst, port, tag = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
fam = socket.AF_INET6 if ":" in src else socket.AF_INET
s = socket.socket(fam, socket.SOCK_DGRAM)
try:
    if fam == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, 78, 1)  # IPV6_FREEBIND
    else:
        s.setsockopt(socket.IPPROTO_IP, 15, 1)  # IP_FREEBIND
    s.bind((src, 0))
    for _ in range(3):
        s.sendto(tag.encode(), (dst, port))
    print("sent")
except OSError as e:
    print("error " + errno.errorcode.get(e.errno, str(e.errno)))
"""


def zero_counters(text):
    """nft's listing with every counter's packets and bytes set to 0."""
    return re.sub(r"counter packets \d+ bytes \d+",
                  "counter packets 0 bytes 0", text)


class Sidecar(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sbx = h.Netns("s")
        cls.world = h.Netns("w")
        h.veth(cls.sbx, "eth0", cls.world, "eth0")
        h.addr(cls.sbx, "eth0", "198.18.10.2/24")
        h.addr(cls.sbx, "eth0", "2001:2:10::2/64")
        for a in (UP4, OTHER4, RES4):
            h.addr(cls.world, "eth0", a + "/24")
        for a in (UP6, OTHER6):
            h.addr(cls.world, "eth0", a + "/64")
        cls.sbx.ip("route", "add", "default", "via", UP4)
        cls.sbx.ip("-6", "route", "add", "default", "via", UP6)
        # Unprivileged ICMP echo sockets, so that "ICMP is blocked" is
        # the rules' doing and not a missing permission.
        cls.sbx.sysctl("net.ipv4.ping_group_range", "0 2147483647")
        cls.world_srv = h.Servers(cls.world, [
            "tcp,%s,8080" % UP4, "tcp,%s,9090" % UP4, "tcp,%s,8080" % OTHER4,
            "udp,%s,53" % OTHER4, "udp,%s,53" % RES4,
            "tcp,%s,8080" % UP6, "tcp,%s,8080" % OTHER6])
        # Stand-in for sluice's listener on loopback inside the sandbox.
        cls.lo_srv = h.Servers(cls.sbx, ["tcp,127.0.0.1,3128"])
        cls.dir = h.tmpdir()
        cls.policy = cls.write("policy.json", RES4)

    @classmethod
    def write(cls, name, resolver):
        return h.write_policy(
            cls.dir, name,
            {"mode": "sidecar", "table": "sluice", "allow_loopback": True,
             "resolvers": [resolver], "log_group": 7},
            [h.route("model-proxy", "http://%s:8080/v1" % UP4),
             h.route("model-v6", "http://[%s]:8080/v1" % UP6),
             h.route("by-name", "http://upstream.example:8080/v1")],
            [{"name": "forward", "type": "forward",
              "listen": "127.0.0.1:3128"}])

    def np(self, *args, env=None):
        return h.sluice("netpolicy", *args, "-c", self.policy, "--netns",
                        self.sbx.name, env=env)

    def apply(self):
        p = self.np("apply")
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_01_baseline_reachable(self):
        # Without rules the workload gets out: the checks below can fail.
        r = h.probes(self.sbx, h.WORKLOAD_UID, [("tcp", OTHER4, 8080),
                                                ("tcp", OTHER6, 8080)])
        self.assertEqual(set(r.values()), {"ok"}, r)

    def test_02_apply_nft_json(self):
        self.apply()
        p = self.sbx.nft("-j", "list", "table", "inet", "sluice")
        items = json.loads(p.stdout)["nftables"]
        chains = {i["chain"]["name"]: i["chain"] for i in items
                  if "chain" in i}
        sets = {i["set"]["name"]: i["set"] for i in items if "set" in i}
        rules = [i["rule"] for i in items if "rule" in i]
        self.assertEqual(set(chains), {"output", "spoofed"})
        self.assertNotIn("hook", chains["spoofed"])
        out = chains["output"]
        self.assertEqual((out["family"], out["table"], out["type"],
                          out["hook"], out["prio"], out["policy"]),
                         ("inet", "sluice", "filter", "output", 0, "drop"))
        self.assertEqual(sets["upstream4"]["type"],
                         ["ipv4_addr", "inet_service"])
        self.assertEqual(sets["upstream6"]["type"],
                         ["ipv6_addr", "inet_service"])
        self.assertIn("timeout", sets["upstream4"]["flags"])
        # Literal upstreams are static elements; the name is not there.
        self.assertEqual(sets["upstream4"]["elem"],
                         [{"concat": [UP4, 8080]}])
        self.assertEqual(sets["upstream6"]["elem"],
                         [{"concat": [UP6, 8080]}])
        # The last rule drops, counted; the one before logs to group 7.
        last = rules[-1]["expr"]
        self.assertIn({"drop": None}, last)
        self.assertTrue(any("counter" in e for e in last))
        logrule = rules[-2]["expr"]
        self.assertTrue(any(e.get("log", {}).get("group") == 7
                            for e in logrule), logrule)

    def test_03_show_roundtrip(self):
        self.apply()
        shown = self.np("show")
        self.assertEqual(shown.returncode, 0, shown.stderr)
        applied = self.sbx.nft("list", "table", "inet", "sluice").stdout
        # The kernel's own IPv6 chatter (MLD, router solicitations) may
        # have met a drop rule meanwhile: counters are compared as zero.
        applied = zero_counters(applied)
        # What sluice applied lists exactly as `show` prints it...
        self.assertEqual(applied, shown.stdout)
        # ...and nft -f of that text in a fresh namespace lists the same.
        ref = h.Netns("r")
        ref.run(["nft", "-f", "-"], input=shown.stdout)
        self.assertEqual(zero_counters(
            ref.nft("list", "table", "inet", "sluice").stdout), applied)
        # The bytecode agrees too: verify finds nft's table equal.
        p = h.sluice("netpolicy", "verify", "-c", self.policy, "--netns",
                     ref.name)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        ref.delete()

    def test_04_workload_blocked(self):
        self.apply()
        self.world_srv.clear()
        cases = [("tcp", UP4, 8080),    # the upstream, directly
                 ("tcp", OTHER4, 8080),  # anything else
                 ("udp", OTHER4, 53),    # DNS to any resolver
                 ("udp", RES4, 53),      # even the configured one
                 ("icmp", UP4, 0),       # ICMP echo
                 ("tcp", OTHER6, 8080),  # IPv6
                 ("tcp", UP6, 8080),
                 ("icmp", OTHER6, 0)]
        r = h.probes(self.sbx, h.WORKLOAD_UID, cases)
        for c in cases:
            self.assertNotEqual(r[c], "ok", c)
            self.assertFalse(r[c].startswith("crash"), r[c])
        for kind, host, port in cases:
            if kind != "icmp":
                self.assertEqual(self.world_srv.seen(kind, host, port), [],
                                 (kind, host, port))
        # Loopback (sluice's listener) stays reachable.
        self.assertEqual(h.probe(self.sbx, h.WORKLOAD_UID, "tcp",
                                 "127.0.0.1", 3128), "ok")

    def test_05_sluice_uid(self):
        self.apply()
        self.world_srv.clear()
        uid = h.sluice_uid()
        allowed = [("tcp", UP4, 8080), ("tcp", UP6, 8080), ("udp", RES4, 53)]
        denied = [("tcp", UP4, 9090),  # upstream address, other port
                  ("tcp", OTHER4, 8080), ("tcp", OTHER6, 8080),
                  ("udp", OTHER4, 53), ("icmp", UP4, 0)]
        r = h.probes(self.sbx, uid, allowed + denied)
        for c in allowed:
            self.assertEqual(r[c], "ok", c)
            self.assertEqual(len(self.world_srv.seen(*c)), 1, c)
        for c in denied:
            self.assertNotEqual(r[c], "ok", c)
            if c[0] != "icmp":
                self.assertEqual(self.world_srv.seen(*c), [], c)

    def test_06_drop_event(self):
        self.apply()
        w = h.Watch("-c", self.policy, "--netns", self.sbx.name)
        try:
            r = h.probe(self.sbx, h.WORKLOAD_UID, "tcp", OTHER4, 8080)
            self.assertNotEqual(r, "ok")
            ev = w.wait_for(lambda e: e.get("dst") == OTHER4 and
                            e.get("dport") == 8080)
            self.assertIsNotNone(ev, w.events)
            self.assertEqual(ev["event"], "net.drop")
            self.assertEqual(ev["proto"], "tcp")
            self.assertEqual(ev["uid"], h.WORKLOAD_UID)
            self.assertEqual(ev["src"], "198.18.10.2")
        finally:
            self.assertEqual(w.stop(), 0)

    def test_07_verify_detects_hand_rule(self):
        self.apply()
        p = self.np("verify")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.sbx.nft("add", "rule", "inet", "sluice", "output", "tcp",
                     "dport", "22", "accept")
        p = self.np("verify")
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        lines = p.stdout.splitlines()
        self.assertEqual(len(lines), 1, p.stdout)
        self.assertIn("chain output: unexpected rule", lines[0])
        self.assertIn("tcp dport 22 accept", lines[0])
        # A changed chain policy.
        self.apply()
        self.sbx.nft("add", "chain", "inet", "sluice", "output",
                     "{ policy accept; }")
        p = self.np("verify")
        self.assertEqual(p.returncode, 1)
        self.assertIn("chain output: policy accept, want drop", p.stdout)
        # A missing set.
        self.apply()
        self.sbx.nft("flush", "chain", "inet", "sluice", "output")
        self.sbx.nft("delete", "set", "inet", "sluice", "upstream6")
        p = self.np("verify")
        self.assertEqual(p.returncode, 1)
        self.assertIn("set upstream6: missing", p.stdout)
        self.assertIn("chain output: missing rule: oif \"lo\" accept",
                      p.stdout)

    def test_08_rejected_apply_is_atomic(self):
        self.apply()
        # Something of the old table only, to recognise it afterwards.
        self.sbx.nft("add", "rule", "inet", "sluice", "output", "tcp",
                     "dport", "2222", "accept")
        before = self.sbx.nft("list", "table", "inet", "sluice").stdout
        other = self.write("policy-b.json", "198.18.10.54")
        p = h.sluice("netpolicy", "apply", "-c", other, "--netns",
                     self.sbx.name,
                     env={"SLUICE_NETPOLICY_TEST_BAD_ELEMENT": "1"})
        self.assertEqual(p.returncode, 3, p.stdout + p.stderr)
        self.assertIn("kernel refused", p.stderr)
        after = self.sbx.nft("list", "table", "inet", "sluice").stdout
        # Counters aside: a stray packet may meet a drop rule meanwhile.
        self.assertEqual(zero_counters(after), zero_counters(before))
        self.assertNotIn("198.18.10.54", after)
        # Without the bad element the same policy goes in.
        p = h.sluice("netpolicy", "apply", "-c", other, "--netns",
                     self.sbx.name)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("198.18.10.54",
                      self.sbx.nft("list", "table", "inet", "sluice").stdout)

    def test_09_flush(self):
        self.apply()
        p = self.np("flush")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(self.sbx.nft("list", "tables").stdout.strip(), "")
        p = self.np("verify")
        self.assertEqual(p.returncode, 1)
        self.assertIn("table inet sluice: missing", p.stdout)
        # Flushing an absent table is not an error.
        self.assertEqual(self.np("flush").returncode, 0)

    def test_10_usage(self):
        self.assertEqual(h.sluice("netpolicy").returncode, 2)
        self.assertEqual(h.sluice("netpolicy", "frobnicate", "-c",
                                  self.policy).returncode, 2)
        self.assertEqual(h.sluice("netpolicy", "apply").returncode, 2)
        p = h.sluice("netpolicy", "apply", "-c", self.policy, "--netns",
                     "np-no-such-namespace")
        self.assertEqual(p.returncode, 3)

    def test_11_forged_resolver_source(self):
        # A process in the sandbox answering sluice's DNS queries itself:
        # it binds a loopback address other than 127.0.0.1 (127.0.0.11,
        # Docker's resolver) or a resolver's address (IPV6_FREEBIND) and
        # sends to a socket of sluice's uid. The output hook sees the
        # packet with its sender's uid before lo delivers it.
        pol = h.write_policy(
            self.dir, "policy-res.json",
            {"mode": "sidecar", "table": "sluice", "allow_loopback": True,
             "resolvers": [RES4, RES6, "127.0.0.11"], "log_group": 7},
            [h.route("model-proxy", "http://%s:8080/v1" % UP4)],
            [{"name": "forward", "type": "forward",
              "listen": "127.0.0.1:3128"}])
        uid = h.sluice_uid()
        port = 5399
        recv = subprocess.Popen(
            self.sbx.argv(["setpriv", "--reuid=%d" % uid, "--regid=%d" % uid,
                           "--clear-groups", h.PY_ANY, "-u", "-c", RECV,
                           str(port)]),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        h.CLEANUP.push(lambda: h.stop_pid(recv))
        self.addCleanup(h.stop_pid, recv)
        self.assertEqual(recv.stdout.readline().strip(), "ready",
                         recv.stderr.read() if recv.poll() else "")
        got = []
        lock = threading.Lock()

        def reader():
            for line in recv.stdout:
                with lock:
                    got.append(line.split())
        threading.Thread(target=reader, daemon=True).start()

        cases = [  # (src, dst, must arrive for the workload)
            ("127.0.0.11", "127.0.0.1", False),
            ("127.0.0.11", SBX4, False),
            ("127.1.2.3", "127.0.0.1", False),
            (RES4, SBX4, False),
            (RES4, "127.0.0.1", False),
            (RES6, SBX6, False),
            (RES6, "::1", False),
            ("127.0.0.1", "127.0.0.1", True),  # lo itself stays open
            ("::1", "::1", True),
        ]

        def run(sender_uid, tag):
            out = {}
            for i, (src, dst, _) in enumerate(cases):
                argv = ["setpriv", "--reuid=%d" % sender_uid,
                        "--regid=%d" % sender_uid, "--clear-groups",
                        "--inh-caps=-all", h.PY_ANY, "-c", FORGE, src, dst,
                        str(port), "%s-%d" % (tag, i)]
                out[i] = self.sbx.run(argv, check=False).stdout.strip()
            time.sleep(0.5)
            with lock:
                seen = {g[1] for g in got if len(g) == 2}
            return out, {i for i in out if "%s-%d" % (tag, i) in seen}

        # Without the rules every forged datagram arrives (IPv4 may not
        # let an unprivileged process send from a non-local address at
        # all; such a case proves nothing either way and is left out).
        self.sbx.nft("flush", "ruleset")
        sent, arrived = run(h.WORKLOAD_UID, "base")
        baseline = {i for i in arrived}
        for i, (src, dst, _) in enumerate(cases):
            if sent[i] == "sent":
                self.assertIn(i, baseline, (src, dst, sent[i]))
        self.assertIn(0, baseline)
        self.assertIn(5, baseline)  # IPV6_FREEBIND from the resolver

        p = h.sluice("netpolicy", "apply", "-c", pol, "--netns",
                     self.sbx.name)
        self.assertEqual(p.returncode, 0, p.stderr)
        sent, arrived = run(h.WORKLOAD_UID, "attack")
        for i in baseline:
            self.assertEqual(i in arrived, cases[i][2], cases[i])
        # sluice's own uid may still send from those addresses.
        sent, arrived = run(uid, "sluice")
        for i in baseline:
            self.assertIn(i, arrived, cases[i])
        # The drops are counted by the spoofed chain's drop rule.
        listing = self.sbx.nft("list", "chain", "inet", "sluice",
                               "spoofed").stdout
        m = re.search(r"counter packets (\d+)", listing)
        self.assertTrue(m and int(m.group(1)) > 0, listing)
        p = h.sluice("netpolicy", "verify", "-c", pol, "--netns",
                     self.sbx.name)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)


    def test_12_kernel_chatter_is_quiet(self):
        # A new IPv6 address makes the kernel itself send an MLD report
        # for its solicited-node group (and DAD). That is dropped by a
        # counted rule of its own, not logged as an escape attempt.
        self.apply()
        w = h.Watch("-c", self.policy, "--netns", self.sbx.name)
        try:
            self.sbx.ip("-6", "addr", "add", "2001:2:10::77/64", "dev",
                        "eth0")
            self.addCleanup(self.sbx.ip, "-6", "addr", "del",
                            "2001:2:10::77/64", "dev", "eth0")

            def mld_count():
                out = self.sbx.nft("list", "chain", "inet", "sluice",
                                   "output").stdout
                m = re.search(r"icmpv6 type mld2-listener-report ip6 "
                              r"hoplimit 1 counter packets (\d+)", out)
                return int(m.group(1)) if m and int(m.group(1)) else 0
            self.assertTrue(h.wait_until(mld_count, 5.0),
                            "no MLD report was counted")
            # What the watcher saw in that time: nothing ICMPv6 to a
            # link-local multicast group.
            time.sleep(0.5)
            noisy = [e for e in w.events
                     if str(e.get("dst", "")).startswith("ff02:")]
            self.assertEqual(noisy, [])
        finally:
            self.assertEqual(w.stop(), 0)
        p = self.np("verify")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_13_inbound(self):
        # netpolicy.inbound: a connection from outside to the pod's 8080
        # gets its replies out; without it the SYN-ACK is dropped; and the
        # sandbox can never open a flow of its own from that port.
        pol = h.write_policy(
            self.dir, "policy-inbound.json",
            {"mode": "sidecar", "table": "sluice", "allow_loopback": True,
             "resolvers": [RES4], "log_group": 7,
             "inbound": [{"ports": [8080], "from": ["198.18.10.0/24"]}]},
            [h.route("model-proxy", "http://%s:8080/v1" % UP4)],
            [{"name": "forward", "type": "forward",
              "listen": "127.0.0.1:3128"}])
        srv = h.Servers(self.sbx, ["tcp,%s,8080" % SBX4])
        self.addCleanup(h.stop_pid, srv.proc)

        def inbound():
            return h.probe(self.world, 0, "tcp", SBX4, 8080)
        self.apply()  # no inbound: the reply is a way out, dropped
        self.assertNotEqual(inbound(), "ok")
        p = h.sluice("netpolicy", "apply", "-c", pol, "--netns",
                     self.sbx.name)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(inbound(), "ok")
        # The sandbox connecting out from source port 8080 to an
        # address inside the permitted prefix: still dropped (a timeout,
        # not a refused bind: the listener is gone first).
        h.stop_pid(srv.proc)
        argv = ["setpriv", "--reuid=%d" % h.WORKLOAD_UID,
                "--regid=%d" % h.WORKLOAD_UID, "--clear-groups",
                "--inh-caps=-all", h.PY_ANY, "-c",
                "import socket,sys\n"
                "s=socket.socket()\n"
                "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                "s.bind(('%s', 8080))\n"
                "s.settimeout(1.5)\n"
                "try:\n"
                "    s.connect(('%s', 8080)); print('ok')\n"
                "except OSError as e: print('error', e)\n" % (SBX4, UP4)]
        out = self.sbx.run(argv, check=False, timeout=15).stdout.strip()
        self.assertIn("timed out", out, "an outbound flow from port 8080")
        p = h.sluice("netpolicy", "verify", "-c", pol, "--netns",
                     self.sbx.name)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

if __name__ == "__main__":
    h.main()
