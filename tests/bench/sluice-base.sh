# shellcheck shell=bash
# A second sluice peer, for A/B figures in one campaign: the same peer file
# (sluice.sh: policy, token, parent + engine) with the binary of another
# build, $SLUICE_BASE_BIN (a Release build of the commit to compare with):
#   git worktree add /tmp/base REV
#   cmake -S /tmp/base -B /tmp/base/b -DCMAKE_BUILD_TYPE=Release
#   cmake --build /tmp/base/b --target sluice
#   sudo SLUICE_BASE_BIN=/tmp/base/b/proxy/sluice \
#       PEERS="direct sluice sluice-base" tests/bench/run --modes B
# peer.sh sources this file and calls peer_render LISTEN_IP PORT DIR.
. "$PEER_DEF_DIR/sluice.sh"
sluice_peer_bin=${SLUICE_BASE_BIN:?the binary to compare with}
PEER_VERSION="sluice base ($("$sluice_peer_bin" --version 2>/dev/null || echo unknown))"
