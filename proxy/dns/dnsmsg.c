/*
 * DNS query building and strict response checking (RFC 1035 §4) for the
 * stub resolver. Nothing here trusts the response: every length is checked
 * against the message, compression pointers may only go strictly backward
 * (so no loop and no forward trick can make a name read forever or grow),
 * and only what the query asked for is taken from it. Sockets, timers and
 * retries are resolve.c's.
 */
#include <string.h>

#include "proxy/util/ascii.h"
#include "proxy/dns/dnsmsg.h"

#define DNS_TYPE_CNAME 5
#define DNS_CLASS_IN   1
#define DNS_FLAG_QR    0x8000
#define DNS_FLAG_TC    0x0200
#define DNS_FLAG_RD    0x0100
#define DNS_LABEL_MAX  63

/* One resource record as found in the message. */
struct rr {
	unsigned char name[DNSMSG_NAME_MAX]; /* owner, lower case */
	size_t name_len;
	uint16_t type;
	uint16_t class;
	uint32_t ttl;
	size_t rdoff; /* record data */
	size_t rdlen;
};

static const char *const dnsmsg_errs[DNSMSG_E__COUNT] = {
	[DNSMSG_E_OK] = "ok",
	[DNSMSG_E_BAD_NAME] = "not a host name",
	[DNSMSG_E_BAD_QTYPE] = "query type is neither A nor AAAA",
	[DNSMSG_E_SHORT] = "message ends inside a field",
	[DNSMSG_E_TOO_LONG] = "message too long",
	[DNSMSG_E_ID] = "transaction id differs",
	[DNSMSG_E_NOT_RESPONSE] = "not a response",
	[DNSMSG_E_OPCODE] = "opcode is not QUERY",
	[DNSMSG_E_QDCOUNT] = "not exactly one question",
	[DNSMSG_E_QUESTION] = "question differs from the query",
	[DNSMSG_E_LABEL] = "bad label or name too long",
	[DNSMSG_E_POINTER] = "compression pointer not strictly backward",
	[DNSMSG_E_RDATA] = "record data of a wrong size",
	[DNSMSG_E_CNAME] = "CNAME chain too long, looping or forked",
	[DNSMSG_E_TRAILING] = "bytes after the last record",
};

const char *
dnsmsg_strerror(enum dnsmsg_err e)
{
	if ((unsigned)e >= DNSMSG_E__COUNT)
		return "unknown error";
	return dnsmsg_errs[e];
}

static int
fail(enum dnsmsg_err *err, size_t *off, enum dnsmsg_err e, size_t at)
{
	*err = e;
	*off = at;
	return -1;
}

static uint16_t
get16(const unsigned char *p)
{
	return (uint16_t)((unsigned)p[0] << 8 | p[1]);
}

static uint32_t
get32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	    (uint32_t)p[2] << 8 | p[3];
}

static void
put16(unsigned char *p, uint16_t v)
{
	p[0] = (unsigned char)(v >> 8);
	p[1] = (unsigned char)v;
}

/* Letters, digits, '-' and '_' (SRV-style names): what we ask about. */
static int
name_char(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9') || c == '-' || c == '_';
}

int
dnsmsg_query(struct dnsmsg_query *q, const char *name, uint16_t qtype,
    uint16_t id, const unsigned char *mask, enum dnsmsg_err *err)
{
	size_t i, n, lab = 0, w = DNSMSG_HDR_LEN;
	unsigned char *m = q->dq_msg;

	memset(q, 0, sizeof(*q));
	*err = DNSMSG_E_OK;
	if (qtype != DNSMSG_QTYPE_A && qtype != DNSMSG_QTYPE_AAAA) {
		*err = DNSMSG_E_BAD_QTYPE;
		return -1;
	}
	n = strnlen(name, DNSMSG_NAME_MAX);
	if (n > 0 && name[n - 1] == '.')
		n--; /* one trailing dot: the name is absolute anyway */
	/* Wire form: a length byte per label, the bytes, the root label. */
	if (n == 0 || n + 2 > DNSMSG_NAME_MAX) {
		*err = DNSMSG_E_BAD_NAME;
		return -1;
	}
	for (i = 0; i <= n; i++) {
		unsigned char c = (unsigned char)(i < n ? name[i] : '.');

		if (c == '.') {
			if (i == lab || i - lab > DNS_LABEL_MAX) {
				*err = DNSMSG_E_BAD_NAME;
				return -1;
			}
			m[w++] = (unsigned char)(i - lab);
			memcpy(m + w, name + lab, i - lab);
			w += i - lab;
			lab = i + 1;
			continue;
		}
		if (!name_char(c)) {
			*err = DNSMSG_E_BAD_NAME;
			return -1;
		}
	}
	m[w++] = 0;
	/* 0x20: each letter's case carries one bit the answer must echo. */
	for (i = DNSMSG_HDR_LEN; i < w; i++) {
		size_t b = i - DNSMSG_HDR_LEN;
		unsigned char c = m[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')))
			continue;
		c = ascii_lower(c);
		if (mask != NULL && (mask[b / 8] & (1u << (b % 8))))
			c = (unsigned char)(c - 'a' + 'A');
		m[i] = c;
	}
	put16(m + w, qtype);
	put16(m + w + 2, DNS_CLASS_IN);
	w += 4;
	put16(m, id);
	put16(m + 2, DNS_FLAG_RD);
	put16(m + 4, 1); /* QDCOUNT; AN, NS, AR stay 0 */
	q->dq_id = id;
	q->dq_qtype = qtype;
	q->dq_len = w;
	return 0;
}

/*
 * Read the name at *pos into out (wire form, lower case) and move *pos
 * past it. A pointer must go strictly below every position this name was
 * read from so far: positions only decrease, so reading ends, and a name
 * cannot be built out of bytes after it (or out of itself).
 */
static int
read_name(const unsigned char *msg, size_t len, size_t *pos, unsigned char *out,
    size_t *outlen, enum dnsmsg_err *err, size_t *off)
{
	size_t p = *pos, limit = *pos, n = 0, end = 0, i;
	int jumped = 0;

	for (;;) {
		unsigned c;

		if (p >= len)
			return fail(err, off, DNSMSG_E_SHORT, p);
		c = msg[p];
		if ((c & 0xc0) == 0xc0) {
			size_t t;

			if (p + 1 >= len)
				return fail(err, off, DNSMSG_E_SHORT, p);
			t = (size_t)(c & 0x3f) << 8 | msg[p + 1];
			if (t >= limit || t < DNSMSG_HDR_LEN)
				return fail(err, off, DNSMSG_E_POINTER, p);
			if (!jumped)
				end = p + 2;
			jumped = 1;
			limit = p = t;
			continue;
		}
		/* 0x40 and 0x80: extended and reserved label types. */
		if (c & 0xc0 || n + 1 + c > DNSMSG_NAME_MAX)
			return fail(err, off, DNSMSG_E_LABEL, p);
		if (c >= len - p)
			return fail(err, off, DNSMSG_E_SHORT, p);
		out[n++] = (unsigned char)c;
		if (c == 0) {
			if (!jumped)
				end = p + 1;
			break;
		}
		for (i = 0; i < c; i++)
			out[n++] = ascii_lower(msg[p + 1 + i]);
		p += 1 + c;
	}
	*pos = end;
	*outlen = n;
	return 0;
}

/* Read one resource record at *pos and move past it. */
static int
read_rr(const unsigned char *msg, size_t len, size_t *pos, struct rr *rr,
    enum dnsmsg_err *err, size_t *off)
{
	size_t p;

	if (read_name(msg, len, pos, rr->name, &rr->name_len, err, off) == -1)
		return -1;
	p = *pos;
	if (len - p < 10)
		return fail(err, off, DNSMSG_E_SHORT, p);
	rr->type = get16(msg + p);
	rr->class = get16(msg + p + 2);
	rr->ttl = get32(msg + p + 4);
	if (rr->ttl & 0x80000000u)
		rr->ttl = 0; /* RFC 2181 §8: as zero */
	rr->rdlen = get16(msg + p + 8);
	rr->rdoff = p + 10;
	if (rr->rdlen > len - rr->rdoff)
		return fail(err, off, DNSMSG_E_SHORT, p + 8);
	*pos = rr->rdoff + rr->rdlen;
	return 0;
}

/* The CNAME target of rr, which must fill its record data exactly. */
static int
read_target(const unsigned char *msg, const struct rr *rr, unsigned char *out,
    size_t *outlen, enum dnsmsg_err *err, size_t *off)
{
	size_t p = rr->rdoff, end = rr->rdoff + rr->rdlen;

	if (read_name(msg, end, &p, out, outlen, err, off) == -1)
		return -1;
	if (p != end)
		return fail(err, off, DNSMSG_E_RDATA, rr->rdoff);
	return 0;
}

static int
same_name(const struct rr *rr, const unsigned char *name, size_t len)
{
	return rr->name_len == len && memcmp(rr->name, name, len) == 0;
}

/*
 * The header and the question: a response to q (its id, QR set, opcode 0,
 * one question that echoes q's byte for byte). Sets da_rcode and da_tc.
 */
static int
check_response(const struct dnsmsg_query *q, const unsigned char *msg,
    size_t len, struct dnsmsg_answer *out, enum dnsmsg_err *err, size_t *off)
{
	size_t qlen, i;
	unsigned flags;

	if (q->dq_len < DNSMSG_HDR_LEN + 6 || q->dq_len > DNSMSG_QUERY_MAX)
		return fail(err, off, DNSMSG_E_QUESTION, DNSMSG_HDR_LEN);
	if (len > DNSMSG_MSG_MAX)
		return fail(err, off, DNSMSG_E_TOO_LONG, DNSMSG_MSG_MAX);
	if (len < DNSMSG_HDR_LEN)
		return fail(err, off, DNSMSG_E_SHORT, len);
	if (get16(msg) != q->dq_id)
		return fail(err, off, DNSMSG_E_ID, 0);
	flags = get16(msg + 2);
	if (!(flags & DNS_FLAG_QR))
		return fail(err, off, DNSMSG_E_NOT_RESPONSE, 2);
	if (((flags >> 11) & 0xf) != 0)
		return fail(err, off, DNSMSG_E_OPCODE, 2);
	if (get16(msg + 4) != 1)
		return fail(err, off, DNSMSG_E_QDCOUNT, 4);
	/* The question as sent, case included: the 0x20 bits must echo. */
	qlen = q->dq_len - DNSMSG_HDR_LEN;
	if (len - DNSMSG_HDR_LEN < qlen)
		return fail(err, off, DNSMSG_E_SHORT, len);
	for (i = 0; i < qlen; i++)
		if (msg[DNSMSG_HDR_LEN + i] != q->dq_msg[DNSMSG_HDR_LEN + i])
			return fail(err, off, DNSMSG_E_QUESTION,
			    DNSMSG_HDR_LEN + i);
	out->da_rcode = (int)(flags & 0xf);
	/* The rest may be cut anywhere: TCP gets the whole answer. */
	out->da_tc = (flags & DNS_FLAG_TC) != 0;
	return 0;
}

/*
 * Every record from ans on well formed, whatever section and type, and
 * nothing after the last one.
 */
static int
check_records(const unsigned char *msg, size_t len, size_t ans,
    enum dnsmsg_err *err, size_t *off)
{
	unsigned char next[DNSMSG_NAME_MAX];
	size_t pos = ans, i, nrr, nan, nextlen;
	struct rr rr;

	nan = get16(msg + 6);
	nrr = nan + get16(msg + 8) + get16(msg + 10);
	for (i = 0; i < nrr; i++) {
		if (read_rr(msg, len, &pos, &rr, err, off) == -1)
			return -1;
		if (i >= nan || rr.class != DNS_CLASS_IN)
			continue;
		if ((rr.type == DNSMSG_QTYPE_A && rr.rdlen != 4) ||
		    (rr.type == DNSMSG_QTYPE_AAAA && rr.rdlen != 16))
			return fail(err, off, DNSMSG_E_RDATA, rr.rdoff - 2);
		if (rr.type == DNS_TYPE_CNAME &&
		    read_target(msg, &rr, next, &nextlen, err, off) == -1)
			return -1;
	}
	if (pos != len)
		return fail(err, off, DNSMSG_E_TRAILING, pos);
	return 0;
}

/*
 * Follow the CNAME chain from the query name (in lower case) through the
 * answer section at ans: cur ends as the chain's last name, *hops its
 * length, *ttl lowered to the shortest CNAME TTL on the way.
 */
static int
follow_cnames(const struct dnsmsg_query *q, const unsigned char *msg,
    size_t len, size_t ans, unsigned char cur[DNSMSG_NAME_MAX], size_t *curlen,
    size_t *hops, uint32_t *ttl, enum dnsmsg_err *err, size_t *off)
{
	unsigned char next[DNSMSG_NAME_MAX];
	size_t pos = DNSMSG_HDR_LEN, nan = get16(msg + 6), nextlen, i;
	struct rr rr;

	if (read_name(q->dq_msg, q->dq_len, &pos, cur, curlen, err, off) == -1)
		return -1;
	for (*hops = 0;; (*hops)++) {
		int found = 0;
		size_t at = 0;

		pos = ans;
		for (i = 0; i < nan; i++) {
			size_t start = pos;

			if (read_rr(msg, len, &pos, &rr, err, off) == -1)
				return -1;
			if (rr.type != DNS_TYPE_CNAME ||
			    rr.class != DNS_CLASS_IN ||
			    !same_name(&rr, cur, *curlen))
				continue;
			/* Two CNAMEs for one name: which one is true? */
			if (found++)
				return fail(err, off, DNSMSG_E_CNAME, start);
			if (read_target(msg, &rr, next, &nextlen, err, off) ==
			    -1)
				return -1;
			if (rr.ttl < *ttl)
				*ttl = rr.ttl;
			at = start;
		}
		if (!found)
			return 0;
		if (*hops == DNSMSG_CNAME_MAX)
			return fail(err, off, DNSMSG_E_CNAME, at);
		memcpy(cur, next, nextlen);
		*curlen = nextlen;
	}
}

/*
 * The addresses of the wanted type that name cur owns in the answer
 * section at ans: the first maxaddrs into addrs, all of them counted in
 * da_nfound; *ttl lowered to the shortest of their TTLs.
 */
static int
collect_addrs(const struct dnsmsg_query *q, const unsigned char *msg,
    size_t len, size_t ans, const unsigned char *cur, size_t curlen,
    uint32_t *ttl, struct dnsmsg_answer *out, unsigned char (*addrs)[16],
    size_t maxaddrs, enum dnsmsg_err *err, size_t *off)
{
	uint16_t want = q->dq_qtype;
	size_t alen = want == DNSMSG_QTYPE_A ? 4 : 16;
	size_t pos = ans, nan = get16(msg + 6), i;
	struct rr rr;

	for (i = 0; i < nan; i++) {
		if (read_rr(msg, len, &pos, &rr, err, off) == -1)
			return -1;
		if (rr.type != want || rr.class != DNS_CLASS_IN ||
		    !same_name(&rr, cur, curlen))
			continue;
		if (rr.ttl < *ttl)
			*ttl = rr.ttl;
		if (out->da_naddrs < maxaddrs) {
			memset(addrs[out->da_naddrs], 0, 16);
			memcpy(addrs[out->da_naddrs], msg + rr.rdoff, alen);
			out->da_naddrs++;
		}
		out->da_nfound++;
	}
	return 0;
}

int
dnsmsg_parse(const struct dnsmsg_query *q, const unsigned char *msg, size_t len,
    struct dnsmsg_answer *out, unsigned char (*addrs)[16], size_t maxaddrs,
    enum dnsmsg_err *err, size_t *off)
{
	unsigned char cur[DNSMSG_NAME_MAX];
	size_t curlen, ans, hops;
	uint32_t ttl = UINT32_MAX;

	memset(out, 0, sizeof(*out));
	*err = DNSMSG_E_OK;
	*off = 0;
	if (check_response(q, msg, len, out, err, off) == -1)
		return -1;
	if (out->da_tc)
		return 0;
	ans = q->dq_len; /* the header and the question echoed */
	if (check_records(msg, len, ans, err, off) == -1)
		return -1;
	if (out->da_rcode != DNSMSG_RCODE_NOERROR)
		return 0;
	if (follow_cnames(q, msg, len, ans, cur, &curlen, &hops, &ttl, err,
		off) == -1)
		return -1;
	out->da_ncnames = hops;
	if (collect_addrs(q, msg, len, ans, cur, curlen, &ttl, out, addrs,
		maxaddrs, err, off) == -1)
		return -1;
	out->da_ttl = out->da_nfound > 0 ? ttl : 0;
	return 0;
}
