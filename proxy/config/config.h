/*
 * config: the policy file, loaded into an immutable, reference-counted
 * snapshot.
 */
#ifndef SLUICE_CONFIG_H
#define SLUICE_CONFIG_H

#include <sys/types.h>
#include <sys/socket.h>

#include <stdint.h>
#include <stdio.h>

#include "proxy/token/token.h"

/*
 * proxy/config/: the policy file (DESIGN.md "Policy file"). A loaded
 * policy is an immutable, refcounted snapshot: requests keep the snapshot
 * they started with, and SIGHUP swaps the daemon's pointer.
 */
enum listener_type {
	LISTENER_FORWARD = 1, /* absolute-form and CONNECT */
	LISTENER_REVERSE,     /* origin-form, bound to one route */
	LISTENER_INTERCEPT,   /* an intercepted tunnel to lc_host:lc_port */
	LISTENER_TRANSPARENT  /* redirected TLS, destination from SNI */
};

struct listener_conf {
	char lc_name[64];
	enum listener_type lc_type;
	char lc_listen[128]; /* as written in the policy */
	struct sockaddr_storage lc_addr;
	socklen_t lc_addrlen;
	char lc_route[TOKEN_MAX_STR + 1]; /* reverse: the route's audience */
	size_t lc_route_idx; /* reverse, intercept: index into cf_routes */
	char lc_host[256];   /* intercept: the host its tunnels are to */
	uint16_t lc_port;    /* intercept: and the port (default: listen's) */
};

/* A header sluice adds to every forwarded request; the value is secret. */
struct upstream_header {
	char *uh_name;
	char *uh_file;
	unsigned char *uh_value; /* wiped on free */
	size_t uh_value_len;
};

struct upstream_conf {
	int uc_as_requested;   /* mode "as_requested": dial the host asked */
	uint16_t uc_ports[16]; /* as_requested: the ports it may name */
	size_t uc_nports;
	char *uc_url;  /* NULL when as_requested, as are host and authority */
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
	int uc_strip_token; /* remove the carrier that held the run token */
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
	uint16_t rt_ports[16];    /* intercept: CONNECT ports (default 443) */
	size_t rt_nports;
	char *rt_token_header; /* a header whose value is the bare token */
	struct upstream_conf rt_up;
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
	uint64_t per_sandbox_connections;   /* gateway: open per sandbox */
	uint64_t per_sandbox_rps; /* gateway: requests per second; 0: off */
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

/* netpolicy.inbound[i]: ports, and the source prefixes (parsed). */
struct inbound_net {
	int in_family; /* AF_INET or AF_INET6 */
	uint8_t in_addr[16];
	unsigned in_prefix; /* bits, a multiple of 8 */
};
struct inbound_conf {
	uint16_t ib_ports[16];
	size_t ib_nports;
	char **ib_from; /* as written */
	size_t ib_nfrom;
	struct inbound_net ib_net[16];
};

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
	struct inbound_conf *np_inbound; /* sidecar: accepted connections */
	size_t np_ninbound;
};

/* Top-level "intercept": the local CA of intercepted tunnels. */
#define INTERCEPT_MAX_HOSTS 64
struct intercept_conf {
	int ic_on;        /* the key is present */
	int ic_ephemeral; /* "ca": "ephemeral" (else "files") */
	char *ic_cert_file;
	char *ic_key_file;
	char *ic_cert_out; /* ephemeral: where its certificate goes */
	uint64_t ic_ca_days;
	uint64_t ic_leaf_days;
	uint64_t ic_max_leaves;
};

/* Top-level "exec": sluice exec's extra walls. */
struct exec_conf {
	int ec_landlock; /* "landlock" is present */
	char **ec_rw;    /* paths the command may write */
	size_t ec_nrw;
	char **ec_ro; /* paths it may read and execute */
	size_t ec_nro;
};

/*
 * sandboxes[i] (gateway mode, DESIGN.md "Gateway identity"): a sandbox's
 * id (what its tokens' sub or sbx claim name), the gateway-side interface
 * it sits behind and the source addresses it may use there.
 */
#define SANDBOX_ID_MAX     64   /* bytes of an id */
#define SANDBOX_IFACE_MAX  16   /* IFNAMSIZ, with the NUL */
#define SANDBOX_MAX_ADDRS  16   /* addresses of one sandbox */
#define SANDBOX_MAX        4096 /* sandboxes registered at once */
#define CONFIG_WORKERS_MAX 8    /* "workers": engines serving at once */
struct sandbox_addr {
	unsigned char sa_fam; /* 4 or 6; 0: none */
	unsigned char sa_b[16];
};
struct sandbox_conf {
	char sc_id[SANDBOX_ID_MAX + 1];
	char sc_iface[SANDBOX_IFACE_MAX];
	struct sandbox_addr sc_addrs[SANDBOX_MAX_ADDRS];
	size_t sc_naddrs;
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

struct hostmatch;

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
	struct hostmatch *cf_hosts; /* routes by host name (hosts.c) */
	/*
	 * "enforce": "report": what no route allows is let through and
	 * audited as "report"; cf_report_rt is the allowlist route such a
	 * request is dialled on (audience "", not in cf_routes).
	 */
	int cf_report;
	struct route *cf_report_rt;
	struct limits cf_limits;
	struct audit_conf cf_audit;
	struct netpolicy_conf cf_np;
	struct intercept_conf cf_intercept;
	struct exec_conf cf_exec;
	char *cf_admin_socket;   /* NULL: none */
	char *cf_metrics_listen; /* NULL: none */
	gid_t cf_metrics_gid;    /* metrics.group; (gid_t)-1: none */
	char *cf_metrics_group;  /* as written, for check; NULL: none */
	char *cf_state_dir;
	char *cf_ready_file; /* NULL: none */
	char **cf_revoked;   /* jtis from revoked_file, sorted */
	size_t cf_nrevoked;
	struct sandbox_conf *cf_sandboxes; /* gateway: the policy's */
	size_t cf_nsandboxes;
	unsigned cf_workers; /* engines serving at once (privsep) */
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
 * sandboxes.c: one sandbox from its parts (the admin socket's "sandbox
 * add", the persisted registry): the id, an exact interface name that
 * matches one of cf's sandbox_interfaces, and 1..SANDBOX_MAX_ADDRS IP
 * literals. 0, or -1 with why naming the part at fault.
 */
int sandbox_conf_make(const struct config *cf, const char *id,
    const char *iface, const char *const *addrs, size_t naddrs,
    struct sandbox_conf *out, char *why, size_t whylen);
/* "198.18.0.2" or "2001:2::2" into buf (at least 46 bytes). */
void sandbox_addr_str(const struct sandbox_addr *, char *buf, size_t len);
/* The address of sa without its port (IPv4-mapped is IPv4); 0 or -1. */
int sandbox_addr_of(const struct sockaddr *sa, struct sandbox_addr *out);

/*
 * The registry of sandboxes in force (DESIGN.md "Gateway identity"): the
 * policy's and those added over the admin socket, with their run-time
 * state (open connections, the request rate's bucket). Looking up a
 * source address is O(1) (a hash keyed with a random seed). A struct
 * sandbox is reference-counted: a connection holds its sandbox, and one
 * removed from the registry (sb_removed) lives until the last release.
 */
struct sandbox {
	struct sandbox_conf sb_conf;
	int sb_admin;      /* added over the admin socket (persisted) */
	int sb_removed;    /* no longer registered */
	unsigned sb_refs;  /* the registry's, and each connection's */
	uint64_t sb_conns; /* this process's */
	int64_t sb_tat_us; /* per_sandbox_rps: the bucket (GCRA), alone */
	int sb_cell;       /* where the engines count it together */
};
struct sbx_registry;
struct sbx_registry *sbx_registry_new(void);
void sbx_registry_free(struct sbx_registry *);
/*
 * Add a copy of sc (admin: over the admin socket). Its id, interface and
 * addresses must be new to the registry. 0, or -1 with why.
 */
int sbx_registry_add(struct sbx_registry *, const struct sandbox_conf *sc,
    int admin, char *why, size_t whylen);
/* Remove id; 0, or -1 when no sandbox has it. */
int sbx_registry_del(struct sbx_registry *, const char *id);
/* The sandbox whose address sa's is (the port aside), or NULL. */
struct sandbox *
sbx_registry_lookup(const struct sbx_registry *, const struct sockaddr *sa);
struct sandbox *sbx_registry_find(const struct sbx_registry *, const char *id);
/* The registered sandboxes in the order they were added. */
size_t sbx_registry_count(const struct sbx_registry *);
struct sandbox *sbx_registry_at(const struct sbx_registry *, size_t i);
struct sandbox *sandbox_ref(struct sandbox *);
void sandbox_unref(struct sandbox *);
/*
 * Make the registry hold cf's sandboxes and the admin ones: those of the
 * policy replace the policy's previous ones (one with the same id and
 * configuration keeps its state); an admin one that clashes with the
 * policy is dropped (named in why, 1 returned). 0, 1, or -1 with why
 * (out of memory: some of the policy's may be missing, never extra).
 */
int sbx_registry_sync(struct sbx_registry *, const struct config *cf, char *why,
    size_t whylen);
/*
 * The admin sandboxes persist in <dir>/sandboxes.json (a JSON array of
 * the policy's sandbox objects): save writes it whole (a temporary file
 * renamed over it); load adds its entries as admin ones (a missing file
 * is an empty one; one that clashes with a sandbox already registered is
 * left out: 1 with why naming the first). 0, 1, or -1 with why ("path:
 * [i]: field: reason").
 */
#define SBX_STATE_FILE "sandboxes.json"
/* dirfd (-1: none) is dir opened O_PATH, for a process that dropped root. */
int sbx_registry_save(const struct sbx_registry *, int dirfd, const char *dir,
    char *why, size_t whylen);
int sbx_registry_load(struct sbx_registry *, const struct config *cf,
    const char *dir, char *why, size_t whylen);
/*
 * Charge one request to sb's bucket of rps per second (burst rps) at
 * now_us (a monotonic clock: proxy_env_mono_us()): 0 admitted, else the
 * seconds to wait (>= 1) before the next.
 */
int64_t sandbox_rate(struct sandbox *sb, uint64_t rps, int64_t now_us);

#endif
