/*
 * The table of stable reason strings and the status each denial is answered
 * with (DESIGN.md "Responses to denials"). Nothing else decides a status.
 */
#include "proxy/http/reason.h"

const char *const reason_str[REASON__COUNT] = {
	[REASON_TOKEN_MISSING] = "token_missing",
	[REASON_TOKEN_MALFORMED] = "token_malformed",
	[REASON_TOKEN_UNSUPPORTED_ALG] = "token_unsupported_alg",
	[REASON_TOKEN_UNKNOWN_KID] = "token_unknown_kid",
	[REASON_TOKEN_BAD_SIGNATURE] = "token_bad_signature",
	[REASON_TOKEN_EXPIRED] = "token_expired",
	[REASON_TOKEN_NOT_YET_VALID] = "token_not_yet_valid",
	[REASON_TOKEN_LIFETIME_TOO_LONG] = "token_lifetime_too_long",
	[REASON_TOKEN_WRONG_AUDIENCE] = "token_wrong_audience",
	[REASON_TOKEN_WRONG_ISSUER] = "token_wrong_issuer",
	[REASON_TOKEN_REVOKED] = "token_revoked",
	[REASON_BUDGET_EXHAUSTED] = "budget_exhausted",
	[REASON_ROUTE_NOT_FOUND] = "route_not_found",
	[REASON_METHOD_NOT_ALLOWED] = "method_not_allowed",
	[REASON_PATH_NOT_ALLOWED] = "path_not_allowed",
	[REASON_DESTINATION_DENIED] = "destination_denied",
	[REASON_BAD_REQUEST] = "bad_request",
	[REASON_HEADERS_TOO_LARGE] = "headers_too_large",
	[REASON_BODY_TOO_LARGE] = "body_too_large",
	[REASON_UPSTREAM_UNREACHABLE] = "upstream_unreachable",
	[REASON_UPSTREAM_TLS_ERROR] = "upstream_tls_error",
	[REASON_UPSTREAM_TIMEOUT] = "upstream_timeout",
	[REASON_UPSTREAM_BAD_RESPONSE] = "upstream_bad_response",
	[REASON_TOO_MANY_CONNECTIONS] = "too_many_connections",
	[REASON_AUDIT_UNAVAILABLE] = "audit_unavailable",
	[REASON_RATE_LIMITED] = "rate_limited",
	[REASON_CLIENT_CLOSED] = "client_closed",
	[REASON_DRAIN_TIMEOUT] = "drain_timeout",
	[REASON_INTERNAL_ERROR] = "internal_error",
	[REASON_CLIENT_TLS_ERROR] = "client_tls_error",
	[REASON_TOKEN_WRONG_SANDBOX] = "token_wrong_sandbox",
	[REASON_SANDBOX_UNKNOWN] = "sandbox_unknown",
	[REASON_OK] = "ok",
};

const char *
reason_name(enum reason r)
{
	if ((unsigned)r >= REASON__COUNT || reason_str[r] == 0)
		return "internal_error";
	return reason_str[r];
}

int
reason_is_token(enum reason r)
{
	return r <= REASON_TOKEN_REVOKED || r == REASON_TOKEN_WRONG_SANDBOX;
}

int
reason_is_upstream(enum reason r)
{
	return r >= REASON_UPSTREAM_UNREACHABLE &&
	    r <= REASON_UPSTREAM_BAD_RESPONSE;
}

int
reason_status(enum reason r, int reverse)
{
	switch (r) {
	case REASON_OK:
		return 200;
	case REASON_BUDGET_EXHAUSTED:
	case REASON_RATE_LIMITED:
		return 429;
	case REASON_ROUTE_NOT_FOUND:
	case REASON_METHOD_NOT_ALLOWED:
	case REASON_PATH_NOT_ALLOWED:
	case REASON_DESTINATION_DENIED:
	case REASON_SANDBOX_UNKNOWN:
		return 403;
	case REASON_BAD_REQUEST:
		return 400;
	case REASON_HEADERS_TOO_LARGE:
		return 431;
	case REASON_BODY_TOO_LARGE:
		return 413;
	case REASON_UPSTREAM_UNREACHABLE:
	case REASON_UPSTREAM_TLS_ERROR:
	case REASON_UPSTREAM_BAD_RESPONSE:
		return 502;
	case REASON_UPSTREAM_TIMEOUT:
		return 504;
	case REASON_TOO_MANY_CONNECTIONS:
	case REASON_AUDIT_UNAVAILABLE:
	case REASON_DRAIN_TIMEOUT:
		return 503;
	default:
		break;
	}
	if (reason_is_token(r))
		return reverse ? 401 : 407;
	/* An unknown reason is an internal error: deny. */
	return 500;
}

const char *
reason_status_text(int status)
{
	switch (status) {
	case 200:
		return "OK";
	case 400:
		return "Bad Request";
	case 401:
		return "Unauthorized";
	case 403:
		return "Forbidden";
	case 407:
		return "Proxy Authentication Required";
	case 413:
		return "Content Too Large";
	case 429:
		return "Too Many Requests";
	case 431:
		return "Request Header Fields Too Large";
	case 500:
		return "Internal Server Error";
	case 502:
		return "Bad Gateway";
	case 503:
		return "Service Unavailable";
	case 504:
		return "Gateway Timeout";
	default:
		return "Error";
	}
}
