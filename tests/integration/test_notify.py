"""The service manager's notify protocol (docs/deployment.md "systemd"):
with NOTIFY_SOCKET set, `sluice run` sends READY=1 once it is ready,
RELOADING=1 (with MONOTONIC_USEC) before a reload and READY=1 after it,
also after a refused one, STOPPING=1 at SIGTERM, and STATUS= lines
naming the listeners and the policy generation. The test binds a real
AF_UNIX SOCK_DGRAM socket (a path, and an abstract '@' name bound inside
the sandbox namespace, where abstract names live) and reads what arrives.

Topology: netns sbx (sluice) <-veth-> netns up (unused upstream)."""

import os
import signal
import socket
import sys
import time

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "lib"))

import sluicetest as st  # noqa: E402
from sluicetest import policy as pol  # noqa: E402


class TestNotify(st.ProxyTestCase):
    TAG = "ntfy"
    X = 60

    @classmethod
    def build(cls):
        cls.n = 0

    def doc(self, name):
        TestNotify.n += 1
        port = 9200 + TestNotify.n
        routes = [pol.route("model", ["model.test"],
                            "https://%s/base" % self.h.topo.v4(2),
                            self.h.ca.cert)]
        return self.h.policy(name, [pol.reverse(
            "rev", "127.0.0.1:%d" % port, "model")], routes)

    def start(self, name, doc, notify):
        path = self.h.write_policy(name, doc)
        env = dict(os.environ, NOTIFY_SOCKET=notify)
        s = st.Sluice(self.h.sbx, path, "sluice-" + name, self.h.tmp,
                      env=env)
        self.h.sluices.append(s)
        return s, path

    @staticmethod
    def recv(sock, timeout=None):
        """The next datagram as a dict of its KEY=VALUE lines."""
        sock.settimeout(timeout or st.ENV.slow(10))
        data = sock.recv(4096).decode()
        return dict(line.split("=", 1) for line in data.split("\n") if line)

    def drive(self, name, sock, notify):
        doc = self.doc(name)
        s, path = self.start(name, doc, notify)
        m = self.recv(sock)
        self.assertEqual(m.get("READY"), "1", m)
        # Ready means ready: the ready file holds the pid, the line is out.
        with open(doc["ready_file"]) as f:
            self.assertEqual(f.read(), "%d\n" % s.pid)
        s.wait_ready(timeout=2)
        self.assertRegex(m.get("STATUS", ""),
                         r"^serving 1 listener, policy generation 1$")

        # A good reload: RELOADING=1 + MONOTONIC_USEC, then READY=1.
        before = time.clock_gettime(time.CLOCK_MONOTONIC) * 1e6
        s.signal(signal.SIGHUP)
        m = self.recv(sock)
        self.assertEqual(m.get("RELOADING"), "1", m)
        usec = int(m["MONOTONIC_USEC"])
        after = time.clock_gettime(time.CLOCK_MONOTONIC) * 1e6
        self.assertTrue(before - 1e6 <= usec <= after + 1e6, (before, usec))
        m = self.recv(sock)
        self.assertEqual(m.get("READY"), "1", m)
        self.assertIn("policy generation 2", m.get("STATUS", ""))

        # A bad policy: refused, and READY=1 again (the old one serves).
        with open(path, "w") as f:
            f.write("{ not json\n")
        s.signal(signal.SIGHUP)
        m = self.recv(sock)
        self.assertEqual(m.get("RELOADING"), "1", m)
        m = self.recv(sock)
        self.assertEqual(m.get("READY"), "1", m)
        self.assertIn("reload refused", m.get("STATUS", ""))
        self.assertIn("policy generation 2", m.get("STATUS", ""))

        s.signal(signal.SIGTERM)
        m = self.recv(sock)
        self.assertEqual(m.get("STOPPING"), "1", m)
        self.assertEqual(s.wait(st.ENV.slow(10)), 0, s.stderr()[-2000:])
        # Nothing after STOPPING.
        sock.settimeout(0.2)
        with self.assertRaises(socket.timeout):
            sock.recv(4096)

    def test_path_socket(self):
        p = os.path.join(self.h.tmp, "notify.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        st.CLEANUP.push(sock.close)
        sock.bind(p)
        self.drive("path", sock, p)

    def test_abstract_socket(self):
        name = "sluice-test-notify-%d" % os.getpid()
        with st.entered(self.h.sbx):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.bind("\0" + name)
        st.CLEANUP.push(sock.close)
        self.drive("abstract", sock, "@" + name)

    def test_unreachable_socket_does_not_stop_sluice(self):
        # A manager that went away: sluice warns and serves anyway.
        s, _ = self.start("gone", self.doc("gone"),
                          os.path.join(self.h.tmp, "nobody-listens.sock"))
        s.wait_ready()
        self.assertIn("NOTIFY_SOCKET", s.stderr())


if __name__ == "__main__":
    st.main()
