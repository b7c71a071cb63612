/*
 * The mount wall of a sandbox: what the command must not read (the
 * policy's secret files, sluice's state and audit log) is covered, and
 * resolv.conf points at the DNS stub. Runs in the child's own mount
 * namespace, before the capabilities go; it changes nothing outside.
 */
#include <sys/types.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proxy/sandbox/sandbox.h"
#include "proxy/util/util.h"

#define RESOLV_CONF "/etc/resolv.conf"
#define TMPFS_FLAGS (MS_NOSUID | MS_NODEV | MS_NOEXEC)

/*
 * The generated file lives on a tmpfs of its own, mounted on a scratch
 * directory only long enough to bind the file over resolv.conf: then the
 * scratch mount is detached and its directory removed, and the bind keeps
 * the tmpfs alive.
 */
static int
put_resolv(const char *resolv, char *why, size_t whylen)
{
	static const char *const bases[] = { "/tmp", "/dev/shm", "/run" };
	char dir[64], file[80];
	struct stat st;
	size_t i;
	int fd = -1, mounted = 0, made = 0;

	if (stat(RESOLV_CONF, &st) == -1) {
		if (errno == ENOENT)
			return 0; /* the resolver's default is no stub either */
		snprintf(why, whylen, "mount: %s: %s", RESOLV_CONF,
		    strerror(errno));
		return -1;
	}
	for (i = 0; i < sizeof(bases) / sizeof(bases[0]) && !made; i++) {
		snprintf(dir, sizeof(dir), "%s/.sluice-resolv-XXXXXX",
		    bases[i]);
		made = mkdtemp(dir) != NULL;
	}
	if (!made) {
		snprintf(why, whylen,
		    "mount: no scratch directory for "
		    "resolv.conf (/tmp, /dev/shm, /run): %s",
		    strerror(errno));
		return -1;
	}
	if (mount("tmpfs", dir, "tmpfs", TMPFS_FLAGS, "size=16k,mode=0755") ==
	    -1) {
		snprintf(why, whylen, "mount: tmpfs on %s: %s", dir,
		    strerror(errno));
		goto fail;
	}
	mounted = 1;
	snprintf(file, sizeof(file), "%s/resolv.conf", dir);
	if ((fd = open(file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)) ==
		-1 ||
	    write_all(fd, resolv, strlen(resolv)) == -1 || close(fd) == -1) {
		snprintf(why, whylen, "mount: write %s: %s", file,
		    strerror(errno));
		if (fd != -1)
			close(fd);
		goto fail;
	}
	if (mount(file, RESOLV_CONF, NULL, MS_BIND, NULL) == -1 ||
	    mount(NULL, RESOLV_CONF, NULL,
		MS_REMOUNT | MS_BIND | MS_RDONLY | TMPFS_FLAGS, NULL) == -1) {
		snprintf(why, whylen, "mount: bind over %s: %s", RESOLV_CONF,
		    strerror(errno));
		goto fail;
	}
	umount2(dir, MNT_DETACH);
	rmdir(dir);
	return 0;
fail:
	if (mounted)
		umount2(dir, MNT_DETACH);
	rmdir(dir);
	return -1;
}

static int
hide(const char *path, char *why, size_t whylen)
{
	struct stat st;

	if (stat(path, &st) == -1) {
		if (errno == ENOENT)
			return 0;
		snprintf(why, whylen, "mount: hide %s: %s", path,
		    strerror(errno));
		return -1;
	}
	if (S_ISDIR(st.st_mode)) {
		if (mount("tmpfs", path, "tmpfs", TMPFS_FLAGS | MS_RDONLY,
			"size=4k,mode=0555") == -1) {
			snprintf(why, whylen, "mount: empty tmpfs over %s: %s",
			    path, strerror(errno));
			return -1;
		}
		return 0;
	}
	/* Reads give nothing, writes vanish: no need for read-only. */
	if (mount("/dev/null", path, NULL, MS_BIND, NULL) == -1) {
		snprintf(why, whylen, "mount: /dev/null over %s: %s", path,
		    strerror(errno));
		return -1;
	}
	return 0;
}

int
sandbox_mount_wall(const char *const *hidden, size_t nhide, const char *resolv,
    char *why, size_t whylen)
{
	size_t i;

	/* Nothing done here may reach the parent's namespace. */
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == -1) {
		snprintf(why, whylen, "mount: make / private: %s",
		    strerror(errno));
		return -1;
	}
	if (resolv != NULL && put_resolv(resolv, why, whylen) == -1)
		return -1;
	for (i = 0; i < nhide; i++)
		if (hide(hidden[i], why, whylen) == -1)
			return -1;
	return 0;
}
