/*
 * The request head sluice sends upstream, decided from the parsed client
 * request (DESIGN.md "Headers"), and the framing lines sluice writes
 * itself. Pure code (STYLE.md §7): no allocation, no global state.
 */
#include <string.h>

#include "proxy/http/rewrite.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

int
rw_hop_by_hop(const struct http1_msg *m, const struct http1_hdr *h,
    int has_connection)
{
	/* By length, so the scan stops early. */
	static const struct {
		const char *name;
		size_t len;
	} names[] = {
		{ "te", 2 },
		{ "trailer", 7 },
		{ "upgrade", 7 },
		{ "connection", 10 },
		{ "keep-alive", 10 },
		{ "proxy-connection", 16 },
		{ "transfer-encoding", 17 },
		{ "proxy-authenticate", 18 },
		{ "proxy-authorization", 19 },
	};
	size_t i;

	for (i = 0; i < NELEM(names) && names[i].len <= h->name_len; i++)
		if (names[i].len == h->name_len &&
		    http1_name_eq(h->name, h->name_len, names[i].name))
			return 1;
	/* Only a message with a Connection field has listed names. */
	return has_connection &&
	    http1_connection_lists(m, h->name, h->name_len);
}

int
rw_name_eq_dash(const char *a, size_t alen, const char *b, size_t blen)
{
	size_t i;

	if (alen != blen)
		return 0;
	for (i = 0; i < alen; i++) {
		unsigned char x = (unsigned char)a[i], y = (unsigned char)b[i];

		if (x == '_')
			x = '-';
		if (y == '_')
			y = '-';
		if (x >= 'A' && x <= 'Z')
			x = (unsigned char)(x + 32);
		if (y >= 'A' && y <= 'Z')
			y = (unsigned char)(y + 32);
		if (x != y)
			return 0;
	}
	return 1;
}

enum rw_fate
rw_request_field(const struct http1_msg *m, const struct http1_hdr *h,
    int has_connection, const struct rw_upstream *up)
{
	size_t j;

	/* Framing is written from what the parser decided. */
	if (http1_name_eq(h->name, h->name_len, "host") ||
	    http1_name_eq(h->name, h->name_len, "content-length"))
		return RW_FRAMING;
	if (rw_hop_by_hop(m, h, has_connection))
		return RW_HOP;
	/*
	 * The sandbox can neither forge nor observe injected fields, also
	 * not under a name that CGI-style upstreams would read as the same
	 * ("X_Cred" for "X-Cred").
	 */
	for (j = 0; j < up->ninject; j++)
		if (rw_name_eq_dash(h->name, h->name_len, up->inject[j].name,
			up->inject[j].name_len))
			return RW_INJECTED;
	/*
	 * Authorization goes upstream only as the verified token: any other
	 * value (another run's token, say) would be charged to a run sluice
	 * never checked.
	 */
	if (up->drop_authorization &&
	    http1_name_eq(h->name, h->name_len, "authorization"))
		return RW_AUTH;
	/* strip_token: the upstream never sees the run token. */
	if (up->drop_carrier != NULL &&
	    http1_name_eq(h->name, h->name_len, up->drop_carrier) &&
	    h->name_len == up->drop_carrier_len)
		return RW_CARRIER;
	return RW_KEEP;
}

int
rw_connection_protected(const struct http1_msg *m)
{
	static const char *const names[] = { "content-length",
		"transfer-encoding", "host", "authorization" };
	size_t i;

	for (i = 0; i < NELEM(names); i++)
		if (http1_connection_lists(m, names[i], strlen(names[i])))
			return 1;
	return 0;
}

size_t
rw_content_length(char *buf, uint64_t n)
{
	static const char name[16] = "Content-Length: "; /* no NUL */
	char digits[24];
	size_t i = sizeof(digits), len;

	do {
		digits[--i] = (char)('0' + n % 10);
		n /= 10;
	} while (n != 0);
	len = sizeof(digits) - i;
	memcpy(buf, name, sizeof(name));
	memcpy(buf + sizeof(name), digits + i, len);
	buf[sizeof(name) + len] = '\r';
	buf[sizeof(name) + len + 1] = '\n';
	return sizeof(name) + len + 2;
}

size_t
rw_chunk_line(char *buf, size_t n)
{
	char tmp[RW_CHUNK_LINE_MAX];
	size_t i = sizeof(tmp);

	tmp[--i] = '\n';
	tmp[--i] = '\r';
	do {
		tmp[--i] = "0123456789abcdef"[n & 0xf];
		n >>= 4;
	} while (n != 0);
	memcpy(buf, tmp + i, sizeof(tmp) - i);
	return sizeof(tmp) - i;
}

/* Where a head goes: counted only while buf is NULL. */
struct wr {
	char *buf;
	size_t len;
};

static void
put(struct wr *w, const void *p, size_t n)
{
	if (w->buf != NULL && n > 0)
		memcpy(w->buf + w->len, p, n);
	w->len += n;
}

static void
put_field(struct wr *w, const char *name, size_t nlen, const char *value,
    size_t vlen)
{
	put(w, name, nlen);
	put(w, ": ", 2);
	put(w, value, vlen);
	put(w, "\r\n", 2);
}

static void
write_head(struct wr *w, const struct http1_msg *m, const struct uri *u,
    const struct rw_upstream *up, int *auth_removed)
{
	int has_conn = http1_find(m, "connection", 0) != -1;
	char cl[RW_CL_LINE_MAX];
	size_t i;

	put(w, m->method, m->method_len);
	put(w, " ", 1);
	put(w, up->path, up->path_len);
	put(w, u->path, u->path_len);
	if (u->query != NULL) {
		put(w, "?", 1);
		put(w, u->query, u->query_len);
	}
	put(w, " HTTP/1.1\r\n", 11);
	put_field(w, "Host", 4, up->authority, up->authority_len);
	for (i = 0; i < m->nhdrs; i++) {
		const struct http1_hdr *h = &m->hdrs[i];

		switch (rw_request_field(m, h, has_conn, up)) {
		case RW_KEEP:
			put_field(w, h->name, h->name_len, h->value,
			    h->value_len);
			break;
		case RW_AUTH:
			if (auth_removed != NULL)
				*auth_removed = 1;
			break;
		default:
			break;
		}
	}
	for (i = 0; i < up->ninject; i++)
		put_field(w, up->inject[i].name, up->inject[i].name_len,
		    up->inject[i].value, up->inject[i].value_len);
	if (m->body == HTTP1_BODY_CHUNKED)
		put(w, "Transfer-Encoding: chunked\r\n", 28);
	else if (m->body == HTTP1_BODY_LENGTH)
		put(w, cl, rw_content_length(cl, m->content_length));
	put(w, "\r\n", 2);
}

size_t
rw_request_head(const struct http1_msg *m, const struct uri *u,
    const struct rw_upstream *up, char *buf, size_t cap, int *auth_removed)
{
	struct wr w = { NULL, 0 };

	write_head(&w, m, u, up, NULL);
	if (w.len > cap || buf == NULL)
		return w.len;
	w.buf = buf;
	w.len = 0;
	write_head(&w, m, u, up, auth_removed);
	return w.len;
}
