# sluice as a peer of ../shared/bench (see its README, "Plugging in sluice").
# peer.sh sources this file and calls peer_render LISTEN_IP PORT DIR.
# The binary: $SLUICE_BIN, else the release build made by tests/bench/run
# (set anew at every source: sluice-base.sh changes it for its own starts).
sluice_peer_bin=${SLUICE_BIN:-$(cd "$PEER_DEF_DIR/../.." && pwd)/build/bench/proxy/sluice}
PEER_VERSION="sluice ($("$sluice_peer_bin" --version 2>/dev/null || echo unknown))"

peer_render() {
	local listen=$1 port=$2 dir=$3
	mkdir -p "$dir/state"
	head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$dir/token.key"
	chmod 600 "$dir/token.key"
	# Two routes on one upstream host: plain HTTP on :80 (absolute-form
	# requests and CONNECT :80) and TLS on :443 (CONNECT :443). The
	# workloads send GET only. Kernel rules off: they would also filter
	# the peers measured after sluice in the same namespaces.
	# per_client_connections: every client of the campaign is one address
	# (198.18.1.2), and the memory workloads hold 5000 connections.
	cat > "$dir/policy.json" <<JSON
{
  "listeners": [ { "name": "bench", "type": "forward", "listen": "$listen:$port" } ],
  "tokens": { "max_ttl_s": 86400,
              "keys": [ { "alg": "HS256", "secret_file": "$dir/token.key" } ] },
  "routes": [
    { "audience": "bench-http", "methods": ["GET"], "path_prefixes": ["/"],
      "connect": { "enabled": true },
      "upstream": { "url": "http://$UP_IP:80", "allow_plaintext": true } },
    { "audience": "bench-tls", "methods": ["GET"], "path_prefixes": ["/"],
      "connect": { "enabled": true },
      "upstream": { "url": "https://$UP_IP:443",
                    "ca_file": "$BENCH_DIR/upstream/cert.pem" } }
  ],
  "limits": { "max_connections": 30000, "per_client_connections": 30000,
              "idle_timeout_ms": 300000 },
  "audit": { "path": "$dir/audit.jsonl", "fsync": "${SLUICE_AUDIT_FSYNC:-interval}" },
  "netpolicy": { "mode": "off" },
  "state_dir": "$dir/state"
}
JSON
	local jwt
	jwt=$("$sluice_peer_bin" token mint --key "$dir/token.key" --alg HS256 \
	    --aud bench-http --aud bench-tls --sub bench --ttl 86400)
	PEER_ENV=("BN_PROXY_AUTH=Bearer $jwt")
	PEER_CMD=("$sluice_peer_bin" run -c "$dir/policy.json")
}
