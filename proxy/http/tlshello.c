/*
 * The server_name of a TLS ClientHello (RFC 8446 §4.1.2, RFC 6066 §3),
 * read from the first bytes a client sent: what a transparent listener
 * needs to decide before it starts the handshake itself. Strict: one
 * ClientHello in handshake records (fragments reassembled), every length
 * consistent with the one around it, no extension twice, at most one
 * host_name, and that name an LDH host name. Pure: no allocation, no
 * global state; the bytes are only read.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "proxy/http/http1.h"

#define REC_HANDSHAKE   0x16
#define REC_HDR         5
#define REC_MAX         16384 /* a plaintext record's fragment, 2^14 */
#define HS_CLIENT_HELLO 1
#define HS_HDR          4
#define EXT_SERVER_NAME 0
#define SNI_HOST_NAME   0
#define MAX_EXTS        128 /* distinct types checked for repeats */

/* A bounded reader over the reassembled handshake message. */
struct rd {
	const unsigned char *p;
	size_t len, off;
	int bad;
};

static unsigned
rd_u8(struct rd *r)
{
	if (r->bad || r->len - r->off < 1) {
		r->bad = 1;
		return 0;
	}
	return r->p[r->off++];
}

static unsigned
rd_u16(struct rd *r)
{
	unsigned v = rd_u8(r) << 8;

	return v | rd_u8(r);
}

/* A sub-reader over the next n bytes; r moves past them. */
static struct rd
rd_sub(struct rd *r, size_t n)
{
	struct rd s = { NULL, 0, 0, 1 };

	if (r->bad || r->len - r->off < n) {
		r->bad = 1;
		return s;
	}
	s.p = r->p + r->off;
	s.len = n;
	s.off = 0;
	s.bad = 0;
	r->off += n;
	return s;
}

static int
rd_done(const struct rd *r)
{
	return !r->bad && r->off == r->len;
}

/*
 * A host_name as RFC 6066 has it: an ASCII LDH name without a trailing
 * dot, labels of 1 to 63 bytes not starting or ending with '-', at most
 * 253 bytes; an address literal is not a host_name (all-digit last label).
 * Copied lower case into out (cap bytes with the NUL).
 */
static int
sni_host(const unsigned char *p, size_t n, char *out, size_t cap,
    const char **why)
{
	size_t i, lab = 0;
	int digits = 1;

	if (n == 0 || n > 253 || n >= cap) {
		*why = "server_name: empty or longer than 253 bytes";
		return -1;
	}
	for (i = 0; i < n; i++) {
		unsigned char ch = p[i];

		if (ch == '.') {
			if (lab == 0 || p[i - 1] == '-') {
				*why = "server_name: an empty label or one "
				       "ending in '-'";
				return -1;
			}
			lab = 0;
			digits = 1;
			out[i] = '.';
			continue;
		}
		if (ch >= 'A' && ch <= 'Z')
			ch = (unsigned char)(ch - 'A' + 'a');
		if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
			ch == '-') ||
		    (ch == '-' && lab == 0)) {
			*why = "server_name: not a host name (letters, digits, "
			       "'-' and '.')";
			return -1;
		}
		if (!(ch >= '0' && ch <= '9'))
			digits = 0;
		if (++lab > 63) {
			*why = "server_name: a label longer than 63 bytes";
			return -1;
		}
		out[i] = (char)ch;
	}
	if (lab == 0 || p[n - 1] == '-') {
		*why = "server_name: ends in '.' or '-'";
		return -1;
	}
	if (digits) {
		*why = "server_name: an address literal (RFC 6066 has none)";
		return -1;
	}
	out[n] = '\0';
	return 0;
}

/* The server_name extension's body: exactly one host_name. */
static int
parse_sni(struct rd *ext, char *out, size_t cap, const char **why)
{
	struct rd list = rd_sub(ext, rd_u16(ext));
	int seen = 0;

	if (!rd_done(ext) || list.len == 0) {
		*why = "server_name: its list's length is wrong";
		return -1;
	}
	while (!list.bad && list.off < list.len) {
		unsigned type = rd_u8(&list);
		struct rd name = rd_sub(&list, rd_u16(&list));

		if (list.bad) {
			*why = "server_name: an entry runs past the list";
			return -1;
		}
		if (type != SNI_HOST_NAME) {
			*why = "server_name: an entry that is not a host_name";
			return -1;
		}
		if (seen) {
			*why = "server_name: two host names";
			return -1;
		}
		if (sni_host(name.p, name.len, out, cap, why) == -1)
			return -1;
		seen = 1;
	}
	return 0;
}

/* The ClientHello body (after its 4-byte handshake header). */
static enum tls_hello
parse_hello(struct rd *h, char *out, size_t cap, const char **why)
{
	unsigned seen[MAX_EXTS];
	size_t nseen = 0, i;
	struct rd exts, sid, cs, cm;
	int sni = 0;

	if (rd_u8(h) != 3) {
		*why = "ClientHello: legacy_version is not 3.x";
		return TLS_HELLO_BAD;
	}
	(void)rd_u8(h);
	(void)rd_sub(h, 32); /* random */
	sid = rd_sub(h, rd_u8(h));
	cs = rd_sub(h, rd_u16(h));
	cm = rd_sub(h, rd_u8(h));
	if (h->bad || sid.len > 32 || cs.len < 2 || cs.len % 2 != 0 ||
	    cm.len < 1) {
		*why = "ClientHello: session id, cipher suites or compression "
		       "methods malformed";
		return TLS_HELLO_BAD;
	}
	/* TLS 1.2 allows a hello without extensions: then no SNI either. */
	if (rd_done(h)) {
		*why = "ClientHello: no extensions, so no server_name";
		return TLS_HELLO_NO_SNI;
	}
	exts = rd_sub(h, rd_u16(h));
	if (!rd_done(h)) {
		*why = "ClientHello: the extensions do not end the message";
		return TLS_HELLO_BAD;
	}
	while (exts.off < exts.len) {
		unsigned type = rd_u16(&exts);
		struct rd ext = rd_sub(&exts, rd_u16(&exts));

		if (exts.bad) {
			*why = "ClientHello: an extension runs past the list";
			return TLS_HELLO_BAD;
		}
		for (i = 0; i < nseen; i++)
			if (seen[i] == type) {
				*why = "ClientHello: an extension appears "
				       "twice";
				return TLS_HELLO_BAD;
			}
		if (nseen == MAX_EXTS) {
			*why = "ClientHello: too many extensions";
			return TLS_HELLO_BAD;
		}
		seen[nseen++] = type;
		if (type != EXT_SERVER_NAME)
			continue;
		if (parse_sni(&ext, out, cap, why) == -1)
			return TLS_HELLO_BAD;
		sni = 1;
	}
	if (!sni) {
		*why = "ClientHello: no server_name";
		return TLS_HELLO_NO_SNI;
	}
	return TLS_HELLO_OK;
}

enum tls_hello
tls_hello_sni(const unsigned char *buf, size_t len, char *out, size_t cap,
    const char **why)
{
	/* The handshake message, reassembled from its records' fragments. */
	unsigned char hs[TLS_HELLO_MAX];
	size_t got = 0, want = 0, off = 0, rlen, take;
	struct rd h;

	*why = "";
	if (cap > 0)
		out[0] = '\0';
	if (len == 0)
		return TLS_HELLO_MORE;
	if (buf[0] != REC_HANDSHAKE) {
		*why = "the first byte is not a TLS handshake record";
		return TLS_HELLO_NOT_TLS;
	}
	for (;;) {
		if (len - off < REC_HDR)
			return TLS_HELLO_MORE;
		if (buf[off] != REC_HANDSHAKE) {
			*why = "a record inside the ClientHello is not a "
			       "handshake record";
			return TLS_HELLO_BAD;
		}
		if (buf[off + 1] != 3 || buf[off + 2] > 4) {
			*why = "a record's version is not TLS";
			return TLS_HELLO_BAD;
		}
		rlen = (size_t)buf[off + 3] << 8 | buf[off + 4];
		if (rlen == 0 || rlen > REC_MAX) {
			*why = "a record's length is 0 or over 2^14";
			return TLS_HELLO_BAD;
		}
		off += REC_HDR;
		take = rlen < len - off ? rlen : len - off;
		if (got + take > sizeof(hs)) {
			*why = "the ClientHello is larger than sluice reads";
			return TLS_HELLO_BAD;
		}
		memcpy(hs + got, buf + off, take);
		got += take;
		if (want == 0 && got >= HS_HDR) {
			if (hs[0] != HS_CLIENT_HELLO) {
				*why = "the first handshake message is not a "
				       "ClientHello";
				return TLS_HELLO_BAD;
			}
			want = HS_HDR +
			    ((size_t)hs[1] << 16 | (size_t)hs[2] << 8 | hs[3]);
			if (want > sizeof(hs)) {
				*why = "the ClientHello is larger than sluice "
				       "reads";
				return TLS_HELLO_BAD;
			}
		}
		if (take < rlen)
			return TLS_HELLO_MORE;
		off += rlen;
		if (want != 0 && got >= want)
			break;
	}
	/* The record that ends the ClientHello holds nothing after it. */
	if (got != want) {
		*why = "a record holds more than the ClientHello";
		return TLS_HELLO_BAD;
	}
	h.p = hs + HS_HDR;
	h.len = want - HS_HDR;
	h.off = 0;
	h.bad = 0;
	return parse_hello(&h, out, cap, why);
}
