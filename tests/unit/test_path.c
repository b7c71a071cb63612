/*
 * Unit tests for path checks (proxy/path.c): every example of DESIGN.md
 * "Paths" and each refusal rule with the offset it reports, plus prefix
 * matching at segment boundaries. Inputs sit against a PROT_NONE page.
 */
#include <sys/mman.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "proxy/http/http1.h"
#include "tests/unit/guard.h"

static int
setup(void **state)
{
	(void)state;
	return guard_setup(1);
}

static int
teardown(void **state)
{
	(void)state;
	return guard_teardown();
}

struct pcase {
	const char *path;
	int ok;
	size_t bad_off;
};

static const struct pcase paths[] = {
	/* Unambiguous paths (DESIGN.md: %20, %3F, %C3%A9 pass). */
	{ "/", 1, 0 },
	{ "/v1/messages", 1, 0 },
	{ "/v1/messages/", 1, 0 },
	{ "/v1/messages/x", 1, 0 },
	{ "/a/b%20c", 1, 0 },
	{ "/a%3Fb", 1, 0 },
	{ "/a%3fb", 1, 0 },
	{ "/caf%C3%A9", 1, 0 },
	{ "/caf%c3%a9", 1, 0 },
	{ "/a%25", 1, 0 },
	{ "/a%2B%3A%40", 1, 0 },
	{ "/a/.b", 1, 0 },
	{ "/a/..b", 1, 0 },
	{ "/a/b..", 1, 0 },
	{ "/a/...", 1, 0 },
	{ "/a;b=c/d", 1, 0 },
	{ "/a:b@c!$&'()*+,;=-._~", 1, 0 },

	/* Not rooted. */
	{ "", 0, 0 },
	{ "v1/messages", 0, 0 },
	{ "*", 0, 0 },
	/* Dot segments, also with a ";param" tail. */
	{ "/.", 0, 1 },
	{ "/..", 0, 1 },
	{ "/./a", 0, 1 },
	{ "/a/./b", 0, 3 },
	{ "/a/../b", 0, 3 },
	{ "/a/..", 0, 3 },
	{ "/a/.", 0, 3 },
	{ "/a/b/../c", 0, 5 },
	{ "/v1/messages/../../admin", 0, 13 },
	{ "/..;/x", 0, 1 },
	{ "/a/.;x/b", 0, 3 },
	/* Empty segments before the last. */
	{ "//", 0, 1 },
	{ "//a", 0, 1 },
	{ "/a//b", 0, 3 },
	{ "/a//", 0, 3 },
	{ "/a/b//", 0, 5 },
	/* Backslashes and bytes outside VCHAR. */
	{ "/a\\b", 0, 2 },
	{ "/\\", 0, 1 },
	{ "/a b", 0, 2 },
	{ "/a\x7f", 0, 2 },
	{ "/a\x01", 0, 2 },
	{ "/caf\xc3\xa9", 0, 4 },
	/* Malformed escapes. */
	{ "/a%", 0, 2 },
	{ "/a%2", 0, 2 },
	{ "/a%zz", 0, 2 },
	{ "/a%2G", 0, 2 },
	{ "/a%%41", 0, 2 },
	/* Escaped unreserved characters (DESIGN.md: %6D, %2e). */
	{ "/v1/%6Dessages", 0, 4 },
	{ "/v1/%6dessages", 0, 4 },
	{ "/a/%2e%2e/b", 0, 3 },
	{ "/a/%2E", 0, 3 },
	{ "/a%41", 0, 2 },
	{ "/a%7a", 0, 2 },
	{ "/a%30", 0, 2 },
	{ "/a%2D", 0, 2 },
	{ "/a%5F", 0, 2 },
	{ "/a%7E", 0, 2 },
	/* Escaped '/', '\' and control bytes (DESIGN.md: %2F, %5C, %00). */
	{ "/a%2Fb", 0, 2 },
	{ "/a%2fb", 0, 2 },
	{ "/a%5Cb", 0, 2 },
	{ "/a%5cb", 0, 2 },
	{ "/a%00", 0, 2 },
	{ "/a%0d%0a", 0, 2 },
	{ "/a%1F", 0, 2 },
	{ "/a%7F", 0, 2 },
	{ "/a%20%7f", 0, 5 },
};

static void
test_path_check(void **state)
{
	size_t i, len, off;
	const char *p;
	int r;

	(void)state;
	for (i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		len = strlen(paths[i].path);
		p = guard_put(paths[i].path, len);
		off = 12345;
		r = path_check(p, len, &off);
		if (paths[i].ok && r != 0)
			fail_msg("\"%s\": refused at %zu", paths[i].path, off);
		if (!paths[i].ok && (r != -1 || off != paths[i].bad_off))
			fail_msg("\"%s\": got %d at %zu, want -1 at %zu",
			    paths[i].path, r, off, paths[i].bad_off);
	}
}

/* A NUL inside the path is a byte like any other, not an end. */
static void
test_path_nul(void **state)
{
	size_t off;

	(void)state;
	assert_int_equal(path_check(guard_put("/a\0b", 4), 4, &off), -1);
	assert_int_equal(off, 2);
}

struct xcase {
	const char *path;
	const char *prefix;
	int match;
};

static const struct xcase prefixes[] = {
	/* DESIGN.md's examples. */
	{ "/v1/messages", "/v1/messages", 1 },
	{ "/v1/messages/", "/v1/messages", 1 },
	{ "/v1/messages/x", "/v1/messages", 1 },
	{ "/v1/messagesX", "/v1/messages", 0 },
	{ "/v1/message", "/v1/messages", 0 },
	{ "/v1", "/v1/messages", 0 },
	/* Exact case. */
	{ "/V1/messages", "/v1/messages", 0 },
	/* "/" allows everything. */
	{ "/", "/", 1 },
	{ "/anything/at/all", "/", 1 },
	/* A prefix ending in '/' is that directory and below. */
	{ "/v1/", "/v1/", 1 },
	{ "/v1/x", "/v1/", 1 },
	{ "/v1", "/v1/", 0 },
	{ "/v1x/", "/v1/", 0 },
	/* An empty prefix matches nothing. */
	{ "/", "", 0 },
	{ "", "", 0 },
};

static void
test_prefix(void **state)
{
	size_t i, len;
	const char *p;
	int r;

	(void)state;
	for (i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
		len = strlen(prefixes[i].path);
		p = guard_put(prefixes[i].path, len);
		r = path_has_prefix(p, len, prefixes[i].prefix,
		    strlen(prefixes[i].prefix));
		if ((r != 0) != prefixes[i].match)
			fail_msg("\"%s\" under \"%s\": got %d",
			    prefixes[i].path, prefixes[i].prefix, r);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_path_check),
		cmocka_unit_test(test_path_nul),
		cmocka_unit_test(test_prefix),
	};

	return cmocka_run_group_tests_name("path", tests, setup, teardown);
}
