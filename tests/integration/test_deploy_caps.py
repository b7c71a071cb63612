"""sluice starts with exactly the capabilities deploy/kubernetes/
sidecar-pod.yaml grants its container (docs/deployment.md): root with
the bounding set cut to that list and no inheritable or ambient
capabilities (what a container runtime gives "drop: ALL, add: [...]"),
emulated with setpriv. In sidecar mode with a user it applies the rules,
binds 127.0.0.1:80, makes state_dir and the audit log the user's and
reaches "ready"; then again on the files the first run left (owned by
the user, which root without CAP_DAC_OVERRIDE cannot open), and it
answers a request both times.

Topology: netns sbx (sluice, curl) <-veth-> netns up (fakeup on
198.18.61.2:443)."""

import json
import os
import pwd
import shutil
import sys

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "lib"))

import sluicetest as st  # noqa: E402
from sluicetest import policy as pol  # noqa: E402

try:
    import yaml
except ImportError:  # python3-yaml (scripts/deps)
    yaml = None

MANIFEST = os.path.join(st.ENV.src, "deploy", "kubernetes",
                        "sidecar-pod.yaml")


def manifest_caps():
    with open(MANIFEST) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    pod = [d for d in docs if d["kind"] == "Pod"][0]
    c = [c for c in pod["spec"]["initContainers"] if c["name"] == "sluice"][0]
    caps = c["securityContext"]["capabilities"]
    assert caps["drop"] == ["ALL"], caps
    return [a.lower() for a in caps["add"]]


def unit_caps(unit):
    """AmbientCapabilities= of a deploy/systemd unit, as setpriv names."""
    path = os.path.join(st.ENV.src, "deploy", "systemd", unit)
    with open(path) as f:
        for line in f:
            if line.startswith("AmbientCapabilities="):
                return [c.strip().lower().replace("cap_", "", 1)
                        for c in line.split("=", 1)[1].split()]
    return []


class CappedSluice(st.Sluice):
    """sluice run under setpriv: bounding set = caps, nothing inherited;
    with user, as that user from the start with caps ambient (what
    systemd gives User= with AmbientCapabilities=)."""

    def __init__(self, ns, path, name, tmpdir, caps, user=None):
        self.policy_path = path
        bset = "-all," + ",".join("+" + c for c in caps)
        pre = ["setpriv", "--inh-caps=-all", "--ambient-caps=-all"]
        if user is not None:
            plus = ",".join("+" + c for c in caps)
            pre = ["setpriv", "--reuid=%d" % user[0], "--regid=%d" % user[1],
                   "--init-groups", "--inh-caps=-all," + plus,
                   "--ambient-caps=-all," + plus]
        argv = st.ns_exec(ns, pre + [
            "--bounding-set=" + bset, st.ENV.bin, "run", "-c", path])
        st.Proc.__init__(self, argv, name, tmpdir)
        self.expected_exit = None


class TestDeployCaps(st.ProxyTestCase):
    TAG = "dcap"
    X = 61

    @classmethod
    def build(cls):
        h, t = cls.h, cls.h.topo
        cert, key = h.ca.issue("model-up", ["IP:" + t.v4(2)])
        cls.up = h.fakeup("main", ["%s:443" % t.v4(2)], cert, key)
        cls.tok = h.token("model")

    def test_manifest_capabilities_reach_ready(self):
        if yaml is None:
            self.skipTest("python3-yaml missing")
        caps = manifest_caps()
        self.assertIn("net_admin", caps)
        self.assertNotIn("dac_override", caps)
        self.assertNotIn("dac_read_search", caps)
        self.assertNotIn("fowner", caps)
        h = self.h
        nobody = pwd.getpwnam("nobody")
        # Directories as on the pod's volumes: the user must traverse to
        # state_dir (sluice makes it); the audit directory is the user's.
        base = os.path.join(h.tmp, "caps")
        os.makedirs(base, exist_ok=True)
        for d in (h.tmp, base):
            os.chmod(d, 0o711)
        logdir = os.path.join(base, "log")
        os.makedirs(logdir, exist_ok=True)
        os.chown(logdir, nobody.pw_uid, nobody.pw_gid)
        os.chmod(logdir, 0o700)
        doc = h.policy("caps", [pol.reverse("rev", "127.0.0.1:80", "model")],
                       [pol.route("model", ["model.test"],
                                  "https://%s/base" % h.topo.v4(2),
                                  h.ca.cert)])
        doc["user"] = "nobody"
        doc["netpolicy"]["mode"] = "sidecar"
        doc["state_dir"] = os.path.join(base, "state")
        doc["audit"]["path"] = os.path.join(logdir, "audit.jsonl")
        path = h.write_policy("caps", doc)
        for run in (1, 2):
            s = CappedSluice(h.sbx, path, "sluice-caps%d" % run, h.tmp, caps)
            h.sluices.append(s)
            s.wait_ready()
            with open("/proc/%d/status" % s.pid) as f:
                status = dict(line.split(":\t", 1) for line in f
                              if ":\t" in line)
            # After the drop: the user, CAP_NET_ADMIN (bit 12) and
            # CAP_SETPCAP (bit 8, to empty the engine's bounding set).
            self.assertEqual(status["Uid"].split()[0], str(nobody.pw_uid))
            self.assertEqual(int(status["CapEff"], 16), (1 << 12) | (1 << 8))
            # The engine, its child, proxies with nothing at all.
            with open("/proc/%d/task/%d/children" % (s.pid, s.pid)) as f:
                kids = [int(p) for p in f.read().split()]
            self.assertEqual(len(kids), 1, kids)
            with open("/proc/%d/status" % kids[0]) as f:
                est = dict(line.split(":\t", 1) for line in f
                           if ":\t" in line)
            self.assertEqual(est["Uid"].split()[0], str(nobody.pw_uid))
            for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
                self.assertEqual(int(est[k], 16), 0, k)
            st_ = os.stat(doc["state_dir"])
            self.assertEqual((st_.st_uid, st_.st_mode & 0o777),
                             (nobody.pw_uid, 0o700))
            for name in ("budget.db",):
                self.assertEqual(os.stat(os.path.join(
                    doc["state_dir"], name)).st_uid, nobody.pw_uid)
            r = h.curl(["-X", "POST", "-H", "Authorization: Bearer " +
                        self.tok, "-d", "{}"],
                       "http://127.0.0.1:80/v1/messages")
            self.assertEqual(r.status, 200, r.stderr)
            self.assertEqual(s.stop(), 0, s.stderr()[-2000:])
        with open(doc["audit"]["path"]) as f:
            events = [json.loads(line)["event"] for line in f]
        self.assertEqual(events.count("daemon.start"), 2, events)
        r = st.run([st.ENV.bin, "audit", "verify", doc["audit"]["path"]],
                   check=False)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_user_unit_capabilities_reach_ready(self):
        # sluice-user.service: User=, the capabilities ambient, no root.
        caps = unit_caps("sluice-user.service")
        self.assertEqual(sorted(caps), ["net_admin", "net_bind_service"])
        h = self.h
        nobody = pwd.getpwnam("nobody")
        base = os.path.join(h.tmp, "unit")
        os.makedirs(base, exist_ok=True)
        os.chmod(h.tmp, 0o711)
        # As systemd's StateDirectory=/LogsDirectory=/RuntimeDirectory=.
        dirs = {}
        for name in ("state", "log", "run", "etc"):
            dirs[name] = os.path.join(base, name)
            os.makedirs(dirs[name], exist_ok=True)
            os.chown(dirs[name], nobody.pw_uid, nobody.pw_gid)
            os.chmod(dirs[name], 0o700)
        key = os.path.join(dirs["etc"], "run-token.key")
        shutil.copyfile(h.key_file, key)
        os.chown(key, nobody.pw_uid, nobody.pw_gid)
        os.chmod(key, 0o600)
        doc = h.policy("unit", [pol.reverse("rev", "127.0.0.1:80", "model")],
                       [pol.route("model", ["model.test"],
                                  "https://%s/base" % h.topo.v4(2),
                                  h.ca.cert)])
        doc["user"] = "nobody"
        doc["netpolicy"]["mode"] = "sidecar"
        doc["tokens"]["keys"][0]["secret_file"] = key
        doc["tokens"].pop("revoked_file", None)
        doc["state_dir"] = dirs["state"]
        doc["audit"]["path"] = os.path.join(dirs["log"], "audit.jsonl")
        doc["ready_file"] = os.path.join(dirs["run"], "ready")
        doc["admin"]["socket"] = os.path.join(dirs["run"], "admin.sock")
        path = os.path.join(dirs["etc"], "policy.json")
        pol.write(path, doc)
        os.chown(path, nobody.pw_uid, nobody.pw_gid)
        s = CappedSluice(h.sbx, path, "sluice-unit", h.tmp, caps,
                         user=(nobody.pw_uid, nobody.pw_gid))
        h.sluices.append(s)
        s.wait_ready()
        r = h.curl(["-X", "POST", "-H", "Authorization: Bearer " + self.tok,
                    "-d", "{}"], "http://127.0.0.1:80/v1/messages")
        self.assertEqual(r.status, 200, r.stderr)
        # The rules are in force: a connection of another uid is dropped.
        r = st.run(st.ns_exec(h.sbx, [
            "setpriv", "--reuid=1000", "--regid=1000", "--clear-groups",
            "curl", "-sSk", "--max-time", "2", "-o", "/dev/null",
            "https://%s/" % h.topo.v4(2)]), check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertEqual(s.stop(), 0, s.stderr()[-2000:])
        self.assertFalse(os.path.exists(doc["ready_file"]))


if __name__ == "__main__":
    st.main()
