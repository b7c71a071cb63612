/*
 * The properties of a rewritten request head (proxy/http/rewrite.c), and
 * of the re-chunker's framing, checked from the outside: shared by
 * tests/unit/test_rewrite.c and tests/fuzz/fuzz_rewrite.c. Each returns
 * NULL when the property holds, else a static phrase naming it.
 */
#ifndef FUZZ_REWRITE_CHECK_H
#define FUZZ_REWRITE_CHECK_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "proxy/http/http1.h"
#include "proxy/http/rewrite.h"

#define RWC_MAX_HDRS 4096

/* Hop-by-hop names, listed here again: the check must not trust rewrite.c. */
static int
rwc_fixed_hop(const char *name, size_t len)
{
	static const char *const hop[] = { "connection", "keep-alive",
		"proxy-connection", "proxy-authenticate", "proxy-authorization",
		"te", "trailer", "transfer-encoding", "upgrade" };
	size_t i;

	for (i = 0; i < sizeof(hop) / sizeof(hop[0]); i++)
		if (strlen(hop[i]) == len && http1_name_eq(name, len, hop[i]))
			return 1;
	return 0;
}

static int
rwc_dash_eq(const char *a, size_t alen, const char *b, size_t blen)
{
	size_t i;

	if (alen != blen)
		return 0;
	for (i = 0; i < alen; i++) {
		int x = (unsigned char)a[i], y = (unsigned char)b[i];

		x = x == '_' ? '-' : (x >= 'A' && x <= 'Z') ? x + 32 : x;
		y = y == '_' ? '-' : (y >= 'A' && y <= 'Z') ? y + 32 : y;
		if (x != y)
			return 0;
	}
	return 1;
}

static int
rwc_span_eq(const char *a, size_t alen, const char *b, size_t blen)
{
	return alen == blen && (alen == 0 || memcmp(a, b, alen) == 0);
}

/* The client's field f of m goes upstream (by this file's reading). */
static int
rwc_client_kept(const struct http1_msg *m, const struct http1_hdr *f,
    const struct rw_upstream *up)
{
	size_t j;

	if (http1_name_eq(f->name, f->name_len, "host") ||
	    http1_name_eq(f->name, f->name_len, "content-length") ||
	    rwc_fixed_hop(f->name, f->name_len) ||
	    http1_connection_lists(m, f->name, f->name_len))
		return 0;
	for (j = 0; j < up->ninject; j++)
		if (rwc_dash_eq(f->name, f->name_len, up->inject[j].name,
			up->inject[j].name_len))
			return 0;
	return !(up->drop_authorization &&
	    http1_name_eq(f->name, f->name_len, "authorization"));
}

/* The target: the upstream's path, the client's path and query. */
static const char *
rwc_target(const struct http1_msg *out, const struct uri *u,
    const struct rw_upstream *up)
{
	size_t n = up->path_len + u->path_len;

	if (u->query != NULL)
		n += 1 + u->query_len;
	if (out->target_len != n ||
	    memcmp(out->target, up->path, up->path_len) != 0 ||
	    memcmp(out->target + up->path_len, u->path, u->path_len) != 0)
		return "target is not the upstream path and the client's";
	if (u->query != NULL &&
	    (out->target[up->path_len + u->path_len] != '?' ||
		memcmp(out->target + up->path_len + u->path_len + 1, u->query,
		    u->query_len) != 0))
		return "query changed";
	return NULL;
}

/* Each injected field exactly once, with its value. */
static const char *
rwc_injected(const struct http1_msg *out, const struct rw_upstream *up)
{
	size_t i, j, seen;

	for (j = 0; j < up->ninject; j++) {
		for (i = 0, seen = 0; i < out->nhdrs; i++) {
			const struct http1_hdr *h = &out->hdrs[i];

			if (!rwc_dash_eq(h->name, h->name_len,
				up->inject[j].name, up->inject[j].name_len))
				continue;
			if (!rwc_span_eq(h->value, h->value_len,
				up->inject[j].value, up->inject[j].value_len))
				return "an injected field's name with another "
				       "value";
			seen++;
		}
		if (seen != 1)
			return "an injected field not exactly once";
	}
	return NULL;
}

/* Framing as the parser decided it for the client's request. */
static const char *
rwc_framing(const struct http1_msg *m, const struct http1_msg *out)
{
	ssize_t cl = http1_find(out, "content-length", 0);
	ssize_t te = http1_find(out, "transfer-encoding", 0);

	if (out->body != m->body)
		return "framing changed";
	switch (m->body) {
	case HTTP1_BODY_LENGTH:
		if (cl < 0 || te >= 0 ||
		    out->content_length != m->content_length)
			return "Content-Length missing or changed";
		break;
	case HTTP1_BODY_CHUNKED:
		if (te < 0 || cl >= 0 ||
		    http1_find(out, "transfer-encoding", (size_t)te + 1) >= 0)
			return "Transfer-Encoding: chunked missing";
		break;
	default:
		if (cl >= 0 || te >= 0)
			return "framing fields for a request without a body";
		break;
	}
	return NULL;
}

/*
 * The fields of out, in order: Host (the upstream authority), the client
 * fields that go on (unchanged, in their order), the injected fields,
 * then the framing field if any; no hop-by-hop field but sluice's own
 * Transfer-Encoding, no Proxy-Authorization.
 */
static const char *
rwc_fields(const struct http1_msg *m, const struct http1_msg *out,
    const struct rw_upstream *up)
{
	const struct http1_hdr *h;
	size_t i, j, k = 0, want;

	if (out->nhdrs == 0 ||
	    !http1_name_eq(out->hdrs[0].name, out->hdrs[0].name_len, "host") ||
	    !rwc_span_eq(out->hdrs[0].value, out->hdrs[0].value_len,
		up->authority, up->authority_len))
		return "the first field is not Host: the upstream authority";
	for (i = 0; i < m->nhdrs; i++) {
		const struct http1_hdr *f = &m->hdrs[i];

		if (!rwc_client_kept(m, f, up))
			continue;
		if (1 + k >= out->nhdrs)
			return "a client field was dropped";
		h = &out->hdrs[1 + k++];
		if (!rwc_span_eq(h->name, h->name_len, f->name, f->name_len) ||
		    !rwc_span_eq(h->value, h->value_len, f->value,
			f->value_len))
			return "a client field was dropped or changed";
	}
	want = 1 + k + up->ninject +
	    (m->body == HTTP1_BODY_LENGTH || m->body == HTTP1_BODY_CHUNKED);
	if (out->nhdrs != want)
		return "fields beyond Host, the client's, injected and framing";
	for (j = 0; j < up->ninject; j++) {
		h = &out->hdrs[1 + k + j];
		if (!rwc_span_eq(h->name, h->name_len, up->inject[j].name,
			up->inject[j].name_len))
			return "an injected field is not where it belongs";
	}
	for (i = 0; i < out->nhdrs; i++) {
		h = &out->hdrs[i];
		if (i > 0 && http1_name_eq(h->name, h->name_len, "host"))
			return "not exactly one Host";
		if (http1_name_eq(h->name, h->name_len, "proxy-authorization"))
			return "Proxy-Authorization went upstream";
		if (rwc_fixed_hop(h->name, h->name_len) &&
		    !(i == out->nhdrs - 1 && m->body == HTTP1_BODY_CHUNKED))
			return "a hop-by-hop field went upstream";
	}
	for (i = 1; up->drop_authorization && i <= k; i++)
		if (http1_name_eq(out->hdrs[i].name, out->hdrs[i].name_len,
			"authorization"))
			return "an Authorization that is not the token went "
			       "upstream";
	return NULL;
}

/*
 * out[0..len) is what rw_request_head() wrote for m (target u) sent to
 * up. hdrs: RWC_MAX_HDRS entries of scratch.
 */
static const char *
rwc_check_head(const struct http1_msg *m, const struct uri *u,
    const struct rw_upstream *up, const char *buf, size_t len,
    struct http1_hdr *hdrs)
{
	struct http1_msg out;
	const char *why;
	ssize_t rc;

	memset(&out, 0, sizeof(out));
	out.hdrs = hdrs;
	out.max_hdrs = RWC_MAX_HDRS;
	rc = http1_parse_request(&out, buf, len, 0);
	if (rc < 0 || (size_t)rc != len)
		return "output does not re-parse as one whole request head";
	if (out.minor != 1)
		return "output is not HTTP/1.1";
	if (!rwc_span_eq(out.method, out.method_len, m->method, m->method_len))
		return "method changed";
	if ((why = rwc_target(&out, u, up)) != NULL ||
	    (why = rwc_fields(m, &out, up)) != NULL ||
	    (why = rwc_injected(&out, up)) != NULL ||
	    (why = rwc_framing(m, &out)) != NULL)
		return why;
	if (out.host == NULL ||
	    !rwc_span_eq(out.host, out.host_len, up->authority,
		up->authority_len))
		return "parsed Host is not the upstream authority";
	return NULL;
}

/*
 * Re-chunk payload[0..len) cut into runs at cuts[0..ncuts) (increasing
 * offsets) into out[0..cap) with rewrite.c's framing; returns its length,
 * or 0 when cap is too small.
 */
static size_t
rwc_rechunk(const char *payload, size_t len, const size_t *cuts, size_t ncuts,
    char *out, size_t cap)
{
	static const char tail[2] = RW_CHUNK_TAIL, last[5] = RW_CHUNK_LAST;
	size_t at = 0, prev = 0, i, n;

	for (i = 0; i <= ncuts; i++) {
		size_t end = i < ncuts ? cuts[i] : len;

		if (end <= prev || end > len)
			continue;
		n = end - prev;
		if (at + RW_CHUNK_LINE_MAX + n + 2 > cap)
			return 0;
		at += rw_chunk_line(out + at, n);
		memcpy(out + at, payload + prev, n);
		at += n;
		memcpy(out + at, tail, sizeof(tail));
		at += 2;
		prev = end;
	}
	if (at + 5 > cap)
		return 0;
	memcpy(out + at, last, sizeof(last));
	return at + 5;
}

/*
 * Decode body[0..len) through the chunked decoder, fed in pieces of the
 * sizes step[] gives in turn (nstep > 0), into payload (cap bytes);
 * *plen is the payload's length. NULL when it decodes whole, exactly.
 */
static const char *
rwc_dechunk(const char *body, size_t len, const size_t *step, size_t nstep,
    char *payload, size_t cap, size_t *plen)
{
	struct http1_chunked ck;
	size_t at = 0, k = 0, data, piece;
	ssize_t used;

	http1_chunked_init(&ck);
	*plen = 0;
	while (at < len && !http1_chunked_done(&ck)) {
		piece = step[k++ % nstep];
		if (piece == 0 || piece > len - at)
			piece = len - at;
		used = http1_chunked_step(&ck, body + at, piece, &data);
		if (used <= 0)
			return "the chunked decoder refused the framing";
		if (data > 0) {
			if (*plen + data > cap)
				return "more payload than was sent";
			memcpy(payload + *plen, body + at, data);
			*plen += data;
		}
		at += (size_t)used;
	}
	if (!http1_chunked_done(&ck) || at != len)
		return "the body does not end where its framing does";
	return NULL;
}

#endif
