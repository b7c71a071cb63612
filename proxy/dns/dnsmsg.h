/*
 * DNS messages for sluice's stub resolver (proxy/resolve.c): build an A or
 * AAAA query and check a response against it, strictly. Pure: no I/O, no
 * allocation, no libevent, no global state, so that the unit tests and the
 * fuzz target use it alone. The threat is a sandbox that shares sluice's
 * network namespace and answers sluice's queries itself (DESIGN.md
 * "Resolving upstream names safely"): every answer that does not match the
 * query exactly is refused with the reason and offset at fault.
 */
#ifndef SLUICE_DNSMSG_H
#define SLUICE_DNSMSG_H

#include <stddef.h>
#include <stdint.h>

#define DNSMSG_QTYPE_A    1
#define DNSMSG_QTYPE_AAAA 28

#define DNSMSG_HDR_LEN   12
#define DNSMSG_NAME_MAX  255 /* bytes of a name in wire form (RFC 1035) */
#define DNSMSG_MASK_LEN  32  /* bytes of 0x20 mask: a bit per name byte */
#define DNSMSG_QUERY_MAX (DNSMSG_HDR_LEN + DNSMSG_NAME_MAX + 4)
#define DNSMSG_MSG_MAX   65535 /* largest message (TCP length prefix) */
#define DNSMSG_CNAME_MAX 8     /* CNAMEs followed from the query name */

#define DNSMSG_RCODE_NOERROR  0
#define DNSMSG_RCODE_SERVFAIL 2
#define DNSMSG_RCODE_NXDOMAIN 3

enum dnsmsg_err {
	DNSMSG_E_OK = 0,
	DNSMSG_E_BAD_NAME,     /* query: not a host name we resolve */
	DNSMSG_E_BAD_QTYPE,    /* query: neither A nor AAAA */
	DNSMSG_E_SHORT,        /* message ends inside a field */
	DNSMSG_E_TOO_LONG,     /* over DNSMSG_MSG_MAX */
	DNSMSG_E_ID,           /* transaction id differs from the query's */
	DNSMSG_E_NOT_RESPONSE, /* QR bit clear */
	DNSMSG_E_OPCODE,       /* opcode other than QUERY */
	DNSMSG_E_QDCOUNT,      /* not exactly one question */
	DNSMSG_E_QUESTION,     /* question not byte for byte the query's */
	DNSMSG_E_LABEL,        /* reserved label type, or name over 255 */
	DNSMSG_E_POINTER,      /* compression pointer not strictly backward */
	DNSMSG_E_RDATA,        /* A/AAAA/CNAME record data of a wrong size */
	DNSMSG_E_CNAME,        /* CNAME chain too long, looping or forked */
	DNSMSG_E_TRAILING,     /* bytes after the last counted record */
	DNSMSG_E__COUNT
};

/* What was sent: a response is checked against it. */
struct dnsmsg_query {
	uint16_t dq_id;
	uint16_t dq_qtype;
	size_t dq_len;                          /* bytes of dq_msg */
	unsigned char dq_msg[DNSMSG_QUERY_MAX]; /* the whole query */
};

/* The result of a response that passed every check. */
struct dnsmsg_answer {
	int da_rcode;      /* DNSMSG_RCODE_* or another rcode */
	int da_tc;         /* truncated: ask again over TCP (no answers read) */
	uint32_t da_ttl;   /* min TTL of the chain and addresses; 0: none */
	size_t da_naddrs;  /* addresses stored (at most the caller's max) */
	size_t da_nfound;  /* addresses found, including those not stored */
	size_t da_ncnames; /* CNAMEs followed */
};

/*
 * Build a recursive (RD) query for name (a host name; one trailing dot
 * allowed) of qtype with transaction id. Bit i of mask (DNSMSG_MASK_LEN
 * bytes; NULL: all lower case) sets the case of the letter at wire byte i
 * of the name (0x20, draft-vixie-dnsext-dns0x20): 1 upper, 0 lower. Returns 0
 * with q filled, or -1 with *err set (DNSMSG_E_BAD_NAME, DNSMSG_E_BAD_QTYPE).
 */
int dnsmsg_query(struct dnsmsg_query *q, const char *name, uint16_t qtype,
    uint16_t id, const unsigned char *mask, enum dnsmsg_err *err);

/*
 * Check the response msg (len bytes) to q and read its answer: the id,
 * QR, opcode QUERY, exactly one question equal byte for byte (case
 * included) to q's, every record well formed (compression pointers only
 * strictly backward, names at most 255 bytes, no bytes after the last
 * record). With TC set nothing past the question is read (da_tc). With
 * NOERROR the CNAME chain from the query name is followed (at most
 * DNSMSG_CNAME_MAX, each name matched case-insensitively) and the records
 * of q's type and class IN owned by its last name are stored in addrs
 * (4 bytes for A, 16 for AAAA, in the first bytes of each entry; at most
 * maxaddrs). Records owned by other names are ignored. Returns 0 with *out
 * filled, or -1 with *err and *off (the byte at fault) set.
 */
int dnsmsg_parse(const struct dnsmsg_query *q, const unsigned char *msg,
    size_t len, struct dnsmsg_answer *out, unsigned char (*addrs)[16],
    size_t maxaddrs, enum dnsmsg_err *err, size_t *off);

/* A short text for an error code ("pointer not backward"). */
const char *dnsmsg_strerror(enum dnsmsg_err);

#endif
