"""A tiny authoritative DNS responder (UDP) for the tests.

It answers A and AAAA queries from a dict {name: {"A": [...], "AAAA":
[...]}}; other names get NXDOMAIN, other types an empty NOERROR answer.
The question is echoed byte for byte, so resolvers that randomise the
case of names (sluice does: 0x20) see their own spelling back.
The socket is created inside the given namespace and served by a thread
of the test process.

Options (all off by default): ttl of the answers; delay, seconds before
each UDP answer is sent (a slow resolver: the window a forger races);
truncate, every UDP answer comes back empty with TC set and the whole
answer is served over TCP on the same address and port (length-prefixed,
RFC 1035 4.2.2; tcp_queries records what came that way).
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


def truncated(reply):
    """reply cut to its header and question, with TC set and no records."""
    _qid, flags, qd, _an, _ns, _ar = struct.unpack("!HHHHHH", reply[:12])
    q = _parse_question(reply)
    end = q[2] if q is not None else 12
    return struct.pack("!HHHHHH", _qid, flags | 0x0200, qd, 0, 0, 0) + \
        reply[12:end]


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
    def __init__(self, ns, addr, records, port=53, ttl=30, delay=0.0,
                 truncate=False):
        self.records = {k.lower().rstrip("."): v for k, v in records.items()}
        self.queries = []  # (name, qtype) in arrival order
        self.tcp_queries = []  # the same, for queries over TCP
        self.ttl, self.delay, self.truncate = ttl, delay, truncate
        fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
        with entered(ns):
            self.sock = socket.socket(fam, socket.SOCK_DGRAM)
            self.tcp = socket.socket(fam, socket.SOCK_STREAM) \
                if truncate else None
        self.sock.bind((addr, port))
        self.sock.settimeout(0.2)
        self._stop = threading.Event()
        self._timers = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        self.tcp_thread = None
        if self.tcp is not None:
            self.tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.tcp.bind((addr, port))
            self.tcp.listen(16)
            self.tcp.settimeout(0.2)
            self.tcp_thread = threading.Thread(target=self._serve_tcp,
                                               daemon=True)
            self.tcp_thread.start()
        CLEANUP.push(self.close)

    def _send(self, reply, peer):
        try:
            self.sock.sendto(reply, peer)
        except OSError:
            pass

    def _serve_tcp(self):
        while not self._stop.is_set():
            try:
                c, _peer = self.tcp.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                c.settimeout(2)
                data = b""
                while len(data) < 2 or len(data) < 2 + struct.unpack(
                        "!H", data[:2])[0]:
                    chunk = c.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                msg = data[2:]
                q = _parse_question(msg) if len(msg) >= 12 else None
                if q is not None:
                    self.tcp_queries.append((q[0], q[1]))
                reply = build_answer(msg, self.records, self.ttl)
                if reply is not None:
                    c.sendall(struct.pack("!H", len(reply)) + reply)
            except OSError:
                pass
            finally:
                c.close()

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
            reply = build_answer(msg, self.records, self.ttl)
            if reply is None:
                continue
            if self.truncate:
                reply = truncated(reply)
            if self.delay > 0:
                t = threading.Timer(self.delay, self._send, (reply, peer))
                t.daemon = True
                self._timers.append(t)
                t.start()
            else:
                self._send(reply, peer)

    def close(self):
        self._stop.set()
        for t in self._timers:
            t.cancel()
        self.thread.join(2)
        if self.tcp_thread is not None:
            self.tcp_thread.join(2)
            self.tcp.close()
        self.sock.close()
