/*
 * chan: the parent <-> engine message channel (DESIGN.md "Privilege
 * separation and self-confinement"), in the style of OpenBSD's imsg: a
 * fixed 8-byte header (type, payload length), then the payload, over a
 * SOCK_STREAM AF_UNIX socketpair driven by libevent. Each side names the
 * message types it accepts and their exact or bounded payload sizes; a
 * header outside them ends the channel before its payload is read.
 */
#ifndef SLUICE_CHAN_H
#define SLUICE_CHAN_H

#include <sys/uio.h>

#include <stddef.h>
#include <stdint.h>

struct event_base;

#define CHAN_HDR_LEN     8 /* u32 type, u32 payload length, host order */
#define CHAN_MAX_PAYLOAD (4u << 20) /* any message */

/* One message type this side accepts. */
struct chan_kind {
	uint32_t ck_type;
	uint32_t ck_min; /* payload bytes, inclusive */
	uint32_t ck_max; /* == ck_min: exact size */
};

struct chan;

/*
 * One whole message, payload bytes contiguous (valid during the call
 * only). The callback may call chan_free(ch) (then return at once).
 */
typedef void chan_msg_cb(struct chan *, uint32_t type, const unsigned char *p,
    size_t len, void *arg);
/*
 * The channel is over: EOF, an I/O error, or a malformed message (unknown
 * type, a length out of its kind's range or over CHAN_MAX_PAYLOAD). why
 * says which, naming the type and length at fault. Called once, from the
 * event loop (never from inside chan_send, chan_sendv or chan_flush);
 * after it no message callback runs; the callback may chan_free(ch).
 */
typedef void chan_end_cb(struct chan *, const char *why, void *arg);

/*
 * Takes fd (non-blocking is set here; closed by chan_free, and closed
 * here too when chan_new fails). kinds: what this side accepts (copied;
 * the first entry of a type counts). max_out: bytes queued for sending at
 * most. NULL out of memory, or (errno EINVAL) when a kind has ck_min >
 * ck_max or ck_max > CHAN_MAX_PAYLOAD.
 */
struct chan *
chan_new(struct event_base *, int fd, const struct chan_kind *kinds,
    size_t nkinds, size_t max_out, chan_msg_cb *, chan_end_cb *, void *arg);
/*
 * Queue one message (written at once when nothing is queued, else when
 * the socket is writable). -1 (nothing queued) when it would pass max_out
 * (the bytes already queued plus CHAN_HDR_LEN + len: so a message larger
 * than max_out is always refused), len > CHAN_MAX_PAYLOAD, or the channel
 * is over. A write error (EPIPE, ECONNRESET, ...) makes the channel over
 * and returns -1; the end callback runs later, from the loop.
 */
int chan_send(struct chan *, uint32_t type, const void *p, size_t len);
/* As chan_send, the payload gathered from iov[0..n) (0 <= n < IOV_MAX). */
int chan_sendv(struct chan *, uint32_t type, const struct iovec *iov, int n);
/* Bytes queued and not yet written. */
size_t chan_out_queued(const struct chan *);
/*
 * Block (poll) until every queued byte is written or timeout_ms passes
 * (negative: no limit); 0 or -1. For the last message before exit.
 */
int chan_flush(struct chan *, int timeout_ms);
/* Closes the fd and frees; NULL is a no-op. Safe inside the callbacks. */
void chan_free(struct chan *);
/*
 * Pure frame check, for tests and fuzzing: buf holds len bytes received
 * so far. Returns 1 with *type and *plen when a whole valid frame is at
 * the start (CHAN_HDR_LEN + *plen bytes), 0 when more bytes are needed,
 * -1 with why when the header is malformed (decided from the 8 header
 * bytes alone, before the payload arrives). why may be NULL.
 */
int
chan_frame(const unsigned char *buf, size_t len, const struct chan_kind *kinds,
    size_t nkinds, uint32_t *type, size_t *plen, char *why, size_t whylen);

#endif
