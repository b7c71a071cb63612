/*
 * "sluice run" and "sluice check": the options, then the daemon's serve()
 * or the policy's normalized print (DESIGN.md "Command line").
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "proxy/cli/cli.h"
#include "proxy/config/config.h"
#include "proxy/daemon/daemon.h"
#include "proxy/util/util.h"

static int
usage_error(const char *cmd, const char *msg)
{
	(void)cmd;
	fprintf(stderr, "%s\n", msg);
	return SL_EXIT_USAGE;
}

int
cmd_check(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' }, { NULL, 0, NULL, 0 }
	};
	const char *path = NULL;
	struct config *cf;
	char why[1024];
	int ch;

	optind = 1;
	while ((ch = getopt_long(argc, argv, "c:", opts, NULL)) != -1) {
		if (ch != 'c')
			return usage_error("check",
			    "usage: sluice check -c POLICY.json");
		path = optarg;
	}
	if (path == NULL || optind != argc)
		return usage_error("check",
		    "usage: sluice check -c POLICY.json");
	if ((cf = config_load(path, NULL, why, sizeof(why))) == NULL) {
		fprintf(stderr, "%s\n", why);
		return SL_EXIT_INVALID;
	}
	warn_policy(cf);
	config_print(cf, stdout);
	config_unref(cf);
	return SL_EXIT_OK;
}

static int
run_parse(int argc, char **argv, struct run_opts *o)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "netns", required_argument, NULL, 'n' },
		{ "no-netpolicy", no_argument, NULL, 'N' },
		{ "single-process", no_argument, NULL, 'S' },
		{ "verbose", no_argument, NULL, 'v' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	memset(o, 0, sizeof(*o));
	optind = 1;
	while ((ch = getopt_long(argc, argv, "c:v", opts, NULL)) != -1) {
		switch (ch) {
		case 'c':
			o->path = optarg;
			break;
		case 'n':
			o->netns = optarg;
			break;
		case 'N':
			o->no_netpolicy = 1;
			break;
		case 'S':
			o->no_privsep = 1;
			break;
		case 'v':
			o->verbose = 1;
			break;
		default:
			return -1;
		}
	}
	return o->path == NULL || optind != argc ? -1 : 0;
}

int
cmd_run(int argc, char **argv)
{
	struct run_opts o;

	if (run_parse(argc, argv, &o) == -1)
		return usage_error("run",
		    "usage: sluice run -c POLICY.json [--netns NAME] [--no-netpolicy] [--single-process] [-v]");
	return serve(&o);
}
