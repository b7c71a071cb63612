/*
 * A route's upstream: its URL (scheme, host, port, authority, path), its
 * TLS (CA file, SPKI pins, the client context) and the headers injected
 * into every forwarded request, whose values are secret files.
 */
#include <sys/socket.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>
#include <openssl/ssl.h>

#include "certs/certs.h"
#include "proxy/config/config.h"
#include "proxy/config/config_int.h"
#include "proxy/http/http1.h"
#include "proxy/util/ascii.h"
#include "proxy/util/util.h"

/* An injected header's name (at el): a token, not ours, not twice. */
static int
check_header_name(struct cfctx *cx, const char *el,
    const struct upstream_conf *uc, size_t i, const char *name)
{
	static const char *const forbidden[] = { "host", "content-length",
		"transfer-encoding", "connection", "keep-alive",
		"proxy-authorization", "proxy-connection", "te", "trailer",
		"upgrade", NULL };
	const char *p;
	size_t j, k;

	for (p = name; *p != '\0'; p++)
		if (!ascii_is_tchar((unsigned char)*p))
			return cf_err(cx, el,
			    "name: \"%s\" is not a field name", name);
	for (k = 0; forbidden[k] != NULL; k++)
		if (strcasecmp(name, forbidden[k]) == 0)
			return cf_err(cx, el,
			    "name: %s is set by sluice itself", name);
	for (j = 0; j < i; j++)
		if (strcasecmp(uc->uc_headers[j].uh_name, name) == 0)
			return cf_err(cx, el, "name: %s is already configured",
			    name);
	return 0;
}

/* Entry i of an upstream's "headers" (at el): its name and secret value. */
static int
load_header(struct cfctx *cx, const char *el, const cJSON *it,
    struct upstream_conf *uc, size_t i)
{
	static const char *const keys[] = { "name", "value_file", NULL };
	struct upstream_header *uh = &uc->uc_headers[i];
	const char *name = NULL, *file = NULL;
	char why[512];
	size_t k;

	if (cf_keys(cx, el, it, keys) == -1 ||
	    cf_str(cx, el, it, "name", 1, &name) == -1 ||
	    cf_str(cx, el, it, "value_file", 1, &file) == -1 ||
	    check_header_name(cx, el, uc, i, name) == -1)
		return -1;
	if ((uh->uh_name = cf_strdup(cx, el, name)) == NULL ||
	    (uh->uh_file = cf_strdup(cx, el, file)) == NULL)
		return -1;
	if (config_read_secret(file, cx->cf->cf_uid, &uh->uh_value,
		&uh->uh_value_len, why, sizeof(why)) == -1)
		return cf_err(cx, el, "value_file: %s", why);
	/* A CR, LF or other CTL would split or corrupt the head. */
	for (k = 0; k < uh->uh_value_len; k++) {
		unsigned char c = uh->uh_value[k];

		if ((c < 0x20 && c != '\t') || c == 0x7f)
			return cf_err(cx, el,
			    "value_file: %s: control byte at offset %zu", file,
			    k);
	}
	return 0;
}

static int
load_headers(struct cfctx *cx, const char *jp, const cJSON *up,
    struct upstream_conf *uc)
{
	const cJSON *arr, *it;
	char sub[128], el[160];
	size_t i = 0;
	int n;

	if ((n = cf_array(cx, jp, up, "headers", 0, 32, &arr)) == -1)
		return -1;
	if (arr == NULL)
		return 0;
	cf_sub(sub, sizeof(sub), jp, "headers");
	if ((uc->uc_headers = cf_calloc(cx, sub, (size_t)n,
		 sizeof(*uc->uc_headers))) == NULL)
		return -1;
	uc->uc_nheaders = (size_t)n;
	cJSON_ArrayForEach(it, arr) {
		cf_idx(el, sizeof(el), sub, i);
		if (load_header(cx, el, it, uc, i) == -1)
			return -1;
		i++;
	}
	return 0;
}

/* host (brackets around an IPv6 literal) and port if with_port, in buf. */
static void
upstream_hostport(char *buf, size_t len, const struct uri *u, const char *host,
    int with_port)
{
	const char *lb = u->host_type == URI_HOST_V6 ? "[" : "";
	const char *rb = u->host_type == URI_HOST_V6 ? "]" : "";

	if (with_port)
		snprintf(buf, len, "%s%s%s:%u", lb, host, rb, u->port);
	else
		snprintf(buf, len, "%s%s%s", lb, host, rb);
}

/*
 * The upstream's "url" (at sub): an absolute http(s) URL without a query,
 * into scheme, host, port, authority and path (no trailing '/'); an IP
 * literal must not be private unless allow_private.
 */
static int
load_upstream_url(struct cfctx *cx, const char *sub, const char *url,
    struct upstream_conf *uc)
{
	const char *uwhy = "invalid";
	char auth[300];
	struct uri u;

	if ((uc->uc_url = cf_strdup(cx, sub, url)) == NULL)
		return -1;
	memset(&u, 0, sizeof(u));
	if (uri_parse_target(url, strlen(url), 0, &u, &uwhy) == -1 ||
	    u.form != URI_ABSOLUTE)
		return cf_err(cx, sub, "\"%s\" is not an absolute URL (%s)",
		    url, u.form != URI_ABSOLUTE ? "need scheme://host" : uwhy);
	if (u.query != NULL)
		return cf_err(cx, sub, "a query string is not allowed");
	if (!u.https && !uc->uc_allow_plaintext)
		return cf_err(cx, sub,
		    "scheme must be https (or set allow_plaintext)");
	uc->uc_https = u.https;
	if ((uc->uc_host = cf_calloc(cx, sub, u.host_len + 1, 1)) == NULL)
		return -1;
	memcpy(uc->uc_host, u.host, u.host_len);
	cf_normalize_host(uc->uc_host);
	uc->uc_host_is_ip = u.host_type != URI_HOST_NAME;
	uc->uc_port = u.port;
	/* The Host value sent upstream: the URL's authority as written. */
	upstream_hostport(auth, sizeof(auth), &u, uc->uc_host, u.has_port);
	if ((uc->uc_authority = cf_strdup(cx, sub, auth)) == NULL ||
	    (uc->uc_path = cf_calloc(cx, sub, u.path_len + 1, 1)) == NULL)
		return -1;
	memcpy(uc->uc_path, u.path, u.path_len);
	while (strlen(uc->uc_path) > 0 &&
	    uc->uc_path[strlen(uc->uc_path) - 1] == '/')
		uc->uc_path[strlen(uc->uc_path) - 1] = '\0';
	if (uc->uc_host_is_ip && !uc->uc_allow_private) {
		struct sockaddr_storage ss;
		socklen_t sl;
		char lit[300];

		upstream_hostport(lit, sizeof(lit), &u, uc->uc_host, 1);
		if (cf_parse_listen(lit, &ss, &sl) == 0 &&
		    addr_private((struct sockaddr *)&ss))
			return cf_err(cx, sub,
			    "%s is a private address (set allow_private)",
			    uc->uc_host);
	}
	return 0;
}

/*
 * The upstream's TLS (at jp): its pins, its CA file and the client
 * context; both need an https URL.
 */
static int
load_upstream_tls(struct cfctx *cx, const char *jp, const cJSON *up,
    const char *ca, struct upstream_conf *uc)
{
	char sub[128], why[512];
	char **pins = NULL;
	size_t npins = 0, i;

	if (cf_strlist(cx, jp, up, "pin_sha256", &pins, &npins, NULL) == -1)
		return -1;
	if ((uc->uc_pins = cf_calloc(cx, jp, npins, sizeof(*uc->uc_pins))) ==
	    NULL) {
		cf_strlist_free(pins, npins);
		return -1;
	}
	uc->uc_npins = npins;
	for (i = 0; i < npins; i++) {
		char el[160];

		cf_sub(el, sizeof(el), jp, "pin_sha256");
		snprintf(el + strlen(el), sizeof(el) - strlen(el), "[%zu]", i);
		if (certs_pin_decode(pins[i], uc->uc_pins[i], why,
			sizeof(why)) == -1) {
			cf_strlist_free(pins, npins);
			return cf_err(cx, el, "%s", why);
		}
	}
	cf_strlist_free(pins, npins);
	if (!uc->uc_https && (npins > 0 || ca != NULL))
		return cf_err(cx, jp,
		    "ca_file and pin_sha256 need an https URL");
	if (ca != NULL && (uc->uc_ca_file = cf_strdup(cx, jp, ca)) == NULL)
		return -1;
	if (uc->uc_https) {
		uc->uc_ssl_ctx = certs_client_ctx(ca, why, sizeof(why));
		if (uc->uc_ssl_ctx == NULL) {
			cf_sub(sub, sizeof(sub), jp,
			    ca != NULL ? "ca_file" : "url");
			return cf_err(cx, sub, "%s%s%s", ca != NULL ? ca : "",
			    ca != NULL ? ": " : "", why);
		}
	}
	return 0;
}

int
cf_upstream_as_requested(const cJSON *r)
{
	const cJSON *up = cJSON_GetObjectItemCaseSensitive(r, "upstream");
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(up, "mode");

	return cJSON_IsString(m) && strcmp(m->valuestring, "as_requested") == 0;
}

/*
 * An allowlist upstream (at jp): "mode": "as_requested" dials the host a
 * request names, on one of "ports" (default 443), checked as any upstream
 * is. What configures one fixed upstream has no meaning here.
 */
static int
load_as_requested(struct cfctx *cx, const char *jp, const cJSON *up,
    struct upstream_conf *uc)
{
	static const char *const keys[] = { "mode", "ports", "allow_private",
		NULL };

	uc->uc_as_requested = 1;
	if (cf_keys(cx, jp, up, keys) == -1 ||
	    cf_bool(cx, jp, up, "allow_private", &uc->uc_allow_private) == -1 ||
	    cf_ports(cx, jp, up, 0, uc->uc_ports, SL_NELEM(uc->uc_ports),
		&uc->uc_nports) == -1)
		return -1;
	if (uc->uc_nports == 0) {
		uc->uc_ports[0] = 443;
		uc->uc_nports = 1;
	}
	return 0;
}

/*
 * An intercepting allowlist route: sluice is the TLS server of each
 * tunnel (a leaf for the host asked) and the TLS client of that host,
 * verified against the system store under that name. Its CONNECTs go to
 * upstream.ports (load_route() refuses connect.ports on it).
 */
int
cf_allowlist_intercept(struct cfctx *cx, const char *jp, struct route *rt)
{
	struct upstream_conf *uc = &rt->rt_up;
	char why[512];

	memcpy(rt->rt_ports, uc->uc_ports, sizeof(rt->rt_ports));
	rt->rt_nports = uc->uc_nports;
	if ((uc->uc_ssl_ctx = certs_client_ctx(NULL, why, sizeof(why))) == NULL)
		return cf_err(cx, jp, "the system trust store: %s", why);
	return 0;
}

int
cf_load_upstream(struct cfctx *cx, const char *rjp, const cJSON *r,
    struct upstream_conf *uc)
{
	static const char *const keys[] = { "mode", "url", "ca_file",
		"pin_sha256", "allow_private", "allow_plaintext", "headers",
		"strip_token", NULL };
	const cJSON *up = cJSON_GetObjectItemCaseSensitive(r, "upstream");
	const char *url = NULL, *ca = NULL, *mode = NULL;
	char jp[96], sub[128];

	cf_sub(jp, sizeof(jp), rjp, "upstream");
	if (up == NULL)
		return cf_err(cx, rjp, "missing \"upstream\"");
	if (cf_str(cx, jp, up, "mode", 0, &mode) == -1)
		return -1;
	cf_sub(sub, sizeof(sub), jp, "mode");
	if (mode != NULL && strcmp(mode, "as_requested") == 0)
		return load_as_requested(cx, jp, up, uc);
	if (mode != NULL && strcmp(mode, "fixed") != 0)
		return cf_err(cx, sub,
		    "\"%s\": must be \"fixed\" (url) or \"as_requested\"",
		    mode);
	if (cf_keys(cx, jp, up, keys) == -1 ||
	    cf_str(cx, jp, up, "url", 1, &url) == -1 ||
	    cf_str(cx, jp, up, "ca_file", 0, &ca) == -1 ||
	    cf_bool(cx, jp, up, "allow_private", &uc->uc_allow_private) == -1 ||
	    cf_bool(cx, jp, up, "allow_plaintext", &uc->uc_allow_plaintext) ==
		-1 ||
	    cf_bool(cx, jp, up, "strip_token", &uc->uc_strip_token) == -1)
		return -1;
	cf_sub(sub, sizeof(sub), jp, "url");
	if (load_upstream_url(cx, sub, url, uc) == -1 ||
	    load_upstream_tls(cx, jp, up, ca, uc) == -1)
		return -1;
	return load_headers(cx, jp, up, uc);
}

void
cf_upstream_free(struct upstream_conf *uc)
{
	size_t i;

	free(uc->uc_url);
	free(uc->uc_host);
	free(uc->uc_authority);
	free(uc->uc_path);
	free(uc->uc_ca_file);
	free(uc->uc_pins);
	for (i = 0; i < uc->uc_nheaders; i++) {
		struct upstream_header *uh = &uc->uc_headers[i];

		free(uh->uh_name);
		free(uh->uh_file);
		if (uh->uh_value != NULL) {
			explicit_bzero(uh->uh_value, uh->uh_value_len);
			free(uh->uh_value);
		}
	}
	free(uc->uc_headers);
	SSL_CTX_free(uc->uc_ssl_ctx);
}
