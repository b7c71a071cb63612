"""deploy/logrotate/sluice, run by the real logrotate (-f, a state file in
the test's directory) against a running sluice's audit log: the file is
renamed, the postrotate SIGUSR1 (pid from ready_file) makes sluice go on
in a new file, the chain continues (seq and prev) across the two files
and `sluice audit verify` passes over both, oldest first.

Topology: netns sbx (sluice, curl) <-veth-> netns up (fakeup on
198.18.62.2:443)."""

import glob
import json
import os
import shutil
import sys

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "lib"))

import sluicetest as st  # noqa: E402
from sluicetest import policy as pol  # noqa: E402

STANZA = os.path.join(st.ENV.src, "deploy", "logrotate", "sluice")


def lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


class TestDeployLogrotate(st.ProxyTestCase):
    TAG = "lrot"
    X = 62

    @classmethod
    def build(cls):
        h, t = cls.h, cls.h.topo
        cert, key = h.ca.issue("model-up", ["IP:" + t.v4(2)])
        cls.up = h.fakeup("main", ["%s:443" % t.v4(2)], cert, key)
        cls.tok = h.token("model")

    def request(self):
        r = self.h.curl(["-X", "POST", "-H", "Authorization: Bearer " +
                         self.tok, "-d", "{}"],
                        "http://127.0.0.1:9300/v1/messages")
        self.assertEqual(r.status, 200, r.stderr)

    def test_rotation_keeps_the_chain(self):
        if shutil.which("logrotate") is None:
            self.skipTest("logrotate missing (scripts/deps)")
        h = self.h
        doc = h.policy("rot", [pol.reverse("rev", "127.0.0.1:9300", "model")],
                       [pol.route("model", ["model.test"],
                                  "https://%s/base" % h.topo.v4(2),
                                  h.ca.cert)])
        s = h.sluice("rot", doc)
        log = doc["audit"]["path"]
        for _ in range(3):
            self.request()

        # The shipped stanza, pointed at this log and this ready file.
        with open(STANZA) as f:
            text = f.read()
        self.assertIn("/var/log/sluice/audit.jsonl {", text)
        self.assertIn("/run/sluice/ready", text)
        self.assertNotIn("\tcopytruncate", text)
        text = text.replace("/var/log/sluice/audit.jsonl", log)
        text = text.replace("/run/sluice/ready", doc["ready_file"])
        conf = os.path.join(h.tmp, "logrotate.conf")
        with open(conf, "w") as f:
            f.write(text)
        os.chmod(conf, 0o644)
        state = os.path.join(h.tmp, "logrotate.state")
        r = st.run(["logrotate", "-f", "-s", state, conf], check=False)
        self.assertEqual(r.returncode, 0, r.stderr)
        rotated = sorted(glob.glob(log + "-*"))
        self.assertEqual(len(rotated), 1, rotated)
        self.assertFalse(rotated[0].endswith(".gz"))  # delaycompress

        # sluice made the new file on SIGUSR1; new lines go there.
        self.assertTrue(st.wait_until(lambda: os.path.exists(log), 5),
                        "no new audit file after the postrotate SIGUSR1")
        for _ in range(2):
            self.request()
        self.assertEqual(s.stop(), 0, s.stderr()[-2000:])
        old, new = lines(rotated[0]), lines(log)
        self.assertGreaterEqual(len(old), 4)
        self.assertGreaterEqual(len(new), 3)
        self.assertEqual(new[0]["seq"], old[-1]["seq"] + 1)
        self.assertEqual(os.stat(log).st_mode & 0o777, 0o640)
        r = st.run([st.ENV.bin, "audit", "verify", rotated[0], log],
                   check=False)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("ok: 2 file(s)", r.stdout)
        # Out of order, the chain does not fit.
        r = st.run([st.ENV.bin, "audit", "verify", log, rotated[0]],
                   check=False)
        self.assertEqual(r.returncode, 1, r.stdout)


if __name__ == "__main__":
    st.main()
