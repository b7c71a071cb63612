/*
 * libFuzzer target for the audit writer's string escaping (proxy/audit.c),
 * through the real writer on a temporary file (fsync "never", no event
 * loop: each commit is one write). The first byte says how many times
 * (1 to 64) the rest is added as a string value, under keys v0, v1, ...,
 * so long values also reach the line cap; its top bit adds one more field
 * whose key is "k" and the value (cut at its first NUL).
 * Invariants, not just "no crash": every line is one line of valid UTF-8
 * with no raw control character (C0, DEL or C1), parses as one JSON
 * object, and each value decodes to a prefix of the input, cut at a
 * character boundary, in which each byte that starts no valid UTF-8
 * sequence became U+FFFD; the escaped value stays within AUDIT_VALUE_MAX
 * and a cut value comes with <key>_truncated holding the input length. A
 * field is missing only when the line says "overflow".
 */
#include <sys/stat.h>

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "proxy/proxy.h"
#include "tests/fuzz/fuzz_audit_file.h"
#include "proxy/util/utf8.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_IN   (4 * AUDIT_VALUE_MAX)
#define MAX_REPS 64

static char line[AUDIT_LINE_MAX + 1];

/* The input as the escaper should give it back, and where chars end. */
static unsigned char want[3 * MAX_IN];
static size_t bound[MAX_IN + 1]; /* bound[k]: bytes of want for k chars */
static size_t nbound;

/* What a reader should get back for s[0..len), and the char boundaries. */
static void
expect(const unsigned char *s, size_t len)
{
	size_t i = 0, o = 0, n;

	nbound = 0;
	bound[nbound++] = 0;
	while (i < len) {
		n = s[i] < 0x80 ? 1 : utf8_len(s + i, len - i);
		if (n == 0) {
			memcpy(want + o, "\xef\xbf\xbd", 3);
			o += 3;
			n = 1;
		} else {
			memcpy(want + o, s + i, n);
			o += n;
		}
		i += n;
		bound[nbound++] = o;
	}
}

/* The line holds only valid UTF-8, no raw control, and one newline. */
static void
check_text(const char *l, size_t len)
{
	const unsigned char *u = (const unsigned char *)l;
	size_t i = 0, n;

	check(len >= 2 && l[len - 1] == '\n' && l[len - 2] == '}', "line end");
	check(l[0] == '{', "line start");
	while (i < len - 1) {
		if (u[i] < 0x80) {
			check(u[i] >= 0x20 && u[i] != 0x7f, "raw control");
			i++;
			continue;
		}
		n = utf8_len(u + i, len - 1 - i);
		check(n != 0, "invalid UTF-8 in the line");
		check(!(u[i] == 0xc2 && u[i + 1] < 0xa0), "raw C1 control");
		i += n;
	}
}

/*
 * The raw JSON text of key's string value in the line: cJSON stops a
 * string at \u0000, so the value is checked from the text as well.
 */
static const char *
raw_value(const char *l, const char *key, size_t *len)
{
	char pat[64];
	const char *p, *q;

	snprintf(pat, sizeof(pat), ",\"%s\":\"", key);
	if ((p = strstr(l, pat)) == NULL)
		return NULL;
	p += strlen(pat);
	for (q = p; *q != '"'; q++)
		if (*q == '\\')
			q++;
	*len = (size_t)(q - p);
	return p;
}

static unsigned
hexval(char c)
{
	if (c >= '0' && c <= '9')
		return (unsigned)(c - '0');
	if (c >= 'a' && c <= 'f')
		return (unsigned)(c - 'a' + 10);
	check(c >= 'A' && c <= 'F', "hex digit");
	return (unsigned)(c - 'A' + 10);
}

/* Decode the JSON string text r[0..n) (the escapes the writer uses). */
static size_t
decode(const char *r, size_t n, unsigned char *out)
{
	size_t i = 0, o = 0;
	unsigned v;

	while (i < n) {
		if (r[i] != '\\') {
			out[o++] = (unsigned char)r[i++];
			continue;
		}
		check(i + 1 < n, "escape at the end");
		if (r[i + 1] == '"' || r[i + 1] == '\\') {
			out[o++] = (unsigned char)r[i + 1];
			i += 2;
			continue;
		}
		check(r[i + 1] == 'u' && i + 6 <= n, "unexpected escape");
		v = hexval(r[i + 2]) << 12 | hexval(r[i + 3]) << 8 |
		    hexval(r[i + 4]) << 4 | hexval(r[i + 5]);
		if (v < 0x80)
			out[o++] = (unsigned char)v;
		else if (v < 0x800) {
			out[o++] = (unsigned char)(0xc0 | v >> 6);
			out[o++] = (unsigned char)(0x80 | (v & 0x3f));
		} else {
			check(v < 0xd800 || v > 0xdfff, "surrogate escape");
			out[o++] = (unsigned char)(0xe0 | v >> 12);
			out[o++] = (unsigned char)(0x80 | ((v >> 6) & 0x3f));
			out[o++] = (unsigned char)(0x80 | (v & 0x3f));
		}
		i += 6;
	}
	return o;
}

static void
check_field(const cJSON *root, const char *l, const char *key, size_t inlen)
{
	static unsigned char got[3 * MAX_IN];
	char tkey[80];
	const cJSON *v, *t;
	const char *raw;
	size_t rlen, glen, k;

	v = cJSON_GetObjectItemCaseSensitive(root, key);
	snprintf(tkey, sizeof(tkey), "%s_truncated", key);
	t = cJSON_GetObjectItemCaseSensitive(root, tkey);
	if (v == NULL) {
		check(cJSON_IsTrue(
			  cJSON_GetObjectItemCaseSensitive(root, "overflow")),
		    "field missing without overflow");
		check(t == NULL, "_truncated without its field");
		return;
	}
	check(cJSON_IsString(v), "value is not a string");
	raw = raw_value(l, key, &rlen);
	check(raw != NULL, "value text not found");
	check(rlen <= AUDIT_VALUE_MAX, "value over AUDIT_VALUE_MAX");
	glen = decode(raw, rlen, got);
	/* cJSON agrees up to the first NUL. */
	check(strlen(v->valuestring) == strnlen((const char *)got, glen) &&
		memcmp(v->valuestring, got, strlen(v->valuestring)) == 0,
	    "cJSON and the text disagree");
	for (k = 0; k < nbound && bound[k] < glen; k++)
		;
	check(k < nbound && bound[k] == glen, "cut inside a character");
	check(memcmp(got, want, glen) == 0, "value does not round-trip");
	if (k == nbound - 1) {
		check(t == NULL, "_truncated on a whole value");
		return;
	}
	/* Cut: only because the next character's escape would not fit. */
	check(rlen + 6 > AUDIT_VALUE_MAX, "cut short of the cap");
	if (t == NULL) {
		check(cJSON_IsTrue(
			  cJSON_GetObjectItemCaseSensitive(root, "overflow")),
		    "cut value without _truncated");
		return;
	}
	check(cJSON_IsNumber(t) && t->valuedouble == (double)inlen,
	    "_truncated is not the input length");
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char val[MAX_IN + 1], kval[MAX_IN + 2];
	char key[32];
	const char *end = NULL;
	cJSON *root;
	struct stat st;
	ssize_t n;
	size_t len, reps, i;
	int keyed;

	if (size < 1 || size - 1 > MAX_IN)
		return 0;
	if (aw == NULL)
		fz_audit_open("fuzz_audit_escape");
	reps = (size_t)(data[0] & 0x3f) + 1;
	keyed = data[0] & 0x80;
	len = size - 1;
	memcpy(val, data + 1, len);
	val[len] = '\0';
	expect(data + 1, len);

	check(truncate(path, 0) == 0, "truncate the log");
	audit_begin(aw, "fuzz");
	for (i = 0; i < reps; i++) {
		snprintf(key, sizeof(key), "v%zu", i);
		audit_add_str(aw, key, val, len);
	}
	if (keyed) {
		/* "k" first: no such key can pass for one the checks read. */
		kval[0] = 'k';
		memcpy(kval + 1, val, len + 1);
		audit_add_cstr(aw, kval, "k");
	}
	check(audit_commit(aw) == 0, "commit");
	check(fstat(rfd, &st) == 0, "fstat");
	check(st.st_size > 0 && (size_t)st.st_size <= AUDIT_LINE_MAX,
	    "line size");
	n = pread(rfd, line, (size_t)st.st_size, 0);
	check(n == st.st_size, "read the line");
	line[n] = '\0';
	check(memchr(line, '\n', (size_t)n) == line + n - 1, "one line");
	check_text(line, (size_t)n);
	root = cJSON_ParseWithLengthOpts(line, (size_t)n - 1, &end, 0);
	check(root != NULL && cJSON_IsObject(root), "line is not JSON");
	check(end == line + n - 1, "trailing bytes after the object");
	check(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(root, "event")),
	    "event");
	for (i = 0; i < reps; i++) {
		snprintf(key, sizeof(key), "v%zu", i);
		check_field(root, line, key, len);
	}
	cJSON_Delete(root);
	return 0;
}
