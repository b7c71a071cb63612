/*
 * Unit tests for certs/server.c: real TLS handshakes in memory (a BIO
 * pair) between a client trusting the CA and certs_server_ctx(). The SNI
 * rule, ALPN http/1.1 only, no SNI, TLS versions, no session tickets,
 * and the failure codes the proxy will audit.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "certs/certs.h"

static char why[512];

struct fx {
	struct certs_ca *ca;
	struct certs_cache *cc;
	SSL_CTX *sctx, *cctx;
	int tickets; /* sessions the client was handed */
};

static int
client_new_session(SSL *ssl, SSL_SESSION *sess)
{
	struct fx *f = SSL_get_app_data(ssl);

	(void)sess;
	f->tickets++;
	return 0;
}

static int
setup(void **state)
{
	static const char *const permit[] = { "api.example", "other.example",
		"198.18.0.1" };
	struct certs_ca_params p = { NULL, 0, permit, 3 };
	struct fx *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->ca = certs_ca_generate(&p, time(NULL), why, sizeof(why));
	assert_non_null(f->ca);
	f->cc = certs_cache_new(f->ca, 16, 1, why, sizeof(why));
	assert_non_null(f->cc);
	f->sctx = certs_server_ctx(f->cc, why, sizeof(why));
	assert_non_null(f->sctx);
	f->cctx = SSL_CTX_new(TLS_client_method());
	assert_non_null(f->cctx);
	assert_int_equal(X509_STORE_add_cert(SSL_CTX_get_cert_store(f->cctx),
			     certs_ca_cert(f->ca)),
	    1);
	SSL_CTX_set_verify(f->cctx, SSL_VERIFY_PEER, NULL);
	SSL_CTX_set_session_cache_mode(f->cctx, SSL_SESS_CACHE_CLIENT);
	SSL_CTX_sess_set_new_cb(f->cctx, client_new_session);
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fx *f = *state;

	SSL_CTX_free(f->cctx);
	SSL_CTX_free(f->sctx);
	certs_cache_free(f->cc);
	certs_ca_free(f->ca);
	free(f);
	return 0;
}

struct conn {
	SSL *c, *s;
	int ok;
	unsigned long cerr; /* the client's first error */
};

/*
 * One handshake: sni (NULL: none), alpn (wire format, NULL: none), the
 * host the client verifies (NULL: sni), the host the server expects
 * (NULL: certs_server_expect not called).
 */
static void
handshake(struct fx *f, struct conn *k, const char *sni, const char *alpn,
    size_t alpnlen, const char *verify_host, const char *expect,
    int max_version)
{
	BIO *bc, *bs;
	int i, dc = 0, ds = 0;

	memset(k, 0, sizeof(*k));
	ERR_clear_error();
	k->c = SSL_new(f->cctx);
	k->s = SSL_new(f->sctx);
	assert_non_null(k->c);
	assert_non_null(k->s);
	SSL_set_app_data(k->c, f);
	assert_int_equal(BIO_new_bio_pair(&bc, 0, &bs, 0), 1);
	SSL_set_bio(k->c, bc, bc);
	SSL_set_bio(k->s, bs, bs);
	SSL_set_connect_state(k->c);
	SSL_set_accept_state(k->s);
	if (max_version != 0)
		SSL_set_max_proto_version(k->c, max_version);
	if (sni != NULL)
		assert_int_equal(SSL_set_tlsext_host_name(k->c, sni), 1);
	if (alpn != NULL)
		assert_int_equal(SSL_set_alpn_protos(k->c,
				     (const unsigned char *)alpn,
				     (unsigned)alpnlen),
		    0);
	if (verify_host == NULL)
		verify_host = sni;
	if (verify_host != NULL) {
		if (verify_host[0] >= '0' && verify_host[0] <= '9')
			X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(k->c),
			    verify_host);
		else
			assert_int_equal(SSL_set1_host(k->c, verify_host), 1);
	}
	if (expect != NULL)
		assert_int_equal(certs_server_expect(k->s, expect, why,
				     sizeof(why)),
		    0);
	for (i = 0; i < 50 && !(dc && ds); i++) {
		int rc, e;

		if (!dc) {
			rc = SSL_do_handshake(k->c);
			if (rc == 1)
				dc = 1;
			else if ((e = SSL_get_error(k->c, rc)) !=
				SSL_ERROR_WANT_READ &&
			    e != SSL_ERROR_WANT_WRITE) {
				k->cerr = ERR_peek_error();
				break;
			}
		}
		if (!ds) {
			rc = SSL_do_handshake(k->s);
			if (rc == 1)
				ds = 1;
			else if ((e = SSL_get_error(k->s, rc)) !=
				SSL_ERROR_WANT_READ &&
			    e != SSL_ERROR_WANT_WRITE) {
				/* Let the client read the alert. */
				(void)SSL_do_handshake(k->c);
				k->cerr = ERR_peek_error();
				break;
			}
		}
	}
	ERR_clear_error();
	k->ok = dc && ds;
}

static void
conn_free(struct conn *k)
{
	SSL_free(k->c);
	SSL_free(k->s);
}

/* Bytes both ways over an established connection. */
static void
exchange(struct conn *k)
{
	char buf[64];
	int i, n = -1;

	assert_int_equal(SSL_write(k->c, "GET / HTTP/1.1\r\n\r\n", 18), 18);
	assert_int_equal(SSL_read(k->s, buf, sizeof(buf)), 18);
	assert_memory_equal(buf, "GET / HTTP/1.1\r\n\r\n", 18);
	assert_int_equal(SSL_write(k->s, "HTTP/1.1 204 \r\n\r\n", 17), 17);
	for (i = 0; i < 4 && n <= 0; i++)
		n = SSL_read(k->c, buf, sizeof(buf));
	assert_int_equal(n, 17);
}

static const char alpn_both[] = "\x02h2\x08http/1.1";

static void
test_right_sni(void **state)
{
	struct fx *f = *state;
	struct conn k;
	const unsigned char *sel;
	unsigned int sellen;
	X509 *peer;
	char cn[64];
	struct certs_cache_stats st;

	handshake(f, &k, "api.example", alpn_both, sizeof(alpn_both) - 1, NULL,
	    "api.example", 0);
	assert_true(k.ok);
	assert_int_equal(SSL_get_verify_result(k.c), X509_V_OK);
	assert_int_equal(SSL_version(k.c), TLS1_3_VERSION);
	SSL_get0_alpn_selected(k.c, &sel, &sellen);
	assert_int_equal(sellen, 8);
	assert_memory_equal(sel, "http/1.1", 8);
	assert_non_null(peer = SSL_get0_peer_certificate(k.c));
	X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName,
	    cn, sizeof(cn));
	assert_string_equal(cn, "api.example");
	/* The leaf alone: the CA is the client's anchor, not sent. */
	assert_int_equal(sk_X509_num(SSL_get_peer_cert_chain(k.c)), 1);
	assert_int_equal(certs_server_failure(k.s), CERTS_SF_NONE);
	exchange(&k);
	/* No ticket, no session: nothing to resume. */
	assert_int_equal(f->tickets, 0);
	conn_free(&k);

	/* Same host again: from the cache; SNI case does not matter. */
	handshake(f, &k, "API.Example", NULL, 0, "api.example", "api.example",
	    0);
	assert_true(k.ok);
	conn_free(&k);
	certs_cache_stats(f->cc, &st);
	assert_int_equal(st.cs_misses, 1);
	assert_int_equal(st.cs_hits, 1);
}

static void
test_no_sni(void **state)
{
	struct fx *f = *state;
	struct conn k;

	/* The leaf for the CONNECT host, which the client checks. */
	handshake(f, &k, NULL, alpn_both, sizeof(alpn_both) - 1,
	    "other.example", "other.example", 0);
	assert_true(k.ok);
	assert_int_equal(SSL_get_verify_result(k.c), X509_V_OK);
	assert_int_equal(certs_server_failure(k.s), CERTS_SF_NONE);
	exchange(&k);
	conn_free(&k);
	/* An address literal: no SNI by RFC 6066, an iPAddress leaf. */
	handshake(f, &k, NULL, NULL, 0, "198.18.0.1", "198.18.0.1", 0);
	assert_true(k.ok);
	assert_int_equal(SSL_get_verify_result(k.c), X509_V_OK);
	conn_free(&k);
}

static void
test_sni_mismatch(void **state)
{
	struct fx *f = *state;
	struct conn k;

	/* other.example is permitted by the CA, but not this tunnel's host. */
	handshake(f, &k, "other.example", alpn_both, sizeof(alpn_both) - 1,
	    NULL, "api.example", 0);
	assert_false(k.ok);
	assert_int_equal(certs_server_failure(k.s), CERTS_SF_SNI_MISMATCH);
	assert_string_equal(certs_server_failure_str(certs_server_failure(k.s)),
	    "sni_mismatch");
	assert_int_equal(ERR_GET_REASON(k.cerr), SSL_R_TLSV1_UNRECOGNIZED_NAME);
	conn_free(&k);
	/* A suffix or a trailing dot is a mismatch too. */
	handshake(f, &k, "api.example.", NULL, 0, "api.example", "api.example",
	    0);
	assert_false(k.ok);
	assert_int_equal(certs_server_failure(k.s), CERTS_SF_SNI_MISMATCH);
	conn_free(&k);
	handshake(f, &k, "x.api.example", NULL, 0, "api.example", "api.example",
	    TLS1_2_VERSION);
	assert_false(k.ok);
	assert_int_equal(certs_server_failure(k.s), CERTS_SF_SNI_MISMATCH);
	conn_free(&k);
}

static void
test_alpn(void **state)
{
	struct fx *f = *state;
	struct conn k;
	const unsigned char *sel;
	unsigned int sellen;

	handshake(f, &k, "api.example", "\x02h2", 3, NULL, "api.example", 0);
	assert_false(k.ok);
	assert_int_equal(certs_server_failure(k.s), CERTS_SF_ALPN);
	assert_int_equal(ERR_GET_REASON(k.cerr),
	    SSL_R_TLSV1_ALERT_NO_APPLICATION_PROTOCOL);
	conn_free(&k);
	/* Same over TLS 1.2. */
	handshake(f, &k, "api.example", "\x02h2\x08http/1.0", 12, NULL,
	    "api.example", TLS1_2_VERSION);
	assert_false(k.ok);
	assert_int_equal(certs_server_failure(k.s), CERTS_SF_ALPN);
	conn_free(&k);
	/* No ALPN at all is fine, and none is selected. */
	handshake(f, &k, "api.example", NULL, 0, NULL, "api.example", 0);
	assert_true(k.ok);
	SSL_get0_alpn_selected(k.c, &sel, &sellen);
	assert_int_equal(sellen, 0);
	conn_free(&k);
}

static void
test_versions(void **state)
{
	struct fx *f = *state;
	struct conn k;

	handshake(f, &k, "api.example", alpn_both, sizeof(alpn_both) - 1, NULL,
	    "api.example", TLS1_2_VERSION);
	assert_true(k.ok);
	assert_int_equal(SSL_version(k.s), TLS1_2_VERSION);
	assert_int_equal(SSL_get_verify_result(k.c), X509_V_OK);
	exchange(&k);
	/* TLS 1.2: no ticket either. */
	assert_int_equal(f->tickets, 0);
	conn_free(&k);
	handshake(f, &k, "api.example", NULL, 0, NULL, "api.example",
	    TLS1_1_VERSION);
	assert_false(k.ok);
	conn_free(&k);
}

static void
test_no_expect_and_bad_host(void **state)
{
	struct fx *f = *state;
	struct conn k;
	SSL *s;

	/* The proxy forgot certs_server_expect(): closed, not served. */
	handshake(f, &k, "api.example", NULL, 0, NULL, NULL, 0);
	assert_false(k.ok);
	assert_int_equal(certs_server_failure(k.s), CERTS_SF_NO_EXPECT);
	conn_free(&k);
	handshake(f, &k, NULL, NULL, 0, "api.example", NULL, 0);
	assert_false(k.ok);
	assert_int_equal(certs_server_failure(k.s), CERTS_SF_NO_EXPECT);
	conn_free(&k);
	/* A host outside the CA's constraints: no leaf, a failed handshake. */
	handshake(f, &k, "evil.example", NULL, 0, NULL, "evil.example", 0);
	assert_false(k.ok);
	assert_int_equal(certs_server_failure(k.s), CERTS_SF_LEAF);
	conn_free(&k);
	/* A bad host is refused by certs_server_expect itself. */
	assert_non_null(s = SSL_new(f->sctx));
	assert_int_equal(certs_server_expect(s, "a b", why, sizeof(why)), -1);
	assert_int_equal(certs_server_expect(s, "API.example", why,
			     sizeof(why)),
	    0);
	/* Called twice: the second host wins, nothing leaks (ASan). */
	assert_int_equal(certs_server_expect(s, "other.example", why,
			     sizeof(why)),
	    0);
	SSL_free(s);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_right_sni, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_no_sni, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sni_mismatch, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_alpn, setup, teardown),
		cmocka_unit_test_setup_teardown(test_versions, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_expect_and_bad_host,
		    setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
