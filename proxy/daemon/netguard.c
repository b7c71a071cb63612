/*
 * The daemon's side of the kernel rules: builds the netpolicy model from
 * the loaded policy, applies it before any listener exists, re-verifies it
 * every 30 seconds and at reload (re-applying, with an audit event, when
 * the kernel's table drifted), keeps the dynamic upstream sets filled from
 * sluice's own DNS answers, and turns NFLOG drops into aggregated,
 * rate-limited net.drop audit events. The netlink work itself is
 * netpolicy/'s; the audit writer is audit.c's.
 *
 * Fail-closed: nothing here ever removes the table except netguard_stop()
 * with flush_on_exit, and a failed re-apply leaves the old table in place.
 */
#include <sys/types.h>
#include <sys/socket.h>

#include <netinet/in.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "netpolicy/netpolicy.h"
#include "proxy/config/config.h"
#include "proxy/daemon/daemon.h"
#include "proxy/dns/resolve.h"
#include "proxy/ops/ops.h"
#include "proxy/relay/relay.h"
#include "proxy/token/store.h"
#include "proxy/util/util.h"

#define NG_VERIFY_SECS    30
#define NG_COUNTER_SECS   5    /* drop-rule counters for the metrics */
#define NG_DYN_MAX        1024 /* remembered dynamic elements */
#define NG_AGG_MAX        64   /* distinct drop tuples per window */
#define NG_EVENTS_PER_SEC 16   /* net.drop lines per window, at most */
#define NG_HOST_MAX       256

/* A dynamic set element sluice added, kept to survive a re-apply. */
struct ng_dyn {
	struct np_elem dy_elem;
	int dy_v6;
	char dy_host[NG_HOST_MAX]; /* the route's upstream host */
	uint16_t dy_port;
	int dy_allowlist;  /* a host an allowlist route was asked for */
	time_t dy_expires; /* CLOCK_MONOTONIC seconds */
};

/* One aggregated drop tuple of the current window. */
struct ng_agg {
	uint8_t ag_proto;
	char ag_src[46];
	char ag_dst[46];
	int ag_has_port;
	uint16_t ag_dport;
	int ag_has_uid;
	uint32_t ag_uid;
	uint64_t ag_count;
};

/* Owned by this file; one daemon, one event loop. */
static struct {
	int enabled;
	const struct proxy_env *env; /* base, and the audit writer */
	struct event_base *base;
	struct np_ruleset *want; /* the desired ruleset (static part) */
	char table[NP_NAME_MAX];
	enum netpolicy_mode mode;
	int flush_on_exit;
	struct event *verify_ev;
	struct event *counter_ev; /* only with a metrics listener */
	struct event *apply_ev;   /* writes netpolicy.apply once audit is up */
	struct np_nflog *nflog;
	struct event *nflog_ev;
	struct event *agg_ev;
	struct ng_dyn dyn[NG_DYN_MAX];
	size_t ndyn;
	struct ng_agg agg[NG_AGG_MAX];
	size_t nagg;
	uint64_t agg_suppressed; /* packets of tuples over the caps */
	uint64_t nflog_lost;
} ng;

static time_t
mono_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec;
}

static const char *
mode_name(enum netpolicy_mode m)
{
	switch (m) {
	case NETPOLICY_SIDECAR:
		return "sidecar";
	case NETPOLICY_GATEWAY:
		return "gateway";
	default:
		return "off";
	}
}

/*
 * The (interface, address) pairs of the sandboxes cf would put in force:
 * its own, and the admin ones of live (NULL: those persisted in cf's
 * state_dir, as far as they can be read) that do not clash with them.
 * *out is malloc'd (may be NULL when there are none). 0, or -1 with why.
 */
static int
ng_sandboxes(const struct config *cf, const struct sbx_registry *live,
    struct np_sandbox **out, size_t *n, char *why, size_t whylen)
{
	struct sbx_registry *r;
	const struct sandbox *sb;
	char w2[256];
	size_t i, j, total = 0;

	*out = NULL;
	*n = 0;
	if (cf->cf_np.np_mode != NETPOLICY_GATEWAY)
		return 0;
	if ((r = sbx_registry_new()) == NULL ||
	    sbx_registry_sync(r, cf, why, whylen) == -1)
		goto nomem;
	if (live == NULL)
		(void)sbx_registry_load(r, cf, cf->cf_state_dir, w2,
		    sizeof(w2));
	for (i = 0; i < sbx_registry_count(live); i++)
		if ((sb = sbx_registry_at(live, i))->sb_admin)
			(void)sbx_registry_add(r, &sb->sb_conf, 1, w2,
			    sizeof(w2));
	for (i = 0; i < sbx_registry_count(r); i++)
		total += sbx_registry_at(r, i)->sb_conf.sc_naddrs;
	if (total > 0 && (*out = calloc(total, sizeof(**out))) == NULL)
		goto nomem;
	for (i = 0; i < sbx_registry_count(r); i++) {
		const struct sandbox_conf *sc = &sbx_registry_at(r, i)->sb_conf;

		for (j = 0; j < sc->sc_naddrs; j++) {
			struct np_sandbox *ns = &(*out)[(*n)++];

			/* The registry outlives the build: names are copied. */
			ns->ns_iface = strdup(sc->sc_iface);
			ns->ns_family =
			    sc->sc_addrs[j].sa_fam == 4 ? AF_INET : AF_INET6;
			memcpy(ns->ns_addr, sc->sc_addrs[j].sa_b, 16);
			if (ns->ns_iface == NULL)
				goto nomem;
		}
	}
	sbx_registry_free(r);
	return 0;
nomem:
	sbx_registry_free(r);
	snprintf(why, whylen, "netpolicy: sandboxes: out of memory");
	return -1;
}

static void
ng_sandboxes_free(struct np_sandbox *s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		free((char *)(uintptr_t)s[i].ns_iface);
	free(s);
}

static struct np_ruleset *ng_ruleset(const struct config *cf,
    const struct sbx_registry *live, char *why, size_t whylen);

struct np_ruleset *
netguard_ruleset(const struct config *cf, char *why, size_t whylen)
{
	return ng_ruleset(cf, NULL, why, whylen);
}

/* The builder's mode of netpolicy.mode; -1 when it is off. */
static int
ng_ruleset_mode(const struct netpolicy_conf *np, struct np_input *in, char *why,
    size_t whylen)
{
	switch (np->np_mode) {
	case NETPOLICY_SIDECAR:
		in->ni_mode = NP_MODE_SIDECAR;
		return 0;
	case NETPOLICY_GATEWAY:
		in->ni_mode = NP_MODE_GATEWAY;
		return 0;
	default:
		snprintf(why, whylen, "netpolicy.mode: off");
		return -1;
	}
}

/*
 * The routes' upstreams and the IP listeners, in *upsp and *lsp (which
 * the caller frees, on failure too).
 */
static int
ng_ruleset_routes(const struct config *cf, struct np_input *in,
    struct np_upstream **upsp, struct sockaddr_storage **lsp, char *why,
    size_t whylen)
{
	struct sockaddr_storage *ls = NULL;
	struct np_upstream *ups = NULL;
	size_t i, nls = 0;

	if ((cf->cf_nroutes > 0 &&
		(ups = calloc(cf->cf_nroutes, sizeof(*ups))) == NULL) ||
	    (cf->cf_nlisteners > 0 &&
		(ls = calloc(cf->cf_nlisteners, sizeof(*ls))) == NULL)) {
		*upsp = ups;
		*lsp = ls;
		snprintf(why, whylen, "netpolicy: out of memory");
		return -1;
	}
	*upsp = ups;
	*lsp = ls;
	for (i = 0; i < cf->cf_nroutes; i++) {
		ups[i].nu_host = cf->cf_routes[i].rt_up.uc_host;
		ups[i].nu_port = cf->cf_routes[i].rt_up.uc_port;
		ups[i].nu_host_is_ip = cf->cf_routes[i].rt_up.uc_host_is_ip;
	}
	/* Only IP listeners can be reached from a sandbox interface. */
	for (i = 0; i < cf->cf_nlisteners; i++) {
		sa_family_t af = cf->cf_listeners[i].lc_addr.ss_family;

		if (af == AF_INET || af == AF_INET6)
			ls[nls++] = cf->cf_listeners[i].lc_addr;
	}
	in->ni_upstreams = ups;
	in->ni_nupstreams = cf->cf_nroutes;
	in->ni_listeners = ls;
	in->ni_nlisteners = nls;
	return 0;
}

/*
 * netpolicy.inbound, one rule per port and source prefix, in *inbp (which
 * the caller frees).
 */
static int
ng_ruleset_inbound(const struct netpolicy_conf *np, struct np_input *in,
    struct np_inbound **inbp, char *why, size_t whylen)
{
	struct np_inbound *inb = NULL;
	size_t i, j, k, ninb = 0;

	if (np->np_ninbound > 0 &&
	    (inb = calloc(np->np_ninbound * 16 * 16, sizeof(*inb))) == NULL) {
		snprintf(why, whylen, "netpolicy: out of memory");
		return -1;
	}
	*inbp = inb;
	for (i = 0; i < np->np_ninbound; i++)
		for (j = 0; j < np->np_inbound[i].ib_nports; j++)
			for (k = 0; k < np->np_inbound[i].ib_nfrom; k++) {
				const struct inbound_net *n =
				    &np->np_inbound[i].ib_net[k];

				inb[ninb].nb_family = n->in_family;
				memcpy(inb[ninb].nb_addr, n->in_addr, 16);
				inb[ninb].nb_prefix = n->in_prefix;
				inb[ninb].nb_port =
				    np->np_inbound[i].ib_ports[j];
				ninb++;
			}
	in->ni_inbound = inb;
	in->ni_ninbound = ninb;
	return 0;
}

/* A transparent listener: the intercepted ports go to it. */
static void
ng_ruleset_redirect(const struct config *cf, struct np_input *in)
{
	size_t i;

	for (i = 0; i < cf->cf_nlisteners; i++) {
		const struct listener_conf *lc = &cf->cf_listeners[i];

		if (lc->lc_type != LISTENER_TRANSPARENT)
			continue;
		if (lc->lc_addr.ss_family == AF_INET) {
			in->ni_redirect_v4 = 1;
			in->ni_redirect_to =
			    ntohs(((const struct sockaddr_in *)&lc->lc_addr)
				      ->sin_port);
		} else {
			in->ni_redirect_v6 = 1;
			in->ni_redirect_to =
			    ntohs(((const struct sockaddr_in6 *)&lc->lc_addr)
				      ->sin6_port);
		}
	}
}

/* Add port to the n ports of rports, unless it is there already. */
static void
ng_rports_add(uint16_t *rports, size_t *n, uint16_t port)
{
	size_t k;

	for (k = 0; k < *n; k++)
		if (rports[k] == port)
			return;
	rports[(*n)++] = port;
}

/*
 * The intercepted routes' ports, each once, in *rportsp (which the caller
 * frees).
 */
static int
ng_ruleset_rports(const struct config *cf, struct np_input *in,
    uint16_t **rportsp, char *why, size_t whylen)
{
	uint16_t *rports;
	size_t i, j, nrports = 0;

	if ((rports = calloc(cf->cf_nroutes * 16 + 1, sizeof(*rports))) ==
	    NULL) {
		snprintf(why, whylen, "netpolicy: out of memory");
		return -1;
	}
	*rportsp = rports;
	for (i = 0; i < cf->cf_nroutes; i++) {
		const struct route *rt = &cf->cf_routes[i];

		for (j = 0; rt->rt_intercept && j < rt->rt_nports; j++)
			ng_rports_add(rports, &nrports, rt->rt_ports[j]);
	}
	in->ni_redirect_ports = rports;
	in->ni_nredirect_ports = nrports;
	return 0;
}

static struct np_ruleset *
ng_ruleset(const struct config *cf, const struct sbx_registry *live, char *why,
    size_t whylen)
{
	struct np_sandbox *sbx = NULL;
	size_t nsbx = 0;
	const struct netpolicy_conf *np = &cf->cf_np;
	struct sockaddr_storage *ls = NULL;
	struct np_upstream *ups = NULL;
	struct np_inbound *inb = NULL;
	struct np_ruleset *rs = NULL;
	uint16_t *rports = NULL;
	struct np_input in;

	memset(&in, 0, sizeof(in));
	if (ng_ruleset_mode(np, &in, why, whylen) == -1)
		return NULL;
	if (ng_ruleset_routes(cf, &in, &ups, &ls, why, whylen) == -1)
		goto out;
	in.ni_table = np->np_table;
	in.ni_allow_loopback = np->np_allow_loopback;
	/* cf_user NULL: no user to let out; the builder refuses sidecar. */
	in.ni_uid = cf->cf_user != NULL ? cf->cf_uid : 0;
	in.ni_resolvers = (const char *const *)np->np_resolvers;
	in.ni_nresolvers = np->np_nresolvers;
	in.ni_log_group = np->np_log_group;
	in.ni_ifaces = (const char *const *)np->np_ifaces;
	in.ni_nifaces = np->np_nifaces;
	if (ng_ruleset_inbound(np, &in, &inb, why, whylen) == -1)
		goto out;
	ng_ruleset_redirect(cf, &in);
	if (in.ni_redirect_to != 0 &&
	    ng_ruleset_rports(cf, &in, &rports, why, whylen) == -1)
		goto out;
	if (ng_sandboxes(cf, live, &sbx, &nsbx, why, whylen) == -1)
		goto out;
	in.ni_sandboxes = sbx;
	in.ni_nsandboxes = nsbx;
	rs = np_ruleset_build(&in, why, whylen);
out:
	free(rports);
	ng_sandboxes_free(sbx, nsbx);
	free(inb);
	free(ups);
	free(ls);
	return rs;
}

static void
ng_dyn_prune(void)
{
	time_t now = mono_now();
	size_t i = 0;

	while (i < ng.ndyn) {
		if (ng.dyn[i].dy_expires <= now)
			ng.dyn[i] = ng.dyn[--ng.ndyn];
		else
			i++;
	}
	metrics_kernel_dynamic(ng.ndyn);
}

/*
 * Apply want with the still-valid dynamic elements in the same batch, so
 * that a re-apply never has an instant where sluice's own upstreams are
 * blocked. The elements are appended to want's sets for the call only:
 * want keeps describing the static ruleset that verify compares.
 */
static int
ng_apply(struct np_ruleset *want, char *why, size_t whylen)
{
	struct np_set *s4, *s6, *set;
	size_t n4 = 0, n6 = 0, i;
	time_t now = mono_now();
	struct np_elem el;
	int rc;

	s4 = np_ruleset_set(want, NP_SET_UPSTREAM4);
	s6 = np_ruleset_set(want, NP_SET_UPSTREAM6);
	if (s4 != NULL)
		n4 = s4->se_nelems;
	if (s6 != NULL)
		n6 = s6->se_nelems;
	ng_dyn_prune();
	for (i = 0; i < ng.ndyn; i++) {
		set = ng.dyn[i].dy_v6 ? s6 : s4;
		if (set == NULL)
			continue;
		el = ng.dyn[i].dy_elem;
		el.el_timeout_ms =
		    (uint64_t)(ng.dyn[i].dy_expires - now) * 1000;
		if (el.el_timeout_ms == 0 || np_set_add_elem(set, &el) == -1)
			continue;
	}
	rc = np_apply(want, why, whylen);
	if (s4 != NULL)
		s4->se_nelems = n4;
	if (s6 != NULL)
		s6->se_nelems = n6;
	return rc;
}

static void
ng_audit_np(const char *event, const char *error, size_t ndiff)
{
	struct audit *a = ng.env != NULL ? ng.env->pe_audit : NULL;

	if (a == NULL)
		return;
	audit_begin(a, event);
	audit_add_cstr(a, "table", ng.table);
	audit_add_cstr(a, "mode", mode_name(ng.mode));
	audit_add_uint(a, "rules", np_ruleset_nrules(ng.want));
	if (ndiff > 0)
		audit_add_uint(a, "differences", ndiff);
	if (error != NULL)
		audit_add_cstr(a, "error", error);
	if (audit_commit(a) == -1)
		log_warnx("audit: cannot write %s", event);
}

static void
ng_apply_event_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	ng_audit_np("netpolicy.apply", NULL, 0);
}

struct ng_diff_ctx {
	char first[256];
	size_t n;
};

static void
ng_diff_line(void *arg, const char *line)
{
	struct ng_diff_ctx *dc = arg;

	if (dc->n++ == 0)
		snprintf(dc->first, sizeof(dc->first), "%s", line);
	log_warnx("netpolicy: table inet %s drifted: %s", ng.table, line);
}

/*
 * The counters of the drop rules, for sluice_kernel_drop_rule_*: from a
 * table just read (have), or read for the purpose (have NULL; rules only).
 */
static void
ng_drop_counters(const struct np_ruleset *have)
{
	uint64_t packets, bytes;
	char why[256];

	if (have != NULL)
		np_ruleset_drop_counters(have, &packets, &bytes);
	else if (np_drop_counters(ng.table, &packets, &bytes, why,
		     sizeof(why)) == -1) {
		log_warnx("netpolicy: drop counters: %s", why);
		return;
	}
	metrics_kernel_rule_drops(packets, bytes);
}

static void
ng_counter_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	ng_drop_counters(NULL);
}

/*
 * Compare the kernel's table with want. Returns the number of differences
 * (a failed read counts as one, with dc->first saying why).
 */
static size_t
ng_verify(struct ng_diff_ctx *dc)
{
	struct np_ruleset *have;
	char why[256];

	memset(dc, 0, sizeof(*dc));
	if ((have = np_dump(ng.table, why, sizeof(why))) == NULL) {
		snprintf(dc->first, sizeof(dc->first), "%s", why);
		log_warnx("netpolicy: %s", why);
		return 1;
	}
	np_ruleset_diff(ng.want, have, ng_diff_line, dc);
	ng_drop_counters(have);
	np_ruleset_free(have);
	return dc->n;
}

/* Verify and, on drift, audit and re-apply. */
static void
ng_verify_and_repair(void)
{
	struct ng_diff_ctx dc;
	char why[256];
	size_t n;

	if ((n = ng_verify(&dc)) == 0)
		return;
	ng_audit_np("netpolicy.verify_failed", dc.first, n);
	if (ng_apply(ng.want, why, sizeof(why)) == -1) {
		/* The old table (whatever is left of it) stays. */
		log_warnx("netpolicy: re-apply failed: %s", why);
		return;
	}
	log_info("netpolicy: table inet %s re-applied", ng.table);
	ng_audit_np("netpolicy.apply", NULL, 0);
}

static void
ng_verify_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	ng_verify_and_repair();
}

static void
ng_agg_flush(void)
{
	struct audit *a = ng.env != NULL ? ng.env->pe_audit : NULL;
	uint64_t total = ng.agg_suppressed;
	char pbuf[8];
	size_t i;

	for (i = 0; i < ng.nagg; i++) {
		struct ng_agg *ag = &ng.agg[i];
		const char *proto =
		    np_proto_name(ag->ag_proto, pbuf, sizeof(pbuf));

		total += ag->ag_count;
		/* The cap on lines per second: the rest is only counted. */
		if (i >= NG_EVENTS_PER_SEC) {
			ng.agg_suppressed += ag->ag_count;
			continue;
		}
		if (a == NULL) {
			log_info("net.drop proto %s src %s dst %s dport %u "
				 "count %llu",
			    proto, ag->ag_src, ag->ag_dst, ag->ag_dport,
			    (unsigned long long)ag->ag_count);
			continue;
		}
		audit_begin(a, "net.drop");
		audit_add_cstr(a, "proto", proto);
		audit_add_cstr(a, "src", ag->ag_src);
		audit_add_cstr(a, "dst", ag->ag_dst);
		if (ag->ag_has_port)
			audit_add_uint(a, "dport", ag->ag_dport);
		if (ag->ag_has_uid)
			audit_add_uint(a, "uid", ag->ag_uid);
		audit_add_uint(a, "count", ag->ag_count);
		if (audit_commit(a) == -1)
			log_warnx("audit: cannot write net.drop");
	}
	if (total > 0)
		metrics_net_drop(total);
	if (ng.agg_suppressed > 0)
		log_warnx("net.drop: %llu dropped packets over the event cap "
			  "were counted, not audited",
		    (unsigned long long)ng.agg_suppressed);
	if (ng.nflog_lost > 0)
		log_warnx("net.drop: the NFLOG socket overflowed %llu times",
		    (unsigned long long)ng.nflog_lost);
	ng.nagg = 0;
	ng.agg_suppressed = 0;
	ng.nflog_lost = 0;
}

static void
ng_agg_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	ng_agg_flush();
}

static void
ng_drop(void *arg, const struct np_drop *d)
{
	struct timeval one = { 1, 0 };
	struct ng_agg *ag;
	size_t i;

	(void)arg;
	for (i = 0; i < ng.nagg; i++) {
		ag = &ng.agg[i];
		if (ag->ag_proto == d->nd_proto &&
		    ag->ag_has_port == d->nd_has_ports &&
		    ag->ag_dport == d->nd_dport &&
		    ag->ag_has_uid == d->nd_has_uid &&
		    ag->ag_uid == d->nd_uid &&
		    strcmp(ag->ag_src, d->nd_src) == 0 &&
		    strcmp(ag->ag_dst, d->nd_dst) == 0) {
			ag->ag_count++;
			return;
		}
	}
	/* Bounded memory whatever the sandbox sprays: count the excess. */
	if (ng.nagg == NG_AGG_MAX) {
		ng.agg_suppressed++;
		return;
	}
	ag = &ng.agg[ng.nagg++];
	memset(ag, 0, sizeof(*ag));
	ag->ag_proto = d->nd_proto;
	memcpy(ag->ag_src, d->nd_src, sizeof(ag->ag_src));
	memcpy(ag->ag_dst, d->nd_dst, sizeof(ag->ag_dst));
	ag->ag_has_port = d->nd_has_ports;
	ag->ag_dport = d->nd_dport;
	ag->ag_has_uid = d->nd_has_uid;
	ag->ag_uid = d->nd_uid;
	ag->ag_count = 1;
	/* The first tuple of a window starts the one-second window. */
	if (ng.agg_ev != NULL && !evtimer_pending(ng.agg_ev, NULL))
		evtimer_add(ng.agg_ev, &one);
}

static void
ng_nflog_cb(evutil_socket_t fd, short what, void *arg)
{
	char why[256];

	(void)fd;
	(void)what;
	(void)arg;
	if (np_nflog_read(ng.nflog, ng_drop, NULL, &ng.nflog_lost, why,
		sizeof(why)) == -1)
		log_warnx("netpolicy: %s", why);
}

static void
ng_nflog_start(uint16_t group)
{
	char why[256];

	if ((ng.nflog = np_nflog_open(group, why, sizeof(why))) == NULL) {
		/* Drop events are for the record; the rules still hold. */
		log_warnx("netpolicy: no drop events: %s", why);
		return;
	}
	ng.nflog_ev = event_new(ng.base, np_nflog_fd(ng.nflog),
	    EV_READ | EV_PERSIST, ng_nflog_cb, NULL);
	ng.agg_ev = evtimer_new(ng.base, ng_agg_cb, NULL);
	if (ng.nflog_ev == NULL || ng.agg_ev == NULL ||
	    event_add(ng.nflog_ev, NULL) == -1) {
		log_warnx("netpolicy: no drop events: event setup failed");
		if (ng.nflog_ev != NULL)
			event_free(ng.nflog_ev);
		ng.nflog_ev = NULL;
		np_nflog_close(ng.nflog);
		ng.nflog = NULL;
	}
}

int
netguard_start(const struct proxy_env *env, int enabled, char *why,
    size_t whylen)
{
	struct timeval every = { NG_VERIFY_SECS, 0 }, now = { 0, 0 };
	struct event_base *base = env->pe_base;
	const struct config *cf = env->pe_cf;

	memset(&ng, 0, sizeof(ng));
	ng.env = env;
	ng.base = base;
	ng.mode = cf->cf_np.np_mode;
	snprintf(ng.table, sizeof(ng.table), "%s", cf->cf_np.np_table);
	ng.flush_on_exit = cf->cf_np.np_flush_on_exit;
	if (!enabled || cf->cf_np.np_mode == NETPOLICY_OFF)
		return 0;
	if ((ng.want = ng_ruleset(cf, env->pe_sbx, why, whylen)) == NULL)
		return -1;
	np_nl_keep(1);
	if (ng_apply(ng.want, why, whylen) == -1) {
		np_ruleset_free(ng.want);
		ng.want = NULL;
		return -1;
	}
	ng.enabled = 1;
	log_info("netpolicy: table inet %s applied (%s, %zu rules)", ng.table,
	    mode_name(ng.mode), np_ruleset_nrules(ng.want));
	ng.verify_ev = event_new(base, -1, EV_PERSIST, ng_verify_cb, NULL);
	ng.apply_ev = evtimer_new(base, ng_apply_event_cb, NULL);
	if (ng.verify_ev == NULL || ng.apply_ev == NULL ||
	    event_add(ng.verify_ev, &every) == -1 ||
	    evtimer_add(ng.apply_ev, &now) == -1) {
		/* The rules are in; only their upkeep failed to start. */
		snprintf(why, whylen,
		    "netpolicy: cannot start the verify timer");
		return -1;
	}
	ng_nflog_start(cf->cf_np.np_log_group);
	/*
	 * With a metrics listener the drop counters are read more often
	 * than verify runs (a rules-only read: a few small messages).
	 */
	if (cf->cf_metrics_listen != NULL) {
		struct timeval often = { NG_COUNTER_SECS, 0 };

		ng.counter_ev =
		    event_new(base, -1, EV_PERSIST, ng_counter_cb, NULL);
		if (ng.counter_ev == NULL ||
		    event_add(ng.counter_ev, &often) == -1)
			log_warnx("netpolicy: drop counters only every %d s",
			    NG_VERIFY_SECS);
	}
	return 0;
}

/* Whether an allowlist route of cf dials port (its hosts were asked). */
static int
ng_allowlist_port(const struct config *cf, uint16_t port)
{
	size_t r, p;

	for (r = 0; r < cf->cf_nroutes; r++) {
		const struct upstream_conf *uc = &cf->cf_routes[r].rt_up;

		for (p = 0; uc->uc_as_requested && p < uc->uc_nports; p++)
			if (uc->uc_ports[p] == port)
				return 1;
	}
	return 0;
}

/*
 * Keep the dynamic elements whose upstream is still configured (for an
 * allowlist destination: a port an allowlist route still dials; they
 * expire with their TTL).
 */
static void
ng_dyn_retain(const struct config *cf)
{
	size_t i = 0, r;
	int keep;

	while (i < ng.ndyn) {
		keep = ng.dyn[i].dy_allowlist &&
		    ng_allowlist_port(cf, ng.dyn[i].dy_port);
		for (r = 0; r < cf->cf_nroutes && !keep; r++) {
			const struct upstream_conf *uc =
			    &cf->cf_routes[r].rt_up;

			keep = uc->uc_host != NULL &&
			    uc->uc_port == ng.dyn[i].dy_port &&
			    strcmp(uc->uc_host, ng.dyn[i].dy_host) == 0;
		}
		if (keep)
			i++;
		else
			ng.dyn[i] = ng.dyn[--ng.ndyn];
	}
}

int
netguard_prepare(const struct config *cf, struct np_ruleset **rsp, char *why,
    size_t whylen)
{
	*rsp = NULL;
	if (!ng.enabled) {
		if (cf->cf_np.np_mode != NETPOLICY_OFF &&
		    ng.mode == NETPOLICY_OFF) {
			snprintf(why, whylen,
			    "netpolicy.mode: cannot turn on at reload; "
			    "restart sluice");
			return -1;
		}
		return 0;
	}
	/*
	 * Switching mode or table at reload would leave a window (or an
	 * orphaned table) that a restart does not have: refuse it.
	 */
	if (cf->cf_np.np_mode != ng.mode ||
	    strcmp(cf->cf_np.np_table, ng.table) != 0) {
		snprintf(why, whylen,
		    "netpolicy.mode/table cannot change at reload; restart "
		    "sluice");
		return -1;
	}
	if ((*rsp = ng_ruleset(cf, ng.env->pe_sbx, why, whylen)) == NULL)
		return -1;
	return 0;
}

int
netguard_commit(const struct config *cf, struct np_ruleset *rs, char *why,
    size_t whylen)
{
	static struct ng_dyn saved[NG_DYN_MAX];
	struct ng_diff_ctx dc;
	size_t n, nsaved;

	if (rs == NULL)
		return 0;
	/*
	 * Verify at reload, against the rules in force until now: drift
	 * since the last check is recorded before the new apply repairs it.
	 */
	if ((n = ng_verify(&dc)) > 0)
		ng_audit_np("netpolicy.verify_failed", dc.first, n);
	/* A refused apply leaves the old rules, and their elements, alone. */
	nsaved = ng.ndyn;
	memcpy(saved, ng.dyn, nsaved * sizeof(saved[0]));
	ng_dyn_retain(cf);
	if (ng_apply(rs, why, whylen) == -1) {
		memcpy(ng.dyn, saved, nsaved * sizeof(saved[0]));
		ng.ndyn = nsaved;
		np_ruleset_free(rs);
		return -1;
	}
	np_ruleset_free(ng.want);
	ng.want = rs;
	ng.flush_on_exit = cf->cf_np.np_flush_on_exit;
	ng_audit_np("netpolicy.apply", NULL, 0);
	/* The apply was acknowledged; read it back all the same. */
	ng_verify_and_repair();
	return 0;
}

int
netguard_reload(const struct config *cf, char *why, size_t whylen)
{
	struct np_ruleset *rs;

	if (netguard_prepare(cf, &rs, why, whylen) == -1)
		return -1;
	return netguard_commit(cf, rs, why, whylen);
}

/*
 * The slot of the dynamic element closest to expiry, now taken out of the
 * kernel's set: the kernel's count stays bounded too (a connection already
 * made with it goes on: established flows carry the mark of the rule that
 * let them out).
 */
static struct ng_dyn *
ng_dyn_evict_oldest(void)
{
	struct ng_dyn *dy;
	char why[256];
	size_t j, oldest;

	for (oldest = 0, j = 1; j < ng.ndyn; j++)
		if (ng.dyn[j].dy_expires < ng.dyn[oldest].dy_expires)
			oldest = j;
	dy = &ng.dyn[oldest];
	if (np_set_del(ng.table,
		dy->dy_v6 ? NP_SET_UPSTREAM6 : NP_SET_UPSTREAM4, &dy->dy_elem,
		1, why, sizeof(why)) == -1)
		log_warnx("netpolicy: cannot evict an element: %s", why);
	return dy;
}

/* Where to remember el: its known slot, a free one, or the oldest one. */
static struct ng_dyn *
ng_dyn_slot(const struct np_elem *el)
{
	size_t j;

	for (j = 0; j < ng.ndyn; j++)
		if (memcmp(ng.dyn[j].dy_elem.el_key, el->el_key,
			sizeof(el->el_key)) == 0)
			return &ng.dyn[j];
	if (ng.ndyn < NG_DYN_MAX)
		return &ng.dyn[ng.ndyn++];
	return ng_dyn_evict_oldest();
}

void
netguard_upstream_addrs(const struct route *rt, const char *host, uint16_t port,
    const struct sockaddr_storage *addrs, size_t n, uint32_t ttl)
{
	struct np_elem *e4, *e6;
	size_t n4 = 0, n6 = 0, i;
	const struct upstream_conf *uc = &rt->rt_up;
	uint32_t timeout;
	char why[256];
	struct ng_dyn *dy;
	time_t now;

	/*
	 * Only sidecar rules restrict sluice's own traffic. A fixed
	 * upstream's literal address is a static element already; an
	 * allowlist route's destinations, literal or not, are all dynamic.
	 */
	if (!ng.enabled || ng.mode != NETPOLICY_SIDECAR ||
	    (uc->uc_host_is_ip && !uc->uc_as_requested) || host == NULL ||
	    strlen(host) >= NG_HOST_MAX)
		return;
	/* A floor: a short TTL must not race the connect that follows. */
	timeout = ttl > NP_DYN_TIMEOUT_MIN ? ttl : NP_DYN_TIMEOUT_MIN;
	now = mono_now();
	ng_dyn_prune();
	e4 = calloc(n > 0 ? n : 1, sizeof(*e4));
	e6 = calloc(n > 0 ? n : 1, sizeof(*e6));
	if (e4 == NULL || e6 == NULL) {
		log_warnx("netpolicy: cannot allow %s's addresses: out of "
			  "memory",
		    host);
		free(e4);
		free(e6);
		return;
	}
	for (i = 0; i < n; i++) {
		struct np_elem el;

		if (np_elem_addr_port(&el, (const struct sockaddr *)&addrs[i],
			port, timeout) == -1)
			continue;
		if (addrs[i].ss_family == AF_INET6)
			e6[n6++] = el;
		else
			e4[n4++] = el;
		/* Remember it, for a re-apply; refresh a known one. */
		dy = ng_dyn_slot(&el);
		dy->dy_elem = el;
		dy->dy_v6 = addrs[i].ss_family == AF_INET6;
		snprintf(dy->dy_host, sizeof(dy->dy_host), "%s", host);
		dy->dy_port = port;
		dy->dy_allowlist = uc->uc_as_requested;
		dy->dy_expires = now + (time_t)timeout;
	}
	/*
	 * np_set_add replaces an element already there: only that resets
	 * its timeout to this TTL (a mere re-add keeps the old expiry, and
	 * sluice's own connections were then dropped when it ran out).
	 */
	if (np_set_add(ng.table, NP_SET_UPSTREAM4, e4, n4, why, sizeof(why)) ==
		-1 ||
	    np_set_add(ng.table, NP_SET_UPSTREAM6, e6, n6, why, sizeof(why)) ==
		-1)
		log_warnx("netpolicy: cannot allow %s's addresses: %s", host,
		    why);
	metrics_kernel_dynamic(ng.ndyn);
	free(e4);
	free(e6);
}

/* Add el to (or take it out of) want's set: verify compares with it. */
static int
ng_want_elem(const char *name, const struct np_elem *el, int del)
{
	struct np_set *set = np_ruleset_set(ng.want, name);
	size_t i;

	if (set == NULL)
		return -1;
	for (i = 0; i < set->se_nelems; i++)
		if (set->se_elems[i].el_keylen == el->el_keylen &&
		    memcmp(set->se_elems[i].el_key, el->el_key,
			el->el_keylen) == 0)
			break;
	if (del) {
		if (i < set->se_nelems)
			set->se_elems[i] = set->se_elems[--set->se_nelems];
		return 0;
	}
	return i < set->se_nelems ? 0 : np_set_add_elem(set, el);
}

int
netguard_sandboxes(const struct sandbox_conf *add,
    const struct sandbox_conf *del, char *why, size_t whylen)
{
	struct np_set_change ch[2 * SANDBOX_MAX_ADDRS];
	const struct sandbox_conf *sc;
	struct np_sandbox ns;
	size_t n = 0, i, k;

	if (!ng.enabled || ng.mode != NETPOLICY_GATEWAY)
		return 0;
	for (k = 0; k < 2; k++) {
		if ((sc = k == 0 ? del : add) == NULL)
			continue;
		for (i = 0; i < sc->sc_naddrs; i++) {
			memset(&ns, 0, sizeof(ns));
			ns.ns_iface = sc->sc_iface;
			ns.ns_family =
			    sc->sc_addrs[i].sa_fam == 4 ? AF_INET : AF_INET6;
			memcpy(ns.ns_addr, sc->sc_addrs[i].sa_b, 16);
			if (np_elem_sandbox(&ch[n].sc_elem, &ns) == -1) {
				snprintf(why, whylen,
				    "netpolicy: sandbox %s: bad element",
				    sc->sc_id);
				return -1;
			}
			ch[n].sc_set = ns.ns_family == AF_INET ?
			    NP_SET_SANDBOX4 :
			    NP_SET_SANDBOX6;
			ch[n].sc_del = k == 0;
			n++;
		}
	}
	/* One batch: the kernel has all of it or none. */
	if (np_set_update(ng.table, ch, n, why, whylen) == -1)
		return -1;
	for (i = 0; i < n; i++)
		if (ng_want_elem(ch[i].sc_set, &ch[i].sc_elem, ch[i].sc_del) ==
		    -1)
			log_warnx("netpolicy: out of memory: the next verify "
				  "re-applies the table");
	return 0;
}

/*
 * In a forked engine: let the netlink and NFLOG sockets and the timers
 * go, the rules untouched (they are the parent's).
 */
/* The timers (but NFLOG's), and what is left after them. */
static void
ng_free_timers(void)
{
	if (ng.agg_ev != NULL)
		event_free(ng.agg_ev);
	if (ng.verify_ev != NULL)
		event_free(ng.verify_ev);
	if (ng.counter_ev != NULL)
		event_free(ng.counter_ev);
	if (ng.apply_ev != NULL)
		event_free(ng.apply_ev);
}

void
netguard_forget(void)
{
	if (ng.nflog_ev != NULL)
		event_free(ng.nflog_ev);
	/* Not np_nflog_close(): its unbind would stop the parent's too. */
	np_nflog_forget(ng.nflog);
	ng_free_timers();
	np_ruleset_free(ng.want);
	np_nl_keep(0);
	memset(&ng, 0, sizeof(ng));
}

void
netguard_stop(const struct config *cf)
{
	char why[256];

	if (ng.nflog_ev != NULL)
		event_free(ng.nflog_ev);
	np_nflog_close(ng.nflog);
	if (ng.agg_ev != NULL)
		ng_agg_flush();
	ng_free_timers();
	/* Fail-closed: the rules outlive sluice unless told otherwise. */
	if (ng.enabled && cf != NULL && cf->cf_np.np_flush_on_exit) {
		if (np_flush(ng.table, why, sizeof(why)) == -1)
			log_warnx("netpolicy: flush on exit: %s", why);
		else
			log_info("netpolicy: table inet %s flushed on exit",
			    ng.table);
	}
	np_ruleset_free(ng.want);
	np_nl_keep(0);
	memset(&ng, 0, sizeof(ng));
}
