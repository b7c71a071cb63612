/*
 * libFuzzer target for proxy/daemon/chan.c, the parent <-> engine
 * channel, whose bytes come from the other process (for the parent: an
 * engine that parses sandbox bytes and may be hostile). The input is a
 * byte stream as read from the socketpair, checked against a fixed kinds
 * table in two ways:
 *   - chan_frame() on the input and on its prefixes: 1 only for a whole
 *     frame whose length is within its kind's range (and the header's own
 *     bytes), -1 decided by the 8 header bytes alone (the same verdict
 *     for any longer prefix), 0 for every strict prefix of a good frame;
 *     and then frame by frame over the whole stream, as a receiver would;
 *   - the same bytes written into a real channel (a socketpair and an
 *     event_base) must give exactly those messages, in order, then one end
 *     whose reason is the malformed header's, or EOF where it stopped.
 */
#include <sys/socket.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "proxy/daemon/chan.h"

/* libFuzzer names the entry point. */
int LLVMFuzzerTestOneInput(/* NOLINT(readability-identifier-naming) */
    const uint8_t *data, size_t size);

#define MAX_INPUT ((size_t)64 * 1024) /* fits one write into the socketpair */
#define MAX_MSGS  (MAX_INPUT / CHAN_HDR_LEN + 1)

static const struct chan_kind kinds[] = {
	{ 1, 4, 4 },                /* exact */
	{ 2, 0, 1000 },             /* a range from 0 */
	{ 3, 16, 16 },              /* exact */
	{ 4, 0, 0 },                /* empty only */
	{ 5, 8, 65536 },            /* a range */
	{ 6, 0, CHAN_MAX_PAYLOAD }, /* anything allowed */
	{ 0x80000000u, 1, 2 },      /* a high type */
	{ 2, 5, 5 },                /* a duplicate: the first counts */
};
#define NKINDS (sizeof(kinds) / sizeof(kinds[0]))

static void
check(int cond, const char *what)
{
	if (!cond) {
		fprintf(stderr, "fuzz_chan invariant broken: %s\n", what);
		abort();
	}
}

static const struct chan_kind *
kind_of(uint32_t type)
{
	size_t i;

	for (i = 0; i < NKINDS; i++)
		if (kinds[i].ck_type == type)
			return &kinds[i];
	return NULL;
}

/* What the header says is allowed, computed here the slow way. */
static int
header_ok(const uint8_t *p)
{
	const struct chan_kind *k;
	uint32_t t, n;

	memcpy(&t, p, 4);
	memcpy(&n, p + 4, 4);
	if ((k = kind_of(t)) == NULL)
		return 0;
	return n <= CHAN_MAX_PAYLOAD && n >= k->ck_min && n <= k->ck_max;
}

/* The checks on one frame position: returns the verdict for all of it. */
static int
check_at(const uint8_t *p, size_t len, size_t *plenp, char *why, size_t wl)
{
	const struct chan_kind *k;
	char small[8];
	uint32_t type, t, n;
	size_t plen = 0, plen2;
	int r, r8;

	r = chan_frame(p, len, kinds, NKINDS, &type, &plen, why, wl);
	check(r == -1 || r == 0 || r == 1, "result");
	if (len < CHAN_HDR_LEN) {
		check(r == 0, "verdict before the header is whole");
		return 0;
	}
	memcpy(&t, p, 4);
	memcpy(&n, p + 4, 4);
	/* The verdict on a malformed header is its 8 bytes' alone. */
	r8 = chan_frame(p, CHAN_HDR_LEN, kinds, NKINDS, &type, &plen2, NULL, 0);
	check((r == -1) == (r8 == -1), "-1 not decided by the header");
	check((r != -1) == header_ok(p), "header verdict");
	if (r == -1) {
		check(why[0] != '\0' && memchr(why, '\0', wl) != NULL, "why");
		/* A short why buffer is truncated, not overrun. */
		memset(small, 'x', sizeof(small));
		check(chan_frame(p, len, kinds, NKINDS, &type, &plen2, small,
			  sizeof(small)) == -1 &&
			memchr(small, '\0', sizeof(small)) != NULL,
		    "short why");
		return -1;
	}
	if (r == 0) {
		check(len < CHAN_HDR_LEN + (size_t)n, "0 with a whole frame");
		return 0;
	}
	check(type == t && plen == n, "type and length are the header's");
	k = kind_of(type);
	check(k != NULL, "kind");
	if (k != NULL)
		check(plen >= k->ck_min && plen <= k->ck_max &&
			plen <= CHAN_MAX_PAYLOAD,
		    "length within the kind");
	check(len >= CHAN_HDR_LEN + plen, "frame longer than the input");
	check(chan_frame(p, CHAN_HDR_LEN + plen, kinds, NKINDS, &type, &plen2,
		  NULL, 0) == 1 &&
		plen2 == plen,
	    "exact frame");
	if (plen > 0)
		check(chan_frame(p, CHAN_HDR_LEN + plen - 1, kinds, NKINDS,
			  &type, &plen2, NULL, 0) == 0,
		    "strict prefix");
	*plenp = plen;
	return 1;
}

/* What the channel should do with the input, from chan_frame() alone. */
struct expect {
	size_t n; /* messages */
	uint32_t type[MAX_MSGS];
	size_t off[MAX_MSGS]; /* of the payload in the input */
	size_t len[MAX_MSGS];
	char why[256]; /* the end */
};

static void
walk(const uint8_t *data, size_t size, struct expect *e)
{
	size_t off = 0, plen = 0, rest;
	uint32_t type, n;
	int r;

	e->n = 0;
	while ((r = check_at(data + off, size - off, &plen, e->why,
		    sizeof(e->why))) == 1) {
		check(e->n < MAX_MSGS, "more frames than headers");
		memcpy(&e->type[e->n], data + off, 4);
		e->off[e->n] = off + CHAN_HDR_LEN;
		e->len[e->n] = plen;
		e->n++;
		off += CHAN_HDR_LEN + plen;
		check(off <= size, "consumed past the input");
	}
	if (r == -1)
		return;
	rest = size - off;
	if (rest == 0) {
		(void)snprintf(e->why, sizeof(e->why), "EOF");
	} else if (rest < CHAN_HDR_LEN) {
		(void)snprintf(e->why, sizeof(e->why),
		    "EOF mid-header (%zu of %u bytes)", rest,
		    (unsigned)CHAN_HDR_LEN);
	} else {
		memcpy(&type, data + off, 4);
		memcpy(&n, data + off + 4, 4);
		(void)snprintf(e->why, sizeof(e->why),
		    "EOF mid-payload of message type %u (%zu of %u bytes)",
		    type, rest - CHAN_HDR_LEN, n);
	}
}

struct seen {
	const uint8_t *data;
	const struct expect *e;
	size_t n;
	int ended;
};

static void
on_msg(struct chan *ch, uint32_t type, const unsigned char *p, size_t len,
    void *arg)
{
	struct seen *s = arg;

	(void)ch;
	check(!s->ended, "message after the end");
	check(s->n < s->e->n, "more messages than frames");
	check(type == s->e->type[s->n] && len == s->e->len[s->n], "message");
	check(len == 0 || memcmp(p, s->data + s->e->off[s->n], len) == 0,
	    "payload");
	s->n++;
}

static void
on_end(struct chan *ch, const char *why, void *arg)
{
	struct seen *s = arg;

	(void)ch;
	check(!s->ended, "two ends");
	check(s->n == s->e->n, "end before every frame was delivered");
	check(strcmp(why, s->e->why) == 0, "end reason");
	s->ended = 1;
}

/* The same bytes through a real channel. */
static void
run_chan(const uint8_t *data, size_t size, const struct expect *e)
{
	static struct event_base *base;
	struct seen s;
	struct chan *ch;
	int sv[2], i;

	if (base == NULL && (base = event_base_new()) == NULL)
		abort();
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == -1)
		abort();
	memset(&s, 0, sizeof(s));
	s.data = data;
	s.e = e;
	if ((ch = chan_new(base, sv[0], kinds, NKINDS, 4096, on_msg, on_end,
		 &s)) == NULL)
		abort();
	check(size == 0 || write(sv[1], data, size) == (ssize_t)size, "write");
	check(shutdown(sv[1], SHUT_WR) == 0, "shutdown");
	for (i = 0; !s.ended && i < 100000; i++)
		check(event_base_loop(base, EVLOOP_ONCE) >= 0, "loop");
	check(s.ended, "no end");
	chan_free(ch);
	check(close(sv[1]) == 0, "close");
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct expect e;

	if (size > MAX_INPUT)
		return 0;
	walk(data, size, &e);
	run_chan(data, size, &e);
	return 0;
}
