/*
 * Listening unix sockets for the admin and metrics endpoints. The only
 * access control on such a socket is its file mode and owner, so it must
 * never exist, even for an instant, with wider permissions than asked:
 * it is bound under a restrictive umask and only then chmod'ed/chowned.
 * What is served on it is the caller's business.
 */
#include <sys/types.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "proxy/util/util.h"

#define UNIXSOCK_BACKLOG 16

int
unixsock_listen(const char *path, mode_t mode, uid_t owner, gid_t group,
    char *why, size_t whylen)
{
	struct sockaddr_un sun;
	struct stat st;
	mode_t old;
	int fd, rc;

	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	if (path[0] != '/' || strlen(path) >= sizeof(sun.sun_path)) {
		snprintf(why, whylen,
		    "%s: want an absolute path of at most %zu "
		    "bytes",
		    path, sizeof(sun.sun_path) - 1);
		return -1;
	}
	memcpy(sun.sun_path, path, strlen(path) + 1);
	/*
	 * A socket left by an earlier run is removed; anything else at the
	 * path is an operator mistake we must not destroy.
	 */
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			snprintf(why, whylen, "%s: exists and is not a socket",
			    path);
			return -1;
		}
		if (unlink(path) == -1) {
			snprintf(why, whylen,
			    "%s: cannot remove the stale "
			    "socket: %s",
			    path, strerror(errno));
			return -1;
		}
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd == -1) {
		snprintf(why, whylen, "%s: socket: %s", path, strerror(errno));
		return -1;
	}
	/* The umask is process-wide; this runs before the loop starts. */
	old = umask(0177);
	rc = bind(fd, (struct sockaddr *)&sun, sizeof(sun));
	umask(old);
	if (rc == -1) {
		snprintf(why, whylen, "%s: bind: %s", path, strerror(errno));
		close(fd);
		return -1;
	}
	if (chmod(path, mode & 0777) == -1 ||
	    ((owner != (uid_t)-1 && owner != geteuid()) || group != (gid_t)-1 ?
		    chown(path, owner, group) == -1 :
		    0) ||
	    listen(fd, UNIXSOCK_BACKLOG) == -1) {
		snprintf(why, whylen, "%s: %s", path, strerror(errno));
		close(fd);
		unlink(path);
		return -1;
	}
	return fd;
}
