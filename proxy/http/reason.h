/*
 * The stable reason codes of DESIGN.md ("Run tokens"), shared by responses,
 * the audit log and metrics. This header is pure (no dependencies), so the
 * parser, token and policy code and their fuzz targets can all use it.
 */
#ifndef SLUICE_REASON_H
#define SLUICE_REASON_H

/*
 * IMPORTANT: the order matches DESIGN.md and reason_str[] in reason.c; a
 * unit test checks that the table is complete. Zero is a denial, so a
 * zero-initialised decision denies.
 */
enum reason {
	REASON_TOKEN_MISSING = 0,     /* no carrier at all */
	REASON_TOKEN_MALFORMED,       /* encoding, JSON, claim types, crit */
	REASON_TOKEN_UNSUPPORTED_ALG, /* none, unknown, or not the key's alg */
	REASON_TOKEN_UNKNOWN_KID,     /* kid names no key, or is needed */
	REASON_TOKEN_BAD_SIGNATURE,   /* signature does not verify */
	REASON_TOKEN_EXPIRED,         /* now >= exp + leeway */
	REASON_TOKEN_NOT_YET_VALID,   /* nbf or iat beyond now + leeway */
	REASON_TOKEN_LIFETIME_TOO_LONG, /* exp - iat > max_ttl_s */
	REASON_TOKEN_WRONG_AUDIENCE,    /* aud lacks the route's audience */
	REASON_TOKEN_WRONG_ISSUER,      /* iss missing or not tokens.issuer */
	REASON_TOKEN_REVOKED,           /* jti is revoked */
	REASON_BUDGET_EXHAUSTED,        /* jti used its request budget */
	REASON_ROUTE_NOT_FOUND,         /* no route for this host */
	REASON_METHOD_NOT_ALLOWED,      /* method not in route.methods */
	REASON_PATH_NOT_ALLOWED,      /* ambiguous, or outside path_prefixes */
	REASON_DESTINATION_DENIED,    /* private address, or loop */
	REASON_BAD_REQUEST,           /* HTTP/1.1 strictness violation */
	REASON_HEADERS_TOO_LARGE,     /* header section over the limits */
	REASON_BODY_TOO_LARGE,        /* body over max_body_bytes */
	REASON_UPSTREAM_UNREACHABLE,  /* DNS or TCP connect failed */
	REASON_UPSTREAM_TLS_ERROR,    /* handshake, chain, name or pin */
	REASON_UPSTREAM_TIMEOUT,      /* connect or response timeout */
	REASON_UPSTREAM_BAD_RESPONSE, /* response violates HTTP/1.1 */
	REASON_TOO_MANY_CONNECTIONS,  /* max_connections reached */
	REASON_AUDIT_UNAVAILABLE,     /* audit log in failed state */
	REASON_RATE_LIMITED,          /* client over its refusal budget */
	REASON_CLIENT_CLOSED,         /* the client went away first */
	REASON_DRAIN_TIMEOUT,         /* a shutdown's drain cut it */
	REASON_INTERNAL_ERROR,        /* out of memory: one conn closed */
	REASON_CLIENT_TLS_ERROR,      /* intercepted tunnel: handshake failed */
	REASON_TOKEN_WRONG_SANDBOX,   /* gateway: sub/sbx is not the source's */
	REASON_SANDBOX_UNKNOWN,       /* gateway: the source is no sandbox */
	REASON_OK,                    /* allowed */
	REASON__COUNT
};

/* reason.c */
extern const char *const reason_str[REASON__COUNT];
const char *reason_name(enum reason);
int reason_is_token(enum reason);
int reason_is_upstream(enum reason); /* upstream_* */
/*
 * The HTTP status a denial with this reason is answered with; reverse is
 * non-zero on a reverse listener (token failures are 401 there, 407 on a
 * forward listener). REASON_OK maps to 200.
 */
int reason_status(enum reason, int reverse);
/* The status line's reason phrase for a status sluice writes ("Forbidden"). */
const char *reason_status_text(int status);

#endif
