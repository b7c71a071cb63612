/*
 * The local CA of interception: generation (EC P-256, name constraints
 * permitting only the intercepted hosts), the files (ca.key never
 * overwritten, mode 0600), loading with the CA checks, and the name
 * constraint check that leaf minting runs before it signs. Which hosts
 * are intercepted is the caller's business; this file only encodes them.
 */
#include <sys/stat.h>

#include <arpa/inet.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "certs/certs.h"
#include "certs/internal.h"

/* Owned by its creator; the key is freed (and wiped) with the CA. */
struct certs_ca {
	X509 *ca_cert;
	EVP_PKEY *ca_key;
	NAME_CONSTRAINTS *ca_nc; /* decoded from ca_cert, or NULL */
	time_t ca_not_before;
	time_t ca_not_after;
};

X509 *
certs_ca_cert(const struct certs_ca *ca)
{
	return ca->ca_cert;
}

void
certs_ca_free(struct certs_ca *ca)
{
	if (ca == NULL)
		return;
	X509_free(ca->ca_cert);
	/*
	 * EVP_PKEY_free wipes the private key: OpenSSL frees the EC scalar
	 * with BN_clear_free and an Ed25519 key with a clearing free.
	 */
	EVP_PKEY_free(ca->ca_key);
	NAME_CONSTRAINTS_free(ca->ca_nc);
	free(ca);
}

/* A subtree for base (taken), appended to *sk (created on first use). */
static int
add_subtree(STACK_OF(GENERAL_SUBTREE) * *sk, GENERAL_NAME *base)
{
	GENERAL_SUBTREE *st;
	int i;

	if (base == NULL)
		return -1;
	if (*sk == NULL && (*sk = sk_GENERAL_SUBTREE_new_null()) == NULL) {
		GENERAL_NAME_free(base);
		return -1;
	}
	/* A duplicate is dropped: the same name twice means nothing more. */
	for (i = 0; i < sk_GENERAL_SUBTREE_num(*sk); i++)
		if (GENERAL_NAME_cmp(sk_GENERAL_SUBTREE_value(*sk, i)->base,
			base) == 0) {
			GENERAL_NAME_free(base);
			return 0;
		}
	if ((st = GENERAL_SUBTREE_new()) == NULL) {
		GENERAL_NAME_free(base);
		return -1;
	}
	GENERAL_NAME_free(st->base);
	st->base = base;
	if (sk_GENERAL_SUBTREE_push(*sk, st) == 0) {
		GENERAL_SUBTREE_free(st);
		return -1;
	}
	return 0;
}

static GENERAL_NAME *
gn_dns(const char *name)
{
	GENERAL_NAME *gn;
	ASN1_IA5STRING *s;

	if ((s = ASN1_IA5STRING_new()) == NULL)
		return NULL;
	if (ASN1_STRING_set(s, name, (int)strlen(name)) != 1 ||
	    (gn = GENERAL_NAME_new()) == NULL) {
		ASN1_IA5STRING_free(s);
		return NULL;
	}
	GENERAL_NAME_set0_value(gn, GEN_DNS, s);
	return gn;
}

/* An iPAddress constraint: addr (alen bytes) then the mask, all ones. */
static GENERAL_NAME *
gn_ip(const unsigned char *addr, int alen, int full_mask)
{
	unsigned char b[32];
	GENERAL_NAME *gn;
	ASN1_OCTET_STRING *s;

	memset(b, 0, sizeof(b));
	if (addr != NULL)
		memcpy(b, addr, (size_t)alen);
	if (full_mask)
		memset(b + alen, 0xff, (size_t)alen);
	if ((s = ASN1_OCTET_STRING_new()) == NULL)
		return NULL;
	if (ASN1_OCTET_STRING_set(s, b, alen * 2) != 1 ||
	    (gn = GENERAL_NAME_new()) == NULL) {
		ASN1_OCTET_STRING_free(s);
		return NULL;
	}
	GENERAL_NAME_set0_value(gn, GEN_IPADD, s);
	return gn;
}

/*
 * The nameConstraints of a CA permitting exactly hosts[0..n). Address
 * families with no permitted literal are excluded whole; when no DNS name
 * is permitted, the only DNS subtree permitted is "invalid" (RFC 6761:
 * never a real name), so that a CA for an address literal alone cannot
 * sign any DNS name either.
 */
static int
add_constraints(X509 *x, const char *const *hosts, size_t n, char *why,
    size_t whylen)
{
	NAME_CONSTRAINTS *nc;
	unsigned char a[16];
	int v4 = 0, v6 = 0, dns = 0, rc = -1;
	size_t i;
	char sub[256];

	if ((nc = NAME_CONSTRAINTS_new()) == NULL) {
		certs_err(why, whylen, "out of memory");
		return -1;
	}
	for (i = 0; i < n; i++) {
		GENERAL_NAME *gn;

		if (certs_host_check(hosts[i], sub, sizeof(sub)) == -1) {
			snprintf(why, whylen, "permitted host %zu: %s", i, sub);
			goto out;
		}
		if (inet_pton(AF_INET, hosts[i], a) == 1) {
			gn = gn_ip(a, 4, 1);
			v4 = 1;
		} else if (inet_pton(AF_INET6, hosts[i], a) == 1) {
			gn = gn_ip(a, 16, 1);
			v6 = 1;
		} else {
			gn = gn_dns(hosts[i]);
			dns = 1;
		}
		if (add_subtree(&nc->permittedSubtrees, gn) == -1)
			goto oom;
	}
	if (!dns &&
	    add_subtree(&nc->permittedSubtrees, gn_dns("invalid")) == -1)
		goto oom;
	if (!v4 && add_subtree(&nc->excludedSubtrees, gn_ip(NULL, 4, 0)) == -1)
		goto oom;
	if (!v6 && add_subtree(&nc->excludedSubtrees, gn_ip(NULL, 16, 0)) == -1)
		goto oom;
	/* Critical, as RFC 5280 §4.2.1.10 requires. */
	if (X509_add1_ext_i2d(x, NID_name_constraints, nc, 1,
		X509V3_ADD_DEFAULT) != 1)
		goto oom;
	rc = 0;
	goto out;
oom:
	certs_err(why, whylen, "cannot build the name constraints");
out:
	NAME_CONSTRAINTS_free(nc);
	return rc;
}

/* A CN for the CA: 1..64 printable ASCII bytes (X.520 ub-common-name). */
static int
cn_check(const char *cn, char *why, size_t whylen)
{
	size_t i, n = strlen(cn);

	if (n == 0 || n > 64) {
		snprintf(why, whylen, "CA name: %zu bytes (1 to 64)", n);
		return -1;
	}
	for (i = 0; i < n; i++)
		if ((unsigned char)cn[i] < 0x20 ||
		    (unsigned char)cn[i] > 0x7e) {
			snprintf(why, whylen,
			    "CA name: byte 0x%02x at %zu is not printable ASCII",
			    (unsigned char)cn[i], i);
			return -1;
		}
	return 0;
}

/* Fill the derived fields of a CA whose certificate and key are set. */
static int
ca_finish(struct certs_ca *ca, char *why, size_t whylen)
{
	int crit = -1;

	if (certs_asn1_time(X509_get0_notBefore(ca->ca_cert),
		&ca->ca_not_before) == -1 ||
	    certs_asn1_time(X509_get0_notAfter(ca->ca_cert),
		&ca->ca_not_after) == -1) {
		certs_err(why, whylen,
		    "the certificate's validity is malformed");
		return -1;
	}
	ca->ca_nc =
	    X509_get_ext_d2i(ca->ca_cert, NID_name_constraints, &crit, NULL);
	if (ca->ca_nc == NULL && crit != -1) {
		/* -2: more than one; else present but undecodable. */
		certs_err(why, whylen,
		    crit == -2 ? "more than one nameConstraints extension" :
				 "malformed nameConstraints extension");
		return -1;
	}
	ERR_clear_error();
	return 0;
}

struct certs_ca *
certs_ca_generate(const struct certs_ca_params *p, time_t now, char *why,
    size_t whylen)
{
	const char *cn = p->cp_cn != NULL ? p->cp_cn : CERTS_CA_DEFAULT_CN;
	unsigned days = p->cp_days != 0 ? p->cp_days : CERTS_CA_DEFAULT_DAYS;
	struct certs_ca *ca;
	X509_NAME *name;
	X509 *x;

	if (cn_check(cn, why, whylen) == -1)
		return NULL;
	if (days > CERTS_CA_MAX_DAYS) {
		snprintf(why, whylen, "CA validity of %u days (at most %d)",
		    days, CERTS_CA_MAX_DAYS);
		return NULL;
	}
	if (p->cp_npermit > CERTS_CA_MAX_PERMIT) {
		snprintf(why, whylen, "%zu permitted hosts (at most %d)",
		    p->cp_npermit, CERTS_CA_MAX_PERMIT);
		return NULL;
	}
	if ((ca = calloc(1, sizeof(*ca))) == NULL) {
		snprintf(why, whylen, "out of memory");
		return NULL;
	}
	if ((ca->ca_key = EVP_EC_gen("P-256")) == NULL) {
		certs_err(why, whylen, "cannot generate the CA key");
		goto fail;
	}
	if ((x = ca->ca_cert = X509_new()) == NULL ||
	    X509_set_version(x, X509_VERSION_3) != 1 ||
	    certs_set_serial(x) == -1 ||
	    (name = X509_get_subject_name(x)) == NULL ||
	    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
		(const unsigned char *)cn, -1, -1, 0) != 1 ||
	    X509_set_issuer_name(x, name) != 1 ||
	    /* An hour back, for clients whose clock runs behind ours. */
	    X509_time_adj_ex(X509_getm_notBefore(x), 0, -3600, &now) == NULL ||
	    X509_time_adj_ex(X509_getm_notAfter(x), (int)days, 0, &now) ==
		NULL ||
	    X509_set_pubkey(x, ca->ca_key) != 1) {
		certs_err(why, whylen, "cannot build the CA certificate");
		goto fail;
	}
	if (certs_add_ext(x, x, NID_basic_constraints,
		"critical,CA:TRUE,pathlen:0") == -1 ||
	    certs_add_ext(x, x, NID_key_usage,
		"critical,keyCertSign,cRLSign") == -1 ||
	    certs_add_ext(x, x, NID_subject_key_identifier, "hash") == -1) {
		certs_err(why, whylen, "cannot add the CA extensions");
		goto fail;
	}
	if (p->cp_npermit > 0 &&
	    add_constraints(x, p->cp_permit, p->cp_npermit, why, whylen) == -1)
		goto fail;
	if (certs_sign(x, ca->ca_key) == -1) {
		certs_err(why, whylen, "cannot sign the CA certificate");
		goto fail;
	}
	if (ca_finish(ca, why, whylen) == -1)
		goto fail;
	return ca;
fail:
	certs_ca_free(ca);
	return NULL;
}

static int
write_all(int fd, const char *p, size_t n)
{
	ssize_t w;

	while (n > 0) {
		if ((w = write(fd, p, n)) == -1) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/*
 * Create name in dfd exclusively with mode, write the bytes of bio, fsync.
 * 0 or -1 with why (errno-based, naming dir/name).
 */
static int
write_new(int dfd, const char *dir, const char *name, mode_t mode, BIO *bio,
    char *why, size_t whylen)
{
	char *data;
	long n = BIO_get_mem_data(bio, &data);
	int fd;

	fd = openat(dfd, name,
	    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
	if (fd == -1) {
		snprintf(why, whylen, "%s/%s: %s", dir, name,
		    errno == EEXIST ? "exists (refusing to overwrite it)" :
				      strerror(errno));
		return -1;
	}
	/* The umask may have taken bits off; the mode is part of the contract.
	 */
	if (fchmod(fd, mode) == -1 || n < 0 ||
	    write_all(fd, data, (size_t)n) == -1 || fsync(fd) == -1) {
		snprintf(why, whylen, "%s/%s: %s", dir, name, strerror(errno));
		close(fd);
		(void)unlinkat(dfd, name, 0);
		return -1;
	}
	if (close(fd) == -1) {
		snprintf(why, whylen, "%s/%s: %s", dir, name, strerror(errno));
		(void)unlinkat(dfd, name, 0);
		return -1;
	}
	return 0;
}

/* Wipe a memory BIO's buffer, then free it. */
static void
bio_wipe_free(BIO *bio)
{
	char *data;
	long n;

	if (bio == NULL)
		return;
	if ((n = BIO_get_mem_data(bio, &data)) > 0)
		OPENSSL_cleanse(data, (size_t)n);
	BIO_free(bio);
}

int
certs_ca_write(const struct certs_ca *ca, const char *dir, char *why,
    size_t whylen)
{
	BIO *kb = NULL, *cb = NULL;
	int dfd, rc = -1;

	if ((kb = BIO_new(BIO_s_secmem())) == NULL ||
	    (cb = BIO_new(BIO_s_mem())) == NULL ||
	    PEM_write_bio_PKCS8PrivateKey(kb, ca->ca_key, NULL, NULL, 0, NULL,
		NULL) != 1 ||
	    PEM_write_bio_X509(cb, ca->ca_cert) != 1) {
		certs_err(why, whylen, "cannot encode the CA");
		goto out;
	}
	if ((dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) == -1) {
		snprintf(why, whylen, "%s: %s", dir, strerror(errno));
		goto out;
	}
	if (write_new(dfd, dir, "ca.key", 0600, kb, why, whylen) == 0) {
		if (write_new(dfd, dir, "ca.pem", 0644, cb, why, whylen) == 0)
			rc = 0;
		else
			(void)unlinkat(dfd, "ca.key", 0);
	}
	if (rc == 0 && fsync(dfd) == -1) {
		snprintf(why, whylen, "%s: %s", dir, strerror(errno));
		(void)unlinkat(dfd, "ca.key", 0);
		(void)unlinkat(dfd, "ca.pem", 0);
		rc = -1;
	}
	close(dfd);
out:
	bio_wipe_free(kb);
	BIO_free(cb);
	return rc;
}

int
certs_ca_write_cert(const struct certs_ca *ca, const char *path, char *why,
    size_t whylen)
{
	char tmp[PATH_MAX], *data;
	BIO *cb;
	long n;
	int fd = -1, rc = -1;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path) >=
	    sizeof(tmp)) {
		snprintf(why, whylen, "%s: path too long", path);
		return -1;
	}
	if ((cb = BIO_new(BIO_s_mem())) == NULL ||
	    PEM_write_bio_X509(cb, ca->ca_cert) != 1 ||
	    (n = BIO_get_mem_data(cb, &data)) <= 0) {
		certs_err(why, whylen, "cannot encode the CA certificate");
		goto out;
	}
	if ((fd = mkostemp(tmp, O_CLOEXEC)) == -1) {
		snprintf(why, whylen, "%s: %s", tmp, strerror(errno));
		goto out;
	}
	if (fchmod(fd, 0644) == -1 || write_all(fd, data, (size_t)n) == -1 ||
	    fsync(fd) == -1 || close(fd) == -1) {
		snprintf(why, whylen, "%s: %s", tmp, strerror(errno));
		if (fd != -1)
			(void)close(fd);
		(void)unlink(tmp);
		goto out;
	}
	if (rename(tmp, path) == -1) {
		snprintf(why, whylen, "%s: %s", path, strerror(errno));
		(void)unlink(tmp);
		goto out;
	}
	rc = 0;
out:
	BIO_free(cb);
	return rc;
}

/* A certificate, PEM or DER (nothing after the DER). NULL with why. */
static X509 *
cert_from_mem(const unsigned char *buf, size_t len, char *why, size_t whylen)
{
	const unsigned char *p = buf;
	X509 *x = NULL;
	BIO *bio;

	if (len == 0 || len > CERTS_MAX_FILE) {
		snprintf(why, whylen, "empty or larger than %d bytes",
		    CERTS_MAX_FILE);
		return NULL;
	}
	if (certs_is_pem(buf, len)) {
		if ((bio = BIO_new_mem_buf(buf, (int)len)) != NULL) {
			x = PEM_read_bio_X509(bio, NULL, NULL, NULL);
			BIO_free(bio);
		}
	} else {
		x = d2i_X509(NULL, &p, (long)len);
		if (x != NULL && p != buf + len) {
			X509_free(x);
			ERR_clear_error();
			snprintf(why, whylen,
			    "trailing bytes after the DER certificate");
			return NULL;
		}
	}
	if (x == NULL) {
		ERR_clear_error();
		snprintf(why, whylen, "not a PEM or DER certificate");
	}
	return x;
}

/* 0 when a signature made with key verifies under pub. */
static int
key_signs_for(EVP_PKEY *key, EVP_PKEY *pub)
{
	static const unsigned char msg[] = "sluice certs key check";
	unsigned char sig[256];
	size_t siglen = sizeof(sig);
	EVP_MD_CTX *mc;
	const EVP_MD *md = EVP_PKEY_is_a(key, "ED25519") ? NULL : EVP_sha256();
	int ok = 0;

	if (pub == NULL || (mc = EVP_MD_CTX_new()) == NULL)
		return -1;
	if (EVP_DigestSignInit(mc, NULL, md, NULL, key) == 1 &&
	    EVP_DigestSign(mc, sig, &siglen, msg, sizeof(msg)) == 1 &&
	    EVP_MD_CTX_reset(mc) == 1 &&
	    EVP_DigestVerifyInit(mc, NULL, md, NULL, pub) == 1 &&
	    EVP_DigestVerify(mc, sig, siglen, msg, sizeof(msg)) == 1)
		ok = 1;
	EVP_MD_CTX_free(mc);
	return ok ? 0 : -1;
}

struct certs_ca *
certs_ca_from_mem(const unsigned char *cert, size_t certlen,
    const unsigned char *key, size_t keylen, time_t now, char *why,
    size_t whylen)
{
	struct certs_ca *ca;
	uint32_t flags;
	char sub[256], t[32];

	if ((ca = calloc(1, sizeof(*ca))) == NULL) {
		snprintf(why, whylen, "out of memory");
		return NULL;
	}
	if ((ca->ca_cert = cert_from_mem(cert, certlen, sub, sizeof(sub))) ==
	    NULL) {
		snprintf(why, whylen, "certificate: %s", sub);
		goto fail;
	}
	ca->ca_key = certs_pkey_from_pem(key, keylen,
	    CERTS_KEY_P256 | CERTS_KEY_ED25519, sub, sizeof(sub));
	if (ca->ca_key == NULL) {
		snprintf(why, whylen, "key: %s", sub);
		goto fail;
	}
	if (X509_check_private_key(ca->ca_cert, ca->ca_key) != 1) {
		ERR_clear_error();
		snprintf(why, whylen,
		    "key: does not match the certificate's public key");
		goto fail;
	}
	/*
	 * X509_check_private_key() compares public keys only, and a key
	 * file may carry a public key that does not belong to its private
	 * scalar (the fuzzer made one): every leaf would then fail at the
	 * client. A test signature proves the pair.
	 */
	if (key_signs_for(ca->ca_key, X509_get0_pubkey(ca->ca_cert)) == -1) {
		ERR_clear_error();
		snprintf(why, whylen,
		    "key: its private half does not sign for the certificate's "
		    "public key");
		goto fail;
	}
	flags = X509_get_extension_flags(ca->ca_cert);
	if (flags & EXFLAG_INVALID) {
		snprintf(why, whylen, "certificate: malformed extensions");
		goto fail;
	}
	if (!(flags & EXFLAG_BCONS) || !(flags & EXFLAG_CA)) {
		snprintf(why, whylen,
		    "certificate: not a CA (no basicConstraints CA:TRUE)");
		goto fail;
	}
	if (!(flags & EXFLAG_KUSAGE) ||
	    !(X509_get_key_usage(ca->ca_cert) & KU_KEY_CERT_SIGN)) {
		snprintf(why, whylen,
		    "certificate: keyUsage does not include keyCertSign");
		goto fail;
	}
	if (ca_finish(ca, sub, sizeof(sub)) == -1) {
		snprintf(why, whylen, "certificate: %s", sub);
		goto fail;
	}
	if (now < ca->ca_not_before) {
		certs_fmt_time(ca->ca_not_before, t, sizeof(t));
		snprintf(why, whylen, "certificate: not valid before %s", t);
		goto fail;
	}
	if (now >= ca->ca_not_after) {
		certs_fmt_time(ca->ca_not_after, t, sizeof(t));
		snprintf(why, whylen, "certificate: expired at %s", t);
		goto fail;
	}
	return ca;
fail:
	ERR_clear_error();
	certs_ca_free(ca);
	return NULL;
}

struct certs_ca *
certs_ca_load(const char *cert_file, const char *key_file, uid_t owner,
    time_t now, char *why, size_t whylen)
{
	unsigned char *cb = NULL, *kb = NULL;
	size_t cl = 0, kl = 0;
	struct certs_ca *ca = NULL;
	char sub[384];

	if (certs_read_public(cert_file, &cb, &cl, why, whylen) == -1)
		return NULL;
	if (certs_read_secret(key_file, owner, &kb, &kl, why, whylen) == -1)
		goto out;
	if ((ca = certs_ca_from_mem(cb, cl, kb, kl, now, sub, sizeof(sub))) ==
	    NULL)
		snprintf(why, whylen, "%s: %s",
		    strncmp(sub, "key:", 4) == 0 ? key_file : cert_file, sub);
out:
	certs_secret_free(kb, kl);
	free(cb);
	return ca;
}

void
certs_ca_validity(const struct certs_ca *ca, time_t *nb, time_t *na)
{
	*nb = ca->ca_not_before;
	*na = ca->ca_not_after;
}

EVP_PKEY *
certs_ca_key(const struct certs_ca *ca)
{
	return ca->ca_key;
}

int
certs_ca_check_names(const struct certs_ca *ca, X509 *x, char *why,
    size_t whylen)
{
	int rc;

	if (ca->ca_nc == NULL)
		return 0;
	/* The verifier's two checks: SAN and subject, then the CN as a name. */
	if ((rc = NAME_CONSTRAINTS_check(x, ca->ca_nc)) == X509_V_OK)
		rc = NAME_CONSTRAINTS_check_CN(x, ca->ca_nc);
	ERR_clear_error();
	if (rc != X509_V_OK) {
		snprintf(why, whylen, "outside the CA's name constraints (%s)",
		    X509_verify_cert_error_string(rc));
		return -1;
	}
	return 0;
}

int
certs_ca_permits(const struct certs_ca *ca, const char *host, char *why,
    size_t whylen)
{
	X509 *probe;
	char sub[256];
	int rc;

	if ((probe = certs_leaf_names(host, sub, sizeof(sub))) == NULL) {
		snprintf(why, whylen, "%s", sub);
		return -1;
	}
	rc = certs_ca_check_names(ca, probe, sub, sizeof(sub));
	X509_free(probe);
	if (rc == -1)
		snprintf(why, whylen, "%s: %s", host, sub);
	return rc;
}
