/*
 * The TLS material of intercepted tunnels (docs/interception.md): the
 * local CA (ephemeral, or loaded from files), the leaf cache and the
 * server-side SSL_CTX, made once at start from the policy's "intercept"
 * section. The CA's name constraints are the intercepted routes' hosts;
 * a reload may add no host the CA cannot sign for.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/ssl.h>

#include "certs/certs.h"
#include "proxy/config/config.h"
#include "proxy/relay/relay.h"
#include "proxy/util/util.h"

struct intercept {
	struct certs_ca *it_ca;
	struct certs_cache *it_cache;
	SSL_CTX *it_ctx;
};

/*
 * The host names intercepted tunnels may name: each intercepting route's
 * upstream host (a fixed route's) and its hosts, a wildcard "*.suffix"
 * as its suffix: a DNS name constraint permits the name and every name
 * under it (RFC 5280 4.2.1.10), and leaves are minted only for hosts the
 * route selects, never the suffix itself. At most max; the count, or -1.
 */
static int
intercept_hosts(const struct config *cf, const char **out, size_t max)
{
	size_t i, h, n = 0;

	for (i = 0; i < cf->cf_nroutes; i++) {
		const struct route *rt = &cf->cf_routes[i];

		if (!rt->rt_intercept)
			continue;
		if (rt->rt_up.uc_host != NULL) {
			if (n == max)
				return -1;
			out[n++] = rt->rt_up.uc_host;
		}
		for (h = 0; h < rt->rt_nhosts; h++) {
			if (n == max)
				return -1;
			out[n++] = strncmp(rt->rt_hosts[h], "*.", 2) == 0 ?
			    rt->rt_hosts[h] + 2 :
			    rt->rt_hosts[h];
		}
	}
	return (int)n;
}

int
intercept_check(const struct intercept *it, const struct config *cf, char *why,
    size_t whylen)
{
	const char *hosts[CERTS_CA_MAX_PERMIT];
	char w[256];
	int n, i;

	if ((n = intercept_hosts(cf, hosts, SL_NELEM(hosts))) == -1) {
		snprintf(why, whylen, "intercept: more than %d host names",
		    CERTS_CA_MAX_PERMIT);
		return -1;
	}
	if (n > 0 && it == NULL) {
		snprintf(why, whylen,
		    "routes: connect.intercept needs the top-level "
		    "\"intercept\" section (at start)");
		return -1;
	}
	for (i = 0; i < n; i++)
		if (certs_ca_permits(it->it_ca, hosts[i], w, sizeof(w)) == -1) {
			snprintf(why, whylen,
			    "intercept: the CA cannot sign for %s: %s",
			    hosts[i], w);
			return -1;
		}
	return 0;
}

struct intercept *
intercept_new(const struct config *cf, char *why, size_t whylen)
{
	const struct intercept_conf *ic = &cf->cf_intercept;
	const char *hosts[CERTS_CA_MAX_PERMIT];
	struct certs_ca_params p;
	struct intercept *it;
	char w[512];
	int n;

	if ((it = calloc(1, sizeof(*it))) == NULL) {
		snprintf(why, whylen, "intercept: out of memory");
		return NULL;
	}
	if ((n = intercept_hosts(cf, hosts, SL_NELEM(hosts))) == -1) {
		snprintf(why, whylen, "intercept: more than %d host names",
		    CERTS_CA_MAX_PERMIT);
		goto fail;
	}
	if (ic->ic_ephemeral) {
		memset(&p, 0, sizeof(p));
		p.cp_cn = "sluice ephemeral CA";
		p.cp_days = (unsigned)ic->ic_ca_days;
		p.cp_permit = hosts;
		p.cp_npermit = (size_t)n;
		/* No host to permit would make an unconstrained CA. */
		if (n == 0) {
			snprintf(why, whylen,
			    "intercept: no route has connect.intercept");
			goto fail;
		}
		it->it_ca = certs_ca_generate(&p, time(NULL), w, sizeof(w));
		if (it->it_ca != NULL && ic->ic_cert_out != NULL &&
		    certs_ca_write_cert(it->it_ca, ic->ic_cert_out, w,
			sizeof(w)) == -1) {
			snprintf(why, whylen, "intercept.ca_cert_out: %s", w);
			goto fail;
		}
	} else
		it->it_ca = certs_ca_load(ic->ic_cert_file, ic->ic_key_file,
		    cf->cf_uid, time(NULL), w, sizeof(w));
	if (it->it_ca == NULL) {
		snprintf(why, whylen, "intercept: %s", w);
		goto fail;
	}
	if (intercept_check(it, cf, why, whylen) == -1)
		goto fail;
	if ((it->it_cache =
		    certs_cache_new(it->it_ca, (size_t)ic->ic_max_leaves,
			(unsigned)ic->ic_leaf_days, w, sizeof(w))) == NULL ||
	    (it->it_ctx = certs_server_ctx(it->it_cache, w, sizeof(w))) ==
		NULL) {
		snprintf(why, whylen, "intercept: %s", w);
		goto fail;
	}
	return it;
fail:
	intercept_free(it);
	return NULL;
}

void
intercept_free(struct intercept *it)
{
	if (it == NULL)
		return;
	SSL_CTX_free(it->it_ctx);
	certs_cache_free(it->it_cache);
	certs_ca_free(it->it_ca);
	free(it);
}

SSL *
intercept_ssl(struct intercept *it, const char *host, char *why, size_t whylen)
{
	SSL *ssl;

	if ((ssl = SSL_new(it->it_ctx)) == NULL) {
		snprintf(why, whylen, "out of memory");
		return NULL;
	}
	if (certs_server_expect(ssl, host, why, whylen) == -1) {
		SSL_free(ssl);
		return NULL;
	}
	return ssl;
}

void
intercept_stats(const struct intercept *it, struct certs_cache_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (it != NULL)
		certs_cache_stats(it->it_cache, out);
}
