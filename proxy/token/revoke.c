/*
 * Revoked run tokens (DESIGN.md "Run tokens", docs/tokens.md
 * "Revocation"). Two sources: the policy's revoked_file, parsed here into
 * a sorted array that travels with the policy snapshot (cf_revoked, so a
 * SIGHUP reloads it), and admin revocations, kept in a hash set and in the
 * append-only <state_dir>/revoked.admin, which is fsync'd before a
 * revocation counts as done and read back at start. The admin socket
 * itself lives in admin.c.
 */
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proxy/http/http1.h"
#include "proxy/http/reason.h"
#include "proxy/token/store.h"
#include "proxy/token/token.h"
#include "proxy/util/util.h"

#define REVOKE_FILENAME  "revoked.admin"
#define REVOKE_MAX_FILE  (64 * 1024 * 1024) /* bytes of either file */
#define REVOKE_MAX_LINES (1u << 20)         /* jtis in either file */

/* Owned by the daemon; revocations_close() frees it. */
struct revocations {
	int rv_fd; /* revoked.admin, O_APPEND */
	char *rv_path;
	char **rv_slot; /* open addressing, NULL is free */
	size_t rv_cap;  /* a power of two */
	size_t rv_n;
};

/*
 * Why a jti cannot be written to or read from a one-per-line file, or
 * NULL when it can. The same rules hold for both files so that every jti
 * an admin can revoke survives a restart unchanged.
 */
static const char *
jti_bad(const char *s, size_t n)
{
	size_t i;

	if (n == 0)
		return "empty jti";
	if (n > TOKEN_MAX_STR)
		return "jti longer than 128 bytes";
	if (s[0] == '#')
		return "jti starts with '#' (a comment)";
	if (s[0] == ' ' || s[0] == '\t' || s[n - 1] == ' ' || s[n - 1] == '\t')
		return "leading or trailing blank";
	for (i = 0; i < n; i++) {
		if (s[i] == '\r')
			return "carriage return (use LF line ends)";
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return "control character";
	}
	return NULL;
}

/* FNV-1a: the set holds admin input only, so no flooding concern. */
static uint64_t
jti_hash(const char *s)
{
	uint64_t h = 14695981039346656037ULL;

	for (; *s != '\0'; s++) {
		h ^= (unsigned char)*s;
		h *= 1099511628211ULL;
	}
	return h;
}

static size_t
set_find(const struct revocations *r, const char *jti)
{
	size_t i = (size_t)jti_hash(jti) & (r->rv_cap - 1);

	while (r->rv_slot[i] != NULL && strcmp(r->rv_slot[i], jti) != 0)
		i = (i + 1) & (r->rv_cap - 1);
	return i;
}

/* Insert, taking ownership of s (freed on failure); -1 when out of memory. */
static int
set_add(struct revocations *r, char *s)
{
	char **old = r->rv_slot, **slot;
	size_t oldcap = r->rv_cap, i, j;

	if ((r->rv_n + 1) * 2 > r->rv_cap) {
		if ((slot = calloc(oldcap * 2, sizeof(*slot))) == NULL) {
			free(s);
			return -1;
		}
		r->rv_slot = slot;
		r->rv_cap = oldcap * 2;
		for (i = 0; i < oldcap; i++)
			if (old[i] != NULL) {
				j = set_find(r, old[i]);
				r->rv_slot[j] = old[i];
			}
		free(old);
	}
	i = set_find(r, s);
	if (r->rv_slot[i] != NULL) {
		free(s);
		return 0;
	}
	r->rv_slot[i] = s;
	r->rv_n++;
	return 0;
}

/*
 * Read a whole regular file of at most REVOKE_MAX_FILE bytes from fd.
 * Returns a malloc'd, NUL-terminated buffer, or NULL with why set.
 */
static char *
slurp(int fd, const char *path, size_t *len, char *why, size_t whylen)
{
	struct stat st;
	char *buf;
	size_t off = 0;
	ssize_t n;

	if (fstat(fd, &st) == -1) {
		snprintf(why, whylen, "%s: %s", path, strerror(errno));
		return NULL;
	}
	if (!S_ISREG(st.st_mode) || st.st_size > (off_t)REVOKE_MAX_FILE) {
		snprintf(why, whylen,
		    "%s: not a regular file of at most %d "
		    "bytes",
		    path, REVOKE_MAX_FILE);
		return NULL;
	}
	if ((buf = malloc((size_t)st.st_size + 1)) == NULL) {
		snprintf(why, whylen, "%s: out of memory", path);
		return NULL;
	}
	while (off < (size_t)st.st_size) {
		n = pread(fd, buf + off, (size_t)st.st_size - off, (off_t)off);
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		off += (size_t)n;
	}
	if (off != (size_t)st.st_size) {
		snprintf(why, whylen, "%s: short read", path);
		free(buf);
		return NULL;
	}
	buf[off] = '\0';
	*len = off;
	return buf;
}

static int
cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void
strv_free(char **v, size_t n)
{
	size_t i;

	if (v == NULL)
		return;
	for (i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

/*
 * Split buf into jtis, one per line. comments: '#' lines and empty lines
 * are skipped (revoked_file); without it every line must be a jti
 * (revoked.admin, which only we write). The last line may lack its LF.
 */
static int
parse_lines(const char *path, const char *buf, size_t len, int comments,
    char ***out, size_t *nout, char *why, size_t whylen)
{
	char **v = NULL, **nv;
	size_t n = 0, cap = 0, line = 0, ll;
	const char *p = buf, *end = buf + len, *nl, *bad;

	while (p < end) {
		line++;
		nl = memchr(p, '\n', (size_t)(end - p));
		ll = nl != NULL ? (size_t)(nl - p) : (size_t)(end - p);
		if (comments && (ll == 0 || p[0] == '#'))
			goto next;
		if (memchr(p, '\0', ll) != NULL)
			bad = "NUL byte";
		else
			bad = jti_bad(p, ll);
		if (bad != NULL) {
			snprintf(why, whylen, "%s:%zu: %s", path, line, bad);
			goto fail;
		}
		if (n == REVOKE_MAX_LINES) {
			snprintf(why, whylen, "%s:%zu: more than %u jtis", path,
			    line, REVOKE_MAX_LINES);
			goto fail;
		}
		if (n == cap) {
			cap = cap == 0 ? 64 : cap * 2;
			if ((nv = realloc(v, cap * sizeof(*v))) == NULL)
				goto oom;
			v = nv;
		}
		if ((v[n] = strndup(p, ll)) == NULL)
			goto oom;
		n++;
next:
		if (nl == NULL)
			break;
		p = nl + 1;
	}
	*out = v;
	*nout = n;
	return 0;
oom:
	snprintf(why, whylen, "%s: out of memory", path);
fail:
	strv_free(v, n);
	return -1;
}

int
revocations_read_file(const char *path, char ***jtis, size_t *n, char *why,
    size_t whylen)
{
	char *buf, **v = NULL;
	size_t len, nv = 0, i, j;
	int fd, rc;

	*jtis = NULL;
	*n = 0;
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1) {
		snprintf(why, whylen, "%s: %s", path, strerror(errno));
		return -1;
	}
	buf = slurp(fd, path, &len, why, whylen);
	close(fd);
	if (buf == NULL)
		return -1;
	rc = parse_lines(path, buf, len, 1, &v, &nv, why, whylen);
	free(buf);
	if (rc == -1)
		return -1;
	if (nv == 0) {
		free(v);
		return 0;
	}
	/* Sorted for bsearch in revocations_has(); duplicates dropped. */
	qsort(v, nv, sizeof(*v), cmp_str);
	for (i = 1, j = 1; i < nv; i++) {
		if (strcmp(v[i], v[j - 1]) == 0)
			free(v[i]);
		else
			v[j++] = v[i];
	}
	*jtis = v;
	*n = j;
	return 0;
}

void
revocations_close(struct revocations *r)
{
	size_t i;

	if (r == NULL)
		return;
	if (r->rv_fd != -1)
		close(r->rv_fd);
	for (i = 0; i < r->rv_cap; i++)
		free(r->rv_slot[i]);
	free(r->rv_slot);
	free(r->rv_path);
	free(r);
}

/*
 * Open (or create, mode 0600) <state_dir>/revoked.admin and load it. The
 * file must be ours (owner root or the effective uid, no group/other
 * bits): whoever can write it can lift a revocation. A line that breaks
 * the jti rules is an error (fail closed). A last line without its LF
 * (a crash during an append) is kept, and terminated so that the next
 * append does not run into it.
 */
struct revocations *
revocations_open(const char *state_dir, char *why, size_t whylen)
{
	struct revocations *r;
	struct stat st;
	char path[4096], *buf = NULL, **v = NULL;
	size_t len = 0, nv = 0, i;

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", state_dir,
		REVOKE_FILENAME) >= sizeof(path)) {
		snprintf(why, whylen, "%s: path too long", state_dir);
		return NULL;
	}
	if ((r = calloc(1, sizeof(*r))) == NULL ||
	    (r->rv_path = strdup(path)) == NULL ||
	    (r->rv_slot = calloc(64, sizeof(*r->rv_slot))) == NULL) {
		if (r != NULL)
			free(r->rv_path);
		free(r);
		snprintf(why, whylen, "%s: out of memory", path);
		return NULL;
	}
	r->rv_cap = 64;
	r->rv_fd = open(path,
	    O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (r->rv_fd == -1) {
		snprintf(why, whylen, "%s: %s", path, strerror(errno));
		goto fail;
	}
	if (fstat(r->rv_fd, &st) == -1 ||
	    (st.st_uid != 0 && st.st_uid != geteuid()) ||
	    (st.st_mode & 077) != 0) {
		snprintf(why, whylen,
		    "%s: must be owned by root or by us and "
		    "have mode 0600",
		    path);
		goto fail;
	}
	if ((buf = slurp(r->rv_fd, path, &len, why, whylen)) == NULL ||
	    parse_lines(path, buf, len, 0, &v, &nv, why, whylen) == -1)
		goto fail;
	for (i = 0; i < nv; i++) {
		if (set_add(r, v[i]) == -1) {
			/* set_add() freed v[i]; the rest is ours, v at fail. */
			snprintf(why, whylen, "%s: out of memory", path);
			while (++i < nv)
				free(v[i]);
			goto fail;
		}
	}
	free(v);
	v = NULL;
	if (len > 0 && buf[len - 1] != '\n' &&
	    (write_all(r->rv_fd, "\n", 1) == -1 || fsync(r->rv_fd) == -1)) {
		snprintf(why, whylen, "%s: %s", path, strerror(errno));
		goto fail;
	}
	free(buf);
	return r;
fail:
	free(buf);
	free(v);
	revocations_close(r);
	return NULL;
}

int
revocations_add(struct revocations *r, const char *jti, char *why,
    size_t whylen)
{
	char line[TOKEN_MAX_STR + 2], *copy;
	const char *bad;
	size_t n;

	if (r == NULL || jti == NULL) {
		snprintf(why, whylen, "revocations not open");
		return -1;
	}
	n = strlen(jti);
	if ((bad = jti_bad(jti, n)) != NULL) {
		snprintf(why, whylen, "%s", bad);
		return -1;
	}
	if (r->rv_slot[set_find(r, jti)] != NULL)
		return 0;
	memcpy(line, jti, n);
	line[n] = '\n';
	/* Durable first: a revocation acknowledged must survive a crash. */
	if (write_all(r->rv_fd, line, n + 1) == -1 || fsync(r->rv_fd) == -1) {
		snprintf(why, whylen, "%s: %s", r->rv_path, strerror(errno));
		return -1;
	}
	if ((copy = strdup(jti)) == NULL || set_add(r, copy) == -1) {
		/* Revoked on disk already; in memory from the next start. */
		snprintf(why, whylen, "out of memory");
		return -1;
	}
	return 0;
}

void
revocations_forget_file(struct revocations *r)
{
	if (r == NULL || r->rv_fd == -1)
		return;
	close(r->rv_fd);
	r->rv_fd = -1;
}

int
revocations_add_mem(struct revocations *r, const char *jti, char *why,
    size_t whylen)
{
	const char *bad;
	char *copy;

	if (r == NULL || jti == NULL) {
		snprintf(why, whylen, "revocations not open");
		return -1;
	}
	if ((bad = jti_bad(jti, strlen(jti))) != NULL) {
		snprintf(why, whylen, "%s", bad);
		return -1;
	}
	if (r->rv_slot[set_find(r, jti)] != NULL)
		return 0;
	if ((copy = strdup(jti)) == NULL || set_add(r, copy) == -1) {
		snprintf(why, whylen, "out of memory");
		return -1;
	}
	return 0;
}

int
revocations_has(const struct revocations *r, char *const *listed,
    size_t nlisted, const char *jti)
{
	if (jti == NULL)
		return 0;
	if (listed != NULL && nlisted > 0 &&
	    bsearch(&jti, listed, nlisted, sizeof(*listed), cmp_str) != NULL)
		return 1;
	return r != NULL && r->rv_slot[set_find(r, jti)] != NULL;
}
