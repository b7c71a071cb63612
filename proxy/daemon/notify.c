/*
 * The service manager's readiness protocol (sd_notify), spoken directly:
 * one datagram of "KEY=VALUE" lines to the AF_UNIX socket named by
 * $NOTIFY_SOCKET (a path, or an abstract name written with a leading '@').
 * No libsystemd. The socket is connected once, at start-up, before the
 * daemon enters a --netns namespace (abstract names are per namespace)
 * and before it drops privileges (connect checks the socket's mode);
 * every later message is a send() on that fd. A manager that is gone or
 * slow never blocks or stops the daemon: a failed send is dropped.
 */
#include <sys/socket.h>
#include <sys/un.h>

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "proxy/daemon/daemon.h"
#include "proxy/util/util.h"

#define NOTIFY_MAX 1024 /* one datagram; STATUS= lines are short */

static int n_fd = -1;

int
notify_init(char *why, size_t whylen)
{
	struct sockaddr_un sun;
	const char *name;
	socklen_t len;
	size_t n;
	int fd;

	if ((name = getenv("NOTIFY_SOCKET")) == NULL || name[0] == '\0')
		return 0;
	n = strlen(name);
	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	if (name[0] != '/' && name[0] != '@') {
		snprintf(why, whylen,
		    "NOTIFY_SOCKET: not an absolute path or an '@' name");
		return -1;
	}
	if (n >= sizeof(sun.sun_path)) {
		snprintf(why, whylen, "NOTIFY_SOCKET: longer than %zu bytes",
		    sizeof(sun.sun_path) - 1);
		return -1;
	}
	memcpy(sun.sun_path, name, n);
	len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
	if (name[0] == '@')
		sun.sun_path[0] = '\0'; /* abstract: no terminating NUL */
	else
		len++;
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd == -1 || connect(fd, (struct sockaddr *)&sun, len) == -1) {
		snprintf(why, whylen, "NOTIFY_SOCKET: %s: %s", name,
		    strerror(errno));
		if (fd != -1)
			close(fd);
		return -1;
	}
	n_fd = fd;
	/* Not for the children of sluice exec or of a helper. */
	(void)unsetenv("NOTIFY_SOCKET");
	return 0;
}

void
notify_send(const char *fmt, ...)
{
	char buf[NOTIFY_MAX];
	va_list ap;
	int n;

	if (n_fd == -1)
		return;
	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(buf))
		n = (int)sizeof(buf) - 1;
	if (send(n_fd, buf, (size_t)n, MSG_NOSIGNAL) == -1 && errno != EAGAIN &&
	    errno != EWOULDBLOCK)
		log_debug("NOTIFY_SOCKET: %s", strerror(errno));
}

void
notify_reloading(void)
{
	struct timespec ts;

	if (n_fd == -1)
		return;
	/* MONOTONIC_USEC: the manager (systemd >= 253) matches it up. */
	(void)clock_gettime(CLOCK_MONOTONIC, &ts);
	notify_send("RELOADING=1\nMONOTONIC_USEC=%llu\nSTATUS=reloading the "
		    "policy",
	    (unsigned long long)ts.tv_sec * 1000000ULL +
		(unsigned long long)ts.tv_nsec / 1000ULL);
}

void
notify_close(void)
{
	if (n_fd != -1)
		close(n_fd);
	n_fd = -1;
}
