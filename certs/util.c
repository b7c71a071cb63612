/*
 * Small helpers the other certs/ files share: error reports, ASN.1 times,
 * serial numbers and signing.
 */
#include <stdio.h>
#include <string.h>

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "certs/certs.h"
#include "certs/internal.h"

void
certs_err(char *why, size_t whylen, const char *what)
{
	unsigned long e = ERR_get_error();
	char buf[256] = "";

	if (e != 0)
		ERR_error_string_n(e, buf, sizeof(buf));
	ERR_clear_error();
	snprintf(why, whylen, "%s%s%s", what, buf[0] ? ": " : "", buf);
}

int
certs_asn1_time(const ASN1_TIME *t, time_t *out)
{
	struct tm tm;

	memset(&tm, 0, sizeof(tm));
	if (t == NULL || ASN1_TIME_to_tm(t, &tm) != 1)
		return -1;
	*out = timegm(&tm);
	return 0;
}

int
certs_set_serial(X509 *x)
{
	unsigned char b[16];
	BIGNUM *bn;
	ASN1_INTEGER *ai = NULL;
	int rc = -1;

	if (RAND_bytes(b, sizeof(b)) != 1)
		return -1;
	/* Positive (RFC 5280 §4.1.2.2), and 16 bytes long whatever we drew. */
	b[0] = (unsigned char)((b[0] & 0x3f) | 0x40);
	if ((bn = BN_bin2bn(b, sizeof(b), NULL)) != NULL &&
	    (ai = BN_to_ASN1_INTEGER(bn, NULL)) != NULL &&
	    X509_set_serialNumber(x, ai) == 1)
		rc = 0;
	ASN1_INTEGER_free(ai);
	BN_free(bn);
	return rc;
}

int
certs_sign(X509 *x, EVP_PKEY *key)
{
	const EVP_MD *md = EVP_PKEY_is_a(key, "ED25519") ? NULL : EVP_sha256();

	return X509_sign(x, key, md) > 0 ? 0 : -1;
}

int
certs_add_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
	X509V3_CTX v3;
	X509_EXTENSION *ext;
	int rc;

	X509V3_set_ctx_nodb(&v3);
	X509V3_set_ctx(&v3, issuer, x, NULL, NULL, 0);
	if ((ext = X509V3_EXT_conf_nid(NULL, &v3, nid, value)) == NULL)
		return -1;
	rc = X509_add_ext(x, ext, -1) == 1 ? 0 : -1;
	X509_EXTENSION_free(ext);
	return rc;
}

void
certs_fmt_time(time_t t, char *out, size_t len)
{
	struct tm tm;

	if (gmtime_r(&t, &tm) == NULL ||
	    strftime(out, len, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		snprintf(out, len, "%lld", (long long)t);
}
