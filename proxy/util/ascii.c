/*
 * Byte classes and hex digits (ascii.h). Pure code (STYLE.md §7): no
 * allocation, no global state, no recursion.
 */
#include "proxy/util/ascii.h"

static const char ascii_hexdig[] = "0123456789abcdef";

/* tchar (ascii.h). */
const unsigned char ascii_tchar_table[256] = {
	['!'] = 1,
	['#'] = 1,
	['$'] = 1,
	['%'] = 1,
	['&'] = 1,
	['\''] = 1,
	['*'] = 1,
	['+'] = 1,
	['-'] = 1,
	['.'] = 1,
	['^'] = 1,
	['_'] = 1,
	['`'] = 1,
	['|'] = 1,
	['~'] = 1,
	['0'] = 1,
	['1'] = 1,
	['2'] = 1,
	['3'] = 1,
	['4'] = 1,
	['5'] = 1,
	['6'] = 1,
	['7'] = 1,
	['8'] = 1,
	['9'] = 1,
	['A'] = 1,
	['B'] = 1,
	['C'] = 1,
	['D'] = 1,
	['E'] = 1,
	['F'] = 1,
	['G'] = 1,
	['H'] = 1,
	['I'] = 1,
	['J'] = 1,
	['K'] = 1,
	['L'] = 1,
	['M'] = 1,
	['N'] = 1,
	['O'] = 1,
	['P'] = 1,
	['Q'] = 1,
	['R'] = 1,
	['S'] = 1,
	['T'] = 1,
	['U'] = 1,
	['V'] = 1,
	['W'] = 1,
	['X'] = 1,
	['Y'] = 1,
	['Z'] = 1,
	['a'] = 1,
	['b'] = 1,
	['c'] = 1,
	['d'] = 1,
	['e'] = 1,
	['f'] = 1,
	['g'] = 1,
	['h'] = 1,
	['i'] = 1,
	['j'] = 1,
	['k'] = 1,
	['l'] = 1,
	['m'] = 1,
	['n'] = 1,
	['o'] = 1,
	['p'] = 1,
	['q'] = 1,
	['r'] = 1,
	['s'] = 1,
	['t'] = 1,
	['u'] = 1,
	['v'] = 1,
	['w'] = 1,
	['x'] = 1,
	['y'] = 1,
	['z'] = 1,
};

int
ascii_hex_value(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

void
ascii_hex_encode(char *dst, const unsigned char *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		dst[2 * i] = ascii_hexdig[p[i] >> 4];
		dst[2 * i + 1] = ascii_hexdig[p[i] & 0xf];
	}
	dst[2 * n] = '\0';
}

int
ascii_hex_decode(const char *s, unsigned char *out, size_t n)
{
	size_t i;
	int v;

	for (i = 0; i < 2 * n; i++) {
		v = ascii_hex_value((unsigned char)s[i]);
		if (v < 0 || (s[i] >= 'A' && s[i] <= 'F'))
			return -1; /* the audit writer writes lower case only */
		if (i % 2 == 0)
			out[i / 2] = (unsigned char)(v << 4);
		else
			out[i / 2] = (unsigned char)(out[i / 2] | v);
	}
	return 0;
}
