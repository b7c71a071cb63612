/*
 * Unit tests for the one strict UTF-8 check (proxy/utf8.c), against an
 * independent decode-then-check reference: every scalar value's encoding
 * and every cut of it, every string of up to three bytes, and four-byte
 * strings over every lead and second and third byte. Inputs end right at
 * a PROT_NONE page, so a read past n faults.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "proxy/util/utf8.h"
#include "tests/unit/guard.h"

static int
setup(void **state)
{
	(void)state;
	return guard_setup(8);
}

static int
teardown(void **state)
{
	(void)state;
	return guard_teardown();
}

/*
 * RFC 3629 §3 read the other way round: the length from the lead byte's
 * high bits, the continuation bytes' 10xxxxxx pattern, then the code
 * point must need exactly that length and be a scalar value.
 */
static size_t
ref_len(const unsigned char *p, size_t n)
{
	static const uint32_t min[5] = { 0, 0, 0x80, 0x800, 0x10000 };
	uint32_t cp;
	size_t k, i;

	if (n == 0)
		return 0;
	if ((p[0] & 0x80) == 0)
		return 1;
	if ((p[0] & 0xe0) == 0xc0) {
		k = 2;
		cp = p[0] & 0x1f;
	} else if ((p[0] & 0xf0) == 0xe0) {
		k = 3;
		cp = p[0] & 0x0f;
	} else if ((p[0] & 0xf8) == 0xf0) {
		k = 4;
		cp = p[0] & 0x07;
	} else
		return 0;
	if (n < k)
		return 0;
	for (i = 1; i < k; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (p[i] & 0x3f);
	}
	if (cp < min[k] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return k;
}

static size_t
encode(uint32_t cp, unsigned char out[4])
{
	if (cp < 0x80) {
		out[0] = (unsigned char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (unsigned char)(0xc0 | cp >> 6);
		out[1] = (unsigned char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (unsigned char)(0xe0 | cp >> 12);
		out[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
		out[2] = (unsigned char)(0x80 | (cp & 0x3f));
		return 3;
	}
	out[0] = (unsigned char)(0xf0 | cp >> 18);
	out[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3f));
	out[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
	out[3] = (unsigned char)(0x80 | (cp & 0x3f));
	return 4;
}

static size_t
len_at_guard(const unsigned char *p, size_t n)
{
	return utf8_len((const unsigned char *)guard_put((const char *)p, n),
	    n);
}

/* Each scalar value's encoding is taken whole; any cut of it is not. */
static void
test_every_scalar_value(void **state)
{
	unsigned char b[4];
	uint32_t cp;
	size_t k, n;

	(void)state;
	for (cp = 0; cp <= 0x10ffff; cp++) {
		if (cp >= 0xd800 && cp <= 0xdfff)
			continue;
		k = encode(cp, b);
		if (len_at_guard(b, k) != k)
			fail_msg("U+%04X: not taken whole", (unsigned)cp);
		for (n = 0; n < k; n++)
			if (len_at_guard(b, n) != 0)
				fail_msg("U+%04X cut to %zu bytes: taken",
				    (unsigned)cp, n);
	}
}

/* Surrogates, overlongs and code points past U+10FFFF, by name. */
static void
test_refused_by_name(void **state)
{
	static const struct {
		const char *s;
		size_t n;
	} bad[] = {
		{ "\x80", 1 },             /* lone continuation */
		{ "\xbf", 1 },             /* lone continuation */
		{ "\xc0\x80", 2 },         /* overlong NUL */
		{ "\xc1\xbf", 2 },         /* overlong U+007F */
		{ "\xe0\x9f\xbf", 3 },     /* overlong U+07FF */
		{ "\xed\xa0\x80", 3 },     /* U+D800 */
		{ "\xed\xbf\xbf", 3 },     /* U+DFFF */
		{ "\xf0\x8f\xbf\xbf", 4 }, /* overlong U+FFFF */
		{ "\xf4\x90\x80\x80", 4 }, /* U+110000 */
		{ "\xf5\x80\x80\x80", 4 }, /* lead past U+10FFFF */
		{ "\xff", 1 },             /* never in UTF-8 */
		{ "\xe2\x82", 2 },         /* cut */
		{ "\xe2\x28\xa1", 3 },     /* ASCII in place of a tail */
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (len_at_guard((const unsigned char *)bad[i].s, bad[i].n) !=
		    0)
			fail_msg("row %zu taken", i);
	assert_int_equal(len_at_guard((const unsigned char *)"\xed\x9f\xbf", 3),
	    3); /* U+D7FF */
	assert_int_equal(len_at_guard((const unsigned char *)"\xee\x80\x80", 3),
	    3); /* U+E000 */
	assert_int_equal(len_at_guard((const unsigned char *)"\xf4\x8f\xbf\xbf",
			     4),
	    4);
	/* Only the sequence at p counts, not what follows it. */
	assert_int_equal(len_at_guard((const unsigned char *)"a\xff", 2), 1);
	assert_int_equal(len_at_guard((const unsigned char *)"\xc3\xa9\x80", 3),
	    2);
}

/* Every string of one, two and three bytes agrees with the reference. */
static void
test_short_strings_exhaustive(void **state)
{
	unsigned char b[3];
	unsigned x, y, z;
	const unsigned char *g3, *g2, *g1;

	(void)state;
	g1 = (const unsigned char *)g.base + g.size - 1;
	g2 = g1 - 1;
	g3 = g2 - 1;
	for (x = 0; x < 256; x++) {
		b[0] = (unsigned char)x;
		memcpy(g.base + g.size - 1, b, 1);
		if (utf8_len(g1, 1) != ref_len(b, 1))
			fail_msg("%02x", x);
		for (y = 0; y < 256; y++) {
			b[1] = (unsigned char)y;
			memcpy(g.base + g.size - 2, b, 2);
			if (utf8_len(g2, 2) != ref_len(b, 2))
				fail_msg("%02x %02x", x, y);
			for (z = 0; z < 256; z++) {
				b[2] = (unsigned char)z;
				memcpy(g.base + g.size - 3, b, 3);
				if (utf8_len(g3, 3) != ref_len(b, 3))
					fail_msg("%02x %02x %02x", x, y, z);
			}
		}
	}
}

/* Four bytes: every 4-byte lead, second and third byte; edge fourths. */
static void
test_four_bytes(void **state)
{
	static const unsigned char last[] = { 0x00, 0x41, 0x7f, 0x80, 0x8f,
		0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xf4, 0xff };
	const unsigned char *g4 = (const unsigned char *)g.base + g.size - 4;
	unsigned char b[4];
	unsigned x, y, z, w;

	(void)state;
	for (x = 0xf0; x < 256; x++)
		for (y = 0; y < 256; y++)
			for (z = 0; z < 256; z++)
				for (w = 0; w < sizeof(last); w++) {
					b[0] = (unsigned char)x;
					b[1] = (unsigned char)y;
					b[2] = (unsigned char)z;
					b[3] = last[w];
					memcpy(g.base + g.size - 4, b, 4);
					if (utf8_len(g4, 4) != ref_len(b, 4))
						fail_msg("%02x %02x %02x %02x",
						    x, y, z, last[w]);
				}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_scalar_value),
		cmocka_unit_test(test_refused_by_name),
		cmocka_unit_test(test_short_strings_exhaustive),
		cmocka_unit_test(test_four_bytes),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
