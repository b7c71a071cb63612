"""HTTP clients for the tests: a raw socket client that sends exact bytes
and reads back what the server said (and whether it closed), and a curl
wrapper that runs curl inside the sandbox namespace."""

import json
import os
import socket
import subprocess
import tempfile
import time

from .base import CLEANUP
from .netns import entered, ns_exec


class Response:
    def __init__(self, status, reason, version, headers, body, raw,
                 complete):
        self.status = status
        self.reason = reason
        self.version = version
        self.headers = headers  # [(name, value)] in order
        self.body = body
        self.raw = raw
        self.complete = complete  # the body's framing was satisfied

    def header(self, name, default=None):
        for n, v in self.headers:
            if n.lower() == name.lower():
                return v
        return default

    def header_all(self, name):
        return [v for n, v in self.headers if n.lower() == name.lower()]

    def json(self):
        return json.loads(self.body.decode("utf-8"))

    def __repr__(self):
        return "<Response %s %r %r body=%r>" % (
            self.status, self.reason, self.headers, self.body[:300])


class Closed(Exception):
    """The server closed before a full response head arrived."""


class RawClient:
    """One TCP connection opened inside a namespace.

    send() writes exact bytes; read_response() parses one response
    (Content-Length, chunked, or read-to-close); closed() tells whether the
    server has closed its side (EOF or RST) within a timeout."""

    def __init__(self, ns, host, port, timeout=5.0, source=None):
        fam = socket.AF_INET6 if ":" in host else socket.AF_INET
        with entered(ns):
            self.sock = socket.socket(fam, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            if source is not None:  # a given client address
                self.sock.bind((source, 0))
            self.sock.connect((host, port))
        except OSError:
            self.sock.close()
            raise
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.eof = False
        self.reset = False

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def send(self, data, ignore_errors=False):
        try:
            self.sock.sendall(data)
        except OSError:
            if not ignore_errors:
                raise

    def _fill(self, deadline):
        if self.eof:
            return False
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("timed out")
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            self.eof = self.reset = True
            return False
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    def _until(self, marker, deadline):
        while marker not in self.buf:
            if not self._fill(deadline):
                return None
        i = self.buf.index(marker) + len(marker)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def _exactly(self, n, deadline):
        while len(self.buf) < n:
            if not self._fill(deadline):
                break
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_response(self, timeout=5.0, head_only=False, method=None):
        """Read one response. Raises Closed if the server closed (or
        reset) before a whole head arrived; socket.timeout on timeout."""
        deadline = time.monotonic() + timeout
        head = self._until(b"\r\n\r\n", deadline)
        if head is None:
            raise Closed("closed after %r" % self.buf[:200])
        lines = head[:-4].split(b"\r\n")
        parts = lines[0].decode("latin-1").split(" ", 2)
        version = parts[0]
        status = int(parts[1]) if len(parts) > 1 else 0
        reason = parts[2] if len(parts) > 2 else ""
        headers = []
        for line in lines[1:]:
            n, _, v = line.decode("latin-1").partition(":")
            headers.append((n, v.strip(" \t")))
        r = Response(status, reason, version, headers, b"", head, True)
        if head_only or method == "HEAD" or status in (204, 304) or \
                100 <= status < 200 or (method == "CONNECT" and
                                        200 <= status < 300):
            return r
        te = r.header("Transfer-Encoding")
        cl = r.header("Content-Length")
        if te is not None and te.lower() == "chunked":
            body, complete = self._read_chunked(deadline)
        elif cl is not None:
            want = int(cl)
            body = self._exactly(want, deadline)
            complete = len(body) == want
        else:
            body = self.buf
            self.buf = b""
            while self._fill(deadline):
                body += self.buf
                self.buf = b""
            complete = True
        r.body, r.complete = body, complete
        r.raw = head + body
        return r

    def _read_chunked(self, deadline):
        body = b""
        while True:
            line = self._until(b"\r\n", deadline)
            if line is None:
                return body, False
            size = int(line.split(b";")[0].strip() or b"x", 16)
            if size == 0:
                while True:
                    t = self._until(b"\r\n", deadline)
                    if t is None:
                        return body, False
                    if t == b"\r\n":
                        return body, True
            data = self._exactly(size + 2, deadline)
            body += data[:size]
            if len(data) < size + 2:
                return body, False

    def closed(self, timeout=2.0):
        """True when the server closed (EOF or RST) within timeout.
        Bytes that arrive meanwhile are kept in self.buf."""
        deadline = time.monotonic() + timeout
        try:
            while self._fill(deadline):
                pass
        except socket.timeout:
            return False
        return True

    def wait_closed(self, timeout):
        """Seconds until the server closed, or None if it did not."""
        t0 = time.monotonic()
        if self.closed(timeout):
            return time.monotonic() - t0
        return None

    def request(self, data, timeout=5.0, method=None):
        self.send(data)
        return self.read_response(timeout=timeout, method=method)


def _clean_env():
    env = {k: v for k, v in os.environ.items()
           if not k.lower().endswith("_proxy")}
    env["HOME"] = env.get("HOME", "/root")
    return env


def _parse_header_blocks(text):
    """-D output: list of (status line, [(name, value)]) blocks."""
    blocks = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        lines = [l for l in block.split("\n") if l]
        if not lines or not lines[0].startswith("HTTP/"):
            continue
        hdrs = []
        for l in lines[1:]:
            n, _, v = l.partition(":")
            hdrs.append((n, v.strip()))
        blocks.append((lines[0], hdrs))
    return blocks


class CurlResult:
    def __init__(self, rc, stderr, info, blocks, bodies, elapsed):
        self.rc = rc
        self.stderr = stderr
        self.info = info          # list of -w %{json} objects, one per URL
        self.blocks = blocks      # every response head curl saw
        self.bodies = bodies      # body bytes per URL
        self.elapsed = elapsed
        last = info[-1] if info else {}
        self.status = last.get("http_code", 0)
        self.connect_status = last.get("http_connect", 0)
        self.headers = blocks[-1][1] if blocks else []
        self.body = bodies[-1] if bodies else b""

    def header(self, name, default=None):
        for n, v in self.headers:
            if n.lower() == name.lower():
                return v
        return default

    def json(self):
        return json.loads(self.body.decode("utf-8"))

    def __repr__(self):
        return "<curl rc=%d status=%s headers=%r body=%r err=%r>" % (
            self.rc, self.status, self.headers, self.body[:300],
            self.stderr[-300:])


def curl(ns, args, urls, tmpdir, timeout=20):
    """Run curl in namespace ns with args (options) for urls (a str or a
    list: several URLs share one curl, hence one client connection)."""
    if isinstance(urls, str):
        urls = [urls]
    d = tempfile.mkdtemp(dir=tmpdir, prefix="curl-")
    hdr = os.path.join(d, "headers")
    argv = ["curl", "-sS", "--max-time", str(timeout), "-D", hdr,
            "-w", "%{json}\\n"]
    outs = []
    for i, u in enumerate(urls):
        o = os.path.join(d, "body%d" % i)
        outs.append(o)
        argv += ["-o", o]
    argv += list(args) + list(urls)
    t0 = time.monotonic()
    p = subprocess.run(ns_exec(ns, argv), capture_output=True,
                       timeout=timeout + 10, env=_clean_env())
    elapsed = time.monotonic() - t0
    info = []
    for line in p.stdout.decode("utf-8", "replace").splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                info.append(json.loads(line))
            except ValueError:
                pass
    try:
        with open(hdr, encoding="latin-1") as f:
            blocks = _parse_header_blocks(f.read())
    except FileNotFoundError:
        blocks = []
    bodies = []
    for o in outs:
        try:
            with open(o, "rb") as f:
                bodies.append(f.read())
        except FileNotFoundError:
            bodies.append(b"")
    return CurlResult(p.returncode, p.stderr.decode("utf-8", "replace"),
                      info, blocks, bodies, elapsed)


def curl_stream(ns, args, url, timeout=20):
    """Run curl -N and timestamp each output line as it arrives.
    Returns (rc, [(seconds since start, line bytes)], stderr)."""
    argv = ns_exec(ns, ["curl", "-sS", "-N", "--max-time", str(timeout)]
                   + list(args) + [url])
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=_clean_env())
    lines = []
    try:
        for line in iter(p.stdout.readline, b""):
            lines.append((time.monotonic() - t0, line))
        rc = p.wait(timeout=timeout + 10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    err = p.stderr.read().decode("utf-8", "replace")
    p.stdout.close()
    p.stderr.close()
    return rc, lines, err


class StreamReader:
    """curl -N in the background; lines are timestamped as they arrive.
    For tests that must act while a stream is in flight (drain, reload)."""

    def __init__(self, ns, args, url, timeout=20):
        import threading
        argv = ns_exec(ns, ["curl", "-sS", "-N", "--max-time",
                            str(timeout)] + list(args) + [url])
        self.t0 = time.monotonic()
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env=_clean_env())
        self.lines = []
        self.timeout = timeout
        CLEANUP.push(self._kill)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()

    def _read(self):
        for line in iter(self.p.stdout.readline, b""):
            self.lines.append((time.monotonic() - self.t0, line))

    def data_lines(self):
        return [l for _, l in self.lines if l.startswith(b"data:")]

    def finish(self):
        try:
            rc = self.p.wait(timeout=self.timeout + 10)
        finally:
            if self.p.poll() is None:
                self.p.kill()
                self.p.wait()
        self.thread.join(5)
        err = self.p.stderr.read().decode("utf-8", "replace")
        self.p.stdout.close()
        self.p.stderr.close()
        return rc, err


def build_request(method, target, host=None, headers=(), body=b"",
                  version="HTTP/1.1", length=None):
    """Request bytes with CRLF line ends. headers are "Name: value"
    strings, sent as given; Content-Length is added for a body (or when
    length is True) unless length is False."""
    lines = ["%s %s %s" % (method, target, version)]
    if host is not None:
        lines.append("Host: " + host)
    lines += list(headers)
    if length or (length is None and (body or method in ("POST", "PUT"))):
        lines.append("Content-Length: %d" % len(body))
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
