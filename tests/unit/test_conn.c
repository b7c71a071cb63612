/*
 * A connection (proxy/conn.c) driven through a socketpair, with a real
 * struct proxy_env around it: a policy loaded from a temporary file, the
 * audit log in a temporary directory, real revocations, budget and token
 * cache. No daemon, no listener: what is refused before any upstream is
 * involved, answered and written to the audit log once; and a connection
 * closed again and again, through different paths (conn_close() itself,
 * the end of a drain, the client), before and after its request was
 * admitted to an upstream that never answers: one audit line, with the
 * reason of the close that ended it.
 */
#include <sys/socket.h>
#include <sys/stat.h>

#include <netinet/in.h>
#include <arpa/inet.h>

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
#include <event2/event.h>

#include "proxy/proxy.h"
#include "proxy/relay/conn_int.h"

static char dir[] = "/tmp/sluice-test-conn-XXXXXX";
static char path_key[96], path_policy[96], path_audit[96];
static struct proxy_env env;
/* The route's upstream object (its members), for load_policy(). */
static char upstream_json[160];
static int listen_fd = -1; /* an upstream that never answers */

static void
write_file(const char *path, const char *s, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, s, strlen(s)), (ssize_t)strlen(s));
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
}

/*
 * Write the test policy, route "a" (hosts a.test) with route_extra among
 * its keys, and load it (prev: the policy in force, may be NULL).
 */
static struct config *
load_policy(const char *route_extra, const struct config *prev)
{
	char policy[2048], why[1024] = "";
	struct config *cf;

	snprintf(policy, sizeof(policy),
	    "{\"listeners\":[{\"name\":\"fwd\",\"type\":\"forward\","
	    "\"listen\":\"127.0.0.1:3128\"}],"
	    "\"tokens\":{\"keys\":[{\"alg\":\"HS256\",\"secret_file\":"
	    "\"%s\"}]},"
	    "\"routes\":[{\"audience\":\"a\",\"hosts\":[\"a.test\"],%s"
	    "\"upstream\":{%s}}],"
	    "\"audit\":{\"path\":\"%s\",\"fsync\":\"never\"},"
	    "\"netpolicy\":{\"mode\":\"off\"},\"state_dir\":\"%s\"}",
	    path_key, route_extra, upstream_json, path_audit, dir);
	write_file(path_policy, policy, 0644);
	if ((cf = config_load(path_policy, prev, why, sizeof(why))) == NULL)
		fail_msg("config_load: %s", why);
	return cf;
}

static int
setup(void **state)
{
	char why[1024] = "";

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path_key, sizeof(path_key), "%s/hs.key", dir);
	snprintf(path_policy, sizeof(path_policy), "%s/policy.json", dir);
	snprintf(path_audit, sizeof(path_audit), "%s/audit.jsonl", dir);
	write_file(path_key, "test-conn-secret-0123456789abcdef\n", 0600);

	memset(&env, 0, sizeof(env));
	assert_non_null(env.pe_base = event_base_new());
	assert_int_equal(upstream_init(env.pe_base, why, sizeof(why)), 0);
	snprintf(upstream_json, sizeof(upstream_json),
	    "\"url\":\"http://198.18.0.2/\",\"allow_plaintext\":true");
	/* methods: the default, ["POST"]. */
	env.pe_cf = load_policy("", NULL);
	env.pe_audit = audit_open(&env.pe_cf->cf_audit, dir, env.pe_base, why,
	    sizeof(why));
	if (env.pe_audit == NULL)
		fail_msg("audit_open: %s", why);
	assert_non_null(env.pe_revs = revocations_open(dir, why, sizeof(why)));
	assert_non_null(env.pe_budget = budget_open(dir, why, sizeof(why)));
	assert_non_null(env.pe_cache = token_cache_new(16));
	return 0;
}

static int
teardown(void **state)
{
	(void)state;
	conn_close_all();
	/* Connections are freed from the loop. */
	event_base_loop(env.pe_base, EVLOOP_NONBLOCK);
	clients_init(NULL);
	if (env.pe_audit != NULL)
		audit_close(env.pe_audit);
	token_cache_free(env.pe_cache);
	if (env.pe_ups != NULL)
		upstreams_unref(env.pe_ups);
	if (listen_fd != -1)
		close(listen_fd);
	listen_fd = -1;
	revocations_close(env.pe_revs);
	budget_close(env.pe_budget);
	config_unref(env.pe_cf);
	event_base_free(env.pe_base);
	memset(&env, 0, sizeof(env));
	unlink(path_key);
	unlink(path_policy);
	unlink(path_audit);
	{
		static const char *const left[] = { "audit.head", "budget.db",
			"revoked.admin" };
		char p[128];
		size_t i;

		for (i = 0; i < SL_NELEM(left); i++) {
			snprintf(p, sizeof(p), "%s/%s", dir, left[i]);
			(void)unlink(p);
		}
	}
	assert_int_equal(rmdir(dir), 0);
	strcpy(dir + strlen(dir) - 6, "XXXXXX");
	return 0;
}

/* A new connection from 198.18.0.<host>; returns the client's end. */
static int
connect_one(int host)
{
	struct sockaddr_in peer;
	int sv[2];

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0,
			     sv),
	    0);
	memset(&peer, 0, sizeof(peer));
	peer.sin_family = AF_INET;
	peer.sin_port = htons(40000);
	peer.sin_addr.s_addr = htonl(0xc6120000u | (uint32_t)host);
	assert_int_equal(conn_accept(&env, sv[0], 0, (struct sockaddr *)&peer,
			     sizeof(peer)),
	    0);
	return sv[1];
}

/*
 * Send req, then run the loop and read until one whole response (its
 * head and Content-Length body) is in buf, or until EOF when want_eof.
 * Returns the bytes read; *eof says whether the connection was closed.
 */
static size_t
roundtrip(int fd, const char *req, char *buf, size_t cap, int want_eof,
    int *eof)
{
	struct timespec start, now;
	size_t got = 0;
	ssize_t n;

	*eof = 0;
	assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		const char *end, *cl;

		event_base_loop(env.pe_base, EVLOOP_NONBLOCK);
		n = read(fd, buf + got, cap - 1 - got);
		if (n == 0 || (n == -1 && errno == ECONNRESET)) {
			*eof = 1;
			break;
		}
		if (n > 0) {
			got += (size_t)n;
			assert_true(got < cap - 1);
			buf[got] = '\0';
			if (want_eof)
				continue;
			if ((end = strstr(buf, "\r\n\r\n")) != NULL &&
			    (cl = strstr(buf, "Content-Length: ")) != NULL &&
			    cl < end &&
			    got >= (size_t)(end + 4 - buf) +
				    strtoul(cl + 16, NULL, 10))
				break;
			continue;
		}
		assert_true(errno == EAGAIN);
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - start.tv_sec > 5)
			fail_msg("no %s from the connection",
			    want_eof ? "close" : "response");
		usleep(1000);
	}
	buf[got] = '\0';
	return got;
}

/* The audit lines written so far, as parsed JSON (count in *n). */
static cJSON **
audit_lines(size_t *n)
{
	static cJSON *lines[16];
	char line[AUDIT_LINE_MAX];
	FILE *f;

	assert_int_equal(audit_sync(env.pe_audit), 0);
	*n = 0;
	assert_non_null(f = fopen(path_audit, "r"));
	while (fgets(line, sizeof(line), f) != NULL) {
		assert_true(*n < SL_NELEM(lines));
		assert_non_null(lines[*n] = cJSON_Parse(line));
		(*n)++;
	}
	(void)fclose(f);
	return lines;
}

static void
audit_lines_free(cJSON **lines, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		cJSON_Delete(lines[i]);
}

/* The response in buf starts with this status line prefix. */
static void
expect_status(const char *buf, const char *want)
{
	if (strncmp(buf, want, strlen(want)) != 0)
		fail_msg("want \"%s\", got:\n%s", want, buf);
}

static const char *
str_field(const cJSON *j, const char *key)
{
	const cJSON *v = cJSON_GetObjectItem(j, key);

	assert_non_null(v);
	assert_true(cJSON_IsString(v));
	return v->valuestring;
}

static double
num_field(const cJSON *j, const char *key)
{
	const cJSON *v = cJSON_GetObjectItem(j, key);

	assert_non_null(v);
	assert_true(cJSON_IsNumber(v));
	return v->valuedouble;
}

/* No token: 407 with Proxy-Authenticate, and exactly one audit line. */
static void
test_no_token(void **state)
{
	char buf[8192];
	cJSON **lines;
	size_t n;
	int fd, eof;

	(void)state;
	fd = connect_one(10);
	assert_int_equal(conn_count(), 1);
	(void)roundtrip(fd,
	    "GET http://a.test/x HTTP/1.1\r\nHost: a.test\r\n\r\n", buf,
	    sizeof(buf), 0, &eof);
	expect_status(buf, "HTTP/1.1 407 ");
	assert_non_null(strstr(buf, "\r\nProxy-Authenticate: "));
	/* Nothing is logged twice when the client then goes away. */
	close(fd);
	while (conn_count() != 0)
		event_base_loop(env.pe_base, EVLOOP_ONCE);

	lines = audit_lines(&n);
	assert_int_equal(n, 1);
	assert_string_equal(str_field(lines[0], "event"), "http.request");
	assert_string_equal(str_field(lines[0], "decision"), "deny");
	assert_string_equal(str_field(lines[0], "reason"), "token_missing");
	assert_string_equal(str_field(lines[0], "listener"), "fwd");
	assert_string_equal(str_field(lines[0], "client"), "198.18.0.10:40000");
	assert_string_equal(str_field(lines[0], "host"), "a.test");
	assert_true(num_field(lines[0], "status") == 407);
	assert_true(num_field(lines[0], "seq") == 1);
	audit_lines_free(lines, n);
}

/* A malformed head: 400, the connection closed, one audit line. */
static void
test_malformed(void **state)
{
	char buf[8192];
	cJSON **lines;
	size_t n;
	int fd, eof;

	(void)state;
	fd = connect_one(11);
	(void)roundtrip(fd,
	    "GET http://a.test/x HTTP/1.1\r\nHost: a.test\r\nNo colon here\r\n"
	    "\r\n",
	    buf, sizeof(buf), 1, &eof);
	assert_true(eof);
	expect_status(buf, "HTTP/1.1 400 ");
	assert_non_null(strstr(buf, "\r\nConnection: close\r\n"));
	close(fd);
	while (conn_count() != 0)
		event_base_loop(env.pe_base, EVLOOP_ONCE);

	lines = audit_lines(&n);
	assert_int_equal(n, 1);
	assert_string_equal(str_field(lines[0], "event"), "http.request");
	assert_string_equal(str_field(lines[0], "decision"), "deny");
	assert_string_equal(str_field(lines[0], "reason"), "bad_request");
	assert_string_equal(str_field(lines[0], "client"), "198.18.0.11:40000");
	assert_true(num_field(lines[0], "status") == 400);
	audit_lines_free(lines, n);
}

/* A request head with a valid token for route "a" (jti given). */
static void
request_with_token(char *buf, size_t cap, const char *method, const char *path,
    const char *jti)
{
	const struct token_key *k = &env.pe_cf->cf_tokens.tc_keys[0];
	static const char hdr[] = "{\"alg\":\"HS256\",\"typ\":\"JWT\"}";
	char payload[256], tok[1024];

	snprintf(payload, sizeof(payload),
	    "{\"sub\":\"run-1\",\"aud\":\"a\",\"exp\":%lld,\"jti\":\"%s\"}",
	    (long long)time(NULL) + 300, jti);
	assert_int_equal(token_sign(k, hdr, strlen(hdr), payload,
			     strlen(payload), tok, sizeof(tok), NULL),
	    0);
	snprintf(buf, cap,
	    "%s http://a.test%s HTTP/1.1\r\nHost: a.test\r\n"
	    "Proxy-Authorization: Bearer %s\r\nContent-Length: 0\r\n\r\n",
	    method, path, tok);
}

/*
 * A request is decided by the env's policy and state as they are when it
 * arrives: swapping env.pe_cf (as a reload does) changes the answer on a
 * connection accepted before the swap, and so does a revocation added to
 * env.pe_revs.
 */
static void
test_env_current(void **state)
{
	char buf[8192], req[2048], why[256];
	struct config *old;
	cJSON **lines;
	size_t n;
	int fd[3], eof, i;

	(void)state;
	for (i = 0; i < 3; i++)
		fd[i] = connect_one(12 + i);
	/* GET is not among the default methods. */
	request_with_token(req, sizeof(req), "GET", "/x", "jti-1");
	(void)roundtrip(fd[0], req, buf, sizeof(buf), 0, &eof);
	expect_status(buf, "HTTP/1.1 403 ");

	/* The reload: GET allowed, but only under /only. */
	old = env.pe_cf;
	env.pe_cf = load_policy("\"methods\":[\"GET\"],"
				"\"path_prefixes\":[\"/only\"],",
	    old);
	config_unref(old);
	request_with_token(req, sizeof(req), "GET", "/x", "jti-1");
	(void)roundtrip(fd[1], req, buf, sizeof(buf), 0, &eof);
	expect_status(buf, "HTTP/1.1 403 ");

	/* A revocation in the env's set counts from the next request. */
	assert_int_equal(revocations_add(env.pe_revs, "jti-1", why,
			     sizeof(why)),
	    0);
	request_with_token(req, sizeof(req), "GET", "/only/x", "jti-1");
	(void)roundtrip(fd[2], req, buf, sizeof(buf), 0, &eof);
	expect_status(buf, "HTTP/1.1 407 ");
	for (i = 0; i < 3; i++)
		close(fd[i]);
	while (conn_count() != 0)
		event_base_loop(env.pe_base, EVLOOP_ONCE);

	/* One line per request, with the reason its policy gave. */
	lines = audit_lines(&n);
	assert_int_equal(n, 3);
	assert_string_equal(str_field(lines[0], "reason"),
	    "method_not_allowed");
	assert_string_equal(str_field(lines[1], "reason"), "path_not_allowed");
	assert_string_equal(str_field(lines[2], "reason"), "token_revoked");
	assert_string_equal(str_field(lines[2], "jti"), "jti-1");
	assert_string_equal(str_field(lines[2], "route"), "a");
	audit_lines_free(lines, n);
}

/* The connection accepted last (the list's tail), once in state st. */
static struct conn *
conn_in(enum conn_state st)
{
	struct timespec start, now;
	struct conn *c;

	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		event_base_loop(env.pe_base, EVLOOP_NONBLOCK);
		c = TAILQ_LAST(&relay_conns, conn_list);
		assert_non_null(c);
		if (c->cn_state == st)
			return c;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - start.tv_sec > 5)
			fail_msg("connection in %s, not %s",
			    conn_state_name(c->cn_state), conn_state_name(st));
		usleep(1000);
	}
}

/* Run the loop until every connection is freed. */
static void
settle(void)
{
	int i;

	while (conn_count() != 0)
		event_base_loop(env.pe_base, EVLOOP_ONCE);
	for (i = 0; i < 3; i++)
		event_base_loop(env.pe_base, EVLOOP_NONBLOCK);
}

/* The one audit line there must be: its reason and decision. */
static void
expect_one_line(const char *reason, const char *decision)
{
	cJSON **lines;
	size_t n;

	lines = audit_lines(&n);
	if (n != 1)
		fail_msg("%zu audit lines, want 1", n);
	assert_string_equal(str_field(lines[0], "reason"), reason);
	assert_string_equal(str_field(lines[0], "decision"), decision);
	audit_lines_free(lines, n);
}

/*
 * A head not read whole, closed three ways (directly twice, then the end
 * of a drain, then the client): one audit line, with the first close's
 * reason.
 */
static void
test_close_once_head(void **state)
{
	struct conn *c;
	int fd;

	(void)state;
	fd = connect_one(20);
	assert_int_equal(write(fd, "GET http://a.test/ HTTP/1.1\r\nHo", 31),
	    31);
	c = conn_in(CONN_S_HEAD);
	conn_close(c, REASON_INTERNAL_ERROR);
	assert_int_equal(conn_count(), 0);
	conn_close(c, REASON_TOKEN_REVOKED);
	conn_close_all();
	close(fd);
	settle();
	expect_one_line("internal_error", "deny");
}

/*
 * A refusal that closes the connection (400) logs its request then; the
 * closes that follow (conn_close() itself, the end of a drain) add no
 * line, also none counted into an aggregate one.
 */
static void
test_close_once_denied(void **state)
{
	static const char req[] =
	    "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n"
	    "Bad line\r\n\r\n";
	struct conn *c;
	int fd;

	(void)state;
	fd = connect_one(25);
	assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
	c = conn_in(CONN_S_FLUSH);
	conn_close(c, REASON_INTERNAL_ERROR);
	conn_close(c, REASON_DRAIN_TIMEOUT);
	conn_close_all(); /* and clients_flush(): aggregates are out */
	close(fd);
	settle();
	expect_one_line("bad_request", "deny");
}

/* Only the admit step makes a request ok: a close with ok cannot. */
static void
test_close_ok_not_admitted(void **state)
{
	struct conn *c;
	int fd;

	(void)state;
	fd = connect_one(21);
	assert_int_equal(write(fd, "GET http://a.test/ HTTP/1.1\r\n", 29), 29);
	c = conn_in(CONN_S_HEAD);
	conn_close(c, REASON_OK);
	close(fd);
	settle();
	expect_one_line("bad_request", "deny");
}

/*
 * A request admitted and sent to an upstream that takes the connection
 * and never answers: the connection waits for the response.
 */
static int
admitted(int host)
{
	struct sockaddr_in sin;
	socklen_t len = sizeof(sin);
	struct config *old = env.pe_cf;
	char req[2048], why[256];
	int fd;

	assert_true((listen_fd = socket(AF_INET, SOCK_STREAM, 0)) >= 0);
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(listen_fd, (struct sockaddr *)&sin, sizeof(sin)),
	    0);
	assert_int_equal(listen(listen_fd, 8), 0);
	assert_int_equal(getsockname(listen_fd, (struct sockaddr *)&sin, &len),
	    0);
	snprintf(upstream_json, sizeof(upstream_json),
	    "\"url\":\"http://127.0.0.1:%u/\",\"allow_plaintext\":true,"
	    "\"allow_private\":true",
	    ntohs(sin.sin_port));
	env.pe_cf = load_policy("", old);
	config_unref(old);
	assert_non_null(env.pe_ups = upstreams_new(env.pe_cf));
	(void)why;
	fd = connect_one(host);
	request_with_token(req, sizeof(req), "POST", "/x", "jti-close");
	assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
	return fd;
}

/*
 * An admitted request cut by a close with a reason (a tunnel's token
 * revoked, say): that reason is its audit line's, written once however
 * many closes follow.
 */
static void
test_close_once_admitted(void **state)
{
	struct conn *c;
	int fd;

	(void)state;
	fd = admitted(22);
	c = conn_in(CONN_S_EXCHANGE);
	conn_close(c, REASON_TOKEN_REVOKED);
	conn_close(c, REASON_CLIENT_CLOSED);
	conn_close(c, REASON_OK);
	conn_close_all();
	close(fd);
	settle();
	expect_one_line("token_revoked", "allow");
}

/* The end of a drain cuts an admitted request: drain_timeout, once. */
static void
test_close_drain_admitted(void **state)
{
	struct conn *c;
	int fd;

	(void)state;
	fd = admitted(23);
	c = conn_in(CONN_S_EXCHANGE);
	conn_close_all();
	conn_close(c, REASON_INTERNAL_ERROR);
	close(fd);
	settle();
	expect_one_line("drain_timeout", "allow");
}

/* The client hangs up on an admitted request: client_closed, once. */
static void
test_close_client_admitted(void **state)
{
	int fd;

	(void)state;
	fd = admitted(24);
	(void)conn_in(CONN_S_EXCHANGE);
	close(fd);
	settle();
	conn_close_all();
	settle();
	expect_one_line("client_closed", "allow");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_no_token, setup, teardown),
		cmocka_unit_test_setup_teardown(test_malformed, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_env_current, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_close_once_head, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_close_once_denied, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_close_ok_not_admitted,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_close_once_admitted, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_close_drain_admitted,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_close_client_admitted,
		    setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
