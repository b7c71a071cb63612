/*
 * libfailalloc: an LD_PRELOAD fault injector for the integration tests.
 * While the file named by FAILALLOC_ARM starts with '1', about one
 * allocation in FAILALLOC_EVERY (malloc, calloc, realloc) returns NULL
 * with ENOMEM, from a fixed pseudo-random sequence, so that a test can
 * drive a daemon through its out-of-memory paths under real traffic. The
 * file is made (one byte, '0') and mapped shared at the first allocation:
 * the flag is then read from memory, with no syscall, so a process that
 * was forked and confined (sluice's engine: no file may be opened) reads
 * it too. Write '1' or '0' over its first byte; never truncate it.
 *
 * Meant for single-threaded use (sluice's engine is); built as a shared library
 * by tests/CMakeLists.txt and never with the sanitizers, whose allocator would
 * be replaced under them.
 */
#include <sys/mman.h>
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

void *__libc_malloc(size_t);
void *__libc_calloc(size_t, size_t);
void *__libc_realloc(void *, size_t);

static const char *arm_path;
static const volatile char *arm_map;
static uint32_t every;
static uint32_t calls;
static uint32_t rng = 2463534242u;
static int armed;
static int inited;

static void
fa_init(void)
{
	const char *e;

	struct stat st;
	void *m;
	int fd;

	inited = 1;
	arm_path = getenv("FAILALLOC_ARM");
	e = getenv("FAILALLOC_EVERY");
	every = e != NULL ? (uint32_t)strtoul(e, NULL, 10) : 0;
	if (arm_path == NULL ||
	    (fd = open(arm_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) == -1)
		return;
	if (fstat(fd, &st) == 0 && st.st_size == 0 && write(fd, "0", 1) != 1) {
		close(fd);
		return;
	}
	m = mmap(NULL, 1, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (m != MAP_FAILED)
		arm_map = m;
}

static int
fa_fail(void)
{
	if (!inited)
		fa_init();
	if (arm_map == NULL || every == 0)
		return 0;
	if ((calls++ & 255) == 0)
		armed = arm_map[0] == '1';
	if (!armed)
		return 0;
	rng ^= rng << 13;
	rng ^= rng >> 17;
	rng ^= rng << 5;
	if (rng % every != 0)
		return 0;
	errno = ENOMEM;
	return 1;
}

void *
malloc(size_t n)
{
	return fa_fail() ? NULL : __libc_malloc(n);
}

void *
calloc(size_t a, size_t b)
{
	return fa_fail() ? NULL : __libc_calloc(a, b);
}

void *
realloc(void *p, size_t n)
{
	return fa_fail() ? NULL : __libc_realloc(p, n);
}
