/*
 * Prometheus metrics (proxy/metrics.c): the rendered text is parsed back
 * with a small exposition-format reader written here (HELP/TYPE before the
 * samples, label syntax and escapes, numeric values, histogram buckets
 * cumulative with +Inf equal to _count), then checked for the values that
 * were counted. The listener is exercised on a unix socket in a temporary
 * directory: GET /metrics, 404 and 405.
 */
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/buffer.h>
#include <event2/event.h>

#include "proxy/proxy.h"

#define MAX_SAMPLES 2048
#define MAX_LABELS  4

struct sample {
	char name[96];
	char lk[MAX_LABELS][32];
	char lv[MAX_LABELS][256];
	size_t nl;
	double v;
};

struct family {
	char name[96];
	char type[16];
	int help;
};

struct scrape {
	struct sample s[MAX_SAMPLES];
	size_t ns;
	struct family f[64];
	size_t nf;
};

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
	evbuffer_remove(b, t, n);
	t[n] = '\0';
	evbuffer_free(b);
	return t;
}

static struct family *
find_family(struct scrape *sc, const char *name)
{
	size_t i;

	for (i = 0; i < sc->nf; i++)
		if (strcmp(sc->f[i].name, name) == 0)
			return &sc->f[i];
	return NULL;
}

static int
is_name_char(char c, int first)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
	    c == ':' || (!first && c >= '0' && c <= '9');
}

/* The family a sample belongs to (histogram suffixes stripped). */
static struct family *
family_of(struct scrape *sc, const char *name)
{
	static const char *const suffix[] = { "_bucket", "_sum", "_count" };
	char base[96];
	struct family *f;
	size_t i, n = strlen(name), k;

	if ((f = find_family(sc, name)) != NULL)
		return f;
	for (i = 0; i < SL_NELEM(suffix); i++) {
		k = strlen(suffix[i]);
		if (n > k && strcmp(name + n - k, suffix[i]) == 0) {
			snprintf(base, sizeof(base), "%.*s", (int)(n - k),
			    name);
			f = find_family(sc, base);
			if (f != NULL && strcmp(f->type, "histogram") == 0)
				return f;
		}
	}
	return NULL;
}

/* Parse one sample line; fails the test on any syntax error. */
static void
parse_sample(struct scrape *sc, const char *line)
{
	struct sample *s = &sc->s[sc->ns];
	const char *p = line;
	size_t n = 0, o;
	char *end;

	assert_true(sc->ns < MAX_SAMPLES);
	memset(s, 0, sizeof(*s));
	while (is_name_char(*p, n == 0)) {
		assert_true(n < sizeof(s->name) - 1);
		s->name[n++] = *p++;
	}
	if (n == 0)
		fail_msg("bad sample line: %s", line);
	if (*p == '{') {
		p++;
		while (*p != '}') {
			assert_true(s->nl < MAX_LABELS);
			n = 0;
			while (is_name_char(*p, n == 0))
				s->lk[s->nl][n++] = *p++;
			if (n == 0 || p[0] != '=' || p[1] != '"')
				fail_msg("bad label in: %s", line);
			p += 2;
			o = 0;
			while (*p != '"') {
				if (*p == '\0' || *p == '\n')
					fail_msg("open label in: %s", line);
				if (*p == '\\') {
					p++;
					if (*p == 'n')
						s->lv[s->nl][o++] = '\n';
					else if (*p == '\\' || *p == '"')
						s->lv[s->nl][o++] = *p;
					else
						fail_msg("bad escape in: %s",
						    line);
					p++;
					continue;
				}
				s->lv[s->nl][o++] = *p++;
				assert_true(o < sizeof(s->lv[0]) - 1);
			}
			p++;
			s->nl++;
			if (*p == ',')
				p++;
			else if (*p != '}')
				fail_msg("bad label list in: %s", line);
		}
		p++;
	}
	if (*p != ' ')
		fail_msg("no value in: %s", line);
	p++;
	if (strcmp(p, "+Inf") == 0)
		s->v = INFINITY;
	else {
		errno = 0;
		s->v = strtod(p, &end);
		if (errno != 0 || end == p || *end != '\0')
			fail_msg("bad value in: %s", line);
	}
	if (family_of(sc, s->name) == NULL)
		fail_msg("sample before its # TYPE: %s", line);
	sc->ns++;
}

static void
parse_text(struct scrape *sc, char *text)
{
	char *line, *save = NULL;
	struct family *f;

	memset(sc, 0, sizeof(*sc));
	/* The format ends every line, the last included, with a newline. */
	assert_true(strlen(text) > 0 && text[strlen(text) - 1] == '\n');
	for (line = strtok_r(text, "\n", &save); line != NULL;
	     line = strtok_r(NULL, "\n", &save)) {
		char name[96], rest[256];

		if (strncmp(line, "# HELP ", 7) == 0) {
			assert_int_equal(sscanf(line + 7, "%95s %255[^\n]",
					     name, rest),
			    2);
			assert_null(find_family(sc, name));
			assert_true(sc->nf < SL_NELEM(sc->f));
			f = &sc->f[sc->nf++];
			snprintf(f->name, sizeof(f->name), "%s", name);
			f->help = 1;
		} else if (strncmp(line, "# TYPE ", 7) == 0) {
			char type[16];

			assert_int_equal(sscanf(line + 7, "%95s %15s", name,
					     type),
			    2);
			f = find_family(sc, name);
			if (f == NULL)
				fail_msg("TYPE without HELP: %s", line);
			assert_string_equal(f->type, "");
			assert_true(strcmp(type, "counter") == 0 ||
			    strcmp(type, "gauge") == 0 ||
			    strcmp(type, "histogram") == 0);
			snprintf(f->type, sizeof(f->type), "%s", type);
		} else if (line[0] == '#')
			fail_msg("unexpected comment: %s", line);
		else
			parse_sample(sc, line);
	}
}

static const char *
label(const struct sample *s, const char *k)
{
	size_t i;

	for (i = 0; i < s->nl; i++)
		if (strcmp(s->lk[i], k) == 0)
			return s->lv[i];
	return NULL;
}

/* The value of name{kind="kind"}; -1 if none. */
static double
value_kind(const struct scrape *sc, const char *name, const char *kind)
{
	size_t i;

	for (i = 0; i < sc->ns; i++)
		if (strcmp(sc->s[i].name, name) == 0 &&
		    label(&sc->s[i], "kind") != NULL &&
		    strcmp(label(&sc->s[i], "kind"), kind) == 0)
			return sc->s[i].v;
	return -1;
}

/* The value of the one sample with these labels (NULL: any); -1 if none. */
static double
value(const struct scrape *sc, const char *name, const char *route,
    const char *decision, const char *reason)
{
	double v = -1;
	size_t i;
	int found = 0;

	for (i = 0; i < sc->ns; i++) {
		const struct sample *s = &sc->s[i];

		if (strcmp(s->name, name) != 0 ||
		    (route != NULL &&
			(label(s, "route") == NULL ||
			    strcmp(label(s, "route"), route))) ||
		    (decision != NULL &&
			strcmp(label(s, "decision"), decision) != 0) ||
		    (reason != NULL && strcmp(label(s, "reason"), reason) != 0))
			continue;
		if (found++)
			fail_msg("two samples match %s", name);
		v = s->v;
	}
	return v;
}

/*
 * Buckets: le strictly increasing and ending with +Inf, counts
 * non-decreasing, +Inf == _count; _sum present.
 */
static void
check_histogram(const struct scrape *sc, const char *name, double count,
    double sum)
{
	char bname[128], cname[128], sname[128];
	double last_le = -INFINITY, last_v = 0;
	size_t i, nb = 0;

	snprintf(bname, sizeof(bname), "%s_bucket", name);
	snprintf(cname, sizeof(cname), "%s_count", name);
	snprintf(sname, sizeof(sname), "%s_sum", name);
	for (i = 0; i < sc->ns; i++) {
		const struct sample *s = &sc->s[i];
		const char *le;
		double b;

		if (strcmp(s->name, bname) != 0)
			continue;
		le = label(s, "le");
		assert_non_null(le);
		if (le == NULL)
			return;
		b = strcmp(le, "+Inf") == 0 ? INFINITY : strtod(le, NULL);
		assert_true(b > last_le);
		assert_true(s->v >= last_v);
		last_le = b;
		last_v = s->v;
		nb++;
	}
	assert_true(nb >= 2);
	assert_true(isinf(last_le));
	assert_true(last_v == value(sc, cname, NULL, NULL, NULL));
	assert_true(last_v == count);
	assert_true(fabs(value(sc, sname, NULL, NULL, NULL) - sum) < 1e-6);
}

/* The cumulative count of bucket le of a histogram. */
static double
bucket(const struct scrape *sc, const char *name, const char *le)
{
	char bname[128];
	size_t i;

	snprintf(bname, sizeof(bname), "%s_bucket", name);
	for (i = 0; i < sc->ns; i++)
		if (strcmp(sc->s[i].name, bname) == 0 &&
		    strcmp(label(&sc->s[i], "le"), le) == 0)
			return sc->s[i].v;
	fail_msg("no bucket %s le=%s", name, le);
	return -1;
}

static struct config *
make_config(const char *const *auds, size_t n)
{
	struct config *cf = calloc(1, sizeof(*cf));
	size_t i;

	assert_non_null(cf);
	cf->cf_routes = calloc(n, sizeof(*cf->cf_routes));
	assert_non_null(cf->cf_routes);
	cf->cf_nroutes = n;
	for (i = 0; i < n; i++) {
		cf->cf_routes[i].rt_audience = strdup(auds[i]);
		assert_non_null(cf->cf_routes[i].rt_audience);
	}
	return cf;
}

static void
free_config(struct config *cf)
{
	size_t i;

	for (i = 0; i < cf->cf_nroutes; i++)
		free(cf->cf_routes[i].rt_audience);
	free(cf->cf_routes);
	free(cf);
}

static int
setup(void **state)
{
	(void)state;
	metrics_reset();
	return 0;
}

static void
test_render_empty(void **state)
{
	static const char *const families[] = { "sluice_build_info",
		"sluice_requests_total", "sluice_tunnels_total",
		"sluice_bytes_in_total", "sluice_bytes_out_total",
		"sluice_request_duration_seconds",
		"sluice_tunnel_duration_seconds",
		"sluice_upstream_connect_seconds",
		"sluice_upstream_tls_handshake_seconds",
		"sluice_connections_active",
		"sluice_upstream_pool_idle_connections",
		"sluice_token_cache_hits_total",
		"sluice_token_cache_misses_total",
		"sluice_audit_write_errors_total", "sluice_audit_failed",
		"sluice_kernel_drops_total",
		"sluice_kernel_drop_rule_packets_total",
		"sluice_kernel_drop_rule_bytes_total",
		"sluice_kernel_dynamic_set_elements",
		"sluice_policy_reloads_total", "process_open_fds",
		"process_max_fds", "process_resident_memory_bytes",
		"process_start_time_seconds",
		"sluice_policy_last_load_timestamp_seconds",
		"sluice_budget_entries", "sluice_budget_entries_limit",
		"sluice_upstream_errors_total",
		"sluice_response_secret_headers_dropped_total",
		"sluice_tunnels_spliced_total",
		"sluice_upstream_response_seconds" };
	struct scrape *sc = malloc(sizeof(*sc));
	char *t = render();
	size_t i;

	(void)state;
	assert_non_null(sc);
	parse_text(sc, t);
	for (i = 0; i < SL_NELEM(families); i++) {
		struct family *f = find_family(sc, families[i]);

		if (f == NULL) {
			fail_msg("no family %s", families[i]);
			return;
		}
		assert_true(f->help);
		assert_string_not_equal(f->type, "");
	}
	assert_int_equal(sc->nf, SL_NELEM(families));
	assert_true(value(sc, "sluice_build_info", NULL, NULL, NULL) == 1);
	assert_string_equal(label(&sc->s[0], "version"), SLUICE_VERSION);
	check_histogram(sc, "sluice_request_duration_seconds", 0, 0);
	/* No request yet: no request series at all. */
	assert_true(value(sc, "sluice_requests_total", NULL, NULL, NULL) == -1);
	assert_true(
	    value(sc, "sluice_tunnels_spliced_total", NULL, NULL, NULL) == 0);
	/* The process: stdin/out/err at least, some memory, started now. */
	assert_true(value(sc, "process_open_fds", NULL, NULL, NULL) >= 3);
	assert_true(value(sc, "process_max_fds", NULL, NULL, NULL) >=
	    value(sc, "process_open_fds", NULL, NULL, NULL));
	assert_true(value(sc, "process_resident_memory_bytes", NULL, NULL,
			NULL) > 100000);
	assert_true(
	    fabs(value(sc, "process_start_time_seconds", NULL, NULL, NULL) -
		(double)time(NULL)) < 60);
	/* No policy loaded yet, no budget table: zeros, not absent. */
	assert_true(value(sc, "sluice_policy_last_load_timestamp_seconds", NULL,
			NULL, NULL) == 0);
	assert_true(value(sc, "sluice_budget_entries", NULL, NULL, NULL) == 0);
	/* Every kind of upstream error is a series from the start. */
	assert_true(value_kind(sc, "sluice_upstream_errors_total", "dns") == 0);
	assert_true(value_kind(sc, "sluice_upstream_errors_total", "pin") == 0);
	free(t);
	free(sc);
}

/*
 * Upstream failures: "error", not "deny", so that the deny share means
 * policy refusals; counted by kind; the budget table's fill; the time the
 * policy in force was loaded.
 */
static void
test_errors_budget_policy_time(void **state)
{
	static const char *const auds[] = { "model-proxy" };
	struct config *cf = make_config(auds, 1);
	struct scrape *sc = malloc(sizeof(*sc));
	char dir[] = "/tmp/sluice-metrics-XXXXXX", why[256], path[64];
	struct budget *b;
	uint64_t used;
	char *t;
	time_t before = time(NULL);

	(void)state;
	assert_non_null(sc);
	metrics_configure(cf);
	metrics_request("model-proxy", 1, REASON_UPSTREAM_TIMEOUT, 5, 0, 1.0);
	metrics_request("model-proxy", 0, REASON_UPSTREAM_UNREACHABLE, 5, 0,
	    0.1);
	metrics_request("model-proxy", 0, REASON_PATH_NOT_ALLOWED, 5, 0, 0.0);
	metrics_tunnel_spliced();
	metrics_tunnel_spliced();
	metrics_tunnel("model-proxy", 1, REASON_UPSTREAM_TLS_ERROR, 0, 0, 0.5);
	metrics_upstream_response("model-proxy", 0.02);
	metrics_upstream_response("model-proxy", 0.4);
	metrics_upstream_response("evil.example", 0.001); /* route="" */
	metrics_upstream_error(METRICS_UPERR_DNS);
	metrics_upstream_error(METRICS_UPERR_TLS_VERIFY);
	metrics_upstream_error(METRICS_UPERR_TLS_VERIFY);
	metrics_upstream_error((enum metrics_uperr)99); /* ignored */
	assert_non_null(mkdtemp(dir));
	b = budget_open_capacity(dir, 64, why, sizeof(why));
	assert_non_null(b);
	assert_int_equal(budget_charge(b, "j1", before + 600, 5, &used), 0);
	assert_int_equal(budget_charge(b, "j2", before + 600, 5, &used), 0);
	assert_int_equal(budget_charge(b, "j2", before + 600, 5, &used), 0);
	metrics_budget(b);
	t = render();
	parse_text(sc, t);
	assert_true(value(sc, "sluice_requests_total", "model-proxy", "error",
			"upstream_timeout") == 1);
	assert_true(value(sc, "sluice_requests_total", "model-proxy", "error",
			"upstream_unreachable") == 1);
	assert_true(value(sc, "sluice_requests_total", "model-proxy", "deny",
			"path_not_allowed") == 1);
	assert_true(value(sc, "sluice_requests_total", "model-proxy", "deny",
			"upstream_unreachable") == -1);
	assert_true(value(sc, "sluice_tunnels_total", "model-proxy", "error",
			"upstream_tls_error") == 1);
	assert_true(value_kind(sc, "sluice_upstream_errors_total", "dns") == 1);
	assert_true(
	    value_kind(sc, "sluice_upstream_errors_total", "tls_verify") == 2);
	assert_true(
	    value_kind(sc, "sluice_upstream_errors_total", "connect") == 0);
	assert_true(value(sc, "sluice_budget_entries", NULL, NULL, NULL) == 2);
	assert_true(
	    value(sc, "sluice_tunnels_spliced_total", NULL, NULL, NULL) == 2);
	assert_true(value(sc, "sluice_upstream_response_seconds_count",
			"model-proxy", NULL, NULL) == 2);
	assert_true(value(sc, "sluice_upstream_response_seconds_count", "",
			NULL, NULL) == 1);
	assert_true(fabs(value(sc, "sluice_upstream_response_seconds_sum",
			     "model-proxy", NULL, NULL) -
			0.42) < 1e-9);
	assert_true(
	    value(sc, "sluice_budget_entries_limit", NULL, NULL, NULL) == 48);
	assert_true(value(sc, "sluice_policy_last_load_timestamp_seconds", NULL,
			NULL, NULL) >= (double)before);
	free(t);
	metrics_budget(NULL);
	budget_close(b);
	snprintf(path, sizeof(path), "%s/budget.db", dir);
	unlink(path);
	rmdir(dir);
	free(sc);
	free_config(cf);
}

static void
test_counts(void **state)
{
	static const char *const auds[] = { "model-proxy", "odd\"rou\\te\n" };
	struct config *cf = make_config(auds, 2);
	struct scrape *sc = malloc(sizeof(*sc));
	char *t;
	int i;

	(void)state;
	assert_non_null(sc);
	metrics_configure(cf);
	metrics_configure(cf); /* a reload with the same routes */
	for (i = 0; i < 3; i++)
		metrics_request("model-proxy", 1, REASON_OK, 100, 1000, 0.2);
	metrics_request("model-proxy", 0, REASON_TOKEN_EXPIRED, 10, 50, 0.001);
	metrics_request("model-proxy", 0, REASON_TOKEN_EXPIRED, 10, 50, 0.001);
	/* Names the sandbox chose, and no route: all under route="". */
	metrics_request("evil.example", 0, REASON_ROUTE_NOT_FOUND, 5, 5, 0.0);
	metrics_request(NULL, 0, REASON_ROUTE_NOT_FOUND, 5, 5, 0.0);
	metrics_request("odd\"rou\\te\n", 1, REASON_OK, 1, 1, 1000.0);
	/* Bad inputs are clamped, never corrupt the sums. */
	metrics_request("model-proxy", 0, REASON_BAD_REQUEST, 0, 0, -5.0);
	metrics_request("model-proxy", 0, REASON_BAD_REQUEST, 0, 0, NAN);
	metrics_request("model-proxy", 0, (enum reason)1000, 0, 0, 0.0);
	metrics_tunnel("model-proxy", 1, REASON_OK, 7, 9, 12.0);
	/* enforce "report": its own decision label, the would-be reason. */
	metrics_tunnel(NULL, METRICS_REPORT, REASON_ROUTE_NOT_FOUND, 0, 0, 0.5);
	metrics_upstream_connect(0.003);
	metrics_upstream_connect(0.2);
	metrics_tls_handshake(0.02);
	metrics_conn_active(1);
	metrics_conn_active(1);
	metrics_conn_active(-1);
	metrics_pool_idle(2);
	metrics_token_cache(1);
	metrics_token_cache(1);
	metrics_token_cache(0);
	metrics_audit_error();
	metrics_net_drop(3);
	metrics_net_drop(4);
	metrics_kernel_rule_drops(42, 4200);
	metrics_reload(1);
	metrics_reload(0);
	metrics_reload(0);
	t = render();
	parse_text(sc, t);

	assert_true(value(sc, "sluice_requests_total", "model-proxy", "allow",
			"ok") == 3);
	assert_true(value(sc, "sluice_requests_total", "model-proxy", "deny",
			"token_expired") == 2);
	assert_true(value(sc, "sluice_requests_total", "", "deny",
			"route_not_found") == 2);
	assert_true(value(sc, "sluice_tunnels_total", "", "report",
			"route_not_found") == 1);
	assert_true(value(sc, "sluice_requests_total", "odd\"rou\\te\n",
			"allow", "ok") == 1);
	assert_true(value(sc, "sluice_requests_total", "model-proxy", "deny",
			"bad_request") == 2);
	assert_true(value(sc, "sluice_tunnels_total", "model-proxy", "allow",
			"ok") == 1);
	assert_true(value(sc, "sluice_bytes_in_total", "model-proxy", NULL,
			NULL) == 300 + 20 + 7);
	assert_true(value(sc, "sluice_bytes_out_total", "model-proxy", NULL,
			NULL) == 3000 + 100 + 9);
	assert_true(value(sc, "sluice_bytes_in_total", "", NULL, NULL) == 10);
	/* 3 + 2 + 2 + 1 + 3 (two clamped, one unknown reason) requests. */
	check_histogram(sc, "sluice_request_duration_seconds", 11,
	    3 * 0.2 + 2 * 0.001 + 1000.0);
	assert_true(bucket(sc, "sluice_request_duration_seconds", "0.005") ==
	    2 + 2 + 3);
	assert_true(bucket(sc, "sluice_request_duration_seconds", "300") == 10);
	check_histogram(sc, "sluice_tunnel_duration_seconds", 2, 12.5);
	check_histogram(sc, "sluice_upstream_connect_seconds", 2, 0.203);
	assert_true(
	    bucket(sc, "sluice_upstream_connect_seconds", "0.0025") == 0);
	assert_true(
	    bucket(sc, "sluice_upstream_connect_seconds", "0.005") == 1);
	check_histogram(sc, "sluice_upstream_tls_handshake_seconds", 1, 0.02);
	assert_true(
	    value(sc, "sluice_connections_active", NULL, NULL, NULL) == 1);
	assert_true(value(sc, "sluice_upstream_pool_idle_connections", NULL,
			NULL, NULL) == 2);
	assert_true(
	    value(sc, "sluice_token_cache_hits_total", NULL, NULL, NULL) == 2);
	assert_true(value(sc, "sluice_token_cache_misses_total", NULL, NULL,
			NULL) == 1);
	assert_true(value(sc, "sluice_audit_write_errors_total", NULL, NULL,
			NULL) == 1);
	assert_true(
	    value(sc, "sluice_kernel_drops_total", NULL, NULL, NULL) == 7);
	assert_true(value(sc, "sluice_kernel_drop_rule_packets_total", NULL,
			NULL, NULL) == 42);
	free(t);

	/* Counters only grow between scrapes. */
	metrics_request("model-proxy", 1, REASON_OK, 1, 1, 0.1);
	t = render();
	parse_text(sc, t);
	assert_true(value(sc, "sluice_requests_total", "model-proxy", "allow",
			"ok") == 4);
	free(t);
	free(sc);
	free_config(cf);
}

static void
test_reload_outcome(void **state)
{
	struct scrape *sc = malloc(sizeof(*sc));
	char *t;
	size_t i;
	double ok = -1, failed = -1;

	(void)state;
	assert_non_null(sc);
	metrics_reload(1);
	metrics_reload(0);
	metrics_reload(0);
	t = render();
	parse_text(sc, t);
	for (i = 0; i < sc->ns; i++) {
		if (strcmp(sc->s[i].name, "sluice_policy_reloads_total") != 0)
			continue;
		if (strcmp(label(&sc->s[i], "outcome"), "ok") == 0)
			ok = sc->s[i].v;
		else if (strcmp(label(&sc->s[i], "outcome"), "failed") == 0)
			failed = sc->s[i].v;
	}
	assert_true(ok == 1);
	assert_true(failed == 2);
	free(t);
	free(sc);
}

/* More routes than METRICS_MAX_ROUTES: the rest share route="". */
static void
test_route_cap(void **state)
{
	const char *auds[METRICS_MAX_ROUTES + 6];
	char names[METRICS_MAX_ROUTES + 6][16];
	struct scrape *sc = malloc(sizeof(*sc));
	struct config *cf;
	size_t i, nroutes = 0;
	char *t;

	(void)state;
	assert_non_null(sc);
	for (i = 0; i < SL_NELEM(auds); i++) {
		snprintf(names[i], sizeof(names[i]), "r%zu", i);
		auds[i] = names[i];
	}
	cf = make_config(auds, SL_NELEM(auds));
	metrics_configure(cf);
	for (i = 0; i < SL_NELEM(auds); i++)
		metrics_request(auds[i], 1, REASON_OK, 1, 1, 0.1);
	t = render();
	parse_text(sc, t);
	for (i = 0; i < sc->ns; i++)
		if (strcmp(sc->s[i].name, "sluice_requests_total") == 0)
			nroutes++;
	assert_int_equal(nroutes, METRICS_MAX_ROUTES + 1);
	assert_true(
	    value(sc, "sluice_requests_total", "r0", "allow", "ok") == 1);
	assert_true(value(sc, "sluice_requests_total", "", "allow", "ok") == 6);
	free(t);
	free(sc);
	free_config(cf);
}

/* Gateway: per-sandbox families, the first 64 ids labelled, then other. */
static void
test_sandbox_cap(void **state)
{
	char id[32], want[128], *t, *p;
	size_t i, n = 0;

	(void)state;
	t = render();
	assert_null(strstr(t, "sluice_sandbox_requests_total"));
	free(t);
	for (i = 0; i < METRICS_MAX_SANDBOXES + 6; i++) {
		snprintf(id, sizeof(id), "s%zu", i);
		metrics_sandbox_request(id, 1, REASON_OK);
		metrics_sandbox_conn(id, 1);
	}
	metrics_sandbox_request("s0", 0, REASON_RATE_LIMITED);
	metrics_sandbox_request("s1", 0, REASON_UPSTREAM_TIMEOUT);
	metrics_sandbox_request(NULL, 0, REASON_SANDBOX_UNKNOWN);
	metrics_sandbox_conn("s3", -1);
	t = render();
	for (p = t; (p = strstr(p, "\nsluice_sandbox_connections{")) != NULL;
	     p++)
		n++;
	assert_int_equal(n, METRICS_MAX_SANDBOXES + 1);
	assert_non_null(strstr(t,
	    "sluice_sandbox_requests_total{sandbox=\"other\",decision="
	    "\"allow\"} 6\n"));
	assert_non_null(strstr(t,
	    "sluice_sandbox_requests_total{sandbox=\"other\",decision="
	    "\"deny\"} 1\n"));
	assert_non_null(strstr(t,
	    "sluice_sandbox_requests_total{sandbox=\"s0\",decision="
	    "\"deny\"} 1\n"));
	assert_non_null(strstr(t,
	    "sluice_sandbox_requests_total{sandbox=\"s1\",decision="
	    "\"error\"} 1\n"));
	assert_non_null(
	    strstr(t, "sluice_sandbox_connections{sandbox=\"s3\"} 0\n"));
	snprintf(want, sizeof(want),
	    "sluice_sandbox_connections{sandbox=\"other\"} 6\n");
	assert_non_null(strstr(t, want));
	snprintf(want, sizeof(want), "{sandbox=\"s%d\"", METRICS_MAX_SANDBOXES);
	assert_null(strstr(t, want));
	free(t);
}

/* One HTTP exchange with the listener, driving its loop meanwhile. */
static char *
http_exchange(struct event_base *base, const char *path, const char *req)
{
	struct sockaddr_un sun;
	struct timespec start, now;
	char *resp = malloc(65536);
	size_t len = 0;
	ssize_t n;
	int fd;

	assert_non_null(resp);
	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sun, sizeof(sun)), 0);
	assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
	assert_int_equal(fcntl(fd, F_SETFL, O_NONBLOCK), 0);
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		event_base_loop(base, EVLOOP_NONBLOCK);
		n = read(fd, resp + len, 65535 - len);
		if (n == 0)
			break;
		if (n > 0) {
			len += (size_t)n;
			assert_true(len < 65535);
			continue;
		}
		assert_true(errno == EAGAIN);
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - start.tv_sec > 5)
			fail_msg("no answer from the metrics listener");
		usleep(1000);
	}
	close(fd);
	resp[len] = '\0';
	return resp;
}

static void
test_listener(void **state)
{
	struct event_base *base = event_base_new();
	char dir[] = "/tmp/sluice-test-metrics-XXXXXX";
	char path[96], listen[160], why[256] = "", *r;
	struct stat st;

	(void)state;
	assert_non_null(base);
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/metrics.sock", dir);
	snprintf(listen, sizeof(listen), "unix:%s", path);
	/* A stale socket from an earlier run is replaced. */
	assert_int_equal(metrics_listen(base, listen, (gid_t)-1, why,
			     sizeof(why)),
	    0);
	metrics_close();
	assert_int_equal(lstat(path, &st), -1);
	{
		struct sockaddr_un sun;
		int fd = socket(AF_UNIX, SOCK_STREAM, 0);

		memset(&sun, 0, sizeof(sun));
		sun.sun_family = AF_UNIX;
		assert_true(strlen(path) < sizeof(sun.sun_path));
		memcpy(sun.sun_path, path, strlen(path) + 1);
		assert_int_equal(bind(fd, (struct sockaddr *)&sun, sizeof(sun)),
		    0);
		close(fd);
	}
	assert_int_equal(metrics_listen(base, listen, (gid_t)-1, why,
			     sizeof(why)),
	    0);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	metrics_request(NULL, 0, REASON_TOKEN_MISSING, 1, 1, 0.01);

	r = http_exchange(base, path, "GET /metrics HTTP/1.0\r\n\r\n");
	assert_true(strncmp(r, "HTTP/1.0 200", 12) == 0 ||
	    strncmp(r, "HTTP/1.1 200", 12) == 0);
	assert_non_null(strstr(r, "text/plain; version=0.0.4"));
	assert_non_null(strstr(r, "\r\n\r\n# HELP sluice_build_info "));
	assert_non_null(strstr(r, "reason=\"token_missing\"} 1\n"));
	free(r);
	r = http_exchange(base, path, "GET /metrics?x=1 HTTP/1.0\r\n\r\n");
	assert_non_null(strstr(r, " 200 "));
	free(r);
	r = http_exchange(base, path, "GET / HTTP/1.0\r\n\r\n");
	assert_non_null(strstr(r, " 404 "));
	assert_null(strstr(r, "sluice_"));
	free(r);
	r = http_exchange(base, path, "GET /metricsx HTTP/1.0\r\n\r\n");
	assert_non_null(strstr(r, " 404 "));
	free(r);
	r = http_exchange(base, path,
	    "POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n");
	assert_non_null(strstr(r, " 405 "));
	assert_null(strstr(r, "sluice_"));
	free(r);
	r = http_exchange(base, path, "DELETE /metrics HTTP/1.0\r\n\r\n");
	assert_non_null(strstr(r, " 405 "));
	free(r);

	metrics_close();
	assert_int_equal(lstat(path, &st), -1);
	/* A file that is not a socket is never removed. */
	{
		int fd = open(path, O_WRONLY | O_CREAT, 0600);

		assert_true(fd >= 0);
		close(fd);
	}
	assert_int_equal(metrics_listen(base, listen, (gid_t)-1, why,
			     sizeof(why)),
	    -1);
	assert_non_null(strstr(why, "not a socket"));
	assert_int_equal(stat(path, &st), 0);
	unlink(path);
	rmdir(dir);
	event_base_free(base);
}

/* A connected client socket, for idle connections. */
static int
unix_connect(const char *path)
{
	struct sockaddr_un sun;
	int fd;

	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sun, sizeof(sun)), 0);
	return fd;
}

/*
 * The listener parses strictly (sluice's own parser, not evhttp's lenient
 * one), answers one request per connection and holds at most 16
 * connections: each refusal closes (http_exchange reads to EOF).
 */
/* metrics.group: the unix socket is 0660 and that group's. */
static void
test_listener_group(void **state)
{
	struct event_base *base = event_base_new();
	char dir[] = "/tmp/sluice-test-metrics-XXXXXX";
	char path[96], listen[160], why[256] = "";
	struct stat st;
	gid_t g = getegid();

	(void)state;
	assert_non_null(base);
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/metrics.sock", dir);
	snprintf(listen, sizeof(listen), "unix:%s", path);
	assert_int_equal(metrics_listen(base, listen, g, why, sizeof(why)), 0);
	assert_int_equal(lstat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0660);
	assert_int_equal(st.st_gid, g);
	metrics_close();
	assert_int_equal(metrics_listen(base, listen, (gid_t)-1, why,
			     sizeof(why)),
	    0);
	assert_int_equal(lstat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	metrics_close();
	rmdir(dir);
	event_base_free(base);
}

static void
test_listener_strict_and_capped(void **state)
{
	static const char *const bad[] = {
		"GET /metrics HTTP/1.1\nHost: x\n\n", /* bare LF */
		"GET /metrics HTTP/1.1\r\n\r\n",      /* no Host */
		"GET /metrics HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		"GET /metrics HTTP/1.1\r\nHost: x\r\n fold\r\n\r\n",
		"GET /metrics HTTP/2.0\r\n\r\n",
		"GET  /metrics HTTP/1.0\r\n\r\n",
		"GET /metrics HTTP/1.0\r\nX : y\r\n\r\n",
		("GET /metrics HTTP/1.0\r\nContent-Length: 1\r\n"
		 "Transfer-Encoding: chunked\r\n\r\n"),
	};
	struct event_base *base = event_base_new();
	char dir[] = "/tmp/sluice-test-metrics-XXXXXX";
	char path[96], listen[160], why[256] = "", *r;
	int fds[16];
	size_t i;

	(void)state;
	assert_non_null(base);
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/metrics.sock", dir);
	snprintf(listen, sizeof(listen), "unix:%s", path);
	assert_int_equal(metrics_listen(base, listen, (gid_t)-1, why,
			     sizeof(why)),
	    0);
	for (i = 0; i < SL_NELEM(bad); i++) {
		r = http_exchange(base, path, bad[i]);
		if (strstr(r, " 400 ") == NULL)
			fail_msg("case %zu: %s", i, r);
		assert_null(strstr(r, "sluice_"));
		free(r);
	}
	r = http_exchange(base, path,
	    "GET /metrics HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc");
	assert_non_null(strstr(r, " 413 "));
	free(r);
	/* 16 idle connections take every slot: the next one is refused. */
	for (i = 0; i < SL_NELEM(fds); i++)
		fds[i] = unix_connect(path);
	for (i = 0; i < 20; i++)
		event_base_loop(base, EVLOOP_NONBLOCK);
	r = http_exchange(base, path, "GET /metrics HTTP/1.0\r\n\r\n");
	assert_true(strncmp(r, "HTTP/1.1 503 ", 13) == 0);
	assert_null(strstr(r, "sluice_"));
	free(r);
	/* A slot that frees up serves again. */
	close(fds[0]);
	for (i = 0; i < 20; i++)
		event_base_loop(base, EVLOOP_NONBLOCK);
	r = http_exchange(base, path, "GET /metrics HTTP/1.0\r\n\r\n");
	assert_true(strncmp(r, "HTTP/1.1 200 ", 13) == 0);
	free(r);
	for (i = 1; i < SL_NELEM(fds); i++)
		close(fds[i]);
	metrics_close();
	rmdir(dir);
	event_base_free(base);
}

static void
test_listen_errors(void **state)
{
	static const char *const bad[] = { "nonsense", "1.2.3.4",
		"198.18.0.1:0", "unix:relative/path", "unix:", "[::1]",
		"host.example:9100" };
	struct event_base *base = event_base_new();
	char why[256];
	size_t i;

	(void)state;
	assert_non_null(base);
	for (i = 0; i < SL_NELEM(bad); i++) {
		why[0] = '\0';
		if (metrics_listen(base, bad[i], (gid_t)-1, why, sizeof(why)) !=
		    -1)
			fail_msg("accepted %s", bad[i]);
		assert_true(why[0] != '\0');
	}
	event_base_free(base);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_render_empty, setup),
		cmocka_unit_test_setup(test_counts, setup),
		cmocka_unit_test_setup(test_errors_budget_policy_time, setup),
		cmocka_unit_test_setup(test_reload_outcome, setup),
		cmocka_unit_test_setup(test_route_cap, setup),
		cmocka_unit_test_setup(test_sandbox_cap, setup),
		cmocka_unit_test_setup(test_listener_strict_and_capped, setup),
		cmocka_unit_test_setup(test_listener_group, setup),
		cmocka_unit_test_setup(test_listener, setup),
		cmocka_unit_test_setup(test_listen_errors, setup),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
