"""The programs under test and their helpers: sluice itself and fakeup
(tests/tools/fakeup.c), each started inside a namespace."""

import json
import os
import signal

from .base import ENV, Proc, wait_until
from .netns import ns_exec


class StartError(Exception):
    pass


class Sluice(Proc):
    """`sluice run -c POLICY` in a namespace; start() returns once the
    line `sluice: ready` is on stderr."""

    def __init__(self, ns, policy_path, name, tmpdir, extra_args=(),
                 env=None):
        self.policy_path = policy_path
        argv = ns_exec(ns, [ENV.bin, "run", "-c", policy_path]
                       + list(extra_args))
        super().__init__(argv, name, tmpdir, env=env)

    def wait_ready(self, timeout=None):
        if timeout is None:
            timeout = ENV.slow(10)

        def ready():
            if "sluice: ready" in self.stderr():
                return True
            if not self.alive():
                raise StartError("sluice exited with %s before ready: %s" % (
                    self.returncode, self.stderr()[-2000:]))
            return False
        if not wait_until(ready, timeout):
            raise StartError("sluice not ready after %.0fs: %s" % (
                timeout, self.stderr()[-2000:]))
        return self

    def reload(self):
        self.signal(signal.SIGHUP)


class FakeupLog:
    """Reads fakeup's JSON lines; a test takes a mark() before acting and
    looks only at the events after it."""

    def __init__(self, path):
        self.path = path

    def events(self):
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return []
        out = []
        for line in data.split(b"\n")[:-1]:  # only complete lines
            out.append(json.loads(line.decode("utf-8", "replace")))
        return out

    def mark(self):
        return len(self.events())

    def since(self, mark, event=None):
        ev = self.events()[mark:]
        if event is not None:
            kinds = (event,) if isinstance(event, str) else tuple(event)
            ev = [e for e in ev if e["event"] in kinds]
        return ev

    def wait_for(self, mark, event, count=1, timeout=5.0):
        got = wait_until(lambda: len(self.since(mark, event)) >= count
                         and self.since(mark, event), timeout)
        return got or self.since(mark, event)


def header_values(req, name):
    """Values of a header in a fakeup request event (case-insensitive)."""
    return [v for n, v in req["headers"] if n.lower() == name.lower()]


class Fakeup(Proc):
    def __init__(self, ns, listens, name, tmpdir, cert=None, key=None):
        self.log = FakeupLog(os.path.join(tmpdir, name + ".jsonl"))
        self.ready_path = os.path.join(tmpdir, name + ".ready")
        argv = [ENV.fakeup]
        for l in listens:
            argv += ["--listen", l]
        if cert:
            argv += ["--cert", cert, "--key", key]
        else:
            argv += ["--plain"]
        self.body_dir = os.path.join(tmpdir, name + "-bodies")
        os.makedirs(self.body_dir, exist_ok=True)
        argv += ["--log", self.log.path, "--ready", self.ready_path,
                 "--body-dir", self.body_dir]
        super().__init__(ns_exec(ns, argv), name, tmpdir)
        ok = wait_until(lambda: os.path.exists(self.ready_path)
                        or not self.alive(), ENV.slow(5))
        if not ok or not self.alive():
            raise StartError("fakeup %s did not start: %s" % (
                name, self.stderr()[-1000:]))
