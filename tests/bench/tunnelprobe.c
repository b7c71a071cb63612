/*
 * tunnelprobe: latency probes for the interception campaign of
 * tests/bench/intercept.sh (on demand, not in the suite). One connection
 * at a time, blocking sockets, every step timed with CLOCK_MONOTONIC.
 *
 * -m first: the cost of a leaf the proxy has not minted yet. N pairs of
 *   connections, a fresh name then the cached one, alternating so that a
 *   drift of the (shared) machine hits both alike. Each connection:
 *   TCP connect to PROXY -> "CONNECT NAME:PORT" (with
 *   "Proxy-Authorization: $BN_PROXY_AUTH" when set) -> 200 -> TLS
 *   handshake (SNI NAME, ALPN http/1.1, the certificate verified against
 *   CAFILE and NAME) -> "GET PATH" with "Connection: close" -> the whole
 *   response -> close. Fresh names are PATTERN with %u = 1..N, each used
 *   once (the proxy must not have seen them: start it afresh); the cached
 *   name is HOST of -t, used W times untimed first (-w, default 3).
 *   Figures per kind (fresh, cached): "connect" (socket to the CONNECT's
 *   200), "handshake" (ClientHello to the end of the handshake), "setup"
 *   (their sum: what a client waits for before it can send), "get" (the
 *   tunnel's first request: written to its response read).
 *
 * -m sse: time to the first server-sent event. N requests "GET PATH"
 *   (Accept: text/event-stream), on one kept-alive connection, or with -R
 *   on a fresh connection each (its setup not timed): through a CONNECT
 *   tunnel with TLS (-x PROXY -C CAFILE), TLS straight to HOST:PORT
 *   (-C CAFILE, no -x: the upstream itself), or plain HTTP to HOST:PORT
 *   (neither: a reverse listener; -H adds its token header). Figures:
 *   "first" (request written to the first "data:" line of the body
 *   received), "total" (to the end of the response).
 *
 * -m rate: new connections per second. CONC threads for SECONDS, each
 *   opening connection after connection to HOST:PORT (through -x, with TLS
 *   when -C) and on each sending one "GET PATH" with "Connection: close",
 *   reading the response, then waiting for the server's close (so the
 *   client holds no TIME_WAIT) and closing. A close without close_notify
 *   after a complete response is not an error. Figures: connections
 *   completed within SECONDS per second, "conn" (socket to the server's
 *   close), the tool's own CPU.
 *
 * Prints one JSON line: per figure the median and p90 in microseconds,
 * the samples and the errors (a failed sample is not timed).
 *
 * usage: tunnelprobe -m first -x PROXYIP:PORT -t HOST:PORT -F PATTERN
 *            -C CAFILE [-n N] [-w W] [-P PATH]
 *        tunnelprobe -m sse [-x PROXYIP:PORT] [-C CAFILE] -t HOST:PORT
 *            [-n N] [-P PATH] [-H "Name: value"] [-R]
 *        tunnelprobe -m rate [-x PROXYIP:PORT] [-C CAFILE] -t HOST:PORT
 *            [-c CONC] [-d SECONDS] [-P PATH]
 * HOST of -t is an IPv4 literal or a name; without -x it must be the
 * IPv4 literal to connect to.
 */
#define _GNU_SOURCE
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

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

#define MAX_N     100000
#define MAX_CONC  256
#define IO_WAIT_S 10 /* a read or write that waits longer fails */

static const char *proxy, *cafile, *pattern, *extra_hdr;
static const char *path = "/v1/probe";
static char host[256];
static int port, reconnect, warm = 3;
static uint64_t deadline; /* rate: no connection starts after it */
static int quiet_tls;     /* rate: TLS errors are counted, not printed */
static SSL_CTX *ctx;

struct conn {
	int fd;
	SSL *ssl;
	char buf[65536];
	size_t have;
};

/* One series of samples, microseconds. */
struct series {
	const char *name;
	uint32_t *v;
	size_t n;
};

/* How a response body ends, and where its decoder is. */
enum body_state { B_SIZE, B_DATA, B_CRLF, B_TRAILER, B_DONE };
struct body {
	int chunked, to_eof;
	uint64_t left;
	enum body_state st;
	int saw_data; /* a "data:" line was seen */
	char tail[8]; /* the last data bytes, for a "data:" split in two */
	size_t ntail;
};

static uint64_t
now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void
add(struct series *s, uint64_t us)
{
	if (s->v == NULL && (s->v = calloc(MAX_N, sizeof(*s->v))) == NULL) {
		perror("calloc");
		exit(1);
	}
	if (s->n < MAX_N)
		s->v[s->n++] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

static int
cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* ,"NAME_p50_us":..,"NAME_p90_us":.. */
static void
print_series(struct series *s)
{
	uint32_t p50 = 0, p90 = 0;

	if (s->n > 0) {
		qsort(s->v, s->n, sizeof(*s->v), cmp_u32);
		p50 = s->v[s->n / 2];
		p90 = s->v[(s->n * 9) / 10];
	}
	printf(",\"%s_p50_us\":%u,\"%s_p90_us\":%u", s->name, p50, s->name,
	    p90);
}

static int
is_ipv4(const char *h)
{
	struct in_addr a;

	return inet_pton(AF_INET, h, &a) == 1;
}

static int
rd(struct conn *c)
{
	int r;

	if (c->have >= sizeof(c->buf) - 1)
		return -1;
	if (c->ssl != NULL)
		r = SSL_read(c->ssl, c->buf + c->have,
		    (int)(sizeof(c->buf) - 1 - c->have));
	else
		r = (int)read(c->fd, c->buf + c->have,
		    sizeof(c->buf) - 1 - c->have);
	if (r <= 0)
		return -1;
	c->have += (size_t)r;
	return 0;
}

static int
wr(struct conn *c, const char *p, size_t n)
{
	ssize_t w;

	if (c->ssl != NULL)
		return SSL_write(c->ssl, p, (int)n) == (int)n ? 0 : -1;
	while (n > 0) {
		if ((w = write(c->fd, p, n)) <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static void
consume(struct conn *c, size_t n)
{
	memmove(c->buf, c->buf + n, c->have - n);
	c->have -= n;
}

/* Read a response head; its status, with b set for the body, or -1. */
static int
read_head(struct conn *c, struct body *b)
{
	char *e, *v;
	size_t hlen;
	int status;

	for (;;) {
		c->buf[c->have] = '\0';
		if ((e = strstr(c->buf, "\r\n\r\n")) != NULL)
			break;
		if (rd(c) == -1)
			return -1;
	}
	hlen = (size_t)(e - c->buf) + 4;
	e[2] = '\0';
	if (sscanf(c->buf, "HTTP/1.%*d %d", &status) != 1)
		return -1;
	if (b != NULL) {
		memset(b, 0, sizeof(*b));
		if (strcasestr(c->buf, "\r\ntransfer-encoding: chunked") !=
		    NULL)
			b->chunked = 1;
		else if ((v = strcasestr(c->buf, "\r\ncontent-length:")) !=
		    NULL)
			b->left = strtoull(v + 17, NULL, 10);
		else
			b->to_eof = 1;
		b->st = b->chunked ? B_SIZE : B_DATA;
		if (!b->chunked && !b->to_eof && b->left == 0)
			b->st = B_DONE;
	}
	consume(c, hlen);
	return status;
}

/* Body bytes arrived: look for the first "data:" among them. */
static void
body_data(struct body *b, const char *p, size_t n)
{
	char w[8 + 64];
	size_t k;

	if (b->saw_data || n == 0)
		return;
	if (memmem(p, n, "data:", 5) != NULL) {
		b->saw_data = 1;
		return;
	}
	/* A "data:" across two pieces: the tail and this piece's start. */
	k = n < 64 ? n : 64;
	memcpy(w, b->tail, b->ntail);
	memcpy(w + b->ntail, p, k);
	if (memmem(w, b->ntail + k, "data:", 5) != NULL) {
		b->saw_data = 1;
		return;
	}
	k = n < 4 ? n : 4;
	memcpy(b->tail, p + n - k, k);
	b->ntail = k;
}

/* Decode what is buffered: 1 when the body has ended, 0 for more, -1. */
static int
body_feed(struct conn *c, struct body *b)
{
	char *e, *end;
	size_t k;
	uint64_t sz;

	for (;;) {
		switch (b->st) {
		case B_DONE:
			return 1;
		case B_DATA:
			if (c->have == 0)
				return 0;
			k = c->have;
			if (!b->to_eof && k > b->left)
				k = (size_t)b->left;
			body_data(b, c->buf, k);
			consume(c, k);
			if (!b->to_eof && (b->left -= k) == 0)
				b->st = b->chunked ? B_CRLF : B_DONE;
			continue;
		case B_CRLF:
			if (c->have < 2)
				return 0;
			if (memcmp(c->buf, "\r\n", 2) != 0)
				return -1;
			consume(c, 2);
			b->st = B_SIZE;
			continue;
		case B_SIZE:
		case B_TRAILER:
			c->buf[c->have] = '\0';
			if ((e = strstr(c->buf, "\r\n")) == NULL)
				return c->have > 1024 ? -1 : 0;
			if (b->st == B_TRAILER) {
				if (e == c->buf)
					b->st = B_DONE;
				consume(c, (size_t)(e - c->buf) + 2);
				continue;
			}
			sz = strtoull(c->buf, &end, 16);
			if (end == c->buf)
				return -1;
			consume(c, (size_t)(e - c->buf) + 2);
			b->left = sz;
			b->st = sz == 0 ? B_TRAILER : B_DATA;
			continue;
		}
	}
}

static void
conn_close(struct conn *c)
{
	if (c->ssl != NULL) {
		SSL_shutdown(c->ssl);
		SSL_free(c->ssl);
	}
	if (c->fd >= 0)
		close(c->fd);
	c->ssl = NULL;
	c->fd = -1;
	c->have = 0;
}

/*
 * Open a connection for NAME (a CONNECT through the proxy when there is
 * one, then TLS when there is a CA): 0, or -1. *t_connect and
 * *t_handshake get the two stages' durations.
 */
static int
conn_open(struct conn *c, const char *name, uint64_t *t_connect,
    uint64_t *t_handshake)
{
	struct sockaddr_in sa;
	char req[2048], ph[64];
	const char *auth = getenv("BN_PROXY_AUTH"), *colon;
	struct timeval io_wait = { IO_WAIT_S, 0 };
	uint64_t t0, t1;
	int one = 1, n;

	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	c->fd = -1;
	c->ssl = NULL;
	c->have = 0;
	if (proxy != NULL) {
		colon = strrchr(proxy, ':');
		snprintf(ph, sizeof(ph), "%.*s", (int)(colon - proxy), proxy);
		sa.sin_port = htons((uint16_t)atoi(colon + 1));
	} else {
		snprintf(ph, sizeof(ph), "%s", name);
		sa.sin_port = htons((uint16_t)port);
	}
	if (inet_pton(AF_INET, ph, &sa.sin_addr) != 1)
		return -1;
	t0 = now_us();
	if ((c->fd = socket(AF_INET, SOCK_STREAM, 0)) == -1)
		return -1;
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &io_wait, sizeof(io_wait));
	setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &io_wait, sizeof(io_wait));
	if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) == -1)
		return -1;
	if (proxy != NULL) {
		n = snprintf(req, sizeof(req),
		    "CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n%s%s%s\r\n", name,
		    port, name, port,
		    auth != NULL && *auth ? "Proxy-Authorization: " : "",
		    auth != NULL && *auth ? auth : "",
		    auth != NULL && *auth ? "\r\n" : "");
		if (wr(c, req, (size_t)n) == -1 || read_head(c, NULL) != 200 ||
		    c->have != 0)
			return -1;
	}
	t1 = now_us();
	*t_connect = t1 - t0;
	*t_handshake = 0;
	if (cafile == NULL)
		return 0;
	if ((c->ssl = SSL_new(ctx)) == NULL)
		return -1;
	if (is_ipv4(name))
		X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), name);
	else {
		SSL_set_tlsext_host_name(c->ssl, name);
		SSL_set1_host(c->ssl, name);
	}
	SSL_set_alpn_protos(c->ssl, (const unsigned char *)"\x08http/1.1", 9);
	SSL_set_fd(c->ssl, c->fd);
	if (SSL_connect(c->ssl) != 1) {
		if (!quiet_tls)
			ERR_print_errors_fp(stderr);
		ERR_clear_error();
		return -1;
	}
	*t_handshake = now_us() - t1;
	return 0;
}

/* Write a GET and read its whole response; 0 for a 2xx, else -1. */
static int
get(struct conn *c, const char *name, int close_it, uint64_t *t_first)
{
	char req[4096];
	struct body b;
	uint64_t t0;
	int n, st, r;

	n = snprintf(req, sizeof(req),
	    "GET %s HTTP/1.1\r\nHost: %s:%d\r\nAccept: %s\r\n%s%s%s\r\n", path,
	    name, port, t_first != NULL ? "text/event-stream" : "*/*",
	    extra_hdr != NULL ? extra_hdr : "", extra_hdr != NULL ? "\r\n" : "",
	    close_it ? "Connection: close\r\n" : "");
	if (n < 0 || (size_t)n >= sizeof(req))
		return -1;
	t0 = now_us();
	if (wr(c, req, (size_t)n) == -1)
		return -1;
	if ((st = read_head(c, &b)) < 200 || st > 299)
		return -1;
	for (;;) {
		if ((r = body_feed(c, &b)) == -1)
			return -1;
		if (t_first != NULL && b.saw_data && *t_first == 0)
			*t_first = now_us() - t0;
		if (r == 1)
			break;
		if (rd(c) == -1) {
			if (b.to_eof)
				break;
			return -1;
		}
	}
	if (t_first != NULL && *t_first == 0)
		return -1; /* no event at all */
	return 0;
}

struct worker {
	pthread_t th;
	struct conn c;
	struct series lat;
	uint64_t done, errors;
};

static void *
rate_work(void *arg)
{
	struct worker *w = arg;
	struct conn *c = &w->c;
	uint64_t tc, th, t0, t1;

	while ((t0 = now_us()) < deadline) {
		if (conn_open(c, host, &tc, &th) == -1 ||
		    get(c, host, 1, NULL) == -1) {
			w->errors++;
			ERR_clear_error();
			conn_close(c);
			continue;
		}
		/* The server closes (Connection: close); wait for it. */
		c->have = 0;
		while (rd(c) == 0)
			c->have = 0;
		ERR_clear_error();
		t1 = now_us();
		conn_close(c);
		if (t1 <= deadline) {
			w->done++;
			add(&w->lat, t1 - t0);
		}
	}
	return NULL;
}

static int
rate_main(int conc, double secs)
{
	struct worker *ws;
	struct series all = { "conn", NULL, 0 };
	struct rusage ru;
	uint64_t t0, done = 0, errors = 0;
	double cpu;
	int i;
	size_t j;

	if ((ws = calloc((size_t)conc, sizeof(*ws))) == NULL)
		return 1;
	quiet_tls = 1;
	t0 = now_us();
	deadline = t0 + (uint64_t)(secs * 1e6);
	for (i = 0; i < conc; i++) {
		ws[i].c.fd = -1;
		ws[i].lat.name = "conn";
		if (pthread_create(&ws[i].th, NULL, rate_work, &ws[i]) != 0)
			return 1;
	}
	for (i = 0; i < conc; i++) {
		pthread_join(ws[i].th, NULL);
		done += ws[i].done;
		errors += ws[i].errors;
		for (j = 0; j < ws[i].lat.n; j++)
			add(&all, ws[i].lat.v[j]);
	}
	getrusage(RUSAGE_SELF, &ru);
	cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	    (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
	printf("{\"tool\":\"tunnelprobe\",\"mode\":\"rate\",\"concurrency\":%d,"
	       "\"seconds\":%.2f,\"completed\":%llu,\"conn_per_s\":%.1f",
	    conc, secs, (unsigned long long)done, (double)done / secs);
	print_series(&all);
	printf(",\"errors\":%llu,\"tool_cpu_pct\":%.1f}\n",
	    (unsigned long long)errors, 100.0 * cpu / secs);
	return 0;
}

static void
usage(void)
{
	fprintf(stderr, "see the header of tunnelprobe.c\n");
	exit(2);
}

int
main(int argc, char **argv)
{
	struct series fs = { "fresh_connect", NULL, 0 },
		      fh = { "fresh_handshake", NULL, 0 },
		      fsu = { "fresh_setup", NULL, 0 },
		      fg = { "fresh_get", NULL, 0 },
		      cs = { "cached_connect", NULL, 0 },
		      ch = { "cached_handshake", NULL, 0 },
		      csu = { "cached_setup", NULL, 0 },
		      cg = { "cached_get", NULL, 0 }, sf = { "first", NULL, 0 },
		      st = { "total", NULL, 0 };
	struct conn *c;
	const char *target = NULL, *mode = "first", *colon;
	char name[512];
	uint64_t errors = 0, tc, th, t0, tf;
	int opt, n = 100, i, k, first, conc = 16;
	double secs = 10;

	while ((opt = getopt(argc, argv, "m:x:t:F:C:n:w:P:H:Rc:d:")) != -1) {
		switch (opt) {
		case 'm':
			mode = optarg;
			break;
		case 'x':
			proxy = optarg;
			break;
		case 't':
			target = optarg;
			break;
		case 'F':
			pattern = optarg;
			break;
		case 'C':
			cafile = optarg;
			break;
		case 'n':
			n = atoi(optarg);
			break;
		case 'w':
			warm = atoi(optarg);
			break;
		case 'P':
			path = optarg;
			break;
		case 'H':
			extra_hdr = optarg;
			break;
		case 'R':
			reconnect = 1;
			break;
		case 'c':
			conc = atoi(optarg);
			break;
		case 'd':
			secs = atof(optarg);
			break;
		default:
			usage();
		}
	}
	first = strcmp(mode, "first") == 0;
	if (target == NULL || (colon = strrchr(target, ':')) == NULL ||
	    (size_t)(colon - target) >= sizeof(host) || n < 1 || n > MAX_N ||
	    warm < 0 || conc < 1 || conc > MAX_CONC || secs <= 0 ||
	    (!first && strcmp(mode, "sse") != 0 && strcmp(mode, "rate") != 0) ||
	    (first &&
		(proxy == NULL || cafile == NULL || pattern == NULL ||
		    strstr(pattern, "%u") == NULL ||
		    strchr(strstr(pattern, "%u") + 2, '%') != NULL)) ||
	    (proxy != NULL && strrchr(proxy, ':') == NULL))
		usage();
	snprintf(host, sizeof(host), "%.*s", (int)(colon - target), target);
	port = atoi(colon + 1);
	if (proxy == NULL && !is_ipv4(host))
		usage();
	signal(SIGPIPE, SIG_IGN);
	if (cafile != NULL) {
		ctx = SSL_CTX_new(TLS_client_method());
		SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
		SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
		if (SSL_CTX_load_verify_locations(ctx, cafile, NULL) != 1) {
			fprintf(stderr, "%s: cannot load\n", cafile);
			return 2;
		}
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	}
	if ((c = calloc(1, sizeof(*c))) == NULL)
		return 1;
	c->fd = -1;

	if (strcmp(mode, "rate") == 0)
		return rate_main(conc, secs);
	if (first) {
		for (i = 0; i < warm; i++) {
			if (conn_open(c, host, &tc, &th) == -1 ||
			    get(c, host, 1, NULL) == -1)
				errors++;
			conn_close(c);
		}
		for (i = 1; i <= n; i++) {
			for (k = 0; k < 2; k++) {
				if (k == 0)
					snprintf(name, sizeof(name), pattern,
					    (unsigned)i);
				else
					snprintf(name, sizeof(name), "%s",
					    host);
				if (conn_open(c, name, &tc, &th) == -1) {
					errors++;
					conn_close(c);
					continue;
				}
				t0 = now_us();
				if (get(c, name, 1, NULL) == -1) {
					errors++;
					conn_close(c);
					continue;
				}
				add(k == 0 ? &fg : &cg, now_us() - t0);
				add(k == 0 ? &fs : &cs, tc);
				add(k == 0 ? &fh : &ch, th);
				add(k == 0 ? &fsu : &csu, tc + th);
				conn_close(c);
			}
		}
		printf("{\"tool\":\"tunnelprobe\",\"mode\":\"first\","
		       "\"pairs\":%d,\"fresh\":%zu,\"cached\":%zu",
		    n, fsu.n, csu.n);
		print_series(&fs);
		print_series(&fh);
		print_series(&fsu);
		print_series(&fg);
		print_series(&cs);
		print_series(&ch);
		print_series(&csu);
		print_series(&cg);
		printf(",\"errors\":%llu}\n", (unsigned long long)errors);
		return 0;
	}

	for (i = 0; i < n; i++) {
		if (c->fd < 0 && conn_open(c, host, &tc, &th) == -1) {
			errors++;
			conn_close(c);
			continue;
		}
		tf = 0;
		t0 = now_us();
		if (get(c, host, 0, &tf) == -1) {
			errors++;
			conn_close(c);
			continue;
		}
		add(&st, now_us() - t0);
		add(&sf, tf);
		if (reconnect)
			conn_close(c);
	}
	conn_close(c);
	printf("{\"tool\":\"tunnelprobe\",\"mode\":\"sse\",\"requests\":%d,"
	       "\"fresh_conns\":%s,\"samples\":%zu",
	    n, reconnect ? "true" : "false", sf.n);
	print_series(&sf);
	print_series(&st);
	printf(",\"errors\":%llu}\n", (unsigned long long)errors);
	return 0;
}
