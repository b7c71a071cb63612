/*
 * Entering a named network namespace, for `--netns NAME`: the namespaces
 * `ip netns add` makes are bind mounts under /run/netns. Only the network
 * namespace changes; the mount namespace (and so the file system view)
 * stays the caller's.
 */
#include <sys/types.h>

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "netpolicy/netpolicy.h"
#include "netpolicy/np_private.h"

#define NP_NETNS_DIR "/run/netns/"

int
np_netns_enter(const char *name, char *why, size_t whylen)
{
	char path[sizeof(NP_NETNS_DIR) + 256];
	int fd, saved;

	/* A plain file name: no way out of /run/netns. */
	if (name == NULL || *name == '\0' || strlen(name) > 255 ||
	    strchr(name, '/') != NULL || strcmp(name, ".") == 0 ||
	    strcmp(name, "..") == 0) {
		np_why(why, whylen, "--netns: not a namespace name");
		return -1;
	}
	snprintf(path, sizeof(path), "%s%s", NP_NETNS_DIR, name);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1) {
		np_why(why, whylen, "--netns %s: %s", name, strerror(errno));
		return -1;
	}
	if (setns(fd, CLONE_NEWNET) == -1) {
		saved = errno;
		close(fd);
		np_why(why, whylen, "--netns %s: setns: %s", name,
		    strerror(saved));
		return -1;
	}
	close(fd);
	return 0;
}
