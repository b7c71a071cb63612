/*
 * Unit tests for DNS messages (proxy/dnsmsg.c): query building with 0x20
 * case bits, and the strict response checks a forged or broken answer must
 * fail (id, question case and type, pointers, truncation, CNAME chains,
 * TTLs, the address cap). Responses sit against a PROT_NONE page.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "proxy/dns/dnsmsg.h"
#include "tests/unit/guard.h"

#define QNAME "api.example.com"

static int
setup(void **state)
{
	(void)state;
	return guard_setup(DNSMSG_MSG_MAX);
}

static int
teardown(void **state)
{
	(void)state;
	return guard_teardown();
}

/* A response under construction. */
struct mb {
	unsigned char b[8192];
	size_t n;
};

static void
mb_put(struct mb *m, const void *p, size_t n)
{
	assert_true(m->n + n <= sizeof(m->b));
	memcpy(m->b + m->n, p, n);
	m->n += n;
}

static void
mb_16(struct mb *m, unsigned v)
{
	unsigned char b[2] = { (unsigned char)(v >> 8), (unsigned char)v };

	mb_put(m, b, 2);
}

static void
mb_32(struct mb *m, uint32_t v)
{
	mb_16(m, v >> 16);
	mb_16(m, v & 0xffff);
}

/* Header and the question exactly as q sent it. */
static void
mb_start(struct mb *m, const struct dnsmsg_query *q, unsigned flags,
    unsigned an, unsigned ns, unsigned ar)
{
	m->n = 0;
	mb_16(m, q->dq_id);
	mb_16(m, flags);
	mb_16(m, 1);
	mb_16(m, an);
	mb_16(m, ns);
	mb_16(m, ar);
	mb_put(m, q->dq_msg + DNSMSG_HDR_LEN, q->dq_len - DNSMSG_HDR_LEN);
}

/* A record: name in wire form (may hold pointers) of nlen bytes. */
static void
mb_rr(struct mb *m, const char *name, size_t nlen, unsigned type,
    unsigned class, uint32_t ttl, const void *rd, size_t rdlen)
{
	mb_put(m, name, nlen);
	mb_16(m, type);
	mb_16(m, class);
	mb_32(m, ttl);
	mb_16(m, (unsigned)rdlen);
	mb_put(m, rd, rdlen);
}

#define PTR_Q "\xc0\x0c" /* the question's name */
#define A_REC 5          /* CNAME type */
#define NOERR 0x8180     /* QR RD RA */
#define A1    "\x01\x02\x03\x04"
#define A2    "\x05\x06\x07\x08"
#define NAME_B                                                                 \
	"\x01"                                                                 \
	"b\x07"                                                                \
	"example\x03"                                                          \
	"com\x00"
#define NAME_C                                                                 \
	"\x01"                                                                 \
	"c\x07"                                                                \
	"example\x03"                                                          \
	"com\x00"

static void
query(struct dnsmsg_query *q, uint16_t qtype)
{
	enum dnsmsg_err e;

	assert_int_equal(dnsmsg_query(q, QNAME, qtype, 0x1234, NULL, &e), 0);
}

static int
parse(const struct dnsmsg_query *q, const struct mb *m, struct dnsmsg_answer *a,
    unsigned char (*addrs)[16], size_t max, enum dnsmsg_err *e, size_t *off)
{
	const unsigned char *p =
	    (const unsigned char *)guard_put((const char *)m->b, m->n);

	return dnsmsg_parse(q, p, m->n, a, addrs, max, e, off);
}

static void
expect_err(const struct dnsmsg_query *q, const struct mb *m,
    enum dnsmsg_err want, size_t want_off)
{
	struct dnsmsg_answer a;
	unsigned char addrs[4][16];
	enum dnsmsg_err e;
	size_t off;

	assert_int_equal(parse(q, m, &a, addrs, 4, &e, &off), -1);
	assert_int_equal(e, want);
	if (want_off != (size_t)-1)
		assert_int_equal(off, want_off);
}

static void
test_query_build(void **state)
{
	static const unsigned char want[] = "\x12\x34\x01\x00\x00\x01\x00\x00"
					    "\x00\x00\x00\x00"
					    "\x03"
					    "api\x07"
					    "example\x03"
					    "com\x00\x00\x1c\x00\x01";
	struct dnsmsg_query q;
	unsigned char mask[DNSMSG_MASK_LEN];
	enum dnsmsg_err e;

	(void)state;
	assert_int_equal(dnsmsg_query(&q, "API.Example.com.", DNSMSG_QTYPE_AAAA,
			     0x1234, NULL, &e),
	    0);
	assert_int_equal(q.dq_len, sizeof(want) - 1);
	assert_memory_equal(q.dq_msg, want, sizeof(want) - 1);
	/* 0x20: every bit set makes every letter upper case. */
	memset(mask, 0xff, sizeof(mask));
	assert_int_equal(dnsmsg_query(&q, QNAME, DNSMSG_QTYPE_A, 7, mask, &e),
	    0);
	assert_memory_equal(q.dq_msg + 12,
	    "\x03"
	    "API\x07"
	    "EXAMPLE\x03"
	    "COM",
	    16);
	/* Bit i is the byte at wire offset i of the name (1 is 'a'). */
	memset(mask, 0, sizeof(mask));
	mask[0] = 0x04; /* byte 2: 'p' */
	assert_int_equal(dnsmsg_query(&q, QNAME, DNSMSG_QTYPE_A, 7, mask, &e),
	    0);
	assert_memory_equal(q.dq_msg + 12,
	    "\x03"
	    "aPi",
	    4);
}

static void
test_query_bad(void **state)
{
	static const char *const bad[] = { "", ".", "a..b", ".a", "a b",
		"a\xc3\xa9", "a..", "a/b", "a:1" };
	char lab[80], big[300];
	struct dnsmsg_query q;
	enum dnsmsg_err e;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(dnsmsg_query(&q, bad[i], DNSMSG_QTYPE_A, 1,
				     NULL, &e),
		    -1);
		assert_int_equal(e, DNSMSG_E_BAD_NAME);
	}
	memset(lab, 'a', 64);
	lab[64] = '\0';
	assert_int_equal(dnsmsg_query(&q, lab, DNSMSG_QTYPE_A, 1, NULL, &e),
	    -1);
	lab[63] = '\0';
	assert_int_equal(dnsmsg_query(&q, lab, DNSMSG_QTYPE_A, 1, NULL, &e), 0);
	/* 253 characters is the longest name (255 bytes on the wire). */
	for (i = 0; i < 253; i++)
		big[i] = i % 2 ? '.' : 'x';
	big[253] = '\0';
	assert_int_equal(dnsmsg_query(&q, big, DNSMSG_QTYPE_A, 1, NULL, &e), 0);
	assert_int_equal(q.dq_len, 12 + 255 + 4);
	big[253] = '.';
	big[254] = 'x';
	big[255] = '\0';
	assert_int_equal(dnsmsg_query(&q, big, DNSMSG_QTYPE_A, 1, NULL, &e),
	    -1);
	assert_int_equal(dnsmsg_query(&q, QNAME, 5, 1, NULL, &e), -1);
	assert_int_equal(e, DNSMSG_E_BAD_QTYPE);
}

static void
test_good_a(void **state)
{
	struct dnsmsg_query q;
	struct dnsmsg_answer a;
	struct mb m;
	unsigned char addrs[4][16];
	enum dnsmsg_err e;
	size_t off;

	(void)state;
	query(&q, DNSMSG_QTYPE_A);
	mb_start(&m, &q, NOERR, 2, 0, 0);
	mb_rr(&m, PTR_Q, 2, 1, 1, 300, A1, 4);
	mb_rr(&m, PTR_Q, 2, 1, 1, 60, A2, 4);
	assert_int_equal(parse(&q, &m, &a, addrs, 4, &e, &off), 0);
	assert_int_equal(a.da_rcode, 0);
	assert_int_equal(a.da_tc, 0);
	assert_int_equal(a.da_naddrs, 2);
	assert_int_equal(a.da_nfound, 2);
	assert_int_equal(a.da_ttl, 60);
	assert_memory_equal(addrs[0], A1, 4);
	assert_memory_equal(addrs[1], A2, 4);
}

static void
test_good_aaaa(void **state)
{
	static const char v6[] = "\x20\x01\x00\x02\x00\x00\x00\x00"
				 "\x00\x00\x00\x00\x00\x00\x00\x02";
	struct dnsmsg_query q;
	struct dnsmsg_answer a;
	struct mb m;
	unsigned char addrs[4][16];
	enum dnsmsg_err e;
	size_t off;

	(void)state;
	query(&q, DNSMSG_QTYPE_AAAA);
	/* An A record in an AAAA answer is not taken. */
	mb_start(&m, &q, NOERR, 2, 0, 0);
	mb_rr(&m, PTR_Q, 2, 1, 1, 30, A1, 4);
	mb_rr(&m, PTR_Q, 2, 28, 1, 30, v6, 16);
	assert_int_equal(parse(&q, &m, &a, addrs, 4, &e, &off), 0);
	assert_int_equal(a.da_naddrs, 1);
	assert_memory_equal(addrs[0], v6, 16);
}

static void
test_owner_case_and_others(void **state)
{
	struct dnsmsg_query q;
	struct dnsmsg_answer a;
	struct mb m;
	unsigned char addrs[4][16];
	enum dnsmsg_err e;
	size_t off;

	(void)state;
	query(&q, DNSMSG_QTYPE_A);
	mb_start(&m, &q, NOERR, 4, 0, 0);
	/* Owner names match whatever their case. */
	mb_rr(&m,
	    "\x03"
	    "API\x07"
	    "EXAMPLE\x03"
	    "com\x00",
	    17, 1, 1, 30, A1, 4);
	/* Another name's address, or another class, is ignored. */
	mb_rr(&m, NAME_B, 15, 1, 1, 30, A2, 4);
	mb_rr(&m, PTR_Q, 2, 1, 3, 30, A2, 4);
	/* A record type we do not know is skipped. */
	mb_rr(&m, PTR_Q, 2, 16, 1, 1,
	    "\x03"
	    "abc",
	    4);
	assert_int_equal(parse(&q, &m, &a, addrs, 4, &e, &off), 0);
	assert_int_equal(a.da_naddrs, 1);
	assert_memory_equal(addrs[0], A1, 4);
	assert_int_equal(a.da_ttl, 30);
}

static void
test_cname_chain(void **state)
{
	struct dnsmsg_query q;
	struct dnsmsg_answer a;
	struct mb m;
	unsigned char addrs[4][16];
	enum dnsmsg_err e;
	size_t off, b_off;

	(void)state;
	query(&q, DNSMSG_QTYPE_A);
	/* Out of order: c's address first, then qname -> b, b -> c. */
	mb_start(&m, &q, NOERR, 4, 0, 0);
	mb_rr(&m, NAME_C, 15, 1, 1, 100, A1, 4);
	mb_rr(&m, PTR_Q, 2, A_REC, 1, 50, NAME_B, 15);
	b_off = m.n - 15;
	{
		char ptr[2] = { (char)(0xc0 | b_off >> 8),
			(char)(b_off & 0xff) };
		char tgt[4] = { 1, 'c', (char)0xc0, 0 };

		/* "c" + the "example.com" of the b name. */
		tgt[3] = (char)(b_off + 2);
		mb_rr(&m, ptr, 2, A_REC, 1, 70, tgt, 4);
	}
	/* An address of the query name itself is not the chain's. */
	mb_rr(&m, PTR_Q, 2, 1, 1, 10, A2, 4);
	assert_int_equal(parse(&q, &m, &a, addrs, 4, &e, &off), 0);
	assert_int_equal(a.da_ncnames, 2);
	assert_int_equal(a.da_naddrs, 1);
	assert_memory_equal(addrs[0], A1, 4);
	assert_int_equal(a.da_ttl, 50);
}

/* qname -> n1 -> n2 ... -> nN, then nN's address. */
static void
chain(struct mb *m, const struct dnsmsg_query *q, int n, int loop)
{
	char name[16], prev[16];
	int i;

	mb_start(m, q, NOERR, (unsigned)n + 1, 0, 0);
	memcpy(prev, PTR_Q, 2);
	for (i = 1; i <= n; i++) {
		int t = loop && i == n ? 1 : i;

		snprintf(name, sizeof(name), "\x02n%c", '0' + t);
		memcpy(name + 3, "\x00", 1);
		mb_rr(m, prev, i == 1 ? 2 : 4, A_REC, 1, 30, name, 4);
		memcpy(prev, name, 4);
	}
	mb_rr(m, prev, 4, 1, 1, 30, A1, 4);
}

static void
test_cname_limits(void **state)
{
	struct dnsmsg_query q;
	struct dnsmsg_answer a;
	struct mb m;
	unsigned char addrs[4][16];
	enum dnsmsg_err e;
	size_t off;

	(void)state;
	query(&q, DNSMSG_QTYPE_A);
	chain(&m, &q, DNSMSG_CNAME_MAX, 0);
	assert_int_equal(parse(&q, &m, &a, addrs, 4, &e, &off), 0);
	assert_int_equal(a.da_ncnames, DNSMSG_CNAME_MAX);
	assert_int_equal(a.da_naddrs, 1);
	chain(&m, &q, DNSMSG_CNAME_MAX + 1, 0);
	expect_err(&q, &m, DNSMSG_E_CNAME, (size_t)-1);
	/* n1 -> n2 -> n3 -> n1: a loop. */
	chain(&m, &q, 3, 1);
	expect_err(&q, &m, DNSMSG_E_CNAME, (size_t)-1);
	/* Two CNAMEs for the query name. */
	mb_start(&m, &q, NOERR, 2, 0, 0);
	mb_rr(&m, PTR_Q, 2, A_REC, 1, 30, NAME_B, 15);
	mb_rr(&m, PTR_Q, 2, A_REC, 1, 30, NAME_C, 15);
	expect_err(&q, &m, DNSMSG_E_CNAME, (size_t)-1);
	/* A CNAME whose target does not fill its data exactly. */
	mb_start(&m, &q, NOERR, 1, 0, 0);
	mb_rr(&m, PTR_Q, 2, A_REC, 1, 30, NAME_B "x", 16);
	expect_err(&q, &m, DNSMSG_E_RDATA, (size_t)-1);
}

static void
test_header_checks(void **state)
{
	struct dnsmsg_query q;
	struct mb m;

	(void)state;
	query(&q, DNSMSG_QTYPE_A);
	mb_start(&m, &q, NOERR, 1, 0, 0);
	mb_rr(&m, PTR_Q, 2, 1, 1, 30, A1, 4);
	m.b[1] ^= 1; /* id */
	expect_err(&q, &m, DNSMSG_E_ID, 0);
	m.b[1] ^= 1;
	m.b[2] &= 0x7f; /* QR */
	expect_err(&q, &m, DNSMSG_E_NOT_RESPONSE, 2);
	m.b[2] |= 0x80 | 0x10; /* opcode 2 */
	expect_err(&q, &m, DNSMSG_E_OPCODE, 2);
	m.b[2] &= (unsigned char)~0x10;
	m.b[5] = 2; /* QDCOUNT */
	expect_err(&q, &m, DNSMSG_E_QDCOUNT, 4);
	m.b[5] = 0;
	expect_err(&q, &m, DNSMSG_E_QDCOUNT, 4);
}

static void
test_question_checks(void **state)
{
	unsigned char mask[DNSMSG_MASK_LEN];
	struct dnsmsg_query q;
	struct dnsmsg_answer a;
	struct mb m;
	unsigned char addrs[4][16];
	enum dnsmsg_err e;
	size_t off;

	(void)state;
	memset(mask, 0, sizeof(mask));
	mask[0] = 0x02; /* 'A' of "Api" */
	assert_int_equal(dnsmsg_query(&q, QNAME, DNSMSG_QTYPE_A, 99, mask, &e),
	    0);
	mb_start(&m, &q, NOERR, 1, 0, 0);
	mb_rr(&m, PTR_Q, 2, 1, 1, 30, A1, 4);
	assert_int_equal(parse(&q, &m, &a, addrs, 4, &e, &off), 0);
	/* The same name in another case: a guess that missed a 0x20 bit. */
	m.b[13] = 'a';
	expect_err(&q, &m, DNSMSG_E_QUESTION, 13);
	m.b[13] = 'A';
	/* Another type, another class. */
	m.b[12 + 17 + 1] = 28;
	expect_err(&q, &m, DNSMSG_E_QUESTION, 12 + 17 + 1);
	m.b[12 + 17 + 1] = 1;
	m.b[12 + 17 + 3] = 3;
	expect_err(&q, &m, DNSMSG_E_QUESTION, 12 + 17 + 3);
	m.b[12 + 17 + 3] = 1;
	/* Another name. */
	m.b[12 + 5] = 'X';
	expect_err(&q, &m, DNSMSG_E_QUESTION, 12 + 5);
	m.b[12 + 5] = 'e';
	assert_int_equal(parse(&q, &m, &a, addrs, 4, &e, &off), 0);
}

static void
test_pointers(void **state)
{
	struct dnsmsg_query q;
	struct mb m;
	size_t at;
	char p[2];

	(void)state;
	query(&q, DNSMSG_QTYPE_A);
	/* An owner name that points at itself. */
	mb_start(&m, &q, NOERR, 1, 0, 0);
	at = m.n;
	p[0] = (char)(0xc0 | at >> 8);
	p[1] = (char)at;
	mb_rr(&m, p, 2, 1, 1, 30, A1, 4);
	expect_err(&q, &m, DNSMSG_E_POINTER, at);
	/* Forward, to a name after it. */
	mb_start(&m, &q, NOERR, 2, 0, 0);
	at = m.n;
	p[1] = (char)(at + 16);
	mb_rr(&m, p, 2, 1, 1, 30, A1, 4);
	mb_rr(&m, PTR_Q, 2, 1, 1, 30, A1, 4);
	expect_err(&q, &m, DNSMSG_E_POINTER, at);
	/* Into the header. */
	mb_start(&m, &q, NOERR, 1, 0, 0);
	at = m.n;
	mb_rr(&m, "\xc0\x02", 2, 1, 1, 30, A1, 4);
	expect_err(&q, &m, DNSMSG_E_POINTER, at);
	/*
	 * Two names pointing at each other through a label: "x" then a
	 * pointer to the second, whose pointer leads back to the first.
	 */
	mb_start(&m, &q, NOERR, 2, 0, 0);
	at = m.n;
	p[0] = (char)0xc0;
	p[1] = (char)(at + 18);
	{
		char n1[4] = { 1, 'x', p[0], p[1] };
		char n2[4] = { 1, 'y', (char)0xc0, (char)at };

		mb_rr(&m, n1, 4, 1, 1, 30, A1, 4);
		mb_rr(&m, n2, 4, 1, 1, 30, A1, 4);
	}
	expect_err(&q, &m, DNSMSG_E_POINTER, at + 2);
	/* Reserved label types. */
	mb_start(&m, &q, NOERR, 1, 0, 0);
	at = m.n;
	mb_rr(&m,
	    "\x41"
	    "a",
	    2, 1, 1, 30, A1, 4);
	expect_err(&q, &m, DNSMSG_E_LABEL, at);
}

static void
test_long_name(void **state)
{
	struct dnsmsg_query q;
	struct mb m;
	char name[320];
	size_t i, at;

	(void)state;
	query(&q, DNSMSG_QTYPE_A);
	/* Five labels of 60 bytes: 305 bytes, over 255. */
	for (i = 0; i < 5; i++) {
		name[i * 61] = 60;
		memset(name + i * 61 + 1, 'a', 60);
	}
	name[305] = 0;
	mb_start(&m, &q, NOERR, 1, 0, 0);
	at = m.n;
	mb_rr(&m, name, 306, 1, 1, 30, A1, 4);
	expect_err(&q, &m, DNSMSG_E_LABEL, at + 4 * 61);
}

static void
test_truncated_message(void **state)
{
	struct dnsmsg_query q;
	struct dnsmsg_answer a;
	struct mb m, cut;
	unsigned char addrs[4][16];
	enum dnsmsg_err e;
	size_t off, n;

	(void)state;
	query(&q, DNSMSG_QTYPE_A);
	mb_start(&m, &q, NOERR, 2, 0, 1);
	mb_rr(&m, PTR_Q, 2, A_REC, 1, 30, NAME_B, 15);
	mb_rr(&m, "\xc0\x2d", 2, 1, 1, 30, A1, 4);
	mb_rr(&m, "\x00", 1, 41, 512, 0, "", 0);
	assert_int_equal(parse(&q, &m, &a, addrs, 4, &e, &off), 0);
	assert_int_equal(a.da_naddrs, 1);
	/* Every strict prefix is refused (read against the guard page). */
	for (n = 0; n < m.n; n++) {
		cut = m;
		cut.n = n;
		assert_int_equal(parse(&q, &cut, &a, addrs, 4, &e, &off), -1);
		assert_true(e == DNSMSG_E_SHORT || e == DNSMSG_E_QUESTION);
	}
	/* One byte too many. */
	mb_put(&m, "", 1);
	expect_err(&q, &m, DNSMSG_E_TRAILING, m.n - 1);
	/* Record data longer than the message. */
	mb_start(&m, &q, NOERR, 1, 0, 0);
	mb_rr(&m, PTR_Q, 2, 1, 1, 30, A1, 4);
	m.b[m.n - 5] = 5;
	expect_err(&q, &m, DNSMSG_E_SHORT, (size_t)-1);
	/* An A record of 5 bytes. */
	mb_start(&m, &q, NOERR, 1, 0, 0);
	mb_rr(&m, PTR_Q, 2, 1, 1, 30, A1 "x", 5);
	expect_err(&q, &m, DNSMSG_E_RDATA, (size_t)-1);
	/* A broken record in the additional section. */
	mb_start(&m, &q, NOERR, 1, 0, 1);
	mb_rr(&m, PTR_Q, 2, 1, 1, 30, A1, 4);
	mb_rr(&m, "\xc0\xff", 2, 1, 1, 30, A1, 4);
	expect_err(&q, &m, DNSMSG_E_POINTER, (size_t)-1);
}

static void
test_tc_flag(void **state)
{
	struct dnsmsg_query q;
	struct dnsmsg_answer a;
	struct mb m;
	unsigned char addrs[4][16];
	enum dnsmsg_err e;
	size_t off;

	(void)state;
	query(&q, DNSMSG_QTYPE_A);
	/* Cut inside a record: with TC nothing past the question counts. */
	mb_start(&m, &q, NOERR | 0x0200, 3, 0, 0);
	mb_rr(&m, PTR_Q, 2, 1, 1, 30, A1, 4);
	mb_put(&m, "\xc0\x0c\x00", 3);
	assert_int_equal(parse(&q, &m, &a, addrs, 4, &e, &off), 0);
	assert_int_equal(a.da_tc, 1);
	assert_int_equal(a.da_naddrs, 0);
	/* But the question must still be ours. */
	m.b[1] ^= 1;
	expect_err(&q, &m, DNSMSG_E_ID, 0);
}

static void
test_rcodes(void **state)
{
	struct dnsmsg_query q;
	struct dnsmsg_answer a;
	struct mb m;
	unsigned char addrs[4][16];
	enum dnsmsg_err e;
	size_t off;

	(void)state;
	query(&q, DNSMSG_QTYPE_A);
	/* NXDOMAIN: no address taken, even one that is in the message. */
	mb_start(&m, &q, NOERR | 3, 1, 1, 0);
	mb_rr(&m, PTR_Q, 2, 1, 1, 30, A1, 4);
	mb_rr(&m, "\xc0\x10", 2, 6, 1, 30, "\x00\x00", 2);
	assert_int_equal(parse(&q, &m, &a, addrs, 4, &e, &off), 0);
	assert_int_equal(a.da_rcode, DNSMSG_RCODE_NXDOMAIN);
	assert_int_equal(a.da_naddrs, 0);
	mb_start(&m, &q, NOERR | 2, 0, 0, 0);
	assert_int_equal(parse(&q, &m, &a, addrs, 4, &e, &off), 0);
	assert_int_equal(a.da_rcode, DNSMSG_RCODE_SERVFAIL);
	/* NOERROR without records (NODATA). */
	mb_start(&m, &q, NOERR, 0, 0, 0);
	assert_int_equal(parse(&q, &m, &a, addrs, 4, &e, &off), 0);
	assert_int_equal(a.da_rcode, 0);
	assert_int_equal(a.da_naddrs, 0);
	assert_int_equal(a.da_ttl, 0);
}

static void
test_ttl_min_and_cap(void **state)
{
	struct dnsmsg_query q;
	struct dnsmsg_answer a;
	struct mb m;
	unsigned char addrs[16][16];
	enum dnsmsg_err e;
	size_t off;
	unsigned i;

	(void)state;
	query(&q, DNSMSG_QTYPE_A);
	mb_start(&m, &q, NOERR, 20, 0, 0);
	for (i = 0; i < 20; i++) {
		unsigned char ip[4] = { 198, 18, 0, (unsigned char)i };

		mb_rr(&m, PTR_Q, 2, 1, 1, i == 17 ? 7 : 1000 + i, ip, 4);
	}
	assert_int_equal(parse(&q, &m, &a, addrs, 16, &e, &off), 0);
	assert_int_equal(a.da_naddrs, 16);
	assert_int_equal(a.da_nfound, 20);
	/* The minimum covers the records not stored too. */
	assert_int_equal(a.da_ttl, 7);
	assert_int_equal(addrs[15][3], 15);
	/* A TTL with the top bit set counts as 0 (RFC 2181 §8). */
	mb_start(&m, &q, NOERR, 2, 0, 0);
	mb_rr(&m, PTR_Q, 2, 1, 1, 30, A1, 4);
	mb_rr(&m, PTR_Q, 2, 1, 1, 0x80000001u, A2, 4);
	assert_int_equal(parse(&q, &m, &a, addrs, 16, &e, &off), 0);
	assert_int_equal(a.da_ttl, 0);
	/* maxaddrs 0: counted, nothing written. */
	assert_int_equal(parse(&q, &m, &a, NULL, 0, &e, &off), 0);
	assert_int_equal(a.da_naddrs, 0);
	assert_int_equal(a.da_nfound, 2);
}

static void
test_too_long(void **state)
{
	static unsigned char big[DNSMSG_MSG_MAX + 1];
	struct dnsmsg_query q;
	struct dnsmsg_answer a;
	enum dnsmsg_err e;
	size_t off;

	(void)state;
	query(&q, DNSMSG_QTYPE_A);
	assert_int_equal(dnsmsg_parse(&q, big, sizeof(big), &a, NULL, 0, &e,
			     &off),
	    -1);
	assert_int_equal(e, DNSMSG_E_TOO_LONG);
	assert_string_equal(dnsmsg_strerror(DNSMSG_E_POINTER),
	    "compression pointer not strictly backward");
	assert_string_equal(dnsmsg_strerror(DNSMSG_E__COUNT), "unknown error");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_query_build),
		cmocka_unit_test(test_query_bad),
		cmocka_unit_test(test_good_a),
		cmocka_unit_test(test_good_aaaa),
		cmocka_unit_test(test_owner_case_and_others),
		cmocka_unit_test(test_cname_chain),
		cmocka_unit_test(test_cname_limits),
		cmocka_unit_test(test_header_checks),
		cmocka_unit_test(test_question_checks),
		cmocka_unit_test(test_pointers),
		cmocka_unit_test(test_long_name),
		cmocka_unit_test(test_truncated_message),
		cmocka_unit_test(test_tc_flag),
		cmocka_unit_test(test_rcodes),
		cmocka_unit_test(test_ttl_min_and_cap),
		cmocka_unit_test(test_too_long),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
