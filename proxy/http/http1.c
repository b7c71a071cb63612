/*
 * The strict HTTP/1.1 head parser (RFC 9112 with DESIGN.md "HTTP/1.1
 * strictness"): request and status lines, header fields and the framing
 * decision. It refuses rather than normalizes, because a proxy that reads a
 * message differently from the upstream is a smuggling vector. Bodies
 * (chunked.c), request targets (uri.c) and paths (path.c) live elsewhere;
 * limits on the head's byte size are the caller's (it answers 431).
 *
 * Pure code (STYLE.md §7): no allocation, no global state, no recursion.
 */
#include <limits.h>
#include <string.h>

#include "proxy/util/ascii.h"
#include "proxy/http/http1.h"

/*
 * A hard ceiling for head lengths so that every return value fits in a
 * ssize_t; callers cap heads far lower (max_header_bytes).
 */
#define HEAD_MAX ((size_t)SSIZE_MAX)

static const char *const err_names[HTTP1_E__COUNT] = {
	[HTTP1_E_NONE] = "none",
	[HTTP1_E_BARE_CR] = "bare_cr",
	[HTTP1_E_BARE_LF] = "bare_lf",
	[HTTP1_E_OBS_FOLD] = "obs_fold",
	[HTTP1_E_WS_BEFORE_COLON] = "ws_before_colon",
	[HTTP1_E_METHOD] = "method",
	[HTTP1_E_TARGET] = "target",
	[HTTP1_E_VERSION] = "version",
	[HTTP1_E_REQUEST_LINE] = "request_line",
	[HTTP1_E_STATUS_LINE] = "status_line",
	[HTTP1_E_FIELD_NAME] = "field_name",
	[HTTP1_E_FIELD_VALUE] = "field_value",
	[HTTP1_E_TOO_MANY_HEADERS] = "too_many_headers",
	[HTTP1_E_CL_AND_TE] = "cl_and_te",
	[HTTP1_E_CL_MULTIPLE] = "cl_multiple",
	[HTTP1_E_CL_INVALID] = "cl_invalid",
	[HTTP1_E_TE_NOT_CHUNKED] = "te_not_chunked",
	[HTTP1_E_HOST_MISSING] = "host_missing",
	[HTTP1_E_HOST_MULTIPLE] = "host_multiple",
	[HTTP1_E_HOST_INVALID] = "host_invalid",
	[HTTP1_E_UPGRADE] = "upgrade",
	[HTTP1_E_CHUNK_SIZE] = "chunk_size",
	[HTTP1_E_CHUNK_EXT] = "chunk_ext",
	[HTTP1_E_CHUNK_CRLF] = "chunk_crlf",
	[HTTP1_E_TRAILER] = "trailer",
	[HTTP1_E_BODY_TOO_LARGE] = "body_too_large",
};

static int
is_ows(unsigned char c)
{
	return c == ' ' || c == '\t';
}

int
http1_case_eq(const char *a, const char *b, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (ascii_lower((unsigned char)a[i]) !=
		    ascii_lower((unsigned char)b[i]))
			return 0;
	return 1;
}

/*
 * Non-zero when the comma-separated list v[0..n) (RFC 9110 §5.6.1, elements
 * with OWS around them, empty elements ignored) has an element equal to
 * tok[0..tlen) without regard to case.
 */
static int
list_has(const char *v, size_t n, const char *tok, size_t tlen)
{
	size_t i = 0, s, e;

	while (i < n) {
		s = i;
		while (i < n && v[i] != ',')
			i++;
		e = i;
		while (s < e && is_ows((unsigned char)v[s]))
			s++;
		while (e > s && is_ows((unsigned char)v[e - 1]))
			e--;
		if (e > s && e - s == tlen && http1_case_eq(v + s, tok, tlen))
			return 1;
		i++; /* past the comma */
	}
	return 0;
}

/*
 * Finds the line that starts at off. Returns 1 with *eol at its CR and
 * *next past its LF, 0 when more bytes are needed, or -1 with *err set. A
 * line ends at the first CR or LF: an LF alone, or a CR followed by
 * anything but LF, is refused (RFC 9112 §2.2 lets a recipient accept a
 * bare LF; we do not, since the upstream may not agree).
 */
static int
next_line(const char *buf, size_t len, size_t off, size_t *eol, size_t *next,
    enum http1_err *err)
{
	const char *p = buf + off, *lf, *cr;
	size_t n = len - off;

	/*
	 * memchr, not a byte loop: heads are mostly long lines (tokens).
	 * Whichever of the first CR and the first LF comes first decides.
	 */
	lf = memchr(p, '\n', n);
	cr = memchr(p, '\r', lf != NULL ? (size_t)(lf - p) : n);
	if (cr == NULL) {
		if (lf == NULL)
			return 0;
		*err = HTTP1_E_BARE_LF;
		return -1;
	}
	if ((size_t)(cr - buf) + 1 == len)
		return 0;
	if (cr + 1 != lf) {
		*err = HTTP1_E_BARE_CR;
		return -1;
	}
	*eol = (size_t)(cr - buf);
	*next = *eol + 2;
	return 1;
}

/* Checks the version token, exactly "HTTP/1.0" or "HTTP/1.1". */
static int
parse_version(const char *v, size_t n, int *minor)
{
	if (n != 8 || memcmp(v, "HTTP/1.", 7) != 0 ||
	    (v[7] != '0' && v[7] != '1'))
		return -1;
	*minor = v[7] - '0';
	return 0;
}

/* "method SP request-target SP HTTP-version" with single spaces. */
static enum http1_err
parse_request_line(struct http1_msg *m, const char *line, size_t n)
{
	size_t i, t, v;
	unsigned char c;

	/* Leading empty lines are refused, not skipped (RFC 9112 §2.2). */
	if (n == 0)
		return HTTP1_E_REQUEST_LINE;
	for (i = 0; i < n && line[i] != ' '; i++)
		if (!ascii_is_tchar((unsigned char)line[i]))
			return HTTP1_E_METHOD;
	if (i == 0)
		return HTTP1_E_METHOD;
	if (i == n)
		return HTTP1_E_REQUEST_LINE;
	m->method = line;
	m->method_len = i;

	t = i + 1;
	for (i = t; i < n && line[i] != ' '; i++) {
		c = (unsigned char)line[i];
		if (c < 0x21 || c > 0x7e)
			return HTTP1_E_TARGET;
	}
	/* Two spaces in a row leave an empty target. */
	if (i == t)
		return HTTP1_E_TARGET;
	/* No version at all: HTTP/0.9 is not spoken here. */
	if (i == n)
		return HTTP1_E_REQUEST_LINE;
	m->target = line + t;
	m->target_len = i - t;

	v = i + 1;
	if (memchr(line + v, ' ', n - v) != NULL)
		return HTTP1_E_REQUEST_LINE;
	if (parse_version(line + v, n - v, &m->minor) == -1)
		return HTTP1_E_VERSION;
	return HTTP1_E_NONE;
}

/* "HTTP-version SP 3DIGIT SP reason-phrase"; the second SP is required. */
static enum http1_err
parse_status_line(struct http1_msg *m, const char *line, size_t n)
{
	size_t i, r;
	unsigned char c;
	int status;

	if (n == 0)
		return HTTP1_E_STATUS_LINE;
	for (i = 0; i < n && line[i] != ' '; i++)
		;
	if (parse_version(line, i, &m->minor) == -1)
		return HTTP1_E_VERSION;
	if (n - i < 5)
		return HTTP1_E_STATUS_LINE;
	status = 0;
	for (r = i + 1; r < i + 4; r++) {
		c = (unsigned char)line[r];
		if (c < '0' || c > '9')
			return HTTP1_E_STATUS_LINE;
		status = status * 10 + (c - '0');
	}
	if (line[r] != ' ' || status < 100 || status > 599)
		return HTTP1_E_STATUS_LINE;
	m->status = status;
	for (r++, i = r; i < n; i++) {
		c = (unsigned char)line[i];
		if (c != '\t' && c != ' ' && (c < 0x21 || c == 0x7f))
			return HTTP1_E_STATUS_LINE;
	}
	m->reason = line + r;
	m->reason_len = n - r;
	return HTTP1_E_NONE;
}

/*
 * One field line (not empty): "name: OWS value OWS". The value keeps
 * obs-text (bytes >= 0x80) but no CTL other than HTAB and no DEL.
 */
static enum http1_err
parse_field(struct http1_msg *m, const char *line, size_t n)
{
	struct http1_hdr *h;
	size_t i, j, v, e;
	unsigned char c;

	/* obs-fold is refused (RFC 9112 §5.2), also before the first field. */
	if (is_ows((unsigned char)line[0]))
		return HTTP1_E_OBS_FOLD;
	for (i = 0; i < n && ascii_is_tchar((unsigned char)line[i]); i++)
		;
	if (i == n)
		return HTTP1_E_FIELD_NAME;
	if (is_ows((unsigned char)line[i])) {
		/* RFC 9112 §5.1: whitespace before the colon is a 400. */
		for (j = i; j < n && is_ows((unsigned char)line[j]); j++)
			;
		return j < n && line[j] == ':' ? HTTP1_E_WS_BEFORE_COLON :
						 HTTP1_E_FIELD_NAME;
	}
	if (line[i] != ':' || i == 0)
		return HTTP1_E_FIELD_NAME;

	for (v = i + 1; v < n && is_ows((unsigned char)line[v]); v++)
		;
	for (e = n; e > v && is_ows((unsigned char)line[e - 1]); e--)
		;
	for (j = v; j < e; j++) {
		c = (unsigned char)line[j];
		if ((c < 0x20 && c != '\t') || c == 0x7f)
			return HTTP1_E_FIELD_VALUE;
	}
	if (m->hdrs == NULL || m->nhdrs >= m->max_hdrs)
		return HTTP1_E_TOO_MANY_HEADERS;
	h = &m->hdrs[m->nhdrs++];
	h->name = line;
	h->name_len = i;
	h->value = line + v;
	h->value_len = e - v;
	return HTTP1_E_NONE;
}

/*
 * A Content-Length value: 1*DIGIT up to 2^63-1. A list ("5, 5") is refused
 * as a repeated length even when its members agree (RFC 9112 §6.3 allows
 * collapsing them; a smuggler counts on someone doing so differently).
 */
static enum http1_err
parse_content_length(const char *v, size_t n, uint64_t *out)
{
	uint64_t x = 0;
	size_t i;
	unsigned d;

	if (memchr(v, ',', n) != NULL)
		return HTTP1_E_CL_MULTIPLE;
	if (n == 0)
		return HTTP1_E_CL_INVALID;
	for (i = 0; i < n; i++) {
		if (v[i] < '0' || v[i] > '9')
			return HTTP1_E_CL_INVALID;
		d = (unsigned)(v[i] - '0');
		if (x > (UINT64_C(0x7fffffffffffffff) - d) / 10)
			return HTTP1_E_CL_INVALID;
		x = x * 10 + d;
	}
	*out = x;
	return HTTP1_E_NONE;
}

/* What check_head() needs from the fields: the framing ones and Host. */
struct head_fields {
	const struct http1_hdr *cl, *te, *host; /* the last of each */
	size_t ncl, nte, nhost;
	int upgrade;
};

/* The flags a field other than the framing ones and Host sets, if any. */
static void
note_flags(struct http1_msg *m, const struct http1_hdr *h)
{
	if (http1_name_eq(h->name, h->name_len, "connection")) {
		if (list_has(h->value, h->value_len, "close", 5))
			m->flags |= HTTP1_F_CLOSE;
		if (list_has(h->value, h->value_len, "keep-alive", 10))
			m->flags |= HTTP1_F_KEEPALIVE;
	} else if (http1_name_eq(h->name, h->name_len, "expect")) {
		if (list_has(h->value, h->value_len, "100-continue", 12))
			m->flags |= HTTP1_F_EXPECT_100;
	} else if (http1_name_eq(h->name, h->name_len, "proxy-connection"))
		m->flags |= HTTP1_F_PROXY_CONN;
	else if (http1_name_eq(h->name, h->name_len, "te"))
		m->flags |= HTTP1_F_HAS_TE_HDR;
}

/* One pass over the fields: count and keep the framing ones, set flags. */
static void
scan_fields(struct http1_msg *m, struct head_fields *f)
{
	const struct http1_hdr *h;
	size_t i;

	memset(f, 0, sizeof(*f));
	for (i = 0; i < m->nhdrs; i++) {
		h = &m->hdrs[i];
		if (http1_name_eq(h->name, h->name_len, "content-length")) {
			f->ncl++;
			f->cl = h;
		} else if (http1_name_eq(h->name, h->name_len,
			       "transfer-encoding")) {
			f->nte++;
			f->te = h;
		} else if (http1_name_eq(h->name, h->name_len, "host")) {
			f->nhost++;
			f->host = h;
		} else if (http1_name_eq(h->name, h->name_len, "upgrade"))
			f->upgrade = 1;
		else
			note_flags(m, h);
	}
}

/* Upgrade, CL with TE, repeated CL, CL syntax, then TE, in that order. */
static enum http1_err
check_framing(struct http1_msg *m, const struct head_fields *f, int response)
{
	enum http1_err e;

	/* DESIGN.md: an Upgrade request is a 400; we never switch. */
	if (!response && f->upgrade)
		return HTTP1_E_UPGRADE;
	/* RFC 9112 §6.3 lets TE override CL; both at once is refused. */
	if (f->ncl > 0 && f->nte > 0)
		return HTTP1_E_CL_AND_TE;
	if (f->ncl > 1)
		return HTTP1_E_CL_MULTIPLE;
	if (f->cl != NULL &&
	    (e = parse_content_length(f->cl->value, f->cl->value_len,
		 &m->content_length)) != HTTP1_E_NONE)
		return e;
	/*
	 * Exactly one field whose value is "chunked": a list such as
	 * "gzip, chunked" is legal HTTP but gains us nothing and widens the
	 * room for disagreement. HTTP/1.0 has no Transfer-Encoding (RFC 9112
	 * §6.1: such framing is faulty).
	 */
	if (f->nte > 1 ||
	    (f->te != NULL &&
		(f->te->value_len != 7 ||
		    !http1_case_eq(f->te->value, "chunked", 7))))
		return HTTP1_E_TE_NOT_CHUNKED;
	if (f->te != NULL && m->minor == 0)
		return HTTP1_E_TE_NOT_CHUNKED;
	return HTTP1_E_NONE;
}

/* A request's Host (one, valid; none only in HTTP/1.0) and its body. */
static enum http1_err
check_request(struct http1_msg *m, const struct head_fields *f)
{
	if (f->nhost > 1)
		return HTTP1_E_HOST_MULTIPLE;
	/* RFC 9112 §3.2: HTTP/1.1 requests carry exactly one Host. */
	if (f->nhost == 0 && m->minor == 1)
		return HTTP1_E_HOST_MISSING;
	if (f->host != NULL) {
		struct uri u;
		const char *why;

		if (uri_parse_host(f->host->value, f->host->value_len, &u,
			&why) == -1)
			return HTTP1_E_HOST_INVALID;
		m->host = f->host->value;
		m->host_len = f->host->value_len;
	}
	if (f->te != NULL)
		m->body = HTTP1_BODY_CHUNKED;
	else if (f->cl != NULL)
		m->body = HTTP1_BODY_LENGTH;
	else
		m->body = HTTP1_BODY_NONE;
	return HTTP1_E_NONE;
}

/*
 * The framing and semantic checks once the whole head is known. The order
 * of the checks is fixed so that a message with several faults always
 * gets the same error: Upgrade, CL with TE, repeated CL, CL syntax, TE,
 * then Host.
 */
static enum http1_err
check_head(struct http1_msg *m, int response, int head_request)
{
	struct head_fields f;
	enum http1_err e;

	scan_fields(m, &f);
	if ((e = check_framing(m, &f, response)) != HTTP1_E_NONE)
		return e;
	if (!response)
		return check_request(m, &f);

	/* RFC 9112 §6.3 items 1 and 2 (CONNECT is the caller's concern). */
	if (head_request || m->status < 200 || m->status == 204 ||
	    m->status == 304)
		m->body = HTTP1_BODY_NONE;
	else if (f.te != NULL)
		m->body = HTTP1_BODY_CHUNKED;
	else if (f.cl != NULL)
		m->body = HTTP1_BODY_LENGTH;
	else
		m->body = HTTP1_BODY_EOF;
	return HTTP1_E_NONE;
}

/*
 * Parses buf[0..len) from its first byte. With first_only set it stops
 * after the start line (returning -2 when that line is fine). Every
 * decision depends only on the bytes before the point where it is made and
 * running out of bytes always gives -2, so the result for a prefix of a
 * message is either -2 or the result for the whole message.
 */
static ssize_t
parse_all(struct http1_msg *m, const char *buf, size_t len, int response,
    int head_request, int first_only)
{
	size_t off, eol = 0, next = 0;
	enum http1_err e = HTTP1_E_NONE;
	int r;

	if ((r = next_line(buf, len, 0, &eol, &next, &e)) != 1)
		goto out;
	e = response ? parse_status_line(m, buf, eol) :
		       parse_request_line(m, buf, eol);
	if (e != HTTP1_E_NONE || first_only)
		goto out;
	for (off = next;; off = next) {
		if ((r = next_line(buf, len, off, &eol, &next, &e)) != 1)
			goto out;
		if (eol == off)
			break;
		if ((e = parse_field(m, buf + off, eol - off)) != HTTP1_E_NONE)
			goto out;
	}
	if ((e = check_head(m, response, head_request)) != HTTP1_E_NONE)
		goto out;
	return (ssize_t)next;
out:
	m->err = e;
	return e != HTTP1_E_NONE ? -1 : -2;
}

/*
 * Looks at the bytes new since the last call for the only events after
 * which the whole head can be judged: the empty line that ends it (CRLF
 * CRLF) or a bare CR or LF. Sets *saw_lf when a line ended, because the
 * start line alone can then be checked (so that garbage is refused early,
 * not after max_header_bytes).
 */
static int
scan_new(const char *buf, size_t len, size_t last_len, int *saw_lf)
{
	size_t start = last_len > 0 ? last_len - 1 : 0, i;
	const char *p;

	if (start >= len)
		return 0;
	/* A CR followed by anything but LF. */
	for (i = start; (p = memchr(buf + i, '\r', len - i)) != NULL;) {
		i = (size_t)(p - buf);
		if (i + 1 < len && buf[i + 1] != '\n')
			return 1;
		i++;
	}
	/* An LF: the end of a line, a bare LF, or the empty line. */
	for (i = start; (p = memchr(buf + i, '\n', len - i)) != NULL;) {
		i = (size_t)(p - buf);
		*saw_lf = 1;
		if (i == 0 || buf[i - 1] != '\r')
			return 1;
		if (i >= 3 && buf[i - 2] == '\n' && buf[i - 3] == '\r')
			return 1;
		i++;
	}
	return 0;
}

/*
 * The incremental driver shared by requests and responses. The parser has
 * no state of its own between calls (the buffer may move, as evbuffer
 * pullup memory does), so it reparses from the start, but only when the new
 * bytes hold an event that can change the answer: work stays O(len) per
 * call and, byte by byte, O(len) in total except for one start-line check
 * per line end.
 */
static ssize_t
parse_head(struct http1_msg *m, const char *buf, size_t len, size_t last_len,
    int response, int head_request)
{
	struct http1_hdr *hdrs = m->hdrs;
	size_t max_hdrs = m->max_hdrs;
	int decisive, saw_lf = 0;

	if (len > HEAD_MAX)
		len = HEAD_MAX;
	if (last_len > len)
		last_len = 0;
	memset(m, 0, sizeof(*m));
	m->hdrs = hdrs;
	m->max_hdrs = max_hdrs;
	decisive = scan_new(buf, len, last_len, &saw_lf);
	if (!decisive && !saw_lf)
		return -2;
	return parse_all(m, buf, len, response, head_request, !decisive);
}

/*
 * Parses a request head. Returns the head length (through the empty line),
 * -2 while it is incomplete, or -1 with m->err. Every field of m but hdrs
 * and max_hdrs is rewritten on each call.
 */
ssize_t
http1_parse_request(struct http1_msg *m, const char *buf, size_t len,
    size_t last_len)
{
	return parse_head(m, buf, len, last_len, 0, 0);
}

/*
 * Parses a response head, as http1_parse_request. head_request non-zero
 * means the request was HEAD, so the body is empty whatever the fields say.
 */
ssize_t
http1_parse_response(struct http1_msg *m, const char *buf, size_t len,
    size_t last_len, int head_request)
{
	return parse_head(m, buf, len, last_len, 1, head_request);
}

/* Returns 431 for too many fields, 413 for a large body, else 400. */
int
http1_err_status(enum http1_err e)
{
	switch (e) {
	case HTTP1_E_TOO_MANY_HEADERS:
		return 431;
	case HTTP1_E_BODY_TOO_LARGE:
		return 413;
	default:
		return 400;
	}
}

/* Returns a static lower-case name, "unknown" for a value out of range. */
const char *
http1_err_name(enum http1_err e)
{
	if ((unsigned)e >= HTTP1_E__COUNT || err_names[e] == NULL)
		return "unknown";
	return err_names[e];
}

/* Non-zero when name[0..len) equals the NUL-terminated lit, any case. */
int
http1_name_eq(const char *name, size_t len, const char *lit)
{
	return strlen(lit) == len && http1_case_eq(name, lit, len);
}

/* Returns the index of the first field named lit at or after from, or -1. */
ssize_t
http1_find(const struct http1_msg *m, const char *lit, size_t from)
{
	size_t i;

	for (i = from; i < m->nhdrs; i++)
		if (http1_name_eq(m->hdrs[i].name, m->hdrs[i].name_len, lit))
			return (ssize_t)i;
	return -1;
}

/*
 * Non-zero when any Connection field lists name[0..len) as one of its
 * comma-separated tokens (case-insensitive, OWS around tokens ignored).
 */
int
http1_connection_lists(const struct http1_msg *m, const char *name, size_t len)
{
	ssize_t i = -1;

	while ((i = http1_find(m, "connection", (size_t)(i + 1))) != -1)
		if (list_has(m->hdrs[i].value, m->hdrs[i].value_len, name, len))
			return 1;
	return 0;
}
