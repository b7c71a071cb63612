/*
 * policy: the one decision function and the destination checks.
 */
#ifndef SLUICE_POLICY_H
#define SLUICE_POLICY_H

#include <sys/socket.h>

#include <stdint.h>

#include "proxy/config/config.h"
#include "proxy/http/http1.h"
#include "proxy/http/reason.h"
#include "proxy/token/token.h"

/*
 * policy.c: the one decision function (STYLE.md §6). Pure: no I/O, no
 * clock, no libevent. The caller gathers every fact first (token stage 1
 * result, revocation, budget used, audit state, loop guard).
 */
struct req_view {
	const struct listener_conf *rv_listener;
	int rv_connect;   /* CONNECT request */
	int rv_inner_tls; /* a request inside an intercepted TLS tunnel */
	const char *rv_method;
	size_t rv_method_len;
	const struct uri *rv_uri; /* target (forward) or path (reverse) */
	enum reason rv_token;     /* carrier + token_verify_sig result */
	const struct token_claims *rv_claims; /* when rv_token == OK */
	int rv_revoked;                       /* rv_claims->jti is revoked */
	uint64_t rv_budget_used;              /* requests charged to the jti */
	int rv_audit_failed;                  /* audit log in failed state */
	int rv_gateway;         /* gateway mode: the source names a sandbox */
	const char *rv_sandbox; /* gateway: its id; NULL: no sandbox */
};

struct decision {
	enum reason de_reason;
	const struct route *de_route; /* the matched route, if any */
	uint64_t de_budget_limit;     /* 0: no limit to charge against */
	/* An allowlist route: the host to dial (normalized) and its port. */
	char de_dest[256];
	uint16_t de_dest_port;
	/*
	 * enforce "report": REASON_OK for a request refused only for its
	 * route, method or path (de_would); de_route is then the report
	 * route (cf_report_rt) when no route was found.
	 */
	int de_report;
	enum reason de_would;
};

/*
 * Decide one request. Returns out->de_reason; REASON_OK only when every
 * check passed. Starts from deny: any path not explicitly allowed denies.
 */
enum reason policy_decide(const struct config *cf, const struct req_view *v,
    int64_t now, struct decision *out);
/*
 * The first route (in policy order) a forward request's target selects,
 * or NULL: CONNECT needs the upstream's host and port; an absolute-form
 * request matches a route's hosts or its upstream host by name, on any
 * port. Routes may share an upstream: policy_decide() picks among them by
 * the token's audience.
 */
const struct route *
policy_route_for(const struct config *cf, const struct uri *u, int connect);
/* Budget limit for a token on a route: min of claim and route, 0 = none. */
uint64_t policy_budget_limit(const struct route *, const struct token_claims *);
/*
 * REASON_OK or REASON_DESTINATION_DENIED for a resolved upstream address:
 * private addresses (unless the route allows them) and sluice's own
 * listeners (the loop guard) are refused.
 */
enum reason policy_check_addr(const struct config *, const struct route *,
    const struct sockaddr *);

#endif
