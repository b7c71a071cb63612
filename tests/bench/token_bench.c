/*
 * Per-request cost of run-token checks (issue 3 "Benchmarks"): the cached
 * path an agent loop takes on every request (carrier + cache hit + stage
 * 2 + revocation lookup, and the budget charge), and first-use
 * verification of an HS256 and an Ed25519 token (stage 1 alone, and
 * through the cache as a miss). Prints the median of batches, in
 * microseconds per operation. Not a test: nothing here can fail.
 *
 * Not part of the build. From the repository root, with the proxy
 * library built into build/bench (-DCMAKE_BUILD_TYPE=Release):
 *   cc -std=c11 -O2 -D_GNU_SOURCE -I. -I/usr/include/cjson \
 *       tests/bench/token_bench.c build/bench/proxy/libsluice_proxy.a \
 *       build/bench/netpolicy/libsluice_netpolicy.a \
 *       build/bench/certs/libsluice_certs.a -lcjson -lssl -lcrypto \
 *       -levent_core -levent_extra -levent_openssl -lnftnl -lmnl \
 *       -o /tmp/token_bench && /tmp/token_bench
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "proxy/proxy.h"

#define NOW     1700000000LL
#define BATCH   200
#define BATCHES 101

static double
now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

typedef void bench_fn(void *arg, int i);

/* Median over BATCHES batches of BATCH calls, per call. */
static double
median(bench_fn *fn, void *arg)
{
	double t[BATCHES], t0;
	int b, i, n = 0;

	for (i = 0; i < BATCH; i++) /* warm up */
		fn(arg, n++);
	for (b = 0; b < BATCHES; b++) {
		t0 = now_us();
		for (i = 0; i < BATCH; i++)
			fn(arg, n++);
		t[b] = (now_us() - t0) / BATCH;
	}
	qsort(t, BATCHES, sizeof(t[0]), cmp_double);
	return t[BATCHES / 2];
}

struct ctx {
	struct token_key keys[2];
	char hs_tok[1024], ed_tok[1024];
	char hdrval[1100];
	struct http1_hdr hdrs[4];
	struct http1_msg msg;
	struct token_cache *cache;
	struct revocations *rev;
	struct config cf;
	struct budget *budget;
	const char *tok;
	int64_t gen;
	volatile int sink;
};

static void
b_hs_sig(void *arg, int i)
{
	struct ctx *c = arg;
	struct token_claims cl;

	(void)i;
	c->sink += (int)token_verify_sig(c->keys, 2, c->hs_tok,
	    strlen(c->hs_tok), &cl);
}

static void
b_ed_sig(void *arg, int i)
{
	struct ctx *c = arg;
	struct token_claims cl;

	(void)i;
	c->sink += (int)token_verify_sig(c->keys, 2, c->ed_tok,
	    strlen(c->ed_tok), &cl);
}

/* A cache miss: a new generation each time forces verification. */
static void
b_miss(void *arg, int i)
{
	struct ctx *c = arg;
	struct token_claims cl;

	c->sink += (int)token_cache_verify(c->cache, (uint64_t)i + 1000000,
	    c->keys, 2, c->tok, strlen(c->tok), NOW, 30, &cl, NULL);
}

/* The per-request path with the token already in the cache. */
static void
b_cached(void *arg, int i)
{
	struct ctx *c = arg;
	struct token_claims cl;
	char scratch[TOKEN_MAX_LEN + TOKEN_MAX_STR + 2];
	const char *tok;
	size_t len;
	enum reason r;

	(void)i;
	r = token_from_request(&c->msg, 0, NULL, scratch, sizeof(scratch), &tok,
	    &len);
	if (r == REASON_OK)
		r = token_cache_verify(c->cache, 1, c->keys, 2, tok, len, NOW,
		    30, &cl, NULL);
	if (r == REASON_OK)
		r = token_check_claims(&cl, &c->cf.cf_tokens.tc_rules,
		    "model-proxy", NOW);
	if (r == REASON_OK &&
	    revocations_has(c->rev, c->cf.cf_revoked, c->cf.cf_nrevoked,
		cl.jti))
		r = REASON_TOKEN_REVOKED;
	c->sink += (int)r;
}

static void
b_charge(void *arg, int i)
{
	struct ctx *c = arg;
	uint64_t used;

	(void)i;
	c->sink +=
	    budget_charge(c->budget, "bench-jti", NOW + 600, UINT64_MAX, &used);
}

static void
sign(const struct token_key *k, const char *hdr, char *out, size_t cap)
{
	static const char claims[] =
	    "{\"iss\":\"control-plane\",\"sub\":\"run-0123456789\",\"aud\":"
	    "\"model-proxy\",\"iat\":1700000000,\"exp\":1700000600,\"jti\":"
	    "\"6f1c2a9e0b7d4c3f8a5e1d2c3b4a5968\",\"max_requests\":1000}";

	if (token_sign(k, hdr, strlen(hdr), claims, strlen(claims), out, cap,
		NULL) == -1) {
		fprintf(stderr, "sign failed\n");
		exit(1);
	}
}

int
main(void)
{
	static unsigned char secret[] = "bench-secret-0123456789abcdef-0123";
	static char *revoked[] = { NULL };
	static struct ctx c;
	unsigned char seed[32], pub[32];
	char dir[] = "/tmp/sluice-bench-XXXXXX", why[512], path[600];
	size_t n = sizeof(pub);
	struct token_key ed_signer;
	double cached, charge, hs, ed, hs_miss, ed_miss;

	memset(seed, 7, sizeof(seed));
	snprintf(c.keys[0].tk_kid, sizeof(c.keys[0].tk_kid), "hs");
	c.keys[0].tk_alg = TOKEN_ALG_HS256;
	c.keys[0].tk_secret = secret;
	c.keys[0].tk_secret_len = sizeof(secret) - 1;
	memset(&ed_signer, 0, sizeof(ed_signer));
	ed_signer.tk_alg = TOKEN_ALG_EDDSA;
	ed_signer.tk_pkey =
	    EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, seed, 32);
	if (ed_signer.tk_pkey == NULL ||
	    EVP_PKEY_get_raw_public_key(ed_signer.tk_pkey, pub, &n) != 1)
		return 1;
	snprintf(c.keys[1].tk_kid, sizeof(c.keys[1].tk_kid), "ed");
	c.keys[1].tk_alg = TOKEN_ALG_EDDSA;
	c.keys[1].tk_pkey =
	    EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, pub, n);
	sign(&c.keys[0], "{\"alg\":\"HS256\",\"typ\":\"JWT\",\"kid\":\"hs\"}",
	    c.hs_tok, sizeof(c.hs_tok));
	sign(&ed_signer, "{\"alg\":\"EdDSA\",\"typ\":\"JWT\",\"kid\":\"ed\"}",
	    c.ed_tok, sizeof(c.ed_tok));

	/* A request head as the parser leaves it. */
	snprintf(c.hdrval, sizeof(c.hdrval), "Bearer %s", c.ed_tok);
	c.hdrs[0] = (struct http1_hdr){ "Host", 4, "model-proxy.internal", 20 };
	c.hdrs[1] =
	    (struct http1_hdr){ "Content-Type", 12, "application/json", 16 };
	c.hdrs[2] = (struct http1_hdr){ "Proxy-Authorization", 19, c.hdrval,
		strlen(c.hdrval) };
	c.hdrs[3] = (struct http1_hdr){ "Content-Length", 14, "512", 3 };
	c.msg.hdrs = c.hdrs;
	c.msg.max_hdrs = c.msg.nhdrs = 4;

	c.cf.cf_tokens.tc_rules.issuer = "control-plane";
	c.cf.cf_tokens.tc_rules.leeway_s = 30;
	c.cf.cf_tokens.tc_rules.max_ttl_s = 3600;
	c.cf.cf_revoked = revoked;
	c.cf.cf_nrevoked = 0;
	if (mkdtemp(dir) == NULL ||
	    (c.rev = revocations_open(dir, why, sizeof(why))) == NULL ||
	    revocations_add(c.rev, "some-other-jti", why, sizeof(why)) == -1 ||
	    (c.budget = budget_open(dir, why, sizeof(why))) == NULL ||
	    (c.cache = token_cache_new(4096)) == NULL) {
		fprintf(stderr, "setup: %s\n", why);
		return 1;
	}

	cached = median(b_cached, &c);
	charge = median(b_charge, &c);
	hs = median(b_hs_sig, &c);
	ed = median(b_ed_sig, &c);
	c.tok = c.hs_tok;
	hs_miss = median(b_miss, &c);
	c.tok = c.ed_tok;
	ed_miss = median(b_miss, &c);

	printf("token checks, median us per request (%d batches of %d)\n",
	    BATCHES, BATCH);
	printf("  cached token (carrier+hit+stage 2+revocation): %8.3f "
	       "(target <= 2)\n",
	    cached);
	printf("  budget charge (mmap store):                     %8.3f\n",
	    charge);
	printf("  cached token + budget charge:                   %8.3f\n",
	    cached + charge);
	printf("  first use HS256, stage 1:                       %8.3f "
	       "(target <= 5)\n",
	    hs);
	printf("  first use HS256, cache miss (hash+verify+put):  %8.3f\n",
	    hs_miss);
	printf("  first use Ed25519, stage 1:                     %8.3f "
	       "(target <= 80)\n",
	    ed);
	printf("  first use Ed25519, cache miss:                  %8.3f\n",
	    ed_miss);

	token_cache_free(c.cache);
	budget_close(c.budget);
	revocations_close(c.rev);
	snprintf(path, sizeof(path), "%s/budget.db", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/revoked.admin", dir);
	unlink(path);
	rmdir(dir);
	EVP_PKEY_free(ed_signer.tk_pkey);
	EVP_PKEY_free(c.keys[1].tk_pkey);
	return c.sink == 42 ? 2 : 0;
}
