/*
 * sluice: dispatch to a subcommand. Each command parses its own options and
 * returns an exit code (docs/man/sluice.8). Help is answered here, in one
 * style for every command: "sluice help [CMD]", "sluice CMD -h|--help"
 * and "sluice CMD VERB -h|--help" print CMD's usage on stdout and exit 0.
 */
#include <stdio.h>
#include <string.h>

#include "proxy/proxy.h"

struct command {
	const char *name;
	int (*fn)(int, char **);
	const char *usage; /* lines after "usage: ", each "sluice ..." */
};

static const struct command commands[] = {
	{ "run", cmd_run,
	    "sluice run -c POLICY.json [--netns NAME] [--no-netpolicy] [--single-process] [-v]\n" },
	{ "check", cmd_check, "sluice check -c POLICY.json\n" },
	{ "netpolicy", cmd_netpolicy,
	    "sluice netpolicy apply|show|verify|flush -c POLICY.json "
	    "[--netns NAME]\n"
	    "sluice netpolicy watch (-c POLICY.json | --group N) "
	    "[--netns NAME]\n" },
	{ "token", cmd_token,
	    "sluice token mint --key FILE --alg HS256|EdDSA --aud AUD "
	    "--sub SUB --ttl SECONDS [--kid KID] [--iss ISS] "
	    "[--max-requests N] [--jti JTI] [--sbx SANDBOX] [--now UNIXTIME]\n"
	    "sluice token verify -c POLICY.json [--route AUD] TOKEN|-\n" },
	{ "audit", cmd_audit,
	    "sluice audit verify [--head STATE_DIR/audit.head] FILE...\n"
	    "sluice audit tail [-f] [--deny] [--sub RUN] "
	    "[--color=auto|always|never] FILE\n"
	    "sluice audit stats FILE...\n"
	    "sluice audit suggest [--wildcards] [--depth N] "
	    "[--audience AUD] FILE...\n" },
	{ "admin", cmd_admin,
	    "sluice admin [-c POLICY.json | --socket PATH] "
	    "status | reload | revoke JTI... | sandbox add ID IFACE ADDR... | "
	    "sandbox del ID | sandbox list\n" },
	{ "exec", cmd_exec,
	    "sluice exec [-c POLICY.json] [--profile generic|anthropic|openai] "
	    "[--key-file F] [--ttl S] [--max-requests N] [--user U] "
	    "[--clean-env] [--audit FILE] [--upstream URL] [-v] "
	    "-- CMD [ARG]...\n" },
	{ "certs", cmd_certs,
	    "sluice certs init --dir DIR [--days N] [--name CN] "
	    "[--permit HOST]... [--permit-from POLICY.json]\n"
	    "sluice certs show --dir DIR\n" },
};

#define VERSION_USAGE "sluice --version\nsluice help [COMMAND]\n"

/* Each line of text, the first after "usage: ", the rest aligned. */
static void
print_usage(FILE *f, const char *text, int *first)
{
	const char *nl;

	while (*text != '\0') {
		nl = strchr(text, '\n');
		fprintf(f, "%s%.*s\n", *first ? "usage: " : "       ",
		    (int)(nl != NULL ? nl - text : (long)strlen(text)), text);
		*first = 0;
		text = nl != NULL ? nl + 1 : text + strlen(text);
	}
}

static void
usage(FILE *f)
{
	size_t i;
	int first = 1;

	for (i = 0; i < SL_NELEM(commands); i++)
		print_usage(f, commands[i].usage, &first);
	print_usage(f, VERSION_USAGE, &first);
}

static int
is_help(const char *s)
{
	return strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0;
}

static const struct command *
find(const char *name)
{
	size_t i;

	for (i = 0; i < SL_NELEM(commands); i++)
		if (strcmp(name, commands[i].name) == 0)
			return &commands[i];
	return NULL;
}

static int
help(int argc, char **argv)
{
	const struct command *c;
	int first = 1;

	if (argc < 3) {
		usage(stdout);
		return SL_EXIT_OK;
	}
	if ((c = find(argv[2])) == NULL) {
		fprintf(stderr, "sluice: help: unknown command: %s\n", argv[2]);
		usage(stderr);
		return SL_EXIT_USAGE;
	}
	print_usage(stdout, c->usage, &first);
	return SL_EXIT_OK;
}

int
main(int argc, char **argv)
{
	const struct command *c;
	int first = 1;

	if (argc < 2) {
		usage(stderr);
		return SL_EXIT_USAGE;
	}
	if (strcmp(argv[1], "--version") == 0) {
		printf("sluice %s\n", SLUICE_VERSION);
#ifdef SLUICE_TEST_HOOKS
		printf(
		    "built with test hooks (SLUICE_TEST_HOOKS): not for use\n");
#endif
		return SL_EXIT_OK;
	}
	if (strcmp(argv[1], "help") == 0 || is_help(argv[1]))
		return help(argc, argv);
	if ((c = find(argv[1])) == NULL) {
		fprintf(stderr, "sluice: unknown command: %s\n", argv[1]);
		usage(stderr);
		return SL_EXIT_USAGE;
	}
	/* "sluice CMD -h" and "sluice CMD VERB -h" (VERB not an option). */
	if ((argc >= 3 && is_help(argv[2])) ||
	    (argc >= 4 && argv[2][0] != '-' && is_help(argv[3]))) {
		print_usage(stdout, c->usage, &first);
		return SL_EXIT_OK;
	}
	return c->fn(argc - 1, argv + 1);
}
