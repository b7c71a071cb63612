#!/bin/bash
# Apply time of sluice's kernel rules against `nft -f` of the same ruleset
# text, in the same run, in a network namespace made here (and removed on
# exit): the sidecar ruleset, and the same with 10,000 upstream set
# elements. Not a test. Root.
#
# sluice's side is netpolicy_apply_bench.c (the netpolicy library's model
# and np_apply(), as `sluice netpolicy apply` and the daemon use them; a
# policy file cannot hold 10,000 routes). nft's side is the text that
# driver's "show" prints, preceded by "table ...; delete table ..." so that
# both replace the table in one batch (sluice: add, delete, add). Both run
# under `ip netns exec`, alternating, and the script checks that both make
# the same table. Prints the medians and the ratio sluice/nft (target <= 1).
#   sudo tests/bench/netpolicy-apply.sh [RUNS]      (default 20)
# The library comes from $SLUICE_BUILD (default build/bench, built here
# in Release if missing).
set -euo pipefail
runs=${1:-20}
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
build=${SLUICE_BUILD:-$top/build/bench}
[ "$(id -u)" = 0 ] || { echo "needs root" >&2; exit 2; }

lib=$build/netpolicy/libsluice_netpolicy.a
if [ ! -f "$lib" ]; then
	cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build "$build" --target sluice_netpolicy >/dev/null
fi

ns=npbench$$
dir=$(mktemp -d /tmp/sluice-npbench.XXXXXX)
cleanup() {
	ip netns del "$ns" 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT INT TERM
ip netns add "$ns"

drv=$dir/npbench
# shellcheck disable=SC2046
cc -O2 -std=c11 -D_GNU_SOURCE -I"$top" "$here/netpolicy_apply_bench.c" \
    "$lib" $(pkg-config --cflags --libs libnftnl libmnl) -o "$drv"

now_us() {
	local t
	t=$(date +%s%N)
	echo $((t / 1000))
}

median() {
	sort -n | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2];
	    else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

bench() {
	local name=$1 n=$2 txt=$dir/$1.nft i t0 t1 a b
	{
		echo "table inet sluice"
		echo "delete table inet sluice"
		"$drv" show "$n"
	} > "$txt"
	# Same table either way (a fresh apply has zero counters).
	ip netns exec "$ns" "$drv" apply "$n"
	a=$(ip netns exec "$ns" nft list table inet sluice | md5sum)
	ip netns exec "$ns" nft -f "$txt"
	b=$(ip netns exec "$ns" nft list table inet sluice | md5sum)
	[ "$a" = "$b" ] || { echo "$name: the two tables differ" >&2; exit 1; }
	: > "$dir/$name.t-sluice"
	: > "$dir/$name.t-nft"
	for i in $(seq "$runs"); do
		t0=$(now_us)
		ip netns exec "$ns" "$drv" apply "$n"
		t1=$(now_us)
		echo $((t1 - t0)) >> "$dir/$name.t-sluice"
		t0=$(now_us)
		ip netns exec "$ns" nft -f "$txt"
		t1=$(now_us)
		echo $((t1 - t0)) >> "$dir/$name.t-nft"
	done
	local s m
	s=$(median < "$dir/$name.t-sluice")
	m=$(median < "$dir/$name.t-nft")
	awk -v name="$name" -v s="$s" -v m="$m" -v runs="$runs" 'BEGIN {
	    printf "%-22s median of %d: sluice %8.2f ms   nft -f %8.2f ms   ratio %.2f\n",
	        name, runs, s / 1000, m / 1000, s / m }'
}

echo "$(nft --version); kernel $(uname -r)"
bench "sidecar" 0
bench "sidecar+10000 elements" 10000
