/*
 * The parent's side of upstream name resolution under privilege
 * separation (DESIGN.md "Privilege separation": only the parent resolves
 * names, and the engine connects only to addresses the parent sent it,
 * which are exactly what the kernel set allows). An engine asks for a
 * host and port; the parent looks for a route of the policy in force that
 * dials that destination (a fixed upstream, or an allowlist route whose
 * hosts and ports cover it), resolves it with its own stub resolver,
 * keeps the addresses policy_check_addr() allows, puts them in the kernel
 * set, and only then answers. A destination no route dials gets an empty
 * answer: the parent never adds a set element because an engine asked.
 */
#include <sys/queue.h>
#include <sys/socket.h>

#include <netinet/in.h>

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "proxy/config/config.h"
#include "proxy/daemon/daemon.h"
#include "proxy/daemon/engine.h"
#include "proxy/dns/dnsmsg.h"
#include "proxy/dns/resolve.h"
#include "proxy/policy/policy.h"
#include "proxy/util/hostmatch.h"
#include "proxy/util/util.h"

#define EDNS_MAX_PENDING 1024 /* questions in flight, all engines */

struct edns_q {
	TAILQ_ENTRY(edns_q) q_entry;
	int q_slot;
	uint64_t q_id;
	struct config *q_cf; /* referenced */
	const struct route *q_rt;
	char q_host[ENGINE_HOST_MAX];
	uint16_t q_port;
	struct resolve_req *q_req4, *q_req6;
	int q_pending;
	uint32_t q_ttl;
	size_t q_n;
	struct sockaddr_storage q_addrs[ENGINE_MAX_ADDRS];
};

static TAILQ_HEAD(, edns_q) edns_qs = TAILQ_HEAD_INITIALIZER(edns_qs);
static size_t edns_nqs;
static edns_answer_cb *edns_cb;

void
edns_on_answer(edns_answer_cb *cb)
{
	edns_cb = cb;
}

/* Whether rt, an allowlist route, may name port. */
static int
edns_port_ok(const struct upstream_conf *uc, uint16_t port)
{
	size_t i;

	for (i = 0; i < uc->uc_nports; i++)
		if (uc->uc_ports[i] == port)
			return 1;
	return 0;
}

/* The route of cf that dials host:port (normalized host), or NULL. */
static const struct route *
edns_route(const struct config *cf, const char *host, uint16_t port)
{
	struct hostmatch_hit hit;
	const struct route *rt;
	size_t i;

	for (i = 0; i < cf->cf_nroutes; i++) {
		const struct upstream_conf *uc = &cf->cf_routes[i].rt_up;

		if (!uc->uc_as_requested && !uc->uc_host_is_ip &&
		    uc->uc_host != NULL && strcasecmp(uc->uc_host, host) == 0 &&
		    uc->uc_port == port)
			return &cf->cf_routes[i];
	}
	if (cf->cf_hosts == NULL ||
	    hostmatch_lookup(cf->cf_hosts, host, strlen(host), 0, &hit) != 1)
		return NULL;
	for (i = 0; i < hit.hh_nvals; i++) {
		if (hit.hh_vals[i] >= cf->cf_nroutes)
			continue;
		rt = &cf->cf_routes[hit.hh_vals[i]];
		if (rt->rt_up.uc_as_requested && edns_port_ok(&rt->rt_up, port))
			return rt;
	}
	return NULL;
}

/* As edns_route; in report mode what no route dials is dialled too. */
static const struct route *
edns_route_or_report(const struct config *cf, const char *host, uint16_t port)
{
	const struct route *rt = edns_route(cf, host, port);

	if (rt == NULL && cf->cf_report)
		rt = cf->cf_report_rt;
	return rt;
}

static void
edns_free(struct edns_q *q)
{
	TAILQ_REMOVE(&edns_qs, q, q_entry);
	edns_nqs--;
	resolve_cancel(q->q_req4);
	resolve_cancel(q->q_req6);
	config_unref(q->q_cf);
	free(q);
}

/* Both answers are in: check, fill the kernel set, answer. */
static void
edns_done(struct edns_q *q)
{
	struct sockaddr_storage ok[ENGINE_MAX_ADDRS];
	enum reason why = REASON_UPSTREAM_UNREACHABLE, r;
	size_t i, n = 0;

	for (i = 0; i < q->q_n; i++) {
		r = policy_check_addr(q->q_cf, q->q_rt,
		    (const struct sockaddr *)&q->q_addrs[i]);
		if (r == REASON_OK)
			ok[n++] = q->q_addrs[i];
		else
			why = r;
	}
	/* The kernel set first: the engine connects as soon as it hears. */
	if (n > 0)
		netguard_upstream_addrs(q->q_rt, q->q_host, q->q_port, ok, n,
		    q->q_ttl);
	if (edns_cb != NULL)
		edns_cb(q->q_slot, q->q_id, ok, n, q->q_ttl, why);
	edns_free(q);
}

static void
edns_answer(struct edns_q *q, int v6, enum resolve_status st,
    const unsigned char (*addrs)[16], size_t count, uint32_t ttl)
{
	size_t i;

	if (st == RESOLVE_OK && count > 0) {
		if (q->q_ttl == 0 || ttl < q->q_ttl)
			q->q_ttl = ttl;
		for (i = 0; i < count && q->q_n < ENGINE_MAX_ADDRS; i++)
			addr_make(&q->q_addrs[q->q_n++], v6, addrs[i],
			    q->q_port);
	}
	if (--q->q_pending == 0)
		edns_done(q);
}

static void
edns_a_cb(enum resolve_status st, const unsigned char (*addrs)[16], size_t n,
    uint32_t ttl, void *arg)
{
	struct edns_q *q = arg;

	q->q_req4 = NULL;
	edns_answer(q, 0, st, addrs, n, ttl);
}

static void
edns_aaaa_cb(enum resolve_status st, const unsigned char (*addrs)[16], size_t n,
    uint32_t ttl, void *arg)
{
	struct edns_q *q = arg;

	q->q_req6 = NULL;
	edns_answer(q, 1, st, addrs, n, ttl);
}

int
edns_ask(int slot, struct config *cf, const char *host, uint16_t port,
    uint64_t id)
{
	char norm[HOSTMATCH_BUF];
	const struct route *rt;
	struct edns_q *q;
	int n;

	if ((n = hostmatch_normalize(host, strlen(host), 0, norm, NULL)) < 0 ||
	    (rt = edns_route_or_report(cf, norm, port)) == NULL) {
		log_warnx("engine %d asked for %s port %u, which no route "
			  "dials: refused",
		    slot, n < 0 ? "a bad name" : norm, (unsigned)port);
		return -1;
	}
	if (edns_nqs >= EDNS_MAX_PENDING || (q = calloc(1, sizeof(*q))) == NULL)
		return -1;
	q->q_slot = slot;
	q->q_id = id;
	q->q_cf = config_ref(cf);
	q->q_rt = rt;
	snprintf(q->q_host, sizeof(q->q_host), "%s", norm);
	q->q_port = port;
	TAILQ_INSERT_TAIL(&edns_qs, q, q_entry);
	edns_nqs++;
	/* A and AAAA in parallel; callbacks never run in resolve_start(). */
	q->q_pending = 2;
	if ((q->q_req4 = resolve_start(norm, DNSMSG_QTYPE_A, edns_a_cb, q)) ==
	    NULL)
		q->q_pending--;
	if ((q->q_req6 = resolve_start(norm, DNSMSG_QTYPE_AAAA, edns_aaaa_cb,
		 q)) == NULL)
		q->q_pending--;
	if (q->q_pending == 0)
		edns_done(q);
	return 0;
}

void
edns_forget(int slot)
{
	struct edns_q *q, *next;

	for (q = TAILQ_FIRST(&edns_qs); q != NULL; q = next) {
		next = TAILQ_NEXT(q, q_entry);
		if (q->q_slot == slot)
			edns_free(q);
	}
}

void
edns_drop_all(void)
{
	struct edns_q *q;

	/* A forked engine: the queries are the parent's; their requests
	 * went with resolve_shutdown(). */
	while ((q = TAILQ_FIRST(&edns_qs)) != NULL) {
		TAILQ_REMOVE(&edns_qs, q, q_entry);
		config_unref(q->q_cf);
		free(q);
	}
	edns_nqs = 0;
}
