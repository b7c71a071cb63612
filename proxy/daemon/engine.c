/*
 * Privilege separation (DESIGN.md "Privilege separation and
 * self-confinement"; docs/architecture.md says which process holds what).
 *
 * The parent loads the policy and everything it names, applies the
 * kernel rules, opens the listeners, the state and the audit file, and
 * then forks an engine: a copy of itself that lets go of everything only
 * the parent may hold (netlink and NFLOG sockets, the admin socket, the
 * inotify watch, the signals, the audit file and its writer thread),
 * confines itself (sandbox_engine_confine(): no capabilities, uid `user`,
 * no_new_privs, Landlock, a seccomp allowlist that kills) and proxies.
 * The policy snapshot reaches the engine through the fork: the parent
 * never parsed a byte from the sandbox, so each engine starts from clean
 * state. What changes later travels over two socketpairs per engine:
 *
 *  - control (SOCK_STREAM, chan.c: fixed header, exact size per kind):
 *    the engine asks for upstream names (EM_RESOLVE: the parent resolves,
 *    checks, fills the kernel set, answers), says it serves (EM_READY);
 *    the parent sends revocations, the revoked_file list, sandboxes and
 *    the order to drain;
 *  - audit (SOCK_SEQPACKET, audit.c): the engine's lines, chained and
 *    written by the parent, one file and one chain for every engine.
 *
 * A malformed message ends the channel: an engine exits
 * (ENGINE_EXIT_CHANNEL); the parent kills the engine that sent it. When
 * an engine dies, the parent takes in the audit lines it left in the
 * socket, audits engine.exit and forks a new one holding the same
 * listening sockets (clients wait in the backlog), at once the first
 * time and with a doubling delay while it keeps dying. A reload forks a
 * new engine for the new policy; once it serves, the old ones drain.
 */
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <openssl/x509.h>

#include "proxy/daemon/chan.h"
#include "proxy/daemon/daemon.h"
#include "proxy/daemon/engine.h"
#include "proxy/dns/resolve.h"
#include "proxy/ops/ops.h"
#include "proxy/sandbox/sandbox.h"
#include "proxy/token/store.h"
#include "proxy/util/util.h"

#define ENGINE_OUT_MAX     ((size_t)8 << 20) /* control bytes queued */
#define ENGINE_BACKOFF_MIN 50                /* ms, the second restart */
#define ENGINE_BACKOFF_MAX 5000              /* ms */
#define ENGINE_STABLE_S    10  /* lived this long: the next restart at once */
#define ENGINE_AUDIT_BATCH 256 /* datagrams taken per wake */
#define ENGINE_ACK_RING    512 /* waiting lines of one engine */
#define ENGINE_REVFILE_MAX (CHAN_MAX_PAYLOAD)
#define ENGINE_FD_HEADROOM 64

_Static_assert(ENGINE_SLOTS >= 2 * CONFIG_WORKERS_MAX,
    "a reload's engines beside the draining ones");
_Static_assert(METRICS_ENGINE_SLOTS >= ENGINE_SLOTS, "a metrics slot each");

struct engine {
	pid_t e_pid; /* 0: the slot is free */
	uint64_t e_gen;
	unsigned e_pos; /* its listeners' shard (relay/listener.c) */
	int e_ready;
	int e_draining;
	int e_killed; /* the parent killed it (a bad message) */
	int e_ctlfd;  /* the chan's, for the test hook */
	struct chan *e_ch;
	int e_afd;
	struct event *e_aev;
	/*
	 * Waiting lines ('S'), answered in the order they came, each once
	 * its own line is durable or lost: a wait per line (struct
	 * audit_wait knows the line's place in the chain, also across a
	 * failed write), in a ring; a full ring stops the reading.
	 */
	struct engine_ack {
		struct audit_wait ea_wait;
		struct engine *ea_e;
		int ea_done, ea_ok;
	} e_ring[ENGINE_ACK_RING];
	uint64_t e_rhead, e_rtail; /* next to answer, next free */
	uint64_t e_acked;          /* answers sent */
	int e_rfull;               /* reading stopped: the ring is full */
	int e_reaped;              /* gone: its last lines, nobody waits */
	struct timespec e_born;
};

static struct {
	struct proxy_env *env;
	const struct engine_ops *ops;
	struct engine e[ENGINE_SLOTS];
	int on;
	int stopping;
	int first_ready;
	pid_t parent;
	struct event *chld_ev;
	struct event *restart_ev;
	struct event *kill_ev;
	struct event *hook_ev;   /* test builds: SIGUSR2 */
	struct event *reload_ev; /* forks the reload's engine */
	struct event *ack_ev;    /* sends the audit answers that are due */
	unsigned backoff_ms;
	uint64_t restarts;
	/* In an engine. */
	int in_engine;
	int slot;
	struct chan *ch;
	int ctlfd;
	struct event *sig_ev[3];
} eg;

static const struct chan_kind engine_parent_kinds[] = {
	{ EM_READY, 0, 0 },
	{ EM_RESOLVE, sizeof(struct em_resolve), sizeof(struct em_resolve) },
};

static const struct chan_kind engine_child_kinds[] = {
	{ PM_RESOLVED, sizeof(struct pm_resolved), sizeof(struct pm_resolved) },
	{ PM_REVOKE, sizeof(struct pm_revoke), sizeof(struct pm_revoke) },
	{ PM_REVFILE, 0, ENGINE_REVFILE_MAX },
	{ PM_SANDBOX_ADD, sizeof(struct sandbox_conf),
	    sizeof(struct sandbox_conf) },
	{ PM_SANDBOX_DEL, sizeof(struct pm_sandbox_del),
	    sizeof(struct pm_sandbox_del) },
	{ PM_DRAIN, 0, 0 },
};

static int engine_spawn(int slot, char *why, size_t whylen);

/* A slot's engine is gone, or about to be new: its counts are gone. */
static void
engine_slot_clear(int slot)
{
	metrics_engine_slot_clear(slot);
	share_slot_clear(slot);
}

static void
engine_arm(struct event *ev, uint64_t ms)
{
	struct timeval tv = sl_ms_tv(ms);

	(void)event_add(ev, &tv);
}
static void engine_child(int slot, unsigned pos, int ctl, int afd);
static void engine_reload_cb(evutil_socket_t, short, void *);

static void
engine_free_events(void)
{
	struct event **evs[] = { &eg.chld_ev, &eg.restart_ev, &eg.kill_ev,
		&eg.hook_ev, &eg.reload_ev, &eg.ack_ev };
	size_t i;

	for (i = 0; i < SL_NELEM(evs); i++) {
		if (*evs[i] != NULL)
			event_free(*evs[i]);
		*evs[i] = NULL;
	}
}

void
engine_close(void)
{
	/* After the last engine is gone (engine_stop()): the parent's own. */
	engine_free_events();
	eg.on = 0;
}

int
engine_on(void)
{
	return eg.on;
}

int
engine_is_engine(void)
{
	return eg.in_engine;
}

uint64_t
engine_restarts(void)
{
	return eg.restarts;
}

size_t
engine_pids(pid_t *out, size_t max)
{
	size_t i, n = 0;

	for (i = 0; i < ENGINE_SLOTS && n < max; i++)
		if (eg.e[i].e_pid > 0)
			out[n++] = eg.e[i].e_pid;
	return n;
}

static int
engine_alive(void)
{
	int i, n = 0;

	for (i = 0; i < ENGINE_SLOTS; i++)
		if (eg.e[i].e_pid > 0)
			n++;
	return n;
}

static int
engine_free_slot(void)
{
	int i;

	for (i = 0; i < ENGINE_SLOTS; i++)
		if (eg.e[i].e_pid == 0)
			return i;
	return -1;
}

/* Alive, not draining, and of the policy in force. */
static int
engine_is_current(const struct engine *e)
{
	return e->e_pid > 0 && !e->e_draining &&
	    e->e_gen == eg.env->pe_cf->cf_gen;
}

/*
 * How many engines serve, or will, the policy in force (ready: only
 * those that said so). There should be `workers` of them.
 */
static unsigned
engine_current(int ready)
{
	unsigned n = 0;
	int i;

	for (i = 0; i < ENGINE_SLOTS; i++)
		if (engine_is_current(&eg.e[i]) && (!ready || eg.e[i].e_ready))
			n++;
	return n;
}

static unsigned
engine_workers(void)
{
	unsigned n = eg.env->pe_cf->cf_workers;

	return n < 1 ? 1 : (n > CONFIG_WORKERS_MAX ? CONFIG_WORKERS_MAX : n);
}

/*
 * The place a new engine of the policy in force takes among `workers`:
 * the first no such engine holds. It accepts from that shard of every
 * listener (one dead leaves its shard's clients in the backlog for the
 * next); during a reload, the old engine of a place shares it.
 */
static unsigned
engine_free_pos(void)
{
	unsigned pos, n = engine_workers();
	int i;

	for (pos = 0; pos < n; pos++) {
		for (i = 0; i < ENGINE_SLOTS; i++)
			if (engine_is_current(&eg.e[i]) && eg.e[i].e_pos == pos)
				break;
		if (i == ENGINE_SLOTS)
			return pos;
	}
	return 0;
}

/*
 * The parent's side.
 */
static void
engine_send_all(uint32_t type, const void *p, size_t len)
{
	int i;

	for (i = 0; i < ENGINE_SLOTS; i++)
		if (eg.e[i].e_pid > 0 && eg.e[i].e_ch != NULL &&
		    chan_send(eg.e[i].e_ch, type, p, len) == -1)
			log_warnx("engine %ld: control queue full; message "
				  "dropped",
			    (long)eg.e[i].e_pid);
}

static void
engine_kill(struct engine *e, const char *why)
{
	if (e->e_pid <= 0 || e->e_killed)
		return;
	log_warnx("engine %ld: %s: killed", (long)e->e_pid, why);
	e->e_killed = 1;
	(void)kill(e->e_pid, SIGKILL);
}

static void
engine_answer_cb(int slot, uint64_t id, const struct sockaddr_storage *addrs,
    size_t n, uint32_t ttl, enum reason why)
{
	struct pm_resolved m;
	struct engine *e;

	if (slot < 0 || slot >= ENGINE_SLOTS)
		return;
	e = &eg.e[slot];
	if (e->e_pid <= 0 || e->e_ch == NULL)
		return;
	memset(&m, 0, sizeof(m));
	m.pr_id = id;
	m.pr_n = (uint32_t)(n > ENGINE_MAX_ADDRS ? ENGINE_MAX_ADDRS : n);
	m.pr_ttl = ttl;
	m.pr_reason = (uint32_t)why;
	if (m.pr_n > 0)
		memcpy(m.pr_addrs, addrs, m.pr_n * sizeof(addrs[0]));
	if (chan_send(e->e_ch, PM_RESOLVED, &m, sizeof(m)) == -1)
		log_warnx("engine %ld: control queue full", (long)e->e_pid);
}

/*
 * Every engine of the policy in force serves: the ones of older
 * policies finish what they have.
 */
static void
engine_took_over(void)
{
	int i;

	if (engine_current(1) < engine_workers())
		return;
	for (i = 0; i < ENGINE_SLOTS; i++) {
		struct engine *e = &eg.e[i];

		if (e->e_pid <= 0 || e->e_draining ||
		    e->e_gen == eg.env->pe_cf->cf_gen)
			continue;
		e->e_draining = 1;
		if (e->e_ch != NULL)
			(void)chan_send(e->e_ch, PM_DRAIN, NULL, 0);
	}
}

static void
engine_resolve_msg(struct engine *e, const unsigned char *p, size_t len)
{
	struct em_resolve m;
	int slot = (int)(e - eg.e);

	(void)len;
	memcpy(&m, p, sizeof(m));
	if (memchr(m.er_host, '\0', sizeof(m.er_host)) == NULL ||
	    m.er_host[0] == '\0' || m.er_port == 0) {
		engine_kill(e, "a malformed name question");
		return;
	}
	if (edns_ask(slot, eg.env->pe_cf, m.er_host, m.er_port, m.er_id) == -1)
		engine_answer_cb(slot, m.er_id, NULL, 0, 0,
		    REASON_DESTINATION_DENIED);
}

static void
engine_parent_msg_cb(struct chan *ch, uint32_t type, const unsigned char *p,
    size_t len, void *arg)
{
	struct engine *e = arg;

	(void)ch;
	switch (type) {
	case EM_READY:
		if (e->e_ready) {
			engine_kill(e, "said ready twice");
			return;
		}
		e->e_ready = 1;
		if (e->e_gen == eg.env->pe_cf->cf_gen && !e->e_draining)
			engine_took_over();
		/* Started: once all of the first `workers` serve. */
		if (!eg.first_ready && engine_current(1) >= engine_workers()) {
			eg.first_ready = 1;
			eg.ops->eo_ready(1);
		}
		break;
	case EM_RESOLVE:
		engine_resolve_msg(e, p, len);
		break;
	default:
		engine_kill(e, "an unexpected message");
		break;
	}
}

static void
engine_parent_end_cb(struct chan *ch, const char *why, void *arg)
{
	struct engine *e = arg;

	/*
	 * EOF: it exited (SIGCHLD follows); anything else: it is broken,
	 * and killed before its channel closes (it would exit on the EOF).
	 */
	if (strstr(why, "EOF") == NULL)
		engine_kill(e, why);
	chan_free(ch);
	e->e_ch = NULL;
}

/*
 * Send the answers that are due, in order; read on when there is room.
 * An answer says "up to line n": a run of answers alike goes as one.
 */
static void
engine_audit_flush(struct engine *e)
{
	struct engine_ack *ea;
	int ok;

	while (e->e_rhead != e->e_rtail &&
	    (ea = &e->e_ring[e->e_rhead % ENGINE_ACK_RING])->ea_done) {
		ok = ea->ea_ok;
		do {
			e->e_rhead++;
			e->e_acked++;
		} while (e->e_rhead != e->e_rtail &&
		    (ea = &e->e_ring[e->e_rhead % ENGINE_ACK_RING])->ea_done &&
		    ea->ea_ok == ok);
		if (e->e_afd != -1)
			(void)audit_remote_reply(e->e_afd, 0, ok, e->e_acked);
	}
	if (e->e_rfull && e->e_rtail - e->e_rhead < ENGINE_ACK_RING &&
	    e->e_aev != NULL) {
		e->e_rfull = 0;
		(void)event_add(e->e_aev, NULL);
		event_active(e->e_aev, EV_READ, 0);
	}
}

/* The answers of one turn of the loop, sent together (ack_ev). */
static void
engine_audit_ack_all(evutil_socket_t fd, short what, void *arg)
{
	int i;

	(void)fd;
	(void)what;
	(void)arg;
	for (i = 0; i < ENGINE_SLOTS; i++)
		if (eg.e[i].e_pid > 0 && !eg.e[i].e_reaped)
			engine_audit_flush(&eg.e[i]);
}

static void
engine_audit_ack_cb(void *arg, int ok)
{
	struct engine_ack *ea = arg;

	ea->ea_done = 1;
	ea->ea_ok = ok;
	/* The other lines made durable with it are answered this turn. */
	event_active(eg.ack_ev, EV_TIMEOUT, 0);
}

/* Forget the waits of an engine that is gone (nobody to answer). */
static void
engine_audit_forget(struct engine *e)
{
	for (; e->e_rhead != e->e_rtail; e->e_rhead++)
		audit_wait_cancel(eg.env->pe_audit,
		    &e->e_ring[e->e_rhead % ENGINE_ACK_RING].ea_wait);
}

/* Chain and write what the engine sent; kill it when it is not a line. */
static void
engine_audit_cb(evutil_socket_t fd, short what, void *arg)
{
	static unsigned char buf[AUDIT_LINE_MAX + 256];
	struct engine *e = arg;
	struct engine_ack *ea;
	char why[256];
	ssize_t n;
	int i, sync, rc, killed = 0;

	(void)what;
	audit_batch(eg.env->pe_audit, 1);
	for (i = 0; i < ENGINE_AUDIT_BATCH; i++) {
		if (e->e_rtail - e->e_rhead == ENGINE_ACK_RING &&
		    !e->e_reaped) {
			/* Waits enough: read on once some are answered. */
			e->e_rfull = 1;
			event_del(e->e_aev);
			break;
		}
		n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 || n == 0) {
			if (n == 0 && e->e_aev != NULL)
				event_del(e->e_aev);
			break;
		}
		if ((size_t)n > sizeof(buf)) {
			engine_kill(e, "an audit line over the size limit");
			event_del(e->e_aev);
			killed = 1;
			break;
		}
		ea = &e->e_ring[e->e_rtail % ENGINE_ACK_RING];
		memset(ea, 0, sizeof(*ea));
		ea->ea_e = e;
		rc = audit_remote_line(eg.env->pe_audit, buf, (size_t)n, &sync,
		    e->e_reaped ? NULL : &ea->ea_wait, engine_audit_ack_cb, ea,
		    why, sizeof(why));
		if (rc == -2) {
			engine_kill(e, why);
			event_del(e->e_aev);
			killed = 1;
			break;
		}
		if (!sync || e->e_reaped)
			continue;
		/* Answered now, or from the loop: in order either way. */
		e->e_rtail++;
		if (rc != 1) {
			ea->ea_done = 1;
			ea->ea_ok = rc == 0;
		}
	}
	audit_batch(eg.env->pe_audit, 0); /* one wake-up of the writer */
	if (!killed)
		engine_audit_flush(e);
}

static void
engine_audit_state_cb(int failed, void *arg)
{
	int i;

	(void)arg;
	for (i = 0; i < ENGINE_SLOTS; i++)
		if (eg.e[i].e_pid > 0 && eg.e[i].e_afd != -1)
			(void)audit_remote_reply(eg.e[i].e_afd, 1, failed, 0);
}

/*
 * Fork engines for the policy in force until there are `workers` of
 * them: after a death (restart: counted) or for a reload. No free slot:
 * for a reload, the engines still draining go now. Later tries come from
 * the restart timer.
 */
static void
engine_fill(int restart)
{
	char why[256];
	int slot, rc, i;

	while (!eg.stopping && engine_current(0) < engine_workers()) {
		if ((slot = engine_free_slot()) == -1) {
			for (i = 0; !restart && i < ENGINE_SLOTS; i++)
				if (eg.e[i].e_draining)
					engine_kill(&eg.e[i],
					    "drains too long");
			log_warnx("engine: no free slot until older engines "
				  "are gone; retrying");
			engine_arm(eg.restart_ev, ENGINE_BACKOFF_MIN);
			return;
		}
		if (restart) {
			eg.restarts++;
			metrics_engine_restart();
		}
		if ((rc = engine_spawn(slot, why, sizeof(why))) == 1)
			return; /* the new engine, in its loop */
		if (rc == -1) {
			/* Engines serving an older policy go on meanwhile. */
			log_warnx("engine: %s; retrying", why);
			engine_arm(eg.restart_ev,
			    restart ? ENGINE_BACKOFF_MAX : ENGINE_BACKOFF_MIN);
			return;
		}
	}
}

static void
engine_restart_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	engine_fill(1);
}

static void
engine_audit_exit(const struct engine *e, int status)
{
	struct audit *a = eg.env->pe_audit;

	audit_begin(a, "engine.exit");
	audit_add_int(a, "pid", (int64_t)e->e_pid);
	if (WIFSIGNALED(status)) {
		audit_add_int(a, "signal", WTERMSIG(status));
		audit_add_cstr(a, "signal_name", strsignal(WTERMSIG(status)));
	} else
		audit_add_int(a, "status", WEXITSTATUS(status));
	audit_add_bool(a, "drained", e->e_draining);
	audit_add_uint(a, "policy_generation", e->e_gen);
	(void)audit_commit(a);
}

static void
engine_schedule_restart(const struct timespec *born)
{
	struct timespec now;
	unsigned delay;

	/* Several gone at once: the restart already due replaces them all. */
	if (evtimer_pending(eg.restart_ev, NULL))
		return;
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (now.tv_sec - born->tv_sec >= ENGINE_STABLE_S)
		eg.backoff_ms = 0;
	delay = eg.backoff_ms;
	eg.backoff_ms = delay == 0 ?
	    ENGINE_BACKOFF_MIN :
	    (delay * 2 > ENGINE_BACKOFF_MAX ? ENGINE_BACKOFF_MAX : delay * 2);
	if (delay > 0)
		log_warnx("engine: restarting in %u ms", delay);
	engine_arm(eg.restart_ev, delay);
}

/* An engine is gone: what it wrote, its slot, and what comes next. */
static void
engine_reaped(struct engine *e, int status)
{
	int expected = e->e_draining || eg.stopping;
	struct timespec born = e->e_born;

	/* The lines it sent before it died are still in the socket. */
	e->e_reaped = 1;
	engine_audit_forget(e);
	if (e->e_afd != -1)
		engine_audit_cb(e->e_afd, EV_READ, e);
	if (e->e_ch != NULL)
		chan_free(e->e_ch);
	if (e->e_aev != NULL)
		event_free(e->e_aev);
	if (e->e_afd != -1)
		close(e->e_afd);
	edns_forget((int)(e - eg.e));
	engine_slot_clear((int)(e - eg.e));
	if (WIFSIGNALED(status))
		log_warnx("engine %ld: killed by signal %d (%s)",
		    (long)e->e_pid, WTERMSIG(status),
		    strsignal(WTERMSIG(status)));
	else if (WEXITSTATUS(status) != 0 || !expected)
		log_warnx("engine %ld: exited with status %d", (long)e->e_pid,
		    WEXITSTATUS(status));
	engine_audit_exit(e, status);
	memset(e, 0, sizeof(*e));
	e->e_afd = e->e_ctlfd = -1;
	metrics_engines_alive(engine_alive());
	if (!eg.first_ready && !eg.stopping) {
		/* The first engine never served: the start fails. */
		eg.stopping = 1;
		eg.ops->eo_ready(0);
		return;
	}
	if (!eg.stopping && engine_current(0) < engine_workers())
		engine_schedule_restart(&born);
	if (eg.stopping && engine_alive() == 0) {
		if (eg.kill_ev != NULL)
			(void)event_del(eg.kill_ev);
		eg.ops->eo_stopped();
	}
}

static void
engine_chld_cb(evutil_socket_t sig, short what, void *arg)
{
	pid_t pid;
	int status, i;

	(void)sig;
	(void)what;
	(void)arg;
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
		for (i = 0; i < ENGINE_SLOTS; i++)
			if (eg.e[i].e_pid == pid) {
				engine_reaped(&eg.e[i], status);
				break;
			}
}

static void
engine_kill_cb(evutil_socket_t fd, short what, void *arg)
{
	int i;

	(void)fd;
	(void)what;
	(void)arg;
	for (i = 0; i < ENGINE_SLOTS; i++)
		if (eg.e[i].e_pid > 0)
			engine_kill(&eg.e[i], "still running after the drain");
}

#ifdef SLUICE_TEST_HOOKS
/* Test builds: SIGUSR2 to the parent sends every engine a bad header. */
static void
engine_parent_hook_cb(evutil_socket_t sig, short what, void *arg)
{
	static const uint32_t bad[2] = { 0xdeadu, 0 };
	int i;

	(void)sig;
	(void)what;
	(void)arg;
	for (i = 0; i < ENGINE_SLOTS; i++)
		if (eg.e[i].e_pid > 0 && eg.e[i].e_ctlfd != -1 &&
		    write(eg.e[i].e_ctlfd, bad, sizeof(bad)) != sizeof(bad))
			log_warn("test hook");
}
#endif

static int
engine_spawn(int slot, char *why, size_t whylen)
{
	struct engine *e = &eg.e[slot];
	unsigned pos = engine_free_pos();
	int ctl[2], aud[2];
	pid_t pid;

	engine_slot_clear(slot);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl) == -1) {
		snprintf(why, whylen, "socketpair: %s", strerror(errno));
		return -1;
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, aud) == -1) {
		snprintf(why, whylen, "socketpair: %s", strerror(errno));
		close(ctl[0]);
		close(ctl[1]);
		return -1;
	}
	(void)fflush(stdout);
	(void)fflush(stderr);
	audit_fork_prepare(eg.env->pe_audit);
	if ((pid = fork()) != 0)
		audit_fork_done(eg.env->pe_audit);
	if (pid == -1) {
		snprintf(why, whylen, "fork: %s", strerror(errno));
		close(ctl[0]);
		close(ctl[1]);
		close(aud[0]);
		close(aud[1]);
		return -1;
	}
	if (pid == 0) {
		close(ctl[0]);
		close(aud[0]);
		engine_child(slot, pos, ctl[1], aud[1]);
		return 1;
	}
	close(ctl[1]);
	close(aud[1]);
	memset(e, 0, sizeof(*e));
	e->e_pid = pid;
	e->e_gen = eg.env->pe_cf->cf_gen;
	e->e_pos = pos;
	clock_gettime(CLOCK_MONOTONIC, &e->e_born);
	e->e_ctlfd = ctl[0];
	e->e_afd = aud[0];
	if (fcntl(aud[0], F_SETFL, O_NONBLOCK) == -1 ||
	    (e->e_ch = chan_new(eg.env->pe_base, ctl[0], engine_parent_kinds,
		 SL_NELEM(engine_parent_kinds), ENGINE_OUT_MAX,
		 engine_parent_msg_cb, engine_parent_end_cb, e)) == NULL ||
	    (e->e_aev = event_new(eg.env->pe_base, aud[0], EV_READ | EV_PERSIST,
		 engine_audit_cb, e)) == NULL ||
	    event_add(e->e_aev, NULL) == -1) {
		/* It dies when its channel closes; SIGCHLD reaps it. */
		snprintf(why, whylen, "engine channel: out of memory");
		engine_kill(e, "its channel could not be set up");
		return -1;
	}
	log_info("engine %ld started (policy generation %llu)", (long)pid,
	    (unsigned long long)e->e_gen);
	metrics_engines_alive(engine_alive());
	return 0;
}

/*
 * The parent's own work (an engine's audit lines, chained and written by
 * its writer thread; answers to the engines' questions) never needs to
 * run before the engine that asked for it stops: SCHED_BATCH (sched(7))
 * keeps a wake-up of the parent from preempting a busy engine on the
 * same core, so the lines of a whole loop pass are taken in one turn
 * (issue 17: CONNECT+plain, about one context switch fewer per
 * connection). It still gets its fair share of the CPU. Engines forked
 * later go back to SCHED_OTHER (engine_child()).
 */
static void
parent_sched_batch(struct proxy_env *env)
{
	struct sched_param sp = { .sched_priority = 0 };

	if (sched_setscheduler(0, SCHED_BATCH, &sp) == -1 ||
	    audit_writer_sched(env->pe_audit, SCHED_BATCH) == -1)
		log_warn("SCHED_BATCH for the parent");
}

int
engine_start(struct proxy_env *env, const struct engine_ops *ops, char *why,
    size_t whylen)
{
	int i, rc;

	eg.env = env;
	eg.ops = ops;
	eg.parent = getpid();
	for (i = 0; i < ENGINE_SLOTS; i++)
		eg.e[i].e_afd = eg.e[i].e_ctlfd = -1;
	edns_on_answer(engine_answer_cb);
	audit_on_state(env->pe_audit, engine_audit_state_cb, NULL);
	if ((eg.chld_ev = evsignal_new(env->pe_base, SIGCHLD, engine_chld_cb,
		 NULL)) == NULL ||
	    evsignal_add(eg.chld_ev, NULL) == -1 ||
	    (eg.restart_ev = evtimer_new(env->pe_base, engine_restart_cb,
		 NULL)) == NULL ||
	    (eg.kill_ev = evtimer_new(env->pe_base, engine_kill_cb, NULL)) ==
		NULL ||
	    (eg.reload_ev = evtimer_new(env->pe_base, engine_reload_cb,
		 NULL)) == NULL ||
	    (eg.ack_ev = event_new(env->pe_base, -1, 0, engine_audit_ack_all,
		 NULL)) == NULL) {
		snprintf(why, whylen, "engine: out of memory");
		return -1;
	}
#ifdef SLUICE_TEST_HOOKS
	if ((eg.hook_ev = evsignal_new(env->pe_base, SIGUSR2,
		 engine_parent_hook_cb, NULL)) == NULL ||
	    evsignal_add(eg.hook_ev, NULL) == -1)
		log_warnx("test hook: cannot watch SIGUSR2");
#endif
	eg.on = 1;
	for (i = 0; i < (int)engine_workers(); i++) {
		if ((rc = engine_spawn(i, why, whylen)) != 0)
			return rc; /* -1 (the ones forked die with it), or 1 */
	}
	/* The parent serves no client: the engines do. */
	listener_enable_all(0);
	metrics_listen_enable(0);
	parent_sched_batch(env);
	return 0;
}

/*
 * The fork happens from a callback of its own: a reload may come from
 * deep inside another (the admin client's), whose state the new engine
 * frees as it lets the parent's part go.
 */
void
engine_reload(void)
{
	struct timeval now = { 0, 0 };

	if (!eg.on || eg.stopping)
		return;
	(void)event_add(eg.reload_ev, &now);
}

static void
engine_reload_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	if (eg.on)
		engine_fill(0);
}

void
engine_stop(void)
{
	const struct config *cf = eg.env->pe_cf;
	/* The engines' drain, its 503s' grace, then the kill. */
	uint64_t ms = cf->cf_limits.drain_timeout_ms + 2000;
	int i;

	if (eg.stopping && engine_alive() > 0)
		return;
	eg.stopping = 1;
	if (eg.restart_ev != NULL)
		(void)event_del(eg.restart_ev);
	for (i = 0; i < ENGINE_SLOTS; i++) {
		struct engine *e = &eg.e[i];

		if (e->e_pid <= 0)
			continue;
		e->e_draining = 1;
		if (e->e_ch != NULL)
			(void)chan_send(e->e_ch, PM_DRAIN, NULL, 0);
	}
	if (engine_alive() == 0) {
		eg.ops->eo_stopped();
		return;
	}
	engine_arm(eg.kill_ev, ms);
}

void
engine_revoke(const char *jti)
{
	struct pm_revoke m;

	if (!eg.on)
		return;
	memset(&m, 0, sizeof(m));
	snprintf(m.pv_jti, sizeof(m.pv_jti), "%s", jti);
	engine_send_all(PM_REVOKE, &m, sizeof(m));
}

void
engine_revfile(char *const *jtis, size_t n)
{
	size_t i, len = 0, off = 0, l;
	char *buf;

	if (!eg.on)
		return;
	for (i = 0; i < n; i++)
		len += strlen(jtis[i]) + 1;
	if (len > ENGINE_REVFILE_MAX || (buf = malloc(len + 1)) == NULL) {
		log_warnx("tokens.revoked_file: too large for the engines");
		return;
	}
	for (i = 0; i < n; i++) {
		l = strlen(jtis[i]);
		memcpy(buf + off, jtis[i], l);
		off += l;
		buf[off++] = '\n';
	}
	engine_send_all(PM_REVFILE, buf, len);
	free(buf);
}

void
engine_sandbox_add(const struct sandbox_conf *sc)
{
	if (eg.on)
		engine_send_all(PM_SANDBOX_ADD, sc, sizeof(*sc));
}

void
engine_sandbox_del(const char *id)
{
	struct pm_sandbox_del m;

	if (!eg.on)
		return;
	memset(&m, 0, sizeof(m));
	snprintf(m.pd_id, sizeof(m.pd_id), "%s", id);
	engine_send_all(PM_SANDBOX_DEL, &m, sizeof(m));
}

/*
 * The engine's side.
 */
static int
engine_ask_cb(const char *host, uint16_t port, uint64_t id)
{
	struct em_resolve m;

	if (strlen(host) >= sizeof(m.er_host))
		return -1;
	memset(&m, 0, sizeof(m));
	m.er_id = id;
	m.er_port = port;
	memcpy(m.er_host, host, strlen(host));
	return chan_send(eg.ch, EM_RESOLVE, &m, sizeof(m));
}

static void
engine_resolved_msg(const unsigned char *p)
{
	struct pm_resolved m;
	uint32_t i;

	memcpy(&m, p, sizeof(m));
	if (m.pr_n > ENGINE_MAX_ADDRS || m.pr_reason >= REASON__COUNT)
		fatalx("engine: a name answer with %u addresses, reason %u",
		    m.pr_n, m.pr_reason);
	for (i = 0; i < m.pr_n; i++)
		if (m.pr_addrs[i].ss_family != AF_INET &&
		    m.pr_addrs[i].ss_family != AF_INET6)
			fatalx("engine: a name answer with family %u",
			    (unsigned)m.pr_addrs[i].ss_family);
	upstream_remote_answer(m.pr_id, m.pr_addrs, m.pr_n, m.pr_ttl,
	    (enum reason)m.pr_reason);
}

/* PM_REVFILE: the jtis, sorted, each ended by '\n'. */
static void
engine_revfile_msg(const unsigned char *p, size_t len)
{
	struct proxy_env *env = eg.env;
	char **list = NULL;
	size_t n = 0, i, start = 0;

	if (len > 0 && p[len - 1] != '\n')
		fatalx("engine: a revoked_file list not ended by a newline");
	for (i = 0; i < len; i++)
		if (p[i] == '\n')
			n++;
	if (n > 0 && (list = calloc(n, sizeof(*list))) == NULL)
		fatalx("engine: out of memory");
	n = 0;
	for (i = 0; i < len; i++) {
		if (p[i] != '\n')
			continue;
		if (i == start || i - start > TOKEN_MAX_STR ||
		    memchr(p + start, '\0', i - start) != NULL)
			fatalx("engine: a bad jti in the revoked_file list");
		if ((list[n] = strndup((const char *)p + start, i - start)) ==
		    NULL)
			fatalx("engine: out of memory");
		if (n > 0 && strcmp(list[n - 1], list[n]) >= 0)
			fatalx("engine: the revoked_file list is not sorted");
		n++;
		start = i + 1;
	}
	for (i = 0; i < env->pe_nrevfile; i++)
		free(env->pe_revfile[i]);
	free(env->pe_revfile);
	env->pe_revfile = list;
	env->pe_nrevfile = n;
	env->pe_revfile_set = 1;
}

static void
engine_sandbox_msg(uint32_t type, const unsigned char *p)
{
	struct sandbox_conf sc;
	struct pm_sandbox_del d;
	char why[256];

	if (type == PM_SANDBOX_DEL) {
		memcpy(&d, p, sizeof(d));
		if (memchr(d.pd_id, '\0', sizeof(d.pd_id)) == NULL)
			fatalx("engine: a sandbox id not terminated");
		(void)sbx_registry_del(eg.env->pe_sbx, d.pd_id);
		return;
	}
	memcpy(&sc, p, sizeof(sc));
	if (memchr(sc.sc_id, '\0', sizeof(sc.sc_id)) == NULL ||
	    memchr(sc.sc_iface, '\0', sizeof(sc.sc_iface)) == NULL ||
	    sc.sc_naddrs > SANDBOX_MAX_ADDRS)
		fatalx("engine: a malformed sandbox");
	if (sbx_registry_add(eg.env->pe_sbx, &sc, 1, why, sizeof(why)) == -1)
		log_warnx("engine: sandbox %s: %s", sc.sc_id, why);
}

static void
engine_child_msg_cb(struct chan *ch, uint32_t type, const unsigned char *p,
    size_t len, void *arg)
{
	struct pm_revoke rv;
	char why[256];

	(void)ch;
	(void)arg;
	switch (type) {
	case PM_RESOLVED:
		engine_resolved_msg(p);
		break;
	case PM_REVOKE:
		memcpy(&rv, p, sizeof(rv));
		if (memchr(rv.pv_jti, '\0', sizeof(rv.pv_jti)) == NULL)
			fatalx("engine: a jti not terminated");
		if (revocations_add_mem(eg.env->pe_revs, rv.pv_jti, why,
			sizeof(why)) == -1)
			log_warnx("engine: revoke: %s", why);
		break;
	case PM_REVFILE:
		engine_revfile_msg(p, len);
		break;
	case PM_SANDBOX_ADD:
	case PM_SANDBOX_DEL:
		engine_sandbox_msg(type, p);
		break;
	case PM_DRAIN:
		eg.ops->eo_drain();
		break;
	default:
		fatalx("engine: message type %u", type);
	}
}

static void
engine_child_end_cb(struct chan *ch, const char *why, void *arg)
{
	(void)ch;
	(void)arg;
	/* The parent is gone, or said something it never says. */
	log_warnx("engine: parent channel: %s; exiting", why);
	_exit(ENGINE_EXIT_CHANNEL);
}

#ifdef SLUICE_TEST_HOOKS
/*
 * Test builds: SLUICE_TEST_HOOK=ask=HOST:PORT[,HOST:PORT...] and SIGUSR2
 * make the engine ask for those destinations, as an engine someone took
 * over would: the parent must resolve none that no route dials.
 */
static void
engine_hook_ask(const char *list)
{
	char buf[1024], *p, *next, *colon;

	snprintf(buf, sizeof(buf), "%s", list);
	for (p = buf; p != NULL && *p != '\0'; p = next) {
		if ((next = strchr(p, ',')) != NULL)
			*next++ = '\0';
		if ((colon = strrchr(p, ':')) == NULL)
			continue;
		*colon = '\0';
		(void)engine_ask_cb(p, (uint16_t)strtoul(colon + 1, NULL, 10),
		    0);
	}
}
#endif

static void
engine_sig_cb(evutil_socket_t sig, short what, void *arg)
{
	(void)what;
	(void)arg;
#ifdef SLUICE_TEST_HOOKS
	if (sig == SIGUSR2) {
		static const uint32_t bad[2] = { 0xbeefu, 0 };
		const char *hook = getenv("SLUICE_TEST_HOOK");

		if (hook != NULL && strcmp(hook, "sigsys") == 0)
			(void)syscall(SYS_acct, NULL); /* not allowed */
		else if (hook != NULL && strncmp(hook, "ask=", 4) == 0)
			engine_hook_ask(hook + 4);
		else if (hook != NULL && strcmp(hook, "badmsg") == 0 &&
		    write(eg.ctlfd, bad, sizeof(bad)) != sizeof(bad))
			log_warn("test hook");
		return;
	}
#endif
	(void)sig;
	eg.ops->eo_drain();
}

/* Belt and braces: no netlink socket crosses into an engine. */
static void
engine_close_netlink(void)
{
	struct dirent *de;
	DIR *d;
	int fd, dom;
	socklen_t sl;

	if ((d = opendir("/proc/self/fd")) == NULL)
		return;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		fd = (int)strtol(de->d_name, NULL, 10);
		sl = sizeof(dom);
		if (fd == dirfd(d) ||
		    getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &sl) == -1)
			continue;
		if (dom == AF_NETLINK)
			close(fd);
	}
	(void)closedir(d);
}

/* The engine's confinement (sandbox_engine_confine), or exit. */
static void
engine_confine(void)
{
	static const char *const trees[] = { "/etc/ssl/certs",
		"/usr/share/ca-certificates",
		"/usr/local/share/ca-certificates", "/etc/pki" };
	const char *ro[SL_NELEM(trees) + 2], *dir;
	const struct config *cf = eg.env->pe_cf;
	struct engine_confine ec;
	struct rlimit rl;
	char why[256];
	size_t i, nro = 0;
	int ll;

	/* The trees of the system store that exist (Landlock needs them). */
	for (i = 0; i < SL_NELEM(trees); i++)
		if (access(trees[i], F_OK) == 0)
			ro[nro++] = trees[i];
	if ((dir = getenv(X509_get_default_cert_dir_env())) != NULL &&
	    dir[0] == '/' && access(dir, F_OK) == 0)
		ro[nro++] = dir;
	if ((dir = getenv(X509_get_default_cert_file_env())) != NULL &&
	    dir[0] == '/' && access(dir, F_OK) == 0)
		ro[nro++] = dir;
	memset(&ec, 0, sizeof(ec));
	ec.ec_set_user = cf->cf_user != NULL && geteuid() == 0;
	ec.ec_uid = cf->cf_uid;
	ec.ec_gid = cf->cf_gid;
	/*
	 * Two sockets per connection, and two pipes more for a tunnel that
	 * moved to splice(2) (relay/splice.c; without a descriptor left it
	 * stays buffered).
	 */
	ec.ec_nofile = 6 * (uint64_t)cf->cf_limits.max_connections +
	    2 * cf->cf_nlisteners + ENGINE_FD_HEADROOM;
	/* Never above the hard limit: only lowered, never raised. */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 &&
	    rl.rlim_max != RLIM_INFINITY && ec.ec_nofile > rl.rlim_max)
		ec.ec_nofile = rl.rlim_max;
	/* The system store is read lazily, a file per lookup. */
	ec.ec_ro = ro;
	ec.ec_nro = nro;
	tzset();
	if (sandbox_engine_confine(&ec, &ll, why, sizeof(why)) == -1) {
		log_warnx("engine: %s", why);
		_exit(ENGINE_EXIT_SETUP);
	}
}

static void
engine_signals(void)
{
	static const int sigs[] = { SIGTERM, SIGINT, SIGUSR2 };
	size_t i;

	(void)signal(SIGHUP, SIG_IGN);
	(void)signal(SIGUSR1, SIG_IGN);
	for (i = 0; i < SL_NELEM(sigs); i++) {
#ifndef SLUICE_TEST_HOOKS
		if (sigs[i] == SIGUSR2) {
			(void)signal(SIGUSR2, SIG_IGN);
			continue;
		}
#endif
		if ((eg.sig_ev[i] = evsignal_new(eg.env->pe_base, sigs[i],
			 engine_sig_cb, NULL)) == NULL ||
		    evsignal_add(eg.sig_ev[i], NULL) == -1)
			_exit(ENGINE_EXIT_SETUP);
	}
}

/* What the fork copied of the parent's own: let it go, untouched. */
static void
engine_forget_parent(void)
{
	int i;

	for (i = 0; i < ENGINE_SLOTS; i++) {
		struct engine *e = &eg.e[i];

		if (e->e_pid <= 0)
			continue;
		engine_audit_forget(e);
		if (e->e_ch != NULL)
			chan_free(e->e_ch);
		if (e->e_aev != NULL)
			event_free(e->e_aev);
		if (e->e_afd != -1)
			close(e->e_afd);
		memset(e, 0, sizeof(*e));
	}
	engine_free_events();
	eg.ops->eo_child_forget();
	edns_drop_all();
	resolve_shutdown();
	engine_close_netlink();
}

static void
engine_child(int slot, unsigned pos, int ctl, int afd)
{
	struct proxy_env *env = eg.env;
	struct sched_param sp = { .sched_priority = 0 };

	(void)prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	/* Not the parent's SCHED_BATCH (parent_sched_batch()): it serves. */
	if (sched_setscheduler(0, SCHED_OTHER, &sp) == -1)
		log_warn("engine: sched_setscheduler SCHED_OTHER");
	if (getppid() != eg.parent)
		_exit(ENGINE_EXIT_CHANNEL);
	eg.in_engine = 1;
	eg.slot = slot;
	eg.ctlfd = ctl;
	if (event_reinit(env->pe_base) == -1) {
		log_warnx("engine: event_reinit failed");
		_exit(ENGINE_EXIT_SETUP);
	}
	engine_forget_parent();
	if (audit_remote(env->pe_audit, afd, env->pe_base) == -1) {
		log_warnx("engine: audit channel: out of memory");
		_exit(ENGINE_EXIT_SETUP);
	}
	upstream_on_resolved(NULL);
	upstream_on_remote(engine_ask_cb);
	/* The budget's counts are shared (its lock's page): no rescan. */
	metrics_engine_slot(slot);
	share_slot(slot);
	metrics_preopen();
	engine_signals();
	if ((eg.ch = chan_new(env->pe_base, ctl, engine_child_kinds,
		 SL_NELEM(engine_child_kinds), ENGINE_OUT_MAX,
		 engine_child_msg_cb, engine_child_end_cb, NULL)) == NULL) {
		log_warnx("engine: control channel: out of memory");
		_exit(ENGINE_EXIT_SETUP);
	}
	engine_confine();
	listener_keep_shard(pos, engine_workers());
	listener_enable_all(1);
	metrics_listen_enable(1);
	if (chan_send(eg.ch, EM_READY, NULL, 0) == -1)
		_exit(ENGINE_EXIT_CHANNEL);
	/*
	 * Back to the caller: the loop this fork happened in (a restart
	 * from a callback) or the one serve() is about to run is now the
	 * engine's; serve() calls engine_exit() when it ends.
	 */
}

void
engine_exit(void)
{
	/* Drained: the last lines and messages out, then nothing to free. */
	(void)audit_remote_drain(eg.env->pe_audit, 1000);
	(void)chan_flush(eg.ch, 1000);
	_exit(0);
}
