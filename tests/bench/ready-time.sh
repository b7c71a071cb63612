#!/bin/bash
# Time from "sluice run" to the line "sluice: ready", with the sidecar
# kernel rules applied, in a fresh network namespace each run (target:
# median <= 20 ms). Also the same without rules (--no-netpolicy), and
# both with --single-process (no engine to fork and confine) to compare.
#   sudo tests/bench/ready-time.sh          (RUNS=20)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
RUNS=${RUNS:-20}
. "$here/minimal-policy.sh"
minimal_policy ready
measure() { # measure [--no-netpolicy] -> ms on stdout
	ip netns del "$ns" 2>/dev/null || true
	ip netns add "$ns"
	ip -n "$ns" link set lo up
	python3 - "$ns" "$bin" "$work/policy.json" "$@" <<'PY'
import subprocess, sys, time, os, signal
ns, binary, policy = sys.argv[1:4]
extra = sys.argv[4:]
t0 = time.monotonic()
# A service's environment: no SSL_CERT_FILE and the like from a shell.
p = subprocess.Popen(["ip", "netns", "exec", ns, binary, "run", "-c", policy] + extra,
                     stderr=subprocess.PIPE, text=True,
                     env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
for line in p.stderr:
    if "sluice: ready" in line:
        print("%.2f" % ((time.monotonic() - t0) * 1000))
        break
p.send_signal(signal.SIGTERM)
p.wait()
PY
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# Interleaved (one run of each kind per round), so a drift of the shared
# machine hits every kind alike.
for _ in $(seq "$RUNS"); do
	measure >> "$work/rules"
	measure --no-netpolicy >> "$work/none"
	measure --single-process >> "$work/srules"
	measure --single-process --no-netpolicy >> "$work/snone"
done
rules=$(median < "$work/rules")
none=$(median < "$work/none")
srules=$(median < "$work/srules")
snone=$(median < "$work/snone")
base=$(for _ in $(seq "$RUNS"); do
	python3 -c 'import subprocess,time; t=time.monotonic(); subprocess.run(["ip","netns","exec","'"$ns"'","true"]); print("%.2f"%((time.monotonic()-t)*1000))'
done | median)
printf '| start to ready | median ms (%d runs) | --single-process |\n|---|---|---|\n' "$RUNS"
printf '| sidecar rules applied | %s | %s |\n| no rules | %s | %s |\n' \
    "$rules" "$srules" "$none" "$snone"
printf '| (ip netns exec + true, the launcher alone) | %s | |\n' "$base"
for k in rules none srules snone; do echo "raw $k ms: $(tr '\n' ' ' < "$work/$k")"; done
