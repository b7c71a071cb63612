"""docs/man/sluice.8 and docs/man/sluice.json.5 are lint-clean under
`mandoc -T lint` (warnings and worse; the STYLE level only notes pages
this machine lacks), and complete: sluice.8 names every command, verb
and option `sluice help` lists, every signal and exit code; sluice.json.5
names every policy key of docs/config.md's tables."""

import os
import re
import shutil
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploylib as d  # noqa: E402

if shutil.which("mandoc") is None:
    d.fail("mandoc not installed (Debian package mandoc, scripts/deps)")
    d.done()

PAGES = ["docs/man/sluice.8", "docs/man/sluice.json.5"]
for page in PAGES:
    r = d.run(["mandoc", "-T", "lint", "-W", "warning",
               os.path.join(d.SRC, page)])
    d.check(r.returncode == 0 and not r.stdout.strip(),
            "mandoc -T lint %s:\n%s%s" % (page, r.stdout, r.stderr))


def rendered(page):
    r = d.run(["mandoc", "-T", "ascii", os.path.join(d.SRC, page)])
    # Drop the overstrike bold/underline, keep the words.
    return re.sub(r".\x08", "", r.stdout)


man8 = rendered(PAGES[0])
usage = d.run([d.BIN, "help"]).stdout
words = set()
for line in usage.splitlines():
    line = line.replace("usage:", "").strip()
    for w in re.findall(r"--?[a-z][a-z-]*|\b[a-z]+\b", line):
        words.add(w)
for w in sorted(words):
    if w in ("usage",):
        continue
    d.check(re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(w), man8),
            "sluice.8 does not mention %r (from sluice help)" % w)
for sig in ("SIGHUP", "SIGTERM", "SIGINT", "SIGUSR1"):
    d.check(sig in man8, "sluice.8: no %s" % sig)
m = re.search(r"EXIT STATUS(.*?)\n[A-Z]", man8, re.S)
d.check(m and all(re.search(r"^\s+%d\s" % i, m.group(1), re.M)
                  for i in range(4)), "sluice.8: EXIT STATUS lacks 0..3")
for f in ("budget.db", "revoked.admin", "audit.head", "audit.jsonl",
          "NOTIFY_SOCKET"):
    d.check(f in man8, "sluice.8: no %s" % f)

# Every key of docs/config.md's tables, with its section's prefix.
man5 = rendered(PAGES[1])
prefix = ""
keys = []
for line in d.read("docs/config.md").splitlines():
    h = re.match(r"^## `([a-z_]+)(\[\])?`", line)
    if h:
        prefix = "" if h.group(2) else h.group(1) + "."
        continue
    if line.startswith("## "):
        prefix = ""
    m = re.match(r"^\| `([a-z_.]+)` \|", line)
    if m:
        keys.append(prefix + m.group(1))
    for k in re.findall(r"`(alg|kid|secret_file|public_key_file|"
                        r"unlink_after_read)`", line):
        keys.append(k)
d.check(len(keys) > 50, "found only %d keys in docs/config.md" % len(keys))
for k in sorted(set(keys)):
    d.check(re.search(r"(?<![\w.])%s(?![\w])" % re.escape(k), man5),
            "sluice.json.5 does not name policy key %r (docs/config.md)" % k)
d.done()
