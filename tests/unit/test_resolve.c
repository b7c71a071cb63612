/*
 * Unit tests for the stub resolver (proxy/resolve.c) against scripted
 * servers on 127.0.0.1 in the same event loop: a forged answer from the
 * right address but another port never arrives (connected socket), answers
 * that fail the checks are ignored and the real one still counts, TC makes
 * it ask over TCP, a silent server is rotated away from, NXDOMAIN is
 * reported, a cancelled query never calls back, resolv.conf is read.
 */
#include <sys/socket.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/event.h>

#include "proxy/dns/dnsmsg.h"
#include "proxy/proxy.h"

enum script {
	S_GOOD = 0, /* answer 198.18.0.2 */
	S_FORGE,    /* forge from another port, a bad id, then the truth */
	S_TC,       /* TC over UDP; the answer over TCP */
	S_SILENT,   /* never answer */
	S_NX        /* NXDOMAIN */
};

struct server {
	int udp, tcp;
	struct sockaddr_storage addr;
	enum script script;
	int queries, tcp_queries;
	struct event *ev, *tev, *cev;
	unsigned char in[600]; /* a TCP query, framed */
	size_t have;
};

struct result {
	int calls;
	enum resolve_status st;
	unsigned char addrs[RESOLVE_MAX_ADDRS][16];
	size_t n;
	uint32_t ttl;
};

static struct event_base *base;
static struct server srv[2];

/* The answer to query q (len bytes): its question, then one A record. */
static size_t
answer(const unsigned char *q, size_t len, unsigned flags, int with_a,
    const unsigned char ip[4], unsigned char *out)
{
	static const unsigned char rr[] = { 0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 30,
		0, 4 };
	size_t n = len;

	memcpy(out, q, len);
	out[2] = (unsigned char)(flags >> 8);
	out[3] = (unsigned char)flags;
	out[7] = with_a ? 1 : 0;
	if (with_a) {
		memcpy(out + n, rr, sizeof(rr));
		memcpy(out + n + sizeof(rr), ip, 4);
		n += sizeof(rr) + 4;
	}
	return n;
}

static void
server_udp_cb(evutil_socket_t fd, short what, void *arg)
{
	static const unsigned char real[4] = { 198, 18, 0, 2 };
	static const unsigned char forged[4] = { 198, 18, 0, 66 };
	struct server *s = arg;
	struct sockaddr_storage peer;
	socklen_t plen = sizeof(peer);
	unsigned char q[512], out[600];
	ssize_t n;
	size_t m;
	int f;

	(void)what;
	n = recvfrom(fd, q, sizeof(q), 0, (struct sockaddr *)&peer, &plen);
	if (n < DNSMSG_HDR_LEN)
		return;
	s->queries++;
	switch (s->script) {
	case S_GOOD:
		m = answer(q, (size_t)n, 0x8180, 1, real, out);
		(void)sendto(fd, out, m, 0, (struct sockaddr *)&peer, plen);
		break;
	case S_FORGE:
		/* A perfect answer, but from another port of the address. */
		f = socket(AF_INET, SOCK_DGRAM, 0);
		assert_true(f >= 0);
		m = answer(q, (size_t)n, 0x8180, 1, forged, out);
		assert_int_equal(sendto(f, out, m, 0, (struct sockaddr *)&peer,
				     plen),
		    (ssize_t)m);
		close(f);
		/* From port 53's stand-in: a wrong id, a wrong case. */
		out[0] ^= 0x55;
		(void)sendto(fd, out, m, 0, (struct sockaddr *)&peer, plen);
		out[0] ^= 0x55;
		out[13] ^= 0x20;
		(void)sendto(fd, out, m, 0, (struct sockaddr *)&peer, plen);
		/* Then the truth. */
		m = answer(q, (size_t)n, 0x8180, 1, real, out);
		(void)sendto(fd, out, m, 0, (struct sockaddr *)&peer, plen);
		break;
	case S_TC:
		m = answer(q, (size_t)n, 0x8380, 0, NULL, out);
		(void)sendto(fd, out, m, 0, (struct sockaddr *)&peer, plen);
		break;
	case S_SILENT:
		break;
	case S_NX:
		m = answer(q, (size_t)n, 0x8183, 0, NULL, out);
		(void)sendto(fd, out, m, 0, (struct sockaddr *)&peer, plen);
		break;
	}
}

/* TCP: one framed query per connection, read without blocking the loop. */
static void
server_conn_cb(evutil_socket_t fd, short what, void *arg)
{
	static const unsigned char real[4] = { 198, 18, 0, 3 };
	struct server *s = arg;
	unsigned char out[2 + 600];
	size_t m;
	ssize_t n;

	(void)what;
	n = recv(fd, s->in + s->have, sizeof(s->in) - s->have, 0);
	if (n > 0)
		s->have += (size_t)n;
	if (n > 0 &&
	    (s->have < 2 || s->have < 2 + (size_t)(s->in[0] << 8 | s->in[1])))
		return;
	if (s->have > 2 + DNSMSG_HDR_LEN) {
		s->tcp_queries++;
		m = answer(s->in + 2, s->have - 2, 0x8180, 1, real, out + 2);
		out[0] = (unsigned char)(m >> 8);
		out[1] = (unsigned char)m;
		/* In two pieces: the reader must reassemble. */
		(void)send(fd, out, 1, 0);
		usleep(1000);
		(void)send(fd, out + 1, m + 1, 0);
	}
	event_free(s->cev);
	s->cev = NULL;
	close(fd);
}

static void
server_tcp_cb(evutil_socket_t fd, short what, void *arg)
{
	struct server *s = arg;
	int c;

	(void)what;
	if (s->cev != NULL || (c = accept(fd, NULL, NULL)) == -1)
		return;
	s->have = 0;
	s->cev = event_new(base, c, EV_READ | EV_PERSIST, server_conn_cb, s);
	assert_non_null(s->cev);
	assert_int_equal(event_add(s->cev, NULL), 0);
}

static void
server_open(struct server *s, enum script sc)
{
	struct sockaddr_in *sin = (struct sockaddr_in *)&s->addr;
	socklen_t len = sizeof(*sin);
	int one = 1;

	memset(s, 0, sizeof(*s));
	s->script = sc;
	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	/* A TCP port first, then the UDP socket on the same number. */
	s->tcp = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(s->tcp >= 0);
	(void)setsockopt(s->tcp, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	assert_int_equal(bind(s->tcp, (struct sockaddr *)sin, len), 0);
	assert_int_equal(getsockname(s->tcp, (struct sockaddr *)sin, &len), 0);
	assert_int_equal(listen(s->tcp, 4), 0);
	s->udp = socket(AF_INET, SOCK_DGRAM, 0);
	assert_true(s->udp >= 0);
	assert_int_equal(bind(s->udp, (struct sockaddr *)sin, len), 0);
	s->ev = event_new(base, s->udp, EV_READ | EV_PERSIST, server_udp_cb, s);
	s->tev =
	    event_new(base, s->tcp, EV_READ | EV_PERSIST, server_tcp_cb, s);
	assert_non_null(s->ev);
	assert_non_null(s->tev);
	assert_int_equal(event_add(s->ev, NULL), 0);
	assert_int_equal(event_add(s->tev, NULL), 0);
}

static void
server_close(struct server *s)
{
	event_free(s->ev);
	event_free(s->tev);
	close(s->udp);
	close(s->tcp);
}

static void
result_cb(enum resolve_status st, const unsigned char (*addrs)[16], size_t n,
    uint32_t ttl, void *arg)
{
	struct result *r = arg;

	r->calls++;
	r->st = st;
	r->n = n;
	r->ttl = ttl;
	if (n > 0)
		memcpy(r->addrs, addrs, n * 16);
	event_base_loopbreak(base);
}

static void
run_for(int seconds)
{
	struct timeval tv = { seconds, 0 };

	event_base_loopexit(base, &tv);
	event_base_dispatch(base);
}

static int
setup(void **state)
{
	(void)state;
	base = event_base_new();
	return base != NULL && resolve_init(base) == 0 ? 0 : -1;
}

static int
teardown(void **state)
{
	(void)state;
	resolve_shutdown();
	event_base_free(base);
	return 0;
}

static void
one_server(enum script sc)
{
	server_open(&srv[0], sc);
	resolve_set_servers(&srv[0].addr, 1);
}

static void
test_good(void **state)
{
	struct result r = { 0 };

	(void)state;
	one_server(S_GOOD);
	assert_non_null(
	    resolve_start("up.test", DNSMSG_QTYPE_A, result_cb, &r));
	/* Never called back from inside resolve_start(). */
	assert_int_equal(r.calls, 0);
	run_for(5);
	assert_int_equal(r.calls, 1);
	assert_int_equal(r.st, RESOLVE_OK);
	assert_int_equal(r.n, 1);
	assert_memory_equal(r.addrs[0], "\xc6\x12\x00\x02", 4);
	assert_int_equal(r.ttl, 30);
	server_close(&srv[0]);
}

static void
test_forged_ignored(void **state)
{
	struct result r = { 0 };

	(void)state;
	one_server(S_FORGE);
	assert_non_null(
	    resolve_start("up.test", DNSMSG_QTYPE_A, result_cb, &r));
	run_for(5);
	assert_int_equal(r.calls, 1);
	assert_int_equal(r.st, RESOLVE_OK);
	assert_int_equal(r.n, 1);
	/* The answer from the server's own port, not the forged one. */
	assert_memory_equal(r.addrs[0], "\xc6\x12\x00\x02", 4);
	assert_int_equal(srv[0].queries, 1);
	server_close(&srv[0]);
}

static void
test_tc_tcp(void **state)
{
	struct result r = { 0 };

	(void)state;
	one_server(S_TC);
	assert_non_null(
	    resolve_start("up.test", DNSMSG_QTYPE_A, result_cb, &r));
	run_for(5);
	assert_int_equal(r.calls, 1);
	assert_int_equal(r.st, RESOLVE_OK);
	assert_int_equal(srv[0].tcp_queries, 1);
	assert_int_equal(r.n, 1);
	assert_memory_equal(r.addrs[0], "\xc6\x12\x00\x03", 4);
	server_close(&srv[0]);
}

static void
test_nxdomain(void **state)
{
	struct result r = { 0 };

	(void)state;
	one_server(S_NX);
	assert_non_null(
	    resolve_start("up.test", DNSMSG_QTYPE_AAAA, result_cb, &r));
	run_for(5);
	assert_int_equal(r.calls, 1);
	assert_int_equal(r.st, RESOLVE_NXDOMAIN);
	assert_int_equal(r.n, 0);
	server_close(&srv[0]);
}

static void
test_rotation(void **state)
{
	struct sockaddr_storage ss[2];
	struct result r = { 0 };

	(void)state;
	server_open(&srv[0], S_SILENT);
	server_open(&srv[1], S_GOOD);
	ss[0] = srv[0].addr;
	ss[1] = srv[1].addr;
	resolve_set_servers(ss, 2);
	assert_non_null(
	    resolve_start("up.test", DNSMSG_QTYPE_A, result_cb, &r));
	run_for(8);
	assert_int_equal(r.calls, 1);
	assert_int_equal(r.st, RESOLVE_OK);
	assert_int_equal(srv[0].queries, 1);
	assert_int_equal(srv[1].queries, 1);
	server_close(&srv[0]);
	server_close(&srv[1]);
}

static void
test_cancel_and_no_server(void **state)
{
	struct resolve_req *rq;
	struct result r = { 0 };

	(void)state;
	one_server(S_GOOD);
	rq = resolve_start("up.test", DNSMSG_QTYPE_A, result_cb, &r);
	assert_non_null(rq);
	resolve_cancel(rq);
	run_for(1);
	assert_int_equal(r.calls, 0);
	server_close(&srv[0]);
	/* No server: a failure, from the loop. */
	resolve_set_servers(NULL, 0);
	assert_non_null(
	    resolve_start("up.test", DNSMSG_QTYPE_A, result_cb, &r));
	assert_int_equal(r.calls, 0);
	run_for(1);
	assert_int_equal(r.calls, 1);
	assert_int_equal(r.st, RESOLVE_FAIL);
	/* A name we do not ask about fails the same way. */
	one_server(S_GOOD);
	assert_non_null(resolve_start("a b", DNSMSG_QTYPE_A, result_cb, &r));
	run_for(1);
	assert_int_equal(r.calls, 2);
	assert_int_equal(r.st, RESOLVE_FAIL);
	assert_int_equal(srv[0].queries, 0);
	server_close(&srv[0]);
}

static void
test_resolv_conf(void **state)
{
	char path[] = "/tmp/sluice-resolv-XXXXXX";
	struct sockaddr_storage ss[4];
	struct sockaddr_in *sin = (struct sockaddr_in *)&ss[0];
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss[1];
	FILE *f;
	size_t n;
	int fd;

	(void)state;
	fd = mkstemp(path);
	assert_true(fd >= 0);
	f = fdopen(fd, "w");
	assert_non_null(f);
	fputs("# comment\nsearch example.com\nnameserver 198.18.0.53\n"
	      "nameserver\tbad.host\nnameserver 2001:2::53 # trailing\n"
	      "nameserver 198.18.0.54\nnameserver 198.18.0.55\n",
	    f);
	fclose(f);
	assert_int_equal(resolve_conf_read(path, ss, 3, &n), 0);
	unlink(path);
	assert_int_equal(n, 3);
	assert_int_equal(sin->sin_family, AF_INET);
	assert_int_equal(ntohs(sin->sin_port), 53);
	assert_int_equal(ntohl(sin->sin_addr.s_addr), 0xc6120035);
	assert_int_equal(sin6->sin6_family, AF_INET6);
	assert_int_equal(ntohs(sin6->sin6_port), 53);
	assert_int_equal(resolve_conf_read("/nonexistent/resolv.conf", ss, 3,
			     &n),
	    -1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_good),
		cmocka_unit_test(test_forged_ignored),
		cmocka_unit_test(test_tc_tcp),
		cmocka_unit_test(test_nxdomain),
		cmocka_unit_test(test_rotation),
		cmocka_unit_test(test_cancel_and_no_server),
		cmocka_unit_test(test_resolv_conf),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
