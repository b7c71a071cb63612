/*
 * libFuzzer target for path_check, path_has_prefix, uri_parse_target and
 * uri_parse_host. The input is "prefix\npath"; without a newline all of it
 * is the path. Each function works on an exact-size copy (so a read past
 * the end is caught) and its answer is checked against properties derived
 * independently of the implementation. A violation aborts.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/http/http1.h"

int LLVMFuzzerTestOneInput(const uint8_t *, size_t);

static void
check(int ok)
{
	if (!ok)
		abort();
}

static char *
dup_exact(const uint8_t *p, size_t n)
{
	char *c = malloc(n > 0 ? n : 1);

	if (c == NULL)
		abort();
	memcpy(c, p, n);
	return c;
}

static int
has(const char *p, size_t n, const char *needle)
{
	return memmem(p, n, needle, strlen(needle)) != NULL;
}

/* Case-insensitive substring, for escapes like %2e / %2E. */
static int
has_ci(const char *p, size_t n, const char *needle)
{
	size_t i, j, k = strlen(needle);

	for (i = 0; i + k <= n; i++) {
		for (j = 0; j < k; j++)
			if ((p[i + j] | 0x20) != (needle[j] | 0x20))
				break;
		if (j == k)
			return 1;
	}
	return 0;
}

static void
fuzz_path_check(const char *p, size_t n)
{
	size_t off = (size_t)-1, i;

	if (path_check(p, n, &off) == -1) {
		check(n == 0 ? off == 0 : off < n);
		return;
	}
	check(n > 0 && p[0] == '/');
	for (i = 0; i < n; i++)
		check(p[i] > 0x20 && p[i] < 0x7f && p[i] != '\\');
	/* No empty segment but the last (so no "//"), no dot segment. */
	check(!has(p, n, "//"));
	check(!has(p, n, "/./") && !has(p, n, "/../"));
	check(!has(p, n, "/.;") && !has(p, n, "/..;"));
	check(!(n >= 2 && memcmp(p + n - 2, "/.", 2) == 0));
	check(!(n >= 3 && memcmp(p + n - 3, "/..", 3) == 0));
	check(!has_ci(p, n, "%2e") && !has_ci(p, n, "%2f") &&
	    !has_ci(p, n, "%5c") && !has_ci(p, n, "%00") &&
	    !has_ci(p, n, "%41") && !has_ci(p, n, "%7e"));
	for (i = 0; i < n; i++)
		if (p[i] == '%')
			check(i + 2 < n);
}

static void
fuzz_prefix(const char *pre, size_t plen, const char *p, size_t n)
{
	int r = path_has_prefix(p, n, pre, plen);

	if (r)
		check(plen > 0 && n >= plen && memcmp(p, pre, plen) == 0);
	if (plen > 0 && n >= plen && memcmp(p, pre, plen) == 0 &&
	    (n == plen || p[plen] == '/'))
		check(r);
	if (n > 0)
		check(path_has_prefix(p, n, p, n));
	if (n > 0 && p[0] == '/')
		check(path_has_prefix(p, n, "/", 1));
}

/* Every slice of u inside p[0..n), bar the static "/" path. */
static void
check_uri(const struct uri *u, const char *p, size_t n)
{
	if (u->host != NULL)
		check(u->host >= p && u->host_len > 0 &&
		    u->host + u->host_len <= p + n &&
		    memchr(u->host, '@', u->host_len) == NULL);
	if (u->path != NULL) {
		uintptr_t a = (uintptr_t)u->path, b = (uintptr_t)p;

		if (a >= b && a < b + n)
			check(u->path_len <= n - (size_t)(a - b));
		else
			check(u->form == URI_ABSOLUTE && u->path_len == 1);
	}
	if (u->path != NULL)
		check(u->path_len > 0 && u->path[0] == '/' &&
		    memchr(u->path, '?', u->path_len) == NULL);
	if (u->query != NULL)
		check(u->query >= p && u->query + u->query_len <= p + n);
	if (u->has_port)
		check(u->port != 0);
	check(memchr(p, '#', n) == NULL);
}

static void
fuzz_uri(const char *p, size_t n)
{
	struct uri u, h;
	const char *why = NULL;
	int connect;

	for (connect = 0; connect < 2; connect++) {
		why = NULL;
		if (uri_parse_target(p, n, connect, &u, &why) == -1) {
			check(why != NULL && why[0] != '\0');
			continue;
		}
		check_uri(&u, p, n);
		switch (u.form) {
		case URI_ORIGIN:
			check(!connect && u.host == NULL);
			check(u.path == p &&
			    u.path_len +
				    (u.query != NULL ? u.query_len + 1 : 0) ==
				n);
			break;
		case URI_ABSOLUTE:
			check(!connect && u.host != NULL && u.port != 0);
			if (u.host_type != URI_HOST_V6) {
				/* The host alone is a valid Host value. */
				check(uri_parse_host(u.host, u.host_len, &h,
					  NULL) == 0);
				check(h.host_type == u.host_type);
			}
			break;
		case URI_AUTHORITY:
			check(connect && u.has_port && u.path == NULL);
			/* And as a Host value it reads the same. */
			check(uri_parse_host(p, n, &h, NULL) == 0);
			check(h.host == u.host && h.host_len == u.host_len &&
			    h.port == u.port);
			break;
		case URI_ASTERISK:
			check(!connect && n == 1 && p[0] == '*');
			break;
		default:
			abort();
		}
	}
	why = NULL;
	if (uri_parse_host(p, n, &u, &why) == -1) {
		check(why != NULL && why[0] != '\0');
		return;
	}
	check(u.form == URI_AUTHORITY && u.path == NULL && u.query == NULL);
	check_uri(&u, p, n);
	check(uri_host_eq(u.host, u.host_len, u.host, u.host_len));
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nl = memchr(data, '\n', size);
	char *pre, *path, *all;
	size_t plen, n;

	all = dup_exact(data, size);
	fuzz_path_check(all, size);
	fuzz_uri(all, size);
	free(all);

	if (nl == NULL)
		return 0;
	plen = (size_t)(nl - data);
	n = size - plen - 1;
	pre = dup_exact(data, plen);
	path = dup_exact(nl + 1, n);
	fuzz_path_check(path, n);
	fuzz_prefix(pre, plen, path, n);
	fuzz_uri(path, n);
	free(pre);
	free(path);
	return 0;
}
