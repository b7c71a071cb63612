/*
 * The operational log: one line per message on stderr, prefixed with the
 * program name. The audit log is a separate writer (audit.c). Nothing here
 * ever formats a secret: callers pass names and reasons, not values.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/err.h>

#include "proxy/util/util.h"

static const char *log_prog = "sluice";
static int log_verbose;

void
log_init(const char *progname, int verbose)
{
	log_prog = progname;
	log_verbose = verbose;
}

static void log_vwrite(const char *, int, const char *, va_list)
    __attribute__((__format__(__printf__, 3, 0)));

static void
log_vwrite(const char *prefix, int errnum, const char *fmt, va_list ap)
{
	char msg[1024];

	(void)vsnprintf(msg, sizeof(msg), fmt, ap); /* cut is fine */
	if (errnum != 0)
		fprintf(stderr, "%s: %s%s: %s\n", log_prog, prefix, msg,
		    strerror(errnum));
	else
		fprintf(stderr, "%s: %s%s\n", log_prog, prefix, msg);
}

void
log_warn(const char *fmt, ...)
{
	va_list ap;
	int saved = errno;

	va_start(ap, fmt);
	log_vwrite("", saved, fmt, ap);
	va_end(ap);
	errno = saved;
}

void
log_warn_every(struct log_every *le, const char *fmt, ...)
{
	char msg[1024];
	struct timespec ts;
	va_list ap;
	int saved = errno;

	if (clock_gettime(CLOCK_MONOTONIC, &ts) == -1)
		ts.tv_sec = 0;
	if (le->le_used && (long long)ts.tv_sec == le->le_sec) {
		le->le_folded++;
		errno = saved;
		return;
	}
	va_start(ap, fmt);
	(void)vsnprintf(msg, sizeof(msg), fmt, ap); /* cut is fine */
	va_end(ap);
	if (le->le_folded > 0)
		fprintf(stderr, "%s: %s: %s (and %llu more like it since)\n",
		    log_prog, msg, strerror(saved), le->le_folded);
	else
		fprintf(stderr, "%s: %s: %s\n", log_prog, msg, strerror(saved));
	le->le_used = 1;
	le->le_sec = (long long)ts.tv_sec;
	le->le_folded = 0;
	errno = saved;
}

void
log_warnx(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vwrite("", 0, fmt, ap);
	va_end(ap);
}

void
log_info(const char *fmt, ...)
{
	va_list ap;

	if (log_verbose < 0)
		return;
	va_start(ap, fmt);
	log_vwrite("", 0, fmt, ap);
	va_end(ap);
}

void
log_debug(const char *fmt, ...)
{
	va_list ap;

	if (log_verbose <= 0)
		return;
	va_start(ap, fmt);
	log_vwrite("debug: ", 0, fmt, ap);
	va_end(ap);
}

void
fatal(const char *fmt, ...)
{
	va_list ap;
	int saved = errno;

	va_start(ap, fmt);
	log_vwrite("fatal: ", saved, fmt, ap);
	va_end(ap);
	exit(SL_EXIT_RUNTIME);
}

void
fatalx(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vwrite("fatal: ", 0, fmt, ap);
	va_end(ap);
	exit(SL_EXIT_RUNTIME);
}

void
log_ssl_errors(char *buf, size_t len)
{
	unsigned long e;
	size_t off = 0;
	int first = 1;

	if (len == 0)
		return;
	buf[0] = '\0';
	/* Drain the whole queue so no stale error reaches the next report. */
	while ((e = ERR_get_error()) != 0) {
		char one[256];

		if (off + 3 >= len)
			continue;
		ERR_error_string_n(e, one, sizeof(one));
		off += (size_t)snprintf(buf + off, len - off, "%s%s",
		    first ? "" : "; ", one);
		if (off >= len)
			off = len - 1;
		first = 0;
	}
	if (first)
		snprintf(buf, len, "unknown TLS error");
}
