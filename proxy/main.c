/*
 * sluice: dispatch to a subcommand. Each command parses its own options and
 * returns an exit code (DESIGN.md "Command line").
 */
#include <stdio.h>
#include <string.h>

#include "proxy/proxy.h"

struct command {
	const char *name;
	int (*fn)(int, char **);
	const char *usage;
};

static const struct command commands[] = {
	{ "run", cmd_run,
	    "run   -c POLICY.json [--netns NAME] [--no-netpolicy] [-v]" },
	{ "check", cmd_check, "check -c POLICY.json" },
	{ "netpolicy", cmd_netpolicy,
	    "netpolicy apply|show|verify|flush|watch -c POLICY.json [--netns NAME]" },
	{ "token", cmd_token,
	    "token mint --key FILE --alg HS256|EdDSA --aud AUD --sub SUB --ttl SECONDS [--kid KID] [--iss ISS] [--max-requests N] [--jti JTI] | verify -c POLICY.json [--route AUD] TOKEN|-" },
	{ "audit", cmd_audit,
	    "audit verify [--head STATE_DIR/audit.head] FILE..." },
	{ "admin", cmd_admin,
	    "admin [-c POLICY.json | --socket PATH] status | reload | revoke JTI..." },
};

static void
usage(FILE *f)
{
	size_t i;

	fprintf(f, "usage: sluice COMMAND [ARGS]\n");
	for (i = 0; i < SL_NELEM(commands); i++)
		fprintf(f, "       sluice %s\n", commands[i].usage);
	fprintf(f, "       sluice --version | help\n");
}

int
main(int argc, char **argv)
{
	size_t i;

	if (argc < 2) {
		usage(stderr);
		return SL_EXIT_USAGE;
	}
	if (strcmp(argv[1], "--version") == 0) {
		printf("sluice %s\n", SLUICE_VERSION);
		return SL_EXIT_OK;
	}
	if (strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 ||
	    strcmp(argv[1], "-h") == 0) {
		usage(stdout);
		return SL_EXIT_OK;
	}
	for (i = 0; i < SL_NELEM(commands); i++)
		if (strcmp(argv[1], commands[i].name) == 0)
			return commands[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "sluice: unknown command: %s\n", argv[1]);
	usage(stderr);
	return SL_EXIT_USAGE;
}
