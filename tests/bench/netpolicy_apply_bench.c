/*
 * Driver for tests/bench/netpolicy-apply.sh: builds the sidecar ruleset of
 * a two-upstream policy plus N static upstream elements (a policy file
 * cannot hold that many routes), then prints it in nft syntax ("show") or
 * applies it in one batch ("apply"), the way `sluice netpolicy` does. Not
 * part of the product; compiled by the script against the netpolicy
 * library.
 */
#include <sys/types.h>
#include <sys/socket.h>

#include <netinet/in.h>
#include <arpa/inet.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netpolicy/netpolicy.h"

int
main(int argc, char **argv)
{
	static const char *const resolvers[] = { "198.18.0.53" };
	static const struct np_upstream ups[] = {
		{ "198.18.255.1", 443, 1 },
		{ "model.example", 443, 0 },
	};
	struct sockaddr_in sin;
	struct np_ruleset *rs;
	struct np_input in;
	struct np_elem el;
	char why[512], *text;
	long i, n;

	if (argc != 3 || (n = strtol(argv[2], NULL, 10)) < 0 || n > 60000) {
		fprintf(stderr, "usage: %s show|apply N\n", argv[0]);
		return 2;
	}
	memset(&in, 0, sizeof(in));
	in.ni_mode = NP_MODE_SIDECAR;
	in.ni_table = "sluice";
	in.ni_allow_loopback = 1;
	in.ni_uid = 1;
	in.ni_resolvers = resolvers;
	in.ni_nresolvers = 1;
	in.ni_log_group = 7;
	in.ni_upstreams = ups;
	in.ni_nupstreams = 2;
	if ((rs = np_ruleset_build(&in, why, sizeof(why))) == NULL) {
		fprintf(stderr, "%s\n", why);
		return 1;
	}
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	for (i = 0; i < n; i++) {
		sin.sin_addr.s_addr = htonl((198u << 24) | (18u << 16) |
		    (uint32_t)((i / 250) << 8) | (uint32_t)(i % 250 + 1));
		if (np_elem_addr_port(&el, (struct sockaddr *)&sin, 8080, 0) ==
			-1 ||
		    np_set_add_elem(np_ruleset_set(rs, NP_SET_UPSTREAM4),
			&el) == -1)
			return 1;
	}
	if (strcmp(argv[1], "show") == 0) {
		if ((text = np_ruleset_text(rs)) == NULL)
			return 1;
		fputs(text, stdout);
		free(text);
	} else if (np_apply(rs, why, sizeof(why)) == -1) {
		fprintf(stderr, "apply: %s\n", why);
		return 3;
	}
	np_ruleset_free(rs);
	return 0;
}
