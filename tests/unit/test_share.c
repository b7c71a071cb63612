/*
 * Unit tests for proxy/ops/share.c, the per-sandbox counts the engines
 * (`workers`) keep together: connections added by forked processes in
 * their own slots are summed, a dead engine's slot is zeroed, one bucket
 * grants one burst over every process, ids keep their own counts, and a
 * cell nobody counts in any more is taken over only when it is idle.
 */
#include <sys/wait.h>

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

#define FORKS 3

static int
setup(void **state)
{
	(void)state;
	assert_int_equal(share_open(), 0);
	return 0;
}

/* Each fork adds n connections of id in its own slot (1..FORKS). */
static void
forks_add(const char *id, int n)
{
	pid_t pid[FORKS];
	int k, i, status;

	for (k = 0; k < FORKS; k++) {
		pid[k] = fork();
		assert_true(pid[k] >= 0);
		if (pid[k] != 0)
			continue;
		int cell = -1;

		share_slot(k + 1);
		for (i = 0; i < n; i++)
			if (share_conn(id, &cell, 1) != 0)
				_exit(1);
		_exit(0);
	}
	for (k = 0; k < FORKS; k++) {
		assert_int_equal(waitpid(pid[k], &status, 0), pid[k]);
		assert_true(WIFEXITED(status));
		assert_int_equal(WEXITSTATUS(status), 0);
	}
}

static void
test_conns_summed(void **state)
{
	int cell = -1, other = -1;

	(void)state;
	forks_add("sbx-a", 100);
	assert_int_equal(share_conns("sbx-a", &cell), FORKS * 100);
	assert_int_equal(share_conns("sbx-b", &other), 0);
	/* This process's own (slot 0) too. */
	assert_int_equal(share_conn("sbx-a", &cell, 1), 0);
	assert_int_equal(share_conns("sbx-a", &cell), FORKS * 100 + 1);
	/* The engine in slot 2 died: its connections are gone. */
	share_slot_clear(2);
	assert_int_equal(share_conns("sbx-a", &cell), (FORKS - 1) * 100 + 1);
	/* A stale or wrong cached cell is found out. */
	other = cell;
	assert_int_equal(share_conns("sbx-b", &other), 0);
	assert_int_not_equal(other, cell);
	for (int k = 1; k <= FORKS; k++)
		share_slot_clear(k);
	assert_int_equal(share_conn("sbx-a", &cell, -1), 0);
	assert_int_equal(share_conns("sbx-a", &cell), 0);
}

/* A burst of rps over every process, not rps each. */
static void
test_one_bucket(void **state)
{
	const uint64_t rps = 10;
	int64_t now = 1000000000;
	pid_t pid[FORKS];
	int k, i, status, granted = 0, cell = -1;

	(void)state;
	for (k = 0; k < FORKS; k++) {
		pid[k] = fork();
		assert_true(pid[k] >= 0);
		if (pid[k] != 0)
			continue;
		int c = -1, n = 0;

		for (i = 0; i < 50; i++)
			if (share_rate("sbx-r", &c, rps, now) == 0)
				n++;
		_exit(n);
	}
	for (k = 0; k < FORKS; k++) {
		assert_int_equal(waitpid(pid[k], &status, 0), pid[k]);
		assert_true(WIFEXITED(status));
		granted += WEXITSTATUS(status);
	}
	assert_int_equal(granted, (int)rps);
	assert_int_equal(share_rate("sbx-r", &cell, rps, now), 1);
	/* A tenth of a second later: one more. */
	assert_int_equal(share_rate("sbx-r", &cell, rps, now + 100000), 0);
	assert_int_equal(share_rate("sbx-r", &cell, rps, now + 100000), 1);
	/* Another sandbox has its own bucket. */
	assert_int_equal(share_rate("sbx-s", &cell, rps, now), 0);
}

/*
 * More ids than cells over time: idle ones are taken over, one with a
 * connection open never is.
 */
static void
test_takeover(void **state)
{
	char id[32];
	int i, cell = -1, keep = -1;

	(void)state;
	assert_int_equal(share_conn("kept", &keep, 1), 0);
	for (i = 0; i < 20000; i++) {
		snprintf(id, sizeof(id), "run-%d", i);
		cell = -1;
		assert_int_equal(share_conn(id, &cell, 1), 0);
		assert_int_equal(share_conns(id, &cell), 1);
		assert_int_equal(share_conn(id, &cell, -1), 0);
	}
	assert_int_equal(share_conns("kept", &keep), 1);
	assert_int_equal(share_conn("kept", &keep, -1), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_conns_summed),
		cmocka_unit_test(test_one_bucket),
		cmocka_unit_test(test_takeover),
	};

	return cmocka_run_group_tests(tests, setup, NULL);
}
