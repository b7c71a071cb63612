/*
 * log_warn_every(): a warning a sandbox can drive is written once a second
 * at most, and the next one written counts what was folded into silence.
 * stderr goes to a temporary file that is read back.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "proxy/util/util.h"

static FILE *captured;
static int saved_stderr = -1;

static int
capture(void **state)
{
	(void)state;
	captured = tmpfile();
	assert_non_null(captured);
	fflush(stderr);
	saved_stderr = dup(STDERR_FILENO);
	assert_true(saved_stderr >= 0);
	assert_true(dup2(fileno(captured), STDERR_FILENO) >= 0);
	setvbuf(stderr, NULL, _IONBF, 0);
	log_init("sluice", 0);
	return 0;
}

static int
release(void **state)
{
	(void)state;
	fflush(stderr);
	assert_true(dup2(saved_stderr, STDERR_FILENO) >= 0);
	close(saved_stderr);
	fclose(captured);
	return 0;
}

/* What was written to stderr so far, NUL-terminated, in buf. */
static size_t
written(char *buf, size_t len)
{
	size_t n;

	fflush(stderr);
	rewind(captured);
	n = fread(buf, 1, len - 1, captured);
	buf[n] = '\0';
	return n;
}

static size_t
count_lines(const char *s)
{
	size_t n = 0;

	for (; *s != '\0'; s++)
		if (*s == '\n')
			n++;
	return n;
}

static void
test_folds_within_a_second(void **state)
{
	struct log_every le = { 0 };
	char buf[4096];
	int i;

	(void)state;
	for (i = 0; i < 5; i++) {
		errno = EMFILE;
		log_warn_every(&le, "upstream socket");
		/* errno is the caller's, untouched. */
		assert_int_equal(errno, EMFILE);
	}
	(void)written(buf, sizeof(buf));
	/* The clock may turn a second in the loop: then two lines. */
	if (le.le_folded == 4) {
		assert_int_equal(count_lines(buf), 1);
		assert_string_equal(buf,
		    "sluice: upstream socket: Too many "
		    "open files\n");
	} else
		assert_int_equal(count_lines(buf), 2);
	assert_int_equal(count_lines(buf) + le.le_folded, 5);
}

static void
test_next_second_counts_the_folded(void **state)
{
	char buf[4096];
	int try, done = 0;

	(void)state;
	/* Three calls in one second (retried if the clock turned). */
	for (try = 0; try < 3 && !done; try++) {
		struct log_every le = { 0 };

		assert_int_equal(ftruncate(fileno(captured), 0), 0);
		rewind(captured);
		errno = ENFILE;
		log_warn_every(&le, "upstream socket");
		errno = ENFILE;
		log_warn_every(&le, "upstream socket");
		errno = ENFILE;
		log_warn_every(&le, "upstream socket");
		if (le.le_folded != 2)
			continue;
		/* As if a second went by. */
		le.le_sec--;
		errno = EMFILE;
		log_warn_every(&le, "upstream %s", "socket");
		(void)written(buf, sizeof(buf));
		assert_string_equal(buf,
		    "sluice: upstream socket: Too many open files in system\n"
		    "sluice: upstream socket: Too many open files (and 2 "
		    "more like it since)\n");
		assert_int_equal(le.le_folded, 0);
		done = 1;
	}
	assert_true(done);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_folds_within_a_second,
		    capture, release),
		cmocka_unit_test_setup_teardown(
		    test_next_second_counts_the_folded, capture, release),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
