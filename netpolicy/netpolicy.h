/*
 * netpolicy: nftables rulesets for sluice, built as a pure model and applied
 * over netlink with libnftnl + libmnl in one atomic batch. This library
 * never includes proxy/ headers, never logs and never exits: errors are
 * reported in a caller-supplied "why" buffer (STYLE.md §4).
 *
 * The model (struct np_ruleset) is one data type with three producers and
 * three consumers: np_ruleset_build() makes the desired ruleset from the
 * policy facts, np_dump() reads the kernel's table into the same type,
 * np_ruleset_text() renders either to nft syntax, np_apply() sends one to
 * the kernel and np_ruleset_diff() compares two. Rules are kept at the level
 * of nftables expressions (what the kernel stores), so that verify compares
 * exactly what runs, and the renderer turns the expressions back into the
 * text nft itself prints.
 */
#ifndef SLUICE_NETPOLICY_H
#define SLUICE_NETPOLICY_H

#include <sys/types.h>
#include <sys/socket.h>

#include <stddef.h>
#include <stdint.h>

#define NP_NAME_MAX      64  /* table, chain and set names, with NUL */
#define NP_DATA_MAX      16  /* the widest register value we compare */
#define NP_KEY_MAX       32  /* ifname . ipv6_addr */
#define NP_RULE_MAX_EXPR 24  /* longer rules are kept as "unknown" */
#define NP_RAW_MAX       512 /* libnftnl's text of a dumped rule */

#define NP_SET_UPSTREAM4   "upstream4"
#define NP_SET_UPSTREAM6   "upstream6"
#define NP_CHAIN_REDIRECT  "transparent" /* sidecar: nat output chain */
#define NP_DYN_TIMEOUT_MIN 60 /* seconds: floor for DNS-derived timeouts */
/* Gateway: the registered sandboxes' (interface, source address) pairs. */
#define NP_SET_SANDBOX4 "sandbox4"
#define NP_SET_SANDBOX6 "sandbox6"
#define NP_IFNAME_LEN   16 /* IFNAMSIZ: an ifname in a set key */
/*
 * Sidecar: the conntrack mark sluice's accepted upstream (and DNS over TCP)
 * connections get on their first packet, so that the packets the kernel
 * sends for them after sluice closed the socket (no owner uid any more) are
 * still let out.
 */
#define NP_CT_MARK 0x736c7563 /* "sluc" */

enum np_mode {
	NP_MODE_SIDECAR =
	    1,          /* sluice shares the sandbox's netns: output hook */
	NP_MODE_GATEWAY /* sandboxes behind veths: input/forward hooks */
};

/* One route's upstream, as the ruleset needs it. */
struct np_upstream {
	const char *nu_host; /* IP literal (IPv6 without brackets) or name */
	uint16_t nu_port;
	int nu_host_is_ip; /* literal: a static set element */
};

/*
 * netpolicy.inbound (sidecar): the replies of connections opened from
 * outside to a port of the pod, from a source prefix (byte-aligned;
 * 0: any address of the family). Never a new outbound flow.
 */
struct np_inbound {
	int nb_family; /* AF_INET or AF_INET6 */
	uint8_t nb_addr[16];
	unsigned nb_prefix; /* bits, a multiple of 8 */
	uint16_t nb_port;   /* TCP */
};

/*
 * Gateway: one address a registered sandbox may send from, on its
 * interface (the gateway-side name of its veth).
 */
struct np_sandbox {
	const char *ns_iface; /* exact name, < NP_IFNAME_LEN bytes */
	int ns_family;        /* AF_INET or AF_INET6 */
	uint8_t ns_addr[16];
};

/*
 * The facts a ruleset is built from: a narrow copy of the daemon's policy
 * (proxy/netguard.c and proxy/cmd_netpolicy.c fill it from struct config),
 * so that this library needs no proxy/ header. Every pointer is borrowed
 * for the duration of np_ruleset_build() only.
 */
struct np_input {
	enum np_mode ni_mode;
	const char *ni_table;
	int ni_allow_loopback;
	uid_t ni_uid;                    /* sidecar: the only uid let out */
	const char *const *ni_resolvers; /* IP literals */
	size_t ni_nresolvers;
	uint16_t ni_log_group;
	const char *const *ni_ifaces; /* gateway: iifname patterns */
	size_t ni_nifaces;
	const struct np_upstream *ni_upstreams;
	size_t ni_nupstreams;
	const struct sockaddr_storage *ni_listeners; /* gateway */
	size_t ni_nlisteners;
	const struct np_inbound *ni_inbound; /* sidecar */
	size_t ni_ninbound;
	/*
	 * Sidecar, a transparent listener: the sandbox's new TCP flows to
	 * these ports (the intercepted routes' connect.ports) are redirected
	 * to ni_redirect_to on loopback, for the families ni_redirect_v4 /
	 * ni_redirect_v6 have a listener for. ni_redirect_to 0: none.
	 */
	const uint16_t *ni_redirect_ports;
	size_t ni_nredirect_ports;
	uint16_t ni_redirect_to;
	int ni_redirect_v4, ni_redirect_v6;
	const struct np_sandbox *ni_sandboxes; /* gateway */
	size_t ni_nsandboxes;
};

/* The nftables expressions the model knows; anything else is NP_E_OTHER. */
enum np_expr_type {
	NP_E_META = 1, /* meta load: ex_key => ex_dreg */
	NP_E_CMP,      /* cmp ex_op ex_sreg, ex_data */
	NP_E_PAYLOAD,  /* payload load ex_len @ ex_base + ex_offset */
	NP_E_LOOKUP,   /* lookup ex_sreg in set ex_name */
	NP_E_CT, /* ct load ex_key [dir] => ex_dreg, or ct set from ex_sreg */
	NP_E_BITWISE,   /* ex_dreg = (ex_sreg & ex_data) ^ ex_xor */
	NP_E_COUNTER,   /* counter (values never compared) */
	NP_E_LIMIT,     /* limit ex_rate/ex_unit burst ex_burst */
	NP_E_LOG,       /* log group ex_group [prefix ex_name] */
	NP_E_VERDICT,   /* immediate verdict ex_verdict [chain ex_name] */
	NP_E_IMMEDIATE, /* immediate ex_data (ex_len bytes) => ex_dreg */
	NP_E_FIB,   /* fib ex_flags (NFTA_FIB_F_*) ex_key result => ex_dreg */
	NP_E_REDIR, /* redir proto_min ex_sreg proto_max ex_sreg2 ex_flags */
	NP_E_OTHER  /* read from the kernel, not modelled: ex_name */
};

/*
 * One expression. Only the fields of its type are meaningful; the others
 * stay zero, so two expressions compare field by field (np_expr_equal).
 */
struct np_expr {
	enum np_expr_type ex_type;
	uint32_t ex_key;   /* meta / ct key, fib result */
	uint32_t ex_ctdir; /* ct: 0 no direction, else 1 + IP_CT_DIR_* */
	uint32_t ex_dreg;  /* destination register */
	uint32_t ex_sreg;  /* source register */
	uint32_t ex_sreg2; /* redir: the proto_max register */
	uint32_t ex_op;    /* cmp operator */
	uint32_t ex_base;  /* payload base */
	uint32_t ex_offset;
	uint32_t ex_len; /* payload / bitwise length, cmp data length */
	uint8_t ex_data[NP_DATA_MAX]; /* cmp data, bitwise mask */
	uint8_t ex_xor[NP_DATA_MAX];  /* bitwise xor */
	uint64_t ex_rate;             /* limit */
	uint64_t ex_unit;             /* limit: seconds per period */
	uint32_t ex_burst;            /* limit */
	uint32_t ex_flags;            /* limit / lookup / log / fib flags */
	uint32_t ex_ltype;            /* limit type (packets, bytes) */
	uint32_t ex_group;            /* log group */
	int32_t ex_verdict;           /* NF_ACCEPT, NF_DROP, NFT_JUMP... */
	uint64_t ex_packets;          /* counter, never compared */
	uint64_t ex_bytes;            /* counter, never compared */
	int ex_unknown_attr; /* the kernel set an attribute we don't model */
	char ex_name[NP_NAME_MAX]; /* set, chain, log prefix, other's name */
};

struct np_rule {
	struct np_expr ru_exprs[NP_RULE_MAX_EXPR];
	size_t ru_nexprs;
	int ru_overflow;         /* dumped rule longer than NP_RULE_MAX_EXPR */
	uint64_t ru_handle;      /* dumped rules only */
	char ru_raw[NP_RAW_MAX]; /* dumped rules only: libnftnl's text */
};

/* A set element: the key bytes as the kernel stores them. */
struct np_elem {
	uint8_t el_key[NP_KEY_MAX];
	uint32_t el_keylen;
	uint64_t el_timeout_ms; /* 0: static, never expires */
};

struct np_set {
	char se_name[NP_NAME_MAX];
	uint32_t se_flags;   /* NFT_SET_* */
	uint32_t se_keytype; /* nft datatype id, concatenations packed */
	uint32_t se_keylen;
	int se_unknown_attr; /* dumped: a data map, an expression... */
	struct np_elem *se_elems;
	size_t se_nelems;
	size_t se_cap;
	size_t se_ndynamic; /* np_dump: elements with a timeout, not kept */
};

struct np_chain {
	char ch_name[NP_NAME_MAX];
	int ch_base;      /* base chain: ch_hook, ch_prio, ch_policy used */
	uint32_t ch_hook; /* NF_INET_* */
	int32_t ch_prio;
	uint32_t ch_policy;  /* NF_ACCEPT or NF_DROP */
	char ch_type[16];    /* "filter" */
	int ch_unknown_attr; /* dumped: a device, offload flags... */
	struct np_rule *ch_rules;
	size_t ch_nrules;
	size_t ch_cap;
};

/*
 * One inet table. Owned by whoever built (np_ruleset_build) or read
 * (np_dump) it, and freed with np_ruleset_free(), which frees the set,
 * chain, rule and element arrays: rules and elements are values inside
 * those arrays, so a pointer to one lives only until its array grows.
 */
struct np_ruleset {
	char rs_table[NP_NAME_MAX];
	uint32_t rs_family; /* NFPROTO_INET */
	uint32_t rs_flags;  /* table flags: dormant must never be set */
	int rs_exists;      /* np_dump: 0 when the table is absent */
	struct np_set *rs_sets;
	size_t rs_nsets;
	struct np_chain *rs_chains;
	size_t rs_nchains;
};

/* ruleset.c */

/*
 * Build the desired ruleset from the policy facts (DESIGN.md "Kernel
 * rules"). Returns a ruleset the caller frees with np_ruleset_free(), or
 * NULL with why set to the field at fault ("netpolicy.resolvers[1]: ...").
 */
struct np_ruleset *
np_ruleset_build(const struct np_input *in, char *why, size_t whylen);
/*
 * Non-zero when ip (an IP literal) is a loopback address (127.0.0.0/8,
 * ::1), by the same test the sidecar rules use for resolvers.
 */
int np_ip_is_loopback(const char *ip);
/* Free a ruleset and everything it owns; NULL is a no-op. */
void np_ruleset_free(struct np_ruleset *rs);
/* An empty ruleset for table (used by np_dump); NULL on ENOMEM. */
struct np_ruleset *np_ruleset_new(const char *table);
/* Append an empty chain / set / rule; the result stays owned by the parent. */
struct np_chain *np_ruleset_add_chain(struct np_ruleset *rs, const char *name);
struct np_set *np_ruleset_add_set(struct np_ruleset *rs, const char *name);
struct np_rule *np_chain_add_rule(struct np_chain *ch);
/* Append a copy of e to set; 0, or -1 on ENOMEM. */
int np_set_add_elem(struct np_set *set, const struct np_elem *e);
/* Look a chain or set up by name; NULL when absent. */
struct np_chain *
np_ruleset_chain(const struct np_ruleset *rs, const char *name);
struct np_set *np_ruleset_set(const struct np_ruleset *rs, const char *name);
/* Number of rules over all chains (the netpolicy.apply "rules" field). */
size_t np_ruleset_nrules(const struct np_ruleset *rs);
/*
 * Add up the counters of the ruleset's drop rules: rules holding a counter
 * followed by a drop verdict (np_dump fills the values).
 */
void np_ruleset_drop_counters(const struct np_ruleset *rs, uint64_t *packets,
    uint64_t *bytes);
/* Non-zero when the rule holds a counter followed by a drop verdict. */
int np_rule_is_drop(const struct np_rule *ru);

/*
 * Make the key of an upstream set element from an address and a port:
 * "ipv4_addr . inet_service" or "ipv6_addr . inet_service" as the kernel
 * stores it. timeout_s 0 makes a static element. Returns 0, or -1 when sa
 * is neither AF_INET nor AF_INET6.
 */
int np_elem_addr_port(struct np_elem *e, const struct sockaddr *sa,
    uint16_t port, uint32_t timeout_s);

/*
 * Make the key of a sandbox set element (NP_SET_SANDBOX4/6): "ifname .
 * ipv4_addr" or "ifname . ipv6_addr" as the kernel stores it, static.
 * Returns 0, or -1 for a name that does not fit or another family.
 */
int np_elem_sandbox(struct np_elem *e, const struct np_sandbox *sb);

/* render.c */

/*
 * Render the ruleset in the syntax `nft list table` prints (tabs, blank
 * lines between sets and chains, counters as "packets 0 bytes 0"), which
 * `nft -f` also reads back. Returns a malloc'd NUL-terminated string the
 * caller frees, or NULL on ENOMEM.
 */
char *np_ruleset_text(const struct np_ruleset *rs);
/*
 * Render one rule's expressions in nft syntax into buf. When the rule holds
 * something this renderer does not know, the text falls back to
 * libnftnl-style "[ expr ... ]" items (or ru_raw of a dumped rule).
 * Returns the length of the text (truncated to buflen - 1).
 */
size_t np_rule_text(const struct np_rule *ru, char *buf, size_t buflen);

/* diff.c */

/* Called once per difference with one line of text (no newline). */
typedef void (*np_diff_cb)(void *arg, const char *line);

/*
 * Compare the kernel's ruleset (have, from np_dump) with the desired one
 * (want). Counter values, rule handles and set elements with a timeout
 * (the dynamic, DNS-derived ones) are ignored; everything else must be
 * equal: table flags, each chain's hook, priority, policy and rules in
 * order, each set's key and flags and its static elements. Calls cb (may
 * be NULL) once per difference and returns the number of differences.
 */
size_t np_ruleset_diff(const struct np_ruleset *want,
    const struct np_ruleset *have, np_diff_cb cb, void *arg);
/* Non-zero when the two expressions are equal for verify's purposes. */
int np_expr_equal(const struct np_expr *a, const struct np_expr *b);

/* nl.c */

/*
 * Replace the table with rs in one netlink batch: begin, add table (so that
 * the delete cannot fail), delete table, add table, chains, sets, elements,
 * rules, end. Every message asks for an ACK; every ACK is checked (seq
 * range and portid) within a bounded wait. Returns 0 when the kernel
 * acknowledged every message without error; -1 otherwise, with why naming
 * the first refused message, the errno and the kernel's extended-ACK text.
 * On -1 the kernel has rolled the whole batch back: the previous table, if
 * any, is untouched (unless an ACK went missing, in which case the outcome
 * is unknown and the caller must verify).
 */
int np_apply(const struct np_ruleset *rs, char *why, size_t whylen);
/*
 * Keep the netlink socket of a successful transaction for the next one
 * (on), or close the kept one (off). For a process that talks netlink
 * repeatedly: closing a socket after a batch is slow in the kernel.
 */
void np_nl_keep(int on);
/*
 * Delete the table in one batch (add-then-delete, so an absent table is
 * not an error). Returns 0 or -1 with why set.
 */
int np_flush(const char *table, char *why, size_t whylen);
/*
 * Add elements to an existing set of the table (family inet), or replace
 * them: each element is added, deleted and added again in one batch, so
 * that an element already present gets the new timeout (re-adding alone
 * keeps the old expiry) and there is no instant without it. Returns 0 or
 * -1 with why set.
 */
int np_set_add(const char *table, const char *set, const struct np_elem *elems,
    size_t nelems, char *why, size_t whylen);
/*
 * Remove elements from a set of the table (family inet), present or not
 * (each is added, then deleted, in one batch). Returns 0 or -1 with why.
 */
int np_set_del(const char *table, const char *set, const struct np_elem *elems,
    size_t nelems, char *why, size_t whylen);

/* One element to add to or delete from a set of the table. */
struct np_set_change {
	const char *sc_set;
	struct np_elem sc_elem;
	int sc_del; /* delete it (absent already is not an error) */
};
/*
 * Apply changes in one batch: every delete first (each added, then
 * deleted, so that one already absent cannot fail the batch), then every
 * add. Returns 0 or -1 with why set (the kernel rolled it all back).
 */
int np_set_update(const char *table, const struct np_set_change *changes,
    size_t n, char *why, size_t whylen);

/* dump.c */

/*
 * Read table (family inet) back from the kernel into a new ruleset: table
 * flags, chains, sets with their elements, rules with their expressions.
 * A dump interrupted by a concurrent change (NLM_F_DUMP_INTR, or a ruleset
 * generation that moved during the read) is retried a few times. Returns
 * the ruleset (rs_exists 0 when the table is absent), or NULL with why set.
 */
struct np_ruleset *np_dump(const char *table, char *why, size_t whylen);
/*
 * Read only the rules of table and add up the counters of its drop rules
 * (a counter followed by a drop verdict): cheaper than np_dump, for the
 * metrics. Returns 0, or -1 with why set (an absent table counts 0).
 */
int np_drop_counters(const char *table, uint64_t *packets, uint64_t *bytes,
    char *why, size_t whylen);

/* nflog.c */

/* One dropped packet, as NFLOG reported it. */
struct np_drop {
	int nd_family;    /* AF_INET or AF_INET6 */
	uint8_t nd_proto; /* IPPROTO_* of the transport header */
	char nd_src[46];  /* INET6_ADDRSTRLEN */
	char nd_dst[46];
	int nd_has_ports; /* TCP, UDP: nd_sport and nd_dport are set */
	uint16_t nd_sport;
	uint16_t nd_dport;
	int nd_has_uid; /* the packet had a local socket */
	uint32_t nd_uid;
};

typedef void (*np_drop_cb)(void *arg, const struct np_drop *drop);
/*
 * The name of a transport protocol ("tcp", "udp", "icmp", "icmpv6"), or its
 * number written into buf.
 */
const char *np_proto_name(uint8_t proto, char *buf, size_t len);

struct np_nflog;

/*
 * Subscribe to NFLOG group in the current network namespace: bind the
 * group and copy the first 128 bytes of each packet (the kernel adds the
 * sending socket's uid by itself). The socket is non-blocking. Returns a
 * handle, or NULL with why set (the kernel says EPERM when another socket
 * already holds the group).
 */
struct np_nflog *np_nflog_open(uint16_t group, char *why, size_t whylen);
/* The socket to watch for readability (for the event loop). */
int np_nflog_fd(const struct np_nflog *nf);
/*
 * Read every message queued on the socket and call cb once per packet.
 * Returns the number of packets reported, or -1 with why set on a socket
 * error. Packets lost to a full socket buffer (ENOBUFS) are counted in
 * *lost (may be NULL) and are not an error.
 */
int np_nflog_read(struct np_nflog *nf, np_drop_cb cb, void *arg, uint64_t *lost,
    char *why, size_t whylen);
/*
 * Parse one datagram as read from the NFLOG socket (len bytes of netlink
 * messages) and call cb once per well-formed packet message. Pure: what
 * np_nflog_read() does with each datagram. Returns the number of packets
 * reported.
 */
int np_nflog_parse(const void *buf, size_t len, np_drop_cb cb, void *arg);
/* Unbind and close; NULL is a no-op. */
void np_nflog_close(struct np_nflog *nf);
/* Close a copy of the socket (in a forked process) without unbinding the
 * group, which the process it was copied from still reads. NULL: no-op. */
void np_nflog_forget(struct np_nflog *nf);
/*
 * Parse a packet starting at its IP header into d (family, protocol,
 * addresses, ports). Pure. Returns 0, or -1 when the bytes are not a
 * well-formed IPv4/IPv6 header.
 */
int np_drop_parse_packet(const uint8_t *pkt, size_t len, struct np_drop *d);

/* netns.c */

/*
 * Move the calling thread into the named network namespace
 * (/run/netns/NAME, as `ip netns` makes them). NAME must be a plain file
 * name. Returns 0, or -1 with why set.
 */
int np_netns_enter(const char *name, char *why, size_t whylen);

#endif
