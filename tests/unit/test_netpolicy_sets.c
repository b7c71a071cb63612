/*
 * Unit test for the dynamic set calls of netpolicy/nl.c, run in a
 * network namespace of its own (unshare; skipped without the privilege):
 * a sidecar ruleset applied, np_set_add() puts elements with a timeout in
 * the upstream set, np_set_del() takes them out again (present or not),
 * as np_dump() reads them back. netguard.c evicts with np_set_del() so
 * that the kernel's count of dynamic elements stays bounded.
 */
#include <sys/socket.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <errno.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "netpolicy/netpolicy.h"

static const char *const resolvers[] = { "198.18.0.53" };

static size_t
dynamic_in_set(const char *table)
{
	char why[256];
	struct np_ruleset *rs = np_dump(table, why, sizeof(why));
	struct np_set *s;
	size_t n;

	if (rs == NULL)
		fail_msg("np_dump: %s", why);
	s = np_ruleset_set(rs, NP_SET_UPSTREAM4);
	assert_non_null(s);
	n = s->se_ndynamic;
	np_ruleset_free(rs);
	return n;
}

static void
test_add_del(void **state)
{
	struct np_input in;
	struct np_ruleset *rs;
	struct np_elem el[3];
	struct sockaddr_in sa;
	char why[256];
	size_t i;

	(void)state;
	if (unshare(CLONE_NEWNET) == -1) {
		print_message("skipped: unshare(CLONE_NEWNET): %s\n",
		    strerror(errno));
		skip();
	}
	memset(&in, 0, sizeof(in));
	in.ni_mode = NP_MODE_SIDECAR;
	in.ni_table = "sltsets";
	in.ni_allow_loopback = 1;
	in.ni_uid = 1000;
	in.ni_resolvers = resolvers;
	in.ni_nresolvers = 1;
	in.ni_log_group = 7;
	rs = np_ruleset_build(&in, why, sizeof(why));
	if (rs == NULL)
		fail_msg("build: %s", why);
	if (np_apply(rs, why, sizeof(why)) == -1)
		fail_msg("apply: %s", why);
	np_ruleset_free(rs);
	assert_int_equal(dynamic_in_set("sltsets"), 0);
	for (i = 0; i < 3; i++) {
		char a[32];

		memset(&sa, 0, sizeof(sa));
		sa.sin_family = AF_INET;
		snprintf(a, sizeof(a), "198.18.7.%zu", i + 1);
		assert_int_equal(inet_pton(AF_INET, a, &sa.sin_addr), 1);
		assert_int_equal(np_elem_addr_port(&el[i],
				     (struct sockaddr *)&sa, 443, 60),
		    0);
	}
	if (np_set_add("sltsets", NP_SET_UPSTREAM4, el, 3, why, sizeof(why)) ==
	    -1)
		fail_msg("add: %s", why);
	assert_int_equal(dynamic_in_set("sltsets"), 3);
	/* One out; then the same again (absent now) and another. */
	if (np_set_del("sltsets", NP_SET_UPSTREAM4, &el[1], 1, why,
		sizeof(why)) == -1)
		fail_msg("del: %s", why);
	assert_int_equal(dynamic_in_set("sltsets"), 2);
	if (np_set_del("sltsets", NP_SET_UPSTREAM4, &el[0], 2, why,
		sizeof(why)) == -1)
		fail_msg("del again: %s", why);
	assert_int_equal(dynamic_in_set("sltsets"), 1);
	assert_int_equal(np_set_del("sltsets", NP_SET_UPSTREAM4, el, 0, why,
			     sizeof(why)),
	    0);
	if (np_flush("sltsets", why, sizeof(why)) == -1)
		fail_msg("flush: %s", why);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_add_del),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
