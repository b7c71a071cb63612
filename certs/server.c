/*
 * The server side of an intercepted tunnel: the SSL_CTX whose callbacks
 * enforce what DESIGN's "The handshake" asks (ALPN http/1.1 only, SNI =
 * CONNECT host) and install the host's leaf. The proxy names the host
 * with certs_server_expect() before the handshake and reads why one
 * failed with certs_server_failure(); reading and writing the bytes is
 * the proxy's.
 *
 * No resumption: without tickets and a session cache every handshake is
 * a full one, so the SNI check and the leaf choice run on every tunnel,
 * and a session established for one host can never be resumed on a
 * tunnel to another. A full P-256 handshake costs the server well under a
 * millisecond; no ticket key or cache entry has to be kept, either.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/tls1.h>

#include "certs/certs.h"
#include "certs/internal.h"

/* Per-SSL state, in the SSL's ex_data; freed with the SSL. */
struct expect {
	enum certs_server_fail ex_fail; /* first failure seen */
	char ex_host[];                 /* canonical */
};

static CRYPTO_ONCE exidx_once = CRYPTO_ONCE_STATIC_INIT;
static int exidx = -1;

static void
expect_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl,
    void *argp)
{
	(void)parent;
	(void)ad;
	(void)idx;
	(void)argl;
	(void)argp;
	free(ptr);
}

static void
exidx_init(void)
{
	exidx = SSL_get_ex_new_index(0, NULL, NULL, NULL, expect_free);
}

static struct expect *
expect_get(const SSL *ssl)
{
	return exidx < 0 ? NULL : SSL_get_ex_data(ssl, exidx);
}

static void
fail(SSL *ssl, enum certs_server_fail f)
{
	struct expect *ex = expect_get(ssl);

	if (ex != NULL && ex->ex_fail == CERTS_SF_NONE)
		ex->ex_fail = f;
}

/*
 * An SNI, when sent, must name the CONNECT host: a client that asks for
 * another name through this tunnel is refused, not served a leaf for a
 * host it did not ask for.
 */
static int
server_sni_cb(SSL *ssl, int *al, void *arg)
{
	struct expect *ex = expect_get(ssl);
	const char *sni;
	char canon[CERTS_HOST_MAX + 1], why[256];

	(void)arg;
	if (ex == NULL) {
		*al = SSL_AD_INTERNAL_ERROR;
		return SSL_TLSEXT_ERR_ALERT_FATAL;
	}
	if ((sni = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name)) == NULL)
		return SSL_TLSEXT_ERR_NOACK;
	if (certs_host_canon(sni, canon, sizeof(canon), why, sizeof(why)) ==
		-1 ||
	    strcmp(canon, ex->ex_host) != 0) {
		fail(ssl, CERTS_SF_SNI_MISMATCH);
		*al = SSL_AD_UNRECOGNIZED_NAME;
		return SSL_TLSEXT_ERR_ALERT_FATAL;
	}
	return SSL_TLSEXT_ERR_OK;
}

/*
 * ALPN: http/1.1 or nothing. The inner requests go through the HTTP/1.1
 * parser only; a client insisting on h2 is told so by the handshake
 * (no_application_protocol) rather than by a garbled first request.
 */
static int
server_alpn_cb(SSL *ssl, const unsigned char **out, unsigned char *outlen,
    const unsigned char *in, unsigned int inlen, void *arg)
{
	unsigned int i = 0;

	(void)arg;
	while (i < inlen) {
		unsigned int n = in[i];

		if (n == 0 || n > inlen - i - 1)
			break; /* malformed list: refuse */
		if (n == 8 && memcmp(in + i + 1, "http/1.1", 8) == 0) {
			*out = in + i + 1;
			*outlen = 8;
			return SSL_TLSEXT_ERR_OK;
		}
		i += n + 1;
	}
	fail(ssl, CERTS_SF_ALPN);
	return SSL_TLSEXT_ERR_ALERT_FATAL;
}

/*
 * Runs once the ClientHello is processed, SNI or not: the leaf is the
 * expected host's either way.
 */
static int
server_cert_cb(SSL *ssl, void *arg)
{
	struct certs_cache *cc = arg;
	struct expect *ex = expect_get(ssl);
	char why[256];
	X509 *x;

	if (ex == NULL) {
		/* Nothing recorded there: the proxy sees CERTS_SF_NO_EXPECT. */
		return 0;
	}
	if ((x = certs_cache_get(cc, ex->ex_host, time(NULL), why,
		 sizeof(why))) == NULL) {
		fail(ssl, CERTS_SF_LEAF);
		return 0;
	}
	if (SSL_use_cert_and_key(ssl, x, certs_cache_key(cc), NULL, 1) != 1) {
		ERR_clear_error();
		fail(ssl, CERTS_SF_LEAF);
		return 0;
	}
	return 1;
}

SSL_CTX *
certs_server_ctx(struct certs_cache *cc, char *why, size_t whylen)
{
	/* Not const: the macro casts it to char * for SSL_CTX_ctrl. */
	static char groups[] = "X25519:P-256:P-384";
	SSL_CTX *ctx;

	if (CRYPTO_THREAD_run_once(&exidx_once, exidx_init) != 1 || exidx < 0) {
		certs_err(why, whylen, "cannot allocate SSL ex_data");
		return NULL;
	}
	if ((ctx = SSL_CTX_new(TLS_server_method())) == NULL) {
		certs_err(why, whylen, "cannot create TLS context");
		return NULL;
	}
	if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1 ||
	    /* The leaf is ECDSA: only ECDHE-ECDSA AEAD suites can apply. */
	    SSL_CTX_set_cipher_list(ctx,
		"ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"
		"ECDHE-ECDSA-CHACHA20-POLY1305") != 1 ||
	    SSL_CTX_set1_groups_list(ctx, groups) != 1 ||
	    SSL_CTX_set_num_tickets(ctx, 0) != 1) {
		certs_err(why, whylen, "cannot configure the TLS context");
		SSL_CTX_free(ctx);
		return NULL;
	}
	SSL_CTX_set_options(ctx,
	    SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION |
		SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_NO_COMPRESSION);
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	/* Idle tunnels keep no record buffers (the 48 KiB per tunnel goal). */
	SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
	SSL_CTX_set_tlsext_servername_callback(ctx, server_sni_cb);
	SSL_CTX_set_alpn_select_cb(ctx, server_alpn_cb, NULL);
	SSL_CTX_set_cert_cb(ctx, server_cert_cb, cc);
	return ctx;
}

int
certs_server_expect(SSL *ssl, const char *host, char *why, size_t whylen)
{
	char canon[CERTS_HOST_MAX + 1];
	struct expect *ex, *old;
	size_t len;

	if (exidx < 0) {
		snprintf(why, whylen, "not an SSL of certs_server_ctx()");
		return -1;
	}
	if (certs_host_canon(host, canon, sizeof(canon), why, whylen) == -1)
		return -1;
	len = strlen(canon);
	if ((ex = calloc(1, sizeof(*ex) + len + 1)) == NULL) {
		snprintf(why, whylen, "out of memory");
		return -1;
	}
	memcpy(ex->ex_host, canon, len + 1);
	old = SSL_get_ex_data(ssl, exidx);
	if (SSL_set_ex_data(ssl, exidx, ex) != 1) {
		free(ex);
		certs_err(why, whylen, "cannot set SSL ex_data");
		return -1;
	}
	free(old);
	return 0;
}

enum certs_server_fail
certs_server_failure(const SSL *ssl)
{
	struct expect *ex = expect_get(ssl);

	return ex == NULL ? CERTS_SF_NO_EXPECT : ex->ex_fail;
}

const char *
certs_server_failure_str(enum certs_server_fail f)
{
	switch (f) {
	case CERTS_SF_NONE:
		return "none";
	case CERTS_SF_NO_EXPECT:
		return "no_expected_host";
	case CERTS_SF_SNI_MISMATCH:
		return "sni_mismatch";
	case CERTS_SF_ALPN:
		return "alpn_no_http1";
	case CERTS_SF_LEAF:
		return "leaf_unavailable";
	}
	return "unknown";
}
