"""Helpers shared by test_tokens.py and test_audit.py (not a test file:
the ctest glob only takes test_*.py).

What the sluicetest library (lib/sluicetest) lacks and these two files
need: `sluice token mint` with every option (EdDSA, --now, several
audiences), tokens the CLI refuses to make (alg none, a bad signature, the
Ed25519/HS256 confusion), Ed25519 key pairs, the admin socket, the audit
log read back line by line with an independent hash-chain check, a
Prometheus text-format parser, and more than one sluice process per
policy (restarts) with separate stderr files.
"""

import base64
import hashlib
import hmac
import json
import os
import re
import socket
import sys

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "lib"))

import sluicetest as st  # noqa: E402
from sluicetest.http import build_request  # noqa: E402

ZERO_HASH = "0" * 64
TS_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


# -- tokens ----------------------------------------------------------------

def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def claims_of(tok):
    return json.loads(b64url_decode(tok.split(".")[1]))


def header_of(tok):
    return json.loads(b64url_decode(tok.split(".")[0]))


def key_bytes(path):
    """A key file's bytes less one trailing newline (DESIGN.md)."""
    with open(path, "rb") as f:
        data = f.read()
    return data[:-1] if data.endswith(b"\n") else data


def jws(header, claims, hs_key=None, sig=None):
    """A compact JWS built here: signed HS256 with hs_key (bytes), or with
    the given raw signature bytes (sig), or with an empty signature."""
    signing = (b64url(json.dumps(header, separators=(",", ":")).encode())
               + "." +
               b64url(json.dumps(claims, separators=(",", ":")).encode()))
    if hs_key is not None:
        sig = hmac.new(hs_key, signing.encode(), hashlib.sha256).digest()
    return signing + "." + b64url(sig or b"")


def flip_signature(tok):
    """The same token with the first signature character changed. The
    first character carries 6 signature bits, none of them padding, so the
    result is still canonical base64url: only the signature is wrong."""
    h, p, s = tok.split(".")
    c = "A" if s[0] != "A" else "B"
    return "%s.%s.%s%s" % (h, p, c, s[1:])


def ed25519_keypair(tmpdir, name):
    """(private PEM path, public PEM path), made by the openssl CLI."""
    priv = os.path.join(tmpdir, name + ".key")
    pub = os.path.join(tmpdir, name + ".pub")
    st.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", priv])
    os.chmod(priv, 0o600)
    st.run(["openssl", "pkey", "-in", priv, "-pubout", "-out", pub])
    os.chmod(pub, 0o644)
    return priv, pub


def mint(key, aud, sub="run-1", ttl=600, alg="HS256", kid=None, iss=None,
         max_requests=None, jti=None, now=None):
    """`sluice token mint` with the given options; aud may be a list.
    Raises if the CLI fails (these tests check the CLI too; there is no
    fallback minter here)."""
    argv = [st.ENV.bin, "token", "mint", "--key", key, "--alg", alg,
            "--sub", sub, "--ttl", str(ttl)]
    for a in ([aud] if isinstance(aud, str) else aud):
        argv += ["--aud", a]
    for opt, v in (("--kid", kid), ("--iss", iss),
                   ("--max-requests", max_requests), ("--jti", jti),
                   ("--now", now)):
        if v is not None:
            argv += [opt, str(v)]
    p = st.run(argv, check=False)
    tok = p.stdout.strip()
    if p.returncode != 0 or tok.count(".") != 2:
        raise RuntimeError("sluice token mint %s: exit %d: %s" % (
            " ".join(argv[3:]), p.returncode, p.stderr.strip()))
    return tok


def verify_cli(policy, tok, route=None, now=None):
    """`sluice token verify`; returns the CompletedProcess."""
    argv = [st.ENV.bin, "token", "verify", "-c", policy]
    if route is not None:
        argv += ["--route", route]
    if now is not None:
        argv += ["--now", str(now)]
    return st.run(argv + [tok], check=False)


def basic(user, password):
    return base64.b64encode(("%s:%s" % (user, password)).encode()).decode()


# -- processes -------------------------------------------------------------

def start_sluice(h, name, doc, instance="1", wait=True):
    """Write doc as <tmp>/<name>/policy.json and start sluice on it. Each
    instance of one policy (a restart) gets its own stdout/stderr files, so
    that the teardown's sanitizer check sees every run."""
    path = h.write_policy(name, doc)
    s = st.Sluice(h.sbx, path, "sluice-%s-%s" % (name, instance), h.tmp)
    s.expected_exit = None
    h.sluices.append(s)
    if wait:
        s.wait_ready()
    return s


def stop_clean(tc, s):
    """SIGTERM; the test fails unless sluice exits 0 (DESIGN.md)."""
    rc = s.stop()
    tc.assertEqual(rc, 0, "%s: exit %s after SIGTERM: %s" % (
        s.name, rc, s.stderr()[-1500:]))


def kill9(s):
    s.signal(9)
    s.wait(10)


def admin(path, line, timeout=5.0):
    """One admin command (a line on the unix socket); the whole answer."""
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


# -- requests --------------------------------------------------------------

def rev_req(port, auth=(), path="/v1/messages", body=b"{}", method="POST"):
    """Request bytes for a reverse listener on 127.0.0.1:port."""
    return build_request(method, path, "127.0.0.1:%d" % port, list(auth),
                         body)


def fwd_req(host, auth=(), path="/v1/messages", body=b"{}",
            method="POST"):
    """An absolute-form request for a forward listener."""
    return build_request(method, "http://%s%s" % (host, path), host,
                         list(auth), body)


def connect_req(authority, auth=()):
    return ("CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (
        authority, authority, "".join(a + "\r\n" for a in auth))).encode()


def one(h, port, data, method=None, timeout=5.0):
    """One request on a fresh connection; the parsed response."""
    with h.raw(port) as c:
        return c.request(data, method=method, timeout=timeout)


# -- the audit log ---------------------------------------------------------

def read_lines(path):
    """The complete lines of a file, as bytes, without their newlines."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    return data.split(b"\n")[:-1]


def parse_line(line):
    """One audit line as an ordered list of (key, value) pairs; refuses
    duplicate keys (docs/audit.md: a line is a JSON object without
    duplicates)."""
    def pairs(p):
        keys = [k for k, _ in p]
        if len(keys) != len(set(keys)):
            raise ValueError("duplicate keys in %r" % (line[:200],))
        return p
    obj = json.loads(line.decode("utf-8"), object_pairs_hook=pairs)
    if not isinstance(obj, list):
        raise ValueError("not an object: %r" % (line[:200],))
    return obj


def events(path):
    return [dict(parse_line(l)) for l in read_lines(path)]


END_OF = {"http.end": "http.request", "connect.end": "connect.tunnel"}


def merge_phases(evs):
    """With fsync "always" a forwarded request has two lines
    (docs/audit.md): its start line (phase "start") and an http.end or
    connect.end line with the same id. Returns the events with each pair
    made one, at the start line's place, the end line's fields winning
    (phase, and the end line's own ts/seq/prev, dropped), so that a log of
    either shape reads the same. An end line without its start, or a
    second end, raises ValueError; a start without an end stays as it is
    (in flight when sluice died)."""
    out, start_at = [], {}
    for e in evs:
        ev = e.get("event")
        if e.get("phase") == "start":
            if e.get("id") in start_at:
                raise ValueError("two start lines for id %r" % e.get("id"))
            start_at[e.get("id")] = len(out)
            out.append(dict(e))
            continue
        if ev in END_OF:
            i = start_at.pop(e.get("id"), None)
            if i is None or out[i]["event"] != END_OF[ev]:
                raise ValueError("%s without its start line: %r" % (ev, e))
            for k, v in e.items():
                if k not in ("ts", "seq", "prev", "event"):
                    out[i][k] = v
            del out[i]["phase"]
            continue
        out.append(e)
    return out


def check_chain(lines, prev=None, seq=None):
    """An independent check of the hash chain (docs/audit.md "The hash
    chain"), without sluice's code: every line a JSON object starting with
    ts, seq, event, prev; ts RFC 3339 UTC with microseconds; seq +1 per
    line; prev = hex SHA-256 of the previous line's bytes (64 zeros for
    seq 1). prev/seq: what the first line must continue from (None: take
    it as given). Returns the problems found, as "line N: why"."""
    problems = []
    for i, line in enumerate(lines, 1):
        try:
            pairs = parse_line(line)
        except ValueError as e:
            problems.append("line %d: %s" % (i, e))
            prev, seq = hashlib.sha256(line).hexdigest(), None
            continue
        keys = [k for k, _ in pairs]
        o = dict(pairs)
        if keys[:4] != ["ts", "seq", "event", "prev"]:
            problems.append("line %d: fields start %r" % (i, keys[:4]))
        if not isinstance(o.get("ts"), str) or not TS_RE.match(o["ts"]):
            problems.append("line %d: ts %r" % (i, o.get("ts")))
        s = o.get("seq")
        if not isinstance(s, int) or isinstance(s, bool):
            problems.append("line %d: seq %r" % (i, s))
        elif seq is not None and s != seq + 1:
            problems.append("line %d: seq %r after %r" % (i, s, seq))
        if s == 1 and o.get("prev") != ZERO_HASH:
            problems.append("line %d: seq 1 with prev %r" % (i,
                                                              o.get("prev")))
        if prev is not None and o.get("prev") != prev:
            problems.append("line %d: prev %r, want %s" % (
                i, o.get("prev"), prev))
        prev = hashlib.sha256(line).hexdigest()
        seq = s if isinstance(s, int) else None
    return problems


def audit_verify(files, head=None):
    argv = [st.ENV.bin, "audit", "verify"]
    if head is not None:
        argv += ["--head", head]
    return st.run(argv + list(files), check=False)


def wait_events(path, pred, timeout=None):
    """Poll the audit log until pred(events) is truthy; returns the events
    (or the last read, for the failure message)."""
    timeout = st.ENV.slow(5) if timeout is None else timeout
    last = []

    def ok():
        nonlocal last
        try:
            last = events(path)
        except ValueError:
            return False  # a line being written: read again
        return pred(last)
    st.wait_until(ok, timeout, 0.05)
    return last


# -- metrics ---------------------------------------------------------------

def http_unix(path, raw, timeout=5.0):
    """Send raw bytes to a unix socket, read until close: (status,
    [(name, value)], body)."""
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.settimeout(timeout)
    try:
        c.connect(path)
        c.sendall(raw)
        out = b""
        while True:
            try:
                d = c.recv(65536)
            except ConnectionResetError:
                break
            if not d:
                break
            out += d
    finally:
        c.close()
    head, _, body = out.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    hdrs = []
    for l in lines[1:]:
        n, _, v = l.partition(":")
        hdrs.append((n, v.strip()))
    for n, v in hdrs:
        if n.lower() == "content-length" and v.isdigit():
            body = body[:int(v)]
    return status, hdrs, body


_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE_RE = re.compile(r"^(%s)(\{(.*)\})?[ ]+(\S+)([ ]+(-?\d+))?$" % _NAME)
_LABEL_RE = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"'
                       r'\s*(,|$)')
_TYPES = ("counter", "gauge", "histogram", "summary", "untyped")


def _family_of(name, types):
    if name in types:
        return name
    for suf in ("_bucket", "_sum", "_count"):
        if name.endswith(suf) and types.get(name[:-len(suf)]) in (
                "histogram", "summary"):
            return name[:-len(suf)]
    return None


def _unescape(v):
    out, i = [], 0
    while i < len(v):
        if v[i] == "\\":
            nxt = v[i + 1]
            out.append({"\\": "\\", '"': '"', "n": "\n"}[nxt])
            i += 2
        else:
            out.append(v[i])
            i += 1
    return "".join(out)


def parse_prometheus(text):
    """Parse the text exposition format 0.0.4 strictly enough for a test:
    `# HELP name text` and `# TYPE name type` lines (TYPE at most once, and
    before the family's samples), then samples `name{l="v",...} value
    [timestamp]`, each of a family that has a TYPE, a family's samples
    together. Returns (types {family: type}, helps {family: text}, samples
    [(name, {labels}, float)]). Raises ValueError naming the bad line."""
    types, helps, samples = {}, {}, []
    seen_done, current = set(), None
    if not text.endswith("\n"):
        raise ValueError("no newline at the end")
    for n, line in enumerate(text.split("\n")[:-1], 1):
        if line == "":
            continue
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                if not re.match("^%s$" % _NAME, parts[2]):
                    raise ValueError("line %d: bad name %r" % (n, line))
                if parts[1] == "TYPE":
                    if parts[2] in types:
                        raise ValueError("line %d: second TYPE" % n)
                    if len(parts) != 4 or parts[3] not in _TYPES:
                        raise ValueError("line %d: bad TYPE %r" % (n, line))
                    if any(_family_of(s[0], {parts[2]: parts[3]})
                           for s in samples):
                        raise ValueError("line %d: TYPE after samples" % n)
                    types[parts[2]] = parts[3]
                else:
                    helps[parts[2]] = parts[3] if len(parts) == 4 else ""
            continue  # other comments are allowed
        m = _SAMPLE_RE.match(line)
        if not m:
            raise ValueError("line %d: not a sample: %r" % (n, line))
        name, labels_s, value_s = m.group(1), m.group(3), m.group(4)
        labels = {}
        if labels_s:
            pos = 0
            while pos < len(labels_s):
                lm = _LABEL_RE.match(labels_s, pos)
                if not lm or lm.end() == pos:
                    raise ValueError("line %d: bad labels %r" % (n, line))
                if lm.group(1) in labels:
                    raise ValueError("line %d: label twice" % n)
                labels[lm.group(1)] = _unescape(lm.group(2))
                pos = lm.end()
        try:
            value = float(value_s)  # also +Inf, -Inf, NaN
        except ValueError:
            raise ValueError("line %d: bad value %r" % (n, line))
        fam = _family_of(name, types)
        if fam is None:
            raise ValueError("line %d: sample without TYPE: %r" % (n, line))
        if fam != current:
            if fam in seen_done:
                raise ValueError("line %d: family %s split" % (n, fam))
            if current is not None:
                seen_done.add(current)
            current = fam
        samples.append((name, labels, value))
    return types, helps, samples


def metric(samples, name, **labels):
    """Sum of the samples of name whose labels include the given ones;
    None when no sample matches."""
    vals = [v for n, l, v in samples if n == name and
            all(l.get(k) == want for k, want in labels.items())]
    return sum(vals) if vals else None


def scrape(path):
    """GET /metrics over the unix socket: (status, headers, types, helps,
    samples)."""
    status, hdrs, body = http_unix(
        path, b"GET /metrics HTTP/1.1\r\nHost: sluice\r\n"
              b"Connection: close\r\n\r\n")
    types, helps, samples = parse_prometheus(body.decode("utf-8"))
    return status, hdrs, types, helps, samples
