/*
 * Rendering the model as nft syntax, the way `nft list table` prints it, so
 * that `sluice netpolicy show` and nft agree byte for byte and `nft -f`
 * reads the text back. Rules are decompiled from their expressions: a small
 * pattern matcher over exactly the shapes nft emits (match = load + cmp,
 * concatenated lookups, ct state bits, statements), which drops the
 * implicit protocol dependencies the way nft's listing does. Any rule it
 * cannot read whole falls back to libnftnl-style "[ expr ]" items, so that
 * a rule added by hand is always shown, never misrepresented.
 */
#include <sys/types.h>
#include <sys/socket.h>

#include <netinet/in.h>
#include <arpa/inet.h>

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <linux/netfilter.h>
#include <linux/netfilter/nf_conntrack_tuple_common.h>
#include <linux/netfilter/nf_tables.h>

#include "netpolicy/netpolicy.h"
#include "netpolicy/np_private.h"

/* A growable string; on ENOMEM it stops growing and sets sb_err. */
struct sb {
	char *sb_buf;
	size_t sb_len;
	size_t sb_cap;
	int sb_err;
};

static void sb_printf(struct sb *sb, const char *fmt, ...)
    __attribute__((__format__(__printf__, 2, 3)));

static void
sb_printf(struct sb *sb, const char *fmt, ...)
{
	va_list ap;
	size_t need, cap;
	char *buf;
	int n;

	if (sb->sb_err)
		return;
	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0) {
		sb->sb_err = 1;
		return;
	}
	need = sb->sb_len + (size_t)n + 1;
	if (need > sb->sb_cap) {
		cap = sb->sb_cap == 0 ? 1024 : sb->sb_cap;
		while (cap < need)
			cap *= 2;
		if ((buf = realloc(sb->sb_buf, cap)) == NULL) {
			sb->sb_err = 1;
			return;
		}
		sb->sb_buf = buf;
		sb->sb_cap = cap;
	}
	va_start(ap, fmt);
	if (vsnprintf(sb->sb_buf + sb->sb_len, sb->sb_cap - sb->sb_len, fmt,
		ap) != n)
		sb->sb_err = 1;
	va_end(ap);
	if (!sb->sb_err)
		sb->sb_len += (size_t)n;
}

/* One decompiled piece of a rule. */
enum unit_kind {
	U_META,    /* meta load + cmp */
	U_PCMP,    /* payload load + cmp */
	U_LOOKUP,  /* one or two payload loads + lookup */
	U_CTSTATE, /* ct load state + bitwise + cmp neq 0 */
	U_CT,      /* ct load (mark, direction, original address) + cmp */
	U_CTSET,   /* immediate + ct set */
	U_REDIR,   /* immediate port + redir */
	U_FIB,     /* fib + cmp */
	U_STMT     /* counter, limit, log, verdict */
};

struct unit {
	enum unit_kind u_kind;
	const struct np_expr *u_load[2]; /* meta, payload(s) or ct */
	size_t u_nload;
	const struct np_expr *u_last; /* cmp, lookup, bitwise or statement */
};

#define NP_MAX_UNITS NP_RULE_MAX_EXPR

/* A unit of one load and the expression that completes it. */
static void
unit_set(struct unit *u, enum unit_kind kind, const struct np_expr *load,
    const struct np_expr *last)
{
	u->u_kind = kind;
	u->u_load[0] = load;
	u->u_nload = 1;
	u->u_last = last;
}

static int
cmp_follows(const struct np_expr *load, const struct np_expr *cmp)
{
	return cmp->ex_type == NP_E_CMP && cmp->ex_sreg == load->ex_dreg &&
	    (cmp->ex_op == NFT_CMP_EQ || cmp->ex_op == NFT_CMP_NEQ) &&
	    !cmp->ex_unknown_attr;
}

/*
 * The register nft puts the next part of a concatenation in, after len
 * bytes of earlier parts (see ruleset.c).
 */
static uint32_t
concat_reg(uint32_t off)
{
	return off % 16 == 0 ? NFT_REG_1 + off / 16 : NFT_REG32_00 + off / 4;
}

static uint32_t
round4(uint32_t n)
{
	return (n + 3) & ~3u;
}

/*
 * The unit parsers below each take the rule and the index i of the unit's
 * first expression, fill *u and return how many expressions the unit
 * takes, or -1 when they fit no pattern.
 */

/* A load and the cmp that follows it (meta, fib, ct other than state). */
static int
unit_cmp(const struct np_rule *ru, size_t i, struct unit *u,
    enum unit_kind kind)
{
	const struct np_expr *e = &ru->ru_exprs[i];

	if (i + 1 >= ru->ru_nexprs || !cmp_follows(e, &ru->ru_exprs[i + 1]))
		return -1;
	unit_set(u, kind, e, &ru->ru_exprs[i + 1]);
	return 2;
}

/*
 * A payload load and its cmp, or one or two payload loads (a
 * concatenation) and the set lookup that takes them.
 */
static int
unit_payload(const struct np_rule *ru, size_t i, struct unit *u)
{
	const struct np_expr *e = &ru->ru_exprs[i], *x;
	size_t j = i + 1;

	if (j >= ru->ru_nexprs)
		return -1;
	x = &ru->ru_exprs[j];
	if (cmp_follows(e, x)) {
		unit_set(u, U_PCMP, e, x);
		return 2;
	}
	unit_set(u, U_LOOKUP, e, NULL); /* u_last below */
	if (x->ex_type == NP_E_PAYLOAD &&
	    x->ex_dreg == concat_reg(round4(e->ex_len))) {
		u->u_load[1] = x;
		u->u_nload = 2;
		if (++j >= ru->ru_nexprs)
			return -1;
		x = &ru->ru_exprs[j];
	}
	if (x->ex_type != NP_E_LOOKUP || x->ex_unknown_attr ||
	    x->ex_sreg != e->ex_dreg ||
	    (x->ex_flags & ~(uint32_t)NFT_LOOKUP_F_INV) != 0)
		return -1;
	u->u_last = x;
	return (int)(j + 1 - i);
}

/*
 * An immediate: only as the value of a ct mark set that follows, or the
 * port of a redirect.
 */
static int
unit_ctset(const struct np_rule *ru, size_t i, struct unit *u)
{
	const struct np_expr *e = &ru->ru_exprs[i], *x;

	if (i + 1 >= ru->ru_nexprs)
		return -1;
	x = &ru->ru_exprs[i + 1];
	if (x->ex_type == NP_E_REDIR) {
		/* "redirect to :P": one register for both ends, flags 2. */
		if (x->ex_unknown_attr || x->ex_sreg != e->ex_dreg ||
		    x->ex_sreg2 != e->ex_dreg || x->ex_flags != 0x2 ||
		    e->ex_len != 2)
			return -1;
		unit_set(u, U_REDIR, e, x);
		return 2;
	}
	if (x->ex_type != NP_E_CT || x->ex_unknown_attr || x->ex_dreg != 0 ||
	    x->ex_sreg != e->ex_dreg || x->ex_key != NFT_CT_MARK ||
	    x->ex_ctdir != 0 || e->ex_len != 4)
		return -1;
	unit_set(u, U_CTSET, e, x);
	return 2;
}

/* ct state load, bitwise mask of it, cmp neq 0. */
static int
unit_ctstate(const struct np_rule *ru, size_t i, struct unit *u)
{
	const struct np_expr *e = &ru->ru_exprs[i], *x, *cmp;

	if (i + 2 >= ru->ru_nexprs || e->ex_ctdir != 0)
		return -1;
	x = &ru->ru_exprs[i + 1];
	if (x->ex_type != NP_E_BITWISE || x->ex_sreg != e->ex_dreg ||
	    x->ex_dreg != e->ex_dreg || x->ex_len != 4 || x->ex_op != 0 ||
	    x->ex_unknown_attr || memcmp(x->ex_xor, "\0\0\0\0", 4) != 0)
		return -1;
	cmp = &ru->ru_exprs[i + 2];
	if (!cmp_follows(x, cmp) || cmp->ex_op != NFT_CMP_NEQ ||
	    cmp->ex_len != 4 || memcmp(cmp->ex_data, "\0\0\0\0", 4) != 0)
		return -1;
	unit_set(u, U_CTSTATE, e, x);
	return 3;
}

/* A ct load into a register: state, or a key compared to a value. */
static int
unit_ct(const struct np_rule *ru, size_t i, struct unit *u)
{
	const struct np_expr *e = &ru->ru_exprs[i];

	if (e->ex_sreg != 0 || e->ex_dreg == 0)
		return -1;
	if (e->ex_key != NFT_CT_STATE)
		return unit_cmp(ru, i, u, U_CT);
	return unit_ctstate(ru, i, u);
}

/* The unit that starts at expression i, by the type of that expression. */
static int
unit_parse(const struct np_rule *ru, size_t i, struct unit *u)
{
	const struct np_expr *e = &ru->ru_exprs[i];

	switch (e->ex_type) {
	case NP_E_META:
		return unit_cmp(ru, i, u, U_META);
	case NP_E_PAYLOAD:
		return unit_payload(ru, i, u);
	case NP_E_IMMEDIATE:
		return unit_ctset(ru, i, u);
	case NP_E_FIB:
		return unit_cmp(ru, i, u, U_FIB);
	case NP_E_CT:
		return unit_ct(ru, i, u);
	case NP_E_COUNTER:
	case NP_E_LIMIT:
	case NP_E_LOG:
	case NP_E_VERDICT:
		u->u_kind = U_STMT;
		u->u_last = e;
		return 1;
	default:
		return -1;
	}
}

/* Split a rule into units; -1 when some expression fits no pattern. */
static int
units_parse(const struct np_rule *ru, struct unit *u, size_t *nu)
{
	size_t i = 0, n = 0;
	int used;

	if (ru->ru_overflow)
		return -1;
	while (i < ru->ru_nexprs) {
		if (ru->ru_exprs[i].ex_unknown_attr)
			return -1;
		memset(&u[n], 0, sizeof(u[n]));
		if ((used = unit_parse(ru, i, &u[n])) == -1)
			return -1;
		i += (size_t)used;
		n++;
	}
	*nu = n;
	return 0;
}

static uint32_t
data_u32(const struct np_expr *e)
{
	uint32_t v = 0;

	memcpy(&v, e->ex_data, sizeof(v));
	return v;
}

static const char *
l4proto_name(int p)
{
	switch (p) {
	case IPPROTO_TCP:
		return "tcp";
	case IPPROTO_UDP:
		return "udp";
	case IPPROTO_ICMP:
		return "icmp";
	case IPPROTO_ICMPV6:
		return "ipv6-icmp";
	default:
		return NULL;
	}
}

static const char *
icmpv6_type_name(uint8_t t)
{
	switch (t) {
	case 1:
		return "destination-unreachable";
	case 2:
		return "packet-too-big";
	case 3:
		return "time-exceeded";
	case 4:
		return "parameter-problem";
	case 128:
		return "echo-request";
	case 131:
		return "mld-listener-report";
	case 129:
		return "echo-reply";
	case 133:
		return "nd-router-solicit";
	case 134:
		return "nd-router-advert";
	case 135:
		return "nd-neighbor-solicit";
	case 136:
		return "nd-neighbor-advert";
	case 137:
		return "nd-redirect";
	case 143:
		return "mld2-listener-report";
	default:
		return NULL;
	}
}

static const char *
icmp_type_name(uint8_t t)
{
	switch (t) {
	case 0:
		return "echo-reply";
	case 3:
		return "destination-unreachable";
	case 8:
		return "echo-request";
	case 11:
		return "time-exceeded";
	default:
		return NULL;
	}
}

/* The protocol context a decompiled rule has established so far. */
struct ctx {
	int nfproto; /* 0: unknown */
	int l4proto; /* -1: unknown */
};

/* The name of a network header field a payload load reads, or NULL. */
static const char *
network_field_name(const struct ctx *c, const struct np_expr *p)
{
	if (c->nfproto == NFPROTO_IPV4) {
		/* Shorter: a byte-aligned prefix (see field_value). */
		if (p->ex_offset == 12 && p->ex_len >= 1 && p->ex_len <= 4)
			return "ip saddr";
		if (p->ex_offset == 16 && p->ex_len >= 1 && p->ex_len <= 4)
			return "ip daddr";
		if (p->ex_offset == 8 && p->ex_len == 1)
			return "ip ttl";
	} else if (c->nfproto == NFPROTO_IPV6) {
		/* Shorter: a byte-aligned prefix, as for IPv4. */
		if (p->ex_offset == 8 && p->ex_len >= 1 && p->ex_len <= 16)
			return "ip6 saddr";
		if (p->ex_offset == 24 && p->ex_len >= 1 && p->ex_len <= 16)
			return "ip6 daddr";
		if (p->ex_offset == 7 && p->ex_len == 1)
			return "ip6 hoplimit";
	}
	return NULL;
}

/* The name of a transport header field a payload load reads, or NULL. */
static const char *
transport_field_name(const struct ctx *c, const struct np_expr *p)
{
	int tcp = c->l4proto == IPPROTO_TCP;

	if (tcp || c->l4proto == IPPROTO_UDP) {
		if (p->ex_offset == 0 && p->ex_len == 2)
			return tcp ? "tcp sport" : "udp sport";
		if (p->ex_offset == 2 && p->ex_len == 2)
			return tcp ? "tcp dport" : "udp dport";
		return NULL;
	}
	if (p->ex_offset != 0 || p->ex_len != 1)
		return NULL;
	if (c->l4proto == IPPROTO_ICMPV6 && c->nfproto == NFPROTO_IPV6)
		return "icmpv6 type";
	if (c->l4proto == IPPROTO_ICMP && c->nfproto == NFPROTO_IPV4)
		return "icmp type";
	return NULL;
}

/*
 * Print the field a payload load names ("ip daddr", "tcp dport"); -1 when
 * the context does not say which protocol header it is.
 */
static int
field_name(struct sb *sb, const struct ctx *c, const struct np_expr *p)
{
	const char *name = NULL;

	if (p->ex_base == NFT_PAYLOAD_NETWORK_HEADER)
		name = network_field_name(c, p);
	else if (p->ex_base == NFT_PAYLOAD_TRANSPORT_HEADER)
		name = transport_field_name(c, p);
	if (name == NULL)
		return -1;
	sb_printf(sb, "%s", name);
	return 0;
}

/* Print the value of a field given by the payload load p. */
static int
field_value(struct sb *sb, const struct ctx *c, const struct np_expr *p,
    const uint8_t *data, uint32_t len)
{
	char addr[INET6_ADDRSTRLEN];
	const char *name;
	uint16_t port;

	if (len != p->ex_len)
		return -1;
	/*
	 * nft compares a byte-aligned prefix of an IPv4 address by loading
	 * only its bytes ("ip saddr 127.0.0.0/8" loads one byte).
	 */
	if (p->ex_base == NFT_PAYLOAD_NETWORK_HEADER &&
	    c->nfproto == NFPROTO_IPV4 && len < 4 &&
	    (p->ex_offset == 12 || p->ex_offset == 16)) {
		uint8_t a4[4] = { 0, 0, 0, 0 };

		memcpy(a4, data, len);
		inet_ntop(AF_INET, a4, addr, sizeof(addr));
		sb_printf(sb, "%s/%u", addr, len * 8);
		return 0;
	}
	if (p->ex_base == NFT_PAYLOAD_NETWORK_HEADER &&
	    c->nfproto == NFPROTO_IPV6 && len < 16 &&
	    (p->ex_offset == 8 || p->ex_offset == 24)) {
		uint8_t a6[16];

		memset(a6, 0, sizeof(a6));
		memcpy(a6, data, len);
		inet_ntop(AF_INET6, a6, addr, sizeof(addr));
		sb_printf(sb, "%s/%u", addr, len * 8);
		return 0;
	}
	if (p->ex_base == NFT_PAYLOAD_NETWORK_HEADER && len == 4) {
		inet_ntop(AF_INET, data, addr, sizeof(addr));
		sb_printf(sb, "%s", addr);
	} else if (p->ex_base == NFT_PAYLOAD_NETWORK_HEADER && len == 16) {
		inet_ntop(AF_INET6, data, addr, sizeof(addr));
		sb_printf(sb, "%s", addr);
	} else if (len == 2) {
		memcpy(&port, data, sizeof(port));
		sb_printf(sb, "%u", ntohs(port));
	} else if (len == 1) {
		name = NULL;
		if (p->ex_base == NFT_PAYLOAD_TRANSPORT_HEADER)
			name = c->l4proto == IPPROTO_ICMPV6 ?
			    icmpv6_type_name(data[0]) :
			    icmp_type_name(data[0]);
		if (name != NULL)
			sb_printf(sb, "%s", name);
		else
			sb_printf(sb, "%u", data[0]);
	} else
		return -1;
	return 0;
}

static int
unit_has_base(const struct unit *u, uint32_t base)
{
	size_t i;

	if (u->u_kind != U_PCMP && u->u_kind != U_LOOKUP)
		return 0;
	for (i = 0; i < u->u_nload; i++)
		if (u->u_load[i]->ex_base == base)
			return 1;
	return 0;
}

static int
unit_is_meta(const struct unit *u, uint32_t key)
{
	return u->u_kind == U_META && u->u_load[0]->ex_key == key &&
	    u->u_last->ex_op == NFT_CMP_EQ && u->u_last->ex_len == 1;
}

/*
 * Is "meta nfproto X" at units[k] the implicit dependency of what follows
 * (so that nft's listing leaves it out)? It is when the next match reads
 * the network header, or is icmp/icmpv6, whose family it implies.
 */
static int
nfproto_implied(const struct unit *u, size_t nu, size_t k)
{
	size_t j = k + 1;
	int nf = u[k].u_last->ex_data[0];
	int l4 = -1;

	if (j < nu && unit_is_meta(&u[j], NFT_META_L4PROTO)) {
		l4 = u[j].u_last->ex_data[0];
		j++;
	}
	if (j >= nu)
		return 0;
	if ((u[j].u_kind == U_PCMP || u[j].u_kind == U_LOOKUP) &&
	    u[j].u_load[0]->ex_base == NFT_PAYLOAD_NETWORK_HEADER)
		return 1;
	if (unit_has_base(&u[j], NFT_PAYLOAD_TRANSPORT_HEADER) &&
	    ((l4 == IPPROTO_ICMPV6 && nf == NFPROTO_IPV6) ||
		(l4 == IPPROTO_ICMP && nf == NFPROTO_IPV4)))
		return 1;
	return 0;
}

/*
 * The print_meta_* helpers print the meta match at u[k], "!= " in neq for
 * a negated one; 1 when nft leaves it out, -1 when nft could not print it.
 */

/* meta nfproto: left out when what follows implies it. */
static int
print_meta_nfproto(struct sb *sb, struct ctx *c, const struct unit *u,
    size_t nu, size_t k, const char *neq)
{
	const struct np_expr *cmp = u[k].u_last;
	uint32_t v;

	if (cmp->ex_len != 1)
		return -1;
	v = cmp->ex_data[0];
	if (cmp->ex_op == NFT_CMP_EQ) {
		c->nfproto = (int)v;
		if (nfproto_implied(u, nu, k))
			return 1;
	}
	if (v == NFPROTO_IPV4)
		sb_printf(sb, "meta nfproto %sipv4", neq);
	else if (v == NFPROTO_IPV6)
		sb_printf(sb, "meta nfproto %sipv6", neq);
	else
		sb_printf(sb, "meta nfproto %s%u", neq, v);
	return 0;
}

/* meta l4proto: left out when a transport match follows. */
static int
print_meta_l4proto(struct sb *sb, struct ctx *c, const struct unit *u,
    size_t nu, size_t k, const char *neq)
{
	const struct np_expr *cmp = u[k].u_last;
	const char *name;
	uint32_t v;

	if (cmp->ex_len != 1)
		return -1;
	v = cmp->ex_data[0];
	if (cmp->ex_op == NFT_CMP_EQ) {
		c->l4proto = (int)v;
		if (k + 1 < nu &&
		    unit_has_base(&u[k + 1], NFT_PAYLOAD_TRANSPORT_HEADER))
			return 1;
	}
	if ((name = l4proto_name((int)v)) != NULL)
		sb_printf(sb, "meta l4proto %s%s", neq, name);
	else
		sb_printf(sb, "meta l4proto %s%u", neq, v);
	return 0;
}

/* iifname / oifname: an exact name, or nft's "prefix*" wildcard. */
static int
print_meta_ifname(struct sb *sb, const struct np_expr *m,
    const struct np_expr *cmp, const char *neq)
{
	static const uint8_t zero[NP_DATA_MAX];
	char ifname[NP_DATA_MAX + 1];

	if (cmp->ex_len == 0 || cmp->ex_len > NP_DATA_MAX)
		return -1;
	memset(ifname, 0, sizeof(ifname));
	memcpy(ifname, cmp->ex_data, cmp->ex_len);
	/*
	 * A shorter compare is nft's "prefix*" wildcard and holds no NUL; a
	 * full one is a NUL-padded exact name.
	 */
	if (cmp->ex_len < NP_DATA_MAX) {
		if (strlen(ifname) != cmp->ex_len)
			return -1;
	} else if (strlen(ifname) == 0 || strlen(ifname) >= NP_DATA_MAX ||
	    memcmp(ifname + strlen(ifname), zero,
		NP_DATA_MAX - strlen(ifname)) != 0)
		return -1;
	sb_printf(sb, "%s %s\"%s%s\"",
	    m->ex_key == NFT_META_IIFNAME ? "iifname" : "oifname", neq, ifname,
	    cmp->ex_len < NP_DATA_MAX ? "*" : "");
	return 0;
}

/*
 * Print the meta match at u[k]; 1 when nft leaves it out of its listing,
 * -1 when nft could not print it.
 */
static int
print_meta(struct sb *sb, struct ctx *c, const struct unit *u, size_t nu,
    size_t k)
{
	const struct np_expr *m = u[k].u_load[0], *cmp = u[k].u_last;
	const char *neq = cmp->ex_op == NFT_CMP_NEQ ? "!= " : "";
	const char *name;
	uint32_t v;

	switch (m->ex_key) {
	case NFT_META_NFPROTO:
		return print_meta_nfproto(sb, c, u, nu, k, neq);
	case NFT_META_L4PROTO:
		return print_meta_l4proto(sb, c, u, nu, k, neq);
	case NFT_META_OIF:
	case NFT_META_IIF:
		if (cmp->ex_len != 4)
			return -1;
		v = data_u32(cmp);
		name = m->ex_key == NFT_META_OIF ? "oif" : "iif";
		/* The loopback device is ifindex 1 in every namespace. */
		if (v == 1)
			sb_printf(sb, "%s %s\"lo\"", name, neq);
		else
			sb_printf(sb, "%s %s%u", name, neq, v);
		return 0;
	case NFT_META_IIFNAME:
	case NFT_META_OIFNAME:
		return print_meta_ifname(sb, m, cmp, neq);
	case NFT_META_SKUID:
	case NFT_META_SKGID:
		if (cmp->ex_len != 4)
			return -1;
		sb_printf(sb, "meta %s %s%" PRIu32,
		    m->ex_key == NFT_META_SKUID ? "skuid" : "skgid", neq,
		    data_u32(cmp));
		return 0;
	case NFT_META_MARK:
		if (cmp->ex_len != 4)
			return -1;
		sb_printf(sb, "meta mark %s0x%08" PRIx32, neq, data_u32(cmp));
		return 0;
	default:
		return -1;
	}
}

static int
print_pcmp(struct sb *sb, const struct ctx *c, const struct unit *u)
{
	const struct np_expr *cmp = u->u_last;

	if (field_name(sb, c, u->u_load[0]) == -1)
		return -1;
	sb_printf(sb, " %s", cmp->ex_op == NFT_CMP_NEQ ? "!= " : "");
	return field_value(sb, c, u->u_load[0], cmp->ex_data, cmp->ex_len);
}

static int
print_lookup(struct sb *sb, const struct ctx *c, const struct unit *u)
{
	size_t i;

	for (i = 0; i < u->u_nload; i++) {
		if (i > 0)
			sb_printf(sb, " . ");
		if (field_name(sb, c, u->u_load[i]) == -1)
			return -1;
	}
	sb_printf(sb, " %s@%s",
	    (u->u_last->ex_flags & NFT_LOOKUP_F_INV) != 0 ? "!= " : "",
	    u->u_last->ex_name);
	return 0;
}

static int
print_ctstate(struct sb *sb, const struct unit *u)
{
	static const struct {
		uint32_t bit;
		const char *name;
	} bits[] = {
		{ 0x01, "invalid" },
		{ 0x02, "established" },
		{ 0x04, "related" },
		{ 0x08, "new" },
		{ 0x40, "untracked" },
	};
	uint32_t mask = data_u32(u->u_last), seen = 0;
	const char *sep = "";
	size_t i;

	sb_printf(sb, "ct state ");
	for (i = 0; i < sizeof(bits) / sizeof(bits[0]); i++) {
		if ((mask & bits[i].bit) == 0)
			continue;
		sb_printf(sb, "%s%s", sep, bits[i].name);
		seen |= bits[i].bit;
		sep = ",";
	}
	return mask == 0 || seen != mask ? -1 : 0;
}

/* ct mark / ct direction / ct original ip daddr ... compared to a value. */
static int
print_ct(struct sb *sb, const struct unit *u)
{
	const struct np_expr *ct = u->u_load[0], *cmp = u->u_last;
	const char *neq = cmp->ex_op == NFT_CMP_NEQ ? "!= " : "";
	const char *dir = "";
	char addr[INET6_ADDRSTRLEN];

	if (ct->ex_ctdir == 1 + IP_CT_DIR_ORIGINAL)
		dir = "original ";
	else if (ct->ex_ctdir == 1 + IP_CT_DIR_REPLY)
		dir = "reply ";
	else if (ct->ex_ctdir != 0)
		return -1;
	switch (ct->ex_key) {
	case NFT_CT_MARK:
		if (ct->ex_ctdir != 0 || cmp->ex_len != 4)
			return -1;
		sb_printf(sb, "ct mark %s0x%08" PRIx32, neq, data_u32(cmp));
		return 0;
	case NFT_CT_DIRECTION:
		if (ct->ex_ctdir != 0 || cmp->ex_len != 1 ||
		    cmp->ex_data[0] > IP_CT_DIR_REPLY)
			return -1;
		sb_printf(sb, "ct direction %s%s", neq,
		    cmp->ex_data[0] == IP_CT_DIR_ORIGINAL ? "original" :
							    "reply");
		return 0;
	case NFT_CT_SRC_IP:
	case NFT_CT_DST_IP:
		if (ct->ex_ctdir == 0 || cmp->ex_len != 4)
			return -1;
		inet_ntop(AF_INET, cmp->ex_data, addr, sizeof(addr));
		sb_printf(sb, "ct %sip %s %s%s", dir,
		    ct->ex_key == NFT_CT_SRC_IP ? "saddr" : "daddr", neq, addr);
		return 0;
	case NFT_CT_SRC_IP6:
	case NFT_CT_DST_IP6:
		if (ct->ex_ctdir == 0 || cmp->ex_len != 16)
			return -1;
		inet_ntop(AF_INET6, cmp->ex_data, addr, sizeof(addr));
		sb_printf(sb, "ct %sip6 %s %s%s", dir,
		    ct->ex_key == NFT_CT_SRC_IP6 ? "saddr" : "daddr", neq,
		    addr);
		return 0;
	default:
		return -1;
	}
}

static int
print_redir(struct sb *sb, const struct unit *u)
{
	uint16_t port;

	memcpy(&port, u->u_load[0]->ex_data, sizeof(port));
	sb_printf(sb, "redirect to :%u", ntohs(port));
	return 0;
}

static int
print_ctset(struct sb *sb, const struct unit *u)
{
	sb_printf(sb, "ct mark set 0x%08" PRIx32, data_u32(u->u_load[0]));
	return 0;
}

/* Only the reverse-path check sluice uses: fib saddr . iif oif. */
static int
print_fib(struct sb *sb, const struct unit *u)
{
	const struct np_expr *f = u->u_load[0], *cmp = u->u_last;
	uint32_t rp = NFTA_FIB_F_SADDR | NFTA_FIB_F_IIF;

	if (f->ex_key != NFT_FIB_RESULT_OIF ||
	    f->ex_flags != (rp | NFTA_FIB_F_PRESENT) || cmp->ex_len != 4 ||
	    cmp->ex_op != NFT_CMP_EQ || data_u32(cmp) > 1)
		return -1;
	sb_printf(sb, "fib saddr . iif oif %s",
	    data_u32(cmp) != 0 ? "exists" : "missing");
	return 0;
}

static const char *
unit_name(uint64_t seconds)
{
	switch (seconds) {
	case 1:
		return "second";
	case 60:
		return "minute";
	case 3600:
		return "hour";
	case 86400:
		return "day";
	case 604800:
		return "week";
	default:
		return NULL;
	}
}

static int
print_stmt(struct sb *sb, const struct np_expr *e)
{
	const char *uname;

	switch (e->ex_type) {
	case NP_E_COUNTER:
		sb_printf(sb, "counter packets %" PRIu64 " bytes %" PRIu64,
		    e->ex_packets, e->ex_bytes);
		return 0;
	case NP_E_LIMIT:
		if (e->ex_ltype != NFT_LIMIT_PKTS ||
		    (e->ex_flags & ~(uint32_t)NFT_LIMIT_F_INV) != 0 ||
		    (uname = unit_name(e->ex_unit)) == NULL)
			return -1;
		sb_printf(sb, "limit rate %s%" PRIu64 "/%s",
		    (e->ex_flags & NFT_LIMIT_F_INV) != 0 ? "over " : "",
		    e->ex_rate, uname);
		/* nft leaves its default burst of 5 packets out. */
		if (e->ex_burst != 5)
			sb_printf(sb, " burst %" PRIu32 " packets",
			    e->ex_burst);
		return 0;
	case NP_E_LOG:
		sb_printf(sb, "log");
		if (e->ex_name[0] != '\0')
			sb_printf(sb, " prefix \"%s\"", e->ex_name);
		sb_printf(sb, " group %" PRIu32, e->ex_group);
		return 0;
	case NP_E_VERDICT:
		switch (e->ex_verdict) {
		case NF_ACCEPT:
			sb_printf(sb, "accept");
			return 0;
		case NF_DROP:
			sb_printf(sb, "drop");
			return 0;
		case NFT_CONTINUE:
			sb_printf(sb, "continue");
			return 0;
		case NFT_RETURN:
			sb_printf(sb, "return");
			return 0;
		case NFT_JUMP:
			sb_printf(sb, "jump %s", e->ex_name);
			return 0;
		case NFT_GOTO:
			sb_printf(sb, "goto %s", e->ex_name);
			return 0;
		default:
			return -1;
		}
	default:
		return -1;
	}
}

static int
rule_decompile(struct sb *sb, const struct np_rule *ru)
{
	struct unit u[NP_MAX_UNITS];
	struct ctx c = { 0, -1 };
	const char *sep = "";
	size_t nu, k;
	int rc;

	if (units_parse(ru, u, &nu) == -1)
		return -1;
	for (k = 0; k < nu; k++) {
		/* Print into a scratch buffer: a hidden unit prints nothing. */
		struct sb one = { NULL, 0, 0, 0 };

		switch (u[k].u_kind) {
		case U_META:
			rc = print_meta(&one, &c, u, nu, k);
			break;
		case U_PCMP:
			rc = print_pcmp(&one, &c, &u[k]);
			break;
		case U_LOOKUP:
			rc = print_lookup(&one, &c, &u[k]);
			break;
		case U_CTSTATE:
			rc = print_ctstate(&one, &u[k]);
			break;
		case U_CT:
			rc = print_ct(&one, &u[k]);
			break;
		case U_CTSET:
			rc = print_ctset(&one, &u[k]);
			break;
		case U_REDIR:
			rc = print_redir(&one, &u[k]);
			break;
		case U_FIB:
			rc = print_fib(&one, &u[k]);
			break;
		default:
			rc = print_stmt(&one, u[k].u_last);
			break;
		}
		if (rc == 0 && !one.sb_err)
			sb_printf(sb, "%s%s", sep, one.sb_buf);
		free(one.sb_buf);
		if (rc == -1 || one.sb_err)
			return -1;
		if (rc == 0)
			sep = " ";
	}
	return 0;
}

static void
hex(struct sb *sb, const uint8_t *d, uint32_t len)
{
	uint32_t i;

	sb_printf(sb, "0x");
	for (i = 0; i < len && i < NP_DATA_MAX; i++)
		sb_printf(sb, "%02x", d[i]);
}

/* The fallback: every expression as a bracketed item. */
static void
rule_raw(struct sb *sb, const struct np_rule *ru)
{
	const struct np_expr *e;
	size_t i;

	if (ru->ru_raw[0] != '\0') {
		sb_printf(sb, "%s", ru->ru_raw);
		return;
	}
	for (i = 0; i < ru->ru_nexprs; i++) {
		e = &ru->ru_exprs[i];
		sb_printf(sb, "%s[ ", i > 0 ? " " : "");
		switch (e->ex_type) {
		case NP_E_META:
			sb_printf(sb, "meta load %" PRIu32 " => reg %" PRIu32,
			    e->ex_key, e->ex_dreg);
			break;
		case NP_E_CMP:
			sb_printf(sb, "cmp %" PRIu32 " reg %" PRIu32 " ",
			    e->ex_op, e->ex_sreg);
			hex(sb, e->ex_data, e->ex_len);
			break;
		case NP_E_PAYLOAD:
			sb_printf(sb,
			    "payload load %" PRIu32 "b @ %" PRIu32 " + %" PRIu32
			    " => reg %" PRIu32,
			    e->ex_len, e->ex_base, e->ex_offset, e->ex_dreg);
			break;
		case NP_E_LOOKUP:
			sb_printf(sb, "lookup reg %" PRIu32 " set %s",
			    e->ex_sreg, e->ex_name);
			break;
		case NP_E_CT:
			if (e->ex_sreg != 0)
				sb_printf(sb,
				    "ct set %" PRIu32 " with reg %" PRIu32,
				    e->ex_key, e->ex_sreg);
			else
				sb_printf(sb,
				    "ct load %" PRIu32 " => reg %" PRIu32,
				    e->ex_key, e->ex_dreg);
			if (e->ex_ctdir != 0)
				sb_printf(sb, " dir %" PRIu32, e->ex_ctdir - 1);
			break;
		case NP_E_IMMEDIATE:
			sb_printf(sb, "immediate reg %" PRIu32 " ", e->ex_dreg);
			hex(sb, e->ex_data, e->ex_len);
			break;
		case NP_E_REDIR:
			sb_printf(sb,
			    "redir proto_min reg %" PRIu32
			    " proto_max reg %" PRIu32 " flags 0x%" PRIx32,
			    e->ex_sreg, e->ex_sreg2, e->ex_flags);
			break;
		case NP_E_FIB:
			sb_printf(sb,
			    "fib flags 0x%" PRIx32 " result %" PRIu32
			    " => reg %" PRIu32,
			    e->ex_flags, e->ex_key, e->ex_dreg);
			break;
		case NP_E_BITWISE:
			sb_printf(sb, "bitwise reg %" PRIu32 " & ", e->ex_sreg);
			hex(sb, e->ex_data, e->ex_len);
			break;
		default:
			if (print_stmt(sb, e) == -1)
				sb_printf(sb, "%s",
				    e->ex_name[0] != '\0' ? e->ex_name : "?");
			break;
		}
		if (e->ex_unknown_attr)
			sb_printf(sb, " (+attributes)");
		sb_printf(sb, " ]");
	}
	if (ru->ru_overflow)
		sb_printf(sb, " ...");
}

static void
rule_render(struct sb *sb, const struct np_rule *ru)
{
	struct sb tmp = { NULL, 0, 0, 0 };

	if (rule_decompile(&tmp, ru) == 0 && !tmp.sb_err && tmp.sb_buf != NULL)
		sb_printf(sb, "%s", tmp.sb_buf);
	else
		rule_raw(sb, ru);
	free(tmp.sb_buf);
}

size_t
np_rule_text(const struct np_rule *ru, char *buf, size_t buflen)
{
	struct sb sb = { NULL, 0, 0, 0 };
	size_t len;

	rule_render(&sb, ru);
	if (sb.sb_err || sb.sb_buf == NULL) {
		free(sb.sb_buf);
		if (buflen > 0)
			buf[0] = '\0';
		return 0;
	}
	len = sb.sb_len;
	if (buflen > 0) {
		if (len >= buflen)
			len = buflen - 1;
		memcpy(buf, sb.sb_buf, len);
		buf[len] = '\0';
	}
	free(sb.sb_buf);
	return len;
}

static const char *
type_name(uint32_t t)
{
	switch (t) {
	case 7:
		return "ipv4_addr";
	case 8:
		return "ipv6_addr";
	case 12:
		return "inet_proto";
	case 13:
		return "inet_service";
	default:
		return NULL;
	}
}

/* Byte length of a datatype in a set key, or 0 when unknown. */
static uint32_t
type_len(uint32_t t)
{
	switch (t) {
	case 7:
		return 4;
	case 8:
		return 16;
	case 12:
		return 1;
	case 13:
		return 2;
	default:
		return 0;
	}
}

/* Split a packed concatenation type into its parts, first part first. */
static size_t
type_parts(uint32_t keytype, uint32_t *parts, size_t max)
{
	uint32_t tmp[8];
	size_t n = 0, i;

	while (keytype != 0 && n < sizeof(tmp) / sizeof(tmp[0])) {
		tmp[n++] = keytype & 0x3f;
		keytype >>= 6;
	}
	if (keytype != 0 || n > max)
		return 0;
	for (i = 0; i < n; i++)
		parts[i] = tmp[n - 1 - i];
	return n;
}

static void
print_duration(struct sb *sb, uint64_t ms)
{
	static const struct {
		uint64_t ms;
		const char *unit;
	} units[] = {
		{ 86400000, "d" },
		{ 3600000, "h" },
		{ 60000, "m" },
		{ 1000, "s" },
		{ 1, "ms" },
	};
	size_t i;

	for (i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (ms >= units[i].ms) {
			sb_printf(sb, "%" PRIu64 "%s", ms / units[i].ms,
			    units[i].unit);
			ms %= units[i].ms;
		}
	}
}

static void
print_elem(struct sb *sb, const struct np_set *set, const struct np_elem *el)
{
	char addr[INET6_ADDRSTRLEN];
	uint32_t parts[4], off = 0, len;
	uint16_t port;
	size_t n, i;

	n = type_parts(set->se_keytype, parts, 4);
	for (i = 0; i < n; i++) {
		len = type_len(parts[i]);
		if (len == 0 || off + len > el->el_keylen)
			break;
		if (i > 0)
			sb_printf(sb, " . ");
		if (parts[i] == 7 || parts[i] == 8) {
			inet_ntop(parts[i] == 7 ? AF_INET : AF_INET6,
			    el->el_key + off, addr, sizeof(addr));
			sb_printf(sb, "%s", addr);
		} else if (parts[i] == 13) {
			memcpy(&port, el->el_key + off, sizeof(port));
			sb_printf(sb, "%u", ntohs(port));
		} else
			sb_printf(sb, "%u", el->el_key[off]);
		off += round4(len);
	}
	if (i < n || n == 0) {
		if (n > 0)
			sb_printf(sb, " . ");
		hex(sb, el->el_key, el->el_keylen);
	}
	if (el->el_timeout_ms != 0) {
		sb_printf(sb, " timeout ");
		print_duration(sb, el->el_timeout_ms);
	}
}

size_t
np_elem_text(const struct np_set *set, const struct np_elem *el, char *buf,
    size_t buflen)
{
	struct sb sb = { NULL, 0, 0, 0 };
	size_t len = 0;

	print_elem(&sb, set, el);
	if (buflen > 0)
		buf[0] = '\0';
	if (!sb.sb_err && sb.sb_buf != NULL && buflen > 0) {
		len = sb.sb_len < buflen ? sb.sb_len : buflen - 1;
		memcpy(buf, sb.sb_buf, len);
		buf[len] = '\0';
	}
	free(sb.sb_buf);
	return len;
}

static void
set_render(struct sb *sb, const struct np_set *set)
{
	uint32_t parts[4];
	const char *name;
	size_t n, i;

	sb_printf(sb, "\tset %s {\n\t\ttype ", set->se_name);
	n = type_parts(set->se_keytype, parts, 4);
	for (i = 0; i < n; i++) {
		name = type_name(parts[i]);
		if (name != NULL)
			sb_printf(sb, "%s%s", i > 0 ? " . " : "", name);
		else
			sb_printf(sb, "%stype %" PRIu32, i > 0 ? " . " : "",
			    parts[i]);
	}
	if (n == 0)
		sb_printf(sb, "%" PRIu32, set->se_keytype);
	sb_printf(sb, "\n");
	if (set->se_flags == NFT_SET_TIMEOUT)
		sb_printf(sb, "\t\tflags timeout\n");
	else if (set->se_flags != 0)
		sb_printf(sb, "\t\tflags 0x%" PRIx32 "\n", set->se_flags);
	if (set->se_nelems > 0) {
		sb_printf(sb, "\t\telements = { ");
		/*
		 * nft puts each element of a concatenated set on its own
		 * line, continued under the opening brace.
		 */
		for (i = 0; i < set->se_nelems; i++) {
			if (i > 0)
				sb_printf(sb, ",\n\t\t\t     ");
			print_elem(sb, set, &set->se_elems[i]);
		}
		sb_printf(sb, " }\n");
	}
	sb_printf(sb, "\t}\n");
}

static const char *
hook_name(uint32_t hook)
{
	switch (hook) {
	case NF_INET_PRE_ROUTING:
		return "prerouting";
	case NF_INET_LOCAL_IN:
		return "input";
	case NF_INET_FORWARD:
		return "forward";
	case NF_INET_LOCAL_OUT:
		return "output";
	case NF_INET_POST_ROUTING:
		return "postrouting";
	default:
		return "?";
	}
}

static void
chain_render(struct sb *sb, const struct np_chain *ch)
{
	size_t i;

	sb_printf(sb, "\tchain %s {\n", ch->ch_name);
	if (ch->ch_base) {
		sb_printf(sb, "\t\ttype %s hook %s priority ", ch->ch_type,
		    hook_name(ch->ch_hook));
		if (ch->ch_prio == 0)
			sb_printf(sb, "filter");
		else
			sb_printf(sb, "%" PRId32, ch->ch_prio);
		sb_printf(sb, "; policy %s;\n",
		    ch->ch_policy == NF_ACCEPT ? "accept" : "drop");
	}
	for (i = 0; i < ch->ch_nrules; i++) {
		sb_printf(sb, "\t\t");
		rule_render(sb, &ch->ch_rules[i]);
		sb_printf(sb, "\n");
	}
	sb_printf(sb, "\t}\n");
}

char *
np_ruleset_text(const struct np_ruleset *rs)
{
	struct sb sb = { NULL, 0, 0, 0 };
	const char *sep = "";
	size_t i;

	sb_printf(&sb, "table inet %s {\n", rs->rs_table);
	if (rs->rs_flags & NFT_TABLE_F_DORMANT) {
		sb_printf(&sb, "\tflags dormant\n");
		sep = "\n";
	}
	for (i = 0; i < rs->rs_nsets; i++) {
		sb_printf(&sb, "%s", sep);
		set_render(&sb, &rs->rs_sets[i]);
		sep = "\n";
	}
	for (i = 0; i < rs->rs_nchains; i++) {
		sb_printf(&sb, "%s", sep);
		chain_render(&sb, &rs->rs_chains[i]);
		sep = "\n";
	}
	sb_printf(&sb, "}\n");
	if (sb.sb_err) {
		free(sb.sb_buf);
		return NULL;
	}
	return sb.sb_buf;
}
