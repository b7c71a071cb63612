#!/bin/bash
# Wall time of a sandbox from nothing to exit: tests/tools/sandbox_run -- true
# (user/net/mount namespaces, lo up, planted listeners, mount wall, caps,
# no_new_privs, seccomp, exec) against `unshare -rn true` and
# `bwrap --unshare-net --dev-bind / / true`, in the same hyperfine run
# (issue 10's target for `sluice exec -- true`: median <= 30 ms).
#   sudo tests/bench/sandbox-start.sh       (RUNS=50; AS=65534 to run the
#                                            commands unprivileged)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
RUNS=${RUNS:-50}
AS=${AS:-}
"$top/scripts/deps"
for tool in hyperfine bwrap; do
	command -v "$tool" >/dev/null || {
		echo "sandbox-start: $tool missing (apt-get install hyperfine bubblewrap)" >&2
		exit 1
	}
done
cmake -S "$top" -B "$top/build/bench" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$top/build/bench" -j "$(nproc)" --target sandbox_run \
    -- --no-print-directory >/dev/null
tool=$top/build/bench/tests/sandbox_run
work=$(mktemp -d /tmp/sluice-sbx-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
pre=""
[ -n "$AS" ] && pre="setpriv --reuid $AS --regid $AS --clear-groups "
full="$tool --listen tcp:127.0.0.1:3128 --listen udp:127.0.0.53:53"
full="$full --listen tcp:127.0.0.53:53 --listen tcp:127.77.0.1:443"
full="$full --listen tcp:127.77.0.1:80 --resolv nameserver\ 127.0.0.53"
full="$full --hide $work -- true"
hyperfine -N --warmup 5 --runs "$RUNS" --export-json "$work/h.json" \
    -n "sandbox_run -- true" "${pre}$tool -- true" \
    -n "sandbox_run (5 listeners, wall)" "${pre}$full" \
    -n "unshare -rn true" "${pre}unshare -rn true" \
    -n "bwrap --unshare-net" "${pre}bwrap --unshare-net --dev-bind / / true" \
    >/dev/null
python3 - "$work/h.json" <<'PY'
import json, statistics, sys
r = json.load(open(sys.argv[1]))["results"]
print("%-34s %9s %9s %9s" % ("command", "median", "mean", "max"))
for x in r:
    t = x["times"]
    print("%-34s %7.2fms %7.2fms %7.2fms" % (x["command"],
          statistics.median(t) * 1e3, statistics.mean(t) * 1e3,
          max(t) * 1e3))
PY
