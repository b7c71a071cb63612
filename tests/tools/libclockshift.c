/*
 * libclockshift: an LD_PRELOAD shim for the clock tests: it moves the wall
 * clock and nothing else. CLOCK_REALTIME (and its coarse variant),
 * gettimeofday(2) and time(2) are shifted by the signed number of seconds
 * written at the start of the file named by CLOCKSHIFT_FILE (for example
 * "-1200\n"); CLOCK_MONOTONIC and the other clocks are left alone, as a
 * step of the system clock (date -s, an NTP step) leaves them. The file is
 * mapped shared at the first call and read from memory on every call, so
 * a process that was forked and confined (sluice's engine: no file may be
 * opened) sees each change too. Overwrite the number in place (the same
 * length, padded with spaces); never truncate the file. Built as a shared
 * library by tests/CMakeLists.txt, never with the sanitizers.
 */
#include <sys/mman.h>
#include <sys/time.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SHIFT_MAP 64

typedef int clock_gettime_fn(clockid_t, struct timespec *);

static clock_gettime_fn *real_clock_gettime;
static const volatile char *shift_map;
static int shift_inited;

static void
shift_init(void)
{
	const char *path;
	void *p;
	int fd;

	if (shift_inited)
		return;
	shift_inited = 1;
	/* dlsym's object pointer to a function pointer, bit for bit. */
	p = dlsym(RTLD_NEXT, "clock_gettime");
	memcpy(&real_clock_gettime, &p, sizeof(p));
	if ((path = getenv("CLOCKSHIFT_FILE")) == NULL ||
	    (fd = open(path, O_RDONLY | O_CLOEXEC)) == -1)
		return;
	p = mmap(NULL, SHIFT_MAP, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (p != MAP_FAILED)
		shift_map = p;
}

/* The shift in seconds: the number at the start of the mapped file. */
static long
shift_s(void)
{
	char buf[24];
	size_t i;

	shift_init();
	if (shift_map == NULL)
		return 0;
	for (i = 0; i < sizeof(buf) - 1; i++)
		buf[i] = shift_map[i];
	buf[sizeof(buf) - 1] = '\0';
	return strtol(buf, NULL, 10);
}

static int
wall(clockid_t id)
{
	return id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE;
}

int
clock_gettime(clockid_t id, struct timespec *ts)
{
	int rc;

	shift_init();
	if (real_clock_gettime == NULL)
		return -1;
	rc = real_clock_gettime(id, ts);
	if (rc == 0 && wall(id))
		ts->tv_sec += shift_s();
	return rc;
}

int
gettimeofday(struct timeval *restrict tv, void *restrict tz)
{
	struct timespec ts;

	(void)tz;
	if (clock_gettime(CLOCK_REALTIME, &ts) == -1)
		return -1;
	tv->tv_sec = ts.tv_sec;
	tv->tv_usec = ts.tv_nsec / 1000;
	return 0;
}

time_t
time(time_t *t)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_REALTIME, &ts) == -1)
		return (time_t)-1;
	if (t != NULL)
		*t = ts.tv_sec;
	return ts.tv_sec;
}
