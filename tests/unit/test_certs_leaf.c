/*
 * Unit tests for certs/leaf.c with real OpenSSL: every field of a minted
 * leaf, the validity clamp to the CA, the refusal of names outside the
 * CA's constraints (and OpenSSL's verifier agreeing, including on a
 * certificate the CA key signs by hand), and the LRU cache's order,
 * bound, renewal and statistics.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "certs/certs.h"

static char why[512];

static struct certs_ca *
gen(const char *const *permit, size_t n, unsigned days, time_t now)
{
	struct certs_ca_params p = { NULL, days, permit, n };
	struct certs_ca *ca = certs_ca_generate(&p, now, why, sizeof(why));

	if (ca == NULL)
		fail_msg("generate: %s", why);
	return ca;
}

static time_t
asn1_time(const ASN1_TIME *t)
{
	struct tm tm;

	memset(&tm, 0, sizeof(tm));
	assert_int_equal(ASN1_TIME_to_tm(t, &tm), 1);
	return timegm(&tm);
}

/* Verify leaf against ca as a TLS client would, for host. */
static int
verify(X509 *ca, X509 *leaf, const char *host, time_t at)
{
	X509_STORE *st = X509_STORE_new();
	X509_STORE_CTX *ctx = X509_STORE_CTX_new();
	X509_VERIFY_PARAM *vp;
	int rc;

	assert_non_null(st);
	assert_non_null(ctx);
	assert_int_equal(X509_STORE_add_cert(st, ca), 1);
	assert_int_equal(X509_STORE_CTX_init(ctx, st, leaf, NULL), 1);
	vp = X509_STORE_CTX_get0_param(ctx);
	X509_VERIFY_PARAM_set_purpose(vp, X509_PURPOSE_SSL_SERVER);
	X509_VERIFY_PARAM_set_time(vp, at);
	if (host != NULL) {
		if (strchr(host, ':') != NULL || host[0] == '1')
			X509_VERIFY_PARAM_set1_ip_asc(vp, host);
		else
			X509_VERIFY_PARAM_set1_host(vp, host, 0);
	}
	rc = X509_verify_cert(ctx) == 1 ? X509_V_OK :
					  X509_STORE_CTX_get_error(ctx);
	X509_STORE_CTX_free(ctx);
	X509_STORE_free(st);
	return rc;
}

static void
test_leaf_fields(void **state)
{
	static const char *const permit[] = { "api.example", "198.18.0.1",
		"2001:2::5" };
	time_t now = time(NULL);
	struct certs_ca *ca = gen(permit, 3, 0, now);
	EVP_PKEY *k = certs_leaf_key_new(why, sizeof(why));
	X509 *x, *cax = certs_ca_cert(ca);
	BASIC_CONSTRAINTS *bc;
	EXTENDED_KEY_USAGE *eku;
	GENERAL_NAMES *san;
	GENERAL_NAME *gn;
	AUTHORITY_KEYID *aki;
	const ASN1_INTEGER *sn;
	BIGNUM *bn;
	char cn[80];
	int crit;

	(void)state;
	assert_non_null(k);
	assert_true(EVP_PKEY_is_a(k, "EC"));
	x = certs_leaf_mint(ca, k, "api.example", 1, now, why, sizeof(why));
	if (x == NULL)
		fail_msg("mint: %s", why);
	assert_int_equal(X509_get_version(x), X509_VERSION_3);
	assert_int_equal(X509_verify(x, X509_get0_pubkey(cax)), 1);
	assert_int_equal(EVP_PKEY_eq(X509_get0_pubkey(x), k), 1);
	assert_int_equal(X509_NAME_cmp(X509_get_issuer_name(x),
			     X509_get_subject_name(cax)),
	    0);
	X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn,
	    sizeof(cn));
	assert_string_equal(cn, "api.example");
	assert_int_equal(X509_NAME_entry_count(X509_get_subject_name(x)), 1);
	sn = X509_get0_serialNumber(x);
	assert_int_equal(ASN1_STRING_length(sn), 16);
	bn = ASN1_INTEGER_to_BN(sn, NULL);
	assert_false(BN_is_negative(bn));
	BN_free(bn);
	assert_int_equal(asn1_time(X509_get0_notBefore(x)), now - 3600);
	assert_int_equal(asn1_time(X509_get0_notAfter(x)), now + 86400);

	san = X509_get_ext_d2i(x, NID_subject_alt_name, &crit, NULL);
	assert_non_null(san);
	assert_int_equal(crit, 0);
	assert_int_equal(sk_GENERAL_NAME_num(san), 1);
	gn = sk_GENERAL_NAME_value(san, 0);
	assert_int_equal(gn->type, GEN_DNS);
	assert_int_equal(ASN1_STRING_length(gn->d.dNSName), 11);
	assert_memory_equal(ASN1_STRING_get0_data(gn->d.dNSName), "api.example",
	    11);
	GENERAL_NAMES_free(san);
	bc = X509_get_ext_d2i(x, NID_basic_constraints, &crit, NULL);
	assert_non_null(bc);
	assert_int_equal(crit, 1);
	assert_false(bc->ca);
	BASIC_CONSTRAINTS_free(bc);
	assert_true(X509_get_extension_flags(x) & EXFLAG_KUSAGE);
	assert_int_equal(X509_get_key_usage(x), KU_DIGITAL_SIGNATURE);
	eku = X509_get_ext_d2i(x, NID_ext_key_usage, &crit, NULL);
	assert_non_null(eku);
	assert_int_equal(crit, 0);
	assert_int_equal(sk_ASN1_OBJECT_num(eku), 1);
	assert_int_equal(OBJ_obj2nid(sk_ASN1_OBJECT_value(eku, 0)),
	    NID_server_auth);
	sk_ASN1_OBJECT_pop_free(eku, ASN1_OBJECT_free);
	aki = X509_get_ext_d2i(x, NID_authority_key_identifier, &crit, NULL);
	assert_non_null(aki);
	assert_non_null(aki->keyid);
	assert_int_equal(ASN1_OCTET_STRING_cmp(aki->keyid,
			     X509_get0_subject_key_id(cax)),
	    0);
	AUTHORITY_KEYID_free(aki);
	assert_int_equal(X509_get_ext_count(x), 5);
	/* Clients accept it: chain, constraints, host name, purpose. */
	assert_int_equal(verify(cax, x, "api.example", now), X509_V_OK);
	assert_int_equal(verify(cax, x, "other.example", now),
	    X509_V_ERR_HOSTNAME_MISMATCH);
	X509_free(x);

	/* An address literal: iPAddress SAN (critical), no subject. */
	x = certs_leaf_mint(ca, k, "198.18.0.1", 1, now, why, sizeof(why));
	if (x == NULL)
		fail_msg("mint: %s", why);
	assert_int_equal(X509_NAME_entry_count(X509_get_subject_name(x)), 0);
	san = X509_get_ext_d2i(x, NID_subject_alt_name, &crit, NULL);
	assert_int_equal(crit, 1);
	gn = sk_GENERAL_NAME_value(san, 0);
	assert_int_equal(gn->type, GEN_IPADD);
	assert_memory_equal(ASN1_STRING_get0_data(gn->d.iPAddress),
	    "\xc6\x12\x00\x01", 4);
	GENERAL_NAMES_free(san);
	assert_int_equal(verify(cax, x, "198.18.0.1", now), X509_V_OK);
	X509_free(x);
	x = certs_leaf_mint(ca, k, "2001:2::5", 1, now, why, sizeof(why));
	assert_non_null(x);
	assert_int_equal(verify(cax, x, "2001:2::5", now), X509_V_OK);
	X509_free(x);

	/* Serials differ between two leaves of the same host. */
	{
		X509 *a = certs_leaf_mint(ca, k, "api.example", 1, now, why,
			 sizeof(why)),
		     *b = certs_leaf_mint(ca, k, "api.example", 1, now, why,
			 sizeof(why));

		assert_int_not_equal(ASN1_INTEGER_cmp(X509_get0_serialNumber(a),
					 X509_get0_serialNumber(b)),
		    0);
		X509_free(a);
		X509_free(b);
	}
	EVP_PKEY_free(k);
	certs_ca_free(ca);
}

static void
test_leaf_validity_clamp(void **state)
{
	time_t now = time(NULL);
	struct certs_ca *ca = gen(NULL, 0, 2, now);
	EVP_PKEY *k = certs_leaf_key_new(why, sizeof(why));
	X509 *cax = certs_ca_cert(ca), *x;
	time_t ca_nb = asn1_time(X509_get0_notBefore(cax));
	time_t ca_na = asn1_time(X509_get0_notAfter(cax));

	(void)state;
	/* leaf_days past the CA's end: ends with the CA. */
	x = certs_leaf_mint(ca, k, "a.example", 5, now, why, sizeof(why));
	assert_non_null(x);
	assert_int_equal(asn1_time(X509_get0_notAfter(x)), ca_na);
	assert_int_equal(asn1_time(X509_get0_notBefore(x)), now - 3600);
	X509_free(x);
	/* Minted just after the CA began: starts with the CA, not before. */
	x = certs_leaf_mint(ca, k, "a.example", 1, ca_nb + 60, why,
	    sizeof(why));
	assert_non_null(x);
	assert_int_equal(asn1_time(X509_get0_notBefore(x)), ca_nb);
	assert_int_equal(asn1_time(X509_get0_notAfter(x)), ca_nb + 60 + 86400);
	X509_free(x);
	/* An hour before the CA ends: one hour left, not leaf_days. */
	x = certs_leaf_mint(ca, k, "a.example", 1, ca_na - 3600, why,
	    sizeof(why));
	assert_non_null(x);
	assert_int_equal(asn1_time(X509_get0_notAfter(x)), ca_na);
	X509_free(x);
	/* The CA expired, or not yet valid: nothing minted. */
	assert_null(
	    certs_leaf_mint(ca, k, "a.example", 1, ca_na, why, sizeof(why)));
	assert_non_null(strstr(why, "the CA expired at"));
	assert_null(certs_leaf_mint(ca, k, "a.example", 1, ca_nb - 1, why,
	    sizeof(why)));
	assert_non_null(strstr(why, "not valid before"));
	/* leaf_days bounds. */
	assert_null(
	    certs_leaf_mint(ca, k, "a.example", 0, now, why, sizeof(why)));
	assert_null(certs_leaf_mint(ca, k, "a.example", CERTS_LEAF_MAX_DAYS + 1,
	    now, why, sizeof(why)));
	EVP_PKEY_free(k);
	certs_ca_free(ca);
}

static void
test_leaf_constraints(void **state)
{
	static const char *const permit[] = { "api.example" };
	static const char *const lit[] = { "198.18.0.1" };
	time_t now = time(NULL);
	struct certs_ca *ca = gen(permit, 1, 0, now), *ca4;
	EVP_PKEY *k = certs_leaf_key_new(why, sizeof(why));
	X509 *x;

	(void)state;
	/* Outside: another name, a parent, an address, a bad name. */
	assert_null(
	    certs_leaf_mint(ca, k, "evil.example", 1, now, why, sizeof(why)));
	assert_non_null(strstr(why, "evil.example"));
	assert_non_null(strstr(why, "name constraints"));
	assert_null(
	    certs_leaf_mint(ca, k, "example", 1, now, why, sizeof(why)));
	assert_null(
	    certs_leaf_mint(ca, k, "xapi.example", 1, now, why, sizeof(why)));
	assert_null(
	    certs_leaf_mint(ca, k, "198.18.0.1", 1, now, why, sizeof(why)));
	assert_non_null(strstr(why, "excluded"));
	assert_null(certs_leaf_mint(ca, k, "::1", 1, now, why, sizeof(why)));
	assert_null(
	    certs_leaf_mint(ca, k, "*.api.example", 1, now, why, sizeof(why)));
	assert_non_null(strstr(why, "wildcard"));
	assert_int_equal(certs_ca_permits(ca, "api.example", why, sizeof(why)),
	    0);
	assert_int_equal(certs_ca_permits(ca, "evil.example", why, sizeof(why)),
	    -1);
	/*
	 * RFC 5280 §4.2.1.10: a dNSName constraint covers the name's
	 * subdomains too (docs/interception.md says so).
	 */
	x = certs_leaf_mint(ca, k, "eu.api.example", 1, now, why, sizeof(why));
	assert_non_null(x);
	X509_free(x);

	/* A CA for an address literal alone signs no DNS name at all. */
	ca4 = gen(lit, 1, 0, now);
	assert_null(
	    certs_leaf_mint(ca4, k, "a.example", 1, now, why, sizeof(why)));
	assert_null(
	    certs_leaf_mint(ca4, k, "198.18.0.2", 1, now, why, sizeof(why)));
	assert_null(
	    certs_leaf_mint(ca4, k, "2001:2::1", 1, now, why, sizeof(why)));
	assert_non_null(x = certs_leaf_mint(ca4, k, "198.18.0.1", 1, now, why,
			    sizeof(why)));
	X509_free(x);
	certs_ca_free(ca4);
	EVP_PKEY_free(k);
	certs_ca_free(ca);
}

/*
 * What a leaked CA key could do: sign, by hand, a leaf for a name the
 * constraints leave out. The verifier refuses it.
 */
static void
test_hand_signed_outside(void **state)
{
	static const char *const permit[] = { "api.example" };
	time_t now = time(NULL);
	struct certs_ca *ca = gen(permit, 1, 0, now);
	X509 *cax = certs_ca_cert(ca);
	EVP_PKEY *cakey, *k = certs_leaf_key_new(why, sizeof(why));
	char dir[] = "/tmp/sluice-leaf-XXXXXX", path[64], cmd[96];
	const char *names[] = { "DNS:evil.example", "IP:198.18.0.9",
		"DNS:api.example.evil" };
	size_t i;
	BIO *b;

	(void)state;
	assert_non_null(mkdtemp(dir));
	assert_int_equal(certs_ca_write(ca, dir, why, sizeof(why)), 0);
	snprintf(path, sizeof(path), "%s/ca.key", dir);
	assert_non_null(b = BIO_new_file(path, "r"));
	assert_non_null(cakey = PEM_read_bio_PrivateKey(b, NULL, NULL, NULL));
	BIO_free(b);
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		X509 *x = X509_new();
		X509V3_CTX v3;
		X509_EXTENSION *e;

		X509_set_version(x, X509_VERSION_3);
		ASN1_INTEGER_set(X509_get_serialNumber(x), 99);
		X509_set_issuer_name(x, X509_get_subject_name(cax));
		X509_time_adj_ex(X509_getm_notBefore(x), 0, -60, &now);
		X509_time_adj_ex(X509_getm_notAfter(x), 1, 0, &now);
		X509_set_pubkey(x, k);
		X509V3_set_ctx_nodb(&v3);
		X509V3_set_ctx(&v3, cax, x, NULL, NULL, 0);
		e = X509V3_EXT_conf_nid(NULL, &v3, NID_subject_alt_name,
		    names[i]);
		assert_non_null(e);
		X509_add_ext(x, e, -1);
		X509_EXTENSION_free(e);
		assert_true(X509_sign(x, cakey, EVP_sha256()) > 0);
		/* The signature is good; the name is what fails. */
		assert_int_equal(X509_verify(x, X509_get0_pubkey(cax)), 1);
		if (verify(cax, x, NULL, now) == X509_V_OK)
			fail_msg("%s verified", names[i]);
		assert_true(verify(cax, x, NULL, now) ==
			X509_V_ERR_PERMITTED_VIOLATION ||
		    verify(cax, x, NULL, now) == X509_V_ERR_EXCLUDED_VIOLATION);
		X509_free(x);
	}
	EVP_PKEY_free(cakey);
	EVP_PKEY_free(k);
	certs_ca_free(ca);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
}

static void
test_cache_lru(void **state)
{
	time_t now = time(NULL);
	struct certs_ca *ca = gen(NULL, 0, 0, now);
	struct certs_cache *cc = certs_cache_new(ca, 3, 0, why, sizeof(why));
	struct certs_cache_stats st;
	X509 *a, *b, *c, *x;

	(void)state;
	assert_non_null(cc);
	assert_non_null(
	    a = certs_cache_get(cc, "a.example", now, why, sizeof(why)));
	assert_non_null(
	    b = certs_cache_get(cc, "b.example", now, why, sizeof(why)));
	assert_non_null(
	    c = certs_cache_get(cc, "c.example", now, why, sizeof(why)));
	/* A hit returns the same leaf, whatever the case of the name. */
	assert_ptr_equal(certs_cache_get(cc, "A.Example", now, why,
			     sizeof(why)),
	    a);
	/* Order now a, c, b: d evicts b. */
	assert_non_null(
	    certs_cache_get(cc, "d.example", now, why, sizeof(why)));
	certs_cache_stats(cc, &st);
	assert_int_equal(st.cs_hits, 1);
	assert_int_equal(st.cs_misses, 4);
	assert_int_equal(st.cs_evictions, 1);
	assert_int_equal(st.cs_leaves, 3);
	/* c and a still cached (hits), b minted again (miss, evicts d). */
	assert_ptr_equal(certs_cache_get(cc, "c.example", now, why,
			     sizeof(why)),
	    c);
	assert_ptr_equal(certs_cache_get(cc, "a.example", now, why,
			     sizeof(why)),
	    a);
	x = certs_cache_get(cc, "b.example", now, why, sizeof(why));
	assert_non_null(x);
	certs_cache_stats(cc, &st);
	assert_int_equal(st.cs_hits, 3);
	assert_int_equal(st.cs_misses, 5);
	assert_int_equal(st.cs_evictions, 2);
	/* d was the least recently used: gone. */
	certs_cache_get(cc, "d.example", now, why, sizeof(why));
	certs_cache_stats(cc, &st);
	assert_int_equal(st.cs_misses, 6);
	assert_int_equal(st.cs_evictions, 3);
	/* Bad name: not a lookup at all, nothing cached, nothing evicted. */
	assert_null(certs_cache_get(cc, "bad_name", now, why, sizeof(why)));
	assert_non_null(strstr(why, "'_'"));
	certs_cache_stats(cc, &st);
	assert_int_equal(st.cs_misses, 6);
	assert_int_equal(st.cs_mint_errors, 0);
	assert_int_equal(st.cs_evictions, 3);
	assert_int_equal(st.cs_leaves, 3);
	certs_cache_free(cc);
	certs_ca_free(ca);
}

static void
test_cache_bound_and_renew(void **state)
{
	time_t now = time(NULL);
	struct certs_ca *ca = gen(NULL, 0, 0, now);
	struct certs_cache *cc = certs_cache_new(ca, 8, 1, why, sizeof(why));
	struct certs_cache_stats st;
	char host[32];
	X509 *a, *b;
	int i;

	(void)state;
	for (i = 0; i < 100; i++) {
		snprintf(host, sizeof(host), "h%d.example", i);
		assert_non_null(
		    certs_cache_get(cc, host, now, why, sizeof(why)));
	}
	certs_cache_stats(cc, &st);
	assert_int_equal(st.cs_leaves, 8);
	assert_int_equal(st.cs_evictions, 92);
	/* The last eight are the ones kept. */
	for (i = 92; i < 100; i++) {
		snprintf(host, sizeof(host), "h%d.example", i);
		certs_cache_get(cc, host, now, why, sizeof(why));
	}
	certs_cache_stats(cc, &st);
	assert_int_equal(st.cs_hits, 8);
	assert_int_equal(st.cs_evictions, 92);
	/* Within 5 minutes of its end a leaf is minted again. */
	a = certs_cache_get(cc, "h99.example", now, why, sizeof(why));
	assert_ptr_equal(certs_cache_get(cc, "h99.example", now + 86400 - 301,
			     why, sizeof(why)),
	    a);
	b = certs_cache_get(cc, "h99.example", now + 86400 - 299, why,
	    sizeof(why));
	assert_non_null(b);
	assert_true(asn1_time(X509_get0_notAfter(b)) > now + 86400);
	certs_cache_stats(cc, &st);
	assert_int_equal(st.cs_leaves, 8);
	/* One shared key for every leaf. */
	assert_int_equal(EVP_PKEY_eq(X509_get0_pubkey(b), certs_cache_key(cc)),
	    1);
	/* The CA expired: a miss that fails to mint, and is counted. */
	assert_null(certs_cache_get(cc, "new.example", now + 31 * 86400, why,
	    sizeof(why)));
	assert_non_null(strstr(why, "the CA expired"));
	certs_cache_stats(cc, &st);
	assert_int_equal(st.cs_mint_errors, 1);
	assert_int_equal(st.cs_leaves, 8);
	certs_cache_free(cc);
	/* Sizes. */
	assert_null(certs_cache_new(ca, (size_t)1 << 21, 0, why, sizeof(why)));
	assert_null(
	    certs_cache_new(ca, 1, CERTS_LEAF_MAX_DAYS + 1, why, sizeof(why)));
	certs_ca_free(ca);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_leaf_fields),
		cmocka_unit_test(test_leaf_validity_clamp),
		cmocka_unit_test(test_leaf_constraints),
		cmocka_unit_test(test_hand_signed_outside),
		cmocka_unit_test(test_cache_lru),
		cmocka_unit_test(test_cache_bound_and_renew),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
