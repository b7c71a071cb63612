/*
 * "sluice admin [-c POLICY.json | --socket PATH] status | reload |
 * revoke JTI... | sandbox ...": a client for the daemon's admin socket, so
 * operators need no socat. One command line per connection (the socket's
 * protocol, docs/deployment.md); the answer is copied to stdout. Exit 0 when
 * every answer is "ok ..." (or a status), 1 when one is an error, 3 when the
 * socket cannot be reached.
 *
 * The policy is read only for its admin.socket key, with no other check:
 * a running daemon may already have removed key files it read, and the
 * client needs none of them.
 */
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "certs/certs.h"
#include "proxy/cli/cli.h"
#include "proxy/ops/ops.h"
#include "proxy/util/util.h"

#define ADMIN_DEFAULT_SOCKET "/run/sluice/admin.sock"
#define ADMIN_ANSWER_MAX     (1 << 16) /* bytes of one answer copied */
#define ADMIN_WAIT_MS        5000      /* the daemon's own timeout */

static const char admin_usage[] =
    "usage: sluice admin [-c POLICY.json | --socket PATH] "
    "status | reload | revoke JTI... | sandbox add ID IFACE ADDR... | "
    "sandbox del ID | sandbox list\n";

/* The admin.socket of the policy at path into out; 0, or -1 (said). */
static int
policy_socket(const char *path, char *out, size_t len)
{
	unsigned char *buf = NULL;
	cJSON *doc = NULL, *v;
	char why[512];
	size_t n;
	int rc = -1;

	/* The policy reader of every command (certs/ keys.c), bounded. */
	if (certs_read_public(path, &buf, &n, why, sizeof(why)) == -1) {
		(void)fprintf(stderr, "sluice admin: %s\n", why);
		return -1;
	}
	if ((doc = cJSON_ParseWithLength((const char *)buf, n)) == NULL ||
	    !cJSON_IsObject(doc)) {
		fprintf(stderr, "sluice admin: %s: not a JSON object\n", path);
		goto out;
	}
	v = cJSON_GetObjectItemCaseSensitive(doc, "admin");
	v = cJSON_GetObjectItemCaseSensitive(v, "socket");
	if (!cJSON_IsString(v) || v->valuestring[0] == '\0') {
		fprintf(stderr,
		    "sluice admin: %s: admin.socket: not set (the daemon "
		    "has no admin socket)\n",
		    path);
		goto out;
	}
	if (strlen(v->valuestring) >= len) {
		fprintf(stderr, "sluice admin: %s: admin.socket: too long\n",
		    path);
		goto out;
	}
	snprintf(out, len, "%s", v->valuestring);
	rc = 0;
out:
	cJSON_Delete(doc);
	free(buf);
	return rc;
}

static int
admin_connect(const char *path)
{
	struct sockaddr_un sun;
	int fd;

	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(sun.sun_path)) {
		fprintf(stderr, "sluice admin: %s: path too long\n", path);
		return -1;
	}
	memcpy(sun.sun_path, path, strlen(path));
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1 ||
	    connect(fd, (struct sockaddr *)&sun, sizeof(sun)) == -1) {
		fprintf(stderr, "sluice admin: %s: %s\n", path,
		    strerror(errno));
		if (fd != -1)
			close(fd);
		return -1;
	}
	return fd;
}

/*
 * Send line (a newline is added), copy the answer to stdout. Returns
 * SL_EXIT_OK, SL_EXIT_INVALID for an "error:" answer, SL_EXIT_RUNTIME.
 */
static int
admin_one(const char *path, const char *line)
{
	char buf[4096], first[8] = "";
	size_t total = 0, nfirst = 0;
	struct pollfd pfd;
	ssize_t n;
	int fd, rc = SL_EXIT_RUNTIME;

	if ((fd = admin_connect(path)) == -1)
		return SL_EXIT_RUNTIME;
	if (dprintf(fd, "%s\n", line) < 0 || shutdown(fd, SHUT_WR) == -1) {
		fprintf(stderr, "sluice admin: %s: %s\n", path,
		    strerror(errno));
		goto out;
	}
	pfd.fd = fd;
	pfd.events = POLLIN;
	for (;;) {
		if (poll(&pfd, 1, ADMIN_WAIT_MS) != 1) {
			fprintf(stderr, "sluice admin: %s: no answer\n", path);
			goto out;
		}
		if ((n = read(fd, buf, sizeof(buf))) == -1 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		if (nfirst < sizeof(first) - 1) {
			size_t k = sizeof(first) - 1 - nfirst;

			k = (size_t)n < k ? (size_t)n : k;
			memcpy(first + nfirst, buf, k);
			nfirst += k;
		}
		if (total + (size_t)n > ADMIN_ANSWER_MAX) {
			fprintf(stderr, "sluice admin: %s: answer too long\n",
			    path);
			goto out;
		}
		total += (size_t)n;
		if (fwrite(buf, 1, (size_t)n, stdout) != (size_t)n)
			goto out;
	}
	if (n == -1) {
		fprintf(stderr, "sluice admin: %s: %s\n", path,
		    strerror(errno));
		goto out;
	}
	if (total == 0) {
		fprintf(stderr, "sluice admin: %s: closed without an answer\n",
		    path);
		goto out;
	}
	rc = strncmp(first, "error:", 6) == 0 ? SL_EXIT_INVALID : SL_EXIT_OK;
out:
	close(fd);
	(void)fflush(stdout);
	return rc;
}

int
cmd_admin(int argc, char **argv)
{
	static const struct option opts[] = { { "config", required_argument,
						  NULL, 'c' },
		{ "socket", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 } };
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char line[ADMIN_LINE_MAX];
	const char *policy = NULL, *sock = NULL, *cmd;
	int ch, i, rc, worst = SL_EXIT_OK;

	optind = 1;
	while ((ch = getopt_long(argc, argv, "+c:h", opts, NULL)) != -1) {
		switch (ch) {
		case 'c':
			policy = optarg;
			break;
		case 's':
			sock = optarg;
			break;
		case 'h':
			(void)fputs(admin_usage, stdout);
			return SL_EXIT_OK;
		default:
			(void)fputs(admin_usage, stderr);
			return SL_EXIT_USAGE;
		}
	}
	if (optind >= argc || (policy != NULL && sock != NULL)) {
		(void)fputs(admin_usage, stderr);
		return SL_EXIT_USAGE;
	}
	cmd = argv[optind];
	if (!((strcmp(cmd, "status") == 0 || strcmp(cmd, "reload") == 0) &&
		optind + 1 == argc) &&
	    !(strcmp(cmd, "revoke") == 0 && optind + 1 < argc) &&
	    !(strcmp(cmd, "sandbox") == 0 && optind + 1 < argc)) {
		(void)fputs(admin_usage, stderr);
		return SL_EXIT_USAGE;
	}
	if (sock != NULL)
		snprintf(path, sizeof(path), "%s", sock);
	else if (policy != NULL) {
		if (policy_socket(policy, path, sizeof(path)) == -1)
			return SL_EXIT_INVALID;
	} else
		snprintf(path, sizeof(path), "%s", ADMIN_DEFAULT_SOCKET);
	if (strcmp(cmd, "sandbox") == 0) {
		/* One line: the words, each without a blank or a line break. */
		size_t n = 7;

		memcpy(line, "sandbox", 8);

		for (i = optind + 1; i < argc; i++) {
			if (argv[i][0] == '\0' ||
			    strpbrk(argv[i], " \t\r\n") != NULL ||
			    n + 1 + strlen(argv[i]) >= sizeof(line)) {
				fprintf(stderr,
				    "sluice admin: sandbox: bad word %d\n",
				    i - optind);
				return SL_EXIT_USAGE;
			}
			n += (size_t)snprintf(line + n, sizeof(line) - n, " %s",
			    argv[i]);
		}
		return admin_one(path, line);
	}
	if (strcmp(cmd, "revoke") != 0)
		return admin_one(path, cmd);
	for (i = optind + 1; i < argc; i++) {
		/* The daemon checks the jti; a line break would be a second. */
		if (strpbrk(argv[i], "\r\n") != NULL ||
		    strlen(argv[i]) + 8 > sizeof(line)) {
			fprintf(stderr, "sluice admin: revoke: bad jti\n");
			worst = SL_EXIT_INVALID;
			continue;
		}
		snprintf(line, sizeof(line), "revoke %s", argv[i]);
		rc = admin_one(path, line);
		if (rc > worst)
			worst = rc;
	}
	return worst;
}
