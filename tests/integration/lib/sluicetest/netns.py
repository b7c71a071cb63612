"""Network namespaces for the tests: a sandbox (sbx) and an upstream (up)
namespace joined by a veth pair, with addresses only from 198.18.0.0/15 and
2001:2::/48 (DESIGN.md "Test hosts"). Neither namespace has a default
route, so nothing a test sends can leave the pair.

Sockets can be opened inside a namespace from this process (the
namespace is switched for the calling thread only while the socket is
created; a socket keeps the namespace it was created in).
"""

import contextlib
import ctypes
import itertools
import os

from .base import CLEANUP, run

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
_counter = itertools.count(1)


def _setns(fd):
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        e = ctypes.get_errno()
        raise OSError(e, "setns: " + os.strerror(e))


@contextlib.contextmanager
def entered(ns):
    """Run the body with this thread inside namespace ns."""
    here = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        there = os.open("/var/run/netns/" + ns, os.O_RDONLY)
        try:
            _setns(there)
            try:
                yield
            finally:
                _setns(here)
        finally:
            os.close(there)
    finally:
        os.close(here)


def ns_exec(ns, argv):
    """The argv that runs argv inside namespace ns."""
    return ["ip", "netns", "exec", ns] + list(argv)


class Netns:
    def __init__(self, name):
        self.name = name
        run(["ip", "netns", "add", name])
        CLEANUP.push(self.delete)
        self.ip("link", "set", "lo", "up")

    def ip(self, *args):
        return run(["ip", "-n", self.name] + list(args))

    def exec_argv(self, argv):
        return ns_exec(self.name, argv)

    def delete(self):
        # Processes still inside were started by us; end them by pid so
        # that the namespace really goes away.
        p = run(["ip", "netns", "pids", self.name], check=False)
        for pid in p.stdout.split():
            try:
                os.kill(int(pid), 9)
            except (ProcessLookupError, ValueError):
                pass
        run(["ip", "netns", "del", self.name], check=False)


class Topology:
    """sbx <-veth-> up, on 198.18.<x>.0/24 and 2001:2:0:<x>::/64.

    sbx has .1; up has .2 and any extra host numbers asked for (e.g. .3 for
    a second upstream, .53 for the DNS responder).
    """

    def __init__(self, x, up_hosts=(2,), up_hosts6=(2,)):
        if not 0 <= x <= 255:
            raise ValueError("x must be 0..255")
        self.x = x
        n = next(_counter)
        tag = "slt%dx%d" % (os.getpid(), n)
        self.sbx = Netns(tag + "s")
        self.up = Netns(tag + "u")
        a, b = tag + "a", tag + "b"
        run(["ip", "link", "add", a, "netns", self.sbx.name, "type", "veth",
             "peer", "name", b, "netns", self.up.name])
        self.sbx_if, self.up_if = a, b
        self.sbx.ip("addr", "add", self.v4(1) + "/24", "dev", a)
        self.sbx.ip("addr", "add", self.v6(1) + "/64", "dev", a, "nodad")
        for h in up_hosts:
            self.up.ip("addr", "add", self.v4(h) + "/24", "dev", b)
        for h in up_hosts6:
            self.up.ip("addr", "add", self.v6(h) + "/64", "dev", b, "nodad")
        self.sbx.ip("link", "set", a, "up")
        self.up.ip("link", "set", b, "up")

    def v4(self, host):
        return "198.18.%d.%d" % (self.x, host)

    def v6(self, host):
        return "2001:2:0:%x::%x" % (self.x, host)
