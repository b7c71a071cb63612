/*
 * proxy/http/rewrite.c: the request head sluice sends upstream and the
 * re-chunker's framing. Every rewritten head goes back through the strict
 * parser and the checks of tests/fuzz/fuzz_rewrite_check.h; the framing
 * goes back through the chunked decoder.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proxy/http/http1.h"
#include "proxy/http/rewrite.h"
#include "tests/fuzz/fuzz_rewrite_check.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static struct http1_hdr hdrs_in[RWC_MAX_HDRS], hdrs_out[RWC_MAX_HDRS];
static char out[65536];

static const struct rw_field inject2[] = {
	{ "X-Api-Key", 9, "secret-1", 8 },
	{ "X-Org", 5, "org 7", 5 },
};

static struct rw_upstream
upstream(const char *auth, const char *path, size_t ninject, int drop)
{
	struct rw_upstream up;

	memset(&up, 0, sizeof(up));
	up.authority = auth;
	up.authority_len = strlen(auth);
	up.path = path;
	up.path_len = strlen(path);
	up.inject = inject2;
	up.ninject = ninject;
	up.drop_authorization = drop;
	return up;
}

/* Parse req (its head whole) and its target into *m and *u. */
static void
parse(const char *req, struct http1_msg *m, struct uri *u)
{
	const char *why = "";

	memset(m, 0, sizeof(*m));
	m->hdrs = hdrs_in;
	m->max_hdrs = RWC_MAX_HDRS;
	if (http1_parse_request(m, req, strlen(req), 0) != (ssize_t)strlen(req))
		fail_msg("does not parse: %s (%s)", req,
		    http1_err_name(m->err));
	memset(u, 0, sizeof(*u));
	if (uri_parse_target(m->target, m->target_len, 0, u, &why) == -1)
		fail_msg("target: %s", why);
}

/* Rewrite req for up, check every property; returns the head (in out). */
static const char *
rewrite(const char *req, const struct rw_upstream *up, int *auth_removed)
{
	struct http1_msg m;
	struct uri u;
	const char *why;
	size_t need, n;

	parse(req, &m, &u);
	need = rw_request_head(&m, &u, up, NULL, 0, NULL);
	assert_true(need < sizeof(out));
	n = rw_request_head(&m, &u, up, out, sizeof(out), auth_removed);
	assert_int_equal(n, need);
	out[n] = '\0';
	if ((why = rwc_check_head(&m, &u, up, out, n, hdrs_out)) != NULL)
		fail_msg("%s:\n%s", why, out);
	return out;
}

/* What a client sends that must not reach the upstream. */
static void
test_hop_by_hop(void **state)
{
	struct rw_upstream up = upstream("api.example:8443", "", 0, 0);
	const char *h;

	(void)state;
	h = rewrite("POST http://a.test/v1/x?q=1 HTTP/1.1\r\n"
		    "Host: a.test\r\n"
		    "Proxy-Authorization: Bearer tok\r\n"
		    "Proxy-Connection: keep-alive\r\n"
		    "Connection: keep-alive, X-Secret-Hop\r\n"
		    "Keep-Alive: timeout=5\r\n"
		    "TE: trailers\r\n"
		    "Trailer: X-T\r\n"
		    "X-Secret-Hop: 1\r\n"
		    "Accept: */*\r\n"
		    "Content-Length: 3\r\n"
		    "\r\n",
	    &up, NULL);
	assert_string_equal(h,
	    "POST /v1/x?q=1 HTTP/1.1\r\n"
	    "Host: api.example:8443\r\n"
	    "Accept: */*\r\n"
	    "Content-Length: 3\r\n"
	    "\r\n");
}

/* Injected fields replace the client's, also spelt with '_'. */
static void
test_injected(void **state)
{
	struct rw_upstream up = upstream("api.example", "/base", 2, 0);
	const char *h;

	(void)state;
	h = rewrite("GET /v1/m HTTP/1.1\r\n"
		    "Host: a.test\r\n"
		    "x-api-key: forged\r\n"
		    "X_API_KEY: forged-too\r\n"
		    "x_org: 3\r\n"
		    "X-Apikey: kept\r\n"
		    "\r\n",
	    &up, NULL);
	assert_string_equal(h,
	    "GET /base/v1/m HTTP/1.1\r\n"
	    "Host: api.example\r\n"
	    "X-Apikey: kept\r\n"
	    "X-Api-Key: secret-1\r\n"
	    "X-Org: org 7\r\n"
	    "\r\n");
	assert_null(strstr(h, "forged"));
}

/* Authorization goes only when it is the token; the flag says it went. */
static void
test_authorization(void **state)
{
	struct rw_upstream up = upstream("u", "", 0, 1);
	const char *req = "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n"
			  "Authorization: Bearer other-run\r\n\r\n";
	int removed = 0;

	(void)state;
	assert_null(strstr(rewrite(req, &up, &removed), "other-run"));
	assert_int_equal(removed, 1);
	up.drop_authorization = 0;
	removed = 0;
	assert_non_null(strstr(rewrite(req, &up, &removed),
	    "\r\nAuthorization: Bearer other-run\r\n"));
	assert_int_equal(removed, 0);
}

/* The framing the parser decided, written by sluice: never the client's. */
static void
test_framing(void **state)
{
	struct rw_upstream up = upstream("u", "", 1, 0);
	const char *h;

	(void)state;
	h = rewrite("POST / HTTP/1.1\r\nHost: a\r\n"
		    "Transfer-Encoding: chunked\r\nContent-Type: x\r\n\r\n",
	    &up, NULL);
	assert_string_equal(h,
	    "POST / HTTP/1.1\r\nHost: u\r\nContent-Type: x\r\n"
	    "X-Api-Key: secret-1\r\nTransfer-Encoding: chunked\r\n\r\n");
	h = rewrite("POST / HTTP/1.1\r\nHost: a\r\n"
		    "Content-Length: 0012\r\n\r\n",
	    &up, NULL);
	assert_non_null(strstr(h, "\r\nContent-Length: 12\r\n\r\n"));
	h = rewrite("GET / HTTP/1.0\r\n\r\n", &up, NULL);
	assert_string_equal(h,
	    "GET / HTTP/1.1\r\nHost: u\r\nX-Api-Key: secret-1\r\n\r\n");
}

/* Too small a buffer: the length needed, and nothing written. */
static void
test_sizing(void **state)
{
	struct rw_upstream up = upstream("u", "", 2, 0);
	struct http1_msg m;
	struct uri u;
	char small[32];
	size_t need;

	(void)state;
	parse("GET /abc HTTP/1.1\r\nHost: a\r\nAccept: x\r\n\r\n", &m, &u);
	need = rw_request_head(&m, &u, &up, NULL, 0, NULL);
	memset(small, 'z', sizeof(small));
	assert_int_equal(rw_request_head(&m, &u, &up, small, sizeof(small),
			     NULL),
	    need);
	assert_true(need > sizeof(small));
	assert_int_equal(small[0], 'z');
	assert_int_equal(rw_request_head(&m, &u, &up, out, need, NULL), need);
}

static void
test_connection_protected(void **state)
{
	static const char *const refused[] = { "Content-Length", "host",
		"Transfer-Encoding", "authorization" };
	struct http1_msg m;
	struct uri u;
	char req[256];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		snprintf(req, sizeof(req),
		    "GET / HTTP/1.1\r\nHost: a\r\nConnection: x, %s\r\n\r\n",
		    refused[i]);
		parse(req, &m, &u);
		assert_true(rw_connection_protected(&m));
	}
	parse("GET / HTTP/1.1\r\nHost: a\r\nConnection: close, x-y\r\n\r\n", &m,
	    &u);
	assert_false(rw_connection_protected(&m));
}

static void
test_lines(void **state)
{
	char b[RW_CL_LINE_MAX > RW_CHUNK_LINE_MAX ? RW_CL_LINE_MAX :
						    RW_CHUNK_LINE_MAX];
	size_t n;

	(void)state;
	n = rw_content_length(b, 0);
	assert_true(n == 19 && memcmp(b, "Content-Length: 0\r\n", n) == 0);
	n = rw_content_length(b, UINT64_MAX);
	assert_true(n <= RW_CL_LINE_MAX &&
	    memcmp(b, "Content-Length: 18446744073709551615\r\n", n) == 0);
	n = rw_chunk_line(b, 0x1a2b);
	assert_true(n == 6 && memcmp(b, "1a2b\r\n", n) == 0);
	n = rw_chunk_line(b, SIZE_MAX);
	assert_int_equal(n, RW_CHUNK_LINE_MAX);
	assert_true(memcmp(b, "ffffffffffffffff\r\n", n) == 0);
}

/* A small deterministic generator (xorshift64). */
static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t
next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static size_t
below(size_t n)
{
	return n == 0 ? 0 : (size_t)(next() % n);
}

/* Random requests from fields that each rule is about. */
static void
test_random_requests(void **state)
{
	static const char *const fields[] = { "Accept: */*", "X-Api-Key: f",
		"x_api_key: f", "X-ORG: f", "Authorization: Bearer o",
		"Proxy-Authorization: Bearer t", "Keep-Alive: 1",
		"TE: trailers", "Trailer: x", "Proxy-Connection: close",
		"X-Hop: 1", "Connection: X-Hop", "Connection: close, x-other",
		"x-other: 2", "Expect: 100-continue", "Cookie: a=b",
		"Content-Length: 12", "Transfer-Encoding: chunked",
		"X-Empty:", "Via: 1.1 p" };
	static const char *const targets[] = { "/", "/v1/m?x=1&y",
		"http://a.test/p/q", "http://a.test:80/?" };
	char req[4096];
	size_t iter, i, nf, at;
	struct rw_upstream up;
	struct http1_msg m;
	struct uri u;
	const char *why;
	int has_cl, has_te;

	(void)state;
	for (iter = 0; iter < 20000; iter++) {
		up = upstream(next() & 1 ? "api.example" : "[2001:2::1]:8443",
		    next() & 1 ? "" : "/base/x", below(3), (int)(next() & 1));
		at = (size_t)snprintf(req, sizeof(req), "%s %s HTTP/1.%d\r\n",
		    next() & 1 ? "POST" : "GET", targets[below(4)],
		    (int)(next() & 1));
		at += (size_t)snprintf(req + at, sizeof(req) - at,
		    "Host: a.test\r\n");
		nf = below(12);
		has_cl = has_te = 0;
		for (i = 0; i < nf; i++) {
			const char *f = fields[below(NELEM(fields))];

			/* Not both framings, not one twice: the parser's. */
			if (strncmp(f, "Content-Length", 14) == 0 &&
			    (has_cl++ || has_te))
				continue;
			if (strncmp(f, "Transfer-Encoding", 17) == 0 &&
			    (has_te++ || has_cl))
				continue;
			at += (size_t)snprintf(req + at, sizeof(req) - at,
			    "%s\r\n", f);
		}
		snprintf(req + at, sizeof(req) - at, "\r\n");
		memset(&m, 0, sizeof(m));
		m.hdrs = hdrs_in;
		m.max_hdrs = RWC_MAX_HDRS;
		if (http1_parse_request(&m, req, strlen(req), 0) < 0)
			continue; /* e.g. HTTP/1.0 with chunked */
		memset(&u, 0, sizeof(u));
		assert_int_equal(uri_parse_target(m.target, m.target_len, 0, &u,
				     &why),
		    0);
		at = rw_request_head(&m, &u, &up, out, sizeof(out), NULL);
		assert_true(at < sizeof(out));
		if ((why = rwc_check_head(&m, &u, &up, out, at, hdrs_out)) !=
		    NULL)
			fail_msg("%s:\n%s\n->\n%.*s", why, req, (int)at, out);
	}
}

/*
 * The re-chunker: a payload cut into random runs, framed as rewrite.c
 * frames them, decodes (fed in random pieces) to the same payload.
 */
static void
test_rechunk_random(void **state)
{
	static char payload[8192], body[3 * 8192 + 64], back[8192];
	size_t cuts[64], steps[16], iter, len, ncuts, i, blen, plen;
	const char *why;

	(void)state;
	for (iter = 0; iter < 5000; iter++) {
		len = below(sizeof(payload) + 1);
		for (i = 0; i < len; i++)
			payload[i] = (char)next();
		ncuts = below(NELEM(cuts));
		for (i = 0; i < ncuts; i++)
			cuts[i] = below(len + 1);
		/* Increasing offsets: sort (insertion). */
		for (i = 1; i < ncuts; i++) {
			size_t v = cuts[i], j = i;

			for (; j > 0 && cuts[j - 1] > v; j--)
				cuts[j] = cuts[j - 1];
			cuts[j] = v;
		}
		blen =
		    rwc_rechunk(payload, len, cuts, ncuts, body, sizeof(body));
		assert_true(blen > 0);
		for (i = 0; i < NELEM(steps); i++)
			steps[i] = 1 + below(next() & 1 ? 4 : 600);
		why = rwc_dechunk(body, blen, steps, NELEM(steps), back,
		    sizeof(back), &plen);
		if (why != NULL)
			fail_msg("%s (iteration %zu)", why, iter);
		assert_int_equal(plen, len);
		assert_memory_equal(back, payload, len);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hop_by_hop),
		cmocka_unit_test(test_injected),
		cmocka_unit_test(test_authorization),
		cmocka_unit_test(test_framing),
		cmocka_unit_test(test_sizing),
		cmocka_unit_test(test_connection_protected),
		cmocka_unit_test(test_lines),
		cmocka_unit_test(test_random_requests),
		cmocka_unit_test(test_rechunk_random),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
