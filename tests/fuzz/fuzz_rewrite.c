/*
 * libFuzzer target for proxy/http/rewrite.c. Byte 0 picks the upstream
 * (authority, path, injected fields, whether Authorization is dropped),
 * byte 1 seeds the cuts of the re-chunker; the rest is a request head and
 * body bytes. A head the strict parser takes (and the relay would send
 * on: not CONNECT, a Connection that names no protected field) is
 * rewritten, and the result must re-parse and keep every property of
 * fuzz_rewrite_check.h; the body bytes, re-chunked in random runs, must
 * decode to themselves. A violation aborts.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/http/http1.h"
#include "proxy/http/rewrite.h"
#include "tests/fuzz/fuzz_rewrite_check.h"

#define NELEM(a)    (sizeof(a) / sizeof((a)[0]))
#define FZ_BODY_MAX 4096
#define FZ_HEAD_MAX (1 << 17)

int LLVMFuzzerTestOneInput(const uint8_t *, size_t);

static struct http1_hdr hdrs_in[RWC_MAX_HDRS], hdrs_out[RWC_MAX_HDRS];
static char out[FZ_HEAD_MAX];
static char body[3 * FZ_BODY_MAX + 64], back[FZ_BODY_MAX];

/* Names a policy may inject: tokens, none of them equal up to '_'. */
static const struct rw_field pool[] = {
	{ "X-Api-Key", 9, "k-1", 3 },
	{ "authorization", 13, "Bearer upstream", 15 },
	{ "X_Org", 5, "org 7", 5 },
	{ "Cookie", 6, "a=b; c", 6 },
};
static const char *const authorities[] = { "api.example", "u:8443",
	"[2001:2::1]:443", "198.18.0.2" };
static const char *const paths[] = { "", "/base" };

static void
check(const char *why)
{
	if (why != NULL)
		abort();
}

static void
fz_head(const struct http1_msg *m, const struct rw_upstream *up)
{
	const char *why = "";
	struct uri u;
	size_t need, n;

	if (http1_name_eq(m->method, m->method_len, "CONNECT") &&
	    m->method_len == 7)
		return;
	if (rw_connection_protected(m))
		return; /* refused (400) before any rewrite */
	memset(&u, 0, sizeof(u));
	if (uri_parse_target(m->target, m->target_len, 0, &u, &why) == -1 ||
	    u.form == URI_ASTERISK || u.form == URI_AUTHORITY)
		return;
	need = rw_request_head(m, &u, up, NULL, 0, NULL);
	if (need > sizeof(out))
		return;
	n = rw_request_head(m, &u, up, out, sizeof(out), NULL);
	if (n != need)
		abort();
	check(rwc_check_head(m, &u, up, out, n, hdrs_out));
}

static void
fz_rechunk(const char *p, size_t len, unsigned seed)
{
	size_t cuts[32], steps[8], i, blen, plen;
	uint32_t x = seed * 2654435761u + 1;

	if (len > FZ_BODY_MAX)
		len = FZ_BODY_MAX;
	for (i = 0; i < NELEM(cuts); i++) {
		x = x * 1103515245u + 12345u;
		cuts[i] = len * i / NELEM(cuts) + (x >> 16) % 8;
	}
	for (i = 0; i < NELEM(steps); i++) {
		x = x * 1103515245u + 12345u;
		steps[i] = 1 + (x >> 16) % 300;
	}
	blen = rwc_rechunk(p, len, cuts, (size_t)(seed % NELEM(cuts)), body,
	    sizeof(body));
	if (blen == 0)
		abort();
	check(rwc_dechunk(body, blen, steps, NELEM(steps), back, sizeof(back),
	    &plen));
	if (plen != len || (len > 0 && memcmp(back, p, len) != 0))
		abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rw_upstream up;
	struct http1_msg m;
	const char *p;
	ssize_t rc;
	unsigned sel;

	if (size < 2)
		return 0;
	sel = data[0];
	p = (const char *)data + 2;
	size -= 2;
	memset(&up, 0, sizeof(up));
	up.authority = authorities[(sel >> 4) & 3];
	up.authority_len = strlen(up.authority);
	up.path = paths[(sel >> 3) & 1];
	up.path_len = strlen(up.path);
	up.inject = pool + (sel & 1);
	up.ninject = (sel >> 1) & 3;
	up.drop_authorization = (int)((sel >> 6) & 1);
	memset(&m, 0, sizeof(m));
	m.hdrs = hdrs_in;
	m.max_hdrs = 1000;
	rc = http1_parse_request(&m, p, size, 0);
	if (rc > 0) {
		fz_head(&m, &up);
		fz_rechunk(p + rc, size - (size_t)rc, data[1]);
	} else
		fz_rechunk(p, size, data[1]);
	return 0;
}
