/*
 * The gateway's source address -> sandbox lookup (issue 12 "Benchmarks":
 * the identity lookup must be O(1)): nanoseconds per lookup of a
 * registered address (IPv4 and IPv6) and of an unknown one, with 1, 64
 * and 4096 sandboxes of two addresses each. Medians of 9 runs of 1e6
 * lookups. Not a test: nothing here can fail.
 *
 * Not part of the build. From the repository root, with the libraries
 * built into build/plain (RelWithDebInfo, -O2):
 *   cc -std=c11 -O2 -D_GNU_SOURCE -I. -Ibuild/plain/include/sluice_config \
 *       tests/bench/sandboxes_bench.c build/plain/proxy/libsluice_config.a \
 *       build/plain/certs/libsluice_certs.a build/plain/proxy/libsluice_util.a
 * \ -lcjson -lssl -lcrypto -o /tmp/sandboxes_bench && /tmp/sandboxes_bench
 *
 * On the 2-core test machine (shared): 1 sandbox 16/17/15 ns (hit v4,
 * hit v6, miss), 64: 24/32/20 ns, 4096: 23/32/51 ns: flat for hits, a
 * miss at 4096 pays for probing a table twice the size of the cache;
 * either is noise next to a request's microseconds.
 */
#include <arpa/inet.h>
#include <netinet/in.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proxy/config/config.h"

#define LOOKUPS 1000000
#define RUNS    9

static double
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int
cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Median ns per lookup of the n addresses in ss, round-robin. */
static double
bench(const struct sbx_registry *r, const struct sockaddr_storage *ss, size_t n)
{
	double t[RUNS], t0;
	volatile uintptr_t sink = 0;
	size_t run, i;

	for (run = 0; run < RUNS; run++) {
		t0 = now_ns();
		for (i = 0; i < LOOKUPS; i++)
			sink += (uintptr_t)sbx_registry_lookup(r,
			    (const struct sockaddr *)&ss[i % n]);
		t[run] = (now_ns() - t0) / LOOKUPS;
	}
	(void)sink;
	qsort(t, RUNS, sizeof(t[0]), cmp_d);
	return t[RUNS / 2];
}

int
main(void)
{
	static const size_t sizes[] = { 1, 64, 4096 };
	static struct sockaddr_storage hit4[4096], hit6[4096], miss[4096];
	char *ifaces[] = { (char *)"sbx-*" };
	struct config cf;
	size_t s, i;

	memset(&cf, 0, sizeof(cf));
	cf.cf_np.np_mode = NETPOLICY_GATEWAY;
	cf.cf_np.np_ifaces = ifaces;
	cf.cf_np.np_nifaces = 1;
	printf("sandboxes  hit4_ns  hit6_ns  miss_ns\n");
	for (s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		struct sbx_registry *r = sbx_registry_new();
		size_t n = sizes[s];

		for (i = 0; i < n; i++) {
			char id[32], ifc[16], a4[32], a6[48], why[256];
			const char *addrs[2] = { a4, a6 };
			struct sandbox_conf sc;
			struct sockaddr_in *s4 = (struct sockaddr_in *)&hit4[i];
			struct sockaddr_in6 *s6 =
			    (struct sockaddr_in6 *)&hit6[i];
			struct sockaddr_in *m4 = (struct sockaddr_in *)&miss[i];

			snprintf(id, sizeof(id), "s%zu", i);
			snprintf(ifc, sizeof(ifc), "sbx-%zu", i);
			snprintf(a4, sizeof(a4), "198.18.%zu.%zu", i / 250,
			    2 + i % 250);
			snprintf(a6, sizeof(a6), "2001:2:1::%zx", i + 1);
			if (sandbox_conf_make(&cf, id, ifc, addrs, 2, &sc, why,
				sizeof(why)) == -1 ||
			    sbx_registry_add(r, &sc, 0, why, sizeof(why)) ==
				-1) {
				fprintf(stderr, "%s\n", why);
				return 1;
			}
			s4->sin_family = AF_INET;
			inet_pton(AF_INET, a4, &s4->sin_addr);
			s6->sin6_family = AF_INET6;
			inet_pton(AF_INET6, a6, &s6->sin6_addr);
			m4->sin_family = AF_INET;
			snprintf(a4, sizeof(a4), "198.19.%zu.%zu", i / 250,
			    2 + i % 250);
			inet_pton(AF_INET, a4, &m4->sin_addr);
		}
		printf("%9zu  %7.1f  %7.1f  %7.1f\n", n, bench(r, hit4, n),
		    bench(r, hit6, n), bench(r, miss, n));
		sbx_registry_free(r);
	}
	return 0;
}
