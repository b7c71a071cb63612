/*
 * The comparison behind `sluice netpolicy verify`, without root: two
 * builds of the same policy are equal; each kind of drift the kernel's
 * table can have (a rule added by hand, a rule gone, a changed chain
 * policy, a missing set or chain, a stray static element, a dormant
 * table) is reported once, naming what differs; what changes on its own
 * (counter values, handles, DNS-derived elements with a timeout) is not.
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

static const char *const resolvers[] = { "198.18.0.53" };
static const struct np_upstream upstreams[] = {
	{ "198.18.0.10", 443, 1 },
	{ "model.example", 443, 0 },
};

struct lines {
	char l[16][512];
	size_t n;
};

static void
collect(void *arg, const char *line)
{
	struct lines *ls = arg;

	if (ls->n < 16)
		snprintf(ls->l[ls->n], sizeof(ls->l[0]), "%s", line);
	ls->n++;
}

static struct np_ruleset *
build(void)
{
	struct np_input in;
	char why[256];

	memset(&in, 0, sizeof(in));
	in.ni_mode = NP_MODE_SIDECAR;
	in.ni_table = "sluice";
	in.ni_allow_loopback = 1;
	in.ni_uid = 1000;
	in.ni_resolvers = resolvers;
	in.ni_nresolvers = 1;
	in.ni_log_group = 7;
	in.ni_upstreams = upstreams;
	in.ni_nupstreams = 2;
	return np_ruleset_build(&in, why, sizeof(why));
}

static size_t
diff(const struct np_ruleset *want, const struct np_ruleset *have,
    struct lines *ls)
{
	memset(ls, 0, sizeof(*ls));
	return np_ruleset_diff(want, have, collect, ls);
}

static void
test_equal(void **state)
{
	struct np_ruleset *a = build(), *b = build();
	struct lines ls;

	(void)state;
	assert_non_null(a);
	assert_non_null(b);
	assert_int_equal(diff(a, b, &ls), 0);
	assert_int_equal(ls.n, 0);
	np_ruleset_free(a);
	np_ruleset_free(b);
}

static void
test_ignored(void **state)
{
	struct np_ruleset *want = build(), *have = build();
	struct np_chain *ch;
	struct np_elem dyn;
	struct sockaddr_in sin;
	struct lines ls;
	size_t i;

	(void)state;
	ch = np_ruleset_chain(have, "output");
	/* Counters move and handles are the kernel's. */
	for (i = 0; i < ch->ch_nrules; i++) {
		ch->ch_rules[i].ru_handle = 100 + i;
		if (ch->ch_rules[i].ru_exprs[0].ex_type == NP_E_COUNTER) {
			ch->ch_rules[i].ru_exprs[0].ex_packets = 12;
			ch->ch_rules[i].ru_exprs[0].ex_bytes = 720;
		}
	}
	/* An element sluice added from DNS carries a timeout. */
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	inet_pton(AF_INET, "198.18.0.99", &sin.sin_addr);
	assert_int_equal(np_elem_addr_port(&dyn, (struct sockaddr *)&sin, 443,
			     120),
	    0);
	assert_int_equal(np_set_add_elem(np_ruleset_set(have, NP_SET_UPSTREAM4),
			     &dyn),
	    0);
	assert_int_equal(diff(want, have, &ls), 0);
	np_ruleset_free(want);
	np_ruleset_free(have);
}

/* "tcp dport 22 accept", as nft compiles it. */
static void
ssh_rule(struct np_rule *ru)
{
	struct np_expr *e = ru->ru_exprs;
	uint16_t port = htons(22);

	memset(ru, 0, sizeof(*ru));
	e[0].ex_type = NP_E_META;
	e[0].ex_key = NFT_META_L4PROTO;
	e[0].ex_dreg = NFT_REG_1;
	e[1].ex_type = NP_E_CMP;
	e[1].ex_sreg = NFT_REG_1;
	e[1].ex_len = 1;
	e[1].ex_data[0] = IPPROTO_TCP;
	e[2].ex_type = NP_E_PAYLOAD;
	e[2].ex_dreg = NFT_REG_1;
	e[2].ex_base = NFT_PAYLOAD_TRANSPORT_HEADER;
	e[2].ex_offset = 2;
	e[2].ex_len = 2;
	e[3].ex_type = NP_E_CMP;
	e[3].ex_sreg = NFT_REG_1;
	e[3].ex_len = 2;
	memcpy(e[3].ex_data, &port, 2);
	e[4].ex_type = NP_E_VERDICT;
	e[4].ex_verdict = NF_ACCEPT;
	ru->ru_nexprs = 5;
}

static void
test_rule_added(void **state)
{
	struct np_ruleset *want = build(), *have = build();
	struct np_chain *ch;
	struct np_rule extra;
	struct lines ls;

	(void)state;
	ch = np_ruleset_chain(have, "output");
	/* Insert before the final drop, where `nft insert` would put it. */
	ssh_rule(&extra);
	extra.ru_handle = 42;
	assert_non_null(np_chain_add_rule(ch));
	memmove(&ch->ch_rules[3], &ch->ch_rules[2],
	    (ch->ch_nrules - 3) * sizeof(ch->ch_rules[0]));
	ch->ch_rules[2] = extra;
	assert_int_equal(diff(want, have, &ls), 1);
	assert_string_equal(ls.l[0],
	    "chain output: unexpected rule (handle 42): tcp dport 22 accept");
	np_ruleset_free(want);
	np_ruleset_free(have);
}

static void
test_rule_removed_and_changed(void **state)
{
	struct np_ruleset *want = build(), *have = build();
	struct np_chain *ch;
	struct lines ls;

	(void)state;
	ch = np_ruleset_chain(have, "output");
	/* Drop the loopback rule (after the two anti-spoofing rules). */
	memmove(&ch->ch_rules[2], &ch->ch_rules[3],
	    (ch->ch_nrules - 3) * sizeof(ch->ch_rules[0]));
	ch->ch_nrules--;
	assert_int_equal(diff(want, have, &ls), 1);
	assert_string_equal(ls.l[0],
	    "chain output: missing rule: oif \"lo\" accept");
	np_ruleset_free(have);

	/* The log group changed: one rule out, one rule in. */
	have = build();
	ch = np_ruleset_chain(have, "output");
	ch->ch_rules[ch->ch_nrules - 2].ru_exprs[1].ex_group = 8;
	assert_int_equal(diff(want, have, &ls), 2);
	assert_non_null(strstr(ls.l[0], "log group 8"));
	assert_non_null(strstr(ls.l[1], "log group 7"));
	np_ruleset_free(have);

	/* A kernel expression we never emit never equals ours. */
	have = build();
	ch = np_ruleset_chain(have, "output");
	ch->ch_rules[0].ru_exprs[1].ex_unknown_attr = 1;
	assert_int_equal(diff(want, have, &ls), 2);
	np_ruleset_free(have);
	np_ruleset_free(want);
}

static void
test_chain_and_table(void **state)
{
	struct np_ruleset *want = build(), *have = build();
	struct lines ls;

	(void)state;
	np_ruleset_chain(have, "output")->ch_policy = NF_ACCEPT;
	assert_int_equal(diff(want, have, &ls), 1);
	assert_string_equal(ls.l[0], "chain output: policy accept, want drop");

	np_ruleset_chain(have, "output")->ch_policy = NF_DROP;
	np_ruleset_chain(have, "output")->ch_prio = 10;
	have->rs_flags = NFT_TABLE_F_DORMANT;
	assert_int_equal(diff(want, have, &ls), 2);
	assert_non_null(strstr(ls.l[0], "dormant"));
	assert_string_equal(ls.l[1], "chain output: priority 10, want 0");
	np_ruleset_free(have);

	/* A missing chain, and an unexpected one. */
	have = build();
	snprintf(have->rs_chains[0].ch_name, NP_NAME_MAX, "%s", "other");
	assert_int_equal(diff(want, have, &ls), 2);
	assert_string_equal(ls.l[0], "chain output: missing");
	assert_string_equal(ls.l[1], "chain other: unexpected (16 rules)");
	np_ruleset_free(have);

	/* No table at all. */
	have = np_ruleset_new("sluice");
	have->rs_exists = 0;
	assert_int_equal(diff(want, have, &ls), 1);
	assert_string_equal(ls.l[0], "table inet sluice: missing");
	np_ruleset_free(have);
	np_ruleset_free(want);
}

static void
test_sets(void **state)
{
	struct np_ruleset *want = build(), *have = build();
	struct sockaddr_in sin;
	struct np_elem el;
	struct np_set *s4;
	struct lines ls;

	(void)state;
	/* A static element added by hand opens a path: reported. */
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	inet_pton(AF_INET, "198.18.0.66", &sin.sin_addr);
	assert_int_equal(np_elem_addr_port(&el, (struct sockaddr *)&sin, 22, 0),
	    0);
	s4 = np_ruleset_set(have, NP_SET_UPSTREAM4);
	assert_int_equal(np_set_add_elem(s4, &el), 0);
	assert_int_equal(diff(want, have, &ls), 1);
	assert_string_equal(ls.l[0],
	    "set upstream4: unexpected element 198.18.0.66 . 22");

	/* The literal upstream went away. */
	s4->se_nelems = 0;
	assert_int_equal(diff(want, have, &ls), 1);
	assert_string_equal(ls.l[0],
	    "set upstream4: missing element 198.18.0.10 . 443");

	/* Flags changed, and a set is gone. */
	s4->se_nelems = 1;
	s4->se_flags = 0;
	snprintf(have->rs_sets[1].se_name, NP_NAME_MAX, "%s", "spare");
	assert_int_equal(diff(want, have, &ls), 3);
	assert_string_equal(ls.l[0], "set upstream4: flags 0x0, want 0x10");
	assert_string_equal(ls.l[1], "set upstream6: missing");
	assert_string_equal(ls.l[2], "set spare: unexpected");
	np_ruleset_free(want);
	np_ruleset_free(have);
}

static void
test_expr_equal(void **state)
{
	struct np_expr a, b;

	(void)state;
	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	a.ex_type = b.ex_type = NP_E_CMP;
	a.ex_len = b.ex_len = 2;
	a.ex_data[0] = b.ex_data[0] = 1;
	assert_true(np_expr_equal(&a, &b));
	b.ex_op = NFT_CMP_NEQ;
	assert_false(np_expr_equal(&a, &b));
	b.ex_op = NFT_CMP_EQ;
	b.ex_data[1] = 5;
	assert_false(np_expr_equal(&a, &b));
	a.ex_type = b.ex_type = NP_E_OTHER;
	assert_false(np_expr_equal(&a, &b));
	a.ex_type = b.ex_type = NP_E_COUNTER;
	a.ex_packets = 1;
	assert_true(np_expr_equal(&a, &b));

	/* ct: the direction and load/set are part of the expression. */
	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	a.ex_type = b.ex_type = NP_E_CT;
	a.ex_key = b.ex_key = NFT_CT_DST_IP;
	a.ex_dreg = b.ex_dreg = NFT_REG_1;
	a.ex_ctdir = b.ex_ctdir = 1;
	assert_true(np_expr_equal(&a, &b));
	b.ex_ctdir = 2;
	assert_false(np_expr_equal(&a, &b));
	b.ex_ctdir = 1;
	b.ex_sreg = NFT_REG_1;
	assert_false(np_expr_equal(&a, &b));

	/* The mark value an immediate loads, the flags of a fib lookup. */
	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	a.ex_type = b.ex_type = NP_E_IMMEDIATE;
	a.ex_len = b.ex_len = 4;
	a.ex_data[0] = b.ex_data[0] = 0x63;
	assert_true(np_expr_equal(&a, &b));
	b.ex_data[0] = 0x64;
	assert_false(np_expr_equal(&a, &b));
	a.ex_type = b.ex_type = NP_E_FIB;
	a.ex_flags = NFTA_FIB_F_SADDR | NFTA_FIB_F_IIF | NFTA_FIB_F_PRESENT;
	b.ex_flags = NFTA_FIB_F_SADDR | NFTA_FIB_F_PRESENT;
	assert_false(np_expr_equal(&a, &b));
	b.ex_flags = a.ex_flags;
	assert_true(np_expr_equal(&a, &b));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_equal),
		cmocka_unit_test(test_ignored),
		cmocka_unit_test(test_rule_added),
		cmocka_unit_test(test_rule_removed_and_changed),
		cmocka_unit_test(test_chain_and_table),
		cmocka_unit_test(test_sets),
		cmocka_unit_test(test_expr_equal),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
