/*
 * gwload: the load generator of tests/bench/gateway-fair.sh. One thread,
 * one epoll loop; each group's connections are opened inside that group's
 * network namespace (setns() before socket(): a socket stays in the
 * namespace it was made in), so one process on one core drives many
 * sandboxes alike, whatever their number.
 *
 *   gwload [-d SECONDS] [-w WARMUP_S] -u URL GROUP...
 *   GROUP = NAME,NETNS,PROXY_IP:PORT,CONNS,RATE,TOKENFILE
 *
 * Every connection sends keep-alive "GET URL HTTP/1.1" (absolute form)
 * with "Proxy-Authorization: Bearer <the token in TOKENFILE>" (TOKENFILE
 * "-": none), one request at a time. NETNS is a name under /run/netns or
 * "-" (the current namespace). RATE 0: closed loop, the next request as
 * soon as the answer is in. RATE > 0: requests per second for the whole
 * group, spread evenly over its connections; a connection whose answer
 * comes late sends at once but does not catch up the slots it missed, so
 * a slower proxy shows as a lower achieved rate. A connection the server
 * closes (a 429, "Connection: close", an idle close) is opened again at
 * once. Answers that end within WARMUP_S of the start are not counted;
 * the count then runs for SECONDS. One line per group on stdout:
 *
 *   NAME ok=N s429=N other=N err=N att_rps=X ok_rps=X p50_us=N p99_us=N
 *     [deny=NAME]
 *
 * ok: 2xx; s429: 429 whose Sluice-Deny is rate_limited; other: any other
 * answer (deny: the first such Sluice-Deny seen); err: failed connects,
 * resets, answers cut short; att_rps: answers of any kind per second;
 * p50/p99: latency of the 2xx answers, send to last byte.
 * Build: cc -O2 -Wall -D_GNU_SOURCE -o gwload gwload.c. No secret is
 * printed.
 */
#include <sys/epoll.h>
#include <sys/socket.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define MAXGROUPS 128
#define MAXCONNS  4096
#define RBUF_MAX  (1 << 20)

struct group {
	char name[64];
	int nsfd; /* -1: the current namespace */
	struct sockaddr_in proxy;
	int conns;
	double rate;
	char *req;
	size_t reqlen;
	uint64_t ok, s429, other, err, answers;
	char deny[64];
	uint32_t *lat;
	size_t nlat, caplat;
};

enum cstate { C_DOWN, C_CONNECTING, C_IDLE, C_WRITING, C_READING, C_CLOSING };

struct conn {
	struct group *g;
	int fd;
	enum cstate st;
	size_t woff;
	char *rbuf;
	size_t rlen, rcap;
	int64_t t_req;    /* when the request went (us) */
	int64_t next;     /* the next send slot (paced), or the retry time */
	int64_t interval; /* paced: us between one connection's requests */
};

static struct group groups[MAXGROUPS];
static struct conn conns[MAXCONNS];
static int ngroups, nconns, epfd, curns = -1, homens;
static int64_t t_count, t_end;

static int64_t
now_us(void)
{
	struct timespec ts;

	(void)clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void
die(const char *what)
{
	perror(what);
	exit(1);
}

static double
num(const char *s, double lo, double hi, const char *what)
{
	char *e;
	double v;

	errno = 0;
	v = strtod(s, &e);
	if (e == s || *e != '\0' || errno != 0 || v < lo || v > hi) {
		(void)fprintf(stderr, "gwload: bad %s: %s\n", what, s);
		exit(2);
	}
	return v;
}

static void
enter_ns(int fd)
{
	int want = fd == -1 ? homens : fd;

	if (curns == want)
		return;
	if (setns(want, CLONE_NEWNET) == -1)
		die("setns");
	curns = want;
}

static void
ep(int op, struct conn *c, uint32_t events)
{
	struct epoll_event e = { .events = events, .data.ptr = c };

	if (epoll_ctl(epfd, op, c->fd, &e) == -1)
		die("epoll_ctl");
}

static void
conn_drop(struct conn *c, int64_t retry_at)
{
	if (c->fd != -1) {
		(void)close(c->fd);
		c->fd = -1;
	}
	c->st = C_DOWN;
	c->rlen = 0;
	if (c->g->rate <= 0 || c->next < retry_at)
		c->next = retry_at;
}

static void
conn_open(struct conn *c, int64_t now)
{
	int one = 1;

	enter_ns(c->g->nsfd);
	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->fd == -1)
		die("socket");
	(void)setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(c->fd, (struct sockaddr *)&c->g->proxy,
		sizeof(c->g->proxy)) == -1 &&
	    errno != EINPROGRESS) {
		if (now >= t_count)
			c->g->err++;
		conn_drop(c, now + 10000);
		return;
	}
	c->st = C_CONNECTING;
	ep(EPOLL_CTL_ADD, c, EPOLLOUT);
}

static void
conn_write(struct conn *c, int64_t now)
{
	ssize_t n;

	while (c->woff < c->g->reqlen) {
		n = write(c->fd, c->g->req + c->woff, c->g->reqlen - c->woff);
		if (n == -1 && errno == EAGAIN) {
			if (c->st != C_WRITING)
				ep(EPOLL_CTL_MOD, c, EPOLLOUT);
			c->st = C_WRITING;
			return;
		}
		if (n <= 0) {
			if (now >= t_count)
				c->g->err++;
			conn_drop(c, now);
			return;
		}
		c->woff += (size_t)n;
	}
	if (c->st == C_WRITING)
		ep(EPOLL_CTL_MOD, c, EPOLLIN);
	c->st = C_READING;
}

static void
conn_send(struct conn *c, int64_t now)
{
	c->t_req = now;
	c->woff = 0;
	c->rlen = 0;
	if (c->g->rate > 0) {
		c->next += c->interval;
		if (c->next < now)
			c->next = now;
	}
	conn_write(c, now);
}

/* Idle and allowed to send now? */
static void
conn_maybe_send(struct conn *c, int64_t now)
{
	if (now >= t_end)
		return;
	if (c->g->rate > 0 && now < c->next)
		return;
	conn_send(c, now);
}

static const char *
find_hdr(const char *h, size_t hlen, const char *name, size_t *vlen)
{
	size_t nl = strlen(name);
	const char *p = h, *end = h + hlen, *eol, *v;

	while (p < end) {
		eol = memmem(p, (size_t)(end - p), "\r\n", 2);
		if (eol == NULL)
			eol = end;
		if ((size_t)(eol - p) > nl && p[nl] == ':' &&
		    strncasecmp(p, name, nl) == 0) {
			v = p + nl + 1;
			while (v < eol && (*v == ' ' || *v == '\t'))
				v++;
			*vlen = (size_t)(eol - v);
			return v;
		}
		p = eol + 2;
	}
	return NULL;
}

/* Length of a complete chunked body at b, or 0 while incomplete. */
static size_t
chunked_len(const char *b, size_t n)
{
	size_t off = 0, sz;
	const char *eol;
	char *e;

	for (;;) {
		eol = memmem(b + off, n - off, "\r\n", 2);
		if (eol == NULL)
			return 0;
		sz = strtoul(b + off, &e, 16);
		off = (size_t)(eol - b) + 2;
		if (sz == 0) {
			/* trailers, then an empty line */
			for (;;) {
				eol = memmem(b + off, n - off, "\r\n", 2);
				if (eol == NULL)
					return 0;
				if (eol == b + off)
					return off + 2;
				off = (size_t)(eol - b) + 2;
			}
		}
		if (n - off < sz + 2)
			return 0;
		off += sz + 2;
	}
}

static void
record(struct conn *c, int status, const char *deny, size_t dlen, int64_t now)
{
	struct group *g = c->g;

	if (now < t_count || now > t_end)
		return;
	g->answers++;
	if (status >= 200 && status < 300) {
		g->ok++;
		if (g->nlat == g->caplat) {
			g->caplat = g->caplat ? g->caplat * 2 : 4096;
			g->lat = realloc(g->lat, g->caplat * sizeof(*g->lat));
			if (g->lat == NULL)
				die("realloc");
		}
		g->lat[g->nlat++] = (uint32_t)(now - c->t_req);
	} else if (status == 429 && deny != NULL && dlen == 12 &&
	    memcmp(deny, "rate_limited", 12) == 0)
		g->s429++;
	else {
		g->other++;
		if (g->deny[0] == '\0') {
			if (deny == NULL)
				(void)snprintf(g->deny, sizeof(g->deny),
				    "status-%d", status);
			else
				(void)snprintf(g->deny, sizeof(g->deny), "%.*s",
				    (int)(dlen < 60 ? dlen : 60), deny);
		}
	}
}

/*
 * A whole answer in rbuf? 1: done (*closing when the server will close),
 * 0: not yet, -1: malformed. eof: the server has closed.
 */
static int
parse(struct conn *c, int eof, int64_t now, int *closing)
{
	char *h = c->rbuf, *hend;
	const char *v, *deny;
	size_t hlen, vlen, dlen = 0, body, need;
	int status;

	hend = memmem(h, c->rlen, "\r\n\r\n", 4);
	if (hend == NULL)
		return eof ? -1 : 0;
	hlen = (size_t)(hend - h) + 4;
	if (c->rlen < 12 || strncmp(h, "HTTP/1.", 7) != 0)
		return -1;
	status = (int)strtol(h + 9, NULL, 10);
	deny = find_hdr(h, hlen - 2, "Sluice-Deny", &dlen);
	*closing = 0;
	if ((v = find_hdr(h, hlen - 2, "Connection", &vlen)) != NULL &&
	    vlen >= 5 && strncasecmp(v, "close", 5) == 0)
		*closing = 1;
	if ((v = find_hdr(h, hlen - 2, "Content-Length", &vlen)) != NULL) {
		need = hlen + strtoul(v, NULL, 10);
		if (c->rlen < need)
			return eof ? -1 : 0;
	} else if ((v = find_hdr(h, hlen - 2, "Transfer-Encoding", &vlen)) !=
	    NULL) {
		body = chunked_len(h + hlen, c->rlen - hlen);
		if (body == 0)
			return eof ? -1 : 0;
	} else if (!eof)
		return 0; /* ends at the close */
	else
		*closing = 1;
	record(c, status, deny, dlen, now);
	return 1;
}

/* Read what is there; *eof when the server closed. -1: a reset, too much. */
static int
conn_fill(struct conn *c, int *eof)
{
	ssize_t n;

	*eof = 0;
	for (;;) {
		if (c->rlen == c->rcap) {
			if (c->rcap >= RBUF_MAX)
				return -1;
			c->rcap = c->rcap ? c->rcap * 2 : 4096;
			c->rbuf = realloc(c->rbuf, c->rcap);
			if (c->rbuf == NULL)
				die("realloc");
		}
		n = read(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen);
		if (n > 0) {
			c->rlen += (size_t)n;
			continue;
		}
		if (n == 0)
			*eof = 1;
		else if (errno != EAGAIN)
			return -1;
		return 0;
	}
}

static void
conn_read(struct conn *c, int64_t now)
{
	int r, closing, eof;

	if (conn_fill(c, &eof) == -1)
		goto bad;
	if (c->st == C_CLOSING || c->st == C_IDLE) {
		/* an idle close; bytes here would be a protocol error */
		if (c->rlen > 0 && now >= t_count)
			c->g->err++;
		if (eof || c->rlen > 0)
			conn_drop(c, now);
		c->rlen = 0;
		return;
	}
	r = parse(c, eof, now, &closing);
	if (r == 0)
		return;
	if (r == -1)
		goto bad;
	c->rlen = 0;
	if (closing || eof) {
		if (eof)
			conn_drop(c, now);
		else
			c->st = C_CLOSING; /* let the server close first */
		return;
	}
	c->st = C_IDLE;
	conn_maybe_send(c, now);
	return;
bad:
	if (now >= t_count && now <= t_end)
		c->g->err++;
	conn_drop(c, now);
}

static void
conn_event(struct conn *c, uint32_t ev, int64_t now)
{
	int soerr = 0;
	socklen_t sl = sizeof(soerr);

	switch (c->st) {
	case C_CONNECTING:
		if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) ==
			-1 ||
		    soerr != 0) {
			if (now >= t_count)
				c->g->err++;
			conn_drop(c, now + 10000);
			return;
		}
		ep(EPOLL_CTL_MOD, c, EPOLLIN);
		c->st = C_IDLE;
		conn_maybe_send(c, now);
		return;
	case C_WRITING:
		conn_write(c, now);
		return;
	case C_READING:
	case C_IDLE:
	case C_CLOSING:
		if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR))
			conn_read(c, now);
		return;
	case C_DOWN:
		return;
	}
}

static char *
read_token(const char *path)
{
	static char buf[8192];
	size_t n;
	FILE *f;

	if (strcmp(path, "-") == 0)
		return NULL;
	if ((f = fopen(path, "r")) == NULL)
		die(path);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	(void)fclose(f);
	while (n > 0 &&
	    (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
		n--;
	buf[n] = '\0';
	return buf;
}

static void
parse_group(struct group *g, char *spec, const char *url)
{
	char *f[6], *host, *tok, *colon, *hs, *he;
	int i, len;
	char path[300];

	for (i = 0; i < 6; i++) {
		f[i] = strsep(&spec, ",");
		if (f[i] == NULL) {
			(void)fprintf(stderr,
			    "gwload: a group is "
			    "NAME,NETNS,IP:PORT,CONNS,RATE,TOKENFILE\n");
			exit(2);
		}
	}
	(void)snprintf(g->name, sizeof(g->name), "%s", f[0]);
	g->nsfd = -1;
	if (strcmp(f[1], "-") != 0) {
		(void)snprintf(path, sizeof(path), "/run/netns/%s", f[1]);
		if ((g->nsfd = open(path, O_RDONLY | O_CLOEXEC)) == -1)
			die(path);
	}
	if ((colon = strrchr(f[2], ':')) == NULL)
		die("IP:PORT");
	*colon = '\0';
	g->proxy.sin_family = AF_INET;
	g->proxy.sin_port = htons((uint16_t)num(colon + 1, 1, 65535, "port"));
	if (inet_pton(AF_INET, f[2], &g->proxy.sin_addr) != 1) {
		(void)fprintf(stderr, "gwload: bad address %s\n", f[2]);
		exit(2);
	}
	g->conns = (int)num(f[3], 1, MAXCONNS, "CONNS");
	g->rate = num(f[4], 0, 1e7, "RATE");
	if (g->conns < 1 || nconns + g->conns > MAXCONNS) {
		(void)fprintf(stderr, "gwload: bad CONNS %s\n", f[3]);
		exit(2);
	}
	tok = read_token(f[5]);
	hs = strstr(url, "://");
	hs = hs != NULL ? hs + 3 : (char *)url;
	he = strchr(hs, '/');
	len = he != NULL ? (int)(he - hs) : (int)strlen(hs);
	host = strndup(hs, (size_t)len);
	if (host == NULL)
		die("strndup");
	len = asprintf(&g->req, "GET %s HTTP/1.1\r\nHost: %s\r\n%s%s%s\r\n",
	    url, host, tok != NULL ? "Proxy-Authorization: Bearer " : "",
	    tok != NULL ? tok : "", tok != NULL ? "\r\n" : "");
	if (len < 0)
		die("asprintf");
	g->reqlen = (size_t)len;
	if (tok != NULL)
		explicit_bzero(tok, strlen(tok));
	free(host);
}

static int
cmp32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static uint32_t
pct(const struct group *g, double p)
{
	size_t i;

	if (g->nlat == 0)
		return 0;
	i = (size_t)(p * (double)(g->nlat - 1) + 0.5);
	return g->lat[i];
}

/* Paced connections start spread over one interval; all connect now. */
static void
start_conns(int64_t t0)
{
	struct conn *c;
	int i, j;

	for (i = 0, j = 0; i < nconns; i++) {
		c = &conns[i];
		if (i > 0 && c->g != conns[i - 1].g)
			j = 0;
		if (c->g->rate > 0) {
			c->interval = (int64_t)(1e6 * c->g->conns / c->g->rate);
			c->next = t0 + c->interval * j / c->g->conns;
		}
		j++;
		conn_open(c, t0);
	}
}

/* Open the connections due, send the paced requests due; when next? */
static int64_t
due(int64_t now)
{
	int64_t wake = t_end;
	struct conn *c;
	int i;

	for (i = 0; i < nconns; i++) {
		c = &conns[i];
		if (c->st == C_DOWN) {
			if (c->next <= now)
				conn_open(c, now);
			else if (c->next < wake)
				wake = c->next;
		} else if (c->st == C_IDLE && c->g->rate > 0) {
			if (c->next <= now)
				conn_send(c, now);
			else if (c->next < wake)
				wake = c->next;
		}
	}
	return wake;
}

static void
run(void)
{
	struct epoll_event evs[256];
	int64_t now, wake;
	int i, n, timeout;

	for (;;) {
		now = now_us();
		if (now >= t_end)
			break;
		wake = due(now);
		timeout = (int)((wake - now + 999) / 1000);
		if (timeout > 50)
			timeout = 50;
		n = epoll_wait(epfd, evs, 256, timeout);
		if (n == -1 && errno != EINTR)
			die("epoll_wait");
		now = now_us();
		for (i = 0; i < n; i++)
			conn_event(evs[i].data.ptr, evs[i].events, now);
	}
}

static void
report(double dur)
{
	struct group *g;
	int i;

	for (i = 0; i < ngroups; i++) {
		g = &groups[i];
		qsort(g->lat, g->nlat, sizeof(*g->lat), cmp32);
		(void)
		    printf("%s ok=%llu s429=%llu other=%llu err=%llu "
			   "att_rps=%.1f ok_rps=%.1f p50_us=%u p99_us=%u%s%s\n",
			g->name, (unsigned long long)g->ok,
			(unsigned long long)g->s429,
			(unsigned long long)g->other,
			(unsigned long long)g->err, (double)g->answers / dur,
			(double)g->ok / dur, pct(g, 0.50), pct(g, 0.99),
			g->deny[0] ? " deny=" : "", g->deny);
	}
}

int
main(int argc, char **argv)
{
	const char *url = NULL;
	double dur = 10, warm = 1;
	int64_t t0;
	int i, j, o;
	struct group *g;
	struct conn *c;

	while ((o = getopt(argc, argv, "d:w:u:")) != -1) {
		switch (o) {
		case 'd':
			dur = num(optarg, 0.001, 1e6, "-d");
			break;
		case 'w':
			warm = num(optarg, 0, 1e6, "-w");
			break;
		case 'u':
			url = optarg;
			break;
		default:
			goto usage;
		}
	}
	if (url == NULL || optind >= argc)
		goto usage;
	if ((homens = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC)) == -1)
		die("/proc/self/ns/net");
	curns = homens;
	for (i = optind; i < argc; i++) {
		if (ngroups == MAXGROUPS)
			goto usage;
		g = &groups[ngroups++];
		parse_group(g, argv[i], url);
		for (j = 0; j < g->conns; j++) {
			c = &conns[nconns++];
			c->g = g;
			c->fd = -1;
			c->st = C_DOWN;
		}
	}
	if ((epfd = epoll_create1(EPOLL_CLOEXEC)) == -1)
		die("epoll_create1");
	t0 = now_us();
	t_count = t0 + (int64_t)(warm * 1e6);
	t_end = t_count + (int64_t)(dur * 1e6);
	start_conns(t0);
	run();
	report(dur);
	return 0;
usage:
	(void)fprintf(stderr,
	    "usage: gwload [-d SECONDS] [-w WARMUP_S] -u URL "
	    "NAME,NETNS,IP:PORT,CONNS,RATE,TOKENFILE...\n");
	return 2;
}
