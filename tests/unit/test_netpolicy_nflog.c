/*
 * The NFLOG packet parser, without root: the bytes come from the sandbox,
 * so every length in them is checked against what the kernel copied.
 * IPv4 and IPv6 (with extension headers), TCP/UDP ports, ICMP, fragments,
 * and truncated or garbage input at every length.
 */
#include <sys/types.h>
#include <sys/socket.h>

#include <netinet/in.h>
#include <arpa/inet.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "netpolicy/netpolicy.h"

/* IPv4, IHL 5, TCP, 198.18.5.1:50630 -> 198.18.0.99:443 */
static const uint8_t v4_tcp[] = { 0x45, 0x00, 0x00, 0x3c, 0x12, 0x34, 0x40,
	0x00, 0x40, 0x06, 0x00, 0x00, 198, 18, 5, 1, 198, 18, 0,
	99, /* addresses */
	0xc5, 0xc6, 0x01, 0xbb, 0, 0, 0, 0, 0, 0, 0, 0, 0xa0, 0x02, 0xfa, 0xf0,
	0, 0, 0, 0 };

static void
test_ipv4_tcp(void **state)
{
	struct np_drop d;

	(void)state;
	assert_int_equal(np_drop_parse_packet(v4_tcp, sizeof(v4_tcp), &d), 0);
	assert_int_equal(d.nd_family, AF_INET);
	assert_int_equal(d.nd_proto, IPPROTO_TCP);
	assert_string_equal(d.nd_src, "198.18.5.1");
	assert_string_equal(d.nd_dst, "198.18.0.99");
	assert_true(d.nd_has_ports);
	assert_int_equal(d.nd_sport, 50630);
	assert_int_equal(d.nd_dport, 443);
	assert_false(d.nd_has_uid);
}

static void
test_ipv4_options_icmp_fragment(void **state)
{
	uint8_t pkt[64];
	struct np_drop d;

	(void)state;
	/* IHL 6 (one option word): ports start after 24 bytes. */
	memset(pkt, 0, sizeof(pkt));
	memcpy(pkt, v4_tcp, 20);
	pkt[0] = 0x46;
	pkt[9] = IPPROTO_UDP;
	pkt[24] = 0x00;
	pkt[25] = 0x35;
	pkt[26] = 0x00;
	pkt[27] = 0x35;
	assert_int_equal(np_drop_parse_packet(pkt, 28, &d), 0);
	assert_int_equal(d.nd_proto, IPPROTO_UDP);
	assert_int_equal(d.nd_dport, 53);
	/* Three bytes of transport header: no ports, still an event. */
	assert_int_equal(np_drop_parse_packet(pkt, 27, &d), 0);
	assert_false(d.nd_has_ports);

	/* ICMP has no ports. */
	pkt[0] = 0x45;
	pkt[9] = IPPROTO_ICMP;
	assert_int_equal(np_drop_parse_packet(pkt, 28, &d), 0);
	assert_int_equal(d.nd_proto, IPPROTO_ICMP);
	assert_false(d.nd_has_ports);

	/* A later fragment carries no transport header. */
	pkt[9] = IPPROTO_TCP;
	pkt[6] = 0x00;
	pkt[7] = 0x10;
	assert_int_equal(np_drop_parse_packet(pkt, 28, &d), 0);
	assert_false(d.nd_has_ports);

	/* An IHL below 5 or past the copy is refused. */
	pkt[0] = 0x44;
	assert_int_equal(np_drop_parse_packet(pkt, 28, &d), -1);
	pkt[0] = 0x4f;
	assert_int_equal(np_drop_parse_packet(pkt, 28, &d), -1);
}

static void
v6_header(uint8_t *pkt, uint8_t nh)
{
	memset(pkt, 0, 40);
	pkt[0] = 0x60;
	pkt[6] = nh;
	pkt[7] = 64;
	inet_pton(AF_INET6, "2001:2::5", pkt + 8);
	inet_pton(AF_INET6, "2001:2:ff::1", pkt + 24);
}

static void
test_ipv6(void **state)
{
	uint8_t pkt[128];
	struct np_drop d;

	(void)state;
	v6_header(pkt, IPPROTO_TCP);
	pkt[40] = 0x30;
	pkt[41] = 0x39;
	pkt[42] = 0x00;
	pkt[43] = 0x50;
	assert_int_equal(np_drop_parse_packet(pkt, 60, &d), 0);
	assert_int_equal(d.nd_family, AF_INET6);
	assert_string_equal(d.nd_src, "2001:2::5");
	assert_string_equal(d.nd_dst, "2001:2:ff::1");
	assert_int_equal(d.nd_proto, IPPROTO_TCP);
	assert_int_equal(d.nd_sport, 12345);
	assert_int_equal(d.nd_dport, 80);

	/* Hop-by-hop (8 bytes) then UDP. */
	v6_header(pkt, IPPROTO_HOPOPTS);
	pkt[40] = IPPROTO_UDP;
	pkt[41] = 0;
	pkt[48 + 2] = 0x00;
	pkt[48 + 3] = 0x35;
	assert_int_equal(np_drop_parse_packet(pkt, 56, &d), 0);
	assert_int_equal(d.nd_proto, IPPROTO_UDP);
	assert_true(d.nd_has_ports);
	assert_int_equal(d.nd_dport, 53);

	/* An extension header longer than the copy: no ports, no overread. */
	pkt[41] = 200;
	assert_int_equal(np_drop_parse_packet(pkt, 56, &d), 0);
	assert_false(d.nd_has_ports);

	/* A non-first fragment. */
	v6_header(pkt, IPPROTO_FRAGMENT);
	pkt[40] = IPPROTO_TCP;
	pkt[42] = 0x01;
	pkt[43] = 0x00;
	assert_int_equal(np_drop_parse_packet(pkt, 60, &d), 0);
	assert_false(d.nd_has_ports);

	/* ICMPv6. */
	v6_header(pkt, IPPROTO_ICMPV6);
	assert_int_equal(np_drop_parse_packet(pkt, 48, &d), 0);
	assert_int_equal(d.nd_proto, IPPROTO_ICMPV6);
	assert_false(d.nd_has_ports);
}

static void
test_truncated_and_garbage(void **state)
{
	uint8_t pkt[64], *copy;
	struct np_drop d;
	size_t len;

	(void)state;
	/* Every strict prefix of a header is refused or port-less. */
	for (len = 0; len < 20; len++)
		assert_int_equal(np_drop_parse_packet(v4_tcp, len, &d), -1);
	v6_header(pkt, IPPROTO_TCP);
	for (len = 0; len < 40; len++) {
		/* Exact-size heap copies, so ASan sees any overread. */
		copy = malloc(len > 0 ? len : 1);
		assert_non_null(copy);
		memcpy(copy, pkt, len);
		assert_int_equal(np_drop_parse_packet(copy, len, &d), -1);
		free(copy);
	}
	for (len = 20; len <= sizeof(v4_tcp); len++) {
		copy = malloc(len);
		assert_non_null(copy);
		memcpy(copy, v4_tcp, len);
		assert_int_equal(np_drop_parse_packet(copy, len, &d), 0);
		assert_int_equal(d.nd_has_ports, len >= 24);
		free(copy);
	}
	/* Not IP at all. */
	memset(pkt, 0xff, sizeof(pkt));
	assert_int_equal(np_drop_parse_packet(pkt, sizeof(pkt), &d), -1);
	assert_int_equal(np_drop_parse_packet(NULL, 10, &d), -1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ipv4_tcp),
		cmocka_unit_test(test_ipv4_options_icmp_fragment),
		cmocka_unit_test(test_ipv6),
		cmocka_unit_test(test_truncated_and_garbage),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
