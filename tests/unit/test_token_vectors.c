/*
 * Runs every vector of tests/vectors/tokens.json (docs/tokens.md
 * "Vectors") through token.c: the RFC 7515 A.1 and RFC 8037 A.4 examples
 * at signature level, sluice's own vectors through both stages, and the
 * carrier cases through token_from_request(). For each vector that must
 * pass, the same token with one signature bit flipped must fail. The file
 * is found through $SLUICE_VECTORS, the working directory (ctest runs in
 * the source root) or this source file's location.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>
#include <openssl/evp.h>

#include "proxy/token/token.h"

#define MAX_KEYS 16

struct named_key {
	char name[64];
	struct token_key key;
};

static struct named_key nkeys[MAX_KEYS];
static size_t nnkeys;
static cJSON *root;

static char *
slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	if (f == NULL)
		return NULL;
	if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET) != 0 ||
	    (buf = malloc((size_t)n + 1)) == NULL) {
		fclose(f);
		return NULL;
	}
	if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		fclose(f);
		return NULL;
	}
	fclose(f);
	buf[n] = '\0';
	return buf;
}

static char *
load_vectors(void)
{
	char path[4096], *p;
	const char *env = getenv("SLUICE_VECTORS");

	if (env != NULL)
		return slurp(env);
	if ((p = slurp("tests/vectors/tokens.json")) != NULL)
		return p;
	/* __FILE__ is .../tests/unit/test_token_vectors.c */
	snprintf(path, sizeof(path), "%s", __FILE__);
	if ((p = strrchr(path, '/')) == NULL)
		return NULL;
	snprintf(p, sizeof(path) - (size_t)(p - path),
	    "/../vectors/tokens.json");
	return slurp(path);
}

static void
b64(const char *s, unsigned char *out, size_t cap, size_t *n)
{
	assert_int_equal(token_b64url_decode(s, strlen(s), out, cap, n), 0);
}

static const char *
str(const cJSON *o, const char *name)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, name);

	assert_true(cJSON_IsString(it));
	return it->valuestring;
}

static int
setup(void **state)
{
	const cJSON *keys, *k;
	unsigned char raw[128];
	struct named_key *nk;
	char *text;
	size_t n;

	(void)state;
	text = load_vectors();
	assert_non_null(text);
	root = cJSON_Parse(text);
	free(text);
	assert_non_null(root);
	keys = cJSON_GetObjectItemCaseSensitive(root, "keys");
	assert_true(cJSON_IsObject(keys));
	cJSON_ArrayForEach(k, keys) {
		assert_true(nnkeys < MAX_KEYS);
		nk = &nkeys[nnkeys++];
		snprintf(nk->name, sizeof(nk->name), "%s", k->string);
		snprintf(nk->key.tk_kid, sizeof(nk->key.tk_kid), "%s",
		    str(k, "kid"));
		if (strcmp(str(k, "alg"), "HS256") == 0) {
			nk->key.tk_alg = TOKEN_ALG_HS256;
			b64(str(k, "secret"), raw, sizeof(raw), &n);
			nk->key.tk_secret = malloc(n);
			assert_non_null(nk->key.tk_secret);
			memcpy(nk->key.tk_secret, raw, n);
			nk->key.tk_secret_len = n;
		} else {
			assert_string_equal(str(k, "alg"), "EdDSA");
			nk->key.tk_alg = TOKEN_ALG_EDDSA;
			b64(str(k, "public_key"), raw, sizeof(raw), &n);
			assert_int_equal(n, 32);
			/* Verification uses the public key only. */
			nk->key.tk_pkey =
			    EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL,
				raw, n);
			assert_non_null(nk->key.tk_pkey);
		}
	}
	return 0;
}

static int
teardown(void **state)
{
	size_t i;

	(void)state;
	for (i = 0; i < nnkeys; i++) {
		free(nkeys[i].key.tk_secret);
		EVP_PKEY_free(nkeys[i].key.tk_pkey);
	}
	cJSON_Delete(root);
	return 0;
}

static const struct token_key *
key_named(const char *name)
{
	size_t i;

	for (i = 0; i < nnkeys; i++)
		if (strcmp(nkeys[i].name, name) == 0)
			return &nkeys[i].key;
	fail_msg("vector names unknown key %s", name);
	return &nkeys[0].key; /* not reached */
}

/* Run one vector's token as the vector says; returns the reason. */
static enum reason
run(const cJSON *v, const char *tok)
{
	struct token_key keys[MAX_KEYS];
	struct token_claims c;
	struct token_rules rules;
	const cJSON *ks, *k, *r, *iss;
	size_t n = 0;
	enum reason res;

	ks = cJSON_GetObjectItemCaseSensitive(v, "keys");
	assert_true(cJSON_IsArray(ks));
	cJSON_ArrayForEach(k, ks) {
		assert_true(n < MAX_KEYS);
		keys[n++] = *key_named(k->valuestring);
	}
	if (strcmp(str(v, "level"), "signature") == 0)
		return token_verify_jws(keys, n, tok, strlen(tok));
	assert_string_equal(str(v, "level"), "full");
	if ((res = token_verify_sig(keys, n, tok, strlen(tok), &c)) !=
	    REASON_OK)
		return res;
	r = cJSON_GetObjectItemCaseSensitive(v, "rules");
	iss = cJSON_GetObjectItemCaseSensitive(r, "issuer");
	rules.issuer = cJSON_IsString(iss) ? iss->valuestring : NULL;
	rules.leeway_s =
	    (int64_t)cJSON_GetObjectItemCaseSensitive(r, "leeway_s")
		->valuedouble;
	rules.max_ttl_s =
	    (int64_t)cJSON_GetObjectItemCaseSensitive(r, "max_ttl_s")
		->valuedouble;
	return token_check_claims(&c, &rules, str(v, "audience"),
	    (int64_t)cJSON_GetObjectItemCaseSensitive(v, "now")->valuedouble);
}

/* The token with the lowest bit of its first signature byte flipped. */
static void
flip_sig(const char *tok, char *out, size_t cap)
{
	unsigned char sig[256];
	const char *dot = strrchr(tok, '.');
	size_t n, pre = (size_t)(dot + 1 - tok);

	assert_non_null(dot);
	b64(dot + 1, sig, sizeof(sig), &n);
	assert_true(n > 0);
	sig[0] ^= 1;
	assert_true(pre < cap);
	memcpy(out, tok, pre);
	assert_int_equal(token_b64url_encode(sig, n, out + pre, cap - pre,
			     NULL),
	    0);
}

static void
test_vectors(void **state)
{
	const cJSON *vs = cJSON_GetObjectItemCaseSensitive(root, "vectors");
	const cJSON *v;
	char flipped[8192];
	int failed = 0, seen[REASON__COUNT] = { 0 }, oks = 0, rfc = 0;
	enum reason r, fr;

	(void)state;
	assert_true(cJSON_IsArray(vs));
	assert_true(cJSON_GetArraySize(vs) >= 50);
	cJSON_ArrayForEach(v, vs) {
		r = run(v, str(v, "token"));
		seen[r]++;
		if (strcmp(reason_name(r), str(v, "expect")) != 0) {
			print_error("vector %s: got %s, want %s\n",
			    str(v, "name"), reason_name(r), str(v, "expect"));
			failed++;
			continue;
		}
		if (strncmp(str(v, "name"), "rfc", 3) == 0 && r == REASON_OK)
			rfc++;
		if (r != REASON_OK)
			continue;
		oks++;
		flip_sig(str(v, "token"), flipped, sizeof(flipped));
		if ((fr = run(v, flipped)) != REASON_TOKEN_BAD_SIGNATURE) {
			print_error("vector %s with a flipped bit: got %s\n",
			    str(v, "name"), reason_name(fr));
			failed++;
		}
	}
	assert_int_equal(failed, 0);
	assert_int_equal(rfc, 2);
	assert_true(oks >= 5);
	/* The file exercises every reason the two stages can return. */
	assert_true(seen[REASON_TOKEN_MALFORMED] > 0);
	assert_true(seen[REASON_TOKEN_UNSUPPORTED_ALG] > 0);
	assert_true(seen[REASON_TOKEN_UNKNOWN_KID] > 0);
	assert_true(seen[REASON_TOKEN_BAD_SIGNATURE] > 0);
	assert_true(seen[REASON_TOKEN_EXPIRED] > 0);
	assert_true(seen[REASON_TOKEN_NOT_YET_VALID] > 0);
	assert_true(seen[REASON_TOKEN_LIFETIME_TOO_LONG] > 0);
	assert_true(seen[REASON_TOKEN_WRONG_AUDIENCE] > 0);
	assert_true(seen[REASON_TOKEN_WRONG_ISSUER] > 0);
}

static void
test_carriers(void **state)
{
	const cJSON *cs = cJSON_GetObjectItemCaseSensitive(root, "carriers");
	const cJSON *c, *hs, *h;
	struct http1_hdr hdrs[8];
	struct http1_msg m;
	char scratch[TOKEN_MAX_LEN + TOKEN_MAX_STR + 2];
	const char *tok;
	size_t len;
	int failed = 0, seen[REASON__COUNT] = { 0 };
	enum reason r;

	(void)state;
	assert_true(cJSON_IsArray(cs));
	cJSON_ArrayForEach(c, cs) {
		memset(&m, 0, sizeof(m));
		m.hdrs = hdrs;
		m.max_hdrs = 8;
		hs = cJSON_GetObjectItemCaseSensitive(c, "headers");
		cJSON_ArrayForEach(h, hs) {
			assert_true(m.nhdrs < 8);
			hdrs[m.nhdrs].name =
			    cJSON_GetArrayItem(h, 0)->valuestring;
			hdrs[m.nhdrs].name_len = strlen(hdrs[m.nhdrs].name);
			hdrs[m.nhdrs].value =
			    cJSON_GetArrayItem(h, 1)->valuestring;
			hdrs[m.nhdrs].value_len = strlen(hdrs[m.nhdrs].value);
			m.nhdrs++;
		}
		r = token_from_request(&m,
		    cJSON_IsTrue(
			cJSON_GetObjectItemCaseSensitive(c, "connect")),
		    NULL, scratch, sizeof(scratch), &tok, &len);
		seen[r]++;
		if (strcmp(reason_name(r), str(c, "expect")) != 0) {
			print_error("carrier %s: got %s, want %s\n",
			    str(c, "name"), reason_name(r), str(c, "expect"));
			failed++;
		} else if (r == REASON_OK &&
		    (len != strlen(str(c, "token")) ||
			memcmp(tok, str(c, "token"), len) != 0)) {
			print_error("carrier %s: wrong token\n",
			    str(c, "name"));
			failed++;
		}
	}
	assert_int_equal(failed, 0);
	assert_true(seen[REASON_OK] > 0);
	assert_true(seen[REASON_TOKEN_MISSING] > 0);
	assert_true(seen[REASON_TOKEN_MALFORMED] > 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_vectors),
		cmocka_unit_test(test_carriers),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
