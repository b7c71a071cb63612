/*
 * Path checks (DESIGN.md "Paths"): a path either has exactly one reading or
 * is refused. sluice never normalizes a path, because the upstream's
 * normalizer (or a framework behind it) may disagree with ours and turn
 * "/v1/messages/../admin" into something path_prefixes never allowed.
 * Which prefixes are allowed is policy's business.
 *
 * Pure code (STYLE.md §7): no allocation, no global state, no recursion.
 */
#include <string.h>

#include "proxy/util/ascii.h"
#include "proxy/http/http1.h"

/*
 * Escapes that must never be encoded: an unreserved character has one
 * canonical (literal) form, so "%2e%2e" or "%6D" can only be there to slip
 * past a prefix check; '/' and '\' change the segment structure for any
 * server that decodes before splitting; control bytes have no business in
 * a path.
 */
static int
bad_escape(unsigned v)
{
	if ((v >= 'a' && v <= 'z') || (v >= 'A' && v <= 'Z') ||
	    (v >= '0' && v <= '9'))
		return 1;
	return v == '-' || v == '.' || v == '_' || v == '~' || v == '/' ||
	    v == '\\' || v < 0x20 || v == 0x7f;
}

/*
 * "." and ".." segments, also with a ";param" tail: some servers (Tomcat,
 * for one) strip path parameters before resolving dot segments, so
 * "/..;/" is a ".." to them.
 */
static int
dot_segment(const char *s, size_t n)
{
	const char *semi = memchr(s, ';', n);

	if (semi != NULL)
		n = (size_t)(semi - s);
	return (n == 1 && s[0] == '.') ||
	    (n == 2 && s[0] == '.' && s[1] == '.');
}

/*
 * Returns 0 when path[0..len) (without the query) starts with '/' and is
 * unambiguous, else -1 with *bad_off at the offending byte: the '%' of a
 * bad escape, the byte itself for a backslash or a byte outside VCHAR, the
 * first byte of a dot segment, or the second '/' of an empty segment. An
 * empty path, or one not starting with '/', is refused at offset 0.
 */
int
path_check(const char *path, size_t len, size_t *bad_off)
{
	size_t i, seg;
	unsigned char c;
	int hi, lo;

	*bad_off = 0;
	if (len == 0 || path[0] != '/')
		return -1;
	for (seg = 1, i = 1; i <= len; i++) {
		if (i == len || path[i] == '/') {
			/* A trailing '/' is fine, "//" anywhere else is not. */
			if ((i == seg && i < len) ||
			    dot_segment(path + seg, i - seg)) {
				*bad_off = seg;
				return -1;
			}
			seg = i + 1;
			continue;
		}
		c = (unsigned char)path[i];
		if (c == '\\' || c < 0x21 || c > 0x7e) {
			*bad_off = i;
			return -1;
		}
		if (c != '%')
			continue;
		if (len - i < 3 ||
		    (hi = ascii_hex_value((unsigned char)path[i + 1])) < 0 ||
		    (lo = ascii_hex_value((unsigned char)path[i + 2])) < 0 ||
		    bad_escape((unsigned)(hi << 4 | lo))) {
			*bad_off = i;
			return -1;
		}
		i += 2;
	}
	return 0;
}

/*
 * Non-zero when path[0..len) starts with prefix[0..plen) (exact case) at a
 * segment boundary. An empty prefix matches nothing (fail closed on a
 * configuration that forgot its prefix).
 */
int
path_has_prefix(const char *path, size_t len, const char *prefix, size_t plen)
{
	if (plen == 0 || len < plen || memcmp(path, prefix, plen) != 0)
		return 0;
	return len == plen || prefix[plen - 1] == '/' || path[plen] == '/';
}
