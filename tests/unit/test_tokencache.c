/*
 * Unit tests for proxy/tokencache.c: a hit after the first verification,
 * no caching of failures, expiry at exp + leeway, invalidation when the
 * policy generation changes, the size bound and LRU replacement. Hits and
 * misses are observed through token_cache_stats().
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proxy/proxy.h"

#define NOW 1700000000LL
#define EXP (NOW + 600)

static unsigned char secret[] = "0123456789abcdef0123456789abcdef";
static struct token_key key = {
	.tk_kid = "hs",
	.tk_alg = TOKEN_ALG_HS256,
	.tk_secret = secret,
	.tk_secret_len = 32,
};
static unsigned char other_secret[] = "fedcba9876543210fedcba9876543210";
static struct token_key other_key = {
	.tk_kid = "hs",
	.tk_alg = TOKEN_ALG_HS256,
	.tk_secret = other_secret,
	.tk_secret_len = 32,
};

/* A valid token for jti "j-<n>" (distinct n, distinct tokens). */
static const char *
mint(int n, char *buf, size_t cap)
{
	static const char hdr[] = "{\"alg\":\"HS256\",\"kid\":\"hs\"}";
	char payload[256];

	snprintf(payload, sizeof(payload),
	    "{\"sub\":\"run\",\"aud\":\"a\",\"exp\":%lld,\"jti\":\"j-%d\"}",
	    EXP, n);
	assert_int_equal(token_sign(&key, hdr, strlen(hdr), payload,
			     strlen(payload), buf, cap, NULL),
	    0);
	return buf;
}

static enum reason
cverify(struct token_cache *tc, uint64_t gen, const struct token_key *k,
    const char *tok, int64_t now, struct token_claims *c)
{
	return token_cache_verify(tc, gen, k, 1, tok, strlen(tok), now, 30, c,
	    NULL);
}

static void
expect_stats(const struct token_cache *tc, uint64_t hits, uint64_t misses)
{
	uint64_t h, m;

	token_cache_stats(tc, &h, &m);
	assert_int_equal(h, hits);
	assert_int_equal(m, misses);
}

static void
test_hit_after_first_verify(void **state)
{
	struct token_cache *tc = token_cache_new(64);
	struct token_claims c1, c2;
	char tok[1024];

	(void)state;
	assert_non_null(tc);
	mint(1, tok, sizeof(tok));
	assert_int_equal(cverify(tc, 1, &key, tok, NOW, &c1), REASON_OK);
	expect_stats(tc, 0, 1);
	assert_int_equal(cverify(tc, 1, &key, tok, NOW + 1, &c2), REASON_OK);
	expect_stats(tc, 1, 1);
	assert_memory_equal(&c1, &c2, sizeof(c1));
	assert_string_equal(c2.jti, "j-1");
	/* The caller's copy is its own. */
	snprintf(c2.jti, sizeof(c2.jti), "changed");
	assert_int_equal(cverify(tc, 1, &key, tok, NOW, &c2), REASON_OK);
	assert_string_equal(c2.jti, "j-1");
	expect_stats(tc, 2, 1);
	token_cache_free(tc);
}

static void
test_failures_not_cached(void **state)
{
	struct token_cache *tc = token_cache_new(64);
	struct token_claims c;
	char tok[1024];

	(void)state;
	mint(1, tok, sizeof(tok));
	/* Wrong key: a bad signature, twice verified, never cached. */
	assert_int_equal(cverify(tc, 1, &other_key, tok, NOW, &c),
	    REASON_TOKEN_BAD_SIGNATURE);
	assert_int_equal(cverify(tc, 1, &other_key, tok, NOW, &c),
	    REASON_TOKEN_BAD_SIGNATURE);
	expect_stats(tc, 0, 2);
	assert_int_equal(cverify(tc, 1, &key, "x.y.z", NOW, &c),
	    REASON_TOKEN_MALFORMED);
	assert_int_equal(token_cache_verify(tc, 1, &key, 1, "", 0, NOW, 30, &c,
			     NULL),
	    REASON_TOKEN_MALFORMED);
	expect_stats(tc, 0, 4);
	token_cache_free(tc);
}

/* An entry dies at exp + leeway exactly (the token's own expiry). */
static void
test_expiry(void **state)
{
	struct token_cache *tc = token_cache_new(64);
	struct token_claims c;
	char tok[1024];

	(void)state;
	mint(1, tok, sizeof(tok));
	assert_int_equal(cverify(tc, 1, &key, tok, NOW, &c), REASON_OK);
	assert_int_equal(cverify(tc, 1, &key, tok, EXP + 29, &c), REASON_OK);
	expect_stats(tc, 1, 1);
	/* Stage 1 still succeeds (it has no clock), but from the cache no. */
	assert_int_equal(cverify(tc, 1, &key, tok, EXP + 30, &c), REASON_OK);
	expect_stats(tc, 1, 2);
	/* ... and a dead token is not put back. */
	assert_int_equal(cverify(tc, 1, &key, tok, EXP + 31, &c), REASON_OK);
	expect_stats(tc, 1, 3);
	token_cache_free(tc);
}

/* A reload (new generation) may have changed the keys: verify again. */
static void
test_generation(void **state)
{
	struct token_cache *tc = token_cache_new(64);
	struct token_claims c;
	char tok[1024];

	(void)state;
	mint(1, tok, sizeof(tok));
	assert_int_equal(cverify(tc, 1, &key, tok, NOW, &c), REASON_OK);
	assert_int_equal(cverify(tc, 1, &key, tok, NOW, &c), REASON_OK);
	expect_stats(tc, 1, 1);
	/* Generation 2 no longer has the key: the cache must not answer. */
	assert_int_equal(cverify(tc, 2, &other_key, tok, NOW, &c),
	    REASON_TOKEN_BAD_SIGNATURE);
	expect_stats(tc, 1, 2);
	assert_int_equal(cverify(tc, 2, &other_key, tok, NOW, &c),
	    REASON_TOKEN_BAD_SIGNATURE);
	/* Generation 3 has it again: one miss, then hits. */
	assert_int_equal(cverify(tc, 3, &key, tok, NOW, &c), REASON_OK);
	assert_int_equal(cverify(tc, 3, &key, tok, NOW, &c), REASON_OK);
	expect_stats(tc, 2, 4);
	token_cache_free(tc);
}

/* Never more entries than asked for, whatever is inserted. */
static void
test_bound(void **state)
{
	struct token_cache *tc = token_cache_new(16);
	struct token_claims c;
	char tok[1024];
	uint64_t h0, h1, m;
	int i;

	(void)state;
	for (i = 0; i < 200; i++)
		assert_int_equal(cverify(tc, 1, &key, mint(i, tok, sizeof(tok)),
				     NOW, &c),
		    REASON_OK);
	/* The last one inserted is cached. */
	cverify(tc, 1, &key, mint(199, tok, sizeof(tok)), NOW, &c);
	token_cache_stats(tc, &h0, &m);
	assert_int_equal(h0, 1);
	/* Each of the 200 once more: at most 16 can still be there. */
	for (i = 199; i >= 0; i--)
		cverify(tc, 1, &key, mint(i, tok, sizeof(tok)), NOW, &c);
	token_cache_stats(tc, &h1, &m);
	assert_true(h1 - h0 <= 16);
	assert_true(h1 - h0 >= 2);
	token_cache_free(tc);
}

/* With fewer than 8 entries there is one set: exact LRU order. */
static void
test_lru(void **state)
{
	struct token_cache *tc = token_cache_new(4);
	struct token_claims c;
	char t[6][1024];
	uint64_t h, m;
	int i;

	(void)state;
	for (i = 1; i <= 5; i++)
		mint(i, t[i], sizeof(t[i]));
	for (i = 1; i <= 4; i++)
		assert_int_equal(cverify(tc, 1, &key, t[i], NOW, &c),
		    REASON_OK);
	/* Touch 1, so 2 is the least recently used; 5 replaces it. */
	assert_int_equal(cverify(tc, 1, &key, t[1], NOW, &c), REASON_OK);
	assert_int_equal(cverify(tc, 1, &key, t[5], NOW, &c), REASON_OK);
	token_cache_stats(tc, &h, &m);
	assert_int_equal(h, 1);
	assert_int_equal(m, 5);
	assert_int_equal(cverify(tc, 1, &key, t[1], NOW, &c), REASON_OK);
	assert_int_equal(cverify(tc, 1, &key, t[3], NOW, &c), REASON_OK);
	assert_int_equal(cverify(tc, 1, &key, t[4], NOW, &c), REASON_OK);
	assert_int_equal(cverify(tc, 1, &key, t[5], NOW, &c), REASON_OK);
	expect_stats(tc, 5, 5);
	assert_int_equal(cverify(tc, 1, &key, t[2], NOW, &c), REASON_OK);
	expect_stats(tc, 5, 6);
	token_cache_free(tc);
}

static void
test_zero_and_null(void **state)
{
	struct token_cache *tc = token_cache_new(0);
	struct token_claims c;
	char tok[1024];

	(void)state;
	assert_non_null(tc);
	mint(1, tok, sizeof(tok));
	assert_int_equal(cverify(tc, 1, &key, tok, NOW, &c), REASON_OK);
	assert_int_equal(cverify(tc, 1, &key, tok, NOW, &c), REASON_OK);
	expect_stats(tc, 0, 2);
	token_cache_free(tc);
	/* No cache at all: plain stage 1. */
	assert_int_equal(cverify(NULL, 1, &key, tok, NOW, &c), REASON_OK);
	expect_stats(NULL, 0, 0);
	token_cache_free(NULL);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hit_after_first_verify),
		cmocka_unit_test(test_failures_not_cached),
		cmocka_unit_test(test_expiry),
		cmocka_unit_test(test_generation),
		cmocka_unit_test(test_bound),
		cmocka_unit_test(test_lru),
		cmocka_unit_test(test_zero_and_null),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
