/*
 * The DNS stub's messages (proxy/dns/stub.h has the rules): a strict
 * query parser and the answer builder. A query comes from the sandbox, so
 * nothing in it is trusted: every length is checked against the message,
 * the question may hold no pointer at all, and what is not exactly a
 * simple query is refused rather than guessed at.
 */
#include <stdint.h>
#include <string.h>

#include "proxy/util/ascii.h"
#include "proxy/dns/stub.h"

#define HDR_LEN        12
#define NAME_MAX_WIRE  255
#define LABEL_MAX      63
#define TYPE_A         1
#define TYPE_OPT       41
#define CLASS_IN       1
#define FLAG_QR        0x8000
#define FLAG_AA        0x0400
#define FLAG_RD        0x0100
#define FLAG_RA        0x0080
#define OPCODE(f)      (((f) >> 11) & 0xf)
#define RCODE_NOERROR  0
#define RCODE_FORMERR  1
#define RCODE_NXDOMAIN 3
#define RCODE_NOTIMP   4
#define RCODE_REFUSED  5

static const char *const stub_errs[DNSSTUB_E__COUNT] = {
	[DNSSTUB_E_OK] = "ok",
	[DNSSTUB_E_SHORT] = "shorter than a DNS header",
	[DNSSTUB_E_RESPONSE] = "a response, not a query",
	[DNSSTUB_E_TOO_LONG] = "query too long",
	[DNSSTUB_E_OPCODE] = "opcode is not QUERY",
	[DNSSTUB_E_QDCOUNT] = "not exactly one question",
	[DNSSTUB_E_RECORDS] = "answer or authority records in a query",
	[DNSSTUB_E_ARCOUNT] = "more than one additional record",
	[DNSSTUB_E_LABEL] = "reserved label type",
	[DNSSTUB_E_POINTER] = "compression pointer in the question",
	[DNSSTUB_E_NAME_LONG] = "name longer than 255 bytes",
	[DNSSTUB_E_TRUNCATED] = "message ends inside a field",
	[DNSSTUB_E_OPT] = "additional record is not an EDNS(0) OPT",
	[DNSSTUB_E_TRAILING] = "bytes after the last record",
	[DNSSTUB_E_CLASS] = "question class is not IN",
};

static const char *const stub_decisions[DNSSTUB_D__COUNT] = {
	[DNSSTUB_D_DROP] = "drop",
	[DNSSTUB_D_ANSWER] = "answer",
	[DNSSTUB_D_NODATA] = "nodata",
	[DNSSTUB_D_NXDOMAIN] = "nxdomain",
	[DNSSTUB_D_REFUSED] = "refused",
	[DNSSTUB_D_NOTIMP] = "notimp",
	[DNSSTUB_D_FORMERR] = "formerr",
};

const char *
dnsstub_strerror(enum dnsstub_err e)
{
	if ((unsigned)e >= DNSSTUB_E__COUNT)
		return "unknown error";
	return stub_errs[e];
}

const char *
dnsstub_decision_str(enum dnsstub_decision d)
{
	if ((unsigned)d >= DNSSTUB_D__COUNT)
		return "unknown";
	return stub_decisions[d];
}

static uint16_t
get16(const unsigned char *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static void
put16(unsigned char *p, uint16_t v)
{
	p[0] = (unsigned char)(v >> 8);
	p[1] = (unsigned char)v;
}

static int
fail(enum dnsstub_err *err, size_t *off, enum dnsstub_err e, size_t at)
{
	*err = e;
	*off = at;
	return -1;
}

/* The EDNS(0) OPT record at p, the last thing in the message. */
static int
parse_opt(const unsigned char *msg, size_t len, size_t p,
    struct dnsstub_query *q, enum dnsstub_err *err, size_t *off)
{
	size_t rdlen;

	if (p + 11 > len)
		return fail(err, off, DNSSTUB_E_TRUNCATED, len);
	if (msg[p] != 0 || get16(msg + p + 1) != TYPE_OPT)
		return fail(err, off, DNSSTUB_E_OPT, p);
	if (msg[p + 6] != 0) /* EDNS version: only 0 exists */
		return fail(err, off, DNSSTUB_E_OPT, p + 6);
	rdlen = get16(msg + p + 9);
	if (p + 11 + rdlen > len)
		return fail(err, off, DNSSTUB_E_TRUNCATED, len);
	if (p + 11 + rdlen < len)
		return fail(err, off, DNSSTUB_E_TRAILING, p + 11 + rdlen);
	q->sq_edns = 1;
	q->sq_edns_size = get16(msg + p + 3);
	return 0;
}

int
dnsstub_parse(const unsigned char *msg, size_t len, struct dnsstub_query *q,
    enum dnsstub_err *err, size_t *off)
{
	size_t p, l, arcount;

	memset(q, 0, sizeof(*q));
	*err = DNSSTUB_E_OK;
	*off = 0;
	if (len >= 2)
		q->sq_id = get16(msg);
	if (len < HDR_LEN)
		return fail(err, off, DNSSTUB_E_SHORT, len);
	q->sq_flags = get16(msg + 2);
	if (q->sq_flags & FLAG_QR)
		return fail(err, off, DNSSTUB_E_RESPONSE, 2);
	if (len > DNSSTUB_QUERY_MAX)
		return fail(err, off, DNSSTUB_E_TOO_LONG, DNSSTUB_QUERY_MAX);
	if (OPCODE(q->sq_flags) != 0)
		return fail(err, off, DNSSTUB_E_OPCODE, 2);
	if (get16(msg + 4) != 1)
		return fail(err, off, DNSSTUB_E_QDCOUNT, 4);
	if (get16(msg + 6) != 0)
		return fail(err, off, DNSSTUB_E_RECORDS, 6);
	if (get16(msg + 8) != 0)
		return fail(err, off, DNSSTUB_E_RECORDS, 8);
	if ((arcount = get16(msg + 10)) > 1)
		return fail(err, off, DNSSTUB_E_ARCOUNT, 10);

	/* The name: plain labels only (RFC 1035 §4.1.4 pointers point
	 * backward, and before the question there is only the header). */
	for (p = HDR_LEN;;) {
		if (p >= len)
			return fail(err, off, DNSSTUB_E_TRUNCATED, len);
		l = msg[p];
		if ((l & 0xc0) == 0xc0)
			return fail(err, off, DNSSTUB_E_POINTER, p);
		if (l & 0xc0)
			return fail(err, off, DNSSTUB_E_LABEL, p);
		if (p + 1 + l - HDR_LEN > NAME_MAX_WIRE)
			return fail(err, off, DNSSTUB_E_NAME_LONG, p);
		if (l == 0)
			break;
		if (p + 1 + l > len)
			return fail(err, off, DNSSTUB_E_TRUNCATED, len);
		p += 1 + l;
	}
	q->sq_name_len = p + 1 - HDR_LEN;
	p++;
	if (p + 4 > len)
		return fail(err, off, DNSSTUB_E_TRUNCATED, len);
	q->sq_qtype = get16(msg + p);
	q->sq_qclass = get16(msg + p + 2);
	q->sq_qend = p + 4;
	if (arcount == 1) {
		if (parse_opt(msg, len, q->sq_qend, q, err, off) == -1)
			return -1;
	} else if (q->sq_qend != len)
		return fail(err, off, DNSSTUB_E_TRAILING, q->sq_qend);
	if (q->sq_qclass != CLASS_IN)
		return fail(err, off, DNSSTUB_E_CLASS, q->sq_qend - 2);
	return 0;
}

/* Whether the wire name at msg + HDR_LEN is host (case-insensitive). */
static int
name_is(const unsigned char *msg, const struct dnsstub_query *q,
    const char *host)
{
	const unsigned char *h = (const unsigned char *)host;
	size_t p = HDR_LEN, end = HDR_LEN + q->sq_name_len - 1, l, i;

	if (*h == '\0' || *h == '.')
		return 0;
	while (p < end) {
		l = msg[p++];
		for (i = 0; i < l; i++)
			if (h[i] == '\0' || h[i] == '.' ||
			    ascii_lower(h[i]) != ascii_lower(msg[p + i]))
				return 0;
		h += l;
		p += l;
		if (*h == '.')
			h++;
		else if (*h != '\0')
			return 0;
		/* After the last label the host must be done. */
		if (p == end)
			return *h == '\0' && (h[-1] != '.' || h[-2] != '.');
	}
	return 0;
}

size_t
dnsstub_name_text(const unsigned char *msg, const struct dnsstub_query *q,
    char *buf, size_t len)
{
	static const char digits[] = "0123456789";
	size_t p = HDR_LEN, end = HDR_LEN + q->sq_name_len - 1, l, i, n = 0;
	char tmp[4];
	size_t tn, k;
	unsigned char c;

	if (len == 0)
		return 0;
	if (q->sq_name_len <= 1) {
		if (len > 1)
			buf[n++] = '.';
		buf[n] = '\0';
		return n;
	}
	while (p < end) {
		l = msg[p++];
		if (p > HDR_LEN + 1) {
			if (n + 1 >= len)
				break;
			buf[n++] = '.';
		}
		for (i = 0; i < l; i++) {
			c = ascii_lower(msg[p + i]);
			if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
			    c == '-' || c == '_') {
				tmp[0] = (char)c;
				tn = 1;
			} else {
				tmp[0] = '\\';
				tmp[1] = digits[c / 100];
				tmp[2] = digits[c / 10 % 10];
				tmp[3] = digits[c % 10];
				tn = 4;
			}
			if (n + tn >= len)
				goto out;
			for (k = 0; k < tn; k++)
				buf[n++] = tmp[k];
		}
		p += l;
	}
out:
	buf[n] = '\0';
	return n;
}

/* A header of an answer to q: no records counted yet. */
static void
put_header(unsigned char *out, const struct dnsstub_query *q, int rcode,
    uint16_t qdcount)
{
	uint16_t flags = FLAG_QR | FLAG_AA | FLAG_RA |
	    (q->sq_flags & (FLAG_RD | 0x7800)) | (uint16_t)rcode;

	memset(out, 0, HDR_LEN);
	put16(out, q->sq_id);
	put16(out + 2, flags);
	put16(out + 4, qdcount);
}

size_t
dnsstub_answer(const unsigned char *msg, size_t len,
    const struct dnsstub_host *hosts, size_t nhosts, unsigned char *out,
    size_t cap, struct dnsstub_result *res)
{
	struct dnsstub_query *q = &res->sr_q;
	size_t i, n, qlen;
	int rcode;

	memset(res, 0, sizeof(*res));
	res->sr_host = SIZE_MAX;
	if (dnsstub_parse(msg, len, q, &res->sr_err, &res->sr_off) == -1) {
		switch (res->sr_err) {
		case DNSSTUB_E_SHORT:
		case DNSSTUB_E_RESPONSE:
			res->sr_decision = DNSSTUB_D_DROP;
			return 0;
		case DNSSTUB_E_OPCODE:
			res->sr_decision = DNSSTUB_D_NOTIMP;
			rcode = RCODE_NOTIMP;
			break;
		case DNSSTUB_E_CLASS:
			res->sr_parsed = 1;
			res->sr_decision = DNSSTUB_D_REFUSED;
			goto question;
		default:
			res->sr_decision = DNSSTUB_D_FORMERR;
			rcode = RCODE_FORMERR;
			break;
		}
		if (cap < HDR_LEN) {
			res->sr_decision = DNSSTUB_D_DROP;
			return 0;
		}
		put_header(out, q, rcode, 0);
		return HDR_LEN;
	}
	res->sr_parsed = 1;
	res->sr_decision = DNSSTUB_D_NXDOMAIN;
	for (i = 0; i < nhosts; i++)
		if (name_is(msg, q, hosts[i].dh_name)) {
			res->sr_host = i;
			res->sr_decision = q->sq_qtype == TYPE_A ?
			    DNSSTUB_D_ANSWER :
			    DNSSTUB_D_NODATA;
			break;
		}
question:
	rcode = res->sr_decision == DNSSTUB_D_REFUSED ? RCODE_REFUSED :
	    res->sr_decision == DNSSTUB_D_NXDOMAIN    ? RCODE_NXDOMAIN :
							RCODE_NOERROR;
	qlen = q->sq_qend - HDR_LEN;
	n = HDR_LEN + qlen + (res->sr_decision == DNSSTUB_D_ANSWER ? 16 : 0) +
	    (q->sq_edns ? 11 : 0);
	if (cap < n) {
		res->sr_decision = DNSSTUB_D_DROP;
		return 0;
	}
	put_header(out, q, rcode, 1);
	memcpy(out + HDR_LEN, msg + HDR_LEN, qlen);
	n = HDR_LEN + qlen;
	if (res->sr_decision == DNSSTUB_D_ANSWER) {
		put16(out + 6, 1);
		put16(out + n, 0xc000 | HDR_LEN); /* the question's name */
		put16(out + n + 2, TYPE_A);
		put16(out + n + 4, CLASS_IN);
		put16(out + n + 6, 0);
		put16(out + n + 8, DNSSTUB_TTL);
		put16(out + n + 10, 4);
		memcpy(out + n + 12, hosts[res->sr_host].dh_addr, 4);
		n += 16;
	}
	if (q->sq_edns) {
		put16(out + 10, 1);
		out[n] = 0; /* root */
		put16(out + n + 1, TYPE_OPT);
		put16(out + n + 3, DNSSTUB_UDP_SIZE);
		memset(out + n + 5, 0, 6); /* rcode, version, flags, rdlen */
		n += 11;
	}
	return n;
}

int
dnsstub_tcp_frame(const unsigned char *buf, size_t len, size_t *msglen)
{
	size_t n;

	if (len < 2)
		return 0;
	n = get16(buf);
	if (n == 0 || n > DNSSTUB_QUERY_MAX)
		return -1;
	if (len < 2 + n)
		return 0;
	*msglen = n;
	return 1;
}

void
dnsstub_tcp_prefix(unsigned char out[2], size_t len)
{
	put16(out, (uint16_t)len);
}
