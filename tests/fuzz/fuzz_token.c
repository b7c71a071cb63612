/*
 * libFuzzer target for proxy/token.c. The first byte picks a mode:
 *   0  the rest is a token, verified with fixed HS256 and Ed25519 keys in
 *      several key sets (both, each alone, none);
 *   1  the rest is "header JSON \n claims JSON": the target signs it with
 *      both keys, so the fuzzer reaches the claims parser behind a valid
 *      signature;
 *   2  the rest is a Proxy-Authorization or Authorization value (the next
 *      byte chooses which fields, and CONNECT or not) for
 *      token_from_request(), whose token is then verified;
 *   3  the rest is base64url: what decodes must re-encode to the same
 *      bytes (one encoding per value).
 * Invariants, not just "no crash": only token_* reasons come back, an OK
 * result has sane claims, stage 2 returns only its own reasons, the
 * signature-level and full verifications agree, and carriers return
 * tokens inside the input or the scratch buffer.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "proxy/token/token.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_SAFE 9007199254740991LL

static struct token_key keys[2];    /* verification: hs, ed (public) */
static struct token_key signers[2]; /* signing: hs, ed (private) */
static unsigned char hs_secret[] = "fuzz-token-hs256-secret-0123456789";

static void
check(int cond, const char *what)
{
	if (!cond) {
		fprintf(stderr, "fuzz_token invariant broken: %s\n", what);
		abort();
	}
}

static void
init(void)
{
	unsigned char seed[32], pub[32];
	size_t n = sizeof(pub);
	EVP_PKEY *priv;

	memset(seed, 0x5a, sizeof(seed));
	priv = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, seed, 32);
	check(priv != NULL, "ed25519 key");
	check(EVP_PKEY_get_raw_public_key(priv, pub, &n) == 1, "raw public");
	snprintf(keys[0].tk_kid, sizeof(keys[0].tk_kid), "hs");
	keys[0].tk_alg = TOKEN_ALG_HS256;
	keys[0].tk_secret = hs_secret;
	keys[0].tk_secret_len = sizeof(hs_secret) - 1;
	snprintf(keys[1].tk_kid, sizeof(keys[1].tk_kid), "ed");
	keys[1].tk_alg = TOKEN_ALG_EDDSA;
	keys[1].tk_pkey =
	    EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, pub, n);
	check(keys[1].tk_pkey != NULL, "public key");
	signers[0] = keys[0];
	signers[1] = keys[1];
	signers[1].tk_pkey = priv;
}

static int
stage1_reason(enum reason r)
{
	return r == REASON_OK || r == REASON_TOKEN_MALFORMED ||
	    r == REASON_TOKEN_UNSUPPORTED_ALG ||
	    r == REASON_TOKEN_UNKNOWN_KID || r == REASON_TOKEN_BAD_SIGNATURE;
}

static int
stage2_reason(enum reason r)
{
	return r == REASON_OK || r == REASON_TOKEN_EXPIRED ||
	    r == REASON_TOKEN_NOT_YET_VALID ||
	    r == REASON_TOKEN_LIFETIME_TOO_LONG ||
	    r == REASON_TOKEN_WRONG_AUDIENCE || r == REASON_TOKEN_WRONG_ISSUER;
}

static int
str_ok(const char *s, size_t cap)
{
	size_t n = strnlen(s, cap);

	return n > 0 && n <= TOKEN_MAX_STR && n < cap;
}

static void
check_claims(const struct token_claims *c)
{
	static const struct token_rules rules[] = {
		{ NULL, 0, 3600 },
		{ "control-plane", 30, 60 },
		{ "", 600, 1 },
	};
	static const int64_t nows[] = { 0, 1700000000, -1, INT64_MAX,
		INT64_MIN };
	size_t i, j, k;
	enum reason r;

	check(str_ok(c->sub, sizeof(c->sub)), "sub");
	check(str_ok(c->jti, sizeof(c->jti)), "jti");
	check(!c->has_iss || str_ok(c->iss, sizeof(c->iss)), "iss");
	check(c->naud >= 1 && c->aud_len <= sizeof(c->aud), "naud");
	for (i = 0, k = 0; i < c->naud; i++) {
		check(k < c->aud_len, "aud offsets");
		check(str_ok(c->aud + k, TOKEN_MAX_STR + 1), "aud");
		k += strlen(c->aud + k) + 1;
	}
	check(k == c->aud_len, "aud length");
	check(c->exp >= -MAX_SAFE && c->exp <= MAX_SAFE, "exp range");
	check(!c->has_iat || (c->iat >= -MAX_SAFE && c->iat <= MAX_SAFE),
	    "iat range");
	check(!c->has_nbf || (c->nbf >= -MAX_SAFE && c->nbf <= MAX_SAFE),
	    "nbf range");
	check(c->max_requests <= (uint64_t)MAX_SAFE, "max_requests");
	for (i = 0; i < sizeof(rules) / sizeof(rules[0]); i++)
		for (j = 0; j < sizeof(nows) / sizeof(nows[0]); j++) {
			r = token_check_claims(c, &rules[i], c->aud, nows[j]);
			check(stage2_reason(r), "stage 2 reason");
			r = token_check_claims(c, &rules[i], NULL, nows[j]);
			check(r != REASON_OK, "NULL audience accepted");
		}
	/* Its own audience, at a time it is valid, with loose rules. */
	if (!c->has_iat && !c->has_nbf && c->exp > -MAX_SAFE + 10) {
		struct token_rules loose = { NULL, 0, MAX_SAFE };

		for (i = 0, k = 0; i < c->naud; i++) {
			check(token_check_claims(c, &loose, c->aud + k,
				  c->exp - 1) == REASON_OK,
			    "own audience refused");
			k += strlen(c->aud + k) + 1;
		}
	}
}

/* Verify tok against several key sets; check the invariants. */
static void
verify_all(const char *tok, size_t len)
{
	static const struct {
		size_t off, n;
	} sets[] = { { 0, 2 }, { 0, 1 }, { 1, 1 }, { 0, 0 } };
	struct token_claims c;
	enum reason r, rj;
	size_t i;

	for (i = 0; i < sizeof(sets) / sizeof(sets[0]); i++) {
		r = token_verify_sig(keys + sets[i].off, sets[i].n, tok, len,
		    &c);
		check(stage1_reason(r), "stage 1 reason");
		rj = token_verify_jws(keys + sets[i].off, sets[i].n, tok, len);
		check(stage1_reason(rj), "jws reason");
		/* The full check is the JWS check plus claims. */
		check(r == rj ||
			(rj == REASON_OK && r == REASON_TOKEN_MALFORMED),
		    "jws and sig disagree");
		if (r == REASON_OK) {
			check(len <= TOKEN_MAX_LEN, "long token accepted");
			check(sets[i].n > 0, "accepted without keys");
			check_claims(&c);
		}
	}
}

static void
mode_sign(const char *in, size_t size)
{
	static char tok[3 * 8192];
	const char *nl = memchr(in, '\n', size);
	size_t hlen, len, i;

	if (nl == NULL)
		return;
	hlen = (size_t)(nl - in);
	for (i = 0; i < 2; i++) {
		if (token_sign(&signers[i], in, hlen, nl + 1, size - hlen - 1,
			tok, sizeof(tok), &len) == -1)
			continue;
		check(len == strlen(tok), "token_sign length");
		verify_all(tok, len);
	}
}

static void
mode_carrier(const char *in, size_t size)
{
	static const char *const names[] = { "Proxy-Authorization",
		"Authorization", "proxy-authorization", "AUTHORIZATION" };
	struct http1_hdr h[3];
	struct http1_msg m;
	char scratch[TOKEN_MAX_LEN + TOKEN_MAX_STR + 2];
	const char *tok;
	size_t len, i;
	unsigned sel;
	enum reason r;

	if (size == 0)
		return;
	sel = (unsigned char)in[0];
	in++;
	size--;
	memset(&m, 0, sizeof(m));
	m.hdrs = h;
	m.max_hdrs = 3;
	/* One or two fields carrying the value, after an unrelated one. */
	h[0].name = "Host";
	h[0].name_len = 4;
	h[0].value = "x";
	h[0].value_len = 1;
	for (i = 1; i <= 1 + ((sel >> 2) & 1); i++) {
		h[i].name = names[(sel + i) & 3];
		h[i].name_len = strlen(h[i].name);
		h[i].value = in;
		h[i].value_len = size;
	}
	m.nhdrs = i;
	r = token_from_request(&m, (int)((sel >> 3) & 1),
	    (sel & 0x20) ? "x-api-key" : NULL, scratch,
	    (sel & 0x10) ? 8 : sizeof(scratch), &tok, &len);
	check(r == REASON_OK || r == REASON_TOKEN_MISSING ||
		r == REASON_TOKEN_MALFORMED,
	    "carrier reason");
	if (r != REASON_OK) {
		check(tok == NULL && len == 0, "no token on failure");
		return;
	}
	check(len > 0, "empty token");
	check((tok >= in && tok + len <= in + size) ||
		(tok >= scratch && tok + len <= scratch + sizeof(scratch)),
	    "token outside input and scratch");
	verify_all(tok, len);
}

static void
mode_b64(const char *in, size_t size)
{
	unsigned char out[4096];
	char enc[8192];
	size_t n, m;

	if (token_b64url_decode(in, size, out, sizeof(out), &n) == -1)
		return;
	check(n <= size, "decoded longer than input");
	check(token_b64url_encode(out, n, enc, sizeof(enc), &m) == 0,
	    "re-encode");
	check(m == size && memcmp(enc, in, size) == 0, "not canonical");
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int ready;
	const char *in = (const char *)data + 1;

	if (!ready) {
		init();
		ready = 1;
	}
	if (size == 0 || size > 3 * TOKEN_MAX_LEN)
		return 0;
	switch (data[0] & 3) {
	case 0:
		verify_all(in, size - 1);
		break;
	case 1:
		mode_sign(in, size - 1);
		break;
	case 2:
		mode_carrier(in, size - 1);
		break;
	default:
		mode_b64(in, size - 1);
		break;
	}
	return 0;
}
