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
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netpolicy_harness as h  # noqa: E402

HOST_A, HOST_A6, HOST_B, HOST_LAN = ("198.18.20.1", "2001:2:20::1",
                                     "198.18.21.1", "198.18.22.1")
SBX_A, SBX_A6, SBX_B, LAN = ("198.18.20.2", "2001:2:20::2", "198.18.21.2",
                             "198.18.22.2")
HOST_LAN2, LAN2 = "198.18.23.1", "198.18.23.2"
ROOT = 0  # sandboxes may hold every privilege in their own namespace


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
              "listen": "[%s]:8080" % HOST_A6}])

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


if __name__ == "__main__":
    h.main()
