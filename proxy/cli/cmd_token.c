/*
 * "sluice token mint" and "sluice token verify" (DESIGN.md "Command line",
 * docs/tokens.md "Minting"). mint is for operators and tests: it signs
 * with the same code the vectors check (token_sign). verify runs both
 * stages of token verification with a policy's keys and rules, as the
 * daemon would, and prints the claims or the reason code. Neither prints
 * a secret; a token to verify can come on stdin so that it need not
 * appear in argv (and so in ps output).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>

#include "proxy/cli/cli.h"
#include "proxy/config/config.h"
#include "proxy/daemon/daemon.h"
#include "proxy/ops/ops.h"
#include "proxy/token/store.h"
#include "proxy/util/util.h"

#define MINT_USAGE                                                             \
	"usage: sluice token mint --key FILE --alg HS256|EdDSA --aud AUD "     \
	"--sub SUB --ttl SECONDS [--kid KID] [--iss ISS] [--max-requests N] "  \
	"[--jti JTI] [--sbx SANDBOX] [--now UNIXTIME]\n"
#define VERIFY_USAGE                                                           \
	"usage: sluice token verify -c POLICY.json [--route AUD] TOKEN|-\n"
/* Largest integer claim that every JSON reader holds exactly (2^53-1). */
#define MAX_SAFE_INT 9007199254740991LL

static int
token_usage(void)
{
	(void)fputs(MINT_USAGE, stderr);
	(void)fputs(VERIFY_USAGE, stderr);
	return SL_EXIT_USAGE;
}

int
cli_parse_int(const char *s, long long min, long long max, int64_t *out)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < min || v > max)
		return -1;
	*out = (int64_t)v;
	return 0;
}

/* The claim string rules of token.c: 1..128 bytes, no control bytes. */
static int
claim_arg_ok(const char *s)
{
	size_t n = strlen(s), i;

	if (n == 0 || n > TOKEN_MAX_STR)
		return 0;
	for (i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return 0;
	return 1;
}

/*
 * Load the signing key. Both kinds are secrets and go through
 * config_read_secret(): a regular file we could open, whoever owns it (a
 * key owned by a service account may be used by root), with no
 * group/other bits. Returns 0, or -1 after printing why.
 */
static int
mint_key(const char *file, enum token_alg alg, struct token_key *key)
{
	unsigned char *buf = NULL;
	size_t len = 0;
	char why[512];
	BIO *bio;

	if (config_read_secret(file, CONFIG_ANY_OWNER, &buf, &len, why,
		sizeof(why)) == -1) {
		fprintf(stderr, "sluice: token mint: --key: %s\n", why);
		return -1;
	}
	key->tk_alg = alg;
	if (alg == TOKEN_ALG_HS256) {
		/* A PEM key used as an HMAC secret is an operator's mix-up. */
		if (len >= 10 && memcmp(buf, "-----BEGIN", 10) == 0) {
			fprintf(stderr,
			    "sluice: token mint: --key: %s: a PEM "
			    "key, not a raw HS256 secret\n",
			    file);
			OPENSSL_clear_free(buf, len);
			return -1;
		}
		if (len < 32) {
			fprintf(stderr,
			    "sluice: token mint: --key: %s: an "
			    "HS256 secret needs at least 32 bytes\n",
			    file);
			OPENSSL_clear_free(buf, len);
			return -1;
		}
		key->tk_secret = buf;
		key->tk_secret_len = len;
		return 0;
	}
	if (len > INT32_MAX || (bio = BIO_new_mem_buf(buf, (int)len)) == NULL) {
		OPENSSL_clear_free(buf, len);
		return -1;
	}
	key->tk_pkey = PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL);
	BIO_free(bio);
	OPENSSL_clear_free(buf, len);
	if (key->tk_pkey == NULL || !EVP_PKEY_is_a(key->tk_pkey, "ED25519")) {
		ERR_clear_error();
		fprintf(stderr,
		    "sluice: token mint: --key: %s: not a PEM "
		    "Ed25519 private key\n",
		    file);
		EVP_PKEY_free(key->tk_pkey);
		key->tk_pkey = NULL;
		return -1;
	}
	return 0;
}

static void
mint_key_free(struct token_key *key)
{
	if (key->tk_secret != NULL)
		OPENSSL_clear_free(key->tk_secret, key->tk_secret_len);
	EVP_PKEY_free(key->tk_pkey);
	memset(key, 0, sizeof(*key));
}

static int
add_int(cJSON *obj, const char *name, int64_t v)
{
	char num[32];

	/* Raw, so that the digits are exactly ours (no %g rounding). */
	snprintf(num, sizeof(num), "%" PRId64, v);
	return cJSON_AddRawToObject(obj, name, num) != NULL ? 0 : -1;
}

struct mint_args {
	const char *key, *alg, *sub, *kid, *iss, *jti, *sbx;
	const char *aud[TOKEN_AUD_BYTES / 2]; /* at most: "a" and its NUL */
	size_t naud;
	int64_t ttl, max_requests, now;
	int has_ttl, has_now;
};

/* Build the header and claims JSON; NULL pointers when out of memory. */
static void
mint_json(const struct mint_args *a, const char *jti, char **hdr, char **claims)
{
	cJSON *h = cJSON_CreateObject(), *c = cJSON_CreateObject(), *arr;
	size_t i;
	int bad = h == NULL || c == NULL;

	*hdr = *claims = NULL;
	if (!bad) {
		bad |= cJSON_AddStringToObject(h, "alg", a->alg) == NULL;
		bad |= cJSON_AddStringToObject(h, "typ", "JWT") == NULL;
		if (a->kid != NULL)
			bad |=
			    cJSON_AddStringToObject(h, "kid", a->kid) == NULL;
		if (a->iss != NULL)
			bad |=
			    cJSON_AddStringToObject(c, "iss", a->iss) == NULL;
		bad |= cJSON_AddStringToObject(c, "sub", a->sub) == NULL;
		if (a->naud == 1)
			bad |= cJSON_AddStringToObject(c, "aud", a->aud[0]) ==
			    NULL;
		else if ((arr = cJSON_AddArrayToObject(c, "aud")) == NULL)
			bad = 1;
		else
			for (i = 0; i < a->naud; i++)
				bad |= !cJSON_AddItemToArray(arr,
				    cJSON_CreateString(a->aud[i]));
		bad |= add_int(c, "iat", a->now) == -1;
		bad |= add_int(c, "exp", a->now + a->ttl) == -1;
		bad |= cJSON_AddStringToObject(c, "jti", jti) == NULL;
		if (a->sbx != NULL)
			bad |=
			    cJSON_AddStringToObject(c, "sbx", a->sbx) == NULL;
		if (a->max_requests > 0)
			bad |=
			    add_int(c, "max_requests", a->max_requests) == -1;
	}
	if (!bad) {
		*hdr = cJSON_PrintUnformatted(h);
		*claims = cJSON_PrintUnformatted(c);
	}
	cJSON_Delete(h);
	cJSON_Delete(c);
}

int
cli_token_sign(const struct token_key *key, const char *sub,
    const char *const *aud, size_t naud, int64_t now, int64_t ttl,
    int64_t max_requests, char *out, size_t cap)
{
	struct mint_args a;
	unsigned char rnd[16];
	char jti[2 * sizeof(rnd) + 1], *hdr, *claims;
	size_t i;
	int rc = -1;

	memset(&a, 0, sizeof(a));
	if (naud == 0 || naud > SL_NELEM(a.aud) ||
	    RAND_bytes(rnd, sizeof(rnd)) != 1)
		return -1;
	for (i = 0; i < sizeof(rnd); i++)
		snprintf(jti + 2 * i, 3, "%02x", rnd[i]);
	a.alg = key->tk_alg == TOKEN_ALG_HS256 ? "HS256" : "EdDSA";
	a.kid = key->tk_kid[0] != '\0' ? key->tk_kid : NULL;
	a.sub = sub;
	for (i = 0; i < naud; i++)
		a.aud[i] = aud[i];
	a.naud = naud;
	a.now = now;
	a.ttl = ttl;
	a.max_requests = max_requests;
	mint_json(&a, jti, &hdr, &claims);
	if (hdr != NULL && claims != NULL &&
	    token_sign(key, hdr, strlen(hdr), claims, strlen(claims), out, cap,
		NULL) == 0)
		rc = 0;
	free(hdr);
	free(claims);
	return rc;
}

static int
mint_parse(int argc, char **argv, struct mint_args *a)
{
	static const struct option opts[] = {
		{ "key", required_argument, NULL, 'k' },
		{ "alg", required_argument, NULL, 'a' },
		{ "aud", required_argument, NULL, 'A' },
		{ "sub", required_argument, NULL, 's' },
		{ "ttl", required_argument, NULL, 't' },
		{ "kid", required_argument, NULL, 'K' },
		{ "iss", required_argument, NULL, 'i' },
		{ "max-requests", required_argument, NULL, 'm' },
		{ "jti", required_argument, NULL, 'j' },
		{ "sbx", required_argument, NULL, 'S' },
		{ "now", required_argument, NULL, 'n' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	optind = 0;
	opterr = 1;
	while ((ch = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
		switch (ch) {
		case 'k':
			a->key = optarg;
			break;
		case 'a':
			a->alg = optarg;
			break;
		case 'A':
			if (a->naud == SL_NELEM(a->aud) ||
			    !claim_arg_ok(optarg))
				return -1;
			a->aud[a->naud++] = optarg;
			break;
		case 's':
			a->sub = optarg;
			break;
		case 't':
			if (cli_parse_int(optarg, 1, MAX_SAFE_INT, &a->ttl) ==
			    -1)
				return -1;
			a->has_ttl = 1;
			break;
		case 'K':
			a->kid = optarg;
			break;
		case 'i':
			a->iss = optarg;
			break;
		case 'm':
			if (cli_parse_int(optarg, 1, MAX_SAFE_INT,
				&a->max_requests) == -1)
				return -1;
			break;
		case 'j':
			a->jti = optarg;
			break;
		case 'S':
			a->sbx = optarg;
			break;
		case 'n':
			if (cli_parse_int(optarg, 0, MAX_SAFE_INT, &a->now) ==
			    -1)
				return -1;
			a->has_now = 1;
			break;
		default:
			return -1;
		}
	}
	if (optind != argc || a->key == NULL || a->alg == NULL ||
	    a->naud == 0 || a->sub == NULL || !a->has_ttl ||
	    !claim_arg_ok(a->sub) ||
	    (a->kid != NULL && !claim_arg_ok(a->kid)) ||
	    (a->iss != NULL && !claim_arg_ok(a->iss)) ||
	    (a->jti != NULL && !claim_arg_ok(a->jti)) ||
	    (a->sbx != NULL && !claim_arg_ok(a->sbx)) ||
	    (strcmp(a->alg, "HS256") != 0 && strcmp(a->alg, "EdDSA") != 0))
		return -1;
	return 0;
}

static int
token_mint(int argc, char **argv)
{
	struct mint_args a;
	struct token_key key;
	unsigned char rnd[16];
	char jti[2 * sizeof(rnd) + 1], tok[TOKEN_MAX_LEN + 1];
	char *hdr = NULL, *claims = NULL;
	size_t i, len;
	int rc = SL_EXIT_INVALID;

	memset(&a, 0, sizeof(a));
	memset(&key, 0, sizeof(key));
	if (mint_parse(argc, argv, &a) == -1) {
		(void)fputs(MINT_USAGE, stderr);
		return SL_EXIT_USAGE;
	}
	if (!a.has_now)
		a.now = (int64_t)time(NULL);
	if (a.now > MAX_SAFE_INT - a.ttl) {
		fprintf(stderr, "sluice: token mint: --ttl: exp beyond 2^53\n");
		return SL_EXIT_USAGE;
	}
	if (a.jti == NULL) {
		if (RAND_bytes(rnd, sizeof(rnd)) != 1) {
			fprintf(stderr, "sluice: token mint: no randomness\n");
			return SL_EXIT_RUNTIME;
		}
		for (i = 0; i < sizeof(rnd); i++)
			snprintf(jti + 2 * i, 3, "%02x", rnd[i]);
	}
	if (mint_key(a.key,
		strcmp(a.alg, "HS256") == 0 ? TOKEN_ALG_HS256 : TOKEN_ALG_EDDSA,
		&key) == -1)
		return SL_EXIT_INVALID;
	mint_json(&a, a.jti != NULL ? a.jti : jti, &hdr, &claims);
	if (hdr == NULL || claims == NULL)
		fprintf(stderr, "sluice: token mint: out of memory\n");
	else if (token_sign(&key, hdr, strlen(hdr), claims, strlen(claims), tok,
		     sizeof(tok), &len) == -1)
		fprintf(stderr,
		    "sluice: token mint: signing failed or the "
		    "token would exceed %d bytes\n",
		    TOKEN_MAX_LEN);
	else {
		printf("%s\n", tok);
		rc = fflush(stdout) == 0 ? SL_EXIT_OK : SL_EXIT_RUNTIME;
	}
	OPENSSL_cleanse(tok, sizeof(tok));
	free(hdr);
	free(claims);
	mint_key_free(&key);
	return rc;
}

/*
 * Read a token from stdin: at most TOKEN_MAX_LEN bytes and one trailing
 * newline. A longer input is returned as TOKEN_MAX_LEN + 1 bytes so that
 * verification refuses it as malformed.
 */
static size_t
read_stdin_token(char *buf, size_t cap)
{
	size_t n = fread(buf, 1, cap, stdin);

	if (n > 0 && buf[n - 1] == '\n')
		n--;
	if (n > TOKEN_MAX_LEN)
		n = TOKEN_MAX_LEN + 1;
	return n;
}

static void
print_claims(const struct token_claims *c)
{
	cJSON *o = cJSON_CreateObject(), *arr;
	char *s;
	size_t i, off;

	if (o == NULL)
		return;
	cJSON_AddStringToObject(o, "sub", c->sub);
	cJSON_AddStringToObject(o, "jti", c->jti);
	if (c->has_iss)
		cJSON_AddStringToObject(o, "iss", c->iss);
	if ((arr = cJSON_AddArrayToObject(o, "aud")) != NULL)
		for (i = 0, off = 0; i < c->naud && off < c->aud_len; i++) {
			cJSON_AddItemToArray(arr,
			    cJSON_CreateString(c->aud + off));
			off += strlen(c->aud + off) + 1;
		}
	add_int(o, "exp", c->exp);
	if (c->has_iat)
		add_int(o, "iat", c->iat);
	if (c->has_nbf)
		add_int(o, "nbf", c->nbf);
	if (c->max_requests > 0)
		add_int(o, "max_requests", (int64_t)c->max_requests);
	if (c->has_sbx)
		cJSON_AddStringToObject(o, "sbx", c->sbx);
	if ((s = cJSON_PrintUnformatted(o)) != NULL)
		printf("%s\n", s);
	free(s);
	cJSON_Delete(o);
}

/*
 * Non-zero when jti is among the admin revocations the daemon keeps in
 * <state_dir>/revoked.admin, when that file can be read here (root, or the
 * policy's user); else the policy's own list is all there is to consult,
 * and a file that exists but cannot be read is said on stderr.
 */
static int
admin_revoked(const struct config *cf, const char *jti)
{
	char path[4096], why[512], **v = NULL;
	size_t n = 0, i;
	int hit;

	if (snprintf(path, sizeof(path), "%s/revoked.admin",
		cf->cf_state_dir) >= (int)sizeof(path) ||
	    access(path, F_OK) == -1)
		return 0;
	if (revocations_read_file(path, &v, &n, why, sizeof(why)) == -1) {
		fprintf(stderr,
		    "sluice token verify: admin revocations not consulted: "
		    "%s\n",
		    why);
		return 0;
	}
	hit = revocations_has(NULL, v, n, jti);
	for (i = 0; i < n; i++)
		free(v[i]);
	free(v);
	return hit;
}

static int
token_verify_cmd(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "route", required_argument, NULL, 'r' },
		{ "now", required_argument, NULL, 'n' },
		{ NULL, 0, NULL, 0 },
	};
	const char *policy = NULL, *route = NULL, *tok;
	char why[1024], buf[TOKEN_MAX_LEN + 2];
	struct token_claims claims;
	struct config *cf;
	int64_t now = (int64_t)time(NULL);
	enum reason r;
	size_t len, i;
	int ch;

	optind = 0;
	while ((ch = getopt_long(argc, argv, "+c:", opts, NULL)) != -1) {
		switch (ch) {
		case 'c':
			policy = optarg;
			break;
		case 'r':
			route = optarg;
			break;
		case 'n':
			if (cli_parse_int(optarg, 0, MAX_SAFE_INT, &now) ==
			    -1) {
				(void)fputs(VERIFY_USAGE, stderr);
				return SL_EXIT_USAGE;
			}
			break;
		default:
			(void)fputs(VERIFY_USAGE, stderr);
			return SL_EXIT_USAGE;
		}
	}
	if (policy == NULL || optind + 1 != argc) {
		(void)fputs(VERIFY_USAGE, stderr);
		return SL_EXIT_USAGE;
	}
	if ((cf = config_load(policy, NULL, why, sizeof(why))) == NULL) {
		fprintf(stderr, "%s\n", why);
		return SL_EXIT_INVALID;
	}
	if (route != NULL && config_route(cf, route) == NULL) {
		fprintf(stderr, "%s: routes: no route with audience \"%s\"\n",
		    policy, route);
		config_unref(cf);
		return SL_EXIT_INVALID;
	}
	if (strcmp(argv[optind], "-") == 0) {
		len = read_stdin_token(buf, sizeof(buf));
		tok = buf;
	} else {
		tok = argv[optind];
		len = strlen(tok);
	}
	r = token_verify_sig(cf->cf_tokens.tc_keys, cf->cf_tokens.tc_nkeys, tok,
	    len, &claims);
	if (r == REASON_OK && route != NULL)
		r = token_check_claims(&claims, &cf->cf_tokens.tc_rules, route,
		    now);
	else if (r == REASON_OK) {
		/* Any route's audience will do; without routes none does. */
		r = REASON_TOKEN_WRONG_AUDIENCE;
		for (i = 0; i < cf->cf_nroutes && r != REASON_OK; i++)
			r = token_check_claims(&claims, &cf->cf_tokens.tc_rules,
			    cf->cf_routes[i].rt_audience, now);
	}
	if (r == REASON_OK &&
	    (revocations_has(NULL, cf->cf_revoked, cf->cf_nrevoked,
		 claims.jti) ||
		admin_revoked(cf, claims.jti)))
		r = REASON_TOKEN_REVOKED;
	OPENSSL_cleanse(buf, sizeof(buf));
	config_unref(cf);
	if (r != REASON_OK) {
		printf("%s\n", reason_name(r));
		return SL_EXIT_INVALID;
	}
	print_claims(&claims);
	return fflush(stdout) == 0 ? SL_EXIT_OK : SL_EXIT_RUNTIME;
}

/*
 * "sluice token mint|verify ...": argv[0] is "token". Returns an exit
 * code: 0 ok, 1 invalid token or input, 2 usage, 3 runtime failure.
 */
int
cmd_token(int argc, char **argv)
{
	if (argc < 2)
		return token_usage();
	if (strcmp(argv[1], "mint") == 0)
		return token_mint(argc - 1, argv + 1);
	if (strcmp(argv[1], "verify") == 0)
		return token_verify_cmd(argc - 1, argv + 1);
	return token_usage();
}
