# shellcheck shell=bash
# sluice run --single-process as a peer of ../shared/bench: the same policy,
# token and binary as sluice.sh (the privilege-separated parent + engine),
# in the old one-process mode, so one campaign measures what the split
# costs: PEERS="direct sluice sluice-single" tests/bench/run --modes B.
# peer.sh sources this file and calls peer_render LISTEN_IP PORT DIR.
. "$PEER_DEF_DIR/sluice.sh"
PEER_VERSION="$PEER_VERSION --single-process"
eval "sluice_privsep_render() $(declare -f peer_render | tail -n +2)"

peer_render() {
	sluice_privsep_render "$@"
	PEER_CMD+=(--single-process)
}
