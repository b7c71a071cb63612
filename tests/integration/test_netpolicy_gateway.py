#!/usr/bin/env python3
"""Gateway kernel rules on a real kernel (DESIGN.md "Kernel rules"): two
sandbox namespaces behind veths ("sbx-a", "sbx-b") in a test-made "host"
namespace that routes between them, plus a "lan" namespace behind an
interface that is not a sandbox interface (and a "lan2" behind another).
With the rules applied in the host, each sandbox reaches only sluice's
listener addresses/ports (TCP), sandbox-to-sandbox traffic is dropped and
logged, and traffic between the host and the lans is untouched.

  sbxa 198.18.20.2, 2001:2:20::2 -- sbx-a [host] sbx-b -- sbxb 198.18.21.2
                                  198.18.20.1   198.18.21.1
                                  2001:2:20::1       |
                                                   lan0 198.18.22.1
                                                     |
                                                  lan 198.18.22.2
  (host lan1 198.18.23.1 -- lan2 198.18.23.2)
"""

import json
import os
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netpolicy_harness as h  # noqa: E402

HOST_A, HOST_A6, HOST_B, HOST_LAN = ("198.18.20.1", "2001:2:20::1",
                                     "198.18.21.1", "198.18.22.1")
SBX_A, SBX_A6, SBX_B, LAN = ("198.18.20.2", "2001:2:20::2", "198.18.21.2",
                             "198.18.22.2")
HOST_LAN2, LAN2 = "198.18.23.1", "198.18.23.2"
ROOT = 0  # sandboxes may hold every privilege in their own namespace

# A flow of the gateway's own (its resolver socket, an upstream connection),
# held open in the host namespace: prints "ready LOCALADDR LOCALPORT RCVNXT
# SNDNXT", then, after a line on stdin, what arrived within 2 s.
GW_FLOW = r"""
import select, socket, struct, sys, time
kind, peer, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
rcv = snd = 0
if kind == "tcp":
    s = socket.create_connection((peer, port), timeout=5)
    # TCP_REPAIR (root here): the sequence numbers a forged segment needs.
    s.setsockopt(socket.IPPROTO_TCP, 19, 1)
    s.setsockopt(socket.IPPROTO_TCP, 20, 1)
    rcv = struct.unpack("I", s.getsockopt(socket.IPPROTO_TCP, 21, 4))[0]
    s.setsockopt(socket.IPPROTO_TCP, 20, 2)
    snd = struct.unpack("I", s.getsockopt(socket.IPPROTO_TCP, 21, 4))[0]
    s.setsockopt(socket.IPPROTO_TCP, 19, 0)
else:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect((peer, port))
    s.send(b"query")
    if sys.argv[4:] == ["answered"]:
        s.settimeout(5)
        s.recv(100)
a = s.getsockname()
print("ready %s %d %d %d" % (a[0], a[1], rcv, snd), flush=True)
sys.stdin.readline()
end, got = time.time() + 2.0, "nothing"
while got == "nothing" and time.time() < end:
    r, _, _ = select.select([s], [], [], max(0.0, end - time.time()))
    try:
        if r:
            got = "got %r" % s.recv(100)
    except OSError:  # an ICMP error from the peer: not data
        pass
print(got, flush=True)
"""

# Raw IPv4 packets with any source, from a sandbox holding CAP_NET_RAW.
RAW_SEND = r"""
import socket, struct, sys
def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff
kind, src, sport, dst, dport, seq, ack = sys.argv[1:8]
sport, dport, seq, ack = int(sport), int(dport), int(seq), int(ack)
sip, dip = socket.inet_aton(src), socket.inet_aton(dst)
data = b"INJECTED"
if kind == "udp":
    proto, l4 = 17, struct.pack("!HHHH", sport, dport, 8 + len(data), 0) + data
else:
    flags, data = (0x02, b"") if kind == "syn" else (0x18, data)
    proto = 6
    l4 = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, 5 << 4, flags,
                     65535, 0, 0) + data
c = csum(sip + dip + struct.pack("!BBH", 0, proto, len(l4)) + l4)
at = 6 if proto == 17 else 16
l4 = l4[:at] + struct.pack("!H", c or 0xffff) + l4[at + 2:]
ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4), 7, 0, 64, proto, 0,
                 sip, dip)
r = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
for _ in range(3):
    r.sendto(ip + l4, (dst, 0))
print("sent")
"""

HOLD = r"""
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(8)
print("ready", flush=True)
conns = []
while True:
    conns.append(s.accept()[0])
"""


class Gateway(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.host = h.Netns("h")
        cls.a = h.Netns("a")
        cls.b = h.Netns("b")
        cls.lan = h.Netns("l")
        h.veth(cls.host, "sbx-a", cls.a, "eth0")
        h.veth(cls.host, "sbx-b", cls.b, "eth0")
        h.veth(cls.host, "lan0", cls.lan, "eth0")
        h.addr(cls.host, "sbx-a", HOST_A + "/24")
        h.addr(cls.host, "sbx-a", HOST_A6 + "/64")
        h.addr(cls.host, "sbx-b", HOST_B + "/24")
        h.addr(cls.host, "lan0", HOST_LAN + "/24")
        h.addr(cls.a, "eth0", SBX_A + "/24")
        h.addr(cls.a, "eth0", SBX_A6 + "/64")
        h.addr(cls.b, "eth0", SBX_B + "/24")
        h.addr(cls.lan, "eth0", LAN + "/24")
        cls.a.ip("route", "add", "default", "via", HOST_A)
        cls.a.ip("-6", "route", "add", "default", "via", HOST_A6)
        cls.b.ip("route", "add", "default", "via", HOST_B)
        cls.lan.ip("route", "add", "default", "via", HOST_LAN)
        cls.lan2 = h.Netns("m")
        h.veth(cls.host, "lan1", cls.lan2, "eth0")
        h.addr(cls.host, "lan1", HOST_LAN2 + "/24")
        h.addr(cls.lan2, "eth0", LAN2 + "/24")
        cls.lan2.ip("route", "add", "default", "via", HOST_LAN2)
        cls.host.sysctl("net.ipv4.ip_forward", "1")
        for ns in (cls.a, cls.b, cls.lan):
            ns.sysctl("net.ipv4.ping_group_range", "0 2147483647")
        # Stand-ins for sluice's listeners, and a service that is not one.
        cls.host_srv = h.Servers(cls.host, [
            "tcp,0.0.0.0,3128", "tcp,0.0.0.0,22", "udp,0.0.0.0,53",
            "tcp,%s,8080" % HOST_A6, "tcp,%s,9999" % HOST_A6])
        cls.b_srv = h.Servers(cls.b, ["tcp,%s,8080" % SBX_B,
                                      "udp,%s,53" % SBX_B])
        cls.lan2_srv = h.Servers(cls.lan2, ["tcp,%s,8080" % LAN2])
        cls.dir = h.tmpdir()
        cls.policy = h.write_policy(
            cls.dir, "policy.json",
            {"mode": "gateway", "table": "sluice", "log_group": 5,
             "sandbox_interfaces": ["sbx-*"]},
            [h.route("model-proxy", "http://198.18.30.1:8080/v1")],
            [{"name": "forward", "type": "forward", "listen": "0.0.0.0:3128"},
             {"name": "v6", "type": "forward",
              "listen": "[%s]:8080" % HOST_A6}],
            # Only registered sandboxes' own addresses pass their
            # interface (docs/deployment.md "Gateway").
            extra={"sandboxes": [
                {"id": "a", "interface": "sbx-a",
                 "addresses": [SBX_A, SBX_A6]},
                {"id": "b", "interface": "sbx-b", "addresses": [SBX_B]}]})

    def np(self, *args):
        return h.sluice("netpolicy", *args, "-c", self.policy, "--netns",
                        self.host.name)

    def test_01_baseline(self):
        # Without rules, sandbox-to-sandbox and host services are open.
        r = h.probes(self.a, ROOT, [("tcp", SBX_B, 8080),
                                     ("tcp", HOST_A, 22)])
        self.assertEqual(set(r.values()), {"ok"}, r)

    def test_02_apply_nft_json(self):
        p = self.np("apply")
        self.assertEqual(p.returncode, 0, p.stderr)
        items = json.loads(self.host.nft("-j", "list", "table", "inet",
                                         "sluice").stdout)["nftables"]
        chains = {i["chain"]["name"]: i["chain"] for i in items
                  if "chain" in i}
        self.assertEqual(set(chains),
                         {"input", "forward", "sandbox_in", "sandbox_drop"})
        for name, hook in (("input", "input"), ("forward", "forward")):
            c = chains[name]
            self.assertEqual((c["type"], c["hook"], c["prio"], c["policy"]),
                             ("filter", hook, 0, "accept"))
        self.assertNotIn("hook", chains["sandbox_in"])
        self.assertEqual(self.np("verify").returncode, 0)

    def test_03_sandboxes_reach_only_listeners(self):
        self.assertEqual(self.np("apply").returncode, 0)
        self.host_srv.clear()
        self.b_srv.clear()
        ra = h.probes(self.a, ROOT, [
            ("tcp", HOST_A, 3128), ("tcp", HOST_A6, 8080),  # listeners
            ("tcp", HOST_A, 22), ("udp", HOST_A, 53), ("icmp", HOST_A, 0),
            ("tcp", HOST_A6, 9999),
            ("tcp", SBX_B, 8080), ("udp", SBX_B, 53),  # the other sandbox
            ("icmp", SBX_B, 0)])
        rb = h.probes(self.b, ROOT, [
            ("tcp", HOST_B, 3128), ("tcp", HOST_B, 22), ("icmp", HOST_B, 0)])
        self.assertEqual(ra[("tcp", HOST_A, 3128)], "ok")
        self.assertEqual(ra[("tcp", HOST_A6, 8080)], "ok")  # ND works too
        self.assertEqual(rb[("tcp", HOST_B, 3128)], "ok")
        for c in (("tcp", HOST_A, 22), ("udp", HOST_A, 53),
                  ("icmp", HOST_A, 0), ("tcp", HOST_A6, 9999),
                  ("tcp", SBX_B, 8080), ("udp", SBX_B, 53),
                  ("icmp", SBX_B, 0)):
            self.assertNotEqual(ra[c], "ok", c)
        for c in (("tcp", HOST_B, 22), ("icmp", HOST_B, 0)):
            self.assertNotEqual(rb[c], "ok", c)
        self.assertEqual(self.host_srv.seen("tcp", "0.0.0.0", 22), [])
        self.assertEqual(self.host_srv.seen("udp", "0.0.0.0", 53), [])
        self.assertEqual(self.b_srv.seen("tcp", SBX_B, 8080), [])
        self.assertEqual(self.b_srv.seen("udp", SBX_B, 53), [])

    def test_04_other_interfaces_untouched(self):
        self.assertEqual(self.np("apply").returncode, 0)
        self.host_srv.clear()
        self.lan2_srv.clear()
        r = h.probes(self.lan, ROOT, [("tcp", HOST_LAN, 22),
                                       ("udp", HOST_LAN, 53),
                                       ("tcp", LAN2, 8080),
                                       ("icmp", LAN2, 0)])
        self.assertEqual(set(r.values()), {"ok"}, r)
        self.assertEqual(self.host_srv.seen("tcp", "0.0.0.0", 22), [LAN])
        self.assertEqual(self.lan2_srv.seen("tcp", LAN2, 8080), [LAN])
        # The host's own connections into a sandbox get no replies: a
        # sandbox may answer only connections to a listener (the
        # conntrack original tuple), never the gateway's own flows.
        self.b_srv.clear()
        self.assertNotEqual(h.probe(self.host, ROOT, "tcp", SBX_B, 8080),
                            "ok")
        # Forwarded replies from a sandbox are dropped all the same: a
        # reply to a connection from outside is a way out too.
        self.assertNotEqual(h.probe(self.lan, ROOT, "tcp", SBX_B, 8080),
                            "ok")

    def test_05_drop_event(self):
        self.assertEqual(self.np("apply").returncode, 0)
        w = h.Watch("-c", self.policy, "--netns", self.host.name)
        try:
            self.assertNotEqual(h.probe(self.a, ROOT, "tcp", SBX_B, 8080),
                                "ok")
            ev = w.wait_for(lambda e: e.get("dst") == SBX_B and
                            e.get("dport") == 8080)
            self.assertIsNotNone(ev, w.events)
            self.assertEqual((ev["proto"], ev["src"]), ("tcp", SBX_A))
            # Forwarded packets have no local socket, so no uid.
            self.assertNotIn("uid", ev)
        finally:
            self.assertEqual(w.stop(), 0)

    def test_06_verify_and_flush(self):
        self.assertEqual(self.np("apply").returncode, 0)
        self.host.nft("insert", "rule", "inet", "sluice", "sandbox_in",
                      "tcp", "dport", "22", "accept")
        p = self.np("verify")
        self.assertEqual(p.returncode, 1)
        self.assertIn("chain sandbox_in: unexpected rule", p.stdout)
        self.assertEqual(self.np("flush").returncode, 0)
        r = h.probe(self.a, ROOT, "tcp", SBX_B, 8080)
        self.assertEqual(r, "ok")

    def gw_flow(self, kind, peer, port, *extra):
        proc = subprocess.Popen(
            self.host.argv([sys.executable, "-u", "-c", GW_FLOW, kind, peer,
                            str(port)] + list(extra)),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        h.CLEANUP.push(lambda: h.stop_pid(proc))
        self.addCleanup(h.stop_pid, proc)
        line = proc.stdout.readline().split()
        if not line or line[0] != "ready":
            self.fail("gateway flow did not start: %s" % proc.stderr.read())
        return proc, line[1], int(line[2]), int(line[3]), int(line[4])

    def forge(self, kind, src, sport, dst, dport, seq=0, ack=0):
        p = self.a.run([sys.executable, "-c", RAW_SEND, kind, src, str(sport),
                        dst, str(dport), str(seq), str(ack)], check=False)
        self.assertEqual(p.stdout.strip(), "sent", p.stderr)

    def test_07_raw_injection(self):
        # A sandbox that is root in its own namespace (CAP_NET_RAW) forges
        # packets into the gateway's own flows. The kernel's own
        # reverse-path filter is off (the default here): the rules alone
        # must hold.
        for k in ("all", "default", "sbx-a"):
            self.host.sysctl("net.ipv4.conf.%s.rp_filter" % k, "0")
        # No timestamps: a forged segment needs only seq and ack.
        self.host.sysctl("net.ipv4.tcp_timestamps", "0")
        # Conntrack runs in a namespace only while a rule needs it: keep
        # it on while sluice's table is away, so that the flows opened
        # then are tracked as they would be under sluice.
        self.host.run(["nft", "-f", "-"], input=(
            "table inet ctkeep { chain c { type filter hook input "
            "priority 10; ct state new counter; }; }"))
        self.addCleanup(self.host.nft, "delete", "table", "inet", "ctkeep",
                        check=False)
        servers = []
        for ns, a in ((self.lan, LAN), (self.a, SBX_A)):
            p = subprocess.Popen(
                ns.argv([sys.executable, "-u", "-c", HOLD, a, "8081"]),
                stdout=subprocess.PIPE, text=True)
            h.CLEANUP.push(lambda p=p: h.stop_pid(p))
            self.addCleanup(h.stop_pid, p)
            servers.append(p)
        h.Servers(self.a, ["udp,%s,53" % SBX_A])
        for p in servers:
            self.assertEqual(p.stdout.readline().strip(), "ready")
        # The gateway's flows, opened while no rules are in (a flow into a
        # sandbox cannot be opened once they are): its resolver on the
        # lan and one reached through a sandbox, an upstream connection
        # on the lan and one into a sandbox.
        self.assertEqual(self.np("flush").returncode, 0)
        flows = {
            (LAN, 53): self.gw_flow("udp", LAN, 53),
            (SBX_A, 53): self.gw_flow("udp", SBX_A, 53, "answered"),
            (LAN, 8081): self.gw_flow("tcp", LAN, 8081),
            (SBX_A, 8081): self.gw_flow("tcp", SBX_A, 8081),
        }
        self.assertEqual(self.np("apply").returncode, 0)
        for (peer, pport), (proc, laddr, lport, rcv, snd) in flows.items():
            self.forge("udp" if pport == 53 else "tcp", peer, pport, laddr,
                       lport, rcv, snd)
        for proc, *_ in flows.values():
            proc.stdin.write("go\n")
            proc.stdin.flush()
        for flow, (proc, *_) in flows.items():
            self.assertEqual(proc.stdout.readline().strip(), "nothing", flow)
        # A spoofed source that routes out of another interface (an
        # unused lan address: nobody there answers the SYN-ACK with a
        # reset) to the listener: no half-open connection appears.
        spoofed = "198.18.22.77"
        self.forge("syn", spoofed, 40000, HOST_A, 3128, 1000, 0)
        time.sleep(0.5)
        ss = self.host.run(["ss", "-Htn", "state", "syn-recv"]).stdout
        self.assertNotIn(spoofed, ss)
        # The sandbox still reaches the listener itself.
        self.assertEqual(h.probe(self.a, ROOT, "tcp", HOST_A, 3128), "ok")


if __name__ == "__main__":
    h.main()
