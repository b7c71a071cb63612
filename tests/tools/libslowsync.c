/*
 * libslowsync: an LD_PRELOAD shim for the fault tests (tests/faults): a
 * disk whose fsync(2) is slow. While the file named by SLOWSYNC_ARM
 * exists, each fsync and fdatasync sleeps SLOWSYNC_MS milliseconds
 * (default 3000) before it syncs; for as long as one sleeps, the file
 * SLOWSYNC_ARM.sleeping exists, so that a test can tell what happened
 * while a sync was held up without timing anything. Built as a shared
 * library by tests/CMakeLists.txt, never with the sanitizers.
 */
#include <sys/syscall.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int
slow_armed(char *sleeping, size_t len)
{
	const char *arm = getenv("SLOWSYNC_ARM");

	if (arm == NULL || access(arm, F_OK) != 0)
		return 0;
	return snprintf(sleeping, len, "%s.sleeping", arm) < (int)len;
}

static void
slow_wait(void)
{
	char sleeping[4096];
	const char *ms = getenv("SLOWSYNC_MS");
	long n = ms != NULL ? strtol(ms, NULL, 10) : 3000;
	struct timespec ts;
	int fd, saved = errno;

	if (!slow_armed(sleeping, sizeof(sleeping)))
		return;
	if ((fd = open(sleeping, O_WRONLY | O_CREAT | O_CLOEXEC, 0600)) != -1)
		close(fd);
	ts.tv_sec = n / 1000;
	ts.tv_nsec = (n % 1000) * 1000000L;
	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
	(void)unlink(sleeping);
	errno = saved;
}

int
fsync(int fd)
{
	slow_wait();
	return (int)syscall(SYS_fsync, fd);
}

int
fdatasync(int fildes)
{
	slow_wait();
	return (int)syscall(SYS_fdatasync, fildes);
}
