/*
 * "sluice audit suggest [--wildcards] [--depth N] [--audience AUD]
 * FILE...": draft allowlist routes from the "report" lines of audit logs
 * (docs/audit.md "sluice audit suggest"). The files' chain is checked as
 * "audit verify" checks it, then every http.request and connect.tunnel
 * line with decision "report" and no route (route_not_found) is counted
 * per host: methods, path prefixes (the first N segments of each path,
 * prefixes covered by a shorter one dropped), ports, CONNECTs, requests
 * and runs (sub). Each host (or, with --wildcards, each group of two or
 * more hosts under one parent domain that is not a public suffix) becomes
 * one route, printed as a JSON array whose elements paste into "routes".
 * Reports on an existing route (a method or path it lacks) are listed on
 * stderr for the operator to add by hand. Memory is bounded: at most
 * SUGGEST_MAX_HOSTS hosts, SUGGEST_MAX_ITEMS paths, methods and runs each.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "proxy/cli/cli.h"
#include "proxy/daemon/daemon.h"
#include "proxy/http/http1.h"
#include "proxy/ops/ops.h"
#include "proxy/util/hostmatch.h"
#include "proxy/util/util.h"

#define SUGGEST_MAX_HOSTS 4096
#define SUGGEST_MAX_ITEMS 256
#define SUGGEST_MAX_PORTS 16

/* A small set of strings, in the order first seen. */
struct sset {
	char *ss_v[SUGGEST_MAX_ITEMS];
	size_t ss_n;
	int ss_full; /* something did not fit */
};

struct shost {
	char sh_name[HOSTMATCH_BUF]; /* normalized; "*.x" for a group */
	struct sset sh_methods;
	struct sset sh_paths; /* prefixes already cut to --depth */
	struct sset sh_runs;
	uint16_t sh_ports[SUGGEST_MAX_PORTS];
	size_t sh_nports;
	int sh_connect;
	int sh_plain; /* a request that was not a CONNECT */
	uint64_t sh_requests;
	int sh_merged; /* folded into a wildcard group */
};

struct suggest {
	struct shost *sg_hosts;
	size_t sg_n;
	int sg_wild;
	unsigned sg_depth;
	const char *sg_audience;
	uint64_t sg_skipped;  /* hosts over the cap */
	uint64_t sg_on_route; /* reports on an existing route */
};

static int
sset_add(struct sset *s, const char *v)
{
	size_t i;

	for (i = 0; i < s->ss_n; i++)
		if (strcmp(s->ss_v[i], v) == 0)
			return 0;
	if (s->ss_n == SUGGEST_MAX_ITEMS) {
		s->ss_full = 1;
		return 0;
	}
	if ((s->ss_v[s->ss_n] = strdup(v)) == NULL)
		return -1;
	s->ss_n++;
	return 0;
}

static void
sset_free(struct sset *s)
{
	size_t i;

	for (i = 0; i < s->ss_n; i++)
		free(s->ss_v[i]);
	s->ss_n = 0;
}

static void
add_port(struct shost *h, uint16_t port)
{
	size_t i;

	for (i = 0; i < h->sh_nports; i++)
		if (h->sh_ports[i] == port)
			return;
	if (h->sh_nports < SUGGEST_MAX_PORTS)
		h->sh_ports[h->sh_nports++] = port;
}

static struct shost *
find_host(struct suggest *sg, const char *name)
{
	size_t i;

	for (i = 0; i < sg->sg_n; i++)
		if (strcmp(sg->sg_hosts[i].sh_name, name) == 0)
			return &sg->sg_hosts[i];
	if (sg->sg_n == SUGGEST_MAX_HOSTS) {
		sg->sg_skipped++;
		return NULL;
	}
	if (sg->sg_hosts == NULL &&
	    (sg->sg_hosts = calloc(SUGGEST_MAX_HOSTS, sizeof(*sg->sg_hosts))) ==
		NULL)
		return NULL;
	snprintf(sg->sg_hosts[sg->sg_n].sh_name, HOSTMATCH_BUF, "%s", name);
	return &sg->sg_hosts[sg->sg_n++];
}

/*
 * The first depth segments of path p ("/a/b/c" at 2: "/a/b"), into out;
 * a path with no more segments stays whole, less a final '/'.
 */
static void
cut_path(const char *p, unsigned depth, char *out, size_t cap)
{
	size_t i, n = strlen(p);
	unsigned seg = 0;

	for (i = 1; i < n; i++)
		if (p[i] == '/' && ++seg == depth)
			break;
	if (i > cap - 1)
		i = cap - 1;
	memcpy(out, p, i);
	out[i] = '\0';
	while (i > 1 && out[i - 1] == '/')
		out[--i] = '\0';
	if (out[0] != '/')
		snprintf(out, cap, "/");
}

/* "host:port" of a tunnel line, IPv6 in brackets: host and port apart. */
static int
split_hostport(const char *hp, char *host, size_t cap, uint16_t *port)
{
	const char *c = strrchr(hp, ':');
	size_t n;
	char *end;
	unsigned long v;

	if (c == NULL)
		return -1;
	errno = 0;
	v = strtoul(c + 1, &end, 10);
	if (*end != '\0' || errno != 0 || v == 0 || v > 65535)
		return -1;
	*port = (uint16_t)v;
	n = (size_t)(c - hp);
	if (n >= 2 && hp[0] == '[' && hp[n - 1] == ']') {
		hp++;
		n -= 2;
	}
	if (n == 0 || n >= cap)
		return -1;
	memcpy(host, hp, n);
	host[n] = '\0';
	return 0;
}

static const char *
jstr(const cJSON *e, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, k);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A method or path an existing route lacks: said apart. */
static void
warn_on_route(const char *route, int connect, const char *method,
    const char *path, const char *reason)
{
	fprintf(stderr,
	    "sluice: audit suggest: route \"%s\" would need %s%s%s "
	    "(%s)\n",
	    route,
	    connect    ? "connect.enabled" :
		method ? method :
			 "?",
	    connect ? "" : " ",
	    connect  ? "" :
		path ? path :
		       "",
	    reason != NULL ? reason : "?");
}

/*
 * The host (into raw) and port a line names, as a route would key it
 * (into name). 0, or -1 to skip the line.
 */
static int
line_host(int connect, const char *host, const cJSON *pj, char *name, char *raw,
    uint16_t *port)
{
	if (connect) {
		if (split_hostport(host, raw, HOSTMATCH_BUF, port) == -1)
			return -1;
	} else {
		snprintf(raw, HOSTMATCH_BUF, "%s", host);
		if (cJSON_IsNumber(pj) && pj->valuedouble >= 1 &&
		    pj->valuedouble <= 65535)
			*port = (uint16_t)pj->valuedouble;
	}
	/* Names as routes compare them; IP literals as they are. */
	if (strchr(raw, ':') == NULL &&
	    strspn(raw, "0123456789.") != strlen(raw)) {
		if (hostmatch_normalize(raw, strlen(raw), 0, name, NULL) == -1)
			return -1;
	} else
		snprintf(name, HOSTMATCH_BUF, "%s", raw);
	return 0;
}

/* A plain request's method and path prefix into h. 0, or -1 out of memory. */
static int
add_plain(struct suggest *sg, struct shost *h, const char *method,
    const char *path)
{
	char pfx[1024];

	h->sh_plain = 1;
	if (method != NULL && strcmp(method, "CONNECT") != 0 &&
	    sset_add(&h->sh_methods, method) == -1)
		return -1;
	if (path != NULL && path[0] == '/') {
		cut_path(path, sg->sg_depth, pfx, sizeof(pfx));
		if (sset_add(&h->sh_paths, pfx) == -1)
			return -1;
	}
	return 0;
}

/* One audit line (parsed). 0, or -1 out of memory. */
static int
suggest_line(struct suggest *sg, const cJSON *e)
{
	const char *ev = jstr(e, "event"), *dec = jstr(e, "decision");
	const char *route = jstr(e, "route"), *host = jstr(e, "host");
	const char *method = jstr(e, "method"), *path = jstr(e, "path");
	const char *sub = jstr(e, "sub"), *reason = jstr(e, "reason");
	const cJSON *pj = cJSON_GetObjectItemCaseSensitive(e, "port");
	char name[HOSTMATCH_BUF], raw[HOSTMATCH_BUF];
	int connect;
	uint16_t port = 80;
	struct shost *h;

	if (ev == NULL || dec == NULL || strcmp(dec, "report") != 0 ||
	    host == NULL)
		return 0;
	connect = strcmp(ev, "connect.tunnel") == 0;
	if (!connect && strcmp(ev, "http.request") != 0)
		return 0;
	if (route != NULL && route[0] != '\0') {
		sg->sg_on_route++;
		warn_on_route(route, connect, method, path, reason);
		return 0;
	}
	if (line_host(connect, host, pj, name, raw, &port) == -1)
		return 0;
	if ((h = find_host(sg, name)) == NULL)
		return sg->sg_hosts == NULL ? -1 : 0;
	h->sh_requests++;
	add_port(h, port);
	if (sub != NULL && sset_add(&h->sh_runs, sub) == -1)
		return -1;
	if (connect) {
		h->sh_connect = 1;
		return 0;
	}
	return add_plain(sg, h, method, path);
}

static int
suggest_file(struct suggest *sg, const char *file)
{
	FILE *f = strcmp(file, "-") == 0 ? stdin : fopen(file, "r");
	char *buf;
	int rc = 0;

	if (f == NULL) {
		fprintf(stderr, "%s: %s\n", file, strerror(errno));
		return -1;
	}
	if ((buf = malloc(AUDIT_LINE_MAX + 1)) == NULL) {
		if (f != stdin)
			(void)fclose(f);
		return -1;
	}
	while (rc == 0 && fgets(buf, AUDIT_LINE_MAX + 1, f) != NULL) {
		cJSON *e = cJSON_Parse(buf);

		if (e != NULL && cJSON_IsObject(e))
			rc = suggest_line(sg, e);
		cJSON_Delete(e);
	}
	free(buf);
	if (f != stdin)
		(void)fclose(f);
	return rc;
}

/* Merge h's counts into g. */
static int
merge(struct shost *g, struct shost *h)
{
	size_t i;

	g->sh_requests += h->sh_requests;
	g->sh_connect |= h->sh_connect;
	g->sh_plain |= h->sh_plain;
	for (i = 0; i < h->sh_nports; i++)
		add_port(g, h->sh_ports[i]);
	for (i = 0; i < h->sh_methods.ss_n; i++)
		if (sset_add(&g->sh_methods, h->sh_methods.ss_v[i]) == -1)
			return -1;
	for (i = 0; i < h->sh_paths.ss_n; i++)
		if (sset_add(&g->sh_paths, h->sh_paths.ss_v[i]) == -1)
			return -1;
	for (i = 0; i < h->sh_runs.ss_n; i++)
		if (sset_add(&g->sh_runs, h->sh_runs.ss_v[i]) == -1)
			return -1;
	h->sh_merged = 1;
	return 0;
}

/* Whether name is strictly under parent (at a label boundary). */
static int
under(const char *name, const char *parent)
{
	size_t n = strlen(name), p = strlen(parent);

	return n > p + 1 && name[n - p - 1] == '.' &&
	    strcmp(name + n - p, parent) == 0;
}

static int
is_literal(const char *name)
{
	return strspn(name, "0123456789.:abcdef") == strlen(name) &&
	    (strchr(name, ':') != NULL ||
		strspn(name, "0123456789.") == strlen(name));
}

/* How many of the first n hosts, unmerged and not wildcards, are under p. */
static size_t
count_under(const struct suggest *sg, size_t n, const char *p)
{
	size_t j, count = 0;

	for (j = 0; j < n; j++)
		if (!sg->sg_hosts[j].sh_merged &&
		    sg->sg_hosts[j].sh_name[0] != '*' &&
		    under(sg->sg_hosts[j].sh_name, p))
			count++;
	return count;
}

/* Merge those hosts into g. 0, or -1 out of memory. */
static int
merge_under(struct suggest *sg, struct shost *g, size_t n, const char *p)
{
	size_t j;

	for (j = 0; j < n; j++) {
		struct shost *b = &sg->sg_hosts[j];

		if (!b->sh_merged && b->sh_name[0] != '*' &&
		    under(b->sh_name, p) && merge(g, b) == -1)
			return -1;
	}
	return 0;
}

/* The parent of name with depth labels, or NULL if it has no more. */
static const char *
parent_at(const char *name, int depth)
{
	size_t labels;
	const char *p;

	for (labels = 1, p = name; *p != '\0'; p++)
		labels += *p == '.';
	if (labels <= (size_t)depth)
		return NULL;
	for (p = name; labels > (size_t)depth; labels--)
		p = strchr(p, '.') + 1;
	return p;
}

/*
 * --wildcards: names that share a parent domain (of at least two labels,
 * not a public suffix) become one "*.parent" route, the most specific
 * parent two or more of them share first. "*.parent" never covers the
 * parent itself: a request to it stays a route of its own.
 */
static int
group_wildcards(struct suggest *sg)
{
	size_t i, n = sg->sg_n;
	char wild[HOSTMATCH_BUF + 2];
	const char *p;
	int depth;

	/* Deepest parents first: the most specific shared one wins. */
	for (depth = HOSTMATCH_NAME_MAX / 2; depth >= 2; depth--)
		for (i = 0; i < n; i++) {
			struct shost *a = &sg->sg_hosts[i], *g;

			if (a->sh_merged || a->sh_name[0] == '*' ||
			    is_literal(a->sh_name))
				continue;
			/* Its parent of depth labels. */
			if ((p = parent_at(a->sh_name, depth)) == NULL)
				continue;
			snprintf(wild, sizeof(wild), "*.%s", p);
			if (warn_public_suffix(wild))
				continue;
			if (count_under(sg, n, p) < 2)
				continue;
			if ((g = find_host(sg, wild)) == NULL ||
			    merge_under(sg, g, n, p) == -1)
				return -1;
		}
	return 0;
}

/* Drop a prefix that a shorter one covers at a segment boundary. */
static void
minimal_prefixes(struct sset *s)
{
	size_t i, j;

	for (i = 0; i < s->ss_n; i++)
		for (j = 0; j < s->ss_n; j++) {
			if (i == j || s->ss_v[i] == NULL || s->ss_v[j] == NULL)
				continue;
			if (path_has_prefix(s->ss_v[i], strlen(s->ss_v[i]),
				s->ss_v[j], strlen(s->ss_v[j]))) {
				free(s->ss_v[i]);
				s->ss_v[i] = NULL;
			}
		}
	for (i = j = 0; i < s->ss_n; i++)
		if (s->ss_v[i] != NULL)
			s->ss_v[j++] = s->ss_v[i];
	s->ss_n = j;
}

static int
cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static cJSON *
strarr(struct sset *s)
{
	cJSON *a = cJSON_CreateArray();
	size_t i;

	qsort(s->ss_v, s->ss_n, sizeof(s->ss_v[0]), cmp_str);
	for (i = 0; a != NULL && i < s->ss_n; i++)
		cJSON_AddItemToArray(a, cJSON_CreateString(s->ss_v[i]));
	return a;
}

static cJSON *
route_json(const struct suggest *sg, struct shost *h)
{
	cJSON *r = cJSON_CreateObject(), *c, *u, *p, *hosts;
	char note[256];
	size_t i;

	if (r == NULL)
		return NULL;
	snprintf(note, sizeof(note),
	    "sluice audit suggest: %llu request(s) from %zu%s run(s)",
	    (unsigned long long)h->sh_requests, h->sh_runs.ss_n,
	    h->sh_runs.ss_full ? "+" : "");
	cJSON_AddStringToObject(r, "comment", note);
	cJSON_AddStringToObject(r, "audience", sg->sg_audience);
	hosts = cJSON_AddArrayToObject(r, "hosts");
	cJSON_AddItemToArray(hosts, cJSON_CreateString(h->sh_name));
	if (h->sh_plain) {
		minimal_prefixes(&h->sh_paths);
		if (h->sh_methods.ss_n > 0)
			cJSON_AddItemToObject(r, "methods",
			    strarr(&h->sh_methods));
		if (h->sh_paths.ss_n > 0)
			cJSON_AddItemToObject(r, "path_prefixes",
			    strarr(&h->sh_paths));
	}
	c = cJSON_AddObjectToObject(r, "connect");
	cJSON_AddBoolToObject(c, "enabled", h->sh_connect);
	u = cJSON_AddObjectToObject(r, "upstream");
	cJSON_AddStringToObject(u, "mode", "as_requested");
	p = cJSON_AddArrayToObject(u, "ports");
	for (i = 0; i < h->sh_nports; i++)
		cJSON_AddItemToArray(p, cJSON_CreateNumber(h->sh_ports[i]));
	return r;
}

static void
suggest_usage(FILE *f)
{
	fprintf(f,
	    "usage: sluice audit suggest [--wildcards] [--depth N] "
	    "[--audience AUD] FILE...\n");
}

int
audit_suggest(int argc, char **argv)
{
	struct suggest sg;
	cJSON *arr = NULL;
	char *txt;
	FILE *null;
	size_t i;
	int a = 1, rc = SL_EXIT_RUNTIME;

	memset(&sg, 0, sizeof(sg));
	sg.sg_depth = 1;
	sg.sg_audience = "allowlist";
	while (a < argc && argv[a][0] == '-' && argv[a][1] != '\0') {
		if (strcmp(argv[a], "--") == 0) {
			a++;
			break;
		}
		if (strcmp(argv[a], "--wildcards") == 0) {
			sg.sg_wild = 1;
			a++;
		} else if (strcmp(argv[a], "--depth") == 0 && a + 1 < argc) {
			char *end;
			unsigned long d = strtoul(argv[a + 1], &end, 10);

			if (*end != '\0' || d < 1 || d > 64) {
				fprintf(stderr,
				    "sluice: audit suggest: --depth: 1 to 64\n");
				return SL_EXIT_USAGE;
			}
			sg.sg_depth = (unsigned)d;
			a += 2;
		} else if (strcmp(argv[a], "--audience") == 0 && a + 1 < argc) {
			sg.sg_audience = argv[a + 1];
			a += 2;
		} else {
			suggest_usage(stderr);
			return SL_EXIT_USAGE;
		}
	}
	if (a >= argc || sg.sg_audience[0] == '\0') {
		suggest_usage(stderr);
		return SL_EXIT_USAGE;
	}
	/* A log that is not one unbroken chain is not drafted from. */
	if ((null = fopen("/dev/null", "w")) == NULL)
		return SL_EXIT_RUNTIME;
	i = (size_t)audit_verify((const char *const *)(argv + a),
	    (size_t)(argc - a), NULL, null, stderr);
	(void)fclose(null);
	if (i != SL_EXIT_OK)
		return (int)i;
	for (i = (size_t)a; i < (size_t)argc; i++)
		if (suggest_file(&sg, argv[i]) == -1)
			goto out;
	if (sg.sg_wild && group_wildcards(&sg) == -1)
		goto out;
	if ((arr = cJSON_CreateArray()) == NULL)
		goto out;
	for (i = 0; i < sg.sg_n; i++) {
		cJSON *r;

		if (sg.sg_hosts[i].sh_merged)
			continue;
		if ((r = route_json(&sg, &sg.sg_hosts[i])) == NULL)
			goto out;
		cJSON_AddItemToArray(arr, r);
	}
	if ((txt = cJSON_Print(arr)) == NULL)
		goto out;
	printf("%s\n", txt);
	free(txt);
	if (sg.sg_skipped > 0)
		fprintf(stderr,
		    "sluice: audit suggest: %llu report(s) of hosts over the "
		    "%d-host cap were left out\n",
		    (unsigned long long)sg.sg_skipped, SUGGEST_MAX_HOSTS);
	rc = SL_EXIT_OK;
out:
	if (rc != SL_EXIT_OK)
		fprintf(stderr, "sluice: audit suggest: out of memory\n");
	cJSON_Delete(arr);
	for (i = 0; i < sg.sg_n; i++) {
		sset_free(&sg.sg_hosts[i].sh_methods);
		sset_free(&sg.sg_hosts[i].sh_paths);
		sset_free(&sg.sg_hosts[i].sh_runs);
	}
	free(sg.sg_hosts);
	return rc;
}
