/*
 * Warnings (stderr, at start and in `sluice check`) about legal but
 * risky choices around allowlist routes and report mode: report mode
 * itself, a wildcard that covers a whole public suffix, a TCP metrics
 * listener the sandbox can reach, allow_private on an allowlist route.
 */
#include <stdio.h>
#include <string.h>

#include "proxy/config/config.h"
#include "proxy/daemon/daemon.h"

/*
 * A small, partial list of the most common public suffixes (the Public
 * Suffix List has thousands): a wildcard on one of these allows every
 * site under it.
 */
static const char *const public_suffixes[] = { "com", "org", "net", "edu",
	"gov", "mil", "int", "info", "biz", "io", "co", "ai", "app", "dev",
	"xyz", "me", "us", "uk", "co.uk", "org.uk", "ac.uk", "gov.uk", "de",
	"fr", "nl", "eu", "it", "es", "ch", "se", "no", "pl", "ru", "ca", "au",
	"com.au", "net.au", "org.au", "jp", "co.jp", "ne.jp", "cn", "com.cn",
	"in", "co.in", "br", "com.br", "kr", "co.kr", "tw", "com.tw", "nz",
	"co.nz", "za", "co.za", "mx", "com.mx", "github.io", "gitlab.io",
	"githubusercontent.com", "appspot.com", "herokuapp.com", "blogspot.com",
	"amazonaws.com", "s3.amazonaws.com", "cloudfront.net",
	"azurewebsites.net", "pages.dev", "workers.dev", "vercel.app",
	"netlify.app", "web.app", "firebaseapp.com", "ngrok.io",
	"ngrok-free.app", NULL };

int
warn_public_suffix(const char *host)
{
	size_t i;

	if (strncmp(host, "*.", 2) != 0)
		return 0;
	for (i = 0; public_suffixes[i] != NULL; i++)
		if (strcmp(host + 2, public_suffixes[i]) == 0)
			return 1;
	return 0;
}

void
warn_allowlist(const struct config *cf)
{
	size_t i, h;

	if (cf->cf_report)
		(void)fprintf(stderr,
		    "sluice: warning: enforce is \"report\": requests no "
		    "route allows (route_not_found, method_not_allowed, "
		    "path_not_allowed) are let through and audited with "
		    "decision \"report\"; this policy does not hold the "
		    "sandbox to its routes\n");
	for (i = 0; i < cf->cf_nroutes; i++) {
		const struct route *rt = &cf->cf_routes[i];

		for (h = 0; h < rt->rt_nhosts; h++)
			if (warn_public_suffix(rt->rt_hosts[h]))
				(void)fprintf(stderr,
				    "sluice: warning: routes[%zu].hosts[%zu] "
				    "\"%s\" covers a whole public suffix: "
				    "every site under it is allowed\n",
				    i, h, rt->rt_hosts[h]);
		if (rt->rt_up.uc_as_requested && rt->rt_up.uc_allow_private)
			(void)fprintf(stderr,
			    "sluice: warning: routes[%zu] \"%s\": "
			    "upstream.allow_private on an allowlist route lets "
			    "a listed name that resolves to a private address "
			    "(the metadata service, the local network) be "
			    "dialled\n",
			    i, rt->rt_audience);
	}
	/* Gateway mode: the sandbox reaches only the listeners' ports. */
	if (cf->cf_metrics_listen != NULL &&
	    strncmp(cf->cf_metrics_listen, "unix:", 5) != 0 &&
	    cf->cf_np.np_mode != NETPOLICY_GATEWAY)
		(void)fprintf(stderr,
		    "sluice: warning: metrics.listen %s is a TCP address the "
		    "sandbox can reach (it shares the network namespace, "
		    "loopback included); use unix:/path\n",
		    cf->cf_metrics_listen);
	(void)fflush(stderr);
}
