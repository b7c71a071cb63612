/*
 * config_int.h: what the files of proxy/config/ share, and nothing outside
 * it uses (the public interface is config.h).
 *
 *   json.c       strict JSON accessors: key checks, typed getters, errors
 *                that name the JSON path, allocation that can fail
 *   secret.c     reading whole files, and secret files with their rules
 *   listeners.c  listeners[] and their addresses
 *   sections.c   user, limits, audit, netpolicy, admin, metrics, paths
 *   tokens.c     tokens and their keys
 *   routes.c     routes[]: audiences, hosts, methods, prefixes, overlap
 *   upstream.c   a route's upstream: URL, TLS and pins, injected headers
 *   load.c       config_load() in order, and the snapshot's references
 *   print.c      config_print(), the normalized policy
 *   sandboxes.c  sandboxes[] (gateway identity) and the run-time registry
 */
#ifndef SLUICE_CONFIG_INT_H
#define SLUICE_CONFIG_INT_H

#include <sys/types.h>
#include <sys/socket.h>

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "proxy/config/config.h"
#include "proxy/util/util.h"

#define CONFIG_MAX_FILE (1024 * 1024) /* policy and key files */
#define CONFIG_MAX_LIST 1024          /* entries of any array */

/* Where an error is reported: the file name and the buffer for "why". */
struct cfctx {
	const char *file;
	char *why;
	size_t whylen;
	const struct config *prev;
	struct config *cf;
};

/*
 * json.c. Each takes the JSON path jp of what it looks at, so that its
 * error names it; all return -1 (or NULL) after cf_err().
 */
/* "file: jp: message" into cx->why (controls shown as '?'); returns -1. */
int
cf_err(struct cfctx *cx, const char *jp, const char *fmt, ...) SL_PRINTF(3, 4);
/* Start counting allocations for config_alloc_fail_at (one per load). */
void cf_alloc_reset(void);
/* Whether this allocation is the one config_alloc_fail_at fails. */
int cf_alloc_fails(void);
char *cf_strdup(struct cfctx *cx, const char *jp, const char *s);
void *cf_calloc(struct cfctx *cx, const char *jp, size_t n, size_t size);
int cf_keys(struct cfctx *cx, const char *jp, const cJSON *obj,
    const char *const *allowed);
/* jp.key and jp[i], for the path of a member or an element. */
void cf_sub(char *out, size_t len, const char *jp, const char *key);
void cf_idx(char *out, size_t len, const char *jp, size_t i);
int cf_str(struct cfctx *cx, const char *jp, const cJSON *obj, const char *key,
    int required, const char **out);
int cf_abspath(struct cfctx *cx, const char *jp, const char *s, char **out);
int cf_bool(struct cfctx *cx, const char *jp, const cJSON *obj, const char *key,
    int *out);
int cf_uint(struct cfctx *cx, const char *jp, const cJSON *obj, const char *key,
    uint64_t min, uint64_t max, uint64_t *out);
int cf_array(struct cfctx *cx, const char *jp, const cJSON *obj,
    const char *key, int required, size_t max, const cJSON **arr);
/*
 * jp.ports: 1..max TCP ports (1-65535, no repeats) into out, *n of them
 * (0 when absent and not required). 0, or -1 (said).
 */
int cf_ports(struct cfctx *cx, const char *jp, const cJSON *obj, int required,
    uint16_t *out, size_t max, size_t *n);
int cf_strlist(struct cfctx *cx, const char *jp, const cJSON *obj,
    const char *key, char ***out, size_t *n,
    int (*check)(struct cfctx *, const char *, const char *));
int cf_strlist_default(struct cfctx *cx, const char *jp, char ***list,
    size_t *n, const char *def);
void cf_strlist_free(char **list, size_t n);
/* The index of s in names[] (NULL at the end), or -1. */
int cf_name_index(const char *const *names, const char *s);
/* Whether a string is listed twice; *dup is the second place. */
int cf_has_dup(char **list, size_t n, size_t *dup);

/*
 * secret.c: the whole file at path (at most CONFIG_MAX_FILE bytes, and a
 * NUL after them), for files that are not secret; why says "path: reason".
 */
int cf_read_path(const char *path, unsigned char **out, size_t *outlen,
    char *why, size_t whylen);

/* listeners.c */
int cf_parse_listen(const char *s, struct sockaddr_storage *ss, socklen_t *len);
int cf_load_listeners(struct cfctx *cx, const cJSON *root);
/* After cf_load_routes(): each reverse listener finds its route. */
int cf_link_listeners(struct cfctx *cx);

/*
 * sections.c. cf_limits[]: the fields of struct limits in the order they
 * are read and printed, with their defaults and ranges; a NULL key ends it.
 */
struct cf_limit {
	const char *key; /* also the field's name */
	size_t off;      /* offsetof(struct limits, field) */
	uint64_t def, min, max;
};
extern const struct cf_limit cf_limits[];
/* The names of enum audit_fsync, on_error (deny, allow), netpolicy_mode. */
extern const char *const cf_fsync_names[];
extern const char *const cf_on_error_names[];
extern const char *const cf_np_mode_names[];
int cf_load_user(struct cfctx *cx, const cJSON *root);
int cf_load_limits(struct cfctx *cx, const cJSON *root);
int cf_load_audit(struct cfctx *cx, const cJSON *root);
/* After cf_load_user(): the modes' rules on the user. */
int cf_load_netpolicy(struct cfctx *cx, const cJSON *root);
int cf_load_misc(struct cfctx *cx, const cJSON *root);
/* After cf_load_routes(): sidecar mode's resolvers. */
int cf_check_resolvers(struct cfctx *cx);

/* tokens.c: after cf_load_user() (secret files are checked for cf_uid). */
int cf_load_tokens(struct cfctx *cx, const cJSON *root);

/* routes.c */
int cf_load_routes(struct cfctx *cx, const cJSON *root);
/* inbound.c */
int cf_load_inbound(struct cfctx *cx, const cJSON *np_obj);
void cf_inbound_free(struct netpolicy_conf *np);
/* sandboxes.c: after cf_load_netpolicy() (gateway mode, its patterns). */
int cf_load_sandboxes(struct cfctx *cx, const cJSON *root);
/* intercept.c */
int cf_load_intercept(struct cfctx *cx, const cJSON *root);
int cf_check_intercept(struct cfctx *cx);
void cf_intercept_free(struct intercept_conf *ic);
/* exec.c */
int cf_load_exec(struct cfctx *cx, const cJSON *root);
void cf_exec_free(struct exec_conf *ec);
/* A host as routes compare it: lower case, an IPv6 literal unbracketed. */
void cf_normalize_host(char *h);

/* upstream.c: route r's (at rjp) "upstream" into uc. */
int cf_allowlist_intercept(struct cfctx *, const char *jp, struct route *);
int cf_load_upstream(struct cfctx *cx, const char *rjp, const cJSON *r,
    struct upstream_conf *uc);
void cf_upstream_free(struct upstream_conf *uc);
/* Whether route r's upstream says "mode": "as_requested" (before loading). */
int cf_upstream_as_requested(const cJSON *r);

/*
 * hosts.c: cx->cf->cf_hosts, the routes by host name, after every route
 * loaded; refuses two routes a host would select at the same precedence.
 * cf_host_key() writes the form a host is looked up by (an IPv6 literal
 * canonical) into out[HOSTMATCH_BUF].
 */
int cf_build_hosts(struct cfctx *cx);
/* Top-level "enforce" ("deny" or "report") and the report route. */
int cf_load_enforce(struct cfctx *cx, const cJSON *root);
void cf_host_key(const char *host, char *out);

#endif
