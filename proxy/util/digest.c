/*
 * SHA-256 for the per-request paths (token cache keys, budget keys, the
 * audit chain). OpenSSL 3's EVP_sha256() is an implicit fetch: every
 * EVP_DigestInit with it looks the algorithm up again under a lock, and
 * EVP_Digest() also allocates a context each time. Here the algorithm is
 * fetched once and one context is reused (the daemon is single-threaded).
 */
#include <string.h>

#include <openssl/evp.h>

#include "proxy/util/util.h"

static EVP_MD *digest_md;
static EVP_MD_CTX *digest_ctx;

int
digest_sha256(const void *p, size_t n, unsigned char out[32])
{
	unsigned int len = 0;

	if (digest_md == NULL &&
	    (digest_md = EVP_MD_fetch(NULL, "SHA256", NULL)) == NULL)
		return -1;
	if (digest_ctx == NULL && (digest_ctx = EVP_MD_CTX_new()) == NULL)
		return -1;
	if (EVP_DigestInit_ex2(digest_ctx, digest_md, NULL) != 1 ||
	    EVP_DigestUpdate(digest_ctx, p, n) != 1 ||
	    EVP_DigestFinal_ex(digest_ctx, out, &len) != 1 || len != 32) {
		memset(out, 0, 32);
		return -1;
	}
	return 0;
}
