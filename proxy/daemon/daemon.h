/*
 * daemon: start-up, serving, reload and stop; the kernel-rule guard.
 */
#ifndef SLUICE_DAEMON_H
#define SLUICE_DAEMON_H

#include <stddef.h>
#include <stdint.h>

#include "proxy/config/config.h"
#include "proxy/relay/relay.h"
#include "proxy/util/util.h"

/* daemon.c: "sluice run" (DESIGN.md "Command line"). */
struct run_opts {
	const char *path;
	const char *netns;
	int no_netpolicy;
	int verbose;
};
/* Start, serve until SIGTERM/SIGINT, stop: an SL_EXIT_* code. */
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
/* Stop the timers and NFLOG; flush the table only with flush_on_exit. */
void netguard_stop(const struct config *cf);
/*
 * The desired ruleset for cf (also `sluice netpolicy`): a ruleset the
 * caller frees with np_ruleset_free(), or NULL with why set.
 */
struct np_ruleset *
netguard_ruleset(const struct config *cf, char *why, size_t whylen);

#endif
