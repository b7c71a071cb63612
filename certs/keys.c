/*
 * Key and secret files: the secret-file rules (the same as the proxy's
 * config_read_secret, so that the proxy can switch to this copy) and
 * private/public key parsing by type. Every buffer that held key bytes is
 * wiped before it is freed.
 */
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "certs/certs.h"
#include "certs/internal.h"

#define SL_CERTS_NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* Read all of fd (a regular file of at most CERTS_MAX_FILE bytes). */
static int
read_fd(const char *path, int fd, unsigned char **out, size_t *outlen,
    char *why, size_t whylen)
{
	struct stat st;
	unsigned char *buf;
	size_t off = 0, size;
	ssize_t n;

	if (fstat(fd, &st) == -1) {
		snprintf(why, whylen, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(why, whylen, "%s: not a regular file", path);
		return -1;
	}
	if (st.st_size > (off_t)CERTS_MAX_FILE) {
		snprintf(why, whylen, "%s: larger than %d bytes", path,
		    CERTS_MAX_FILE);
		return -1;
	}
	size = (size_t)st.st_size;
	if ((buf = calloc(size + 1, 1)) == NULL) {
		snprintf(why, whylen, "%s: out of memory", path);
		return -1;
	}
	while (off < size) {
		n = read(fd, buf + off, size - off);
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0) {
			snprintf(why, whylen, "%s: %s", path,
			    n == 0 ? "short read" : strerror(errno));
			certs_secret_free(buf, size + 1);
			return -1;
		}
		off += (size_t)n;
	}
	*out = buf;
	*outlen = off;
	return 0;
}

/* Memory files this process made for its own secrets (sluice exec). */
static struct {
	dev_t dev;
	ino_t ino;
} trusted[8];
static size_t ntrusted;

int
certs_trust_memfd(int fd)
{
	struct stat st;

	if (ntrusted == SL_CERTS_NELEM(trusted) || fstat(fd, &st) == -1)
		return -1;
	trusted[ntrusted].dev = st.st_dev;
	trusted[ntrusted].ino = st.st_ino;
	ntrusted++;
	return 0;
}

/*
 * /proc/self/fd/N is a link; it is followed only to a memory file that
 * certs_trust_memfd() named (checked on the file opened, not the name).
 * Returns the descriptor, or -1 with errno ELOOP.
 */
static int
open_trusted(const char *path)
{
	struct stat st;
	size_t i;
	int fd;

	if (ntrusted == 0 || strncmp(path, "/proc/self/fd/", 14) != 0 ||
	    (fd = open(path, O_RDONLY | O_CLOEXEC)) == -1) {
		errno = ELOOP;
		return -1;
	}
	if (fstat(fd, &st) == 0)
		for (i = 0; i < ntrusted; i++)
			if (st.st_dev == trusted[i].dev &&
			    st.st_ino == trusted[i].ino)
				return fd;
	close(fd);
	errno = ELOOP;
	return -1;
}

int
certs_read_secret(const char *path, uid_t owner, unsigned char **out,
    size_t *outlen, char *why, size_t whylen)
{
	struct stat st;
	int fd;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) == -1 &&
	    (errno != ELOOP || (fd = open_trusted(path)) == -1)) {
		/* O_NOFOLLOW: a link could point anywhere the sandbox likes. */
		snprintf(why, whylen, "%s: %s", path,
		    errno == ELOOP ? "is a symbolic link (refused)" :
				     strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) == -1) {
		snprintf(why, whylen, "%s: %s", path, strerror(errno));
		close(fd);
		return -1;
	}
	/* A secret readable by others may already be known to the sandbox. */
	if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
		snprintf(why, whylen,
		    "%s: mode %04o gives group/other access (chmod 600)", path,
		    (unsigned)(st.st_mode & 07777));
		close(fd);
		return -1;
	}
	if (owner != CERTS_ANY_OWNER && st.st_uid != 0 && st.st_uid != owner &&
	    st.st_uid != geteuid()) {
		snprintf(why, whylen, "%s: owned by uid %u, not root or %u",
		    path, (unsigned)st.st_uid, (unsigned)owner);
		close(fd);
		return -1;
	}
	if (read_fd(path, fd, out, outlen, why, whylen) == -1) {
		close(fd);
		return -1;
	}
	close(fd);
	if (*outlen > 0 && (*out)[*outlen - 1] == '\n')
		(*outlen)--;
	return 0;
}

int
certs_read_public(const char *path, unsigned char **out, size_t *outlen,
    char *why, size_t whylen)
{
	int fd, rc;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1) {
		snprintf(why, whylen, "%s: %s", path, strerror(errno));
		return -1;
	}
	rc = read_fd(path, fd, out, outlen, why, whylen);
	close(fd);
	return rc;
}

void
certs_secret_free(unsigned char *buf, size_t len)
{
	if (buf == NULL)
		return;
	OPENSSL_cleanse(buf, len);
	free(buf);
}

/* Whether key is one of the types in the mask want; why names it if not. */
static int
key_type_ok(EVP_PKEY *key, int want, char *why, size_t whylen)
{
	char group[64] = "";
	size_t glen = 0;

	if ((want & CERTS_KEY_ED25519) && EVP_PKEY_is_a(key, "ED25519"))
		return 0;
	if ((want & CERTS_KEY_P256) && EVP_PKEY_is_a(key, "EC") &&
	    EVP_PKEY_get_group_name(key, group, sizeof(group), &glen) == 1 &&
	    (strcmp(group, "prime256v1") == 0 || strcmp(group, "P-256") == 0))
		return 0;
	ERR_clear_error();
	snprintf(why, whylen, "a %s%s%s key, not %s%s%s",
	    EVP_PKEY_get0_type_name(key) != NULL ?
		EVP_PKEY_get0_type_name(key) :
		"unknown",
	    group[0] ? " " : "", group,
	    (want & CERTS_KEY_P256) ? "EC P-256" : "",
	    (want & CERTS_KEY_P256) && (want & CERTS_KEY_ED25519) ? " or " : "",
	    (want & CERTS_KEY_ED25519) ? "Ed25519" : "");
	return -1;
}

/* An encrypted key is refused: there is no one to ask for a password. */
static int
no_password(char *buf, int size, int rwflag, void *u)
{
	(void)rwflag;
	(void)u;
	if (size > 0)
		buf[0] = '\0';
	return -1;
}

int
certs_is_pem(const unsigned char *buf, size_t len)
{
	size_t i = 0;

	while (i < len &&
	    (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\r' ||
		buf[i] == '\n'))
		i++;
	return len - i >= 10 && memcmp(buf + i, "-----BEGIN", 10) == 0;
}

EVP_PKEY *
certs_pkey_from_pem(const unsigned char *buf, size_t len, int want, char *why,
    size_t whylen)
{
	const unsigned char *p = buf;
	EVP_PKEY *key = NULL;
	BIO *bio;

	if (len == 0 || len > CERTS_MAX_FILE) {
		snprintf(why, whylen, "empty or larger than %d bytes",
		    CERTS_MAX_FILE);
		return NULL;
	}
	if (certs_is_pem(buf, len)) {
		if ((bio = BIO_new_mem_buf(buf, (int)len)) == NULL) {
			certs_err(why, whylen, "out of memory");
			return NULL;
		}
		key = PEM_read_bio_PrivateKey(bio, NULL, no_password, NULL);
		BIO_free(bio);
	} else {
		key = d2i_AutoPrivateKey(NULL, &p, (long)len);
		if (key != NULL && p != buf + len) {
			EVP_PKEY_free(key);
			ERR_clear_error();
			snprintf(why, whylen,
			    "trailing bytes after the DER private key");
			return NULL;
		}
	}
	if (key == NULL) {
		ERR_clear_error();
		snprintf(why, whylen,
		    "not an unencrypted PEM or DER private key");
		return NULL;
	}
	if (key_type_ok(key, want, why, whylen) == -1) {
		EVP_PKEY_free(key);
		return NULL;
	}
	return key;
}

EVP_PKEY *
certs_pubkey_from_pem(const unsigned char *buf, size_t len, int want, char *why,
    size_t whylen)
{
	EVP_PKEY *key;
	BIO *bio;

	if (len == 0 || len > CERTS_MAX_FILE) {
		snprintf(why, whylen, "empty or larger than %d bytes",
		    CERTS_MAX_FILE);
		return NULL;
	}
	if ((bio = BIO_new_mem_buf(buf, (int)len)) == NULL) {
		certs_err(why, whylen, "out of memory");
		return NULL;
	}
	key = PEM_read_bio_PUBKEY(bio, NULL, NULL, NULL);
	BIO_free(bio);
	if (key == NULL) {
		ERR_clear_error();
		snprintf(why, whylen, "not a PEM public key");
		return NULL;
	}
	if (key_type_ok(key, want, why, whylen) == -1) {
		EVP_PKEY_free(key);
		return NULL;
	}
	return key;
}

EVP_PKEY *
certs_ed25519_key_load(const char *path, uid_t owner, char *why, size_t whylen)
{
	unsigned char *buf;
	size_t len;
	EVP_PKEY *key;
	char sub[256];

	if (certs_read_secret(path, owner, &buf, &len, why, whylen) == -1)
		return NULL;
	key =
	    certs_pkey_from_pem(buf, len, CERTS_KEY_ED25519, sub, sizeof(sub));
	certs_secret_free(buf, len + 1);
	if (key == NULL)
		snprintf(why, whylen, "%s: %s", path, sub);
	return key;
}

EVP_PKEY *
certs_ed25519_pubkey_load(const char *path, char *why, size_t whylen)
{
	unsigned char *buf;
	size_t len;
	EVP_PKEY *key;
	char sub[256];

	if (certs_read_public(path, &buf, &len, why, whylen) == -1)
		return NULL;
	key = certs_pubkey_from_pem(buf, len, CERTS_KEY_ED25519, sub,
	    sizeof(sub));
	free(buf);
	if (key == NULL)
		snprintf(why, whylen, "%s: %s", path, sub);
	return key;
}
