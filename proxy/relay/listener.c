/*
 * The listening sockets: bound once at start-up (before privileges are
 * dropped), accepted from the event loop. A full process fd table pauses
 * accepting for a second instead of spinning (httpd, tmux); a full
 * max_connections, or per_client_connections from one client address,
 * answers 503 too_many_connections and closes.
 *
 * With several engines (workers), each listener is `workers` sockets
 * bound to the same address with SO_REUSEPORT, a shard per engine: the
 * kernel spreads connections over them by their addresses. On one shared
 * socket every engine wakes for each connection and the one that runs
 * first takes it, so all of them can go to one engine. An engine that
 * died leaves its shard's connections in the backlog (the parent keeps
 * the socket) for the engine that takes its place. Only a socket of the
 * same effective uid (root, here) can join the group.
 */
#include <sys/socket.h>

#include <netinet/in.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "proxy/config/config.h"
#include "proxy/dns/resolve.h"
#include "proxy/http/http1.h"
#include "proxy/ops/ops.h"
#include "proxy/policy/policy.h"
#include "proxy/relay/relay.h"
#include "proxy/token/store.h"
#include "proxy/util/util.h"

#define LISTENER_BACKLOG    4096
#define LISTENER_ACCEPT_MAX 128 /* accepts per callback */

struct listener {
	struct proxy_env *li_env; /* what its connections are accepted into */
	int li_fd;
	size_t li_idx;     /* index into cf_listeners */
	unsigned li_shard; /* which of the listener's SO_REUSEPORT sockets */
	struct event *li_ev;
	struct sockaddr_storage li_addr;
	socklen_t li_addrlen;
};

static struct listener *listeners;
static size_t nlisteners; /* sockets: nconf of them per shard */
static size_t nconf;      /* cf_listeners entries */
static unsigned nshards;
static struct event *backoff_ev;

static void
listener_backoff_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	listener_enable_all(1);
}

static void
listener_accept_cb(evutil_socket_t lfd, short what, void *arg)
{
	struct listener *li = arg;
	struct proxy_env *env = li->li_env;
	const struct limits *l = &env->pe_cf->cf_limits;
	struct sockaddr_storage ss;
	socklen_t len;
	int fd, i;

	(void)what;
	for (i = 0; i < LISTENER_ACCEPT_MAX; i++) {
		len = sizeof(ss);
		fd = accept4(lfd, (struct sockaddr *)&ss, &len,
		    SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd == -1) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EMFILE || errno == ENFILE) {
				struct timeval tv = { 1, 0 };

				log_warn("accept: pausing for a second");
				listener_enable_all(0);
				evtimer_add(backoff_ev, &tv);
			} else if (errno != EAGAIN)
				log_warn("accept");
			return;
		}
		/* Over every engine (workers): the gauge is shared. */
		if ((uint64_t)metrics_conn_active_total() >= l->max_connections)
			conn_refuse(env, fd, li->li_idx, (struct sockaddr *)&ss,
			    CONN_REFUSE_ALL);
		else if (conn_sandbox_full(env, (struct sockaddr *)&ss))
			conn_refuse(env, fd, li->li_idx, (struct sockaddr *)&ss,
			    CONN_REFUSE_SANDBOX);
		else if (clients_conns((struct sockaddr *)&ss) >=
		    l->per_client_connections)
			conn_refuse(env, fd, li->li_idx, (struct sockaddr *)&ss,
			    CONN_REFUSE_CLIENT);
		else if (conn_accept(env, fd, li->li_idx,
			     (struct sockaddr *)&ss, len) == -1)
			log_warnx("accept: out of memory"); /* fd is closed */
	}
}

static int
listener_socket(const struct listener *li, int reuseport)
{
	int fd, one = 1;

	fd = socket(li->li_addr.ss_family,
	    SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd == -1)
		return -1;
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (li->li_addr.ss_family == AF_INET6)
		(void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one,
		    sizeof(one));
	if ((reuseport &&
		setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) ==
		    -1) ||
	    bind(fd, (const struct sockaddr *)&li->li_addr, li->li_addrlen) ==
		-1) {
		int e = errno;

		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/*
 * With shards, the first is preceded by a bind without SO_REUSEPORT: a
 * port another process holds (a second sluice, reuseport or not) is
 * refused with EADDRINUSE, as with one socket, instead of the group
 * taking the newcomer in and sharing the clients.
 */
static int
listener_bind(struct listener *li, int reuseport)
{
	int probe;

	if (reuseport && li->li_shard == 0) {
		if ((probe = listener_socket(li, 0)) == -1)
			return -1;
		close(probe);
	}
	if ((li->li_fd = listener_socket(li, reuseport)) == -1 ||
	    listen(li->li_fd, LISTENER_BACKLOG) == -1)
		return -1;
	return 0;
}

int
listener_open_all(struct proxy_env *env, const int *fds, char *why,
    size_t whylen)
{
	struct event_base *base = env->pe_base;
	const struct config *cf = env->pe_cf;
	size_t i, n;

	/* Planted (sluice exec): one socket each, bound and listening. */
	nshards = fds != NULL || cf->cf_workers < 2 ? 1 : cf->cf_workers;
	if (nshards > CONFIG_WORKERS_MAX)
		nshards = CONFIG_WORKERS_MAX;
	nconf = cf->cf_nlisteners;
	n = nconf * nshards;
	if ((listeners = calloc(n == 0 ? 1 : n, sizeof(*listeners))) == NULL) {
		snprintf(why, whylen, "out of memory");
		return -1;
	}
	if ((backoff_ev = evtimer_new(base, listener_backoff_cb, NULL)) ==
	    NULL) {
		snprintf(why, whylen, "out of memory");
		return -1;
	}
	for (i = 0; i < n; i++) {
		const struct listener_conf *lc = &cf->cf_listeners[i / nshards];
		struct listener *li = &listeners[i];

		li->li_env = env;
		li->li_idx = i / nshards;
		li->li_shard = (unsigned)(i % nshards);
		li->li_addr = lc->lc_addr;
		li->li_addrlen = lc->lc_addrlen;
		li->li_fd = fds != NULL ? fds[i] : -1;
		nlisteners++;
		if (fds == NULL && listener_bind(li, nshards > 1) == -1)
			goto fail;
		conn_sock_tune(li->li_fd); /* passed to what it accepts */
		li->li_ev = event_new(base, li->li_fd, EV_READ | EV_PERSIST,
		    listener_accept_cb, li);
		if (li->li_ev == NULL || event_add(li->li_ev, NULL) == -1) {
			errno = ENOMEM;
			goto fail;
		}
		continue;
fail:
		if (nshards > 1)
			snprintf(why, whylen,
			    "listeners[%zu] (socket %u of %u): "
			    "%s: %s",
			    li->li_idx, li->li_shard + 1, nshards,
			    lc->lc_listen, strerror(errno));
		else
			snprintf(why, whylen, "listeners[%zu]: %s: %s",
			    li->li_idx, lc->lc_listen, strerror(errno));
		return -1;
	}
	return 0;
}

void
listener_keep_shard(unsigned pos, unsigned workers)
{
	unsigned m = workers < nshards ? workers : nshards;
	size_t i;

	if (m < 2)
		return;
	for (i = 0; i < nlisteners; i++) {
		struct listener *li = &listeners[i];

		if (li->li_shard % m == pos % m)
			continue;
		if (li->li_ev != NULL)
			event_free(li->li_ev);
		li->li_ev = NULL;
		if (li->li_fd != -1)
			close(li->li_fd);
		li->li_fd = -1;
	}
}

void
listener_enable_all(int on)
{
	size_t i;

	for (i = 0; i < nlisteners; i++) {
		if (listeners[i].li_ev == NULL)
			continue;
		if (on)
			event_add(listeners[i].li_ev, NULL);
		else
			event_del(listeners[i].li_ev);
	}
}

void
listener_close_all(void)
{
	size_t i;

	for (i = 0; i < nlisteners; i++) {
		if (listeners[i].li_ev != NULL)
			event_free(listeners[i].li_ev);
		if (listeners[i].li_fd != -1)
			close(listeners[i].li_fd);
	}
	free(listeners);
	listeners = NULL;
	nlisteners = nconf = 0;
	nshards = 0;
	if (backoff_ev != NULL) {
		event_free(backoff_ev);
		backoff_ev = NULL;
	}
}

int
listener_same(const struct config *cf)
{
	size_t i;

	if (cf->cf_nlisteners != nconf)
		return 0;
	for (i = 0; i < nlisteners; i++) {
		const struct listener_conf *lc =
		    &cf->cf_listeners[listeners[i].li_idx];

		if (lc->lc_addrlen != listeners[i].li_addrlen ||
		    memcmp(&lc->lc_addr, &listeners[i].li_addr,
			listeners[i].li_addrlen) != 0)
			return 0;
	}
	return 1;
}
