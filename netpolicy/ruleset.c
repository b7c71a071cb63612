/*
 * The pure ruleset model: the containers (table, chains, sets, rules,
 * elements) and the builder that turns sluice's policy facts into the
 * sidecar or gateway ruleset of DESIGN.md "Kernel rules". No netlink and no
 * I/O here: nl.c sends a model, dump.c reads one back, render.c prints one
 * and diff.c compares two.
 *
 * The builder emits the same expressions, in the same order and with the
 * same implicit dependencies (meta nfproto before a network-header match,
 * meta l4proto before a transport-header match) as nft 1.0 emits for the
 * text render.c prints. That is what makes `nft list table` of the applied
 * table print exactly what `sluice netpolicy show` prints, and makes `nft
 * -f` of that text produce an identical table.
 */
#include <sys/types.h>
#include <sys/socket.h>

#include <netinet/in.h>
#include <arpa/inet.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <linux/netfilter.h>
#include <linux/netfilter/nf_conntrack_common.h>
#include <linux/netfilter/nf_conntrack_tuple_common.h>
#include <linux/netfilter/nf_tables.h>

#include "netpolicy/netpolicy.h"
#include "netpolicy/np_private.h"

/*
 * nft datatype ids (nftables include/datatype.h) and how a concatenation
 * packs them: each part shifts the key type left by 6 bits. The kernel
 * stores the key type opaquely; nft needs it to print the set's "type".
 */
#define NP_TYPE_IPADDR       7
#define NP_TYPE_IP6ADDR      8
#define NP_TYPE_INET_SERVICE 13
#define NP_TYPE_BITS         6

/*
 * Rate limit of the NFLOG copy of dropped packets: the log is for humans
 * and the audit log, the counter still counts every packet. Burst 5 is
 * nft's default, so nft prints the limit without a "burst" clause.
 */
#define NP_LOG_RATE  10
#define NP_LOG_UNIT  1
#define NP_LOG_BURST 5

/* The ICMPv6 types IPv6 needs on-link: address resolution and DAD. */
#define NP_ICMPV6_NS      135
#define NP_ICMPV6_NA      136
#define NP_ICMPV6_MLD_REP 131 /* MLDv1 listener report */
#define NP_ICMPV6_RS      133 /* router solicitation */
#define NP_ICMPV6_MLD2    143 /* MLDv2 listener report */

#define NP_CHAIN_SANDBOX_IN   "sandbox_in"
#define NP_CHAIN_SANDBOX_DROP "sandbox_drop"
#define NP_CHAIN_SPOOFED      "spoofed"

void
np_why(char *why, size_t whylen, const char *fmt, ...)
{
	va_list ap;

	if (why == NULL || whylen == 0)
		return;
	va_start(ap, fmt);
	(void)vsnprintf(why, whylen, fmt, ap); /* truncated reason is fine */
	va_end(ap);
}

static int
np_copy_name(char *dst, const char *src)
{
	size_t len;

	len = strlen(src);
	if (len == 0 || len >= NP_NAME_MAX)
		return -1;
	memcpy(dst, src, len + 1);
	return 0;
}

struct np_ruleset *
np_ruleset_new(const char *table)
{
	struct np_ruleset *rs;

	if ((rs = calloc(1, sizeof(*rs))) == NULL)
		return NULL;
	if (np_copy_name(rs->rs_table, table) == -1) {
		free(rs);
		errno = EINVAL;
		return NULL;
	}
	rs->rs_family = NFPROTO_INET;
	rs->rs_exists = 1;
	return rs;
}

void
np_ruleset_free(struct np_ruleset *rs)
{
	size_t i;

	if (rs == NULL)
		return;
	for (i = 0; i < rs->rs_nsets; i++)
		free(rs->rs_sets[i].se_elems);
	for (i = 0; i < rs->rs_nchains; i++)
		free(rs->rs_chains[i].ch_rules);
	free(rs->rs_sets);
	free(rs->rs_chains);
	free(rs);
}

struct np_chain *
np_ruleset_add_chain(struct np_ruleset *rs, const char *name)
{
	struct np_chain *chains, *ch;

	chains =
	    reallocarray(rs->rs_chains, rs->rs_nchains + 1, sizeof(*chains));
	if (chains == NULL)
		return NULL;
	rs->rs_chains = chains;
	ch = &chains[rs->rs_nchains];
	memset(ch, 0, sizeof(*ch));
	if (np_copy_name(ch->ch_name, name) == -1) {
		errno = EINVAL;
		return NULL;
	}
	rs->rs_nchains++;
	return ch;
}

struct np_set *
np_ruleset_add_set(struct np_ruleset *rs, const char *name)
{
	struct np_set *sets, *set;

	sets = reallocarray(rs->rs_sets, rs->rs_nsets + 1, sizeof(*sets));
	if (sets == NULL)
		return NULL;
	rs->rs_sets = sets;
	set = &sets[rs->rs_nsets];
	memset(set, 0, sizeof(*set));
	if (np_copy_name(set->se_name, name) == -1) {
		errno = EINVAL;
		return NULL;
	}
	rs->rs_nsets++;
	return set;
}

struct np_rule *
np_chain_add_rule(struct np_chain *ch)
{
	struct np_rule *rules;
	size_t cap;

	if (ch->ch_nrules == ch->ch_cap) {
		cap = ch->ch_cap == 0 ? 8 : ch->ch_cap * 2;
		rules = reallocarray(ch->ch_rules, cap, sizeof(*rules));
		if (rules == NULL)
			return NULL;
		ch->ch_rules = rules;
		ch->ch_cap = cap;
	}
	memset(&ch->ch_rules[ch->ch_nrules], 0, sizeof(struct np_rule));
	return &ch->ch_rules[ch->ch_nrules++];
}

int
np_set_add_elem(struct np_set *set, const struct np_elem *e)
{
	struct np_elem *elems;
	size_t cap;

	if (set->se_nelems == set->se_cap) {
		cap = set->se_cap == 0 ? 16 : set->se_cap * 2;
		elems = reallocarray(set->se_elems, cap, sizeof(*elems));
		if (elems == NULL)
			return -1;
		set->se_elems = elems;
		set->se_cap = cap;
	}
	set->se_elems[set->se_nelems++] = *e;
	return 0;
}

struct np_chain *
np_ruleset_chain(const struct np_ruleset *rs, const char *name)
{
	size_t i;

	for (i = 0; i < rs->rs_nchains; i++)
		if (strcmp(rs->rs_chains[i].ch_name, name) == 0)
			return &rs->rs_chains[i];
	return NULL;
}

struct np_set *
np_ruleset_set(const struct np_ruleset *rs, const char *name)
{
	size_t i;

	for (i = 0; i < rs->rs_nsets; i++)
		if (strcmp(rs->rs_sets[i].se_name, name) == 0)
			return &rs->rs_sets[i];
	return NULL;
}

size_t
np_ruleset_nrules(const struct np_ruleset *rs)
{
	size_t i, n = 0;

	for (i = 0; i < rs->rs_nchains; i++)
		n += rs->rs_chains[i].ch_nrules;
	return n;
}

int
np_rule_is_drop(const struct np_rule *ru)
{
	/* Only the catch-all "counter drop": not the quiet ICMPv6 drops. */
	return ru->ru_nexprs == 2 && ru->ru_exprs[0].ex_type == NP_E_COUNTER &&
	    ru->ru_exprs[1].ex_type == NP_E_VERDICT &&
	    ru->ru_exprs[1].ex_verdict == NF_DROP;
}

void
np_ruleset_drop_counters(const struct np_ruleset *rs, uint64_t *packets,
    uint64_t *bytes)
{
	const struct np_rule *ru;
	size_t i, j, k;

	*packets = 0;
	*bytes = 0;
	for (i = 0; i < rs->rs_nchains; i++)
		for (j = 0; j < rs->rs_chains[i].ch_nrules; j++) {
			ru = &rs->rs_chains[i].ch_rules[j];
			if (!np_rule_is_drop(ru))
				continue;
			for (k = 0; k < ru->ru_nexprs; k++)
				if (ru->ru_exprs[k].ex_type == NP_E_COUNTER) {
					*packets += ru->ru_exprs[k].ex_packets;
					*bytes += ru->ru_exprs[k].ex_bytes;
				}
		}
}

int
np_elem_addr_port(struct np_elem *e, const struct sockaddr *sa, uint16_t port,
    uint32_t timeout_s)
{
	const struct sockaddr_in *sin;
	const struct sockaddr_in6 *sin6;
	uint16_t nport = htons(port);
	size_t alen;

	memset(e, 0, sizeof(*e));
	switch (sa->sa_family) {
	case AF_INET:
		sin = (const struct sockaddr_in *)(const void *)sa;
		alen = sizeof(sin->sin_addr);
		memcpy(e->el_key, &sin->sin_addr, alen);
		break;
	case AF_INET6:
		sin6 = (const struct sockaddr_in6 *)(const void *)sa;
		alen = sizeof(sin6->sin6_addr);
		memcpy(e->el_key, &sin6->sin6_addr, alen);
		break;
	default:
		return -1;
	}
	/*
	 * Each part of a concatenation sits in its own 32-bit register
	 * slots, so the 2-byte port is followed by 2 bytes of padding.
	 */
	memcpy(e->el_key + alen, &nport, sizeof(nport));
	e->el_keylen = (uint32_t)alen + 4;
	e->el_timeout_ms = (uint64_t)timeout_s * 1000;
	return 0;
}

/*
 * Rule builder. It remembers which protocol context the rule has already
 * established, and adds nft's implicit dependencies only when a match needs
 * one that is not established yet, exactly as nft's evaluator does.
 */
struct rb {
	struct np_rule *ru;
	int nfproto; /* 0: none established yet */
	int l4proto; /* -1: none established yet */
	int err;
};

static void
rb_init(struct rb *b, struct np_rule *ru)
{
	b->ru = ru;
	b->nfproto = 0;
	b->l4proto = -1;
	b->err = ru == NULL;
}

static struct np_expr *
rb_add(struct rb *b, enum np_expr_type type)
{
	struct np_expr *e;

	if (b->err || b->ru->ru_nexprs == NP_RULE_MAX_EXPR) {
		b->err = 1;
		return NULL;
	}
	e = &b->ru->ru_exprs[b->ru->ru_nexprs++];
	memset(e, 0, sizeof(*e));
	e->ex_type = type;
	return e;
}

static void
rb_cmp(struct rb *b, uint32_t op, const void *data, uint32_t len)
{
	struct np_expr *e;

	if ((e = rb_add(b, NP_E_CMP)) == NULL)
		return;
	e->ex_sreg = NFT_REG_1;
	e->ex_op = op;
	e->ex_len = len;
	memcpy(e->ex_data, data, len);
}

static void
rb_meta_op(struct rb *b, uint32_t key, uint32_t op, const void *data,
    uint32_t len)
{
	struct np_expr *e;

	if ((e = rb_add(b, NP_E_META)) == NULL)
		return;
	e->ex_key = key;
	e->ex_dreg = NFT_REG_1;
	rb_cmp(b, op, data, len);
}

static void
rb_meta_cmp(struct rb *b, uint32_t key, const void *data, uint32_t len)
{
	rb_meta_op(b, key, NFT_CMP_EQ, data, len);
}

static void
rb_nfproto(struct rb *b, int nfproto)
{
	uint8_t v = (uint8_t)nfproto;

	if (b->nfproto == nfproto)
		return;
	rb_meta_cmp(b, NFT_META_NFPROTO, &v, sizeof(v));
	b->nfproto = nfproto;
}

static void
rb_l4proto(struct rb *b, int proto)
{
	uint8_t v = (uint8_t)proto;

	if (b->l4proto == proto)
		return;
	/* icmpv6 only exists in IPv6: nft makes that a dependency too. */
	if (proto == IPPROTO_ICMPV6)
		rb_nfproto(b, NFPROTO_IPV6);
	rb_meta_cmp(b, NFT_META_L4PROTO, &v, sizeof(v));
	b->l4proto = proto;
}

static void
rb_payload(struct rb *b, uint32_t base, uint32_t off, uint32_t len,
    uint32_t dreg)
{
	struct np_expr *e;

	if ((e = rb_add(b, NP_E_PAYLOAD)) == NULL)
		return;
	e->ex_dreg = dreg;
	e->ex_base = base;
	e->ex_offset = off;
	e->ex_len = len;
}

/* ip daddr / ip6 daddr / ip6 hoplimit op data */
static void
rb_net_op(struct rb *b, int nfproto, uint32_t off, uint32_t op,
    const void *data, uint32_t len)
{
	rb_nfproto(b, nfproto);
	rb_payload(b, NFT_PAYLOAD_NETWORK_HEADER, off, len, NFT_REG_1);
	rb_cmp(b, op, data, len);
}

static void
rb_net_cmp(struct rb *b, int nfproto, uint32_t off, const void *data,
    uint32_t len)
{
	rb_net_op(b, nfproto, off, NFT_CMP_EQ, data, len);
}

/* tcp dport / udp dport / icmpv6 type == data */
static void
rb_th_cmp(struct rb *b, int l4proto, uint32_t off, const void *data,
    uint32_t len)
{
	rb_l4proto(b, l4proto);
	rb_payload(b, NFT_PAYLOAD_TRANSPORT_HEADER, off, len, NFT_REG_1);
	rb_cmp(b, NFT_CMP_EQ, data, len);
}

static void
rb_dport(struct rb *b, int l4proto, uint16_t port)
{
	uint16_t nport = htons(port);

	rb_th_cmp(b, l4proto, 2, &nport, sizeof(nport));
}

static void
rb_sport(struct rb *b, int l4proto, uint16_t port)
{
	uint16_t nport = htons(port);

	rb_th_cmp(b, l4proto, 0, &nport, sizeof(nport));
}

/*
 * ip daddr . tcp dport @set (or ip6): each part of the concatenation goes
 * into its own register slots, the 16-byte register when it starts on a
 * 16-byte boundary, a 32-bit register otherwise, as nft allocates them.
 */
static void
rb_daddr_dport_lookup(struct rb *b, int nfproto, const char *set)
{
	uint32_t alen, aoff, reg;
	struct np_expr *e;

	alen = nfproto == NFPROTO_IPV4 ? 4 : 16;
	aoff = nfproto == NFPROTO_IPV4 ? 16 : 24;
	rb_nfproto(b, nfproto);
	rb_l4proto(b, IPPROTO_TCP);
	rb_payload(b, NFT_PAYLOAD_NETWORK_HEADER, aoff, alen, NFT_REG_1);
	reg = alen % 16 == 0 ? NFT_REG_1 + alen / 16 : NFT_REG32_00 + alen / 4;
	rb_payload(b, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2, reg);
	if ((e = rb_add(b, NP_E_LOOKUP)) == NULL)
		return;
	e->ex_sreg = NFT_REG_1;
	snprintf(e->ex_name, sizeof(e->ex_name), "%s", set);
}

static void
rb_skuid(struct rb *b, uid_t uid)
{
	uint32_t v = (uint32_t)uid;

	rb_meta_cmp(b, NFT_META_SKUID, &v, sizeof(v));
}

static void
rb_not_skuid(struct rb *b, uid_t uid)
{
	uint32_t v = (uint32_t)uid;

	rb_meta_op(b, NFT_META_SKUID, NFT_CMP_NEQ, &v, sizeof(v));
}

/* ct [original|reply] KEY == data; dir1 0: no direction, else 1 + dir. */
static void
rb_ct_cmp(struct rb *b, uint32_t key, uint32_t dir1, const void *data,
    uint32_t len)
{
	struct np_expr *e;

	if ((e = rb_add(b, NP_E_CT)) == NULL)
		return;
	e->ex_key = key;
	e->ex_ctdir = dir1;
	e->ex_dreg = NFT_REG_1;
	rb_cmp(b, NFT_CMP_EQ, data, len);
}

/* ct mark set MARK: the value goes through a register, as nft does it. */
static void
rb_ct_mark_set(struct rb *b, uint32_t mark)
{
	struct np_expr *e;

	if ((e = rb_add(b, NP_E_IMMEDIATE)) == NULL)
		return;
	e->ex_dreg = NFT_REG_1;
	e->ex_len = sizeof(mark);
	memcpy(e->ex_data, &mark, sizeof(mark));
	if ((e = rb_add(b, NP_E_CT)) == NULL)
		return;
	e->ex_key = NFT_CT_MARK;
	e->ex_sreg = NFT_REG_1;
}

/*
 * fib saddr . iif oif missing: no route back to the source leaves through
 * the interface the packet came in on (a strict reverse-path check).
 */
static void
rb_fib_rp_missing(struct rb *b)
{
	struct np_expr *e;
	uint32_t zero = 0; /* nft compares the "present" boolean as 32 bits */

	if ((e = rb_add(b, NP_E_FIB)) == NULL)
		return;
	e->ex_flags = NFTA_FIB_F_SADDR | NFTA_FIB_F_IIF | NFTA_FIB_F_PRESENT;
	e->ex_key = NFT_FIB_RESULT_OIF;
	e->ex_dreg = NFT_REG_1;
	rb_cmp(b, NFT_CMP_EQ, &zero, sizeof(zero));
}

/*
 * iifname "pattern": a trailing '*' matches the prefix only (the cmp is
 * as long as the prefix), anything else the whole NUL-padded name.
 */
static int
rb_iifname(struct rb *b, const char *pattern)
{
	uint8_t name[NP_DATA_MAX];
	size_t len;

	len = strlen(pattern);
	memset(name, 0, sizeof(name));
	if (len > 0 && pattern[len - 1] == '*') {
		len--;
		if (len == 0 || len >= sizeof(name))
			return -1;
		memcpy(name, pattern, len);
		rb_meta_cmp(b, NFT_META_IIFNAME, name, (uint32_t)len);
		return 0;
	}
	if (len == 0 || len >= sizeof(name))
		return -1;
	memcpy(name, pattern, len);
	rb_meta_cmp(b, NFT_META_IIFNAME, name, sizeof(name));
	return 0;
}

static void
rb_ct_state(struct rb *b, uint32_t mask)
{
	struct np_expr *e;
	uint32_t zero = 0;

	if ((e = rb_add(b, NP_E_CT)) == NULL)
		return;
	e->ex_key = NFT_CT_STATE;
	e->ex_dreg = NFT_REG_1;
	if ((e = rb_add(b, NP_E_BITWISE)) == NULL)
		return;
	e->ex_sreg = NFT_REG_1;
	e->ex_dreg = NFT_REG_1;
	e->ex_len = sizeof(mask);
	memcpy(e->ex_data, &mask, sizeof(mask));
	rb_cmp(b, NFT_CMP_NEQ, &zero, sizeof(zero));
}

static void
rb_verdict(struct rb *b, int32_t verdict, const char *chain)
{
	struct np_expr *e;

	if ((e = rb_add(b, NP_E_VERDICT)) == NULL)
		return;
	e->ex_verdict = verdict;
	if (chain != NULL)
		snprintf(e->ex_name, sizeof(e->ex_name), "%s", chain);
}

static void
rb_icmpv6_nd(struct rb *b, uint8_t type)
{
	uint8_t hoplimit = 255;

	/*
	 * RFC 4861 §7.1.1/§7.1.2: receivers discard neighbour discovery
	 * messages whose hop limit is not 255, so requiring it costs nothing
	 * and keeps these rules from carrying anything off-link.
	 */
	rb_th_cmp(b, IPPROTO_ICMPV6, 0, &type, sizeof(type));
	rb_net_cmp(b, NFPROTO_IPV6, 7, &hoplimit, sizeof(hoplimit));
	rb_verdict(b, NF_ACCEPT, NULL);
}

/* One rule each for neighbour solicitation and advertisement. 0 or -1. */
static int
np_add_nd_rules(struct np_chain *ch)
{
	static const uint8_t types[] = { NP_ICMPV6_NS, NP_ICMPV6_NA };
	struct rb b;
	size_t i;

	for (i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		rb_init(&b, np_chain_add_rule(ch));
		rb_icmpv6_nd(&b, types[i]);
		if (b.err)
			return -1;
	}
	return 0;
}

/*
 * netpolicy.inbound: the reply direction of TCP connections opened from
 * outside to the pod's port, to the permitted sources. A flow the sandbox
 * opens is in the original direction whatever its ports, so none of it
 * matches: "ct direction reply ip daddr 10.0.0.0/8 tcp sport 8080 accept".
 */
static int
np_add_inbound(struct np_chain *ch, const struct np_input *in)
{
	uint8_t reply = IP_CT_DIR_REPLY;
	struct rb b;
	size_t i;

	for (i = 0; i < in->ni_ninbound; i++) {
		const struct np_inbound *nb = &in->ni_inbound[i];
		int v4 = nb->nb_family == AF_INET;

		rb_init(&b, np_chain_add_rule(ch));
		rb_ct_cmp(&b, NFT_CT_DIRECTION, 0, &reply, sizeof(reply));
		if (nb->nb_prefix > 0)
			rb_net_cmp(&b, v4 ? NFPROTO_IPV4 : NFPROTO_IPV6,
			    v4 ? 16 : 24, nb->nb_addr, nb->nb_prefix / 8);
		else {
			uint8_t nfproto = v4 ? NFPROTO_IPV4 : NFPROTO_IPV6;

			rb_meta_cmp(&b, NFT_META_NFPROTO, &nfproto, 1);
		}
		rb_sport(&b, IPPROTO_TCP, nb->nb_port);
		rb_verdict(&b, NF_ACCEPT, NULL);
		if (b.err)
			return -1;
	}
	return 0;
}

/*
 * What an IPv6 stack sends by itself when an interface comes up: MLD
 * listener reports (hop limit 1) and router solicitations (hop limit 255)
 * to link-local multicast. Dropped by a counted rule of their own, before
 * the logging rule, so that they are not reported as escape attempts
 * (net.drop) on every start; they are still dropped. No process without
 * CAP_NET_RAW can send these (ICMP sockets send echo requests only).
 */
static int
np_add_quiet_drops(struct np_chain *ch)
{
	static const struct {
		uint8_t type, hoplimit;
	} q[] = { { NP_ICMPV6_MLD2, 1 }, { NP_ICMPV6_MLD_REP, 1 },
		{ NP_ICMPV6_RS, 255 } };
	struct rb b;
	size_t i;

	for (i = 0; i < sizeof(q) / sizeof(q[0]); i++) {
		rb_init(&b, np_chain_add_rule(ch));
		rb_th_cmp(&b, IPPROTO_ICMPV6, 0, &q[i].type, 1);
		rb_net_cmp(&b, NFPROTO_IPV6, 7, &q[i].hoplimit, 1);
		rb_add(&b, NP_E_COUNTER);
		rb_verdict(&b, NF_DROP, NULL);
		if (b.err)
			return -1;
	}
	return 0;
}

/*
 * The tail of every default-deny path: a rate-limited NFLOG copy for the
 * drop events, then a counted drop. Two rules, so that a packet over the
 * log rate is still dropped by a rule of ours and not by whatever the
 * chain's policy happens to be (the gateway chains' policy is accept).
 */
static int
np_add_log_drop(struct np_chain *ch, uint16_t group)
{
	struct np_expr *e;
	struct rb b;

	rb_init(&b, np_chain_add_rule(ch));
	if ((e = rb_add(&b, NP_E_LIMIT)) != NULL) {
		e->ex_rate = NP_LOG_RATE;
		e->ex_unit = NP_LOG_UNIT;
		e->ex_burst = NP_LOG_BURST;
		e->ex_ltype = NFT_LIMIT_PKTS;
	}
	if ((e = rb_add(&b, NP_E_LOG)) != NULL)
		e->ex_group = group;
	if (b.err)
		return -1;
	rb_init(&b, np_chain_add_rule(ch));
	rb_add(&b, NP_E_COUNTER);
	rb_verdict(&b, NF_DROP, NULL);
	return b.err ? -1 : 0;
}

static struct np_chain *
np_add_base_chain(struct np_ruleset *rs, const char *name, uint32_t hook,
    uint32_t policy)
{
	struct np_chain *ch;

	if ((ch = np_ruleset_add_chain(rs, name)) == NULL)
		return NULL;
	ch->ch_base = 1;
	ch->ch_hook = hook;
	/*
	 * Priority 0 ("filter"): after the output/prerouting DNAT hooks at
	 * -100, so the rules judge the real destination. Where this chain
	 * sits among other tables' filter chains does not matter: a drop in
	 * any base chain is final, an accept elsewhere cannot undo it.
	 */
	ch->ch_prio = 0;
	ch->ch_policy = policy;
	snprintf(ch->ch_type, sizeof(ch->ch_type), "filter");
	return ch;
}

static int
np_parse_ip(const char *s, struct sockaddr_storage *ss)
{
	struct sockaddr_in *sin = (struct sockaddr_in *)(void *)ss;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)(void *)ss;

	memset(ss, 0, sizeof(*ss));
	if (inet_pton(AF_INET, s, &sin->sin_addr) == 1) {
		sin->sin_family = AF_INET;
		return 0;
	}
	if (inet_pton(AF_INET6, s, &sin6->sin6_addr) == 1) {
		sin6->sin6_family = AF_INET6;
		return 0;
	}
	return -1;
}

static int
np_add_upstream_sets(struct np_ruleset *rs, const struct np_input *in,
    char *why, size_t whylen)
{
	struct np_set *s4, *s6, *set;
	struct sockaddr_storage ss;
	struct np_elem el;
	size_t i, j;
	int dup;

	s4 = np_ruleset_add_set(rs, NP_SET_UPSTREAM4);
	if (s4 == NULL)
		goto nomem;
	s4->se_flags = NFT_SET_TIMEOUT;
	s4->se_keytype = NP_TYPE_IPADDR << NP_TYPE_BITS | NP_TYPE_INET_SERVICE;
	s4->se_keylen = 4 + 4;
	s6 = np_ruleset_add_set(rs, NP_SET_UPSTREAM6);
	if (s6 == NULL)
		goto nomem;
	s6->se_flags = NFT_SET_TIMEOUT;
	s6->se_keytype = NP_TYPE_IP6ADDR << NP_TYPE_BITS | NP_TYPE_INET_SERVICE;
	s6->se_keylen = 16 + 4;
	s4 = &rs->rs_sets[0]; /* the second add may have moved the array */

	for (i = 0; i < in->ni_nupstreams; i++) {
		const struct np_upstream *up = &in->ni_upstreams[i];

		/* Names are filled at run time from sluice's own lookups. */
		if (!up->nu_host_is_ip)
			continue;
		if (up->nu_host == NULL ||
		    np_parse_ip(up->nu_host, &ss) == -1) {
			np_why(why, whylen,
			    "routes[%zu].upstream.url: host is not an IP "
			    "address",
			    i);
			return -1;
		}
		if (up->nu_port == 0) {
			np_why(why, whylen, "routes[%zu].upstream.url: port 0",
			    i);
			return -1;
		}
		if (np_elem_addr_port(&el, (struct sockaddr *)&ss, up->nu_port,
			0) == -1)
			return -1;
		set = ss.ss_family == AF_INET ? s4 : s6;
		/* Two routes may share an upstream: one element. */
		for (dup = 0, j = 0; j < set->se_nelems; j++)
			if (memcmp(set->se_elems[j].el_key, el.el_key,
				sizeof(el.el_key)) == 0)
				dup = 1;
		if (!dup && np_set_add_elem(set, &el) == -1)
			goto nomem;
	}
	return 0;
nomem:
	np_why(why, whylen, "netpolicy: out of memory");
	return -1;
}

/*
 * Does the loopback rule already cover this resolver address (127.0.0.0/8),
 * or is it 127.0.0.1 / ::1, which every local client sends from?
 */
static int
np_is_lo_addr(const struct sockaddr_storage *ss)
{
	const struct sockaddr_in *sin = (const void *)ss;
	const struct sockaddr_in6 *sin6 = (const void *)ss;

	if (ss->ss_family == AF_INET)
		return (ntohl(sin->sin_addr.s_addr) >> 24) == 127;
	return IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr);
}

int
np_ip_is_loopback(const char *ip)
{
	struct sockaddr_storage ss;

	return np_parse_ip(ip, &ss) == 0 && np_is_lo_addr(&ss);
}

/* 127.0.0.1 or ::1: the source every local client uses anyway. */
static int
np_is_lo_default(const struct sockaddr_storage *ss)
{
	const struct sockaddr_in *sin = (const void *)ss;
	const struct sockaddr_in6 *sin6 = (const void *)ss;

	if (ss->ss_family == AF_INET)
		return ntohl(sin->sin_addr.s_addr) == INADDR_LOOPBACK;
	return IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr);
}

/*
 * The anti-spoofing rules, first in the output chain: a packet that a
 * process other than sluice sends with a resolver's address, or a
 * loopback address other than 127.0.0.1, as its source is dropped (and
 * logged). Every uid may bind 127.0.0.0/8 and send from it, and
 * IPV6_FREEBIND lets every uid send from any IPv6 address: without these
 * rules a process in the sandbox could answer sluice's DNS queries. A
 * locally delivered packet passes the output hook before the input hook,
 * with its sender's uid, so this is where it can be told apart. A resolver
 * on 127.0.0.1 or ::1 is left out: every local client uses those sources;
 * its answers come from port 53, which an unprivileged process cannot bind.
 */
static int
np_add_antispoof(struct np_chain *ch, const struct np_input *in,
    const struct sockaddr_storage *res, size_t nres)
{
	const struct sockaddr_in *sin;
	const struct sockaddr_in6 *sin6;
	uint8_t lo_net = 127;
	uint32_t lo_addr = htonl(INADDR_LOOPBACK);
	struct rb b;
	size_t i;

	/*
	 * A resolver on a loopback address (Docker's 127.0.0.11) answers as
	 * a uid of its own: its answers, from port 53 over lo, pass. Sending
	 * from port 53 needs a bind that an unprivileged process cannot make
	 * while ip_unprivileged_port_start is above 53 (sluice check warns
	 * otherwise), and sluice's socket takes nothing else.
	 */
	for (i = 0; i < nres; i++) {
		static const int protos[] = { IPPROTO_UDP, IPPROTO_TCP };
		uint32_t lo = 1; /* ifindex of lo in every netns */
		int p;

		if (!np_is_lo_addr(&res[i]) || np_is_lo_default(&res[i]))
			continue;
		sin = (const struct sockaddr_in *)(const void *)&res[i];
		sin6 = (const struct sockaddr_in6 *)(const void *)&res[i];
		for (p = 0; p < 2; p++) {
			rb_init(&b, np_chain_add_rule(ch));
			rb_meta_cmp(&b, NFT_META_OIF, &lo, sizeof(lo));
			if (res[i].ss_family == AF_INET)
				rb_net_cmp(&b, NFPROTO_IPV4, 12, &sin->sin_addr,
				    4);
			else
				rb_net_cmp(&b, NFPROTO_IPV6, 8,
				    &sin6->sin6_addr, 16);
			rb_sport(&b, protos[p], 53);
			rb_verdict(&b, NF_ACCEPT, NULL);
			if (b.err)
				return -1;
		}
	}
	rb_init(&b, np_chain_add_rule(ch));
	rb_not_skuid(&b, in->ni_uid);
	/* ip saddr 127.0.0.0/8: nft compares the first byte only. */
	rb_net_cmp(&b, NFPROTO_IPV4, 12, &lo_net, sizeof(lo_net));
	rb_net_op(&b, NFPROTO_IPV4, 12, NFT_CMP_NEQ, &lo_addr, sizeof(lo_addr));
	rb_verdict(&b, NFT_JUMP, NP_CHAIN_SPOOFED);
	if (b.err)
		return -1;
	for (i = 0; i < nres; i++) {
		if (np_is_lo_addr(&res[i]))
			continue;
		sin = (const struct sockaddr_in *)(const void *)&res[i];
		sin6 = (const struct sockaddr_in6 *)(const void *)&res[i];
		rb_init(&b, np_chain_add_rule(ch));
		rb_not_skuid(&b, in->ni_uid);
		if (res[i].ss_family == AF_INET)
			rb_net_cmp(&b, NFPROTO_IPV4, 12, &sin->sin_addr, 4);
		else
			rb_net_cmp(&b, NFPROTO_IPV6, 8, &sin6->sin6_addr, 16);
		rb_verdict(&b, NFT_JUMP, NP_CHAIN_SPOOFED);
		if (b.err)
			return -1;
	}
	return 0;
}

/*
 * Parse the resolver addresses into *resp (NULL when there are none; the
 * caller frees it). Returns 0, or -1 with why set naming the bad entry.
 */
static int
np_parse_resolvers(const struct np_input *in, struct sockaddr_storage **resp,
    char *why, size_t whylen)
{
	struct sockaddr_storage *res = NULL;
	size_t i;

	*resp = NULL;
	if (in->ni_nresolvers > 0 &&
	    (res = calloc(in->ni_nresolvers, sizeof(*res))) == NULL) {
		np_why(why, whylen, "netpolicy: out of memory");
		return -1;
	}
	for (i = 0; i < in->ni_nresolvers; i++) {
		if (in->ni_resolvers[i] == NULL ||
		    np_parse_ip(in->ni_resolvers[i], &res[i]) == -1) {
			np_why(why, whylen,
			    "netpolicy.resolvers[%zu]: not an IP address", i);
			free(res);
			return -1;
		}
	}
	*resp = res;
	return 0;
}

/*
 * The sidecar rules that let sluice's own flows out: established ones,
 * closed ones by their conntrack mark, and new ones to an upstream
 * address on the port it was resolved for. Returns 0, or -1 when out of
 * memory.
 */
static int
np_add_sluice_flows(struct np_chain *ch, const struct np_input *in)
{
	uint32_t mark = NP_CT_MARK;
	uint8_t tcp = IPPROTO_TCP;
	uint32_t est = NF_CT_STATE_BIT(IP_CT_ESTABLISHED);
	struct rb b;
	int nf;

	/*
	 * sluice's own flows that were let out at their first packet stay
	 * open after their set element times out: an upstream stream (SSE)
	 * may outlive the DNS TTL. Only sluice's uid; for UDP "established"
	 * needs a reply, which a dropped first packet never gets.
	 */
	rb_init(&b, np_chain_add_rule(ch));
	rb_skuid(&b, in->ni_uid);
	rb_ct_state(&b, est);
	rb_verdict(&b, NF_ACCEPT, NULL);
	if (b.err)
		return -1;
	/*
	 * The same TCP flows once sluice closed its socket: the kernel's last
	 * ACK or FIN then has no owner uid. Only connections whose first
	 * packet one of the rules below accepted carry the mark; TCP only, as
	 * a new UDP socket may reuse a closed one's conntrack entry.
	 */
	rb_init(&b, np_chain_add_rule(ch));
	rb_meta_cmp(&b, NFT_META_L4PROTO, &tcp, sizeof(tcp));
	rb_ct_cmp(&b, NFT_CT_MARK, 0, &mark, sizeof(mark));
	rb_ct_state(&b, est);
	rb_verdict(&b, NF_ACCEPT, NULL);
	if (b.err)
		return -1;

	/* An address is only allowed on the port it was resolved for. */
	for (nf = 0; nf < 2; nf++) {
		rb_init(&b, np_chain_add_rule(ch));
		rb_skuid(&b, in->ni_uid);
		rb_daddr_dport_lookup(&b, nf == 0 ? NFPROTO_IPV4 : NFPROTO_IPV6,
		    nf == 0 ? NP_SET_UPSTREAM4 : NP_SET_UPSTREAM6);
		rb_ct_mark_set(&b, mark);
		rb_verdict(&b, NF_ACCEPT, NULL);
		if (b.err)
			return -1;
	}
	return 0;
}

/*
 * sluice's DNS queries: to each resolver's port 53 over UDP and TCP (TCP
 * marked, as above). Returns 0, or -1 when out of memory.
 */
static int
np_add_resolver_rules(struct np_chain *ch, const struct np_input *in,
    const struct sockaddr_storage *res)
{
	static const int protos[] = { IPPROTO_UDP, IPPROTO_TCP };
	const struct sockaddr_in *sin;
	const struct sockaddr_in6 *sin6;
	uint32_t mark = NP_CT_MARK;
	struct rb b;
	size_t i;
	int p;

	for (i = 0; i < in->ni_nresolvers; i++) {
		sin = (const struct sockaddr_in *)(const void *)&res[i];
		sin6 = (const struct sockaddr_in6 *)(const void *)&res[i];
		for (p = 0; p < 2; p++) {
			rb_init(&b, np_chain_add_rule(ch));
			rb_skuid(&b, in->ni_uid);
			if (res[i].ss_family == AF_INET)
				rb_net_cmp(&b, NFPROTO_IPV4, 16, &sin->sin_addr,
				    4);
			else
				rb_net_cmp(&b, NFPROTO_IPV6, 24,
				    &sin6->sin6_addr, 16);
			rb_dport(&b, protos[p], 53);
			if (protos[p] == IPPROTO_TCP)
				rb_ct_mark_set(&b, mark);
			rb_verdict(&b, NF_ACCEPT, NULL);
			if (b.err)
				return -1;
		}
	}
	return 0;
}

/*
 * The transparent listener's rules. In a nat chain on the output hook,
 * before the filter chain: "oif != lo meta skuid != UID tcp dport P
 * redirect to :L", per port, for the families with a listener (both: one
 * inet rule; one: "meta nfproto" first). sluice's own flows are never
 * redirected, nor what goes to a local address. The filter chain then
 * sees the redirected packets addressed to 127.0.0.1 / ::1 port L, still
 * with the outgoing interface of their first route, so it accepts those
 * explicitly.
 */
static int
np_add_redirect(struct np_ruleset *rs, const struct np_input *in)
{
	struct np_chain *ch;
	struct np_expr *e;
	struct rb b;
	uint32_t lo = 1;
	uint16_t to = htons(in->ni_redirect_to);
	uint8_t nf;
	size_t i;

	if ((ch = np_ruleset_add_chain(rs, NP_CHAIN_REDIRECT)) == NULL)
		return -1;
	ch->ch_base = 1;
	ch->ch_hook = NF_INET_LOCAL_OUT;
	ch->ch_prio = -100; /* NF_IP_PRI_NAT_DST: before the filter chain */
	ch->ch_policy = NF_ACCEPT;
	snprintf(ch->ch_type, sizeof(ch->ch_type), "nat");
	for (i = 0; i < in->ni_nredirect_ports; i++) {
		rb_init(&b, np_chain_add_rule(ch));
		if (in->ni_redirect_v4 != in->ni_redirect_v6) {
			nf = in->ni_redirect_v4 ? NFPROTO_IPV4 : NFPROTO_IPV6;
			rb_meta_cmp(&b, NFT_META_NFPROTO, &nf, sizeof(nf));
			b.nfproto = nf;
		}
		rb_meta_op(&b, NFT_META_OIF, NFT_CMP_NEQ, &lo, sizeof(lo));
		rb_not_skuid(&b, in->ni_uid);
		rb_dport(&b, IPPROTO_TCP, in->ni_redirect_ports[i]);
		if ((e = rb_add(&b, NP_E_IMMEDIATE)) != NULL) {
			e->ex_dreg = NFT_REG_1;
			e->ex_len = sizeof(to);
			memcpy(e->ex_data, &to, sizeof(to));
		}
		if ((e = rb_add(&b, NP_E_REDIR)) != NULL) {
			e->ex_sreg = NFT_REG_1;
			e->ex_sreg2 = NFT_REG_1;
			e->ex_flags = 0x2; /* NF_NAT_RANGE_PROTO_SPECIFIED */
		}
		if (b.err)
			return -1;
	}
	return 0;
}

/* The filter side: accept what was redirected to the listener. */
static int
np_add_redirected(struct np_chain *ch, const struct np_input *in)
{
	struct in6_addr lo6 = IN6ADDR_LOOPBACK_INIT;
	uint32_t lo4 = htonl(INADDR_LOOPBACK);
	struct rb b;

	if (in->ni_redirect_v4) {
		rb_init(&b, np_chain_add_rule(ch));
		rb_net_cmp(&b, NFPROTO_IPV4, 16, &lo4, 4);
		rb_dport(&b, IPPROTO_TCP, in->ni_redirect_to);
		rb_verdict(&b, NF_ACCEPT, NULL);
		if (b.err)
			return -1;
	}
	if (in->ni_redirect_v6) {
		rb_init(&b, np_chain_add_rule(ch));
		rb_net_cmp(&b, NFPROTO_IPV6, 24, &lo6, 16);
		rb_dport(&b, IPPROTO_TCP, in->ni_redirect_to);
		rb_verdict(&b, NF_ACCEPT, NULL);
		if (b.err)
			return -1;
	}
	return 0;
}

/*
 * Sidecar: one output chain, policy drop (DESIGN.md "Kernel rules"). There
 * is deliberately no blanket "ct state established,related accept": in
 * output it would let any uid answer a connection that came in from
 * outside, which is a way out. Replies to the sandbox's own connections to
 * sluice's listeners travel over lo and are covered by "oif lo"; sluice's
 * own flows are covered by its uid, and once sluice closed a socket (the
 * kernel's last FIN/ACK has no owner any more) by the conntrack mark its
 * accepted connections got. Sidecar needs no input chain: inbound packets
 * carry nothing out, and every reply a process could make goes through
 * this output chain.
 */
static int
np_build_sidecar(struct np_ruleset *rs, const struct np_input *in, char *why,
    size_t whylen)
{
	struct sockaddr_storage *res;
	struct np_chain *ch, *spoof;
	struct rb b;
	uint32_t lo = 1; /* the loopback device is ifindex 1 in every netns */

	if (in->ni_uid == 0) {
		np_why(why, whylen,
		    "user: sidecar mode needs a non-root user (the rules let "
		    "exactly that uid out)");
		return -1;
	}
	if (np_parse_resolvers(in, &res, why, whylen) == -1)
		return -1;
	if (np_add_upstream_sets(rs, in, why, whylen) == -1) {
		free(res);
		return -1;
	}
	ch = np_add_base_chain(rs, "output", NF_INET_LOCAL_OUT, NF_DROP);
	if (ch == NULL || np_ruleset_add_chain(rs, NP_CHAIN_SPOOFED) == NULL)
		goto nomem;
	/* Adding a chain may have moved the array. */
	ch = &rs->rs_chains[0];
	spoof = &rs->rs_chains[1];

	if (np_add_antispoof(ch, in, res, in->ni_nresolvers) == -1)
		goto nomem;

	if (in->ni_allow_loopback) {
		rb_init(&b, np_chain_add_rule(ch));
		rb_meta_cmp(&b, NFT_META_OIF, &lo, sizeof(lo));
		rb_verdict(&b, NF_ACCEPT, NULL);
		if (b.err)
			goto nomem;
	}
	if (in->ni_redirect_to != 0 && np_add_redirected(ch, in) == -1)
		goto nomem;
	if (np_add_sluice_flows(ch, in) == -1 ||
	    np_add_resolver_rules(ch, in, res) == -1)
		goto nomem;

	/*
	 * Neighbour solicitation and advertisement are all IPv6 needs to
	 * reach on-link neighbours (address resolution, DAD, unreachability
	 * detection). Router solicitations are left out: routers advertise
	 * periodically anyway, and the sandbox has no business configuring
	 * routes.
	 */
	if (np_add_nd_rules(ch) == -1 || np_add_quiet_drops(ch) == -1 ||
	    np_add_inbound(ch, in) == -1)
		goto nomem;

	if (np_add_log_drop(ch, in->ni_log_group) == -1 ||
	    np_add_log_drop(spoof, in->ni_log_group) == -1)
		goto nomem;
	/* Last: adding it may move the chains above. */
	if (in->ni_redirect_to != 0 && np_add_redirect(rs, in) == -1)
		goto nomem;
	free(res);
	return 0;
nomem:
	free(res);
	np_why(why, whylen, "netpolicy: out of memory");
	return -1;
}

static int
np_listener_rule(struct np_chain *ch, const struct sockaddr_storage *ss,
    size_t idx, char *why, size_t whylen)
{
	const struct sockaddr_in *sin;
	const struct sockaddr_in6 *sin6;
	uint8_t nfproto;
	struct rb b;
	uint16_t port;

	sin = (const struct sockaddr_in *)(const void *)ss;
	sin6 = (const struct sockaddr_in6 *)(const void *)ss;
	rb_init(&b, np_chain_add_rule(ch));
	if (ss->ss_family == AF_INET) {
		port = ntohs(sin->sin_port);
		/* 0.0.0.0: any local IPv4 address on that port. */
		if (sin->sin_addr.s_addr == htonl(INADDR_ANY)) {
			nfproto = NFPROTO_IPV4;
			rb_meta_cmp(&b, NFT_META_NFPROTO, &nfproto, 1);
			b.nfproto = NFPROTO_IPV4;
		} else
			rb_net_cmp(&b, NFPROTO_IPV4, 16, &sin->sin_addr, 4);
	} else if (ss->ss_family == AF_INET6) {
		port = ntohs(sin6->sin6_port);
		if (IN6_IS_ADDR_UNSPECIFIED(&sin6->sin6_addr)) {
			nfproto = NFPROTO_IPV6;
			rb_meta_cmp(&b, NFT_META_NFPROTO, &nfproto, 1);
			b.nfproto = NFPROTO_IPV6;
		} else
			rb_net_cmp(&b, NFPROTO_IPV6, 24, &sin6->sin6_addr, 16);
	} else {
		np_why(why, whylen, "listeners[%zu].listen: not an IP listener",
		    idx);
		return -1;
	}
	rb_dport(&b, IPPROTO_TCP, port);
	rb_verdict(&b, NF_ACCEPT, NULL);
	if (b.err) {
		np_why(why, whylen, "netpolicy: out of memory");
		return -1;
	}
	return 0;
}

/* Same family and address (the port aside). */
static int
np_same_addr(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	const struct sockaddr_in *a4, *b4;
	const struct sockaddr_in6 *a6, *b6;

	if (a->ss_family != b->ss_family)
		return 0;
	a4 = (const struct sockaddr_in *)(const void *)a;
	b4 = (const struct sockaddr_in *)(const void *)b;
	a6 = (const struct sockaddr_in6 *)(const void *)a;
	b6 = (const struct sockaddr_in6 *)(const void *)b;
	if (a->ss_family == AF_INET)
		return a4->sin_addr.s_addr == b4->sin_addr.s_addr;
	return memcmp(&a6->sin6_addr, &b6->sin6_addr, 16) == 0;
}

/* The port of an AF_INET or AF_INET6 address, network byte order. */
static in_port_t
np_port(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return ((const struct sockaddr_in *)(const void *)ss)->sin_port;
	return ((const struct sockaddr_in6 *)(const void *)ss)->sin6_port;
}

/* Same family, address and port. */
static int
np_same_listener(const struct sockaddr_storage *a,
    const struct sockaddr_storage *b)
{
	return np_same_addr(a, b) && np_port(a) == np_port(b);
}

/*
 * ct state established,related of connections to a listener's address:
 * "ct original ip daddr L". For a wildcard listener (any local address)
 * the original direction stands in for it: a connection a sandbox opened
 * to the gateway had its first packet accepted only by a listener rule
 * (the reverse-path check keeps a sandbox from posing as another host),
 * and the gateway's own flows are answered in the reply direction.
 * nft has no way to print the port of an original tuple so that it reads
 * it back, so ports are left to the listener rules.
 */
static int
np_listener_ct_rule(struct np_chain *ch, const struct sockaddr_storage *ss,
    size_t idx, char *why, size_t whylen)
{
	const struct sockaddr_in *sin;
	const struct sockaddr_in6 *sin6;
	uint8_t nfproto, dir = IP_CT_DIR_ORIGINAL;
	struct rb b;

	sin = (const struct sockaddr_in *)(const void *)ss;
	sin6 = (const struct sockaddr_in6 *)(const void *)ss;
	rb_init(&b, np_chain_add_rule(ch));
	rb_ct_state(&b,
	    NF_CT_STATE_BIT(IP_CT_ESTABLISHED) |
		NF_CT_STATE_BIT(IP_CT_RELATED));
	if (ss->ss_family == AF_INET &&
	    sin->sin_addr.s_addr != htonl(INADDR_ANY))
		rb_ct_cmp(&b, NFT_CT_DST_IP, 1 + IP_CT_DIR_ORIGINAL,
		    &sin->sin_addr, 4);
	else if (ss->ss_family == AF_INET6 &&
	    !IN6_IS_ADDR_UNSPECIFIED(&sin6->sin6_addr))
		rb_ct_cmp(&b, NFT_CT_DST_IP6, 1 + IP_CT_DIR_ORIGINAL,
		    &sin6->sin6_addr, 16);
	else if (ss->ss_family == AF_INET || ss->ss_family == AF_INET6) {
		rb_ct_cmp(&b, NFT_CT_DIRECTION, 0, &dir, sizeof(dir));
		nfproto =
		    ss->ss_family == AF_INET ? NFPROTO_IPV4 : NFPROTO_IPV6;
		rb_meta_cmp(&b, NFT_META_NFPROTO, &nfproto, 1);
	} else {
		np_why(why, whylen, "listeners[%zu].listen: not an IP listener",
		    idx);
		return -1;
	}
	rb_verdict(&b, NF_ACCEPT, NULL);
	if (b.err) {
		np_why(why, whylen, "netpolicy: out of memory");
		return -1;
	}
	return 0;
}

/*
 * Gateway: sluice in the "host" namespace, sandboxes behind interfaces
 * matching the patterns. The base chains have policy accept and only
 * divert packets from sandbox interfaces, so the host's other traffic is
 * untouched; a diverted packet ends in sandbox_drop unless it is TCP to a
 * listener, traffic of a connection to a listener, or neighbour discovery,
 * and whatever its source could not have come from ends there first.
 */
/*
 * From each sandbox interface: input to sandbox_in, forward to
 * sandbox_drop. 0, or -1 with why.
 */
static int
np_iface_jumps(struct np_chain *ch_in, struct np_chain *ch_fwd,
    const struct np_input *in, char *why, size_t whylen)
{
	struct rb b;
	size_t i;

	for (i = 0; i < in->ni_nifaces; i++) {
		const char *pat = in->ni_ifaces[i];

		rb_init(&b, np_chain_add_rule(ch_in));
		if (pat == NULL || rb_iifname(&b, pat) == -1) {
			np_why(why, whylen,
			    "netpolicy.sandbox_interfaces[%zu]: not an "
			    "interface name or prefix*",
			    i);
			return -1;
		}
		rb_verdict(&b, NFT_JUMP, NP_CHAIN_SANDBOX_IN);
		if (b.err)
			goto nomem;
		rb_init(&b, np_chain_add_rule(ch_fwd));
		(void)rb_iifname(&b, pat);
		rb_verdict(&b, NFT_JUMP, NP_CHAIN_SANDBOX_DROP);
		if (b.err)
			goto nomem;
	}
	return 0;
nomem:
	np_why(why, whylen, "netpolicy: out of memory");
	return -1;
}

static int
np_build_gateway(struct np_ruleset *rs, const struct np_input *in, char *why,
    size_t whylen)
{
	struct np_chain *ch_in, *ch_fwd, *ch_sin, *ch_drop;
	struct rb b;
	size_t i, j;
	int dup;

	if (in->ni_nifaces == 0) {
		np_why(why, whylen,
		    "netpolicy.sandbox_interfaces: gateway mode needs at "
		    "least one pattern");
		return -1;
	}
	ch_in = np_add_base_chain(rs, "input", NF_INET_LOCAL_IN, NF_ACCEPT);
	if (ch_in == NULL)
		goto nomem;
	ch_fwd = np_add_base_chain(rs, "forward", NF_INET_FORWARD, NF_ACCEPT);
	if (ch_fwd == NULL)
		goto nomem;
	if (np_ruleset_add_chain(rs, NP_CHAIN_SANDBOX_IN) == NULL ||
	    np_ruleset_add_chain(rs, NP_CHAIN_SANDBOX_DROP) == NULL)
		goto nomem;
	/* Adding chains may have moved the array. */
	ch_in = &rs->rs_chains[0];
	ch_fwd = &rs->rs_chains[1];
	ch_sin = &rs->rs_chains[2];
	ch_drop = &rs->rs_chains[3];

	if (np_iface_jumps(ch_in, ch_fwd, in, why, whylen) == -1)
		return -1;

	/*
	 * Reverse path: a source that would not be routed back out of the
	 * interface it came in on is spoofed (another sandbox's address, the
	 * internet host of one of the gateway's own flows, a local address).
	 */
	rb_init(&b, np_chain_add_rule(ch_sin));
	rb_fib_rp_missing(&b);
	rb_verdict(&b, NFT_JUMP, NP_CHAIN_SANDBOX_DROP);
	if (b.err)
		goto nomem;
	/*
	 * Established and related traffic only of connections to a
	 * listener, judged by the conntrack original tuple: never of the
	 * gateway's own flows (its DNS, its upstream connections), into
	 * which a sandbox with CAP_NET_RAW could otherwise inject.
	 */
	for (i = 0; i < in->ni_nlisteners; i++) {
		for (dup = 0, j = 0; j < i; j++)
			if (np_same_addr(&in->ni_listeners[i],
				&in->ni_listeners[j]))
				dup = 1;
		if (!dup &&
		    np_listener_ct_rule(ch_sin, &in->ni_listeners[i], i, why,
			whylen) == -1)
			return -1;
	}
	for (i = 0; i < in->ni_nlisteners; i++) {
		for (dup = 0, j = 0; j < i; j++)
			if (np_same_listener(&in->ni_listeners[i],
				&in->ni_listeners[j]))
				dup = 1;
		if (!dup &&
		    np_listener_rule(ch_sin, &in->ni_listeners[i], i, why,
			whylen) == -1)
			return -1;
	}
	/* The sandboxes resolve the gateway's link-layer address. */
	if (np_add_nd_rules(ch_sin) == -1 || np_add_quiet_drops(ch_sin) == -1)
		goto nomem;
	rb_init(&b, np_chain_add_rule(ch_sin));
	rb_verdict(&b, NFT_JUMP, NP_CHAIN_SANDBOX_DROP);
	if (b.err)
		goto nomem;

	if (np_add_log_drop(ch_drop, in->ni_log_group) == -1)
		goto nomem;
	return 0;
nomem:
	np_why(why, whylen, "netpolicy: out of memory");
	return -1;
}

struct np_ruleset *
np_ruleset_build(const struct np_input *in, char *why, size_t whylen)
{
	struct np_ruleset *rs;
	int rc;

	if (in->ni_table == NULL || *in->ni_table == '\0' ||
	    strlen(in->ni_table) >= NP_NAME_MAX) {
		np_why(why, whylen, "netpolicy.table: empty or too long");
		return NULL;
	}
	if ((rs = np_ruleset_new(in->ni_table)) == NULL) {
		np_why(why, whylen, "netpolicy: out of memory");
		return NULL;
	}
	switch (in->ni_mode) {
	case NP_MODE_SIDECAR:
		rc = np_build_sidecar(rs, in, why, whylen);
		break;
	case NP_MODE_GATEWAY:
		rc = np_build_gateway(rs, in, why, whylen);
		break;
	default:
		np_why(why, whylen, "netpolicy.mode: no ruleset for this mode");
		rc = -1;
		break;
	}
	if (rc == -1) {
		np_ruleset_free(rs);
		return NULL;
	}
	return rs;
}
