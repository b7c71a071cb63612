/*
 * The audit log writer (proxy/audit.c) and "sluice audit verify"
 * (proxy/cmd_audit.c): escaping of hostile strings, the hash chain
 * (recomputed here with a one-shot SHA-256), resume after close and
 * rotation, the partial last line, the failed state (write failures made
 * with a read-only descriptor and with RLIMIT_FSIZE, no root needed), and
 * verification of good and damaged logs.
 */
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <cjson/cJSON.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <openssl/evp.h>

#include "proxy/proxy.h"

struct fixture {
	char dir[64];
	char path[128];
	char state[128];
	struct audit_conf ac;
};

/* Lines of a file, split at '\n' (the newline is not part of a line). */
struct lines {
	char *buf;
	size_t len;
	char *line[256];
	size_t llen[256];
	size_t n;
	int ends_with_nl;
};

static int
setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));

	assert_non_null(fx);
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/sluice-test-audit-XXXXXX");
	assert_non_null(mkdtemp(fx->dir));
	snprintf(fx->path, sizeof(fx->path), "%s/audit.jsonl", fx->dir);
	snprintf(fx->state, sizeof(fx->state), "%s/state", fx->dir);
	assert_int_equal(mkdir(fx->state, 0700), 0);
	fx->ac.ac_path = fx->path;
	fx->ac.ac_fsync = AUDIT_FSYNC_NEVER;
	fx->ac.ac_chain = 1;
	fx->ac.ac_on_error_allow = 0;
	metrics_reset();
	*state = fx;
	return 0;
}

static void
rm_tree(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	char p[512];

	if (d == NULL)
		return;
	while ((de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 ||
		    strcmp(de->d_name, "..") == 0)
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
		if (de->d_type == DT_DIR)
			rm_tree(p);
		else
			unlink(p);
	}
	closedir(d);
	rmdir(dir);
}

static int
teardown(void **state)
{
	struct fixture *fx = *state;

	rm_tree(fx->dir);
	free(fx);
	return 0;
}

static struct audit *
open_audit(struct fixture *fx)
{
	char why[512] = "";
	struct audit *a =
	    audit_open(&fx->ac, fx->state, NULL, why, sizeof(why));

	if (a == NULL)
		fail_msg("audit_open: %s", why);
	return a;
}

static void
read_lines(const char *path, struct lines *l)
{
	FILE *f = fopen(path, "rb");
	char *p;
	long sz;

	memset(l, 0, sizeof(*l));
	assert_non_null(f);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	sz = ftell(f);
	rewind(f);
	l->buf = malloc((size_t)sz + 1);
	assert_non_null(l->buf);
	l->len = fread(l->buf, 1, (size_t)sz, f);
	fclose(f);
	assert_int_equal(l->len, (size_t)sz);
	l->buf[l->len] = '\0';
	l->ends_with_nl = l->len > 0 && l->buf[l->len - 1] == '\n';
	p = l->buf;
	while (p < l->buf + l->len) {
		char *nl = memchr(p, '\n', (size_t)(l->buf + l->len - p));
		size_t n = nl != NULL ? (size_t)(nl - p) :
					(size_t)(l->buf + l->len - p);

		assert_true(l->n < SL_NELEM(l->line));
		l->line[l->n] = p;
		l->llen[l->n] = n;
		l->n++;
		p += n + 1;
	}
}

static void
sha256_hex(const void *p, size_t n, char out[65])
{
	unsigned char h[32];
	unsigned int hl = 0;
	size_t i;

	assert_int_equal(EVP_Digest(p, n, h, &hl, EVP_sha256(), NULL), 1);
	assert_int_equal(hl, 32);
	for (i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", h[i]);
}

/* The line as a cJSON object (the caller deletes it). */
static cJSON *
parse_line(const struct lines *l, size_t i)
{
	const char *end = NULL;
	cJSON *j;

	j = cJSON_ParseWithLengthOpts(l->line[i], l->llen[i], &end, 0);
	if (j == NULL || !cJSON_IsObject(j) || end != l->line[i] + l->llen[i])
		fail_msg("line %zu is not a JSON object: %.*s", i + 1,
		    (int)l->llen[i], l->line[i]);
	return j;
}

static const char *
jstr(const cJSON *j, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double
jnum(const cJSON *j, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);

	if (!cJSON_IsNumber(v))
		fail_msg("no number %s", k);
	return v->valuedouble;
}

/*
 * An independent strict UTF-8 check, written from the code point ranges
 * rather than from lead-byte tables: decode, then refuse overlong forms,
 * surrogates and values beyond U+10FFFF.
 */
static size_t
ref_utf8(const unsigned char *p, size_t n, uint32_t *cp)
{
	size_t len, i;
	uint32_t v;

	if (p[0] < 0x80) {
		*cp = p[0];
		return 1;
	}
	if ((p[0] & 0xe0) == 0xc0) {
		len = 2;
		v = p[0] & 0x1fu;
	} else if ((p[0] & 0xf0) == 0xe0) {
		len = 3;
		v = p[0] & 0x0fu;
	} else if ((p[0] & 0xf8) == 0xf0) {
		len = 4;
		v = p[0] & 0x07u;
	} else
		return 0;
	if (n < len)
		return 0;
	for (i = 1; i < len; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		v = (v << 6) | (p[i] & 0x3fu);
	}
	if ((len == 2 && v < 0x80) || (len == 3 && v < 0x800) ||
	    (len == 4 && v < 0x10000) || v > 0x10ffff ||
	    (v >= 0xd800 && v <= 0xdfff))
		return 0;
	*cp = v;
	return len;
}

static int
ref_valid_utf8(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, k;
	uint32_t cp;

	while (i < n) {
		if ((k = ref_utf8(p + i, n - i, &cp)) == 0)
			return 0;
		i += k;
	}
	return 1;
}

/* What the writer must make of s: invalid bytes become U+FFFD each. */
static size_t
ref_sanitize(const unsigned char *s, size_t n, char *out)
{
	size_t i = 0, o = 0, k;
	uint32_t cp;

	while (i < n) {
		if ((k = ref_utf8(s + i, n - i, &cp)) == 0) {
			memcpy(out + o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
			continue;
		}
		memcpy(out + o, s + i, k);
		o += k;
		i += k;
	}
	return o;
}

/* Bytes of a raw line must be printable UTF-8: no control bytes at all. */
static void
assert_clean_line(const char *p, size_t n)
{
	size_t i;

	assert_true(ref_valid_utf8(p, n));
	for (i = 0; i < n; i++)
		if ((unsigned char)p[i] < 0x20 || p[i] == 0x7f)
			fail_msg("raw control byte 0x%02x at %zu",
			    (unsigned char)p[i], i);
}

static void
check_chain(const struct lines *l, uint64_t first_seq, const char *first_prev)
{
	char want[65];
	size_t i;

	for (i = 0; i < l->n; i++) {
		cJSON *j = parse_line(l, i);

		assert_int_equal((uint64_t)jnum(j, "seq"), first_seq + i);
		assert_non_null(jstr(j, "ts"));
		assert_non_null(jstr(j, "event"));
		if (i == 0)
			assert_string_equal(jstr(j, "prev"), first_prev);
		else {
			sha256_hex(l->line[i - 1], l->llen[i - 1], want);
			assert_string_equal(jstr(j, "prev"), want);
		}
		cJSON_Delete(j);
	}
}

static const char zeros64[] =
    "0000000000000000000000000000000000000000000000000000000000000000";

static void
write_events(struct audit *a, int n, const char *event)
{
	int i;

	for (i = 0; i < n; i++) {
		audit_begin(a, event);
		audit_add_cstr(a, "decision", i % 2 ? "deny" : "allow");
		audit_add_cstr(a, "reason", i % 2 ? "token_expired" : "ok");
		audit_add_cstr(a, "host", "model-proxy.internal");
		audit_add_cstr(a, "path", "/v1/messages");
		audit_add_uint(a, "bytes_in", (uint64_t)(100 * i));
		audit_add_int(a, "status", i % 2 ? 407 : 200);
		assert_int_equal(audit_commit(a), 0);
	}
}

static void
test_line_format(void **state)
{
	struct fixture *fx = *state;
	struct audit *a = open_audit(fx);
	struct lines l;
	cJSON *j;
	const char *ts;

	audit_begin(a, "http.request");
	audit_add_cstr(a, "decision", "deny");
	audit_add_int(a, "neg", -42);
	audit_add_uint(a, "big", UINT64_MAX);
	audit_add_cstr(a, "absent", NULL);
	assert_int_equal(audit_commit(a), 0);
	/* A commit without a begin writes nothing. */
	assert_int_equal(audit_commit(a), -1);
	audit_close(a);

	read_lines(fx->path, &l);
	assert_int_equal(l.n, 1);
	assert_true(l.ends_with_nl);
	/* The common fields come first, in this order. */
	assert_memory_equal(l.line[0], "{\"ts\":\"", 7);
	assert_non_null(strstr(l.line[0],
	    "\",\"seq\":1,\"event\":\"http."
	    "request\",\"prev\":\""));
	j = parse_line(&l, 0);
	ts = jstr(j, "ts");
	assert_non_null(ts);
	if (ts == NULL)
		return;
	assert_int_equal(strlen(ts), 27);
	assert_true(
	    ts[4] == '-' && ts[10] == 'T' && ts[19] == '.' && ts[26] == 'Z');
	assert_string_equal(jstr(j, "prev"), zeros64);
	assert_string_equal(jstr(j, "decision"), "deny");
	assert_int_equal((int)jnum(j, "neg"), -42);
	assert_null(cJSON_GetObjectItemCaseSensitive(j, "absent"));
	assert_non_null(strstr(l.line[0], "\"big\":18446744073709551615"));
	cJSON_Delete(j);
	free(l.buf);
}

struct hostile {
	const char *in;
	size_t len;
	const char *want; /* decoded value */
};

static void
test_escape_hostile(void **state)
{
	static const struct hostile cases[] = {
		{ "a\"b\\c/", 6, "a\"b\\c/" },
		{ "\x01\n\t\r\x1b[31m\x7f", 10, "\x01\n\t\r\x1b[31m\x7f" },
		{ "\xff\xfe", 2, "\xef\xbf\xbd\xef\xbf\xbd" },
		/* Overlong '/' in two and three bytes. */
		{ "\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd" },
		{ "\xe0\x80\xaf", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" },
		{ "\xf0\x80\x80\xaf", 4,
		    "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" },
		/* A UTF-16 surrogate (U+D800) and a pair. */
		{ "\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" },
		{ "\xed\xa0\xbd\xed\xb2\xa9", 6,
		    "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf"
		    "\xbd\xef\xbf\xbd" },
		/* Beyond U+10FFFF, and lead bytes that never occur. */
		{ "\xf4\x90\x80\x80", 4,
		    "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" },
		{ "\xf5\xf8\xfe", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" },
		/* A cut sequence, then ASCII. */
		{ "\xe2\x82"
		  "A",
		    3,
		    "\xef\xbf\xbd\xef\xbf\xbd"
		    "A" },
		/* Valid text passes through: é € 𝄞 U+10FFFF U+FFFF. */
		{ "\xc3\xa9\xe2\x82\xac\xf0\x9d\x84\x9e\xf4\x8f\xbf\xbf\xef\xbf"
		  "\xbf",
		    16,
		    "\xc3\xa9\xe2\x82\xac\xf0\x9d\x84\x9e\xf4\x8f\xbf\xbf\xef\xbf"
		    "\xbf" },
		/* A C1 control (NEL) is escaped but decodes to itself. */
		{ "x\xc2\x85y", 4, "x\xc2\x85y" },
		/* U+2028 is valid JSON and valid UTF-8. */
		{ "\xe2\x80\xa8", 3, "\xe2\x80\xa8" },
	};
	struct fixture *fx = *state;
	struct audit *a = open_audit(fx);
	struct lines l;
	char key[16];
	size_t i;
	cJSON *j;

	audit_begin(a, "http.request");
	for (i = 0; i < SL_NELEM(cases); i++) {
		snprintf(key, sizeof(key), "k%zu", i);
		audit_add_str(a, key, cases[i].in, cases[i].len);
	}
	/* Hostile bytes in a key and an event name are escaped too. */
	audit_add_cstr(a, "bad\"key\n", "v");
	audit_add_str(a, "nul", "a\0b", 3);
	assert_int_equal(audit_commit(a), 0);
	audit_close(a);

	read_lines(fx->path, &l);
	assert_int_equal(l.n, 1);
	assert_clean_line(l.line[0], l.llen[0]);
	j = parse_line(&l, 0);
	for (i = 0; i < SL_NELEM(cases); i++) {
		snprintf(key, sizeof(key), "k%zu", i);
		if (jstr(j, key) == NULL)
			fail_msg("no %s", key);
		if (strcmp(jstr(j, key), cases[i].want) != 0)
			fail_msg("case %zu: got \"%s\"", i, jstr(j, key));
	}
	assert_string_equal(jstr(j, "bad\"key\n"), "v");
	assert_non_null(strstr(l.line[0], "\"nul\":\"a\\u0000b\""));
	assert_non_null(strstr(l.line[0], "\\u001b[31m"));
	/* C1 controls and DEL are escaped, not written raw. */
	assert_non_null(strstr(l.line[0], "x\\u0085y"));
	assert_non_null(strstr(l.line[0], "\\u007f"));
	cJSON_Delete(j);
	free(l.buf);
}

/* A small deterministic generator, so a failure reproduces. */
static uint32_t
rnd(uint32_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

static void
test_escape_random(void **state)
{
	struct fixture *fx = *state;
	struct audit *a = open_audit(fx);
	unsigned char in[40][64];
	size_t inlen[40];
	char want[64 * 3 + 1], key[16];
	struct lines l;
	uint32_t seed = 0x5eed1234;
	size_t i, k, n;
	cJSON *j;

	for (n = 0; n < 10; n++) {
		audit_begin(a, "http.request");
		for (i = 0; i < SL_NELEM(in); i++) {
			inlen[i] = rnd(&seed) % sizeof(in[i]);
			for (k = 0; k < inlen[i]; k++) {
				uint32_t r = rnd(&seed);

				/* Mostly high bytes, where UTF-8 goes wrong. */
				in[i][k] = (unsigned char)(r % 4 == 0 ?
					0x20 + r % 0x60 :
					0x80 + (r >> 8) % 0x80);
				if (r % 13 == 0)
					in[i][k] =
					    (unsigned char)((r >> 16) % 0x20);
			}
			snprintf(key, sizeof(key), "r%zu", i);
			audit_add_str(a, key, (const char *)in[i], inlen[i]);
		}
		assert_int_equal(audit_commit(a), 0);
		read_lines(fx->path, &l);
		assert_int_equal(l.n, n + 1);
		assert_clean_line(l.line[n], l.llen[n]);
		j = parse_line(&l, n);
		for (i = 0; i < SL_NELEM(in); i++) {
			size_t wl;

			snprintf(key, sizeof(key), "r%zu", i);
			/* No NUL was generated... except from r % 13 == 0. */
			if (memchr(in[i], 0, inlen[i]) != NULL)
				continue;
			wl = ref_sanitize(in[i], inlen[i], want);
			want[wl] = '\0';
			assert_non_null(jstr(j, key));
			assert_string_equal(jstr(j, key), want);
		}
		cJSON_Delete(j);
		free(l.buf);
	}
	audit_close(a);
}

static void
test_value_cap(void **state)
{
	struct fixture *fx = *state;
	struct audit *a = open_audit(fx);
	char *big = malloc(10000), *ctl = malloc(5000);
	struct lines l;
	const char *v;
	cJSON *j;
	size_t i;

	assert_non_null(big);
	assert_non_null(ctl);
	for (i = 0; i < 10000; i += 2)
		memcpy(big + i, "\xc3\xa9", 2);
	memset(ctl, 0x01, 5000);
	audit_begin(a, "http.request");
	audit_add_str(a, "path", big, 10000);
	audit_add_str(a, "host", ctl, 5000);
	audit_add_cstr(a, "after", "still here");
	assert_int_equal(audit_commit(a), 0);
	/* Many large fields: the line stays bounded and valid. */
	audit_begin(a, "http.request");
	for (i = 0; i < 60; i++) {
		char key[16];

		snprintf(key, sizeof(key), "f%zu", i);
		audit_add_str(a, key, big, 10000);
	}
	assert_int_equal(audit_commit(a), 0);
	audit_close(a);

	read_lines(fx->path, &l);
	assert_int_equal(l.n, 2);
	j = parse_line(&l, 0);
	v = jstr(j, "path");
	assert_non_null(v);
	assert_true(strlen(v) <= AUDIT_VALUE_MAX);
	assert_true(strlen(v) >= AUDIT_VALUE_MAX - 4);
	assert_true(ref_valid_utf8(v, strlen(v))); /* cut at a boundary */
	assert_int_equal((int)jnum(j, "path_truncated"), 10000);
	v = jstr(j, "host");
	assert_non_null(v);
	assert_int_equal(strlen(v), AUDIT_VALUE_MAX / 6); /* \u0001 each */
	assert_int_equal((int)jnum(j, "host_truncated"), 5000);
	assert_string_equal(jstr(j, "after"), "still here");
	cJSON_Delete(j);
	j = parse_line(&l, 1);
	assert_true(l.llen[1] < AUDIT_LINE_MAX);
	assert_true(cJSON_IsTrue(cJSON_GetObjectItem(j, "overflow")));
	cJSON_Delete(j);
	free(l.buf);
	free(big);
	free(ctl);
}

static void
test_chain(void **state)
{
	struct fixture *fx = *state;
	struct audit *a = open_audit(fx);
	struct lines l;
	char hex[65], want[65];
	uint64_t seq;

	write_events(a, 5, "http.request");
	audit_head(a, &seq, hex);
	audit_close(a);
	read_lines(fx->path, &l);
	assert_int_equal(l.n, 5);
	check_chain(&l, 1, zeros64);
	assert_int_equal(seq, 5);
	sha256_hex(l.line[4], l.llen[4], want);
	assert_string_equal(hex, want);
	free(l.buf);
}

static void
test_no_chain(void **state)
{
	struct fixture *fx = *state;
	struct audit *a;
	struct lines l;
	cJSON *j;

	fx->ac.ac_chain = 0;
	a = open_audit(fx);
	write_events(a, 2, "http.request");
	audit_close(a);
	read_lines(fx->path, &l);
	assert_int_equal(l.n, 2);
	j = parse_line(&l, 1);
	assert_null(cJSON_GetObjectItem(j, "prev"));
	assert_int_equal((int)jnum(j, "seq"), 2);
	cJSON_Delete(j);
	free(l.buf);
}

static void
read_head(const struct fixture *fx, char *buf, size_t len)
{
	char p[256];
	FILE *f;
	size_t n;

	snprintf(p, sizeof(p), "%s/audit.head", fx->state);
	f = fopen(p, "r");
	assert_non_null(f);
	n = fread(buf, 1, len - 1, f);
	buf[n] = '\0';
	fclose(f);
}

static void
test_resume(void **state)
{
	struct fixture *fx = *state;
	struct audit *a;
	struct lines l;
	char head[256], want[128], hex[65];

	a = open_audit(fx);
	write_events(a, 3, "http.request");
	audit_close(a);
	/* audit.head holds the last seq and hash. */
	read_lines(fx->path, &l);
	sha256_hex(l.line[2], l.llen[2], hex);
	snprintf(want, sizeof(want), "3 %s\n", hex);
	read_head(fx, head, sizeof(head));
	assert_string_equal(head, want);
	free(l.buf);

	a = open_audit(fx);
	write_events(a, 2, "connect.tunnel");
	audit_close(a);
	read_lines(fx->path, &l);
	assert_int_equal(l.n, 5);
	check_chain(&l, 1, zeros64);
	free(l.buf);
}

static void
append_bytes(const char *path, const char *p, size_t n)
{
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, p, n), (ssize_t)n);
	close(fd);
}

static void
test_truncated(void **state)
{
	static const char partial[] = "{\"ts\":\"2026-11-30T04:22:36.1234";
	struct fixture *fx = *state;
	struct audit *a;
	struct lines l;
	char hex[65];
	cJSON *j;

	a = open_audit(fx);
	write_events(a, 3, "http.request");
	audit_close(a);
	/* As after a crash: no fresh audit.head, a partial last line. */
	{
		char p[256];

		snprintf(p, sizeof(p), "%s/audit.head", fx->state);
		unlink(p);
	}
	append_bytes(fx->path, partial, sizeof(partial) - 1);

	a = open_audit(fx);
	write_events(a, 1, "http.request");
	audit_close(a);
	read_lines(fx->path, &l);
	assert_true(l.ends_with_nl);
	assert_int_equal(l.n, 5);
	check_chain(&l, 1, zeros64);
	j = parse_line(&l, 3);
	assert_string_equal(jstr(j, "event"), "audit.truncated");
	assert_int_equal((int)jnum(j, "bytes"), (int)sizeof(partial) - 1);
	sha256_hex(partial, sizeof(partial) - 1, hex);
	assert_string_equal(jstr(j, "sha256"), hex);
	cJSON_Delete(j);
	/* The partial bytes are gone from the file. */
	assert_null(strstr(l.buf, "04:22:36.1234\n"));
	free(l.buf);
}

static void
test_truncated_only_line(void **state)
{
	struct fixture *fx = *state;
	struct audit *a;
	struct lines l;
	cJSON *j;

	/* A crash during the very first write. */
	append_bytes(fx->path, "{\"ts\":", 6);
	a = open_audit(fx);
	audit_close(a);
	read_lines(fx->path, &l);
	assert_int_equal(l.n, 1);
	check_chain(&l, 1, zeros64);
	j = parse_line(&l, 0);
	assert_string_equal(jstr(j, "event"), "audit.truncated");
	assert_int_equal((int)jnum(j, "bytes"), 6);
	cJSON_Delete(j);
	free(l.buf);
}

static void
test_refuses_garbage(void **state)
{
	struct fixture *fx = *state;
	char why[512] = "";

	/* A last line that is not an audit line: refuse, do not guess. */
	append_bytes(fx->path, "hello world\n", 12);
	assert_null(audit_open(&fx->ac, fx->state, NULL, why, sizeof(why)));
	assert_non_null(strstr(why, fx->path));
}

static void
rename_to(const struct fixture *fx, const char *suffix, char *out, size_t len)
{
	snprintf(out, len, "%s%s", fx->path, suffix);
	assert_int_equal(rename(fx->path, out), 0);
}

static int
run_verify(const char *const *files, size_t n, const char *head, char **err)
{
	char *obuf = NULL, *ebuf = NULL;
	size_t olen = 0, elen = 0;
	FILE *out = open_memstream(&obuf, &olen);
	FILE *errf = open_memstream(&ebuf, &elen);
	int rc;

	assert_non_null(out);
	assert_non_null(errf);
	rc = audit_verify(files, n, head, out, errf);
	fclose(out);
	fclose(errf);
	if (rc == 0)
		assert_non_null(strstr(obuf, "ok: "));
	free(obuf);
	if (err != NULL)
		*err = ebuf;
	else
		free(ebuf);
	return rc;
}

static void
test_rotation(void **state)
{
	struct fixture *fx = *state;
	struct audit *a;
	struct lines l1, l2, l3;
	char old1[256], old2[256], hex[65];
	const char *files[3];
	cJSON *j;

	a = open_audit(fx);
	write_events(a, 3, "http.request");
	rename_to(fx, ".1", old1, sizeof(old1));
	/* Lines after the rename still go to the old file until SIGUSR1. */
	write_events(a, 1, "http.request");
	assert_int_equal(audit_reopen(a), 0);
	write_events(a, 2, "http.request");
	audit_close(a);
	read_lines(old1, &l1);
	read_lines(fx->path, &l2);
	assert_int_equal(l1.n, 4);
	assert_int_equal(l2.n, 2);
	sha256_hex(l1.line[3], l1.llen[3], hex);
	check_chain(&l2, 5, hex);

	/* Rotated away while stopped: audit.head continues the chain. */
	rename_to(fx, ".2", old2, sizeof(old2));
	a = open_audit(fx);
	audit_begin(a, "daemon.start");
	assert_int_equal(audit_commit(a), 0);
	audit_close(a);
	read_lines(fx->path, &l3);
	sha256_hex(l2.line[1], l2.llen[1], hex);
	check_chain(&l3, 7, hex);
	j = parse_line(&l3, 0);
	assert_string_equal(jstr(j, "event"), "daemon.start");
	cJSON_Delete(j);

	files[0] = old1;
	files[1] = old2;
	files[2] = fx->path;
	assert_int_equal(run_verify(files, 3, NULL, NULL), 0);
	/* Out of order, or a file missing in the middle: a break. */
	files[0] = old2;
	files[1] = old1;
	assert_int_equal(run_verify(files, 2, NULL, NULL), 1);
	files[0] = old1;
	files[1] = fx->path;
	assert_int_equal(run_verify(files, 2, NULL, NULL), 1);
	free(l1.buf);
	free(l2.buf);
	free(l3.buf);
}

static void
test_configure(void **state)
{
	struct fixture *fx = *state;
	struct audit *a = open_audit(fx);
	struct audit_conf ac = fx->ac;
	char other[256], why[256] = "", bad[256];
	const char *files[2];
	struct lines l;

	write_events(a, 2, "http.request");
	snprintf(other, sizeof(other), "%s/other.jsonl", fx->dir);
	ac.ac_path = other;
	ac.ac_fsync = AUDIT_FSYNC_ALWAYS;
	assert_int_equal(audit_configure(a, &ac, why, sizeof(why)), 0);
	write_events(a, 2, "http.request");
	/* A path that cannot be opened keeps the current file. */
	snprintf(bad, sizeof(bad), "%s/no/such/dir/x.jsonl", fx->dir);
	ac.ac_path = bad;
	assert_int_equal(audit_configure(a, &ac, why, sizeof(why)), -1);
	assert_non_null(strstr(why, bad));
	write_events(a, 1, "http.request");
	audit_close(a);
	read_lines(other, &l);
	assert_int_equal(l.n, 3);
	free(l.buf);
	files[0] = fx->path;
	files[1] = other;
	assert_int_equal(run_verify(files, 2, NULL, NULL), 0);
}

/*
 * The two steps of a reload: a prepared section that is dropped (the
 * reload was refused later) changes nothing, neither the file nor the
 * settings; an applied one takes over.
 */
static void
test_prepare_apply(void **state)
{
	struct fixture *fx = *state;
	struct audit *a = open_audit(fx);
	struct audit_conf ac = fx->ac;
	struct audit_next *nx;
	char other[256], why[256] = "";
	struct lines l;
	cJSON *j;

	write_events(a, 1, "http.request");
	snprintf(other, sizeof(other), "%s/next.jsonl", fx->dir);
	ac.ac_path = other;
	ac.ac_chain = 0;
	nx = audit_prepare(a, &ac, why, sizeof(why));
	assert_non_null(nx);
	audit_next_free(nx);
	write_events(a, 1, "http.request");
	read_lines(other, &l);
	assert_int_equal(l.n, 0);
	free(l.buf);
	read_lines(fx->path, &l);
	assert_int_equal(l.n, 2);
	/* Still chained: the dropped section's chain:false never applied. */
	j = parse_line(&l, 1);
	assert_non_null(jstr(j, "prev"));
	cJSON_Delete(j);
	free(l.buf);

	nx = audit_prepare(a, &ac, why, sizeof(why));
	assert_non_null(nx);
	audit_apply(a, nx);
	write_events(a, 1, "http.request");
	audit_close(a);
	read_lines(other, &l);
	assert_int_equal(l.n, 1);
	j = parse_line(&l, 0);
	assert_null(cJSON_GetObjectItemCaseSensitive(j, "prev"));
	cJSON_Delete(j);
	free(l.buf);
	/* An empty path is refused at prepare. */
	other[0] = '\0';
	assert_null(audit_prepare(NULL, &ac, why, sizeof(why)));
	assert_non_null(strstr(why, "audit.path"));
}

/* The fd the writer holds for path (found through /proc/self/fd). */
static int
find_fd(const char *path)
{
	char link[64], target[512];
	int fd;
	ssize_t n;

	for (fd = 3; fd < 1024; fd++) {
		snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
		n = readlink(link, target, sizeof(target) - 1);
		if (n <= 0)
			continue;
		target[n] = '\0';
		if (strcmp(target, path) == 0)
			return fd;
	}
	return -1;
}

/*
 * A log whose writes fail with EBADF: the writer's descriptor is made to
 * read only (no root needed); mend_fd() gives it back, close_fd() closes
 * the two spares (after the writer is closed).
 */
struct broken_fd {
	int fd, rw, ro;
};

static void
break_fd(const char *path, struct broken_fd *b)
{
	b->fd = find_fd(path);
	assert_true(b->fd >= 0);
	b->rw = dup(b->fd);
	b->ro = open(path, O_RDONLY);
	assert_true(b->rw >= 0 && b->ro >= 0);
	assert_int_equal(dup2(b->ro, b->fd), b->fd);
}

static void
mend_fd(const struct broken_fd *b)
{
	assert_int_equal(dup2(b->rw, b->fd), b->fd);
}

static void
close_fd(const struct broken_fd *b)
{
	close(b->ro);
	close(b->rw);
}

static uint64_t
metric_value(const char *name)
{
	struct evbuffer *b = evbuffer_new();
	char *text, *p;
	size_t n;
	uint64_t v = UINT64_MAX;

	assert_non_null(b);
	assert_int_equal(metrics_render(b), 0);
	n = evbuffer_get_length(b);
	text = malloc(n + 1);
	assert_non_null(text);
	evbuffer_remove(b, text, n);
	text[n] = '\0';
	for (p = text; (p = strstr(p, name)) != NULL; p++)
		if ((p == text || p[-1] == '\n') && p[strlen(name)] == ' ') {
			v = strtoull(p + strlen(name) + 1, NULL, 10);
			break;
		}
	free(text);
	evbuffer_free(b);
	return v;
}

static void
test_failed_state_deny(void **state)
{
	struct fixture *fx = *state;
	struct audit *a = open_audit(fx);
	struct lines l;
	struct broken_fd b;
	const char *files[1] = { fx->path };

	write_events(a, 2, "http.request");
	/* Every write now fails with EBADF. */
	break_fd(fx->path, &b);
	assert_false(audit_failed(a));
	audit_begin(a, "http.request");
	audit_add_cstr(a, "lost", "1");
	assert_int_equal(audit_commit(a), -1);
	assert_true(audit_failed(a));
	assert_int_equal(audit_sync(a), -1);
	assert_int_equal(metric_value("sluice_audit_failed"), 1);
	/* Each new line retries, and fails again. */
	audit_begin(a, "http.request");
	assert_int_equal(audit_commit(a), -1);
	assert_true(audit_failed(a));
	assert_int_equal(metric_value("sluice_audit_write_errors_total"), 2);
	/* Space returns: the first good write ends the failed state. */
	mend_fd(&b);
	write_events(a, 1, "http.request");
	assert_false(audit_failed(a));
	assert_int_equal(audit_sync(a), 0);
	assert_int_equal(metric_value("sluice_audit_failed"), 0);
	audit_close(a);
	close_fd(&b);
	read_lines(fx->path, &l);
	assert_int_equal(l.n, 3);
	assert_null(strstr(l.buf, "lost"));
	check_chain(&l, 1, zeros64);
	free(l.buf);
	assert_int_equal(run_verify(files, 1, NULL, NULL), 0);
}

static void
test_partial_write_cut_back(void **state)
{
	struct fixture *fx = *state;
	struct audit *a = open_audit(fx);
	struct rlimit old, lim;
	struct stat st;
	struct lines l;
	char big[1500];
	off_t before;
	void (*oldsig)(int);

	write_events(a, 2, "http.request");
	assert_int_equal(stat(fx->path, &st), 0);
	before = st.st_size;
	/*
	 * A file size limit acts like a full disk: the write stops part
	 * way (then EFBIG). SIGXFSZ is ignored so that it is an error.
	 */
	oldsig = signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	lim = old;
	lim.rlim_cur = (rlim_t)before + 100;
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
	memset(big, 'x', sizeof(big));
	audit_begin(a, "http.request");
	audit_add_str(a, "path", big, sizeof(big));
	assert_int_equal(audit_commit(a), -1);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
	signal(SIGXFSZ, oldsig);
	assert_true(audit_failed(a));
	/* The partial line was cut back off. */
	assert_int_equal(stat(fx->path, &st), 0);
	assert_int_equal(st.st_size, before);
	write_events(a, 1, "http.request");
	assert_false(audit_failed(a));
	audit_close(a);
	read_lines(fx->path, &l);
	assert_int_equal(l.n, 3);
	assert_true(l.ends_with_nl);
	check_chain(&l, 1, zeros64);
	free(l.buf);
}

static void
test_failed_state_allow(void **state)
{
	struct fixture *fx = *state;
	struct audit *a;
	struct lines l;
	struct broken_fd b;

	fx->ac.ac_on_error_allow = 1;
	a = open_audit(fx);
	write_events(a, 1, "http.request");
	break_fd(fx->path, &b);
	audit_begin(a, "http.request");
	assert_int_equal(audit_commit(a), -1);
	/* "allow" has no failed state, but the error is counted. */
	assert_false(audit_failed(a));
	assert_int_equal(metric_value("sluice_audit_write_errors_total"), 1);
	mend_fd(&b);
	write_events(a, 1, "http.request");
	audit_close(a);
	close_fd(&b);
	read_lines(fx->path, &l);
	check_chain(&l, 1, zeros64);
	assert_int_equal(l.n, 2);
	free(l.buf);
}

/*
 * Privsep: an engine's lines go over a SEQPACKET socket. When the socket is
 * full they queue, the write event is armed, and they go out in order once
 * the parent reads; with nothing queued the write event is not armed.
 */
static void
test_remote_queue_flushes(void **state)
{
	struct fixture *fx = *state;
	struct event_base *base = event_base_new();
	struct audit *a;
	unsigned char buf[8192];
	int sv[2], snd = 4096, i, got = 0, last = -1, loops = 0;
	ssize_t n;

	assert_non_null(base);
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
	assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &snd,
			     sizeof(snd)),
	    0);
	fx->ac.ac_fsync = AUDIT_FSYNC_NEVER;
	a = open_audit(fx);
	assert_int_equal(audit_remote(a, sv[0], base), 0);
	for (i = 0; i < 400; i++) {
		audit_begin(a, "http.request");
		audit_add_int(a, "n", i);
		assert_int_equal(audit_commit(a), 0);
	}
	/* One turn: the batch goes out until the socket is full. */
	assert_int_equal(event_base_loop(base, EVLOOP_NONBLOCK), 0);
	while (got < 400 && loops++ < 10000) {
		n = recv(sv[1], buf, sizeof(buf) - 1, MSG_DONTWAIT);
		if (n > 0) {
			char *p;

			buf[n] = '\0';
			p = strstr((char *)buf + 1, "\"n\":");
			assert_non_null(p);
			/* In order, none lost, none twice. */
			assert_int_equal(atoi(p + 4), last + 1);
			last++;
			got++;
			continue;
		}
		assert_true(n == -1 && errno == EAGAIN);
		assert_int_equal(event_base_loop(base, EVLOOP_NONBLOCK), 0);
	}
	assert_int_equal(got, 400);
	/* Drained: no write event left armed (the loop has nothing). */
	assert_int_equal(event_base_loop(base, EVLOOP_NONBLOCK), 0);
	assert_int_equal(recv(sv[1], buf, sizeof(buf), MSG_DONTWAIT), -1);
	audit_close(a);
	close(sv[1]);
	event_base_free(base);
}

static void
test_interval_timer(void **state)
{
	struct fixture *fx = *state;
	struct event_base *base = event_base_new();
	struct audit *a;
	char why[256] = "";

	assert_non_null(base);
	fx->ac.ac_fsync = AUDIT_FSYNC_INTERVAL;
	a = audit_open(&fx->ac, fx->state, base, why, sizeof(why));
	assert_non_null(a);
	write_events(a, 2, "http.request");
	assert_int_equal(audit_sync(a), 0);
	assert_int_equal(audit_policy_event(a, "policy.reload_failed", NULL,
			     "p.json: routes: missing"),
	    0);
	audit_close(a);
	event_base_free(base);
}

/*
 * The writer thread (audit_open() with an event loop): lines are queued by
 * audit_commit() and written by the thread. These tests drive its slow,
 * full and failing cases with a pipe put in place of the log's descriptor.
 */
static struct audit *
open_audit_base(struct fixture *fx, struct event_base *base)
{
	char why[512] = "";
	struct audit *a =
	    audit_open(&fx->ac, fx->state, base, why, sizeof(why));

	if (a == NULL)
		fail_msg("audit_open: %s", why);
	return a;
}

/* Newlines in the file at path. */
static size_t
count_lines(const char *path)
{
	FILE *f = fopen(path, "rb");
	size_t n = 0;
	int c;

	assert_non_null(f);
	while ((c = getc(f)) != EOF)
		n += c == '\n';
	fclose(f);
	return n;
}

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A reader of a pipe that keeps everything until EOF. */
struct pipe_reader {
	pthread_t pr_thread;
	int pr_fd;
	char *pr_buf;
	size_t pr_len, pr_cap;
};

static void *
pipe_reader_run(void *arg)
{
	struct pipe_reader *r = arg;
	ssize_t n;

	for (;;) {
		if (r->pr_cap - r->pr_len < 65536) {
			r->pr_cap = r->pr_cap * 2 + 65536;
			if ((r->pr_buf = realloc(r->pr_buf, r->pr_cap)) == NULL)
				abort();
		}
		n = read(r->pr_fd, r->pr_buf + r->pr_len,
		    r->pr_cap - r->pr_len);
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		r->pr_len += (size_t)n;
	}
	return NULL;
}

/*
 * Put a full pipe in place of the writer's descriptor for fx->path: the
 * thread's next write blocks until *rd is read. Returns the junk bytes
 * that fill it (they come first out of the pipe).
 */
static size_t
block_log(const struct fixture *fx, int *rd)
{
	char junk[4096];
	size_t filled = 0;
	ssize_t n;
	int p[2], fd, fl;

	fd = find_fd(fx->path);
	assert_true(fd >= 0);
	assert_int_equal(pipe(p), 0);
	(void)fcntl(p[1], F_SETPIPE_SZ, 4096);
	fl = fcntl(p[1], F_GETFL);
	assert_int_equal(fcntl(p[1], F_SETFL, fl | O_NONBLOCK), 0);
	memset(junk, 'j', sizeof(junk));
	while ((n = write(p[1], junk, sizeof(junk))) > 0)
		filled += (size_t)n;
	assert_int_equal(errno, EAGAIN);
	assert_int_equal(fcntl(p[1], F_SETFL, fl), 0);
	assert_int_equal(dup2(p[1], fd), fd);
	close(p[1]);
	*rd = p[0];
	return filled;
}

/*
 * After audit_close(): the log file followed by what went into the pipe
 * (without the junk) into out, one log; returns its lines.
 */
static size_t
join_log(const struct fixture *fx, struct pipe_reader *r, size_t junk,
    const char *out)
{
	struct lines l;
	FILE *f;

	assert_int_equal(pthread_join(r->pr_thread, NULL), 0);
	close(r->pr_fd);
	assert_true(r->pr_len >= junk);
	read_lines(fx->path, &l);
	f = fopen(out, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(l.buf, 1, l.len, f), l.len);
	assert_int_equal(fwrite(r->pr_buf + junk, 1, r->pr_len - junk, f),
	    r->pr_len - junk);
	fclose(f);
	free(l.buf);
	free(r->pr_buf);
	return count_lines(out);
}

/* Many commits through the thread arrive in order, chained, then stop. */
static void
test_thread_order(void **state)
{
	struct fixture *fx = *state;
	struct event_base *base = event_base_new();
	const char *files[1] = { fx->path };
	char head[256], want[128], hex[65], tail[2001];
	struct audit *a;
	char *last;
	size_t n;
	FILE *f;
	int i;

	assert_non_null(base);
	fx->ac.ac_fsync = AUDIT_FSYNC_INTERVAL;
	a = open_audit_base(fx, base);
	for (i = 0; i < 50; i++) {
		write_events(a, 99, "http.request");
		assert_int_equal(audit_policy_event(a, "policy.reload", NULL,
				     NULL),
		    0);
	}
	audit_begin(a, "daemon.stop");
	assert_int_equal(audit_commit(a), 0);
	audit_close(a);
	event_base_free(base);
	assert_int_equal(count_lines(fx->path), 5001);
	assert_int_equal(run_verify(files, 1, NULL, NULL), 0);
	/* daemon.stop is the last line, and audit.head names it. */
	f = fopen(fx->path, "rb");
	assert_non_null(f);
	assert_int_equal(fseek(f, -2000, SEEK_END), 0);
	n = fread(tail, 1, sizeof(tail) - 1, f);
	fclose(f);
	tail[n] = '\0';
	assert_true(n > 1 && tail[n - 1] == '\n');
	last = memrchr(tail, '\n', n - 1);
	assert_non_null(last);
	last++;
	assert_non_null(strstr(last, "\"event\":\"daemon.stop\""));
	sha256_hex(last, (size_t)(tail + n - 1 - last), hex);
	snprintf(want, sizeof(want), "5001 %s\n", hex);
	read_head(fx, head, sizeof(head));
	assert_string_equal(head, want);
}

/* Wait up to 5 s for the file at path to hold at least n lines. */
static size_t
wait_lines(const char *path, size_t n)
{
	double t0 = now_s();
	size_t got;

	while ((got = count_lines(path)) < n && now_s() - t0 < 5.0)
		usleep(10000);
	return got;
}

/*
 * audit_batch(): the lines committed between on and off wake the writer
 * thread once, at off; AUDIT_BATCH_KICK bytes queued wake it before; a
 * sync inside a batch writes what is queued and returns (no wait on a
 * wake-up that never comes). fsync "never": nothing else wakes the thread.
 */
static void
test_thread_batch(void **state)
{
	struct fixture *fx = *state;
	struct event_base *base = event_base_new();
	const char *files[1] = { fx->path };
	struct audit *a;
	size_t before, mid;

	assert_non_null(base);
	fx->ac.ac_fsync = AUDIT_FSYNC_NEVER;
	a = open_audit_base(fx, base);
	assert_int_equal(audit_sync(a), 0);
	before = count_lines(fx->path);
	usleep(100000); /* the thread back in its wait */

	audit_batch(a, 1);
	write_events(a, 3, "http.request");
	usleep(200000);
	assert_int_equal(count_lines(fx->path), before); /* not woken */
	audit_batch(a, 0);
	assert_int_equal(wait_lines(fx->path, before + 3), before + 3);

	/* Past the kick (~250 bytes a line), the batch still on. */
	audit_batch(a, 1);
	write_events(a, 2000, "http.request");
	mid = wait_lines(fx->path, before + 3 + AUDIT_BATCH_KICK / 512);
	assert_true(mid >= before + 3 + AUDIT_BATCH_KICK / 512);
	assert_int_equal(audit_sync(a), 0);
	assert_int_equal(count_lines(fx->path), before + 3 + 2000);
	audit_batch(a, 0);
	audit_close(a);
	event_base_free(base);
	assert_int_equal(run_verify(files, 1, NULL, NULL), 0);
}

/*
 * A log disk that does not move does not hold up audit_commit(): commits
 * return at once while the thread is stuck in write(2) (inline, the loop
 * would block: alarm() ends such a run), audit_head() still names the last
 * line written, and audit_close() waits for every queued line.
 */
static void
test_thread_slow_disk(void **state)
{
	struct fixture *fx = *state;
	struct event_base *base = event_base_new();
	struct pipe_reader r = { 0 };
	char both[256], hex[65];
	const char *files[1] = { both };
	struct audit *a;
	uint64_t seq;
	size_t junk;
	double t0;
	int i;

	assert_non_null(base);
	a = open_audit_base(fx, base);
	write_events(a, 1, "http.request");
	assert_int_equal(audit_sync(a), 0);
	junk = block_log(fx, &r.pr_fd);
	alarm(30);
	t0 = now_s();
	/* About 600 KB: more than a pipe or the old batch takes. */
	for (i = 0; i < 20; i++)
		write_events(a, 100, "http.request");
	assert_true(now_s() - t0 < 5.0);
	audit_head(a, &seq, hex);
	assert_int_equal(seq, 1); /* stuck behind the full pipe */
	assert_false(audit_failed(a));
	assert_int_equal(pthread_create(&r.pr_thread, NULL, pipe_reader_run,
			     &r),
	    0);
	audit_close(a);
	alarm(0);
	event_base_free(base);
	snprintf(both, sizeof(both), "%s/both.jsonl", fx->dir);
	assert_int_equal(join_log(fx, &r, junk, both), 2001);
	assert_int_equal(run_verify(files, 1, NULL, NULL), 0);
}

/* One line of about 60 KB. */
static int
commit_big(struct audit *a)
{
	char v[2000];
	char k[16];
	int i;

	memset(v, 'v', sizeof(v));
	audit_begin(a, "http.request");
	for (i = 0; i < 30; i++) {
		snprintf(k, sizeof(k), "f%d", i);
		audit_add_str(a, k, v, sizeof(v));
	}
	return audit_commit(a);
}

/* Fill the queue behind a stuck disk; returns the lines queued. */
static int
fill_queue(struct audit *a)
{
	int i;

	for (i = 0; i < 1000; i++)
		if (commit_big(a) == -1)
			return i;
	fail_msg("the queue never filled");
	return -1;
}

/*
 * A full queue is a failed write: with on_error "deny" the failed state
 * (requests refused), which ends once a line queued after it is written;
 * no line is half written or out of the chain.
 */
static void
test_thread_queue_full_deny(void **state)
{
	struct fixture *fx = *state;
	struct event_base *base = event_base_new();
	struct pipe_reader r = { 0 };
	char both[256];
	const char *files[1] = { both };
	struct audit *a;
	size_t junk, lines;
	double t0;
	int n, ok = 0;

	assert_non_null(base);
	a = open_audit_base(fx, base);
	write_events(a, 1, "http.request");
	assert_int_equal(audit_sync(a), 0);
	junk = block_log(fx, &r.pr_fd);
	alarm(60);
	n = fill_queue(a);
	/* The bound: 8 MiB of ~60 KB lines, one of them being written. */
	assert_true((size_t)n * 60000 <= AUDIT_QUEUE_MAX + 2 * 65536);
	assert_true((size_t)(n + 2) * 62000 >= AUDIT_QUEUE_MAX);
	assert_true(audit_failed(a));
	assert_int_equal(metric_value("sluice_audit_failed"), 1);
	assert_int_equal(metric_value("sluice_audit_write_errors_total"), 1);
	assert_int_equal(audit_sync(a), -1);
	/* The disk moves again: a later line ends the failed state. */
	assert_int_equal(pthread_create(&r.pr_thread, NULL, pipe_reader_run,
			     &r),
	    0);
	t0 = now_s();
	while (now_s() - t0 < 20.0) {
		if (commit_big(a) == 0)
			ok++;
		(void)event_base_loop(base, EVLOOP_NONBLOCK);
		if (!audit_failed(a))
			break;
		usleep(10000);
	}
	assert_false(audit_failed(a));
	assert_true(ok >= 1);
	assert_int_equal(metric_value("sluice_audit_failed"), 0);
	audit_close(a);
	alarm(0);
	event_base_free(base);
	snprintf(both, sizeof(both), "%s/both.jsonl", fx->dir);
	lines = join_log(fx, &r, junk, both);
	assert_int_equal(lines, (size_t)(1 + n + ok));
	assert_int_equal(run_verify(files, 1, NULL, NULL), 0);
}

/* With on_error "allow" a full queue drops the line, counted, and goes on. */
static void
test_thread_queue_full_allow(void **state)
{
	struct fixture *fx = *state;
	struct event_base *base = event_base_new();
	struct pipe_reader r = { 0 };
	char both[256];
	const char *files[1] = { both };
	struct audit *a;
	size_t junk;
	int n;

	assert_non_null(base);
	fx->ac.ac_on_error_allow = 1;
	a = open_audit_base(fx, base);
	junk = block_log(fx, &r.pr_fd);
	alarm(60);
	n = fill_queue(a);
	assert_int_equal(commit_big(a), -1);
	assert_false(audit_failed(a));
	assert_int_equal(metric_value("sluice_audit_failed"), 0);
	assert_int_equal(metric_value("sluice_audit_write_errors_total"), 2);
	assert_int_equal(pthread_create(&r.pr_thread, NULL, pipe_reader_run,
			     &r),
	    0);
	audit_close(a);
	alarm(0);
	event_base_free(base);
	snprintf(both, sizeof(both), "%s/both.jsonl", fx->dir);
	assert_int_equal(join_log(fx, &r, junk, both), (size_t)n);
	assert_int_equal(run_verify(files, 1, NULL, NULL), 0);
}

/*
 * A write the thread fails: the batch is lost (and counted), the loop
 * learns of it through its event, goes on from the file's last line, and
 * the failed state ends with the next good write.
 */
static void
test_thread_write_error(void **state)
{
	struct fixture *fx = *state;
	struct event_base *base = event_base_new();
	const char *files[1] = { fx->path };
	struct audit *a;
	struct lines l;
	double t0;
	struct broken_fd b;

	assert_non_null(base);
	a = open_audit_base(fx, base);
	write_events(a, 2, "http.request");
	assert_int_equal(audit_sync(a), 0);
	break_fd(fx->path, &b);
	audit_begin(a, "http.request");
	audit_add_cstr(a, "lost", "1");
	assert_int_equal(audit_commit(a), 0); /* queued */
	/* The loop hears of it without asking. */
	t0 = now_s();
	while (metric_value("sluice_audit_failed") != 1 && now_s() - t0 < 10.0)
		(void)event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
	assert_true(audit_failed(a));
	assert_int_equal(metric_value("sluice_audit_failed"), 1);
	assert_int_equal(metric_value("sluice_audit_write_errors_total"), 1);
	mend_fd(&b);
	write_events(a, 1, "http.request");
	t0 = now_s();
	while (audit_failed(a) && now_s() - t0 < 10.0)
		(void)event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
	assert_false(audit_failed(a));
	assert_int_equal(metric_value("sluice_audit_failed"), 0);
	audit_close(a);
	event_base_free(base);
	close_fd(&b);
	read_lines(fx->path, &l);
	assert_int_equal(l.n, 3);
	assert_null(strstr(l.buf, "lost"));
	check_chain(&l, 1, zeros64);
	free(l.buf);
	assert_int_equal(run_verify(files, 1, NULL, NULL), 0);
}

/* SIGUSR1 while lines are queued: each line lands once, in order. */
static void
test_thread_reopen(void **state)
{
	struct fixture *fx = *state;
	struct event_base *base = event_base_new();
	char rot[6][256], head[256];
	const char *files[6];
	struct audit *a;
	size_t total = 0;
	int k;

	assert_non_null(base);
	fx->ac.ac_fsync = AUDIT_FSYNC_INTERVAL;
	a = open_audit_base(fx, base);
	for (k = 0; k < 5; k++) {
		write_events(a, 400, "http.request");
		snprintf(rot[k], sizeof(rot[k]), "%s.%d", fx->path, k);
		assert_int_equal(rename(fx->path, rot[k]), 0);
		write_events(a, 100, "http.request");
		assert_int_equal(audit_reopen(a), 0);
		files[k] = rot[k];
	}
	write_events(a, 500, "http.request");
	audit_close(a);
	event_base_free(base);
	files[5] = fx->path;
	for (k = 0; k < 6; k++)
		total += count_lines(files[k]);
	for (k = 0; k < 5; k++)
		assert_int_equal(count_lines(files[k]), 500);
	assert_int_equal(total, 3000);
	snprintf(head, sizeof(head), "%s/audit.head", fx->state);
	assert_int_equal(run_verify(files, 6, head, NULL), 0);
}

/* What the waits of test_thread_always() were answered. */
struct waits {
	int n;        /* answers so far */
	int order[8]; /* the index of each answer, in answer order */
	int ok[8];
	size_t lines[8]; /* lines in the file when it was answered */
	const char *path;
};

struct wait_arg {
	struct waits *w;
	int idx;
};

static void
wait_answered(void *arg, int ok)
{
	struct wait_arg *wa = arg;
	struct waits *w = wa->w;

	assert_true(w->n < 8);
	w->order[w->n] = wa->idx;
	w->ok[w->n] = ok;
	w->lines[w->n] = count_lines(w->path);
	w->n++;
}

/* Turn the loop until n waits are answered (10 s at most: a hang guard). */
static void
loop_until(struct event_base *base, const struct waits *w, int n)
{
	double t0 = now_s();

	while (w->n < n && now_s() - t0 < 10.0)
		(void)event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
}

static void
begin_line(struct audit *a, int i)
{
	audit_begin(a, "http.request");
	audit_add_int(a, "i", i);
}

/*
 * "always" through the thread: audit_commit_wait() returns at once (the
 * loop is not held up), and each wait is answered from the loop, in
 * order, once its line is in the file; a cancelled wait is never
 * answered; a lost line is answered not ok; a reload between modes keeps
 * the order.
 */
static void
test_thread_always(void **state)
{
	struct fixture *fx = *state;
	struct event_base *base = event_base_new();
	const char *files[1] = { fx->path };
	struct audit_wait aw[8];
	struct wait_arg wa[8];
	struct waits w;
	struct audit_conf ac;
	char why[256] = "";
	struct audit *a;
	struct broken_fd b;
	int i;

	assert_non_null(base);
	memset(aw, 0, sizeof(aw));
	memset(&w, 0, sizeof(w));
	w.path = fx->path;
	fx->ac.ac_fsync = AUDIT_FSYNC_ALWAYS;
	a = open_audit_base(fx, base);
	assert_true(audit_durable(a));
	/* Five waits at once, the third cancelled. */
	for (i = 0; i < 5; i++) {
		wa[i] = (struct wait_arg){ &w, i };
		begin_line(a, i);
		assert_int_equal(audit_commit_wait(a, &aw[i], wait_answered,
				     &wa[i]),
		    1);
	}
	audit_wait_cancel(a, &aw[2]);
	assert_int_equal(w.n, 0); /* never from inside the call */
	loop_until(base, &w, 4);
	assert_int_equal(w.n, 4);
	assert_int_equal(audit_sync(a), 0);
	(void)event_base_loop(base, EVLOOP_NONBLOCK);
	assert_int_equal(w.n, 4);
	assert_int_equal(w.order[0], 0);
	assert_int_equal(w.order[1], 1);
	assert_int_equal(w.order[2], 3);
	assert_int_equal(w.order[3], 4);
	for (i = 0; i < 4; i++) {
		assert_int_equal(w.ok[i], 1);
		/* Its own line, at least, was in the file. */
		assert_true(w.lines[i] >= (size_t)w.order[i] + 1);
	}
	/* A line that cannot be written: answered, not ok. */
	break_fd(fx->path, &b);
	wa[5] = (struct wait_arg){ &w, 5 };
	begin_line(a, 5);
	assert_int_equal(audit_commit_wait(a, &aw[5], wait_answered, &wa[5]),
	    1);
	loop_until(base, &w, 5);
	assert_int_equal(w.n, 5);
	assert_int_equal(w.order[4], 5);
	assert_int_equal(w.ok[4], 0);
	assert_true(audit_failed(a));
	/* Space returns: the next line ends the failed state. */
	mend_fd(&b);
	close_fd(&b);
	wa[6] = (struct wait_arg){ &w, 6 };
	begin_line(a, 6);
	assert_int_equal(audit_commit_wait(a, &aw[6], wait_answered, &wa[6]),
	    1);
	loop_until(base, &w, 6);
	assert_int_equal(w.n, 6);
	assert_int_equal(w.ok[5], 1); /* the write that ends the failed state */
	assert_false(audit_failed(a));
	ac = fx->ac;
	ac.ac_fsync = AUDIT_FSYNC_NEVER;
	assert_int_equal(audit_configure(a, &ac, why, sizeof(why)), 0);
	assert_false(audit_durable(a));
	write_events(a, 300, "http.request");
	/* Not "always": nothing to wait for. */
	begin_line(a, 7);
	assert_int_equal(audit_commit_wait(a, &aw[7], wait_answered, &wa[7]),
	    0);
	ac.ac_fsync = AUDIT_FSYNC_ALWAYS;
	assert_int_equal(audit_configure(a, &ac, why, sizeof(why)), 0);
	write_events(a, 1, "http.request");
	assert_int_equal(audit_sync(a), 0);
	assert_int_equal(count_lines(fx->path), 5 + 1 + 300 + 1 + 1);
	audit_close(a);
	event_base_free(base);
	assert_int_equal(w.n, 6);
	assert_int_equal(run_verify(files, 1, NULL, NULL), 0);
}

/*
 * An engine's writer (audit_remote()) with fsync "always": a waiting line
 * goes as an 'S' datagram, a plain one as 'L', both at the end of the
 * loop's turn; each wait is
 * answered from the loop by the parent's ack for its count (ok or not),
 * and all are answered not ok when the parent's channel closes.
 */
static void
test_remote_waits(void **state)
{
	struct fixture *fx = *state;
	struct event_base *base = event_base_new();
	struct audit_wait aw[4];
	struct wait_arg wa[4];
	struct waits w;
	unsigned char buf[8192];
	const char kinds[] = "SSLS";
	struct audit *a;
	int sv[2], i;
	ssize_t n;

	assert_non_null(base);
	memset(aw, 0, sizeof(aw));
	memset(&w, 0, sizeof(w));
	w.path = fx->path;
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
	fx->ac.ac_fsync = AUDIT_FSYNC_ALWAYS;
	a = open_audit(fx);
	assert_int_equal(audit_remote(a, sv[0], base), 0);
	for (i = 0; i < 3; i++)
		wa[i] = (struct wait_arg){ &w, i };
	begin_line(a, 0);
	assert_int_equal(audit_commit_wait(a, &aw[0], wait_answered, &wa[0]),
	    1);
	begin_line(a, 1);
	assert_int_equal(audit_commit_wait(a, &aw[1], wait_answered, &wa[1]),
	    1);
	begin_line(a, 9);
	assert_int_equal(audit_commit(a), 0);
	begin_line(a, 2);
	assert_int_equal(audit_commit_wait(a, &aw[2], wait_answered, &wa[2]),
	    1);
	/* Sent at the end of the loop's turn, the waiting lines too. */
	assert_int_equal(recv(sv[1], buf, sizeof(buf), MSG_DONTWAIT), -1);
	assert_int_equal(event_base_loop(base, EVLOOP_NONBLOCK), 0);
	for (i = 0; i < 4; i++) {
		n = recv(sv[1], buf, sizeof(buf), MSG_DONTWAIT);
		assert_true(n > 1);
		assert_int_equal(buf[0], kinds[i]);
	}
	assert_int_equal(w.n, 0);
	assert_int_equal(audit_remote_reply(sv[1], 0, 1, 2), 0);
	loop_until(base, &w, 2);
	assert_int_equal(w.n, 2);
	assert_int_equal(w.order[0], 0);
	assert_int_equal(w.order[1], 1);
	assert_true(w.ok[0] && w.ok[1]);
	/* The third line was not written by the parent. */
	assert_int_equal(audit_remote_reply(sv[1], 0, 0, 3), 0);
	loop_until(base, &w, 3);
	assert_int_equal(w.n, 3);
	assert_int_equal(w.order[2], 2);
	assert_int_equal(w.ok[2], 0);
	/*
	 * An ack is the answer for its lines, not the parent's state: that
	 * comes as its own message (an ack not ok may follow the state that
	 * ended the failure, and must not start it again).
	 */
	assert_false(audit_failed(a));
	assert_int_equal(audit_remote_reply(sv[1], 1, 1, 0), 0);
	(void)event_base_loop(base, EVLOOP_NONBLOCK);
	assert_true(audit_failed(a));
	/* The parent says its writer recovered; then its channel closes. */
	assert_int_equal(audit_remote_reply(sv[1], 1, 0, 0), 0);
	(void)event_base_loop(base, EVLOOP_NONBLOCK);
	assert_false(audit_failed(a));
	wa[3] = (struct wait_arg){ &w, 3 };
	begin_line(a, 3);
	assert_int_equal(audit_commit_wait(a, &aw[3], wait_answered, &wa[3]),
	    1);
	close(sv[1]);
	loop_until(base, &w, 4);
	assert_int_equal(w.n, 4);
	assert_int_equal(w.order[3], 3);
	assert_int_equal(w.ok[3], 0);
	/* With nobody left to answer, a line is not waited for at all. */
	begin_line(a, 4);
	assert_int_equal(audit_commit_wait(a, &aw[0], wait_answered, &wa[0]),
	    -1);
	(void)event_base_loop(base, EVLOOP_NONBLOCK);
	assert_int_equal(w.n, 4);
	audit_close(a);
	event_base_free(base);
}

static void
test_policy_event(void **state)
{
	struct fixture *fx = *state;
	struct audit *a = open_audit(fx);
	unsigned char sha[32];
	struct lines l;
	cJSON *j;
	char hex[65];
	size_t i;

	for (i = 0; i < sizeof(sha); i++)
		sha[i] = (unsigned char)(i * 7);
	assert_int_equal(audit_policy_event(a, "policy.load", sha, NULL), 0);
	audit_close(a);
	read_lines(fx->path, &l);
	j = parse_line(&l, 0);
	for (i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", sha[i]);
	assert_string_equal(jstr(j, "sha256"), hex);
	assert_string_equal(jstr(j, "event"), "policy.load");
	assert_null(cJSON_GetObjectItem(j, "error"));
	cJSON_Delete(j);
	free(l.buf);
}

/* A log of n lines, made by the writer, copied into *buf. */
static void
make_log(struct fixture *fx, int n, struct lines *l)
{
	struct audit *a = open_audit(fx);

	write_events(a, n, "http.request");
	audit_close(a);
	read_lines(fx->path, l);
}

static void
write_file(const char *path, const char *p, size_t n)
{
	FILE *f = fopen(path, "wb");

	assert_non_null(f);
	assert_int_equal(fwrite(p, 1, n, f), n);
	fclose(f);
}

static void
expect_break_at(const char *path, const char *head, size_t lineno,
    const char *what)
{
	const char *files[1] = { path };
	char want[300], *err = NULL;

	assert_int_equal(run_verify(files, 1, head, &err), 1);
	snprintf(want, sizeof(want), "%s:%zu: ", path, lineno);
	if (strncmp(err, want, strlen(want)) != 0 ||
	    (what != NULL && strstr(err, what) == NULL))
		fail_msg("%s: want \"%s...%s\", got: %s", what, want,
		    what != NULL ? what : "", err);
	free(err);
}

static void
test_verify_good(void **state)
{
	struct fixture *fx = *state;
	struct lines l;
	const char *files[1] = { fx->path };
	char head[256], *err = NULL;

	make_log(fx, 6, &l);
	assert_int_equal(run_verify(files, 1, NULL, NULL), 0);
	snprintf(head, sizeof(head), "%s/audit.head", fx->state);
	assert_int_equal(run_verify(files, 1, head, NULL), 0);
	/* An empty file is a valid (empty) log. */
	write_file(fx->path, "", 0);
	assert_int_equal(run_verify(files, 1, NULL, NULL), 0);
	/* A head whose line is not among the files is an error. */
	assert_int_equal(run_verify(files, 1, head, &err), 1);
	assert_non_null(strstr(err, "not in the files"));
	free(err);
	free(l.buf);
}

/*
 * verify --head reads audit.head by the daemon's rule: "SEQ HEX\n" with
 * one space, 64 lower-case hex digits and nothing after the newline.
 */
static void
test_verify_head_strict(void **state)
{
	struct fixture *fx = *state;
	struct lines l;
	const char *files[1] = { fx->path };
	char head[256], good[128], alt[160], *err, *sp;
	int i, n;
	FILE *f;

	make_log(fx, 3, &l);
	snprintf(head, sizeof(head), "%s/audit.head", fx->state);
	f = fopen(head, "r");
	assert_non_null(f);
	assert_non_null(fgets(good, sizeof(good), f));
	fclose(f);
	assert_int_equal(run_verify(files, 1, head, NULL), 0);
	sp = strchr(good, ' ');
	assert_non_null(sp);
	n = (int)(sp - good);
	for (i = 0; i < 5; i++) {
		switch (i) {
		case 0: /* a leading space */
			snprintf(alt, sizeof(alt), " %s", good);
			break;
		case 1: /* a sign */
			snprintf(alt, sizeof(alt), "+%s", good);
			break;
		case 2: /* more after the newline */
			snprintf(alt, sizeof(alt), "%s\n", good);
			break;
		case 3: /* no newline */
			snprintf(alt, sizeof(alt), "%.*s",
			    (int)strlen(good) - 1, good);
			break;
		default: /* two spaces */
			snprintf(alt, sizeof(alt), "%.*s %s", n, good, sp);
			break;
		}
		write_file(head, alt, strlen(alt));
		err = NULL;
		assert_int_equal(run_verify(files, 1, head, &err), 1);
		if (strstr(err, "not an audit.head file") == NULL)
			fail_msg("head \"%s\": got %s", alt, err);
		free(err);
	}
	free(l.buf);
}

/* Editing any one byte of any line is reported at that line. */
static void
test_verify_each_byte(void **state)
{
	struct fixture *fx = *state;
	struct lines l;
	char head[256], *copy;
	size_t i, off, base = 0;

	make_log(fx, 4, &l);
	snprintf(head, sizeof(head), "%s/audit.head", fx->state);
	copy = malloc(l.len);
	assert_non_null(copy);
	for (i = 0; i < l.n; i++) {
		/* Every byte of the line, and its newline. */
		for (off = 0; off <= l.llen[i]; off++) {
			memcpy(copy, l.buf, l.len);
			copy[base + off] ^= 0x01;
			write_file(fx->path, copy, l.len);
			/*
			 * The anchor (audit.head) is what catches an edit of
			 * the last line; the chain catches the others alone.
			 */
			expect_break_at(fx->path, head, i + 1, NULL);
			if (i + 1 < l.n)
				expect_break_at(fx->path, NULL, i + 1, NULL);
		}
		base += l.llen[i] + 1;
	}
	free(copy);
	free(l.buf);
}

static void
test_verify_damage(void **state)
{
	struct fixture *fx = *state;
	struct lines l;
	char *copy, *p;
	size_t n, cut;

	make_log(fx, 5, &l);
	copy = malloc(2 * l.len + 64);
	assert_non_null(copy);

	/* A missing line (the third): reported at the line after the gap. */
	cut = (size_t)(l.line[2] - l.buf);
	memcpy(copy, l.buf, cut);
	n = cut + l.len - (size_t)(l.line[3] - l.buf);
	memcpy(copy + cut, l.line[3], l.len - (size_t)(l.line[3] - l.buf));
	write_file(fx->path, copy, n);
	expect_break_at(fx->path, NULL, 3, "1 line(s) missing");

	/* A duplicated line. */
	memcpy(copy, l.buf, l.len);
	memcpy(copy + l.len, l.line[4], l.llen[4] + 1);
	write_file(fx->path, copy, l.len + l.llen[4] + 1);
	expect_break_at(fx->path, NULL, 6, "seq 5 after 5");

	/* A partial last line. */
	write_file(fx->path, l.buf, l.len - 10);
	expect_break_at(fx->path, NULL, 5, "no newline");

	/* Not JSON; an empty line; trailing garbage after the object. */
	memcpy(copy, l.buf, l.len);
	copy[0] = '[';
	write_file(fx->path, copy, l.len);
	expect_break_at(fx->path, NULL, 1, "not a JSON object");
	write_file(fx->path, "\n", 1);
	expect_break_at(fx->path, NULL, 1, "empty line");
	memcpy(copy, l.buf, l.llen[0]);
	memcpy(copy + l.llen[0], " x\n", 3);
	write_file(fx->path, copy, l.llen[0] + 3);
	expect_break_at(fx->path, NULL, 1, "not a JSON object");

	/* seq 1 must have a zero prev. */
	memcpy(copy, l.buf, l.len + 1); /* with read_lines' NUL */
	p = strstr(copy, "\"prev\":\"") + 8;
	*p = '1';
	write_file(fx->path, copy, l.len);
	expect_break_at(fx->path, NULL, 1, "64 zeros");

	/* A duplicate key. */
	snprintf(copy, 2 * l.len + 64, "%.*s,\"seq\":1}\n", (int)l.llen[0] - 1,
	    l.line[0]);
	write_file(fx->path, copy, strlen(copy));
	expect_break_at(fx->path, NULL, 1, "duplicate key");

	/* A line without prev (written with chain off). */
	{
		static const char noprev[] = "{\"ts\":\"2026-11-30T04:22:36."
					     "123456Z\",\"seq\":1,\"event\":"
					     "\"x\"}\n";

		write_file(fx->path, noprev, sizeof(noprev) - 1);
	}
	expect_break_at(fx->path, NULL, 1, "no \"prev\"");

	/* A file that starts mid-chain (a rotated file) is fine alone. */
	write_file(fx->path, l.line[2], l.len - (size_t)(l.line[2] - l.buf));
	{
		const char *files[1] = { fx->path };

		assert_int_equal(run_verify(files, 1, NULL, NULL), 0);
	}
	free(copy);
	free(l.buf);
}

static void
test_cmd_usage(void **state)
{
	char audit[] = "audit", verify[] = "verify", frob[] = "frobnicate";
	char x[] = "x", bogus[] = "--bogus", none[] = "/nonexistent/sluice/a";
	char *a1[] = { audit, NULL };
	char *a2[] = { audit, verify, NULL };
	char *a3[] = { audit, frob, x, NULL };
	char *a4[] = { audit, verify, bogus, x, NULL };
	char *a5[] = { audit, verify, none, NULL };
	FILE *saved;

	(void)state;
	/* Keep the usage text off the test output. */
	saved = stderr;
	stderr = fopen("/dev/null", "w");
	assert_non_null(stderr);
	assert_int_equal(cmd_audit(1, a1), SL_EXIT_USAGE);
	assert_int_equal(cmd_audit(2, a2), SL_EXIT_USAGE);
	assert_int_equal(cmd_audit(3, a3), SL_EXIT_USAGE);
	assert_int_equal(cmd_audit(4, a4), SL_EXIT_USAGE);
	assert_int_equal(cmd_audit(3, a5), SL_EXIT_INVALID);
	fclose(stderr);
	stderr = saved;
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_line_format, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_escape_hostile, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_escape_random, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_value_cap, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_chain, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_chain, setup, teardown),
		cmocka_unit_test_setup_teardown(test_resume, setup, teardown),
		cmocka_unit_test_setup_teardown(test_truncated, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_truncated_only_line, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_refuses_garbage, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_rotation, setup, teardown),
		cmocka_unit_test_setup_teardown(test_configure, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_prepare_apply, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_failed_state_deny, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_partial_write_cut_back,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_failed_state_allow, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_interval_timer, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_remote_queue_flushes,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_policy_event, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_thread_order, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_thread_slow_disk, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_thread_queue_full_deny,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_thread_queue_full_allow,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_thread_write_error, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_thread_reopen, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_thread_batch, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_thread_always, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_remote_waits, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_verify_head_strict, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_verify_good, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_verify_each_byte, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_verify_damage, setup,
		    teardown),
		cmocka_unit_test(test_cmd_usage),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
