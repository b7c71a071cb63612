/*
 * sluice exec's part of serve() (docs/exec.md): the sandboxed child with
 * the policy's listeners and the DNS stub planted in its namespace, the
 * stub served from here (each query audited as dns.query, aggregated and
 * capped per second like net.drop), signals forwarded to the child, and
 * the drain once it exits. One child per process, one event loop.
 */
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <termios.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "proxy/config/config.h"
#include "proxy/daemon/daemon.h"
#include "proxy/dns/stub.h"
#include "proxy/ops/ops.h"
#include "proxy/relay/relay.h"
#include "proxy/sandbox/sandbox.h"
#include "proxy/util/util.h"

extern char **environ;

#define EX_LISTEN_MAX    (FDPASS_MAX_FDS - 2) /* policy listeners */
#define EX_SECRETS_MAX   64
#define EX_HIDE_MAX      64
#define EX_RO_MAX        1025 /* exec.landlock.ro (1024) and the run dir */
#define EX_AGG_MAX       64   /* distinct (name, qtype, decision) per window */
#define EX_LINES_PER_SEC 16   /* dns.query lines per window, at most */
#define EX_TCP_MAX       16   /* DNS-over-TCP connections at once */
#define EX_TCP_IDLE_S    10

/* One aggregated query tuple of the current window. */
struct ex_agg {
	char ag_name[DNSSTUB_NAME_TEXT_MAX];
	uint16_t ag_qtype;
	enum dnsstub_decision ag_decision;
	uint64_t ag_count;
};

static struct {
	struct exec_run *run;
	struct proxy_env *env;
	void (*drain)(void);
	struct sandbox_child sb;
	int started;   /* sb holds a child that was not told to go */
	int gone;      /* the child was reaped */
	int go_failed; /* it could not become the command */
	int dns_fd[2];
	struct event *udp_ev, *tcp_ev, *chld_ev, *agg_ev;
	struct event *sig_ev[16];
	size_t nsig;
	struct bufferevent *tcp[EX_TCP_MAX]; /* DNS over TCP */
	struct ex_agg agg[EX_AGG_MAX];
	size_t nagg;
	uint64_t suppressed;
	struct sandbox_env envb;
} ex = { .sb = { .sb_pid = -1, .sb_sock = -1 }, .dns_fd = { -1, -1 } };

/* Add p to the hidden paths: an absolute path outside /proc. */
static void
hide_add(const char **out, size_t *n, size_t max, const char *p)
{
	if (p != NULL && p[0] == '/' && strncmp(p, "/proc/", 6) != 0 &&
	    *n < max)
		out[(*n)++] = p;
}

/* The policy's secret files, its state and audit: hidden from the child. */
static size_t
hidden_paths(const struct config *cf, const struct exec_run *xr,
    const char **out, size_t max)
{
	size_t n = 0, i, j;

	for (i = 0; i < cf->cf_nroutes; i++)
		for (j = 0; j < cf->cf_routes[i].rt_up.uc_nheaders; j++)
			hide_add(out, &n, max,
			    cf->cf_routes[i].rt_up.uc_headers[j].uh_file);
	for (i = 0; i < cf->cf_tokens.tc_nkeys; i++)
		hide_add(out, &n, max, cf->cf_tokens.tc_key_files[i]);
	hide_add(out, &n, max, cf->cf_intercept.ic_key_file);
	hide_add(out, &n, max, cf->cf_state_dir);
	hide_add(out, &n, max, cf->cf_audit.ac_path);
	for (i = 0; i < xr->xr_nhide; i++)
		hide_add(out, &n, max, xr->xr_hide[i]);
	return n;
}

/* Every injected secret's value, for the environment filter. */
static size_t
secret_values(const struct config *cf, const struct exec_run *xr, char **out,
    size_t max)
{
	size_t n = 0, i, j;

	for (i = 0; i < cf->cf_nroutes; i++)
		for (j = 0; j < cf->cf_routes[i].rt_up.uc_nheaders && n < max;
		     j++) {
			const struct upstream_header *uh =
			    &cf->cf_routes[i].rt_up.uc_headers[j];

			const char *v = (const char *)uh->uh_value;
			size_t len = uh->uh_value_len;

			if ((out[n] = strndup(v, len)) != NULL)
				n++;
			/* "Bearer KEY": KEY alone is the secret too. */
			if (len > 7 && strncasecmp(v, "Bearer ", 7) == 0 &&
			    n < max &&
			    (out[n] = strndup(v + 7, len - 7)) != NULL)
				n++;
		}
	for (i = 0; i < xr->xr_nsecrets && n < max; i++)
		if ((out[n] = strdup(xr->xr_secrets[i])) != NULL)
			n++;
	return n;
}

static void
free_secrets(char **s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		explicit_bzero(s[i], strlen(s[i]));
		free(s[i]);
	}
}

/* Append the file at path to f (a missing system store is skipped). */
static int
append_file(FILE *f, const char *path, int must)
{
	char buf[8192];
	size_t n;
	FILE *in;

	if ((in = fopen(path, "re")) == NULL)
		return must ? -1 : 0;
	while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
		if (fwrite(buf, 1, n, f) != n) {
			(void)fclose(in);
			return -1;
		}
	(void)fclose(in);
	return 0;
}

/* The command's CA bundle: the system's CAs, then sluice's (mode 0644). */
static int
write_bundle(const struct exec_run *xr, const struct config *cf, char *why,
    size_t whylen)
{
	const struct intercept_conf *ic = &cf->cf_intercept;
	const char *ca = ic->ic_ephemeral ? ic->ic_cert_out : ic->ic_cert_file;
	FILE *f;
	int fd, bad;

	if (xr->xr_bundle == NULL || ca == NULL)
		return 0;
	fd = open(xr->xr_bundle,
	    O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd == -1 || (f = fdopen(fd, "w")) == NULL) {
		snprintf(why, whylen, "%s: %s", xr->xr_bundle, strerror(errno));
		if (fd != -1)
			close(fd);
		return -1;
	}
	bad = (xr->xr_bundle_system != NULL &&
	    append_file(f, xr->xr_bundle_system, 0) == -1);
	bad |= append_file(f, ca, 1) == -1;
	bad |= fclose(f) != 0;
	if (bad) {
		snprintf(why, whylen, "%s: cannot write the CA bundle",
		    xr->xr_bundle);
		return -1;
	}
	return 0;
}

int
exec_plant(struct exec_run *xr, const struct config *cf, int **fdsp, char *why,
    size_t whylen)
{
	static struct sandbox_listen sl[FDPASS_MAX_FDS];
	static int fds[FDPASS_MAX_FDS];
	const char *hide[EX_HIDE_MAX], *ro[EX_RO_MAX];
	char *secrets[EX_SECRETS_MAX];
	struct sandbox_env_spec es;
	struct sandbox_spec sp;
	size_t i, nsec, n;
	int rc;

	ex.run = xr;
	if (cf->cf_nlisteners > EX_LISTEN_MAX) {
		snprintf(why, whylen, "exec: at most %d listeners",
		    EX_LISTEN_MAX);
		return -1;
	}
	memset(sl, 0, sizeof(sl));
	for (i = 0; i < cf->cf_nlisteners; i++) {
		const struct listener_conf *lc = &cf->cf_listeners[i];

		if (lc->lc_addr.ss_family != AF_INET) {
			snprintf(why, whylen,
			    "exec: listeners[%zu]: %s: the sandbox has IPv4 "
			    "loopback listeners only",
			    i, lc->lc_listen);
			return -1;
		}
		sl[i].sl_type = SOCK_STREAM;
		memcpy(&sl[i].sl_addr, &lc->lc_addr, sizeof(sl[i].sl_addr));
	}
	n = cf->cf_nlisteners;
	/* The DNS stub, UDP and TCP, on 127.0.0.53:53. */
	for (i = 0; i < 2; i++) {
		sl[n + i].sl_type = i == 0 ? SOCK_DGRAM : SOCK_STREAM;
		sl[n + i].sl_addr.sin_family = AF_INET;
		sl[n + i].sl_addr.sin_port = htons(53);
		sl[n + i].sl_addr.sin_addr.s_addr = htonl(0x7f000035);
	}

	if (write_bundle(xr, cf, why, whylen) == -1)
		return -1;
	nsec = secret_values(cf, xr, secrets, SL_NELEM(secrets));
	es = xr->xr_env;
	es.es_environ = environ;
	es.es_secrets = (const char *const *)secrets;
	es.es_nsecrets = nsec;
	rc = sandbox_env_build(&es, &ex.envb, why, whylen);
	free_secrets(secrets, nsec);
	if (rc == -1)
		return -1;
	for (i = 0; i < ex.envb.ev_nremoved; i++)
		fprintf(stderr,
		    "sluice: exec: %s not passed on: its value is a "
		    "credential sluice injects\n",
		    ex.envb.ev_removed[i]);

	memset(&sp, 0, sizeof(sp));
	sp.sp_argv = xr->xr_argv;
	sp.sp_envp = ex.envb.ev_env;
	sp.sp_listen = sl;
	sp.sp_nlisten = n + 2;
	sp.sp_hide = hide;
	sp.sp_nhide = hidden_paths(cf, xr, hide, SL_NELEM(hide));
	sp.sp_resolv = "nameserver 127.0.0.53\noptions edns0 trust-ad\n";
	sp.sp_uid = xr->xr_uid;
	sp.sp_gid = xr->xr_gid;
	/*
	 * The policy's exec.landlock (refused where the kernel lacks it),
	 * and the run directory the command's token and CA are in.
	 */
	sp.sp_landlock = cf->cf_exec.ec_landlock;
	sp.sp_landlock_rw = (const char *const *)cf->cf_exec.ec_rw;
	sp.sp_nlandlock_rw = cf->cf_exec.ec_nrw;
	for (i = 0; i < cf->cf_exec.ec_nro && i + 1 < SL_NELEM(ro); i++)
		ro[i] = cf->cf_exec.ec_ro[i];
	if (xr->xr_rundir != NULL)
		ro[i++] = xr->xr_rundir;
	sp.sp_landlock_ro = ro;
	sp.sp_nlandlock_ro = i;
	sp.sp_seccomp = SANDBOX_SECCOMP_NETLINK_ROUTE;
	if (sandbox_start(&sp, &ex.sb, fds, why, whylen) == -1)
		return -1;
	ex.started = 1;
	ex.dns_fd[0] = fds[n];
	ex.dns_fd[1] = fds[n + 1];
	*fdsp = fds;
	return 0;
}

void
exec_abort(void)
{
	if (ex.started) {
		sandbox_abort(&ex.sb);
		ex.started = 0;
		ex.gone = 1;
	}
}

/* A query type as the audit shows it: its mnemonic, else TYPEn. */
static const char *
qtype_name(uint16_t t, char *buf, size_t len)
{
	static const struct {
		uint16_t t;
		const char *name;
	} names[] = { { 1, "A" }, { 2, "NS" }, { 5, "CNAME" }, { 6, "SOA" },
		{ 12, "PTR" }, { 15, "MX" }, { 16, "TXT" }, { 28, "AAAA" },
		{ 33, "SRV" }, { 64, "SVCB" }, { 65, "HTTPS" },
		{ 255, "ANY" } };
	size_t i;

	for (i = 0; i < SL_NELEM(names); i++)
		if (names[i].t == t)
			return names[i].name;
	snprintf(buf, len, "TYPE%u", (unsigned)t);
	return buf;
}

/* dns.query lines: the window's tuples, at most EX_LINES_PER_SEC. */
static void
ex_agg_flush(void)
{
	struct audit *a = ex.env != NULL ? ex.env->pe_audit : NULL;
	char tbuf[16];
	size_t i;

	for (i = 0; i < ex.nagg; i++) {
		struct ex_agg *ag = &ex.agg[i];

		if (i >= EX_LINES_PER_SEC || a == NULL) {
			ex.suppressed += ag->ag_count;
			continue;
		}
		audit_begin(a, "dns.query");
		audit_add_cstr(a, "name", ag->ag_name);
		audit_add_cstr(a, "qtype",
		    qtype_name(ag->ag_qtype, tbuf, sizeof(tbuf)));
		audit_add_cstr(a, "decision",
		    dnsstub_decision_str(ag->ag_decision));
		audit_add_uint(a, "count", ag->ag_count);
		if (audit_commit(a) == -1)
			log_warnx("audit: cannot write dns.query");
	}
	if (ex.suppressed > 0)
		log_warnx("dns.query: %llu queries over the event cap were "
			  "counted, not audited",
		    (unsigned long long)ex.suppressed);
	ex.nagg = 0;
	ex.suppressed = 0;
}

static void
ex_agg_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	ex_agg_flush();
}

static void
ex_count(const unsigned char *q, const struct dnsstub_result *r)
{
	char name[DNSSTUB_NAME_TEXT_MAX];
	uint16_t qtype = r->sr_parsed ? r->sr_q.sq_qtype : 0;
	size_t i;

	if (r->sr_decision != DNSSTUB_D_ANSWER &&
	    r->sr_decision != DNSSTUB_D_NODATA)
		ex.run->xr_dns_refused++;
	if (r->sr_parsed)
		dnsstub_name_text(q, &r->sr_q, name, sizeof(name));
	else
		snprintf(name, sizeof(name), "-");
	for (i = 0; i < ex.nagg; i++)
		if (ex.agg[i].ag_qtype == qtype &&
		    ex.agg[i].ag_decision == r->sr_decision &&
		    strcmp(ex.agg[i].ag_name, name) == 0) {
			ex.agg[i].ag_count++;
			return;
		}
	if (ex.nagg == EX_AGG_MAX) {
		ex.suppressed++;
		return;
	}
	snprintf(ex.agg[ex.nagg].ag_name, sizeof(ex.agg[ex.nagg].ag_name), "%s",
	    name);
	ex.agg[ex.nagg].ag_qtype = qtype;
	ex.agg[ex.nagg].ag_decision = r->sr_decision;
	ex.agg[ex.nagg].ag_count = 1;
	ex.nagg++;
}

/* Answer one query into out (DNSSTUB_ANSWER_MAX); 0: send nothing. */
static size_t
ex_answer(const unsigned char *q, size_t n, unsigned char *out)
{
	struct dnsstub_result r;
	size_t len;

	len = dnsstub_answer(q, n, ex.run->xr_dns, ex.run->xr_ndns, out,
	    DNSSTUB_ANSWER_MAX, &r);
	ex_count(q, &r);
	return len;
}

static void
ex_udp_cb(evutil_socket_t fd, short what, void *arg)
{
	unsigned char q[DNSSTUB_QUERY_MAX + 1], out[DNSSTUB_ANSWER_MAX];
	struct sockaddr_storage peer;
	socklen_t plen;
	ssize_t n;
	size_t len;
	int i;

	(void)what;
	(void)arg;
	for (i = 0; i < 64; i++) {
		plen = sizeof(peer);
		n = recvfrom(fd, q, sizeof(q), MSG_TRUNC,
		    (struct sockaddr *)&peer, &plen);
		if (n < 0)
			return;
		/* MSG_TRUNC: n is the datagram's real length. */
		if ((len = ex_answer(q,
			 (size_t)n > sizeof(q) ? sizeof(q) : (size_t)n, out)) >
		    0)
			(void)sendto(fd, out, len, MSG_DONTWAIT,
			    (struct sockaddr *)&peer, plen);
	}
}

static void
ex_tcp_close(struct bufferevent *bev)
{
	size_t i;

	for (i = 0; i < EX_TCP_MAX; i++)
		if (ex.tcp[i] == bev)
			ex.tcp[i] = NULL;
	bufferevent_free(bev);
}

static void
ex_tcp_read_cb(struct bufferevent *bev, void *arg)
{
	struct evbuffer *in = bufferevent_get_input(bev);
	unsigned char buf[2 + DNSSTUB_QUERY_MAX], out[2 + DNSSTUB_ANSWER_MAX];
	size_t have, msglen, len;
	int f;

	(void)arg;
	for (;;) {
		have = evbuffer_get_length(in);
		if (have > sizeof(buf))
			have = sizeof(buf);
		if (evbuffer_copyout(in, buf, have) != (ev_ssize_t)have) {
			ex_tcp_close(bev);
			return;
		}
		if ((f = dnsstub_tcp_frame(buf, have, &msglen)) == -1) {
			ex_tcp_close(bev);
			return;
		}
		if (f == 0)
			return;
		evbuffer_drain(in, 2 + msglen);
		if ((len = ex_answer(buf + 2, msglen, out + 2)) > 0) {
			dnsstub_tcp_prefix(out, len);
			if (bufferevent_write(bev, out, len + 2) == -1) {
				ex_tcp_close(bev);
				return;
			}
		}
	}
}

static void
ex_tcp_event_cb(struct bufferevent *bev, short what, void *arg)
{
	(void)what;
	(void)arg;
	ex_tcp_close(bev);
}

static void
ex_tcp_accept_cb(evutil_socket_t lfd, short what, void *arg)
{
	struct timeval idle = { EX_TCP_IDLE_S, 0 };
	struct bufferevent *bev;
	size_t slot;
	int fd;

	(void)what;
	(void)arg;
	if ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) == -1)
		return;
	for (slot = 0; slot < EX_TCP_MAX && ex.tcp[slot] != NULL; slot++)
		;
	if (slot == EX_TCP_MAX ||
	    (bev = bufferevent_socket_new(ex.env->pe_base, fd,
		 BEV_OPT_CLOSE_ON_FREE)) == NULL) {
		close(fd);
		return;
	}
	ex.tcp[slot] = bev;
	bufferevent_setcb(bev, ex_tcp_read_cb, NULL, ex_tcp_event_cb, NULL);
	bufferevent_setwatermark(bev, EV_READ, 0, 2 + DNSSTUB_QUERY_MAX);
	bufferevent_set_timeouts(bev, &idle, &idle);
	if (bufferevent_enable(bev, EV_READ) == -1)
		ex_tcp_close(bev);
}

/*
 * A terminal's SIGINT, SIGQUIT and SIGWINCH go to its whole foreground
 * process group, the child included: forwarding them too would deliver
 * each twice.
 */
static int
from_terminal(int sig)
{
	if (sig != SIGINT && sig != SIGQUIT && sig != SIGWINCH)
		return 0;
	return isatty(STDIN_FILENO) && tcgetpgrp(STDIN_FILENO) == getpgrp();
}

static void
ex_signal_cb(evutil_socket_t sig, short what, void *arg)
{
	(void)what;
	(void)arg;
	if (ex.gone || from_terminal((int)sig))
		return;
	(void)kill(ex.sb.sb_pid, (int)sig);
}

static void
ex_chld_cb(evutil_socket_t sig, short what, void *arg)
{
	int st;
	pid_t p;

	(void)sig;
	(void)what;
	(void)arg;
	while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
		if (p != ex.sb.sb_pid)
			continue;
		ex.gone = 1;
		ex.run->xr_status = sandbox_exit_code(st);
		/* The command is done: stop serving its sockets, drain. */
		if (ex.udp_ev != NULL)
			event_del(ex.udp_ev);
		if (ex.tcp_ev != NULL)
			event_del(ex.tcp_ev);
		ex.drain();
	}
}

int
exec_go(struct proxy_env *env, void (*drain)(void), char *why, size_t whylen)
{
	struct timeval sec = { 1, 0 };
	size_t i;

	ex.env = env;
	ex.drain = drain;
	ex.udp_ev = event_new(env->pe_base, ex.dns_fd[0], EV_READ | EV_PERSIST,
	    ex_udp_cb, NULL);
	ex.tcp_ev = event_new(env->pe_base, ex.dns_fd[1], EV_READ | EV_PERSIST,
	    ex_tcp_accept_cb, NULL);
	ex.agg_ev = event_new(env->pe_base, -1, EV_PERSIST, ex_agg_cb, NULL);
	ex.chld_ev = evsignal_new(env->pe_base, SIGCHLD, ex_chld_cb, NULL);
	if (ex.udp_ev == NULL || ex.tcp_ev == NULL || ex.agg_ev == NULL ||
	    ex.chld_ev == NULL || event_add(ex.udp_ev, NULL) == -1 ||
	    event_add(ex.tcp_ev, NULL) == -1 ||
	    event_add(ex.agg_ev, &sec) == -1 ||
	    evsignal_add(ex.chld_ev, NULL) == -1) {
		snprintf(why, whylen, "exec: cannot watch the DNS stub");
		return -1;
	}
	for (i = 0; i < sandbox_nforwarded && i < SL_NELEM(ex.sig_ev); i++) {
		ex.sig_ev[i] = evsignal_new(env->pe_base, sandbox_forwarded[i],
		    ex_signal_cb, NULL);
		if (ex.sig_ev[i] == NULL ||
		    evsignal_add(ex.sig_ev[i], NULL) == -1) {
			snprintf(why, whylen, "exec: cannot watch signal %d",
			    sandbox_forwarded[i]);
			return -1;
		}
		ex.nsig++;
	}
	/* The child confines itself and becomes the command. */
	ex.started = 0;
	if (sandbox_go(&ex.sb, why, whylen) == -1) {
		/* It said why and exits: exec_stop takes its status. */
		ex.go_failed = 1;
		return -1;
	}
	return 0;
}

void
exec_stop(void)
{
	size_t i;
	int st;

	ex_agg_flush();
	if (!ex.gone && ex.sb.sb_pid > 0) {
		/*
		 * Leaving without the child's exit: one that failed to start
		 * the command is exiting with its own code (127 for a command
		 * not found); any other is taken with us.
		 */
		if (!ex.go_failed)
			(void)kill(ex.sb.sb_pid, SIGKILL);
		if (waitpid(ex.sb.sb_pid, &st, 0) == ex.sb.sb_pid &&
		    ex.run->xr_status < 0)
			ex.run->xr_status = sandbox_exit_code(st);
		ex.gone = 1;
	}
	if (ex.run != NULL && ex.run->xr_status < 0)
		ex.run->xr_status = SANDBOX_EXIT_SETUP;
	for (i = 0; i < ex.nsig; i++)
		event_free(ex.sig_ev[i]);
	ex.nsig = 0;
	if (ex.udp_ev != NULL)
		event_free(ex.udp_ev);
	if (ex.tcp_ev != NULL)
		event_free(ex.tcp_ev);
	if (ex.agg_ev != NULL)
		event_free(ex.agg_ev);
	if (ex.chld_ev != NULL)
		event_free(ex.chld_ev);
	ex.udp_ev = ex.tcp_ev = ex.agg_ev = ex.chld_ev = NULL;
	for (i = 0; i < EX_TCP_MAX; i++)
		if (ex.tcp[i] != NULL)
			ex_tcp_close(ex.tcp[i]);
	for (i = 0; i < 2; i++)
		if (ex.dns_fd[i] != -1) {
			close(ex.dns_fd[i]);
			ex.dns_fd[i] = -1;
		}
	if (ex.sb.sb_sock != -1)
		close(ex.sb.sb_sock);
	ex.sb.sb_sock = -1;
	sandbox_env_free(&ex.envb);
}
