/*
 * Unit tests for the ClientHello server_name reader (proxy/http/tlshello.c):
 * real ClientHellos made by OpenSSL (with and without SNI, every prefix of
 * one, the same split over several records) and hand-built ones for each
 * refusal: truncated records, several extensions, two host names, an
 * extension twice, lengths that disagree or are huge, names that are not
 * host names. Inputs end right at a PROT_NONE page.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/ssl.h>

#include "proxy/http/http1.h"
#include "tests/unit/guard.h"

static int
setup(void **state)
{
	(void)state;
	return guard_setup(3 * TLS_HELLO_MAX);
}

static int
teardown(void **state)
{
	(void)state;
	return guard_teardown();
}

static enum tls_hello
parse(const unsigned char *b, size_t n, char *out, const char **why)
{
	const char *p = guard_put((const char *)b, n);

	return tls_hello_sni((const unsigned char *)p, n, out, 256, why);
}

/* What OpenSSL's client sends first, with sni (NULL: none). */
static size_t
openssl_hello(const char *sni, unsigned char *buf, size_t cap)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	BIO *rb, *wb;
	SSL *ssl;
	int n;

	assert_non_null(ctx);
	ssl = SSL_new(ctx);
	assert_non_null(ssl);
	rb = BIO_new(BIO_s_mem());
	wb = BIO_new(BIO_s_mem());
	SSL_set_bio(ssl, rb, wb);
	if (sni != NULL)
		assert_int_equal(SSL_set_tlsext_host_name(ssl, sni), 1);
	assert_int_equal(SSL_set_alpn_protos(ssl,
			     (const unsigned char *)"\x08http/1.1", 9),
	    0);
	(void)SSL_connect(ssl);
	n = BIO_read(wb, buf, (int)cap);
	assert_true(n > 0);
	SSL_free(ssl);
	SSL_CTX_free(ctx);
	return (size_t)n;
}

static void
test_openssl_sni(void **state)
{
	unsigned char b[4096];
	char out[256];
	const char *why;
	size_t n = openssl_hello("API.Example.com", b, sizeof(b));

	(void)state;
	assert_int_equal(parse(b, n, out, &why), TLS_HELLO_OK);
	assert_string_equal(out, "api.example.com");
}

static void
test_openssl_no_sni(void **state)
{
	unsigned char b[4096];
	char out[256];
	const char *why;
	size_t n = openssl_hello(NULL, b, sizeof(b));

	(void)state;
	assert_int_equal(parse(b, n, out, &why), TLS_HELLO_NO_SNI);
	assert_string_equal(out, "");
}

/* Every prefix of a ClientHello is "more", never a verdict. */
static void
test_truncated(void **state)
{
	unsigned char b[4096];
	char out[256];
	const char *why;
	size_t n = openssl_hello("api.example.com", b, sizeof(b)), i;

	(void)state;
	for (i = 0; i < n; i++)
		assert_int_equal(parse(b, i, out, &why), TLS_HELLO_MORE);
	assert_int_equal(parse(b, n, out, &why), TLS_HELLO_OK);
}

/* Split one record's handshake bytes into records of at most k bytes. */
static size_t
refragment(const unsigned char *rec, size_t n, size_t k, unsigned char *out)
{
	size_t body = n - 5, off = 0, o = 0, t;

	while (off < body) {
		t = body - off < k ? body - off : k;
		out[o++] = 0x16;
		out[o++] = 3;
		out[o++] = 1;
		out[o++] = (unsigned char)(t >> 8);
		out[o++] = (unsigned char)t;
		memcpy(out + o, rec + 5 + off, t);
		o += t;
		off += t;
	}
	return o;
}

static void
test_fragmented(void **state)
{
	unsigned char b[4096], f[16384];
	char out[256];
	const char *why;
	size_t n = openssl_hello("api.example.com", b, sizeof(b)), m, i;
	static const size_t ks[] = { 1, 2, 3, 7, 100 };

	(void)state;
	for (i = 0; i < sizeof(ks) / sizeof(ks[0]); i++) {
		m = refragment(b, n, ks[i], f);
		assert_int_equal(parse(f, m, out, &why), TLS_HELLO_OK);
		assert_string_equal(out, "api.example.com");
		/* Cut before the last fragment's end: more. */
		assert_int_equal(parse(f, m - 1, out, &why), TLS_HELLO_MORE);
	}
	/* A record of another type in between is refused. */
	m = refragment(b, n, 100, f);
	f[105] = 0x17;
	assert_int_equal(parse(f, m, out, &why), TLS_HELLO_BAD);
}

/*
 * Hand-built hellos: a writer of the fields, then the two headers (record
 * and handshake) filled in around them.
 */
struct w {
	unsigned char b[3 * TLS_HELLO_MAX];
	size_t n;
};

static void
w_u8(struct w *w, unsigned v)
{
	w->b[w->n++] = (unsigned char)v;
}

static void
w_u16(struct w *w, unsigned v)
{
	w_u8(w, v >> 8);
	w_u8(w, v & 0xff);
}

static void
w_bytes(struct w *w, const void *p, size_t n)
{
	memcpy(w->b + w->n, p, n);
	w->n += n;
}

/* Record header, handshake header, version, random, ids, suites. */
static void
w_start(struct w *w)
{
	unsigned char rnd[32];

	memset(rnd, 0xab, sizeof(rnd));
	w->n = 0;
	w_u8(w, 0x16);
	w_u16(w, 0x0301);
	w_u16(w, 0); /* record length, below */
	w_u8(w, 1);
	w_u8(w, 0);
	w_u16(w, 0); /* handshake length, below */
	w_u16(w, 0x0303);
	w_bytes(w, rnd, sizeof(rnd));
	w_u8(w, 0);  /* session id */
	w_u16(w, 2); /* cipher suites */
	w_u16(w, 0x1301);
	w_u8(w, 1); /* compression methods */
	w_u8(w, 0);
}

static void
w_finish(struct w *w)
{
	size_t rec = w->n - 5, hs = w->n - 9;

	w->b[3] = (unsigned char)(rec >> 8);
	w->b[4] = (unsigned char)rec;
	w->b[6] = (unsigned char)(hs >> 16);
	w->b[7] = (unsigned char)(hs >> 8);
	w->b[8] = (unsigned char)hs;
}

/* An extension of type t with n bytes of p. */
static void
w_ext(struct w *w, unsigned t, const void *p, size_t n)
{
	w_u16(w, t);
	w_u16(w, (unsigned)n);
	w_bytes(w, p, n);
}

/* A server_name extension body with the given host names. */
static size_t
sni_body(unsigned char *out, const char *const *names, size_t k)
{
	size_t o = 2, i, l;

	for (i = 0; i < k; i++) {
		l = strlen(names[i]);
		out[o++] = 0;
		out[o++] = (unsigned char)(l >> 8);
		out[o++] = (unsigned char)l;
		memcpy(out + o, names[i], l);
		o += l;
	}
	out[0] = (unsigned char)((o - 2) >> 8);
	out[1] = (unsigned char)(o - 2);
	return o;
}

/* A hello whose extensions are ext (n bytes), its list length exact. */
static void
hello_with(struct w *w, const unsigned char *ext, size_t n)
{
	w_start(w);
	w_u16(w, (unsigned)n);
	w_bytes(w, ext, n);
	w_finish(w);
}

static enum tls_hello
one_name(const char *name, char *out)
{
	const char *names[] = { name };
	unsigned char body[600], ext[700];
	struct w *w = test_malloc(sizeof(*w));
	const char *why;
	size_t bn = sni_body(body, names, 1), en;
	enum tls_hello r;

	en = 0;
	ext[en++] = 0;
	ext[en++] = 0;
	ext[en++] = (unsigned char)(bn >> 8);
	ext[en++] = (unsigned char)bn;
	memcpy(ext + en, body, bn);
	en += bn;
	hello_with(w, ext, en);
	r = parse(w->b, w->n, out, &why);
	test_free(w);
	return r;
}

static void
test_several_extensions(void **state)
{
	const char *names[] = { "model.example.org" };
	unsigned char body[300];
	struct w *w = test_malloc(sizeof(*w));
	struct w e;
	char out[256];
	const char *why;
	size_t bn = sni_body(body, names, 1);

	(void)state;
	e.n = 0;
	w_ext(&e, 10, "\x00\x02\x00\x1d", 4); /* supported_groups */
	w_ext(&e, 16, "\x00\x03\x02h2", 5);   /* ALPN */
	w_ext(&e, 0, body, bn);               /* server_name */
	w_ext(&e, 43, "\x02\x03\x04", 3);     /* supported_versions */
	w_ext(&e, 0xfe0d, "", 0);             /* unknown, empty */
	hello_with(w, e.b, e.n);
	assert_int_equal(parse(w->b, w->n, out, &why), TLS_HELLO_OK);
	assert_string_equal(out, "model.example.org");

	/* The same without server_name. */
	e.n = 0;
	w_ext(&e, 10, "\x00\x02\x00\x1d", 4);
	w_ext(&e, 16, "\x00\x03\x02h2", 5);
	hello_with(w, e.b, e.n);
	assert_int_equal(parse(w->b, w->n, out, &why), TLS_HELLO_NO_SNI);

	/* No extensions at all (TLS 1.2 allows it): no SNI. */
	w_start(w);
	w_finish(w);
	assert_int_equal(parse(w->b, w->n, out, &why), TLS_HELLO_NO_SNI);

	/* An extension twice. */
	e.n = 0;
	w_ext(&e, 10, "\x00\x02\x00\x1d", 4);
	w_ext(&e, 0, body, bn);
	w_ext(&e, 10, "\x00\x02\x00\x1d", 4);
	hello_with(w, e.b, e.n);
	assert_int_equal(parse(w->b, w->n, out, &why), TLS_HELLO_BAD);

	/* server_name twice. */
	e.n = 0;
	w_ext(&e, 0, body, bn);
	w_ext(&e, 0, body, bn);
	hello_with(w, e.b, e.n);
	assert_int_equal(parse(w->b, w->n, out, &why), TLS_HELLO_BAD);
	test_free(w);
}

static void
test_two_snis(void **state)
{
	const char *names[] = { "a.example.com", "b.example.com" };
	unsigned char body[300];
	struct w *w = test_malloc(sizeof(*w));
	struct w e;
	char out[256];
	const char *why;
	size_t bn = sni_body(body, names, 2);

	(void)state;
	e.n = 0;
	w_ext(&e, 0, body, bn);
	hello_with(w, e.b, e.n);
	assert_int_equal(parse(w->b, w->n, out, &why), TLS_HELLO_BAD);
	assert_non_null(strstr(why, "two host names"));
	/* A name type other than host_name. */
	bn = sni_body(body, names, 1);
	body[2] = 7;
	e.n = 0;
	w_ext(&e, 0, body, bn);
	hello_with(w, e.b, e.n);
	assert_int_equal(parse(w->b, w->n, out, &why), TLS_HELLO_BAD);
	/* An empty list. */
	e.n = 0;
	w_ext(&e, 0, "\x00\x00", 2);
	hello_with(w, e.b, e.n);
	assert_int_equal(parse(w->b, w->n, out, &why), TLS_HELLO_BAD);
	test_free(w);
}

static void
test_bad_lengths(void **state)
{
	const char *names[] = { "api.example.com" };
	unsigned char body[300];
	struct w *w = test_malloc(sizeof(*w));
	struct w e;
	char out[256];
	const char *why;
	size_t bn = sni_body(body, names, 1), n;

	(void)state;
	e.n = 0;
	w_ext(&e, 0, body, bn);
	hello_with(w, e.b, e.n);
	assert_int_equal(parse(w->b, w->n, out, &why), TLS_HELLO_OK);
	n = w->n;

	/* The extensions' list one byte longer than what follows. */
	w->b[n - e.n - 1]++;
	assert_int_equal(parse(w->b, n, out, &why), TLS_HELLO_BAD);
	w->b[n - e.n - 1]--;
	/* One byte shorter: the message does not end with the list. */
	w->b[n - e.n - 1]--;
	assert_int_equal(parse(w->b, n, out, &why), TLS_HELLO_BAD);
	w->b[n - e.n - 1]++;
	/* The server_name list length off by one either way. */
	w->b[n - bn + 1]++;
	assert_int_equal(parse(w->b, n, out, &why), TLS_HELLO_BAD);
	w->b[n - bn + 1] -= 2;
	assert_int_equal(parse(w->b, n, out, &why), TLS_HELLO_BAD);
	w->b[n - bn + 1]++;
	/* The host name's length past its list. */
	w->b[n - bn + 4]++;
	assert_int_equal(parse(w->b, n, out, &why), TLS_HELLO_BAD);
	w->b[n - bn + 4]--;
	assert_int_equal(parse(w->b, n, out, &why), TLS_HELLO_OK);

	/* A handshake length shorter than the record: bytes left over. */
	w->b[8]--;
	assert_int_equal(parse(w->b, n, out, &why), TLS_HELLO_BAD);
	w->b[8]++;
	/* Session id over 32 bytes. */
	w->b[9 + 2 + 32] = 33;
	assert_int_equal(parse(w->b, n, out, &why), TLS_HELLO_BAD);
	w->b[9 + 2 + 32] = 0;
	/* An odd cipher suites length. */
	w->b[9 + 2 + 32 + 2] = 3;
	assert_int_equal(parse(w->b, n, out, &why), TLS_HELLO_BAD);
	w->b[9 + 2 + 32 + 2] = 2;
	/* Not a ClientHello; not version 3. */
	w->b[5] = 2;
	assert_int_equal(parse(w->b, n, out, &why), TLS_HELLO_BAD);
	w->b[5] = 1;
	w->b[9] = 2;
	assert_int_equal(parse(w->b, n, out, &why), TLS_HELLO_BAD);
	w->b[9] = 3;
	/* A record version that is not 3.x. */
	w->b[1] = 2;
	assert_int_equal(parse(w->b, n, out, &why), TLS_HELLO_BAD);
	w->b[1] = 3;
	/* A zero-length record. */
	assert_int_equal(parse((const unsigned char *)"\x16\x03\x01\x00\x00", 5,
			     out, &why),
	    TLS_HELLO_BAD);
	assert_int_equal(parse(w->b, n, out, &why), TLS_HELLO_OK);
	test_free(w);
}

static void
test_huge_lengths(void **state)
{
	struct w *w = test_malloc(sizeof(*w));
	char out[256];
	const char *why;

	(void)state;
	/* A record over 2^14. */
	assert_int_equal(parse((const unsigned char *)"\x16\x03\x01\x40\x01", 5,
			     out, &why),
	    TLS_HELLO_BAD);
	/* A handshake message over what sluice reads. */
	assert_int_equal(parse((const unsigned char *)"\x16\x03\x01\x00\x04"
						      "\x01\xff\xff\xff",
			     9, out, &why),
	    TLS_HELLO_BAD);
	/* One byte over what sluice reads, or just what it reads. */
	assert_int_equal(parse((const unsigned char *)"\x16\x03\x01\x00\x04"
						      "\x01\x00\x3f\xfd",
			     9, out, &why),
	    TLS_HELLO_BAD);
	assert_int_equal(parse((const unsigned char *)"\x16\x03\x01\x00\x04"
						      "\x01\x00\x3f\xfc",
			     9, out, &why),
	    TLS_HELLO_MORE);
	/* An extension claiming 0xffff bytes. */
	w_start(w);
	w_u16(w, 4);
	w_u16(w, 0);
	w_u16(w, 0xffff);
	w_finish(w);
	assert_int_equal(parse(w->b, w->n, out, &why), TLS_HELLO_BAD);
	/* Extensions list claiming 0xffff bytes. */
	w_start(w);
	w_u16(w, 0xffff);
	w_finish(w);
	assert_int_equal(parse(w->b, w->n, out, &why), TLS_HELLO_BAD);
	/* A ClientHello of exactly TLS_HELLO_MAX - 4 bytes over two records:
	 * read whole (a padding extension fills it). */
	{
		static unsigned char pad[TLS_HELLO_MAX];
		static unsigned char frag[3 * TLS_HELLO_MAX];
		size_t m, fill;

		w_start(w);
		fill = TLS_HELLO_MAX - (w->n - 5) - 2 - 4;
		w_u16(w, (unsigned)(fill + 4));
		w_ext(w, 21, pad, fill);
		w_finish(w);
		assert_int_equal(w->n - 5, TLS_HELLO_MAX);
		m = refragment(w->b, w->n, 10000, frag);
		assert_int_equal(parse(frag, m, out, &why), TLS_HELLO_NO_SNI);
		/* One byte more: refused. */
		frag[6 + 2]++;
		assert_int_equal(parse(frag, m, out, &why), TLS_HELLO_BAD);
	}
	test_free(w);
}

static void
test_names(void **state)
{
	static const struct {
		const char *name;
		enum tls_hello r;
		const char *out;
	} c[] = {
		{ "api.example.com", TLS_HELLO_OK, "api.example.com" },
		{ "API.EXAMPLE.COM", TLS_HELLO_OK, "api.example.com" },
		{ "a-b.c0", TLS_HELLO_OK, "a-b.c0" },
		{ "localhost", TLS_HELLO_OK, "localhost" },
		{ "api.example.com.", TLS_HELLO_BAD, "" },
		{ ".example.com", TLS_HELLO_BAD, "" },
		{ "a..b", TLS_HELLO_BAD, "" },
		{ "-a.com", TLS_HELLO_BAD, "" },
		{ "a-.com", TLS_HELLO_BAD, "" },
		{ "a_b.com", TLS_HELLO_BAD, "" },
		{ "a b.com", TLS_HELLO_BAD, "" },
		{ "198.18.0.1", TLS_HELLO_BAD, "" },
		{ "2001:2::1", TLS_HELLO_BAD, "" },
		{ "*.example.com", TLS_HELLO_BAD, "" },
		{ "", TLS_HELLO_BAD, "" },
		{ "caf\xc3\xa9.com", TLS_HELLO_BAD, "" },
	};
	char out[256], lab[80], big[300];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		assert_int_equal(one_name(c[i].name, out), c[i].r);
		if (c[i].r == TLS_HELLO_OK)
			assert_string_equal(out, c[i].out);
	}
	/* A label of 63 bytes passes, 64 does not. */
	memset(lab, 'a', 63);
	strcpy(lab + 63, ".com");
	assert_int_equal(one_name(lab, out), TLS_HELLO_OK);
	memset(lab, 'a', 64);
	strcpy(lab + 64, ".com");
	assert_int_equal(one_name(lab, out), TLS_HELLO_BAD);
	/* 253 bytes pass, 254 do not. */
	memset(big, 'a', sizeof(big));
	for (i = 50; i < 253; i += 51)
		big[i] = '.';
	big[253] = '\0';
	assert_int_equal(one_name(big, out), TLS_HELLO_OK);
	big[253] = 'a';
	big[254] = '\0';
	assert_int_equal(one_name(big, out), TLS_HELLO_BAD);
}

static void
test_not_tls(void **state)
{
	char out[256];
	const char *why;

	(void)state;
	assert_int_equal(parse((const unsigned char *)"GET / HTTP/1.1\r\n", 16,
			     out, &why),
	    TLS_HELLO_NOT_TLS);
	/* An SSLv2-style hello is not a handshake record either. */
	assert_int_equal(parse((const unsigned char *)"\x80\x2e\x01\x03\x01", 5,
			     out, &why),
	    TLS_HELLO_NOT_TLS);
	assert_int_equal(parse((const unsigned char *)"", 0, out, &why),
	    TLS_HELLO_MORE);
	assert_int_equal(parse((const unsigned char *)"\x16", 1, out, &why),
	    TLS_HELLO_MORE);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_openssl_sni),
		cmocka_unit_test(test_openssl_no_sni),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_fragmented),
		cmocka_unit_test(test_several_extensions),
		cmocka_unit_test(test_two_snis),
		cmocka_unit_test(test_bad_lengths),
		cmocka_unit_test(test_huge_lengths),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_not_tls),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
