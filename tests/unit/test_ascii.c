/*
 * Unit tests for the shared byte classes and hex digits (proxy/ascii.c):
 * every byte value against the RFC 9110 tchar list and the hex alphabet,
 * written out here rather than derived from the code under test.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "proxy/util/ascii.h"

/* RFC 9110 §5.6.2, spelled out. */
static const char tchars[] = "!#$%&'*+-.^_`|~"
			     "0123456789"
			     "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
			     "abcdefghijklmnopqrstuvwxyz";

static void
test_tchar_every_byte(void **state)
{
	unsigned c;

	(void)state;
	for (c = 0; c < 256; c++) {
		int want = c != 0 && memchr(tchars, (int)c, sizeof(tchars) - 1);

		if (ascii_is_tchar((unsigned char)c) != want)
			fail_msg("byte 0x%02x: tchar %d, want %d", c,
			    ascii_is_tchar((unsigned char)c), want);
	}
}

static void
test_lower_every_byte(void **state)
{
	static const char up[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ";
	static const char lo[] = "abcdefghijklmnopqrstuvwxyz";
	const char *p;
	unsigned c, want;

	(void)state;
	for (c = 0; c < 256; c++) {
		p = c != 0 ? memchr(up, (int)c, 26) : NULL;
		want = p != NULL ? (unsigned char)lo[p - up] : c;
		if (ascii_lower((unsigned char)c) != want)
			fail_msg("byte 0x%02x", c);
	}
}

static void
test_hex_value_every_byte(void **state)
{
	static const char lo[] = "0123456789abcdef", up[] = "0123456789ABCDEF";
	const char *p;
	unsigned c;
	int want;

	(void)state;
	for (c = 0; c < 256; c++) {
		want = -1;
		if (c != 0 && (p = memchr(lo, (int)c, 16)) != NULL)
			want = (int)(p - lo);
		else if (c != 0 && (p = memchr(up, (int)c, 16)) != NULL)
			want = (int)(p - up);
		if (ascii_hex_value((unsigned char)c) != want)
			fail_msg("byte 0x%02x", c);
	}
}

static void
test_hex_round_trip(void **state)
{
	unsigned char all[256], back[256];
	char hex[2 * 256 + 1];
	unsigned i;

	(void)state;
	for (i = 0; i < 256; i++)
		all[i] = (unsigned char)i;
	memset(hex, 'x', sizeof(hex));
	ascii_hex_encode(hex, all, sizeof(all));
	assert_int_equal(strlen(hex), 512);
	assert_memory_equal(hex, "000102", 6);
	assert_memory_equal(hex + 2 * 0xab, "ab", 2);
	assert_string_equal(hex + 2 * 0xfe, "feff");
	assert_int_equal(ascii_hex_decode(hex, back, sizeof(back)), 0);
	assert_memory_equal(back, all, sizeof(all));

	ascii_hex_encode(hex, all, 0);
	assert_string_equal(hex, "");
}

/* Lower case only (what the audit chain writes), exactly 2n digits. */
static void
test_hex_decode_refuses(void **state)
{
	unsigned char out[4];

	(void)state;
	assert_int_equal(ascii_hex_decode("00ff7a10", out, 4), 0);
	assert_memory_equal(out, "\x00\xff\x7a\x10", 4);
	/* What follows the 2n digits is the caller's business. */
	assert_int_equal(ascii_hex_decode("00ff7a10zz", out, 4), 0);
	assert_int_equal(ascii_hex_decode("00FF7a10", out, 4), -1);
	assert_int_equal(ascii_hex_decode("00ff7a1", out, 4), -1); /* NUL */
	assert_int_equal(ascii_hex_decode("00ff7a1g", out, 4), -1);
	assert_int_equal(ascii_hex_decode(" 0ff7a10", out, 4), -1);
	assert_int_equal(ascii_hex_decode("", out, 0), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tchar_every_byte),
		cmocka_unit_test(test_lower_every_byte),
		cmocka_unit_test(test_hex_value_every_byte),
		cmocka_unit_test(test_hex_round_trip),
		cmocka_unit_test(test_hex_decode_refuses),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
