/*
 * Helpers shared by the netpolicy files and nobody else. Not part of the
 * library's interface (netpolicy.h is).
 */
#ifndef SLUICE_NP_PRIVATE_H
#define SLUICE_NP_PRIVATE_H

#include <sys/types.h>

#include <stddef.h>
#include <stdint.h>

/* Fill why (may be NULL) with a formatted one-line reason. */
void np_why(char *why, size_t whylen, const char *fmt, ...)
    __attribute__((__format__(__printf__, 3, 4)));

struct np_set;
struct np_elem;

/* Render one element of set ("198.18.0.10 . 443") into buf; its length. */
size_t np_elem_text(const struct np_set *set, const struct np_elem *el,
    char *buf, size_t buflen);

struct mnl_socket;

/*
 * Open and bind a NETLINK_NETFILTER socket with extended and capped ACKs
 * (nl.c). Returns the socket and its portid, or NULL with why set.
 */
struct mnl_socket *np_nl_open(uint32_t *portid, char *why, size_t whylen);

/*
 * Receive one netlink datagram on fd into buf (nl.c). Returns its length;
 * 0 when the datagram did not come from the kernel (another process in the
 * namespace, which may be the sandbox, sent it) and was dropped; -1 with
 * errno (ENOSPC when it was truncated).
 */
ssize_t np_nl_recv(int fd, void *buf, size_t len, int flags);

/*
 * Wait at most timeout_ms for a datagram from the kernel on nl and read it
 * into buf (nl.c): its length (> 0), or -1 with errno (ETIMEDOUT). An
 * interrupted wait or read, or a datagram np_nl_recv() dropped, is waited
 * for again, for timeout_ms anew.
 */
ssize_t
np_nl_recv_wait(struct mnl_socket *nl, void *buf, size_t len, int timeout_ms);

#endif
