/*
 * daemon: start-up, serving, reload and stop; the kernel-rule guard.
 */
#ifndef SLUICE_DAEMON_H
#define SLUICE_DAEMON_H

#include <stddef.h>
#include <stdint.h>

#include "proxy/config/config.h"
#include "proxy/dns/stub.h"
#include "proxy/relay/relay.h"
#include "proxy/sandbox/sandbox.h"
#include "proxy/util/util.h"

/*
 * exec.c: what "sluice exec" asks of serve() (docs/exec.md). The caller
 * fills the first part; serve() reports in the second.
 */
struct exec_run {
	const char *const *xr_argv; /* the command */
	/* Its environment: everything but es_environ and es_secrets, which
	 * come from this process and the policy's injected headers. */
	struct sandbox_env_spec xr_env;
	const char *const *xr_secrets; /* more secret values (a raw key) */
	size_t xr_nsecrets;
	const char *const *xr_hide; /* more paths to hide (a key file) */
	size_t xr_nhide;
	const char *xr_rundir;        /* the token's and CA's directory */
	const char *xr_bundle;        /* write the CA bundle here, or NULL */
	const char *xr_bundle_system; /* the system CAs it starts with */
	const struct dnsstub_host *xr_dns; /* the stub's names */
	size_t xr_ndns;
	uid_t xr_uid; /* as root: run the command as; (uid_t)-1: stay */
	gid_t xr_gid;
	/* Filled by serve(). */
	int xr_status;           /* the command's exit code; -1: none */
	uint64_t xr_dns_refused; /* queries not answered with an address */
	uint64_t xr_allowed;     /* requests and tunnels */
	uint64_t xr_denied;
};

/*
 * Start the sandboxed child with a socket per listener of cf (in order)
 * and the DNS stub's planted inside its namespace: *fds gets the listener
 * sockets. 0, or -1 with why set (nothing started).
 */
int exec_plant(struct exec_run *, const struct config *cf, int **fds, char *why,
    size_t whylen);
/*
 * Serve the DNS stub on env's loop, forward signals to the child, watch
 * for its exit (then drain() runs), and let it exec the command. 0, or -1
 * with why set (the child's own reason when it failed to confine itself).
 */
int
exec_go(struct proxy_env *env, void (*drain)(void), char *why, size_t whylen);
/* A child that was never told to go: killed and reaped. */
void exec_abort(void);
/* After the loop: the last dns.query lines, the child reaped, all freed. */
void exec_stop(void);

/* daemon.c: "sluice run" (DESIGN.md "Command line"). */
struct run_opts {
	const char *path;
	const char *netns;
	int no_netpolicy;
	int no_privsep; /* --single-process: no engine (debugging, benches) */
	int verbose;
	struct exec_run *exec; /* "sluice exec": serve its sandbox */
};
/*
 * Start, serve until SIGTERM/SIGINT (under exec: until the command
 * exits), stop: an SL_EXIT_* code, or under exec the command's.
 */
int serve(const struct run_opts *);
/*
 * On stderr, when a listener or resolver of cf sits on a port below 1024
 * that this machine lets any uid bind (also for "sluice check").
 */
void warn_unprivileged_ports(const struct config *cf);
/* Every warning about a policy (the ports above, injection, ...). */
void warn_policy(const struct config *cf);
/*
 * warn_allow.c: report mode, public-suffix wildcards, a TCP metrics
 * listener the sandbox reaches, allow_private on an allowlist route.
 * warn_public_suffix(): host is "*.S" with S on the built-in (partial)
 * list of common public suffixes.
 */
void warn_allowlist(const struct config *cf);
int warn_public_suffix(const char *host);

/*
 * revwatch.c: tokens.revoked_file watched with inotify (its directory, so
 * that a replaced file or a swapped ConfigMap symlink is seen), re-read
 * on change into env->pe_revfile: a revocation needs no reload. start
 * (again at each reload: the policy's fresh copy is used until the next
 * change) returns 0, or -1 with why (changes then need a reload).
 */
int revwatch_start(struct proxy_env *env, char *why, size_t whylen);
void revwatch_stop(void);

/*
 * notify.c: the service manager's notify protocol (sd_notify datagrams to
 * $NOTIFY_SOCKET: a path or an '@' abstract name), without libsystemd.
 * notify_init() connects (0 also when the variable is unset; -1 with why
 * for a malformed name or a socket it cannot reach) and unsets the
 * variable; notify_send() sends one message of "KEY=VALUE" lines and
 * never blocks or fails the caller; notify_reloading() sends
 * RELOADING=1 with MONOTONIC_USEC.
 */
int notify_init(char *why, size_t whylen);
void notify_send(const char *fmt, ...) SL_PRINTF(1, 2);
void notify_reloading(void);
void notify_close(void);

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
 * host, a destination of rt (its upstream, or a host an allowlist route
 * was asked for), resolved to addrs: allow sluice's uid to them on port
 * for max(ttl, 60) seconds (sidecar mode; else a no-op). Synchronous: the
 * kernel has the elements when it returns. At most 1,024 are remembered
 * (for a re-apply); past that the one closest to expiry is replaced.
 */
void
netguard_upstream_addrs(const struct route *rt, const char *host, uint16_t port,
    const struct sockaddr_storage *addrs, size_t n, uint32_t ttl);
/*
 * Gateway mode: one sandbox in (add) and/or one out (del) of the kernel's
 * anti-spoofing sets, in one batch, and in the ruleset verify compares.
 * 0 (also with the rules off), or -1 with why (nothing changed).
 */
int netguard_sandboxes(const struct sandbox_conf *add,
    const struct sandbox_conf *del, char *why, size_t whylen);
/* Stop the timers and NFLOG; flush the table only with flush_on_exit. */
void netguard_stop(const struct config *cf);
/* In a forked engine: close netlink, NFLOG and the timers; rules untouched. */
void netguard_forget(void);
/*
 * The desired ruleset for cf (also `sluice netpolicy`): a ruleset the
 * caller frees with np_ruleset_free(), or NULL with why set.
 */
struct np_ruleset *
netguard_ruleset(const struct config *cf, char *why, size_t whylen);

/*
 * sandboxes.c: the gateway's registry at run time (DESIGN.md "Gateway
 * identity"): the admin socket's "sandbox" commands (add, del, list),
 * persisted in state_dir and audited, and what a reload does to it.
 */
struct evbuffer;
/* "sandbox ARGS..." from uid: 0 with answer lines in out, or -1 with why. */
int daemon_sandbox_cmd(struct proxy_env *env, int argc, char **argv, uid_t uid,
    struct evbuffer *out, char *why, size_t whylen);
/*
 * At start, before the kernel rules: add the admin sandboxes persisted in
 * state_dir. 0 (1: some were left out, said in why), or -1 with why.
 */
int daemon_sandboxes_open(struct proxy_env *env, char *why, size_t whylen);
/* Once state_dir exists, before the drop: keep it open for the saves. */
void daemon_sandboxes_statedir(const struct proxy_env *env);
/* On stderr: a gateway policy without sandboxes (nothing is served). */
void warn_sandboxes(const struct config *cf);
/* Put a reloaded policy's sandboxes in force (after its rules). */
void daemon_sandboxes_reload(struct proxy_env *env, const struct config *cf);

#endif
