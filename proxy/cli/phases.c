/*
 * Start lines waiting for their end lines. With fsync "always" a forwarded
 * request has a start line ("phase":"start") and an http.end or
 * connect.end line with the same id (docs/audit.md "Two lines with
 * always"); "audit verify" counts the pairs that do not close and "audit
 * stats" joins them. Ids come from the log, so nothing is assumed of
 * their length or number: the table grows with the lines still open.
 */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "proxy/cli/cli.h"

#define PHASES_BUCKETS 4096

struct phase {
	struct phase *ph_next;
	cJSON *ph_start;
	char ph_id[];
};

struct phases {
	struct phase *p_b[PHASES_BUCKETS];
	uint64_t p_open;
};

static struct phase **
phases_slot(struct phases *p, const char *id)
{
	uint32_t h = 2166136261u; /* FNV-1a */
	const char *s;
	struct phase **pp;

	for (s = id; *s != '\0'; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	for (pp = &p->p_b[h % PHASES_BUCKETS]; *pp != NULL;
	     pp = &(*pp)->ph_next)
		if (strcmp((*pp)->ph_id, id) == 0)
			break;
	return pp;
}

struct phases *
phases_new(void)
{
	return calloc(1, sizeof(struct phases));
}

int
phases_is_end(const char *event)
{
	return strcmp(event, "http.end") == 0 ||
	    strcmp(event, "connect.end") == 0;
}

const char *
phases_start_id(const cJSON *e)
{
	const cJSON *ph = cJSON_GetObjectItemCaseSensitive(e, "phase");
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");

	if (!cJSON_IsString(ph) || strcmp(ph->valuestring, "start") != 0 ||
	    !cJSON_IsString(id))
		return NULL;
	return id->valuestring;
}

int
phases_start(struct phases *p, const char *id, cJSON *start)
{
	struct phase **pp = phases_slot(p, id), *ph;
	size_t n = strlen(id) + 1;

	if (*pp != NULL) {
		/* A second start under one id: the later one counts. */
		cJSON_Delete((*pp)->ph_start);
		(*pp)->ph_start = start;
		return 0;
	}
	if ((ph = malloc(sizeof(*ph) + n)) == NULL) {
		cJSON_Delete(start);
		return -1;
	}
	memcpy(ph->ph_id, id, n);
	ph->ph_start = start;
	ph->ph_next = NULL;
	*pp = ph;
	p->p_open++;
	return 0;
}

int
phases_end(struct phases *p, const char *id, cJSON **start)
{
	struct phase **pp = phases_slot(p, id), *ph = *pp;

	*start = NULL;
	if (ph == NULL)
		return 0;
	*pp = ph->ph_next;
	*start = ph->ph_start;
	free(ph);
	p->p_open--;
	return 1;
}

uint64_t
phases_open(const struct phases *p)
{
	return p != NULL ? p->p_open : 0;
}

void
phases_free(struct phases *p, void (*each)(cJSON *start, void *arg), void *arg)
{
	struct phase *ph;
	size_t i;

	if (p == NULL)
		return;
	for (i = 0; i < PHASES_BUCKETS; i++)
		while ((ph = p->p_b[i]) != NULL) {
			p->p_b[i] = ph->ph_next;
			if (each != NULL)
				each(ph->ph_start, arg);
			cJSON_Delete(ph->ph_start);
			free(ph);
		}
	free(p);
}
