/*
 * libFuzzer target for the policy loader (config_load(), proxy/config/).
 * The input is a policy file; each "@D" in it becomes a private temporary
 * directory holding an HS256 secret (hs.key), an Ed25519 public key
 * (ed.pub), a header value (hdr.val) and a revocation list (revoked), so
 * seeds can name files that exist. Secret files it names elsewhere do not
 * exist, which is a refusal like any other.
 * Invariants, not just "no crash": a refusal is one line "FILE: reason"
 * that never holds a secret; an accepted policy prints as JSON without a
 * secret, loads again the same (alone and as a reload over itself), and a
 * load whose n-th allocation fails is refused as out of memory or, when
 * it makes fewer allocations, accepted.
 */
#include <sys/stat.h>

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "proxy/proxy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Every secret written here holds the marker, so a leak is seen. */
#define MARK      "FUZZSEKRIT"
#define HS_SECRET MARK "-0123456789abcdef0123456789abcdef"
#define HDR_VALUE "Bearer " MARK "-header-value"
#define MAX_IN    (64 * 1024)

static char dir[256];
static char polpath[300];
static char *names[8];
static size_t nnames;
/* The policy text names the marker itself: it may then be echoed. */
static int text_has_mark;

static void
check(int cond, const char *what)
{
	if (!cond) {
		fprintf(stderr, "fuzz_config invariant broken: %s\n", what);
		abort();
	}
}

static void
put(const char *name, const char *s, size_t n, mode_t mode)
{
	char p[512];
	int fd;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, mode);
	check(fd != -1 && write(fd, s, n) == (ssize_t)n, "write a file");
	check(fchmod(fd, mode) == 0, "chmod");
	close(fd);
	check(nnames < sizeof(names) / sizeof(names[0]) &&
		(names[nnames++] = strdup(p)) != NULL,
	    "file name");
}

static void
cleanup(void)
{
	size_t i;

	for (i = 0; i < nnames; i++) {
		(void)unlink(names[i]);
		free(names[i]);
	}
	(void)unlink(polpath);
	(void)rmdir(dir);
}

static void
init(void)
{
	const char *tmp = getenv("TMPDIR");
	unsigned char seed[32];
	EVP_PKEY *k;
	BIO *b = NULL;
	char *pem;
	long n;

	snprintf(dir, sizeof(dir), "%s/sluice-fuzz-config-XXXXXX",
	    tmp != NULL ? tmp : "/tmp");
	check(mkdtemp(dir) != NULL, "mkdtemp");
	snprintf(polpath, sizeof(polpath), "%s/policy.json", dir);
	atexit(cleanup);
	put("hs.key", HS_SECRET "\n", sizeof(HS_SECRET), 0600);
	put("hdr.val", HDR_VALUE "\n", sizeof(HDR_VALUE), 0600);
	put("revoked", "jti-1\njti-2\n", 12, 0644);
	/* Empty trust stores: an https upstream then loads nothing. */
	put("no-ca.pem", "", 0, 0644);
	check(setenv("SSL_CERT_FILE", names[nnames - 1], 1) == 0, "setenv");
	check(setenv("SSL_CERT_DIR", dir, 1) == 0, "setenv");

	memset(seed, 0x3c, sizeof(seed));
	k = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, seed, 32);
	check(k != NULL && (b = BIO_new(BIO_s_mem())) != NULL &&
		PEM_write_bio_PUBKEY(b, k) == 1,
	    "ed25519 key");
	n = BIO_get_mem_data(b, &pem);
	put("ed.pub", pem, (size_t)n, 0644);
	BIO_free(b);
	EVP_PKEY_free(k);
}

/* Write the policy, each @D replaced by the directory. */
static void
write_policy(const uint8_t *data, size_t size)
{
	static char buf[MAX_IN * 128]; /* each 2-byte "@D": < 256 */
	size_t dl = strlen(dir), i, o = 0;
	int fd;

	for (i = 0; i < size; i++) {
		if (data[i] == '@' && i + 1 < size && data[i + 1] == 'D') {
			memcpy(buf + o, dir, dl);
			o += dl;
			i++;
		} else
			buf[o++] = (char)data[i];
	}
	text_has_mark = memmem(buf, o, MARK, strlen(MARK)) != NULL;
	fd = open(polpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	check(fd != -1 && write(fd, buf, o) == (ssize_t)o, "write policy");
	close(fd);
}

static void
check_refusal(const char *why, size_t whylen)
{
	size_t pl = strlen(polpath), i;

	check(strnlen(why, whylen) < whylen, "why not terminated");
	check(strncmp(why, polpath, pl) == 0 && why[pl] == ':' &&
		why[pl + 1] == ' ' && why[pl + 2] != '\0',
	    "refusal is not \"FILE: reason\"");
	for (i = 0; why[i] != '\0'; i++)
		check((unsigned char)why[i] >= 0x20 && why[i] != 0x7f,
		    "control character in a refusal (not one line)");
	check(text_has_mark || strstr(why, MARK) == NULL,
	    "secret in a refusal");
}

static void
check_print(const struct config *cf)
{
	char *out = NULL;
	size_t len = 0;
	cJSON *root;
	FILE *f;

	f = open_memstream(&out, &len);
	check(f != NULL, "open_memstream");
	config_print(cf, f);
	check(fclose(f) == 0, "fclose");
	check(text_has_mark || memmem(out, len, MARK, strlen(MARK)) == NULL,
	    "secret in config_print()");
	root = cJSON_ParseWithLength(out, len);
	check(root != NULL && cJSON_IsObject(root),
	    "config_print() is not a JSON object");
	cJSON_Delete(root);
	free(out);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct config *cf, *again;
	char why[1024];
	unsigned long n;
	size_t i;

	if (size > MAX_IN)
		return 0;
	if (dir[0] == '\0')
		init();
	write_policy(data, size);

	memset(why, 0, sizeof(why));
	config_alloc_fail_at = 0;
	cf = config_load(polpath, NULL, why, sizeof(why));
	/* To see what a seed reaches: FUZZ_CONFIG_VERBOSE=1. */
	if (getenv("FUZZ_CONFIG_VERBOSE") != NULL)
		fprintf(stderr, "fuzz_config: %s\n",
		    cf != NULL ? "accepted" : why);
	if (cf == NULL) {
		check_refusal(why, sizeof(why));
		return 0;
	}
	check_print(cf);

	/* The same file again, and as a reload over itself. */
	again = config_load(polpath, NULL, why, sizeof(why));
	check(again != NULL, "second load refused");
	check(memcmp(again->cf_sha256, cf->cf_sha256, 32) == 0, "sha256");
	config_unref(again);
	again = config_load(polpath, cf, why, sizeof(why));
	check(again != NULL, "reload over itself refused");
	config_unref(again);

	/* One allocation failing, chosen by the input. */
	for (i = 0, n = 5381; i < size; i++)
		n = n * 33 + data[i];
	config_alloc_fail_at = 1 + n % 64;
	again = config_load(polpath, NULL, why, sizeof(why));
	config_alloc_fail_at = 0;
	if (again == NULL) {
		check_refusal(why, sizeof(why));
		check(strstr(why, "out of memory") != NULL,
		    "failed allocation refused for another reason");
	} else
		config_unref(again);
	config_unref(cf);
	return 0;
}
