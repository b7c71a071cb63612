/*
 * Unit tests for proxy/token.c: strict encoding, key choice, alg rules,
 * signatures (HS256, Ed25519), claims and their types, the time and
 * audience rules with their exact boundaries, and the carriers. Tokens are
 * signed here with token_sign() and keys made with OpenSSL, so every test
 * states the bytes it feeds in.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/evp.h>

#include "proxy/token/token.h"

#define NOW 1700000000LL
#define AUD "model-proxy"

static const char hs_secret[] = "0123456789abcdef0123456789abcdef";
static const char hs_other[] = "fedcba9876543210fedcba9876543210";

/* keys[0]: HS256 "hs"; keys[1]: EdDSA "ed" (public only). */
static struct token_key keys[2];
static struct token_key hs_signer, hs_wrong, ed_signer, ed_wrong;
static EVP_PKEY *ed_priv, *ed_other;
static unsigned char ed_pub_raw[32];
static const struct token_rules rules = { "control-plane", 30, 3600 };

static char tokbuf[4608];

static EVP_PKEY *
ed_keygen(void)
{
	EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, NULL);
	EVP_PKEY *pk = NULL;

	assert_non_null(ctx);
	assert_int_equal(EVP_PKEY_keygen_init(ctx), 1);
	assert_int_equal(EVP_PKEY_keygen(ctx, &pk), 1);
	EVP_PKEY_CTX_free(ctx);
	return pk;
}

static int
setup(void **state)
{
	size_t n = sizeof(ed_pub_raw);

	(void)state;
	ed_priv = ed_keygen();
	ed_other = ed_keygen();
	assert_int_equal(EVP_PKEY_get_raw_public_key(ed_priv, ed_pub_raw, &n),
	    1);
	assert_int_equal(n, 32);

	snprintf(keys[0].tk_kid, sizeof(keys[0].tk_kid), "hs");
	keys[0].tk_alg = TOKEN_ALG_HS256;
	keys[0].tk_secret = (unsigned char *)strdup(hs_secret);
	keys[0].tk_secret_len = strlen(hs_secret);
	snprintf(keys[1].tk_kid, sizeof(keys[1].tk_kid), "ed");
	keys[1].tk_alg = TOKEN_ALG_EDDSA;
	keys[1].tk_pkey =
	    EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, ed_pub_raw, 32);
	assert_non_null(keys[1].tk_pkey);

	hs_signer = keys[0];
	hs_wrong.tk_alg = TOKEN_ALG_HS256;
	hs_wrong.tk_secret = (unsigned char *)strdup(hs_other);
	hs_wrong.tk_secret_len = strlen(hs_other);
	ed_signer.tk_alg = TOKEN_ALG_EDDSA;
	ed_signer.tk_pkey = ed_priv;
	ed_wrong.tk_alg = TOKEN_ALG_EDDSA;
	ed_wrong.tk_pkey = ed_other;
	return 0;
}

static int
teardown(void **state)
{
	(void)state;
	free(keys[0].tk_secret);
	free(hs_wrong.tk_secret);
	EVP_PKEY_free(keys[1].tk_pkey);
	EVP_PKEY_free(ed_priv);
	EVP_PKEY_free(ed_other);
	return 0;
}

/* Sign header and payload JSON with key; returns the static token. */
static const char *
sign(const struct token_key *key, const char *hdr, const char *payload)
{
	assert_int_equal(token_sign(key, hdr, strlen(hdr), payload,
			     strlen(payload), tokbuf, sizeof(tokbuf), NULL),
	    0);
	return tokbuf;
}

/* Claims with sluice's defaults; extra is inserted first (may be ""). */
static const char *
claims(const char *extra)
{
	static char buf[8192];

	snprintf(buf, sizeof(buf),
	    "{%s\"iss\":\"control-plane\",\"sub\":\"run-1\",\"aud\":\"" AUD
	    "\",\"iat\":%lld,\"exp\":%lld,\"jti\":\"j-1\"}",
	    extra, NOW, NOW + 600);
	return buf;
}

static enum reason
verify(const char *tok, struct token_claims *c)
{
	return token_verify_sig(keys, 2, tok, strlen(tok), c);
}

/* Both stages, as the daemon runs them. */
static enum reason
full(const char *tok, int64_t now)
{
	struct token_claims c;
	enum reason r;

	if ((r = verify(tok, &c)) != REASON_OK)
		return r;
	return token_check_claims(&c, &rules, AUD, now);
}

#define HS_HDR "{\"alg\":\"HS256\",\"kid\":\"hs\"}"
#define ED_HDR "{\"alg\":\"EdDSA\",\"kid\":\"ed\"}"

static void
test_valid_hs256(void **state)
{
	struct token_claims c;

	(void)state;
	assert_int_equal(verify(sign(&hs_signer, HS_HDR,
				    claims("\"max_requests\":5,")),
			     &c),
	    REASON_OK);
	assert_string_equal(c.sub, "run-1");
	assert_string_equal(c.jti, "j-1");
	assert_string_equal(c.iss, "control-plane");
	assert_true(c.has_iss);
	assert_int_equal(c.naud, 1);
	assert_string_equal(c.aud, AUD);
	assert_int_equal(c.exp, NOW + 600);
	assert_true(c.has_iat);
	assert_int_equal(c.iat, NOW);
	assert_false(c.has_nbf);
	assert_int_equal(c.max_requests, 5);
	assert_int_equal(token_check_claims(&c, &rules, AUD, NOW), REASON_OK);
}

static void
test_valid_eddsa(void **state)
{
	struct token_claims c;

	(void)state;
	assert_int_equal(verify(sign(&ed_signer, ED_HDR, claims("")), &c),
	    REASON_OK);
	assert_string_equal(c.sub, "run-1");
	assert_int_equal(c.max_requests, 0);
	assert_int_equal(full(tokbuf, NOW), REASON_OK);
	/* typ and unknown header fields are ignored. */
	sign(&ed_signer,
	    "{\"typ\":\"JWT\",\"alg\":\"EdDSA\",\"kid\":\"ed\",\"x\":[1]}",
	    claims("\"unknown\":{\"a\":[true,null,1.5]},"));
	assert_int_equal(full(tokbuf, NOW), REASON_OK);
}

static void
test_none_and_unknown_algs(void **state)
{
	static const char *const hdrs[] = {
		"{\"alg\":\"none\",\"kid\":\"hs\"}",
		"{\"alg\":\"RS256\",\"kid\":\"hs\"}",
		"{\"alg\":\"hs256\",\"kid\":\"hs\"}",
		"{\"alg\":\"HS512\",\"kid\":\"hs\"}",
		"{\"alg\":\"\",\"kid\":\"ed\"}",
		"{\"alg\":\"Ed25519\",\"kid\":\"ed\"}",
	};
	struct token_claims c;
	char tok[4700], *dot;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(hdrs) / sizeof(hdrs[0]); i++)
		assert_int_equal(verify(sign(&hs_signer, hdrs[i], claims("")),
				     &c),
		    REASON_TOKEN_UNSUPPORTED_ALG);
	/* The classic "none" token: empty signature segment. */
	sign(&hs_signer, "{\"alg\":\"none\"}", claims(""));
	snprintf(tok, sizeof(tok), "%s", tokbuf);
	dot = strrchr(tok, '.');
	dot[1] = '\0';
	assert_int_equal(token_verify_sig(keys, 1, tok, strlen(tok), &c),
	    REASON_TOKEN_UNSUPPORTED_ALG);
}

/*
 * Alg confusion: the Ed25519 public key is public, so a forger can use its
 * raw bytes as an HMAC secret. The key decides the alg, so both with and
 * without a kid the token is refused before any HMAC is computed.
 */
static void
test_alg_confusion(void **state)
{
	struct token_key confused = { .tk_alg = TOKEN_ALG_HS256 };
	struct token_claims c;

	(void)state;
	confused.tk_secret = ed_pub_raw;
	confused.tk_secret_len = sizeof(ed_pub_raw);
	sign(&confused, "{\"alg\":\"HS256\",\"kid\":\"ed\"}", claims(""));
	assert_int_equal(verify(tokbuf, &c), REASON_TOKEN_UNSUPPORTED_ALG);
	sign(&confused, "{\"alg\":\"HS256\"}", claims(""));
	assert_int_equal(token_verify_sig(&keys[1], 1, tokbuf, strlen(tokbuf),
			     &c),
	    REASON_TOKEN_UNSUPPORTED_ALG);
	/* And the other way round: EdDSA claimed for the HS256 key. */
	sign(&ed_signer, "{\"alg\":\"EdDSA\",\"kid\":\"hs\"}", claims(""));
	assert_int_equal(verify(tokbuf, &c), REASON_TOKEN_UNSUPPORTED_ALG);
}

/* Replace the signature segment of tokbuf with b64url(n bytes of v). */
static const char *
with_sig(size_t n, unsigned char v)
{
	static char tok[4700];
	unsigned char sig[128];
	char *dot;

	memset(sig, v, n);
	snprintf(tok, sizeof(tok), "%s", tokbuf);
	dot = strrchr(tok, '.');
	assert_int_equal(token_b64url_encode(sig, n, dot + 1,
			     sizeof(tok) - (size_t)(dot + 1 - tok), NULL),
	    0);
	return tok;
}

static void
test_wrong_key(void **state)
{
	struct token_claims c;

	(void)state;
	assert_int_equal(verify(sign(&hs_wrong, HS_HDR, claims("")), &c),
	    REASON_TOKEN_BAD_SIGNATURE);
	assert_int_equal(verify(sign(&ed_wrong, ED_HDR, claims("")), &c),
	    REASON_TOKEN_BAD_SIGNATURE);
	/* Wrong signature lengths are bad signatures. */
	sign(&hs_signer, HS_HDR, claims(""));
	assert_int_equal(verify(with_sig(31, 0), &c),
	    REASON_TOKEN_BAD_SIGNATURE);
	assert_int_equal(verify(with_sig(33, 0), &c),
	    REASON_TOKEN_BAD_SIGNATURE);
	assert_int_equal(verify(with_sig(0, 0), &c),
	    REASON_TOKEN_BAD_SIGNATURE);
	assert_int_equal(verify(with_sig(32, 0), &c),
	    REASON_TOKEN_BAD_SIGNATURE);
	sign(&ed_signer, ED_HDR, claims(""));
	assert_int_equal(verify(with_sig(32, 1), &c),
	    REASON_TOKEN_BAD_SIGNATURE);
	assert_int_equal(verify(with_sig(64, 1), &c),
	    REASON_TOKEN_BAD_SIGNATURE);
	assert_int_equal(verify(with_sig(65, 1), &c),
	    REASON_TOKEN_BAD_SIGNATURE);
	/* A single flipped bit anywhere in the signed input. */
	sign(&hs_signer, HS_HDR, claims(""));
	tokbuf[5] ^= 0x01;
	assert_int_not_equal(verify(tokbuf, &c), REASON_OK);
}

static void
test_kid_rules(void **state)
{
	struct token_claims c;
	char longkid[200];

	(void)state;
	/* No kid: fine with one key, unknown with several. */
	sign(&hs_signer, "{\"alg\":\"HS256\"}", claims(""));
	assert_int_equal(token_verify_sig(keys, 1, tokbuf, strlen(tokbuf), &c),
	    REASON_OK);
	assert_int_equal(verify(tokbuf, &c), REASON_TOKEN_UNKNOWN_KID);
	assert_int_equal(token_verify_sig(keys, 0, tokbuf, strlen(tokbuf), &c),
	    REASON_TOKEN_UNKNOWN_KID);
	sign(&hs_signer, "{\"alg\":\"HS256\",\"kid\":\"nope\"}", claims(""));
	assert_int_equal(verify(tokbuf, &c), REASON_TOKEN_UNKNOWN_KID);
	/* kid matching is exact. */
	sign(&hs_signer, "{\"alg\":\"HS256\",\"kid\":\"HS\"}", claims(""));
	assert_int_equal(verify(tokbuf, &c), REASON_TOKEN_UNKNOWN_KID);
	/* Malformed kids. */
	sign(&hs_signer, "{\"alg\":\"HS256\",\"kid\":1}", claims(""));
	assert_int_equal(verify(tokbuf, &c), REASON_TOKEN_MALFORMED);
	sign(&hs_signer, "{\"alg\":\"HS256\",\"kid\":\"\"}", claims(""));
	assert_int_equal(verify(tokbuf, &c), REASON_TOKEN_MALFORMED);
	memset(longkid, 'k', 129);
	longkid[129] = '\0';
	{
		char hdr[300];

		snprintf(hdr, sizeof(hdr), "{\"alg\":\"HS256\",\"kid\":\"%s\"}",
		    longkid);
		sign(&hs_signer, hdr, claims(""));
		assert_int_equal(verify(tokbuf, &c), REASON_TOKEN_MALFORMED);
	}
}

static void
test_header_rules(void **state)
{
	struct token_claims c;

	(void)state;
	sign(&hs_signer,
	    "{\"alg\":\"HS256\",\"kid\":\"hs\",\"crit\":[\"b64\"]}",
	    claims(""));
	assert_int_equal(verify(tokbuf, &c), REASON_TOKEN_MALFORMED);
	sign(&hs_signer, "{\"alg\":\"HS256\",\"kid\":\"hs\",\"crit\":[]}",
	    claims(""));
	assert_int_equal(verify(tokbuf, &c), REASON_TOKEN_MALFORMED);
	sign(&hs_signer, "{\"kid\":\"hs\"}", claims(""));
	assert_int_equal(verify(tokbuf, &c), REASON_TOKEN_MALFORMED);
	sign(&hs_signer, "{\"alg\":256,\"kid\":\"hs\"}", claims(""));
	assert_int_equal(verify(tokbuf, &c), REASON_TOKEN_MALFORMED);
	/* Member names are case-sensitive: "ALG" is not "alg". */
	sign(&hs_signer, "{\"ALG\":\"HS256\",\"kid\":\"hs\"}", claims(""));
	assert_int_equal(verify(tokbuf, &c), REASON_TOKEN_MALFORMED);
	sign(&hs_signer, "[\"HS256\"]", claims(""));
	assert_int_equal(verify(tokbuf, &c), REASON_TOKEN_MALFORMED);
}

static void
test_segments(void **state)
{
	struct token_claims c;
	char tok[4700];

	(void)state;
	sign(&hs_signer, HS_HDR, claims(""));
	/* Two segments: drop the signature. */
	snprintf(tok, sizeof(tok), "%s", tokbuf);
	*strrchr(tok, '.') = '\0';
	assert_int_equal(verify(tok, &c), REASON_TOKEN_MALFORMED);
	/* Four segments (JWE-like). */
	snprintf(tok, sizeof(tok), "%s.AAAA", tokbuf);
	assert_int_equal(verify(tok, &c), REASON_TOKEN_MALFORMED);
	snprintf(tok, sizeof(tok), "%s.", tokbuf);
	assert_int_equal(verify(tok, &c), REASON_TOKEN_MALFORMED);
	/* Empty, dots only, one segment. */
	assert_int_equal(token_verify_sig(keys, 2, "", 0, &c),
	    REASON_TOKEN_MALFORMED);
	assert_int_equal(verify("..", &c), REASON_TOKEN_MALFORMED);
	assert_int_equal(verify("abc", &c), REASON_TOKEN_MALFORMED);
	assert_int_equal(token_verify_sig(keys, 2, NULL, 0, &c),
	    REASON_TOKEN_MALFORMED);
	/* len is what counts: a token cut short by len fails. */
	assert_int_not_equal(token_verify_sig(keys, 2, tokbuf,
				 strlen(tokbuf) - 1, &c),
	    REASON_OK);
}

/*
 * The size limit, exactly: find a filler for which the token is 4096
 * bytes (accepted), then one byte more is refused whatever it says.
 */
static void
test_size_limit(void **state)
{
	struct token_claims c;
	char extra[4096], hdr[128], tok[4700];
	size_t fill, pad, len;
	int found = 0;

	(void)state;
	for (pad = 0; pad < 4 && !found; pad++) {
		snprintf(hdr, sizeof(hdr),
		    "{\"alg\":\"HS256\",\"kid\":\"hs\",\"typ\":\"%.*s\"}",
		    (int)pad, "JWTX");
		for (fill = 2820; fill < 2920 && !found; fill++) {
			snprintf(extra, sizeof(extra), "\"f\":\"%*s\",",
			    (int)fill, "");
			sign(&hs_signer, hdr, claims(extra));
			len = strlen(tokbuf);
			if (len == TOKEN_MAX_LEN)
				found = 1;
		}
	}
	assert_true(found);
	assert_int_equal(verify(tokbuf, &c), REASON_OK);
	snprintf(tok, sizeof(tok), "%sA", tokbuf);
	assert_int_equal(strlen(tok), TOKEN_MAX_LEN + 1);
	assert_int_equal(verify(tok, &c), REASON_TOKEN_MALFORMED);
}

/* Make the last character of [p, p+n) non-canonical (low bits set). */
static void
noncanon(char *p, size_t n)
{
	static const char alpha[] =
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	const char *at = strchr(alpha, p[n - 1]);

	assert_non_null(at);
	assert_int_not_equal(n % 4, 0);
	p[n - 1] = alpha[(at - alpha) | 1];
}

static void
test_base64_strict(void **state)
{
	struct token_claims c;
	char tok[4700], *d1, *d2;

	(void)state;
	sign(&hs_signer, HS_HDR, claims(""));
	d1 = strchr(tokbuf, '.');
	d2 = strrchr(tokbuf, '.');

	/* Padding on the header segment. */
	snprintf(tok, sizeof(tok), "%.*s==%s", (int)(d1 - tokbuf), tokbuf, d1);
	assert_int_equal(verify(tok, &c), REASON_TOKEN_MALFORMED);
	/* Padding on the signature (43 chars + "="). */
	snprintf(tok, sizeof(tok), "%s=", tokbuf);
	assert_int_equal(verify(tok, &c), REASON_TOKEN_MALFORMED);
	/* Non-canonical last character of the signature: malformed, not a
	 * bad signature, although it decodes to the same bytes. */
	snprintf(tok, sizeof(tok), "%s", tokbuf);
	noncanon(tok + (d2 - tokbuf) + 1, strlen(d2 + 1));
	assert_int_equal(verify(tok, &c), REASON_TOKEN_MALFORMED);
	/* The standard alphabet is not base64url. */
	snprintf(tok, sizeof(tok), "%s", tokbuf);
	tok[(d2 - tokbuf) + 1] = '+';
	assert_int_equal(verify(tok, &c), REASON_TOKEN_MALFORMED);
	/* A blank inside a token. */
	snprintf(tok, sizeof(tok), "%s", tokbuf);
	tok[3] = ' ';
	assert_int_equal(verify(tok, &c), REASON_TOKEN_MALFORMED);
	/* length % 4 == 1 in the header. */
	{
		size_t hl = (size_t)(d1 - tokbuf);
		size_t k = (5 - hl % 4) % 4;

		snprintf(tok, sizeof(tok), "%.*s%.*s%s", (int)hl, tokbuf,
		    (int)(k == 0 ? 4 : k), "AAAA", d1);
		assert_int_equal((size_t)(strchr(tok, '.') - tok) % 4, 1);
	}
	assert_int_equal(verify(tok, &c), REASON_TOKEN_MALFORMED);
}

static void
test_b64url_codec(void **state)
{
	unsigned char out[16];
	char enc[32];
	size_t n;

	(void)state;
	assert_int_equal(token_b64url_decode("", 0, out, sizeof(out), &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(token_b64url_decode("A", 1, out, sizeof(out), &n), -1);
	assert_int_equal(token_b64url_decode("AA", 2, out, sizeof(out), &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(token_b64url_decode("AB", 2, out, sizeof(out), &n),
	    -1);
	assert_int_equal(token_b64url_decode("AAE", 3, out, sizeof(out), &n),
	    0);
	assert_int_equal(token_b64url_decode("AAF", 3, out, sizeof(out), &n),
	    -1);
	assert_int_equal(token_b64url_decode("AA==", 4, out, sizeof(out), &n),
	    -1);
	assert_int_equal(token_b64url_decode("-_-_", 4, out, sizeof(out), &n),
	    0);
	assert_int_equal(n, 3);
	assert_memory_equal(out, "\xfb\xff\xbf", 3);
	assert_int_equal(token_b64url_decode("+/+/", 4, out, sizeof(out), &n),
	    -1);
	/* cap is respected. */
	assert_int_equal(token_b64url_decode("AAAAAAAA", 8, out, 5, &n), -1);
	assert_int_equal(token_b64url_encode((const unsigned char *)"\xfb\xff",
			     2, enc, sizeof(enc), &n),
	    0);
	assert_string_equal(enc, "-_8");
	assert_int_equal(token_b64url_encode((const unsigned char *)"abc", 3,
			     enc, 4, &n),
	    -1);
}

static void
test_duplicate_keys(void **state)
{
	struct token_claims c;

	(void)state;
	sign(&hs_signer, "{\"alg\":\"HS256\",\"kid\":\"hs\",\"alg\":\"HS256\"}",
	    claims(""));
	assert_int_equal(verify(tokbuf, &c), REASON_TOKEN_MALFORMED);
	sign(&hs_signer, HS_HDR, claims("\"sub\":\"other\","));
	assert_int_equal(verify(tokbuf, &c), REASON_TOKEN_MALFORMED);
	/* Same name after unescaping. */
	sign(&hs_signer, HS_HDR, claims("\"\\u0073ub\":\"other\","));
	assert_int_equal(verify(tokbuf, &c), REASON_TOKEN_MALFORMED);
	sign(&hs_signer, HS_HDR, claims("\"aud\":[\"x\"],"));
	assert_int_equal(verify(tokbuf, &c), REASON_TOKEN_MALFORMED);
	/* In a nested object too. */
	sign(&hs_signer, HS_HDR, claims("\"x\":{\"a\":1,\"a\":2},"));
	assert_int_equal(verify(tokbuf, &c), REASON_TOKEN_MALFORMED);
	/* Same member name in sibling objects is fine. */
	sign(&hs_signer, HS_HDR, claims("\"x\":[{\"a\":1},{\"a\":2}],"));
	assert_int_equal(verify(tokbuf, &c), REASON_OK);
	/* Many sibling containers, each non-empty, at several depths. */
	{
		char extra[2048];
		size_t o = 0;
		int i;

		for (i = 0; i < 40; i++)
			o += (size_t)snprintf(extra + o, sizeof(extra) - o,
			    "\"o%d\":{\"k\":[[%d],{\"k\":{\"z\":1}}]},", i, i);
		sign(&hs_signer, HS_HDR, claims(extra));
		assert_int_equal(verify(tokbuf, &c), REASON_OK);
		/* ... and a duplicate deep in the last of them. */
		snprintf(extra + o, sizeof(extra) - o,
		    "\"p\":[{},[{\"q\":{\"z\":1,\"y\":2,\"z\":3}}]],");
		sign(&hs_signer, HS_HDR, claims(extra));
		assert_int_equal(verify(tokbuf, &c), REASON_TOKEN_MALFORMED);
	}
	/* A header of hundreds of members is handled (and has no kid). */
	{
		char hdr[3000];
		size_t o = 0;
		int i;

		o += (size_t)snprintf(hdr, sizeof(hdr), "{\"alg\":\"HS256\"");
		for (i = 0; i < 300; i++)
			o += (size_t)snprintf(hdr + o, sizeof(hdr) - o,
			    ",\"%x\":0", i);
		snprintf(hdr + o, sizeof(hdr) - o, "}");
		sign(&hs_signer, hdr, "{}");
		assert_int_equal(verify(tokbuf, &c), REASON_TOKEN_UNKNOWN_KID);
		snprintf(hdr + o, sizeof(hdr) - o, ",\"1\":0}");
		sign(&hs_signer, hdr, "{}");
		assert_int_equal(verify(tokbuf, &c), REASON_TOKEN_MALFORMED);
	}
}

static void
test_bad_json(void **state)
{
	static const char *const payloads[] = {
		"not json",
		"",
		"[1,2]",
		"\"str\"",
		"{\"sub\":\"run-1\"",
		"{\"sub\":\"run-1\"} x",
		"{\"sub\":\"run-1\",}",
		"{\"exp\":01,\"sub\":\"a\",\"jti\":\"b\",\"aud\":\"" AUD "\"}",
		"{\"exp\":+1,\"sub\":\"a\",\"jti\":\"b\",\"aud\":\"" AUD "\"}",
		"{\"exp\":1.,\"sub\":\"a\",\"jti\":\"b\",\"aud\":\"" AUD "\"}",
		"\xef\xbb\xbf{\"exp\":1,\"sub\":\"a\",\"jti\":\"b\",\"aud\":\"x\"}",
		"{\"exp\":1,\"sub\":\"a\\u0000b\",\"jti\":\"b\",\"aud\":\"x\"}",
		"{\"exp\":1,\"sub\":\"a\\uZZZZ\",\"jti\":\"b\",\"aud\":\"x\"}",
		"{\"exp\":1,\"sub\":\"a\\ud800\",\"jti\":\"b\",\"aud\":\"x\"}",
		"{\"exp\":1,\"sub\":\"a\\x\",\"jti\":\"b\",\"aud\":\"x\"}",
		"{\"exp\":1,\"sub\":\"a\tb\",\"jti\":\"b\",\"aud\":\"x\"}",
		"{\"exp\":1,\"sub\":\"\xc3\x28\",\"jti\":\"b\",\"aud\":\"x\"}",
		"{\"exp\":1,\"sub\":\"\xed\xa0\x80\",\"jti\":\"b\",\"aud\":\"x\"}",
		"{\"exp\":1,\"sub\":\"\xc0\xaf\",\"jti\":\"b\",\"aud\":\"x\"}",
		"{\"exp\":1,\"sub\":\"a\",\"jti\":\"b\",\"aud\":\"x\",\"t\":tru}",
		"{\"d\":[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]}",
		"{'sub':'a'}",
	};
	struct token_claims c;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(payloads) / sizeof(payloads[0]); i++) {
		sign(&hs_signer, HS_HDR, payloads[i]);
		assert_int_equal(verify(tokbuf, &c), REASON_TOKEN_MALFORMED);
	}
	/* A header that is not JSON. */
	sign(&hs_signer, "alg=HS256", claims(""));
	assert_int_equal(verify(tokbuf, &c), REASON_TOKEN_MALFORMED);
	/* Valid escapes, UTF-8 and a moderate depth are fine. */
	sign(&hs_signer, HS_HDR,
	    claims("\"n\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00 "
		   "\xc3\xa9\xf0\x9f\x98\x80\",\"d\":[[[{\"e\":-0.5e+3}]]],"));
	assert_int_equal(verify(tokbuf, &c), REASON_OK);
}

/*
 * The signature is checked before the claims are read: garbage claims
 * under a wrong signature are a bad signature, not a malformed token.
 */
static void
test_signature_first(void **state)
{
	struct token_claims c;

	(void)state;
	sign(&hs_wrong, HS_HDR, "garbage");
	assert_int_equal(verify(tokbuf, &c), REASON_TOKEN_BAD_SIGNATURE);
	sign(&hs_signer, HS_HDR, "garbage");
	assert_int_equal(verify(tokbuf, &c), REASON_TOKEN_MALFORMED);
	/* A failed verification leaves no claims behind. */
	assert_string_equal(c.sub, "");
	assert_int_equal(c.naud, 0);
}

static void
test_claim_types(void **state)
{
	static const struct {
		const char *payload;
		enum reason want;
	} cases[] = {
		/* exp */
		{ "{\"sub\":\"a\",\"jti\":\"b\",\"aud\":\"x\"}",
		    REASON_TOKEN_MALFORMED },
		{ "{\"exp\":\"1700000600\",\"sub\":\"a\",\"jti\":\"b\","
		  "\"aud\":\"x\"}",
		    REASON_TOKEN_MALFORMED },
		{ "{\"exp\":1700000600.5,\"sub\":\"a\",\"jti\":\"b\","
		  "\"aud\":\"x\"}",
		    REASON_TOKEN_MALFORMED },
		{ "{\"exp\":9007199254740992,\"sub\":\"a\",\"jti\":\"b\","
		  "\"aud\":\"x\"}",
		    REASON_TOKEN_MALFORMED },
		{ "{\"exp\":null,\"sub\":\"a\",\"jti\":\"b\",\"aud\":\"x\"}",
		    REASON_TOKEN_MALFORMED },
		{ "{\"exp\":9007199254740991,\"sub\":\"a\",\"jti\":\"b\","
		  "\"aud\":\"x\"}",
		    REASON_OK },
		{ "{\"exp\":17e8,\"sub\":\"a\",\"jti\":\"b\",\"aud\":\"x\"}",
		    REASON_OK },
		/* aud */
		{ "{\"exp\":1,\"sub\":\"a\",\"jti\":\"b\"}",
		    REASON_TOKEN_MALFORMED },
		{ "{\"exp\":1,\"sub\":\"a\",\"jti\":\"b\",\"aud\":7}",
		    REASON_TOKEN_MALFORMED },
		{ "{\"exp\":1,\"sub\":\"a\",\"jti\":\"b\",\"aud\":[]}",
		    REASON_TOKEN_MALFORMED },
		{ "{\"exp\":1,\"sub\":\"a\",\"jti\":\"b\",\"aud\":[7]}",
		    REASON_TOKEN_MALFORMED },
		{ "{\"exp\":1,\"sub\":\"a\",\"jti\":\"b\",\"aud\":\"\"}",
		    REASON_TOKEN_MALFORMED },
		{ "{\"exp\":1,\"sub\":\"a\",\"jti\":\"b\",\"aud\":{}}",
		    REASON_TOKEN_MALFORMED },
		{ "{\"exp\":1,\"sub\":\"a\",\"jti\":\"b\",\"aud\":[\"1\",\"2\","
		  "\"3\",\"4\",\"5\",\"6\",\"7\",\"8\"]}",
		    REASON_OK },
		/* No cap of its own on aud entries (test_many_audiences). */
		{ "{\"exp\":1,\"sub\":\"a\",\"jti\":\"b\",\"aud\":[\"1\",\"2\","
		  "\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\"]}",
		    REASON_OK },
		{ "{\"exp\":1,\"sub\":\"a\",\"jti\":\"b\",\"aud\":[\"1\",2]}",
		    REASON_TOKEN_MALFORMED },
		{ "{\"exp\":1,\"sub\":\"a\",\"jti\":\"b\",\"aud\":[\"1\",\"\"]}",
		    REASON_TOKEN_MALFORMED },
		/* sub, jti */
		{ "{\"exp\":1,\"jti\":\"b\",\"aud\":\"x\"}",
		    REASON_TOKEN_MALFORMED },
		{ "{\"exp\":1,\"sub\":\"a\",\"aud\":\"x\"}",
		    REASON_TOKEN_MALFORMED },
		{ "{\"exp\":1,\"sub\":\"\",\"jti\":\"b\",\"aud\":\"x\"}",
		    REASON_TOKEN_MALFORMED },
		{ "{\"exp\":1,\"sub\":\"a\",\"jti\":5,\"aud\":\"x\"}",
		    REASON_TOKEN_MALFORMED },
		{ "{\"exp\":1,\"sub\":\"a\\u0001\",\"jti\":\"b\",\"aud\":\"x\"}",
		    REASON_TOKEN_MALFORMED },
		/* iat, nbf, iss */
		{ "{\"exp\":1,\"sub\":\"a\",\"jti\":\"b\",\"aud\":\"x\","
		  "\"iat\":\"1\"}",
		    REASON_TOKEN_MALFORMED },
		{ "{\"exp\":1,\"sub\":\"a\",\"jti\":\"b\",\"aud\":\"x\","
		  "\"nbf\":true}",
		    REASON_TOKEN_MALFORMED },
		{ "{\"exp\":1,\"sub\":\"a\",\"jti\":\"b\",\"aud\":\"x\","
		  "\"iss\":1}",
		    REASON_TOKEN_MALFORMED },
		{ "{\"exp\":1,\"sub\":\"a\",\"jti\":\"b\",\"aud\":\"x\","
		  "\"iss\":\"\"}",
		    REASON_TOKEN_MALFORMED },
		/* max_requests */
		{ "{\"exp\":1,\"sub\":\"a\",\"jti\":\"b\",\"aud\":\"x\","
		  "\"max_requests\":0}",
		    REASON_TOKEN_MALFORMED },
		{ "{\"exp\":1,\"sub\":\"a\",\"jti\":\"b\",\"aud\":\"x\","
		  "\"max_requests\":-1}",
		    REASON_TOKEN_MALFORMED },
		{ "{\"exp\":1,\"sub\":\"a\",\"jti\":\"b\",\"aud\":\"x\","
		  "\"max_requests\":2.5}",
		    REASON_TOKEN_MALFORMED },
		{ "{\"exp\":1,\"sub\":\"a\",\"jti\":\"b\",\"aud\":\"x\","
		  "\"max_requests\":\"3\"}",
		    REASON_TOKEN_MALFORMED },
		{ "{\"exp\":1,\"sub\":\"a\",\"jti\":\"b\",\"aud\":\"x\","
		  "\"max_requests\":1}",
		    REASON_OK },
	};
	struct token_claims c;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		sign(&hs_signer, HS_HDR, cases[i].payload);
		if (verify(tokbuf, &c) != cases[i].want)
			fail_msg("case %zu (%s): got %s", i, cases[i].payload,
			    reason_name(verify(tokbuf, &c)));
	}
}

static void
test_string_lengths(void **state)
{
	char extra[512], s128[129], s129[130];
	struct token_claims c;

	(void)state;
	memset(s128, 's', 128);
	s128[128] = '\0';
	memset(s129, 's', 129);
	s129[129] = '\0';
	snprintf(extra, sizeof(extra),
	    "{\"exp\":1,\"sub\":\"%s\",\"jti\":\"%s\",\"aud\":\"%s\"}", s128,
	    s128, s128);
	sign(&hs_signer, HS_HDR, extra);
	assert_int_equal(verify(tokbuf, &c), REASON_OK);
	assert_int_equal(strlen(c.sub), 128);
	snprintf(extra, sizeof(extra),
	    "{\"exp\":1,\"sub\":\"%s\",\"jti\":\"b\",\"aud\":\"x\"}", s129);
	sign(&hs_signer, HS_HDR, extra);
	assert_int_equal(verify(tokbuf, &c), REASON_TOKEN_MALFORMED);
	snprintf(extra, sizeof(extra),
	    "{\"exp\":1,\"sub\":\"a\",\"jti\":\"%s\",\"aud\":\"x\"}", s129);
	sign(&hs_signer, HS_HDR, extra);
	assert_int_equal(verify(tokbuf, &c), REASON_TOKEN_MALFORMED);
}

/*
 * No cap on the number of audiences below the token's size (issue 13):
 * 300 of them fit in 4096 bytes, every one is accepted, and one more
 * byte than the limit allows is refused as too long.
 */
static void
test_many_audiences(void **state)
{
	static char payload[4096];
	struct token_rules lax = { NULL, 30, 3600 };
	struct token_claims c;
	size_t i, n;
	char aud[16];

	(void)state;
	n = (size_t)snprintf(payload, sizeof(payload),
	    "{\"exp\":%lld,\"sub\":\"a\",\"jti\":\"b\",\"aud\":[",
	    (long long)NOW + 600);
	for (i = 0; i < 300; i++)
		n += (size_t)snprintf(payload + n, sizeof(payload) - n,
		    "%s\"a%zu\"", i > 0 ? "," : "", i);
	snprintf(payload + n, sizeof(payload) - n, "]}");
	sign(&hs_signer, HS_HDR, payload);
	assert_true(strlen(tokbuf) <= TOKEN_MAX_LEN);
	assert_int_equal(verify(tokbuf, &c), REASON_OK);
	assert_int_equal(c.naud, 300);
	for (i = 0; i < 300; i += 37) {
		snprintf(aud, sizeof(aud), "a%zu", i);
		assert_int_equal(token_check_claims(&c, &lax, aud, NOW),
		    REASON_OK);
	}
	assert_int_equal(token_check_claims(&c, &lax, "a299", NOW), REASON_OK);
	assert_int_equal(token_check_claims(&c, &lax, "a300", NOW),
	    REASON_TOKEN_WRONG_AUDIENCE);
	assert_int_equal(token_check_claims(&c, &lax, "a", NOW),
	    REASON_TOKEN_WRONG_AUDIENCE);
	/* The add helper refuses what a claim may not be. */
	memset(&c, 0, sizeof(c));
	assert_int_equal(token_claims_add_aud(&c, ""), -1);
	assert_int_equal(token_claims_add_aud(&c, "a\tb"), -1);
	for (i = 0; token_claims_add_aud(&c, "0123456789abcdef") == 0; i++)
		;
	assert_int_equal(i, TOKEN_AUD_BYTES / 17);
	assert_int_equal(c.naud, i);
}

/* Stage-2 helpers: claims built directly, no signature involved. */
static struct token_claims
base_claims(void)
{
	struct token_claims c;

	memset(&c, 0, sizeof(c));
	snprintf(c.sub, sizeof(c.sub), "run-1");
	snprintf(c.jti, sizeof(c.jti), "j-1");
	snprintf(c.iss, sizeof(c.iss), "control-plane");
	c.has_iss = 1;
	assert_int_equal(token_claims_add_aud(&c, AUD), 0);
	c.iat = NOW;
	c.has_iat = 1;
	c.exp = NOW + 600;
	return c;
}

static void
test_issuer(void **state)
{
	struct token_claims c = base_claims();
	struct token_rules noiss = { NULL, 30, 3600 };

	(void)state;
	assert_int_equal(token_check_claims(&c, &rules, AUD, NOW), REASON_OK);
	snprintf(c.iss, sizeof(c.iss), "control-plane2");
	assert_int_equal(token_check_claims(&c, &rules, AUD, NOW),
	    REASON_TOKEN_WRONG_ISSUER);
	assert_int_equal(token_check_claims(&c, &noiss, AUD, NOW), REASON_OK);
	c.has_iss = 0;
	c.iss[0] = '\0';
	assert_int_equal(token_check_claims(&c, &rules, AUD, NOW),
	    REASON_TOKEN_WRONG_ISSUER);
	assert_int_equal(token_check_claims(&c, &noiss, AUD, NOW), REASON_OK);
	/* End to end: a signed token without iss. */
	sign(&hs_signer, HS_HDR,
	    "{\"exp\":1700000600,\"sub\":\"a\",\"jti\":\"b\",\"aud\":\"" AUD
	    "\"}");
	assert_int_equal(full(tokbuf, NOW), REASON_TOKEN_WRONG_ISSUER);
}

static void
test_expiry_boundaries(void **state)
{
	struct token_claims c = base_claims();
	struct token_rules r0 = { "control-plane", 0, 3600 };

	(void)state;
	/* now == exp + leeway is expired; one second earlier is not. */
	assert_int_equal(token_check_claims(&c, &rules, AUD, c.exp + 30),
	    REASON_TOKEN_EXPIRED);
	assert_int_equal(token_check_claims(&c, &rules, AUD, c.exp + 29),
	    REASON_OK);
	assert_int_equal(token_check_claims(&c, &r0, AUD, c.exp),
	    REASON_TOKEN_EXPIRED);
	assert_int_equal(token_check_claims(&c, &r0, AUD, c.exp - 1),
	    REASON_OK);
	/* Signed, end to end. */
	sign(&ed_signer, ED_HDR, claims(""));
	assert_int_equal(full(tokbuf, NOW + 600 + 30), REASON_TOKEN_EXPIRED);
	assert_int_equal(full(tokbuf, NOW + 600 + 29), REASON_OK);
}

static void
test_not_yet_valid(void **state)
{
	struct token_claims c = base_claims();
	struct token_rules r0 = { "control-plane", 0, 3600 };

	(void)state;
	/* nbf: valid from now + leeway on; one more second is too early. */
	c.has_nbf = 1;
	c.nbf = NOW + 30;
	assert_int_equal(token_check_claims(&c, &rules, AUD, NOW), REASON_OK);
	c.nbf = NOW + 31;
	assert_int_equal(token_check_claims(&c, &rules, AUD, NOW),
	    REASON_TOKEN_NOT_YET_VALID);
	c.nbf = NOW + 1;
	assert_int_equal(token_check_claims(&c, &r0, AUD, NOW),
	    REASON_TOKEN_NOT_YET_VALID);
	c.nbf = NOW;
	assert_int_equal(token_check_claims(&c, &r0, AUD, NOW), REASON_OK);
	/* iat in the future, likewise. */
	c = base_claims();
	c.iat = NOW + 30;
	assert_int_equal(token_check_claims(&c, &rules, AUD, NOW), REASON_OK);
	c.iat = NOW + 31;
	assert_int_equal(token_check_claims(&c, &rules, AUD, NOW),
	    REASON_TOKEN_NOT_YET_VALID);
	c.iat = NOW + 1;
	assert_int_equal(token_check_claims(&c, &r0, AUD, NOW),
	    REASON_TOKEN_NOT_YET_VALID);
	/* Signed, end to end. */
	sign(&hs_signer, HS_HDR, claims("\"nbf\":1700000100,"));
	assert_int_equal(full(tokbuf, NOW), REASON_TOKEN_NOT_YET_VALID);
	assert_int_equal(full(tokbuf, NOW + 70), REASON_OK);
}

static void
test_lifetime(void **state)
{
	struct token_claims c = base_claims();

	(void)state;
	c.exp = c.iat + 3600;
	assert_int_equal(token_check_claims(&c, &rules, AUD, NOW), REASON_OK);
	c.exp = c.iat + 3601;
	assert_int_equal(token_check_claims(&c, &rules, AUD, NOW),
	    REASON_TOKEN_LIFETIME_TOO_LONG);
	/* Without iat, from now. */
	c.has_iat = 0;
	c.exp = NOW + 3600;
	assert_int_equal(token_check_claims(&c, &rules, AUD, NOW), REASON_OK);
	c.exp = NOW + 3601;
	assert_int_equal(token_check_claims(&c, &rules, AUD, NOW),
	    REASON_TOKEN_LIFETIME_TOO_LONG);
	assert_int_equal(token_check_claims(&c, &rules, AUD, NOW + 1),
	    REASON_OK);
}

static void
test_audience(void **state)
{
	struct token_claims c = base_claims();

	(void)state;
	assert_int_equal(token_check_claims(&c, &rules, "other", NOW),
	    REASON_TOKEN_WRONG_AUDIENCE);
	assert_int_equal(token_check_claims(&c, &rules, NULL, NOW),
	    REASON_TOKEN_WRONG_AUDIENCE);
	/* Exact match only. */
	assert_int_equal(token_check_claims(&c, &rules, "model-prox", NOW),
	    REASON_TOKEN_WRONG_AUDIENCE);
	assert_int_equal(token_check_claims(&c, &rules, "Model-Proxy", NOW),
	    REASON_TOKEN_WRONG_AUDIENCE);
	/* Array: any element. */
	sign(&hs_signer, HS_HDR,
	    "{\"iss\":\"control-plane\",\"exp\":1700000600,\"sub\":\"a\","
	    "\"jti\":\"b\",\"aud\":[\"a\",\"" AUD "\",\"c\"]}");
	assert_int_equal(verify(tokbuf, &c), REASON_OK);
	assert_int_equal(c.naud, 3);
	assert_int_equal(token_check_claims(&c, &rules, AUD, NOW), REASON_OK);
	assert_int_equal(token_check_claims(&c, &rules, "c", NOW), REASON_OK);
	assert_int_equal(token_check_claims(&c, &rules, "d", NOW),
	    REASON_TOKEN_WRONG_AUDIENCE);
}

/* The order of stage 2: issuer, expiry, nbf/iat, lifetime, audience. */
static void
test_stage2_order(void **state)
{
	struct token_claims c = base_claims();

	(void)state;
	snprintf(c.iss, sizeof(c.iss), "x");
	c.exp = NOW - 100;
	assert_int_equal(token_check_claims(&c, &rules, "nope", NOW),
	    REASON_TOKEN_WRONG_ISSUER);
	c = base_claims();
	c.exp = NOW - 100;
	c.nbf = NOW + 100;
	c.has_nbf = 1;
	assert_int_equal(token_check_claims(&c, &rules, "nope", NOW),
	    REASON_TOKEN_EXPIRED);
	c = base_claims();
	c.iat = NOW + 100;
	c.exp = NOW + 100000;
	assert_int_equal(token_check_claims(&c, &rules, "nope", NOW),
	    REASON_TOKEN_NOT_YET_VALID);
	c = base_claims();
	c.exp = NOW + 100000;
	assert_int_equal(token_check_claims(&c, &rules, "nope", NOW),
	    REASON_TOKEN_LIFETIME_TOO_LONG);
	/* Extreme values stay defined (UBSan checks the arithmetic). */
	c = base_claims();
	c.exp = INT64_MAX;
	c.has_iat = 0;
	assert_int_equal(token_check_claims(&c, &rules, AUD, INT64_MAX - 1),
	    REASON_OK);
	assert_int_equal(token_check_claims(&c, &rules, AUD, INT64_MIN),
	    REASON_TOKEN_LIFETIME_TOO_LONG);
	c.exp = INT64_MIN;
	assert_int_equal(token_check_claims(&c, &rules, AUD, INT64_MAX),
	    REASON_TOKEN_EXPIRED);
}

/* A request head built by hand: name/value pairs. */
static struct http1_msg
head(struct http1_hdr *h, size_t n, const char *const *nv)
{
	struct http1_msg m;
	size_t i;

	memset(&m, 0, sizeof(m));
	for (i = 0; i < n; i++) {
		h[i].name = nv[2 * i];
		h[i].name_len = strlen(nv[2 * i]);
		h[i].value = nv[2 * i + 1];
		h[i].value_len = strlen(nv[2 * i + 1]);
	}
	m.hdrs = h;
	m.max_hdrs = n;
	m.nhdrs = n;
	return m;
}

static enum reason
carrier(int connect, char *scratch, size_t scratchlen, const char **tok,
    size_t *len, size_t n, ...)
{
	const char *nv[16];
	struct http1_hdr h[8];
	struct http1_msg m;
	va_list ap;
	size_t i;

	va_start(ap, n);
	for (i = 0; i < 2 * n; i++)
		nv[i] = va_arg(ap, const char *);
	va_end(ap);
	m = head(h, n, nv);
	return token_from_request(&m, connect, NULL, scratch, scratchlen, tok,
	    len);
}

/* A route's token_header (x-api-key): the bare token, once, no blanks. */
static void
test_carrier_named(void **state)
{
	struct http1_hdr h[8];
	char scratch[TOKEN_MAX_LEN + 16];
	struct http1_msg m;
	const char *tok;
	size_t len;
	static const char *const one[] = { "X-Api-Key", "tok.en.sig" };
	static const char *const two[] = { "x-api-key", "a.b.c", "X-API-KEY",
		"a.b.c" };
	static const char *const blank[] = { "x-api-key", "a.b c" };
	static const char *const both[] = { "Authorization",
		"Bearer auth.tok.en", "x-api-key", "named.tok.en" };
	static const char *const proxy[] = { "x-api-key", "named.tok.en",
		"Proxy-Authorization", "Bearer proxy.tok.en" };

	(void)state;
	m = head(h, 1, one);
	assert_int_equal(token_from_request(&m, 0, "x-api-key", scratch,
			     sizeof(scratch), &tok, &len),
	    REASON_OK);
	assert_int_equal(len, 10);
	assert_memory_equal(tok, "tok.en.sig", 10);
	/* Without the route's name it is just another field. */
	assert_int_equal(token_from_request(&m, 0, NULL, scratch,
			     sizeof(scratch), &tok, &len),
	    REASON_TOKEN_MISSING);
	/* Not on CONNECT: the field belongs to the requests inside. */
	assert_int_equal(token_from_request(&m, TOKEN_CARRIER_CONNECT,
			     "x-api-key", scratch, sizeof(scratch), &tok, &len),
	    REASON_TOKEN_MISSING);
	m = head(h, 2, two);
	assert_int_equal(token_from_request(&m, 0, "x-api-key", scratch,
			     sizeof(scratch), &tok, &len),
	    REASON_TOKEN_MALFORMED);
	m = head(h, 1, blank);
	assert_int_equal(token_from_request(&m, 0, "x-api-key", scratch,
			     sizeof(scratch), &tok, &len),
	    REASON_TOKEN_MALFORMED);
	/* Before Authorization, after Proxy-Authorization. */
	m = head(h, 2, both);
	assert_int_equal(token_from_request(&m, 0, "x-api-key", scratch,
			     sizeof(scratch), &tok, &len),
	    REASON_OK);
	assert_memory_equal(tok, "named.tok.en", 12);
	m = head(h, 2, proxy);
	assert_int_equal(token_from_request(&m, 0, "x-api-key", scratch,
			     sizeof(scratch), &tok, &len),
	    REASON_OK);
	assert_memory_equal(tok, "proxy.tok.en", 12);
}

static void
expect_tok(enum reason r, const char *tok, size_t len, const char *want)
{
	assert_int_equal(r, REASON_OK);
	assert_int_equal(len, strlen(want));
	assert_memory_equal(tok, want, len);
}

/* The call runs before tok and len are read (argument order is unspecified). */
#define EXPECT_TOK(call, want)                                                 \
	do {                                                                   \
		enum reason r_ = (call);                                       \
		expect_tok(r_, tok, len, want);                                \
	} while (0)

static void
test_carriers(void **state)
{
	char scratch[TOKEN_MAX_LEN + TOKEN_MAX_STR + 2];
	const char *tok;
	size_t len;

	(void)state;
	/* Each carrier. */
	EXPECT_TOK(carrier(0, scratch, sizeof(scratch), &tok, &len, 2, "Host",
		       "h", "Proxy-Authorization", "Bearer a.b.c"),
	    "a.b.c");
	EXPECT_TOK(carrier(1, scratch, sizeof(scratch), &tok, &len, 1,
		       "proxy-authorization", "bearer a.b.c"),
	    "a.b.c");
	EXPECT_TOK(carrier(1, scratch, sizeof(scratch), &tok, &len, 1,
		       "Proxy-Authorization", "BEARER a.b.c"),
	    "a.b.c");
	/* Basic: base64("run:a.b.c") and base64(":a.b.c"). */
	EXPECT_TOK(carrier(1, scratch, sizeof(scratch), &tok, &len, 1,
		       "Proxy-Authorization", "Basic cnVuOmEuYi5j"),
	    "a.b.c");
	assert_true(tok >= scratch && tok < scratch + sizeof(scratch));
	EXPECT_TOK(carrier(0, scratch, sizeof(scratch), &tok, &len, 1,
		       "Proxy-Authorization", "basic OmEuYi5j"),
	    "a.b.c");
	/* base64("run:x:y"): the password is everything after the first ':'. */
	EXPECT_TOK(carrier(0, scratch, sizeof(scratch), &tok, &len, 1,
		       "Proxy-Authorization", "Basic cnVuOng6eQ=="),
	    "x:y");
	EXPECT_TOK(carrier(0, scratch, sizeof(scratch), &tok, &len, 1,
		       "Authorization", "Bearer a.b.c"),
	    "a.b.c");
	/* Precedence: Proxy-Authorization wins, also when listed second. */
	EXPECT_TOK(carrier(0, scratch, sizeof(scratch), &tok, &len, 2,
		       "Authorization", "Bearer upstream",
		       "Proxy-Authorization", "Bearer mine"),
	    "mine");
	/* ... with no fallback when it is malformed. */
	assert_int_equal(carrier(0, scratch, sizeof(scratch), &tok, &len, 2,
			     "Authorization", "Bearer upstream",
			     "Proxy-Authorization", "Bearer"),
	    REASON_TOKEN_MALFORMED);
}

static void
test_carriers_missing(void **state)
{
	char scratch[TOKEN_MAX_LEN + TOKEN_MAX_STR + 2];
	const char *tok;
	size_t len;

	(void)state;
	assert_int_equal(carrier(0, scratch, sizeof(scratch), &tok, &len, 0),
	    REASON_TOKEN_MISSING);
	assert_int_equal(carrier(0, scratch, sizeof(scratch), &tok, &len, 1,
			     "X-Token", "Bearer a.b.c"),
	    REASON_TOKEN_MISSING);
	/* Authorization is not a carrier on CONNECT. */
	assert_int_equal(carrier(1, scratch, sizeof(scratch), &tok, &len, 1,
			     "Authorization", "Bearer a.b.c"),
	    REASON_TOKEN_MISSING);
	/* Authorization with another scheme belongs to the upstream. */
	assert_int_equal(carrier(0, scratch, sizeof(scratch), &tok, &len, 1,
			     "Authorization", "Basic cnVuOmEuYi5j"),
	    REASON_TOKEN_MISSING);
	assert_null(tok);
	assert_int_equal(len, 0);
}

static void
test_carriers_malformed(void **state)
{
	static const char *const bad[] = {
		"", "Bearer", "Bearer ", "Bearer  a.b.c", "Bearer a.b.c extra",
		"Bearer a.b\t.c", "Bearer\ta.b.c", "Digest a.b.c",
		"Negotiate abc", "Basic", "Basic cnVu", /* "run": no ':' */
		"Basic cnVuOg==",         /* "run:": empty password */
		"Basic cnVuOmEuYi5j=",    /* bad padding */
		"Basic cnVuOmEuYi5",      /* length % 4 != 0 */
		"Basic cnVuOmEuYi5k",     /* fine, then: */
		"Basic cnVuOmEuYi5jZA",   /* unpadded */
		"Basic cnVuOmEuYi5jZB==", /* non-canonical */
		"Basic cnVu-mEuYi5j",     /* base64url alphabet */
	};
	char scratch[TOKEN_MAX_LEN + TOKEN_MAX_STR + 2];
	const char *tok;
	size_t i, len;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		enum reason r = carrier(0, scratch, sizeof(scratch), &tok, &len,
		    1, "Proxy-Authorization", bad[i]);

		if (strcmp(bad[i], "Basic cnVuOmEuYi5k") == 0) {
			expect_tok(r, tok, len, "a.b.d");
			continue;
		}
		if (r != REASON_TOKEN_MALFORMED)
			fail_msg("\"%s\": got %s", bad[i], reason_name(r));
	}
	/* Two Proxy-Authorization fields, even if both are fine. */
	assert_int_equal(carrier(0, scratch, sizeof(scratch), &tok, &len, 2,
			     "Proxy-Authorization", "Bearer a.b.c",
			     "proxy-authorization", "Bearer a.b.c"),
	    REASON_TOKEN_MALFORMED);
	/* Two Authorization fields. */
	assert_int_equal(carrier(0, scratch, sizeof(scratch), &tok, &len, 2,
			     "Authorization", "Bearer a.b.c", "Authorization",
			     "Basic xyz"),
	    REASON_TOKEN_MALFORMED);
	/* Authorization: Bearer without a credential. */
	assert_int_equal(carrier(0, scratch, sizeof(scratch), &tok, &len, 1,
			     "Authorization", "Bearer"),
	    REASON_TOKEN_MALFORMED);
	assert_int_equal(carrier(0, scratch, sizeof(scratch), &tok, &len, 1,
			     "Authorization", "Bearer  x"),
	    REASON_TOKEN_MALFORMED);
	/* Basic credentials larger than scratch. */
	assert_int_equal(carrier(0, scratch, 4, &tok, &len, 1,
			     "Proxy-Authorization", "Basic cnVuOmEuYi5j"),
	    REASON_TOKEN_MALFORMED);
	assert_int_equal(carrier(0, NULL, 0, &tok, &len, 1,
			     "Proxy-Authorization", "Basic cnVuOmEuYi5j"),
	    REASON_TOKEN_MALFORMED);
}

/* A carrier's token runs through verification unchanged. */
static void
test_carrier_end_to_end(void **state)
{
	char scratch[TOKEN_MAX_LEN + TOKEN_MAX_STR + 2], val[5000];
	char basic[6000], user[5000];
	const char *tok;
	size_t len, n;
	struct token_claims c;

	(void)state;
	sign(&ed_signer, ED_HDR, claims(""));
	snprintf(val, sizeof(val), "Bearer %s", tokbuf);
	assert_int_equal(carrier(1, scratch, sizeof(scratch), &tok, &len, 1,
			     "Proxy-Authorization", val),
	    REASON_OK);
	assert_int_equal(token_verify_sig(keys, 2, tok, len, &c), REASON_OK);
	/* Basic "run:<jwt>", encoded with the standard alphabet + padding. */
	snprintf(user, sizeof(user), "run:%s", tokbuf);
	n = strlen(user);
	{
		static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijkl"
					"mnopqrstuvwxyz0123456789+/";
		size_t i, o = 0;
		uint32_t v;

		o = (size_t)snprintf(basic, sizeof(basic), "Basic ");
		for (i = 0; i < n; i += 3) {
			v = (uint32_t)(unsigned char)user[i] << 16;
			if (i + 1 < n)
				v |= (uint32_t)(unsigned char)user[i + 1] << 8;
			if (i + 2 < n)
				v |= (unsigned char)user[i + 2];
			basic[o++] = a[v >> 18 & 63];
			basic[o++] = a[v >> 12 & 63];
			basic[o++] = i + 1 < n ? a[v >> 6 & 63] : '=';
			basic[o++] = i + 2 < n ? a[v & 63] : '=';
		}
		basic[o] = '\0';
	}
	assert_int_equal(carrier(1, scratch, sizeof(scratch), &tok, &len, 1,
			     "Proxy-Authorization", basic),
	    REASON_OK);
	assert_int_equal(len, strlen(tokbuf));
	assert_int_equal(token_verify_sig(keys, 2, tok, len, &c), REASON_OK);
	assert_int_equal(token_check_claims(&c, &rules, AUD, NOW), REASON_OK);
}

/* Every token_* reason code is reachable from a signed token or carrier. */
static void
test_reason_names(void **state)
{
	(void)state;
	assert_string_equal(reason_name(REASON_TOKEN_MISSING), "token_missing");
	assert_string_equal(reason_name(REASON_TOKEN_MALFORMED),
	    "token_malformed");
	assert_string_equal(reason_name(REASON_TOKEN_UNSUPPORTED_ALG),
	    "token_unsupported_alg");
	assert_string_equal(reason_name(REASON_TOKEN_UNKNOWN_KID),
	    "token_unknown_kid");
	assert_string_equal(reason_name(REASON_TOKEN_BAD_SIGNATURE),
	    "token_bad_signature");
	assert_string_equal(reason_name(REASON_TOKEN_EXPIRED), "token_expired");
	assert_string_equal(reason_name(REASON_TOKEN_NOT_YET_VALID),
	    "token_not_yet_valid");
	assert_string_equal(reason_name(REASON_TOKEN_LIFETIME_TOO_LONG),
	    "token_lifetime_too_long");
	assert_string_equal(reason_name(REASON_TOKEN_WRONG_AUDIENCE),
	    "token_wrong_audience");
	assert_string_equal(reason_name(REASON_TOKEN_WRONG_ISSUER),
	    "token_wrong_issuer");
}

/* A weak HS256 secret verifies nothing, even with a correct MAC. */
static void
test_weak_secret(void **state)
{
	struct token_key weak = { .tk_alg = TOKEN_ALG_HS256 };
	struct token_claims c;
	unsigned char secret[31];

	(void)state;

	memcpy(secret, hs_secret, sizeof(secret));
	weak.tk_secret = secret;
	weak.tk_secret_len = sizeof(secret);
	sign(&weak, "{\"alg\":\"HS256\"}", claims(""));
	assert_int_equal(token_verify_sig(&weak, 1, tokbuf, strlen(tokbuf), &c),
	    REASON_TOKEN_BAD_SIGNATURE);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_carrier_named),
		cmocka_unit_test(test_valid_hs256),
		cmocka_unit_test(test_valid_eddsa),
		cmocka_unit_test(test_none_and_unknown_algs),
		cmocka_unit_test(test_alg_confusion),
		cmocka_unit_test(test_wrong_key),
		cmocka_unit_test(test_kid_rules),
		cmocka_unit_test(test_header_rules),
		cmocka_unit_test(test_segments),
		cmocka_unit_test(test_size_limit),
		cmocka_unit_test(test_base64_strict),
		cmocka_unit_test(test_b64url_codec),
		cmocka_unit_test(test_duplicate_keys),
		cmocka_unit_test(test_bad_json),
		cmocka_unit_test(test_signature_first),
		cmocka_unit_test(test_claim_types),
		cmocka_unit_test(test_string_lengths),
		cmocka_unit_test(test_issuer),
		cmocka_unit_test(test_expiry_boundaries),
		cmocka_unit_test(test_not_yet_valid),
		cmocka_unit_test(test_lifetime),
		cmocka_unit_test(test_audience),
		cmocka_unit_test(test_stage2_order),
		cmocka_unit_test(test_carriers),
		cmocka_unit_test(test_carriers_missing),
		cmocka_unit_test(test_carriers_malformed),
		cmocka_unit_test(test_carrier_end_to_end),
		cmocka_unit_test(test_reason_names),
		cmocka_unit_test(test_many_audiences),
		cmocka_unit_test(test_weak_secret),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
