"""Hostile clients against the proxy engine: regression tests for the holes
an adversarial review found (fixed in eebde73). Each test replays one attack
with exact bytes and checks what the upstream, the audit log, the process
and its memory show afterwards:

- a Connection header naming Content-Length, Transfer-Encoding, Host or
  Authorization is a 400 (it would make the framing hop-by-hop and smuggle
  the body upstream as further requests); upstream framing is sluice's own
  (one canonical Content-Length; chunked bodies re-framed without
  extensions or trailers);
- a client that resets its connection while the upstream is still being
  set up does not crash sluice (TestCrash);
- pipelined refusals to a client that never reads stay bounded (stop
  reading, close after 64 in a row); a bodyless request on a pooled
  upstream followed by junk stays bounded;
- a half-closed tunnel whose client never reads is closed after
  idle_timeout_ms; a tunnel closes when its token expires or is revoked;
- a pinned route gets 200 on a second upstream TLS connection;
- a token in URL userinfo never reaches the audit log;
- "X_Cred" cannot spoof an injected "X-Cred";
- Content-Length: 0 keeps the client and upstream connections usable;
- a refusal honours Connection: close.

Topology (TestHostile, x=43): netns sbx (two sluices, raw sockets) <-veth->
netns up: fakeup (TLS) on 198.18.43.2:443 for model-up.test and
pin-up.test, a raw capture upstream (plain HTTP, RawUpstream below) on
198.18.43.3:8080, DNS on .53. TestCrash (x=44) has its own pair of
namespaces, a small tcp_wmem in its sbx and a sluice run under
`prlimit --nofile=64`."""

import json
import os
import re
import signal
import socket
import ssl
import struct
import sys
import threading
import time

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "lib"))

import sluicetest as st  # noqa: E402
import token_audit_harness as tah  # noqa: E402
from sluicetest import policy as pol  # noqa: E402
from sluicetest.daemons import header_values  # noqa: E402
from sluicetest.http import build_request  # noqa: E402

FWD = 3128      # main sluice: forward listener
REV = 8080      # main sluice: reverse listener (route "good")
SHORT = 3129    # second sluice: idle_timeout_ms 1000, leeway_s 0
SHORT_METRICS = 9465  # ... and its metrics listener
CRED = "injected-cred-value-1"
MB = 1024 * 1024


# -- helpers ------------------------------------------------------------------

def head(lines):
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def sock_in(ns, port, host="127.0.0.1", rcvbuf=None, timeout=5.0):
    """A TCP socket connected from inside ns (rcvbuf set before connect,
    so that the advertised window is small from the start)."""
    with st.entered(ns):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        if rcvbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.settimeout(timeout)
        s.connect((host, port))
    except OSError:
        s.close()
        raise
    return s


def rst_close(s):
    """Close with SO_LINGER {1, 0}: the peer gets a RST, not a FIN."""
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                     struct.pack("ii", 1, 0))
    except OSError:
        pass
    s.close()


def vm_rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS for pid %d" % pid)


def admin(path, line, timeout=5.0):
    """One admin command on the unix socket; the whole answer."""
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.settimeout(timeout)
    try:
        c.connect(path)
        c.sendall(line.encode() + b"\n")
        out = b""
        while True:
            d = c.recv(4096)
            if not d:
                break
            out += d
    finally:
        c.close()
    return out.decode("utf-8", "replace")


def admin_connections(path):
    for line in admin(path, "status").splitlines():
        k, _, v = line.partition(" ")
        if k == "connections":
            return int(v)
    raise AssertionError("no connections line in status")


def audit_lines(doc):
    try:
        with open(doc["audit"]["path"], "rb") as f:
            return [json.loads(x) for x in f.read().split(b"\n")[:-1]]
    except FileNotFoundError:
        return []


def recv_http(sock, deadline):
    """One HTTP/1.1 response with a Content-Length body from any object
    with recv() (a plain or TLS socket). Returns (status, head, body);
    raises OSError/ssl.SSLError or EOFError when the peer goes away."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("no response head")
        sock.settimeout(left)
        d = sock.recv(65536)
        if not d:
            raise EOFError("closed")
        buf += d
    hd, _, body = buf.partition(b"\r\n\r\n")
    lines = hd.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    length = 0
    for line in lines[1:]:
        n, _, v = line.partition(":")
        if n.strip().lower() == "content-length":
            length = int(v.strip())
    while len(body) < length:
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("short body")
        sock.settimeout(left)
        d = sock.recv(65536)
        if not d:
            raise EOFError("closed in body")
        body += d
    return status, lines, body[:length]


class RawUpstream:
    """A plain-HTTP upstream (a thread in this process, its socket in the
    up namespace) that keeps the exact bytes of every request it receives:
    fakeup decodes chunked bodies, this one shows the framing itself. Each
    request is answered 200 with a small JSON body; connections are kept
    alive."""

    def __init__(self, ns, addr, port):
        with st.entered(ns):
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((addr, port))
        self.sock.listen(16)
        self.lock = threading.Lock()
        self.requests = []  # (head lines, raw body bytes)
        self.closed = False
        st.CLEANUP.push(self.close)
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def mark(self):
        with self.lock:
            return len(self.requests)

    def since(self, mark):
        with self.lock:
            return list(self.requests[mark:])

    def _accept(self):
        while not self.closed:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,),
                             daemon=True).start()

    def _serve(self, c):
        c.settimeout(10)
        buf = b""
        try:
            while True:
                req, buf = self._one(c, buf)
                if req is None:
                    return
                with self.lock:
                    self.requests.append(req)
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json"
                          b"\r\nContent-Length: 2\r\n\r\n{}")
        except OSError:
            pass
        finally:
            c.close()

    @staticmethod
    def _fill(c, buf):
        d = c.recv(65536)
        if not d:
            raise EOFError
        return buf + d

    def _one(self, c, buf):
        """One request from c (buf: bytes already read); returns
        ((head lines, raw body), rest) or (None, b"") at the end."""
        try:
            while b"\r\n\r\n" not in buf:
                buf = self._fill(c, buf)
            hd, _, buf = buf.partition(b"\r\n\r\n")
            lines = hd.decode("latin-1").split("\r\n")
            names = {}
            for l in lines[1:]:
                n, _, v = l.partition(":")
                names[n.strip().lower()] = v.strip()
            raw = b""
            if names.get("transfer-encoding", "").lower() == "chunked":
                while True:  # size line, data, CRLF ... 0, trailers, CRLF
                    while b"\r\n" not in buf:
                        buf = self._fill(c, buf)
                    line, _, buf = buf.partition(b"\r\n")
                    raw += line + b"\r\n"
                    size = int(line.split(b";")[0], 16)
                    if size == 0:
                        break
                    while len(buf) < size + 2:
                        buf = self._fill(c, buf)
                    raw += buf[:size + 2]
                    buf = buf[size + 2:]
                while True:
                    while b"\r\n" not in buf:
                        buf = self._fill(c, buf)
                    line, _, buf = buf.partition(b"\r\n")
                    raw += line + b"\r\n"
                    if line == b"":
                        break
            elif "content-length" in names:
                n = int(names["content-length"])
                while len(buf) < n:
                    buf = self._fill(c, buf)
                raw, buf = buf[:n], buf[n:]
        except (EOFError, ValueError):
            return None, b""
        return (lines, raw), buf


def decode_chunked(raw):
    """(payload, [size lines], [trailer lines]) of a chunked body."""
    payload, sizes, trailers = b"", [], []
    while True:
        line, _, raw = raw.partition(b"\r\n")
        sizes.append(line)
        n = int(line.split(b";")[0], 16)
        if n == 0:
            break
        payload += raw[:n]
        raw = raw[n + 2:]
    while True:
        line, _, raw = raw.partition(b"\r\n")
        if line == b"":
            break
        trailers.append(line)
    return payload, sizes, trailers


# -- the main topology --------------------------------------------------------

class TestHostile(st.ProxyTestCase):
    TAG = "hostile"
    X = 43

    @classmethod
    def build(cls):
        h, t = cls.h, cls.h.topo
        cls.cert, key = h.ca.issue("model-up", ["DNS:model-up.test",
                                                "DNS:pin-up.test",
                                                "IP:" + t.v4(2)])
        cls.up = h.fakeup("main", ["%s:443" % t.v4(2)], cls.cert, key)
        cls.raw = RawUpstream(h.up, t.v4(3), 8080)
        h.dns_server({"model-up.test": {"A": [t.v4(2)]},
                      "pin-up.test": {"A": [t.v4(2)]}})
        cred = h.secret_value("x-cred", CRED)
        routes = [
            pol.route("good", ["good.test"], "https://model-up.test/",
                      h.ca.cert, methods=("POST", "GET"), prefixes=("/v1/",),
                      headers=[("X-Cred", cred)]),
            pol.route("raw", ["raw.test"], "http://%s:8080/" % t.v4(3),
                      prefixes=("/v1/",), allow_plaintext=True),
            pol.route("pinned", ["pinned.test"], "https://pin-up.test/",
                      h.ca.cert, prefixes=("/v1/",),
                      pins=[st.spki_pin(cls.cert)]),
        ]
        cls.doc = h.policy("main", [pol.forward("fwd", "127.0.0.1:%d" % FWD),
                                    pol.reverse("rev", "127.0.0.1:%d" % REV,
                                                "good")], routes)
        cls.sl = h.sluice("main", cls.doc)
        short = h.policy("short", [pol.forward("fwd", "127.0.0.1:%d" %
                                               SHORT)], routes,
                         {"idle_timeout_ms": 1000})
        short["tokens"]["leeway_s"] = 0
        short["metrics"] = {"listen": "127.0.0.1:%d" % SHORT_METRICS}
        cls.short_doc = short
        cls.short = h.sluice("short", short)
        cls.tok = h.token("good")
        cls.pauth = "Proxy-Authorization: Bearer " + cls.tok
        cls.tok_raw = h.token("raw")
        cls.tok_pin = h.token("pinned")

    # -- helpers -----------------------------------------------------------

    def fq(self, extra, body, target="http://good.test/v1/messages",
           host="good.test", auth=True, tok=None):
        lines = ["POST %s HTTP/1.1" % target, "Host: " + host]
        if auth:
            lines.append("Proxy-Authorization: Bearer " + (tok or self.tok))
        return head(lines + list(extra)) + body

    def exchange(self, data, port=FWD, timeout=5.0, check_closed=False):
        """One request on a new connection: (response, whether the server
        closed within 2 s, or None when not asked)."""
        with self.h.raw(port) as c:
            c.send(data, ignore_errors=True)
            try:
                r = c.read_response(timeout=timeout)
            except st.Closed:
                self.fail("closed without a response to %r" % data[:200])
            return r, (c.closed(2.0) if check_closed else None)

    def spliced(self):
        """The short sluice's sluice_tunnels_spliced_total."""
        with self.h.raw(SHORT_METRICS) as c:
            r = c.request(build_request("GET", "/metrics", "127.0.0.1",
                                        ["Connection: close"]))
        self.assertEqual(r.status, 200, r)
        v = tah.metric(tah.parse_prometheus(r.body.decode("utf-8"))[2],
                       "sluice_tunnels_spliced_total")
        self.assertIsNotNone(v, "no sluice_tunnels_spliced_total")
        return int(v)

    def tunnel_line(self, match, since=0):
        """The first connect.tunnel audit line from index since on that
        match(line) accepts, waited for; None if none came."""
        return st.wait_until(lambda: next(
            (e for e in audit_lines(self.short_doc)[since:]
             if e.get("event") == "connect.tunnel" and match(e)), None),
            st.ENV.slow(5.0), 0.05)

    def open_tunnel(self, tok, port=SHORT, rcvbuf=None, splice=False):
        """CONNECT model-up.test:443 and TLS inside; the TLS socket. With
        splice, a 1 MiB download first, after which the tunnel has moved
        to splice(2) (checked on the metrics)."""
        if splice:
            n0 = self.spliced()
            ts = self.open_tunnel(tok, port, rcvbuf)
            ts.sendall(head(["GET /v1/big?bytes=%d HTTP/1.1" % MB,
                             "Host: model-up.test"]))
            got, bad = self.read_pattern(ts, MB, bytes(range(97, 123)),
                                         st.ENV.slow(10.0))
            if (got, bad) != (MB, None) or self.spliced() != n0 + 1:
                ts.close()
                self.fail("1 MiB: %d bytes, bad at %r; spliced %d -> %d" %
                          (got, bad, n0, self.spliced()))
            return ts
        s = sock_in(self.h.sbx, port, rcvbuf=rcvbuf)
        s.sendall(head(["CONNECT model-up.test:443 HTTP/1.1",
                        "Host: model-up.test:443",
                        "Proxy-Authorization: Bearer " + tok]))
        buf = b""
        while b"\r\n\r\n" not in buf:
            d = s.recv(1)  # byte by byte: TLS bytes must stay unread
            if not d:
                s.close()
                self.fail("CONNECT: closed after %r" % buf)
            buf += d
        if not buf.startswith(b"HTTP/1.1 200"):
            s.close()
            self.fail("CONNECT refused: %r" % buf)
        ctx = ssl.create_default_context(cafile=self.h.ca.cert)
        return ctx.wrap_socket(s, server_hostname="model-up.test")

    def tunnel_round(self, ts):
        ts.sendall(head(["POST /v1/messages HTTP/1.1",
                         "Host: model-up.test", "Content-Length: 2"]) + b"{}")
        status, _, _ = recv_http(ts, time.monotonic() + 3.0)
        return status

    def run_tunnel_until_closed(self, ts, limit_s, gap=0.2):
        """Exchange requests through the tunnel every gap seconds until it
        breaks or limit_s passes; returns the wall-clock time of the break
        (None if it stayed up) and the number of good exchanges."""
        end = time.monotonic() + limit_s
        ok = 0
        while time.monotonic() < end:
            try:
                self.assertEqual(self.tunnel_round(ts), 200)
                ok += 1
            except (OSError, EOFError, ssl.SSLError):
                return time.time(), ok
            time.sleep(gap)
        return None, ok

    # -- 1. smuggling through Connection -----------------------------------

    def test_connection_naming_protected_headers_is_refused(self):
        smug = (b"GET /admin/secret?x=1 HTTP/1.1\r\nHost: model-up.test\r\n"
                b"X-Smuggled: yes\r\n\r\n")
        chunked = b"%x\r\n" % len(smug) + smug + b"\r\n0\r\n\r\n"
        cases = {
            "content-length (body is a request)": (FWD, self.fq(
                ["Connection: content-length",
                 "Content-Length: %d" % len(smug)], smug)),
            "listed with others, mixed case": (FWD, self.fq(
                ["Connection: keep-alive, Content-Length",
                 "Content-Length: %d" % len(smug)], smug)),
            "transfer-encoding": (FWD, self.fq(
                ["Connection: transfer-encoding",
                 "Transfer-Encoding: chunked"], chunked)),
            "host": (FWD, self.fq(["Connection: host",
                                   "Content-Length: 2"], b"{}")),
            "authorization (forward)": (FWD, self.fq(
                ["Authorization: Bearer " + self.tok,
                 "Connection: authorization", "Content-Length: 2"], b"{}")),
            "authorization (reverse, the carrier)": (REV, head(
                ["POST /v1/messages HTTP/1.1", "Host: 127.0.0.1:%d" % REV,
                 "Authorization: Bearer " + self.tok,
                 "Connection: authorization", "Content-Length: 2"]) +
                b"{}"),
        }
        for name, (port, data) in cases.items():
            with self.subTest(name):
                m = self.up.log.mark()
                r, closed = self.exchange(data, port, check_closed=True)
                self.assertDenied(r, 400, "bad_request")
                self.assertTrue(closed, "connection left open after 400")
                time.sleep(0.1)
                self.assertNothingUpstream(self.up, m)

    def test_request_framing_is_written_by_sluice(self):
        # Content-Length: exactly one, canonical, the parsed value.
        for name, cl in (("plain", "9"), ("leading zeros", "0009")):
            with self.subTest("content-length " + name):
                m = self.up.log.mark()
                r, _ = self.exchange(self.fq(["Content-Length: " + cl],
                                             b'{"k":"v"}'))
                self.assertEqual(r.status, 200, r)
                reqs = self.up.log.wait_for(m, "request")
                self.assertEqual(len(reqs), 1, reqs)
                self.assertEqual(header_values(reqs[0], "Content-Length"),
                                 ["9"], reqs[0]["headers"])
                self.assertEqual(reqs[0]["body_bytes"], 9)
                with open(reqs[0]["body_file"], "rb") as f:
                    self.assertEqual(f.read(), b'{"k":"v"}')
        # Chunked: re-framed, extensions and trailers left behind.
        cases = {
            "extension and trailer": (
                b"5;ext=1\r\nhello\r\n0\r\nX-Trailer: evil\r\n\r\n",
                b"5\r\nhello\r\n0\r\n\r\n"),
            "upper-case hex, zero padding, two trailers": (
                b"0A;a=\"b\"\r\n0123456789\r\n0;last\r\nX-T: 1\r\n"
                b"X-Smuggle: 2\r\n\r\n",
                b"a\r\n0123456789\r\n0\r\n\r\n"),
        }
        for name, (sent, want) in cases.items():
            with self.subTest("chunked " + name):
                m = self.raw.mark()
                r, _ = self.exchange(self.fq(
                    ["Transfer-Encoding: chunked"], sent,
                    target="http://raw.test/v1/messages", host="raw.test",
                    tok=self.tok_raw))
                self.assertEqual(r.status, 200, r)
                got = st.wait_until(lambda: self.raw.since(m), 3.0)
                self.assertTrue(got, "nothing reached the raw upstream")
                lines, raw = got[0]
                te = [l for l in lines[1:]
                      if l.lower().startswith("transfer-encoding:")]
                self.assertEqual(te, ["Transfer-Encoding: chunked"], lines)
                self.assertFalse([l for l in lines[1:] if l.lower()
                                  .startswith(("content-length:", "x-t"))],
                                 lines)
                payload, sizes, trailers = decode_chunked(raw)
                self.assertEqual(payload, decode_chunked(sent)[0])
                self.assertEqual(trailers, [], raw)
                for s in sizes:
                    self.assertRegex(s, rb"^(0|[1-9a-f][0-9a-f]*)$", raw)
                self.assertEqual(raw, want)
        # The same through fakeup: the payload arrives whole.
        m = self.up.log.mark()
        r, _ = self.exchange(self.fq(["Transfer-Encoding: chunked"],
                                     b"3;x=y\r\nhel\r\n2\r\nlo\r\n0\r\n"
                                     b"X-Trailer: evil\r\n\r\n"))
        self.assertEqual(r.status, 200, r)
        reqs = self.up.log.wait_for(m, "request")
        self.assertEqual(len(reqs), 1)
        with open(reqs[0]["body_file"], "rb") as f:
            self.assertEqual(f.read(), b"hello")

    # -- 3. pipelined refusals to a client that never reads ------------------

    def test_pipelined_refusals_to_a_non_reader_are_bounded(self):
        # No token (407) and no body: a refusal that keeps the connection.
        one = head(["POST http://good.test/v1/messages HTTP/1.1",
                    "Host: good.test"])
        blob = one * 2000
        pid = self.sl.pid
        rss0 = peak = vm_rss_kb(pid)
        s = sock_in(self.h.sbx, FWD, timeout=0.5)
        sent = 0
        try:
            # At most 32 MB (some 800k requests): old code queued a refusal
            # for each, far beyond 64 MB. The cap keeps what a closing
            # sluice reads and discards (its linger) within reason for
            # ASan, whose quarantine holds freed memory.
            t0 = time.monotonic()
            while time.monotonic() - t0 < 4.0 and sent < 32 * MB:
                try:
                    s.sendall(blob)
                    sent += len(blob)
                except socket.timeout:
                    pass  # sluice stopped reading: what it should do
                except OSError:
                    break  # closed by sluice
                peak = max(peak, vm_rss_kb(pid))
            # Read now: the refusals that were written, then the end. At
            # most 1 MB, which old code would far exceed.
            data, end = b"", None
            deadline = time.monotonic() + 3.0
            while len(data) < MB and time.monotonic() < deadline:
                s.settimeout(max(0.01, deadline - time.monotonic()))
                try:
                    d = s.recv(65536)
                except socket.timeout:
                    break
                except ConnectionResetError:
                    end = "reset"
                    break
                if not d:
                    end = "eof"
                    break
                data += d
        finally:
            s.close()
        n = data.count(b"HTTP/1.1 407 ")
        self.assertTrue(self.sl.alive())
        self.assertIsNotNone(end, "connection still open after %d "
                             "refusals" % n)
        self.assertGreater(n, 0)
        self.assertLessEqual(n, 64, "%d refusals in a row on one "
                             "connection (%d with Connection: close)" % (
                                 n, data.count(b"Connection: close")))
        # ASan's quarantine keeps up to 256 MB of freed memory (here: the
        # input a closing sluice reads and discards) in the RSS.
        limit = 64 * 1024 + (256 * 1024 if st.ENV.sanitize else 0)
        self.assertLess(peak - rss0, limit,
                        "RSS grew by %d kB (sent %d bytes in %.1f s, %d "
                        "refusals read)" % (peak - rss0, sent,
                                            time.monotonic() - t0, n))

    # -- 4. pooled upstream, bodyless request, junk behind it ---------------

    def test_bodyless_request_then_junk_is_bounded(self):
        r, _ = self.exchange(self.fq(["Content-Length: 2"], b"{}"))
        self.assertEqual(r.status, 200, r)  # warms the pool
        pid = self.sl.pid
        rss0 = peak = vm_rss_kb(pid)
        s = sock_in(self.h.sbx, FWD, timeout=0.5)
        sent = 0
        try:
            s.sendall(head(["POST http://good.test/v1/hang HTTP/1.1",
                            "Host: good.test", self.pauth]))
            junk = b"A" * MB
            t0 = time.monotonic()
            while time.monotonic() - t0 < 3.0:
                try:
                    s.sendall(junk)
                    sent += len(junk)
                except socket.timeout:
                    pass
                except OSError:
                    break
                peak = max(peak, vm_rss_kb(pid))
        finally:
            rst_close(s)
        self.assertTrue(self.sl.alive())
        self.assertLess(peak - rss0, 64 * 1024,
                        "RSS grew by %d kB" % (peak - rss0))
        self.assertLess(sent, 64 * MB, "sluice took %d bytes of junk" % sent)

    # -- 5. half-closed tunnel, client never reads ---------------------------

    def until_connections(self, sock, n):
        """Whether the admin socket's connection count came down to n
        within 5 s, and after how long."""
        t0 = time.monotonic()
        gone = st.wait_until(lambda: admin_connections(sock) == n,
                             st.ENV.slow(5.0), 0.05)
        return gone, time.monotonic() - t0

    def test_idle_tunnel_is_closed(self):
        """A tunnel nobody sends on ends after idle_timeout_ms (1 s here);
        one in use does not. Its idle clock is monotonic: it once
        compared a wall-clock start with a monotonic now, and an idle
        tunnel lived for ever."""
        self.idle_tunnel_is_closed(False)

    def test_idle_spliced_tunnel_is_closed(self):
        """The same once the tunnel moved to splice(2): its own timer."""
        self.idle_tunnel_is_closed(True)

    def idle_tunnel_is_closed(self, splice):
        sock = self.short_doc["admin"]["socket"]
        base = admin_connections(sock)
        ts = self.open_tunnel(self.tok, splice=splice)
        try:
            for _ in range(4):  # busy for 1.6 s: kept
                self.assertEqual(self.tunnel_round(ts), 200)
                time.sleep(0.4)
            self.assertEqual(admin_connections(sock), base + 1)
            gone, took = self.until_connections(sock, base)
        finally:
            ts.close()
        self.assertTrue(gone, "idle tunnel still open %.1f s later "
                        "(idle_timeout_ms 1000)" % took)
        self.assertGreater(took, 0.5, "closed at once")

    def test_big_body_through_a_tunnel(self):
        """A 48 MiB body through a CONNECT tunnel, after a first small
        exchange, arrives whole and in order, and the tunnel's audit line
        counts it (bytes_out) and the requests (bytes_in). The tunnel
        moved to splice(2) on the way (the metrics count it)."""
        n = 48 * MB
        abc = bytes(range(97, 123))
        n0 = self.spliced()
        ts = self.open_tunnel(self.tok)
        try:
            self.assertEqual(self.tunnel_round(ts), 200)
            ts.sendall(head(["GET /v1/big?bytes=%d HTTP/1.1" % n,
                             "Host: model-up.test"]))
            got, bad = self.read_pattern(ts, n, abc, st.ENV.slow(60.0))
        finally:
            ts.close()
        self.assertEqual((got, bad), (n, None), "bytes read, bad offset")
        rec = self.tunnel_line(lambda e: e.get("bytes_out", 0) >= n)
        self.assertIsNotNone(rec, "no connect.tunnel line counting the body")
        self.assertGreater(rec["bytes_in"], 0)
        self.assertEqual(self.spliced(), n0 + 1)

    def test_big_upload_through_a_spliced_tunnel(self):
        """Client to upstream through a spliced tunnel: a 24 MiB request
        body arrives whole (the upstream counts it), the response comes
        back, and the audit line's bytes_in counts the upload."""
        n = 24 * MB
        m = self.up.log.mark()
        ts = self.open_tunnel(self.tok, splice=True)
        try:
            ts.sendall(head(["POST /v1/messages HTTP/1.1",
                             "Host: model-up.test",
                             "Content-Length: %d" % n]))
            chunk = b"x" * MB
            for _ in range(n // MB):
                ts.sendall(chunk)
            status, _, _ = recv_http(ts, time.monotonic() +
                                     st.ENV.slow(20.0))
        finally:
            ts.close()
        self.assertEqual(status, 200)
        reqs = self.up.log.wait_for(m, "request", 2)
        self.assertEqual([q["body_bytes"] for q in reqs][-1:], [n], reqs)
        rec = self.tunnel_line(lambda e: e.get("bytes_in", 0) >= n)
        self.assertIsNotNone(rec, "no connect.tunnel line counting the "
                             "upload")
        self.assertGreater(rec["bytes_out"], MB)

    def test_small_tunnel_stays_buffered(self):
        """A tunnel that carries a few small exchanges is not worth two
        pipes: it never moves to splice(2)."""
        n0 = self.spliced()
        ts = self.open_tunnel(self.tok)
        try:
            for _ in range(3):
                self.assertEqual(self.tunnel_round(ts), 200)
        finally:
            ts.close()
        self.assertEqual(self.spliced(), n0)

    def test_reset_in_a_spliced_tunnel(self):
        """A client that resets a spliced tunnel in the middle of a 48 MiB
        download: the tunnel's audit line says client_closed, the
        connection is gone, and sluice serves the next tunnel."""
        sock = self.short_doc["admin"]["socket"]
        base = admin_connections(sock)
        ts = self.open_tunnel(self.tok, splice=True)
        ts.sendall(head(["GET /v1/big?bytes=%d HTTP/1.1" % (48 * MB),
                         "Host: model-up.test"]))
        ts.recv(65536)
        rst_close(ts)
        gone, took = self.until_connections(sock, base)
        self.assertTrue(gone, "still open %.1f s after the reset" % took)
        rec = self.tunnel_line(lambda e: e.get("reason") == "client_closed"
                               and e.get("bytes_out", 0) > MB)
        self.assertIsNotNone(rec, "no client_closed tunnel line")
        self.assertTrue(self.short.alive())
        ts = self.open_tunnel(self.tok)
        try:
            self.assertEqual(self.tunnel_round(ts), 200)
        finally:
            ts.close()

    # -- unsent bytes a socket of sluice's holds -----------------------

    def unsent(self, lport, cport):
        """sluice's socket on lport to the client on cport, as ss shows it
        in sbx: (Send-Q, notsent bytes)."""
        p = st.run(st.ns_exec(self.h.sbx, [
            "ss", "-Htni", "state", "established",
            "( sport = :%d and dport = :%d )" % (lport, cport)]))
        lines = p.stdout.split("\n")
        self.assertTrue(lines and lines[0].split(), "no socket: %r" %
                        p.stdout)
        m = re.search(r"\bnotsent:(\d+)", p.stdout)
        return int(lines[0].split()[1]), int(m.group(1)) if m else 0

    def unsent_bounded(self, sock, lport, send_big):
        """After a 4 MiB body read at full speed (the socket's send buffer
        grows with its window), a 48 MiB one the client does not read:
        what sluice's socket holds unsent stays under
        CONN_NOTSENT_LOWAT (32 KiB) and one more write's worth, once the
        client's window is full. Without TCP_NOTSENT_LOWAT it is the
        send buffer, megabytes."""
        abc = bytes(range(97, 123))
        cport = socket.socket.getsockname(sock)[1]
        send_big(4 * MB)
        got, bad = self.read_pattern(sock, 4 * MB, abc, st.ENV.slow(20.0))
        self.assertEqual((got, bad), (4 * MB, None))
        send_big(48 * MB)
        prev, same = None, 0
        deadline = time.monotonic() + st.ENV.slow(10.0)
        while same < 3 and time.monotonic() < deadline:  # settled
            time.sleep(0.2)
            now = self.unsent(lport, cport)
            same = same + 1 if now == prev else 0
            prev = now
        sendq, notsent = prev
        self.assertGreater(sendq, 0, "nothing queued: the body is not "
                           "held back by the client")
        self.assertLessEqual(notsent, 32 * 1024 + 96 * 1024,
                             "unsent bytes in sluice's socket (Send-Q %d)"
                             % sendq)

    def test_unsent_bytes_bounded_in_a_tunnel(self):
        # The main sluice (the short one's idle timeout would end the
        # tunnel while it settles); spliced after its first 64 KiB.
        ts = self.open_tunnel(self.tok, port=FWD)
        try:
            self.unsent_bounded(ts, FWD, lambda n: ts.sendall(head([
                "GET /v1/big?bytes=%d HTTP/1.1" % n,
                "Host: model-up.test"])))
        finally:
            ts.close()

    def test_unsent_bytes_bounded_in_an_exchange(self):
        s = sock_in(self.h.sbx, FWD)
        try:
            self.unsent_bounded(s, FWD, lambda n: s.sendall(head([
                "GET http://good.test/v1/big?bytes=%d HTTP/1.1" % n,
                "Host: good.test", self.pauth])))
        finally:
            s.close()

    @staticmethod
    def read_pattern(ts, n, abc, limit_s):
        """Read a response whose n-byte body is fakeup's pattern (byte i
        is abc[i % 26]); (body bytes read, first bad offset or None)."""
        deadline = time.monotonic() + limit_s
        buf = b""
        while b"\r\n\r\n" not in buf:
            ts.settimeout(max(0.01, deadline - time.monotonic()))
            d = ts.recv(65536)
            if not d:
                return 0, 0
            buf += d
        body = buf.partition(b"\r\n\r\n")[2]
        got = 0
        while True:
            if body:
                o = got % 26
                want = (abc[o:] + abc[:o]) * (len(body) // 26 + 2)
                if body != want[:len(body)]:
                    return got, got
                got += len(body)
            if got >= n or time.monotonic() > deadline:
                return got, None
            ts.settimeout(max(0.01, deadline - time.monotonic()))
            body = ts.recv(262144)
            if not body:
                return got, None

    def test_half_closed_tunnel_non_reader_is_closed(self):
        self.half_closed_non_reader(False)

    def test_half_closed_spliced_tunnel_non_reader_is_closed(self):
        self.half_closed_non_reader(True)

    def half_closed_non_reader(self, splice):
        sock = self.short_doc["admin"]["socket"]
        base = admin_connections(sock)
        ts = self.open_tunnel(self.tok, rcvbuf=4096, splice=splice)
        try:
            ts.sendall(head(["GET /v1/big?bytes=50000000 HTTP/1.1",
                             "Host: model-up.test"]))
            time.sleep(0.5)
            self.assertEqual(admin_connections(sock), base + 1)
            # FIN without close_notify, then never read again.
            socket.socket.shutdown(ts, socket.SHUT_WR)
            gone, took = self.until_connections(sock, base)
        finally:
            ts.close()
        self.assertTrue(gone, "tunnel still open %.1f s after the half-close "
                        "(idle_timeout_ms 1000)" % took)
        self.assertTrue(self.short.alive())

    def test_half_closed_tunnel_still_gets_the_response(self):
        self.half_closed_reader(False)

    def test_half_closed_spliced_tunnel_still_gets_the_response(self):
        self.half_closed_reader(True)

    def half_closed_reader(self, splice):
        """The client sends its request and a FIN, then reads: the
        upstream's whole response arrives, then the tunnel's own FIN, and
        the tunnel ends ok (the last direction's end is close(), not
        shutdown() then close()). The client's small receive buffer and
        late first read leave the response's tail in the tunnel when the
        upstream's FIN comes: it must still arrive."""
        sock = self.short_doc["admin"]["socket"]
        base = admin_connections(sock)
        m = len(audit_lines(self.short_doc))
        n = 4 * MB
        ts = self.open_tunnel(self.tok, rcvbuf=4096, splice=splice)
        client = ":%d" % socket.socket.getsockname(ts)[1]
        try:
            ts.sendall(head(["GET /v1/big?bytes=%d HTTP/1.1" % n,
                             "Host: model-up.test", "Connection: close"]))
            socket.socket.shutdown(ts, socket.SHUT_WR)
            time.sleep(0.3)
            got, bad = self.read_pattern(ts, n, bytes(range(97, 123)),
                                         st.ENV.slow(20.0))
            self.assertEqual((got, bad), (n, None))
            ts.settimeout(st.ENV.slow(5.0))
            try:
                tail = ts.recv(1)
            except ssl.SSLEOFError:
                tail = b""  # TCP FIN without close_notify: still an end
            self.assertEqual(tail, b"")
        finally:
            ts.close()
        gone, took = self.until_connections(sock, base)
        self.assertTrue(gone, "tunnel open %.1f s after both FINs" % took)
        # This tunnel's line: the one before may be written after m.
        rec = self.tunnel_line(
            lambda e: e.get("client", "").endswith(client), since=m)
        self.assertIsNotNone(rec, "no connect.tunnel line")
        self.assertEqual(rec.get("reason"), "ok", rec)
        self.assertGreater(rec.get("bytes_out", 0), n)

    # -- 6. pinned route, second upstream TLS connection ---------------------

    def test_pinned_route_second_connection(self):
        def one(path, out):
            try:
                with self.h.raw(FWD) as c:
                    r = c.request(build_request(
                        "POST", "http://pinned.test" + path, "pinned.test",
                        ["Proxy-Authorization: Bearer " + self.tok_pin],
                        b"{}"), timeout=10)
                    out.append((r.status, r.header("Sluice-Deny")))
            except Exception as e:  # reported by the assertion below
                out.append(("error", repr(e)))

        m = self.up.log.mark()
        first = []
        one("/v1/messages", first)
        self.assertEqual(first, [(200, None)])
        time.sleep(0.2)
        res = []
        ths = [threading.Thread(target=one,
                                args=("/v1/stream?n=3&gap_ms=300", res))
               for _ in range(2)]
        for th in ths:
            th.start()
        for th in ths:
            th.join(20)
        self.assertEqual(res, [(200, None), (200, None)])
        hs = [e for e in self.up.log.since(m, ("handshake",
                                               "handshake_failed"))
              if e.get("sni") == "pin-up.test"]
        self.assertGreaterEqual(len(hs), 2, hs)  # a second connection
        self.assertFalse([e for e in hs if e.get("resumed")], hs)

    # -- 7. a token in URL userinfo stays out of the audit log ---------------

    def test_userinfo_token_not_audited(self):
        tok = self.h.token("good", sub="userinfo-run")
        n0 = len(audit_lines(self.doc))
        data = (b"POST http://run:" + tok.encode() +
                b"@good.test/v1/messages?k=v HTTP/1.1\r\nHost: good.test\r\n"
                b"Content-Length: 2\r\n\r\n{}")
        m = self.up.log.mark()
        r, closed = self.exchange(data, check_closed=True)
        self.assertDenied(r, 400, "bad_request")
        self.assertTrue(closed)
        self.assertNothingUpstream(self.up, m)
        new = st.wait_until(lambda: [e for e in audit_lines(self.doc)[n0:]
                                     if e.get("reason") == "bad_request"],
                            3.0)
        self.assertTrue(new, "the 400 was not audited")
        with open(self.doc["audit"]["path"], "rb") as f:
            text = f.read()
        _, payload, sig = tok.split(".")
        for what, s in (("token", tok), ("signature", sig),
                        ("claims", payload)):
            # assertFalse: assertNotIn would print the secret and the log.
            self.assertFalse(s.encode() in text, "audit log holds the %s" %
                             what)
            self.assertFalse(s in self.sl.stderr(), "stderr holds the %s" %
                             what)

    # -- 8. an underscore cannot spoof an injected header --------------------

    def test_injected_header_not_spoofed_with_underscore(self):
        m = self.up.log.mark()
        r, _ = self.exchange(self.fq(["X_Cred: forged", "Content-Length: 2"],
                                     b"{}"))
        self.assertEqual(r.status, 200, r)
        reqs = self.up.log.wait_for(m, "request")
        self.assertEqual(len(reqs), 1)
        creds = [(n, v) for n, v in reqs[0]["headers"]
                 if n.lower().replace("_", "-") == "x-cred"]
        self.assertEqual(creds, [("X-Cred", CRED)], reqs[0]["headers"])

    # -- 9. Content-Length: 0 on keep-alive ----------------------------------

    def test_content_length_zero_keeps_alive(self):
        m = self.up.log.mark()
        with self.h.raw(FWD) as c:
            for i in range(2):
                c.send(self.fq(["Content-Length: 0"], b""))
                try:
                    r = c.read_response()
                except st.Closed:
                    self.fail("closed before response %d" % (i + 1))
                self.assertEqual(r.status, 200, r)
                self.assertNotEqual((r.header("Connection") or "").lower(),
                                    "close", r)
            self.assertFalse(c.closed(0.3), "client connection closed")
        reqs = self.up.log.wait_for(m, "request", 2)
        self.assertEqual(len(reqs), 2, reqs)
        self.assertEqual([q["body_bytes"] for q in reqs], [0, 0])
        self.assertEqual(len({q["conn"] for q in reqs}), 1,
                         "the upstream connection was not reused")

    # -- 10. tunnels end with their token ------------------------------------

    def test_tunnel_closes_when_token_expires(self):
        self.tunnel_closes_when_token_expires(False)

    def test_spliced_tunnel_closes_when_token_expires(self):
        self.tunnel_closes_when_token_expires(True)

    def tunnel_closes_when_token_expires(self, splice):
        tok = self.h.token("good", ttl=3, sub="short-run")
        exp = st.claims_of(tok)["exp"]
        ts = self.open_tunnel(tok, splice=splice)
        try:
            closed_at, ok = self.run_tunnel_until_closed(
                ts, exp + 4.0 - time.time())
        finally:
            ts.close()
        self.assertGreater(ok, 0, "no exchange before the token expired")
        self.assertIsNotNone(closed_at, "tunnel open 4 s after exp")
        self.assertGreater(closed_at, exp - 0.5, "closed before exp")
        self.assertLess(closed_at, exp + 2.5, "closed late")

    def test_tunnel_closes_when_token_revoked(self):
        self.tunnel_closes_when_token_revoked(False)

    def test_spliced_tunnel_closes_when_token_revoked(self):
        self.tunnel_closes_when_token_revoked(True)

    def tunnel_closes_when_token_revoked(self, splice):
        tok = self.h.token("good", sub="revoked-run")
        jti = st.claims_of(tok)["jti"]
        ts = self.open_tunnel(tok, splice=splice)
        try:
            self.assertEqual(self.tunnel_round(ts), 200)
            ans = admin(self.short_doc["admin"]["socket"], "revoke " + jti)
            self.assertFalse(ans.startswith("error"), ans)
            t0 = time.time()
            closed_at, ok = self.run_tunnel_until_closed(ts, 4.0)
        finally:
            ts.close()
        self.assertIsNotNone(closed_at, "tunnel open 4 s after the revoke")
        self.assertLess(closed_at - t0, 2.5)

    # -- 11. Connection: close on a kept refusal -----------------------------

    def test_refusal_honours_connection_close(self):
        # Bodyless: a refusal that would otherwise keep the connection.
        r, closed = self.exchange(self.fq(["Connection: close"], b"",
                                          auth=False), check_closed=True)
        self.assertDenied(r, 407, "token_missing", "proxy")
        self.assertEqual(r.header_all("Connection"), ["close"], r)
        self.assertTrue(closed, "connection left open")


# -- the crash: a connection closed while its upstream is set up --------------

class LimitedSluice(st.Sluice):
    """sluice run under prlimit --nofile (prlimit and ip netns exec both
    exec, so the pid is sluice's own)."""

    def __init__(self, ns, policy_path, name, tmpdir, nofile):
        self.policy_path = policy_path
        argv = ["prlimit", "--nofile=%d:%d" % (nofile, nofile), "--"] + \
            st.ns_exec(ns, [st.ENV.bin, "run", "-c", policy_path])
        st.Proc.__init__(self, argv, name, tmpdir)


class TestCrash(st.ProxyTestCase):
    TAG = "hostile-crash"
    X = 44
    NOFILE = 64

    @classmethod
    def build(cls):
        h, t = cls.h, cls.h.topo
        # This class's own sbx only: small kernel send buffers, so that a
        # few KB of responses a client does not read stay in sluice's own
        # output (and its write event stays armed).
        st.run(["ip", "netns", "exec", h.sbx, "sysctl", "-q", "-w",
                "net.ipv4.tcp_wmem=4096 4096 16384"])
        cert, key = h.ca.issue("model-up", ["DNS:model-up.test",
                                            "IP:" + t.v4(2)])
        cls.up = h.fakeup("main", ["%s:443" % t.v4(2)], cert, key)
        h.dns_server({"model-up.test": {"A": [t.v4(2)]}})
        routes = [
            pol.route("good", ["good.test"], "https://model-up.test/",
                      h.ca.cert, prefixes=("/v1/",)),
            # Literal addresses: fakeup, a silent on-link address (the
            # connect stays pending) and an unroutable one.
            pol.route("lit", ["lit.test"], "https://%s/" % t.v4(2),
                      h.ca.cert),
            pol.route("dark", ["dark.test"], "https://%s/" % t.v4(9),
                      h.ca.cert),
            pol.route("unreach", ["unreach.test"], "https://198.19.0.1/",
                      h.ca.cert),
        ]
        cls.doc = h.policy("main", [pol.forward("fwd", "127.0.0.1:%d" % FWD)],
                           routes, {"idle_timeout_ms": 30000,
                                    "header_timeout_ms": 60000,
                                    "max_connections": 4096})
        path = h.write_policy("main", cls.doc)
        cls.sl = LimitedSluice(h.sbx, path, "sluice-main", h.tmp,
                               cls.NOFILE)
        cls.sl.expected_exit = None
        h.sluices.append(cls.sl)
        cls.sl.wait_ready()

    def req(self, route, tok=None, path=b"/v1/messages", body=None):
        lines = [b"POST http://%s.test%s HTTP/1.1" % (route.encode(), path),
                 b"Host: %s.test" % route.encode()]
        if tok:
            lines.append(b"Proxy-Authorization: Bearer " + tok.encode())
        if body is not None:
            lines.append(b"Content-Length: %d" % len(body))
        return b"\r\n".join(lines) + b"\r\n\r\n" + (body or b"")

    def proxy_pid(self):
        """The process that proxies: the engine (the parent's child), or
        sluice itself with --single-process."""
        with open("/proc/%d/task/%d/children" % (self.sl.pid,
                                                self.sl.pid)) as f:
            kids = [int(p) for p in f.read().split()]
        return kids[0] if kids else self.sl.pid

    def nfd(self):
        return len(os.listdir("/proc/%d/fd" % self.proxy_pid()))

    def good_ok(self, tok):
        """A request on a fresh connection gets 200 (retried while the
        listener pauses after EMFILE)."""
        def ok():
            try:
                with self.h.raw(FWD, timeout=2.0) as c:
                    return c.request(self.req("good", tok, body=b"{}"),
                                     timeout=3.0).status == 200
            except (OSError, st.Closed):
                return False
        return st.wait_until(ok, st.ENV.slow(5.0), 0.2)

    def reset_behind_request(self, tg):
        """One attempt at the race; True when the allowed request was read
        (its audit line names its jti)."""
        # 1. A client that never reads: refusals (64 at most in a row, a
        #    200 between) fill its socket, so sluice's output holds bytes;
        #    then a slow request with 300 KB pipelined behind it (the read
        #    watermark suspends reading, the end of the request resumes
        #    it: the read event is now first on the fd).
        tl = self.h.token("lit")
        a = sock_in(self.h.sbx, FWD, rcvbuf=2048)
        fillers = []
        try:
            data = (self.req("lit") * 50 + self.req("good", tg,
                                                    body=b"{}")) * 4
            data += self.req("good", tg, b"/v1/stream?n=2&gap_ms=200", b"{}")
            data += self.req("good", tg, body=b"x" * 300000)
            goods = len([e for e in audit_lines(self.doc)
                         if e.get("route") == "good"])
            sender = threading.Thread(target=a.sendall, args=(data,),
                                      daemon=True)
            sender.start()
            done = st.wait_until(
                lambda: len([e for e in audit_lines(self.doc)
                             if e.get("route") == "good"]) >= goods + 6,
                st.ENV.slow(5.0), 0.1)
            self.assertTrue(done, "the pipelined requests did not finish")
            sender.join(st.ENV.slow(5.0))
            self.assertFalse(sender.is_alive(), "the client could not send")
            # 2. Fill sluice's fd table (the listener pauses on EMFILE).
            while self.nfd() < self.NOFILE and len(fillers) < 200:
                fillers.append(sock_in(self.h.sbx, FWD))
                time.sleep(0.01)
            time.sleep(0.3)
            self.assertEqual(self.nfd(), self.NOFILE)
            # 3. The allowed request and the reset, delivered while sluice
            #    is stopped: both are seen at once.
            engine = self.proxy_pid()
            os.kill(engine, signal.SIGSTOP)
            try:
                a.send(self.req("lit", tl))
                rst_close(a)
                time.sleep(0.2)
            finally:
                os.kill(engine, signal.SIGCONT)
            time.sleep(1.0)
            self.assertTrue(self.sl.alive(), "sluice died: %s" %
                            self.sl.stderr()[-1000:])
            self.assertEqual(self.proxy_pid(), engine,
                             "the engine died: %s" % self.sl.stderr()[-1000:])
        finally:
            a.close()
            for f in fillers:
                f.close()
        jti = st.claims_of(tl)["jti"]
        return bool(st.wait_until(lambda: [e for e in audit_lines(self.doc)
                                           if e.get("jti") == jti],
                                  st.ENV.slow(3.0)))

    def test_reset_while_upstream_is_set_up(self):
        tg = self.h.token("good")
        # Many resets in a row right behind an allowed request, while the
        # upstream is connecting (silent address), unreachable, or fine.
        for route in ("dark", "unreach", "lit"):
            data = self.req(route, self.h.token(route))
            for _ in range(20):
                s = sock_in(self.h.sbx, FWD)
                s.sendall(data)
                rst_close(s)
        time.sleep(0.5)
        self.assertTrue(self.sl.alive(), self.sl.stderr()[-1000:])
        self.assertTrue(self.good_ok(tg), "no 200 after the resets")

        # Nearly deterministic: the allowed request's head and the reset
        # are read in the same loop iteration, the read event before the
        # (armed) write event, and with the fd table full the upstream
        # socket() fails at once, calling back into the conn the reset
        # closed. Whether the read event is ahead of the write event on
        # the fd depends on how the output drained (libevent runs the
        # fd's events newest first); when the write event is ahead, the
        # reset closes the conn before the head is read, which is not the
        # race. So: up to three attempts, each checked for a crash, and
        # the race must be reached in one of them.
        reached = False
        for _ in range(3):
            if self.reset_behind_request(tg):
                reached = True
                break
        self.assertTrue(reached, "the allowed request was never read in "
                        "three attempts (the test did not reach the race)")
        self.assertTrue(self.good_ok(tg), "no 200 after the reset")
        self.assertTrue(self.sl.alive())


if __name__ == "__main__":
    st.main()
