/*
 * Run tokens (DESIGN.md "Run tokens", docs/tokens.md): strict decoding of a
 * JWS compact serialization, key choice, HS256 and Ed25519 signature checks
 * with OpenSSL, the claims, the time and audience rules, and the carriers a
 * request may bring a token in. Everything here is pure: no clock (callers
 * pass now), no I/O, no logging. Caching (tokencache.c), budgets (budget.c)
 * and revocation (revoke.c) are left to their own files.
 *
 * IMPORTANT: every byte of a token comes from the sandbox. The order of the
 * checks is part of the contract (docs/tokens.md): nothing in the claims is
 * looked at before the signature over header.payload has verified.
 */
#include <stdint.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "proxy/http/http1.h"
#include "proxy/http/reason.h"
#include "proxy/token/store.h"
#include "proxy/token/token.h"
#include "proxy/util/ascii.h"
#include "proxy/util/utf8.h"
#include "proxy/util/util.h"

/*
 * Headers and claims are flat objects; a deeper document is refused so the
 * (recursive) cJSON parser and our own walk stay shallow whatever the input.
 */
#define JSON_MAX_DEPTH 16
/* Largest integer a double holds exactly: 2^53 - 1. */
#define JSON_MAX_SAFE_INT 9007199254740991.0
/* Decoded bytes of one segment can never exceed this. */
#define SEG_MAX     ((TOKEN_MAX_LEN / 4) * 3 + 3)
#define HS256_LEN   32
#define ED25519_LEN 64

/*
 * Base64 (RFC 4648). url selects the URL-safe alphabet of section 5 (no
 * padding); otherwise the standard alphabet with mandatory padding. The
 * table holds value + 1 of each letter and digit (0: not one); the two
 * alphabets differ only in the last two characters, see b64_digit().
 */
/* clang-format off */
static const unsigned char b64_tab[256] = {
	['A'] = 1, ['B'] = 2, ['C'] = 3, ['D'] = 4, ['E'] = 5, ['F'] = 6,
	['G'] = 7, ['H'] = 8, ['I'] = 9, ['J'] = 10, ['K'] = 11, ['L'] = 12,
	['M'] = 13, ['N'] = 14, ['O'] = 15, ['P'] = 16, ['Q'] = 17, ['R'] = 18,
	['S'] = 19, ['T'] = 20, ['U'] = 21, ['V'] = 22, ['W'] = 23, ['X'] = 24,
	['Y'] = 25, ['Z'] = 26, ['a'] = 27, ['b'] = 28, ['c'] = 29, ['d'] = 30,
	['e'] = 31, ['f'] = 32, ['g'] = 33, ['h'] = 34, ['i'] = 35, ['j'] = 36,
	['k'] = 37, ['l'] = 38, ['m'] = 39, ['n'] = 40, ['o'] = 41, ['p'] = 42,
	['q'] = 43, ['r'] = 44, ['s'] = 45, ['t'] = 46, ['u'] = 47, ['v'] = 48,
	['w'] = 49, ['x'] = 50, ['y'] = 51, ['z'] = 52, ['0'] = 53, ['1'] = 54,
	['2'] = 55, ['3'] = 56, ['4'] = 57, ['5'] = 58, ['6'] = 59, ['7'] = 60,
	['8'] = 61, ['9'] = 62,
};
/* clang-format on */

static int
b64_digit(unsigned char c, int url)
{
	if (b64_tab[c] != 0)
		return b64_tab[c] - 1;
	if (c == (url ? '-' : '+'))
		return 62;
	if (c == (url ? '_' : '/'))
		return 63;
	return -1;
}

/*
 * Strict decoder shared by both alphabets. Refuses bytes outside the
 * alphabet, a length that leaves one lone character, and non-canonical
 * encodings (unused low bits of the last character must be zero), so that
 * every token has exactly one encoding: a token that two decoders read
 * differently, or that differs from its cache key only in padding bits,
 * must not exist. The standard alphabet needs its padding; the URL alphabet
 * must have none.
 */
static int
b64_decode(const char *in, size_t len, unsigned char *out, size_t cap,
    size_t *outlen, int url)
{
	size_t i, o = 0, pad = 0, full, rem, need;
	uint32_t acc;
	int d, k;

	if (!url) {
		if (len % 4 != 0)
			return -1;
		while (pad < 2 && len > 0 && in[len - 1] == '=') {
			len--;
			pad++;
		}
		/* "x===" or padding where a 4-aligned group ends. */
		if ((pad == 1 && len % 4 != 3) || (pad == 2 && len % 4 != 2))
			return -1;
	}
	rem = len % 4;
	if (rem == 1)
		return -1;
	full = len - rem;
	need = full / 4 * 3 + (rem == 0 ? 0 : rem - 1);
	if (need > cap)
		return -1;
	for (i = 0; i < full; i += 4) {
		acc = 0;
		for (k = 0; k < 4; k++) {
			if ((d = b64_digit((unsigned char)in[i + (size_t)k],
				 url)) < 0)
				return -1;
			acc = acc << 6 | (uint32_t)d;
		}
		out[o++] = (unsigned char)(acc >> 16);
		out[o++] = (unsigned char)(acc >> 8);
		out[o++] = (unsigned char)acc;
	}
	if (rem == 0) {
		*outlen = o;
		return 0;
	}
	acc = 0;
	for (k = 0; k < (int)rem; k++) {
		if ((d = b64_digit((unsigned char)in[full + (size_t)k], url)) <
		    0)
			return -1;
		acc = acc << 6 | (uint32_t)d;
	}
	if (rem == 2) {
		/* 12 bits carry one byte: the low 4 must be zero. */
		if ((acc & 0x0f) != 0)
			return -1;
		out[o++] = (unsigned char)(acc >> 4);
	} else {
		/* 18 bits carry two bytes: the low 2 must be zero. */
		if ((acc & 0x03) != 0)
			return -1;
		out[o++] = (unsigned char)(acc >> 10);
		out[o++] = (unsigned char)(acc >> 2);
	}
	*outlen = o;
	return 0;
}

int
token_b64url_decode(const char *in, size_t len, unsigned char *out, size_t cap,
    size_t *outlen)
{
	return b64_decode(in, len, out, cap, outlen, 1);
}

int
token_b64url_encode(const unsigned char *in, size_t len, char *out, size_t cap,
    size_t *outlen)
{
	static const char alpha[] =
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	size_t i, o = 0, need;
	uint32_t acc;

	need = len / 3 * 4 + (len % 3 == 0 ? 0 : len % 3 + 1);
	if (need >= cap)
		return -1;
	for (i = 0; i + 3 <= len; i += 3) {
		acc = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 |
		    in[i + 2];
		out[o++] = alpha[acc >> 18 & 63];
		out[o++] = alpha[acc >> 12 & 63];
		out[o++] = alpha[acc >> 6 & 63];
		out[o++] = alpha[acc & 63];
	}
	if (len - i == 1) {
		acc = (uint32_t)in[i] << 16;
		out[o++] = alpha[acc >> 18 & 63];
		out[o++] = alpha[acc >> 12 & 63];
	} else if (len - i == 2) {
		acc = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
		out[o++] = alpha[acc >> 18 & 63];
		out[o++] = alpha[acc >> 12 & 63];
		out[o++] = alpha[acc >> 6 & 63];
	}
	out[o] = '\0';
	if (outlen != NULL)
		*outlen = o;
	return 0;
}

/*
 * A JSON syntax check (RFC 8259) run before cJSON sees the bytes, because
 * cJSON is lenient where a lenient reading is an attack: it accepts
 * trailing bytes, numbers such as "01", "+1" and "1.", a UTF-8 byte order
 * mark, raw control characters, invalid UTF-8, and it turns "\u0000" and
 * malformed "\uXXXX" escapes into a NUL that silently cuts a string short
 * ("jti\u0000x" would read as "jti"). Here each of those is refused, the
 * nesting depth is capped, and the top-level value must be an object.
 * Iterative (no recursion); returns 0 or -1.
 */
static size_t
json_ws(const unsigned char *p, size_t len, size_t i)
{
	while (i < len &&
	    (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r'))
		i++;
	return i;
}

static int
json_hex4(const unsigned char *p, unsigned *v)
{
	unsigned i;
	int d;

	*v = 0;
	for (i = 0; i < 4; i++) {
		if ((d = ascii_hex_value(p[i])) < 0)
			return -1;
		*v = *v << 4 | (unsigned)d;
	}
	return 0;
}

/* p[*i] is the opening quote; on success *i is just past the closing one. */
static int
json_string(const unsigned char *p, size_t len, size_t *i)
{
	size_t j = *i + 1, n;
	unsigned v, w;

	for (;;) {
		if (j >= len || p[j] < 0x20)
			return -1;
		if (p[j] == '"') {
			*i = j + 1;
			return 0;
		}
		if (p[j] == '\\') {
			if (j + 1 >= len)
				return -1;
			if (p[j + 1] != '\0' &&
			    strchr("\"\\/bfnrt", p[j + 1]) != NULL) {
				j += 2;
				continue;
			}
			if (p[j + 1] != 'u' || len - j < 6 ||
			    json_hex4(p + j + 2, &v) == -1 || v == 0)
				return -1;
			j += 6;
			if (v >= 0xdc00 && v <= 0xdfff)
				return -1; /* lone low surrogate */
			if (v >= 0xd800 && v <= 0xdbff) {
				if (len - j < 6 || p[j] != '\\' ||
				    p[j + 1] != 'u' ||
				    json_hex4(p + j + 2, &w) == -1 ||
				    w < 0xdc00 || w > 0xdfff)
					return -1;
				j += 6;
			}
			continue;
		}
		if ((n = utf8_len(p + j, len - j)) == 0)
			return -1;
		j += n;
	}
}

static int
is_digit(unsigned char c)
{
	return c >= '0' && c <= '9';
}

static int
json_number(const unsigned char *p, size_t len, size_t *i)
{
	size_t j = *i;

	if (j < len && p[j] == '-')
		j++;
	if (j >= len || !is_digit(p[j]))
		return -1;
	if (p[j] == '0')
		j++;
	else
		while (j < len && is_digit(p[j]))
			j++;
	if (j < len && p[j] == '.') {
		j++;
		if (j >= len || !is_digit(p[j]))
			return -1;
		while (j < len && is_digit(p[j]))
			j++;
	}
	if (j < len && (p[j] == 'e' || p[j] == 'E')) {
		j++;
		if (j < len && (p[j] == '+' || p[j] == '-'))
			j++;
		if (j >= len || !is_digit(p[j]))
			return -1;
		while (j < len && is_digit(p[j]))
			j++;
	}
	*i = j;
	return 0;
}

static int
json_literal(const unsigned char *p, size_t len, size_t *i)
{
	static const char *const lits[] = { "true", "false", "null" };
	size_t k, n;

	for (k = 0; k < SL_NELEM(lits); k++) {
		n = strlen(lits[k]);
		if (len - *i >= n && memcmp(p + *i, lits[k], n) == 0) {
			*i += n;
			return 0;
		}
	}
	return -1;
}

enum json_expect {
	JX_VALUE,        /* any value */
	JX_VALUE_OR_END, /* just after '[' */
	JX_KEY_OR_END,   /* just after '{' */
	JX_KEY,          /* after ',' in an object */
	JX_COLON,        /* after a key */
	JX_COMMA_OR_END, /* after a value inside a container */
	JX_DONE          /* the top-level object is closed */
};

/* json_check()'s cursor: where, what may come there, the open containers. */
struct json_scan {
	const unsigned char *p;
	size_t len, i, depth;
	enum json_expect st;
	char stack[JSON_MAX_DEPTH]; /* '{' or '[' per open container */
};

/* The steps below return -1 (invalid), 0 (a value just ended) or 1. */

/* At a value: open a container (1), or read a scalar whole (0). */
static int
json_step_value(struct json_scan *js)
{
	unsigned char c = js->p[js->i];

	if (c == '{' || c == '[') {
		if (js->depth == JSON_MAX_DEPTH)
			return -1;
		js->stack[js->depth++] = (char)c;
		js->i++;
		js->st = c == '{' ? JX_KEY_OR_END : JX_VALUE_OR_END;
		return 1;
	}
	if (c == '"')
		return json_string(js->p, js->len, &js->i);
	if (c == '-' || is_digit(c))
		return json_number(js->p, js->len, &js->i);
	return json_literal(js->p, js->len, &js->i);
}

/* At a member name: read it, a colon must follow. */
static int
json_step_key(struct json_scan *js)
{
	if (js->p[js->i] != '"' || json_string(js->p, js->len, &js->i) == -1)
		return -1;
	js->st = JX_COLON;
	return 1;
}

/* After a value inside a container: a comma (1), or its closing (0). */
static int
json_step_comma_or_end(struct json_scan *js)
{
	unsigned char c = js->p[js->i];
	char open = js->stack[js->depth - 1];

	if (c == ',') {
		js->i++;
		js->st = open == '{' ? JX_KEY : JX_VALUE;
		return 1;
	}
	if (c != (open == '{' ? '}' : ']'))
		return -1;
	js->depth--;
	js->i++;
	return 0;
}

/* One token at js->i (no white space) against what may come there. */
static int
json_step(struct json_scan *js)
{
	unsigned char c = js->p[js->i];

	switch (js->st) {
	case JX_DONE:
		return -1;
	case JX_VALUE_OR_END:
	case JX_KEY_OR_END:
		/* The container opened just before closes: empty. */
		if (c == (js->st == JX_VALUE_OR_END ? ']' : '}')) {
			js->depth--;
			js->i++;
			return 0;
		}
		return js->st == JX_VALUE_OR_END ? json_step_value(js) :
						   json_step_key(js);
	case JX_VALUE:
		return json_step_value(js);
	case JX_KEY:
		return json_step_key(js);
	case JX_COLON:
		if (c != ':')
			return -1;
		js->i++;
		js->st = JX_VALUE;
		return 1;
	case JX_COMMA_OR_END:
		return json_step_comma_or_end(js);
	}
	return -1;
}

static int
json_check(const unsigned char *p, size_t len)
{
	struct json_scan js;
	int r;

	js.p = p;
	js.len = len;
	js.depth = 0;
	js.st = JX_VALUE;
	js.i = json_ws(p, len, 0);
	if (js.i >= len || p[js.i] != '{')
		return -1;
	while ((js.i = json_ws(p, len, js.i)) < len) {
		if ((r = json_step(&js)) == -1)
			return -1;
		/* A value (or a container) just ended. */
		if (r == 0)
			js.st = js.depth == 0 ? JX_DONE : JX_COMMA_OR_END;
	}
	return js.st == JX_DONE ? 0 : -1;
}

static int
cmp_name(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/*
 * Duplicate member names in one object, by sorting the names: the header
 * is parsed before any signature is checked, so a quadratic comparison
 * would let anyone buy CPU time with a header of a few hundred members.
 */
static int
object_has_dup(const cJSON *obj)
{
	const char *names[SEG_MAX / 4 + 1];
	const cJSON *a;
	size_t n = 0, i;

	for (a = obj->child; a != NULL; a = a->next) {
		if (n == SL_NELEM(names))
			return 1; /* cannot happen: a member takes 4+ bytes */
		names[n++] = a->string;
	}
	qsort(names, n, sizeof(names[0]), cmp_name);
	for (i = 1; i < n; i++)
		if (strcmp(names[i - 1], names[i]) == 0)
			return 1;
	return 0;
}

/*
 * Duplicate member names anywhere in the document. cJSON keeps every
 * member, in order, and its lookups return the first, while other JSON
 * libraries return the last: a token with two "aud" or two "alg" members
 * would mean different things to different readers, so it is refused.
 * Names are compared after unescaping ("a" and "\u0061" are the same name).
 * Iterative, with one cursor per level: json_check() capped the depth.
 */
static int
json_has_dup(const cJSON *root)
{
	const cJSON *cursor[JSON_MAX_DEPTH + 1];
	const cJSON *a;
	size_t d = 0;

	if (cJSON_IsObject(root) && object_has_dup(root))
		return 1;
	cursor[0] = root->child;
	for (;;) {
		if ((a = cursor[d]) == NULL) {
			if (d == 0)
				return 0;
			d--;
			continue;
		}
		cursor[d] = a->next;
		if ((!cJSON_IsObject(a) && !cJSON_IsArray(a)) ||
		    a->child == NULL)
			continue;
		if (cJSON_IsObject(a) && object_has_dup(a))
			return 1;
		if (d + 1 == SL_NELEM(cursor))
			return 1; /* cannot happen: deeper than JSON_MAX_DEPTH
				   */
		cursor[++d] = a->child;
	}
}

/* Decode, check and parse one JSON segment; NULL when malformed. */
static cJSON *
segment_json(const char *seg, size_t len)
{
	unsigned char buf[SEG_MAX];
	size_t n;
	cJSON *root;

	if (b64_decode(seg, len, buf, sizeof(buf), &n, 1) == -1 ||
	    json_check(buf, n) == -1)
		return NULL;
	if ((root = cJSON_ParseWithLength((const char *)buf, n)) == NULL)
		return NULL;
	if (!cJSON_IsObject(root) || json_has_dup(root)) {
		cJSON_Delete(root);
		return NULL;
	}
	return root;
}

/*
 * A claim string: 1..TOKEN_MAX_STR bytes without control characters (the
 * JSON check already made it valid UTF-8 without NULs). Control characters
 * are refused because a jti or sub ends up in files that are one entry per
 * line (revocations) and in operators' terminals.
 */
static int
claim_str(const cJSON *it, char *out, size_t cap)
{
	const unsigned char *s;
	size_t n, i;

	if (!cJSON_IsString(it) || it->valuestring == NULL)
		return -1;
	s = (const unsigned char *)it->valuestring;
	n = strlen(it->valuestring);
	if (n == 0 || n > TOKEN_MAX_STR || n >= cap)
		return -1;
	for (i = 0; i < n; i++)
		if (s[i] < 0x20 || s[i] == 0x7f)
			return -1;
	memcpy(out, s, n + 1);
	return 0;
}

/*
 * A claim integer: a JSON number with an integral value within +-(2^53-1),
 * the range in which every JSON implementation reads the same value.
 * Fractions are refused; an exponent form of an integer ("17e8") is read
 * as that integer.
 */
static int
claim_int(const cJSON *it, int64_t *out)
{
	double d;

	if (!cJSON_IsNumber(it))
		return -1;
	d = it->valuedouble;
	if (!(d >= -JSON_MAX_SAFE_INT && d <= JSON_MAX_SAFE_INT))
		return -1; /* also NaN */
	if ((double)(int64_t)d != d)
		return -1;
	*out = (int64_t)d;
	return 0;
}

int
token_claims_add_aud(struct token_claims *c, const char *s)
{
	size_t n, i;

	if (s == NULL || (n = strlen(s)) == 0 || n > TOKEN_MAX_STR ||
	    c->aud_len + n + 1 > sizeof(c->aud))
		return -1;
	for (i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return -1;
	memcpy(c->aud + c->aud_len, s, n + 1);
	c->aud_len += n + 1;
	c->naud++;
	return 0;
}

int
token_claims_has_aud(const struct token_claims *c, const char *aud)
{
	size_t off = 0, i;

	for (i = 0; i < c->naud && off < c->aud_len && off < sizeof(c->aud);
	     i++) {
		const char *s = c->aud + off;
		size_t n = strnlen(s, sizeof(c->aud) - off);

		if (strcmp(s, aud) == 0)
			return 1;
		off += n + 1;
	}
	return 0;
}

static enum reason
parse_claims(const cJSON *root, struct token_claims *c)
{
	const cJSON *it, *el;
	int64_t v;

	it = cJSON_GetObjectItemCaseSensitive(root, "aud");
	if (cJSON_IsString(it)) {
		if (token_claims_add_aud(c, it->valuestring) == -1)
			return REASON_TOKEN_MALFORMED;
	} else if (cJSON_IsArray(it)) {
		cJSON_ArrayForEach(el, it) {
			if (!cJSON_IsString(el) ||
			    token_claims_add_aud(c, el->valuestring) == -1)
				return REASON_TOKEN_MALFORMED;
		}
		if (c->naud == 0)
			return REASON_TOKEN_MALFORMED;
	} else
		return REASON_TOKEN_MALFORMED;

	if (claim_int(cJSON_GetObjectItemCaseSensitive(root, "exp"), &c->exp) ==
		-1 ||
	    claim_str(cJSON_GetObjectItemCaseSensitive(root, "sub"), c->sub,
		sizeof(c->sub)) == -1 ||
	    claim_str(cJSON_GetObjectItemCaseSensitive(root, "jti"), c->jti,
		sizeof(c->jti)) == -1)
		return REASON_TOKEN_MALFORMED;

	if ((it = cJSON_GetObjectItemCaseSensitive(root, "iat")) != NULL) {
		if (claim_int(it, &c->iat) == -1)
			return REASON_TOKEN_MALFORMED;
		c->has_iat = 1;
	}
	if ((it = cJSON_GetObjectItemCaseSensitive(root, "nbf")) != NULL) {
		if (claim_int(it, &c->nbf) == -1)
			return REASON_TOKEN_MALFORMED;
		c->has_nbf = 1;
	}
	if ((it = cJSON_GetObjectItemCaseSensitive(root, "iss")) != NULL) {
		if (claim_str(it, c->iss, sizeof(c->iss)) == -1)
			return REASON_TOKEN_MALFORMED;
		c->has_iss = 1;
	}
	/* Gateway identity: the sandbox, when it is not the sub. */
	if ((it = cJSON_GetObjectItemCaseSensitive(root, "sbx")) != NULL) {
		if (claim_str(it, c->sbx, sizeof(c->sbx)) == -1)
			return REASON_TOKEN_MALFORMED;
		c->has_sbx = 1;
	}
	it = cJSON_GetObjectItemCaseSensitive(root, "max_requests");
	if (it != NULL) {
		if (claim_int(it, &v) == -1 || v <= 0)
			return REASON_TOKEN_MALFORMED;
		c->max_requests = (uint64_t)v;
	}
	return REASON_OK;
}

/*
 * An HMAC-SHA256 context keyed with zeros, made once and duplicated for
 * each MAC. Fetching "HMAC" and then "SHA256" takes the provider store's
 * locks and property queries on every call, which was most of the cost of
 * an HS256 verification; a duplicate carries the fetched algorithms along.
 * The template holds no secret and lives as long as the process, like
 * OpenSSL's own method store. Not thread-safe on first use: the daemon,
 * the CLI and the tests verify tokens from one thread.
 */
static EVP_MAC_CTX *
hmac_template(void)
{
	static EVP_MAC_CTX *tmpl;
	static char digest[] = "SHA256";
	static const unsigned char zeros[32];
	OSSL_PARAM params[2];
	EVP_MAC_CTX *ctx;
	EVP_MAC *mac;

	if (tmpl != NULL)
		return tmpl;
	if ((mac = EVP_MAC_fetch(NULL, "HMAC", NULL)) == NULL)
		return NULL;
	ctx = EVP_MAC_CTX_new(mac);
	EVP_MAC_free(mac); /* the context keeps its own reference */
	if (ctx == NULL)
		return NULL;
	params[0] =
	    OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0);
	params[1] = OSSL_PARAM_construct_end();
	if (EVP_MAC_init(ctx, zeros, sizeof(zeros), params) != 1) {
		EVP_MAC_CTX_free(ctx);
		return NULL;
	}
	tmpl = ctx;
	return tmpl;
}

int
token_prepare(void)
{
	return hmac_template() != NULL ? 0 : -1;
}

/*
 * HMAC-SHA256 of data under key. The keyed context is freed (and so
 * cleansed by OpenSSL) before returning: no key-derived state outlives
 * the call.
 */
static int
hs256(const unsigned char *key, size_t keylen, const char *data, size_t len,
    unsigned char out[HS256_LEN])
{
	EVP_MAC_CTX *tmpl, *ctx = NULL;
	size_t outl = 0;
	int rc = -1;

	if ((tmpl = hmac_template()) == NULL ||
	    (ctx = EVP_MAC_CTX_dup(tmpl)) == NULL)
		goto done;
	if (EVP_MAC_init(ctx, key, keylen, NULL) != 1 ||
	    EVP_MAC_update(ctx, (const unsigned char *)data, len) != 1 ||
	    EVP_MAC_final(ctx, out, &outl, HS256_LEN) != 1 || outl != HS256_LEN)
		goto done;
	rc = 0;
done:
	EVP_MAC_CTX_free(ctx);
	if (rc == -1)
		ERR_clear_error();
	return rc;
}

static int
key_is_ed25519(EVP_PKEY *pkey)
{
	return pkey != NULL && EVP_PKEY_is_a(pkey, "ED25519");
}

/* 1 when sig verifies over data with key, 0 when not. */
static int
sig_ok(const struct token_key *key, const char *data, size_t len,
    const unsigned char *sig, size_t siglen)
{
	unsigned char mac[HS256_LEN];
	EVP_MD_CTX *ctx;
	int ok = 0;

	if (key->tk_alg == TOKEN_ALG_HS256) {
		/* A weak or missing secret verifies nothing. */
		if (siglen != HS256_LEN || key->tk_secret == NULL ||
		    key->tk_secret_len < 32 ||
		    hs256(key->tk_secret, key->tk_secret_len, data, len, mac) ==
			-1)
			return 0;
		ok = CRYPTO_memcmp(mac, sig, HS256_LEN) == 0;
		OPENSSL_cleanse(mac, sizeof(mac));
		return ok;
	}
	if (key->tk_alg != TOKEN_ALG_EDDSA || siglen != ED25519_LEN ||
	    !key_is_ed25519(key->tk_pkey))
		return 0;
	if ((ctx = EVP_MD_CTX_new()) == NULL)
		return 0;
	/* Ed25519 is a one-shot scheme: no digest, EVP_DigestVerify(). */
	if (EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, key->tk_pkey) == 1 &&
	    EVP_DigestVerify(ctx, sig, siglen, (const unsigned char *)data,
		len) == 1)
		ok = 1;
	EVP_MD_CTX_free(ctx);
	if (!ok)
		ERR_clear_error();
	return ok;
}

/*
 * The header: alg and kid are read, crit is refused (we implement no
 * extension, RFC 7515 section 4.1.11), everything else (typ, cty, and in
 * particular jku, jwk, x5u: sluice never fetches or trusts keys from a
 * token) is ignored.
 */
static enum reason
choose_key(const struct token_key *keys, size_t nkeys, const cJSON *hdr,
    const struct token_key **out)
{
	const cJSON *alg, *kid;
	const struct token_key *key = NULL;
	enum token_alg a;
	size_t i, n;

	alg = cJSON_GetObjectItemCaseSensitive(hdr, "alg");
	if (!cJSON_IsString(alg) || alg->valuestring == NULL ||
	    cJSON_GetObjectItemCaseSensitive(hdr, "crit") != NULL)
		return REASON_TOKEN_MALFORMED;
	kid = cJSON_GetObjectItemCaseSensitive(hdr, "kid");
	if (kid != NULL) {
		if (!cJSON_IsString(kid) || kid->valuestring == NULL)
			return REASON_TOKEN_MALFORMED;
		n = strlen(kid->valuestring);
		if (n == 0 || n > TOKEN_MAX_STR)
			return REASON_TOKEN_MALFORMED;
		for (i = 0; i < nkeys; i++)
			if (keys[i].tk_kid[0] != '\0' &&
			    strcmp(keys[i].tk_kid, kid->valuestring) == 0) {
				key = &keys[i];
				break;
			}
	} else if (nkeys == 1)
		key = &keys[0];
	if (key == NULL)
		return REASON_TOKEN_UNKNOWN_KID;
	/* The key decides the algorithm; the token can only agree. */
	if (strcmp(alg->valuestring, "HS256") == 0)
		a = TOKEN_ALG_HS256;
	else if (strcmp(alg->valuestring, "EdDSA") == 0)
		a = TOKEN_ALG_EDDSA;
	else
		return REASON_TOKEN_UNSUPPORTED_ALG;
	if (a != key->tk_alg)
		return REASON_TOKEN_UNSUPPORTED_ALG;
	*out = key;
	return REASON_OK;
}

/*
 * Structure, header, key, alg and signature. On REASON_OK, *payload and
 * *plen locate the (still encoded) payload segment inside tok.
 */
static enum reason
verify_jws(const struct token_key *keys, size_t nkeys, const char *tok,
    size_t len, const char **payload, size_t *plen)
{
	unsigned char sig[SEG_MAX];
	const struct token_key *key = NULL;
	const char *d1, *d2;
	size_t siglen;
	enum reason r;
	cJSON *hdr;

	if (tok == NULL || len == 0 || len > TOKEN_MAX_LEN)
		return REASON_TOKEN_MALFORMED;
	/* Exactly two dots: a JWE (four) or a bare JSON blob is refused. */
	if ((d1 = memchr(tok, '.', len)) == NULL ||
	    (d2 = memchr(d1 + 1, '.', len - (size_t)(d1 + 1 - tok))) == NULL ||
	    memchr(d2 + 1, '.', len - (size_t)(d2 + 1 - tok)) != NULL)
		return REASON_TOKEN_MALFORMED;
	if ((hdr = segment_json(tok, (size_t)(d1 - tok))) == NULL)
		return REASON_TOKEN_MALFORMED;
	r = nkeys == 0 || keys == NULL ? REASON_TOKEN_UNKNOWN_KID :
					 choose_key(keys, nkeys, hdr, &key);
	cJSON_Delete(hdr);
	if (r != REASON_OK)
		return r;
	if (b64_decode(d2 + 1, len - (size_t)(d2 + 1 - tok), sig, sizeof(sig),
		&siglen, 1) == -1)
		return REASON_TOKEN_MALFORMED;
	/* The signing input is the ASCII header.payload (RFC 7515 5.2). */
	if (!sig_ok(key, tok, (size_t)(d2 - tok), sig, siglen))
		return REASON_TOKEN_BAD_SIGNATURE;
	*payload = d1 + 1;
	*plen = (size_t)(d2 - d1 - 1);
	return REASON_OK;
}

enum reason
token_verify_jws(const struct token_key *keys, size_t nkeys, const char *tok,
    size_t len)
{
	unsigned char buf[SEG_MAX];
	const char *payload;
	size_t plen;

	enum reason r;

	if ((r = verify_jws(keys, nkeys, tok, len, &payload, &plen)) !=
	    REASON_OK)
		return r;
	/* The payload must still be canonical base64url (of any bytes). */
	if (b64_decode(payload, plen, buf, sizeof(buf), &plen, 1) == -1)
		return REASON_TOKEN_MALFORMED;
	return REASON_OK;
}

enum reason
token_verify_sig(const struct token_key *keys, size_t nkeys, const char *tok,
    size_t len, struct token_claims *out)
{
	const char *payload;
	size_t plen;
	enum reason r;
	cJSON *claims;

	memset(out, 0, sizeof(*out));
	if ((r = verify_jws(keys, nkeys, tok, len, &payload, &plen)) !=
	    REASON_OK)
		return r;
	/* Only now, with the signature verified, are the claims read. */
	if ((claims = segment_json(payload, plen)) == NULL)
		return REASON_TOKEN_MALFORMED;
	r = parse_claims(claims, out);
	cJSON_Delete(claims);
	if (r != REASON_OK)
		memset(out, 0, sizeof(*out));
	return r;
}

/* a + b, saturated (exp and leeway are bounded, but stay defined). */
static int64_t
sat_add(int64_t a, int64_t b)
{
	int64_t r;

	if (__builtin_add_overflow(a, b, &r))
		return b > 0 ? INT64_MAX : INT64_MIN;
	return r;
}

enum reason
token_check_claims(const struct token_claims *c, const struct token_rules *r,
    const char *audience, int64_t now)
{
	int64_t leeway = r->leeway_s > 0 ? r->leeway_s : 0;
	int64_t life, late = sat_add(now, leeway);

	if (r->issuer != NULL &&
	    (!c->has_iss || strcmp(c->iss, r->issuer) != 0))
		return REASON_TOKEN_WRONG_ISSUER;
	if (now >= sat_add(c->exp, leeway))
		return REASON_TOKEN_EXPIRED;
	if ((c->has_nbf && c->nbf > late) || (c->has_iat && c->iat > late))
		return REASON_TOKEN_NOT_YET_VALID;
	/* Claims are within +-2^53 (claim_int), now may be anything. */
	if (__builtin_sub_overflow(c->exp, c->has_iat ? c->iat : now, &life) ||
	    life > r->max_ttl_s)
		return REASON_TOKEN_LIFETIME_TOO_LONG;
	if (audience != NULL && token_claims_has_aud(c, audience))
		return REASON_OK;
	return REASON_TOKEN_WRONG_AUDIENCE;
}

/*
 * Split "scheme SP credential". Exactly one SP: RFC 9110 section 11.4
 * allows several, but every client we know sends one, and a second reading
 * of the same field is not worth the ambiguity. *cred is NULL when there
 * is no SP at all.
 */
static void
split_auth(const struct http1_hdr *h, const char **scheme, size_t *slen,
    const char **cred, size_t *clen)
{
	const char *sp = memchr(h->value, ' ', h->value_len);

	*scheme = h->value;
	*cred = NULL;
	*clen = 0;
	if (sp == NULL) {
		*slen = h->value_len;
		return;
	}
	*slen = (size_t)(sp - h->value);
	*cred = sp + 1;
	*clen = h->value_len - *slen - 1;
}

/* A credential: non-empty and without SP or HTAB (token68, RFC 9110). */
static int
cred_ok(const char *cred, size_t clen)
{
	return cred != NULL && clen > 0 && memchr(cred, ' ', clen) == NULL &&
	    memchr(cred, '\t', clen) == NULL;
}

static enum reason
from_proxy_auth(const struct http1_hdr *h, char *scratch, size_t scratchlen,
    const char **tok, size_t *len)
{
	const char *scheme, *cred, *colon;
	size_t slen, clen, n;

	split_auth(h, &scheme, &slen, &cred, &clen);
	if (!cred_ok(cred, clen))
		return REASON_TOKEN_MALFORMED;
	if (http1_name_eq(scheme, slen, "Bearer")) {
		*tok = cred;
		*len = clen;
		return REASON_OK;
	}
	if (!http1_name_eq(scheme, slen, "Basic"))
		return REASON_TOKEN_MALFORMED;
	/* RFC 7617: base64(user-id ":" password); the password is the jwt. */
	if (scratch == NULL ||
	    b64_decode(cred, clen, (unsigned char *)scratch, scratchlen, &n,
		0) == -1 ||
	    (colon = memchr(scratch, ':', n)) == NULL ||
	    (size_t)(colon - scratch) + 1 == n)
		return REASON_TOKEN_MALFORMED;
	*tok = colon + 1;
	*len = n - (size_t)(colon - scratch) - 1;
	return REASON_OK;
}

enum reason
token_from_request(const struct http1_msg *m, int flags, const char *named,
    char *scratch, size_t scratchlen, const char **tok, size_t *len)
{
	int is_connect = (flags & TOKEN_CARRIER_CONNECT) != 0;
	const char *scheme, *cred;
	size_t slen, clen;
	ssize_t i;

	*tok = NULL;
	*len = 0;
	/* Proxy-Authorization first: it is addressed to sluice. */
	if ((i = http1_find(m, "Proxy-Authorization", 0)) >= 0) {
		if (http1_find(m, "Proxy-Authorization", (size_t)i + 1) >= 0)
			return REASON_TOKEN_MALFORMED;
		return from_proxy_auth(&m->hdrs[i], scratch, scratchlen, tok,
		    len);
	}
	/*
	 * The route's token_header (x-api-key, say): its whole value is the
	 * bare token. Not on CONNECT: the field belongs inside the tunnel.
	 */
	if (named != NULL && !is_connect &&
	    (i = http1_find(m, named, 0)) >= 0) {
		if (http1_find(m, named, (size_t)i + 1) >= 0 ||
		    !cred_ok(m->hdrs[i].value, m->hdrs[i].value_len))
			return REASON_TOKEN_MALFORMED;
		*tok = m->hdrs[i].value;
		*len = m->hdrs[i].value_len;
		return REASON_OK;
	}
	/*
	 * Authorization is the upstream's field and is forwarded unchanged;
	 * only a Bearer credential in it is taken as a run token, and never
	 * on CONNECT (the field belongs to the tunnelled requests, which
	 * sluice does not see).
	 */
	if (is_connect || (i = http1_find(m, "Authorization", 0)) < 0)
		return REASON_TOKEN_MISSING;
	if (http1_find(m, "Authorization", (size_t)i + 1) >= 0)
		return REASON_TOKEN_MALFORMED;
	split_auth(&m->hdrs[i], &scheme, &slen, &cred, &clen);
	/*
	 * Another scheme is meant for the upstream on a forward listener;
	 * on a reverse listener Authorization is sluice's own carrier.
	 */
	if (!http1_name_eq(scheme, slen, "Bearer"))
		return (flags & TOKEN_CARRIER_REVERSE) ?
		    REASON_TOKEN_MALFORMED :
		    REASON_TOKEN_MISSING;
	if (!cred_ok(cred, clen))
		return REASON_TOKEN_MALFORMED;
	*tok = cred;
	*len = clen;
	return REASON_OK;
}

int
token_authorization_is(const struct http1_msg *m, const char *tok, size_t len)
{
	const char *scheme, *cred;
	size_t slen, clen;
	ssize_t i;

	if ((i = http1_find(m, "Authorization", 0)) < 0 ||
	    http1_find(m, "Authorization", (size_t)i + 1) >= 0)
		return 0;
	split_auth(&m->hdrs[i], &scheme, &slen, &cred, &clen);
	return http1_name_eq(scheme, slen, "Bearer") && cred != NULL &&
	    clen == len && CRYPTO_memcmp(cred, tok, len) == 0;
}

int
token_sign(const struct token_key *key, const char *header, size_t hlen,
    const char *payload, size_t plen, char *out, size_t cap, size_t *outlen)
{
	unsigned char sig[ED25519_LEN];
	size_t n, m, siglen = 0;
	EVP_MD_CTX *ctx;
	int rc = -1;

	if (token_b64url_encode((const unsigned char *)header, hlen, out, cap,
		&n) == -1 ||
	    n + 1 >= cap)
		return -1;
	out[n++] = '.';
	if (token_b64url_encode((const unsigned char *)payload, plen, out + n,
		cap - n, &m) == -1)
		return -1;
	n += m;
	if (key->tk_alg == TOKEN_ALG_HS256) {
		if (key->tk_secret == NULL ||
		    hs256(key->tk_secret, key->tk_secret_len, out, n, sig) ==
			-1)
			return -1;
		siglen = HS256_LEN;
	} else if (key->tk_alg == TOKEN_ALG_EDDSA &&
	    key_is_ed25519(key->tk_pkey)) {
		if ((ctx = EVP_MD_CTX_new()) == NULL)
			return -1;
		siglen = sizeof(sig);
		if (EVP_DigestSignInit(ctx, NULL, NULL, NULL, key->tk_pkey) ==
			1 &&
		    EVP_DigestSign(ctx, sig, &siglen,
			(const unsigned char *)out, n) == 1 &&
		    siglen == ED25519_LEN)
			rc = 0;
		EVP_MD_CTX_free(ctx);
		if (rc == -1) {
			ERR_clear_error();
			return -1;
		}
	} else
		return -1;
	if (n + 1 >= cap)
		return -1;
	out[n++] = '.';
	if (token_b64url_encode(sig, siglen, out + n, cap - n, &m) == -1)
		return -1;
	n += m;
	if (outlen != NULL)
		*outlen = n;
	return 0;
}
