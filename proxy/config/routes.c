/*
 * routes[]: the audience, the hosts, methods and path prefixes a route
 * allows, and the rule that one host selects at most one route.
 */
#include <sys/socket.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "proxy/config/config.h"
#include "proxy/config/config_int.h"
#include "proxy/http/http1.h"
#include "proxy/token/token.h"
#include "proxy/util/ascii.h"
#include "proxy/util/hostmatch.h"
#include "proxy/util/util.h"

/*
 * Element checks.
 */
static int
check_method(struct cfctx *cx, const char *jp, const char *s)
{
	const char *p;

	for (p = s; *p != '\0'; p++)
		if (!ascii_is_tchar((unsigned char)*p))
			return cf_err(cx, jp, "\"%s\" is not a method name", s);
	if (strcmp(s, "CONNECT") == 0)
		return cf_err(cx, jp,
		    "CONNECT is controlled by connect.enabled");
	return 0;
}

static int
check_prefix(struct cfctx *cx, const char *jp, const char *s)
{
	size_t bad;

	if (s[0] != '/')
		return cf_err(cx, jp, "\"%s\" must start with '/'", s);
	if (strchr(s, '?') != NULL || strchr(s, '#') != NULL)
		return cf_err(cx, jp, "\"%s\" must be a path only", s);
	if (path_check(s, strlen(s), &bad) == -1)
		return cf_err(cx, jp, "\"%s\" is ambiguous at byte %zu", s,
		    bad);
	return 0;
}

static int
check_host(struct cfctx *cx, const char *jp, const char *s)
{
	char buf[HOSTMATCH_BUF], lit[INET6_ADDRSTRLEN];
	struct in6_addr a6;
	struct in_addr a4;
	const char *why = "invalid", *last;
	size_t len = strlen(s);

	/* An IPv6 literal, bare or bracketed; an IPv4 literal. */
	if (inet_pton(AF_INET6, s, &a6) == 1 || inet_pton(AF_INET, s, &a4) == 1)
		return 0;
	if (len >= 2 && len - 2 < sizeof(lit) && s[0] == '[' &&
	    s[len - 1] == ']') {
		memcpy(lit, s + 1, len - 2);
		lit[len - 2] = '\0';
		if (inet_pton(AF_INET6, lit, &a6) == 1)
			return 0;
	}
	if (strchr(s, ':') != NULL)
		return cf_err(cx, jp, "\"%s\": no port allowed", s);
	if (hostmatch_normalize(s, len, 1, buf, &why) == -1)
		return cf_err(cx, jp,
		    "\"%s\" is not a host name or address: %s", s, why);
	/* A wildcard over a numeric label would match IPv4 literals. */
	last = strrchr(buf, '.');
	last = last != NULL ? last + 1 : buf;
	if (buf[0] == '*' && strspn(last, "0123456789") == strlen(last))
		return cf_err(cx, jp,
		    "\"%s\": a wildcard needs a name, not an address", s);
	return 0;
}

/* Hosts are kept as policy_route_for() compares them: lower case, IPv6
 * literals without brackets. */
void
cf_normalize_host(char *h)
{
	size_t len = strlen(h);

	/* A name: lower case, no final dot (check_host() passed it). */
	if (hostmatch_normalize(h, len, 1, h, NULL) >= 0)
		return;

	if (len >= 2 && h[0] == '[' && h[len - 1] == ']') {
		memmove(h, h + 1, len - 2);
		h[len - 2] = '\0';
	}
	for (; *h != '\0'; h++)
		*h = (char)ascii_lower((unsigned char)*h);
}

/*
 * connect: enabled (a raw tunnel), intercept (TLS terminated inside) and
 * the ports an intercepted CONNECT may name (default 443).
 */
static int
load_connect(struct cfctx *cx, const char *jp, const cJSON *conn,
    struct route *rt)
{
	static const char *const keys[] = { "enabled", "intercept", "ports",
		NULL };
	const cJSON *ports = conn != NULL ?
	    cJSON_GetObjectItemCaseSensitive(conn, "ports") :
	    NULL;

	if (conn != NULL &&
	    (cf_keys(cx, jp, conn, keys) == -1 ||
		cf_bool(cx, jp, conn, "enabled", &rt->rt_connect) == -1 ||
		cf_bool(cx, jp, conn, "intercept", &rt->rt_intercept) == -1 ||
		cf_ports(cx, jp, conn, 0, rt->rt_ports, SL_NELEM(rt->rt_ports),
		    &rt->rt_nports) == -1))
		return -1;
	if (ports != NULL && !rt->rt_intercept)
		return cf_err(cx, jp, "ports: only with intercept");
	if (rt->rt_nports == 0) {
		rt->rt_ports[0] = 443;
		rt->rt_nports = 1;
	}
	return 0;
}

/* A header whose whole value is the bare run token (e.g. x-api-key). */
static int
load_token_header(struct cfctx *cx, const char *jp, const char *th,
    struct route *rt)
{
	static const char *const taken[] = { "host", "content-length",
		"transfer-encoding", "connection", "proxy-authorization",
		"authorization", "te", "upgrade", "keep-alive", "trailer",
		"proxy-connection", "cookie", NULL };
	char sub[128];
	size_t i;

	cf_sub(sub, sizeof(sub), jp, "token_header");
	if (th[0] == '\0' || strlen(th) > 64)
		return cf_err(cx, sub, "1 to 64 bytes");
	for (i = 0; th[i] != '\0'; i++)
		if (!ascii_is_tchar((unsigned char)th[i]))
			return cf_err(cx, sub,
			    "\"%s\" is not a header name (byte %zu)", th, i);
	if ((rt->rt_token_header = cf_strdup(cx, sub, th)) == NULL)
		return -1;
	for (i = 0; rt->rt_token_header[i] != '\0'; i++)
		rt->rt_token_header[i] =
		    (char)ascii_lower((unsigned char)rt->rt_token_header[i]);
	for (i = 0; taken[i] != NULL; i++)
		if (strcmp(rt->rt_token_header, taken[i]) == 0)
			return cf_err(cx, sub,
			    "\"%s\" is read by HTTP itself (Authorization is a "
			    "carrier already)",
			    th);
	return 0;
}

/*
 * Where wildcards and allowlist routes may be: an allowlist route names
 * its hosts; a wildcard alias of a fixed route is fine (sluice dials the
 * upstream whatever the name), but an intercepted one needs a leaf per
 * name.
 */
static int
check_hosts_use(struct cfctx *cx, const char *jp, const struct route *rt)
{
	size_t h;

	if (rt->rt_up.uc_as_requested && rt->rt_nhosts == 0)
		return cf_err(cx, jp,
		    "hosts: an allowlist route (upstream.mode as_requested) "
		    "needs at least one");
	/* A literal private address would be refused at every dial. */
	for (h = 0; h < rt->rt_nhosts && rt->rt_up.uc_as_requested &&
	     !rt->rt_up.uc_allow_private;
	     h++) {
		struct sockaddr_storage ss;
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

		memset(&ss, 0, sizeof(ss));
		if (inet_pton(AF_INET, rt->rt_hosts[h], &s4->sin_addr) == 1)
			s4->sin_family = AF_INET;
		else if (inet_pton(AF_INET6, rt->rt_hosts[h], &s6->sin6_addr) ==
		    1)
			s6->sin6_family = AF_INET6;
		else
			continue;
		if (addr_private((struct sockaddr *)&ss))
			return cf_err(cx, jp,
			    "hosts[%zu]: %s is a private address (set "
			    "upstream.allow_private)",
			    h, rt->rt_hosts[h]);
	}
	/* A fixed route's leaves are its names; an allowlist's, as asked. */
	for (h = 0; h < rt->rt_nhosts && rt->rt_intercept &&
	     !rt->rt_up.uc_as_requested;
	     h++)
		if (rt->rt_hosts[h][0] == '*')
			return cf_err(cx, jp,
			    "hosts[%zu]: \"%s\": an intercepting route takes "
			    "exact names only",
			    h, rt->rt_hosts[h]);
	return 0;
}

static int
load_route(struct cfctx *cx, const char *jp, const cJSON *it, struct route *rt)
{
	int allow = cf_upstream_as_requested(it);
	static const char *const keys[] = { "audience", "hosts", "methods",
		"path_prefixes", "max_requests_per_token", "connect",
		"upstream", "token_header", "comment", NULL };
	const char *aud = NULL, *p, *th = NULL,
		   *cm = NULL; /* comment: unused */
	const cJSON *conn;
	char sub[96];
	size_t dup;

	if (cf_keys(cx, jp, it, keys) == -1 ||
	    cf_str(cx, jp, it, "audience", 1, &aud) == -1 ||
	    cf_str(cx, jp, it, "token_header", 0, &th) == -1 ||
	    cf_str(cx, jp, it, "comment", 0, &cm) == -1 ||
	    cf_uint(cx, jp, it, "max_requests_per_token", 0, UINT32_MAX,
		&rt->rt_max_requests) == -1)
		return -1;
	if (strlen(aud) > TOKEN_MAX_STR)
		return cf_err(cx, jp, "audience: longer than %d bytes",
		    TOKEN_MAX_STR);
	for (p = aud; *p != '\0'; p++)
		if ((unsigned char)*p <= 0x20 || *p == 0x7f)
			return cf_err(cx, jp,
			    "audience: no spaces or control characters");
	if ((rt->rt_audience = cf_strdup(cx, jp, aud)) == NULL)
		return -1;
	if (cf_strlist(cx, jp, it, "hosts", &rt->rt_hosts, &rt->rt_nhosts,
		check_host) == -1 ||
	    cf_strlist(cx, jp, it, "methods", &rt->rt_methods, &rt->rt_nmethods,
		check_method) == -1 ||
	    cf_strlist(cx, jp, it, "path_prefixes", &rt->rt_prefixes,
		&rt->rt_nprefixes, check_prefix) == -1)
		return -1;
	/*
	 * Defaults: the model APIs are POST, an allowlist route's hosts are
	 * read (GET, HEAD), and every path is allowed.
	 */
	if (allow && rt->rt_methods == NULL) {
		/* cf_strlist_default() leaves room for a second entry. */
		if (cf_strlist_default(cx, jp, &rt->rt_methods,
			&rt->rt_nmethods, "GET") == -1 ||
		    (rt->rt_methods[1] = cf_strdup(cx, jp, "HEAD")) == NULL)
			return -1;
		rt->rt_nmethods = 2;
	}
	if (cf_strlist_default(cx, jp, &rt->rt_methods, &rt->rt_nmethods,
		"POST") == -1 ||
	    cf_strlist_default(cx, jp, &rt->rt_prefixes, &rt->rt_nprefixes,
		"/") == -1)
		return -1;
	if (rt->rt_nmethods == 0)
		return cf_err(cx, jp, "methods: must not be empty");
	if (rt->rt_nprefixes == 0)
		return cf_err(cx, jp, "path_prefixes: must not be empty");
	for (dup = 0; dup < rt->rt_nhosts; dup++)
		cf_normalize_host(rt->rt_hosts[dup]);
	if (cf_has_dup(rt->rt_hosts, rt->rt_nhosts, &dup))
		return cf_err(cx, jp, "hosts[%zu]: listed twice", dup);
	if (cf_has_dup(rt->rt_methods, rt->rt_nmethods, &dup))
		return cf_err(cx, jp, "methods[%zu]: listed twice", dup);

	if (th != NULL && load_token_header(cx, jp, th, rt) == -1)
		return -1;
	conn = cJSON_GetObjectItemCaseSensitive(it, "connect");
	cf_sub(sub, sizeof(sub), jp, "connect");
	rt->rt_connect = allow; /* an allowlist route's default */
	if (load_connect(cx, sub, conn, rt) == -1 ||
	    cf_load_upstream(cx, jp, it, &rt->rt_up) == -1 ||
	    check_hosts_use(cx, jp, rt) == -1)
		return -1;
	if (!rt->rt_up.uc_as_requested || !rt->rt_intercept)
		return 0;
	/* Given at all, even [443]: its tunnels go to upstream.ports. */
	if (cJSON_GetObjectItemCaseSensitive(conn, "ports") != NULL)
		return cf_err(cx, jp,
		    "connect.ports: an allowlist route intercepts on its "
		    "upstream.ports");
	return cf_allowlist_intercept(cx, jp, rt);
}

static int
in_list(char *const *list, size_t n, const char *s)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (strcmp(list[i], s) == 0)
			return 1;
	return 0;
}

/*
 * A forward request selects its route by host (DESIGN.md "Requests and
 * routing"). Routes may share an upstream (the token's audience picks
 * among them), but an alias in hosts selects exactly one route: it may be
 * neither another route's alias nor another route's upstream host.
 */
static int
route_overlap(struct cfctx *cx, const char *jp, const struct route *rt,
    const struct route *o, size_t oidx)
{
	size_t h;

	for (h = 0; h < rt->rt_nhosts; h++)
		if (in_list(o->rt_hosts, o->rt_nhosts, rt->rt_hosts[h]) ||
		    (o->rt_up.uc_host != NULL &&
			strcmp(rt->rt_hosts[h], o->rt_up.uc_host) == 0))
			return cf_err(cx, jp,
			    "hosts[%zu]: \"%s\" also selects routes[%zu]", h,
			    rt->rt_hosts[h], oidx);
	if (rt->rt_up.uc_host != NULL &&
	    in_list(o->rt_hosts, o->rt_nhosts, rt->rt_up.uc_host))
		return cf_err(cx, jp,
		    "upstream.url: %s is listed in routes[%zu].hosts",
		    rt->rt_up.uc_host, oidx);
	return 0;
}

int
cf_load_routes(struct cfctx *cx, const cJSON *root)
{
	struct config *cf = cx->cf;
	const cJSON *arr, *it;
	char jp[64];
	size_t i = 0, j;
	int n;

	if ((n = cf_array(cx, "", root, "routes", 1, 256, &arr)) == -1 ||
	    (cf->cf_routes = cf_calloc(cx, "routes", (size_t)n,
		 sizeof(*cf->cf_routes))) == NULL)
		return -1;
	cf->cf_nroutes = (size_t)n;
	cJSON_ArrayForEach(it, arr) {
		struct route *rt = &cf->cf_routes[i];

		cf_idx(jp, sizeof(jp), "routes", i);
		if (load_route(cx, jp, it, rt) == -1)
			return -1;
		/* Routes may share an audience (a token lists few). */
		for (j = 0; j < i; j++)
			if (route_overlap(cx, jp, rt, &cf->cf_routes[j], j) ==
			    -1)
				return -1;
		i++;
	}
	return cf_build_hosts(cx);
}

const struct route *
config_route(const struct config *cf, const char *aud)
{
	size_t i;

	for (i = 0; i < cf->cf_nroutes; i++)
		if (strcmp(cf->cf_routes[i].rt_audience, aud) == 0)
			return &cf->cf_routes[i];
	return NULL;
}
