/*
 * Messages with descriptors over a SOCK_SEQPACKET socketpair, checked to
 * the byte: the channel between a parent and a child it does not trust
 * (the sandboxed child, later the privsep engine). One datagram per
 * message, so a message is never split or merged; the receiver knows the
 * exact shape of every kind it accepts and refuses anything else.
 */
#include <sys/types.h>
#include <sys/socket.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "proxy/util/util.h"
#include "proxy/sandbox/sandbox.h"

/* Free entries left in a descriptor array holding n. */
#define ROOM(a, n) (SL_NELEM(a) - (n))

union fdpass_cmsg {
	struct cmsghdr hdr;
	unsigned char buf[CMSG_SPACE(sizeof(int) * FDPASS_MAX_FDS)];
};

int
fdpass_send(int sock, uint32_t type, const void *buf, size_t len,
    const int *fds, size_t nfds, char *why, size_t whylen)
{
	struct fdpass_hdr h;
	struct iovec iov[2];
	struct msghdr msg;
	union fdpass_cmsg cm;
	struct cmsghdr *c;
	ssize_t n;

	if (len > FDPASS_MAX_LEN || nfds > FDPASS_MAX_FDS) {
		snprintf(why, whylen,
		    "fdpass: message too big (%zu bytes, "
		    "%zu fds)",
		    len, nfds);
		return -1;
	}
	memset(&h, 0, sizeof(h));
	h.fh_magic = FDPASS_MAGIC;
	h.fh_type = type;
	h.fh_len = (uint32_t)len;
	h.fh_nfds = (uint32_t)nfds;
	iov[0].iov_base = &h;
	iov[0].iov_len = sizeof(h);
	iov[1].iov_base = (void *)(uintptr_t)buf;
	iov[1].iov_len = len;
	memset(&msg, 0, sizeof(msg));
	msg.msg_iov = iov;
	msg.msg_iovlen = len > 0 ? 2 : 1;
	if (nfds > 0) {
		memset(&cm, 0, sizeof(cm));
		msg.msg_control = cm.buf;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	do
		n = sendmsg(sock, &msg, MSG_NOSIGNAL);
	while (n == -1 && errno == EINTR);
	if (n == -1) {
		snprintf(why, whylen, "fdpass: send: %s", strerror(errno));
		return -1;
	}
	if ((size_t)n != sizeof(h) + len) {
		snprintf(why, whylen, "fdpass: short send (%zd of %zu bytes)",
		    n, sizeof(h) + len);
		return -1;
	}
	return 0;
}

static void
close_all(int *fds, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		close(fds[i]);
}

/*
 * The shape of a received message (n bytes, ngot descriptors in ncmsg
 * control messages) against the kinds accepted: the kind's index, or -1
 * with why set.
 */
static int
check_shape(const struct fdpass_hdr *h, size_t n, size_t ngot, size_t ncmsg,
    const struct fdpass_kind *kinds, size_t nkinds, char *why, size_t whylen)
{
	size_t k, len;

	if (n < sizeof(*h)) {
		snprintf(why, whylen,
		    "fdpass: short message (%zu bytes, "
		    "header is %zu)",
		    n, sizeof(*h));
		return -1;
	}
	if (h->fh_magic != FDPASS_MAGIC) {
		snprintf(why, whylen, "fdpass: bad magic 0x%08x", h->fh_magic);
		return -1;
	}
	for (k = 0; k < nkinds; k++)
		if (kinds[k].fk_type == h->fh_type)
			break;
	if (k == nkinds) {
		snprintf(why, whylen, "fdpass: unexpected message type %u",
		    h->fh_type);
		return -1;
	}
	len = n - sizeof(*h);
	if (h->fh_len != len || len != kinds[k].fk_len) {
		snprintf(why, whylen,
		    "fdpass: message type %u: %zu payload "
		    "bytes (header says %u), want %zu",
		    h->fh_type, len, h->fh_len, kinds[k].fk_len);
		return -1;
	}
	if (ncmsg > (ngot > 0 ? 1u : 0u) || h->fh_nfds != ngot ||
	    ngot != kinds[k].fk_nfds) {
		snprintf(why, whylen,
		    "fdpass: message type %u: %zu "
		    "descriptors in %zu control messages (header says %u), "
		    "want %zu",
		    h->fh_type, ngot, ncmsg, h->fh_nfds, kinds[k].fk_nfds);
		return -1;
	}
	return (int)k;
}

int
fdpass_recv(int sock, const struct fdpass_kind *kinds, size_t nkinds, void *buf,
    size_t cap, int *fds, size_t maxfds, char *why, size_t whylen)
{
	struct {
		struct fdpass_hdr h;
		unsigned char body[FDPASS_MAX_LEN + 1]; /* +1: see too long */
	} in;
	int got[FDPASS_MAX_FDS * 2];
	struct iovec iov;
	struct msghdr msg;
	union fdpass_cmsg cm;
	struct cmsghdr *c;
	size_t ngot = 0, ncmsg = 0, k, n, len;
	ssize_t r;
	int ki;

	iov.iov_base = &in;
	iov.iov_len = sizeof(in);
	memset(&msg, 0, sizeof(msg));
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	msg.msg_control = cm.buf;
	msg.msg_controllen = sizeof(cm.buf);
	do
		r = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
	while (r == -1 && errno == EINTR);
	if (r == -1) {
		snprintf(why, whylen, "fdpass: receive: %s", strerror(errno));
		return -1;
	}
	for (c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
		ncmsg++;
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		if (n > ROOM(got, ngot))
			n = ROOM(got, ngot);
		memcpy(got + ngot, CMSG_DATA(c), n * sizeof(int));
		ngot += n;
	}
	if (r == 0 && ngot == 0 && ncmsg == 0) {
		snprintf(why, whylen, "fdpass: channel closed");
		return FDPASS_EOF;
	}
	if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
		snprintf(why, whylen, "fdpass: message truncated (%s)",
		    msg.msg_flags & MSG_CTRUNC ? "descriptors" : "bytes");
		goto bad;
	}
	if ((ki = check_shape(&in.h, (size_t)r, ngot, ncmsg, kinds, nkinds, why,
		 whylen)) == -1)
		goto bad;
	k = (size_t)ki;
	len = (size_t)r - sizeof(in.h);
	if (len > cap || ngot > maxfds) {
		snprintf(why, whylen,
		    "fdpass: message type %u does not fit "
		    "the caller's buffers",
		    in.h.fh_type);
		goto bad;
	}
	if (len > 0)
		memcpy(buf, in.body, len);
	if (ngot > 0)
		memcpy(fds, got, ngot * sizeof(int));
	return (int)k;
bad:
	close_all(got, ngot);
	return -1;
}
