# mitmproxy as an intercepting peer for tests/bench/intercept.sh (issue 16's
# interception campaigns): Debian's mitmproxy (apt-get install -y mitmproxy;
# tests/bench/intercept.sh installs it when missing), mitmdump in regular
# mode with its own CA, made by mitmproxy itself at start in $dir/conf
# (mitmproxy-ca-cert.pem is what clients trust). Upstream TLS is verified
# against the campaign's upstream certificate (ICPT_UP_CA, else the
# harness's). peers/mitmproxy-addon.py maps the campaign's host names
# (*.bench.test) to the upstream and streams server-sent events. No flow
# output.
# Contract beyond ../shared/bench's peers: peer_render sets PEER_ENV with
# BN_INTERCEPT_CA, the CA file the clients must trust (it may appear only
# once the proxy has started).
PEER_VERSION="mitmproxy $(mitmdump --version 2>/dev/null | sed -n 's/^Mitmproxy: //p')"
peer_render() {
	local listen=$1 port=$2 dir=$3
	mkdir -p "$dir/conf"
	PEER_ENV=("BN_INTERCEPT_CA=$dir/conf/mitmproxy-ca-cert.pem")
	PEER_CMD=(mitmdump --mode regular --listen-host "$listen"
	    --listen-port "$port" --set confdir="$dir/conf"
	    --set ssl_verify_upstream_trusted_ca="${ICPT_UP_CA:-$BENCH_DIR/upstream/cert.pem}"
	    -s "$PEER_DEF_DIR/mitmproxy-addon.py"
	    --set flow_detail=0 --set termlog_verbosity=warn
	    --set connection_strategy=lazy)
}
