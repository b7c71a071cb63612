/*
 * util: small helpers every layer may use (macros, exit codes, addresses,
 * SHA-256, logging, unix sockets). Depends on libc and OpenSSL only.
 */
#ifndef SLUICE_UTIL_H
#define SLUICE_UTIL_H

#include <sys/types.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <pthread.h>

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define SL_PRINTF(a, b) __attribute__((__format__(__printf__, a, b)))
#define SL_FALLTHROUGH  __attribute__((__fallthrough__))
#define SL_UNUSED       __attribute__((__unused__))
#define SL_NORETURN     __attribute__((__noreturn__))
#define SL_NELEM(a)     (sizeof(a) / sizeof((a)[0]))

/* Exit codes (DESIGN.md "Command line"). */
#define SL_EXIT_OK      0
#define SL_EXIT_INVALID 1 /* invalid input, verification failed */
#define SL_EXIT_USAGE   2
#define SL_EXIT_RUNTIME 3 /* cannot bind, cannot apply rules */

/* A duration in milliseconds (limits are) as a struct timeval. */
static inline struct timeval
sl_ms_tv(uint64_t ms)
{
	struct timeval tv;

	tv.tv_sec = (time_t)(ms / 1000);
	tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
	return tv;
}

/*
 * CLOCK_MONOTONIC as a struct timeval: for durations, deadlines and
 * expiries (a DNS answer's TTL), which a step of the wall clock (date -s,
 * an NTP step) must not move. The wall clock is for what is dated: a
 * token's claims, the audit's ts (docs/tokens.md "Clocks").
 */
static inline struct timeval
sl_mono_tv(void)
{
	struct timespec ts;
	struct timeval tv;

	if (clock_gettime(CLOCK_MONOTONIC, &ts) == -1)
		ts.tv_sec = ts.tv_nsec = 0;
	tv.tv_sec = ts.tv_sec;
	tv.tv_usec = (suseconds_t)(ts.tv_nsec / 1000);
	return tv;
}

/* CLOCK_MONOTONIC in microseconds (0 if it cannot be read). */
static inline int64_t
sl_mono_us(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_MONOTONIC, &ts) == -1)
		return 0;
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/*
 * One request against a rate of rps a second with a burst of rps (GCRA:
 * tat is the theoretical arrival time, in monotonic microseconds).
 * Returns 0 with *next the new tat (the request fits), or the seconds to
 * wait, at least 1 (*next untouched). rps 0: no limit.
 */
static inline int64_t
sl_gcra(int64_t tat, uint64_t rps, int64_t now_us, int64_t *next)
{
	int64_t t, tau, wait;

	if (rps == 0) {
		*next = tat;
		return 0;
	}
	t = (int64_t)(1000000 / rps);
	if (t < 1)
		t = 1;
	tau = t * (int64_t)(rps - 1);
	if (tat < now_us)
		tat = now_us;
	if (tat - now_us > tau) {
		wait = (tat - tau - now_us + 999999) / 1000000;
		return wait > 0 ? wait : 1;
	}
	*next = tat + t;
	return 0;
}

/* addr.c: "addr:port" text of an IPv4 or IPv6 socket address. */
#define ADDR_STR_LEN 56 /* enough for "[v6]:port" and the NUL */
size_t addr_str(const struct sockaddr *, char *buf, size_t len);
/* *ss = the address in b (4 bytes, or 16 with v6) and port (host order). */
void addr_make(struct sockaddr_storage *ss, int v6, const unsigned char *b,
    uint16_t port);
/*
 * private.c: non-zero when the address is in the "private" list (IPv4,
 * IPv6, and IPv4 embedded in ::ffff:0:0/96, 64:ff9b::/96, 64:ff9b:1::/48,
 * ::/96 and 2002::/16).
 */
int addr_private(const struct sockaddr *sa);

/*
 * digest.c: SHA-256 with the algorithm fetched once (hot paths). Returns
 * 0, or -1 with out zeroed.
 */
int digest_sha256(const void *p, size_t n, unsigned char out[32]);

/* io.c: write all of buf to fd (EINTR retried). 0, or -1 with errno. */
int write_all(int fd, const void *buf, size_t len);

/* log.c */
/* verbose: 1 adds debug lines, -1 leaves out the info lines too. */
void log_init(const char *progname, int verbose);
void log_warn(const char *, ...) SL_PRINTF(1, 2);
void log_warnx(const char *, ...) SL_PRINTF(1, 2);
/*
 * A warning a sandbox can drive (a failed socket() per request): written at
 * most once a second of the monotonic clock; the next one written says how
 * many were folded into silence since. Zero-initialise the state.
 */
struct log_every {
	long long le_sec; /* monotonic second of the last one written */
	unsigned long long le_folded;
	int le_used;
};
void log_warn_every(struct log_every *, const char *, ...) SL_PRINTF(2, 3);
void log_info(const char *, ...) SL_PRINTF(1, 2);
void log_debug(const char *, ...) SL_PRINTF(1, 2);
SL_NORETURN void fatal(const char *, ...) SL_PRINTF(1, 2);
SL_NORETURN void fatalx(const char *, ...) SL_PRINTF(1, 2);
/* Append the drained OpenSSL error queue to buf (never empty on return). */
void log_ssl_errors(char *buf, size_t len);

/*
 * unixsock.c: a listening unix socket for the admin and metrics sockets.
 * A stale socket at path is removed (only if it is a socket), the socket is
 * bound under umask 0177 so it is never wider than mode (e.g. 0600), then
 * chowned to owner unless owner is (uid_t)-1. Returns a non-blocking,
 * close-on-exec listening fd, or -1 with why set.
 */
int unixsock_listen(const char *path, mode_t mode, uid_t owner, gid_t group,
    char *why, size_t whylen);

/*
 * shlock.c: a robust process-shared mutex, in MAP_SHARED memory the forks
 * inherit. init: 0 or an errno. sl_shlock(): 0, or 1 when the last holder
 * died holding it (the lock is now the caller's and consistent again:
 * repair what it guards); any other failure is fatal (what names it).
 */
int sl_shlock_init(pthread_mutex_t *);
int sl_shlock(pthread_mutex_t *, const char *what);
void sl_shunlock(pthread_mutex_t *);

#endif
