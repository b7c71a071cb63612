/*
 * Unit tests for the exec DNS stub (proxy/dns/stub.c): the strict query
 * parser (one row per refusal, with the byte at fault), the answers for
 * mapped and other names checked through the resolver's own strict
 * response parser (proxy/dns/dnsmsg.c), names at the length limits, the
 * audit text of a name, and TCP framing. Queries sit against a PROT_NONE
 * page, so a read past the end faults.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "proxy/dns/dnsmsg.h"
#include "proxy/dns/stub.h"
#include "tests/unit/guard.h"

static const struct dnsstub_host hosts[] = {
	{ "api.example.com", { 127, 77, 0, 1 } },
	{ "Model.Example.ORG.", { 127, 77, 0, 2 } },
};

static int
setup(void **state)
{
	(void)state;
	return guard_setup(4096);
}

static int
teardown(void **state)
{
	(void)state;
	return guard_teardown();
}

/* A query under construction. */
struct qb {
	unsigned char b[2048];
	size_t n;
};

static void
put(struct qb *q, const void *p, size_t n)
{
	assert_true(q->n + n <= sizeof(q->b));
	memcpy(q->b + q->n, p, n);
	q->n += n;
}

static void
put16(struct qb *q, unsigned v)
{
	unsigned char b[2] = { (unsigned char)(v >> 8), (unsigned char)v };

	put(q, b, 2);
}

/* Header: id 0x1234, flags, counts. */
static void
hdr(struct qb *q, unsigned flags, unsigned qd, unsigned an, unsigned ns,
    unsigned ar)
{
	q->n = 0;
	put16(q, 0x1234);
	put16(q, flags);
	put16(q, qd);
	put16(q, an);
	put16(q, ns);
	put16(q, ar);
}

static void
name(struct qb *q, const char *dotted)
{
	const char *p = dotted, *dot;
	unsigned char l;

	while (*p != '\0') {
		dot = strchr(p, '.');
		l = (unsigned char)(dot != NULL ? (size_t)(dot - p) :
						  strlen(p));
		put(q, &l, 1);
		put(q, p, l);
		p += l;
		if (*p == '.')
			p++;
	}
	put(q, "", 1);
}

/* What a stub resolver sends: RD, one question, optionally EDNS. */
static void
query(struct qb *q, const char *n, unsigned qtype, int edns)
{
	hdr(q, 0x0100, 1, 0, 0, edns ? 1 : 0);
	name(q, n);
	put16(q, qtype);
	put16(q, 1);
	if (edns) {
		put(q, "", 1);
		put16(q, 41);
		put16(q, 1232);
		put16(q, 0);
		put16(q, 0);
		put16(q, 12); /* a cookie option, 8 bytes */
		put16(q, 10);
		put16(q, 8);
		put(q, "abcdefgh", 8);
	}
}

static size_t
answer(const struct qb *q, unsigned char *out, struct dnsstub_result *r)
{
	const unsigned char *m =
	    (const unsigned char *)guard_put((const char *)q->b, q->n);

	return dnsstub_answer(m, q->n, hosts, 2, out, DNSSTUB_ANSWER_MAX, r);
}

/* Check an answer with the resolver's parser: the question as sent. */
static void
reparse(const char *n, const unsigned char *mask, unsigned qtype,
    const unsigned char *a, size_t alen, int rcode, const unsigned char *v4)
{
	struct dnsmsg_query dq;
	struct dnsmsg_answer da;
	unsigned char addrs[4][16];
	enum dnsmsg_err e;
	size_t off;

	assert_int_equal(dnsmsg_query(&dq, n, (uint16_t)qtype, 0x1234, mask,
			     &e),
	    0);
	assert_int_equal(dnsmsg_parse(&dq, a, alen, &da, addrs, 4, &e, &off),
	    0);
	assert_int_equal(da.da_rcode, rcode);
	assert_int_equal(da.da_naddrs, v4 != NULL ? 1 : 0);
	if (v4 != NULL) {
		assert_memory_equal(addrs[0], v4, 4);
		assert_int_equal(da.da_ttl, DNSSTUB_TTL);
	}
}

static void
test_mapped_a(void **state)
{
	/* "API.Example.COM": bits of the upper-case letters (wire bytes
	 * 1-3, 5, 13-15). */
	static const unsigned char mask[DNSMSG_MASK_LEN] = { 0x2e, 0xe0 };
	unsigned char out[DNSSTUB_ANSWER_MAX];
	struct dnsstub_result r;
	struct qb q;
	size_t n;
	char text[DNSSTUB_NAME_TEXT_MAX];

	(void)state;
	query(&q, "API.Example.COM", 1, 0);
	n = answer(&q, out, &r);
	assert_int_equal(r.sr_decision, DNSSTUB_D_ANSWER);
	assert_int_equal(r.sr_host, 0);
	assert_int_equal(n, q.n + 16);
	assert_memory_equal(out, "\x12\x34\x85\x80\0\1\0\1\0\0\0\0", 12);
	assert_memory_equal(out + 12, q.b + 12, q.n - 12); /* the question */
	reparse("API.Example.COM", mask, 1, out, n, 0,
	    (const unsigned char *)"\x7f\x4d\0\1");
	dnsstub_name_text(q.b, &r.sr_q, text, sizeof(text));
	assert_string_equal(text, "api.example.com");

	/* The table's trailing dot and case do not matter. */
	query(&q, "model.example.org", 1, 1);
	n = answer(&q, out, &r);
	assert_int_equal(r.sr_decision, DNSSTUB_D_ANSWER);
	assert_int_equal(r.sr_host, 1);
	assert_int_equal(n, 12 + 19 + 4 + 16 + 11); /* + OPT */
	assert_memory_equal(out + 10, "\0\1", 2);
	assert_memory_equal(out + n - 11, "\0\0\x29\x04\xd0\0\0\0\0\0\0", 11);
	reparse("model.example.org", NULL, 1, out, n, 0,
	    (const unsigned char *)"\x7f\x4d\0\2");
}

static void
test_mapped_other_types(void **state)
{
	static const unsigned qtypes[] = { 28, 15, 16, 255, 5, 65 };
	unsigned char out[DNSSTUB_ANSWER_MAX];
	struct dnsstub_result r;
	struct qb q;
	size_t i, n;

	(void)state;
	for (i = 0; i < sizeof(qtypes) / sizeof(qtypes[0]); i++) {
		query(&q, "api.example.com", qtypes[i], 0);
		n = answer(&q, out, &r);
		assert_int_equal(r.sr_decision, DNSSTUB_D_NODATA);
		assert_int_equal(n, q.n);
		assert_int_equal(out[3] & 0xf, 0);
		assert_memory_equal(out + 6, "\0\0\0\0\0\0", 6);
	}
	/* AAAA: NOERROR and no address, as the resolver reads it. */
	query(&q, "api.example.com", 28, 0);
	n = answer(&q, out, &r);
	reparse("api.example.com", NULL, 28, out, n, 0, NULL);
}

static void
test_nxdomain(void **state)
{
	static const char *const names[] = { "example.com", "x.api.example.com",
		"api.example.co", "api.example.com.evil", "apiexample.com",
		"api.example.comm", "model.example.org.x",
		"exfil-0123abcd.t.co" };
	unsigned char out[DNSSTUB_ANSWER_MAX];
	struct dnsstub_result r;
	struct qb q;
	size_t i, n;

	(void)state;
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		query(&q, names[i], 1, 0);
		n = answer(&q, out, &r);
		assert_int_equal(r.sr_decision, DNSSTUB_D_NXDOMAIN);
		assert_int_equal(r.sr_host, SIZE_MAX);
		assert_int_equal(n, q.n);
		assert_int_equal(out[3] & 0xf, 3);
		reparse(names[i], NULL, 1, out, n, 3, NULL);
	}
	/* The root. */
	hdr(&q, 0x0100, 1, 0, 0, 0);
	put(&q, "\0\0\1\0\1", 5);
	assert_int_equal(answer(&q, out, &r), q.n);
	assert_int_equal(r.sr_decision, DNSSTUB_D_NXDOMAIN);
}

struct bad {
	const char *what;
	enum dnsstub_err err;
	enum dnsstub_decision d;
	size_t off;
};

static void
check_bad(struct qb *q, const struct bad *b)
{
	unsigned char out[DNSSTUB_ANSWER_MAX];
	struct dnsstub_result r;
	size_t n;

	n = answer(q, out, &r);
	if (r.sr_err != b->err || r.sr_decision != b->d || r.sr_off != b->off)
		fail_msg("%s: err %s decision %s off %zu", b->what,
		    dnsstub_strerror(r.sr_err),
		    dnsstub_decision_str(r.sr_decision), r.sr_off);
	if (b->d == DNSSTUB_D_DROP) {
		assert_int_equal(n, 0);
		return;
	}
	assert_memory_equal(out, "\x12\x34", 2);
	if (b->d == DNSSTUB_D_REFUSED) {
		assert_int_equal(out[3] & 0xf, 5);
		assert_int_equal(n, r.sr_q.sq_qend);
		return;
	}
	/* FORMERR and NOTIMP: the header alone. */
	assert_int_equal(n, 12);
	assert_int_equal(out[3] & 0xf, b->d == DNSSTUB_D_NOTIMP ? 4 : 1);
	assert_memory_equal(out + 4, "\0\0\0\0\0\0\0\0", 8);
}

static void
test_refused(void **state)
{
	struct qb q;
	struct bad b;
	int i;

	(void)state;
	q.n = 0;
	put(&q, "\x12\x34\1\0\0\1\0\0\0\0\0", 11);
	b = (struct bad){ "short", DNSSTUB_E_SHORT, DNSSTUB_D_DROP, 11 };
	check_bad(&q, &b);

	query(&q, "api.example.com", 1, 0);
	q.b[2] |= 0x80;
	b = (struct bad){ "response", DNSSTUB_E_RESPONSE, DNSSTUB_D_DROP, 2 };
	check_bad(&q, &b);

	query(&q, "api.example.com", 1, 0);
	q.b[2] |= 2 << 3; /* STATUS */
	b = (struct bad){ "opcode", DNSSTUB_E_OPCODE, DNSSTUB_D_NOTIMP, 2 };
	check_bad(&q, &b);

	query(&q, "api.example.com", 1, 0);
	q.b[5] = 0;
	b = (struct bad){ "qd 0", DNSSTUB_E_QDCOUNT, DNSSTUB_D_FORMERR, 4 };
	check_bad(&q, &b);
	q.b[5] = 2;
	b.what = "qd 2";
	check_bad(&q, &b);

	query(&q, "api.example.com", 1, 0);
	q.b[7] = 1;
	b = (struct bad){ "an", DNSSTUB_E_RECORDS, DNSSTUB_D_FORMERR, 6 };
	check_bad(&q, &b);
	q.b[7] = 0;
	q.b[9] = 1;
	b = (struct bad){ "ns", DNSSTUB_E_RECORDS, DNSSTUB_D_FORMERR, 8 };
	check_bad(&q, &b);

	query(&q, "api.example.com", 1, 1);
	q.b[11] = 2;
	b = (struct bad){ "ar 2", DNSSTUB_E_ARCOUNT, DNSSTUB_D_FORMERR, 10 };
	check_bad(&q, &b);

	/* A pointer to the name of ... nothing before the question. */
	hdr(&q, 0x0100, 1, 0, 0, 0);
	put(&q, "\3api\xc0\x0c\0\1\0\1", 10);
	b = (struct bad){ "pointer", DNSSTUB_E_POINTER, DNSSTUB_D_FORMERR, 16 };
	check_bad(&q, &b);
	hdr(&q, 0x0100, 1, 0, 0, 0);
	put(&q, "\x41x\0\0\1\0\1", 7);
	b = (struct bad){ "label 0x40", DNSSTUB_E_LABEL, DNSSTUB_D_FORMERR,
		12 };
	check_bad(&q, &b);

	query(&q, "api.example.com", 1, 0);
	q.n -= 3;
	b = (struct bad){ "cut qtype", DNSSTUB_E_TRUNCATED, DNSSTUB_D_FORMERR,
		q.n };
	check_bad(&q, &b);
	query(&q, "api.example.com", 1, 0);
	q.n = 16;
	b = (struct bad){ "cut label", DNSSTUB_E_TRUNCATED, DNSSTUB_D_FORMERR,
		16 };
	check_bad(&q, &b);
	query(&q, "api.example.com", 1, 0);
	q.n = 29;
	b = (struct bad){ "no root label", DNSSTUB_E_TRUNCATED,
		DNSSTUB_D_FORMERR, 29 };
	check_bad(&q, &b);

	query(&q, "api.example.com", 1, 0);
	put(&q, "", 1);
	b = (struct bad){ "trailing", DNSSTUB_E_TRAILING, DNSSTUB_D_FORMERR,
		q.n - 1 };
	check_bad(&q, &b);
	query(&q, "api.example.com", 1, 1);
	put(&q, "", 1);
	b.what = "trailing after OPT";
	b.off = q.n - 1;
	check_bad(&q, &b);

	/* The one additional record must be an EDNS(0) OPT. */
	query(&q, "api.example.com", 1, 1);
	q.b[35] = 1; /* type 0x0101 */
	b = (struct bad){ "not OPT", DNSSTUB_E_OPT, DNSSTUB_D_FORMERR, 33 };
	check_bad(&q, &b);
	query(&q, "api.example.com", 1, 1);
	q.b[39] = 1; /* version 1 */
	b = (struct bad){ "EDNS1", DNSSTUB_E_OPT, DNSSTUB_D_FORMERR, 39 };
	check_bad(&q, &b);
	query(&q, "api.example.com", 1, 1);
	q.b[33] = 1; /* owner not the root */
	b = (struct bad){ "OPT owner", DNSSTUB_E_OPT, DNSSTUB_D_FORMERR, 33 };
	check_bad(&q, &b);
	query(&q, "api.example.com", 1, 1);
	q.b[43] = 13; /* rdlen one more than there is */
	b = (struct bad){ "OPT rdlen", DNSSTUB_E_TRUNCATED, DNSSTUB_D_FORMERR,
		q.n };
	check_bad(&q, &b);
	query(&q, "api.example.com", 1, 0);
	q.b[11] = 1; /* counted, absent */
	b = (struct bad){ "OPT absent", DNSSTUB_E_TRUNCATED, DNSSTUB_D_FORMERR,
		q.n };
	check_bad(&q, &b);

	/* Class: CH gets REFUSED, the question echoed. */
	query(&q, "api.example.com", 16, 0);
	q.b[q.n - 1] = 3;
	b = (struct bad){ "class CH", DNSSTUB_E_CLASS, DNSSTUB_D_REFUSED,
		q.n - 2 };
	check_bad(&q, &b);

	/* Too long, whatever it holds. */
	query(&q, "api.example.com", 1, 0);
	for (i = 0; q.n <= DNSSTUB_QUERY_MAX; i++)
		put(&q, "", 1);
	b = (struct bad){ "too long", DNSSTUB_E_TOO_LONG, DNSSTUB_D_FORMERR,
		DNSSTUB_QUERY_MAX };
	check_bad(&q, &b);
}

/* A name of exactly wire bytes (labels of 63, the rest in the last). */
static void
long_name(struct qb *q, size_t wire)
{
	char label[64];
	size_t left = wire - 1, l;

	hdr(q, 0x0100, 1, 0, 0, 0);
	memset(label, 'a', sizeof(label));
	while (left > 0) {
		l = left - 1 > 63 ? 63 : left - 1;
		if (left - 1 - l == 1) /* no room for a 0-byte label */
			l--;
		q->b[q->n++] = (unsigned char)l;
		put(q, label, l);
		left -= 1 + l;
	}
	put(q, "\0\0\1\0\1", 5);
}

static void
test_limits(void **state)
{
	unsigned char out[DNSSTUB_ANSWER_MAX];
	struct dnsstub_result r;
	struct qb q;
	struct bad b;
	size_t n;

	(void)state;
	long_name(&q, 255);
	n = answer(&q, out, &r);
	assert_int_equal(r.sr_decision, DNSSTUB_D_NXDOMAIN);
	assert_int_equal(r.sr_q.sq_name_len, 255);
	assert_int_equal(n, q.n);
	long_name(&q, 256);
	b = (struct bad){ "256", DNSSTUB_E_NAME_LONG, DNSSTUB_D_FORMERR,
		12 + 256 - 1 };
	check_bad(&q, &b);
	/* A label of 64 is a reserved label type on the wire (0x40). */
	hdr(&q, 0x0100, 1, 0, 0, 0);
	q.b[q.n++] = 63;
	memset(q.b + q.n, 'x', 63);
	q.n += 63;
	put(&q, "\0\0\1\0\1", 5);
	assert_int_equal(answer(&q, out, &r), q.n);
	assert_int_equal(r.sr_decision, DNSSTUB_D_NXDOMAIN);
	/* The largest answer fits DNSSTUB_ANSWER_MAX. */
	long_name(&q, 255);
	q.b[11] = 1;
	put(&q, "\0\0\x29\4\xd0\0\0\0\0\0\0", 11);
	n = answer(&q, out, &r);
	assert_int_equal(n, q.n);
	assert_true(n + 16 <= DNSSTUB_ANSWER_MAX);
	/* And a buffer too small for the answer sends nothing. */
	query(&q, "api.example.com", 1, 0);
	assert_int_equal(dnsstub_answer(q.b, q.n, hosts, 2, out, q.n + 15, &r),
	    0);
	assert_int_equal(r.sr_decision, DNSSTUB_D_DROP);
}

static void
test_name_text(void **state)
{
	struct dnsstub_query sq;
	enum dnsstub_err e;
	char text[DNSSTUB_NAME_TEXT_MAX], small[6];
	struct qb q;
	size_t off;

	(void)state;
	hdr(&q, 0x0100, 1, 0, 0, 0);
	put(&q, "\5A\0b.Z\2_-\0\0\1\0\1", 14);
	assert_int_equal(dnsstub_parse(q.b, q.n, &sq, &e, &off), 0);
	assert_int_equal(dnsstub_name_text(q.b, &sq, text, sizeof(text)), 14);
	assert_string_equal(text, "a\\000b\\046z._-");
	assert_int_equal(dnsstub_name_text(q.b, &sq, small, sizeof(small)), 5);
	assert_string_equal(small, "a\\000"); /* never half an escape */
	hdr(&q, 0x0100, 1, 0, 0, 0);
	put(&q, "\0\0\1\0\1", 5);
	assert_int_equal(dnsstub_parse(q.b, q.n, &sq, &e, &off), 0);
	assert_int_equal(dnsstub_name_text(q.b, &sq, text, sizeof(text)), 1);
	assert_string_equal(text, ".");
	assert_string_equal(dnsstub_decision_str(DNSSTUB_D_NXDOMAIN),
	    "nxdomain");
	assert_string_equal(dnsstub_strerror(DNSSTUB_E__COUNT),
	    "unknown error");
}

static void
test_tcp_frame(void **state)
{
	unsigned char b[2 + DNSSTUB_QUERY_MAX + 1];
	size_t n = 0;

	(void)state;
	memset(b, 0, sizeof(b));
	assert_int_equal(dnsstub_tcp_frame(b, 0, &n), 0);
	assert_int_equal(dnsstub_tcp_frame(b, 1, &n), 0);
	assert_int_equal(dnsstub_tcp_frame(b, 2, &n), -1); /* length 0 */
	dnsstub_tcp_prefix(b, 33);
	assert_memory_equal(b, "\0\x21", 2);
	assert_int_equal(dnsstub_tcp_frame(b, 34, &n), 0);
	assert_int_equal(dnsstub_tcp_frame(b, 35, &n), 1);
	assert_int_equal(n, 33);
	assert_int_equal(dnsstub_tcp_frame(b, 40, &n), 1); /* pipelined */
	dnsstub_tcp_prefix(b, DNSSTUB_QUERY_MAX);
	assert_int_equal(dnsstub_tcp_frame(b, sizeof(b), &n), 1);
	dnsstub_tcp_prefix(b, DNSSTUB_QUERY_MAX + 1);
	assert_int_equal(dnsstub_tcp_frame(b, 2, &n), -1);
	dnsstub_tcp_prefix(b, 0xffff);
	assert_int_equal(dnsstub_tcp_frame(b, 2, &n), -1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mapped_a),
		cmocka_unit_test(test_mapped_other_types),
		cmocka_unit_test(test_nxdomain),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_limits),
		cmocka_unit_test(test_name_text),
		cmocka_unit_test(test_tcp_frame),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
