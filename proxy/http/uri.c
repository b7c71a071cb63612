/*
 * Request targets (RFC 9112 §3.2) and Host values (RFC 9110 §7.2): which
 * form a target has, and its host, port, path and query as slices of the
 * input. Hosts are checked strictly enough that no resolver can read them
 * as something else (no userinfo, no numeric forms other than a plain
 * dotted quad). Whether a host or path is allowed is policy's business.
 *
 * Pure code (STYLE.md §7): no allocation, no global state, no recursion.
 */
#include <arpa/inet.h>
#include <netinet/in.h>

#include <string.h>

#include "proxy/util/ascii.h"
#include "proxy/http/http1.h"

#define HOST_MAX    253 /* a DNS name's textual maximum (RFC 1035 §2.3.4) */
#define V6_TEXT_MAX 45  /* longest IPv6 text, INET6_ADDRSTRLEN - 1 */

static int
fail(const char **why, const char *msg)
{
	if (why != NULL)
		*why = msg;
	return -1;
}

static int
is_digit(unsigned char c)
{
	return c >= '0' && c <= '9';
}

static int
is_hex(unsigned char c)
{
	return ascii_hex_value(c) >= 0;
}

static int
is_alpha(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* unreserved / sub-delims of RFC 3986 §2: a reg-name's literal bytes. */
static int
is_regname_char(unsigned char c)
{
	if (is_alpha(c) || is_digit(c))
		return 1;
	return c != '\0' && strchr("-._~!$&'()*+,;=", c) != NULL;
}

/*
 * A dotted quad in its one plain form: four decimal parts of 1..3 digits,
 * each 0..255, without leading zeros (inet_aton would read "010" as
 * octal 8).
 */
static int
is_dotted_quad(const char *h, size_t n)
{
	size_t i = 0, start;
	unsigned part, v;

	for (part = 0; part < 4; part++) {
		if (part > 0) {
			if (i >= n || h[i] != '.')
				return 0;
			i++;
		}
		start = i;
		v = 0;
		while (i < n && is_digit((unsigned char)h[i]) && i - start < 3)
			v = v * 10 + (unsigned)(h[i++] - '0');
		if (i == start || v > 255 || (h[start] == '0' && i - start > 1))
			return 0;
	}
	return i == n;
}

/*
 * Non-zero when the last label of h (one trailing dot ignored) is all
 * digits or "0x" and hex digits. Resolvers such as getaddrinfo() treat
 * such names as IPv4 numbers ("127.1", "0x7f000001", "2130706433"), so
 * they must be a plain dotted quad or nothing (as the WHATWG URL
 * standard's "ends in a number" rule).
 */
static int
ends_in_number(const char *h, size_t n)
{
	size_t s, i;

	if (n > 0 && h[n - 1] == '.')
		n--;
	for (s = n; s > 0 && h[s - 1] != '.'; s--)
		;
	if (s == n)
		return 0;
	if (n - s >= 2 && h[s] == '0' && (h[s + 1] == 'x' || h[s + 1] == 'X')) {
		for (i = s + 2; i < n; i++)
			if (!is_hex((unsigned char)h[i]))
				return 0;
		return 1;
	}
	for (i = s; i < n; i++)
		if (!is_digit((unsigned char)h[i]))
			return 0;
	return 1;
}

/* A reg-name or dotted quad (not bracketed): sets u's host fields. */
static int
parse_name(const char *h, size_t n, struct uri *u, const char **why)
{
	size_t i;

	if (n == 0)
		return fail(why, "empty host");
	if (n > HOST_MAX)
		return fail(why, "host too long");
	for (i = 0; i < n; i++) {
		if (h[i] == '%') {
			if (n - i < 3 || !is_hex((unsigned char)h[i + 1]) ||
			    !is_hex((unsigned char)h[i + 2]))
				return fail(why, "bad percent escape in host");
			i += 2;
		} else if (!is_regname_char((unsigned char)h[i])) {
			return fail(why, "bad character in host");
		}
	}
	if (is_dotted_quad(h, n))
		u->host_type = URI_HOST_V4;
	else if (ends_in_number(h, n))
		return fail(why, "ambiguous numeric host");
	else
		u->host_type = URI_HOST_NAME;
	u->host = h;
	u->host_len = n;
	return 0;
}

/* "[" IPv6address "]": validated by inet_pton; IPvFuture and zones refused. */
static int
parse_v6(const char *h, size_t n, struct uri *u, const char **why)
{
	char text[V6_TEXT_MAX + 1];
	struct in6_addr a;
	size_t i;

	if (n == 0)
		return fail(why, "empty host");
	if (h[0] == 'v' || h[0] == 'V')
		return fail(why, "IPvFuture not allowed");
	if (n > V6_TEXT_MAX)
		return fail(why, "bad IPv6 address");
	/*
	 * IMPORTANT: inet_pton() reads a C string, so a NUL would end the
	 * text early and let whatever follows it pass unchecked.
	 */
	for (i = 0; i < n; i++)
		if (!is_hex((unsigned char)h[i]) && h[i] != ':' && h[i] != '.')
			return fail(why, "bad IPv6 address");
	memcpy(text, h, n);
	text[n] = '\0';
	if (inet_pton(AF_INET6, text, &a) != 1)
		return fail(why, "bad IPv6 address");
	u->host_type = URI_HOST_V6;
	u->host = h;
	u->host_len = n;
	return 0;
}

/* 1..5 digits, 1..65535. */
static int
parse_port(const char *p, size_t n, struct uri *u, const char **why)
{
	unsigned v = 0;
	size_t i;

	if (n == 0)
		return fail(why, "empty port");
	if (n > 5)
		return fail(why, "bad port");
	for (i = 0; i < n; i++) {
		if (!is_digit((unsigned char)p[i]))
			return fail(why, "bad port");
		v = v * 10 + (unsigned)(p[i] - '0');
	}
	if (v == 0 || v > 65535)
		return fail(why, "bad port");
	u->port = (uint16_t)v;
	u->has_port = 1;
	return 0;
}

/*
 * authority = host [ ":" port ] without userinfo (RFC 3986 §3.2, RFC 9110
 * §4.2.4 forbids userinfo in http(s) URIs: "user@evil" games are refused).
 */
static int
parse_authority(const char *p, size_t n, struct uri *u, int need_port,
    const char **why)
{
	const char *end;
	size_t hl;

	if (n == 0)
		return fail(why, "empty host");
	if (memchr(p, '@', n) != NULL)
		return fail(why, "userinfo not allowed");
	if (p[0] == '[') {
		if ((end = memchr(p, ']', n)) == NULL)
			return fail(why, "unterminated IPv6 literal");
		if (parse_v6(p + 1, (size_t)(end - p) - 1, u, why) == -1)
			return -1;
		hl = (size_t)(end - p) + 1;
	} else {
		end = memchr(p, ':', n);
		hl = end != NULL ? (size_t)(end - p) : n;
		if (parse_name(p, hl, u, why) == -1)
			return -1;
	}
	if (hl < n) {
		if (p[hl] != ':')
			return fail(why, "bad character after host");
		if (parse_port(p + hl + 1, n - hl - 1, u, why) == -1)
			return -1;
	}
	if (need_port && !u->has_port)
		return fail(why, "port required");
	return 0;
}

/* path [ "?" query ] of an origin-form target or after an authority. */
static void
split_query(const char *p, size_t n, struct uri *u)
{
	const char *q = memchr(p, '?', n);

	u->path = p;
	u->path_len = q != NULL ? (size_t)(q - p) : n;
	if (q != NULL) {
		u->query = q + 1;
		u->query_len = n - u->path_len - 1;
	}
}

/*
 * Parses a request target into u (slices of p, except the static "/" of an
 * absolute-form target without a path). Returns 0, or -1 with *why set to
 * a static phrase (why may be NULL).
 */
int
uri_parse_target(const char *p, size_t len, int connect, struct uri *u,
    const char **why)
{
	size_t i, off, a;

	memset(u, 0, sizeof(*u));
	if (len == 0)
		return fail(why, "empty target");
	/* A fragment is never sent (RFC 9110 §4.2.5); it hides path text. */
	if (memchr(p, '#', len) != NULL)
		return fail(why, "fragment not allowed");
	for (i = 0; i < len; i++)
		if ((unsigned char)p[i] < 0x21 || (unsigned char)p[i] > 0x7e)
			return fail(why, "bad character in target");

	if (connect) {
		/* RFC 9112 §3.2.3: CONNECT takes host:port and only that. */
		u->form = URI_AUTHORITY;
		if (memchr(p, '/', len) != NULL)
			return fail(why, "CONNECT needs host:port");
		return parse_authority(p, len, u, 1, why);
	}
	if (p[0] == '/') {
		u->form = URI_ORIGIN;
		split_query(p, len, u);
		return 0;
	}
	if (len == 1 && p[0] == '*') {
		u->form = URI_ASTERISK;
		return 0;
	}

	if (len >= 7 && http1_case_eq(p, "http://", 7)) {
		off = 7;
	} else if (len >= 8 && http1_case_eq(p, "https://", 8)) {
		off = 8;
		u->https = 1;
	} else if (memmem(p, len, "://", 3) != NULL) {
		return fail(why, "scheme not http or https");
	} else {
		return fail(why, "authority-form only with CONNECT");
	}
	u->form = URI_ABSOLUTE;
	for (a = off; a < len && p[a] != '/' && p[a] != '?'; a++)
		;
	if (parse_authority(p + off, a - off, u, 0, why) == -1)
		return -1;
	if (!u->has_port)
		u->port = u->https ? 443 : 80;
	if (a < len && p[a] == '/') {
		split_query(p + a, len - a, u);
		return 0;
	}
	/* path-abempty is empty: the request is for "/" (RFC 9112 §3.2.2). */
	u->path = "/";
	u->path_len = 1;
	if (a < len) {
		u->query = p + a + 1;
		u->query_len = len - a - 1;
	}
	return 0;
}

/*
 * Parses a Host field value, host [ ":" port ], into u with form
 * URI_AUTHORITY; port is 0 and has_port 0 when absent. Returns 0, or -1
 * with *why set (why may be NULL).
 */
int
uri_parse_host(const char *p, size_t len, struct uri *u, const char **why)
{
	memset(u, 0, sizeof(*u));
	u->form = URI_AUTHORITY;
	return parse_authority(p, len, u, 0, why);
}

/* Non-zero when a[0..alen) and b[0..blen) are equal, ASCII case aside. */
int
uri_host_eq(const char *a, size_t alen, const char *b, size_t blen)
{
	return alen == blen && http1_case_eq(a, b, alen);
}
