/*
 * The policy's small sections, each with its documented defaults
 * (docs/config.md): user, limits, audit, netpolicy, admin, metrics,
 * state_dir and ready_file.
 */
#include <sys/socket.h>
#include <sys/un.h>

#include <arpa/inet.h>

#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "proxy/config/config.h"
#include "proxy/config/config_int.h"

static int
check_ip(struct cfctx *cx, const char *jp, const char *s)
{
	unsigned char buf[16];

	if (inet_pton(AF_INET, s, buf) != 1 && inet_pton(AF_INET6, s, buf) != 1)
		return cf_err(cx, jp, "\"%s\" is not an IP address", s);
	return 0;
}

static int
check_iface(struct cfctx *cx, const char *jp, const char *s)
{
	const char *p;
	size_t len = strlen(s);

	/* IFNAMSIZ - 1 bytes; '*' only as the last character (nft wildcard). */
	if (len >= 16)
		return cf_err(cx, jp, "\"%s\" is longer than 15 bytes", s);
	for (p = s; *p != '\0'; p++)
		if (!(isalnum((unsigned char)*p) || *p == '-' || *p == '_' ||
			*p == '.' || (*p == '*' && p[1] == '\0')))
			return cf_err(cx, jp,
			    "\"%s\": only letters, digits, '-', '_', '.' and a trailing '*'",
			    s);
	return 0;
}

int
cf_load_user(struct cfctx *cx, const cJSON *root)
{
	struct config *cf = cx->cf;
	const char *user = NULL;
	struct passwd *pw;
	char *end;
	unsigned long id;

	cf->cf_uid = geteuid();
	cf->cf_gid = getegid();
	if (cf_str(cx, "", root, "user", 0, &user) == -1)
		return -1;
	if (user == NULL)
		return 0;
	if ((cf->cf_user = cf_strdup(cx, "user", user)) == NULL)
		return -1;
	if ((pw = getpwnam(user)) != NULL) {
		cf->cf_uid = pw->pw_uid;
		cf->cf_gid = pw->pw_gid;
		return 0;
	}
	/* A numeric uid that has no passwd entry: its group is the same id. */
	errno = 0;
	id = strtoul(user, &end, 10);
	if (isdigit((unsigned char)user[0]) && *end == '\0' && errno == 0 &&
	    id < UINT32_MAX) {
		cf->cf_uid = (uid_t)id;
		cf->cf_gid = (gid_t)id;
		return 0;
	}
	return cf_err(cx, "user", "no such user \"%s\"", user);
}

/* A group name, or a numeric gid. */
static int
cf_group(struct cfctx *cx, const char *jp, const char *name, gid_t *out)
{
	struct group *gr;
	unsigned long id;
	char *end;

	if ((gr = getgrnam(name)) != NULL) {
		*out = gr->gr_gid;
		return 0;
	}
	errno = 0;
	id = strtoul(name, &end, 10);
	if (isdigit((unsigned char)name[0]) && *end == '\0' && errno == 0 &&
	    id < UINT32_MAX) {
		*out = (gid_t)id;
		return 0;
	}
	return cf_err(cx, jp, "no such group \"%s\"", name);
}

/* LIMIT(field, default, min, max) */
/* clang-format off */
#define LIMIT(f, d, lo, hi) { #f, offsetof(struct limits, f), d, lo, hi }
/* clang-format on */
const struct cf_limit cf_limits[] = {
	LIMIT(max_header_bytes, 16384, 1024, (uint64_t)1024 * 1024),
	LIMIT(max_headers, 100, 8, 1000),
	LIMIT(max_body_bytes, (uint64_t)32 * 1024 * 1024, 0, (uint64_t)1 << 50),
	LIMIT(max_connections, 4096, 1, 1000000),
	LIMIT(header_timeout_ms, 10000, 100, 3600000),
	LIMIT(idle_timeout_ms, 60000, 100, 86400000),
	LIMIT(connect_timeout_ms, 5000, 100, 600000),
	LIMIT(upstream_response_timeout_ms, 300000, 100, 86400000),
	LIMIT(drain_timeout_ms, 10000, 0, 3600000),
	LIMIT(per_client_connections, 256, 1, 1000000),
	LIMIT(per_client_refusals_per_s, 20, 0, 1000000),
	LIMIT(per_sandbox_connections, 256, 1, 1000000),
	LIMIT(per_sandbox_rps, 0, 0, 1000000),
	{ NULL, 0, 0, 0, 0 },
};
#undef LIMIT

static uint64_t *
limit_field(struct limits *l, const struct cf_limit *lm)
{
	return (uint64_t *)(void *)((char *)l + lm->off);
}

int
cf_load_limits(struct cfctx *cx, const cJSON *root)
{
	const char *keys[sizeof(cf_limits) / sizeof(cf_limits[0])];
	struct limits *l = &cx->cf->cf_limits;
	const cJSON *obj = cJSON_GetObjectItemCaseSensitive(root, "limits");
	const struct cf_limit *lm;
	size_t i = 0;

	for (lm = cf_limits; lm->key != NULL; lm++) {
		keys[i++] = lm->key;
		*limit_field(l, lm) = lm->def;
	}
	keys[i] = NULL;
	if (obj == NULL)
		return 0;
	if (cf_keys(cx, "limits", obj, keys) == -1)
		return -1;
	for (lm = cf_limits; lm->key != NULL; lm++)
		if (cf_uint(cx, "limits", obj, lm->key, lm->min, lm->max,
			limit_field(l, lm)) == -1)
			return -1;
	return 0;
}

/* Names by enum value, for loading and for printing. */
const char *const cf_fsync_names[] = { "interval", "always", "never", NULL };
const char *const cf_on_error_names[] = { "deny", "allow", NULL };
const char *const cf_np_mode_names[] = { "off", "sidecar", "gateway", NULL };

int
cf_load_audit(struct cfctx *cx, const cJSON *root)
{
	static const char *const keys[] = { "path", "fsync", "chain",
		"on_error", NULL };
	struct audit_conf *ac = &cx->cf->cf_audit;
	const cJSON *obj = cJSON_GetObjectItemCaseSensitive(root, "audit");
	const char *path = "/var/log/sluice/audit.jsonl", *fs = NULL;
	const char *onerr = NULL;
	int k;

	ac->ac_chain = 1;
	if (obj != NULL &&
	    (cf_keys(cx, "audit", obj, keys) == -1 ||
		cf_str(cx, "audit", obj, "path", 0, &path) == -1 ||
		cf_str(cx, "audit", obj, "fsync", 0, &fs) == -1 ||
		cf_str(cx, "audit", obj, "on_error", 0, &onerr) == -1 ||
		cf_bool(cx, "audit", obj, "chain", &ac->ac_chain) == -1))
		return -1;
	if (cf_abspath(cx, "audit.path", path, &ac->ac_path) == -1)
		return -1;
	k = fs == NULL ? AUDIT_FSYNC_INTERVAL :
			 cf_name_index(cf_fsync_names, fs);
	if (k == -1)
		return cf_err(cx, "audit.fsync",
		    "\"%s\" is not always, interval or never", fs);
	ac->ac_fsync = (enum audit_fsync)k;
	k = onerr == NULL ? 0 : cf_name_index(cf_on_error_names, onerr);
	if (k == -1)
		return cf_err(cx, "audit.on_error",
		    "\"%s\" is not deny or allow", onerr);
	ac->ac_on_error_allow = k;
	return 0;
}

int
cf_load_netpolicy(struct cfctx *cx, const cJSON *root)
{
	static const char *const keys[] = { "mode", "table", "allow_loopback",
		"resolvers", "log_group", "sandbox_interfaces", "flush_on_exit",
		"inbound", NULL };
	struct netpolicy_conf *np = &cx->cf->cf_np;
	const cJSON *obj = cJSON_GetObjectItemCaseSensitive(root, "netpolicy");
	const char *mode = NULL, *table = "sluice", *p;
	uint64_t group = 7;
	int k;
	size_t dup;

	np->np_allow_loopback = 1;
	if (obj != NULL &&
	    (cf_keys(cx, "netpolicy", obj, keys) == -1 ||
		cf_str(cx, "netpolicy", obj, "mode", 0, &mode) == -1 ||
		cf_str(cx, "netpolicy", obj, "table", 0, &table) == -1 ||
		cf_bool(cx, "netpolicy", obj, "allow_loopback",
		    &np->np_allow_loopback) == -1 ||
		cf_bool(cx, "netpolicy", obj, "flush_on_exit",
		    &np->np_flush_on_exit) == -1 ||
		cf_uint(cx, "netpolicy", obj, "log_group", 0, 65535, &group) ==
		    -1 ||
		cf_strlist(cx, "netpolicy", obj, "resolvers", &np->np_resolvers,
		    &np->np_nresolvers, check_ip) == -1 ||
		cf_strlist(cx, "netpolicy", obj, "sandbox_interfaces",
		    &np->np_ifaces, &np->np_nifaces, check_iface) == -1))
		return -1;
	/* The secure default: kernel rules on, as a sidecar. */
	k = mode == NULL ? NETPOLICY_SIDECAR :
			   cf_name_index(cf_np_mode_names, mode);
	if (k == -1)
		return cf_err(cx, "netpolicy.mode",
		    "\"%s\" is not sidecar, gateway or off", mode);
	np->np_mode = (enum netpolicy_mode)k;
	if (cf_load_inbound(cx, obj) == -1)
		return -1;
	if (strlen(table) >= sizeof(np->np_table))
		return cf_err(cx, "netpolicy.table", "longer than %zu bytes",
		    sizeof(np->np_table) - 1);
	for (p = table; *p != '\0'; p++)
		if (!(isalnum((unsigned char)*p) || *p == '_' || *p == '-'))
			return cf_err(cx, "netpolicy.table",
			    "\"%s\": letters, digits, '_' and '-' only", table);
	snprintf(np->np_table, sizeof(np->np_table), "%s", table);
	np->np_log_group = (uint16_t)group;
	if (cf_strlist_default(cx, "netpolicy", &np->np_ifaces, &np->np_nifaces,
		"sbx-*") == -1)
		return -1;
	if (cf_has_dup(np->np_resolvers, np->np_nresolvers, &dup))
		return cf_err(cx, "netpolicy.resolvers",
		    "entry %zu listed twice", dup);
	/*
	 * The sidecar rules let exactly one uid out; it must not be root
	 * (root can rewrite the rules) nor be left to chance.
	 */
	if (np->np_mode == NETPOLICY_SIDECAR) {
		if (cx->cf->cf_user == NULL)
			return cf_err(cx, "user",
			    "required in sidecar mode (the uid the kernel rules let out)");
		if (cx->cf->cf_uid == 0)
			return cf_err(cx, "user",
			    "must not be root in sidecar mode");
	}
	/*
	 * In gateway mode sluice sits in the host's namespace and parses
	 * what sandboxes send: it must not do that as root.
	 */
	if (np->np_mode == NETPOLICY_GATEWAY &&
	    (cx->cf->cf_user == NULL || cx->cf->cf_uid == 0))
		return cf_err(cx, "user",
		    "required and not root in gateway mode");
	return 0;
}

int
cf_load_misc(struct cfctx *cx, const cJSON *root)
{
	static const char *const akeys[] = { "socket", NULL };
	static const char *const mkeys[] = { "listen", "group", NULL };
	struct config *cf = cx->cf;
	const cJSON *admin = cJSON_GetObjectItemCaseSensitive(root, "admin");
	const cJSON *met = cJSON_GetObjectItemCaseSensitive(root, "metrics");
	const char *sock = NULL, *listen = NULL, *sd = "/var/lib/sluice";
	const char *ready = NULL, *group = NULL;
	uint64_t workers = 1;

	if (cf_uint(cx, "", root, "workers", 1, CONFIG_WORKERS_MAX, &workers) ==
	    -1)
		return -1;
	cf->cf_workers = (unsigned)workers;
	if (admin != NULL &&
	    (cf_keys(cx, "admin", admin, akeys) == -1 ||
		cf_str(cx, "admin", admin, "socket", 0, &sock) == -1))
		return -1;
	if (met != NULL &&
	    (cf_keys(cx, "metrics", met, mkeys) == -1 ||
		cf_str(cx, "metrics", met, "listen", 0, &listen) == -1 ||
		cf_str(cx, "metrics", met, "group", 0, &group) == -1))
		return -1;
	cf->cf_metrics_gid = (gid_t)-1;
	if (group != NULL) {
		if (listen == NULL || strncmp(listen, "unix:", 5) != 0)
			return cf_err(cx, "metrics.group",
			    "only with a unix: listener");
		if (cf_group(cx, "metrics.group", group, &cf->cf_metrics_gid) ==
		    -1)
			return -1;
		if ((cf->cf_metrics_group =
			    cf_strdup(cx, "metrics.group", group)) == NULL)
			return -1;
	}
	if (cf_str(cx, "", root, "state_dir", 0, &sd) == -1 ||
	    cf_str(cx, "", root, "ready_file", 0, &ready) == -1)
		return -1;
	if (sock != NULL) {
		if (cf_abspath(cx, "admin.socket", sock,
			&cf->cf_admin_socket) == -1)
			return -1;
		if (strlen(sock) >= sizeof(((struct sockaddr_un *)0)->sun_path))
			return cf_err(cx, "admin.socket", "path too long");
	}
	if (listen != NULL) {
		struct sockaddr_storage ss;
		socklen_t sl;

		if (strncmp(listen, "unix:", 5) == 0) {
			if (listen[5] != '/' || strlen(listen + 5) >= 108)
				return cf_err(cx, "metrics.listen",
				    "unix: needs an absolute path under 108 bytes");
		} else if (cf_parse_listen(listen, &ss, &sl) == -1)
			return cf_err(cx, "metrics.listen",
			    "\"%s\" is not IP:PORT, [IPv6]:PORT or unix:/path",
			    listen);
		if ((cf->cf_metrics_listen =
			    cf_strdup(cx, "metrics.listen", listen)) == NULL)
			return -1;
	}
	if (cf_abspath(cx, "state_dir", sd, &cf->cf_state_dir) == -1 ||
	    (ready != NULL &&
		cf_abspath(cx, "ready_file", ready, &cf->cf_ready_file) == -1))
		return -1;
	return 0;
}

/*
 * In sidecar mode the kernel lets sluice reach only the listed resolvers:
 * an upstream named by host name needs at least one.
 */
int
cf_check_resolvers(struct cfctx *cx)
{
	const struct config *cf = cx->cf;
	size_t i;

	if (cf->cf_np.np_mode != NETPOLICY_SIDECAR || cf->cf_np.np_nresolvers)
		return 0;
	for (i = 0; i < cf->cf_nroutes; i++)
		if (!cf->cf_routes[i].rt_up.uc_host_is_ip)
			return cf_err(cx, "netpolicy.resolvers",
			    "required in sidecar mode: routes[%zu] names its upstream by host name (%s)",
			    i,
			    cf->cf_routes[i].rt_up.uc_host != NULL ?
				cf->cf_routes[i].rt_up.uc_host :
				"as requested");
	return 0;
}
