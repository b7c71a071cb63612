# shellcheck shell=bash
# floor as a peer of ../shared/bench: the least a forward proxy can do per
# connection on this kernel (floor.c: accept, connect, relay, close; no
# parsing past the target, no policy, no log). Measured in the same run as
# sluice, it splits a figure into what the kernel and load generator cost
# (floor's ratio to direct) and what sluice adds above it:
#   PEERS="direct floor sluice squid" WL=connect_plain_rate tests/bench/ab
# peer.sh sources this file and calls peer_render LISTEN_IP PORT DIR.
floor_src="$PEER_DEF_DIR/floor.c"
floor_bin="$STATE/tools/floor"
PEER_VERSION="floor (tests/bench/floor.c)"

peer_render() {
	local listen=$1 port=$2
	mkdir -p "$STATE/tools"
	if [ ! -x "$floor_bin" ] || [ "$floor_src" -nt "$floor_bin" ]; then
		cc -O2 -Wall -o "$floor_bin" "$floor_src" || return 1
	fi
	PEER_CMD=("$floor_bin" "$listen:$port")
}
