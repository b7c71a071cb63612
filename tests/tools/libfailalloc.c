/*
 * libfailalloc: an LD_PRELOAD fault injector for the integration tests.
 * Once the file named by FAILALLOC_ARM exists, about one allocation in
 * FAILALLOC_EVERY (malloc, calloc, realloc) returns NULL with ENOMEM, from
 * a fixed pseudo-random sequence, so that a test can drive a daemon
 * through its out-of-memory paths under real traffic. The file is looked
 * for every 256 allocations; removing it ends the failures.
 *
 * Single-threaded use only (sluice is); built as a shared library by
 * tests/CMakeLists.txt and never with the sanitizers, whose allocator
 * would be replaced under them.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

void *__libc_malloc(size_t);
void *__libc_calloc(size_t, size_t);
void *__libc_realloc(void *, size_t);

static const char *arm_path;
static uint32_t every;
static uint32_t calls;
static uint32_t rng = 2463534242u;
static int armed;
static int inited;

static void
fa_init(void)
{
	const char *e;

	inited = 1;
	arm_path = getenv("FAILALLOC_ARM");
	e = getenv("FAILALLOC_EVERY");
	every = e != NULL ? (uint32_t)strtoul(e, NULL, 10) : 0;
}

static int
fa_fail(void)
{
	if (!inited)
		fa_init();
	if (arm_path == NULL || every == 0)
		return 0;
	if ((calls++ & 255) == 0)
		armed = access(arm_path, F_OK) == 0;
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
