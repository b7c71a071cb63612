"""TLS interception end to end (docs/interception.md, issue 16 "Tests (real
components)"): clients in the sandbox namespace, as an unprivileged uid,
reach the fake upstream through an intercepted CONNECT tunnel trusting the
ephemeral CA sluice wrote to intercept.ca_cert_out.

Covered: an allowed POST with the real credential injected (token_header
x-api-key replaced by upstream.headers; Authorization Bearer with
strip_token) and the run token never reaching the upstream; the CONNECT's
token covering inner requests; a CONNECT without a token, the inner request
carrying it; per-inner-request denials (path, method, budget, revocation,
token expiry mid-tunnel, no token) answered inside TLS with nothing
upstream; Host different from the CONNECT authority (400); SNI mismatch and
an h2-only client (handshake fails, audited client_tls_error with detail);
the leaf seen by `openssl s_client -proxy` and the CA's name constraints;
plain HTTP inside a CONNECT to port 80; a response header carrying an
injected secret dropped; SSE event by event; the audit lines (one
http.request with "via": "connect" per inner request, connect.tunnel at
close); Python requests with REQUESTS_CA_BUNDLE; the official Node SDKs
(@anthropic-ai/sdk, openai) through undici's ProxyAgent with
NODE_EXTRA_CA_CERTS (skipped with a message when node or the packages,
installed by scripts/deps under build/node, are missing).

Topology: netns sbx (sluice on 127.0.0.1:3128, the clients) <-veth-> netns
up (fakeup on 198.18.16.2:443, DNS on .53).
"""

import hashlib
import json
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))

import sluicetest as st  # noqa: E402
from sluicetest import header_values, policy as pol  # noqa: E402
from sluicetest.base import CLEANUP, ENV  # noqa: E402
from sluicetest.http import (CurlResult, _parse_header_blocks,  # noqa: E402
                             build_request)
from sluicetest.netns import ns_exec  # noqa: E402
from sluicetest.tokens import mint_python  # noqa: E402

PORT = 3128
NOBODY = 65534
MODEL = "api.model.test"      # route "model": token_header x-api-key
OPENAI = "api.openai.test"    # route "openai": Authorization + strip_token
STRIP = "strip.model.test"    # route "strip": strip_token, other header
OPAQUE = "opaque.model.test"  # route "opaque": CONNECT without intercept
SDK = "sdk.anthropic.test"    # route "sdk": x-api-key injected, strip_token
PREFIXES = ["/v1/messages", "/v1/chat/completions", "/v1/stream",
            "/v1/reflect"]


def as_nobody(argv):
    return ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY,
            "--clear-groups", "--"] + list(argv)


def node_modules():
    """Where scripts/deps installs the Node SDKs (or SLUICE_NODE_MODULES)."""
    env = os.environ.get("SLUICE_NODE_MODULES")
    if env:
        return env
    build = os.environ.get("SLUICE_BUILD",
                           os.path.join(ENV.src, "build", "plain"))
    for d in (os.path.join(build, "..", "node", "node_modules"),
              os.path.join(ENV.src, "build", "node", "node_modules")):
        if os.path.isdir(d):
            return os.path.abspath(d)
    return None


def node_missing():
    """Why the Node SDK tests cannot run, or None."""
    if shutil.which("node") is None:
        return "node is not installed (apt-get install nodejs npm)"
    nm = node_modules()
    if nm is None:
        return ("the Node SDKs are not installed: run scripts/deps (npm "
                "install into build/node) or set SLUICE_NODE_MODULES")
    for p in ("@anthropic-ai/sdk", "openai", "undici"):
        if not os.path.isdir(os.path.join(nm, p)):
            return "%s is missing from %s" % (p, nm)
    return None


PY_REQUESTS = "/usr/bin/python3"


def requests_missing():
    p = subprocess.run([PY_REQUESTS, "-c", "import requests"],
                       capture_output=True)
    if p.returncode != 0:
        return "python3-requests is not installed for %s" % PY_REQUESTS
    return None


class TestIntercept(st.ProxyTestCase):
    TAG = "intercept"
    X = 16
    UP_HOSTS = (2, 53)

    @classmethod
    def build(cls):
        h, t = cls.h, cls.h.topo
        cert, key = h.ca.issue("model-up", ["DNS:model-up.test"])
        cls.up = h.fakeup("main", ["%s:443" % t.v4(2)], cert, key)
        h.dns_server({"model-up.test": {"A": [t.v4(2)]}})
        # A directory the unprivileged clients can read (and write in,
        # below): the CA, their scripts and outputs.
        cls.pub = tempfile.mkdtemp(prefix="sluicetest-intercept-pub-")
        os.chmod(cls.pub, 0o755)
        if not ENV.keep:
            CLEANUP.push(shutil.rmtree, cls.pub, True)
        cls.ca_pem = os.path.join(cls.pub, "ca.pem")
        cls.secret = "sk-ant-real-" + secrets.token_hex(16)
        cls.oa_secret = "sk-openai-real-" + secrets.token_hex(16)
        cls.strip_secret = "strip-real-" + secrets.token_hex(16)
        cred = h.secret_value("cred", cls.secret)
        oa_cred = h.secret_value("oa-cred", "Bearer " + cls.oa_secret)
        strip_cred = h.secret_value("strip-cred", cls.strip_secret)
        ca = h.ca.cert
        up = "https://model-up.test"

        def icpt(r, ports=(443,), token_header=None, strip=False):
            r["connect"] = {"enabled": True, "intercept": True,
                            "ports": list(ports)}
            if token_header is not None:
                r["token_header"] = token_header
            r["upstream"]["strip_token"] = strip
            return r

        routes = [
            icpt(pol.route("model", [MODEL], up + "/anthropic", ca,
                           prefixes=PREFIXES,
                           headers=[("x-api-key", cred)]),
                 ports=(443, 80), token_header="x-api-key"),
            icpt(pol.route("openai", [OPENAI], up + "/openai", ca,
                           prefixes=PREFIXES,
                           headers=[("Authorization", oa_cred)]),
                 strip=True),
            icpt(pol.route("strip", [STRIP], up + "/strip", ca,
                           prefixes=PREFIXES,
                           headers=[("X-Upstream-Key", strip_cred)]),
                 token_header="api-key", strip=True),
            # The Anthropic SDK sends its apiKey as x-api-key or (1.x)
            # as Authorization: Bearer; either carrier is stripped.
            icpt(pol.route("sdk", [SDK], up + "/anthropic", ca,
                           prefixes=PREFIXES,
                           headers=[("x-api-key", cred)]),
                 token_header="x-api-key", strip=True),
            pol.route("opaque", [OPAQUE], up + "/opaque", ca,
                      prefixes=PREFIXES),
        ]
        doc = h.policy("main", [pol.forward("fwd", "127.0.0.1:%d" % PORT)],
                       routes)
        doc["intercept"] = {"ca": "ephemeral", "ca_cert_out": cls.ca_pem,
                            "ca_days": 1, "leaf_days": 1, "max_leaves": 16}
        cls.policy_doc = doc
        cls.audit_path = doc["audit"]["path"]
        cls.admin_socket = doc["admin"]["socket"]
        cls.sl = h.sluice("main", doc)
        cls.tok = h.token("model")
        cls.oa_tok = h.token("openai")
        cls.strip_tok = h.token("strip")
        cls.sdk_tok = h.token("sdk")

    # -- helpers -----------------------------------------------------------

    def setUp(self):
        self.assertTrue(os.path.exists(self.ca_pem),
                        "sluice did not write intercept.ca_cert_out")

    def userdir(self):
        d = tempfile.mkdtemp(dir=self.pub, prefix="c-")
        os.chown(d, NOBODY, NOBODY)
        return d

    def env(self, **extra):
        e = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"}
        e.update(extra)
        return e

    def proxy_url(self, tok=None):
        if tok is None:
            return "http://127.0.0.1:%d" % PORT
        return "http://run:%s@127.0.0.1:%d" % (tok, PORT)

    def ucurl(self, args, urls, tok=None, timeout=20):
        """curl in sbx as uid nobody with HTTPS_PROXY (and HTTP_PROXY) set
        to sluice with tok as the Basic password, trusting the CA."""
        if isinstance(urls, str):
            urls = [urls]
        d = self.userdir()
        hdr = os.path.join(d, "headers")
        argv = ["curl", "-sS", "--max-time", str(timeout), "-D", hdr,
                "-w", "%{json}\\n", "--cacert", self.ca_pem]
        outs = []
        for i, u in enumerate(urls):
            o = os.path.join(d, "body%d" % i)
            outs.append(o)
            argv += ["-o", o]
        argv += list(args) + list(urls)
        # curl reads http_proxy in lower case only.
        env = self.env(HTTPS_PROXY=self.proxy_url(tok),
                       http_proxy=self.proxy_url(tok))
        t0 = time.monotonic()
        p = subprocess.run(ns_exec(self.h.sbx, as_nobody(argv)),
                           capture_output=True, timeout=timeout + 10,
                           env=env)
        elapsed = time.monotonic() - t0
        info = []
        for line in p.stdout.decode("utf-8", "replace").splitlines():
            if line.strip().startswith("{"):
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
        r = CurlResult(p.returncode, p.stderr.decode("utf-8", "replace"),
                       info, blocks, bodies, elapsed)
        # Inner responses only (curl also records the CONNECT's 200).
        r.inner = [b for b in blocks
                   if "connection established" not in b[0].lower()]
        return r

    def tunnel(self, authority="%s:443" % MODEL, tok=None, sni=None,
               alpn=None, handshake=True):
        """A raw client (as root) through an intercepted tunnel: CONNECT
        (with Proxy-Authorization: Bearer tok when given), then TLS with
        the given SNI (default: the CONNECT host) and ALPN list."""
        c = self.h.raw(PORT)
        self.addCleanup(c.close)
        self.last_client = "%s:%d" % c.sock.getsockname()[:2]
        host = authority.rsplit(":", 1)[0]
        hdrs = []
        if tok is not None:
            hdrs.append("Proxy-Authorization: Bearer " + tok)
        r = c.request(build_request("CONNECT", authority, host=authority,
                                    headers=hdrs), method="CONNECT")
        self.assertEqual(r.status, 200, "CONNECT %s: %r" % (authority, r))
        self.assertEqual(c.buf, b"")
        if not handshake:
            return c
        ctx = ssl.create_default_context(cafile=self.ca_pem)
        ctx.set_alpn_protocols(alpn or ["http/1.1"])
        c.sock = ctx.wrap_socket(c.sock, server_hostname=sni or host)
        return c

    def inner(self, c, path="/v1/messages", host=MODEL, method="POST",
              headers=(), body=b"{}"):
        return c.request(build_request(method, path, host=host,
                                       headers=list(headers), body=body),
                         method=method)

    def one_request(self, mark):
        reqs = self.up.log.wait_for(mark, "request")
        self.assertEqual(len(reqs), 1, "upstream requests: %r" % (reqs,))
        return reqs[0]

    def assertNoTokenUpstream(self, req, *toks):
        """No header of the upstream request carries a run token, and
        nothing of the proxy's own reached it."""
        for n, v in req["headers"]:
            for tok in toks:
                self.assertNotIn(tok, v, "run token in %s upstream" % n)
        self.assertEqual(header_values(req, "Proxy-Authorization"), [])

    def audit(self):
        try:
            with open(self.audit_path, encoding="utf-8") as f:
                return [json.loads(x) for x in f if x.strip()]
        except FileNotFoundError:
            return []

    def audit_mark(self):
        """The audit length once it is still for 0.3 s (a tunnel of the
        previous test may still be writing its closing line)."""
        n, t = len(self.audit()), time.monotonic()
        while time.monotonic() - t < 0.3:
            time.sleep(0.05)
            if len(self.audit()) != n:
                n, t = len(self.audit()), time.monotonic()
        return n

    def audit_since(self, mark, event=None):
        ev = self.audit()[mark:]
        if event is not None:
            ev = [e for e in ev if e.get("event") == event]
        return ev

    def audit_wait(self, mark, event, count=1, timeout=5.0):
        st.wait_until(lambda: len(self.audit_since(mark, event)) >= count,
                      timeout)
        return self.audit_since(mark, event)

    def audit_id(self, rid):
        got = []

        def have():
            got[:] = [e for e in self.audit() if e.get("id") == rid]
            return got
        st.wait_until(have, 3.0)
        self.assertEqual(len(got), 1, "audit lines with id %s: %r" % (
            rid, got))
        return got[0]

    def assertDeniedInside(self, r, status, reason, auth=None):
        self.assertDenied(r, status, reason, auth)
        line = self.audit_id(r.json()["request_id"])
        self.assertEqual(line.get("event"), "http.request", line)
        self.assertEqual(line.get("via"), "connect", line)
        self.assertEqual(line.get("decision"), "deny", line)
        self.assertEqual(line.get("reason"), reason, line)
        return line

    def curl_denied(self, r, status, reason):
        """A curl result whose last inner response is a denial."""
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.connect_status, 200, r)
        self.assertEqual(r.status, status, r)
        hd = dict((n.lower(), v) for n, v in r.headers)
        self.assertEqual(hd.get("sluice-deny"), reason, r)
        b = json.loads(r.body.decode())
        self.assertEqual(b["error"], reason)
        line = self.audit_id(b["request_id"])
        self.assertEqual(line.get("via"), "connect", line)
        return b

    # -- allowed requests and the phantom token ---------------------------

    def test_post_injected_credential_x_api_key(self):
        m = self.up.log.mark()
        body = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'
        r = self.ucurl(["-H", "Content-Type: application/json",
                        "-H", "x-api-key: " + self.tok,
                        "--data-binary", body],
                       "https://%s/v1/messages?beta=true" % MODEL,
                       tok=self.tok)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.connect_status, 200, r)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["path"], "/anthropic/v1/messages")
        req = self.one_request(m)
        self.assertEqual(req["method"], "POST")
        self.assertEqual(req["target"], "/anthropic/v1/messages?beta=true")
        self.assertEqual(header_values(req, "Host"), ["model-up.test"])
        self.assertEqual(header_values(req, "x-api-key"), [self.secret])
        self.assertEqual(req["body_sha256"], hashlib.sha256(body).hexdigest())
        self.assertNoTokenUpstream(req, self.tok)
        # (fakeup's echo body shows the headers it got, the real key
        # included; response headers carrying it are another test's.)

    def test_bearer_with_strip_token(self):
        # OpenAI style: the run token in Authorization: Bearer, replaced by
        # the injected Authorization; strip_token removes the carrier.
        m = self.up.log.mark()
        r = self.ucurl(["-H", "Authorization: Bearer " + self.oa_tok,
                        "-d", "{}"],
                       "https://%s/v1/chat/completions" % OPENAI)
        self.assertEqual(r.status, 200, r)
        req = self.one_request(m)
        self.assertEqual(header_values(req, "Authorization"),
                         ["Bearer " + self.oa_secret])
        self.assertNoTokenUpstream(req, self.oa_tok)

    def test_strip_token_removes_carrier(self):
        for carrier in ("Authorization: Bearer " + self.strip_tok,
                        "api-key: " + self.strip_tok):
            with self.subTest(carrier=carrier.split(":")[0]):
                m = self.up.log.mark()
                r = self.ucurl(["-H", carrier, "-d", "{}"],
                               "https://%s/v1/messages" % STRIP)
                self.assertEqual(r.status, 200, r)
                req = self.one_request(m)
                self.assertEqual(header_values(req, "Authorization"), [])
                self.assertEqual(header_values(req, "api-key"), [])
                self.assertEqual(header_values(req, "X-Upstream-Key"),
                                 [self.strip_secret])
                self.assertNoTokenUpstream(req, self.strip_tok)

    def test_connect_token_covers_inner_requests(self):
        # HTTPS_PROXY=http://run:<jwt>@...: the inner request carries no
        # token; the CONNECT's covers it, and the key is injected anyway.
        m = self.up.log.mark()
        r = self.ucurl(["-d", "{}"], "https://%s/v1/messages" % MODEL,
                       tok=self.tok)
        self.assertEqual(r.status, 200, r)
        req = self.one_request(m)
        self.assertEqual(header_values(req, "x-api-key"), [self.secret])
        self.assertNoTokenUpstream(req, self.tok)

    def test_connect_without_token(self):
        # Accepted for an intercepting route: the inner request carries it.
        m = self.up.log.mark()
        r = self.ucurl(["-H", "x-api-key: " + self.tok, "-d", "{}"],
                       "https://%s/v1/messages" % MODEL)
        self.assertEqual(r.connect_status, 200, r)
        self.assertEqual(r.status, 200, r)
        req = self.one_request(m)
        self.assertEqual(header_values(req, "x-api-key"), [self.secret])
        # Neither the CONNECT nor the inner request has one: 407 inside.
        m = self.up.log.mark()
        r = self.ucurl(["-d", "{}"], "https://%s/v1/messages" % MODEL)
        self.curl_denied(r, 407, "token_missing")
        hd = dict((n.lower(), v) for n, v in r.headers)
        self.assertEqual(hd.get("proxy-authenticate", "").split(" ")[0]
                         .lower(), "bearer", r)
        self.assertNothingUpstream(self.up, m, "without any token")

    def test_opaque_route_still_needs_token(self):
        # Without intercept a CONNECT stays an opaque tunnel, checked once.
        r = self.ucurl(["-d", "{}"], "https://%s/v1/messages" % OPAQUE)
        self.assertEqual(r.connect_status, 407, r)

    # -- denials inside TLS ----------------------------------------------

    def test_path_denied_inside_tls(self):
        m = self.up.log.mark()
        r = self.ucurl(["-d", "{}"], "https://%s/v1/admin" % MODEL,
                       tok=self.tok)
        self.curl_denied(r, 403, "path_not_allowed")
        for path in ("/v1/messages/../admin", "/v1/other"):
            with self.tunnel(tok=self.tok) as c:
                r = self.inner(c, path)
                self.assertDeniedInside(r, 403, "path_not_allowed")
                self.assertNothingUpstream(self.up, m, "after path denials")
                self.assertKeptOrClosed(c, r)

    def assertKeptOrClosed(self, c, r):
        """After a denial the tunnel is closed when the answer says
        Connection: close (a body left unread), else it serves on."""
        if (r.header("Connection") or "").lower() == "close":
            # At once: close_notify after the answer, not a 2 s linger.
            self.assertTrue(c.closed(ENV.slow(1.0)),
                            "the tunnel was left open after Connection: "
                            "close")
        else:
            self.assertEqual(self.inner(c).status, 200)

    def test_method_denied_inside_tls(self):
        m = self.up.log.mark()
        r = self.ucurl(["-X", "DELETE"], "https://%s/v1/messages" % MODEL,
                       tok=self.tok)
        self.curl_denied(r, 403, "method_not_allowed")
        with self.tunnel(tok=self.tok) as c:
            r = self.inner(c, method="GET", body=b"")
            self.assertDeniedInside(r, 403, "method_not_allowed")
            self.assertNothingUpstream(self.up, m, "after method denials")
            self.assertKeptOrClosed(c, r)

    def test_budget_per_inner_request(self):
        # max_requests 2: two inner requests on one kept-alive tunnel pass
        # (the CONNECT itself is not charged), the third is 429.
        tok = self.h.token("model", max_requests=2)
        m = self.up.log.mark()
        url = "https://%s/v1/messages" % MODEL
        r = self.ucurl(["-d", "{}"], [url, url, url], tok=tok)
        self.assertEqual([i.get("http_code") for i in r.info],
                         [200, 200, 429], r)
        self.assertEqual([i.get("num_connects") for i in r.info],
                         [1, 0, 0], "one tunnel for the three requests")
        b = json.loads(r.bodies[2].decode())
        self.assertEqual(b["error"], "budget_exhausted")
        reqs = self.up.log.wait_for(m, "request", count=2)
        time.sleep(0.3)
        self.assertEqual(len(self.up.log.since(m, "request")), 2, reqs)

    def test_revocation_mid_tunnel(self):
        jti = "icpt-rev-" + secrets.token_hex(4)
        tok = self.h.token("model", jti=jti)
        with self.tunnel(tok=tok) as c:
            self.assertEqual(self.inner(c).status, 200)
            p = subprocess.run([ENV.bin, "admin", "--socket",
                                self.admin_socket, "revoke", jti],
                               capture_output=True, text=True, timeout=10)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            m = self.up.log.mark()
            r = self.inner(c)
            self.assertDeniedInside(r, 407, "token_revoked", auth="proxy")
            self.assertNothingUpstream(self.up, m, "after revocation")

    def test_token_expires_mid_tunnel(self):
        # Valid for about 3 more seconds (the policy's leeway is 30 s).
        now = int(time.time())
        tok = mint_python(self.h.key_file, "model", iat=now - 120,
                          exp=now - 27)
        with self.tunnel(tok=tok) as c:
            self.assertEqual(self.inner(c).status, 200)
            time.sleep(max(0, now + 5 - time.time()))
            m = self.up.log.mark()
            r = self.inner(c)
            self.assertDeniedInside(r, 407, "token_expired", auth="proxy")
            self.assertNothingUpstream(self.up, m, "after expiry")

    def test_inner_carrier_first_malformed(self):
        # The token comes from the inner request's carriers, else from the
        # CONNECT's: a bad inner token is not saved by a good CONNECT one.
        m = self.up.log.mark()
        with self.tunnel(tok=self.tok) as c:
            r = self.inner(c, headers=["x-api-key: not-a-jwt"])
            self.assertEqual(r.status, 407, r)
            self.assertEqual(r.header("Sluice-Deny"), "token_malformed", r)
        self.assertNothingUpstream(self.up, m, "with a malformed inner token")

    def test_inner_carrier_first_wrong_audience(self):
        m = self.up.log.mark()
        with self.tunnel(tok=self.tok) as c:
            r = self.inner(c, headers=["Authorization: Bearer " +
                                       self.oa_tok])
            self.assertEqual(r.status, 407, r)
            self.assertEqual(r.header("Sluice-Deny"), "token_wrong_audience",
                             r)
        self.assertNothingUpstream(self.up, m, "with another route's token")

    def test_host_differs_from_connect_authority(self):
        m = self.up.log.mark()
        with self.tunnel(tok=self.tok) as c:
            r = self.inner(c, host=OPENAI)
            self.assertDenied(r, 400, "bad_request")
        with self.tunnel(tok=self.tok) as c:
            # Absolute-form naming another authority.
            r = self.inner(c, path="https://%s/v1/messages" % OPENAI)
            self.assertDenied(r, 400, "bad_request")
        r = self.ucurl(["-H", "Host: " + OPENAI, "-d", "{}"],
                       "https://%s/v1/messages" % MODEL, tok=self.tok)
        self.assertEqual(r.status, 400, r)
        self.assertNothingUpstream(self.up, m, "with a foreign Host")
        # Absolute-form naming the CONNECT authority itself is fine.
        with self.tunnel(tok=self.tok) as c:
            r = self.inner(c, path="https://%s/v1/messages" % MODEL)
            self.assertEqual(r.status, 200, r)

    # -- the handshake ------------------------------------------------------

    def tunnel_line(self, mark, client=None):
        """The one connect.tunnel line since mark (of client, given)."""
        def mine():
            return [e for e in self.audit_since(mark, "connect.tunnel")
                    if client is None or e.get("client") == client]
        st.wait_until(mine, 5.0)
        lines = mine()
        self.assertEqual(len(lines), 1, lines)
        return lines[0]

    def test_sni_mismatch(self):
        m, am = self.up.log.mark(), self.audit_mark()
        with self.assertRaises((ssl.SSLError, OSError)):
            self.tunnel(tok=self.tok, sni=OPENAI)
        line = self.tunnel_line(am, self.last_client)
        self.assertEqual(line.get("reason"), "client_tls_error", line)
        self.assertEqual(line.get("detail"), "sni_mismatch", line)
        self.assertNothingUpstream(self.up, m, "after an SNI mismatch")
        # The same with curl: --connect-to sends the CONNECT for one name
        # while TLS names another.
        am = self.audit_mark()
        r = self.ucurl(["--connect-to", "%s:443:%s:443" % (OPENAI, MODEL),
                        "-d", "{}"],
                       "https://%s/v1/messages" % OPENAI, tok=self.tok)
        self.assertNotEqual(r.rc, 0, r)
        self.assertEqual(r.status, 0, r)
        line = self.tunnel_line(am)
        self.assertEqual(line.get("host"), "%s:443" % MODEL, line)
        self.assertEqual(line.get("reason"), "client_tls_error", line)
        self.assertEqual(line.get("detail"), "sni_mismatch", line)
        self.assertNothingUpstream(self.up, m, "after an SNI mismatch")

    def test_h2_only_client(self):
        m, am = self.up.log.mark(), self.audit_mark()
        with self.assertRaises((ssl.SSLError, OSError)) as cm:
            self.tunnel(tok=self.tok, alpn=["h2"])
        line = self.tunnel_line(am, self.last_client)
        self.assertEqual(line.get("reason"), "client_tls_error", line)
        self.assertEqual(line.get("detail"), "alpn_no_http1", line)
        self.assertNothingUpstream(self.up, m, "after an h2-only client")
        # The refusal is the no_application_protocol alert, not a bare close.
        self.assertIn("NO APPLICATION PROTOCOL",
                      str(cm.exception).upper().replace("_", " "))
        # openssl s_client through the proxy, h2 only.
        p = self.s_client("-alpn", "h2")
        self.assertNotEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("no application protocol", p.stderr.lower())

    def test_alpn_h2_and_http1_gets_http1(self):
        with self.tunnel(tok=self.tok, alpn=["h2", "http/1.1"]) as c:
            self.assertEqual(c.sock.selected_alpn_protocol(), "http/1.1")
            self.assertIn(c.sock.version(), ("TLSv1.2", "TLSv1.3"))
            self.assertEqual(self.inner(c).status, 200)

    def s_client(self, *args):
        argv = ["openssl", "s_client", "-proxy", "127.0.0.1:%d" % PORT,
                "-connect", "%s:443" % MODEL, "-servername", MODEL,
                "-CAfile", self.ca_pem, "-verify_return_error",
                "-showcerts"] + list(args)
        return subprocess.run(ns_exec(self.h.sbx, as_nobody(argv)),
                              input="", capture_output=True, text=True,
                              timeout=20, env=self.env())

    def test_leaf_and_ca_seen_by_openssl(self):
        p = self.s_client()
        self.assertIn("Verify return code: 0 (ok)", p.stdout,
                      p.stdout[-2000:] + p.stderr)
        pem = p.stdout.split("-----BEGIN CERTIFICATE-----")[1]
        pem = "-----BEGIN CERTIFICATE-----" + \
            pem.split("-----END CERTIFICATE-----")[0] + \
            "-----END CERTIFICATE-----\n"
        self.assertEqual(p.stdout.count("-----BEGIN CERTIFICATE-----"), 1,
                         "only the leaf is sent")
        t = subprocess.run(["openssl", "x509", "-noout", "-text",
                            "-startdate", "-enddate"], input=pem,
                           capture_output=True, text=True).stdout
        self.assertIn("DNS:%s" % MODEL, t)
        self.assertIn("Subject: CN = %s" % MODEL, t)
        self.assertIn("id-ecPublicKey", t)
        self.assertIn("prime256v1", t)
        self.assertIn("CA:FALSE", t)
        self.assertIn("TLS Web Server Authentication", t)
        ca_t = subprocess.run(["openssl", "x509", "-noout", "-text", "-in",
                               self.ca_pem], capture_output=True,
                              text=True).stdout
        issuer = [l for l in t.splitlines() if "Issuer:" in l][0]
        subject = [l for l in ca_t.splitlines() if "Subject:" in l][0]
        self.assertEqual(issuer.split(":", 1)[1], subject.split(":", 1)[1])
        # The leaf: at most leaf_days (1) plus the hour of clock skew.
        p2 = subprocess.run(["openssl", "x509", "-noout", "-checkend",
                             str(26 * 3600)], input=pem,
                            capture_output=True, text=True)
        self.assertNotEqual(p2.returncode, 0, "leaf valid > 26 h")
        # The ephemeral CA: constrained to the intercepted hosts only.
        self.assertIn("X509v3 Name Constraints: critical", ca_t)
        permitted = ca_t.split("Permitted:")[1].split("Excluded:")[0]
        for host in (MODEL, OPENAI, STRIP, SDK):
            self.assertIn("DNS:" + host, permitted)
        self.assertNotIn(OPAQUE, permitted)
        self.assertIn("CA:TRUE, pathlen:0", ca_t)
        p3 = subprocess.run(["openssl", "x509", "-noout", "-checkend",
                             str(2 * 86400), "-in", self.ca_pem],
                            capture_output=True, text=True)
        self.assertNotEqual(p3.returncode, 0, "ephemeral CA > ca_days")

    # -- plain HTTP inside a CONNECT -------------------------------------

    def test_plain_http_inside_connect(self):
        # curl -p (--proxytunnel) does what undici does for http:// URLs:
        # CONNECT host:80, then plain HTTP/1.1 through the tunnel.
        m, am = self.up.log.mark(), self.audit_mark()
        r = self.ucurl(["-p", "-H", "x-api-key: " + self.tok, "-d", "{}"],
                       "http://%s/v1/messages" % MODEL)
        self.assertEqual(r.connect_status, 200, r)
        self.assertEqual(r.status, 200, r)
        req = self.one_request(m)
        self.assertEqual(header_values(req, "x-api-key"), [self.secret])
        self.assertNoTokenUpstream(req, self.tok)
        lines = self.audit_wait(am, "http.request")
        self.assertEqual([e.get("via") for e in lines], ["connect"], lines)
        # The same checks apply in plain HTTP.
        m = self.up.log.mark()
        with self.tunnel("%s:80" % MODEL, tok=self.tok,
                         handshake=False) as c:
            r = self.inner(c, "/v1/admin")
            self.assertDeniedInside(r, 403, "path_not_allowed")
        with self.tunnel("%s:80" % MODEL, tok=self.tok,
                         handshake=False) as c:
            r = self.inner(c, host=OPENAI)
            self.assertDenied(r, 400, "bad_request")
        self.assertNothingUpstream(self.up, m, "plain HTTP denials")
        # A port the route does not list in connect.ports is refused.
        r = self.ucurl(["-p", "-d", "{}"], "http://%s/v1/messages" % OPENAI,
                       tok=self.oa_tok)
        self.assertNotEqual(r.connect_status, 200, r)
        self.assertNothingUpstream(self.up, m, "CONNECT to an unlisted port")

    # -- responses --------------------------------------------------------

    def test_response_header_with_secret_dropped(self):
        # fakeup's reflect sends every request field back as X-Req-<name>:
        # the one holding the injected key must not reach the sandbox.
        r = self.ucurl(["-H", "x-api-key: " + self.tok, "-H", "X-Mine: 1",
                        "-d", "{}"],
                       "https://%s/v1/reflect" % MODEL)
        self.assertEqual(r.status, 200, r)
        for n, v in r.headers:
            self.assertNotIn(self.secret, v, "secret in %s" % n)
        names = [n.lower() for n, _ in r.headers]
        self.assertNotIn("x-req-x-api-key", names, r)
        self.assertIn("x-req-x-mine", names, r)
        self.assertEqual(r.body, b"ok")
        with open(self.audit_path, encoding="utf-8") as f:
            self.assertNotIn(self.secret, f.read())

    def assertStreamed(self, stamps, n, gap):
        """n events, spread out as the upstream sent them (not at once)."""
        self.assertEqual(len(stamps), n, stamps)
        spread = stamps[-1] - stamps[0]
        self.assertGreater(spread, (n - 1) * gap * 0.6,
                           "events arrived together: %r" % (stamps,))

    def test_sse_event_by_event_curl(self):
        d = self.userdir()
        argv = ["curl", "-sS", "-N", "--max-time", "20", "--cacert",
                self.ca_pem, "-H", "x-api-key: " + self.tok, "-d", "{}",
                "https://%s/v1/stream?n=4&gap_ms=300" % MODEL]
        env = self.env(HTTPS_PROXY=self.proxy_url())
        p = subprocess.Popen(ns_exec(self.h.sbx, as_nobody(argv)),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=env, cwd=d)
        t0, stamps = time.monotonic(), []
        try:
            for line in iter(p.stdout.readline, b""):
                if line.startswith(b"data:"):
                    stamps.append(time.monotonic() - t0)
            p.wait(timeout=30)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            err = p.stderr.read().decode()
            p.stdout.close()
            p.stderr.close()
        self.assertEqual(p.returncode, 0, err)
        self.assertStreamed(stamps, 4, 0.3)

    # -- audit ---------------------------------------------------------------

    def test_audit_lines(self):
        am = self.audit_mark()
        url = "https://%s/v1/messages" % MODEL
        r = self.ucurl(["-d", "{}"], [url, url.replace("messages", "nope")],
                       tok=self.tok)
        self.assertEqual([i.get("http_code") for i in r.info], [200, 403], r)
        tl = self.tunnel_line(am)
        lines = self.audit_since(am)
        reqs = [e for e in lines if e.get("event") == "http.request"]
        self.assertEqual(len(reqs), 2, lines)
        for e in reqs:
            self.assertEqual(e.get("via"), "connect", e)
            self.assertEqual(e.get("route"), "model", e)
            self.assertEqual(e.get("host"), MODEL, e)
            self.assertEqual(e.get("listener"), "fwd", e)
            self.assertEqual(e.get("method"), "POST", e)
        self.assertEqual([e.get("decision") for e in reqs],
                         ["allow", "deny"], reqs)
        self.assertEqual(reqs[0].get("status"), 200, reqs[0])
        self.assertEqual(reqs[1].get("reason"), "path_not_allowed", reqs[1])
        self.assertNotEqual(reqs[0].get("id"), reqs[1].get("id"))
        # The tunnel's line comes when it closes, after its requests.
        self.assertEqual(lines[-1], tl, lines)
        self.assertEqual(tl.get("route"), "model", tl)
        self.assertNotIn("path", tl)
        self.assertIn("bytes_in", tl)
        self.assertIn("bytes_out", tl)
        text = json.dumps(lines)
        for s in (self.tok, self.secret):
            self.assertNotIn(s, text)

    # -- real clients --------------------------------------------------------

    def run_python(self, code, timeout=30):
        d = self.userdir()
        script = os.path.join(d, "client.py")
        with open(script, "w") as f:
            f.write(code)
        env = self.env(HTTPS_PROXY=self.proxy_url(self.tok),
                       REQUESTS_CA_BUNDLE=self.ca_pem,
                       PYTHONDONTWRITEBYTECODE="1")
        return subprocess.run(ns_exec(self.h.sbx, as_nobody(
            [PY_REQUESTS, script])), capture_output=True, text=True,
            timeout=timeout, env=env, cwd=d)

    def test_python_requests(self):
        why = requests_missing()
        if why:
            self.skipTest(why)
        m = self.up.log.mark()
        code = """
import json, sys, time, requests
s = requests.Session()
u = "https://%s"
r = s.post(u + "/v1/messages", json={"m": 1}, headers={"x-api-key": %r})
print(json.dumps({"status": r.status_code, "body": r.json()}))
t0 = time.monotonic()
r = s.post(u + "/v1/stream?n=4&gap_ms=300", json={}, stream=True)
st = []
for line in r.iter_lines():
    if line.startswith(b"data:"):
        st.append(time.monotonic() - t0)
print(json.dumps({"status": r.status_code, "stamps": st}))
""" % (MODEL, self.tok)
        p = self.run_python(code)
        self.assertEqual(p.returncode, 0, p.stderr)
        out = [json.loads(l) for l in p.stdout.splitlines()]
        self.assertEqual(out[0]["status"], 200, out)
        self.assertEqual(out[0]["body"]["path"], "/anthropic/v1/messages")
        self.assertEqual(out[1]["status"], 200, out)
        self.assertStreamed(out[1]["stamps"], 4, 0.3)
        req = self.up.log.wait_for(m, "request", count=2)[0]
        self.assertEqual(header_values(req, "x-api-key"), [self.secret])
        self.assertNoTokenUpstream(req, self.tok)

    def run_node(self, cfg, timeout=40):
        why = node_missing()
        if why:
            self.skipTest(why)
        env = self.env(NODE_EXTRA_CA_CERTS=self.ca_pem,
                       NODE_PATH=node_modules(),
                       SLT_CFG=json.dumps(cfg))
        script = os.path.join(self.userdir(), "client.js")
        shutil.copy(os.path.join(HERE, "intercept_node_client.js"), script)
        p = subprocess.run(ns_exec(self.h.sbx, as_nobody(["node", script])),
                           capture_output=True, text=True, timeout=timeout,
                           env=env)
        out = []
        for l in p.stdout.splitlines():
            try:
                out.append(json.loads(l))
            except ValueError:
                pass
        self.assertEqual(p.returncode, 0, "node: %s\n%s" % (
            p.stdout[-3000:], p.stderr[-3000:]))
        return out

    def node_cfg(self, sdk, stream=False, query=None):
        if sdk == "anthropic":
            base, key = "https://%s" % SDK, self.sdk_tok
        else:
            base, key = "https://%s/v1" % OPENAI, self.oa_tok
        return {"sdk": sdk, "proxy": "http://127.0.0.1:%d" % PORT,
                "proxy_token": key, "api_key": key, "base_url": base,
                "stream": stream, "query": query}

    def test_node_anthropic_sdk(self):
        m = self.up.log.mark()
        out = self.run_node(self.node_cfg("anthropic"))
        res = out[0]["result"]
        self.assertEqual(res["path"], "/anthropic/v1/messages", out)
        req = self.one_request(m)
        self.assertEqual(header_values(req, "x-api-key"), [self.secret])
        self.assertNoTokenUpstream(req, self.sdk_tok)

    def test_node_anthropic_sdk_stream(self):
        out = self.run_node(self.node_cfg("anthropic", stream=True, query={
            "sse": "1", "n": "4", "gap_ms": "300",
            "event": "content_block_delta"}))
        evs = [o for o in out if "event" in o]
        self.assertEqual([o["event"] for o in evs],
                         [{"i": i} for i in range(4)], out)
        self.assertStreamed([o["t"] for o in evs], 4, 0.3)

    def test_node_openai_sdk(self):
        m = self.up.log.mark()
        out = self.run_node(self.node_cfg("openai"))
        self.assertEqual(out[0]["result"]["path"],
                         "/openai/v1/chat/completions", out)
        req = self.one_request(m)
        self.assertEqual(header_values(req, "Authorization"),
                         ["Bearer " + self.oa_secret])
        self.assertNoTokenUpstream(req, self.oa_tok)

    def test_node_openai_sdk_stream(self):
        out = self.run_node(self.node_cfg("openai", stream=True, query={
            "sse": "1", "n": "4", "gap_ms": "300"}))
        evs = [o for o in out if "event" in o]
        self.assertEqual([o["event"] for o in evs],
                         [{"i": i} for i in range(4)], out)
        self.assertStreamed([o["t"] for o in evs], 4, 0.3)


if __name__ == "__main__":
    if shutil.which("setpriv") is None:
        print("skipped: setpriv is not installed", file=sys.stderr)
        sys.exit(st.base.SKIP)
    st.main()
