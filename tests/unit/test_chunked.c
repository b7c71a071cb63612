/*
 * Unit tests for the chunked decoder (proxy/chunked.c): each case is fed
 * whole, one byte at a time and split at every offset, each piece right
 * against a PROT_NONE page; the payload reassembled from the data runs
 * must equal the expected payload, and invalid framing the expected error.
 */
#include <sys/mman.h>
#include <sys/types.h>

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

#define GUARD_CAP 16384 /* largest input */

static int
setup(void **state)
{
	(void)state;
	return guard_setup(GUARD_CAP);
}

static int
teardown(void **state)
{
	(void)state;
	return guard_teardown();
}

struct ccase {
	const char *name;
	const char *in;
	size_t len;         /* 0: strlen(in) */
	enum http1_err err; /* expected error */
	int incomplete;     /* neither done nor failed at the end */
	const char *payload;
	size_t trailing; /* input bytes after the message (not consumed) */
	size_t stride;   /* split offsets to try: every stride-th, 0: 1 */
};

/* What feeding a case produced. */
struct outcome {
	int failed;
	enum http1_err err;
	int done;
	size_t consumed;
	uint64_t total;
	char payload[GUARD_CAP];
	size_t payload_len;
};

static void
out_init(struct outcome *o, struct http1_chunked *c)
{
	memset(o, 0, sizeof(*o));
	http1_chunked_init(c);
}

/*
 * Feeds in[off..off+n) (copied against the guard) until it is used up, the
 * message is done or it fails; returns 0 when the caller may feed more.
 */
static int
feed(const struct ccase *cs, struct http1_chunked *c, struct outcome *o,
    size_t off, size_t n)
{
	const char *p = guard_put(cs->in + off, n);
	size_t used = 0, dl;
	ssize_t r;

	while (used < n) {
		r = http1_chunked_step(c, p + used, n - used, &dl);
		if (r == -1) {
			o->failed = 1;
			o->err = c->err;
			o->total = c->total;
			assert_int_not_equal(c->err, HTTP1_E_NONE);
			/* Sticky. */
			assert_int_equal(http1_chunked_step(c, p, n, &dl), -1);
			return 1;
		}
		if (r == 0) {
			/* Only a finished message refuses input. */
			if (!http1_chunked_done(c))
				fail_msg("%s: step returned 0", cs->name);
			break;
		}
		assert_true((size_t)r <= n - used);
		if (dl != 0) {
			if (dl != (size_t)r)
				fail_msg("%s: mixed run", cs->name);
			assert_true(o->payload_len + dl <= sizeof(o->payload));
			memcpy(o->payload + o->payload_len, p + used, dl);
			o->payload_len += dl;
		}
		used += (size_t)r;
		o->consumed += (size_t)r;
		if (http1_chunked_done(c))
			break;
	}
	o->total = c->total;
	if (http1_chunked_done(c)) {
		o->done = 1;
		assert_int_equal(http1_chunked_step(c, p, n, &dl), 0);
		assert_int_equal(dl, 0);
		return 1;
	}
	return 0;
}

static void
check(const struct ccase *cs, const char *how, size_t at,
    const struct outcome *o, size_t len)
{
	const char *want = cs->payload != NULL ? cs->payload : "";

	if (o->total != o->payload_len)
		fail_msg("%s: %s@%zu: total %ju, runs %zu", cs->name, how, at,
		    (uintmax_t)o->total, o->payload_len);
	if (cs->err != HTTP1_E_NONE) {
		if (!o->failed || o->err != cs->err)
			fail_msg("%s: %s@%zu: got %s, want %s", cs->name, how,
			    at, http1_err_name(o->err),
			    http1_err_name(cs->err));
		return;
	}
	if (o->failed)
		fail_msg("%s: %s@%zu: unexpected %s", cs->name, how, at,
		    http1_err_name(o->err));
	if (o->done == cs->incomplete)
		fail_msg("%s: %s@%zu: done %d", cs->name, how, at, o->done);
	if (o->payload_len != strlen(want) ||
	    memcmp(o->payload, want, o->payload_len) != 0)
		fail_msg("%s: %s@%zu: payload %zu bytes differs", cs->name, how,
		    at, o->payload_len);
	if (o->consumed != len - cs->trailing)
		fail_msg("%s: %s@%zu: consumed %zu", cs->name, how, at,
		    o->consumed);
}

static struct outcome o;

static void
run_case(const struct ccase *cs)
{
	struct http1_chunked c;
	size_t len = cs->len ? cs->len : strlen(cs->in);
	size_t stride = cs->stride ? cs->stride : 1;
	size_t k, s;

	out_init(&o, &c);
	feed(cs, &c, &o, 0, len);
	check(cs, "whole", 0, &o, len);

	out_init(&o, &c);
	for (k = 0; k < len; k++)
		if (feed(cs, &c, &o, k, 1))
			break;
	check(cs, "byte by byte", k, &o, len);

	for (s = 1; s < len; s += stride) {
		out_init(&o, &c);
		if (!feed(cs, &c, &o, 0, s))
			feed(cs, &c, &o, s, len - s);
		check(cs, "split", s, &o, len);
	}
}

#define E(e)     .err = HTTP1_E_##e
#define CB(n, s) .name = n, .in = s, .len = sizeof(s) - 1

static const struct ccase cases[] = {
	{ "one chunk", "5\r\nhello\r\n0\r\n\r\n", .payload = "hello" },
	{ "three chunks", "3\r\nabc\r\n2\r\nde\r\n1\r\nf\r\n0\r\n\r\n",
	    .payload = "abcdef" },
	{ "hex upper", "A\r\n0123456789\r\n0\r\n\r\n",
	    .payload = "0123456789" },
	{ "hex lower", "a\r\n0123456789\r\n0\r\n\r\n",
	    .payload = "0123456789" },
	{ "16 digits with leading zeros",
	    "0000000000000003\r\nabc\r\n"
	    "0000000000000000\r\n\r\n",
	    .payload = "abc" },
	{ "CRLF inside data", "2\r\n\r\n\r\n4\r\n0\r\n\r\r\n0\r\n\r\n",
	    .payload = "\r\n0\r\n\r" },
	{ "extensions", "3;foo=bar;baz\r\nabc\r\n0;last=\"a b\"\t\xff\r\n\r\n",
	    .payload = "abc" },
	{ "BWS before ';'", "3 \t;a\r\nabc\r\n0\r\n\r\n", .payload = "abc" },
	{ "trailers", "1\r\nx\r\n0\r\nX-T: v\r\nY:\t\xc3\xa9 \r\n\r\n",
	    .payload = "x" },
	{ "empty body", "0\r\n\r\n", .payload = "" },
	{ "bytes after the message", "0\r\n\r\nGET / HTTP/1.1\r\n",
	    .trailing = 16 },
	{ "incomplete data", "5\r\nhel", .incomplete = 1, .payload = "hel" },
	{ "incomplete size", "5", .incomplete = 1 },
	{ "incomplete trailer", "0\r\nX: y\r\n", .incomplete = 1 },
	{ "incomplete final CR", "0\r\n\r", .incomplete = 1 },
	{ "16 f digits", "ffffffffffffffff\r\nab", .incomplete = 1,
	    .payload = "ab" },

	{ "empty size", "\r\n0\r\n\r\n", E(CHUNK_SIZE) },
	{ "leading SP", " 5\r\nhello\r\n0\r\n\r\n", E(CHUNK_SIZE) },
	{ "plus sign", "+5\r\nhello\r\n0\r\n\r\n", E(CHUNK_SIZE) },
	{ "minus sign", "-5\r\nhello\r\n0\r\n\r\n", E(CHUNK_SIZE) },
	{ "0x prefix", "0x5\r\nhello\r\n0\r\n\r\n", E(CHUNK_SIZE) },
	{ "non-hex", "g\r\n", E(CHUNK_SIZE) },
	{ "17 digits", "00000000000000001\r\nx\r\n0\r\n\r\n", E(CHUNK_SIZE) },
	{ "17 f digits", "fffffffffffffffff\r\n", E(CHUNK_SIZE) },
	{ "bare LF after size", "5\nhello\r\n0\r\n\r\n", E(CHUNK_SIZE) },
	{ "bare CR after size", "5\rhello\r\n0\r\n\r\n", E(CHUNK_SIZE) },
	{ "SP without extension", "5 \r\nhello\r\n0\r\n\r\n", E(CHUNK_SIZE) },
	{ "bare LF in extension", "5;a\nhello\r\n0\r\n\r\n", E(CHUNK_SIZE) },
	{ "last chunk bare LF", "0\n\r\n", E(CHUNK_SIZE) },
	{ "CTL in extension", "5;a=\x01\r\nhello\r\n0\r\n\r\n", E(CHUNK_EXT) },
	{ "DEL in extension", "5;\x7f\r\nhello\r\n0\r\n\r\n", E(CHUNK_EXT) },
	{ CB("NUL in extension", "5;a\0\r\nhello\r\n0\r\n\r\n"), E(CHUNK_EXT) },
	{ "data too long", "3\r\nabcd\r\n0\r\n\r\n", E(CHUNK_CRLF),
	    .payload = "abc" },
	{ "data bare LF", "3\r\nabc\n0\r\n\r\n", E(CHUNK_CRLF) },
	{ "data bare CR", "3\r\nabc\rx0\r\n\r\n", E(CHUNK_CRLF) },
	{ "data without CRLF", "3\r\nabc0\r\n\r\n", E(CHUNK_CRLF) },
	{ "trailer obs-fold", "0\r\nX: y\r\n z\r\n\r\n", E(TRAILER) },
	{ "trailer leading SP", "0\r\n X: y\r\n\r\n", E(TRAILER) },
	{ "trailer ws before colon", "0\r\nX : y\r\n\r\n", E(TRAILER) },
	{ "trailer empty name", "0\r\n: y\r\n\r\n", E(TRAILER) },
	{ "trailer no colon", "0\r\nX\r\n\r\n", E(TRAILER) },
	{ "trailer name non-tchar", "0\r\nX/Y: z\r\n\r\n", E(TRAILER) },
	{ "trailer CTL", "0\r\nX: a\x01\r\n\r\n", E(TRAILER) },
	{ "trailer DEL", "0\r\nX: a\x7f\r\n\r\n", E(TRAILER) },
	{ "trailer bare LF", "0\r\nX: a\n\r\n", E(TRAILER) },
	{ "trailer bare CR", "0\r\nX: a\rb\r\n\r\n", E(TRAILER) },
	{ "final bare LF", "0\r\n\n", E(TRAILER) },
	{ "final bare CR", "0\r\n\rx", E(TRAILER) },
};

static void
test_cases(void **state)
{
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		run_case(&cases[i]);
}

static char big[GUARD_CAP];

/* n trailer fields "T: v" after the last chunk. */
static size_t
make_trailers(unsigned n)
{
	size_t len = 0;
	unsigned i;

	len += (size_t)snprintf(big, sizeof(big), "1\r\nz\r\n0\r\n");
	for (i = 0; i < n; i++)
		len += (size_t)snprintf(big + len, sizeof(big) - len,
		    "T%u: v\r\n", i);
	len += (size_t)snprintf(big + len, sizeof(big) - len, "\r\n");
	return len;
}

static void
test_trailer_count(void **state)
{
	struct ccase cs = { "64 trailers", big, .payload = "z", .stride = 7 };

	(void)state;
	cs.len = make_trailers(64);
	run_case(&cs);
	cs.name = "65 trailers";
	cs.len = make_trailers(65);
	cs.err = HTTP1_E_TRAILER;
	run_case(&cs);
}

/* One line of n bytes before its CRLF: "0\r\nX: vvvv\r\n\r\n" or the ext. */
static size_t
make_long_line(size_t n, int trailer)
{
	size_t len;

	if (trailer) {
		memcpy(big, "0\r\nX:", 5);
		memset(big + 5, 'v', n - 2);
		len = 5 + n - 2;
		memcpy(big + len, "\r\n\r\n", 4);
		return len + 4;
	}
	memcpy(big, "1;", 2);
	memset(big + 2, 'e', n - 2);
	memcpy(big + n, "\r\nz\r\n0\r\n\r\n", 10);
	return n + 10;
}

static void
test_line_caps(void **state)
{
	struct ccase cs = { "8 KiB trailer line", big, .payload = "",
		.stride = 211 };

	(void)state;
	cs.len = make_long_line(8192, 1);
	run_case(&cs);
	cs.name = "trailer line over 8 KiB";
	cs.len = make_long_line(8193, 1);
	cs.err = HTTP1_E_TRAILER;
	run_case(&cs);

	cs.name = "8 KiB size line";
	cs.len = make_long_line(8192, 0);
	cs.err = HTTP1_E_NONE;
	cs.payload = "z";
	run_case(&cs);
	cs.name = "size line over 8 KiB";
	cs.len = make_long_line(8193, 0);
	cs.err = HTTP1_E_CHUNK_EXT;
	run_case(&cs);
}

/* The payload total cannot wrap around. */
static void
test_total_overflow(void **state)
{
	struct http1_chunked c;
	size_t dl;

	(void)state;
	http1_chunked_init(&c);
	c.total = UINT64_MAX - 1;
	assert_int_equal(http1_chunked_step(&c, "1\r\n", 3, &dl), 3);
	assert_int_equal(http1_chunked_step(&c, "x", 1, &dl), 1);
	assert_int_equal(dl, 1);
	assert_true(c.total == UINT64_MAX);
	assert_int_equal(http1_chunked_step(&c, "\r\n1\r\n", 5, &dl), -1);
	assert_int_equal(c.err, HTTP1_E_CHUNK_SIZE);
}

/* Runs alternate: framing, payload, framing; data never mixes in. */
static void
test_run_shape(void **state)
{
	static const char in[] = "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
	struct http1_chunked c;
	size_t dl;

	(void)state;
	/* A zeroed struct is a valid start, as init leaves it. */
	memset(&c, 0, sizeof(c));
	assert_int_equal(http1_chunked_step(&c, in, sizeof(in) - 1, &dl), 3);
	assert_int_equal(dl, 0);
	assert_int_equal(http1_chunked_step(&c, in + 3, 1, &dl), 1);
	assert_int_equal(dl, 1);
	assert_int_equal(c.remaining, 2);
	assert_int_equal(http1_chunked_step(&c, in + 4, 16, &dl), 2);
	assert_int_equal(dl, 2);
	assert_int_equal(http1_chunked_step(&c, in + 6, 14, &dl), 5);
	assert_int_equal(dl, 0);
	assert_int_equal(http1_chunked_step(&c, in + 11, 9, &dl), 2);
	assert_int_equal(dl, 2);
	assert_false(http1_chunked_done(&c));
	assert_int_equal(http1_chunked_step(&c, in + 13, 7, &dl), 7);
	assert_int_equal(dl, 0);
	assert_true(http1_chunked_done(&c));
	assert_int_equal(c.total, 5);
	assert_int_equal(http1_chunked_step(&c, "", 0, &dl), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cases),
		cmocka_unit_test(test_trailer_count),
		cmocka_unit_test(test_line_caps),
		cmocka_unit_test(test_total_overflow),
		cmocka_unit_test(test_run_shape),
	};

	return cmocka_run_group_tests_name("chunked", tests, setup, teardown);
}
