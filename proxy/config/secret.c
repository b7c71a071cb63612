/*
 * Reading the policy's files: a whole file of bounded size, and a secret
 * file with its permission rules (DESIGN.md "Policy file").
 */

#include <stdio.h>

#include "certs/certs.h"
#include "proxy/config/config.h"
#include "proxy/config/config_int.h"

/*
 * Both are certs/ (keys.c): one reader of key and secret files for the
 * policy, the CA and `sluice token mint`. The out-of-memory hook of the
 * loader's tests (config_alloc_fail_at) covers the policy file's buffer.
 */
int
cf_read_path(const char *path, unsigned char **out, size_t *outlen, char *why,
    size_t whylen)
{
	if (cf_alloc_fails()) {
		snprintf(why, whylen, "%s: out of memory", path);
		return -1;
	}
	return certs_read_public(path, out, outlen, why, whylen);
}

int
config_read_secret(const char *path, uid_t owner, unsigned char **out,
    size_t *outlen, char *why, size_t whylen)
{
	return certs_read_secret(path,
	    owner == CONFIG_ANY_OWNER ? CERTS_ANY_OWNER : owner, out, outlen,
	    why, whylen);
}
