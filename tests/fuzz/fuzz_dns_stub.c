/*
 * libFuzzer target for the exec DNS stub (proxy/dns/stub.c). The input is
 * a query as it comes off a UDP socket; when it also reads as a TCP frame
 * (two-byte length, then the message), the framed message is answered too.
 * Invariants, not just "no crash": an answer fits DNSSTUB_ANSWER_MAX, is
 * sent exactly when the decision is not "drop", carries the query's id
 * with QR set, and, for a parsed A/AAAA question the resolver could have
 * asked, re-parses with the resolver's own strict parser
 * (proxy/dns/dnsmsg.c) to the rcode and address the decision says; the
 * decision does not depend on the case of the name.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/dns/dnsmsg.h"
#include "proxy/dns/stub.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct dnsstub_host hosts[] = {
	{ "api.example.com", { 127, 77, 0, 1 } },
	{ "model.example.org", { 127, 77, 0, 2 } },
	{ "a", { 127, 77, 0, 3 } },
};
#define NHOSTS (sizeof(hosts) / sizeof(hosts[0]))

static void
check(int cond, const char *what)
{
	if (!cond) {
		fprintf(stderr, "fuzz_dns_stub invariant broken: %s\n", what);
		abort();
	}
}

/* The question name as text and case mask, as dnsmsg_query takes it;
 * -1 when a label holds a byte text cannot carry. */
static int
name_of(const uint8_t *msg, const struct dnsstub_query *q, char *name,
    unsigned char mask[DNSMSG_MASK_LEN])
{
	size_t p = DNSMSG_HDR_LEN, end = p + q->sq_name_len - 1, n = 0, i, l;

	memset(mask, 0, DNSMSG_MASK_LEN);
	if (q->sq_name_len <= 1)
		return -1;
	while (p < end) {
		l = msg[p];
		for (i = 0; i < l; i++) {
			unsigned char c = msg[p + 1 + i];
			size_t bit = p + 1 + i - DNSMSG_HDR_LEN;

			if (c == '.' || c == '\0')
				return -1;
			if (c >= 'A' && c <= 'Z')
				mask[bit / 8] |=
				    (unsigned char)(1u << (bit % 8));
			name[n++] = (char)c;
		}
		name[n++] = '.';
		p += 1 + l;
	}
	name[n - 1] = '\0';
	return 0;
}

static void
reparse(const uint8_t *msg, const struct dnsstub_result *r,
    const unsigned char *out, size_t n)
{
	char name[DNSMSG_NAME_MAX + 1];
	unsigned char mask[DNSMSG_MASK_LEN], addrs[4][16];
	struct dnsmsg_query dq;
	struct dnsmsg_answer da;
	enum dnsmsg_err e;
	size_t off;

	if (r->sr_q.sq_qtype != DNSMSG_QTYPE_A &&
	    r->sr_q.sq_qtype != DNSMSG_QTYPE_AAAA)
		return;
	if (name_of(msg, &r->sr_q, name, mask) == -1 ||
	    dnsmsg_query(&dq, name, r->sr_q.sq_qtype, r->sr_q.sq_id, mask,
		&e) == -1)
		return; /* not a host name the resolver would ask for */
	/* The resolver's query has the same question bytes as this one. */
	if (dq.dq_len - DNSMSG_HDR_LEN != r->sr_q.sq_qend - DNSMSG_HDR_LEN ||
	    memcmp(dq.dq_msg + DNSMSG_HDR_LEN, msg + DNSMSG_HDR_LEN,
		dq.dq_len - DNSMSG_HDR_LEN) != 0)
		return;
	check(dnsmsg_parse(&dq, out, n, &da, addrs, 4, &e, &off) == 0,
	    "answer refused by the resolver's parser");
	switch (r->sr_decision) {
	case DNSSTUB_D_ANSWER:
		check(da.da_rcode == 0 && da.da_naddrs == 1 &&
			memcmp(addrs[0], hosts[r->sr_host].dh_addr, 4) == 0,
		    "A answer");
		break;
	case DNSSTUB_D_NODATA:
		check(da.da_rcode == 0 && da.da_nfound == 0, "NODATA answer");
		break;
	case DNSSTUB_D_NXDOMAIN:
		check(da.da_rcode == 3 && da.da_nfound == 0, "NXDOMAIN answer");
		break;
	default:
		check(0, "decision for a parsed IN question");
	}
}

static void
one(const uint8_t *msg, size_t len)
{
	static unsigned char out[DNSSTUB_ANSWER_MAX], flip[DNSSTUB_QUERY_MAX];
	char text[DNSSTUB_NAME_TEXT_MAX];
	struct dnsstub_result r, r2;
	size_t n, i, tl;

	n = dnsstub_answer(msg, len, hosts, NHOSTS, out, sizeof(out), &r);
	check(n <= DNSSTUB_ANSWER_MAX, "answer too long");
	check((n == 0) == (r.sr_decision == DNSSTUB_D_DROP), "drop vs bytes");
	check(r.sr_decision < DNSSTUB_D__COUNT && r.sr_err < DNSSTUB_E__COUNT,
	    "codes");
	check((r.sr_err == DNSSTUB_E_OK) ==
		(r.sr_decision == DNSSTUB_D_ANSWER ||
		    r.sr_decision == DNSSTUB_D_NODATA ||
		    r.sr_decision == DNSSTUB_D_NXDOMAIN),
	    "error vs decision");
	check(r.sr_off <= len, "error offset");
	if (n == 0)
		return;
	check(n >= DNSMSG_HDR_LEN && memcmp(out, msg, 2) == 0 &&
		(out[2] & 0x80),
	    "header of the answer");
	if (!r.sr_parsed)
		return;
	tl = dnsstub_name_text(msg, &r.sr_q, text, sizeof(text));
	check(tl < sizeof(text) && text[tl] == '\0' && strlen(text) == tl,
	    "name text");
	check(memcmp(out + DNSMSG_HDR_LEN, msg + DNSMSG_HDR_LEN,
		  r.sr_q.sq_qend - DNSMSG_HDR_LEN) == 0,
	    "question echoed");
	if (r.sr_decision != DNSSTUB_D_REFUSED)
		reparse(msg, &r, out, n);
	/* The same query with the name's case flipped: the same decision. */
	if (len > sizeof(flip))
		return;
	memcpy(flip, msg, len);
	for (i = DNSMSG_HDR_LEN; i < DNSMSG_HDR_LEN + r.sr_q.sq_name_len; i++)
		if ((flip[i] | 0x20) >= 'a' && (flip[i] | 0x20) <= 'z')
			flip[i] ^= 0x20;
	(void)dnsstub_answer(flip, len, hosts, NHOSTS, out, sizeof(out), &r2);
	check(r2.sr_decision == r.sr_decision && r2.sr_host == r.sr_host,
	    "decision depends on case");
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t n;
	int f;

	one(data, size);
	f = dnsstub_tcp_frame(data, size, &n);
	check(f >= -1 && f <= 1, "frame result");
	if (f == 1) {
		check(n >= 1 && n <= DNSSTUB_QUERY_MAX && n + 2 <= size,
		    "frame length");
		one(data + 2, n);
	}
	return 0;
}
