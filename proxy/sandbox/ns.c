/*
 * The sandboxed child, from fork to exec. The child makes its namespaces
 * (user when unprivileged, network, mount), plants the listening sockets
 * the parent asked for inside the new network namespace (sockets keep the
 * namespace they were made in, so the parent serves them from outside),
 * builds the mount wall, and waits for the parent's word before it drops
 * everything and execs the command. Every failure in the child goes back
 * to the parent as one line; the parent never has to guess.
 */
#include <sys/types.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <linux/close_range.h>
#include <net/if.h>
#include <netinet/in.h>

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proxy/util/util.h"
#include "proxy/sandbox/sandbox.h"

extern char **environ;

/* Messages on the channel (fdpass.c). */
#define SB_MSG_READY 1 /* child: uint32 count, the planted sockets */
#define SB_MSG_ERR   2 /* child: a reason, NUL-padded */
#define SB_MSG_GO    3 /* parent: confine and exec */
#define SB_ERR_LEN   256

static SL_NORETURN void
child_fail(int sock, const char *why, int code)
{
	char buf[SB_ERR_LEN];
	char dummy[8];

	memset(buf, 0, sizeof(buf));
	snprintf(buf, sizeof(buf), "%s", why);
	if (fdpass_send(sock, SB_MSG_ERR, buf, sizeof(buf), NULL, 0, dummy,
		sizeof(dummy)) == -1)
		fprintf(stderr, "sandbox: %s\n", why);
	_exit(code);
}

static int
read_sysctl(const char *path, long *v)
{
	char buf[32];
	ssize_t n;
	int fd;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	*v = strtol(buf, NULL, 10);
	return 0;
}

/* Which knob forbids an unprivileged user namespace, in one line. */
static void
userns_why(int err, char *why, size_t whylen)
{
	long v;
	const char *knob = NULL;

	if (read_sysctl("/proc/sys/kernel/unprivileged_userns_clone", &v) ==
		0 &&
	    v == 0)
		knob = "kernel.unprivileged_userns_clone is 0";
	else if (read_sysctl("/proc/sys/user/max_user_namespaces", &v) == 0 &&
	    v == 0)
		knob = "user.max_user_namespaces is 0";
	else if (read_sysctl(
		     "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
		     &v) == 0 &&
	    v != 0)
		knob = "kernel.apparmor_restrict_unprivileged_userns is 1";
	if (knob != NULL)
		snprintf(why, whylen,
		    "unprivileged user namespaces are not "
		    "allowed here (sysctl %s): run as root or change it",
		    knob);
	else
		snprintf(why, whylen,
		    "cannot create a user namespace (%s): "
		    "check the sysctls kernel.unprivileged_userns_clone and "
		    "user.max_user_namespaces, or run as root",
		    strerror(err));
}

static int
write_file(const char *path, const char *text)
{
	size_t n = strlen(text);
	ssize_t w;
	int fd, saved;

	if ((fd = open(path, O_WRONLY | O_CLOEXEC)) == -1)
		return -1;
	w = write(fd, text, n);
	saved = errno;
	close(fd);
	errno = saved;
	return w == (ssize_t)n ? 0 : -1;
}

/* unshare, with the uid and gid mapped to themselves in a new userns. */
static int
make_namespaces(char *why, size_t whylen)
{
	uid_t uid = geteuid();
	gid_t gid = getegid();
	int flags = CLONE_NEWNET | CLONE_NEWNS;
	char map[64];

	if (uid != 0)
		flags |= CLONE_NEWUSER;
	if (unshare(flags) == -1) {
		if ((flags & CLONE_NEWUSER) &&
		    (errno == EPERM || errno == ENOSPC || errno == EUSERS ||
			errno == EACCES))
			userns_why(errno, why, whylen);
		else
			snprintf(why, whylen, "unshare: %s", strerror(errno));
		return -1;
	}
	if (!(flags & CLONE_NEWUSER))
		return 0;
	snprintf(map, sizeof(map), "%lu %lu 1\n", (unsigned long)uid,
	    (unsigned long)uid);
	if (write_file("/proc/self/setgroups", "deny") == -1 ||
	    write_file("/proc/self/uid_map", map) == -1) {
		userns_why(errno, why, whylen);
		return -1;
	}
	snprintf(map, sizeof(map), "%lu %lu 1\n", (unsigned long)gid,
	    (unsigned long)gid);
	if (write_file("/proc/self/gid_map", map) == -1) {
		snprintf(why, whylen, "user namespace: gid_map: %s",
		    strerror(errno));
		return -1;
	}
	return 0;
}

static int
lo_up(char *why, size_t whylen)
{
	struct ifreq ifr;
	int s, r;

	if ((s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) == -1) {
		snprintf(why, whylen, "lo: socket: %s", strerror(errno));
		return -1;
	}
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	if ((r = ioctl(s, SIOCGIFFLAGS, &ifr)) == 0) {
		ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
		r = ioctl(s, SIOCSIFFLAGS, &ifr);
	}
	if (r == -1)
		snprintf(why, whylen, "lo: bring up: %s", strerror(errno));
	close(s);
	return r;
}

static int
plant(const struct sandbox_listen *l, char *why, size_t whylen)
{
	char a[ADDR_STR_LEN];
	int fd, on = 1;

	addr_str((const struct sockaddr *)&l->sl_addr, a, sizeof(a));
	if (l->sl_type != SOCK_STREAM && l->sl_type != SOCK_DGRAM) {
		snprintf(why, whylen,
		    "listen %s: type %d is neither stream "
		    "nor datagram",
		    a, l->sl_type);
		return -1;
	}
	if ((fd = socket(AF_INET, l->sl_type | SOCK_NONBLOCK | SOCK_CLOEXEC,
		 0)) == -1)
		goto fail;
	if (l->sl_type == SOCK_STREAM &&
	    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) == -1)
		goto fail;
	if (bind(fd, (const struct sockaddr *)&l->sl_addr,
		sizeof(l->sl_addr)) == -1)
		goto fail;
	if (l->sl_type == SOCK_STREAM && listen(fd, SOMAXCONN) == -1)
		goto fail;
	return fd;
fail:
	snprintf(why, whylen, "listen %s/%s: %s", a,
	    l->sl_type == SOCK_STREAM ? "tcp" : "udp", strerror(errno));
	if (fd != -1)
		close(fd);
	return -1;
}

/* What a command inherits from sluice: no handler, no mask, no fd. */
static int
child_reset(char *why, size_t whylen)
{
	struct sigaction sa;
	sigset_t none;
	int sig;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_DFL;
	for (sig = 1; sig < NSIG; sig++)
		(void)sigaction(sig, &sa, NULL); /* EINVAL: KILL, STOP, RT */
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) == -1) {
		snprintf(why, whylen, "close_range: %s", strerror(errno));
		return -1;
	}
	return 0;
}

static SL_NORETURN void
child_main(const struct sandbox_spec *sp, int sock)
{
	static const struct fdpass_kind go[] = { { SB_MSG_GO, 0, 0 } };
	int fds[FDPASS_MAX_FDS];
	char why[SB_ERR_LEN];
	uint32_t count = (uint32_t)sp->sp_nlisten;
	pid_t parent = getppid();
	size_t i;
	int ruleset = -1, r, saved;

	if (child_reset(why, sizeof(why)) == -1 ||
	    make_namespaces(why, sizeof(why)) == -1 ||
	    lo_up(why, sizeof(why)) == -1)
		child_fail(sock, why, SANDBOX_EXIT_SETUP);
	for (i = 0; i < sp->sp_nlisten; i++)
		if ((fds[i] = plant(&sp->sp_listen[i], why, sizeof(why))) == -1)
			child_fail(sock, why, SANDBOX_EXIT_SETUP);
	if (sandbox_mount_wall(sp->sp_hide, sp->sp_nhide, sp->sp_resolv, why,
		sizeof(why)) == -1)
		child_fail(sock, why, SANDBOX_EXIT_SETUP);
	/* Opened after the wall: the rules name what the command will see. */
	if (sp->sp_landlock &&
	    (ruleset = sandbox_landlock_prepare(sp->sp_landlock_rw,
		 sp->sp_nlandlock_rw, sp->sp_landlock_ro, sp->sp_nlandlock_ro,
		 why, sizeof(why))) == -1)
		child_fail(sock, why, SANDBOX_EXIT_SETUP);
	if (fdpass_send(sock, SB_MSG_READY, &count, sizeof(count), fds,
		sp->sp_nlisten, why, sizeof(why)) == -1)
		_exit(SANDBOX_EXIT_SETUP);
	/* IMPORTANT: the command must not hold sluice's listeners. */
	for (i = 0; i < sp->sp_nlisten; i++)
		close(fds[i]);
	r = fdpass_recv(sock, go, SL_NELEM(go), NULL, 0, NULL, 0, why,
	    sizeof(why));
	if (r == FDPASS_EOF)
		_exit(SANDBOX_EXIT_SETUP); /* the parent gave up */
	if (r != 0)
		child_fail(sock, why, SANDBOX_EXIT_SETUP);
	if (sandbox_drop_bounding(why, sizeof(why)) == -1 ||
	    sandbox_set_user(sp->sp_uid, sp->sp_gid, why, sizeof(why)) == -1)
		child_fail(sock, why, SANDBOX_EXIT_SETUP);
	/*
	 * The command dies with the thread that started it (set after the
	 * identity change, which clears it); a parent already gone is seen
	 * as a new parent pid.
	 */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) == -1 ||
	    getppid() != parent)
		child_fail(sock, "parent death signal: the parent is gone",
		    SANDBOX_EXIT_SETUP);
	if (sandbox_drop_caps(why, sizeof(why)) == -1 ||
	    sandbox_no_new_privs(why, sizeof(why)) == -1 ||
	    (ruleset != -1 &&
		sandbox_landlock_apply(ruleset, why, sizeof(why)) == -1) ||
	    sandbox_seccomp(sp->sp_seccomp, why, sizeof(why)) == -1)
		child_fail(sock, why, SANDBOX_EXIT_SETUP);
	/* PATH is looked up in the command's own environment. */
	environ = (char **)(uintptr_t)sp->sp_envp;
	execvp(sp->sp_argv[0], (char *const *)(uintptr_t)sp->sp_argv);
	saved = errno;
	snprintf(why, sizeof(why), "exec %s: %s", sp->sp_argv[0],
	    strerror(saved));
	child_fail(sock, why, saved == ENOENT ? 127 : 126);
}

/* The child's last word: why it stopped, or how it died. */
static void
reap(pid_t pid, char *why, size_t whylen, int have_why)
{
	pid_t r;
	int st;

	do
		r = waitpid(pid, &st, 0);
	while (r == -1 && errno == EINTR);
	if (have_why || r == -1)
		return;
	if (WIFSIGNALED(st))
		snprintf(why, whylen,
		    "sandbox: the child died during setup "
		    "(signal %d)",
		    WTERMSIG(st));
	else
		snprintf(why, whylen,
		    "sandbox: the child exited %d during "
		    "setup",
		    WEXITSTATUS(st));
}

int
sandbox_start(const struct sandbox_spec *sp, struct sandbox_child *sb, int *fds,
    char *why, size_t whylen)
{
	struct fdpass_kind kinds[2] = {
		{ SB_MSG_READY, sizeof(uint32_t), sp->sp_nlisten },
		{ SB_MSG_ERR, SB_ERR_LEN, 0 },
	};
	union {
		uint32_t count;
		char err[SB_ERR_LEN];
	} msg;
	int sv[2], r;
	pid_t pid;

	sb->sb_pid = -1;
	sb->sb_sock = -1;
	if (sp->sp_argv == NULL || sp->sp_argv[0] == NULL ||
	    sp->sp_envp == NULL) {
		snprintf(why, whylen, "sandbox: no command or environment");
		return -1;
	}
	if (sp->sp_nlisten > FDPASS_MAX_FDS) {
		snprintf(why, whylen,
		    "sandbox: %zu sockets to plant, at most "
		    "%d",
		    sp->sp_nlisten, FDPASS_MAX_FDS);
		return -1;
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == -1) {
		snprintf(why, whylen, "sandbox: socketpair: %s",
		    strerror(errno));
		return -1;
	}
	if ((pid = fork()) == -1) {
		snprintf(why, whylen, "sandbox: fork: %s", strerror(errno));
		close(sv[0]);
		close(sv[1]);
		return -1;
	}
	if (pid == 0) {
		close(sv[0]);
		child_main(sp, sv[1]);
	}
	close(sv[1]);
	r = fdpass_recv(sv[0], kinds, SL_NELEM(kinds), &msg, sizeof(msg), fds,
	    sp->sp_nlisten, why, whylen);
	if (r == 0 && msg.count == sp->sp_nlisten) {
		sb->sb_pid = pid;
		sb->sb_sock = sv[0];
		return 0;
	}
	if (r == 0) {
		snprintf(why, whylen,
		    "sandbox: child planted %u sockets, "
		    "not %zu",
		    msg.count, sp->sp_nlisten);
		for (size_t i = 0; i < sp->sp_nlisten; i++)
			close(fds[i]);
	} else if (r == 1) {
		msg.err[SB_ERR_LEN - 1] = '\0';
		snprintf(why, whylen, "sandbox: %s", msg.err);
	}
	close(sv[0]);
	if (r != FDPASS_EOF && r != 1)
		kill(pid, SIGKILL);
	reap(pid, why, whylen, r != FDPASS_EOF);
	return -1;
}

int
sandbox_go(struct sandbox_child *sb, char *why, size_t whylen)
{
	static const struct fdpass_kind kinds[] = {
		{ SB_MSG_ERR, SB_ERR_LEN, 0 },
	};
	char err[SB_ERR_LEN];
	int r;

	if (sb->sb_sock == -1) {
		snprintf(why, whylen, "sandbox: not started");
		return -1;
	}
	r = fdpass_send(sb->sb_sock, SB_MSG_GO, NULL, 0, NULL, 0, why, whylen);
	if (r == 0)
		r = fdpass_recv(sb->sb_sock, kinds, SL_NELEM(kinds), err,
		    sizeof(err), NULL, 0, why, whylen);
	close(sb->sb_sock);
	sb->sb_sock = -1;
	if (r == FDPASS_EOF)
		return 0; /* closed on exec */
	if (r == 0) {
		err[SB_ERR_LEN - 1] = '\0';
		snprintf(why, whylen, "sandbox: %s", err);
	}
	return -1;
}

void
sandbox_abort(struct sandbox_child *sb)
{
	if (sb->sb_sock != -1) {
		close(sb->sb_sock);
		sb->sb_sock = -1;
	}
	if (sb->sb_pid > 0) {
		kill(sb->sb_pid, SIGKILL);
		(void)sandbox_wait(sb->sb_pid);
		sb->sb_pid = -1;
	}
}

int
sandbox_userns_probe(char *why, size_t whylen)
{
	int p[2], err = 0;
	pid_t pid;
	ssize_t n;

	if (geteuid() == 0)
		return 0;
	if (pipe2(p, O_CLOEXEC) == -1) {
		snprintf(why, whylen, "userns probe: pipe: %s",
		    strerror(errno));
		return -1;
	}
	if ((pid = fork()) == -1) {
		snprintf(why, whylen, "userns probe: fork: %s",
		    strerror(errno));
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (pid == 0) {
		close(p[0]);
		if (unshare(CLONE_NEWUSER) == -1) {
			err = errno;
			(void)!write(p[1], &err, sizeof(err));
		}
		_exit(0);
	}
	close(p[1]);
	n = read(p[0], &err, sizeof(err));
	close(p[0]);
	(void)sandbox_wait(pid);
	if (n == (ssize_t)sizeof(err)) {
		userns_why(err, why, whylen);
		return -1;
	}
	return 0;
}
