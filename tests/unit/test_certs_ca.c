/*
 * Unit tests for certs/ca.c, host.c, keys.c and show.c with real OpenSSL:
 * a generated CA parsed back extension by extension, the host-name rules,
 * the files (modes, no overwrite), loading under the secret-file rules
 * and the CA checks, the key helpers, and `certs show`'s text.
 */
#include <sys/mman.h>
#include <sys/stat.h>

#include <fcntl.h>
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
#include <openssl/core_names.h>
#include <openssl/param_build.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "certs/certs.h"

static char why[512];

struct dir {
	char path[256];
	char key[300];
	char pem[300];
};

static int
setup(void **state)
{
	struct dir *d = calloc(1, sizeof(*d));
	const char *tmp = getenv("TMPDIR");

	assert_non_null(d);
	snprintf(d->path, sizeof(d->path), "%s/sluice-certs-XXXXXX",
	    tmp != NULL ? tmp : "/tmp");
	assert_non_null(mkdtemp(d->path));
	snprintf(d->key, sizeof(d->key), "%s/ca.key", d->path);
	snprintf(d->pem, sizeof(d->pem), "%s/ca.pem", d->path);
	*state = d;
	return 0;
}

static int
teardown(void **state)
{
	struct dir *d = *state;
	char cmd[300];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->path);
	assert_int_equal(system(cmd), 0);
	free(d);
	return 0;
}

static struct certs_ca *
gen(const char *const *permit, size_t n, time_t now)
{
	struct certs_ca_params p = { NULL, 0, permit, n };
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

static void
write_file(const char *path, const void *buf, size_t len, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, buf, len), (ssize_t)len);
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
}

/* A NUL-terminated copy of n bytes (the BIO's data is not terminated). */
static char *
dup_bytes(const char *p, size_t n)
{
	char *s = malloc(n + 1);

	assert_non_null(s);
	memcpy(s, p, n);
	s[n] = '\0';
	return s;
}

/* PEM of a private key (PKCS#8) into a malloc'd string. */
static char *
key_pem(EVP_PKEY *k)
{
	BIO *b = BIO_new(BIO_s_mem());
	char *p, *s;
	long n;

	assert_non_null(b);
	assert_int_equal(PEM_write_bio_PKCS8PrivateKey(b, k, NULL, NULL, 0,
			     NULL, NULL),
	    1);
	n = BIO_get_mem_data(b, &p);
	s = dup_bytes(p, (size_t)n);
	BIO_free(b);
	return s;
}

static char *
cert_pem(X509 *x)
{
	BIO *b = BIO_new(BIO_s_mem());
	char *p, *s;
	long n;

	assert_non_null(b);
	assert_int_equal(PEM_write_bio_X509(b, x), 1);
	n = BIO_get_mem_data(b, &p);
	s = dup_bytes(p, (size_t)n);
	BIO_free(b);
	return s;
}

static void
test_generate_fields(void **state)
{
	static const char *const permit[] = { "api.anthropic.com",
		"api.openai.com" };
	time_t now = time(NULL);
	struct certs_ca *ca = gen(permit, 2, now);
	X509 *x = certs_ca_cert(ca);
	BASIC_CONSTRAINTS *bc;
	ASN1_BIT_STRING *ku;
	ASN1_OCTET_STRING *ski;
	NAME_CONSTRAINTS *nc;
	GENERAL_SUBTREE *st;
	const ASN1_INTEGER *sn;
	BIGNUM *bn;
	char cn[80];
	int crit;

	(void)state;
	assert_int_equal(X509_get_version(x), X509_VERSION_3);
	/* Self-signed, and the signature verifies with its own key. */
	assert_int_equal(X509_NAME_cmp(X509_get_subject_name(x),
			     X509_get_issuer_name(x)),
	    0);
	assert_int_equal(X509_verify(x, X509_get0_pubkey(x)), 1);
	assert_int_equal(X509_NAME_get_text_by_NID(X509_get_subject_name(x),
			     NID_commonName, cn, sizeof(cn)),
	    (int)strlen(CERTS_CA_DEFAULT_CN));
	assert_string_equal(cn, CERTS_CA_DEFAULT_CN);
	/* EC P-256 key. */
	assert_true(EVP_PKEY_is_a(X509_get0_pubkey(x), "EC"));
	assert_int_equal(EVP_PKEY_get_bits(X509_get0_pubkey(x)), 256);
	/* Validity: an hour back, 30 days on. */
	assert_int_equal(asn1_time(X509_get0_notBefore(x)), now - 3600);
	assert_int_equal(asn1_time(X509_get0_notAfter(x)), now + 30 * 86400);
	/* A 16-byte positive serial. */
	sn = X509_get0_serialNumber(x);
	assert_int_equal(ASN1_STRING_length(sn), 16);
	assert_non_null(bn = ASN1_INTEGER_to_BN(sn, NULL));
	assert_false(BN_is_negative(bn));
	assert_int_equal(BN_num_bytes(bn), 16);
	BN_free(bn);

	bc = X509_get_ext_d2i(x, NID_basic_constraints, &crit, NULL);
	assert_non_null(bc);
	assert_int_equal(crit, 1);
	assert_true(bc->ca);
	assert_non_null(bc->pathlen);
	assert_int_equal(ASN1_INTEGER_get(bc->pathlen), 0);
	BASIC_CONSTRAINTS_free(bc);

	ku = X509_get_ext_d2i(x, NID_key_usage, &crit, NULL);
	assert_non_null(ku);
	assert_int_equal(crit, 1);
	assert_int_equal(X509_get_key_usage(x), KU_KEY_CERT_SIGN | KU_CRL_SIGN);
	ASN1_BIT_STRING_free(ku);

	ski = X509_get_ext_d2i(x, NID_subject_key_identifier, &crit, NULL);
	assert_non_null(ski);
	assert_int_equal(crit, 0);
	assert_int_equal(ASN1_STRING_length(ski), 20);
	ASN1_OCTET_STRING_free(ski);

	/* Name constraints: the two names, and no address of either family. */
	nc = X509_get_ext_d2i(x, NID_name_constraints, &crit, NULL);
	assert_non_null(nc);
	assert_int_equal(crit, 1);
	assert_int_equal(sk_GENERAL_SUBTREE_num(nc->permittedSubtrees), 2);
	st = sk_GENERAL_SUBTREE_value(nc->permittedSubtrees, 0);
	assert_int_equal(st->base->type, GEN_DNS);
	assert_memory_equal(ASN1_STRING_get0_data(st->base->d.dNSName),
	    "api.anthropic.com", 17);
	st = sk_GENERAL_SUBTREE_value(nc->permittedSubtrees, 1);
	assert_int_equal(st->base->type, GEN_DNS);
	assert_memory_equal(ASN1_STRING_get0_data(st->base->d.dNSName),
	    "api.openai.com", 14);
	assert_int_equal(sk_GENERAL_SUBTREE_num(nc->excludedSubtrees), 2);
	st = sk_GENERAL_SUBTREE_value(nc->excludedSubtrees, 0);
	assert_int_equal(st->base->type, GEN_IPADD);
	assert_int_equal(ASN1_STRING_length(st->base->d.iPAddress), 8);
	assert_memory_equal(ASN1_STRING_get0_data(st->base->d.iPAddress),
	    "\0\0\0\0\0\0\0\0", 8);
	st = sk_GENERAL_SUBTREE_value(nc->excludedSubtrees, 1);
	assert_int_equal(ASN1_STRING_length(st->base->d.iPAddress), 32);
	NAME_CONSTRAINTS_free(nc);
	/* Exactly these four extensions. */
	assert_int_equal(X509_get_ext_count(x), 4);
	certs_ca_free(ca);
}

static void
test_generate_params(void **state)
{
	static const char *const lit[] = { "198.18.0.1", "198.18.0.1" };
	static const char *const bad[] = { "ok.example", "Bad.Example" };
	struct certs_ca_params p = { "my CA", 2, lit, 2 };
	struct certs_ca *ca;
	NAME_CONSTRAINTS *nc;
	GENERAL_SUBTREE *st;
	char cn[80];
	time_t now = time(NULL);

	(void)state;
	assert_non_null(ca = certs_ca_generate(&p, now, why, sizeof(why)));
	assert_int_equal(asn1_time(X509_get0_notAfter(certs_ca_cert(ca))),
	    now + 2 * 86400);
	X509_NAME_get_text_by_NID(X509_get_subject_name(certs_ca_cert(ca)),
	    NID_commonName, cn, sizeof(cn));
	assert_string_equal(cn, "my CA");
	/*
	 * An IPv4 literal (twice: one subtree): permitted with a full mask,
	 * IPv6 still excluded, DNS confined to "invalid".
	 */
	nc = X509_get_ext_d2i(certs_ca_cert(ca), NID_name_constraints, NULL,
	    NULL);
	assert_non_null(nc);
	assert_int_equal(sk_GENERAL_SUBTREE_num(nc->permittedSubtrees), 2);
	st = sk_GENERAL_SUBTREE_value(nc->permittedSubtrees, 0);
	assert_int_equal(st->base->type, GEN_IPADD);
	assert_memory_equal(ASN1_STRING_get0_data(st->base->d.iPAddress),
	    "\xc6\x12\x00\x01\xff\xff\xff\xff", 8);
	st = sk_GENERAL_SUBTREE_value(nc->permittedSubtrees, 1);
	assert_int_equal(st->base->type, GEN_DNS);
	assert_memory_equal(ASN1_STRING_get0_data(st->base->d.dNSName),
	    "invalid", 7);
	assert_int_equal(sk_GENERAL_SUBTREE_num(nc->excludedSubtrees), 1);
	st = sk_GENERAL_SUBTREE_value(nc->excludedSubtrees, 0);
	assert_int_equal(ASN1_STRING_length(st->base->d.iPAddress), 32);
	NAME_CONSTRAINTS_free(nc);
	certs_ca_free(ca);

	/* No permit list: no constraints at all. */
	p.cp_npermit = 0;
	assert_non_null(ca = certs_ca_generate(&p, now, why, sizeof(why)));
	assert_null(X509_get_ext_d2i(certs_ca_cert(ca), NID_name_constraints,
	    NULL, NULL));
	certs_ca_free(ca);

	/* A bad host is refused, named with its index and byte. */
	p.cp_permit = bad;
	p.cp_npermit = 2;
	assert_null(certs_ca_generate(&p, now, why, sizeof(why)));
	assert_non_null(strstr(why, "permitted host 1"));
	assert_non_null(strstr(why, "Bad.Example"));
	assert_non_null(strstr(why, "byte 0"));
	p.cp_npermit = 0;
	p.cp_days = CERTS_CA_MAX_DAYS + 1;
	assert_null(certs_ca_generate(&p, now, why, sizeof(why)));
	assert_non_null(strstr(why, "days"));
	p.cp_days = 0;
	p.cp_cn = "tab\there";
	assert_null(certs_ca_generate(&p, now, why, sizeof(why)));
	assert_non_null(strstr(why, "0x09"));
	p.cp_cn = "";
	assert_null(certs_ca_generate(&p, now, why, sizeof(why)));
}

static void
test_host_check(void **state)
{
	static const char *const good[] = { "a.b", "api.anthropic.com",
		"x-1.example", "localhost", "198.18.0.1", "2001:2::1", "::1",
		"a1.b2c", "xn--bcher-kva.example" };
	static const struct {
		const char *host, *needle;
	} bad[] = {
		{ "", "empty" },
		{ "*.example.com", "wildcard" },
		{ "example.com.", "empty label" },
		{ ".example.com", "empty label" },
		{ "a..b", "empty label" },
		{ "Example.com", "upper-case" },
		{ "-a.example", "starts with '-'" },
		{ "a-.example", "ends with '-'" },
		{ "a_b.example", "'_'" },
		{ "a b", "' '" },
		{ "a\x01"
		  "b",
		    "0x01" },
		{ "caf\xc3\xa9.example", "0xc3" },
		{ "10.1", "all-digit" },
		{ "256.1.1.1", "all-digit" },
		{ "0x7f.1", "all-digit" },
		{ "[::1]", "'['" },
		{ "fe80::1%eth0", "':'" },
		{ "a.b:443", "':'" },
	};
	char label[70], longname[300], canon[CERTS_HOST_MAX + 1];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		if (certs_host_check(good[i], why, sizeof(why)) != 0)
			fail_msg("%s: %s", good[i], why);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (certs_host_check(bad[i].host, why, sizeof(why)) != -1)
			fail_msg("accepted %s", bad[i].host);
		if (strstr(why, bad[i].needle) == NULL)
			fail_msg("%s: %s (no \"%s\")", bad[i].host, why,
			    bad[i].needle);
	}
	/* 63-byte label fine, 64 not; 253 bytes fine, 254 not. */
	memset(label, 'a', 63);
	snprintf(label + 63, sizeof(label) - 63, ".b");
	assert_int_equal(certs_host_check(label, why, sizeof(why)), 0);
	memset(label, 'a', 64);
	snprintf(label + 64, sizeof(label) - 64, ".b");
	assert_int_equal(certs_host_check(label, why, sizeof(why)), -1);
	assert_non_null(strstr(why, "63"));
	for (i = 0; i < 252; i += 2)
		memcpy(longname + i, "a.", 2);
	longname[252] = 'a';
	longname[253] = '\0';
	assert_int_equal(certs_host_check(longname, why, sizeof(why)), 0);
	longname[253] = 'a';
	longname[254] = '\0';
	assert_int_equal(certs_host_check(longname, why, sizeof(why)), -1);
	assert_non_null(strstr(why, "254 bytes"));

	/* Canonical forms: lower case, IPv6 as inet_ntop writes it. */
	assert_int_equal(certs_host_canon("API.Anthropic.COM", canon,
			     sizeof(canon), why, sizeof(why)),
	    0);
	assert_string_equal(canon, "api.anthropic.com");
	assert_int_equal(certs_host_canon("2001:0002:0000::0001", canon,
			     sizeof(canon), why, sizeof(why)),
	    0);
	assert_string_equal(canon, "2001:2::1");
	assert_int_equal(certs_host_canon("*.x.com", canon, sizeof(canon), why,
			     sizeof(why)),
	    -1);
}

static void
test_write_modes(void **state)
{
	struct dir *d = *state;
	struct certs_ca *ca = gen(NULL, 0, time(NULL));
	struct stat st;
	char buf[64];
	int fd;
	mode_t old;

	/* Whatever the umask, the modes are the contract. */
	old = umask(0077);
	assert_int_equal(certs_ca_write(ca, d->path, why, sizeof(why)), 0);
	umask(old);
	assert_int_equal(lstat(d->key, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0600);
	assert_int_equal(lstat(d->pem, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0644);
	fd = open(d->key, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(read(fd, buf, 27), 27);
	close(fd);
	assert_memory_equal(buf, "-----BEGIN PRIVATE KEY-----", 27);

	/* A second write is refused and leaves the first files alone. */
	assert_int_equal(lstat(d->key, &st), 0);
	assert_int_equal(certs_ca_write(ca, d->path, why, sizeof(why)), -1);
	assert_non_null(strstr(why, "ca.key"));
	assert_non_null(strstr(why, "refusing to overwrite"));
	assert_int_equal(unlink(d->key), 0);
	/* ca.pem alone in the way: refused, and no ca.key left behind. */
	assert_int_equal(certs_ca_write(ca, d->path, why, sizeof(why)), -1);
	assert_non_null(strstr(why, "ca.pem"));
	assert_int_equal(lstat(d->key, &st), -1);
	/* A symlink where ca.key goes is not followed. */
	assert_int_equal(unlink(d->pem), 0);
	assert_int_equal(symlink("/tmp/sluice-nonexistent-target", d->key), 0);
	assert_int_equal(certs_ca_write(ca, d->path, why, sizeof(why)), -1);
	assert_int_equal(lstat("/tmp/sluice-nonexistent-target", &st), -1);
	assert_int_equal(unlink(d->key), 0);
	/* A missing directory is named. */
	assert_int_equal(certs_ca_write(ca, "/nonexistent/dir", why,
			     sizeof(why)),
	    -1);
	assert_non_null(strstr(why, "/nonexistent/dir"));
	certs_ca_free(ca);
}

static void
test_write_cert_only(void **state)
{
	struct dir *d = *state;
	struct certs_ca *ca = gen(NULL, 0, time(NULL));
	struct stat st;
	char out[300];
	FILE *f;
	X509 *x;

	snprintf(out, sizeof(out), "%s/out.pem", d->path);
	write_file(out, "old", 3, 0600);
	assert_int_equal(certs_ca_write_cert(ca, out, why, sizeof(why)), 0);
	assert_int_equal(stat(out, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0644);
	assert_non_null(f = fopen(out, "r"));
	assert_non_null(x = PEM_read_X509(f, NULL, NULL, NULL));
	fclose(f);
	assert_int_equal(X509_cmp(x, certs_ca_cert(ca)), 0);
	X509_free(x);
	/* Nothing else in the directory: the key never touched the disk. */
	assert_int_equal(lstat(d->key, &st), -1);
	certs_ca_free(ca);
}

static void
test_load(void **state)
{
	struct dir *d = *state;
	time_t now = time(NULL);
	struct certs_ca *ca = gen(NULL, 0, now), *ca2, *l;
	char other[300], link[300];
	EVP_PKEY *k2;
	char *pem2;

	assert_int_equal(certs_ca_write(ca, d->path, why, sizeof(why)), 0);
	/* Good: same certificate back. */
	l = certs_ca_load(d->pem, d->key, CERTS_ANY_OWNER, now, why,
	    sizeof(why));
	if (l == NULL)
		fail_msg("load: %s", why);
	assert_int_equal(X509_cmp(certs_ca_cert(l), certs_ca_cert(ca)), 0);
	certs_ca_free(l);
	/* Owner: root, the given uid or the euid; others refused. */
	assert_int_equal(chown(d->key, 4242, 4242), 0);
	assert_null(certs_ca_load(d->pem, d->key, 1000, now, why, sizeof(why)));
	assert_non_null(strstr(why, "owned by uid 4242"));
	assert_non_null(
	    l = certs_ca_load(d->pem, d->key, 4242, now, why, sizeof(why)));
	certs_ca_free(l);
	assert_int_equal(chown(d->key, 0, 0), 0);
	/* Wrong mode. */
	assert_int_equal(chmod(d->key, 0640), 0);
	assert_null(certs_ca_load(d->pem, d->key, CERTS_ANY_OWNER, now, why,
	    sizeof(why)));
	assert_non_null(strstr(why, "mode 0640"));
	assert_non_null(strstr(why, d->key));
	assert_int_equal(chmod(d->key, 0600), 0);
	/* A symlink to the key is refused. */
	snprintf(link, sizeof(link), "%s/link.key", d->path);
	assert_int_equal(symlink(d->key, link), 0);
	assert_null(certs_ca_load(d->pem, link, CERTS_ANY_OWNER, now, why,
	    sizeof(why)));
	assert_non_null(strstr(why, "symbolic link"));
	/* Not a regular file. */
	assert_null(certs_ca_load(d->pem, d->path, CERTS_ANY_OWNER, now, why,
	    sizeof(why)));
	/* Expired, and not yet valid. */
	assert_null(certs_ca_load(d->pem, d->key, CERTS_ANY_OWNER,
	    now + 31 * 86400, why, sizeof(why)));
	assert_non_null(strstr(why, "expired at"));
	assert_non_null(strstr(why, d->pem));
	assert_null(certs_ca_load(d->pem, d->key, CERTS_ANY_OWNER, now - 7200,
	    why, sizeof(why)));
	assert_non_null(strstr(why, "not valid before"));
	/* Mismatched key: another CA's. */
	ca2 = gen(NULL, 0, now);
	snprintf(other, sizeof(other), "%s/other", d->path);
	assert_int_equal(mkdir(other, 0700), 0);
	assert_int_equal(certs_ca_write(ca2, other, why, sizeof(why)), 0);
	snprintf(other, sizeof(other), "%s/other/ca.key", d->path);
	assert_null(certs_ca_load(d->pem, other, CERTS_ANY_OWNER, now, why,
	    sizeof(why)));
	assert_non_null(strstr(why, "does not match"));
	certs_ca_free(ca2);
	/*
	 * A key whose embedded public key is the CA's but whose private
	 * scalar is another's: X509_check_private_key() alone accepts it
	 * (it compares public keys), and every leaf would fail at clients.
	 */
	{
		struct certs_ca *ca3 = gen(NULL, 0, now);
		EVP_PKEY *mine = X509_get0_pubkey(certs_ca_cert(ca));
		unsigned char pub[100];
		size_t publen = 0;
		BIGNUM *priv = NULL;
		OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
		OSSL_PARAM *params;
		EVP_PKEY_CTX *pc = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
		EVP_PKEY *franken = NULL, *k3;
		char *kp, *cp, k3path[300];
		BIO *b;

		snprintf(k3path, sizeof(k3path), "%s/k3", d->path);
		assert_int_equal(mkdir(k3path, 0700), 0);
		assert_int_equal(certs_ca_write(ca3, k3path, why, sizeof(why)),
		    0);
		snprintf(k3path, sizeof(k3path), "%s/k3/ca.key", d->path);
		assert_non_null(b = BIO_new_file(k3path, "r"));
		assert_non_null(
		    k3 = PEM_read_bio_PrivateKey(b, NULL, NULL, NULL));
		BIO_free(b);
		assert_int_equal(EVP_PKEY_get_bn_param(k3, "priv", &priv), 1);
		assert_int_equal(EVP_PKEY_get_octet_string_param(mine, "pub",
				     pub, sizeof(pub), &publen),
		    1);
		OSSL_PARAM_BLD_push_utf8_string(bld, "group", "prime256v1", 0);
		OSSL_PARAM_BLD_push_BN(bld, "priv", priv);
		OSSL_PARAM_BLD_push_octet_string(bld, "pub", pub, publen);
		params = OSSL_PARAM_BLD_to_param(bld);
		assert_int_equal(EVP_PKEY_fromdata_init(pc), 1);
		assert_int_equal(EVP_PKEY_fromdata(pc, &franken,
				     EVP_PKEY_KEYPAIR, params),
		    1);
		assert_int_equal(X509_check_private_key(certs_ca_cert(ca),
				     franken),
		    1);
		kp = key_pem(franken);
		cp = cert_pem(certs_ca_cert(ca));
		assert_null(certs_ca_from_mem((unsigned char *)cp, strlen(cp),
		    (unsigned char *)kp, strlen(kp), now, why, sizeof(why)));
		assert_non_null(strstr(why, "does not sign for"));
		free(kp);
		free(cp);
		OSSL_PARAM_free(params);
		OSSL_PARAM_BLD_free(bld);
		EVP_PKEY_CTX_free(pc);
		EVP_PKEY_free(franken);
		EVP_PKEY_free(k3);
		BN_clear_free(priv);
		certs_ca_free(ca3);
	}
	/* A non-CA certificate with its own key: a leaf. */
	{
		EVP_PKEY *lk = certs_leaf_key_new(why, sizeof(why));
		X509 *leaf = certs_leaf_mint(ca, lk, "a.example", 1, now, why,
		    sizeof(why));
		char *kp = key_pem(lk), *cp = cert_pem(leaf);

		assert_null(certs_ca_from_mem((unsigned char *)cp, strlen(cp),
		    (unsigned char *)kp, strlen(kp), now, why, sizeof(why)));
		assert_non_null(strstr(why, "not a CA"));
		free(kp);
		free(cp);
		X509_free(leaf);
		EVP_PKEY_free(lk);
	}
	/* Key of the wrong type (RSA). */
	k2 = EVP_RSA_gen(2048);
	assert_non_null(k2);
	pem2 = key_pem(k2);
	{
		char *cp = cert_pem(certs_ca_cert(ca));

		assert_null(certs_ca_from_mem((unsigned char *)cp, strlen(cp),
		    (unsigned char *)pem2, strlen(pem2), now, why,
		    sizeof(why)));
		assert_non_null(strstr(why, "not EC P-256 or Ed25519"));
		/* Garbage in either place. */
		assert_null(certs_ca_from_mem((const unsigned char *)"junk", 4,
		    (unsigned char *)pem2, strlen(pem2), now, why,
		    sizeof(why)));
		assert_non_null(strstr(why, "certificate: not a PEM or DER"));
		assert_null(certs_ca_from_mem((unsigned char *)cp, strlen(cp),
		    (const unsigned char *)"junk", 4, now, why, sizeof(why)));
		assert_non_null(strstr(why, "key: not an unencrypted"));
		free(cp);
	}
	free(pem2);
	EVP_PKEY_free(k2);
	certs_ca_free(ca);
}

static void
test_load_der_and_ed25519(void **state)
{
	time_t now = time(NULL);
	struct certs_ca *ca = gen(NULL, 0, now), *l;
	unsigned char *cder = NULL, *kder = NULL, *junk;
	int cl, kl;
	EVP_PKEY *ed;
	X509 *x;

	/* DER certificate and DER key. */
	cl = i2d_X509(certs_ca_cert(ca), &cder);
	assert_true(cl > 0);
	{
		/* Recover the CA key through a write to a temp dir. */
		struct dir *d = *state;
		EVP_PKEY *k;
		BIO *b;

		assert_int_equal(certs_ca_write(ca, d->path, why, sizeof(why)),
		    0);
		assert_non_null(b = BIO_new_file(d->key, "r"));
		assert_non_null(
		    k = PEM_read_bio_PrivateKey(b, NULL, NULL, NULL));
		BIO_free(b);
		kl = i2d_PrivateKey(k, &kder);
		assert_true(kl > 0);
		EVP_PKEY_free(k);
	}
	assert_non_null(l = certs_ca_from_mem(cder, (size_t)cl, kder,
			    (size_t)kl, now, why, sizeof(why)));
	certs_ca_free(l);
	/* Trailing bytes after DER are refused. */
	assert_non_null(junk = malloc((size_t)cl + 1));
	memcpy(junk, cder, (size_t)cl);
	junk[cl] = 0;
	assert_null(certs_ca_from_mem(junk, (size_t)cl + 1, kder, (size_t)kl,
	    now, why, sizeof(why)));
	assert_non_null(strstr(why, "trailing bytes"));
	free(junk);
	OPENSSL_free(cder);
	OPENSSL_clear_free(kder, (size_t)kl);
	certs_ca_free(ca);

	/* An Ed25519 CA made with plain OpenSSL calls loads too. */
	ed = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
	assert_non_null(ed);
	x = X509_new();
	X509_set_version(x, X509_VERSION_3);
	ASN1_INTEGER_set(X509_get_serialNumber(x), 7);
	X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_ASC,
	    (const unsigned char *)"ed", -1, -1, 0);
	X509_set_issuer_name(x, X509_get_subject_name(x));
	X509_time_adj_ex(X509_getm_notBefore(x), 0, -60, &now);
	X509_time_adj_ex(X509_getm_notAfter(x), 1, 0, &now);
	X509_set_pubkey(x, ed);
	{
		X509V3_CTX v3;
		X509_EXTENSION *e;

		X509V3_set_ctx_nodb(&v3);
		X509V3_set_ctx(&v3, x, x, NULL, NULL, 0);
		e = X509V3_EXT_conf_nid(NULL, &v3, NID_basic_constraints,
		    "critical,CA:TRUE");
		X509_add_ext(x, e, -1);
		X509_EXTENSION_free(e);
		e = X509V3_EXT_conf_nid(NULL, &v3, NID_key_usage,
		    "critical,keyCertSign");
		X509_add_ext(x, e, -1);
		X509_EXTENSION_free(e);
	}
	assert_true(X509_sign(x, ed, NULL) > 0);
	{
		char *cp = cert_pem(x), *kp = key_pem(ed);
		EVP_PKEY *lk = certs_leaf_key_new(why, sizeof(why));
		X509 *leaf;

		assert_non_null(l = certs_ca_from_mem((unsigned char *)cp,
				    strlen(cp), (unsigned char *)kp, strlen(kp),
				    now, why, sizeof(why)));
		/* And signs leaves with Ed25519. */
		leaf = certs_leaf_mint(l, lk, "a.example", 1, now, why,
		    sizeof(why));
		if (leaf == NULL)
			fail_msg("mint: %s", why);
		assert_int_equal(X509_verify(leaf, ed), 1);
		X509_free(leaf);
		EVP_PKEY_free(lk);
		certs_ca_free(l);
		free(cp);
		free(kp);
	}
	X509_free(x);
	EVP_PKEY_free(ed);
}

static void
test_key_helpers(void **state)
{
	struct dir *d = *state;
	EVP_PKEY *ed = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519"), *k;
	char priv[300], pub[300], *kp, pw[] = "pw";
	BIO *b;

	snprintf(priv, sizeof(priv), "%s/ed.key", d->path);
	snprintf(pub, sizeof(pub), "%s/ed.pub", d->path);
	kp = key_pem(ed);
	write_file(priv, kp, strlen(kp), 0600);
	assert_non_null(b = BIO_new_file(pub, "w"));
	assert_int_equal(PEM_write_bio_PUBKEY(b, ed), 1);
	BIO_free(b);

	assert_non_null(k = certs_ed25519_key_load(priv, CERTS_ANY_OWNER, why,
			    sizeof(why)));
	assert_int_equal(EVP_PKEY_eq(k, ed), 1);
	EVP_PKEY_free(k);
	assert_non_null(k = certs_ed25519_pubkey_load(pub, why, sizeof(why)));
	assert_int_equal(EVP_PKEY_eq(k, ed), 1);
	EVP_PKEY_free(k);
	/* The private key in the public file, and vice versa. */
	assert_null(certs_ed25519_pubkey_load(priv, why, sizeof(why)));
	assert_non_null(strstr(why, "not a PEM public key"));
	assert_int_equal(chmod(pub, 0600), 0);
	assert_null(
	    certs_ed25519_key_load(pub, CERTS_ANY_OWNER, why, sizeof(why)));
	assert_non_null(strstr(why, pub));
	/* Secret rules apply to the private key. */
	assert_int_equal(chmod(priv, 0644), 0);
	assert_null(
	    certs_ed25519_key_load(priv, CERTS_ANY_OWNER, why, sizeof(why)));
	assert_non_null(strstr(why, "mode 0644"));
	/* A P-256 key where Ed25519 is wanted. */
	{
		EVP_PKEY *ec = EVP_EC_gen("P-256");
		char *ep = key_pem(ec);

		assert_null(certs_pkey_from_pem((unsigned char *)ep, strlen(ep),
		    CERTS_KEY_ED25519, why, sizeof(why)));
		assert_non_null(strstr(why, "not Ed25519"));
		assert_non_null(
		    k = certs_pkey_from_pem((unsigned char *)ep, strlen(ep),
			CERTS_KEY_P256, why, sizeof(why)));
		EVP_PKEY_free(k);
		free(ep);
		EVP_PKEY_free(ec);
	}
	/* An encrypted key is refused without asking for a password. */
	{
		BIO *eb = BIO_new(BIO_s_mem());
		char *p;
		long n;

		assert_int_equal(PEM_write_bio_PKCS8PrivateKey(eb, ed,
				     EVP_aes_128_cbc(), NULL, 0, NULL, pw),
		    1);
		n = BIO_get_mem_data(eb, &p);
		assert_null(certs_pkey_from_pem((unsigned char *)p, (size_t)n,
		    CERTS_KEY_ED25519, why, sizeof(why)));
		BIO_free(eb);
	}
	free(kp);
	EVP_PKEY_free(ed);
}

static void
test_show(void **state)
{
	static const char *const permit[] = { "api.anthropic.com",
		"2001:2::1" };
	struct certs_ca *ca = gen(permit, 2, 1796169600); /* 2026-12-02 */
	char buf[2048], pin[45], line[80], small[16];
	int n;

	(void)state;
	n = certs_show(certs_ca_cert(ca), buf, sizeof(buf));
	assert_true(n > 0 && (size_t)n < sizeof(buf));
	assert_int_equal((size_t)n, strlen(buf));
	assert_non_null(strstr(buf, "subject: CN=sluice local CA\n"));
	assert_non_null(strstr(buf, "issuer: CN=sluice local CA\n"));
	assert_non_null(strstr(buf, "not_before: 2026-12-01T23:00:00Z\n"));
	assert_non_null(strstr(buf, "not_after: 2027-01-01T00:00:00Z\n"));
	assert_non_null(strstr(buf, "key: EC P-256\n"));
	assert_non_null(strstr(buf, "ca: true, pathlen 0\n"));
	assert_non_null(strstr(buf, "permitted: DNS:api.anthropic.com\n"));
	assert_non_null(strstr(buf, "permitted: IP:2001:2::1/128\n"));
	assert_non_null(strstr(buf, "excluded: IP:0.0.0.0/0\n"));
	assert_null(strstr(buf, "excluded: IP::/0"));
	assert_int_equal(certs_spki_pin(certs_ca_cert(ca), pin), 0);
	assert_int_equal(strlen(pin), 44);
	snprintf(line, sizeof(line), "spki_sha256: %s\n", pin);
	assert_non_null(strstr(buf, line));
	/* Truncation is reported snprintf-style and stays terminated. */
	assert_int_equal(certs_show(certs_ca_cert(ca), small, sizeof(small)),
	    n);
	assert_int_equal(strlen(small), sizeof(small) - 1);
	certs_ca_free(ca);

	ca = gen(NULL, 0, time(NULL));
	certs_show(certs_ca_cert(ca), buf, sizeof(buf));
	assert_non_null(strstr(buf, "constraints: none"));
	certs_ca_free(ca);
}

/* A memory file holding text, with mode; its descriptor. */
static int
memfile(const char *text, mode_t mode)
{
	int fd = memfd_create("test-secret", MFD_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(fchmod(fd, mode), 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	return fd;
}

/*
 * certs_trust_memfd: /proc/self/fd/N is a link, refused like any other,
 * until the memory file behind it was named; then exactly that file (and
 * still under the mode rule) is read through it, and nothing else.
 */
static void
test_trusted_memfd(void **state)
{
	char path[64], other_path[64], link_path[300];
	unsigned char *out = NULL;
	size_t len = 0;
	int fd, other, open_fd;
	struct dir *d = *state;

	fd = memfile("s3cret\n", 0600);
	other = memfile("other\n", 0600);
	open_fd = memfile("open\n", 0644);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	snprintf(other_path, sizeof(other_path), "/proc/self/fd/%d", other);

	assert_int_equal(certs_read_secret(path, CERTS_ANY_OWNER, &out, &len,
			     why, sizeof(why)),
	    -1);
	assert_non_null(strstr(why, "symbolic link"));

	assert_int_equal(certs_trust_memfd(fd), 0);
	assert_int_equal(certs_trust_memfd(open_fd), 0);
	assert_int_equal(certs_read_secret(path, CERTS_ANY_OWNER, &out, &len,
			     why, sizeof(why)),
	    0);
	assert_int_equal(len, 6);
	assert_memory_equal(out, "s3cret", 6);
	certs_secret_free(out, len + 1);
	out = NULL;

	/* Another memory file, not named: still a refused link. */
	assert_int_equal(certs_read_secret(other_path, CERTS_ANY_OWNER, &out,
			     &len, why, sizeof(why)),
	    -1);
	assert_non_null(strstr(why, "symbolic link"));
	/* A named one readable by others: the mode rule still holds. */
	snprintf(other_path, sizeof(other_path), "/proc/self/fd/%d", open_fd);
	assert_int_equal(certs_read_secret(other_path, CERTS_ANY_OWNER, &out,
			     &len, why, sizeof(why)),
	    -1);
	assert_non_null(strstr(why, "group/other"));
	/* A link elsewhere to the trusted file's name: refused. */
	snprintf(link_path, sizeof(link_path), "%s/link", d->path);
	assert_int_equal(symlink(path, link_path), 0);
	assert_int_equal(certs_read_secret(link_path, CERTS_ANY_OWNER, &out,
			     &len, why, sizeof(why)),
	    -1);
	assert_non_null(strstr(why, "symbolic link"));
	unlink(link_path);
	close(fd);
	close(other);
	close(open_fd);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_trusted_memfd, setup,
		    teardown),
		cmocka_unit_test(test_generate_fields),
		cmocka_unit_test(test_generate_params),
		cmocka_unit_test(test_host_check),
		cmocka_unit_test_setup_teardown(test_write_modes, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_write_cert_only, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_load, setup, teardown),
		cmocka_unit_test_setup_teardown(test_load_der_and_ed25519,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_key_helpers, setup,
		    teardown),
		cmocka_unit_test(test_show),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
