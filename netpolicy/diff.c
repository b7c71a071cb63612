/*
 * The comparison behind `sluice netpolicy verify` and the daemon's periodic
 * re-verify: the kernel's table (from np_dump) against the desired model.
 * Pure. It reports what an operator needs to act on, one line per
 * difference, naming the chain, set or rule; it ignores only what changes
 * on its own (counters, handles, the DNS-derived set elements that carry a
 * timeout).
 */
#include <sys/types.h>

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>

#include "netpolicy/netpolicy.h"
#include "netpolicy/np_private.h"

/* Rule lists longer than this are compared position by position. */
#define NP_LCS_MAX_CELLS ((size_t)256 * 256)

struct diff {
	np_diff_cb d_cb;
	void *d_arg;
	size_t d_n;
};

static void diff_report(struct diff *d, const char *fmt, ...)
    __attribute__((__format__(__printf__, 2, 3)));

static void
diff_report(struct diff *d, const char *fmt, ...)
{
	char line[1024];
	va_list ap;

	d->d_n++;
	if (d->d_cb == NULL)
		return;
	va_start(ap, fmt);
	(void)vsnprintf(line, sizeof(line), fmt, ap); /* truncation is fine */
	va_end(ap);
	d->d_cb(d->d_arg, line);
}

int
np_expr_equal(const struct np_expr *a, const struct np_expr *b)
{
	if (a->ex_type != b->ex_type || a->ex_unknown_attr ||
	    b->ex_unknown_attr)
		return 0;
	switch (a->ex_type) {
	case NP_E_META:
		return a->ex_key == b->ex_key && a->ex_dreg == b->ex_dreg;
	case NP_E_CT:
		return a->ex_key == b->ex_key && a->ex_dreg == b->ex_dreg &&
		    a->ex_sreg == b->ex_sreg && a->ex_ctdir == b->ex_ctdir;
	case NP_E_IMMEDIATE:
		return a->ex_dreg == b->ex_dreg && a->ex_len == b->ex_len &&
		    memcmp(a->ex_data, b->ex_data, a->ex_len) == 0;
	case NP_E_FIB:
		return a->ex_key == b->ex_key && a->ex_dreg == b->ex_dreg &&
		    a->ex_flags == b->ex_flags;
	case NP_E_REDIR:
		return a->ex_sreg == b->ex_sreg && a->ex_sreg2 == b->ex_sreg2 &&
		    a->ex_flags == b->ex_flags;
	case NP_E_CMP:
		return a->ex_sreg == b->ex_sreg && a->ex_op == b->ex_op &&
		    a->ex_len == b->ex_len &&
		    memcmp(a->ex_data, b->ex_data, a->ex_len) == 0;
	case NP_E_PAYLOAD:
		return a->ex_dreg == b->ex_dreg && a->ex_base == b->ex_base &&
		    a->ex_offset == b->ex_offset && a->ex_len == b->ex_len;
	case NP_E_LOOKUP:
		return a->ex_sreg == b->ex_sreg && a->ex_flags == b->ex_flags &&
		    strcmp(a->ex_name, b->ex_name) == 0;
	case NP_E_BITWISE:
		return a->ex_sreg == b->ex_sreg && a->ex_dreg == b->ex_dreg &&
		    a->ex_op == b->ex_op && a->ex_len == b->ex_len &&
		    memcmp(a->ex_data, b->ex_data, a->ex_len) == 0 &&
		    memcmp(a->ex_xor, b->ex_xor, a->ex_len) == 0;
	case NP_E_COUNTER:
		/* Values move with traffic; only the presence counts. */
		return 1;
	case NP_E_LIMIT:
		return a->ex_rate == b->ex_rate && a->ex_unit == b->ex_unit &&
		    a->ex_burst == b->ex_burst && a->ex_ltype == b->ex_ltype &&
		    a->ex_flags == b->ex_flags;
	case NP_E_LOG:
		return a->ex_group == b->ex_group &&
		    a->ex_flags == b->ex_flags &&
		    strcmp(a->ex_name, b->ex_name) == 0;
	case NP_E_VERDICT:
		return a->ex_verdict == b->ex_verdict &&
		    strcmp(a->ex_name, b->ex_name) == 0;
	default:
		/* Something we never emit cannot equal what we want. */
		return 0;
	}
}

static int
rule_equal(const struct np_rule *a, const struct np_rule *b)
{
	size_t i;

	if (a->ru_overflow || b->ru_overflow || a->ru_nexprs != b->ru_nexprs)
		return 0;
	for (i = 0; i < a->ru_nexprs; i++)
		if (!np_expr_equal(&a->ru_exprs[i], &b->ru_exprs[i]))
			return 0;
	return 1;
}

static void
report_rule(struct diff *d, const char *chain, const char *what,
    const struct np_rule *ru)
{
	char text[768];

	np_rule_text(ru, text, sizeof(text));
	if (ru->ru_handle != 0)
		diff_report(d, "chain %s: %s (handle %" PRIu64 "): %s", chain,
		    what, ru->ru_handle, text);
	else
		diff_report(d, "chain %s: %s: %s", chain, what, text);
}

/*
 * Rules in order: a longest common subsequence, so that one rule inserted
 * by hand is reported as that one rule and not as every rule after it.
 */
static void
diff_rules(struct diff *d, const struct np_chain *want,
    const struct np_chain *have)
{
	size_t n = want->ch_nrules, m = have->ch_nrules, i, j;
	uint16_t *t;

	if (n * m > NP_LCS_MAX_CELLS || n > UINT16_MAX || m > UINT16_MAX ||
	    (t = calloc((n + 1) * (m + 1), sizeof(*t))) == NULL) {
		for (i = 0; i < n || i < m; i++) {
			if (i < n && i < m &&
			    rule_equal(&want->ch_rules[i], &have->ch_rules[i]))
				continue;
			if (i < m)
				report_rule(d, want->ch_name, "unexpected rule",
				    &have->ch_rules[i]);
			if (i < n)
				report_rule(d, want->ch_name, "missing rule",
				    &want->ch_rules[i]);
		}
		return;
	}
#define T(a, b) t[(a) * (m + 1) + (b)]
	for (i = n; i-- > 0;)
		for (j = m; j-- > 0;) {
			if (rule_equal(&want->ch_rules[i], &have->ch_rules[j]))
				T(i, j) = (uint16_t)(T(i + 1, j + 1) + 1);
			else
				T(i, j) = T(i + 1, j) > T(i, j + 1) ?
				    T(i + 1, j) :
				    T(i, j + 1);
		}
	i = j = 0;
	while (i < n || j < m) {
		if (i < n && j < m &&
		    rule_equal(&want->ch_rules[i], &have->ch_rules[j])) {
			i++;
			j++;
		} else if (j < m && (i == n || T(i, j + 1) >= T(i + 1, j))) {
			report_rule(d, want->ch_name, "unexpected rule",
			    &have->ch_rules[j]);
			j++;
		} else {
			report_rule(d, want->ch_name, "missing rule",
			    &want->ch_rules[i]);
			i++;
		}
	}
#undef T
	free(t);
}

static const char *
verdict_name(uint32_t policy)
{
	return policy == NF_ACCEPT ? "accept" :
	    policy == NF_DROP      ? "drop" :
				     "?";
}

static void
diff_chain(struct diff *d, const struct np_chain *want,
    const struct np_chain *have)
{
	if (have->ch_unknown_attr)
		diff_report(d, "chain %s: has attributes sluice never sets",
		    want->ch_name);
	if (want->ch_base != have->ch_base) {
		diff_report(d, "chain %s: %s, want a %s", want->ch_name,
		    have->ch_base ? "base chain" : "regular chain",
		    want->ch_base ? "base chain" : "regular chain");
	} else if (want->ch_base) {
		if (want->ch_hook != have->ch_hook)
			diff_report(d,
			    "chain %s: hook %" PRIu32 ", want %" PRIu32,
			    want->ch_name, have->ch_hook, want->ch_hook);
		if (want->ch_prio != have->ch_prio)
			diff_report(d,
			    "chain %s: priority %" PRId32 ", want %" PRId32,
			    want->ch_name, have->ch_prio, want->ch_prio);
		if (want->ch_policy != have->ch_policy)
			diff_report(d, "chain %s: policy %s, want %s",
			    want->ch_name, verdict_name(have->ch_policy),
			    verdict_name(want->ch_policy));
		if (strcmp(want->ch_type, have->ch_type) != 0)
			diff_report(d, "chain %s: type %s, want %s",
			    want->ch_name, have->ch_type, want->ch_type);
	}
	diff_rules(d, want, have);
}

static int
elem_equal(const struct np_elem *a, const struct np_elem *b)
{
	return a->el_keylen == b->el_keylen &&
	    memcmp(a->el_key, b->el_key, a->el_keylen) == 0;
}

static void
diff_set(struct diff *d, const struct np_set *want, const struct np_set *have)
{
	char text[128];
	size_t i, j;
	int found;

	if (have->se_unknown_attr)
		diff_report(d, "set %s: has attributes sluice never sets",
		    want->se_name);
	if (want->se_keytype != have->se_keytype ||
	    want->se_keylen != have->se_keylen)
		diff_report(d,
		    "set %s: key type %" PRIu32 "/%" PRIu32
		    " bytes, want %" PRIu32 "/%" PRIu32,
		    want->se_name, have->se_keytype, have->se_keylen,
		    want->se_keytype, want->se_keylen);
	if (want->se_flags != have->se_flags)
		diff_report(d, "set %s: flags 0x%" PRIx32 ", want 0x%" PRIx32,
		    want->se_name, have->se_flags, want->se_flags);
	/*
	 * Static elements only: the kernel's elements with a timeout are
	 * the ones sluice added from its own DNS answers at run time.
	 */
	for (i = 0; i < want->se_nelems; i++) {
		for (found = 0, j = 0; j < have->se_nelems && !found; j++)
			found = have->se_elems[j].el_timeout_ms == 0 &&
			    elem_equal(&want->se_elems[i], &have->se_elems[j]);
		if (!found) {
			np_elem_text(want, &want->se_elems[i], text,
			    sizeof(text));
			diff_report(d, "set %s: missing element %s",
			    want->se_name, text);
		}
	}
	for (j = 0; j < have->se_nelems; j++) {
		if (have->se_elems[j].el_timeout_ms != 0)
			continue;
		for (found = 0, i = 0; i < want->se_nelems && !found; i++)
			found =
			    elem_equal(&want->se_elems[i], &have->se_elems[j]);
		if (!found) {
			np_elem_text(have, &have->se_elems[j], text,
			    sizeof(text));
			diff_report(d, "set %s: unexpected element %s",
			    want->se_name, text);
		}
	}
}

size_t
np_ruleset_diff(const struct np_ruleset *want, const struct np_ruleset *have,
    np_diff_cb cb, void *arg)
{
	struct diff d = { cb, arg, 0 };
	const struct np_chain *ch;
	const struct np_set *set;
	size_t i;

	if (!have->rs_exists) {
		diff_report(&d, "table inet %s: missing", want->rs_table);
		return d.d_n;
	}
	if (want->rs_flags != have->rs_flags)
		diff_report(&d,
		    "table inet %s: flags 0x%" PRIx32 "%s, want 0x%" PRIx32,
		    want->rs_table, have->rs_flags,
		    (have->rs_flags & NFT_TABLE_F_DORMANT) ? " (dormant)" : "",
		    want->rs_flags);
	for (i = 0; i < want->rs_nsets; i++) {
		set = np_ruleset_set(have, want->rs_sets[i].se_name);
		if (set == NULL)
			diff_report(&d, "set %s: missing",
			    want->rs_sets[i].se_name);
		else
			diff_set(&d, &want->rs_sets[i], set);
	}
	for (i = 0; i < have->rs_nsets; i++)
		if (np_ruleset_set(want, have->rs_sets[i].se_name) == NULL)
			diff_report(&d, "set %s: unexpected",
			    have->rs_sets[i].se_name);
	for (i = 0; i < want->rs_nchains; i++) {
		ch = np_ruleset_chain(have, want->rs_chains[i].ch_name);
		if (ch == NULL)
			diff_report(&d, "chain %s: missing",
			    want->rs_chains[i].ch_name);
		else
			diff_chain(&d, &want->rs_chains[i], ch);
	}
	for (i = 0; i < have->rs_nchains; i++)
		if (np_ruleset_chain(want, have->rs_chains[i].ch_name) == NULL)
			diff_report(&d, "chain %s: unexpected (%zu rules)",
			    have->rs_chains[i].ch_name,
			    have->rs_chains[i].ch_nrules);
	return d.d_n;
}
