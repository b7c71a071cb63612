/*
 * Run tokens: JWS compact serialization (RFC 7515) with HS256 or EdDSA
 * (Ed25519, RFC 8037), verified with OpenSSL. Verification is split in two
 * pure stages so that a cache can memoise the expensive one:
 *   token_verify_sig()    structure, key choice, signature, claim types;
 *                         independent of time and route, so cacheable;
 *   token_check_claims()  issuer, lifetime, expiry, nbf/iat and audience
 *                         against the policy at a given time.
 * Neither logs, allocates on the caller's behalf or keeps global state.
 */
#ifndef SLUICE_TOKEN_H
#define SLUICE_TOKEN_H

#include <stddef.h>
#include <stdint.h>

#include <openssl/evp.h>

#include "proxy/http/http1.h"
#include "proxy/http/reason.h"

#define TOKEN_MAX_LEN 4096 /* bytes of the compact serialization */
#define TOKEN_MAX_STR 128  /* bytes of sub, jti, iss, kid, one aud */
/*
 * Bytes of a token's audiences, one NUL after each: the most a payload of
 * a TOKEN_MAX_LEN token can hold. So an aud array has no cap of its own.
 */
#define TOKEN_AUD_BYTES (TOKEN_MAX_LEN / 4 * 3)

enum token_alg {
	TOKEN_ALG_HS256 = 1, /* HMAC-SHA256, secret >= 32 bytes */
	TOKEN_ALG_EDDSA      /* Ed25519 public key */
};

/*
 * One verification key. Owned by the policy that loaded it; the secret is
 * wiped (explicit_bzero) when the policy is freed.
 */
struct token_key {
	char tk_kid[TOKEN_MAX_STR + 1]; /* "" when the key has no kid */
	enum token_alg tk_alg;
	unsigned char *tk_secret; /* HS256 */
	size_t tk_secret_len;
	EVP_PKEY *tk_pkey; /* EdDSA */
};

/* The claims of a token whose signature verified. */
struct token_claims {
	char sub[TOKEN_MAX_STR + 1];
	char jti[TOKEN_MAX_STR + 1];
	char iss[TOKEN_MAX_STR + 1];
	int has_iss;
	char aud[TOKEN_AUD_BYTES]; /* naud strings, each NUL-terminated */
	size_t naud;
	size_t aud_len; /* bytes of aud in use */
	int64_t exp;
	int64_t iat;
	int has_iat;
	int64_t nbf;
	int has_nbf;
	uint64_t max_requests;       /* 0 when the claim is absent */
	char sbx[TOKEN_MAX_STR + 1]; /* the sandbox it is bound to, or "" */
	int has_sbx;
};

/*
 * Append audience s (1 to TOKEN_MAX_STR bytes, no control byte) to c.
 * 0, or -1 when it is not one or aud is full.
 */
int token_claims_add_aud(struct token_claims *c, const char *s);
/* Non-zero when c lists audience aud. */
int token_claims_has_aud(const struct token_claims *c, const char *aud);

/* What token_check_claims() checks against (from the policy). */
struct token_rules {
	const char *issuer; /* NULL: iss not checked */
	int64_t leeway_s;
	int64_t max_ttl_s;
};

/* token.c */
/*
 * Stage 1. Checks the encoding (strict base64url, exactly three segments,
 * at most TOKEN_MAX_LEN bytes, JSON objects without duplicate keys), picks
 * the key (by kid, or the only one), requires alg == the key's alg, refuses
 * crit, verifies the signature, and only then parses the claims into *out
 * (types, required aud/exp/sub/jti, max_requests > 0). Returns REASON_OK or
 * the token_* reason. Pure: no clock, no I/O.
 */
enum reason token_verify_sig(const struct token_key *keys, size_t nkeys,
    const char *tok, size_t len, struct token_claims *out);
/*
 * Stage 2, in this order: issuer, expiry, nbf/iat in the future, lifetime,
 * audience. Returns REASON_OK or the token_* reason.
 */
enum reason token_check_claims(const struct token_claims *c,
    const struct token_rules *r, const char *audience, int64_t now);
/*
 * Find the token in a request head (DESIGN.md "Carriers"): Proxy-
 * Authorization Bearer or Basic (the password is the token), or for
 * non-CONNECT requests Authorization: Bearer. Basic credentials are decoded
 * into scratch. Returns REASON_OK with *tok and *len set (pointing into the
 * head or into scratch), REASON_TOKEN_MISSING or REASON_TOKEN_MALFORMED.
 */
#define TOKEN_CARRIER_CONNECT 1 /* a CONNECT: Authorization is ignored */
#define TOKEN_CARRIER_REVERSE 2 /* a reverse listener: see below */
/*
 * flags: TOKEN_CARRIER_*. On a reverse listener Authorization is the
 * carrier addressed to sluice (an SDK's base URL), so without
 * Proxy-Authorization an Authorization of another scheme is
 * REASON_TOKEN_MALFORMED there; on a forward listener it is meant for the
 * upstream and is REASON_TOKEN_MISSING. named (NULL: none) is a route's
 * token_header: after Proxy-Authorization and before Authorization, a
 * field of that name whose whole value is the bare token (twice, or with
 * a blank in it, is REASON_TOKEN_MALFORMED).
 */
enum reason
token_from_request(const struct http1_msg *m, int flags, const char *named,
    char *scratch, size_t scratchlen, const char **tok, size_t *len);
/*
 * Non-zero when m has exactly one Authorization field and it is
 * "Bearer <tok>" (scheme case aside): the verified token itself.
 */
int
token_authorization_is(const struct http1_msg *m, const char *tok, size_t len);
/*
 * Signature level only (for RFC test vectors and tools): structure, header,
 * key choice, alg and signature exactly as token_verify_sig(), and a
 * canonical base64url payload, but the payload need not be JSON and no
 * claim is read. Never use it to admit a request.
 */
enum reason token_verify_jws(const struct token_key *keys, size_t nkeys,
    const char *tok, size_t len);
/*
 * Fetches from OpenSSL, now, what an HS256 verification needs (the HMAC
 * template). Called when a policy's HS256 key is loaded: a first fetch
 * that fails under memory pressure leaves OpenSSL 3.0's default provider
 * answering "unsupported" for the rest of the process, which would refuse
 * every token from then on; at load time such a failure refuses the policy
 * instead. -1 when HMAC-SHA256 is not available.
 */
int token_prepare(void);
/*
 * Sign: out gets base64url(header) "." base64url(payload) "." base64url(
 * signature) and a NUL. header and payload are used as given (callers build
 * the JSON; tests use this to craft malformed tokens). key->tk_pkey must
 * hold the Ed25519 private key for EdDSA. Returns 0 with *outlen set
 * (may be NULL), or -1 when out is too small or signing failed.
 */
int token_sign(const struct token_key *key, const char *header, size_t hlen,
    const char *payload, size_t plen, char *out, size_t cap, size_t *outlen);
/*
 * Strict base64url without padding (RFC 4648 section 5), canonical: the
 * unused low bits of the last character must be zero. Returns 0 with
 * *outlen set, or -1 (bad byte, length % 4 == 1, non-canonical, or more
 * than cap bytes).
 */
int token_b64url_decode(const char *in, size_t len, unsigned char *out,
    size_t cap, size_t *outlen);
/* Encode without padding and NUL-terminate; -1 when cap is too small. */
int token_b64url_encode(const unsigned char *in, size_t len, char *out,
    size_t cap, size_t *outlen);

#endif
