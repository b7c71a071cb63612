/*
 * Regenerates tests/vectors/tokens.json: the token vectors that
 * tests/unit/test_token_vectors.c checks and that other implementations of
 * the token contract (docs/tokens.md) can use. The expected reason of each
 * vector is written here by hand, from the contract; the unit test then
 * checks that sluice agrees. Every signature is deterministic (HMAC and
 * Ed25519), so a rerun reproduces the file byte for byte.
 *
 * Not part of the build. From the repository root, after building the
 * proxy library into build/dev:
 *   cc -std=c11 -D_GNU_SOURCE -I. -I/usr/include/cjson \
 *       tests/vectors/gen_tokens.c build/dev/proxy/libsluice_proxy.a \
 *       -lcjson -lssl -lcrypto -o /tmp/gen_tokens &&
 *   /tmp/gen_tokens > tests/vectors/tokens.json
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <openssl/evp.h>

#include "proxy/token/token.h"

#define NOW 1700000000LL

struct vkey {
	const char *name;
	const char *kid; /* "" for none */
	enum token_alg alg;
	unsigned char secret[64];
	size_t secret_len;
	unsigned char seed[32]; /* Ed25519 private seed */
	struct token_key signer;
};

static struct vkey vkeys[] = {
	{ .name = "hs1",
	    .kid = "hs1",
	    .alg = TOKEN_ALG_HS256,
	    .secret = "sluice-vectors-hs256-secret-0001",
	    .secret_len = 32 },
	{ .name = "hs2",
	    .kid = "hs2",
	    .alg = TOKEN_ALG_HS256,
	    .secret = "sluice-vectors-hs256-secret-0002",
	    .secret_len = 32 },
	{ .name = "ed1", .kid = "ed1", .alg = TOKEN_ALG_EDDSA },
	{ .name = "ed2", .kid = "ed2", .alg = TOKEN_ALG_EDDSA },
	{ .name = "rfc7515-a1", .kid = "", .alg = TOKEN_ALG_HS256 },
	{ .name = "rfc8037-a4", .kid = "", .alg = TOKEN_ALG_EDDSA },
};

static cJSON *vectors, *carriers;
static char tok[8000];

static struct vkey *
vkey(const char *name)
{
	size_t i;

	for (i = 0; i < sizeof(vkeys) / sizeof(vkeys[0]); i++)
		if (strcmp(vkeys[i].name, name) == 0)
			return &vkeys[i];
	fprintf(stderr, "no key %s\n", name);
	exit(1);
}

static void
b64(const unsigned char *p, size_t n, char *out, size_t cap)
{
	if (token_b64url_encode(p, n, out, cap, NULL) == -1)
		exit(1);
}

static void
unb64(const char *s, unsigned char *out, size_t cap, size_t *n)
{
	if (token_b64url_decode(s, strlen(s), out, cap, n) == -1)
		exit(1);
}

static void
keys_init(void)
{
	struct vkey *k;
	size_t i, n;

	/* RFC 8037 A.1 private key d; A.4 signs with it. */
	unb64("nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A", vkey("ed1")->seed,
	    32, &n);
	memcpy(vkey("rfc8037-a4")->seed, vkey("ed1")->seed, 32);
	memset(vkey("ed2")->seed, 0x42, 32);
	/* RFC 7515 A.1.1 HMAC key k. */
	unb64("AyM1SysPpbyDfgZld3umj1qzKObwVMkoqQ-EstJQLr_T-1qS0gZH75aKtMN3Y"
	      "j0iPS4hcgUuTwjAzZr1Z9CAow",
	    vkey("rfc7515-a1")->secret, 64, &vkey("rfc7515-a1")->secret_len);
	for (i = 0; i < sizeof(vkeys) / sizeof(vkeys[0]); i++) {
		k = &vkeys[i];
		k->signer.tk_alg = k->alg;
		if (k->alg == TOKEN_ALG_HS256) {
			k->signer.tk_secret = k->secret;
			k->signer.tk_secret_len = k->secret_len;
		} else if (
		    (k->signer.tk_pkey =
			    EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL,
				k->seed, 32)) == NULL)
			exit(1);
	}
}

static cJSON *
keys_json(void)
{
	cJSON *o = cJSON_CreateObject(), *k;
	unsigned char pub[32];
	char enc[128];
	size_t i, n;

	for (i = 0; i < sizeof(vkeys) / sizeof(vkeys[0]); i++) {
		k = cJSON_AddObjectToObject(o, vkeys[i].name);
		cJSON_AddStringToObject(k, "kid", vkeys[i].kid);
		if (vkeys[i].alg == TOKEN_ALG_HS256) {
			cJSON_AddStringToObject(k, "alg", "HS256");
			b64(vkeys[i].secret, vkeys[i].secret_len, enc,
			    sizeof(enc));
			cJSON_AddStringToObject(k, "secret", enc);
		} else {
			cJSON_AddStringToObject(k, "alg", "EdDSA");
			n = sizeof(pub);
			if (EVP_PKEY_get_raw_public_key(vkeys[i].signer.tk_pkey,
				pub, &n) != 1)
				exit(1);
			b64(pub, n, enc, sizeof(enc));
			cJSON_AddStringToObject(k, "public_key", enc);
			b64(vkeys[i].seed, 32, enc, sizeof(enc));
			cJSON_AddStringToObject(k, "private_key_test_only",
			    enc);
		}
	}
	return o;
}

static const char *
sign(const char *key, const char *hdr, const char *claims)
{
	if (token_sign(&vkey(key)->signer, hdr, strlen(hdr), claims,
		strlen(claims), tok, sizeof(tok), NULL) == -1)
		exit(1);
	return tok;
}

/* The default claims with extra members first and some replaced. */
static const char *
claims(const char *extra)
{
	static char buf[6000];

	snprintf(buf, sizeof(buf),
	    "{%s\"iss\":\"control-plane\",\"sub\":\"run-42\",\"aud\":"
	    "\"model-proxy\",\"iat\":1700000000,\"exp\":1700000600,"
	    "\"jti\":\"vec-1\"}",
	    extra);
	return buf;
}

#define HS1 "{\"alg\":\"HS256\",\"typ\":\"JWT\",\"kid\":\"hs1\"}"
#define ED1 "{\"alg\":\"EdDSA\",\"typ\":\"JWT\",\"kid\":\"ed1\"}"

struct vopts {
	const char *keys; /* comma-separated; default "hs1,ed1" */
	long long now;    /* default NOW */
	const char *issuer;
	int no_issuer;
	long long leeway, max_ttl;
	const char *audience;
	const char *level;
};

static void
vec(const char *name, const char *desc, const char *token, const char *expect,
    const struct vopts *o)
{
	static const struct vopts none;
	cJSON *v = cJSON_CreateObject(), *ks, *rules;
	char list[128], *p, *save = NULL;

	if (o == NULL)
		o = &none;
	cJSON_AddStringToObject(v, "name", name);
	cJSON_AddStringToObject(v, "description", desc);
	cJSON_AddStringToObject(v, "level", o->level ? o->level : "full");
	ks = cJSON_AddArrayToObject(v, "keys");
	snprintf(list, sizeof(list), "%s", o->keys ? o->keys : "hs1,ed1");
	for (p = strtok_r(list, ",", &save); p != NULL;
	     p = strtok_r(NULL, ",", &save))
		cJSON_AddItemToArray(ks, cJSON_CreateString(vkey(p)->name));
	if (o->level == NULL || strcmp(o->level, "signature") != 0) {
		cJSON_AddNumberToObject(v, "now",
		    (double)(o->now ? o->now : NOW));
		rules = cJSON_AddObjectToObject(v, "rules");
		if (o->no_issuer)
			cJSON_AddNullToObject(rules, "issuer");
		else
			cJSON_AddStringToObject(rules, "issuer",
			    o->issuer ? o->issuer : "control-plane");
		/* leeway -1 in vopts stands for 0 (0 is the default, 30). */
		cJSON_AddNumberToObject(rules, "leeway_s",
		    (double)(o->leeway < 0 ? 0 :
			    o->leeway      ? o->leeway :
					     30));
		cJSON_AddNumberToObject(rules, "max_ttl_s",
		    (double)(o->max_ttl ? o->max_ttl : 3600));
		cJSON_AddStringToObject(v, "audience",
		    o->audience ? o->audience : "model-proxy");
	}
	cJSON_AddStringToObject(v, "token", token);
	cJSON_AddStringToObject(v, "expect", expect);
	cJSON_AddItemToArray(vectors, v);
}

/* Replace segment i (0..2) of tok with s. */
static const char *
with_segment(int i, const char *s)
{
	static char out[8192];
	char *d1 = strchr(tok, '.'), *d2 = strrchr(tok, '.');

	if (i == 0)
		snprintf(out, sizeof(out), "%s%s", s, d1);
	else if (i == 1)
		snprintf(out, sizeof(out), "%.*s.%s%s", (int)(d1 - tok), tok, s,
		    d2);
	else
		snprintf(out, sizeof(out), "%.*s.%s", (int)(d2 - tok), tok, s);
	return out;
}

static const char *
seg_of(const char *hdr_or_payload)
{
	static char out[8192];

	b64((const unsigned char *)hdr_or_payload, strlen(hdr_or_payload), out,
	    sizeof(out));
	return out;
}

/* Flip the lowest bit of the first signature byte, re-encoded. */
static const char *
flip_sig(void)
{
	unsigned char sig[128];
	char enc[256];
	size_t n;

	unb64(strrchr(tok, '.') + 1, sig, sizeof(sig), &n);
	sig[0] ^= 1;
	b64(sig, n, enc, sizeof(enc));
	return with_segment(2, enc);
}

static void
gen_signature_level(void)
{
	static const struct vopts a1 = { .keys = "rfc7515-a1",
		.level = "signature" };
	static const struct vopts a4 = { .keys = "rfc8037-a4",
		.level = "signature" };
	static const char a1tok[] =
	    "eyJ0eXAiOiJKV1QiLA0KICJhbGciOiJIUzI1NiJ9.eyJpc3MiOiJqb2UiLA0KICJ"
	    "leHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp"
	    "0cnVlfQ.dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
	static const char a4tok[] =
	    "eyJhbGciOiJFZERTQSJ9.RXhhbXBsZSBvZiBFZDI1NTE5IHNpZ25pbmc.hgyY0il"
	    "_MGCjP0JzlnLWG1PPOt7-09PGcvMg3AIbQR6dWbhijcNR4ki4iylGjg5BhVsPt9g"
	    "7sVvpAr_MuM0KAg";

	vec("rfc7515-a1", "RFC 7515 Appendix A.1: HS256 JWS (no sluice claims)",
	    a1tok, "ok", &a1);
	snprintf(tok, sizeof(tok), "%s", a1tok);
	vec("rfc7515-a1-bit-flipped",
	    "RFC 7515 A.1 with one signature bit "
	    "flipped",
	    flip_sig(), "token_bad_signature", &a1);
	vec("rfc8037-a4",
	    "RFC 8037 Appendix A.4: Ed25519 JWS whose payload "
	    "is not JSON",
	    a4tok, "ok", &a4);
	snprintf(tok, sizeof(tok), "%s", a4tok);
	vec("rfc8037-a4-bit-flipped",
	    "RFC 8037 A.4 with one signature bit "
	    "flipped",
	    flip_sig(), "token_bad_signature", &a4);
}

static void
gen_keys_and_algs(void)
{
	static const struct vopts only_hs1 = { .keys = "hs1" };
	static const struct vopts only_ed1 = { .keys = "ed1" };
	struct token_key confused = { .tk_alg = TOKEN_ALG_HS256 };
	unsigned char pub[32];
	size_t n = sizeof(pub);
	char t[8192];

	vec("hs256-valid", "HS256, key chosen by kid",
	    sign("hs1", HS1, claims("\"max_requests\":10,")), "ok", NULL);
	vec("eddsa-valid", "EdDSA (Ed25519), key chosen by kid",
	    sign("ed1", ED1, claims("")), "ok", NULL);
	vec("no-kid-one-key", "no kid, exactly one key configured",
	    sign("hs1", "{\"alg\":\"HS256\"}", claims("")), "ok", &only_hs1);
	vec("no-kid-two-keys", "no kid while several keys are configured", tok,
	    "token_unknown_kid", NULL);
	vec("unknown-kid", "kid names no configured key",
	    sign("hs1", "{\"alg\":\"HS256\",\"kid\":\"hs9\"}", claims("")),
	    "token_unknown_kid", NULL);
	vec("kid-case", "kid comparison is exact (HS1 is not hs1)",
	    sign("hs1", "{\"alg\":\"HS256\",\"kid\":\"HS1\"}", claims("")),
	    "token_unknown_kid", NULL);
	sign("hs1", "{\"alg\":\"none\"}", claims(""));
	vec("alg-none", "alg none with an empty signature, one key",
	    with_segment(2, ""), "token_unsupported_alg", &only_hs1);
	sign("hs1", "{\"alg\":\"none\",\"kid\":\"hs1\"}", claims(""));
	vec("alg-none-kid", "alg none naming a key, empty signature",
	    with_segment(2, ""), "token_unsupported_alg", NULL);
	vec("alg-rs256", "an algorithm sluice does not implement",
	    sign("hs1", "{\"alg\":\"RS256\",\"kid\":\"hs1\"}", claims("")),
	    "token_unsupported_alg", NULL);
	vec("alg-case", "alg comparison is exact (hs256)",
	    sign("hs1", "{\"alg\":\"hs256\",\"kid\":\"hs1\"}", claims("")),
	    "token_unsupported_alg", NULL);
	vec("alg-not-the-keys", "EdDSA claimed for the HS256 key",
	    sign("ed1", "{\"alg\":\"EdDSA\",\"kid\":\"hs1\"}", claims("")),
	    "token_unsupported_alg", NULL);
	/* Alg confusion: the Ed25519 public key bytes as an HMAC secret. */
	if (EVP_PKEY_get_raw_public_key(vkey("ed1")->signer.tk_pkey, pub, &n) !=
	    1)
		exit(1);
	confused.tk_secret = pub;
	confused.tk_secret_len = n;
	if (token_sign(&confused, "{\"alg\":\"HS256\",\"kid\":\"ed1\"}",
		strlen("{\"alg\":\"HS256\",\"kid\":\"ed1\"}"), claims(""),
		strlen(claims("")), t, sizeof(t), NULL) == -1)
		exit(1);
	vec("alg-confusion-kid",
	    "HS256 signed with the EdDSA key's public "
	    "bytes, kid names the EdDSA key",
	    t, "token_unsupported_alg", NULL);
	if (token_sign(&confused, "{\"alg\":\"HS256\"}",
		strlen("{\"alg\":\"HS256\"}"), claims(""), strlen(claims("")),
		t, sizeof(t), NULL) == -1)
		exit(1);
	vec("alg-confusion-only-key",
	    "HS256 signed with the public bytes of "
	    "the only (EdDSA) key",
	    t, "token_unsupported_alg", &only_ed1);
	vec("hs256-wrong-key", "HS256 signed with another secret",
	    sign("hs2", HS1, claims("")), "token_bad_signature", NULL);
	vec("eddsa-wrong-key", "EdDSA signed with another key",
	    sign("ed2", ED1, claims("")), "token_bad_signature", NULL);
	sign("ed1", ED1, claims(""));
	vec("eddsa-bit-flipped", "one signature bit flipped", flip_sig(),
	    "token_bad_signature", NULL);
	sign("hs1", HS1, claims(""));
	vec("hs256-short-signature", "a 31-byte HS256 signature",
	    with_segment(2, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
	    "token_bad_signature", NULL);
	vec("crit", "a crit header (no extension is understood)",
	    sign("hs1",
		"{\"alg\":\"HS256\",\"kid\":\"hs1\",\"crit\":[\"exp\"]}",
		claims("")),
	    "token_malformed", NULL);
	vec("no-alg", "header without alg",
	    sign("hs1", "{\"kid\":\"hs1\"}", claims("")), "token_malformed",
	    NULL);
	vec("kid-number", "kid is not a string",
	    sign("hs1", "{\"alg\":\"HS256\",\"kid\":1}", claims("")),
	    "token_malformed", NULL);
}

static void
gen_encoding(void)
{
	char t[8192], h[8192];

	sign("hs1", HS1, claims(""));
	snprintf(t, sizeof(t), "%.*s", (int)(strrchr(tok, '.') - tok), tok);
	vec("two-segments", "header.payload only", t, "token_malformed", NULL);
	snprintf(t, sizeof(t), "%s.%s", tok, "AAAA");
	vec("four-segments", "four segments", t, "token_malformed", NULL);
	vec("empty", "the empty string", "", "token_malformed", NULL);
	snprintf(h, sizeof(h), "%s==", seg_of(HS1));
	vec("padded-header", "base64url with = padding", with_segment(0, h),
	    "token_malformed", NULL);
	snprintf(t, sizeof(t), "%s", strrchr(tok, '.') + 1);
	/* 43 characters: the last one has 2 unused bits; set one. */
	{
		static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijkl"
					"mnopqrstuvwxyz0123456789-_";

		t[42] = a[(strchr(a, t[42]) - a) | 1];
	}
	vec("noncanonical-signature",
	    "signature whose last character has "
	    "non-zero unused bits",
	    with_segment(2, t), "token_malformed", NULL);
	snprintf(t, sizeof(t), "%s", seg_of(HS1));
	t[strlen(t) - 1] = '+';
	vec("standard-alphabet", "'+' from the standard base64 alphabet",
	    with_segment(0, t), "token_malformed", NULL);
	vec("dup-header-key", "duplicate alg in the header",
	    sign("hs1", "{\"alg\":\"HS256\",\"kid\":\"hs1\",\"alg\":\"none\"}",
		claims("")),
	    "token_malformed", NULL);
	vec("dup-claim", "duplicate sub in the claims",
	    sign("hs1", HS1, claims("\"sub\":\"someone-else\",")),
	    "token_malformed", NULL);
	vec("dup-claim-escaped", "duplicate sub spelled \\u0073ub",
	    sign("hs1", HS1, claims("\"\\u0073ub\":\"someone-else\",")),
	    "token_malformed", NULL);
	vec("claims-not-json", "payload is not JSON",
	    sign("hs1", HS1, "run-42"), "token_malformed", NULL);
	vec("claims-trailing-bytes", "bytes after the JSON object",
	    sign("hs1", HS1,
		"{\"sub\":\"a\",\"jti\":\"b\",\"aud\":\"model-"
		"proxy\",\"exp\":1700000600} x"),
	    "token_malformed", NULL);
	vec("claims-nul-escape", "\\u0000 inside jti",
	    sign("hs1", HS1,
		"{\"sub\":\"a\",\"jti\":\"b\\u0000c\",\"aud\":\"model-proxy\","
		"\"exp\":1700000600}"),
	    "token_malformed", NULL);
	vec("bad-signature-before-claims",
	    "garbage claims under a wrong "
	    "signature: the signature is checked first",
	    sign("hs2", HS1, "garbage"), "token_bad_signature", NULL);
	/* 4097 bytes: refused before anything is decoded. */
	memset(t, 'A', 4097);
	t[100] = '.';
	t[200] = '.';
	t[4097] = '\0';
	vec("oversized", "4097 bytes", t, "token_malformed", NULL);
}

static void
gen_claims(void)
{
	static const struct vopts noiss = { .no_issuer = 1 };
	static const struct vopts at_exp = { .now = NOW + 600 + 30 };
	static const struct vopts before_exp = { .now = NOW + 600 + 29 };
	static const struct vopts no_leeway = { .now = NOW + 600,
		.leeway = -1 };
	static const struct vopts other_aud = { .audience = "billing" };
	static const struct vopts second_aud = { .audience = "second" };

	vec("exp-string", "exp as a string",
	    sign("hs1", HS1,
		"{\"sub\":\"a\",\"jti\":\"b\",\"aud\":\"model-proxy\",\"exp\":"
		"\"1700000600\"}"),
	    "token_malformed", NULL);
	vec("exp-fraction", "exp with a fraction",
	    sign("hs1", HS1,
		"{\"sub\":\"a\",\"jti\":\"b\",\"aud\":\"model-proxy\",\"exp\":"
		"1700000600.5}"),
	    "token_malformed", NULL);
	vec("exp-missing", "no exp",
	    sign("hs1", HS1,
		"{\"sub\":\"a\",\"jti\":\"b\",\"aud\":\"model-proxy\"}"),
	    "token_malformed", NULL);
	vec("sub-missing", "no sub",
	    sign("hs1", HS1,
		"{\"jti\":\"b\",\"aud\":\"model-proxy\",\"exp\":1700000600}"),
	    "token_malformed", NULL);
	vec("jti-missing", "no jti",
	    sign("hs1", HS1,
		"{\"sub\":\"a\",\"aud\":\"model-proxy\",\"exp\":1700000600}"),
	    "token_malformed", NULL);
	vec("aud-missing", "no aud",
	    sign("hs1", HS1,
		"{\"sub\":\"a\",\"jti\":\"b\",\"exp\":1700000600}"),
	    "token_malformed", NULL);
	vec("aud-number", "aud as a number",
	    sign("hs1", HS1,
		"{\"sub\":\"a\",\"jti\":\"b\",\"aud\":7,\"exp\":1700000600}"),
	    "token_malformed", NULL);
	vec("max-requests-zero", "max_requests 0",
	    sign("hs1", HS1, claims("\"max_requests\":0,")), "token_malformed",
	    NULL);
	vec("max-requests-negative", "max_requests -1",
	    sign("hs1", HS1, claims("\"max_requests\":-1,")), "token_malformed",
	    NULL);
	vec("unknown-claims-ignored",
	    "claims sluice does not know are "
	    "ignored",
	    sign("ed1", ED1, claims("\"model\":\"x\",\"n\":1.5,")), "ok", NULL);
	vec("aud-array", "aud as an array containing the audience",
	    sign("ed1", ED1,
		"{\"iss\":\"control-plane\",\"sub\":\"a\","
		"\"jti\":\"b\",\"aud\":[\"first\",\"second\"],"
		"\"iat\":1700000000,\"exp\":1700000600}"),
	    "ok", &second_aud);
	vec("wrong-audience", "aud does not contain the route's audience",
	    sign("hs1", HS1, claims("")), "token_wrong_audience", &other_aud);
	vec("wrong-issuer", "iss differs from tokens.issuer",
	    sign("hs1", HS1,
		"{\"iss\":\"someone\",\"sub\":\"a\",\"jti\":\"b\",\"aud\":"
		"\"model-proxy\",\"exp\":1700000600}"),
	    "token_wrong_issuer", NULL);
	vec("missing-issuer", "no iss while tokens.issuer is set",
	    sign("hs1", HS1,
		"{\"sub\":\"a\",\"jti\":\"b\",\"aud\":\"model-proxy\","
		"\"exp\":1700000600}"),
	    "token_wrong_issuer", NULL);
	vec("issuer-not-checked", "no iss and no tokens.issuer", tok, "ok",
	    &noiss);
	sign("hs1", HS1, claims(""));
	vec("expired-at-boundary", "now == exp + leeway is expired", tok,
	    "token_expired", &at_exp);
	vec("valid-before-boundary", "now == exp + leeway - 1 is not", tok,
	    "ok", &before_exp);
	vec("expired-no-leeway", "leeway 0: now == exp is expired", tok,
	    "token_expired", &no_leeway);
	vec("nbf-future", "nbf beyond now + leeway",
	    sign("hs1", HS1, claims("\"nbf\":1700000031,")),
	    "token_not_yet_valid", NULL);
	vec("nbf-within-leeway", "nbf == now + leeway",
	    sign("hs1", HS1, claims("\"nbf\":1700000030,")), "ok", NULL);
	vec("iat-future", "iat beyond now + leeway",
	    sign("hs1", HS1,
		"{\"iss\":\"control-plane\",\"sub\":\"a\",\"jti\":\"b\",\"aud\":"
		"\"model-proxy\",\"iat\":1700000031,\"exp\":1700000600}"),
	    "token_not_yet_valid", NULL);
	vec("lifetime-too-long", "exp - iat = max_ttl_s + 1",
	    sign("hs1", HS1,
		"{\"iss\":\"control-plane\",\"sub\":\"a\",\"jti\":\"b\",\"aud\":"
		"\"model-proxy\",\"iat\":1700000000,\"exp\":1700003601}"),
	    "token_lifetime_too_long", NULL);
	vec("lifetime-at-limit", "exp - iat = max_ttl_s",
	    sign("hs1", HS1,
		"{\"iss\":\"control-plane\",\"sub\":\"a\",\"jti\":\"b\",\"aud\":"
		"\"model-proxy\",\"iat\":1700000000,\"exp\":1700003600}"),
	    "ok", NULL);
	vec("lifetime-without-iat", "no iat: exp - now > max_ttl_s",
	    sign("hs1", HS1,
		"{\"iss\":\"control-plane\",\"sub\":\"a\","
		"\"jti\":\"b\",\"aud\":\"model-proxy\","
		"\"exp\":1700003601}"),
	    "token_lifetime_too_long", NULL);
}

static void
carrier(const char *name, int connect, const char *expect, const char *want,
    const char *h1, const char *v1, const char *h2, const char *v2)
{
	cJSON *c = cJSON_CreateObject(), *hs, *h;

	cJSON_AddStringToObject(c, "name", name);
	cJSON_AddBoolToObject(c, "connect", connect);
	hs = cJSON_AddArrayToObject(c, "headers");
	if (h1 != NULL) {
		h = cJSON_CreateArray();
		cJSON_AddItemToArray(h, cJSON_CreateString(h1));
		cJSON_AddItemToArray(h, cJSON_CreateString(v1));
		cJSON_AddItemToArray(hs, h);
	}
	if (h2 != NULL) {
		h = cJSON_CreateArray();
		cJSON_AddItemToArray(h, cJSON_CreateString(h2));
		cJSON_AddItemToArray(h, cJSON_CreateString(v2));
		cJSON_AddItemToArray(hs, h);
	}
	cJSON_AddStringToObject(c, "expect", expect);
	if (want != NULL)
		cJSON_AddStringToObject(c, "token", want);
	cJSON_AddItemToArray(carriers, c);
}

static void
gen_carriers(void)
{
	const char *PA = "Proxy-Authorization", *A = "Authorization";

	carrier("proxy-bearer", 0, "ok", "a.b.c", PA, "Bearer a.b.c", NULL,
	    NULL);
	carrier("proxy-bearer-connect", 1, "ok", "a.b.c", PA, "Bearer a.b.c",
	    NULL, NULL);
	carrier("scheme-case-insensitive", 0, "ok", "a.b.c",
	    "proxy-authorization", "bEARER a.b.c", NULL, NULL);
	carrier("proxy-basic", 1, "ok", "a.b.c", PA, "Basic cnVuOmEuYi5j", NULL,
	    NULL);
	carrier("proxy-basic-empty-user", 1, "ok", "a.b.c", PA,
	    "Basic OmEuYi5j", NULL, NULL);
	carrier("authorization-bearer", 0, "ok", "a.b.c", A, "Bearer a.b.c",
	    NULL, NULL);
	carrier("proxy-authorization-first", 0, "ok", "mine", A,
	    "Bearer upstream", PA, "Bearer mine");
	carrier("none", 0, "token_missing", NULL, "Host", "x", NULL, NULL);
	carrier("authorization-on-connect", 1, "token_missing", NULL, A,
	    "Bearer a.b.c", NULL, NULL);
	carrier("authorization-other-scheme", 0, "token_missing", NULL, A,
	    "Basic cnVuOmEuYi5j", NULL, NULL);
	carrier("proxy-other-scheme", 0, "token_malformed", NULL, PA,
	    "Digest a.b.c", NULL, NULL);
	carrier("proxy-empty-credential", 0, "token_malformed", NULL, PA,
	    "Bearer", NULL, NULL);
	carrier("proxy-two-spaces", 0, "token_malformed", NULL, PA,
	    "Bearer  a.b.c", NULL, NULL);
	carrier("proxy-two-fields", 0, "token_malformed", NULL, PA,
	    "Bearer a.b.c", PA, "Bearer a.b.c");
	carrier("basic-no-colon", 0, "token_malformed", NULL, PA, "Basic cnVu",
	    NULL, NULL);
	carrier("basic-empty-password", 0, "token_malformed", NULL, PA,
	    "Basic cnVuOg==", NULL, NULL);
	carrier("basic-unpadded", 0, "token_malformed", NULL, PA,
	    "Basic cnVuOmEuYi5jZA", NULL, NULL);
	carrier("malformed-proxy-no-fallback", 0, "token_malformed", NULL, PA,
	    "Bearer", A, "Bearer a.b.c");
	carrier("authorization-empty-bearer", 0, "token_malformed", NULL, A,
	    "Bearer", NULL, NULL);
}

int
main(void)
{
	cJSON *root = cJSON_CreateObject();
	char *s;

	keys_init();
	cJSON_AddStringToObject(root, "description",
	    "sluice run-token vectors (docs/tokens.md). For each vector: "
	    "configure the listed keys, run stage 1 (level signature: "
	    "structure, key, alg and signature only) and, for level full, "
	    "stage 2 with now, rules and audience; the result must be "
	    "expect. Carriers: find the token in the request headers.");
	cJSON_AddItemToObject(root, "keys", keys_json());
	vectors = cJSON_AddArrayToObject(root, "vectors");
	carriers = cJSON_AddArrayToObject(root, "carriers");
	gen_signature_level();
	gen_keys_and_algs();
	gen_encoding();
	gen_claims();
	gen_carriers();
	if ((s = cJSON_Print(root)) == NULL)
		return 1;
	printf("%s\n", s);
	free(s);
	cJSON_Delete(root);
	return 0;
}
