/*
 * Gateway identity (DESIGN.md "Gateway identity"): the policy's
 * "sandboxes" refused field by field, the registry's O(1) lookup by
 * source address (IPv4, IPv6, IPv4-mapped), clashes, removal while a
 * connection still holds its sandbox, reload sync, the state file, the
 * per-sandbox rate bucket, and the binding in policy_decide()
 * (sandbox_unknown, token_wrong_sandbox, the sbx claim).
 */
#include <sys/stat.h>

#include <arpa/inet.h>
#include <netinet/in.h>

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

static char dir[256], keypath[300], polpath[300];

static void
write_file(const char *path, const char *data, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, strlen(data)), (ssize_t)strlen(data));
	assert_int_equal(fchmod(fd, mode), 0);
	assert_int_equal(close(fd), 0);
}

/* A gateway policy with extra (a JSON fragment, ' for ") at the end. */
static struct config *
load(const char *extra, char *why, size_t whylen)
{
	char buf[8192], *p;

	snprintf(buf, sizeof(buf),
	    "{'user':'65534','listeners':[{'type':'forward',"
	    "'listen':'198.18.7.1:3128'}],"
	    "'tokens':{'keys':[{'alg':'HS256','secret_file':'%s'}]},"
	    "'routes':[{'audience':'model','upstream':{"
	    "'url':'http://198.18.0.2/','allow_plaintext':true}}],"
	    "'netpolicy':{'mode':'gateway','sandbox_interfaces':['sbx-*',"
	    "'tap0']},'state_dir':'%s'%s}",
	    keypath, dir, extra);
	for (p = buf; *p != '\0'; p++)
		if (*p == '\'')
			*p = '"';
	write_file(polpath, buf, 0644);
	return config_load(polpath, NULL, why, whylen);
}

#define SBX_A                                                                  \
	",'sandboxes':[{'id':'a','interface':'sbx-a','addresses':["            \
	"'198.18.8.2','2001:2:8::2']},{'id':'run.b-2','interface':'tap0',"     \
	"'addresses':['198.18.9.2']}]"

static int
group_setup(void **state)
{
	const char *tmp = getenv("TMPDIR");

	(void)state;
	snprintf(dir, sizeof(dir), "%s/sluice-sbx-XXXXXX",
	    tmp != NULL ? tmp : "/tmp");
	if (mkdtemp(dir) == NULL)
		return -1;
	snprintf(keypath, sizeof(keypath), "%s/hs.key", dir);
	snprintf(polpath, sizeof(polpath), "%s/policy.json", dir);
	write_file(keypath, "0123456789abcdef0123456789abcdef\n", 0600);
	return 0;
}

static int
group_teardown(void **state)
{
	char p[400];

	(void)state;
	snprintf(p, sizeof(p), "%s/%s", dir, SBX_STATE_FILE);
	(void)unlink(p);
	(void)unlink(keypath);
	(void)unlink(polpath);
	(void)rmdir(dir);
	return 0;
}

static void
sin4(struct sockaddr_storage *ss, const char *ip, uint16_t port)
{
	struct sockaddr_in *s = (struct sockaddr_in *)ss;

	memset(ss, 0, sizeof(*ss));
	s->sin_family = AF_INET;
	s->sin_port = htons(port);
	assert_int_equal(inet_pton(AF_INET, ip, &s->sin_addr), 1);
}

static void
sin6(struct sockaddr_storage *ss, const char *ip, uint16_t port)
{
	struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof(*ss));
	s->sin6_family = AF_INET6;
	s->sin6_port = htons(port);
	assert_int_equal(inet_pton(AF_INET6, ip, &s->sin6_addr), 1);
}

static const char *
id_of(const struct sbx_registry *r, const struct sockaddr_storage *ss)
{
	const struct sandbox *sb =
	    sbx_registry_lookup(r, (const struct sockaddr *)ss);

	return sb != NULL ? sb->sb_conf.sc_id : NULL;
}

static void
test_policy_loads(void **state)
{
	char why[1024];
	struct config *cf;

	(void)state;
	cf = load(SBX_A, why, sizeof(why));
	if (cf == NULL)
		fail_msg("%s", why);
	assert_int_equal(cf->cf_nsandboxes, 2);
	assert_string_equal(cf->cf_sandboxes[0].sc_id, "a");
	assert_string_equal(cf->cf_sandboxes[0].sc_iface, "sbx-a");
	assert_int_equal(cf->cf_sandboxes[0].sc_naddrs, 2);
	assert_int_equal(cf->cf_sandboxes[0].sc_addrs[1].sa_fam, 6);
	assert_string_equal(cf->cf_sandboxes[1].sc_iface, "tap0");
	assert_int_equal(cf->cf_limits.per_sandbox_connections, 256);
	assert_int_equal(cf->cf_limits.per_sandbox_rps, 0);
	config_unref(cf);
}

static void
test_policy_refused(void **state)
{
	static const struct {
		const char *extra, *want;
	} bad[] = {
		{ ",'sandboxes':{}", "sandboxes: must be an array" },
		{ ",'sandboxes':[1]", "sandboxes[0]: must be an object" },
		{ ",'sandboxes':[{'id':'a','interface':'sbx-a','addresses':["
		  "'198.18.8.2'],'ifname':'x'}]",
		    "sandboxes[0]: unknown key \"ifname\"" },
		{ ",'sandboxes':[{'interface':'sbx-a','addresses':['198.18.8.2']}]",
		    "sandboxes[0]: id: required" },
		{ ",'sandboxes':[{'id':'-a','interface':'sbx-a','addresses':["
		  "'198.18.8.2']}]",
		    "sandboxes[0]: id: \"-a\"" },
		{ ",'sandboxes':[{'id':'a b','interface':'sbx-a','addresses':["
		  "'198.18.8.2']}]",
		    "sandboxes[0]: id: " },
		{ ",'sandboxes':[{'id':'a','interface':'eth0','addresses':["
		  "'198.18.8.2']}]",
		    "sandboxes[0]: interface: \"eth0\" matches no "
		    "netpolicy.sandbox_interfaces" },
		{ ",'sandboxes':[{'id':'a','interface':'sbx-*','addresses':["
		  "'198.18.8.2']}]",
		    "sandboxes[0]: interface: \"sbx-*\": an exact name" },
		{ ",'sandboxes':[{'id':'a','interface':'sbx-aaaaaaaaaaaaa',"
		  "'addresses':['198.18.8.2']}]",
		    "sandboxes[0]: interface: " },
		{ ",'sandboxes':[{'id':'a','interface':'sbx-a','addresses':[]}]",
		    "sandboxes[0]: addresses: required" },
		{ ",'sandboxes':[{'id':'a','interface':'sbx-a','addresses':["
		  "'198.18.8.0/24']}]",
		    "sandboxes[0]: addresses[0]: \"198.18.8.0/24\": not an IP" },
		{ ",'sandboxes':[{'id':'a','interface':'sbx-a','addresses':["
		  "'198.18.8.2','127.0.0.1']}]",
		    "sandboxes[0]: addresses[1]: \"127.0.0.1\": not a unicast" },
		{ ",'sandboxes':[{'id':'a','interface':'sbx-a','addresses':["
		  "'::ffff:198.18.8.2']}]",
		    "sandboxes[0]: addresses[0]: \"::ffff:198.18.8.2\": an "
		    "IPv4-mapped" },
		{ ",'sandboxes':[{'id':'a','interface':'sbx-a','addresses':["
		  "'198.18.8.2','198.18.8.2']}]",
		    "sandboxes[0]: addresses[1]: listed twice" },
		{ ",'sandboxes':[{'id':'a','interface':'sbx-a','addresses':["
		  "'198.18.8.2']},{'id':'a','interface':'sbx-b','addresses':["
		  "'198.18.8.3']}]",
		    "sandboxes[1]: id: also sandboxes[0]'s" },
		{ ",'sandboxes':[{'id':'a','interface':'sbx-a','addresses':["
		  "'198.18.8.2']},{'id':'b','interface':'sbx-a','addresses':["
		  "'198.18.8.3']}]",
		    "sandboxes[1]: interface: also sandboxes[0]'s" },
		{ ",'sandboxes':[{'id':'a','interface':'sbx-a','addresses':["
		  "'198.18.8.2']},{'id':'b','interface':'sbx-b','addresses':["
		  "'198.18.8.2']}]",
		    "sandboxes[1]: addresses: also sandboxes[0]'s" },
		{ ",'limits':{'per_sandbox_connections':0}",
		    "limits.per_sandbox_connections: " },
	};
	char why[1024], want[1200];
	struct config *cf;
	size_t i;

	(void)state;
	for (i = 0; i < SL_NELEM(bad); i++) {
		why[0] = '\0';
		cf = load(bad[i].extra, why, sizeof(why));
		if (cf != NULL)
			fail_msg("accepted: %s", bad[i].extra);
		snprintf(want, sizeof(want), "%s: %s", polpath, bad[i].want);
		if (strncmp(why, want, strlen(want)) != 0)
			fail_msg("case %zu: got \"%s\", want \"%s...\"", i, why,
			    want);
	}
}

/* Only a gateway has sandboxes. */
static void
test_policy_sidecar_refused(void **state)
{
	char buf[2048], why[1024], *p;
	struct config *cf;

	(void)state;
	snprintf(buf, sizeof(buf),
	    "{'user':'65534','listeners':[{'type':'forward',"
	    "'listen':'127.0.0.1:3128'}],"
	    "'tokens':{'keys':[{'alg':'HS256','secret_file':'%s'}]},"
	    "'routes':[{'audience':'model','upstream':{"
	    "'url':'http://198.18.0.2/','allow_plaintext':true}}],"
	    "'sandboxes':[]}",
	    keypath);
	for (p = buf; *p != '\0'; p++)
		if (*p == '\'')
			*p = '"';
	write_file(polpath, buf, 0644);
	cf = config_load(polpath, NULL, why, sizeof(why));
	assert_null(cf);
	assert_non_null(strstr(why, ": sandboxes: only in gateway mode"));
}

static void
test_registry_lookup(void **state)
{
	struct sockaddr_storage ss;
	struct sbx_registry *r;
	struct config *cf;
	char why[1024];

	(void)state;
	assert_non_null(cf = load(SBX_A, why, sizeof(why)));
	assert_non_null(r = sbx_registry_new());
	assert_int_equal(sbx_registry_sync(r, cf, why, sizeof(why)), 0);
	assert_int_equal(sbx_registry_count(r), 2);
	sin4(&ss, "198.18.8.2", 40000);
	assert_string_equal(id_of(r, &ss), "a");
	sin6(&ss, "2001:2:8::2", 1);
	assert_string_equal(id_of(r, &ss), "a");
	/* A dual-stack listener sees IPv4 clients as mapped addresses. */
	sin6(&ss, "::ffff:198.18.9.2", 1);
	assert_string_equal(id_of(r, &ss), "run.b-2");
	sin4(&ss, "198.18.8.3", 1);
	assert_null(id_of(r, &ss));
	sin6(&ss, "2001:2:8::3", 1);
	assert_null(id_of(r, &ss));
	sbx_registry_free(r);
	config_unref(cf);
}

/* Many sandboxes: every address found, none of another's. */
static void
test_registry_many(void **state)
{
	struct sockaddr_storage ss;
	struct sandbox_conf sc;
	struct sbx_registry *r;
	struct config *cf;
	char why[1024], id[32], ifc[16], a4[32], a6[48];
	const char *addrs[2] = { a4, a6 };
	size_t i;

	(void)state;
	assert_non_null(cf = load("", why, sizeof(why)));
	assert_non_null(r = sbx_registry_new());
	for (i = 0; i < 1000; i++) {
		snprintf(id, sizeof(id), "s%zu", i);
		snprintf(ifc, sizeof(ifc), "sbx-%zu", i);
		snprintf(a4, sizeof(a4), "198.18.%zu.%zu", 100 + i / 200,
		    1 + i % 200);
		snprintf(a6, sizeof(a6), "2001:2:1::%zx", i + 1);
		if (sandbox_conf_make(cf, id, ifc, addrs, 2, &sc, why,
			sizeof(why)) == -1)
			fail_msg("%s", why);
		assert_int_equal(sbx_registry_add(r, &sc, 1, why, sizeof(why)),
		    0);
	}
	for (i = 0; i < 1000; i++) {
		snprintf(id, sizeof(id), "s%zu", i);
		snprintf(a4, sizeof(a4), "198.18.%zu.%zu", 100 + i / 200,
		    1 + i % 200);
		sin4(&ss, a4, 1);
		assert_string_equal(id_of(r, &ss), id);
		snprintf(a6, sizeof(a6), "2001:2:1::%zx", i + 1);
		sin6(&ss, a6, 1);
		assert_string_equal(id_of(r, &ss), id);
	}
	/* Removing every other one keeps the rest found. */
	for (i = 0; i < 1000; i += 2) {
		snprintf(id, sizeof(id), "s%zu", i);
		assert_int_equal(sbx_registry_del(r, id), 0);
	}
	assert_int_equal(sbx_registry_count(r), 500);
	for (i = 0; i < 1000; i++) {
		snprintf(id, sizeof(id), "s%zu", i);
		snprintf(a4, sizeof(a4), "198.18.%zu.%zu", 100 + i / 200,
		    1 + i % 200);
		sin4(&ss, a4, 1);
		if (i % 2 == 0)
			assert_null(id_of(r, &ss));
		else
			assert_string_equal(id_of(r, &ss), id);
	}
	sbx_registry_free(r);
	config_unref(cf);
}

static void
test_registry_clash_and_refs(void **state)
{
	const char *a1[] = { "198.18.8.2" }, *a2[] = { "198.18.10.2" };
	struct sockaddr_storage ss;
	struct sandbox_conf sc;
	struct sbx_registry *r;
	struct sandbox *held;
	struct config *cf;
	char why[1024];

	(void)state;
	assert_non_null(cf = load(SBX_A, why, sizeof(why)));
	assert_non_null(r = sbx_registry_new());
	assert_int_equal(sbx_registry_sync(r, cf, why, sizeof(why)), 0);
	/* An address, an interface or an id of another: refused. */
	assert_int_equal(sandbox_conf_make(cf, "c", "sbx-c", a1, 1, &sc, why,
			     sizeof(why)),
	    0);
	assert_int_equal(sbx_registry_add(r, &sc, 1, why, sizeof(why)), -1);
	assert_string_equal(why, "addresses: also sandbox a's");
	assert_int_equal(sandbox_conf_make(cf, "c", "sbx-a", a2, 1, &sc, why,
			     sizeof(why)),
	    0);
	assert_int_equal(sbx_registry_add(r, &sc, 1, why, sizeof(why)), -1);
	assert_string_equal(why, "interface: also sandbox a's");
	assert_int_equal(sandbox_conf_make(cf, "a", "sbx-c", a2, 1, &sc, why,
			     sizeof(why)),
	    0);
	assert_int_equal(sbx_registry_add(r, &sc, 1, why, sizeof(why)), -1);
	assert_int_equal(sandbox_conf_make(cf, "c", "sbx-c", a2, 1, &sc, why,
			     sizeof(why)),
	    0);
	assert_int_equal(sbx_registry_add(r, &sc, 1, why, sizeof(why)), 0);
	/* A connection holds c while it is deleted: it stays readable. */
	sin4(&ss, "198.18.10.2", 1);
	held = sandbox_ref(sbx_registry_lookup(r, (struct sockaddr *)&ss));
	assert_int_equal(sbx_registry_del(r, "c"), 0);
	assert_int_equal(sbx_registry_del(r, "c"), -1);
	assert_true(held->sb_removed);
	assert_string_equal(held->sb_conf.sc_id, "c");
	assert_null(id_of(r, &ss));
	sandbox_unref(held);
	sbx_registry_free(r);
	config_unref(cf);
}

/* A reload keeps the state of unchanged sandboxes and drops clashes. */
static void
test_registry_sync_and_state(void **state)
{
	const char *a1[] = { "198.18.9.2" }, *a3[] = { "198.18.11.2" };
	struct sandbox_conf sc;
	struct sbx_registry *r, *r2;
	struct config *cf;
	struct sandbox *a;
	char why[1024];

	(void)state;
	assert_non_null(cf = load(SBX_A, why, sizeof(why)));
	assert_non_null(r = sbx_registry_new());
	assert_int_equal(sbx_registry_sync(r, cf, why, sizeof(why)), 0);
	a = sbx_registry_find(r, "a");
	a->sb_conns = 5;
	/* Admin ones: one that will clash with the next policy, one not. */
	assert_int_equal(sandbox_conf_make(cf, "x", "sbx-x", a3, 1, &sc, why,
			     sizeof(why)),
	    0);
	assert_int_equal(sbx_registry_add(r, &sc, 1, why, sizeof(why)), 0);
	config_unref(cf);
	assert_non_null(cf = load(",'sandboxes':[{'id':'a','interface':'sbx-a',"
				  "'addresses':['198.18.8.2','2001:2:8::2']},"
				  "{'id':'y','interface':'sbx-y','addresses':["
				  "'198.18.11.2']}]",
			    why, sizeof(why)));
	assert_int_equal(sbx_registry_sync(r, cf, why, sizeof(why)), 1);
	assert_non_null(strstr(why, "admin sandbox x clashes"));
	assert_ptr_equal(sbx_registry_find(r, "a"), a);
	assert_int_equal(a->sb_conns, 5);
	assert_null(sbx_registry_find(r, "run.b-2"));
	assert_null(sbx_registry_find(r, "x"));
	assert_non_null(sbx_registry_find(r, "y"));
	/* Persisted: only the admin ones, read back as admin ones. */
	assert_int_equal(sandbox_conf_make(cf, "z", "sbx-z", a1, 1, &sc, why,
			     sizeof(why)),
	    0);
	assert_int_equal(sbx_registry_add(r, &sc, 1, why, sizeof(why)), 0);
	if (sbx_registry_save(r, -1, dir, why, sizeof(why)) == -1)
		fail_msg("%s", why);
	assert_non_null(r2 = sbx_registry_new());
	assert_int_equal(sbx_registry_load(r2, cf, dir, why, sizeof(why)), 0);
	assert_int_equal(sbx_registry_count(r2), 1);
	assert_true(sbx_registry_at(r2, 0)->sb_admin);
	assert_string_equal(sbx_registry_at(r2, 0)->sb_conf.sc_id, "z");
	/* Loaded after the policy's: one that clashes is left out. */
	sbx_registry_free(r2);
	assert_non_null(r2 = sbx_registry_new());
	assert_int_equal(sbx_registry_add(r2, &sc, 0, why, sizeof(why)), 0);
	assert_int_equal(sbx_registry_load(r2, cf, dir, why, sizeof(why)), 1);
	assert_non_null(strstr(why, "(z) left out: id: also sandbox z's"));
	sbx_registry_free(r2);
	sbx_registry_free(r);
	config_unref(cf);
}

static void
test_state_file_refused(void **state)
{
	char why[1024], p[400];
	struct sbx_registry *r;
	struct config *cf;

	(void)state;
	assert_non_null(cf = load("", why, sizeof(why)));
	snprintf(p, sizeof(p), "%s/%s", dir, SBX_STATE_FILE);
	write_file(p,
	    "[{\"id\":\"q\",\"interface\":\"eth9\",\"addresses\":[\"198.18.1."
	    "1\"]}]",
	    0600);
	assert_non_null(r = sbx_registry_new());
	assert_int_equal(sbx_registry_load(r, cf, dir, why, sizeof(why)), -1);
	assert_non_null(
	    strstr(why, "sandboxes.json: [0]: interface: \"eth9\""));
	assert_int_equal(sbx_registry_count(r), 0);
	(void)unlink(p);
	/* No file: nothing to add. */
	assert_int_equal(sbx_registry_load(r, cf, dir, why, sizeof(why)), 0);
	sbx_registry_free(r);
	config_unref(cf);
}

/* GCRA: a burst of rps, then one per 1/rps seconds. */
static void
test_rate(void **state)
{
	struct sandbox sb;
	int64_t t = 1000000000;
	int i;

	(void)state;
	memset(&sb, 0, sizeof(sb));
	assert_int_equal(sandbox_rate(&sb, 0, t), 0); /* off */
	for (i = 0; i < 5; i++)
		assert_int_equal(sandbox_rate(&sb, 5, t), 0);
	assert_int_equal(sandbox_rate(&sb, 5, t), 1);
	assert_int_equal(sandbox_rate(&sb, 5, t + 100000), 1);
	assert_int_equal(sandbox_rate(&sb, 5, t + 200000), 0);
	assert_int_equal(sandbox_rate(&sb, 5, t + 200000), 1);
	/* After a quiet second the whole burst is back. */
	for (i = 0; i < 5; i++)
		assert_int_equal(sandbox_rate(&sb, 5, t + 3000000), 0);
	assert_int_equal(sandbox_rate(&sb, 5, t + 3000000), 1);
}

/* The binding, in the one decision function. */
static void
test_decide_binding(void **state)
{
	struct token_claims c;
	struct decision d;
	struct req_view v;
	struct uri u;
	struct config *cf;
	char why[1024];
	const char *uwhy;
	static const char target[] = "http://198.18.0.2/v1/x";

	(void)state;
	assert_non_null(cf = load(SBX_A, why, sizeof(why)));
	memset(&u, 0, sizeof(u));
	assert_int_equal(uri_parse_target(target, strlen(target), 0, &u, &uwhy),
	    0);
	memset(&c, 0, sizeof(c));
	snprintf(c.sub, sizeof(c.sub), "a");
	snprintf(c.jti, sizeof(c.jti), "j");
	assert_int_equal(token_claims_add_aud(&c, "model"), 0);
	c.exp = 2000;
	memset(&v, 0, sizeof(v));
	v.rv_listener = &cf->cf_listeners[0];
	v.rv_method = "POST";
	v.rv_method_len = 4;
	v.rv_uri = &u;
	v.rv_token = REASON_OK;
	v.rv_claims = &c;
	/* Not a gateway decision: no binding. */
	assert_int_equal(policy_decide(cf, &v, 1000, &d), REASON_OK);
	v.rv_gateway = 1;
	v.rv_sandbox = "a";
	assert_int_equal(policy_decide(cf, &v, 1000, &d), REASON_OK);
	v.rv_sandbox = "run.b-2";
	assert_int_equal(policy_decide(cf, &v, 1000, &d),
	    REASON_TOKEN_WRONG_SANDBOX);
	assert_int_equal(reason_status(REASON_TOKEN_WRONG_SANDBOX, 0), 407);
	assert_int_equal(reason_status(REASON_TOKEN_WRONG_SANDBOX, 1), 401);
	/* The sbx claim, when present, binds instead of sub. */
	snprintf(c.sbx, sizeof(c.sbx), "run.b-2");
	c.has_sbx = 1;
	assert_int_equal(policy_decide(cf, &v, 1000, &d), REASON_OK);
	v.rv_sandbox = "a";
	assert_int_equal(policy_decide(cf, &v, 1000, &d),
	    REASON_TOKEN_WRONG_SANDBOX);
	/* An expired token says so first. */
	c.exp = 10;
	assert_int_equal(policy_decide(cf, &v, 1000, &d), REASON_TOKEN_EXPIRED);
	/* No sandbox at all: refused before the token is even looked at. */
	v.rv_sandbox = NULL;
	v.rv_token = REASON_TOKEN_MISSING;
	assert_int_equal(policy_decide(cf, &v, 1000, &d),
	    REASON_SANDBOX_UNKNOWN);
	assert_int_equal(reason_status(REASON_SANDBOX_UNKNOWN, 0), 403);
	assert_string_equal(reason_name(REASON_SANDBOX_UNKNOWN),
	    "sandbox_unknown");
	assert_string_equal(reason_name(REASON_TOKEN_WRONG_SANDBOX),
	    "token_wrong_sandbox");
	config_unref(cf);
}

/* The sbx claim: a string like sub; anything else is malformed. */
static void
test_sbx_claim(void **state)
{
	struct token_key k;
	struct token_claims c;
	char tok[1024];
	static const char hdr[] = "{\"alg\":\"HS256\"}";
	static unsigned char secret[] = "0123456789abcdef0123456789abcdef";
	const char *good =
	    "{\"aud\":\"m\",\"exp\":9,\"sub\":\"s\",\"jti\":\"j\","
	    "\"sbx\":\"box-1\"}";
	const char *bad =
	    "{\"aud\":\"m\",\"exp\":9,\"sub\":\"s\",\"jti\":\"j\","
	    "\"sbx\":7}";

	(void)state;
	memset(&k, 0, sizeof(k));
	k.tk_alg = TOKEN_ALG_HS256;
	k.tk_secret = secret;
	k.tk_secret_len = 32;
	assert_int_equal(token_sign(&k, hdr, strlen(hdr), good, strlen(good),
			     tok, sizeof(tok), NULL),
	    0);
	assert_int_equal(token_verify_sig(&k, 1, tok, strlen(tok), &c),
	    REASON_OK);
	assert_true(c.has_sbx);
	assert_string_equal(c.sbx, "box-1");
	assert_int_equal(token_sign(&k, hdr, strlen(hdr), bad, strlen(bad), tok,
			     sizeof(tok), NULL),
	    0);
	assert_int_equal(token_verify_sig(&k, 1, tok, strlen(tok), &c),
	    REASON_TOKEN_MALFORMED);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_policy_loads),
		cmocka_unit_test(test_policy_refused),
		cmocka_unit_test(test_policy_sidecar_refused),
		cmocka_unit_test(test_registry_lookup),
		cmocka_unit_test(test_registry_many),
		cmocka_unit_test(test_registry_clash_and_refs),
		cmocka_unit_test(test_registry_sync_and_state),
		cmocka_unit_test(test_state_file_refused),
		cmocka_unit_test(test_rate),
		cmocka_unit_test(test_decide_binding),
		cmocka_unit_test(test_sbx_claim),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
