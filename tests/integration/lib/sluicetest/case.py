"""The per-file harness (namespaces, certificates, DNS, fakeup, sluice)
and a unittest base class with the assertions the proxy tests share."""

import json
import os
import sys
import time
import unittest

from . import policy as pol
from .base import (CLEANUP, ENV, install_handlers, make_tmpdir,
                   require_root, sweep_stale_netns, wait_until)
from .daemons import Fakeup, Sluice
from .dnsd import DnsServer
from .http import RawClient, curl, curl_stream
from .netns import Topology
from .pki import CA
from .tokens import MINTED_BY, mint, write_secret


class Harness:
    """Everything one test file needs, torn down by close()."""

    def __init__(self, tag, x, up_hosts=(2, 3, 53), up_hosts6=(2,)):
        self.tag = tag
        self.tmp = make_tmpdir(tag)
        self.topo = Topology(x, up_hosts=up_hosts, up_hosts6=up_hosts6)
        self.sbx = self.topo.sbx.name
        self.up = self.topo.up.name
        self.key_file = write_secret(os.path.join(self.tmp, "run-token.key"))
        self.ca = CA(self.tmp, "good")
        self.sluices = []
        self.fakeups = []
        self.dns = None
        self._closed = False
        CLEANUP.push(self.close)

    # -- components ----------------------------------------------------

    def dns_server(self, records, host=53):
        self.dns = DnsServer(self.up, self.topo.v4(host), records)
        return self.dns

    @property
    def resolvers(self):
        return [self.topo.v4(53)]

    def fakeup(self, name, listens, cert=None, key=None):
        f = Fakeup(self.up, listens, name, self.tmp, cert=cert, key=key)
        self.fakeups.append(f)
        return f

    def policy(self, name, listeners, routes, limits=None):
        return pol.policy(os.path.join(self.tmp, name), self.key_file,
                          listeners, routes, self.resolvers, limits)

    def write_policy(self, name, doc):
        d = os.path.join(self.tmp, name)
        os.makedirs(d, mode=0o700, exist_ok=True)
        return pol.write(os.path.join(d, "policy.json"), doc)

    def sluice(self, name, doc, wait=True, env=None):
        """Write doc as <tmp>/<name>/policy.json and start sluice on it
        (env: its whole environment, when given)."""
        path = self.write_policy(name, doc)
        s = Sluice(self.sbx, path, "sluice-" + name, self.tmp, env=env)
        s.expected_exit = None  # set by tests that stop it on purpose
        self.sluices.append(s)
        if wait:
            s.wait_ready()
        return s

    def secret_value(self, name, value):
        return pol.write_secret_value(os.path.join(self.tmp, name), value)

    def token(self, aud, **kw):
        return mint(self.key_file, aud, **kw)

    # -- clients -------------------------------------------------------

    def raw(self, port, host="127.0.0.1", timeout=5.0):
        return RawClient(self.sbx, host, port, timeout=timeout)

    def curl(self, args, urls, timeout=20):
        return curl(self.sbx, args, urls, self.tmp, timeout=timeout)

    def curl_stream(self, args, url, timeout=20):
        return curl_stream(self.sbx, args, url, timeout=timeout)

    # -- teardown ------------------------------------------------------

    def close(self):
        """Stop every process; returns the problems found (sanitizer
        reports, a sluice that crashed or did not stop on SIGTERM)."""
        if self._closed:
            return []
        self._closed = True
        problems = []
        for s in self.sluices:
            early = s.poll()
            if early is not None and not s.stopped and \
                    s.expected_exit is None:
                problems.append("%s exited on its own with %s" % (
                    s.name, early))
            stopped_before = s.stopped
            rc = s.stop()
            if early is None and rc != 0 and not stopped_before:
                problems.append("%s: exit %s after SIGTERM (want 0)" % (
                    s.name, rc))
            rep = s.sanitizer_report()
            if rep:
                problems.append("%s stderr shows a sanitizer report:\n%s" % (
                    s.name, rep))
        for f in self.fakeups:
            f.stop()
            rep = f.sanitizer_report()
            if rep:
                problems.append("fakeup %s: sanitizer report:\n%s" % (
                    f.name, rep))
        return problems


def _body_json(r):
    try:
        return json.loads(r.body.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None


class ProxyTestCase(unittest.TestCase):
    """Base class: subclasses implement build(cls) (called once per class,
    with cls.h the Harness) and use the assertions below."""

    TAG = "proxy"
    X = 1
    UP_HOSTS = (2, 3, 53)
    maxDiff = 4000

    @classmethod
    def setUpClass(cls):
        cls.h = Harness(cls.TAG, cls.X, up_hosts=cls.UP_HOSTS)
        try:
            cls.build()
        except BaseException:
            for p in cls.h.close():
                print(p, file=sys.stderr)
            raise

    @classmethod
    def build(cls):
        pass

    @classmethod
    def tearDownClass(cls):
        problems = cls.h.close()
        if problems:
            raise AssertionError("\n".join(problems))

    # -- assertions ----------------------------------------------------

    def assertDenied(self, r, status, reason, auth=None):
        """A denial as DESIGN.md says: status, Sluice-Deny, JSON body, and
        for token failures the challenge header (auth: "proxy"/"www")."""
        self.assertEqual(r.status, status, "status: %r" % (r,))
        self.assertEqual(r.header("Sluice-Deny"), reason,
                         "Sluice-Deny: %r" % (r,))
        self.assertDenialBody(r, reason)
        if isinstance(getattr(r, "reason", None), str):
            self.assertTrue(r.reason.endswith(" (%s)" % reason),
                            "status line reason phrase: %r" % (r,))
        if 400 <= status < 500:
            self.assertEqual(r.header("x-should-retry"), "false",
                             "x-should-retry: %r" % (r,))
        else:
            # A 5xx may be fixed by a retry: no x-should-retry.
            self.assertIsNone(r.header("x-should-retry"),
                              "x-should-retry on a 5xx: %r" % (r,))
        if auth == "proxy":
            v = r.header("Proxy-Authenticate") or ""
            self.assertTrue(v.split(" ")[0].lower() == "bearer",
                            "Proxy-Authenticate: %r" % (r,))
        elif auth == "www":
            v = r.header("WWW-Authenticate") or ""
            self.assertTrue(v.split(" ")[0].lower() == "bearer",
                            "WWW-Authenticate: %r" % (r,))

    def assertDenialBody(self, r, reason):
        """{"error": reason, "message": one sentence, "request_id": id};
        returns the parsed body."""
        b = _body_json(r)
        self.assertIsInstance(b, dict, "body: %r" % (r,))
        self.assertEqual(sorted(b), ["error", "message", "request_id"],
                         "body: %r" % (r,))
        self.assertEqual(b["error"], reason, "body: %r" % (r,))
        self.assertIsInstance(b["message"], str)
        self.assertTrue(b["message"], "empty message: %r" % (r,))
        self.assertIsInstance(b["request_id"], str)
        self.assertRegex(b["request_id"], r"^[0-9a-f]{20}$")
        return b

    def assertNothingUpstream(self, fakeup, mark, what=""):
        """fakeup received no connection and no request since mark."""
        ev = fakeup.log.since(mark, ("accept", "head", "request",
                                     "bad_request"))
        self.assertEqual(ev, [], "upstream received something %s" % what)

    def assertNoCompleteRequest(self, fakeup, mark, timeout=3.0):
        """For a body that goes wrong after its head was forwarded (a
        streaming proxy cannot know earlier): no request reached the
        upstream whole, and every upstream connection that carried the
        partial request is closed, never reused (it is out of step)."""
        time.sleep(0.1)
        self.assertEqual(fakeup.log.since(mark, ("request", "bad_request")),
                         [], "a whole request reached the upstream")
        started = {e["conn"] for e in fakeup.log.since(mark, "head")}

        def all_closed():
            closed = {e["conn"] for e in fakeup.log.since(mark, "close")}
            return started <= closed
        self.assertTrue(wait_until(all_closed, timeout),
                        "upstream connection(s) %r with a partial request "
                        "left open" % sorted(started))

    def assertClosed(self, client, timeout=2.0):
        self.assertTrue(client.closed(timeout),
                        "the connection was left open")


def main():
    """Entry point of a test file: skip (77) without root, run unittest,
    exit 0/1."""
    require_root()
    if not os.access(ENV.bin, os.X_OK):
        print("sluice binary not found at %s (set SLUICE_BIN)" % ENV.bin,
              file=sys.stderr)
        sys.exit(1)
    if not os.access(ENV.fakeup, os.X_OK):
        print("fakeup not found at %s (set SLUICE_TOOLS)" % ENV.fakeup,
              file=sys.stderr)
        sys.exit(1)
    install_handlers()
    sweep_stale_netns()
    prog = unittest.main(verbosity=2, exit=False, argv=sys.argv)
    errors = CLEANUP.run()
    for e in errors:
        print("cleanup: " + e, file=sys.stderr)
    if MINTED_BY:
        print("tokens minted by: %s" % ", ".join(sorted(MINTED_BY)),
              file=sys.stderr)
    sys.exit(0 if prog.result.wasSuccessful() else 1)

