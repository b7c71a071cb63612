/*
 * Unit tests for proxy/cmd_token.c, "sluice token mint|verify": a token
 * minted with each algorithm verifies against a policy, the verdicts and
 * exit codes (0 claims, 1 reason code, 2 usage), reading the token from
 * stdin, and the key file checks. cmd_token() is called in-process with
 * stdout and stdin redirected to files in a mkdtemp() directory.
 */
#include <sys/stat.h>

#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "proxy/proxy.h"

static char dir[256];
static char path_hs[300], path_ed[300], path_pub[300], path_policy[300];
static char path_revoked[300], path_out[300], path_in[300];

static void
write_file(const char *path, const char *data, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, strlen(data)), (ssize_t)strlen(data));
	close(fd);
	assert_int_equal(chmod(path, mode), 0);
}

static int
setup(void **state)
{
	const char *tmp = getenv("TMPDIR");
	EVP_PKEY_CTX *kctx;
	EVP_PKEY *pk = NULL;
	FILE *f;
	char policy[2048];

	(void)state;
	snprintf(dir, sizeof(dir), "%s/sluice-cmdtoken-XXXXXX",
	    tmp != NULL ? tmp : "/tmp");
	assert_non_null(mkdtemp(dir));
	snprintf(path_hs, sizeof(path_hs), "%s/hs.key", dir);
	snprintf(path_ed, sizeof(path_ed), "%s/ed.pem", dir);
	snprintf(path_pub, sizeof(path_pub), "%s/ed.pub", dir);
	snprintf(path_policy, sizeof(path_policy), "%s/policy.json", dir);
	snprintf(path_revoked, sizeof(path_revoked), "%s/revoked.txt", dir);
	snprintf(path_out, sizeof(path_out), "%s/out", dir);
	snprintf(path_in, sizeof(path_in), "%s/in", dir);

	write_file(path_hs, "cmd-token-test-secret-0123456789abcdef\n", 0600);
	kctx = EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, NULL);
	assert_non_null(kctx);
	assert_int_equal(EVP_PKEY_keygen_init(kctx), 1);
	assert_int_equal(EVP_PKEY_keygen(kctx, &pk), 1);
	EVP_PKEY_CTX_free(kctx);
	assert_non_null(f = fopen(path_ed, "w"));
	assert_int_equal(PEM_write_PrivateKey(f, pk, NULL, NULL, 0, NULL, NULL),
	    1);
	fclose(f);
	assert_int_equal(chmod(path_ed, 0600), 0);
	assert_non_null(f = fopen(path_pub, "w"));
	assert_int_equal(PEM_write_PUBKEY(f, pk), 1);
	fclose(f);
	EVP_PKEY_free(pk);
	write_file(path_revoked, "# test\nrevoked-jti\n", 0644);
	snprintf(policy, sizeof(policy),
	    "{\"listeners\":[{\"name\":\"f\",\"type\":\"forward\","
	    "\"listen\":\"127.0.0.1:3128\"}],"
	    "\"tokens\":{\"issuer\":\"cp\",\"leeway_s\":30,\"max_ttl_s\":3600,"
	    "\"keys\":[{\"kid\":\"k1\",\"alg\":\"HS256\",\"secret_file\":"
	    "\"%s\"},{\"kid\":\"k2\",\"alg\":\"EdDSA\",\"public_key_file\":"
	    "\"%s\"}],\"revoked_file\":\"%s\"},"
	    "\"routes\":[{\"audience\":\"model-proxy\",\"hosts\":"
	    "[\"model-proxy.internal\"],\"upstream\":{\"url\":"
	    "\"http://198.18.0.10:8080/v1\",\"allow_plaintext\":true}},"
	    "{\"audience\":\"billing\",\"hosts\":[\"billing.internal\"],"
	    "\"upstream\":{\"url\":\"http://198.18.0.11:8080/\","
	    "\"allow_plaintext\":true}}],"
	    "\"netpolicy\":{\"mode\":\"off\"},\"state_dir\":\"%s\"}",
	    path_hs, path_pub, path_revoked, dir);
	write_file(path_policy, policy, 0644);
	return 0;
}

static int
teardown(void **state)
{
	(void)state;
	unlink(path_hs);
	unlink(path_ed);
	unlink(path_pub);
	unlink(path_policy);
	unlink(path_revoked);
	unlink(path_out);
	unlink(path_in);
	rmdir(dir);
	return 0;
}

/*
 * Run "sluice token ARGS..." (NULL-terminated) with stdout captured into
 * out (NUL-terminated, trailing newline removed) and, when in is not NULL,
 * stdin read from it. Returns the exit code.
 */
static int
run(char *out, size_t cap, const char *in, ...)
{
	char *argv[32];
	int argc = 0, rc, saved_out, saved_in = -1, fd;
	ssize_t n;
	va_list ap;

	argv[argc++] = (char *)(uintptr_t) "token";
	va_start(ap, in);
	while ((argv[argc] = va_arg(ap, char *)) != NULL)
		argc++;
	va_end(ap);
	fflush(stdout);
	saved_out = dup(1);
	fd = open(path_out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0 && saved_out >= 0);
	dup2(fd, 1);
	close(fd);
	if (in != NULL) {
		write_file(path_in, in, 0600);
		saved_in = dup(0);
		fd = open(path_in, O_RDONLY);
		assert_true(fd >= 0);
		dup2(fd, 0);
		close(fd);
		clearerr(stdin);
	}
	rc = cmd_token(argc, argv);
	fflush(stdout);
	dup2(saved_out, 1);
	close(saved_out);
	if (saved_in != -1) {
		dup2(saved_in, 0);
		close(saved_in);
		clearerr(stdin);
	}
	fd = open(path_out, O_RDONLY);
	assert_true(fd >= 0);
	n = read(fd, out, cap - 1);
	close(fd);
	assert_true(n >= 0);
	out[n] = '\0';
	if (n > 0 && out[n - 1] == '\n')
		out[n - 1] = '\0';
	return rc;
}

#define S(x) ((char *)(uintptr_t)(x))

static void
test_mint_verify_hs256(void **state)
{
	char tok[TOKEN_MAX_LEN + 2], out[8192];

	(void)state;
	assert_int_equal(run(tok, sizeof(tok), NULL, S("mint"), S("--key"),
			     path_hs, S("--alg"), S("HS256"), S("--kid"),
			     S("k1"), S("--aud"), S("model-proxy"), S("--sub"),
			     S("run-1"), S("--ttl"), S("600"), S("--iss"),
			     S("cp"), S("--max-requests"), S("5"), S("--jti"),
			     S("jti-1"), NULL),
	    0);
	assert_int_equal(strspn(tok,
			     "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvw"
			     "xyz0123456789-_."),
	    strlen(tok));
	assert_int_equal(run(out, sizeof(out), NULL, S("verify"), S("-c"),
			     path_policy, tok, NULL),
	    0);
	assert_non_null(strstr(out, "\"sub\":\"run-1\""));
	assert_non_null(strstr(out, "\"jti\":\"jti-1\""));
	assert_non_null(strstr(out, "\"max_requests\":5"));
	assert_non_null(strstr(out, "\"aud\":[\"model-proxy\"]"));
	/* The right route, a wrong one, and an unknown one. */
	assert_int_equal(run(out, sizeof(out), NULL, S("verify"), S("-c"),
			     path_policy, S("--route"), S("model-proxy"), tok,
			     NULL),
	    0);
	assert_int_equal(run(out, sizeof(out), NULL, S("verify"), S("-c"),
			     path_policy, S("--route"), S("billing"), tok,
			     NULL),
	    1);
	assert_string_equal(out, "token_wrong_audience");
	assert_int_equal(run(out, sizeof(out), NULL, S("verify"), S("-c"),
			     path_policy, S("--route"), S("nope"), tok, NULL),
	    1);
	/* From stdin, with its newline. */
	{
		char in[TOKEN_MAX_LEN + 4];

		snprintf(in, sizeof(in), "%s\n", tok);
		assert_int_equal(run(out, sizeof(out), in, S("verify"), S("-c"),
				     path_policy, S("-"), NULL),
		    0);
		assert_non_null(strstr(out, "\"sub\":\"run-1\""));
	}
}

static void
test_mint_verify_eddsa(void **state)
{
	char tok[TOKEN_MAX_LEN + 2], tok2[TOKEN_MAX_LEN + 2], out[8192];

	(void)state;
	/* Deterministic with --now and --jti; two audiences. */
	assert_int_equal(run(tok, sizeof(tok), NULL, S("mint"), S("--key"),
			     path_ed, S("--alg"), S("EdDSA"), S("--kid"),
			     S("k2"), S("--aud"), S("billing"), S("--aud"),
			     S("model-proxy"), S("--sub"), S("run-2"),
			     S("--ttl"), S("60"), S("--iss"), S("cp"),
			     S("--now"), S("1000"), S("--jti"), S("j"), NULL),
	    0);
	assert_int_equal(run(tok2, sizeof(tok2), NULL, S("mint"), S("--key"),
			     path_ed, S("--alg"), S("EdDSA"), S("--kid"),
			     S("k2"), S("--aud"), S("billing"), S("--aud"),
			     S("model-proxy"), S("--sub"), S("run-2"),
			     S("--ttl"), S("60"), S("--iss"), S("cp"),
			     S("--now"), S("1000"), S("--jti"), S("j"), NULL),
	    0);
	assert_string_equal(tok, tok2);
	/* With the real clock it expired long ago. */
	assert_int_equal(run(out, sizeof(out), NULL, S("verify"), S("-c"),
			     path_policy, tok, NULL),
	    1);
	assert_string_equal(out, "token_expired");
	assert_int_equal(run(out, sizeof(out), NULL, S("verify"), S("-c"),
			     path_policy, S("--now"), S("1030"), tok, NULL),
	    0);
	assert_non_null(strstr(out, "\"aud\":[\"billing\",\"model-proxy\"]"));
	assert_non_null(strstr(out, "\"iat\":1000"));
	assert_non_null(strstr(out, "\"exp\":1060"));
	/* Revoked in the policy's revoked_file. */
	assert_int_equal(run(tok, sizeof(tok), NULL, S("mint"), S("--key"),
			     path_ed, S("--alg"), S("EdDSA"), S("--kid"),
			     S("k2"), S("--aud"), S("billing"), S("--sub"),
			     S("s"), S("--ttl"), S("60"), S("--iss"), S("cp"),
			     S("--jti"), S("revoked-jti"), NULL),
	    0);
	assert_int_equal(run(out, sizeof(out), NULL, S("verify"), S("-c"),
			     path_policy, tok, NULL),
	    1);
	assert_string_equal(out, "token_revoked");
	/* Without iss the policy's issuer rule refuses it. */
	assert_int_equal(run(tok, sizeof(tok), NULL, S("mint"), S("--key"),
			     path_ed, S("--alg"), S("EdDSA"), S("--kid"),
			     S("k2"), S("--aud"), S("billing"), S("--sub"),
			     S("s"), S("--ttl"), S("60"), NULL),
	    0);
	assert_int_equal(run(out, sizeof(out), NULL, S("verify"), S("-c"),
			     path_policy, tok, NULL),
	    1);
	assert_string_equal(out, "token_wrong_issuer");
	/* Garbage. */
	assert_int_equal(run(out, sizeof(out), NULL, S("verify"), S("-c"),
			     path_policy, S("not-a-token"), NULL),
	    1);
	assert_string_equal(out, "token_malformed");
}

static void
test_usage_and_key_errors(void **state)
{
	char out[8192];

	(void)state;
	assert_int_equal(run(out, sizeof(out), NULL, NULL), 2);
	assert_int_equal(run(out, sizeof(out), NULL, S("frobnicate"), NULL), 2);
	/* Missing --ttl; bad numbers; an unknown alg; too many auds. */
	assert_int_equal(run(out, sizeof(out), NULL, S("mint"), S("--key"),
			     path_hs, S("--alg"), S("HS256"), S("--aud"),
			     S("a"), S("--sub"), S("s"), NULL),
	    2);
	assert_int_equal(run(out, sizeof(out), NULL, S("mint"), S("--key"),
			     path_hs, S("--alg"), S("HS256"), S("--aud"),
			     S("a"), S("--sub"), S("s"), S("--ttl"), S("0"),
			     NULL),
	    2);
	assert_int_equal(run(out, sizeof(out), NULL, S("mint"), S("--key"),
			     path_hs, S("--alg"), S("HS256"), S("--aud"),
			     S("a"), S("--sub"), S("s"), S("--ttl"), S("10x"),
			     NULL),
	    2);
	assert_int_equal(run(out, sizeof(out), NULL, S("mint"), S("--key"),
			     path_hs, S("--alg"), S("RS256"), S("--aud"),
			     S("a"), S("--sub"), S("s"), S("--ttl"), S("10"),
			     NULL),
	    2);
	assert_int_equal(run(out, sizeof(out), NULL, S("mint"), S("--key"),
			     path_hs, S("--alg"), S("HS256"), S("--aud"),
			     S("a"), S("--sub"), S("s"), S("--ttl"), S("10"),
			     S("--max-requests"), S("0"), NULL),
	    2);
	assert_int_equal(run(out, sizeof(out), NULL, S("verify"), S("-c"),
			     path_policy, NULL),
	    2);
	assert_int_equal(run(out, sizeof(out), NULL, S("verify"), S("x"), NULL),
	    2);
	/* Key files: wrong kind, readable by others, missing. */
	assert_int_equal(run(out, sizeof(out), NULL, S("mint"), S("--key"),
			     path_ed, S("--alg"), S("HS256"), S("--aud"),
			     S("a"), S("--sub"), S("s"), S("--ttl"), S("10"),
			     NULL),
	    1);
	assert_int_equal(run(out, sizeof(out), NULL, S("mint"), S("--key"),
			     path_hs, S("--alg"), S("EdDSA"), S("--aud"),
			     S("a"), S("--sub"), S("s"), S("--ttl"), S("10"),
			     NULL),
	    1);
	assert_int_equal(chmod(path_hs, 0640), 0);
	assert_int_equal(run(out, sizeof(out), NULL, S("mint"), S("--key"),
			     path_hs, S("--alg"), S("HS256"), S("--aud"),
			     S("a"), S("--sub"), S("s"), S("--ttl"), S("10"),
			     NULL),
	    1);
	assert_int_equal(chmod(path_hs, 0600), 0);
	assert_string_equal(out, "");
	/* A policy that does not load. */
	assert_int_equal(run(out, sizeof(out), NULL, S("verify"), S("-c"),
			     path_hs, S("a.b.c"), NULL),
	    1);
}

/*
 * --key takes any regular file we can read that has no group/other bits,
 * whoever owns it: root minting with a service account's 0600 key.
 */
static void
test_mint_key_any_owner(void **state)
{
	char tok[TOKEN_MAX_LEN + 2], out[8192];

	(void)state;
	if (geteuid() != 0)
		skip(); /* only root can give a file away */
	assert_int_equal(chown(path_hs, 4242, 4242), 0);
	assert_int_equal(run(tok, sizeof(tok), NULL, S("mint"), S("--key"),
			     path_hs, S("--alg"), S("HS256"), S("--kid"),
			     S("k1"), S("--aud"), S("model-proxy"), S("--sub"),
			     S("run-1"), S("--ttl"), S("600"), S("--iss"),
			     S("cp"), NULL),
	    0);
	assert_int_equal(chown(path_hs, 0, 0), 0);
	assert_int_equal(run(out, sizeof(out), NULL, S("verify"), S("-c"),
			     path_policy, tok, NULL),
	    0);
	/* Group/other bits are still refused, whoever owns the file. */
	assert_int_equal(chown(path_ed, 4242, 4242), 0);
	assert_int_equal(chmod(path_ed, 0640), 0);
	assert_int_equal(run(out, sizeof(out), NULL, S("mint"), S("--key"),
			     path_ed, S("--alg"), S("EdDSA"), S("--aud"),
			     S("a"), S("--sub"), S("s"), S("--ttl"), S("10"),
			     NULL),
	    1);
	assert_int_equal(chmod(path_ed, 0600), 0);
	assert_int_equal(run(out, sizeof(out), NULL, S("mint"), S("--key"),
			     path_ed, S("--alg"), S("EdDSA"), S("--kid"),
			     S("k2"), S("--aud"), S("a"), S("--sub"), S("s"),
			     S("--ttl"), S("10"), NULL),
	    0);
	assert_int_equal(chown(path_ed, 0, 0), 0);
}

/* "token verify" reads unlink_after_read keys but never removes them. */
static void
test_verify_keeps_unlink_keys(void **state)
{
	char tok[TOKEN_MAX_LEN + 2], out[8192], pol[300], key[300], doc[2048];
	struct stat st;

	(void)state;
	snprintf(pol, sizeof(pol), "%s/unlink-policy.json", dir);
	snprintf(key, sizeof(key), "%s/unlink.key", dir);
	write_file(key, "cmd-token-test-secret-0123456789abcdef\n", 0600);
	snprintf(doc, sizeof(doc),
	    "{\"listeners\":[{\"type\":\"forward\","
	    "\"listen\":\"127.0.0.1:3128\"}],"
	    "\"tokens\":{\"keys\":[{\"alg\":\"HS256\",\"secret_file\":"
	    "\"%s\",\"unlink_after_read\":true}]},"
	    "\"routes\":[{\"audience\":\"a\",\"upstream\":{\"url\":"
	    "\"http://198.18.0.10/\",\"allow_plaintext\":true}}],"
	    "\"netpolicy\":{\"mode\":\"off\"},\"state_dir\":\"%s\"}",
	    key, dir);
	write_file(pol, doc, 0644);
	assert_int_equal(run(tok, sizeof(tok), NULL, S("mint"), S("--key"), key,
			     S("--alg"), S("HS256"), S("--aud"), S("a"),
			     S("--sub"), S("s"), S("--ttl"), S("60"), NULL),
	    0);
	assert_int_equal(run(out, sizeof(out), NULL, S("verify"), S("-c"), pol,
			     tok, NULL),
	    0);
	assert_int_equal(stat(key, &st), 0);
	/* Nor does a verify that fails. */
	assert_int_equal(run(out, sizeof(out), NULL, S("verify"), S("-c"), pol,
			     S("a.b.c"), NULL),
	    1);
	assert_int_equal(stat(key, &st), 0);
	unlink(key);
	unlink(pol);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mint_verify_hs256),
		cmocka_unit_test(test_mint_verify_eddsa),
		cmocka_unit_test(test_usage_and_key_errors),
		cmocka_unit_test(test_mint_key_any_owner),
		cmocka_unit_test(test_verify_keeps_unlink_keys),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
