#!/bin/sh
# Fails if any of the given object files calls an allocator (STYLE.md §7:
# the HTTP/1.1 parser and chunked decoder are allocation-free).
status=0
for obj in "$@"; do
	bad=$(nm -u "$obj" | awk '{print $NF}' |
	    grep -E '^(malloc|calloc|realloc|free|strdup|strndup|reallocarray)$')
	if [ -n "$bad" ]; then
		echo "$obj calls: $bad" >&2
		status=1
	fi
done
[ $# -gt 0 ] || { echo "no objects given" >&2; exit 1; }
exit $status
