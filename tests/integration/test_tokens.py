"""Run tokens against the real daemon (issue 3 "Tests", DESIGN.md "Run
tokens", docs/tokens.md): every carrier lets a valid token through
(Authorization forwarded unchanged, Proxy-Authorization never); every
failure class gets its status (407 + Proxy-Authenticate: Bearer on a
forward listener, 401 + WWW-Authenticate: Bearer on a reverse one, 429 for
budget_exhausted), Sluice-Deny and {"error": reason}, and the upstream
receives nothing; budgets hold across a clean restart and kill -9, and a
route's max_requests_per_token lower than the claim wins; a revoke over the
admin socket hits an open keep-alive connection and survives a restart;
`sluice token verify` prints the claims or the reason.

Tokens come from `sluice token mint` (HS256 and EdDSA, with --now for
expired and future ones); the ones the CLI will not make (alg none, a bad
signature, the Ed25519/HS256 confusion, bad claims) are built in Python.

Topology: netns sbx (sluice, curl, raw sockets) <-veth-> netns up (fakeup
on 198.18.40.2:443, DNS on .53). Three sluice policies in sbx: "main"
(forward 3128, reverse 8080), "budget" (3200/8200), "revoke" (3300/8300).
"""

import base64
import json
import os
import sys
import time

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import token_audit_harness as tah  # noqa: E402
from token_audit_harness import st  # noqa: E402
from sluicetest import header_values, policy as pol  # noqa: E402

ISS = "control-plane"
REVOKED_IN_FILE = "jti-revoked-in-file"


def b64std(text):
    return base64.b64encode(text.encode()).decode()


def padded_basic(tok):
    """Basic credentials for tok whose standard base64 ends in padding
    (the user name is picked to make the length not a multiple of 3)."""
    for user in ("r", "ru", "run"):
        cred = tah.basic(user, tok)
        if cred.endswith("="):
            return cred
    raise AssertionError("unreachable: one of three lengths pads")


class TestTokens(st.ProxyTestCase):
    TAG = "tokens"
    X = 40

    @classmethod
    def build(cls):
        h, t = cls.h, cls.h.topo
        cert, key = h.ca.issue("model-up", ["DNS:model-up.test",
                                            "IP:" + t.v4(2)])
        cls.up = h.fakeup("main", ["%s:443" % t.v4(2)], cert, key)
        h.dns_server({"model-up.test": {"A": [t.v4(2)]}})
        cls.hs_key = h.key_file  # HS256 secret, kid k1
        cls.ed_priv, cls.ed_pub = tah.ed25519_keypair(h.tmp, "ed")  # k2
        cls.other_hs = st.write_secret(os.path.join(h.tmp, "other.key"))
        cls.docs = {}
        cls.sent = set()  # every token and credential the tests sent
        cls.main = cls.start("main", 3128, 8080)
        cls.now = int(time.time())

    @classmethod
    def make_doc(cls, name, fport, rport):
        h, t = cls.h, cls.h.topo
        routes = [
            pol.route("model", ["model.test"], "https://model-up.test/base",
                      h.ca.cert),
            # Same upstream by its address: a route whose own limit (2) is
            # lower than the tokens' max_requests claims.
            pol.route("capped", ["capped.test"],
                      "https://%s/capped" % t.v4(2), h.ca.cert,
                      max_requests=2),
        ]
        listeners = [pol.forward("fwd", "127.0.0.1:%d" % fport),
                     pol.reverse("rev", "127.0.0.1:%d" % rport, "model")]
        doc = h.policy(name, listeners, routes)
        doc["tokens"]["issuer"] = ISS
        doc["tokens"]["keys"] = [
            {"kid": "k1", "alg": "HS256", "secret_file": cls.hs_key},
            {"kid": "k2", "alg": "EdDSA", "public_key_file": cls.ed_pub},
        ]
        with open(doc["tokens"]["revoked_file"], "w") as f:
            f.write("# revoked by the control plane\n\n%s\n" %
                    REVOKED_IN_FILE)
        return doc

    @classmethod
    def start(cls, name, fport, rport, instance="1"):
        if name not in cls.docs:
            cls.docs[name] = cls.make_doc(name, fport, rport)
        return tah.start_sluice(cls.h, name, cls.docs[name], instance)

    # -- helpers -----------------------------------------------------------

    def tok(self, aud="model", **kw):
        kw.setdefault("kid", "k1")
        kw.setdefault("iss", ISS)
        key = self.ed_priv if kw.get("alg") == "EdDSA" else self.hs_key
        t = tah.mint(key, aud, **kw)
        self.sent.add(t)
        return t

    def python_tok(self, header=None, claims=None, key=None, sig=None,
                   drop=()):
        """A token built here; HS256-signed with key (bytes) unless sig."""
        now = int(time.time())
        c = {"iss": ISS, "sub": "run-py", "aud": "model", "iat": now,
             "exp": now + 600, "jti": "py-%d" % time.monotonic_ns()}
        c.update(claims or {})
        for k in drop:
            del c[k]
        hdr = {"alg": "HS256", "typ": "JWT", "kid": "k1"}
        hdr.update(header or {})
        if key is None and sig is None:
            key = tah.key_bytes(self.hs_key)
        return tah.jws(hdr, c, hs_key=key, sig=sig)

    @classmethod
    def record(cls, auth):
        """Remember every credential sent, for test_zz_no_token_in_logs."""
        for a in auth:
            cred = a.partition(":")[2].strip()
            cls.sent.add(cred)
            cls.sent.add(cred.partition(" ")[2])

    def fwd(self, auth, port=3128, host="model.test", path="/v1/messages"):
        self.record(auth)
        return tah.one(self.h, port, tah.fwd_req(host, auth, path))

    def rev(self, auth, port=8080, path="/v1/messages"):
        self.record(auth)
        return tah.one(self.h, port, tah.rev_req(port, auth, path))

    def connect(self, auth, port=3128, target="model-up.test:443"):
        self.record(auth)
        return tah.one(self.h, port, tah.connect_req(target, auth),
                       method="CONNECT")

    def one_request(self, mark):
        reqs = self.up.log.wait_for(mark, "request")
        self.assertEqual(len(reqs), 1, "upstream requests: %r" % (reqs,))
        return reqs[0]

    def assertNoProxyAuthUpstream(self, req):
        self.assertEqual(header_values(req, "Proxy-Authorization"), [],
                         "Proxy-Authorization reached the upstream")

    # -- allowed with each carrier -----------------------------------------

    def test_carrier_proxy_authorization_bearer_forward(self):
        tok = self.tok()
        m = self.up.log.mark()
        r = self.h.curl(["-x", "http://127.0.0.1:3128", "--proxy-header",
                         "Proxy-Authorization: Bearer " + tok, "-d", "{}"],
                        "http://model.test/v1/messages")
        self.assertEqual(r.status, 200, r)
        req = self.one_request(m)
        self.assertEqual(req["target"], "/base/v1/messages")
        self.assertNoProxyAuthUpstream(req)
        self.assertEqual(header_values(req, "Authorization"), [])

    def test_carrier_proxy_authorization_basic_forward(self):
        # HTTPS_PROXY=http://run:<jwt>@127.0.0.1:3128 style.
        tok = self.tok()
        m = self.up.log.mark()
        r = self.h.curl(["-x", "http://run:%s@127.0.0.1:3128" % tok,
                         "-d", "{}"], "http://model.test/v1/messages")
        self.assertEqual(r.status, 200, r)
        req = self.one_request(m)
        self.assertNoProxyAuthUpstream(req)
        # sluice adds no Authorization of its own.
        self.assertEqual(header_values(req, "Authorization"), [])

    def test_carrier_basic_empty_user(self):
        tok = self.tok()
        m = self.up.log.mark()
        r = self.fwd(["Proxy-Authorization: Basic " + tah.basic("", tok)])
        self.assertEqual(r.status, 200, r)
        self.assertNoProxyAuthUpstream(self.one_request(m))

    def test_carrier_authorization_bearer_reverse(self):
        tok = self.tok()
        m = self.up.log.mark()
        r = self.h.curl(["-H", "Authorization: Bearer " + tok, "-d", "{}"],
                        "http://127.0.0.1:8080/v1/messages")
        self.assertEqual(r.status, 200, r)
        req = self.one_request(m)
        self.assertEqual(header_values(req, "Authorization"),
                         ["Bearer " + tok])
        self.assertNoProxyAuthUpstream(req)

    def test_carrier_authorization_bearer_forward(self):
        tok = self.tok()
        m = self.up.log.mark()
        r = self.h.curl(["-x", "http://127.0.0.1:3128",
                         "-H", "Authorization: Bearer " + tok, "-d", "{}"],
                        "http://model.test/v1/messages")
        self.assertEqual(r.status, 200, r)
        req = self.one_request(m)
        self.assertEqual(header_values(req, "Authorization"),
                         ["Bearer " + tok])
        self.assertNoProxyAuthUpstream(req)

    def audit_line_of(self, tok):
        """The allowed http.request line of the request that used tok."""
        jti = tah.claims_of(tok)["jti"]
        path = self.docs["main"]["audit"]["path"]
        evs = tah.wait_events(path, lambda evs: [
            e for e in evs if e.get("jti") == jti and
            e.get("event") == "http.request"])
        lines = [e for e in evs if e.get("jti") == jti and
                 e.get("event") == "http.request"]
        self.assertEqual(len(lines), 1, lines)
        return lines[0]

    def test_authorization_not_the_token_is_removed(self):
        # Proxy-Authorization decides; an Authorization that is not the
        # verified token (another run's token, an upstream credential)
        # must not reach the upstream, which would charge a run sluice
        # never checked (issue 8 E). The removal is audited.
        tok = self.tok()
        other_run = self.tok(sub="run-other")
        for other in ("Bearer " + other_run, "Bearer upstream-credential",
                      "Basic dXA6Y3JlZA==", "Token xyz"):
            with self.subTest(authorization=other[:12]):
                tok = self.tok()
                m = self.up.log.mark()
                r = self.fwd(["Proxy-Authorization: Bearer " + tok,
                              "Authorization: " + other])
                self.assertEqual(r.status, 200, r)
                req = self.one_request(m)
                self.assertEqual(header_values(req, "Authorization"), [])
                self.assertNoProxyAuthUpstream(req)
                line = self.audit_line_of(tok)
                self.assertEqual(line.get("decision"), "allow", line)
                self.assertIs(line.get("authorization_removed"), True, line)
        # Basic in Proxy-Authorization, another run's token in
        # Authorization: removed too.
        tok = self.tok()
        m = self.up.log.mark()
        r = self.fwd(["Proxy-Authorization: Basic " + tah.basic("run", tok),
                      "Authorization: Bearer " + other_run])
        self.assertEqual(r.status, 200, r)
        self.assertEqual(header_values(self.one_request(m),
                                       "Authorization"), [])
        self.assertIs(self.audit_line_of(tok).get("authorization_removed"),
                      True)

    def test_authorization_that_is_the_token_is_forwarded(self):
        # The same token in both: Authorization goes upstream unchanged
        # and nothing is marked removed.
        for pa in ("Bearer %s", "Basic %s"):
            with self.subTest(proxy_authorization=pa[:6]):
                tok = self.tok()
                cred = tok if pa.startswith("Bearer") else \
                    tah.basic("run", tok)
                m = self.up.log.mark()
                r = self.fwd(["Proxy-Authorization: " + pa % cred,
                              "Authorization: Bearer " + tok])
                self.assertEqual(r.status, 200, r)
                req = self.one_request(m)
                self.assertEqual(header_values(req, "Authorization"),
                                 ["Bearer " + tok])
                self.assertNoProxyAuthUpstream(req)
                self.assertNotIn("authorization_removed",
                                 self.audit_line_of(tok))

    def test_carrier_connect_bearer_and_basic(self):
        tok = self.tok()
        for proxy_args in (["-x", "http://127.0.0.1:3128", "--proxy-header",
                            "Proxy-Authorization: Bearer " + tok],
                           ["-x", "http://run:%s@127.0.0.1:3128" % tok]):
            with self.subTest(args=proxy_args[1][:30]):
                m = self.up.log.mark()
                r = self.h.curl(proxy_args + [
                    "-p", "--cacert", self.h.ca.cert,
                    "-H", "Authorization: Bearer inner-credential",
                    "-d", "{}"], "https://model-up.test/v1/messages")
                self.assertEqual(r.connect_status, 200, r)
                self.assertEqual(r.status, 200, r)
                req = self.one_request(m)
                self.assertEqual(req["target"], "/v1/messages")
                self.assertEqual(header_values(req, "Authorization"),
                                 ["Bearer inner-credential"])
                self.assertNoProxyAuthUpstream(req)

    def test_eddsa_token_allowed(self):
        tok = self.tok(alg="EdDSA", kid="k2")
        self.assertEqual(tah.header_of(tok)["alg"], "EdDSA")
        m = self.up.log.mark()
        self.assertEqual(self.rev(["Authorization: Bearer " + tok]).status,
                         200)
        self.assertEqual(self.fwd(["Proxy-Authorization: Bearer " + tok])
                         .status, 200)
        self.assertEqual(len(self.up.log.wait_for(m, "request", 2)), 2)

    # -- failure classes ---------------------------------------------------

    def failure_tokens(self):
        """[(label, token, reason)]: each a bearer credential that must
        fail with reason on every listener."""
        now = int(time.time())
        ok = self.tok()
        ed_ok = self.tok(alg="EdDSA", kid="k2")
        with open(self.ed_pub, "rb") as f:
            pub_pem = f.read()
        two_keys_no_kid = tah.mint(self.hs_key, "model", iss=ISS)
        return [
            ("garbage", "garbage", "token_malformed"),
            ("two segments", ".".join(ok.split(".")[:2]), "token_malformed"),
            ("four segments", ok + ".AAAA", "token_malformed"),
            ("padded", ok + "=", "token_malformed"),
            ("missing jti", self.python_tok(drop=("jti",)),
             "token_malformed"),
            ("exp as string", self.python_tok(claims={"exp": str(now + 60)}),
             "token_malformed"),
            ("crit", self.python_tok(header={"crit": ["exp"]}),
             "token_malformed"),
            ("max_requests 0", self.python_tok(claims={"max_requests": 0}),
             "token_malformed"),
            ("alg none", self.python_tok(header={"alg": "none"}, sig=b""),
             "token_unsupported_alg"),
            ("alg RS256", self.python_tok(header={"alg": "RS256"},
                                          sig=b"x" * 256),
             "token_unsupported_alg"),
            ("HS256 for the EdDSA key (CLI)",
             tah.mint(self.hs_key, "model", kid="k2", iss=ISS),
             "token_unsupported_alg"),
            ("HS256 keyed with the Ed25519 public key",
             self.python_tok(header={"kid": "k2"}, key=pub_pem),
             "token_unsupported_alg"),
            ("EdDSA for the HS256 key",
             tah.mint(self.ed_priv, "model", alg="EdDSA", kid="k1", iss=ISS),
             "token_unsupported_alg"),
            ("kid names no key", self.tok(kid="k9"), "token_unknown_kid"),
            ("no kid with two keys", two_keys_no_kid, "token_unknown_kid"),
            ("HS256 bad signature", tah.flip_signature(ok),
             "token_bad_signature"),
            ("EdDSA bad signature", tah.flip_signature(ed_ok),
             "token_bad_signature"),
            ("other HS256 secret",
             tah.mint(self.other_hs, "model", kid="k1", iss=ISS),
             "token_bad_signature"),
            ("short signature", self.python_tok(sig=b"\x01" * 16),
             "token_bad_signature"),
            ("expired", self.tok(now=now - 7200, ttl=600), "token_expired"),
            ("expired EdDSA", self.tok(alg="EdDSA", kid="k2",
                                       now=now - 7200, ttl=600),
             "token_expired"),
            ("iat in the future", self.tok(now=now + 3600, ttl=600),
             "token_not_yet_valid"),
            ("nbf in the future", self.python_tok(
                claims={"nbf": now + 300}), "token_not_yet_valid"),
            ("lifetime too long", self.tok(ttl=7200),
             "token_lifetime_too_long"),
            ("wrong audience", self.tok(aud="other-aud"),
             "token_wrong_audience"),
            ("wrong audience array", self.tok(aud=["a1", "a2"]),
             "token_wrong_audience"),
            ("wrong issuer", self.tok(iss="evil"), "token_wrong_issuer"),
            ("no issuer", self.tok(iss=None), "token_wrong_issuer"),
            ("revoked in revoked_file", self.tok(jti=REVOKED_IN_FILE),
             "token_revoked"),
        ]

    def check_denials(self, cases, send, status, challenge):
        m = self.up.log.mark()
        for label, auth, reason in cases:
            with self.subTest(case=label):
                r = send(auth)
                self.assertDenied(r, status, reason, challenge)
        time.sleep(0.1)
        self.assertNothingUpstream(self.up, m, "for a denied request")

    def test_failures_forward_proxy_authorization(self):
        cases = [(l, ["Proxy-Authorization: Bearer " + t], r)
                 for l, t, r in self.failure_tokens()]
        self.check_denials(cases, self.fwd, 407, "proxy")

    def test_failures_forward_basic(self):
        cases = [(l, ["Proxy-Authorization: Basic " + tah.basic("run", t)],
                  r) for l, t, r in self.failure_tokens()]
        self.check_denials(cases, self.fwd, 407, "proxy")

    def test_failures_forward_authorization(self):
        cases = [(l, ["Authorization: Bearer " + t], r)
                 for l, t, r in self.failure_tokens()]
        self.check_denials(cases, self.fwd, 407, "proxy")

    def test_failures_reverse(self):
        cases = [(l, ["Authorization: Bearer " + t], r)
                 for l, t, r in self.failure_tokens()]
        self.check_denials(cases, self.rev, 401, "www")

    def test_failures_connect(self):
        cases = [(l, ["Proxy-Authorization: Bearer " + t], r)
                 for l, t, r in self.failure_tokens()]
        self.check_denials(cases, self.connect, 407, "proxy")

    def test_carrier_failures(self):
        tok = self.tok()
        fwd = [
            ("no carrier", [], "token_missing"),
            ("Authorization Basic is no carrier",
             ["Authorization: Basic " + tah.basic("run", tok)],
             "token_missing"),
            ("wrong scheme", ["Proxy-Authorization: Digest username=run"],
             "token_malformed"),
            ("empty bearer", ["Proxy-Authorization: Bearer"],
             "token_malformed"),
            ("two spaces", ["Proxy-Authorization: Bearer  " + tok],
             "token_malformed"),
            ("basic not base64", ["Proxy-Authorization: Basic !!!"],
             "token_malformed"),
            ("basic without colon", ["Proxy-Authorization: Basic " +
                                     b64std("run" + tok)],
             "token_malformed"),
            ("basic empty password", ["Proxy-Authorization: Basic " +
                                      tah.basic("run", "")],
             "token_malformed"),
            ("basic unpadded", ["Proxy-Authorization: Basic " +
                                padded_basic(tok).rstrip("=")],
             "token_malformed"),
            ("two Proxy-Authorization", [
                "Proxy-Authorization: Bearer " + tok,
                "Proxy-Authorization: Bearer " + tok], "token_malformed"),
            ("malformed Proxy-Authorization does not fall back", [
                "Proxy-Authorization: Digest x",
                "Authorization: Bearer " + tok], "token_malformed"),
            ("bad Proxy-Authorization token does not fall back", [
                "Proxy-Authorization: Bearer " + tah.flip_signature(tok),
                "Authorization: Bearer " + tok], "token_bad_signature"),
            ("empty Authorization bearer", ["Authorization: Bearer"],
             "token_malformed"),
        ]
        self.check_denials(fwd, self.fwd, 407, "proxy")
        rev = [
            ("no carrier", [], "token_missing"),
            # On a reverse listener Authorization is sluice's carrier, so
            # another scheme is a malformed carrier (issue 8 item 4).
            ("Authorization Basic is a malformed carrier",
             ["Authorization: Basic " + tah.basic("run", tok)],
             "token_malformed"),
            ("Authorization Token is a malformed carrier",
             ["Authorization: Token xyz"], "token_malformed"),
            ("empty Authorization bearer", ["Authorization: Bearer"],
             "token_malformed"),
            ("two Authorization", ["Authorization: Bearer " + tok,
                                   "Authorization: Bearer " + tok],
             "token_malformed"),
            ("wrong scheme in Proxy-Authorization",
             ["Proxy-Authorization: Negotiate abc"], "token_malformed"),
        ]
        self.check_denials(rev, self.rev, 401, "www")
        conn = [
            ("no carrier", [], "token_missing"),
            ("Authorization is no carrier on CONNECT",
             ["Authorization: Bearer " + tok], "token_missing"),
            ("basic empty password", ["Proxy-Authorization: Basic " +
                                      tah.basic("run", "")],
             "token_malformed"),
        ]
        self.check_denials(conn, self.connect, 407, "proxy")

    # -- budgets -----------------------------------------------------------

    def spend(self, tok, n, port=3128, host="model.test"):
        """n requests with tok on fresh connections; their statuses."""
        out = []
        for _ in range(n):
            r = self.fwd(["Proxy-Authorization: Bearer " + tok], port=port,
                         host=host)
            out.append(r.status)
            if r.status == 429:
                self.assertDenied(r, 429, "budget_exhausted")
        return out

    def test_budget_claim_then_429(self):
        tok = self.tok(max_requests=3)
        m = self.up.log.mark()
        self.assertEqual(self.spend(tok, 3), [200] * 3)
        self.assertEqual(len(self.up.log.wait_for(m, "request", 3)), 3)
        m = self.up.log.mark()
        r = self.rev(["Authorization: Bearer " + tok])
        self.assertDenied(r, 429, "budget_exhausted")
        self.assertEqual(self.spend(tok, 1), [429])
        r = self.connect(["Proxy-Authorization: Bearer " + tok])
        self.assertDenied(r, 429, "budget_exhausted")
        time.sleep(0.1)
        self.assertNothingUpstream(self.up, m, "after budget_exhausted")

    def test_budget_route_limit_lower_than_claim(self):
        # Route "capped" allows 2 per token; the claim says 5: 2 pass.
        tok = self.tok(aud="capped", max_requests=5)
        self.assertEqual(self.spend(tok, 3, host="capped.test"),
                         [200, 200, 429])
        # The claim lower than the route (1 < 2) wins too.
        tok = self.tok(aud="capped", max_requests=1)
        self.assertEqual(self.spend(tok, 2, host="capped.test"), [200, 429])
        # No claim: the route's limit alone.
        tok = self.tok(aud="capped")
        self.assertEqual(self.spend(tok, 3, host="capped.test"),
                         [200, 200, 429])

    def test_budget_survives_restart_and_kill9(self):
        a = self.tok(max_requests=3)
        b = self.tok(max_requests=5)
        s = self.start("budget", 3200, 8200, "1")
        self.assertEqual(self.spend(a, 4, port=3200), [200, 200, 200, 429])
        self.assertEqual(self.spend(b, 2, port=3200), [200, 200])
        tah.stop_clean(self, s)

        s = self.start("budget", 3200, 8200, "2")
        m = self.up.log.mark()
        self.assertEqual(self.spend(a, 1, port=3200), [429],
                         "budget refunded by a clean restart")
        time.sleep(0.1)
        self.assertNothingUpstream(self.up, m)
        self.assertEqual(self.spend(b, 1, port=3200), [200])
        tah.kill9(s)

        s = self.start("budget", 3200, 8200, "3")
        self.assertEqual(self.spend(a, 1, port=3200), [429],
                         "budget refunded by kill -9 and restart")
        # b used 3 of 5 before the kill: exactly 2 more.
        self.assertEqual(self.spend(b, 3, port=3200), [200, 200, 429])
        tah.kill9(s)
        s = self.start("budget", 3200, 8200, "4")
        self.assertEqual(self.spend(b, 1, port=3200), [429])
        tah.stop_clean(self, s)

    # -- revocation --------------------------------------------------------

    def test_revoke_admin_socket_keepalive_and_restart(self):
        s = self.start("revoke", 3300, 8300, "1")
        sock = self.docs["revoke"]["admin"]["socket"]
        tok = self.tok()
        jti = tah.claims_of(tok)["jti"]
        other = self.tok()
        fwd_c = self.h.raw(3300)
        rev_c = self.h.raw(8300)
        try:
            r = fwd_c.request(tah.fwd_req(
                "model.test", ["Proxy-Authorization: Bearer " + tok]))
            self.assertEqual(r.status, 200, r)
            r = rev_c.request(tah.rev_req(8300,
                                          ["Authorization: Bearer " + tok]))
            self.assertEqual(r.status, 200, r)
            ans = tah.admin(sock, "revoke " + jti)
            self.assertTrue(ans.startswith("ok"), ans)
            m = self.up.log.mark()
            r = fwd_c.request(tah.fwd_req(
                "model.test", ["Proxy-Authorization: Bearer " + tok]))
            self.assertDenied(r, 407, "token_revoked", "proxy")
            r = rev_c.request(tah.rev_req(8300,
                                          ["Authorization: Bearer " + tok]))
            self.assertDenied(r, 401, "token_revoked", "www")
        finally:
            fwd_c.close()
            rev_c.close()
        self.assertDenied(self.connect(["Proxy-Authorization: Bearer " + tok],
                                       port=3300), 407, "token_revoked",
                          "proxy")
        time.sleep(0.1)
        self.assertNothingUpstream(self.up, m, "for a revoked token")
        # Another token of the same run is not affected.
        self.assertEqual(self.fwd(["Proxy-Authorization: Bearer " + other],
                                  port=3300).status, 200)
        # A malformed jti is refused with an error answer.
        self.assertTrue(tah.admin(sock, "revoke ").startswith("error"))

        tah.stop_clean(self, s)
        s = self.start("revoke", 3300, 8300, "2")
        self.assertDenied(self.fwd(["Proxy-Authorization: Bearer " + tok],
                                   port=3300), 407, "token_revoked", "proxy")
        self.assertEqual(self.fwd(["Proxy-Authorization: Bearer " + other],
                                  port=3300).status, 200)

        # revoked_file is read again on SIGHUP.
        with open(self.docs["revoke"]["tokens"]["revoked_file"], "a") as f:
            f.write(tah.claims_of(other)["jti"] + "\n")
        s.reload()
        ok = st.wait_until(lambda: self.fwd(
            ["Proxy-Authorization: Bearer " + other], port=3300).status
            == 407, st.ENV.slow(5), 0.1)
        self.assertTrue(ok, "revoked_file not reloaded on SIGHUP")
        self.assertDenied(self.fwd(["Proxy-Authorization: Bearer " + other],
                                   port=3300), 407, "token_revoked", "proxy")
        tah.kill9(s)
        s = self.start("revoke", 3300, 8300, "3")
        self.assertDenied(self.rev(["Authorization: Bearer " + tok],
                                   port=8300), 401, "token_revoked", "www")
        tah.stop_clean(self, s)

    def test_admin_cli(self):
        """`sluice admin`: the same commands without socat, exit codes."""
        s = self.start("revoke", 3300, 8300, "cli")
        sock = self.docs["revoke"]["admin"]["socket"]
        policy = s.policy_path
        a, b = self.tok(), self.tok()
        ja, jb = tah.claims_of(a)["jti"], tah.claims_of(b)["jti"]

        def admin(*args):
            return st.run([st.ENV.bin, "admin"] + list(args), check=False)

        p = admin("-c", policy, "status")  # the socket from the policy
        self.assertEqual(p.returncode, 0, p)
        self.assertIn("policy_generation ", p.stdout)
        p = admin("--socket", sock, "revoke", ja, jb)
        self.assertEqual(p.returncode, 0, p)
        self.assertEqual(p.stdout.splitlines(),
                         ["ok revoked " + ja, "ok revoked " + jb])
        for t in (a, b):
            self.assertDenied(self.fwd(["Proxy-Authorization: Bearer " + t],
                                       port=3300), 407, "token_revoked",
                              "proxy")
        # `sluice token verify` consults the admin revocations too.
        p = tah.verify_cli(policy, a, route="model")
        self.assertEqual((p.returncode, p.stdout.strip()),
                         (1, "token_revoked"), p)
        p = tah.verify_cli(policy, self.tok(), route="model")
        self.assertEqual(p.returncode, 0, p)
        p = admin("--socket", sock, "reload")
        self.assertEqual((p.returncode, p.stdout.strip()),
                         (0, "ok reload requested"), p)
        # The daemon's error answer is exit 1; no socket is exit 3;
        # usage errors are 2 and name the usage.
        p = admin("--socket", sock, "revoke", "a" * 200)
        self.assertEqual(p.returncode, 1, p)
        self.assertTrue(p.stdout.startswith("error:"), p)
        p = admin("--socket", sock + ".missing", "status")
        self.assertEqual(p.returncode, 3, p)
        self.assertIn(".missing", p.stderr)
        for bad in (["status", "extra"], ["revoke"], ["frobnicate"], []):
            p = admin("--socket", sock, *bad)
            self.assertEqual(p.returncode, 2, (bad, p))
            self.assertIn("usage: sluice admin", p.stderr)
        p = admin("--help")
        self.assertEqual(p.returncode, 0, p)
        self.assertIn("usage: sluice admin", p.stdout)
        tah.stop_clean(self, s)

    # -- sluice token verify -----------------------------------------------

    def test_verify_cli(self):
        path = self.main.policy_path
        tok = self.tok(max_requests=7, sub="run-verify")
        p = tah.verify_cli(path, tok, route="model")
        self.assertEqual(p.returncode, 0, p)
        got = json.loads(p.stdout)
        want = tah.claims_of(tok)
        for k in ("sub", "jti", "iss", "exp", "iat", "max_requests"):
            self.assertEqual(got.get(k), want[k], "claim %s: %r" % (k, got))
        aud = got.get("aud")
        self.assertIn("model", aud if isinstance(aud, list) else [aud])
        self.assertNotIn(tok, p.stdout + p.stderr)

        # EdDSA, and without --route (any route's audience will do).
        p = tah.verify_cli(path, self.tok(alg="EdDSA", kid="k2"))
        self.assertEqual(p.returncode, 0, p)
        # From stdin.
        p = st.run([st.ENV.bin, "token", "verify", "-c", path, "--route",
                    "model", "-"], check=False, input=tok + "\n")
        self.assertEqual(p.returncode, 0, p)
        self.assertEqual(json.loads(p.stdout).get("jti"),
                         want["jti"])
        # --now replaces the clock.
        now = int(time.time())
        old = self.tok(now=now - 7200, ttl=600)
        self.assertEqual(tah.verify_cli(path, old, "model",
                                        now=now - 7000).returncode, 0)

        bad = [
            (tah.flip_signature(tok), "model", "token_bad_signature"),
            (old, "model", "token_expired"),
            (self.tok(aud="other-aud"), "model", "token_wrong_audience"),
            (tok, "capped", "token_wrong_audience"),
            (self.tok(iss="evil"), "model", "token_wrong_issuer"),
            (self.tok(kid="k9"), "model", "token_unknown_kid"),
            (self.python_tok(header={"alg": "none"}, sig=b""), "model",
             "token_unsupported_alg"),
            (self.tok(ttl=7200), "model", "token_lifetime_too_long"),
            (self.tok(jti=REVOKED_IN_FILE), "model", "token_revoked"),
            ("garbage", "model", "token_malformed"),
        ]
        for t, route, reason in bad:
            with self.subTest(reason=reason, route=route):
                p = tah.verify_cli(path, t, route=route)
                self.assertEqual(p.returncode, 1, p)
                self.assertEqual(p.stdout.strip(), reason, p)

    # -- last (unittest runs tests in name order) ---------------------------

    def make_token_traffic(self):
        """Requests with tokens in every carrier, allowed and refused, so
        that the check below stands alone; waits until their audit lines
        are written."""
        good = self.tok()
        expired = self.tok(ttl=60, now=self.now - 3600)
        wrong_aud = self.tok(aud="nobody")
        bad_sig = tah.flip_signature(self.tok())
        path = self.docs["main"]["audit"]["path"]
        before = len(tah.read_lines(path))
        sends = [
            (self.fwd, ["Proxy-Authorization: Bearer " + good]),
            (self.fwd, ["Proxy-Authorization: Basic " +
                        tah.basic("run", good)]),
            (self.fwd, ["Authorization: Bearer " + good]),
            (self.fwd, ["Proxy-Authorization: Bearer " + good,
                        "Authorization: Bearer " + wrong_aud]),
            (self.rev, ["Authorization: Bearer " + good]),
            (self.connect, ["Proxy-Authorization: Bearer " + good]),
            (self.fwd, ["Proxy-Authorization: Bearer " + expired]),
            (self.rev, ["Authorization: Bearer " + wrong_aud]),
            (self.rev, ["Authorization: Bearer " + bad_sig]),
            (self.connect, ["Proxy-Authorization: Bearer " + bad_sig]),
            (self.rev, ["Authorization: Token " + good]),
        ]
        for fn, auth in sends:
            fn(auth)
        tah.wait_events(path, lambda evs: len(evs) >= before + len(sends))
        self.assertGreaterEqual(len(tah.read_lines(path)),
                                before + len(sends))

    def test_zz_no_token_in_logs(self):
        """No token, credential or key the tests used is in any audit log
        or in sluice's stderr (DESIGN.md: no secret is ever logged). Makes
        traffic of its own first, so it holds when run alone; when the
        whole class ran, it checks every credential the class sent."""
        self.make_token_traffic()
        self.assertGreaterEqual(len(self.sent), 10)
        secrets = [(v, "a credential sent") for v in self.sent
                   if len(v) >= 16]
        secrets.append((tah.key_bytes(self.hs_key).decode(),
                        "the HS256 secret"))
        with open(self.ed_priv) as f:
            pem = f.read()
        secrets.append(("".join(pem.splitlines()[1:-1]),
                        "the Ed25519 private key"))
        files = []
        for root, _, names in os.walk(self.h.tmp):
            files += [os.path.join(root, n) for n in names
                      if n == "audit.jsonl" or (n.startswith("sluice-") and
                                                n.endswith(".stderr"))]
        self.assertIn(self.docs["main"]["audit"]["path"], files)
        self.assertTrue(any(os.path.basename(f).startswith("sluice-main-")
                            for f in files), files)
        for path in files:
            with open(path, encoding="utf-8", errors="replace") as f:
                data = f.read()
            for value, what in secrets:
                self.assertNotIn(value, data, "%s is in %s" % (what, path))


if __name__ == "__main__":
    st.main()
