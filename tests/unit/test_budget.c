/*
 * Unit tests for proxy/budget.c: charging up to the limit, persistence
 * across close/open and across a kill -9 of the process that charged,
 * pruning and compaction, the full-table refusal, and the checks that make
 * a corrupt or foreign budget.db an error instead of a silent reset. Each
 * test works in its own mkdtemp() directory.
 */
#include <sys/stat.h>
#include <sys/wait.h>

#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "proxy/proxy.h"

struct dir {
	char path[256];
	char db[300];
};

static int
setup(void **state)
{
	struct dir *d = calloc(1, sizeof(*d));
	const char *tmp = getenv("TMPDIR");

	assert_non_null(d);
	snprintf(d->path, sizeof(d->path), "%s/sluice-budget-XXXXXX",
	    tmp != NULL ? tmp : "/tmp");
	assert_non_null(mkdtemp(d->path));
	snprintf(d->db, sizeof(d->db), "%s/budget.db", d->path);
	*state = d;
	return 0;
}

static int
teardown(void **state)
{
	struct dir *d = *state;
	char p[320];

	unlink(d->db);
	snprintf(p, sizeof(p), "%s.tmp", d->db);
	unlink(p);
	rmdir(d->path);
	free(d);
	return 0;
}

static struct budget *
open_ok(const struct dir *d, uint32_t cap)
{
	char why[512];
	struct budget *b = budget_open_capacity(d->path, cap, why, sizeof(why));

	if (b == NULL)
		fail_msg("budget_open: %s", why);
	return b;
}

static void
test_charge_to_limit(void **state)
{
	struct dir *d = *state;
	struct budget *b = open_ok(d, 64);
	struct stat st;
	uint64_t used;
	int i;

	for (i = 1; i <= 3; i++) {
		assert_int_equal(budget_charge(b, "jti-a", 1000, 3, &used), 0);
		assert_int_equal(used, (uint64_t)i);
	}
	assert_int_equal(budget_charge(b, "jti-a", 1000, 3, &used), 1);
	assert_int_equal(used, 3);
	assert_int_equal(budget_charge(b, "jti-a", 1000, 3, &used), 1);
	assert_int_equal(budget_used(b, "jti-a"), 3);
	/* A higher limit (min of claim and route changed) allows more. */
	assert_int_equal(budget_charge(b, "jti-a", 1000, 4, &used), 0);
	assert_int_equal(used, 4);
	/* Other jtis are independent; unknown ones are at 0. */
	assert_int_equal(budget_used(b, "jti-b"), 0);
	assert_int_equal(budget_charge(b, "jti-b", 1000, 1, &used), 0);
	assert_int_equal(budget_charge(b, "jti-b", 1000, 1, &used), 1);
	assert_int_equal(budget_used(b, "jti-a"), 4);
	/* limit 0: no limit, nothing charged. */
	assert_int_equal(budget_charge(b, "jti-c", 1000, 0, &used), 0);
	assert_int_equal(used, 0);
	assert_int_equal(budget_used(b, "jti-c"), 0);
	/* Created with mode 0600. */
	assert_int_equal(stat(d->db, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	budget_close(b);
}

static void
test_persist_across_reopen(void **state)
{
	struct dir *d = *state;
	struct budget *b = open_ok(d, 64);
	uint64_t used;
	char why[512];

	assert_int_equal(budget_charge(b, "jti-a", 1000, 2, &used), 0);
	assert_int_equal(budget_charge(b, "jti-a", 1000, 2, &used), 0);
	/* A second open of the same file is refused while it is in use. */
	assert_null(budget_open(d->path, why, sizeof(why)));
	assert_non_null(strstr(why, "in use"));
	budget_close(b);
	/* Reopened: the counts are there and the limit still holds. The
	 * capacity asked for does not matter for an existing file. */
	b = open_ok(d, 1024);
	assert_int_equal(budget_used(b, "jti-a"), 2);
	assert_int_equal(budget_charge(b, "jti-a", 1000, 2, &used), 1);
	budget_close(b);
}

/*
 * kill -9 right after charging: the charges are in the page cache of the
 * file, so a new process sees every one of them.
 */
static void
test_survives_kill9(void **state)
{
	struct dir *d = *state;
	struct budget *b;
	uint64_t used;
	pid_t pid;
	int status;

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char why[512];

		b = budget_open_capacity(d->path, 64, why, sizeof(why));
		if (b == NULL)
			_exit(1);
		for (int i = 0; i < 5; i++)
			if (budget_charge(b, "jti-k", 1000, 10, &used) != 0)
				_exit(1);
		kill(getpid(), SIGKILL);
		_exit(2);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGKILL);
	b = open_ok(d, 64);
	assert_int_equal(budget_used(b, "jti-k"), 5);
	budget_close(b);
}

/*
 * Engines (workers, a reload's draining ones) fork from the process that
 * opened the table and charge at once: every charge counted once, every
 * new jti in one entry, the live count right (the old per-process count
 * and the unlocked insert lost entries and counts here).
 */
#define FORKS  3
#define ROUNDS 4000

static void
test_forks_charge_at_once(void **state)
{
	struct dir *d = *state;
	struct budget *b = open_ok(d, 1u << 15);
	uint64_t used, live, limit;
	pid_t pid[FORKS];
	char jti[64];
	int i, k, status;

	for (k = 0; k < FORKS; k++) {
		pid[k] = fork();
		assert_true(pid[k] >= 0);
		if (pid[k] != 0)
			continue;
		for (i = 0; i < ROUNDS; i++) {
			snprintf(jti, sizeof(jti), "own-%d-%d", k, i);
			if (budget_charge(b, "shared", 1000, 1000000, &used) !=
				0 ||
			    budget_charge(b, jti, 1000, 10, &used) != 0)
				_exit(1);
			/* A new jti with a close deadline: pruned at once. */
			snprintf(jti, sizeof(jti), "gone-%d-%d", k, i);
			if (budget_charge(b, jti, -5000, 10, &used) != 0)
				_exit(1);
			if (i % 500 == 0)
				budget_prune(b, 0);
		}
		_exit(0);
	}
	for (k = 0; k < FORKS; k++) {
		assert_int_equal(waitpid(pid[k], &status, 0), pid[k]);
		assert_true(WIFEXITED(status));
		assert_int_equal(WEXITSTATUS(status), 0);
	}
	budget_prune(b, 0);
	assert_int_equal(budget_used(b, "shared"), FORKS * ROUNDS);
	for (k = 0; k < FORKS; k++)
		for (i = 0; i < ROUNDS; i++) {
			snprintf(jti, sizeof(jti), "own-%d-%d", k, i);
			if (budget_used(b, jti) != 1)
				fail_msg("%s: %llu", jti,
				    (unsigned long long)budget_used(b, jti));
		}
	budget_fill(b, &live, &limit);
	assert_int_equal(live, 1 + FORKS * ROUNDS);
	budget_rescan(b);
	budget_fill(b, &live, &limit);
	assert_int_equal(live, 1 + FORKS * ROUNDS);
	budget_close(b);
}

/*
 * A process killed while it charges may hold the lock: the next one
 * still gets it (robust), and the table is whole.
 */
static void
test_holder_killed(void **state)
{
	struct dir *d = *state;
	struct budget *b = open_ok(d, 1u << 12);
	uint64_t used, before, live, limit;
	pid_t pid;
	int round, status;

	for (round = 0; round < 20; round++) {
		before = budget_used(b, "hot");
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			for (;;)
				if (budget_charge(b, "hot", 1000, UINT64_MAX,
					&used) != 0)
					_exit(1);
		}
		(void)usleep(2000 + 500 * (useconds_t)round);
		assert_int_equal(kill(pid, SIGKILL), 0);
		assert_int_equal(waitpid(pid, &status, 0), pid);
		assert_true(WIFSIGNALED(status));
		/* A lock left held would hang here: the alarm ends the test. */
		(void)alarm(10);
		assert_int_equal(budget_charge(b, "hot", 1000, UINT64_MAX,
				     &used),
		    0);
		(void)alarm(0);
		assert_true(used > before);
	}
	budget_fill(b, &live, &limit);
	assert_int_equal(live, 1);
	budget_close(b);
}

static void
test_prune(void **state)
{
	struct dir *d = *state;
	struct budget *b = open_ok(d, 64);
	uint64_t used;

	assert_int_equal(budget_charge(b, "old", 100, 5, &used), 0);
	assert_int_equal(budget_charge(b, "edge", 200, 5, &used), 0);
	assert_int_equal(budget_charge(b, "new", 300, 5, &used), 0);
	assert_int_equal(budget_charge(b, "new", 300, 5, &used), 0);
	/* Within the grace nothing goes, even long after exp. */
	budget_prune(b, 300 + BUDGET_PRUNE_GRACE - 1000);
	assert_int_equal(budget_used(b, "old"), 1);
	/* A later exp for the same jti extends its entry. */
	assert_int_equal(budget_charge(b, "old", 150, 5, &used), 0);
	/* Kept for BUDGET_PRUNE_GRACE after exp (the token's leeway). */
	budget_prune(b, 150 + BUDGET_PRUNE_GRACE);
	assert_int_equal(budget_used(b, "old"), 2); /* 150 is not < 150 */
	budget_prune(b, 200 + BUDGET_PRUNE_GRACE);
	assert_int_equal(budget_used(b, "old"), 0);
	assert_int_equal(budget_used(b, "edge"), 1);
	assert_int_equal(budget_used(b, "new"), 2);
	budget_close(b);
	b = open_ok(d, 64);
	assert_int_equal(budget_used(b, "old"), 0);
	assert_int_equal(budget_used(b, "new"), 2);
	/* A pruned slot (tombstone) is reused. */
	assert_int_equal(budget_charge(b, "old", 1000, 5, &used), 0);
	assert_int_equal(used, 1);
	budget_close(b);
}

/* Capacity 8 holds 6 live entries; the 7th new jti is refused. */
static void
test_full_table(void **state)
{
	struct dir *d = *state;
	struct budget *b = open_ok(d, 8);
	char jti[32];
	uint64_t used;
	int i;

	for (i = 0; i < 6; i++) {
		snprintf(jti, sizeof(jti), "jti-%d", i);
		assert_int_equal(budget_charge(b, jti, 100 + i, 5, &used), 0);
	}
	assert_int_equal(budget_charge(b, "one-too-many", 1000, 5, &used), -1);
	/* Known jtis can still be charged. */
	assert_int_equal(budget_charge(b, "jti-3", 103, 5, &used), 0);
	assert_int_equal(used, 2);
	/* Once some expire and are pruned, there is room again. */
	budget_prune(b, 102 + BUDGET_PRUNE_GRACE);
	assert_int_equal(budget_charge(b, "one-too-many", 1000, 5, &used), 0);
	assert_int_equal(budget_charge(b, "another", 1000, 5, &used), 0);
	assert_int_equal(budget_charge(b, "and-one-more", 1000, 5, &used), -1);
	for (i = 2; i < 6; i++) {
		snprintf(jti, sizeof(jti), "jti-%d", i);
		assert_int_equal(budget_used(b, jti), i == 3 ? 2 : 1);
	}
	budget_close(b);
}

/* The active-table index in the header (offset 20, see budget.c). */
static uint32_t
active_table(const struct dir *d)
{
	uint32_t v = 9;
	int fd = open(d->db, O_RDONLY);

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &v, sizeof(v), 20), (ssize_t)sizeof(v));
	close(fd);
	return v;
}

/* Many prunes force compactions; every live count survives them. */
static void
test_compaction(void **state)
{
	struct dir *d = *state;
	struct budget *b = open_ok(d, 64);
	char jti[32];
	uint64_t used;
	uint32_t act = active_table(d), flips = 0;
	int round, i;

	for (round = 0; round < 20; round++) {
		for (i = 0; i < 20; i++) {
			snprintf(jti, sizeof(jti), "r%d-%d", round, i);
			assert_int_equal(budget_charge(b, jti, round + 1, 100,
					     &used),
			    0);
		}
		/* Keep "r<round>-*" alive, drop the previous round. */
		budget_prune(b, round + 1 + BUDGET_PRUNE_GRACE);
		snprintf(jti, sizeof(jti), "r%d-7", round);
		assert_int_equal(budget_charge(b, jti, round + 1, 100, &used),
		    0);
		assert_int_equal(used, 2);
		if (round > 0) {
			snprintf(jti, sizeof(jti), "r%d-7", round - 1);
			assert_int_equal(budget_used(b, jti), 0);
			/* 20 tombstones >= 64/8: prune compacted (a flip). */
			assert_int_not_equal(active_table(d), act);
			act = active_table(d);
			flips++;
		}
	}
	assert_int_equal(flips, 19);
	budget_close(b);
	b = open_ok(d, 64);
	assert_int_equal(budget_used(b, "r19-7"), 2);
	assert_int_equal(budget_used(b, "r19-8"), 1);
	budget_close(b);
}

static void
corrupt_at(const char *path, off_t off, const void *bytes, size_t n)
{
	int fd = open(path, O_WRONLY);

	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, bytes, n, off), (ssize_t)n);
	close(fd);
}

static void
expect_refused(const struct dir *d, const char *what)
{
	char why[512];
	struct budget *b = budget_open(d->path, why, sizeof(why));

	if (b != NULL) {
		budget_close(b);
		fail_msg("a %s budget.db was accepted", what);
	}
	assert_non_null(strstr(why, d->db));
}

static void
test_corrupt_refused(void **state)
{
	struct dir *d = *state;
	struct budget *b = open_ok(d, 64);
	uint32_t v = 99;
	uint64_t used;
	struct stat st;

	assert_int_equal(budget_charge(b, "jti-a", 1000, 5, &used), 0);
	budget_close(b);
	assert_int_equal(stat(d->db, &st), 0);

	corrupt_at(d->db, 0, "XXXX", 4); /* magic */
	expect_refused(d, "bad magic");
	corrupt_at(d->db, 0, "SLBU", 4);
	b = open_ok(d, 64);
	assert_int_equal(budget_used(b, "jti-a"), 1);
	budget_close(b);

	corrupt_at(d->db, 8, &v, 4); /* version */
	expect_refused(d, "wrong version");
	v = 1;
	corrupt_at(d->db, 8, &v, 4);

	v = 2;
	corrupt_at(d->db, 20, &v, 4); /* active table index */
	expect_refused(d, "bad active index");
	v = 0;
	corrupt_at(d->db, 20, &v, 4);

	/* Truncated: refused, and left as it was (not reset). */
	assert_int_equal(truncate(d->db, st.st_size - 1), 0);
	expect_refused(d, "truncated");
	assert_int_equal(stat(d->db, &st), 0);
	assert_int_equal(truncate(d->db, st.st_size + 1), 0);
	b = open_ok(d, 64);
	assert_int_equal(budget_used(b, "jti-a"), 1);
	budget_close(b);

	/* An entry with an impossible state anywhere in the table. */
	v = 7;
	corrupt_at(d->db, 64 + 56 * 5 + 48, &v, 4);
	expect_refused(d, "bad entry state");
}

static void
test_foreign_refused(void **state)
{
	struct dir *d = *state;
	struct budget *b = open_ok(d, 64);
	char why[512];
	int fd;

	budget_close(b);
	/* Group/other bits: someone else could grant budget. */
	assert_int_equal(chmod(d->db, 0644), 0);
	expect_refused(d, "world-readable");
	assert_int_equal(chmod(d->db, 0600), 0);
	/* Empty and garbage files are refused, not reset. */
	assert_int_equal(unlink(d->db), 0);
	fd = open(d->db, O_CREAT | O_WRONLY, 0600);
	assert_true(fd >= 0);
	close(fd);
	expect_refused(d, "empty");
	/* A directory in its place. */
	assert_int_equal(unlink(d->db), 0);
	assert_int_equal(mkdir(d->db, 0700), 0);
	assert_null(budget_open(d->path, why, sizeof(why)));
	assert_int_equal(rmdir(d->db), 0);
	/* A bad capacity or a missing directory. */
	assert_null(budget_open_capacity(d->path, 100, why, sizeof(why)));
	assert_null(budget_open("/nonexistent/sluice", why, sizeof(why)));
	/* NULL handles are harmless. */
	budget_close(NULL);
	budget_prune(NULL, 0);
	assert_int_equal(budget_used(NULL, "x"), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_charge_to_limit, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_persist_across_reopen,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_survives_kill9, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_prune, setup, teardown),
		cmocka_unit_test_setup_teardown(test_forks_charge_at_once,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_holder_killed, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_full_table, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_compaction, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_corrupt_refused, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_foreign_refused, setup,
		    teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
