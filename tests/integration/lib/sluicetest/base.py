"""Environment, clean-up and child processes for the integration tests.

Everything a test creates (network namespaces, processes, temporary
files) is registered with a Cleanup so that it is removed even when a test
fails, raises, or the run is interrupted (atexit plus SIGTERM/SIGINT/SIGHUP
handlers). Processes are ended by PID only: SIGTERM, then SIGKILL.
"""

import atexit
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SKIP = 77  # ctest SKIP_RETURN_CODE

SANITIZER_MARKS = ("AddressSanitizer", "LeakSanitizer", "runtime error:")


class Env:
    """Paths handed over by ctest (tests/CMakeLists.txt)."""

    def __init__(self):
        here = os.path.dirname(os.path.abspath(__file__))
        self.src = os.environ.get(
            "SLUICE_SRC", os.path.abspath(os.path.join(here, "../../../..")))
        build = os.environ.get("SLUICE_BUILD",
                               os.path.join(self.src, "build", "plain"))
        self.bin = os.environ.get("SLUICE_BIN",
                                  os.path.join(build, "proxy", "sluice"))
        self.tools = os.environ.get("SLUICE_TOOLS",
                                    os.path.join(build, "tests"))
        self.sanitize = os.environ.get("SLUICE_SANITIZE", "")
        self.keep = os.environ.get("SLUICE_TEST_KEEP", "") not in ("", "0")

    @property
    def fakeup(self):
        return os.path.join(self.tools, "fakeup")

    def slow(self, seconds):
        """A timeout scaled for sanitizer builds (they run slower)."""
        return seconds * (3 if self.sanitize else 1)


ENV = Env()


def require_root():
    """Exit 77 (skip) unless we can create network namespaces."""
    if os.geteuid() != 0:
        print("skipped: the integration tests need root (netns)",
              file=sys.stderr)
        sys.exit(SKIP)
    for tool in ("ip", "curl", "openssl"):
        if shutil.which(tool) is None:
            print("skipped: %s is not installed" % tool, file=sys.stderr)
            sys.exit(SKIP)


class Cleanup:
    """LIFO list of undo actions, run once (atexit, signal or explicit)."""

    def __init__(self):
        self._actions = []
        self._done = False

    def push(self, fn, *args):
        self._actions.append((fn, args))

    def run(self):
        errors = []
        while self._actions:
            fn, args = self._actions.pop()
            try:
                fn(*args)
            except Exception as e:  # keep going: undo everything we can
                errors.append("%s%r: %s" % (getattr(fn, "__name__", fn),
                                            args, e))
        return errors


CLEANUP = Cleanup()


def _on_signal(signum, frame):
    # Turn the signal into KeyboardInterrupt: unittest records any other
    # exception as a test error and goes on, but lets this one through.
    # finally blocks run on the way out, and atexit undoes the rest.
    raise KeyboardInterrupt("signal %d" % signum)


def install_handlers():
    atexit.register(CLEANUP.run)
    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(s, _on_signal)


def make_tmpdir(tag):
    d = tempfile.mkdtemp(prefix="sluicetest-%s-" % tag)
    os.chmod(d, 0o700)
    if ENV.keep:
        print("keeping %s" % d, file=sys.stderr)
    else:
        CLEANUP.push(shutil.rmtree, d, True)
    return d


def run(argv, check=True, timeout=30, input=None):
    """Run a short command; returns CompletedProcess (text mode)."""
    p = subprocess.run(argv, capture_output=True, text=True,
                       timeout=timeout, input=input)
    if check and p.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(argv),
                                                p.returncode,
                                                p.stderr.strip()))
    return p


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Proc:
    """A child process started by the tests, with stdout/stderr in files.

    The pid is the program's own: `ip netns exec` execs the command in
    place, so signals sent to self.pid reach the program itself.
    """

    def __init__(self, argv, name, tmpdir, env=None):
        self.name = name
        self.argv = argv
        self.out_path = os.path.join(tmpdir, name + ".stdout")
        self.err_path = os.path.join(tmpdir, name + ".stderr")
        self._out = open(self.out_path, "wb")
        self._err = open(self.err_path, "wb")
        self.popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                      stdout=self._out, stderr=self._err,
                                      env=env, start_new_session=True)
        self.pid = self.popen.pid
        self.returncode = None
        self.stopped = False  # stop() was called (by a test or teardown)
        CLEANUP.push(self.stop)

    def poll(self):
        if self.returncode is None:
            self.returncode = self.popen.poll()
        return self.returncode

    def alive(self):
        return self.poll() is None

    def signal(self, sig):
        """Send sig; SIGTERM/SIGINT/SIGKILL count as an intended stop."""
        if sig in (signal.SIGTERM, signal.SIGINT, signal.SIGKILL):
            self.stopped = True
        if self.poll() is None:
            os.kill(self.pid, sig)

    def wait(self, timeout):
        try:
            self.returncode = self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        return self.returncode

    def stop(self, timeout=None):
        """SIGTERM, then SIGKILL after timeout; returns the exit status."""
        if timeout is None:
            timeout = ENV.slow(5)
        self.stopped = True
        if self.poll() is None:
            try:
                os.kill(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            if self.wait(timeout) is None:
                try:
                    os.kill(self.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.wait(10)
        for f in (self._out, self._err):
            if not f.closed:
                f.close()
        return self.returncode

    def stderr(self):
        try:
            with open(self.err_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def sanitizer_report(self):
        """The stderr lines that show a sanitizer finding, if any."""
        text = self.stderr()
        if any(m in text for m in SANITIZER_MARKS):
            return text[-4000:]
        return None


def wait_until(pred, timeout, step=0.02):
    """Poll pred() until it is truthy; returns its value or None."""
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= end:
            return None
        time.sleep(step)


_NS_RE = re.compile(r"^slt(\d+)x\d+[a-z]$")


def sweep_stale_netns():
    """Delete namespaces left by an earlier run of this suite that was
    killed (SIGKILL cannot be caught). Only names of our own pattern whose
    creating pid is gone are touched; processes still inside them were
    started by that run and are ended by pid."""
    p = run(["ip", "netns", "list"], check=False)
    for line in p.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = _NS_RE.match(name)
        if not m or pid_alive(int(m.group(1))):
            continue
        pids = run(["ip", "netns", "pids", name], check=False).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        run(["ip", "netns", "del", name], check=False)
