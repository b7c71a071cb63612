# Sourced by ready-time.sh and engine-restart.sh: a release build of
# sluice, and a work directory with an HS256 key, a state directory and a
# minimal policy (a forward listener on 127.0.0.1:3128, one route to
# 198.18.0.2 that need not exist, the sidecar kernel rules, the audit log).
# Needs $top; sets bin, work and ns (sl-NAME-PID) and removes both at exit.
#   minimal_policy NAME
minimal_policy() {
	"$top/scripts/deps"
	cmake -S "$top" -B "$top/build/bench" -DCMAKE_BUILD_TYPE=Release \
	    >/dev/null
	cmake --build "$top/build/bench" -j "$(nproc)" --target sluice \
	    -- --no-print-directory >/dev/null
	bin=$top/build/bench/proxy/sluice
	work=$(mktemp -d "/tmp/sluice-$1.XXXXXX")
	chmod 755 "$work"
	ns=sl-$1-$$
	trap 'ip netns del "$ns" 2>/dev/null || true; rm -rf "$work"' EXIT
	head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/key"
	chmod 600 "$work/key"
	mkdir -p "$work/state"
	cat > "$work/policy.json" <<JSON
{ "user": "64150",
  "listeners": [ { "type": "forward", "listen": "127.0.0.1:3128" } ],
  "tokens": { "keys": [ { "alg": "HS256", "secret_file": "$work/key" } ] },
  "routes": [ { "audience": "m", "upstream": { "url": "https://198.18.0.2/" } } ],
  "audit": { "path": "$work/audit.jsonl", "fsync": "interval" },
  "netpolicy": { "mode": "sidecar" }, "state_dir": "$work/state" }
JSON
}
