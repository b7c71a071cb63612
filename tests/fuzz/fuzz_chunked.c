/*
 * libFuzzer target for the chunked decoder: the input is a chunked body
 * (and maybe bytes after it), decoded whole, one byte at a time and split
 * in two. All three must agree on the outcome, the bytes consumed and the
 * payload; payload runs must add up to c->total and lie inside the input.
 * A violation aborts.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/http/http1.h"

int LLVMFuzzerTestOneInput(const uint8_t *, size_t);

struct outcome {
	int failed, done;
	enum http1_err err;
	size_t consumed;
	uint64_t payload; /* bytes */
	uint64_t hash;    /* FNV-1a of the payload */
};

static void
check(int ok)
{
	if (!ok)
		abort();
}

/* Feeds buf[0..n); returns non-zero when the decoder is finished. */
static int
feed(struct http1_chunked *c, struct outcome *o, const char *buf, size_t n)
{
	size_t used = 0, dl, i;
	ssize_t r;

	while (used < n) {
		r = http1_chunked_step(c, buf + used, n - used, &dl);
		if (r == -1) {
			check(c->err > HTTP1_E_NONE && c->err < HTTP1_E__COUNT);
			check(http1_chunked_step(c, buf, n, &dl) == -1);
			o->failed = 1;
			o->err = c->err;
			return 1;
		}
		check(r >= 0 && (size_t)r <= n - used);
		if (r == 0) {
			check(http1_chunked_done(c) && dl == 0);
			break;
		}
		check(dl == 0 || dl == (size_t)r);
		for (i = 0; i < dl; i++) {
			o->hash ^= (unsigned char)buf[used + i];
			o->hash *= UINT64_C(0x100000001b3);
		}
		o->payload += dl;
		o->consumed += (size_t)r;
		used += (size_t)r;
		check(c->total == o->payload);
		if (http1_chunked_done(c))
			break;
	}
	if (!http1_chunked_done(c))
		return 0;
	o->done = 1;
	check(http1_chunked_step(c, buf, n, &dl) == 0 && dl == 0);
	return 1;
}

static int
same(const struct outcome *a, const struct outcome *b)
{
	return a->failed == b->failed && a->done == b->done &&
	    a->err == b->err && a->consumed == b->consumed &&
	    a->payload == b->payload && a->hash == b->hash;
}

static void
start(struct http1_chunked *c, struct outcome *o)
{
	http1_chunked_init(c);
	memset(o, 0, sizeof(*o));
	o->hash = UINT64_C(0xcbf29ce484222325);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *buf = (const char *)data;
	struct http1_chunked c;
	struct outcome whole, other;
	size_t k, s;

	start(&c, &whole);
	feed(&c, &whole, buf, size);
	check(whole.consumed <= size);
	check(c.total == whole.payload);
	/* A complete message ends in CRLF and is never empty of framing. */
	if (whole.done)
		check(whole.consumed >= 5 &&
		    memcmp(buf + whole.consumed - 2, "\r\n", 2) == 0);

	start(&c, &other);
	for (k = 0; k < size; k++)
		if (feed(&c, &other, buf + k, 1))
			break;
	if (!other.failed)
		check(same(&whole, &other));
	else
		check(whole.failed && whole.err == other.err &&
		    whole.payload == other.payload && whole.hash == other.hash);

	s = size / 2;
	start(&c, &other);
	if (!feed(&c, &other, buf, s))
		feed(&c, &other, buf + s, size - s);
	if (!other.failed)
		check(same(&whole, &other));
	else
		check(whole.failed && whole.err == other.err &&
		    whole.payload == other.payload);
	return 0;
}
