"""Shared bits of the tests/deploy checks (standard library, plus
python3-yaml where a test says so). Each test_*.py is one ctest
(deploy:NAME) run with SLUICE_BIN, SLUICE_SRC and SLUICE_BUILD set; exit
0 pass, 1 fail, 77 skip."""

import json
import os
import subprocess
import sys
import tempfile

SRC = os.environ.get("SLUICE_SRC") or os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("SLUICE_BUILD") or os.path.join(SRC, "build", "plain")
BIN = os.environ.get("SLUICE_BIN") or os.path.join(BUILD, "proxy", "sluice")
SKIP = 77

_failures = []


def fail(msg):
    _failures.append(msg)
    print("FAIL: " + msg, file=sys.stderr)


def check(cond, msg):
    if not cond:
        fail(msg)
    return cond


def done():
    if _failures:
        print("%d failure(s)" % len(_failures), file=sys.stderr)
        sys.exit(1)
    print("ok")
    sys.exit(0)


def skip(why):
    print("skipped: " + why)
    sys.exit(SKIP)


def run(argv, **kw):
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", 60)
    return subprocess.run(argv, **kw)


def tmpdir(tag):
    return tempfile.mkdtemp(prefix="sluice-deploy-%s-" % tag)


def read(rel):
    with open(os.path.join(SRC, rel)) as f:
        return f.read()


FILE_KEYS = ("secret_file", "public_key_file", "ca_file", "revoked_file",
             "value_file")


def checkable(doc, d):
    """A copy of policy doc whose files exist in directory d: each key or
    credential file it names is made there (an HS256 secret, an Ed25519
    public key, an empty revocation list), and a user this machine lacks
    becomes "nobody". Returns (doc, [(json path, original file)])."""
    doc = json.loads(json.dumps(doc))
    made = []
    n = [0]

    def walk(o, path):
        if isinstance(o, dict):
            for k, v in o.items():
                p = "%s.%s" % (path, k) if path else k
                if k in FILE_KEYS and isinstance(v, str):
                    n[0] += 1
                    f = os.path.join(d, "f%d-%s" % (n[0], os.path.basename(v)))
                    if k == "public_key_file":
                        priv = f + ".priv"
                        run(["openssl", "genpkey", "-algorithm", "ed25519",
                             "-out", priv], check=True)
                        run(["openssl", "pkey", "-in", priv, "-pubout",
                             "-out", f], check=True)
                    elif k == "revoked_file":
                        open(f, "w").close()
                    elif k == "ca_file":
                        raise ValueError("%s: ca_file not supported" % p)
                    else:
                        with open(f, "w") as fh:
                            fh.write(os.urandom(24).hex() + "\n")
                    os.chmod(f, 0o600)
                    o[k] = f
                    made.append((p, v))
                else:
                    walk(v, p)
        elif isinstance(o, list):
            for i, v in enumerate(o):
                walk(v, "%s[%d]" % (path, i))

    walk(doc, "")
    if "user" in doc:
        import pwd
        try:
            if not doc["user"].isdigit():
                pwd.getpwnam(doc["user"])
        except KeyError:
            doc["user"] = "nobody"
    return doc, made


def sluice_check(doc, d, name):
    """Run sluice check on doc (written into d); returns the process."""
    path = os.path.join(d, name)
    with open(path, "w") as f:
        json.dump(doc, f)
    os.chmod(path, 0o600)
    return run([BIN, "check", "-c", path])
