/*
 * One client connection (STYLE.md §5): its state, its end, accepting and
 * draining, and the client's callbacks, which hand the work to head.c
 * (request heads and the decision), exchange.c (bodies, the upstream leg,
 * the response), tunnel.c (CONNECT) and respond.c (denials and the audit
 * line). The state lives in cn_state and changes only in conn_set_state(),
 * along the moves of conn_moves[]. Connections are freed from the event
 * loop (conn_close defers), never inside their own callbacks.
 *
 * What it leaves to others: parsing (http1.c), what reaches the upstream
 * (rewrite.c), the decision (policy.c), tokens (token.c, tokencache.c),
 * upstream connections (upstream.c), the audit line format (audit.c).
 */
#include <sys/socket.h>
#include <sys/queue.h>
#include <sys/uio.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "proxy/config/config.h"
#include "proxy/ops/ops.h"
#include "proxy/relay/conn_int.h"
#include "proxy/relay/relay.h"
#include "proxy/util/util.h"

#ifndef EVBUFFER_IOVEC_IS_NATIVE_
#error "in_fill() passes evbuffer_iovec to readv: it must be struct iovec"
#endif

static const char *const conn_state_names[CONN_S__COUNT] = { "idle", "head",
	"durable", "upstream", "exchange", "tunnel-wait", "tunnel", "flush",
	"closed" };

/* Allowed moves: [from] is a bit mask of the states it may go to. */
#define B(s) (1u << (s))
static const unsigned conn_moves[CONN_S__COUNT] = {
	[CONN_S_IDLE] = B(CONN_S_HEAD) | B(CONN_S_CLOSED) | B(CONN_S_FLUSH),
	[CONN_S_HEAD] = B(CONN_S_DURABLE) | B(CONN_S_UPSTREAM) |
	    B(CONN_S_EXCHANGE) | B(CONN_S_TUNNEL_WAIT) | B(CONN_S_FLUSH) |
	    B(CONN_S_IDLE) | B(CONN_S_CLOSED),
	[CONN_S_DURABLE] = B(CONN_S_UPSTREAM) | B(CONN_S_EXCHANGE) |
	    B(CONN_S_TUNNEL_WAIT) | B(CONN_S_FLUSH) | B(CONN_S_IDLE) |
	    B(CONN_S_CLOSED),
	[CONN_S_UPSTREAM] =
	    B(CONN_S_EXCHANGE) | B(CONN_S_FLUSH) | B(CONN_S_CLOSED),
	[CONN_S_EXCHANGE] = B(CONN_S_IDLE) | B(CONN_S_UPSTREAM) |
	    B(CONN_S_FLUSH) | B(CONN_S_CLOSED),
	[CONN_S_TUNNEL_WAIT] =
	    B(CONN_S_TUNNEL) | B(CONN_S_FLUSH) | B(CONN_S_CLOSED),
	[CONN_S_TUNNEL] = B(CONN_S_CLOSED),
	[CONN_S_FLUSH] = B(CONN_S_CLOSED),
	[CONN_S_CLOSED] = 0,
};
#undef B

struct conn_list relay_conns = TAILQ_HEAD_INITIALIZER(relay_conns);
static size_t nconns;
int relay_draining;

static void conn_client_read_cb(struct bufferevent *, void *);
static void conn_client_write_cb(struct bufferevent *, void *);
static void conn_client_event_cb(struct bufferevent *, short, void *);

int
conn_state_ok(enum conn_state from, enum conn_state to)
{
	if ((unsigned)from >= CONN_S__COUNT || (unsigned)to >= CONN_S__COUNT)
		return 0;
	return from == to || (conn_moves[from] & (1u << to)) != 0;
}

const char *
conn_state_name(enum conn_state s)
{
	return (unsigned)s < CONN_S__COUNT ? conn_state_names[s] : "?";
}

void
conn_set_state(struct conn *c, enum conn_state to)
{
	if (c->cn_state == to)
		return;
	if (!conn_state_ok(c->cn_state, to))
		fatalx("conn: bad move %s -> %s", conn_state_name(c->cn_state),
		    conn_state_name(to));
	log_debug("conn %p: %s -> %s", (void *)c, conn_state_names[c->cn_state],
	    conn_state_names[to]);
	c->cn_state = to;
}

/*
 * The event loop refused a change (event_add or epoll_ctl out of memory):
 * the connection cannot be served. Close it from the loop, through its
 * header timer, which event_active() arms without allocating; the caller
 * returns as usual and nothing is freed under it.
 */
void
conn_broken(struct conn *c)
{
	if (c->cn_state == CONN_S_CLOSED || c->cn_broken)
		return;
	c->cn_broken = 1;
	event_active(c->cn_timer, EV_TIMEOUT, 0);
}

void
bev_on(struct conn *c, struct bufferevent *bev, short what)
{
	if (bufferevent_enable(bev, what) == -1)
		conn_broken(c);
}

void
bev_off(struct conn *c, struct bufferevent *bev, short what)
{
	if (bufferevent_disable(bev, what) == -1)
		conn_broken(c);
}

void
timer_on(struct conn *c, struct event *ev, const struct timeval *tv)
{
	if (evtimer_add(ev, tv) == -1)
		conn_broken(c);
}

/*
 * Write what bev's output holds straight to its socket and arm the write
 * event only for what the kernel did not take. Left to itself a socket
 * bufferevent arms EPOLLOUT, waits a loop iteration and disarms it around
 * every response: two epoll_ctl calls and a wake-up per write. plain is 0
 * for a TLS bufferevent, which writes through OpenSSL and stays armed.
 * Errors are left for libevent to find and report through the event
 * callback, on the armed write.
 */
void
out_flush(struct conn *c, struct bufferevent *bev, int plain)
{
	struct evbuffer *out = bufferevent_get_output(bev);
	evutil_socket_t fd = bufferevent_getfd(bev);

	/* A refusal waits for its audit line (conn_release_cb()). */
	if (c->cn_hold && bev == c->cn_bev) {
		bev_off(c, bev, EV_WRITE);
		return;
	}
	/* A TLS filter (an intercepted tunnel) is never written around. */
	if (!plain || bufferevent_get_underlying(bev) != NULL) {
		bev_on(c, bev, EV_WRITE);
		return;
	}
	/*
	 * A socket bufferevent freezes the start of its output (only it
	 * drains it); thaw it for this write, as its own write callback does.
	 */
	evbuffer_unfreeze(out, 1);
	while (evbuffer_get_length(out) > 0 && evbuffer_write(out, fd) > 0)
		;
	evbuffer_freeze(out, 1);
	if (evbuffer_get_length(out) > 0)
		bev_on(c, bev, EV_WRITE);
	else
		bev_off(c, bev, EV_WRITE);
}

/*
 * Read what bev's socket holds, in large reads, up to want bytes more in
 * its input. libevent 2.1 reads at most 4096 bytes per call
 * (EVBUFFER_MAX_READ in buffer.c), which made bulk relays syscall-bound
 * (strace: 4096-byte readv/writev pairs while FIONREAD showed 100 KB
 * waiting). EOF and errors are left for libevent's next read to report.
 * Plain sockets only.
 *
 * libevent sizes its read by FIONREAD, so an input holding less than its
 * most per read means the socket was empty after it (or at EOF): another
 * read would only return EAGAIN or 0, two syscalls per small message in
 * a tunnel and one per small response. Then nothing is read here. When
 * the input is short for another reason (a head was taken off it), the
 * bytes still waiting are read on the next wake-up, as before in_fill().
 */
#define LIBEVENT_READ_MAX 4096
static void
in_fill(struct bufferevent *bev, size_t want)
{
	struct evbuffer *in = bufferevent_get_input(bev);
	evutil_socket_t fd = bufferevent_getfd(bev);
	struct evbuffer_iovec v[2];
	size_t got = 0, chunk, left;
	ssize_t n;
	int nv, i;

	/* Plain sockets only: never read around a TLS filter. */
	if (bufferevent_get_underlying(bev) != NULL ||
	    evbuffer_get_length(in) < LIBEVENT_READ_MAX)
		return;
	/* The input's end is frozen: only the bufferevent adds to it. */
	evbuffer_unfreeze(in, 0);
	while (got < want) {
		chunk = want - got < CONN_IO_MAX ? want - got : CONN_IO_MAX;
		if ((nv = evbuffer_reserve_space(in, (ev_ssize_t)chunk, v,
			 2)) <= 0)
			break;
		n = readv(fd, (struct iovec *)v, nv);
		if (n <= 0) {
			for (i = 0; i < nv; i++)
				v[i].iov_len = 0;
			(void)evbuffer_commit_space(in, v, nv);
			break;
		}
		for (i = 0, left = (size_t)n; i < nv; i++) {
			if (v[i].iov_len > left)
				v[i].iov_len = left;
			left -= v[i].iov_len;
		}
		(void)evbuffer_commit_space(in, v, nv);
		got += (size_t)n;
		if ((size_t)n < chunk)
			break; /* the socket is empty for now */
	}
	evbuffer_freeze(in, 0);
}

/* Fill src's input as far as dst's output has room under the high mark. */
void
in_fill_for(struct bufferevent *src, struct bufferevent *dst)
{
	size_t out = evbuffer_get_length(bufferevent_get_output(dst));

	if (out < CONN_HIGH_WATER)
		in_fill(src, CONN_HIGH_WATER - out);
}

double
elapsed_s(const struct conn *c, const struct timeval *start)
{
	struct timeval now = sl_mono_tv(), d;

	(void)c;
	timersub(&now, start, &d);
	return (double)d.tv_sec + (double)d.tv_usec / 1e6;
}

void
peer_str(const struct conn *c, char *buf, size_t len)
{
	(void)addr_str((const struct sockaddr *)&c->cn_peer, buf, len);
}

const struct listener_conf *
conn_listener(const struct conn *c, const struct config *cf)
{
	if (c->cn_listener >= cf->cf_nlisteners)
		return NULL;
	return &cf->cf_listeners[c->cn_listener];
}

char *
dup_capped(const char *p, size_t len)
{
	char *s;

	if (len > CONN_AUDIT_STR)
		len = CONN_AUDIT_STR;
	if ((s = malloc(len + 1)) == NULL)
		return NULL;
	memcpy(s, p, len);
	s[len] = '\0';
	return s;
}

/*
 * TCP_NOTSENT_LOWAT: a socket takes more only while less than this waits
 * in it unsent. What sluice writes then leaves from its own write, on
 * its own core, instead of waiting in the socket to be sent from wherever
 * the peer's ACKs are taken in: the client's or the upstream's core (on
 * the benchmark's 2 cores, the load core did 75 NET_RX softirqs per MB of
 * a 100 MiB TLS tunnel without it, 31 with it, and the tunnel went from
 * 648 to 873 MB/s). It bounds what a slow reader holds in the kernel on
 * sluice's side too; what is in flight is the congestion window's.
 */
void
conn_sock_tune(int fd)
{
	int one = 1, lowat = CONN_NOTSENT_LOWAT;

	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat,
	    sizeof(lowat));
}

struct request *
request_new(struct conn *c)
{
	struct request *rq;

	if ((rq = calloc(1, sizeof(*rq))) == NULL)
		return NULL;
	rq->rq_cf = config_ref(c->cn_env->pe_cf);
	rq->rq_ups = upstreams_ref(c->cn_env->pe_ups);
	rq->rq_reason = REASON_BAD_REQUEST;
	clients_next_id(rq->rq_id, sizeof(rq->rq_id));
	rq->rq_start = sl_mono_tv();
	c->cn_req = rq;
	return rq;
}

void
request_free(struct conn *c)
{
	struct request *rq = c->cn_req;

	if (rq == NULL)
		return;
	c->cn_req = NULL;
	if (rq->rq_up != NULL) {
		struct bufferevent *ub = upconn_bev(rq->rq_up);

		if (ub != NULL)
			bufferevent_setcb(ub, NULL, NULL, NULL, NULL);
		upconn_cancel(rq->rq_up);
	}
	tunnel_splice_free(rq);
	if (rq->rq_pending != NULL)
		evbuffer_free(rq->rq_pending);
	if (rq->rq_replay != NULL)
		evbuffer_free(rq->rq_replay);
	free(rq->rq_host);
	free(rq->rq_path);
	upstreams_unref(rq->rq_ups);
	config_unref(rq->rq_cf);
	free(rq);
}

static void
conn_free_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;

	(void)fd;
	(void)what;
	/* Only a connection that failed at accept is still counted here. */
	if (c->cn_counted)
		clients_conn_del((const struct sockaddr *)&c->cn_peer);
	conn_sbx_release(c);
	request_free(c);
	conn_icpt_free(c);
	if (c->cn_bev != NULL)
		bufferevent_free(c->cn_bev);
	if (c->cn_timer != NULL)
		event_free(c->cn_timer);
	if (c->cn_free != NULL)
		event_free(c->cn_free);
	free(c);
}

/*
 * The only way a connection ends (conn_int.h). Writes the pending
 * request's audit line with reason r, switches every callback off and
 * frees the connection from the loop; a second call does nothing.
 */
void
conn_close(struct conn *c, enum reason r)
{
	const struct request *rq = c->cn_req;

	if (c->cn_state == CONN_S_CLOSED)
		return;
	/* Only relay_admit() makes a request ok: a close cannot. */
	if (r == REASON_OK && rq != NULL && rq->rq_reason != REASON_OK)
		r = rq->rq_reason;
	log_debug("conn %p: close in %s: %s", (void *)c,
	    conn_state_names[c->cn_state], reason_name(r));
	audit_wait_cancel(c->cn_env->pe_audit, &c->cn_aw);
	request_log(c, r);
	conn_icpt_log(c, r);
	/* Before the upstream socket goes (below): its events are on it. */
	tunnel_splice_stop(c->cn_req);
	conn_set_state(c, CONN_S_CLOSED);
	TAILQ_REMOVE(&relay_conns, c, cn_entry);
	nconns--;
	if (c->cn_counted)
		clients_conn_del((const struct sockaddr *)&c->cn_peer);
	c->cn_counted = 0;
	conn_sbx_release(c);
	metrics_conn_active(-1);
	if (c->cn_bev != NULL) {
		bufferevent_setcb(c->cn_bev, NULL, NULL, NULL, NULL);
		(void)bufferevent_disable(c->cn_bev, EV_READ | EV_WRITE);
	}
	if (c->cn_timer != NULL)
		evtimer_del(c->cn_timer);
	/*
	 * The upstream connection goes now, not with the conn: one still
	 * resolving or connecting would otherwise call back into a closed
	 * conn. (libevent defers freeing a bufferevent whose callback is
	 * running, so this is safe from inside the upstream's callbacks.)
	 */
	if (c->cn_req != NULL && c->cn_req->rq_up != NULL) {
		struct upconn *uc = c->cn_req->rq_up;
		struct bufferevent *ub = upconn_bev(uc);

		if (ub != NULL)
			bufferevent_setcb(ub, NULL, NULL, NULL, NULL);
		c->cn_req->rq_up = NULL;
		upconn_cancel(uc);
	}
	/*
	 * The free event was made at accept, so this cannot fail: a caller
	 * that goes on after conn_close() still holds valid memory.
	 */
	event_active(c->cn_free, EV_TIMEOUT, 0);
}

static void
conn_linger_start(struct conn *c)
{
	struct timeval tv = sl_ms_tv(CONN_LINGER_MS);

	/*
	 * Closing with unread input makes the kernel send a reset, which
	 * can destroy the response before the client reads it. Shut the
	 * write side and discard input until EOF or the linger time.
	 */
	c->cn_lingering = 1;
	evtimer_del(c->cn_timer);
	/*
	 * Under a TLS filter (an intercepted tunnel) the last records may
	 * still wait in the socket's own output: send close_notify after
	 * them and shut the socket only once they are out (polled from the
	 * timer), so the client sees the end at once, not at linger's end.
	 */
	if (bufferevent_get_underlying(c->cn_bev) != NULL) {
		SSL *ssl = bufferevent_openssl_get_ssl(c->cn_bev);

		if (ssl != NULL)
			(void)SSL_shutdown(ssl);
		ERR_clear_error();
		c->cn_tls_wait = 1;
		tv = sl_ms_tv(CONN_TLS_POLL_MS);
		timer_on(c, c->cn_timer, &tv);
		return;
	}
	(void)shutdown(bufferevent_getfd(c->cn_bev), SHUT_WR);
	timer_on(c, c->cn_timer, &tv);
}

/* Write the last response, then close gracefully (FLUSH). */
void
conn_flush_close(struct conn *c)
{
	evtimer_del(c->cn_timer);
	conn_set_state(c, CONN_S_FLUSH);
	bev_on(c, c->cn_bev, EV_READ);
	out_flush(c, c->cn_bev, 1);
	/* Otherwise the write callback starts lingering once it is out. */
	if (evbuffer_get_length(bufferevent_get_output(c->cn_bev)) == 0)
		conn_linger_start(c);
}

/*
 * How a request cut short by cut ends: with cut once admitted, else with
 * its own reason (a head not read whole is a bad_request).
 */
static enum reason
conn_cut(const struct conn *c, enum reason cut)
{
	const struct request *rq = c->cn_req;

	return rq != NULL && rq->rq_reason != REASON_OK ? rq->rq_reason : cut;
}

static void
conn_header_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;

	(void)fd;
	(void)what;
	/* The event loop refused an event. */
	if (c->cn_broken) {
		conn_close(c, REASON_INTERNAL_ERROR);
		return;
	}
	/* TLS: the last records out? Then shut, and linger as usual. */
	if (c->cn_lingering && c->cn_tls_wait > 0) {
		struct bufferevent *u = bufferevent_get_underlying(c->cn_bev);
		struct timeval tv = sl_ms_tv(CONN_TLS_POLL_MS);

		if ((u == NULL ||
			evbuffer_get_length(bufferevent_get_output(u)) == 0) ||
		    c->cn_tls_wait * CONN_TLS_POLL_MS >= CONN_LINGER_MS) {
			(void)shutdown(bufferevent_getfd(c->cn_bev), SHUT_WR);
			c->cn_tls_wait = 0;
			tv = sl_ms_tv(CONN_LINGER_MS);
		} else
			c->cn_tls_wait++;
		timer_on(c, c->cn_timer, &tv);
		return;
	}
	/* The linger time after a last response is over. */
	if (c->cn_lingering) {
		conn_close(c, REASON_OK);
		return;
	}
	/* An intercepted tunnel's first byte or handshake came too late. */
	if (c->cn_icpt != NULL && !c->cn_icpt->it_ready) {
		c->cn_icpt->it_detail = "timeout";
		conn_close(c, REASON_CLIENT_TLS_ERROR);
		return;
	}
	/* A slow head is dropped without an answer (slowloris). */
	conn_close(c, REASON_BAD_REQUEST);
}

/* Pause the source while the destination holds too much. */
void
backpressure(struct conn *c, struct bufferevent *src, struct bufferevent *dst)
{
	if (evbuffer_get_length(bufferevent_get_output(dst)) > CONN_HIGH_WATER)
		bev_off(c, src, EV_READ);
}

/*
 * Client callbacks.
 */
/*
 * Bytes that wait in the client's input (while the upstream connects, or a
 * pipelined request behind a response) are bounded: reading stops above
 * the high mark and resumes when the state moves on. Not a read watermark:
 * libevent 2.1 allocates the callback behind one in bufferevent_setwatermark
 * and crashes when that allocation fails.
 */
static void
conn_bound_input(struct conn *c)
{
	if (evbuffer_get_length(bufferevent_get_input(c->cn_bev)) >=
	    CONN_HIGH_WATER)
		bev_off(c, c->cn_bev, EV_READ);
}

static void
conn_client_read_cb(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;

	(void)bev;
	switch (c->cn_state) {
	case CONN_S_IDLE:
	case CONN_S_HEAD:
		/* An intercepted CONNECT: TLS or plain HTTP inside? */
		if (c->cn_icpt != NULL && !c->cn_icpt->it_ready) {
			if (!c->cn_icpt->it_tls)
				conn_icpt_sniff(c);
			break;
		}
		conn_step_head(c);
		break;
	case CONN_S_EXCHANGE:
		conn_req_body(c);
		if (c->cn_state == CONN_S_EXCHANGE)
			conn_bound_input(c);
		break;
	case CONN_S_FLUSH: {
		/* What follows a last response is not read, only dropped. */
		struct evbuffer *in = bufferevent_get_input(c->cn_bev);

		c->cn_discarded += evbuffer_get_length(in);
		evbuffer_drain(in, evbuffer_get_length(in));
		/* Lingering is a courtesy; a flood ends it at once. */
		if (c->cn_discarded > CONN_LINGER_MAX)
			conn_close(c, REASON_BAD_REQUEST);
		break;
	}
	default:
		/* UPSTREAM, TUNNEL_WAIT: bytes wait, bounded. */
		conn_bound_input(c);
		break;
	}
}

void
conn_release_cb(void *arg, int ok)
{
	struct conn *c = arg;

	(void)ok; /* the refusal stands either way */
	c->cn_hold = 0;
	out_flush(c, c->cn_bev, 1);
	conn_client_write_cb(c->cn_bev, c);
}

static void
conn_client_write_cb(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	struct request *rq = c->cn_req;
	int empty = evbuffer_get_length(bufferevent_get_output(bev)) == 0;

	if (c->cn_hold)
		return;
	/* Armed only while bytes wait (out_flush). */
	if (empty)
		bev_off(c, bev, EV_WRITE);
	if (c->cn_state == CONN_S_FLUSH) {
		if (empty && !c->cn_lingering)
			conn_linger_start(c);
		return;
	}
	/* Refusals drained (see conn_step_head): read the next requests. */
	if ((c->cn_state == CONN_S_IDLE || c->cn_state == CONN_S_HEAD) &&
	    !(bufferevent_get_enabled(bev) & EV_READ)) {
		bev_on(c, bev, EV_READ);
		if (evbuffer_get_length(bufferevent_get_input(bev)) > 0)
			bufferevent_trigger(bev, EV_READ,
			    BEV_TRIG_DEFER_CALLBACKS);
	}
	/* The client drained the response: read more from upstream. */
	if (c->cn_state == CONN_S_EXCHANGE && rq != NULL && rq->rq_up != NULL &&
	    !rq->rq_rbody.bd_done)
		bev_on(c, upconn_bev(rq->rq_up), EV_READ);
}

static void
conn_client_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct conn *c = arg;
	struct request *rq = c->cn_req;

	if ((what & BEV_EVENT_TIMEOUT) && (what & BEV_EVENT_READING) &&
	    c->cn_state == CONN_S_EXCHANGE && rq != NULL &&
	    rq->rq_body.bd_done) {
		/*
		 * The client has nothing more to say while a long response
		 * streams; the upstream's own timeouts watch the exchange.
		 */
		bev_on(c, bev, EV_READ);
		return;
	}
	if ((what & BEV_EVENT_TIMEOUT) && c->cn_state == CONN_S_IDLE) {
		conn_close(c, REASON_OK); /* idle: no request */
		return;
	}
	/* An intercepted tunnel that ends between requests ended well. */
	if (c->cn_icpt != NULL && c->cn_icpt->it_ready &&
	    c->cn_state == CONN_S_IDLE && (what & BEV_EVENT_EOF)) {
		conn_close(c, REASON_OK);
		return;
	}
	/*
	 * The client went away (EOF, reset or timeout) after its request
	 * was allowed and before the exchange completed (mid-body, while
	 * the upstream connection was being made, or mid-response), or
	 * while its head was read (bad_request).
	 */
	conn_close(c, conn_cut(c, REASON_CLIENT_CLOSED));
}

void
conn_client_setcb(struct conn *c,
    void (*ev)(struct bufferevent *, short, void *))
{
	bufferevent_setcb(c->cn_bev, conn_client_read_cb, conn_client_write_cb,
	    ev != NULL ? ev : conn_client_event_cb, c);
}

void
conn_sbx_attach(struct conn *c, struct sandbox *sb)
{
	conn_sbx_release(c);
	if (sb == NULL)
		return;
	c->cn_sbx = sandbox_ref(sb);
	sb->sb_conns++;
	c->cn_sbx_shared = share_conn(sb->sb_conf.sc_id, &sb->sb_cell, 1) == 0;
	metrics_sandbox_conn(sb->sb_conf.sc_id, 1);
}

void
conn_sbx_release(struct conn *c)
{
	struct sandbox *sb = c->cn_sbx;

	if (sb == NULL)
		return;
	c->cn_sbx = NULL;
	sb->sb_conns--;
	if (c->cn_sbx_shared)
		(void)share_conn(sb->sb_conf.sc_id, &sb->sb_cell, -1);
	c->cn_sbx_shared = 0;
	metrics_sandbox_conn(sb->sb_conf.sc_id, -1);
	sandbox_unref(sb);
}

/*
 * limits.per_sandbox_rps for c's sandbox, over every engine (or this
 * process's bucket when not shared): 0, or the seconds to wait.
 */
int64_t
conn_sbx_rate(struct conn *c, const struct config *cf)
{
	struct sandbox *sb = c->cn_sbx;
	uint64_t rps = cf->cf_limits.per_sandbox_rps;
	int64_t now = proxy_env_mono_us(c->cn_env), wait;

	if ((wait = share_rate(sb->sb_conf.sc_id, &sb->sb_cell, rps, now)) < 0)
		wait = sandbox_rate(sb, rps, now);
	return wait;
}

const char *
conn_sbx_id(const struct conn *c)
{
	return c->cn_sbx != NULL ? c->cn_sbx->sb_conf.sc_id : NULL;
}

/* Over every engine (workers), or this process's when not shared. */
int
conn_sandbox_full(const struct proxy_env *env, const struct sockaddr *peer)
{
	struct sandbox *sb;
	int64_t n;

	if (env->pe_cf->cf_np.np_mode != NETPOLICY_GATEWAY ||
	    (sb = sbx_registry_lookup(env->pe_sbx, peer)) == NULL)
		return 0;
	if ((n = share_conns(sb->sb_conf.sc_id, &sb->sb_cell)) < 0)
		n = (int64_t)sb->sb_conns;
	return (uint64_t)n >= env->pe_cf->cf_limits.per_sandbox_connections;
}

int
conn_accept(struct proxy_env *env, int fd, size_t listener_idx,
    const struct sockaddr *peer, socklen_t peerlen)
{
	struct event_base *base = env->pe_base;
	const struct limits *l = &env->pe_cf->cf_limits;
	const struct listener_conf *lc;
	struct conn *c;
	struct timeval idle, head;

	clients_init(env);
	if ((c = calloc(1, sizeof(*c))) == NULL) {
		close(fd);
		return -1;
	}
	c->cn_env = env;
	c->cn_listener = listener_idx;
	if (peerlen <= sizeof(c->cn_peer))
		memcpy(&c->cn_peer, peer, peerlen);
	if (clients_conn_add((const struct sockaddr *)&c->cn_peer) == -1) {
		close(fd);
		free(c);
		return -1;
	}
	c->cn_counted = 1;
	if (env->pe_cf->cf_np.np_mode == NETPOLICY_GATEWAY)
		conn_sbx_attach(c,
		    sbx_registry_lookup(env->pe_sbx,
			(const struct sockaddr *)&c->cn_peer));
	/* TCP_NODELAY and TCP_NOTSENT_LOWAT: the listener's (conn_sock_tune) */
	c->cn_bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
	c->cn_timer = evtimer_new(base, conn_header_timeout_cb, c);
	c->cn_free = event_new(base, -1, 0, conn_free_cb, c);
	if (c->cn_bev == NULL || c->cn_timer == NULL || c->cn_free == NULL) {
		if (c->cn_bev == NULL)
			close(fd);
		conn_free_cb(-1, 0, c);
		return -1;
	}
	bufferevent_set_max_single_read(c->cn_bev, CONN_IO_MAX);
	bufferevent_set_max_single_write(c->cn_bev, CONN_IO_MAX);
	bufferevent_setcb(c->cn_bev, conn_client_read_cb, conn_client_write_cb,
	    conn_client_event_cb, c);
	bufferevent_setwatermark(c->cn_bev, EV_WRITE, CONN_LOW_WATER, 0);
	idle = sl_ms_tv(l->idle_timeout_ms);
	/* The header timeout runs from accept (slowloris), not first byte. */
	head = sl_ms_tv(l->header_timeout_ms);
	/* Writing is armed only while a response waits (out_flush). */
	if (bufferevent_set_timeouts(c->cn_bev, &idle, &idle) == -1 ||
	    evtimer_add(c->cn_timer, &head) == -1 ||
	    bufferevent_disable(c->cn_bev, EV_WRITE) == -1 ||
	    bufferevent_enable(c->cn_bev, EV_READ) == -1) {
		conn_free_cb(-1, 0, c);
		return -1;
	}
	TAILQ_INSERT_TAIL(&relay_conns, c, cn_entry);
	nconns++;
	metrics_conn_active(1);
	/* Intercept and transparent listeners: a tunnel from the start. */
	lc = conn_listener(c, env->pe_cf);
	if (lc != NULL &&
	    (lc->lc_type == LISTENER_INTERCEPT ||
		lc->lc_type == LISTENER_TRANSPARENT) &&
	    conn_listen_intercept(c) == -1)
		conn_close(c, REASON_INTERNAL_ERROR);
	return 0;
}

size_t
conn_count(void)
{
	return nconns;
}

void
conn_drain(void)
{
	struct conn *c, *next;

	relay_draining = 1;
	for (c = TAILQ_FIRST(&relay_conns); c != NULL; c = next) {
		next = TAILQ_NEXT(c, cn_entry);
		c->cn_draining = 1;
		if (c->cn_state == CONN_S_IDLE)
			conn_close(c, REASON_OK); /* idle: no request */
	}
}

/*
 * The drain's deadline: a request still waiting for its response head gets
 * a 503 drain_timeout (flushed, then closed); everything else in flight is
 * cut now. Returns how many 503s are on their way out.
 */
size_t
conn_drain_cut(void)
{
	struct conn *c, *next;
	size_t n = 0;

	for (c = TAILQ_FIRST(&relay_conns); c != NULL; c = next) {
		const struct request *rq = c->cn_req;

		next = TAILQ_NEXT(c, cn_entry);
		if (c->cn_state == CONN_S_FLUSH)
			continue; /* its last response is on its way */
		if ((c->cn_state == CONN_S_DURABLE ||
			c->cn_state == CONN_S_UPSTREAM ||
			c->cn_state == CONN_S_EXCHANGE) &&
		    rq != NULL && !rq->rq_connect && !rq->rq_head_sent) {
			conn_deny(c, REASON_DRAIN_TIMEOUT, 0);
			n++;
			continue;
		}
		conn_close(c, conn_cut(c, REASON_DRAIN_TIMEOUT));
	}
	return n;
}

void
conn_close_all(void)
{
	struct conn *c;

	while ((c = TAILQ_FIRST(&relay_conns)) != NULL) {
		/* What is still in flight was cut by the drain's end. */
		conn_close(c, conn_cut(c, REASON_DRAIN_TIMEOUT));
	}
	clients_flush();
}
