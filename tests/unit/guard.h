/*
 * Inputs placed right against a PROT_NONE page (picohttpparser's test.c
 * idea), shared by the parser unit tests: a read one byte past an input
 * faults instead of passing unnoticed. Include after <cmocka.h>.
 */
#ifndef SLUICE_TEST_GUARD_H
#define SLUICE_TEST_GUARD_H

#include <sys/mman.h>

#include <string.h>
#include <unistd.h>

struct guard {
	char *base;
	size_t size; /* usable bytes before the PROT_NONE page */
	size_t map_len;
};

static struct guard g;

/* Map room for inputs of up to cap bytes, then the guard page. 0 or -1. */
static int
guard_setup(size_t cap)
{
	long ps = sysconf(_SC_PAGESIZE);
	size_t page = ps > 0 ? (size_t)ps : 4096;
	size_t pages = (cap + page - 1) / page + 1;
	void *p;

	g.map_len = pages * page;
	p = mmap(NULL, g.map_len, PROT_READ | PROT_WRITE,
	    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return -1;
	g.base = p;
	g.size = (pages - 1) * page;
	return mprotect(g.base + g.size, page, PROT_NONE);
}

static int
guard_teardown(void)
{
	return munmap(g.base, g.map_len);
}

/* Copies s[0..n) so that it ends right at the guard page. */
static const char *
guard_put(const char *s, size_t n)
{
	char *p;

	assert_true(n <= g.size);
	p = g.base + g.size - n;
	memcpy(p, s, n);
	return p;
}

#endif
