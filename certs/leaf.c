/*
 * Leaves for intercepted hosts: minting (one P-256 key per process, a
 * certificate per host, never past the CA and never outside its name
 * constraints) and the bounded LRU cache the server context reads from.
 *
 * The cache holds one X509 per host and nothing else: the key is shared,
 * the chain is empty (the client holds the CA as its anchor, so sending
 * it would add bytes to every handshake and prove nothing), and a
 * per-host SSL_CTX would cost several KiB each for state that is the
 * same for every host. SSL_use_cert_and_key() on the connection only
 * takes references, so a cached leaf costs the connection no copy.
 */
/* For the EC_KEY calls of certs_leaf_key_new(); see there. */
#define OPENSSL_SUPPRESS_DEPRECATED

#include <sys/queue.h>

#include <arpa/inet.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "certs/certs.h"
#include "certs/internal.h"

/* Re-mint a cached leaf this close to its notAfter (seconds). */
#define LEAF_RENEW_S 300
/* Largest cache (entries): bounds the hash table allocation. */
#define LEAF_MAX_CACHE (1u << 20)

/*
 * The leaf key is made through the EC_KEY interface, deprecated in OpenSSL
 * 3.0, on purpose: X509_set_pubkey() of a provider-native key (what
 * EVP_EC_gen() returns) round-trips it through the encoder and decoder,
 * about 0.3 ms per leaf in 3.0, where a legacy key is encoded directly
 * (about 0.01 ms) and shared by reference with every leaf instead of
 * decoded into a copy per certificate (heap per cached leaf halves).
 */
EVP_PKEY *
certs_leaf_key_new(char *why, size_t whylen)
{
	EVP_PKEY *k;
	EC_KEY *ec;

	if ((ec = EC_KEY_new_by_curve_name(NID_X9_62_prime256v1)) == NULL ||
	    EC_KEY_generate_key(ec) != 1 || (k = EVP_PKEY_new()) == NULL) {
		EC_KEY_free(ec);
		certs_err(why, whylen, "cannot generate the leaf key");
		return NULL;
	}
	if (EVP_PKEY_assign_EC_KEY(k, ec) != 1) {
		EC_KEY_free(ec);
		EVP_PKEY_free(k);
		certs_err(why, whylen, "cannot generate the leaf key");
		return NULL;
	}
	return k;
}

/* The SAN of host: one dNSName or one iPAddress. */
static GENERAL_NAMES *
san_for(const char *host)
{
	unsigned char a[16];
	GENERAL_NAMES *gens;
	GENERAL_NAME *gn;
	ASN1_STRING *s = NULL;
	int type, alen = 0;

	if (inet_pton(AF_INET, host, a) == 1)
		alen = 4;
	else if (inet_pton(AF_INET6, host, a) == 1)
		alen = 16;
	type = alen != 0 ? GEN_IPADD : GEN_DNS;
	if ((gens = GENERAL_NAMES_new()) == NULL)
		return NULL;
	s = alen != 0 ? ASN1_OCTET_STRING_new() : ASN1_IA5STRING_new();
	if (s == NULL)
		goto fail;
	if ((alen != 0 ? ASN1_OCTET_STRING_set(s, a, alen) :
			 ASN1_STRING_set(s, host, (int)strlen(host))) != 1 ||
	    (gn = GENERAL_NAME_new()) == NULL)
		goto fail;
	GENERAL_NAME_set0_value(gn, type, s);
	s = NULL;
	if (sk_GENERAL_NAME_push(gens, gn) == 0) {
		GENERAL_NAME_free(gn);
		goto fail;
	}
	return gens;
fail:
	ASN1_STRING_free(s);
	GENERAL_NAMES_free(gens);
	return NULL;
}

/* Set x's subject and SAN for host (checked). 0 or -1 with why. */
static int
set_names(X509 *x, const char *host, char *why, size_t whylen)
{
	unsigned char a[16];
	GENERAL_NAMES *gens;
	int literal, rc;

	if (certs_host_check(host, why, whylen) == -1)
		return -1;
	literal = inet_pton(AF_INET, host, a) == 1 ||
	    inet_pton(AF_INET6, host, a) == 1;
	/*
	 * An address literal gets no CN: OpenSSL checks a CN that looks
	 * like a DNS name ("198.18.0.1" does) against the CA's DNS
	 * constraints, which would refuse it. The subject is then empty,
	 * so the SAN is critical (RFC 5280 §4.2.1.6).
	 */
	if (!literal &&
	    X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN",
		MBSTRING_ASC, (const unsigned char *)host, -1, -1, 0) != 1) {
		certs_err(why, whylen, "cannot set the leaf's subject");
		return -1;
	}
	if ((gens = san_for(host)) == NULL) {
		certs_err(why, whylen, "cannot build the leaf's SAN");
		return -1;
	}
	rc = X509_add1_ext_i2d(x, NID_subject_alt_name, gens, literal,
	    X509V3_ADD_DEFAULT);
	GENERAL_NAMES_free(gens);
	if (rc != 1) {
		certs_err(why, whylen, "cannot add the leaf's SAN");
		return -1;
	}
	return 0;
}

X509 *
certs_leaf_names(const char *host, char *why, size_t whylen)
{
	X509 *x;

	if ((x = X509_new()) == NULL) {
		certs_err(why, whylen, "out of memory");
		return NULL;
	}
	if (set_names(x, host, why, whylen) == -1) {
		X509_free(x);
		return NULL;
	}
	/*
	 * IMPORTANT: NAME_CONSTRAINTS_check() reads the SAN from the
	 * extension cache, which nothing else fills on a certificate built
	 * here; without this it would check the subject only.
	 */
	(void)X509_get_extension_flags(x);
	return x;
}

X509 *
certs_leaf_mint(const struct certs_ca *ca, EVP_PKEY *leaf_key, const char *host,
    unsigned leaf_days, time_t now, char *why, size_t whylen)
{
	X509 *cax = certs_ca_cert(ca), *x = NULL, *probe;
	time_t ca_nb, ca_na, nb, na;
	char sub[256], t[32];

	if (leaf_days == 0 || leaf_days > CERTS_LEAF_MAX_DAYS) {
		snprintf(why, whylen, "leaf validity of %u days (1 to %d)",
		    leaf_days, CERTS_LEAF_MAX_DAYS);
		return NULL;
	}
	certs_ca_validity(ca, &ca_nb, &ca_na);
	if (now >= ca_na) {
		certs_fmt_time(ca_na, t, sizeof(t));
		snprintf(why, whylen, "the CA expired at %s", t);
		return NULL;
	}
	if (now < ca_nb) {
		certs_fmt_time(ca_nb, t, sizeof(t));
		snprintf(why, whylen, "the CA is not valid before %s", t);
		return NULL;
	}
	/*
	 * Check the constraints before signing anything: a leaf the
	 * clients would reject must not exist at all (and the error is
	 * ours to report, not a client's handshake failure).
	 */
	if ((probe = certs_leaf_names(host, sub, sizeof(sub))) == NULL) {
		snprintf(why, whylen, "%s", sub);
		return NULL;
	}
	if (certs_ca_check_names(ca, probe, sub, sizeof(sub)) == -1) {
		X509_free(probe);
		snprintf(why, whylen, "%s: %s", host, sub);
		return NULL;
	}
	X509_free(probe);

	nb = now - 3600 > ca_nb ? now - 3600 : ca_nb;
	na = (ca_na - now) / 86400 < (time_t)leaf_days ?
	    ca_na :
	    now + (time_t)leaf_days * 86400;
	if ((x = X509_new()) == NULL ||
	    X509_set_version(x, X509_VERSION_3) != 1 ||
	    certs_set_serial(x) == -1 ||
	    X509_set_issuer_name(x, X509_get_subject_name(cax)) != 1 ||
	    X509_time_adj_ex(X509_getm_notBefore(x), 0, nb - now, &now) ==
		NULL ||
	    X509_time_adj_ex(X509_getm_notAfter(x), 0, na - now, &now) ==
		NULL ||
	    X509_set_pubkey(x, leaf_key) != 1) {
		certs_err(why, whylen, "cannot build the leaf");
		goto fail;
	}
	if (set_names(x, host, why, whylen) == -1)
		goto fail;
	if (certs_add_ext(x, cax, NID_basic_constraints, "critical,CA:FALSE") ==
		-1 ||
	    certs_add_ext(x, cax, NID_key_usage, "critical,digitalSignature") ==
		-1 ||
	    certs_add_ext(x, cax, NID_ext_key_usage, "serverAuth") == -1 ||
	    /* The AKI names the CA's SKI; a loaded CA may have none. */
	    (X509_get0_subject_key_id(cax) != NULL &&
		certs_add_ext(x, cax, NID_authority_key_identifier, "keyid") ==
		    -1)) {
		certs_err(why, whylen, "cannot add the leaf's extensions");
		goto fail;
	}
	if (certs_sign(x, certs_ca_key(ca)) == -1) {
		certs_err(why, whylen, "cannot sign the leaf");
		goto fail;
	}
	return x;
fail:
	ERR_clear_error();
	X509_free(x);
	return NULL;
}

/* One cached leaf; owned by the cache. */
struct leaf {
	TAILQ_ENTRY(leaf) lf_lru; /* most recently used first */
	struct leaf *lf_next;     /* hash chain */
	X509 *lf_cert;
	time_t lf_not_after;
	uint32_t lf_hash;
	char lf_host[]; /* canonical (lower case) */
};

TAILQ_HEAD(leaf_lru, leaf);

struct certs_cache {
	const struct certs_ca *cc_ca; /* borrowed */
	EVP_PKEY *cc_key;             /* the process's leaf key */
	unsigned cc_days;
	size_t cc_max;
	struct leaf **cc_tab; /* cc_mask + 1 buckets */
	uint32_t cc_mask;
	struct leaf_lru cc_lru;
	struct certs_cache_stats cc_stats;
};

/* FNV-1a; the names are the policy's hosts, not the sandbox's choice. */
static uint32_t
host_hash(const char *s)
{
	uint32_t h = 2166136261u;

	while (*s != '\0') {
		h ^= (unsigned char)*s++;
		h *= 16777619u;
	}
	return h;
}

struct certs_cache *
certs_cache_new(const struct certs_ca *ca, size_t max_leaves,
    unsigned leaf_days, char *why, size_t whylen)
{
	struct certs_cache *cc;
	size_t buckets = 1;

	if (max_leaves == 0)
		max_leaves = CERTS_DEFAULT_LEAVES;
	if (leaf_days == 0)
		leaf_days = CERTS_LEAF_DEFAULT_DAYS;
	if (max_leaves > LEAF_MAX_CACHE) {
		snprintf(why, whylen, "a cache of %zu leaves (at most %u)",
		    max_leaves, LEAF_MAX_CACHE);
		return NULL;
	}
	if (leaf_days > CERTS_LEAF_MAX_DAYS) {
		snprintf(why, whylen, "leaf validity of %u days (1 to %d)",
		    leaf_days, CERTS_LEAF_MAX_DAYS);
		return NULL;
	}
	while (buckets < max_leaves)
		buckets <<= 1;
	if ((cc = calloc(1, sizeof(*cc))) == NULL ||
	    (cc->cc_tab = calloc(buckets, sizeof(struct leaf *))) == NULL) {
		free(cc);
		snprintf(why, whylen, "out of memory");
		return NULL;
	}
	if ((cc->cc_key = certs_leaf_key_new(why, whylen)) == NULL) {
		free(cc->cc_tab);
		free(cc);
		return NULL;
	}
	cc->cc_ca = ca;
	cc->cc_days = leaf_days;
	cc->cc_max = max_leaves;
	cc->cc_mask = (uint32_t)(buckets - 1);
	TAILQ_INIT(&cc->cc_lru);
	return cc;
}

/* Unlink lf from its bucket and the LRU list, and free it. */
static void
leaf_drop(struct certs_cache *cc, struct leaf *lf)
{
	struct leaf **pp = &cc->cc_tab[lf->lf_hash & cc->cc_mask];

	while (*pp != lf)
		pp = &(*pp)->lf_next;
	*pp = lf->lf_next;
	TAILQ_REMOVE(&cc->cc_lru, lf, lf_lru);
	X509_free(lf->lf_cert);
	free(lf);
	cc->cc_stats.cs_leaves--;
}

void
certs_cache_free(struct certs_cache *cc)
{
	struct leaf *lf;

	if (cc == NULL)
		return;
	while ((lf = TAILQ_FIRST(&cc->cc_lru)) != NULL)
		leaf_drop(cc, lf);
	EVP_PKEY_free(cc->cc_key);
	free(cc->cc_tab);
	free(cc);
}

X509 *
certs_cache_get(struct certs_cache *cc, const char *host, time_t now, char *why,
    size_t whylen)
{
	char canon[CERTS_HOST_MAX + 1];
	struct leaf *lf;
	uint32_t h;
	size_t len;
	X509 *x;

	if (certs_host_canon(host, canon, sizeof(canon), why, whylen) == -1)
		return NULL;
	h = host_hash(canon);
	for (lf = cc->cc_tab[h & cc->cc_mask]; lf != NULL; lf = lf->lf_next)
		if (lf->lf_hash == h && strcmp(lf->lf_host, canon) == 0)
			break;
	if (lf != NULL) {
		if (now + LEAF_RENEW_S < lf->lf_not_after) {
			cc->cc_stats.cs_hits++;
			TAILQ_REMOVE(&cc->cc_lru, lf, lf_lru);
			TAILQ_INSERT_HEAD(&cc->cc_lru, lf, lf_lru);
			return lf->lf_cert;
		}
		leaf_drop(cc, lf); /* about to expire: mint it again */
	}
	cc->cc_stats.cs_misses++;
	x = certs_leaf_mint(cc->cc_ca, cc->cc_key, canon, cc->cc_days, now, why,
	    whylen);
	if (x == NULL) {
		cc->cc_stats.cs_mint_errors++;
		return NULL;
	}
	len = strlen(canon);
	if ((lf = calloc(1, sizeof(*lf) + len + 1)) == NULL) {
		X509_free(x);
		cc->cc_stats.cs_mint_errors++;
		snprintf(why, whylen, "out of memory");
		return NULL;
	}
	if (certs_asn1_time(X509_get0_notAfter(x), &lf->lf_not_after) == -1)
		lf->lf_not_after = now; /* not cached past this lookup */
	memcpy(lf->lf_host, canon, len + 1);
	lf->lf_cert = x;
	lf->lf_hash = h;
	if (cc->cc_stats.cs_leaves >= cc->cc_max) {
		leaf_drop(cc, TAILQ_LAST(&cc->cc_lru, leaf_lru));
		cc->cc_stats.cs_evictions++;
	}
	lf->lf_next = cc->cc_tab[h & cc->cc_mask];
	cc->cc_tab[h & cc->cc_mask] = lf;
	TAILQ_INSERT_HEAD(&cc->cc_lru, lf, lf_lru);
	cc->cc_stats.cs_leaves++;
	return x;
}

EVP_PKEY *
certs_cache_key(const struct certs_cache *cc)
{
	return cc->cc_key;
}

void
certs_cache_stats(const struct certs_cache *cc, struct certs_cache_stats *out)
{
	*out = cc->cc_stats;
}
