/*
 * The daemon: "sluice run" and "sluice check". Start-up in the order of
 * DESIGN.md (load and validate, keys, netpolicy, listeners, audit, drop
 * privileges, ready), each step fail-closed; then signals (reload, drain,
 * audit reopen). The shared state is one struct proxy_env, owned here and
 * handed to the listeners, connections, netguard and the admin socket:
 * nothing outside this file (and main.c) calls into it.
 */
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>

#include <linux/capability.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <openssl/evp.h>

#include "netpolicy/netpolicy.h"
#include "proxy/config/config.h"
#include "proxy/daemon/daemon.h"
#include "proxy/daemon/engine.h"
#include "proxy/dns/resolve.h"
#include "proxy/ops/ops.h"
#include "proxy/relay/relay.h"
#include "proxy/token/store.h"
#include "proxy/util/util.h"

#define DAEMON_TOKEN_CACHE 4096 /* verified tokens kept */

static struct proxy_env d_env; /* base, current policy, audit, state */
static char *d_path;
static struct event *d_drain_ev;
static int d_drain_cut; /* the drain's deadline passed: 503s going out */

/* How long the drain_timeout 503s may take to go out before the end. */
#define DRAIN_CUT_GRACE_MS 500
static struct event *d_prune_ev;
static time_t d_started;
static uint64_t d_reloads, d_reload_failures;
static struct event *d_sigev[8]; /* the daemon's signals */
static size_t d_nsigev;
static int d_ready_fd_kept = -1; /* for the engine's ready */
static int d_engine_failed;      /* the first engine never served */
static int d_ready_fd;           /* below, with the ready file */
static void write_ready(int fd);

/* Status lines of the engines (privilege separation). */
static void
daemon_status_engines(struct evbuffer *out)
{
	pid_t pids[ENGINE_SLOTS];
	size_t i, n;

	evbuffer_add_printf(out, "privsep %d\n", engine_on());
	if (!engine_on())
		return;
	n = engine_pids(pids, ENGINE_SLOTS);
	evbuffer_add_printf(out, "engine_restarts %llu\nengine_pids",
	    (unsigned long long)engine_restarts());
	for (i = 0; i < n; i++)
		evbuffer_add_printf(out, " %ld", (long)pids[i]);
	evbuffer_add_printf(out, "\n");
}

/* Append "key value" status lines (admin "status"). */
static void
daemon_status(void *arg, struct evbuffer *out)
{
	const struct proxy_env *env = arg;
	const struct config *cf = env->pe_cf;
	char hex[65];
	size_t i;
	uint64_t hits = 0, misses = 0;

	for (i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", cf->cf_sha256[i]);
	if (engine_on())
		metrics_cache_totals(&hits, &misses);
	else if (env->pe_cache != NULL)
		token_cache_stats(env->pe_cache, &hits, &misses);
	evbuffer_add_printf(out,
	    "version %s\n"
	    "uptime_s %lld\n"
	    "policy_sha256 %s\n"
	    "policy_generation %llu\n"
	    "listeners %zu\n"
	    "routes %zu\n"
	    "connections %zu\n"
	    "draining %d\n"
	    "audit_failed %d\n"
	    "reloads %llu\n"
	    "reload_failures %llu\n"
	    "token_cache_hits %llu\n"
	    "token_cache_misses %llu\n",
	    SLUICE_VERSION, (long long)(time(NULL) - d_started), hex,
	    (unsigned long long)cf->cf_gen, cf->cf_nlisteners, cf->cf_nroutes,
	    engine_on() ? (size_t)metrics_conn_active_total() : conn_count(),
	    env->pe_draining,
	    env->pe_audit != NULL && audit_failed(env->pe_audit),
	    (unsigned long long)d_reloads,
	    (unsigned long long)d_reload_failures, (unsigned long long)hits,
	    (unsigned long long)misses);
	daemon_status_engines(out);
}

#define UNPRIV_PORT_START "/proc/sys/net/ipv4/ip_unprivileged_port_start"

/*
 * Sidecar mode: the sandbox shares our namespace, so a listener on a port
 * any uid may bind can be taken over while sluice is down (after a crash)
 * and receive what clients send there. Warn, one line per listener, with
 * the namespace's own boundary (this process's network namespace: for
 * "run --netns", the target one).
 */
/*
 * Credentials injected upstream while the kernel lets the sandbox out on
 * its own: the key stays out of the sandbox, but nothing stops it from
 * using any other way out (DESIGN.md "Credentials the sandbox never
 * sees").
 */
static void
warn_injection_open_egress(const struct config *cf)
{
	size_t i;

	if (cf->cf_np.np_mode != NETPOLICY_OFF)
		return;
	for (i = 0; i < cf->cf_nroutes; i++)
		if (cf->cf_routes[i].rt_up.uc_nheaders > 0) {
			(void)fprintf(stderr,
			    "sluice: warning: routes[%zu] \"%s\" injects "
			    "credentials upstream while netpolicy.mode is off: "
			    "the sandbox's other traffic is not held back, so "
			    "this protects little\n",
			    i, cf->cf_routes[i].rt_audience);
			return;
		}
}

/*
 * Each proxied request holds two descriptors (client, upstream): warn
 * when max_connections cannot be reached under the descriptor limit that
 * `sluice run` will have (it raises the soft limit to the hard one).
 */
#define FD_HEADROOM 64 /* listeners, audit, state, DNS, netlink, ... */

static void
warn_fd_limit(const struct config *cf)
{
	struct rlimit rl;
	uint64_t need = 2 * cf->cf_limits.max_connections + FD_HEADROOM;

	if (getrlimit(RLIMIT_NOFILE, &rl) == -1 || rl.rlim_max == RLIM_INFINITY)
		return;
	if (need > (uint64_t)rl.rlim_max)
		(void)fprintf(stderr,
		    "sluice: warning: limits.max_connections (%llu) needs "
		    "about %llu file descriptors, and the limit here is %llu: "
		    "raise it (ulimit -n, systemd LimitNOFILE=) or lower "
		    "max_connections\n",
		    (unsigned long long)cf->cf_limits.max_connections,
		    (unsigned long long)need, (unsigned long long)rl.rlim_max);
}

/* The soft descriptor limit up to the hard one (before any socket). */
static void
raise_fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) == -1)
			log_warn("setrlimit RLIMIT_NOFILE");
	}
}

void
warn_policy(const struct config *cf)
{
	warn_unprivileged_ports(cf);
	warn_injection_open_egress(cf);
	warn_fd_limit(cf);
	warn_sandboxes(cf);
	warn_allowlist(cf);
}

void
warn_unprivileged_ports(const struct config *cf)
{
	char buf[32], *end;
	unsigned long start = 1024; /* fixed before the sysctl existed */
	size_t i;
	ssize_t n;
	int fd;

	if (cf->cf_np.np_mode != NETPOLICY_SIDECAR)
		return;
	if ((fd = open(UNPRIV_PORT_START, O_RDONLY | O_CLOEXEC)) != -1) {
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n > 0) {
			buf[n] = '\0';
			errno = 0;
			start = strtoul(buf, &end, 10);
			if (errno != 0 || end == buf)
				start = 1024;
		}
	} else if (errno != ENOENT)
		fprintf(stderr, "sluice: warning: %s: %s (taking 1024)\n",
		    UNPRIV_PORT_START, strerror(errno));
	for (i = 0; i < cf->cf_nlisteners; i++) {
		const struct listener_conf *lc = &cf->cf_listeners[i];
		const struct sockaddr_storage *ss = &lc->lc_addr;
		unsigned port;

		if (ss->ss_family == AF_INET)
			port =
			    ntohs(((const struct sockaddr_in *)ss)->sin_port);
		else if (ss->ss_family == AF_INET6)
			port =
			    ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
		else
			continue;
		if (port < start)
			continue;
		fprintf(stderr,
		    "sluice: warning: listeners[%zu] \"%s\": port %u is at or "
		    "above net.ipv4.ip_unprivileged_port_start (%lu): any uid "
		    "here may bind it while sluice is down; use a port below "
		    "%lu\n",
		    i, lc->lc_name, port, start, start);
	}
	/*
	 * A resolver on a loopback address answers through the sandbox's
	 * own lo: only port 53's privilege keeps a process there from
	 * answering in its place (docs/netpolicy.md).
	 */
	for (i = 0; start <= 53 && i < cf->cf_np.np_nresolvers; i++) {
		const char *r = cf->cf_np.np_resolvers[i];

		if (np_ip_is_loopback(r))
			fprintf(stderr,
			    "sluice: warning: netpolicy.resolvers[%zu] %s is a "
			    "loopback address and "
			    "net.ipv4.ip_unprivileged_port_start is %lu: any uid "
			    "here may bind port 53 there and answer sluice's "
			    "queries; raise it above 53\n",
			    i, r, start);
	}
	(void)fflush(stderr);
}

/*
 * Privileges.
 */

/*
 * Become cf_user. With kernel rules to maintain (dynamic sets, verify,
 * NFLOG) CAP_NET_ADMIN is kept and every other capability is gone, also
 * from the bounding set; no_new_privs and non-dumpable always.
 */
static int
drop_privileges(const struct config *cf, int keep_netadmin, int keep_setpcap,
    char *why, size_t whylen)
{
	struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3,
		0 };
	struct __user_cap_data_struct data[2];
	unsigned long cap;
	gid_t gid = cf->cf_gid;

	if (cf->cf_user == NULL || geteuid() != 0)
		goto harden;
	/*
	 * Without CAP_SETPCAP (a container that did not grant it) the bounding
	 * set stays: no_new_privs below already keeps exec from gaining
	 * capabilities.
	 */
	for (cap = 0; cap <= 63; cap++)
		if (!(keep_netadmin && cap == CAP_NET_ADMIN) &&
		    !(keep_setpcap && cap == CAP_SETPCAP) &&
		    prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == -1 &&
		    errno != EINVAL && errno != EPERM) {
			snprintf(why, whylen, "PR_CAPBSET_DROP: %s",
			    strerror(errno));
			return -1;
		}
	if ((keep_netadmin || keep_setpcap) &&
	    prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) == -1) {
		snprintf(why, whylen, "PR_SET_KEEPCAPS: %s", strerror(errno));
		return -1;
	}
	if (setgroups(1, &gid) == -1 ||
	    setresgid(cf->cf_gid, cf->cf_gid, cf->cf_gid) == -1 ||
	    setresuid(cf->cf_uid, cf->cf_uid, cf->cf_uid) == -1) {
		snprintf(why, whylen, "cannot become user %s: %s", cf->cf_user,
		    strerror(errno));
		return -1;
	}
	memset(data, 0, sizeof(data));
	if (keep_netadmin)
		data[0].permitted |= 1u << (CAP_NET_ADMIN & 31);
	/* Only to empty an engine's bounding set (engine.c). */
	if (keep_setpcap)
		data[0].permitted |= 1u << (CAP_SETPCAP & 31);
	data[0].effective = data[0].permitted;
	if (syscall(SYS_capset, &hdr, data) == -1) {
		snprintf(why, whylen, "capset: %s", strerror(errno));
		return -1;
	}
	(void)prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0);
	if (setuid(0) != -1) {
		snprintf(why, whylen, "could regain root after dropping it");
		return -1;
	}
harden:
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == -1 ||
	    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == -1) {
		snprintf(why, whylen, "prctl: %s", strerror(errno));
		return -1;
	}
	return 0;
}

static int as_user(const struct config *);
static void as_root(int);

/*
 * state_dir holds budgets and revocations: private to sluice's user, mode
 * 0700, whether sluice made it or found it. Root may not open (read) a
 * directory the user owns without CAP_DAC_READ_SEARCH, nor change its
 * mode without CAP_FOWNER: so it is held by an O_PATH descriptor, given
 * to the user with fchownat, and its mode is set by its owner.
 */
static int
prepare_state_dir(const struct config *cf, char *why, size_t whylen)
{
	struct stat st;
	int fd, dfd, was = 0, rc = 0, err = 0;

	if (mkdir(cf->cf_state_dir, 0700) == -1 && errno != EEXIST) {
		snprintf(why, whylen, "state_dir: %s: %s", cf->cf_state_dir,
		    strerror(errno));
		return -1;
	}
	fd = open(cf->cf_state_dir,
	    O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd == -1 || fstat(fd, &st) == -1) {
		snprintf(why, whylen, "state_dir: %s: %s", cf->cf_state_dir,
		    errno == ELOOP || errno == ENOTDIR ?
			"not a directory (or a symbolic link)" :
			strerror(errno));
		if (fd != -1)
			close(fd);
		return -1;
	}
	if ((st.st_mode & 077) != 0) {
		if (cf->cf_user != NULL && st.st_uid == cf->cf_uid)
			was = as_user(cf);
		dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd == -1 || fchmod(dfd, 0700) == -1) {
			err = errno;
			rc = -1;
		}
		if (dfd != -1)
			close(dfd);
		as_root(was);
	}
	if (rc == 0 && cf->cf_user != NULL && geteuid() == 0 &&
	    st.st_uid != cf->cf_uid &&
	    fchownat(fd, "", cf->cf_uid, cf->cf_gid, AT_EMPTY_PATH) == -1) {
		err = errno;
		rc = -1;
	}
	if (rc == -1)
		snprintf(why, whylen, "state_dir: %s: %s", cf->cf_state_dir,
		    strerror(err));
	close(fd);
	return rc;
}

/*
 * Point the resolver at cf's servers. IMPORTANT: the resolver opens its
 * sockets per query, so queries must start only after the privilege drop:
 * the kernel rules let only sluice's own uid reach the resolvers.
 */
static int
dns_setup(const struct config *cf, char *why, size_t whylen)
{
	return resolve_configure(cf->cf_np.np_resolvers,
	    cf->cf_np.np_nresolvers, why, whylen);
}

/*
 * Reload and drain.
 */
/*
 * The "intercept" section is in force from start to stop (the CA, its key
 * and the certificate clients were given): a reload keeps it as it is.
 */
/* Two optional strings of a policy: both unset, or equal. */
static int
same_str(const char *a, const char *b)
{
	return (a == NULL && b == NULL) ||
	    (a != NULL && b != NULL && strcmp(a, b) == 0);
}

static int
intercept_same(const struct intercept_conf *a, const struct intercept_conf *b)
{
	return a->ic_on == b->ic_on && a->ic_ephemeral == b->ic_ephemeral &&
	    same_str(a->ic_cert_file, b->ic_cert_file) &&
	    same_str(a->ic_key_file, b->ic_key_file) &&
	    same_str(a->ic_cert_out, b->ic_cert_out) &&
	    a->ic_ca_days == b->ic_ca_days &&
	    a->ic_leaf_days == b->ic_leaf_days &&
	    a->ic_max_leaves == b->ic_max_leaves;
}

static int
reload_compatible(const struct config *o, const struct config *n, char *why,
    size_t whylen)
{
	char why2[512];

	if (!listener_same(n))
		snprintf(why, whylen,
		    "%s: listeners: addresses cannot change on reload (restart)",
		    n->cf_path);
	else if (!same_str(o->cf_user, n->cf_user))
		snprintf(why, whylen, "%s: user: cannot change on reload",
		    n->cf_path);
	else if (!same_str(o->cf_state_dir, n->cf_state_dir))
		snprintf(why, whylen, "%s: state_dir: cannot change on reload",
		    n->cf_path);
	else if (!same_str(o->cf_admin_socket, n->cf_admin_socket))
		snprintf(why, whylen,
		    "%s: admin.socket: cannot change on reload", n->cf_path);
	else if (!same_str(o->cf_metrics_listen, n->cf_metrics_listen) ||
	    o->cf_metrics_gid != n->cf_metrics_gid)
		snprintf(why, whylen,
		    "%s: metrics.listen: cannot change on reload", n->cf_path);
	else if (o->cf_np.np_mode != n->cf_np.np_mode)
		snprintf(why, whylen,
		    "%s: netpolicy.mode: cannot change on reload", n->cf_path);
	else if (!intercept_same(&o->cf_intercept, &n->cf_intercept))
		snprintf(why, whylen, "%s: intercept: cannot change on reload",
		    n->cf_path);
	else if (intercept_check(d_env.pe_icpt, n, why2, sizeof(why2)) == -1)
		snprintf(why, whylen, "%s: %s", n->cf_path, why2);
	else
		return 0;
	return -1;
}

/* SHA-256 of a file's bytes, for policy.reload_failed; 0 or -1. */
static int
file_sha256(const char *path, unsigned char out[32])
{
	unsigned char buf[65536];
	EVP_MD_CTX *ctx;
	ssize_t n;
	int fd, rc = -1;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1)
		return -1;
	if ((ctx = EVP_MD_CTX_new()) != NULL &&
	    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1) {
		while ((n = read(fd, buf, sizeof(buf))) > 0)
			if (EVP_DigestUpdate(ctx, buf, (size_t)n) != 1)
				break;
		if (n == 0 && EVP_DigestFinal_ex(ctx, out, NULL) == 1)
			rc = 0;
	}
	EVP_MD_CTX_free(ctx);
	close(fd);
	return rc;
}

/* READY=1 and what is being served, after start-up and after a reload. */
static void
notify_serving(const char *prefix)
{
	notify_send("READY=1\nSTATUS=%sserving %zu listener%s, policy "
		    "generation %llu",
	    prefix, d_env.pe_cf->cf_nlisteners,
	    d_env.pe_cf->cf_nlisteners == 1 ? "" : "s",
	    (unsigned long long)d_env.pe_cf->cf_gen);
}

/*
 * All or nothing: first prepare every part of the new policy (parse and
 * read its files, check what a reload cannot change, attach upstreams,
 * open a new audit path, render the kernel rules) while nothing in force
 * changes; then commit. Applying the rules is the one commit step that
 * can still be refused, so it goes first; what follows cannot fail.
 */
static void
daemon_reload(void)
{
	unsigned char sha[32];
	struct audit_next *an = NULL;
	struct np_ruleset *rs = NULL;
	struct config *n;
	struct upstreams *ups = NULL;
	char why[1024];

	if (d_env.pe_draining)
		return;
	notify_reloading();
	snprintf(why, sizeof(why), "%s: reload failed", d_path);
	if ((n = config_load(d_path, d_env.pe_cf, why, sizeof(why))) == NULL ||
	    reload_compatible(d_env.pe_cf, n, why, sizeof(why)) == -1)
		goto refused;
	if ((ups = upstreams_new(n)) == NULL) {
		snprintf(why, sizeof(why), "%s: upstreams: out of memory",
		    d_path);
		goto refused;
	}
	if (d_env.pe_audit != NULL &&
	    (an = audit_prepare(d_env.pe_audit, &n->cf_audit, why,
		 sizeof(why))) == NULL)
		goto refused;
	if (netguard_prepare(n, &rs, why, sizeof(why)) == -1)
		goto refused;

	/* Commit. netguard_commit() takes rs, applied or not. */
	if (netguard_commit(n, rs, why, sizeof(why)) == -1) {
		rs = NULL;
		goto refused;
	}
	audit_apply(d_env.pe_audit, an);
	daemon_sandboxes_reload(&d_env, n);
	if (dns_setup(n, why, sizeof(why)) == -1)
		log_warnx("reload: %s (resolvers unchanged)", why);
	upstreams_unref(d_env.pe_ups);
	d_env.pe_ups = ups;
	config_unref(d_env.pe_cf);
	d_env.pe_cf = n;
	d_reloads++;
	if (revwatch_start(&d_env, why, sizeof(why)) == -1)
		log_warnx("reload: %s (its changes need a reload)", why);
	/* In force: only now may a newly read key's file go. */
	if (config_unlink_keys(d_env.pe_cf, why, sizeof(why)) == -1)
		log_warnx("reload: %s", why);
	metrics_configure(d_env.pe_cf);
	audit_policy_event(d_env.pe_audit, "policy.reload",
	    d_env.pe_cf->cf_sha256, NULL);
	metrics_reload(1);
	log_info("policy reloaded (generation %llu)",
	    (unsigned long long)d_env.pe_cf->cf_gen);
	/* A new engine serves it; the old ones drain. */
	engine_reload();
	if (engine_is_engine())
		return; /* the new engine: back to its loop */
	notify_serving("");
	return;

refused:
	/* The old policy, audit settings and rules stay in force. */
	audit_next_free(an);
	np_ruleset_free(rs);
	upstreams_unref(ups);
	config_unref(n);
	d_reload_failures++;
	log_warnx("reload refused: %s", why);
	audit_policy_event(d_env.pe_audit, "policy.reload_failed",
	    file_sha256(d_path, sha) == 0 ? sha : NULL, why);
	metrics_reload(0);
	/* The old policy is still served: the manager must know it. */
	notify_serving("reload refused; ");
}

static void
admin_reload_cb(void *arg)
{
	(void)arg;
	log_info("admin: reload requested");
	daemon_reload();
}

static int
admin_revoke_cb(void *arg, const char *jti, uid_t uid, char *why, size_t whylen)
{
	struct proxy_env *env = arg;

	if (admin_revoke(env->pe_revs, env->pe_audit, jti, uid, why, whylen) ==
	    -1)
		return -1;
	engine_revoke(jti);
	return 0;
}

static int
admin_sandbox_cb(void *arg, int argc, char **argv, uid_t uid,
    struct evbuffer *out, char *why, size_t whylen)
{
	return daemon_sandbox_cmd(arg, argc, argv, uid, out, why, whylen);
}

static const struct admin_ops daemon_admin_ops = {
	.ao_status = daemon_status,
	.ao_reload = admin_reload_cb,
	.ao_revoke = admin_revoke_cb,
	.ao_sandbox = admin_sandbox_cb,
	.ao_arg = &d_env,
};

static void
drain_check_cb(evutil_socket_t fd, short what, void *arg)
{
	struct timeval *deadline = arg, now = sl_mono_tv();

	(void)fd;
	(void)what;
	if (conn_count() == 0) {
		event_base_loopexit(d_env.pe_base, NULL);
		return;
	}
	if (!timercmp(&now, deadline, >=))
		return;
	if (!d_drain_cut) {
		/* Unanswered requests get their 503 first, briefly. */
		struct timeval grace = sl_ms_tv(DRAIN_CUT_GRACE_MS);
		size_t n;

		log_warnx("drain timeout: cutting %zu connections",
		    conn_count());
		d_drain_cut = 1;
		n = conn_drain_cut();
		if (n > 0 && conn_count() > 0) {
			timeradd(&now, &grace, deadline);
			return;
		}
	}
	conn_close_all();
	event_base_loopexit(d_env.pe_base, NULL);
}

/* Stop accepting, finish what is in flight (drain_timeout), then stop. */
static void
daemon_drain_conns(void)
{
	static struct timeval deadline;
	struct timeval tick = { 0, 50000 }, d;
	uint64_t ms = d_env.pe_cf->cf_limits.drain_timeout_ms;

	log_info("draining %zu connections", conn_count());
	notify_send("STOPPING=1\nSTATUS=draining %zu connections",
	    conn_count());
	/* New connections are refused, not queued: close the sockets. */
	listener_close_all();
	admin_close();
	conn_drain();
	if (conn_count() == 0) {
		/* Nothing in flight (sluice exec's command is done). */
		event_base_loopexit(d_env.pe_base, NULL);
		return;
	}
	deadline = sl_mono_tv();
	d = sl_ms_tv(ms);
	timeradd(&deadline, &d, &deadline);
	d_drain_ev =
	    event_new(d_env.pe_base, -1, EV_PERSIST, drain_check_cb, &deadline);
	if (d_drain_ev == NULL || event_add(d_drain_ev, &tick) == -1)
		event_base_loopexit(d_env.pe_base, NULL);
}

static void
daemon_drain(void)
{
	if (d_env.pe_draining)
		return;
	d_env.pe_draining = 1;
	if (engine_on() && !engine_is_engine()) {
		/* The engines drain; the parent's copies of the sockets go. */
		log_info("draining the engines");
		notify_send("STOPPING=1\nSTATUS=draining");
		listener_close_all();
		admin_close();
		engine_stop();
		return;
	}
	daemon_drain_conns();
}

/* Privsep: the engine side of a drain, and what the parent hands over. */
static void
engine_drain_cb(void)
{
	/* In an engine: as a single process drains. */
	daemon_drain();
}

static void
engine_forget_cb(void)
{
	size_t i;

	for (i = 0; i < d_nsigev; i++)
		if (d_sigev[i] != NULL)
			event_free(d_sigev[i]);
	d_nsigev = 0;
	admin_forget();
	netguard_forget();
	revwatch_stop();
	notify_close();
	revocations_forget_file(d_env.pe_revs);
	/* Never removed from here: the parent's (exit, not _exit, runs
	 * atexit handlers). */
	if (d_ready_fd != -1)
		close(d_ready_fd);
	d_ready_fd = -1;
	/* The budget's prune is the engine's (the parent stopped its own). */
	(void)event_add(d_prune_ev, &(struct timeval){ 3600, 0 });
}

static void
engine_ready_cb(int ok)
{
	if (!ok) {
		log_warnx("the engine did not start: not serving");
		d_engine_failed = 1;
		event_base_loopexit(d_env.pe_base, NULL);
		return;
	}
	write_ready(d_ready_fd_kept);
}

static void
engine_stopped_cb(void)
{
	event_base_loopexit(d_env.pe_base, NULL);
}

static const struct engine_ops daemon_engine_ops = {
	.eo_child_forget = engine_forget_cb,
	.eo_drain = engine_drain_cb,
	.eo_ready = engine_ready_cb,
	.eo_stopped = engine_stopped_cb,
};

static void
signal_cb(evutil_socket_t sig, short what, void *arg)
{
	(void)what;
	(void)arg;
	switch (sig) {
	case SIGHUP:
		daemon_reload();
		break;
	case SIGUSR1:
		if (audit_reopen(d_env.pe_audit) == -1)
			log_warnx(
			    "audit: reopen failed; still on the old file");
		break;
	default:
		daemon_drain();
		break;
	}
}

static void
prune_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	budget_prune(d_env.pe_budget, proxy_env_now(&d_env));
}

static void
resolved_cb(const struct route *rt, const char *host, uint16_t port,
    const struct sockaddr_storage *addrs, size_t n, uint32_t ttl)
{
	netguard_upstream_addrs(rt, host, port, addrs, n, ttl);
}

/* Whether uid/gid could read path by its mode bits (no ACLs). */
static int
readable_by(const char *path, uid_t uid, gid_t gid)
{
	struct stat st;

	if (stat(path, &st) == -1)
		return 0;
	if (st.st_uid == uid)
		return (st.st_mode & S_IRUSR) != 0;
	if (st.st_gid == gid)
		return (st.st_mode & S_IRGRP) != 0;
	return (st.st_mode & S_IROTH) != 0;
}

/*
 * After the privilege drop, SIGHUP reads the policy and its key files as
 * `user`: say now, not at the first reload, which of them it cannot read.
 */
static void
warn_unreadable_after_drop(const struct config *cf)
{
	size_t i, j;

	if (cf->cf_user == NULL || geteuid() != 0 || cf->cf_uid == 0)
		return;
	if (!readable_by(cf->cf_path, cf->cf_uid, cf->cf_gid))
		log_warnx("%s: not readable by user %s: reloads will fail",
		    cf->cf_path, cf->cf_user);
	for (i = 0; i < cf->cf_tokens.tc_nkeys; i++)
		if (!cf->cf_tokens.tc_key_unlink[i] &&
		    !readable_by(cf->cf_tokens.tc_key_files[i], cf->cf_uid,
			cf->cf_gid))
			log_warnx(
			    "%s: not readable by user %s: reloads will fail",
			    cf->cf_tokens.tc_key_files[i], cf->cf_user);
	for (i = 0; i < cf->cf_nroutes; i++)
		for (j = 0; j < cf->cf_routes[i].rt_up.uc_nheaders; j++) {
			const char *f =
			    cf->cf_routes[i].rt_up.uc_headers[j].uh_file;

			if (!readable_by(f, cf->cf_uid, cf->cf_gid))
				log_warnx(
				    "%s: not readable by user %s: reloads will fail",
				    f, cf->cf_user);
		}
}

/*
 * The ready file: opened (privileged) before the drop, the pid written
 * when ready, and removed on every exit that runs atexit handlers (a
 * drained SIGTERM/SIGINT, a fatal error after it was opened), so that a
 * supervisor never reads a dead pid. The descriptor stays open: after
 * the drop the directory may not let us unlink, and then the file is
 * emptied instead.
 */
static int d_ready_fd = -1;
static char *d_ready_path;

/* Whether the open ready file still holds what we wrote (or nothing). */
static int
ready_content_ours(void)
{
	char buf[32], want[32];
	ssize_t n;
	int wn;

	n = pread(d_ready_fd, buf, sizeof(buf) - 1, 0);
	if (n < 0)
		return 0;
	buf[n] = '\0';
	wn = snprintf(want, sizeof(want), "%ld\n", (long)getpid());
	/* Empty: opened by us, the pid not written yet. */
	return n == 0 || (n == wn && strcmp(buf, want) == 0);
}

static void
ready_remove(void)
{
	struct stat a, b;

	if (d_ready_fd == -1)
		return;
	/* Another sluice may have opened the same file since: leave it. */
	if (ready_content_ours() && fstat(d_ready_fd, &a) == 0) {
		if (lstat(d_ready_path, &b) == 0) {
			if (a.st_dev == b.st_dev && a.st_ino == b.st_ino &&
			    unlink(d_ready_path) == -1 &&
			    ftruncate(d_ready_fd, 0) == -1)
				log_warn("ready_file: %s", d_ready_path);
		} else if (errno != ENOENT && ftruncate(d_ready_fd, 0) == -1)
			log_warn("ready_file: %s", d_ready_path);
	}
	close(d_ready_fd);
	d_ready_fd = -1;
}

static int
ready_open(const struct config *cf, char *why, size_t whylen)
{
	int fd;

	if (cf->cf_ready_file == NULL)
		return -1;
	fd = open(cf->cf_ready_file,
	    O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd == -1) {
		snprintf(why, whylen, "ready_file: %s: %s", cf->cf_ready_file,
		    strerror(errno));
		return -1;
	}
	if ((d_ready_path = strdup(cf->cf_ready_file)) == NULL ||
	    atexit(ready_remove) != 0) {
		snprintf(why, whylen, "ready_file: out of memory");
		(void)unlink(cf->cf_ready_file);
		close(fd);
		return -1;
	}
	d_ready_fd = fd;
	return fd;
}

static void
write_ready(int fd)
{
	char buf[32];
	int n;

	log_info("ready");
	(void)fflush(stderr);
	if (fd != -1) {
		n = snprintf(buf, sizeof(buf), "%ld\n", (long)getpid());
		if (write(fd, buf, (size_t)n) != n)
			log_warn("ready_file");
		/* Kept open for ready_remove(). */
	}
	/* Last: a manager that sees READY=1 finds the ready file too. */
	notify_serving("");
}

/*
 * Root opening files in state_dir (mode 0700, owned by `user`) or an
 * audit log `user` owns would need CAP_DAC_OVERRIDE, which a container
 * or unit that grants only what sluice needs does not give. So they are
 * opened as `user` first: the effective uid and gid become the user's
 * (the saved ones stay 0, and the effective capabilities come back with
 * euid 0), and only when that fails, as root (a file root made, an audit
 * directory only root may write). Returns 1 when the ids changed, 0 when
 * there is no user to become, -1 when they could not be changed.
 */
static int
as_user(const struct config *cf)
{
	if (cf->cf_user == NULL || geteuid() != 0)
		return 0;
	if (setresgid((gid_t)-1, cf->cf_gid, (gid_t)-1) == -1)
		return -1;
	if (setresuid((uid_t)-1, cf->cf_uid, (uid_t)-1) == -1) {
		if (setresgid((gid_t)-1, 0, (gid_t)-1) == -1)
			fatal("cannot return to gid 0");
		return -1;
	}
	return 1;
}

static void
as_root(int was)
{
	if (was != 1)
		return;
	if (setresuid((uid_t)-1, 0, (uid_t)-1) == -1 ||
	    setresgid((gid_t)-1, 0, (gid_t)-1) == -1)
		fatal("cannot return to uid 0 after opening the state");
}

static struct budget *
state_budget(const struct config *cf, char *why, size_t whylen)
{
	struct budget *b;
	int was = as_user(cf);

	b = budget_open(cf->cf_state_dir, why, whylen);
	as_root(was);
	if (b == NULL && was == 1)
		b = budget_open(cf->cf_state_dir, why, whylen);
	return b;
}

static struct revocations *
state_revocations(const struct config *cf, char *why, size_t whylen)
{
	struct revocations *r;
	int was = as_user(cf);

	r = revocations_open(cf->cf_state_dir, why, whylen);
	as_root(was);
	if (r == NULL && was == 1)
		r = revocations_open(cf->cf_state_dir, why, whylen);
	return r;
}

#ifndef SLUICE_BENCH_NO_AUDIT
static struct audit *
state_audit(const struct config *cf, char *why, size_t whylen)
{
	struct audit *a;
	char first[1024];
	int was = as_user(cf);

	a = audit_open(&cf->cf_audit, cf->cf_state_dir, d_env.pe_base, why,
	    whylen);
	as_root(was);
	if (a == NULL && was == 1) {
		snprintf(first, sizeof(first), "%s", why);
		if ((a = audit_open(&cf->cf_audit, cf->cf_state_dir,
			 d_env.pe_base, why, whylen)) == NULL)
			log_warnx("audit: as user %s: %s", cf->cf_user, first);
	}
	return a;
}
#endif

/*
 * Start-up step 3, the state: budget, revocations, token cache and the
 * audit log (owned by the configured user). Logs why and returns -1 on
 * failure.
 */
static int
open_state(char *why, size_t whylen)
{
	if ((d_env.pe_budget = state_budget(d_env.pe_cf, why, whylen)) ==
		NULL ||
	    (d_env.pe_revs = state_revocations(d_env.pe_cf, why, whylen)) ==
		NULL ||
	    (d_env.pe_cache = token_cache_new(DAEMON_TOKEN_CACHE)) == NULL) {
		log_warnx("state_dir: %s", why);
		return -1;
	}
	metrics_budget(d_env.pe_budget);
#ifdef SLUICE_BENCH_NO_AUDIT
	/* A measurement build (CMake SLUICE_BENCH_NO_AUDIT): no audit log. */
	log_warnx("measurement build without an audit log: not for use");
#else
	if ((d_env.pe_audit = state_audit(d_env.pe_cf, why, whylen)) == NULL) {
		log_warnx("audit: %s", why);
		return -1;
	}
#endif
	/* lchown: never the target of a link planted at the path. */
	if (d_env.pe_audit != NULL && d_env.pe_cf->cf_user != NULL &&
	    geteuid() == 0 &&
	    lchown(d_env.pe_cf->cf_audit.ac_path, d_env.pe_cf->cf_uid,
		d_env.pe_cf->cf_gid) == -1)
		log_warn("audit: chown %s", d_env.pe_cf->cf_audit.ac_path);
	return 0;
}

/* Start-up step 3, the control sockets: admin and metrics. As above. */
static int
open_control(char *why, size_t whylen)
{
	if (d_env.pe_cf->cf_admin_socket != NULL &&
	    admin_open(d_env.pe_base, d_env.pe_cf->cf_admin_socket,
		d_env.pe_cf->cf_user != NULL ? d_env.pe_cf->cf_uid : geteuid(),
		&daemon_admin_ops, why, whylen) == -1) {
		log_warnx("admin.socket: %s", why);
		return -1;
	}
	if (d_env.pe_cf->cf_metrics_listen != NULL &&
	    metrics_listen(d_env.pe_base, d_env.pe_cf->cf_metrics_listen,
		d_env.pe_cf->cf_metrics_gid, why, whylen) == -1) {
		log_warnx("metrics.listen: %s", why);
		return -1;
	}
	return 0;
}

/* After the loop: the daemon.stop line, then everything in reverse. */
static void
run_stop(struct event **sigev, size_t n)
{
	size_t i;

	audit_begin(d_env.pe_audit, "daemon.stop");
	audit_add_int(d_env.pe_audit, "pid", (int64_t)getpid());
	(void)audit_commit(d_env.pe_audit);
	log_info("stopped");
	for (i = 0; i < n; i++)
		if (sigev[i] != NULL)
			event_free(sigev[i]);
	if (d_drain_ev != NULL)
		event_free(d_drain_ev);
	event_free(d_prune_ev);
	listener_close_all();
	conn_close_all();
	if (engine_on())
		engine_close();
	netguard_stop(d_env.pe_cf);
	metrics_close();
	admin_close();
	audit_close(d_env.pe_audit);
	d_env.pe_audit = NULL;
	token_cache_free(d_env.pe_cache);
	revocations_close(d_env.pe_revs);
	metrics_budget(NULL);
	budget_close(d_env.pe_budget);
	upstreams_unref(d_env.pe_ups);
	intercept_free(d_env.pe_icpt);
	d_env.pe_icpt = NULL;
	revwatch_stop();
	sbx_registry_free(d_env.pe_sbx);
	d_env.pe_sbx = NULL;
	config_unref(d_env.pe_cf);
	/*
	 * Connections are freed from the loop: run it once more, so their
	 * policies (and upstreams, with any DNS query) go before the resolver.
	 */
	event_base_loop(d_env.pe_base, EVLOOP_NONBLOCK);
	resolve_shutdown();
	event_base_free(d_env.pe_base);
	notify_close();
	free(d_path);
}

/* A start-up step failed after the exec child was made: it goes too. */
static int
serve_fail(struct exec_run *xr, int rc)
{
	if (xr != NULL)
		exec_abort();
	return rc;
}

/*
 * The event loop. With epoll's changelist, the adds, deletes and mods one
 * connection's state changes make in one loop pass go to the kernel as one
 * epoll_ctl per fd, not one each (sluice never dup()s a watched fd, the
 * case the changelist gets wrong).
 */
static struct event_base *
loop_new(void)
{
	struct event_config *ec;
	struct event_base *base;

	if ((ec = event_config_new()) == NULL)
		return NULL;
	(void)event_config_set_flag(ec, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
	base = event_base_new_with_config(ec);
	event_config_free(ec);
	return base;
}

/* Start-up step 1: load and validate (key files are read as part of it). */
static int
start_load(const struct exec_run *xr, char *why, size_t whylen)
{
	if ((d_env.pe_cf = config_load(d_path, NULL, why, whylen)) == NULL) {
		fprintf(stderr, "%s\n", why);
		return SL_EXIT_INVALID;
	}
	raise_fd_limit();
	/* Under exec the policy is sluice's own, its namespace a new one. */
	if (xr == NULL)
		warn_policy(d_env.pe_cf);
	if ((d_env.pe_sbx = sbx_registry_new()) == NULL ||
	    sbx_registry_sync(d_env.pe_sbx, d_env.pe_cf, why, whylen) == -1)
		fatalx("sandboxes: out of memory");
	if ((d_env.pe_base = loop_new()) == NULL ||
	    resolve_init(d_env.pe_base) == -1)
		fatalx("cannot create the event loop");
	if (upstream_init(d_env.pe_base, why, whylen) == -1 ||
	    (d_env.pe_ups = upstreams_new(d_env.pe_cf)) == NULL)
		fatalx("%s", why[0] ? why : "upstream setup failed");
	/* The local CA: its key file is read, its certificate written. */
	if (d_env.pe_cf->cf_intercept.ic_on &&
	    (d_env.pe_icpt = intercept_new(d_env.pe_cf, why, whylen)) == NULL) {
		log_warnx("%s: %s", d_path, why);
		return SL_EXIT_INVALID;
	}
	upstream_on_resolved(resolved_cb);
	metrics_configure(d_env.pe_cf);
	return 0;
}

/* Gateway: the admin sandboxes of the last run go into the rules too. */
static int
start_sandboxes(char *why, size_t whylen)
{
	int was = as_user(d_env.pe_cf), rc;

	rc = daemon_sandboxes_open(&d_env, why, whylen);
	as_root(was);
	/* As for the budget: a path only root may walk. */
	if (rc == -1 && was == 1)
		rc = daemon_sandboxes_open(&d_env, why, whylen);
	if (rc == -1) {
		log_warnx("state_dir: %s", why);
		return SL_EXIT_RUNTIME;
	}
	if (rc == 1)
		log_warnx("state_dir: %s", why);
	return 0;
}

/*
 * Start-up step 3: listeners (fds: exec's planted ones), state, audit,
 * admin, metrics, the keys to unlink, the ready file (*ready_fd).
 */
static int
start_open(struct exec_run *xr, const int *fds, int *ready_fd, char *why,
    size_t whylen)
{
	if (listener_open_all(&d_env, fds, why, whylen) == -1 ||
	    prepare_state_dir(d_env.pe_cf, why, whylen) == -1) {
		log_warnx("%s", why);
		return serve_fail(xr, SL_EXIT_RUNTIME);
	}
	if (open_state(why, whylen) == -1 || open_control(why, whylen) == -1)
		return serve_fail(xr, SL_EXIT_RUNTIME);
	if (d_env.pe_cf->cf_np.np_mode == NETPOLICY_GATEWAY && xr == NULL)
		daemon_sandboxes_statedir(&d_env);
	/*
	 * The policy is loaded and everything it names is open: the key
	 * files marked unlink_after_read go now, while we may still remove
	 * them (before the privilege drop), and never earlier (a start that
	 * fails must leave them for the next one).
	 */
	if (config_unlink_keys(d_env.pe_cf, why, whylen) == -1) {
		log_warnx("%s", why);
		return serve_fail(xr, SL_EXIT_RUNTIME);
	}
	*ready_fd = -1;
	if (d_env.pe_cf->cf_ready_file != NULL &&
	    (*ready_fd = ready_open(d_env.pe_cf, why, whylen)) == -1) {
		log_warnx("%s", why);
		return serve_fail(xr, SL_EXIT_RUNTIME);
	}
	warn_unreadable_after_drop(d_env.pe_cf);
	return 0;
}

/* Start-up step 4: drop privileges; then the resolver's sockets are ours. */
static int
start_drop(struct exec_run *xr, int use_np, int privsep, char *why,
    size_t whylen)
{
	if (drop_privileges(d_env.pe_cf, use_np, privsep, why, whylen) == -1 ||
	    dns_setup(d_env.pe_cf, why, whylen) == -1) {
		log_warnx("%s", why);
		return serve_fail(xr, SL_EXIT_RUNTIME);
	}
	/*
	 * sluice exec as root: everything it needs is open, and its upstream
	 * connections need no privilege. Keep none (uid 0 stays, powerless).
	 */
	if (xr != NULL && geteuid() == 0 &&
	    sandbox_drop_caps(why, whylen) == -1) {
		log_warnx("exec: %s", why);
		return serve_fail(xr, SL_EXIT_RUNTIME);
	}
	/* As the user: what it cannot read, it could not re-read. */
	if (revwatch_start(&d_env, why, whylen) == -1)
		log_warnx("%s (its changes need a reload)", why);
	return 0;
}

/*
 * Privilege separation: the engines serve, the ready file and READY=1
 * come when they say so (engine_ready_cb). The budget's prune is the
 * engines' (the table's lock lets several prune).
 */
static int
start_engines(int ready_fd)
{
	char why[512];

	d_ready_fd_kept = ready_fd;
	if (metrics_share() == -1)
		log_warnx("metrics: no shared memory: engine counts stay "
			  "per engine");
	if (share_open() == -1)
		log_warnx("sandbox limits: no shared memory: each engine "
			  "counts alone");
	switch (engine_start(&d_env, &daemon_engine_ops, why, sizeof(why))) {
	case -1:
		log_warnx("%s", why);
		return SL_EXIT_RUNTIME;
	case 1:
		return 0; /* the engine */
	default:
		break;
	}
	(void)event_del(d_prune_ev);
	return 0;
}

/*
 * The daemon's signals (reload, drain, audit reopen); none under exec,
 * where they are the command's (exec_go forwards them). The budget prune
 * timer, and the start lines of the audit log.
 */
static void
start_serving(const struct exec_run *xr, struct event **sigev, const int *sigs,
    size_t nsigs)
{
	struct timeval hour = { 3600, 0 };
	size_t i;

	for (i = 0; i < nsigs; i++) {
		sigev[i] = NULL;
		if (xr != NULL)
			continue;
		sigev[i] =
		    evsignal_new(d_env.pe_base, sigs[i], signal_cb, NULL);
		if (sigev[i] == NULL || evsignal_add(sigev[i], NULL) == -1)
			fatalx("cannot watch signal %d", sigs[i]);
	}
	d_prune_ev = event_new(d_env.pe_base, -1, EV_PERSIST, prune_cb, NULL);
	if (d_prune_ev == NULL || event_add(d_prune_ev, &hour) == -1)
		fatalx("cannot arm the budget prune timer");
	budget_prune(d_env.pe_budget, proxy_env_now(&d_env));

	audit_begin(d_env.pe_audit, "daemon.start");
	audit_add_cstr(d_env.pe_audit, "version", SLUICE_VERSION);
	audit_add_int(d_env.pe_audit, "pid", (int64_t)getpid());
	(void)audit_commit(d_env.pe_audit);
	audit_policy_event(d_env.pe_audit, "policy.load",
	    d_env.pe_cf->cf_sha256, NULL);
}

int
serve(const struct run_opts *op)
{
	static const int sigs[] = { SIGHUP, SIGTERM, SIGINT, SIGUSR1 };
	struct event **sigev = d_sigev;
	struct run_opts o = *op;
	struct exec_run *xr = o.exec;
	char why[1024];
	int ready_fd, use_np, rc, *fds = NULL;
	int privsep = xr == NULL && !o.no_privsep;

	log_init("sluice", o.verbose);
	/* SIG_ERR only for a bad signal number: these are good. */
	(void)signal(SIGPIPE, SIG_IGN);
	/* A file-size limit fails the audit write instead of killing us. */
	(void)signal(SIGXFSZ, SIG_IGN);
	d_started = time(NULL);
	if ((d_path = realpath(o.path, NULL)) == NULL)
		d_path = strdup(o.path);
	/* Before --netns (abstract names are per namespace) and the drop. */
	if (xr == NULL && notify_init(why, sizeof(why)) == -1)
		log_warnx("%s (no readiness notification)", why);

	if (o.netns != NULL &&
	    np_netns_enter(o.netns, why, sizeof(why)) == -1) {
		log_warnx("--netns %s: %s", o.netns, why);
		return SL_EXIT_RUNTIME;
	}
	if ((rc = start_load(xr, why, sizeof(why))) != 0)
		return rc;
	if (d_env.pe_cf->cf_np.np_mode == NETPOLICY_GATEWAY && xr == NULL &&
	    (rc = start_sandboxes(why, sizeof(why))) != 0)
		return rc;
	/*
	 * 2. Kernel rules before any listener exists (fail-closed). Under
	 * exec the sandbox's namespace has nothing but lo: no rules needed,
	 * and its listeners are made in there, by the child.
	 */
	use_np = d_env.pe_cf->cf_np.np_mode != NETPOLICY_OFF &&
	    !o.no_netpolicy && xr == NULL;
	if (netguard_start(&d_env, use_np, why, sizeof(why)) == -1) {
		log_warnx("netpolicy: %s", why);
		return SL_EXIT_RUNTIME;
	}
	if (xr != NULL &&
	    exec_plant(xr, d_env.pe_cf, &fds, why, sizeof(why)) == -1) {
		fprintf(stderr, "sluice: exec: %s\n", why);
		return SANDBOX_EXIT_SETUP;
	}
	if ((rc = start_open(xr, fds, &ready_fd, why, sizeof(why))) != 0 ||
	    (rc = start_drop(xr, use_np, privsep, why, sizeof(why))) != 0)
		return rc;
	start_serving(xr, sigev, sigs, SL_NELEM(sigs));
	d_nsigev = SL_NELEM(sigs);

	/* 5. Ready (under privilege separation, once the engine serves). */
	if (privsep && (rc = start_engines(ready_fd)) != 0)
		return rc;
	if (!privsep)
		write_ready(ready_fd);
	if (xr != NULL &&
	    exec_go(&d_env, daemon_drain, why, sizeof(why)) == -1) {
		fprintf(stderr, "sluice: exec: %s\n", why);
		daemon_drain();
	}
	event_base_dispatch(d_env.pe_base);
	if (engine_is_engine())
		engine_exit();
	/* No longer serving: a supervisor must not find our pid now. */
	ready_remove();

	if (xr != NULL) {
		exec_stop();
		metrics_totals(&xr->xr_allowed, &xr->xr_denied);
	}
	run_stop(sigev, d_nsigev);
	if (d_engine_failed)
		return SL_EXIT_RUNTIME;
	return xr != NULL ? xr->xr_status : SL_EXIT_OK;
}
