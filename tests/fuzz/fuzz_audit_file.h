/*
 * The set-up shared by the audit fuzz targets: the real writer on a
 * temporary file (fsync "never", chained, no event loop), the file opened
 * for reading back, and both removed at exit. One target per program, so
 * the state is static here.
 */
#ifndef SLUICE_FUZZ_AUDIT_FILE_H
#define SLUICE_FUZZ_AUDIT_FILE_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proxy/proxy.h"

static struct audit *aw;  /* the writer */
static int rfd = -1;      /* the file, read back */
static char path[512];    /* the file */
static const char *fz_me; /* the target's name, in messages */

static void
check(int cond, const char *what)
{
	if (!cond) {
		fprintf(stderr, "%s invariant broken: %s\n", fz_me, what);
		abort();
	}
}

static void
fz_audit_cleanup(void)
{
	char dir[512];
	char *slash;

	audit_close(aw);
	if (rfd != -1)
		close(rfd);
	(void)unlink(path);
	snprintf(dir, sizeof(dir), "%s", path);
	if ((slash = strrchr(dir, '/')) != NULL) {
		*slash = '\0';
		(void)rmdir(dir);
	}
}

/* Opens the writer on a new file under $TMPDIR (or /tmp). */
static void
fz_audit_open(const char *me)
{
	const char *tmp = getenv("TMPDIR");
	struct audit_conf ac;
	char dir[400], why[256];

	fz_me = me;
	snprintf(dir, sizeof(dir), "%s/sluice-%s-XXXXXX",
	    tmp != NULL ? tmp : "/tmp", me);
	check(mkdtemp(dir) != NULL, "mkdtemp");
	snprintf(path, sizeof(path), "%s/audit.jsonl", dir);
	memset(&ac, 0, sizeof(ac));
	ac.ac_path = path;
	ac.ac_fsync = AUDIT_FSYNC_NEVER;
	ac.ac_chain = 1;
	aw = audit_open(&ac, NULL, NULL, why, sizeof(why));
	if (aw == NULL)
		fprintf(stderr, "%s: %s\n", me, why);
	check(aw != NULL, "audit_open");
	rfd = open(path, O_RDONLY);
	check(rfd != -1, "open the log");
	atexit(fz_audit_cleanup);
}

#endif
