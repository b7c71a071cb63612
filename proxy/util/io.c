/*
 * Writing a whole buffer to a descriptor (files: the revocation list, the
 * sandbox's resolv.conf).
 */
#include <errno.h>
#include <unistd.h>

#include "proxy/util/util.h"

int
write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	ssize_t n;

	while (len > 0) {
		n = write(fd, p, len);
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}
