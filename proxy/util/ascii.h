/*
 * Byte classes and hex digits shared by the parsers (http1, chunked, path,
 * uri, dnsmsg), the config checks, the token JSON check and the audit
 * chain. Pure (STYLE.md §7): libc only, no allocation, no global state;
 * the C locale's rules whatever the process locale is.
 */
#ifndef SLUICE_ASCII_H
#define SLUICE_ASCII_H

#include <stddef.h>

/*
 * tchar of RFC 9110 §5.6.2: ALPHA, DIGIT and "!#$%&'*+-.^_`|~". A table
 * and inline, as is ascii_lower(): http1 runs both for every byte of every
 * field name.
 */
extern const unsigned char ascii_tchar_table[256];

static inline int
ascii_is_tchar(unsigned char c)
{
	return ascii_tchar_table[c];
}

/* A-Z to a-z; every other byte unchanged. */
static inline unsigned char
ascii_lower(unsigned char c)
{
	return c >= 'A' && c <= 'Z' ? (unsigned char)(c + ('a' - 'A')) : c;
}

/* The value of a hex digit (0-9, a-f, A-F), or -1. */
int ascii_hex_value(unsigned char);

/* 2n lower-case hex digits of p[0..n) and a NUL into dst[2n + 1]. */
void ascii_hex_encode(char *dst, const unsigned char *p, size_t n);

/*
 * The n bytes spelled by the first 2n characters of s, which must all be
 * lower-case hex digits (what ascii_hex_encode writes): 0, or -1 at the
 * first other character (a NUL included). out may be partly written then.
 */
int ascii_hex_decode(const char *s, unsigned char *out, size_t n);

#endif
