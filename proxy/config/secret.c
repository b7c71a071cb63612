/*
 * Reading the policy's files: a whole file of bounded size, and a secret
 * file with its permission rules (DESIGN.md "Policy file").
 */
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proxy/config/config.h"
#include "proxy/config/config_int.h"

/* Read a whole file of at most CONFIG_MAX_FILE bytes; NUL-terminated. */
static int
read_file(const char *path, int fd, unsigned char **out, size_t *outlen,
    char *why, size_t whylen)
{
	struct stat st;
	unsigned char *buf;
	size_t off = 0;
	ssize_t n;

	if (fstat(fd, &st) == -1) {
		snprintf(why, whylen, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(why, whylen, "%s: not a regular file", path);
		return -1;
	}
	if (st.st_size > (off_t)CONFIG_MAX_FILE) {
		snprintf(why, whylen, "%s: larger than %d bytes", path,
		    CONFIG_MAX_FILE);
		return -1;
	}
	if (cf_alloc_fails() ||
	    (buf = calloc((size_t)st.st_size + 1, 1)) == NULL) {
		snprintf(why, whylen, "%s: out of memory", path);
		return -1;
	}
	while (off < (size_t)st.st_size) {
		n = read(fd, buf + off, (size_t)st.st_size - off);
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0) {
			snprintf(why, whylen, "%s: %s", path,
			    n == 0 ? "short read" : strerror(errno));
			explicit_bzero(buf, (size_t)st.st_size + 1);
			free(buf);
			return -1;
		}
		off += (size_t)n;
	}
	*out = buf;
	*outlen = off;
	return 0;
}

int
cf_read_path(const char *path, unsigned char **out, size_t *outlen, char *why,
    size_t whylen)
{
	int fd, rc;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1) {
		snprintf(why, whylen, "%s: %s", path, strerror(errno));
		return -1;
	}
	rc = read_file(path, fd, out, outlen, why, whylen);
	close(fd);
	return rc;
}

int
config_read_secret(const char *path, uid_t owner, unsigned char **out,
    size_t *outlen, char *why, size_t whylen)
{
	struct stat st;
	int fd;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) == -1) {
		/* O_NOFOLLOW: a link could point anywhere the sandbox likes. */
		snprintf(why, whylen, "%s: %s", path,
		    errno == ELOOP ? "is a symbolic link (refused)" :
				     strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) == -1) {
		snprintf(why, whylen, "%s: %s", path, strerror(errno));
		close(fd);
		return -1;
	}
	/*
	 * A secret readable by others may already be known to the sandbox;
	 * refuse it rather than trust it (DESIGN.md "Policy file").
	 */
	if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
		snprintf(why, whylen,
		    "%s: mode %04o gives group/other access (chmod 600)", path,
		    (unsigned)(st.st_mode & 07777));
		close(fd);
		return -1;
	}
	if (owner != CONFIG_ANY_OWNER && st.st_uid != 0 && st.st_uid != owner &&
	    st.st_uid != geteuid()) {
		snprintf(why, whylen, "%s: owned by uid %u, not root or %u",
		    path, (unsigned)st.st_uid, (unsigned)owner);
		close(fd);
		return -1;
	}
	if (read_file(path, fd, out, outlen, why, whylen) == -1) {
		close(fd);
		return -1;
	}
	close(fd);
	if (*outlen > 0 && (*out)[*outlen - 1] == '\n')
		(*outlen)--;
	return 0;
}
