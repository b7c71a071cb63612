/*
 * What the engines count together (`workers`: N engines, and a reload's
 * draining ones beside the new): per sandbox, its open connections and
 * the bucket of its request rate, so that limits.per_sandbox_connections
 * and limits.per_sandbox_rps hold for the sandbox, whichever engine
 * accepted its connections.
 *
 * One anonymous MAP_SHARED mapping, made before the first fork: a table
 * of cells, open addressing by a hash of the sandbox id, probed linearly.
 * Cells are never emptied, only taken over in place (below), so a probe
 * always ends at the first free cell. Claiming a cell takes the shared
 * lock; counting does not: each engine adds to its own slot of a cell
 * (so the parent can zero a dead engine's slot: its connections are
 * gone), and the bucket is a compare-and-swap.
 *
 * A cell of an id no engine counts any more (no connection open, the
 * bucket full again) may be taken over by a new id when the probe finds
 * no free cell first. Its holder marks it first and then looks at the
 * counts; a counter adds first and then looks at the mark (both
 * sequentially consistent), so a cell in use is never taken over, and a
 * counter that lost its cell finds it again.
 */
#include <sys/mman.h>

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "proxy/ops/ops.h"
#include "proxy/util/util.h"

#define SHARE_CELLS 8192 /* a power of two, 2 x SANDBOX_MAX */
#define KEY_FREE    0
#define KEY_MOVING  UINT64_MAX /* being taken over */

_Static_assert(SHARE_CELLS >= 2 * SANDBOX_MAX, "cells for every sandbox");

struct share_cell {
	uint64_t sc_key; /* KEY_FREE, KEY_MOVING or hash(sc_id) */
	int64_t sc_tat_us;
	int32_t sc_conns[METRICS_ENGINE_SLOTS];
	char sc_id[SANDBOX_ID_MAX + 1];
};

static struct share {
	pthread_mutex_t sh_lock;
	uint32_t sh_nclaimed; /* cells ever claimed (0: nothing to clear) */
	struct share_cell sh_cell[SHARE_CELLS];
} * sh;

static int sh_slot;

static uint64_t
share_key(const char *id)
{
	uint64_t h = 1469598103934665603ULL; /* FNV-1a */

	for (; *id != '\0'; id++)
		h = (h ^ (unsigned char)*id) * 1099511628211ULL;
	return h == KEY_FREE || h == KEY_MOVING ? 1 : h;
}

int
share_open(void)
{
	struct share *s;

	if (sh != NULL)
		return 0;
	s = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (s == MAP_FAILED)
		return -1;
	if (sl_shlock_init(&s->sh_lock) != 0) {
		(void)munmap(s, sizeof(*s));
		return -1;
	}
	sh = s;
	return 0;
}

void
share_slot(int slot)
{
	if (slot >= 0 && slot < METRICS_ENGINE_SLOTS)
		sh_slot = slot;
}

void
share_slot_clear(int slot)
{
	size_t i;

	/* None claimed yet: touching every page would fault them all in. */
	if (sh == NULL || slot < 0 || slot >= METRICS_ENGINE_SLOTS ||
	    __atomic_load_n(&sh->sh_nclaimed, __ATOMIC_SEQ_CST) == 0)
		return;
	for (i = 0; i < SHARE_CELLS; i++)
		__atomic_store_n(&sh->sh_cell[i].sc_conns[slot], 0,
		    __ATOMIC_SEQ_CST);
}

static int64_t
cell_conns(const struct share_cell *c)
{
	int64_t n = 0;
	int i;

	for (i = 0; i < METRICS_ENGINE_SLOTS; i++)
		n += __atomic_load_n(&c->sc_conns[i], __ATOMIC_SEQ_CST);
	return n;
}

/* Nobody counts in it: no connection, and its bucket is full again. */
static int
cell_idle(const struct share_cell *c, int64_t now_us)
{
	return cell_conns(c) == 0 &&
	    __atomic_load_n(&c->sc_tat_us, __ATOMIC_SEQ_CST) <= now_us;
}

/* With the lock: id's cell, claimed if new; -1 when every cell is used. */
static int
share_claim(const char *id, uint64_t key, int64_t now_us)
{
	struct share_cell *c;
	size_t i = key & (SHARE_CELLS - 1), n;
	int idle = -1;

	for (n = 0; n < SHARE_CELLS; n++, i = (i + 1) & (SHARE_CELLS - 1)) {
		c = &sh->sh_cell[i];
		if (c->sc_key == key && strcmp(c->sc_id, id) == 0)
			return (int)i;
		if (c->sc_key == KEY_FREE)
			break;
		if (idle == -1 && cell_idle(c, now_us))
			idle = (int)i;
	}
	if (n == SHARE_CELLS || c->sc_key != KEY_FREE) {
		if (idle == -1)
			return -1;
		c = &sh->sh_cell[idle];
		i = (size_t)idle;
		/* Marked first, then the counts looked at again. */
		__atomic_store_n(&c->sc_key, KEY_MOVING, __ATOMIC_SEQ_CST);
		if (!cell_idle(c, now_us)) {
			__atomic_store_n(&c->sc_key, share_key(c->sc_id),
			    __ATOMIC_SEQ_CST);
			return -1;
		}
	}
	if (c->sc_key == KEY_FREE)
		__atomic_add_fetch(&sh->sh_nclaimed, 1, __ATOMIC_SEQ_CST);
	memset(c->sc_id, 0, sizeof(c->sc_id));
	memcpy(c->sc_id, id, strnlen(id, SANDBOX_ID_MAX));
	__atomic_store_n(&c->sc_tat_us, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&c->sc_key, key, __ATOMIC_SEQ_CST);
	return (int)i;
}

/* id's cell: *cell if it is still id's, else looked up (and claimed). */
static struct share_cell *
share_find(const char *id, int *cell, int64_t now_us)
{
	uint64_t key = share_key(id);
	int i = *cell;

	if (sh == NULL)
		return NULL;
	if (i >= 0 && i < SHARE_CELLS &&
	    __atomic_load_n(&sh->sh_cell[i].sc_key, __ATOMIC_SEQ_CST) == key &&
	    strcmp(sh->sh_cell[i].sc_id, id) == 0)
		return &sh->sh_cell[i];
	(void)sl_shlock(&sh->sh_lock, "share");
	i = share_claim(id, key, now_us);
	sl_shunlock(&sh->sh_lock);
	*cell = i;
	return i >= 0 ? &sh->sh_cell[i] : NULL;
}

int
share_conn(const char *id, int *cell, int delta)
{
	struct share_cell *c;
	int tries;

	for (tries = 0; tries < 3; tries++) {
		if ((c = share_find(id, cell, sl_mono_us())) == NULL)
			return -1;
		__atomic_add_fetch(&c->sc_conns[sh_slot], delta,
		    __ATOMIC_SEQ_CST);
		/* Taken over meanwhile (only ever an idle cell): again. */
		if (__atomic_load_n(&c->sc_key, __ATOMIC_SEQ_CST) ==
		    share_key(id))
			return 0;
		__atomic_sub_fetch(&c->sc_conns[sh_slot], delta,
		    __ATOMIC_SEQ_CST);
		*cell = -1;
	}
	return -1;
}

int64_t
share_conns(const char *id, int *cell)
{
	struct share_cell *c = share_find(id, cell, sl_mono_us());

	return c != NULL ? cell_conns(c) : -1;
}

/*
 * sl_gcra() on the sandbox's shared bucket: 0 (allowed, charged), or the
 * seconds to wait. -1: no cell (the caller falls back to its own).
 */
int64_t
share_rate(const char *id, int *cell, uint64_t rps, int64_t now_us)
{
	struct share_cell *c;
	int64_t tat, next, wait;

	if (rps == 0)
		return 0;
	if ((c = share_find(id, cell, now_us)) == NULL)
		return -1;
	tat = __atomic_load_n(&c->sc_tat_us, __ATOMIC_SEQ_CST);
	do {
		if ((wait = sl_gcra(tat, rps, now_us, &next)) != 0)
			return wait;
	} while (!__atomic_compare_exchange_n(&c->sc_tat_us, &tat, next, 0,
	    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
	return 0;
}
