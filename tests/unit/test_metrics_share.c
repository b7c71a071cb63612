/*
 * Metrics shared across forks (metrics_share(), privilege separation):
 * what a forked engine counts shows in the parent's render, per-engine
 * gauges are summed over the slots and cleared per slot when an engine
 * dies, the engine families render, concurrent updates from two processes
 * lose nothing, and the preopened /proc descriptors serve the process
 * metrics. metrics_share() cannot be undone, so these tests live apart
 * from test_metrics.c (which checks the process-local output).
 */
#include <sys/wait.h>

#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/buffer.h>

#include "proxy/proxy.h"

#define BUMPS   100000
#define NLABELS 24 /* two entries each at worst: within 64 */

static char *
render(void)
{
	struct evbuffer *b = evbuffer_new();
	size_t n;
	char *t;

	assert_non_null(b);
	assert_int_equal(metrics_render(b), 0);
	n = evbuffer_get_length(b);
	t = malloc(n + 1);
	assert_non_null(t);
	assert_int_equal(evbuffer_remove(b, t, n), (int)n);
	t[n] = '\0';
	evbuffer_free(b);
	return t;
}

/* The value of the sample whose line starts with series ("name{...}"). */
static double
sample(const char *t, const char *series)
{
	size_t n = strlen(series);
	const char *p = t;

	for (;;) {
		if (strncmp(p, series, n) == 0 && p[n] == ' ')
			return strtod(p + n + 1, NULL);
		if ((p = strchr(p, '\n')) == NULL)
			return -1;
		p++;
	}
}

/* Wait for pid; it must have exited 0. */
static void
reap(pid_t pid)
{
	int st;

	while (waitpid(pid, &st, 0) == -1)
		assert_int_equal(errno, EINTR);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

static int
setup(void **state)
{
	(void)state;
	metrics_reset();
	return 0;
}

/* An engine in slot 1 counts; the parent renders what it counted. */
static void
test_child_counts(void **state)
{
	uint64_t hits, misses, allowed, denied;
	pid_t pid;
	char *t;

	(void)state;
	metrics_conn_active(2); /* the parent's own, slot 0 */
	metrics_reload(1);      /* counted before the fork: kept */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		metrics_engine_slot(1);
		metrics_conn_active(3);
		metrics_pool_idle(4);
		metrics_sandbox_conn("sbx-a", 5);
		metrics_sandbox_request("sbx-a", 1, REASON_OK);
		metrics_token_cache(1);
		metrics_token_cache(1);
		metrics_token_cache(0);
		metrics_request(NULL, 1, REASON_OK, 10, 20, 0.5);
		metrics_upstream_connect(0.25);
		_exit(0);
	}
	reap(pid);
	metrics_sandbox_conn("sbx-a", 1); /* slot 0 */
	assert_int_equal(metrics_conn_active_total(), 5);
	metrics_cache_totals(&hits, &misses);
	assert_int_equal(hits, 2);
	assert_int_equal(misses, 1);
	metrics_totals(&allowed, &denied);
	assert_int_equal(allowed, 1);
	assert_int_equal(denied, 0);
	t = render();
	assert_true(sample(t, "sluice_connections_active") == 5);
	assert_true(sample(t, "sluice_upstream_pool_idle_connections") == 4);
	assert_true(sample(t, "sluice_token_cache_hits_total") == 2);
	assert_true(sample(t, "sluice_token_cache_misses_total") == 1);
	assert_true(
	    sample(t, "sluice_sandbox_connections{sandbox=\"sbx-a\"}") == 6);
	assert_true(sample(t,
			"sluice_sandbox_requests_total{sandbox=\"sbx-a\","
			"decision=\"allow\"}") == 1);
	assert_true(sample(t,
			"sluice_requests_total{route=\"\",decision=\"allow\","
			"reason=\"ok\"}") == 1);
	assert_true(sample(t, "sluice_bytes_in_total{route=\"\"}") == 10);
	assert_true(sample(t, "sluice_bytes_out_total{route=\"\"}") == 20);
	assert_true(sample(t, "sluice_request_duration_seconds_sum") == 0.5);
	assert_true(
	    sample(t, "sluice_request_duration_seconds_bucket{le=\"0.5\"}") ==
	    1);
	assert_true(sample(t, "sluice_upstream_connect_seconds_sum") == 0.25);
	assert_true(sample(t, "sluice_upstream_connect_seconds_count") == 1);
	assert_true(
	    sample(t, "sluice_policy_reloads_total{outcome=\"ok\"}") == 1);
	free(t);

	/* Engine 1 died: only its share of the gauges goes. */
	metrics_engine_slot_clear(1);
	assert_int_equal(metrics_conn_active_total(), 2);
	t = render();
	assert_true(sample(t, "sluice_connections_active") == 2);
	assert_true(sample(t, "sluice_upstream_pool_idle_connections") == 0);
	assert_true(
	    sample(t, "sluice_sandbox_connections{sandbox=\"sbx-a\"}") == 1);
	/* Counters stay. */
	assert_true(sample(t, "sluice_token_cache_hits_total") == 2);
	assert_true(sample(t,
			"sluice_requests_total{route=\"\",decision=\"allow\","
			"reason=\"ok\"}") == 1);
	free(t);
	/* Out of range: nothing happens. */
	metrics_engine_slot_clear(-1);
	metrics_engine_slot_clear(METRICS_ENGINE_SLOTS);
	assert_int_equal(metrics_conn_active_total(), 2);
}

/* The engine families, and the parent's counts seen by an engine. */
static void
test_engine_families(void **state)
{
	int fds[2];
	pid_t pid;
	char *t;
	char c;

	(void)state;
	t = render();
	assert_non_null(strstr(t,
	    "# TYPE sluice_engine_restarts_total "
	    "counter\nsluice_engine_restarts_total 0\n"));
	assert_non_null(strstr(t,
	    "# TYPE sluice_engines gauge\n"
	    "sluice_engines 0\n"));
	free(t);
	metrics_engines_alive(2);
	metrics_engine_restart();
	metrics_engine_restart();
	t = render();
	assert_true(sample(t, "sluice_engine_restarts_total") == 2);
	assert_true(sample(t, "sluice_engines") == 2);
	free(t);

	/* The parent counts after the fork; the engine renders it. */
	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int ok;

		(void)close(fds[1]);
		if (read(fds[0], &c, 1) != 1)
			_exit(2);
		t = render();
		ok = sample(t, "sluice_kernel_drops_total") == 7 &&
		    sample(t, "sluice_kernel_dynamic_set_elements") == 9 &&
		    sample(t,
			"sluice_policy_reloads_total{outcome=\"failed\"}") ==
			1 &&
		    sample(t, "sluice_engine_restarts_total") == 3;
		free(t);
		_exit(ok ? 0 : 1);
	}
	(void)close(fds[0]);
	metrics_net_drop(7);
	metrics_kernel_dynamic(9);
	metrics_reload(0);
	metrics_engine_restart();
	assert_int_equal(write(fds[1], "x", 1), 1);
	(void)close(fds[1]);
	reap(pid);
}

/* Two processes bump the same counters at once: nothing is lost. */
static void
test_concurrent(void **state)
{
	int go[2];
	pid_t pid[2];
	size_t k;
	char *t;

	(void)state;
	assert_int_equal(pipe(go), 0);
	for (k = 0; k < 2; k++) {
		pid[k] = fork();
		assert_true(pid[k] >= 0);
		if (pid[k] == 0) {
			char c;
			int i;

			(void)close(go[1]);
			metrics_engine_slot((int)k + 1);
			/* Start together: both wait for the pipe to close. */
			if (read(go[0], &c, 1) != 0)
				_exit(2);
			for (i = 0; i < BUMPS; i++) {
				metrics_secret_header();
				metrics_upstream_connect(0.5);
				metrics_conn_active(1);
				metrics_sandbox_conn("sbx-c", 1);
			}
			_exit(0);
		}
	}
	(void)close(go[0]);
	(void)close(go[1]);
	reap(pid[0]);
	reap(pid[1]);
	t = render();
	assert_true(sample(t, "sluice_response_secret_headers_dropped_total") ==
	    2 * BUMPS);
	assert_true(
	    sample(t, "sluice_upstream_connect_seconds_count") == 2 * BUMPS);
	assert_true(
	    sample(t, "sluice_upstream_connect_seconds_bucket{le=\"0.5\"}") ==
	    2 * BUMPS);
	/* 0.5 is exact in binary: the sum is exact too (%.9g). */
	assert_true(sample(t, "sluice_upstream_connect_seconds_sum") == BUMPS);
	assert_true(sample(t, "sluice_connections_active") == 2 * BUMPS);
	assert_true(
	    sample(t, "sluice_sandbox_connections{sandbox=\"sbx-c\"}") ==
	    2 * BUMPS);
	free(t);
	metrics_engine_slot_clear(2);
	assert_int_equal(metrics_conn_active_total(), BUMPS);
}

/*
 * Two processes register the same new routes and sandboxes at once: a
 * name may take two entries, but it renders as one series holding both
 * processes' counts.
 */
static void
test_concurrent_labels(void **state)
{
	struct route rt[NLABELS];
	struct config cf;
	char names[NLABELS][16], want[512];
	const char *p;
	int go[2];
	pid_t pid[2];
	size_t k, i, n;
	char *t;

	(void)state;
	memset(&cf, 0, sizeof(cf));
	memset(rt, 0, sizeof(rt));
	for (i = 0; i < NLABELS; i++) {
		(void)snprintf(names[i], sizeof(names[i]), "n%zu", i);
		rt[i].rt_audience = names[i];
	}
	cf.cf_routes = rt;
	cf.cf_nroutes = NLABELS;
	assert_int_equal(pipe(go), 0);
	for (k = 0; k < 2; k++) {
		pid[k] = fork();
		assert_true(pid[k] >= 0);
		if (pid[k] == 0) {
			char c;

			(void)close(go[1]);
			metrics_engine_slot((int)k + 1);
			if (read(go[0], &c, 1) != 0)
				_exit(2);
			metrics_configure(&cf);
			for (i = 0; i < NLABELS; i++) {
				metrics_sandbox_conn(names[i], 1);
				metrics_sandbox_request(names[i], 1, REASON_OK);
				metrics_request(names[i], 1, REASON_OK, 1, 2,
				    0.5);
				metrics_upstream_response(names[i], 0.5);
			}
			_exit(0);
		}
	}
	(void)close(go[0]);
	(void)close(go[1]);
	reap(pid[0]);
	reap(pid[1]);
	t = render();
	for (i = 0; i < NLABELS; i++) {
		(void)snprintf(want, sizeof(want),
		    "sluice_sandbox_connections{sandbox=\"%s\"}", names[i]);
		assert_true(sample(t, want) == 2);
		for (p = t, n = 0; (p = strstr(p, want)) != NULL; p++)
			n++;
		assert_int_equal(n, 1);
		(void)snprintf(want, sizeof(want),
		    "sluice_sandbox_requests_total{sandbox=\"%s\","
		    "decision=\"allow\"}",
		    names[i]);
		assert_true(sample(t, want) == 2);
		(void)snprintf(want, sizeof(want),
		    "sluice_bytes_in_total{route=\"%s\"}", names[i]);
		assert_true(sample(t, want) == 2);
		for (p = t, n = 0; (p = strstr(p, want)) != NULL; p++)
			n++;
		assert_int_equal(n, 1);
		(void)snprintf(want, sizeof(want),
		    "sluice_requests_total{route=\"%s\",decision=\"allow\","
		    "reason=\"ok\"}",
		    names[i]);
		assert_true(sample(t, want) == 2);
		(void)snprintf(want, sizeof(want),
		    "sluice_upstream_response_seconds_count{route=\"%s\"}",
		    names[i]);
		assert_true(sample(t, want) == 2);
		(void)snprintf(want, sizeof(want),
		    "sluice_upstream_response_seconds_sum{route=\"%s\"}",
		    names[i]);
		assert_true(sample(t, want) == 1);
	}
	/* Nothing fell to route="". */
	assert_true(sample(t, "sluice_bytes_in_total{route=\"\"}") == -1);
	free(t);
}

/* After metrics_preopen(), the process metrics need no open(). */
static void
test_preopen(void **state)
{
	double fds0, fds1, fds2;
	pid_t pid;
	char *t;

	(void)state;
	t = render();
	fds0 = sample(t, "process_open_fds");
	free(t);
	metrics_preopen();
	metrics_preopen(); /* again: the first two are closed */
	t = render();
	fds1 = sample(t, "process_open_fds");
	assert_true(sample(t, "process_resident_memory_bytes") > 100000);
	free(t);
	/* The two kept descriptors are open descriptors of the process. */
	assert_true(fds1 == fds0 + 2);
	t = render();
	fds2 = sample(t, "process_open_fds");
	assert_true(sample(t, "process_resident_memory_bytes") > 100000);
	free(t);
	assert_true(fds2 == fds1); /* read again from the start */

	/*
	 * In a forked engine: preopened there, its own descriptors count
	 * (one more opened after, one less closed).
	 */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int fd, ok;

		metrics_preopen();
		if ((fd = dup(2)) == -1)
			_exit(2);
		t = render();
		ok = sample(t, "process_open_fds") == fds1 + 1 &&
		    sample(t, "process_resident_memory_bytes") > 100000;
		free(t);
		_exit(ok ? 0 : 1);
	}
	reap(pid);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_child_counts, setup),
		cmocka_unit_test_setup(test_engine_families, setup),
		cmocka_unit_test_setup(test_concurrent, setup),
		cmocka_unit_test_setup(test_concurrent_labels, setup),
		cmocka_unit_test_setup(test_preopen, setup),
	};

	if (metrics_share() != 0) {
		fprintf(stderr, "metrics_share failed\n");
		return 1;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
