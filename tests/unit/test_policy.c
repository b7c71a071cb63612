/*
 * Unit tests for proxy/policy.c, written from the contract (DESIGN.md
 * "Requests and routing", "Run tokens"; docs/config.md "How a forward-proxy
 * request selects a route"): a table of requests through policy_decide()
 * with at least one row per reason code it can return, the budget limit,
 * the denied-destination list of addr_private() at the first and
 * last address of every range, and policy_check_addr() with its loop
 * guard. The policy is loaded through config_load() from a file written
 * into a temporary directory that is removed at the end.
 */
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

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

#define NOW 1700000000LL

static char dir[256], keypath[300], polpath[300];
static struct config *cf;

/*
 * Listeners: 0 forward 127.0.0.1:3128, 1 reverse for model-proxy, 2 a
 * wildcard IPv4 forward, 3 a wildcard IPv6 forward, 4 reverse for other.
 * Routes: model-proxy (aliases, POST under /v1/messages, 64 requests,
 * CONNECT), other (GET/POST under /api/ and /health, no limit, no
 * CONNECT), private (a literal private upstream with allow_private), v6
 * (an IPv6 upstream with an IPv6 alias), and three routes on one upstream
 * host: sh-a and sh-b share https://shared.example:443 (paths /a and /b),
 * sh-c is on its port 8443 (path /c); all three allow CONNECT. Listener 5
 * is a reverse listener for sh-b.
 */
static const char policy[] =
    "{\"listeners\":["
    "{\"name\":\"fwd\",\"type\":\"forward\",\"listen\":\"127.0.0.1:3128\"},"
    "{\"name\":\"rev\",\"type\":\"reverse\",\"listen\":\"127.0.0.1:8080\","
    "\"route\":\"model-proxy\"},"
    "{\"name\":\"any4\",\"type\":\"forward\",\"listen\":\"0.0.0.0:3130\"},"
    "{\"name\":\"any6\",\"type\":\"forward\",\"listen\":\"[::]:3131\"},"
    "{\"name\":\"rev2\",\"type\":\"reverse\",\"listen\":\"[::1]:8081\","
    "\"route\":\"other\"},"
    "{\"name\":\"rev3\",\"type\":\"reverse\",\"listen\":\"[::1]:8082\","
    "\"route\":\"sh-b\"}],"
    "\"tokens\":{\"issuer\":\"control-plane\",\"leeway_s\":30,"
    "\"max_ttl_s\":3600,\"keys\":[{\"alg\":\"HS256\","
    "\"secret_file\":\"%s\"}]},"
    "\"routes\":["
    "{\"audience\":\"model-proxy\",\"hosts\":[\"model-proxy.internal\"],"
    "\"methods\":[\"POST\"],\"path_prefixes\":[\"/v1/messages\"],"
    "\"max_requests_per_token\":64,\"connect\":{\"enabled\":true},"
    "\"upstream\":{\"url\":\"https://cp.example.com/internal/model-proxy\"}},"
    "{\"audience\":\"other\",\"hosts\":[\"other.internal\",\"198.18.0.7\"],"
    "\"methods\":[\"GET\",\"POST\"],"
    "\"path_prefixes\":[\"/api/\",\"/health\"],"
    "\"upstream\":{\"url\":\"https://up2.example.net:8443/\"}},"
    "{\"audience\":\"private\",\"upstream\":{\"url\":\"https://10.1.2.3/\","
    "\"allow_private\":true}},"
    "{\"audience\":\"v6\",\"hosts\":[\"[2001:2::5]\"],"
    "\"upstream\":{\"url\":\"https://[2001:2::10]:9443/\"}},"
    "{\"audience\":\"sh-a\",\"path_prefixes\":[\"/a\"],"
    "\"connect\":{\"enabled\":true},"
    "\"upstream\":{\"url\":\"https://shared.example/up\"}},"
    "{\"audience\":\"sh-b\",\"path_prefixes\":[\"/b\"],"
    "\"connect\":{\"enabled\":true},"
    "\"upstream\":{\"url\":\"https://shared.example:443/\"}},"
    "{\"audience\":\"sh-c\",\"path_prefixes\":[\"/c\"],"
    "\"connect\":{\"enabled\":true},"
    "\"upstream\":{\"url\":\"https://Shared.Example:8443/\"}},"
    "{\"audience\":\"icpt\",\"hosts\":[\"alias.icpt.test\"],"
    "\"connect\":{\"intercept\":true,\"ports\":[443,80]},"
    "\"max_requests_per_token\":5,"
    "\"upstream\":{\"url\":\"https://icpt.example/\"}}],"
    "\"intercept\":{\"ca\":\"ephemeral\"},"
    "\"netpolicy\":{\"mode\":\"off\"}}";

enum { L_FWD, L_REV, L_ANY4, L_ANY6, L_REV2, L_REV3, L_NONE = -1 };
enum { R_MODEL, R_OTHER, R_PRIVATE, R_V6, R_SHA, R_SHB, R_SHC, R_ICPT };

static void
write_file(const char *path, const char *data, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, strlen(data)), (ssize_t)strlen(data));
	assert_int_equal(fchmod(fd, mode), 0);
	assert_int_equal(close(fd), 0);
}

static int
group_setup(void **state)
{
	const char *tmp = getenv("TMPDIR");
	char *json, why[1024], ca[300];
	size_t n;

	(void)state;
	snprintf(dir, sizeof(dir), "%s/sluice-h6-policy-XXXXXX",
	    tmp != NULL ? tmp : "/tmp");
	if (mkdtemp(dir) == NULL) {
		dir[0] = '\0';
		return -1;
	}
	/* No system CA store: loading it costs more than this whole file. */
	snprintf(ca, sizeof(ca), "%s/no-ca.pem", dir);
	(void)setenv("SSL_CERT_FILE", ca, 1);
	(void)setenv("SSL_CERT_DIR", ca, 1);
	snprintf(keypath, sizeof(keypath), "%s/hs.key", dir);
	snprintf(polpath, sizeof(polpath), "%s/policy.json", dir);
	write_file(keypath, "0123456789abcdef0123456789abcdef\n", 0600);
	n = sizeof(policy) + strlen(keypath);
	json = malloc(n);
	assert_non_null(json);
	snprintf(json, n, policy, keypath);
	write_file(polpath, json, 0644);
	free(json);
	cf = config_load(polpath, NULL, why, sizeof(why));
	(void)unlink(keypath);
	(void)unlink(polpath);
	(void)rmdir(dir);
	if (cf == NULL) {
		fprintf(stderr, "policy refused: %s\n", why);
		return -1;
	}
	return 0;
}

static int
group_teardown(void **state)
{
	(void)state;
	config_unref(cf);
	return 0;
}

/*
 * Claims: a good token for every route, and one variant per stage-2 rule
 * (token_check_claims), at and just past each boundary.
 */
/* Replace the claims' audiences with aud alone. */
static void
aud_only(struct token_claims *c, const char *aud)
{
	memset(c->aud, 0, sizeof(c->aud));
	c->naud = 0;
	c->aud_len = 0;
	assert_int_equal(token_claims_add_aud(c, aud), 0);
}

enum claims_kind {
	C_NONE,       /* rv_claims NULL */
	C_GOOD,       /* the first 5 audiences, iat now-10, exp now+600 */
	C_EXP_EDGE,   /* exp = now - leeway: expired */
	C_EXP_INSIDE, /* exp = now - leeway + 1: still valid */
	C_NBF_FUTURE, /* nbf = now + leeway + 1 */
	C_NBF_EDGE,   /* nbf = now + leeway: valid */
	C_IAT_FUTURE, /* iat = now + leeway + 1 */
	C_LONG,       /* exp - iat = max_ttl_s + 1 */
	C_LONG_EDGE,  /* exp - iat = max_ttl_s: valid */
	C_LONG_NOIAT, /* no iat, exp - now = max_ttl_s + 1 */
	C_AUD_ELSE,   /* aud ["elsewhere"] */
	C_AUD_OTHER,  /* aud ["other"] only */
	C_AUD_PREFIX, /* aud ["model"]: no prefix matching */
	C_NO_ISS,     /* no iss while tokens.issuer is set */
	C_ISS_ELSE,   /* iss "someone-else" */
	C_MAXREQ10,   /* max_requests 10 */
	C_MAXREQ100,  /* max_requests 100 */
	C_AUD_SHB,    /* aud ["sh-b"] */
	C_AUD_SHC,    /* aud ["sh-c"] */
	C_AUD_SHBA,   /* aud ["sh-b", "sh-a"] */
	C_EXP_ELSE,   /* expired, aud ["elsewhere"] */
	C_AUD_ICPT,   /* aud ["icpt"] */
};

static void
make_claims(enum claims_kind k, struct token_claims *c)
{
	static const char *const auds[] = { "model-proxy", "other", "private",
		"v6", "sh-a" };
	size_t i;

	memset(c, 0, sizeof(*c));
	snprintf(c->sub, sizeof(c->sub), "run-1");
	snprintf(c->jti, sizeof(c->jti), "jti-1");
	snprintf(c->iss, sizeof(c->iss), "control-plane");
	c->has_iss = 1;
	for (i = 0; i < SL_NELEM(auds); i++)
		assert_int_equal(token_claims_add_aud(c, auds[i]), 0);
	c->iat = NOW - 10;
	c->has_iat = 1;
	c->exp = NOW + 600;
	switch (k) {
	case C_NONE:
	case C_GOOD:
		break;
	case C_EXP_EDGE:
		c->iat = NOW - 100;
		c->exp = NOW - 30;
		break;
	case C_EXP_INSIDE:
		c->iat = NOW - 100;
		c->exp = NOW - 29;
		break;
	case C_NBF_FUTURE:
		c->nbf = NOW + 31;
		c->has_nbf = 1;
		break;
	case C_NBF_EDGE:
		c->nbf = NOW + 30;
		c->has_nbf = 1;
		break;
	case C_IAT_FUTURE:
		c->iat = NOW + 31;
		c->exp = NOW + 600;
		break;
	case C_LONG:
		c->iat = NOW;
		c->exp = NOW + 3601;
		break;
	case C_LONG_EDGE:
		c->iat = NOW;
		c->exp = NOW + 3600;
		break;
	case C_LONG_NOIAT:
		c->has_iat = 0;
		c->iat = 0;
		c->exp = NOW + 3601;
		break;
	case C_AUD_ELSE:
		aud_only(c, "elsewhere");
		break;
	case C_AUD_OTHER:
		aud_only(c, "other");
		break;
	case C_AUD_PREFIX:
		aud_only(c, "model");
		break;
	case C_NO_ISS:
		c->has_iss = 0;
		c->iss[0] = '\0';
		break;
	case C_ISS_ELSE:
		snprintf(c->iss, sizeof(c->iss), "someone-else");
		break;
	case C_MAXREQ10:
		c->max_requests = 10;
		break;
	case C_MAXREQ100:
		c->max_requests = 100;
		break;
	case C_AUD_SHB:
		aud_only(c, "sh-b");
		break;
	case C_AUD_SHC:
		aud_only(c, "sh-c");
		break;
	case C_AUD_SHBA:
		aud_only(c, "sh-b");
		token_claims_add_aud(c, "sh-a");
		break;
	case C_EXP_ELSE:
		c->iat = NOW - 100;
		c->exp = NOW - 30;
		aud_only(c, "elsewhere");
		break;
	case C_AUD_ICPT:
		aud_only(c, "icpt");
		break;
	}
}

struct row {
	const char *name;
	int listener; /* index into cf_listeners, or L_NONE */
	int connect;
	const char *method;
	const char *target;
	enum reason token; /* stage 1 (carrier + signature) */
	enum claims_kind claims;
	int revoked;
	uint64_t used;
	int audit_failed;
	enum reason want;
	int want_route;      /* index into cf_routes, -1: none */
	uint64_t want_limit; /* checked when want is ok / budget_exhausted */
};

#define OK  REASON_OK
#define MV  "/v1/messages"
#define FMV "http://model-proxy.internal/v1/messages"

static const struct row rows[] = {
	/* Allowed requests: each way a route is selected. */
	{ "forward via alias", L_FWD, 0, "POST", FMV, OK, C_GOOD, 0, 0, 0, OK,
	    R_MODEL, 64 },
	{ "forward via alias, any port", L_FWD, 0, "POST",
	    "http://model-proxy.internal:8080/v1/messages", OK, C_GOOD, 0, 0, 0,
	    OK, R_MODEL, 64 },
	{ "forward via alias, https scheme", L_FWD, 0, "POST",
	    "https://model-proxy.internal/v1/messages", OK, C_GOOD, 0, 0, 0, OK,
	    R_MODEL, 64 },
	{ "forward via alias, other case", L_FWD, 0, "POST",
	    "http://MODEL-Proxy.Internal/v1/messages", OK, C_GOOD, 0, 0, 0, OK,
	    R_MODEL, 64 },
	{ "forward via upstream host on its port", L_FWD, 0, "POST",
	    "http://cp.example.com:443/v1/messages", OK, C_GOOD, 0, 0, 0, OK,
	    R_MODEL, 64 },
	{ "forward via upstream host, https default port", L_FWD, 0, "POST",
	    "https://cp.example.com/v1/messages", OK, C_GOOD, 0, 0, 0, OK,
	    R_MODEL, 64 },
	{ "forward via upstream host with explicit port", L_FWD, 0, "GET",
	    "http://up2.example.net:8443/api/x", OK, C_GOOD, 0, 0, 0, OK,
	    R_OTHER, 0 },
	{ "forward via IPv4 alias", L_FWD, 0, "GET", "http://198.18.0.7/health",
	    OK, C_GOOD, 0, 0, 0, OK, R_OTHER, 0 },
	{ "forward via IPv6 upstream on its port", L_FWD, 0, "POST",
	    "http://[2001:2::10]:9443/x", OK, C_GOOD, 0, 0, 0, OK, R_V6, 0 },
	{ "forward via IPv6 upstream, other spelling", L_FWD, 0, "POST",
	    "http://[2001:2:0:0::10]:9443/x", OK, C_GOOD, 0, 0, 0, OK, R_V6,
	    0 },
	{ "forward via IPv6 alias", L_FWD, 0, "POST", "http://[2001:2::5]/x",
	    OK, C_GOOD, 0, 0, 0, OK, R_V6, 0 },
	{ "forward on a wildcard listener", L_ANY4, 0, "POST", FMV, OK, C_GOOD,
	    0, 0, 0, OK, R_MODEL, 64 },
	{ "forward with a query", L_FWD, 0, "POST", FMV "?beta=true", OK,
	    C_GOOD, 0, 0, 0, OK, R_MODEL, 64 },
	{ "reverse", L_REV, 0, "POST", MV, OK, C_GOOD, 0, 0, 0, OK, R_MODEL,
	    64 },
	{ "reverse, second route", L_REV2, 0, "GET", "/api/v1/x?y=1", OK,
	    C_GOOD, 0, 0, 0, OK, R_OTHER, 0 },
	{ "CONNECT to upstream host:port", L_FWD, 1, "CONNECT",
	    "cp.example.com:443", OK, C_GOOD, 0, 0, 0, OK, R_MODEL, 64 },
	{ "CONNECT, host in upper case", L_FWD, 1, "CONNECT",
	    "CP.EXAMPLE.COM:443", OK, C_GOOD, 0, 0, 0, OK, R_MODEL, 64 },

	/*
	 * Absolute-form: the upstream host selects its route on any port
	 * (sluice connects to the configured upstream whatever was asked).
	 */
	{ "upstream host on another port", L_FWD, 0, "POST",
	    "http://cp.example.com:8443/v1/messages", OK, C_GOOD, 0, 0, 0, OK,
	    R_MODEL, 64 },
	{ "upstream host, http default port", L_FWD, 0, "POST",
	    "http://cp.example.com/v1/messages", OK, C_GOOD, 0, 0, 0, OK,
	    R_MODEL, 64 },
	{ "upstream host without its port", L_FWD, 0, "GET",
	    "https://up2.example.net/api/x", OK, C_GOOD, 0, 0, 0, OK, R_OTHER,
	    0 },
	{ "IPv6 upstream on another port", L_FWD, 0, "POST",
	    "http://[2001:2::10]/x", OK, C_GOOD, 0, 0, 0, OK, R_V6, 0 },
	{ "private upstream's address on another port", L_FWD, 0, "POST",
	    "http://10.1.2.3:80/", OK, C_GOOD, 0, 0, 0, OK, R_PRIVATE, 0 },

	/* Routes sharing an upstream: the token's audience picks. */
	{ "shared upstream, token for sh-a", L_FWD, 0, "POST",
	    "http://shared.example/a/x", OK, C_GOOD, 0, 0, 0, OK, R_SHA, 0 },
	{ "shared upstream, token for sh-b", L_FWD, 0, "POST",
	    "https://shared.example/b/x", OK, C_AUD_SHB, 0, 0, 0, OK, R_SHB,
	    0 },
	{ "shared upstream, sh-b's token on sh-a's path", L_FWD, 0, "POST",
	    "http://shared.example/a/x", OK, C_AUD_SHB, 0, 0, 0,
	    REASON_PATH_NOT_ALLOWED, R_SHB, 0 },
	{ "shared upstream, token for both: policy order", L_FWD, 0, "POST",
	    "http://shared.example/a", OK, C_AUD_SHBA, 0, 0, 0, OK, R_SHA, 0 },
	{ "shared upstream host on another port: sh-c", L_FWD, 0, "POST",
	    "http://SHARED.example:9/c", OK, C_AUD_SHC, 0, 0, 0, OK, R_SHC, 0 },
	{ "shared upstream, token for none", L_FWD, 0, "POST",
	    "http://shared.example/a", OK, C_AUD_ELSE, 0, 0, 0,
	    REASON_TOKEN_WRONG_AUDIENCE, -1, 0 },
	{ "shared upstream, expired token for none", L_FWD, 0, "POST",
	    "http://shared.example/a", OK, C_EXP_ELSE, 0, 0, 0,
	    REASON_TOKEN_EXPIRED, R_SHA, 0 },
	{ "shared upstream, bad signature", L_FWD, 0, "POST",
	    "http://shared.example/a", REASON_TOKEN_BAD_SIGNATURE, C_AUD_SHB, 0,
	    0, 0, REASON_TOKEN_BAD_SIGNATURE, -1, 0 },
	{ "shared upstream, revoked", L_FWD, 0, "POST",
	    "http://shared.example/b", OK, C_AUD_SHB, 1, 0, 0,
	    REASON_TOKEN_REVOKED, R_SHB, 0 },
	{ "CONNECT to a shared upstream, sh-b", L_FWD, 1, "CONNECT",
	    "shared.example:443", OK, C_AUD_SHB, 0, 0, 0, OK, R_SHB, 0 },
	{ "CONNECT to a shared upstream, sh-a", L_FWD, 1, "CONNECT",
	    "shared.example:443", OK, C_GOOD, 0, 0, 0, OK, R_SHA, 0 },
	{ "CONNECT to a shared upstream, sh-c's port", L_FWD, 1, "CONNECT",
	    "shared.example:8443", OK, C_AUD_SHC, 0, 0, 0, OK, R_SHC, 0 },
	{ "CONNECT on port 443 is not sh-c's", L_FWD, 1, "CONNECT",
	    "shared.example:443", OK, C_AUD_SHC, 0, 0, 0,
	    REASON_TOKEN_WRONG_AUDIENCE, -1, 0 },
	{ "CONNECT on port 8443 is sh-c's alone", L_FWD, 1, "CONNECT",
	    "shared.example:8443", OK, C_AUD_SHB, 0, 0, 0,
	    REASON_TOKEN_WRONG_AUDIENCE, R_SHC, 0 },
	{ "CONNECT to a shared upstream on another port", L_FWD, 1, "CONNECT",
	    "shared.example:80", OK, C_AUD_SHB, 0, 0, 0, REASON_ROUTE_NOT_FOUND,
	    -1, 0 },
	{ "reverse listener keeps its route", L_REV3, 0, "POST", "/b/x", OK,
	    C_AUD_SHBA, 0, 0, 0, OK, R_SHB, 0 },
	{ "reverse listener, a sharing route's token", L_REV3, 0, "POST",
	    "/b/x", OK, C_GOOD, 0, 0, 0, REASON_TOKEN_WRONG_AUDIENCE, R_SHB,
	    0 },

	/* audit_unavailable comes first: nothing goes out unrecorded. */
	{ "audit failed", L_FWD, 0, "POST", FMV, OK, C_GOOD, 0, 0, 1,
	    REASON_AUDIT_UNAVAILABLE, -1, 0 },
	{ "audit failed, no token", L_FWD, 0, "POST", FMV, REASON_TOKEN_MISSING,
	    C_NONE, 0, 0, 1, REASON_AUDIT_UNAVAILABLE, -1, 0 },
	{ "audit failed, CONNECT", L_FWD, 1, "CONNECT", "cp.example.com:443",
	    OK, C_GOOD, 0, 0, 1, REASON_AUDIT_UNAVAILABLE, -1, 0 },

	/* Stage 1 results pass through; routes stay unknown. */
	{ "token_missing", L_FWD, 0, "POST", FMV, REASON_TOKEN_MISSING, C_NONE,
	    0, 0, 0, REASON_TOKEN_MISSING, -1, 0 },
	{ "token_missing, unknown host", L_FWD, 0, "POST",
	    "http://evil.example/", REASON_TOKEN_MISSING, C_NONE, 0, 0, 0,
	    REASON_TOKEN_MISSING, -1, 0 },
	{ "token_missing, reverse", L_REV, 0, "POST", MV, REASON_TOKEN_MISSING,
	    C_NONE, 0, 0, 0, REASON_TOKEN_MISSING, -1, 0 },
	{ "token_missing, CONNECT", L_FWD, 1, "CONNECT", "cp.example.com:443",
	    REASON_TOKEN_MISSING, C_NONE, 0, 0, 0, REASON_TOKEN_MISSING, -1,
	    0 },
	{ "token_malformed", L_FWD, 0, "POST", FMV, REASON_TOKEN_MALFORMED,
	    C_NONE, 0, 0, 0, REASON_TOKEN_MALFORMED, -1, 0 },
	{ "token_unsupported_alg", L_FWD, 0, "POST", FMV,
	    REASON_TOKEN_UNSUPPORTED_ALG, C_NONE, 0, 0, 0,
	    REASON_TOKEN_UNSUPPORTED_ALG, -1, 0 },
	{ "token_unknown_kid", L_FWD, 0, "POST", FMV, REASON_TOKEN_UNKNOWN_KID,
	    C_NONE, 0, 0, 0, REASON_TOKEN_UNKNOWN_KID, -1, 0 },
	{ "token_bad_signature", L_FWD, 0, "POST", FMV,
	    REASON_TOKEN_BAD_SIGNATURE, C_NONE, 0, 0, 0,
	    REASON_TOKEN_BAD_SIGNATURE, -1, 0 },
	{ "stage 1 ok but no claims", L_FWD, 0, "POST", FMV, OK, C_NONE, 0, 0,
	    0, REASON_TOKEN_MALFORMED, -1, 0 },
	{ "bad signature even with claims", L_FWD, 0, "POST", FMV,
	    REASON_TOKEN_BAD_SIGNATURE, C_GOOD, 0, 0, 0,
	    REASON_TOKEN_BAD_SIGNATURE, -1, 0 },

	/* Stage 2 (token_check_claims) against the selected route. */
	{ "token_expired at exp + leeway", L_FWD, 0, "POST", FMV, OK,
	    C_EXP_EDGE, 0, 0, 0, REASON_TOKEN_EXPIRED, R_MODEL, 0 },
	{ "inside the leeway", L_FWD, 0, "POST", FMV, OK, C_EXP_INSIDE, 0, 0, 0,
	    OK, R_MODEL, 64 },
	{ "token_not_yet_valid (nbf)", L_FWD, 0, "POST", FMV, OK, C_NBF_FUTURE,
	    0, 0, 0, REASON_TOKEN_NOT_YET_VALID, R_MODEL, 0 },
	{ "nbf at now + leeway", L_FWD, 0, "POST", FMV, OK, C_NBF_EDGE, 0, 0, 0,
	    OK, R_MODEL, 64 },
	{ "token_not_yet_valid (iat)", L_REV, 0, "POST", MV, OK, C_IAT_FUTURE,
	    0, 0, 0, REASON_TOKEN_NOT_YET_VALID, R_MODEL, 0 },
	{ "token_lifetime_too_long", L_FWD, 0, "POST", FMV, OK, C_LONG, 0, 0, 0,
	    REASON_TOKEN_LIFETIME_TOO_LONG, R_MODEL, 0 },
	{ "lifetime of exactly max_ttl_s", L_FWD, 0, "POST", FMV, OK,
	    C_LONG_EDGE, 0, 0, 0, OK, R_MODEL, 64 },
	{ "token_lifetime_too_long without iat", L_FWD, 1, "CONNECT",
	    "cp.example.com:443", OK, C_LONG_NOIAT, 0, 0, 0,
	    REASON_TOKEN_LIFETIME_TOO_LONG, R_MODEL, 0 },
	{ "token_wrong_audience", L_FWD, 0, "POST", FMV, OK, C_AUD_ELSE, 0, 0,
	    0, REASON_TOKEN_WRONG_AUDIENCE, R_MODEL, 0 },
	{ "token_wrong_audience: another route's", L_REV, 0, "POST", MV, OK,
	    C_AUD_OTHER, 0, 0, 0, REASON_TOKEN_WRONG_AUDIENCE, R_MODEL, 0 },
	{ "token_wrong_audience: a prefix", L_FWD, 0, "POST", FMV, OK,
	    C_AUD_PREFIX, 0, 0, 0, REASON_TOKEN_WRONG_AUDIENCE, R_MODEL, 0 },
	{ "the audience of the other route", L_REV2, 0, "GET", "/api/x", OK,
	    C_AUD_OTHER, 0, 0, 0, OK, R_OTHER, 0 },
	{ "token_wrong_issuer: none", L_FWD, 0, "POST", FMV, OK, C_NO_ISS, 0, 0,
	    0, REASON_TOKEN_WRONG_ISSUER, R_MODEL, 0 },
	{ "token_wrong_issuer: another", L_FWD, 0, "POST", FMV, OK, C_ISS_ELSE,
	    0, 0, 0, REASON_TOKEN_WRONG_ISSUER, R_MODEL, 0 },

	/* Revocation and budget. */
	{ "token_revoked", L_FWD, 0, "POST", FMV, OK, C_GOOD, 1, 0, 0,
	    REASON_TOKEN_REVOKED, R_MODEL, 0 },
	{ "token_revoked, CONNECT", L_FWD, 1, "CONNECT", "cp.example.com:443",
	    OK, C_GOOD, 1, 0, 0, REASON_TOKEN_REVOKED, R_MODEL, 0 },
	{ "route limit, one left", L_FWD, 0, "POST", FMV, OK, C_GOOD, 0, 63, 0,
	    OK, R_MODEL, 64 },
	{ "budget_exhausted at the route limit", L_FWD, 0, "POST", FMV, OK,
	    C_GOOD, 0, 64, 0, REASON_BUDGET_EXHAUSTED, R_MODEL, 64 },
	{ "budget_exhausted past the limit", L_REV, 0, "POST", MV, OK, C_GOOD,
	    0, 1000, 0, REASON_BUDGET_EXHAUSTED, R_MODEL, 64 },
	{ "claim lowers the limit", L_FWD, 0, "POST", FMV, OK, C_MAXREQ10, 0, 9,
	    0, OK, R_MODEL, 10 },
	{ "budget_exhausted at the claim limit", L_FWD, 0, "POST", FMV, OK,
	    C_MAXREQ10, 0, 10, 0, REASON_BUDGET_EXHAUSTED, R_MODEL, 10 },
	{ "claim above the route limit", L_FWD, 0, "POST", FMV, OK, C_MAXREQ100,
	    0, 64, 0, REASON_BUDGET_EXHAUSTED, R_MODEL, 64 },
	{ "claim limit on a route without one", L_REV2, 0, "GET", "/api/x", OK,
	    C_MAXREQ10, 0, 10, 0, REASON_BUDGET_EXHAUSTED, R_OTHER, 10 },
	{ "no limit at all", L_REV2, 0, "GET", "/api/x", OK, C_GOOD, 0, 1000000,
	    0, OK, R_OTHER, 0 },
	{ "budget_exhausted, CONNECT", L_FWD, 1, "CONNECT",
	    "cp.example.com:443", OK, C_GOOD, 0, 64, 0, REASON_BUDGET_EXHAUSTED,
	    R_MODEL, 64 },

	/* route_not_found: the target selects no route. */
	{ "unknown host", L_FWD, 0, "POST", "http://evil.example/v1/messages",
	    OK, C_GOOD, 0, 0, 0, REASON_ROUTE_NOT_FOUND, -1, 0 },
	{ "alias with a suffix", L_FWD, 0, "POST",
	    "http://model-proxy.internal.evil.example/v1/messages", OK, C_GOOD,
	    0, 0, 0, REASON_ROUTE_NOT_FOUND, -1, 0 },
	{ "CONNECT to an alias", L_FWD, 1, "CONNECT",
	    "model-proxy.internal:443", OK, C_GOOD, 0, 0, 0,
	    REASON_ROUTE_NOT_FOUND, -1, 0 },
	{ "CONNECT to an IPv6 alias", L_FWD, 1, "CONNECT", "[2001:2::5]:9443",
	    OK, C_GOOD, 0, 0, 0, REASON_ROUTE_NOT_FOUND, -1, 0 },
	{ "CONNECT to the upstream host on another port", L_FWD, 1, "CONNECT",
	    "cp.example.com:8443", OK, C_GOOD, 0, 0, 0, REASON_ROUTE_NOT_FOUND,
	    -1, 0 },
	{ "CONNECT to an unknown host", L_FWD, 1, "CONNECT", "evil.example:443",
	    OK, C_GOOD, 0, 0, 0, REASON_ROUTE_NOT_FOUND, -1, 0 },

	/*
	 * An intercepting route: CONNECT on its connect.ports, to its host
	 * or an alias, with no token needed and nothing charged (each inner
	 * request is decided and charged on its own).
	 */
	{ "intercept: CONNECT without a token", L_FWD, 1, "CONNECT",
	    "icpt.example:443", REASON_TOKEN_MISSING, C_NONE, 0, 0, 0, OK,
	    R_ICPT, 0 },
	{ "intercept: CONNECT to an alias on another listed port", L_FWD, 1,
	    "CONNECT", "alias.icpt.test:80", REASON_TOKEN_MISSING, C_NONE, 0, 0,
	    0, OK, R_ICPT, 0 },
	{ "intercept: CONNECT with a token is not charged", L_FWD, 1, "CONNECT",
	    "icpt.example:443", OK, C_AUD_ICPT, 0, 4, 0, OK, R_ICPT, 0 },
	{ "intercept: CONNECT on a port not listed", L_FWD, 1, "CONNECT",
	    "icpt.example:8443", REASON_TOKEN_MISSING, C_NONE, 0, 0, 0,
	    REASON_TOKEN_MISSING, -1, 0 },
	{ "intercept: a bad token is still refused", L_FWD, 1, "CONNECT",
	    "icpt.example:443", REASON_TOKEN_BAD_SIGNATURE, C_NONE, 0, 0, 0,
	    REASON_TOKEN_BAD_SIGNATURE, -1, 0 },
	{ "intercept: a revoked token is refused", L_FWD, 1, "CONNECT",
	    "icpt.example:443", OK, C_AUD_ICPT, 1, 0, 0, REASON_TOKEN_REVOKED,
	    R_ICPT, 0 },
	{ "intercept: an inner request is charged", L_FWD, 0, "POST",
	    "https://alias.icpt.test/v1", OK, C_AUD_ICPT, 0, 4, 0, OK, R_ICPT,
	    5 },
	{ "intercept: an inner request over budget", L_FWD, 0, "POST",
	    "https://icpt.example/v1", OK, C_AUD_ICPT, 0, 5, 0,
	    REASON_BUDGET_EXHAUSTED, R_ICPT, 5 },
	{ "intercept: an inner request without a token", L_FWD, 0, "POST",
	    "https://icpt.example/v1", REASON_TOKEN_MISSING, C_NONE, 0, 0, 0,
	    REASON_TOKEN_MISSING, -1, 0 },
	{ "intercept: audit failed, CONNECT without a token", L_FWD, 1,
	    "CONNECT", "icpt.example:443", REASON_TOKEN_MISSING, C_NONE, 0, 0,
	    1, REASON_AUDIT_UNAVAILABLE, -1, 0 },

	/* method_not_allowed, CONNECT included. */
	{ "GET on a POST route", L_FWD, 0, "GET", FMV, OK, C_GOOD, 0, 0, 0,
	    REASON_METHOD_NOT_ALLOWED, R_MODEL, 0 },
	{ "method in lower case", L_REV, 0, "post", MV, OK, C_GOOD, 0, 0, 0,
	    REASON_METHOD_NOT_ALLOWED, R_MODEL, 0 },
	{ "method with a suffix", L_FWD, 0, "POSTX", FMV, OK, C_GOOD, 0, 0, 0,
	    REASON_METHOD_NOT_ALLOWED, R_MODEL, 0 },
	{ "method prefix", L_FWD, 0, "POS", FMV, OK, C_GOOD, 0, 0, 0,
	    REASON_METHOD_NOT_ALLOWED, R_MODEL, 0 },
	{ "DELETE on the other route", L_REV2, 0, "DELETE", "/api/x", OK,
	    C_GOOD, 0, 0, 0, REASON_METHOD_NOT_ALLOWED, R_OTHER, 0 },
	{ "CONNECT with connect disabled", L_FWD, 1, "CONNECT",
	    "up2.example.net:8443", OK, C_GOOD, 0, 0, 0,
	    REASON_METHOD_NOT_ALLOWED, R_OTHER, 0 },
	{ "CONNECT to IPv6 upstream, connect disabled", L_FWD, 1, "CONNECT",
	    "[2001:2::10]:9443", OK, C_GOOD, 0, 0, 0, REASON_METHOD_NOT_ALLOWED,
	    R_V6, 0 },

	/* path_not_allowed: prefixes at a segment boundary, no ambiguity. */
	{ "prefix itself", L_FWD, 0, "POST", FMV, OK, C_GOOD, 0, 0, 0, OK,
	    R_MODEL, 64 },
	{ "prefix and /", L_FWD, 0, "POST", FMV "/", OK, C_GOOD, 0, 0, 0, OK,
	    R_MODEL, 64 },
	{ "under the prefix", L_FWD, 0, "POST", FMV "/count_tokens", OK, C_GOOD,
	    0, 0, 0, OK, R_MODEL, 64 },
	{ "%20 passes", L_REV, 0, "POST", MV "/a%20b", OK, C_GOOD, 0, 0, 0, OK,
	    R_MODEL, 64 },
	{ "prefix without a boundary", L_FWD, 0, "POST", FMV "X", OK, C_GOOD, 0,
	    0, 0, REASON_PATH_NOT_ALLOWED, R_MODEL, 0 },
	{ "prefix without a boundary, reverse", L_REV, 0, "POST",
	    "/v1/messagesX", OK, C_GOOD, 0, 0, 0, REASON_PATH_NOT_ALLOWED,
	    R_MODEL, 0 },
	{ "outside the prefixes", L_FWD, 0, "POST",
	    "http://model-proxy.internal/admin", OK, C_GOOD, 0, 0, 0,
	    REASON_PATH_NOT_ALLOWED, R_MODEL, 0 },
	{ "root outside the prefixes", L_REV, 0, "POST", "/", OK, C_GOOD, 0, 0,
	    0, REASON_PATH_NOT_ALLOWED, R_MODEL, 0 },
	{ "parent of the prefix", L_REV, 0, "POST", "/v1", OK, C_GOOD, 0, 0, 0,
	    REASON_PATH_NOT_ALLOWED, R_MODEL, 0 },
	{ "case differs", L_REV, 0, "POST", "/V1/messages", OK, C_GOOD, 0, 0, 0,
	    REASON_PATH_NOT_ALLOWED, R_MODEL, 0 },
	{ "..", L_FWD, 0, "POST", FMV "/../../admin", OK, C_GOOD, 0, 0, 0,
	    REASON_PATH_NOT_ALLOWED, R_MODEL, 0 },
	{ ".. at the end", L_REV, 0, "POST", MV "/..", OK, C_GOOD, 0, 0, 0,
	    REASON_PATH_NOT_ALLOWED, R_MODEL, 0 },
	{ ".", L_REV, 0, "POST", MV "/./x", OK, C_GOOD, 0, 0, 0,
	    REASON_PATH_NOT_ALLOWED, R_MODEL, 0 },
	{ "%2e%2e", L_REV, 0, "POST", MV "/%2e%2e/admin", OK, C_GOOD, 0, 0, 0,
	    REASON_PATH_NOT_ALLOWED, R_MODEL, 0 },
	{ "%2E", L_FWD, 0, "POST", FMV "/%2E%2E/admin", OK, C_GOOD, 0, 0, 0,
	    REASON_PATH_NOT_ALLOWED, R_MODEL, 0 },
	{ "%6D for m", L_REV, 0, "POST", "/v1/%6Dessages", OK, C_GOOD, 0, 0, 0,
	    REASON_PATH_NOT_ALLOWED, R_MODEL, 0 },
	{ "%2F", L_REV, 0, "POST", MV "%2Fx", OK, C_GOOD, 0, 0, 0,
	    REASON_PATH_NOT_ALLOWED, R_MODEL, 0 },
	{ "//", L_REV, 0, "POST", "/v1//messages", OK, C_GOOD, 0, 0, 0,
	    REASON_PATH_NOT_ALLOWED, R_MODEL, 0 },
	{ "// under the prefix", L_FWD, 0, "POST", FMV "//x", OK, C_GOOD, 0, 0,
	    0, REASON_PATH_NOT_ALLOWED, R_MODEL, 0 },
	{ "backslash", L_REV, 0, "POST", MV "\\..\\x", OK, C_GOOD, 0, 0, 0,
	    REASON_PATH_NOT_ALLOWED, R_MODEL, 0 },
	{ "%00", L_REV, 0, "POST", MV "/%00", OK, C_GOOD, 0, 0, 0,
	    REASON_PATH_NOT_ALLOWED, R_MODEL, 0 },
	{ "prefix ending in / needs the /", L_REV2, 0, "GET", "/api", OK,
	    C_GOOD, 0, 0, 0, REASON_PATH_NOT_ALLOWED, R_OTHER, 0 },
	{ "second prefix", L_REV2, 0, "GET", "/health/live", OK, C_GOOD, 0, 0,
	    0, OK, R_OTHER, 0 },
	{ "second prefix without a boundary", L_REV2, 0, "GET", "/healthz", OK,
	    C_GOOD, 0, 0, 0, REASON_PATH_NOT_ALLOWED, R_OTHER, 0 },

	/* bad_request: the target's form does not fit the listener. */
	{ "reverse with absolute-form", L_REV, 0, "POST", FMV, OK, C_GOOD, 0, 0,
	    0, REASON_BAD_REQUEST, -1, 0 },
	{ "reverse with CONNECT", L_REV, 1, "CONNECT", "cp.example.com:443", OK,
	    C_GOOD, 0, 0, 0, REASON_BAD_REQUEST, -1, 0 },
	{ "reverse with asterisk-form", L_REV, 0, "OPTIONS", "*", OK, C_GOOD, 0,
	    0, 0, REASON_BAD_REQUEST, -1, 0 },
	{ "forward with origin-form", L_FWD, 0, "POST", MV, OK, C_GOOD, 0, 0, 0,
	    REASON_BAD_REQUEST, -1, 0 },
	{ "forward with asterisk-form", L_FWD, 0, "OPTIONS", "*", OK, C_GOOD, 0,
	    0, 0, REASON_BAD_REQUEST, -1, 0 },
	{ "CONNECT flag with absolute-form", L_FWD, 1, "CONNECT", FMV, OK,
	    C_GOOD, 0, 0, 0, REASON_BAD_REQUEST, -1, 0 },
	{ "no listener", L_NONE, 0, "POST", FMV, OK, C_GOOD, 0, 0, 0,
	    REASON_BAD_REQUEST, -1, 0 },
};

static void
test_decide(void **state)
{
	size_t i, nbad = 0;
	int seen[REASON__COUNT] = { 0 };

	(void)state;
	for (i = 0; i < SL_NELEM(rows); i++) {
		const struct row *r = &rows[i];
		struct token_claims claims;
		struct req_view v;
		struct decision d;
		struct uri u;
		const char *why = "?";
		const struct route *want_rt;
		enum reason got;
		int bad = 0;

		memset(&u, 0, sizeof(u));
		if (uri_parse_target(r->target, strlen(r->target),
			r->connect && strchr(r->target, '/') == NULL, &u,
			&why) == -1) {
			print_error("%s: target \"%s\" does not parse: %s\n",
			    r->name, r->target, why);
			nbad++;
			continue;
		}
		make_claims(r->claims, &claims);
		memset(&v, 0, sizeof(v));
		v.rv_listener = r->listener == L_NONE ?
		    NULL :
		    &cf->cf_listeners[r->listener];
		v.rv_connect = r->connect;
		v.rv_method = r->method;
		v.rv_method_len = strlen(r->method);
		v.rv_uri = &u;
		v.rv_token = r->token;
		v.rv_claims = r->claims == C_NONE ? NULL : &claims;
		v.rv_revoked = r->revoked;
		v.rv_budget_used = r->used;
		v.rv_audit_failed = r->audit_failed;
		/* A decision starts from deny whatever out held before. */
		memset(&d, 0x5a, sizeof(d));
		d.de_reason = REASON_OK;
		got = policy_decide(cf, &v, NOW, &d);
		want_rt =
		    r->want_route < 0 ? NULL : &cf->cf_routes[r->want_route];
		if (got != r->want || d.de_reason != got)
			bad = 1;
		if (d.de_route != want_rt)
			bad = 1;
		if ((r->want == REASON_OK ||
			r->want == REASON_BUDGET_EXHAUSTED) &&
		    d.de_budget_limit != r->want_limit)
			bad = 1;
		if (bad) {
			print_error("%s: want %s route %s limit %llu; "
				    "got %s (out %s) route %s limit %llu\n",
			    r->name, reason_name(r->want),
			    want_rt != NULL ? want_rt->rt_audience : "-",
			    (unsigned long long)r->want_limit, reason_name(got),
			    reason_name(d.de_reason),
			    d.de_route != NULL ? d.de_route->rt_audience : "-",
			    (unsigned long long)d.de_budget_limit);
			nbad++;
		}
		seen[r->want] = 1;
	}
	/*
	 * STYLE.md §6: at least one row per reason code policy_decide() can
	 * return. The others come from the HTTP engine, upstream.c,
	 * policy_check_addr() and the listener.
	 */
	for (i = 0; i < REASON__COUNT; i++) {
		switch (i) {
		case REASON_DESTINATION_DENIED:
		case REASON_HEADERS_TOO_LARGE:
		case REASON_BODY_TOO_LARGE:
		case REASON_UPSTREAM_UNREACHABLE:
		case REASON_UPSTREAM_TLS_ERROR:
		case REASON_UPSTREAM_TIMEOUT:
		case REASON_UPSTREAM_BAD_RESPONSE:
		case REASON_TOO_MANY_CONNECTIONS:
		case REASON_RATE_LIMITED:
		case REASON_CLIENT_CLOSED: /* how an exchange ended */
		case REASON_DRAIN_TIMEOUT:
		case REASON_INTERNAL_ERROR:
		case REASON_CLIENT_TLS_ERROR: /* a tunnel's handshake */
		/* Gateway identity: test_sandboxes.c, test_decide_binding. */
		case REASON_TOKEN_WRONG_SANDBOX:
		case REASON_SANDBOX_UNKNOWN:
			continue;
		default:
			break;
		}
		if (!seen[i]) {
			print_error("no row for %s\n",
			    reason_name((enum reason)i));
			nbad++;
		}
	}
	if (nbad != 0)
		fail_msg("%zu of %zu decision rows failed", nbad,
		    SL_NELEM(rows));
}

/* The decision is pure: the same view decides the same way again. */
static void
test_decide_repeatable(void **state)
{
	struct token_claims c;
	struct req_view v;
	struct decision d1, d2;
	struct uri u;
	const char *why;

	(void)state;
	make_claims(C_GOOD, &c);
	assert_int_equal(uri_parse_target(FMV, strlen(FMV), 0, &u, &why), 0);
	memset(&v, 0, sizeof(v));
	v.rv_listener = &cf->cf_listeners[L_FWD];
	v.rv_method = "POST";
	v.rv_method_len = 4;
	v.rv_uri = &u;
	v.rv_token = REASON_OK;
	v.rv_claims = &c;
	assert_int_equal(policy_decide(cf, &v, NOW, &d1), REASON_OK);
	assert_int_equal(policy_decide(cf, &v, NOW, &d2), REASON_OK);
	assert_memory_equal(&d1, &d2, sizeof(d1));
	/* The same token an hour later has expired. */
	assert_int_equal(policy_decide(cf, &v, NOW + 3600, &d2),
	    REASON_TOKEN_EXPIRED);
	/* No URI at all denies. */
	v.rv_uri = NULL;
	assert_int_not_equal(policy_decide(cf, &v, NOW, &d2), REASON_OK);
	assert_int_equal(d2.de_reason, REASON_BAD_REQUEST);
}

/* min(claim, route), where 0 means "no limit" on either side. */
static void
test_budget_limit(void **state)
{
	static const struct {
		uint64_t route, claim, want;
	} rows_[] = {
		{ 0, 0, 0 },
		{ 64, 0, 64 },
		{ 0, 10, 10 },
		{ 64, 10, 10 },
		{ 10, 64, 10 },
		{ 7, 7, 7 },
		{ 1, UINT64_MAX, 1 },
		{ UINT64_MAX, 0, UINT64_MAX },
	};
	struct route rt;
	struct token_claims c;
	size_t i;

	(void)state;
	for (i = 0; i < SL_NELEM(rows_); i++) {
		memset(&rt, 0, sizeof(rt));
		memset(&c, 0, sizeof(c));
		rt.rt_max_requests = rows_[i].route;
		c.max_requests = rows_[i].claim;
		assert_int_equal(policy_budget_limit(&rt, &c), rows_[i].want);
	}
}

/* policy_route_for() by itself, for the cases the table cannot build. */
static void
test_route_for(void **state)
{
	struct uri u;
	const char *why;

	(void)state;
	assert_null(policy_route_for(cf, NULL, 0));
	assert_int_equal(uri_parse_target(MV, strlen(MV), 0, &u, &why), 0);
	assert_null(policy_route_for(cf, &u, 0)); /* origin-form: no host */
	assert_int_equal(uri_parse_target(FMV, strlen(FMV), 0, &u, &why), 0);
	assert_ptr_equal(policy_route_for(cf, &u, 0), &cf->cf_routes[R_MODEL]);
	assert_int_equal(uri_parse_target("cp.example.com:443", 18, 1, &u,
			     &why),
	    0);
	assert_ptr_equal(policy_route_for(cf, &u, 1), &cf->cf_routes[R_MODEL]);
	assert_int_equal(uri_parse_target("model-proxy.internal:443", 24, 1, &u,
			     &why),
	    0);
	assert_null(policy_route_for(cf, &u, 1));
}

static void
sa_from(const char *ip, uint16_t port, struct sockaddr_storage *ss)
{
	struct sockaddr_in *sin = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof(*ss));
	if (inet_pton(AF_INET, ip, &sin->sin_addr) == 1) {
		sin->sin_family = AF_INET;
		sin->sin_port = htons(port);
		return;
	}
	if (inet_pton(AF_INET6, ip, &sin6->sin6_addr) == 1) {
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(port);
		return;
	}
	fail_msg("bad address %s", ip);
}

/*
 * DESIGN.md "Denied destinations": the first and last address of every
 * range, the neighbours just outside, the IPv4 embedded in ::ffff:0:0/96,
 * 64:ff9b::/96, 64:ff9b:1::/48, ::/96 and 2002::/16, and the benchmarking
 * ranges the tests use.
 */
static void
test_addr_private(void **state)
{
	static const struct {
		const char *ip;
		int want;
	} rows_[] = {
		/* 0.0.0.0/8 */
		{ "0.0.0.0", 1 }, { "0.255.255.255", 1 }, { "1.0.0.0", 0 },
		/* 10/8 */
		{ "9.255.255.255", 0 }, { "10.0.0.0", 1 },
		{ "10.255.255.255", 1 }, { "11.0.0.0", 0 },
		/* 100.64/10 */
		{ "100.63.255.255", 0 }, { "100.64.0.0", 1 },
		{ "100.127.255.255", 1 }, { "100.128.0.0", 0 },
		/* 127/8 */
		{ "126.255.255.255", 0 }, { "127.0.0.0", 1 },
		{ "127.0.0.1", 1 }, { "127.255.255.255", 1 },
		{ "128.0.0.0", 0 },
		/* 169.254/16 */
		{ "169.253.255.255", 0 }, { "169.254.0.0", 1 },
		{ "169.254.169.254", 1 }, { "169.254.255.255", 1 },
		{ "169.255.0.0", 0 },
		/* 172.16/12 */
		{ "172.15.255.255", 0 }, { "172.16.0.0", 1 },
		{ "172.31.255.255", 1 }, { "172.32.0.0", 0 },
		/* 192.0.0.0/24 */
		{ "191.255.255.255", 0 }, { "192.0.0.0", 1 },
		{ "192.0.0.255", 1 }, { "192.0.1.0", 0 },
		/* 192.168/16 */
		{ "192.167.255.255", 0 }, { "192.168.0.0", 1 },
		{ "192.168.255.255", 1 }, { "192.169.0.0", 0 },
		/* 224/4 and 240/4 */
		{ "223.255.255.255", 0 }, { "224.0.0.0", 1 },
		{ "239.255.255.255", 1 }, { "240.0.0.0", 1 },
		{ "255.255.255.255", 1 },
		/* Not in the list. */
		{ "8.8.8.8", 0 }, { "198.18.0.1", 0 }, { "198.19.255.255", 0 },
		{ "192.0.2.1", 0 },

		/* ::/128 and ::1/128 */
		{ "::", 1 }, { "::1", 1 },
		/* fc00::/7 */
		{ "fc00::", 1 },
		{ "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 1 },
		{ "fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 0 },
		/* fe80::/10 */
		{ "fe80::", 1 },
		{ "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 1 },
		{ "fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 0 },
		/* ff00::/8 */
		{ "ff00::", 1 },
		{ "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 1 },
		{ "ff02::1", 1 },
		/* Not in the list. */
		{ "2001:2::1", 0 }, { "2001:2:0:ffff:ffff:ffff:ffff:ffff", 0 },
		{ "2606:4700::1", 0 }, { "2001:4860:4860::8888", 0 },

		/* ::ffff:0:0/96 */
		{ "::ffff:0.0.0.0", 1 }, { "::ffff:10.0.0.1", 1 },
		{ "::ffff:127.0.0.1", 1 }, { "::ffff:169.254.169.254", 1 },
		{ "::ffff:172.31.255.255", 1 }, { "::ffff:192.168.1.1", 1 },
		{ "::ffff:100.64.0.1", 1 }, { "::ffff:224.0.0.1", 1 },
		{ "::ffff:255.255.255.255", 1 }, { "::ffff:8.8.8.8", 0 },
		{ "::ffff:198.18.0.1", 0 },
		/* 64:ff9b::/96 */
		{ "64:ff9b::10.0.0.1", 1 }, { "64:ff9b::127.0.0.1", 1 },
		{ "64:ff9b::169.254.169.254", 1 }, { "64:ff9b::0.0.0.0", 1 },
		{ "64:ff9b::8.8.8.8", 0 }, { "64:ff9b::198.18.0.1", 0 },
		/*
		 * 64:ff9b:1::/48, RFC 6052 /48 layout: IPv4 in bits 48..63
		 * and 72..87 around the u-octet (bits 64..71).
		 */
		{ "64:ff9b:1:a9fe:a9:fe00::", 1 }, /* 169.254.169.254 */
		{ "64:ff9b:1:a00:0:100::", 1 },    /* 10.0.0.1 */
		{ "64:ff9b:1:7f00:0:100::", 1 },   /* 127.0.0.1 */
		{ "64:ff9b:1:6440:0:100::", 1 },   /* 100.64.0.1 */
		{ "64:ff9b:1:808:8:800::", 0 },    /* 8.8.8.8 */
		{ "64:ff9b:1:c612:0:100::", 0 },   /* 198.18.0.1 */
		{ "64:ff9b:1:808:8:800::1", 0 },   /* suffix is ignored */
		{ "64:ff9b:1:808:108:800::", 1 },  /* u-octet set: no NAT64 */
		/* The /96 form inside the /48 reads as 0.0.0.0/8. */
		{ "64:ff9b:1::a9fe:a9fe", 1 }, { "64:ff9b:1::808:808", 1 },
		{ "64:ff9b:2:a9fe:a9:fe00::", 0 }, /* outside the /48 */
		{ "64:ff9b:0:a9fe:a9:fe00::", 0 },
		/* ::/96, IPv4-compatible (deprecated) */
		{ "::a9fe:a9fe", 1 }, { "::10.0.0.1", 1 }, { "::127.0.0.1", 1 },
		{ "::0.0.0.2", 1 }, { "::8.8.8.8", 0 }, { "::198.18.0.1", 0 },
		{ "::1:a9fe:a9fe", 0 }, /* ::1:0:0/96 is not ::/96 */
		/* 2002::/16 */
		{ "2002:a00:1::", 1 },       /* 10.0.0.1 */
		{ "2002:7f00:1::1", 1 },     /* 127.0.0.1 */
		{ "2002:a9fe:a9fe::", 1 },   /* 169.254.169.254 */
		{ "2002:c0a8:101:1::1", 1 }, /* 192.168.1.1 */
		{ "2002:0:0::", 1 },         /* 0.0.0.0 */
		{ "2002:808:808::1", 0 },    /* 8.8.8.8 */
		{ "2002:c612:1::", 0 },      /* 198.18.0.1 */
	};
	struct sockaddr_storage ss;
	struct sockaddr_un sun;
	size_t i, nbad = 0;

	(void)state;
	for (i = 0; i < SL_NELEM(rows_); i++) {
		int got;

		sa_from(rows_[i].ip, 443, &ss);
		got = addr_private((struct sockaddr *)&ss) != 0;
		if (got != rows_[i].want) {
			print_error("%s: want %s, got %s\n", rows_[i].ip,
			    rows_[i].want ? "private" : "public",
			    got ? "private" : "public");
			nbad++;
		}
	}
	/* Anything that is not IPv4 or IPv6 is not a destination. */
	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	if (!addr_private((struct sockaddr *)&sun)) {
		print_error("AF_UNIX: want private\n");
		nbad++;
	}
	if (nbad != 0)
		fail_msg("%zu of %zu addresses misjudged", nbad,
		    SL_NELEM(rows_) + 1);
}

/* Resolved upstream addresses: private ranges and the loop guard. */
static void
test_check_addr(void **state)
{
	static const struct {
		const char *name;
		int route;
		const char *ip;
		uint16_t port;
		enum reason want;
	} rows_[] = {
		{ "public address", R_MODEL, "198.18.0.1", 443, REASON_OK },
		{ "public IPv6 address", R_MODEL, "2001:2::1", 443, REASON_OK },
		{ "private address", R_MODEL, "10.0.0.1", 443,
		    REASON_DESTINATION_DENIED },
		{ "metadata address", R_MODEL, "169.254.169.254", 80,
		    REASON_DESTINATION_DENIED },
		{ "loopback", R_MODEL, "127.0.0.1", 443,
		    REASON_DESTINATION_DENIED },
		{ "IPv4-mapped loopback", R_MODEL, "::ffff:127.0.0.1", 443,
		    REASON_DESTINATION_DENIED },
		{ "NAT64 private", R_MODEL, "64:ff9b::a00:1", 443,
		    REASON_DESTINATION_DENIED },
		{ "local-use NAT64 metadata", R_MODEL,
		    "64:ff9b:1:a9fe:a9:fe00::", 443,
		    REASON_DESTINATION_DENIED },
		{ "IPv4-compatible metadata", R_MODEL, "::a9fe:a9fe", 443,
		    REASON_DESTINATION_DENIED },
		{ "IPv6 link-local", R_MODEL, "fe80::1", 443,
		    REASON_DESTINATION_DENIED },
		{ "allow_private: private", R_PRIVATE, "10.1.2.3", 443,
		    REASON_OK },
		{ "allow_private: loopback", R_PRIVATE, "127.0.0.1", 443,
		    REASON_OK },
		{ "allow_private: IPv6 ULA", R_PRIVATE, "fd00::1", 443,
		    REASON_OK },
		/* The loop guard holds with allow_private too. */
		{ "a listener's address", R_PRIVATE, "127.0.0.1", 3128,
		    REASON_DESTINATION_DENIED },
		{ "a reverse listener's address", R_PRIVATE, "127.0.0.1", 8080,
		    REASON_DESTINATION_DENIED },
		{ "an IPv6 listener's address", R_PRIVATE, "::1", 8081,
		    REASON_DESTINATION_DENIED },
		{ "the listener's address as IPv4-mapped", R_PRIVATE,
		    "::ffff:127.0.0.1", 3128, REASON_DESTINATION_DENIED },
		{ "0.0.0.0 reaches a loopback listener", R_PRIVATE, "0.0.0.0",
		    3128, REASON_DESTINATION_DENIED },
		{ "same address, other port", R_PRIVATE, "127.0.0.1", 3129,
		    REASON_OK },
		{ "other loopback address, listener port", R_PRIVATE,
		    "127.0.0.2", 3128, REASON_OK },
		{ "wildcard IPv4 listener, private address", R_PRIVATE,
		    "10.1.2.3", 3130, REASON_DESTINATION_DENIED },
		{ "wildcard IPv4 listener, public address", R_MODEL,
		    "198.18.0.1", 3130, REASON_DESTINATION_DENIED },
		{ "wildcard IPv6 listener, public address", R_MODEL,
		    "2001:2::1", 3131, REASON_DESTINATION_DENIED },
		{ "wildcard IPv6 listener, allow_private", R_PRIVATE, "::1",
		    3131, REASON_DESTINATION_DENIED },
		{ "IPv4 on the IPv6-only wildcard's port", R_MODEL,
		    "198.18.0.1", 3131, REASON_OK },
	};
	struct sockaddr_storage ss;
	struct sockaddr_un sun;
	size_t i, nbad = 0;

	(void)state;
	for (i = 0; i < SL_NELEM(rows_); i++) {
		enum reason got;

		sa_from(rows_[i].ip, rows_[i].port, &ss);
		got = policy_check_addr(cf, &cf->cf_routes[rows_[i].route],
		    (struct sockaddr *)&ss);
		if (got != rows_[i].want) {
			print_error("%s ([%s]:%u on %s): want %s, got %s\n",
			    rows_[i].name, rows_[i].ip, rows_[i].port,
			    cf->cf_routes[rows_[i].route].rt_audience,
			    reason_name(rows_[i].want), reason_name(got));
			nbad++;
		}
	}
	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	if (policy_check_addr(cf, &cf->cf_routes[R_PRIVATE],
		(struct sockaddr *)&sun) != REASON_DESTINATION_DENIED) {
		print_error("AF_UNIX: want destination_denied\n");
		nbad++;
	}
	if (nbad != 0)
		fail_msg("%zu of %zu address checks failed", nbad,
		    SL_NELEM(rows_) + 1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_decide),
		cmocka_unit_test(test_decide_repeatable),
		cmocka_unit_test(test_budget_limit),
		cmocka_unit_test(test_route_for),
		cmocka_unit_test(test_addr_private),
		cmocka_unit_test(test_check_addr),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
