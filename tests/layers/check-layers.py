#!/usr/bin/env python3
"""The layering of the libraries (docs/architecture.md), checked twice.

  check-layers.py NAME=ARCHIVE...
    On the objects the build made: every symbol a library takes from
    another must come from a layer below it.
  check-layers.py --includes BUILD_DIR
    On the include paths: compiled with the flags the build gives a file of
    each folder (compile_commands.json), the main header of every other
    library must be found exactly when that library is below, and the
    umbrella proxy/proxy.h never.

A static library's undefined symbols are what its objects call; a symbol
defined in another of the archives names the library it comes from. A call
to a higher layer (say config calling into relay) still links in the final
binary, which holds every library, so only this check catches it."""
import subprocess
import sys

# May use: each library and the libraries below it that it may call.
ALLOWED = {
    "util": set(),
    "http": {"util"},
    "dns": {"util"},
    "sandbox": {"util"},
    "token": {"http", "util"},
    "config": {"token", "http", "util", "certs"},
    "ops": {"config", "token", "http", "util"},
    "policy": {"config", "token", "http", "util"},
    "relay": {"policy", "ops", "config", "dns", "token", "http", "util",
              "certs"},
    "daemon": {"relay", "policy", "ops", "config", "dns", "token", "http",
               "util", "certs", "netpolicy", "sandbox"},
    "cli": {"daemon", "relay", "policy", "ops", "config", "dns", "token",
            "http", "util", "certs", "netpolicy", "sandbox"},
    "netpolicy": set(),
    "certs": set(),
}




def below(name):
    """Every layer name may use: ALLOWED, closed transitively."""
    seen, todo = set(), list(ALLOWED[name])
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo.extend(ALLOWED[n])
    return seen


HEADERS = {n: f"proxy/{n}/{n}.h" for n in ALLOWED}
HEADERS.update({"http": "proxy/http/http1.h", "dns": "proxy/dns/resolve.h",
                "token": "proxy/token/token.h",
                "sandbox": "proxy/sandbox/sandbox.h",
                "netpolicy": "netpolicy/netpolicy.h",
                "certs": "certs/certs.h"})
FOLDERS = {n: f"proxy/{n}/" for n in ALLOWED}
FOLDERS.update({"netpolicy": "netpolicy/", "certs": "certs/"})


def includes(build):
    import json
    import os
    import shlex
    import tempfile
    top = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    with open(os.path.join(build, "compile_commands.json")) as f:
        cmds = json.load(f)
    bad = checked = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, folder in sorted(FOLDERS.items()):
            want = os.path.join(top, folder)
            cmd = next((c for c in cmds if c["file"].startswith(want) and
                        "/proxy/CMakeFiles/sluice_pure" not in
                        c.get("output", "") and
                        "sluice_pure.dir" not in c["command"]), None)
            if cmd is None:
                print(f"check-layers: no compile command for {folder}")
                return 2
            argv = shlex.split(cmd["command"])
            flags = [a for a in argv if a.startswith(("-I", "-D", "-std"))]
            for other, header in sorted(HEADERS.items()) + [
                    (None, "proxy/proxy.h")]:
                if other == name:
                    continue
                probe = os.path.join(tmp, "probe.c")
                with open(probe, "w") as f:
                    f.write(f'#include "{header}"\n')
                r = subprocess.run([argv[0], "-fsyntax-only", *flags, probe],
                                   cwd=cmd["directory"], capture_output=True,
                                   text=True)
                found = "No such file" not in r.stderr and \
                    "not found" not in r.stderr
                ok = other is not None and other in below(name)
                checked += 1
                if found != ok:
                    bad += 1
                    print(f"{folder}: #include \"{header}\" "
                          f"{'compiles' if found else 'is not found'}, "
                          f"but {name} {'may' if ok else 'may not'} use it")
    if bad == 0:
        print(f"check-layers: {checked} include probes as the layers say")
    return 1 if bad else 0


def symbols(archive):
    out = subprocess.run(["nm", "-A", archive], check=True,
                         capture_output=True, text=True).stdout
    defined, undefined = {}, {}
    for line in out.splitlines():
        # "archive.a:member.o:0000 T name" or "archive.a:member.o:  U name"
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        member, f = parts[1], parts[2].split()
        if len(f) == 3 and f[1] in "TDBRCV" and f[1].isupper():
            defined[f[2]] = member
        elif len(f) == 2 and f[0] == "U":
            undefined.setdefault(f[1], set()).add(member)
    return defined, undefined


def main(argv):
    if argv[:1] == ["--includes"] and len(argv) == 2:
        return includes(argv[1])
    libs = dict(a.split("=", 1) for a in argv)
    unknown = set(libs) - set(ALLOWED)
    if unknown or not libs:
        print("check-layers: unknown or no libraries:", sorted(unknown))
        return 2
    owner, needs = {}, {}
    for name, path in libs.items():
        defined, undefined = symbols(path)
        for sym, member in defined.items():
            owner[sym] = (name, member)
        needs[name] = undefined
    bad = 0
    for name, undefined in sorted(needs.items()):
        for sym, members in sorted(undefined.items()):
            if sym not in owner:
                continue  # libc, OpenSSL, libevent, ...
            lib, where = owner[sym]
            if lib != name and lib not in below(name):
                bad += 1
                print(f"{name} ({', '.join(sorted(members))}) uses {sym} "
                      f"from {lib} ({where}): {name} may use only "
                      f"{', '.join(sorted(below(name))) or 'nothing'}")
    if bad == 0:
        print(f"check-layers: {len(libs)} libraries, no upward call")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
