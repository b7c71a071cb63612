/*
 * Unit tests for sandbox_engine_confine (proxy/sandbox/engine.c). Each case
 * forks a child that prepares what it needs (descriptors, a listener, a
 * directory it may read), confines itself, tries one thing and ends: with
 * _exit(0) when what it tried behaved, CHILD_SKIP when the check does not
 * apply here (no Landlock in this kernel), another code naming what went
 * wrong, or killed by the filter (SIGSYS), which the parent tells apart.
 * As root the child becomes nobody (65534) first, as the engine would.
 */
#include <sys/types.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <linux/capability.h>
#include <linux/netlink.h>

#include <netinet/in.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "proxy/util/util.h"
#include "proxy/sandbox/sandbox.h"

#define CHILD_SKIP    77 /* the check does not apply here */
#define CHILD_NOTCONF 70 /* sandbox_engine_confine failed */
#define CHILD_LIVED   71 /* a call that must kill returned */
#define NOBODY        65534
#define NOFILE        256

/* ENGINE_CONFINE_* for the next children. */
static unsigned confine_flags;

/* A tree the child may read under Landlock, made before each fork. */
static char ro_dir[64];
static char ro_file[96];

/* Say why a child fails, with write(2) alone (allowed when confined). */
static void
say(const char *s)
{
	(void)!write(2, s, strlen(s));
	(void)!write(2, "\n", 1);
}

static int
confine(int *landlock)
{
	struct engine_confine ec;
	const char *ro[1];
	char why[256];

	ro[0] = ro_dir;
	memset(&ec, 0, sizeof(ec));
	ec.ec_set_user = getuid() == 0;
	ec.ec_uid = NOBODY;
	ec.ec_gid = NOBODY;
	ec.ec_nofile = NOFILE;
	ec.ec_ro = ro;
	ec.ec_nro = 1;
	ec.ec_flags = confine_flags;
	if (sandbox_engine_confine(&ec, landlock, why, sizeof(why)) == -1) {
		say(why);
		return -1;
	}
	return 0;
}

/* What a child does before confining itself (when not NULL: 0 or -1). */
static int (*pre_confine)(void);

/* Run fn in a confined child; returns its wait status. */
static int
run_child(int (*fn)(int landlock))
{
	int status, landlock;
	pid_t pid;

	assert_true((pid = fork()) != -1);
	if (pid == 0) {
		if (pre_confine != NULL && pre_confine() == -1)
			_exit(CHILD_NOTCONF);
		if (confine(&landlock) == -1)
			_exit(CHILD_NOTCONF);
		_exit(fn(landlock));
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return status;
}

static void
expect_exit(int status, int code)
{
	if (WIFSIGNALED(status))
		fail_msg("child killed by signal %d (want exit %d)",
		    WTERMSIG(status), code);
	assert_true(WIFEXITED(status));
	if (WEXITSTATUS(status) == CHILD_SKIP && code != CHILD_SKIP)
		skip();
	assert_int_equal(WEXITSTATUS(status), code);
}

static void
expect_signal(int status, int sig)
{
	if (WIFEXITED(status))
		fail_msg("child exited %d (want signal %d)",
		    WEXITSTATUS(status), sig);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), sig);
}

static int
setup(void **state)
{
	int fd;

	(void)state;
	snprintf(ro_dir, sizeof(ro_dir), "/tmp/sluice-engine-XXXXXX");
	if (mkdtemp(ro_dir) == NULL || chmod(ro_dir, 0755) == -1)
		return -1;
	snprintf(ro_file, sizeof(ro_file), "%s/ca.pem", ro_dir);
	if ((fd = open(ro_file, O_WRONLY | O_CREAT | O_TRUNC, 0644)) == -1)
		return -1;
	if (write(fd, "pem\n", 4) != 4) {
		(void)close(fd);
		return -1;
	}
	return close(fd);
}

static int
teardown(void **state)
{
	(void)state;
	(void)unlink(ro_file);
	return rmdir(ro_dir);
}

/* ---- /proc/self/status after confinement ---- */

static int status_fd = -1;
static int status_bnd; /* 1: CapBnd must read 0; -1: must not; 0: any */

/* The value of field (e.g. "CapEff:") in buf, or NULL. */
static const char *
field(const char *buf, const char *name)
{
	const char *p = buf;
	size_t n = strlen(name);

	while (p != NULL && *p != '\0') {
		if (strncmp(p, name, n) == 0) {
			p += n;
			while (*p == '\t' || *p == ' ')
				p++;
			return p;
		}
		if ((p = strchr(p, '\n')) != NULL)
			p++;
	}
	return NULL;
}

static int
field_eq(const char *buf, const char *name, const char *want)
{
	const char *v = field(buf, name);

	return v != NULL && strncmp(v, want, strlen(want)) == 0 &&
	    v[strlen(want)] == '\n';
}

/* field_eq, saying which field differs. */
static int
field_is(const char *buf, const char *name, const char *want)
{
	if (!field_eq(buf, name, want)) {
		say(name);
		return 0;
	}
	return 1;
}

#define ZERO_CAPS "0000000000000000"

static int
child_status(int landlock)
{
	static const char *const zero[] = { "CapInh:", "CapPrm:", "CapEff:",
		"CapAmb:" };
	char buf[4096];
	struct stat st;
	ssize_t n;
	size_t i;

	(void)landlock;
	if ((n = pread(status_fd, buf, sizeof(buf) - 1, 0)) <= 0)
		return 1;
	buf[n] = '\0';
	if (!field_is(buf, "NoNewPrivs:", "1") ||
	    !field_is(buf, "Seccomp:", "2"))
		return 2;
	for (i = 0; i < SL_NELEM(zero); i++)
		if (!field_is(buf, zero[i], ZERO_CAPS))
			return 3;
	if (status_bnd == 1 && !field_is(buf, "CapBnd:", ZERO_CAPS))
		return 4;
	if (status_bnd == -1 && field_eq(buf, "CapBnd:", ZERO_CAPS))
		return 4;
	if (getuid() != 0) {
		/* Not dumpable: /proc/self belongs to root, not to us (a
		 * path lookup: fstat of an fd opened before keeps the owner
		 * it had then). Landlock does not govern stat(2). */
		if (stat("/proc/self/status", &st) == -1 || st.st_uid != 0)
			return 5;
		if (getuid() != NOBODY || geteuid() != NOBODY ||
		    getgid() != NOBODY || getegid() != NOBODY)
			return 6;
	}
	return 0;
}

/* Whether CAP_SETPCAP is in this process's effective set. */
static int
have_setpcap(void)
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

/* The child's own /proc/self/status, open before Landlock. */
static int
open_status(void)
{
	status_fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
	return status_fd == -1 ? -1 : 0;
}

static void
test_status(void **state)
{
	(void)state;
	status_bnd = getuid() == 0 && have_setpcap();
	pre_confine = open_status;
	expect_exit(run_child(child_status), 0);
	pre_confine = NULL;
}

/* ---- what the engine may do ---- */

static int listen_fd = -1;
static int pair[2] = { -1, -1 };

static int
child_tcp(int landlock)
{
	struct sockaddr_in sin;
	socklen_t len = sizeof(sin);
	char c = 0;
	int s, a, n = -1;

	(void)landlock;
	if (getsockname(listen_fd, (struct sockaddr *)&sin, &len) == -1)
		return 1;
	if ((s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1 ||
	    connect(s, (struct sockaddr *)&sin, sizeof(sin)) == -1)
		return 2;
	if ((a = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC)) == -1)
		return 3;
	if (write(s, "x", 1) != 1 || read(a, &c, 1) != 1 || c != 'x')
		return 4;
	if (ioctl(a, FIONREAD, &n) == -1 || n != 0)
		return 5;
	if (shutdown(s, SHUT_WR) == -1 || read(a, &c, 1) != 0)
		return 6;
	/* The socketpair made before confinement (the parent's channel). */
	if (write(pair[0], "y", 1) != 1 || read(pair[1], &c, 1) != 1 ||
	    c != 'y')
		return 7;
	/* An IPv6 stream socket may be made too (::1 may be absent). */
	if ((n = socket(AF_INET6, SOCK_STREAM, IPPROTO_TCP)) == -1 &&
	    errno != EAFNOSUPPORT)
		return 8;
	if (n != -1)
		(void)close(n);
	(void)close(a);
	(void)close(s);
	return 0;
}

static void
test_tcp(void **state)
{
	struct sockaddr_in sin;

	(void)state;
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_true(
	    (listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) != -1);
	assert_int_equal(bind(listen_fd, (struct sockaddr *)&sin, sizeof(sin)),
	    0);
	assert_int_equal(listen(listen_fd, 4), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0,
			     pair),
	    0);
	expect_exit(run_child(child_tcp), 0);
	(void)close(listen_fd);
	(void)close(pair[0]);
	(void)close(pair[1]);
}

/* kill(2) to itself works (signal 0: only asks). */
static int
child_kill_self(int landlock)
{
	(void)landlock;
	return kill(getpid(), 0) == 0 ? 0 : 1;
}

static void
test_kill_self(void **state)
{
	(void)state;
	expect_exit(run_child(child_kill_self), 0);
}

/* abort() raises SIGABRT at itself (tgkill to its own pid). */
static int
child_abort(int landlock)
{
	(void)landlock;
	abort();
}

static void
test_abort(void **state)
{
	(void)state;
	expect_signal(run_child(child_abort), SIGABRT);
}

/* Its limits read back, RLIMIT_NOFILE as asked. */
static int
child_rlimit(int landlock)
{
	struct rlimit rl;

	(void)landlock;
	if (getrlimit(RLIMIT_NOFILE, &rl) == -1)
		return 1;
	return rl.rlim_cur == NOFILE && rl.rlim_max == NOFILE ? 0 : 2;
}

static void
test_rlimit(void **state)
{
	(void)state;
	expect_exit(run_child(child_rlimit), 0);
}

/* The tree under ec_ro reads, directory and file. */
static int
child_ro_reads(int landlock)
{
	char buf[8];
	DIR *d;
	int fd;

	(void)landlock;
	if ((d = opendir(ro_dir)) == NULL)
		return 1;
	(void)closedir(d);
	if ((fd = open(ro_file, O_RDONLY | O_CLOEXEC)) == -1)
		return 2;
	if (read(fd, buf, sizeof(buf)) != 4)
		return 3;
	(void)close(fd);
	return 0;
}

static void
test_ro_reads(void **state)
{
	(void)state;
	expect_exit(run_child(child_ro_reads), 0);
}

/* Outside ec_ro nothing opens: EACCES from Landlock. */
static int
child_landlock(int landlock)
{
	int fd;

	if (!landlock) {
		say("no Landlock in this kernel (or a sanitizer build): "
		    "the EACCES check is skipped");
		return CHILD_SKIP;
	}
	if ((fd = open("/etc/passwd", O_RDONLY | O_CLOEXEC)) != -1)
		return 1;
	return errno == EACCES ? 0 : 2;
}

static void
test_landlock(void **state)
{
	(void)state;
	expect_exit(run_child(child_landlock), 0);
}

/* With ENGINE_CONFINE_NO_LANDLOCK the files outside ec_ro open. */
static int
child_no_landlock(int landlock)
{
	int fd;

	if (landlock)
		return 1;
	if ((fd = open("/etc/passwd", O_RDONLY | O_CLOEXEC)) == -1)
		return 2;
	(void)close(fd);
	return 0;
}

static void
test_no_landlock(void **state)
{
	(void)state;
	confine_flags = ENGINE_CONFINE_NO_LANDLOCK;
	expect_exit(run_child(child_no_landlock), 0);
	confine_flags = 0;
}

/*
 * Without CAP_SETPCAP (the parent kept it, but a caller may not have) the
 * bounding set cannot be emptied: confinement goes on without that step,
 * and every other set still ends empty.
 */
static int
drop_setpcap(void)
{
	struct __user_cap_header_struct h;
	struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];

	memset(&h, 0, sizeof(h));
	memset(d, 0, sizeof(d));
	h.version = _LINUX_CAPABILITY_VERSION_3;
	if (syscall(SYS_capget, &h, d) == -1)
		return -1;
	d[CAP_TO_INDEX(CAP_SETPCAP)].effective &= ~CAP_TO_MASK(CAP_SETPCAP);
	if (syscall(SYS_capset, &h, d) == -1)
		return -1;
	return open_status();
}

static void
test_no_setpcap(void **state)
{
	(void)state;
	if (getuid() != 0 || !have_setpcap())
		skip();
	status_bnd = -1; /* left as it was */
	pre_confine = drop_setpcap;
	expect_exit(run_child(child_status), 0);
	pre_confine = NULL;
}

/*
 * Under AddressSanitizer a report from the confined process comes out
 * whole (the runtime reads /proc/self/maps and symbolizes in-process) and
 * ends as the runtime ends it, not killed by the filter midway.
 */
#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif

static int report_pipe[2] = { -1, -1 };

static int
redirect_stderr(void)
{
	return dup2(report_pipe[1], 2) == -1 ? -1 : 0;
}

#ifdef TEST_ASAN
static int
child_asan(int landlock)
{
	volatile size_t i = 8;
	char *p;

	(void)landlock;
	if ((p = malloc(8)) == NULL)
		return 1;
	p[i] = 1; /* one past the end: the report */
	free(p);
	return CHILD_LIVED;
}
#endif

static void
test_sanitizer_report(void **state)
{
#ifdef TEST_ASAN
	char buf[16384];
	size_t len = 0;
	ssize_t n;
	int st;

	(void)state;
	assert_int_equal(pipe2(report_pipe, O_CLOEXEC), 0);
	pre_confine = redirect_stderr;
	st = run_child(child_asan);
	pre_confine = NULL;
	(void)close(report_pipe[1]);
	while (len < sizeof(buf) - 1 &&
	    (n = read(report_pipe[0], buf + len, sizeof(buf) - 1 - len)) > 0)
		len += (size_t)n;
	buf[len] = '\0';
	(void)close(report_pipe[0]);
	if (WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS)
		fail_msg("the sanitizer report was killed by the filter:\n%s",
		    buf);
	assert_false(WIFEXITED(st) && WEXITSTATUS(st) == CHILD_LIVED);
	assert_non_null(strstr(buf, "heap-buffer-overflow"));
	assert_non_null(strstr(buf, "in child_asan")); /* symbolized */
	assert_non_null(strstr(buf, "allocated by thread T0"));
#else
	(void)state;
	(void)redirect_stderr;
	skip(); /* not a sanitizer build */
#endif
}

/* ---- what kills it ---- */

static int
child_netlink(int landlock)
{
	(void)landlock;
	(void)socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	return CHILD_LIVED;
}

static int
child_dgram(int landlock)
{
	(void)landlock;
	(void)socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	return CHILD_LIVED;
}

static int
child_raw(int landlock)
{
	(void)landlock;
	(void)socket(AF_INET6, SOCK_RAW, IPPROTO_TCP);
	return CHILD_LIVED;
}

static int
child_unix(int landlock)
{
	(void)landlock;
	(void)socket(AF_UNIX, SOCK_STREAM, 0);
	return CHILD_LIVED;
}

static int
child_packet(int landlock)
{
	(void)landlock;
	(void)socket(AF_PACKET, SOCK_RAW, 0);
	return CHILD_LIVED;
}

static int
child_sctp(int landlock)
{
	(void)landlock;
	(void)socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP);
	return CHILD_LIVED;
}

static int
child_socketpair(int landlock)
{
	int sv[2];

	(void)landlock;
	(void)socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
	return CHILD_LIVED;
}

static int
child_execve(int landlock)
{
	char *const argv[] = { (char *)(uintptr_t) "/bin/true", NULL };
	char *const envp[] = { NULL };

	(void)landlock;
	(void)execve("/bin/true", argv, envp);
	return CHILD_LIVED;
}

static int
child_fork(int landlock)
{
	pid_t pid;

	(void)landlock;
	if ((pid = fork()) == 0)
		_exit(0);
	return CHILD_LIVED;
}

static int
child_open_write(int landlock)
{
	char path[128];

	(void)landlock;
	snprintf(path, sizeof(path), "%s/new", ro_dir);
	(void)open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	return CHILD_LIVED;
}

static int
child_open_rdwr(int landlock)
{
	(void)landlock;
	(void)open(ro_file, O_RDWR | O_CLOEXEC);
	return CHILD_LIVED;
}

static int
child_kill_init(int landlock)
{
	(void)landlock;
	(void)kill(1, 0);
	return CHILD_LIVED;
}

static int
child_ioctl(int landlock)
{
	int x = 0;

	(void)landlock;
	(void)ioctl(pair[0], SIOCGPGRP, &x);
	return CHILD_LIVED;
}

static int
child_setrlimit(int landlock)
{
	struct rlimit rl;

	(void)landlock;
	rl.rlim_cur = 16;
	rl.rlim_max = 16;
	(void)setrlimit(RLIMIT_NOFILE, &rl);
	return CHILD_LIVED;
}

static int
child_ptrace(int landlock)
{
	(void)landlock;
	(void)syscall(SYS_ptrace, 0L, 0L, 0L, 0L);
	return CHILD_LIVED;
}

#ifdef __x86_64__
/* An x32 syscall number (another ABI): the bad-architecture action. */
static int
child_x32(int landlock)
{
	(void)landlock;
	(void)syscall(0x40000000L | SYS_getpid);
	return CHILD_LIVED;
}
#endif

static const struct {
	const char *name;
	int (*fn)(int);
} kills[] = {
	{ "socket(AF_NETLINK)", child_netlink },
	{ "socket(AF_INET, SOCK_DGRAM)", child_dgram },
	{ "socket(AF_INET6, SOCK_RAW)", child_raw },
	{ "socket(AF_UNIX)", child_unix },
	{ "socket(AF_PACKET)", child_packet },
	{ "socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP)", child_sctp },
	{ "socketpair", child_socketpair },
	{ "execve", child_execve },
	{ "fork", child_fork },
	{ "open(O_WRONLY|O_CREAT)", child_open_write },
	{ "open(O_RDWR)", child_open_rdwr },
	{ "kill(1, 0)", child_kill_init },
	{ "ioctl(SIOCGPGRP)", child_ioctl },
	{ "setrlimit", child_setrlimit },
	{ "ptrace", child_ptrace },
#ifdef __x86_64__
	{ "x32 getpid", child_x32 },
#endif
};

static void
test_kills(void **state)
{
	size_t i;
	int st;

	(void)state;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0,
			     pair),
	    0);
	for (i = 0; i < SL_NELEM(kills); i++) {
		st = run_child(kills[i].fn);
		if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGSYS)
			fail_msg("%s: child %s %d, want killed by SIGSYS",
			    kills[i].name,
			    WIFSIGNALED(st) ? "killed by signal" : "exited",
			    WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
		print_message("%s: SIGSYS\n", kills[i].name);
	}
	(void)close(pair[0]);
	(void)close(pair[1]);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_status),
		cmocka_unit_test(test_tcp),
		cmocka_unit_test(test_kill_self),
		cmocka_unit_test(test_abort),
		cmocka_unit_test(test_rlimit),
		cmocka_unit_test(test_ro_reads),
		cmocka_unit_test(test_landlock),
		cmocka_unit_test(test_no_landlock),
		cmocka_unit_test(test_no_setpcap),
		cmocka_unit_test(test_sanitizer_report),
		cmocka_unit_test(test_kills),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
