/*
 * relay: listeners, client connections, the upstream leg and denials.
 */
#ifndef SLUICE_RELAY_H
#define SLUICE_RELAY_H

#include <sys/socket.h>

#include <stddef.h>
#include <stdint.h>

#include "proxy/config/config.h"
#include "proxy/http/reason.h"

struct event_base;
struct evbuffer;

/*
 * env.c: what the daemon shares with the parts it runs, handed to them
 * explicitly (relayd: a session reaches its configuration through what it
 * was accepted on). Owned by daemon.c; listener.c, conn.c, clients.c and
 * netguard.c keep a pointer and read the members when they need them, so
 * a member daemon.c opens or swaps later is seen there. pe_cf is the
 * current policy (borrowed): daemon.c swaps it at reload, and a request
 * takes a snapshot of it with config_ref(). pe_audit may be NULL (no
 * audit log yet, or a measurement build).
 */
struct audit;
struct revocations;
struct budget;
struct token_cache;

struct proxy_env {
	struct event_base *pe_base;
	struct config *pe_cf;
	struct upstreams *pe_ups;  /* pe_cf's upstream state */
	struct intercept *pe_icpt; /* NULL: no "intercept" section */
	struct audit *pe_audit;
	struct revocations *pe_revs;
	struct budget *pe_budget;
	struct token_cache *pe_cache;
	struct sbx_registry *pe_sbx; /* gateway: the sandboxes in force */
	/*
	 * revoked_file as the watcher (daemon) last read it, sorted; used
	 * instead of the policy's copy while pe_revfile_set.
	 */
	char **pe_revfile;
	size_t pe_nrevfile;
	int pe_revfile_set;
	int pe_draining; /* SIGTERM/SIGINT: no new connections */
};
/*
 * Wall clock, seconds: pe_base's cached time inside a callback. For what
 * the wall clock means: a token's iat/nbf/exp, a revocation's time, the
 * audit's ts. Never for a rate or an interval: the clock can be stepped.
 */
int64_t proxy_env_now(const struct proxy_env *);
/*
 * CLOCK_MONOTONIC in microseconds: rates and intervals (per_sandbox_rps),
 * which a step of the wall clock must not move (a step back of an hour
 * would otherwise hold a sandbox's bucket empty for that hour).
 */
int64_t proxy_env_mono_us(const struct proxy_env *);
/*
 * Whether jti is revoked: over the admin socket, or in revoked_file (the
 * watcher's latest reading of it, else cf's).
 */
int proxy_env_revoked(const struct proxy_env *, const struct config *cf,
    const char *jti);

/*
 * upstream.c: connections to upstreams. One struct upstreams per loaded
 * policy, holding a reference on it: a struct upstream per route (DNS
 * cache, idle pool, TLS session), kept out of the immutable policy. One
 * struct upconn per connection.
 */
struct upstreams;
struct upconn;
struct bufferevent;
/*
 * Called once when a new connection is ready (uc, REASON_OK) or failed
 * (NULL, reason: the upconn is already freed). Never called from inside
 * upstream_get().
 */
typedef void upconn_cb(struct upconn *uc, enum reason r, void *arg);
/*
 * Called with freshly resolved, allowed addresses of host (port in each
 * address too), a destination of rt, before any connect to them.
 */
typedef void
upstream_resolved_cb(const struct route *rt, const char *host, uint16_t port,
    const struct sockaddr_storage *addrs, size_t n, uint32_t ttl);
int upstream_init(struct event_base *, char *why, size_t whylen);
void upstream_on_resolved(upstream_resolved_cb *);
/*
 * Privilege separation (a forked engine): names are not resolved here but
 * asked of the parent, cb(host, port, id) returning 0 once asked (-1: the
 * resolution fails at once); the answer, the allowed addresses the kernel
 * set now holds (their ports are set here), comes back through
 * upstream_remote_answer(id, ...), with the reason none is allowed when
 * n is 0. An answer for an upstream freed since is dropped.
 */
typedef int upstream_remote_cb(const char *host, uint16_t port, uint64_t id);
void upstream_on_remote(upstream_remote_cb *);
void upstream_remote_answer(uint64_t id, const struct sockaddr_storage *addrs,
    size_t n, uint32_t ttl, enum reason empty);
/*
 * The runtime state of every route of cf (which it references until the
 * last upstreams_unref()). NULL when out of memory.
 */
struct upstreams *upstreams_new(struct config *cf);
struct upstreams *upstreams_ref(struct upstreams *);
void upstreams_unref(struct upstreams *);
/*
 * Get a connection to rt's upstream: raw TCP with UPSTREAM_TUNNEL, else TLS
 * for https URLs; UPSTREAM_FRESH never takes one from the pool. Returns 0
 * with *out an idle pooled connection ready to use (cb is not called), 1
 * with *out pending (cb is called later; cancel with upconn_cancel), or -1.
 * The caller owns *out until it releases it.
 */
#define UPSTREAM_TUNNEL  0x1
#define UPSTREAM_FRESH   0x2
#define UPSTREAM_RESOLVE 0x4 /* no connection: cb(NULL, OK) once resolved */
#define UPSTREAM_TLS     0x8 /* an allowlist route's host, over TLS */
int upstream_get(struct upstreams *, const struct route *rt, int flags,
    upconn_cb *cb, void *arg, struct upconn **out);
/*
 * The same to host:port for an allowlist route (upstream.mode
 * as_requested; host normalized, IPv6 without brackets), pooled by
 * destination; ignored for a fixed upstream. At most 256 destinations
 * per policy are kept (the least recently used idle one goes).
 */
int
upstream_get_to(struct upstreams *, const struct route *rt, const char *host,
    uint16_t port, int flags, upconn_cb *cb, void *arg, struct upconn **out);
void upconn_cancel(struct upconn *);
/*
 * Whether sa's address (the port aside) is one of rt's upstream's
 * resolved, allowed addresses: 1 or 0; -1 when there is no fresh
 * resolution (upstream_get() with UPSTREAM_RESOLVE makes one).
 */
int upstream_has_addr(struct upstreams *, const struct route *rt,
    const struct sockaddr *sa);
/* Give a connection back: to the pool if reusable and clean, else close. */
void upconn_release(struct upconn *, int reusable);
struct bufferevent *upconn_bev(const struct upconn *);
/* Non-zero for a TLS connection (its bufferevent writes via OpenSSL). */
int upconn_tls(const struct upconn *);
/* "addr:port" of the connected address, for the audit log. */
int upconn_addr(const struct upconn *, char *buf, size_t len);

/*
 * intercept.c: the local CA, leaf cache and server SSL_CTX of intercepted
 * tunnels, made at start from cf's "intercept" section (NULL with why).
 * intercept_check() says whether every intercepted host of cf can be
 * signed for (a reload's policy): 0, or -1 with why.
 */
struct intercept;
struct ssl_st;
struct certs_cache_stats;
struct intercept *
intercept_new(const struct config *cf, char *why, size_t whylen);
void intercept_free(struct intercept *);
int intercept_check(const struct intercept *, const struct config *cf,
    char *why, size_t whylen);
/* A server-side SSL for a tunnel to host (its CONNECT's), or NULL. */
struct ssl_st *
intercept_ssl(struct intercept *, const char *host, char *why, size_t whylen);
void intercept_stats(const struct intercept *, struct certs_cache_stats *);

/*
 * listener.c: the listening sockets, bound once at start (a reload cannot
 * rebind: listener addresses must stay the same), accept with EMFILE
 * back-off and the max_connections limit. fds, when not NULL, holds a
 * socket per cf_listeners entry, bound and listening already (sluice exec
 * makes them inside the sandbox's namespace); they are owned from here on.
 */
int
listener_open_all(struct proxy_env *, const int *fds, char *why, size_t whylen);
void listener_enable_all(int on);
/*
 * In the engine at place pos of `workers`: close the sockets of the
 * other places' shards (with several workers, each listener is a
 * SO_REUSEPORT socket per worker; the parent keeps every one).
 */
void listener_keep_shard(unsigned pos, unsigned workers);
void listener_close_all(void);
/* Non-zero when the policy's listeners are those bound (for reloads). */
int listener_same(const struct config *);

/*
 * conn.c: one client connection: its state, accept, drain and close; with
 * head.c (request heads, the decision, admission), exchange.c (bodies and
 * the upstream leg), tunnel.c (CONNECT tunnels) and respond.c (denials and
 * the audit line), which share conn_int.h.
 */
/*
 * The options of every TCP socket that carries a client's or an
 * upstream's bytes: TCP_NODELAY, and TCP_NOTSENT_LOWAT at CONN_NOTSENT_LOWAT.
 * Set on listening sockets, they pass to every connection accepted.
 */
void conn_sock_tune(int fd);
/*
 * Takes fd (closed on failure); the conn keeps env. Returns 0, or -1 out
 * of memory.
 */
int conn_accept(struct proxy_env *, int fd, size_t listener_idx,
    const struct sockaddr *peer, socklen_t peerlen);
/*
 * Refuse a connection over max_connections (kind CONN_REFUSE_ALL), over
 * per_client_connections (CONN_REFUSE_CLIENT) or over
 * per_sandbox_connections (CONN_REFUSE_SANDBOX) with a 503, and close it.
 */
#define CONN_REFUSE_ALL     0
#define CONN_REFUSE_CLIENT  1
#define CONN_REFUSE_SANDBOX 2
void conn_refuse(struct proxy_env *, int fd, size_t listener_idx,
    const struct sockaddr *peer, int kind);
/*
 * Gateway mode: non-zero when peer's sandbox has per_sandbox_connections
 * open (a source that is no sandbox is refused per request instead).
 */
int conn_sandbox_full(const struct proxy_env *, const struct sockaddr *peer);
size_t conn_count(void);
/* Stop keep-alive: idle connections close now, busy ones after. */
void conn_drain(void);
/*
 * End of drain_timeout: requests with no response yet get a 503
 * drain_timeout, the rest is cut; returns how many 503s are being written.
 */
size_t conn_drain_cut(void);
/* Close every connection now (end of drain_timeout, or at exit). */
void conn_close_all(void);

/*
 * deny.c: the response to a denial. deny_clean() copies len bytes of a
 * value from the sandbox into dst as printable ASCII (others become '?'),
 * cut to cap - 1 bytes ending in "..." when longer; returns its length.
 */
#define DENY_MSG_MAX 400 /* bytes of a denial's message */
size_t deny_clean(char *dst, size_t cap, const char *s, size_t len);
/* Append the whole response; msg is printable ASCII. Returns 0 or -1. */
int deny_write(struct evbuffer *out, enum reason r, int reverse, int close,
    const char *msg, const char *id);

/*
 * clients.c: state per client address (the port aside): open connections,
 * the refusal budget and the aggregation of repeated refusals in the
 * audit log. Fixed-size or bounded by the open connections.
 */
#define CLIENTS_ID_LEN 24 /* a request id and its NUL */
/* Aggregate lines go to env's audit writer, timed on its base. */
void clients_init(const struct proxy_env *);
uint64_t clients_conns(const struct sockaddr *);
int clients_conn_add(const struct sockaddr *); /* -1: out of memory */
void clients_conn_del(const struct sockaddr *);
/* Charge one refusal at now (seconds); 1 when over limit (0: no limit). */
int clients_refusal(const struct sockaddr *, int64_t now, uint64_t limit);
/* One refusal as its audit line would show it (strings may be NULL). */
struct clients_refusal {
	const struct sockaddr *cr_peer;
	int cr_connect; /* connect.tunnel, else http.request */
	int cr_via;     /* inside an intercepted CONNECT ("via") */
	enum reason cr_reason;
	int cr_status;
	const char *cr_id, *cr_client, *cr_listener, *cr_route, *cr_sub,
	    *cr_jti, *cr_method, *cr_host, *cr_path;
	const char *cr_sandbox; /* gateway: the source's sandbox id */
};
/*
 * 1: write this refusal's line now (the first of its kind); 0: it repeats
 * one written before and is counted into the aggregate line written once
 * a second with its count.
 */
int clients_aggregate(const struct clients_refusal *);
/* Write every pending aggregate line and stop the timer (at exit). */
void clients_flush(void);
/* A new request id: unique in this process, unlikely to repeat across. */
void clients_next_id(char *buf, size_t len);

#endif
