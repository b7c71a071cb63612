/*
 * Zero-copy CONNECT tunnels. Once a tunnel has carried TUNNEL_SPLICE_AFTER
 * bytes, both legs are plain sockets and no byte waits in either
 * bufferevent, its bytes go socket -> pipe -> socket with splice(2) and
 * never enter user space (HAProxy's raw_sock does the same). One pipe per
 * direction. The bufferevents stay, switched off, and go with the conn as
 * before. What a tunnel does in tunnel.c it does here too: the byte
 * counts, the token's expiry and revocation checked on traffic, the idle
 * timeout (one timer over both directions), half-closes passed on once
 * the pipe is empty, and backpressure: a source is not read while its pipe
 * holds bytes the destination has not taken, so a tunnel holds at most
 * two pipes' worth. A tunnel that cannot switch (no descriptors, no
 * memory, a pipe the kernel made small) stays buffered.
 */
#include <sys/socket.h>

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>

#include "proxy/config/config.h"
#include "proxy/ops/ops.h"
#include "proxy/relay/conn_int.h"
#include "proxy/relay/relay.h"
#include "proxy/util/util.h"

/*
 * Below this a tunnel is a few small exchanges (a TLS handshake, an API
 * call) and two pipes would cost more syscalls than they save.
 */
#define TUNNEL_SPLICE_AFTER 65536
/*
 * Each pipe is asked for this much (F_SETPIPE_SZ): fewer, larger moves.
 * One the kernel keeps below SPLICE_PIPE_MIN (the user's pipe pages are
 * over fs.pipe-user-pages-soft) is not used.
 */
#define SPLICE_PIPE_SIZE 262144
#define SPLICE_PIPE_MIN  65536
#define SPLICE_ROUNDS    4 /* pipe loads moved per wake-up, then yield */
#define SPLICE_FLAGS     (SPLICE_F_MOVE | SPLICE_F_NONBLOCK)

/*
 * One direction: 0 is client to upstream, 1 upstream to client. Its
 * read EOF is rq_eof[d]; the write side it shuts is rq_shut[1 - d].
 */
struct splice_dir {
	struct splice_tun *sd_tun;
	int sd_d;
	int sd_src, sd_dst;
	int sd_pipe[2];
	size_t sd_cap;  /* the pipe's size */
	size_t sd_held; /* bytes in the pipe, not yet taken by sd_dst */
	struct event *sd_rd, *sd_wr;
	int sd_rd_on, sd_wr_on;
};

struct splice_tun {
	struct conn *st_c;
	struct splice_dir st_d[2];
	struct event *st_idle;
};

static void
splice_arm(struct conn *c, struct event *ev, int *on, int want)
{
	if (want && !*on) {
		if (event_add(ev, NULL) == -1) {
			conn_broken(c);
			return;
		}
		*on = 1;
	} else if (!want && *on) {
		(void)event_del(ev);
		*on = 0;
	}
}

/* Hand the pipe's bytes to the destination. 0, or -1 when closed. */
static int
splice_out(struct splice_dir *sd)
{
	struct conn *c = sd->sd_tun->st_c;
	ssize_t n;

	while (sd->sd_held > 0) {
		n = splice(sd->sd_pipe[0], NULL, sd->sd_dst, NULL, sd->sd_held,
		    SPLICE_FLAGS);
		if (n > 0) {
			sd->sd_held -= (size_t)n;
			continue;
		}
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && errno == EAGAIN) {
			splice_arm(c, sd->sd_wr, &sd->sd_wr_on, 1);
			return 0;
		}
		tunnel_fail(c, 1 - sd->sd_d); /* a reset, or a broken pipe */
		return -1;
	}
	splice_arm(c, sd->sd_wr, &sd->sd_wr_on, 0);
	return 0;
}

/*
 * After a move: read again only once the pipe is empty (backpressure);
 * pass a read EOF on once it is; close when both directions are done.
 * 0, or -1 when closed.
 */
static int
splice_settle(struct splice_dir *sd)
{
	struct conn *c = sd->sd_tun->st_c;
	struct request *rq = c->cn_req;
	int d = sd->sd_d;

	if (sd->sd_held > 0) {
		splice_arm(c, sd->sd_rd, &sd->sd_rd_on, 0);
		return 0;
	}
	if (!rq->rq_eof[d]) {
		splice_arm(c, sd->sd_rd, &sd->sd_rd_on, 1);
		return 0;
	}
	return tunnel_shut(c, d, sd->sd_dst);
}

static void
splice_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct splice_dir *sd = arg;
	struct conn *c = sd->sd_tun->st_c;
	struct request *rq = c->cn_req;
	ssize_t n;
	int round;

	(void)fd;
	(void)what;
	for (round = 0; round < SPLICE_ROUNDS && sd->sd_held == 0; round++) {
		n = splice(sd->sd_src, NULL, sd->sd_pipe[1], NULL, sd->sd_cap,
		    SPLICE_FLAGS);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && errno == EAGAIN)
			break; /* the socket is empty (the pipe was) */
		if (n == -1) {
			tunnel_fail(c, sd->sd_d);
			return;
		}
		if (n == 0) {
			rq->rq_eof[sd->sd_d] = 1;
			splice_arm(c, sd->sd_rd, &sd->sd_rd_on, 0);
			break;
		}
		sd->sd_held = (size_t)n;
		if (sd->sd_d == 0)
			rq->rq_bytes_in += (uint64_t)n;
		else
			rq->rq_bytes_out += (uint64_t)n;
		if (tunnel_revalidate(c) == -1 || splice_out(sd) == -1)
			return;
		if ((size_t)n < sd->sd_cap)
			break; /* most likely all the socket held */
	}
	(void)splice_settle(sd);
}

static void
splice_write_cb(evutil_socket_t fd, short what, void *arg)
{
	struct splice_dir *sd = arg;

	(void)fd;
	(void)what;
	if (splice_out(sd) == -1)
		return;
	(void)splice_settle(sd);
}

/* Idle: no byte either way for idle_timeout_ms (rq_active). */
static void
splice_idle_cb(evutil_socket_t fd, short what, void *arg)
{
	struct splice_tun *st = arg;
	struct conn *c = st->st_c;
	struct request *rq = c->cn_req;
	double idle = (double)rq->rq_cf->cf_limits.idle_timeout_ms / 1000.0;
	double quiet = elapsed_s(c, &rq->rq_active);
	struct timeval tv;

	(void)fd;
	(void)what;
	if (quiet >= idle) {
		conn_close(c, REASON_OK); /* idle: ends as it went */
		return;
	}
	tv = sl_ms_tv((uint64_t)((idle - quiet) * 1000.0) + 1);
	timer_on(c, st->st_idle, &tv);
}

static int
splice_plain(struct bufferevent *bev)
{
	return bufferevent_get_underlying(bev) == NULL &&
	    bufferevent_openssl_get_ssl(bev) == NULL &&
	    evbuffer_get_length(bufferevent_get_input(bev)) == 0 &&
	    evbuffer_get_length(bufferevent_get_output(bev)) == 0;
}

static int
splice_pipe(struct splice_dir *sd)
{
	int sz;

	if (pipe2(sd->sd_pipe, O_NONBLOCK | O_CLOEXEC) == -1) {
		sd->sd_pipe[0] = sd->sd_pipe[1] = -1;
		return -1;
	}
	(void)fcntl(sd->sd_pipe[1], F_SETPIPE_SZ, SPLICE_PIPE_SIZE);
	if ((sz = fcntl(sd->sd_pipe[1], F_GETPIPE_SZ)) < SPLICE_PIPE_MIN)
		return -1;
	sd->sd_cap = (size_t)sz;
	return 0;
}

void
tunnel_splice_free(struct request *rq)
{
	struct splice_tun *st = rq->rq_splice;
	int d, i;

	if (st == NULL)
		return;
	rq->rq_splice = NULL;
	for (d = 0; d < 2; d++) {
		struct splice_dir *sd = &st->st_d[d];

		if (sd->sd_rd != NULL)
			event_free(sd->sd_rd);
		if (sd->sd_wr != NULL)
			event_free(sd->sd_wr);
		for (i = 0; i < 2; i++)
			if (sd->sd_pipe[i] != -1)
				(void)close(sd->sd_pipe[i]);
	}
	if (st->st_idle != NULL)
		event_free(st->st_idle);
	free(st);
}

void
tunnel_splice_stop(struct request *rq)
{
	struct splice_tun *st = rq != NULL ? rq->rq_splice : NULL;
	int d;

	if (st == NULL)
		return;
	for (d = 0; d < 2; d++) {
		(void)event_del(st->st_d[d].sd_rd);
		(void)event_del(st->st_d[d].sd_wr);
		st->st_d[d].sd_rd_on = st->st_d[d].sd_wr_on = 0;
	}
	(void)event_del(st->st_idle);
}

static int
splice_setup(struct conn *c, struct splice_tun *st, int cfd, int ufd)
{
	struct event_base *base = c->cn_env->pe_base;
	int d;

	st->st_c = c;
	for (d = 0; d < 2; d++) {
		struct splice_dir *sd = &st->st_d[d];

		sd->sd_tun = st;
		sd->sd_d = d;
		sd->sd_src = d == 0 ? cfd : ufd;
		sd->sd_dst = d == 0 ? ufd : cfd;
		sd->sd_pipe[0] = sd->sd_pipe[1] = -1;
	}
	for (d = 0; d < 2; d++) {
		struct splice_dir *sd = &st->st_d[d];

		if (splice_pipe(sd) == -1)
			return -1;
		sd->sd_rd = event_new(base, sd->sd_src, EV_READ | EV_PERSIST,
		    splice_read_cb, sd);
		sd->sd_wr = event_new(base, sd->sd_dst, EV_WRITE | EV_PERSIST,
		    splice_write_cb, sd);
		if (sd->sd_rd == NULL || sd->sd_wr == NULL)
			return -1;
	}
	st->st_idle = evtimer_new(base, splice_idle_cb, st);
	return st->st_idle == NULL ? -1 : 0;
}

/*
 * Called by tunnel.c whenever both of a tunnel's bufferevents may be
 * empty: moves the tunnel to splice(2) if it qualifies. 1 when it did
 * (the bufferevents are off from now on), else 0.
 */
int
tunnel_splice_try(struct conn *c)
{
	struct request *rq = c->cn_req;
	struct bufferevent *ub;
	struct splice_tun *st;
	struct timeval tv;
	int d;

	if (rq == NULL || rq->rq_splice != NULL || rq->rq_nosplice ||
	    c->cn_state != CONN_S_TUNNEL ||
	    rq->rq_bytes_in + rq->rq_bytes_out < TUNNEL_SPLICE_AFTER ||
	    rq->rq_eof[0] || rq->rq_eof[1] || rq->rq_shut[0] || rq->rq_shut[1])
		return 0;
	ub = upconn_bev(rq->rq_up);
	if (ub == NULL || !splice_plain(c->cn_bev) || !splice_plain(ub))
		return 0;
	if ((st = calloc(1, sizeof(*st))) == NULL) {
		rq->rq_nosplice = 1;
		return 0;
	}
	rq->rq_splice = st;
	if (splice_setup(c, st, bufferevent_getfd(c->cn_bev),
		bufferevent_getfd(ub)) == -1) {
		tunnel_splice_free(rq); /* stays buffered, for good */
		rq->rq_nosplice = 1;
		return 0;
	}
	if (bufferevent_disable(c->cn_bev, EV_READ | EV_WRITE) == -1 ||
	    bufferevent_disable(ub, EV_READ | EV_WRITE) == -1)
		conn_broken(c);
	for (d = 0; d < 2; d++)
		splice_arm(c, st->st_d[d].sd_rd, &st->st_d[d].sd_rd_on, 1);
	tv = sl_ms_tv(rq->rq_cf->cf_limits.idle_timeout_ms);
	timer_on(c, st->st_idle, &tv);
	metrics_tunnel_spliced();
	log_debug("conn %p: tunnel spliced after %" PRIu64 " bytes", (void *)c,
	    rq->rq_bytes_in + rq->rq_bytes_out);
	return 1;
}
