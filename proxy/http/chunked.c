/*
 * The chunked transfer-coding decoder (RFC 9112 §7.1): a resumable state
 * machine that validates the framing byte by byte and tells the caller
 * which bytes are payload, so one decoder serves request bodies and
 * streamed (SSE) responses alike. Body size limits are the caller's.
 *
 * Pure code (STYLE.md §7): no allocation, no global state, no recursion.
 *
 * Error choices: any fault in a size line (an empty or over-long size, a
 * sign or leading whitespace, whitespace not followed by an extension, a
 * bare CR or a bare LF) is HTTP1_E_CHUNK_SIZE; a CTL byte in an extension
 * or a size line over SIZE_LINE_MAX bytes is HTTP1_E_CHUNK_EXT; anything but
 * CRLF after chunk data is HTTP1_E_CHUNK_CRLF; every fault after the last
 * chunk (trailer fields and the final CRLF) is HTTP1_E_TRAILER.
 */
#include <limits.h>
#include <string.h>

#include "proxy/util/ascii.h"
#include "proxy/http/http1.h"

/* http1 files do not include proxy.h; this is its SL_FALLTHROUGH. */
#define CK_FALLTHROUGH __attribute__((__fallthrough__))

#define SIZE_DIGITS_MAX  16   /* hex digits of a chunk-size: 64 bits */
#define SIZE_LINE_MAX    8192 /* bytes of a size line, extensions included */
#define TRAILER_LINE_MAX 8192 /* bytes of one trailer line before its CR */
#define TRAILERS_MAX     64   /* trailer fields */

enum ck_state {
	CK_SIZE =
	    0, /* hex digits of a chunk-size (a zeroed struct starts here) */
	CK_SIZE_WS,  /* BWS after the digits: an extension must follow */
	CK_EXT,      /* chunk extensions, up to the CR */
	CK_SIZE_LF,  /* the CR of the size line was seen */
	CK_DATA,     /* chunk payload, c->remaining bytes left */
	CK_DATA_CR,  /* the CR after chunk data is due */
	CK_DATA_LF,  /* the LF after chunk data is due */
	CK_TR_START, /* start of a trailer line, or the final CRLF */
	CK_TR_NAME,  /* a trailer field name */
	CK_TR_VALUE, /* a trailer field value, up to the CR */
	CK_TR_LF,    /* the LF of a trailer line is due */
	CK_END_LF,   /* the LF of the final CRLF is due */
	CK_DONE,     /* message complete; further input is not ours */
	CK_ERROR     /* c->err says why; sticky */
};

/* HTAB, SP, VCHAR and obs-text: what extensions and values may hold. */
static int
is_text(unsigned char c)
{
	return c == '\t' || (c >= 0x20 && c != 0x7f);
}

static enum http1_err
fail(struct http1_chunked *c, enum http1_err e)
{
	c->state = CK_ERROR;
	c->err = e;
	return e;
}

/* The size line: 1*16HEXDIG [ BWS ";" chunk-ext ] CRLF. */
static enum http1_err
size_byte(struct http1_chunked *c, unsigned char ch)
{
	int x;

	/* The CR that ends the line does not count towards its length. */
	if (ch != '\r' && ++c->line_bytes > SIZE_LINE_MAX)
		return fail(c, HTTP1_E_CHUNK_EXT);
	switch (c->state) {
	case CK_SIZE:
		if ((x = ascii_hex_value(ch)) >= 0) {
			/* Leading zeros count: "0000...1" is not a way around
			 * the digit cap. */
			if (c->digits == SIZE_DIGITS_MAX)
				return fail(c, HTTP1_E_CHUNK_SIZE);
			c->digits++;
			c->remaining = c->remaining << 4 | (uint64_t)x;
			return HTTP1_E_NONE;
		}
		/* No leading whitespace, sign or "0x", and not empty. */
		if (c->digits == 0)
			return fail(c, HTTP1_E_CHUNK_SIZE);
		if (ch == '\r')
			c->state = CK_SIZE_LF;
		else if (ch == ';')
			c->state = CK_EXT;
		else if (ch == ' ' || ch == '\t')
			c->state = CK_SIZE_WS;
		else
			return fail(c, HTTP1_E_CHUNK_SIZE);
		return HTTP1_E_NONE;
	case CK_SIZE_WS:
		/* BWS is only allowed before ';' (RFC 9112 §7.1.1). */
		if (ch == ';')
			c->state = CK_EXT;
		else if (ch != ' ' && ch != '\t')
			return fail(c, HTTP1_E_CHUNK_SIZE);
		return HTTP1_E_NONE;
	default: /* CK_EXT */
		if (ch == '\r')
			c->state = CK_SIZE_LF;
		else if (ch == '\n')
			return fail(c, HTTP1_E_CHUNK_SIZE);
		else if (!is_text(ch))
			return fail(c, HTTP1_E_CHUNK_EXT);
		return HTTP1_E_NONE;
	}
}

/* The end of a size line: start the chunk data or the trailer section. */
static enum http1_err
size_done(struct http1_chunked *c, unsigned char ch)
{
	if (ch != '\n')
		return fail(c, HTTP1_E_CHUNK_SIZE);
	c->digits = 0;
	c->line_bytes = 0;
	if (c->remaining == 0) {
		/* digits now counts trailer fields. */
		c->state = CK_TR_START;
		return HTTP1_E_NONE;
	}
	if (c->remaining > UINT64_MAX - c->total)
		return fail(c, HTTP1_E_CHUNK_SIZE);
	c->state = CK_DATA;
	return HTTP1_E_NONE;
}

/*
 * The trailer section (RFC 9112 §7.1.2), as strict as the header section:
 * tchar names, no whitespace before the colon, no obs-fold, no CTL in a
 * value, strict CRLF; bounded in line length and field count.
 */
static enum http1_err
trailer_byte(struct http1_chunked *c, unsigned char ch)
{
	switch (c->state) {
	case CK_TR_START:
		if (ch == '\r') {
			c->state = CK_END_LF;
			return HTTP1_E_NONE;
		}
		/* SP/HTAB here is obs-fold, ':' an empty name, LF bare. */
		if (!ascii_is_tchar(ch) || ++c->digits > TRAILERS_MAX)
			return fail(c, HTTP1_E_TRAILER);
		c->line_bytes = 0;
		c->state = CK_TR_NAME;
		CK_FALLTHROUGH;
	case CK_TR_NAME:
		if (++c->line_bytes > TRAILER_LINE_MAX)
			return fail(c, HTTP1_E_TRAILER);
		if (ch == ':')
			c->state = CK_TR_VALUE;
		else if (!ascii_is_tchar(ch))
			return fail(c, HTTP1_E_TRAILER);
		return HTTP1_E_NONE;
	case CK_TR_VALUE:
		if (ch == '\r')
			c->state = CK_TR_LF;
		else if (!is_text(ch) || ++c->line_bytes > TRAILER_LINE_MAX)
			return fail(c, HTTP1_E_TRAILER);
		return HTTP1_E_NONE;
	case CK_TR_LF:
		if (ch != '\n')
			return fail(c, HTTP1_E_TRAILER);
		c->state = CK_TR_START;
		return HTTP1_E_NONE;
	default: /* CK_END_LF */
		if (ch != '\n')
			return fail(c, HTTP1_E_TRAILER);
		c->state = CK_DONE;
		return HTTP1_E_NONE;
	}
}

/* One framing byte in any state but CK_DATA, CK_DONE and CK_ERROR. */
static enum http1_err
frame_byte(struct http1_chunked *c, unsigned char ch)
{
	switch (c->state) {
	case CK_SIZE:
	case CK_SIZE_WS:
	case CK_EXT:
		return size_byte(c, ch);
	case CK_SIZE_LF:
		return size_done(c, ch);
	case CK_DATA_CR:
		if (ch != '\r')
			return fail(c, HTTP1_E_CHUNK_CRLF);
		c->state = CK_DATA_LF;
		return HTTP1_E_NONE;
	case CK_DATA_LF:
		if (ch != '\n')
			return fail(c, HTTP1_E_CHUNK_CRLF);
		c->state = CK_SIZE;
		c->remaining = 0;
		c->digits = 0;
		c->line_bytes = 0;
		return HTTP1_E_NONE;
	case CK_TR_START:
	case CK_TR_NAME:
	case CK_TR_VALUE:
	case CK_TR_LF:
	case CK_END_LF:
		return trailer_byte(c, ch);
	default:
		/* Not reached: the caller handles the other states. */
		return fail(c, HTTP1_E_CHUNK_SIZE);
	}
}

/* Resets c to the start of a chunked body. */
void
http1_chunked_init(struct http1_chunked *c)
{
	memset(c, 0, sizeof(*c));
	c->state = CK_SIZE;
}

/*
 * Consumes from buf[0..len): either framing bytes up to the next payload
 * (returned with *data_len = 0) or payload bytes of the current chunk (the
 * return value, also in *data_len). Returns 0 when len is 0 or the message
 * is complete, and -1 with c->err set on a framing error (sticky: later
 * calls return -1 again).
 */
ssize_t
http1_chunked_step(struct http1_chunked *c, const char *buf, size_t len,
    size_t *data_len)
{
	size_t i;

	*data_len = 0;
	if (c->state == CK_ERROR)
		return -1;
	if (c->state == CK_DONE || len == 0)
		return 0;
	if (len > (size_t)SSIZE_MAX)
		len = (size_t)SSIZE_MAX;
	if (c->state == CK_DATA) {
		if ((uint64_t)len > c->remaining)
			len = (size_t)c->remaining;
		c->remaining -= len;
		c->total += len;
		if (c->remaining == 0)
			c->state = CK_DATA_CR;
		*data_len = len;
		return (ssize_t)len;
	}
	for (i = 0; i < len;) {
		if (frame_byte(c, (unsigned char)buf[i++]) != HTTP1_E_NONE)
			return -1;
		if (c->state == CK_DATA || c->state == CK_DONE)
			break;
	}
	return (ssize_t)i;
}

/* Non-zero once the last chunk, its trailers and the final CRLF are in. */
int
http1_chunked_done(const struct http1_chunked *c)
{
	return c->state == CK_DONE;
}
