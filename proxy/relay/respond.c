/*
 * What sluice answers and records itself: the audit line and metrics of a
 * request, the one-sentence message of a denial and the denial itself,
 * and the refusal of a connection over the limits.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "proxy/config/config.h"
#include "proxy/http/http1.h"
#include "proxy/ops/ops.h"
#include "proxy/relay/conn_int.h"
#include "proxy/relay/relay.h"
#include "proxy/util/util.h"

/* The metrics of a request: r is how it ended. */
static void
request_log_metrics(struct conn *c, const struct request *rq, const char *route,
    int allow, int report, enum reason r, double secs)
{
	if (c->cn_icpt != NULL) {
		c->cn_icpt->it_requests++;
		c->cn_icpt->it_bytes_in += rq->rq_bytes_in;
		c->cn_icpt->it_bytes_out += rq->rq_bytes_out;
	}
	if (rq->rq_connect)
		metrics_tunnel(route, report ? METRICS_REPORT : allow,
		    report ? rq->rq_would : r, rq->rq_bytes_in,
		    rq->rq_bytes_out, secs);
	else
		metrics_request(route, report ? METRICS_REPORT : allow,
		    report ? rq->rq_would : r, rq->rq_bytes_in,
		    rq->rq_bytes_out, secs);
	if (rq->rq_cf->cf_np.np_mode == NETPOLICY_GATEWAY)
		metrics_sandbox_request(conn_sbx_id(c), allow, r);
}

/*
 * Whether a refusal's line is to be written: a repeat of a refusal just
 * logged is counted, not written.
 */
static int
request_log_refusal(struct conn *c, const struct request *rq,
    const struct listener_conf *lc, const char *route, const char *client,
    enum reason r)
{
	struct clients_refusal cr = { (const struct sockaddr *)&c->cn_peer,
		rq->rq_connect, c->cn_icpt != NULL, r, rq->rq_status, rq->rq_id,
		client, lc != NULL ? lc->lc_name : "", route,
		rq->rq_sub[0] != '\0' ? rq->rq_sub : NULL,
		rq->rq_jti[0] != '\0' ? rq->rq_jti : NULL,
		rq->rq_method[0] != '\0' ? rq->rq_method : NULL, rq->rq_host,
		rq->rq_connect ? NULL : rq->rq_path, conn_sbx_id(c) };

	return clients_aggregate(&cr);
}

/* The decision and reason fields of a request's audit line. */
static void
request_log_decision(struct audit *a, const struct request *rq, int allow,
    int report, enum reason r)
{
	audit_add_cstr(a, "decision",
	    report    ? "report" :
		allow ? "allow" :
			"deny");
	audit_add_cstr(a, "reason", reason_name(report ? rq->rq_would : r));
	if (report && r != REASON_OK)
		audit_add_cstr(a, "ended", reason_name(r));
	/* The port a reported plain request named (its host has none). */
	if (report && !rq->rq_connect && rq->rq_dest_port != 0)
		audit_add_uint(a, "port", rq->rq_dest_port);
}

/*
 * Who asked for what, after the decision: listener, client, sandbox,
 * route, then the token's names and the request's. Both a single line and
 * a start line carry them ("always": the end line does not).
 */
static void
request_log_who(struct conn *c, struct audit *a, const struct request *rq,
    const struct listener_conf *lc, const char *client, const char *route)
{
	audit_add_cstr(a, "listener", lc != NULL ? lc->lc_name : "");
	audit_add_cstr(a, "client", client);
	audit_add_cstr(a, "sandbox", conn_sbx_id(c));
	audit_add_cstr(a, "route", route);
	if (c->cn_icpt != NULL)
		audit_add_cstr(a, "via", "connect");
	if (rq->rq_sub[0] != '\0')
		audit_add_cstr(a, "sub", rq->rq_sub);
	if (rq->rq_jti[0] != '\0')
		audit_add_cstr(a, "jti", rq->rq_jti);
	if (rq->rq_method[0] != '\0')
		audit_add_cstr(a, "method", rq->rq_method);
	audit_add_cstr(a, "host", rq->rq_host);
	if (!rq->rq_connect)
		audit_add_cstr(a, "path", rq->rq_path);
}

/* How it went: status, bytes, duration and what was changed. */
static void
request_log_fields(struct audit *a, const struct request *rq, double secs)
{
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
	if (rq->rq_resp_dropped > 0)
		audit_add_uint(a, "response_headers_dropped",
		    rq->rq_resp_dropped);
}

/*
 * The audit line and metrics of a request, written exactly once, when it
 * completes or is refused: r is how it ended (conn_close(), conn_deny(),
 * or the admitted request's own reason at its end). hold: a refusal whose
 * response is about to be written (conn_deny()).
 */
static void
request_log_hold(struct conn *c, enum reason r, int hold)
{
	struct request *rq = c->cn_req;
	struct audit *a = c->cn_env->pe_audit;
	const char *route;
	double secs;
	int allow, report;

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
	/*
	 * enforce "report": let through although refused for rq_would; the
	 * line and the metrics say "report" and that reason, and how the
	 * exchange ended when not ok.
	 */
	report = allow && rq->rq_report;
	request_log_metrics(c, rq, route, allow, report, r, secs);
	if (a == NULL)
		return;
	if (rq->rq_started) {
		/* Its start line named it: the end line says how it went. */
		audit_begin(a, rq->rq_connect ? "connect.end" : "http.end");
		audit_add_cstr(a, "id", rq->rq_id);
		request_log_decision(a, rq, allow, report, r);
		request_log_fields(a, rq, secs);
	} else {
		const struct listener_conf *lc = conn_listener(c, rq->rq_cf);
		char client[64];

		peer_str(c, client, sizeof(client));
		/*
		 * A repeat of a refusal just logged is counted, not written;
		 * not while the log is failed, where each line retries the
		 * write that ends that state.
		 */
		if (!allow && !audit_failed(a) &&
		    !request_log_refusal(c, rq, lc, route, client, r))
			return;
		audit_begin(a,
		    rq->rq_connect ? "connect.tunnel" : "http.request");
		audit_add_cstr(a, "id", rq->rq_id);
		request_log_decision(a, rq, allow, report, r);
		request_log_who(c, a, rq, lc, client, route);
		request_log_fields(a, rq, secs);
	}
	/*
	 * fsync "always": a refusal's line is durable before its response
	 * goes out (conn_deny() holds the output: cn_hold).
	 */
	if (hold && !c->cn_aw.aw_on) {
		if (audit_commit_wait(a, &c->cn_aw, conn_release_cb, c) == 1)
			c->cn_hold = 1;
		return;
	}
	(void)audit_commit(a);
}

void
request_log(struct conn *c, enum reason r)
{
	request_log_hold(c, r, 0);
}

int
request_log_start(struct conn *c, audit_wait_cb *cb)
{
	struct request *rq = c->cn_req;
	struct audit *a = c->cn_env->pe_audit;
	char client[64];
	int rc;

	if (!audit_durable(a))
		return 0;
	peer_str(c, client, sizeof(client));
	audit_begin(a, rq->rq_connect ? "connect.tunnel" : "http.request");
	audit_add_cstr(a, "id", rq->rq_id);
	audit_add_cstr(a, "phase", "start");
	/* What it is let out as: allow, or report with why it would not. */
	request_log_decision(a, rq, 1, rq->rq_report, REASON_OK);
	request_log_who(c, a, rq, conn_listener(c, rq->rq_cf), client,
	    rq->rq_route != NULL ? rq->rq_route->rt_audience : NULL);
	rc = audit_commit_wait(a, &c->cn_aw, cb, c);
	if (rc != -1)
		rq->rq_started = 1;
	return rc;
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
		if (c->cn_icpt != NULL) {
			/* Inside an intercepted CONNECT: its own or the
			 * tunnel's. */
			const struct route *rt =
			    config_route(cf, c->cn_icpt->it_route);
			const char *th =
			    rt != NULL ? rt->rt_token_header : NULL;

			snprintf(msg, len,
			    "no run token: send it as Authorization: Bearer "
			    "<token>%s%s%s",
			    th != NULL ? " or in " : "", th != NULL ? th : "",
			    c->cn_icpt->it_listener ?
				"" :
				", or as the CONNECT's Proxy-Authorization");
		} else
			snprintf(msg, len,
			    "no run token: send it as %sAuthorization: Bearer "
			    "<token>",
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
	case REASON_TOKEN_WRONG_SANDBOX:
		snprintf(msg, len,
		    "run token %s is bound to another sandbox than this "
		    "connection's (%s)",
		    f->jti, c->cn_sbx != NULL ? c->cn_sbx->sb_conf.sc_id : "");
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
	case REASON_DRAIN_TIMEOUT:
		snprintf(msg, len,
		    "sluice is shutting down and limits.drain_timeout_ms "
		    "(%llu) ran out before the upstream answered",
		    (unsigned long long)l->drain_timeout_ms);
		break;
	case REASON_AUDIT_UNAVAILABLE:
		snprintf(msg, len,
		    "the audit log cannot be written, so nothing is let out");
		break;
	case REASON_SANDBOX_UNKNOWN:
		snprintf(msg, len,
		    "this connection's source address is no registered "
		    "sandbox's");
		break;
	case REASON_RATE_LIMITED:
		if (rq != NULL && rq->rq_sbx_limited) {
			snprintf(msg, len,
			    "sandbox %s sent more than limits.per_sandbox_rps "
			    "(%llu) requests in a second",
			    c->cn_sbx != NULL ? c->cn_sbx->sb_conf.sc_id : "",
			    (unsigned long long)l->per_sandbox_rps);
			break;
		}
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
void
conn_deny(struct conn *c, enum reason r, int keep)
{
	struct request *rq = c->cn_req;
	const struct listener_conf *lc;
	struct config *cf = rq != NULL ? rq->rq_cf : c->cn_env->pe_cf;
	int reverse, status;
	char msg[DENY_MSG_MAX];

	lc = conn_listener(c, cf);
	/* Only a forward listener's clients know they talk to a proxy. */
	reverse = lc != NULL && lc->lc_type != LISTENER_FORWARD;
	/*
	 * A client refused too often in one second is told to slow down, and
	 * shown the door: refusals must not be free. An upstream's failure is
	 * not the client's and is not charged.
	 */
	if (!reason_is_upstream(r) && r != REASON_RATE_LIMITED &&
	    r != REASON_DRAIN_TIMEOUT &&
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
	    r == REASON_RATE_LIMITED || relay_draining ||
	    ++c->cn_denials >= CONN_MAX_DENIALS || (rq != NULL && rq->rq_close))
		keep = 0;
	if (rq != NULL) {
		rq->rq_reason = r;
		rq->rq_status = reason_status(r, reverse);
		if (!keep)
			rq->rq_close = 1;
		request_log_hold(c, r, 1);
	}
	deny_message(c, r, reverse, msg, sizeof(msg));
	if (deny_write(bufferevent_get_output(c->cn_bev), r, reverse, !keep,
		msg, rq != NULL ? rq->rq_id : "") == -1) {
		conn_close(c, REASON_INTERNAL_ERROR);
		return;
	}
	if (keep) {
		/* conn_step_head()'s loop reads the next request, if any. */
		request_free(c);
		conn_set_state(c, CONN_S_IDLE);
		out_flush(c, c->cn_bev, 1);
		/* Held: conn_release_cb() reads on once the line is durable. */
		if (c->cn_hold)
			bev_off(c, c->cn_bev, EV_READ);
		else
			bev_on(c, c->cn_bev, EV_READ);
		return;
	}
	if (rq != NULL && rq->rq_up != NULL) {
		upconn_cancel(rq->rq_up);
		rq->rq_up = NULL;
	}
	conn_flush_close(c);
}

void
conn_refuse(struct proxy_env *env, int fd, size_t listener_idx,
    const struct sockaddr *peer, int kind)
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
	const struct sandbox *sb;

	(void)addr_str(peer, client, sizeof(client));
	clients_next_id(id, sizeof(id));
	sb = kind == CONN_REFUSE_SANDBOX ?
	    sbx_registry_lookup(env->pe_sbx, peer) :
	    NULL;
	if (kind == CONN_REFUSE_CLIENT)
		snprintf(msg, sizeof(msg),
		    "this client address has limits.per_client_connections "
		    "(%llu) connections open",
		    (unsigned long long)cf->cf_limits.per_client_connections);
	else if (kind == CONN_REFUSE_SANDBOX)
		snprintf(msg, sizeof(msg),
		    "sandbox %s has limits.per_sandbox_connections (%llu) "
		    "connections open",
		    sb != NULL ? sb->sb_conf.sc_id : "",
		    (unsigned long long)cf->cf_limits.per_sandbox_connections);
	else
		snprintf(msg, sizeof(msg),
		    "sluice has limits.max_connections (%llu) connections open",
		    (unsigned long long)cf->cf_limits.max_connections);
	if (b != NULL) {
		/* Best effort: a fresh socket's send buffer takes it whole. */
		if (deny_write(b, r,
			lc != NULL && lc->lc_type != LISTENER_FORWARD, 1, msg,
			id) == 0)
			(void)evbuffer_write(b, fd);
		evbuffer_free(b);
	}
	close(fd);
	metrics_request(NULL, 0, r, 0, 0, 0);
	if (sb != NULL)
		metrics_sandbox_request(sb->sb_conf.sc_id, 0, r);
	memset(&cr, 0, sizeof(cr));
	cr.cr_peer = peer;
	cr.cr_reason = r;
	cr.cr_status = 503;
	cr.cr_id = id;
	cr.cr_client = client;
	cr.cr_listener = lc != NULL ? lc->lc_name : "";
	cr.cr_sandbox = sb != NULL ? sb->sb_conf.sc_id : NULL;
	if (a != NULL && (audit_failed(a) || clients_aggregate(&cr))) {
		audit_begin(a, "http.request");
		audit_add_cstr(a, "id", id);
		audit_add_cstr(a, "decision", "deny");
		audit_add_cstr(a, "reason", reason_name(r));
		audit_add_cstr(a, "listener", cr.cr_listener);
		audit_add_cstr(a, "client", client);
		audit_add_cstr(a, "sandbox", cr.cr_sandbox);
		audit_add_int(a, "status", 503);
		(void)audit_commit(a);
	}
}
