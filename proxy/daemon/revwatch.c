/*
 * tokens.revoked_file, watched (DESIGN.md "Gateway identity", "Fleet"): a
 * change takes effect without a reload. inotify watches the file's
 * directory, not the file: an editor's or a Kubernetes ConfigMap/Secret
 * update replaces the file (a rename, or the swap of the "..data"
 * symlink the file's link goes through) and a watch on the old inode
 * would never see it. An event for the file's name, or for the first
 * part of where its link points (a ConfigMap's "..data"), re-reads the
 * file after a short settle (other files of the directory, such as an
 * audit log next to it, are not its business); a list that changed is
 * logged and audited. An unreadable or invalid file keeps the list in
 * force (a half-written update must not un-revoke anything) and says why.
 */
#include <sys/inotify.h>

#include <limits.h>

#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "proxy/config/config.h"
#include "proxy/daemon/daemon.h"
#include "proxy/daemon/engine.h"
#include "proxy/ops/ops.h"
#include "proxy/relay/relay.h"
#include "proxy/token/store.h"
#include "proxy/util/util.h"

#define RW_SETTLE_MS 50 /* after the last event, before reading */

static struct {
	struct proxy_env *env;
	int fd;
	int wd;
	int wd2;                  /* the directory the link resolves into */
	char rname[NAME_MAX + 1]; /* the resolved file's name there */
	char *path;
	char name[NAME_MAX + 1]; /* the file's, in its directory */
	char link[NAME_MAX + 1]; /* the first part of its link's target */
	struct event *ev;
	struct event *settle;
} rw = { .fd = -1, .wd = -1, .wd2 = -1 };

static void
rw_list_free(char **list, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		free(list[i]);
	free(list);
}

/* Drop the watcher's list: the policy's own copy is used again. */
static void
rw_forget(struct proxy_env *env)
{
	rw_list_free(env->pe_revfile, env->pe_nrevfile);
	env->pe_revfile = NULL;
	env->pe_nrevfile = 0;
	env->pe_revfile_set = 0;
}

/*
 * Through a link, the file itself sits elsewhere (a ConfigMap's
 * "..2026_.../revoked.txt"): watch that directory too, for an edit in
 * place, and move the watch when the link comes to point elsewhere.
 */
static void
rw_watch_target(void)
{
	char real[PATH_MAX], *slash;

	if (rw.wd2 != -1)
		(void)inotify_rm_watch(rw.fd, rw.wd2);
	rw.wd2 = -1;
	rw.rname[0] = '\0';
	if (rw.fd == -1 || realpath(rw.path, real) == NULL ||
	    strcmp(real, rw.path) == 0 ||
	    (slash = strrchr(real, '/')) == NULL ||
	    strlen(slash + 1) >= sizeof(rw.rname))
		return;
	memcpy(rw.rname, slash + 1, strlen(slash + 1) + 1);
	*slash = '\0';
	rw.wd2 = inotify_add_watch(rw.fd, real[0] != '\0' ? real : "/",
	    IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_MODIFY | IN_ONLYDIR);
	if (rw.wd2 == rw.wd) /* the same directory after all */
		rw.wd2 = -1;
}

static int
rw_same(char *const *a, size_t na, char *const *b, size_t nb)
{
	size_t i;

	if (na != nb)
		return 0;
	for (i = 0; i < na; i++)
		if (strcmp(a[i], b[i]) != 0)
			return 0;
	return 1;
}

static void
rw_read(void)
{
	struct proxy_env *env = rw.env;
	char **list = NULL, why[512];
	size_t n = 0;
	int same;

	if (revocations_read_file(rw.path, &list, &n, why, sizeof(why)) == -1) {
		log_warnx("tokens.revoked_file: %s (the revocations in force "
			  "stay)",
		    why);
		audit_begin(env->pe_audit, "token.revoked_file");
		audit_add_cstr(env->pe_audit, "path", rw.path);
		audit_add_cstr(env->pe_audit, "error", why);
		(void)audit_commit(env->pe_audit);
		return;
	}
	rw_watch_target();
	same = env->pe_revfile_set ?
	    rw_same(list, n, env->pe_revfile, env->pe_nrevfile) :
	    rw_same(list, n, env->pe_cf->cf_revoked, env->pe_cf->cf_nrevoked);
	rw_list_free(env->pe_revfile, env->pe_nrevfile);
	env->pe_revfile = list;
	env->pe_nrevfile = n;
	env->pe_revfile_set = 1;
	if (same)
		return;
	engine_revfile(list, n);
	log_info("tokens.revoked_file: %s: %zu revoked", rw.path, n);
	audit_begin(env->pe_audit, "token.revoked_file");
	audit_add_cstr(env->pe_audit, "path", rw.path);
	audit_add_uint(env->pe_audit, "entries", (uint64_t)n);
	(void)audit_commit(env->pe_audit);
}

static void
rw_settle_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	rw_read();
}

static void
rw_event_cb(evutil_socket_t fd, short what, void *arg)
{
	char buf[4096]
	    __attribute__((aligned(__alignof__(struct inotify_event))));
	struct timeval tv = { 0, (suseconds_t)RW_SETTLE_MS * 1000 };
	const struct inotify_event *ie;
	ssize_t n;
	size_t off;
	int any = 0;

	(void)what;
	(void)arg;
	/* What happened does not matter, only to which name. */
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		for (off = 0; off + sizeof(*ie) <= (size_t)n;
		     off += sizeof(*ie) + ie->len) {
			ie = (const struct inotify_event *)(buf + off);
			if (off + sizeof(*ie) + ie->len > (size_t)n)
				break;
			if (ie->wd == rw.wd2 && rw.wd2 != -1) {
				if (ie->len == 0 ||
				    strcmp(ie->name, rw.rname) == 0)
					any = 1;
			} else if (ie->len == 0 || (ie->mask & IN_Q_OVERFLOW) ||
			    strcmp(ie->name, rw.name) == 0 ||
			    (rw.link[0] != '\0' &&
				strcmp(ie->name, rw.link) == 0))
				any = 1;
		}
	if (n == -1 && errno != EAGAIN && errno != EINTR)
		log_warn("tokens.revoked_file: inotify");
	if (any && rw.settle != NULL)
		evtimer_add(rw.settle, &tv);
}

void
revwatch_stop(void)
{
	if (rw.ev != NULL)
		event_free(rw.ev);
	if (rw.settle != NULL)
		event_free(rw.settle);
	if (rw.fd != -1)
		close(rw.fd);
	free(rw.path);
	rw.ev = rw.settle = NULL;
	rw.fd = rw.wd = rw.wd2 = -1;
	rw.path = NULL;
	if (rw.env != NULL)
		rw_forget(rw.env);
}

int
revwatch_start(struct proxy_env *env, char *why, size_t whylen)
{
	const char *file = env->pe_cf->cf_tokens.tc_revoked_file;
	char *copy, *dir;

	revwatch_stop();
	rw.env = env;
	if (file == NULL)
		return 0;
	if ((rw.path = strdup(file)) == NULL || (copy = strdup(file)) == NULL) {
		snprintf(why, whylen, "tokens.revoked_file: out of memory");
		return -1;
	}
	snprintf(rw.name, sizeof(rw.name), "%s",
	    strrchr(file, '/') != NULL ? strrchr(file, '/') + 1 : file);
	rw.link[0] = '\0';
	{
		char target[PATH_MAX];
		ssize_t tl = readlink(file, target, sizeof(target) - 1);

		/* "..data/revoked.txt": the swap renames "..data". */
		if (tl > 0 && target[0] != '/') {
			target[tl] = '\0';
			target[strcspn(target, "/")] = '\0';
			if (strlen(target) < sizeof(rw.link))
				memcpy(rw.link, target, strlen(target) + 1);
		}
	}
	dir = dirname(copy);
	rw.fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (rw.fd != -1)
		rw.wd = inotify_add_watch(rw.fd, dir,
		    IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE |
			IN_DELETE | IN_MODIFY | IN_ATTRIB | IN_DELETE_SELF |
			IN_MOVE_SELF | IN_ONLYDIR);
	if (rw.fd == -1 || rw.wd == -1) {
		snprintf(why, whylen, "tokens.revoked_file: watching %s: %s",
		    dir, strerror(errno));
		free(copy);
		revwatch_stop();
		return -1;
	}
	free(copy);
	rw_watch_target();
	rw.ev = event_new(env->pe_base, rw.fd, EV_READ | EV_PERSIST,
	    rw_event_cb, NULL);
	rw.settle = evtimer_new(env->pe_base, rw_settle_cb, NULL);
	if (rw.ev == NULL || rw.settle == NULL ||
	    event_add(rw.ev, NULL) == -1) {
		snprintf(why, whylen,
		    "tokens.revoked_file: event setup failed");
		revwatch_stop();
		return -1;
	}
	return 0;
}
