#!/bin/bash
# The interception campaign of issue 16 (on demand, not in the suite): small
# POSTs over kept-alive intercepted tunnels, 64 tunnels, through sluice
# (intercepting forward listener, and its reverse listener to the same TLS
# upstream as the reference), mitmproxy (regular mode, its own CA) and squid
# with ssl_bump (its own CA). Same client (tests/bench/tunnelpost.c) trusting
# each peer's CA, same upstream, medians over rounds, ratios in one run.
#
#   sudo tests/bench/intercept.sh [--rounds N] [--duration S] [--conns N]
#       [--mem-n N] [--peers "..."]
#
# Per peer start: the memory of MEM_N (1000) idle intercepted tunnels (each
# with one POST done, so both TLS legs are up): VmRSS growth of the proxy's
# process tree divided by the open tunnels; then the throughput run.
#
# Uses ../shared/bench (BENCH_DIR) for the topology (netns bn-client,
# bn-proxy, bn-up), the peer start/stop and the CPU placement: the proxy
# pinned to cpu1 (mode A: in bn-client on 127.0.0.1:3128), the load tool
# and the upstream on cpu0. The upstream is fakeup (tests/tools/fakeup.c,
# it answers POST, which the harness's nginx does not) on 198.18.2.2:8443
# with the harness's upstream certificate, without a log.
#
# Peers (tests/bench/peers/): sluice-intercept, mitmproxy, squid-bump. Each
# writes the CA its clients trust and names it in PEER_ENV as
# BN_INTERCEPT_CA. Packages, installed here when missing and only for this
# campaign: mitmproxy and squid-openssl (Debian; squid-openssl replaces the
# squid package, which the harness's squid peer then uses as well).
#
# Output: bench-results/intercept-<stamp>.jsonl (one line per run) and the
# median table on stdout. The machine is shared: compare ratios within one
# run, not absolute figures across runs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
BENCH_DIR=${BENCH_DIR:-$(cd "$top/../shared/bench" && pwd)}
ROUNDS=3
DUR=10
CONNS=64
MEM_N=1000
PEERS="sluice-intercept mitmproxy squid-bump"
while [ $# -gt 0 ]; do
	case $1 in
	--rounds) ROUNDS=$2; shift 2 ;;
	--duration) DUR=$2; shift 2 ;;
	--conns) CONNS=$2; shift 2 ;;
	--mem-n) MEM_N=$2; shift 2 ;;
	--peers) PEERS=$2; shift 2 ;;
	*) echo "usage: $0 [--rounds N] [--duration S] [--conns N] [--mem-n N] [--peers \"...\"]" >&2; exit 2 ;;
	esac
done
export PEER_DIR="$here/peers${PEER_DIR:+:$PEER_DIR}"
. "$BENCH_DIR/peer.sh"
[ "$(id -u)" = 0 ] || die "run as root"

need=""
case " $PEERS " in *" mitmproxy "*) command -v mitmdump >/dev/null || need="$need mitmproxy" ;; esac
case " $PEERS " in *" squid-bump "*) [ -x /usr/lib/squid/security_file_certgen ] || need="$need squid-openssl" ;; esac
if [ -n "$need" ]; then
	log "installing for the campaign:$need"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null
fi

export SLUICE_BIN=${SLUICE_BIN:-$top/build/bench/proxy/sluice}
cmake -S "$top" -B "$top/build/bench" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$top/build/bench" -j "$(nproc)" --target sluice fakeup -- --no-print-directory >/dev/null
FAKEUP=$top/build/bench/tests/fakeup
mkdir -p "$STATE/tools"
TP=$STATE/tools/tunnelpost
if [ ! -x "$TP" ] || [ "$here/tunnelpost.c" -nt "$TP" ]; then
	cc -O2 -Wall -o "$TP" "$here/tunnelpost.c" -lssl -lcrypto -lpthread
fi

UP=$UP_IP:8443
FAKEUP_PID=""
cleanup() {
	for p in $PEERS; do peer_stop "$p" 2>/dev/null || true; done
	if [ -n "$FAKEUP_PID" ]; then stop_pid "$FAKEUP_PID" 2 || true; fi
	"$BENCH_DIR/topo.sh" down >/dev/null 2>&1 || true
}
trap cleanup EXIT
ip netns list | grep -qw "^$NS_CLIENT" && "$BENCH_DIR/topo.sh" down
"$BENCH_DIR/topo.sh" up >/dev/null || die "topology"
rm -f "$STATE/fakeup.ready"
in_up taskset -c "$UP_CPUS" "$FAKEUP" --listen "$UP" \
    --cert "$BENCH_DIR/upstream/cert.pem" --key "$BENCH_DIR/upstream/key.pem" \
    --ready "$STATE/fakeup.ready" > "$STATE/fakeup.log" 2>&1 &
FAKEUP_PID=$!
for _ in $(seq 50); do [ -e "$STATE/fakeup.ready" ] && break; sleep 0.1; done
[ -e "$STATE/fakeup.ready" ] || die "fakeup did not start: $(cat "$STATE/fakeup.log")"

mkdir -p "$top/bench-results"
OUT=$top/bench-results/intercept-$(date -u +%Y%m%d-%H%M%S).jsonl
: > "$OUT"
{
	echo "date_utc: $(date -u +%FT%TZ); host: $(uname -srm); $(nproc) cpus"
	echo "openssl: $(openssl version); upstream: fakeup on $UP (cpu $UP_CPUS)"
	echo "placement: load cpus $LOAD_CPUS, proxy cpus $PROXY_CPUS (mode A)"
	echo "settings: rounds $ROUNDS, $DUR s, $CONNS tunnels, POST 64-byte body, keep-alive"
	echo "load on this machine: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "${OUT%.jsonl}.meta.txt"

# mem_one PEER ARGS...: MEM_N idle tunnels, the proxy's RSS growth per tunnel
mem_one() {
	local peer=$1 before during open per tpid; shift
	before=$(tree_status_sum "$PEER_PID" VmRSS)
	in_client taskset -c "$LOAD_CPUS" "$TP" -c "$MEM_N" -I 6 "$@" \
	    > "$STATE/idle.out" 2> "$STATE/idle.err" &
	tpid=$!
	for _ in $(seq 900); do grep -q '^idle' "$STATE/idle.out" && break; sleep 0.1; done
	sleep 1
	during=$(tree_status_sum "$PEER_PID" VmRSS)
	wait "$tpid" || true
	open=$(sed -n 's/^idle //p' "$STATE/idle.out"); open=${open:-0}
	per=$(( open > 0 ? (during - before) * 1024 / open : 0 ))
	echo "{\"peer\":\"$peer\",\"unit\":\"idle\",\"round\":$r,\"open\":$open,\"rss_per_conn_bytes\":$per,\"rss_before_kb\":$before,\"rss_during_kb\":$during}" >> "$OUT"
	log "$peer idle: $open tunnels, $per bytes RSS each ($before -> $during kB)"
}

# run_one PEER UNIT ARGS...: tunnelpost in bn-client, one JSON line to OUT
run_one() {
	local peer=$1 unit=$2 t0 t1 w0 w1 line; shift 2
	t0=$(tree_ticks "$PEER_PID"); w0=$(date +%s%N)
	line=$(in_client taskset -c "$LOAD_CPUS" "$TP" -c "$CONNS" -d "$DUR" "$@" 2>"$STATE/tp.err") ||
	    line='{"failed":true}'
	t1=$(tree_ticks "$PEER_PID"); w1=$(date +%s%N)
	local pct=$(( (t1 - t0) * 100 * 1000000000 / $(getconf CLK_TCK) / (w1 - w0) ))
	echo "{\"peer\":\"$peer\",\"unit\":\"$unit\",\"round\":$r,\"proxy_cpu_pct\":$pct,${line#\{}" >> "$OUT"
	log "$peer $unit: $line cpu $pct%"
}

peers=($PEERS)
n=${#peers[@]}
for ((r = 1; r <= ROUNDS; r++)); do
	for ((k = 0; k < n; k++)); do
		peer=${peers[$(((k + r - 1) % n))]}
		log "=== round $r/$ROUNDS: $peer"
		peer_start "$peer" A
		env_file=$STATE/peer/$peer.env
		( . "$env_file"
		  for _ in $(seq 100); do [ -s "$BN_INTERCEPT_CA" ] && break; sleep 0.1; done
		  [ -s "$BN_INTERCEPT_CA" ] || die "$peer wrote no CA"
		  # warm-up: the leaf is minted, caches filled
		  in_client "$TP" -c 1 -d 1 -x "${PEER_URL#http://}" -t "$UP" -C "$BN_INTERCEPT_CA" >/dev/null 2>&1 || true
		  mem_one "$peer" -m tunnel -x "${PEER_URL#http://}" -t "$UP" -C "$BN_INTERCEPT_CA"
		  run_one "$peer" tunnel -m tunnel -x "${PEER_URL#http://}" -t "$UP" -C "$BN_INTERCEPT_CA"
		  if [ -n "${BN_REVERSE:-}" ]; then
			BN_PROXY_AUTH="" run_one "$peer" reverse -m plain -t "$BN_REVERSE" -H "$BN_REVERSE_AUTH"
		  fi )
		peer_stop "$peer"
	done
done

log "raw results: $OUT"
python3 - "$OUT" <<'PY' | tee "${OUT%.jsonl}.md"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in rows:
    by.setdefault((r["peer"], r["unit"]), []).append(r)
def med(k, f):
    v = [x.get(f) for x in by.get(k, []) if x.get(f) is not None]
    return statistics.median(v) if v else None
ref = med(("sluice-intercept", "tunnel"), "rps")
print("| peer | unit | rps (median) | x of this / sluice intercept | p50 us | p99 us | proxy cpu % | errors |")
print("|---|---|---|---|---|---|---|---|")
for k in sorted(by):
    if k[1] == "idle":
        continue
    rps = med(k, "rps")
    ratio = "%.2f" % (ref / rps) if ref and rps else "-"
    print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
        k[0], k[1], rps, ratio, med(k, "lat_p50_us"), med(k, "lat_p99_us"),
        med(k, "proxy_cpu_pct"), sum(x.get("errors", 0) + x.get("open_errors", 0) for x in by[k])))
print()
print("x column: sluice intercept rps divided by the row's rps (targets: mitmproxy >= 10, squid-bump >= 2, sluice reverse <= 1/0.7 = 1.43)")
print()
print("| peer | idle tunnels open (median) | RSS per idle intercepted tunnel, bytes (median) |")
print("|---|---|---|")
for k in sorted(by):
    if k[1] == "idle":
        print("| %s | %s | %s |" % (k[0], med(k, "open"), med(k, "rss_per_conn_bytes")))
print()
print("target: sluice <= 48 KiB (49152 bytes) per idle intercepted tunnel, both TLS legs")
PY
