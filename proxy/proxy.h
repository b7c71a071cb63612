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

/* Exit codes (DESIGN.md "Command line"). */
#define SL_EXIT_OK      0
#define SL_EXIT_INVALID 1 /* invalid input, verification failed */
#define SL_EXIT_USAGE   2
#define SL_EXIT_RUNTIME 3 /* cannot bind, cannot apply rules */

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
 * "path: json.path: reason" (one line, no secret).
 */
struct config *config_load(const char *path, const struct config *prev,
    char *why, size_t whylen);
struct config *config_ref(struct config *);
/* Drop a reference; the last one wipes secrets and frees everything. */
void config_unref(struct config *);
/* Print the normalized policy as JSON (secrets shown as file names). */
void config_print(const struct config *, FILE *);
/* Find a route by audience, or NULL. */
const struct route *config_route(const struct config *, const char *aud);
/*
 * Read a file that holds a secret: it must be a regular file owned by root
 * or by owner and have no group/other permission bits. The bytes less one
 * trailing newline go to *out (malloc'd; the caller wipes and frees).
 */
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
/* Find the route a forward request's host selects, or NULL. */
const struct route *
policy_route_for_host(const struct config *cf, const char *host, size_t len);
/* Budget limit for a token on a route: min of claim and route, 0 = none. */
uint64_t policy_budget_limit(const struct route *, const struct token_claims *);
/*
 * Non-zero when the address is in DESIGN.md's "private" list (IPv4, IPv6,
 * and IPv4 embedded in ::ffff:0:0/96, 64:ff9b::/96 and 2002::/16).
 */
int policy_addr_private(const struct sockaddr *sa);
/* REASON_OK or REASON_DESTINATION_DENIED for a resolved upstream address. */
enum reason policy_check_addr(const struct route *, const struct sockaddr *);

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
struct budget;
struct budget *budget_open(const char *state_dir, char *why, size_t whylen);
void budget_close(struct budget *);
/* Requests charged so far to jti (0 when unknown). */
uint64_t budget_used(const struct budget *, const char *jti);
/*
 * Charge one request to jti if fewer than limit were charged. Returns 0
 * (charged; *used is the new count), 1 (exhausted: nothing charged) or -1
 * (table full or I/O error: deny). exp lets expired entries be pruned.
 */
int budget_charge(struct budget *, const char *jti, int64_t exp, uint64_t limit,
    uint64_t *used);
/* Drop entries of tokens expired before now. */
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
int revocations_add(struct revocations *, const char *jti, char *why,
    size_t whylen);
int revocations_has(const struct revocations *, const struct config *,
    const char *jti);
/* Parse a revoked_file: one jti per line, '#' comments, blank lines. */
int revocations_read_file(const char *path, char ***jtis, size_t *n, char *why,
    size_t whylen);

/*
 * audit.c: the JSON Lines audit log (DESIGN.md "Audit log"). Lines are
 * built with audit_begin/audit_add_*/
audit_commit;
strings from the sandbox *are escaped so that every line is valid JSON whatever
	bytes they hold.* /
    struct audit;
struct audit *audit_open(const struct audit_conf *, const char *state_dir,
    struct event_base *base, char *why, size_t whylen);
/* SIGUSR1: reopen the path (rotation); the chain continues. */
int audit_reopen(struct audit *);
/* Write the chain head to <state_dir>/audit.head, fsync and close. */
void audit_close(struct audit *);
/* Non-zero while in the failed state with on_error "deny". */
int audit_failed(const struct audit *);
/* Apply a reloaded audit section (fsync, on_error; path changes reopen). */
int audit_configure(struct audit *, const struct audit_conf *, char *why,
    size_t whylen);
void audit_begin(struct audit *, const char *event);
void
audit_add_str(struct audit *, const char *key, const char *val, size_t len);
void audit_add_cstr(struct audit *, const char *key, const char *val);
void audit_add_int(struct audit *, const char *key, int64_t val);
/* Returns 0, or -1 when the line could not be written. */
int audit_commit(struct audit *);

/*
 * metrics.c: counters and histograms, and the /metrics listener in the
 * Prometheus text format.
 */
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
void metrics_net_drop(uint64_t count);
void metrics_reload(int ok);
int metrics_listen(struct event_base *, const char *listen, char *why,
    size_t whylen);
void metrics_close(void);
/* Render every family into buf (also used by the unit tests). */
int metrics_render(struct evbuffer *buf);

/* admin.c: the admin unix socket (mode 0600): status, reload, revoke. */
int admin_open(struct event_base *, const char *path, uid_t owner, char *why,
    size_t whylen);
void admin_close(void);

/*
 * daemon.c: the running daemon, as seen by admin.c and netguard.c.
 */
struct config *daemon_config(void); /* borrowed: the current policy */
struct audit *daemon_audit(void);
struct revocations *daemon_revocations(void);
void daemon_request_reload(void); /* as SIGHUP */
/* Append "key value" status lines (version, uptime, policy sha256...). */
void daemon_status(struct evbuffer *out);
int64_t daemon_now(void); /* wall clock, seconds */

#endif
