/*
 * Strict UTF-8 (utf8.h). Pure code (STYLE.md §7): no allocation, no global
 * state, no recursion.
 */
#include "proxy/util/utf8.h"

size_t
utf8_len(const unsigned char *p, size_t n)
{
	unsigned char c, lo = 0x80, hi = 0xbf;
	size_t need, i;

	if (n == 0)
		return 0;
	c = p[0];
	if (c < 0x80)
		return 1;
	/* 0x80-0xbf: a lone continuation; 0xc0, 0xc1: overlong forms. */
	if (c < 0xc2)
		return 0;
	if (c < 0xe0)
		need = 1;
	else if (c < 0xf0) {
		need = 2;
		if (c == 0xe0)
			lo = 0xa0; /* overlong */
		else if (c == 0xed)
			hi = 0x9f; /* UTF-16 surrogates */
	} else if (c < 0xf5) {
		need = 3;
		if (c == 0xf0)
			lo = 0x90; /* overlong */
		else if (c == 0xf4)
			hi = 0x8f; /* beyond U+10FFFF */
	} else
		return 0;
	if (n <= need || p[1] < lo || p[1] > hi)
		return 0;
	for (i = 2; i <= need; i++)
		if ((p[i] & 0xc0) != 0x80)
			return 0;
	return need + 1;
}
