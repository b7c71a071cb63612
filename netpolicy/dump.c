/*
 * Kernel -> model: reads one inet table back over netlink (the table,
 * then NLM_F_DUMP of its chains, sets, set elements and rules) into a
 * struct np_ruleset, for verify. The read is made consistent by the
 * ruleset generation: it is taken before and after, and an interrupted
 * dump (NLM_F_DUMP_INTR, reported by libmnl as EINTR) or a generation
 * that moved means a concurrent change, so the whole read is retried.
 *
 * Every expression attribute that the model does not represent is flagged
 * (ex_unknown_attr, ch_unknown_attr...), so that something we never emit
 * can never compare equal to something we want.
 */
#include <sys/types.h>
#include <sys/socket.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>

#include <libmnl/libmnl.h>
#include <libnftnl/chain.h>
#include <libnftnl/common.h>
#include <libnftnl/expr.h>
#include <libnftnl/gen.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <libnftnl/table.h>

#include "netpolicy/netpolicy.h"
#include "netpolicy/np_private.h"

#define NP_DUMP_TRIES     5
#define NP_DUMP_BUF       ((size_t)64 * 1024)
#define NP_DUMP_WAIT_MS   5000
#define NP_DUMP_MAX_RULES 4096    /* more is not ours: fail, re-apply */
#define NP_DUMP_MAX_ELEMS 1000000 /* static elements kept per set */

struct dumper {
	struct mnl_socket *d_nl;
	uint32_t d_portid;
	uint32_t d_seq;
	char *d_buf;
	struct np_ruleset *d_rs;
	size_t d_nrules;
	int d_err; /* ENOMEM or a limit, set from inside a callback */
	char d_why[128];
};

/*
 * Send one request and run cb over the replies until the dump's DONE or
 * the request's ACK. Returns 0, or -1 with errno (EINTR: the dump was
 * interrupted by a change; ENOENT: no such object; ETIMEDOUT).
 */
static int
talk(struct dumper *d, struct nlmsghdr *nlh, mnl_cb_t cb, void *data)
{
	uint32_t seq = nlh->nlmsg_seq; /* nlh is in d_buf, reused below */
	ssize_t n;
	int rc;

	if (mnl_socket_sendto(d->d_nl, nlh, nlh->nlmsg_len) < 0)
		return -1;
	for (;;) {
		n = np_nl_recv_wait(d->d_nl, d->d_buf, NP_DUMP_BUF,
		    NP_DUMP_WAIT_MS);
		if (n == -1)
			return -1;
		rc =
		    mnl_cb_run(d->d_buf, (size_t)n, seq, d->d_portid, cb, data);
		if (rc == -1)
			return -1;
		if (d->d_err != 0) {
			errno = d->d_err;
			return -1;
		}
		if (rc == MNL_CB_STOP)
			return 0;
	}
}

static struct nlmsghdr *
req(struct dumper *d, uint16_t type, uint16_t family, uint16_t flags)
{
	return nftnl_nlmsg_build_hdr(d->d_buf, type, family, flags, ++d->d_seq);
}

static int
gen_cb(const struct nlmsghdr *nlh, void *data)
{
	struct nftnl_gen *g;
	uint32_t *id = data;

	if ((g = nftnl_gen_alloc()) == NULL)
		return MNL_CB_ERROR;
	if (nftnl_gen_nlmsg_parse(nlh, g) == 0)
		*id = nftnl_gen_get_u32(g, NFTNL_GEN_ID);
	nftnl_gen_free(g);
	return MNL_CB_OK;
}

static int
get_gen(struct dumper *d, uint32_t *id)
{
	struct nlmsghdr *nlh;

	nlh = req(d, NFT_MSG_GETGEN, AF_UNSPEC, NLM_F_ACK);
	return talk(d, nlh, gen_cb, id);
}

static int
table_cb(const struct nlmsghdr *nlh, void *data)
{
	struct dumper *d = data;
	struct nftnl_table *t;

	if ((t = nftnl_table_alloc()) == NULL)
		return MNL_CB_ERROR;
	if (nftnl_table_nlmsg_parse(nlh, t) == 0 &&
	    nftnl_table_is_set(t, NFTNL_TABLE_FLAGS))
		d->d_rs->rs_flags = nftnl_table_get_u32(t, NFTNL_TABLE_FLAGS);
	nftnl_table_free(t);
	return MNL_CB_OK;
}

/* Is this object of our table? Dumps may hold other tables' objects. */
static int
ours(struct dumper *d, uint32_t family, const char *table)
{
	return family == NFPROTO_INET && table != NULL &&
	    strcmp(table, d->d_rs->rs_table) == 0;
}

static void
copy_name(char *dst, const char *src, int *unknown)
{
	if (src == NULL || strlen(src) >= NP_NAME_MAX) {
		/* A name we could not hold cannot be one of ours. */
		snprintf(dst, NP_NAME_MAX, "%s", "?");
		*unknown = 1;
		return;
	}
	snprintf(dst, NP_NAME_MAX, "%s", src);
}

static int
chain_cb(const struct nlmsghdr *nlh, void *data)
{
	struct dumper *d = data;
	struct nftnl_chain *c;
	struct np_chain *ch;
	const char *type;
	int unknown = 0;
	uint32_t flags;

	if ((c = nftnl_chain_alloc()) == NULL)
		return MNL_CB_ERROR;
	if (nftnl_chain_nlmsg_parse(nlh, c) < 0 ||
	    !ours(d, nftnl_chain_get_u32(c, NFTNL_CHAIN_FAMILY),
		nftnl_chain_get_str(c, NFTNL_CHAIN_TABLE))) {
		nftnl_chain_free(c);
		return MNL_CB_OK;
	}
	if ((ch = np_ruleset_add_chain(d->d_rs, "?")) == NULL) {
		nftnl_chain_free(c);
		d->d_err = ENOMEM;
		return MNL_CB_ERROR;
	}
	copy_name(ch->ch_name, nftnl_chain_get_str(c, NFTNL_CHAIN_NAME),
	    &unknown);
	if (nftnl_chain_is_set(c, NFTNL_CHAIN_HOOKNUM)) {
		ch->ch_base = 1;
		ch->ch_hook = nftnl_chain_get_u32(c, NFTNL_CHAIN_HOOKNUM);
		ch->ch_prio = nftnl_chain_get_s32(c, NFTNL_CHAIN_PRIO);
		ch->ch_policy = nftnl_chain_get_u32(c, NFTNL_CHAIN_POLICY);
		type = nftnl_chain_get_str(c, NFTNL_CHAIN_TYPE);
		snprintf(ch->ch_type, sizeof(ch->ch_type), "%s",
		    type != NULL ? type : "?");
	}
	if (nftnl_chain_is_set(c, NFTNL_CHAIN_DEV) ||
	    nftnl_chain_is_set(c, NFTNL_CHAIN_DEVICES))
		unknown = 1;
	if (nftnl_chain_is_set(c, NFTNL_CHAIN_FLAGS)) {
		flags = nftnl_chain_get_u32(c, NFTNL_CHAIN_FLAGS);
		if ((flags & ~(uint32_t)NFT_CHAIN_BASE) != 0)
			unknown = 1;
	}
	ch->ch_unknown_attr = unknown;
	nftnl_chain_free(c);
	return MNL_CB_OK;
}

static int
set_cb(const struct nlmsghdr *nlh, void *data)
{
	struct dumper *d = data;
	struct nftnl_set *s;
	struct np_set *set;
	int unknown = 0;

	if ((s = nftnl_set_alloc()) == NULL)
		return MNL_CB_ERROR;
	if (nftnl_set_nlmsg_parse(nlh, s) < 0 ||
	    !ours(d, nftnl_set_get_u32(s, NFTNL_SET_FAMILY),
		nftnl_set_get_str(s, NFTNL_SET_TABLE))) {
		nftnl_set_free(s);
		return MNL_CB_OK;
	}
	if ((set = np_ruleset_add_set(d->d_rs, "?")) == NULL) {
		nftnl_set_free(s);
		d->d_err = ENOMEM;
		return MNL_CB_ERROR;
	}
	copy_name(set->se_name, nftnl_set_get_str(s, NFTNL_SET_NAME), &unknown);
	set->se_flags = nftnl_set_get_u32(s, NFTNL_SET_FLAGS);
	set->se_keytype = nftnl_set_get_u32(s, NFTNL_SET_KEY_TYPE);
	set->se_keylen = nftnl_set_get_u32(s, NFTNL_SET_KEY_LEN);
	/* A map, an object map or per-element expressions are not ours. */
	if (nftnl_set_is_set(s, NFTNL_SET_DATA_TYPE) ||
	    nftnl_set_is_set(s, NFTNL_SET_OBJ_TYPE) ||
	    nftnl_set_is_set(s, NFTNL_SET_EXPR) ||
	    nftnl_set_is_set(s, NFTNL_SET_EXPRESSIONS))
		unknown = 1;
	set->se_unknown_attr = unknown;
	nftnl_set_free(s);
	return MNL_CB_OK;
}

static int
elem_one(struct nftnl_set_elem *e, void *data)
{
	struct np_set *set = data;
	struct np_elem el;
	const void *key;
	uint32_t len = 0;

	memset(&el, 0, sizeof(el));
	key = nftnl_set_elem_get(e, NFTNL_SET_ELEM_KEY, &len);
	if (nftnl_set_elem_is_set(e, NFTNL_SET_ELEM_TIMEOUT))
		el.el_timeout_ms =
		    nftnl_set_elem_get_u64(e, NFTNL_SET_ELEM_TIMEOUT);
	/* Dynamic elements are counted, not kept: verify ignores them. */
	if (el.el_timeout_ms != 0) {
		set->se_ndynamic++;
		return 0;
	}
	if (key == NULL || len > NP_KEY_MAX ||
	    set->se_nelems >= NP_DUMP_MAX_ELEMS) {
		set->se_unknown_attr = 1;
		return 0;
	}
	memcpy(el.el_key, key, len);
	el.el_keylen = len;
	return np_set_add_elem(set, &el);
}

static int
elem_cb(const struct nlmsghdr *nlh, void *data)
{
	struct np_set *set = data;
	struct nftnl_set *s;
	int rc;

	if ((s = nftnl_set_alloc()) == NULL)
		return MNL_CB_ERROR;
	if (nftnl_set_elems_nlmsg_parse(nlh, s) < 0) {
		nftnl_set_free(s);
		return MNL_CB_OK;
	}
	rc = nftnl_set_elem_foreach(s, elem_one, set);
	nftnl_set_free(s);
	return rc < 0 ? MNL_CB_ERROR : MNL_CB_OK;
}

static int
get_elems(struct dumper *d, struct np_set *set)
{
	struct nftnl_set *s;
	struct nlmsghdr *nlh;
	int rc;

	if ((s = nftnl_set_alloc()) == NULL)
		return -1;
	nftnl_set_set_u32(s, NFTNL_SET_FAMILY, NFPROTO_INET);
	if (nftnl_set_set_str(s, NFTNL_SET_TABLE, d->d_rs->rs_table) < 0 ||
	    nftnl_set_set_str(s, NFTNL_SET_NAME, set->se_name) < 0) {
		nftnl_set_free(s);
		return -1;
	}
	nlh = req(d, NFT_MSG_GETSETELEM, NFPROTO_INET, NLM_F_DUMP);
	nftnl_set_elems_nlmsg_build_payload(nlh, s);
	nftnl_set_free(s);
	rc = talk(d, nlh, elem_cb, set);
	return rc;
}

static int
has(const struct nftnl_expr *e, uint16_t attr)
{
	return nftnl_expr_is_set(e, attr);
}

static void
expr_data(const struct nftnl_expr *e, uint16_t attr, uint8_t *dst,
    uint32_t *dlen, int *unknown)
{
	const void *p;
	uint32_t len = 0;

	p = nftnl_expr_get(e, attr, &len);
	if (p == NULL || len > NP_DATA_MAX) {
		*unknown = 1;
		return;
	}
	memcpy(dst, p, len);
	if (dlen != NULL)
		*dlen = len;
}

/*
 * The expr_* helpers below each read one kind of kernel expression into x,
 * which expr_parse zeroed, and return 1 when its shape is not one sluice
 * builds (x->ex_unknown_attr).
 */

/* ct: a load (dreg) or a set (sreg), never both or neither. */
static int
expr_ct(const struct nftnl_expr *e, struct np_expr *x)
{
	x->ex_type = NP_E_CT;
	x->ex_key = nftnl_expr_get_u32(e, NFTNL_EXPR_CT_KEY);
	if (has(e, NFTNL_EXPR_CT_DREG))
		x->ex_dreg = nftnl_expr_get_u32(e, NFTNL_EXPR_CT_DREG);
	if (has(e, NFTNL_EXPR_CT_SREG))
		x->ex_sreg = nftnl_expr_get_u32(e, NFTNL_EXPR_CT_SREG);
	if (has(e, NFTNL_EXPR_CT_DIR))
		x->ex_ctdir = 1u + nftnl_expr_get_u8(e, NFTNL_EXPR_CT_DIR);
	return has(e, NFTNL_EXPR_CT_DREG) == has(e, NFTNL_EXPR_CT_SREG) ||
	    (x->ex_sreg != 0 && x->ex_ctdir != 0);
}

/* log: only NFLOG group logging without copy options is ours. */
static int
expr_log(const struct nftnl_expr *e, struct np_expr *x)
{
	const char *s;
	int u = 0;

	x->ex_type = NP_E_LOG;
	x->ex_group = nftnl_expr_get_u16(e, NFTNL_EXPR_LOG_GROUP);
	if (has(e, NFTNL_EXPR_LOG_FLAGS))
		x->ex_flags = nftnl_expr_get_u32(e, NFTNL_EXPR_LOG_FLAGS);
	if ((s = nftnl_expr_get_str(e, NFTNL_EXPR_LOG_PREFIX)) != NULL)
		copy_name(x->ex_name, s, &u);
	u |= !has(e, NFTNL_EXPR_LOG_GROUP) || has(e, NFTNL_EXPR_LOG_LEVEL) ||
	    nftnl_expr_get_u32(e, NFTNL_EXPR_LOG_SNAPLEN) != 0 ||
	    nftnl_expr_get_u16(e, NFTNL_EXPR_LOG_QTHRESHOLD) != 0;
	return u;
}

/*
 * immediate: a value loaded into a register (for ct mark set), or else a
 * verdict.
 */
static int
expr_immediate(const struct nftnl_expr *e, struct np_expr *x)
{
	const char *s;
	int u = 0;

	if (nftnl_expr_get_u32(e, NFTNL_EXPR_IMM_DREG) != NFT_REG_VERDICT &&
	    has(e, NFTNL_EXPR_IMM_DATA)) {
		x->ex_type = NP_E_IMMEDIATE;
		x->ex_dreg = nftnl_expr_get_u32(e, NFTNL_EXPR_IMM_DREG);
		expr_data(e, NFTNL_EXPR_IMM_DATA, x->ex_data, &x->ex_len, &u);
		u |= has(e, NFTNL_EXPR_IMM_VERDICT) ||
		    has(e, NFTNL_EXPR_IMM_CHAIN);
		return u;
	}
	x->ex_type = NP_E_VERDICT;
	x->ex_verdict = (int32_t)nftnl_expr_get_u32(e, NFTNL_EXPR_IMM_VERDICT);
	if ((s = nftnl_expr_get_str(e, NFTNL_EXPR_IMM_CHAIN)) != NULL)
		copy_name(x->ex_name, s, &u);
	/* Loading data into a register is not a verdict. */
	u |= nftnl_expr_get_u32(e, NFTNL_EXPR_IMM_DREG) != NFT_REG_VERDICT ||
	    has(e, NFTNL_EXPR_IMM_DATA) || !has(e, NFTNL_EXPR_IMM_VERDICT);
	return u;
}

/* One kernel expression into the model; unknown shapes are flagged. */
static void
expr_parse(const struct nftnl_expr *e, struct np_expr *x)
{
	const char *name = nftnl_expr_get_str(e, NFTNL_EXPR_NAME);
	int u = 0;

	memset(x, 0, sizeof(*x));
	if (name == NULL)
		name = "?";
	if (strcmp(name, "meta") == 0) {
		x->ex_type = NP_E_META;
		x->ex_key = nftnl_expr_get_u32(e, NFTNL_EXPR_META_KEY);
		x->ex_dreg = nftnl_expr_get_u32(e, NFTNL_EXPR_META_DREG);
		u = !has(e, NFTNL_EXPR_META_DREG) ||
		    has(e, NFTNL_EXPR_META_SREG);
	} else if (strcmp(name, "cmp") == 0) {
		x->ex_type = NP_E_CMP;
		x->ex_sreg = nftnl_expr_get_u32(e, NFTNL_EXPR_CMP_SREG);
		x->ex_op = nftnl_expr_get_u32(e, NFTNL_EXPR_CMP_OP);
		expr_data(e, NFTNL_EXPR_CMP_DATA, x->ex_data, &x->ex_len, &u);
	} else if (strcmp(name, "payload") == 0) {
		x->ex_type = NP_E_PAYLOAD;
		x->ex_dreg = nftnl_expr_get_u32(e, NFTNL_EXPR_PAYLOAD_DREG);
		x->ex_base = nftnl_expr_get_u32(e, NFTNL_EXPR_PAYLOAD_BASE);
		x->ex_offset = nftnl_expr_get_u32(e, NFTNL_EXPR_PAYLOAD_OFFSET);
		x->ex_len = nftnl_expr_get_u32(e, NFTNL_EXPR_PAYLOAD_LEN);
		/* A payload write (mangling) is not a load. */
		u = !has(e, NFTNL_EXPR_PAYLOAD_DREG) ||
		    has(e, NFTNL_EXPR_PAYLOAD_SREG);
	} else if (strcmp(name, "lookup") == 0) {
		x->ex_type = NP_E_LOOKUP;
		x->ex_sreg = nftnl_expr_get_u32(e, NFTNL_EXPR_LOOKUP_SREG);
		x->ex_flags = nftnl_expr_get_u32(e, NFTNL_EXPR_LOOKUP_FLAGS);
		copy_name(x->ex_name,
		    nftnl_expr_get_str(e, NFTNL_EXPR_LOOKUP_SET), &u);
		/* A map lookup writes a register: not ours. */
		if (has(e, NFTNL_EXPR_LOOKUP_DREG))
			u = 1;
	} else if (strcmp(name, "ct") == 0) {
		u = expr_ct(e, x);
	} else if (strcmp(name, "fib") == 0) {
		x->ex_type = NP_E_FIB;
		x->ex_key = nftnl_expr_get_u32(e, NFTNL_EXPR_FIB_RESULT);
		x->ex_flags = nftnl_expr_get_u32(e, NFTNL_EXPR_FIB_FLAGS);
		x->ex_dreg = nftnl_expr_get_u32(e, NFTNL_EXPR_FIB_DREG);
		u = !has(e, NFTNL_EXPR_FIB_DREG);
	} else if (strcmp(name, "redir") == 0) {
		x->ex_type = NP_E_REDIR;
		x->ex_sreg =
		    nftnl_expr_get_u32(e, NFTNL_EXPR_REDIR_REG_PROTO_MIN);
		x->ex_sreg2 =
		    nftnl_expr_get_u32(e, NFTNL_EXPR_REDIR_REG_PROTO_MAX);
		x->ex_flags = nftnl_expr_get_u32(e, NFTNL_EXPR_REDIR_FLAGS);
		u = !has(e, NFTNL_EXPR_REDIR_REG_PROTO_MIN);
	} else if (strcmp(name, "bitwise") == 0) {
		x->ex_type = NP_E_BITWISE;
		x->ex_sreg = nftnl_expr_get_u32(e, NFTNL_EXPR_BITWISE_SREG);
		x->ex_dreg = nftnl_expr_get_u32(e, NFTNL_EXPR_BITWISE_DREG);
		x->ex_len = nftnl_expr_get_u32(e, NFTNL_EXPR_BITWISE_LEN);
		x->ex_op = nftnl_expr_get_u32(e, NFTNL_EXPR_BITWISE_OP);
		expr_data(e, NFTNL_EXPR_BITWISE_MASK, x->ex_data, NULL, &u);
		expr_data(e, NFTNL_EXPR_BITWISE_XOR, x->ex_xor, NULL, &u);
		if (has(e, NFTNL_EXPR_BITWISE_DATA) || x->ex_len > NP_DATA_MAX)
			u = 1;
	} else if (strcmp(name, "counter") == 0) {
		x->ex_type = NP_E_COUNTER;
		x->ex_packets = nftnl_expr_get_u64(e, NFTNL_EXPR_CTR_PACKETS);
		x->ex_bytes = nftnl_expr_get_u64(e, NFTNL_EXPR_CTR_BYTES);
	} else if (strcmp(name, "limit") == 0) {
		x->ex_type = NP_E_LIMIT;
		x->ex_rate = nftnl_expr_get_u64(e, NFTNL_EXPR_LIMIT_RATE);
		x->ex_unit = nftnl_expr_get_u64(e, NFTNL_EXPR_LIMIT_UNIT);
		x->ex_burst = nftnl_expr_get_u32(e, NFTNL_EXPR_LIMIT_BURST);
		x->ex_ltype = nftnl_expr_get_u32(e, NFTNL_EXPR_LIMIT_TYPE);
		x->ex_flags = nftnl_expr_get_u32(e, NFTNL_EXPR_LIMIT_FLAGS);
	} else if (strcmp(name, "log") == 0) {
		u = expr_log(e, x);
	} else if (strcmp(name, "immediate") == 0) {
		u = expr_immediate(e, x);
	} else {
		x->ex_type = NP_E_OTHER;
		snprintf(x->ex_name, sizeof(x->ex_name), "%s", name);
	}
	x->ex_unknown_attr = u;
}

static int
expr_one(struct nftnl_expr *e, void *data)
{
	struct np_rule *ru = data;

	if (ru->ru_nexprs == NP_RULE_MAX_EXPR) {
		ru->ru_overflow = 1;
		return 0;
	}
	expr_parse(e, &ru->ru_exprs[ru->ru_nexprs++]);
	return 0;
}

/* libnftnl's text of the rule on one line, for reports of odd rules. */
static void
rule_raw(struct nftnl_rule *r, struct np_rule *ru)
{
	char *p, *q;

	nftnl_rule_snprintf(ru->ru_raw, sizeof(ru->ru_raw), r,
	    NFTNL_OUTPUT_DEFAULT, 0);
	/* Drop the "inet table chain handle" header line. */
	if ((p = strchr(ru->ru_raw, '\n')) != NULL)
		memmove(ru->ru_raw, p + 1, strlen(p + 1) + 1);
	for (p = q = ru->ru_raw; *p != '\0'; p++) {
		if (*p == '\n' || *p == '\t')
			*p = ' ';
		if (*p == ' ' && (q == ru->ru_raw || q[-1] == ' '))
			continue;
		*q++ = *p;
	}
	while (q > ru->ru_raw && q[-1] == ' ')
		q--;
	*q = '\0';
}

static int
rule_cb(const struct nlmsghdr *nlh, void *data)
{
	struct dumper *d = data;
	struct nftnl_rule *r;
	struct np_chain *ch;
	struct np_rule *ru;
	const char *chain;

	if ((r = nftnl_rule_alloc()) == NULL)
		return MNL_CB_ERROR;
	if (nftnl_rule_nlmsg_parse(nlh, r) < 0 ||
	    !ours(d, nftnl_rule_get_u32(r, NFTNL_RULE_FAMILY),
		nftnl_rule_get_str(r, NFTNL_RULE_TABLE))) {
		nftnl_rule_free(r);
		return MNL_CB_OK;
	}
	chain = nftnl_rule_get_str(r, NFTNL_RULE_CHAIN);
	ch = chain != NULL ? np_ruleset_chain(d->d_rs, chain) : NULL;
	if (ch == NULL) {
		/* A chain appeared after the chain dump: read again. */
		nftnl_rule_free(r);
		d->d_err = EINTR;
		return MNL_CB_ERROR;
	}
	if (++d->d_nrules > NP_DUMP_MAX_RULES) {
		nftnl_rule_free(r);
		d->d_err = E2BIG;
		return MNL_CB_ERROR;
	}
	if ((ru = np_chain_add_rule(ch)) == NULL) {
		nftnl_rule_free(r);
		d->d_err = ENOMEM;
		return MNL_CB_ERROR;
	}
	ru->ru_handle = nftnl_rule_get_u64(r, NFTNL_RULE_HANDLE);
	nftnl_expr_foreach(r, expr_one, ru);
	rule_raw(r, ru);
	nftnl_rule_free(r);
	return MNL_CB_OK;
}

/* Objects of one type, filtered by our table (the kernel may not). */
static int
dump_objs(struct dumper *d, uint16_t type, mnl_cb_t cb)
{
	struct nlmsghdr *nlh;
	struct nftnl_table *t;

	nlh = req(d, type, NFPROTO_INET, NLM_F_DUMP);
	/* NFTA_*_TABLE is attribute 1 for chains, sets and rules alike. */
	if ((t = nftnl_table_alloc()) == NULL)
		return -1;
	if (nftnl_table_set_str(t, NFTNL_TABLE_NAME, d->d_rs->rs_table) < 0) {
		nftnl_table_free(t);
		return -1;
	}
	nftnl_table_nlmsg_build_payload(nlh, t);
	nftnl_table_free(t);
	return talk(d, nlh, cb, d);
}

/* One consistent read attempt; -1 with errno. */
static int
dump_once(struct dumper *d)
{
	struct nftnl_table *t;
	struct nlmsghdr *nlh;
	uint32_t gen1 = 0, gen2 = 0;
	size_t i;

	if (get_gen(d, &gen1) == -1)
		return -1;
	if ((t = nftnl_table_alloc()) == NULL)
		return -1;
	nftnl_table_set_u32(t, NFTNL_TABLE_FAMILY, NFPROTO_INET);
	if (nftnl_table_set_str(t, NFTNL_TABLE_NAME, d->d_rs->rs_table) < 0) {
		nftnl_table_free(t);
		return -1;
	}
	nlh = req(d, NFT_MSG_GETTABLE, NFPROTO_INET, NLM_F_ACK);
	nftnl_table_nlmsg_build_payload(nlh, t);
	nftnl_table_free(t);
	if (talk(d, nlh, table_cb, d) == -1) {
		if (errno != ENOENT)
			return -1;
		d->d_rs->rs_exists = 0;
	} else {
		if (dump_objs(d, NFT_MSG_GETCHAIN, chain_cb) == -1 ||
		    dump_objs(d, NFT_MSG_GETSET, set_cb) == -1)
			return -1;
		for (i = 0; i < d->d_rs->rs_nsets; i++)
			if (get_elems(d, &d->d_rs->rs_sets[i]) == -1)
				return -1;
		if (dump_objs(d, NFT_MSG_GETRULE, rule_cb) == -1)
			return -1;
	}
	if (get_gen(d, &gen2) == -1)
		return -1;
	if (gen1 != gen2) {
		errno = EINTR;
		return -1;
	}
	return 0;
}

/* The rules only: chains first, so that rule_cb finds them. */
static int
dump_rules(struct dumper *d)
{
	if (dump_objs(d, NFT_MSG_GETCHAIN, chain_cb) == -1)
		return -1;
	return dump_objs(d, NFT_MSG_GETRULE, rule_cb);
}

/*
 * Run once() on a fresh socket and an empty ruleset of table until it
 * returns anything but -1 with EINTR (the generation moved meanwhile), at
 * most NP_DUMP_TRIES times. Returns once()'s last result, *saved its
 * errno; d->d_rs is what was read, NULL when no attempt could start (why
 * says why then).
 */
static int
dump_retry(struct dumper *d, const char *table, int (*once)(struct dumper *),
    int *saved, char *why, size_t whylen)
{
	int try, rc = -1;

	memset(d, 0, sizeof(*d));
	*saved = 0;
	if ((d->d_buf = malloc(NP_DUMP_BUF)) == NULL) {
		np_why(why, whylen, "netpolicy: out of memory");
		return -1;
	}
	for (try = 0; try < NP_DUMP_TRIES; try++) {
		/*
		 * A fresh socket per attempt: an interrupted dump leaves
		 * replies queued on the old one.
		 */
		d->d_nl = np_nl_open(&d->d_portid, why, whylen);
		if (d->d_nl == NULL)
			break;
		d->d_seq = (uint32_t)time(NULL);
		d->d_err = 0;
		d->d_nrules = 0;
		np_ruleset_free(d->d_rs);
		if ((d->d_rs = np_ruleset_new(table)) == NULL) {
			np_why(why, whylen, "netpolicy: bad table name");
			mnl_socket_close(d->d_nl);
			break;
		}
		rc = once(d);
		*saved = errno;
		mnl_socket_close(d->d_nl);
		d->d_nl = NULL;
		if (rc == 0 || *saved != EINTR)
			break;
	}
	free(d->d_buf);
	d->d_buf = NULL;
	return rc;
}

struct np_ruleset *
np_dump(const char *table, char *why, size_t whylen)
{
	struct dumper d;
	int rc, saved;

	rc = dump_retry(&d, table, dump_once, &saved, why, whylen);
	if (rc == 0)
		return d.d_rs;
	if (d.d_rs != NULL)
		np_why(why, whylen, "reading table inet %s: %s", table,
		    saved == E2BIG ? "more rules than sluice ever makes" :
				     strerror(saved));
	np_ruleset_free(d.d_rs);
	return NULL;
}

int
np_drop_counters(const char *table, uint64_t *packets, uint64_t *bytes,
    char *why, size_t whylen)
{
	struct dumper d;
	int rc, saved;

	*packets = 0;
	*bytes = 0;
	rc = dump_retry(&d, table, dump_rules, &saved, why, whylen);
	if (rc == -1 && saved == ENOENT)
		rc = 0; /* no table: no drops */
	else if (rc == 0)
		np_ruleset_drop_counters(d.d_rs, packets, bytes);
	else if (d.d_rs != NULL)
		np_why(why, whylen, "reading the rules of table inet %s: %s",
		    table, strerror(saved));
	np_ruleset_free(d.d_rs);
	return rc;
}
