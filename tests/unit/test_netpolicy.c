/*
 * The netpolicy model and its rendering, without root: the sidecar and
 * gateway rulesets built from policy facts, the exact nft text they render
 * to (what `sluice netpolicy show` prints and `nft list table` must print
 * back), the element key layout, and the builder's refusals.
 */
#include <sys/types.h>
#include <sys/socket.h>

#include <netinet/in.h>
#include <arpa/inet.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>

#include "netpolicy/netpolicy.h"

#define SL_TEST_NELEM(a) (sizeof(a) / sizeof((a)[0]))

static const char *const resolvers[] = { "198.18.0.53", "2001:2::53" };
static const char *const ifaces[] = { "sbx-*", "veth7" };
static const struct np_upstream upstreams[] = {
	{ "198.18.0.10", 443, 1 },
	{ "model.example", 443, 0 }, /* a name: filled at run time */
	{ "2001:2::10", 8443, 1 },
	{ "198.18.0.10", 443, 1 }, /* a second route, same upstream */
};

static void
sidecar_input(struct np_input *in)
{
	memset(in, 0, sizeof(*in));
	in->ni_mode = NP_MODE_SIDECAR;
	in->ni_table = "sluice";
	in->ni_allow_loopback = 1;
	in->ni_uid = 1000;
	in->ni_resolvers = resolvers;
	in->ni_nresolvers = 2;
	in->ni_log_group = 7;
	in->ni_upstreams = upstreams;
	in->ni_nupstreams = SL_TEST_NELEM(upstreams);
}

static struct sockaddr_storage listeners[3];

static void
gateway_input(struct np_input *in)
{
	struct sockaddr_in *a = (struct sockaddr_in *)&listeners[0];
	struct sockaddr_in *any = (struct sockaddr_in *)&listeners[1];
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&listeners[2];

	memset(listeners, 0, sizeof(listeners));
	a->sin_family = AF_INET;
	a->sin_port = htons(3128);
	inet_pton(AF_INET, "198.18.1.1", &a->sin_addr);
	any->sin_family = AF_INET;
	any->sin_port = htons(8080);
	a6->sin6_family = AF_INET6;
	a6->sin6_port = htons(3128);
	inet_pton(AF_INET6, "2001:2:0:1::1", &a6->sin6_addr);

	memset(in, 0, sizeof(*in));
	in->ni_mode = NP_MODE_GATEWAY;
	in->ni_table = "gw";
	in->ni_log_group = 9;
	in->ni_ifaces = ifaces;
	in->ni_nifaces = 2;
	in->ni_listeners = listeners;
	in->ni_nlisteners = 3;
}

static const char sidecar_text[] =
    "table inet sluice {\n"
    "\tset upstream4 {\n"
    "\t\ttype ipv4_addr . inet_service\n"
    "\t\tflags timeout\n"
    "\t\telements = { 198.18.0.10 . 443 }\n"
    "\t}\n"
    "\n"
    "\tset upstream6 {\n"
    "\t\ttype ipv6_addr . inet_service\n"
    "\t\tflags timeout\n"
    "\t\telements = { 2001:2::10 . 8443 }\n"
    "\t}\n"
    "\n"
    "\tchain output {\n"
    "\t\ttype filter hook output priority filter; policy drop;\n"
    "\t\tmeta skuid != 1000 ip saddr 127.0.0.0/8 ip saddr != 127.0.0.1 "
    "jump spoofed\n"
    "\t\tmeta skuid != 1000 ip saddr 198.18.0.53 jump spoofed\n"
    "\t\tmeta skuid != 1000 ip6 saddr 2001:2::53 jump spoofed\n"
    "\t\toif \"lo\" accept\n"
    "\t\tmeta skuid 1000 ct state established accept\n"
    "\t\tmeta l4proto tcp ct mark 0x736c7563 ct state established "
    "accept\n"
    "\t\tmeta skuid 1000 ip daddr . tcp dport @upstream4 "
    "ct mark set 0x736c7563 accept\n"
    "\t\tmeta skuid 1000 ip6 daddr . tcp dport @upstream6 "
    "ct mark set 0x736c7563 accept\n"
    "\t\tmeta skuid 1000 ip daddr 198.18.0.53 udp dport 53 accept\n"
    "\t\tmeta skuid 1000 ip daddr 198.18.0.53 tcp dport 53 "
    "ct mark set 0x736c7563 accept\n"
    "\t\tmeta skuid 1000 ip6 daddr 2001:2::53 udp dport 53 accept\n"
    "\t\tmeta skuid 1000 ip6 daddr 2001:2::53 tcp dport 53 "
    "ct mark set 0x736c7563 accept\n"
    "\t\ticmpv6 type nd-neighbor-solicit ip6 hoplimit 255 accept\n"
    "\t\ticmpv6 type nd-neighbor-advert ip6 hoplimit 255 accept\n"
    "\t\ticmpv6 type mld2-listener-report ip6 hoplimit 1 counter packets 0 "
    "bytes 0 drop\n"
    "\t\ticmpv6 type mld-listener-report ip6 hoplimit 1 counter packets 0 "
    "bytes 0 drop\n"
    "\t\ticmpv6 type nd-router-solicit ip6 hoplimit 255 counter packets 0 "
    "bytes 0 drop\n"
    "\t\tlimit rate 10/second log group 7\n"
    "\t\tcounter packets 0 bytes 0 drop\n"
    "\t}\n"
    "\n"
    "\tchain spoofed {\n"
    "\t\tlimit rate 10/second log group 7\n"
    "\t\tcounter packets 0 bytes 0 drop\n"
    "\t}\n"
    "}\n";

static const char gateway_text[] =
    "table inet gw {\n"
    "\tchain input {\n"
    "\t\ttype filter hook input priority filter; policy accept;\n"
    "\t\tiifname \"sbx-*\" jump sandbox_in\n"
    "\t\tiifname \"veth7\" jump sandbox_in\n"
    "\t}\n"
    "\n"
    "\tchain forward {\n"
    "\t\ttype filter hook forward priority filter; policy accept;\n"
    "\t\tiifname \"sbx-*\" jump sandbox_drop\n"
    "\t\tiifname \"veth7\" jump sandbox_drop\n"
    "\t}\n"
    "\n"
    "\tchain sandbox_in {\n"
    "\t\tfib saddr . iif oif missing jump sandbox_drop\n"
    "\t\tct state established,related ct original ip daddr 198.18.1.1 "
    "accept\n"
    "\t\tct state established,related ct direction original "
    "meta nfproto ipv4 accept\n"
    "\t\tct state established,related ct original ip6 daddr "
    "2001:2:0:1::1 accept\n"
    "\t\tip daddr 198.18.1.1 tcp dport 3128 accept\n"
    "\t\tmeta nfproto ipv4 tcp dport 8080 accept\n"
    "\t\tip6 daddr 2001:2:0:1::1 tcp dport 3128 accept\n"
    "\t\ticmpv6 type nd-neighbor-solicit ip6 hoplimit 255 accept\n"
    "\t\ticmpv6 type nd-neighbor-advert ip6 hoplimit 255 accept\n"
    "\t\ticmpv6 type mld2-listener-report ip6 hoplimit 1 counter packets 0 "
    "bytes 0 drop\n"
    "\t\ticmpv6 type mld-listener-report ip6 hoplimit 1 counter packets 0 "
    "bytes 0 drop\n"
    "\t\ticmpv6 type nd-router-solicit ip6 hoplimit 255 counter packets 0 "
    "bytes 0 drop\n"
    "\t\tjump sandbox_drop\n"
    "\t}\n"
    "\n"
    "\tchain sandbox_drop {\n"
    "\t\tlimit rate 10/second log group 9\n"
    "\t\tcounter packets 0 bytes 0 drop\n"
    "\t}\n"
    "}\n";

static void
test_sidecar_model(void **state)
{
	struct np_ruleset *rs;
	struct np_chain *out;
	struct np_set *s4, *s6;
	struct np_input in;
	char why[256];
	uint16_t port;

	(void)state;
	sidecar_input(&in);
	rs = np_ruleset_build(&in, why, sizeof(why));
	assert_non_null(rs);
	assert_string_equal(rs->rs_table, "sluice");
	assert_int_equal(rs->rs_family, NFPROTO_INET);
	assert_int_equal(rs->rs_nchains, 2);
	out = np_ruleset_chain(rs, "output");
	assert_non_null(out);
	assert_true(out->ch_base);
	assert_int_equal(out->ch_hook, NF_INET_LOCAL_OUT);
	assert_int_equal(out->ch_policy, NF_DROP);
	assert_int_equal(out->ch_prio, 0);
	assert_string_equal(out->ch_type, "filter");
	/*
	 * 3 anti-spoofing (loopback, 2 resolvers), lo, established by uid,
	 * established by mark, 2 upstream sets, 2 resolvers x 2, 2 ND, 3
	 * quiet drops of the kernel's own MLD/RS, log, drop; the spoofed
	 * chain's log and drop.
	 */
	assert_int_equal(out->ch_nrules, 19);
	assert_int_equal(np_ruleset_nrules(rs), 21);

	s4 = np_ruleset_set(rs, NP_SET_UPSTREAM4);
	s6 = np_ruleset_set(rs, NP_SET_UPSTREAM6);
	assert_non_null(s4);
	assert_non_null(s6);
	assert_int_equal(s4->se_flags, NFT_SET_TIMEOUT);
	assert_int_equal(s4->se_keylen, 8);
	assert_int_equal(s6->se_keylen, 20);
	/* ipv4_addr (7) . inet_service (13), 6 bits per part, as nft packs */
	assert_int_equal(s4->se_keytype, (7 << 6) | 13);
	assert_int_equal(s6->se_keytype, (8 << 6) | 13);
	/* Literal upstreams only, once each, static (no timeout). */
	assert_int_equal(s4->se_nelems, 1);
	assert_int_equal(s6->se_nelems, 1);
	assert_int_equal(s4->se_elems[0].el_timeout_ms, 0);
	assert_memory_equal(s4->se_elems[0].el_key, "\xc6\x12\x00\x0a", 4);
	memcpy(&port, s4->se_elems[0].el_key + 4, 2);
	assert_int_equal(ntohs(port), 443);
	memcpy(&port, s6->se_elems[0].el_key + 16, 2);
	assert_int_equal(ntohs(port), 8443);

	/* The last rule is the counted drop, whatever the chain policy. */
	assert_int_equal(out->ch_rules[18].ru_exprs[0].ex_type, NP_E_COUNTER);
	assert_int_equal(out->ch_rules[18].ru_exprs[1].ex_type, NP_E_VERDICT);
	assert_int_equal(out->ch_rules[18].ru_exprs[1].ex_verdict, NF_DROP);
	assert_true(np_rule_is_drop(&out->ch_rules[18]));
	assert_false(np_rule_is_drop(&out->ch_rules[17]));
	/* The quiet ICMPv6 drops are not the catch-all drop. */
	assert_false(np_rule_is_drop(&out->ch_rules[14]));
	assert_false(np_rule_is_drop(&out->ch_rules[16]));
	np_ruleset_free(rs);
}

static void
test_sidecar_text(void **state)
{
	struct np_ruleset *rs;
	struct np_input in;
	char why[256], *text;

	(void)state;
	sidecar_input(&in);
	rs = np_ruleset_build(&in, why, sizeof(why));
	assert_non_null(rs);
	text = np_ruleset_text(rs);
	assert_non_null(text);
	assert_string_equal(text, sidecar_text);
	free(text);
	np_ruleset_free(rs);
}

/*
 * A transparent listener: the nat chain that redirects the intercepted
 * ports (one inet rule per port for both families, "meta nfproto" first
 * for one), and the filter rules that let the redirected packets through;
 * none of it without a listener. The model diffs equal to itself.
 */
static void
test_sidecar_redirect(void **state)
{
	static const uint16_t ports[] = { 443, 80 };
	struct np_ruleset *rs, *rs2;
	const struct np_chain *ch;
	struct np_input in;
	char why[256], *text;

	(void)state;
	sidecar_input(&in);
	rs = np_ruleset_build(&in, why, sizeof(why));
	assert_non_null(rs);
	text = np_ruleset_text(rs);
	assert_null(strstr(text, "redirect"));
	assert_null(strstr(text, "type nat"));
	free(text);
	np_ruleset_free(rs);

	in.ni_redirect_ports = ports;
	in.ni_nredirect_ports = 2;
	in.ni_redirect_to = 15001;
	in.ni_redirect_v4 = in.ni_redirect_v6 = 1;
	rs = np_ruleset_build(&in, why, sizeof(why));
	assert_non_null(rs);
	ch = np_ruleset_chain(rs, NP_CHAIN_REDIRECT);
	assert_non_null(ch);
	assert_int_equal(ch->ch_prio, -100);
	assert_int_equal(ch->ch_nrules, 2);
	text = np_ruleset_text(rs);
	assert_non_null(strstr(text,
	    "\tchain transparent {\n"
	    "\t\ttype nat hook output priority -100; policy accept;\n"
	    "\t\toif != \"lo\" meta skuid != 1000 tcp dport 443 redirect to "
	    ":15001\n"
	    "\t\toif != \"lo\" meta skuid != 1000 tcp dport 80 redirect to "
	    ":15001\n"
	    "\t}\n"));
	assert_non_null(
	    strstr(text, "\t\tip daddr 127.0.0.1 tcp dport 15001 accept\n"));
	assert_non_null(
	    strstr(text, "\t\tip6 daddr ::1 tcp dport 15001 accept\n"));
	rs2 = np_ruleset_build(&in, why, sizeof(why));
	assert_int_equal(np_ruleset_diff(rs, rs2, NULL, NULL), 0);
	/* A different port is a difference verify reports. */
	rs2->rs_chains[rs2->rs_nchains - 1]
	    .ch_rules[0]
	    .ru_exprs[8]
	    .ex_data[1]++;
	assert_true(np_ruleset_diff(rs, rs2, NULL, NULL) > 0);
	np_ruleset_free(rs2);
	free(text);
	np_ruleset_free(rs);

	/* IPv4 only. */
	in.ni_redirect_v6 = 0;
	rs = np_ruleset_build(&in, why, sizeof(why));
	assert_non_null(rs);
	text = np_ruleset_text(rs);
	assert_non_null(strstr(text,
	    "\t\tmeta nfproto ipv4 oif != \"lo\" meta skuid != 1000 tcp "
	    "dport 443 redirect to :15001\n"));
	assert_null(strstr(text, "ip6 daddr ::1 tcp dport 15001"));
	free(text);
	np_ruleset_free(rs);
}

static void
test_sidecar_no_loopback(void **state)
{
	struct np_ruleset *rs;
	struct np_input in;
	char why[256], *text;

	(void)state;
	sidecar_input(&in);
	in.ni_allow_loopback = 0;
	in.ni_nresolvers = 0;
	rs = np_ruleset_build(&in, why, sizeof(why));
	assert_non_null(rs);
	text = np_ruleset_text(rs);
	assert_non_null(text);
	assert_null(strstr(text, "oif \"lo\""));
	assert_null(strstr(text, "dport 53"));
	/* The loopback anti-spoofing rule stays: it does not need "lo". */
	assert_non_null(strstr(text, "ip saddr 127.0.0.0/8"));
	assert_int_equal(np_ruleset_nrules(rs), 14);
	free(text);
	np_ruleset_free(rs);
}

static void
test_gateway_model_and_text(void **state)
{
	struct np_ruleset *rs;
	struct np_chain *ch;
	struct np_input in;
	char why[256], *text;

	(void)state;
	gateway_input(&in);
	rs = np_ruleset_build(&in, why, sizeof(why));
	assert_non_null(rs);
	assert_int_equal(rs->rs_nsets, 0);
	assert_int_equal(rs->rs_nchains, 4);
	ch = np_ruleset_chain(rs, "input");
	assert_non_null(ch);
	assert_int_equal(ch->ch_hook, NF_INET_LOCAL_IN);
	/* Other interfaces' traffic is left alone. */
	assert_int_equal(ch->ch_policy, NF_ACCEPT);
	ch = np_ruleset_chain(rs, "forward");
	assert_non_null(ch);
	assert_int_equal(ch->ch_hook, NF_INET_FORWARD);
	assert_int_equal(ch->ch_policy, NF_ACCEPT);
	ch = np_ruleset_chain(rs, "sandbox_in");
	assert_non_null(ch);
	assert_false(ch->ch_base);
	/* A "prefix*" pattern compares the prefix only, without the NUL. */
	ch = np_ruleset_chain(rs, "input");
	assert_int_equal(ch->ch_rules[0].ru_exprs[1].ex_len, 4);
	assert_memory_equal(ch->ch_rules[0].ru_exprs[1].ex_data, "sbx-", 4);
	assert_int_equal(ch->ch_rules[1].ru_exprs[1].ex_len, 16);

	text = np_ruleset_text(rs);
	assert_non_null(text);
	assert_string_equal(text, gateway_text);
	free(text);
	np_ruleset_free(rs);
}

static size_t
count_of(const char *text, const char *needle)
{
	size_t n = 0;

	while ((text = strstr(text, needle)) != NULL) {
		n++;
		text += strlen(needle);
	}
	return n;
}

/*
 * A listener address given twice gets one conntrack rule; an address and
 * port given twice, one listener rule; the same address on another port
 * a listener rule of its own.
 */
static void
test_gateway_duplicate_listeners(void **state)
{
	struct sockaddr_storage ls[5];
	struct sockaddr_in *again, *other;
	struct np_ruleset *rs;
	struct np_input in;
	char why[256], *text;

	(void)state;
	gateway_input(&in);
	memcpy(ls, listeners, sizeof(listeners));
	ls[3] = ls[0];
	ls[4] = ls[0];
	again = (struct sockaddr_in *)&ls[3];
	other = (struct sockaddr_in *)&ls[4];
	assert_int_equal(ntohs(again->sin_port), 3128);
	other->sin_port = htons(9090);
	in.ni_listeners = ls;
	in.ni_nlisteners = 5;
	rs = np_ruleset_build(&in, why, sizeof(why));
	assert_non_null(rs);
	text = np_ruleset_text(rs);
	assert_non_null(text);
	assert_int_equal(count_of(text, "ct original ip daddr 198.18.1.1 "), 1);
	assert_int_equal(count_of(text,
			     "ip daddr 198.18.1.1 tcp dport 3128 accept"),
	    1);
	assert_int_equal(count_of(text,
			     "ip daddr 198.18.1.1 tcp dport 9090 accept"),
	    1);
	assert_int_equal(count_of(text, " tcp dport "), 4);
	assert_int_equal(count_of(text, "ct state established,related ct "), 3);
	free(text);
	np_ruleset_free(rs);
}

static void
test_refusals(void **state)
{
	static const char *const bad_res[] = { "198.18.0.53", "dns.example" };
	static const char *const bad_if[] = { "*" };
	static const char *const long_if[] = { "abcdefghijklmnopq" };
	static const struct np_upstream bad_up[] = { { "198.18.0.x", 443, 1 } };
	struct np_input in;
	char why[256];

	(void)state;
	sidecar_input(&in);
	in.ni_uid = 0;
	assert_null(np_ruleset_build(&in, why, sizeof(why)));
	assert_non_null(strstr(why, "user"));

	sidecar_input(&in);
	in.ni_resolvers = bad_res;
	assert_null(np_ruleset_build(&in, why, sizeof(why)));
	assert_string_equal(why, "netpolicy.resolvers[1]: not an IP address");

	sidecar_input(&in);
	in.ni_upstreams = bad_up;
	in.ni_nupstreams = 1;
	assert_null(np_ruleset_build(&in, why, sizeof(why)));
	assert_non_null(strstr(why, "routes[0].upstream.url"));

	sidecar_input(&in);
	in.ni_table = "";
	assert_null(np_ruleset_build(&in, why, sizeof(why)));
	assert_non_null(strstr(why, "netpolicy.table"));

	gateway_input(&in);
	in.ni_nifaces = 0;
	assert_null(np_ruleset_build(&in, why, sizeof(why)));
	assert_non_null(strstr(why, "sandbox_interfaces"));

	gateway_input(&in);
	in.ni_ifaces = bad_if;
	in.ni_nifaces = 1;
	assert_null(np_ruleset_build(&in, why, sizeof(why)));
	assert_non_null(strstr(why, "sandbox_interfaces[0]"));

	gateway_input(&in);
	in.ni_ifaces = long_if;
	in.ni_nifaces = 1;
	assert_null(np_ruleset_build(&in, why, sizeof(why)));

	memset(&in, 0, sizeof(in));
	in.ni_table = "t";
	assert_null(np_ruleset_build(&in, why, sizeof(why)));
	assert_non_null(strstr(why, "netpolicy.mode"));
}

static void
test_elem_addr_port(void **state)
{
	struct sockaddr_in6 sin6;
	struct sockaddr_in sin;
	struct sockaddr_un_like {
		sa_family_t fam;
		char path[20];
	} other;
	struct np_elem e;

	(void)state;
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	inet_pton(AF_INET, "198.18.0.7", &sin.sin_addr);
	assert_int_equal(np_elem_addr_port(&e, (struct sockaddr *)&sin, 8443,
			     30),
	    0);
	assert_int_equal(e.el_keylen, 8);
	assert_memory_equal(e.el_key, "\xc6\x12\x00\x07\x20\xfb\x00\x00", 8);
	assert_int_equal(e.el_timeout_ms, 30000);

	memset(&sin6, 0, sizeof(sin6));
	sin6.sin6_family = AF_INET6;
	inet_pton(AF_INET6, "2001:2::1", &sin6.sin6_addr);
	assert_int_equal(np_elem_addr_port(&e, (struct sockaddr *)&sin6, 443,
			     0),
	    0);
	assert_int_equal(e.el_keylen, 20);
	assert_memory_equal(e.el_key + 16, "\x01\xbb\x00\x00", 4);
	assert_int_equal(e.el_timeout_ms, 0);

	memset(&other, 0, sizeof(other));
	other.fam = AF_UNIX;
	assert_int_equal(np_elem_addr_port(&e, (struct sockaddr *)&other, 1, 0),
	    -1);
}

/* Build a rule by hand the way nft compiles "tcp dport 22 accept". */
static void
hand_rule(struct np_rule *ru)
{
	struct np_expr *e = ru->ru_exprs;
	uint16_t port = htons(22);

	memset(ru, 0, sizeof(*ru));
	e[0].ex_type = NP_E_META;
	e[0].ex_key = NFT_META_L4PROTO;
	e[0].ex_dreg = NFT_REG_1;
	e[1].ex_type = NP_E_CMP;
	e[1].ex_sreg = NFT_REG_1;
	e[1].ex_op = NFT_CMP_EQ;
	e[1].ex_len = 1;
	e[1].ex_data[0] = IPPROTO_TCP;
	e[2].ex_type = NP_E_PAYLOAD;
	e[2].ex_dreg = NFT_REG_1;
	e[2].ex_base = NFT_PAYLOAD_TRANSPORT_HEADER;
	e[2].ex_offset = 2;
	e[2].ex_len = 2;
	e[3].ex_type = NP_E_CMP;
	e[3].ex_sreg = NFT_REG_1;
	e[3].ex_op = NFT_CMP_NEQ;
	e[3].ex_len = 2;
	memcpy(e[3].ex_data, &port, 2);
	e[4].ex_type = NP_E_VERDICT;
	e[4].ex_verdict = NF_ACCEPT;
	ru->ru_nexprs = 5;
}

static void
test_rule_text(void **state)
{
	struct np_rule ru;
	char buf[256];

	(void)state;
	hand_rule(&ru);
	np_rule_text(&ru, buf, sizeof(buf));
	assert_string_equal(buf, "tcp dport != 22 accept");

	/* A lone l4proto match is not a dependency: nft prints it. */
	ru.ru_exprs[2] = ru.ru_exprs[4];
	ru.ru_nexprs = 3;
	np_rule_text(&ru, buf, sizeof(buf));
	assert_string_equal(buf, "meta l4proto tcp accept");

	/* Something the renderer does not know: shown raw, never guessed. */
	hand_rule(&ru);
	ru.ru_exprs[4].ex_type = NP_E_OTHER;
	snprintf(ru.ru_exprs[4].ex_name, sizeof(ru.ru_exprs[4].ex_name),
	    "queue");
	np_rule_text(&ru, buf, sizeof(buf));
	assert_non_null(strstr(buf, "[ meta load"));
	assert_non_null(strstr(buf, "[ queue ]"));

	/* A transport match without a protocol context is not guessed. */
	hand_rule(&ru);
	memmove(&ru.ru_exprs[0], &ru.ru_exprs[2], 3 * sizeof(ru.ru_exprs[0]));
	ru.ru_nexprs = 3;
	np_rule_text(&ru, buf, sizeof(buf));
	assert_non_null(strstr(buf, "[ payload load 2b"));

	/* Truncation keeps a terminated string. */
	hand_rule(&ru);
	assert_int_equal(np_rule_text(&ru, buf, 5), 4);
	assert_string_equal(buf, "tcp ");
}

static void
test_sidecar_loopback_resolvers(void **state)
{
	static const char *const lo_res[] = { "127.0.0.11", "127.0.0.1", "::1",
		"2001:2::53" };
	struct np_ruleset *rs;
	struct np_input in;
	char why[256], *text;

	(void)state;
	sidecar_input(&in);
	in.ni_resolvers = lo_res;
	in.ni_nresolvers = SL_TEST_NELEM(lo_res);
	rs = np_ruleset_build(&in, why, sizeof(why));
	assert_non_null(rs);
	text = np_ruleset_text(rs);
	assert_non_null(text);
	/*
	 * 127.0.0.11 (a resolver of its own uid, as Docker's) may answer
	 * from port 53 over lo, ahead of the loopback rule that drops every
	 * other source in 127.0.0.0/8 but 127.0.0.1; 127.0.0.1 and ::1 are
	 * every local client's sources and cannot be reserved.
	 */
	assert_non_null(strstr(text,
	    "\t\toif \"lo\" ip saddr 127.0.0.11 udp sport 53 accept\n"
	    "\t\toif \"lo\" ip saddr 127.0.0.11 tcp sport 53 accept\n"
	    "\t\tmeta skuid != 1000 ip saddr 127.0.0.0/8 "
	    "ip saddr != 127.0.0.1 jump spoofed\n"));
	assert_null(strstr(text, "skuid != 1000 ip saddr 127.0.0.11"));
	assert_null(strstr(text, "saddr 127.0.0.1 "));
	assert_null(strstr(text, "saddr ::1"));
	assert_non_null(strstr(text,
	    "\t\tmeta skuid != 1000 ip6 saddr 2001:2::53 jump spoofed\n"
	    "\t\toif \"lo\" accept\n"));
	/* They are still resolvers sluice may query. */
	assert_non_null(strstr(text, "ip daddr 127.0.0.11 udp dport 53"));
	assert_non_null(strstr(text, "ip6 daddr ::1 tcp dport 53 ct mark set"));
	free(text);
	np_ruleset_free(rs);
}

/* The daemon's warning and the rules agree on what a loopback resolver is. */
static void
test_ip_is_loopback(void **state)
{
	(void)state;
	assert_true(np_ip_is_loopback("127.0.0.11"));
	assert_true(np_ip_is_loopback("127.0.0.1"));
	assert_true(np_ip_is_loopback("::1"));
	assert_true(np_ip_is_loopback("0:0:0:0:0:0:0:1"));
	assert_false(np_ip_is_loopback("198.18.0.53"));
	assert_false(np_ip_is_loopback("::2"));
	assert_false(np_ip_is_loopback("::ffff:127.0.0.1"));
	assert_false(np_ip_is_loopback("127.example"));
}

static void
test_drop_counters(void **state)
{
	struct np_ruleset *rs;
	struct np_input in;
	uint64_t packets, bytes;
	char why[256];
	size_t i, j;

	(void)state;
	sidecar_input(&in);
	rs = np_ruleset_build(&in, why, sizeof(why));
	assert_non_null(rs);
	/* As np_dump fills them: every counter of the table has a value. */
	for (i = 0; i < rs->rs_nchains; i++)
		for (j = 0; j < rs->rs_chains[i].ch_nrules; j++) {
			struct np_expr *e =
			    rs->rs_chains[i].ch_rules[j].ru_exprs;

			if (e[0].ex_type == NP_E_COUNTER) {
				e[0].ex_packets = 3 + i;
				e[0].ex_bytes = 300 + i;
			}
		}
	np_ruleset_drop_counters(rs, &packets, &bytes);
	/* output's drop (3, 300) and spoofed's drop (4, 301). */
	assert_int_equal(packets, 7);
	assert_int_equal(bytes, 601);
	np_ruleset_free(rs);
}

/* The shapes the renderer knows only in the form sluice builds them. */
static void
test_rule_text_ct_fib(void **state)
{
	struct np_ruleset *rs;
	struct np_input in;
	struct np_rule ru;
	struct np_chain *ch;
	char why[256], buf[1024];

	(void)state;
	sidecar_input(&in);
	rs = np_ruleset_build(&in, why, sizeof(why));
	assert_non_null(rs);
	ch = np_ruleset_chain(rs, "output");
	/* "... ct mark set 0x736c7563 accept": a ct set with a direction is
	 * not "ct mark set". */
	ru = ch->ch_rules[6];
	np_rule_text(&ru, buf, sizeof(buf));
	assert_non_null(strstr(buf, "ct mark set 0x736c7563 accept"));
	assert_int_equal(ru.ru_exprs[ru.ru_nexprs - 2].ex_type, NP_E_CT);
	ru.ru_exprs[ru.ru_nexprs - 2].ex_ctdir = 1;
	np_rule_text(&ru, buf, sizeof(buf));
	assert_non_null(strstr(buf, "[ ct set 3 with reg 1 dir 0 ]"));
	np_ruleset_free(rs);

	gateway_input(&in);
	rs = np_ruleset_build(&in, why, sizeof(why));
	assert_non_null(rs);
	ch = np_ruleset_chain(rs, "sandbox_in");
	ru = ch->ch_rules[0];
	np_rule_text(&ru, buf, sizeof(buf));
	assert_string_equal(buf,
	    "fib saddr . iif oif missing jump sandbox_drop");
	/* A loose check (no iif) is a different rule: shown raw. */
	ru.ru_exprs[0].ex_flags &= ~(uint32_t)NFTA_FIB_F_IIF;
	np_rule_text(&ru, buf, sizeof(buf));
	assert_non_null(strstr(buf, "[ fib flags 0x21 result 1"));
	/* ct original ip daddr needs its direction. */
	ru = ch->ch_rules[1];
	ru.ru_exprs[3].ex_ctdir = 0;
	np_rule_text(&ru, buf, sizeof(buf));
	assert_non_null(strstr(buf, "[ ct load"));
	np_ruleset_free(rs);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sidecar_model),
		cmocka_unit_test(test_sidecar_text),
		cmocka_unit_test(test_sidecar_redirect),
		cmocka_unit_test(test_sidecar_no_loopback),
		cmocka_unit_test(test_gateway_model_and_text),
		cmocka_unit_test(test_gateway_duplicate_listeners),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_elem_addr_port),
		cmocka_unit_test(test_rule_text),
		cmocka_unit_test(test_sidecar_loopback_resolvers),
		cmocka_unit_test(test_ip_is_loopback),
		cmocka_unit_test(test_drop_counters),
		cmocka_unit_test(test_rule_text_ct_fib),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
