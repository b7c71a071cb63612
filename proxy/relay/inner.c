/*
 * Intercepted tunnels (docs/interception.md): after "200 Connection
 * established" on a CONNECT to an intercepting route, sluice is the server
 * of whatever the client speaks inside: a TLS handshake with a leaf of the
 * local CA (SNI checked against the CONNECT's host, ALPN http/1.1 only),
 * or plain HTTP when the first byte is not a TLS record. Either way the
 * inner requests then go through the same head parser, checks, decision,
 * admit step and upstream leg as requests to the forward listener
 * (head.c, exchange.c), one http.request line each with "via": "connect",
 * and the tunnel's own connect.tunnel line is written when it closes.
 *
 * TLS runs in a filter bufferevent over the client's socket bufferevent:
 * the ClientHello may already sit in the socket bufferevent's input (sent
 * right behind the CONNECT), and a filter reads from there.
 */
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "certs/certs.h"
#include "proxy/config/config.h"
#include "proxy/http/http1.h"
#include "proxy/ops/ops.h"
#include "proxy/relay/conn_int.h"
#include "proxy/relay/relay.h"
#include "proxy/token/token.h"
#include "proxy/util/util.h"

#define TLS_HANDSHAKE_RECORD 0x16 /* a TLS record of type handshake */

void
conn_icpt_free(struct conn *c)
{
	struct icpt *it = c->cn_icpt;

	if (it == NULL)
		return;
	c->cn_icpt = NULL;
	upconn_cancel(it->it_probe);
	upstreams_unref(it->it_ups);
	config_unref(it->it_cf);
	free(it->it_dest);
	if (it->it_token != NULL) {
		explicit_bzero(it->it_token, it->it_toklen);
		free(it->it_token);
	}
	free(it->it_hostport);
	free(it);
}

/* The connect.tunnel line: how the tunnel ended and what it carried. */
void
conn_icpt_log(struct conn *c, enum reason r)
{
	struct icpt *it = c->cn_icpt;
	struct audit *a = c->cn_env->pe_audit;
	const struct listener_conf *lc;
	char client[64];
	double secs;

	if (it == NULL)
		return;
	/* A resolution in flight must not call back into a closed conn. */
	upconn_cancel(it->it_probe);
	it->it_probe = NULL;
	if (it->it_logged)
		return;
	it->it_logged = 1;
	/* A transparent tunnel still deciding was never served. */
	if (it->it_wait != 0)
		it->it_refused = 1;
	secs = elapsed_s(c, &it->it_start);
	metrics_tunnel_intercepted(it->it_route[0] != '\0' ? it->it_route :
							     NULL,
	    !it->it_refused, r, it->it_bytes_in, it->it_bytes_out, secs);
	if (a == NULL)
		return;
	lc = conn_listener(c, c->cn_env->pe_cf);
	peer_str(c, client, sizeof(client));
	audit_begin(a, "connect.tunnel");
	audit_add_cstr(a, "id", it->it_id);
	audit_add_cstr(a, "decision", it->it_refused ? "deny" : "allow");
	audit_add_cstr(a, "reason", reason_name(r));
	if (it->it_detail != NULL)
		audit_add_cstr(a, "detail", it->it_detail);
	audit_add_cstr(a, "listener", lc != NULL ? lc->lc_name : "");
	audit_add_cstr(a, "client", client);
	if (it->it_route[0] != '\0')
		audit_add_cstr(a, "route", it->it_route);
	if (it->it_sub[0] != '\0')
		audit_add_cstr(a, "sub", it->it_sub);
	if (it->it_jti[0] != '\0')
		audit_add_cstr(a, "jti", it->it_jti);
	/* A listener's tunnel had no CONNECT, and no status to show. */
	if (!it->it_listener)
		audit_add_cstr(a, "method", "CONNECT");
	if (it->it_hostport != NULL)
		audit_add_cstr(a, "host", it->it_hostport);
	if (it->it_dest != NULL)
		audit_add_cstr(a, "destination", it->it_dest);
	if (!it->it_listener)
		audit_add_int(a, "status", 200);
	audit_add_cstr(a, "intercept",
	    it->it_ready ? (it->it_tls ? "tls" : "plain") : "handshake");
	audit_add_uint(a, "requests", it->it_requests);
	audit_add_uint(a, "bytes_in", it->it_bytes_in);
	audit_add_uint(a, "bytes_out", it->it_bytes_out);
	audit_add_int(a, "duration_ms", (int64_t)(secs * 1000.0));
	(void)audit_commit(a);
}

/* Why a handshake failed, for the audit line's detail (static text). */
static const char *
icpt_tls_detail(struct bufferevent *bev)
{
	SSL *ssl = bufferevent_openssl_get_ssl(bev);
	enum certs_server_fail f;
	unsigned long e;
	const char *s = NULL;

	if (ssl != NULL && (f = certs_server_failure(ssl)) != CERTS_SF_NONE)
		s = certs_server_failure_str(f);
	while ((e = bufferevent_get_openssl_error(bev)) != 0)
		if (s == NULL)
			s = ERR_reason_error_string(e);
	ERR_clear_error();
	return s != NULL ? s : "connection closed during the handshake";
}

static void
icpt_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct conn *c = arg;
	struct icpt *it = c->cn_icpt;
	const struct limits *l = &c->cn_env->pe_cf->cf_limits;
	struct bufferevent *u;
	struct timeval idle;

	if (what & BEV_EVENT_CONNECTED) {
		it->it_ready = 1;
		evtimer_del(c->cn_timer);
		idle = sl_ms_tv(l->idle_timeout_ms);
		if (bufferevent_set_timeouts(bev, &idle, &idle) == -1)
			conn_broken(c);
		conn_client_setcb(c, NULL);
		/* Application data that came with the last flight. */
		if (evbuffer_get_length(bufferevent_get_input(bev)) > 0)
			conn_step_head(c);
		return;
	}
	it->it_detail = icpt_tls_detail(bev);
	/*
	 * The alert OpenSSL queued (no_application_protocol, say) waits in
	 * the socket's output: best effort, a fresh socket takes it whole,
	 * so the client learns why rather than seeing the connection drop.
	 */
	if ((u = bufferevent_get_underlying(bev)) != NULL)
		out_flush(c, u, 1);
	conn_close(c, REASON_CLIENT_TLS_ERROR);
}

/* The first byte was a TLS record: become the TLS server. */
static void
icpt_tls_start(struct conn *c)
{
	struct proxy_env *env = c->cn_env;
	struct icpt *it = c->cn_icpt;
	struct bufferevent *fb;
	char why[256];
	SSL *ssl;

	if ((ssl = intercept_ssl(env->pe_icpt, it->it_host, why,
		 sizeof(why))) == NULL) {
		log_warnx("intercept: %s", why);
		it->it_detail = "leaf_unavailable";
		conn_close(c, REASON_CLIENT_TLS_ERROR);
		return;
	}
	fb = bufferevent_openssl_filter_new(env->pe_base, c->cn_bev, ssl,
	    BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE);
	if (fb == NULL) {
		conn_close(c, REASON_INTERNAL_ERROR);
		return;
	}
	/* The filter owns the socket bufferevent from here on. */
	c->cn_bev = fb;
	/*
	 * The filter encrypts what is added to its output from the output's
	 * callback, at once unless deferred: deferred, the bytes added in one
	 * loop pass go out in as few records as they fill, and the relay's
	 * checks (a buffer grows by what was moved into it) hold.
	 */
	if (evbuffer_defer_callbacks(bufferevent_get_output(fb),
		env->pe_base) == -1) {
		conn_close(c, REASON_INTERNAL_ERROR);
		return;
	}
	it->it_tls = 1;
	bufferevent_openssl_set_allow_dirty_shutdown(fb, 1);
	bufferevent_set_max_single_read(fb, CONN_IO_MAX);
	bufferevent_set_max_single_write(fb, CONN_IO_MAX);
	conn_client_setcb(c, icpt_event_cb);
	bufferevent_setwatermark(fb, EV_WRITE, CONN_LOW_WATER, 0);
	bev_on(c, fb, EV_READ | EV_WRITE);
	/*
	 * The ClientHello may already be in the socket bufferevent's input,
	 * where no new read would announce it: hand it to the filter now.
	 */
	bufferevent_trigger(bufferevent_get_underlying(fb), EV_READ,
	    BEV_TRIG_IGNORE_WATERMARKS);
}

void
conn_icpt_sniff(struct conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->cn_bev);
	unsigned char first;

	/* A transparent tunnel decides on its ClientHello first. */
	if (c->cn_icpt->it_wait != 0) {
		conn_tp_step(c);
		return;
	}
	if (evbuffer_copyout(in, &first, 1) != 1)
		return;
	if (first == TLS_HANDSHAKE_RECORD) {
		icpt_tls_start(c);
		return;
	}
	/* Plain HTTP/1.1 inside the tunnel (undici tunnels http:// URLs). */
	c->cn_icpt->it_ready = 1;
	evtimer_del(c->cn_timer);
	conn_step_head(c);
}

void
conn_start_intercept(struct conn *c, const struct http1_msg *m,
    const struct uri *u, size_t headlen)
{
	static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
	struct request *rq = c->cn_req;
	const struct limits *l = &rq->rq_cf->cf_limits;
	char scratch[TOKEN_MAX_LEN + TOKEN_MAX_STR + 8];
	struct evbuffer *in = bufferevent_get_input(c->cn_bev);
	struct timeval head;
	struct icpt *it;
	const char *tok;
	size_t toklen;

	if ((it = calloc(1, sizeof(*it))) == NULL ||
	    u->host_len >= sizeof(it->it_host)) {
		free(it);
		evbuffer_drain(in, headlen);
		conn_deny(c, REASON_INTERNAL_ERROR, 0);
		return;
	}
	memcpy(it->it_host, u->host, u->host_len);
	it->it_port = u->port;
	/* The CONNECT's own token stands in for inner requests without one. */
	if (rq->rq_sub[0] != '\0' &&
	    token_from_request(m, TOKEN_CARRIER_CONNECT, NULL, scratch,
		sizeof(scratch), &tok, &toklen) == REASON_OK &&
	    (it->it_token = malloc(toklen)) != NULL) {
		memcpy(it->it_token, tok, toklen);
		it->it_toklen = toklen;
	}
	explicit_bzero(scratch, sizeof(scratch));
	memcpy(it->it_id, rq->rq_id, sizeof(it->it_id));
	memcpy(it->it_sub, rq->rq_sub, sizeof(it->it_sub));
	memcpy(it->it_jti, rq->rq_jti, sizeof(it->it_jti));
	snprintf(it->it_route, sizeof(it->it_route), "%s",
	    rq->rq_route->rt_audience);
	it->it_hostport = rq->rq_host;
	rq->rq_host = NULL;
	it->it_start = rq->rq_start;
	c->cn_icpt = it;
	c->cn_denials = 0;

	evbuffer_drain(in, headlen);
	if (evbuffer_add(bufferevent_get_output(c->cn_bev), ok,
		sizeof(ok) - 1) == -1) {
		conn_close(c, REASON_INTERNAL_ERROR);
		return;
	}
	/* The CONNECT is done; its line is the tunnel's, at close. */
	rq->rq_logged = 1;
	request_free(c);
	conn_set_state(c, CONN_S_IDLE);
	out_flush(c, c->cn_bev, 1);
	/* The first byte and the handshake within header_timeout_ms. */
	evtimer_del(c->cn_timer);
	head = sl_ms_tv(l->header_timeout_ms);
	timer_on(c, c->cn_timer, &head);
	if (evbuffer_get_length(in) > 0)
		conn_icpt_sniff(c);
}

int
conn_icpt_target(struct conn *c, const struct http1_msg *m, struct uri *u,
    const char **why)
{
	struct icpt *it = c->cn_icpt;
	uint16_t dflt = it->it_tls ? 443 : 80;
	struct uri h;
	const char *hw;

	if (u->form == URI_AUTHORITY || u->form == URI_ASTERISK) {
		*why = "a request inside a tunnel takes an origin-form target "
		       "(/path)";
		return -1;
	}
	if (u->form == URI_ABSOLUTE &&
	    (!uri_host_eq(u->host, u->host_len, it->it_host,
		 strlen(it->it_host)) ||
		u->port != it->it_port)) {
		*why = "the target names another authority than the CONNECT";
		return -1;
	}
	/* Host: the CONNECT's authority, its port optional when default. */
	if (m->host == NULL ||
	    uri_parse_host(m->host, m->host_len, &h, &hw) == -1 ||
	    !uri_host_eq(h.host, h.host_len, it->it_host,
		strlen(it->it_host)) ||
	    (h.has_port ? h.port : dflt) != it->it_port) {
		*why = "Host differs from the CONNECT's authority";
		return -1;
	}
	u->form = URI_ABSOLUTE;
	u->https = it->it_tls;
	u->host = it->it_host;
	u->host_len = strlen(it->it_host);
	u->host_type = h.host_type;
	u->port = it->it_port;
	u->has_port = 1;
	return 0;
}
