"""The daemon and its policy file (DESIGN.md "Command line", "Policy
file"): unlink_after_read key files are removed only by a `sluice run`
that has its whole policy loaded (never by check, token verify, netpolicy,
or a run that fails); the ready file goes when sluice exits; in sidecar
mode check and run warn about listener ports any uid may bind (at or above
the namespace's net.ipv4.ip_unprivileged_port_start); a reload is
all-or-nothing (a refused netpolicy part leaves the old audit settings).

Topology: netns sbx (sluice, curl) <-veth-> netns up (fakeup on
198.18.48.2:443, DNS on .53)."""

import itertools
import json
import os
import shutil
import signal
import sys
import time

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "lib"))

import sluicetest as st  # noqa: E402
from sluicetest import policy as pol  # noqa: E402
from sluicetest.http import build_request  # noqa: E402

_n = itertools.count(0)
UNPRIV = "net.ipv4.ip_unprivileged_port_start"


class TestDaemonConfig(st.ProxyTestCase):
    TAG = "dcfg"
    X = 48

    @classmethod
    def build(cls):
        h, t = cls.h, cls.h.topo
        cert, key = h.ca.issue("model-up", ["IP:" + t.v4(2)])
        cls.up = h.fakeup("main", ["%s:443" % t.v4(2)], cert, key)
        h.dns_server({})
        cls.tok = h.token("model")
        # A namespace of its own for the netpolicy subcommands.
        cls.npns = st.Netns("slt%dx%ds" % (os.getpid(), 900))

    # -- helpers -----------------------------------------------------------

    def doc(self, name, listeners=None, port=None):
        port = port or 9100 + next(_n)
        routes = [pol.route("model", ["model.test"],
                            "https://%s/base" % self.h.topo.v4(2),
                            self.h.ca.cert)]
        if listeners is None:
            listeners = [pol.reverse("rev", "127.0.0.1:%d" % port, "model")]
        return self.h.policy(name, listeners, routes)

    def sidecar(self, doc):
        doc["user"] = "nobody"
        doc["netpolicy"]["mode"] = "sidecar"
        return doc

    def unlink_key(self, doc, name):
        """Give doc a copy of the token key marked unlink_after_read."""
        path = os.path.join(self.h.tmp, name + ".key")
        shutil.copyfile(self.h.key_file, path)
        os.chmod(path, 0o600)
        doc["tokens"]["keys"][0]["secret_file"] = path
        doc["tokens"]["keys"][0]["unlink_after_read"] = True
        return path

    def sluice_cmd(self, args, ns=None):
        argv = [st.ENV.bin] + list(args)
        if ns is not None:
            argv = st.ns_exec(ns, argv)
        return st.run(argv, check=False, timeout=30)

    def start_run(self, name, path, extra=(), ns=None):
        argv = [st.ENV.bin, "run", "-c", path] + list(extra)
        if ns is not None:
            argv = st.ns_exec(ns, argv)
        return st.Proc(argv, "sluice-" + name, self.h.tmp)

    def wait_ready(self, p):
        ok = st.wait_until(lambda: "sluice: ready" in p.stderr() or
                           not p.alive(), st.ENV.slow(10))
        self.assertTrue(ok and p.alive(), p.stderr()[-2000:])

    def set_unpriv(self, ns, value):
        st.run(st.ns_exec(ns, ["sysctl", "-qw", "%s=%d" % (UNPRIV, value)]))

    @staticmethod
    def port_warnings(text):
        return [l for l in text.splitlines()
                if "warning" in l and "ip_unprivileged_port_start" in l]

    # -- 6: unlink_after_read ----------------------------------------------

    def test_unlink_only_by_a_run_that_loaded(self):
        doc = self.doc("unl")
        key = self.unlink_key(doc, "unl")
        path = self.h.write_policy("unl", doc)

        r = self.sluice_cmd(["check", "-c", path])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.exists(key), "sluice check removed the key")

        r = self.sluice_cmd(["token", "verify", "-c", path, self.tok])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.exists(key), "token verify removed the key")
        r = self.sluice_cmd(["token", "verify", "-c", path, "a.b.c"])
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertTrue(os.path.exists(key), "token verify removed the key")

        sdoc = self.sidecar(self.doc("unl-np"))
        sdoc["tokens"]["keys"][0]["secret_file"] = key
        sdoc["tokens"]["keys"][0]["unlink_after_read"] = True
        spath = self.h.write_policy("unl-np", sdoc)
        for sub in ("show", "verify", "apply", "verify", "flush"):
            args = ["netpolicy", sub, "-c", spath]
            if sub != "show":
                args += ["--netns", self.npns.name]
            r = self.sluice_cmd(args)
            if sub in ("show", "apply", "flush"):
                self.assertEqual(r.returncode, 0, "%s: %s" % (sub, r.stderr))
            self.assertTrue(os.path.exists(key),
                            "netpolicy %s removed the key" % sub)

        # A run whose policy then fails to load keeps the file.
        bad = json.loads(json.dumps(doc))
        bad["tokens"]["revoked_file"] = os.path.join(self.h.tmp, "nope.txt")
        bpath = self.h.write_policy("unl-bad", bad)
        r = self.sluice_cmd(["run", "-c", bpath], ns=self.h.sbx)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("revoked_file", r.stderr)
        self.assertTrue(os.path.exists(key), "a failed run removed the key")

        # So does a run that cannot start (an address it cannot bind).
        nobind = json.loads(json.dumps(doc))
        nobind["listeners"][0]["listen"] = "%s:3128" % self.h.topo.v4(77)
        npath = self.h.write_policy("unl-nobind", nobind)
        r = self.sluice_cmd(["run", "-c", npath], ns=self.h.sbx)
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertTrue(os.path.exists(key), "a failed run removed the key")

        # A run that started removes it, and serves with the key.
        p = self.start_run("unl", path, ns=self.h.sbx)
        self.wait_ready(p)
        self.assertFalse(os.path.exists(key), "sluice run kept the key")
        port = int(doc["listeners"][0]["listen"].rsplit(":", 1)[1])
        with self.h.raw(port) as c:
            resp = c.request(build_request(
                "POST", "/v1/messages", "127.0.0.1:%d" % port,
                ["Authorization: Bearer " + self.tok], b"{}"))
        self.assertEqual(resp.status, 200, resp)
        self.assertEqual(p.stop(), 0, p.stderr()[-1000:])

    # -- 11: the ready file ------------------------------------------------

    def test_ready_file_removed_on_sigterm_and_sigint(self):
        for sig in (signal.SIGTERM, signal.SIGINT):
            with self.subTest(sig=sig):
                doc = self.doc("ready-%d" % sig)
                sl = self.h.sluice("ready-%d" % sig, doc)
                ready = doc["ready_file"]
                with open(ready) as f:
                    self.assertEqual(f.read().strip(), str(sl.pid))
                sl.signal(sig)
                self.assertEqual(sl.wait(10), 0, sl.stderr()[-1000:])
                self.assertFalse(os.path.exists(ready),
                                 "the ready file survived exit")

    def test_ready_file_after_privilege_drop(self):
        # As `user`, the (root's) directory may not let sluice unlink:
        # the file must at least no longer name the dead pid.
        doc = self.sidecar(self.doc("ready-user"))
        path = self.h.write_policy("ready-user", doc)
        p = self.start_run("ready-user", path, ["--no-netpolicy"],
                           ns=self.h.sbx)
        self.wait_ready(p)
        ready = doc["ready_file"]
        with open(ready) as f:
            self.assertEqual(f.read().strip(), str(p.pid))
        p.signal(signal.SIGTERM)
        self.assertEqual(p.wait(10), 0, p.stderr()[-1000:])
        if os.path.exists(ready):
            with open(ready) as f:
                self.assertEqual(f.read(), "", "the ready file still "
                                 "names the dead pid")

    # -- 7: an all-or-nothing reload ---------------------------------------

    def nobody_dir(self):
        """A directory sluice's user (nobody) may read and write: a reload
        runs after the privilege drop."""
        import pwd
        import tempfile
        pw = pwd.getpwnam("nobody")
        d = tempfile.mkdtemp(prefix="sluicetest-dcfg-nobody-")
        st.CLEANUP.push(shutil.rmtree, d, True)
        os.chown(d, pw.pw_uid, pw.pw_gid)
        return d, pw.pw_uid, pw.pw_gid

    def audit_lines(self, path):
        try:
            with open(path, "rb") as f:
                return [json.loads(x) for x in f.read().split(b"\n") if x]
        except FileNotFoundError:
            return []

    def test_reload_refused_by_netpolicy_keeps_old_audit(self):
        d, uid, gid = self.nobody_dir()

        def own(path):
            os.chown(path, uid, gid)
            return path
        key = own(shutil.copyfile(self.h.key_file, os.path.join(d, "k")))
        os.chmod(key, 0o600)
        ca = own(shutil.copyfile(self.h.ca.cert, os.path.join(d, "ca.pem")))
        port = 9100 + next(_n)
        doc = self.sidecar(self.doc("reload-np", port=port))
        doc["tokens"]["keys"][0]["secret_file"] = key
        doc["tokens"]["revoked_file"] = own(
            shutil.copyfile(doc["tokens"]["revoked_file"],
                            os.path.join(d, "revoked.txt")))
        doc["routes"][0]["upstream"]["ca_file"] = ca
        a_path = os.path.join(d, "audit-a.jsonl")
        b_path = os.path.join(d, "audit-b.jsonl")
        doc["audit"]["path"] = a_path
        doc["netpolicy"].update({"table": "sluice_t48", "log_group": 48,
                                 "flush_on_exit": True})
        ppath = own(pol.write(os.path.join(d, "policy.json"), doc))
        sl = st.Sluice(self.h.sbx, ppath, "sluice-reload-np", self.h.tmp)
        sl.wait_ready()

        def post():
            with self.h.raw(port) as c:
                return c.request(build_request(
                    "POST", "/v1/messages", "127.0.0.1:%d" % port,
                    ["Authorization: Bearer " + self.tok], b"{}"))

        def requests_in(path):
            return [e for e in self.audit_lines(path)
                    if e.get("event") == "http.request"]
        self.assertEqual(post().status, 200)
        self.assertTrue(st.wait_until(lambda: requests_in(a_path), 5))

        # A new audit path and fsync, and a table that cannot change at
        # reload: the whole reload is refused, the audit part included.
        bad = json.loads(json.dumps(doc))
        bad["audit"].update({"path": b_path, "fsync": "always"})
        bad["netpolicy"]["table"] = "sluice_t48b"
        own(pol.write(ppath, bad))
        sl.reload()
        self.assertTrue(st.wait_until(
            lambda: [e for e in self.audit_lines(a_path)
                     if e.get("event") == "policy.reload_failed"], 5),
            "no policy.reload_failed in the old audit log: %s" %
            sl.stderr()[-1000:])
        failed = [e for e in self.audit_lines(a_path)
                  if e.get("event") == "policy.reload_failed"][-1]
        self.assertIn("netpolicy", json.dumps(failed))
        n = len(requests_in(a_path))
        self.assertEqual(post().status, 200)
        self.assertTrue(st.wait_until(lambda: len(requests_in(a_path)) > n,
                                      5), "the old audit path stopped "
                        "receiving lines")
        self.assertEqual(self.audit_lines(b_path), [],
                         "the refused reload's audit path got lines")

        # The same audit change alone is taken, all of it.
        good = json.loads(json.dumps(bad))
        good["netpolicy"]["table"] = "sluice_t48"
        own(pol.write(ppath, good))
        sl.reload()
        self.assertTrue(st.wait_until(
            lambda: [e for e in self.audit_lines(b_path)
                     if e.get("event") == "policy.reload"], 5),
            "the good reload did not switch the audit log: %s" %
            sl.stderr()[-1000:])
        self.assertEqual(post().status, 200)
        self.assertTrue(st.wait_until(lambda: requests_in(b_path), 5))
        self.assertEqual(sl.stop(), 0, sl.stderr()[-1000:])

    # -- G: ports any uid may bind -----------------------------------------

    def test_unprivileged_port_warning(self):
        ns = self.h.sbx
        self.set_unpriv(ns, 3000)
        try:
            high = self.sidecar(self.doc("ports-high", [
                pol.forward("fwd", "127.0.0.1:3128"),
                pol.reverse("rev", "127.0.0.1:2999", "model")]))
            low = self.sidecar(self.doc("ports-low", [
                pol.forward("fwd", "127.0.0.1:1080"),
                pol.reverse("rev", "127.0.0.1:80", "model")]))
            off = self.doc("ports-off", [pol.forward("fwd",
                                                     "127.0.0.1:3128")])
            hpath = self.h.write_policy("ports-high", high)
            lpath = self.h.write_policy("ports-low", low)
            opath = self.h.write_policy("ports-off", off)

            r = self.sluice_cmd(["check", "-c", hpath], ns=ns)
            self.assertEqual(r.returncode, 0, r.stderr)
            w = self.port_warnings(r.stderr)
            self.assertEqual(len(w), 1, r.stderr)
            self.assertIn('"fwd"', w[0])
            self.assertIn("3128", w[0])
            self.assertIn("(3000)", w[0])
            r = self.sluice_cmd(["check", "-c", lpath], ns=ns)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(self.port_warnings(r.stderr), [], r.stderr)
            # Only sidecar mode shares the namespace with the sandbox.
            r = self.sluice_cmd(["check", "-c", opath], ns=ns)
            self.assertEqual(self.port_warnings(r.stderr), [], r.stderr)

            # run --netns reads the target namespace's boundary (3000),
            # not the one it was started in.
            p = self.start_run("ports-high", hpath,
                               ["--netns", ns, "--no-netpolicy"])
            self.wait_ready(p)
            w = self.port_warnings(p.stderr())
            self.assertEqual(len(w), 1, p.stderr())
            self.assertIn('"fwd"', w[0])
            self.assertIn("3128", w[0])
            self.assertEqual(p.stop(), 0, p.stderr()[-1000:])
            p = self.start_run("ports-low", lpath,
                               ["--netns", ns, "--no-netpolicy"])
            self.wait_ready(p)
            self.assertEqual(self.port_warnings(p.stderr()), [], p.stderr())
            self.assertEqual(p.stop(), 0, p.stderr()[-1000:])

            # A lower boundary makes the low ports count too.
            self.set_unpriv(ns, 80)
            r = self.sluice_cmd(["check", "-c", lpath], ns=ns)
            w = self.port_warnings(r.stderr)
            self.assertEqual(len(w), 2, r.stderr)
            self.assertTrue(any('"rev"' in l and "port 80 " in l
                                for l in w), w)
        finally:
            self.set_unpriv(ns, 1024)

    def test_loopback_resolver_warning(self):
        # A loopback resolver's answers pass the kernel rules from port 53
        # (docs/netpolicy.md): only that port's privilege keeps another
        # process from answering in its place.
        ns = self.h.sbx
        doc = self.sidecar(self.doc("lores"))
        doc["netpolicy"]["resolvers"] = ["127.0.0.11", "198.18.0.53"]
        path = self.h.write_policy("lores", doc)

        def warnings():
            r = self.sluice_cmd(["check", "-c", path], ns=ns)
            self.assertEqual(r.returncode, 0, r.stderr)
            return [l for l in r.stderr.splitlines()
                    if "warning" in l and "resolvers" in l]
        self.assertEqual(warnings(), [])
        self.set_unpriv(ns, 0)
        try:
            w = warnings()
            self.assertEqual(len(w), 1, w)
            self.assertIn("netpolicy.resolvers[0] 127.0.0.11", w[0])
        finally:
            self.set_unpriv(ns, 1024)


if __name__ == "__main__":
    st.main()
