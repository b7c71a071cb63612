/*
 * The parent <-> engine message channel (chan.h): framing, the bounded
 * input buffer, the output queue. It knows nothing of what the messages
 * mean; the parent and the engine each name the types they accept and
 * the payload sizes allowed, and everything else ends the channel (DESIGN
 * "Privilege separation": a malformed message is fatal to the receiver,
 * never best effort).
 *
 * Input: one buffer, grown only to the size a header already checked
 * asks for, never past CHAN_HDR_LEN + the largest ck_max. A header is
 * judged from its 8 bytes alone, so a hostile peer cannot make this side
 * wait for (or hold) a payload it was never going to accept.
 *
 * Output: written at once while nothing is queued; what the socket does
 * not take goes to an evbuffer (at most max_out bytes) written when the
 * socket is writable. Writes use sendmsg(MSG_NOSIGNAL): a peer that went
 * away is an end of the channel, never a SIGPIPE.
 *
 * IMPORTANT: the end callback runs only from the event loop (a deferred
 * event), never from inside chan_send() or chan_flush(), so a caller of
 * those never finds its channel freed under it. The message callback may
 * free the channel: the read path notices (ch_busy, ch_freed) and frees
 * it only once the callback has returned.
 */
#include <sys/socket.h>
#include <sys/uio.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "proxy/daemon/chan.h"
#include "proxy/util/util.h"

#define CHAN_IN_INIT                                                           \
	((size_t)16 * 1024) /* first input buffer, if the kinds allow */
#define CHAN_PEEK_IOV 16    /* evbuffer chains per sendmsg */
#define CHAN_WHY      192   /* the end reason */

/*
 * Owned by whoever called chan_new(); freed by chan_free() (deferred to
 * the end of the read path when called from the message callback).
 */
struct chan {
	struct event_base *ch_base;
	int ch_fd;                  /* ours; closed by chan_destroy() */
	struct chan_kind *ch_kinds; /* what we accept (a copy) */
	size_t ch_nkinds;
	size_t ch_max_out; /* bytes queued at most */
	chan_msg_cb *ch_msg;
	chan_end_cb *ch_end;
	void *ch_arg;
	struct event *ch_rev;    /* EV_READ | EV_PERSIST */
	struct event *ch_wev;    /* EV_WRITE | EV_PERSIST, while queued */
	struct event *ch_endev;  /* activated once by chan_over() */
	struct evbuffer *ch_out; /* bytes not yet written */
	unsigned char *ch_in;    /* received, not yet delivered */
	size_t ch_inlen;
	size_t ch_incap;       /* allocated */
	size_t ch_inmax;       /* CHAN_HDR_LEN + the largest ck_max */
	int ch_over;           /* ended or being freed: no more messages */
	int ch_busy;           /* inside the message callback */
	int ch_freed;          /* chan_free() called while busy */
	char ch_why[CHAN_WHY]; /* why it ended, for the end callback */
};

static void chan_over(struct chan *, const char *, ...) SL_PRINTF(2, 3);

static void
setwhy(char *why, size_t whylen, const char *fmt, ...) SL_PRINTF(3, 4);

static void
setwhy(char *why, size_t whylen, const char *fmt, ...)
{
	va_list ap;

	if (why == NULL || whylen == 0)
		return;
	va_start(ap, fmt);
	(void)vsnprintf(why, whylen, fmt, ap);
	va_end(ap);
}

static const struct chan_kind *
find_kind(const struct chan_kind *kinds, size_t nkinds, uint32_t type)
{
	size_t i;

	for (i = 0; i < nkinds; i++)
		if (kinds[i].ck_type == type)
			return &kinds[i];
	return NULL;
}

int
chan_frame(const unsigned char *buf, size_t len, const struct chan_kind *kinds,
    size_t nkinds, uint32_t *type, size_t *plen, char *why, size_t whylen)
{
	const struct chan_kind *k;
	uint32_t t, n;

	if (len < CHAN_HDR_LEN)
		return 0;
	memcpy(&t, buf, sizeof(t));
	memcpy(&n, buf + sizeof(t), sizeof(n));
	if ((k = find_kind(kinds, nkinds, t)) == NULL) {
		setwhy(why, whylen, "unknown message type %u (length %u)", t,
		    n);
		return -1;
	}
	if (n > CHAN_MAX_PAYLOAD) {
		setwhy(why, whylen,
		    "message type %u: length %u over the %u-byte limit", t, n,
		    CHAN_MAX_PAYLOAD);
		return -1;
	}
	if (n < k->ck_min || n > k->ck_max) {
		if (k->ck_min == k->ck_max)
			setwhy(why, whylen,
			    "message type %u: length %u, not the %u bytes "
			    "it must be",
			    t, n, k->ck_min);
		else
			setwhy(why, whylen,
			    "message type %u: length %u, not within %u..%u", t,
			    n, k->ck_min, k->ck_max);
		return -1;
	}
	if (len - CHAN_HDR_LEN < n)
		return 0;
	*type = t;
	*plen = n;
	return 1;
}

/*
 * The channel is over: no more messages are delivered or sent, and the
 * end callback is scheduled (once). The first reason counts.
 */
static void
chan_over(struct chan *ch, const char *fmt, ...)
{
	va_list ap;

	if (ch->ch_over)
		return;
	ch->ch_over = 1;
	va_start(ap, fmt);
	(void)vsnprintf(ch->ch_why, sizeof(ch->ch_why), fmt, ap);
	va_end(ap);
	(void)event_del(ch->ch_rev);
	(void)event_del(ch->ch_wev);
	event_active(ch->ch_endev, EV_TIMEOUT, 0);
}

static void
chan_destroy(struct chan *ch)
{
	if (ch->ch_rev != NULL)
		event_free(ch->ch_rev);
	if (ch->ch_wev != NULL)
		event_free(ch->ch_wev);
	if (ch->ch_endev != NULL)
		event_free(ch->ch_endev);
	if (ch->ch_out != NULL)
		evbuffer_free(ch->ch_out);
	if (ch->ch_fd != -1)
		(void)close(ch->ch_fd);
	free(ch->ch_in);
	free(ch->ch_kinds);
	free(ch);
}

void
chan_free(struct chan *ch)
{
	if (ch == NULL)
		return;
	if (ch->ch_busy) {
		/* The read path frees it when the callback returns. */
		ch->ch_freed = 1;
		ch->ch_over = 1;
		return;
	}
	chan_destroy(ch);
}

/* From the loop: the one call of the end callback. */
static void
chan_end_callback(evutil_socket_t fd, short what, void *arg)
{
	struct chan *ch = arg;

	(void)fd;
	(void)what;
	/* Nothing of ch is touched after: the callback may free it. */
	if (ch->ch_end != NULL)
		ch->ch_end(ch, ch->ch_why, ch->ch_arg);
}

/*
 * After delivery: make room for the rest of a frame whose header is in
 * already (checked by chan_frame(), so its length is within ck_max and
 * the buffer never grows past ch_inmax). 0, or -1 out of memory.
 */
static int
chan_in_room(struct chan *ch)
{
	unsigned char *p;
	uint32_t n;
	size_t need;

	if (ch->ch_inlen < CHAN_HDR_LEN)
		return 0;
	memcpy(&n, ch->ch_in + sizeof(uint32_t), sizeof(n));
	need = CHAN_HDR_LEN + (size_t)n;
	if (need <= ch->ch_incap)
		return 0;
	if (need > ch->ch_inmax || (p = realloc(ch->ch_in, need)) == NULL)
		return -1;
	ch->ch_in = p;
	ch->ch_incap = need;
	return 0;
}

/*
 * Deliver every whole message in the input buffer, in order, then keep
 * what is left of the next one at its start. Returns with ch freed when
 * the message callback freed it.
 */
static void
chan_deliver(struct chan *ch)
{
	char why[CHAN_WHY];
	uint32_t type;
	size_t off = 0, plen;
	int r;

	while (!ch->ch_over) {
		r = chan_frame(ch->ch_in + off, ch->ch_inlen - off,
		    ch->ch_kinds, ch->ch_nkinds, &type, &plen, why,
		    sizeof(why));
		if (r == -1) {
			chan_over(ch, "%s", why);
			return;
		}
		if (r == 0)
			break;
		ch->ch_busy = 1;
		ch->ch_msg(ch, type, ch->ch_in + off + CHAN_HDR_LEN, plen,
		    ch->ch_arg);
		ch->ch_busy = 0;
		if (ch->ch_freed) {
			chan_destroy(ch);
			return;
		}
		off += CHAN_HDR_LEN + plen;
	}
	if (ch->ch_over)
		return;
	if (off > 0) {
		memmove(ch->ch_in, ch->ch_in + off, ch->ch_inlen - off);
		ch->ch_inlen -= off;
	}
	if (chan_in_room(ch) == -1)
		chan_over(ch, "out of memory for a message of %zu bytes",
		    ch->ch_inlen);
}

/* EOF from the peer: say where in a message it came. */
static void
chan_eof(struct chan *ch)
{
	uint32_t type, n;

	if (ch->ch_inlen == 0) {
		chan_over(ch, "EOF");
		return;
	}
	if (ch->ch_inlen < CHAN_HDR_LEN) {
		chan_over(ch, "EOF mid-header (%zu of %u bytes)", ch->ch_inlen,
		    (unsigned)CHAN_HDR_LEN);
		return;
	}
	memcpy(&type, ch->ch_in, sizeof(type));
	memcpy(&n, ch->ch_in + sizeof(type), sizeof(n));
	chan_over(ch, "EOF mid-payload of message type %u (%zu of %u bytes)",
	    type, ch->ch_inlen - CHAN_HDR_LEN, n);
}

static void
chan_read_callback(evutil_socket_t fd, short what, void *arg)
{
	struct chan *ch = arg;
	ssize_t n;

	(void)fd;
	(void)what;
	if (ch->ch_over)
		return;
	if (ch->ch_inlen >= ch->ch_incap) {
		/* Not reached: chan_deliver() always leaves room. */
		chan_over(ch, "input buffer full (%zu bytes)", ch->ch_inlen);
		return;
	}
	n = read(ch->ch_fd, ch->ch_in + ch->ch_inlen,
	    ch->ch_incap - ch->ch_inlen);
	if (n == -1) {
		if (errno != EAGAIN && errno != EINTR)
			chan_over(ch, "read: %s", strerror(errno));
		return;
	}
	if (n == 0) {
		chan_eof(ch);
		return;
	}
	ch->ch_inlen += (size_t)n;
	chan_deliver(ch);
}

/*
 * One sendmsg(MSG_NOSIGNAL) of v[0..n): *done gets the bytes written (0
 * when the socket would block). 0, or -1 with errno on an error.
 */
static int
chan_write(int fd, struct iovec *v, size_t n, size_t *done)
{
	struct msghdr mh;
	ssize_t w;

	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = v;
	mh.msg_iovlen = n;
	*done = 0;
	do
		w = sendmsg(fd, &mh, MSG_NOSIGNAL);
	while (w == -1 && errno == EINTR);
	if (w == -1)
		return errno == EAGAIN ? 0 : -1; /* EWOULDBLOCK too */
	*done = (size_t)w;
	return 0;
}

/*
 * Write what is queued until the socket would block or the queue is
 * empty. 0, or -1 with errno on a write error.
 */
static int
chan_push(struct chan *ch)
{
	struct iovec v[CHAN_PEEK_IOV];
	size_t done;
	int n;

	while (evbuffer_get_length(ch->ch_out) > 0) {
		n = evbuffer_peek(ch->ch_out, -1, NULL, v, CHAN_PEEK_IOV);
		if (n > CHAN_PEEK_IOV)
			n = CHAN_PEEK_IOV;
		if (n <= 0)
			break;
		if (chan_write(ch->ch_fd, v, (size_t)n, &done) == -1)
			return -1;
		if (done == 0)
			break;
		if (evbuffer_drain(ch->ch_out, done) == -1) {
			errno = ENOMEM;
			return -1;
		}
	}
	return 0;
}

static void
chan_write_callback(evutil_socket_t fd, short what, void *arg)
{
	struct chan *ch = arg;

	(void)fd;
	(void)what;
	if (ch->ch_over)
		return;
	if (chan_push(ch) == -1) {
		chan_over(ch, "write: %s", strerror(errno));
		return;
	}
	if (evbuffer_get_length(ch->ch_out) == 0)
		(void)event_del(ch->ch_wev);
}

/*
 * Append v[0..n) to the queue, less its first skip bytes, and arm the
 * write event. The room is reserved first, so that on -1 with nothing
 * written yet (skip 0) nothing is queued either.
 */
static int
chan_queue(struct chan *ch, const struct iovec *v, size_t n, size_t skip,
    size_t total)
{
	size_t i, k;

	if (evbuffer_expand(ch->ch_out, total - skip) == -1)
		return -1;
	for (i = 0; i < n; i++) {
		if (skip >= v[i].iov_len) {
			skip -= v[i].iov_len;
			continue;
		}
		k = v[i].iov_len - skip;
		if (evbuffer_add(ch->ch_out, (const char *)v[i].iov_base + skip,
			k) == -1)
			return -1;
		skip = 0;
	}
	return event_add(ch->ch_wev, NULL);
}

/* The payload length of iov[0..n), or -1 when over CHAN_MAX_PAYLOAD. */
static int
chan_iov_len(const struct iovec *iov, int n, size_t *len)
{
	int i;

	*len = 0;
	for (i = 0; i < n; i++) {
		if (iov[i].iov_len > CHAN_MAX_PAYLOAD - *len)
			return -1;
		*len += iov[i].iov_len;
	}
	return 0;
}

int
chan_sendv(struct chan *ch, uint32_t type, const struct iovec *iov, int n)
{
	struct iovec v[IOV_MAX];
	unsigned char hdr[CHAN_HDR_LEN];
	uint32_t n32;
	size_t len, total, queued, done;
	int i;

	if (ch == NULL || ch->ch_over || n < 0 || n >= IOV_MAX ||
	    (n > 0 && iov == NULL) || chan_iov_len(iov, n, &len) == -1)
		return -1;
	total = CHAN_HDR_LEN + len;
	queued = evbuffer_get_length(ch->ch_out);
	if (total > ch->ch_max_out || queued > ch->ch_max_out - total)
		return -1;
	n32 = (uint32_t)len;
	memcpy(hdr, &type, sizeof(type));
	memcpy(hdr + sizeof(type), &n32, sizeof(n32));
	v[0].iov_base = hdr;
	v[0].iov_len = sizeof(hdr);
	for (i = 0; i < n; i++)
		v[i + 1] = iov[i];
	if (queued > 0)
		return chan_queue(ch, v, (size_t)n + 1, 0, total);
	if (chan_write(ch->ch_fd, v, (size_t)n + 1, &done) == -1) {
		chan_over(ch, "write: %s", strerror(errno));
		return -1;
	}
	if (done == total)
		return 0;
	if (chan_queue(ch, v, (size_t)n + 1, done, total) == -1) {
		if (done == 0)
			return -1;
		/* Half a message is out: the stream cannot go on. */
		chan_over(ch, "out of memory queueing message type %u", type);
		return -1;
	}
	return 0;
}

int
chan_send(struct chan *ch, uint32_t type, const void *p, size_t len)
{
	struct iovec v;

	if (len > CHAN_MAX_PAYLOAD || (len > 0 && p == NULL))
		return -1;
	v.iov_base = (void *)(uintptr_t)p; /* only read */
	v.iov_len = len;
	return chan_sendv(ch, type, &v, len > 0 ? 1 : 0);
}

size_t
chan_out_queued(const struct chan *ch)
{
	return ch == NULL ? 0 : evbuffer_get_length(ch->ch_out);
}

static int64_t
now_ms(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_MONOTONIC, &ts) == -1)
		return 0;
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int
chan_flush(struct chan *ch, int timeout_ms)
{
	struct pollfd pfd;
	int64_t end, left;
	int wait;

	if (ch == NULL || ch->ch_over)
		return -1;
	end = now_ms() + timeout_ms;
	for (;;) {
		if (chan_push(ch) == -1) {
			chan_over(ch, "write: %s", strerror(errno));
			return -1;
		}
		if (evbuffer_get_length(ch->ch_out) == 0)
			break;
		wait = -1;
		if (timeout_ms >= 0) {
			if ((left = end - now_ms()) <= 0)
				return -1;
			wait = left > INT_MAX ? INT_MAX : (int)left;
		}
		pfd.fd = ch->ch_fd;
		pfd.events = POLLOUT;
		pfd.revents = 0;
		if (poll(&pfd, 1, wait) == -1 && errno != EINTR)
			return -1;
	}
	(void)event_del(ch->ch_wev);
	return 0;
}

/* Kinds that chan_frame() can work with: 0, or -1 (errno EINVAL). */
static int
chan_kinds_ok(const struct chan_kind *kinds, size_t nkinds, size_t *maxp)
{
	size_t i;

	*maxp = 0;
	if (nkinds > 0 && kinds == NULL)
		return -1;
	for (i = 0; i < nkinds; i++) {
		if (kinds[i].ck_min > kinds[i].ck_max ||
		    kinds[i].ck_max > CHAN_MAX_PAYLOAD)
			return -1;
		if (kinds[i].ck_max > *maxp)
			*maxp = kinds[i].ck_max;
	}
	return 0;
}

/* The allocations and events of a new channel; 0, or -1 with errno. */
static int
chan_setup(struct chan *ch, const struct chan_kind *kinds, size_t nkinds)
{
	int fl;

	if (nkinds > 0) {
		if ((ch->ch_kinds = calloc(nkinds, sizeof(*kinds))) == NULL)
			return -1;
		memcpy(ch->ch_kinds, kinds, nkinds * sizeof(*kinds));
	}
	ch->ch_incap =
	    ch->ch_inmax < CHAN_IN_INIT ? ch->ch_inmax : CHAN_IN_INIT;
	if ((ch->ch_in = malloc(ch->ch_incap)) == NULL)
		return -1;
	if ((fl = fcntl(ch->ch_fd, F_GETFL)) == -1 ||
	    fcntl(ch->ch_fd, F_SETFL, fl | O_NONBLOCK) == -1)
		return -1;
	ch->ch_rev = event_new(ch->ch_base, ch->ch_fd, EV_READ | EV_PERSIST,
	    chan_read_callback, ch);
	ch->ch_wev = event_new(ch->ch_base, ch->ch_fd, EV_WRITE | EV_PERSIST,
	    chan_write_callback, ch);
	ch->ch_endev = event_new(ch->ch_base, -1, 0, chan_end_callback, ch);
	ch->ch_out = evbuffer_new();
	if (ch->ch_rev == NULL || ch->ch_wev == NULL || ch->ch_endev == NULL ||
	    ch->ch_out == NULL || event_add(ch->ch_rev, NULL) == -1) {
		errno = ENOMEM;
		return -1;
	}
	return 0;
}

struct chan *
chan_new(struct event_base *base, int fd, const struct chan_kind *kinds,
    size_t nkinds, size_t max_out, chan_msg_cb *msg, chan_end_cb *end,
    void *arg)
{
	struct chan *ch;
	size_t maxk;
	int saved;

	if (fd < 0 || base == NULL || msg == NULL ||
	    chan_kinds_ok(kinds, nkinds, &maxk) == -1) {
		if (fd >= 0)
			(void)close(fd);
		errno = EINVAL;
		return NULL;
	}
	if ((ch = calloc(1, sizeof(*ch))) == NULL) {
		saved = errno;
		(void)close(fd);
		errno = saved;
		return NULL;
	}
	ch->ch_base = base;
	ch->ch_fd = fd;
	ch->ch_nkinds = nkinds;
	ch->ch_max_out = max_out;
	ch->ch_msg = msg;
	ch->ch_end = end;
	ch->ch_arg = arg;
	ch->ch_inmax = CHAN_HDR_LEN + maxk;
	if (chan_setup(ch, kinds, nkinds) == -1) {
		saved = errno;
		chan_destroy(ch);
		errno = saved;
		return NULL;
	}
	return ch;
}
