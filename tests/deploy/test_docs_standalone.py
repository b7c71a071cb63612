"""The user documentation stands alone: nothing in README.md, docs/ (the
man pages too) or examples/README.md points at a file outside the
repository (the design notes, a style guide or a sibling checkout it
was written next to), every relative Markdown link resolves to a file in
the repository, and every repository path written in backquotes
(`deploy/...`, `docs/...`, `examples/...`, ...) exists."""

import glob
import os
import re
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploylib as d  # noqa: E402

FORBIDDEN = ["DESIGN.md", "STYLE.md", "../shared", "/work/", "shared/bench"]
TOP = ("deploy/", "docs/", "examples/", "tests/", "scripts/", "proxy/",
       "netpolicy/", "certs/")

files = [os.path.join(d.SRC, "README.md"),
         os.path.join(d.SRC, "examples", "README.md")]
files += sorted(glob.glob(os.path.join(d.SRC, "docs", "*.md")))
files += sorted(glob.glob(os.path.join(d.SRC, "docs", "man", "*.[0-9]")))
root = os.path.realpath(d.SRC)
for f in files:
    rel = os.path.relpath(f, d.SRC)
    with open(f) as fh:
        text = fh.read()
    for n, line in enumerate(text.splitlines(), 1):
        for bad in FORBIDDEN:
            if bad in line:
                d.fail("%s:%d: points outside the repository (%s)" % (
                    rel, n, bad))
    for m in re.finditer(r"\]\(([^)\s]+)\)", text):
        target = m.group(1).split("#")[0]
        if not target or re.match(r"[a-z]+:", target):
            continue
        p = os.path.realpath(os.path.join(os.path.dirname(f), target))
        line = text.count("\n", 0, m.start()) + 1
        if not (p == root or p.startswith(root + os.sep)):
            d.fail("%s:%d: link outside the repository: %s" % (
                rel, line, target))
        elif not os.path.exists(p):
            d.fail("%s:%d: link to a missing file: %s" % (rel, line, target))
    for m in re.finditer(r"`((?:%s)[A-Za-z0-9_./-]+)`" % "|".join(
            re.escape(t) for t in TOP), text):
        p = m.group(1).rstrip(".")
        if any(c in p for c in "*<>{}"):
            continue
        line = text.count("\n", 0, m.start()) + 1
        d.check(os.path.exists(os.path.join(d.SRC, p)),
                "%s:%d: names %s, which is not in the repository" % (
                    rel, line, p))
d.check(len(files) >= 10, "only %d documents found" % len(files))
d.done()
