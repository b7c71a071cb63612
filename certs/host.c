/*
 * Host names a leaf (or a CA's name constraints) may carry. Strict on
 * purpose: what a CA may sign is a security boundary, so a name is
 * refused rather than normalized when it is anything but a plain
 * lowercase DNS name or an address literal.
 */
#include <arpa/inet.h>

#include <stdio.h>
#include <string.h>

#include "certs/certs.h"

/*
 * Byte i of host, the label bytes before it in its label: 0 when it may
 * be there, or -1 with why naming the byte and the rule.
 */
static int
bad_byte(const char *host, size_t len, size_t i, size_t label, char *why,
    size_t whylen)
{
	unsigned char c = (unsigned char)host[i];

	if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))
		return 0;
	if (c == '-' && label > 0)
		return 0;
	if (c == '-')
		snprintf(why, whylen,
		    "\"%.*s\": label starts with '-' at byte %zu", (int)len,
		    host, i);
	else if (c == '*')
		snprintf(why, whylen,
		    "\"%.*s\": wildcard at byte %zu (not allowed)", (int)len,
		    host, i);
	else if (c >= 'A' && c <= 'Z')
		snprintf(why, whylen,
		    "\"%.*s\": upper-case letter at byte %zu (write host "
		    "names in lower case)",
		    (int)len, host, i);
	else if (c < 0x20 || c >= 0x7f)
		snprintf(why, whylen,
		    "host name: byte 0x%02x at %zu is not a letter, digit, "
		    "'-' or '.'",
		    c, i);
	else
		snprintf(why, whylen,
		    "\"%.*s\": '%c' at byte %zu is not a letter, digit, '-' "
		    "or '.'",
		    (int)len, host, c, i);
	return -1;
}

/* The end of a label at byte i (a dot or the end): 0, or -1 with why. */
static int
label_end(const char *host, size_t len, size_t i, size_t label, char *why,
    size_t whylen)
{
	if (label == 0) {
		snprintf(why, whylen, "\"%.*s\": empty label at byte %zu",
		    (int)len, host, i);
		return -1;
	}
	if (host[i - 1] == '-') {
		snprintf(why, whylen,
		    "\"%.*s\": label ends with '-' at byte %zu", (int)len, host,
		    i - 1);
		return -1;
	}
	return 0;
}

int
certs_host_check(const char *host, char *why, size_t whylen)
{
	unsigned char addr[16];
	size_t len = strlen(host), i, label = 0;
	int digits_only = 1;

	if (inet_pton(AF_INET, host, addr) == 1 ||
	    inet_pton(AF_INET6, host, addr) == 1)
		return 0;
	if (len == 0) {
		snprintf(why, whylen, "empty host name");
		return -1;
	}
	if (len > CERTS_HOST_MAX) {
		snprintf(why, whylen, "host name of %zu bytes (at most %d)",
		    len, CERTS_HOST_MAX);
		return -1;
	}
	for (i = 0; i <= len; i++) {
		if (host[i] == '.' || host[i] == '\0') {
			if (label_end(host, len, i, label, why, whylen) == -1)
				return -1;
			if (host[i] == '\0')
				break; /* digits_only is the last label's */
			label = 0;
			digits_only = 1;
			continue;
		}
		if (bad_byte(host, len, i, label, why, whylen) == -1)
			return -1;
		if (host[i] < '0' || host[i] > '9')
			digits_only = 0;
		if (++label > 63) {
			snprintf(why, whylen,
			    "\"%.*s\": label longer than 63 bytes at byte %zu",
			    (int)len, host, i - 63);
			return -1;
		}
	}
	if (digits_only) {
		/* "10.1" or "0x7f.1": some parsers read these as addresses. */
		snprintf(why, whylen,
		    "\"%.*s\": all-digit last label (not an address literal, "
		    "not a DNS name)",
		    (int)len, host);
		return -1;
	}
	return 0;
}

int
certs_host_canon(const char *host, char *out, size_t outlen, char *why,
    size_t whylen)
{
	unsigned char addr[16];
	size_t len = strlen(host), i;

	if (outlen < CERTS_HOST_MAX + 1) {
		snprintf(why, whylen, "host buffer too small");
		return -1;
	}
	if (inet_pton(AF_INET6, host, addr) == 1) {
		if (inet_ntop(AF_INET6, addr, out, (socklen_t)outlen) == NULL) {
			snprintf(why, whylen, "cannot print an IPv6 address");
			return -1;
		}
		return 0;
	}
	if (len > CERTS_HOST_MAX) {
		snprintf(why, whylen, "host name of %zu bytes (at most %d)",
		    len, CERTS_HOST_MAX);
		return -1;
	}
	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)host[i];

		if (c >= 'A' && c <= 'Z')
			c = (unsigned char)(c + 32);
		out[i] = (char)c;
	}
	out[len] = '\0';
	return certs_host_check(out, why, whylen);
}
