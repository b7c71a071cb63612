/*
 * floor: the least a forward proxy can do per connection on this kernel,
 * as a benchmark peer (tests/bench/floor.sh). It is not a proxy anyone
 * should run: it checks nothing, logs nothing and trusts its client.
 *
 * One thread, one level-triggered epoll loop. A client's head is read up
 * to its blank line. "CONNECT IP:PORT" connects there, answers 200 and
 * relays bytes; "GET http://IP[:PORT]/..." (absolute form) connects there
 * and relays the head as it came and every byte after it, both ways,
 * until both sides have ended (keep-alive requests on that connection go
 * to the same upstream, unread). IPv4 literals only. Per connection that
 * is accept4, one TCP_NODELAY per leg, socket, connect, one epoll_ctl ADD
 * per leg, a read and a write per message and direction, shutdown of the
 * first side to end, close: no FIONREAD, no SO_ERROR (a failed connect
 * shows as EPOLLERR), no timers. Whatever sluice spends above this
 * figure, measured in the same run, is sluice's own; what this spends is
 * the kernel's and the load generator's.
 *
 *   floor IP:PORT
 *
 * Build: cc -O2 -Wall -o floor floor.c
 */
#define _GNU_SOURCE
#include <sys/epoll.h>
#include <sys/socket.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HEAD_MAX 16384
#define BUF_SIZE 65536

struct end {
	struct fconn *fc;
	int fd;
	int side;        /* 0: client, 1: upstream */
	int added;       /* in the epoll set */
	unsigned mask;   /* what epoll watches now */
	int eof;         /* read to EOF */
	size_t off, len; /* bytes read from this end, not yet written on */
	char *buf;
};

struct fconn {
	struct end e[2];
	int connected;
	int connect_req;    /* CONNECT: answer 200 once connected */
	struct fconn *gone; /* next on the list freed after this batch */
	int dead;           /* on that list: its other events are skipped */
};

static int ep;

static void
die(const char *what)
{
	perror(what);
	exit(1);
}

static int
set_mask(struct end *e, unsigned mask)
{
	struct epoll_event ev = { .events = mask, .data.ptr = e };

	if (e->added && mask == e->mask)
		return 0;
	if (epoll_ctl(ep, e->added ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, e->fd,
		&ev) == -1)
		return -1;
	e->added = 1;
	e->mask = mask;
	return 0;
}

static void
fconn_free(struct fconn *fc)
{
	int i;

	for (i = 0; i < 2; i++) {
		if (fc->e[i].fd != -1)
			close(fc->e[i].fd); /* also leaves the epoll set */
		free(fc->e[i].buf);
	}
	free(fc);
}

/* Parse "CONNECT a.b.c.d:p " or "M http://a.b.c.d[:p]/" into sin. */
static int
head_target(const char *h, struct sockaddr_in *sin, int *connect_req)
{
	char host[64];
	const char *p, *q;
	size_t n;
	long port;

	*connect_req = strncmp(h, "CONNECT ", 8) == 0;
	if (*connect_req)
		p = h + 8;
	else if ((p = strstr(h, " http://")) != NULL && p < strstr(h, "\r\n"))
		p += 8;
	else
		return -1;
	for (q = p; *q != '\0' && *q != ':' && *q != '/' && *q != ' '; q++)
		;
	n = (size_t)(q - p);
	if (n == 0 || n >= sizeof(host))
		return -1;
	memcpy(host, p, n);
	host[n] = '\0';
	port = *q == ':' ? strtol(q + 1, NULL, 10) : 80;
	if (port <= 0 || port > 65535)
		return -1;
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_port = htons((unsigned short)port);
	return inet_pton(AF_INET, host, &sin->sin_addr) == 1 ? 0 : -1;
}

static int
start_upstream(struct fconn *fc)
{
	struct end *c = &fc->e[0], *u = &fc->e[1];
	struct sockaddr_in sin;
	char *eoh;
	int one = 1;
	size_t hl;

	c->buf[c->len] = '\0';
	if ((eoh = strstr(c->buf, "\r\n\r\n")) == NULL)
		return c->len >= HEAD_MAX ? -1 : 0; /* not all in yet */
	if (head_target(c->buf, &sin, &fc->connect_req) == -1)
		return -1;
	if (fc->connect_req) { /* the head is for us: drop it */
		hl = (size_t)(eoh + 4 - c->buf);
		c->off = hl;
	}
	u->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (u->fd == -1)
		return -1;
	(void)setsockopt(u->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(u->fd, (struct sockaddr *)&sin, sizeof(sin)) == -1 &&
	    errno != EINPROGRESS)
		return -1;
	/* Nothing more is read from the client until the upstream is up. */
	if (set_mask(c, 0) == -1 || set_mask(u, EPOLLOUT) == -1)
		return -1;
	return 0;
}

/* Write what src holds to dst; 1: all written, 0: dst is full, -1: error. */
static int
flush(struct end *src, struct end *dst)
{
	ssize_t n;

	while (src->off < src->len) {
		n = write(dst->fd, src->buf + src->off, src->len - src->off);
		if (n == -1)
			return errno == EAGAIN ? 0 : -1;
		src->off += (size_t)n;
	}
	src->off = src->len = 0;
	return 1;
}

/* Recompute both ends' epoll masks; -1 when the connection is done. */
static int
rearm(struct fconn *fc)
{
	unsigned m[2] = { 0, 0 };
	int i;

	if (fc->e[0].eof && fc->e[1].eof && fc->e[0].len == 0 &&
	    fc->e[1].len == 0)
		return -1;
	for (i = 0; i < 2; i++) {
		struct end *e = &fc->e[i];

		if (!e->eof && e->len == 0)
			m[i] |= EPOLLIN;
		if (e->len > 0)
			m[1 - i] |= EPOLLOUT;
	}
	for (i = 0; i < 2; i++)
		if (set_mask(&fc->e[i], m[i]) == -1)
			return -1;
	return 0;
}

static int
on_connected(struct fconn *fc)
{
	static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
	struct end *c = &fc->e[0];

	fc->connected = 1;
	if (fc->connect_req &&
	    write(c->fd, ok, sizeof(ok) - 1) != (ssize_t)(sizeof(ok) - 1))
		return -1;
	if (c->off == c->len)
		c->off = c->len = 0;
	return flush(c, &fc->e[1]) == -1 ? -1 : rearm(fc);
}

static int
on_read(struct end *e)
{
	struct fconn *fc = e->fc;
	struct end *o = &fc->e[1 - e->side];
	size_t room = (fc->connected ? BUF_SIZE : HEAD_MAX) - e->len;
	ssize_t n;

	n = read(e->fd, e->buf + e->len, room);
	if (n == -1)
		return errno == EAGAIN ? 0 : -1;
	if (n == 0) {
		e->eof = 1;
		/* The first side to end: pass its FIN on; the last: close(). */
		if (!o->eof && e->len == 0 && fc->connected &&
		    shutdown(o->fd, SHUT_WR) == -1)
			return -1;
		return fc->connected ? rearm(fc) : -1;
	}
	e->len += (size_t)n;
	if (!fc->connected)
		return start_upstream(fc);
	if (flush(e, o) == -1)
		return -1;
	return rearm(fc);
}

static int
on_event(struct end *e, unsigned what)
{
	struct fconn *fc = e->fc;
	struct end *o = &fc->e[1 - e->side];

	if (!fc->connected) {
		if (e->side == 1)
			return (what & (EPOLLERR | EPOLLHUP)) ?
			    -1 :
			    on_connected(fc);
		return on_read(e);
	}
	if (what & EPOLLOUT) {
		if (flush(o, e) == -1)
			return -1;
		if (o->eof && o->len == 0 && !e->eof &&
		    shutdown(e->fd, SHUT_WR) == -1)
			return -1;
		if (rearm(fc) == -1)
			return -1;
	}
	if (what & (EPOLLIN | EPOLLHUP | EPOLLERR))
		return on_read(e);
	return 0;
}

static void
on_accept(int lfd)
{
	struct fconn *fc;
	int fd, one = 1, i;

	while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) !=
	    -1) {
		if ((fc = calloc(1, sizeof(*fc))) == NULL)
			die("calloc");
		for (i = 0; i < 2; i++) {
			fc->e[i].fc = fc;
			fc->e[i].side = i;
			fc->e[i].fd = -1;
			if ((fc->e[i].buf = malloc(BUF_SIZE + 1)) == NULL)
				die("malloc");
		}
		fc->e[0].fd = fd;
		(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one,
		    sizeof(one));
		if (set_mask(&fc->e[0], EPOLLIN) == -1)
			fconn_free(fc); /* in no batch yet */
	}
	if (errno != EAGAIN && errno != ECONNABORTED && errno != EMFILE &&
	    errno != ENFILE)
		die("accept4");
}

int
main(int argc, char **argv)
{
	struct epoll_event evs[64], lev = { .events = EPOLLIN };
	struct fconn *gone = NULL;
	struct sockaddr_in sin = { .sin_family = AF_INET };
	char host[64], *colon;
	int lfd, one = 1, n, i;

	if (argc != 2 || strlen(argv[1]) >= sizeof(host) ||
	    (colon = strchr(strcpy(host, argv[1]), ':')) == NULL) {
		fprintf(stderr, "usage: floor IP:PORT\n");
		return 2;
	}
	*colon = '\0';
	sin.sin_port = htons((unsigned short)atoi(colon + 1));
	if (inet_pton(AF_INET, host, &sin.sin_addr) != 1) {
		fprintf(stderr, "floor: %s: not an IPv4 address\n", host);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	if ((ep = epoll_create1(EPOLL_CLOEXEC)) == -1)
		die("epoll_create1");
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (lfd == -1 ||
	    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ==
		-1 ||
	    bind(lfd, (struct sockaddr *)&sin, sizeof(sin)) == -1 ||
	    listen(lfd, 4096) == -1)
		die("listen");
	lev.data.ptr = NULL;
	if (epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &lev) == -1)
		die("epoll_ctl");
	for (;;) {
		if ((n = epoll_wait(ep, evs, 64, -1)) == -1) {
			if (errno == EINTR)
				continue;
			die("epoll_wait");
		}
		/*
		 * A connection that ends is freed after the batch: the batch
		 * may hold an event for its other end too.
		 */
		for (i = 0; i < n; i++) {
			struct end *e = evs[i].data.ptr;

			if (e == NULL)
				on_accept(lfd);
			else if (!e->fc->dead &&
			    on_event(e, evs[i].events) == -1) {
				e->fc->dead = 1;
				e->fc->gone = gone;
				gone = e->fc;
			}
		}
		while (gone != NULL) {
			struct fconn *next = gone->gone;

			fconn_free(gone);
			gone = next;
		}
	}
}
