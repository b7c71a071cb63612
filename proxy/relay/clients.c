/*
 * Per-client-address state (DESIGN.md "Responses to denials", issue 8 F
 * and 14): open connections per address (limits.per_client_connections),
 * a budget of refusals per second (limits.per_client_refusals_per_s), and
 * the aggregation of repeated identical refusals into one audit line per
 * second with a count, as net.drop does.
 *
 * Memory is bounded: connection counts exist only for addresses with an
 * open connection (so at most max_connections of them); the refusal and
 * aggregation tables have a fixed size and evict. Hashes are keyed with a
 * random seed so that a client cannot pick colliding addresses.
 */
#include <sys/socket.h>

#include <netinet/in.h>

#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <openssl/rand.h>

#include "proxy/config/config.h"
#include "proxy/dns/resolve.h"
#include "proxy/http/http1.h"
#include "proxy/ops/ops.h"
#include "proxy/policy/policy.h"
#include "proxy/relay/relay.h"
#include "proxy/token/store.h"
#include "proxy/util/util.h"

#define CL_CONN_BUCKETS 1024
#define CL_RATE_SETS    256 /* sets of CL_WAYS slots */
#define CL_AGG_SETS     32
#define CL_WAYS         8
#define CL_STR          129 /* route, sub, jti, listener */
#define CL_LONG         257 /* host, path */

struct cl_addr {
	unsigned char ca_b[16];
	unsigned char ca_fam; /* 0: unused slot */
};

struct cl_conn {
	struct cl_conn *cc_next;
	struct cl_addr cc_addr;
	uint64_t cc_n;
};

struct cl_rate {
	struct cl_addr cr_addr;
	int64_t cr_sec;
	uint64_t cr_n;
};

struct cl_agg {
	int ag_used;
	int ag_hit; /* a refusal since the last tick */
	uint32_t ag_hash;
	struct cl_addr ag_addr;
	int ag_connect;
	int ag_via; /* inside an intercepted CONNECT */
	enum reason ag_reason;
	int ag_status;
	uint64_t ag_count; /* repeats since the last line */
	char ag_id[CLIENTS_ID_LEN];
	char ag_client[ADDR_STR_LEN];
	char ag_listener[CL_STR];
	char ag_route[CL_STR];
	char ag_sub[CL_STR];
	char ag_jti[CL_STR];
	char ag_method[24];
	char ag_host[CL_LONG];
	char ag_path[CL_LONG];
	char ag_sandbox[SANDBOX_ID_MAX + 1];
	int ag_has_route, ag_has_host, ag_has_path;
};

static struct cl_conn *cl_conns[CL_CONN_BUCKETS];
static struct cl_rate cl_rates[CL_RATE_SETS][CL_WAYS];
static struct cl_agg cl_aggs[CL_AGG_SETS][CL_WAYS];
static size_t cl_naggs;
static const struct proxy_env *cl_env; /* NULL: nothing aggregated */
static struct event *cl_tick;
static uint64_t cl_seed[2];
static int cl_seeded;

static void
cl_seed_once(void)
{
	if (cl_seeded)
		return;
	/* A fixed seed only weakens the spreading, never a decision. */
	if (RAND_bytes((unsigned char *)cl_seed, sizeof(cl_seed)) != 1)
		cl_seed[0] = cl_seed[1] = 0x9e3779b97f4a7c15ULL;
	cl_seeded = 1;
}

/* FNV-1a over the bytes, started from the seed, then mixed. */
static uint32_t
cl_hash(const void *p, size_t len, uint32_t h0)
{
	const unsigned char *b = p;
	uint64_t h = cl_seed[0] ^ h0;
	size_t i;

	for (i = 0; i < len; i++) {
		h ^= b[i];
		h *= 0x100000001b3ULL;
	}
	h ^= cl_seed[1];
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	return (uint32_t)h;
}

static uint32_t
cl_hash_str(const char *s, uint32_t h0)
{
	return s == NULL ? cl_hash("", 1, h0) : cl_hash(s, strlen(s) + 1, h0);
}

/* The address without its port; IPv4-mapped IPv6 counts as IPv4. */
static int
cl_key(const struct sockaddr *sa, struct cl_addr *k)
{
	static const unsigned char mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		0xff, 0xff };

	memset(k, 0, sizeof(*k));
	if (sa == NULL)
		return -1;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;

		memcpy(k->ca_b, &s4->sin_addr, 4);
		k->ca_fam = 4;
		return 0;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;

		if (memcmp(&s6->sin6_addr, mapped, 12) == 0) {
			memcpy(k->ca_b,
			    (const unsigned char *)&s6->sin6_addr + 12, 4);
			k->ca_fam = 4;
		} else {
			memcpy(k->ca_b, &s6->sin6_addr, 16);
			k->ca_fam = 6;
		}
		return 0;
	}
	return -1;
}

static int
cl_addr_eq(const struct cl_addr *a, const struct cl_addr *b)
{
	return a->ca_fam == b->ca_fam && memcmp(a->ca_b, b->ca_b, 16) == 0;
}

/*
 * Open connections.
 */
static struct cl_conn **
cl_conn_find(const struct cl_addr *k)
{
	struct cl_conn **pp;

	pp = &cl_conns[cl_hash(k, sizeof(*k), 1) % CL_CONN_BUCKETS];
	while (*pp != NULL && !cl_addr_eq(&(*pp)->cc_addr, k))
		pp = &(*pp)->cc_next;
	return pp;
}

uint64_t
clients_conns(const struct sockaddr *sa)
{
	struct cl_addr k;
	struct cl_conn **pp;

	cl_seed_once();
	if (cl_key(sa, &k) == -1)
		return 0;
	pp = cl_conn_find(&k);
	return *pp != NULL ? (*pp)->cc_n : 0;
}

int
clients_conn_add(const struct sockaddr *sa)
{
	struct cl_addr k;
	struct cl_conn **pp;

	cl_seed_once();
	if (cl_key(sa, &k) == -1)
		return 0; /* not an IP client (cannot happen): not counted */
	pp = cl_conn_find(&k);
	if (*pp == NULL) {
		if ((*pp = calloc(1, sizeof(**pp))) == NULL)
			return -1;
		(*pp)->cc_addr = k;
	}
	(*pp)->cc_n++;
	return 0;
}

void
clients_conn_del(const struct sockaddr *sa)
{
	struct cl_addr k;
	struct cl_conn **pp, *e;

	if (cl_key(sa, &k) == -1)
		return;
	pp = cl_conn_find(&k);
	if ((e = *pp) == NULL)
		return;
	if (--e->cc_n == 0) {
		*pp = e->cc_next;
		free(e);
	}
}

/*
 * The refusal budget.
 */
int
clients_refusal(const struct sockaddr *sa, int64_t now, uint64_t limit)
{
	struct cl_addr k;
	struct cl_rate *set, *e = NULL;
	size_t i;

	cl_seed_once();
	if (limit == 0 || cl_key(sa, &k) == -1)
		return 0;
	set = cl_rates[cl_hash(&k, sizeof(k), 2) % CL_RATE_SETS];
	for (i = 0; i < CL_WAYS && e == NULL; i++)
		if (cl_addr_eq(&set[i].cr_addr, &k))
			e = &set[i];
	if (e == NULL) {
		/* An empty or stale slot, else the least refused one. */
		e = &set[0];
		for (i = 0; i < CL_WAYS; i++) {
			if (set[i].cr_addr.ca_fam == 0 ||
			    set[i].cr_sec != now) {
				e = &set[i];
				break;
			}
			if (set[i].cr_n < e->cr_n)
				e = &set[i];
		}
		e->cr_addr = k;
		e->cr_sec = now;
		e->cr_n = 0;
	}
	if (e->cr_sec != now) {
		e->cr_sec = now;
		e->cr_n = 0;
	}
	if (e->cr_n < UINT64_MAX)
		e->cr_n++;
	return e->cr_n > limit;
}

/*
 * Aggregation of identical refusals.
 */
static void
cl_copy(char *dst, size_t cap, const char *s, int *has)
{
	if (has != NULL)
		*has = s != NULL;
	snprintf(dst, cap, "%s", s != NULL ? s : "");
}

static void
cl_agg_write(struct cl_agg *e)
{
	struct audit *a = cl_env != NULL ? cl_env->pe_audit : NULL;

	if (e->ag_count == 0 || a == NULL) {
		e->ag_count = 0;
		return;
	}
	audit_begin(a, e->ag_connect ? "connect.tunnel" : "http.request");
	audit_add_cstr(a, "id", e->ag_id);
	audit_add_cstr(a, "decision", "deny");
	audit_add_cstr(a, "reason", reason_name(e->ag_reason));
	audit_add_cstr(a, "listener", e->ag_listener);
	audit_add_cstr(a, "client", e->ag_client);
	if (e->ag_sandbox[0] != '\0')
		audit_add_cstr(a, "sandbox", e->ag_sandbox);
	if (e->ag_has_route)
		audit_add_cstr(a, "route", e->ag_route);
	if (e->ag_via)
		audit_add_cstr(a, "via", "connect");
	if (e->ag_sub[0] != '\0')
		audit_add_cstr(a, "sub", e->ag_sub);
	if (e->ag_jti[0] != '\0')
		audit_add_cstr(a, "jti", e->ag_jti);
	if (e->ag_method[0] != '\0')
		audit_add_cstr(a, "method", e->ag_method);
	if (e->ag_has_host)
		audit_add_cstr(a, "host", e->ag_host);
	if (e->ag_has_path)
		audit_add_cstr(a, "path", e->ag_path);
	audit_add_int(a, "status", e->ag_status);
	audit_add_uint(a, "count", e->ag_count);
	(void)audit_commit(a);
	e->ag_count = 0;
}

static void
cl_agg_drop(struct cl_agg *e)
{
	if (!e->ag_used)
		return;
	cl_agg_write(e);
	memset(e, 0, sizeof(*e));
	cl_naggs--;
}

static void
cl_tick_cb(evutil_socket_t fd, short what, void *arg)
{
	size_t s, w;

	(void)fd;
	(void)what;
	(void)arg;
	for (s = 0; s < CL_AGG_SETS; s++)
		for (w = 0; w < CL_WAYS; w++) {
			struct cl_agg *e = &cl_aggs[s][w];

			if (!e->ag_used)
				continue;
			cl_agg_write(e);
			if (!e->ag_hit)
				cl_agg_drop(e);
			else
				e->ag_hit = 0;
		}
	if (cl_naggs == 0 && cl_tick != NULL)
		evtimer_del(cl_tick);
}

static int
cl_agg_match(const struct cl_agg *e, uint32_t h, const struct cl_addr *k,
    const struct clients_refusal *r)
{
#define SEQ(f, v) (strncmp(e->f, (v) != NULL ? (v) : "", sizeof(e->f) - 1) == 0)
	return e->ag_used && e->ag_hash == h && cl_addr_eq(&e->ag_addr, k) &&
	    e->ag_connect == r->cr_connect && e->ag_via == r->cr_via &&
	    e->ag_reason == r->cr_reason && e->ag_status == r->cr_status &&
	    SEQ(ag_listener, r->cr_listener) && SEQ(ag_route, r->cr_route) &&
	    SEQ(ag_sub, r->cr_sub) && SEQ(ag_jti, r->cr_jti) &&
	    SEQ(ag_method, r->cr_method) && SEQ(ag_host, r->cr_host) &&
	    SEQ(ag_path, r->cr_path) && SEQ(ag_sandbox, r->cr_sandbox) &&
	    e->ag_has_route == (r->cr_route != NULL) &&
	    e->ag_has_host == (r->cr_host != NULL) &&
	    e->ag_has_path == (r->cr_path != NULL);
#undef SEQ
}

/* The key's strings, as they are kept (cut to the slot sizes). */
static uint32_t
cl_agg_hash(const struct cl_addr *k, const struct clients_refusal *r)
{
	char host[CL_LONG], path[CL_LONG];
	uint32_t h;

	snprintf(host, sizeof(host), "%s", r->cr_host ? r->cr_host : "");
	snprintf(path, sizeof(path), "%s", r->cr_path ? r->cr_path : "");
	h = cl_hash(k, sizeof(*k), 3);
	h = cl_hash(&r->cr_reason, sizeof(r->cr_reason), h);
	h = cl_hash_str(host, h);
	h = cl_hash_str(path, h);
	h = cl_hash_str(r->cr_sub, h);
	return h;
}

int
clients_aggregate(const struct clients_refusal *r)
{
	struct cl_addr k;
	struct cl_agg *set, *e = NULL;
	uint32_t h;
	size_t i;

	cl_seed_once();
	if (cl_key(r->cr_peer, &k) == -1)
		return 1;
	h = cl_agg_hash(&k, r);
	set = cl_aggs[h % CL_AGG_SETS];
	for (i = 0; i < CL_WAYS; i++)
		if (cl_agg_match(&set[i], h, &k, r)) {
			e = &set[i];
			break;
		}
	if (e != NULL) {
		/* A repeat: counted, written with the next tick. */
		if (e->ag_count == 0)
			snprintf(e->ag_id, sizeof(e->ag_id), "%s", r->cr_id);
		e->ag_count++;
		e->ag_hit = 1;
		return 0;
	}
	if (cl_env == NULL || cl_env->pe_base == NULL)
		return 1;
	if (cl_tick == NULL &&
	    (cl_tick = event_new(cl_env->pe_base, -1, EV_PERSIST, cl_tick_cb,
		 NULL)) == NULL)
		return 1; /* not aggregated: every line is written */
	/* The first of its kind is written now; remember it for repeats. */
	e = &set[0];
	for (i = 0; i < CL_WAYS; i++) {
		if (!set[i].ag_used) {
			e = &set[i];
			break;
		}
		if (set[i].ag_count < e->ag_count)
			e = &set[i];
	}
	cl_agg_drop(e);
	e->ag_used = 1;
	e->ag_hit = 1;
	e->ag_hash = h;
	e->ag_addr = k;
	e->ag_connect = r->cr_connect;
	e->ag_via = r->cr_via;
	e->ag_reason = r->cr_reason;
	e->ag_status = r->cr_status;
	cl_copy(e->ag_client, sizeof(e->ag_client), r->cr_client, NULL);
	cl_copy(e->ag_listener, sizeof(e->ag_listener), r->cr_listener, NULL);
	cl_copy(e->ag_route, sizeof(e->ag_route), r->cr_route,
	    &e->ag_has_route);
	cl_copy(e->ag_sub, sizeof(e->ag_sub), r->cr_sub, NULL);
	cl_copy(e->ag_jti, sizeof(e->ag_jti), r->cr_jti, NULL);
	cl_copy(e->ag_method, sizeof(e->ag_method), r->cr_method, NULL);
	cl_copy(e->ag_host, sizeof(e->ag_host), r->cr_host, &e->ag_has_host);
	cl_copy(e->ag_path, sizeof(e->ag_path), r->cr_path, &e->ag_has_path);
	cl_copy(e->ag_sandbox, sizeof(e->ag_sandbox), r->cr_sandbox, NULL);
	cl_naggs++;
	if (!evtimer_pending(cl_tick, NULL)) {
		struct timeval tv = { 1, 0 };

		evtimer_add(cl_tick, &tv);
	}
	return 1;
}

void
clients_init(const struct proxy_env *env)
{
	cl_seed_once();
	cl_env = env;
}

void
clients_flush(void)
{
	size_t s, w;

	for (s = 0; s < CL_AGG_SETS; s++)
		for (w = 0; w < CL_WAYS; w++)
			cl_agg_drop(&cl_aggs[s][w]);
	if (cl_tick != NULL)
		event_free(cl_tick);
	cl_tick = NULL;
}

void
clients_next_id(char *buf, size_t len)
{
	static uint32_t boot;
	static uint64_t n;

	if (boot == 0 &&
	    (RAND_bytes((unsigned char *)&boot, sizeof(boot)) != 1 ||
		boot == 0))
		boot = 1;
	snprintf(buf, len, "%08x%012llx", boot,
	    (unsigned long long)(++n & 0xffffffffffffULL));
}
