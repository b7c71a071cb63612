/*
 * libFuzzer target for proxy/dnsmsg.c. The first byte picks a mode:
 *   even  the rest is a DNS response; the query it is checked against is
 *         rebuilt from the response's own id and question (name, case and
 *         type), so the fuzzer gets past the header checks to the records;
 *         the low bits of the next byte choose the address cap;
 *   odd   the rest is a host name: a built query must not parse as a
 *         response, and with QR set it must parse as an empty answer.
 * Invariants, not just "no crash": errors are known codes at an offset
 * inside the message, an accepted answer stays within the caps, holds no
 * address without NOERROR, every stored address occurs in the message,
 * and the result does not depend on the address cap beyond the count.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/dns/dnsmsg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check(int cond, const char *what)
{
	if (!cond) {
		fprintf(stderr, "fuzz_dns invariant broken: %s\n", what);
		abort();
	}
}

/* The question of msg as a name, mask and type; 0 or -1. */
static int
question_of(const uint8_t *msg, size_t len, char *name,
    unsigned char mask[DNSMSG_MASK_LEN], uint16_t *qtype)
{
	size_t p = DNSMSG_HDR_LEN, n = 0, i;

	memset(mask, 0, DNSMSG_MASK_LEN);
	while (p < len && msg[p] != 0) {
		size_t l = msg[p];

		if (l > 63 || p + 1 + l > len || n + l + 1 > DNSMSG_NAME_MAX)
			return -1;
		for (i = 0; i < l; i++) {
			unsigned char c = msg[p + 1 + i];
			size_t bit = p + 1 + i - DNSMSG_HDR_LEN;

			if (c >= 'A' && c <= 'Z' && bit / 8 < DNSMSG_MASK_LEN)
				mask[bit / 8] |=
				    (unsigned char)(1u << (bit % 8));
			name[n++] = (char)c;
		}
		name[n++] = '.';
		p += 1 + l;
	}
	if (p + 5 > len || n == 0)
		return -1;
	name[n - 1] = '\0';
	*qtype = (uint16_t)(msg[p + 1] << 8 | msg[p + 2]);
	return 0;
}

static void
mode_response(const uint8_t *msg, size_t len, unsigned cap)
{
	static unsigned char addrs[16][16], addrs2[16][16];
	char name[DNSMSG_NAME_MAX + 1];
	unsigned char mask[DNSMSG_MASK_LEN];
	struct dnsmsg_query q;
	struct dnsmsg_answer a, b;
	enum dnsmsg_err e, e2;
	size_t off, off2, i, alen;
	uint16_t qtype, id;
	int r, r2;

	if (len < DNSMSG_HDR_LEN ||
	    question_of(msg, len, name, mask, &qtype) == -1)
		return;
	if (qtype != DNSMSG_QTYPE_A)
		qtype = DNSMSG_QTYPE_AAAA;
	id = (uint16_t)(msg[0] << 8 | msg[1]);
	if (dnsmsg_query(&q, name, qtype, id, mask, &e) == -1)
		return;
	r = dnsmsg_parse(&q, msg, len, &a, addrs, cap, &e, &off);
	if (r == -1) {
		check(e > DNSMSG_E_OK && e < DNSMSG_E__COUNT, "error code");
		check(off <= len, "error offset");
		check(strcmp(dnsmsg_strerror(e), "unknown error") != 0,
		    "error text");
	} else {
		check(a.da_naddrs <= cap && a.da_naddrs <= a.da_nfound,
		    "address count");
		check(a.da_ncnames <= DNSMSG_CNAME_MAX, "chain length");
		check(!a.da_tc || a.da_nfound == 0, "addresses with TC");
		check(a.da_rcode == DNSMSG_RCODE_NOERROR || a.da_nfound == 0,
		    "addresses without NOERROR");
		check(a.da_nfound > 0 || a.da_ttl == 0, "TTL without records");
		check(a.da_ttl <= 0x7fffffffu, "TTL top bit");
		alen = qtype == DNSMSG_QTYPE_A ? 4 : 16;
		for (i = 0; i < a.da_naddrs; i++)
			check(memmem(msg, len, addrs[i], alen) != NULL,
			    "address not in the message");
	}
	/* Another cap changes only how many addresses are stored. */
	r2 = dnsmsg_parse(&q, msg, len, &b, addrs2, 16 - cap, &e2, &off2);
	check(r == r2, "cap changes the verdict");
	if (r == 0) {
		check(a.da_nfound == b.da_nfound && a.da_ttl == b.da_ttl &&
			a.da_rcode == b.da_rcode && a.da_tc == b.da_tc,
		    "cap changes the answer");
		for (i = 0; i < a.da_naddrs && i < b.da_naddrs; i++)
			check(memcmp(addrs[i], addrs2[i], 16) == 0,
			    "cap changes the addresses");
	} else
		check(e == e2 && off == off2, "cap changes the error");
}

static void
mode_query(const uint8_t *in, size_t len)
{
	char name[DNSMSG_NAME_MAX + 8];
	unsigned char mask[DNSMSG_MASK_LEN], resp[DNSMSG_QUERY_MAX];
	struct dnsmsg_query q;
	struct dnsmsg_answer a;
	enum dnsmsg_err e;
	size_t off;
	uint16_t qtype;

	if (len < 1 + DNSMSG_MASK_LEN ||
	    len - 1 - DNSMSG_MASK_LEN >= sizeof(name))
		return;
	qtype = (in[0] & 1) ? DNSMSG_QTYPE_AAAA : DNSMSG_QTYPE_A;
	memcpy(mask, in + 1, DNSMSG_MASK_LEN);
	memcpy(name, in + 1 + DNSMSG_MASK_LEN, len - 1 - DNSMSG_MASK_LEN);
	name[len - 1 - DNSMSG_MASK_LEN] = '\0';
	if (dnsmsg_query(&q, name, qtype, 0xbeef, mask, &e) == -1) {
		check(e == DNSMSG_E_BAD_NAME, "query error");
		return;
	}
	check(q.dq_len > DNSMSG_HDR_LEN + 4 && q.dq_len <= DNSMSG_QUERY_MAX,
	    "query length");
	check(dnsmsg_parse(&q, q.dq_msg, q.dq_len, &a, NULL, 0, &e, &off) ==
		    -1 &&
		e == DNSMSG_E_NOT_RESPONSE,
	    "a query taken as a response");
	memcpy(resp, q.dq_msg, q.dq_len);
	resp[2] |= 0x80;
	check(dnsmsg_parse(&q, resp, q.dq_len, &a, NULL, 0, &e, &off) == 0 &&
		a.da_nfound == 0 && a.da_rcode == 0,
	    "own question refused");
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2 || size - 1 > DNSMSG_MSG_MAX)
		return 0;
	if (data[0] & 1)
		mode_query(data + 1, size - 1);
	else
		mode_response(data + 2, size - 2, data[1] & 15);
	return 0;
}
