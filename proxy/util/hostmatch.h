/*
 * hostmatch: route selection by host name (exact names and "*.suffix"
 * wildcards), in a hash table probed once per label of the name asked.
 * Libc only; what is added is copied, lookups allocate nothing.
 */
#ifndef SLUICE_HOSTMATCH_H
#define SLUICE_HOSTMATCH_H

#include <stddef.h>
#include <stdint.h>

#define HOSTMATCH_NAME_MAX 253 /* bytes of a name, without a final dot */
#define HOSTMATCH_BUF      (HOSTMATCH_NAME_MAX + 3) /* "*.", a name, NUL */

/*
 * Normalize the host name at p[0..len) into out (HOSTMATCH_BUF
 * bytes; may be p itself): ASCII lower case, one final '.'
 * removed. The name must be LDH labels of 1 to 63 bytes (letters,
 * digits, '-' not first nor last; '_' allowed as in service names)
 * separated by single dots; IDNs must be in A-label form ("xn--"), and
 * are compared as written. With wild, a first label "*" (and at least
 * one label after it) is allowed. Returns the length, or -1 with *why
 * (may be NULL) saying what is wrong.
 */
int hostmatch_normalize(const char *p, size_t len, int wild, char *out,
    const char **why);

/*
 * The matcher. Keys are normalized names ("a.example.org") or wildcard
 * suffixes ("*.example.org", stored as "example.org" of kind wildcard);
 * each key holds the values (route indices) added under it, in order.
 */
struct hostmatch;

struct hostmatch *hostmatch_new(void);
void hostmatch_free(struct hostmatch *);
/*
 * Add value under key (normalized; "*." first for a wildcard). Returns
 * 0, or -1 out of memory. Several values may share a key: *first (may be
 * NULL) is set to the first value the key held before, or to
 * HOSTMATCH_NONE when it is new.
 */
#define HOSTMATCH_NONE UINT32_MAX
int hostmatch_add(struct hostmatch *, const char *key, uint32_t value,
    uint32_t *first);

/* What a lookup found: the values of the best key, and which key. */
struct hostmatch_hit {
	const uint32_t *hh_vals;
	size_t hh_nvals;
	int hh_wild;      /* a wildcard matched (else the exact name) */
	size_t hh_suffix; /* wildcard: the suffix's offset in the name */
};

/*
 * The best key for the normalized name[0..len): the exact name, else the
 * longest wildcard suffix with at least one label before it (so
 * "*.example.org" never matches "example.org"). An IP literal must be
 * looked up with exact_only. Returns 1 with *hit filled, or 0.
 */
int hostmatch_lookup(const struct hostmatch *, const char *name, size_t len,
    int exact_only, struct hostmatch_hit *hit);
/* Number of keys. */
size_t hostmatch_count(const struct hostmatch *);

#endif
