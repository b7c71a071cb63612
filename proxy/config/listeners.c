/*
 * listeners[]: type, address and name of each, none twice, and the route
 * of a reverse listener.
 */
#include <sys/socket.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>

#include "proxy/config/config.h"
#include "proxy/config/config_int.h"
#include "proxy/token/token.h"

/*
 * "IP:port" or "[IPv6]:port" into a sockaddr.
 */
int
cf_parse_listen(const char *s, struct sockaddr_storage *ss, socklen_t *len)
{
	char host[INET6_ADDRSTRLEN + 1];
	const char *colon, *h;
	size_t hlen;
	char *end;
	unsigned long port;

	memset(ss, 0, sizeof(*ss));
	if (s[0] == '[') {
		if ((colon = strstr(s, "]:")) == NULL)
			return -1;
		h = s + 1;
		hlen = (size_t)(colon - h);
		colon++;
	} else {
		if ((colon = strrchr(s, ':')) == NULL)
			return -1;
		h = s;
		hlen = (size_t)(colon - s);
	}
	if (hlen == 0 || hlen >= sizeof(host))
		return -1;
	memcpy(host, h, hlen);
	host[hlen] = '\0';
	if (colon[1] < '0' || colon[1] > '9')
		return -1;
	errno = 0;
	port = strtoul(colon + 1, &end, 10);
	if (errno != 0 || *end != '\0' || port == 0 || port > 65535 ||
	    strlen(colon + 1) > 5)
		return -1;
	if (s[0] != '[') {
		struct sockaddr_in *sin = (struct sockaddr_in *)ss;

		if (inet_pton(AF_INET, host, &sin->sin_addr) != 1)
			return -1;
		sin->sin_family = AF_INET;
		sin->sin_port = htons((uint16_t)port);
		*len = sizeof(*sin);
	} else {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

		if (inet_pton(AF_INET6, host, &sin6->sin6_addr) != 1)
			return -1;
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons((uint16_t)port);
		*len = sizeof(*sin6);
	}
	return 0;
}

/* The listener type named type into *t: 0, or -1 none. */
static int
listener_type(const char *type, enum listener_type *t)
{
	if (strcmp(type, "forward") == 0)
		*t = LISTENER_FORWARD;
	else if (strcmp(type, "reverse") == 0)
		*t = LISTENER_REVERSE;
	else if (strcmp(type, "intercept") == 0)
		*t = LISTENER_INTERCEPT;
	else if (strcmp(type, "transparent") == 0)
		*t = LISTENER_TRANSPARENT;
	else
		return -1;
	return 0;
}

/* Whether route, host and port (at jp) fit lc's type: 0, or -1. */
static int
listener_binding(struct cfctx *cx, const char *jp,
    const struct listener_conf *lc, const char *route, const char *host,
    uint64_t port)
{
	if (lc->lc_type == LISTENER_REVERSE && route == NULL)
		return cf_err(cx, jp, "a reverse listener needs \"route\"");
	if (lc->lc_type != LISTENER_REVERSE && route != NULL)
		return cf_err(cx, jp,
		    "route: only reverse listeners are bound to a route");
	if (lc->lc_type == LISTENER_INTERCEPT && host == NULL)
		return cf_err(cx, jp,
		    "an intercept listener needs \"host\" (the intercepted "
		    "host its connections are tunnels to)");
	if (lc->lc_type != LISTENER_INTERCEPT && host != NULL)
		return cf_err(cx, jp,
		    "host: only intercept listeners name one");
	if (lc->lc_type != LISTENER_INTERCEPT && port != 0)
		return cf_err(cx, jp,
		    "port: only intercept listeners name one");
	return 0;
}

/* An intercept listener's host (lowered) and port (at jp) into lc. */
static int
listener_host(struct cfctx *cx, const char *jp, struct listener_conf *lc,
    const char *host, uint64_t port)
{
	size_t i, n = strlen(host);

	if (n == 0 || n >= sizeof(lc->lc_host))
		return cf_err(cx, jp, "host: empty or too long");
	for (i = 0; i < n; i++)
		lc->lc_host[i] = (char)(host[i] >= 'A' && host[i] <= 'Z' ?
			host[i] - 'A' + 'a' :
			host[i]);
	lc->lc_host[n] = '\0';
	lc->lc_port = port != 0 ?
	    (uint16_t)port :
	    lc->lc_addr.ss_family == AF_INET ?
	    ntohs(((struct sockaddr_in *)&lc->lc_addr)->sin_port) :
	    ntohs(((struct sockaddr_in6 *)&lc->lc_addr)->sin6_port);
	return 0;
}

/* One entry of "listeners" (at jp) into lc. */
static int
load_listener(struct cfctx *cx, const char *jp, const cJSON *it,
    struct listener_conf *lc)
{
	static const char *const keys[] = { "name", "type", "listen", "route",
		"host", "port", NULL };
	const char *name = NULL, *type = NULL, *listen = NULL;
	const char *route = NULL, *host = NULL;
	uint64_t port = 0;

	if (cf_keys(cx, jp, it, keys) == -1 ||
	    cf_str(cx, jp, it, "type", 1, &type) == -1 ||
	    cf_str(cx, jp, it, "listen", 1, &listen) == -1 ||
	    cf_str(cx, jp, it, "name", 0, &name) == -1 ||
	    cf_str(cx, jp, it, "route", 0, &route) == -1 ||
	    cf_str(cx, jp, it, "host", 0, &host) == -1 ||
	    cf_uint(cx, jp, it, "port", 1, 65535, &port) == -1)
		return -1;
	if (listener_type(type, &lc->lc_type) == -1)
		return cf_err(cx, jp,
		    "type: \"%s\" is not \"forward\", \"reverse\", "
		    "\"intercept\" or \"transparent\"",
		    type);
	if (strlen(listen) >= sizeof(lc->lc_listen) ||
	    cf_parse_listen(listen, &lc->lc_addr, &lc->lc_addrlen) == -1)
		return cf_err(cx, jp,
		    "listen: \"%s\" is not IP:PORT or [IPv6]:PORT", listen);
	snprintf(lc->lc_listen, sizeof(lc->lc_listen), "%s", listen);
	if (name == NULL)
		name = listen;
	if (strlen(name) >= sizeof(lc->lc_name))
		return cf_err(cx, jp, "name: longer than %zu bytes",
		    sizeof(lc->lc_name) - 1);
	snprintf(lc->lc_name, sizeof(lc->lc_name), "%s", name);
	if (listener_binding(cx, jp, lc, route, host, port) == -1)
		return -1;
	if (host != NULL && listener_host(cx, jp, lc, host, port) == -1)
		return -1;
	if (route != NULL) {
		if (strlen(route) > TOKEN_MAX_STR)
			return cf_err(cx, jp, "route: too long");
		snprintf(lc->lc_route, sizeof(lc->lc_route), "%s", route);
	}
	return 0;
}

/* Listener i (at jp) takes no name or address of one before it. */
static int
listener_unique(struct cfctx *cx, const char *jp, size_t i)
{
	const struct listener_conf *ls = cx->cf->cf_listeners, *lc = &ls[i];
	size_t j;

	for (j = 0; j < i; j++) {
		if (strcmp(ls[j].lc_name, lc->lc_name) == 0)
			return cf_err(cx, jp,
			    "name: \"%s\" is used by listeners[%zu]",
			    lc->lc_name, j);
		if (ls[j].lc_addrlen == lc->lc_addrlen &&
		    memcmp(&ls[j].lc_addr, &lc->lc_addr, lc->lc_addrlen) == 0)
			return cf_err(cx, jp,
			    "listen: %s is used by listeners[%zu]",
			    lc->lc_listen, j);
	}
	return 0;
}

int
cf_load_listeners(struct cfctx *cx, const cJSON *root)
{
	struct config *cf = cx->cf;
	const cJSON *arr, *it;
	char jp[64];
	size_t i = 0;
	int n;

	if ((n = cf_array(cx, "", root, "listeners", 1, 64, &arr)) == -1 ||
	    (cf->cf_listeners = cf_calloc(cx, "listeners", (size_t)n,
		 sizeof(*cf->cf_listeners))) == NULL)
		return -1;
	cf->cf_nlisteners = (size_t)n;
	cJSON_ArrayForEach(it, arr) {
		cf_idx(jp, sizeof(jp), "listeners", i);
		if (load_listener(cx, jp, it, &cf->cf_listeners[i]) == -1 ||
		    listener_unique(cx, jp, i) == -1)
			return -1;
		i++;
	}
	return 0;
}

/*
 * The index of the route whose upstream host or hosts name host, or -1;
 * among routes sharing an upstream host, the first that intercepts.
 */
static ssize_t
route_of_host(const struct config *cf, const char *host)
{
	ssize_t first = -1;
	size_t i, h;
	int hit;

	for (i = 0; i < cf->cf_nroutes; i++) {
		const struct route *rt = &cf->cf_routes[i];

		/* Dialled as asked (no upstream host): not one host's. */
		if (rt->rt_up.uc_as_requested)
			continue;
		hit = strcasecmp(rt->rt_up.uc_host, host) == 0;
		for (h = 0; !hit && h < rt->rt_nhosts; h++)
			hit = strcasecmp(rt->rt_hosts[h], host) == 0;
		if (!hit)
			continue;
		if (rt->rt_intercept)
			return (ssize_t)i;
		if (first == -1)
			first = (ssize_t)i;
	}
	return first;
}

/* An intercept listener's host and port: an intercepted route's. */
static int
link_intercept(struct cfctx *cx, const char *jp, struct listener_conf *lc)
{
	const struct config *cf = cx->cf;
	ssize_t r = route_of_host(cf, lc->lc_host);
	const struct route *rt;
	size_t p;

	if (r == -1)
		return cf_err(cx, jp,
		    "host: \"%s\" is no route's upstream host or hosts",
		    lc->lc_host);
	rt = &cf->cf_routes[r];
	if (!rt->rt_intercept)
		return cf_err(cx, jp,
		    "host: \"%s\" belongs to routes[%zd], which does not "
		    "intercept (connect.intercept)",
		    lc->lc_host, r);
	for (p = 0; p < rt->rt_nports; p++)
		if (rt->rt_ports[p] == lc->lc_port)
			break;
	if (p == rt->rt_nports)
		return cf_err(cx, jp,
		    "port: %u is not in routes[%zd].connect.ports", lc->lc_port,
		    r);
	lc->lc_route_idx = (size_t)r;
	return 0;
}

static in_port_t
listen_port(const struct listener_conf *lc)
{
	if (lc->lc_addr.ss_family == AF_INET)
		return ((const struct sockaddr_in *)&lc->lc_addr)->sin_port;
	return ((const struct sockaddr_in6 *)&lc->lc_addr)->sin6_port;
}

/*
 * A transparent listener: what the sidecar rules redirect to. The kernel
 * redirects to 127.0.0.1 or ::1 on one port, so it listens there (or on
 * the wildcard), one per family, all on one port.
 */
static int
link_transparent(struct cfctx *cx, const char *jp, size_t idx)
{
	const struct config *cf = cx->cf;
	const struct listener_conf *lc = &cf->cf_listeners[idx];
	const struct sockaddr_in *sin = (const void *)&lc->lc_addr;
	const struct sockaddr_in6 *sin6 = (const void *)&lc->lc_addr;
	size_t i;

	if (cf->cf_np.np_mode != NETPOLICY_SIDECAR)
		return cf_err(cx, jp,
		    "type: a transparent listener needs netpolicy.mode "
		    "\"sidecar\" (its kernel rules redirect to it)");
	if (lc->lc_addr.ss_family == AF_INET ?
		(sin->sin_addr.s_addr != htonl(INADDR_LOOPBACK) &&
		    sin->sin_addr.s_addr != htonl(INADDR_ANY)) :
		(!IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr) &&
		    !IN6_IS_ADDR_UNSPECIFIED(&sin6->sin6_addr)))
		return cf_err(cx, jp,
		    "listen: a transparent listener takes what the kernel "
		    "redirects to 127.0.0.1 or [::1] (or the wildcard "
		    "address), not %s",
		    lc->lc_listen);
	for (i = 0; i < cf->cf_nroutes; i++)
		if (cf->cf_routes[i].rt_intercept)
			break;
	if (i == cf->cf_nroutes)
		return cf_err(cx, jp,
		    "type: a transparent listener needs a route with "
		    "connect.intercept (what it serves)");
	for (i = 0; i < idx; i++) {
		const struct listener_conf *o = &cf->cf_listeners[i];

		if (o->lc_type != LISTENER_TRANSPARENT)
			continue;
		if (o->lc_addr.ss_family == lc->lc_addr.ss_family)
			return cf_err(cx, jp,
			    "type: listeners[%zu] is the transparent "
			    "listener of this address family already",
			    i);
		if (listen_port(o) != listen_port(lc))
			return cf_err(cx, jp,
			    "listen: the port differs from transparent "
			    "listeners[%zu]'s (the kernel redirects to one)",
			    i);
	}
	return 0;
}

int
cf_link_listeners(struct cfctx *cx)
{
	struct config *cf = cx->cf;
	size_t i, j;
	char jp[64];

	for (i = 0; i < cf->cf_nlisteners; i++) {
		struct listener_conf *lc = &cf->cf_listeners[i];

		cf_idx(jp, sizeof(jp), "listeners", i);
		if (lc->lc_type == LISTENER_INTERCEPT &&
		    link_intercept(cx, jp, lc) == -1)
			return -1;
		if (lc->lc_type == LISTENER_TRANSPARENT &&
		    link_transparent(cx, jp, i) == -1)
			return -1;
		if (lc->lc_type != LISTENER_REVERSE)
			continue;
		for (j = 0; j < cf->cf_nroutes; j++)
			if (strcmp(cf->cf_routes[j].rt_audience,
				lc->lc_route) == 0)
				break;
		if (j == cf->cf_nroutes)
			return cf_err(cx, jp,
			    "route: no route has audience \"%s\"",
			    lc->lc_route);
		lc->lc_route_idx = j;
	}
	return 0;
}
