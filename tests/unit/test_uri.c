/*
 * Unit tests for request targets and Host values (proxy/uri.c): one row per
 * rule (forms, schemes, userinfo, fragments, host kinds, ambiguous numeric
 * hosts, ports), each input placed right against a PROT_NONE page.
 */
#include <sys/mman.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "proxy/http/http1.h"
#include "tests/unit/guard.h"

static int
setup(void **state)
{
	(void)state;
	return guard_setup(1);
}

static int
teardown(void **state)
{
	(void)state;
	return guard_teardown();
}

struct ucase {
	const char *in;
	int connect;
	int host_only;   /* uri_parse_host instead of uri_parse_target */
	const char *why; /* expected phrase, NULL: success */
	enum uri_form form;
	int https;
	enum uri_host host_type;
	const char *host; /* expected host, NULL: none */
	uint16_t port;
	int has_port;
	const char *path; /* expected path, NULL: none */
	const char *query;
};

/* Compares slice p[0..n) with the C string want (NULL: p must be NULL). */
static int
slice_is(const char *p, size_t n, const char *want)
{
	if (want == NULL)
		return p == NULL && n == 0;
	return p != NULL && n == strlen(want) && memcmp(p, want, n) == 0;
}

static void
run_case(const struct ucase *c)
{
	size_t len = strlen(c->in);
	const char *p = guard_put(c->in, len);
	const char *why = NULL;
	struct uri u;
	int r;

	if (c->host_only)
		r = uri_parse_host(p, len, &u, &why);
	else
		r = uri_parse_target(p, len, c->connect, &u, &why);
	if (c->why != NULL) {
		if (r != -1 || why == NULL || strcmp(why, c->why) != 0)
			fail_msg("\"%s\": got %d (%s), want \"%s\"", c->in, r,
			    why != NULL ? why : "-", c->why);
		return;
	}
	if (r != 0)
		fail_msg("\"%s\": refused: %s", c->in, why);
	if (u.form != c->form || u.https != c->https ||
	    (c->host != NULL && u.host_type != c->host_type) ||
	    u.port != c->port || u.has_port != c->has_port)
		fail_msg("\"%s\": form %d https %d type %d port %u/%d", c->in,
		    u.form, u.https, u.host_type, u.port, u.has_port);
	if (!slice_is(u.host, u.host_len, c->host) ||
	    !slice_is(u.path, u.path_len, c->path) ||
	    !slice_is(u.query, u.query_len, c->query))
		fail_msg("\"%s\": host/path/query differ", c->in);
	/* Slices point into the input, but for the static "/". */
	if (u.host != NULL)
		assert_true(u.host >= p && u.host + u.host_len <= p + len);
	if (u.path != NULL && !(u.path_len == 1 && strcmp(c->path, "/") == 0))
		assert_true(u.path >= p && u.path + u.path_len <= p + len);
	if (u.query != NULL)
		assert_true(u.query >= p && u.query + u.query_len <= p + len);
}

#define ORIG(s, pa, q)                                                         \
	.in = s, .form = URI_ORIGIN, .path = pa, .query = q, .host = NULL
#define ABS(s, h, t, po)                                                       \
	.in = s, .form = URI_ABSOLUTE, .host = h, .host_type = URI_HOST_##t,   \
	.port = po
#define BAD(s, w) .in = s, .why = w
#define AUTH(s, h, t, po)                                                      \
	.in = s, .connect = 1, .form = URI_AUTHORITY, .host = h,               \
	.host_type = URI_HOST_##t, .port = po, .has_port = 1

static const struct ucase targets[] = {
	/* origin-form */
	{ ORIG("/", "/", NULL) },
	{ ORIG("/v1/messages?beta=true", "/v1/messages", "beta=true") },
	{ ORIG("/a?", "/a", "") },
	{ ORIG("/a?b?c/d", "/a", "b?c/d") },
	{ ORIG("/a/../b", "/a/../b", NULL) }, /* path_check's business */
	{ BAD("/a#frag", "fragment not allowed") },
	{ BAD("/a?b#", "fragment not allowed") },
	{ BAD("/a b", "bad character in target") },
	{ BAD("/a\x7f", "bad character in target") },
	{ BAD("/caf\xc3\xa9", "bad character in target") },
	{ BAD("", "empty target") },
	{ .in = "*", .form = URI_ASTERISK },

	/* absolute-form */
	{ ABS("http://a.example", "a.example", NAME, 80), .path = "/" },
	{ ABS("http://a.example/", "a.example", NAME, 80), .path = "/" },
	{ ABS("HTTPS://A.example:8443/v1/x?q", "A.example", NAME, 8443),
	    .https = 1, .has_port = 1, .path = "/v1/x", .query = "q" },
	{ ABS("https://a.example", "a.example", NAME, 443), .https = 1,
	    .path = "/" },
	{ ABS("http://a.example?x=1", "a.example", NAME, 80), .path = "/",
	    .query = "x=1" },
	{ ABS("http://198.18.0.1:81/", "198.18.0.1", V4, 81), .has_port = 1,
	    .path = "/" },
	{ ABS("http://0.0.0.0/", "0.0.0.0", V4, 80), .path = "/" },
	{ ABS("http://[2001:2::1]:8080/x", "2001:2::1", V6, 8080),
	    .has_port = 1, .path = "/x" },
	{ ABS("http://[::ffff:198.18.0.1]/", "::ffff:198.18.0.1", V6, 80),
	    .path = "/" },
	{ ABS("http://a_b-c~d.example/", "a_b-c~d.example", NAME, 80),
	    .path = "/" },
	{ ABS("http://a%2eb/", "a%2eb", NAME, 80), .path = "/" },
	{ ABS("http://123.example/", "123.example", NAME, 80), .path = "/" },
	{ ABS("http://a.example.:65535/", "a.example.", NAME, 65535),
	    .has_port = 1, .path = "/" },
	{ ABS("http://a:080/", "a", NAME, 80), .has_port = 1, .path = "/" },
	{ BAD("http://u@a.example/", "userinfo not allowed") },
	{ BAD("http://u:p@a.example/", "userinfo not allowed") },
	{ BAD("http://a.example@198.18.0.1/", "userinfo not allowed") },
	{ BAD("ftp://a.example/", "scheme not http or https") },
	{ BAD("httpx://a.example/", "scheme not http or https") },
	{ BAD("http:/a.example/", "authority-form only with CONNECT") },
	{ BAD("a.example:443", "authority-form only with CONNECT") },
	{ BAD("http://", "empty host") },
	{ BAD("http:///x", "empty host") },
	{ BAD("http://:80/", "empty host") },
	{ BAD("http://a.example#x", "fragment not allowed") },
	{ BAD("http://a.example:/", "empty port") },
	{ BAD("http://a.example:0/", "bad port") },
	{ BAD("http://a.example:65536/", "bad port") },
	{ BAD("http://a.example:000080/", "bad port") },
	{ BAD("http://a.example:8a/", "bad port") },
	{ BAD("http://a.example:-1/", "bad port") },
	{ BAD("http://a.example:80:80/", "bad port") },
	{ BAD("http://[v1.x]/", "IPvFuture not allowed") },
	{ BAD("http://[::1%25eth0]/", "bad IPv6 address") },
	{ BAD("http://[1.2.3.4]/", "bad IPv6 address") },
	{ BAD("http://[]/", "empty host") },
	{ BAD("http://[::1/", "unterminated IPv6 literal") },
	{ BAD("http://[::1]x/", "bad character after host") },
	{ BAD("http://::1/", "empty host") },
	{ BAD("http://127.1/", "ambiguous numeric host") },
	{ BAD("http://0x7f000001/", "ambiguous numeric host") },
	{ BAD("http://0X7F.0.0.1/", "ambiguous numeric host") },
	{ BAD("http://2130706433/", "ambiguous numeric host") },
	{ BAD("http://010.0.0.1/", "ambiguous numeric host") },
	{ BAD("http://1.2.3.256/", "ambiguous numeric host") },
	{ BAD("http://1.2.3.4./", "ambiguous numeric host") },
	{ BAD("http://1.2.3.4.5/", "ambiguous numeric host") },
	{ BAD("http://a.123/", "ambiguous numeric host") },
	{ BAD("http://a.0x/", "ambiguous numeric host") },
	{ BAD("http://a%2/", "bad percent escape in host") },
	{ BAD("http://a%zz/", "bad percent escape in host") },
	{ BAD("http://a<b/", "bad character in host") },
	{ BAD("http://a\"b/", "bad character in host") },

	/* authority-form (CONNECT) */
	{ AUTH("a.example:443", "a.example", NAME, 443) },
	{ AUTH("[2001:2::1]:443", "2001:2::1", V6, 443) },
	{ AUTH("198.18.0.1:8443", "198.18.0.1", V4, 8443) },
	{ .in = "a.example", .connect = 1, .why = "port required" },
	{ .in = "[::1]", .connect = 1, .why = "port required" },
	{ .in = "a.example:", .connect = 1, .why = "empty port" },
	{ .in = "/x", .connect = 1, .why = "CONNECT needs host:port" },
	{ .in = "http://a.example:443",
	    .connect = 1,
	    .why = "CONNECT needs host:port" },
	{ .in = "a.example:443/x",
	    .connect = 1,
	    .why = "CONNECT needs host:port" },
	{ .in = "u@a.example:443",
	    .connect = 1,
	    .why = "userinfo not allowed" },
	{ .in = "a.example:443#", .connect = 1, .why = "fragment not allowed" },

	/* Host values */
	{ .in = "a.example",
	    .host_only = 1,
	    .form = URI_AUTHORITY,
	    .host = "a.example",
	    .host_type = URI_HOST_NAME },
	{ .in = "a.example:8080",
	    .host_only = 1,
	    .form = URI_AUTHORITY,
	    .host = "a.example",
	    .host_type = URI_HOST_NAME,
	    .port = 8080,
	    .has_port = 1 },
	{ .in = "[::1]:80",
	    .host_only = 1,
	    .form = URI_AUTHORITY,
	    .host = "::1",
	    .host_type = URI_HOST_V6,
	    .port = 80,
	    .has_port = 1 },
	{ .in = "198.18.0.1",
	    .host_only = 1,
	    .form = URI_AUTHORITY,
	    .host = "198.18.0.1",
	    .host_type = URI_HOST_V4 },
	{ .in = "", .host_only = 1, .why = "empty host" },
	{ .in = "a.example:", .host_only = 1, .why = "empty port" },
	{ .in = "a b", .host_only = 1, .why = "bad character in host" },
	{ .in = "a.example/x", .host_only = 1, .why = "bad character in host" },
	{ .in = "caf\xc3\xa9", .host_only = 1, .why = "bad character in host" },
	{ .in = "a@b", .host_only = 1, .why = "userinfo not allowed" },
	{ .in = "[::1", .host_only = 1, .why = "unterminated IPv6 literal" },
	{ .in = "[::1%eth0]", .host_only = 1, .why = "bad IPv6 address" },
	{ .in = "a.example:99999", .host_only = 1, .why = "bad port" },
	{ .in = "127.0.1", .host_only = 1, .why = "ambiguous numeric host" },
};

static void
test_targets(void **state)
{
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(targets) / sizeof(targets[0]); i++)
		run_case(&targets[i]);
}

/* reg-names are 1..253 bytes. */
static void
test_host_length(void **state)
{
	char h[300];
	struct uri u;
	const char *why = NULL;

	(void)state;
	memset(h, 'a', sizeof(h));
	assert_int_equal(uri_parse_host(guard_put(h, 253), 253, &u, &why), 0);
	assert_int_equal(u.host_len, 253);
	assert_int_equal(uri_parse_host(guard_put(h, 254), 254, &u, &why), -1);
	assert_string_equal(why, "host too long");
	/* why may be NULL. */
	assert_int_equal(uri_parse_host(h, 254, &u, NULL), -1);
}

/* A NUL inside brackets must not end the address early (found by fuzzing). */
static void
test_v6_nul(void **state)
{
	static const char in[] = "[::\0#]";
	struct uri u;
	const char *why = NULL;

	(void)state;
	assert_int_equal(uri_parse_host(guard_put(in, sizeof(in) - 1),
			     sizeof(in) - 1, &u, &why),
	    -1);
	assert_string_equal(why, "bad IPv6 address");
}

static void
test_host_eq(void **state)
{
	(void)state;
	assert_true(uri_host_eq("A.Example", 9, "a.example", 9));
	assert_true(uri_host_eq("", 0, "", 0));
	assert_false(uri_host_eq("a.example", 9, "a.example.", 10));
	assert_false(uri_host_eq("a.exampla", 9, "a.example", 9));
	/* Only ASCII letters fold: 0xC3 is not 0xE3. */
	assert_false(uri_host_eq("\xc3", 1, "\xe3", 1));
	assert_false(uri_host_eq("[", 1, "{", 1));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_targets),
		cmocka_unit_test(test_host_length),
		cmocka_unit_test(test_v6_nul),
		cmocka_unit_test(test_host_eq),
	};

	return cmocka_run_group_tests_name("uri", tests, setup, teardown);
}
