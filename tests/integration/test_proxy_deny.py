"""Denials (DESIGN.md "Requests and routing", "Run tokens"): route,
method, path, token and destination checks. Each denial must carry its
status, the reason at the end of the status line, `Sluice-Deny: <reason>`,
`x-should-retry: false` on a 4xx, and the body {"error", "message",
"request_id"}, and the upstream must have received nothing at all.

Topology: netns sbx (sluice, clients) <-veth-> netns up (fakeup on
198.18.2.2:443, DNS on .53)."""

import json
import os
import sys
import time

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "lib"))

import sluicetest as st  # noqa: E402
from sluicetest import policy as pol  # noqa: E402
from sluicetest.http import build_request  # noqa: E402
from sluicetest.tokens import mint_python, write_secret  # noqa: E402

PATHS_DENIED = [
    "/v1/messagesX",
    "/v1/message",
    "/v2/messages",
    "/",
    "/v1/messages/../x",
    "/v1/messages/..",
    "/v1/messages/./x",
    "/v1/messages/.",
    "/v1/messages//x",
    "/v1//messages",
    "/v1/messages//",
    "/v1/messages/%2e%2e/x",
    "/v1/messages/%2E",
    "/v1/messages%2Fx",
    "/v1/messages/%2f",
    "/v1/messages/%5Cx",
    "/v1/messages/%5c",
    "/v1/messages/%00",
    "/v1/messages/%1F",
    "/v1/messages/%7F",
    "/v1/messages/a\\b",
    "/v1/messages/%6D",
    "/v1/%6Dessages",
    "/v1/messages/%41",
    "/v1/messages/%7E",
    "/v1/messages/%2D",
    "/v1/messages/%5F",
    "/v1/messages/%30",
]

PATHS_ALLOWED = [
    "/v1/messages",
    "/v1/messages/",
    "/v1/messages/x",
    "/v1/messages/a.b",
    "/v1/messages/..x",
    "/v1/messages/%20x",
    "/v1/messages/%3F",
    "/v1/messages/%C3%A9",
    "/v1/messages?x=../..%2F%5C",
]


class TestDeny(st.ProxyTestCase):
    TAG = "deny"
    X = 2

    @classmethod
    def build(cls):
        h, t = cls.h, cls.h.topo
        cert, key = h.ca.issue("model-up", ["DNS:model-up.test",
                                            "DNS:other-up.test",
                                            "IP:" + t.v4(2),
                                            "IP:" + t.v6(2)])
        cls.up = h.fakeup("main", ["%s:443" % t.v4(2),
                                   "[%s]:443" % t.v6(2)], cert, key)
        h.dns_server({"model-up.test": {"A": [t.v4(2)]},
                      "other-up.test": {"A": [t.v4(2)]}})
        ca = h.ca.cert
        # One upstream host per route: sluice refuses two routes that the
        # same upstream host would select.
        routes = [
            pol.route("model", ["model.test"], "https://model-up.test/base",
                      ca),
            pol.route("other", ["other-route.test"],
                      "https://other-up.test/other", ca,
                      prefixes=["/v1/other"]),
            pol.route("noconn", ["noconn.test"], "https://%s/nc" % t.v4(2),
                      ca, connect=False),
            pol.route("v6", ["v6.test"], "https://[%s]/v6" % t.v6(2), ca),
        ]
        listeners = [pol.forward("fwd", "127.0.0.1:3128"),
                     pol.reverse("rev", "127.0.0.1:8080", "model")]
        cls.sl = h.sluice("main", h.policy("main", listeners, routes))
        cls.tok = h.token("model")
        cls.other_key = write_secret(os.path.join(h.tmp, "other.key"))

    # -- helpers -----------------------------------------------------------

    def rev(self, target, method="POST", auth=None, extra=()):
        if auth is None:
            auth = ["Authorization: Bearer " + self.tok]
        with self.h.raw(8080) as c:
            return c.request(build_request(method, target, "127.0.0.1:8080",
                                           list(auth) + list(extra), b"{}"))

    def fwd(self, target, host, method="POST", auth=None):
        if auth is None:
            auth = ["Proxy-Authorization: Bearer " + self.tok]
        with self.h.raw(3128) as c:
            return c.request(build_request(method, target, host, auth,
                                           b"" if method == "CONNECT"
                                           else b"{}",
                                           length=method != "CONNECT"),
                             method=method)

    def connect(self, authority, auth=None):
        if auth is None:
            auth = ["Proxy-Authorization: Bearer " + self.tok]
        with self.h.raw(3128) as c:
            raw = ("CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (
                authority, authority,
                "".join(a + "\r\n" for a in auth))).encode()
            return c.request(raw, method="CONNECT")

    def denied(self, fn, status, reason, auth=None):
        m = self.up.log.mark()
        r = fn()
        self.assertDenied(r, status, reason, auth)
        time.sleep(0.05)
        self.assertNothingUpstream(self.up, m)
        return r

    # -- a control: the same shapes pass when nothing is wrong -------------

    def test_control_allowed(self):
        m = self.up.log.mark()
        self.assertEqual(self.rev("/v1/messages").status, 200)
        self.assertEqual(self.fwd("http://model.test/v1/messages",
                                  "model.test").status, 200)
        self.assertEqual(len(self.up.log.wait_for(m, "request", 2)), 2)

    # -- route_not_found ---------------------------------------------------

    def test_route_not_found_forward(self):
        for url, host in (("http://unknown.test/v1/messages", "unknown.test"),
                          ("http://%s/v1/messages" % self.h.topo.v4(3),
                           self.h.topo.v4(3)),
                          ("http://model.test.evil/v1/messages",
                           "model.test.evil")):
            with self.subTest(url=url):
                self.denied(lambda: self.fwd(url, host), 403,
                            "route_not_found")

    def test_route_not_found_connect(self):
        for auth in ("unknown.test:443", "%s:443" % self.h.topo.v4(3)):
            with self.subTest(authority=auth):
                self.denied(lambda: self.connect(auth), 403,
                            "route_not_found")

    def test_connect_other_port_of_upstream_refused(self):
        # A raw CONNECT must name the upstream's host and port exactly:
        # another port selects no route.
        self.denied(lambda: self.connect("model-up.test:8443"), 403,
                    "route_not_found")

    def test_connect_disabled_route_refused(self):
        # The route matches (its upstream host and port), but CONNECT is
        # not a method it allows: method_not_allowed, always.
        tok = self.h.token("noconn")
        self.denied(lambda: self.connect("%s:443" % self.h.topo.v4(2),
                                         ["Proxy-Authorization: Bearer " +
                                          tok]),
                    403, "method_not_allowed")

    # -- method_not_allowed ------------------------------------------------

    def test_method_not_allowed(self):
        cases = [
            ("reverse GET", lambda: self.rev("/v1/messages", "GET")),
            ("reverse DELETE", lambda: self.rev("/v1/messages", "DELETE")),
            ("reverse lower-case post",
             lambda: self.rev("/v1/messages", "post")),
            ("forward GET", lambda: self.fwd("http://model.test/v1/messages",
                                             "model.test", "GET")),
        ]
        for name, fn in cases:
            with self.subTest(name):
                self.denied(fn, 403, "method_not_allowed")

    # -- path_not_allowed --------------------------------------------------

    def test_path_not_allowed_reverse(self):
        for p in PATHS_DENIED:
            with self.subTest(path=p):
                self.denied(lambda: self.rev(p), 403, "path_not_allowed")

    def test_path_not_allowed_forward(self):
        for p in ("/v1/messages/../x", "/v1/messages%2Fx", "/v1/messagesX",
                  "/v1/messages/%2e%2e/x", "/v1/messages//x"):
            with self.subTest(path=p):
                self.denied(lambda: self.fwd("http://model.test" + p,
                                             "model.test"),
                            403, "path_not_allowed")

    def test_path_allowed_unchanged(self):
        for p in PATHS_ALLOWED:
            with self.subTest(path=p):
                m = self.up.log.mark()
                r = self.rev(p)
                self.assertEqual(r.status, 200, r)
                reqs = self.up.log.wait_for(m, "request")
                self.assertEqual([q["target"] for q in reqs], ["/base" + p])

    # -- tokens ------------------------------------------------------------

    def test_token_missing(self):
        self.denied(lambda: self.fwd("http://model.test/v1/messages",
                                     "model.test", auth=[]),
                    407, "token_missing", "proxy")
        self.denied(lambda: self.rev("/v1/messages", auth=[]),
                    401, "token_missing", "www")
        self.denied(lambda: self.connect("model-up.test:443", auth=[]),
                    407, "token_missing", "proxy")

    def test_authorization_is_no_carrier_for_connect(self):
        self.denied(lambda: self.connect(
            "model-up.test:443", ["Authorization: Bearer " + self.tok]),
            407, "token_missing", "proxy")

    def test_token_bad_signature(self):
        bad = mint_python(self.other_key, "model")
        self.denied(lambda: self.fwd(
            "http://model.test/v1/messages", "model.test",
            auth=["Proxy-Authorization: Bearer " + bad]),
            407, "token_bad_signature", "proxy")
        self.denied(lambda: self.rev(
            "/v1/messages", auth=["Authorization: Bearer " + bad]),
            401, "token_bad_signature", "www")
        self.denied(lambda: self.connect(
            "model-up.test:443", ["Proxy-Authorization: Bearer " + bad]),
            407, "token_bad_signature", "proxy")

    def test_token_wrong_audience(self):
        other = self.h.token("other")
        self.denied(lambda: self.fwd(
            "http://model.test/v1/messages", "model.test",
            auth=["Proxy-Authorization: Bearer " + other]),
            407, "token_wrong_audience", "proxy")
        self.denied(lambda: self.rev(
            "/v1/messages", auth=["Authorization: Bearer " + other]),
            401, "token_wrong_audience", "www")

    def test_token_expired(self):
        now = int(time.time())
        old = mint_python(self.h.key_file, "model", iat=now - 600,
                          exp=now - 300)
        self.denied(lambda: self.rev(
            "/v1/messages", auth=["Authorization: Bearer " + old]),
            401, "token_expired", "www")

    def test_token_malformed_carriers(self):
        for auth in ("Proxy-Authorization: Bearer", "Proxy-Authorization: "
                     "Digest username=x", "Proxy-Authorization: Basic !!!"):
            with self.subTest(auth=auth):
                self.denied(lambda: self.fwd(
                    "http://model.test/v1/messages", "model.test",
                    auth=[auth]), 407, "token_malformed", "proxy")

    def test_reverse_authorization_other_scheme_is_malformed(self):
        # On a reverse listener Authorization is sluice's carrier: another
        # scheme is a malformed carrier (as in Proxy-Authorization), not a
        # missing one.
        for auth in ("Authorization: Token xyz", "Authorization: Basic "
                     "dXNlcjpwYXNz"):
            with self.subTest(auth=auth):
                self.denied(lambda: self.rev("/v1/messages", auth=[auth]),
                            401, "token_malformed", "www")
        # On a forward listener it is meant for the upstream: no carrier.
        self.denied(lambda: self.fwd(
            "http://model.test/v1/messages", "model.test",
            auth=["Authorization: Token xyz"]),
            407, "token_missing", "proxy")

    # -- CONNECT Host (undici's ProxyAgent sends it without the port) ------

    def connect_host(self, authority, host):
        with self.h.raw(3128) as c:
            raw = ("CONNECT %s HTTP/1.1\r\nHost: %s\r\n"
                   "Proxy-Authorization: Bearer %s\r\n\r\n" % (
                       authority, host, self.tok)).encode()
            return c.request(raw, method="CONNECT")

    def test_connect_host_without_port(self):
        for host in ("model-up.test", "MODEL-UP.test", "model-up.test:443"):
            with self.subTest(host=host):
                m = self.up.log.mark()
                r = self.connect_host("model-up.test:443", host)
                self.assertEqual(r.status, 200, r)
                self.up.log.wait_for(m, "accept")

    def test_connect_host_without_port_ipv6(self):
        v6 = self.h.topo.v6(2)
        tok = self.h.token("v6")
        for host in ("[%s]" % v6, "[%s]" % v6.upper(), "[%s]:443" % v6):
            with self.subTest(host=host):
                m = self.up.log.mark()
                with self.h.raw(3128) as c:
                    r = c.request((
                        "CONNECT [%s]:443 HTTP/1.1\r\nHost: %s\r\n"
                        "Proxy-Authorization: Bearer %s\r\n\r\n" % (
                            v6, host, tok)).encode(), method="CONNECT")
                self.assertEqual(r.status, 200, r)
                self.up.log.wait_for(m, "accept")
        for host in (v6, "[%s1]" % v6, "[%s]:444" % v6):
            with self.subTest(host=host):
                with self.h.raw(3128) as c:
                    r = c.request((
                        "CONNECT [%s]:443 HTTP/1.1\r\nHost: %s\r\n"
                        "Proxy-Authorization: Bearer %s\r\n\r\n" % (
                            v6, host, tok)).encode(), method="CONNECT")
                self.assertDenied(r, 400, "bad_request")

    def test_connect_other_host_is_bad_request(self):
        for host in ("other-up.test", "model-up.test:444",
                     "model-up.test.evil", "[2001:2::1]", "model-up.tes"):
            with self.subTest(host=host):
                self.denied(lambda: self.connect_host("model-up.test:443",
                                                      host),
                            400, "bad_request")

    # -- denials that explain themselves (DESIGN "Responses to denials") --

    def audit_lines(self):
        path = os.path.join(self.h.tmp, "main", "audit.jsonl")
        with open(path, encoding="utf-8") as f:
            return [json.loads(x) for x in f if x.strip()]

    def audit_line_for(self, request_id):
        found = []

        def have():
            found[:] = [e for e in self.audit_lines()
                        if e.get("id") == request_id]
            return found
        st.wait_until(have, 3.0)
        self.assertEqual(len(found), 1, "audit lines with id %s: %r" % (
            request_id, found))
        return found[0]

    def test_denial_messages(self):
        now = int(time.time())
        old = mint_python(self.h.key_file, "model", iat=now - 600,
                          exp=now - 35)
        cases = [
            (lambda: self.fwd("http://evil.example/v1/messages",
                              "evil.example"),
             403, "route_not_found", r"^host evil\.example matches no "
             r"route$"),
            (lambda: self.rev("/v1/admin"), 403, "path_not_allowed",
             r"^path /v1/admin is not under /v1/messages$"),
            (lambda: self.rev("/v1/messages/../x"), 403, "path_not_allowed",
             r"^path /v1/messages/\.\./x is not in canonical form"),
            (lambda: self.rev("/v1/messages", "DELETE"), 403,
             "method_not_allowed",
             r"^method DELETE is not allowed on route model$"),
            (lambda: self.rev("/v1/messages",
                              auth=["Authorization: Bearer " + old]),
             401, "token_expired", r"^run token expired (3[5-9]|4\d) s ago$"),
            (lambda: self.rev("/v1/messages", auth=[]), 401,
             "token_missing", r"Authorization: Bearer"),
        ]
        for fn, status, reason, pattern in cases:
            with self.subTest(reason=reason, pattern=pattern):
                r = self.denied(fn, status, reason,
                                "www" if status == 401 else None)
                b = r.json()
                self.assertRegex(b["message"], pattern)
                line = self.audit_line_for(b["request_id"])
                self.assertEqual(line["reason"], reason, line)
                self.assertEqual(line["decision"], "deny", line)
                self.assertEqual(line["status"], status, line)
                self.assertNotIn(self.tok, b["message"])
                self.assertNotIn(old, json.dumps(b))

    def test_denial_message_bounded_and_clean(self):
        # A long path and bytes a message must not carry raw.
        long_path = "/v1/" + "a" * 3000
        r = self.denied(lambda: self.rev(long_path), 403, "path_not_allowed")
        msg = r.json()["message"]
        self.assertLessEqual(len(msg), 400)
        self.assertIn("...", msg)
        self.assertTrue(msg.isascii() and msg.isprintable(), msg)
        host = "x" * 200 + ".test"
        r = self.denied(lambda: self.fwd("http://%s/v1/messages" % host,
                                         host), 403, "route_not_found")
        msg = r.json()["message"]
        self.assertLessEqual(len(msg), 400)
        self.assertRegex(msg, r"^host x+\.\.\. matches no route$")

    def test_ids_differ_and_allowed_lines_have_one(self):
        r1 = self.denied(lambda: self.rev("/v1/x"), 403, "path_not_allowed")
        r2 = self.denied(lambda: self.rev("/v1/y"), 403, "path_not_allowed")
        self.assertNotEqual(r1.json()["request_id"],
                            r2.json()["request_id"])
        self.assertEqual(self.rev("/v1/messages").status, 200)
        self.assertTrue(st.wait_until(lambda: any(
            e.get("decision") == "allow" and e.get("event") ==
            "http.request" for e in self.audit_lines()), 3.0))
        for e in self.audit_lines():
            if e.get("event") in ("http.request", "connect.tunnel"):
                self.assertRegex(e.get("id", ""), r"^[0-9a-f]{20}$", e)

    def test_curl_shows_reason_in_status_line(self):
        # A refused CONNECT: curl shows only the status line.
        r = self.h.curl(["-v", "-x", "http://127.0.0.1:3128",
                         "--proxy-header",
                         "Proxy-Authorization: Bearer " + self.tok],
                        "https://unknown.test/v1/messages")
        self.assertNotEqual(r.rc, 0, r)
        self.assertIn("HTTP/1.1 403 Forbidden (route_not_found)", r.stderr)
        # A refused plain request through the forward proxy.
        r = self.h.curl(["-x", "http://127.0.0.1:3128", "-d", "{}"],
                        "http://model.test/v1/messages")
        self.assertEqual(r.status, 407, r)
        self.assertEqual(r.header("x-should-retry"), "false", r)
        self.assertDenialBody(r, "token_missing")


class TestDestination(st.ProxyTestCase):
    """Upstreams on denied ("private") addresses and the loop guard.

    DESIGN.md: a host that resolves to a denied address is refused
    (destination_denied, 403) unless allow_private, and sluice never
    connects to its own listeners. A host name can only be judged per
    request (after DNS), so those cases must start and answer 403. For an
    IP literal DESIGN does not say whether the refusal comes at start
    (`sluice check`/`run` exit 1 naming routes[i].upstream.url) or per
    request; both are accepted, nothing else is."""

    TAG = "dest"
    X = 3
    NAMED = {
        "private": "https://private-up.test/",
        "meta": "https://meta-up.test/",
        "cgnat": "https://cgnat-up.test/",
        "lo-name": "https://lo-up.test:8443/",
    }
    LITERAL = {
        "lo-literal": ("https://127.0.0.1:8443/", False),
        "lo6-literal": ("https://[::1]:8443/", False),
        "mapped-literal": ("https://[::ffff:10.0.0.1]/", False),
        "meta-literal": ("https://169.254.169.254/", False),
        "loop-literal": ("http://127.0.0.1:8090/", True),
    }

    @classmethod
    def build(cls):
        h, t = cls.h, cls.h.topo
        cert, key = h.ca.issue("model-up", ["DNS:model-up.test",
                                            "IP:" + t.v4(2),
                                            "IP:" + t.v6(2)])
        cls.up = h.fakeup("main", ["%s:443" % t.v4(2),
                                   "[%s]:443" % t.v6(2)], cert, key)
        h.dns_server({
            "model-up.test": {"A": [t.v4(2)]},
            "private-up.test": {"A": ["10.0.0.1"]},
            "meta-up.test": {"A": ["169.254.169.254"]},
            "cgnat-up.test": {"A": ["100.64.0.1"]},
            "lo-up.test": {"A": ["127.0.0.1"]},
            "loop-up.test": {"A": ["127.0.0.1"]},
        })
        cls.routes = [pol.route("model", ["model.test"],
                                "https://model-up.test/base", h.ca.cert)]
        routes = list(cls.routes)
        for aud, url in cls.NAMED.items():
            routes.append(pol.route(aud, [aud + ".test"], url, h.ca.cert))
        # Loop guard: even with allow_private, never our own listeners.
        for aud, port in (("loop", 8080), ("loopfwd", 3128)):
            routes.append(pol.route(aud, [aud + ".test"],
                                    "http://loop-up.test:%d/" % port,
                                    allow_private=True,
                                    allow_plaintext=True))
        cls.listeners = [pol.forward("fwd", "127.0.0.1:3128"),
                         pol.reverse("rev", "127.0.0.1:8080", "model")]
        cls.sl = h.sluice("main", h.policy("main", cls.listeners, routes))

    def fwd(self, aud, port=3128):
        tok = self.h.token(aud)
        with self.h.raw(port) as c:
            return c.request(build_request(
                "POST", "http://%s.test/v1/messages" % aud, aud + ".test",
                ["Proxy-Authorization: Bearer " + tok], b"{}"), timeout=8)

    def test_control_allowed(self):
        r = self.fwd("model")
        self.assertEqual(r.status, 200, r)

    def test_private_upstreams_by_name_denied(self):
        for aud in self.NAMED:
            with self.subTest(route=aud):
                m = self.up.log.mark()
                self.assertDenied(self.fwd(aud), 403, "destination_denied")
                self.assertNothingUpstream(self.up, m)

    def test_loop_guard(self):
        for aud in ("loop", "loopfwd"):
            with self.subTest(route=aud):
                self.assertDenied(self.fwd(aud), 403, "destination_denied")

    def test_connect_to_private_upstream_denied(self):
        tok = self.h.token("lo-name")
        with self.h.raw(3128) as c:
            r = c.request(("CONNECT lo-up.test:8443 HTTP/1.1\r\n"
                           "Host: lo-up.test:8443\r\n"
                           "Proxy-Authorization: Bearer %s\r\n\r\n" %
                           tok).encode(), method="CONNECT")
        self.assertDenied(r, 403, "destination_denied")

    def test_private_literal_refused_at_start_or_per_request(self):
        for n, (aud, (url, private_ok)) in enumerate(self.LITERAL.items()):
            with self.subTest(route=aud):
                name = "lit%d" % n
                routes = self.routes + [pol.route(
                    aud, [aud + ".test"], url,
                    None if url.startswith("http:") else self.h.ca.cert,
                    allow_private=private_ok, allow_plaintext=private_ok)]
                # Other ports, so that this instance and the main one
                # can run side by side.
                listeners = [pol.forward("fwd", "127.0.0.1:3129"),
                             pol.reverse("rev", "127.0.0.1:8090", "model")]
                if aud == "loop-literal":
                    # This instance's own reverse listener.
                    routes[-1]["upstream"]["url"] = "http://127.0.0.1:8090/"
                doc = self.h.policy(name, listeners, routes)
                path = self.h.write_policy(name, doc)
                chk = st.run(st.ns_exec(self.h.sbx, [st.ENV.bin, "check",
                                                     "-c", path]),
                             check=False)
                if chk.returncode != 0:
                    self.assertEqual(chk.returncode, 1, chk.stderr)
                    self.assertIn("routes[1]", chk.stderr)
                    self.assertIn("upstream.url", chk.stderr)
                    continue
                s = self.h.sluice(name, doc)
                try:
                    self.assertDenied(self.fwd(aud, 3129), 403,
                                      "destination_denied")
                finally:
                    s.stop()


if __name__ == "__main__":
    st.main()
