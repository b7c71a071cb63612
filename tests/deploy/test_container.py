"""deploy/container/Containerfile, followed here without pulling an image
(this machine is Debian 12, the recipe's base): the build stage's -dev
packages are those CMakeLists.txt finds with pkg-config; the runtime
stage installs exactly the Debian packages that own the shared libraries
the built binary links (ldd, dpkg -S; libc6 comes with the base) and no
-dev package, runs as a non-root USER, and its ENTRYPOINT is the binary
in exec form. Then its steps into a directory: `DESTDIR=... cmake
--install BUILD --strip`, the runtime stage's COPY lines from that tree,
the libraries ldd names, the user and directories of its RUN line, and
no shell; in that tree (chroot, as uid 64100) `sluice --version`, `help`
and `sluice check` of both shipped examples. Root only (chroot); skipped
under sanitizers (their runtime needs /proc)."""

import os
import re
import shutil
import subprocess
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploylib as d  # noqa: E402

text = d.read("deploy/container/Containerfile")
# Stages, with continuation lines joined.
joined = re.sub(r"\\\n", " ", text)
stages, cur = [], None
for line in joined.splitlines():
    line = line.strip()
    if not line or line.startswith("#"):
        continue
    word, _, rest = line.partition(" ")
    if word == "FROM":
        cur = {"from": rest, "lines": []}
        stages.append(cur)
    elif cur is not None:
        cur["lines"].append((word, rest.strip()))
d.check(len(stages) == 2, "want 2 stages, got %d" % len(stages))
for s in stages:
    d.check(re.match(r"(docker\.io/library/)?debian:bookworm(-slim)?\b",
                     s["from"]), "base %r is not Debian bookworm" % s["from"])
build, rt = stages[0], stages[-1]
d.check(build["from"].endswith(" AS build"), "first stage not named build")


def apt_packages(stage):
    pk = set()
    for w, rest in stage["lines"]:
        if w == "RUN":
            for m in re.finditer(r"apt-get install ([^&]*)", rest):
                pk |= {p for p in m.group(1).split() if not p.startswith("-")}
    return pk


bpk, rpk = apt_packages(build), apt_packages(rt)
cm = d.read("CMakeLists.txt")
mods = set()
for m in re.finditer(r"pkg_check_modules\(\w+ REQUIRED IMPORTED_TARGET ([^)]*)\)",
                     cm):
    mods |= {x.split(">")[0] for x in m.group(1).split()}
for mod in sorted(mods):
    r = d.run(["pkg-config", "--variable=pcfiledir", mod])
    pc = os.path.join(r.stdout.strip(), mod + ".pc")
    r = d.run(["dpkg", "-S", pc])
    pkg = r.stdout.split(":")[0] if r.returncode == 0 else "?"
    d.check(pkg in bpk, "build stage lacks %s (for pkg-config %s)" % (pkg, mod))
d.check(not {p for p in rpk if p.endswith("-dev")},
        "runtime stage installs -dev packages: %r" % rpk)

ldd = d.run(["ldd", d.BIN]).stdout
libs = re.findall(r"=> (/\S+)", ldd) + re.findall(r"^\s+(/\S+ld-linux\S*)",
                                                 ldd, re.M)
owners = set()
for lib in libs:
    r = d.run(["dpkg", "-S", os.path.realpath(lib)])
    if r.returncode != 0:
        r = d.run(["dpkg", "-S", lib])
    owners.add(r.stdout.split(":")[0] if r.returncode == 0 else lib)
sanitized = bool(os.environ.get("SLUICE_SANITIZE"))
if not sanitized:
    want = owners - {"libc6"}
    d.check(want == rpk - {"ca-certificates"},
            "runtime packages %r; the binary's libraries come from %r" % (
                sorted(rpk), sorted(want)))
users = [rest for w, rest in rt["lines"] if w == "USER"]
d.check(users and not users[-1].split(":")[0] in ("0", "root"),
        "runtime USER %r is root or missing" % users)
ep = [rest for w, rest in rt["lines"] if w == "ENTRYPOINT"]
d.check(ep == ['["/usr/sbin/sluice"]'], "ENTRYPOINT %r" % ep)
d.check(not any(w == "SHELL" for w, _ in rt["lines"]), "SHELL in runtime")

if os.geteuid() != 0:
    d.done() if d._failures else d.skip("the chroot part needs root")
if sanitized:
    d.done() if d._failures else d.skip("sanitizer build (needs /proc)")

CHROOT = shutil.which("chroot") or "/usr/sbin/chroot"
tmp = d.tmpdir("container")
try:
    out, root = os.path.join(tmp, "out"), os.path.join(tmp, "root")
    r = d.run(["cmake", "--install", d.BUILD, "--prefix", "/usr", "--strip"],
              env=dict(os.environ, DESTDIR=out), timeout=120)
    d.check(r.returncode == 0, "DESTDIR install: %s" % r.stderr)
    for w, rest in rt["lines"]:
        m = re.match(r"--from=build /out(/\S+) (/\S+)$", rest) \
            if w == "COPY" else None
        if w == "COPY":
            d.check(m, "COPY not from the build stage's /out: %r" % rest)
        if not m:
            continue
        src, dst = out + m.group(1), root + m.group(2)
        os.makedirs(os.path.dirname(dst.rstrip("/")), exist_ok=True)
        if os.path.isdir(src):
            shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)
        else:
            shutil.copy2(src, dst)
    for lib in libs:  # what the runtime packages and the base bring
        dst = root + lib
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(os.path.realpath(lib), dst)
    run_line = " ".join(rest for w, rest in rt["lines"] if w == "RUN")
    uid = re.search(r"useradd .*--uid (\d+)", run_line).group(1)
    gid = re.search(r"groupadd .*--gid (\d+)", run_line).group(1)
    os.makedirs(root + "/etc", exist_ok=True)
    with open(root + "/etc/passwd", "w") as f:
        f.write("root:x:0:0:root:/root:/usr/sbin/nologin\n"
                "sluice:x:%s:%s::/var/lib/sluice:/usr/sbin/nologin\n" % (
                    uid, gid))
    with open(root + "/etc/group", "w") as f:
        f.write("root:x:0:\nsluice:x:%s:\n" % gid)
    for m in re.finditer(r"install -d (?:-o (\d+) -g (\d+) )?-m (\d+) "
                         r"((?:/\S+ ?)+)", run_line):
        for p in m.group(4).split():
            os.makedirs(root + p, exist_ok=True)
            os.chmod(root + p, int(m.group(3), 8))
            if m.group(1):
                os.chown(root + p, int(m.group(1)), int(m.group(2)))
    for sh in ("/bin/sh", "/usr/bin/sh", "/bin/bash"):
        d.check(not os.path.exists(root + sh), "a shell in the tree: " + sh)

    def chrun(*argv):
        return subprocess.run(
            [CHROOT, "--userspec=%s:%s" % (uid, gid), root] + list(argv),
            capture_output=True, text=True, timeout=30, env={})

    r = chrun("/usr/sbin/sluice", "--version")
    d.check(r.returncode == 0 and r.stdout.startswith("sluice "),
            "sluice --version in the tree: %r" % (r,))
    r = chrun("/usr/sbin/sluice", "help")
    d.check(r.returncode == 0 and r.stdout.startswith("usage: sluice"),
            "sluice help in the tree: %r" % (r,))
    # The examples' key files, as an operator would put them in /etc/sluice.
    ex = root + "/usr/share/doc/sluice/examples"
    d.check(os.path.exists(ex + "/sidecar.json"), "examples not copied")
    sec = root + "/etc/sluice"
    for name in ("run-token.key", "control-plane.key"):
        with open(os.path.join(sec, name), "w") as f:
            f.write(os.urandom(24).hex() + "\n")
    open(os.path.join(sec, "revoked.txt"), "w").close()
    d.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out",
           os.path.join(tmp, "ed.key")], check=True)
    d.run(["openssl", "pkey", "-in", os.path.join(tmp, "ed.key"), "-pubout",
           "-out", os.path.join(sec, "run-token.pub")], check=True)
    for name in os.listdir(sec):
        os.chown(os.path.join(sec, name), int(uid), int(gid))
        os.chmod(os.path.join(sec, name), 0o600)
    for pol in ("sidecar.json", "gateway.json"):
        r = chrun("/usr/sbin/sluice", "check", "-c",
                  "/usr/share/doc/sluice/examples/" + pol)
        d.check(r.returncode == 0 and '"user":\t"sluice"' in r.stdout,
                "sluice check %s in the tree: rc %d %s" % (
                    pol, r.returncode, r.stderr.strip()))
    print("verified in %s: %d files" % (root, sum(
        len(f) for _, _, f in os.walk(root))))
finally:
    shutil.rmtree(tmp, ignore_errors=True)
d.done()
