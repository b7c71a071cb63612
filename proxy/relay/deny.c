/*
 * The response sluice sends for a denial (DESIGN.md "Responses to
 * denials"): the reason at the end of the status line's reason phrase,
 * Sluice-Deny, x-should-retry: false on every 4xx, the challenge header of
 * a token failure, and the JSON body {"error","message","request_id"}.
 * Values from the sandbox reach the message only through deny_clean().
 */
#include <string.h>

#include <event2/buffer.h>

#include "proxy/config/config.h"
#include "proxy/dns/resolve.h"
#include "proxy/http/http1.h"
#include "proxy/ops/ops.h"
#include "proxy/policy/policy.h"
#include "proxy/relay/relay.h"
#include "proxy/token/store.h"
#include "proxy/util/util.h"

#define DENY_BODY_MAX (2 * DENY_MSG_MAX + 256)

size_t
deny_clean(char *dst, size_t cap, const char *s, size_t len)
{
	size_t i, n, max;
	int cut;

	if (cap == 0)
		return 0;
	max = cap - 1;
	cut = len > max && max > 3;
	n = len > max ? max : len;
	if (cut)
		n = max - 3;
	for (i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];

		/* Printable ASCII only: no control byte, no invalid UTF-8. */
		dst[i] = (char)(ch >= 0x20 && ch < 0x7f ? ch : '?');
	}
	if (cut) {
		memcpy(dst + n, "...", 3);
		n += 3;
	}
	dst[n] = '\0';
	return n;
}

/* msg escaped as a JSON string's contents (msg is printable ASCII). */
static size_t
json_escape(char *dst, size_t cap, const char *msg)
{
	size_t n = 0;

	for (; *msg != '\0' && n + 7 < cap; msg++) {
		unsigned char ch = (unsigned char)*msg;

		if (ch == '"' || ch == '\\') {
			dst[n++] = '\\';
			dst[n++] = (char)ch;
		} else if (ch < 0x20 || ch >= 0x7f) {
			/* Not expected after deny_clean(); never raw. */
			dst[n++] = '?';
		} else
			dst[n++] = (char)ch;
	}
	dst[n] = '\0';
	return n;
}

int
deny_write(struct evbuffer *out, enum reason r, int reverse, int close,
    const char *msg, const char *id)
{
	int status = reason_status(r, reverse);
	const char *name = reason_name(r);
	char emsg[2 * DENY_MSG_MAX + 8], eid[2 * CLIENTS_ID_LEN + 8];
	char body[DENY_BODY_MAX];
	int blen;

	(void)json_escape(emsg, sizeof(emsg), msg != NULL ? msg : "");
	(void)json_escape(eid, sizeof(eid), id != NULL ? id : "");
	blen = snprintf(body, sizeof(body),
	    "{\"error\":\"%s\",\"message\":\"%s\",\"request_id\":\"%s\"}", name,
	    emsg, eid);
	if (blen < 0 || (size_t)blen >= sizeof(body))
		return -1;
	return evbuffer_add_printf(out,
		   "HTTP/1.1 %d %s (%s)\r\n"
		   "Sluice-Deny: %s\r\n"
		   "Content-Type: application/json\r\n"
		   "Content-Length: %d\r\n"
		   "%s%s%s%s"
		   "\r\n"
		   "%s",
		   status, reason_status_text(status), name, name, blen,
		   status >= 400 && status < 500 ? "x-should-retry: false\r\n" :
						   "",
		   r == REASON_RATE_LIMITED ? "Retry-After: 1\r\n" : "",
		   reason_is_token(r) ?
		       (reverse ? "WWW-Authenticate: Bearer\r\n" :
				  "Proxy-Authenticate: Bearer\r\n") :
		       "",
		   close ? "Connection: close\r\n" : "", body) < 0 ?
	    -1 :
	    0;
}
