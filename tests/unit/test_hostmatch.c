/*
 * Unit tests for host matching (docs/config.md "Allowing more than the
 * model"): hostmatch_normalize() on the names a policy or a request may
 * give, hostmatch_lookup()'s precedence (exact beats wildcard, longer
 * suffix beats shorter, "*.example.org" never matches "example.org"), and
 * the same table through policy_route_for() on a loaded policy with
 * allowlist and fixed routes, written from the contract.
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
#include "proxy/util/hostmatch.h"

static void
test_normalize(void **state)
{
	static const struct {
		const char *in;
		int wild;
		const char *out; /* NULL: refused */
	} rows[] = {
		{ "example.org", 0, "example.org" },
		{ "EXAMPLE.org.", 0, "example.org" },
		{ "a.B.Example.ORG", 0, "a.b.example.org" },
		{ "xn--bcher-kva.example", 0, "xn--bcher-kva.example" },
		{ "XN--BCHER-KVA.example", 0, "xn--bcher-kva.example" },
		{ "_srv.example", 0, "_srv.example" }, { "a-b.c", 0, "a-b.c" },
		{ "localhost", 0, "localhost" },
		{ "*.example.org", 1, "*.example.org" },
		{ "*.EXAMPLE.org.", 1, "*.example.org" },
		{ "*.org", 1, "*.org" },
		{ "*.example.org", 0, NULL }, /* requests name no wildcard */
		{ "*", 1, NULL }, { "*.", 1, NULL }, { "**.example", 1, NULL },
		{ "a.*.example", 1, NULL }, { "*a.example", 1, NULL },
		{ "", 0, NULL }, { ".", 0, NULL }, { "example.org..", 0, NULL },
		{ ".example.org", 0, NULL }, { "a..b", 0, NULL },
		{ "-a.example", 0, NULL }, { "a-.example", 0, NULL },
		{ "b\xc3\xbc"
		  "cher.example",
		    0, NULL },
		{ "a b.example", 0, NULL }, { "a%41.example", 0, NULL },
		{ "a.example:443", 0, NULL },
		{ "0123456789012345678901234567890123456789012345678901234567890"
		  "123.x",
		    0, NULL }, /* a 64-byte label */
		{ "012345678901234567890123456789012345678901234567890123456789"
		  "012.x",
		    0,
		    "012345678901234567890123456789012345678901234567890123456789"
		    "012.x" }, /* 63 */
	};
	char out[HOSTMATCH_BUF];
	size_t i;
	int n;

	(void)state;
	for (i = 0; i < SL_NELEM(rows); i++) {
		const char *why = NULL;

		n = hostmatch_normalize(rows[i].in, strlen(rows[i].in),
		    rows[i].wild, out, &why);
		if (rows[i].out == NULL) {
			if (n != -1)
				fail_msg("row %zu \"%s\": accepted as \"%s\"",
				    i, rows[i].in, out);
			assert_non_null(why);
		} else {
			if (n == -1)
				fail_msg("row %zu \"%s\": refused: %s", i,
				    rows[i].in, why);
			assert_int_equal(n, (int)strlen(rows[i].out));
			assert_string_equal(out, rows[i].out);
		}
	}
}

static void
test_name_length(void **state)
{
	char in[300], out[HOSTMATCH_BUF];
	size_t i;

	(void)state;
	/* 253 bytes: 63 x 4 labels less 3; 254 is one too many. */
	memset(in, 'a', sizeof(in));
	for (i = 63; i < sizeof(in); i += 64)
		in[i] = '.';
	assert_int_equal(hostmatch_normalize(in, 253, 0, out, NULL), 253);
	in[253] = '.'; /* a final dot does not count */
	assert_int_equal(hostmatch_normalize(in, 254, 0, out, NULL), 253);
	in[253] = 'a';
	assert_int_equal(hostmatch_normalize(in, 254, 0, out, NULL), -1);
}

/* Lookups: which value the best key holds, -1 for none. */
static long
lookup(const struct hostmatch *hm, const char *name, int *wild)
{
	struct hostmatch_hit hit;

	if (!hostmatch_lookup(hm, name, strlen(name), 0, &hit))
		return -1;
	*wild = hit.hh_wild;
	return (long)hit.hh_vals[0];
}

static void
test_precedence(void **state)
{
	static const char *const keys[] = { "*.org", "*.example.org",
		"example.org", "a.b.example.org", "*.b.example.org",
		"xn--bcher-kva.example", "*.co.uk" };
	static const struct {
		const char *name;
		long want;
		int wild;
	} rows[] = {
		{ "example.org", 2, 0 },       /* exact, not *.org */
		{ "x.example.org", 1, 1 },     /* *.example.org over *.org */
		{ "a.b.example.org", 3, 0 },   /* exact over *.b.example.org */
		{ "c.b.example.org", 4, 1 },   /* longest suffix */
		{ "b.example.org", 1, 1 },     /* *.b... never matches b... */
		{ "z.y.x.example.org", 1, 1 }, /* several labels */
		{ "org", -1, 0 },              /* *.org needs a label before */
		{ "other.org", 0, 1 },
		{ "example.org.evil", -1, 0 },
		{ "evilexample.org", 0, 1 }, /* *.org, never *.example.org */
		{ "xn--bcher-kva.example", 5, 0 },
		{ "www.xn--bcher-kva.example", -1, 0 },
		{ "co.uk", -1, 0 },
		{ "a.co.uk", 6, 1 },
		{ "uk", -1, 0 },
		{ "", -1, 0 },
	};
	struct hostmatch *hm = hostmatch_new();
	uint32_t first;
	size_t i;
	int wild;

	(void)state;
	assert_non_null(hm);
	for (i = 0; i < SL_NELEM(keys); i++) {
		assert_int_equal(hostmatch_add(hm, keys[i], (uint32_t)i,
				     &first),
		    0);
		assert_int_equal(first, HOSTMATCH_NONE);
	}
	assert_int_equal(hostmatch_count(hm), SL_NELEM(keys));
	/* A key added again reports who held it. */
	assert_int_equal(hostmatch_add(hm, "*.example.org", 9, &first), 0);
	assert_int_equal(first, 1);
	assert_int_equal(hostmatch_count(hm), SL_NELEM(keys));
	for (i = 0; i < SL_NELEM(rows); i++) {
		long got;

		wild = -1;
		got = lookup(hm, rows[i].name, &wild);
		if (got != rows[i].want)
			fail_msg("\"%s\": value %ld, want %ld", rows[i].name,
			    got, rows[i].want);
		if (got != -1 && wild != rows[i].wild)
			fail_msg("\"%s\": wild %d", rows[i].name, wild);
	}
	/* exact_only (IP literals): no wildcard applies. */
	{
		struct hostmatch_hit hit;

		assert_int_equal(hostmatch_lookup(hm, "x.example.org", 13, 1,
				     &hit),
		    0);
		assert_int_equal(hostmatch_lookup(hm, "example.org", 11, 1,
				     &hit),
		    1);
	}
	hostmatch_free(hm);
	hostmatch_free(NULL);
}

/* Many keys: the table grows and every one is still found. */
static void
test_many(void **state)
{
	struct hostmatch *hm = hostmatch_new();
	char name[64];
	size_t i;
	int wild;

	(void)state;
	for (i = 0; i < 5000; i++) {
		snprintf(name, sizeof(name), "%sh%zu.example",
		    i % 2 ? "*." : "", i);
		assert_int_equal(hostmatch_add(hm, name, (uint32_t)i, NULL), 0);
	}
	for (i = 0; i < 5000; i++) {
		snprintf(name, sizeof(name), "%sh%zu.example",
		    i % 2 ? "x." : "", i);
		assert_int_equal(lookup(hm, name, &wild), (long)i);
		assert_int_equal(wild, (int)(i % 2));
	}
	assert_int_equal(lookup(hm, "h1.example", &wild), -1);
	hostmatch_free(hm);
}

/*
 * Through a loaded policy: an allowlist route per precedence level, a
 * fixed route whose upstream host sits under a wildcard, and literals.
 */
static const char policy[] =
    "{\"listeners\":[{\"type\":\"forward\",\"listen\":\"127.0.0.1:3128\"}],"
    "\"tokens\":{\"keys\":[{\"alg\":\"HS256\",\"secret_file\":\"%s\"}]},"
    "\"netpolicy\":{\"mode\":\"off\"},"
    "\"routes\":["
    "{\"audience\":\"org\",\"hosts\":[\"*.org\"],"
    "\"upstream\":{\"mode\":\"as_requested\",\"ports\":[443,80]}},"
    "{\"audience\":\"ex\",\"hosts\":[\"*.example.org\",\"EXAMPLE.org.\"],"
    "\"upstream\":{\"mode\":\"as_requested\",\"ports\":[80,443]}},"
    "{\"audience\":\"model\",\"hosts\":[\"model.internal\"],"
    "\"upstream\":{\"url\":\"https://api.example.org/v1\"}},"
    "{\"audience\":\"lit\",\"hosts\":[\"198.18.0.9\",\"[2001:2::9]\"],"
    "\"upstream\":{\"mode\":\"as_requested\"}},"
    "{\"audience\":\"ex\",\"hosts\":[\"xn--bcher-kva.example\"],"
    "\"upstream\":{\"mode\":\"as_requested\"}}]}";

static void
write_file(const char *path, const char *data, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, strlen(data)), (ssize_t)strlen(data));
	assert_int_equal(fchmod(fd, mode), 0);
	assert_int_equal(close(fd), 0);
}

static const char *
route_of(const struct config *cf, const char *target, int connect)
{
	const struct route *rt;
	const char *why = "";
	struct uri u;

	memset(&u, 0, sizeof(u));
	if (uri_parse_target(target, strlen(target), connect, &u, &why) == -1)
		fail_msg("%s: %s", target, why);
	rt = policy_route_for(cf, &u, connect);
	return rt != NULL ? rt->rt_audience : "-";
}

static void
test_policy_routes(void **state)
{
	static const struct {
		const char *target;
		int connect;
		const char *want; /* audience, "-" for none */
	} rows[] = {
		{ "http://pypi.org/simple/", 0, "org" },
		{ "http://a.b.example.org/", 0, "ex" },
		{ "http://example.org/", 0, "ex" },
		{ "http://EXAMPLE.org./", 0, "ex" },
		{ "http://x.EXAMPLE.ORG./", 0, "ex" },
		{ "http://org/", 0, "-" },
		{ "http://example.com/", 0, "-" },
		/* exact beats wildcard: the fixed upstream's own host */
		{ "http://api.example.org/", 0, "model" },
		{ "api.example.org:443", 1, "model" },
		/* its port elsewhere: the exact name decides, no fallback */
		{ "api.example.org:8443", 1, "-" },
		{ "http://model.internal/", 0, "model" },
		{ "model.internal:443", 1, "-" }, /* an alias: no raw CONNECT */
		/* allowlist ports: 80 and 443 here, 443 only for "lit" */
		{ "a.example.org:443", 1, "ex" },
		{ "a.example.org:8443", 1, "-" },
		{ "http://a.example.org:8080/", 0, "-" },
		{ "http://198.18.0.9/", 0, "-" },
		{ "a.pypi.org:443", 1, "org" },
		{ "http://a.pypi.org:80/", 0, "org" },
		/* absolute-form https is not dialled as requested */
		{ "https://a.pypi.org/", 0, "-" },
		{ "xn--bcher-kva.example:443", 1, "ex" },
		{ "XN--BCHER-KVA.EXAMPLE.:443", 1, "ex" },
		{ "198.18.0.9:443", 1, "lit" },
		{ "[2001:2:0:0::9]:443", 1, "lit" },
		{ "198.18.0.10:443", 1, "-" },
		/* a numeric name is not under a wildcard */
		{ "1.2.3.org:443", 1, "org" },
	};
	char dir[256], key[300], pol[300], why[1024], *json;
	const char *tmp = getenv("TMPDIR");
	struct config *cf;
	size_t i, n;

	(void)state;
	snprintf(dir, sizeof(dir), "%s/sluice-hostmatch-XXXXXX",
	    tmp != NULL ? tmp : "/tmp");
	assert_non_null(mkdtemp(dir));
	snprintf(key, sizeof(key), "%s/hs.key", dir);
	snprintf(pol, sizeof(pol), "%s/policy.json", dir);
	/* No system CA store: loading it costs more than this test. */
	snprintf(why, sizeof(why), "%s/no-ca.pem", dir);
	(void)setenv("SSL_CERT_FILE", why, 1);
	(void)setenv("SSL_CERT_DIR", why, 1);
	write_file(key, "0123456789abcdef0123456789abcdef\n", 0600);
	n = sizeof(policy) + strlen(key);
	json = malloc(n);
	assert_non_null(json);
	snprintf(json, n, policy, key);
	write_file(pol, json, 0644);
	free(json);
	cf = config_load(pol, NULL, why, sizeof(why));
	(void)unlink(key);
	(void)unlink(pol);
	(void)rmdir(dir);
	if (cf == NULL)
		fail_msg("policy refused: %s", why);
	for (i = 0; i < SL_NELEM(rows); i++) {
		const char *got = route_of(cf, rows[i].target, rows[i].connect);

		if (strcmp(got, rows[i].want) != 0)
			fail_msg("%s%s: route %s, want %s",
			    rows[i].connect ? "CONNECT " : "", rows[i].target,
			    got, rows[i].want);
	}
	/* Two routes share the audience "ex"; hosts kept normalized. */
	assert_string_equal(cf->cf_routes[1].rt_hosts[1], "example.org");
	assert_int_equal(cf->cf_routes[1].rt_nmethods, 2);
	assert_string_equal(cf->cf_routes[1].rt_methods[0], "GET");
	assert_string_equal(cf->cf_routes[1].rt_methods[1], "HEAD");
	assert_true(cf->cf_routes[1].rt_connect);
	assert_false(cf->cf_routes[2].rt_connect);
	config_unref(cf);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_normalize),
		cmocka_unit_test(test_name_length),
		cmocka_unit_test(test_precedence),
		cmocka_unit_test(test_many),
		cmocka_unit_test(test_policy_routes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
