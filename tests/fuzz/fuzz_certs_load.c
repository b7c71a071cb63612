/*
 * libFuzzer target for the certs/ input files: what `intercept.ca:
 * "files"`, `sluice certs show` and the key options read. The first byte
 * picks a mode:
 *   0  certs_ca_from_mem(): the next two bytes (big-endian) are the
 *      certificate's length, the rest after it is the key;
 *   1  certs_pkey_from_pem() (P-256 or Ed25519);
 *   2  certs_pubkey_from_pem();
 *   3  a host name (up to the first NUL) for certs_host_check/canon;
 *   4  a DER or PEM certificate for certs_show().
 * Invariants, not just "no crash": a loaded CA is a CA whose key matches
 * and which mints exactly the leaves certs_ca_permits() allows, with a
 * signature the CA's key verifies; keys are of the types asked for; a
 * canonical host is a fixed point and passes the check; certs_show() is
 * snprintf-like (same length for every buffer size, always terminated);
 * and every error leaves a non-empty why and an empty OpenSSL queue.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "certs/certs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Inside the seed CAs' validity (2026-12-03). */
#define FUZZ_NOW ((time_t)1796256000)

static EVP_PKEY *leaf_key;

static void
check(int cond, const char *what)
{
	if (!cond) {
		fprintf(stderr, "fuzz_certs_load invariant broken: %s\n", what);
		abort();
	}
}

static void
check_why(const char *why)
{
	check(why[0] != '\0', "an error without a why");
	check(ERR_peek_error() == 0, "an error left on the OpenSSL queue");
}

static void
fuzz_ca(const uint8_t *d, size_t n)
{
	static const char *const hosts[] = { "a.example", "api.example",
		"198.18.0.1", "2001:2::1", "x.api.example" };
	struct certs_ca *ca;
	char why[512] = "", w2[512];
	size_t cl, i;

	if (n < 2)
		return;
	cl = (size_t)d[0] << 8 | d[1];
	d += 2;
	n -= 2;
	if (cl > n)
		cl = n;
	ca = certs_ca_from_mem(d, cl, d + cl, n - cl, FUZZ_NOW, why,
	    sizeof(why));
	if (ca == NULL) {
		check_why(why);
		return;
	}
	check(certs_ca_cert(ca) != NULL, "a CA without a certificate");
	check(X509_check_ca(certs_ca_cert(ca)) >= 1, "a CA that is not one");
	for (i = 0; i < sizeof(hosts) / sizeof(hosts[0]); i++) {
		int permits = certs_ca_permits(ca, hosts[i], w2, sizeof(w2));
		X509 *x = certs_leaf_mint(ca, leaf_key, hosts[i], 1, FUZZ_NOW,
		    why, sizeof(why));

		check(permits == 0 || x == NULL,
		    "minted a leaf the constraints refuse");
		if (x == NULL) {
			check_why(why);
			continue;
		}
		check(X509_verify(x, X509_get0_pubkey(certs_ca_cert(ca))) == 1,
		    "a leaf the CA's key does not verify");
		X509_free(x);
	}
	ERR_clear_error();
	certs_ca_free(ca);
}

static void
fuzz_key(const uint8_t *d, size_t n, int pub)
{
	char why[512] = "";
	EVP_PKEY *k;

	k = pub ?
	    certs_pubkey_from_pem(d, n, CERTS_KEY_ED25519, why, sizeof(why)) :
	    certs_pkey_from_pem(d, n, CERTS_KEY_P256 | CERTS_KEY_ED25519, why,
		sizeof(why));
	if (k == NULL) {
		check_why(why);
		return;
	}
	check(EVP_PKEY_is_a(k, "ED25519") || (!pub && EVP_PKEY_is_a(k, "EC")),
	    "a key of a type not asked for");
	EVP_PKEY_free(k);
}

static void
fuzz_host(const uint8_t *d, size_t n)
{
	char host[512], c1[CERTS_HOST_MAX + 1], c2[CERTS_HOST_MAX + 1];
	char why[512] = "";
	size_t len = strnlen((const char *)d, n);

	if (len >= sizeof(host))
		len = sizeof(host) - 1;
	memcpy(host, d, len);
	host[len] = '\0';
	if (certs_host_check(host, why, sizeof(why)) == -1)
		check_why(why);
	why[0] = '\0';
	if (certs_host_canon(host, c1, sizeof(c1), why, sizeof(why)) == -1) {
		check_why(why);
		return;
	}
	check(certs_host_check(c1, why, sizeof(why)) == 0,
	    "a canonical host that fails the check");
	check(certs_host_canon(c1, c2, sizeof(c2), why, sizeof(why)) == 0 &&
		strcmp(c1, c2) == 0,
	    "canonical form is not a fixed point");
}

static void
fuzz_show(const uint8_t *d, size_t n)
{
	const unsigned char *p = d;
	char big[8192], small[37];
	X509 *x = NULL;
	BIO *b;
	int a, s;

	if (n >= 10 && memcmp(d, "-----BEGIN", 10) == 0) {
		if ((b = BIO_new_mem_buf(d, (int)n)) != NULL) {
			x = PEM_read_bio_X509(b, NULL, NULL, NULL);
			BIO_free(b);
		}
	} else
		x = d2i_X509(NULL, &p, (long)n);
	ERR_clear_error();
	if (x == NULL)
		return;
	a = certs_show(x, big, sizeof(big));
	s = certs_show(x, small, sizeof(small));
	check(a == s, "certs_show's length depends on the buffer");
	check(a < 0 ||
		strlen(small) ==
		    ((size_t)a < sizeof(small) ? (size_t)a : sizeof(small) - 1),
	    "small buffer not terminated at its end");
	check(a < 0 || (size_t)a >= sizeof(big) || strlen(big) == (size_t)a,
	    "length differs from the text");
	check(ERR_peek_error() == 0, "certs_show left an OpenSSL error");
	X509_free(x);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (leaf_key == NULL) {
		char why[256];

		if ((leaf_key = certs_leaf_key_new(why, sizeof(why))) == NULL)
			abort();
	}
	if (size < 1 || size > 64 * 1024)
		return 0;
	ERR_clear_error();
	switch (data[0] % 5) {
	case 0:
		fuzz_ca(data + 1, size - 1);
		break;
	case 1:
		fuzz_key(data + 1, size - 1, 0);
		break;
	case 2:
		fuzz_key(data + 1, size - 1, 1);
		break;
	case 3:
		fuzz_host(data + 1, size - 1);
		break;
	default:
		fuzz_show(data + 1, size - 1);
		break;
	}
	return 0;
}
