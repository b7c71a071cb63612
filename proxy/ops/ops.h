/*
 * ops: what operators read and drive: the audit log, metrics, the admin
 * socket.
 */
#ifndef SLUICE_OPS_H
#define SLUICE_OPS_H

#include <sys/queue.h>
#include <sys/types.h>

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "proxy/config/config.h"
#include "proxy/http/reason.h"

struct event_base;
struct evbuffer;
struct revocations;
struct budget;

/*
 * audit.c: the JSON Lines audit log (DESIGN.md "Audit log", docs/audit.md).
 * A line is built with audit_begin(), audit_add_*() and audit_commit().
 * Strings (which often come from the sandbox) are escaped so that every line
 * is valid JSON and valid UTF-8 whatever bytes they hold; each string value
 * is capped at AUDIT_VALUE_MAX bytes of output. One line buffer per
 * struct audit, used from the libevent loop only. With an event loop
 * (audit_open()'s base) the file I/O runs on a writer thread of its own:
 * the loop formats and chains each line and queues it (at most
 * AUDIT_QUEUE_MAX bytes queued and being written); the thread writes the
 * lines in order and fsyncs as audit.fsync asks, and its failures reach
 * the loop through an event. Without a base (the CLI, tests) every write
 * is inline. Every function accepts a NULL writer and then does nothing
 * (commit returns 0).
 * IMPORTANT: never pass a token, a secret, an Authorization or
 * Proxy-Authorization value or a body to any audit_add_*() call.
 */
#define AUDIT_VALUE_MAX  2048  /* bytes of one escaped string value */
#define AUDIT_LINE_MAX   65536 /* bytes of one line, newline included */
#define AUDIT_QUEUE_MAX  ((size_t)8 << 20)   /* bytes queued for the thread */
#define AUDIT_BATCH_KICK ((size_t)256 << 10) /* audit_batch(): wake early */

struct audit;
/* A wait for a line to be durable: audit_commit_wait(), below. */
typedef void audit_wait_cb(void *arg, int ok);
struct audit_wait {
	TAILQ_ENTRY(audit_wait) aw_entry;
	uint64_t aw_seq;   /* the line's seq, or an engine's 'S' count */
	uint64_t aw_epoch; /* the writer thread's epoch at commit */
	audit_wait_cb *aw_cb;
	void *aw_arg;
	int aw_on;   /* queued on the writer */
	int aw_done; /* answered (aw_ok), the callback not run yet */
	int aw_ok;
};
#define AUDIT_EVENT_MAX 64 /* bytes of an event name */
/*
 * Open (or create, mode 0640) conf->ac_path for appending and resume the
 * chain: from the last complete line of the file, else from
 * <state_dir>/audit.head (state_dir may be NULL), else seq 1 with a zero
 * prev. A partial last line is cut off and an audit.truncated line written.
 * base (may be NULL) drives the fsync "interval" timer; close the writer
 * before freeing it. Returns the writer, or NULL with why set ("path:
 * reason"), also when the last line is not an audit line. With base the
 * writer thread is started (and an eventfd watched on base).
 */
struct audit *audit_open(const struct audit_conf *, const char *state_dir,
    struct event_base *base, char *why, size_t whylen);
/*
 * SIGUSR1: write audit.head, then reopen the configured path (a new file
 * after rotation); the chain continues from memory. On failure the old
 * file stays in use and -1 is returned.
 */
int audit_reopen(struct audit *);
/*
 * Write every queued line (joining the writer thread), then the chain head
 * to <state_dir>/audit.head; fsync, close and free.
 */
void audit_close(struct audit *);
/*
 * Privilege separation. In a forked engine, audit_remote() turns the
 * writer into a client of the parent's: lines go over fd (the engine's end
 * of a SOCK_SEQPACKET socketpair, watched on base), the parent chains and
 * writes them; the inherited file and writer thread are let go (a thread
 * does not survive fork: its lock is never touched). audit_commit_wait()
 * waits for the parent's ack that the line is durable.
 * audit_remote_drain() sends what is queued (before the engine exits).
 * In the parent, audit_remote_line() takes one datagram from an engine:
 * -2 with why when it is not one sluice's engine writes (the engine is
 * then broken), else as audit_commit(); *sync says the engine waits for
 * audit_remote_reply(fd, 0, ok, lines answered so far), one answer per
 * such line, in order. For such a line with aw, the line is committed as
 * audit_commit_wait() does (1: cb(arg, ok) follows). audit_on_state()
 * tells the parent when its writer's failed state starts or ends, for
 * audit_remote_reply(fd, 1, failed, 0) to every engine.
 */
typedef void audit_state_cb(int failed, void *arg);
/*
 * Around a fork: prepare writes what is queued and parks the writer
 * thread where it holds no lock (so the child, where the thread is gone,
 * finds no lock taken: malloc's, stdio's, the sanitizers'); done lets it
 * go on, in the parent.
 */
void audit_fork_prepare(struct audit *);
void audit_fork_done(struct audit *);
/*
 * Give the writer thread a scheduling policy (sched(7): SCHED_BATCH,
 * SCHED_OTHER); 0, or -1 with errno. A thread started later takes the
 * policy of the thread that starts it.
 */
int audit_writer_sched(struct audit *, int policy);
int audit_remote(struct audit *, int fd, struct event_base *base);
int audit_remote_drain(struct audit *, int timeout_ms);
int audit_remote_line(struct audit *, const unsigned char *msg, size_t len,
    int *sync, struct audit_wait *aw, audit_wait_cb *cb, void *arg, char *why,
    size_t whylen);
int audit_remote_reply(int fd, int state, int ok, uint64_t n);
/*
 * audit_batch(a, 1) ... audit_batch(a, 0): the lines committed between
 * wake the writer thread once, at the end (or once AUDIT_BATCH_KICK bytes
 * wait), so that a batch the parent took from an engine costs one
 * write(2) and one wake-up, not one per line.
 */
void audit_batch(struct audit *, int on);
void audit_on_state(struct audit *, audit_state_cb *, void *arg);
/* Non-zero while in the failed state with on_error "deny". */
int audit_failed(const struct audit *);
/*
 * Apply a reloaded audit section: fsync, chain and on_error take effect at
 * once; a new path is opened (as audit_reopen) before the old one is closed.
 * Returns 0, or -1 with why set (the old settings stay).
 */
int audit_configure(struct audit *, const struct audit_conf *, char *why,
    size_t whylen);
/*
 * audit_configure() in two steps, for an all-or-nothing reload: prepare
 * checks the section and opens a new path (nothing of the audit changes;
 * NULL with why on failure); apply takes it over and cannot fail; free
 * drops a prepared one unused. Both consume nx.
 */
struct audit_next;
struct audit_next *audit_prepare(struct audit *, const struct audit_conf *,
    char *why, size_t whylen);
void audit_apply(struct audit *, struct audit_next *nx);
void audit_next_free(struct audit_next *nx);
/* Start a line: ts, seq, event and (with chain) prev. */
void audit_begin(struct audit *, const char *event);
/* Add a string field; val holds len arbitrary bytes (escaped, capped). */
void
audit_add_str(struct audit *, const char *key, const char *val, size_t len);
/* As audit_add_str for a NUL-terminated string; NULL adds nothing. */
void audit_add_cstr(struct audit *, const char *key, const char *val);
void audit_add_int(struct audit *, const char *key, int64_t val);
void audit_add_uint(struct audit *, const char *key, uint64_t val);
void audit_add_bool(struct audit *, const char *key, int val);
/* Add len bytes as a lower-case hex string (e.g. a SHA-256). */
void audit_add_hex(struct audit *, const char *key, const unsigned char *p,
    size_t len);
/*
 * Write the line begun by audit_begin(). Returns 0, or -1 when the line
 * could not be written: it is then dropped (seq and prev do not advance),
 * the error is counted, and with on_error "deny" the writer enters the
 * failed state, which the next successful write ends. With fsync "always"
 * the line is on disk when 0 is returned, without the writer thread. With
 * the thread (audit_commit_wait() waits) 0 means queued: a later failed write
 * drops the lines queued with it and after it (none is left half in the file;
 * the chain goes on from the file's last line), is counted and enters the
 * failed state the same way, and a line that finds the queue full is
 * dropped like a failed write (-1, errno ENOBUFS).
 */
int audit_commit(struct audit *);
/*
 * Make every committed line durable now (fsync if anything is pending;
 * with the writer thread this waits for it). Returns 0, or -1 on failure
 * or while in the failed state. An engine's writer (audit_remote()) only
 * says whether it is in the failed state: the parent makes its lines
 * durable, and audit_commit_wait() waits for one.
 */
int audit_sync(struct audit *);
/*
 * Waiting for durability without holding up the loop (fsync "always":
 * DESIGN.md "Audit log"). The owner embeds a struct audit_wait (zeroed)
 * and gets cb(arg, ok) from the event loop once the line is durable (ok
 * 1), or lost (ok 0; with on_error "allow" ok is 1 all the same: requests
 * go on). cb is never called from inside the call that started the wait,
 * and not after audit_wait_cancel() or audit_close().
 *
 * audit_commit_wait() commits the line begun by audit_begin() and, with
 * fsync "always" and an event loop (the writer thread, or an engine's
 * channel to its parent), waits for it: 1. Otherwise the line is written
 * as audit_commit() would and 0 is returned at once. -1: the line is lost
 * and the request must not go on (on_error "deny"); cb is not called.
 * With audit_commit() itself nobody waits: with the thread, 0 means
 * queued whatever the fsync mode.
 */
int audit_commit_wait(struct audit *, struct audit_wait *, audit_wait_cb *,
    void *arg);
void audit_wait_cancel(struct audit *, struct audit_wait *);
/* Non-zero when lines must be durable before a request goes on. */
int audit_durable(const struct audit *);
/*
 * The chain head: seq of the last line written to the file (not one still
 * queued) and its SHA-256 in hex (65 bytes).
 */
void audit_head(const struct audit *, uint64_t *seq, char hex[65]);
/*
 * One policy.load / policy.reload / policy.reload_failed line: sha256 (32
 * bytes, may be NULL when the file could not be read) and error (NULL on
 * success). Returns as audit_commit().
 */
int audit_policy_event(struct audit *, const char *event,
    const unsigned char *sha256, const char *error);

/*
 * cmd_audit.c: "sluice audit verify [--head FILE] FILE...". audit_verify()
 * checks the files in order (JSON objects, seq +1 per line, the prev hash
 * chain); "-" reads stdin. head (may be NULL) is an audit.head file whose
 * line must be among the files with that hash. Returns SL_EXIT_OK after
 * printing a summary line to out, or SL_EXIT_INVALID after printing
 * "FILE:LINE: why" for the first break to err.
 */
int audit_verify(const char *const *files, size_t nfiles, const char *head,
    FILE *out, FILE *err);

/*
 * metrics.c: counters and histograms, and the /metrics listener in the
 * Prometheus text format 0.0.4 (docs/metrics.md). Global; one loop per
 * process, and with metrics_share() the state is shared across forks.
 * Route labels are the audiences given to metrics_configure(); any other
 * route name (and NULL) is counted under route="" so the set stays bounded.
 */
#define METRICS_MAX_ROUTES 64

/* Register the policy's route audiences as labels (kept across reloads). */
void metrics_configure(const struct config *);
/*
 * allow: 0 (deny), 1 (allow) or METRICS_REPORT (let through by enforce
 * "report", with the reason it would have had).
 */
#define METRICS_REPORT 2
void metrics_request(const char *route, int allow, enum reason,
    uint64_t bytes_in, uint64_t bytes_out, double seconds);
void metrics_tunnel(const char *route, int allow, enum reason,
    uint64_t bytes_in, uint64_t bytes_out, double seconds);
/* sluice_tunnels_spliced_total: a tunnel moved to splice(2). */
void metrics_tunnel_spliced(void);
/* The same for an intercepted tunnel (its inner requests count for it). */
void metrics_tunnel_intercepted(const char *route, int allow, enum reason r,
    uint64_t bytes_in, uint64_t bytes_out, double seconds);
void metrics_upstream_connect(double seconds);
/* From a request head sent upstream to the response head, per route. */
void metrics_upstream_response(const char *route, double seconds);
void metrics_tls_handshake(double seconds);
void metrics_conn_active(int delta);
void metrics_pool_idle(int delta);
void metrics_token_cache(int hit);
void metrics_audit_error(void);
/* The audit writer's failed state (a gauge), set by audit.c. */
void metrics_audit_failed(int failed);
/* Dropped packets reported by NFLOG events (added). */
void metrics_net_drop(uint64_t count);
/* The drop rules' own counters, as last read from the kernel (absolute). */
void metrics_kernel_rule_drops(uint64_t packets, uint64_t bytes);
void metrics_reload(int ok);
/*
 * Gateway mode, per sandbox id (ids are [A-Za-z0-9._-], no escaping
 * needed): requests and tunnels by decision, and open connections. The
 * first METRICS_MAX_SANDBOXES ids seen have their own label, the rest
 * share sandbox="other".
 */
#define METRICS_MAX_SANDBOXES 64
void metrics_sandbox_request(const char *id, int allow, enum reason);
void metrics_sandbox_conn(const char *id, int delta);
/* Elements sluice keeps in the kernel's dynamic upstream sets. */
void metrics_kernel_dynamic(uint64_t n);
/* A response field that held an injected secret was dropped. */
void metrics_secret_header(void);
/*
 * Allowed and denied so far (sluice exec's summary): requests, including
 * those inside intercepted tunnels, and opaque tunnels; a refused tunnel
 * is one denial.
 */
void metrics_totals(uint64_t *allowed, uint64_t *denied);
/* Upstream failures by kind (sluice_upstream_errors_total). */
enum metrics_uperr {
	METRICS_UPERR_DNS = 0,     /* no address (no answer, NXDOMAIN) */
	METRICS_UPERR_DESTINATION, /* resolved only to denied addresses */
	METRICS_UPERR_CONNECT,     /* every address refused or unreachable */
	METRICS_UPERR_TIMEOUT,     /* connect or TLS handshake timed out */
	METRICS_UPERR_TLS,         /* the handshake failed */
	METRICS_UPERR_TLS_VERIFY,  /* the certificate did not verify */
	METRICS_UPERR_PIN,         /* no certificate matched pin_sha256 */
	METRICS_UPERR__COUNT
};
void metrics_upstream_error(enum metrics_uperr);
/* The budget table whose fill is a gauge (borrowed; NULL: none). */
void metrics_budget(const struct budget *);
/*
 * Serve GET /metrics on listen ("host:port", or "unix:/path" created with
 * mode 0600). Returns 0, or -1 with why set.
 */
/* Accept scrapes, or not (a privsep parent keeps the socket for its engines).
 */
void metrics_listen_enable(int on);
int metrics_listen(struct event_base *, const char *listen, gid_t group,
    char *why, size_t whylen);
/* Close the listener (and unlink its unix socket); counters stay. */
void metrics_close(void);
/* Render every family into buf (also used by the unit tests). 0 or -1. */
int metrics_render(struct evbuffer *buf);
/* Zero every counter and forget the routes (unit tests). */
void metrics_reset(void);

/*
 * Privilege separation. Put the metrics state in memory shared with every
 * later fork (call once, before the first fork; state so far is kept):
 * counters survive an engine's replacement, and what the parent counts
 * (reloads, kernel drops, dynamic set elements) renders in the engine.
 * Updates are relaxed atomic adds. 0, or -1 (then metrics stay
 * process-local). Once shared, sluice_engine_restarts_total and
 * sluice_engines render (also once either setter below was called).
 */
int metrics_share(void);
/*
 * In a forked engine: its slot (0..METRICS_ENGINE_SLOTS-1) for per-engine
 * gauges (active connections, idle pool, per-sandbox connections); out of
 * range is ignored. A process that never calls it uses slot 0. Rendered
 * gauges are the sums over the slots.
 */
#define METRICS_ENGINE_SLOTS 16
void metrics_engine_slot(int slot);
/*
 * In the parent, when the engine in slot died: its gauges go to 0 (its
 * connections are gone). Clear before a new engine takes the slot.
 */
void metrics_engine_slot_clear(int slot);
/* sluice_engine_restarts_total (counter), sluice_engines (gauge, alive). */
void metrics_engine_restart(void);
void metrics_engines_alive(int n);
/* For the admin status in the parent: what the engines counted (summed). */
int64_t metrics_conn_active_total(void);
void metrics_cache_totals(uint64_t *hits, uint64_t *misses);
/*
 * Open /proc/self/statm and /proc/self/fd now and keep them, so that the
 * process metrics need no open() later (a confined engine cannot open
 * files): called in the engine after the fork (the pids differ), before
 * its confinement. Again: the old ones are closed first.
 */
void metrics_preopen(void);

/*
 * admin.c: the admin unix socket (mode 0600, owner uid): one command line
 * per connection (status, reload, revoke <jti>, sandbox add|del|list ...),
 * answered with text lines,
 * then closed. Only root and the owner uid may use it (SO_PEERCRED).
 */
#define ADMIN_LINE_MAX 512 /* bytes of a command line, newline included */

/*
 * What a command does, with ao_arg passed to each operation; the daemon
 * gives its own (daemon.c), the unit tests fakes.
 */
struct admin_ops {
	void (*ao_status)(void *arg, struct evbuffer *out);
	void (*ao_reload)(void *arg);
	/* Revoke jti for peer uid; 0, or -1 with why set. */
	int (*ao_revoke)(void *arg, const char *jti, uid_t uid, char *why,
	    size_t whylen);
	/*
	 * "sandbox WORD...": argv holds the words after "sandbox" (at most
	 * ADMIN_MAX_WORDS, printable ASCII). 0 with the answer lines in
	 * out, or -1 with why set. NULL: the command is unknown.
	 */
	int (*ao_sandbox)(void *arg, int argc, char **argv, uid_t uid,
	    struct evbuffer *out, char *why, size_t whylen);
	void *ao_arg;
};
#define ADMIN_MAX_WORDS 24
/* Serve ops (kept until admin_close()) on the socket at path. */
int admin_open(struct event_base *, const char *path, uid_t owner,
    const struct admin_ops *ops, char *why, size_t whylen);
void admin_close(void);
/* In a forked engine: close the admin socket, leaving its path alone. */
void admin_forget(void);
/*
 * The revoke operation of the daemon: persist jti in revs, then leave a
 * token.revoke line in a (may be NULL). 0, or -1 with why set.
 */
int admin_revoke(struct revocations *revs, struct audit *a, const char *jti,
    uid_t uid, char *why, size_t whylen);
/*
 * Run one command line (without its newline) from peer uid and append the
 * answer lines to out. Returns 0 when the command succeeded, -1 otherwise
 * (the answer then starts with "error: ").
 */
int admin_dispatch(const struct admin_ops *, const char *line, size_t len,
    uid_t uid, struct evbuffer *out);

/*
 * share.c: what the engines count together, per sandbox: its open
 * connections and its request rate's bucket (limits.per_sandbox_*), in
 * memory shared by the forks. share_open() before the first fork (0, or
 * -1: then each process counts alone). An engine names its slot
 * (0..METRICS_ENGINE_SLOTS-1, as for the metrics); the parent zeroes a
 * dead engine's. *cell caches where the id's counts are (any value to
 * start: it is checked). share_conn(): 0, or -1 (not counted: no cell);
 * share_conns(): the open connections over every engine, -1: no cell;
 * share_rate(): as sl_gcra() on the shared bucket, -1: no cell.
 */
int share_open(void);
void share_slot(int slot);
void share_slot_clear(int slot);
int share_conn(const char *id, int *cell, int delta);
int64_t share_conns(const char *id, int *cell);
int64_t share_rate(const char *id, int *cell, uint64_t rps, int64_t now_us);

#endif
