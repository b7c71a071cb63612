/*
 * Unit tests for the strict HTTP/1.1 head parser (proxy/http1.c): a table
 * with a row per rule of DESIGN.md "HTTP/1.1 strictness", each run whole,
 * one byte at a time and split at every offset, with the input right
 * against a PROT_NONE page so that any read past the end crashes.
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

#define MAXH      16   /* default header array */
#define GUARD_CAP 8192 /* largest input */

/* A buffer whose end is followed by an inaccessible page. */
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

struct hcase {
	const char *name;
	const char *in;
	size_t len;         /* 0: strlen(in) */
	int resp;           /* parse as a response */
	int head;           /* response to a HEAD request */
	size_t maxh;        /* header array length, 0: MAXH */
	int incomplete;     /* expect -2 */
	enum http1_err err; /* expected error, HTTP1_E_NONE: success */
	size_t body_bytes;  /* bytes of the input after the head */
	enum http1_body body;
	uint64_t cl;
	unsigned flags;
	size_t nhdrs;
	int v10; /* success expects HTTP/1.0, else HTTP/1.1 */
	int status;
};

/* Everything a parse produced, with slices as offsets into the input. */
struct summary {
	ssize_t r;
	enum http1_err err;
	size_t method[2], target[2], reason[2], host[2];
	int status, minor;
	size_t nhdrs;
	size_t hdr[MAXH][4];
	enum http1_body body;
	uint64_t cl;
	unsigned flags;
};

/* Offset of slice p[0..n) in base[0..len), asserting that it is inside. */
static size_t
slice_off(const char *base, size_t len, const char *p, size_t n)
{
	if (p == NULL) {
		assert_int_equal(n, 0);
		return (size_t)-1;
	}
	assert_true(p >= base && p <= base + len);
	assert_true(n <= len - (size_t)(p - base));
	return (size_t)(p - base);
}

static void
summarize(struct summary *s, const struct http1_msg *m, const char *base,
    size_t len, ssize_t r)
{
	size_t i;

	memset(s, 0, sizeof(*s));
	s->r = r;
	s->err = m->err;
	if (r < 0)
		return;
	assert_true((size_t)r <= len);
	s->method[0] = slice_off(base, len, m->method, m->method_len);
	s->method[1] = m->method_len;
	s->target[0] = slice_off(base, len, m->target, m->target_len);
	s->target[1] = m->target_len;
	s->reason[0] = slice_off(base, len, m->reason, m->reason_len);
	s->reason[1] = m->reason_len;
	s->host[0] = slice_off(base, len, m->host, m->host_len);
	s->host[1] = m->host_len;
	s->status = m->status;
	s->minor = m->minor;
	s->nhdrs = m->nhdrs;
	assert_true(m->nhdrs <= MAXH);
	for (i = 0; i < m->nhdrs; i++) {
		s->hdr[i][0] = slice_off(base, (size_t)r, m->hdrs[i].name,
		    m->hdrs[i].name_len);
		s->hdr[i][1] = m->hdrs[i].name_len;
		s->hdr[i][2] = slice_off(base, (size_t)r, m->hdrs[i].value,
		    m->hdrs[i].value_len);
		s->hdr[i][3] = m->hdrs[i].value_len;
	}
	s->body = m->body;
	s->cl = m->content_length;
	s->flags = m->flags;
}

static void
msg_init(struct http1_msg *m, struct http1_hdr *hdrs, size_t maxh)
{
	memset(m, 0, sizeof(*m));
	m->hdrs = hdrs;
	m->max_hdrs = maxh;
}

static ssize_t
parse(const struct hcase *c, struct http1_msg *m, const char *buf, size_t len,
    size_t last)
{
	if (c->resp)
		return http1_parse_response(m, buf, len, last, c->head);
	return http1_parse_request(m, buf, len, last);
}

static void
same(const struct hcase *c, const char *how, size_t at, const struct summary *a,
    const struct summary *b)
{
	if (memcmp(a, b, sizeof(*a)) != 0)
		fail_msg("%s: %s (at %zu) disagrees: r %zd/%zd err %s/%s",
		    c->name, how, at, a->r, b->r, http1_err_name(a->err),
		    http1_err_name(b->err));
}

/* Runs one row whole, byte by byte and split at every offset. */
static void
run_case(const struct hcase *c)
{
	struct http1_hdr hdrs[MAXH];
	struct http1_msg m;
	struct summary whole, other;
	size_t len = c->len ? c->len : strlen(c->in);
	size_t maxh = c->maxh ? c->maxh : MAXH;
	const char *p;
	ssize_t r, want;
	size_t k, s;

	/* (a) whole */
	memset(hdrs, 0, sizeof(hdrs));
	msg_init(&m, hdrs, maxh);
	p = guard_put(c->in, len);
	r = parse(c, &m, p, len, 0);
	summarize(&whole, &m, p, len, r);
	want = c->incomplete       ? -2 :
	    c->err != HTTP1_E_NONE ? -1 :
				     (ssize_t)(len - c->body_bytes);
	if (r != want || m.err != c->err)
		fail_msg("%s: got %zd %s, want %zd %s", c->name, r,
		    http1_err_name(m.err), want, http1_err_name(c->err));
	if (r >= 0) {
		if (m.body != c->body || m.content_length != c->cl ||
		    m.flags != c->flags || m.nhdrs != c->nhdrs ||
		    m.minor != (c->v10 ? 0 : 1) ||
		    (c->resp && m.status != c->status))
			fail_msg("%s: body %d cl %ju flags %#x nhdrs %zu "
				 "minor %d status %d",
			    c->name, m.body, (uintmax_t)m.content_length,
			    m.flags, m.nhdrs, m.minor, m.status);
	}

	/* (b) one byte at a time; the buffer moves on every call. */
	msg_init(&m, hdrs, maxh);
	r = -2;
	for (k = 1; k <= len && r == -2; k++) {
		p = guard_put(c->in, k);
		r = parse(c, &m, p, k, k - 1);
	}
	k--;
	/* A valid head is complete exactly at its last byte. */
	if (whole.r >= 0 && k != (size_t)whole.r)
		fail_msg("%s: byte by byte ended at %zu", c->name, k);
	summarize(&other, &m, p, k, r);
	same(c, "byte by byte", k, &whole, &other);

	/* (c) every split into two calls, the first also from scratch. */
	for (s = 1; s < len; s++) {
		msg_init(&m, hdrs, maxh);
		p = guard_put(c->in, s);
		r = parse(c, &m, p, s, 0);
		if (whole.r >= 0 && s < (size_t)whole.r && r != -2)
			fail_msg("%s: strict prefix %zu gave %zd", c->name, s,
			    r);
		if (r == -2) {
			p = guard_put(c->in, len);
			r = parse(c, &m, p, len, s);
			summarize(&other, &m, p, len, r);
		} else {
			/* Decided early: a prefix that already fails. */
			summarize(&other, &m, p, s, r);
		}
		same(c, "split", s, &whole, &other);
	}
}

#define REQ(n, s)  .name = n, .in = s
#define REQB(n, s) .name = n, .in = s, .len = sizeof(s) - 1
#define RSP(n, s)  .name = n, .in = s, .resp = 1
#define E(e)       .err = HTTP1_E_##e
#define HOST       "Host: a.example\r\n"
#define GET        "GET / HTTP/1.1\r\n"

static const struct hcase requests[] = {
	/* Valid requests and their framing. */
	{ REQ("minimal", GET HOST "\r\n"), .nhdrs = 1 },
	{ REQ("http/1.0 without host", "GET / HTTP/1.0\r\n\r\n"), .v10 = 1 },
	{ REQ("http/1.0 with host", "GET / HTTP/1.0\r\n" HOST "\r\n"), .v10 = 1,
	    .nhdrs = 1 },
	{ REQ("content-length",
	      "POST /v1/messages HTTP/1.1\r\n" HOST
	      "Content-Length: 5\r\n\r\nhello"),
	    .nhdrs = 2, .body = HTTP1_BODY_LENGTH, .cl = 5, .body_bytes = 5 },
	{ REQ("content-length zero",
	      "POST / HTTP/1.1\r\n" HOST "Content-Length: 0\r\n\r\n"),
	    .nhdrs = 2, .body = HTTP1_BODY_LENGTH },
	{ REQ("content-length 2^63-1",
	      "POST / HTTP/1.1\r\n" HOST
	      "Content-Length: 9223372036854775807\r\n\r\n"),
	    .nhdrs = 2, .body = HTTP1_BODY_LENGTH,
	    .cl = UINT64_C(9223372036854775807) },
	{ REQ("content-length leading zeros",
	      "POST / HTTP/1.1\r\n" HOST "Content-Length: 007\r\n\r\n"),
	    .nhdrs = 2, .body = HTTP1_BODY_LENGTH, .cl = 7 },
	{ REQ("chunked",
	      "POST / HTTP/1.1\r\n" HOST
	      "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
	    .nhdrs = 2, .body = HTTP1_BODY_CHUNKED, .body_bytes = 5 },
	{ REQ("chunked any case with OWS",
	      "POST / HTTP/1.1\r\n" HOST "transfer-encoding: \t ChUnKeD \t\r\n"
	      "\r\n"),
	    .nhdrs = 2, .body = HTTP1_BODY_CHUNKED },
	{ REQ("connection tokens",
	      GET HOST "Connection: foo , Keep-Alive\r\nConnection: CLOSE\r\n"
		       "\r\n"),
	    .nhdrs = 3, .flags = HTTP1_F_CLOSE | HTTP1_F_KEEPALIVE },
	{ REQ("connection token must match whole",
	      GET HOST "Connection: closed, keep-alive-x\r\n\r\n"),
	    .nhdrs = 2 },
	{ REQ("expect 100-continue",
	      "POST / HTTP/1.1\r\n" HOST "Expect: 100-Continue\r\n"
	      "Content-Length: 1\r\n\r\nx"),
	    .nhdrs = 3, .body = HTTP1_BODY_LENGTH, .cl = 1, .body_bytes = 1,
	    .flags = HTTP1_F_EXPECT_100 },
	{ REQ("proxy-connection and te",
	      GET HOST "Proxy-Connection: keep-alive\r\nTE: trailers\r\n\r\n"),
	    .nhdrs = 3, .flags = HTTP1_F_PROXY_CONN | HTTP1_F_HAS_TE_HDR },
	{ REQ("obs-text and htab in value",
	      GET HOST "X-A: caf\xc3\xa9\tau lait\r\n\r\n"),
	    .nhdrs = 2 },
	{ REQ("empty values", GET HOST "X-A:\r\nX-B: \t \r\n\r\n"),
	    .nhdrs = 3 },
	{ REQ("tchar method and names",
	      "M-1!#$%&'*+.^_`|~ / HTTP/1.1\r\n" HOST "a!#$%&'*+-.^_`|~9: v\r\n"
	      "\r\n"),
	    .nhdrs = 2 },
	{ REQ("absolute-form",
	      "GET http://a.example/x?y=%20 HTTP/1.1\r\n" HOST "\r\n"),
	    .nhdrs = 1 },
	{ REQ("host with port",
	      "GET / HTTP/1.1\r\nHost: a.example:8443\r\n"
	      "\r\n"),
	    .nhdrs = 1 },
	{ REQ("host ipv6", "GET / HTTP/1.1\r\nHost: [2001:2::1]:80\r\n\r\n"),
	    .nhdrs = 1 },
	{ REQ("body bytes are not the head's", GET HOST "\r\n\nx\ry\r\n"),
	    .nhdrs = 1, .body_bytes = 6 },
	{ REQ("exactly max headers", GET HOST "A: 1\r\nB: 2\r\n\r\n"),
	    .maxh = 3, .nhdrs = 3 },

	/* Incomplete heads. */
	{ REQ("no empty line", GET HOST), .incomplete = 1 },
	{ REQ("ends in CR", GET HOST "\r"), .incomplete = 1 },
	{ REQ("start line only", "GET / HTTP/1.1\r"), .incomplete = 1 },
	{ REQ("empty", ""), .incomplete = 1 },

	/* Line ends. */
	{ REQ("bare LF request line", "GET / HTTP/1.1\n" HOST "\r\n"),
	    E(BARE_LF) },
	{ REQ("bare LF field", GET "Host: a\n\r\n"), E(BARE_LF) },
	{ REQ("bare LF end", GET HOST "\n"), E(BARE_LF) },
	{ REQ("bare LF only", "\n"), E(BARE_LF) },
	{ REQ("bare CR field", GET "Host: a\rX: b\r\n\r\n"), E(BARE_CR) },
	{ REQ("CR CR LF", "GET / HTTP/1.1\r\r\n" HOST "\r\n"), E(BARE_CR) },
	{ REQ("bare CR end", GET HOST "\r\r\n"), E(BARE_CR) },
	/* The earliest fault wins, whatever arrives later. */
	{ REQ("field error before bare LF", GET "Bad Name: x\r\n\n"),
	    E(FIELD_NAME) },

	/* obs-fold and the colon. */
	{ REQ("obs-fold SP", GET HOST "X: a\r\n b\r\n\r\n"), E(OBS_FOLD) },
	{ REQ("obs-fold HTAB", GET HOST "X: a\r\n\tb\r\n\r\n"), E(OBS_FOLD) },
	{ REQ("whitespace after start line", GET " " HOST "\r\n"),
	    E(OBS_FOLD) },
	{ REQ("SP before colon", GET "Host : a\r\n\r\n"), E(WS_BEFORE_COLON) },
	{ REQ("HTAB before colon", GET "Host\t: a\r\n\r\n"),
	    E(WS_BEFORE_COLON) },

	/* Request line. */
	{ REQ("method non-tchar", "G(T / HTTP/1.1\r\n" HOST "\r\n"),
	    E(METHOD) },
	{ REQ("method empty", " / HTTP/1.1\r\n" HOST "\r\n"), E(METHOD) },
	{ REQ("method obs-text", "GE\xc3\xa9T / HTTP/1.1\r\n" HOST "\r\n"),
	    E(METHOD) },
	{ REQ("method HTAB", "GET\t/ HTTP/1.1\r\n" HOST "\r\n"), E(METHOD) },
	{ REQ("target DEL", "GET /a\x7f HTTP/1.1\r\n" HOST "\r\n"), E(TARGET) },
	{ REQ("target obs-text", "GET /caf\xc3\xa9 HTTP/1.1\r\n" HOST "\r\n"),
	    E(TARGET) },
	{ REQ("target HTAB", "GET /a\tb HTTP/1.1\r\n" HOST "\r\n"), E(TARGET) },
	{ REQB("target NUL", "GET /a\0 HTTP/1.1\r\nHost: a\r\n\r\n"),
	    E(TARGET) },
	{ REQ("double SP", "GET  / HTTP/1.1\r\n" HOST "\r\n"), E(TARGET) },
	{ REQ("version 1.2", "GET / HTTP/1.2\r\n" HOST "\r\n"), E(VERSION) },
	{ REQ("version 2.0", "GET / HTTP/2.0\r\n" HOST "\r\n"), E(VERSION) },
	{ REQ("version lower case", "GET / http/1.1\r\n" HOST "\r\n"),
	    E(VERSION) },
	{ REQ("version 1.10", "GET / HTTP/1.10\r\n" HOST "\r\n"), E(VERSION) },
	{ REQ("leading empty line", "\r\n" GET HOST "\r\n"), E(REQUEST_LINE) },
	{ REQ("leading empty line alone", "\r\n"), E(REQUEST_LINE) },
	{ REQ("no version", "GET /\r\n\r\n"), E(REQUEST_LINE) },
	{ REQ("method only", "GET\r\n\r\n"), E(REQUEST_LINE) },
	{ REQ("trailing SP", "GET / HTTP/1.1 \r\n" HOST "\r\n"),
	    E(REQUEST_LINE) },
	{ REQ("four parts", "GET / x HTTP/1.1\r\n" HOST "\r\n"),
	    E(REQUEST_LINE) },
	{ REQB("start line refused before the end",
	      "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\nmore"),
	    E(METHOD) },

	/* Field names and values. */
	{ REQ("empty name", GET HOST ": v\r\n\r\n"), E(FIELD_NAME) },
	{ REQ("name non-tchar", GET HOST "X(: v\r\n\r\n"), E(FIELD_NAME) },
	{ REQ("name inner SP", GET HOST "Ho st: a\r\n\r\n"), E(FIELD_NAME) },
	{ REQ("name without colon", GET HOST "NoColon\r\n\r\n"),
	    E(FIELD_NAME) },
	{ REQ("name obs-text", GET HOST "X\xc3\xa9: v\r\n\r\n"),
	    E(FIELD_NAME) },
	{ REQ("value CTL", GET HOST "X: a\x01z\r\n\r\n"), E(FIELD_VALUE) },
	{ REQ("value DEL", GET HOST "X: a\x7f\r\n\r\n"), E(FIELD_VALUE) },
	{ REQ("value ESC", GET HOST "X: \x1b[0m\r\n\r\n"), E(FIELD_VALUE) },
	{ REQB("value NUL", GET "Host: a\r\nX: a\0b\r\n\r\n"), E(FIELD_VALUE) },
	{ REQB("value trailing NUL not trimmed",
	      GET "Host: a\r\nX: ab \0\r\n\r\n"),
	    E(FIELD_VALUE) },

	/* Limits. */
	{ REQ("one field over max", GET HOST "A: 1\r\nB: 2\r\nC: 3\r\n\r\n"),
	    .maxh = 3, E(TOO_MANY_HEADERS) },

	/* Framing. */
	{ REQ("CL and TE",
	      "POST / HTTP/1.1\r\n" HOST "Content-Length: 5\r\n"
	      "Transfer-Encoding: chunked\r\n\r\n"),
	    E(CL_AND_TE) },
	{ REQ("TE and CL",
	      "POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked\r\n"
	      "Content-Length: 5\r\n\r\n"),
	    E(CL_AND_TE) },
	{ REQ("CL twice equal",
	      "POST / HTTP/1.1\r\n" HOST "Content-Length: 5\r\n"
	      "Content-Length: 5\r\n\r\n"),
	    E(CL_MULTIPLE) },
	{ REQ("CL list",
	      "POST / HTTP/1.1\r\n" HOST "Content-Length: 5, 5\r\n\r\n"),
	    E(CL_MULTIPLE) },
	{ REQ("CL empty",
	      "POST / HTTP/1.1\r\n" HOST "Content-Length: \r\n\r\n"),
	    E(CL_INVALID) },
	{ REQ("CL hex",
	      "POST / HTTP/1.1\r\n" HOST "Content-Length: 0x5\r\n"
	      "\r\n"),
	    E(CL_INVALID) },
	{ REQ("CL sign",
	      "POST / HTTP/1.1\r\n" HOST "Content-Length: +5\r\n"
	      "\r\n"),
	    E(CL_INVALID) },
	{ REQ("CL inner SP",
	      "POST / HTTP/1.1\r\n" HOST "Content-Length: 5 5\r\n\r\n"),
	    E(CL_INVALID) },
	{ REQ("CL 2^63",
	      "POST / HTTP/1.1\r\n" HOST
	      "Content-Length: 9223372036854775808\r\n\r\n"),
	    E(CL_INVALID) },
	{ REQ("CL 2^64",
	      "POST / HTTP/1.1\r\n" HOST
	      "Content-Length: 18446744073709551616\r\n\r\n"),
	    E(CL_INVALID) },
	{ REQ("TE gzip, chunked",
	      "POST / HTTP/1.1\r\n" HOST
	      "Transfer-Encoding: gzip, chunked\r\n\r\n"),
	    E(TE_NOT_CHUNKED) },
	{ REQ("TE chunked twice in a list",
	      "POST / HTTP/1.1\r\n" HOST
	      "Transfer-Encoding: chunked, chunked\r\n\r\n"),
	    E(TE_NOT_CHUNKED) },
	{ REQ("TE identity",
	      "POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: identity\r\n\r\n"),
	    E(TE_NOT_CHUNKED) },
	{ REQ("TE two fields",
	      "POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked\r\n"
	      "Transfer-Encoding: chunked\r\n\r\n"),
	    E(TE_NOT_CHUNKED) },
	{ REQ("TE in HTTP/1.0",
	      "POST / HTTP/1.0\r\n"
	      "Transfer-Encoding: chunked\r\n\r\n"),
	    E(TE_NOT_CHUNKED) },

	/* Host and Upgrade. */
	{ REQ("host missing", GET "Accept: */*\r\n\r\n"), E(HOST_MISSING) },
	{ REQ("host twice", GET HOST HOST "\r\n"), E(HOST_MULTIPLE) },
	{ REQ("host twice in 1.0", "GET / HTTP/1.0\r\n" HOST HOST "\r\n"),
	    E(HOST_MULTIPLE) },
	{ REQ("host userinfo", GET "Host: u@a.example\r\n\r\n"),
	    E(HOST_INVALID) },
	{ REQ("host empty", GET "Host: \r\n\r\n"), E(HOST_INVALID) },
	{ REQ("host port 0", GET "Host: a.example:0\r\n\r\n"),
	    E(HOST_INVALID) },
	{ REQ("host empty port", GET "Host: a.example:\r\n\r\n"),
	    E(HOST_INVALID) },
	{ REQ("host list", GET "Host: a.example, b.example\r\n\r\n"),
	    E(HOST_INVALID) },
	{ REQ("host bad ipv6", GET "Host: [::1\r\n\r\n"), E(HOST_INVALID) },
	{ REQ("upgrade",
	      GET HOST "Connection: upgrade\r\n"
		       "Upgrade: websocket\r\n\r\n"),
	    E(UPGRADE) },
	{ REQ("upgrade empty", GET HOST "upgrade:\r\n\r\n"), E(UPGRADE) },
};

#define SOK "HTTP/1.1 200 OK\r\n"

static const struct hcase responses[] = {
	{ RSP("length", SOK "Content-Length: 3\r\n\r\nabc"), .status = 200,
	    .nhdrs = 1, .body = HTTP1_BODY_LENGTH, .cl = 3, .body_bytes = 3 },
	{ RSP("chunked", SOK "Transfer-Encoding: chunked\r\n\r\n"),
	    .status = 200, .nhdrs = 1, .body = HTTP1_BODY_CHUNKED },
	{ RSP("until EOF", SOK "Content-Type: text/plain\r\n\r\nabc"),
	    .status = 200, .nhdrs = 1, .body = HTTP1_BODY_EOF,
	    .body_bytes = 3 },
	{ RSP("no fields, EOF", SOK "\r\n"), .status = 200,
	    .body = HTTP1_BODY_EOF },
	{ RSP("HEAD with length", SOK "Content-Length: 3\r\n\r\n"), .head = 1,
	    .status = 200, .nhdrs = 1, .cl = 3 },
	{ RSP("HEAD with chunked", SOK "Transfer-Encoding: chunked\r\n\r\n"),
	    .head = 1, .status = 200, .nhdrs = 1 },
	{ RSP("204", "HTTP/1.1 204 No Content\r\n\r\n"), .status = 204 },
	{ RSP("304 with length",
	      "HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n"),
	    .status = 304, .nhdrs = 1, .cl = 10 },
	{ RSP("100 continue", "HTTP/1.1 100 Continue\r\n\r\n"), .status = 100 },
	{ RSP("103 early hints",
	      "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n"
	      "\r\n"),
	    .status = 103, .nhdrs = 1 },
	{ RSP("http/1.0 EOF", "HTTP/1.0 200 OK\r\n\r\n"), .v10 = 1,
	    .status = 200, .body = HTTP1_BODY_EOF },
	{ RSP("empty reason", "HTTP/1.1 200 \r\n\r\n"), .status = 200,
	    .body = HTTP1_BODY_EOF },
	{ RSP("reason obs-text and HTAB",
	      "HTTP/1.1 599 \xc3\xa9t\xc3\xa9\tok"
	      "\r\n\r\n"),
	    .status = 599, .body = HTTP1_BODY_EOF },
	{ RSP("connection close", SOK "Connection: close\r\n\r\n"),
	    .status = 200, .nhdrs = 1, .body = HTTP1_BODY_EOF,
	    .flags = HTTP1_F_CLOSE },
	{ RSP("upgrade is not refused in a response",
	      SOK "Upgrade: h2c\r\nContent-Length: 0\r\n\r\n"),
	    .status = 200, .nhdrs = 2, .body = HTTP1_BODY_LENGTH },
	{ RSP("sse",
	      SOK "Content-Type: text/event-stream\r\n"
		  "Transfer-Encoding: chunked\r\n\r\n5\r\ndata:\r\n"),
	    .status = 200, .nhdrs = 2, .body = HTTP1_BODY_CHUNKED,
	    .body_bytes = 10 },
	{ RSP("incomplete", SOK "Content-Length: 3\r\n"), .incomplete = 1 },

	{ RSP("no second SP", "HTTP/1.1 200\r\n\r\n"), E(STATUS_LINE) },
	{ RSP("four digits", "HTTP/1.1 2000 OK\r\n\r\n"), E(STATUS_LINE) },
	{ RSP("two digits", "HTTP/1.1 20 OK\r\n\r\n"), E(STATUS_LINE) },
	{ RSP("status 099", "HTTP/1.1 099 X\r\n\r\n"), E(STATUS_LINE) },
	{ RSP("status 600", "HTTP/1.1 600 X\r\n\r\n"), E(STATUS_LINE) },
	{ RSP("status hex", "HTTP/1.1 20a OK\r\n\r\n"), E(STATUS_LINE) },
	{ RSP("reason CTL", "HTTP/1.1 200 O\x01K\r\n\r\n"), E(STATUS_LINE) },
	{ RSP("reason DEL", "HTTP/1.1 200 OK\x7f\r\n\r\n"), E(STATUS_LINE) },
	{ RSP("double SP", "HTTP/1.1  200 OK\r\n\r\n"), E(STATUS_LINE) },
	{ RSP("leading empty line", "\r\n" SOK "\r\n"), E(STATUS_LINE) },
	{ RSP("version 2", "HTTP/2 200 OK\r\n\r\n"), E(VERSION) },
	{ RSP("version missing", "200 OK\r\n\r\n"), E(VERSION) },
	{ RSP("version only", "HTTP/1.1\r\n\r\n"), E(STATUS_LINE) },
	{ RSP("bare LF", "HTTP/1.1 200 OK\nContent-Length: 0\n\n"),
	    E(BARE_LF) },
	{ RSP("bare CR", SOK "A: b\r\r\n\r\n"), E(BARE_CR) },
	{ RSP("obs-fold", SOK "A: b\r\n c\r\n\r\n"), E(OBS_FOLD) },
	{ RSP("ws before colon", SOK "A : b\r\n\r\n"), E(WS_BEFORE_COLON) },
	{ RSP("field name", SOK "A/B: c\r\n\r\n"), E(FIELD_NAME) },
	{ RSP("field value", SOK "A: \x0b\r\n\r\n"), E(FIELD_VALUE) },
	{ RSP("too many", SOK "A: 1\r\nB: 2\r\n\r\n"), .maxh = 1,
	    E(TOO_MANY_HEADERS) },
	{ RSP("CL and TE",
	      SOK "Content-Length: 3\r\n"
		  "Transfer-Encoding: chunked\r\n\r\n"),
	    E(CL_AND_TE) },
	{ RSP("CL twice", SOK "Content-Length: 3\r\nContent-Length: 3\r\n\r\n"),
	    E(CL_MULTIPLE) },
	{ RSP("CL invalid", SOK "Content-Length: three\r\n\r\n"),
	    E(CL_INVALID) },
	{ RSP("CL invalid even for HEAD", SOK "Content-Length: -1\r\n\r\n"),
	    .head = 1, E(CL_INVALID) },
	{ RSP("TE not chunked", SOK "Transfer-Encoding: gzip\r\n\r\n"),
	    E(TE_NOT_CHUNKED) },
	{ RSP("TE in HTTP/1.0",
	      "HTTP/1.0 200 OK\r\n"
	      "Transfer-Encoding: chunked\r\n\r\n"),
	    E(TE_NOT_CHUNKED) },
};

static void
test_requests(void **state)
{
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(requests) / sizeof(requests[0]); i++)
		run_case(&requests[i]);
}

static void
test_responses(void **state)
{
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(responses) / sizeof(responses[0]); i++)
		run_case(&responses[i]);
}

/* The slices of a request point at the right bytes. */
static void
test_request_slices(void **state)
{
	static const char in[] = "POST http://a.example:8080/v1?x HTTP/1.1\r\n"
				 "Host:  a.example:8080 \t\r\n"
				 "X-Empty:\r\n"
				 "content-length:12\r\n\r\n";
	struct http1_hdr hdrs[4];
	struct http1_msg m;
	const char *p = guard_put(in, sizeof(in) - 1);
	ssize_t r;

	(void)state;
	msg_init(&m, hdrs, 4);
	r = http1_parse_request(&m, p, sizeof(in) - 1, 0);
	assert_int_equal(r, sizeof(in) - 1);
	assert_int_equal(m.method_len, 4);
	assert_memory_equal(m.method, "POST", 4);
	assert_int_equal(m.target_len, 26);
	assert_memory_equal(m.target, "http://a.example:8080/v1?x", 26);
	assert_int_equal(m.nhdrs, 3);
	assert_int_equal(m.hdrs[0].name_len, 4);
	assert_memory_equal(m.hdrs[0].value, "a.example:8080", 14);
	assert_int_equal(m.hdrs[0].value_len, 14);
	assert_int_equal(m.hdrs[1].value_len, 0);
	assert_int_equal(m.hdrs[2].value_len, 2);
	assert_int_equal(m.host_len, 14);
	assert_ptr_equal(m.host, m.hdrs[0].value);
	assert_int_equal(m.body, HTTP1_BODY_LENGTH);
	assert_int_equal(m.content_length, 12);
	assert_int_equal(m.minor, 1);
}

/* A response's status line slices. */
static void
test_response_slices(void **state)
{
	static const char in[] = "HTTP/1.0 404 Not  Found \r\n\r\n";
	struct http1_hdr hdrs[1];
	struct http1_msg m;
	const char *p = guard_put(in, sizeof(in) - 1);

	(void)state;
	msg_init(&m, hdrs, 1);
	assert_int_equal(http1_parse_response(&m, p, sizeof(in) - 1, 0, 0),
	    sizeof(in) - 1);
	assert_int_equal(m.status, 404);
	assert_int_equal(m.minor, 0);
	assert_int_equal(m.reason_len, 11);
	assert_memory_equal(m.reason, "Not  Found ", 11);
	assert_null(m.host);
}

/* Parsing the same message twice into one struct gives the same answer. */
static void
test_reuse(void **state)
{
	static const char a[] = "GET /a HTTP/1.1\r\nHost: a\r\nX: 1\r\n\r\n";
	static const char b[] = "GET /b HTTP/1.0\r\n\r\n";
	struct http1_hdr hdrs[4];
	struct http1_msg m;

	(void)state;
	msg_init(&m, hdrs, 4);
	assert_int_equal(http1_parse_request(&m, a, sizeof(a) - 1, 0),
	    sizeof(a) - 1);
	assert_int_equal(m.nhdrs, 2);
	/* The caller zeroes between messages; the parser must not rely on
	 * it for correctness either. */
	assert_int_equal(http1_parse_request(&m, b, sizeof(b) - 1, 0),
	    sizeof(b) - 1);
	assert_int_equal(m.nhdrs, 0);
	assert_null(m.host);
	assert_int_equal(m.minor, 0);
}

static void
test_err_tables(void **state)
{
	int e, f;

	(void)state;
	for (e = 0; e < HTTP1_E__COUNT; e++) {
		const char *n = http1_err_name((enum http1_err)e);

		assert_string_not_equal(n, "unknown");
		for (f = 0; f < e; f++)
			assert_string_not_equal(n,
			    http1_err_name((enum http1_err)f));
		if (e == HTTP1_E_TOO_MANY_HEADERS)
			assert_int_equal(http1_err_status((enum http1_err)e),
			    431);
		else if (e == HTTP1_E_BODY_TOO_LARGE)
			assert_int_equal(http1_err_status((enum http1_err)e),
			    413);
		else
			assert_int_equal(http1_err_status((enum http1_err)e),
			    400);
	}
	assert_string_equal(http1_err_name(HTTP1_E_BARE_LF), "bare_lf");
	assert_string_equal(http1_err_name(HTTP1_E__COUNT), "unknown");
}

static void
test_find_and_connection(void **state)
{
	static const char in[] = "GET / HTTP/1.1\r\nHost: a\r\n"
				 "Connection: x-a, ,X-B\r\n"
				 "X-A: 1\r\nconnection: keep-alive\r\n"
				 "x-a: 2\r\n\r\n";
	struct http1_hdr hdrs[8];
	struct http1_msg m;

	(void)state;
	msg_init(&m, hdrs, 8);
	assert_true(http1_parse_request(&m, in, sizeof(in) - 1, 0) > 0);
	assert_int_equal(http1_find(&m, "x-a", 0), 2);
	assert_int_equal(http1_find(&m, "X-A", 3), 4);
	assert_int_equal(http1_find(&m, "x-a", 5), -1);
	assert_int_equal(http1_find(&m, "x-b", 0), -1);
	assert_true(http1_connection_lists(&m, "X-A", 3));
	assert_true(http1_connection_lists(&m, "x-b", 3));
	assert_true(http1_connection_lists(&m, "keep-alive", 10));
	assert_false(http1_connection_lists(&m, "x", 1));
	assert_false(http1_connection_lists(&m, "", 0));
	assert_true(http1_name_eq("Content-Length", 14, "content-length"));
	assert_false(http1_name_eq("Content-Lengt", 13, "content-length"));
	assert_false(http1_name_eq("Content-Lengthx", 15, "content-length"));
}

/*
 * A head that arrives in packets: the result only changes when a line
 * ends, and the buffer may move between calls.
 */
static void
test_incremental_moves(void **state)
{
	static const char in[] = "GET / HTTP/1.1\r\nHost: a\r\nX: b\r\n\r\n";
	struct http1_hdr hdrs[4];
	struct http1_msg m;
	size_t cuts[] = { 3, 15, 16, 24, 25, 32, sizeof(in) - 1 };
	size_t i, last = 0;
	ssize_t r = -2;

	(void)state;
	msg_init(&m, hdrs, 4);
	for (i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
		const char *p = guard_put(in, cuts[i]);

		r = http1_parse_request(&m, p, cuts[i], last);
		last = cuts[i];
		if (i + 1 < sizeof(cuts) / sizeof(cuts[0]))
			assert_int_equal(r, -2);
	}
	assert_int_equal(r, sizeof(in) - 1);
	assert_int_equal(m.nhdrs, 2);
}

/* Without room for a single field, any field is one too many. */
static void
test_no_room(void **state)
{
	static const char in[] = "GET / HTTP/1.1\r\nHost: a\r\n\r\n";
	static const char bare[] = "GET / HTTP/1.0\r\n\r\n";
	struct http1_hdr hdrs[1];
	struct http1_msg m;

	(void)state;
	msg_init(&m, NULL, 0);
	assert_int_equal(http1_parse_request(&m, in, sizeof(in) - 1, 0), -1);
	assert_int_equal(m.err, HTTP1_E_TOO_MANY_HEADERS);
	msg_init(&m, hdrs, 0);
	assert_int_equal(http1_parse_request(&m, in, sizeof(in) - 1, 0), -1);
	assert_int_equal(m.err, HTTP1_E_TOO_MANY_HEADERS);
	assert_int_equal(http1_parse_request(&m, bare, sizeof(bare) - 1, 0),
	    sizeof(bare) - 1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_requests),
		cmocka_unit_test(test_responses),
		cmocka_unit_test(test_request_slices),
		cmocka_unit_test(test_response_slices),
		cmocka_unit_test(test_reuse),
		cmocka_unit_test(test_err_tables),
		cmocka_unit_test(test_find_and_connection),
		cmocka_unit_test(test_incremental_moves),
		cmocka_unit_test(test_no_room),
	};

	return cmocka_run_group_tests_name("http1", tests, setup, teardown);
}
