/*
 * engine.c: privilege separation (DESIGN.md "Privilege separation and
 * self-confinement", docs/architecture.md). The parent forks engines that
 * proxy; it keeps the kernel rules, the resolver, the audit file, the
 * admin socket and the signals, and never reads a byte the sandbox sends.
 * engine_dns.c answers the engines' name questions.
 */
#ifndef SLUICE_ENGINE_H
#define SLUICE_ENGINE_H

#include <sys/socket.h>
#include <sys/types.h>

#include <stddef.h>
#include <stdint.h>

#include "proxy/config/config.h"
#include "proxy/http/reason.h"
#include "proxy/relay/relay.h"
#include "proxy/token/token.h"

#define ENGINE_HOST_MAX  256 /* bytes of a host asked for, NUL too */
#define ENGINE_MAX_ADDRS 32  /* addresses of one answer */
/* Engines alive at once: `workers` serving, as many draining a reload. */
#define ENGINE_SLOTS 16

/* Exit statuses of an engine (besides 0, drained). */
#define ENGINE_EXIT_CHANNEL 3 /* the parent's channel ended or was bad */
#define ENGINE_EXIT_SETUP   4 /* confinement or set-up failed */

/* Messages: engine to parent. */
enum {
	EM_READY = 1, /* empty: confined and serving */
	EM_RESOLVE,   /* struct em_resolve */
};
/* Parent to engine. */
enum {
	PM_RESOLVED = 101, /* struct pm_resolved */
	PM_REVOKE,         /* struct pm_revoke */
	PM_REVFILE,        /* the revoked_file's jtis, each ended by '\n' */
	PM_SANDBOX_ADD,    /* struct sandbox_conf */
	PM_SANDBOX_DEL,    /* struct pm_sandbox_del */
	PM_DRAIN,          /* empty: stop accepting, finish, exit 0 */
};

struct em_resolve {
	uint64_t er_id;
	uint16_t er_port;
	char er_host[ENGINE_HOST_MAX]; /* NUL-terminated, NUL-padded */
};

struct pm_resolved {
	uint64_t pr_id;
	uint32_t pr_n;
	uint32_t pr_ttl;
	uint32_t pr_reason; /* pr_n 0: why (enum reason) */
	uint32_t pr_pad;
	struct sockaddr_storage pr_addrs[ENGINE_MAX_ADDRS];
};

struct pm_revoke {
	char pv_jti[TOKEN_MAX_STR + 1];
};

struct pm_sandbox_del {
	char pd_id[SANDBOX_ID_MAX + 1];
};

/* What the daemon gives the engines. */
struct engine_ops {
	/* In a new engine, first: drop what only the parent may hold. */
	void (*eo_child_forget)(void);
	/* In an engine: stop accepting, finish, then leave the loop. */
	void (*eo_drain)(void);
	/* In the parent: the first engine is serving (ready), or not. */
	void (*eo_ready)(int ok);
	/* In the parent: the last engine is gone after engine_stop(). */
	void (*eo_stopped)(void);
};

/*
 * Start the first engine for env (whose listeners, state and audit are
 * open). 0, or -1 with why. eo_ready later says whether it serves.
 * Returns 1 in the engine itself, which then runs the loop and calls
 * engine_exit() after it (as an engine forked later does: it returns
 * into the loop of the parent's callback that forked it).
 */
int engine_start(struct proxy_env *env, const struct engine_ops *ops, char *why,
    size_t whylen);
/* Whether engines run (privilege separation is on). */
int engine_on(void);
/* Whether this process is an engine. */
int engine_is_engine(void);
/* In an engine whose loop has ended (drained): exit. */
void engine_exit(void);
/* A reload is in force: a new engine serves it, the old ones drain. */
void engine_reload(void);
/* Drain every engine; eo_stopped runs once the last has exited. */
void engine_stop(void);
/* In the parent after the loop: free what engine_start() made. */
void engine_close(void);
/* Tell the engines: an admin revocation, the revoked_file list, sandboxes. */
void engine_revoke(const char *jti);
void engine_revfile(char *const *jtis, size_t n);
void engine_sandbox_add(const struct sandbox_conf *);
void engine_sandbox_del(const char *id);
/* The engines' pids (status); how many. */
size_t engine_pids(pid_t *out, size_t max);
uint64_t engine_restarts(void);

/* engine_dns.c. The answer for (slot, id): n allowed addresses. */
typedef void
edns_answer_cb(int slot, uint64_t id, const struct sockaddr_storage *addrs,
    size_t n, uint32_t ttl, enum reason why);
void edns_on_answer(edns_answer_cb *);
/*
 * Resolve host:port for engine slot, if a route of cf dials it; -1 when
 * none does (or out of memory): nothing is resolved then.
 */
int edns_ask(int slot, struct config *cf, const char *host, uint16_t port,
    uint64_t id);
/* An engine is gone: its questions are dropped. */
void edns_forget(int slot);
/* In a new engine: the parent's questions are let go (not cancelled). */
void edns_drop_all(void);

#endif
