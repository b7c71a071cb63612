/*
 * `sluice netpolicy apply|show|verify|flush|watch -c POLICY.json
 * [--netns NAME]`: the operator's handle on the kernel rules (DESIGN.md
 * "Command line", "Kernel rules"). The ruleset comes from the policy
 * through netguard_ruleset(), the same path the daemon takes, so what this
 * shows, applies and verifies is exactly what `sluice run` installs.
 *
 * Exit codes: 0 ok; 1 invalid policy, or verify found differences (one per
 * line on stdout); 2 usage; 3 runtime failure (the kernel refused the
 * batch, an ACK went missing, the table could not be read).
 */
#include <sys/types.h>
#include <sys/socket.h>

#include <netinet/in.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netpolicy/netpolicy.h"
#include "proxy/cli/cli.h"
#include "proxy/config/config.h"
#include "proxy/daemon/daemon.h"
#include "proxy/ops/ops.h"
#include "proxy/token/store.h"
#include "proxy/util/util.h"

/*
 * Test hook, read only by `netpolicy apply`: with this variable set to 1,
 * the batch carries one malformed element (a 3-byte key in a set of
 * 8-byte keys) after everything else, so that the kernel refuses the whole
 * batch. The integration tests use it to show that a refused apply leaves
 * the previous table intact. The daemon never reads it.
 */
#define NP_TEST_BAD_ELEMENT_ENV "SLUICE_NETPOLICY_TEST_BAD_ELEMENT"

static volatile sig_atomic_t watch_stop;

static void
usage(void)
{
	fprintf(stderr,
	    "usage: sluice netpolicy apply|show|verify|flush -c POLICY.json "
	    "[--netns NAME]\n"
	    "       sluice netpolicy watch (-c POLICY.json | --group N) "
	    "[--netns NAME]\n");
}

static void
print_diff(void *arg, const char *line)
{
	(void)arg;
	printf("%s\n", line);
}

static int
np_cmd_apply(const struct config *cf, struct np_ruleset *rs)
{
	char why[512];
	const char *env;
	struct np_set *set;
	struct np_elem bad;

	env = getenv(NP_TEST_BAD_ELEMENT_ENV);
	if (env != NULL && strcmp(env, "1") == 0) {
		if ((set = np_ruleset_set(rs, NP_SET_UPSTREAM4)) == NULL) {
			fprintf(stderr,
			    "sluice: netpolicy apply: %s needs "
			    "sidecar mode\n",
			    NP_TEST_BAD_ELEMENT_ENV);
			return SL_EXIT_USAGE;
		}
		memset(&bad, 0, sizeof(bad));
		bad.el_keylen = 3;
		if (np_set_add_elem(set, &bad) == -1)
			return SL_EXIT_RUNTIME;
	}
	if (np_apply(rs, why, sizeof(why)) == -1) {
		fprintf(stderr, "sluice: netpolicy apply: %s\n", why);
		return SL_EXIT_RUNTIME;
	}
	printf("applied table inet %s (%s, %zu rules)\n", cf->cf_np.np_table,
	    cf->cf_np.np_mode == NETPOLICY_SIDECAR ? "sidecar" : "gateway",
	    np_ruleset_nrules(rs));
	return SL_EXIT_OK;
}

static int
np_cmd_verify(const struct config *cf, const struct np_ruleset *want)
{
	struct np_ruleset *have;
	char why[512];
	size_t n;

	if ((have = np_dump(cf->cf_np.np_table, why, sizeof(why))) == NULL) {
		fprintf(stderr, "sluice: netpolicy verify: %s\n", why);
		return SL_EXIT_RUNTIME;
	}
	n = np_ruleset_diff(want, have, print_diff, NULL);
	np_ruleset_free(have);
	/* The differences are the answer: losing them is a failure. */
	if (fflush(stdout) != 0) {
		fprintf(stderr, "sluice: netpolicy verify: stdout: %s\n",
		    strerror(errno));
		return SL_EXIT_RUNTIME;
	}
	if (n > 0) {
		fprintf(stderr,
		    "sluice: netpolicy verify: table inet %s: %zu "
		    "difference%s (listed on stdout)\n",
		    cf->cf_np.np_table, n, n == 1 ? "" : "s");
		return SL_EXIT_INVALID;
	}
	fprintf(stderr, "sluice: netpolicy verify: table inet %s matches\n",
	    cf->cf_np.np_table);
	return SL_EXIT_OK;
}

/* One JSON line per dropped packet; every field is an address or number. */
static void
watch_print(void *arg, const struct np_drop *d)
{
	char pbuf[8];

	(void)arg;
	printf("{\"event\":\"net.drop\",\"proto\":\"%s\",\"src\":\"%s\","
	       "\"dst\":\"%s\"",
	    np_proto_name(d->nd_proto, pbuf, sizeof(pbuf)), d->nd_src,
	    d->nd_dst);
	if (d->nd_has_ports)
		printf(",\"sport\":%u,\"dport\":%u", d->nd_sport, d->nd_dport);
	if (d->nd_has_uid)
		printf(",\"uid\":%" PRIu32, d->nd_uid);
	printf(",\"count\":1}\n");
	(void)fflush(stdout); /* a callback: nobody to tell */
}

static void
watch_signal(int sig)
{
	(void)sig;
	watch_stop = 1;
}

static int
np_cmd_watch(uint16_t group)
{
	struct sigaction sa;
	struct np_nflog *nf;
	struct pollfd pfd;
	uint64_t lost = 0;
	char why[512];
	int rc;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = watch_signal;
	sigemptyset(&sa.sa_mask);
	/* No SA_RESTART: poll must return on the signal. */
	if (sigaction(SIGINT, &sa, NULL) == -1 ||
	    sigaction(SIGTERM, &sa, NULL) == -1) {
		fprintf(stderr, "sluice: netpolicy watch: sigaction: %s\n",
		    strerror(errno));
		return SL_EXIT_RUNTIME;
	}
	if ((nf = np_nflog_open(group, why, sizeof(why))) == NULL) {
		fprintf(stderr, "sluice: netpolicy watch: %s\n", why);
		return SL_EXIT_RUNTIME;
	}
	/* Tests wait for this line before they send anything. */
	fprintf(stderr,
	    "sluice: netpolicy watch: listening on NFLOG group %u\n", group);
	pfd.fd = np_nflog_fd(nf);
	pfd.events = POLLIN;
	rc = SL_EXIT_OK;
	while (!watch_stop) {
		if (poll(&pfd, 1, 1000) == -1) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "sluice: netpolicy watch: poll: %s\n",
			    strerror(errno));
			rc = SL_EXIT_RUNTIME;
			break;
		}
		if ((pfd.revents & POLLIN) == 0)
			continue;
		if (np_nflog_read(nf, watch_print, NULL, &lost, why,
			sizeof(why)) == -1) {
			fprintf(stderr, "sluice: netpolicy watch: %s\n", why);
			rc = SL_EXIT_RUNTIME;
			break;
		}
	}
	if (lost > 0)
		fprintf(stderr,
		    "sluice: netpolicy watch: the socket overflowed %" PRIu64
		    " times\n",
		    lost);
	np_nflog_close(nf);
	return rc;
}

static int
parse_group(const char *s, uint16_t *out)
{
	unsigned long v;
	char *end;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v > UINT16_MAX ||
	    *s == '-')
		return -1;
	*out = (uint16_t)v;
	return 0;
}

int
cmd_netpolicy(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "netns", required_argument, NULL, 'n' },
		{ "group", required_argument, NULL, 'g' },
		{ NULL, 0, NULL, 0 },
	};
	const char *sub, *path = NULL, *netns = NULL;
	struct np_ruleset *rs = NULL;
	struct config *cf = NULL;
	uint16_t group = 0;
	int ch, rc, have_group = 0;
	char why[512], *text;

	if (argc < 2) {
		usage();
		return SL_EXIT_USAGE;
	}
	sub = argv[1];
	optind = 1;
	while ((ch = getopt_long(argc - 1, argv + 1, "c:", longopts, NULL)) !=
	    -1) {
		switch (ch) {
		case 'c':
			path = optarg;
			break;
		case 'n':
			netns = optarg;
			break;
		case 'g':
			if (parse_group(optarg, &group) == -1) {
				fprintf(stderr,
				    "sluice: netpolicy: --group: "
				    "not a number 0-65535\n");
				return SL_EXIT_USAGE;
			}
			have_group = 1;
			break;
		default:
			usage();
			return SL_EXIT_USAGE;
		}
	}
	if (optind != argc - 1 ||
	    (strcmp(sub, "apply") != 0 && strcmp(sub, "show") != 0 &&
		strcmp(sub, "verify") != 0 && strcmp(sub, "flush") != 0 &&
		strcmp(sub, "watch") != 0) ||
	    (path == NULL && !(strcmp(sub, "watch") == 0 && have_group))) {
		usage();
		return SL_EXIT_USAGE;
	}

	if (path != NULL) {
		if ((cf = config_load(path, NULL, why, sizeof(why))) == NULL) {
			fprintf(stderr, "%s\n", why);
			return SL_EXIT_INVALID;
		}
		if (!have_group)
			group = cf->cf_np.np_log_group;
	}
	/* The policy is read first: --netns changes the network only. */
	if (netns != NULL && np_netns_enter(netns, why, sizeof(why)) == -1) {
		fprintf(stderr, "sluice: netpolicy: %s\n", why);
		config_unref(cf);
		return SL_EXIT_RUNTIME;
	}
	if (strcmp(sub, "watch") == 0) {
		config_unref(cf);
		return np_cmd_watch(group);
	}
	if (strcmp(sub, "flush") == 0) {
		rc = SL_EXIT_OK;
		if (np_flush(cf->cf_np.np_table, why, sizeof(why)) == -1) {
			fprintf(stderr, "sluice: netpolicy flush: %s\n", why);
			rc = SL_EXIT_RUNTIME;
		}
		config_unref(cf);
		return rc;
	}
	if ((rs = netguard_ruleset(cf, why, sizeof(why))) == NULL) {
		fprintf(stderr, "%s: %s\n", path, why);
		config_unref(cf);
		return SL_EXIT_INVALID;
	}
	if (strcmp(sub, "show") == 0) {
		rc = SL_EXIT_OK;
		if ((text = np_ruleset_text(rs)) == NULL) {
			fprintf(stderr,
			    "sluice: netpolicy show: out of memory\n");
			rc = SL_EXIT_RUNTIME;
		} else {
			if (fputs(text, stdout) == EOF || fflush(stdout) != 0)
				rc = SL_EXIT_RUNTIME;
			free(text);
		}
	} else if (strcmp(sub, "apply") == 0)
		rc = np_cmd_apply(cf, rs);
	else
		rc = np_cmd_verify(cf, rs);
	np_ruleset_free(rs);
	config_unref(cf);
	return rc;
}
