/*
 * Request heads: reading and validating them, gathering the facts
 * policy_decide() needs, the admit step that follows an allowing decision,
 * and handing an admitted request on (exchange.c, tunnel.c) or a refused
 * one to conn_deny() (respond.c).
 */
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "proxy/config/config.h"
#include "proxy/http/http1.h"
#include "proxy/http/rewrite.h"
#include "proxy/ops/ops.h"
#include "proxy/policy/policy.h"
#include "proxy/relay/conn_int.h"
#include "proxy/relay/relay.h"
#include "proxy/token/store.h"
#include "proxy/token/token.h"
#include "proxy/util/util.h"

static audit_wait_cb conn_durable_cb;

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

/*
 * The route whose token_header may carry the token: the reverse
 * listener's, or the one the target selects (the decision may still pick
 * another among routes sharing an upstream). NULL: none.
 */
static const char *
conn_token_header(const struct config *cf, const struct listener_conf *lc,
    const struct uri *u, int connect)
{
	const struct route *rt = NULL;

	if (lc != NULL && lc->lc_type == LISTENER_REVERSE &&
	    lc->lc_route_idx < cf->cf_nroutes)
		rt = &cf->cf_routes[lc->lc_route_idx];
	else if (!connect && u->host != NULL)
		rt = policy_route_for(cf, u, 0);
	return rt != NULL ? rt->rt_token_header : NULL;
}

static enum reason
conn_verify_token(struct conn *c, const struct http1_msg *m,
    const struct uri *u, int connect, struct token_claims *claims)
{
	struct request *rq = c->cn_req;
	const struct tokens_conf *tc = &rq->rq_cf->cf_tokens;
	char scratch[TOKEN_MAX_LEN + TOKEN_MAX_STR + 8];
	const char *tok;
	size_t toklen;
	enum reason r;
	int hit;

	const struct listener_conf *lc = conn_listener(c, rq->rq_cf);
	const char *named = conn_token_header(rq->rq_cf, lc, u, connect);
	int flags = connect ? TOKEN_CARRIER_CONNECT : 0;
	ssize_t i;

	if (lc != NULL && lc->lc_type == LISTENER_REVERSE)
		flags |= TOKEN_CARRIER_REVERSE;
	r = token_from_request(m, flags, named, scratch, sizeof(scratch), &tok,
	    &toklen);
	/* Which field held it, for strip_token. */
	if (r == REASON_OK && named != NULL &&
	    (i = http1_find(m, named, 0)) >= 0 && tok == m->hdrs[i].value)
		rq->rq_carrier = named;
	else if (r == REASON_OK && !connect &&
	    token_authorization_is(m, tok, toklen))
		rq->rq_carrier = "authorization";
	/* Inside an intercepted CONNECT, the CONNECT's token stands in. */
	if (r == REASON_TOKEN_MISSING && c->cn_icpt != NULL &&
	    c->cn_icpt->it_token != NULL) {
		tok = c->cn_icpt->it_token;
		toklen = c->cn_icpt->it_toklen;
		r = REASON_OK;
	}
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
	/* Set again when a request resumes after its audit line. */
	free(rq->rq_host);
	free(rq->rq_path);
	rq->rq_host = rq->rq_path = NULL;
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
	if (c->cn_icpt != NULL) {
		/* Inside an intercepted CONNECT: its authority decides. */
		if (rq->rq_connect || conn_icpt_target(c, m, u, &why) == -1) {
			rq->rq_detail =
			    rq->rq_connect ? "CONNECT inside a tunnel" : why;
			return -1;
		}
		conn_head_names(rq, m, u);
		goto connection;
	}
	conn_head_names(rq, m, u);
	if (lc == NULL || lc->lc_type == LISTENER_INTERCEPT ||
	    lc->lc_type == LISTENER_TRANSPARENT ||
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
connection:
	if (rw_connection_protected(m)) {
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
	v->rv_inner_tls = c->cn_icpt != NULL && c->cn_icpt->it_tls;
	v->rv_method = m->method;
	v->rv_method_len = m->method_len;
	v->rv_uri = u;
	v->rv_audit_failed =
	    env->pe_audit != NULL && audit_failed(env->pe_audit);
	if ((v->rv_gateway = cf->cf_np.np_mode == NETPOLICY_GATEWAY)) {
		/* A sandbox removed since accept (or added since) counts. */
		if (c->cn_sbx != NULL && c->cn_sbx->sb_removed)
			conn_sbx_release(c);
		if (c->cn_sbx == NULL)
			conn_sbx_attach(c,
			    sbx_registry_lookup(env->pe_sbx,
				(const struct sockaddr *)&c->cn_peer));
		v->rv_sandbox = conn_sbx_id(c);
	}
	v->rv_token = conn_verify_token(c, m, u, rq->rq_connect, claims);
	if (v->rv_token != REASON_OK)
		return;
	v->rv_claims = claims;
	snprintf(rq->rq_sub, sizeof(rq->rq_sub), "%s", claims->sub);
	snprintf(rq->rq_jti, sizeof(rq->rq_jti), "%s", claims->jti);
	rq->rq_expires = claims->exp + cf->cf_tokens.tc_leeway_s;
	rq->rq_exp = claims->exp;
	v->rv_revoked = proxy_env_revoked(env, cf, claims->jti);
	if (budget_may_apply(cf, claims))
		v->rv_budget_used = budget_used(env->pe_budget, claims->jti);
}

/*
 * The gates that follow an allowing decision and have effects of their
 * own, in this order: a body's size (relay_admit), the audit line made
 * durable (fsync "always": conn_handle_head() waits for it), the budget
 * charge (relay_charge): a refusal after the charge would waste a unit of
 * budget. relay_charge() is the only place a request's reason becomes
 * REASON_OK. Both return the reason.
 */
static enum reason
relay_admit(struct conn *c, const struct http1_msg *m, const struct decision *d)
{
	const struct config *cf = c->cn_req->rq_cf;

	if (d->de_reason != REASON_OK)
		return d->de_reason;
	if (!c->cn_req->rq_connect && m->body == HTTP1_BODY_LENGTH &&
	    m->content_length > cf->cf_limits.max_body_bytes)
		return REASON_BODY_TOO_LARGE;
	return REASON_OK;
}

/* The token's jti and exp are the request's copies (rq_jti, rq_exp). */
static enum reason
relay_charge(struct conn *c)
{
	struct proxy_env *env = c->cn_env;
	struct request *rq = c->cn_req;
	uint64_t used;
	int rc;

	if (rq->rq_budget_limit != 0) {
		rc = budget_charge(env->pe_budget, rq->rq_jti, rq->rq_exp,
		    rq->rq_budget_limit, &used);
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
	if (rq->rq_connect && rq->rq_route->rt_intercept &&
	    c->cn_env->pe_icpt != NULL) {
		conn_start_intercept(c, m, u, headlen);
		return;
	}
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
	/* One sandbox's flood must not starve the others: its own rate. */
	if (c->cn_sbx != NULL && conn_sbx_rate(c, rq->rq_cf) != 0) {
		explicit_bzero(&claims, sizeof(claims));
		rq->rq_sbx_limited = 1;
		conn_deny_head(c, REASON_RATE_LIMITED, 0, headlen);
		return;
	}
	policy_decide(rq->rq_cf, &v, proxy_env_now(c->cn_env), &d);
	rq->rq_route = d.de_route;
	rq->rq_budget_limit = d.de_budget_limit;
	memcpy(rq->rq_dest, d.de_dest, sizeof(rq->rq_dest));
	rq->rq_dest_port = d.de_dest_port;
	/* Inside an intercepted TLS tunnel: TLS to the host asked too. */
	rq->rq_dest_tls = d.de_dest[0] != '\0' && !rq->rq_connect &&
	    c->cn_icpt != NULL && c->cn_icpt->it_tls;
	rq->rq_report = d.de_report;
	rq->rq_would = d.de_would;
	r = relay_admit(c, m, &d);
	explicit_bzero(&claims, sizeof(claims));
	/*
	 * fsync "always": the line is durable before a byte goes upstream.
	 * Wait for it without holding up the loop; the head stays in the
	 * input and is read again on the way on. An intercepted CONNECT
	 * sends nothing itself: each request inside it has its own line.
	 */
	if (r == REASON_OK && rq->rq_connect && rq->rq_route != NULL &&
	    rq->rq_route->rt_intercept && c->cn_env->pe_icpt != NULL)
		r = relay_charge(c);
	else if (r == REASON_OK) {
		switch (request_log_start(c, conn_durable_cb)) {
		case 1:
			c->cn_park_len = headlen;
			c->cn_park_keep =
			    m->body == HTTP1_BODY_NONE && !rq->rq_connect;
			conn_set_state(c, CONN_S_DURABLE);
			bev_off(c, c->cn_bev, EV_READ);
			return;
		case -1:
			r = REASON_AUDIT_UNAVAILABLE;
			break;
		default:
			r = relay_charge(c);
			break;
		}
	}
	if (r != REASON_OK) {
		conn_deny_head(c, r,
		    m->body == HTTP1_BODY_NONE && !rq->rq_connect, headlen);
		return;
	}
	conn_forward(c, m, &u, headlen);
}

/*
 * A parked request's audit line is durable (ok), or lost: charge and
 * forward it, reading its head again from the input (the parse is the
 * same: the bytes are), or refuse it.
 */
static void
conn_durable_cb(void *arg, int ok)
{
	struct conn *c = arg;
	struct request *rq = c->cn_req;
	const struct limits *l = &rq->rq_cf->cf_limits;
	struct evbuffer *in = bufferevent_get_input(c->cn_bev);
	struct http1_hdr hdrs[CONN_MAX_HDRS];
	struct http1_msg m;
	struct uri u;
	size_t headlen = c->cn_park_len;
	enum reason r;
	const char *p;

	if (c->cn_state != CONN_S_DURABLE)
		return;
	bev_on(c, c->cn_bev, EV_READ);
	r = ok ? relay_charge(c) : REASON_AUDIT_UNAVAILABLE;
	if (r != REASON_OK) {
		conn_deny_head(c, r, c->cn_park_keep, headlen);
		return;
	}
	memset(&m, 0, sizeof(m));
	m.hdrs = hdrs;
	m.max_hdrs = (size_t)l->max_headers;
	if ((p = (const char *)evbuffer_pullup(in, (ssize_t)headlen)) == NULL ||
	    http1_parse_request(&m, p, headlen, 0) != (ssize_t)headlen ||
	    conn_check_target(c, &m, &u) == -1) {
		conn_close(c, REASON_INTERNAL_ERROR);
		return;
	}
	conn_forward(c, &m, &u, headlen);
}

/*
 * Read request heads while the connection waits for one. A loop, not
 * recursion: a client may pipeline many requests that are each refused.
 */
void
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
	    !c->cn_hold && (len = evbuffer_get_length(in)) > 0) {
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
			if (relay_draining || c->cn_draining) {
				conn_close(c,
				    REASON_OK); /* no request: drained */
				return;
			}
			if (request_new(c) == NULL) {
				conn_close(c, REASON_INTERNAL_ERROR);
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
			/* Out of memory: logged as a head not read whole. */
			conn_close(c, REASON_BAD_REQUEST);
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
