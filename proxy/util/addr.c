/*
 * Socket addresses as text ("198.18.0.2:443", "[2001:2::1]:443") for the
 * audit log, which writes two per request: IPv4 is formatted by hand
 * (inet_ntop and snprintf cost more than the rest of the line).
 */
#include <sys/socket.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <stdio.h>
#include <string.h>

#include "proxy/util/util.h"

static char *
put_dec(char *p, unsigned v)
{
	char tmp[8];
	int n = 0;

	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v != 0);
	while (n > 0)
		*p++ = tmp[--n];
	return p;
}

size_t
addr_str(const struct sockaddr *sa, char *buf, size_t len)
{
	char host[INET6_ADDRSTRLEN];
	int n;

	if (len < ADDR_STR_LEN) {
		if (len > 0)
			buf[0] = '\0';
		return 0;
	}
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)sa;
		const unsigned char *a =
		    (const unsigned char *)&sin->sin_addr.s_addr;
		char *p = buf;

		p = put_dec(p, a[0]);
		*p++ = '.';
		p = put_dec(p, a[1]);
		*p++ = '.';
		p = put_dec(p, a[2]);
		*p++ = '.';
		p = put_dec(p, a[3]);
		*p++ = ':';
		p = put_dec(p, ntohs(sin->sin_port));
		*p = '\0';
		return (size_t)(p - buf);
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;

		inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof(host));
		n = snprintf(buf, len, "[%s]:%u", host, ntohs(s6->sin6_port));
		return n > 0 ? (size_t)n : 0;
	}
	memcpy(buf, "-", 2);
	return 1;
}

void
addr_make(struct sockaddr_storage *ss, int v6, const unsigned char *b,
    uint16_t port)
{
	memset(ss, 0, sizeof(*ss));
	if (!v6) {
		struct sockaddr_in *sin = (struct sockaddr_in *)ss;

		sin->sin_family = AF_INET;
		sin->sin_port = htons(port);
		memcpy(&sin->sin_addr, b, 4);
	} else {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(port);
		memcpy(&sin6->sin6_addr, b, 16);
	}
}
