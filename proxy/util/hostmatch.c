/*
 * Host matching for route selection (docs/config.md "Allowing more than
 * the model"): an open-addressing hash table of normalized names, exact
 * ones and wildcard suffixes apart. A lookup probes the exact name, then
 * each suffix after a label from the longest down, so it costs one hash
 * per label whatever the number of keys, and the first wildcard found is
 * the most specific one.
 */
#include <stdlib.h>
#include <string.h>

#include "proxy/util/ascii.h"
#include "proxy/util/hostmatch.h"

struct hm_entry {
	char *he_key; /* NULL: an empty slot */
	size_t he_len;
	int he_wild;
	uint64_t he_hash;
	uint32_t *he_vals;
	size_t he_nvals;
};

struct hostmatch {
	struct hm_entry *hm_tab;
	size_t hm_cap; /* a power of two, or 0 */
	size_t hm_n;
};

static int
ldh(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
	    c == '_';
}

/* Why a label ending at o (lab bytes long) is bad, or NULL. */
static const char *
label_end_why(const char *out, size_t o, size_t lab)
{
	if (lab == 0)
		return "empty label";
	if (out[o - 1] == '-' || out[o - lab] == '-')
		return "a label starts or ends with '-'";
	return NULL;
}

/* Why byte c (lowered, not '.') may not be in a label, or NULL. */
static const char *
label_byte_why(unsigned char c)
{
	if (c == '*')
		return "'*' only as the whole first label";
	if (c >= 0x80)
		return "not ASCII (give an IDN in A-label form, xn--...)";
	if (!ldh(c))
		return "a byte other than a letter, digit, '-' or '_'";
	return NULL;
}

int
hostmatch_normalize(const char *p, size_t len, int wild, char *out,
    const char **why)
{
	const char *w = NULL;
	size_t i, lab = 0, start = 0, o = 0;

	if (len > 0 && p[len - 1] == '.')
		len--;
	if (len == 0) {
		w = "empty name";
		goto bad;
	}
	if (wild && len >= 2 && p[0] == '*' && p[1] == '.') {
		out[o++] = '*';
		out[o++] = '.';
		start = 2;
	} else if (wild && len == 1 && p[0] == '*') {
		w = "a bare \"*\" would allow every host";
		goto bad;
	}
	if (len - start > HOSTMATCH_NAME_MAX) {
		w = "longer than 253 bytes";
		goto bad;
	}
	for (i = start; i <= len; i++) {
		unsigned char c =
		    i < len ? ascii_lower((unsigned char)p[i]) : '.';

		if (c == '.') {
			if ((w = label_end_why(out, o, lab)) != NULL)
				goto bad;
			lab = 0;
			if (i < len)
				out[o++] = '.';
			continue;
		}
		if ((w = label_byte_why(c)) != NULL)
			goto bad;
		if (++lab > 63) {
			w = "a label longer than 63 bytes";
			goto bad;
		}
		out[o++] = (char)c;
	}
	out[o] = '\0';
	return (int)o;
bad:
	if (why != NULL)
		*why = w;
	return -1;
}

/* FNV-1a over the key, the kind mixed in. */
static uint64_t
hm_hash(const char *k, size_t len, int wild)
{
	uint64_t h = 0xcbf29ce484222325ULL ^ (uint64_t)(wild ? 0x9e : 0x3b);
	size_t i;

	for (i = 0; i < len; i++) {
		h ^= (unsigned char)k[i];
		h *= 0x100000001b3ULL;
	}
	return h ^ (h >> 29);
}

struct hostmatch *
hostmatch_new(void)
{
	return calloc(1, sizeof(struct hostmatch));
}

void
hostmatch_free(struct hostmatch *hm)
{
	size_t i;

	if (hm == NULL)
		return;
	for (i = 0; i < hm->hm_cap; i++) {
		free(hm->hm_tab[i].he_key);
		free(hm->hm_tab[i].he_vals);
	}
	free(hm->hm_tab);
	free(hm);
}

size_t
hostmatch_count(const struct hostmatch *hm)
{
	return hm != NULL ? hm->hm_n : 0;
}

static struct hm_entry *
hm_find(const struct hostmatch *hm, const char *k, size_t len, int wild,
    uint64_t h)
{
	size_t i, mask;

	if (hm->hm_cap == 0)
		return NULL;
	mask = hm->hm_cap - 1;
	for (i = (size_t)h & mask;; i = (i + 1) & mask) {
		struct hm_entry *e = &hm->hm_tab[i];

		if (e->he_key == NULL)
			return e;
		if (e->he_hash == h && e->he_len == len && e->he_wild == wild &&
		    memcmp(e->he_key, k, len) == 0)
			return e;
	}
}

/* Double the table (at half load); entries move, none is copied. */
static int
hm_grow(struct hostmatch *hm)
{
	size_t ncap = hm->hm_cap == 0 ? 16 : hm->hm_cap * 2, i;
	struct hm_entry *old = hm->hm_tab, *nt;
	size_t ocap = hm->hm_cap;

	if (ncap < hm->hm_cap || (nt = calloc(ncap, sizeof(*nt))) == NULL)
		return -1;
	hm->hm_tab = nt;
	hm->hm_cap = ncap;
	for (i = 0; i < ocap; i++) {
		struct hm_entry *e;

		if (old[i].he_key == NULL)
			continue;
		e = hm_find(hm, old[i].he_key, old[i].he_len, old[i].he_wild,
		    old[i].he_hash);
		*e = old[i];
	}
	free(old);
	return 0;
}

int
hostmatch_add(struct hostmatch *hm, const char *key, uint32_t value,
    uint32_t *first)
{
	int wild = key[0] == '*' && key[1] == '.';
	const char *k = wild ? key + 2 : key;
	size_t len = strlen(k);
	uint64_t h = hm_hash(k, len, wild);
	struct hm_entry *e;
	uint32_t *nv;

	if (first != NULL)
		*first = HOSTMATCH_NONE;
	if ((hm->hm_n + 1) * 2 > hm->hm_cap && hm_grow(hm) == -1)
		return -1;
	e = hm_find(hm, k, len, wild, h);
	if (e->he_key == NULL) {
		if ((e->he_key = malloc(len + 1)) == NULL)
			return -1;
		memcpy(e->he_key, k, len + 1);
		e->he_len = len;
		e->he_wild = wild;
		e->he_hash = h;
		e->he_vals = NULL;
		e->he_nvals = 0;
		hm->hm_n++;
	} else if (first != NULL)
		*first = e->he_vals[0];
	if ((nv = realloc(e->he_vals, (e->he_nvals + 1) * sizeof(*nv))) == NULL)
		return -1;
	nv[e->he_nvals++] = value;
	e->he_vals = nv;
	return 0;
}

static int
hm_hit(const struct hm_entry *e, int wild, size_t off,
    struct hostmatch_hit *hit)
{
	if (e == NULL || e->he_key == NULL)
		return 0;
	hit->hh_vals = e->he_vals;
	hit->hh_nvals = e->he_nvals;
	hit->hh_wild = wild;
	hit->hh_suffix = off;
	return 1;
}

int
hostmatch_lookup(const struct hostmatch *hm, const char *name, size_t len,
    int exact_only, struct hostmatch_hit *hit)
{
	size_t i;

	memset(hit, 0, sizeof(*hit));
	if (hm == NULL || hm->hm_n == 0 || len == 0)
		return 0;
	if (hm_hit(hm_find(hm, name, len, 0, hm_hash(name, len, 0)), 0, 0, hit))
		return 1;
	if (exact_only)
		return 0;
	/* Longest suffix first: the one after the first label, and so on. */
	for (i = 0; i < len; i++) {
		const char *s;
		size_t slen;

		if (name[i] != '.')
			continue;
		s = name + i + 1;
		slen = len - i - 1;
		if (hm_hit(hm_find(hm, s, slen, 1, hm_hash(s, slen, 1)), 1,
			i + 1, hit))
			return 1;
	}
	return 0;
}
