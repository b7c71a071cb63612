/*
 * Model -> kernel: turns a struct np_ruleset into libnftnl objects and sends
 * them in ONE nfnetlink batch, so that the table is replaced in a single
 * step or not at all (DESIGN.md "Kernel rules", STYLE.md §8). Every message
 * asks for an ACK and every ACK is accounted for: the batch succeeds only
 * when each message was acknowledged with 0, by our portid, for a seq we
 * sent. Also the two small batches the daemon needs at run time: flushing
 * the table and adding DNS-derived elements to an upstream set.
 *
 * Reading the table back lives in dump.c; the model in ruleset.c.
 */
#include <sys/types.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <netinet/in.h>

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>

#include <libmnl/libmnl.h>
#include <libnftnl/batch.h>
#include <libnftnl/chain.h>
#include <libnftnl/common.h>
#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <libnftnl/table.h>

#include "netpolicy/netpolicy.h"
#include "netpolicy/np_private.h"

/*
 * Batch pages: a message never straddles a page, so the overrun area must
 * hold the largest message (a chunk of set elements, NP_ELEMS_PER_MSG of
 * them, well under 16 KiB).
 */
#define NP_BATCH_PAGE    (256 * 1024)
#define NP_BATCH_OVERRUN (64 * 1024)
#define NP_ELEMS_PER_MSG 256
#define NP_RECV_BUF      ((size_t)64 * 1024)
/*
 * The kernel handles a batch inside our sendmsg(), so every ACK is queued
 * before sendmsg returns; the wait only bounds a kernel that misbehaves.
 */
#define NP_ACK_TIMEOUT_MS 5000

/* One message of a batch and what the kernel said about it. */
struct np_msg {
	uint32_t m_seq;
	char m_what[96]; /* "add rule to chain output", for the report */
	int m_required;  /* 0: batch begin/end, acked by kernels >= 6.10 */
	int m_acked;
	int m_err;         /* errno from the ACK, 0 for success */
	char m_ext[160];   /* the extended ACK's message, if any */
	int64_t m_ext_off; /* offset of the refused attribute, or -1 */
};

struct np_txn {
	struct mnl_socket *t_nl;
	uint32_t t_portid;
	uint32_t t_seq; /* per-socket counter */
	struct nftnl_batch *t_batch;
	struct np_msg *t_msgs;
	size_t t_nmsgs;
	size_t t_cap;
	uint32_t t_first; /* the batch's seq range */
	uint32_t t_last;
	int t_unexpected; /* an ACK for a seq we never sent, or twice */
	char t_unexpected_why[96];
};

struct mnl_socket *
np_nl_open(uint32_t *portid, char *why, size_t whylen)
{
	struct mnl_socket *nl;
	int one = 1;

	if ((nl = mnl_socket_open(NETLINK_NETFILTER)) == NULL) {
		np_why(why, whylen, "netlink socket: %s", strerror(errno));
		return NULL;
	}
	if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) == -1) {
		np_why(why, whylen, "netlink bind: %s", strerror(errno));
		mnl_socket_close(nl);
		return NULL;
	}
	/*
	 * Extended ACKs carry the kernel's own words about what it refused;
	 * capped ACKs leave out the echo of our message, which keeps a large
	 * batch's errors from overflowing the receive buffer.
	 */
	if (mnl_socket_setsockopt(nl, NETLINK_EXT_ACK, &one, sizeof(one)) ==
		-1 ||
	    mnl_socket_setsockopt(nl, NETLINK_CAP_ACK, &one, sizeof(one)) ==
		-1) {
		np_why(why, whylen, "netlink ext ack: %s", strerror(errno));
		mnl_socket_close(nl);
		return NULL;
	}
	*portid = mnl_socket_get_portid(nl);
	return nl;
}

ssize_t
np_nl_recv(int fd, void *buf, size_t len, int flags)
{
	struct sockaddr_nl snl;
	struct msghdr msg;
	struct iovec iov;
	ssize_t n;

	memset(&snl, 0, sizeof(snl));
	memset(&msg, 0, sizeof(msg));
	iov.iov_base = buf;
	iov.iov_len = len;
	msg.msg_name = &snl;
	msg.msg_namelen = sizeof(snl);
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	if ((n = recvmsg(fd, &msg, flags)) == -1)
		return -1;
	if (msg.msg_flags & MSG_TRUNC) {
		errno = ENOSPC;
		return -1;
	}
	/*
	 * Any process may unicast to our portid; only the kernel's word
	 * (portid 0) counts, or a spoofed ACK could vouch for a batch.
	 */
	if (msg.msg_namelen != sizeof(snl) || snl.nl_pid != 0)
		return 0;
	return n;
}

ssize_t
np_nl_recv_wait(struct mnl_socket *nl, void *buf, size_t len, int timeout_ms)
{
	struct pollfd pfd;
	ssize_t n;
	int rc;

	pfd.fd = mnl_socket_get_fd(nl);
	pfd.events = POLLIN;
	for (;;) {
		rc = poll(&pfd, 1, timeout_ms);
		if (rc == -1 && errno == EINTR)
			continue;
		if (rc == -1)
			return -1;
		if (rc == 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		n = np_nl_recv(pfd.fd, buf, len, 0);
		if ((n == -1 && errno == EINTR) || n == 0)
			continue;
		return n;
	}
}

/* Grow a socket buffer; the FORCE variant needs CAP_NET_ADMIN, as apply does.
 */
static void
np_sockbuf(struct mnl_socket *nl, int force, int plain, size_t want)
{
	int fd = mnl_socket_get_fd(nl), v;

	v = want > (size_t)(1 << 30) ? 1 << 30 : (int)want;
	if (setsockopt(fd, SOL_SOCKET, force, &v, sizeof(v)) == -1)
		(void)setsockopt(fd, SOL_SOCKET, plain, &v, sizeof(v));
}

/*
 * With np_nl_keep(1) the socket of a transaction that went through is kept
 * for the next one. Closing a netfilter netlink socket after a batch can
 * take the kernel over 10 ms (measured: close(2) of the apply socket was
 * most of sluice's start-up), and the daemon talks netlink again soon.
 * Sequence numbers run on across kept sockets, so that no ACK of an old
 * batch could be taken for one of a new batch.
 */
static int np_keep;
static struct mnl_socket *np_kept;
static uint32_t np_kept_portid;
static uint32_t np_next_seq;

void
np_nl_keep(int on)
{
	np_keep = on;
	if (!on && np_kept != NULL) {
		mnl_socket_close(np_kept);
		np_kept = NULL;
	}
}

static int
txn_init(struct np_txn *t, char *why, size_t whylen)
{
	memset(t, 0, sizeof(*t));
	if (np_kept != NULL) {
		t->t_nl = np_kept;
		t->t_portid = np_kept_portid;
		np_kept = NULL;
	} else if ((t->t_nl = np_nl_open(&t->t_portid, why, whylen)) == NULL)
		return -1;
	if (np_next_seq == 0)
		np_next_seq = (uint32_t)time(NULL);
	t->t_seq = np_next_seq;
	t->t_batch = nftnl_batch_alloc(NP_BATCH_PAGE, NP_BATCH_OVERRUN);
	if (t->t_batch == NULL) {
		np_why(why, whylen, "netpolicy: out of memory");
		mnl_socket_close(t->t_nl);
		return -1;
	}
	return 0;
}

/* ok: the transaction completed (every ACK read), so the socket is clean. */
static void
txn_free(struct np_txn *t, int ok)
{
	if (t->t_batch != NULL)
		nftnl_batch_free(t->t_batch);
	np_next_seq = t->t_seq + 1;
	if (t->t_nl != NULL && ok && np_keep && np_kept == NULL) {
		np_kept = t->t_nl;
		np_kept_portid = t->t_portid;
	} else if (t->t_nl != NULL)
		mnl_socket_close(t->t_nl);
	free(t->t_msgs);
	memset(t, 0, sizeof(*t));
}

/* Record a message about to be put in the batch; returns its seq. */
static int txn_msg(struct np_txn *t, int required, uint32_t *seq,
    const char *fmt, ...) __attribute__((__format__(__printf__, 4, 5)));

static int
txn_msg(struct np_txn *t, int required, uint32_t *seq, const char *fmt, ...)
{
	struct np_msg *msgs, *m;
	va_list ap;
	size_t cap;

	if (t->t_nmsgs == t->t_cap) {
		cap = t->t_cap == 0 ? 64 : t->t_cap * 2;
		if ((msgs = reallocarray(t->t_msgs, cap, sizeof(*msgs))) ==
		    NULL)
			return -1;
		t->t_msgs = msgs;
		t->t_cap = cap;
	}
	m = &t->t_msgs[t->t_nmsgs++];
	memset(m, 0, sizeof(*m));
	m->m_seq = t->t_seq++;
	m->m_required = required;
	va_start(ap, fmt);
	(void)vsnprintf(m->m_what, sizeof(m->m_what), fmt, ap); /* a label */
	va_end(ap);
	*seq = m->m_seq;
	return 0;
}

/* Start an object message in the batch with NLM_F_ACK and the flags. */
static struct nlmsghdr *
txn_hdr(struct np_txn *t, uint16_t type, uint16_t flags, uint32_t seq)
{
	return nftnl_nlmsg_build_hdr(nftnl_batch_buffer(t->t_batch), type,
	    NFPROTO_INET, (uint16_t)(flags | NLM_F_ACK), seq);
}

static int
txn_begin(struct np_txn *t)
{
	struct nlmsghdr *nlh;
	uint32_t seq;

	if (txn_msg(t, 0, &seq, "batch begin") == -1)
		return -1;
	nlh = nftnl_batch_begin(nftnl_batch_buffer(t->t_batch), seq);
	/* Acknowledged by kernels since 6.10; older ones ignore the flag. */
	nlh->nlmsg_flags |= NLM_F_ACK;
	t->t_first = seq;
	return nftnl_batch_update(t->t_batch) < 0 ? -1 : 0;
}

static int
txn_end(struct np_txn *t)
{
	struct nlmsghdr *nlh;
	uint32_t seq;

	if (txn_msg(t, 0, &seq, "batch end") == -1)
		return -1;
	nlh = nftnl_batch_end(nftnl_batch_buffer(t->t_batch), seq);
	nlh->nlmsg_flags |= NLM_F_ACK;
	t->t_last = seq;
	return nftnl_batch_update(t->t_batch) < 0 ? -1 : 0;
}

static int
txn_table(struct np_txn *t, const char *name, uint16_t type, uint16_t flags,
    const char *what)
{
	struct nftnl_table *tb;
	struct nlmsghdr *nlh;
	uint32_t seq;

	if ((tb = nftnl_table_alloc()) == NULL)
		return -1;
	nftnl_table_set_u32(tb, NFTNL_TABLE_FAMILY, NFPROTO_INET);
	if (nftnl_table_set_str(tb, NFTNL_TABLE_NAME, name) < 0 ||
	    txn_msg(t, 1, &seq, "%s table inet %s", what, name) == -1) {
		nftnl_table_free(tb);
		return -1;
	}
	nlh = txn_hdr(t, type, flags, seq);
	nftnl_table_nlmsg_build_payload(nlh, tb);
	nftnl_table_free(tb);
	return nftnl_batch_update(t->t_batch) < 0 ? -1 : 0;
}

static int
txn_chain(struct np_txn *t, const char *table, const struct np_chain *ch)
{
	struct nftnl_chain *c;
	struct nlmsghdr *nlh;
	uint32_t seq;

	if ((c = nftnl_chain_alloc()) == NULL)
		return -1;
	nftnl_chain_set_u32(c, NFTNL_CHAIN_FAMILY, NFPROTO_INET);
	if (nftnl_chain_set_str(c, NFTNL_CHAIN_TABLE, table) < 0 ||
	    nftnl_chain_set_str(c, NFTNL_CHAIN_NAME, ch->ch_name) < 0)
		goto fail;
	if (ch->ch_base) {
		nftnl_chain_set_u32(c, NFTNL_CHAIN_HOOKNUM, ch->ch_hook);
		nftnl_chain_set_s32(c, NFTNL_CHAIN_PRIO, ch->ch_prio);
		nftnl_chain_set_u32(c, NFTNL_CHAIN_POLICY, ch->ch_policy);
		if (nftnl_chain_set_str(c, NFTNL_CHAIN_TYPE, ch->ch_type) < 0)
			goto fail;
	}
	if (txn_msg(t, 1, &seq, "add chain %s", ch->ch_name) == -1)
		goto fail;
	nlh = txn_hdr(t, NFT_MSG_NEWCHAIN, NLM_F_CREATE, seq);
	nftnl_chain_nlmsg_build_payload(nlh, c);
	nftnl_chain_free(c);
	return nftnl_batch_update(t->t_batch) < 0 ? -1 : 0;
fail:
	nftnl_chain_free(c);
	return -1;
}

static struct nftnl_set *
set_alloc(const char *table, const char *name, uint32_t id)
{
	struct nftnl_set *s;

	if ((s = nftnl_set_alloc()) == NULL)
		return NULL;
	nftnl_set_set_u32(s, NFTNL_SET_FAMILY, NFPROTO_INET);
	if (nftnl_set_set_str(s, NFTNL_SET_TABLE, table) < 0 ||
	    nftnl_set_set_str(s, NFTNL_SET_NAME, name) < 0) {
		nftnl_set_free(s);
		return NULL;
	}
	if (id != 0)
		nftnl_set_set_u32(s, NFTNL_SET_ID, id);
	return s;
}

static int
txn_set(struct np_txn *t, const char *table, const struct np_set *set,
    uint32_t id)
{
	struct nftnl_set *s;
	struct nlmsghdr *nlh;
	uint32_t seq;

	if ((s = set_alloc(table, set->se_name, id)) == NULL)
		return -1;
	nftnl_set_set_u32(s, NFTNL_SET_FLAGS, set->se_flags);
	nftnl_set_set_u32(s, NFTNL_SET_KEY_TYPE, set->se_keytype);
	nftnl_set_set_u32(s, NFTNL_SET_KEY_LEN, set->se_keylen);
	if (txn_msg(t, 1, &seq, "add set %s", set->se_name) == -1) {
		nftnl_set_free(s);
		return -1;
	}
	nlh = txn_hdr(t, NFT_MSG_NEWSET, NLM_F_CREATE, seq);
	nftnl_set_nlmsg_build_payload(nlh, s);
	nftnl_set_free(s);
	return nftnl_batch_update(t->t_batch) < 0 ? -1 : 0;
}

/*
 * Elements go in chunks of NP_ELEMS_PER_MSG per message, each chunk its
 * own nftnl_set that is freed as soon as its payload is built.
 */
static int
txn_elems_op(struct np_txn *t, const char *table, const char *set, uint32_t id,
    const struct np_elem *elems, size_t nelems, int del)
{
	struct nftnl_set_elem *e;
	struct nftnl_set *s;
	struct nlmsghdr *nlh;
	size_t i, j, n;
	uint32_t seq;

	for (i = 0; i < nelems; i += n) {
		n = nelems - i < NP_ELEMS_PER_MSG ? nelems - i :
						    NP_ELEMS_PER_MSG;
		if ((s = set_alloc(table, set, id)) == NULL)
			return -1;
		for (j = i; j < i + n; j++) {
			if ((e = nftnl_set_elem_alloc()) == NULL) {
				nftnl_set_free(s);
				return -1;
			}
			if (nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY,
				elems[j].el_key, elems[j].el_keylen) < 0) {
				nftnl_set_elem_free(e);
				nftnl_set_free(s);
				return -1;
			}
			if (elems[j].el_timeout_ms != 0 && !del)
				nftnl_set_elem_set_u64(e,
				    NFTNL_SET_ELEM_TIMEOUT,
				    elems[j].el_timeout_ms);
			/* The element now belongs to the set. */
			nftnl_set_elem_add(s, e);
		}
		if (txn_msg(t, 1, &seq, "%s %zu elements %s set %s",
			del ? "delete" : "add", n, del ? "from" : "to",
			set) == -1) {
			nftnl_set_free(s);
			return -1;
		}
		nlh = txn_hdr(t, del ? NFT_MSG_DELSETELEM : NFT_MSG_NEWSETELEM,
		    del ? 0 : NLM_F_CREATE, seq);
		nftnl_set_elems_nlmsg_build_payload(nlh, s);
		nftnl_set_free(s);
		if (nftnl_batch_update(t->t_batch) < 0)
			return -1;
	}
	return 0;
}

static int
txn_elems(struct np_txn *t, const char *table, const char *set, uint32_t id,
    const struct np_elem *elems, size_t nelems)
{
	return txn_elems_op(t, table, set, id, elems, nelems, 0);
}

/* One small helper per expression, as in libnftnl's nft-rule-add.c. */
static struct nftnl_expr *
expr_meta(const struct np_expr *x)
{
	struct nftnl_expr *e;

	if ((e = nftnl_expr_alloc("meta")) == NULL)
		return NULL;
	nftnl_expr_set_u32(e, NFTNL_EXPR_META_KEY, x->ex_key);
	nftnl_expr_set_u32(e, NFTNL_EXPR_META_DREG, x->ex_dreg);
	return e;
}

static struct nftnl_expr *
expr_cmp(const struct np_expr *x)
{
	struct nftnl_expr *e;

	if ((e = nftnl_expr_alloc("cmp")) == NULL)
		return NULL;
	nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_SREG, x->ex_sreg);
	nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_OP, x->ex_op);
	nftnl_expr_set(e, NFTNL_EXPR_CMP_DATA, x->ex_data, x->ex_len);
	return e;
}

static struct nftnl_expr *
expr_payload(const struct np_expr *x)
{
	struct nftnl_expr *e;

	if ((e = nftnl_expr_alloc("payload")) == NULL)
		return NULL;
	nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_DREG, x->ex_dreg);
	nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_BASE, x->ex_base);
	nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_OFFSET, x->ex_offset);
	nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_LEN, x->ex_len);
	return e;
}

static struct nftnl_expr *
expr_lookup(const struct np_expr *x, uint32_t set_id)
{
	struct nftnl_expr *e;

	if ((e = nftnl_expr_alloc("lookup")) == NULL)
		return NULL;
	nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SREG, x->ex_sreg);
	nftnl_expr_set_str(e, NFTNL_EXPR_LOOKUP_SET, x->ex_name);
	/* The set is new in this same batch: name it by id as well. */
	if (set_id != 0)
		nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SET_ID, set_id);
	if (x->ex_flags != 0)
		nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_FLAGS, x->ex_flags);
	return e;
}

static struct nftnl_expr *
expr_ct(const struct np_expr *x)
{
	struct nftnl_expr *e;

	if ((e = nftnl_expr_alloc("ct")) == NULL)
		return NULL;
	nftnl_expr_set_u32(e, NFTNL_EXPR_CT_KEY, x->ex_key);
	/* ct set KEY from sreg, or a load into dreg. */
	if (x->ex_sreg != 0)
		nftnl_expr_set_u32(e, NFTNL_EXPR_CT_SREG, x->ex_sreg);
	else
		nftnl_expr_set_u32(e, NFTNL_EXPR_CT_DREG, x->ex_dreg);
	if (x->ex_ctdir != 0)
		nftnl_expr_set_u8(e, NFTNL_EXPR_CT_DIR,
		    (uint8_t)(x->ex_ctdir - 1));
	return e;
}

static struct nftnl_expr *
expr_immediate(const struct np_expr *x)
{
	struct nftnl_expr *e;

	if ((e = nftnl_expr_alloc("immediate")) == NULL)
		return NULL;
	nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, x->ex_dreg);
	nftnl_expr_set(e, NFTNL_EXPR_IMM_DATA, x->ex_data, x->ex_len);
	return e;
}

static struct nftnl_expr *
expr_fib(const struct np_expr *x)
{
	struct nftnl_expr *e;

	if ((e = nftnl_expr_alloc("fib")) == NULL)
		return NULL;
	nftnl_expr_set_u32(e, NFTNL_EXPR_FIB_DREG, x->ex_dreg);
	nftnl_expr_set_u32(e, NFTNL_EXPR_FIB_RESULT, x->ex_key);
	nftnl_expr_set_u32(e, NFTNL_EXPR_FIB_FLAGS, x->ex_flags);
	return e;
}

static struct nftnl_expr *
expr_redir(const struct np_expr *x)
{
	struct nftnl_expr *e;

	if ((e = nftnl_expr_alloc("redir")) == NULL)
		return NULL;
	nftnl_expr_set_u32(e, NFTNL_EXPR_REDIR_REG_PROTO_MIN, x->ex_sreg);
	nftnl_expr_set_u32(e, NFTNL_EXPR_REDIR_REG_PROTO_MAX, x->ex_sreg2);
	nftnl_expr_set_u32(e, NFTNL_EXPR_REDIR_FLAGS, x->ex_flags);
	return e;
}

static struct nftnl_expr *
expr_bitwise(const struct np_expr *x)
{
	struct nftnl_expr *e;

	if ((e = nftnl_expr_alloc("bitwise")) == NULL)
		return NULL;
	nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_SREG, x->ex_sreg);
	nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_DREG, x->ex_dreg);
	nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_LEN, x->ex_len);
	nftnl_expr_set(e, NFTNL_EXPR_BITWISE_MASK, x->ex_data, x->ex_len);
	nftnl_expr_set(e, NFTNL_EXPR_BITWISE_XOR, x->ex_xor, x->ex_len);
	return e;
}

static struct nftnl_expr *
expr_counter(void)
{
	return nftnl_expr_alloc("counter");
}

static struct nftnl_expr *
expr_limit(const struct np_expr *x)
{
	struct nftnl_expr *e;

	if ((e = nftnl_expr_alloc("limit")) == NULL)
		return NULL;
	nftnl_expr_set_u64(e, NFTNL_EXPR_LIMIT_RATE, x->ex_rate);
	nftnl_expr_set_u64(e, NFTNL_EXPR_LIMIT_UNIT, x->ex_unit);
	nftnl_expr_set_u32(e, NFTNL_EXPR_LIMIT_BURST, x->ex_burst);
	nftnl_expr_set_u32(e, NFTNL_EXPR_LIMIT_TYPE, x->ex_ltype);
	nftnl_expr_set_u32(e, NFTNL_EXPR_LIMIT_FLAGS, x->ex_flags);
	return e;
}

static struct nftnl_expr *
expr_log(const struct np_expr *x)
{
	struct nftnl_expr *e;

	if ((e = nftnl_expr_alloc("log")) == NULL)
		return NULL;
	nftnl_expr_set_u16(e, NFTNL_EXPR_LOG_GROUP, (uint16_t)x->ex_group);
	if (x->ex_name[0] != '\0')
		nftnl_expr_set_str(e, NFTNL_EXPR_LOG_PREFIX, x->ex_name);
	if (x->ex_flags != 0)
		nftnl_expr_set_u32(e, NFTNL_EXPR_LOG_FLAGS, x->ex_flags);
	return e;
}

static struct nftnl_expr *
expr_verdict(const struct np_expr *x)
{
	struct nftnl_expr *e;

	if ((e = nftnl_expr_alloc("immediate")) == NULL)
		return NULL;
	nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_VERDICT);
	nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_VERDICT, (uint32_t)x->ex_verdict);
	if (x->ex_name[0] != '\0')
		nftnl_expr_set_str(e, NFTNL_EXPR_IMM_CHAIN, x->ex_name);
	return e;
}

static uint32_t
set_id_of(const struct np_ruleset *rs, const char *name)
{
	size_t i;

	for (i = 0; i < rs->rs_nsets; i++)
		if (strcmp(rs->rs_sets[i].se_name, name) == 0)
			return (uint32_t)i + 1;
	return 0;
}

static int
txn_rule(struct np_txn *t, const struct np_ruleset *rs, const char *chain,
    const struct np_rule *ru, size_t idx)
{
	const struct np_expr *x;
	struct nftnl_expr *e;
	struct nftnl_rule *r;
	struct nlmsghdr *nlh;
	uint32_t seq;
	size_t i;

	if (ru->ru_overflow)
		return -1;
	if ((r = nftnl_rule_alloc()) == NULL)
		return -1;
	nftnl_rule_set_u32(r, NFTNL_RULE_FAMILY, NFPROTO_INET);
	if (nftnl_rule_set_str(r, NFTNL_RULE_TABLE, rs->rs_table) < 0 ||
	    nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, chain) < 0)
		goto fail;
	for (i = 0; i < ru->ru_nexprs; i++) {
		x = &ru->ru_exprs[i];
		switch (x->ex_type) {
		case NP_E_META:
			e = expr_meta(x);
			break;
		case NP_E_CMP:
			e = expr_cmp(x);
			break;
		case NP_E_PAYLOAD:
			e = expr_payload(x);
			break;
		case NP_E_LOOKUP:
			e = expr_lookup(x, set_id_of(rs, x->ex_name));
			break;
		case NP_E_CT:
			e = expr_ct(x);
			break;
		case NP_E_BITWISE:
			e = expr_bitwise(x);
			break;
		case NP_E_COUNTER:
			e = expr_counter();
			break;
		case NP_E_LIMIT:
			e = expr_limit(x);
			break;
		case NP_E_LOG:
			e = expr_log(x);
			break;
		case NP_E_VERDICT:
			e = expr_verdict(x);
			break;
		case NP_E_IMMEDIATE:
			e = expr_immediate(x);
			break;
		case NP_E_FIB:
			e = expr_fib(x);
			break;
		case NP_E_REDIR:
			e = expr_redir(x);
			break;
		default:
			/* A dumped, unmodelled expression is never sent. */
			e = NULL;
			break;
		}
		if (e == NULL)
			goto fail;
		/* The expression now belongs to the rule. */
		nftnl_rule_add_expr(r, e);
	}
	if (txn_msg(t, 1, &seq, "add rule %zu to chain %s", idx + 1, chain) ==
	    -1)
		goto fail;
	nlh = txn_hdr(t, NFT_MSG_NEWRULE, NLM_F_CREATE | NLM_F_APPEND, seq);
	nftnl_rule_nlmsg_build_payload(nlh, r);
	nftnl_rule_free(r);
	return nftnl_batch_update(t->t_batch) < 0 ? -1 : 0;
fail:
	nftnl_rule_free(r);
	return -1;
}

static struct np_msg *
txn_find(struct np_txn *t, uint32_t seq)
{
	size_t i;

	/* Unsigned: a seq below t_first wraps far past t_nmsgs. */
	i = (uint32_t)(seq - t->t_first);
	if (i >= t->t_nmsgs || t->t_msgs[i].m_seq != seq)
		return NULL;
	return &t->t_msgs[i];
}

static int
ext_attr_cb(const struct nlattr *attr, void *data)
{
	const struct nlattr **tb = data;
	uint16_t type = mnl_attr_get_type(attr);

	if (mnl_attr_type_valid(attr, NLMSGERR_ATTR_MAX) < 0)
		return MNL_CB_OK;
	if (type == NLMSGERR_ATTR_MSG &&
	    mnl_attr_validate(attr, MNL_TYPE_NUL_STRING) < 0)
		return MNL_CB_OK;
	if (type == NLMSGERR_ATTR_OFFS &&
	    mnl_attr_validate(attr, MNL_TYPE_U32) < 0)
		return MNL_CB_OK;
	tb[type] = attr;
	return MNL_CB_OK;
}

/*
 * NLMSG_ERROR: one ACK (error 0) or refusal. Record it against the message
 * it answers and carry on, so that every ACK of the batch is collected
 * (nftables mnl_batch_talk); the verdict is made once all are in.
 */
static int
ack_cb(const struct nlmsghdr *nlh, void *data)
{
	const struct nlattr *tb[NLMSGERR_ATTR_MAX + 1];
	struct np_txn *t = data;
	const struct nlmsgerr *err;
	struct np_msg *m;
	size_t off, plen;

	if (nlh->nlmsg_len < mnl_nlmsg_size(sizeof(*err))) {
		t->t_unexpected = 1;
		snprintf(t->t_unexpected_why, sizeof(t->t_unexpected_why),
		    "truncated ACK");
		return MNL_CB_OK;
	}
	err = mnl_nlmsg_get_payload(nlh);
	m = txn_find(t, nlh->nlmsg_seq);
	if (m == NULL || m->m_acked) {
		t->t_unexpected = 1;
		snprintf(t->t_unexpected_why, sizeof(t->t_unexpected_why),
		    "%s ACK for seq %u", m == NULL ? "unexpected" : "duplicate",
		    nlh->nlmsg_seq);
		return MNL_CB_OK;
	}
	m->m_acked = 1;
	m->m_err = err->error < 0 ? -err->error : err->error;
	m->m_ext_off = -1;
	if ((nlh->nlmsg_flags & NLM_F_ACK_TLVS) == 0)
		return MNL_CB_OK;
	off = sizeof(*err);
	if ((nlh->nlmsg_flags & NLM_F_CAPPED) == 0)
		off += err->msg.nlmsg_len - sizeof(struct nlmsghdr);
	plen = mnl_nlmsg_get_payload_len(nlh);
	if (off >= plen)
		return MNL_CB_OK;
	memset(tb, 0, sizeof(tb));
	if (mnl_attr_parse_payload((const char *)err + off, plen - off,
		ext_attr_cb, tb) < 0)
		return MNL_CB_OK;
	if (tb[NLMSGERR_ATTR_MSG] != NULL)
		snprintf(m->m_ext, sizeof(m->m_ext), "%s",
		    mnl_attr_get_str(tb[NLMSGERR_ATTR_MSG]));
	if (tb[NLMSGERR_ATTR_OFFS] != NULL)
		m->m_ext_off = mnl_attr_get_u32(tb[NLMSGERR_ATTR_OFFS]);
	return MNL_CB_OK;
}

/* Anything but an ACK on this socket is unexpected. */
static int
other_cb(const struct nlmsghdr *nlh, void *data)
{
	struct np_txn *t = data;

	t->t_unexpected = 1;
	snprintf(t->t_unexpected_why, sizeof(t->t_unexpected_why),
	    "unexpected netlink message type %u", nlh->nlmsg_type);
	return MNL_CB_OK;
}

static size_t
txn_pending(const struct np_txn *t)
{
	size_t i, n = 0;

	for (i = 0; i < t->t_nmsgs; i++)
		if (t->t_msgs[i].m_required && !t->t_msgs[i].m_acked)
			n++;
	return n;
}

static int64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * Read one datagram of ACKs into buf (NP_RECV_BUF bytes) and run the
 * callbacks over it. Returns 0, also when interrupted or when the datagram
 * was not from the kernel, or -1 with why set on a socket error or a reply
 * for a portid that is not ours.
 */
static int
txn_read(struct np_txn *t, char *buf, mnl_cb_t *ctl, char *why, size_t whylen)
{
	ssize_t n;

	n = np_nl_recv(mnl_socket_get_fd(t->t_nl), buf, NP_RECV_BUF, 0);
	if ((n == -1 && errno == EINTR) || n == 0)
		return 0;
	if (n == -1) {
		/* ENOBUFS: ACKs were lost, the outcome is unknown. */
		np_why(why, whylen, "netlink receive: %s", strerror(errno));
		return -1;
	}
	/* seq 0: we match seqs ourselves, against the whole batch. */
	if (mnl_cb_run2(buf, (size_t)n, 0, t->t_portid, other_cb, t, ctl,
		NLMSG_MIN_TYPE) == -1) {
		np_why(why, whylen, "netlink: %s",
		    errno == ESRCH ? "reply for another portid" :
				     strerror(errno));
		return -1;
	}
	return 0;
}

/*
 * Read ACKs until every required one arrived, with a bounded wait, then
 * take whatever else is already queued (the ACKs of batch begin/end on
 * kernels that send them). Returns 0, or -1 with why set on a socket
 * error, a portid that is not ours or a timeout.
 */
static int
txn_collect(struct np_txn *t, char *why, size_t whylen)
{
	mnl_cb_t ctl[NLMSG_MIN_TYPE];
	struct pollfd pfd;
	int64_t deadline, left;
	char *buf;
	int rc, drain = 0, i;

	for (i = 0; i < NLMSG_MIN_TYPE; i++)
		ctl[i] = other_cb;
	ctl[NLMSG_ERROR] = ack_cb;
	ctl[NLMSG_NOOP] = NULL;
	if ((buf = malloc(NP_RECV_BUF)) == NULL) {
		np_why(why, whylen, "netpolicy: out of memory");
		return -1;
	}
	pfd.fd = mnl_socket_get_fd(t->t_nl);
	pfd.events = POLLIN;
	deadline = now_ms() + NP_ACK_TIMEOUT_MS;
	for (;;) {
		/*
		 * Done when every required ACK is in, or when the kernel
		 * answered batch begin with an error: it does that when the
		 * whole batch failed (at commit, say), dropping the other
		 * ACKs.
		 */
		if (txn_pending(t) == 0 ||
		    (t->t_msgs[0].m_acked && t->t_msgs[0].m_err != 0))
			drain = 1;
		left = drain ? 0 : deadline - now_ms();
		if (left < 0)
			left = 0;
		rc = poll(&pfd, 1, (int)left);
		if (rc == -1 && errno == EINTR)
			continue;
		if (rc == -1) {
			np_why(why, whylen, "netlink poll: %s",
			    strerror(errno));
			goto fail;
		}
		if (rc == 0) {
			if (drain)
				break;
			np_why(why, whylen,
			    "no ACK from the kernel for %zu messages within "
			    "%d ms",
			    txn_pending(t), NP_ACK_TIMEOUT_MS);
			goto fail;
		}
		if (txn_read(t, buf, ctl, why, whylen) == -1)
			goto fail;
	}
	free(buf);
	return 0;
fail:
	free(buf);
	return -1;
}

/*
 * Send the batch and judge the ACKs. Returns 0 only when every message was
 * acknowledged with success.
 */
static int
txn_run(struct np_txn *t, char *why, size_t whylen)
{
	struct sockaddr_nl snl;
	struct msghdr msg;
	struct iovec *iov;
	struct np_msg *m;
	size_t i, total = 0;
	int niov;
	ssize_t sent;

	/* Never send a batch with nothing but begin and end. */
	if (t->t_nmsgs <= 2) {
		np_why(why, whylen, "netpolicy: empty batch");
		return -1;
	}
	niov = nftnl_batch_iovec_len(t->t_batch);
	if (niov <= 0 || (iov = calloc((size_t)niov, sizeof(*iov))) == NULL) {
		np_why(why, whylen, "netpolicy: out of memory");
		return -1;
	}
	nftnl_batch_iovec(t->t_batch, iov, (uint32_t)niov);
	for (i = 0; i < (size_t)niov; i++)
		total += iov[i].iov_len;
	/*
	 * The kernel takes the batch as one datagram, so the send buffer
	 * must hold it whole; the ACKs (capped, about 40 bytes of payload
	 * each plus an extended-ACK message) must fit the receive buffer.
	 */
	np_sockbuf(t->t_nl, SO_SNDBUFFORCE, SO_SNDBUF, total * 2 + 65536);
	np_sockbuf(t->t_nl, SO_RCVBUFFORCE, SO_RCVBUF,
	    t->t_nmsgs * 1024 + 65536);

	memset(&snl, 0, sizeof(snl));
	snl.nl_family = AF_NETLINK;
	memset(&msg, 0, sizeof(msg));
	msg.msg_name = &snl;
	msg.msg_namelen = sizeof(snl);
	msg.msg_iov = iov;
	msg.msg_iovlen = (size_t)niov;
	do
		sent = sendmsg(mnl_socket_get_fd(t->t_nl), &msg, 0);
	while (sent == -1 && errno == EINTR);
	free(iov);
	if (sent == -1) {
		np_why(why, whylen, "netlink send (%zu bytes): %s", total,
		    strerror(errno));
		return -1;
	}
	if (txn_collect(t, why, whylen) == -1)
		return -1;
	if (t->t_unexpected) {
		np_why(why, whylen, "netlink: %s", t->t_unexpected_why);
		return -1;
	}
	for (i = 0; i < t->t_nmsgs; i++) {
		m = &t->t_msgs[i];
		if (m->m_acked && m->m_err != 0) {
			char off[48] = "";

			if (m->m_ext_off >= 0)
				snprintf(off, sizeof(off),
				    " (attribute at byte %lld)",
				    (long long)m->m_ext_off);
			np_why(why, whylen, "kernel refused %s: %s%s%s%s",
			    m->m_what, strerror(m->m_err),
			    m->m_ext[0] != '\0' ? ": " : "", m->m_ext, off);
			return -1;
		}
	}
	/* A kernel that acknowledged begin acknowledges end as well. */
	if (t->t_msgs[0].m_acked && !t->t_msgs[t->t_nmsgs - 1].m_acked) {
		np_why(why, whylen, "no ACK from the kernel for batch end");
		return -1;
	}
	return 0;
}

int
np_apply(const struct np_ruleset *rs, char *why, size_t whylen)
{
	struct np_txn t;
	size_t i, j;
	int rc = -1;

	if (txn_init(&t, why, whylen) == -1)
		return -1;
	if (txn_begin(&t) == -1 ||
	    /* Make sure the table exists, so that deleting it cannot fail. */
	    txn_table(&t, rs->rs_table, NFT_MSG_NEWTABLE, NLM_F_CREATE,
		"add") == -1 ||
	    txn_table(&t, rs->rs_table, NFT_MSG_DELTABLE, 0, "delete") == -1 ||
	    txn_table(&t, rs->rs_table, NFT_MSG_NEWTABLE, NLM_F_CREATE,
		"add") == -1)
		goto build_failed;
	/* Chains first: a rule may jump to a chain that comes later. */
	for (i = 0; i < rs->rs_nchains; i++)
		if (txn_chain(&t, rs->rs_table, &rs->rs_chains[i]) == -1)
			goto build_failed;
	for (i = 0; i < rs->rs_nsets; i++) {
		const struct np_set *set = &rs->rs_sets[i];

		if (txn_set(&t, rs->rs_table, set, (uint32_t)i + 1) == -1 ||
		    txn_elems(&t, rs->rs_table, set->se_name, (uint32_t)i + 1,
			set->se_elems, set->se_nelems) == -1)
			goto build_failed;
	}
	for (i = 0; i < rs->rs_nchains; i++)
		for (j = 0; j < rs->rs_chains[i].ch_nrules; j++)
			if (txn_rule(&t, rs, rs->rs_chains[i].ch_name,
				&rs->rs_chains[i].ch_rules[j], j) == -1)
				goto build_failed;
	if (txn_end(&t) == -1)
		goto build_failed;
	rc = txn_run(&t, why, whylen);
	txn_free(&t, rc == 0);
	return rc;
build_failed:
	np_why(why, whylen,
	    "netpolicy: cannot build the batch (out of memory "
	    "or a name too long)");
	txn_free(&t, 0);
	return -1;
}

int
np_flush(const char *table, char *why, size_t whylen)
{
	struct np_txn t;
	int rc;

	if (txn_init(&t, why, whylen) == -1)
		return -1;
	if (txn_begin(&t) == -1 ||
	    txn_table(&t, table, NFT_MSG_NEWTABLE, NLM_F_CREATE, "add") == -1 ||
	    txn_table(&t, table, NFT_MSG_DELTABLE, 0, "delete") == -1 ||
	    txn_end(&t) == -1) {
		np_why(why, whylen, "netpolicy: cannot build the batch");
		txn_free(&t, 0);
		return -1;
	}
	rc = txn_run(&t, why, whylen);
	txn_free(&t, rc == 0);
	return rc;
}

/*
 * One batch on set: add (so that the delete cannot fail, also on an
 * element that expired meanwhile), delete, and with readd add again: the
 * kernel keeps an existing element's expiry when it is only added again,
 * and the batch is applied whole, so a re-added element is never missing.
 */
static int
set_batch(const char *table, const char *set, const struct np_elem *elems,
    size_t nelems, int readd, char *why, size_t whylen)
{
	struct np_txn t;
	int rc;

	if (nelems == 0)
		return 0;
	if (txn_init(&t, why, whylen) == -1)
		return -1;
	if (txn_begin(&t) == -1 ||
	    txn_elems_op(&t, table, set, 0, elems, nelems, 0) == -1 ||
	    txn_elems_op(&t, table, set, 0, elems, nelems, 1) == -1 ||
	    (readd &&
		txn_elems_op(&t, table, set, 0, elems, nelems, 0) == -1) ||
	    txn_end(&t) == -1) {
		np_why(why, whylen, "netpolicy: cannot build the batch");
		txn_free(&t, 0);
		return -1;
	}
	rc = txn_run(&t, why, whylen);
	txn_free(&t, rc == 0);
	return rc;
}

int
np_set_add(const char *table, const char *set, const struct np_elem *elems,
    size_t nelems, char *why, size_t whylen)
{
	return set_batch(table, set, elems, nelems, 1, why, whylen);
}

int
np_set_update(const char *table, const struct np_set_change *ch, size_t n,
    char *why, size_t whylen)
{
	struct np_txn t;
	size_t i;
	int rc, pass;

	if (n == 0)
		return 0;
	if (txn_init(&t, why, whylen) == -1)
		return -1;
	if (txn_begin(&t) == -1)
		goto fail;
	/* Pass 0: add what goes (so its delete cannot fail); 1: delete it;
	 * 2: add what comes. */
	for (pass = 0; pass < 3; pass++)
		for (i = 0; i < n; i++) {
			if ((pass < 2) != (ch[i].sc_del != 0))
				continue;
			if (txn_elems_op(&t, table, ch[i].sc_set, 0,
				&ch[i].sc_elem, 1, pass == 1) == -1)
				goto fail;
		}
	if (txn_end(&t) == -1)
		goto fail;
	rc = txn_run(&t, why, whylen);
	txn_free(&t, rc == 0);
	return rc;
fail:
	np_why(why, whylen, "netpolicy: cannot build the batch");
	txn_free(&t, 0);
	return -1;
}

int
np_set_del(const char *table, const char *set, const struct np_elem *elems,
    size_t nelems, char *why, size_t whylen)
{
	return set_batch(table, set, elems, nelems, 0, why, whylen);
}
