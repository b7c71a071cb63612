/*
 * The policy file (DESIGN.md "Policy file"): strict JSON loading into an
 * immutable, refcounted struct config. Unknown keys, duplicate keys, wrong
 * types and out-of-range values are errors naming the file and the JSON
 * path; every optional field gets its documented default (docs/config.md).
 * This file reads the policy and loads its sections in order (the others
 * of this folder, config_int.h); key and value files are read once per
 * load, with the permission rules for secrets.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <openssl/evp.h>
#include <openssl/sha.h>

#include "proxy/config/config.h"
#include "proxy/config/config_int.h"
#include "proxy/token/token.h"
#include "proxy/util/hostmatch.h"

static uint64_t config_generation;

/* Line and column of a byte offset, for JSON syntax errors. */
static void
line_col(const char *buf, size_t off, unsigned *line, unsigned *col)
{
	size_t i;

	*line = 1;
	*col = 1;
	for (i = 0; i < off; i++) {
		if (buf[i] == '\n') {
			(*line)++;
			*col = 1;
		} else
			(*col)++;
	}
}

/*
 * Offset of the first "\u0000" escape inside a JSON string, or len. cJSON
 * turns it into a NUL that ends the C string: "a\u0000b" would load as
 * "a" (a host or path quietly shortened), so such a policy is refused.
 */
static size_t
nul_escape_at(const unsigned char *p, size_t len)
{
	size_t i;
	int in_str = 0;

	for (i = 0; i < len; i++) {
		if (!in_str) {
			in_str = p[i] == '"';
			continue;
		}
		if (p[i] == '"')
			in_str = 0;
		else if (p[i] == '\\' && i + 1 < len) {
			if (p[i + 1] == 'u' && i + 5 < len &&
			    memcmp(p + i + 2, "0000", 4) == 0)
				return i;
			i++; /* the escaped character */
		}
	}
	return len;
}

/*
 * "sha256": what `sluice check` prints (the hash of the file it read), so
 * that its output is a policy too. Informational: 64 hex digits, or null,
 * and not compared with anything.
 */
static int
check_printed_sha256(struct cfctx *cx, const cJSON *root)
{
	const char *s = NULL;
	size_t i;

	if (cf_str(cx, "", root, "sha256", 0, &s) == -1)
		return -1;
	if (s == NULL)
		return 0;
	for (i = 0; s[i] != '\0'; i++)
		if (!((s[i] >= '0' && s[i] <= '9') ||
			(s[i] >= 'a' && s[i] <= 'f')))
			break;
	if (i != 64 || s[i] != '\0')
		return cf_err(cx, "sha256", "not 64 lower-case hex digits");
	return 0;
}

struct config *
config_load(const char *path, const struct config *prev, char *why,
    size_t whylen)
{
	static const char *const keys[] = { "user", "listeners", "tokens",
		"routes", "limits", "audit", "netpolicy", "admin", "metrics",
		"state_dir", "ready_file", "intercept", "exec", "sha256",
		"sandboxes", "enforce", "workers", NULL };
	struct cfctx cx = { path, why, whylen, prev, NULL };
	unsigned char *buf;
	size_t len;
	cJSON *root;
	const char *end = NULL;
	size_t nul;

	cf_alloc_reset();
	if (cf_read_path(path, &buf, &len, why, whylen) == -1)
		return NULL;
	if (memchr(buf, '\0', len) != NULL) {
		snprintf(why, whylen, "%s: NUL byte at offset %zu", path,
		    (size_t)((unsigned char *)memchr(buf, '\0', len) - buf));
		free(buf);
		return NULL;
	}
	if ((nul = nul_escape_at(buf, len)) != len) {
		unsigned line, col;

		line_col((const char *)buf, nul, &line, &col);
		snprintf(why, whylen,
		    "%s: \\u0000 in a string at line %u column %u (a NUL would "
		    "silently cut it short)",
		    path, line, col);
		free(buf);
		return NULL;
	}
	/* len + 1: cJSON wants to see the NUL that cf_read_path() added. */
	root = cJSON_ParseWithLengthOpts((const char *)buf, len + 1, &end, 1);
	if (root == NULL) {
		unsigned line, col;
		size_t off =
		    end != NULL ? (size_t)(end - (const char *)buf) : len;

		if (off > len)
			off = len;
		line_col((const char *)buf, off, &line, &col);
		snprintf(why, whylen, "%s: invalid JSON at line %u column %u",
		    path, line, col);
		free(buf);
		return NULL;
	}
	if ((cx.cf = cf_calloc(&cx, "", 1, sizeof(*cx.cf))) == NULL) {
		cJSON_Delete(root);
		free(buf);
		return NULL;
	}
	cx.cf->cf_refs = 1;
	SHA256(buf, len, cx.cf->cf_sha256);
	free(buf);
	if ((cx.cf->cf_path = cf_strdup(&cx, "", path)) == NULL) {
		cJSON_Delete(root);
		config_unref(cx.cf);
		return NULL;
	}

	if (cf_keys(&cx, "", root, keys) == -1 ||
	    check_printed_sha256(&cx, root) == -1 ||
	    cf_load_user(&cx, root) == -1 ||
	    cf_load_listeners(&cx, root) == -1 ||
	    cf_load_limits(&cx, root) == -1 || cf_load_audit(&cx, root) == -1 ||
	    cf_load_netpolicy(&cx, root) == -1 ||
	    cf_load_sandboxes(&cx, root) == -1 ||
	    cf_load_misc(&cx, root) == -1 || cf_load_routes(&cx, root) == -1 ||
	    cf_load_enforce(&cx, root) == -1 || cf_link_listeners(&cx) == -1 ||
	    cf_check_resolvers(&cx) == -1 ||
	    cf_load_intercept(&cx, root) == -1 ||
	    cf_check_intercept(&cx) == -1 || cf_load_exec(&cx, root) == -1 ||
	    cf_load_tokens(&cx, root) == -1) {
		cJSON_Delete(root);
		config_unref(cx.cf);
		return NULL;
	}
	cJSON_Delete(root);
	cx.cf->cf_gen = ++config_generation;
	return cx.cf;
}

struct config *
config_ref(struct config *cf)
{
	cf->cf_refs++;
	return cf;
}

void
config_unref(struct config *cf)
{
	size_t i;

	if (cf == NULL || --cf->cf_refs > 0)
		return;
	for (i = 0; i < cf->cf_nroutes; i++) {
		struct route *rt = &cf->cf_routes[i];

		free(rt->rt_audience);
		cf_strlist_free(rt->rt_hosts, rt->rt_nhosts);
		cf_strlist_free(rt->rt_methods, rt->rt_nmethods);
		cf_strlist_free(rt->rt_prefixes, rt->rt_nprefixes);
		free(rt->rt_token_header);
		cf_upstream_free(&rt->rt_up);
	}
	free(cf->cf_routes);
	hostmatch_free(cf->cf_hosts);
	if (cf->cf_report_rt != NULL) {
		free(cf->cf_report_rt->rt_audience);
		cf_strlist_free(cf->cf_report_rt->rt_methods,
		    cf->cf_report_rt->rt_nmethods);
		cf_strlist_free(cf->cf_report_rt->rt_prefixes,
		    cf->cf_report_rt->rt_nprefixes);
		free(cf->cf_report_rt);
	}
	for (i = 0; i < cf->cf_tokens.tc_nkeys; i++) {
		struct token_key *k = &cf->cf_tokens.tc_keys[i];

		if (k->tk_secret != NULL) {
			explicit_bzero(k->tk_secret, k->tk_secret_len);
			free(k->tk_secret);
		}
		EVP_PKEY_free(k->tk_pkey);
		if (cf->cf_tokens.tc_key_files != NULL)
			free(cf->cf_tokens.tc_key_files[i]);
	}
	free(cf->cf_tokens.tc_keys);
	free(cf->cf_tokens.tc_key_files);
	free(cf->cf_tokens.tc_key_unlink);
	free(cf->cf_tokens.tc_key_fresh);
	free(cf->cf_tokens.tc_issuer);
	free(cf->cf_tokens.tc_revoked_file);
	cf_strlist_free(cf->cf_revoked, cf->cf_nrevoked);
	free(cf->cf_listeners);
	free(cf->cf_audit.ac_path);
	cf_strlist_free(cf->cf_np.np_resolvers, cf->cf_np.np_nresolvers);
	cf_strlist_free(cf->cf_np.np_ifaces, cf->cf_np.np_nifaces);
	cf_inbound_free(&cf->cf_np);
	free(cf->cf_sandboxes);
	cf_intercept_free(&cf->cf_intercept);
	cf_exec_free(&cf->cf_exec);
	free(cf->cf_admin_socket);
	free(cf->cf_metrics_listen);
	free(cf->cf_metrics_group);
	free(cf->cf_state_dir);
	free(cf->cf_ready_file);
	free(cf->cf_user);
	free(cf->cf_path);
	free(cf);
}
