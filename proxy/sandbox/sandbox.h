/*
 * sandbox: the pieces of `sluice exec` that run a command in a box of its
 * own (namespaces with only lo, listening sockets planted inside and handed
 * out, a mount wall, no capabilities, no_new_privs, seccomp, optional
 * Landlock), the command's environment, and its exit status. The fd-passing
 * channel and the confinement steps are general: the privilege-separation
 * engine uses them too. Depends on proxy/util, libc and libseccomp only;
 * nothing here serves a socket (the daemon does that).
 */
#ifndef SLUICE_SANDBOX_H
#define SLUICE_SANDBOX_H

#include <sys/types.h>
#include <netinet/in.h>

#include <stddef.h>
#include <stdint.h>

/*
 * fdpass.c: messages with file descriptors over a SOCK_SEQPACKET socketpair.
 * Each message is one datagram: a fixed header (magic, type, payload bytes,
 * descriptor count), then the payload, with the descriptors attached as one
 * SCM_RIGHTS. The receiver names the message kinds it accepts, each with its
 * exact payload size and descriptor count: anything else (unknown type, a
 * size or count that differs by one, a truncated datagram or control
 * message, a second control message, bad magic) is refused and every
 * descriptor that came with it is closed (OpenBSD imsg style: a malformed
 * message is fatal to the channel, so callers treat -1 as the end of it).
 */
#define FDPASS_MAGIC   0x736c6670u /* "slfp" */
#define FDPASS_MAX_FDS 64          /* per message */
#define FDPASS_MAX_LEN 4096        /* payload bytes per message */

struct fdpass_hdr {
	uint32_t fh_magic; /* FDPASS_MAGIC */
	uint32_t fh_type;  /* the sender's message type */
	uint32_t fh_len;   /* payload bytes after the header */
	uint32_t fh_nfds;  /* descriptors attached */
};

/* A message kind the receiver accepts, with its exact shape. */
struct fdpass_kind {
	uint32_t fk_type;
	size_t fk_len;  /* exact payload bytes */
	size_t fk_nfds; /* exact descriptors */
};

#define FDPASS_EOF (-2) /* fdpass_recv: the peer closed the channel */

/*
 * Send one message of type with len payload bytes (at most FDPASS_MAX_LEN)
 * and nfds descriptors (at most FDPASS_MAX_FDS; they stay open here: the
 * caller closes its copies). Returns 0, or -1 with why set.
 */
int fdpass_send(int sock, uint32_t type, const void *buf, size_t len,
    const int *fds, size_t nfds, char *why, size_t whylen);

/*
 * Receive one message, which must be of one of the nkinds kinds and have
 * exactly its payload size and descriptor count. The payload goes to buf
 * (cap at least the kind's fk_len) and the descriptors, close-on-exec, to
 * fds (room for maxfds). Returns the index in kinds of the kind received,
 * FDPASS_EOF when the peer closed the channel before sending anything, or
 * -1 with why set (and nothing left open).
 */
int fdpass_recv(int sock, const struct fdpass_kind *kinds, size_t nkinds,
    void *buf, size_t cap, int *fds, size_t maxfds, char *why, size_t whylen);

/*
 * confine.c: the steps that take a process's power away, in the order
 * sandbox_confine runs them, each usable alone (the privsep engine runs
 * them too). All return 0, or -1 with why naming the step and errno.
 */

/* Options for the seccomp filter (sandbox_seccomp). */
#define SANDBOX_SECCOMP_NETLINK_ROUTE 0x1 /* allow AF_NETLINK/NETLINK_ROUTE */

/*
 * Empty the bounding set (needs CAP_SETPCAP for what is still in it; what
 * is gone already is skipped). Run it before sandbox_set_user: the
 * identity change takes CAP_SETPCAP away.
 */
int sandbox_drop_bounding(char *why, size_t whylen);
/* Drop every capability: bounding set, ambient, then all three sets. */
int sandbox_drop_caps(char *why, size_t whylen);
/*
 * Drop the ambient set, then the permitted, effective and inheritable sets
 * (the bounding set stays as it is: sandbox_drop_bounding).
 */
int sandbox_drop_cap_sets(char *why, size_t whylen);
/* PR_SET_NO_NEW_PRIVS. */
int sandbox_no_new_privs(char *why, size_t whylen);
/*
 * Load the seccomp filter DESIGN's "sluice exec" lists: EPERM for socket()
 * and socketpair() with a family other than AF_UNIX, AF_INET, AF_INET6 (and
 * AF_NETLINK with protocol NETLINK_ROUTE under
 * SANDBOX_SECCOMP_NETLINK_ROUTE), for SOCK_RAW and SOCK_PACKET sockets of
 * AF_INET and AF_INET6 (netlink sockets are SOCK_RAW by nature), for
 * ptrace, bpf, perf_event_open, keyctl, add_key, request_key, userfaultfd,
 * unshare, setns, mount, umount2, pivot_root and the new mount API (fsopen,
 * fsconfig, fsmount, fspick, move_mount, open_tree, mount_setattr), clone
 * with any CLONE_NEW* flag, io_uring (whose operations would bypass the
 * socket checks), and personality() other than PER_LINUX or the query
 * 0xffffffff; ENOSYS for clone3 (its flags are out of the filter's reach,
 * libc falls back to clone). Other architectures' syscalls (i386, x32) kill
 * the process. Needs no_new_privs or CAP_SYS_ADMIN.
 */
int sandbox_seccomp(unsigned flags, char *why, size_t whylen);

/*
 * Landlock: a ruleset prepared (paths opened) before the mount wall closes
 * nothing, applied last. rw paths get every filesystem right the kernel's
 * ABI knows, ro paths read and execute; a path that is not a directory gets
 * only the rights that apply to files. sandbox_landlock_abi returns the
 * kernel's ABI version, or 0 when it has none (or it is disabled).
 */
int sandbox_landlock_abi(void);
/* Returns a ruleset fd, or -1 with why set (also when Landlock is absent). */
int sandbox_landlock_prepare(const char *const *rw, size_t nrw,
    const char *const *ro, size_t nro, char *why, size_t whylen);
/* Restrict the calling thread with the ruleset (and close it). */
int sandbox_landlock_apply(int ruleset, char *why, size_t whylen);

/*
 * engine.c: the confinement of the privsep engine, the process that
 * proxies (DESIGN "Privilege separation and self-confinement").
 */
#define ENGINE_CONFINE_NO_LANDLOCK 0x1 /* skip Landlock (tests) */

struct engine_confine {
	int ec_set_user; /* setgroups/setresgid/setresuid to uid/gid */
	uid_t ec_uid;
	gid_t ec_gid;
	uint64_t ec_nofile;       /* RLIMIT_NOFILE soft and hard; 0: keep */
	const char *const *ec_ro; /* trees readable under Landlock (system CA
				     dir) */
	size_t ec_nro;
	unsigned ec_flags; /* ENGINE_CONFINE_* */
};

/*
 * Take everything away from the calling process (single-threaded): the
 * user (when ec_set_user), every capability (bounding via CAP_SETPCAP if it
 * is held, then permitted/effective/inheritable, ambient cleared),
 * no_new_privs, not dumpable, RLIMIT_NOFILE, Landlock (no filesystem access
 * but read-only under ec_ro; skipped where the kernel has no Landlock:
 * *landlock_out = 0), and last a seccomp allowlist whose default action
 * kills the process (SCMP_ACT_KILL_PROCESS, so SIGSYS). Returns 0, or -1
 * with why set.
 */
int sandbox_engine_confine(const struct engine_confine *, int *landlock_out,
    char *why, size_t whylen);

/*
 * mount.c: the mount wall, in a mount namespace of the caller's own: all
 * propagation made private, resolv (when not NULL) bind-mounted read-only
 * over /etc/resolv.conf (skipped when that does not exist), and each of
 * hidden covered: a directory by an empty read-only tmpfs, anything else by
 * /dev/null; a path that does not exist is skipped (nothing to hide).
 */
int sandbox_mount_wall(const char *const *hidden, size_t nhide,
    const char *resolv, char *why, size_t whylen);

/*
 * Become uid/gid (groups: gid alone). Only as root; (uid_t)-1 keeps the
 * current identity.
 */
int sandbox_set_user(uid_t uid, gid_t gid, char *why, size_t whylen);

/*
 * ns.c: the sandboxed child. sandbox_start forks a child that unshares
 * the user namespace (unless it runs as root; the invoking uid and gid map
 * to themselves), the network and the mount namespaces, brings lo up,
 * creates the listening sockets asked for (inside the new namespace, where
 * nothing but lo exists), builds the mount wall, prepares Landlock, and
 * sends the sockets back. The caller serves them from its own namespace,
 * then calls sandbox_go: the child drops everything (sandbox_drop_bounding,
 * sandbox_set_user, sandbox_drop_caps, sandbox_no_new_privs, Landlock,
 * sandbox_seccomp) and execs the command, or reports why it could not. The
 * command gets SIGKILL when the thread that called sandbox_start exits
 * (PR_SET_PDEATHSIG), so it never outlives sluice.
 */

/* A socket to plant inside the sandbox: an IPv4 address on lo. */
struct sandbox_listen {
	int sl_type;                /* SOCK_STREAM (listening) or SOCK_DGRAM */
	struct sockaddr_in sl_addr; /* e.g. 127.0.0.1:3128, 127.0.0.53:53 */
};

struct sandbox_spec {
	const char *const
	    *sp_argv;         /* the command; sp_argv[0] looked up in PATH */
	char *const *sp_envp; /* its whole environment (sandbox_env) */
	const struct sandbox_listen *sp_listen; /* sockets to plant */
	size_t sp_nlisten;                      /* at most FDPASS_MAX_FDS */
	const char *const *sp_hide; /* paths to hide: a directory gets an empty
				       tmpfs, anything else /dev/null; a path
				       that does not exist is skipped */
	size_t sp_nhide;
	const char *sp_resolv; /* resolv.conf contents, or NULL: leave it */
	uid_t sp_uid;          /* as root: run as; (uid_t)-1: stay root */
	gid_t sp_gid;
	int sp_landlock; /* apply Landlock with the lists below */
	const char *const *sp_landlock_rw;
	size_t sp_nlandlock_rw;
	const char *const *sp_landlock_ro;
	size_t sp_nlandlock_ro;
	unsigned sp_seccomp; /* SANDBOX_SECCOMP_* */
};

/* The running child, as the parent sees it. */
struct sandbox_child {
	pid_t sb_pid; /* the child; it becomes the command */
	int sb_sock;  /* the parent's end of the channel, or -1 */
};

/* The child's exit status when the setup failed (it said why first). */
#define SANDBOX_EXIT_SETUP 125

/*
 * Start the child. On success returns 0 with sb filled and the planted
 * sockets in fds (sp_nlisten of them, in sp_listen's order, non-blocking,
 * close-on-exec, listening when SOCK_STREAM). On failure returns -1 with why
 * set to one line (the child's own reason when it got that far, e.g. the
 * sysctl that forbids unprivileged user namespaces), the child reaped and
 * nothing left open.
 */
int sandbox_start(const struct sandbox_spec *sp, struct sandbox_child *sb,
    int *fds, char *why, size_t whylen);
/*
 * Let the child confine itself and exec the command. Returns 0 once the
 * exec happened (the channel closed on exec), or -1 with why set (the
 * child's reason; it exits SANDBOX_EXIT_SETUP and must still be waited for).
 */
int sandbox_go(struct sandbox_child *sb, char *why, size_t whylen);
/* Kill (SIGKILL) and reap a child that has not been told to go. */
void sandbox_abort(struct sandbox_child *sb);

/*
 * Whether this process may create a user namespace, probed by a child:
 * 0 yes, -1 no with why naming the sysctl that forbids it.
 */
int sandbox_userns_probe(char *why, size_t whylen);

/*
 * env.c: the command's environment, from the parent's (DESIGN "What CMD is
 * given"). Pure: no I/O, only allocation.
 */
enum sandbox_profile {
	SANDBOX_PROFILE_GENERIC = 0, /* proxy and CA variables only */
	SANDBOX_PROFILE_ANTHROPIC, /* + ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY */
	SANDBOX_PROFILE_OPENAI,    /* + OPENAI_BASE_URL, OPENAI_API_KEY */
};

struct sandbox_env_spec {
	char *const *es_environ;   /* the parent's environment */
	const char *es_token;      /* the run token ([A-Za-z0-9._~-]) */
	const char *es_proxy;      /* forward listener "127.0.0.1:3128" */
	const char *es_ca_bundle;  /* system CAs + sluice's: SSL_CERT_FILE... */
	const char *es_ca_cert;    /* sluice's CA alone: NODE_EXTRA_CA_CERTS */
	const char *es_token_file; /* SLUICE_TOKEN_FILE, or NULL */
	enum sandbox_profile es_profile;
	const char *es_base_url;       /* the reverse listener, for a profile */
	const char *const *es_secrets; /* injected secret values */
	size_t es_nsecrets;
	int es_clean; /* --clean-env */
};

struct sandbox_env {
	char **ev_env; /* NULL-terminated "NAME=value" list for execve */
	size_t ev_n;
	char **ev_removed; /* names removed because the value is a secret */
	size_t ev_nremoved;
};

/*
 * Build CMD's environment: the parent's variables in their order (only
 * PATH, HOME, TERM, LANG and USER with es_clean), minus entries without
 * '=', minus those sluice sets (its values win), minus every variable whose
 * value equals a non-empty secret (its name goes to ev_removed), then sluice's
 * in a fixed order: HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, http_proxy,
 * https_proxy, all_proxy, NO_PROXY, no_proxy, NODE_USE_ENV_PROXY,
 * SSL_CERT_FILE, CURL_CA_BUNDLE, REQUESTS_CA_BUNDLE, GIT_SSL_CAINFO, PIP_CERT,
 * NODE_EXTRA_CA_CERTS, SLUICE_TOKEN_FILE, then the profile's BASE_URL and
 * API_KEY. A CA variable whose path is NULL is not set. Returns 0, or -1
 * with why set (a bad token or proxy, a profile without es_base_url, no
 * memory) and ev empty.
 */
int sandbox_env_build(const struct sandbox_env_spec *es, struct sandbox_env *ev,
    char *why, size_t whylen);
/* Free what sandbox_env_build made (the token in it is wiped). */
void sandbox_env_free(struct sandbox_env *ev);

/* exit.c: exit status and signals. */

/*
 * The exit code a wait status maps to: the status for a normal exit,
 * 128+N for death by signal N, 255 for anything else.
 */
int sandbox_exit_code(int wstatus);
/*
 * Wait for pid (retrying on EINTR) and return its exit code as
 * sandbox_exit_code says, or -1 with errno set.
 */
int sandbox_wait(pid_t pid);
/*
 * Forward SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2 and SIGWINCH
 * received by this process to pid (a plain handler
 * with kill(2), async-signal-safe); pid 0 (or sandbox_forward_stop)
 * restores the default dispositions. Returns 0 or -1.
 */
int sandbox_forward_signals(pid_t pid);
void sandbox_forward_stop(void);
/* The signals sandbox_forward_signals forwards, for an event loop. */
extern const int sandbox_forwarded[];
extern const size_t sandbox_nforwarded;

#endif
