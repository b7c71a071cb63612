/*
 * The environment of a sandboxed command (DESIGN "What CMD is given"):
 * the proxy and CA variables that send every client through sluice, the
 * run token where a profile's SDK looks for its key, and nothing that
 * holds a secret sluice injects upstream. Pure: it reads only its
 * arguments and allocates the result.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/util/util.h"
#include "proxy/sandbox/sandbox.h"

/* What --clean-env keeps of the parent's environment. */
static const char *const keep_clean[] = {
	"PATH",
	"HOME",
	"TERM",
	"LANG",
	"USER",
};

enum ours {
	O_HTTP_PROXY,
	O_HTTPS_PROXY,
	O_ALL_PROXY,
	O_LC_HTTP_PROXY,
	O_LC_HTTPS_PROXY,
	O_LC_ALL_PROXY,
	O_NO_PROXY,
	O_LC_NO_PROXY,
	O_NODE_USE_ENV_PROXY,
	O_SSL_CERT_FILE,
	O_CURL_CA_BUNDLE,
	O_REQUESTS_CA_BUNDLE,
	O_GIT_SSL_CAINFO,
	O_PIP_CERT,
	O_NODE_EXTRA_CA_CERTS,
	O_SLUICE_TOKEN_FILE,
	O_ANTHROPIC_BASE_URL,
	O_ANTHROPIC_API_KEY,
	O_OPENAI_BASE_URL,
	O_OPENAI_API_KEY,
	O__COUNT
};

/* Every name sluice sets, in the order it appends them. */
static const char *const our_names[O__COUNT] = {
	"HTTP_PROXY",
	"HTTPS_PROXY",
	"ALL_PROXY",
	"http_proxy",
	"https_proxy",
	"all_proxy",
	"NO_PROXY",
	"no_proxy",
	"NODE_USE_ENV_PROXY",
	"SSL_CERT_FILE",
	"CURL_CA_BUNDLE",
	"REQUESTS_CA_BUNDLE",
	"GIT_SSL_CAINFO",
	"PIP_CERT",
	"NODE_EXTRA_CA_CERTS",
	"SLUICE_TOKEN_FILE",
	"ANTHROPIC_BASE_URL",
	"ANTHROPIC_API_KEY",
	"OPENAI_BASE_URL",
	"OPENAI_API_KEY",
};

#define NO_PROXY_LIST "localhost,127.0.0.1,::1"

/* Length of the name of "NAME=value", or 0 without '=' (or no name). */
static size_t
name_len(const char *kv)
{
	const char *eq = strchr(kv, '=');

	return eq == NULL ? 0 : (size_t)(eq - kv);
}

static int
name_in(const char *kv, size_t n, const char *const *names, size_t count)
{
	size_t i;

	for (i = 0; i < count; i++)
		if (strlen(names[i]) == n && memcmp(kv, names[i], n) == 0)
			return 1;
	return 0;
}

/* Whether sluice sets the variable kv names (its own value wins). */
static int
set_by_us(const char *kv, size_t n, const char *const val[O__COUNT])
{
	int o;

	for (o = 0; o < O__COUNT; o++)
		if (val[o] != NULL && strlen(our_names[o]) == n &&
		    memcmp(kv, our_names[o], n) == 0)
			return 1;
	return 0;
}

static int
is_secret(const char *value, const char *const *secrets, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (secrets[i] != NULL && secrets[i][0] != '\0' &&
		    strcmp(value, secrets[i]) == 0)
			return 1;
	return 0;
}

/* The token goes into a URL's userinfo: only unreserved characters. */
static int
token_ok(const char *t)
{
	const char *p;

	if (t == NULL || *t == '\0')
		return 0;
	for (p = t; *p != '\0'; p++)
		if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
			(*p >= '0' && *p <= '9') || *p == '.' || *p == '_' ||
			*p == '~' || *p == '-'))
			return 0;
	return 1;
}

/* "host:port" of the forward listener: no '@', '/', space or control. */
static int
proxy_ok(const char *a)
{
	const char *p;

	if (a == NULL || *a == '\0' || strchr(a, ':') == NULL)
		return 0;
	for (p = a; *p != '\0'; p++)
		if ((unsigned char)*p <= ' ' || *p == '@' || *p == '/' ||
		    *p == 0x7f)
			return 0;
	return 1;
}

static char *
kv_new(const char *name, const char *value)
{
	size_t n = strlen(name), v = strlen(value);
	char *s;

	if ((s = malloc(n + 1 + v + 1)) == NULL)
		return NULL;
	memcpy(s, name, n);
	s[n] = '=';
	memcpy(s + n + 1, value, v + 1);
	return s;
}

static void
strv_free(char **v, size_t n)
{
	size_t i;

	if (v == NULL)
		return;
	for (i = 0; i < n; i++) {
		explicit_bzero(v[i], strlen(v[i]));
		free(v[i]);
	}
	free(v);
}

void
sandbox_env_free(struct sandbox_env *ev)
{
	strv_free(ev->ev_env, ev->ev_n);
	strv_free(ev->ev_removed, ev->ev_nremoved);
	memset(ev, 0, sizeof(*ev));
}

/* The parent's variables CMD keeps, into ev; -1 when out of memory. */
static int
copy_parent(const struct sandbox_env_spec *es, size_t nparent,
    const char *const val[O__COUNT], struct sandbox_env *ev)
{
	size_t i, n;

	for (i = 0; i < nparent; i++) {
		const char *kv = es->es_environ[i];

		if ((n = name_len(kv)) == 0)
			continue;
		if (set_by_us(kv, n, val))
			continue;
		if (es->es_clean &&
		    !name_in(kv, n, keep_clean, SL_NELEM(keep_clean)))
			continue;
		if (is_secret(kv + n + 1, es->es_secrets, es->es_nsecrets)) {
			if ((ev->ev_removed[ev->ev_nremoved] =
				    strndup(kv, n)) == NULL)
				return -1;
			ev->ev_nremoved++;
			continue;
		}
		if ((ev->ev_env[ev->ev_n] = strdup(kv)) == NULL)
			return -1;
		ev->ev_n++;
	}
	return 0;
}

int
sandbox_env_build(const struct sandbox_env_spec *es, struct sandbox_env *ev,
    char *why, size_t whylen)
{
	const char *val[O__COUNT];
	char *proxy = NULL;
	size_t nparent = 0, plen;
	int o;

	memset(ev, 0, sizeof(*ev));
	if (!token_ok(es->es_token)) {
		snprintf(why, whylen,
		    "env: the run token is empty or has a "
		    "character a proxy URL cannot carry");
		return -1;
	}
	if (!proxy_ok(es->es_proxy)) {
		snprintf(why, whylen,
		    "env: forward listener address is not "
		    "host:port");
		return -1;
	}
	if (es->es_profile != SANDBOX_PROFILE_GENERIC &&
	    (es->es_base_url == NULL || *es->es_base_url == '\0')) {
		snprintf(why, whylen, "env: profile %s needs a base URL",
		    es->es_profile == SANDBOX_PROFILE_ANTHROPIC ? "anthropic" :
								  "openai");
		return -1;
	}
	plen = strlen("http://run:@") + strlen(es->es_token) +
	    strlen(es->es_proxy) + 1;
	if ((proxy = malloc(plen)) == NULL)
		goto nomem;
	snprintf(proxy, plen, "http://run:%s@%s", es->es_token, es->es_proxy);

	memset(val, 0, sizeof(val));
	for (o = O_HTTP_PROXY; o <= O_LC_ALL_PROXY; o++)
		val[o] = proxy;
	val[O_NO_PROXY] = val[O_LC_NO_PROXY] = NO_PROXY_LIST;
	val[O_NODE_USE_ENV_PROXY] = "1";
	for (o = O_SSL_CERT_FILE; o <= O_PIP_CERT; o++)
		val[o] = es->es_ca_bundle;
	val[O_NODE_EXTRA_CA_CERTS] = es->es_ca_cert;
	val[O_SLUICE_TOKEN_FILE] = es->es_token_file;
	if (es->es_profile == SANDBOX_PROFILE_ANTHROPIC) {
		val[O_ANTHROPIC_BASE_URL] = es->es_base_url;
		val[O_ANTHROPIC_API_KEY] = es->es_token;
	} else if (es->es_profile == SANDBOX_PROFILE_OPENAI) {
		val[O_OPENAI_BASE_URL] = es->es_base_url;
		val[O_OPENAI_API_KEY] = es->es_token;
	}

	if (es->es_environ != NULL)
		while (es->es_environ[nparent] != NULL)
			nparent++;
	/* Room for every parent entry, ours and the NULL. */
	if ((ev->ev_env = calloc(nparent + O__COUNT + 1, sizeof(char *))) ==
		NULL ||
	    (ev->ev_removed = calloc(nparent + 1, sizeof(char *))) == NULL)
		goto nomem;
	if (copy_parent(es, nparent, val, ev) == -1)
		goto nomem;
	for (o = 0; o < O__COUNT; o++) {
		if (val[o] == NULL)
			continue;
		if ((ev->ev_env[ev->ev_n] = kv_new(our_names[o], val[o])) ==
		    NULL)
			goto nomem;
		ev->ev_n++;
	}
	explicit_bzero(proxy, plen);
	free(proxy);
	return 0;
nomem:
	snprintf(why, whylen, "env: out of memory");
	if (proxy != NULL) {
		explicit_bzero(proxy, plen);
		free(proxy);
	}
	sandbox_env_free(ev);
	return -1;
}
