/*
 * The confinement of the privsep engine (DESIGN "Privilege separation and
 * self-confinement"): the process that parses sandbox bytes ends up as an
 * unprivileged user with no capabilities, no_new_privs, not dumpable, a
 * bounded descriptor table, no filesystem beyond the trees it may read
 * (Landlock), and a seccomp allowlist whose default kills it. The steps are
 * confine.c's; what is new here is their order and the allowlist.
 *
 * The allowlist is what an event loop that is already set up (libevent on
 * epoll, OpenSSL 3 with its contexts loaded, the listening sockets and the
 * audit fd inherited) calls while it proxies. It was taken from
 * `strace -f` of a real `sluice run` (netpolicy off) after its "sluice:
 * ready" line, serving a forward absolute-form request, a refused one (407),
 * a reverse listener request, an opaque CONNECT tunnel, an intercepted TLS
 * request and SIGTERM. Seen after ready, by the loop: epoll_wait,
 * epoll_ctl, accept4, socket (AF_INET, SOCK_STREAM|SOCK_NONBLOCK|
 * SOCK_CLOEXEC, 0), connect, getsockopt (SO_ERROR), setsockopt
 * (TCP_NODELAY), ioctl (FIONREAD), read, readv, write, writev, shutdown,
 * close, getpid (OpenSSL's fork check), brk, mmap, munmap, madvise, futex,
 * rt_sigaction, rt_sigprocmask, rt_sigreturn, exit_group; by the audit
 * writer thread: write, fsync, futex, madvise, exit. Seen too, but work the
 * parent does under privsep, so killed here: socket(AF_INET, SOCK_DGRAM),
 * sendto and recvfrom to the resolvers (only the parent resolves); at exit,
 * unlink of the ready file and the admin socket, newfstatat and pread64 of
 * the ready file, and audit.head written anew (unlink, openat O_WRONLY|
 * O_CREAT, fsync, rename). The rest of the list below is what the same loop
 * may call on paths the run did not take (timers, a pipe or splice tunnel,
 * abort(), getrandom reseeding, reading pre-opened /proc/self fds, poll
 * for an audit ack from the parent) and was asked for by the design. The
 * engine holds no audit file (the parent writes it): no fsync.
 */
#include <sys/types.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include <linux/capability.h>

#include <netinet/in.h>

#include <errno.h>
#include <fcntl.h>
#include <seccomp.h>
#include <stdio.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include "proxy/util/util.h"
#include "proxy/sandbox/confine_int.h"
#include "proxy/sandbox/sandbox.h"

/*
 * Under ASan/UBSan the sanitizer runtime does work of its own inside the
 * confined process. A report (seen with strace of a heap overflow after
 * confinement) opens /proc/self/maps with open(2), not openat, symbolizes
 * in-process and writes to stderr, then aborts (tgkill to itself); the
 * runtime may also readlink, ask for the CPUs (sched_getaffinity), use
 * prctl and getrusage. Those builds allow these too (open read-only only),
 * and skip Landlock (the runtime reads /proc files it did not open first).
 * LeakSanitizer's check at exit cannot run confined: it clones a tracer
 * (killed here; were it allowed, the tracer could not ptrace a process
 * that is not dumpable), so a sanitized engine ends with _exit() or runs
 * with detect_leaks=0, or it dies of SIGSYS at exit.
 */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_UNDEFINED__)
#define ENGINE_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) ||                                        \
    __has_feature(undefined_behavior_sanitizer)
#define ENGINE_SANITIZER 1
#endif
#endif

struct engine_sys {
	const char *es_name;
	int es_nr;
};

#define ES(n)                                                                  \
	{                                                                      \
#n, SCMP_SYS(n)                                                \
	}

/* Allowed whatever their arguments. */
static const struct engine_sys engine_allow[] = {
	/* descriptors and bytes */
	ES(read),
	ES(write),
	ES(readv),
	ES(writev),
	ES(pread64),
	ES(lseek),
	ES(close),
	ES(fcntl),
	ES(splice),
	ES(pipe2),
	/* sockets: the inherited listeners and the upstream connections */
	ES(accept),
	ES(accept4),
	ES(connect),
	ES(sendmsg),
	ES(sendmmsg), /* the audit lines of a loop turn, to the parent */
	ES(recvmsg),
	ES(sendto),
	ES(recvfrom),
	ES(setsockopt),
	ES(getsockopt),
	ES(getsockname),
	ES(getpeername),
	ES(shutdown),
	/* the event loop */
	ES(epoll_create1),
	ES(epoll_ctl),
	ES(epoll_wait),
	ES(epoll_pwait),
	/* waiting for the parent: an audit ack (fsync "always"), the last
	 * control bytes before exit */
	ES(poll),
	ES(ppoll),
	ES(eventfd2),
	ES(timerfd_create),
	ES(timerfd_settime),
	ES(timerfd_gettime),
	/* time (mostly the vDSO; the syscalls where it falls back) */
	ES(clock_gettime),
	ES(clock_getres),
	ES(gettimeofday),
	ES(time),
	ES(clock_nanosleep),
	ES(nanosleep),
	ES(restart_syscall),
	/* memory, threads' locks, randomness */
	ES(getrandom),
	ES(mmap),
	ES(munmap),
	ES(mremap),
	ES(mprotect),
	ES(madvise),
	ES(brk),
	ES(futex),
	/* signals (libevent's handlers; abort() is filtered below) */
	ES(rt_sigaction),
	ES(rt_sigprocmask),
	ES(rt_sigreturn),
	ES(sigaltstack),
	/* who am I */
	ES(getpid),
	ES(gettid),
	ES(getuid),
	ES(geteuid),
	ES(getgid),
	ES(getegid),
	ES(uname),
	ES(sched_yield),
	ES(getrlimit),
	/* pre-opened /proc/self/fd and /proc/self/statm, fstat of any fd */
	ES(fstat),
	ES(newfstatat),
	ES(statx),
	ES(getdents64),
	ES(exit),
	ES(exit_group),
#ifdef ENGINE_SANITIZER
	ES(readlink),
	ES(readlinkat),
	ES(sched_getaffinity),
	ES(prctl),
	ES(getrusage),
#endif
};

/* ioctl(2) requests allowed (the low 32 bits: the kernel's cmd is an
 * unsigned int). TIOCOUTQ is SIOCOUTQ, FIONREAD SIOCINQ. */
static const unsigned long engine_ioctls[] = {
	FIONREAD,
	FIONBIO,
	TIOCOUTQ,
	TCGETS,
};

static const uint64_t engine_families[] = { AF_INET, AF_INET6 };
static const uint64_t engine_protocols[] = { 0, IPPROTO_TCP };

/* The bit of O_TMPFILE that is not O_DIRECTORY (glibc's __O_TMPFILE
 * carries O_DIRECTORY, which a read-only opendir() sets). */
#define ENGINE_O_TMPFILE_BIT ((uint64_t)(O_TMPFILE & ~O_DIRECTORY))
#define ENGINE_O_WRITES                                                        \
	((uint64_t)(O_ACCMODE | O_CREAT | O_TRUNC | O_APPEND | O_PATH) |       \
	    ENGINE_O_TMPFILE_BIT)

/*
 * socket(2): AF_INET and AF_INET6 (all 64 bits of the argument compared)
 * of type SOCK_STREAM (type & 0xf; SOCK_NONBLOCK and SOCK_CLOEXEC are
 * above it) with protocol 0 or IPPROTO_TCP. Everything else (AF_UNIX,
 * AF_NETLINK, AF_PACKET, SOCK_RAW, SOCK_DGRAM, SCTP or MPTCP streams) hits
 * the default and kills.
 */
static int
engine_rules_socket(scmp_filter_ctx ctx)
{
	size_t i, j;
	int r;

	for (i = 0; i < SL_NELEM(engine_families); i++)
		for (j = 0; j < SL_NELEM(engine_protocols); j++)
			if ((r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW,
				 SCMP_SYS(socket), 3,
				 sandbox_scmp_cmp(0, SCMP_CMP_EQ,
				     engine_families[i], 0),
				 sandbox_scmp_cmp(1, SCMP_CMP_MASKED_EQ, 0xf,
				     SOCK_STREAM),
				 sandbox_scmp_cmp(2, SCMP_CMP_EQ,
				     engine_protocols[j], 0))) < 0)
				return r;
	return 0;
}

/* The rules that look at arguments; *what names the one that failed. */
static int
engine_rules_args(scmp_filter_ctx ctx, uint64_t pid, const char **what)
{
	const uint32_t allow = SCMP_ACT_ALLOW;
	size_t i;
	int r;

	*what = "socket";
	if ((r = engine_rules_socket(ctx)) < 0)
		return r;
	*what = "ioctl";
	for (i = 0; i < SL_NELEM(engine_ioctls); i++)
		if ((r = seccomp_rule_add(ctx, allow, SCMP_SYS(ioctl), 1,
			 sandbox_scmp_cmp(1, SCMP_CMP_MASKED_EQ, 0xffffffffULL,
			     engine_ioctls[i]))) < 0)
			return r;
	/* openat(2) only to read: Landlock then limits where. */
	*what = "openat";
	if ((r = seccomp_rule_add(ctx, allow, SCMP_SYS(openat), 1,
		 sandbox_scmp_cmp(2, SCMP_CMP_MASKED_EQ, ENGINE_O_WRITES,
		     O_RDONLY))) < 0)
		return r;
#ifdef ENGINE_SANITIZER
	/* The sanitizer runtime opens /proc/self/maps with open(2). */
	*what = "open";
	if ((r = seccomp_rule_add(ctx, allow, SCMP_SYS(open), 1,
		 sandbox_scmp_cmp(1, SCMP_CMP_MASKED_EQ, ENGINE_O_WRITES,
		     O_RDONLY))) < 0)
		return r;
#endif
	/* Signals only to itself (abort() raises SIGABRT with tgkill). */
	*what = "kill";
	if ((r = seccomp_rule_add(ctx, allow, SCMP_SYS(kill), 1,
		 sandbox_scmp_cmp(0, SCMP_CMP_EQ, pid, 0))) < 0)
		return r;
	*what = "tgkill";
	if ((r = seccomp_rule_add(ctx, allow, SCMP_SYS(tgkill), 1,
		 sandbox_scmp_cmp(0, SCMP_CMP_EQ, pid, 0))) < 0)
		return r;
	/* prlimit64(2) to read its own limits (getrlimit in glibc). */
	*what = "prlimit64";
	if ((r = seccomp_rule_add(ctx, allow, SCMP_SYS(prlimit64), 2,
		 sandbox_scmp_cmp(0, SCMP_CMP_EQ, 0, 0),
		 sandbox_scmp_cmp(2, SCMP_CMP_EQ, 0, 0))) < 0 ||
	    (r = seccomp_rule_add(ctx, allow, SCMP_SYS(prlimit64), 2,
		 sandbox_scmp_cmp(0, SCMP_CMP_EQ, pid, 0),
		 sandbox_scmp_cmp(2, SCMP_CMP_EQ, 0, 0))) < 0)
		return r;
	return 0;
}

static int
engine_seccomp(char *why, size_t whylen)
{
	scmp_filter_ctx ctx;
	const char *what = "init";
	size_t i;
	int r;

	if ((ctx = seccomp_init(SCMP_ACT_KILL_PROCESS)) == NULL) {
		snprintf(why, whylen, "seccomp: init failed");
		return -1;
	}
	/* Another architecture's syscalls (i386, x32) kill too. */
	what = "the bad-architecture action";
	if ((r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH,
		 SCMP_ACT_KILL_PROCESS)) < 0)
		goto fail;
	for (i = 0; i < SL_NELEM(engine_allow); i++) {
		what = engine_allow[i].es_name;
		if ((r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW,
			 engine_allow[i].es_nr, 0)) < 0)
			goto fail;
	}
	if ((r = engine_rules_args(ctx, (uint64_t)getpid(), &what)) < 0)
		goto fail;
	if ((r = seccomp_load(ctx)) < 0) {
		snprintf(why, whylen, "seccomp: load: %s", strerror(-r));
		seccomp_release(ctx);
		return -1;
	}
	seccomp_release(ctx);
	return 0;
fail:
	snprintf(why, whylen, "seccomp: rule for %s: %s", what, strerror(-r));
	seccomp_release(ctx);
	return -1;
}

/* Whether CAP_SETPCAP is in the effective set (to empty the bounding). */
static int
engine_has_setpcap(void)
{
	struct __user_cap_header_struct h;
	struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];

	memset(&h, 0, sizeof(h));
	memset(d, 0, sizeof(d));
	h.version = _LINUX_CAPABILITY_VERSION_3;
	if (syscall(SYS_capget, &h, d) == -1)
		return 0;
	return (d[CAP_TO_INDEX(CAP_SETPCAP)].effective &
		   CAP_TO_MASK(CAP_SETPCAP)) != 0;
}

static int
engine_nofile(uint64_t n, char *why, size_t whylen)
{
	struct rlimit rl;

	if (n == 0)
		return 0;
	rl.rlim_cur = (rlim_t)n;
	rl.rlim_max = (rlim_t)n;
	if (setrlimit(RLIMIT_NOFILE, &rl) == -1) {
		snprintf(why, whylen, "rlimit: RLIMIT_NOFILE %llu: %s",
		    (unsigned long long)n, strerror(errno));
		return -1;
	}
	return 0;
}

/* Whether to apply Landlock: asked for, built without sanitizers, and the
 * kernel has it. */
static int
engine_want_landlock(const struct engine_confine *ec)
{
#ifdef ENGINE_SANITIZER
	(void)ec;
	return 0;
#else
	if (ec->ec_flags & ENGINE_CONFINE_NO_LANDLOCK)
		return 0;
	return sandbox_landlock_abi() > 0;
#endif
}

/*
 * The order: the Landlock ruleset is prepared first (its paths opened
 * with the caller's identity), RLIMIT_NOFILE set while a raise may still be
 * allowed, the bounding set emptied while CAP_SETPCAP is there, then the
 * identity (which drops the permitted and effective sets of a root that
 * becomes someone else), every capability set, no_new_privs (Landlock and
 * seccomp need it), not dumpable, Landlock, and seccomp last: every step
 * before it uses syscalls the allowlist refuses.
 */
int
sandbox_engine_confine(const struct engine_confine *ec, int *landlock_out,
    char *why, size_t whylen)
{
	int rs = -1;

	*landlock_out = 0;
	if (engine_want_landlock(ec) &&
	    (rs = sandbox_landlock_prepare(NULL, 0, ec->ec_ro, ec->ec_nro, why,
		 whylen)) == -1)
		return -1;
	if (engine_nofile(ec->ec_nofile, why, whylen) == -1)
		goto fail;
	if (engine_has_setpcap() && sandbox_drop_bounding(why, whylen) == -1)
		goto fail;
	if (ec->ec_set_user &&
	    sandbox_set_user(ec->ec_uid, ec->ec_gid, why, whylen) == -1)
		goto fail;
	if (sandbox_drop_cap_sets(why, whylen) == -1 ||
	    sandbox_no_new_privs(why, whylen) == -1)
		goto fail;
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == -1) {
		snprintf(why, whylen, "dumpable: %s", strerror(errno));
		goto fail;
	}
	if (rs != -1) {
		if (sandbox_landlock_apply(rs, why, whylen) == -1)
			return -1; /* the ruleset is closed */
		*landlock_out = 1;
	}
	return engine_seccomp(why, whylen);
fail:
	if (rs != -1)
		(void)close(rs);
	return -1;
}
