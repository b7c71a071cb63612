/*
 * The parent <-> engine channel (proxy/daemon/chan.c) over real
 * socketpairs and a real event_base: round trips of several kinds, the
 * size checks (exact kinds refuse len +-1, unknown types, lengths over a
 * kind's maximum or over CHAN_MAX_PAYLOAD, all decided from the header
 * before any payload is sent), byte-at-a-time and 100-in-one-write
 * delivery, a message callback that frees the channel, max_out, EOF in
 * the middle of a header or payload, EPIPE without SIGPIPE, chan_flush.
 * The peer is often a raw fd, so that the bytes on the wire are exactly
 * the test's.
 */
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/event.h>

#include "proxy/daemon/chan.h"

enum {
	T_PING = 1, /* exactly 4 bytes */
	T_BLOB = 2, /* 0..1000 */
	T_BIG = 3,  /* 0..65536 */
	T_NIL = 4,  /* exactly 0 */
};

static const struct chan_kind kinds[] = {
	{ T_PING, 4, 4 },
	{ T_BLOB, 0, 1000 },
	{ T_BIG, 0, 65536 },
	{ T_NIL, 0, 0 },
};
#define NKINDS (sizeof(kinds) / sizeof(kinds[0]))

#define MAXREC 512

/* What one side's callbacks saw. */
struct rec {
	struct chan *ch;
	int nmsg;
	uint32_t type[MAXREC];
	size_t len[MAXREC];
	uint32_t first[MAXREC]; /* the first 4 payload bytes, when there */
	int sum_ok[MAXREC];     /* payload bytes are (seed + i) & 0xff */
	int nend;
	int nmsg_at_end;
	char why[256];
	int free_at;    /* free the channel in the message callback #free_at */
	int free_inend; /* free it in the end callback */
};

static struct event_base *base;
static int timed_out;

static int
payload_ok(const unsigned char *p, size_t len)
{
	size_t i;

	for (i = 4; i < len; i++)
		if (p[i] != (unsigned char)(p[0] + i))
			return 0;
	return 1;
}

static void
on_msg(struct chan *ch, uint32_t type, const unsigned char *p, size_t len,
    void *arg)
{
	struct rec *r = arg;

	assert_ptr_equal(ch, r->ch);
	assert_int_equal(r->nend, 0); /* no message after the end */
	assert_true(r->nmsg < MAXREC);
	assert_non_null(p);
	r->type[r->nmsg] = type;
	r->len[r->nmsg] = len;
	r->first[r->nmsg] = 0;
	if (len >= 4)
		memcpy(&r->first[r->nmsg], p, 4);
	r->sum_ok[r->nmsg] = payload_ok(p, len);
	r->nmsg++;
	if (r->free_at > 0 && r->nmsg == r->free_at) {
		chan_free(ch);
		r->ch = NULL;
	}
}

static void
on_end(struct chan *ch, const char *why, void *arg)
{
	struct rec *r = arg;

	assert_ptr_equal(ch, r->ch);
	r->nend++;
	r->nmsg_at_end = r->nmsg;
	snprintf(r->why, sizeof(r->why), "%s", why);
	if (r->free_inend) {
		chan_free(ch);
		r->ch = NULL;
	}
}

static void
on_timeout(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	timed_out = 1;
}

/* Run the loop until *cond is at least want, or 3 s pass. */
static void
spin(const int *cond, int want)
{
	struct timeval tv = { 3, 0 };
	struct event *t;

	timed_out = 0;
	assert_non_null(t = event_new(base, -1, 0, on_timeout, NULL));
	assert_int_equal(event_add(t, &tv), 0);
	while (*cond < want && !timed_out)
		assert_true(event_base_loop(base, EVLOOP_ONCE) >= 0);
	event_free(t);
	assert_false(timed_out);
}

/* One pass of the loop that blocks for nothing. */
static void
spin_once(void)
{
	assert_true(event_base_loop(base, EVLOOP_NONBLOCK) >= 0);
}

static void
pair(int sv[2])
{
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv),
	    0);
}

static struct chan *
open_rec(int fd, struct rec *r, size_t max_out)
{
	r->ch = chan_new(base, fd, kinds, NKINDS, max_out, on_msg, on_end, r);
	assert_non_null(r->ch);
	return r->ch;
}

/* A frame: header, then len payload bytes (seed, seed+1, ...). */
static size_t
frame(unsigned char *buf, uint32_t type, uint32_t len, unsigned char seed)
{
	uint32_t i;

	memcpy(buf, &type, 4);
	memcpy(buf + 4, &len, 4);
	for (i = 0; i < len; i++)
		buf[CHAN_HDR_LEN + i] = (unsigned char)(seed + i);
	return CHAN_HDR_LEN + len;
}

/* A header alone (its payload, if any, is never written). */
static void
header(unsigned char *buf, uint32_t type, uint32_t len)
{
	memcpy(buf, &type, 4);
	memcpy(buf + 4, &len, 4);
}

static void
write_all(int fd, const void *p, size_t len)
{
	assert_int_equal(write(fd, p, len), (ssize_t)len);
}

static unsigned char *
pattern(size_t len, unsigned char seed)
{
	unsigned char *p;
	size_t i;

	assert_non_null(p = malloc(len > 0 ? len : 1));
	for (i = 0; i < len; i++)
		p[i] = (unsigned char)(seed + i);
	return p;
}

static int
setup(void **state)
{
	(void)state;
	base = event_base_new();
	return base == NULL ? -1 : 0;
}

static int
teardown(void **state)
{
	(void)state;
	event_base_free(base);
	base = NULL;
	return 0;
}

/* The pure frame check, prefix by prefix. */
static void
test_frame(void **state)
{
	unsigned char buf[CHAN_HDR_LEN + 1000];
	char why[128];
	uint32_t type;
	size_t len, plen, i;

	(void)state;
	len = frame(buf, T_BLOB, 10, 7);
	for (i = 0; i < len; i++)
		assert_int_equal(chan_frame(buf, i, kinds, NKINDS, &type, &plen,
				     why, sizeof(why)),
		    0);
	assert_int_equal(chan_frame(buf, len, kinds, NKINDS, &type, &plen, why,
			     sizeof(why)),
	    1);
	assert_int_equal(type, T_BLOB);
	assert_int_equal(plen, 10);
	/* Trailing bytes of the next frame do not matter. */
	assert_int_equal(chan_frame(buf, sizeof(buf), kinds, NKINDS, &type,
			     &plen, why, sizeof(why)),
	    1);
	assert_int_equal(plen, 10);
	/* A bad header is decided at 8 bytes, and with why NULL. */
	(void)frame(buf, T_PING, 5, 0);
	assert_int_equal(chan_frame(buf, 7, kinds, NKINDS, &type, &plen, why,
			     sizeof(why)),
	    0);
	assert_int_equal(chan_frame(buf, 8, kinds, NKINDS, &type, &plen, why,
			     sizeof(why)),
	    -1);
	assert_string_equal(why,
	    "message type 1: length 5, not the 4 bytes it must be");
	assert_int_equal(chan_frame(buf, 8, kinds, NKINDS, &type, &plen, NULL,
			     0),
	    -1);
	(void)frame(buf, T_NIL, 0, 0);
	assert_int_equal(chan_frame(buf, 8, kinds, NKINDS, &type, &plen, why,
			     sizeof(why)),
	    1);
	assert_int_equal(plen, 0);
	/* No kinds at all: everything is unknown. */
	assert_int_equal(chan_frame(buf, 8, NULL, 0, &type, &plen, why,
			     sizeof(why)),
	    -1);
	assert_string_equal(why, "unknown message type 4 (length 0)");
}

/* Both sides are channels; several kinds each way, sendv gathers. */
static void
test_round_trip(void **state)
{
	struct rec a, b;
	unsigned char *blob, *big;
	unsigned char ping[4] = { 9, 10, 11, 12 };
	struct iovec iov[3];
	int sv[2];

	(void)state;
	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	pair(sv);
	open_rec(sv[0], &a, 1 << 20);
	open_rec(sv[1], &b, 1 << 20);
	blob = pattern(1000, 40);
	big = pattern(65536, 200);
	assert_int_equal(chan_send(a.ch, T_PING, ping, 4), 0);
	assert_int_equal(chan_send(a.ch, T_BLOB, NULL, 0), 0);
	assert_int_equal(chan_send(a.ch, T_BLOB, blob, 1000), 0);
	assert_int_equal(chan_send(a.ch, T_BIG, big, 65536), 0);
	assert_int_equal(chan_send(a.ch, T_NIL, NULL, 0), 0);
	/* 1000 bytes in three pieces make one message. */
	iov[0].iov_base = blob;
	iov[0].iov_len = 3;
	iov[1].iov_base = blob + 3;
	iov[1].iov_len = 0;
	iov[2].iov_base = blob + 3;
	iov[2].iov_len = 997;
	assert_int_equal(chan_sendv(a.ch, T_BLOB, iov, 3), 0);
	assert_int_equal(chan_send(b.ch, T_PING, ping, 4), 0);
	spin(&b.nmsg, 6);
	spin(&a.nmsg, 1);
	assert_int_equal(b.type[0], T_PING);
	assert_int_equal(b.len[0], 4);
	assert_memory_equal(&b.first[0], ping, 4);
	assert_int_equal(b.type[1], T_BLOB);
	assert_int_equal(b.len[1], 0);
	assert_int_equal(b.type[2], T_BLOB);
	assert_int_equal(b.len[2], 1000);
	assert_true(b.sum_ok[2]);
	assert_int_equal(b.type[3], T_BIG);
	assert_int_equal(b.len[3], 65536);
	assert_true(b.sum_ok[3]);
	assert_int_equal(b.type[4], T_NIL);
	assert_int_equal(b.len[4], 0);
	assert_int_equal(b.type[5], T_BLOB);
	assert_int_equal(b.len[5], 1000);
	assert_true(b.sum_ok[5]);
	assert_memory_equal(&b.first[5], blob, 4);
	assert_int_equal(a.type[0], T_PING);
	assert_int_equal(a.nend + b.nend, 0);
	assert_int_equal(chan_out_queued(a.ch), 0);
	/* One side closing is an EOF at the other. */
	chan_free(a.ch);
	spin(&b.nend, 1);
	assert_string_equal(b.why, "EOF");
	assert_int_equal(b.nmsg, 6);
	/* Over: nothing more is sent. */
	assert_int_equal(chan_send(b.ch, T_PING, ping, 4), -1);
	chan_free(b.ch);
	free(blob);
	free(big);
}

/* A raw peer writes buf; the channel must end with why, after nmsg. */
static void
expect_end(const unsigned char *buf, size_t len, int nmsg, const char *why)
{
	struct rec r;
	int sv[2];

	memset(&r, 0, sizeof(r));
	pair(sv);
	open_rec(sv[0], &r, 4096);
	write_all(sv[1], buf, len);
	spin(&r.nend, 1);
	/* Later bytes and more loop passes change nothing. */
	write_all(sv[1], buf, len);
	spin_once();
	spin_once();
	assert_int_equal(r.nend, 1);
	assert_int_equal(r.nmsg, nmsg);
	assert_int_equal(r.nmsg_at_end, nmsg);
	assert_string_equal(r.why, why);
	chan_free(r.ch);
	assert_int_equal(close(sv[1]), 0);
}

static void
test_exact_size(void **state)
{
	unsigned char buf[64];
	size_t n;

	(void)state;
	/* Header only: decided before any payload is on the wire. */
	n = frame(buf, T_PING, 3, 0);
	expect_end(buf, CHAN_HDR_LEN, 0,
	    "message type 1: length 3, not the 4 bytes it must be");
	expect_end(buf, n, 0,
	    "message type 1: length 3, not the 4 bytes it must be");
	n = frame(buf, T_PING, 5, 0);
	expect_end(buf, CHAN_HDR_LEN, 0,
	    "message type 1: length 5, not the 4 bytes it must be");
	expect_end(buf, n, 0,
	    "message type 1: length 5, not the 4 bytes it must be");
	/* A good one first is delivered; the bad one after it ends it. */
	n = frame(buf, T_PING, 4, 0);
	n += frame(buf + n, T_NIL, 1, 0);
	n += frame(buf + n, T_PING, 4, 0);
	expect_end(buf, n, 1,
	    "message type 4: length 1, not the 0 bytes it must be");
}

static void
test_unknown_type(void **state)
{
	unsigned char buf[64];

	(void)state;
	header(buf, 99, 2);
	expect_end(buf, CHAN_HDR_LEN, 0, "unknown message type 99 (length 2)");
	header(buf, 0, 0);
	expect_end(buf, CHAN_HDR_LEN, 0, "unknown message type 0 (length 0)");
}

static void
test_over_max(void **state)
{
	unsigned char buf[64];
	char why[128];

	(void)state;
	header(buf, T_BLOB, 1001);
	expect_end(buf, CHAN_HDR_LEN, 0,
	    "message type 2: length 1001, not within 0..1000");
	header(buf, T_BIG, 65537);
	expect_end(buf, CHAN_HDR_LEN, 0,
	    "message type 3: length 65537, not within 0..65536");
	header(buf, T_BLOB, CHAN_MAX_PAYLOAD + 1);
	snprintf(why, sizeof(why),
	    "message type 2: length %u over the %u-byte limit",
	    CHAN_MAX_PAYLOAD + 1, CHAN_MAX_PAYLOAD);
	expect_end(buf, CHAN_HDR_LEN, 0, why);
	header(buf, T_BIG, UINT32_MAX);
	snprintf(why, sizeof(why),
	    "message type 3: length %u over the %u-byte limit", UINT32_MAX,
	    CHAN_MAX_PAYLOAD);
	expect_end(buf, CHAN_HDR_LEN, 0, why);
}

/* Every byte its own write and its own read. */
static void
test_byte_at_a_time(void **state)
{
	static unsigned char buf[3 * CHAN_HDR_LEN + 4 + 1000 + 2000];
	struct rec r;
	size_t n, i, ends[3];
	int sv[2], want;

	(void)state;
	memset(&r, 0, sizeof(r));
	pair(sv);
	open_rec(sv[0], &r, 4096);
	n = frame(buf, T_PING, 4, 1);
	ends[0] = n;
	n += frame(buf + n, T_BLOB, 1000, 2);
	ends[1] = n;
	n += frame(buf + n, T_BIG, 2000, 3);
	ends[2] = n;
	want = 0;
	for (i = 0; i < n; i++) {
		write_all(sv[1], buf + i, 1);
		/* One read of that one byte. */
		assert_true(event_base_loop(base, EVLOOP_ONCE) >= 0);
		if (want < 3 && i + 1 == ends[want])
			want++;
		assert_int_equal(r.nmsg, want);
	}
	assert_int_equal(r.nmsg, 3);
	assert_int_equal(r.type[0], T_PING);
	assert_int_equal(r.type[1], T_BLOB);
	assert_int_equal(r.len[1], 1000);
	assert_true(r.sum_ok[1]);
	assert_int_equal(r.type[2], T_BIG);
	assert_int_equal(r.len[2], 2000);
	assert_true(r.sum_ok[2]);
	assert_int_equal(r.nend, 0);
	chan_free(r.ch);
	assert_int_equal(close(sv[1]), 0);
}

/* 100 messages in one write, all delivered, in order. */
static void
test_hundred(void **state)
{
	static unsigned char buf[100 * (CHAN_HDR_LEN + 100)];
	struct rec r;
	size_t n = 0;
	uint32_t i, seq;
	int sv[2];

	(void)state;
	memset(&r, 0, sizeof(r));
	pair(sv);
	open_rec(sv[0], &r, 4096);
	for (i = 0; i < 100; i++) {
		n += frame(buf + n, T_BLOB, 4 + i % 90, 0);
		memcpy(buf + n - (4 + i % 90), &i, 4);
	}
	write_all(sv[1], buf, n);
	spin(&r.nmsg, 100);
	assert_int_equal(r.nmsg, 100);
	for (i = 0; i < 100; i++) {
		assert_int_equal(r.type[i], T_BLOB);
		assert_int_equal(r.len[i], 4 + i % 90);
		seq = r.first[i];
		assert_int_equal(seq, i);
	}
	assert_int_equal(r.nend, 0);
	chan_free(r.ch);
	assert_int_equal(close(sv[1]), 0);
}

/*
 * The message callback frees the channel: with more messages in the same
 * read (not delivered), as the last one, and the end callback freeing it.
 * Run under ASan, a use after free would abort here.
 */
static void
test_free_in_callback(void **state)
{
	unsigned char buf[5 * (CHAN_HDR_LEN + 4)];
	struct rec r;
	size_t n = 0;
	int sv[2], i, at;

	(void)state;
	for (i = 0; i < 5; i++)
		n += frame(buf + n, T_PING, 4, (unsigned char)i);
	for (at = 1; at <= 5; at++) {
		memset(&r, 0, sizeof(r));
		pair(sv);
		open_rec(sv[0], &r, 4096);
		r.free_at = at;
		write_all(sv[1], buf, n);
		spin(&r.nmsg, at);
		spin_once();
		spin_once();
		assert_null(r.ch);
		assert_int_equal(r.nmsg, at);
		assert_int_equal(r.nend, 0);
		/* Its fd is closed: the peer sees the end. */
		assert_true(read(sv[1], buf, 1) == 0 || errno == ECONNRESET);
		assert_int_equal(close(sv[1]), 0);
		n = 0;
		for (i = 0; i < 5; i++)
			n += frame(buf + n, T_PING, 4, (unsigned char)i);
	}
	/* Freed in the end callback. */
	memset(&r, 0, sizeof(r));
	pair(sv);
	open_rec(sv[0], &r, 4096);
	r.free_inend = 1;
	write_all(sv[1], buf, 3);
	assert_int_equal(shutdown(sv[1], SHUT_WR), 0);
	spin(&r.nend, 1);
	assert_null(r.ch);
	assert_string_equal(r.why, "EOF mid-header (3 of 8 bytes)");
	spin_once();
	assert_int_equal(r.nend, 1);
	assert_int_equal(close(sv[1]), 0);
	/* Freed by its owner while its end is pending: no callback. */
	memset(&r, 0, sizeof(r));
	pair(sv);
	open_rec(sv[0], &r, 4096);
	assert_int_equal(close(sv[1]), 0);
	assert_int_equal(chan_send(r.ch, T_NIL, NULL, 0), -1); /* EPIPE */
	chan_free(r.ch);
	spin_once();
	spin_once();
	assert_int_equal(r.nend, 0);
}

/* Fill the peer's socket until chan_send queues, then past max_out. */
static void
test_max_out(void **state)
{
	enum { MAX_OUT = 8192 };
	unsigned char *blob, ping[4] = { 0 };
	struct rec a, b;
	struct iovec iov[2];
	size_t q = 0;
	uint32_t seq;
	int sv[2], sent = 0, sndbuf = 4096;

	(void)state;
	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	pair(sv);
	assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf,
			     sizeof(sndbuf)),
	    0);
	open_rec(sv[0], &a, MAX_OUT);
	blob = pattern(1000, 0);
	/* Bigger than max_out is refused even with nothing queued. */
	assert_int_equal(chan_send(a.ch, T_BIG, blob, MAX_OUT), -1);
	assert_int_equal(chan_send(a.ch, T_BLOB, blob, CHAN_MAX_PAYLOAD + 1),
	    -1);
	iov[0].iov_base = blob;
	iov[0].iov_len = CHAN_MAX_PAYLOAD;
	iov[1].iov_base = blob;
	iov[1].iov_len = 1;
	assert_int_equal(chan_sendv(a.ch, T_BLOB, iov, 2), -1);
	assert_int_equal(chan_sendv(a.ch, T_BLOB, iov, -1), -1);
	assert_int_equal(chan_out_queued(a.ch), 0);
	/* Nobody reads sv[1]: the socket fills, then the queue. */
	for (;;) {
		assert_true(sent < 100000);
		memcpy(blob, &sent, 4);
		q = chan_out_queued(a.ch);
		if (chan_send(a.ch, T_BLOB, blob, 1000) == -1)
			break;
		sent++;
		assert_true(chan_out_queued(a.ch) <= MAX_OUT);
	}
	/* Refused: it would pass max_out, and nothing was queued. */
	assert_true(q > 0);
	assert_true(q + CHAN_HDR_LEN + 1000 > MAX_OUT);
	assert_int_equal(chan_out_queued(a.ch), q);
	/* A small one may still fit, or is refused the same way. */
	if (q + CHAN_HDR_LEN + 4 <= MAX_OUT) {
		memcpy(ping, &sent, 4);
		assert_int_equal(chan_send(a.ch, T_PING, ping, 4), 0);
		sent++;
	} else {
		assert_int_equal(chan_send(a.ch, T_PING, ping, 4), -1);
	}
	/* The reader drains it; EV_WRITE sends the rest, in order. */
	open_rec(sv[1], &b, 4096);
	spin(&b.nmsg, sent);
	assert_int_equal(b.nmsg, sent);
	for (seq = 0; seq < (uint32_t)sent; seq++)
		assert_int_equal(b.first[seq], seq);
	assert_int_equal(chan_out_queued(a.ch), 0);
	assert_int_equal(a.nend + b.nend, 0);
	chan_free(a.ch);
	chan_free(b.ch);
	free(blob);
}

static void
test_eof(void **state)
{
	unsigned char buf[64];
	struct rec r;
	int sv[2];

	(void)state;
	/* Mid-header. */
	memset(&r, 0, sizeof(r));
	pair(sv);
	open_rec(sv[0], &r, 4096);
	(void)frame(buf, T_PING, 4, 0);
	write_all(sv[1], buf, 3);
	assert_int_equal(close(sv[1]), 0);
	spin(&r.nend, 1);
	assert_string_equal(r.why, "EOF mid-header (3 of 8 bytes)");
	assert_int_equal(r.nmsg, 0);
	chan_free(r.ch);
	/* Mid-payload, after a whole message. */
	memset(&r, 0, sizeof(r));
	pair(sv);
	open_rec(sv[0], &r, 4096);
	(void)frame(buf, T_NIL, 0, 0);
	(void)frame(buf + CHAN_HDR_LEN, T_BLOB, 10, 0);
	write_all(sv[1], buf, 2 * CHAN_HDR_LEN + 4);
	assert_int_equal(close(sv[1]), 0);
	spin(&r.nend, 1);
	assert_string_equal(r.why,
	    "EOF mid-payload of message type 2 (4 of 10 bytes)");
	assert_int_equal(r.nmsg, 1);
	assert_int_equal(r.type[0], T_NIL);
	chan_free(r.ch);
	/* Header whole, no payload byte yet. */
	memset(&r, 0, sizeof(r));
	pair(sv);
	open_rec(sv[0], &r, 4096);
	(void)frame(buf, T_PING, 4, 0);
	write_all(sv[1], buf, CHAN_HDR_LEN);
	assert_int_equal(close(sv[1]), 0);
	spin(&r.nend, 1);
	assert_string_equal(r.why,
	    "EOF mid-payload of message type 1 (0 of 4 bytes)");
	chan_free(r.ch);
}

/*
 * A peer gone: the write fails with EPIPE inside chan_send (no SIGPIPE:
 * this process does not ignore it), which returns -1; the end callback
 * comes from the loop, not from inside chan_send.
 */
static void
test_epipe(void **state)
{
	unsigned char ping[4] = { 1, 2, 3, 4 };
	struct rec r;
	int sv[2];

	(void)state;
	memset(&r, 0, sizeof(r));
	pair(sv);
	open_rec(sv[0], &r, 4096);
	assert_int_equal(close(sv[1]), 0);
	assert_int_equal(chan_send(r.ch, T_PING, ping, 4), -1);
	assert_int_equal(r.nend, 0);
	assert_int_equal(chan_send(r.ch, T_PING, ping, 4), -1);
	assert_int_equal(chan_flush(r.ch, 10), -1);
	spin(&r.nend, 1);
	assert_true(strncmp(r.why, "write: ", 7) == 0);
	spin_once();
	assert_int_equal(r.nend, 1);
	chan_free(r.ch);
}

/*
 * chan_flush: times out while nobody reads; with a reader (a child
 * process) every queued byte goes out, and the child sees exactly the
 * frames sent.
 */
static void
test_flush(void **state)
{
	unsigned char *blob, rbuf[4096], *acc;
	struct rec a;
	struct timespec t0, t1;
	size_t accn = 0, plen;
	uint32_t type;
	long ms;
	pid_t pid;
	ssize_t n;
	int sv[2], sent = 0, st, r, sndbuf = 4096;

	(void)state;
	memset(&a, 0, sizeof(a));
	pair(sv);
	assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf,
			     sizeof(sndbuf)),
	    0);
	open_rec(sv[0], &a, 1 << 20);
	blob = pattern(65536, 5);
	while (chan_out_queued(a.ch) == 0) {
		assert_int_equal(chan_send(a.ch, T_BIG, blob, 65536), 0);
		sent++;
	}
	assert_int_equal(chan_send(a.ch, T_BIG, blob, 65536), 0);
	sent++;
	assert_int_equal(chan_flush(a.ch, 0), -1);
	assert_int_equal(clock_gettime(CLOCK_MONOTONIC, &t0), 0);
	assert_int_equal(chan_flush(a.ch, 100), -1);
	assert_int_equal(clock_gettime(CLOCK_MONOTONIC, &t1), 0);
	ms = (t1.tv_sec - t0.tv_sec) * 1000 +
	    (t1.tv_nsec - t0.tv_nsec) / 1000000;
	assert_true(ms >= 90 && ms < 2000);
	assert_true(chan_out_queued(a.ch) > 0);

	pid = fork();
	assert_true(pid != -1);
	if (pid == 0) {
		/* The child: count whole, valid frames until EOF. */
		(void)close(sv[0]);
		acc = malloc((size_t)2 * (CHAN_HDR_LEN + 65536));
		st = 0;
		if (acc == NULL)
			_exit(2);
		while ((n = read(sv[1], rbuf, sizeof(rbuf))) > 0) {
			memcpy(acc + accn, rbuf, (size_t)n);
			accn += (size_t)n;
			while ((r = chan_frame(acc, accn, kinds, NKINDS, &type,
				    &plen, NULL, 0)) == 1) {
				if (type != T_BIG || plen != 65536 ||
				    !payload_ok(acc + CHAN_HDR_LEN, plen))
					_exit(3);
				st++;
				accn -= CHAN_HDR_LEN + plen;
				memmove(acc, acc + CHAN_HDR_LEN + plen, accn);
			}
			if (r == -1)
				_exit(4);
		}
		_exit(n == 0 && accn == 0 && st == sent ? 0 : 5);
	}
	assert_int_equal(close(sv[1]), 0);
	assert_int_equal(chan_flush(a.ch, 5000), 0);
	assert_int_equal(chan_out_queued(a.ch), 0);
	/* Nothing queued: at once. */
	assert_int_equal(chan_flush(a.ch, 0), 0);
	chan_free(a.ch);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	free(blob);
}

/* Bad arguments: NULL, and the fd is closed anyway. */
static void
test_new_bad(void **state)
{
	const struct chan_kind bad[] = { { 1, 5, 4 } };
	const struct chan_kind huge[] = { { 1, 0, CHAN_MAX_PAYLOAD + 1 } };
	int sv[2];

	(void)state;
	pair(sv);
	errno = 0;
	assert_null(chan_new(base, sv[0], bad, 1, 4096, on_msg, on_end, NULL));
	assert_int_equal(errno, EINVAL);
	assert_int_equal(fcntl(sv[0], F_GETFD), -1);
	assert_null(chan_new(base, sv[1], huge, 1, 4096, on_msg, on_end, NULL));
	assert_int_equal(fcntl(sv[1], F_GETFD), -1);
	chan_free(NULL);
	assert_int_equal(chan_send(NULL, T_PING, "abcd", 4), -1);
	assert_int_equal(chan_out_queued(NULL), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_frame),
		cmocka_unit_test_setup_teardown(test_round_trip, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_exact_size, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_unknown_type, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_over_max, setup, teardown),
		cmocka_unit_test_setup_teardown(test_byte_at_a_time, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_hundred, setup, teardown),
		cmocka_unit_test_setup_teardown(test_free_in_callback, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_max_out, setup, teardown),
		cmocka_unit_test_setup_teardown(test_eof, setup, teardown),
		cmocka_unit_test_setup_teardown(test_epipe, setup, teardown),
		cmocka_unit_test_setup_teardown(test_flush, setup, teardown),
		cmocka_unit_test_setup_teardown(test_new_bad, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
