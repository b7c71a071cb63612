/*
 * Unit tests for enforce "report" in policy_decide() (docs/config.md
 * "Report mode"), written from the contract: a request refused only for
 * route_not_found, method_not_allowed or path_not_allowed is let through
 * with de_report and the reason it would have had (an unknown host is
 * dialled as an allowlist route for exactly that host would be), while
 * token failures, a revoked token, a path that is refused rather than
 * normalized and an https:// target stay refused; without "enforce" the
 * same requests are refused.
 */
#include <sys/stat.h>

#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "proxy/proxy.h"

#define NOW 1700000000LL

static const char policy[] =
    "{\"listeners\":[{\"type\":\"forward\",\"listen\":\"127.0.0.1:3128\"}],"
    "\"tokens\":{\"keys\":[{\"alg\":\"HS256\",\"secret_file\":\"%s\"}]},"
    "\"netpolicy\":{\"mode\":\"off\"},%s"
    "\"routes\":["
    "{\"audience\":\"pkgs\",\"hosts\":[\"pypi.example\"],"
    "\"path_prefixes\":[\"/simple\"],"
    "\"upstream\":{\"mode\":\"as_requested\",\"ports\":[80,443]}},"
    "{\"audience\":\"model\",\"path_prefixes\":[\"/v1/messages\"],"
    "\"upstream\":{\"url\":\"http://198.18.0.2/\","
    "\"allow_plaintext\":true}}]}";

static void
write_file(const char *path, const char *data, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, strlen(data)), (ssize_t)strlen(data));
	assert_int_equal(fchmod(fd, mode), 0);
	assert_int_equal(close(fd), 0);
}

static struct config *
load(const char *extra)
{
	char dir[256], key[300], pol[300], why[1024], *json;
	const char *tmp = getenv("TMPDIR");
	struct config *cf;
	size_t n;

	snprintf(dir, sizeof(dir), "%s/sluice-report-XXXXXX",
	    tmp != NULL ? tmp : "/tmp");
	assert_non_null(mkdtemp(dir));
	snprintf(key, sizeof(key), "%s/hs.key", dir);
	snprintf(pol, sizeof(pol), "%s/policy.json", dir);
	write_file(key, "0123456789abcdef0123456789abcdef\n", 0600);
	n = sizeof(policy) + strlen(key) + strlen(extra);
	json = malloc(n);
	assert_non_null(json);
	snprintf(json, n, policy, key, extra);
	write_file(pol, json, 0644);
	free(json);
	cf = config_load(pol, NULL, why, sizeof(why));
	(void)unlink(key);
	(void)unlink(pol);
	(void)rmdir(dir);
	if (cf == NULL)
		fail_msg("policy refused: %s", why);
	return cf;
}

enum tok { T_GOOD, T_EXPIRED, T_REVOKED, T_BADSIG, T_WRONG_ISS };

static enum reason
decide(const struct config *cf, const char *method, const char *target,
    enum tok t, struct decision *d)
{
	struct token_claims c;
	struct req_view v;
	struct uri u;
	const char *why;
	int connect = strcmp(method, "CONNECT") == 0;

	memset(&c, 0, sizeof(c));
	snprintf(c.sub, sizeof(c.sub), "run-1");
	snprintf(c.jti, sizeof(c.jti), "jti-1");
	assert_int_equal(token_claims_add_aud(&c, "model"), 0);
	c.exp = t == T_EXPIRED ? NOW - 100 : NOW + 600;
	memset(&u, 0, sizeof(u));
	assert_int_equal(uri_parse_target(target, strlen(target), connect, &u,
			     &why),
	    0);
	memset(&v, 0, sizeof(v));
	v.rv_listener = &cf->cf_listeners[0];
	v.rv_connect = connect;
	v.rv_method = method;
	v.rv_method_len = strlen(method);
	v.rv_uri = &u;
	v.rv_token = t == T_BADSIG ? REASON_TOKEN_BAD_SIGNATURE : REASON_OK;
	v.rv_claims = t == T_BADSIG ? NULL : &c;
	v.rv_revoked = t == T_REVOKED;
	return policy_decide(cf, &v, NOW, d);
}

static void
test_report(void **state)
{
	static const struct {
		const char *method, *target;
		enum tok tok;
		enum reason enforce, report, would;
		const char *dest; /* report route: the host dialled */
	} rows[] = {
		/* refused for the route, method or path: reported */
		{ "GET", "http://other.example/x", T_GOOD,
		    REASON_ROUTE_NOT_FOUND, REASON_OK, REASON_ROUTE_NOT_FOUND,
		    "other.example" },
		{ "CONNECT", "Other.Example.:8443", T_GOOD,
		    REASON_ROUTE_NOT_FOUND, REASON_OK, REASON_ROUTE_NOT_FOUND,
		    "other.example" },
		{ "GET", "http://pypi.example/elsewhere", T_GOOD,
		    REASON_TOKEN_WRONG_AUDIENCE, REASON_TOKEN_WRONG_AUDIENCE, 0,
		    NULL },
		{ "POST", "http://198.18.0.2/v1/admin", T_GOOD,
		    REASON_PATH_NOT_ALLOWED, REASON_OK, REASON_PATH_NOT_ALLOWED,
		    NULL },
		{ "GET", "http://198.18.0.2/v1/messages", T_GOOD,
		    REASON_METHOD_NOT_ALLOWED, REASON_OK,
		    REASON_METHOD_NOT_ALLOWED, NULL },
		{ "CONNECT", "198.18.0.2:80", T_GOOD, REASON_METHOD_NOT_ALLOWED,
		    REASON_OK, REASON_METHOD_NOT_ALLOWED, NULL },
		/* still refused */
		{ "GET", "http://other.example/x", T_EXPIRED,
		    REASON_ROUTE_NOT_FOUND, REASON_TOKEN_EXPIRED, 0, NULL },
		{ "GET", "http://other.example/x", T_BADSIG,
		    REASON_TOKEN_BAD_SIGNATURE, REASON_TOKEN_BAD_SIGNATURE, 0,
		    NULL },
		{ "GET", "http://other.example/x", T_REVOKED,
		    REASON_ROUTE_NOT_FOUND, REASON_ROUTE_NOT_FOUND, 0, NULL },
		{ "POST", "http://198.18.0.2/v1/messages/../admin", T_GOOD,
		    REASON_PATH_NOT_ALLOWED, REASON_PATH_NOT_ALLOWED, 0, NULL },
		{ "GET", "http://other.example/%2e%2e/x", T_GOOD,
		    REASON_ROUTE_NOT_FOUND, REASON_ROUTE_NOT_FOUND, 0, NULL },
		{ "GET", "https://other.example/x", T_GOOD,
		    REASON_ROUTE_NOT_FOUND, REASON_ROUTE_NOT_FOUND, 0, NULL },
		/* allowed anyway: not a report */
		{ "POST", "http://198.18.0.2/v1/messages", T_GOOD, REASON_OK,
		    REASON_OK, 0, NULL },
	};
	struct config *deny = load(""), *rep = load("\"enforce\":\"report\",");
	struct decision d;
	size_t i;

	(void)state;
	assert_false(deny->cf_report);
	assert_true(rep->cf_report);
	for (i = 0; i < SL_NELEM(rows); i++) {
		enum reason r;

		r = decide(deny, rows[i].method, rows[i].target, rows[i].tok,
		    &d);
		if (r != rows[i].enforce || d.de_report)
			fail_msg("row %zu %s %s (deny): %s", i, rows[i].method,
			    rows[i].target, reason_name(r));
		r = decide(rep, rows[i].method, rows[i].target, rows[i].tok,
		    &d);
		if (r != rows[i].report)
			fail_msg("row %zu %s %s (report): %s", i,
			    rows[i].method, rows[i].target, reason_name(r));
		if (rows[i].would != 0) {
			assert_true(d.de_report);
			assert_int_equal(d.de_would, rows[i].would);
			assert_int_equal(d.de_budget_limit, 0);
			assert_non_null(d.de_route);
		} else
			assert_false(d.de_report);
		if (rows[i].dest != NULL) {
			assert_ptr_equal(d.de_route, rep->cf_report_rt);
			assert_string_equal(d.de_dest, rows[i].dest);
		}
	}
	config_unref(deny);
	config_unref(rep);
}

static void
test_enforce_values(void **state)
{
	(void)state;
	config_unref(load("\"enforce\":\"deny\","));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_report),
		cmocka_unit_test(test_enforce_values),
	};

	(void)setenv("SSL_CERT_FILE", "/nonexistent/no-ca.pem", 1);
	(void)setenv("SSL_CERT_DIR", "/nonexistent", 1);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
