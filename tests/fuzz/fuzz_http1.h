/*
 * The invariants shared by fuzz_http1_request and fuzz_http1_response: the
 * input is parsed whole, one byte at a time, split in two and, when it
 * holds a head, as exactly that head; every way must agree, every slice
 * must lie inside the input and a successful head must obey the rules
 * independently of how the parser checked them. A violation aborts.
 */
#ifndef SLUICE_FUZZ_HTTP1_H
#define SLUICE_FUZZ_HTTP1_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/http/http1.h"

#define FZ_MAXH         16    /* header array length */
#define FZ_BYTEWISE_MAX 16384 /* longest input fed byte by byte */

/* Everything a parse produced, slices as offsets into the input. */
struct fz_summary {
	ssize_t r;
	enum http1_err err;
	size_t method[2], target[2], reason[2], host[2];
	int status, minor;
	size_t nhdrs;
	size_t hdr[FZ_MAXH][4];
	enum http1_body body;
	uint64_t cl;
	unsigned flags;
};

static void
fz_check(int ok)
{
	if (!ok)
		abort();
}

/* Offset of p[0..n) in base[0..len); aborts when it is outside. */
static size_t
fz_off(const char *base, size_t len, const char *p, size_t n)
{
	if (p == NULL) {
		fz_check(n == 0);
		return (size_t)-1;
	}
	fz_check(p >= base && p <= base + len);
	fz_check(n <= len - (size_t)(p - base));
	return (size_t)(p - base);
}

static int
fz_tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9') ||
	    (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/*
 * Checks the result of one parse of base[0..len) and fills s. A head is
 * re-checked from scratch: CRLF line ends only, tchar names, values
 * without CTL or surrounding OWS.
 */
static void
fz_summarize(struct fz_summary *s, const struct http1_msg *m, const char *base,
    size_t len, ssize_t r, int response)
{
	size_t i, j;

	memset(s, 0, sizeof(*s));
	s->r = r;
	s->err = m->err;
	fz_check(r == -1 || r == -2 || (r > 0 && (size_t)r <= len));
	if (r == -1) {
		fz_check(m->err > HTTP1_E_NONE && m->err < HTTP1_E__COUNT);
		fz_check(http1_err_status(m->err) == 400 ||
		    http1_err_status(m->err) == 431);
		return;
	}
	fz_check(m->err == HTTP1_E_NONE);
	if (r == -2)
		return;

	len = (size_t)r;
	fz_check(len >= 4 && memcmp(base + len - 4, "\r\n\r\n", 4) == 0);
	for (i = 0; i < len; i++) {
		if (base[i] == '\n')
			fz_check(i > 0 && base[i - 1] == '\r');
		if (base[i] == '\r')
			fz_check(i + 1 < len && base[i + 1] == '\n');
	}
	s->method[0] = fz_off(base, len, m->method, m->method_len);
	s->method[1] = m->method_len;
	s->target[0] = fz_off(base, len, m->target, m->target_len);
	s->target[1] = m->target_len;
	s->reason[0] = fz_off(base, len, m->reason, m->reason_len);
	s->reason[1] = m->reason_len;
	s->host[0] = fz_off(base, len, m->host, m->host_len);
	s->host[1] = m->host_len;
	s->status = m->status;
	s->minor = m->minor;
	s->nhdrs = m->nhdrs;
	s->body = m->body;
	s->cl = m->content_length;
	s->flags = m->flags;
	fz_check(m->minor == 0 || m->minor == 1);
	if (response) {
		fz_check(m->status >= 100 && m->status <= 599);
		fz_check(m->method == NULL && m->host == NULL);
	} else {
		fz_check(m->method_len > 0 && m->target_len > 0);
		fz_check(m->body != HTTP1_BODY_EOF);
		if (m->minor == 1)
			fz_check(m->host != NULL);
		for (i = 0; i < m->method_len; i++)
			fz_check(fz_tchar((unsigned char)m->method[i]));
		for (i = 0; i < m->target_len; i++)
			fz_check(m->target[i] > 0x20 && m->target[i] < 0x7f);
	}
	if (m->body == HTTP1_BODY_LENGTH)
		fz_check(m->content_length <= INT64_MAX);
	fz_check(m->nhdrs <= FZ_MAXH);
	for (i = 0; i < m->nhdrs; i++) {
		const struct http1_hdr *h = &m->hdrs[i];

		s->hdr[i][0] = fz_off(base, len, h->name, h->name_len);
		s->hdr[i][1] = h->name_len;
		s->hdr[i][2] = fz_off(base, len, h->value, h->value_len);
		s->hdr[i][3] = h->value_len;
		fz_check(h->name_len > 0);
		for (j = 0; j < h->name_len; j++)
			fz_check(fz_tchar((unsigned char)h->name[j]));
		for (j = 0; j < h->value_len; j++) {
			unsigned char c = (unsigned char)h->value[j];

			fz_check(c == '\t' || (c >= 0x20 && c != 0x7f));
		}
		if (h->value_len > 0) {
			fz_check(h->value[0] != ' ' && h->value[0] != '\t');
			fz_check(h->value[h->value_len - 1] != ' ' &&
			    h->value[h->value_len - 1] != '\t');
		}
		if (http1_name_eq(h->name, h->name_len, "upgrade"))
			fz_check(response);
	}
	/* Both framing fields at once never pass. */
	fz_check(http1_find(m, "content-length", 0) == -1 ||
	    http1_find(m, "transfer-encoding", 0) == -1);
}

static ssize_t
fz_parse(struct http1_msg *m, struct http1_hdr *hdrs, size_t maxh,
    const char *buf, size_t len, size_t last, int response, int head)
{
	if (last == 0) {
		memset(m, 0, sizeof(*m));
		m->hdrs = hdrs;
		m->max_hdrs = maxh;
	}
	if (response)
		return http1_parse_response(m, buf, len, last, head);
	return http1_parse_request(m, buf, len, last);
}

static void
fz_same(const struct fz_summary *a, const struct fz_summary *b)
{
	fz_check(memcmp(a, b, sizeof(*a)) == 0);
}

static void
fz_http1(const uint8_t *data, size_t size, int response, int head)
{
	static struct fz_summary whole, other;
	struct http1_hdr hdrs[FZ_MAXH];
	struct http1_msg m;
	const char *buf = (const char *)data;
	ssize_t r;
	size_t k, s;
	char *copy;

	r = fz_parse(&m, hdrs, FZ_MAXH, buf, size, 0, response, head);
	fz_summarize(&whole, &m, buf, size, r, response);

	/* One byte at a time: the first answer other than -2 is the same. */
	if (size <= FZ_BYTEWISE_MAX) {
		r = -2;
		memset(&m, 0, sizeof(m));
		for (k = 1; k <= size && r == -2; k++)
			r = fz_parse(&m, hdrs, FZ_MAXH, buf, k, k - 1, response,
			    head);
		k--;
		if (whole.r >= 0)
			fz_check(k == (size_t)whole.r);
		fz_summarize(&other, &m, buf, k, r, response);
		fz_same(&whole, &other);
	}

	/* Split in two, the first part parsed from scratch. */
	s = size / 3;
	r = fz_parse(&m, hdrs, FZ_MAXH, buf, s, 0, response, head);
	if (whole.r >= 0 && s < (size_t)whole.r)
		fz_check(r == -2);
	if (r == -2)
		r = fz_parse(&m, hdrs, FZ_MAXH, buf, size, s, response, head);
	fz_summarize(&other, &m, buf, size, r, response);
	fz_same(&whole, &other);

	if (whole.r < 0)
		return;
	/* The head alone, in an exact-size copy: same answer. */
	if ((copy = malloc((size_t)whole.r)) == NULL)
		abort();
	memcpy(copy, buf, (size_t)whole.r);
	r = fz_parse(&m, hdrs, FZ_MAXH, copy, (size_t)whole.r, 0, response,
	    head);
	fz_check(r == whole.r && m.nhdrs == whole.nhdrs &&
	    m.body == whole.body && m.flags == whole.flags);
	/* One field less room: the last field is one too many. */
	if (whole.nhdrs > 0) {
		r = fz_parse(&m, hdrs, whole.nhdrs - 1, copy, (size_t)whole.r,
		    0, response, head);
		fz_check(r == -1 && m.err == HTTP1_E_TOO_MANY_HEADERS);
	}
	free(copy);
}

#endif
