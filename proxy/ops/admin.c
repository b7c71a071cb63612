/*
 * The admin socket: a unix socket (mode 0600, owned by the policy's user)
 * on which root or that user sends one command line per connection and
 * reads the answer lines until the socket closes. Commands: status, reload,
 * revoke <jti>. The command table is admin_dispatch(), which works through
 * a struct admin_ops so that it can be tested without a daemon; the
 * socket side uses the operations given to admin_open() (the daemon's
 * are in daemon.c, with admin_revoke() here).
 */
#include <sys/types.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include "proxy/config/config.h"
#include "proxy/http/http1.h"
#include "proxy/ops/ops.h"
#include "proxy/token/store.h"
#include "proxy/util/utf8.h"
#include "proxy/util/util.h"

#define ADMIN_MAX_CLIENTS 8 /* concurrent connections; more are closed */
#define ADMIN_TIMEOUT_S   5 /* to send the line, and to read the answer */

/* One connection. Owned by the client list; freed by admin_client_free. */
struct admin_client {
	TAILQ_ENTRY(admin_client) cl_entry;
	struct bufferevent *cl_bev;
	uid_t cl_uid; /* from SO_PEERCRED */
	int cl_done;  /* answered: close once the output has drained */
};

TAILQ_HEAD(admin_clients, admin_client);

static struct {
	struct evconnlistener *ad_lev;
	struct event *ad_pause; /* re-enables accepting after EMFILE */
	char *ad_path;
	uid_t ad_owner;
	const struct admin_ops *ad_ops;
	struct admin_clients ad_clients;
	size_t ad_nclients;
} admin = { .ad_clients = TAILQ_HEAD_INITIALIZER(admin.ad_clients) };

static void
admin_reply_error(struct evbuffer *out, const char *why)
{
	/* One line: an error text must not forge further answer lines. */
	evbuffer_add_printf(out, "error: %.*s\n", (int)strcspn(why, "\r\n"),
	    why);
}

/*
 * A jti on the admin line: 1 to TOKEN_MAX_STR bytes of UTF-8 without
 * spaces or control bytes (a jti with those can go in revoked_file).
 */
static int
admin_valid_jti(const char *p, size_t len)
{
	const unsigned char *u = (const unsigned char *)p;
	size_t i = 0, n;

	if (len == 0 || len > TOKEN_MAX_STR)
		return 0;
	while (i < len) {
		if (u[i] <= 0x20 || u[i] == 0x7f)
			return 0;
		if ((n = utf8_len(u + i, len - i)) == 0)
			return 0;
		i += n;
	}
	return 1;
}

/* "sandbox" and its words, split on single or repeated spaces. */
static int
admin_sandbox(const struct admin_ops *ops, const char *p, size_t len, uid_t uid,
    struct evbuffer *out)
{
	char buf[ADMIN_LINE_MAX], why[256], *argv[ADMIN_MAX_WORDS], *w;
	int argc = 0;
	size_t i;

	if (len >= sizeof(buf)) {
		admin_reply_error(out, "line too long");
		return -1;
	}
	for (i = 0; i < len; i++)
		if ((unsigned char)p[i] < 0x20 || (unsigned char)p[i] >= 0x7f) {
			admin_reply_error(out,
			    "sandbox: printable ASCII words only");
			return -1;
		}
	memcpy(buf, p, len);
	buf[len] = '\0';
	for (w = strtok(buf, " "); w != NULL; w = strtok(NULL, " ")) {
		if (argc == ADMIN_MAX_WORDS) {
			admin_reply_error(out, "sandbox: too many words");
			return -1;
		}
		argv[argc++] = w;
	}
	if (argc == 0) {
		admin_reply_error(out,
		    "usage: sandbox add ID IFACE ADDR... | sandbox del ID | "
		    "sandbox list");
		return -1;
	}
	why[0] = '\0';
	if (ops->ao_sandbox(ops->ao_arg, argc, argv, uid, out, why,
		sizeof(why)) == -1) {
		admin_reply_error(out, why[0] != '\0' ? why : "failed");
		return -1;
	}
	return 0;
}

int
admin_dispatch(const struct admin_ops *ops, const char *line, size_t len,
    uid_t uid, struct evbuffer *out)
{
	char jti[TOKEN_MAX_STR + 1], why[256];
	size_t jlen;

	if (len == 6 && memcmp(line, "status", 6) == 0) {
		ops->ao_status(ops->ao_arg, out);
		return 0;
	}
	if (len == 6 && memcmp(line, "reload", 6) == 0) {
		ops->ao_reload(ops->ao_arg);
		evbuffer_add_printf(out, "ok reload requested\n");
		return 0;
	}
	if (len >= 6 && memcmp(line, "revoke", 6) == 0 &&
	    (len == 6 || line[6] == ' ')) {
		jlen = len > 7 ? len - 7 : 0;
		if (!admin_valid_jti(line + 7, jlen)) {
			admin_reply_error(out,
			    "usage: revoke <jti> (1-128 bytes, no spaces or "
			    "control characters)");
			return -1;
		}
		memcpy(jti, line + 7, jlen);
		jti[jlen] = '\0';
		why[0] = '\0';
		if (ops->ao_revoke(ops->ao_arg, jti, uid, why, sizeof(why)) ==
		    -1) {
			admin_reply_error(out, why[0] != '\0' ? why : "failed");
			return -1;
		}
		evbuffer_add_printf(out, "ok revoked %s\n", jti);
		return 0;
	}
	if (len >= 7 && memcmp(line, "sandbox", 7) == 0 &&
	    (len == 7 || line[7] == ' ') && ops->ao_sandbox != NULL)
		return admin_sandbox(ops, line + 7, len - 7, uid, out);
	admin_reply_error(out, "unknown command");
	return -1;
}

/* Revoke for the daemon: persist it, then leave a token.revoke line. */
int
admin_revoke(struct revocations *revs, struct audit *a, const char *jti,
    uid_t uid, char *why, size_t whylen)
{
	if (revocations_add(revs, jti, why, whylen) == -1)
		return -1;
	audit_begin(a, "token.revoke");
	audit_add_cstr(a, "jti", jti);
	audit_add_uint(a, "uid", (uint64_t)uid);
	if (audit_commit(a) == -1)
		log_warnx("admin: jti revoked, but its token.revoke audit line "
			  "was not written");
	log_info("admin: revoked a jti (uid %lu)", (unsigned long)uid);
	return 0;
}

static void
admin_client_free(struct admin_client *cl)
{
	TAILQ_REMOVE(&admin.ad_clients, cl, cl_entry);
	admin.ad_nclients--;
	/*
	 * Safe from the client's own callbacks: libevent holds a reference
	 * on a bufferevent while it runs them and frees it afterwards.
	 */
	bufferevent_free(cl->cl_bev);
	free(cl);
}

/* Answer the command line in line (no newline) and close after it. */
static void
admin_client_answer(struct admin_client *cl, const char *line, size_t len)
{
	struct evbuffer *out = bufferevent_get_output(cl->cl_bev);

	if (len > 0 && line[len - 1] == '\r')
		len--;
	(void)admin_dispatch(admin.ad_ops, line, len, cl->cl_uid, out);
	cl->cl_done = 1;
	bufferevent_disable(cl->cl_bev, EV_READ);
	bufferevent_enable(cl->cl_bev, EV_WRITE);
}

static void
admin_client_fail(struct admin_client *cl, const char *why)
{
	admin_reply_error(bufferevent_get_output(cl->cl_bev), why);
	cl->cl_done = 1;
	bufferevent_disable(cl->cl_bev, EV_READ);
	bufferevent_enable(cl->cl_bev, EV_WRITE);
}

static void
admin_read_cb(struct bufferevent *bev, void *arg)
{
	struct admin_client *cl = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	struct evbuffer_ptr eol;
	char line[ADMIN_LINE_MAX];
	size_t len;

	if (cl->cl_done)
		return;
	eol = evbuffer_search_eol(in, NULL, NULL, EVBUFFER_EOL_LF);
	if (eol.pos < 0) {
		if (evbuffer_get_length(in) >= ADMIN_LINE_MAX)
			admin_client_fail(cl, "line too long");
		return;
	}
	len = (size_t)eol.pos;
	if (len >= ADMIN_LINE_MAX) {
		admin_client_fail(cl, "line too long");
		return;
	}
	evbuffer_remove(in, line, len);
	admin_client_answer(cl, line, len);
	/* An empty answer has nothing to drain: close now. */
	if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
		admin_client_free(cl);
}

static void
admin_write_cb(struct bufferevent *bev, void *arg)
{
	struct admin_client *cl = arg;

	if (cl->cl_done &&
	    evbuffer_get_length(bufferevent_get_output(bev)) == 0)
		admin_client_free(cl);
}

static void
admin_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct admin_client *cl = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	char line[ADMIN_LINE_MAX];
	size_t len;

	/* EOF after a command without a newline: still a command. */
	if ((what & BEV_EVENT_EOF) && (what & BEV_EVENT_READING) &&
	    !cl->cl_done && (len = evbuffer_get_length(in)) > 0 &&
	    len < ADMIN_LINE_MAX) {
		evbuffer_remove(in, line, len);
		admin_client_answer(cl, line, len);
		if (evbuffer_get_length(bufferevent_get_output(bev)) > 0)
			return;
	}
	admin_client_free(cl);
}

static void
admin_resume_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	if (admin.ad_lev != NULL)
		evconnlistener_enable(admin.ad_lev);
}

/* EMFILE and friends: stop accepting for a second (httpd, tmux). */
static void
admin_accept_error_cb(struct evconnlistener *lev, void *arg)
{
	struct timeval tv = { 1, 0 };

	(void)arg;
	log_warn("admin: accept");
	evconnlistener_disable(lev);
	if (admin.ad_pause != NULL)
		evtimer_add(admin.ad_pause, &tv);
}

static void
admin_accept_cb(struct evconnlistener *lev, evutil_socket_t fd,
    struct sockaddr *sa, int salen, void *arg)
{
	struct timeval tv = { ADMIN_TIMEOUT_S, 0 };
	struct admin_client *cl;
	struct ucred cr;
	socklen_t crlen = sizeof(cr);

	(void)sa;
	(void)salen;
	(void)arg;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crlen) == -1 ||
	    crlen != sizeof(cr)) {
		log_warn("admin: SO_PEERCRED");
		close(fd);
		return;
	}
	/* The socket's mode already says so; check anyway (defence in depth).
	 */
	if (cr.uid != 0 && cr.uid != admin.ad_owner) {
		log_warnx("admin: refused a connection from uid %lu",
		    (unsigned long)cr.uid);
		close(fd);
		return;
	}
	if (admin.ad_nclients >= ADMIN_MAX_CLIENTS ||
	    (cl = calloc(1, sizeof(*cl))) == NULL) {
		close(fd);
		return;
	}
	cl->cl_uid = cr.uid;
	cl->cl_bev = bufferevent_socket_new(evconnlistener_get_base(lev), fd,
	    BEV_OPT_CLOSE_ON_FREE);
	if (cl->cl_bev == NULL) {
		close(fd);
		free(cl);
		return;
	}
	TAILQ_INSERT_TAIL(&admin.ad_clients, cl, cl_entry);
	admin.ad_nclients++;
	bufferevent_setcb(cl->cl_bev, admin_read_cb, admin_write_cb,
	    admin_event_cb, cl);
	bufferevent_set_timeouts(cl->cl_bev, &tv, &tv);
	bufferevent_setwatermark(cl->cl_bev, EV_READ, 0, ADMIN_LINE_MAX);
	bufferevent_enable(cl->cl_bev, EV_READ);
}

int
admin_open(struct event_base *base, const char *path, uid_t owner,
    const struct admin_ops *ops, char *why, size_t whylen)
{
	int fd;

	if (admin.ad_lev != NULL) {
		snprintf(why, whylen, "admin.socket: already open");
		return -1;
	}
	if ((admin.ad_path = strdup(path)) == NULL) {
		snprintf(why, whylen, "admin.socket: out of memory");
		return -1;
	}
	admin.ad_owner = owner;
	admin.ad_ops = ops;
	if ((fd = unixsock_listen(path, 0600, owner, (gid_t)-1, why, whylen)) ==
	    -1)
		goto fail;
	admin.ad_lev = evconnlistener_new(base, admin_accept_cb, NULL,
	    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, -1, fd);
	if (admin.ad_lev == NULL) {
		close(fd);
		unlink(path);
		snprintf(why, whylen, "admin.socket: %s: cannot listen", path);
		goto fail;
	}
	evconnlistener_set_error_cb(admin.ad_lev, admin_accept_error_cb);
	admin.ad_pause = evtimer_new(base, admin_resume_cb, NULL);
	return 0;
fail:
	free(admin.ad_path);
	admin.ad_path = NULL;
	return -1;
}

/* A forked engine: let the admin socket go, leaving the path alone. */
void
admin_forget(void)
{
	struct admin_client *cl;

	while ((cl = TAILQ_FIRST(&admin.ad_clients)) != NULL)
		admin_client_free(cl);
	if (admin.ad_pause != NULL)
		event_free(admin.ad_pause);
	admin.ad_pause = NULL;
	if (admin.ad_lev != NULL)
		evconnlistener_free(admin.ad_lev);
	admin.ad_lev = NULL;
	free(admin.ad_path);
	admin.ad_path = NULL;
}

void
admin_close(void)
{
	char *path = admin.ad_lev != NULL && admin.ad_path != NULL ?
	    strdup(admin.ad_path) :
	    NULL;

	admin_forget();
	/* May fail once privileges are dropped; the next run cleans. */
	if (path != NULL)
		(void)unlink(path);
	free(path);
}
