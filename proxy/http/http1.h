/*
 * The strict HTTP/1.1 message parser (RFC 9112 with DESIGN.md "HTTP/1.1
 * strictness"), the chunked body decoder, request-target parsing and path
 * checks. Everything here is pure: no allocation, no libevent, no global
 * state, no recursion. Results are slices into the caller's buffer and stay
 * valid only while that buffer does.
 */
#ifndef SLUICE_HTTP1_H
#define SLUICE_HTTP1_H

#include <sys/types.h>

#include <stddef.h>
#include <stdint.h>

/*
 * Every way a message can be refused. http1_err_status() maps each to the
 * status sluice answers a client with (400, 431 or 413); for an upstream
 * response any error is upstream_bad_response.
 */
enum http1_err {
	HTTP1_E_NONE = 0,         /* no error */
	HTTP1_E_BARE_CR,          /* CR not followed by LF */
	HTTP1_E_BARE_LF,          /* LF not preceded by CR */
	HTTP1_E_OBS_FOLD,         /* header line starting with SP or HTAB */
	HTTP1_E_WS_BEFORE_COLON,  /* "Name : value" */
	HTTP1_E_METHOD,           /* empty method or a non-tchar in it */
	HTTP1_E_TARGET,           /* empty target or a byte outside VCHAR */
	HTTP1_E_VERSION,          /* not exactly HTTP/1.0 or HTTP/1.1 */
	HTTP1_E_REQUEST_LINE,     /* not "method SP target SP version" */
	HTTP1_E_STATUS_LINE,      /* not "version SP 3DIGIT SP reason" */
	HTTP1_E_FIELD_NAME,       /* empty field name or a non-tchar */
	HTTP1_E_FIELD_VALUE,      /* CTL other than HTAB, or DEL, in value */
	HTTP1_E_TOO_MANY_HEADERS, /* more than max_hdrs fields (431) */
	HTTP1_E_CL_AND_TE,        /* both Content-Length and T-E */
	HTTP1_E_CL_MULTIPLE,      /* more than one Content-Length */
	HTTP1_E_CL_INVALID,       /* non-numeric, empty or overflowing */
	HTTP1_E_TE_NOT_CHUNKED,   /* T-E other than exactly "chunked" */
	HTTP1_E_HOST_MISSING,     /* HTTP/1.1 request without Host */
	HTTP1_E_HOST_MULTIPLE,    /* more than one Host */
	HTTP1_E_HOST_INVALID,     /* Host value is not host[:port] */
	HTTP1_E_UPGRADE,          /* request carries Upgrade (refused) */
	HTTP1_E_CHUNK_SIZE,       /* bad hex, too many digits, overflow */
	HTTP1_E_CHUNK_EXT,        /* chunk extension with a CTL byte */
	HTTP1_E_CHUNK_CRLF,       /* chunk data not followed by CRLF */
	HTTP1_E_TRAILER,          /* malformed trailer field */
	HTTP1_E_BODY_TOO_LARGE,   /* set by callers: over max_body_bytes */
	HTTP1_E__COUNT
};

/* One header field: slices into the parsed buffer, value without OWS. */
struct http1_hdr {
	const char *name;
	size_t name_len;
	const char *value;
	size_t value_len;
};

/* How the body of a message is delimited (RFC 9112 §6.3). */
enum http1_body {
	HTTP1_BODY_NONE = 0, /* no body */
	HTTP1_BODY_LENGTH,   /* Content-Length bytes */
	HTTP1_BODY_CHUNKED,  /* Transfer-Encoding: chunked */
	HTTP1_BODY_EOF       /* response only: until the connection closes */
};

/* Flags found while parsing the header section. */
#define HTTP1_F_CLOSE      0x01 /* Connection lists "close" */
#define HTTP1_F_KEEPALIVE  0x02 /* Connection lists "keep-alive" */
#define HTTP1_F_EXPECT_100 0x04 /* Expect: 100-continue */
#define HTTP1_F_PROXY_CONN 0x08 /* a Proxy-Connection field is present */
#define HTTP1_F_HAS_TE_HDR 0x10 /* a TE field is present */

/*
 * A request or response head. The caller sets hdrs and max_hdrs (its own
 * array, reused across messages) and zeroes the rest before the first call
 * for a new message; the parser fills the rest.
 */
struct http1_msg {
	struct http1_hdr *hdrs; /* caller's array */
	size_t max_hdrs;        /* its length */

	const char *method; /* request line */
	size_t method_len;
	const char *target;
	size_t target_len;
	int status; /* status line: 100..599 */
	const char *reason;
	size_t reason_len;
	int minor; /* HTTP/1.<minor>: 0 or 1 */

	size_t nhdrs;            /* fields found */
	enum http1_body body;    /* framing, when the head is complete */
	uint64_t content_length; /* with HTTP1_BODY_LENGTH */
	const char *host;        /* request: the one Host value, or NULL */
	size_t host_len;
	unsigned flags;     /* HTTP1_F_* */
	enum http1_err err; /* why -1 was returned */
};

/*
 * Parse a request head from buf[0..len). last_len is the length of buf at
 * the previous call for this message (0 at first) so that bytes already
 * seen are not rescanned. Returns the length of the head including the
 * final CRLF, -2 if more bytes are needed, or -1 with m->err set. On
 * success the framing fields (body, content_length, host, flags) are set
 * and every rule of DESIGN.md "HTTP/1.1 strictness" has been checked,
 * including CL/TE conflicts, Host presence and Upgrade refusal.
 */
ssize_t http1_parse_request(struct http1_msg *m, const char *buf, size_t len,
    size_t last_len);

/*
 * Parse a response head, as above. head_request is non-zero when the
 * request was HEAD (no body whatever the headers say). 1xx, 204 and 304
 * responses have no body; without CL or TE the body runs to EOF.
 */
ssize_t http1_parse_response(struct http1_msg *m, const char *buf, size_t len,
    size_t last_len, int head_request);

/* The status sluice answers with for a request error: 400, 413 or 431. */
int http1_err_status(enum http1_err);
/* A short stable name for an error ("bare_lf"), for logs and tests. */
const char *http1_err_name(enum http1_err);

/* ASCII case-insensitive equality of two byte runs of length n. */
int http1_case_eq(const char *a, const char *b, size_t n);
/* ASCII case-insensitive equality of a field name with a literal. */
int http1_name_eq(const char *name, size_t len, const char *lit);
/*
 * Index of the first field named lit at or after index from, or -1.
 */
ssize_t http1_find(const struct http1_msg *m, const char *lit, size_t from);
/*
 * Non-zero when a Connection field of m lists the token name (case
 * insensitive), which makes that field hop-by-hop.
 */
int
http1_connection_lists(const struct http1_msg *m, const char *name, size_t len);

/*
 * Chunked body decoder: a resumable state machine that validates the framing
 * (RFC 9112 §7.1: hex size of at most 16 digits, optional extensions
 * without CTLs, strict CRLF, trailer fields as strict as headers) and says
 * which bytes are payload. Each call returns either a run of framing bytes
 * (*data_len == 0) or a run of payload bytes (*data_len == the return
 * value), so a caller can forward the chunked bytes unchanged or forward
 * the payload only.
 */
struct http1_chunked {
	int state;          /* private */
	uint64_t remaining; /* payload bytes left in this chunk */
	unsigned digits;    /* hex digits seen in this size line */
	size_t line_bytes;  /* bytes in the current size/trailer line */
	uint64_t total;     /* payload bytes so far */
	enum http1_err err;
};

void http1_chunked_init(struct http1_chunked *c);
/*
 * Consume from buf[0..len). Returns bytes consumed (> 0 unless len == 0 or
 * the message is complete), or -1 with c->err set. *data_len is the number
 * of those bytes that are payload (0 or the return value).
 */
ssize_t http1_chunked_step(struct http1_chunked *c, const char *buf, size_t len,
    size_t *data_len);
/* Non-zero once the last chunk and trailer section are consumed. */
int http1_chunked_done(const struct http1_chunked *c);

/*
 * Request targets (RFC 9112 §3.2) and Host values.
 */
enum uri_form {
	URI_ORIGIN = 1, /* /path?query */
	URI_ABSOLUTE,   /* http://host[:port]/path?query */
	URI_AUTHORITY,  /* host:port (CONNECT only) */
	URI_ASTERISK    /* * (OPTIONS only) */
};

enum uri_host {
	URI_HOST_NAME = 1, /* reg-name */
	URI_HOST_V4,       /* dotted quad */
	URI_HOST_V6 /* bracketed IPv6 literal; host is without brackets */
};

struct uri {
	enum uri_form form;
	int https; /* absolute-form scheme is https */
	enum uri_host host_type;
	const char *host; /* without brackets, NULL for origin-form */
	size_t host_len;
	uint16_t port;    /* explicit, or the scheme's default */
	int has_port;     /* port was explicit */
	const char *path; /* starts with '/', without the query */
	size_t path_len;
	const char *query; /* after '?', NULL when absent */
	size_t query_len;
};

/*
 * Parse a request target. connect is non-zero for CONNECT, which takes the
 * authority form only (with an explicit port). Refuses userinfo, fragments,
 * schemes other than http and https, empty hosts, ports 0 and > 65535, and
 * reg-names with bytes outside unreserved / sub-delims / pct-encoded.
 * Absolute-form "http://h" has path "/". Returns 0, or -1 with *why set to
 * a static phrase naming the fault.
 */
int uri_parse_target(const char *p, size_t len, int connect, struct uri *u,
    const char **why);
/* Parse a Host field value (host[:port]); form is set to URI_AUTHORITY. */
int uri_parse_host(const char *p, size_t len, struct uri *u, const char **why);
/* ASCII case-insensitive host equality. */
int uri_host_eq(const char *a, size_t alen, const char *b, size_t blen);

/*
 * Path checks (DESIGN.md "Paths"). path_check returns 0 when the path is
 * unambiguous, else -1 with *bad_off at the offending byte: "." or ".."
 * segments, an empty segment before the last, a backslash, a malformed
 * percent escape, or a percent-encoded unreserved character, '/', '\' or
 * control byte. Other escapes (%20, %3F, %C3%A9) pass.
 */
int path_check(const char *path, size_t len, size_t *bad_off);
/*
 * Non-zero when path starts with prefix at a segment boundary: the byte
 * after the prefix is the end, '/' or the prefix itself ends in '/'.
 */
int
path_has_prefix(const char *path, size_t len, const char *prefix, size_t plen);

/*
 * tlshello.c: the server_name a client's first bytes ask for, read before
 * sluice answers them (a transparent listener decides on it). buf holds
 * what the client sent so far: TLS handshake records carrying one
 * ClientHello (fragments are reassembled, at most TLS_HELLO_MAX bytes of
 * it). On TLS_HELLO_OK the host_name is in out, lower case and
 * NUL-terminated (cap: at least 254). Every other result sets *why (static
 * text): TLS_HELLO_MORE, the bytes end before the ClientHello does;
 * TLS_HELLO_NOT_TLS, the first byte is not a handshake record;
 * TLS_HELLO_NO_SNI, a well-formed ClientHello without a host_name;
 * TLS_HELLO_BAD, anything malformed (lengths that disagree, an extension
 * twice, two host names, a name that is not an LDH host name).
 */
#define TLS_HELLO_MAX 16384
enum tls_hello {
	TLS_HELLO_OK = 0,
	TLS_HELLO_MORE,
	TLS_HELLO_NOT_TLS,
	TLS_HELLO_NO_SNI,
	TLS_HELLO_BAD
};
enum tls_hello tls_hello_sni(const unsigned char *buf, size_t len, char *out,
    size_t cap, const char **why);

#endif
