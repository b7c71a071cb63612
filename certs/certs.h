/*
 * certs: TLS material. Upstream trust (CA file or the system store, SPKI
 * SHA-256 pins), key loading, the local CA for interception (generation
 * with name constraints, files, the ephemeral in-memory CA), leaf minting
 * with a bounded LRU cache, and the server-side SSL_CTX of an intercepted
 * tunnel. Never logs or exits: errors go to a caller-supplied "why" buffer
 * (STYLE.md §4), and no key byte ever reaches one.
 *
 * Links against OpenSSL and libc only; nothing here includes proxy/. Not
 * thread-safe: one event loop owns a cache and its contexts.
 */
#ifndef SLUICE_CERTS_H
#define SLUICE_CERTS_H

#include <sys/types.h>

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <openssl/ssl.h>
#include <openssl/x509.h>

/* trust.c */

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

/* keys.c */

/* owner argument of certs_read_secret(): any owner will do. */
#define CERTS_ANY_OWNER ((uid_t)-1)
/* Largest key, certificate or secret file read (bytes). */
#define CERTS_MAX_FILE 1048576

/*
 * Read a secret file under the secret-file rules: opened with O_NOFOLLOW
 * (a symbolic link is refused), a regular file, no group/other mode bits,
 * owned by root, by owner or by the effective uid (owner CERTS_ANY_OWNER:
 * any), at most CERTS_MAX_FILE bytes. *out is NUL-terminated, *outlen
 * excludes one trailing newline. Returns 0 (free with certs_secret_free)
 * or -1 with why naming the path and the rule broken.
 */
int certs_read_secret(const char *path, uid_t owner, unsigned char **out,
    size_t *outlen, char *why, size_t whylen);
/*
 * Let certs_read_secret() take "/proc/self/fd/N" for the memory file fd
 * (memfd_create, mode 0600): sluice exec keeps its generated keys there,
 * off every disk. Any other link stays refused. 0, or -1 (at most 8).
 */
int certs_trust_memfd(int fd);
/* The same for a public file (certificate, public key): no mode rules. */
int certs_read_public(const char *path, unsigned char **out, size_t *outlen,
    char *why, size_t whylen);
/*
 * Wipe len bytes of what certs_read_secret() returned, and free it. NULL
 * is a no-op.
 */
void certs_secret_free(unsigned char *buf, size_t len);

/* Key types accepted by certs_pkey_from_pem() (a mask). */
#define CERTS_KEY_P256    0x1 /* EC on prime256v1 */
#define CERTS_KEY_ED25519 0x2 /* Ed25519 */

/*
 * Parse a private key, PEM (PKCS#8 or traditional) or DER, of one of the
 * types in the mask want. Unencrypted keys only. The caller still owns
 * and wipes buf. Returns the key, or NULL with why set (what the input
 * is or lacks; never any key byte).
 */
EVP_PKEY *certs_pkey_from_pem(const unsigned char *buf, size_t len, int want,
    char *why, size_t whylen);
/* The same for a PEM public key (SubjectPublicKeyInfo). */
EVP_PKEY *certs_pubkey_from_pem(const unsigned char *buf, size_t len, int want,
    char *why, size_t whylen);
/*
 * An Ed25519 private key from a secret file (certs_read_secret rules,
 * owner as there), the buffer wiped after parsing; what `sluice token
 * mint --key` reads. NULL with why naming the file.
 */
EVP_PKEY *
certs_ed25519_key_load(const char *path, uid_t owner, char *why, size_t whylen);
/* An Ed25519 public key PEM from a file (tokens.keys[].public_key_file). */
EVP_PKEY *certs_ed25519_pubkey_load(const char *path, char *why, size_t whylen);

/* host.c */

/* Longest host name (DNS presentation form, no trailing dot). */
#define CERTS_HOST_MAX 253

/*
 * Check that host is a name a leaf may carry: an IPv4 or IPv6 address
 * literal (no brackets, no zone), or a DNS name of lowercase LDH labels
 * (1..63 bytes, no leading or trailing '-'), no wildcard, no trailing
 * dot, at most CERTS_HOST_MAX bytes, whose last label is not all digits
 * (such a name reads as an address to some parsers). Returns 0, or -1
 * with why naming the host and the byte or rule at fault.
 */
int certs_host_check(const char *host, char *why, size_t whylen);
/*
 * Write host's canonical form to out (CERTS_HOST_MAX + 1 bytes, or
 * INET6_ADDRSTRLEN at least): a DNS name lowercased, an IPv6 literal as
 * inet_ntop prints it. Then certs_host_check() on the result. 0 or -1.
 */
int certs_host_canon(const char *host, char *out, size_t outlen, char *why,
    size_t whylen);

/* ca.c */

/*
 * A local CA: certificate and private key. Owned by the caller of
 * certs_ca_generate() or certs_ca_load*(); freed with certs_ca_free(),
 * which wipes the key. A cache or server context borrows it.
 */
struct certs_ca;

#define CERTS_CA_DEFAULT_CN   "sluice local CA"
#define CERTS_CA_DEFAULT_DAYS 30
#define CERTS_CA_MAX_DAYS     3650
#define CERTS_CA_MAX_PERMIT   256 /* host names in the name constraints */

/*
 * What certs_ca_generate() makes. cn NULL: CERTS_CA_DEFAULT_CN; days 0:
 * CERTS_CA_DEFAULT_DAYS. permit[0..npermit): host names (certs_host_check
 * rules; duplicates are dropped) the CA may sign; npermit 0 makes an
 * unconstrained CA.
 */
struct certs_ca_params {
	const char *cp_cn;
	unsigned cp_days;
	const char *const *cp_permit;
	size_t cp_npermit;
};

/*
 * Generate a CA in memory: an EC P-256 key, a self-signed X509v3
 * certificate with basicConstraints critical CA:TRUE pathlen:0, keyUsage
 * critical keyCertSign+cRLSign, a subjectKeyIdentifier, subject and issuer
 * CN=cp_cn, a 16-byte random positive serial, valid from now - 1 h (clock
 * skew) to now + cp_days. With hosts to permit, a critical nameConstraints
 * extension permits exactly those dNSNames (each also covers its
 * subdomains, RFC 5280 §4.2.1.10) and address literals (a full mask), and
 * excludes every address of a family (0.0.0.0/0, ::/0) no literal of that
 * family is permitted in. The key stays in memory: this is the ephemeral
 * CA, unless written with certs_ca_write(). NULL with why set.
 */
struct certs_ca *certs_ca_generate(const struct certs_ca_params *p, time_t now,
    char *why, size_t whylen);
/*
 * Write DIR/ca.key (PKCS#8 PEM, created with O_EXCL mode 0600: an
 * existing key is never overwritten) and DIR/ca.pem (mode 0644, also
 * refused when it exists), each fsync'ed. On failure nothing is left
 * behind. 0 or -1 with why naming the file.
 */
int certs_ca_write(const struct certs_ca *ca, const char *dir, char *why,
    size_t whylen);
/*
 * Write only the certificate (PEM, mode 0644) to path, replacing it
 * atomically (a temporary file renamed over it): the ephemeral CA's
 * intercept.ca_cert_out. 0 or -1 with why.
 */
int certs_ca_write_cert(const struct certs_ca *ca, const char *path, char *why,
    size_t whylen);
/*
 * Load a CA from a certificate file (PEM or DER) and a key file (PEM or
 * DER, read under the secret-file rules with owner as in
 * certs_read_secret). Checked: the key is EC P-256 or Ed25519 and matches
 * the certificate, the certificate has basicConstraints CA:TRUE and a
 * keyUsage with keyCertSign, and now is within its validity. NULL with
 * why naming the file and the check that failed.
 */
struct certs_ca *certs_ca_load(const char *cert_file, const char *key_file,
    uid_t owner, time_t now, char *why, size_t whylen);
/*
 * The same from memory (the fuzz target's entry point). The caller keeps
 * and wipes the buffers.
 */
struct certs_ca *certs_ca_from_mem(const unsigned char *cert, size_t certlen,
    const unsigned char *key, size_t keylen, time_t now, char *why,
    size_t whylen);
void certs_ca_free(struct certs_ca *ca);
/* The CA's certificate, borrowed for the CA's lifetime. */
X509 *certs_ca_cert(const struct certs_ca *ca);
/*
 * 0 when the CA's name constraints (as OpenSSL's verifier reads them)
 * allow a leaf for host (canonical form, certs_host_check rules); -1 with
 * why saying which constraint forbids it.
 */
int certs_ca_permits(const struct certs_ca *ca, const char *host, char *why,
    size_t whylen);

/* leaf.c */

#define CERTS_LEAF_DEFAULT_DAYS 1
#define CERTS_LEAF_MAX_DAYS     398
#define CERTS_DEFAULT_LEAVES    1024

/*
 * A new EC P-256 key for leaves: one per process (certs_cache_new makes
 * it). Made so that X509_set_pubkey() is cheap with it (see leaf.c);
 * wiped when freed. NULL with why.
 */
EVP_PKEY *certs_leaf_key_new(char *why, size_t whylen);
/*
 * Mint a leaf for host (canonical form) signed by ca, carrying leaf_key's
 * public key: subject CN=host (no subject for an address literal, whose
 * only name is then a critical SAN: a CN that looks like a DNS name would
 * meet the CA's DNS constraints), SAN dNSName or iPAddress, issuer the
 * CA's subject, authorityKeyIdentifier, basicConstraints CA:FALSE,
 * keyUsage digitalSignature, extendedKeyUsage serverAuth, a 16-byte
 * random positive serial, valid from max(now - 1 h, CA notBefore) to
 * min(now + leaf_days, CA notAfter). Refused when the CA's name
 * constraints would make clients reject it, or the CA has expired.
 * Returns the certificate (the caller owns it) or NULL with why.
 */
X509 *certs_leaf_mint(const struct certs_ca *ca, EVP_PKEY *leaf_key,
    const char *host, unsigned leaf_days, time_t now, char *why, size_t whylen);

/*
 * A bounded LRU cache of leaves by host name (case-insensitive, exact),
 * with the process's one leaf key. Borrows the CA, which must outlive it.
 * Owned by its creator; freed with certs_cache_free().
 */
struct certs_cache;

struct certs_cache_stats {
	uint64_t cs_hits;        /* lookups answered from the cache */
	uint64_t cs_misses;      /* lookups that minted (or tried to) */
	uint64_t cs_evictions;   /* least recently used leaves dropped */
	uint64_t cs_mint_errors; /* misses that failed to mint */
	size_t cs_leaves;        /* leaves held now */
};

/*
 * A cache of at most max_leaves leaves (0: CERTS_DEFAULT_LEAVES) valid for
 * leaf_days (0: CERTS_LEAF_DEFAULT_DAYS) each, never past the CA's
 * notAfter. Generates the leaf key. NULL with why.
 */
struct certs_cache *certs_cache_new(const struct certs_ca *ca,
    size_t max_leaves, unsigned leaf_days, char *why, size_t whylen);
void certs_cache_free(struct certs_cache *cc);
/*
 * The leaf for host: cached (made most recently used), or minted and
 * cached, evicting the least recently used leaf when full. A cached leaf
 * within 5 minutes of its notAfter is minted again. Borrowed: valid until
 * the next certs_cache_get() or certs_cache_free() (SSL_use_certificate
 * takes its own reference). NULL with why (bad host, outside the CA's
 * constraints, expired CA, out of memory).
 */
X509 *certs_cache_get(struct certs_cache *cc, const char *host, time_t now,
    char *why, size_t whylen);
/* The leaf key, borrowed for the cache's lifetime. */
EVP_PKEY *certs_cache_key(const struct certs_cache *cc);
void
certs_cache_stats(const struct certs_cache *cc, struct certs_cache_stats *out);

/* server.c */

/* Why a server-side handshake failed, as far as certs/ knows. */
enum certs_server_fail {
	CERTS_SF_NONE = 0,     /* no failure recorded by certs/ */
	CERTS_SF_NO_EXPECT,    /* certs_server_expect() was not called */
	CERTS_SF_SNI_MISMATCH, /* the SNI differs from the expected host */
	CERTS_SF_ALPN,         /* ALPN offered without http/1.1 */
	CERTS_SF_LEAF,         /* no leaf for the host (mint failed) */
};

/*
 * The server-side SSL_CTX of intercepted tunnels, borrowing cc (which
 * must outlive it): TLS 1.2 or 1.3, ECDHE AEAD suites, ALPN selecting
 * "http/1.1" only (a client offering ALPN without it gets a fatal
 * no_application_protocol alert; no ALPN is fine), an SNI check against
 * the host given to certs_server_expect() (a mismatch is a fatal
 * unrecognized_name alert), and the host's leaf from cc installed by a
 * certificate callback (so a client sending no SNI gets the expected
 * host's leaf). No session tickets and no session cache: every tunnel
 * runs a full handshake through these checks. NULL with why.
 */
SSL_CTX *certs_server_ctx(struct certs_cache *cc, char *why, size_t whylen);
/*
 * Bind ssl (made from a certs_server_ctx) to the host its CONNECT named;
 * call before the handshake. The host is canonicalized and checked
 * (certs_host_canon). 0, or -1 with why (the handshake then fails).
 */
int certs_server_expect(SSL *ssl, const char *host, char *why, size_t whylen);
/* Why ssl's handshake failed in a certs/ callback (CERTS_SF_NONE: not). */
enum certs_server_fail certs_server_failure(const SSL *ssl);
/* The audit detail for a failure: "sni_mismatch", "alpn_no_http1", ... */
const char *certs_server_failure_str(enum certs_server_fail f);

/* show.c */

/*
 * Describe a certificate for `sluice certs show`, one "key: value" line
 * each: subject, issuer, serial, not_before, not_after (ISO 8601 UTC),
 * key, ca (with pathlen), a "permitted:" and an "excluded:" line per
 * name constraint (DNS:name, IP:addr/prefix, or the type for others),
 * and spki_sha256 (base64, the form pin_sha256 takes). Writes at most
 * len bytes, NUL-terminated; returns the length of the whole text
 * (snprintf-like: >= len means truncated), or -1 on error.
 */
int certs_show(X509 *cert, char *buf, size_t len);
/* Base64 of certs_spki_sha256() into out (45 bytes). 0 or -1. */
int certs_spki_pin(X509 *cert, char out[45]);

#endif
