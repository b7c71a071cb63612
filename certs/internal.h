/*
 * Helpers shared by the certs/ files only; not part of the library's
 * interface (certs.h is).
 */
#ifndef SLUICE_CERTS_INTERNAL_H
#define SLUICE_CERTS_INTERNAL_H

#include <stddef.h>
#include <time.h>

#include <openssl/asn1.h>
#include <openssl/x509.h>

/*
 * why = what, then ": " and OpenSSL's first queued error when there is
 * one; the error queue is emptied either way, so that a stale error never
 * shows up in the next report (STYLE.md §4).
 */
void certs_err(char *why, size_t whylen, const char *what);
/* An ASN1_TIME as seconds since the epoch. 0 or -1. */
int certs_asn1_time(const ASN1_TIME *t, time_t *out);
/*
 * 16 random bytes as a positive serial that always encodes in 16 bytes
 * (top bit clear, next bit set: 126 random bits). 0 or -1.
 */
int certs_set_serial(X509 *x);
/* Whether buf starts (after blanks) with a PEM header line. */
int certs_is_pem(const unsigned char *buf, size_t len);
/*
 * A certificate that carries host's names exactly as a leaf for it does
 * (subject, SAN), unsigned and with nothing else: what the name
 * constraints are checked against. NULL with why.
 */
X509 *certs_leaf_names(const char *host, char *why, size_t whylen);

struct certs_ca;
/* ca.c: the CA's validity and key, for leaf.c (borrowed). */
void certs_ca_validity(const struct certs_ca *ca, time_t *nb, time_t *na);
EVP_PKEY *certs_ca_key(const struct certs_ca *ca);
/*
 * ca.c: 0 when the names of x (a leaf or its probe) meet the CA's name
 * constraints as OpenSSL's verifier checks them; -1 with why.
 */
int certs_ca_check_names(const struct certs_ca *ca, X509 *x, char *why,
    size_t whylen);

/*
 * Add one extension to x, given in openssl.cnf syntax (constant strings
 * only: nothing a host or a user typed). 0 or -1.
 */
int certs_add_ext(X509 *x, X509 *issuer, int nid, const char *value);
/* t as "2026-12-02T00:17:00Z". */
void certs_fmt_time(time_t t, char *out, size_t len);

/* Sign x with key: SHA-256 for EC, none for Ed25519. 0 or -1. */
int certs_sign(X509 *x, EVP_PKEY *key);

#endif
