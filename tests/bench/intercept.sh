#!/bin/bash
# The interception campaign of issue 16 (on demand, not in the suite):
# sluice's intercepting forward listener (and its reverse listener to the
# same TLS upstream as the reference), mitmproxy (regular mode, its own CA)
# and squid with ssl_bump (its own CA). Same clients trusting each peer's
# CA, same upstream, medians over rounds, ratios in one run.
#
#   sudo tests/bench/intercept.sh [--rounds N] [--duration S] [--conns N]
#       [--mem-n N] [--fresh N] [--rate-conc N] [--sse-n N]
#       [--modes "idle first post rate sse"] [--peers "..."]
#
# Per peer start (a fresh process each round), in this order, each mode
# in --modes (default all):
#   idle   RSS per idle intercepted tunnel: MEM_N (1000) tunnels, each with
#          one POST done (both TLS legs up), VmRSS growth of the proxy's
#          process tree divided by the open tunnels (tunnelpost.c -I).
#   first  first CONNECT to a host not yet cached vs a cached one
#          (tunnelprobe.c -m first): FRESH (100) pairs, one connection to
#          a name the proxy has not seen (h1.bench.test ... hFRESH) then
#          one to the warmed-up h0.bench.test, each CONNECT -> 200 -> TLS
#          handshake (SNI, name verified) -> GET -> close, one at a time.
#          Medians of CONNECT+handshake per kind and their difference: the
#          cost of a leaf mint (and whatever else a new host costs).
#   post   small POSTs over CONNS (64) kept-alive intercepted tunnels for
#          DURATION s (tunnelpost.c), and the same through sluice's reverse
#          listener: requests/s, per-request latency.
#   rate   cached-leaf connection rate (tunnelprobe.c -m rate): RATE_CONC
#          (16) threads for DURATION s, each connection TCP -> CONNECT
#          198.18.2.2:8443 -> TLS (full handshake, verified) -> GET
#          (Connection: close) -> the response -> the server's close.
#          Also run without a proxy (TLS to the upstream itself, "direct").
#          (Not the harness's connrate: it sends Host without the port,
#          which names 443 inside TLS, and counts a close without
#          close_notify after a complete response, mitmproxy's way, as an
#          error.)
#   sse    first server-sent event (tunnelprobe.c -m sse): SSE_N (200)
#          requests on one kept-alive connection, each GET of an SSE
#          stream whose first event the upstream writes with the head and
#          its second 10 ms later; time from the request written to the
#          first "data:" line received. Through the intercepted tunnel of
#          each peer, sluice's reverse listener, and direct (TLS to the
#          upstream itself).
#
# Uses ../shared/bench (BENCH_DIR) for the topology (netns bn-client,
# bn-proxy, bn-up), the peer start/stop and the CPU placement: the proxy
# pinned to cpu1 (mode A: in bn-client on 127.0.0.1:3128), the load tools
# and the upstream on cpu0. The upstream is fakeup (tests/tools/fakeup.c,
# it answers POST and serves SSE, which the harness's nginx does not) on
# 198.18.2.2:8443, without a log, with a certificate made for the campaign
# (self-signed EC P-256, SAN IP:198.18.2.2 and DNS:*.bench.test, in
# $BN_STATE/icpt-up) that every peer verifies the upstream against. The
# names h0.bench.test ... hFRESH.bench.test reach that upstream through
# each peer's own mapping (sluice: the route's hosts; squid: a hosts_file;
# mitmproxy: peers/mitmproxy-addon.py); CONNECTs of the other modes name
# 198.18.2.2:8443.
#
# Peers (tests/bench/peers/): sluice-intercept, mitmproxy, squid-bump. Each
# writes the CA its clients trust and names it in PEER_ENV as
# BN_INTERCEPT_CA. Packages, installed here when missing and only for this
# campaign: mitmproxy and squid-openssl (Debian; squid-openssl replaces the
# squid package, which the harness's squid peer then uses as well).
#
# Output: bench-results/intercept-<stamp>.jsonl (one line per run), .md
# (the median tables, also on stdout) and .meta.txt. The machine is shared:
# compare ratios within one run, not absolute figures across runs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
BENCH_DIR=${BENCH_DIR:-$(cd "$top/../shared/bench" && pwd)}
ROUNDS=3
DUR=10
CONNS=64
MEM_N=1000
FRESH=100
RATE_CONC=16
SSE_N=200
SSE_PATH='/v1/stream?n=2&gap_ms=10'
MODES="idle first post rate sse"
PEERS="sluice-intercept mitmproxy squid-bump"
usage() {
	echo "usage: $0 [--rounds N] [--duration S] [--conns N] [--mem-n N] [--fresh N]" \
	    "[--rate-conc N] [--sse-n N] [--modes \"idle first post rate sse\"] [--peers \"...\"]" >&2
	exit 2
}
while [ $# -gt 0 ]; do
	case $1 in
	--rounds) ROUNDS=$2; shift 2 ;;
	--duration) DUR=$2; shift 2 ;;
	--conns) CONNS=$2; shift 2 ;;
	--mem-n) MEM_N=$2; shift 2 ;;
	--fresh) FRESH=$2; shift 2 ;;
	--rate-conc) RATE_CONC=$2; shift 2 ;;
	--sse-n) SSE_N=$2; shift 2 ;;
	--modes) MODES=$2; shift 2 ;;
	--peers) PEERS=$2; shift 2 ;;
	*) usage ;;
	esac
done
for m in $MODES; do
	case $m in idle | first | post | rate | sse) ;; *) usage ;; esac
done
case $FRESH in '' | *[!0-9]*) usage ;; esac
[ "$FRESH" -ge 1 ] && [ "$FRESH" -le 1000 ] || usage
want() { case " $MODES " in *" $1 "*) return 0 ;; esac; return 1; }
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
PROBE=$STATE/tools/tunnelprobe
if [ ! -x "$PROBE" ] || [ "$here/tunnelprobe.c" -nt "$PROBE" ]; then
	cc -O2 -Wall -o "$PROBE" "$here/tunnelprobe.c" -lssl -lcrypto -lpthread
fi

UP=$UP_IP:8443
# The upstream's certificate for the campaign: the harness's covers only
# IP:198.18.2.2, the first-CONNECT probe needs names (peers verify them).
UPC=$STATE/icpt-up
mkdir -p "$UPC"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$UPC/key.pem" -out "$UPC/cert.pem" -days 2 -subj "/CN=$UP_IP" \
    -addext "subjectAltName=IP:$UP_IP,DNS:*.bench.test" \
    -addext "basicConstraints=critical,CA:TRUE" 2>/dev/null
chmod 755 "$UPC"
chmod 644 "$UPC/cert.pem" "$UPC/key.pem" # test-only key, bench namespaces only
export ICPT_UP_CA=$UPC/cert.pem
ICPT_HOSTS=""
for ((i = 0; i <= FRESH; i++)); do ICPT_HOSTS="$ICPT_HOSTS h$i.bench.test"; done
export ICPT_HOSTS=${ICPT_HOSTS# }
FAKEUP_PID=""
cleanup() {
	for p in $PEERS; do peer_stop "$p" 2>/dev/null || true; done
	if [ -n "$FAKEUP_PID" ]; then stop_pid "$FAKEUP_PID" 2 || true; fi
	"$BENCH_DIR/topo.sh" down >/dev/null 2>&1 || true
}
trap cleanup EXIT
# The harness's namespaces are shared by every campaign on this machine:
# one that exists belongs to a campaign that may still be running.
if ip netns list | grep -qw "^$NS_CLIENT"; then
	trap - EXIT
	die "netns $NS_CLIENT exists: another campaign is running (or left it: $BENCH_DIR/topo.sh down)"
fi
"$BENCH_DIR/topo.sh" up >/dev/null || die "topology"
rm -f "$STATE/fakeup.ready"
in_up taskset -c "$UP_CPUS" "$FAKEUP" --listen "$UP" \
    --cert "$ICPT_UP_CA" --key "$UPC/key.pem" --log /dev/null \
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
	echo "modes: $MODES; peers: $PEERS"
	echo "settings: rounds $ROUNDS, $DUR s; post: $CONNS tunnels, POST 64-byte body, keep-alive;" \
	    "idle: $MEM_N tunnels; first: $FRESH pairs; rate: $RATE_CONC in flight; sse: $SSE_N requests $SSE_PATH"
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

# cpu_snap: "busy total" jiffies per cpu (cpu0 cpu1 ...), from /proc/stat
cpu_snap() {
	awk '/^cpu[0-9]/ { t = 0; for (i = 2; i <= 9; i++) t += $i;
	    printf "%d %d ", t - $5 - $6, t }' /proc/stat
}
# cpu_busy "SNAP0" "SNAP1" N: percent busy of cpu N between the snapshots
cpu_busy() {
	local a=($1) b=($2) n=$3
	local db=$(( b[2 * n] - a[2 * n] )) dt=$(( b[2 * n + 1] - a[2 * n + 1] ))
	echo $(( dt > 0 ? db * 100 / dt : 0 ))
}

# run_tool PEER UNIT CMD...: a load tool in bn-client on the load cpus, its
# last JSON line (with the proxy's CPU and both cpus' busy share over the
# run) appended to OUT
run_tool() {
	local peer=$1 unit=$2 t0=0 t1=0 w0 w1 line pct=null c0 c1; shift 2
	[ -z "${PEER_PID:-}" ] || t0=$(tree_ticks "$PEER_PID")
	w0=$(date +%s%N); c0=$(cpu_snap)
	line=$(in_client taskset -c "$LOAD_CPUS" "$@" 2>"$STATE/tool.err" | grep '^{' | tail -1) || true
	[ -n "$line" ] || { line='{"failed":true}'; log "$peer $unit failed: $(tail -3 "$STATE/tool.err")"; }
	w1=$(date +%s%N); c1=$(cpu_snap)
	if [ -n "${PEER_PID:-}" ]; then
		t1=$(tree_ticks "$PEER_PID")
		pct=$(( (t1 - t0) * 100 * 1000000000 / $(getconf CLK_TCK) / (w1 - w0) ))
	fi
	echo "{\"peer\":\"$peer\",\"unit\":\"$unit\",\"round\":$r,\"proxy_cpu_pct\":$pct,\"load_cpu_busy\":$(cpu_busy "$c0" "$c1" "${LOAD_CPUS%%[,-]*}"),\"proxy_cpu_busy\":$(cpu_busy "$c0" "$c1" "${PROXY_CPUS%%[,-]*}"),${line#\{}" >> "$OUT"
	log "$peer $unit: $line cpu $pct%"
}
run_one() { # run_one PEER UNIT ARGS...: tunnelpost
	local peer=$1 unit=$2; shift 2
	run_tool "$peer" "$unit" "$TP" -c "$CONNS" -d "$DUR" "$@"
}

peers=($PEERS)
n=${#peers[@]}
t_start=$(date +%s)
for ((r = 1; r <= ROUNDS; r++)); do
	# The references without a proxy: TLS to the upstream itself.
	PEER_PID=""
	if want rate; then
		BN_PROXY_AUTH="" run_tool direct rate "$PROBE" -m rate -t "$UP" \
		    -c "$RATE_CONC" -d "$DUR" -C "$ICPT_UP_CA" -P /v1/rate
	fi
	if want sse; then
		BN_PROXY_AUTH="" run_tool direct sse "$PROBE" -m sse -t "$UP" \
		    -C "$ICPT_UP_CA" -n "$SSE_N" -P "$SSE_PATH"
	fi
	for ((k = 0; k < n; k++)); do
		peer=${peers[$(((k + r - 1) % n))]}
		log "=== round $r/$ROUNDS: $peer"
		peer_start "$peer" A
		env_file=$STATE/peer/$peer.env
		( . "$env_file"
		  for _ in $(seq 100); do [ -s "$BN_INTERCEPT_CA" ] && break; sleep 0.1; done
		  [ -s "$BN_INTERCEPT_CA" ] || die "$peer wrote no CA"
		  px=${PEER_URL#http://}
		  # warm-up: the leaf of 198.18.2.2 is minted, caches filled (-j 1:
		  # tunnelpost refuses more threads than connections)
		  in_client "$TP" -c 1 -j 1 -d 1 -x "$px" -t "$UP" -C "$BN_INTERCEPT_CA" >/dev/null 2>&1 || true
		  if want idle; then
			mem_one "$peer" -m tunnel -x "$px" -t "$UP" -C "$BN_INTERCEPT_CA"
		  fi
		  if want first; then
			run_tool "$peer" first "$PROBE" -m first -x "$px" \
			    -t "h0.bench.test:${UP##*:}" -F "h%u.bench.test" \
			    -C "$BN_INTERCEPT_CA" -n "$FRESH"
		  fi
		  if want post; then
			run_one "$peer" tunnel -m tunnel -x "$px" -t "$UP" -C "$BN_INTERCEPT_CA"
			if [ -n "${BN_REVERSE:-}" ]; then
				BN_PROXY_AUTH="" run_one "$peer" reverse -m plain -t "$BN_REVERSE" -H "$BN_REVERSE_AUTH"
			fi
		  fi
		  if want rate; then
			run_tool "$peer" rate "$PROBE" -m rate -x "$px" -t "$UP" \
			    -c "$RATE_CONC" -d "$DUR" -C "$BN_INTERCEPT_CA" -P /v1/rate
		  fi
		  if want sse; then
			run_tool "$peer" sse "$PROBE" -m sse -x "$px" -t "$UP" \
			    -C "$BN_INTERCEPT_CA" -n "$SSE_N" -P "$SSE_PATH"
			if [ -n "${BN_REVERSE:-}" ]; then
				BN_PROXY_AUTH="" run_tool "$peer" sse-reverse "$PROBE" -m sse \
				    -t "$BN_REVERSE" -H "$BN_REVERSE_AUTH" -n "$SSE_N" -P "$SSE_PATH"
			fi
		  fi )
		peer_stop "$peer"
	done
done
echo "duration: $(( $(date +%s) - t_start )) s for $ROUNDS rounds" >> "${OUT%.jsonl}.meta.txt"
echo "load on this machine at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >> "${OUT%.jsonl}.meta.txt"

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
def ms(us):
    return "-" if us is None else "%.2f" % (us / 1000.0)
def fmt(v):
    return "-" if v is None else ("%g" % v if isinstance(v, float) else str(v))
def errs(k):
    return sum(x.get("errors", 0) + x.get("open_errors", 0) + (1 if x.get("failed") else 0)
               for x in by.get(k, []))
def ratio(a, b):
    return "%.2f" % (a / b) if a and b else "-"
# The proxy's CPU per operation (us): its CPU share over the run times the
# run's length over the operations; robust where the proxy is not the
# bottleneck (a loaded machine, the client's cpu saturated): 1e6 / it is
# what one core would sustain.
for x in rows:
    ops = x.get("requests") if x.get("unit") in ("tunnel", "reverse") else (
        x.get("completed") if x.get("unit") == "rate" else None)
    secs = x.get("seconds")
    if ops and secs and x.get("proxy_cpu_pct") is not None:
        x["cpu_us_per_op"] = x["proxy_cpu_pct"] / 100.0 * secs * 1e6 / ops
def us1(v):
    return "-" if v is None else "%.0f" % v
def core(v):
    return "-" if not v else "%.0f" % (1e6 / v)
peers = sorted({k[0] for k in by if k[0] != "direct"})
REF = "sluice-intercept"

if any(k[1] in ("tunnel", "reverse") for k in by):
    ref = med((REF, "tunnel"), "rps")
    print("## post: small POSTs over kept-alive tunnels")
    print()
    cref = med((REF, "tunnel"), "cpu_us_per_op")
    print("| peer | unit | rps (median) | x of this / sluice intercept | p50 us | p99 us | proxy cpu % | proxy cpu us per request | x per-request cpu / sluice intercept | requests/s one core would sustain | errors |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for k in sorted(by):
        if k[1] not in ("tunnel", "reverse"):
            continue
        rps = med(k, "rps")
        cu = med(k, "cpu_us_per_op")
        print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            k[0], k[1], fmt(rps), ratio(ref, rps), fmt(med(k, "lat_p50_us")),
            fmt(med(k, "lat_p99_us")), fmt(med(k, "proxy_cpu_pct")), us1(cu),
            ratio(cu, cref), core(cu), errs(k)))
    print()
    print("x column: sluice intercept rps divided by the row's rps (targets: mitmproxy >= 10, squid-bump >= 2, sluice reverse <= 1/0.7 = 1.43). The cpu columns: the proxy's CPU time per request (its share of one core over the run x the run's length / requests), medians over rounds; they hold where a proxy is not the bottleneck (proxy cpu % well below 100).")
    print()

if any(k[1] == "idle" for k in by):
    print("## idle: RSS per idle intercepted tunnel")
    print()
    print("| peer | idle tunnels open (median) | RSS per idle intercepted tunnel, bytes (median) |")
    print("|---|---|---|")
    for k in sorted(by):
        if k[1] == "idle":
            print("| %s | %s | %s |" % (k[0], fmt(med(k, "open")), fmt(med(k, "rss_per_conn_bytes"))))
    print()
    print("target: sluice <= 48 KiB (49152 bytes) per idle intercepted tunnel, both TLS legs")
    print()

if any(k[1] == "first" for k in by):
    # per round: the added cost = fresh p50 - cached p50; then the median over rounds
    for x in rows:
        if x["unit"] == "first" and "fresh_setup_p50_us" in x:
            x["added_setup_us"] = x["fresh_setup_p50_us"] - x["cached_setup_p50_us"]
            x["added_hs_us"] = x["fresh_handshake_p50_us"] - x["cached_handshake_p50_us"]
            x["added_get_us"] = x["fresh_get_p50_us"] - x["cached_get_p50_us"]
    sref = med((REF, "first"), "added_setup_us")
    print("## first: first CONNECT to a host not yet cached vs a cached one (CONNECT + TLS handshake)")
    print()
    print("| peer | fresh setup p50 ms | cached setup p50 ms | added ms (fresh - cached) | x of this / sluice added | fresh handshake p50 ms | cached handshake p50 ms | fresh p90 ms | cached p90 ms | first GET fresh / cached p50 ms | samples fresh/cached | errors |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for p in peers:
        k = (p, "first")
        if k not in by:
            continue
        add = med(k, "added_setup_us")
        print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s / %s | %s/%s | %s |" % (
            p, ms(med(k, "fresh_setup_p50_us")), ms(med(k, "cached_setup_p50_us")), ms(add),
            ratio(add, sref) if add and sref and add > 0 and sref > 0 else "-",
            ms(med(k, "fresh_handshake_p50_us")), ms(med(k, "cached_handshake_p50_us")),
            ms(med(k, "fresh_setup_p90_us")), ms(med(k, "cached_setup_p90_us")),
            ms(med(k, "fresh_get_p50_us")), ms(med(k, "cached_get_p50_us")),
            fmt(sum(x.get("fresh", 0) for x in by[k])), fmt(sum(x.get("cached", 0) for x in by[k])), errs(k)))
    print()
    print("setup = socket to the end of the TLS handshake (CONNECT, 200, handshake); added = per round the fresh median minus the cached median, then the median over rounds. Target: sluice added <= 2 ms.")
    print()

if any(k[1] == "rate" for k in by):
    ref = med((REF, "rate"), "conn_per_s")
    print("## rate: cached-leaf CONNECT + handshake + GET + close")
    print()
    cref = med((REF, "rate"), "cpu_us_per_op")
    print("| peer | conn/s (median) | x sluice / this | conn p50 ms | conn p90 ms | proxy cpu % | proxy cpu us per conn | x per-conn cpu / sluice | conn/s one core would sustain | load tool cpu % | load cpu busy % | proxy cpu busy % | errors |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for k in sorted(by):
        if k[1] != "rate":
            continue
        c = med(k, "conn_per_s")
        cu = med(k, "cpu_us_per_op")
        print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            k[0], fmt(c), ratio(ref, c), ms(med(k, "conn_p50_us")), ms(med(k, "conn_p90_us")),
            fmt(med(k, "proxy_cpu_pct")), us1(cu), ratio(cu, cref), core(cu), fmt(med(k, "tool_cpu_pct")),
            fmt(med(k, "load_cpu_busy")), fmt(med(k, "proxy_cpu_busy")), errs(k)))
    print()
    print("direct: TLS to the upstream itself, no proxy. Target: sluice >= 1.5x squid-bump. A load cpu near 100 % means the figure is a lower bound for the proxy (the client and the upstream share that cpu).")
    print()

if any(k[1] in ("sse", "sse-reverse") for k in by):
    ref = med((REF, "sse-reverse"), "first_p50_us")
    print("## sse: first server-sent event, one kept-alive connection")
    print()
    print("| peer | unit | first event p50 ms | p90 ms | minus sluice reverse p50 ms | whole response p50 ms | samples | errors |")
    print("|---|---|---|---|---|---|---|---|")
    for k in sorted(by):
        if k[1] not in ("sse", "sse-reverse"):
            continue
        f = med(k, "first_p50_us")
        print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            k[0], "tunnel" if k[0] != "direct" and k[1] == "sse" else ("reverse" if k[1] == "sse-reverse" else "upstream itself"),
            ms(f), ms(med(k, "first_p90_us")),
            "%+.2f" % ((f - ref) / 1000.0) if f is not None and ref is not None else "-",
            ms(med(k, "total_p50_us")), fmt(sum(x.get("samples", 0) for x in by[k])), errs(k)))
    print()
    print("first event: request written to the first data: line received; the upstream writes it with the head, the second event 10 ms later. Target: sluice tunnel within +-1 ms of sluice reverse.")
PY
