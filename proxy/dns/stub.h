/*
 * The DNS stub of `sluice exec` (DESIGN "sluice exec: a sandbox in one
 * line"): queries from the sandbox, parsed strictly, answered from a table
 * of host -> 127.77.0.N and NXDOMAIN for every other name. Pure: no I/O, no
 * allocation, no global state (sockets, the table and the audit are the
 * caller's).
 *
 * What a query must be (anything else is refused):
 *   - at most DNSSTUB_QUERY_MAX bytes (FORMERR);
 *   - a header (12 bytes; shorter: no answer at all) with QR clear (a
 *     response gets no answer, so two stubs cannot ping-pong);
 *   - opcode QUERY (else NOTIMP, header only);
 *   - exactly one question, no answer or authority record, and in the
 *     additional section at most one record, which must be an EDNS(0) OPT
 *     record (root owner, type 41, version 0, its data exactly its
 *     length): FORMERR, header only;
 *   - the question name without compression pointers (there is nothing
 *     before it to point at) or reserved label types, labels at most 63
 *     bytes, the name at most 255 bytes in wire form, no byte after the
 *     last record: FORMERR, header only;
 *   - class IN (else REFUSED, the question echoed).
 * Answers: the id, RD and the question echoed byte for byte, QR, AA and RA
 * set. A mapped name (matched case-insensitively) gets its A record for
 * qtype A and NOERROR with no record (no ::1, nor anything else) for every
 * other type; any other name NXDOMAIN. An OPT record (UDP size
 * DNSSTUB_UDP_SIZE) is added when the query had one. Over TCP each message
 * has a two-byte length in front (dnsstub_tcp_frame, dnsstub_tcp_prefix).
 */
#ifndef SLUICE_DNS_STUB_H
#define SLUICE_DNS_STUB_H

#include <stddef.h>
#include <stdint.h>

#define DNSSTUB_QUERY_MAX 1232 /* largest query taken, UDP or TCP */
#define DNSSTUB_UDP_SIZE  1232 /* EDNS UDP size we advertise */
#define DNSSTUB_TTL       60   /* of the A records */
/* Header, question, one A record (pointer name), one OPT record. */
#define DNSSTUB_ANSWER_MAX (12 + 255 + 4 + 16 + 11)
/* A name in text form: each byte escaped as \DDD at worst, and NUL. */
#define DNSSTUB_NAME_TEXT_MAX (255 * 4 + 1)

enum dnsstub_err {
	DNSSTUB_E_OK = 0,
	DNSSTUB_E_SHORT,     /* shorter than a header: dropped */
	DNSSTUB_E_RESPONSE,  /* QR set: dropped */
	DNSSTUB_E_TOO_LONG,  /* over DNSSTUB_QUERY_MAX */
	DNSSTUB_E_OPCODE,    /* opcode other than QUERY */
	DNSSTUB_E_QDCOUNT,   /* not exactly one question */
	DNSSTUB_E_RECORDS,   /* answer or authority records in a query */
	DNSSTUB_E_ARCOUNT,   /* more than one additional record */
	DNSSTUB_E_LABEL,     /* reserved label type (0x40, 0x80) */
	DNSSTUB_E_POINTER,   /* compression pointer in the question */
	DNSSTUB_E_NAME_LONG, /* name over 255 bytes in wire form */
	DNSSTUB_E_TRUNCATED, /* message ends inside a field */
	DNSSTUB_E_OPT,       /* additional record not an EDNS(0) OPT */
	DNSSTUB_E_TRAILING,  /* bytes after the last record */
	DNSSTUB_E_CLASS,     /* question class not IN */
	DNSSTUB_E__COUNT
};

/* What the stub did with a query (the audit's `decision`). */
enum dnsstub_decision {
	DNSSTUB_D_DROP = 0, /* no answer sent */
	DNSSTUB_D_ANSWER,   /* mapped name, qtype A: its address */
	DNSSTUB_D_NODATA,   /* mapped name, another qtype: NOERROR, empty */
	DNSSTUB_D_NXDOMAIN, /* any other name */
	DNSSTUB_D_REFUSED,  /* class not IN */
	DNSSTUB_D_NOTIMP,   /* opcode not QUERY */
	DNSSTUB_D_FORMERR,  /* malformed */
	DNSSTUB_D__COUNT
};

/* A name the stub answers: dh_name ("api.example.com", one trailing dot
 * allowed) -> dh_addr (an IPv4 address, network order). */
struct dnsstub_host {
	const char *dh_name;
	unsigned char dh_addr[4];
};

/* A parsed query; offsets into the message it was parsed from. */
struct dnsstub_query {
	uint16_t sq_id;
	uint16_t sq_flags; /* the header's second field */
	uint16_t sq_qtype;
	uint16_t sq_qclass;
	size_t sq_name_len;    /* the name in wire form, at offset 12 */
	size_t sq_qend;        /* offset just past the question */
	int sq_edns;           /* an OPT record came with it */
	uint16_t sq_edns_size; /* its UDP size */
};

struct dnsstub_result {
	enum dnsstub_decision sr_decision;
	enum dnsstub_err sr_err; /* why it was refused or dropped */
	size_t sr_off;           /* byte at fault */
	int sr_parsed;           /* sr_q is valid (the question was read) */
	struct dnsstub_query sr_q;
	size_t sr_host; /* index in the table, or SIZE_MAX */
};

/*
 * Parse query msg (len bytes) as above. Returns 0 with q filled, or -1 with
 * *err and *off (the byte at fault) set; q is filled as far as it was read
 * (the id whenever len >= 2).
 */
int dnsstub_parse(const unsigned char *msg, size_t len, struct dnsstub_query *q,
    enum dnsstub_err *err, size_t *off);

/*
 * Answer query msg (len bytes) from the table hosts (nhosts entries) into
 * out (cap bytes; DNSSTUB_ANSWER_MAX always suffices). Returns the
 * answer's length, or 0 when nothing is to be sent (DNSSTUB_D_DROP, or cap
 * too small); res says what was decided and why.
 */
size_t dnsstub_answer(const unsigned char *msg, size_t len,
    const struct dnsstub_host *hosts, size_t nhosts, unsigned char *out,
    size_t cap, struct dnsstub_result *res);

/*
 * The question name of q (parsed from msg) as text for the audit: lower
 * case, labels joined by '.', every byte other than a-z, 0-9, '-' and '_'
 * as \DDD, "." for the root. Returns the length (buf NUL-terminated; cut
 * short when len < DNSSTUB_NAME_TEXT_MAX).
 */
size_t dnsstub_name_text(const unsigned char *msg,
    const struct dnsstub_query *q, char *buf, size_t len);

/*
 * TCP framing (RFC 1035 §4.2.2): with buf holding len bytes read so far,
 * returns 1 with *msglen set when a whole message follows its two-byte
 * length (it starts at buf + 2), 0 when more is needed, -1 when the length
 * is 0 or over DNSSTUB_QUERY_MAX (close the connection).
 */
int dnsstub_tcp_frame(const unsigned char *buf, size_t len, size_t *msglen);
/* Write the two-byte length of a len-byte message to out. */
void dnsstub_tcp_prefix(unsigned char out[2], size_t len);

const char *dnsstub_strerror(enum dnsstub_err);
/* "answer", "nodata", "nxdomain", "refused", "notimp", "formerr", "drop". */
const char *dnsstub_decision_str(enum dnsstub_decision);

#endif
