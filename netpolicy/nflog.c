/*
 * Kernel drop events: a libmnl subscriber to one NFLOG group (the group
 * the default-deny rules log to), turning each logged packet into a
 * struct np_drop {family, proto, src, dst, ports, uid}. Aggregation, rate
 * limits and the audit log are the daemon's business (proxy/netguard.c);
 * this file only binds, reads and parses.
 *
 * The packet bytes come from the sandbox: the parser trusts no length in
 * them and reads only within what the kernel copied.
 */
#include <sys/types.h>
#include <sys/socket.h>

#include <netinet/in.h>
#include <arpa/inet.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <linux/netlink.h>

#include <libmnl/libmnl.h>

#include "netpolicy/netpolicy.h"
#include "netpolicy/np_private.h"

/*
 * The kernel adds the sending socket's uid (NFULA_UID) on its own whenever
 * the packet has a full local socket; no flag asks for it.
 *
 * Headers are all we want: IPv6 with a few extension headers, then ports. */
#define NP_NFLOG_COPY     128
#define NP_NFLOG_BUF      ((size_t)64 * 1024)
#define NP_NFLOG_RCVBUF   (1024 * 1024)
#define NP_NFLOG_MAXREADS 64 /* datagrams per np_nflog_read call */
#define NP_NFLOG_WAIT_MS  2000
#define NP_IPV6_MAX_EXT   8

struct np_nflog {
	struct mnl_socket *nf_nl;
	uint32_t nf_portid;
	uint32_t nf_seq;
	uint16_t nf_group;
	char *nf_buf;
};

static struct nlmsghdr *
cfg_hdr(struct np_nflog *nf)
{
	struct nlmsghdr *nlh;
	struct nfgenmsg *nfg;

	nlh = mnl_nlmsg_put_header(nf->nf_buf);
	nlh->nlmsg_type = (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_CONFIG;
	nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
	nlh->nlmsg_seq = ++nf->nf_seq;
	nfg = mnl_nlmsg_put_extra_header(nlh, sizeof(*nfg));
	nfg->nfgen_family = AF_UNSPEC;
	nfg->version = NFNETLINK_V0;
	nfg->res_id = htons(nf->nf_group);
	return nlh;
}

/* Send one config request and wait (bounded) for its ACK; -1 with errno. */
static int
cfg_talk(struct np_nflog *nf, struct nlmsghdr *nlh)
{
	uint32_t seq = nlh->nlmsg_seq;
	ssize_t n;
	int rc;

	if (mnl_socket_sendto(nf->nf_nl, nlh, nlh->nlmsg_len) < 0)
		return -1;
	for (;;) {
		n = np_nl_recv_wait(nf->nf_nl, nf->nf_buf, NP_NFLOG_BUF,
		    NP_NFLOG_WAIT_MS);
		if (n == -1)
			return -1;
		/* Packets may already arrive: only our seq's ACK ends this. */
		rc = mnl_cb_run(nf->nf_buf, (size_t)n, seq, nf->nf_portid, NULL,
		    NULL);
		if (rc == -1 && errno == EPROTO)
			continue;
		if (rc <= MNL_CB_STOP)
			return rc == MNL_CB_STOP ? 0 : -1;
	}
}

struct np_nflog *
np_nflog_open(uint16_t group, char *why, size_t whylen)
{
	struct nfulnl_msg_config_mode mode;
	struct nfulnl_msg_config_cmd cmd;
	struct np_nflog *nf;
	struct nlmsghdr *nlh;
	int fd, flags, v, saved;

	if ((nf = calloc(1, sizeof(*nf))) == NULL ||
	    (nf->nf_buf = malloc(NP_NFLOG_BUF)) == NULL) {
		free(nf);
		np_why(why, whylen, "nflog: out of memory");
		return NULL;
	}
	nf->nf_group = group;
	nf->nf_seq = (uint32_t)time(NULL);
	if ((nf->nf_nl = mnl_socket_open(NETLINK_NETFILTER)) == NULL ||
	    mnl_socket_bind(nf->nf_nl, 0, MNL_SOCKET_AUTOPID) == -1) {
		np_why(why, whylen, "nflog: netlink socket: %s",
		    strerror(errno));
		goto fail;
	}
	nf->nf_portid = mnl_socket_get_portid(nf->nf_nl);

	memset(&cmd, 0, sizeof(cmd));
	cmd.command = NFULNL_CFG_CMD_BIND;
	nlh = cfg_hdr(nf);
	mnl_attr_put(nlh, NFULA_CFG_CMD, sizeof(cmd), &cmd);
	if (cfg_talk(nf, nlh) == -1) {
		saved = errno;
		np_why(why, whylen, "nflog: bind group %u: %s%s", group,
		    strerror(saved),
		    saved == EPERM ? " (another socket may hold the group)" :
				     "");
		goto fail;
	}
	memset(&mode, 0, sizeof(mode));
	mode.copy_mode = NFULNL_COPY_PACKET;
	mode.copy_range = htonl(NP_NFLOG_COPY);
	nlh = cfg_hdr(nf);
	mnl_attr_put(nlh, NFULA_CFG_MODE, sizeof(mode), &mode);
	if (cfg_talk(nf, nlh) == -1) {
		np_why(why, whylen, "nflog: copy mode: %s", strerror(errno));
		goto fail;
	}

	fd = mnl_socket_get_fd(nf->nf_nl);
	v = NP_NFLOG_RCVBUF;
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
	if ((flags = fcntl(fd, F_GETFL)) == -1 ||
	    fcntl(fd, F_SETFL, flags | O_NONBLOCK) == -1) {
		np_why(why, whylen, "nflog: non-blocking: %s", strerror(errno));
		goto fail;
	}
	return nf;
fail:
	if (nf->nf_nl != NULL)
		mnl_socket_close(nf->nf_nl);
	free(nf->nf_buf);
	free(nf);
	return NULL;
}

int
np_nflog_fd(const struct np_nflog *nf)
{
	return mnl_socket_get_fd(nf->nf_nl);
}

void
np_nflog_close(struct np_nflog *nf)
{
	struct nfulnl_msg_config_cmd cmd;
	struct nlmsghdr *nlh;

	if (nf == NULL)
		return;
	/* Unbind explicitly; closing the socket would also release it. */
	memset(&cmd, 0, sizeof(cmd));
	cmd.command = NFULNL_CFG_CMD_UNBIND;
	nlh = cfg_hdr(nf);
	nlh->nlmsg_flags = NLM_F_REQUEST;
	mnl_attr_put(nlh, NFULA_CFG_CMD, sizeof(cmd), &cmd);
	(void)mnl_socket_sendto(nf->nf_nl, nlh, nlh->nlmsg_len);
	mnl_socket_close(nf->nf_nl);
	free(nf->nf_buf);
	free(nf);
}

void
np_nflog_forget(struct np_nflog *nf)
{
	if (nf == NULL)
		return;
	/* A copy made by fork: the socket is shared, so no unbind. */
	mnl_socket_close(nf->nf_nl);
	free(nf->nf_buf);
	free(nf);
}

static void
parse_ports(const uint8_t *l4, size_t len, struct np_drop *d)
{
	uint16_t sport, dport;

	if (d->nd_proto != IPPROTO_TCP && d->nd_proto != IPPROTO_UDP)
		return;
	if (len < 4)
		return;
	memcpy(&sport, l4, 2);
	memcpy(&dport, l4 + 2, 2);
	d->nd_sport = ntohs(sport);
	d->nd_dport = ntohs(dport);
	d->nd_has_ports = 1;
}

static int
parse_ipv4(const uint8_t *pkt, size_t len, struct np_drop *d)
{
	size_t ihl;
	uint16_t frag;

	if (len < 20)
		return -1;
	ihl = (size_t)(pkt[0] & 0x0f) * 4;
	if (ihl < 20 || ihl > len)
		return -1;
	d->nd_family = AF_INET;
	d->nd_proto = pkt[9];
	inet_ntop(AF_INET, pkt + 12, d->nd_src, sizeof(d->nd_src));
	inet_ntop(AF_INET, pkt + 16, d->nd_dst, sizeof(d->nd_dst));
	memcpy(&frag, pkt + 6, 2);
	/* Only the first fragment carries the transport header. */
	if ((ntohs(frag) & 0x1fff) == 0)
		parse_ports(pkt + ihl, len - ihl, d);
	return 0;
}

static int
parse_ipv6(const uint8_t *pkt, size_t len, struct np_drop *d)
{
	size_t off = 40, hlen;
	uint8_t nh;
	uint16_t frag;
	int i;

	if (len < 40)
		return -1;
	d->nd_family = AF_INET6;
	inet_ntop(AF_INET6, pkt + 8, d->nd_src, sizeof(d->nd_src));
	inet_ntop(AF_INET6, pkt + 24, d->nd_dst, sizeof(d->nd_dst));
	nh = pkt[6];
	/* Walk a bounded number of extension headers within the copy. */
	for (i = 0; i < NP_IPV6_MAX_EXT; i++) {
		if (nh != IPPROTO_HOPOPTS && nh != IPPROTO_ROUTING &&
		    nh != IPPROTO_DSTOPTS && nh != IPPROTO_FRAGMENT)
			break;
		if (len - off < 8) {
			d->nd_proto = nh;
			return 0;
		}
		if (nh == IPPROTO_FRAGMENT) {
			memcpy(&frag, pkt + off + 2, 2);
			if ((ntohs(frag) & 0xfff8) != 0) {
				d->nd_proto = pkt[off];
				return 0;
			}
			hlen = 8;
		} else
			hlen = ((size_t)pkt[off + 1] + 1) * 8;
		nh = pkt[off];
		if (hlen > len - off) {
			d->nd_proto = nh;
			return 0;
		}
		off += hlen;
	}
	d->nd_proto = nh;
	parse_ports(pkt + off, len - off, d);
	return 0;
}

int
np_drop_parse_packet(const uint8_t *pkt, size_t len, struct np_drop *d)
{
	memset(d, 0, sizeof(*d));
	if (pkt == NULL || len < 1)
		return -1;
	switch (pkt[0] >> 4) {
	case 4:
		return parse_ipv4(pkt, len, d);
	case 6:
		return parse_ipv6(pkt, len, d);
	default:
		return -1;
	}
}

struct read_ctx {
	np_drop_cb cb;
	void *arg;
	int n;
};

static int
attr_cb(const struct nlattr *attr, void *data)
{
	const struct nlattr **tb = data;
	uint16_t type = mnl_attr_get_type(attr);

	if (mnl_attr_type_valid(attr, NFULA_MAX) < 0)
		return MNL_CB_OK;
	if (type == NFULA_UID && mnl_attr_validate(attr, MNL_TYPE_U32) < 0)
		return MNL_CB_OK;
	tb[type] = attr;
	return MNL_CB_OK;
}

static int
packet_cb(const struct nlmsghdr *nlh, void *data)
{
	const struct nlattr *tb[NFULA_MAX + 1];
	struct read_ctx *rc = data;
	struct np_drop d;

	if (nlh->nlmsg_type != ((NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_PACKET))
		return MNL_CB_OK;
	memset(tb, 0, sizeof(tb));
	if (mnl_attr_parse(nlh, sizeof(struct nfgenmsg), attr_cb, tb) < 0)
		return MNL_CB_OK;
	if (tb[NFULA_PAYLOAD] == NULL ||
	    np_drop_parse_packet(mnl_attr_get_payload(tb[NFULA_PAYLOAD]),
		mnl_attr_get_payload_len(tb[NFULA_PAYLOAD]), &d) == -1)
		return MNL_CB_OK;
	if (tb[NFULA_UID] != NULL) {
		d.nd_has_uid = 1;
		d.nd_uid = ntohl(mnl_attr_get_u32(tb[NFULA_UID]));
	}
	rc->n++;
	if (rc->cb != NULL)
		rc->cb(rc->arg, &d);
	return MNL_CB_OK;
}

/*
 * The bytes of the whole messages at the start of buf. libmnl's
 * mnl_nlmsg_ok() compares nlmsg_len as an int, so a header claiming 2 GiB
 * or more passes and the walk leaves the buffer. The kernel sends no such
 * header; stop before one anyway.
 */
static size_t
whole_msgs(const unsigned char *buf, size_t len)
{
	size_t off = 0;
	uint32_t ml;

	while (len - off >= sizeof(struct nlmsghdr)) {
		memcpy(&ml, buf + off, sizeof(ml));
		if (ml < sizeof(struct nlmsghdr) || ml > len - off)
			break;
		off +=
		    NLMSG_ALIGN(ml) < len - off ? NLMSG_ALIGN(ml) : len - off;
	}
	return off;
}

int
np_nflog_parse(const void *buf, size_t len, np_drop_cb cb, void *arg)
{
	struct read_ctx rc = { cb, arg, 0 };

	(void)mnl_cb_run(buf, whole_msgs(buf, len), 0, 0, packet_cb, &rc);
	return rc.n;
}

int
np_nflog_read(struct np_nflog *nf, np_drop_cb cb, void *arg, uint64_t *lost,
    char *why, size_t whylen)
{
	ssize_t n;
	int i, count = 0;

	for (i = 0; i < NP_NFLOG_MAXREADS; i++) {
		n = np_nl_recv(mnl_socket_get_fd(nf->nf_nl), nf->nf_buf,
		    NP_NFLOG_BUF, MSG_DONTWAIT);
		if (n == 0)
			continue; /* not from the kernel: a forged event */
		if (n == -1) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				break;
			/* The kernel dropped messages for a full buffer. */
			if (errno == ENOBUFS) {
				if (lost != NULL)
					(*lost)++;
				continue;
			}
			np_why(why, whylen, "nflog: receive: %s",
			    strerror(errno));
			return -1;
		}
		count += np_nflog_parse(nf->nf_buf, (size_t)n, cb, arg);
	}
	return count;
}

const char *
np_proto_name(uint8_t proto, char *buf, size_t len)
{
	switch (proto) {
	case IPPROTO_TCP:
		return "tcp";
	case IPPROTO_UDP:
		return "udp";
	case IPPROTO_ICMP:
		return "icmp";
	case IPPROTO_ICMPV6:
		return "icmpv6";
	default:
		snprintf(buf, len, "%u", proto);
		return buf;
	}
}
