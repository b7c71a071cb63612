/*
 * Unit tests for proxy/config/, written from the contract (DESIGN.md
 * "Policy file", docs/config.md): a minimal policy gets every documented
 * default; each class of error is refused with one line of the shape
 * "FILE: json.path: reason" naming the field at fault; secret files follow
 * the permission rules and never show up in a message or in config_print();
 * unlink_after_read keys survive a reload. Policies and key files are
 * written into a private temporary directory that is removed at the end.
 *
 * Policy templates are written with ' for " (no JSON here needs an
 * apostrophe) and @D for the temporary directory, so the tables stay
 * readable.
 */
#include <sys/stat.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <cmocka.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/sha.h>

#include "proxy/proxy.h"

/* Every secret this file writes contains the marker, so a leak is found. */
#define MARK       "SEKRIT"
#define HS_SECRET  MARK "-0123456789abcdef0123456789abcdef"
#define HDR_SECRET "Bearer " MARK "-header-value-42"

static char dir[256];
static char polpath[300];

/*
 * Helpers.
 */

/* Expand a template: ' becomes ", @D becomes the temporary directory. */
static char *
expand(const char *t)
{
	size_t dl = strlen(dir), cap = strlen(t) * (dl + 1) + 1, o = 0;
	char *out = malloc(cap);

	assert_non_null(out);
	while (*t != '\0') {
		if (t[0] == '@' && t[1] == 'D') {
			memcpy(out + o, dir, dl);
			o += dl;
			t += 2;
		} else {
			out[o++] = *t == '\'' ? '"' : *t;
			t++;
		}
	}
	out[o] = '\0';
	return out;
}

static void
path_in(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", dir, name);
}

/* Write name in the temporary directory with exactly this mode. */
static void
put(const char *name, const void *data, size_t len, mode_t mode)
{
	char p[512];
	int fd;

	path_in(p, sizeof(p), name);
	(void)unlink(p);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, len), (ssize_t)len);
	assert_int_equal(fchmod(fd, mode), 0);
	assert_int_equal(close(fd), 0);
}

static void
puts_file(const char *name, const char *s, mode_t mode)
{
	put(name, s, strlen(s), mode);
}

static int
exists(const char *name)
{
	char p[512];

	path_in(p, sizeof(p), name);
	return access(p, F_OK) == 0;
}

/* Write the policy (a template) and load it. */
static struct config *
load_prev(const char *tmpl, const struct config *prev, char *why, size_t whylen)
{
	char *json = expand(tmpl);

	put("policy.json", json, strlen(json), 0644);
	free(json);
	why[0] = '\0';
	return config_load(polpath, prev, why, whylen);
}

static struct config *
load(const char *tmpl, char *why, size_t whylen)
{
	return load_prev(tmpl, NULL, why, whylen);
}

static struct config *
load_ok(const char *tmpl)
{
	char why[1024];
	struct config *cf = load(tmpl, why, sizeof(why));

	if (cf == NULL)
		fail_msg("expected to load, got: %s", why);
	return cf;
}

/*
 * Check one refusal: the message is exactly one line, starts with
 * "POLICY: " followed by want (the JSON path and the start of the reason),
 * contains needle, and shows no secret. Returns 0 or -1 (after printing
 * what differs) so that tables report every failing row.
 */
static int
check_refusal(const char *name, const struct config *cf, const char *why,
    const char *want, const char *needle)
{
	char *w = expand(want), *n = expand(needle != NULL ? needle : "");
	char prefix[1024];
	int bad = 0;

	snprintf(prefix, sizeof(prefix), "%s: %s", polpath, w);
	if (cf != NULL) {
		print_error("%s: loaded, expected \"%s...%s\"\n", name, prefix,
		    n);
		bad = 1;
	} else if (strncmp(why, prefix, strlen(prefix)) != 0 ||
	    strstr(why + strlen(prefix), n) == NULL) {
		print_error("%s:\n  want \"%s...%s...\"\n  got  \"%s\"\n", name,
		    prefix, n, why);
		bad = 1;
	} else if (strchr(why, '\n') != NULL || strchr(why, '\r') != NULL) {
		print_error("%s: message is not one line: %s\n", name, why);
		bad = 1;
	} else if (strstr(why, MARK) != NULL) {
		print_error("%s: message shows a secret: %s\n", name, why);
		bad = 1;
	}
	free(w);
	free(n);
	return bad ? -1 : 0;
}

static int
rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(p) == -1 ? -1 : 0;
}

static void
remove_tree(void)
{
	if (dir[0] != '\0')
		(void)nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static EVP_PKEY *
keygen(int id)
{
	EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_id(id, NULL);
	EVP_PKEY *pk = NULL;

	assert_non_null(ctx);
	assert_int_equal(EVP_PKEY_keygen_init(ctx), 1);
	assert_int_equal(EVP_PKEY_keygen(ctx, &pk), 1);
	EVP_PKEY_CTX_free(ctx);
	return pk;
}

static void
write_pem(const char *name, EVP_PKEY *pk, int priv)
{
	char p[512];
	FILE *f;

	path_in(p, sizeof(p), name);
	assert_non_null(f = fopen(p, "w"));
	if (priv)
		assert_int_equal(PEM_write_PrivateKey(f, pk, NULL, NULL, 0,
				     NULL, NULL),
		    1);
	else
		assert_int_equal(PEM_write_PUBKEY(f, pk), 1);
	assert_int_equal(fclose(f), 0);
}

static EVP_PKEY *ed_key; /* the Ed25519 key behind ed.pub */

static int
group_setup(void **state)
{
	const char *tmp = getenv("TMPDIR");
	EVP_PKEY *x, *ec;
	char p[512], q[512];

	(void)state;
	snprintf(dir, sizeof(dir), "%s/sluice-h6-config-XXXXXX",
	    tmp != NULL ? tmp : "/tmp");
	if (mkdtemp(dir) == NULL) {
		dir[0] = '\0';
		return -1;
	}
	path_in(polpath, sizeof(polpath), "policy.json");
	/*
	 * An https upstream without ca_file loads the system store, ~150
	 * certificates per policy: far more time than the rest of this file.
	 * Point OpenSSL at an empty store; what is tested here is the policy.
	 */
	path_in(p, sizeof(p), "no-ca.pem");
	assert_int_equal(setenv("SSL_CERT_FILE", p, 1), 0);
	path_in(p, sizeof(p), "no-ca.d");
	assert_int_equal(setenv("SSL_CERT_DIR", p, 1), 0);

	/* HS256 secrets and their bad variants. */
	puts_file("hs.key", HS_SECRET, 0600);
	puts_file("hs644.key", HS_SECRET, 0644);
	puts_file("hs640.key", HS_SECRET, 0640);
	puts_file("hs604.key", HS_SECRET, 0604);
	puts_file("hs610.key", HS_SECRET, 0610);
	puts_file("hs601.key", HS_SECRET, 0601);
	puts_file("hs2.key", MARK "-second-key-0123456789abcdef0123", 0600);
	/* 31 bytes; with a newline still 31; 32 with a newline is enough. */
	puts_file("short.key", MARK "-0123456789abcdefghijklmn", 0600);
	puts_file("short_nl.key", MARK "-0123456789abcdefghijklmn\n", 0600);
	puts_file("exact.key", MARK "-0123456789abcdefghijklmno", 0600);
	puts_file("exact_nl.key", MARK "-0123456789abcdefghijklmno\n", 0600);
	path_in(p, sizeof(p), "subdir");
	assert_int_equal(mkdir(p, 0700), 0);
	path_in(p, sizeof(p), "hs.key");
	path_in(q, sizeof(q), "hs.link");
	assert_int_equal(symlink(p, q), 0);

	/* Header values. */
	puts_file("hdr.val", HDR_SECRET "\n", 0600);
	puts_file("hdr644.val", HDR_SECRET, 0644);
	puts_file("hdr_tab.val", MARK "-a\tb", 0600);
	puts_file("hdr_cr.val", MARK "-a\rb", 0600);
	puts_file("hdr_lf.val", MARK "-a\nb", 0600);
	puts_file("hdr_crlf.val", MARK "-a\r\n", 0600);
	puts_file("hdr_del.val", MARK "-a\x7f", 0600);
	put("hdr_nul.val", MARK "-a\0b", sizeof(MARK "-a\0b") - 1, 0600);

	/* Public keys: Ed25519, and three things that are not one. */
	ed_key = keygen(EVP_PKEY_ED25519);
	write_pem("ed.pub", ed_key, 0);
	x = keygen(EVP_PKEY_X25519);
	write_pem("x25519.pub", x, 0);
	EVP_PKEY_free(x);
	ec = EVP_EC_gen("P-256");
	assert_non_null(ec);
	write_pem("ec.pub", ec, 0);
	EVP_PKEY_free(ec);
	write_pem("ed.priv", ed_key, 1);
	puts_file("garbage.pub", "-----BEGIN PUBLIC KEY-----\nAAAA\n", 0644);
	return 0;
}

static int
group_teardown(void **state)
{
	(void)state;
	EVP_PKEY_free(ed_key);
	remove_tree();
	return 0;
}

/*
 * Building blocks of the policy templates.
 */
#define L_FWD "{'type':'forward','listen':'127.0.0.1:3128'}"
#define K_HS  "{'alg':'HS256','secret_file':'@D/hs.key'}"
#define TOK   "'tokens':{'keys':[" K_HS "]}"
#define UP_A  "'upstream':{'url':'http://198.18.0.2/','allow_plaintext':true}"
#define R_A   "{'audience':'a'," UP_A "}"
#define NPOFF "'netpolicy':{'mode':'off'}"
#define UP_AR "'upstream':{'mode':'as_requested'}"
/* A whole policy: listeners, tokens, routes, then extra top-level keys. */
#define POL(lst, tok, rts, extra)                                              \
	"{'listeners':[" lst "]," tok ",'routes':[" rts "]," extra "}"
#define BASE(extra)      POL(L_FWD, TOK, R_A, NPOFF extra)
#define ROUTE(fields)    POL(L_FWD, TOK, "{'audience':'a'," fields "}", NPOFF)
#define UPSTREAM(fields) ROUTE("'upstream':{" fields "}")
#define PLAIN            "'url':'http://198.18.0.2/','allow_plaintext':true"
#define KEYS(keys)       POL(L_FWD, "'tokens':{'keys':[" keys "]}", R_A, NPOFF)
/* An intercepting route (hosts: an alias; ports 443 and 80), its CA. */
#define R_ICPT                                                                 \
	"{'audience':'m','hosts':['alias.example.com'],"                       \
	"'connect':{'intercept':true,'ports':[443,80]},"                       \
	"'upstream':{'url':'https://api.example.com/'}}"
#define ICPT "'intercept':{'ca':'ephemeral'}"
#define SIDE "'user':'nobody','netpolicy':{'resolvers':['198.18.0.53']}," ICPT
#define L_IC(extra)                                                            \
	L_FWD                                                                  \
	",{'name':'ic','type':'intercept','listen':'127.77.0.1:443'" extra "}"
#define L_TP(listen)                                                           \
	L_FWD ",{'name':'tp','type':'transparent','listen':'" listen "'}"
#define HDR(name, file)                                                        \
	UPSTREAM(PLAIN ",'headers':[{'name':'" name "','value_file':'@D/" file \
		       "'}]")

/*
 * The minimal policy: only what docs/config.md calls required, plus the
 * user that sidecar mode (the default) needs. The upstream is an address:
 * a host name would need netpolicy.resolvers in sidecar mode.
 */
static const char minimal[] =
    "{'user':'65534',"
    "'listeners':[{'type':'forward','listen':'127.0.0.1:3128'}],"
    "'tokens':{'keys':[{'alg':'HS256','secret_file':'@D/hs.key'}]},"
    "'routes':[{'audience':'model-proxy',"
    "'upstream':{'url':'https://198.18.0.10/internal/model-proxy/'}}]}";

static void
test_minimal_defaults(void **state)
{
	struct config *cf;
	const struct listener_conf *lc;
	const struct route *rt;
	const struct upstream_conf *uc;
	const struct token_key *k;
	const struct limits *l;

	(void)state;
	cf = load_ok(minimal);
	assert_int_equal(cf->cf_refs, 1);
	assert_string_equal(cf->cf_path, polpath);
	/* A numeric uid without a passwd entry: its gid is the same number. */
	assert_string_equal(cf->cf_user, "65534");
	assert_int_equal(cf->cf_uid, 65534);
	assert_int_equal(cf->cf_gid, 65534);

	assert_int_equal(cf->cf_nlisteners, 1);
	lc = &cf->cf_listeners[0];
	assert_int_equal(lc->lc_type, LISTENER_FORWARD);
	assert_string_equal(lc->lc_listen, "127.0.0.1:3128");
	assert_string_equal(lc->lc_name, "127.0.0.1:3128"); /* name: listen */
	assert_int_equal(lc->lc_addr.ss_family, AF_INET);
	assert_int_equal(lc->lc_addrlen, sizeof(struct sockaddr_in));
	assert_int_equal(ntohs(((const struct sockaddr_in *)&lc->lc_addr)
				   ->sin_port),
	    3128);

	/* tokens */
	assert_null(cf->cf_tokens.tc_issuer);
	assert_int_equal(cf->cf_tokens.tc_leeway_s, 30);
	assert_int_equal(cf->cf_tokens.tc_max_ttl_s, 3600);
	assert_null(cf->cf_tokens.tc_rules.issuer);
	assert_int_equal(cf->cf_tokens.tc_rules.leeway_s, 30);
	assert_int_equal(cf->cf_tokens.tc_rules.max_ttl_s, 3600);
	assert_null(cf->cf_tokens.tc_revoked_file);
	assert_int_equal(cf->cf_nrevoked, 0);
	assert_int_equal(cf->cf_tokens.tc_nkeys, 1);
	k = &cf->cf_tokens.tc_keys[0];
	assert_int_equal(k->tk_alg, TOKEN_ALG_HS256);
	assert_string_equal(k->tk_kid, "");
	assert_int_equal(k->tk_secret_len, strlen(HS_SECRET));
	assert_memory_equal(k->tk_secret, HS_SECRET, strlen(HS_SECRET));
	assert_null(k->tk_pkey);
	assert_int_equal(cf->cf_tokens.tc_key_unlink[0], 0);
	assert_true(exists("hs.key"));

	/* routes */
	assert_int_equal(cf->cf_nroutes, 1);
	rt = &cf->cf_routes[0];
	assert_string_equal(rt->rt_audience, "model-proxy");
	assert_ptr_equal(config_route(cf, "model-proxy"), rt);
	assert_null(config_route(cf, "model"));
	assert_int_equal(rt->rt_nhosts, 0);
	assert_int_equal(rt->rt_nmethods, 1);
	assert_string_equal(rt->rt_methods[0], "POST");
	assert_int_equal(rt->rt_nprefixes, 1);
	assert_string_equal(rt->rt_prefixes[0], "/");
	assert_int_equal(rt->rt_max_requests, 0);
	assert_int_equal(rt->rt_connect, 0);
	assert_int_equal(rt->rt_intercept, 0);
	uc = &rt->rt_up;
	assert_string_equal(uc->uc_url,
	    "https://198.18.0.10/internal/model-proxy/");
	assert_int_equal(uc->uc_https, 1);
	assert_string_equal(uc->uc_host, "198.18.0.10");
	assert_int_equal(uc->uc_host_is_ip, 1);
	assert_int_equal(uc->uc_port, 443);
	assert_string_equal(uc->uc_authority, "198.18.0.10");
	assert_string_equal(uc->uc_path, "/internal/model-proxy");
	assert_null(uc->uc_ca_file); /* the system store */
	assert_int_equal(uc->uc_npins, 0);
	assert_int_equal(uc->uc_allow_private, 0);
	assert_int_equal(uc->uc_allow_plaintext, 0);
	assert_int_equal(uc->uc_nheaders, 0);

	/* limits: the table of docs/config.md */
	l = &cf->cf_limits;
	assert_int_equal(l->max_header_bytes, 16384);
	assert_int_equal(l->max_headers, 100);
	assert_int_equal(l->max_body_bytes, 33554432);
	assert_int_equal(l->max_connections, 4096);
	assert_int_equal(l->header_timeout_ms, 10000);
	assert_int_equal(l->idle_timeout_ms, 60000);
	assert_int_equal(l->connect_timeout_ms, 5000);
	assert_int_equal(l->upstream_response_timeout_ms, 300000);
	assert_int_equal(l->drain_timeout_ms, 10000);

	/* audit */
	assert_string_equal(cf->cf_audit.ac_path,
	    "/var/log/sluice/audit.jsonl");
	assert_int_equal(cf->cf_audit.ac_fsync, AUDIT_FSYNC_INTERVAL);
	assert_int_equal(cf->cf_audit.ac_chain, 1);
	assert_int_equal(cf->cf_audit.ac_on_error_allow, 0);

	/* netpolicy */
	assert_int_equal(cf->cf_np.np_mode, NETPOLICY_SIDECAR);
	assert_string_equal(cf->cf_np.np_table, "sluice");
	assert_int_equal(cf->cf_np.np_allow_loopback, 1);
	assert_int_equal(cf->cf_np.np_nresolvers, 0);
	assert_int_equal(cf->cf_np.np_log_group, 7);
	assert_int_equal(cf->cf_np.np_nifaces, 1);
	assert_string_equal(cf->cf_np.np_ifaces[0], "sbx-*");
	assert_int_equal(cf->cf_np.np_flush_on_exit, 0);

	/* admin, metrics, state_dir, ready_file */
	assert_null(cf->cf_admin_socket);
	assert_null(cf->cf_metrics_listen);
	assert_string_equal(cf->cf_state_dir, "/var/lib/sluice");
	assert_null(cf->cf_ready_file);

	/* A reference keeps the snapshot; the last unref frees it. */
	assert_ptr_equal(config_ref(cf), cf);
	assert_int_equal(cf->cf_refs, 2);
	config_unref(cf);
	assert_int_equal(cf->cf_refs, 1);
	config_unref(cf);
	config_unref(NULL);
}

/* Without user (and not in sidecar mode) sluice keeps its own identity. */
static void
test_no_user_keeps_identity(void **state)
{
	struct config *cf;
	uint64_t g1;

	(void)state;
	cf = load_ok(BASE(""));
	assert_null(cf->cf_user);
	assert_int_equal(cf->cf_uid, geteuid());
	assert_int_equal(cf->cf_gid, getegid());
	assert_int_equal(cf->cf_np.np_mode, NETPOLICY_OFF);
	g1 = cf->cf_gen;
	config_unref(cf);
	/* Every successful load has a new generation (token cache key). */
	cf = load_ok(BASE(""));
	assert_true(cf->cf_gen > g1);
	config_unref(cf);
}

/*
 * An intercept listener beside an allowlist route (no upstream host, an
 * exact name of its own): the listener takes the fixed route, and cannot
 * name the allowlist's host (a NULL upstream host was compared before).
 */
static void
test_intercept_listener_beside_allowlist(void **state)
{
	struct config *cf;
	char why[1024];

	(void)state;
	cf = load_ok(POL(L_IC(",'host':'alias.example.com'"), TOK,
	    "{'audience':'p','hosts':['pkg.example.org'],"
	    "'connect':{'intercept':true}," UP_AR "}," R_ICPT,
	    SIDE));
	assert_int_equal(cf->cf_listeners[1].lc_route_idx, 1);
	config_unref(cf);
	assert_null(load(POL(L_IC(",'host':'pkg.example.org'"), TOK,
			     "{'audience':'p','hosts':['pkg.example.org'],"
			     "'connect':{'intercept':true}," UP_AR "}," R_ICPT,
			     SIDE),
	    why, sizeof(why)));
	assert_non_null(strstr(why, "no route's upstream host"));
}

/* Intercept and transparent listeners: host, port, route, as printed. */
static void
test_intercept_listeners(void **state)
{
	struct config *cf;
	const struct listener_conf *lc;
	char *out = NULL;
	size_t outlen = 0;
	FILE *f;

	(void)state;
	cf = load_ok(POL(
	    L_IC(
		",'host':'Alias.Example.com'") ","
					       "{'name':'ic80','type':'intercept','listen':"
					       "'127.77.0.1:80','host':'api.example.com','port':80},"
					       "{'type':'transparent','listen':'127.0.0.1:15001'},"
					       "{'type':'transparent','listen':'[::1]:15001'}",
	    TOK, R_A "," R_ICPT, SIDE));
	assert_int_equal(cf->cf_nlisteners, 5);
	lc = &cf->cf_listeners[1];
	assert_int_equal(lc->lc_type, LISTENER_INTERCEPT);
	assert_string_equal(lc->lc_host, "alias.example.com");
	assert_int_equal(lc->lc_port, 443);
	assert_int_equal(lc->lc_route_idx, 1);
	lc = &cf->cf_listeners[2];
	assert_int_equal(lc->lc_type, LISTENER_INTERCEPT);
	assert_string_equal(lc->lc_host, "api.example.com");
	assert_int_equal(lc->lc_port, 80);
	assert_int_equal(cf->cf_listeners[3].lc_type, LISTENER_TRANSPARENT);
	assert_int_equal(cf->cf_listeners[4].lc_type, LISTENER_TRANSPARENT);
	f = open_memstream(&out, &outlen);
	assert_non_null(f);
	config_print(cf, f);
	fclose(f);
	assert_non_null(strstr(out, "\"type\":\t\"intercept\""));
	assert_non_null(strstr(out, "\"host\":\t\"alias.example.com\""));
	assert_non_null(strstr(out, "\"type\":\t\"transparent\""));
	free(out);
	config_unref(cf);
}

/* Explicit values are taken as written (and upstream URLs are parsed). */
static void
test_explicit_values(void **state)
{
	static const char pol[] =
	    "{'listeners':["
	    "{'name':'fwd','type':'forward','listen':'[::1]:3128'},"
	    "{'name':'rev','type':'reverse','listen':'127.0.0.1:8080',"
	    "'route':'second'}],"
	    "'tokens':{'issuer':'control-plane','leeway_s':0,"
	    "'max_ttl_s':604800,'keys':["
	    "{'kid':'k1','alg':'HS256','secret_file':'@D/exact_nl.key'},"
	    "{'kid':'k2','alg':'EdDSA','public_key_file':'@D/ed.pub'}]},"
	    "'routes':["
	    "{'audience':'first','hosts':['Model.Internal','198.18.0.9'],"
	    "'methods':['POST','GET'],'path_prefixes':['/v1/messages','/v2/'],"
	    "'max_requests_per_token':64,"
	    "'connect':{'enabled':true,'intercept':false},"
	    "'upstream':{'url':'https://CP.Example.com:8443/a/b//',"
	    "'allow_private':true,'headers':["
	    "{'name':'X-Sandbox-Credential','value_file':'@D/hdr.val'}]}},"
	    "{'audience':'second','upstream':{'url':'http://[2001:2::1]:8080',"
	    "'allow_plaintext':true}}],"
	    "'limits':{'max_header_bytes':1024,'max_headers':1000,"
	    "'max_body_bytes':0,'max_connections':1,'header_timeout_ms':100,"
	    "'idle_timeout_ms':86400000,'connect_timeout_ms':600000,"
	    "'upstream_response_timeout_ms':100,'drain_timeout_ms':0},"
	    "'audit':{'path':'/tmp/a.jsonl','fsync':'always','chain':false,"
	    "'on_error':'allow'},"
	    "'netpolicy':{'mode':'gateway','table':'my_table-1',"
	    "'allow_loopback':false,'resolvers':['198.18.0.53','2001:2::53'],"
	    "'log_group':0,'sandbox_interfaces':['veth-sb*','tap0'],"
	    "'flush_on_exit':true},"
	    "'admin':{'socket':'/run/sluice/admin.sock'},"
	    "'metrics':{'listen':'unix:/run/sluice/metrics.sock'},"
	    "'state_dir':'/tmp/state','ready_file':'/tmp/ready',"
	    "'user':'4321'}";
	struct config *cf;
	const struct route *rt;
	const struct upstream_header *uh;

	(void)state;
	cf = load_ok(pol);
	/* A numeric uid without a passwd entry: its gid is the same. */
	assert_int_equal(cf->cf_uid, 4321);
	assert_int_equal(cf->cf_gid, 4321);
	assert_string_equal(cf->cf_listeners[0].lc_name, "fwd");
	assert_int_equal(cf->cf_listeners[0].lc_addr.ss_family, AF_INET6);
	assert_int_equal(cf->cf_listeners[1].lc_type, LISTENER_REVERSE);
	assert_string_equal(cf->cf_listeners[1].lc_route, "second");
	assert_int_equal(cf->cf_listeners[1].lc_route_idx, 1);
	assert_string_equal(cf->cf_tokens.tc_issuer, "control-plane");
	assert_string_equal(cf->cf_tokens.tc_rules.issuer, "control-plane");
	assert_int_equal(cf->cf_tokens.tc_leeway_s, 0);
	assert_int_equal(cf->cf_tokens.tc_max_ttl_s, 604800);
	assert_string_equal(cf->cf_tokens.tc_keys[0].tk_kid, "k1");
	/* One trailing newline is not part of the secret. */
	assert_int_equal(cf->cf_tokens.tc_keys[0].tk_secret_len, 32);
	assert_memory_equal(cf->cf_tokens.tc_keys[0].tk_secret,
	    MARK "-0123456789abcdefghijklmno", 32);
	assert_int_equal(cf->cf_tokens.tc_keys[1].tk_alg, TOKEN_ALG_EDDSA);
	assert_non_null(cf->cf_tokens.tc_keys[1].tk_pkey);
	assert_int_equal(EVP_PKEY_eq(cf->cf_tokens.tc_keys[1].tk_pkey, ed_key),
	    1);
	assert_null(cf->cf_tokens.tc_keys[1].tk_secret);

	rt = &cf->cf_routes[0];
	assert_int_equal(rt->rt_nhosts, 2);
	assert_string_equal(rt->rt_hosts[0], "model.internal");
	assert_string_equal(rt->rt_hosts[1], "198.18.0.9");
	assert_int_equal(rt->rt_nmethods, 2);
	assert_string_equal(rt->rt_methods[1], "GET");
	assert_string_equal(rt->rt_prefixes[1], "/v2/");
	assert_int_equal(rt->rt_max_requests, 64);
	assert_int_equal(rt->rt_connect, 1);
	assert_string_equal(rt->rt_up.uc_host, "cp.example.com");
	assert_int_equal(rt->rt_up.uc_port, 8443);
	assert_string_equal(rt->rt_up.uc_authority, "cp.example.com:8443");
	assert_string_equal(rt->rt_up.uc_path, "/a/b");
	assert_int_equal(rt->rt_up.uc_allow_private, 1);
	assert_int_equal(rt->rt_up.uc_nheaders, 1);
	uh = &rt->rt_up.uc_headers[0];
	assert_string_equal(uh->uh_name, "X-Sandbox-Credential");
	assert_int_equal(uh->uh_value_len, strlen(HDR_SECRET));
	assert_memory_equal(uh->uh_value, HDR_SECRET, strlen(HDR_SECRET));

	rt = &cf->cf_routes[1];
	assert_int_equal(rt->rt_up.uc_https, 0);
	assert_int_equal(rt->rt_up.uc_host_is_ip, 1);
	assert_string_equal(rt->rt_up.uc_host, "2001:2::1");
	assert_int_equal(rt->rt_up.uc_port, 8080);
	assert_string_equal(rt->rt_up.uc_authority, "[2001:2::1]:8080");
	assert_string_equal(rt->rt_up.uc_path, "");

	assert_int_equal(cf->cf_limits.max_header_bytes, 1024);
	assert_int_equal(cf->cf_limits.max_body_bytes, 0);
	assert_int_equal(cf->cf_limits.drain_timeout_ms, 0);
	assert_int_equal(cf->cf_audit.ac_fsync, AUDIT_FSYNC_ALWAYS);
	assert_int_equal(cf->cf_audit.ac_chain, 0);
	assert_int_equal(cf->cf_audit.ac_on_error_allow, 1);
	assert_int_equal(cf->cf_np.np_mode, NETPOLICY_GATEWAY);
	assert_string_equal(cf->cf_np.np_table, "my_table-1");
	assert_int_equal(cf->cf_np.np_allow_loopback, 0);
	assert_int_equal(cf->cf_np.np_nresolvers, 2);
	assert_int_equal(cf->cf_np.np_log_group, 0);
	assert_int_equal(cf->cf_np.np_nifaces, 2);
	assert_int_equal(cf->cf_np.np_flush_on_exit, 1);
	assert_string_equal(cf->cf_admin_socket, "/run/sluice/admin.sock");
	assert_string_equal(cf->cf_metrics_listen,
	    "unix:/run/sluice/metrics.sock");
	assert_string_equal(cf->cf_state_dir, "/tmp/state");
	assert_string_equal(cf->cf_ready_file, "/tmp/ready");
	config_unref(cf);
}

/*
 * Refusals. want is the JSON path plus the start of the reason as it
 * follows "POLICY: "; needle must appear after it.
 */
struct err_row {
	const char *name;
	const char *policy;
	const char *want;
	const char *needle;
};

static const struct err_row err_rows[] = {
	/* Unknown keys: a typo must not silently weaken policy. */
	{ "unknown top-level key", BASE(",'bogus':1"), "",
	    "unknown key 'bogus'" },
	{ "unknown key in listeners[0]",
	    POL("{'type':'forward','listen':'127.0.0.1:3128','prot':1}", TOK,
		R_A, NPOFF),
	    "listeners[0]: ", "unknown key 'prot'" },
	{ "unknown key in tokens",
	    POL(L_FWD, "'tokens':{'keys':[" K_HS "],'leeway':5}", R_A, NPOFF),
	    "tokens: ", "unknown key 'leeway'" },
	{ "unknown key in tokens.keys[0]",
	    KEYS("{'alg':'HS256','secret_file':'@D/hs.key','secret':'x'}"),
	    "tokens.keys[0]: ", "unknown key 'secret'" },
	{ "unknown key in routes[0]", ROUTE(UP_A ",'host':['x']"),
	    "routes[0]: ", "unknown key 'host'" },
	{ "unknown key in routes[0].upstream",
	    UPSTREAM(PLAIN ",'allow_privat':true"),
	    "routes[0].upstream: ", "unknown key 'allow_privat'" },
	{ "unknown key in routes[0].connect",
	    ROUTE(UP_A ",'connect':{'enable':true}"),
	    "routes[0].connect: ", "unknown key 'enable'" },
	{ "unknown key in headers[0]",
	    UPSTREAM(
		PLAIN ",'headers':[{'name':'X-A','value_file':'@D/hdr.val',"
		      "'value':'v'}]"),
	    "routes[0].upstream.headers[0]: ", "unknown key 'value'" },
	{ "unknown key in limits", BASE(",'limits':{'max_header':1}"),
	    "limits: ", "unknown key 'max_header'" },
	{ "unknown key in audit", BASE(",'audit':{'sync':'never'}"),
	    "audit: ", "unknown key 'sync'" },
	{ "unknown key in netpolicy",
	    POL(L_FWD, TOK, R_A, "'netpolicy':{'mode':'off','tabel':'x'}"),
	    "netpolicy: ", "unknown key 'tabel'" },
	{ "unknown key in admin", BASE(",'admin':{'path':'/x'}"),
	    "admin: ", "unknown key 'path'" },
	{ "unknown key in metrics", BASE(",'metrics':{'addr':'/x'}"),
	    "metrics: ", "unknown key 'addr'" },

	/* Duplicate keys. */
	{ "duplicate top-level key",
	    BASE(",'state_dir':'/var/a','state_dir':'/var/b'"), "",
	    "duplicate key 'state_dir'" },
	{ "duplicate key in listeners[0]",
	    POL("{'type':'forward','listen':'127.0.0.1:3128','name':'a',"
		"'name':'b'}",
		TOK, R_A, NPOFF),
	    "listeners[0]: ", "duplicate key 'name'" },
	{ "duplicate key in routes[0].upstream",
	    UPSTREAM(PLAIN ",'allow_private':false,'allow_private':true"),
	    "routes[0].upstream: ", "duplicate key 'allow_private'" },
	{ "duplicate key in limits",
	    BASE(",'limits':{'max_headers':10,'max_headers':20}"),
	    "limits: ", "duplicate key 'max_headers'" },

	/* Wrong types. */
	{ "string expected", BASE(",'state_dir':5"), "state_dir: ", "string" },
	{ "number expected", BASE(",'limits':{'max_headers':'100'}"),
	    "limits.max_headers: ", "number" },
	{ "boolean expected", ROUTE(UP_A ",'connect':{'enabled':1}"),
	    "routes[0].connect.enabled: ", "true or false" },
	{ "array expected", ROUTE(UP_A ",'methods':'POST'"),
	    "routes[0].methods: ", "array" },
	{ "array element type", ROUTE(UP_A ",'hosts':['a.example',5]"),
	    "routes[0].hosts[1]: ", "string" },
	{ "object expected", BASE(",'limits':[]"), "limits: ", "object" },
	{ "listeners not an array",
	    "{'listeners':{}," TOK ",'routes':[" R_A "]," NPOFF "}",
	    "listeners: ", "array" },
	{ "listeners empty",
	    "{'listeners':[]," TOK ",'routes':[" R_A "]," NPOFF "}",
	    "listeners: ", "non-empty" },
	{ "routes empty", POL(L_FWD, TOK, "", NPOFF), "routes: ", "non-empty" },
	{ "keys empty", KEYS(""), "tokens.keys: ", "non-empty" },
	{ "root not an object", "[]", "", "object" },
	{ "empty string", BASE(",'ready_file':''"), "ready_file: ", "empty" },

	/* Out of range and non-integral numbers. */
	{ "max_headers below range", BASE(",'limits':{'max_headers':7}"),
	    "limits.max_headers: ", "8" },
	{ "leeway_s above range",
	    POL(L_FWD, "'tokens':{'leeway_s':601,'keys':[" K_HS "]}", R_A,
		NPOFF),
	    "tokens.leeway_s: ", "600" },
	{ "max_ttl_s zero",
	    POL(L_FWD, "'tokens':{'max_ttl_s':0,'keys':[" K_HS "]}", R_A,
		NPOFF),
	    "tokens.max_ttl_s: ", "" },
	{ "negative number", BASE(",'limits':{'drain_timeout_ms':-1}"),
	    "limits.drain_timeout_ms: ", "" },
	{ "log_group above 65535",
	    POL(L_FWD, TOK, R_A,
		"'netpolicy':{'mode':'off','log_group':65536}"),
	    "netpolicy.log_group: ", "" },
	{ "non-integral number", BASE(",'limits':{'max_headers':100.5}"),
	    "limits.max_headers: ", "whole" },
	{ "non-integral route limit",
	    ROUTE(UP_A ",'max_requests_per_token':1.5"),
	    "routes[0].max_requests_per_token: ", "whole" },
	{ "huge number", BASE(",'limits':{'max_body_bytes':1e300}"),
	    "limits.max_body_bytes: ", "" },

	/* Missing required fields. */
	{ "missing listeners", "{" TOK ",'routes':[" R_A "]," NPOFF "}", "",
	    "'listeners'" },
	{ "missing tokens",
	    "{'listeners':[" L_FWD "],'routes':[" R_A "]," NPOFF "}", "",
	    "'tokens'" },
	{ "missing routes", "{'listeners':[" L_FWD "]," TOK "," NPOFF "}", "",
	    "'routes'" },
	{ "missing tokens.keys",
	    POL(L_FWD, "'tokens':{'leeway_s':5}", R_A, NPOFF),
	    "tokens: ", "'keys'" },
	{ "missing listener type",
	    POL("{'listen':'127.0.0.1:3128'}", TOK, R_A, NPOFF),
	    "listeners[0]: ", "'type'" },
	{ "missing listener listen", POL("{'type':'forward'}", TOK, R_A, NPOFF),
	    "listeners[0]: ", "'listen'" },
	{ "missing audience", POL(L_FWD, TOK, "{" UP_A "}", NPOFF),
	    "routes[0]: ", "'audience'" },
	{ "missing upstream", POL(L_FWD, TOK, "{'audience':'a'}", NPOFF),
	    "routes[0]: ", "'upstream'" },
	{ "missing upstream.url", UPSTREAM("'allow_plaintext':true"),
	    "routes[0].upstream: ", "'url'" },
	{ "missing alg", KEYS("{'secret_file':'@D/hs.key'}"),
	    "tokens.keys[0]: ", "'alg'" },
	{ "missing header value_file",
	    UPSTREAM(PLAIN ",'headers':[{'name':'X-A'}]"),
	    "routes[0].upstream.headers[0]: ", "'value_file'" },

	/* Listeners. */
	{ "listen: host name",
	    POL("{'type':'forward','listen':'localhost:3128'}", TOK, R_A,
		NPOFF),
	    "listeners[0]: listen: ", "localhost:3128" },
	{ "listen: no port",
	    POL("{'type':'forward','listen':'127.0.0.1'}", TOK, R_A, NPOFF),
	    "listeners[0]: listen: ", "" },
	{ "listen: port 0",
	    POL("{'type':'forward','listen':'127.0.0.1:0'}", TOK, R_A, NPOFF),
	    "listeners[0]: listen: ", "" },
	{ "listen: port 65536",
	    POL("{'type':'forward','listen':'127.0.0.1:65536'}", TOK, R_A,
		NPOFF),
	    "listeners[0]: listen: ", "" },
	{ "listen: IPv6 without brackets",
	    POL("{'type':'forward','listen':'::1:3128'}", TOK, R_A, NPOFF),
	    "listeners[0]: listen: ", "" },
	{ "listen: port with sign",
	    POL("{'type':'forward','listen':'127.0.0.1:+80'}", TOK, R_A, NPOFF),
	    "listeners[0]: listen: ", "" },
	{ "listen: bad type",
	    POL("{'type':'transparent','listen':'127.0.0.1:1'}", TOK, R_A,
		NPOFF),
	    "listeners[0]: type: ", "transparent" },
	{ "duplicate listener address",
	    POL(L_FWD
		",{'name':'b','type':'forward','listen':'127.0.0.1:3128'}",
		TOK, R_A, NPOFF),
	    "listeners[1]: listen: 127.0.0.1:3128 is used by listeners[0]",
	    "" },
	{ "duplicate listener address, other spelling",
	    POL(L_FWD
		",{'name':'b','type':'forward','listen':'127.0.0.1:03128'}",
		TOK, R_A, NPOFF),
	    "listeners[1]: listen: ", "listeners[0]" },
	{ "duplicate listener name",
	    POL("{'name':'x','type':'forward','listen':'127.0.0.1:1'},"
		"{'name':'x','type':'forward','listen':'127.0.0.1:2'}",
		TOK, R_A, NPOFF),
	    "listeners[1]: name: ", "listeners[0]" },
	{ "default name clashes with a name",
	    POL("{'name':'127.0.0.1:2','type':'forward','listen':'127.0.0.1:1'},"
		"{'type':'forward','listen':'127.0.0.1:2'}",
		TOK, R_A, NPOFF),
	    "listeners[1]: name: ", "listeners[0]" },
	{ "reverse listener without route",
	    POL("{'type':'reverse','listen':'127.0.0.1:8080'}", TOK, R_A,
		NPOFF),
	    "listeners[0]: ", "route" },
	{ "reverse listener with unknown route",
	    POL("{'type':'reverse','listen':'127.0.0.1:8080','route':'b'}", TOK,
		R_A, NPOFF),
	    "listeners[0]: route: ", "'b'" },
	{ "forward listener with route",
	    POL("{'type':'forward','listen':'127.0.0.1:3128','route':'a'}", TOK,
		R_A, NPOFF),
	    "listeners[0]: route: ", "" },

	/* Upstream URLs. */
	{ "https required (docs/config.md)",
	    UPSTREAM("'url':'http://198.18.0.2/'"),
	    "routes[0].upstream.url: scheme must be https (or set allow_plaintext)",
	    "" },
	{ "query in upstream URL",
	    UPSTREAM("'url':'https://cp.example.com/v1?x=1'"),
	    "routes[0].upstream.url: ", "query" },
	{ "fragment in upstream URL",
	    UPSTREAM("'url':'https://cp.example.com/v1#x'"),
	    "routes[0].upstream.url: ", "" },
	{ "userinfo in upstream URL",
	    UPSTREAM("'url':'https://u:p@cp.example.com/'"),
	    "routes[0].upstream.url: ", "" },
	{ "scheme other than http(s)",
	    UPSTREAM("'url':'ftp://cp.example.com/'"),
	    "routes[0].upstream.url: ", "" },
	{ "no scheme", UPSTREAM("'url':'cp.example.com'"),
	    "routes[0].upstream.url: ", "" },
	{ "private IPv4 literal", UPSTREAM("'url':'https://10.0.0.1/'"),
	    "routes[0].upstream.url: ", "private" },
	{ "loopback literal with port",
	    UPSTREAM("'url':'https://127.0.0.1:8443/'"),
	    "routes[0].upstream.url: ", "private" },
	{ "metadata address literal",
	    UPSTREAM("'url':'http://169.254.169.254/','allow_plaintext':true"),
	    "routes[0].upstream.url: ", "private" },
	{ "IPv6 loopback literal", UPSTREAM("'url':'https://[::1]/'"),
	    "routes[0].upstream.url: ", "private" },
	{ "IPv4-mapped private literal",
	    UPSTREAM("'url':'https://[::ffff:192.168.1.1]/'"),
	    "routes[0].upstream.url: ", "private" },
	{ "IPv4-compatible metadata literal",
	    UPSTREAM("'url':'https://[::a9fe:a9fe]/'"),
	    "routes[0].upstream.url: ", "private" },
	{ "local-use NAT64 metadata literal",
	    UPSTREAM("'url':'https://[64:ff9b:1:a9fe:a9:fe00::]/'"),
	    "routes[0].upstream.url: ", "private" },
	{ "ca_file with http", UPSTREAM(PLAIN ",'ca_file':'@D/ed.pub'"),
	    "routes[0].upstream: ", "https" },
	{ "missing ca_file",
	    UPSTREAM("'url':'https://cp.example.com/','ca_file':'@D/nope.pem'"),
	    "routes[0].upstream.ca_file: ", "@D/nope.pem" },
	{ "bad pin",
	    UPSTREAM("'url':'https://cp.example.com/','pin_sha256':['abc']"),
	    "routes[0].upstream.pin_sha256[0]: ", "" },
	/* netpolicy.inbound. */
	{ "inbound outside sidecar mode",
	    POL(L_FWD, TOK, R_A,
		"'netpolicy':{'mode':'off','inbound':[{'ports':[80],"
		"'from':['198.18.0.0/16']}]}"),
	    "netpolicy.inbound: ", "sidecar mode only" },
	{ "inbound prefix not whole bytes",
	    POL(L_FWD, TOK, R_A,
		"'user':'nobody','netpolicy':{'inbound':[{'ports':[80],"
		"'from':['198.18.0.0/15']}]}"),
	    "netpolicy.inbound[0].from[0]: ", "whole-byte prefixes" },
	{ "inbound host bits",
	    POL(L_FWD, TOK, R_A,
		"'user':'nobody','netpolicy':{'inbound':[{'ports':[80],"
		"'from':['198.18.0.1/24']}]}"),
	    "netpolicy.inbound[0].from[0]: ", "host bits" },
	{ "inbound without from",
	    POL(L_FWD, TOK, R_A,
		"'user':'nobody','netpolicy':{'inbound':[{'ports':[80]}]}"),
	    "netpolicy.inbound[0].from: ", "must name the sources" },
	{ "inbound bad port",
	    POL(L_FWD, TOK, R_A,
		"'user':'nobody','netpolicy':{'inbound':[{'ports':[0],"
		"'from':['0.0.0.0/0']}]}"),
	    "netpolicy.inbound[0].ports[0]: ", "not a port" },

	/* Listeners that are intercepted tunnels (intercept, transparent). */
	{ "intercept listener without host",
	    POL(L_IC(""), TOK, R_A "," R_ICPT, NPOFF "," ICPT),
	    "listeners[1]: ", "an intercept listener needs \"host\"" },
	{ "intercept listener, host of no route",
	    POL(L_IC(",'host':'other.example.com'"), TOK, R_A "," R_ICPT,
		NPOFF "," ICPT),
	    "listeners[1]: ", "host: \"other.example.com\" is no route" },
	{ "intercept listener, host of a route that does not intercept",
	    POL(L_IC(",'host':'198.18.0.2'"), TOK, R_A "," R_ICPT,
		NPOFF "," ICPT),
	    "listeners[1]: ",
	    "host: \"198.18.0.2\" belongs to routes[0], "
	    "which does not intercept" },
	{ "intercept listener, port not in connect.ports",
	    POL(L_IC(",'host':'api.example.com','port':8443"), TOK,
		R_A "," R_ICPT, NPOFF "," ICPT),
	    "listeners[1]: ", "port: 8443 is not in routes[1].connect.ports" },
	{ "intercept listener, listen port not in connect.ports",
	    POL(L_FWD ",{'type':'intercept','listen':'127.77.0.1:8443',"
		      "'host':'api.example.com'}",
		TOK, R_A "," R_ICPT, NPOFF "," ICPT),
	    "listeners[1]: ", "port: 8443 is not in routes[1].connect.ports" },
	{ "intercept listener, bad port",
	    POL(L_IC(",'host':'api.example.com','port':0"), TOK, R_A "," R_ICPT,
		NPOFF "," ICPT),
	    "listeners[1].port: ", "" },
	{ "intercept listener with a route",
	    POL(L_IC(",'host':'api.example.com','route':'m'"), TOK,
		R_A "," R_ICPT, NPOFF "," ICPT),
	    "listeners[1]: ", "route: only reverse listeners" },
	{ "host on a forward listener",
	    POL("{'type':'forward','listen':'127.0.0.1:3128',"
		"'host':'api.example.com'}",
		TOK, R_A "," R_ICPT, NPOFF "," ICPT),
	    "listeners[0]: ", "host: only intercept listeners" },
	{ "port on a transparent listener",
	    POL(L_FWD ",{'type':'transparent','listen':'127.0.0.1:15001',"
		      "'port':443}",
		TOK, R_A "," R_ICPT, SIDE),
	    "listeners[1]: ", "port: only intercept listeners" },
	{ "transparent listener without sidecar mode",
	    POL(L_TP("127.0.0.1:15001"), TOK, R_A "," R_ICPT, NPOFF "," ICPT),
	    "listeners[1]: ",
	    "type: a transparent listener needs "
	    "netpolicy.mode \"sidecar\"" },
	{ "transparent listener off loopback",
	    POL(L_TP("198.18.0.1:15001"), TOK, R_A "," R_ICPT, SIDE),
	    "listeners[1]: ", "listen: a transparent listener takes" },
	{ "transparent listener without an intercepting route",
	    POL(L_TP("127.0.0.1:15001"), TOK, R_A,
		"'user':'nobody','netpolicy':{}," ICPT),
	    "listeners[1]: ", "needs a route with connect.intercept" },
	{ "two transparent listeners of one family",
	    POL(L_TP("127.0.0.1:15001") ",{'type':'transparent','listen':"
					"'0.0.0.0:15002'}",
		TOK, R_A "," R_ICPT, SIDE),
	    "listeners[2]: ", "type: listeners[1] is the transparent" },
	{ "transparent listeners on two ports",
	    POL(L_TP("127.0.0.1:15001") ",{'type':'transparent','listen':"
					"'[::1]:15002'}",
		TOK, R_A "," R_ICPT, SIDE),
	    "listeners[2]: ", "listen: the port differs" },
	{ "unknown listener type",
	    POL("{'type':'socks','listen':'127.0.0.1:1080'}", TOK, R_A, NPOFF),
	    "listeners[0]: ", "type: \"socks\" is not" },

	/* Interception: the section, the route keys, and their ties. */
	{ "connect.intercept without the intercept section",
	    ROUTE(UP_A ",'connect':{'enabled':true,'intercept':true}"),
	    "routes[0]: ", "needs the top-level \"intercept\"" },
	{ "connect.intercept to a plain upstream",
	    POL(L_FWD, TOK,
		"{'audience':'a'," UP_A ",'connect':{'intercept':true}}",
		NPOFF ",'intercept':{'ca':'ephemeral'}"),
	    "routes[0]: ", "must be https" },
	{ "connect.ports without intercept",
	    ROUTE(UP_A ",'connect':{'enabled':true,'ports':[443]}"),
	    "routes[0].connect: ", "only with intercept" },
	{ "connect.ports not a port",
	    ROUTE(UP_A ",'connect':{'intercept':true,'ports':[0]}"),
	    "routes[0].connect.ports[0]: ", "not a port" },
	{ "connect.ports twice",
	    ROUTE(UP_A ",'connect':{'intercept':true,'ports':[443,443]}"),
	    "routes[0].connect.ports[1]: ", "listed twice" },
	{ "intercept.ca unknown", BASE(",'intercept':{'ca':'maybe'}"),
	    "intercept.ca: ", "not ephemeral or files" },
	{ "intercept.ca missing", BASE(",'intercept':{}"),
	    "intercept: ", "ca" },
	{ "intercept files without the files",
	    BASE(",'intercept':{'ca':'files'}"),
	    "intercept: ", "needs ca_cert_file and ca_key_file" },
	{ "intercept ephemeral with a key file",
	    BASE(",'intercept':{'ca':'ephemeral','ca_key_file':'/k'}"),
	    "intercept: ", "never touches a disk" },
	{ "intercept files with ca_cert_out",
	    BASE(",'intercept':{'ca':'files','ca_cert_file':'/c',"
		 "'ca_key_file':'/k','ca_cert_out':'/o'}"),
	    "intercept.ca_cert_out: ", "only for an ephemeral CA" },
	{ "intercept.leaf_days out of range",
	    BASE(",'intercept':{'ca':'ephemeral','leaf_days':0}"),
	    "intercept.leaf_days: ", "" },
	{ "intercept unknown key",
	    BASE(",'intercept':{'ca':'ephemeral','bogus':1}"),
	    "intercept: ", "bogus" },
	{ "token_header not a name", ROUTE(UP_A ",'token_header':'x api'"),
	    "routes[0].token_header: ", "byte 1" },
	{ "token_header HTTP's own", ROUTE(UP_A ",'token_header':'Host'"),
	    "routes[0].token_header: ", "read by HTTP itself" },
	{ "strip_token not a bool", UPSTREAM(PLAIN ",'strip_token':1"),
	    "routes[0].upstream.strip_token: ", "" },

	/* Secret files. */
	{ "missing secret file",
	    KEYS("{'alg':'HS256','secret_file':'@D/nope'}"),
	    "tokens.keys[0]: secret_file: @D/nope: ", "No such file" },
	{ "secret file mode 0644 (docs/config.md)",
	    KEYS("{'alg':'HS256','secret_file':'@D/hs644.key'}"),
	    "tokens.keys[0]: secret_file: @D/hs644.key: mode 0644 gives group/other access (chmod 600)",
	    "" },
	{ "secret file mode 0640",
	    KEYS("{'alg':'HS256','secret_file':'@D/hs640.key'}"),
	    "tokens.keys[0]: secret_file: @D/hs640.key: ", "0640" },
	{ "secret file mode 0604",
	    KEYS("{'alg':'HS256','secret_file':'@D/hs604.key'}"),
	    "tokens.keys[0]: secret_file: @D/hs604.key: ", "0604" },
	{ "secret file mode 0610",
	    KEYS("{'alg':'HS256','secret_file':'@D/hs610.key'}"),
	    "tokens.keys[0]: secret_file: @D/hs610.key: ", "0610" },
	{ "secret file mode 0601",
	    KEYS("{'alg':'HS256','secret_file':'@D/hs601.key'}"),
	    "tokens.keys[0]: secret_file: @D/hs601.key: ", "0601" },
	{ "secret file is a directory",
	    KEYS("{'alg':'HS256','secret_file':'@D/subdir'}"),
	    "tokens.keys[0]: secret_file: @D/subdir: ", "" },
	{ "secret file is a symlink",
	    KEYS("{'alg':'HS256','secret_file':'@D/hs.link'}"),
	    "tokens.keys[0]: secret_file: @D/hs.link: ", "" },
	{ "HS256 secret of 31 bytes",
	    KEYS("{'alg':'HS256','secret_file':'@D/short.key'}"),
	    "tokens.keys[0]: secret_file: @D/short.key: ", "32 bytes" },
	{ "HS256 secret of 31 bytes and a newline",
	    KEYS("{'alg':'HS256','secret_file':'@D/short_nl.key'}"),
	    "tokens.keys[0]: secret_file: @D/short_nl.key: ", "32 bytes" },
	{ "header value file mode 0644", HDR("X-Cred", "hdr644.val"),
	    "routes[0].upstream.headers[0]: value_file: @D/hdr644.val: ",
	    "0644" },
	{ "missing header value file", HDR("X-Cred", "nope.val"),
	    "routes[0].upstream.headers[0]: value_file: @D/nope.val: ", "" },

	/* Keys. */
	{ "alg RS256", KEYS("{'alg':'RS256','secret_file':'@D/hs.key'}"),
	    "tokens.keys[0]: alg: ", "RS256" },
	{ "alg none", KEYS("{'alg':'none','secret_file':'@D/hs.key'}"),
	    "tokens.keys[0]: alg: ", "none" },
	{ "alg in lower case",
	    KEYS("{'alg':'hs256','secret_file':'@D/hs.key'}"),
	    "tokens.keys[0]: alg: ", "hs256" },
	{ "HS256 without secret_file",
	    KEYS("{'alg':'HS256','public_key_file':'@D/ed.pub'}"),
	    "tokens.keys[0]: ", "secret_file" },
	{ "HS256 with both files",
	    KEYS("{'alg':'HS256','secret_file':'@D/hs.key',"
		 "'public_key_file':'@D/ed.pub'}"),
	    "tokens.keys[0]: ", "secret_file" },
	{ "EdDSA with secret_file",
	    KEYS("{'alg':'EdDSA','secret_file':'@D/hs.key'}"),
	    "tokens.keys[0]: ", "public_key_file" },
	{ "EdDSA X25519 key",
	    KEYS("{'alg':'EdDSA','public_key_file':'@D/x25519.pub'}"),
	    "tokens.keys[0]: ", "Ed25519" },
	{ "EdDSA P-256 key",
	    KEYS("{'alg':'EdDSA','public_key_file':'@D/ec.pub'}"),
	    "tokens.keys[0]: ", "Ed25519" },
	{ "EdDSA private key PEM",
	    KEYS("{'alg':'EdDSA','public_key_file':'@D/ed.priv'}"),
	    "tokens.keys[0]: ", "@D/ed.priv" },
	{ "EdDSA garbage PEM",
	    KEYS("{'alg':'EdDSA','public_key_file':'@D/garbage.pub'}"),
	    "tokens.keys[0]: ", "@D/garbage.pub" },
	{ "EdDSA missing file",
	    KEYS("{'alg':'EdDSA','public_key_file':'@D/nope.pub'}"),
	    "tokens.keys[0]: ", "@D/nope.pub" },
	{ "duplicate kid",
	    KEYS("{'kid':'k','alg':'HS256','secret_file':'@D/hs.key'},"
		 "{'kid':'k','alg':'HS256','secret_file':'@D/hs2.key'}"),
	    "tokens.keys[1]: kid: ", "" },
	{ "two keys without kid",
	    KEYS("{'alg':'HS256','secret_file':'@D/hs.key'},"
		 "{'alg':'HS256','secret_file':'@D/hs2.key'}"),
	    "tokens.keys[", "kid" },
	{ "second key without kid",
	    KEYS("{'kid':'a','alg':'HS256','secret_file':'@D/hs.key'},"
		 "{'alg':'HS256','secret_file':'@D/hs2.key'}"),
	    "tokens.keys[1]: kid: ", "" },
	/* DESIGN: kid "required and unique when there are several keys". */
	{ "first key without kid",
	    KEYS("{'alg':'HS256','secret_file':'@D/hs.key'},"
		 "{'kid':'b','alg':'HS256','secret_file':'@D/hs2.key'}"),
	    "tokens.keys[", "kid" },
	{ "middle key without kid",
	    KEYS("{'kid':'a','alg':'HS256','secret_file':'@D/hs.key'},"
		 "{'alg':'HS256','secret_file':'@D/hs2.key'},"
		 "{'kid':'c','alg':'EdDSA','public_key_file':'@D/ed.pub'}"),
	    "tokens.keys[", "kid" },
	{ "revoked_file missing",
	    POL(L_FWD,
		"'tokens':{'revoked_file':'@D/nope.txt','keys':[" K_HS "]}",
		R_A, NPOFF),
	    "tokens.revoked_file: ", "@D/nope.txt" },

	/*
	 * Routes: an alias selects only one route (routes may share an
	 * upstream: the token's audience picks among them).
	 */
	/* Allowlist routes and host patterns, report mode (issue 13). */
	{ "enforce typo", BASE(",'enforce':'warn'"), "enforce: ", "report" },
	{ "enforce not a string", BASE(",'enforce':true"), "enforce", "" },
	{ "empty audience", POL(L_FWD, TOK, "{'audience':''," UP_A "}", NPOFF),
	    "routes[0].audience: ", "empty" },
	{ "bare * in hosts", ROUTE("'hosts':['*']," UP_AR),
	    "routes[0].hosts[0]: ", "bare" },
	{ "* inside a name", ROUTE("'hosts':['a.*.example.org']," UP_AR),
	    "routes[0].hosts[0]: ", "first label" },
	{ "*foo wildcard", ROUTE("'hosts':['*foo.example.org']," UP_AR),
	    "routes[0].hosts[0]: ", "first label" },
	{ "*. alone", ROUTE("'hosts':['*.']," UP_AR),
	    "routes[0].hosts[0]: ", "bare" },
	{ "U-label IDN", ROUTE("'hosts':['b\u00fccher.example']," UP_AR),
	    "routes[0].hosts[0]: ", "A-label" },
	{ "empty label", ROUTE("'hosts':['a..example']," UP_AR),
	    "routes[0].hosts[0]: ", "empty label" },
	{ "label ends in -", ROUTE("'hosts':['a-.example']," UP_AR),
	    "routes[0].hosts[0]: ", "starts or ends" },
	{ "wildcard over an address", ROUTE("'hosts':['*.0.7']," UP_AR),
	    "routes[0].hosts[0]: ", "not an address" },
	{ "host with a port", ROUTE("'hosts':['a.example:443']," UP_AR),
	    "routes[0].hosts[0]: ", "no port" },
	{ "allowlist private literal",
	    ROUTE("'hosts':['pypi.org','169.254.169.254']," UP_AR),
	    "routes[0]: hosts[1]: ", "private address" },
	{ "allowlist private IPv6 literal",
	    ROUTE("'hosts':['[::ffff:10.0.0.1]']," UP_AR),
	    "routes[0]: hosts[0]: ", "private address" },
	{ "allowlist route without hosts", ROUTE(UP_AR),
	    "routes[0]: hosts: ", "at least one" },
	{ "allowlist upstream with url",
	    ROUTE("'hosts':['a.example'],'upstream':{'mode':'as_requested',"
		  "'url':'https://a.example/'}"),
	    "routes[0].upstream: ", "url" },
	{ "allowlist upstream with headers",
	    ROUTE("'hosts':['a.example'],'upstream':{'mode':'as_requested',"
		  "'headers':[]}"),
	    "routes[0].upstream: ", "headers" },
	{ "unknown upstream mode",
	    ROUTE("'hosts':['a.example'],'upstream':{'mode':'direct'}"),
	    "routes[0].upstream.mode: ", "as_requested" },
	{ "allowlist port 0",
	    ROUTE("'hosts':['a.example'],'upstream':{'mode':'as_requested',"
		  "'ports':[0]}"),
	    "routes[0].upstream.ports", "" },
	{ "allowlist intercept with connect.ports",
	    POL(L_FWD, TOK,
		"{'audience':'a','hosts':['*.a.example'],"
		"'connect':{'intercept':true,'ports':[8443]}," UP_AR "}",
		NPOFF "," ICPT),
	    "routes[0]: connect.ports: ", "upstream.ports" },
	{ "allowlist intercept with connect.ports [443]",
	    POL(L_FWD, TOK,
		"{'audience':'a','hosts':['*.a.example'],"
		"'connect':{'intercept':true,'ports':[443]},"
		"'upstream':{'mode':'as_requested','ports':[443,8443]}}",
		NPOFF "," ICPT),
	    "routes[0]: connect.ports: ", "upstream.ports" },
	{ "allowlist intercept without the CA",
	    ROUTE("'hosts':['a.example'],'connect':{'intercept':true}," UP_AR),
	    "routes[0]: ", "\"intercept\" section" },
	{ "same wildcard in two routes",
	    POL(L_FWD, TOK,
		"{'audience':'a','hosts':['*.example.org']," UP_AR "},"
		"{'audience':'b','hosts':['*.EXAMPLE.org.']," UP_AR "}",
		NPOFF),
	    "routes[1]: hosts[0]: ", "routes[0]" },
	{ "same exact name in two allowlist routes",
	    POL(L_FWD, TOK,
		"{'audience':'a','hosts':['pypi.org']," UP_AR "},"
		"{'audience':'b','hosts':['pypi.org']," UP_AR "}",
		NPOFF),
	    "routes[1]: hosts[0]: ", "routes[0]" },
	{ "allowlist name is a fixed upstream's host",
	    POL(L_FWD, TOK,
		R_A ",{'audience':'b','hosts':['198.18.0.2']," UP_AR "}",
		NPOFF),
	    "routes[1]: hosts[0]: ", "routes[0]" },
	{ "same IPv6 literal spelled twice",
	    POL(L_FWD, TOK,
		"{'audience':'a','hosts':['2001:2::5']," UP_AR "},"
		"{'audience':'b','hosts':['[2001:2:0::5]']," UP_AR "}",
		NPOFF),
	    "routes[1]: ", "routes[0]" },
	{ "audience with a space",
	    POL(L_FWD, TOK, "{'audience':'a b'," UP_A "}", NPOFF),
	    "routes[0]: audience: ", "" },
	{ "hosts shared by two routes",
	    POL(L_FWD, TOK,
		"{'audience':'a','hosts':['m.internal'],'upstream':{'url':"
		"'http://198.18.0.2/','allow_plaintext':true}},"
		"{'audience':'b','hosts':['x.internal','M.Internal'],'upstream':"
		"{'url':'http://198.18.0.3/','allow_plaintext':true}}",
		NPOFF),
	    "routes[1]: hosts[1]: ", "routes[0]" },
	{ "host naming another route's upstream",
	    POL(L_FWD, TOK,
		R_A ",{'audience':'b','hosts':['198.18.0.2'],'upstream':{'url':"
		    "'http://198.18.0.3/','allow_plaintext':true}}",
		NPOFF),
	    "routes[1]: hosts[0]: ", "routes[0]" },
	{ "upstream named by another route's hosts",
	    POL(L_FWD, TOK,
		"{'audience':'a','hosts':['cp.example.com'],'upstream':{'url':"
		"'http://198.18.0.2/','allow_plaintext':true}},"
		"{'audience':'b','upstream':{'url':'https://cp.example.com/'}}",
		NPOFF),
	    "routes[1]: upstream.url: ", "routes[0]" },
	{ "upstream named by an earlier route's hosts",
	    POL(L_FWD, TOK,
		"{'audience':'a','upstream':{'url':'https://cp.example.com/'}},"
		"{'audience':'b','hosts':['x.internal'],'upstream':{'url':"
		"'http://198.18.0.2/','allow_plaintext':true}},"
		"{'audience':'c','upstream':{'url':'https://X.Internal/'}}",
		NPOFF),
	    "routes[2]: upstream.url: ", "routes[1].hosts" },
	{ "alias naming a shared upstream",
	    POL(L_FWD, TOK,
		"{'audience':'a','upstream':{'url':'https://cp.example.com/a'}},"
		"{'audience':'b','hosts':['cp.example.com'],"
		"'upstream':{'url':'https://cp.example.com/b'}}",
		NPOFF),
	    "routes[1]: hosts[0]: ", "routes[0]" },
	{ "IPv6 host naming another route's IPv6 upstream",
	    POL(L_FWD, TOK,
		"{'audience':'a','upstream':{'url':'https://[2001:2::1]/'}},"
		"{'audience':'b','hosts':['[2001:2::1]'],'upstream':"
		"{'url':'http://198.18.0.3/','allow_plaintext':true}}",
		NPOFF),
	    "routes[1]: hosts[0]: ", "routes[0]" },
	{ "host listed twice",
	    ROUTE(UP_A ",'hosts':['a.internal','A.internal']"),
	    "routes[0]: hosts[1]: ", "" },
	{ "bad host name", ROUTE(UP_A ",'hosts':['a b']"),
	    "routes[0].hosts[0]: ", "" },
	{ "host with a port", ROUTE(UP_A ",'hosts':['a.internal:443']"),
	    "routes[0].hosts[0]: ", "" },
	{ "CONNECT in methods", ROUTE(UP_A ",'methods':['POST','CONNECT']"),
	    "routes[0].methods[1]: ", "CONNECT" },
	{ "method with a space", ROUTE(UP_A ",'methods':['PO ST']"),
	    "routes[0].methods[0]: ", "" },
	{ "methods empty", ROUTE(UP_A ",'methods':[]"),
	    "routes[0]: methods: ", "" },
	{ "method listed twice", ROUTE(UP_A ",'methods':['GET','GET']"),
	    "routes[0]: methods[1]: ", "" },
	{ "path prefix with ..", ROUTE(UP_A ",'path_prefixes':['/v1/../x']"),
	    "routes[0].path_prefixes[0]: ", "ambiguous" },
	{ "path prefix with //", ROUTE(UP_A ",'path_prefixes':['/v1//x']"),
	    "routes[0].path_prefixes[0]: ", "ambiguous" },
	{ "path prefix with %2e",
	    ROUTE(UP_A ",'path_prefixes':['/ok','/v1/%2e%2e/x']"),
	    "routes[0].path_prefixes[1]: ", "ambiguous" },
	{ "path prefix with a backslash",
	    ROUTE(UP_A ",'path_prefixes':['/v1\\\\x']"),
	    "routes[0].path_prefixes[0]: ", "ambiguous" },
	{ "path prefix without /", ROUTE(UP_A ",'path_prefixes':['v1']"),
	    "routes[0].path_prefixes[0]: ", "" },
	{ "path prefix with a query", ROUTE(UP_A ",'path_prefixes':['/v1?a']"),
	    "routes[0].path_prefixes[0]: ", "" },
	{ "path_prefixes empty", ROUTE(UP_A ",'path_prefixes':[]"),
	    "routes[0]: path_prefixes: ", "" },

	/* Injected headers: never one sluice sets, never a control byte. */
	{ "header Host", HDR("Host", "hdr.val"),
	    "routes[0].upstream.headers[0]: name: ", "Host" },
	{ "header host (lower case)", HDR("host", "hdr.val"),
	    "routes[0].upstream.headers[0]: name: ", "host" },
	{ "header Content-Length", HDR("Content-Length", "hdr.val"),
	    "routes[0].upstream.headers[0]: name: ", "" },
	{ "header Transfer-Encoding", HDR("Transfer-Encoding", "hdr.val"),
	    "routes[0].upstream.headers[0]: name: ", "" },
	{ "header Connection", HDR("Connection", "hdr.val"),
	    "routes[0].upstream.headers[0]: name: ", "" },
	{ "header Keep-Alive", HDR("keep-alive", "hdr.val"),
	    "routes[0].upstream.headers[0]: name: ", "" },
	{ "header Proxy-Authorization", HDR("Proxy-Authorization", "hdr.val"),
	    "routes[0].upstream.headers[0]: name: ", "" },
	{ "header Proxy-Connection", HDR("Proxy-Connection", "hdr.val"),
	    "routes[0].upstream.headers[0]: name: ", "" },
	{ "header TE", HDR("TE", "hdr.val"),
	    "routes[0].upstream.headers[0]: name: ", "" },
	{ "header Trailer", HDR("Trailer", "hdr.val"),
	    "routes[0].upstream.headers[0]: name: ", "" },
	{ "header Upgrade", HDR("UPGRADE", "hdr.val"),
	    "routes[0].upstream.headers[0]: name: ", "" },
	{ "header name with a space", HDR("X Cred", "hdr.val"),
	    "routes[0].upstream.headers[0]: name: ", "" },
	{ "header name with a colon", HDR("X-Cred:", "hdr.val"),
	    "routes[0].upstream.headers[0]: name: ", "" },
	{ "header configured twice",
	    UPSTREAM(
		PLAIN ",'headers':[{'name':'X-A','value_file':'@D/hdr.val'},"
		      "{'name':'x-a','value_file':'@D/hdr.val'}]"),
	    "routes[0].upstream.headers[1]: name: ", "" },
	{ "header value with CR", HDR("X-Cred", "hdr_cr.val"),
	    "routes[0].upstream.headers[0]: value_file: @D/hdr_cr.val: ",
	    "control" },
	{ "header value with LF", HDR("X-Cred", "hdr_lf.val"),
	    "routes[0].upstream.headers[0]: value_file: @D/hdr_lf.val: ",
	    "control" },
	{ "header value ending in CRLF", HDR("X-Cred", "hdr_crlf.val"),
	    "routes[0].upstream.headers[0]: value_file: @D/hdr_crlf.val: ",
	    "control" },
	{ "header value with DEL", HDR("X-Cred", "hdr_del.val"),
	    "routes[0].upstream.headers[0]: value_file: @D/hdr_del.val: ",
	    "control" },
	{ "header value with NUL", HDR("X-Cred", "hdr_nul.val"),
	    "routes[0].upstream.headers[0]: value_file: @D/hdr_nul.val: ",
	    "control" },

	/* Sidecar mode needs a user that is not root. */
	{ "sidecar without user", POL(L_FWD, TOK, R_A, "'state_dir':'/x'"),
	    "user: ", "sidecar" },
	{ "sidecar as root by name",
	    POL(L_FWD, TOK, R_A,
		"'user':'root','netpolicy':{'mode':'sidecar'}"),
	    "user: ", "root" },
	{ "sidecar as uid 0", POL(L_FWD, TOK, R_A, "'user':'0'"),
	    "user: ", "root" },
	/* Gateway mode parses sandbox traffic in the host: never as root. */
	{ "gateway as root",
	    POL(L_FWD, TOK, R_A, "'user':'0','netpolicy':{'mode':'gateway'}"),
	    "user: ", "gateway" },
	{ "gateway without user",
	    POL(L_FWD, TOK, R_A, "'netpolicy':{'mode':'gateway'}"),
	    "user: ", "gateway" },
	/* Sidecar rules let sluice reach only the listed resolvers. */
	{ "sidecar, upstream host name, no resolvers",
	    POL(L_FWD, TOK,
		"{'audience':'a','upstream':{'url':'https://model.example/'}}",
		"'user':'65534'"),
	    "netpolicy.resolvers: ", "model.example" },
	{ "unknown user", BASE(",'user':'no-such-user-h6'"),
	    "user: ", "no-such-user-h6" },

	/* Other sections. */
	{ "metrics.listen host name",
	    BASE(",'metrics':{'listen':'localhost:9090'}"),
	    "metrics.listen: ", "" },
	{ "metrics.listen relative unix path",
	    BASE(",'metrics':{'listen':'unix:run/m.sock'}"),
	    "metrics.listen: ", "" },
	{ "metrics.listen without port",
	    BASE(",'metrics':{'listen':'127.0.0.1'}"), "metrics.listen: ", "" },
	{ "relative state_dir", BASE(",'state_dir':'var/lib/sluice'"),
	    "state_dir: ", "absolute" },
	{ "relative ready_file", BASE(",'ready_file':'ready'"),
	    "ready_file: ", "absolute" },
	{ "relative admin.socket", BASE(",'admin':{'socket':'admin.sock'}"),
	    "admin.socket: ", "absolute" },
	{ "relative audit.path", BASE(",'audit':{'path':'audit.jsonl'}"),
	    "audit.path: ", "absolute" },
	{ "bad audit.fsync", BASE(",'audit':{'fsync':'sometimes'}"),
	    "audit.fsync: ", "sometimes" },
	{ "bad audit.on_error", BASE(",'audit':{'on_error':'ignore'}"),
	    "audit.on_error: ", "ignore" },
	{ "bad netpolicy.mode",
	    POL(L_FWD, TOK, R_A, "'netpolicy':{'mode':'nft'}"),
	    "netpolicy.mode: ", "nft" },
	{ "bad netpolicy.table",
	    POL(L_FWD, TOK, R_A, "'netpolicy':{'mode':'off','table':'a b'}"),
	    "netpolicy.table: ", "" },
	{ "bad resolver",
	    POL(L_FWD, TOK, R_A,
		"'netpolicy':{'mode':'off','resolvers':['198.18.0.53','dns']}"),
	    "netpolicy.resolvers[1]: ", "dns" },
	{ "bad sandbox interface",
	    POL(L_FWD, TOK, R_A,
		"'netpolicy':{'mode':'off','sandbox_interfaces':['a*b']}"),
	    "netpolicy.sandbox_interfaces[0]: ", "" },
	{ "unknown key in exec", BASE(",'exec':{'landlok':{}}"),
	    "exec: ", "unknown key 'landlok'" },
	{ "unknown key in exec.landlock",
	    BASE(",'exec':{'landlock':{'rw':[],'wo':[]}}"),
	    "exec.landlock: ", "unknown key 'wo'" },
	{ "relative Landlock path",
	    BASE(",'exec':{'landlock':{'ro':['/usr','lib']}}"),
	    "exec.landlock.ro[1]: ", "not an absolute path" },
	{ "Landlock paths not a list",
	    BASE(",'exec':{'landlock':{'rw':'/tmp'}}"),
	    "exec.landlock.rw: ", "must be an array" },
};

static void
test_refusals(void **state)
{
	size_t i, nbad = 0;

	(void)state;
	for (i = 0; i < SL_NELEM(err_rows); i++) {
		const struct err_row *r = &err_rows[i];
		char why[1024];
		struct config *cf = load(r->policy, why, sizeof(why));

		if (check_refusal(r->name, cf, why, r->want, r->needle) == -1)
			nbad++;
		config_unref(cf);
	}
	if (nbad != 0)
		fail_msg("%zu of %zu refusal rows failed", nbad,
		    SL_NELEM(err_rows));
}

/* Policies close to a refusal that must still load. */
static const struct {
	const char *name;
	const char *policy;
} ok_rows[] = {
	{ "benchmark literal upstream without allow_private",
	    UPSTREAM("'url':'https://198.18.0.1/'") },
	{ "IPv6 benchmark literal",
	    UPSTREAM("'url':'https://[2001:2::1]:8443/'") },
	{ "private literal with allow_private",
	    UPSTREAM("'url':'https://10.0.0.1/','allow_private':true") },
	{ "upstream host:port shared by two routes",
	    POL(L_FWD, TOK,
		"{'audience':'a','upstream':{'url':'https://cp.example.com/a'}},"
		"{'audience':'b','upstream':{'url':'https://CP.example.com:443/b'}}",
		NPOFF) },
	{ "shared upstream, each route with its own alias",
	    POL(L_FWD, TOK,
		"{'audience':'a','hosts':['a.internal'],"
		"'upstream':{'url':'https://cp.example.com/a'}},"
		"{'audience':'b','hosts':['b.internal'],"
		"'upstream':{'url':'https://cp.example.com/b'}}",
		NPOFF) },
	{ "same upstream host on another port",
	    POL(L_FWD, TOK,
		"{'audience':'a','upstream':{'url':'https://cp.example.com/a'}},"
		"{'audience':'b','upstream':{'url':'https://cp.example.com:8443/'}}",
		NPOFF) },
	{ "IPv6 listener",
	    POL("{'type':'forward','listen':'[::1]:3128'}", TOK, R_A, NPOFF) },
	{ "same port on two addresses",
	    POL(L_FWD
		",{'name':'b','type':'forward','listen':'127.0.0.2:3128'}",
		TOK, R_A, NPOFF) },
	{ "HS256 secret of exactly 32 bytes",
	    KEYS("{'alg':'HS256','secret_file':'@D/exact.key'}") },
	{ "two keys with kids",
	    KEYS("{'kid':'a','alg':'HS256','secret_file':'@D/hs.key'},"
		 "{'kid':'b','alg':'EdDSA','public_key_file':'@D/ed.pub'}") },
	{ "one key with a kid",
	    KEYS("{'kid':'a','alg':'HS256','secret_file':'@D/hs.key'}") },
	{ "header value with a tab", HDR("X-Cred", "hdr_tab.val") },
	{ "metrics.listen host:port",
	    BASE(",'metrics':{'listen':'127.0.0.1:9090'}") },
	{ "metrics.listen [IPv6]:port",
	    BASE(",'metrics':{'listen':'[::1]:9090'}") },
	{ "metrics.listen unix path",
	    BASE(",'metrics':{'listen':'unix:/run/sluice/m.sock'}") },
	{ "root outside sidecar and gateway mode",
	    POL(L_FWD, TOK, R_A, "'user':'0','netpolicy':{'mode':'off'}") },
	{ "integral number written with an exponent",
	    BASE(",'limits':{'max_headers':1e2}") },
	{ "GET as a method", ROUTE(UP_A ",'methods':['GET','POST','PUT']") },
	{ "intercept listener on an upstream host another route shares",
	    POL(L_IC(",'host':'api.example.com'"), TOK,
		"{'audience':'plain','upstream':{'url':'https://api.example.com/'}}," R_ICPT,
		NPOFF "," ICPT) },
	{ "exec without landlock", BASE(",'exec':{}") },
	{ "exec.landlock with both lists",
	    BASE(",'exec':{'landlock':{'rw':['/tmp'],'ro':['/usr','/etc']}}") },
	{ "duplicate audience (routes may share one)",
	    POL(L_FWD, TOK,
		R_A ",{'audience':'a','upstream':{'url':'http://198.18.0.3/',"
		    "'allow_plaintext':true}}",
		NPOFF) },
	{ "allowlist route, exact and wildcard hosts",
	    ROUTE(
		"'hosts':['pypi.org','*.pythonhosted.org','XN--BCHER-KVA.example.',"
		"'198.18.0.9','[2001:2::9]'],"
		"'upstream':{'mode':'as_requested','ports':[443,80]}") },
	{ "nested wildcards in two routes",
	    POL(L_FWD, TOK,
		"{'audience':'a','hosts':['*.org']," UP_AR "},"
		"{'audience':'b','hosts':['*.example.org','example.org']," UP_AR
		"}",
		NPOFF) },
	{ "wildcard alias of a fixed route",
	    ROUTE("'hosts':['*.model.internal']," UP_A) },
	{ "explicit fixed mode",
	    UPSTREAM(
		"'mode':'fixed','url':'http://198.18.0.2/','allow_plaintext':true") },
};

static void
test_near_misses_load(void **state)
{
	size_t i, nbad = 0;

	(void)state;
	for (i = 0; i < SL_NELEM(ok_rows); i++) {
		char why[1024];
		struct config *cf = load(ok_rows[i].policy, why, sizeof(why));

		if (cf == NULL) {
			print_error("%s: refused: %s\n", ok_rows[i].name, why);
			nbad++;
		}
		config_unref(cf);
	}
	if (nbad != 0)
		fail_msg("%zu rows failed", nbad);
}

/* Every range of docs/config.md, at both ends and just outside. */
static void
test_ranges(void **state)
{
	static const struct {
		const char *key;
		uint64_t min, max;
		size_t off; /* into struct limits; SIZE_MAX for tokens */
	} ranges[] = {
		{ "max_header_bytes", 1024, 1048576,
		    offsetof(struct limits, max_header_bytes) },
		{ "max_headers", 8, 1000,
		    offsetof(struct limits, max_headers) },
		{ "max_body_bytes", 0, (uint64_t)1 << 50,
		    offsetof(struct limits, max_body_bytes) },
		{ "max_connections", 1, 1000000,
		    offsetof(struct limits, max_connections) },
		{ "header_timeout_ms", 100, 3600000,
		    offsetof(struct limits, header_timeout_ms) },
		{ "idle_timeout_ms", 100, 86400000,
		    offsetof(struct limits, idle_timeout_ms) },
		{ "connect_timeout_ms", 100, 600000,
		    offsetof(struct limits, connect_timeout_ms) },
		{ "upstream_response_timeout_ms", 100, 86400000,
		    offsetof(struct limits, upstream_response_timeout_ms) },
		{ "drain_timeout_ms", 0, 3600000,
		    offsetof(struct limits, drain_timeout_ms) },
		{ "leeway_s", 0, 600, SIZE_MAX },
		{ "max_ttl_s", 1, 604800, SIZE_MAX },
	};
	size_t i, j, nbad = 0;

	(void)state;
	for (i = 0; i < SL_NELEM(ranges); i++) {
		uint64_t vals[4] = { ranges[i].min - 1, ranges[i].min,
			ranges[i].max, ranges[i].max + 1 };

		for (j = ranges[i].min == 0 ? 1 : 0; j < 4; j++) {
			int tok = ranges[i].off == SIZE_MAX;
			char pol[1024], why[1024], want[128], name[128];
			struct config *cf;

			if (tok)
				snprintf(pol, sizeof(pol),
				    "{'listeners':[" L_FWD "],'tokens':{'%s':"
				    "%llu,'keys':[" K_HS "]},'routes':[" R_A
				    "]," NPOFF "}",
				    ranges[i].key, (unsigned long long)vals[j]);
			else
				snprintf(pol, sizeof(pol),
				    BASE(",'limits':{'%s':%llu}"),
				    ranges[i].key, (unsigned long long)vals[j]);
			cf = load(pol, why, sizeof(why));
			snprintf(name, sizeof(name), "%s = %llu", ranges[i].key,
			    (unsigned long long)vals[j]);
			if (j == 1 || j == 2) {
				uint64_t got;

				if (cf == NULL) {
					print_error("%s: refused: %s\n", name,
					    why);
					nbad++;
					continue;
				}
				if (tok)
					got = (uint64_t)(ranges[i].min == 0 ?
						cf->cf_tokens.tc_leeway_s :
						cf->cf_tokens.tc_max_ttl_s);
				else
					memcpy(&got,
					    (const char *)&cf->cf_limits +
						ranges[i].off,
					    sizeof(got));
				if (got != vals[j]) {
					print_error("%s: got %llu\n", name,
					    (unsigned long long)got);
					nbad++;
				}
				config_unref(cf);
				continue;
			}
			snprintf(want, sizeof(want),
			    "%s.%s: ", tok ? "tokens" : "limits",
			    ranges[i].key);
			if (check_refusal(name, cf, why, want, "") == -1)
				nbad++;
			config_unref(cf);
		}
	}
	if (nbad != 0)
		fail_msg("%zu range checks failed", nbad);
}

/*
 * JSON syntax errors name the line and the column; the column may be
 * anywhere within the offending token (cJSON reports the byte after the
 * one it looked at for some errors), within [col, colmax].
 */
static void
test_syntax(void **state)
{
	static const struct {
		const char *name;
		const char *text;
		size_t len;
		const char *want;     /* after "POLICY: " */
		unsigned col, colmax; /* 0: want is the whole message */
	} rows[] = {
		{ "bare word on line 3", "{\n  \"user\": \"x\",\n  oops\n}", 0,
		    "invalid JSON at line 3 column ", 3, 6 },
		{ "garbage after the object", "{}\n\n   x", 0,
		    "invalid JSON at line 3 column ", 4, 4 },
		{ "missing comma", "{\"a\": 1\n \"b\": 2}", 0,
		    "invalid JSON at line 2 column ", 2, 2 },
		{ "bad literal on line 2", "{\"a\":\n\ttrue1}", 0,
		    "invalid JSON at line 2 column ", 2, 6 },
		{ "empty file", "", 0, "invalid JSON at line 1 column ", 1, 1 },
		{ "truncated", "{\"listeners\": [", 0,
		    "invalid JSON at line 1 column ", 1, 16 },
		{ "NUL byte", "{\"a\"\0: 1}", 9, "NUL byte at offset 4", 0, 0 },
		{ "NUL byte at the start", "\0{}", 3, "NUL byte at offset 0", 0,
		    0 },
		{ "escaped NUL", "{\"user\": \"a\\u0000b\"}", 0,
		    "\\u0000 in a string at line 1 column 12 (a NUL would "
		    "silently cut it short)",
		    0, 0 },
		{ "escaped NUL on line 2", "{\"user\":\n \"\\u0000\"}", 0,
		    "\\u0000 in a string at line 2 column 3 (a NUL would "
		    "silently cut it short)",
		    0, 0 },
	};
	size_t i, nbad = 0;

	(void)state;
	for (i = 0; i < SL_NELEM(rows); i++) {
		char why[1024], want[1024], *end;
		struct config *cf;
		size_t len =
		    rows[i].len != 0 ? rows[i].len : strlen(rows[i].text);
		unsigned long col = 0;
		int bad;

		put("policy.json", rows[i].text, len, 0644);
		cf = config_load(polpath, NULL, why, sizeof(why));
		snprintf(want, sizeof(want), "%s: %s", polpath, rows[i].want);
		bad = cf != NULL || strncmp(why, want, strlen(want)) != 0 ||
		    strchr(why, '\n') != NULL;
		if (!bad && rows[i].col == 0)
			bad = strcmp(why, want) != 0;
		else if (!bad) {
			col = strtoul(why + strlen(want), &end, 10);
			bad = *end != '\0' || col < rows[i].col ||
			    col > rows[i].colmax;
		}
		if (bad) {
			print_error("%s:\n  want \"%s\" (column %u-%u)\n"
				    "  got  \"%s\"\n",
			    rows[i].name, want, rows[i].col, rows[i].colmax,
			    cf != NULL ? "(loaded)" : why);
			nbad++;
		}
		config_unref(cf);
	}
	if (nbad != 0)
		fail_msg("%zu syntax rows failed", nbad);
}

/* An escaped backslash before "u0000" is no NUL: the string is read
 * whole (and then refused as no such user). */
static void
test_escaped_backslash_is_no_nul(void **state)
{
	static const char text[] = "{\"user\": \"x\\\\u0000\"}";
	char why[1024];

	(void)state;
	put("policy.json", text, strlen(text), 0644);
	assert_null(config_load(polpath, NULL, why, sizeof(why)));
	assert_null(strstr(why, "u0000 in a string"));
	assert_non_null(strstr(why, "no such user \"x\\u0000\""));
}

static void
test_missing_policy_file(void **state)
{
	char p[512], why[1024];

	(void)state;
	path_in(p, sizeof(p), "no-such-policy.json");
	assert_null(config_load(p, NULL, why, sizeof(why)));
	assert_int_equal(strncmp(why, p, strlen(p)), 0);
	assert_non_null(strstr(why, "No such file"));
}

/* config_read_secret() by itself: one trailing newline is dropped. */
static void
test_read_secret(void **state)
{
	char p[512], why[512];
	unsigned char *v = NULL;
	size_t len = 99;

	(void)state;
	puts_file("two_nl.key", "abc\n\n", 0600);
	path_in(p, sizeof(p), "two_nl.key");
	assert_int_equal(config_read_secret(p, 12345, &v, &len, why,
			     sizeof(why)),
	    0);
	assert_int_equal(len, 4);
	assert_memory_equal(v, "abc\n", 4);
	free(v);
	puts_file("empty.key", "", 0600);
	path_in(p, sizeof(p), "empty.key");
	v = NULL;
	assert_int_equal(config_read_secret(p, 12345, &v, &len, why,
			     sizeof(why)),
	    0);
	assert_int_equal(len, 0);
	free(v);
	path_in(p, sizeof(p), "hs604.key");
	assert_int_equal(config_read_secret(p, 12345, &v, &len, why,
			     sizeof(why)),
	    -1);
	assert_non_null(strstr(why, "0604"));
	assert_null(strstr(why, MARK));
}

/*
 * Owner rules: root, the configured user and the user running sluice may
 * own a secret file; anyone else may not. Only root can make a file owned
 * by someone else, so that half runs as root (as in CI).
 */
static void
test_secret_owner(void **state)
{
	static const char pol_ok[] =
	    "{'user':'4242','listeners':[" L_FWD "],'tokens':{'keys':["
	    "{'alg':'HS256','secret_file':'@D/uid.key'}]},'routes':[" R_A
	    "]," NPOFF "}";
	static const char pol_other[] =
	    "{'user':'65534','listeners':[" L_FWD "],'tokens':{'keys':["
	    "{'alg':'HS256','secret_file':'@D/uid.key'}]},'routes':[" R_A
	    "]," NPOFF "}";
	char p[512], why[1024];
	unsigned char *v = NULL;
	size_t len;
	struct config *cf;

	(void)state;
	/* Our own file, whatever user the policy names. */
	puts_file("uid.key", HS_SECRET, 0600);
	cf = load_ok(pol_other);
	config_unref(cf);
	if (geteuid() != 0) {
		skip();
		return;
	}
	path_in(p, sizeof(p), "uid.key");
	assert_int_equal(chown(p, 4242, 4242), 0);
	assert_int_equal(config_read_secret(p, 65534, &v, &len, why,
			     sizeof(why)),
	    -1);
	assert_non_null(strstr(why, "4242"));
	assert_int_equal(config_read_secret(p, 4242, &v, &len, why,
			     sizeof(why)),
	    0);
	assert_int_equal(len, strlen(HS_SECRET));
	assert_memory_equal(v, HS_SECRET, len);
	explicit_bzero(v, len);
	free(v);
	cf = load_ok(pol_ok);
	assert_int_equal(cf->cf_uid, 4242);
	config_unref(cf);
	cf = load(pol_other, why, sizeof(why));
	assert_int_equal(check_refusal("owned by another uid", cf, why,
			     "tokens.keys[0]: secret_file: @D/uid.key: ",
			     "4242"),
	    0);
	config_unref(cf);
}

/* An Ed25519 PEM written by OpenSSL loads as the same key. */
static void
test_eddsa_key(void **state)
{
	struct config *cf;

	(void)state;
	cf = load_ok(KEYS("{'alg':'EdDSA','public_key_file':'@D/ed.pub'}"));
	assert_int_equal(cf->cf_tokens.tc_nkeys, 1);
	assert_int_equal(cf->cf_tokens.tc_keys[0].tk_alg, TOKEN_ALG_EDDSA);
	assert_non_null(cf->cf_tokens.tc_keys[0].tk_pkey);
	assert_int_equal(EVP_PKEY_get_id(cf->cf_tokens.tc_keys[0].tk_pkey),
	    EVP_PKEY_ED25519);
	assert_int_equal(EVP_PKEY_eq(cf->cf_tokens.tc_keys[0].tk_pkey, ed_key),
	    1);
	assert_true(exists("ed.pub"));
	config_unref(cf);
}

#define UNL_SECRET  MARK "-unlink-me-0123456789abcdef012345"
#define UNL_SECRET2 MARK "-the-new-secret-0123456789abcdef0"

static void
test_unlink_after_read(void **state)
{
	static const char hs[] =
	    "{'listeners':[" L_FWD "],'tokens':{'keys':["
	    "{'alg':'HS256','secret_file':'@D/unl.key',"
	    "'unlink_after_read':true}]},'routes':[" R_A "]," NPOFF "}";
	static const char ed[] =
	    "{'listeners':[" L_FWD "],'tokens':{'keys':["
	    "{'alg':'EdDSA','public_key_file':'@D/unl.pub',"
	    "'unlink_after_read':true}]},'routes':[" R_A "]," NPOFF "}";
	struct config *c1, *c2, *c3, *c4;
	const struct token_key *k;
	char why[1024], p[512];

	(void)state;
	puts_file("unl.key", UNL_SECRET "\n", 0600);
	c1 = load_ok(hs);
	/* Loading removes nothing: only "run" does, once it is all loaded. */
	assert_true(exists("unl.key"));
	assert_int_equal(config_unlink_keys(c1, why, sizeof(why)), 0);
	assert_false(exists("unl.key"));
	assert_int_equal(c1->cf_tokens.tc_key_unlink[0], 1);
	k = &c1->cf_tokens.tc_keys[0];
	assert_int_equal(k->tk_secret_len, strlen(UNL_SECRET));
	assert_memory_equal(k->tk_secret, UNL_SECRET, strlen(UNL_SECRET));

	/* A reload keeps the key in memory, also a reload of a reload. */
	c2 = load_prev(hs, c1, why, sizeof(why));
	if (c2 == NULL)
		fail_msg("reload refused: %s", why);
	k = &c2->cf_tokens.tc_keys[0];
	assert_int_equal(k->tk_secret_len, strlen(UNL_SECRET));
	assert_memory_equal(k->tk_secret, UNL_SECRET, strlen(UNL_SECRET));
	/* A copy, not a borrowed pointer: c1 may be freed first. */
	assert_ptr_not_equal(k->tk_secret, c1->cf_tokens.tc_keys[0].tk_secret);
	config_unref(c1);
	/* A key taken from memory has no file of this load to remove. */
	puts_file("unl.key", UNL_SECRET2, 0600);
	assert_int_equal(config_unlink_keys(c2, why, sizeof(why)), 0);
	assert_true(exists("unl.key"));
	path_in(p, sizeof(p), "unl.key");
	assert_int_equal(unlink(p), 0);
	c3 = load_prev(hs, c2, why, sizeof(why));
	if (c3 == NULL)
		fail_msg("second reload refused: %s", why);
	assert_memory_equal(c3->cf_tokens.tc_keys[0].tk_secret, UNL_SECRET,
	    strlen(UNL_SECRET));
	config_unref(c2);

	/* Without the running policy the file is simply missing. */
	c4 = load(hs, why, sizeof(why));
	assert_int_equal(check_refusal("fresh load after unlink", c4, why,
			     "tokens.keys[0]: secret_file: @D/unl.key: ",
			     "No such file"),
	    0);

	/* A new file is read (and removed) again. */
	puts_file("unl.key", UNL_SECRET2, 0600);
	c4 = load_prev(hs, c3, why, sizeof(why));
	if (c4 == NULL)
		fail_msg("reload with a new file refused: %s", why);
	assert_true(exists("unl.key"));
	assert_int_equal(config_unlink_keys(c4, why, sizeof(why)), 0);
	assert_false(exists("unl.key"));
	assert_int_equal(c4->cf_tokens.tc_keys[0].tk_secret_len,
	    strlen(UNL_SECRET2));
	assert_memory_equal(c4->cf_tokens.tc_keys[0].tk_secret, UNL_SECRET2,
	    strlen(UNL_SECRET2));
	config_unref(c3);
	config_unref(c4);

	/* The same for an EdDSA public key. */
	write_pem("unl.pub", ed_key, 0);
	c1 = load_ok(ed);
	assert_true(exists("unl.pub"));
	assert_int_equal(config_unlink_keys(c1, why, sizeof(why)), 0);
	assert_false(exists("unl.pub"));
	c2 = load_prev(ed, c1, why, sizeof(why));
	if (c2 == NULL)
		fail_msg("EdDSA reload refused: %s", why);
	config_unref(c1);
	assert_non_null(c2->cf_tokens.tc_keys[0].tk_pkey);
	assert_int_equal(EVP_PKEY_eq(c2->cf_tokens.tc_keys[0].tk_pkey, ed_key),
	    1);
	config_unref(c2);
}

/*
 * A policy that fails to load after its keys were read leaves every key
 * file in place (the keys are the last part loaded: a bad revoked_file
 * fails after them), and removal failures are reported, naming the key.
 */
static void
test_unlink_only_when_loaded(void **state)
{
	static const char bad[] =
	    "{'listeners':[" L_FWD "],'tokens':{'keys':["
	    "{'alg':'HS256','secret_file':'@D/unl2.key',"
	    "'unlink_after_read':true}],'revoked_file':'@D/nope.txt'},"
	    "'routes':[" R_A "]," NPOFF "}";
	static const char good[] =
	    "{'listeners':[" L_FWD "],'tokens':{'keys':["
	    "{'alg':'HS256','secret_file':'@D/unl3.key',"
	    "'unlink_after_read':true}]},'routes':[" R_A "]," NPOFF "}";
	struct config *cf;
	char why[1024], d[512];

	(void)state;
	puts_file("unl2.key", UNL_SECRET, 0600);
	cf = load(bad, why, sizeof(why));
	assert_int_equal(check_refusal("bad revoked_file", cf, why,
			     "tokens.revoked_file: ", "nope.txt"),
	    0);
	assert_true(exists("unl2.key"));

	/* A path that cannot be unlinked (now a directory): say which. */
	puts_file("unl3.key", UNL_SECRET, 0600);
	cf = load_ok(good);
	path_in(d, sizeof(d), "unl3.key");
	assert_int_equal(unlink(d), 0);
	assert_int_equal(mkdir(d, 0700), 0);
	assert_int_equal(config_unlink_keys(cf, why, sizeof(why)), -1);
	assert_non_null(strstr(why, "tokens.keys[0]: unlink_after_read: "));
	assert_non_null(strstr(why, "/unl3.key"));
	assert_true(exists("unl3.key"));
	assert_int_equal(rmdir(d), 0);
	config_unref(cf);
}

/*
 * Running out of memory anywhere in config_load() is a refusal naming
 * "out of memory", never the end of the process (a SIGHUP reload must
 * survive it): the n-th allocation fails, for every n until the policy
 * loads. Under ASan this also proves that no refusal path leaks.
 */
static void
test_out_of_memory(void **state)
{
	static const char full[] =
	    "{'listeners':["
	    "{'name':'fwd','type':'forward','listen':'[::1]:3128'},"
	    "{'type':'reverse','listen':'127.0.0.1:8080','route':'second'}],"
	    "'tokens':{'issuer':'control-plane','keys':["
	    "{'kid':'k1','alg':'HS256','secret_file':'@D/oom.key',"
	    "'unlink_after_read':true},"
	    "{'kid':'k2','alg':'EdDSA','public_key_file':'@D/ed.pub'}],"
	    "'revoked_file':'@D/oom-revoked.txt'},"
	    "'routes':["
	    "{'audience':'first','hosts':['Model.Internal','198.18.0.9'],"
	    "'methods':['POST','GET'],'path_prefixes':['/v1/messages','/v2/'],"
	    "'upstream':{'url':'https://cp.example.com:8443/a/b',"
	    "'pin_sha256':['AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA='],"
	    "'headers':[{'name':'X-Cred','value_file':'@D/hdr.val'}]}},"
	    "{'audience':'second','upstream':{'url':'http://198.18.0.1/',"
	    "'allow_plaintext':true}}],"
	    "'netpolicy':{'mode':'gateway','resolvers':['198.18.0.53']},"
	    "'admin':{'socket':'/run/sluice/admin.sock'},"
	    "'metrics':{'listen':'unix:/run/sluice/metrics.sock'},"
	    "'state_dir':'/tmp/state','ready_file':'/tmp/ready',"
	    "'user':'4321'}";
	struct config *prev = NULL, *cf;
	char why[1024], p[512];
	unsigned long n;
	int pass;

	(void)state;
	puts_file("oom.key", UNL_SECRET, 0600);
	puts_file("oom-revoked.txt", "jti-1\njti-2\n", 0644);
	/* Pass 0: a first load; pass 1: a reload, the key from memory. */
	for (pass = 0; pass < 2; pass++) {
		for (n = 1; n < 10000; n++) {
			config_alloc_fail_at = n;
			cf = load_prev(full, prev, why, sizeof(why));
			config_alloc_fail_at = 0;
			if (cf != NULL)
				break;
			if (strstr(why, "out of memory") == NULL)
				fail_msg("pass %d, allocation %lu: %s", pass, n,
				    why);
		}
		assert_non_null(cf);
		/* Every load allocates: the loop reached some failures. */
		assert_true(n > 20);
		if (pass == 0) {
			assert_int_equal(config_unlink_keys(cf, why,
					     sizeof(why)),
			    0);
			prev = cf;
		} else {
			assert_memory_equal(cf->cf_tokens.tc_keys[0].tk_secret,
			    UNL_SECRET, strlen(UNL_SECRET));
			config_unref(cf);
		}
	}
	config_unref(prev);
	path_in(p, sizeof(p), "oom-revoked.txt");
	(void)unlink(p);
}

/* Without unlink_after_read a vanished file fails the reload. */
static void
test_no_unlink_reload_needs_file(void **state)
{
	static const char pol[] = "{'listeners':[" L_FWD "],'tokens':{'keys':["
				  "{'alg':'HS256','secret_file':'@D/keep.key'}"
				  "]},'routes':[" R_A "]," NPOFF "}";
	struct config *c1, *c2;
	char p[512], why[1024];

	(void)state;
	puts_file("keep.key", HS_SECRET, 0600);
	c1 = load_ok(pol);
	assert_true(exists("keep.key"));
	path_in(p, sizeof(p), "keep.key");
	assert_int_equal(unlink(p), 0);
	c2 = load_prev(pol, c1, why, sizeof(why));
	assert_int_equal(check_refusal("reload without file", c2, why,
			     "tokens.keys[0]: secret_file: @D/keep.key: ",
			     "No such file"),
	    0);
	config_unref(c2);
	config_unref(c1);
}

static char *
print_to_string(const struct config *cf)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	assert_non_null(f);
	config_print(cf, f);
	assert_int_equal(fclose(f), 0);
	assert_non_null(buf);
	return buf;
}

static const cJSON *
jget(const cJSON *o, const char *path)
{
	char tmp[256], *save = NULL, *tok;

	snprintf(tmp, sizeof(tmp), "%s", path);
	for (tok = strtok_r(tmp, ".", &save); tok != NULL && o != NULL;
	     tok = strtok_r(NULL, ".", &save)) {
		if (tok[0] >= '0' && tok[0] <= '9')
			o = cJSON_GetArrayItem(o, atoi(tok));
		else
			o = cJSON_GetObjectItemCaseSensitive(o, tok);
	}
	if (o == NULL)
		fail_msg("config_print: no %s", path);
	return o;
}

static void
expect_num(const cJSON *root, const char *path, double v)
{
	const cJSON *o = jget(root, path);

	if (!cJSON_IsNumber(o) || o->valuedouble != v)
		fail_msg("config_print: %s is not %.0f", path, v);
}

static void
expect_str(const cJSON *root, const char *path, const char *v)
{
	const cJSON *o = jget(root, path);
	char *x = expand(v);

	if (!cJSON_IsString(o) || strcmp(o->valuestring, x) != 0)
		fail_msg("config_print: %s is not \"%s\"", path, x);
	free(x);
}

static void
expect_bool(const cJSON *root, const char *path, int v)
{
	const cJSON *o = jget(root, path);

	if (!cJSON_IsBool(o) || cJSON_IsTrue(o) != v)
		fail_msg("config_print: %s is not %s", path,
		    v ? "true" : "false");
}

static void
expect_null(const cJSON *root, const char *path)
{
	if (!cJSON_IsNull(jget(root, path)))
		fail_msg("config_print: %s is not null", path);
}

/*
 * A policy template of n generated entries: head, then each entry (ent,
 * with its index for every '#'), comma-separated, then tail.
 */
static char *
gen_policy(const char *head, const char *ent, size_t n, const char *tail)
{
	size_t cap =
	    strlen(head) + strlen(tail) + n * (strlen(ent) * 4 + 1) + 1;
	size_t o, i;
	const char *p;
	char *buf = malloc(cap);

	assert_non_null(buf);
	o = (size_t)snprintf(buf, cap, "%s", head);
	for (i = 0; i < n; i++) {
		if (i > 0)
			buf[o++] = ',';
		for (p = ent; *p != '\0'; p++)
			if (*p == '#')
				o += (size_t)snprintf(buf + o, cap - o, "%zu",
				    i);
			else
				buf[o++] = *p;
	}
	snprintf(buf + o, cap - o, "%s", tail);
	return buf;
}

/*
 * The arrays with a cap (listeners 64, tokens.keys 32, routes 256, an
 * upstream's headers 32): the cap itself loads, one more is refused with
 * the array's path and its cap, and headers (optional) may be absent or
 * empty but must be an array.
 */
static void
test_array_caps(void **state)
{
	static const struct {
		const char *name, *head, *fmt, *tail, *want;
		size_t cap;
	} rows[] = {
		{ "listeners", "{'listeners':[",
		    "{'type':'forward','listen':'127.0.0.1:20#'}",
		    "]," TOK ",'routes':[" R_A "]," NPOFF "}",
		    "listeners: more than 64 listeners", 64 },
		{ "tokens.keys", "{'listeners':[" L_FWD "],'tokens':{'keys':[",
		    "{'kid':'k#','alg':'HS256',"
		    "'secret_file':'@D/hs.key'}",
		    "]},'routes':[" R_A "]," NPOFF "}",
		    "tokens.keys: more than 32 keys", 32 },
		{ "routes", "{'listeners':[" L_FWD "]," TOK ",'routes':[",
		    "{'audience':'a#'," UP_A "}", "]," NPOFF "}",
		    "routes: more than 256 routes", 256 },
		{ "headers",
		    "{'listeners':[" L_FWD "]," TOK
		    ",'routes':[{'audience':'a',"
		    "'upstream':{" PLAIN ",'headers':[",
		    "{'name':'X-H#','value_file':'@D/hdr.val'}",
		    "]}}]," NPOFF "}",
		    "routes[0].upstream.headers: more than 32 headers", 32 },
	};
	char why[1024];
	struct config *cf;
	size_t i, n;

	(void)state;
	for (i = 0; i < SL_NELEM(rows); i++) {
		for (n = rows[i].cap; n <= rows[i].cap + 1; n++) {
			char *pol = gen_policy(rows[i].head, rows[i].fmt, n,
			    rows[i].tail);

			cf = load(pol, why, sizeof(why));
			free(pol);
			if (n == rows[i].cap && cf == NULL)
				fail_msg("%s: %zu should load: %s",
				    rows[i].name, n, why);
			if (n > rows[i].cap &&
			    check_refusal(rows[i].name, cf, why, rows[i].want,
				"") == -1)
				fail_msg("%s: %zu loaded or wrong message",
				    rows[i].name, n);
			config_unref(cf);
		}
	}
	cf = load_ok(UPSTREAM(PLAIN ",'headers':[]"));
	assert_int_equal(cf->cf_routes[0].rt_up.uc_nheaders, 0);
	config_unref(cf);
	cf = load_ok(UPSTREAM(PLAIN));
	assert_int_equal(cf->cf_routes[0].rt_up.uc_nheaders, 0);
	config_unref(cf);
	cf = load(UPSTREAM(PLAIN ",'headers':{}"), why, sizeof(why));
	if (check_refusal("headers {}", cf, why,
		"routes[0].upstream.headers: must be an array", "") == -1)
		fail_msg("headers {} loaded or wrong message");
	config_unref(cf);
	cf = load("{'listeners':[" L_FWD "],'tokens':{},'routes':[" R_A
		  "]," NPOFF "}",
	    why, sizeof(why));
	if (check_refusal("no keys", cf, why, "tokens: missing \"keys\"", "") ==
	    -1)
		fail_msg("tokens without keys loaded or wrong message");
	config_unref(cf);
}

/* The normalized policy: JSON, every default filled in, no secret. */
static void
test_print(void **state)
{
	static const char pol[] =
	    "{'user':'65534','listeners':[" L_FWD "],"
	    "'tokens':{'issuer':'cp','revoked_file':'@D/revoked.txt','keys':["
	    "{'kid':'h','alg':'HS256','secret_file':'@D/hs.key'},"
	    "{'kid':'e','alg':'EdDSA','public_key_file':'@D/ed.pub'}]},"
	    "'routes':[{'audience':'model-proxy','hosts':['m.internal'],"
	    "'upstream':{'url':'https://cp.example.com/x','headers':["
	    "{'name':'X-Sandbox-Credential','value_file':'@D/hdr.val'}]}}],"
	    "'netpolicy':{'resolvers':['198.18.0.53']}}";
	struct config *cf;
	char *out, *json, hex[65];
	unsigned char md[32];
	cJSON *root;
	size_t i;

	(void)state;
	puts_file("revoked.txt", "jti-2\n# comment\n\njti-1\n", 0644);
	cf = load_ok(pol);
	assert_int_equal(cf->cf_nrevoked, 2);
	out = print_to_string(cf);
	if (strstr(out, MARK) != NULL || strstr(out, HS_SECRET) != NULL ||
	    strstr(out, HDR_SECRET) != NULL)
		fail_msg("config_print shows a secret");
	if ((root = cJSON_Parse(out)) == NULL)
		fail_msg("config_print output is not JSON:\n%s", out);

	/* The SHA-256 of the file's bytes. */
	json = expand(pol);
	SHA256((const unsigned char *)json, strlen(json), md);
	free(json);
	for (i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	expect_str(root, "sha256", hex);

	expect_str(root, "user", "65534");
	expect_str(root, "listeners.0.name", "127.0.0.1:3128");
	expect_str(root, "listeners.0.type", "forward");
	expect_str(root, "listeners.0.listen", "127.0.0.1:3128");
	expect_str(root, "tokens.issuer", "cp");
	expect_num(root, "tokens.leeway_s", 30);
	expect_num(root, "tokens.max_ttl_s", 3600);
	expect_str(root, "tokens.revoked_file", "@D/revoked.txt");
	expect_str(root, "tokens.keys.0.kid", "h");
	expect_str(root, "tokens.keys.0.alg", "HS256");
	expect_str(root, "tokens.keys.0.secret_file", "@D/hs.key");
	expect_bool(root, "tokens.keys.0.unlink_after_read", 0);
	expect_str(root, "tokens.keys.1.alg", "EdDSA");
	expect_str(root, "tokens.keys.1.public_key_file", "@D/ed.pub");
	expect_str(root, "routes.0.audience", "model-proxy");
	expect_str(root, "routes.0.hosts.0", "m.internal");
	expect_str(root, "routes.0.methods.0", "POST");
	assert_int_equal(cJSON_GetArraySize(jget(root, "routes.0.methods")), 1);
	expect_str(root, "routes.0.path_prefixes.0", "/");
	expect_num(root, "routes.0.max_requests_per_token", 0);
	expect_bool(root, "routes.0.connect.enabled", 0);
	expect_bool(root, "routes.0.connect.intercept", 0);
	expect_str(root, "routes.0.upstream.url", "https://cp.example.com/x");
	assert_int_equal(cJSON_GetArraySize(
			     jget(root, "routes.0.upstream.pin_sha256")),
	    0);
	expect_bool(root, "routes.0.upstream.allow_private", 0);
	expect_bool(root, "routes.0.upstream.allow_plaintext", 0);
	expect_str(root, "routes.0.upstream.headers.0.name",
	    "X-Sandbox-Credential");
	expect_str(root, "routes.0.upstream.headers.0.value_file",
	    "@D/hdr.val");
	assert_null(
	    cJSON_GetObjectItemCaseSensitive(jget(root,
						 "routes.0.upstream.headers.0"),
		"value"));
	expect_num(root, "limits.max_header_bytes", 16384);
	expect_num(root, "limits.max_headers", 100);
	expect_num(root, "limits.max_body_bytes", 33554432);
	expect_num(root, "limits.max_connections", 4096);
	expect_num(root, "limits.header_timeout_ms", 10000);
	expect_num(root, "limits.idle_timeout_ms", 60000);
	expect_num(root, "limits.connect_timeout_ms", 5000);
	expect_num(root, "limits.upstream_response_timeout_ms", 300000);
	expect_num(root, "limits.drain_timeout_ms", 10000);
	expect_num(root, "limits.per_client_connections", 256);
	expect_num(root, "limits.per_client_refusals_per_s", 20);
	expect_num(root, "limits.per_sandbox_connections", 256);
	expect_num(root, "limits.per_sandbox_rps", 0);
	{
		/* The limits, all of them, in the order docs/config.md has. */
		static const char *const order[] = { "max_header_bytes",
			"max_headers", "max_body_bytes", "max_connections",
			"header_timeout_ms", "idle_timeout_ms",
			"connect_timeout_ms", "upstream_response_timeout_ms",
			"drain_timeout_ms", "per_client_connections",
			"per_client_refusals_per_s", "per_sandbox_connections",
			"per_sandbox_rps" };
		const cJSON *it;

		i = 0;
		cJSON_ArrayForEach(it, jget(root, "limits")) {
			assert_true(i < SL_NELEM(order));
			assert_string_equal(it->string, order[i]);
			i++;
		}
		assert_int_equal(i, SL_NELEM(order));
	}
	expect_str(root, "audit.path", "/var/log/sluice/audit.jsonl");
	expect_str(root, "audit.fsync", "interval");
	expect_bool(root, "audit.chain", 1);
	expect_str(root, "audit.on_error", "deny");
	expect_str(root, "netpolicy.mode", "sidecar");
	expect_str(root, "netpolicy.table", "sluice");
	expect_bool(root, "netpolicy.allow_loopback", 1);
	assert_int_equal(cJSON_GetArraySize(jget(root, "netpolicy.resolvers")),
	    1);
	expect_str(root, "netpolicy.resolvers.0", "198.18.0.53");
	expect_num(root, "netpolicy.log_group", 7);
	expect_str(root, "netpolicy.sandbox_interfaces.0", "sbx-*");
	expect_bool(root, "netpolicy.flush_on_exit", 0);
	expect_null(root, "admin.socket");
	expect_null(root, "metrics.listen");
	expect_str(root, "state_dir", "/var/lib/sluice");
	expect_null(root, "ready_file");
	cJSON_Delete(root);
	free(out);
	config_unref(cf);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_minimal_defaults),
		cmocka_unit_test(test_no_user_keeps_identity),
		cmocka_unit_test(test_explicit_values),
		cmocka_unit_test(test_intercept_listeners),
		cmocka_unit_test(test_intercept_listener_beside_allowlist),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_near_misses_load),
		cmocka_unit_test(test_ranges),
		cmocka_unit_test(test_syntax),
		cmocka_unit_test(test_escaped_backslash_is_no_nul),
		cmocka_unit_test(test_missing_policy_file),
		cmocka_unit_test(test_read_secret),
		cmocka_unit_test(test_secret_owner),
		cmocka_unit_test(test_eddsa_key),
		cmocka_unit_test(test_unlink_after_read),
		cmocka_unit_test(test_unlink_only_when_loaded),
		cmocka_unit_test(test_out_of_memory),
		cmocka_unit_test(test_no_unlink_reload_needs_file),
		cmocka_unit_test(test_array_caps),
		cmocka_unit_test(test_print),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
