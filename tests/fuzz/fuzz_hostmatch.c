/*
 * libFuzzer target for util/hostmatch.c. The input is lines: every line
 * but the last is a host pattern (as a policy's hosts give it), the last
 * a host name (as a request gives it). Patterns that normalize are added
 * (value: their line); the name, normalized, is looked up, and the answer
 * is checked against a linear reference written from the contract: the
 * exact name, else the longest "*.suffix" with a label before it. Also:
 * normalizing is idempotent and its output is lower-case LDH labels of at
 * most 63 bytes, 253 in all. A violation aborts.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/util/hostmatch.h"

int LLVMFuzzerTestOneInput(const uint8_t *, size_t);

#define MAXPAT 64

static void
check(int ok)
{
	if (!ok)
		abort();
}

static void
check_normal(const char *s, int n, int wild)
{
	char again[HOSTMATCH_BUF];
	int i, lab = 0, start = 0;

	check(n >= 1 && n <= HOSTMATCH_NAME_MAX + 2);
	check(s[n] == '\0' && (int)strlen(s) == n);
	if (wild && s[0] == '*') {
		check(n >= 3 && s[1] == '.');
		start = 2;
	}
	check(n - start <= HOSTMATCH_NAME_MAX);
	for (i = start; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '.') {
			check(lab > 0);
			lab = 0;
			continue;
		}
		check((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		    c == '-' || c == '_');
		check(++lab <= 63);
	}
	check(lab > 0);
	check(hostmatch_normalize(s, (size_t)n, wild, again, NULL) == n);
	check(memcmp(s, again, (size_t)n + 1) == 0);
}

/* The reference: the line of the best pattern, or -1. */
static long
reference(char pats[][HOSTMATCH_BUF], const long *line, size_t np,
    const char *name, size_t len)
{
	size_t i, best_len = 0;
	long best = -1;

	for (i = 0; i < np; i++)
		if (pats[i][0] != '*' && strcmp(pats[i], name) == 0)
			return line[i];
	for (i = 0; i < np; i++) {
		const char *suf = pats[i] + 2;
		size_t sl = strlen(suf);

		if (pats[i][0] != '*' || sl + 1 > len ||
		    name[len - sl - 1] != '.' ||
		    memcmp(name + len - sl, suf, sl) != 0)
			continue;
		/* The first one added of the longest suffix. */
		if (best == -1 || sl > best_len) {
			best = line[i];
			best_len = sl;
		}
	}
	return best;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char pats[MAXPAT][HOSTMATCH_BUF];
	static long line[MAXPAT];
	char name[HOSTMATCH_BUF];
	const char *p = (const char *)data, *end = p + size, *nl;
	struct hostmatch *hm;
	struct hostmatch_hit hit;
	size_t np = 0;
	long ln = 0, want;
	int n, found;

	if ((hm = hostmatch_new()) == NULL)
		return 0;
	while ((nl = memchr(p, '\n', (size_t)(end - p))) != NULL) {
		char *copy = malloc((size_t)(nl - p) + 1);

		check(copy != NULL);
		memcpy(copy, p, (size_t)(nl - p));
		n = hostmatch_normalize(copy, (size_t)(nl - p), 1, pats[np],
		    NULL);
		free(copy);
		if (n >= 0) {
			check_normal(pats[np], n, 1);
			check(hostmatch_add(hm, pats[np], (uint32_t)ln, NULL) ==
			    0);
			line[np] = ln;
			if (np + 1 < MAXPAT)
				np++;
			else
				break;
		}
		ln++;
		p = nl + 1;
	}
	if ((nl = memchr(p, '\n', (size_t)(end - p))) != NULL)
		p = nl + 1; /* more patterns than kept: the rest is the name */
	{
		size_t len = (size_t)(end - p);
		char *copy = malloc(len > 0 ? len : 1);

		check(copy != NULL);
		memcpy(copy, p, len);
		n = hostmatch_normalize(copy, len, 0, name, NULL);
		free(copy);
	}
	if (n >= 0) {
		check_normal(name, n, 0);
		check(name[0] != '*');
		found = hostmatch_lookup(hm, name, (size_t)n, 0, &hit);
		want = reference(pats, line, np, name, (size_t)n);
		check(found == (want != -1));
		if (found) {
			check(hit.hh_nvals >= 1);
			check((long)hit.hh_vals[0] == want);
			check(!hit.hh_wild ||
			    (hit.hh_suffix > 0 && hit.hh_suffix < (size_t)n &&
				name[hit.hh_suffix - 1] == '.'));
		}
	}
	hostmatch_free(hm);
	return 0;
}
