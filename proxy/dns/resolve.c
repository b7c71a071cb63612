/*
 * The stub resolver for upstream names (DESIGN.md "Resolving upstream names
 * safely"). In sidecar mode the sandbox shares sluice's network namespace:
 * it can read sluice's resolver ports from /proc/net/udp and send from a
 * resolver's address (127.0.0.11 is bindable by any uid, IPV6_FREEBIND
 * lets any uid use a foreign IPv6 source). So every query gets a fresh
 * socket connect()ed to port 53 of a configured server (the kernel then
 * delivers nothing from any other address or port), a random id and 0x20
 * case bits from RAND_bytes, and a truncated answer is asked again over
 * TCP. An answer that fails any check (dnsmsg.c) is ignored, never an end
 * of the query: a forged datagram cannot even make it fail early.
 */
#include <sys/queue.h>
#include <sys/socket.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <openssl/rand.h>

#include "proxy/dns/dnsmsg.h"
#include "proxy/dns/resolve.h"
#include "proxy/util/util.h"

#define RESOLVE_TIMEOUT_S  2    /* per attempt */
#define RESOLVE_ATTEMPTS   2    /* rotating over the servers */
#define RESOLVE_UDP_MAX    4096 /* bytes of a datagram we read */
#define RESOLVE_READS      64   /* datagrams read per wake-up */
#define RESOLVE_CONF_LINES 1024 /* lines of resolv.conf read at most */

enum rq_state {
	RQ_S_IDLE = 0, /* between attempts */
	RQ_S_UDP,      /* query sent, reading datagrams */
	RQ_S_TCP_CONNECT,
	RQ_S_TCP_WRITE,
	RQ_S_TCP_READ
};

/*
 * One A or AAAA query. Owned by its caller until the callback runs (the
 * request is freed just before) or resolve_cancel() frees it.
 */
struct resolve_req {
	TAILQ_ENTRY(resolve_req) rq_entry;
	char rq_name[DNSMSG_NAME_MAX + 1];
	uint16_t rq_qtype;
	enum rq_state rq_state;
	int rq_attempt;  /* -1 before the first */
	size_t rq_first; /* the server of the first attempt */
	struct sockaddr_storage rq_server;
	socklen_t rq_serverlen;
	struct dnsmsg_query rq_q;
	int rq_fd;
	struct event *rq_ev;    /* the socket's */
	struct event *rq_timer; /* attempt timeout; also starts attempts */
	/* TCP: the framed query out, the framed answer in. */
	unsigned char rq_out[2 + DNSMSG_QUERY_MAX];
	size_t rq_outlen, rq_sent;
	unsigned char rq_lenbuf[2];
	unsigned char *rq_in; /* rq_inlen bytes once the length is read */
	size_t rq_inlen, rq_have;
	unsigned long rq_ignored; /* answers that failed the checks */
	resolve_cb *rq_cb;
	void *rq_arg;
};

TAILQ_HEAD(resolve_list, resolve_req);

static struct event_base *rs_base;
static struct resolve_list rs_reqs = TAILQ_HEAD_INITIALIZER(rs_reqs);
static struct sockaddr_storage rs_servers[RESOLVE_MAX_SERVERS];
static size_t rs_nservers;
static size_t rs_next; /* the server a new query tries first */

static void rq_next_attempt(struct resolve_req *);
static void rq_timer_cb(evutil_socket_t, short, void *);

int
resolve_init(struct event_base *base)
{
	rs_base = base;
	return 0;
}

static socklen_t
ss_len(const struct sockaddr_storage *ss)
{
	return ss->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) :
					   sizeof(struct sockaddr_in);
}

void
resolve_set_servers(const struct sockaddr_storage *ss, size_t n)
{
	if (n > RESOLVE_MAX_SERVERS)
		n = RESOLVE_MAX_SERVERS;
	if (n > 0)
		memcpy(rs_servers, ss, n * sizeof(*ss));
	rs_nservers = n;
	rs_next = 0;
}

/* An IP literal (IPv6 may carry a %zone) as server:port. 0 or -1. */
static int
server_addr(const char *s, uint16_t port, struct sockaddr_storage *out)
{
	struct addrinfo hints, *ai = NULL;

	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = AI_NUMERICHOST;
	hints.ai_socktype = SOCK_DGRAM;
	if (getaddrinfo(s, NULL, &hints, &ai) != 0 || ai == NULL)
		return -1;
	if ((ai->ai_family != AF_INET && ai->ai_family != AF_INET6) ||
	    ai->ai_addrlen > sizeof(*out)) {
		freeaddrinfo(ai);
		return -1;
	}
	memset(out, 0, sizeof(*out));
	memcpy(out, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(ai);
	if (out->ss_family == AF_INET)
		((struct sockaddr_in *)out)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)out)->sin6_port = htons(port);
	return 0;
}

int
resolve_conf_read(const char *path, struct sockaddr_storage *out, size_t max,
    size_t *n)
{
	char line[512], *tok, *save;
	size_t lines = 0;
	FILE *f;

	*n = 0;
	if ((f = fopen(path, "re")) == NULL)
		return -1;
	while (lines++ < RESOLVE_CONF_LINES && fgets(line, sizeof(line), f)) {
		if ((tok = strtok_r(line, " \t\r\n", &save)) == NULL ||
		    strcmp(tok, "nameserver") != 0)
			continue;
		if ((tok = strtok_r(NULL, " \t\r\n", &save)) == NULL ||
		    *n >= max)
			continue;
		if (server_addr(tok, 53, &out[*n]) == 0)
			(*n)++;
	}
	(void)fclose(f); /* read only: nothing to lose */
	return 0;
}

int
resolve_configure(char *const *servers, size_t nservers, char *why,
    size_t whylen)
{
	struct sockaddr_storage ss[RESOLVE_MAX_SERVERS];
	size_t i, n = 0;

	/* netpolicy.resolvers are the only servers the kernel lets us use. */
	if (nservers > RESOLVE_MAX_SERVERS) {
		snprintf(why, whylen, "netpolicy.resolvers: more than %d",
		    RESOLVE_MAX_SERVERS);
		return -1;
	}
	for (i = 0; i < nservers; i++) {
		if (server_addr(servers[i], 53, &ss[n]) == -1) {
			snprintf(why, whylen, "netpolicy.resolvers[%zu]: %s", i,
			    "cannot use this DNS server");
			return -1;
		}
		n++;
	}
	if (nservers == 0 &&
	    (resolve_conf_read("/etc/resolv.conf", ss, SL_NELEM(ss), &n) ==
		    -1 ||
		n == 0))
		log_warnx("/etc/resolv.conf: no usable name server");
	resolve_set_servers(ss, n);
	return 0;
}

static void
rq_close(struct resolve_req *rq)
{
	if (rq->rq_ev != NULL) {
		event_free(rq->rq_ev);
		rq->rq_ev = NULL;
	}
	if (rq->rq_fd != -1) {
		close(rq->rq_fd);
		rq->rq_fd = -1;
	}
	free(rq->rq_in);
	rq->rq_in = NULL;
	rq->rq_inlen = rq->rq_have = 0;
	rq->rq_state = RQ_S_IDLE;
}

static void
rq_free(struct resolve_req *rq)
{
	rq_close(rq);
	if (rq->rq_timer != NULL)
		event_free(rq->rq_timer);
	TAILQ_REMOVE(&rs_reqs, rq, rq_entry);
	free(rq);
}

void
resolve_cancel(struct resolve_req *rq)
{
	if (rq != NULL)
		rq_free(rq);
}

void
resolve_shutdown(void)
{
	struct resolve_req *rq;

	while ((rq = TAILQ_FIRST(&rs_reqs)) != NULL)
		rq_free(rq);
}

/* Free rq, then tell its owner (who may start or cancel others). */
static void
rq_finish(struct resolve_req *rq, enum resolve_status st,
    const unsigned char (*addrs)[16], size_t n, uint32_t ttl)
{
	resolve_cb *cb = rq->rq_cb;
	void *arg = rq->rq_arg;

	if (rq->rq_ignored > 0)
		log_debug("dns %s: ignored %lu answers that failed the checks",
		    rq->rq_name, rq->rq_ignored);
	rq_free(rq);
	cb(st, addrs, n, ttl, arg);
}

/* End this attempt from the loop (never inside a caller's frame). */
static void
rq_fail_attempt(struct resolve_req *rq)
{
	rq_close(rq);
	event_del(rq->rq_timer);
	event_active(rq->rq_timer, EV_TIMEOUT, 0);
}

static int
rq_arm_timer(struct resolve_req *rq)
{
	struct timeval tv = { RESOLVE_TIMEOUT_S, 0 };

	return evtimer_add(rq->rq_timer, &tv);
}

/*
 * A response that passed dnsmsg_parse(). Returns 1 when it ends the query
 * (rq is freed), 0 when the attempt goes on (TCP) or was ended.
 */
static int rq_answer(struct resolve_req *rq, const unsigned char *msg,
    size_t len, int tcp);

static void
rq_udp_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct resolve_req *rq = arg;
	unsigned char buf[RESOLVE_UDP_MAX];
	ssize_t n;
	int i;

	(void)what;
	for (i = 0; i < RESOLVE_READS; i++) {
		n = recv(fd, buf, sizeof(buf), MSG_TRUNC);
		if (n == -1) {
			if (errno == EAGAIN || errno == EINTR)
				return;
			/* ICMP unreachable: this server is not answering. */
			rq_fail_attempt(rq);
			return;
		}
		if ((size_t)n > sizeof(buf)) {
			rq->rq_ignored++;
			continue;
		}
		if (rq_answer(rq, buf, (size_t)n, 0) != -1)
			return;
	}
}

static int
rq_random(uint16_t *id, unsigned char mask[DNSMSG_MASK_LEN])
{
	unsigned char r[2 + DNSMSG_MASK_LEN];

	if (RAND_bytes(r, (int)sizeof(r)) != 1)
		return -1;
	*id = (uint16_t)(r[0] << 8 | r[1]);
	memcpy(mask, r + 2, DNSMSG_MASK_LEN);
	return 0;
}

static int
rq_udp_start(struct resolve_req *rq)
{
	unsigned char mask[DNSMSG_MASK_LEN];
	enum dnsmsg_err e;
	uint16_t id;

	if (rq_random(&id, mask) == -1 ||
	    dnsmsg_query(&rq->rq_q, rq->rq_name, rq->rq_qtype, id, mask, &e) ==
		-1)
		return -1;
	/*
	 * IMPORTANT: connected, so the kernel delivers datagrams from
	 * server:53 only; a new socket (and source port) per attempt.
	 */
	rq->rq_fd = socket(rq->rq_server.ss_family,
	    SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (rq->rq_fd == -1 ||
	    connect(rq->rq_fd, (struct sockaddr *)&rq->rq_server,
		rq->rq_serverlen) == -1 ||
	    send(rq->rq_fd, rq->rq_q.dq_msg, rq->rq_q.dq_len, 0) !=
		(ssize_t)rq->rq_q.dq_len)
		return -1;
	rq->rq_ev = event_new(rs_base, rq->rq_fd, EV_READ | EV_PERSIST,
	    rq_udp_read_cb, rq);
	if (rq->rq_ev == NULL || event_add(rq->rq_ev, NULL) == -1)
		return -1;
	rq->rq_state = RQ_S_UDP;
	return rq_arm_timer(rq);
}

static void rq_tcp_cb(evutil_socket_t, short, void *);

static int
rq_tcp_start(struct resolve_req *rq)
{
	rq_close(rq);
	rq->rq_out[0] = (unsigned char)(rq->rq_q.dq_len >> 8);
	rq->rq_out[1] = (unsigned char)rq->rq_q.dq_len;
	memcpy(rq->rq_out + 2, rq->rq_q.dq_msg, rq->rq_q.dq_len);
	rq->rq_outlen = 2 + rq->rq_q.dq_len;
	rq->rq_sent = 0;
	rq->rq_fd = socket(rq->rq_server.ss_family,
	    SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (rq->rq_fd == -1 ||
	    (connect(rq->rq_fd, (struct sockaddr *)&rq->rq_server,
		 rq->rq_serverlen) == -1 &&
		errno != EINPROGRESS))
		return -1;
	rq->rq_ev =
	    event_new(rs_base, rq->rq_fd, EV_WRITE | EV_PERSIST, rq_tcp_cb, rq);
	if (rq->rq_ev == NULL || event_add(rq->rq_ev, NULL) == -1)
		return -1;
	rq->rq_state = RQ_S_TCP_CONNECT;
	event_del(rq->rq_timer);
	return rq_arm_timer(rq);
}

/* The steps below return -1 (the attempt failed), 0 (wait) or 1 (done). */

/* Send what is left of the query; once all of it went, wait to read. */
static int
rq_tcp_write(struct resolve_req *rq)
{
	ssize_t n;

	n = send(rq->rq_fd, rq->rq_out + rq->rq_sent,
	    rq->rq_outlen - rq->rq_sent, MSG_NOSIGNAL);
	if (n == -1)
		return errno == EAGAIN || errno == EINTR ? 0 : -1;
	rq->rq_sent += (size_t)n;
	if (rq->rq_sent < rq->rq_outlen)
		return 0;
	event_free(rq->rq_ev);
	rq->rq_ev =
	    event_new(rs_base, rq->rq_fd, EV_READ | EV_PERSIST, rq_tcp_cb, rq);
	if (rq->rq_ev == NULL || event_add(rq->rq_ev, NULL) == -1)
		return -1;
	rq->rq_state = RQ_S_TCP_READ;
	return 0;
}

/* Read the two-byte length; then room for that many bytes is made. */
static int
rq_tcp_read_len(struct resolve_req *rq)
{
	ssize_t n;

	n = recv(rq->rq_fd, rq->rq_lenbuf + rq->rq_have, 2 - rq->rq_have, 0);
	if (n == -1)
		return errno == EAGAIN || errno == EINTR ? 0 : -1;
	if (n == 0)
		return -1;
	if ((rq->rq_have += (size_t)n) < 2)
		return 0;
	rq->rq_inlen = (size_t)rq->rq_lenbuf[0] << 8 | rq->rq_lenbuf[1];
	if (rq->rq_inlen < DNSMSG_HDR_LEN ||
	    (rq->rq_in = malloc(rq->rq_inlen)) == NULL)
		return -1;
	rq->rq_have = 0;
	return 1;
}

/* Read the length-prefixed answer; done (1) once all of it is in. */
static int
rq_tcp_read(struct resolve_req *rq)
{
	ssize_t n;
	int r;

	if (rq->rq_in == NULL && (r = rq_tcp_read_len(rq)) != 1)
		return r;
	n = recv(rq->rq_fd, rq->rq_in + rq->rq_have, rq->rq_inlen - rq->rq_have,
	    0);
	if (n == -1)
		return errno == EAGAIN || errno == EINTR ? 0 : -1;
	if (n == 0)
		return -1;
	if ((rq->rq_have += (size_t)n) < rq->rq_inlen)
		return 0;
	return 1;
}

static int
rq_tcp_step(struct resolve_req *rq)
{
	int err = 0;
	socklen_t elen = sizeof(err);

	switch (rq->rq_state) {
	case RQ_S_TCP_CONNECT:
		if (getsockopt(rq->rq_fd, SOL_SOCKET, SO_ERROR, &err, &elen) ==
			-1 ||
		    err != 0)
			return -1;
		rq->rq_state = RQ_S_TCP_WRITE;
		SL_FALLTHROUGH;
	case RQ_S_TCP_WRITE:
		return rq_tcp_write(rq);
	case RQ_S_TCP_READ:
		return rq_tcp_read(rq);
	default:
		return -1;
	}
}

static void
rq_tcp_cb(evutil_socket_t fd, short what, void *arg)
{
	struct resolve_req *rq = arg;
	int r;

	(void)fd;
	(void)what;
	if ((r = rq_tcp_step(rq)) == 0)
		return;
	if (r == -1) {
		rq_fail_attempt(rq);
		return;
	}
	/* One answer on a stream to server:53: a bad one ends the attempt. */
	if (rq_answer(rq, rq->rq_in, rq->rq_inlen, 1) == -1)
		rq_fail_attempt(rq);
}

/* Returns -1 when the answer was ignored, else 0 (rq may be freed). */
static int
rq_answer(struct resolve_req *rq, const unsigned char *msg, size_t len, int tcp)
{
	unsigned char addrs[RESOLVE_MAX_ADDRS][16];
	struct dnsmsg_answer a;
	enum dnsmsg_err e;
	size_t off;

	if (dnsmsg_parse(&rq->rq_q, msg, len, &a, addrs, RESOLVE_MAX_ADDRS, &e,
		&off) == -1) {
		/* The first one only: a flood must not flood the log too. */
		if (rq->rq_ignored++ == 0)
			log_debug("dns %s: answer ignored: %s at byte %zu",
			    rq->rq_name, dnsmsg_strerror(e), off);
		return -1;
	}
	if (a.da_tc) {
		if (tcp || rq_tcp_start(rq) == -1)
			rq_fail_attempt(rq);
		return 0;
	}
	switch (a.da_rcode) {
	case DNSMSG_RCODE_NOERROR:
		rq_finish(rq, RESOLVE_OK, (const unsigned char(*)[16])addrs,
		    a.da_naddrs, a.da_ttl);
		break;
	case DNSMSG_RCODE_NXDOMAIN:
		rq_finish(rq, RESOLVE_NXDOMAIN, NULL, 0, 0);
		break;
	default:
		/* SERVFAIL, REFUSED...: the next attempt may do better. */
		rq_fail_attempt(rq);
		break;
	}
	return 0;
}

static void
rq_next_attempt(struct resolve_req *rq)
{
	rq_close(rq);
	for (;;) {
		if (++rq->rq_attempt >= RESOLVE_ATTEMPTS || rs_nservers == 0) {
			rq_finish(rq, RESOLVE_FAIL, NULL, 0, 0);
			return;
		}
		if (rq->rq_attempt == 0)
			rq->rq_first = rs_next;
		rq->rq_server =
		    rs_servers[(rq->rq_first + (size_t)rq->rq_attempt) %
			rs_nservers];
		rq->rq_serverlen = ss_len(&rq->rq_server);
		if (rq_udp_start(rq) == 0)
			return;
		log_warn("dns %s: cannot send a query", rq->rq_name);
		rq_close(rq);
	}
}

static void
rq_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct resolve_req *rq = arg;

	(void)fd;
	(void)what;
	/* A server that let an attempt time out goes to the back. */
	if (rq->rq_state != RQ_S_IDLE && rs_nservers > 1)
		rs_next = (rs_next + 1) % rs_nservers;
	rq_next_attempt(rq);
}

struct resolve_req *
resolve_start(const char *name, uint16_t qtype, resolve_cb *cb, void *arg)
{
	struct resolve_req *rq;

	if (rs_base == NULL || strlen(name) > DNSMSG_NAME_MAX ||
	    (rq = calloc(1, sizeof(*rq))) == NULL)
		return NULL;
	snprintf(rq->rq_name, sizeof(rq->rq_name), "%s", name);
	rq->rq_qtype = qtype;
	rq->rq_fd = -1;
	rq->rq_attempt = -1;
	rq->rq_cb = cb;
	rq->rq_arg = arg;
	if ((rq->rq_timer = evtimer_new(rs_base, rq_timer_cb, rq)) == NULL) {
		free(rq);
		return NULL;
	}
	TAILQ_INSERT_TAIL(&rs_reqs, rq, rq_entry);
	/* The first attempt starts from the loop: no callback in here. */
	event_active(rq->rq_timer, EV_TIMEOUT, 0);
	return rq;
}
