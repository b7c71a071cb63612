#!/bin/bash
# What `sluice exec` costs (issue 10 "Benchmarks"; on demand, not in the
# suite). Root.
#
# 1. Start-up: `sluice exec -- true` wall time, from nothing to exit (the
#    namespaces, the planted listeners, the wall, the command, the drain),
#    in one hyperfine run with `unshare -rn true`, `bwrap --unshare-net
#    --dev-bind / / true` and sandbox-runtime's `srt true` (npm
#    @anthropic-ai/sandbox-runtime, installed into build/bench-srt with
#    Debian's ripgrep and socat it needs; left out with a note when it
#    cannot be installed or run). `sluice exec --profile anthropic` (no
#    policy file, the ephemeral CA) too, when this build can run it.
#    Target: sluice exec median <= 30 ms.
# 2. Request rate through the exec forward listener against the sidecar's
#    (`sluice run`) forward listener: the same policy (one route, a plain
#    HTTP allow_plaintext upstream with an injected header), the same fake
#    upstream (fakeup --plain in its own namespace, 198.18.199.2:80), the
#    same client (wrk, absolute-form POSTs with Proxy-Authorization, kept
#    alive), rounds alternating. For exec, wrk runs as the sandboxed
#    command. sluice on cpu 1, wrk and fakeup on cpu 0. Target: exec >=
#    0.95 x sidecar.
#
#   sudo tests/bench/exec.sh [--runs N] [--rounds N] [--duration S]
#       [--conns N] [--only start|rate]
#
# Packages installed when missing: hyperfine, bubblewrap, wrk (and ripgrep,
# socat for srt). The machine may be shared: compare within one run.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
RUNS=30
ROUNDS=3
DUR=5
CONNS=16
ONLY=""
profile_note=""
while [ $# -gt 0 ]; do
	case $1 in
	--runs) RUNS=$2; shift 2 ;;
	--rounds) ROUNDS=$2; shift 2 ;;
	--duration) DUR=$2; shift 2 ;;
	--conns) CONNS=$2; shift 2 ;;
	--only) ONLY=$2; shift 2 ;;
	*) echo "usage: $0 [--runs N] [--rounds N] [--duration S] [--conns N] [--only start|rate]" >&2; exit 2 ;;
	esac
done
log() { echo "exec-bench: $*" >&2; }
die() { log "$*"; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root"

need=""
command -v hyperfine >/dev/null || need="$need hyperfine"
command -v bwrap >/dev/null || need="$need bubblewrap"
command -v wrk >/dev/null || need="$need wrk"
command -v rg >/dev/null || need="$need ripgrep"
command -v socat >/dev/null || need="$need socat"
if [ -n "$need" ]; then
	log "installing:$need"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null ||
	    { apt-get update -qq >/dev/null &&
	      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null; } ||
	    log "could not install:$need"
fi
for t in hyperfine bwrap wrk; do
	command -v "$t" >/dev/null || die "$t is missing"
done

cmake -S "$top" -B "$top/build/bench" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$top/build/bench" -j "$(nproc)" --target sluice fakeup \
    -- --no-print-directory >/dev/null
SLUICE=${SLUICE_BIN:-$top/build/bench/proxy/sluice}
FAKEUP=$top/build/bench/tests/fakeup

work=$(mktemp -d /tmp/sluice-exec-bench.XXXXXX)
chmod 755 "$work"
tag=sxb$$
NS=${tag}s
UPNS=${tag}u
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	ip netns del "$NS" 2>/dev/null || true
	ip netns del "$UPNS" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

# -- srt -------------------------------------------------------------------
srt=""
srt_note=""
srt_dir=$top/build/bench-srt
if command -v npm >/dev/null && command -v node >/dev/null; then
	if [ ! -x "$srt_dir/node_modules/.bin/srt" ]; then
		mkdir -p "$srt_dir"
		(cd "$srt_dir" && npm install --silent --no-audit --no-fund \
		    @anthropic-ai/sandbox-runtime >/dev/null 2>&1) ||
		    srt_note="npm install @anthropic-ai/sandbox-runtime failed"
	fi
	if [ -x "$srt_dir/node_modules/.bin/srt" ]; then
		cat > "$work/srt.json" <<-'EOF'
		{"network": {"allowedDomains": ["example.com"], "deniedDomains": []},
		 "filesystem": {"denyRead": [], "allowWrite": ["/tmp"], "denyWrite": []}}
		EOF
		if "$srt_dir/node_modules/.bin/srt" -s "$work/srt.json" true \
		    > "$work/srt.out" 2>&1; then
			srt=$srt_dir/node_modules/.bin/srt
		else
			srt_note="srt cannot run here: $(tail -1 "$work/srt.out")"
		fi
	fi
else
	srt_note="no node/npm: srt left out"
fi

# -- the policy: one route to a plain HTTP upstream, an injected header ----
head -c 32 /dev/urandom > "$work/k1.key"
printf 'sk-bench-not-a-real-key\n' > "$work/upstream.key"
chmod 600 "$work/k1.key" "$work/upstream.key"
mkdir -m 700 "$work/state"
cat > "$work/policy.json" <<EOF
{
  "listeners": [{"name": "fwd", "type": "forward", "listen": "127.0.0.1:3128"}],
  "tokens": {"max_ttl_s": 3600,
             "keys": [{"kid": "k1", "alg": "HS256", "secret_file": "$work/k1.key"}]},
  "routes": [{
    "audience": "model", "hosts": ["model.test"], "methods": ["POST"],
    "path_prefixes": ["/v1"], "max_requests_per_token": 1000000000,
    "connect": {"enabled": false},
    "upstream": {"url": "http://198.18.199.2:80", "allow_plaintext": true,
                 "headers": [{"name": "x-api-key",
                              "value_file": "$work/upstream.key"}]}}],
  "limits": {"per_client_refusals_per_s": 0, "max_connections": 4096},
  "audit": {"path": "$work/audit-sidecar.jsonl", "fsync": "never"},
  "netpolicy": {"mode": "off"},
  "state_dir": "$work/state"
}
EOF
chmod 600 "$work/policy.json"

# -- 1. start-up ----------------------------------------------------------
if [ "$ONLY" != rate ]; then
printf 'sk-ant-bench-not-a-real-key\n' > "$work/anthropic.key"
chmod 600 "$work/anthropic.key"
cmds=(-n "sluice exec -c policy -- true"
      "$SLUICE exec -c $work/policy.json --audit $work/start-audit.jsonl -- true")
profile_note=""
if "$SLUICE" exec --profile anthropic --key-file "$work/anthropic.key" \
    --audit "$work/start-audit.jsonl" -- true > "$work/profile.out" 2>&1; then
	cmds+=(-n "sluice exec --profile anthropic -- true"
	       "$SLUICE exec --profile anthropic --key-file $work/anthropic.key --audit $work/start-audit.jsonl -- true")
else
	profile_note="sluice exec --profile anthropic left out: $(grep -v '^sluice: [0-9]' "$work/profile.out" | tail -1)"
fi
cmds+=(-n "unshare -rn true" "unshare -rn true"
       -n "bwrap --unshare-net" "bwrap --unshare-net --dev-bind / / true")
[ -n "$srt" ] && cmds+=(-n "srt true" "$srt -s $work/srt.json true")
log "start-up: $RUNS runs each"
# -i: bwrap's --dev-bind / / fails now and then on a machine where other
# namespaces come and go under /run/netns (a mount vanishes mid-copy).
hyperfine -N -i --warmup 3 --runs "$RUNS" --export-json "$work/start.json" \
    "${cmds[@]}" >/dev/null 2>"$work/hyperfine.err" ||
    die "hyperfine: $(tail -3 "$work/hyperfine.err")"
fi

# -- 2. request rate --------------------------------------------------------
: > "$work/rate.jsonl"
if [ "$ONLY" != start ]; then
ip netns add "$NS"
ip netns add "$UPNS"
ip -n "$NS" link set lo up
ip -n "$UPNS" link set lo up
ip link add "${tag}a" netns "$NS" type veth peer name "${tag}b" netns "$UPNS"
ip -n "$NS" addr add 198.18.199.1/24 dev "${tag}a"
ip -n "$UPNS" addr add 198.18.199.2/24 dev "${tag}b"
ip -n "$NS" link set "${tag}a" up
ip -n "$UPNS" link set "${tag}b" up
ip netns exec "$UPNS" taskset -c 0 "$FAKEUP" --listen 198.18.199.2:80 --plain \
    --ready "$work/fakeup.ready" > "$work/fakeup.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ -e "$work/fakeup.ready" ] && break; sleep 0.1; done
[ -e "$work/fakeup.ready" ] || die "fakeup did not start: $(cat "$work/fakeup.log")"

cat > "$work/post.lua" <<'EOF'
wrk.method = "POST"
wrk.path = "http://model.test/v1/messages"
wrk.body = string.rep("x", 64)
wrk.headers["Host"] = "model.test"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Proxy-Authorization"] = "Bearer " .. os.getenv("TOK")
EOF
WRK="taskset -c 0 wrk -t 1 -c $CONNS -d ${DUR}s -s $work/post.lua http://127.0.0.1:3128/"
tok=$("$SLUICE" token mint --key "$work/k1.key" --kid k1 --alg HS256 \
    --aud model --sub bench --ttl 3600)

# one_round MODE: one wrk run, its JSON line appended to rate.jsonl
one_round() {
	local mode=$1 out=$work/wrk-$1-$r.out sp
	if [ "$mode" = sidecar ]; then
		ip netns exec "$NS" taskset -c 1 "$SLUICE" run -c "$work/policy.json" \
		    > /dev/null 2> "$work/sidecar.err" &
		sp=$!
		pids+=($sp)
		for _ in $(seq 100); do
			grep -q 'sluice: ready' "$work/sidecar.err" && break
			sleep 0.05
		done
		ip netns exec "$NS" env TOK="$tok" $WRK > "$out" 2>&1 || true
		kill "$sp"
		wait "$sp" || true
	else
		ip netns exec "$NS" taskset -c 1 "$SLUICE" exec -c "$work/policy.json" \
		    --audit "$work/audit-exec.jsonl" -- sh -c \
		    'TOK=$(cat "$SLUICE_TOKEN_FILE") exec '"$WRK" \
		    > "$out" 2> "$work/exec.err" || true
	fi
	python3 - "$mode" "$r" "$out" >> "$work/rate.jsonl" <<'PY'
import json, re, sys
mode, rnd, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
t = open(path).read()
m = re.search(r"Requests/sec:\s+([0-9.]+)", t)
bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", t)
err = re.search(r"Socket errors:.*", t)
lat = re.search(r"Latency\s+(\S+)", t)
print(json.dumps({"mode": mode, "round": rnd,
                  "rps": float(m.group(1)) if m else None,
                  "non2xx": int(bad.group(1)) if bad else 0,
                  "socket_errors": err.group(0) if err else "",
                  "lat_avg": lat.group(1) if lat else None}))
PY
}
for ((r = 1; r <= ROUNDS; r++)); do
	if ((r % 2)); then order="sidecar exec"; else order="exec sidecar"; fi
	for mode in $order; do
		log "request rate: round $r/$ROUNDS, $mode"
		one_round "$mode"
	done
done
fi

# -- tables ---------------------------------------------------------------
echo "date_utc: $(date -u +%FT%TZ); $(uname -srm); $(nproc) cpus; load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
[ -s "$work/start.json" ] && python3 - "$work/start.json" "$RUNS" <<'PY'
import json, statistics, sys
r = json.load(open(sys.argv[1]))["results"]
ref = statistics.median(r[0]["times"])
print("Start-up, wall time from nothing to exit (%s runs each, hyperfine -N)" % sys.argv[2])
print()
print("| command | median ms | mean ms | min ms | max ms | median / sluice exec | failed runs |")
print("|---|---|---|---|---|---|---|")
for x in r:
    t = x["times"]
    bad = sum(1 for c in x.get("exit_codes", []) if c != 0)
    print("| %s | %.1f | %.1f | %.1f | %.1f | %.2f | %d |" % (
        x["command"], statistics.median(t) * 1e3, statistics.mean(t) * 1e3,
        min(t) * 1e3, max(t) * 1e3, statistics.median(t) / ref, bad))
print()
print("target: sluice exec median <= 30 ms")
PY
[ -n "$profile_note" ] && echo "note: $profile_note"
[ -n "$srt_note" ] && echo "note: $srt_note"
echo
[ -s "$work/rate.jsonl" ] && python3 - "$work/rate.jsonl" "$DUR" "$CONNS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("Request rate, forward listener, plain HTTP upstream (wrk -t1 -c%s, %s s a round)" % (sys.argv[3], sys.argv[2]))
print()
print("| listener | rps per round | median rps | non-2xx | x sidecar |")
print("|---|---|---|---|---|")
med = {}
for mode in ("sidecar", "exec"):
    v = [x["rps"] for x in rows if x["mode"] == mode and x["rps"]]
    med[mode] = statistics.median(v) if v else None
for mode in ("sidecar", "exec"):
    rs = [x for x in rows if x["mode"] == mode]
    ratio = "%.3f" % (med[mode] / med["sidecar"]) if med[mode] and med["sidecar"] else "-"
    print("| %s | %s | %s | %d | %s |" % (
        "sluice exec (forward, in the sandbox)" if mode == "exec" else "sluice run (sidecar forward)",
        ", ".join("%.0f" % x["rps"] if x["rps"] else "failed" for x in rs),
        "%.0f" % med[mode] if med[mode] else "-",
        sum(x["non2xx"] for x in rs), ratio))
print()
print("target: exec >= 0.95 x sidecar")
PY
true
