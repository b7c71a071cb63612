/*
 * tunnelpost: small POSTs over kept-alive connections, for the interception
 * campaign of tests/bench/intercept.sh (on demand, not in the suite).
 *
 * Each of CONNS connections is set up once, then carries POST after POST
 * (keep-alive) for DURATION seconds, one request in flight per connection:
 *   -m tunnel: TCP to the proxy -> CONNECT HOST:PORT (with
 *              "Proxy-Authorization: $BN_PROXY_AUTH" when set) -> 200 ->
 *              TLS, the certificate verified against CAFILE (the proxy's
 *              CA when it intercepts) and the target's name or address;
 *   -m plain:  TCP to the target itself, plain HTTP (a reverse listener),
 *              with "-H NAME: VALUE" added to each request (its token).
 * THREADS threads share the connections; each thread writes one request
 * on each of its connections, then reads each response (a closed loop).
 * Prints one JSON line: requests, requests/s, per-request latency p50/p99
 * (from the write of a round to each response), errors.
 *
 * With -I SECONDS (idle mode): each connection carries one POST, then
 * "idle N" (N connections open) is printed and flushed, all are held open
 * and idle for SECONDS (the caller measures the proxy's memory meanwhile),
 * and the JSON line follows.
 *
 * usage: tunnelpost -t HOST:PORT [-x PROXYIP:PORT] [-m tunnel|plain]
 *        [-c CONNS] [-j THREADS] [-d SECONDS] [-P PATH] [-b BODY_BYTES]
 *        [-C CAFILE] [-n SNI] [-H "Name: value"] [-I SECONDS]
 */
#define _GNU_SOURCE
#include <sys/socket.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#define MAX_CONNS 20000
#define MAX_LAT   (1 << 22)

static const char *target, *proxy, *path = "/v1/messages", *cafile, *sni;
static const char *extra_hdr;
static int tunnel = 1, nconns = 64, nthreads = 2, body_bytes = 64;
static double duration = 10, idle_hold;
static SSL_CTX *ctx;
static char req[8192];
static size_t reqlen;
static volatile int stop_flag;

struct conn {
	int fd;
	SSL *ssl;
	char buf[65536];
	size_t have;
};

struct worker {
	pthread_t th;
	int first, n;
	uint64_t done, errors;
	uint32_t *lat; /* microseconds */
	size_t nlat;
};

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int
split(const char *hp, struct sockaddr_in *sa)
{
	char host[64];
	const char *c = strrchr(hp, ':');

	if (c == NULL || (size_t)(c - hp) >= sizeof(host))
		return -1;
	memcpy(host, hp, (size_t)(c - hp));
	host[c - hp] = '\0';
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = htons((uint16_t)atoi(c + 1));
	return inet_pton(AF_INET, host, &sa->sin_addr) == 1 ? 0 : -1;
}

static int
raw_read(struct conn *c, char *p, size_t n)
{
	if (c->ssl != NULL) {
		int r = SSL_read(c->ssl, p, (int)n);

		return r > 0 ? r : -1;
	}
	ssize_t r = read(c->fd, p, n);

	return r > 0 ? (int)r : -1;
}

static int
raw_write(struct conn *c, const char *p, size_t n)
{
	if (c->ssl != NULL)
		return SSL_write(c->ssl, p, (int)n) == (int)n ? 0 : -1;
	while (n > 0) {
		ssize_t w = write(c->fd, p, n);

		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Read one response (Content-Length or chunked); its status or -1. */
static int
read_response(struct conn *c, int head_only)
{
	char *e, *cl;
	size_t hlen, need;
	int status, r;

	for (;;) {
		c->buf[c->have] = '\0';
		if ((e = strstr(c->buf, "\r\n\r\n")) != NULL)
			break;
		if (c->have >= sizeof(c->buf) - 1)
			return -1;
		if ((r = raw_read(c, c->buf + c->have,
			 sizeof(c->buf) - 1 - c->have)) < 0)
			return -1;
		c->have += (size_t)r;
	}
	hlen = (size_t)(e - c->buf) + 4;
	if (sscanf(c->buf, "HTTP/1.%*d %d", &status) != 1)
		return -1;
	if (head_only) {
		memmove(c->buf, c->buf + hlen, c->have - hlen);
		c->have -= hlen;
		return status;
	}
	*e = '\0';
	if ((cl = strcasestr(c->buf, "\r\ncontent-length:")) != NULL) {
		need = hlen + strtoul(cl + 17, NULL, 10);
		while (c->have < need) {
			if ((r = raw_read(c, c->buf + c->have,
				 sizeof(c->buf) - 1 - c->have)) < 0)
				return -1;
			c->have += (size_t)r;
		}
		memmove(c->buf, c->buf + need, c->have - need);
		c->have -= need;
		return status;
	}
	if (strcasestr(c->buf, "\r\ntransfer-encoding: chunked") == NULL)
		return -1;
	/* Chunked: read until the last chunk and the empty trailer line. */
	memmove(c->buf, c->buf + hlen, c->have - hlen);
	c->have -= hlen;
	for (;;) {
		c->buf[c->have] = '\0';
		if (strncmp(c->buf, "0\r\n\r\n", 5) == 0)
			need = 5;
		else if ((e = strstr(c->buf, "\r\n0\r\n\r\n")) != NULL)
			need = (size_t)(e - c->buf) + 7;
		else {
			if (c->have >= sizeof(c->buf) - 1)
				return -1;
			if ((r = raw_read(c, c->buf + c->have,
				 sizeof(c->buf) - 1 - c->have)) < 0)
				return -1;
			c->have += (size_t)r;
			continue;
		}
		memmove(c->buf, c->buf + need, c->have - need);
		c->have -= need;
		return status;
	}
}

static int
conn_open(struct conn *c)
{
	struct sockaddr_in sa;
	char cr[2048], host[256];
	const char *auth = getenv("BN_PROXY_AUTH");
	int one = 1, n;

	memset(c, 0, sizeof(*c));
	if (split(tunnel && proxy != NULL ? proxy : target, &sa) == -1)
		return -1;
	if ((c->fd = socket(AF_INET, SOCK_STREAM, 0)) == -1)
		return -1;
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) == -1)
		return -1;
	if (!tunnel)
		return 0;
	n = snprintf(cr, sizeof(cr),
	    "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s%s%s\r\n", target, target,
	    auth != NULL && *auth ? "Proxy-Authorization: " : "",
	    auth != NULL && *auth ? auth : "",
	    auth != NULL && *auth ? "\r\n" : "");
	if (raw_write(c, cr, (size_t)n) == -1 || read_response(c, 1) != 200)
		return -1;
	if ((c->ssl = SSL_new(ctx)) == NULL)
		return -1;
	snprintf(host, sizeof(host), "%.*s",
	    (int)(strrchr(target, ':') - target), target);
	if (sni != NULL)
		SSL_set_tlsext_host_name(c->ssl, sni);
	if (sni != NULL)
		SSL_set1_host(c->ssl, sni);
	else
		X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), host);
	SSL_set_fd(c->ssl, c->fd);
	SSL_set_alpn_protos(c->ssl, (const unsigned char *)"\x08http/1.1", 9);
	if (SSL_connect(c->ssl) != 1) {
		ERR_print_errors_fp(stderr);
		return -1;
	}
	return 0;
}

static void
conn_close(struct conn *c)
{
	if (c->ssl != NULL) {
		SSL_shutdown(c->ssl);
		SSL_free(c->ssl);
	}
	if (c->fd > 0)
		close(c->fd);
	c->ssl = NULL;
	c->fd = -1;
}

static struct conn *conns;

static void *
work(void *arg)
{
	struct worker *w = arg;
	double t0;
	int i;

	while (!stop_flag) {
		t0 = now_s();
		for (i = 0; i < w->n; i++) {
			struct conn *c = &conns[w->first + i];

			if (c->fd < 0)
				continue;
			if (raw_write(c, req, reqlen) == -1) {
				w->errors++;
				conn_close(c);
			}
		}
		for (i = 0; i < w->n; i++) {
			struct conn *c = &conns[w->first + i];
			int st;

			if (c->fd < 0)
				continue;
			st = read_response(c, 0);
			if (st < 200 || st > 299) {
				w->errors++;
				conn_close(c);
				continue;
			}
			w->done++;
			if (w->nlat < MAX_LAT)
				w->lat[w->nlat++] =
				    (uint32_t)((now_s() - t0) * 1e6);
		}
	}
	return NULL;
}

static int
cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

int
main(int argc, char **argv)
{
	struct worker *ws;
	uint64_t done = 0, errors = 0, open_errors = 0;
	uint32_t *all;
	size_t nall = 0;
	double t0, el;
	char *body;
	int opt, i, per;

	while ((opt = getopt(argc, argv, "t:x:m:c:j:d:P:b:C:n:H:I:")) != -1) {
		switch (opt) {
		case 't':
			target = optarg;
			break;
		case 'x':
			proxy = optarg;
			break;
		case 'm':
			tunnel = strcmp(optarg, "plain") != 0;
			break;
		case 'c':
			nconns = atoi(optarg);
			break;
		case 'j':
			nthreads = atoi(optarg);
			break;
		case 'd':
			duration = atof(optarg);
			break;
		case 'P':
			path = optarg;
			break;
		case 'b':
			body_bytes = atoi(optarg);
			break;
		case 'C':
			cafile = optarg;
			break;
		case 'n':
			sni = optarg;
			break;
		case 'H':
			extra_hdr = optarg;
			break;
		case 'I':
			idle_hold = atof(optarg);
			break;
		default:
			fprintf(stderr, "see the header of tunnelpost.c\n");
			return 2;
		}
	}
	if (target == NULL || nconns < 1 || nconns > MAX_CONNS ||
	    nthreads < 1 || nthreads > nconns || body_bytes < 0 ||
	    body_bytes > 4096 ||
	    (tunnel && (proxy == NULL || cafile == NULL))) {
		fprintf(stderr, "see the header of tunnelpost.c\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	ctx = SSL_CTX_new(TLS_client_method());
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	if (cafile != NULL &&
	    SSL_CTX_load_verify_locations(ctx, cafile, NULL) != 1) {
		fprintf(stderr, "%s: cannot load\n", cafile);
		return 2;
	}
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	body = malloc((size_t)body_bytes + 1);
	memset(body, 'a', (size_t)body_bytes);
	body[body_bytes] = '\0';
	reqlen = (size_t)snprintf(req, sizeof(req),
	    "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
	    "%s%sContent-Length: %d\r\n\r\n%s",
	    path, target, extra_hdr != NULL ? extra_hdr : "",
	    extra_hdr != NULL ? "\r\n" : "", body_bytes, body);
	conns = calloc((size_t)nconns, sizeof(*conns));
	for (i = 0; i < nconns; i++)
		if (conn_open(&conns[i]) == -1) {
			open_errors++;
			conn_close(&conns[i]);
		}
	if (idle_hold > 0) {
		for (i = 0; i < nconns; i++) {
			struct conn *c = &conns[i];
			int st;

			if (c->fd < 0)
				continue;
			if (raw_write(c, req, reqlen) == -1 ||
			    (st = read_response(c, 0)) < 200 || st > 299) {
				errors++;
				conn_close(c);
				continue;
			}
			done++;
		}
		printf("idle %llu\n",
		    (unsigned long long)(done > 0 ? done : 0));
		fflush(stdout);
		usleep((useconds_t)(idle_hold * 1e6));
		printf("{\"tool\":\"tunnelpost\",\"mode\":\"idle\","
		       "\"conns\":%d,\"open_errors\":%llu,\"open\":%llu,"
		       "\"errors\":%llu}\n",
		    nconns, (unsigned long long)open_errors,
		    (unsigned long long)done, (unsigned long long)errors);
		return 0;
	}
	ws = calloc((size_t)nthreads, sizeof(*ws));
	per = nconns / nthreads;
	t0 = now_s();
	for (i = 0; i < nthreads; i++) {
		ws[i].first = i * per;
		ws[i].n = i == nthreads - 1 ? nconns - i * per : per;
		ws[i].lat = malloc(sizeof(uint32_t) * MAX_LAT);
		pthread_create(&ws[i].th, NULL, work, &ws[i]);
	}
	usleep((useconds_t)(duration * 1e6));
	stop_flag = 1;
	all = malloc(sizeof(uint32_t) * MAX_LAT * (size_t)nthreads);
	for (i = 0; i < nthreads; i++) {
		pthread_join(ws[i].th, NULL);
		done += ws[i].done;
		errors += ws[i].errors;
		memcpy(all + nall, ws[i].lat, ws[i].nlat * sizeof(uint32_t));
		nall += ws[i].nlat;
	}
	el = now_s() - t0;
	qsort(all, nall, sizeof(uint32_t), cmp_u32);
	printf("{\"tool\":\"tunnelpost\",\"conns\":%d,\"open_errors\":%llu,"
	       "\"requests\":%llu,\"rps\":%.0f,\"lat_p50_us\":%u,"
	       "\"lat_p99_us\":%u,\"errors\":%llu,\"seconds\":%.2f}\n",
	    nconns, (unsigned long long)open_errors, (unsigned long long)done,
	    (double)done / el, nall ? all[nall / 2] : 0,
	    nall ? all[(nall * 99) / 100] : 0, (unsigned long long)errors, el);
	return 0;
}
