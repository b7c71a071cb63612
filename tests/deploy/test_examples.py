"""Every example policy (examples/*.json) and every policy a manifest
carries (deploy/kubernetes/*.yaml ConfigMaps) is accepted by `sluice
check`, with the key files it names made in a temporary directory (and
"nobody" for a user this machine lacks): they are written in today's
policy format, not a sketch of it."""

import glob
import json
import os
import shutil
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploylib as d  # noqa: E402

try:
    import yaml
except ImportError:
    d.fail("python3-yaml missing (scripts/deps)")
    d.done()

policies = []
for p in sorted(glob.glob(os.path.join(d.SRC, "examples", "*.json"))):
    with open(p) as f:
        policies.append((os.path.relpath(p, d.SRC), json.load(f)))
for p in sorted(glob.glob(os.path.join(d.SRC, "deploy", "kubernetes",
                                       "*.yaml"))):
    with open(p) as f:
        for doc in yaml.safe_load_all(f):
            if doc and doc.get("kind") == "ConfigMap":
                for k, v in doc.get("data", {}).items():
                    if k.endswith(".json"):
                        policies.append(("%s: ConfigMap %s %s" % (
                            os.path.relpath(p, d.SRC),
                            doc["metadata"]["name"], k), json.loads(v)))
d.check(len(policies) >= 4, "found %d policies" % len(policies))
modes = set()
for i, (name, doc) in enumerate(policies):
    tmp = d.tmpdir("ex")
    try:
        cdoc, made = d.checkable(doc, tmp)
        d.check(made, "%s names no key file" % name)
        r = d.sluice_check(cdoc, tmp, "p%d.json" % i)
        if d.check(r.returncode == 0, "sluice check %s: %s" % (
                name, r.stderr.strip())):
            out = json.loads(r.stdout)
            modes.add(out["netpolicy"]["mode"])
            d.check(out.get("user") not in (None, "root", "0"),
                    "%s: no user to drop to" % name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
d.check(modes == {"sidecar", "gateway"}, "modes covered: %r" % modes)
d.done()
