/*
 * The sluice daemon and CLI: shared types and the prototypes of every
 * proxy/ file, grouped under a comment naming the file (relayd.h style).
 * The pure pieces have headers of their own so that fuzz targets and unit
 * tests can use them alone: reason.h, http1.h, token.h.
 */
#ifndef SLUICE_PROXY_H
#define SLUICE_PROXY_H

#include <sys/types.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "proxy/http1.h"
#include "proxy/reason.h"
#include "proxy/token.h"

#define SL_PRINTF(a, b) __attribute__((__format__(__printf__, a, b)))
#define SL_FALLTHROUGH  __attribute__((__fallthrough__))
#define SL_UNUSED       __attribute__((__unused__))
#define SL_NORETURN     __attribute__((__noreturn__))
#define SL_NELEM(a)     (sizeof(a) / sizeof((a)[0]))

struct event_base;
struct evbuffer;
struct upstream;
struct route;
struct config;

/* Exit codes (DESIGN.md "Command line"). */
#define SL_EXIT_OK      0
#define SL_EXIT_INVALID 1 /* invalid input, verification failed */
#define SL_EXIT_USAGE   2
#define SL_EXIT_RUNTIME 3 /* cannot bind, cannot apply rules */

/* A duration in milliseconds (limits are) as a struct timeval. */
static inline struct timeval
sl_ms_tv(uint64_t ms)
{
	struct timeval tv;

	tv.tv_sec = (time_t)(ms / 1000);
	tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
	return tv;
}

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
	struct audit *pe_audit;
	struct revocations *pe_revs;
	struct budget *pe_budget;
	struct token_cache *pe_cache;
	int pe_draining; /* SIGTERM/SIGINT: no new connections */
};
/* Wall clock, seconds: pe_base's cached time inside a callback. */
int64_t proxy_env_now(const struct proxy_env *);

/* addr.c: "addr:port" text of an IPv4 or IPv6 socket address. */
#define ADDR_STR_LEN 56 /* enough for "[v6]:port" and the NUL */
size_t addr_str(const struct sockaddr *, char *buf, size_t len);

/*
 * digest.c: SHA-256 with the algorithm fetched once (hot paths). Returns
 * 0, or -1 with out zeroed.
 */
int digest_sha256(const void *p, size_t n, unsigned char out[32]);

/*
 * upstream.c: connections to upstreams. One struct upstream per route of a
 * loaded policy (DNS cache, idle pool, TLS session), one struct upconn per
 * connection.
 */
struct upconn;
struct bufferevent;
/*
 * Called once when a new connection is ready (uc, REASON_OK) or failed
 * (NULL, reason: the upconn is already freed). Never called from inside
 * upstream_get().
 */
typedef void upconn_cb(struct upconn *uc, enum reason r, void *arg);
/* Called with a route's freshly resolved, allowed addresses. */
typedef void upstream_resolved_cb(const struct route *rt,
    const struct sockaddr_storage *addrs, size_t n, uint32_t ttl);
int upstream_init(struct event_base *, char *why, size_t whylen);
void upstream_on_resolved(upstream_resolved_cb *);
/* Create the runtime state of every route of cf. 0 or -1. */
int upstream_attach(struct config *cf);
void upstream_free(struct upstream *);
/*
 * Get a connection to rt's upstream: raw TCP with UPSTREAM_TUNNEL, else TLS
 * for https URLs; UPSTREAM_FRESH never takes one from the pool. Returns 0
 * with *out an idle pooled connection ready to use (cb is not called), 1
 * with *out pending (cb is called later; cancel with upconn_cancel), or -1.
 * The caller owns *out until it releases it.
 */
#define UPSTREAM_TUNNEL 0x1
#define UPSTREAM_FRESH  0x2
int upstream_get(struct config *cf, const struct route *rt, int flags,
    upconn_cb *cb, void *arg, struct upconn **out);
void upconn_cancel(struct upconn *);
/* Give a connection back: to the pool if reusable and clean, else close. */
void upconn_release(struct upconn *, int reusable);
struct bufferevent *upconn_bev(const struct upconn *);
/* Non-zero for a TLS connection (its bufferevent writes via OpenSSL). */
int upconn_tls(const struct upconn *);
/* "addr:port" of the connected address, for the audit log. */
int upconn_addr(const struct upconn *, char *buf, size_t len);

/*
 * resolve.c: the stub resolver for upstream names (DESIGN.md "Resolving
 * upstream names safely"): per query a fresh UDP socket connected to port
 * 53 of a configured server, a random id and 0x20 case bits, TCP when the
 * answer is truncated, 2 attempts of 2 s rotating over the servers. Answers
 * that fail dnsmsg_parse() are ignored. Sockets are made per query, so
 * they carry the uid sluice has then (after the privilege drop).
 */
#define RESOLVE_MAX_SERVERS 16
#define RESOLVE_MAX_ADDRS   16 /* addresses one answer gives at most */

enum resolve_status {
	RESOLVE_OK = 0,   /* an answer (n may be 0: no record of the type) */
	RESOLVE_NXDOMAIN, /* the name does not exist */
	RESOLVE_FAIL      /* no valid answer in time, or no server */
};
struct resolve_req;
/*
 * A query's result: addrs holds n addresses (4 bytes each for A, 16 for
 * AAAA), ttl the smallest TTL of the records used. The request is already
 * freed when this runs; it never runs inside resolve_start().
 */
typedef void resolve_cb(enum resolve_status, const unsigned char (*addrs)[16],
    size_t n, uint32_t ttl, void *arg);
int resolve_init(struct event_base *);
/*
 * Use cf's netpolicy.resolvers (port 53), or when there are none the
 * nameserver lines of /etc/resolv.conf. Returns 0, or -1 with why set
 * (the servers in use then stay).
 */
int resolve_configure(const struct config *cf, char *why, size_t whylen);
/* Use these servers (address and port; tests). At most RESOLVE_MAX_SERVERS. */
void resolve_set_servers(const struct sockaddr_storage *, size_t n);
/* The nameserver lines of a resolv.conf file (port 53). 0 or -1. */
int resolve_conf_read(const char *path, struct sockaddr_storage *out,
    size_t max, size_t *n);
/*
 * Ask for name's A or AAAA records (DNSMSG_QTYPE_*). Returns the request
 * (cb runs once, later, unless it is cancelled), or NULL out of memory.
 */
struct resolve_req *
resolve_start(const char *name, uint16_t qtype, resolve_cb *cb, void *arg);
/* Stop a request and free it: its callback will not run. NULL is a no-op. */
void resolve_cancel(struct resolve_req *);
/* Free every request left (at exit), without callbacks. */
void resolve_shutdown(void);

/*
 * Subcommands (main.c dispatches): each takes the arguments after its own
 * name and returns an exit code.
 */
int cmd_run(int argc, char **argv);       /* daemon.c */
int cmd_check(int argc, char **argv);     /* daemon.c */
int cmd_netpolicy(int argc, char **argv); /* cmd_netpolicy.c */
int cmd_token(int argc, char **argv);     /* cmd_token.c */
int cmd_audit(int argc, char **argv);     /* cmd_audit.c */
int cmd_certs(int argc, char **argv);     /* cmd_certs.c */

/* log.c */
void log_init(const char *progname, int verbose);
void log_warn(const char *, ...) SL_PRINTF(1, 2);
void log_warnx(const char *, ...) SL_PRINTF(1, 2);
void log_info(const char *, ...) SL_PRINTF(1, 2);
void log_debug(const char *, ...) SL_PRINTF(1, 2);
SL_NORETURN void fatal(const char *, ...) SL_PRINTF(1, 2);
SL_NORETURN void fatalx(const char *, ...) SL_PRINTF(1, 2);
/* Append the drained OpenSSL error queue to buf (never empty on return). */
void log_ssl_errors(char *buf, size_t len);

/*
 * config.c: the policy file (DESIGN.md "Policy file"). A loaded policy is
 * an immutable, refcounted snapshot: requests keep the snapshot they
 * started with, and SIGHUP swaps the daemon's pointer.
 */
enum listener_type {
	LISTENER_FORWARD = 1, /* absolute-form and CONNECT */
	LISTENER_REVERSE      /* origin-form, bound to one route */
};

struct listener_conf {
	char lc_name[64];
	enum listener_type lc_type;
	char lc_listen[128]; /* as written in the policy */
	struct sockaddr_storage lc_addr;
	socklen_t lc_addrlen;
	char lc_route[TOKEN_MAX_STR + 1]; /* reverse: the route's audience */
	size_t lc_route_idx;              /* reverse: index into cf_routes */
};

/* A header sluice adds to every forwarded request; the value is secret. */
struct upstream_header {
	char *uh_name;
	char *uh_file;
	unsigned char *uh_value; /* wiped on free */
	size_t uh_value_len;
};

struct upstream_conf {
	char *uc_url;
	int uc_https;  /* scheme is https */
	char *uc_host; /* lower case; IPv6 without brackets */
	int uc_host_is_ip;
	uint16_t uc_port;
	char *uc_authority;           /* Host value sent upstream */
	char *uc_path;                /* URL path without trailing '/' */
	char *uc_ca_file;             /* NULL: the system store */
	unsigned char (*uc_pins)[32]; /* SPKI SHA-256 pins */
	size_t uc_npins;
	int uc_allow_private;
	int uc_allow_plaintext;
	struct upstream_header *uc_headers;
	size_t uc_nheaders;
	struct ssl_ctx_st *uc_ssl_ctx; /* https: verification context */
};

struct route {
	char *rt_audience;
	char **rt_hosts;
	size_t rt_nhosts;
	char **rt_methods;
	size_t rt_nmethods;
	char **rt_prefixes;
	size_t rt_nprefixes;
	uint64_t rt_max_requests; /* per token; 0: no route limit */
	int rt_connect;           /* CONNECT allowed */
	int rt_intercept;         /* terminate TLS inside CONNECT */
	struct upstream_conf rt_up;
	struct upstream *rt_upstream; /* runtime state, see upstream.c */
};

struct limits {
	uint64_t max_header_bytes;
	uint64_t max_headers;
	uint64_t max_body_bytes;
	uint64_t max_connections;
	uint64_t header_timeout_ms;
	uint64_t idle_timeout_ms;
	uint64_t connect_timeout_ms;
	uint64_t upstream_response_timeout_ms;
	uint64_t drain_timeout_ms;
	uint64_t per_client_connections;    /* open connections per address */
	uint64_t per_client_refusals_per_s; /* then 429 rate_limited; 0: off */
};

enum audit_fsync {
	AUDIT_FSYNC_INTERVAL = 0, /* at most once a second */
	AUDIT_FSYNC_ALWAYS,       /* before each response/forward */
	AUDIT_FSYNC_NEVER
};

struct audit_conf {
	char *ac_path;
	enum audit_fsync ac_fsync;
	int ac_chain;
	int ac_on_error_allow; /* on_error: "allow" */
};

enum netpolicy_mode { NETPOLICY_OFF = 0, NETPOLICY_SIDECAR, NETPOLICY_GATEWAY };

struct netpolicy_conf {
	enum netpolicy_mode np_mode;
	char np_table[64];
	int np_allow_loopback;
	char **np_resolvers; /* IP literals */
	size_t np_nresolvers;
	uint16_t np_log_group;
	char **np_ifaces; /* sandbox_interfaces patterns */
	size_t np_nifaces;
	int np_flush_on_exit;
};

struct tokens_conf {
	char *tc_issuer; /* NULL: not checked */
	int64_t tc_leeway_s;
	int64_t tc_max_ttl_s;
	struct token_key *tc_keys;
	size_t tc_nkeys;
	char **tc_key_files; /* per key, for "check" output */
	int *tc_key_unlink;  /* per key: unlink_after_read */
	int *tc_key_fresh;   /* per key: read from its file by this load */
	char *tc_revoked_file;
	struct token_rules tc_rules; /* views of the fields above */
};

struct config {
	int cf_refs;
	uint64_t cf_gen; /* bumps at every successful load */
	char *cf_path;
	unsigned char cf_sha256[32]; /* of the policy file's bytes */
	char *cf_user;               /* NULL: do not change user */
	uid_t cf_uid;
	gid_t cf_gid;
	struct listener_conf *cf_listeners;
	size_t cf_nlisteners;
	struct tokens_conf cf_tokens;
	struct route *cf_routes;
	size_t cf_nroutes;
	struct limits cf_limits;
	struct audit_conf cf_audit;
	struct netpolicy_conf cf_np;
	char *cf_admin_socket;   /* NULL: none */
	char *cf_metrics_listen; /* NULL: none */
	char *cf_state_dir;
	char *cf_ready_file; /* NULL: none */
	char **cf_revoked;   /* jtis from revoked_file, sorted */
	size_t cf_nrevoked;
};

/*
 * Load and validate the policy at path. prev (may be NULL) is the running
 * policy: keys with unlink_after_read whose file is gone are taken from it.
 * Returns a policy with one reference, or NULL with why set to
 * "path: json.path: reason" (one line, no secret); running out of memory
 * is such a refusal, never fatal (a reload must survive it). Nothing is
 * unlinked here (config_unlink_keys()).
 */
struct config *config_load(const char *path, const struct config *prev,
    char *why, size_t whylen);
/*
 * Tests only: when non-zero, the n-th allocation of each config_load()
 * fails (as if out of memory), to reach every refusal path.
 */
extern unsigned long config_alloc_fail_at;
/*
 * Remove the files of the unlink_after_read keys this load read (only
 * "sluice run", once the whole policy is loaded and in force). Returns
 * 0, or -1 with why naming the first file that could not be removed
 * (the others are still tried).
 */
int config_unlink_keys(struct config *, char *why, size_t whylen);
struct config *config_ref(struct config *);
/* Drop a reference; the last one wipes secrets and frees everything. */
void config_unref(struct config *);
/* Print the normalized policy as JSON (secrets shown as file names). */
void config_print(const struct config *, FILE *);
/* Find a route by audience, or NULL. */
const struct route *config_route(const struct config *, const char *aud);
/*
 * Read a file that holds a secret: it must be a regular file owned by root,
 * by owner or by the caller (any owner with CONFIG_ANY_OWNER: a file the
 * caller could open) and have no group/other permission bits. The bytes
 * less one trailing newline go to *out (malloc'd; the caller wipes and
 * frees).
 */
#define CONFIG_ANY_OWNER ((uid_t)-1)
int config_read_secret(const char *path, uid_t owner, unsigned char **out,
    size_t *outlen, char *why, size_t whylen);

/*
 * policy.c: the one decision function (STYLE.md §6). Pure: no I/O, no
 * clock, no libevent. The caller gathers every fact first (token stage 1
 * result, revocation, budget used, audit state, loop guard).
 */
struct req_view {
	const struct listener_conf *rv_listener;
	int rv_connect; /* CONNECT request */
	const char *rv_method;
	size_t rv_method_len;
	const struct uri *rv_uri; /* target (forward) or path (reverse) */
	enum reason rv_token;     /* carrier + token_verify_sig result */
	const struct token_claims *rv_claims; /* when rv_token == OK */
	int rv_revoked;                       /* rv_claims->jti is revoked */
	uint64_t rv_budget_used;              /* requests charged to the jti */
	int rv_audit_failed;                  /* audit log in failed state */
};

struct decision {
	enum reason de_reason;
	const struct route *de_route; /* the matched route, if any */
	uint64_t de_budget_limit;     /* 0: no limit to charge against */
};

/*
 * Decide one request. Returns out->de_reason; REASON_OK only when every
 * check passed. Starts from deny: any path not explicitly allowed denies.
 */
enum reason policy_decide(const struct config *cf, const struct req_view *v,
    int64_t now, struct decision *out);
/*
 * The first route (in policy order) a forward request's target selects,
 * or NULL: CONNECT needs the upstream's host and port; an absolute-form
 * request matches a route's hosts or its upstream host by name, on any
 * port. Routes may share an upstream: policy_decide() picks among them by
 * the token's audience.
 */
const struct route *
policy_route_for(const struct config *cf, const struct uri *u, int connect);
/* Budget limit for a token on a route: min of claim and route, 0 = none. */
uint64_t policy_budget_limit(const struct route *, const struct token_claims *);
/*
 * Non-zero when the address is in the "private" list (IPv4, IPv6, and
 * IPv4 embedded in ::ffff:0:0/96, 64:ff9b::/96, 64:ff9b:1::/48, ::/96 and
 * 2002::/16).
 */
int policy_addr_private(const struct sockaddr *sa);
/*
 * REASON_OK or REASON_DESTINATION_DENIED for a resolved upstream address:
 * private addresses (unless the route allows them) and sluice's own
 * listeners (the loop guard) are refused.
 */
enum reason policy_check_addr(const struct config *, const struct route *,
    const struct sockaddr *);

/*
 * tokencache.c: verified-token cache. Bounded; keyed by SHA-256 of the
 * token string; an entry lives until its token expires (exp + leeway) or
 * the policy generation changes. Only stage 1 (token_verify_sig) results
 * are cached, and only successes: stage 2, revocation and budget run on
 * every request.
 */
struct token_cache;
struct token_cache *token_cache_new(size_t max_entries);
void token_cache_free(struct token_cache *);
/*
 * Stage 1 through the cache: returns REASON_OK with *out filled (a copy),
 * or the token_* reason. gen is the policy generation (keys may change on
 * reload); now and leeway_s decide expiry of entries.
 */
enum reason token_cache_verify(struct token_cache *, uint64_t gen,
    const struct token_key *keys, size_t nkeys, const char *tok, size_t len,
    int64_t now, int64_t leeway_s, struct token_claims *out);
void
token_cache_stats(const struct token_cache *, uint64_t *hits, uint64_t *misses);

/*
 * budget.c: per-jti request counts in <state_dir>/budget.db, a fixed-size
 * table in a MAP_SHARED mapping, so that a charge is in the page cache (and
 * survives kill -9 and a restart) before the request is forwarded.
 */
#define BUDGET_CAPACITY    65536 /* entries of a new budget.db (3/4 usable) */
#define BUDGET_PRUNE_GRACE 3600  /* s kept after exp; > any leeway_s (600) */

struct budget;
/*
 * Open or create (mode 0600) <state_dir>/budget.db and lock it. A file that
 * is corrupt, foreign or not ours is an error (fail closed), never reset.
 * Returns NULL with why set ("path: reason").
 */
struct budget *budget_open(const char *state_dir, char *why, size_t whylen);
/* As budget_open(); capacity (a power of two) applies to a new file. */
struct budget *budget_open_capacity(const char *state_dir, uint32_t capacity,
    char *why, size_t whylen);
void budget_close(struct budget *);
/* Requests charged so far to jti (0 when unknown). */
uint64_t budget_used(const struct budget *, const char *jti);
/*
 * Charge one request to jti if fewer than limit were charged. Returns 0
 * (charged; *used is the new count), 1 (exhausted: nothing charged) or -1
 * (table full or I/O error: deny). exp is the token's exp claim; the count
 * is kept until BUDGET_PRUNE_GRACE after it (longer than any leeway_s).
 * limit 0 means no limit: nothing is charged, 0 is returned.
 */
int budget_charge(struct budget *, const char *jti, int64_t exp, uint64_t limit,
    uint64_t *used);
/* Drop entries whose exp is more than BUDGET_PRUNE_GRACE before now. */
void budget_prune(struct budget *, int64_t now);

/*
 * revoke.c: revoked jtis. The file list comes with each policy snapshot
 * (cf_revoked); admin revocations are kept here and appended to
 * <state_dir>/revoked.admin so they survive a restart.
 */
struct revocations;
struct revocations *
revocations_open(const char *state_dir, char *why, size_t whylen);
void revocations_close(struct revocations *);
/*
 * Revoke jti (1..TOKEN_MAX_STR bytes, no control characters, no leading or
 * trailing blank, not starting with '#'): appended and fsync'd before it
 * is added to the set. Returns 0 (also when already revoked) or -1 with
 * why set.
 */
int revocations_add(struct revocations *, const char *jti, char *why,
    size_t whylen);
/* Non-zero when jti is in cf->cf_revoked or was revoked by an admin. */
int revocations_has(const struct revocations *, const struct config *,
    const char *jti);
/*
 * Parse a revoked_file: one jti per line, '#' comments and empty lines
 * ignored; CR, blanks around a jti, control characters or a jti over
 * TOKEN_MAX_STR bytes are errors ("path:LINE: why"). *jtis comes back
 * sorted (strcmp) without duplicates, NULL when *n is 0; the caller frees
 * each string and the array.
 */
int revocations_read_file(const char *path, char ***jtis, size_t *n, char *why,
    size_t whylen);

/*
 * audit.c: the JSON Lines audit log (DESIGN.md "Audit log", docs/audit.md).
 * A line is built with audit_begin(), audit_add_*() and audit_commit().
 * Strings (which often come from the sandbox) are escaped so that every line
 * is valid JSON and valid UTF-8 whatever bytes they hold; each string value
 * is capped at AUDIT_VALUE_MAX bytes of output. Single-threaded: one line
 * buffer per struct audit, used from the libevent loop only. Every
 * function accepts a NULL writer and then does nothing (commit returns 0).
 * IMPORTANT: never pass a token, a secret, an Authorization or
 * Proxy-Authorization value or a body to any audit_add_*() call.
 */
#define AUDIT_VALUE_MAX 2048  /* bytes of one escaped string value */
#define AUDIT_LINE_MAX  65536 /* bytes of one line, newline included */

struct audit;
/*
 * Open (or create, mode 0640) conf->ac_path for appending and resume the
 * chain: from the last complete line of the file, else from
 * <state_dir>/audit.head (state_dir may be NULL), else seq 1 with a zero
 * prev. A partial last line is cut off and an audit.truncated line written.
 * base (may be NULL) drives the fsync "interval" timer; close the writer
 * before freeing it. Returns the writer, or NULL with why set ("path:
 * reason"), also when the last line is not an audit line.
 */
struct audit *audit_open(const struct audit_conf *, const char *state_dir,
    struct event_base *base, char *why, size_t whylen);
/*
 * SIGUSR1: write audit.head, then reopen the configured path (a new file
 * after rotation); the chain continues from memory. On failure the old
 * file stays in use and -1 is returned.
 */
int audit_reopen(struct audit *);
/* Write the chain head to <state_dir>/audit.head, fsync, close and free. */
void audit_close(struct audit *);
/* Non-zero while in the failed state with on_error "deny". */
int audit_failed(const struct audit *);
/*
 * Apply a reloaded audit section: fsync, chain and on_error take effect at
 * once; a new path is opened (as audit_reopen) before the old one is closed.
 * Returns 0, or -1 with why set (the old settings stay).
 */
int audit_configure(struct audit *, const struct audit_conf *, char *why,
    size_t whylen);
/*
 * audit_configure() in two steps, for an all-or-nothing reload: prepare
 * checks the section and opens a new path (nothing of the audit changes;
 * NULL with why on failure); apply takes it over and cannot fail; free
 * drops a prepared one unused. Both consume nx.
 */
struct audit_next;
struct audit_next *audit_prepare(struct audit *, const struct audit_conf *,
    char *why, size_t whylen);
void audit_apply(struct audit *, struct audit_next *nx);
void audit_next_free(struct audit_next *nx);
/* Start a line: ts, seq, event and (with chain) prev. */
void audit_begin(struct audit *, const char *event);
/* Add a string field; val holds len arbitrary bytes (escaped, capped). */
void
audit_add_str(struct audit *, const char *key, const char *val, size_t len);
/* As audit_add_str for a NUL-terminated string; NULL adds nothing. */
void audit_add_cstr(struct audit *, const char *key, const char *val);
void audit_add_int(struct audit *, const char *key, int64_t val);
void audit_add_uint(struct audit *, const char *key, uint64_t val);
void audit_add_bool(struct audit *, const char *key, int val);
/* Add len bytes as a lower-case hex string (e.g. a SHA-256). */
void audit_add_hex(struct audit *, const char *key, const unsigned char *p,
    size_t len);
/*
 * Write the line begun by audit_begin(). Returns 0, or -1 when the line
 * could not be written: it is then dropped (seq and prev do not advance),
 * the error is counted, and with on_error "deny" the writer enters the
 * failed state, which the next successful write ends. With fsync "always"
 * the line is on disk when 0 is returned.
 */
int audit_commit(struct audit *);
/*
 * Make every committed line durable now (fsync if anything is pending).
 * Returns 0, or -1 on failure or while in the failed state.
 */
int audit_sync(struct audit *);
/* The chain head: seq of the last line and its SHA-256 in hex (65 bytes). */
void audit_head(const struct audit *, uint64_t *seq, char hex[65]);
/*
 * One policy.load / policy.reload / policy.reload_failed line: sha256 (32
 * bytes, may be NULL when the file could not be read) and error (NULL on
 * success). Returns as audit_commit().
 */
int audit_policy_event(struct audit *, const char *event,
    const unsigned char *sha256, const char *error);

/*
 * cmd_audit.c: "sluice audit verify [--head FILE] FILE...". audit_verify()
 * checks the files in order (JSON objects, seq +1 per line, the prev hash
 * chain); "-" reads stdin. head (may be NULL) is an audit.head file whose
 * line must be among the files with that hash. Returns SL_EXIT_OK after
 * printing a summary line to out, or SL_EXIT_INVALID after printing
 * "FILE:LINE: why" for the first break to err.
 */
int audit_verify(const char *const *files, size_t nfiles, const char *head,
    FILE *out, FILE *err);

/*
 * metrics.c: counters and histograms, and the /metrics listener in the
 * Prometheus text format 0.0.4 (docs/metrics.md). Single-threaded, global.
 * Route labels are the audiences given to metrics_configure(); any other
 * route name (and NULL) is counted under route="" so the set stays bounded.
 */
#define METRICS_MAX_ROUTES 64

/* Register the policy's route audiences as labels (kept across reloads). */
void metrics_configure(const struct config *);
void metrics_request(const char *route, int allow, enum reason,
    uint64_t bytes_in, uint64_t bytes_out, double seconds);
void metrics_tunnel(const char *route, int allow, enum reason,
    uint64_t bytes_in, uint64_t bytes_out, double seconds);
void metrics_upstream_connect(double seconds);
void metrics_tls_handshake(double seconds);
void metrics_conn_active(int delta);
void metrics_pool_idle(int delta);
void metrics_token_cache(int hit);
void metrics_audit_error(void);
/* The audit writer's failed state (a gauge), set by audit.c. */
void metrics_audit_failed(int failed);
/* Dropped packets reported by NFLOG events (added). */
void metrics_net_drop(uint64_t count);
/* The drop rules' own counters, as last read from the kernel (absolute). */
void metrics_kernel_rule_drops(uint64_t packets, uint64_t bytes);
void metrics_reload(int ok);
/*
 * Serve GET /metrics on listen ("host:port", or "unix:/path" created with
 * mode 0600). Returns 0, or -1 with why set.
 */
int metrics_listen(struct event_base *, const char *listen, char *why,
    size_t whylen);
/* Close the listener (and unlink its unix socket); counters stay. */
void metrics_close(void);
/* Render every family into buf (also used by the unit tests). 0 or -1. */
int metrics_render(struct evbuffer *buf);
/* Zero every counter and forget the routes (unit tests). */
void metrics_reset(void);

/*
 * unixsock.c: a listening unix socket for the admin and metrics sockets.
 * A stale socket at path is removed (only if it is a socket), the socket is
 * bound under umask 0177 so it is never wider than mode (e.g. 0600), then
 * chowned to owner unless owner is (uid_t)-1. Returns a non-blocking,
 * close-on-exec listening fd, or -1 with why set.
 */
int unixsock_listen(const char *path, mode_t mode, uid_t owner, char *why,
    size_t whylen);

/*
 * admin.c: the admin unix socket (mode 0600, owner uid): one command line
 * per connection (status, reload, revoke <jti>), answered with text lines,
 * then closed. Only root and the owner uid may use it (SO_PEERCRED).
 */
#define ADMIN_LINE_MAX 512 /* bytes of a command line, newline included */

/*
 * What a command does, with ao_arg passed to each operation; the daemon
 * gives its own (daemon.c), the unit tests fakes.
 */
struct admin_ops {
	void (*ao_status)(void *arg, struct evbuffer *out);
	void (*ao_reload)(void *arg);
	/* Revoke jti for peer uid; 0, or -1 with why set. */
	int (*ao_revoke)(void *arg, const char *jti, uid_t uid, char *why,
	    size_t whylen);
	void *ao_arg;
};
/* Serve ops (kept until admin_close()) on the socket at path. */
int admin_open(struct event_base *, const char *path, uid_t owner,
    const struct admin_ops *ops, char *why, size_t whylen);
void admin_close(void);
/*
 * The revoke operation of the daemon: persist jti in revs, then leave a
 * token.revoke line in a (may be NULL). 0, or -1 with why set.
 */
int admin_revoke(struct revocations *revs, struct audit *a, const char *jti,
    uid_t uid, char *why, size_t whylen);
/*
 * Run one command line (without its newline) from peer uid and append the
 * answer lines to out. Returns 0 when the command succeeded, -1 otherwise
 * (the answer then starts with "error: ").
 */
int admin_dispatch(const struct admin_ops *, const char *line, size_t len,
    uid_t uid, struct evbuffer *out);

/*
 * listener.c: the listening sockets, bound once at start (a reload cannot
 * rebind: listener addresses must stay the same), accept with EMFILE
 * back-off and the max_connections limit.
 */
int listener_open_all(struct proxy_env *, char *why, size_t whylen);
void listener_enable_all(int on);
void listener_close_all(void);
/* Non-zero when the policy's listeners are those bound (for reloads). */
int listener_same(const struct config *);

/*
 * conn.c: one client connection: request heads, the decision, streaming to
 * and from the upstream, CONNECT tunnels, denial responses.
 */
/*
 * Takes fd (closed on failure); the conn keeps env. Returns 0, or -1 out
 * of memory.
 */
int conn_accept(struct proxy_env *, int fd, size_t listener_idx,
    const struct sockaddr *peer, socklen_t peerlen);
/*
 * Refuse a connection over max_connections, or over per_client_connections
 * when per_client is non-zero (503), and close it.
 */
void conn_refuse(struct proxy_env *, int fd, size_t listener_idx,
    const struct sockaddr *peer, int per_client);
size_t conn_count(void);
/* Stop keep-alive: idle connections close now, busy ones after. */
void conn_drain(void);
/* Close every connection now (end of drain_timeout). */
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
	enum reason cr_reason;
	int cr_status;
	const char *cr_id, *cr_client, *cr_listener, *cr_route, *cr_sub,
	    *cr_jti, *cr_method, *cr_host, *cr_path;
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

/*
 * netguard.c: the daemon's side of the kernel rules (netpolicy/): apply
 * before any listener exists, re-verify every 30 s and at reload
 * (re-apply and a netpolicy.verify_failed event on drift), put the
 * addresses sluice resolved for an upstream into the dynamic sets, and
 * turn NFLOG drops into aggregated, rate-limited net.drop events.
 */
struct np_ruleset;
/*
 * Apply env->pe_cf's ruleset (when enabled and the mode is not off), then
 * start the verify timer and the NFLOG subscriber on env->pe_base; env is
 * kept (events go to its audit writer). Returns 0, or -1 with why set when
 * the rules could not be built or applied (the caller exits: fail-closed).
 * The netpolicy.apply event is written once the audit log is open.
 */
int netguard_start(const struct proxy_env *env, int enabled, char *why,
    size_t whylen);
/*
 * Apply a reloaded policy's ruleset. Returns 0, or -1 with why set (the
 * reload is refused and the old rules stay): the mode and table cannot
 * change at reload.
 */
int netguard_reload(const struct config *cf, char *why, size_t whylen);
/*
 * netguard_reload() in two steps. prepare checks what a reload may not
 * change and renders the ruleset (*rsp; NULL when netpolicy is off):
 * nothing is applied. commit applies it (and frees it): the one step of a
 * reload that can still fail, after which nothing else may.
 */
int netguard_prepare(const struct config *cf, struct np_ruleset **rsp,
    char *why, size_t whylen);
int netguard_commit(const struct config *cf, struct np_ruleset *rs, char *why,
    size_t whylen);
/*
 * A route's upstream resolved to addrs: allow sluice's uid to them on the
 * route's port for max(ttl, 60) seconds (sidecar mode; else a no-op).
 */
void netguard_upstream_addrs(const struct route *rt,
    const struct sockaddr_storage *addrs, size_t n, uint32_t ttl);
/* Stop the timers and NFLOG; flush the table only with flush_on_exit. */
void netguard_stop(const struct config *cf);
/*
 * The desired ruleset for cf (also `sluice netpolicy`): a ruleset the
 * caller frees with np_ruleset_free(), or NULL with why set.
 */
struct np_ruleset *
netguard_ruleset(const struct config *cf, char *why, size_t whylen);

#endif
