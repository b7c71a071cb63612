/*
 * The gateway's sandbox registry at run time (DESIGN.md "Gateway
 * identity", docs/deployment.md): the admin socket's "sandbox add ID IFACE
 * ADDR...", "sandbox del ID" and "sandbox list". A change is all or
 * nothing: the registry, the kernel's anti-spoofing sets (netguard.c, one
 * batch) and <state_dir>/sandboxes.json move together, or none of them
 * does; then it is audited (sandbox.add, sandbox.del).
 */
#include <sys/types.h>

#include <fcntl.h>
#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>

#include "proxy/config/config.h"
#include "proxy/daemon/daemon.h"
#include "proxy/daemon/engine.h"
#include "proxy/ops/ops.h"
#include "proxy/relay/relay.h"
#include "proxy/util/util.h"

/* state_dir, opened before the privilege drop (its parents may be closed). */
static int sbx_dirfd = -1;

/* "198.18.0.2 2001:2::2": a sandbox's addresses, for list and audit. */
static void
sbx_addrs_str(const struct sandbox_conf *sc, char *buf, size_t len)
{
	char a[64];
	size_t i, n = 0;

	buf[0] = '\0';
	for (i = 0; i < sc->sc_naddrs && n < len; i++) {
		sandbox_addr_str(&sc->sc_addrs[i], a, sizeof(a));
		n += (size_t)snprintf(buf + n, len - n, "%s%s",
		    i > 0 ? " " : "", a);
	}
}

static void
sbx_audit(struct proxy_env *env, const char *event,
    const struct sandbox_conf *sc, uid_t uid)
{
	char addrs[SANDBOX_MAX_ADDRS * 48];

	sbx_addrs_str(sc, addrs, sizeof(addrs));
	audit_begin(env->pe_audit, event);
	audit_add_cstr(env->pe_audit, "sandbox", sc->sc_id);
	audit_add_cstr(env->pe_audit, "interface", sc->sc_iface);
	audit_add_cstr(env->pe_audit, "addresses", addrs);
	audit_add_uint(env->pe_audit, "uid", (uint64_t)uid);
	if (audit_commit(env->pe_audit) == -1)
		log_warnx("admin: %s %s done, but its audit line was not "
			  "written",
		    event, sc->sc_id);
	log_info("admin: %s %s (uid %lu)", event, sc->sc_id,
	    (unsigned long)uid);
}

static int
sbx_list(struct proxy_env *env, struct evbuffer *out)
{
	char addrs[SANDBOX_MAX_ADDRS * 48];
	struct sandbox *sb;
	size_t i, n = sbx_registry_count(env->pe_sbx);
	int64_t conns;

	for (i = 0; i < n; i++) {
		sb = sbx_registry_at(env->pe_sbx, i);
		sbx_addrs_str(&sb->sb_conf, addrs, sizeof(addrs));
		/* The engines' count (the parent serves none itself). */
		if ((conns = share_conns(sb->sb_conf.sc_id, &sb->sb_cell)) < 0)
			conns = (int64_t)sb->sb_conns;
		evbuffer_add_printf(out, "%s %s %s %s connections %llu\n",
		    sb->sb_conf.sc_id, sb->sb_conf.sc_iface,
		    sb->sb_admin ? "admin" : "policy", addrs,
		    (unsigned long long)conns);
	}
	evbuffer_add_printf(out, "ok %zu sandbox%s\n", n, n == 1 ? "" : "es");
	return 0;
}

static int
sbx_add(struct proxy_env *env, int argc, char **argv, uid_t uid,
    struct evbuffer *out, char *why, size_t whylen)
{
	const struct config *cf = env->pe_cf;
	struct sandbox_conf sc;
	char w2[256];

	if (argc < 4) {
		snprintf(why, whylen, "usage: sandbox add ID IFACE ADDR...");
		return -1;
	}
	if (cf->cf_np.np_mode != NETPOLICY_GATEWAY) {
		snprintf(why, whylen,
		    "sandboxes are for gateway mode (netpolicy.mode)");
		return -1;
	}
	if (sandbox_conf_make(cf, argv[1], argv[2],
		(const char *const *)argv + 3, (size_t)argc - 3, &sc, why,
		whylen) == -1 ||
	    sbx_registry_add(env->pe_sbx, &sc, 1, why, whylen) == -1)
		return -1;
	if (netguard_sandboxes(&sc, NULL, why, whylen) == -1) {
		(void)sbx_registry_del(env->pe_sbx, sc.sc_id);
		return -1;
	}
	if (sbx_registry_save(env->pe_sbx, sbx_dirfd, cf->cf_state_dir, why,
		whylen) == -1) {
		if (netguard_sandboxes(NULL, &sc, w2, sizeof(w2)) == -1)
			log_warnx("admin: sandbox add %s: %s", sc.sc_id, w2);
		(void)sbx_registry_del(env->pe_sbx, sc.sc_id);
		return -1;
	}
	engine_sandbox_add(&sc);
	sbx_audit(env, "sandbox.add", &sc, uid);
	evbuffer_add_printf(out, "ok added %s\n", sc.sc_id);
	return 0;
}

static int
sbx_del(struct proxy_env *env, int argc, char **argv, uid_t uid,
    struct evbuffer *out, char *why, size_t whylen)
{
	const struct config *cf = env->pe_cf;
	struct sandbox_conf sc;
	struct sandbox *sb;
	char w2[256];

	if (argc != 2) {
		snprintf(why, whylen, "usage: sandbox del ID");
		return -1;
	}
	if ((sb = sbx_registry_find(env->pe_sbx, argv[1])) == NULL) {
		snprintf(why, whylen, "no sandbox \"%.*s\"", SANDBOX_ID_MAX,
		    argv[1]);
		return -1;
	}
	if (!sb->sb_admin) {
		snprintf(why, whylen,
		    "sandbox %s is the policy's: remove it there and reload",
		    sb->sb_conf.sc_id);
		return -1;
	}
	sc = sb->sb_conf;
	if (netguard_sandboxes(NULL, &sc, why, whylen) == -1)
		return -1;
	(void)sbx_registry_del(env->pe_sbx, sc.sc_id);
	if (sbx_registry_save(env->pe_sbx, sbx_dirfd, cf->cf_state_dir, why,
		whylen) == -1) {
		/* Back as it was: the file still names it. */
		if (sbx_registry_add(env->pe_sbx, &sc, 1, w2, sizeof(w2)) ==
			-1 ||
		    netguard_sandboxes(&sc, NULL, w2, sizeof(w2)) == -1)
			log_warnx("admin: sandbox del %s: %s", sc.sc_id, w2);
		return -1;
	}
	engine_sandbox_del(sc.sc_id);
	sbx_audit(env, "sandbox.del", &sc, uid);
	evbuffer_add_printf(out, "ok deleted %s\n", sc.sc_id);
	return 0;
}

int
daemon_sandbox_cmd(struct proxy_env *env, int argc, char **argv, uid_t uid,
    struct evbuffer *out, char *why, size_t whylen)
{
	if (strcmp(argv[0], "list") == 0 && argc == 1)
		return sbx_list(env, out);
	if (strcmp(argv[0], "add") == 0)
		return sbx_add(env, argc, argv, uid, out, why, whylen);
	if (strcmp(argv[0], "del") == 0)
		return sbx_del(env, argc, argv, uid, out, why, whylen);
	snprintf(why, whylen,
	    "usage: sandbox add ID IFACE ADDR... | sandbox del ID | sandbox "
	    "list");
	return -1;
}

void
daemon_sandboxes_reload(struct proxy_env *env, const struct config *cf)
{
	char why[256];
	int rc;

	why[0] = '\0';
	rc = sbx_registry_sync(env->pe_sbx, cf, why, sizeof(why));
	if (rc == -1)
		log_warnx("reload: sandboxes: %s", why);
	else if (rc == 1) {
		log_warnx("reload: %s", why);
		if (sbx_registry_save(env->pe_sbx, sbx_dirfd, cf->cf_state_dir,
			why, sizeof(why)) == -1)
			log_warnx("reload: sandboxes: %s", why);
	}
}

int
daemon_sandboxes_open(struct proxy_env *env, char *why, size_t whylen)
{
	return sbx_registry_load(env->pe_sbx, env->pe_cf,
	    env->pe_cf->cf_state_dir, why, whylen);
}

void
daemon_sandboxes_statedir(const struct proxy_env *env)
{
	if (sbx_dirfd == -1 &&
	    (sbx_dirfd = open(env->pe_cf->cf_state_dir,
		 O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) == -1)
		log_warn("state_dir: %s", env->pe_cf->cf_state_dir);
}

void
warn_sandboxes(const struct config *cf)
{
	if (cf->cf_np.np_mode != NETPOLICY_GATEWAY || cf->cf_nsandboxes > 0)
		return;
	(void)fprintf(stderr,
	    "sluice: warning: gateway mode with no sandboxes: every "
	    "connection is refused (sandbox_unknown) until one is "
	    "registered%s\n",
	    cf->cf_admin_socket != NULL ?
		" with \"sluice admin sandbox add\"" :
		"; there is no admin.socket to add one at run time either");
	(void)fflush(stderr);
}
