/*
 * Unit tests for proxy/sandbox without namespaces: the command's
 * environment (sandbox_env_build), exit statuses and signal forwarding
 * (exit.c, with real child processes), and the fd-passing channel
 * (fdpass.c) over an in-process socketpair, including every malformed
 * shape the receiver must refuse without leaking a descriptor.
 */
#include <sys/types.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <dirent.h>
#include <errno.h>
#include <sched.h>
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

/* A literal for an environment array (char *, as execve takes). */
#define S(x) ((char *)(uintptr_t)(x))

#define TOKEN "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln-_~"
#define PROXY "http://run:" TOKEN "@127.0.0.1:3128"

/* ---- environment ---- */

static void
spec_init(struct sandbox_env_spec *es, char **environ_)
{
	memset(es, 0, sizeof(*es));
	es->es_environ = environ_;
	es->es_token = TOKEN;
	es->es_proxy = "127.0.0.1:3128";
	es->es_ca_bundle = "/run/sluice/bundle.pem";
	es->es_ca_cert = "/run/sluice/ca.pem";
	es->es_token_file = "/run/sluice/token";
}

/* The variables sluice adds, in order, for the generic profile. */
static const char *const ours[] = {
	"HTTP_PROXY=" PROXY,
	"HTTPS_PROXY=" PROXY,
	"ALL_PROXY=" PROXY,
	"http_proxy=" PROXY,
	"https_proxy=" PROXY,
	"all_proxy=" PROXY,
	"NO_PROXY=localhost,127.0.0.1,::1",
	"no_proxy=localhost,127.0.0.1,::1",
	"NODE_USE_ENV_PROXY=1",
	"SSL_CERT_FILE=/run/sluice/bundle.pem",
	"CURL_CA_BUNDLE=/run/sluice/bundle.pem",
	"REQUESTS_CA_BUNDLE=/run/sluice/bundle.pem",
	"GIT_SSL_CAINFO=/run/sluice/bundle.pem",
	"PIP_CERT=/run/sluice/bundle.pem",
	"NODE_EXTRA_CA_CERTS=/run/sluice/ca.pem",
	"SLUICE_TOKEN_FILE=/run/sluice/token",
};

static void
assert_env(const struct sandbox_env *ev, const char *const *head, size_t nh,
    const char *const *tail, size_t nt)
{
	size_t i, k = 0;

	assert_int_equal(ev->ev_n, nh + SL_NELEM(ours) + nt);
	for (i = 0; i < nh; i++)
		assert_string_equal(ev->ev_env[k++], head[i]);
	for (i = 0; i < SL_NELEM(ours); i++)
		assert_string_equal(ev->ev_env[k++], ours[i]);
	for (i = 0; i < nt; i++)
		assert_string_equal(ev->ev_env[k++], tail[i]);
	assert_null(ev->ev_env[k]);
}

static void
test_env_generic(void **state)
{
	char *parent[] = { S("PATH=/usr/bin:/bin"), S("FOO=bar"), S("NOEQUALS"),
		S("=novalue"), S("HTTPS_PROXY=http://elsewhere:8080"),
		S("KEY=sk-real-secret"), S("OTHER=sk-real-secret-not"),
		S("EMPTY="), S("SSL_CERT_FILE=/etc/mine.pem"), S("no_proxy=*"),
		NULL };
	const char *secrets[] = { "sk-real-secret", "", NULL };
	const char *head[] = { "PATH=/usr/bin:/bin", "FOO=bar",
		"OTHER=sk-real-secret-not", "EMPTY=" };
	struct sandbox_env_spec es;
	struct sandbox_env ev;
	char why[128];

	(void)state;
	spec_init(&es, parent);
	es.es_secrets = secrets;
	es.es_nsecrets = 3;
	assert_int_equal(sandbox_env_build(&es, &ev, why, sizeof(why)), 0);
	assert_env(&ev, head, SL_NELEM(head), NULL, 0);
	/* The value equal to a secret is gone, and named; empty secrets
	 * match nothing (EMPTY= stays). */
	assert_int_equal(ev.ev_nremoved, 1);
	assert_string_equal(ev.ev_removed[0], "KEY");
	sandbox_env_free(&ev);
	assert_null(ev.ev_env);
}

static void
test_env_clean(void **state)
{
	char *parent[] = { S("SHELL=/bin/sh"), S("PATH=/bin"),
		S("HOME=/home/u"), S("TERM=xterm"), S("LANG=C.UTF-8"),
		S("USER=u"), S("LC_ALL=C"), S("PATHX=no"), S("AWS_SECRET=x"),
		NULL };
	const char *head[] = { "PATH=/bin", "HOME=/home/u", "TERM=xterm",
		"LANG=C.UTF-8", "USER=u" };
	struct sandbox_env_spec es;
	struct sandbox_env ev;
	char why[128];

	(void)state;
	spec_init(&es, parent);
	es.es_clean = 1;
	assert_int_equal(sandbox_env_build(&es, &ev, why, sizeof(why)), 0);
	assert_env(&ev, head, SL_NELEM(head), NULL, 0);
	assert_int_equal(ev.ev_nremoved, 0);
	sandbox_env_free(&ev);
}

static void
test_env_profiles(void **state)
{
	char *parent[] = { S("ANTHROPIC_API_KEY=sk-ant-real"),
		S("OPENAI_API_KEY=o"),
		S("ANTHROPIC_BASE_URL=https://api.anthropic.com"), NULL };
	const char *secrets[] = { "sk-ant-real" };
	const char *ant[] = { "ANTHROPIC_BASE_URL=http://127.0.0.1:8080",
		"ANTHROPIC_API_KEY=" TOKEN };
	const char *oai[] = { "OPENAI_BASE_URL=http://127.0.0.1:8081/v1",
		"OPENAI_API_KEY=" TOKEN };
	const char *head_ant[] = { "OPENAI_API_KEY=o" };
	const char *head_oai[] = {
		"ANTHROPIC_BASE_URL=https://api.anthropic.com"
	};
	struct sandbox_env_spec es;
	struct sandbox_env ev;
	char why[128];

	(void)state;
	spec_init(&es, parent);
	es.es_profile = SANDBOX_PROFILE_ANTHROPIC;
	es.es_base_url = "http://127.0.0.1:8080";
	assert_int_equal(sandbox_env_build(&es, &ev, why, sizeof(why)), 0);
	assert_env(&ev, head_ant, 1, ant, 2);
	assert_int_equal(ev.ev_nremoved, 0); /* overridden, not a secret */
	sandbox_env_free(&ev);

	spec_init(&es, parent);
	es.es_profile = SANDBOX_PROFILE_OPENAI;
	es.es_base_url = "http://127.0.0.1:8081/v1";
	es.es_secrets = secrets;
	es.es_nsecrets = 1;
	assert_int_equal(sandbox_env_build(&es, &ev, why, sizeof(why)), 0);
	assert_env(&ev, head_oai, 1, oai, 2);
	assert_int_equal(ev.ev_nremoved, 1);
	assert_string_equal(ev.ev_removed[0], "ANTHROPIC_API_KEY");
	sandbox_env_free(&ev);
}

static void
test_env_refused(void **state)
{
	char *parent[] = { NULL };
	static const char *const bad_tokens[] = { "", "a@b", "a:b", "a b",
		"a/b", "a%40" };
	struct sandbox_env_spec es;
	struct sandbox_env ev;
	char why[128];
	size_t i;

	(void)state;
	for (i = 0; i < SL_NELEM(bad_tokens); i++) {
		spec_init(&es, parent);
		es.es_token = bad_tokens[i];
		assert_int_equal(sandbox_env_build(&es, &ev, why, sizeof(why)),
		    -1);
		assert_non_null(strstr(why, "token"));
		assert_null(ev.ev_env);
	}
	spec_init(&es, parent);
	es.es_token = NULL;
	assert_int_equal(sandbox_env_build(&es, &ev, why, sizeof(why)), -1);
	spec_init(&es, parent);
	es.es_proxy = "evil@127.0.0.1:3128";
	assert_int_equal(sandbox_env_build(&es, &ev, why, sizeof(why)), -1);
	assert_non_null(strstr(why, "forward listener"));
	spec_init(&es, parent);
	es.es_profile = SANDBOX_PROFILE_ANTHROPIC;
	assert_int_equal(sandbox_env_build(&es, &ev, why, sizeof(why)), -1);
	assert_non_null(strstr(why, "anthropic needs a base URL"));
	/* No CA paths: those variables are not set at all. */
	spec_init(&es, parent);
	es.es_ca_bundle = es.es_ca_cert = es.es_token_file = NULL;
	assert_int_equal(sandbox_env_build(&es, &ev, why, sizeof(why)), 0);
	assert_int_equal(ev.ev_n, 9);
	assert_string_equal(ev.ev_env[8], "NODE_USE_ENV_PROXY=1");
	sandbox_env_free(&ev);
}

/* ---- exit status and signals ---- */

static void
test_exit_code(void **state)
{
	(void)state;
	assert_int_equal(sandbox_exit_code(W_EXITCODE(0, 0)), 0);
	assert_int_equal(sandbox_exit_code(W_EXITCODE(7, 0)), 7);
	assert_int_equal(sandbox_exit_code(W_EXITCODE(255, 0)), 255);
	assert_int_equal(sandbox_exit_code(W_EXITCODE(0, SIGTERM)), 143);
	assert_int_equal(sandbox_exit_code(W_EXITCODE(0, SIGKILL)), 137);
	assert_int_equal(sandbox_exit_code(W_EXITCODE(0, SIGSEGV) | 0x80),
	    128 + SIGSEGV); /* core dumped */
	assert_int_equal(sandbox_exit_code(W_STOPCODE(SIGSTOP)), 255);
}

static pid_t
child_exiting(int code, int sig)
{
	pid_t pid = fork();

	assert_true(pid != -1);
	if (pid == 0) {
		if (sig != 0) {
			signal(sig, SIG_DFL);
			raise(sig);
		}
		_exit(code);
	}
	return pid;
}

static void
test_wait(void **state)
{
	(void)state;
	assert_int_equal(sandbox_wait(child_exiting(7, 0)), 7);
	assert_int_equal(sandbox_wait(child_exiting(0, SIGTERM)), 143);
	assert_int_equal(sandbox_wait(child_exiting(0, SIGKILL)), 137);
	assert_int_equal(sandbox_wait(getpid()), -1); /* not our child */
}

static void
test_forward(void **state)
{
	int p[2];
	char c;
	pid_t pid;

	(void)state;
	assert_int_equal(pipe(p), 0);
	if ((pid = fork()) == 0) {
		close(p[0]);
		(void)!write(p[1], "r", 1);
		for (;;)
			pause();
	}
	close(p[1]);
	assert_int_equal(read(p[0], &c, 1), 1); /* the child runs */
	close(p[0]);
	assert_int_equal(sandbox_forward_signals(pid), 0);
	/* Our own SIGTERM goes to the child; we live on. */
	assert_int_equal(raise(SIGTERM), 0);
	assert_int_equal(sandbox_wait(pid), 143);
	sandbox_forward_stop();
	assert_int_equal(sandbox_nforwarded, 7);
}

/* ---- seccomp (in a child: the filter cannot be unloaded) ---- */

/* A syscall's result as "ok" (>= 0) or its errno; closes an fd. */
static int
res(long r)
{
	if (r >= 0) {
		if (r > 2 && r < 1024)
			close((int)r);
		return 0;
	}
	return errno;
}

struct sc_case {
	const char *what;
	int want; /* 0: allowed, else the errno */
	long nr, a0, a1, a2;
};

static const struct sc_case sc_cases[] = {
	{ "tcp socket", 0, SYS_socket, AF_INET, SOCK_STREAM, 0 },
	{ "udp6 socket", 0, SYS_socket, AF_INET6, SOCK_DGRAM, 0 },
	{ "unix socket", 0, SYS_socket, AF_UNIX, SOCK_STREAM, 0 },
	{ "netlink route", 0, SYS_socket, AF_NETLINK, SOCK_RAW, 0 },
	{ "netlink audit", EPERM, SYS_socket, AF_NETLINK, SOCK_RAW, 9 },
	{ "raw", EPERM, SYS_socket, AF_INET, SOCK_RAW, 1 },
	{ "raw with flags", EPERM, SYS_socket, AF_INET,
	    SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, 1 },
	{ "raw6", EPERM, SYS_socket, AF_INET6, SOCK_RAW, 58 },
	{ "SOCK_PACKET", EPERM, SYS_socket, AF_INET, SOCK_PACKET, 0 },
	{ "packet", EPERM, SYS_socket, AF_PACKET, SOCK_DGRAM, 0 },
	{ "vsock", EPERM, SYS_socket, 40, SOCK_STREAM, 0 },
	{ "family 200", EPERM, SYS_socket, 200, SOCK_STREAM, 0 },
	{ "family 0", EPERM, SYS_socket, 0, SOCK_STREAM, 0 },
	{ "family 3", EPERM, SYS_socket, 3, SOCK_DGRAM, 0 },
	{ "family 9", EPERM, SYS_socket, 9, SOCK_DGRAM, 0 },
	{ "family 11", EPERM, SYS_socket, 11, SOCK_DGRAM, 0 },
	{ "family 15", EPERM, SYS_socket, 15, SOCK_RAW, 2 },
	{ "family 63", EPERM, SYS_socket, 63, SOCK_STREAM, 0 },
	{ "family 64", EPERM, SYS_socket, 64, SOCK_STREAM, 0 },
	{ "unix, upper bits", EPERM, SYS_socket, (long)0x8000000000000001ULL,
	    SOCK_STREAM, 0 },
	/* AF_INET with garbage in the upper half: refused, not AF_INET. */
	{ "upper bits", EPERM, SYS_socket, (long)0x100000002LL, SOCK_STREAM,
	    0 },
	{ "socketpair inet", EPERM, SYS_socketpair, AF_INET, SOCK_STREAM, 0 },
	{ "unshare", EPERM, SYS_unshare, CLONE_NEWNET, 0, 0 },
	{ "setns", EPERM, SYS_setns, 0, 0, 0 },
	{ "mount", EPERM, SYS_mount, 0, 0, 0 },
	{ "umount2", EPERM, SYS_umount2, 0, 0, 0 },
	{ "pivot_root", EPERM, SYS_pivot_root, 0, 0, 0 },
	{ "open_tree", EPERM, SYS_open_tree, -1, 0, 0 },
	{ "ptrace", EPERM, SYS_ptrace, 0, 0, 0 },
	{ "bpf", EPERM, SYS_bpf, 0, 0, 0 },
	{ "perf_event_open", EPERM, SYS_perf_event_open, 0, 0, 0 },
	{ "keyctl", EPERM, SYS_keyctl, 0, 0, 0 },
	{ "add_key", EPERM, SYS_add_key, 0, 0, 0 },
	{ "request_key", EPERM, SYS_request_key, 0, 0, 0 },
	{ "userfaultfd", EPERM, SYS_userfaultfd, 0, 0, 0 },
	{ "io_uring_setup", EPERM, SYS_io_uring_setup, 1, 0, 0 },
	{ "clone3", ENOSYS, SYS_clone3, 0, 0, 0 },
	{ "clone newuser", EPERM, SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0 },
	{ "personality query", 0, SYS_personality, 0xffffffffL, 0, 0 },
	{ "personality linux32", EPERM, SYS_personality, PER_LINUX32, 0, 0 },
	{ "personality no-aslr", EPERM, SYS_personality, ADDR_NO_RANDOMIZE, 0,
	    0 },
	{ "personality top bit", EPERM, SYS_personality, 0x80000000L, 0, 0 },
	{ "personality 0xfffffffe", EPERM, SYS_personality, 0xfffffffeL, 0, 0 },
	{ "personality upper half", EPERM, SYS_personality, (long)0x100000000LL,
	    0, 0 },
};

static void
test_seccomp(void **state)
{
	int p[2], st;
	char why[160], msg[200];
	ssize_t n;
	pid_t pid;
	size_t i;

	(void)state;
	assert_int_equal(pipe(p), 0);
	if ((pid = fork()) == 0) {
		close(p[0]);
		/* As root the raw socket would be allowed without the
		 * filter: it is the filter that refuses it. */
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == -1 ||
		    sandbox_seccomp(SANDBOX_SECCOMP_NETLINK_ROUTE, why,
			sizeof(why)) == -1) {
			(void)!write(p[1], why, strlen(why));
			_exit(1);
		}
		for (i = 0; i < SL_NELEM(sc_cases); i++) {
			const struct sc_case *c = &sc_cases[i];
			int got =
			    res(syscall(c->nr, c->a0, c->a1, c->a2, 0, 0));

			if (got != c->want) {
				n = snprintf(msg, sizeof(msg),
				    "%s: got %s, want %s", c->what,
				    got ? strerror(got) : "ok",
				    c->want ? strerror(c->want) : "ok");
				(void)!write(p[1], msg, (size_t)n);
				_exit(1);
			}
		}
		_exit(0);
	}
	close(p[1]);
	n = read(p[0], msg, sizeof(msg) - 1);
	close(p[0]);
	msg[n > 0 ? n : 0] = '\0';
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("seccomp: %s (status 0x%x)", msg, st);
}

/* ---- fd passing ---- */

static size_t
open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	size_t n = 0;

	assert_non_null(d);
	while (readdir(d) != NULL)
		n++;
	closedir(d);
	return n;
}

static void
pair(int sv[2])
{
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
}

static void
test_fdpass_roundtrip(void **state)
{
	static const struct fdpass_kind kinds[] = {
		{ 9, 0, 0 },
		{ 5, 8, 2 },
	};
	int sv[2], p1[2], p2[2], got[4];
	char buf[16], why[160], c;

	(void)state;
	pair(sv);
	assert_int_equal(pipe(p1), 0);
	assert_int_equal(pipe(p2), 0);
	int out[2] = { p1[1], p2[1] };
	assert_int_equal(fdpass_send(sv[0], 5, "12345678", 8, out, 2, why,
			     sizeof(why)),
	    0);
	close(p1[1]);
	close(p2[1]);
	assert_int_equal(fdpass_recv(sv[1], kinds, 2, buf, sizeof(buf), got, 4,
			     why, sizeof(why)),
	    1);
	assert_memory_equal(buf, "12345678", 8);
	/* The received descriptors are the pipes' write ends. */
	assert_int_equal(write(got[0], "a", 1), 1);
	assert_int_equal(write(got[1], "b", 1), 1);
	assert_int_equal(read(p1[0], &c, 1), 1);
	assert_int_equal(c, 'a');
	assert_int_equal(read(p2[0], &c, 1), 1);
	assert_int_equal(c, 'b');
	close(got[0]);
	close(got[1]);
	/* An empty message of the other kind. */
	assert_int_equal(fdpass_send(sv[1], 9, NULL, 0, NULL, 0, why,
			     sizeof(why)),
	    0);
	assert_int_equal(fdpass_recv(sv[0], kinds, 2, buf, sizeof(buf), got, 4,
			     why, sizeof(why)),
	    0);
	close(sv[0]);
	assert_int_equal(fdpass_recv(sv[1], kinds, 2, buf, sizeof(buf), got, 4,
			     why, sizeof(why)),
	    FDPASS_EOF);
	close(sv[1]);
	close(p1[0]);
	close(p2[0]);
}

/* Send a message of the given shape; expect the receiver to refuse it
 * naming what, and to leave no descriptor open. */
static void
refused(uint32_t type, size_t len, size_t nfds, const char *what)
{
	static const struct fdpass_kind kinds[] = { { 5, 8, 2 } };
	char buf[FDPASS_MAX_LEN], why[160];
	int sv[2], fds[3], got[4];
	size_t before, i;

	pair(sv);
	for (i = 0; i < nfds; i++)
		fds[i] = dup(0);
	memset(buf, 'x', sizeof(buf));
	assert_int_equal(fdpass_send(sv[0], type, buf, len, fds, nfds, why,
			     sizeof(why)),
	    0);
	for (i = 0; i < nfds; i++)
		close(fds[i]);
	before = open_fds();
	assert_int_equal(fdpass_recv(sv[1], kinds, 1, buf, sizeof(buf), got, 4,
			     why, sizeof(why)),
	    -1);
	assert_non_null(strstr(why, what));
	assert_int_equal(open_fds(), before);
	close(sv[0]);
	close(sv[1]);
}

static void
test_fdpass_shapes(void **state)
{
	(void)state;
	refused(6, 8, 2, "unexpected message type 6");
	refused(5, 7, 2, "7 payload bytes");
	refused(5, 9, 2, "9 payload bytes");
	refused(5, 0, 2, "0 payload bytes");
	refused(5, 8, 1, "1 descriptors");
	refused(5, 8, 3, "3 descriptors");
	refused(5, 8, 0, "0 descriptors");
}

static void
test_fdpass_raw(void **state)
{
	static const struct fdpass_kind kinds[] = { { 5, 8, 0 } };
	struct fdpass_hdr h;
	char msg[sizeof(h) + 8], big[FDPASS_MAX_LEN + 64], why[160];
	int sv[2], many[FDPASS_MAX_FDS + 1];
	size_t i;

	(void)state;
	pair(sv);
	/* Bad magic. */
	memset(&h, 0, sizeof(h));
	h.fh_magic = 0x12345678;
	h.fh_type = 5;
	h.fh_len = 8;
	memcpy(msg, &h, sizeof(h));
	assert_int_equal(send(sv[0], msg, sizeof(msg), 0),
	    (ssize_t)sizeof(msg));
	assert_int_equal(fdpass_recv(sv[1], kinds, 1, big, sizeof(big), NULL, 0,
			     why, sizeof(why)),
	    -1);
	assert_non_null(strstr(why, "bad magic"));
	/* The header's length disagrees with the datagram. */
	h.fh_magic = FDPASS_MAGIC;
	h.fh_len = 4;
	memcpy(msg, &h, sizeof(h));
	assert_int_equal(send(sv[0], msg, sizeof(msg), 0),
	    (ssize_t)sizeof(msg));
	assert_int_equal(fdpass_recv(sv[1], kinds, 1, big, sizeof(big), NULL, 0,
			     why, sizeof(why)),
	    -1);
	assert_non_null(strstr(why, "header says 4"));
	/* Shorter than a header. */
	assert_int_equal(send(sv[0], msg, 5, 0), 5);
	assert_int_equal(fdpass_recv(sv[1], kinds, 1, big, sizeof(big), NULL, 0,
			     why, sizeof(why)),
	    -1);
	assert_non_null(strstr(why, "short message"));
	/* Longer than any message: truncated. */
	memset(big, 0, sizeof(big));
	memcpy(big, &h, sizeof(h));
	assert_int_equal(send(sv[0], big, sizeof(big), 0),
	    (ssize_t)sizeof(big));
	assert_int_equal(fdpass_recv(sv[1], kinds, 1, big, sizeof(big), NULL, 0,
			     why, sizeof(why)),
	    -1);
	assert_non_null(strstr(why, "truncated"));
	/* The sender refuses what the receiver could not take. */
	for (i = 0; i < SL_NELEM(many); i++)
		many[i] = 0;
	assert_int_equal(fdpass_send(sv[0], 5, big, 8, many, SL_NELEM(many),
			     why, sizeof(why)),
	    -1);
	assert_int_equal(fdpass_send(sv[0], 5, big, FDPASS_MAX_LEN + 1, NULL, 0,
			     why, sizeof(why)),
	    -1);
	/* A receiver's buffer smaller than the kind it names. */
	assert_int_equal(fdpass_send(sv[0], 5, "12345678", 8, NULL, 0, why,
			     sizeof(why)),
	    0);
	assert_int_equal(fdpass_recv(sv[1], kinds, 1, big, 4, NULL, 0, why,
			     sizeof(why)),
	    -1);
	close(sv[0]);
	close(sv[1]);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_env_generic),
		cmocka_unit_test(test_env_clean),
		cmocka_unit_test(test_env_profiles),
		cmocka_unit_test(test_env_refused),
		cmocka_unit_test(test_exit_code),
		cmocka_unit_test(test_wait),
		cmocka_unit_test(test_forward),
		cmocka_unit_test(test_seccomp),
		cmocka_unit_test(test_fdpass_roundtrip),
		cmocka_unit_test(test_fdpass_shapes),
		cmocka_unit_test(test_fdpass_raw),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
