/*
 * certs: TLS material. Upstream trust (CA file or the system store, SPKI
 * SHA-256 pins) and key loading. Never logs or exits: errors go to a
 * caller-supplied "why" buffer (STYLE.md §4).
 */
#ifndef SLUICE_CERTS_H
#define SLUICE_CERTS_H

#include <stddef.h>

#include <openssl/ssl.h>
#include <openssl/x509.h>

/*
 * A client SSL_CTX for upstream connections: TLS >= 1.2, peer verification
 * against ca_file (or the system store when NULL), client session cache on
 * (for resumption). Returns NULL with why set.
 */
SSL_CTX *certs_client_ctx(const char *ca_file, char *why, size_t whylen);
/* SHA-256 of a certificate's SubjectPublicKeyInfo (DER). 0 or -1. */
int certs_spki_sha256(X509 *cert, unsigned char out[32]);
/*
 * Non-zero when any certificate of the verified chain of ssl (leaf
 * included) has an SPKI hash among pins[0..npins).
 */
int certs_pin_match(SSL *ssl, const unsigned char (*pins)[32], size_t npins);
/*
 * Decode a base64 SPKI pin (44 characters, standard alphabet, with
 * padding) into out. Returns 0, or -1 with why set.
 */
int certs_pin_decode(const char *b64, unsigned char out[32], char *why,
    size_t whylen);

#endif
