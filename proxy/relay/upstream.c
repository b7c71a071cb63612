/*
 * Connections to upstreams: one struct upstream per route of a loaded
 * policy (DNS cache, idle pool, TLS session for resumption) and one struct
 * upconn per connection. This file resolves (resolve.c), refuses private and
 * looping addresses (policy_check_addr), connects to the exact address it
 * checked, originates verified TLS (chain, host name, SPKI pins) and keeps
 * idle connections for reuse. What flows over a connection is conn.c's.
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
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "certs/certs.h"
#include "proxy/config/config.h"
#include "proxy/dns/dnsmsg.h"
#include "proxy/dns/resolve.h"
#include "proxy/http/http1.h"
#include "proxy/ops/ops.h"
#include "proxy/policy/policy.h"
#include "proxy/relay/relay.h"
#include "proxy/token/store.h"
#include "proxy/util/util.h"

#define UPSTREAM_MAX_ADDRS 16     /* addresses kept per resolution */
#define UPSTREAM_MIN_TTL   5      /* seconds a resolution is reused at least */
#define UPSTREAM_MAX_TTL   300    /* and at most */
#define UPSTREAM_POOL_MAX  256    /* idle connections kept per route */
#define UPSTREAM_POOL_IDLE 30     /* seconds an idle connection is kept */
#define UPSTREAM_IO_MAX    262144 /* bytes per read/write call */
#define UPSTREAM_DEST_MAX  256    /* as_requested destinations kept */
#define UPSTREAM_HOST_MAX  256    /* bytes of a destination host, NUL too */

enum upconn_state {
	UPCONN_S_RESOLVING = 1, /* waiting for DNS */
	UPCONN_S_CONNECTING,    /* TCP (and TLS) handshake */
	UPCONN_S_BUSY,          /* lent to a connection */
	UPCONN_S_IDLE           /* in the pool */
};

/*
 * One connection to an upstream. Owned by the conn it is lent to (BUSY)
 * or by its upstream's pool (IDLE, RESOLVING, CONNECTING until handed over).
 */
struct upconn {
	TAILQ_ENTRY(upconn) uc_entry; /* pool or waiter list */
	struct upstream *uc_up;
	enum upconn_state uc_state;
	int uc_tunnel; /* raw TCP for CONNECT */
	int uc_probe;  /* UPSTREAM_RESOLVE: no connection, only addresses */
	struct bufferevent *uc_bev;
	SSL *uc_ssl; /* owned by uc_bev */
	struct sockaddr_storage uc_addr;
	size_t uc_try; /* index of the address tried */
	struct timeval uc_start;
	upconn_cb *uc_cb;
	void *uc_arg;
};

TAILQ_HEAD(upconn_list, upconn);

/*
 * The runtime state of one route's upstream. Owned by the route (of one
 * policy snapshot); freed with it, which closes the idle connections.
 */
struct upstream {
	const struct config *up_cf; /* the snapshot it belongs to */
	const struct route *up_rt;
	/*
	 * The destination: the route's upstream, or for an allowlist route
	 * (as_requested) one host:port it was asked for, kept in us_dests
	 * (most recently used first) and evicted when nothing uses it.
	 */
	char up_host[UPSTREAM_HOST_MAX]; /* IPv6 without brackets */
	uint16_t up_port;
	int up_host_is_ip;
	int up_tls;  /* TLS to it (the route's https, or a dest's own) */
	int up_dest; /* an as_requested destination */
	TAILQ_ENTRY(upstream) up_lru;
	size_t up_nconns; /* upconns alive (idle ones too) */
	struct sockaddr_storage up_addrs[UPSTREAM_MAX_ADDRS];
	size_t up_naddrs;
	time_t up_expires; /* of the cached resolution */
	int up_pending;    /* DNS queries in flight */
	uint32_t up_ttl;
	enum reason up_dns_reason;
	struct resolve_req *up_req4; /* A query in flight */
	struct resolve_req *up_req6; /* AAAA query in flight */
	uint64_t up_remote;          /* the parent's answer awaited (privsep) */
	enum reason up_empty_reason; /* its reason when it held nothing */
	int up_has_empty;            /* up_empty_reason is set */
	TAILQ_ENTRY(upstream) up_rentry;
	struct sockaddr_storage up_tmp[UPSTREAM_MAX_ADDRS];
	size_t up_ntmp;
	struct upconn_list up_waiters; /* RESOLVING */
	struct event *up_kick;         /* starts waiters outside callers */
	struct upconn_list up_idle;    /* IDLE */
	size_t up_nidle;
	SSL_SESSION *up_session; /* for resumption */
};

TAILQ_HEAD(upstream_list, upstream);

struct upstreams {
	int us_refs;
	struct config *us_cf;          /* referenced */
	struct upstream_list us_dests; /* as_requested destinations */
	size_t us_ndests;
	size_t us_n; /* of us_cf's routes, all but after OOM */
	struct upstream *us_up[];
};

static struct event_base *up_base;
static int up_ssl_idx = -1;
static upstream_resolved_cb *up_resolved_cb;
/* Privilege separation: names are resolved by the parent. */
static upstream_remote_cb *up_remote_cb;
static uint64_t up_remote_seq;
static struct upstream_list up_remote_list =
    TAILQ_HEAD_INITIALIZER(up_remote_list);

static void upconn_start_connect(struct upconn *);
static void upstream_kick_cb(evutil_socket_t, short, void *);
static void upconn_fail(struct upconn *, enum reason);
static void upconn_free(struct upconn *);

int
upstream_init(struct event_base *base, char *why, size_t whylen)
{
	up_base = base;
	if (up_ssl_idx == -1 &&
	    (up_ssl_idx = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL)) ==
		-1) {
		snprintf(why, whylen, "SSL_get_ex_new_index failed");
		return -1;
	}
	return 0;
}

void
upstream_on_resolved(upstream_resolved_cb *cb)
{
	up_resolved_cb = cb;
}

/* TLS 1.3 tickets arrive after the handshake: keep the newest one. */
static int
upstream_new_session_cb(SSL *ssl, SSL_SESSION *sess)
{
	struct upconn *uc = SSL_get_ex_data(ssl, up_ssl_idx);

	if (uc == NULL || uc->uc_up == NULL)
		return 0;
	SSL_SESSION_free(uc->uc_up->up_session);
	uc->uc_up->up_session = sess;
	return 1; /* we took the reference */
}

static void upstream_free(struct upstream *);

struct upstreams *
upstreams_new(struct config *cf)
{
	struct upstreams *us;
	size_t i;

	if ((us = calloc(1,
		 sizeof(*us) + cf->cf_nroutes * sizeof(struct upstream *))) ==
	    NULL)
		return NULL;
	us->us_refs = 1;
	us->us_cf = config_ref(cf);
	TAILQ_INIT(&us->us_dests);
	for (i = 0; i < cf->cf_nroutes; i++) {
		struct route *rt = &cf->cf_routes[i];
		struct upstream *up;

		if ((up = calloc(1, sizeof(*up))) == NULL)
			goto fail;
		up->up_cf = cf;
		up->up_rt = rt;
		if (rt->rt_up.uc_host != NULL)
			snprintf(up->up_host, sizeof(up->up_host), "%s",
			    rt->rt_up.uc_host);
		up->up_port = rt->rt_up.uc_port;
		up->up_host_is_ip = rt->rt_up.uc_host_is_ip;
		up->up_tls = rt->rt_up.uc_https;
		TAILQ_INIT(&up->up_waiters);
		TAILQ_INIT(&up->up_idle);
		if ((up->up_kick = evtimer_new(up_base, upstream_kick_cb,
			 up)) == NULL) {
			free(up);
			goto fail;
		}
		us->us_up[us->us_n++] = up;
		if (rt->rt_up.uc_ssl_ctx != NULL)
			SSL_CTX_sess_set_new_cb(rt->rt_up.uc_ssl_ctx,
			    upstream_new_session_cb);
	}
	return us;
fail:
	upstreams_unref(us);
	return NULL;
}

struct upstreams *
upstreams_ref(struct upstreams *us)
{
	if (us != NULL)
		us->us_refs++;
	return us;
}

void
upstreams_unref(struct upstreams *us)
{
	struct upstream *up;
	size_t i;

	if (us == NULL || --us->us_refs > 0)
		return;
	for (i = 0; i < us->us_n; i++)
		upstream_free(us->us_up[i]);
	while ((up = TAILQ_FIRST(&us->us_dests)) != NULL) {
		TAILQ_REMOVE(&us->us_dests, up, up_lru);
		upstream_free(up);
	}
	config_unref(us->us_cf);
	free(us);
}

static void
upstream_free(struct upstream *up)
{
	struct upconn *uc;

	if (up == NULL)
		return;
	while ((uc = TAILQ_FIRST(&up->up_idle)) != NULL) {
		TAILQ_REMOVE(&up->up_idle, uc, uc_entry);
		metrics_pool_idle(-1);
		upconn_free(uc);
	}
	/*
	 * Waiters hold a reference on the policy through their conn, so none
	 * are left; a query may be, when a resolution outlived its last user.
	 * A cancelled query's callback never runs.
	 */
	resolve_cancel(up->up_req4);
	resolve_cancel(up->up_req6);
	if (up->up_remote != 0)
		TAILQ_REMOVE(&up_remote_list, up, up_rentry);
	SSL_SESSION_free(up->up_session);
	if (up->up_kick != NULL)
		event_free(up->up_kick);
	free(up);
}

static void
upconn_free(struct upconn *uc)
{
	if (uc == NULL)
		return;
	if (uc->uc_up != NULL)
		uc->uc_up->up_nconns--;
	if (uc->uc_ssl != NULL)
		SSL_set_ex_data(uc->uc_ssl, up_ssl_idx, NULL);
	if (uc->uc_bev != NULL)
		bufferevent_free(uc->uc_bev);
	free(uc);
}

/*
 * DNS.
 */
static void
upstream_resolved(struct upstream *up)
{
	struct upconn *uc;
	const struct route *rt = up->up_rt;
	size_t i;
	enum reason r = REASON_UPSTREAM_UNREACHABLE;
	time_t now = sl_mono_tv().tv_sec;
	uint32_t ttl = up->up_ttl;

	/* The parent kept only allowed addresses: it says why none were. */
	if (up->up_ntmp == 0 && up->up_has_empty)
		r = up->up_empty_reason;
	up->up_has_empty = 0;

	up->up_naddrs = 0;
	for (i = 0; i < up->up_ntmp; i++) {
		enum reason ar = policy_check_addr(up->up_cf, rt,
		    (struct sockaddr *)&up->up_tmp[i]);

		if (ar != REASON_OK) {
			r = ar;
			continue;
		}
		up->up_addrs[up->up_naddrs++] = up->up_tmp[i];
	}
	if (ttl < UPSTREAM_MIN_TTL)
		ttl = UPSTREAM_MIN_TTL;
	if (ttl > UPSTREAM_MAX_TTL)
		ttl = UPSTREAM_MAX_TTL;
	up->up_expires = up->up_naddrs > 0 ? now + (time_t)ttl : 0;
	up->up_dns_reason = up->up_naddrs > 0 ? REASON_OK : r;
	/* The kernel set gets the addresses before any connect to them. */
	if (up->up_naddrs > 0 && up_resolved_cb != NULL)
		up_resolved_cb(rt, up->up_host, up->up_port, up->up_addrs,
		    up->up_naddrs, up->up_ttl);
	if (up->up_naddrs == 0) {
		log_warnx("upstream %s: %s", up->up_host,
		    r == REASON_DESTINATION_DENIED ?
			"resolves only to denied addresses" :
			"no address");
		metrics_upstream_error(r == REASON_DESTINATION_DENIED ?
			METRICS_UPERR_DESTINATION :
			METRICS_UPERR_DNS);
	}

	while ((uc = TAILQ_FIRST(&up->up_waiters)) != NULL) {
		TAILQ_REMOVE(&up->up_waiters, uc, uc_entry);
		if (up->up_naddrs == 0)
			upconn_fail(uc, up->up_dns_reason);
		else
			upconn_start_connect(uc);
	}
}

static void
upstream_dns_answer(struct upstream *up, int v6, enum resolve_status st,
    const unsigned char (*addrs)[16], size_t count, uint32_t ttl)
{
	size_t i;

	if (st == RESOLVE_OK && count > 0) {
		if (up->up_ttl == 0 || ttl < up->up_ttl)
			up->up_ttl = ttl;
		for (i = 0; i < count && up->up_ntmp < UPSTREAM_MAX_ADDRS; i++)
			addr_make(&up->up_tmp[up->up_ntmp++], v6, addrs[i],
			    up->up_port);
	}
	if (--up->up_pending == 0)
		upstream_resolved(up);
}

static void
upstream_dns4_cb(enum resolve_status st, const unsigned char (*addrs)[16],
    size_t n, uint32_t ttl, void *arg)
{
	struct upstream *up = arg;

	up->up_req4 = NULL;
	upstream_dns_answer(up, 0, st, addrs, n, ttl);
}

static void
upstream_dns6_cb(enum resolve_status st, const unsigned char (*addrs)[16],
    size_t n, uint32_t ttl, void *arg)
{
	struct upstream *up = arg;

	up->up_req6 = NULL;
	upstream_dns_answer(up, 1, st, addrs, n, ttl);
}

/*
 * Literal addresses need no DNS; a fixed upstream's was checked at load
 * too, and every one is checked again in upstream_resolved().
 */
static int
upstream_literal(struct upstream *up)
{
	struct sockaddr_storage *ss = &up->up_tmp[0];

	memset(ss, 0, sizeof(*ss));
	if (strchr(up->up_host, ':') != NULL) {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(up->up_port);
		if (inet_pton(AF_INET6, up->up_host, &sin6->sin6_addr) != 1)
			return -1;
	} else {
		struct sockaddr_in *sin = (struct sockaddr_in *)ss;

		sin->sin_family = AF_INET;
		sin->sin_port = htons(up->up_port);
		if (inet_pton(AF_INET, up->up_host, &sin->sin_addr) != 1)
			return -1;
	}
	up->up_ntmp = 1;
	up->up_ttl = UPSTREAM_MAX_TTL;
	return 0;
}

/*
 * Ask the parent (privilege separation): it resolves, checks and puts the
 * addresses in the kernel set before it answers (upstream_remote_answer).
 */
static void
upstream_resolve_remote(struct upstream *up)
{
	up->up_pending = 1;
	up->up_remote = ++up_remote_seq;
	TAILQ_INSERT_TAIL(&up_remote_list, up, up_rentry);
	if (up_remote_cb(up->up_host, up->up_port, up->up_remote) == -1) {
		TAILQ_REMOVE(&up_remote_list, up, up_rentry);
		up->up_remote = 0;
		up->up_pending = 0;
		upstream_resolved(up);
	}
}

void
upstream_on_remote(upstream_remote_cb *cb)
{
	up_remote_cb = cb;
}

void
upstream_remote_answer(uint64_t id, const struct sockaddr_storage *addrs,
    size_t n, uint32_t ttl, enum reason empty)
{
	struct upstream *up;
	size_t i;

	TAILQ_FOREACH(up, &up_remote_list, up_rentry)
		if (up->up_remote == id)
			break;
	if (up == NULL)
		return; /* freed since it asked */
	TAILQ_REMOVE(&up_remote_list, up, up_rentry);
	up->up_remote = 0;
	up->up_pending = 0;
	up->up_ntmp = 0;
	for (i = 0; i < n && i < UPSTREAM_MAX_ADDRS; i++) {
		if (addrs[i].ss_family != AF_INET &&
		    addrs[i].ss_family != AF_INET6)
			continue;
		up->up_tmp[up->up_ntmp] = addrs[i];
		if (addrs[i].ss_family == AF_INET)
			((struct sockaddr_in *)&up->up_tmp[up->up_ntmp])
			    ->sin_port = htons(up->up_port);
		else
			((struct sockaddr_in6 *)&up->up_tmp[up->up_ntmp])
			    ->sin6_port = htons(up->up_port);
		up->up_ntmp++;
	}
	up->up_ttl = ttl;
	up->up_empty_reason = empty;
	up->up_has_empty = 1;
	upstream_resolved(up);
}

static void
upstream_resolve(struct upstream *up)
{
	const char *host = up->up_host;

	if (up->up_pending > 0)
		return;
	up->up_ntmp = 0;
	up->up_ttl = 0;
	if (up->up_host_is_ip) {
		if (upstream_literal(up) == -1)
			up->up_ntmp = 0;
		upstream_resolved(up);
		return;
	}
	if (up_remote_cb != NULL) {
		upstream_resolve_remote(up);
		return;
	}
	/* A and AAAA in parallel; callbacks never run in resolve_start(). */
	up->up_pending = 2;
	if ((up->up_req4 = resolve_start(host, DNSMSG_QTYPE_A, upstream_dns4_cb,
		 up)) == NULL)
		up->up_pending--;
	if ((up->up_req6 = resolve_start(host, DNSMSG_QTYPE_AAAA,
		 upstream_dns6_cb, up)) == NULL)
		up->up_pending--;
	if (up->up_pending == 0)
		upstream_resolved(up);
}

/*
 * Connections.
 */
static void
upconn_fail(struct upconn *uc, enum reason r)
{
	upconn_cb *cb = uc->uc_cb;
	void *arg = uc->uc_arg;

	/* The callback owns nothing of a failed connection: free it first. */
	upconn_free(uc);
	cb(NULL, r, arg);
}

static void
upconn_ready(struct upconn *uc)
{
	struct timeval now = sl_mono_tv(), d;

	uc->uc_state = UPCONN_S_BUSY;
	timersub(&now, &uc->uc_start, &d);
	if (uc->uc_ssl != NULL)
		metrics_tls_handshake(
		    (double)d.tv_sec + (double)d.tv_usec / 1e6);
	else
		metrics_upstream_connect(
		    (double)d.tv_sec + (double)d.tv_usec / 1e6);
	bufferevent_setcb(uc->uc_bev, NULL, NULL, NULL, NULL);
	uc->uc_cb(uc, REASON_OK, uc->uc_arg);
}

/* After the chain and host name verified: the pins, if any. */
static enum reason
upconn_check_tls(struct upconn *uc)
{
	const struct upstream_conf *c = &uc->uc_up->up_rt->rt_up;

	if (SSL_get_verify_result(uc->uc_ssl) != X509_V_OK) {
		metrics_upstream_error(METRICS_UPERR_TLS_VERIFY);
		return REASON_UPSTREAM_TLS_ERROR;
	}
	if (c->uc_npins > 0 &&
	    !certs_pin_match(uc->uc_ssl, (const unsigned char(*)[32])c->uc_pins,
		c->uc_npins)) {
		log_warnx("upstream %s: no certificate matches pin_sha256",
		    c->uc_host);
		metrics_upstream_error(METRICS_UPERR_PIN);
		return REASON_UPSTREAM_TLS_ERROR;
	}
	return REASON_OK;
}

/*
 * Whether the TCP connection was established: a failure after that is the
 * TLS handshake's (upstream_tls_error), before it the network's.
 */
static int
upconn_tcp_up(struct bufferevent *bev)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	return getpeername(bufferevent_getfd(bev), (struct sockaddr *)&ss,
		   &len) == 0;
}

static void
upconn_connect_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct upconn *uc = arg;
	enum reason r;

	(void)bev;
	if (what & BEV_EVENT_CONNECTED) {
		if (uc->uc_ssl != NULL &&
		    (r = upconn_check_tls(uc)) != REASON_OK) {
			upconn_fail(uc, r);
			return;
		}
		upconn_ready(uc);
		return;
	}
	if (what & BEV_EVENT_TIMEOUT) {
		metrics_upstream_error(METRICS_UPERR_TIMEOUT);
		upconn_fail(uc, REASON_UPSTREAM_TIMEOUT);
		return;
	}
	if (uc->uc_ssl != NULL && upconn_tcp_up(bev)) {
		unsigned long e = bufferevent_get_openssl_error(bev);
		long vr = SSL_get_verify_result(uc->uc_ssl);
		char buf[256] = "";

		if (e != 0)
			ERR_error_string_n(e, buf, sizeof(buf));
		log_warnx("upstream %s: TLS: %s%s%s", uc->uc_up->up_host,
		    vr != X509_V_OK ? X509_verify_cert_error_string(vr) : "",
		    vr != X509_V_OK && e != 0 ? "; " : "", buf);
		while (bufferevent_get_openssl_error(bev) != 0)
			;
		ERR_clear_error();
		metrics_upstream_error(vr != X509_V_OK ?
			METRICS_UPERR_TLS_VERIFY :
			METRICS_UPERR_TLS);
		upconn_fail(uc, REASON_UPSTREAM_TLS_ERROR);
		return;
	}
	while (uc->uc_ssl != NULL && bufferevent_get_openssl_error(bev) != 0)
		;
	ERR_clear_error();
	/* A refused or unreachable address: try the next one. */
	bufferevent_free(uc->uc_bev);
	uc->uc_bev = NULL;
	uc->uc_ssl = NULL;
	uc->uc_try++;
	if (uc->uc_try < uc->uc_up->up_naddrs) {
		upconn_start_connect(uc);
		return;
	}
	/* Resolve again next time: the addresses may have changed. */
	uc->uc_up->up_expires = 0;
	metrics_upstream_error(METRICS_UPERR_CONNECT);
	upconn_fail(uc, REASON_UPSTREAM_UNREACHABLE);
}

static SSL *
upconn_new_ssl(struct upconn *uc)
{
	const struct upstream_conf *c = &uc->uc_up->up_rt->rt_up;
	SSL *ssl;

	if ((ssl = SSL_new(c->uc_ssl_ctx)) == NULL)
		return NULL;
	SSL_set_ex_data(ssl, up_ssl_idx, uc);
	/* The route's upstream, or the allowlisted host asked for. */
	if (uc->uc_up->up_host_is_ip) {
		/* No SNI for addresses (RFC 6066 §3); check the IP SAN. */
		if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl),
			uc->uc_up->up_host) != 1)
			goto fail;
	} else if (SSL_set_tlsext_host_name(ssl, uc->uc_up->up_host) != 1 ||
	    SSL_set1_host(ssl, uc->uc_up->up_host) != 1)
		goto fail;
	/*
	 * A resumed session has no verified chain to match pins against,
	 * so pinned routes always do a full handshake.
	 */
	if (uc->uc_up->up_session != NULL && c->uc_npins == 0)
		SSL_set_session(ssl, uc->uc_up->up_session);
	return ssl;
fail:
	SSL_free(ssl);
	return NULL;
}

static void
upconn_start_connect(struct upconn *uc)
{
	struct upstream *up = uc->uc_up;
	const struct limits *l = &up->up_cf->cf_limits;
	struct timeval tv;
	int fd;
	socklen_t len;

	if (uc->uc_try >= up->up_naddrs) {
		upconn_fail(uc, REASON_UPSTREAM_UNREACHABLE);
		return;
	}
	/* Only the addresses were asked for: they are fresh now. */
	if (uc->uc_probe) {
		upconn_fail(uc, REASON_OK);
		return;
	}
	uc->uc_state = UPCONN_S_CONNECTING;
	uc->uc_addr = up->up_addrs[uc->uc_try];
	len = uc->uc_addr.ss_family == AF_INET ? sizeof(struct sockaddr_in) :
						 sizeof(struct sockaddr_in6);
	fd = socket(uc->uc_addr.ss_family,
	    SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd == -1) {
		/* EMFILE under a flood: once a second, with a count. */
		static struct log_every socket_warn;

		log_warn_every(&socket_warn, "upstream socket");
		upconn_fail(uc, REASON_UPSTREAM_UNREACHABLE);
		return;
	}
	conn_sock_tune(fd);
	if (!uc->uc_tunnel && up->up_tls) {
		if ((uc->uc_ssl = upconn_new_ssl(uc)) == NULL) {
			close(fd);
			upconn_fail(uc, REASON_UPSTREAM_TLS_ERROR);
			return;
		}
		/* Takes the fd and the SSL whether it succeeds or not. */
		uc->uc_bev =
		    bufferevent_openssl_socket_new(up_base, fd, uc->uc_ssl,
			BUFFEREVENT_SSL_CONNECTING, BEV_OPT_CLOSE_ON_FREE);
		/*
		 * Dirty shutdowns stay errors: a FIN without close_notify
		 * could cut a close-delimited response short unnoticed.
		 */
	} else
		uc->uc_bev =
		    bufferevent_socket_new(up_base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (uc->uc_bev == NULL) {
		uc->uc_ssl = NULL;
		close(fd);
		upconn_fail(uc, REASON_UPSTREAM_UNREACHABLE);
		return;
	}
	bufferevent_set_max_single_read(uc->uc_bev, UPSTREAM_IO_MAX);
	bufferevent_set_max_single_write(uc->uc_bev, UPSTREAM_IO_MAX);
	bufferevent_setcb(uc->uc_bev, NULL, NULL, upconn_connect_event_cb, uc);
	/* The connect timeout covers TCP and TLS handshakes together. */
	tv = sl_ms_tv(l->connect_timeout_ms);
	bufferevent_set_timeouts(uc->uc_bev, &tv, &tv);
	bufferevent_enable(uc->uc_bev, EV_READ | EV_WRITE);
	/*
	 * A failure to connect, immediate or not, reaches the event callback
	 * from the loop, which tries the next address.
	 */
	(void)bufferevent_socket_connect(uc->uc_bev,
	    (struct sockaddr *)&uc->uc_addr, (int)len);
}

/* Idle pool: any byte or EOF from an idle upstream ends it. */
static void
upconn_idle_read_cb(struct bufferevent *bev, void *arg)
{
	struct upconn *uc = arg;

	(void)bev;
	TAILQ_REMOVE(&uc->uc_up->up_idle, uc, uc_entry);
	uc->uc_up->up_nidle--;
	metrics_pool_idle(-1);
	upconn_free(uc);
}

static void
upconn_idle_event_cb(struct bufferevent *bev, short what, void *arg)
{
	(void)what;
	upconn_idle_read_cb(bev, arg);
}

/*
 * Whether an idle connection is still usable: the upstream may have closed
 * it (or sent something unasked) since the loop last looked, and its event
 * is not run yet. One non-blocking peek at the socket.
 */
static int
upconn_alive(const struct upconn *uc)
{
	char b;
	ssize_t n;

	if (evbuffer_get_length(bufferevent_get_input(uc->uc_bev)) > 0)
		return 0;
	n = recv(bufferevent_getfd(uc->uc_bev), &b, 1, MSG_PEEK | MSG_DONTWAIT);
	return n == -1 && errno == EAGAIN;
}

/* The kept destination host:port of rt, made the most recently used. */
static struct upstream *
upstream_dest_find(struct upstreams *us, const struct route *rt,
    const char *host, uint16_t port, int tls)
{
	struct upstream *up;

	TAILQ_FOREACH(up, &us->us_dests, up_lru)
		if (up->up_rt == rt && up->up_port == port &&
		    up->up_tls == tls && strcmp(up->up_host, host) == 0) {
			TAILQ_REMOVE(&us->us_dests, up, up_lru);
			TAILQ_INSERT_HEAD(&us->us_dests, up, up_lru);
			return up;
		}
	return NULL;
}

/*
 * Evict the least recently used destination nothing holds a connection
 * of (idle ones aside); -1 when there is none.
 */
static int
upstream_dest_evict(struct upstreams *us)
{
	struct upstream *up, *victim = NULL;

	TAILQ_FOREACH_REVERSE(up, &us->us_dests, upstream_list, up_lru)
		if (up->up_nconns == up->up_nidle &&
		    TAILQ_EMPTY(&up->up_waiters)) {
			victim = up;
			break;
		}
	if (victim == NULL)
		return -1;
	TAILQ_REMOVE(&us->us_dests, victim, up_lru);
	us->us_ndests--;
	upstream_free(victim);
	return 0;
}

/* A new destination host:port of rt; NULL when out of memory. */
static struct upstream *
upstream_dest_new(struct upstreams *us, const struct route *rt,
    const char *host, uint16_t port, int tls)
{
	struct upstream *up;
	struct in6_addr a6;
	struct in_addr a4;

	if ((up = calloc(1, sizeof(*up))) == NULL)
		return NULL;
	up->up_cf = us->us_cf;
	up->up_rt = rt;
	up->up_dest = 1;
	/* TLS only where the route can verify it (intercepting routes). */
	up->up_tls = tls && rt->rt_up.uc_ssl_ctx != NULL;
	snprintf(up->up_host, sizeof(up->up_host), "%s", host);
	up->up_port = port;
	up->up_host_is_ip = inet_pton(AF_INET6, host, &a6) == 1 ||
	    inet_pton(AF_INET, host, &a4) == 1;
	TAILQ_INIT(&up->up_waiters);
	TAILQ_INIT(&up->up_idle);
	if ((up->up_kick = evtimer_new(up_base, upstream_kick_cb, up)) ==
	    NULL) {
		free(up);
		return NULL;
	}
	TAILQ_INSERT_HEAD(&us->us_dests, up, up_lru);
	us->us_ndests++;
	return up;
}

/*
 * The destination host:port of allowlist route rt: the one kept (now the
 * most recently used), or a new one. At UPSTREAM_DEST_MAX the least
 * recently used destination nothing holds a connection of (idle ones
 * aside) is evicted; NULL when there is none, or out of memory.
 */
static struct upstream *
upstream_dest(struct upstreams *us, const struct route *rt, const char *host,
    uint16_t port, int tls)
{
	struct upstream *up;

	if (host == NULL || host[0] == '\0' ||
	    strlen(host) >= UPSTREAM_HOST_MAX ||
	    (tls && rt->rt_up.uc_ssl_ctx == NULL))
		return NULL;
	if ((up = upstream_dest_find(us, rt, host, port, tls)) != NULL)
		return up;
	if (us->us_ndests >= UPSTREAM_DEST_MAX && upstream_dest_evict(us) == -1)
		return NULL;
	return upstream_dest_new(us, rt, host, port, tls);
}

int
upstream_get(struct upstreams *us, const struct route *rt, int flags,
    upconn_cb *cb, void *arg, struct upconn **out)
{
	return upstream_get_to(us, rt, NULL, 0, flags, cb, arg, out);
}

int
upstream_get_to(struct upstreams *us, const struct route *rt, const char *host,
    uint16_t port, int flags, upconn_cb *cb, void *arg, struct upconn **out)
{
	struct upstream *up = NULL;
	int tunnel = (flags & UPSTREAM_TUNNEL) != 0;
	int tls = (flags & UPSTREAM_TLS) != 0;
	struct upconn *uc;
	size_t i;

	*out = NULL;
	/* rt belongs to us's policy: the request took both at once. */
	if (us != NULL && rt != NULL && rt == us->us_cf->cf_report_rt)
		up = upstream_dest(us, rt, host, port, 0); /* "report" */
	else if (us != NULL && rt >= us->us_cf->cf_routes &&
	    (i = (size_t)(rt - us->us_cf->cf_routes)) < us->us_n)
		up = rt->rt_up.uc_as_requested ?
		    upstream_dest(us, rt, host, port, tls) :
		    us->us_up[i];
	if (up == NULL)
		return -1;
	while (!tunnel && !(flags & (UPSTREAM_FRESH | UPSTREAM_RESOLVE)) &&
	    (uc = TAILQ_FIRST(&up->up_idle)) != NULL) {
		TAILQ_REMOVE(&up->up_idle, uc, uc_entry);
		up->up_nidle--;
		metrics_pool_idle(-1);
		if (!upconn_alive(uc)) {
			upconn_free(uc);
			continue;
		}
		uc->uc_state = UPCONN_S_BUSY;
		uc->uc_cb = cb;
		uc->uc_arg = arg;
		bufferevent_setcb(uc->uc_bev, NULL, NULL, NULL, NULL);
		bufferevent_set_timeouts(uc->uc_bev, NULL, NULL);
		*out = uc;
		return 0;
	}
	if ((uc = calloc(1, sizeof(*uc))) == NULL)
		return -1;
	uc->uc_up = up;
	up->up_nconns++;
	uc->uc_tunnel = tunnel;
	uc->uc_probe = (flags & UPSTREAM_RESOLVE) != 0;
	uc->uc_cb = cb;
	uc->uc_arg = arg;
	uc->uc_start = sl_mono_tv();
	uc->uc_state = UPCONN_S_RESOLVING;
	TAILQ_INSERT_TAIL(&up->up_waiters, uc, uc_entry);
	*out = uc;
	/*
	 * IMPORTANT: the callback must never run inside upstream_get(), or a
	 * caller could see its connection freed before the call returns. The
	 * kick event starts the waiters from the loop instead.
	 */
	event_active(up->up_kick, EV_TIMEOUT, 0);
	return 1;
}

static void
upstream_kick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct upstream *up = arg;
	struct upconn *uc;

	(void)fd;
	(void)what;
	if (up->up_naddrs > 0 && sl_mono_tv().tv_sec < up->up_expires) {
		while ((uc = TAILQ_FIRST(&up->up_waiters)) != NULL) {
			TAILQ_REMOVE(&up->up_waiters, uc, uc_entry);
			upconn_start_connect(uc);
		}
		return;
	}
	if (!TAILQ_EMPTY(&up->up_waiters))
		upstream_resolve(up);
}

/* Same family and address, the port aside (IPv4-mapped as IPv4). */
static int
same_addr(const struct sockaddr_storage *a, const struct sockaddr *b)
{
	const unsigned char *x, *y;
	size_t xl, yl;

	x = a->ss_family == AF_INET ?
	    (const unsigned char *)&((const struct sockaddr_in *)a)->sin_addr :
	    (const unsigned char *)&((const struct sockaddr_in6 *)a)->sin6_addr;
	xl = a->ss_family == AF_INET ? 4 : 16;
	y = b->sa_family == AF_INET ?
	    (const unsigned char *)&((const struct sockaddr_in *)b)->sin_addr :
	    (const unsigned char *)&((const struct sockaddr_in6 *)b)->sin6_addr;
	yl = b->sa_family == AF_INET ? 4 : 16;
	if (xl == 16 && IN6_IS_ADDR_V4MAPPED((const struct in6_addr *)x)) {
		x += 12;
		xl = 4;
	}
	if (yl == 16 && IN6_IS_ADDR_V4MAPPED((const struct in6_addr *)y)) {
		y += 12;
		yl = 4;
	}
	return xl == yl && memcmp(x, y, xl) == 0;
}

int
upstream_has_addr(struct upstreams *us, const struct route *rt,
    const struct sockaddr *sa)
{
	struct upstream *up = NULL;
	size_t i;

	if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)
		return 0;
	if (us != NULL && rt >= us->us_cf->cf_routes &&
	    (i = (size_t)(rt - us->us_cf->cf_routes)) < us->us_n)
		up = us->us_up[i];
	if (up == NULL)
		return 0;
	if (up->up_naddrs == 0 || sl_mono_tv().tv_sec >= up->up_expires)
		return -1;
	for (i = 0; i < up->up_naddrs; i++)
		if (same_addr(&up->up_addrs[i], sa))
			return 1;
	return 0;
}

void
upconn_cancel(struct upconn *uc)
{
	if (uc == NULL)
		return;
	if (uc->uc_state == UPCONN_S_RESOLVING)
		TAILQ_REMOVE(&uc->uc_up->up_waiters, uc, uc_entry);
	upconn_free(uc);
}

void
upconn_release(struct upconn *uc, int reusable)
{
	struct upstream *up;
	struct timeval tv = { UPSTREAM_POOL_IDLE, 0 };

	if (uc == NULL)
		return;
	up = uc->uc_up;
	if (!reusable || uc->uc_tunnel || up->up_nidle >= UPSTREAM_POOL_MAX ||
	    evbuffer_get_length(bufferevent_get_input(uc->uc_bev)) > 0 ||
	    evbuffer_get_length(bufferevent_get_output(uc->uc_bev)) > 0) {
		upconn_free(uc);
		return;
	}
	uc->uc_state = UPCONN_S_IDLE;
	uc->uc_cb = NULL;
	uc->uc_arg = NULL;
	bufferevent_setcb(uc->uc_bev, upconn_idle_read_cb, NULL,
	    upconn_idle_event_cb, uc);
	bufferevent_set_timeouts(uc->uc_bev, &tv, NULL);
	bufferevent_enable(uc->uc_bev, EV_READ);
	bufferevent_disable(uc->uc_bev, EV_WRITE);
	/* Most recently used first: its TCP window and TLS state are warm. */
	TAILQ_INSERT_HEAD(&up->up_idle, uc, uc_entry);
	up->up_nidle++;
	metrics_pool_idle(1);
}

struct bufferevent *
upconn_bev(const struct upconn *uc)
{
	return uc->uc_bev;
}

int
upconn_tls(const struct upconn *uc)
{
	return uc->uc_ssl != NULL;
}

int
upconn_addr(const struct upconn *uc, char *buf, size_t len)
{
	return addr_str((const struct sockaddr *)&uc->uc_addr, buf, len) > 0 ?
	    0 :
	    -1;
}
