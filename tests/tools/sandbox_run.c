/*
 * sandbox_run: runs a command in the full confinement of proxy/sandbox
 * (what `sluice exec` builds on), for tests/integration/test_sandbox.py and
 * tests/bench/sandbox-start.sh.
 *
 *   sandbox_run [--listen tcp|udp:ADDR:PORT]... [--hide PATH]...
 *               [--resolv TEXT] [--user UID:GID] [--landlock]
 *               [--landlock-rw PATH]... [--landlock-ro PATH]...
 *               [--no-netlink] [--token T [--secret S]... [--clean-env]
 *               [--profile anthropic|openai --base-url URL]]
 *               [--dns HOST=A.B.C.D]... -- CMD [ARG]...
 *
 * Each planted socket is served from outside, in a thread: a TCP
 * connection gets "outside <port> fd <n>\n" and is closed, a UDP datagram
 * gets "pong:" and the datagram back. With --dns, sockets on port 53 are
 * the DNS stub instead (proxy/dns/stub.c, UDP and TCP), and each query is
 * logged on stderr as "dns.query NAME QTYPE DECISION". With --token the
 * environment comes from sandbox_env_build (proxy 127.0.0.1:3128, CA
 * /etc/ssl/certs/ ca-certificates.crt, token file /run/sluice-token); otherwise
 * the command gets this process's environment. Exits with the command's status
 * (128+N on signal N), or 125 when the sandbox could not start.
 */
#include <sys/types.h>
#include <sys/socket.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proxy/util/util.h"
#include "proxy/dns/stub.h"
#include "proxy/sandbox/sandbox.h"

extern char **environ;

#define MAXLIST 32

static struct sandbox_listen listen_[MAXLIST];
static size_t nlisten;
static int fds[MAXLIST];
static SL_NORETURN void usage(void);

static struct dnsstub_host dns[MAXLIST];
static size_t ndns;

static void
parse_dns(char *arg)
{
	char *eq = strchr(arg, '=');

	if (eq == NULL || ndns == MAXLIST)
		usage();
	*eq = '\0';
	dns[ndns].dh_name = arg;
	if (inet_pton(AF_INET, eq + 1, dns[ndns].dh_addr) != 1)
		usage();
	ndns++;
}

/* Answer one query; the answer's length (0: nothing to send). */
static size_t
stub(const unsigned char *q, size_t n, unsigned char *out)
{
	struct dnsstub_result r;
	char name[DNSSTUB_NAME_TEXT_MAX];
	size_t len;

	len = dnsstub_answer(q, n, dns, ndns, out, DNSSTUB_ANSWER_MAX, &r);
	if (r.sr_parsed)
		dnsstub_name_text(q, &r.sr_q, name, sizeof(name));
	else
		snprintf(name, sizeof(name), "-");
	fprintf(stderr, "dns.query %s %u %s\n", name,
	    r.sr_parsed ? r.sr_q.sq_qtype : 0,
	    dnsstub_decision_str(r.sr_decision));
	return len;
}

/* A TCP DNS connection: framed queries until EOF or a bad frame. */
static void
stub_tcp(int c)
{
	unsigned char in[2 + DNSSTUB_QUERY_MAX], out[2 + DNSSTUB_ANSWER_MAX];
	size_t have = 0, n, len;
	ssize_t r;
	int f;

	for (;;) {
		while ((f = dnsstub_tcp_frame(in, have, &n)) == 1) {
			if ((len = stub(in + 2, n, out + 2)) > 0) {
				dnsstub_tcp_prefix(out, len);
				(void)!write(c, out, len + 2);
			}
			memmove(in, in + 2 + n, have - 2 - n);
			have -= 2 + n;
		}
		if (f == -1 || have == sizeof(in))
			return;
		if ((r = read(c, in + have, sizeof(in) - have)) <= 0)
			return;
		have += (size_t)r;
	}
}

static SL_NORETURN void
usage(void)
{
	fprintf(stderr, "usage: sandbox_run [options] -- CMD [ARG]...\n");
	exit(2);
}

static void
parse_listen(const char *arg)
{
	char buf[128], *addr, *port;
	struct sandbox_listen *l;

	if (nlisten == MAXLIST || strlen(arg) >= sizeof(buf))
		usage();
	snprintf(buf, sizeof(buf), "%s", arg);
	l = &listen_[nlisten];
	memset(l, 0, sizeof(*l));
	if (strncmp(buf, "tcp:", 4) == 0)
		l->sl_type = SOCK_STREAM;
	else if (strncmp(buf, "udp:", 4) == 0)
		l->sl_type = SOCK_DGRAM;
	else
		usage();
	addr = buf + 4;
	if ((port = strrchr(addr, ':')) == NULL)
		usage();
	*port++ = '\0';
	l->sl_addr.sin_family = AF_INET;
	l->sl_addr.sin_port = htons((uint16_t)atoi(port));
	if (inet_pton(AF_INET, addr, &l->sl_addr.sin_addr) != 1)
		usage();
	nlisten++;
}

static int
is_dns(size_t i)
{
	return ndns > 0 && ntohs(listen_[i].sl_addr.sin_port) == 53;
}

static void *
serve(void *arg)
{
	struct pollfd pfd[MAXLIST];
	struct sockaddr_in peer;
	socklen_t plen;
	char buf[DNSSTUB_QUERY_MAX + 1], msg[DNSSTUB_QUERY_MAX + 8];
	size_t i;
	ssize_t n;
	int c;

	(void)arg;
	for (i = 0; i < nlisten; i++) {
		pfd[i].fd = fds[i];
		pfd[i].events = POLLIN;
	}
	for (;;) {
		if (poll(pfd, nlisten, -1) == -1) {
			if (errno == EINTR)
				continue;
			return NULL;
		}
		for (i = 0; i < nlisten; i++) {
			if (!(pfd[i].revents & POLLIN))
				continue;
			if (listen_[i].sl_type == SOCK_STREAM) {
				if ((c = accept4(fds[i], NULL, NULL, 0)) == -1)
					continue;
				if (is_dns(i)) {
					stub_tcp(c);
					close(c);
					continue;
				}
				n = snprintf(msg, sizeof(msg),
				    "outside %u fd %d\n",
				    ntohs(listen_[i].sl_addr.sin_port), fds[i]);
				(void)!write(c, msg, (size_t)n);
				close(c);
				continue;
			}
			plen = sizeof(peer);
			if ((n = recvfrom(fds[i], buf, sizeof(buf), 0,
				 (struct sockaddr *)&peer, &plen)) < 0)
				continue;
			if (is_dns(i)) {
				size_t alen = stub((unsigned char *)buf,
				    (size_t)n, (unsigned char *)msg);

				if (alen > 0)
					(void)sendto(fds[i], msg, alen, 0,
					    (struct sockaddr *)&peer, plen);
				continue;
			}
			memcpy(msg, "pong:", 5);
			memcpy(msg + 5, buf, (size_t)n);
			(void)sendto(fds[i], msg, (size_t)n + 5, 0,
			    (struct sockaddr *)&peer, plen);
		}
	}
}

int
main(int argc, char **argv)
{
	const char *hide[MAXLIST], *rw[MAXLIST], *ro[MAXLIST];
	const char *secrets[MAXLIST];
	size_t nhide = 0, nrw = 0, nro = 0, nsec = 0, i;
	struct sandbox_spec sp;
	struct sandbox_env_spec es;
	struct sandbox_env ev;
	struct sandbox_child sb;
	pthread_t th;
	char why[512];
	int a, code, use_env = 0;
	unsigned uid, gid;

	memset(&sp, 0, sizeof(sp));
	memset(&es, 0, sizeof(es));
	memset(&ev, 0, sizeof(ev));
	sp.sp_uid = (uid_t)-1;
	sp.sp_gid = (gid_t)-1;
	sp.sp_seccomp = SANDBOX_SECCOMP_NETLINK_ROUTE;
	for (a = 1; a < argc && strcmp(argv[a], "--") != 0; a++) {
		const char *o = argv[a], *v = a + 1 < argc ? argv[a + 1] : NULL;

		if (strcmp(o, "--no-netlink") == 0) {
			sp.sp_seccomp = 0;
			continue;
		}
		if (strcmp(o, "--landlock") == 0) {
			sp.sp_landlock = 1;
			continue;
		}
		if (strcmp(o, "--clean-env") == 0) {
			es.es_clean = 1;
			continue;
		}
		if (v == NULL)
			usage();
		a++;
		if (strcmp(o, "--listen") == 0)
			parse_listen(v);
		else if (strcmp(o, "--dns") == 0)
			parse_dns(argv[a]);
		else if (strcmp(o, "--hide") == 0 && nhide < MAXLIST)
			hide[nhide++] = v;
		else if (strcmp(o, "--resolv") == 0)
			sp.sp_resolv = v;
		else if (strcmp(o, "--landlock-rw") == 0 && nrw < MAXLIST)
			rw[nrw++] = v;
		else if (strcmp(o, "--landlock-ro") == 0 && nro < MAXLIST)
			ro[nro++] = v;
		else if (strcmp(o, "--user") == 0 &&
		    sscanf(v, "%u:%u", &uid, &gid) == 2) {
			sp.sp_uid = (uid_t)uid;
			sp.sp_gid = (gid_t)gid;
		} else if (strcmp(o, "--token") == 0) {
			es.es_token = v;
			use_env = 1;
		} else if (strcmp(o, "--secret") == 0 && nsec < MAXLIST)
			secrets[nsec++] = v;
		else if (strcmp(o, "--profile") == 0)
			es.es_profile = strcmp(v, "anthropic") == 0 ?
			    SANDBOX_PROFILE_ANTHROPIC :
			    strcmp(v, "openai") == 0 ? SANDBOX_PROFILE_OPENAI :
						       SANDBOX_PROFILE_GENERIC;
		else if (strcmp(o, "--base-url") == 0)
			es.es_base_url = v;
		else
			usage();
	}
	if (a + 1 >= argc)
		usage();
	if (use_env) {
		es.es_environ = environ;
		es.es_proxy = "127.0.0.1:3128";
		es.es_ca_bundle = "/etc/ssl/certs/ca-certificates.crt";
		es.es_ca_cert = "/etc/ssl/certs/ca-certificates.crt";
		es.es_token_file = "/run/sluice-token";
		es.es_secrets = secrets;
		es.es_nsecrets = nsec;
		if (sandbox_env_build(&es, &ev, why, sizeof(why)) == -1) {
			fprintf(stderr, "sandbox_run: %s\n", why);
			return 125;
		}
		for (i = 0; i < ev.ev_nremoved; i++)
			fprintf(stderr,
			    "sandbox_run: %s removed from the "
			    "environment: its value is an injected secret\n",
			    ev.ev_removed[i]);
		sp.sp_envp = ev.ev_env;
	} else
		sp.sp_envp = environ;
	sp.sp_argv = (const char *const *)(argv + a + 1);
	sp.sp_listen = listen_;
	sp.sp_nlisten = nlisten;
	sp.sp_hide = hide;
	sp.sp_nhide = nhide;
	sp.sp_landlock_rw = rw;
	sp.sp_nlandlock_rw = nrw;
	sp.sp_landlock_ro = ro;
	sp.sp_nlandlock_ro = nro;
	if (sandbox_start(&sp, &sb, fds, why, sizeof(why)) == -1) {
		fprintf(stderr, "sandbox_run: %s\n", why);
		sandbox_env_free(&ev);
		return 125;
	}
	if (sandbox_forward_signals(sb.sb_pid) == -1) {
		sandbox_abort(&sb);
		return 125;
	}
	if (nlisten > 0 && pthread_create(&th, NULL, serve, NULL) != 0) {
		sandbox_abort(&sb);
		return 125;
	}
	if (sandbox_go(&sb, why, sizeof(why)) == -1)
		fprintf(stderr, "sandbox_run: %s\n", why);
	code = sandbox_wait(sb.sb_pid);
	sandbox_forward_stop();
	sandbox_env_free(&ev);
	return code == -1 ? 125 : code;
}
