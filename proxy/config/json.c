/*
 * The strict JSON accessors of the policy loader: every object's keys are
 * checked against its list (unknown and duplicate keys are errors), every
 * value against its type and range, and every error names the file and
 * the JSON path ("routes[0].hosts[1]"). Allocation can fail without ending
 * the process, and the unit tests make it fail on purpose
 * (config_alloc_fail_at).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "proxy/config/config.h"
#include "proxy/config/config_int.h"

int
cf_err(struct cfctx *cx, const char *jp, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	size_t i;

	va_start(ap, fmt);
	(void)vsnprintf(msg, sizeof(msg), fmt, ap); /* cut is fine */
	va_end(ap);
	/* Names from the policy may hold controls: the error stays one line. */
	for (i = 0; msg[i] != '\0'; i++)
		if ((unsigned char)msg[i] < 0x20 || msg[i] == 0x7f)
			msg[i] = '?';
	if (jp != NULL && jp[0] != '\0')
		snprintf(cx->why, cx->whylen, "%s: %s: %s", cx->file, jp, msg);
	else
		snprintf(cx->why, cx->whylen, "%s: %s", cx->file, msg);
	return -1;
}

/*
 * Allocation never ends the process: a reload (SIGHUP, admin "reload")
 * that runs out of memory is refused like any other bad policy. Both
 * return NULL after cf_err(), with jp naming what was being loaded.
 */
unsigned long config_alloc_fail_at;
static unsigned long config_allocs;

void
cf_alloc_reset(void)
{
	config_allocs = 0;
}

/* The unit tests' failure injection: the config_alloc_fail_at-th fails. */
int
cf_alloc_fails(void)
{
	return config_alloc_fail_at != 0 &&
	    ++config_allocs == config_alloc_fail_at;
}

char *
cf_strdup(struct cfctx *cx, const char *jp, const char *s)
{
	char *p = NULL;

	if (cf_alloc_fails() || (p = strdup(s)) == NULL)
		cf_err(cx, jp, "out of memory");
	return p;
}

void *
cf_calloc(struct cfctx *cx, const char *jp, size_t n, size_t size)
{
	void *p = NULL;

	if (cf_alloc_fails() || (p = calloc(n == 0 ? 1 : n, size)) == NULL)
		cf_err(cx, jp, "out of memory");
	return p;
}

/*
 * Generic checks. Each takes the JSON path of the value ("routes[0].hosts")
 * so that its error names it.
 */

/* The object's keys must all be in allowed[] and appear once each. */
int
cf_keys(struct cfctx *cx, const char *jp, const cJSON *obj,
    const char *const *allowed)
{
	const cJSON *it, *jt;
	size_t i;

	if (!cJSON_IsObject(obj))
		return cf_err(cx, jp, "must be an object");
	cJSON_ArrayForEach(it, obj) {
		for (i = 0; allowed[i] != NULL; i++)
			if (strcmp(it->string, allowed[i]) == 0)
				break;
		if (allowed[i] == NULL)
			return cf_err(cx, jp, "unknown key \"%s\"", it->string);
		for (jt = obj->child; jt != it; jt = jt->next)
			if (strcmp(jt->string, it->string) == 0)
				return cf_err(cx, jp, "duplicate key \"%s\"",
				    it->string);
	}
	return 0;
}

void
cf_sub(char *out, size_t len, const char *jp, const char *key)
{
	snprintf(out, len, "%s%s%s", jp, jp[0] ? "." : "", key);
}

void
cf_idx(char *out, size_t len, const char *jp, size_t i)
{
	snprintf(out, len, "%s[%zu]", jp, i);
}

/* A string member; absent → *out unchanged (the default) unless required. */
int
cf_str(struct cfctx *cx, const char *jp, const cJSON *obj, const char *key,
    int required, const char **out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
	char sub[256];

	cf_sub(sub, sizeof(sub), jp, key);
	/*
	 * An optional string given as null is left unset: what `sluice
	 * check` prints for it, so that its output loads again.
	 */
	if (v == NULL || (!required && cJSON_IsNull(v))) {
		if (required)
			return cf_err(cx, jp, "missing \"%s\"", key);
		return 0;
	}
	if (!cJSON_IsString(v))
		return cf_err(cx, sub, "must be a string");
	if (v->valuestring[0] == '\0')
		return cf_err(cx, sub, "must not be empty");
	*out = v->valuestring;
	return 0;
}

/* An absolute path s (at jp), copied into *out. */
int
cf_abspath(struct cfctx *cx, const char *jp, const char *s, char **out)
{
	if (s[0] != '/')
		return cf_err(cx, jp, "must be an absolute path");
	if ((*out = cf_strdup(cx, jp, s)) == NULL)
		return -1;
	return 0;
}

int
cf_bool(struct cfctx *cx, const char *jp, const cJSON *obj, const char *key,
    int *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
	char sub[256];

	if (v == NULL)
		return 0;
	cf_sub(sub, sizeof(sub), jp, key);
	if (!cJSON_IsBool(v))
		return cf_err(cx, sub, "must be true or false");
	*out = cJSON_IsTrue(v);
	return 0;
}

/* An integer member in [min, max]; JSON numbers must be integral. */
int
cf_uint(struct cfctx *cx, const char *jp, const cJSON *obj, const char *key,
    uint64_t min, uint64_t max, uint64_t *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
	char sub[256];
	double d;

	if (v == NULL)
		return 0;
	cf_sub(sub, sizeof(sub), jp, key);
	if (!cJSON_IsNumber(v))
		return cf_err(cx, sub, "must be a number");
	d = v->valuedouble;
	if (d < 0)
		return cf_err(cx, sub, "must not be negative");
	/* 2^53: beyond it a double no longer holds every integer. */
	if (!(d <= 9007199254740992.0) || d != (double)(uint64_t)d)
		return cf_err(cx, sub, "must be a whole number below 2^53");
	if ((uint64_t)d < min || (uint64_t)d > max)
		return cf_err(cx, sub, "must be between %llu and %llu",
		    (unsigned long long)min, (unsigned long long)max);
	*out = (uint64_t)d;
	return 0;
}

/*
 * An array member of at most max entries, its name saying what they are
 * ("more than 64 listeners"). A required one must be there and not be
 * empty. Returns the number of entries with *arr set (to NULL when it is
 * absent), or -1.
 */
int
cf_array(struct cfctx *cx, const char *jp, const cJSON *obj, const char *key,
    int required, size_t max, const cJSON **arr)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
	char sub[256];
	int n;

	*arr = NULL;
	if (v == NULL)
		return required ? cf_err(cx, jp, "missing \"%s\"", key) : 0;
	cf_sub(sub, sizeof(sub), jp, key);
	if (!cJSON_IsArray(v) || (required && cJSON_GetArraySize(v) == 0))
		return cf_err(cx, sub, "%s",
		    required ? "must be a non-empty array" :
			       "must be an array");
	n = cJSON_GetArraySize(v);
	if ((size_t)n > max)
		return cf_err(cx, sub, "more than %zu %s", max, key);
	*arr = v;
	return n;
}

/*
 * A string array member. Absent → *n unchanged. Each element must be a
 * non-empty string; check (may be NULL) validates one element.
 */
int
cf_strlist(struct cfctx *cx, const char *jp, const cJSON *obj, const char *key,
    char ***out, size_t *n,
    int (*check)(struct cfctx *, const char *, const char *))
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key), *it;
	char sub[256], el[300];
	size_t i = 0, count;
	char **list;

	if (v == NULL)
		return 0;
	cf_sub(sub, sizeof(sub), jp, key);
	if (!cJSON_IsArray(v))
		return cf_err(cx, sub, "must be an array");
	count = (size_t)cJSON_GetArraySize(v);
	if (count > CONFIG_MAX_LIST)
		return cf_err(cx, sub, "more than %d entries", CONFIG_MAX_LIST);
	if ((list = cf_calloc(cx, sub, count + 1, sizeof(*list))) == NULL)
		return -1;
	cJSON_ArrayForEach(it, v) {
		cf_idx(el, sizeof(el), sub, i);
		if (!cJSON_IsString(it) || it->valuestring[0] == '\0') {
			cf_err(cx, el, "must be a non-empty string");
			goto fail;
		}
		if (check != NULL && check(cx, el, it->valuestring) == -1)
			goto fail;
		if ((list[i] = cf_strdup(cx, el, it->valuestring)) == NULL)
			goto fail;
		i++;
	}
	*out = list;
	*n = count;
	return 0;
fail:
	while (i > 0)
		free(list[--i]);
	free(list);
	return -1;
}

int
cf_name_index(const char *const *names, const char *s)
{
	int i;

	for (i = 0; names[i] != NULL; i++)
		if (strcmp(names[i], s) == 0)
			return i;
	return -1;
}

/* A list still absent (*list NULL) becomes the one entry def. */
int
cf_strlist_default(struct cfctx *cx, const char *jp, char ***list, size_t *n,
    const char *def)
{
	if (*list != NULL)
		return 0;
	if ((*list = cf_calloc(cx, jp, 2, sizeof(**list))) == NULL ||
	    ((*list)[0] = cf_strdup(cx, jp, def)) == NULL)
		return -1;
	*n = 1;
	return 0;
}

void
cf_strlist_free(char **list, size_t n)
{
	size_t i;

	if (list == NULL)
		return;
	for (i = 0; i < n; i++)
		free(list[i]);
	free(list);
}

int
cf_has_dup(char **list, size_t n, size_t *dup)
{
	size_t i, j;

	for (i = 0; i < n; i++)
		for (j = 0; j < i; j++)
			if (strcmp(list[i], list[j]) == 0) {
				*dup = i;
				return 1;
			}
	return 0;
}

int
cf_ports(struct cfctx *cx, const char *jp, const cJSON *obj, int required,
    uint16_t *out, size_t max, size_t *n)
{
	const cJSON *arr = NULL, *el;
	char pj[128], sub[160];
	size_t i = 0, j;

	*n = 0;
	if (cf_array(cx, jp, obj, "ports", required, max, &arr) == -1)
		return -1;
	cf_sub(pj, sizeof(pj), jp, "ports");
	cJSON_ArrayForEach(el, arr) {
		cf_idx(sub, sizeof(sub), pj, i);
		if (!cJSON_IsNumber(el) || el->valuedouble < 1 ||
		    el->valuedouble > 65535 ||
		    el->valuedouble != (double)(int)el->valuedouble)
			return cf_err(cx, sub, "not a port (1-65535)");
		out[i] = (uint16_t)el->valueint;
		for (j = 0; j < i; j++)
			if (out[j] == out[i])
				return cf_err(cx, sub, "listed twice");
		i++;
	}
	*n = i;
	return 0;
}
