/*
 * token: the stateful half (verified-token cache, budgets, revocations).
 * The pure verification is token.h.
 */
#ifndef SLUICE_TOKEN_STORE_H
#define SLUICE_TOKEN_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "proxy/token/token.h"

/*
 * tokencache.c: verified-token cache. Bounded; keyed by SHA-256 of the
 * token string; an entry lives until its token expires (exp + leeway) or
 * the policy generation changes. Only stage 1 (token_verify_sig) results
 * are cached, and only successes: stage 2, revocation and budget run on
 * every request.
 */
struct token_cache;
struct token_cache *token_cache_new(size_t max_entries);
void token_cache_free(struct token_cache *);
/*
 * Stage 1 through the cache: returns REASON_OK with *out filled (a copy),
 * or the token_* reason. gen is the policy generation (keys may change on
 * reload); now and leeway_s decide expiry of entries.
 */
enum reason token_cache_verify(struct token_cache *, uint64_t gen,
    const struct token_key *keys, size_t nkeys, const char *tok, size_t len,
    int64_t now, int64_t leeway_s, struct token_claims *out, int *hit);
void
token_cache_stats(const struct token_cache *, uint64_t *hits, uint64_t *misses);

/*
 * budget.c: per-jti request counts in <state_dir>/budget.db, a fixed-size
 * table in a MAP_SHARED mapping, so that a charge is in the page cache (and
 * survives kill -9 and a restart) before the request is forwarded.
 */
#define BUDGET_CAPACITY    65536 /* entries of a new budget.db (3/4 usable) */
#define BUDGET_PRUNE_GRACE 3600  /* s kept after exp; > any leeway_s (600) */

struct budget;
/*
 * Open or create (mode 0600) <state_dir>/budget.db and lock it. A file that
 * is corrupt, foreign or not ours is an error (fail closed), never reset.
 * Returns NULL with why set ("path: reason").
 */
struct budget *budget_open(const char *state_dir, char *why, size_t whylen);
/* As budget_open(); capacity (a power of two) applies to a new file. */
struct budget *budget_open_capacity(const char *state_dir, uint32_t capacity,
    char *why, size_t whylen);
void budget_close(struct budget *);
/* Requests charged so far to jti (0 when unknown). */
uint64_t budget_used(struct budget *, const char *jti);
/*
 * Charge one request to jti if fewer than limit were charged. Returns 0
 * (charged; *used is the new count), 1 (exhausted: nothing charged) or -1
 * (table full or I/O error: deny). exp is the token's exp claim; the count
 * is kept until BUDGET_PRUNE_GRACE after it (longer than any leeway_s).
 * limit 0 means no limit: nothing is charged, 0 is returned.
 */
int budget_charge(struct budget *, const char *jti, int64_t exp, uint64_t limit,
    uint64_t *used);
/* Drop entries whose exp is more than BUDGET_PRUNE_GRACE before now. */
void budget_prune(struct budget *, int64_t now);
/*
 * Recount the live and dead entries from the shared table: in a process
 * forked from one whose counts went stale (a privsep engine).
 */
void budget_rescan(struct budget *);
/*
 * Fill of the table: live entries, and how many it may hold (3/4 of its
 * slots); a new jti is refused once live reaches the limit.
 */
void budget_fill(const struct budget *, uint64_t *live, uint64_t *limit);

/*
 * revoke.c: revoked jtis. The file list comes with each policy snapshot
 * (cf_revoked); admin revocations are kept here and appended to
 * <state_dir>/revoked.admin so they survive a restart.
 */
struct revocations;
struct revocations *
revocations_open(const char *state_dir, char *why, size_t whylen);
void revocations_close(struct revocations *);
/*
 * Revoke jti (1..TOKEN_MAX_STR bytes, no control characters, no leading or
 * trailing blank, not starting with '#'): appended and fsync'd before it
 * is added to the set. Returns 0 (also when already revoked) or -1 with
 * why set.
 */
int revocations_add(struct revocations *, const char *jti, char *why,
    size_t whylen);
/*
 * As revocations_add, in memory only: a privsep engine told by the parent,
 * which wrote the file.
 */
int revocations_add_mem(struct revocations *, const char *jti, char *why,
    size_t whylen);
/* A privsep engine: close revoked.admin (only the parent appends to it). */
void revocations_forget_file(struct revocations *);
/*
 * Non-zero when jti is among listed[0..nlisted) (a policy's revoked_file,
 * sorted; NULL when none) or was revoked by an admin.
 */
int revocations_has(const struct revocations *, char *const *listed,
    size_t nlisted, const char *jti);
/*
 * Parse a revoked_file: one jti per line, '#' comments and empty lines
 * ignored; CR, blanks around a jti, control characters or a jti over
 * TOKEN_MAX_STR bytes are errors ("path:LINE: why"). *jtis comes back
 * sorted (strcmp) without duplicates, NULL when *n is 0; the caller frees
 * each string and the array.
 */
int revocations_read_file(const char *path, char ***jtis, size_t *n, char *why,
    size_t whylen);

#endif
