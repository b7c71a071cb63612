/*
 * A certificate described for people (`sluice certs show`): the fields an
 * operator checks before handing a CA to clients. Text only; the CLI
 * decides where it goes.
 */
#include <arpa/inet.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "certs/certs.h"
#include "certs/internal.h"

/* An snprintf-style appender: off counts what the whole text needs. */
struct out {
	char *o_buf;
	size_t o_len;
	size_t o_off;
};

static void out_add(struct out *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
out_add(struct out *o, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(o->o_off < o->o_len ? o->o_buf + o->o_off : NULL,
	    o->o_off < o->o_len ? o->o_len - o->o_off : 0, fmt, ap);
	va_end(ap);
	if (n > 0)
		o->o_off += (size_t)n;
}

/*
 * A name in RFC 2253 form ("CN=sluice local CA"); OpenSSL escapes control
 * and non-ASCII bytes, so a hostile certificate cannot write to a terminal.
 */
static void
out_name(struct out *o, const char *key, const X509_NAME *name)
{
	BIO *b = BIO_new(BIO_s_mem());
	char *p;
	long n;

	if (b == NULL || X509_NAME_print_ex(b, name, 0, XN_FLAG_RFC2253) < 0 ||
	    (n = BIO_get_mem_data(b, &p)) < 0) {
		BIO_free(b);
		ERR_clear_error();
		out_add(o, "%s: ?\n", key);
		return;
	}
	out_add(o, "%s: %.*s\n", key, (int)n, p);
	BIO_free(b);
}

static void
out_time(struct out *o, const char *key, const ASN1_TIME *t)
{
	struct tm tm;
	char buf[32];

	memset(&tm, 0, sizeof(tm));
	if (ASN1_TIME_to_tm(t, &tm) != 1 ||
	    strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		snprintf(buf, sizeof(buf), "?");
	out_add(o, "%s: %s\n", key, buf);
}

/* Mask bytes to a prefix length; -1 when the mask is not contiguous. */
static int
prefix_len(const unsigned char *m, int n)
{
	int i, bits = 0, done = 0;

	for (i = 0; i < n; i++) {
		unsigned char b = m[i];
		int j;

		for (j = 7; j >= 0; j--) {
			if (b & (1u << j)) {
				if (done)
					return -1;
				bits++;
			} else
				done = 1;
		}
	}
	return bits;
}

static void
out_gn(struct out *o, const char *key, const GENERAL_NAME *gn)
{
	char addr[INET6_ADDRSTRLEN];
	const unsigned char *d;
	int n, plen;

	switch (gn->type) {
	case GEN_DNS:
		d = ASN1_STRING_get0_data(gn->d.dNSName);
		n = ASN1_STRING_length(gn->d.dNSName);
		/* Printed as-is only when it is plain text. */
		for (plen = 0; plen < n; plen++)
			if (d[plen] < 0x21 || d[plen] > 0x7e)
				break;
		if (plen == n)
			out_add(o, "%s: DNS:%.*s\n", key, n, (const char *)d);
		else
			out_add(o, "%s: DNS:<%d bytes, not printable>\n", key,
			    n);
		return;
	case GEN_IPADD:
		d = ASN1_STRING_get0_data(gn->d.iPAddress);
		n = ASN1_STRING_length(gn->d.iPAddress);
		if ((n == 8 || n == 32) &&
		    inet_ntop(n == 8 ? AF_INET : AF_INET6, d, addr,
			sizeof(addr)) != NULL &&
		    (plen = prefix_len(d + n / 2, n / 2)) >= 0) {
			out_add(o, "%s: IP:%s/%d\n", key, addr, plen);
			return;
		}
		out_add(o, "%s: IP:<%d bytes>\n", key, n);
		return;
	case GEN_EMAIL:
		out_add(o, "%s: email\n", key);
		return;
	case GEN_URI:
		out_add(o, "%s: URI\n", key);
		return;
	case GEN_DIRNAME:
		out_add(o, "%s: dirName\n", key);
		return;
	default:
		out_add(o, "%s: other (type %d)\n", key, gn->type);
		return;
	}
}

static void
out_key(struct out *o, X509 *cert)
{
	EVP_PKEY *k = X509_get0_pubkey(cert);
	char group[64] = "";
	size_t glen;

	if (k == NULL) {
		out_add(o, "key: ?\n");
	} else if (EVP_PKEY_is_a(k, "ED25519")) {
		out_add(o, "key: Ed25519\n");
	} else if (EVP_PKEY_is_a(k, "EC") &&
	    EVP_PKEY_get_group_name(k, group, sizeof(group), &glen) == 1) {
		out_add(o, "key: EC %s\n",
		    strcmp(group, "prime256v1") == 0 ? "P-256" : group);
	} else {
		out_add(o, "key: %s %d bits\n",
		    EVP_PKEY_get0_type_name(k) != NULL ?
			EVP_PKEY_get0_type_name(k) :
			"?",
		    EVP_PKEY_get_bits(k));
	}
	ERR_clear_error();
}

int
certs_spki_pin(X509 *cert, char out[45])
{
	unsigned char h[32];

	if (certs_spki_sha256(cert, h) == -1)
		return -1;
	return EVP_EncodeBlock((unsigned char *)out, h, sizeof(h)) == 44 ? 0 :
									   -1;
}

int
certs_show(X509 *cert, char *buf, size_t len)
{
	struct out o = { buf, len, 0 };
	NAME_CONSTRAINTS *nc;
	const ASN1_INTEGER *sn;
	BIGNUM *bn;
	char *hex, pin[45];
	uint32_t flags;
	int crit = -1, i;

	if (len > 0)
		buf[0] = '\0';
	out_name(&o, "subject", X509_get_subject_name(cert));
	out_name(&o, "issuer", X509_get_issuer_name(cert));
	sn = X509_get0_serialNumber(cert);
	if ((bn = ASN1_INTEGER_to_BN(sn, NULL)) != NULL &&
	    (hex = BN_bn2hex(bn)) != NULL) {
		out_add(&o, "serial: %s\n", hex);
		OPENSSL_free(hex);
	}
	BN_free(bn);
	out_time(&o, "not_before", X509_get0_notBefore(cert));
	out_time(&o, "not_after", X509_get0_notAfter(cert));
	out_key(&o, cert);
	flags = X509_get_extension_flags(cert);
	if (flags & EXFLAG_CA) {
		long pl = X509_get_pathlen(cert);

		if (pl >= 0)
			out_add(&o, "ca: true, pathlen %ld\n", pl);
		else
			out_add(&o, "ca: true\n");
	} else
		out_add(&o, "ca: false\n");
	nc = X509_get_ext_d2i(cert, NID_name_constraints, &crit, NULL);
	if (nc == NULL && crit != -1)
		out_add(&o, "constraints: malformed\n");
	else if (nc == NULL)
		out_add(&o, "constraints: none (this CA may sign any name)\n");
	if (nc != NULL) {
		for (i = 0; i < sk_GENERAL_SUBTREE_num(nc->permittedSubtrees);
		     i++)
			out_gn(&o, "permitted",
			    sk_GENERAL_SUBTREE_value(nc->permittedSubtrees, i)
				->base);
		for (i = 0; i < sk_GENERAL_SUBTREE_num(nc->excludedSubtrees);
		     i++)
			out_gn(&o, "excluded",
			    sk_GENERAL_SUBTREE_value(nc->excludedSubtrees, i)
				->base);
		NAME_CONSTRAINTS_free(nc);
	}
	if (certs_spki_pin(cert, pin) == 0)
		out_add(&o, "spki_sha256: %s\n", pin);
	ERR_clear_error();
	if (o.o_off > (size_t)INT32_MAX)
		return -1;
	return (int)o.o_off;
}
