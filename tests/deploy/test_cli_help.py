"""Every command answers -h and --help (after the command and after each
of its verbs) and `sluice help CMD` with the same usage on stdout,
nothing on stderr, exit 0; one style: "usage: sluice CMD ..." then
aligned "       sluice CMD ..." lines. `sluice help` lists them all; a
help for an unknown command is a usage error (2, on stderr)."""

import os
import re
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploylib as d  # noqa: E402

r = d.run([d.BIN, "help"])
d.check(r.returncode == 0 and r.stderr == "", "sluice help: %r" % (r,))
lines = r.stdout.splitlines()
d.check(lines and lines[0].startswith("usage: sluice "), "help: %r" % lines)
for line in lines[1:]:
    d.check(line.startswith("       sluice "), "help line style: %r" % line)
cmds, verbs = [], {}
for line in lines:
    m = re.match(r"(?:usage:|\s+) sluice ([a-z]+)(?: ([a-z|]+)(?=\s|$))?",
                 line)
    if not m:
        continue
    c = m.group(1)
    if c not in cmds:
        cmds.append(c)
    if m.group(2):
        verbs.setdefault(c, []).extend(m.group(2).split("|"))
for want in ("run", "check", "netpolicy", "token", "audit", "help"):
    d.check(want in cmds, "sluice help does not list %s" % want)
d.check(verbs.get("token") == ["mint", "verify"], "token verbs: %r" % verbs)

for c in cmds:
    if c == "help":
        continue
    ref = d.run([d.BIN, "help", c])
    if not d.check(ref.returncode == 0 and ref.stderr == "" and
                   ref.stdout.startswith("usage: sluice %s" % c),
                   "sluice help %s: %r" % (c, ref)):
        continue
    for line in ref.stdout.splitlines()[1:]:
        d.check(line.startswith("       sluice %s" % c),
                "help %s line style: %r" % (c, line))
    forms = [[c, "-h"], [c, "--help"]]
    for v in verbs.get(c, []):
        forms += [[c, v, "-h"], [c, v, "--help"]]
    for argv in forms:
        r = d.run([d.BIN] + argv)
        d.check((r.returncode, r.stdout, r.stderr) == (0, ref.stdout, ""),
                "sluice %s: rc %d, stdout %r, stderr %r" % (
                    " ".join(argv), r.returncode, r.stdout, r.stderr))

r = d.run([d.BIN, "help", "no-such-command"])
d.check(r.returncode == 2 and r.stdout == "" and "no-such-command" in
        r.stderr, "help of an unknown command: %r" % (r,))
r = d.run([d.BIN, "--help"])
d.check(r.returncode == 0 and r.stdout == lines and False or
        r.stdout.splitlines() == lines, "sluice --help differs from help")
d.done()
