/*
 * libFuzzer target for netpolicy/nflog.c, whose packet bytes come from
 * the sandbox. The first byte picks a mode:
 *   even  the rest is one datagram as read from the NFLOG socket, given to
 *         np_nflog_parse() as the daemon does;
 *   odd   the rest is an IP packet: np_drop_parse_packet() parses it, then
 *         the target wraps it in a well-formed NFULNL_MSG_PACKET message
 *         (with a uid when the next bit says so, between other attributes)
 *         and np_nflog_parse() must report the same drop, once.
 * Invariants, not just "no crash": a drop has a known family, addresses
 * that are the packet's own bytes, ports only for TCP and UDP and only
 * where the copy holds them (for IPv4 at the header's end, taken from the
 * first fragment only), and the count returned is the callbacks made.
 */
#include <sys/socket.h>

#include <netinet/in.h>
#include <arpa/inet.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <linux/netlink.h>

#include "netpolicy/netpolicy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_DGRAM (64 * 1024)
/* NLA_HDRLEN and NLA_ALIGN(), without their int arithmetic. */
#define ATTR_HDR      sizeof(struct nlattr)
#define ATTR_ALIGN(n) (((n) + 3) & ~(size_t)3)

static void
check(int cond, const char *what)
{
	if (!cond) {
		fprintf(stderr, "fuzz_nflog invariant broken: %s\n", what);
		abort();
	}
}

/* Checks that need no packet bytes: what any reported drop must be. */
static void
check_drop(const struct np_drop *d)
{
	unsigned char a[16];
	int af;

	check(d->nd_family == AF_INET || d->nd_family == AF_INET6, "family");
	af = d->nd_family;
	check(memchr(d->nd_src, '\0', sizeof(d->nd_src)) != NULL, "src NUL");
	check(memchr(d->nd_dst, '\0', sizeof(d->nd_dst)) != NULL, "dst NUL");
	check(inet_pton(af, d->nd_src, a) == 1, "src is an address");
	check(inet_pton(af, d->nd_dst, a) == 1, "dst is an address");
	check(d->nd_has_ports == 0 || d->nd_has_ports == 1, "has_ports");
	check(!d->nd_has_ports || d->nd_proto == IPPROTO_TCP ||
		d->nd_proto == IPPROTO_UDP,
	    "ports without TCP or UDP");
	check(d->nd_has_ports || (d->nd_sport == 0 && d->nd_dport == 0),
	    "ports set without has_ports");
	check(d->nd_has_uid || d->nd_uid == 0, "uid set without has_uid");
}

/* Checks against the packet the drop came from. */
static void
check_packet(const uint8_t *pkt, size_t len, const struct np_drop *d)
{
	unsigned char a[16];
	size_t ihl, off;
	uint16_t frag;
	int found;

	check_drop(d);
	check(!d->nd_has_uid, "uid from a bare packet");
	if (d->nd_family == AF_INET) {
		check(len >= 20 && pkt[0] >> 4 == 4, "IPv4 too short");
		ihl = (size_t)(pkt[0] & 0x0f) * 4;
		check(ihl >= 20 && ihl <= len, "IPv4 header length");
		check(d->nd_proto == pkt[9], "IPv4 protocol");
		check(inet_pton(AF_INET, d->nd_src, a) == 1 &&
			memcmp(a, pkt + 12, 4) == 0,
		    "IPv4 source");
		check(inet_pton(AF_INET, d->nd_dst, a) == 1 &&
			memcmp(a, pkt + 16, 4) == 0,
		    "IPv4 destination");
		frag = (uint16_t)((pkt[6] & 0x1f) << 8 | pkt[7]);
		check(d->nd_has_ports ==
			((pkt[9] == IPPROTO_TCP || pkt[9] == IPPROTO_UDP) &&
			    frag == 0 && len - ihl >= 4),
		    "IPv4 ports present");
		if (d->nd_has_ports)
			check(d->nd_sport ==
				    (uint16_t)(pkt[ihl] << 8 | pkt[ihl + 1]) &&
				d->nd_dport ==
				    (uint16_t)(pkt[ihl + 2] << 8 |
					pkt[ihl + 3]),
			    "IPv4 ports");
		return;
	}
	check(len >= 40 && pkt[0] >> 4 == 6, "IPv6 too short");
	check(inet_pton(AF_INET6, d->nd_src, a) == 1 &&
		memcmp(a, pkt + 8, 16) == 0,
	    "IPv6 source");
	check(inet_pton(AF_INET6, d->nd_dst, a) == 1 &&
		memcmp(a, pkt + 24, 16) == 0,
	    "IPv6 destination");
	if (!d->nd_has_ports)
		return;
	/*
	 * The transport header follows whole extension headers (multiples
	 * of 8 bytes) and lies within the copy.
	 */
	found = 0;
	for (off = 40; off + 4 <= len && !found; off += 8)
		found =
		    d->nd_sport == (uint16_t)(pkt[off] << 8 | pkt[off + 1]) &&
		    d->nd_dport == (uint16_t)(pkt[off + 2] << 8 | pkt[off + 3]);
	check(found, "IPv6 ports not in the packet");
}

struct seen {
	int n;
	struct np_drop last;
};

static void
on_drop(void *arg, const struct np_drop *d)
{
	struct seen *s = arg;

	check_drop(d);
	s->n++;
	s->last = *d;
}

static void
mode_dgram(const uint8_t *in, size_t len)
{
	uint8_t *buf;
	struct seen s;
	int n;

	/*
	 * An exact-size copy: aligned, as the daemon's receive buffer is,
	 * and ASan still sees a read past the end.
	 */
	if ((buf = malloc(len > 0 ? len : 1)) == NULL)
		return;
	memcpy(buf, in, len);
	memset(&s, 0, sizeof(s));
	n = np_nflog_parse(buf, len, on_drop, &s);
	check(n == s.n, "count is not the callbacks made");
	check((size_t)n <=
		len / (NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(struct nfgenmsg))),
	    "more packets than messages");
	/* A NULL callback only counts. */
	check(np_nflog_parse(buf, len, NULL, NULL) == n, "NULL callback");
	free(buf);
}

/* Append one attribute at *off in buf; the caller leaves room. */
static void
put_attr(uint8_t *buf, size_t *off, uint16_t type, const void *p, size_t n)
{
	struct nlattr na;

	na.nla_len = (uint16_t)(ATTR_HDR + n);
	na.nla_type = type;
	memcpy(buf + *off, &na, sizeof(na));
	if (n > 0)
		memcpy(buf + *off + ATTR_HDR, p, n);
	memset(buf + *off + ATTR_HDR + n, 0, ATTR_ALIGN(n) - n);
	*off += ATTR_HDR + ATTR_ALIGN(n);
}

static void
mode_packet(const uint8_t *in, size_t size)
{
	static uint32_t amsg[(MAX_DGRAM + 256) / 4];
	uint8_t *msg = (uint8_t *)amsg;
	const uint8_t *pkt;
	struct np_drop d;
	struct nlmsghdr nh;
	struct nfgenmsg g;
	struct seen s;
	uint32_t uid = htonl(4242), mark = 0;
	uint16_t hw = htons(0x0800);
	size_t len, off;
	int r, with_uid;

	if (size < 1)
		return;
	with_uid = in[0] & 1;
	pkt = in + 1;
	len = size - 1;
	if (len > 0xffff - 2 * ATTR_HDR - 16)
		return;
	r = np_drop_parse_packet(pkt, len, &d);
	check(r == 0 || r == -1, "parse result");
	if (r == 0)
		check_packet(pkt, len, &d);

	/* The same packet as the kernel would send it. */
	off = NLMSG_HDRLEN;
	memset(&g, 0, sizeof(g));
	g.nfgen_family =
	    (uint8_t)(len > 0 && pkt[0] >> 4 == 6 ? AF_INET6 : AF_INET);
	g.version = NFNETLINK_V0;
	g.res_id = htons(7);
	memcpy(msg + off, &g, sizeof(g));
	off += NLMSG_ALIGN(sizeof(g));
	put_attr(msg, &off, NFULA_PACKET_HDR, &hw, sizeof(hw));
	put_attr(msg, &off, NFULA_MARK, &mark, sizeof(mark));
	put_attr(msg, &off, NFULA_PAYLOAD, pkt, len);
	if (with_uid)
		put_attr(msg, &off, NFULA_UID, &uid, sizeof(uid));
	memset(&nh, 0, sizeof(nh));
	nh.nlmsg_len = (uint32_t)off;
	nh.nlmsg_type = (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_PACKET;
	memcpy(msg, &nh, sizeof(nh));

	memset(&s, 0, sizeof(s));
	check(np_nflog_parse(msg, off, on_drop, &s) == (r == 0 ? 1 : 0),
	    "wrapped packet count");
	check(s.n == (r == 0 ? 1 : 0), "wrapped packet callbacks");
	if (r != 0)
		return;
	check(s.last.nd_has_uid == with_uid, "uid presence");
	check(!with_uid || s.last.nd_uid == 4242, "uid value");
	check(s.last.nd_family == d.nd_family &&
		s.last.nd_proto == d.nd_proto &&
		strcmp(s.last.nd_src, d.nd_src) == 0 &&
		strcmp(s.last.nd_dst, d.nd_dst) == 0 &&
		s.last.nd_has_ports == d.nd_has_ports &&
		s.last.nd_sport == d.nd_sport && s.last.nd_dport == d.nd_dport,
	    "netlink path and packet parser disagree");
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size - 1 > MAX_DGRAM)
		return 0;
	if (data[0] & 1)
		mode_packet(data + 1, size - 1);
	else
		mode_dgram(data + 1, size - 1);
	return 0;
}
