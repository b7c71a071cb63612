/*
 * config_print(): the normalized policy as JSON, every default filled in
 * and secrets shown only as the names of their files ("sluice check").
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cjson/cJSON.h>
#include <openssl/evp.h>

#include "proxy/config/config.h"
#include "proxy/config/config_int.h"
#include "proxy/token/token.h"
#include "proxy/util/ascii.h"
#include "proxy/util/util.h"

/*
 * Printing the normalized policy.
 */
static cJSON *
strarray(char *const *list, size_t n)
{
	cJSON *a = cJSON_CreateArray();
	size_t i;

	for (i = 0; i < n; i++)
		cJSON_AddItemToArray(a, cJSON_CreateString(list[i]));
	return a;
}

static cJSON *
print_route(const struct route *rt)
{
	const struct upstream_conf *uc = &rt->rt_up;
	cJSON *r = cJSON_CreateObject(), *c, *u, *pins, *hdrs;
	size_t i;

	cJSON_AddStringToObject(r, "audience", rt->rt_audience);
	cJSON_AddItemToObject(r, "hosts",
	    strarray(rt->rt_hosts, rt->rt_nhosts));
	cJSON_AddItemToObject(r, "methods",
	    strarray(rt->rt_methods, rt->rt_nmethods));
	cJSON_AddItemToObject(r, "path_prefixes",
	    strarray(rt->rt_prefixes, rt->rt_nprefixes));
	cJSON_AddNumberToObject(r, "max_requests_per_token",
	    (double)rt->rt_max_requests);
	if (rt->rt_token_header != NULL)
		cJSON_AddStringToObject(r, "token_header", rt->rt_token_header);
	c = cJSON_AddObjectToObject(r, "connect");
	cJSON_AddBoolToObject(c, "enabled", rt->rt_connect);
	cJSON_AddBoolToObject(c, "intercept", rt->rt_intercept);
	if (rt->rt_intercept) {
		cJSON *ports = cJSON_AddArrayToObject(c, "ports");

		for (i = 0; i < rt->rt_nports; i++)
			cJSON_AddItemToArray(ports,
			    cJSON_CreateNumber(rt->rt_ports[i]));
	}
	u = cJSON_AddObjectToObject(r, "upstream");
	if (uc->uc_as_requested) {
		cJSON *ports;

		cJSON_AddStringToObject(u, "mode", "as_requested");
		ports = cJSON_AddArrayToObject(u, "ports");
		for (i = 0; i < uc->uc_nports; i++)
			cJSON_AddItemToArray(ports,
			    cJSON_CreateNumber(uc->uc_ports[i]));
		cJSON_AddBoolToObject(u, "allow_private", uc->uc_allow_private);
		return r;
	}
	cJSON_AddStringToObject(u, "url", uc->uc_url);
	if (uc->uc_ca_file != NULL)
		cJSON_AddStringToObject(u, "ca_file", uc->uc_ca_file);
	else
		cJSON_AddNullToObject(u, "ca_file");
	pins = cJSON_AddArrayToObject(u, "pin_sha256");
	for (i = 0; i < uc->uc_npins; i++) {
		unsigned char b64[48];

		EVP_EncodeBlock(b64, uc->uc_pins[i], 32);
		cJSON_AddItemToArray(pins, cJSON_CreateString((char *)b64));
	}
	cJSON_AddBoolToObject(u, "allow_private", uc->uc_allow_private);
	cJSON_AddBoolToObject(u, "allow_plaintext", uc->uc_allow_plaintext);
	cJSON_AddBoolToObject(u, "strip_token", uc->uc_strip_token);
	hdrs = cJSON_AddArrayToObject(u, "headers");
	for (i = 0; i < uc->uc_nheaders; i++) {
		cJSON *h = cJSON_CreateObject();

		/* The value is secret: only the file it came from is shown. */
		cJSON_AddStringToObject(h, "name", uc->uc_headers[i].uh_name);
		cJSON_AddStringToObject(h, "value_file",
		    uc->uc_headers[i].uh_file);
		cJSON_AddItemToArray(hdrs, h);
	}
	return r;
}

static void
add_str_or_null(cJSON *o, const char *k, const char *v)
{
	if (v != NULL)
		cJSON_AddStringToObject(o, k, v);
	else
		cJSON_AddNullToObject(o, k);
}

/* "listeners" into root. */
static void
print_listeners(const struct config *cf, cJSON *root)
{
	cJSON *a, *o;
	size_t i;

	a = cJSON_AddArrayToObject(root, "listeners");
	for (i = 0; i < cf->cf_nlisteners; i++) {
		const struct listener_conf *lc = &cf->cf_listeners[i];

		o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "name", lc->lc_name);
		cJSON_AddStringToObject(o, "type",
		    lc->lc_type == LISTENER_FORWARD       ? "forward" :
			lc->lc_type == LISTENER_REVERSE   ? "reverse" :
			lc->lc_type == LISTENER_INTERCEPT ? "intercept" :
							    "transparent");
		cJSON_AddStringToObject(o, "listen", lc->lc_listen);
		if (lc->lc_type == LISTENER_REVERSE)
			cJSON_AddStringToObject(o, "route", lc->lc_route);
		if (lc->lc_type == LISTENER_INTERCEPT) {
			cJSON_AddStringToObject(o, "host", lc->lc_host);
			cJSON_AddNumberToObject(o, "port", lc->lc_port);
		}
		cJSON_AddItemToArray(a, o);
	}
}

/* "tokens"."keys" into o. */
static void
print_keys(const struct config *cf, cJSON *o)
{
	cJSON *a;
	size_t i;

	a = cJSON_AddArrayToObject(o, "keys");
	for (i = 0; i < cf->cf_tokens.tc_nkeys; i++) {
		const struct token_key *k = &cf->cf_tokens.tc_keys[i];
		cJSON *ko = cJSON_CreateObject();
		int hs = k->tk_alg == TOKEN_ALG_HS256;

		if (k->tk_kid[0] != '\0')
			cJSON_AddStringToObject(ko, "kid", k->tk_kid);
		cJSON_AddStringToObject(ko, "alg", hs ? "HS256" : "EdDSA");
		cJSON_AddStringToObject(ko,
		    hs ? "secret_file" : "public_key_file",
		    cf->cf_tokens.tc_key_files[i]);
		cJSON_AddBoolToObject(ko, "unlink_after_read",
		    cf->cf_tokens.tc_key_unlink[i]);
		cJSON_AddItemToArray(a, ko);
	}
}

/* "netpolicy"."inbound" into o. */
static void
print_inbound(const struct config *cf, cJSON *o)
{
	cJSON *a;
	size_t i;

	a = cJSON_AddArrayToObject(o, "inbound");
	for (i = 0; i < cf->cf_np.np_ninbound; i++) {
		const struct inbound_conf *ib = &cf->cf_np.np_inbound[i];
		cJSON *e = cJSON_CreateObject(), *ports;
		size_t j;

		ports = cJSON_AddArrayToObject(e, "ports");
		for (j = 0; j < ib->ib_nports; j++)
			cJSON_AddItemToArray(ports,
			    cJSON_CreateNumber(ib->ib_ports[j]));
		cJSON_AddItemToObject(e, "from",
		    strarray(ib->ib_from, ib->ib_nfrom));
		cJSON_AddItemToArray(a, e);
	}
}

/* "sandboxes" into root, in gateway mode. */
static void
print_sandboxes(const struct config *cf, cJSON *root)
{
	cJSON *a;
	size_t i;

	if (cf->cf_np.np_mode == NETPOLICY_GATEWAY) {
		a = cJSON_AddArrayToObject(root, "sandboxes");
		for (i = 0; i < cf->cf_nsandboxes; i++) {
			const struct sandbox_conf *sc = &cf->cf_sandboxes[i];
			cJSON *e = cJSON_CreateObject(), *addrs;
			char buf[64];
			size_t j;

			cJSON_AddStringToObject(e, "id", sc->sc_id);
			cJSON_AddStringToObject(e, "interface", sc->sc_iface);
			addrs = cJSON_AddArrayToObject(e, "addresses");
			for (j = 0; j < sc->sc_naddrs; j++) {
				sandbox_addr_str(&sc->sc_addrs[j], buf,
				    sizeof(buf));
				cJSON_AddItemToArray(addrs,
				    cJSON_CreateString(buf));
			}
			cJSON_AddItemToArray(a, e);
		}
	}
}

/* "intercept" into root, when it is on. */
static void
print_intercept(const struct config *cf, cJSON *root)
{
	cJSON *o;

	if (cf->cf_intercept.ic_on) {
		const struct intercept_conf *ic = &cf->cf_intercept;

		o = cJSON_AddObjectToObject(root, "intercept");
		cJSON_AddStringToObject(o, "ca",
		    ic->ic_ephemeral ? "ephemeral" : "files");
		if (!ic->ic_ephemeral) {
			cJSON_AddStringToObject(o, "ca_cert_file",
			    ic->ic_cert_file);
			cJSON_AddStringToObject(o, "ca_key_file",
			    ic->ic_key_file);
		} else
			add_str_or_null(o, "ca_cert_out", ic->ic_cert_out);
		cJSON_AddNumberToObject(o, "ca_days", (double)ic->ic_ca_days);
		cJSON_AddNumberToObject(o, "leaf_days",
		    (double)ic->ic_leaf_days);
		cJSON_AddNumberToObject(o, "max_leaves",
		    (double)ic->ic_max_leaves);
	}
}

/* "exec" into root, when landlock is on. */
static void
print_exec(const struct config *cf, cJSON *root)
{
	cJSON *o;

	if (cf->cf_exec.ec_landlock) {
		const struct exec_conf *ec = &cf->cf_exec;
		cJSON *ll;

		o = cJSON_AddObjectToObject(root, "exec");
		ll = cJSON_AddObjectToObject(o, "landlock");
		cJSON_AddItemToObject(ll, "rw",
		    ec->ec_nrw > 0 ?
			cJSON_CreateStringArray((const char *const *)ec->ec_rw,
			    (int)ec->ec_nrw) :
			cJSON_CreateArray());
		cJSON_AddItemToObject(ll, "ro",
		    ec->ec_nro > 0 ?
			cJSON_CreateStringArray((const char *const *)ec->ec_ro,
			    (int)ec->ec_nro) :
			cJSON_CreateArray());
	}
}

void
config_print(const struct config *cf, FILE *f)
{
	const struct limits *l = &cf->cf_limits;
	const struct cf_limit *lm;
	cJSON *root = cJSON_CreateObject(), *a, *o;
	char hex[2 * sizeof(cf->cf_sha256) + 1], *out;
	size_t i;

	ascii_hex_encode(hex, cf->cf_sha256, sizeof(cf->cf_sha256));
	cJSON_AddStringToObject(root, "sha256", hex);
	add_str_or_null(root, "user", cf->cf_user);
	print_listeners(cf, root);
	o = cJSON_AddObjectToObject(root, "tokens");
	add_str_or_null(o, "issuer", cf->cf_tokens.tc_issuer);
	cJSON_AddNumberToObject(o, "leeway_s",
	    (double)cf->cf_tokens.tc_leeway_s);
	cJSON_AddNumberToObject(o, "max_ttl_s",
	    (double)cf->cf_tokens.tc_max_ttl_s);
	print_keys(cf, o);
	add_str_or_null(o, "revoked_file", cf->cf_tokens.tc_revoked_file);
	a = cJSON_AddArrayToObject(root, "routes");
	for (i = 0; i < cf->cf_nroutes; i++)
		cJSON_AddItemToArray(a, print_route(&cf->cf_routes[i]));
	o = cJSON_AddObjectToObject(root, "limits");
	for (lm = cf_limits; lm->key != NULL; lm++) {
		const uint64_t *v = (const void *)((const char *)l + lm->off);

		cJSON_AddNumberToObject(o, lm->key, (double)*v);
	}
	o = cJSON_AddObjectToObject(root, "audit");
	cJSON_AddStringToObject(o, "path", cf->cf_audit.ac_path);
	cJSON_AddStringToObject(o, "fsync",
	    cf_fsync_names[cf->cf_audit.ac_fsync]);
	cJSON_AddBoolToObject(o, "chain", cf->cf_audit.ac_chain);
	cJSON_AddStringToObject(o, "on_error",
	    cf_on_error_names[cf->cf_audit.ac_on_error_allow]);
	o = cJSON_AddObjectToObject(root, "netpolicy");
	cJSON_AddStringToObject(o, "mode", cf_np_mode_names[cf->cf_np.np_mode]);
	cJSON_AddStringToObject(o, "table", cf->cf_np.np_table);
	cJSON_AddBoolToObject(o, "allow_loopback", cf->cf_np.np_allow_loopback);
	cJSON_AddItemToObject(o, "resolvers",
	    strarray(cf->cf_np.np_resolvers, cf->cf_np.np_nresolvers));
	cJSON_AddNumberToObject(o, "log_group", cf->cf_np.np_log_group);
	cJSON_AddItemToObject(o, "sandbox_interfaces",
	    strarray(cf->cf_np.np_ifaces, cf->cf_np.np_nifaces));
	cJSON_AddBoolToObject(o, "flush_on_exit", cf->cf_np.np_flush_on_exit);
	print_inbound(cf, o);
	print_sandboxes(cf, root);
	o = cJSON_AddObjectToObject(root, "admin");
	add_str_or_null(o, "socket", cf->cf_admin_socket);
	o = cJSON_AddObjectToObject(root, "metrics");
	add_str_or_null(o, "listen", cf->cf_metrics_listen);
	add_str_or_null(o, "group", cf->cf_metrics_group);
	cJSON_AddStringToObject(root, "state_dir", cf->cf_state_dir);
	add_str_or_null(root, "ready_file", cf->cf_ready_file);
	cJSON_AddStringToObject(root, "enforce",
	    cf->cf_report ? "report" : "deny");
	cJSON_AddNumberToObject(root, "workers", cf->cf_workers);
	print_intercept(cf, root);
	print_exec(cf, root);

	if ((out = cJSON_Print(root)) == NULL)
		fatalx("cannot print the policy");
	fprintf(f, "%s\n", out);
	free(out);
	cJSON_Delete(root);
}
