/*
 * Prometheus metrics (docs/metrics.md): process-wide counters, gauges and
 * histograms, rendered in the text exposition format 0.0.4, and the
 * listener that serves them at GET /metrics and nothing else. Every label
 * value comes from the policy (route audiences, capped at
 * METRICS_MAX_ROUTES) or from fixed tables (reason codes), so the set of
 * series is bounded whatever the sandbox sends. Callers count; this file
 * only stores and renders.
 */
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/socket.h>

#include <netinet/in.h>
#include <arpa/inet.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>

#include "proxy/config/config.h"
#include "proxy/http/http1.h"
#include "proxy/ops/ops.h"
#include "proxy/token/store.h"
#include "proxy/util/utf8.h"
#include "proxy/util/util.h"

#define METRICS_ROUTE_NAME_MAX 128 /* bytes of a route label we keep */
#define METRICS_SLOTS          (METRICS_MAX_ROUTES + 1) /* + route="" */
#define METRICS_MAX_BUCKETS    16
#define METRICS_TIMEOUT_S      10   /* a whole scrape, from accept */
#define METRICS_MAX_HEADERS    8192 /* bytes of a scrape's header */
#define METRICS_MAX_FIELDS     32   /* header fields of a scrape */
#define METRICS_MAX_CONNS      16   /* scrapes at once; more: 503 */

/* decision labels; "error" is an upstream failure, not a policy denial. */
enum { M_DENY = 0, M_ALLOW = 1, M_ERROR = 2, M_REPORT = 3, M__DECISIONS };
static const char *const metrics_decision_names[M__DECISIONS] = { "deny",
	"allow", "error", "report" };
static const char *const metrics_uperr_names[METRICS_UPERR__COUNT] = {
	[METRICS_UPERR_DNS] = "dns",
	[METRICS_UPERR_DESTINATION] = "destination",
	[METRICS_UPERR_CONNECT] = "connect",
	[METRICS_UPERR_TIMEOUT] = "timeout",
	[METRICS_UPERR_TLS] = "tls",
	[METRICS_UPERR_TLS_VERIFY] = "tls_verify",
	[METRICS_UPERR_PIN] = "pin",
};

/*
 * Every count is a 64-bit integer updated with a relaxed atomic add: with
 * metrics_share(), the parent and up to METRICS_ENGINE_SLOTS engines
 * update the same block at once. A sum of seconds is a double kept as its
 * bit pattern, added to with a compare-exchange loop.
 */
struct histogram {
	const double *h_bounds; /* upper bounds, increasing; +Inf implied */
	size_t h_nbounds;
	uint64_t h_counts[METRICS_MAX_BUCKETS + 1]; /* not cumulative */
	uint64_t h_sum;                             /* a double's bits */
	uint64_t h_count;
};

/* Per route slot; slot METRICS_MAX_ROUTES is route="". */
struct route_counters {
	uint64_t rc_requests[M__DECISIONS][REASON__COUNT];
	uint64_t rc_tunnels[M__DECISIONS][REASON__COUNT];
	uint64_t rc_bytes_in;
	uint64_t rc_bytes_out;
	struct histogram rc_up_resp; /* upstream response head latency */
};

/* Fast requests and slow streamed completions both matter. */
static const double metrics_req_bounds[] = { 0.005, 0.01, 0.025, 0.05, 0.1,
	0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300 };
/* Tunnels live as long as a client keeps its connection. */
static const double metrics_tun_bounds[] = { 0.1, 1, 5, 10, 30, 60, 300, 900,
	1800, 3600 };
static const double metrics_net_bounds[] = { 0.001, 0.0025, 0.005, 0.01, 0.025,
	0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10 };

/*
 * All the state that counts. Process-local (metrics_local) until
 * metrics_share() moves it to a MAP_SHARED mapping that every later fork
 * shares: engines replaced after a crash or a reload add to the same
 * counters, and the parent's own counts (reloads, kernel drops) show in
 * the engine that renders. The histograms' bounds point to the static
 * tables above, at the same address in every fork.
 *
 * The label tables (route and sandbox names) are written by
 * metrics_configure() and the first count of a sandbox: an entry is
 * claimed with a compare-exchange on the count, so two processes never
 * write the same entry, and published by its ready flag (release; readers
 * acquire), so no reader sees half a name. A name registered by two
 * processes in the same instant may take two entries: counts go to
 * either, and a render sums them into one series (struct metrics_labels).
 * A process that dies between claim and publication leaves an entry that
 * is never used (the table fills one sooner). metrics_reset() (tests)
 * zeroes the block under whoever else is counting: call it alone.
 *
 * Process-level gauges (fds, RSS) are the rendering process's own;
 * process_start_time_seconds is the first metrics call of the process
 * that shared the block (the parent), as the counters' lifetime is its.
 */
struct metrics_state {
	char m_routes[METRICS_MAX_ROUTES][METRICS_ROUTE_NAME_MAX + 1];
	size_t m_nroutes; /* entries claimed */
	int m_route_ready[METRICS_MAX_ROUTES];
	struct route_counters m_rc[METRICS_SLOTS];
	struct histogram m_req_dur;
	struct histogram m_tun_dur;
	struct histogram m_connect;
	struct histogram m_tls;
	/* Gauges per engine (a dead engine's share is cleared). */
	int64_t m_conn_active[METRICS_ENGINE_SLOTS];
	int64_t m_pool_idle[METRICS_ENGINE_SLOTS];
	uint64_t m_cache_hits;
	uint64_t m_cache_misses;
	uint64_t m_audit_errors;
	int m_audit_failed;
	uint64_t m_net_drops;
	uint64_t m_rule_packets;
	uint64_t m_rule_bytes;
	uint64_t m_dyn_elems;  /* sluice's dynamic kernel set elements */
	uint64_t m_reloads[2]; /* [0] failed, [1] ok */
	int64_t m_started;     /* process start (first metrics call) */
	int64_t m_policy_time; /* a policy was put in force (start, reload) */
	uint64_t m_uperr[METRICS_UPERR__COUNT];
	uint64_t m_secret_headers;
	uint64_t m_spliced;           /* tunnels moved to splice(2) */
	uint64_t m_allowed, m_denied; /* requests and tunnels, all routes */
	/* Per sandbox (gateway): the first METRICS_MAX_SANDBOXES, "other". */
	char m_sbx[METRICS_MAX_SANDBOXES][SANDBOX_ID_MAX + 1];
	size_t m_nsbx; /* entries claimed */
	int m_sbx_ready[METRICS_MAX_SANDBOXES];
	uint64_t m_sbx_req[METRICS_MAX_SANDBOXES + 1][M__DECISIONS];
	int64_t m_sbx_conns[METRICS_ENGINE_SLOTS][METRICS_MAX_SANDBOXES + 1];
	/* Privilege separation: shown once shared or counted. */
	int m_engines_shown;
	uint64_t m_engine_restarts;
	int64_t m_engines;
};

static struct metrics_state metrics_local;
static struct metrics_state *ms = &metrics_local;
static int metrics_eslot; /* this process's engine slot */
/* Borrowed per process: the table lives in the process that renders. */
static const struct budget *metrics_budget_tab;
/* metrics_preopen(): kept descriptors, else -1 (open per scrape). */
static int metrics_statm_fd = -1;
static int metrics_fddir_fd = -1;

/* Macros: clang-tidy takes the builtins' pointer for a const one. */
#define MA_ADD(p, v)  ((void)__atomic_fetch_add((p), (v), __ATOMIC_RELAXED))
#define MA_ADDI(p, v) ((void)__atomic_fetch_add((p), (v), __ATOMIC_RELAXED))
#define MA_SET(p, v)  __atomic_store_n((p), (v), __ATOMIC_RELAXED)

static uint64_t
ma_get(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

static int64_t
ma_geti(const int64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

/* The sum, a double kept as its bits: add with a compare-exchange loop. */
static void
metrics_hist_add_sum(struct histogram *h, double v)
{
	uint64_t old = __atomic_load_n(&h->h_sum, __ATOMIC_RELAXED), new;
	double d;

	do {
		memcpy(&d, &old, sizeof(d));
		d += v;
		memcpy(&new, &d, sizeof(new));
	} while (!__atomic_compare_exchange_n(&h->h_sum, &old, new, 1,
	    __ATOMIC_RELAXED, __ATOMIC_RELAXED));
}

static double
ma_get_double(const uint64_t *p)
{
	uint64_t bits = __atomic_load_n(p, __ATOMIC_RELAXED);
	double d;

	memcpy(&d, &bits, sizeof(d));
	return d;
}

/* Sum of a per-engine gauge over the engine slots. */
static int64_t
ma_sum_slots(const int64_t g[METRICS_ENGINE_SLOTS])
{
	int64_t sum = 0;
	size_t i;

	for (i = 0; i < METRICS_ENGINE_SLOTS; i++)
		sum += ma_geti(&g[i]);
	return sum;
}

/* Open connections of sandbox slot s, over the engine slots. */
static int64_t
metrics_sbx_conns(size_t s)
{
	int64_t sum = 0;
	size_t i;

	for (i = 0; i < METRICS_ENGINE_SLOTS; i++)
		sum += ma_geti(&ms->m_sbx_conns[i][s]);
	return sum;
}

/*
 * Claim the next entry of a label table of cap entries (sandboxes when
 * sbx is non-zero, else routes): the index, or cap when it is full. The
 * caller writes the name, then publishes it.
 */
static size_t
metrics_claim(int sbx, size_t cap)
{
	size_t *count = sbx ? &ms->m_nsbx : &ms->m_nroutes;
	size_t n = __atomic_load_n(count, __ATOMIC_ACQUIRE);

	do {
		if (n >= cap)
			return cap;
	} while (!__atomic_compare_exchange_n(count, &n, n + 1, 1,
	    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
	return n;
}

/* Entries claimed so far, at most cap. */
static size_t
metrics_claimed(const size_t *count, size_t cap)
{
	size_t n = __atomic_load_n(count, __ATOMIC_ACQUIRE);

	return n < cap ? n : cap;
}

static int
metrics_ready(const int *ready)
{
	return __atomic_load_n(ready, __ATOMIC_ACQUIRE);
}

/*
 * The listener: sluice's own strict parser (http1.c), one request per
 * connection, at most METRICS_MAX_CONNS at once, each closed
 * METRICS_TIMEOUT_S after accept whatever it does.
 */
struct metrics_conn {
	struct metrics_conn *mc_next;
	struct bufferevent *mc_bev;
	struct event *mc_deadline;
	size_t mc_scan;
	int mc_done; /* answered: close once written */
};

static struct event_base *metrics_base;
static struct evconnlistener *metrics_lev;
static struct event *metrics_pause; /* resumes accepting */
static char *metrics_unix_path;     /* unlinked at close */
static struct metrics_conn *metrics_conns;
static size_t metrics_nconns;
static struct http1_hdr metrics_hdrs[METRICS_MAX_FIELDS];

static void
metrics_hist_init(struct histogram *h, const double *b, size_t n)
{
	memset(h, 0, sizeof(*h));
	h->h_bounds = b;
	h->h_nbounds = n;
}

void
metrics_reset(void)
{
	size_t i;

	memset(ms, 0, sizeof(*ms));
	metrics_hist_init(&ms->m_req_dur, metrics_req_bounds,
	    SL_NELEM(metrics_req_bounds));
	metrics_hist_init(&ms->m_tun_dur, metrics_tun_bounds,
	    SL_NELEM(metrics_tun_bounds));
	metrics_hist_init(&ms->m_connect, metrics_net_bounds,
	    SL_NELEM(metrics_net_bounds));
	metrics_hist_init(&ms->m_tls, metrics_net_bounds,
	    SL_NELEM(metrics_net_bounds));
	for (i = 0; i < METRICS_SLOTS; i++)
		metrics_hist_init(&ms->m_rc[i].rc_up_resp, metrics_req_bounds,
		    SL_NELEM(metrics_req_bounds));
	ms->m_started = (int64_t)time(NULL);
	/* A shared block keeps showing the engine families. */
	ms->m_engines_shown = ms != &metrics_local;
	metrics_budget_tab = NULL;
}

/* The state starts zeroed; the histograms need their bounds. */
static void
metrics_init_once(void)
{
	if (ms->m_req_dur.h_bounds == NULL)
		metrics_reset();
}

static void
metrics_observe(struct histogram *h, double v)
{
	size_t i;

	metrics_init_once();
	/* A clock step backwards or a NaN must not corrupt the sums. */
	if (!(v >= 0) || isinf(v))
		v = 0;
	for (i = 0; i < h->h_nbounds; i++)
		if (v <= h->h_bounds[i])
			break;
	MA_ADD(&h->h_counts[i], 1);
	metrics_hist_add_sum(h, v);
	MA_ADD(&h->h_count, 1);
}

static size_t
metrics_slot(const char *route)
{
	size_t i, n = metrics_claimed(&ms->m_nroutes, METRICS_MAX_ROUTES);

	if (route == NULL)
		return METRICS_MAX_ROUTES;
	for (i = 0; i < n; i++)
		if (metrics_ready(&ms->m_route_ready[i]) &&
		    strcmp(ms->m_routes[i], route) == 0)
			return i;
	return METRICS_MAX_ROUTES;
}

/*
 * A label table as one render sees it: for each entry the first published
 * entry of the same name, whose series carries them all (METRICS_NONE: not
 * published, no series), and the next entry of that name. The last entry
 * is route="" or sandbox="other", always its own.
 */
#define METRICS_NONE SIZE_MAX
struct metrics_labels {
	size_t l_canon[METRICS_SLOTS];
	size_t l_next[METRICS_SLOTS];
};
_Static_assert(sizeof(((struct metrics_labels *)NULL)->l_canon) >
	sizeof(size_t) * METRICS_MAX_SANDBOXES,
    "the sandbox table fits a struct metrics_labels");

static struct metrics_labels metrics_rlab; /* routes, for this render */

/*
 * Fill l for a table whose special entry is last (route="" or "other")
 * and whose first n entries are claimed; names are stride bytes apart.
 */
static void
metrics_labels_fill(struct metrics_labels *l, size_t last, size_t n,
    const char *names, size_t stride, const int *ready)
{
	size_t i, k, t;

	for (i = 0; i < METRICS_SLOTS; i++)
		l->l_canon[i] = l->l_next[i] = METRICS_NONE;
	l->l_canon[last] = last;
	for (i = 0; i < n; i++) {
		if (!metrics_ready(&ready[i]))
			continue;
		for (k = 0; k < i; k++)
			if (l->l_canon[k] == k &&
			    strcmp(names + k * stride, names + i * stride) == 0)
				break;
		l->l_canon[i] = k;
		if (k == i)
			continue;
		for (t = k; l->l_next[t] != METRICS_NONE; t = l->l_next[t])
			;
		l->l_next[t] = i;
	}
}

/* The routes as this render sees them (metrics_rlab). */
static void
metrics_route_labels_fill(void)
{
	metrics_labels_fill(&metrics_rlab, METRICS_MAX_ROUTES,
	    metrics_claimed(&ms->m_nroutes, METRICS_MAX_ROUTES),
	    &ms->m_routes[0][0], sizeof(ms->m_routes[0]), ms->m_route_ready);
}

/* A route slot with its own series: published first, or route="". */
static int
metrics_route_live(size_t s)
{
	return metrics_rlab.l_canon[s] == s;
}

void
metrics_configure(const struct config *cf)
{
	size_t i;

	metrics_init_once();
	__atomic_store_n(&ms->m_policy_time, (int64_t)time(NULL),
	    __ATOMIC_RELAXED);
	for (i = 0; cf != NULL && i < cf->cf_nroutes; i++) {
		const char *aud = cf->cf_routes[i].rt_audience;
		size_t e;

		if (aud == NULL || aud[0] == '\0' ||
		    strlen(aud) > METRICS_ROUTE_NAME_MAX ||
		    metrics_slot(aud) != METRICS_MAX_ROUTES)
			continue;
		/*
		 * Routes removed by a reload keep their slot, so a counter
		 * never goes backwards; beyond the cap, new routes share
		 * route="".
		 */
		if ((e = metrics_claim(0, METRICS_MAX_ROUTES)) ==
		    METRICS_MAX_ROUTES)
			break;
		memcpy(ms->m_routes[e], aud, strlen(aud) + 1);
		__atomic_store_n(&ms->m_route_ready[e], 1, __ATOMIC_RELEASE);
	}
}

static void
metrics_count(uint64_t (*tab)[REASON__COUNT], int allow, enum reason r)
{
	/* An out-of-range reason is a caller bug: never index with it. */
	if ((unsigned)r >= REASON__COUNT)
		return;
	if (allow == METRICS_REPORT)
		MA_ADD(&tab[M_REPORT][r], 1);
	else if (reason_is_upstream(r))
		MA_ADD(&tab[M_ERROR][r], 1);
	else
		MA_ADD(&tab[allow ? M_ALLOW : M_DENY][r], 1);
}

/* One completed request or tunnel (tunnel non-zero) of route. */
static void
metrics_exchange(const char *route, int tunnel, int allow, enum reason r,
    uint64_t bytes_in, uint64_t bytes_out, double seconds)
{
	struct route_counters *rc;

	metrics_init_once();
	rc = &ms->m_rc[metrics_slot(route)];
	metrics_count(tunnel ? rc->rc_tunnels : rc->rc_requests, allow, r);
	/* An intercepted tunnel's requests are counted one by one. */
	if (!allow)
		MA_ADD(&ms->m_denied, 1);
	else if (tunnel != 2)
		MA_ADD(&ms->m_allowed, 1);
	MA_ADD(&rc->rc_bytes_in, bytes_in);
	MA_ADD(&rc->rc_bytes_out, bytes_out);
	metrics_observe(tunnel ? &ms->m_tun_dur : &ms->m_req_dur, seconds);
}

void
metrics_request(const char *route, int allow, enum reason r, uint64_t bytes_in,
    uint64_t bytes_out, double seconds)
{
	metrics_exchange(route, 0, allow, r, bytes_in, bytes_out, seconds);
}

void
metrics_tunnel(const char *route, int allow, enum reason r, uint64_t bytes_in,
    uint64_t bytes_out, double seconds)
{
	metrics_exchange(route, 1, allow, r, bytes_in, bytes_out, seconds);
}

void
metrics_tunnel_intercepted(const char *route, int allow, enum reason r,
    uint64_t bytes_in, uint64_t bytes_out, double seconds)
{
	metrics_exchange(route, 2, allow, r, bytes_in, bytes_out, seconds);
}

void
metrics_upstream_error(enum metrics_uperr e)
{
	if ((unsigned)e < METRICS_UPERR__COUNT)
		MA_ADD(&ms->m_uperr[e], 1);
}

void
metrics_totals(uint64_t *allowed, uint64_t *denied)
{
	*allowed = ma_get(&ms->m_allowed);
	*denied = ma_get(&ms->m_denied);
}

void
metrics_secret_header(void)
{
	MA_ADD(&ms->m_secret_headers, 1);
}

void
metrics_tunnel_spliced(void)
{
	MA_ADD(&ms->m_spliced, 1);
}

void
metrics_budget(const struct budget *b)
{
	metrics_budget_tab = b;
}

void
metrics_upstream_response(const char *route, double seconds)
{
	metrics_init_once();
	metrics_observe(&ms->m_rc[metrics_slot(route)].rc_up_resp, seconds);
}

void
metrics_upstream_connect(double seconds)
{
	metrics_observe(&ms->m_connect, seconds);
}

void
metrics_tls_handshake(double seconds)
{
	metrics_observe(&ms->m_tls, seconds);
}

void
metrics_conn_active(int delta)
{
	MA_ADDI(&ms->m_conn_active[metrics_eslot], delta);
}

void
metrics_pool_idle(int delta)
{
	MA_ADDI(&ms->m_pool_idle[metrics_eslot], delta);
}

void
metrics_token_cache(int hit)
{
	MA_ADD(hit ? &ms->m_cache_hits : &ms->m_cache_misses, 1);
}

void
metrics_audit_error(void)
{
	MA_ADD(&ms->m_audit_errors, 1);
}

void
metrics_audit_failed(int failed)
{
	__atomic_store_n(&ms->m_audit_failed, failed != 0, __ATOMIC_RELAXED);
}

void
metrics_net_drop(uint64_t count)
{
	MA_ADD(&ms->m_net_drops, count);
}

void
metrics_kernel_rule_drops(uint64_t packets, uint64_t bytes)
{
	MA_SET(&ms->m_rule_packets, packets);
	MA_SET(&ms->m_rule_bytes, bytes);
}

void
metrics_kernel_dynamic(uint64_t n)
{
	MA_SET(&ms->m_dyn_elems, n);
}

void
metrics_reload(int ok)
{
	MA_ADD(&ms->m_reloads[ok ? 1 : 0], 1);
}

int
metrics_share(void)
{
	struct metrics_state *sh;

	metrics_init_once();
	if (ms != &metrics_local)
		return 0;
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		return -1;
	memcpy(sh, &metrics_local, sizeof(*sh));
	sh->m_engines_shown = 1;
	ms = sh;
	return 0;
}

void
metrics_engine_slot(int slot)
{
	if (slot >= 0 && slot < METRICS_ENGINE_SLOTS)
		metrics_eslot = slot;
}

void
metrics_engine_slot_clear(int slot)
{
	size_t i;

	if (slot < 0 || slot >= METRICS_ENGINE_SLOTS)
		return;
	__atomic_store_n(&ms->m_conn_active[slot], 0, __ATOMIC_RELAXED);
	__atomic_store_n(&ms->m_pool_idle[slot], 0, __ATOMIC_RELAXED);
	for (i = 0; i <= METRICS_MAX_SANDBOXES; i++)
		__atomic_store_n(&ms->m_sbx_conns[slot][i], 0,
		    __ATOMIC_RELAXED);
}

void
metrics_engine_restart(void)
{
	__atomic_store_n(&ms->m_engines_shown, 1, __ATOMIC_RELAXED);
	MA_ADD(&ms->m_engine_restarts, 1);
}

void
metrics_engines_alive(int n)
{
	__atomic_store_n(&ms->m_engines_shown, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&ms->m_engines, (int64_t)n, __ATOMIC_RELAXED);
}

int64_t
metrics_conn_active_total(void)
{
	return ma_sum_slots(ms->m_conn_active);
}

void
metrics_cache_totals(uint64_t *hits, uint64_t *misses)
{
	*hits = ma_get(&ms->m_cache_hits);
	*misses = ma_get(&ms->m_cache_misses);
}

/*
 * Keep /proc/self/statm and /proc/self/fd open for the process metrics:
 * a confined engine cannot open files. The previous ones are closed.
 */
void
metrics_preopen(void)
{
	if (metrics_statm_fd != -1)
		(void)close(metrics_statm_fd);
	if (metrics_fddir_fd != -1)
		(void)close(metrics_fddir_fd);
	metrics_statm_fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
	metrics_fddir_fd =
	    open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

/*
 * Write a label value: backslash, quote and newline escaped as the format
 * requires; other control bytes and bytes that are not UTF-8 (a policy may
 * hold anything) become U+FFFD so the output stays valid UTF-8.
 */
static int
metrics_label(struct evbuffer *b, const char *v)
{
	const unsigned char *p = (const unsigned char *)v;
	size_t n = strlen(v), i = 0, k;
	int rc = 0;

	while (i < n && rc == 0) {
		if (p[i] == '\\')
			rc = evbuffer_add(b, "\\\\", 2);
		else if (p[i] == '"')
			rc = evbuffer_add(b, "\\\"", 2);
		else if (p[i] == '\n')
			rc = evbuffer_add(b, "\\n", 2);
		else if (p[i] < 0x20 || p[i] == 0x7f ||
		    (k = utf8_len(p + i, n - i)) == 0)
			rc = evbuffer_add(b, "\xef\xbf\xbd", 3);
		else {
			rc = evbuffer_add(b, p + i, k);
			i += k;
			continue;
		}
		i++;
	}
	return rc;
}

static int
metrics_family(struct evbuffer *b, const char *name, const char *type,
    const char *help)
{
	return evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name,
		   help, name, type) < 0 ?
	    -1 :
	    0;
}

static int
metrics_simple(struct evbuffer *b, const char *name, const char *type,
    const char *help, const char *value)
{
	if (metrics_family(b, name, type, help) == -1 ||
	    evbuffer_add_printf(b, "%s %s\n", name, value) < 0)
		return -1;
	return 0;
}

static int
metrics_u64(struct evbuffer *b, const char *name, const char *type,
    const char *help, uint64_t v)
{
	char num[32];

	snprintf(num, sizeof(num), "%" PRIu64, v);
	return metrics_simple(b, name, type, help, num);
}

static const char *
metrics_route_name(size_t slot)
{
	return slot < METRICS_MAX_ROUTES && metrics_route_live(slot) ?
	    ms->m_routes[slot] :
	    "";
}

/* A route's {decision,reason} count, over the entries of its name. */
static uint64_t
metrics_route_count(size_t s, int tunnels, int d, int r)
{
	uint64_t v = 0;
	size_t t;

	for (t = s; t != METRICS_NONE; t = metrics_rlab.l_next[t])
		v += ma_get(tunnels ? &ms->m_rc[t].rc_tunnels[d][r] :
				      &ms->m_rc[t].rc_requests[d][r]);
	return v;
}

/* {route,decision,reason} counters, one series per non-zero value. */
static int
metrics_decisions(struct evbuffer *b, const char *name, const char *help,
    int tunnels)
{
	size_t s;
	int d, r;

	if (metrics_family(b, name, "counter", help) == -1)
		return -1;
	for (s = 0; s < METRICS_SLOTS; s++) {
		if (!metrics_route_live(s))
			continue;
		for (d = 0; d < M__DECISIONS; d++)
			for (r = 0; r < REASON__COUNT; r++) {
				uint64_t v =
				    metrics_route_count(s, tunnels, d, r);

				if (v == 0)
					continue;
				if (evbuffer_add_printf(b, "%s{route=\"",
					name) < 0 ||
				    metrics_label(b, metrics_route_name(s)) ||
				    evbuffer_add_printf(b,
					"\",decision=\"%s\",reason=\"%s\"} "
					"%" PRIu64 "\n",
					metrics_decision_names[d],
					reason_name((enum reason)r), v) < 0)
					return -1;
			}
	}
	return 0;
}

static int
metrics_bytes(struct evbuffer *b, const char *name, const char *help, int out)
{
	size_t s;

	if (metrics_family(b, name, "counter", help) == -1)
		return -1;
	for (s = 0; s < METRICS_SLOTS; s++) {
		uint64_t v = 0;
		size_t t;

		if (!metrics_route_live(s))
			continue;
		for (t = s; t != METRICS_NONE; t = metrics_rlab.l_next[t])
			v += ma_get(out ? &ms->m_rc[t].rc_bytes_out :
					  &ms->m_rc[t].rc_bytes_in);
		/* Configured routes always show; route="" once used. */
		if (s == METRICS_MAX_ROUTES && v == 0)
			continue;
		if (evbuffer_add_printf(b, "%s{route=\"", name) < 0 ||
		    metrics_label(b, metrics_route_name(s)) ||
		    evbuffer_add_printf(b, "\"} %" PRIu64 "\n", v) < 0)
			return -1;
	}
	return 0;
}

/*
 * The start of a label set: {route="R" then "," when more labels follow
 * or "}" when none do; without a route, "{" when more follow, else none.
 */
static int
metrics_route_labels(struct evbuffer *b, const char *route, int more)
{
	if (route == NULL)
		return more && evbuffer_add(b, "{", 1) == -1 ? -1 : 0;
	if (evbuffer_add_printf(b, "{route=\"") < 0 ||
	    metrics_label(b, route) ||
	    evbuffer_add_printf(b, "\"%s", more ? "," : "}") < 0)
		return -1;
	return 0;
}

/*
 * A histogram's series: _bucket (cumulative, +Inf last), _sum, _count,
 * labelled route="..." when route is not NULL.
 */
static int
metrics_hist_series(struct evbuffer *b, const char *name, const char *route,
    const struct histogram *h)
{
	uint64_t cum = 0;
	size_t i;

	for (i = 0; i <= h->h_nbounds; i++) {
		char le[32];

		cum += ma_get(&h->h_counts[i]);
		if (i < h->h_nbounds)
			snprintf(le, sizeof(le), "%g", h->h_bounds[i]);
		else
			snprintf(le, sizeof(le), "+Inf");
		if (evbuffer_add_printf(b, "%s_bucket", name) < 0 ||
		    metrics_route_labels(b, route, 1) == -1 ||
		    evbuffer_add_printf(b, "le=\"%s\"} %" PRIu64 "\n", le,
			cum) < 0)
			return -1;
	}
	if (evbuffer_add_printf(b, "%s_sum", name) < 0 ||
	    metrics_route_labels(b, route, 0) == -1 ||
	    evbuffer_add_printf(b, " %.9g\n%s_count", ma_get_double(&h->h_sum),
		name) < 0 ||
	    metrics_route_labels(b, route, 0) == -1 ||
	    evbuffer_add_printf(b, " %" PRIu64 "\n", ma_get(&h->h_count)) < 0)
		return -1;
	return 0;
}

static int
metrics_histogram(struct evbuffer *b, const char *name, const char *help,
    const struct histogram *h)
{
	if (metrics_family(b, name, "histogram", help) == -1)
		return -1;
	return metrics_hist_series(b, name, NULL, h);
}

/* A route's response histogram, over the entries of its name, into h. */
static void
metrics_route_hist(size_t s, struct histogram *h)
{
	const struct histogram *e;
	size_t t, i;
	double sum = 0;

	memset(h, 0, sizeof(*h));
	h->h_bounds = ms->m_rc[s].rc_up_resp.h_bounds;
	h->h_nbounds = ms->m_rc[s].rc_up_resp.h_nbounds;
	for (t = s; t != METRICS_NONE; t = metrics_rlab.l_next[t]) {
		e = &ms->m_rc[t].rc_up_resp;
		for (i = 0; i <= h->h_nbounds; i++)
			h->h_counts[i] += ma_get(&e->h_counts[i]);
		sum += ma_get_double(&e->h_sum);
		h->h_count += ma_get(&e->h_count);
	}
	memcpy(&h->h_sum, &sum, sizeof(sum));
}

/* Per route, once a route has seen a response. */
static int
metrics_upstream_responses(struct evbuffer *b)
{
	static const char name[] = "sluice_upstream_response_seconds";
	size_t s;

	if (metrics_family(b, name, "histogram",
		"From a request head sent upstream to the response head, by "
		"route.") == -1)
		return -1;
	for (s = 0; s < METRICS_SLOTS; s++) {
		struct histogram h;

		if (!metrics_route_live(s))
			continue;
		metrics_route_hist(s, &h);
		if (h.h_count == 0)
			continue;
		if (metrics_hist_series(b, name, metrics_route_name(s), &h) ==
		    -1)
			return -1;
	}
	return 0;
}

/*
 * /proc/self/fd to read from the start: a duplicate of the one
 * metrics_preopen() kept (closedir() closes the duplicate only; the two
 * share an offset, hence the rewind), else opened now.
 */
static DIR *
metrics_fd_dir(void)
{
	DIR *d;
	int fd;

	if (metrics_fddir_fd == -1)
		return opendir("/proc/self/fd");
	if ((fd = fcntl(metrics_fddir_fd, F_DUPFD_CLOEXEC, 0)) == -1)
		return NULL;
	if ((d = fdopendir(fd)) == NULL) {
		(void)close(fd);
		return NULL;
	}
	rewinddir(d);
	return d;
}

/*
 * Open descriptors: /proc/self/fd when it can be read (not once sluice
 * is non-dumpable after dropping root: the directory is root's then),
 * else a probe of every descriptor below the soft limit, at most 65536.
 */
static uint64_t
metrics_open_fds(uint64_t *max)
{
	struct rlimit rl;
	struct dirent *de;
	uint64_t n = 0, lim, fd;
	DIR *d;

	lim =
	    getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ?
	    (uint64_t)rl.rlim_cur :
	    65536;
	*max = lim;
	if ((d = metrics_fd_dir()) != NULL) {
		while ((de = readdir(d)) != NULL)
			if (de->d_name[0] != '.')
				n++;
		(void)closedir(d);
		/* Less the directory's own (transient) descriptor. */
		if (n > 0)
			return n - 1;
	}
	if (lim > 65536)
		lim = 65536;
	for (fd = 0; fd < lim; fd++)
		if (fcntl((int)fd, F_GETFD) != -1)
			n++;
	return n;
}

/* Resident set size from /proc/self/statm (readable whatever the owner). */
static uint64_t
metrics_rss(void)
{
	char buf[128], *p, *end;
	unsigned long long res;
	long page = sysconf(_SC_PAGESIZE);
	ssize_t n;
	int fd;

	if (metrics_statm_fd != -1)
		n = pread(metrics_statm_fd, buf, sizeof(buf) - 1, 0);
	else if ((fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC)) == -1)
		return 0;
	else {
		n = read(fd, buf, sizeof(buf) - 1);
		(void)close(fd);
	}
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	/* "size resident shared ...", in pages. */
	if ((p = strchr(buf, ' ')) == NULL)
		return 0;
	errno = 0;
	res = strtoull(p + 1, &end, 10);
	if (errno != 0 || end == p + 1)
		return 0;
	return (uint64_t)res * (uint64_t)(page > 0 ? page : 4096);
}

/* The families added for operators (process, budget, errors, policy). */
static int metrics_sandboxes(struct evbuffer *b);
static int metrics_engines(struct evbuffer *b);

static int
metrics_render_more(struct evbuffer *b)
{
	uint64_t fds, maxfds, live = 0, limit = 0;
	size_t i;

	if (metrics_upstream_responses(b) == -1)
		return -1;
	fds = metrics_open_fds(&maxfds);
	budget_fill(metrics_budget_tab, &live, &limit);
	if (metrics_u64(b, "process_open_fds", "gauge",
		"Open file descriptors.", fds) == -1 ||
	    metrics_u64(b, "process_max_fds", "gauge",
		"The soft limit on open file descriptors.", maxfds) == -1 ||
	    metrics_u64(b, "process_resident_memory_bytes", "gauge",
		"Resident memory size in bytes.", metrics_rss()) == -1 ||
	    metrics_u64(b, "process_start_time_seconds", "gauge",
		"Start time of the process since the epoch, in seconds.",
		(uint64_t)__atomic_load_n(&ms->m_started, __ATOMIC_RELAXED)) ==
		-1 ||
	    metrics_u64(b, "sluice_policy_last_load_timestamp_seconds", "gauge",
		"When the policy in force was loaded (start or reload), "
		"since the epoch.",
		(uint64_t)__atomic_load_n(&ms->m_policy_time,
		    __ATOMIC_RELAXED)) == -1 ||
	    metrics_u64(b, "sluice_budget_entries", "gauge",
		"Tokens with a request count in the budget table.",
		live) == -1 ||
	    metrics_u64(b, "sluice_response_secret_headers_dropped_total",
		"counter",
		"Response header fields dropped because they held a value "
		"sluice injected upstream.",
		ma_get(&ms->m_secret_headers)) == -1 ||
	    metrics_u64(b, "sluice_tunnels_spliced_total", "counter",
		"CONNECT tunnels whose bytes moved to splice(2), zero-copy.",
		ma_get(&ms->m_spliced)) == -1 ||
	    metrics_u64(b, "sluice_budget_entries_limit", "gauge",
		"Entries the budget table holds at most; at the limit a new "
		"token's request is refused (budget_exhausted).",
		limit) == -1)
		return -1;
	if (metrics_family(b, "sluice_upstream_errors_total", "counter",
		"Upstream failures by kind (DNS, destination, connect, "
		"timeout, TLS).") == -1)
		return -1;
	for (i = 0; i < METRICS_UPERR__COUNT; i++)
		if (evbuffer_add_printf(b,
			"sluice_upstream_errors_total{kind=\"%s\"} %" PRIu64
			"\n",
			metrics_uperr_names[i], ma_get(&ms->m_uperr[i])) < 0)
			return -1;
	if (metrics_sandboxes(b) == -1)
		return -1;
	return metrics_engines(b);
}

/* A sandbox's slot: its own among the first ones seen, else "other". */
static size_t
metrics_sbx_slot(const char *id)
{
	size_t i, n = metrics_claimed(&ms->m_nsbx, METRICS_MAX_SANDBOXES);

	if (id == NULL || id[0] == '\0' || strlen(id) > SANDBOX_ID_MAX)
		return METRICS_MAX_SANDBOXES;
	for (i = 0; i < n; i++)
		if (metrics_ready(&ms->m_sbx_ready[i]) &&
		    strcmp(ms->m_sbx[i], id) == 0)
			return i;
	if ((i = metrics_claim(1, METRICS_MAX_SANDBOXES)) ==
	    METRICS_MAX_SANDBOXES)
		return METRICS_MAX_SANDBOXES;
	memcpy(ms->m_sbx[i], id, strlen(id) + 1);
	__atomic_store_n(&ms->m_sbx_ready[i], 1, __ATOMIC_RELEASE);
	return i;
}

void
metrics_sandbox_request(const char *id, int allow, enum reason r)
{
	size_t s = metrics_sbx_slot(id);

	MA_ADD(&ms->m_sbx_req[s][allow ?
		       M_ALLOW :
		       (reason_is_upstream(r) ? M_ERROR : M_DENY)],
	    1);
}

void
metrics_sandbox_conn(const char *id, int delta)
{
	MA_ADDI(&ms->m_sbx_conns[metrics_eslot][metrics_sbx_slot(id)], delta);
}

/* Sandbox entry i's requests with decision d, over the entries of its name. */
static uint64_t
metrics_sbx_reqs(const struct metrics_labels *l, size_t i, size_t d)
{
	uint64_t v = 0;
	size_t t;

	for (t = i; t != METRICS_NONE; t = l->l_next[t])
		v += ma_get(&ms->m_sbx_req[t][d]);
	return v;
}

/* Sandbox entry i's open connections, over the entries of its name. */
static int64_t
metrics_sbx_conns_all(const struct metrics_labels *l, size_t i)
{
	int64_t v = 0;
	size_t t;

	for (t = i; t != METRICS_NONE; t = l->l_next[t])
		v += metrics_sbx_conns(t);
	return v;
}

static const char *
metrics_sbx_name(size_t i)
{
	return i < METRICS_MAX_SANDBOXES ? ms->m_sbx[i] : "other";
}

static int
metrics_sandboxes(struct evbuffer *b)
{
	static struct metrics_labels l;
	size_t i, d, n = metrics_claimed(&ms->m_nsbx, METRICS_MAX_SANDBOXES);

	if (n == 0 && metrics_sbx_conns(METRICS_MAX_SANDBOXES) == 0 &&
	    ma_get(&ms->m_sbx_req[METRICS_MAX_SANDBOXES][M_DENY]) == 0)
		return 0;
	metrics_labels_fill(&l, METRICS_MAX_SANDBOXES, n, &ms->m_sbx[0][0],
	    sizeof(ms->m_sbx[0]), ms->m_sbx_ready);
	if (metrics_family(b, "sluice_sandbox_requests_total", "counter",
		"Requests and tunnels by sandbox (gateway mode; past the "
		"first 64 sandboxes, sandbox=\"other\") and decision.") == -1)
		return -1;
	for (i = 0; i <= METRICS_MAX_SANDBOXES; i++) {
		if (l.l_canon[i] != i)
			continue;
		for (d = 0; d < M__DECISIONS; d++)
			if (evbuffer_add_printf(b,
				"sluice_sandbox_requests_total{sandbox=\"%s\","
				"decision=\"%s\"} %" PRIu64 "\n",
				metrics_sbx_name(i), metrics_decision_names[d],
				metrics_sbx_reqs(&l, i, d)) < 0)
				return -1;
	}
	if (metrics_family(b, "sluice_sandbox_connections", "gauge",
		"Open client connections by sandbox (gateway mode).") == -1)
		return -1;
	for (i = 0; i <= METRICS_MAX_SANDBOXES; i++)
		if (l.l_canon[i] == i &&
		    evbuffer_add_printf(b,
			"sluice_sandbox_connections{sandbox=\"%s\"} %" PRId64
			"\n",
			metrics_sbx_name(i), metrics_sbx_conns_all(&l, i)) < 0)
			return -1;
	return 0;
}

/* Privilege separation: engine restarts, and engines alive now. */
static int
metrics_engines(struct evbuffer *b)
{
	char num[32];

	if (!__atomic_load_n(&ms->m_engines_shown, __ATOMIC_RELAXED))
		return 0;
	snprintf(num, sizeof(num), "%" PRId64, ma_geti(&ms->m_engines));
	if (metrics_u64(b, "sluice_engine_restarts_total", "counter",
		"Engine processes started again after one died.",
		ma_get(&ms->m_engine_restarts)) == -1 ||
	    metrics_simple(b, "sluice_engines", "gauge",
		"Engine processes alive (two while one drains after a "
		"reload).",
		num) == -1)
		return -1;
	return 0;
}

int
metrics_render(struct evbuffer *b)
{
	char num[32];

	metrics_init_once();
	metrics_route_labels_fill();
	if (metrics_family(b, "sluice_build_info", "gauge",
		"Build information; the value is always 1.") == -1 ||
	    evbuffer_add_printf(b, "sluice_build_info{version=\"") < 0 ||
	    metrics_label(b, SLUICE_VERSION) ||
	    evbuffer_add_printf(b, "\"} 1\n") < 0)
		return -1;
	if (metrics_decisions(b, "sluice_requests_total",
		"HTTP requests by route, decision and reason.", 0) == -1 ||
	    metrics_decisions(b, "sluice_tunnels_total",
		"CONNECT tunnels by route, decision and reason.", 1) == -1 ||
	    metrics_bytes(b, "sluice_bytes_in_total",
		"Bytes received from sandbox clients, by route.", 0) == -1 ||
	    metrics_bytes(b, "sluice_bytes_out_total",
		"Bytes sent to sandbox clients, by route.", 1) == -1)
		return -1;
	if (metrics_histogram(b, "sluice_request_duration_seconds",
		"Time from a request's first byte to the end of its response.",
		&ms->m_req_dur) == -1 ||
	    metrics_histogram(b, "sluice_tunnel_duration_seconds",
		"Lifetime of CONNECT tunnels.", &ms->m_tun_dur) == -1 ||
	    metrics_histogram(b, "sluice_upstream_connect_seconds",
		"TCP connect time to upstreams.", &ms->m_connect) == -1 ||
	    metrics_histogram(b, "sluice_upstream_tls_handshake_seconds",
		"TLS handshake time with upstreams.", &ms->m_tls) == -1)
		return -1;
	snprintf(num, sizeof(num), "%" PRId64, ma_sum_slots(ms->m_conn_active));
	if (metrics_simple(b, "sluice_connections_active", "gauge",
		"Client connections open now.", num) == -1)
		return -1;
	snprintf(num, sizeof(num), "%" PRId64, ma_sum_slots(ms->m_pool_idle));
	if (metrics_simple(b, "sluice_upstream_pool_idle_connections", "gauge",
		"Idle upstream connections kept for reuse.", num) == -1)
		return -1;
	if (metrics_u64(b, "sluice_token_cache_hits_total", "counter",
		"Token verifications answered from the cache.",
		ma_get(&ms->m_cache_hits)) == -1 ||
	    metrics_u64(b, "sluice_token_cache_misses_total", "counter",
		"Token verifications that ran the signature check.",
		ma_get(&ms->m_cache_misses)) == -1 ||
	    metrics_u64(b, "sluice_audit_write_errors_total", "counter",
		"Audit log writes or fsyncs that failed.",
		ma_get(&ms->m_audit_errors)) == -1 ||
	    metrics_u64(b, "sluice_audit_failed", "gauge",
		"1 while the audit log is in the failed state (requests are "
		"refused).",
		(uint64_t)__atomic_load_n(&ms->m_audit_failed,
		    __ATOMIC_RELAXED)) == -1 ||
	    metrics_u64(b, "sluice_kernel_drops_total", "counter",
		"Packets dropped by the kernel rules, as reported by NFLOG.",
		ma_get(&ms->m_net_drops)) == -1 ||
	    metrics_u64(b, "sluice_kernel_drop_rule_packets_total", "counter",
		"Packets counted by the drop rules' own counters.",
		ma_get(&ms->m_rule_packets)) == -1 ||
	    metrics_u64(b, "sluice_kernel_drop_rule_bytes_total", "counter",
		"Bytes counted by the drop rules' own counters.",
		ma_get(&ms->m_rule_bytes)) == -1 ||
	    metrics_u64(b, "sluice_kernel_dynamic_set_elements", "gauge",
		"Upstream addresses sluice put in the kernel's dynamic sets "
		"(sidecar mode; bounded, oldest evicted).",
		ma_get(&ms->m_dyn_elems)) == -1)
		return -1;
	if (metrics_family(b, "sluice_policy_reloads_total", "counter",
		"Policy reloads by outcome.") == -1 ||
	    evbuffer_add_printf(b,
		"sluice_policy_reloads_total{outcome=\"ok\"} %" PRIu64 "\n"
		"sluice_policy_reloads_total{outcome=\"failed\"} %" PRIu64 "\n",
		ma_get(&ms->m_reloads[1]), ma_get(&ms->m_reloads[0])) < 0)
		return -1;
	return metrics_render_more(b);
}

static void
metrics_conn_free(struct metrics_conn *mc)
{
	struct metrics_conn **pp;

	for (pp = &metrics_conns; *pp != NULL; pp = &(*pp)->mc_next)
		if (*pp == mc) {
			*pp = mc->mc_next;
			break;
		}
	metrics_nconns--;
	if (mc->mc_deadline != NULL)
		event_free(mc->mc_deadline);
	bufferevent_free(mc->mc_bev);
	free(mc);
}

/* A whole response with Connection: close; the connection ends after. */
static void
metrics_reply(struct metrics_conn *mc, const char *status, const char *extra,
    struct evbuffer *body)
{
	struct evbuffer *out = bufferevent_get_output(mc->mc_bev);
	size_t blen = body != NULL ? evbuffer_get_length(body) : 0;

	mc->mc_done = 1;
	bufferevent_disable(mc->mc_bev, EV_READ);
	if (evbuffer_add_printf(out,
		"HTTP/1.1 %s\r\n"
		"Content-Type: %s\r\n"
		"Cache-Control: no-store\r\n"
		"%s"
		"Content-Length: %zu\r\n"
		"Connection: close\r\n"
		"\r\n",
		status,
		body != NULL ? "text/plain; version=0.0.4; charset=utf-8" :
			       "text/plain; charset=utf-8",
		extra, blen) < 0 ||
	    (body != NULL && evbuffer_add_buffer(out, body) == -1)) {
		metrics_conn_free(mc);
		return;
	}
	bufferevent_enable(mc->mc_bev, EV_WRITE);
}

/*
 * The only resource served. Any other path is a 404, any other method on
 * /metrics a 405, a request with a body a 413; no query or header changes
 * the answer. A request that breaks HTTP/1.1 is a 400.
 */
static void
metrics_serve(struct metrics_conn *mc, const struct http1_msg *rq)
{
	const char *q;
	size_t plen;
	struct evbuffer *body;

	q = memchr(rq->target, '?', rq->target_len);
	plen = q != NULL ? (size_t)(q - rq->target) : rq->target_len;
	if (plen != 8 || memcmp(rq->target, "/metrics", 8) != 0) {
		metrics_reply(mc, "404 Not Found", "", NULL);
		return;
	}
	if (rq->method_len != 3 || memcmp(rq->method, "GET", 3) != 0) {
		metrics_reply(mc, "405 Method Not Allowed", "Allow: GET\r\n",
		    NULL);
		return;
	}
	if (rq->body == HTTP1_BODY_CHUNKED ||
	    (rq->body == HTTP1_BODY_LENGTH && rq->content_length > 0)) {
		metrics_reply(mc, "413 Content Too Large", "", NULL);
		return;
	}
	if ((body = evbuffer_new()) == NULL || metrics_render(body) == -1) {
		if (body != NULL)
			evbuffer_free(body);
		metrics_reply(mc, "500 Internal Server Error", "", NULL);
		return;
	}
	metrics_reply(mc, "200 OK", "", body);
	evbuffer_free(body);
}

static void
metrics_read_cb(struct bufferevent *bev, void *arg)
{
	struct metrics_conn *mc = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	struct http1_msg rq;
	size_t len = evbuffer_get_length(in), n;
	const char *p;
	ssize_t rc;

	if (mc->mc_done) {
		evbuffer_drain(in, len);
		return;
	}
	n = len < METRICS_MAX_HEADERS ? len : METRICS_MAX_HEADERS;
	if ((p = (const char *)evbuffer_pullup(in, (ssize_t)n)) == NULL) {
		metrics_conn_free(mc);
		return;
	}
	memset(&rq, 0, sizeof(rq));
	rq.hdrs = metrics_hdrs;
	rq.max_hdrs = METRICS_MAX_FIELDS;
	rc = http1_parse_request(&rq, p, n, mc->mc_scan);
	mc->mc_scan = n;
	if (rc == -2) {
		if (n >= METRICS_MAX_HEADERS)
			metrics_reply(mc, "431 Request Header Fields Too Large",
			    "", NULL);
		return;
	}
	if (rc == -1) {
		metrics_reply(mc,
		    http1_err_status(rq.err) == 431 ?
			"431 Request Header Fields Too Large" :
			"400 Bad Request",
		    "", NULL);
		return;
	}
	metrics_serve(mc, &rq);
}

static void
metrics_write_cb(struct bufferevent *bev, void *arg)
{
	struct metrics_conn *mc = arg;

	if (mc->mc_done &&
	    evbuffer_get_length(bufferevent_get_output(bev)) == 0)
		metrics_conn_free(mc);
}

static void
metrics_event_cb(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	(void)what;
	metrics_conn_free(arg);
}

static void
metrics_deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	metrics_conn_free(arg);
}

static void
metrics_accept_cb(struct evconnlistener *lev, evutil_socket_t fd,
    struct sockaddr *sa, int salen, void *arg)
{
	static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\n"
				   "Content-Length: 0\r\n"
				   "Connection: close\r\n\r\n";
	struct timeval tv = { METRICS_TIMEOUT_S, 0 };
	struct metrics_conn *mc;

	(void)lev;
	(void)sa;
	(void)salen;
	(void)arg;
	if (metrics_nconns >= METRICS_MAX_CONNS) {
		char drop[512];
		int i;

		/*
		 * Best effort on a fresh socket; never waits. What already
		 * arrived is read first: closing over unread bytes resets
		 * the connection, and the answer with it.
		 */
		for (i = 0;
		     i < 16 && recv(fd, drop, sizeof(drop), MSG_DONTWAIT) > 0;
		     i++)
			;
		(void)send(fd, busy, sizeof(busy) - 1,
		    MSG_DONTWAIT | MSG_NOSIGNAL);
		close(fd);
		return;
	}
	if ((mc = calloc(1, sizeof(*mc))) == NULL) {
		close(fd);
		return;
	}
	(void)evutil_make_socket_nonblocking(fd);
	mc->mc_bev =
	    bufferevent_socket_new(metrics_base, fd, BEV_OPT_CLOSE_ON_FREE);
	mc->mc_deadline = evtimer_new(metrics_base, metrics_deadline_cb, mc);
	if (mc->mc_bev == NULL || mc->mc_deadline == NULL ||
	    evtimer_add(mc->mc_deadline, &tv) == -1) {
		if (mc->mc_bev != NULL)
			bufferevent_free(mc->mc_bev);
		else
			close(fd);
		if (mc->mc_deadline != NULL)
			event_free(mc->mc_deadline);
		free(mc);
		return;
	}
	mc->mc_next = metrics_conns;
	metrics_conns = mc;
	metrics_nconns++;
	bufferevent_setcb(mc->mc_bev, metrics_read_cb, metrics_write_cb,
	    metrics_event_cb, mc);
	bufferevent_setwatermark(mc->mc_bev, EV_READ, 0, METRICS_MAX_HEADERS);
	bufferevent_enable(mc->mc_bev, EV_READ);
}

static unsigned int
metrics_port(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)ss)->sin_port);
	if (ss->ss_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
	return 0;
}

static void
metrics_resume_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	if (metrics_lev != NULL)
		evconnlistener_enable(metrics_lev);
}

/*
 * EMFILE and friends: stop accepting for a second rather than spin on a
 * connection that cannot be accepted (httpd, tmux).
 */
static void
metrics_accept_error_cb(struct evconnlistener *lev, void *arg)
{
	struct timeval tv = { 1, 0 };

	(void)arg;
	log_warn("metrics: accept");
	evconnlistener_disable(lev);
	if (metrics_pause != NULL)
		evtimer_add(metrics_pause, &tv);
}

int
metrics_listen(struct event_base *base, const char *listen, gid_t group,
    char *why, size_t whylen)
{
	struct sockaddr_storage ss;
	struct evconnlistener *lev = NULL;
	int sslen = (int)sizeof(ss);
	evutil_socket_t fd;

	metrics_init_once();
	if (metrics_lev != NULL) {
		snprintf(why, whylen, "metrics.listen: already listening");
		return -1;
	}
	metrics_base = base;

	if (strncmp(listen, "unix:", 5) == 0) {
		/* With a group, its members (a collector) may read too. */
		if ((fd = unixsock_listen(listen + 5,
			 group != (gid_t)-1 ? 0660 : 0600, (uid_t)-1, group,
			 why, whylen)) == -1)
			goto fail;
		if ((metrics_unix_path = strdup(listen + 5)) == NULL) {
			close(fd);
			unlink(listen + 5);
			snprintf(why, whylen, "metrics.listen: out of memory");
			goto fail;
		}
		lev = evconnlistener_new(base, metrics_accept_cb, NULL,
		    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, -1, fd);
		if (lev == NULL)
			close(fd);
	} else {
		memset(&ss, 0, sizeof(ss));
		if (evutil_parse_sockaddr_port(listen, (struct sockaddr *)&ss,
			&sslen) == -1 ||
		    strchr(listen, ':') == NULL || metrics_port(&ss) == 0) {
			snprintf(why, whylen,
			    "metrics.listen: %s: want host:port or unix:/path",
			    listen);
			goto fail;
		}
		lev = evconnlistener_new_bind(base, metrics_accept_cb, NULL,
		    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC |
			LEV_OPT_REUSEABLE,
		    -1, (struct sockaddr *)&ss, sslen);
	}
	if (lev == NULL) {
		snprintf(why, whylen, "metrics.listen: %s: %s", listen,
		    strerror(errno));
		goto fail;
	}
	metrics_lev = lev;
	if ((metrics_pause = evtimer_new(base, metrics_resume_cb, NULL)) ==
	    NULL) {
		snprintf(why, whylen, "metrics.listen: out of memory");
		goto fail;
	}
	evconnlistener_set_error_cb(lev, metrics_accept_error_cb);
	return 0;
fail:
	metrics_close();
	return -1;
}

void
metrics_close(void)
{
	if (metrics_pause != NULL)
		event_free(metrics_pause);
	metrics_pause = NULL;
	while (metrics_conns != NULL)
		metrics_conn_free(metrics_conns);
	if (metrics_lev != NULL)
		evconnlistener_free(metrics_lev);
	metrics_lev = NULL;
	if (metrics_unix_path != NULL) {
		unlink(metrics_unix_path);
		free(metrics_unix_path);
	}
	metrics_unix_path = NULL;
}

void
metrics_listen_enable(int on)
{
	if (metrics_lev == NULL)
		return;
	if (on)
		(void)evconnlistener_enable(metrics_lev);
	else
		(void)evconnlistener_disable(metrics_lev);
}
