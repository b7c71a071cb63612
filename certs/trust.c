/*
 * Upstream trust: the client TLS context, SPKI pins. Verification of the
 * chain and the host name is OpenSSL's; this file only configures it and
 * adds the pin check that runs after a verified handshake.
 */
#include <sys/stat.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "certs/certs.h"
#include "certs/internal.h"

/*
 * The system store, as OpenSSL's default paths name it (SSL_CERT_FILE and
 * SSL_CERT_DIR honoured). The hashed directory is preferred to the bundle
 * file: a directory is read lazily, one certificate per lookup, while the
 * bundle is parsed whole at load (about 30 ms for Debian's), which would
 * be most of sluice's start-up time.
 */
static int
certs_system_store(SSL_CTX *ctx)
{
	const char *file = getenv(X509_get_default_cert_file_env());
	const char *dir = getenv(X509_get_default_cert_dir_env());
	struct stat st;
	int have_dir;

	if (dir == NULL)
		dir = X509_get_default_cert_dir();
	have_dir = stat(dir, &st) == 0 && S_ISDIR(st.st_mode);
	if (file == NULL && !have_dir)
		return SSL_CTX_set_default_verify_paths(ctx) == 1 ? 0 : -1;
	/*
	 * As OpenSSL's default paths do, a missing location is no error:
	 * an empty store trusts nothing, and every handshake then fails.
	 */
	if (file != NULL)
		(void)SSL_CTX_load_verify_file(ctx, file);
	if (have_dir)
		(void)SSL_CTX_load_verify_dir(ctx, dir);
	ERR_clear_error();
	return 0;
}

SSL_CTX *
certs_client_ctx(const char *ca_file, char *why, size_t whylen)
{
	SSL_CTX *ctx;

	if ((ctx = SSL_CTX_new(TLS_client_method())) == NULL) {
		certs_err(why, whylen, "cannot create TLS context");
		return NULL;
	}
	if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1) {
		certs_err(why, whylen, "cannot require TLS 1.2");
		goto fail;
	}
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	if (ca_file != NULL) {
		if (SSL_CTX_load_verify_locations(ctx, ca_file, NULL) != 1) {
			certs_err(why, whylen, "cannot load CA file");
			goto fail;
		}
	} else if (certs_system_store(ctx) == -1) {
		certs_err(why, whylen, "cannot load the system CA store");
		goto fail;
	}
	/* Keep idle connections small: buffers are freed when unused. */
	SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT);
	return ctx;
fail:
	SSL_CTX_free(ctx);
	return NULL;
}

int
certs_spki_sha256(X509 *cert, unsigned char out[32])
{
	unsigned char *der = NULL;
	int n;

	if ((n = i2d_X509_PUBKEY(X509_get_X509_PUBKEY(cert), &der)) <= 0)
		return -1;
	SHA256(der, (size_t)n, out);
	OPENSSL_free(der);
	return 0;
}

int
certs_pin_match(SSL *ssl, const unsigned char (*pins)[32], size_t npins)
{
	STACK_OF(X509) * chain;
	unsigned char h[32];
	size_t i;
	int j;

	/* The verified chain: leaf first, as built by OpenSSL's verifier. */
	if ((chain = SSL_get0_verified_chain(ssl)) == NULL)
		return 0;
	for (j = 0; j < sk_X509_num(chain); j++) {
		if (certs_spki_sha256(sk_X509_value(chain, j), h) == -1)
			continue;
		for (i = 0; i < npins; i++)
			if (CRYPTO_memcmp(h, pins[i], sizeof(h)) == 0)
				return 1;
	}
	return 0;
}

int
certs_pin_decode(const char *b64, unsigned char out[32], char *why,
    size_t whylen)
{
	unsigned char buf[33];
	size_t len = strlen(b64);

	if (len != 44 || b64[43] != '=' || b64[42] == '=') {
		snprintf(why, whylen,
		    "not a base64 SHA-256 (44 characters ending in one '=')");
		return -1;
	}
	if (EVP_DecodeBlock(buf, (const unsigned char *)b64, 44) != 33) {
		snprintf(why, whylen, "invalid base64");
		return -1;
	}
	memcpy(out, buf, 32);
	return 0;
}
