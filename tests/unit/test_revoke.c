/*
 * Unit tests for proxy/revoke.c: parsing of a revoked_file (comments,
 * blank lines, sorting, and errors that name the line), admin revocations
 * that persist across a reopen, the recovery of a torn last line, and
 * revocations_has() over both sources.
 */
#include <sys/stat.h>

#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "proxy/proxy.h"

/*
 * Linked with -Wl,--wrap=calloc (tests/CMakeLists.txt): calloc(n, ...)
 * fails once when n equals fail_calloc_nmemb, to reach the paths behind
 * a failed growth of the revocation set.
 */
void *__real_calloc(size_t, size_t);
void *__wrap_calloc(size_t, size_t);
static size_t fail_calloc_nmemb;

void *
__wrap_calloc(size_t n, size_t size)
{
	if (fail_calloc_nmemb != 0 && n == fail_calloc_nmemb) {
		fail_calloc_nmemb = 0;
		return NULL;
	}
	return __real_calloc(n, size);
}

struct dir {
	char path[256];
	char file[300];  /* a revoked_file */
	char admin[300]; /* revoked.admin */
};

static int
setup(void **state)
{
	struct dir *d = calloc(1, sizeof(*d));
	const char *tmp = getenv("TMPDIR");

	assert_non_null(d);
	snprintf(d->path, sizeof(d->path), "%s/sluice-revoke-XXXXXX",
	    tmp != NULL ? tmp : "/tmp");
	assert_non_null(mkdtemp(d->path));
	snprintf(d->file, sizeof(d->file), "%s/revoked.txt", d->path);
	snprintf(d->admin, sizeof(d->admin), "%s/revoked.admin", d->path);
	*state = d;
	return 0;
}

static int
teardown(void **state)
{
	struct dir *d = *state;

	unlink(d->file);
	unlink(d->admin);
	rmdir(d->path);
	free(d);
	return 0;
}

static void
write_file(const char *path, const char *data, size_t len, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, len), (ssize_t)len);
	close(fd);
	assert_int_equal(chmod(path, mode), 0);
}

static void
free_list(char **v, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

static void
test_read_file(void **state)
{
	static const char text[] = "# revoked run tokens\n"
				   "jti-c\n"
				   "\n"
				   "jti-a\n"
				   "#jti-x is a comment\n"
				   "jti with inner space\n"
				   "jti-c\n"
				   "jti-b"; /* no final LF */
	struct dir *d = *state;
	char why[512], **v;
	size_t n;

	write_file(d->file, text, strlen(text), 0644);
	assert_int_equal(revocations_read_file(d->file, &v, &n, why,
			     sizeof(why)),
	    0);
	/* Sorted with strcmp, duplicates dropped. */
	assert_int_equal(n, 4);
	assert_string_equal(v[0], "jti with inner space");
	assert_string_equal(v[1], "jti-a");
	assert_string_equal(v[2], "jti-b");
	assert_string_equal(v[3], "jti-c");
	free_list(v, n);

	write_file(d->file, "", 0, 0644);
	assert_int_equal(revocations_read_file(d->file, &v, &n, why,
			     sizeof(why)),
	    0);
	assert_int_equal(n, 0);
	assert_null(v);
}

/* Each bad line is reported as "path:LINE: why". */
static void
test_read_file_errors(void **state)
{
	static const struct {
		const char *text;
		size_t len;
		int line;
		const char *why;
	} cases[] = {
		{ "a\nb\r\nc\n", 7, 2, "carriage return" },
		{ "a\n b\n", 5, 2, "leading or trailing blank" },
		{ "a\nb\t\n", 5, 2, "leading or trailing blank" },
		{ "# x\n\nok\nbad\x01jti\n", 16, 4, "control character" },
		{ "ok\nnul\0byte\n", 12, 2, "NUL byte" },
		{ "  \n", 3, 1, "leading or trailing blank" },
	};
	struct dir *d = *state;
	char why[512], want[400], **v, longline[200];
	size_t i, n;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		write_file(d->file, cases[i].text, cases[i].len, 0644);
		assert_int_equal(revocations_read_file(d->file, &v, &n, why,
				     sizeof(why)),
		    -1);
		snprintf(want, sizeof(want), "%s:%d: %s", d->file,
		    cases[i].line, cases[i].why);
		if (strncmp(why, want, strlen(want)) != 0)
			fail_msg("case %zu: \"%s\", want \"%s\"", i, why, want);
	}
	/* 128 bytes are fine, 129 are not. */
	memset(longline, 'x', 129);
	longline[128] = '\n';
	write_file(d->file, longline, 129, 0644);
	assert_int_equal(revocations_read_file(d->file, &v, &n, why,
			     sizeof(why)),
	    0);
	assert_int_equal(n, 1);
	free_list(v, n);
	memset(longline, 'x', 129);
	longline[129] = '\n';
	write_file(d->file, longline, 130, 0644);
	assert_int_equal(revocations_read_file(d->file, &v, &n, why,
			     sizeof(why)),
	    -1);
	snprintf(want, sizeof(want), "%s:1: jti longer than 128", d->file);
	assert_non_null(strstr(why, want));
	/* A missing file. */
	unlink(d->file);
	assert_int_equal(revocations_read_file(d->file, &v, &n, why,
			     sizeof(why)),
	    -1);
	assert_non_null(strstr(why, d->file));
}

static void
test_admin_persists(void **state)
{
	struct dir *d = *state;
	struct revocations *r;
	char why[512], buf[256];
	struct stat st;
	ssize_t n;
	int fd;

	r = revocations_open(d->path, why, sizeof(why));
	assert_non_null(r);
	assert_int_equal(stat(d->admin, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_false(revocations_has(r, NULL, 0, "jti-1"));
	assert_int_equal(revocations_add(r, "jti-1", why, sizeof(why)), 0);
	assert_int_equal(revocations_add(r, "jti 2", why, sizeof(why)), 0);
	/* Already revoked: no second line. */
	assert_int_equal(revocations_add(r, "jti-1", why, sizeof(why)), 0);
	assert_true(revocations_has(r, NULL, 0, "jti-1"));
	assert_true(revocations_has(r, NULL, 0, "jti 2"));
	assert_false(revocations_has(r, NULL, 0, "jti-3"));
	/* jtis the line format cannot carry are refused. */
	assert_int_equal(revocations_add(r, "", why, sizeof(why)), -1);
	assert_int_equal(revocations_add(r, "#x", why, sizeof(why)), -1);
	assert_int_equal(revocations_add(r, " x", why, sizeof(why)), -1);
	assert_int_equal(revocations_add(r, "a\nb", why, sizeof(why)), -1);
	assert_int_equal(revocations_add(r, "a\rb", why, sizeof(why)), -1);
	revocations_close(r);

	fd = open(d->admin, O_RDONLY);
	assert_true(fd >= 0);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	assert_true(n >= 0);
	buf[n] = '\0';
	assert_string_equal(buf, "jti-1\njti 2\n");

	r = revocations_open(d->path, why, sizeof(why));
	assert_non_null(r);
	assert_true(revocations_has(r, NULL, 0, "jti-1"));
	assert_true(revocations_has(r, NULL, 0, "jti 2"));
	assert_false(revocations_has(r, NULL, 0, "jti-"));
	revocations_close(r);
}

/* Enough revocations to make the set grow several times. */
static void
test_admin_many(void **state)
{
	struct dir *d = *state;
	struct revocations *r;
	char why[512], jti[32];
	int i;

	r = revocations_open(d->path, why, sizeof(why));
	assert_non_null(r);
	for (i = 0; i < 300; i++) {
		snprintf(jti, sizeof(jti), "j%d", i);
		assert_int_equal(revocations_add(r, jti, why, sizeof(why)), 0);
	}
	revocations_close(r);
	r = revocations_open(d->path, why, sizeof(why));
	assert_non_null(r);
	for (i = 0; i < 300; i++) {
		snprintf(jti, sizeof(jti), "j%d", i);
		assert_true(revocations_has(r, NULL, 0, jti));
	}
	assert_false(revocations_has(r, NULL, 0, "j300"));
	revocations_close(r);
}

/*
 * Out of memory while growing the set at open: refused with a clear
 * error, and what was read is freed, not freed wrongly (the strings after
 * the one that failed, then the array itself).
 */
static void
test_open_grow_fails(void **state)
{
	struct dir *d = *state;
	struct revocations *r;
	char why[512], jti[32];
	int i;

	r = revocations_open(d->path, why, sizeof(why));
	assert_non_null(r);
	for (i = 0; i < 40; i++) {
		snprintf(jti, sizeof(jti), "j%d", i);
		assert_int_equal(revocations_add(r, jti, why, sizeof(why)), 0);
	}
	revocations_close(r);
	/* 40 entries: the 64-slot set doubles to 128 at the 32nd. */
	fail_calloc_nmemb = 128;
	r = revocations_open(d->path, why, sizeof(why));
	assert_int_equal(fail_calloc_nmemb, 0); /* the growth was reached */
	assert_null(r);
	assert_non_null(strstr(why, "out of memory"));
	r = revocations_open(d->path, why, sizeof(why));
	assert_non_null(r);
	assert_true(revocations_has(r, NULL, 0, "j39"));
	revocations_close(r);
}

/* A last line without LF (a torn append) is kept and terminated. */
static void
test_admin_torn_line(void **state)
{
	struct dir *d = *state;
	struct revocations *r;
	char why[512], buf[256];
	ssize_t n;
	int fd;

	write_file(d->admin, "abc\ndef", 7, 0600);
	r = revocations_open(d->path, why, sizeof(why));
	assert_non_null(r);
	assert_true(revocations_has(r, NULL, 0, "def"));
	assert_int_equal(revocations_add(r, "ghi", why, sizeof(why)), 0);
	revocations_close(r);
	fd = open(d->admin, O_RDONLY);
	assert_true(fd >= 0);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	assert_true(n >= 0);
	buf[n] = '\0';
	assert_string_equal(buf, "abc\ndef\nghi\n");
}

static void
test_admin_refused(void **state)
{
	struct dir *d = *state;
	char why[512];

	/* Wider than 0600: whoever can write it can lift revocations. */
	write_file(d->admin, "abc\n", 4, 0640);
	assert_null(revocations_open(d->path, why, sizeof(why)));
	assert_non_null(strstr(why, "0600"));
	/* A line that is not a jti (our own file: no comments). */
	write_file(d->admin, "abc\n\n", 5, 0600);
	assert_null(revocations_open(d->path, why, sizeof(why)));
	assert_non_null(strstr(why, ":2: empty jti"));
	assert_null(revocations_open("/nonexistent/sluice", why, sizeof(why)));
	revocations_close(NULL);
}

static void
test_has_both_sources(void **state)
{
	struct dir *d = *state;
	char fa[] = "f-a", fb[] = "f-b", fc[] = "f-c";
	char *list[] = { fa, fb, fc }; /* sorted, as the loader keeps it */
	struct config cf;
	struct revocations *r;
	char why[512];

	memset(&cf, 0, sizeof(cf));
	cf.cf_revoked = list;
	cf.cf_nrevoked = 3;
	r = revocations_open(d->path, why, sizeof(why));
	assert_non_null(r);
	assert_int_equal(revocations_add(r, "admin-1", why, sizeof(why)), 0);
	assert_true(revocations_has(r, cf.cf_revoked, cf.cf_nrevoked, "f-a"));
	assert_true(revocations_has(r, cf.cf_revoked, cf.cf_nrevoked, "f-b"));
	assert_true(revocations_has(r, cf.cf_revoked, cf.cf_nrevoked, "f-c"));
	assert_true(
	    revocations_has(r, cf.cf_revoked, cf.cf_nrevoked, "admin-1"));
	assert_false(revocations_has(r, cf.cf_revoked, cf.cf_nrevoked, "f-d"));
	assert_false(revocations_has(r, cf.cf_revoked, cf.cf_nrevoked, "f-"));
	assert_true(
	    revocations_has(NULL, cf.cf_revoked, cf.cf_nrevoked, "f-b"));
	assert_false(
	    revocations_has(NULL, cf.cf_revoked, cf.cf_nrevoked, "admin-1"));
	assert_true(revocations_has(r, NULL, 0, "admin-1"));
	assert_false(revocations_has(NULL, NULL, 0, "f-a"));
	assert_false(revocations_has(r, cf.cf_revoked, cf.cf_nrevoked, NULL));
	revocations_close(r);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_read_file, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_read_file_errors, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_admin_persists, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_admin_many, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_open_grow_fails, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_admin_torn_line, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_admin_refused, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_has_both_sources, setup,
		    teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
