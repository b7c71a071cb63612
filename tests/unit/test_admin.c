/*
 * The admin socket (proxy/admin.c): the command table through fake
 * operations, then the real socket in a temporary directory with
 * operations of this test around admin_revoke(), a real revocations set
 * and a real audit file (daemon.c is not linked): mode 0600, one command
 * per connection, bounded lines, and the token.revoke audit line a
 * revocation leaves (and a refused one does not).
 */
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <cjson/cJSON.h>
#include <event2/buffer.h>
#include <event2/event.h>

#include "proxy/proxy.h"

/* What the fakes saw. */
static int reloads;
static char revoked[8][TOKEN_MAX_STR + 1];
static size_t nrevoked;
static uid_t revoked_uid;

/* Fake operations for admin_dispatch. */
static void
fake_status(void *arg, struct evbuffer *out)
{
	assert_ptr_equal(arg, &reloads);
	evbuffer_add_printf(out, "fake status\n");
}

static void
fake_reload(void *arg)
{
	assert_ptr_equal(arg, &reloads);
	reloads++;
}

static int
fake_revoke(void *arg, const char *jti, uid_t uid, char *why, size_t whylen)
{
	assert_ptr_equal(arg, &reloads);
	if (strcmp(jti, "bad") == 0) {
		snprintf(why, whylen, "cannot persist");
		return -1;
	}
	if (strcmp(jti, "fail-me") == 0) {
		snprintf(why, whylen, "state_dir: no space\nforged line");
		return -1;
	}
	revoked_uid = uid;
	assert_true(nrevoked < SL_NELEM(revoked));
	snprintf(revoked[nrevoked++], sizeof(revoked[0]), "%s", jti);
	return 0;
}

/* The sandbox command's words, as the last call saw them. */
static char sbx_words[ADMIN_MAX_WORDS][64];
static int sbx_argc;

static int
fake_sandbox(void *arg, int argc, char **argv, uid_t uid, struct evbuffer *out,
    char *why, size_t whylen)
{
	int i;

	assert_ptr_equal(arg, &reloads);
	assert_int_equal(uid, 1234);
	sbx_argc = argc;
	for (i = 0; i < argc; i++)
		snprintf(sbx_words[i], sizeof(sbx_words[0]), "%s", argv[i]);
	if (strcmp(argv[0], "del") == 0) {
		snprintf(why, whylen, "no sandbox \"%s\"\nforged", argv[1]);
		return -1;
	}
	evbuffer_add_printf(out, "ok %d words\n", argc);
	return 0;
}

static const struct admin_ops fake_ops = {
	.ao_status = fake_status,
	.ao_reload = fake_reload,
	.ao_revoke = fake_revoke,
	.ao_sandbox = fake_sandbox,
	.ao_arg = &reloads,
};

/* The socket's operations: what daemon.c gives, around admin_revoke(). */
struct fake_daemon {
	struct revocations *df_revs;
	struct audit *df_audit;
};

static void
sock_status(void *arg, struct evbuffer *out)
{
	(void)arg;
	evbuffer_add_printf(out, "version %s\nuptime 5\n", SLUICE_VERSION);
}

static void
sock_reload(void *arg)
{
	(void)arg;
	reloads++;
}

static int
sock_revoke(void *arg, const char *jti, uid_t uid, char *why, size_t whylen)
{
	struct fake_daemon *df = arg;

	if (admin_revoke(df->df_revs, df->df_audit, jti, uid, why, whylen) ==
	    -1)
		return -1;
	assert_true(nrevoked < SL_NELEM(revoked));
	snprintf(revoked[nrevoked++], sizeof(revoked[0]), "%s", jti);
	return 0;
}

static int
setup(void **state)
{
	(void)state;
	reloads = 0;
	nrevoked = 0;
	revoked_uid = (uid_t)-1;
	return 0;
}

/* Run one line through admin_dispatch; returns the answer (malloc'd). */
static char *
dispatch(const char *line, int want_rc)
{
	struct evbuffer *out = evbuffer_new();
	size_t n;
	char *s;

	assert_non_null(out);
	assert_int_equal(admin_dispatch(&fake_ops, line, strlen(line), 1234,
			     out),
	    want_rc);
	n = evbuffer_get_length(out);
	s = malloc(n + 1);
	assert_non_null(s);
	evbuffer_remove(out, s, n);
	s[n] = '\0';
	evbuffer_free(out);
	return s;
}

static void
expect(const char *line, int rc, const char *answer)
{
	char *s = dispatch(line, rc);

	if (strcmp(s, answer) != 0)
		fail_msg("\"%s\": got \"%s\", want \"%s\"", line, s, answer);
	free(s);
}

static void
test_dispatch(void **state)
{
	char longjti[TOKEN_MAX_STR + 16];

	(void)state;
	expect("status", 0, "fake status\n");
	expect("reload", 0, "ok reload requested\n");
	assert_int_equal(reloads, 1);
	expect("revoke abc-123", 0, "ok revoked abc-123\n");
	assert_int_equal(nrevoked, 1);
	assert_string_equal(revoked[0], "abc-123");
	assert_int_equal(revoked_uid, 1234);
	expect("revoke \xc3\xa9t\xc3\xa9", 0, "ok revoked \xc3\xa9t\xc3\xa9\n");
	expect("revoke bad", -1, "error: cannot persist\n");
	/* An error text never spans two lines. */
	expect("revoke fail-me", -1, "error: state_dir: no space\n");
	assert_int_equal(nrevoked, 2);

	expect("revoke", -1,
	    "error: usage: revoke <jti> (1-128 bytes, no spaces or control "
	    "characters)\n");
	expect("revoke ", -1,
	    "error: usage: revoke <jti> (1-128 bytes, no spaces or control "
	    "characters)\n");
	expect("revoke a b", -1,
	    "error: usage: revoke <jti> (1-128 bytes, no spaces or control "
	    "characters)\n");
	expect("revoke a\tb", -1,
	    "error: usage: revoke <jti> (1-128 bytes, no spaces or control "
	    "characters)\n");
	expect("revoke \xff", -1,
	    "error: usage: revoke <jti> (1-128 bytes, no spaces or control "
	    "characters)\n");
	memset(longjti, 'j', sizeof(longjti));
	memcpy(longjti, "revoke ", 7);
	longjti[7 + TOKEN_MAX_STR + 1] = '\0';
	expect(longjti, -1,
	    "error: usage: revoke <jti> (1-128 bytes, no spaces or control "
	    "characters)\n");
	longjti[7 + TOKEN_MAX_STR] = '\0'; /* exactly 128 bytes */
	{
		char *s = dispatch(longjti, 0);

		assert_true(strncmp(s, "ok revoked jjj", 14) == 0);
		free(s);
	}
	assert_int_equal(nrevoked, 3);

	expect("", -1, "error: unknown command\n");
	expect("STATUS", -1, "error: unknown command\n");
	expect("status ", -1, "error: unknown command\n");
	expect("revokex", -1, "error: unknown command\n");
	expect("shutdown", -1, "error: unknown command\n");
	assert_int_equal(reloads, 1);
	assert_int_equal(nrevoked, 3);
}

/* Send req on a new connection (then half-close) and read the answer. */
static char *
exchange(struct event_base *base, const char *path, const char *req, size_t len)
{
	struct sockaddr_un sun;
	struct timespec start, now;
	char *resp = malloc(4096);
	size_t got = 0;
	ssize_t n;
	int fd;

	assert_non_null(resp);
	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	assert_true(strlen(path) < sizeof(sun.sun_path));
	memcpy(sun.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sun, sizeof(sun)), 0);
	assert_int_equal(write(fd, req, len), (ssize_t)len);
	assert_int_equal(shutdown(fd, SHUT_WR), 0);
	assert_int_equal(fcntl(fd, F_SETFL, O_NONBLOCK), 0);
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		event_base_loop(base, EVLOOP_NONBLOCK);
		n = read(fd, resp + got, 4095 - got);
		if (n == 0 || (n == -1 && errno == ECONNRESET))
			break;
		if (n > 0) {
			got += (size_t)n;
			assert_true(got < 4095);
			continue;
		}
		assert_true(errno == EAGAIN);
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - start.tv_sec > 5)
			fail_msg("no answer on the admin socket");
		usleep(1000);
	}
	close(fd);
	resp[got] = '\0';
	return resp;
}

/* "sandbox WORDS": split on blanks, printable ASCII only, one error line. */
static void
test_dispatch_sandbox(void **state)
{
	char *a;

	(void)state;
	a = dispatch("sandbox add  run-1 sbx-1 198.18.0.2 2001:2::2", 0);
	assert_string_equal(a, "ok 5 words\n");
	free(a);
	assert_int_equal(sbx_argc, 5);
	assert_string_equal(sbx_words[0], "add");
	assert_string_equal(sbx_words[1], "run-1");
	assert_string_equal(sbx_words[4], "2001:2::2");
	a = dispatch("sandbox list", 0);
	assert_string_equal(a, "ok 1 words\n");
	free(a);
	a = dispatch("sandbox del x", -1);
	assert_string_equal(a, "error: no sandbox \"x\"\n");
	free(a);
	a = dispatch("sandbox", -1);
	assert_non_null(strstr(a, "error: usage: sandbox add"));
	free(a);
	a = dispatch("sandbox add a\tb", -1);
	assert_string_equal(a, "error: sandbox: printable ASCII words only\n");
	free(a);
	a = dispatch("sandboxes list", -1);
	assert_string_equal(a, "error: unknown command\n");
	free(a);
	a = dispatch(
	    "sandbox a b c d e f g h i j k l m n o p q r s t u v w x y", -1);
	assert_string_equal(a, "error: sandbox: too many words\n");
	free(a);
}

static void
test_socket(void **state)
{
	struct event_base *base = event_base_new();
	char dir[] = "/tmp/sluice-test-admin-XXXXXX";
	char path[96], logpath[96], revpath[96], why[256] = "", *r, big[700];
	struct fake_daemon df;
	struct admin_ops ops = {
		.ao_status = sock_status,
		.ao_reload = sock_reload,
		.ao_revoke = sock_revoke,
		.ao_arg = &df,
	};
	struct audit_conf ac;
	struct stat st;
	FILE *f;
	char line[1024], last[1024] = "";
	cJSON *j;

	(void)state;
	assert_non_null(base);
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/admin.sock", dir);
	snprintf(logpath, sizeof(logpath), "%s/audit.jsonl", dir);
	snprintf(revpath, sizeof(revpath), "%s/revoked.admin", dir);
	memset(&ac, 0, sizeof(ac));
	ac.ac_path = logpath;
	ac.ac_chain = 1;
	ac.ac_fsync = AUDIT_FSYNC_NEVER;
	df.df_audit = audit_open(&ac, NULL, NULL, why, sizeof(why));
	assert_non_null(df.df_audit);
	df.df_revs = revocations_open(dir, why, sizeof(why));
	assert_non_null(df.df_revs);

	assert_int_equal(admin_open(base, path, getuid(), &ops, why,
			     sizeof(why)),
	    0);
	assert_int_equal(stat(path, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(st.st_uid, getuid());

	r = exchange(base, path, "status\n", 7);
	assert_string_equal(r, "version " SLUICE_VERSION "\nuptime 5\n");
	free(r);
	r = exchange(base, path, "reload\r\n", 8);
	assert_string_equal(r, "ok reload requested\n");
	assert_int_equal(reloads, 1);
	free(r);
	/* No newline before the half-close: still one command. */
	r = exchange(base, path, "revoke run-42-jti", 17);
	assert_string_equal(r, "ok revoked run-42-jti\n");
	assert_int_equal(nrevoked, 1);
	free(r);
	/* Refused by the revocations set: no token.revoke line below. */
	r = exchange(base, path, "revoke #fail-me\n", 16);
	assert_string_equal(r, "error: jti starts with '#' (a comment)\n");
	assert_int_equal(nrevoked, 1);
	free(r);
	/* Only the first line counts. */
	r = exchange(base, path, "reload\nreload\n", 14);
	assert_string_equal(r, "ok reload requested\n");
	assert_int_equal(reloads, 2);
	free(r);
	r = exchange(base, path, "bogus\n", 6);
	assert_string_equal(r, "error: unknown command\n");
	free(r);
	memset(big, 'a', sizeof(big));
	r = exchange(base, path, big, sizeof(big));
	assert_string_equal(r, "error: line too long\n");
	free(r);
	/* ADMIN_LINE_MAX bytes with the newline is the longest line. */
	big[ADMIN_LINE_MAX] = '\n';
	r = exchange(base, path, big, ADMIN_LINE_MAX + 1);
	assert_string_equal(r, "error: line too long\n");
	free(r);
	big[ADMIN_LINE_MAX - 1] = '\n';
	r = exchange(base, path, big, ADMIN_LINE_MAX);
	assert_string_equal(r, "error: unknown command\n");
	free(r);
	/* An empty connection gets an empty answer. */
	r = exchange(base, path, "", 0);
	assert_string_equal(r, "");
	free(r);

	/* The revocation is in force and persisted. */
	assert_true(revocations_has(df.df_revs, NULL, 0, "run-42-jti"));
	assert_false(revocations_has(df.df_revs, NULL, 0, "#fail-me"));
	revocations_close(df.df_revs);
	/* It left exactly one token.revoke line. */
	audit_close(df.df_audit);
	f = fopen(logpath, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f) != NULL)
		snprintf(last, sizeof(last), "%s", line);
	fclose(f);
	j = cJSON_Parse(last);
	assert_non_null(j);
	assert_string_equal(cJSON_GetObjectItem(j, "event")->valuestring,
	    "token.revoke");
	assert_string_equal(cJSON_GetObjectItem(j, "jti")->valuestring,
	    "run-42-jti");
	assert_true(
	    cJSON_GetObjectItem(j, "uid")->valuedouble == (double)getuid());
	assert_int_equal((int)cJSON_GetObjectItem(j, "seq")->valuedouble, 1);
	cJSON_Delete(j);

	admin_close();
	assert_int_equal(lstat(path, &st), -1);
	/* Something that is not a socket is never removed. */
	{
		int fd = open(path, O_WRONLY | O_CREAT, 0600);

		assert_true(fd >= 0);
		close(fd);
	}
	assert_int_equal(admin_open(base, path, getuid(), &ops, why,
			     sizeof(why)),
	    -1);
	assert_non_null(strstr(why, "not a socket"));
	assert_int_equal(lstat(path, &st), 0);
	unlink(path);
	unlink(logpath);
	unlink(revpath);
	rmdir(dir);
	event_base_free(base);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_dispatch, setup),
		cmocka_unit_test_setup(test_dispatch_sandbox, setup),
		cmocka_unit_test_setup(test_socket, setup),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
