/*
 * Intercepted tunnels without a CONNECT (docs/interception.md): a
 * connection to an intercept listener is a tunnel to its host and port
 * from the first byte; a connection to a transparent listener is one the
 * sidecar's kernel rules redirected there, and becomes a tunnel only when
 * its ClientHello's SNI names an intercepted host, on one of that route's
 * connect.ports, and the address the client dialled (SO_ORIGINAL_DST) is
 * one of the addresses sluice itself resolved that host's upstream to.
 * Anything else is closed and audited (a connect.tunnel line, "deny").
 * The ClientHello is only copied, never drained: once the tunnel is
 * decided, inner.c's sniff starts the handshake on the same bytes.
 */
#include <sys/socket.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <linux/netfilter_ipv4.h>
#include <linux/netfilter_ipv6/ip6_tables.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "proxy/config/config.h"
#include "proxy/http/http1.h"
#include "proxy/relay/conn_int.h"
#include "proxy/relay/relay.h"
#include "proxy/util/util.h"

/*
 * Bytes read before a decision: a ClientHello of TLS_HELLO_MAX bytes and
 * the headers of the records it may come in.
 */
#define TP_PEEK_MAX (TLS_HELLO_MAX + 1024)

void
conn_icpt_refuse(struct conn *c, enum reason r, const char *detail)
{
	struct icpt *it = c->cn_icpt;

	if (it != NULL) {
		it->it_refused = 1;
		it->it_detail = detail;
	}
	conn_close(c, r);
}

/* "host:port" of the tunnel, for the audit line (IPv6 in brackets). */
static int
icpt_hostport(struct icpt *it)
{
	char hp[300];
	int v6 = strchr(it->it_host, ':') != NULL;

	snprintf(hp, sizeof(hp), "%s%s%s:%u", v6 ? "[" : "", it->it_host,
	    v6 ? "]" : "", it->it_port);
	free(it->it_hostport);
	return (it->it_hostport = strdup(hp)) == NULL ? -1 : 0;
}

int
conn_listen_intercept(struct conn *c)
{
	const struct config *cf = c->cn_env->pe_cf;
	const struct listener_conf *lc = conn_listener(c, cf);
	struct icpt *it;
	socklen_t len = sizeof(struct sockaddr_storage), local_len;
	struct sockaddr_storage local;
	char dest[64];
	int fd, rc;

	if ((it = calloc(1, sizeof(*it))) == NULL)
		return -1;
	c->cn_icpt = it;
	it->it_listener = 1;
	clients_next_id(it->it_id, sizeof(it->it_id));
	it->it_start = sl_mono_tv();
	if (lc->lc_type == LISTENER_INTERCEPT) {
		snprintf(it->it_host, sizeof(it->it_host), "%s", lc->lc_host);
		it->it_port = lc->lc_port;
		if (lc->lc_route_idx < cf->cf_nroutes)
			snprintf(it->it_route, sizeof(it->it_route), "%s",
			    cf->cf_routes[lc->lc_route_idx].rt_audience);
		return icpt_hostport(it);
	}
	/* Transparent: where was the client going? */
	it->it_wait = 1;
	fd = bufferevent_getfd(c->cn_bev);
	memset(&it->it_orig, 0, sizeof(it->it_orig));
	if (c->cn_peer.sin6_family == AF_INET6)
		rc = getsockopt(fd, SOL_IPV6, IP6T_SO_ORIGINAL_DST,
		    &it->it_orig, &len);
	else
		rc =
		    getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &it->it_orig, &len);
	/*
	 * Reached directly, not redirected: conntrack has no entry, or its
	 * original destination is the listener itself. Nowhere to go.
	 */
	local_len = sizeof(local);
	if (rc == 0 &&
	    getsockname(fd, (struct sockaddr *)&local, &local_len) == 0 &&
	    local.ss_family == it->it_orig.ss_family &&
	    memcmp(&local, &it->it_orig,
		local.ss_family == AF_INET ? sizeof(struct sockaddr_in) :
					     sizeof(struct sockaddr_in6)) == 0)
		rc = -1;
	if (rc == -1) {
		conn_icpt_refuse(c, REASON_DESTINATION_DENIED,
		    "no_original_destination");
		return 0;
	}
	if (addr_str((const struct sockaddr *)&it->it_orig, dest,
		sizeof(dest)) > 0 &&
	    (it->it_dest = strdup(dest)) == NULL)
		return -1;
	return 0;
}

static in_port_t
orig_port(const struct icpt *it)
{
	if (it->it_orig.ss_family == AF_INET)
		return ntohs(
		    ((const struct sockaddr_in *)&it->it_orig)->sin_port);
	return ntohs(((const struct sockaddr_in6 *)&it->it_orig)->sin6_port);
}

/*
 * The intercepting route whose upstream host or hosts name host, or NULL;
 * *named is set when some route names it at all.
 */
static const struct route *
tp_route(const struct config *cf, const char *host, int *named)
{
	size_t i, h;

	*named = 0;
	for (i = 0; i < cf->cf_nroutes; i++) {
		const struct route *rt = &cf->cf_routes[i];
		int hit;

		/* Dialled as asked (no upstream host): not one host's. */
		if (rt->rt_up.uc_as_requested)
			continue;
		hit = strcasecmp(rt->rt_up.uc_host, host) == 0;

		for (h = 0; !hit && h < rt->rt_nhosts; h++)
			hit = strcasecmp(rt->rt_hosts[h], host) == 0;
		if (!hit)
			continue;
		*named = 1;
		if (rt->rt_intercept)
			return rt;
	}
	return NULL;
}

/* Decided: serve the tunnel from the bytes already read. */
static void
tp_accept(struct conn *c)
{
	struct icpt *it = c->cn_icpt;

	it->it_wait = 0;
	/* Inner requests take the policy of their own time, not this one. */
	upstreams_unref(it->it_ups);
	it->it_ups = NULL;
	config_unref(it->it_cf);
	it->it_cf = NULL;
	bev_on(c, c->cn_bev, EV_READ);
	conn_icpt_sniff(c);
}

/* The address check, once the upstream's addresses are known. */
static void
tp_check_addr(struct conn *c, const struct route *rt)
{
	struct icpt *it = c->cn_icpt;
	int k = upstream_has_addr(it->it_ups, rt,
	    (const struct sockaddr *)&it->it_orig);

	if (k == 1)
		tp_accept(c);
	else
		conn_icpt_refuse(c, REASON_DESTINATION_DENIED,
		    "destination_mismatch");
}

static void
tp_resolved_cb(struct upconn *uc, enum reason r, void *arg)
{
	struct conn *c = arg;
	struct icpt *it = c->cn_icpt;
	int named;
	const struct route *rt;

	(void)uc;
	it->it_probe = NULL;
	if (r != REASON_OK) {
		conn_icpt_refuse(c, r, "upstream_unresolved");
		return;
	}
	rt = tp_route(it->it_cf, it->it_host, &named);
	if (rt == NULL) {
		conn_icpt_refuse(c, REASON_ROUTE_NOT_FOUND,
		    "sni_not_intercepted");
		return;
	}
	tp_check_addr(c, rt);
}

/* The ClientHello names host: route, port and destination address. */
static void
tp_decide(struct conn *c, const char *sni)
{
	struct icpt *it = c->cn_icpt;
	const struct route *rt;
	uint16_t port = orig_port(it);
	size_t i;
	int named, k;

	snprintf(it->it_host, sizeof(it->it_host), "%s", sni);
	it->it_port = port;
	if (icpt_hostport(it) == -1) {
		conn_close(c, REASON_INTERNAL_ERROR);
		return;
	}
	/* The policy and upstream state this tunnel is decided with. */
	it->it_cf = config_ref(c->cn_env->pe_cf);
	it->it_ups = upstreams_ref(c->cn_env->pe_ups);
	if ((rt = tp_route(it->it_cf, sni, &named)) == NULL) {
		conn_icpt_refuse(c, REASON_ROUTE_NOT_FOUND,
		    "sni_not_intercepted");
		return;
	}
	snprintf(it->it_route, sizeof(it->it_route), "%s", rt->rt_audience);
	for (i = 0; i < rt->rt_nports; i++)
		if (rt->rt_ports[i] == port)
			break;
	if (i == rt->rt_nports) {
		conn_icpt_refuse(c, REASON_ROUTE_NOT_FOUND,
		    "port_not_intercepted");
		return;
	}
	if ((k = upstream_has_addr(it->it_ups, rt,
		 (const struct sockaddr *)&it->it_orig)) != -1) {
		tp_check_addr(c, rt);
		return;
	}
	/* No fresh resolution: make one, reading nothing meanwhile. */
	it->it_wait = 2;
	bev_off(c, c->cn_bev, EV_READ);
	if (upstream_get(it->it_ups, rt, UPSTREAM_RESOLVE, tp_resolved_cb, c,
		&it->it_probe) == -1) {
		it->it_probe = NULL;
		conn_close(c, REASON_INTERNAL_ERROR);
	}
}

/*
 * Where the record that the first len bytes end in ends: len when they
 * end on a record boundary (or are not records), else more.
 */
static size_t
tp_records_end(struct evbuffer *in, size_t len)
{
	struct evbuffer_ptr p;
	unsigned char h[5];
	size_t off = 0;

	while (off + sizeof(h) <= len) {
		if (evbuffer_ptr_set(in, &p, off, EVBUFFER_PTR_SET) == -1 ||
		    evbuffer_copyout_from(in, &p, h, sizeof(h)) !=
			(ev_ssize_t)sizeof(h) ||
		    h[0] != 0x16)
			return len; /* not ours to judge: the parser says */
		off += sizeof(h) + ((size_t)h[3] << 8 | h[4]);
	}
	return off > len ? off : len;
}

void
conn_tp_step(struct conn *c)
{
	struct icpt *it = c->cn_icpt;
	struct evbuffer *in = bufferevent_get_input(c->cn_bev);
	unsigned char *buf;
	char sni[256];
	const char *why;
	size_t len;
	enum tls_hello r;

	if (it->it_wait != 1)
		return; /* resolving: the bytes wait */
	len = evbuffer_get_length(in);
	if (len > TP_PEEK_MAX)
		len = TP_PEEK_MAX;
	/* Parse again only once a record is whole (a client may trickle). */
	if (len < TP_PEEK_MAX && len < tp_records_end(in, len))
		return;
	if ((buf = malloc(len > 0 ? len : 1)) == NULL) {
		conn_close(c, REASON_INTERNAL_ERROR);
		return;
	}
	/* A copy: the handshake starts on the same bytes later. */
	if (evbuffer_copyout(in, buf, len) != (ev_ssize_t)len) {
		free(buf);
		conn_close(c, REASON_INTERNAL_ERROR);
		return;
	}
	r = tls_hello_sni(buf, len, sni, sizeof(sni), &why);
	free(buf);
	switch (r) {
	case TLS_HELLO_OK:
		tp_decide(c, sni);
		return;
	case TLS_HELLO_MORE:
		if (len >= TP_PEEK_MAX)
			conn_icpt_refuse(c, REASON_CLIENT_TLS_ERROR,
			    "clienthello_too_large");
		return;
	case TLS_HELLO_NOT_TLS:
		conn_icpt_refuse(c, REASON_CLIENT_TLS_ERROR, "not_tls");
		return;
	case TLS_HELLO_NO_SNI:
		conn_icpt_refuse(c, REASON_ROUTE_NOT_FOUND, "sni_missing");
		return;
	default:
		log_debug("transparent: %s", why);
		conn_icpt_refuse(c, REASON_CLIENT_TLS_ERROR,
		    "clienthello_malformed");
		return;
	}
}
