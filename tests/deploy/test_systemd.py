"""deploy/systemd/*.service: `systemd-analyze verify` is silent (with
ExecStart at the binary under test and the man pages findable), the
directives docs/deployment.md promises are there (Type=notify, reload by
SIGHUP, the capability sets, the hardening), the writable paths are the
example policy's state_dir and audit directory, and `systemd-analyze
security --offline` rates each unit's exposure at 2.5 or less. Skipped
(77) without systemd-analyze."""

import json
import os
import re
import shutil
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploylib as d  # noqa: E402

if shutil.which("systemd-analyze") is None:
    d.skip("systemd-analyze not installed")

UNITS = {
    "sluice.service": {
        "CapabilityBoundingSet": "CAP_NET_ADMIN CAP_NET_BIND_SERVICE "
                                 "CAP_SETUID CAP_SETGID CAP_SETPCAP CAP_CHOWN",
        "AmbientCapabilities": "",
    },
    "sluice-user.service": {
        "User": "sluice",
        "CapabilityBoundingSet": "CAP_NET_ADMIN CAP_NET_BIND_SERVICE",
        "AmbientCapabilities": "CAP_NET_ADMIN CAP_NET_BIND_SERVICE",
    },
}
COMMON = {
    "Type": "notify",
    "ExecStart": "/usr/sbin/sluice run -c /etc/sluice/policy.json",
    "ExecReload": "/bin/kill -HUP $MAINPID",
    "NoNewPrivileges": "yes",
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "PrivateTmp": "yes",
    "PrivateDevices": "yes",
    "ProtectKernelTunables": "yes",
    "ProtectKernelModules": "yes",
    "ProtectKernelLogs": "yes",
    "ProtectControlGroups": "yes",
    "LockPersonality": "yes",
    "MemoryDenyWriteExecute": "yes",
    "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6 AF_NETLINK",
    "SystemCallArchitectures": "native",
}

with open(os.path.join(d.SRC, "examples", "sidecar.json")) as f:
    example = json.load(f)
need_rw = {example["state_dir"], os.path.dirname(example["audit"]["path"])}

tmp = d.tmpdir("systemd")
try:
    man = os.path.join(tmp, "man")
    for sect, page in (("8", "sluice.8"), ("5", "sluice.json.5")):
        os.makedirs(os.path.join(man, "man" + sect))
        shutil.copy(os.path.join(d.SRC, "docs", "man", page),
                    os.path.join(man, "man" + sect, page))
    env = dict(os.environ, MANPATH=man, SYSTEMD_LOG_LEVEL="notice")
    paths = []
    for unit, want in UNITS.items():
        text = d.read(os.path.join("deploy", "systemd", unit))
        kv = {}
        for line in text.splitlines():
            m = re.match(r"^([A-Za-z]+)=(.*)$", line)
            if m:
                kv.setdefault(m.group(1), []).append(m.group(2))
        for k, v in list(COMMON.items()) + list(want.items()):
            d.check(kv.get(k, [None])[-1] == v, "%s: %s=%r, want %r" % (
                unit, k, kv.get(k), v))
        rw = set(" ".join(kv.get("ReadWritePaths", [])).split())
        d.check(need_rw <= rw, "%s: ReadWritePaths %r lacks %r" % (
            unit, rw, need_rw - rw))
        d.check(any(v.startswith("@system-service") for v in
                    kv.get("SystemCallFilter", [])),
                "%s: no SystemCallFilter=@system-service" % unit)
        p = os.path.join(tmp, unit)
        with open(p, "w") as f:
            f.write(text.replace("/usr/sbin/sluice", d.BIN))
        paths.append(p)
    r = d.run(["systemd-analyze", "verify"] + paths, env=env, cwd=tmp)
    d.check(r.returncode == 0 and not r.stderr.strip(),
            "systemd-analyze verify: rc %d\n%s%s" % (
                r.returncode, r.stdout, r.stderr))
    for p in paths:
        r = d.run(["systemd-analyze", "security", "--offline=true", p],
                  env=env, cwd=tmp)
        m = re.search(r"Overall exposure level for \S+: ([0-9.]+)",
                      r.stdout)
        if r.returncode != 0 and "offline" in r.stderr:
            print("systemd-analyze security --offline unsupported: %s" %
                  r.stderr.strip())
            continue
        if d.check(m, "systemd-analyze security %s: %s%s" % (
                p, r.stdout[-500:], r.stderr)):
            score = float(m.group(1))
            print("%s: exposure %.1f" % (os.path.basename(p), score))
            d.check(score <= 2.5, "%s: exposure %.1f > 2.5" % (
                os.path.basename(p), score))
finally:
    shutil.rmtree(tmp, ignore_errors=True)
d.done()
