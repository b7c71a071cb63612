/*
 * What reaches the upstream (DESIGN.md "Headers"): which fields of a
 * client's request head go on, the fields sluice injects, the Host value,
 * the framing sluice writes, and the chunk lines of its re-chunker. Pure
 * like the parser: libc only, no allocation, no global state.
 */
#ifndef SLUICE_REWRITE_H
#define SLUICE_REWRITE_H

#include <stddef.h>
#include <stdint.h>

#include "proxy/http/http1.h"

/* A field sluice writes itself: a token name and a value without CTLs. */
struct rw_field {
	const char *name;
	size_t name_len;
	const char *value;
	size_t value_len;
};

#define RW_INJECT_MAX 32 /* injected fields of one upstream (config) */

/* The upstream a request goes to, as the request head needs it. */
struct rw_upstream {
	const char *authority; /* the Host value */
	size_t authority_len;
	const char *path; /* prefix of every path, without a final '/' */
	size_t path_len;
	const struct rw_field *inject; /* sent as given, after the client's */
	size_t ninject;
	int drop_authorization;   /* Authorization is not the run's token */
	const char *drop_carrier; /* strip_token: the field that held it */
	size_t drop_carrier_len;
};

/* What becomes of one field of a client's request on its way upstream. */
enum rw_fate {
	RW_KEEP = 0, /* copied unchanged */
	RW_FRAMING,  /* Host or Content-Length: sluice writes its own */
	RW_HOP,      /* hop-by-hop (RFC 9110 7.6.1), or named by Connection */
	RW_INJECTED, /* the name of an injected field ('_' taken for '-') */
	RW_AUTH,     /* an Authorization that is not the run's token */
	RW_CARRIER   /* the field that held the run token (strip_token) */
};

/*
 * Non-zero when field h of m is hop-by-hop: one of the fixed names
 * (Connection, Keep-Alive, Proxy-*, TE, Trailer, Transfer-Encoding,
 * Upgrade) or one m's Connection field lists. has_connection: m has a
 * Connection field (http1_find()), which only then is searched.
 */
int rw_hop_by_hop(const struct http1_msg *m, const struct http1_hdr *h,
    int has_connection);
/* ASCII case-insensitive name equality with '_' and '-' the same. */
int rw_name_eq_dash(const char *a, size_t alen, const char *b, size_t blen);
/* The fate of field h of request m sent to up. */
enum rw_fate
rw_request_field(const struct http1_msg *m, const struct http1_hdr *h,
    int has_connection, const struct rw_upstream *up);
/*
 * Non-zero when m's Connection field lists a field that must reach the
 * upstream as checked (framing, Host, Authorization): such a request is
 * refused, since rewriting would drop it.
 */
int rw_connection_protected(const struct http1_msg *m);

/*
 * The request head sent upstream for request m (target u, parsed from
 * m's target) to up: "METHOD <up path><u path>[?query] HTTP/1.1", Host
 * the upstream authority, the client's fields of fate RW_KEEP in their
 * order, the injected fields, then the framing the parser decided
 * (Transfer-Encoding: chunked, or Content-Length). Writes it to
 * buf[0..cap) when it fits and returns its length (nothing is written
 * when it is over cap: call with cap 0 to size the buffer). Sets
 * *auth_removed (may be NULL) to 1 when it drops an Authorization.
 */
size_t rw_request_head(const struct http1_msg *m, const struct uri *u,
    const struct rw_upstream *up, char *buf, size_t cap, int *auth_removed);

/* "Content-Length: <n>\r\n": at most RW_CL_LINE_MAX bytes. */
#define RW_CL_LINE_MAX 40
size_t rw_content_length(char *buf, uint64_t n);

/*
 * The re-chunker's framing: every run of n > 0 payload bytes goes as
 * rw_chunk_line(n), the bytes, RW_CHUNK_TAIL; the body ends with
 * RW_CHUNK_LAST (no extensions, no trailers, lower-case hex sizes).
 */
#define RW_CHUNK_LINE_MAX (2 * sizeof(size_t) + 2)
#define RW_CHUNK_TAIL     "\r\n"
#define RW_CHUNK_LAST     "0\r\n\r\n"
size_t rw_chunk_line(char *buf, size_t n);

#endif
