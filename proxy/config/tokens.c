/*
 * tokens: issuer, clock rules, the verification keys (HS256 secret files,
 * Ed25519 public keys, kept across reloads once unlinked) and the revoked
 * file.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "proxy/config/config.h"
#include "proxy/config/config_int.h"
#include "proxy/token/store.h"
#include "proxy/token/token.h"

/* Find the previous policy's copy of a key whose file was unlinked. */
static const struct token_key *
prev_key(const struct config *prev, const char *file, size_t *idx)
{
	size_t i;

	if (prev == NULL)
		return NULL;
	for (i = 0; i < prev->cf_tokens.tc_nkeys; i++)
		if (prev->cf_tokens.tc_key_unlink[i] &&
		    strcmp(prev->cf_tokens.tc_key_files[i], file) == 0) {
			*idx = i;
			return &prev->cf_tokens.tc_keys[i];
		}
	return NULL;
}

static int
load_pubkey(struct cfctx *cx, const char *jp, const char *file, EVP_PKEY **out)
{
	unsigned char *buf;
	size_t len;
	BIO *bio;
	EVP_PKEY *pk;
	char why[512];

	if (cf_read_path(file, &buf, &len, why, sizeof(why)) == -1)
		return cf_err(cx, jp, "public_key_file: %s", why);
	if ((bio = BIO_new_mem_buf(buf, (int)len)) == NULL) {
		free(buf);
		return cf_err(cx, jp, "public_key_file: %s: out of memory",
		    file);
	}
	pk = PEM_read_bio_PUBKEY(bio, NULL, NULL, NULL);
	BIO_free(bio);
	free(buf);
	ERR_clear_error();
	if (pk == NULL)
		return cf_err(cx, jp,
		    "public_key_file: %s: not a PEM public key", file);
	if (EVP_PKEY_get_id(pk) != EVP_PKEY_ED25519) {
		EVP_PKEY_free(pk);
		return cf_err(cx, jp,
		    "public_key_file: %s: not an Ed25519 public key", file);
	}
	*out = pk;
	return 0;
}

static int
load_key(struct cfctx *cx, const char *jp, const cJSON *it, size_t i)
{
	static const char *const keys[] = { "kid", "alg", "secret_file",
		"public_key_file", "unlink_after_read", NULL };
	struct tokens_conf *tc = &cx->cf->cf_tokens;
	struct token_key *k = &tc->tc_keys[i];
	const char *kid = NULL, *alg = NULL, *secret = NULL, *pub = NULL;
	const struct token_key *old;
	size_t oldidx;
	int unlink_after = 0;
	char why[512];

	if (cf_keys(cx, jp, it, keys) == -1 ||
	    cf_str(cx, jp, it, "alg", 1, &alg) == -1 ||
	    cf_str(cx, jp, it, "kid", 0, &kid) == -1 ||
	    cf_str(cx, jp, it, "secret_file", 0, &secret) == -1 ||
	    cf_str(cx, jp, it, "public_key_file", 0, &pub) == -1 ||
	    cf_bool(cx, jp, it, "unlink_after_read", &unlink_after) == -1)
		return -1;
	if (kid != NULL) {
		if (strlen(kid) > TOKEN_MAX_STR)
			return cf_err(cx, jp, "kid: longer than %d bytes",
			    TOKEN_MAX_STR);
		snprintf(k->tk_kid, sizeof(k->tk_kid), "%s", kid);
	}
	if (strcmp(alg, "HS256") == 0) {
		k->tk_alg = TOKEN_ALG_HS256;
		if (secret == NULL || pub != NULL)
			return cf_err(cx, jp,
			    "an HS256 key takes \"secret_file\" (and no public_key_file)");
	} else if (strcmp(alg, "EdDSA") == 0) {
		k->tk_alg = TOKEN_ALG_EDDSA;
		if (pub == NULL || secret != NULL)
			return cf_err(cx, jp,
			    "an EdDSA key takes \"public_key_file\" (and no secret_file)");
	} else
		return cf_err(cx, jp, "alg: \"%s\" is not HS256 or EdDSA", alg);
	if ((tc->tc_key_files[i] =
		    cf_strdup(cx, jp, secret != NULL ? secret : pub)) == NULL)
		return -1;
	tc->tc_key_unlink[i] = unlink_after;

	/* A key read and unlinked by an earlier load stays in memory. */
	if (unlink_after && access(tc->tc_key_files[i], F_OK) == -1 &&
	    errno == ENOENT &&
	    (old = prev_key(cx->prev, tc->tc_key_files[i], &oldidx)) != NULL &&
	    old->tk_alg == k->tk_alg) {
		if (old->tk_secret != NULL) {
			if ((k->tk_secret = cf_calloc(cx, jp,
				 old->tk_secret_len, 1)) == NULL)
				return -1;
			memcpy(k->tk_secret, old->tk_secret,
			    old->tk_secret_len);
			k->tk_secret_len = old->tk_secret_len;
		}
		if (old->tk_pkey != NULL) {
			EVP_PKEY_up_ref(old->tk_pkey);
			k->tk_pkey = old->tk_pkey;
		}
		return 0;
	}
	if (k->tk_alg == TOKEN_ALG_HS256) {
		if (config_read_secret(secret, cx->cf->cf_uid, &k->tk_secret,
			&k->tk_secret_len, why, sizeof(why)) == -1)
			return cf_err(cx, jp, "secret_file: %s", why);
		if (k->tk_secret_len < 32)
			return cf_err(cx, jp,
			    "secret_file: %s: an HS256 secret needs at least 32 bytes",
			    secret);
		if (token_prepare() == -1)
			return cf_err(cx, jp,
			    "alg: HS256: OpenSSL has no HMAC-SHA256 here");
	} else if (load_pubkey(cx, jp, pub, &k->tk_pkey) == -1)
		return -1;
	/* Removed by config_unlink_keys(), once "run" has it all loaded. */
	tc->tc_key_fresh[i] = unlink_after;
	return 0;
}

int
config_unlink_keys(struct config *cf, char *why, size_t whylen)
{
	struct tokens_conf *tc = &cf->cf_tokens;
	size_t i;
	int rc = 0;

	for (i = 0; i < tc->tc_nkeys; i++) {
		if (!tc->tc_key_unlink[i] || !tc->tc_key_fresh[i])
			continue;
		tc->tc_key_fresh[i] = 0;
		if (unlink(tc->tc_key_files[i]) == -1 && errno != ENOENT &&
		    rc == 0) {
			snprintf(why, whylen,
			    "%s: tokens.keys[%zu]: unlink_after_read: %s: %s",
			    cf->cf_path, i, tc->tc_key_files[i],
			    strerror(errno));
			rc = -1;
		}
	}
	return rc;
}

int
cf_load_tokens(struct cfctx *cx, const cJSON *root)
{
	static const char *const keys[] = { "issuer", "leeway_s", "max_ttl_s",
		"keys", "revoked_file", NULL };
	struct tokens_conf *tc = &cx->cf->cf_tokens;
	const cJSON *obj = cJSON_GetObjectItemCaseSensitive(root, "tokens");
	const cJSON *arr, *it;
	const char *issuer = NULL, *revoked = NULL;
	uint64_t leeway = 30, ttl = 3600;
	char jp[64], why[512];
	size_t i = 0, j;
	int n;

	if (obj == NULL)
		return cf_err(cx, "", "missing \"tokens\"");
	if (cf_keys(cx, "tokens", obj, keys) == -1 ||
	    cf_str(cx, "tokens", obj, "issuer", 0, &issuer) == -1 ||
	    cf_str(cx, "tokens", obj, "revoked_file", 0, &revoked) == -1 ||
	    cf_uint(cx, "tokens", obj, "leeway_s", 0, 600, &leeway) == -1 ||
	    cf_uint(cx, "tokens", obj, "max_ttl_s", 1, 7 * (uint64_t)86400,
		&ttl) == -1)
		return -1;
	if (issuer != NULL && strlen(issuer) > TOKEN_MAX_STR)
		return cf_err(cx, "tokens.issuer", "longer than %d bytes",
		    TOKEN_MAX_STR);
	if (issuer != NULL &&
	    (tc->tc_issuer = cf_strdup(cx, "tokens.issuer", issuer)) == NULL)
		return -1;
	tc->tc_leeway_s = (int64_t)leeway;
	tc->tc_max_ttl_s = (int64_t)ttl;
	tc->tc_rules.issuer = tc->tc_issuer;
	tc->tc_rules.leeway_s = tc->tc_leeway_s;
	tc->tc_rules.max_ttl_s = tc->tc_max_ttl_s;

	if ((n = cf_array(cx, "tokens", obj, "keys", 1, 32, &arr)) == -1)
		return -1;
	j = (size_t)n;
	if ((tc->tc_keys = cf_calloc(cx, "tokens.keys", j,
		 sizeof(*tc->tc_keys))) == NULL ||
	    (tc->tc_key_files = cf_calloc(cx, "tokens.keys", j,
		 sizeof(*tc->tc_key_files))) == NULL ||
	    (tc->tc_key_unlink = cf_calloc(cx, "tokens.keys", j,
		 sizeof(*tc->tc_key_unlink))) == NULL ||
	    (tc->tc_key_fresh = cf_calloc(cx, "tokens.keys", j,
		 sizeof(*tc->tc_key_fresh))) == NULL)
		return -1;
	tc->tc_nkeys = j;
	cJSON_ArrayForEach(it, arr) {
		cf_idx(jp, sizeof(jp), "tokens.keys", i);
		if (load_key(cx, jp, it, i) == -1)
			return -1;
		/* Without a kid a token could not say which key it uses. */
		if (tc->tc_nkeys > 1 && tc->tc_keys[i].tk_kid[0] == '\0')
			return cf_err(cx, jp,
			    "kid: required when there are several keys");
		for (j = 0; j < i; j++)
			if (strcmp(tc->tc_keys[j].tk_kid,
				tc->tc_keys[i].tk_kid) == 0)
				return cf_err(cx, jp,
				    "kid: also used by an earlier key");
		i++;
	}
	if (revoked != NULL) {
		if ((tc->tc_revoked_file = cf_strdup(cx, "tokens.revoked_file",
			 revoked)) == NULL)
			return -1;
		if (revocations_read_file(revoked, &cx->cf->cf_revoked,
			&cx->cf->cf_nrevoked, why, sizeof(why)) == -1)
			return cf_err(cx, "tokens.revoked_file", "%s", why);
	}
	return 0;
}
