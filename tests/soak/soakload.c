/*
 * soakload: the load generator of the soak campaign (tests/soak/run; on
 * demand, not in the suite). It sends an exact number of requests, so that
 * the campaign can compare what it sent with what the audit log holds, and
 * counts every failure. Blocking sockets, one thread per connection.
 *
 * -m ka: N small requests "GET TARGET" over CONC kept-alive connections to
 *   ADDR (a thread takes the next request number until N are taken; a
 *   connection that fails is counted as one error and opened again for the
 *   next request). A response is ok when its status is 200 and its body,
 *   framed by Content-Length or chunked, is read whole.
 *
 * -m tunnel: N CONNECT tunnels to HOSTPORT through the proxy ADDR over
 *   CONC threads: "CONNECT HOSTPORT" -> 200 -> "GET TARGET" with
 *   "Connection: close" -> the whole response up to the close -> close.
 *   The server closes first, so the client holds no TIME_WAIT.
 *
 * -H "Name: value" adds one header field to every request (a CONNECT's
 * in tunnel mode); -E VAR takes that field from the environment variable
 * VAR instead, so that a token never shows in the process list. Prints one JSON
 * line: sent, ok, errors, the statuses seen, the first error, the seconds taken
 * and the requests per second.
 *
 * Built by tests/soak/run with -D_GNU_SOURCE (memmem, strcasestr).
 *
 * usage: soakload -m ka -a IP:PORT -n N [-c CONC] [-T TARGET] [-h HOST]
 *            [-H "Name: value" | -E VAR]
 *        soakload -m tunnel -a IP:PORT -t HOSTPORT -n N [-c CONC]
 *            [-T TARGET] [-H "Name: value" | -E VAR]
 */
#include <sys/socket.h>
#include <sys/time.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONC  512
#define IO_WAIT_S 15 /* a read or write that waits longer fails */
#define BUF_SIZE  65536
#define MAX_STAT  600

static struct sockaddr_in addr;
static const char *mode = "ka", *target = "/v1/echo", *host, *hdr;
static const char *tunnel_to;
static uint64_t total;
static atomic_uint_fast64_t next_req, n_ok, n_err;
static atomic_uint_fast64_t statuses[MAX_STAT];
static pthread_mutex_t err_mu = PTHREAD_MUTEX_INITIALIZER;
static char first_err[256];

struct conn {
	int fd;
	char buf[BUF_SIZE];
	size_t len; /* bytes in buf */
	size_t off; /* bytes consumed */
};

static void
note_err(const char *what)
{
	atomic_fetch_add(&n_err, 1);
	pthread_mutex_lock(&err_mu);
	if (first_err[0] == '\0')
		(void)snprintf(first_err, sizeof(first_err), "%s", what);
	pthread_mutex_unlock(&err_mu);
}

static int
dial(void)
{
	struct timeval tv = { .tv_sec = IO_WAIT_S };
	int fd, one = 1;

	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0) {
		(void)close(fd);
		return -1;
	}
	return fd;
}

static int
write_all(int fd, const char *p, size_t n)
{
	ssize_t w;

	while (n > 0) {
		w = send(fd, p, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* More input into c->buf; 0 on data, -1 on EOF or error. */
static int
fill(struct conn *c)
{
	ssize_t r;

	if (c->off > 0) {
		memmove(c->buf, c->buf + c->off, c->len - c->off);
		c->len -= c->off;
		c->off = 0;
	}
	if (c->len == sizeof(c->buf))
		return -1;
	do
		r = recv(c->fd, c->buf + c->len, sizeof(c->buf) - c->len, 0);
	while (r < 0 && errno == EINTR);
	if (r <= 0)
		return -1;
	c->len += (size_t)r;
	return 0;
}

/* A line ending in CRLF from c (without it, NUL-terminated in place). */
static char *
get_line(struct conn *c)
{
	char *p, *s;

	for (;;) {
		s = c->buf + c->off;
		p = memmem(s, c->len - c->off, "\r\n", 2);
		if (p != NULL) {
			*p = '\0';
			c->off = (size_t)(p + 2 - c->buf);
			return s;
		}
		if (fill(c) != 0)
			return NULL;
	}
}

static int
skip_bytes(struct conn *c, uint64_t n)
{
	size_t have;

	while (n > 0) {
		if (c->off == c->len && fill(c) != 0)
			return -1;
		have = c->len - c->off;
		if (have > n)
			have = (size_t)n;
		c->off += have;
		n -= have;
	}
	return 0;
}

/* Everything up to the peer's close is the rest of the response. */
static void
drain_to_close(struct conn *c)
{
	c->off = c->len;
	while (fill(c) == 0)
		c->off = c->len;
}

/* A chunked body with its trailer; 0 when whole. */
static int
skip_chunked(struct conn *c)
{
	char *line;
	uint64_t n;

	for (;;) {
		line = get_line(c);
		if (line == NULL)
			return -1;
		n = strtoull(line, NULL, 16);
		if (n == 0)
			break;
		if (skip_bytes(c, n) != 0 || get_line(c) == NULL)
			return -1;
	}
	do {
		line = get_line(c);
		if (line == NULL)
			return -1;
	} while (*line != '\0');
	return 0;
}

struct head {
	int status;
	int chunked;
	int has_len;
	int close_hdr;
	uint64_t clen;
};

/* A response head into h; 0 when well formed. */
static int
read_head(struct conn *c, struct head *h)
{
	char *line, *v, *end;
	long st;

	memset(h, 0, sizeof(*h));
	line = get_line(c);
	if (line == NULL || strncmp(line, "HTTP/1.1 ", 9) != 0)
		return -1;
	st = strtol(line + 9, &end, 10);
	if (st < 100 || st > 999 || (*end != ' ' && *end != '\0'))
		return -1;
	h->status = (int)st;
	for (;;) {
		line = get_line(c);
		if (line == NULL)
			return -1;
		if (*line == '\0')
			return 0;
		v = strchr(line, ':');
		if (v == NULL)
			return -1;
		*v++ = '\0';
		v += strspn(v, " \t");
		if (strcasecmp(line, "content-length") == 0) {
			h->has_len = 1;
			h->clen = strtoull(v, NULL, 10);
		} else if (strcasecmp(line, "transfer-encoding") == 0)
			h->chunked = strcasestr(v, "chunked") != NULL;
		else if (strcasecmp(line, "connection") == 0)
			h->close_hdr = strcasestr(v, "close") != NULL;
	}
}

/*
 * One response head and body. Returns the status (0 when malformed or
 * cut), *keep 0 when the connection cannot carry another request.
 */
static int
read_response(struct conn *c, int until_close, int *keep)
{
	struct head h;

	*keep = 0;
	if (read_head(c, &h) != 0)
		return 0;
	if (h.chunked) {
		if (skip_chunked(c) != 0)
			return 0;
	} else if (h.has_len) {
		if (skip_bytes(c, h.clen) != 0)
			return 0;
	} else if (h.status != 204 && h.status != 304 && h.status >= 200) {
		drain_to_close(c); /* framed by the close */
		return h.status;
	}
	if (until_close)
		drain_to_close(c);
	else
		*keep = !h.close_hdr;
	return h.status;
}

static void
count_status(int status)
{
	if (status > 0 && status < MAX_STAT)
		atomic_fetch_add(&statuses[status], 1);
}

static void *
ka_thread(void *arg)
{
	struct conn *c;
	char req[8192];
	int reqlen, status, keep;

	(void)arg;
	c = calloc(1, sizeof(*c));
	if (c == NULL)
		return NULL;
	c->fd = -1;
	reqlen = snprintf(req, sizeof(req),
	    "GET %s HTTP/1.1\r\nHost: %s\r\n%s%sUser-Agent: soakload\r\n\r\n",
	    target, host, hdr != NULL ? hdr : "", hdr != NULL ? "\r\n" : "");
	while (atomic_fetch_add(&next_req, 1) < total) {
		if (c->fd < 0) {
			c->fd = dial();
			c->len = c->off = 0;
			if (c->fd < 0) {
				note_err("connect failed");
				continue;
			}
		}
		if (write_all(c->fd, req, (size_t)reqlen) != 0) {
			note_err("write failed");
			(void)close(c->fd);
			c->fd = -1;
			continue;
		}
		status = read_response(c, 0, &keep);
		count_status(status);
		if (status == 200)
			atomic_fetch_add(&n_ok, 1);
		else if (status == 0)
			note_err("response cut or malformed");
		else {
			char m[64];

			(void)snprintf(m, sizeof(m), "status %d", status);
			note_err(m);
		}
		if (!keep || c->len != c->off) {
			(void)close(c->fd);
			c->fd = -1;
		}
	}
	if (c->fd >= 0)
		(void)close(c->fd);
	free(c);
	return NULL;
}

/*
 * The answer to a CONNECT, whose 200 has no body: 0 when it is 200, else
 * the error is counted (with a status when there is one).
 */
static int
connect_head(struct conn *c)
{
	char m[64], *line;

	line = get_line(c);
	if (line == NULL || strncmp(line, "HTTP/1.1 200", 12) != 0) {
		if (line != NULL && strlen(line) >= 12)
			count_status((int)strtol(line + 9, NULL, 10));
		(void)snprintf(m, sizeof(m), "CONNECT: %.40s",
		    line != NULL ? line : "(closed)");
		note_err(m);
		return -1;
	}
	do
		line = get_line(c);
	while (line != NULL && *line != '\0');
	if (line == NULL) {
		note_err("CONNECT head cut");
		return -1;
	}
	return 0;
}

static void *
tunnel_thread(void *arg)
{
	struct conn *c;
	char creq[8192], req[1024];
	int creqlen, reqlen, status, keep;

	(void)arg;
	c = calloc(1, sizeof(*c));
	if (c == NULL)
		return NULL;
	creqlen = snprintf(creq, sizeof(creq),
	    "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s%s\r\n", tunnel_to, tunnel_to,
	    hdr != NULL ? hdr : "", hdr != NULL ? "\r\n" : "");
	reqlen = snprintf(req, sizeof(req),
	    "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n"
	    "User-Agent: soakload\r\n\r\n",
	    target, tunnel_to);
	while (atomic_fetch_add(&next_req, 1) < total) {
		c->len = c->off = 0;
		c->fd = dial();
		if (c->fd < 0) {
			note_err("connect failed");
			continue;
		}
		if (write_all(c->fd, creq, (size_t)creqlen) != 0) {
			note_err("CONNECT write failed");
			goto next;
		}
		if (connect_head(c) != 0)
			goto next;
		if (write_all(c->fd, req, (size_t)reqlen) != 0) {
			note_err("tunnel write failed");
			goto next;
		}
		status = read_response(c, 1, &keep);
		count_status(status);
		if (status == 200)
			atomic_fetch_add(&n_ok, 1);
		else
			note_err(status == 0 ? "tunnel response cut" :
					       "tunnel status not 200");
next:
		(void)close(c->fd);
	}
	free(c);
	return NULL;
}

static void
usage(void)
{
	(void)fprintf(stderr,
	    "usage: soakload -m ka|tunnel -a IP:PORT -n N [-c CONC] "
	    "[-t HOSTPORT] [-T TARGET] [-h HOST] [-H \"Name: value\" | -E VAR]\n");
	exit(2);
}

/* A decimal number in [lo, hi], else the usage. */
static long
num(const char *arg, long lo, long hi)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(arg, &end, 10);
	if (errno != 0 || end == arg || *end != '\0' || v < lo || v > hi)
		usage();
	return v;
}

static double
now_s(void)
{
	struct timespec ts;

	(void)clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* IPv4:PORT into addr, else the usage. */
static void
parse_addr(const char *a)
{
	char ip[64], *colon;

	if (snprintf(ip, sizeof(ip), "%s", a) >= (int)sizeof(ip) ||
	    (colon = strrchr(ip, ':')) == NULL)
		usage();
	*colon = '\0';
	memset(&addr, 0, sizeof(addr));
	addr.sin_family = AF_INET;
	addr.sin_port = htons((uint16_t)num(colon + 1, 1, 65535));
	if (inet_pton(AF_INET, ip, &addr.sin_addr) != 1)
		usage();
}

/* The one JSON line of results. */
static void
print_result(double dt)
{
	int i, first = 1;

	(void)
	    printf("{\"mode\":\"%s\",\"sent\":%llu,\"ok\":%llu,\"errors\":%llu,"
		   "\"seconds\":%.3f,\"rps\":%.1f,\"status\":{",
		mode, (unsigned long long)total,
		(unsigned long long)atomic_load(&n_ok),
		(unsigned long long)atomic_load(&n_err), dt,
		dt > 0 ? (double)total / dt : 0.0);
	for (i = 0; i < MAX_STAT; i++)
		if (atomic_load(&statuses[i]) > 0) {
			(void)printf("%s\"%d\":%llu", first ? "" : ",", i,
			    (unsigned long long)atomic_load(&statuses[i]));
			first = 0;
		}
	(void)printf("},\"first_error\":\"");
	for (i = 0; first_err[i] != '\0'; i++)
		if (first_err[i] >= 0x20 && first_err[i] != '"' &&
		    first_err[i] != '\\')
			(void)putchar(first_err[i]);
	(void)printf("\"}\n");
}

int
main(int argc, char **argv)
{
	pthread_t th[MAX_CONC];
	const char *a = NULL;
	int ch, conc = 8, i;
	double t0;

	while ((ch = getopt(argc, argv, "m:a:n:c:t:T:h:H:E:")) != -1) {
		switch (ch) {
		case 'm':
			mode = optarg;
			break;
		case 'a':
			a = optarg;
			break;
		case 'n':
			total = (uint64_t)num(optarg, 0, 1L << 40);
			break;
		case 'c':
			conc = (int)num(optarg, 1, MAX_CONC);
			break;
		case 't':
			tunnel_to = optarg;
			break;
		case 'T':
			target = optarg;
			break;
		case 'h':
			host = optarg;
			break;
		case 'H':
			hdr = optarg;
			break;
		case 'E':
			hdr = getenv(optarg);
			if (hdr == NULL) {
				(void)fprintf(stderr,
				    "soakload: %s is not set\n", optarg);
				return 2;
			}
			break;
		default:
			usage();
		}
	}
	if (a == NULL || conc < 1 || conc > MAX_CONC || optind != argc ||
	    (strcmp(mode, "ka") != 0 && strcmp(mode, "tunnel") != 0) ||
	    (strcmp(mode, "tunnel") == 0 && tunnel_to == NULL))
		usage();
	parse_addr(a);
	if (host == NULL)
		host = a;
	/* The requests are made in 8 KiB (1 KiB for a tunnel's GET). */
	if (strlen(target) + strlen(host) + (hdr != NULL ? strlen(hdr) : 0) +
		    (tunnel_to != NULL ? 2 * strlen(tunnel_to) : 0) >
		7000 ||
	    (tunnel_to != NULL && strlen(target) + strlen(tunnel_to) > 900))
		usage();
	if (signal(SIGPIPE, SIG_IGN) == SIG_ERR)
		return 1;
	t0 = now_s();
	for (i = 0; i < conc; i++)
		if (pthread_create(&th[i], NULL,
			strcmp(mode, "ka") == 0 ? ka_thread : tunnel_thread,
			NULL) != 0) {
			(void)fprintf(stderr,
			    "soakload: pthread_create failed\n");
			return 1;
		}
	for (i = 0; i < conc; i++)
		(void)pthread_join(th[i], NULL);
	print_result(now_s() - t0);
	return atomic_load(&n_err) > 0 ? 1 : 0;
}
