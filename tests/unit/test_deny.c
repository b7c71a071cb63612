/*
 * Unit tests for denial responses (proxy/deny.c) and the per-client state
 * (proxy/clients.c): the status line ends with the reason, x-should-retry
 * is on every 4xx and on no 5xx, the body is JSON with exactly error,
 * message and request_id, values from the sandbox are cleaned and cut;
 * the refusal budget, the connection counts and the aggregation of
 * repeated refusals.
 */
#include <sys/socket.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>
#include <event2/buffer.h>
#include <event2/event.h>

#include "proxy/proxy.h"

/* The response as a NUL-terminated string (caller frees). */
static char *
render(enum reason r, int reverse, int close, const char *msg, const char *id)
{
	struct evbuffer *b = evbuffer_new();
	size_t n;
	char *s;

	assert_non_null(b);
	assert_int_equal(deny_write(b, r, reverse, close, msg, id), 0);
	n = evbuffer_get_length(b);
	s = calloc(1, n + 1);
	assert_non_null(s);
	evbuffer_remove(b, s, n);
	evbuffer_free(b);
	return s;
}

static const char *
body_of(const char *resp)
{
	const char *p = strstr(resp, "\r\n\r\n");

	assert_non_null(p);
	return p + 4;
}

static void
test_status_line_and_headers(void **state)
{
	char *s;

	(void)state;
	s = render(REASON_ROUTE_NOT_FOUND, 0, 0, "host x matches no route",
	    "00000001000000000001");
	assert_true(strncmp(s, "HTTP/1.1 403 Forbidden (route_not_found)\r\n",
			41) == 0);
	assert_non_null(strstr(s, "\r\nSluice-Deny: route_not_found\r\n"));
	assert_non_null(strstr(s, "\r\nx-should-retry: false\r\n"));
	assert_null(strstr(s, "Connection: close"));
	assert_null(strstr(s, "Authenticate"));
	free(s);

	s = render(REASON_TOKEN_EXPIRED, 1, 1, "run token expired 35 s ago",
	    "id");
	assert_true(strncmp(s, "HTTP/1.1 401 Unauthorized (token_expired)\r\n",
			43) == 0);
	assert_non_null(strstr(s, "\r\nWWW-Authenticate: Bearer\r\n"));
	assert_non_null(strstr(s, "\r\nConnection: close\r\n"));
	free(s);

	s = render(REASON_TOKEN_MISSING, 0, 0, "m", "id");
	assert_non_null(strstr(s,
	    "407 Proxy Authentication Required "
	    "(token_missing)\r\n"));
	assert_non_null(strstr(s, "\r\nProxy-Authenticate: Bearer\r\n"));
	free(s);

	/* 5xx: a retry may help, so no x-should-retry. */
	s = render(REASON_UPSTREAM_TIMEOUT, 0, 1, "m", "id");
	assert_true(
	    strncmp(s, "HTTP/1.1 504 Gateway Timeout (upstream_timeout)\r\n",
		49) == 0);
	assert_null(strstr(s, "x-should-retry"));
	free(s);

	s = render(REASON_RATE_LIMITED, 0, 1, "m", "id");
	assert_true(
	    strncmp(s, "HTTP/1.1 429 Too Many Requests (rate_limited)\r\n",
		47) == 0);
	assert_non_null(strstr(s, "\r\nx-should-retry: false\r\n"));
	assert_non_null(strstr(s, "\r\nRetry-After: 1\r\n"));
	free(s);
}

static void
test_body_json(void **state)
{
	enum reason r;

	(void)state;
	for (r = 0; r < REASON_OK; r++) {
		char *s = render(r, 0, 1, "say \"why\" \\ here", "abc");
		const char *b = body_of(s), *cl;
		cJSON *j = cJSON_Parse(b), *e;

		assert_non_null(j);
		/* Exactly three members. */
		assert_int_equal(cJSON_GetArraySize(j), 3);
		e = cJSON_GetObjectItemCaseSensitive(j, "error");
		assert_true(cJSON_IsString(e));
		assert_string_equal(e->valuestring, reason_name(r));
		e = cJSON_GetObjectItemCaseSensitive(j, "message");
		assert_true(cJSON_IsString(e));
		assert_string_equal(e->valuestring, "say \"why\" \\ here");
		e = cJSON_GetObjectItemCaseSensitive(j, "request_id");
		assert_true(cJSON_IsString(e));
		assert_string_equal(e->valuestring, "abc");
		cJSON_Delete(j);
		cl = strstr(s, "Content-Length: ");
		assert_non_null(cl);
		assert_int_equal(strtoul(cl + 16, NULL, 10), strlen(b));
		/* Every 4xx and only those say a retry will not help. */
		{
			int st = reason_status(r, 0);

			assert_int_equal(strstr(s, "x-should-retry: false") !=
				NULL,
			    st >= 400 && st < 500);
		}
		free(s);
	}
}

static void
test_upstream_reasons(void **state)
{
	enum reason r;
	int n = 0;

	(void)state;
	for (r = 0; r < REASON__COUNT; r++)
		if (reason_is_upstream(r)) {
			assert_int_equal(strncmp(reason_name(r), "upstream_",
					     9),
			    0);
			n++;
		} else
			assert_int_not_equal(strncmp(reason_name(r),
						 "upstream_", 9),
			    0);
	assert_int_equal(n, 4);
	assert_int_equal(reason_status(REASON_RATE_LIMITED, 0), 429);
	assert_string_equal(reason_name(REASON_RATE_LIMITED), "rate_limited");
}

static void
test_clean(void **state)
{
	char out[16], big[2000];
	size_t n;

	(void)state;
	n = deny_clean(out, sizeof(out), "a\"b\\c\n\x7f\xc3\xa9", 9);
	assert_int_equal(n, 9);
	assert_string_equal(out, "a\"b\\c????");
	/* Cut to cap - 1 bytes, ending in "...". */
	n = deny_clean(out, sizeof(out), "0123456789abcdefghij", 20);
	assert_int_equal(n, 15);
	assert_string_equal(out, "0123456789ab...");
	/* Exactly cap - 1 fits whole. */
	n = deny_clean(out, sizeof(out), "0123456789abcde", 15);
	assert_string_equal(out, "0123456789abcde");
	memset(big, 'x', sizeof(big));
	n = deny_clean(out, 1, big, sizeof(big));
	assert_int_equal(n, 0);
	assert_string_equal(out, "");
}

static struct sockaddr_in
v4(const char *a, int port)
{
	struct sockaddr_in s;

	memset(&s, 0, sizeof(s));
	s.sin_family = AF_INET;
	s.sin_port = htons((uint16_t)port);
	assert_int_equal(inet_pton(AF_INET, a, &s.sin_addr), 1);
	return s;
}

static void
test_refusal_budget(void **state)
{
	struct sockaddr_in a = v4("198.18.9.1", 1000), b = v4("198.18.9.2", 1);
	int i;

	(void)state;
	for (i = 0; i < 5; i++)
		assert_int_equal(clients_refusal((struct sockaddr *)&a, 100, 5),
		    0);
	assert_int_equal(clients_refusal((struct sockaddr *)&a, 100, 5), 1);
	/* Another port is the same client; another address is not. */
	a.sin_port = htons(2000);
	assert_int_equal(clients_refusal((struct sockaddr *)&a, 100, 5), 1);
	assert_int_equal(clients_refusal((struct sockaddr *)&b, 100, 5), 0);
	/* The next second starts afresh; 0 is no limit. */
	assert_int_equal(clients_refusal((struct sockaddr *)&a, 101, 5), 0);
	for (i = 0; i < 100; i++)
		assert_int_equal(clients_refusal((struct sockaddr *)&a, 102, 0),
		    0);
}

static void
test_conn_counts(void **state)
{
	struct sockaddr_in a = v4("198.18.9.3", 1), a2 = v4("198.18.9.3", 2);
	struct sockaddr_in6 m;
	int i;

	(void)state;
	assert_int_equal(clients_conns((struct sockaddr *)&a), 0);
	for (i = 0; i < 3; i++)
		assert_int_equal(clients_conn_add((struct sockaddr *)&a), 0);
	assert_int_equal(clients_conn_add((struct sockaddr *)&a2), 0);
	assert_int_equal(clients_conns((struct sockaddr *)&a), 4);
	/* An IPv4-mapped IPv6 address is the same client. */
	memset(&m, 0, sizeof(m));
	m.sin6_family = AF_INET6;
	assert_int_equal(inet_pton(AF_INET6, "::ffff:198.18.9.3", &m.sin6_addr),
	    1);
	assert_int_equal(clients_conns((struct sockaddr *)&m), 4);
	for (i = 0; i < 4; i++)
		clients_conn_del((struct sockaddr *)&a);
	assert_int_equal(clients_conns((struct sockaddr *)&a), 0);
	clients_conn_del((struct sockaddr *)&a); /* no underflow */
	assert_int_equal(clients_conns((struct sockaddr *)&a), 0);
}

static void
test_aggregate(void **state)
{
	struct event_base *base = event_base_new();
	struct sockaddr_in a = v4("198.18.9.4", 1), b = v4("198.18.9.5", 1);
	struct proxy_env env;
	struct clients_refusal r;
	int i;

	(void)state;
	assert_non_null(base);
	memset(&env, 0, sizeof(env));
	env.pe_base = base; /* no audit writer: lines are only counted */
	clients_init(&env);
	memset(&r, 0, sizeof(r));
	r.cr_peer = (struct sockaddr *)&a;
	r.cr_reason = REASON_TOKEN_MISSING;
	r.cr_status = 407;
	r.cr_id = "1";
	r.cr_client = "198.18.9.4:1";
	r.cr_listener = "fwd";
	r.cr_host = "h.test";
	r.cr_path = "/x";
	r.cr_method = "POST";
	/* The first is written, the repeats are counted. */
	assert_int_equal(clients_aggregate(&r), 1);
	for (i = 0; i < 50; i++)
		assert_int_equal(clients_aggregate(&r), 0);
	/* Any difference is a refusal of another kind. */
	r.cr_path = "/y";
	assert_int_equal(clients_aggregate(&r), 1);
	r.cr_reason = REASON_ROUTE_NOT_FOUND;
	assert_int_equal(clients_aggregate(&r), 1);
	r.cr_peer = (struct sockaddr *)&b;
	assert_int_equal(clients_aggregate(&r), 1);
	assert_int_equal(clients_aggregate(&r), 0);
	/* Flushing forgets them: the next is written again. */
	clients_flush();
	assert_int_equal(clients_aggregate(&r), 1);
	/* A flood of distinct kinds stays in the fixed table. */
	for (i = 0; i < 5000; i++) {
		char host[32];

		snprintf(host, sizeof(host), "h%d.test", i);
		r.cr_host = host;
		assert_int_equal(clients_aggregate(&r), 1);
	}
	clients_flush();
	clients_init(NULL);
	event_base_free(base);
}

static void
test_ids(void **state)
{
	char a[CLIENTS_ID_LEN], b[CLIENTS_ID_LEN];

	(void)state;
	clients_next_id(a, sizeof(a));
	clients_next_id(b, sizeof(b));
	assert_int_equal(strlen(a), 20);
	assert_string_not_equal(a, b);
	assert_int_equal(strspn(a, "0123456789abcdef"), 20);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_status_line_and_headers),
		cmocka_unit_test(test_body_json),
		cmocka_unit_test(test_clean),
		cmocka_unit_test(test_upstream_reasons),
		cmocka_unit_test(test_refusal_budget),
		cmocka_unit_test(test_conn_counts),
		cmocka_unit_test(test_aggregate),
		cmocka_unit_test(test_ids),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
