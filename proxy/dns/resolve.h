/*
 * dns: the stub resolver (resolve.c) over the pure message code (dnsmsg.h).
 */
#ifndef SLUICE_RESOLVE_H
#define SLUICE_RESOLVE_H

#include <sys/socket.h>

#include <stddef.h>
#include <stdint.h>

struct event_base;

/*
 * resolve.c: the stub resolver for upstream names (DESIGN.md "Resolving
 * upstream names safely"): per query a fresh UDP socket connected to port
 * 53 of a configured server, a random id and 0x20 case bits, TCP when the
 * answer is truncated, 2 attempts of 2 s rotating over the servers. Answers
 * that fail dnsmsg_parse() are ignored. Sockets are made per query, so
 * they carry the uid sluice has then (after the privilege drop).
 */
#define RESOLVE_MAX_SERVERS 16
#define RESOLVE_MAX_ADDRS   16 /* addresses one answer gives at most */

enum resolve_status {
	RESOLVE_OK = 0,   /* an answer (n may be 0: no record of the type) */
	RESOLVE_NXDOMAIN, /* the name does not exist */
	RESOLVE_FAIL      /* no valid answer in time, or no server */
};
struct resolve_req;
/*
 * A query's result: addrs holds n addresses (4 bytes each for A, 16 for
 * AAAA), ttl the smallest TTL of the records used. The request is already
 * freed when this runs; it never runs inside resolve_start().
 */
typedef void resolve_cb(enum resolve_status, const unsigned char (*addrs)[16],
    size_t n, uint32_t ttl, void *arg);
int resolve_init(struct event_base *);
/*
 * Use servers[0..n) (IP literals, port 53: the policy's
 * netpolicy.resolvers), or when n is 0 the nameserver lines of
 * /etc/resolv.conf. Returns 0, or -1 with why set (the servers in use
 * then stay).
 */
int resolve_configure(char *const *servers, size_t n, char *why, size_t whylen);
/* Use these servers (address and port; tests). At most RESOLVE_MAX_SERVERS. */
void resolve_set_servers(const struct sockaddr_storage *, size_t n);
/* The nameserver lines of a resolv.conf file (port 53). 0 or -1. */
int resolve_conf_read(const char *path, struct sockaddr_storage *out,
    size_t max, size_t *n);
/*
 * Ask for name's A or AAAA records (DNSMSG_QTYPE_*). Returns the request
 * (cb runs once, later, unless it is cancelled), or NULL out of memory.
 */
struct resolve_req *
resolve_start(const char *name, uint16_t qtype, resolve_cb *cb, void *arg);
/* Stop a request and free it: its callback will not run. NULL is a no-op. */
void resolve_cancel(struct resolve_req *);
/* Free every request left (at exit), without callbacks. */
void resolve_shutdown(void);

#endif
