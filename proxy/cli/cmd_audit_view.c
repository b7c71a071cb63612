/*
 * Audit views for people (docs/audit.md "Reading the log"):
 *
 *   sluice audit tail [-f] [--deny] [--sub RUN] [--color=auto|always|never]
 * FILE one aligned line per event, coloured by decision on a terminal; sluice
 * audit stats FILE... requests by route, decision and reason (count, bytes),
 * then by sub.
 *
 * The log's strings come from the sandbox. The writer escapes controls,
 * but JSON unescaping gives them back, so every value printed here goes
 * through term_put(): a byte that is not printable ASCII or part of valid
 * UTF-8 above U+009F is shown as \xNN, and nothing from the log can move
 * the cursor, set a colour or forge a line.
 */
#include <sys/stat.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "proxy/cli/cli.h"
#include "proxy/ops/ops.h"
#include "proxy/util/utf8.h"
#include "proxy/util/util.h"

#define VIEW_LINE_MAX  (AUDIT_LINE_MAX + 2)
#define VIEW_FIELD_MAX 80 /* bytes of a value shown by tail */
#define VIEW_MAX_ROWS  4096
#define VIEW_POLL_MS   200

static const char tail_usage[] =
    "usage: sluice audit tail [-f] [--deny] [--sub RUN] "
    "[--color=auto|always|never] FILE\n";
static const char stats_usage[] = "usage: sluice audit stats FILE...\n";

/* Write at most max bytes of s (len bytes) with nothing a terminal acts on. */
static void
term_put(FILE *f, const char *s, size_t len, size_t max)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, out = 0, n;

	while (i < len && out < max) {
		if (p[i] >= 0x20 && p[i] < 0x7f) {
			(void)fputc(p[i++], f);
			out++;
			continue;
		}
		n = p[i] >= 0x80 ? utf8_len(p + i, len - i) : 0;
		/* C1 controls (U+0080..U+009F) are two bytes from 0xc2. */
		if (n > 0 && !(n == 2 && p[i] == 0xc2 && p[i + 1] < 0xa0)) {
			(void)fwrite(p + i, 1, n, f);
			i += n;
			out++;
			continue;
		}
		fprintf(f, "\\x%02x", p[i++]);
		out += 4;
	}
	if (i < len)
		(void)fputs("...", f);
}

static const char *
jstr(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A string field, or "-" when absent (stats rows). */
static const char *
jstr_or(const cJSON *o, const char *key)
{
	const char *s = jstr(o, key);

	return s != NULL ? s : "-";
}

static int
jnum(const cJSON *o, const char *key, double *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	if (!cJSON_IsNumber(v))
		return 0;
	*out = v->valuedouble;
	return 1;
}

/* The number of requests a line stands for: count when aggregated. */
static uint64_t
jcount(const cJSON *o)
{
	double d;

	return jnum(o, "count", &d) && d >= 1 ? (uint64_t)d : 1;
}

struct tail_opts {
	int follow, deny_only, color;
	const char *sub;
};

static void
put_field(FILE *f, const char *label, const char *v)
{
	if (v == NULL)
		return;
	fprintf(f, " %s=", label);
	term_put(f, v, strlen(v), VIEW_FIELD_MAX);
}

/*
 * Red for a denial, yellow for an allowed request that did not end "ok"
 * (the upstream failed, the client left), green for the rest of the
 * allowed, dim for events without a decision.
 */
static const char *
tail_color(const char *dec, const char *reason)
{
	if (dec == NULL)
		return "\033[2m";
	if (strcmp(dec, "deny") == 0)
		return "\033[31m";
	if (reason != NULL && strcmp(reason, "ok") != 0)
		return "\033[33m";
	return "\033[32m";
}

/* One event as a line; 0 when filtered out, 1 when printed. */
static int
tail_one(const struct tail_opts *o, const cJSON *e, FILE *f)
{
	const char *ev = jstr(e, "event"), *dec = jstr(e, "decision");
	const char *ts = jstr(e, "ts"), *col = NULL, *s;
	double st;

	if (ev == NULL)
		return 0;
	if (o->deny_only && (dec == NULL || strcmp(dec, "deny") != 0))
		return 0;
	if (o->sub != NULL &&
	    ((s = jstr(e, "sub")) == NULL || strcmp(s, o->sub) != 0))
		return 0;
	if (o->color)
		col = tail_color(dec, jstr(e, "reason"));
	if (col != NULL)
		(void)fputs(col, f);
	/* "2026-11-30T04:22:36.123456Z": date and time, milliseconds. */
	if (ts != NULL && strlen(ts) == 27)
		fprintf(f, "%.10s %.12s", ts, ts + 11);
	else
		(void)fputs("-          -           ", f);
	fprintf(f, " %-14.14s", ev);
	fprintf(f, " %-5s", dec != NULL ? dec : "");
	s = jstr(e, "reason");
	fprintf(f, " %-22.22s", s != NULL ? s : "");
	if (jnum(e, "status", &st))
		fprintf(f, " %3.0f", st);
	else
		(void)fputs("    ", f);
	if ((s = jstr(e, "method")) != NULL) {
		(void)fputc(' ', f);
		term_put(f, s, strlen(s), 12);
	}
	if ((s = jstr(e, "host")) != NULL) {
		(void)fputc(' ', f);
		term_put(f, s, strlen(s), VIEW_FIELD_MAX);
	}
	if ((s = jstr(e, "path")) != NULL)
		term_put(f, s, strlen(s), VIEW_FIELD_MAX);
	put_field(f, "route", jstr(e, "route"));
	put_field(f, "sub", jstr(e, "sub"));
	if (jcount(e) > 1)
		fprintf(f, " x%" PRIu64, jcount(e));
	put_field(f, "error", jstr(e, "error"));
	if (strcmp(ev, "net.drop") == 0) {
		put_field(f, "proto", jstr(e, "proto"));
		put_field(f, "dst", jstr(e, "dst"));
	}
	if (col != NULL)
		(void)fputs("\033[0m", f);
	(void)fputc('\n', f);
	return 1;
}

/* Print the complete lines of buf[0..*len); keep a partial last one. */
static void
tail_buf(const struct tail_opts *o, char *buf, size_t *len)
{
	char *p = buf, *nl;
	cJSON *e;

	while ((nl = memchr(p, '\n', *len - (size_t)(p - buf))) != NULL) {
		if ((e = cJSON_ParseWithLength(p, (size_t)(nl - p))) != NULL) {
			tail_one(o, e, stdout);
			cJSON_Delete(e);
		} else
			(void)fputs("(not a JSON line)\n", stdout);
		p = nl + 1;
	}
	*len -= (size_t)(p - buf);
	memmove(buf, p, *len);
	/* A "line" longer than any the writer makes: drop it. */
	if (*len == VIEW_LINE_MAX) {
		(void)fputs("(line too long)\n", stdout);
		*len = 0;
	}
}

static int
audit_tail(int argc, char **argv)
{
	static const struct option opts[] = { { "follow", no_argument, NULL,
						  'f' },
		{ "deny", no_argument, NULL, 'd' },
		{ "sub", required_argument, NULL, 's' },
		{ "color", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 } };
	struct tail_opts o = { 0, 0, -1, NULL };
	struct stat st, now;
	size_t len = 0;
	ssize_t n;
	char *buf;
	FILE *f;
	int ch;

	optind = 1;
	while ((ch = getopt_long(argc, argv, "fh", opts, NULL)) != -1) {
		switch (ch) {
		case 'f':
			o.follow = 1;
			break;
		case 'd':
			o.deny_only = 1;
			break;
		case 's':
			o.sub = optarg;
			break;
		case 'c':
			if (strcmp(optarg, "always") == 0)
				o.color = 1;
			else if (strcmp(optarg, "never") == 0)
				o.color = 0;
			else if (strcmp(optarg, "auto") == 0)
				o.color = -1;
			else {
				(void)fputs(tail_usage, stderr);
				return SL_EXIT_USAGE;
			}
			break;
		case 'h':
			(void)fputs(tail_usage, stdout);
			return SL_EXIT_OK;
		default:
			(void)fputs(tail_usage, stderr);
			return SL_EXIT_USAGE;
		}
	}
	if (optind + 1 != argc) {
		(void)fputs(tail_usage, stderr);
		return SL_EXIT_USAGE;
	}
	if (o.color == -1)
		o.color = isatty(STDOUT_FILENO) && getenv("NO_COLOR") == NULL;
	if ((f = fopen(argv[optind], "r")) == NULL ||
	    fstat(fileno(f), &st) == -1) {
		fprintf(stderr, "sluice audit tail: %s: %s\n", argv[optind],
		    strerror(errno));
		if (f != NULL)
			(void)fclose(f);
		return SL_EXIT_INVALID;
	}
	if ((buf = malloc(VIEW_LINE_MAX)) == NULL) {
		(void)fclose(f);
		return SL_EXIT_RUNTIME;
	}
	for (;;) {
		n = (ssize_t)fread(buf + len, 1, VIEW_LINE_MAX - len, f);
		if (n > 0) {
			len += (size_t)n;
			tail_buf(&o, buf, &len);
			continue;
		}
		(void)fflush(stdout);
		if (!o.follow || ferror(f))
			break;
		/* Rotated (a new file at the path): read the new one. */
		if (stat(argv[optind], &now) == 0 &&
		    (now.st_ino != st.st_ino || now.st_dev != st.st_dev)) {
			FILE *nf = fopen(argv[optind], "r");

			if (nf != NULL) {
				(void)fclose(f);
				f = nf;
				st = now;
				len = 0;
				continue;
			}
		}
		clearerr(f);
		nanosleep(&(struct timespec){ 0, VIEW_POLL_MS * 1000000L },
		    NULL);
	}
	free(buf);
	(void)fclose(f);
	return SL_EXIT_OK;
}

/* One row of the stats table. */
struct stat_row {
	char *key1, *key2, *key3; /* route, decision, reason; or sub */
	uint64_t count, bytes_in, bytes_out;
};

struct stat_table {
	struct stat_row *rows;
	size_t n;
	int full;
};

static int
row_add(struct stat_table *t, const char *k1, const char *k2, const char *k3,
    uint64_t count, uint64_t bin, uint64_t bout)
{
	struct stat_row *r;
	size_t i;

	for (i = 0; i < t->n; i++) {
		r = &t->rows[i];
		if (strcmp(r->key1, k1) == 0 && strcmp(r->key2, k2) == 0 &&
		    strcmp(r->key3, k3) == 0)
			goto add;
	}
	if (t->n == VIEW_MAX_ROWS) {
		t->full = 1;
		return 0;
	}
	if (t->n % 64 == 0) {
		if ((r = realloc(t->rows, (t->n + 64) * sizeof(*r))) == NULL)
			return -1;
		t->rows = r;
	}
	r = &t->rows[t->n];
	memset(r, 0, sizeof(*r));
	if ((r->key1 = strdup(k1)) == NULL || (r->key2 = strdup(k2)) == NULL ||
	    (r->key3 = strdup(k3)) == NULL) {
		free(r->key1);
		free(r->key2);
		return -1;
	}
	t->n++;
add:
	r->count += count;
	r->bytes_in += bin;
	r->bytes_out += bout;
	return 0;
}

static void
table_free(struct stat_table *t)
{
	size_t i;

	for (i = 0; i < t->n; i++) {
		free(t->rows[i].key1);
		free(t->rows[i].key2);
		free(t->rows[i].key3);
	}
	free(t->rows);
}

static int
row_cmp(const void *a, const void *b)
{
	const struct stat_row *x = a, *y = b;

	if (x->count != y->count)
		return x->count > y->count ? -1 : 1;
	return strcmp(x->key1, y->key1);
}

static void
table_print(struct stat_table *t, const char *const head[3], int nkeys)
{
	size_t i;
	int k;

	qsort(t->rows, t->n, sizeof(*t->rows), row_cmp);
	for (k = 0; k < nkeys; k++)
		printf("%-24s ", head[k]);
	printf("%10s %14s %14s\n", "requests", "bytes_in", "bytes_out");
	for (i = 0; i < t->n; i++) {
		const struct stat_row *r = &t->rows[i];
		const char *keys[3] = { r->key1, r->key2, r->key3 };

		for (k = 0; k < nkeys; k++) {
			size_t l = strlen(keys[k]);

			term_put(stdout, keys[k], l, 24);
			printf("%*s ", l < 24 ? (int)(24 - l) : 0, "");
		}
		printf("%10" PRIu64 " %14" PRIu64 " %14" PRIu64 "\n", r->count,
		    r->bytes_in, r->bytes_out);
	}
	if (t->full)
		printf("(more than %d rows; the rest left out)\n",
		    VIEW_MAX_ROWS);
}

struct stats {
	struct stat_table byroute, bysub;
	struct phases *open; /* start lines waiting for their end */
	int failed;          /* out of memory */
};

/*
 * Count one request: who from its start line (or the line itself), how
 * it went from its end line (or the line itself).
 */
static int
stats_count(struct stats *st, const cJSON *who, const cJSON *how)
{
	uint64_t c = jcount(how), bin = 0, bout = 0;
	double d;

	if (jnum(how, "bytes_in", &d) && d > 0)
		bin = (uint64_t)d;
	if (jnum(how, "bytes_out", &d) && d > 0)
		bout = (uint64_t)d;
	if (row_add(&st->byroute, jstr_or(who, "route"),
		jstr_or(how, "decision"), jstr_or(how, "reason"), c, bin,
		bout) == -1)
		return -1;
	return row_add(&st->bysub, jstr_or(who, "sub"),
	    jstr_or(how, "decision"), "", c, bin, bout);
}

/* A start line that never ended: counted as it started. */
static void
stats_open_cb(cJSON *start, void *arg)
{
	struct stats *st = arg;

	if (start != NULL && stats_count(st, start, start) == -1)
		st->failed = 1;
}

/*
 * fsync "always" writes two lines per forwarded request (docs/audit.md):
 * the start line is kept until its end line comes, and the pair counts
 * once. Takes e (deletes it, or keeps it as a start line).
 */
static int
stats_line(struct stats *st, cJSON *e)
{
	const char *ev = jstr(e, "event"), *id;
	cJSON *start;
	int rc = 0;

	if (ev != NULL && phases_is_end(ev) && (id = jstr(e, "id")) != NULL) {
		if (phases_end(st->open, id, &start) == 1) {
			rc = stats_count(st, start, e);
			cJSON_Delete(start);
		}
		cJSON_Delete(e);
		return rc;
	}
	if (ev == NULL ||
	    (strcmp(ev, "http.request") != 0 &&
		strcmp(ev, "connect.tunnel") != 0)) {
		cJSON_Delete(e);
		return 0;
	}
	if ((id = phases_start_id(e)) != NULL)
		return phases_start(st->open, id, e);
	rc = stats_count(st, e, e);
	cJSON_Delete(e);
	return rc;
}

static int
audit_stats(int argc, char **argv)
{
	static const char *const h1[3] = { "route", "decision", "reason" };
	static const char *const h2[3] = { "sub", "decision", "" };
	struct stats st = { { NULL, 0, 0 }, { NULL, 0, 0 }, NULL, 0 };
	uint64_t lines = 0, bad = 0;
	char *buf;
	int i, rc = SL_EXIT_OK;

	if (argc >= 2 &&
	    (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
		(void)fputs(stats_usage, stdout);
		return SL_EXIT_OK;
	}
	if (argc < 2 || argv[1][0] == '-') {
		(void)fputs(stats_usage, stderr);
		return SL_EXIT_USAGE;
	}
	if ((st.open = phases_new()) == NULL)
		return SL_EXIT_RUNTIME;
	if ((buf = malloc(VIEW_LINE_MAX + 1)) == NULL) {
		phases_free(st.open, NULL, NULL);
		return SL_EXIT_RUNTIME;
	}
	for (i = 1; i < argc && rc == SL_EXIT_OK; i++) {
		FILE *f = fopen(argv[i], "r");

		if (f == NULL) {
			fprintf(stderr, "sluice audit stats: %s: %s\n", argv[i],
			    strerror(errno));
			rc = SL_EXIT_INVALID;
			break;
		}
		while (fgets(buf, VIEW_LINE_MAX + 1, f) != NULL) {
			cJSON *e = cJSON_Parse(buf);

			lines++;
			if (e == NULL) {
				bad++;
				continue;
			}
			if (stats_line(&st, e) == -1)
				rc = SL_EXIT_RUNTIME;
		}
		(void)fclose(f);
	}
	free(buf);
	/* Requests in flight when the log stopped count as they started. */
	phases_free(st.open, stats_open_cb, &st);
	if (st.failed)
		rc = SL_EXIT_RUNTIME;
	if (rc == SL_EXIT_OK) {
		table_print(&st.byroute, h1, 3);
		printf("\n");
		table_print(&st.bysub, h2, 2);
		printf("\n%" PRIu64 " lines", lines);
		if (bad > 0)
			printf(", %" PRIu64 " not JSON (skipped)", bad);
		printf("\n");
	}
	table_free(&st.byroute);
	table_free(&st.bysub);
	return rc;
}

int
cmd_audit_view(int argc, char **argv)
{
	if (strcmp(argv[0], "tail") == 0)
		return audit_tail(argc, argv);
	return audit_stats(argc, argv);
}
