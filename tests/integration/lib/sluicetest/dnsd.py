"""A tiny authoritative DNS responder (UDP) for the tests.

It answers A and AAAA queries from a dict {name: {"A": [...], "AAAA":
[...]}}; other names get NXDOMAIN, other types an empty NOERROR answer.
The question is echoed byte for byte, so resolvers that randomise the
case of names (evdns does, by default) see their own spelling back.
The socket is created inside the given namespace and served by a thread
of the test process.
"""

import socket
import struct
import threading

from .base import CLEANUP
from .netns import entered

QTYPE_A = 1
QTYPE_AAAA = 28


def _parse_question(msg):
    """Returns (qname lower-case, qtype, end offset) or None."""
    off = 12
    labels = []
    while True:
        if off >= len(msg):
            return None
        n = msg[off]
        if n == 0:
            off += 1
            break
        if n & 0xC0 or off + 1 + n > len(msg):
            return None  # no compression in a question we accept
        labels.append(msg[off + 1:off + 1 + n].decode("ascii", "replace"))
        off += 1 + n
    if off + 4 > len(msg):
        return None
    qtype, qclass = struct.unpack("!HH", msg[off:off + 4])
    return ".".join(labels).lower(), qtype, off + 4


def build_answer(query, records, ttl=30):
    if len(query) < 12:
        return None
    qid, flags, qd, _an, _ns, _ar = struct.unpack("!HHHHHH", query[:12])
    if flags & 0x8000 or qd != 1:
        return None
    q = _parse_question(query)
    if q is None:
        return None
    name, qtype, end = q
    rd = flags & 0x0100
    entry = records.get(name.rstrip("."))
    answers = []
    rcode = 0
    if entry is None:
        rcode = 3  # NXDOMAIN
    else:
        kind = {QTYPE_A: "A", QTYPE_AAAA: "AAAA"}.get(qtype)
        fam = socket.AF_INET if kind == "A" else socket.AF_INET6
        for addr in entry.get(kind, []) if kind else []:
            rdata = socket.inet_pton(fam, addr)
            answers.append(struct.pack("!HHHIH", 0xC00C, qtype, 1, ttl,
                                       len(rdata)) + rdata)
    hdr = struct.pack("!HHHHHH", qid, 0x8000 | 0x0400 | rd | 0x0080 | rcode,
                      1, len(answers), 0, 0)
    return hdr + query[12:end] + b"".join(answers)


class DnsServer:
    def __init__(self, ns, addr, records, port=53):
        self.records = {k.lower().rstrip("."): v for k, v in records.items()}
        self.queries = []  # (name, qtype) in arrival order
        fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
        with entered(ns):
            self.sock = socket.socket(fam, socket.SOCK_DGRAM)
        self.sock.bind((addr, port))
        self.sock.settimeout(0.2)
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        CLEANUP.push(self.close)

    def _serve(self):
        while not self._stop.is_set():
            try:
                msg, peer = self.sock.recvfrom(4096)
            except socket.timeout:
                continue
            except OSError:
                return
            q = _parse_question(msg) if len(msg) >= 12 else None
            if q is not None:
                self.queries.append((q[0], q[1]))
            reply = build_answer(msg, self.records)
            if reply is not None:
                try:
                    self.sock.sendto(reply, peer)
                except OSError:
                    pass

    def close(self):
        self._stop.set()
        self.thread.join(2)
        self.sock.close()
