/*
 * The private destinations (DESIGN.md "Requests and routing"): IPv4 and
 * IPv6 ranges no upstream may resolve to unless its route allows it, and
 * the IPv4 embedded in IPv6 by mapping, NAT64 and 6to4. Used by the policy
 * loader (literal upstreams) and policy_check_addr() (resolved ones).
 */
#include <sys/socket.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <stdint.h>
#include <string.h>

#include "proxy/util/util.h"

struct v4net {
	uint32_t net;
	unsigned bits;
};

static const struct v4net private4[] = {
	{ 0x00000000, 8 },  /* 0.0.0.0/8 */
	{ 0x0a000000, 8 },  /* 10/8 */
	{ 0x64400000, 10 }, /* 100.64/10 (CGNAT) */
	{ 0x7f000000, 8 },  /* 127/8 */
	{ 0xa9fe0000, 16 }, /* 169.254/16 (link-local, metadata) */
	{ 0xac100000, 12 }, /* 172.16/12 */
	{ 0xc0000000, 24 }, /* 192.0.0.0/24 */
	{ 0xc0a80000, 16 }, /* 192.168/16 */
	{ 0xe0000000, 4 },  /* 224/4 (multicast) */
	{ 0xf0000000, 4 },  /* 240/4 (reserved, broadcast) */
};

static int
private_v4(uint32_t a)
{
	size_t i;

	for (i = 0; i < SL_NELEM(private4); i++) {
		uint32_t mask = 0xffffffffu << (32 - private4[i].bits);

		if ((a & mask) == private4[i].net)
			return 1;
	}
	return 0;
}

static uint32_t
be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	    (uint32_t)p[2] << 8 | p[3];
}

static int
private_v6(const uint8_t *a)
{
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff,
		0xff };
	static const uint8_t nat64[12] = { 0x00, 0x64, 0xff, 0x9b };
	static const uint8_t nat64l[6] = { 0x00, 0x64, 0xff, 0x9b, 0x00, 0x01 };
	static const uint8_t zero[16];

	if (memcmp(a, zero, 16) == 0) /* ::/128 */
		return 1;
	if (memcmp(a, zero, 15) == 0 && a[15] == 1) /* ::1/128 */
		return 1;
	if ((a[0] & 0xfe) == 0xfc) /* fc00::/7 */
		return 1;
	if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80) /* fe80::/10 */
		return 1;
	if (a[0] == 0xff) /* ff00::/8 */
		return 1;
	/*
	 * IPv4 inside IPv6 is judged as the IPv4 address it carries:
	 * ::ffff:0:0/96, 64:ff9b::/96 and the deprecated IPv4-compatible
	 * ::/96 (whose ::/128 and ::1/128 fall in 0.0.0.0/8 too).
	 */
	if (memcmp(a, mapped, 12) == 0 || memcmp(a, nat64, 12) == 0 ||
	    memcmp(a, zero, 12) == 0)
		return private_v4(be32(a + 12));
	/*
	 * The local-use NAT64 prefix 64:ff9b:1::/48 (RFC 8215) in the /48
	 * layout of RFC 6052 section 2.2: the IPv4 address is bits 48..63
	 * and 72..87, around the u-octet (bits 64..71), which must be zero.
	 * An address with a non-zero u-octet is no translation of anything:
	 * refused. Every address of 64:ff9b:1::/96 reads as 0.0.0.0/8 here
	 * and is refused too, whatever the NAT64's prefix length.
	 */
	if (memcmp(a, nat64l, 6) == 0) {
		uint8_t v4[4] = { a[6], a[7], a[9], a[10] };

		return a[8] != 0 || private_v4(be32(v4));
	}
	if (a[0] == 0x20 && a[1] == 0x02) /* 2002::/16 (6to4) */
		return private_v4(be32(a + 2));
	return 0;
}

int
addr_private(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)sa;

		return private_v4(ntohl(sin->sin_addr.s_addr));
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *sin6 =
		    (const struct sockaddr_in6 *)sa;

		return private_v6(sin6->sin6_addr.s6_addr);
	}
	return 1; /* anything else is not a destination */
}
