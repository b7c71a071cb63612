/*
 * Costs of the certs/ interception pieces (issue 16 "Benchmarks", the
 * library's share): minting one leaf, a cache miss and a hit, the memory
 * a cached leaf holds, a full in-memory TLS handshake against
 * certs_server_ctx() with the leaf cached and with a first mint, and the
 * heap an idle server-side SSL keeps after its handshake. Medians of
 * single timed operations. Not a test: nothing here can fail.
 *
 * Not part of the build. From the repository root, with the library
 * built into build/plain (RelWithDebInfo, -O2):
 *   cc -std=c11 -O2 -D_GNU_SOURCE -I. tests/bench/certs_bench.c \
 *       build/plain/certs/libsluice_certs.a -lssl -lcrypto \
 *       -o /tmp/certs_bench && /tmp/certs_bench
 */
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "certs/certs.h"

#define N 1000

static char why[512];

static double
now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int
cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double
median(double *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp);
	return v[n / 2];
}

static size_t
heap(void)
{
	struct mallinfo2 mi = mallinfo2();

	return mi.uordblks + mi.hblkhd;
}

/* One in-memory handshake; returns the server SSL with its BIO dropped. */
static SSL *
handshake(SSL_CTX *cctx, SSL_CTX *sctx, const char *host)
{
	SSL *c = SSL_new(cctx), *s = SSL_new(sctx);
	BIO *bc, *bs;
	int i, dc = 0, ds = 0;

	BIO_new_bio_pair(&bc, 0, &bs, 0);
	SSL_set_bio(c, bc, bc);
	SSL_set_bio(s, bs, bs);
	SSL_set_connect_state(c);
	SSL_set_accept_state(s);
	SSL_set_tlsext_host_name(c, host);
	SSL_set_alpn_protos(c, (const unsigned char *)"\x08http/1.1", 9);
	certs_server_expect(s, host, why, sizeof(why));
	for (i = 0; i < 20 && !(dc && ds); i++) {
		if (!dc && SSL_do_handshake(c) == 1)
			dc = 1;
		if (!ds && SSL_do_handshake(s) == 1)
			ds = 1;
	}
	if (!(dc && ds)) {
		fprintf(stderr, "handshake failed\n");
		exit(1);
	}
	SSL_free(c);
	/* What an idle tunnel keeps: no pair buffers (a socket has none). */
	SSL_set_bio(s, BIO_new(BIO_s_null()), BIO_new(BIO_s_null()));
	return s;
}

int
main(void)
{
	static double t[N];
	static SSL *idle[N];
	struct certs_ca_params p = { NULL, 0, NULL, 0 };
	struct certs_ca *ca;
	struct certs_cache *cc;
	SSL_CTX *sctx, *cctx;
	EVP_PKEY *k;
	char host[64];
	size_t before, after;
	int i;

	if ((ca = certs_ca_generate(&p, time(NULL), why, sizeof(why))) ==
		NULL ||
	    (k = certs_leaf_key_new(why, sizeof(why))) == NULL) {
		fprintf(stderr, "%s\n", why);
		return 1;
	}
	for (i = 0; i < N; i++) {
		double t0 = now_us();
		X509 *x = certs_leaf_mint(ca, k, "api.example", 1, time(NULL),
		    why, sizeof(why));

		t[i] = now_us() - t0;
		X509_free(x);
	}
	printf("certs_leaf_mint                 median %8.1f us (of %d)\n",
	    median(t, N), N);

	cc = certs_cache_new(ca, 2 * N, 1, why, sizeof(why));
	before = heap();
	for (i = 0; i < N; i++) {
		double t0;

		snprintf(host, sizeof(host), "h%d.api.example", i);
		t0 = now_us();
		certs_cache_get(cc, host, time(NULL), why, sizeof(why));
		t[i] = now_us() - t0;
	}
	after = heap();
	printf("certs_cache_get miss            median %8.1f us\n",
	    median(t, N));
	printf("heap per cached leaf            %8zu bytes (%d leaves)\n",
	    (after - before) / N, N);
	for (i = 0; i < N; i++) {
		double t0;

		snprintf(host, sizeof(host), "h%d.api.example", i);
		t0 = now_us();
		certs_cache_get(cc, host, time(NULL), why, sizeof(why));
		t[i] = now_us() - t0;
	}
	printf("certs_cache_get hit             median %8.3f us\n",
	    median(t, N));
	certs_cache_free(cc);

	cc = certs_cache_new(ca, 2 * N, 1, why, sizeof(why));
	sctx = certs_server_ctx(cc, why, sizeof(why));
	cctx = SSL_CTX_new(TLS_client_method());
	X509_STORE_add_cert(SSL_CTX_get_cert_store(cctx), certs_ca_cert(ca));
	SSL_CTX_set_verify(cctx, SSL_VERIFY_PEER, NULL);
	for (i = 0; i < N / 2; i++) {
		double t0;

		snprintf(host, sizeof(host), "m%d.api.example", i);
		t0 = now_us();
		SSL_free(handshake(cctx, sctx, host));
		t[i] = now_us() - t0;
	}
	printf("handshake, first mint (c+s)     median %8.1f us\n",
	    median(t, N / 2));
	for (i = 0; i < N / 2; i++) {
		double t0 = now_us();

		SSL_free(handshake(cctx, sctx, "m0.api.example"));
		t[i] = now_us() - t0;
	}
	printf("handshake, cached leaf (c+s)    median %8.1f us\n",
	    median(t, N / 2));
	before = heap();
	for (i = 0; i < N; i++)
		idle[i] = handshake(cctx, sctx, "m0.api.example");
	after = heap();
	printf("heap per idle server SSL        %8zu bytes (%d, after the "
	       "handshake, RELEASE_BUFFERS)\n",
	    (after - before) / N, N);
	for (i = 0; i < N; i++)
		SSL_free(idle[i]);
	SSL_CTX_free(cctx);
	SSL_CTX_free(sctx);
	certs_cache_free(cc);
	EVP_PKEY_free(k);
	certs_ca_free(ca);
	return 0;
}
