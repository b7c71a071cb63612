/*
 * CONNECT tunnels: opened once the upstream is connected, bytes relayed
 * both ways with backpressure, half-closes passed on, and the token
 * checked again (expiry, revocation) while the tunnel lives.
 */
#include <sys/socket.h>
#include <sys/time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "proxy/config/config.h"
#include "proxy/relay/conn_int.h"
#include "proxy/relay/relay.h"
#include "proxy/token/store.h"
#include "proxy/util/util.h"

/*
 * A tunnel lives no longer than its token: at most once a second (on
 * traffic) check expiry and revocation, and close when either ends it.
 * Returns -1 when the tunnel was closed.
 */
int
tunnel_revalidate(struct conn *c)
{
	struct request *rq = c->cn_req;
	struct timeval now = sl_mono_tv(), wall;

	/* rq_active is monotonic (idle); the token's exp is wall clock. */
	if (now.tv_sec == rq->rq_active.tv_sec) {
		rq->rq_active = now;
		return 0;
	}
	rq->rq_active = now;
	event_base_gettimeofday_cached(c->cn_env->pe_base, &wall);
	if ((int64_t)wall.tv_sec >= rq->rq_expires) {
		conn_close(c, REASON_TOKEN_EXPIRED);
		return -1;
	}
	if (proxy_env_revoked(c->cn_env, rq->rq_cf, rq->rq_jti)) {
		conn_close(c, REASON_TOKEN_REVOKED);
		return -1;
	}
	return 0;
}

/* Move what bev read to the other side. */
static void
tunnel_relay(struct bufferevent *bev, struct conn *c)
{
	struct request *rq = c->cn_req;
	struct bufferevent *ub = upconn_bev(rq->rq_up);
	struct bufferevent *dst = bev == c->cn_bev ? ub : c->cn_bev;
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t n;

	in_fill_for(bev, dst);
	n = evbuffer_get_length(in);
	if (bev == c->cn_bev)
		rq->rq_bytes_in += n;
	else
		rq->rq_bytes_out += n;
	if (n > 0 && tunnel_revalidate(c) == -1)
		return;
	if (evbuffer_add_buffer(bufferevent_get_output(dst), in) == -1) {
		conn_close(c, REASON_INTERNAL_ERROR); /* out of memory */
		return;
	}
	out_flush(c, dst, 1);
	backpressure(c, bev, dst);
}

static void
tunnel_read_cb(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;

	tunnel_relay(bev, c);
	(void)tunnel_splice_try(c);
}

/*
 * Pass EOFs on once everything before them is out, and close the tunnel
 * when both directions are done. rq_eof[0] is the client's read EOF,
 * rq_eof[1] the upstream's.
 */
static void
tunnel_check(struct conn *c)
{
	struct request *rq = c->cn_req;
	struct bufferevent *ub = upconn_bev(rq->rq_up);
	size_t to_up = evbuffer_get_length(bufferevent_get_output(ub));
	size_t to_client =
	    evbuffer_get_length(bufferevent_get_output(c->cn_bev));

	if (rq->rq_eof[0] && to_up == 0 &&
	    tunnel_shut(c, 0, bufferevent_getfd(ub)) == -1)
		return;
	if (rq->rq_eof[1] && to_client == 0)
		(void)tunnel_shut(c, 1, bufferevent_getfd(c->cn_bev));
}

int
tunnel_shut(struct conn *c, int d, int fd)
{
	struct request *rq = c->cn_req;

	if (!rq->rq_shut[1 - d]) {
		rq->rq_shut[1 - d] = 1;
		/*
		 * The last direction to end: close() below sends the FIN
		 * (both sides were read to EOF, so no reset), one syscall
		 * fewer per tunnel.
		 */
		if (!rq->rq_shut[d])
			(void)shutdown(fd, SHUT_WR);
	}
	if (rq->rq_shut[0] && rq->rq_shut[1]) {
		conn_close(c, REASON_OK); /* both directions done */
		return -1;
	}
	return 0;
}

void
tunnel_fail(struct conn *c, int side)
{
	conn_close(c,
	    side == 0 ? REASON_CLIENT_CLOSED : REASON_UPSTREAM_UNREACHABLE);
}

static void
tunnel_write_cb(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	struct request *rq = c->cn_req;
	struct bufferevent *ub = upconn_bev(rq->rq_up);
	struct bufferevent *src = bev == c->cn_bev ? ub : c->cn_bev;
	int side = bev == c->cn_bev ? 1 : 0; /* the side that feeds bev */

	/* Drained below the low mark: the source may send again. */
	if (!rq->rq_eof[side])
		bev_on(c, src, EV_READ);
	if (evbuffer_get_length(bufferevent_get_output(bev)) > 0)
		return;
	bev_off(c, bev, EV_WRITE);
	tunnel_check(c);
	(void)tunnel_splice_try(c);
}

static void
tunnel_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct conn *c = arg;
	struct request *rq = c->cn_req;
	int side = bev == c->cn_bev ? 0 : 1;

	if (what & BEV_EVENT_EOF) {
		tunnel_relay(bev, c);
		if (c->cn_state != CONN_S_TUNNEL)
			return;
		rq->rq_eof[side] = 1;
		bev_off(c, bev, EV_READ);
		tunnel_check(c);
		return;
	}
	if (what & BEV_EVENT_TIMEOUT) {
		/*
		 * One side's read timeout: the tunnel is idle only if the
		 * other direction was quiet too (a download sends nothing up).
		 */
		double quiet = elapsed_s(c, &rq->rq_active) * 1000.0;

		if (!(what & BEV_EVENT_WRITING) && !rq->rq_eof[side] &&
		    quiet < (double)rq->rq_cf->cf_limits.idle_timeout_ms) {
			bev_on(c, bev, EV_READ);
			return;
		}
		conn_close(c, REASON_OK); /* idle: ends as it went */
		return;
	}
	tunnel_fail(c, side); /* a reset: whose it was is how it ended */
}

static void
conn_tunnel_ready_cb(struct upconn *uc, enum reason r, void *arg)
{
	struct conn *c = arg;
	struct request *rq = c->cn_req;
	struct bufferevent *ub;
	struct evbuffer *out = bufferevent_get_output(c->cn_bev);
	const struct limits *l = &rq->rq_cf->cf_limits;
	struct timeval tv;

	if (c->cn_state != CONN_S_TUNNEL_WAIT || rq == NULL) {
		upconn_cancel(uc); /* cannot happen: conn_close cancels */
		return;
	}
	rq->rq_up = uc;
	/* A revocation that arrived while connecting still counts. */
	if (r == REASON_OK && rq->rq_jti[0] != '\0' &&
	    proxy_env_revoked(c->cn_env, rq->rq_cf, rq->rq_jti))
		r = REASON_TOKEN_REVOKED;
	if (r != REASON_OK) {
		conn_deny(c, r, 0);
		return;
	}
	ub = upconn_bev(uc);
	upconn_addr(uc, rq->rq_upaddr, sizeof(rq->rq_upaddr));
	rq->rq_active = sl_mono_tv();
	if (evbuffer_add(out, "HTTP/1.1 200 Connection established\r\n\r\n",
		39) == -1) {
		conn_deny(c, REASON_INTERNAL_ERROR, 0);
		return;
	}
	rq->rq_status = 200;
	rq->rq_forwarded = 1;
	conn_set_state(c, CONN_S_TUNNEL);
	tv = sl_ms_tv(l->idle_timeout_ms);
	bufferevent_setcb(c->cn_bev, tunnel_read_cb, tunnel_write_cb,
	    tunnel_event_cb, c);
	bufferevent_setcb(ub, tunnel_read_cb, tunnel_write_cb, tunnel_event_cb,
	    c);
	bufferevent_setwatermark(c->cn_bev, EV_WRITE, CONN_LOW_WATER, 0);
	bufferevent_setwatermark(ub, EV_WRITE, CONN_LOW_WATER, 0);
	/* Write timeouts too: a peer that stops reading frees its slot. */
	if (bufferevent_set_timeouts(c->cn_bev, &tv, &tv) == -1 ||
	    bufferevent_set_timeouts(ub, &tv, &tv) == -1)
		conn_broken(c);
	bev_on(c, ub, EV_READ);
	bev_on(c, c->cn_bev, EV_READ);
	out_flush(c, ub, 1);
	out_flush(c, c->cn_bev, 1);
	/* Bytes the client sent after the CONNECT head (a ClientHello). */
	if (evbuffer_get_length(bufferevent_get_input(c->cn_bev)) > 0)
		tunnel_relay(c->cn_bev, c);
}

void
conn_start_tunnel(struct conn *c)
{
	struct request *rq = c->cn_req;
	struct upconn *uc;

	if (upstream_get_to(rq->rq_ups, rq->rq_route, rq->rq_dest,
		rq->rq_dest_port, UPSTREAM_TUNNEL, conn_tunnel_ready_cb, c,
		&uc) == -1) {
		conn_deny(c, REASON_UPSTREAM_UNREACHABLE, 0);
		return;
	}
	rq->rq_up = uc;
	conn_set_state(c, CONN_S_TUNNEL_WAIT);
}
