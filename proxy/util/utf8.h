/*
 * Strict UTF-8 (RFC 3629): what the audit writer, the admin and metrics
 * label escapers, audit verify and the token JSON check accept. Pure
 * (STYLE.md §7): libc only, no allocation, no global state.
 */
#ifndef SLUICE_UTF8_H
#define SLUICE_UTF8_H

#include <stddef.h>

/*
 * Length (1 to 4) of the well-formed UTF-8 sequence at p[0..n), or 0 when
 * n is 0 or it is not one: a lone continuation byte, an overlong form, a
 * UTF-16 surrogate, a code point beyond U+10FFFF, or a sequence cut short.
 */
size_t utf8_len(const unsigned char *p, size_t n);

#endif
