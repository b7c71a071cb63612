"""cmake --install BUILD --prefix TMP makes exactly the tree listed in
tests/deploy/install-tree.txt (files and their modes), the units'
ExecStart names TMP's binary, and that binary runs. A file added to or
dropped from the install rules must be added to or dropped from the
list in the same change."""

import os
import shutil
import stat
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploylib as d  # noqa: E402

LIST = os.path.join(d.SRC, "tests", "deploy", "install-tree.txt")

prefix = os.path.join(d.tmpdir("install"), "prefix")
try:
    r = d.run(["cmake", "--install", d.BUILD, "--prefix", prefix],
              timeout=120)
    if not d.check(r.returncode == 0, "cmake --install: " + r.stderr):
        d.done()
    got = []
    for root, dirs, files in os.walk(prefix):
        for f in files:
            p = os.path.join(root, f)
            mode = stat.S_IMODE(os.lstat(p).st_mode)
            got.append("%04o %s" % (mode, os.path.relpath(p, prefix)))
    got.sort()
    with open(LIST) as f:
        want = sorted(line.strip() for line in f
                      if line.strip() and not line.startswith("#"))
    for line in sorted(set(want) - set(got)):
        d.fail("listed but not installed: " + line)
    for line in sorted(set(got) - set(want)):
        d.fail("installed but not listed in %s: %s" % (
            os.path.relpath(LIST, d.SRC), line))

    sbin = os.path.join(prefix, "sbin", "sluice")
    for u in ("sluice.service", "sluice-user.service"):
        p = os.path.join(prefix, "lib", "systemd", "system", u)
        if os.path.exists(p):
            with open(p) as f:
                text = f.read()
            d.check("ExecStart=%s run -c /etc/sluice/policy.json" % sbin
                    in text, "%s: ExecStart does not name %s" % (u, sbin))
    if os.path.exists(sbin):
        r = d.run([sbin, "--version"])
        d.check(r.returncode == 0 and r.stdout.startswith("sluice "),
                "installed binary: %r" % (r.stdout + r.stderr))
finally:
    shutil.rmtree(os.path.dirname(prefix), ignore_errors=True)
d.done()
