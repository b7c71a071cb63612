/*
 * The "intercept" section (docs/interception.md): where the local CA of
 * intercepted tunnels comes from, and its leaves' lifetime and cache. The
 * routes' connect.intercept, connect.ports and token_header are read with
 * the routes (routes.c); cf_check_intercept() ties the two together.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/config/config.h"
#include "proxy/config/config_int.h"
#include "proxy/util/util.h"

int
cf_load_intercept(struct cfctx *cx, const cJSON *root)
{
	static const char *const keys[] = { "ca", "ca_cert_file", "ca_key_file",
		"ca_cert_out", "ca_days", "leaf_days", "max_leaves", NULL };
	struct intercept_conf *ic = &cx->cf->cf_intercept;
	const cJSON *obj = cJSON_GetObjectItemCaseSensitive(root, "intercept");
	const char *ca = NULL, *cert = NULL, *key = NULL, *out = NULL;

	ic->ic_ca_days = 1;
	ic->ic_leaf_days = 1;
	ic->ic_max_leaves = 1024;
	if (obj == NULL)
		return 0;
	ic->ic_on = 1;
	if (cf_keys(cx, "intercept", obj, keys) == -1 ||
	    cf_str(cx, "intercept", obj, "ca", 1, &ca) == -1 ||
	    cf_str(cx, "intercept", obj, "ca_cert_file", 0, &cert) == -1 ||
	    cf_str(cx, "intercept", obj, "ca_key_file", 0, &key) == -1 ||
	    cf_str(cx, "intercept", obj, "ca_cert_out", 0, &out) == -1 ||
	    cf_uint(cx, "intercept", obj, "ca_days", 1, 3650,
		&ic->ic_ca_days) == -1 ||
	    cf_uint(cx, "intercept", obj, "leaf_days", 1, 398,
		&ic->ic_leaf_days) == -1 ||
	    cf_uint(cx, "intercept", obj, "max_leaves", 1, 1000000,
		&ic->ic_max_leaves) == -1)
		return -1;
	if (strcmp(ca, "ephemeral") == 0) {
		ic->ic_ephemeral = 1;
		if (cert != NULL || key != NULL)
			return cf_err(cx, "intercept",
			    "an ephemeral CA takes no ca_cert_file or "
			    "ca_key_file (its key never touches a disk)");
	} else if (strcmp(ca, "files") == 0) {
		if (cert == NULL || key == NULL)
			return cf_err(cx, "intercept",
			    "\"ca\": \"files\" needs ca_cert_file and "
			    "ca_key_file (sluice certs init writes them)");
		if (out != NULL)
			return cf_err(cx, "intercept.ca_cert_out",
			    "only for an ephemeral CA (give clients "
			    "ca_cert_file)");
	} else
		return cf_err(cx, "intercept.ca",
		    "\"%s\" is not ephemeral or files", ca);
	if ((cert != NULL &&
		cf_abspath(cx, "intercept.ca_cert_file", cert,
		    &ic->ic_cert_file) == -1) ||
	    (key != NULL &&
		cf_abspath(cx, "intercept.ca_key_file", key,
		    &ic->ic_key_file) == -1) ||
	    (out != NULL &&
		cf_abspath(cx, "intercept.ca_cert_out", out,
		    &ic->ic_cert_out) == -1))
		return -1;
	return 0;
}

int
cf_check_intercept(struct cfctx *cx)
{
	const struct config *cf = cx->cf;
	char jp[64];
	size_t i;

	for (i = 0; i < cf->cf_nroutes; i++) {
		const struct route *rt = &cf->cf_routes[i];

		if (!rt->rt_intercept)
			continue;
		cf_idx(jp, sizeof(jp), "routes", i);
		if (!cf->cf_intercept.ic_on)
			return cf_err(cx, jp,
			    "connect.intercept needs the top-level "
			    "\"intercept\" section (the local CA)");
		/* An allowlist route's TLS is each host's own (as asked). */
		if (!rt->rt_up.uc_https && !rt->rt_up.uc_as_requested)
			return cf_err(cx, jp,
			    "connect.intercept: the upstream must be https "
			    "(what is intercepted is sent on over TLS)");
	}
	return 0;
}

void
cf_intercept_free(struct intercept_conf *ic)
{
	free(ic->ic_cert_file);
	free(ic->ic_key_file);
	free(ic->ic_cert_out);
}
