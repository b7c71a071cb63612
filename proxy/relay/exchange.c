/*
 * The exchange of an admitted request: the request head and body going
 * upstream (the head as rewrite.c decides it, a chunked body re-chunked),
 * the upstream connection, one retry on a fresh one, and the response
 * relayed back to the client.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "proxy/config/config.h"
#include "proxy/http/http1.h"
#include "proxy/http/rewrite.h"
#include "proxy/ops/ops.h"
#include "proxy/relay/conn_int.h"
#include "proxy/relay/relay.h"
#include "proxy/util/util.h"

static void conn_up_read_cb(struct bufferevent *, void *);
static void conn_up_write_cb(struct bufferevent *, void *);
static void conn_up_event_cb(struct bufferevent *, short, void *);
static void conn_finish(struct conn *);

/*
 * Write the request head sluice sends upstream (rewrite.c decides it):
 * in one piece, so a head is never cut in the output.
 */
static int
build_upstream_head(struct evbuffer *out, const struct http1_msg *m,
    const struct uri *u, const struct route *rt, struct request *rq)
{
	const struct upstream_conf *uc = &rt->rt_up;
	struct rw_field inject[RW_INJECT_MAX];
	struct rw_upstream up;
	struct evbuffer_iovec v;
	char auth[300];
	size_t i, need;

	if (uc->uc_nheaders > RW_INJECT_MAX)
		return -1;
	for (i = 0; i < uc->uc_nheaders; i++) {
		const struct upstream_header *uh = &uc->uc_headers[i];

		inject[i].name = uh->uh_name;
		inject[i].name_len = strlen(uh->uh_name);
		inject[i].value = (const char *)uh->uh_value;
		inject[i].value_len = uh->uh_value_len;
	}
	memset(&up, 0, sizeof(up));
	if (!uc->uc_as_requested) {
		up.authority = uc->uc_authority;
		up.authority_len = strlen(uc->uc_authority);
		up.path = uc->uc_path;
		up.path_len = strlen(uc->uc_path);
	}
	up.inject = inject;
	up.ninject = uc->uc_nheaders;
	up.drop_authorization = rq->rq_auth_strip;
	if (uc->uc_as_requested) {
		/*
		 * An allowlisted host gets the request as asked: its name in
		 * Host, the path unchanged, nothing injected, and never the
		 * run token (its carrier goes; Proxy-Authorization is
		 * hop-by-hop, another Authorization goes as rq_auth_strip).
		 */
		snprintf(auth, sizeof(auth), "%s%s%s",
		    strchr(rq->rq_dest, ':') ? "[" : "", rq->rq_dest,
		    strchr(rq->rq_dest, ':') ? "]" : "");
		if (rq->rq_dest_port != (rq->rq_dest_tls ? 443 : 80))
			snprintf(auth + strlen(auth),
			    sizeof(auth) - strlen(auth), ":%u",
			    rq->rq_dest_port);
		up.authority = auth;
		up.authority_len = strlen(auth);
		up.path = "";
		up.path_len = 0;
	}
	if ((uc->uc_strip_token || uc->uc_as_requested) &&
	    rq->rq_carrier != NULL) {
		up.drop_carrier = rq->rq_carrier;
		up.drop_carrier_len = strlen(rq->rq_carrier);
	}
	need = rw_request_head(m, u, &up, NULL, 0, NULL);
	if (need > SSIZE_MAX ||
	    evbuffer_reserve_space(out, (ev_ssize_t)need, &v, 1) != 1 ||
	    v.iov_len < need)
		return -1;
	v.iov_len = rw_request_head(m, u, &up, v.iov_base, v.iov_len,
	    &rq->rq_auth_removed);
	return evbuffer_commit_space(out, &v, 1);
}

/*
 * Bodies.
 */

/* A chunk-size line (rewrite.c). */
static int
chunk_line(struct evbuffer *dst, size_t n)
{
	char buf[RW_CHUNK_LINE_MAX];

	return evbuffer_add(dst, buf, rw_chunk_line(buf, n));
}

/*
 * Move n bytes from src to dst. Checked by dst's growth, not by what
 * evbuffer_remove_buffer() returns: libevent 2.1 drains the bytes of a
 * partly moved chain from src and counts them even when adding them to
 * dst failed, which would silently cut a body's framing.
 */
static int
body_move(struct evbuffer *src, struct evbuffer *dst, size_t n)
{
	size_t pre = evbuffer_get_length(dst);

	if (evbuffer_remove_buffer(src, dst, n) != (int)n ||
	    evbuffer_get_length(dst) - pre != n)
		return -1;
	return 0;
}

/*
 * Move as much of body b from src to dst as framing allows, but never a
 * payload byte beyond limit. Returns 0, -1 on a framing error
 * (b->bd_chunk.err says which), -2 when the payload would pass limit
 * (nothing of the offending run is moved) or -3 out of memory (dst's
 * framing may then be cut: close both sides).
 */
static int
body_relay_length(struct body *b, struct evbuffer *src, struct evbuffer *dst,
    uint64_t *counter, size_t avail)
{
	size_t n = b->bd_left < avail ? (size_t)b->bd_left : avail;

	if (body_move(src, dst, n) == -1)
		return -3;
	b->bd_left -= n;
	b->bd_bytes += n;
	*counter += n;
	if (b->bd_left == 0)
		b->bd_done = 1;
	return 0;
}

/* One step of the chunked decoder over the first contiguous piece. */
static int
body_relay_chunk(struct body *b, struct evbuffer *src, struct evbuffer *dst,
    uint64_t *counter, uint64_t limit)
{
	struct evbuffer_iovec v;
	size_t data = 0;
	ssize_t used;

	if (evbuffer_peek(src, -1, NULL, &v, 1) < 1)
		return -1;
	used = http1_chunked_step(&b->bd_chunk, v.iov_base, v.iov_len, &data);
	if (used < 0)
		return -1;
	if (used == 0) {
		b->bd_done = http1_chunked_done(&b->bd_chunk);
		return b->bd_done ? 0 : -1;
	}
	if (data > 0 && b->bd_bytes + data > limit)
		return -2;
	if (data == 0 && b->bd_mode != BODY_PASS)
		(void)evbuffer_drain(src, (size_t)used);
	else if (data > 0 && b->bd_mode == BODY_RECHUNK) {
		if (chunk_line(dst, data) == -1 ||
		    body_move(src, dst, data) == -1 ||
		    evbuffer_add(dst, RW_CHUNK_TAIL, 2) == -1)
			return -3;
	} else if (body_move(src, dst, (size_t)used) == -1)
		return -3;
	*counter += (size_t)used;
	b->bd_bytes += data;
	if (http1_chunked_done(&b->bd_chunk)) {
		b->bd_done = 1;
		if (b->bd_mode == BODY_RECHUNK &&
		    evbuffer_add(dst, RW_CHUNK_LAST, 5) == -1)
			return -3;
	}
	return 0;
}

static int
body_relay(struct body *b, struct evbuffer *src, struct evbuffer *dst,
    uint64_t *counter, uint64_t limit)
{
	size_t avail;
	int rc = 0;

	while (
	    rc == 0 && !b->bd_done && (avail = evbuffer_get_length(src)) > 0) {
		switch (b->bd_kind) {
		case HTTP1_BODY_LENGTH:
			rc = body_relay_length(b, src, dst, counter, avail);
			break;
		case HTTP1_BODY_EOF:
			if (evbuffer_add_buffer(dst, src) == -1)
				return -3;
			b->bd_bytes += avail;
			*counter += avail;
			break;
		case HTTP1_BODY_CHUNKED:
			rc = body_relay_chunk(b, src, dst, counter, limit);
			break;
		default:
			b->bd_done = 1;
			break;
		}
	}
	return rc;
}

/*
 * Keep a copy of what out holds from offset off on (the bytes just relayed)
 * for a retry, up to CONN_REPLAY_MAX in all; past that, or out of memory,
 * no retry is possible and the copy goes.
 */
static void
replay_keep(struct request *rq, struct evbuffer *out, size_t off)
{
	struct evbuffer_iovec v[16];
	struct evbuffer_ptr pos;
	size_t len = evbuffer_get_length(out), done = 0;
	int i, n;

	if (len <= off)
		return;
	if (evbuffer_get_length(rq->rq_replay) + (len - off) > CONN_REPLAY_MAX)
		goto drop;
	while (done < len - off) {
		if (evbuffer_ptr_set(out, &pos, off + done, EVBUFFER_PTR_SET) ==
			-1 ||
		    (n = evbuffer_peek(out, -1, &pos, v, (int)SL_NELEM(v))) <=
			0)
			goto drop;
		for (i = 0; i < n && i < (int)SL_NELEM(v); i++) {
			if (evbuffer_add(rq->rq_replay, v[i].iov_base,
				v[i].iov_len) == -1)
				goto drop;
			done += v[i].iov_len;
		}
	}
	return;
drop:
	evbuffer_free(rq->rq_replay);
	rq->rq_replay = NULL;
}

void
conn_req_body(struct conn *c)
{
	struct request *rq = c->cn_req;
	struct bufferevent *ub;
	const struct limits *l = &rq->rq_cf->cf_limits;
	enum reason r;
	size_t pre;
	int rc;

	if (rq->rq_up == NULL || rq->rq_body.bd_done)
		return;
	ub = upconn_bev(rq->rq_up);
	in_fill_for(c->cn_bev, ub);
	pre = evbuffer_get_length(bufferevent_get_output(ub));
	rc = body_relay(&rq->rq_body, bufferevent_get_input(c->cn_bev),
	    bufferevent_get_output(ub), &rq->rq_bytes_in, l->max_body_bytes);
	if (rq->rq_replay != NULL)
		replay_keep(rq, bufferevent_get_output(ub), pre);
	out_flush(c, ub, !upconn_tls(rq->rq_up));
	if (rc < 0) {
		r = rc == -2 ? REASON_BODY_TOO_LARGE :
		    rc == -3 ? REASON_INTERNAL_ERROR :
			       REASON_BAD_REQUEST;
		if (!rq->rq_head_sent)
			conn_deny(c, r, 0);
		else
			conn_close(c, r); /* a bad request body */
		return;
	}
	if (rq->rq_body.bd_done) {
		/*
		 * Reading goes on (a pipelined request waits in the input,
		 * bounded by the read watermark) so that a client that goes
		 * away is noticed; the next head is parsed after the response.
		 */
		if (rq->rq_rbody.bd_done && rq->rq_head_sent)
			conn_finish(c);
		return;
	}
	backpressure(c, c->cn_bev, ub);
}

/*
 * Upstream connection and response.
 */
static int
conn_up_timeouts(struct conn *c, int waiting_head)
{
	const struct limits *l = &c->cn_req->rq_cf->cf_limits;
	struct timeval rd =
	    sl_ms_tv(waiting_head ? l->upstream_response_timeout_ms :
				    l->idle_timeout_ms);
	struct timeval wr = sl_ms_tv(l->idle_timeout_ms);

	return bufferevent_set_timeouts(upconn_bev(c->cn_req->rq_up), &rd, &wr);
}

/* The request head goes out on the connection. -1: refused (500). */
static int
conn_attach_upstream(struct conn *c)
{
	struct request *rq = c->cn_req;
	struct bufferevent *ub = upconn_bev(rq->rq_up);

	upconn_addr(rq->rq_up, rq->rq_upaddr, sizeof(rq->rq_upaddr));
	bufferevent_setcb(ub, conn_up_read_cb, conn_up_write_cb,
	    conn_up_event_cb, c);
	bufferevent_setwatermark(ub, EV_WRITE, CONN_LOW_WATER, 0);
	if (rq->rq_pending != NULL) {
		if (evbuffer_add_buffer(bufferevent_get_output(ub),
			rq->rq_pending) == -1) {
			conn_deny(c, REASON_INTERNAL_ERROR, 0);
			return -1;
		}
		evbuffer_free(rq->rq_pending);
		rq->rq_pending = NULL;
	}
	if (conn_up_timeouts(c, 1) == -1 ||
	    bufferevent_enable(ub, EV_READ) == -1) {
		conn_deny(c, REASON_INTERNAL_ERROR, 0);
		return -1;
	}
	rq->rq_forwarded = 1;
	rq->rq_sent = sl_mono_tv();
	out_flush(c, ub, !upconn_tls(rq->rq_up));
	conn_set_state(c, CONN_S_EXCHANGE);
	/* Reading may have stopped while connecting (conn_bound_input). */
	bev_on(c, c->cn_bev, EV_READ);
	return 0;
}

static void
conn_upstream_ready_cb(struct upconn *uc, enum reason r, void *arg)
{
	struct conn *c = arg;
	struct request *rq = c->cn_req;

	if (c->cn_state != CONN_S_UPSTREAM || rq == NULL) {
		upconn_cancel(uc); /* cannot happen: conn_close cancels */
		return;
	}
	rq->rq_up = uc;
	if (r != REASON_OK) {
		conn_deny(c, r, 0);
		return;
	}
	/* Body bytes that arrived while connecting. */
	if (conn_attach_upstream(c) == 0)
		conn_req_body(c);
}

void
conn_start_upstream(struct conn *c, const struct http1_msg *m,
    const struct uri *u)
{
	struct request *rq = c->cn_req;
	struct upconn *uc;
	int rc;

	/* Client bytes wait in the input meanwhile (conn_bound_input). */
	rc = upstream_get_to(rq->rq_ups, rq->rq_route, rq->rq_dest,
	    rq->rq_dest_port, rq->rq_dest_tls ? UPSTREAM_TLS : 0,
	    conn_upstream_ready_cb, c, &uc);
	if (rc == -1) {
		conn_deny(c, REASON_UPSTREAM_UNREACHABLE, 0);
		return;
	}
	rq->rq_up = uc;
	if (rc == 0) {
		struct evbuffer *out = bufferevent_get_output(upconn_bev(uc));
		size_t pre = evbuffer_get_length(out);

		/*
		 * A pooled connection may be closed by the upstream at this
		 * very moment: keep what goes out for one retry (conn_retry).
		 */
		if (build_upstream_head(out, m, u, rq->rq_route, rq) == -1) {
			conn_deny(c, REASON_INTERNAL_ERROR, 0);
			return;
		}
		if ((rq->rq_replay = evbuffer_new()) != NULL)
			replay_keep(rq, out, pre);
		conn_set_state(c, CONN_S_UPSTREAM);
		(void)conn_attach_upstream(c);
		return;
	}
	if ((rq->rq_pending = evbuffer_new()) == NULL ||
	    build_upstream_head(rq->rq_pending, m, u, rq->rq_route, rq) == -1) {
		conn_deny(c, REASON_INTERNAL_ERROR, 0);
		return;
	}
	conn_set_state(c, CONN_S_UPSTREAM);
}

/* Write the client's response head from the upstream's (filtered). */
/* Whether a response field's value contains a value sluice injected. */
static int
holds_secret(const struct route *rt, const struct http1_hdr *h)
{
	const struct upstream_conf *uc;
	size_t i;

	if (rt == NULL)
		return 0;
	uc = &rt->rt_up;
	for (i = 0; i < uc->uc_nheaders; i++) {
		const struct upstream_header *uh = &uc->uc_headers[i];

		if (uh->uh_value_len > 0 &&
		    memmem(h->value, h->value_len, uh->uh_value,
			uh->uh_value_len) != NULL)
			return 1;
	}
	return 0;
}

static int
build_client_head(struct conn *c, const struct http1_msg *m)
{
	int rc = 0;
	struct request *rq = c->cn_req;
	struct evbuffer *out = bufferevent_get_output(c->cn_bev);
	char status[13] = "HTTP/1.1 000", cl[RW_CL_LINE_MAX];
	int has_conn = http1_find(m, "connection", 0) != -1;
	size_t i;

	status[9] = (char)('0' + m->status / 100);
	status[10] = (char)('0' + m->status / 10 % 10);
	status[11] = (char)('0' + m->status % 10);
	rc |= evbuffer_add(out, status, 12);
	rc |= evbuffer_add(out, " ", 1);
	rc |= evbuffer_add(out, m->reason, m->reason_len);
	rc |= evbuffer_add(out, "\r\n", 2);
	for (i = 0; i < m->nhdrs; i++) {
		const struct http1_hdr *h = &m->hdrs[i];

		/*
		 * The framing the client sees is the one sluice relays by;
		 * a HEAD or 304 response keeps its informative length.
		 */
		if (rw_hop_by_hop(m, h, has_conn) ||
		    (m->body == HTTP1_BODY_LENGTH &&
			http1_name_eq(h->name, h->name_len, "content-length")))
			continue;
		/* An upstream echoing an injected secret: not to the sandbox.
		 */
		if (holds_secret(rq->rq_route, h)) {
			rq->rq_resp_dropped++;
			metrics_secret_header();
			continue;
		}
		rc |= evbuffer_add(out, h->name, h->name_len);
		rc |= evbuffer_add(out, ": ", 2);
		rc |= evbuffer_add(out, h->value, h->value_len);
		rc |= evbuffer_add(out, "\r\n", 2);
	}
	if (m->status >= 200 && m->body == HTTP1_BODY_CHUNKED &&
	    rq->rq_rbody.bd_mode != BODY_DECHUNK)
		rc |= evbuffer_add(out, "Transfer-Encoding: chunked\r\n", 28);
	else if (m->status >= 200 && m->body == HTTP1_BODY_LENGTH)
		rc |= evbuffer_add(out, cl,
		    rw_content_length(cl, m->content_length));
	if (m->status >= 200 && (rq->rq_close || relay_draining))
		rc |= evbuffer_add(out, "Connection: close\r\n", 19);
	rc |= evbuffer_add(out, "\r\n", 2);
	return rc;
}

static void
conn_up_bad(struct conn *c, enum reason r, const char *why)
{
	struct request *rq = c->cn_req;

	log_debug("conn: upstream: %s", why);
	if (rq->rq_head_sent) {
		/* The client already has part of a response: cut it. */
		conn_close(c, r);
		return;
	}
	conn_deny(c, r, 0);
}

/* How the final response's body is relayed, and what it ends. */
static void
resp_framing(struct request *rq, const struct http1_msg *m)
{
	rq->rq_status = m->status;
	rq->rq_rbody.bd_kind = m->body;
	rq->rq_rbody.bd_left = m->content_length;
	http1_chunked_init(&rq->rq_rbody.bd_chunk);
	if (m->body == HTTP1_BODY_CHUNKED && rq->rq_client_minor == 0)
		rq->rq_rbody.bd_mode = BODY_DECHUNK;
	if (m->body == HTTP1_BODY_EOF || (m->flags & HTTP1_F_CLOSE) ||
	    m->minor == 0)
		rq->rq_up_close = 1;
	/* Close-delimited bodies end the client connection too. */
	if (m->body == HTTP1_BODY_EOF || rq->rq_rbody.bd_mode == BODY_DECHUNK)
		rq->rq_close = 1;
	/* A response before the whole request: cannot resync. */
	if (!rq->rq_body.bd_done)
		rq->rq_close = 1;
	if (m->body == HTTP1_BODY_NONE ||
	    (m->body == HTTP1_BODY_LENGTH && m->content_length == 0))
		rq->rq_rbody.bd_done = 1;
}

static void
conn_resp_head(struct conn *c)
{
	struct request *rq = c->cn_req;
	struct bufferevent *ub = upconn_bev(rq->rq_up);
	struct evbuffer *in = bufferevent_get_input(ub);
	struct http1_hdr hdrs[CONN_MAX_HDRS]; /* valid for one parse */
	struct http1_msg m;
	size_t len, n, end;
	const char *p;
	ssize_t rc;

	for (;;) {
		len = evbuffer_get_length(in);
		if (len == 0)
			return;
		n = len < CONN_RESP_HEAD_MAX ? len : CONN_RESP_HEAD_MAX;
		if ((p = (const char *)evbuffer_pullup(in, (ssize_t)n)) ==
		    NULL) {
			/* Out of memory, closed as allowed (a response cut). */
			conn_close(c, REASON_OK);
			return;
		}
		memset(&m, 0, sizeof(m));
		m.hdrs = hdrs;
		m.max_hdrs = CONN_MAX_HDRS;
		rc = http1_parse_response(&m, p, n, rq->rq_scan,
		    rq->rq_head_method);
		rq->rq_scan = n;
		if (rc == -2) {
			if (n >= CONN_RESP_HEAD_MAX)
				conn_up_bad(c, REASON_UPSTREAM_BAD_RESPONSE,
				    "response head too large");
			return;
		}
		if (rc == -1 || m.status == 101) {
			conn_up_bad(c, REASON_UPSTREAM_BAD_RESPONSE,
			    rc == -1 ? http1_err_name(m.err) :
				       "unexpected 101");
			return;
		}
		end = (size_t)rc;
		rq->rq_scan = 0;
		if (m.status < 200) {
			/* Interim responses go to HTTP/1.1 clients only. */
			if (rq->rq_client_minor == 1 &&
			    build_client_head(c, &m) == -1)
				goto nomem;
			evbuffer_drain(in, end);
			continue;
		}
		resp_framing(rq, &m);
		metrics_upstream_response(rq->rq_route != NULL ?
			rq->rq_route->rt_audience :
			NULL,
		    elapsed_s(c, &rq->rq_sent));
		if (build_client_head(c, &m) == -1)
			goto nomem;
		evbuffer_drain(in, end);
		rq->rq_head_sent = 1;
		if (conn_up_timeouts(c, 0) == -1)
			goto nomem;
		return;
	}
nomem:
	/* Part of a head may be out: nothing but a close is left. */
	conn_close(c, REASON_INTERNAL_ERROR); /* out of memory */
}

static void
conn_resp_body(struct conn *c)
{
	struct request *rq = c->cn_req;
	struct bufferevent *ub = upconn_bev(rq->rq_up);
	int rc;

	if (!upconn_tls(rq->rq_up))
		in_fill_for(ub, c->cn_bev);
	rc = body_relay(&rq->rq_rbody, bufferevent_get_input(ub),
	    bufferevent_get_output(c->cn_bev), &rq->rq_bytes_out, UINT64_MAX);
	out_flush(c, c->cn_bev, 1);
	if (rc < 0) {
		/* A bad response body. */
		conn_close(c,
		    rc == -3 ? REASON_INTERNAL_ERROR :
			       REASON_UPSTREAM_BAD_RESPONSE);
		return;
	}
	if (rq->rq_rbody.bd_done) {
		if (rq->rq_body.bd_done || rq->rq_close)
			conn_finish(c);
		return;
	}
	backpressure(c, ub, c->cn_bev);
}

static void
conn_up_read_cb(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	struct request *rq = c->cn_req;

	if (c->cn_state != CONN_S_EXCHANGE || rq == NULL)
		return;
	/* Something of a response came: this request is never sent again. */
	if (rq->rq_replay != NULL &&
	    evbuffer_get_length(bufferevent_get_input(bev)) > 0) {
		evbuffer_free(rq->rq_replay);
		rq->rq_replay = NULL;
	}
	if (!rq->rq_head_sent) {
		conn_resp_head(c);
		if (c->cn_state != CONN_S_EXCHANGE)
			return;
		if (!rq->rq_head_sent) {
			out_flush(c, c->cn_bev, 1); /* interim 1xx heads */
			return;
		}
	}
	if (!rq->rq_rbody.bd_done)
		conn_resp_body(c);
	else {
		out_flush(c, c->cn_bev, 1);
		if (rq->rq_body.bd_done || rq->rq_close)
			conn_finish(c);
	}
}

static void
conn_up_write_cb(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;

	if (c->cn_state != CONN_S_EXCHANGE || c->cn_req == NULL ||
	    c->cn_req->rq_up == NULL)
		return;
	if (!upconn_tls(c->cn_req->rq_up) &&
	    evbuffer_get_length(bufferevent_get_output(bev)) == 0)
		bev_off(c, bev, EV_WRITE);
	/* The upstream drained what the client sent: read more. */
	if (!c->cn_req->rq_body.bd_done)
		bev_on(c, c->cn_bev, EV_READ);
}

/*
 * A reused upstream connection closed (or reset) before any byte of the
 * response: the keep-alive race, where the upstream closed an idle
 * connection as sluice sent on it. Send the request again, once, on a
 * fresh connection, when that cannot repeat what the upstream did: the
 * method is idempotent, or the body was not all sent (so the upstream
 * never had the whole request). Returns 0 when a retry started.
 */
static int
conn_retry(struct conn *c, struct bufferevent *bev)
{
	struct request *rq = c->cn_req;
	struct upconn *uc = rq->rq_up;
	int rc;

	if (rq->rq_replay == NULL || rq->rq_retried || rq->rq_head_sent ||
	    evbuffer_get_length(bufferevent_get_input(bev)) > 0 ||
	    (!rq->rq_idempotent && rq->rq_body.bd_done))
		return -1;
	log_debug("conn %p: upstream closed a reused connection; retrying",
	    (void *)c);
	rq->rq_retried = 1;
	bufferevent_setcb(bev, NULL, NULL, NULL, NULL);
	rq->rq_up = NULL;
	upconn_release(uc, 0);
	rq->rq_pending = rq->rq_replay;
	rq->rq_replay = NULL;
	rc = upstream_get_to(rq->rq_ups, rq->rq_route, rq->rq_dest,
	    rq->rq_dest_port,
	    UPSTREAM_FRESH | (rq->rq_dest_tls ? UPSTREAM_TLS : 0),
	    conn_upstream_ready_cb, c, &uc);
	if (rc == -1) {
		conn_deny(c, REASON_UPSTREAM_UNREACHABLE, 0);
		return 0;
	}
	rq->rq_up = uc;
	conn_set_state(c, CONN_S_UPSTREAM);
	return 0;
}

static void
conn_up_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct conn *c = arg;
	struct request *rq = c->cn_req;

	if (rq == NULL || c->cn_state != CONN_S_EXCHANGE)
		return;
	if (what & BEV_EVENT_TIMEOUT) {
		conn_up_bad(c, REASON_UPSTREAM_TIMEOUT, "upstream timeout");
		return;
	}
	if (what & BEV_EVENT_EOF) {
		/* Bytes still buffered are part of the response. */
		conn_up_read_cb(bev, c);
		if (c->cn_state != CONN_S_EXCHANGE || c->cn_req != rq)
			return;
		if (rq->rq_head_sent &&
		    rq->rq_rbody.bd_kind == HTTP1_BODY_EOF) {
			rq->rq_rbody.bd_done = 1;
			rq->rq_up_close = 1;
			conn_finish(c);
			return;
		}
	}
	if (conn_retry(c, bev) == 0)
		return;
	conn_up_bad(c,
	    rq->rq_head_sent ||
		    evbuffer_get_length(bufferevent_get_input(bev)) > 0 ?
		REASON_UPSTREAM_BAD_RESPONSE :
		REASON_UPSTREAM_UNREACHABLE,
	    "upstream closed");
}

/* Both bodies are done: log, give the upstream back, and go idle. */
static void
conn_finish(struct conn *c)
{
	struct request *rq = c->cn_req;
	struct upconn *uc = rq->rq_up;
	int reusable, keep;

	reusable =
	    !rq->rq_up_close && rq->rq_body.bd_done && rq->rq_rbody.bd_done;
	keep = !rq->rq_close && !relay_draining && !c->cn_draining;
	request_log(c, rq->rq_reason);
	if (uc != NULL) {
		bufferevent_setcb(upconn_bev(uc), NULL, NULL, NULL, NULL);
		rq->rq_up = NULL;
		upconn_release(uc, reusable);
	}
	request_free(c);
	if (!keep) {
		conn_flush_close(c);
		return;
	}
	conn_set_state(c, CONN_S_IDLE);
	bev_on(c, c->cn_bev, EV_READ);
	/*
	 * A pipelined request may already be buffered. Read it from the loop:
	 * handling it here would nest one request inside another's callback.
	 */
	if (evbuffer_get_length(bufferevent_get_input(c->cn_bev)) > 0)
		bufferevent_trigger(c->cn_bev, EV_READ,
		    BEV_TRIG_DEFER_CALLBACKS);
}
