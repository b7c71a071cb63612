#!/bin/bash
# What the audit log costs on the forward proxy's small-request rate:
# sluice with audit.fsync "interval", "always" and "never", and a
# measurement build without any audit log (CMake SLUICE_BENCH_NO_AUDIT),
# each with wrk -c64 keep-alive GETs through the ../shared/bench topology
# (mode B: sluice on the gateway, pinned to cpu1). Variants are run in
# rotating order for ROUNDS rounds; medians and ratios to "off" printed,
# with each variant's median p99 latency. SLOWDISK=MS adds "interval-slow"
# and "always-slow": the same with every fsync of sluice taking MS ms
# (tests/tools/libslowsync.c, an LD_PRELOAD shim), a throttled audit disk:
# the writer thread and the per-request waits must keep it off the others'
# latency (issue: p99 within 2x the unthrottled p99).
#   sudo tests/bench/audit-overhead.sh            (ROUNDS=5 DURATION=8)
#   sudo SLOWDISK=200 tests/bench/audit-overhead.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
bench=${BENCH_DIR:-$(cd "$top/../shared/bench" && pwd)}
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-8}
"$top/scripts/deps"
for v in bench:OFF bench-noaudit:ON; do
	cmake -S "$top" -B "$top/build/${v%%:*}" -DCMAKE_BUILD_TYPE=Release \
	    -DSLUICE_BENCH_NO_AUDIT=${v##*:} >/dev/null
	cmake --build "$top/build/${v%%:*}" -j "$(nproc)" --target sluice \
	    slowsync -- --no-print-directory >/dev/null
done
"$bench/install-deps.sh" >/dev/null
work=$(mktemp -d /tmp/sluice-auditbench.XXXXXX)
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	"$bench/upstream.sh" stop >/dev/null 2>&1 || true
	"$bench/topo.sh" down >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
"$bench/topo.sh" up >/dev/null
"$bench/upstream.sh" start >/dev/null
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/key"
chmod 600 "$work/key"
jwt=$("$top/build/bench/proxy/sluice" token mint --key "$work/key" \
    --alg HS256 --aud bench --sub bench --ttl 3600)

run_variant() { # run_variant NAME -> "req/s p99_ms" on stdout
	local name=$1 bin=$top/build/bench/proxy/sluice fsync=${1%-slow}
	local pre=()
	[ "$name" = off ] && { bin=$top/build/bench-noaudit/proxy/sluice; fsync=never; }
	if [ "$name" != "$fsync" ]; then
		: > "$work/slow.arm"
		pre=(env LD_PRELOAD="$top/build/bench/tests/libslowsync.so"
		    SLOWSYNC_ARM="$work/slow.arm" SLOWSYNC_MS="$SLOWDISK")
	fi
	rm -rf "$work/state" "$work/audit.jsonl"
	mkdir -p "$work/state"
	cat > "$work/policy.json" <<JSON
{ "listeners": [ { "type": "forward", "listen": "198.18.1.1:3128" } ],
  "tokens": { "keys": [ { "alg": "HS256", "secret_file": "$work/key" } ] },
  "routes": [ { "audience": "bench", "methods": ["GET"],
    "upstream": { "url": "http://198.18.2.2:80", "allow_plaintext": true } } ],
  "audit": { "path": "$work/audit.jsonl", "fsync": "$fsync" },
  "netpolicy": { "mode": "off" }, "state_dir": "$work/state" }
JSON
	ip netns exec bn-proxy taskset -c 1 "${pre[@]}" "$bin" run \
	    -c "$work/policy.json" 2>"$work/sluice.err" &
	pid=$!
	for _ in $(seq 100); do
		grep -q "sluice: ready" "$work/sluice.err" && break
		sleep 0.05
	done
	BN_PROXY_AUTH="Bearer $jwt" ip netns exec bn-client taskset -c 0 \
	    wrk -t2 -c64 -d"${DURATION}s" --latency \
	    -s "$bench/tools/absolute.lua" \
	    http://198.18.1.1:3128/ -- http://198.18.2.2/small 2>/dev/null |
	    awk '/^Requests\/sec:/ { rps = $2 }
		/^ +99%/ { v = $2; u = v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v)
		    p = u == "us" ? v / 1000 : u == "s" ? v * 1000 : v }
		END { printf "%s %.2f\n", rps, p }'
	rm -f "$work/slow.arm"
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	pid=
}

variants=(off interval never always)
[ -n "${SLOWDISK:-}" ] && variants+=(interval-slow always-slow)
declare -A results p99s
for ((r = 0; r < ROUNDS; r++)); do
	for ((i = 0; i < ${#variants[@]}; i++)); do
		v=${variants[$(((i + r) % ${#variants[@]}))]}
		x=$(run_variant "$v")
		results[$v]="${results[$v]:-} ${x% *}"
		p99s[$v]="${p99s[$v]:-} ${x#* }"
		echo "round $((r + 1)) $v: ${x% *} req/s, p99 ${x#* } ms" >&2
	done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
off=$(echo "${results[off]}" | median)
printf '\n| audit | req/s (median of %d) | vs off | p99 ms (median) |\n' \
    "$ROUNDS"
printf '|---|---|---|---|\n'
for v in "${variants[@]}"; do
	m=$(echo "${results[$v]}" | median)
	q=$(echo "${p99s[$v]}" | median)
	awk -v v="$v" -v m="$m" -v o="$off" -v q="$q" \
	    'BEGIN { printf "| %s | %.0f | %.3f | %s |\n", v, m, m / o, q }'
done
