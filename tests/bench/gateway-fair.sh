#!/bin/bash
# Gateway mode with many sandboxes (issue 12, "Benchmarks"), in one run:
#
# 1. The small-request rate (keep-alive GET of a 200-byte body, through
#    sluice's forward listener to an nginx in its own namespace) with the
#    gateway serving 1 registered sandbox against 64 (target: within 5%,
#    the source-to-sandbox lookup is a hash). 64 connections in every case:
#    "1 sandbox x 64 conns" with 1 registered and with 64 registered (the
#    other 63 only registered, idle), and "8 sandboxes x 8 conns" with 64
#    registered (sbx-0, sbx-8, ... sbx-56 active at once). One sluice per
#    round measures the three: sbx-0 is in its policy, the other 63 are
#    added over the admin socket (sluice admin sandbox add) before the
#    64-sandbox rows and removed after, so the rows of a round are
#    measured back to back by one process, each in two halves of
#    DURATION / 2 in the order 1, 64x1, 64x8, 64x8, 64x1, 1 (a drift of
#    the machine over the round hits the three alike); the ratios printed
#    are the median of the rounds' own ratios. Also the same load straight to
#    the upstream without sluice: the ceiling of the load generator and
#    upstream, which must sit well above sluice's figures.
# 2. Fairness under a flood: limits.per_sandbox_rps = RPS (200), 64
#    registered; NB (3) sandboxes "B" each offer B_RATE (150) req/s paced
#    over 4 connections, with and without sandbox "A" flooding (A_CONNS,
#    64, closed-loop connections, as fast as answers come; each 429
#    closes its connection, so A reconnects at once). Reported: B's
#    achieved rate and latency with A against without (target: A costs B
#    <= 10%), A's answers per second (>= 10 x RPS to count as a flood),
#    its 2xx per second (~RPS) and how many got 429 rate_limited.
#
# Topology (namespaces of its own, gwfPID-*, removed on exit): a gateway
# namespace running sluice (netpolicy.mode "gateway", a forward listener
# on 0.0.0.0:3128), 64 sandbox namespaces gwfPID-s0..s63, each behind a
# veth whose gateway end is sbx-N (198.18.100.4N+1/30 there,
# 198.18.100.4N+2/30 in the sandbox, sandbox id "sbx-N", a token with
# sub "sbx-N"), and the upstream namespace (198.18.101.2, nginx, one
# worker). Mode B of ../shared/bench: sluice pinned to cpu1
# (SLUICE_CPUS), the load (gwload.c, one process opening each
# sandbox's sockets in that sandbox's namespace) and nginx to cpu0
# (LOAD_CPUS, UP_CPUS). Kernel rules: by default sluice's own gateway
# rules in the gateway namespace (anti-spoofing sets, listener per
# interface), part of the measured path; NETPOLICY=off runs sluice with
# --no-netpolicy instead. WORKERS=N puts "workers": N in the policy
# (with one core for sluice that measures the overhead only; give it
# SLUICE_CPUS=0,1 to let the engines spread).
#
# Each round starts a fresh sluice per part (1 registered + 63 added;
# 64 in the policy with the rate limit), parts in an order that rotates
# over the rounds. ~4 min at the defaults (per round 9 measurements, 6
# of them half as long, each after WARMUP s). AUDIT_DIR=DIR puts the
# audit log (fsync "interval") in a directory of its own under DIR (e.g.
# a tmpfs) instead of the work directory under /tmp.
#   sudo tests/bench/gateway-fair.sh   (ROUNDS=3 DURATION=10 WARMUP=1
#       RPS=200 NB=3 B_RATE=150 A_CONNS=64 NETPOLICY=gateway WORKERS=
#       SLUICE_CPUS=1 LOAD_CPUS=0 UP_CPUS=0 AUDIT_DIR=)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-1}
RPS=${RPS:-200}
NB=${NB:-3}
B_RATE=${B_RATE:-150}
A_CONNS=${A_CONNS:-64}
NETPOLICY=${NETPOLICY:-gateway}
WORKERS=${WORKERS:-}
SLUICE_CPUS=${SLUICE_CPUS:-1}
LOAD_CPUS=${LOAD_CPUS:-0}
UP_CPUS=${UP_CPUS:-0}
NSBX=64
case $NETPOLICY in gateway | off) ;; *)
	echo "NETPOLICY is gateway or off" >&2
	exit 2
	;;
esac
if [ "$NB" -lt 1 ] || [ "$NB" -gt 60 ]; then
	echo "NB is 1..60" >&2
	exit 2
fi

"$top/scripts/deps"
cmake -S "$top" -B "$top/build/bench" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$top/build/bench" -j "$(nproc)" --target sluice \
    -- --no-print-directory >/dev/null
bin=$top/build/bench/proxy/sluice
gwl=$top/build/bench/gwload
if [ ! -x "$gwl" ] || [ "$here/gwload.c" -nt "$gwl" ]; then
	cc -O2 -Wall -D_GNU_SOURCE -o "$gwl" "$here/gwload.c"
fi

tag=gwf$$
gw=$tag-gw
up=$tag-up
work=$(mktemp -d /tmp/sluice-gwfair.XXXXXX)
chmod 755 "$work" # nginx's worker reads www/ as nobody
auditdir=$work
if [ -n "${AUDIT_DIR:-}" ]; then
	auditdir=$(mktemp -d "$AUDIT_DIR/sluice-gwfair-audit.XXXXXX")
fi
pid='' upid='' lpid=''
created=()
cleanup() { # on any exit: every step runs, whatever fails before it
	local n p
	set +e
	for p in "$lpid" "$pid" "$upid"; do
		[ -n "$p" ] || continue
		kill "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	for n in "${created[@]}"; do
		ip netns del "$n" 2>/dev/null
	done
	rm -rf "$work"
	[ "$auditdir" = "$work" ] || rm -rf "$auditdir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ns_add() { # ns_add NAME: a namespace with lo up and the bench's TCP knobs
	ip netns add "$1"
	created+=("$1")
	ip -n "$1" link set lo up
	ip netns exec "$1" sysctl -qw net.ipv4.ip_local_port_range="1024 65000" \
	    net.ipv4.tcp_tw_reuse=1 net.core.somaxconn=16384 \
	    net.ipv4.tcp_max_syn_backlog=16384
}
gw_ip() { echo "198.18.100.$((4 * $1 + 1))"; } # gateway end of sbx-N
sb_ip() { echo "198.18.100.$((4 * $1 + 2))"; } # sandbox N's address

echo "setting up $NSBX sandbox namespaces..." >&2
ns_add "$gw"
ns_add "$up"
ip link add upl0 netns "$gw" type veth peer name eth0 netns "$up"
ip -n "$gw" addr add 198.18.101.1/24 dev upl0
ip -n "$gw" link set upl0 up
ip -n "$up" addr add 198.18.101.2/24 dev eth0
ip -n "$up" link set eth0 up
for ((i = 0; i < NSBX; i++)); do
	s=$tag-s$i
	ns_add "$s"
	ip link add "sbx-$i" netns "$gw" type veth peer name eth0 netns "$s"
	ip -n "$gw" addr add "$(gw_ip "$i")/30" dev "sbx-$i"
	ip -n "$gw" link set "sbx-$i" up
	ip -n "$s" addr add "$(sb_ip "$i")/30" dev eth0
	ip -n "$s" link set eth0 up
	ip -n "$s" route add default via "$(gw_ip "$i")"
done

# The upstream: nginx, one worker, /small a 200-byte body.
mkdir -p "$work/www" "$work/ngx-tmp" "$work/state"
head -c 199 /dev/zero | tr '\0' x > "$work/www/small"
echo >> "$work/www/small"
chmod 755 "$work/www"
chmod 644 "$work/www/small"
cat > "$work/nginx.conf" <<NGX
worker_processes 1;
pid $work/nginx.pid;
error_log $work/nginx-error.log warn;
daemon off;
events { worker_connections 16384; multi_accept on; }
http {
    access_log off;
    keepalive_timeout 120s;
    keepalive_requests 10000000;
    tcp_nodelay on;
    client_body_temp_path $work/ngx-tmp;
    proxy_temp_path $work/ngx-tmp;
    fastcgi_temp_path $work/ngx-tmp;
    uwsgi_temp_path $work/ngx-tmp;
    scgi_temp_path $work/ngx-tmp;
    server {
        listen 198.18.101.2:80 backlog=16384 default_server;
        root $work/www;
        location = /small { default_type text/plain; }
    }
}
NGX
ip netns exec "$up" taskset -c "$UP_CPUS" nginx -c "$work/nginx.conf" \
    >"$work/nginx.out" 2>&1 &
upid=$!
for _ in $(seq 100); do
	ip netns exec "$gw" curl -s -o /dev/null --max-time 1 \
	    http://198.18.101.2/small && break
	sleep 0.05
done
ip netns exec "$gw" curl -sf -o /dev/null --max-time 2 \
    http://198.18.101.2/small || {
	echo "nginx did not come up:" >&2
	cat "$work/nginx.out" "$work/nginx-error.log" >&2 2>/dev/null || true
	exit 1
}

# One HS256 key; each sandbox's token names it in sub.
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/key"
chmod 600 "$work/key"
mkdir -m 700 "$work/tok"
for ((i = 0; i < NSBX; i++)); do
	"$bin" token mint --key "$work/key" --alg HS256 --aud bench \
	    --sub "sbx-$i" --ttl 3600 > "$work/tok/sbx-$i"
done

write_policy() { # write_policy NREGISTERED PER_SANDBOX_RPS
	local i sep=
	{
		printf '{ "user": "64150",\n'
		[ -n "$WORKERS" ] && printf '  "workers": %s,\n' "$WORKERS"
		cat <<JSON
  "listeners": [ { "name": "gw", "type": "forward", "listen": "0.0.0.0:3128" } ],
  "tokens": { "keys": [ { "alg": "HS256", "secret_file": "$work/key" } ] },
  "routes": [ { "audience": "bench", "methods": ["GET"],
    "upstream": { "url": "http://198.18.101.2:80", "allow_plaintext": true } } ],
  "limits": { "per_sandbox_rps": $2 },
  "audit": { "path": "$auditdir/audit.jsonl", "fsync": "interval" },
  "netpolicy": { "mode": "gateway", "sandbox_interfaces": ["sbx-*"],
                 "log_group": 13 },
  "state_dir": "$work/state",
  "admin": { "socket": "$work/admin.sock" },
  "sandboxes": [
JSON
		for ((i = 0; i < $1; i++)); do
			printf '%s    { "id": "sbx-%d", "interface": "sbx-%d", "addresses": ["%s"] }' \
			    "$sep" "$i" "$i" "$(sb_ip "$i")"
			sep=$',\n'
		done
		printf '\n  ] }\n'
	} > "$work/policy.json"
}

start_sluice() { # start_sluice NREGISTERED PER_SANDBOX_RPS
	local np=()
	[ "$NETPOLICY" = off ] && np=(--no-netpolicy)
	write_policy "$1" "$2"
	rm -rf "$work/state" "$auditdir/audit.jsonl"
	mkdir -p "$work/state"
	: > "$work/sluice.err"
	ip netns exec "$gw" taskset -c "$SLUICE_CPUS" "$bin" run \
	    -c "$work/policy.json" "${np[@]}" 2>"$work/sluice.err" &
	pid=$!
	for _ in $(seq 200); do
		grep -q "sluice: ready" "$work/sluice.err" && return 0
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	echo "sluice did not get ready ($1 sandboxes, per_sandbox_rps $2):" >&2
	cat "$work/sluice.err" >&2
	exit 1
}

admin() { "$bin" admin --socket "$work/admin.sock" "$@"; }
register() { # sandboxes 1..63 over the admin socket (policy: sbx-0 alone)
	local i n
	for ((i = 1; i < NSBX; i++)); do
		admin sandbox add "sbx-$i" "sbx-$i" "$(sb_ip "$i")" >/dev/null
	done
	n=$(admin sandbox list | grep -c 'sbx-')
	if [ "$n" != "$NSBX" ]; then
		echo "sandbox list shows $n sandboxes, not $NSBX:" >&2
		admin sandbox list >&2
		exit 1
	fi
}
unregister() {
	local i
	for ((i = 1; i < NSBX; i++)); do
		admin sandbox del "sbx-$i" >/dev/null
	done
}

stop_sluice() {
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	pid=
}

grp() { # grp NAME SANDBOX CONNS RATE: a gwload group from sandbox N
	echo "$1,$tag-s$2,$(gw_ip "$2"):3128,$3,$4,$work/tok/sbx-$2"
}

sluice_ticks() { # CPU ticks (user + system) of sluice and its engines
	local p v t=0
	[ -n "$pid" ] || return 0
	for p in "$pid" $(cat /proc/"$pid"/task/*/children 2>/dev/null); do
		v=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null |
		    awk '{ print $12 + $13 }')
		t=$((t + ${v:-0}))
	done
	echo "$t"
}
core_ticks() { # core_ticks CPU: "busy total" ticks of one core, or nothing
	case $1 in *[!0-9]*) return 0 ;; esac
	awk -v c="cpu$1" '$1 == c { b = $2 + $3 + $4 + $7 + $8 + $9
	    print b, b + $5 + $6 }' /proc/stat
}
busy() { # busy "B0 T0" "B1 T1": percent
	if [ -z "$1" ] || [ -z "$2" ]; then
		echo -
		return 0
	fi
	echo "$1 $2" | awk '{ printf "%.0f\n", 100 * ($3 - $1) / ($4 - $2) }'
}

load() { # load OUT GROUP...: one gwload run (LOADDUR s, default DURATION),
	# its lines into OUT, then "cpu sluice=% load=% proxycore=%" (of one
	# core each)
	local out=$1 s0 s1 l0 l1 p0 p1 t0 t1 sl
	shift
	s0=$(sluice_ticks) l0=$(core_ticks "$LOAD_CPUS")
	p0=$(core_ticks "$SLUICE_CPUS") t0=$(date +%s%N)
	taskset -c "$LOAD_CPUS" "$gwl" -d "${LOADDUR:-$DURATION}" -w "$WARMUP" \
	    -u http://198.18.101.2/small "$@" > "$out" &
	lpid=$!
	wait "$lpid"
	lpid=''
	s1=$(sluice_ticks) l1=$(core_ticks "$LOAD_CPUS")
	p1=$(core_ticks "$SLUICE_CPUS") t1=$(date +%s%N)
	sl=-
	[ -n "$s0" ] && sl=$(awk -v a="$s0" -v b="$s1" -v t=$((t1 - t0)) \
	    -v hz="$(getconf CLK_TCK)" \
	    'BEGIN { printf "%.0f", 100 * (b - a) / hz / (t / 1e9) }')
	echo "cpu sluice=$sl load=$(busy "$l0" "$l1")" \
	    "proxycore=$(busy "$p0" "$p1")" >> "$out"
}

field() { # field FILE GROUPREGEX KEY [sum|max|min]: KEY over the groups
	awk -v g="^($2)\$" -v k="$3" -v how="${4:-sum}" '
	    $1 ~ g { for (i = 2; i <= NF; i++) { split($i, kv, "=")
		if (kv[1] != k) continue
		v = kv[2] + 0; n++
		if (how == "sum" || n == 1) s = (how == "sum" ? s + v : v)
		else if (how == "max" && v > s) s = v
		else if (how == "min" && v < s) s = v } }
	    END { printf "%.1f\n", s }' "$1"
}

res=$work/res
mkdir "$res"
one=$(grp s0 0 64 0)
spread=()
for ((i = 0; i < NSBX; i += 8)); do
	spread+=("$(grp "s$i" "$i" 8 0)")
done
bgroups=()
for ((i = 0; i < NB; i++)); do
	bgroups+=("$(grp "b$i" $((i + 2)) 4 "$B_RATE")")
done
agroup=$(grp a 1 "$A_CONNS" 0)

halves() { # halves BASE: BASE from BASE.a and BASE.b, each value averaged
	awk '{ k = $1; if (!(k in seen)) { seen[k] = 1; order[++n] = k }
	    for (i = 2; i <= NF; i++) { split($i, kv, "="); f = k SUBSEP kv[1]
		if (!(f in pos)) { pos[f] = 1; keys[k] = keys[k] " " kv[1] }
		if (kv[2] ~ /^[0-9.]+$/) { sum[f] += kv[2]; cnt[f]++ }
		else if (!(f in txt)) txt[f] = kv[2] } }
	    END { for (j = 1; j <= n; j++) { k = order[j]; line = k
		m = split(keys[k], ks, " ")
		for (i = 1; i <= m; i++) { f = k SUBSEP ks[i]
		    if (f in cnt) v = sprintf("%.1f", sum[f] / cnt[f])
		    else v = txt[f]
		    line = line " " ks[i] "=" v }
		print line } }' "$1.a" "$1.b" > "$1"
}

block() { # block NAME ROUND: one sluice (or none), its measurements
	local r=$2
	case $1 in
	direct)
		load "$res/$r-direct" "direct,$gw,198.18.101.2:80,64,0,-"
		;;
	reg)
		# ABBA in halves of DURATION, so that a drift of the machine
		# over the round hits the three rows alike.
		start_sluice 1 0
		LOADDUR=$(awk -v d="$DURATION" 'BEGIN { print d / 2 }')
		load "$res/$r-one1.a" "$one"
		register
		load "$res/$r-one64.a" "$one"
		load "$res/$r-spread64.a" "${spread[@]}"
		load "$res/$r-spread64.b" "${spread[@]}"
		load "$res/$r-one64.b" "$one"
		unregister
		load "$res/$r-one1.b" "$one"
		LOADDUR=
		for m in one1 one64 spread64; do
			halves "$res/$r-$m"
		done
		stop_sluice
		;;
	fair)
		start_sluice "$NSBX" "$RPS"
		if ((r % 2)); then
			load "$res/$r-flood" "$agroup" "${bgroups[@]}"
			load "$res/$r-base" "${bgroups[@]}"
		else
			load "$res/$r-base" "${bgroups[@]}"
			load "$res/$r-flood" "$agroup" "${bgroups[@]}"
		fi
		stop_sluice
		;;
	esac
}

blocks=(reg fair direct)
for ((r = 0; r < ROUNDS; r++)); do
	for ((i = 0; i < ${#blocks[@]}; i++)); do
		block "${blocks[$(((i + r) % ${#blocks[@]}))]}" "$r"
	done
	for m in direct one1 one64 spread64 base flood; do
		f=$res/$r-$m
		printf 'round %d %-8s 2xx/s %7.0f%s, %s\n' $((r + 1)) "$m" \
		    "$(field "$f" '[^a].*' ok_rps)" \
		    "$([ "$m" = flood ] && printf ' (B), A: %.0f answers/s, %.0f 2xx/s' \
			"$(field "$f" a att_rps)" "$(field "$f" a ok_rps)")" \
		    "$(grep '^cpu ' "$f")" >&2
	done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
med() { # med MEASUREMENT GROUPREGEX KEY [sum|max|min]: median over rounds
	local r
	for ((r = 0; r < ROUNDS; r++)); do
		field "$res/$r-$1" "$2" "$3" "${4:-sum}"
	done | median
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }'; }
# pratio M1 M0 GROUPREGEX KEY [how]: the median over rounds of each round's
# M1 / M0 (the two measured one after the other by the same sluice)
pratio() {
	local r
	for ((r = 0; r < ROUNDS; r++)); do
		ratio "$(field "$res/$r-$1" "$3" "$4" "${5:-sum}")" \
		    "$(field "$res/$r-$2" "$3" "$4" "${5:-sum}")"
		echo
	done | median
}
ms() { awk -v u="$1" 'BEGIN { printf "%.2f", u / 1000 }'; }

# Anything but 2xx where none is expected is a broken setup: say so.
for ((r = 0; r < ROUNDS; r++)); do
	for m in direct one1 one64 spread64 base flood; do
		g='[^a].*'
		[ "$m" = flood ] && g='b.*'
		o=$(field "$res/$r-$m" "$g" other)
		s=$(field "$res/$r-$m" "$g" s429)
		e=$(field "$res/$r-$m" "$g" err)
		if [ "${o%.*}" != 0 ] || [ "${s%.*}" != 0 ] ||
		    [ "${e%.*}" != 0 ]; then
			echo "warning: round $((r + 1)) $m: other=$o s429=$s" \
			    "err=$e ($(grep -o 'deny=[^ ]*' "$res/$r-$m" |
			    sort -u | tr '\n' ' '))" >&2
		fi
	done
done

direct=$(med direct direct ok_rps)
one1=$(med one1 s0 ok_rps)
one64=$(med one64 s0 ok_rps)
spread64=$(med spread64 's[0-9]+' ok_rps)
b_sep="b[0-9]+"
bbase=$(med base "$b_sep" ok_rps)
bflood=$(med flood "$b_sep" ok_rps)
bmin_base=$(med base "$b_sep" ok_rps min)
bmin_flood=$(med flood "$b_sep" ok_rps min)
b50_base=$(med base "$b_sep" p50_us max)
b50_flood=$(med flood "$b_sep" p50_us max)
b99_base=$(med base "$b_sep" p99_us max)
b99_flood=$(med flood "$b_sep" p99_us max)
a_att=$(med flood a att_rps)
a_ok=$(med flood a ok_rps)
a_429=$(med flood a s429)
a_other=$(med flood a other)
a_err=$(med flood a err)

printf '\ngateway-fair: sluice on cpu %s, load (gwload) on cpu %s, nginx on cpu %s;' \
    "$SLUICE_CPUS" "$LOAD_CPUS" "$UP_CPUS"
printf ' kernel rules: %s; workers: %s;\n' \
    "$([ "$NETPOLICY" = off ] && echo "none (--no-netpolicy)" ||
	echo "gateway (sluice's, in the gateway namespace)")" \
    "${WORKERS:-not set}"
printf 'medians of %d rounds, %s s each (after %s s warm-up); 64 keep-alive connections in part 1\n\n' \
    "$ROUNDS" "$DURATION" "$WARMUP"
cpus() { # cpus MEASUREMENT: "sluice% | load core% | sluice core%"
	printf '%s | %.0f | %.0f' \
	    "$([ "$1" = direct ] && echo - || printf '%.0f' "$(med "$1" cpu sluice)")" \
	    "$(med "$1" cpu load)" "$(med "$1" cpu proxycore)"
}
printf '| small GET, keep-alive, 64 conns | req/s | vs 1 registered | sluice CPU %% | cpu %s busy %% | cpu %s busy %% |\n|---|---|---|---|---|---|\n' \
    "$LOAD_CPUS" "$SLUICE_CPUS"
printf '| no sluice: gwload -> nginx (load + upstream ceiling) | %.0f | | %s |\n' \
    "$direct" "$(cpus direct)"
printf '| 1 registered: 1 sandbox x 64 conns | %.0f | 1.000 | %s |\n' \
    "$one1" "$(cpus one1)"
printf '| 64 registered: the same 1 sandbox x 64 conns (63 idle) | %.0f | %s | %s |\n' \
    "$one64" "$(pratio one64 one1 's[0-9]+' ok_rps)" "$(cpus one64)"
printf '| 64 registered: 8 sandboxes x 8 conns | %.0f | %s | %s |\n' \
    "$spread64" "$(pratio spread64 one1 's[0-9]+' ok_rps)" "$(cpus spread64)"
printf "\nratios: the median of each round's own ratio (per round one sluice measures the\nthree sluice rows: sbx-0 in its policy, the other 63 added, then removed, over the\nadmin socket)\n"
printf 'target: 64 registered within 5%% of 1 registered (ratio >= 0.950)\n\n'
printf '| fairness: 64 registered, per_sandbox_rps %s; B = %d sandboxes x %s req/s offered (4 conns each) | without A | A flooding | with/without |\n|---|---|---|---|\n' \
    "$RPS" "$NB" "$B_RATE"
printf '| B: 2xx req/s, all B together (offered %s) | %.1f | %.1f | %s |\n' \
    "$((NB * B_RATE))" "$bbase" "$bflood" "$(pratio flood base "$b_sep" ok_rps)"
printf '| B: 2xx req/s, the slowest B | %.1f | %.1f | %s |\n' \
    "$bmin_base" "$bmin_flood" "$(pratio flood base "$b_sep" ok_rps min)"
printf '| B: p50 latency ms (worst B) | %s | %s | %s |\n' \
    "$(ms "$b50_base")" "$(ms "$b50_flood")" "$(pratio flood base "$b_sep" p50_us max)"
printf '| B: p99 latency ms (worst B) | %s | %s | %s |\n' \
    "$(ms "$b99_base")" "$(ms "$b99_flood")" "$(pratio flood base "$b_sep" p99_us max)"
printf '| sluice CPU %% (of one core) | %.0f | %.0f | |\n' \
    "$(med base cpu sluice)" "$(med flood cpu sluice)"
printf '| A (%s closed-loop conns): answers/s (%.1fx the limit) | | %.0f | |\n' \
    "$A_CONNS" "$(awk -v a="$a_att" -v r="$RPS" 'BEGIN { print a / r }')" "$a_att"
printf '| A: 2xx/s | | %.1f | |\n' "$a_ok"
printf '| A: 429 rate_limited in %s s (per s) | | %.0f (%.0f) | |\n' \
    "$DURATION" "$a_429" "$(awk -v a="$a_429" -v d="$DURATION" 'BEGIN { print a / d }')"
printf '| A: other answers / errors in %s s | | %.0f / %.0f | |\n' \
    "$DURATION" "$a_other" "$a_err"
printf '\ntarget: A costs B <= 10%% (all-B ratio >= 0.900); a flood is >= 10x the limit\n'
