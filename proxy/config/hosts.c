/*
 * cf_hosts: the routes of a policy by host name (util/hostmatch.c), so
 * that a forward request finds its route in one probe per label of its
 * host. Keys are the routes' hosts (exact names, IP literals and
 * "*.suffix" wildcards) and the fixed upstreams' hosts; each holds the
 * indices of its routes in policy order.
 */
#include <sys/socket.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <stdio.h>
#include <string.h>

#include "proxy/config/config.h"
#include "proxy/config/config_int.h"
#include "proxy/util/hostmatch.h"

void
cf_host_key(const char *host, char *out)
{
	struct in6_addr a6;

	if (strchr(host, ':') != NULL && inet_pton(AF_INET6, host, &a6) == 1 &&
	    inet_ntop(AF_INET6, &a6, out, HOSTMATCH_BUF) != NULL)
		return;
	snprintf(out, HOSTMATCH_BUF, "%s", host);
}

/*
 * One key for route idx. Only routes sharing a fixed upstream host may
 * share a key (the token's audience picks among them); any other pair
 * would select the same host at the same precedence.
 */
static int
add_key(struct cfctx *cx, const char *host, size_t idx, int upstream)
{
	struct config *cf = cx->cf;
	char key[HOSTMATCH_BUF], jp[64];
	uint32_t first;

	cf_host_key(host, key);
	if (hostmatch_add(cf->cf_hosts, key, (uint32_t)idx, &first) == -1)
		return cf_err(cx, "routes", "out of memory");
	if (first == HOSTMATCH_NONE || first == idx)
		return 0;
	if (upstream && cf->cf_routes[first].rt_up.uc_host != NULL &&
	    strcmp(cf->cf_routes[first].rt_up.uc_host, host) == 0)
		return 0;
	cf_idx(jp, sizeof(jp), "routes", idx);
	return cf_err(cx, jp, "\"%s\" also selects routes[%u]", host,
	    (unsigned)first);
}

int
cf_load_enforce(struct cfctx *cx, const cJSON *root)
{
	static const char *const names[] = { "deny", "report", NULL };
	struct config *cf = cx->cf;
	const char *e = NULL;
	struct route *rt;

	if (cf_str(cx, "", root, "enforce", 0, &e) == -1)
		return -1;
	if (e != NULL && cf_name_index(names, e) == -1)
		return cf_err(cx, "enforce",
		    "\"%s\": must be \"deny\" or \"report\"", e);
	if (e == NULL || strcmp(e, "report") != 0)
		return 0;
	cf->cf_report = 1;
	/*
	 * What a report lets through is dialled as an allowlist route for
	 * exactly the host asked would be: checked, never private.
	 */
	if ((rt = cf->cf_report_rt =
		    cf_calloc(cx, "enforce", 1, sizeof(*rt))) == NULL ||
	    (rt->rt_audience = cf_strdup(cx, "enforce", "")) == NULL)
		return -1;
	rt->rt_up.uc_as_requested = 1;
	rt->rt_connect = 1;
	return 0;
}

int
cf_build_hosts(struct cfctx *cx)
{
	struct config *cf = cx->cf;
	size_t i, h;

	if ((cf->cf_hosts = hostmatch_new()) == NULL)
		return cf_err(cx, "routes", "out of memory");
	for (i = 0; i < cf->cf_nroutes; i++) {
		const struct route *rt = &cf->cf_routes[i];

		for (h = 0; h < rt->rt_nhosts; h++)
			if (add_key(cx, rt->rt_hosts[h], i, 0) == -1)
				return -1;
		if (rt->rt_up.uc_host != NULL &&
		    add_key(cx, rt->rt_up.uc_host, i, 1) == -1)
			return -1;
	}
	return 0;
}
