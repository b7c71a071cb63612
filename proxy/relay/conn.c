/*
 * One client connection (STYLE.md §5): reading request heads, gathering the
 * facts for policy_decide(), answering denials, streaming request and
 * response bodies between the client and an upstream connection with
 * backpressure, and CONNECT tunnels. The state lives in cn_state and
 * changes only in conn_set_state(). Connections are freed from the event
 * loop (conn_close defers), never inside their own callbacks.
 *
 * What it leaves to others: parsing (http1.c), the decision (policy.c),
 * tokens (token.c, tokencache.c), upstream connections (upstream.c), the
 * audit line format (audit.c).
 */
#include <sys/socket.h>
#include <sys/queue.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "proxy/config/config.h"
#include "proxy/dns/resolve.h"
#include "proxy/http/http1.h"
#include "proxy/ops/ops.h"
#include "proxy/policy/policy.h"
#include "proxy/relay/relay.h"
#include "proxy/token/store.h"
#include "proxy/util/util.h"

#ifndef EVBUFFER_IOVEC_IS_NATIVE_
#error "in_fill() passes evbuffer_iovec to readv: it must be struct iovec"
#endif

#define CONN_IO_MAX        262144 /* bytes per read/write call */
#define CONN_HIGH_WATER    262144 /* pause the source above this */
#define CONN_LOW_WATER     65536  /* resume it below this */
#define CONN_RESP_HEAD_MAX 65536  /* bytes of an upstream response head */
#define CONN_MAX_HDRS      1000   /* the parser's field array */
#define CONN_AUDIT_STR     1024   /* bytes of host/path kept for audit */
#define CONN_LINGER_MS     2000   /* reading after a last response */
#define CONN_MAX_DENIALS   64     /* refusals in a row on one connection */
#define CONN_LINGER_MAX    262144 /* bytes discarded while closing */
#define CONN_REPLAY_MAX    65536  /* bytes kept to retry on a fresh upstream */

enum conn_state {
	CONN_S_IDLE = 0,    /* keep-alive: no request yet */
	CONN_S_HEAD,        /* reading a request head */
	CONN_S_UPSTREAM,    /* request allowed, waiting for upstream */
	CONN_S_EXCHANGE,    /* request/response streaming */
	CONN_S_TUNNEL_WAIT, /* CONNECT allowed, waiting for upstream */
	CONN_S_TUNNEL,      /* relaying bytes both ways */
	CONN_S_FLUSH,       /* writing a last response, then close */
	CONN_S_CLOSED,      /* freed from the loop soon */
	CONN_S__COUNT
};

static const char *const conn_state_names[CONN_S__COUNT] = { "idle", "head",
	"upstream", "exchange", "tunnel-wait", "tunnel", "flush", "closed" };

/* Allowed moves: [from] is a bit mask of the states it may go to. */
#define B(s) (1u << (s))
static const unsigned conn_moves[CONN_S__COUNT] = {
	[CONN_S_IDLE] = B(CONN_S_HEAD) | B(CONN_S_CLOSED) | B(CONN_S_FLUSH),
	[CONN_S_HEAD] = B(CONN_S_UPSTREAM) | B(CONN_S_EXCHANGE) |
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

/* What body_relay() does with chunked framing. */
enum body_mode {
	BODY_PASS = 0, /* forward it unchanged (validated) */
	BODY_DECHUNK,  /* forward the payload only (HTTP/1.0 clients) */
	BODY_RECHUNK   /* write framing of our own, drop extensions and trailers
			*/
};

/* How one body (request or response) is being relayed. */
struct body {
	enum http1_body bd_kind;
	uint64_t bd_left;              /* LENGTH: bytes still to come */
	struct http1_chunked bd_chunk; /* CHUNKED */
	enum body_mode bd_mode;        /* what becomes of chunk framing */
	int bd_done;
	uint64_t bd_bytes; /* payload bytes relayed */
};

/*
 * What one request needs until it completes. Allocated when a request
 * head arrives and freed when it is done, so that an idle keep-alive
 * connection holds none of it. Owned by its conn.
 */
struct request {
	struct config *rq_cf;     /* the policy it started with */
	struct upstreams *rq_ups; /* and that policy's upstream state */
	const struct route *rq_route;
	struct upconn *rq_up;
	struct timeval rq_start;
	enum reason rq_reason;
	int rq_status;
	int rq_connect;
	int rq_head_method; /* HEAD: no response body */
	int rq_client_minor;
	int rq_close;                /* close the client afterwards */
	int rq_logged;               /* audit line written */
	int rq_forwarded;            /* a byte went upstream: "allow" */
	int rq_head_sent;            /* response head went to the client */
	int rq_up_close;             /* upstream said close / EOF body */
	uint64_t rq_bytes_in;        /* client to upstream */
	uint64_t rq_bytes_out;       /* upstream to client */
	struct body rq_body;         /* client to upstream */
	struct body rq_rbody;        /* upstream to client */
	struct evbuffer *rq_pending; /* head built before upstream ready */
	struct evbuffer *rq_replay; /* sent on a reused upstream, for a retry */
	int rq_retried;             /* the one retry was made */
	int rq_idempotent;          /* RFC 9110 9.2.2 */
	size_t rq_scan;             /* response head terminator scan */
	char rq_method[24];
	char rq_sub[TOKEN_MAX_STR + 1];
	char rq_jti[TOKEN_MAX_STR + 1];
	char *rq_host;
	char *rq_path;
	char rq_upaddr[56];
	int rq_eof[2];            /* tunnel: read EOF per side */
	struct timeval rq_active; /* tunnel: last byte either way */
	int rq_shut[2];           /* tunnel: write side shut down */
	int64_t rq_expires;       /* tunnel: token exp + leeway */
	int64_t rq_exp;           /* the verified token's exp claim */
	uint64_t rq_budget_limit; /* the decision's budget limit */
	const char *rq_detail;    /* bad_request: what was wrong */
	int rq_auth_strip;        /* Authorization is not the token */
	int rq_auth_removed;      /* ... and was removed upstream */
	char rq_id[CLIENTS_ID_LEN];
};

/*
 * A client connection. Owned by the global list; freed only by
 * conn_free_cb() from the loop after conn_close().
 */
struct conn {
	TAILQ_ENTRY(conn) cn_entry;
	struct proxy_env *cn_env; /* what it was accepted into */
	enum conn_state cn_state;
	size_t cn_listener; /* index into cf_listeners */
	struct bufferevent *cn_bev;
	struct event *cn_timer; /* header deadline */
	struct event *cn_free;  /* frees the conn from the loop */
	struct request *cn_req;
	size_t cn_scan; /* request head terminator scan */
	int cn_draining;
	unsigned cn_denials; /* refusals in a row, for the cap */
	int cn_lingering;    /* FLUSH: write side shut, discarding input */
	int cn_counted;      /* counted in clients_conn_add() */
	int cn_broken;       /* the loop refused an event: close (timer) */
	size_t cn_discarded; /* FLUSH: input bytes thrown away */
	struct sockaddr_in6 cn_peer; /* big enough for both families */
};

TAILQ_HEAD(conn_list, conn);
static struct conn_list conns = TAILQ_HEAD_INITIALIZER(conns);
static size_t nconns;
static int draining;

static void conn_close(struct conn *, const char *why);
static void conn_step_head(struct conn *);
static void conn_client_read_cb(struct bufferevent *, void *);
static void conn_client_write_cb(struct bufferevent *, void *);
static void conn_client_event_cb(struct bufferevent *, short, void *);
static void conn_up_read_cb(struct bufferevent *, void *);
static void conn_up_write_cb(struct bufferevent *, void *);
static void conn_up_event_cb(struct bufferevent *, short, void *);
static void conn_finish(struct conn *);
static void conn_flush_close(struct conn *);

static void
conn_set_state(struct conn *c, enum conn_state to)
{
	if (c->cn_state == to)
		return;
	if ((conn_moves[c->cn_state] & (1u << to)) == 0)
		fatalx("conn: bad move %s -> %s", conn_state_names[c->cn_state],
		    conn_state_names[to]);
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
static void
conn_broken(struct conn *c)
{
	if (c->cn_state == CONN_S_CLOSED || c->cn_broken)
		return;
	c->cn_broken = 1;
	event_active(c->cn_timer, EV_TIMEOUT, 0);
}

static void
bev_on(struct conn *c, struct bufferevent *bev, short what)
{
	if (bufferevent_enable(bev, what) == -1)
		conn_broken(c);
}

static void
bev_off(struct conn *c, struct bufferevent *bev, short what)
{
	if (bufferevent_disable(bev, what) == -1)
		conn_broken(c);
}

static void
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
static void
out_flush(struct conn *c, struct bufferevent *bev, int plain)
{
	struct evbuffer *out = bufferevent_get_output(bev);
	evutil_socket_t fd = bufferevent_getfd(bev);

	if (!plain) {
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
 */
static void
in_fill(struct bufferevent *bev, size_t want)
{
	struct evbuffer *in = bufferevent_get_input(bev);
	evutil_socket_t fd = bufferevent_getfd(bev);
	struct evbuffer_iovec v[2];
	size_t got = 0, chunk, left;
	ssize_t n;
	int nv, i;

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
static void
in_fill_for(struct bufferevent *src, struct bufferevent *dst)
{
	size_t out = evbuffer_get_length(bufferevent_get_output(dst));

	if (out < CONN_HIGH_WATER)
		in_fill(src, CONN_HIGH_WATER - out);
}

static double
elapsed_s(const struct conn *c, const struct timeval *start)
{
	struct timeval now, d;

	event_base_gettimeofday_cached(c->cn_env->pe_base, &now);
	timersub(&now, start, &d);
	return (double)d.tv_sec + (double)d.tv_usec / 1e6;
}

static void
peer_str(const struct conn *c, char *buf, size_t len)
{
	(void)addr_str((const struct sockaddr *)&c->cn_peer, buf, len);
}

static const struct listener_conf *
conn_listener(const struct conn *c, const struct config *cf)
{
	if (c->cn_listener >= cf->cf_nlisteners)
		return NULL;
	return &cf->cf_listeners[c->cn_listener];
}

static char *
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

static struct request *
request_new(struct conn *c)
{
	struct request *rq;

	if ((rq = calloc(1, sizeof(*rq))) == NULL)
		return NULL;
	rq->rq_cf = config_ref(c->cn_env->pe_cf);
	rq->rq_ups = upstreams_ref(c->cn_env->pe_ups);
	rq->rq_reason = REASON_BAD_REQUEST;
	clients_next_id(rq->rq_id, sizeof(rq->rq_id));
	event_base_gettimeofday_cached(c->cn_env->pe_base, &rq->rq_start);
	c->cn_req = rq;
	return rq;
}

/*
 * The audit line and metrics of a request, written exactly once, when it
 * completes or is refused.
 */
static void
request_log(struct conn *c)
{
	struct request *rq = c->cn_req;
	struct audit *a = c->cn_env->pe_audit;
	const struct listener_conf *lc;
	const char *route;
	char client[64];
	double secs;
	int allow;

	if (rq == NULL || rq->rq_logged)
		return;
	rq->rq_logged = 1;
	secs = elapsed_s(c, &rq->rq_start);
	/*
	 * The decision is whether anything was let out; the reason is how
	 * it ended (DESIGN.md "Audit log"): a forwarded request cut by the
	 * upstream, the client, its token or a drain is allow + that reason.
	 */
	allow = rq->rq_forwarded;
	route = rq->rq_route != NULL ? rq->rq_route->rt_audience : NULL;
	if (rq->rq_connect)
		metrics_tunnel(route, allow, rq->rq_reason, rq->rq_bytes_in,
		    rq->rq_bytes_out, secs);
	else
		metrics_request(route, allow, rq->rq_reason, rq->rq_bytes_in,
		    rq->rq_bytes_out, secs);
	if (a == NULL)
		return;
	lc = conn_listener(c, rq->rq_cf);
	peer_str(c, client, sizeof(client));
	/*
	 * A repeat of a refusal just logged is counted, not written; not
	 * while the log is failed, where each line retries the write that
	 * ends that state.
	 */
	if (!allow && !audit_failed(a)) {
		struct clients_refusal cr = {
			(const struct sockaddr *)&c->cn_peer, rq->rq_connect,
			rq->rq_reason, rq->rq_status, rq->rq_id, client,
			lc != NULL ? lc->lc_name : "", route,
			rq->rq_sub[0] != '\0' ? rq->rq_sub : NULL,
			rq->rq_jti[0] != '\0' ? rq->rq_jti : NULL,
			rq->rq_method[0] != '\0' ? rq->rq_method : NULL,
			rq->rq_host, rq->rq_connect ? NULL : rq->rq_path
		};

		if (!clients_aggregate(&cr))
			return;
	}
	audit_begin(a, rq->rq_connect ? "connect.tunnel" : "http.request");
	audit_add_cstr(a, "id", rq->rq_id);
	audit_add_cstr(a, "decision", allow ? "allow" : "deny");
	audit_add_cstr(a, "reason", reason_name(rq->rq_reason));
	audit_add_cstr(a, "listener", lc != NULL ? lc->lc_name : "");
	audit_add_cstr(a, "client", client);
	audit_add_cstr(a, "route", route);
	if (rq->rq_sub[0] != '\0')
		audit_add_cstr(a, "sub", rq->rq_sub);
	if (rq->rq_jti[0] != '\0')
		audit_add_cstr(a, "jti", rq->rq_jti);
	if (rq->rq_method[0] != '\0')
		audit_add_cstr(a, "method", rq->rq_method);
	audit_add_cstr(a, "host", rq->rq_host);
	if (!rq->rq_connect)
		audit_add_cstr(a, "path", rq->rq_path);
	audit_add_int(a, "status", rq->rq_status);
	/* A tunnel that never opened moved no bytes: leave them out. */
	if (!rq->rq_connect || rq->rq_status == 200) {
		audit_add_uint(a, "bytes_in", rq->rq_bytes_in);
		audit_add_uint(a, "bytes_out", rq->rq_bytes_out);
	}
	audit_add_int(a, "duration_ms", (int64_t)(secs * 1000.0));
	if (rq->rq_upaddr[0] != '\0')
		audit_add_cstr(a, "upstream", rq->rq_upaddr);
	if (rq->rq_auth_removed)
		audit_add_bool(a, "authorization_removed", 1);
	(void)audit_commit(a);
}

static void
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
	request_free(c);
	if (c->cn_bev != NULL)
		bufferevent_free(c->cn_bev);
	if (c->cn_timer != NULL)
		event_free(c->cn_timer);
	if (c->cn_free != NULL)
		event_free(c->cn_free);
	free(c);
}

/*
 * The only way a connection ends. Safe to call twice; writes the pending
 * request's audit line once, switches every callback off and frees the
 * connection from the loop.
 */
static void
conn_close(struct conn *c, const char *why)
{
	if (c->cn_state == CONN_S_CLOSED)
		return;
	log_debug("conn %p: close: %s", (void *)c, why);
	request_log(c);
	conn_set_state(c, CONN_S_CLOSED);
	TAILQ_REMOVE(&conns, c, cn_entry);
	nconns--;
	if (c->cn_counted)
		clients_conn_del((const struct sockaddr *)&c->cn_peer);
	c->cn_counted = 0;
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

/*
 * Responses sluice writes itself: the one-sentence message of a denial
 * (DESIGN.md "Responses to denials"). Values from the sandbox go through
 * deny_clean(); nothing secret is ever part of one.
 */
#define MSG_VAL 96 /* bytes of a sandbox value in a message */

/* What a denial's message may name, cleaned (deny_clean) and bounded. */
struct deny_facts {
	char host[MSG_VAL];
	char path[MSG_VAL];
	char method[32];
	char jti[MSG_VAL];
	const char *aud; /* the route's audience, or "" */
};

static void
deny_facts_init(const struct request *rq, struct deny_facts *f)
{
	f->host[0] = f->path[0] = f->method[0] = f->jti[0] = '\0';
	f->aud =
	    rq != NULL && rq->rq_route != NULL ? rq->rq_route->rt_audience : "";
	if (rq == NULL)
		return;
	if (rq->rq_host != NULL)
		deny_clean(f->host, sizeof(f->host), rq->rq_host,
		    strlen(rq->rq_host));
	if (rq->rq_path != NULL)
		deny_clean(f->path, sizeof(f->path), rq->rq_path,
		    strlen(rq->rq_path));
	deny_clean(f->method, sizeof(f->method), rq->rq_method,
	    strlen(rq->rq_method));
	deny_clean(f->jti, sizeof(f->jti), rq->rq_jti, strlen(rq->rq_jti));
}

/* The message of a token failure or a spent budget. */
static void
deny_message_token(struct conn *c, enum reason r, int reverse,
    const struct deny_facts *f, char *msg, size_t len)
{
	const struct request *rq = c->cn_req;
	const struct config *cf = rq != NULL ? rq->rq_cf : c->cn_env->pe_cf;

	switch (r) {
	case REASON_TOKEN_MISSING:
		snprintf(msg, len,
		    "no run token: send it as %sAuthorization: Bearer <token>",
		    reverse ? "" : "Proxy-");
		break;
	case REASON_TOKEN_MALFORMED:
		snprintf(msg, len,
		    "the run token or the header that carries it is malformed");
		break;
	case REASON_TOKEN_UNSUPPORTED_ALG:
		snprintf(msg, len,
		    "the run token's alg is not the algorithm of its key");
		break;
	case REASON_TOKEN_UNKNOWN_KID:
		snprintf(msg, len,
		    "the run token's kid names no configured key, or is "
		    "missing while several keys are configured");
		break;
	case REASON_TOKEN_BAD_SIGNATURE:
		snprintf(msg, len, "the run token's signature does not verify");
		break;
	case REASON_TOKEN_EXPIRED:
		if (rq != NULL && rq->rq_exp != 0)
			snprintf(msg, len, "run token expired %lld s ago",
			    (long long)(proxy_env_now(c->cn_env) - rq->rq_exp));
		else
			snprintf(msg, len, "run token expired");
		break;
	case REASON_TOKEN_NOT_YET_VALID:
		snprintf(msg, len,
		    "run token is not valid yet: its nbf or iat is more than "
		    "tokens.leeway_s (%lld s) in the future",
		    (long long)cf->cf_tokens.tc_leeway_s);
		break;
	case REASON_TOKEN_LIFETIME_TOO_LONG:
		snprintf(msg, len,
		    "run token lifetime is longer than tokens.max_ttl_s");
		break;
	case REASON_TOKEN_WRONG_AUDIENCE:
		snprintf(msg, len, "run token audience does not include %s",
		    f->aud);
		break;
	case REASON_TOKEN_WRONG_ISSUER:
		snprintf(msg, len,
		    "run token iss is missing or not the configured issuer");
		break;
	case REASON_TOKEN_REVOKED:
		snprintf(msg, len, "run token %s has been revoked", f->jti);
		break;
	case REASON_BUDGET_EXHAUSTED:
		if (rq != NULL && rq->rq_budget_limit != 0)
			snprintf(msg, len,
			    "run token %s used its budget of %llu requests",
			    f->jti, (unsigned long long)rq->rq_budget_limit);
		else
			snprintf(msg, len,
			    "run token %s used its request budget", f->jti);
		break;
	default:
		snprintf(msg, len, "the run token was refused");
		break;
	}
}

/* "path /x is not under /v1/messages" (or not in canonical form). */
static void
deny_message_path(const struct request *rq, const struct deny_facts *f,
    char *msg, size_t len)
{
	const struct route *rt = rq != NULL ? rq->rq_route : NULL;
	char prefixes[160];
	size_t i, n, bad;

	prefixes[0] = '\0';
	if (rq != NULL && rq->rq_path != NULL &&
	    path_check(rq->rq_path, strlen(rq->rq_path), &bad) == -1) {
		snprintf(msg, len,
		    "path %s is not in canonical form (a dot or empty "
		    "segment, a backslash or a refused percent-encoding)",
		    f->path);
		return;
	}
	for (i = 0, n = 0; rt != NULL && i < rt->rt_nprefixes; i++) {
		int w = snprintf(prefixes + n, sizeof(prefixes) - n, "%s%s",
		    i > 0 ? ", " : "", rt->rt_prefixes[i]);

		if (w < 0 || (size_t)w >= sizeof(prefixes) - n) {
			/* Cut: end the list with "..." instead. */
			memcpy(prefixes + sizeof(prefixes) - 4, "...", 4);
			break;
		}
		n += (size_t)w;
	}
	snprintf(msg, len, "path %s is not under %s%s", f->path,
	    rt != NULL && rt->rt_nprefixes > 1 ? "any of " : "", prefixes);
}

static void
deny_message(struct conn *c, enum reason r, int reverse, char *msg, size_t len)
{
	struct request *rq = c->cn_req;
	const struct config *cf = rq != NULL ? rq->rq_cf : c->cn_env->pe_cf;
	const struct limits *l = &cf->cf_limits;
	struct deny_facts f;

	deny_facts_init(rq, &f);
	if (reason_is_token(r) || r == REASON_BUDGET_EXHAUSTED) {
		deny_message_token(c, r, reverse, &f, msg, len);
		return;
	}
	if (r == REASON_PATH_NOT_ALLOWED) {
		deny_message_path(rq, &f, msg, len);
		return;
	}
	switch (r) {
	case REASON_ROUTE_NOT_FOUND:
		snprintf(msg, len, "host %s matches no route", f.host);
		break;
	case REASON_METHOD_NOT_ALLOWED:
		if (rq != NULL && rq->rq_connect)
			snprintf(msg, len, "CONNECT is not enabled on route %s",
			    f.aud);
		else
			snprintf(msg, len,
			    "method %s is not allowed on route %s", f.method,
			    f.aud);
		break;
	case REASON_DESTINATION_DENIED:
		snprintf(msg, len,
		    "the upstream of route %s resolves to a denied address "
		    "(private, or sluice's own listener)",
		    f.aud);
		break;
	case REASON_BAD_REQUEST:
		snprintf(msg, len, "the request violates HTTP/1.1: %s",
		    rq != NULL && rq->rq_detail != NULL ? rq->rq_detail :
							  "malformed request");
		break;
	case REASON_HEADERS_TOO_LARGE:
		snprintf(msg, len,
		    "the request head is over limits.max_header_bytes (%llu) "
		    "or limits.max_headers (%llu)",
		    (unsigned long long)l->max_header_bytes,
		    (unsigned long long)l->max_headers);
		break;
	case REASON_BODY_TOO_LARGE:
		snprintf(msg, len,
		    "the request body is over limits.max_body_bytes (%llu)",
		    (unsigned long long)l->max_body_bytes);
		break;
	case REASON_UPSTREAM_UNREACHABLE:
		snprintf(msg, len,
		    "the upstream of route %s could not be reached", f.aud);
		break;
	case REASON_UPSTREAM_TLS_ERROR:
		snprintf(msg, len,
		    "TLS with the upstream of route %s failed (handshake, "
		    "certificate, name or pin)",
		    f.aud);
		break;
	case REASON_UPSTREAM_TIMEOUT:
		snprintf(msg, len,
		    "the upstream of route %s did not answer in time", f.aud);
		break;
	case REASON_UPSTREAM_BAD_RESPONSE:
		snprintf(msg, len,
		    "the upstream of route %s sent a response that violates "
		    "HTTP/1.1",
		    f.aud);
		break;
	case REASON_TOO_MANY_CONNECTIONS:
		snprintf(msg, len,
		    "sluice has limits.max_connections (%llu) connections open",
		    (unsigned long long)l->max_connections);
		break;
	case REASON_AUDIT_UNAVAILABLE:
		snprintf(msg, len,
		    "the audit log cannot be written, so nothing is let out");
		break;
	case REASON_RATE_LIMITED:
		snprintf(msg, len,
		    "this client was refused more than "
		    "limits.per_client_refusals_per_s (%llu) times in a second",
		    (unsigned long long)l->per_client_refusals_per_s);
		break;
	case REASON_INTERNAL_ERROR:
		snprintf(msg, len,
		    "sluice could not go on with this request (out of memory)");
		break;
	default:
		snprintf(msg, len, "the request was refused");
		break;
	}
}

/*
 * Refuse the current request with reason r. The connection stays open only
 * for a refusal that leaves it in sync: no unread request body and not a
 * protocol error.
 */
static void
conn_deny(struct conn *c, enum reason r, int keep)
{
	struct request *rq = c->cn_req;
	const struct listener_conf *lc;
	struct config *cf = rq != NULL ? rq->rq_cf : c->cn_env->pe_cf;
	int reverse, status;
	char msg[DENY_MSG_MAX];

	lc = conn_listener(c, cf);
	reverse = lc != NULL && lc->lc_type == LISTENER_REVERSE;
	/*
	 * A client refused too often in one second is told to slow down, and
	 * shown the door: refusals must not be free. An upstream's failure is
	 * not the client's and is not charged.
	 */
	if (!reason_is_upstream(r) &&
	    clients_refusal((const struct sockaddr *)&c->cn_peer,
		proxy_env_now(c->cn_env),
		cf->cf_limits.per_client_refusals_per_s))
		r = REASON_RATE_LIMITED;
	status = reason_status(r, 0);
	/*
	 * A client refused again and again is shown the door: every refusal
	 * costs an audit line, and it must not get them for free forever.
	 */
	if (status == 400 || status == 413 || status == 431 || status >= 500 ||
	    r == REASON_RATE_LIMITED || draining ||
	    ++c->cn_denials >= CONN_MAX_DENIALS || (rq != NULL && rq->rq_close))
		keep = 0;
	if (rq != NULL) {
		rq->rq_reason = r;
		rq->rq_status = reason_status(r, reverse);
		if (!keep)
			rq->rq_close = 1;
		request_log(c);
	}
	deny_message(c, r, reverse, msg, sizeof(msg));
	if (deny_write(bufferevent_get_output(c->cn_bev), r, reverse, !keep,
		msg, rq != NULL ? rq->rq_id : "") == -1) {
		conn_close(c, "out of memory");
		return;
	}
	if (keep) {
		/* conn_step_head()'s loop reads the next request, if any. */
		request_free(c);
		conn_set_state(c, CONN_S_IDLE);
		out_flush(c, c->cn_bev, 1);
		bev_on(c, c->cn_bev, EV_READ);
		return;
	}
	if (rq != NULL && rq->rq_up != NULL) {
		upconn_cancel(rq->rq_up);
		rq->rq_up = NULL;
	}
	conn_flush_close(c);
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
	(void)shutdown(bufferevent_getfd(c->cn_bev), SHUT_WR);
	evtimer_del(c->cn_timer);
	timer_on(c, c->cn_timer, &tv);
}

/* Write the last response, then close gracefully (FLUSH). */
static void
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
 * Request heads.
 */

static int
is_hop_by_hop(const struct http1_msg *m, const struct http1_hdr *h,
    int has_connection)
{
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

	for (i = 0; i < SL_NELEM(names) && names[i].len <= h->name_len; i++)
		if (names[i].len == h->name_len &&
		    http1_name_eq(h->name, h->name_len, names[i].name))
			return 1;
	/* Only a message with a Connection field has listed names. */
	return has_connection &&
	    http1_connection_lists(m, h->name, h->name_len);
}

/* ASCII case-insensitive name equality with '_' and '-' the same. */
static int
name_eq_dash(const char *name, size_t len, const char *lit)
{
	size_t i;

	if (strlen(lit) != len)
		return 0;
	for (i = 0; i < len; i++) {
		unsigned char a = (unsigned char)name[i],
			      b = (unsigned char)lit[i];

		if (a == '_')
			a = '-';
		if (b == '_')
			b = '-';
		if (a >= 'A' && a <= 'Z')
			a = (unsigned char)(a + 32);
		if (b >= 'A' && b <= 'Z')
			b = (unsigned char)(b + 32);
		if (a != b)
			return 0;
	}
	return 1;
}

static int
add_content_length(struct evbuffer *out, uint64_t n)
{
	char buf[48];
	size_t i = sizeof(buf);

	buf[--i] = '\n';
	buf[--i] = '\r';
	do {
		buf[--i] = (char)('0' + n % 10);
		n /= 10;
	} while (n != 0);
	if (evbuffer_add(out, "Content-Length: ", 16) == -1 ||
	    evbuffer_add(out, buf + i, sizeof(buf) - i) == -1)
		return -1;
	return 0;
}

/* Write the request head sluice sends upstream (DESIGN.md "Headers"). */
static int
build_upstream_head(struct evbuffer *out, const struct http1_msg *m,
    const struct uri *u, const struct route *rt, struct request *rq)
{
	int rc = 0;
	const struct upstream_conf *uc = &rt->rt_up;
	int has_conn = http1_find(m, "connection", 0) != -1;
	size_t i, j;

	rc |= evbuffer_add(out, m->method, m->method_len);
	rc |= evbuffer_add(out, " ", 1);
	rc |= evbuffer_add(out, uc->uc_path, strlen(uc->uc_path));
	rc |= evbuffer_add(out, u->path, u->path_len);
	if (u->query != NULL) {
		rc |= evbuffer_add(out, "?", 1);
		rc |= evbuffer_add(out, u->query, u->query_len);
	}
	rc |= evbuffer_add(out, " HTTP/1.1\r\nHost: ", 17);
	rc |= evbuffer_add(out, uc->uc_authority, strlen(uc->uc_authority));
	rc |= evbuffer_add(out, "\r\n", 2);
	for (i = 0; i < m->nhdrs; i++) {
		const struct http1_hdr *h = &m->hdrs[i];

		/* Framing is written below from what the parser decided. */
		if (http1_name_eq(h->name, h->name_len, "host") ||
		    http1_name_eq(h->name, h->name_len, "content-length") ||
		    is_hop_by_hop(m, h, has_conn))
			continue;
		/*
		 * The sandbox can neither forge nor observe injected ones,
		 * also not under a name that CGI-style upstreams would read
		 * as the same ("X_Cred" for "X-Cred").
		 */
		for (j = 0; j < uc->uc_nheaders; j++)
			if (name_eq_dash(h->name, h->name_len,
				uc->uc_headers[j].uh_name))
				break;
		if (j < uc->uc_nheaders)
			continue;
		/*
		 * Authorization goes upstream only as the verified token: any
		 * other value (another run's token, say) would be charged to a
		 * run sluice never checked.
		 */
		if (rq->rq_auth_strip &&
		    http1_name_eq(h->name, h->name_len, "authorization")) {
			rq->rq_auth_removed = 1;
			continue;
		}
		rc |= evbuffer_add(out, h->name, h->name_len);
		rc |= evbuffer_add(out, ": ", 2);
		rc |= evbuffer_add(out, h->value, h->value_len);
		rc |= evbuffer_add(out, "\r\n", 2);
	}
	for (j = 0; j < uc->uc_nheaders; j++) {
		const struct upstream_header *uh = &uc->uc_headers[j];

		rc |= evbuffer_add(out, uh->uh_name, strlen(uh->uh_name));
		rc |= evbuffer_add(out, ": ", 2);
		rc |= evbuffer_add(out, uh->uh_value, uh->uh_value_len);
		rc |= evbuffer_add(out, "\r\n", 2);
	}
	if (m->body == HTTP1_BODY_CHUNKED)
		rc |= evbuffer_add(out, "Transfer-Encoding: chunked\r\n", 28);
	else if (m->body == HTTP1_BODY_LENGTH)
		rc |= add_content_length(out, m->content_length);
	rc |= evbuffer_add(out, "\r\n", 2);
	return rc;
}

/* Host must agree with an absolute-form or authority-form target. */
static int
host_matches_target(const struct http1_msg *m, const struct uri *u)
{
	struct uri h;
	const char *why;

	if (m->host == NULL)
		return 1;
	if (uri_parse_host(m->host, m->host_len, &h, &why) == -1)
		return 0;
	if (!uri_host_eq(h.host, h.host_len, u->host, u->host_len))
		return 0;
	if (h.has_port)
		return h.port == u->port;
	/*
	 * No port in Host: an absolute-form target's port must be the
	 * scheme default. A CONNECT names its port in the target, and
	 * clients (Node's undici) send Host without it: the host decides.
	 */
	return u->form == URI_ABSOLUTE ?
	    !u->has_port || u->port == (u->https ? 443 : 80) :
	    1;
}

/* RFC 9110 section 9.2.2: a retry cannot do what one request did not. */
static int
method_idempotent(const char *m, size_t len)
{
	static const char *const names[] = { "GET", "HEAD", "OPTIONS", "TRACE",
		"PUT", "DELETE", NULL };
	size_t i;

	for (i = 0; names[i] != NULL; i++)
		if (strlen(names[i]) == len && memcmp(names[i], m, len) == 0)
			return 1;
	return 0;
}

static void conn_start_upstream(struct conn *, const struct http1_msg *,
    const struct uri *);
static void conn_req_body(struct conn *);
static void conn_start_tunnel(struct conn *);

/*
 * A Connection header may make other headers hop-by-hop, and so drop them
 * on the way upstream. Those that carry framing, the destination or the
 * run's credential must reach it as checked: such a request is refused.
 */
static int
connection_lists_protected(const struct http1_msg *m)
{
	static const char *const names[] = { "content-length",
		"transfer-encoding", "host", "authorization", NULL };
	size_t i;

	for (i = 0; names[i] != NULL; i++)
		if (http1_connection_lists(m, names[i], strlen(names[i])))
			return 1;
	return 0;
}

/* Whether any budget can apply to this token (else no lookup needed). */
static int
budget_may_apply(const struct config *cf, const struct token_claims *c)
{
	size_t i;

	if (c->max_requests != 0)
		return 1;
	for (i = 0; i < cf->cf_nroutes; i++)
		if (cf->cf_routes[i].rt_max_requests != 0)
			return 1;
	return 0;
}

static enum reason
conn_verify_token(struct conn *c, const struct http1_msg *m, int connect,
    struct token_claims *claims)
{
	struct request *rq = c->cn_req;
	const struct tokens_conf *tc = &rq->rq_cf->cf_tokens;
	char scratch[TOKEN_MAX_LEN + TOKEN_MAX_STR + 8];
	const char *tok;
	size_t toklen;
	enum reason r;
	int hit;

	const struct listener_conf *lc = conn_listener(c, rq->rq_cf);
	int flags = connect ? TOKEN_CARRIER_CONNECT : 0;

	if (lc != NULL && lc->lc_type == LISTENER_REVERSE)
		flags |= TOKEN_CARRIER_REVERSE;
	r = token_from_request(m, flags, scratch, sizeof(scratch), &tok,
	    &toklen);
	if (r != REASON_OK)
		return r;
	/* An Authorization that is not this token never goes upstream. */
	rq->rq_auth_strip = !connect &&
	    http1_find(m, "Authorization", 0) >= 0 &&
	    !token_authorization_is(m, tok, toklen);
	r = token_cache_verify(c->cn_env->pe_cache, rq->rq_cf->cf_gen,
	    tc->tc_keys, tc->tc_nkeys, tok, toklen, proxy_env_now(c->cn_env),
	    tc->tc_leeway_s, claims, &hit);
	if (c->cn_env->pe_cache != NULL)
		metrics_token_cache(hit);
	explicit_bzero(scratch, sizeof(scratch));
	return r;
}

/*
 * Refuse a request whose head (headlen bytes at the front of the input) was
 * read: drop the head first, so a kept connection reads the next request.
 */
static void
conn_deny_head(struct conn *c, enum reason r, int keep, size_t headlen)
{
	evbuffer_drain(bufferevent_get_input(c->cn_bev), headlen);
	conn_deny(c, r, keep);
}

/* The request's own facts, from its head. */
static void
conn_head_basics(struct request *rq, const struct http1_msg *m)
{
	rq->rq_connect =
	    m->method_len == 7 && memcmp(m->method, "CONNECT", 7) == 0;
	rq->rq_head_method =
	    m->method_len == 4 && memcmp(m->method, "HEAD", 4) == 0;
	rq->rq_idempotent = method_idempotent(m->method, m->method_len);
	rq->rq_client_minor = m->minor;
	snprintf(rq->rq_method, sizeof(rq->rq_method), "%.*s",
	    (int)(m->method_len < sizeof(rq->rq_method) ?
		    m->method_len :
		    sizeof(rq->rq_method) - 1),
	    m->method);
	if ((m->flags & HTTP1_F_CLOSE) || m->minor == 0)
		rq->rq_close = 1;
}

/* Host (host:port for a tunnel) and path as the audit line shows them. */
static void
conn_head_names(struct request *rq, const struct http1_msg *m,
    const struct uri *u)
{
	if (u->host != NULL && rq->rq_connect) {
		/* A tunnel's destination is host and port (DESIGN.md). */
		char hp[300];

		snprintf(hp, sizeof(hp), "%s%.*s%s:%u",
		    u->host_type == URI_HOST_V6 ? "[" : "",
		    (int)(u->host_len < 255 ? u->host_len : 255), u->host,
		    u->host_type == URI_HOST_V6 ? "]" : "", u->port);
		rq->rq_host = dup_capped(hp, strlen(hp));
	} else if (u->host != NULL)
		rq->rq_host = dup_capped(u->host, u->host_len);
	else if (m->host != NULL)
		rq->rq_host = dup_capped(m->host, m->host_len);
	if (u->path != NULL)
		rq->rq_path = dup_capped(u->path, u->path_len);
}

/*
 * The request target against the listener, Host and Connection. Returns 0,
 * or -1 with rq_detail saying why it is a 400.
 */
static int
conn_check_target(struct conn *c, const struct http1_msg *m, struct uri *u)
{
	struct request *rq = c->cn_req;
	const struct listener_conf *lc = conn_listener(c, rq->rq_cf);
	const char *why = "";

	memset(u, 0, sizeof(*u));
	if (uri_parse_target(m->target, m->target_len, rq->rq_connect, u,
		&why) == -1) {
		/*
		 * An unparsable target is not logged: it may hold userinfo or
		 * a query with secrets in it (a token as a URL password).
		 */
		log_debug("conn: bad target: %s", why);
		rq->rq_detail = "the request target is malformed";
		return -1;
	}
	conn_head_names(rq, m, u);
	if (lc == NULL ||
	    (lc->lc_type == LISTENER_FORWARD && u->form == URI_ORIGIN) ||
	    (lc->lc_type == LISTENER_REVERSE && u->form != URI_ORIGIN) ||
	    u->form == URI_ASTERISK) {
		rq->rq_detail = lc != NULL && lc->lc_type == LISTENER_REVERSE ?
		    "this reverse listener takes origin-form targets (/path)" :
		    "a forward proxy takes absolute-form targets "
		    "(http://host/path) or CONNECT host:port";
		return -1;
	}
	/* The authority decides; a Host that differs is a 400 (DESIGN.md). */
	if (u->form != URI_ORIGIN && !host_matches_target(m, u)) {
		rq->rq_detail = "Host differs from the request target";
		return -1;
	}
	if (connection_lists_protected(m)) {
		rq->rq_detail = "Connection lists a header that must reach the "
				"upstream";
		return -1;
	}
	return 0;
}

/* Every fact policy_decide() needs: token, revocation, budget, audit. */
static void
conn_gather(struct conn *c, const struct http1_msg *m, const struct uri *u,
    struct req_view *v, struct token_claims *claims)
{
	struct proxy_env *env = c->cn_env;
	struct request *rq = c->cn_req;
	const struct config *cf = rq->rq_cf;

	memset(v, 0, sizeof(*v));
	v->rv_listener = conn_listener(c, cf);
	v->rv_connect = rq->rq_connect;
	v->rv_method = m->method;
	v->rv_method_len = m->method_len;
	v->rv_uri = u;
	v->rv_audit_failed =
	    env->pe_audit != NULL && audit_failed(env->pe_audit);
	v->rv_token = conn_verify_token(c, m, rq->rq_connect, claims);
	if (v->rv_token != REASON_OK)
		return;
	v->rv_claims = claims;
	snprintf(rq->rq_sub, sizeof(rq->rq_sub), "%s", claims->sub);
	snprintf(rq->rq_jti, sizeof(rq->rq_jti), "%s", claims->jti);
	rq->rq_expires = claims->exp + cf->cf_tokens.tc_leeway_s;
	rq->rq_exp = claims->exp;
	v->rv_revoked = revocations_has(env->pe_revs, cf->cf_revoked,
	    cf->cf_nrevoked, claims->jti);
	if (budget_may_apply(cf, claims))
		v->rv_budget_used = budget_used(env->pe_budget, claims->jti);
}

/*
 * The gates that follow an allowing decision and have effects of their
 * own (a body's size, the audit fsync, the budget charge, in that order:
 * a refusal after the charge would waste a unit of budget). The only
 * place a request's reason becomes REASON_OK. Returns the final reason.
 */
static enum reason
conn_admit(struct conn *c, const struct http1_msg *m, const struct decision *d,
    const struct token_claims *claims)
{
	struct proxy_env *env = c->cn_env;
	struct request *rq = c->cn_req;
	const struct config *cf = rq->rq_cf;
	uint64_t used;
	int rc;

	if (d->de_reason != REASON_OK)
		return d->de_reason;
	if (!rq->rq_connect && m->body == HTTP1_BODY_LENGTH &&
	    m->content_length > cf->cf_limits.max_body_bytes)
		return REASON_BODY_TOO_LARGE;
	if (cf->cf_audit.ac_fsync == AUDIT_FSYNC_ALWAYS &&
	    audit_sync(env->pe_audit) == -1)
		return REASON_AUDIT_UNAVAILABLE;
	if (d->de_budget_limit != 0) {
		rc = budget_charge(env->pe_budget, claims->jti, claims->exp,
		    d->de_budget_limit, &used);
		/* A charge that cannot be recorded is not granted. */
		if (rc != 0) {
			if (rc == -1)
				log_warnx("budget: cannot charge; denying");
			return REASON_BUDGET_EXHAUSTED;
		}
	}
	rq->rq_reason = REASON_OK;
	return REASON_OK;
}

/* An admitted request: open the tunnel, or start the upstream leg. */
static void
conn_forward(struct conn *c, const struct http1_msg *m, const struct uri *u,
    size_t headlen)
{
	struct request *rq = c->cn_req;

	c->cn_denials = 0;
	if (rq->rq_connect) {
		evbuffer_drain(bufferevent_get_input(c->cn_bev), headlen);
		conn_start_tunnel(c);
		return;
	}
	rq->rq_body.bd_kind = m->body;
	rq->rq_body.bd_left = m->content_length;
	/*
	 * A chunked request body goes upstream in framing of our own: no
	 * extensions, no trailers, canonical sizes, so the upstream cannot
	 * read it differently from the way it was checked.
	 */
	rq->rq_body.bd_mode = BODY_RECHUNK;
	http1_chunked_init(&rq->rq_body.bd_chunk);
	if (m->body == HTTP1_BODY_NONE ||
	    (m->body == HTTP1_BODY_LENGTH && m->content_length == 0))
		rq->rq_body.bd_done = 1;
	conn_start_upstream(c, m, u);
	/*
	 * The slices in m point into the input: drain only now, and only
	 * then relay body bytes already read (a pooled upstream is ready).
	 */
	evbuffer_drain(bufferevent_get_input(c->cn_bev), headlen);
	if (c->cn_state == CONN_S_EXCHANGE)
		conn_req_body(c);
}

/*
 * A complete head is in buf[0..headlen): decide, then answer or forward.
 */
static void
conn_handle_head(struct conn *c, const struct http1_msg *m, size_t headlen)
{
	struct request *rq = c->cn_req;
	struct token_claims claims;
	struct req_view v;
	struct decision d;
	struct uri u;
	enum reason r;

	conn_head_basics(rq, m);
	if (conn_check_target(c, m, &u) == -1) {
		conn_deny_head(c, REASON_BAD_REQUEST, 0, headlen);
		return;
	}
	conn_gather(c, m, &u, &v, &claims);
	policy_decide(rq->rq_cf, &v, proxy_env_now(c->cn_env), &d);
	rq->rq_route = d.de_route;
	rq->rq_budget_limit = d.de_budget_limit;
	r = conn_admit(c, m, &d, &claims);
	explicit_bzero(&claims, sizeof(claims));
	if (r != REASON_OK) {
		conn_deny_head(c, r,
		    m->body == HTTP1_BODY_NONE && !rq->rq_connect, headlen);
		return;
	}
	conn_forward(c, m, &u, headlen);
}

static void
conn_header_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;

	(void)fd;
	(void)what;
	if (c->cn_broken) {
		if (c->cn_req != NULL)
			c->cn_req->rq_reason = REASON_INTERNAL_ERROR;
		conn_close(c, "the event loop refused an event");
		return;
	}
	if (c->cn_lingering) {
		conn_close(c, "linger time over");
		return;
	}
	/* A slow head is dropped without an answer (slowloris). */
	if (c->cn_req != NULL)
		c->cn_req->rq_reason = REASON_BAD_REQUEST;
	conn_close(c, "header timeout");
}

/*
 * Read request heads while the connection waits for one. A loop, not
 * recursion: a client may pipeline many requests that are each refused.
 */
static void
conn_step_head(struct conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->cn_bev);
	const struct limits *l;
	struct http1_hdr hdrs[CONN_MAX_HDRS]; /* valid for one parse */
	struct http1_msg m;
	size_t len, n, end;
	ssize_t rc;
	const char *p;

	while ((c->cn_state == CONN_S_IDLE || c->cn_state == CONN_S_HEAD) &&
	    (len = evbuffer_get_length(in)) > 0) {
		/*
		 * Refusals to pipelined requests pile up in the output when
		 * the client does not read: stop reading until they drain.
		 */
		if (evbuffer_get_length(bufferevent_get_output(c->cn_bev)) >
		    CONN_HIGH_WATER) {
			bev_off(c, c->cn_bev, EV_READ);
			return;
		}
		if (c->cn_state == CONN_S_IDLE) {
			if (draining || c->cn_draining) {
				conn_close(c, "draining");
				return;
			}
			if (request_new(c) == NULL) {
				conn_close(c, "out of memory");
				return;
			}
			conn_set_state(c, CONN_S_HEAD);
			c->cn_scan = 0;
			/* The first request's deadline runs from accept. */
			if (!evtimer_pending(c->cn_timer, NULL)) {
				struct timeval tv =
				    sl_ms_tv(c->cn_req->rq_cf->cf_limits
						 .header_timeout_ms);

				timer_on(c, c->cn_timer, &tv);
			}
		}
		l = &c->cn_req->rq_cf->cf_limits;
		n = len < l->max_header_bytes ? len :
						(size_t)l->max_header_bytes;
		if ((p = (const char *)evbuffer_pullup(in, (ssize_t)n)) ==
		    NULL) {
			conn_close(c, "out of memory");
			return;
		}
		memset(&m, 0, sizeof(m));
		m.hdrs = hdrs;
		m.max_hdrs = (size_t)l->max_headers;
		/* cn_scan: bytes seen before, so old ones are not rescanned. */
		rc = http1_parse_request(&m, p, n, c->cn_scan);
		c->cn_scan = n;
		if (rc == -2) {
			if (n >= l->max_header_bytes)
				conn_deny(c, REASON_HEADERS_TOO_LARGE, 0);
			return;
		}
		if (rc == -1) {
			log_debug("conn: bad request: %s",
			    http1_err_name(m.err));
			c->cn_req->rq_detail = http1_err_name(m.err);
			conn_deny(c,
			    http1_err_status(m.err) == 431 ?
				REASON_HEADERS_TOO_LARGE :
				REASON_BAD_REQUEST,
			    0);
			return;
		}
		end = (size_t)rc;
		evtimer_del(c->cn_timer);
		conn_handle_head(c, &m, end);
	}
}

/*
 * Bodies.
 */

/* A chunk-size line: lower-case hex, no extension. */
static int
chunk_line(struct evbuffer *dst, size_t n)
{
	char buf[2 * sizeof(size_t) + 2];
	size_t i = sizeof(buf);

	buf[--i] = '\n';
	buf[--i] = '\r';
	do {
		buf[--i] = "0123456789abcdef"[n & 0xf];
		n >>= 4;
	} while (n != 0);
	return evbuffer_add(dst, buf + i, sizeof(buf) - i);
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
		    evbuffer_add(dst, "\r\n", 2) == -1)
			return -3;
	} else if (body_move(src, dst, (size_t)used) == -1)
		return -3;
	*counter += (size_t)used;
	b->bd_bytes += data;
	if (http1_chunked_done(&b->bd_chunk)) {
		b->bd_done = 1;
		if (b->bd_mode == BODY_RECHUNK &&
		    evbuffer_add(dst, "0\r\n\r\n", 5) == -1)
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

/* Pause the source while the destination holds too much. */
static void
backpressure(struct conn *c, struct bufferevent *src, struct bufferevent *dst)
{
	if (evbuffer_get_length(bufferevent_get_output(dst)) > CONN_HIGH_WATER)
		bev_off(c, src, EV_READ);
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

static void
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
		rq->rq_reason = r;
		if (!rq->rq_head_sent)
			conn_deny(c, r, 0);
		else
			conn_close(c, "bad request body");
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

static void
conn_start_upstream(struct conn *c, const struct http1_msg *m,
    const struct uri *u)
{
	struct request *rq = c->cn_req;
	struct upconn *uc;
	int rc;

	/* Client bytes wait in the input meanwhile (conn_bound_input). */
	rc = upstream_get(rq->rq_ups, rq->rq_route, 0, conn_upstream_ready_cb,
	    c, &uc);
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
static int
build_client_head(struct conn *c, const struct http1_msg *m)
{
	int rc = 0;
	struct request *rq = c->cn_req;
	struct evbuffer *out = bufferevent_get_output(c->cn_bev);
	char status[13] = "HTTP/1.1 000";
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
		if (is_hop_by_hop(m, h, has_conn) ||
		    (m->body == HTTP1_BODY_LENGTH &&
			http1_name_eq(h->name, h->name_len, "content-length")))
			continue;
		rc |= evbuffer_add(out, h->name, h->name_len);
		rc |= evbuffer_add(out, ": ", 2);
		rc |= evbuffer_add(out, h->value, h->value_len);
		rc |= evbuffer_add(out, "\r\n", 2);
	}
	if (m->status >= 200 && m->body == HTTP1_BODY_CHUNKED &&
	    rq->rq_rbody.bd_mode != BODY_DECHUNK)
		rc |= evbuffer_add(out, "Transfer-Encoding: chunked\r\n", 28);
	else if (m->status >= 200 && m->body == HTTP1_BODY_LENGTH)
		rc |= add_content_length(out, m->content_length);
	if (m->status >= 200 && (rq->rq_close || draining))
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
		rq->rq_reason = r;
		conn_close(c, why);
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
			conn_close(c, "out of memory");
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
	rq->rq_reason = REASON_INTERNAL_ERROR;
	conn_close(c, "out of memory");
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
		rq->rq_reason = rc == -3 ? REASON_INTERNAL_ERROR :
					   REASON_UPSTREAM_BAD_RESPONSE;
		conn_close(c, "bad response body");
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
	rc = upstream_get(rq->rq_ups, rq->rq_route, UPSTREAM_FRESH,
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
	keep = !rq->rq_close && !draining && !c->cn_draining;
	request_log(c);
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

/*
 * CONNECT tunnels.
 */
/*
 * A tunnel lives no longer than its token: at most once a second (on
 * traffic) check expiry and revocation, and close when either ends it.
 * Returns -1 when the tunnel was closed.
 */
static int
tunnel_revalidate(struct conn *c)
{
	struct request *rq = c->cn_req;
	struct timeval now;

	event_base_gettimeofday_cached(c->cn_env->pe_base, &now);
	if (now.tv_sec == rq->rq_active.tv_sec) {
		rq->rq_active = now;
		return 0;
	}
	rq->rq_active = now;
	if ((int64_t)now.tv_sec >= rq->rq_expires) {
		rq->rq_reason = REASON_TOKEN_EXPIRED;
		conn_close(c, "tunnel token expired");
		return -1;
	}
	if (revocations_has(c->cn_env->pe_revs, rq->rq_cf->cf_revoked,
		rq->rq_cf->cf_nrevoked, rq->rq_jti)) {
		rq->rq_reason = REASON_TOKEN_REVOKED;
		conn_close(c, "tunnel token revoked");
		return -1;
	}
	return 0;
}

static void
tunnel_read_cb(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
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
		rq->rq_reason = REASON_INTERNAL_ERROR;
		conn_close(c, "out of memory");
		return;
	}
	out_flush(c, dst, 1);
	backpressure(c, bev, dst);
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

	if (rq->rq_eof[0] && to_up == 0 && !rq->rq_shut[1]) {
		rq->rq_shut[1] = 1;
		(void)shutdown(bufferevent_getfd(ub), SHUT_WR);
	}
	if (rq->rq_eof[1] && to_client == 0 && !rq->rq_shut[0]) {
		rq->rq_shut[0] = 1;
		(void)shutdown(bufferevent_getfd(c->cn_bev), SHUT_WR);
	}
	if (rq->rq_shut[0] && rq->rq_shut[1])
		conn_close(c, "tunnel done");
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
}

static void
tunnel_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct conn *c = arg;
	struct request *rq = c->cn_req;
	int side = bev == c->cn_bev ? 0 : 1;

	if (what & BEV_EVENT_EOF) {
		tunnel_read_cb(bev, c);
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
		conn_close(c, "tunnel idle timeout");
		return;
	}
	/* A reset: whose it was is how the tunnel ended. */
	rq->rq_reason =
	    side == 0 ? REASON_CLIENT_CLOSED : REASON_UPSTREAM_UNREACHABLE;
	conn_close(c, "tunnel error");
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
	    revocations_has(c->cn_env->pe_revs, rq->rq_cf->cf_revoked,
		rq->rq_cf->cf_nrevoked, rq->rq_jti))
		r = REASON_TOKEN_REVOKED;
	if (r != REASON_OK) {
		conn_deny(c, r, 0);
		return;
	}
	ub = upconn_bev(uc);
	upconn_addr(uc, rq->rq_upaddr, sizeof(rq->rq_upaddr));
	event_base_gettimeofday_cached(c->cn_env->pe_base, &rq->rq_active);
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
		tunnel_read_cb(c->cn_bev, c);
}

static void
conn_start_tunnel(struct conn *c)
{
	struct request *rq = c->cn_req;
	struct upconn *uc;

	if (upstream_get(rq->rq_ups, rq->rq_route, UPSTREAM_TUNNEL,
		conn_tunnel_ready_cb, c, &uc) == -1) {
		conn_deny(c, REASON_UPSTREAM_UNREACHABLE, 0);
		return;
	}
	rq->rq_up = uc;
	conn_set_state(c, CONN_S_TUNNEL_WAIT);
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
			conn_close(c, "discarding too much");
		break;
	}
	default:
		/* UPSTREAM, TUNNEL_WAIT: bytes wait, bounded. */
		conn_bound_input(c);
		break;
	}
}

static void
conn_client_write_cb(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	struct request *rq = c->cn_req;
	int empty = evbuffer_get_length(bufferevent_get_output(bev)) == 0;

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
	/*
	 * The client went away (EOF or reset) after its request was
	 * allowed and before the exchange completed: mid-body, while the
	 * upstream connection was being made, or mid-response.
	 */
	if (rq != NULL && rq->rq_reason == REASON_OK &&
	    (c->cn_state == CONN_S_UPSTREAM || c->cn_state == CONN_S_EXCHANGE ||
		c->cn_state == CONN_S_TUNNEL_WAIT))
		rq->rq_reason = REASON_CLIENT_CLOSED;
	if ((what & BEV_EVENT_TIMEOUT) && c->cn_state == CONN_S_IDLE) {
		conn_close(c, "idle timeout");
		return;
	}
	conn_close(c, what & BEV_EVENT_EOF ? "client closed" : "client error");
}

int
conn_accept(struct proxy_env *env, int fd, size_t listener_idx,
    const struct sockaddr *peer, socklen_t peerlen)
{
	struct event_base *base = env->pe_base;
	const struct limits *l = &env->pe_cf->cf_limits;
	struct conn *c;
	struct timeval idle, head;
	int one = 1;

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
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
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
	TAILQ_INSERT_TAIL(&conns, c, cn_entry);
	nconns++;
	metrics_conn_active(1);
	return 0;
}

void
conn_refuse(struct proxy_env *env, int fd, size_t listener_idx,
    const struct sockaddr *peer, int per_client)
{
	struct config *cf = env->pe_cf;
	const struct listener_conf *lc = listener_idx < cf->cf_nlisteners ?
	    &cf->cf_listeners[listener_idx] :
	    NULL;
	const enum reason r = REASON_TOO_MANY_CONNECTIONS;
	struct evbuffer *b = evbuffer_new();
	struct audit *a = env->pe_audit;
	char client[ADDR_STR_LEN], id[CLIENTS_ID_LEN], msg[DENY_MSG_MAX];
	struct clients_refusal cr;

	(void)addr_str(peer, client, sizeof(client));
	clients_next_id(id, sizeof(id));
	if (per_client)
		snprintf(msg, sizeof(msg),
		    "this client address has limits.per_client_connections "
		    "(%llu) connections open",
		    (unsigned long long)cf->cf_limits.per_client_connections);
	else
		snprintf(msg, sizeof(msg),
		    "sluice has limits.max_connections (%llu) connections open",
		    (unsigned long long)cf->cf_limits.max_connections);
	if (b != NULL) {
		/* Best effort: a fresh socket's send buffer takes it whole. */
		if (deny_write(b, r,
			lc != NULL && lc->lc_type == LISTENER_REVERSE, 1, msg,
			id) == 0)
			(void)evbuffer_write(b, fd);
		evbuffer_free(b);
	}
	close(fd);
	metrics_request(NULL, 0, r, 0, 0, 0);
	memset(&cr, 0, sizeof(cr));
	cr.cr_peer = peer;
	cr.cr_reason = r;
	cr.cr_status = 503;
	cr.cr_id = id;
	cr.cr_client = client;
	cr.cr_listener = lc != NULL ? lc->lc_name : "";
	if (a != NULL && (audit_failed(a) || clients_aggregate(&cr))) {
		audit_begin(a, "http.request");
		audit_add_cstr(a, "id", id);
		audit_add_cstr(a, "decision", "deny");
		audit_add_cstr(a, "reason", reason_name(r));
		audit_add_cstr(a, "listener", cr.cr_listener);
		audit_add_cstr(a, "client", client);
		audit_add_int(a, "status", 503);
		(void)audit_commit(a);
	}
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

	draining = 1;
	for (c = TAILQ_FIRST(&conns); c != NULL; c = next) {
		next = TAILQ_NEXT(c, cn_entry);
		c->cn_draining = 1;
		if (c->cn_state == CONN_S_IDLE)
			conn_close(c, "draining");
	}
}

void
conn_close_all(void)
{
	struct conn *c;

	while ((c = TAILQ_FIRST(&conns)) != NULL) {
		/* What is still in flight was cut by the drain's end. */
		if (c->cn_req != NULL && c->cn_req->rq_reason == REASON_OK)
			c->cn_req->rq_reason = REASON_DRAIN_TIMEOUT;
		conn_close(c, "shutdown");
	}
	clients_flush();
}
