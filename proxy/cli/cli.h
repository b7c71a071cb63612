/*
 * cli: the subcommands main.c dispatches.
 */
#ifndef SLUICE_CLI_H
#define SLUICE_CLI_H

#include <stddef.h>
#include <stdint.h>

/*
 * Subcommands (main.c dispatches): each takes the arguments after its own
 * name and returns an exit code.
 */
int cmd_run(int argc, char **argv);       /* cmd_run.c */
int cmd_check(int argc, char **argv);     /* cmd_run.c */
int cmd_netpolicy(int argc, char **argv); /* cmd_netpolicy.c */
int cmd_token(int argc, char **argv);     /* cmd_token.c */
int cmd_audit(int argc, char **argv);     /* cmd_audit.c */
int cmd_admin(int argc, char **argv);     /* cmd_admin.c */
/* "audit tail" and "audit stats"; argv[0] names which. */
int cmd_audit_view(int argc, char **argv); /* cmd_audit_view.c */
int cmd_certs(int argc, char **argv);      /* cmd_certs.c */
int cmd_exec(int argc, char **argv);       /* cmd_exec.c */
/* "audit suggest"; argv[0] is "suggest". */
int audit_suggest(int argc, char **argv); /* cmd_audit_suggest.c */

/* cmd_token.c: a decimal integer in [min, max], the whole string. 0 or -1. */
int cli_parse_int(const char *s, long long min, long long max, int64_t *out);

/*
 * cmd_token.c: sign a run token (sluice exec): sub, aud (naud of them),
 * iat now, exp now + ttl, a random jti, max_requests when > 0, kid when
 * the key has one. 0, or -1 (out too small, no randomness).
 */
struct token_key;
int cli_token_sign(const struct token_key *key, const char *sub,
    const char *const *aud, size_t naud, int64_t now, int64_t ttl,
    int64_t max_requests, char *out, size_t cap);

/*
 * phases.c: start lines ("phase":"start") waiting for their http.end or
 * connect.end line, by id (docs/audit.md "Two lines with always").
 * phases_start() keeps start (may be NULL; owned from then on, also on
 * failure: -1, out of memory). phases_end() hands back the start line of
 * id (the caller deletes it): 1, or 0 when there was none. phases_free()
 * calls each (may be NULL) for every start line still open, then frees.
 */
struct cJSON;
struct phases;
struct phases *phases_new(void);
int phases_is_end(const char *event);
/* The id of a start line, or NULL when e is not one. */
const char *phases_start_id(const struct cJSON *e);
int phases_start(struct phases *, const char *id, struct cJSON *start);
int phases_end(struct phases *, const char *id, struct cJSON **start);
uint64_t phases_open(const struct phases *);
void phases_free(struct phases *, void (*each)(struct cJSON *start, void *arg),
    void *arg);

#endif
