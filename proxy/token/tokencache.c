/*
 * The verified-token cache: an agent loop sends the same token with every
 * request, and an Ed25519 verification costs tens of microseconds, so the
 * result of stage 1 (token_verify_sig) is remembered per token string.
 * Only successes are kept, an entry dies with its token (exp + leeway) or
 * with the policy generation it was verified under, and the cache never
 * grows past the size it was created with. Stage 2, revocation and budgets
 * are not cached: the caller runs them on every request.
 *
 * Layout: a set-associative table (sets of up to TC_WAYS entries) with LRU
 * replacement inside a set. The set is chosen by the SHA-256 of the token,
 * and an entry matches only on all 32 bytes of it, so two tokens can share
 * an entry only by a SHA-256 collision.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "proxy/http/http1.h"
#include "proxy/http/reason.h"
#include "proxy/token/store.h"
#include "proxy/token/token.h"
#include "proxy/util/util.h"

#define TC_WAYS 8

struct tc_entry {
	unsigned char te_key[32]; /* SHA-256 of the token string */
	uint64_t te_gen;          /* policy generation it was verified in */
	int64_t te_dead;          /* exp + leeway: unusable from then on */
	uint64_t te_used;         /* tick of the last hit or insert (LRU) */
	int te_valid;             /* slot holds an entry */
	struct token_claims te_claims;
};

/* Owned by whoever called token_cache_new(); freed by token_cache_free(). */
struct token_cache {
	struct tc_entry *tc_ent; /* tc_nsets * tc_ways entries */
	size_t tc_nsets;
	size_t tc_ways;
	uint64_t tc_tick;
	uint64_t tc_hits;
	uint64_t tc_misses;
};

/*
 * Create a cache of at most max_entries entries (0 makes a cache that
 * caches nothing). Returns NULL when out of memory.
 */
struct token_cache *
token_cache_new(size_t max_entries)
{
	struct token_cache *tc;

	if ((tc = calloc(1, sizeof(*tc))) == NULL)
		return NULL;
	tc->tc_ways = max_entries < TC_WAYS ? max_entries : TC_WAYS;
	tc->tc_nsets = tc->tc_ways == 0 ? 0 : max_entries / tc->tc_ways;
	if (tc->tc_nsets > 0 &&
	    (tc->tc_ent = calloc(tc->tc_nsets * tc->tc_ways,
		 sizeof(*tc->tc_ent))) == NULL) {
		free(tc);
		return NULL;
	}
	return tc;
}

void
token_cache_free(struct token_cache *tc)
{
	if (tc == NULL)
		return;
	free(tc->tc_ent);
	free(tc);
}

void
token_cache_stats(const struct token_cache *tc, uint64_t *hits,
    uint64_t *misses)
{
	*hits = tc != NULL ? tc->tc_hits : 0;
	*misses = tc != NULL ? tc->tc_misses : 0;
}

static int64_t
dead_time(int64_t exp, int64_t leeway)
{
	int64_t r;

	if (leeway < 0)
		leeway = 0;
	if (__builtin_add_overflow(exp, leeway, &r))
		return INT64_MAX;
	return r;
}

static int
entry_live(const struct tc_entry *e, uint64_t gen, int64_t now)
{
	return e->te_valid && e->te_gen == gen && now < e->te_dead;
}

/* The slot to fill in a set: a free or dead one, else the least used. */
static struct tc_entry *
victim(struct tc_entry *set, size_t ways, uint64_t gen, int64_t now)
{
	struct tc_entry *v = &set[0];
	size_t i;

	for (i = 0; i < ways; i++) {
		if (!entry_live(&set[i], gen, now))
			return &set[i];
		if (set[i].te_used < v->te_used)
			v = &set[i];
	}
	return v;
}

/*
 * Stage 1 through the cache (proxy.h). A hit needs the same 32-byte key,
 * the same generation and now < exp + leeway; anything else verifies the
 * token again. Each call counts one hit or one miss; *hit (when not NULL)
 * says which, for the caller's metrics.
 */
enum reason
token_cache_verify(struct token_cache *tc, uint64_t gen,
    const struct token_key *keys, size_t nkeys, const char *tok, size_t len,
    int64_t now, int64_t leeway_s, struct token_claims *out, int *hit)
{
	unsigned char key[32];
	struct tc_entry *set, *e;
	uint64_t h;
	size_t i;
	enum reason r;

	if (hit != NULL)
		*hit = 0;
	/* Out-of-range input is refused by stage 1 without hashing it. */
	if (tc == NULL || tc->tc_nsets == 0 || tok == NULL || len == 0 ||
	    len > TOKEN_MAX_LEN || digest_sha256(tok, len, key) == -1) {
		if (tc != NULL)
			tc->tc_misses++;
		return token_verify_sig(keys, nkeys, tok, len, out);
	}
	memcpy(&h, key, sizeof(h));
	set = &tc->tc_ent[(size_t)(h % tc->tc_nsets) * tc->tc_ways];
	for (i = 0; i < tc->tc_ways; i++) {
		e = &set[i];
		if (!e->te_valid || CRYPTO_memcmp(e->te_key, key, 32) != 0)
			continue;
		if (entry_live(e, gen, now)) {
			e->te_used = ++tc->tc_tick;
			*out = e->te_claims;
			tc->tc_hits++;
			if (hit != NULL)
				*hit = 1;
			return REASON_OK;
		}
		/* Expired, or verified under other keys: forget it. */
		e->te_valid = 0;
		break;
	}
	tc->tc_misses++;
	r = token_verify_sig(keys, nkeys, tok, len, out);
	if (r != REASON_OK || now >= dead_time(out->exp, leeway_s))
		return r;
	e = victim(set, tc->tc_ways, gen, now);
	memcpy(e->te_key, key, sizeof(key));
	e->te_gen = gen;
	e->te_dead = dead_time(out->exp, leeway_s);
	e->te_used = ++tc->tc_tick;
	e->te_valid = 1;
	e->te_claims = *out;
	return r;
}
