# sluice as an intercepting peer for tests/bench/intercept.sh: the forward
# listener on LISTEN:PORT with one intercepting route to the campaign's TLS
# upstream (ICPT_UP, default 198.18.2.2:8443; CONNECT to it is intercepted
# with a leaf from the ephemeral CA written to $dir/client-ca.pem), and a
# reverse listener on LISTEN:PORT+1 to the same route, sluice's own
# reference. GET and POST, any path. The route's hosts are ICPT_HOSTS
# (the campaign's names for the first-CONNECT probe, h0.bench.test ...),
# all intercepted, all to the same upstream, verified against ICPT_UP_CA
# (else the harness's upstream certificate). Kernel rules off (see
# ../sluice.sh).
# The binary: $SLUICE_BIN, else the release build made by tests/bench/run.
# PEER_ENV: BN_INTERCEPT_CA (the CA), BN_PROXY_AUTH (a run token for the
# CONNECTs) and BN_REVERSE (the reverse listener) with BN_REVERSE_AUTH.
SLUICE_BIN=${SLUICE_BIN:-$(cd "$PEER_DEF_DIR/../../.." && pwd)/build/bench/proxy/sluice}
PEER_VERSION="sluice ($("$SLUICE_BIN" --version 2>/dev/null || echo unknown)) intercept"

peer_render() {
	local listen=$1 port=$2 dir=$3 up=${ICPT_UP:-$UP_IP:8443} hosts="" h
	for h in ${ICPT_HOSTS:-}; do hosts="$hosts${hosts:+, }\"$h\""; done
	mkdir -p "$dir/state"
	head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$dir/token.key"
	chmod 600 "$dir/token.key"
	cat > "$dir/policy.json" <<JSON
{
  "listeners": [
    { "name": "bench", "type": "forward", "listen": "$listen:$port" },
    { "name": "bench-rev", "type": "reverse", "listen": "$listen:$((port + 1))",
      "route": "bench-icpt" } ],
  "tokens": { "max_ttl_s": 86400,
              "keys": [ { "alg": "HS256", "secret_file": "$dir/token.key" } ] },
  "intercept": { "ca": "ephemeral", "ca_cert_out": "$dir/client-ca.pem" },
  "routes": [
    { "audience": "bench-icpt", "methods": ["GET", "POST"], "path_prefixes": ["/"],
      "hosts": [$hosts],
      "connect": { "enabled": true, "intercept": true, "ports": [${up##*:}] },
      "upstream": { "url": "https://$up",
                    "ca_file": "${ICPT_UP_CA:-$BENCH_DIR/upstream/cert.pem}" } }
  ],
  "limits": { "max_connections": 30000, "per_client_connections": 30000,
              "idle_timeout_ms": 300000 },
  "audit": { "path": "$dir/audit.jsonl", "fsync": "${SLUICE_AUDIT_FSYNC:-interval}" },
  "netpolicy": { "mode": "off" },
  "state_dir": "$dir/state"
}
JSON
	local jwt
	jwt=$("$SLUICE_BIN" token mint --key "$dir/token.key" --alg HS256 \
	    --aud bench-icpt --sub bench --ttl 86400)
	PEER_ENV=("BN_INTERCEPT_CA=$dir/client-ca.pem"
	    "BN_PROXY_AUTH=Bearer $jwt"
	    "BN_REVERSE=$listen:$((port + 1))"
	    "BN_REVERSE_AUTH=Authorization: Bearer $jwt")
	PEER_CMD=("$SLUICE_BIN" run -c "$dir/policy.json")
}
