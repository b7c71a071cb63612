/*
 * Per-token request budgets (DESIGN.md "Run tokens", docs/tokens.md
 * "Budgets"): how many requests each jti was charged, in
 * <state_dir>/budget.db. The file is mapped MAP_SHARED and every charge is
 * a store into that mapping, so the charge sits in the kernel's page cache
 * before budget_charge() returns and before the request is forwarded: a
 * kill -9 or a restart cannot refund it. (A crash between the charge and
 * the forward wastes one unit; nothing can grant one.) Surviving a power
 * loss is not promised: that would take an fsync per request.
 *
 * The file: a 64-byte header, then two open-addressing tables of
 * `capacity` entries each. One is active (header field); compaction writes
 * the live entries into the other and then flips the active index with one
 * aligned 4-byte store, so a kill at any point leaves one complete table.
 * Entries are keyed by the SHA-256 of the jti and probed linearly; pruned
 * entries become tombstones until the next compaction. Native byte order:
 * the file belongs to this machine.
 *
 * Several processes charge at once: the engines (`workers`, and a
 * reload's draining ones) and the parent, which prunes. Every look at
 * the table and every change to it holds one process-shared robust mutex
 * in an anonymous MAP_SHARED page that the forks inherit, with the live
 * and dead counts beside it. An engine killed while holding it leaves the
 * table whole (each change is ordered so), and the next holder recounts.
 */
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "proxy/http/http1.h"
#include "proxy/http/reason.h"
#include "proxy/token/store.h"
#include "proxy/token/token.h"
#include "proxy/util/util.h"

#define BUDGET_MAGIC    "SLBUDGT1"
#define BUDGET_VERSION  1
#define BUDGET_MIN_CAP  8
#define BUDGET_MAX_CAP  (1u << 24)
#define BUDGET_FILENAME "budget.db"

enum budget_state {
	BE_EMPTY = 0, /* never used since the last compaction */
	BE_LIVE,      /* a jti and its count */
	BE_TOMB       /* pruned: skipped by lookups, reused by inserts */
};

struct budget_hdr {
	char bh_magic[8];     /* BUDGET_MAGIC */
	uint32_t bh_version;  /* BUDGET_VERSION */
	uint32_t bh_capacity; /* entries per table, a power of two */
	uint32_t bh_entsize;  /* sizeof(struct budget_entry) */
	uint32_t bh_active;   /* 0 or 1: the table in use */
	uint32_t bh_pad[10];  /* zero */
};

struct budget_entry {
	unsigned char be_key[32]; /* SHA-256 of the jti */
	int64_t be_exp;           /* token dead after this (exp + leeway) */
	uint64_t be_count;        /* requests charged */
	uint32_t be_state;        /* enum budget_state, written last */
	uint32_t be_pad;
};

/* The file format depends on these sizes (docs/tokens.md "Budgets"). */
_Static_assert(sizeof(struct budget_hdr) == 64, "budget header size");
_Static_assert(sizeof(struct budget_entry) == 56, "budget entry size");

/* Owned by the daemon; budget_close() unmaps, unlocks and frees. */
struct budget {
	int b_fd; /* holds an exclusive flock */
	char *b_path;
	void *b_map;
	size_t b_maplen;
	struct budget_hdr *b_hdr;
	struct budget_entry *b_tab[2];
	uint32_t b_cap;
	struct budget_sync {
		pthread_mutex_t bs_lock; /* robust, process-shared */
		uint32_t bs_live;        /* in the active table */
		uint32_t bs_tomb;
	} * b_sync; /* MAP_SHARED | MAP_ANONYMOUS: shared by the forks */
};

static size_t
budget_size(uint32_t cap)
{
	return sizeof(struct budget_hdr) +
	    2 * (size_t)cap * sizeof(struct budget_entry);
}

/* The table can hold live + tombstones up to 3/4 of its slots. */
static uint32_t
budget_max_load(uint32_t cap)
{
	return cap / 4 * 3;
}

static struct budget_entry *
active(const struct budget *b)
{
	return b->b_tab[b->b_hdr->bh_active & 1];
}

static int budget_count(struct budget *);
static int budget_err(char *, size_t, const char *, const char *, int);

static int
budget_sync_new(struct budget *b, char *why, size_t whylen)
{
	int err;

	b->b_sync = mmap(NULL, sizeof(*b->b_sync), PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (b->b_sync == MAP_FAILED) {
		b->b_sync = NULL;
		return budget_err(why, whylen, b->b_path, "mmap", errno);
	}
	if ((err = sl_shlock_init(&b->b_sync->bs_lock)) != 0)
		return budget_err(why, whylen, b->b_path, "mutex", err);
	return 0;
}

static void
budget_lock(struct budget *b)
{
	/* Its holder died: the tables are whole, the counts not. */
	if (sl_shlock(&b->b_sync->bs_lock, "budget") == 1)
		(void)budget_count(b);
}

static void
budget_unlock(struct budget *b)
{
	sl_shunlock(&b->b_sync->bs_lock);
}

static void
jti_key(const char *jti, unsigned char key[32])
{
	/*
	 * SHA-256 only fails when out of memory; the zero key it leaves then
	 * still names one fixed entry, which fails closed (shared count).
	 */
	(void)digest_sha256(jti, strlen(jti), key);
}

static uint32_t
home(const unsigned char key[32], uint32_t cap)
{
	uint64_t h;

	memcpy(&h, key, sizeof(h));
	return (uint32_t)(h & (cap - 1));
}

/*
 * Probe tab for key. Returns the index of its live entry, or -1 with
 * *slot set to where it would be inserted (the first tombstone on the way,
 * else the empty slot that ended the probe; -1 when neither exists).
 */
static int64_t
probe(const struct budget_entry *tab, uint32_t cap, const unsigned char key[32],
    int64_t *slot)
{
	uint32_t i = home(key, cap), n;
	int64_t tomb = -1;

	for (n = 0; n < cap; n++, i = (i + 1) & (cap - 1)) {
		switch (__atomic_load_n(&tab[i].be_state, __ATOMIC_ACQUIRE)) {
		case BE_EMPTY:
			*slot = tomb >= 0 ? tomb : i;
			return -1;
		case BE_LIVE:
			if (memcmp(tab[i].be_key, key, 32) == 0)
				return i;
			break;
		default:
			if (tomb < 0)
				tomb = i;
			break;
		}
	}
	*slot = tomb;
	return -1;
}

/*
 * Write an entry into a free slot. The state goes last (a release store),
 * so a process killed half-way leaves the slot free rather than a live
 * entry with a torn key or count.
 */
static void
put(struct budget_entry *e, const unsigned char key[32], int64_t exp,
    uint64_t count)
{
	memcpy(e->be_key, key, 32);
	e->be_exp = exp;
	e->be_count = count;
	e->be_pad = 0;
	__atomic_store_n(&e->be_state, BE_LIVE, __ATOMIC_RELEASE);
}

/*
 * Copy the live entries into the inactive table and make it the active
 * one. Crash-safe: until the flip the old table is untouched and active.
 */
static void
compact(struct budget *b)
{
	struct budget_entry *from = active(b);
	uint32_t next = (b->b_hdr->bh_active & 1) ^ 1;
	struct budget_entry *to = b->b_tab[next];
	int64_t slot;
	uint32_t i;

	memset(to, 0, (size_t)b->b_cap * sizeof(*to));
	for (i = 0; i < b->b_cap; i++) {
		if (from[i].be_state != BE_LIVE)
			continue;
		if (probe(to, b->b_cap, from[i].be_key, &slot) < 0 && slot >= 0)
			put(&to[slot], from[i].be_key, from[i].be_exp,
			    from[i].be_count);
	}
	__atomic_store_n(&b->b_hdr->bh_active, next, __ATOMIC_RELEASE);
	b->b_sync->bs_tomb = 0;
}

/* Count the live and dead entries of the active table; -1: a bad state. */
static int
budget_count(struct budget *b)
{
	const struct budget_entry *tab = active(b);
	uint32_t i;
	int rc = 0;

	b->b_sync->bs_live = b->b_sync->bs_tomb = 0;
	for (i = 0; i < b->b_cap; i++) {
		switch (__atomic_load_n(&tab[i].be_state, __ATOMIC_ACQUIRE)) {
		case BE_EMPTY:
			break;
		case BE_LIVE:
			b->b_sync->bs_live++;
			break;
		case BE_TOMB:
			b->b_sync->bs_tomb++;
			break;
		default:
			rc = -1;
			break;
		}
	}
	return rc;
}

static int
budget_err(char *why, size_t whylen, const char *path, const char *what,
    int err)
{
	if (err != 0)
		snprintf(why, whylen, "%s: %s: %s", path, what, strerror(err));
	else
		snprintf(why, whylen, "%s: %s", path, what);
	return -1;
}

/*
 * Create the file under a temporary name and rename it into place, so
 * that a crash never leaves a half-written budget.db (which open would
 * then refuse as corrupt).
 */
static int
budget_create(const char *path, uint32_t cap, char *why, size_t whylen)
{
	struct budget_hdr h;
	char tmp[4096];
	int fd, err;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp))
		return budget_err(why, whylen, path, "path too long", 0);
	if (unlink(tmp) == -1 && errno != ENOENT)
		return budget_err(why, whylen, tmp, "unlink", errno);
	fd =
	    open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd == -1)
		return budget_err(why, whylen, tmp, "create", errno);
	memset(&h, 0, sizeof(h));
	memcpy(h.bh_magic, BUDGET_MAGIC, sizeof(h.bh_magic));
	h.bh_version = BUDGET_VERSION;
	h.bh_capacity = cap;
	h.bh_entsize = sizeof(struct budget_entry);
	/*
	 * Allocate every block now: a store into a hole of a MAP_SHARED
	 * mapping on a full disk is a SIGBUS, and the sandbox may be able
	 * to fill the disk.
	 */
	err = fchmod(fd, 0600) == -1 ? errno : 0;
	if (err == 0)
		err = posix_fallocate(fd, 0, (off_t)budget_size(cap));
	errno = 0;
	if (err == 0 && pwrite(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h))
		err = errno != 0 ? errno : EIO;
	if (err == 0 && (fsync(fd) == -1 || rename(tmp, path) == -1))
		err = errno;
	close(fd);
	if (err != 0) {
		unlink(tmp);
		return budget_err(why, whylen, path, "create", err);
	}
	return 0;
}

/*
 * Check the header and size of an open file, and map it. A file created
 * just now holds no entry: it is not walked (the walk faults in half the
 * file, a few milliseconds of every fresh start).
 */
static int
budget_map(struct budget *b, int fresh, char *why, size_t whylen)
{
	struct budget_hdr h;
	struct stat st;
	int err;

	if (fstat(b->b_fd, &st) == -1)
		return budget_err(why, whylen, b->b_path, "stat", errno);
	if (!S_ISREG(st.st_mode))
		return budget_err(why, whylen, b->b_path, "not a regular file",
		    0);
	/* Another user able to write it could grant budget. */
	if ((st.st_uid != 0 && st.st_uid != geteuid()) ||
	    (st.st_mode & 077) != 0)
		return budget_err(why, whylen, b->b_path,
		    "must be owned by root or by us and have mode 0600", 0);
	if (pread(b->b_fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
	    memcmp(h.bh_magic, BUDGET_MAGIC, sizeof(h.bh_magic)) != 0 ||
	    h.bh_version != BUDGET_VERSION ||
	    h.bh_entsize != sizeof(struct budget_entry) ||
	    h.bh_capacity < BUDGET_MIN_CAP || h.bh_capacity > BUDGET_MAX_CAP ||
	    (h.bh_capacity & (h.bh_capacity - 1)) != 0 || h.bh_active > 1 ||
	    (uint64_t)st.st_size != budget_size(h.bh_capacity))
		return budget_err(why, whylen, b->b_path,
		    "corrupt or foreign file (refusing to reset it)", 0);
	b->b_cap = h.bh_capacity;
	b->b_maplen = budget_size(b->b_cap);
	if ((err = posix_fallocate(b->b_fd, 0, (off_t)b->b_maplen)) != 0)
		return budget_err(why, whylen, b->b_path, "fallocate", err);
	b->b_map = mmap(NULL, b->b_maplen, PROT_READ | PROT_WRITE, MAP_SHARED,
	    b->b_fd, 0);
	if (b->b_map == MAP_FAILED) {
		b->b_map = NULL;
		return budget_err(why, whylen, b->b_path, "mmap", errno);
	}
	if (budget_sync_new(b, why, whylen) == -1)
		return -1;
	b->b_hdr = b->b_map;
	b->b_tab[0] = (struct budget_entry *)(b->b_hdr + 1);
	b->b_tab[1] = b->b_tab[0] + b->b_cap;
	if (!fresh && budget_count(b) == -1)
		return budget_err(why, whylen, b->b_path,
		    "corrupt entry (refusing to reset it)", 0);
	if (b->b_sync->bs_live + b->b_sync->bs_tomb > budget_max_load(b->b_cap))
		return budget_err(why, whylen, b->b_path,
		    "corrupt: table over its load limit", 0);
	return 0;
}

/*
 * As budget_open(), with the capacity (entries per table, a power of two
 * from 8 to 2^24) that a new file gets; an existing file keeps its own.
 */
struct budget *
budget_open_capacity(const char *state_dir, uint32_t capacity, char *why,
    size_t whylen)
{
	struct budget *b;
	char path[4096];
	int fresh = 0;

	if (capacity < BUDGET_MIN_CAP || capacity > BUDGET_MAX_CAP ||
	    (capacity & (capacity - 1)) != 0) {
		snprintf(why, whylen,
		    "budget capacity %u: not a power of two "
		    "from %u to %u",
		    capacity, BUDGET_MIN_CAP, BUDGET_MAX_CAP);
		return NULL;
	}
	if ((size_t)snprintf(path, sizeof(path), "%s/%s", state_dir,
		BUDGET_FILENAME) >= sizeof(path)) {
		snprintf(why, whylen, "%s: path too long", state_dir);
		return NULL;
	}
	if ((b = calloc(1, sizeof(*b))) == NULL ||
	    (b->b_path = strdup(path)) == NULL) {
		free(b);
		snprintf(why, whylen, "%s: out of memory", path);
		return NULL;
	}
	b->b_fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (b->b_fd == -1 && errno == ENOENT) {
		if (budget_create(path, capacity, why, whylen) == -1)
			goto fail;
		b->b_fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
		fresh = 1;
	}
	if (b->b_fd == -1) {
		budget_err(why, whylen, path, "open", errno);
		goto fail;
	}
	/* Two daemons sharing one table would each trust their own view. */
	if (flock(b->b_fd, LOCK_EX | LOCK_NB) == -1) {
		budget_err(why, whylen, path,
		    errno == EWOULDBLOCK ? "in use by another process" :
					   "flock",
		    errno == EWOULDBLOCK ? 0 : errno);
		goto fail;
	}
	if (budget_map(b, fresh, why, whylen) == -1)
		goto fail;
	return b;
fail:
	budget_close(b);
	return NULL;
}

/*
 * Open (or create, mode 0600) <state_dir>/budget.db with BUDGET_CAPACITY
 * entries. An existing file must be ours (owner root or the effective uid,
 * no group/other bits) and pass the header and size checks: a corrupt file
 * is an error, never silently reset (that would refund every budget).
 * Returns the table, or NULL with why set ("path: reason").
 */
struct budget *
budget_open(const char *state_dir, char *why, size_t whylen)
{
	return budget_open_capacity(state_dir, BUDGET_CAPACITY, why, whylen);
}

void
budget_close(struct budget *b)
{
	if (b == NULL)
		return;
	if (b->b_map != NULL)
		munmap(b->b_map, b->b_maplen);
	if (b->b_sync != NULL)
		munmap(b->b_sync, sizeof(*b->b_sync));
	if (b->b_fd != -1)
		close(b->b_fd);
	free(b->b_path);
	free(b);
}

uint64_t
budget_used(struct budget *b, const char *jti)
{
	unsigned char key[32];
	int64_t i, slot;
	uint64_t n = 0;

	if (b == NULL || jti == NULL)
		return 0;
	jti_key(jti, key);
	budget_lock(b);
	if ((i = probe(active(b), b->b_cap, key, &slot)) >= 0)
		n = __atomic_load_n(&active(b)[i].be_count, __ATOMIC_ACQUIRE);
	budget_unlock(b);
	return n;
}

/*
 * Charge one request (proxy.h). exp is the token's exp claim (or exp +
 * leeway); the entry is kept until BUDGET_PRUNE_GRACE after it. limit 0 means
 * no limit: nothing is charged and 0 is returned with *used the current count.
 * Returns -1 when the jti is new and the table already holds BUDGET_CAPACITY *
 * 3/4 live entries even after compaction: the request must then be denied.
 */
static int charge_locked(struct budget *, const unsigned char[32], int64_t,
    uint64_t, uint64_t *);

int
budget_charge(struct budget *b, const char *jti, int64_t exp, uint64_t limit,
    uint64_t *used)
{
	unsigned char key[32];
	int rc;

	*used = 0;
	if (b == NULL || jti == NULL)
		return -1;
	if (limit == 0) {
		*used = budget_used(b, jti);
		return 0;
	}
	jti_key(jti, key);
	budget_lock(b);
	rc = charge_locked(b, key, exp, limit, used);
	budget_unlock(b);
	return rc;
}

/* budget_charge() with the lock held. */
static int
charge_locked(struct budget *b, const unsigned char key[32], int64_t exp,
    uint64_t limit, uint64_t *used)
{
	struct budget_entry *tab = active(b), *e;
	int64_t i, slot;
	uint64_t n;

	if ((i = probe(tab, b->b_cap, key, &slot)) >= 0) {
		e = &tab[i];
		/*
		 * Atomic stores still: a kill -9 between two of them must
		 * leave a count that was charged, never one torn.
		 */
		n = __atomic_load_n(&e->be_count, __ATOMIC_ACQUIRE);
		if (n >= limit) {
			*used = n;
			return 1;
		}
		__atomic_store_n(&e->be_count, n + 1, __ATOMIC_RELEASE);
		if (exp > e->be_exp)
			e->be_exp = exp;
		*used = n + 1;
		return 0;
	}
	if (slot < 0 || tab[slot].be_state == BE_EMPTY) {
		/* A new slot: keep the load (and so every probe) bounded. */
		if (b->b_sync->bs_live + b->b_sync->bs_tomb + 1 >
		    budget_max_load(b->b_cap)) {
			if (b->b_sync->bs_tomb == 0)
				return -1;
			compact(b);
			tab = active(b);
			if (probe(tab, b->b_cap, key, &slot) >= 0 || slot < 0 ||
			    b->b_sync->bs_live + 1 > budget_max_load(b->b_cap))
				return -1;
		}
	}
	if (tab[slot].be_state == BE_TOMB)
		b->b_sync->bs_tomb--;
	put(&tab[slot], key, exp, 1);
	b->b_sync->bs_live++;
	*used = 1;
	return 0;
}

void
budget_fill(const struct budget *b, uint64_t *live, uint64_t *limit)
{
	*live = b != NULL ? b->b_sync->bs_live : 0;
	*limit = b != NULL ? budget_max_load(b->b_cap) : 0;
}

/*
 * Turn the entries of tokens dead for more than BUDGET_PRUNE_GRACE into
 * tombstones, and compact the table once tombstones take an eighth of it.
 * The grace is longer than the largest leeway a policy may set, so an
 * entry is never dropped while its token can still be accepted: not when
 * a caller passed the bare exp claim, nor after a reload raised leeway_s.
 * Dropping it early would refund the budget.
 */
void
budget_prune(struct budget *b, int64_t now)
{
	struct budget_entry *tab;
	int64_t before;
	uint32_t i;

	if (b == NULL)
		return;
	if (__builtin_sub_overflow(now, BUDGET_PRUNE_GRACE, &before))
		return;
	budget_lock(b);
	tab = active(b);
	/* No live entry (a fresh table): no walk, no pages faulted in. */
	for (i = 0; b->b_sync->bs_live > 0 && i < b->b_cap; i++)
		if (tab[i].be_state == BE_LIVE && tab[i].be_exp < before) {
			__atomic_store_n(&tab[i].be_state, BE_TOMB,
			    __ATOMIC_RELEASE);
			b->b_sync->bs_live--;
			b->b_sync->bs_tomb++;
		}
	if (b->b_sync->bs_tomb > 0 && b->b_sync->bs_tomb >= b->b_cap / 8)
		compact(b);
	budget_unlock(b);
}

void
budget_rescan(struct budget *b)
{
	if (b == NULL)
		return;
	budget_lock(b);
	(void)budget_count(b);
	budget_unlock(b);
}
