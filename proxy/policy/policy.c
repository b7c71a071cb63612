/*
 * The one place where requests are allowed or denied (STYLE.md §6). Pure:
 * no I/O, no clock, no libevent; the caller gathers the facts (token stage
 * 1, revocation, budget, audit state) into a struct req_view. Every path
 * that does not reach the end of policy_decide() denies.
 */
#include <sys/socket.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <string.h>

#include "proxy/config/config.h"
#include "proxy/http/http1.h"
#include "proxy/policy/policy.h"
#include "proxy/util/hostmatch.h"
#include "proxy/util/util.h"

/* Host equality: IPv6 literals by value, everything else case-insensitive. */
static int
host_eq(const char *a, size_t alen, const char *b, size_t blen)
{
	struct in6_addr x, y;
	char sa[INET6_ADDRSTRLEN], sb[INET6_ADDRSTRLEN];

	if (alen < sizeof(sa) && blen < sizeof(sb) && memchr(a, ':', alen) &&
	    memchr(b, ':', blen)) {
		memcpy(sa, a, alen);
		sa[alen] = '\0';
		memcpy(sb, b, blen);
		sb[blen] = '\0';
		if (inet_pton(AF_INET6, sa, &x) == 1 &&
		    inet_pton(AF_INET6, sb, &y) == 1)
			return memcmp(&x, &y, sizeof(x)) == 0;
	}
	return uri_host_eq(a, alen, b, blen);
}

/* An intercepting route takes CONNECTs on its connect.ports. */
static int
intercept_port(const struct route *rt, uint16_t port)
{
	size_t i;

	for (i = 0; i < rt->rt_nports; i++)
		if (rt->rt_ports[i] == port)
			return 1;
	return 0;
}

/*
 * The upstream's own host selects its route: on any port for an
 * absolute-form request (sluice connects to the configured upstream, not
 * to what the client wrote), on the upstream's port for a raw CONNECT,
 * on a connect.ports port for an intercepted one.
 */
static int
upstream_selects(const struct route *rt, const struct uri *u, int connect)
{
	const struct upstream_conf *uc = &rt->rt_up;

	if (uc->uc_host == NULL ||
	    !host_eq(u->host, u->host_len, uc->uc_host, strlen(uc->uc_host)))
		return 0;
	if (!connect)
		return 1;
	return rt->rt_intercept ? intercept_port(rt, u->port) :
				  u->port == uc->uc_port;
}

/*
 * An allowlist route dials the host asked, on one of its ports: plain
 * http:// (sluice does not originate TLS for an absolute-form https://
 * target: a client tunnels with CONNECT), a CONNECT, or a request inside
 * a TLS tunnel the route intercepts (sluice the TLS client of the host).
 */
static int
allowlist_selects(const struct route *rt, const struct uri *u, int connect,
    int inner_tls)
{
	const struct upstream_conf *uc = &rt->rt_up;
	size_t i;

	if (!connect && u->https && !(inner_tls && rt->rt_intercept))
		return 0;
	for (i = 0; i < uc->uc_nports; i++)
		if (uc->uc_ports[i] == u->port)
			return 1;
	return 0;
}

/*
 * Whether rt, whose hosts or upstream host the target's host matched,
 * takes the request. An alias in hosts selects its route on any port,
 * never for a raw CONNECT.
 */
static int
route_selects(const struct route *rt, const struct uri *u, int connect,
    int inner_tls)
{
	const struct upstream_conf *uc = &rt->rt_up;

	if (uc->uc_as_requested)
		return allowlist_selects(rt, u, connect, inner_tls);
	if (upstream_selects(rt, u, connect))
		return 1;
	if (host_eq(u->host, u->host_len, uc->uc_host, strlen(uc->uc_host)))
		return 0; /* the upstream's host, on another port */
	/*
	 * Aliases name the route, not a destination: sluice always connects
	 * to the upstream, so the port the client wrote does not matter. A
	 * raw tunnel would reach the upstream under a name its certificate
	 * does not carry, so a raw CONNECT takes none; an intercepted one
	 * does (sluice is the TLS server there, with a leaf for the alias).
	 */
	return !connect || (rt->rt_intercept && intercept_port(rt, u->port));
}

/*
 * u with its host as routes are keyed (hostmatch_normalize(): lower case,
 * no final dot; an IPv6 literal canonical) in buf, into *out. -1: a host
 * no route can name.
 */
static int
norm_uri(const struct uri *u, struct uri *out, char *buf)
{
	char lit[INET6_ADDRSTRLEN];
	struct in6_addr a6;
	int n;

	*out = *u;
	if (u->host == NULL || u->host_len == 0)
		return -1;
	if (u->host_type == URI_HOST_V6) {
		if (u->host_len >= sizeof(lit))
			return -1;
		memcpy(lit, u->host, u->host_len);
		lit[u->host_len] = '\0';
		if (inet_pton(AF_INET6, lit, &a6) != 1 ||
		    inet_ntop(AF_INET6, &a6, buf, HOSTMATCH_BUF) == NULL)
			return -1;
		n = (int)strlen(buf);
	} else if (u->host_type == URI_HOST_V4) {
		if (u->host_len > HOSTMATCH_NAME_MAX)
			return -1;
		memcpy(buf, u->host, u->host_len);
		buf[u->host_len] = '\0';
		n = (int)u->host_len;
	} else if ((n = hostmatch_normalize(u->host, u->host_len, 0, buf,
			NULL)) == -1)
		return -1;
	out->host = buf;
	out->host_len = (size_t)n;
	return 0;
}

/*
 * The route a normalized target selects: the most specific key its host
 * matches (the exact name, else the longest wildcard suffix) decides,
 * and among that key's routes the first (in policy order) that takes the
 * request. A less specific key is never tried: exact beats wildcard.
 */
static const struct route *
route_for_norm(const struct config *cf, const struct uri *u, int connect,
    int inner_tls)
{
	struct hostmatch_hit hit;
	size_t i;

	if (!hostmatch_lookup(cf->cf_hosts, u->host, u->host_len,
		u->host_type != URI_HOST_NAME, &hit))
		return NULL;
	for (i = 0; i < hit.hh_nvals; i++)
		if (hit.hh_vals[i] < cf->cf_nroutes &&
		    route_selects(&cf->cf_routes[hit.hh_vals[i]], u, connect,
			inner_tls))
			return &cf->cf_routes[hit.hh_vals[i]];
	return NULL;
}

const struct route *
policy_route_for(const struct config *cf, const struct uri *u, int connect)
{
	char buf[HOSTMATCH_BUF];
	struct uri nu;

	if (u == NULL || norm_uri(u, &nu, buf) == -1)
		return NULL;
	return route_for_norm(cf, &nu, connect, 0);
}

/*
 * Routes may share an upstream (the loader keeps hosts unique, so an alias
 * selects one route). Among the routes the target's upstream host
 * selects, starting at first, the first (in policy order) whose audience
 * the token carries. Claims that fail for another reason than the
 * audience fail the same way on every route: that reason comes first.
 * *rtp is NULL when no route of the group takes the token.
 */
static enum reason
pick_shared(const struct config *cf, const struct req_view *v,
    const struct route *first, int64_t now, const struct route **rtp)
{
	const struct uri *u = v->rv_uri;
	size_t i = (size_t)(first - cf->cf_routes);
	enum reason r, wrong = REASON_TOKEN_WRONG_AUDIENCE;
	size_t n = 0;

	*rtp = first;
	if (!upstream_selects(first, u, v->rv_connect))
		return token_check_claims(v->rv_claims, &cf->cf_tokens.tc_rules,
		    first->rt_audience, now);
	for (; i < cf->cf_nroutes; i++) {
		const struct route *rt = &cf->cf_routes[i];

		if (!upstream_selects(rt, u, v->rv_connect))
			continue;
		n++;
		r = token_check_claims(v->rv_claims, &cf->cf_tokens.tc_rules,
		    rt->rt_audience, now);
		if (r != wrong) {
			*rtp = rt;
			return r;
		}
	}
	/* One route: it is the one refused; several: none of them is. */
	if (n > 1)
		*rtp = NULL;
	return wrong;
}

uint64_t
policy_budget_limit(const struct route *rt, const struct token_claims *c)
{
	uint64_t a = rt->rt_max_requests, b = c->max_requests;

	if (a == 0)
		return b;
	if (b == 0)
		return a;
	return a < b ? a : b;
}

static int
method_allowed(const struct route *rt, const char *m, size_t len)
{
	size_t i;

	for (i = 0; i < rt->rt_nmethods; i++)
		if (strlen(rt->rt_methods[i]) == len &&
		    memcmp(rt->rt_methods[i], m, len) == 0)
			return 1;
	return 0;
}

static int
path_allowed(const struct route *rt, const char *p, size_t len)
{
	size_t i, bad;

	/* Refuse rather than normalize: a normalizer that disagrees with
	 * the upstream's is a way around the prefixes (DESIGN.md "Paths"). */
	if (path_check(p, len, &bad) == -1)
		return 0;
	for (i = 0; i < rt->rt_nprefixes; i++)
		if (path_has_prefix(p, len, rt->rt_prefixes[i],
			strlen(rt->rt_prefixes[i])))
			return 1;
	return 0;
}

/*
 * enforce "report" (docs/config.md): a request refused for would (its
 * route, method or path) goes through all the same, as an allowlist
 * route for exactly the host asked would take it when no route was
 * found, else on the route found. Token failures, a revoked token, a
 * path that must be refused rather than normalized, a host no route can
 * name and an https:// target sluice cannot dial stay refused; private
 * destinations are refused when dialled.
 */
static enum reason
report(const struct config *cf, const struct req_view *v, const struct uri *u,
    int64_t now, enum reason would, struct decision *out)
{
	size_t bad;
	enum reason r;

	out->de_reason = would;
	if (!cf->cf_report || v->rv_claims == NULL || v->rv_revoked)
		return would;
	if (!v->rv_connect && u->path != NULL &&
	    path_check(u->path, u->path_len, &bad) == -1)
		return would;
	if (would == REASON_ROUTE_NOT_FOUND) {
		if (v->rv_listener->lc_type != LISTENER_FORWARD ||
		    cf->cf_report_rt == NULL || u->host_len == 0 ||
		    u->host_len >= sizeof(out->de_dest) ||
		    (!v->rv_connect && u->https))
			return would;
		/* Every claim but the audience, which names no route here. */
		r = token_check_claims(v->rv_claims, &cf->cf_tokens.tc_rules,
		    NULL, now);
		if (r != REASON_TOKEN_WRONG_AUDIENCE)
			return out->de_reason = r;
		out->de_route = cf->cf_report_rt;
		memcpy(out->de_dest, u->host, u->host_len);
		out->de_dest[u->host_len] = '\0';
		out->de_dest_port = u->port;
	}
	out->de_report = 1;
	out->de_would = would;
	out->de_budget_limit = 0;
	return out->de_reason = REASON_OK;
}

/*
 * A CONNECT to an intercepting route needs no token: sluice reads
 * every request inside it, and each must carry one (or the
 * CONNECT's), so it is not charged to a budget either. That route, or
 * NULL.
 */
static const struct route *
tokenless_intercept(const struct config *cf, const struct req_view *v,
    const struct uri *u)
{
	const struct route *rt;

	if (v->rv_connect && v->rv_token == REASON_TOKEN_MISSING &&
	    v->rv_listener->lc_type == LISTENER_FORWARD &&
	    u->form == URI_AUTHORITY &&
	    (rt = route_for_norm(cf, u, 1, 0)) != NULL && rt->rt_intercept)
		return rt;
	return NULL;
}

/* The route the request names into *rtp (maybe NULL), or a bad request. */
static enum reason
select_route(const struct config *cf, const struct req_view *v,
    const struct uri *u, const struct route **rtp)
{
	if (v->rv_listener->lc_type == LISTENER_REVERSE) {
		if (v->rv_connect || u->form != URI_ORIGIN ||
		    v->rv_listener->lc_route_idx >= cf->cf_nroutes)
			return REASON_BAD_REQUEST;
		*rtp = &cf->cf_routes[v->rv_listener->lc_route_idx];
	} else {
		if (u->form != (v->rv_connect ? URI_AUTHORITY : URI_ABSOLUTE))
			return REASON_BAD_REQUEST;
		*rtp = route_for_norm(cf, u, v->rv_connect, v->rv_inner_tls);
	}
	return REASON_OK;
}

/* Whether rt allows the method and path: REASON_OK, or what it lacks. */
static enum reason
request_allowed(const struct route *rt, const struct req_view *v,
    const struct uri *u)
{
	if (v->rv_connect)
		return rt->rt_connect || rt->rt_intercept ?
		    REASON_OK :
		    REASON_METHOD_NOT_ALLOWED;
	if (!method_allowed(rt, v->rv_method, v->rv_method_len))
		return REASON_METHOD_NOT_ALLOWED;
	if (!path_allowed(rt, u->path, u->path_len))
		return REASON_PATH_NOT_ALLOWED;
	return REASON_OK;
}

enum reason
policy_decide(const struct config *cf, const struct req_view *v0, int64_t now,
    struct decision *out)
{
	char hbuf[HOSTMATCH_BUF];
	const struct route *rt;
	struct req_view vn, *v = &vn;
	struct uri nu;
	const struct uri *u = v0->rv_uri;
	enum reason r;

	memset(out, 0, sizeof(*out));
	out->de_reason = REASON_BAD_REQUEST;
	if (v0->rv_listener == NULL || u == NULL)
		return out->de_reason;
	/* A forward target's host as routes are keyed (trailing dot, case). */
	vn = *v0;
	if (u->form != URI_ORIGIN && u->host != NULL) {
		if (norm_uri(u, &nu, hbuf) == -1)
			nu.host_len = 0; /* selects nothing */
		vn.rv_uri = u = &nu;
	}

	/* Nothing goes upstream while the record of it cannot be written. */
	if (v->rv_audit_failed)
		return out->de_reason = REASON_AUDIT_UNAVAILABLE;
	/* Gateway identity: only a registered sandbox is served at all. */
	if (v->rv_gateway && v->rv_sandbox == NULL)
		return out->de_reason = REASON_SANDBOX_UNKNOWN;

	/* A CONNECT to an intercepting route needs no token. */
	if ((rt = tokenless_intercept(cf, v, u)) != NULL) {
		out->de_route = rt;
		return out->de_reason = REASON_OK;
	}
	/* An unauthenticated client learns nothing about the routes. */
	if (v->rv_token != REASON_OK)
		return out->de_reason = v->rv_token;
	if (v->rv_claims == NULL)
		return out->de_reason = REASON_TOKEN_MALFORMED;

	if (select_route(cf, v, u, &rt) != REASON_OK)
		return out->de_reason = REASON_BAD_REQUEST;
	if (rt == NULL)
		return report(cf, v, u, now, REASON_ROUTE_NOT_FOUND, out);
	/* An allowlist route dials the host asked, as the routes saw it. */
	if (rt->rt_up.uc_as_requested && u->host_len < sizeof(out->de_dest)) {
		memcpy(out->de_dest, u->host, u->host_len);
		out->de_dest[u->host_len] = '\0';
		out->de_dest_port = u->port;
	}

	if (v->rv_listener->lc_type == LISTENER_REVERSE)
		r = token_check_claims(v->rv_claims, &cf->cf_tokens.tc_rules,
		    rt->rt_audience, now);
	else
		r = pick_shared(cf, v, rt, now, &rt);
	out->de_route = rt;
	if (r != REASON_OK)
		return out->de_reason = r;
	/* A token is good only from the sandbox it was minted for. */
	if (v->rv_gateway &&
	    strcmp(v->rv_claims->has_sbx ? v->rv_claims->sbx :
					   v->rv_claims->sub,
		v->rv_sandbox) != 0)
		return out->de_reason = REASON_TOKEN_WRONG_SANDBOX;
	if (v->rv_revoked)
		return out->de_reason = REASON_TOKEN_REVOKED;

	if ((r = request_allowed(rt, v, u)) != REASON_OK)
		return report(cf, v, u, now, r, out);
	if (v->rv_connect && rt->rt_intercept)
		return out->de_reason = REASON_OK; /* no charge */

	out->de_budget_limit = policy_budget_limit(rt, v->rv_claims);
	if (out->de_budget_limit != 0 &&
	    v->rv_budget_used >= out->de_budget_limit)
		return out->de_reason = REASON_BUDGET_EXHAUSTED;

	return out->de_reason = REASON_OK;
}

/* An IPv4-mapped IPv6 destination is the IPv4 address it carries. */
static const struct sockaddr *
unmap(const struct sockaddr *sa, struct sockaddr_in *tmp)
{
	const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;

	if (sa->sa_family != AF_INET6 || !IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr))
		return sa;
	memset(tmp, 0, sizeof(*tmp));
	tmp->sin_family = AF_INET;
	tmp->sin_port = s6->sin6_port;
	memcpy(&tmp->sin_addr, &s6->sin6_addr.s6_addr[12], 4);
	return (const struct sockaddr *)tmp;
}

static int
same_endpoint(const struct sockaddr *a, const struct sockaddr_storage *l)
{
	if (a->sa_family != l->ss_family)
		return 0;
	if (a->sa_family == AF_INET) {
		const struct sockaddr_in *x = (const struct sockaddr_in *)a;
		const struct sockaddr_in *y = (const struct sockaddr_in *)l;

		return x->sin_port == y->sin_port &&
		    (y->sin_addr.s_addr == htonl(INADDR_ANY) ||
			x->sin_addr.s_addr == y->sin_addr.s_addr);
	}
	if (a->sa_family == AF_INET6) {
		const struct sockaddr_in6 *x = (const struct sockaddr_in6 *)a;
		const struct sockaddr_in6 *y = (const struct sockaddr_in6 *)l;

		return x->sin6_port == y->sin6_port &&
		    (IN6_IS_ADDR_UNSPECIFIED(&y->sin6_addr) ||
			memcmp(&x->sin6_addr, &y->sin6_addr, 16) == 0);
	}
	return 0;
}

enum reason
policy_check_addr(const struct config *cf, const struct route *rt,
    const struct sockaddr *sa)
{
	size_t i;
	struct sockaddr_in tmp;

	if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)
		return REASON_DESTINATION_DENIED;
	if (!rt->rt_up.uc_allow_private && addr_private(sa))
		return REASON_DESTINATION_DENIED;
	sa = unmap(sa, &tmp);
	/* Connecting to an unspecified address reaches this host: a loop. */
	if ((sa->sa_family == AF_INET &&
		((const struct sockaddr_in *)sa)->sin_addr.s_addr ==
		    htonl(INADDR_ANY)) ||
	    (sa->sa_family == AF_INET6 &&
		IN6_IS_ADDR_UNSPECIFIED(
		    &((const struct sockaddr_in6 *)sa)->sin6_addr)))
		return REASON_DESTINATION_DENIED;
	/* The loop guard: never connect to one of our own listeners. */
	for (i = 0; i < cf->cf_nlisteners; i++)
		if (same_endpoint(sa, &cf->cf_listeners[i].lc_addr))
			return REASON_DESTINATION_DENIED;
	return REASON_OK;
}
