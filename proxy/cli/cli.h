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

#endif
