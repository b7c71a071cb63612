/*
 * Route selection with 1,000 allowlist hosts, half of them "*.suffix"
 * wildcards (issue 13 "Benchmarks": at most 1 us per request, a suffix
 * hash rather than a linear scan). Loads a policy of 10 allowlist routes
 * of 100 hosts each plus a fixed model route, then times
 * policy_route_for() on a mix of targets: exact names, names several
 * labels under a wildcard, the model's host, and names that match
 * nothing. Prints the median of batches in ns per lookup. Not a test:
 * nothing here can fail.
 *
 * Not part of the build. From the repository root, with the libraries
 * built into build/bench (-DCMAKE_BUILD_TYPE=Release; build/plain works
 * too, RelWithDebInfo), B=build/bench:
 *   cc -std=c11 -O2 -D_GNU_SOURCE -I. -I$B/include/sluice_proxy \
 *       tests/bench/route_bench.c -Wl,--start-group $B/proxy/*.a \
 *       $B/netpolicy/libsluice_netpolicy.a $B/certs/libsluice_certs.a \
 *       -Wl,--end-group -lcjson -lssl -lcrypto -levent_core \
 *       -levent_extra -levent_openssl -levent_pthreads -lnftnl -lmnl \
 *       -lseccomp -o /tmp/route_bench && /tmp/route_bench
 * Measured (2 shared cores, RelWithDebInfo): about 90 ns per lookup.
 */
#include <sys/stat.h>

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "proxy/proxy.h"

#define ROUTES  10
#define PER     100
#define TARGETS 64
#define BATCH   20000
#define BATCHES 51

static double
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int
cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void
put(int fd, const char *s)
{
	if (write(fd, s, strlen(s)) != (ssize_t)strlen(s))
		exit(1);
}

int
main(void)
{
	char dir[] = "/tmp/sluice-route-bench-XXXXXX", key[64], pol[64];
	char buf[256], why[1024], targets[TARGETS][128];
	struct uri us[TARGETS];
	struct config *cf;
	double t[BATCHES];
	size_t r, h, i, b, found = 0;
	int fd;

	if (mkdtemp(dir) == NULL)
		return 1;
	snprintf(key, sizeof(key), "%s/hs.key", dir);
	snprintf(pol, sizeof(pol), "%s/policy.json", dir);
	fd = open(key, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	put(fd, "0123456789abcdef0123456789abcdef");
	close(fd);
	fd = open(pol, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	put(fd,
	    "{\"listeners\":[{\"type\":\"forward\",\"listen\":"
	    "\"127.0.0.1:3128\"}],\"netpolicy\":{\"mode\":\"off\"},"
	    "\"tokens\":{\"keys\":[{\"alg\":\"HS256\",\"secret_file\":\"");
	put(fd, key);
	put(fd,
	    "\"}]},\"routes\":[{\"audience\":\"model\",\"upstream\":"
	    "{\"url\":\"http://model.internal/\",\"allow_plaintext\":"
	    "true}}");
	for (r = 0; r < ROUTES; r++) {
		snprintf(buf, sizeof(buf),
		    ",{\"audience\":\"r%zu\",\"upstream\":{\"mode\":"
		    "\"as_requested\",\"ports\":[80,443]},\"hosts\":[",
		    r);
		put(fd, buf);
		for (h = 0; h < PER; h++) {
			snprintf(buf, sizeof(buf),
			    "%s\"%sh%zu.r%zu.example%zu\"", h > 0 ? "," : "",
			    h % 2 ? "*." : "", h, r, r % 3);
			put(fd, buf);
		}
		put(fd, "]}");
	}
	put(fd, "]}");
	close(fd);
	cf = config_load(pol, NULL, why, sizeof(why));
	unlink(key);
	unlink(pol);
	rmdir(dir);
	if (cf == NULL) {
		fprintf(stderr, "policy refused: %s\n", why);
		return 1;
	}
	for (i = 0; i < TARGETS; i++) {
		size_t rr = (i * 7) % ROUTES, hh = (i * 13) % PER;
		const char *why2;

		switch (i % 4) {
		case 0: /* exact */
			snprintf(targets[i], sizeof(targets[i]),
			    "http://h%zu.r%zu.example%zu/simple/", hh & ~1UL,
			    rr, rr % 3);
			break;
		case 1: /* three labels under a wildcard */
			snprintf(targets[i], sizeof(targets[i]),
			    "http://a.b.c.h%zu.r%zu.example%zu/x", hh | 1UL, rr,
			    rr % 3);
			break;
		case 2: /* the model */
			snprintf(targets[i], sizeof(targets[i]),
			    "http://model.internal/v1/messages");
			break;
		default: /* nothing */
			snprintf(targets[i], sizeof(targets[i]),
			    "http://www.nowhere%zu.example.com/", i);
			break;
		}
		memset(&us[i], 0, sizeof(us[i]));
		if (uri_parse_target(targets[i], strlen(targets[i]), 0, &us[i],
			&why2) == -1)
			return 1;
		if (policy_route_for(cf, &us[i], 0) != NULL)
			found++;
	}
	for (b = 0; b < BATCHES; b++) {
		double t0 = now_ns();

		for (i = 0; i < BATCH; i++)
			if (policy_route_for(cf, &us[i % TARGETS], 0) ==
			    (const struct route *)targets)
				return 1;
		t[b] = (now_ns() - t0) / BATCH;
	}
	qsort(t, BATCHES, sizeof(t[0]), cmp);
	printf("route selection, %d allowlist hosts (half wildcards), %zu of "
	       "%d targets matching: %.1f ns/lookup (median of %d batches; "
	       "min %.1f, max %.1f)\n",
	    ROUTES * PER, found, TARGETS, t[BATCHES / 2], BATCHES, t[0],
	    t[BATCHES - 1]);
	config_unref(cf);
	return 0;
}
