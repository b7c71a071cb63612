/*
 * netpolicy.inbound (sidecar): the ports a pod accepts connections on from
 * outside (kubelet probes, Service traffic) and from which source
 * prefixes. The kernel rules then let out the replies of those
 * connections only (docs/netpolicy.md).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <stdlib.h>
#include <string.h>

#include "proxy/config/config.h"
#include "proxy/config/config_int.h"
#include "proxy/util/util.h"

/* "10.0.0.0/8", "2001:db8::/32": byte-aligned, host bits zero. */
static int
parse_prefix(struct cfctx *cx, const char *jp, const char *s,
    struct inbound_net *out)
{
	char addr[INET6_ADDRSTRLEN];
	const char *slash = strchr(s, '/');
	unsigned long bits;
	size_t len = slash != NULL ? (size_t)(slash - s) : strlen(s), i;
	char *end;

	if (len == 0 || len >= sizeof(addr))
		return cf_err(cx, jp, "\"%s\" is not an address/prefix", s);
	memcpy(addr, s, len);
	addr[len] = '\0';
	memset(out, 0, sizeof(*out));
	if (inet_pton(AF_INET, addr, out->in_addr) == 1)
		out->in_family = AF_INET;
	else if (inet_pton(AF_INET6, addr, out->in_addr) == 1)
		out->in_family = AF_INET6;
	else
		return cf_err(cx, jp, "\"%s\" is not an address/prefix", s);
	bits = out->in_family == AF_INET ? 32 : 128;
	if (slash != NULL) {
		bits = strtoul(slash + 1, &end, 10);
		if (slash[1] == '\0' || *end != '\0' ||
		    bits > (out->in_family == AF_INET ? 32UL : 128UL))
			return cf_err(cx, jp, "\"%s\": bad prefix length", s);
	}
	if (bits % 8 != 0)
		return cf_err(cx, jp,
		    "\"%s\": only whole-byte prefixes (/8, /16, /24, ...)", s);
	out->in_prefix = (unsigned)bits;
	for (i = bits / 8; i < 16; i++)
		if (out->in_addr[i] != 0)
			return cf_err(cx, jp,
			    "\"%s\": host bits set after the prefix", s);
	return 0;
}

static int
load_entry(struct cfctx *cx, const char *jp, const cJSON *el,
    struct inbound_conf *ib)
{
	static const char *const keys[] = { "ports", "from", NULL };
	char sub[96], idx[128];
	size_t i;

	if (cf_keys(cx, jp, el, keys) == -1 ||
	    cf_ports(cx, jp, el, 1, ib->ib_ports, SL_NELEM(ib->ib_ports),
		&ib->ib_nports) == -1)
		return -1;
	if (cf_strlist(cx, jp, el, "from", &ib->ib_from, &ib->ib_nfrom, NULL) ==
	    -1)
		return -1;
	cf_sub(sub, sizeof(sub), jp, "from");
	if (ib->ib_nfrom == 0)
		return cf_err(cx, sub,
		    "must name the sources (\"0.0.0.0/0\" for any IPv4)");
	if (ib->ib_nfrom > SL_NELEM(ib->ib_net))
		return cf_err(cx, sub, "more than %zu", SL_NELEM(ib->ib_net));
	for (i = 0; i < ib->ib_nfrom; i++) {
		cf_idx(idx, sizeof(idx), sub, i);
		if (parse_prefix(cx, idx, ib->ib_from[i], &ib->ib_net[i]) == -1)
			return -1;
	}
	return 0;
}

int
cf_load_inbound(struct cfctx *cx, const cJSON *np_obj)
{
	struct netpolicy_conf *np = &cx->cf->cf_np;
	const cJSON *arr, *el;
	char jp[64];
	size_t i = 0;
	int n;

	if (np_obj == NULL)
		return 0;
	if ((n = cf_array(cx, "netpolicy", np_obj, "inbound", 0, 16, &arr)) ==
	    -1)
		return -1;
	if (n == 0)
		return 0;
	if (np->np_mode != NETPOLICY_SIDECAR)
		return cf_err(cx, "netpolicy.inbound", "sidecar mode only");
	if ((np->np_inbound = cf_calloc(cx, "netpolicy.inbound", (size_t)n,
		 sizeof(*np->np_inbound))) == NULL)
		return -1;
	np->np_ninbound = (size_t)n;
	cJSON_ArrayForEach(el, arr) {
		cf_idx(jp, sizeof(jp), "netpolicy.inbound", i);
		if (load_entry(cx, jp, el, &np->np_inbound[i]) == -1)
			return -1;
		i++;
	}
	return 0;
}

void
cf_inbound_free(struct netpolicy_conf *np)
{
	size_t i;

	for (i = 0; i < np->np_ninbound; i++)
		cf_strlist_free(np->np_inbound[i].ib_from,
		    np->np_inbound[i].ib_nfrom);
	free(np->np_inbound);
}
