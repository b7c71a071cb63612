/*
 * cli: the subcommands main.c dispatches.
 */
#ifndef SLUICE_CLI_H
#define SLUICE_CLI_H

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
/* "audit suggest"; argv[0] is "suggest". */
int audit_suggest(int argc, char **argv); /* cmd_audit_suggest.c */

#endif
