/*
 * The parts of a client connection (relay.h "conn"), shared by the files
 * that handle it and by no one else: conn.c (state, close, accept, drain,
 * client callbacks), head.c (request heads, facts, decision, admission),
 * exchange.c (bodies, the upstream leg, the response), tunnel.c and
 * splice.c (CONNECT tunnels) and respond.c (denials, refusals and the
 * audit line).
 */
#ifndef SLUICE_CONN_INT_H
#define SLUICE_CONN_INT_H

#include <sys/queue.h>
#include <sys/time.h>

#include <netinet/in.h>

#include <stddef.h>
#include <stdint.h>

#include "proxy/http/http1.h"
#include "proxy/http/reason.h"
#include "proxy/ops/ops.h"
#include "proxy/relay/relay.h"
#include "proxy/token/token.h"

struct bufferevent;
struct evbuffer;
struct event;
struct route;
struct splice_tun;

#define CONN_IO_MAX        262144 /* bytes per read/write call */
#define CONN_HIGH_WATER    262144 /* pause the source above this */
#define CONN_LOW_WATER     65536  /* resume it below this */
#define CONN_RESP_HEAD_MAX 65536  /* bytes of an upstream response head */
#define CONN_MAX_HDRS      1000   /* the parser's field array */
#define CONN_AUDIT_STR     1024   /* bytes of host/path kept for audit */
#define CONN_LINGER_MS     2000   /* reading after a last response */
#define CONN_TLS_POLL_MS   5      /* TLS: until the last records are out */
#define CONN_MAX_DENIALS   64     /* refusals in a row on one connection */
#define CONN_LINGER_MAX    262144 /* bytes discarded while closing */
#define CONN_REPLAY_MAX    65536  /* bytes kept to retry on a fresh upstream */
/* conn_sock_tune(): what a socket keeps unsent (TCP_NOTSENT_LOWAT) */
#define CONN_NOTSENT_LOWAT 32768

enum conn_state {
	CONN_S_IDLE = 0,    /* keep-alive: no request yet */
	CONN_S_HEAD,        /* reading a request head */
	CONN_S_DURABLE,     /* admitted, its audit line not durable yet */
	CONN_S_UPSTREAM,    /* request allowed, waiting for upstream */
	CONN_S_EXCHANGE,    /* request/response streaming */
	CONN_S_TUNNEL_WAIT, /* CONNECT allowed, waiting for upstream */
	CONN_S_TUNNEL,      /* relaying bytes both ways */
	CONN_S_FLUSH,       /* writing a last response, then close */
	CONN_S_CLOSED,      /* freed from the loop soon */
	CONN_S__COUNT
};

/* What body_relay() does with chunked framing. */
enum body_mode {
	BODY_PASS = 0, /* forward it unchanged (validated) */
	BODY_DECHUNK,  /* forward the payload only (HTTP/1.0 clients) */
	BODY_RECHUNK   /* write framing of our own, drop extensions and trailers
			*/
};

/* How one body (request or response) is being relayed. */
struct body {
	enum http1_body bd_kind;
	uint64_t bd_left;              /* LENGTH: bytes still to come */
	struct http1_chunked bd_chunk; /* CHUNKED */
	enum body_mode bd_mode;        /* what becomes of chunk framing */
	int bd_done;
	uint64_t bd_bytes; /* payload bytes relayed */
};

/*
 * What one request needs until it completes. Allocated when a request
 * head arrives and freed when it is done, so that an idle keep-alive
 * connection holds none of it. Owned by its conn.
 */
struct request {
	struct config *rq_cf;     /* the policy it started with */
	struct upstreams *rq_ups; /* and that policy's upstream state */
	const struct route *rq_route;
	struct upconn *rq_up;
	struct timeval rq_start;
	struct timeval rq_sent; /* the head went to the upstream */
	enum reason rq_reason;
	int rq_status;
	int rq_connect;
	int rq_head_method; /* HEAD: no response body */
	int rq_client_minor;
	int rq_close;                /* close the client afterwards */
	int rq_logged;               /* audit line written */
	int rq_forwarded;            /* a byte went upstream: "allow" */
	int rq_started;              /* its start line is written ("always") */
	int rq_head_sent;            /* response head went to the client */
	int rq_up_close;             /* upstream said close / EOF body */
	uint64_t rq_bytes_in;        /* client to upstream */
	uint64_t rq_bytes_out;       /* upstream to client */
	struct body rq_body;         /* client to upstream */
	struct body rq_rbody;        /* upstream to client */
	struct evbuffer *rq_pending; /* head built before upstream ready */
	struct evbuffer *rq_replay; /* sent on a reused upstream, for a retry */
	int rq_retried;             /* the one retry was made */
	int rq_idempotent;          /* RFC 9110 9.2.2 */
	size_t rq_scan;             /* response head terminator scan */
	char rq_method[24];
	char rq_sub[TOKEN_MAX_STR + 1];
	char rq_jti[TOKEN_MAX_STR + 1];
	char *rq_host;
	char *rq_path;
	char rq_dest[256]; /* allowlist route: the host dialled, or "" */
	uint16_t rq_dest_port;
	int rq_dest_tls; /* to rq_dest over TLS (an intercepted tunnel's) */
	int rq_report;   /* enforce "report" let it through */
	enum reason rq_would; /* ... and the reason it would have had */
	char rq_upaddr[56];
	int rq_eof[2];            /* tunnel: read EOF per side */
	struct timeval rq_active; /* tunnel: last byte (monotonic) */
	int rq_shut[2];           /* tunnel: write side shut down */
	int64_t rq_expires;       /* tunnel: token exp + leeway */
	int64_t rq_exp;           /* the verified token's exp claim */
	uint64_t rq_budget_limit; /* the decision's budget limit */
	const char *rq_detail;    /* bad_request: what was wrong */
	int rq_auth_strip;        /* Authorization is not the token */
	int rq_auth_removed;      /* ... and was removed upstream */
	const char *rq_carrier;   /* the field that held the token, if any */
	unsigned rq_resp_dropped; /* response fields holding a secret */
	int rq_sbx_limited;       /* rate_limited by per_sandbox_rps */
	char rq_id[CLIENTS_ID_LEN];
	/* A tunnel moved by splice(2) (splice.c), or that could not be. */
	struct splice_tun *rq_splice;
	int rq_nosplice;
};

/*
 * An intercepted CONNECT (docs/interception.md): what its inner requests
 * need from it (the authority they must name, the CONNECT's token) and
 * what its connect.tunnel line says when it closes. Owned by its conn.
 */
struct icpt {
	char it_host[256]; /* the CONNECT's host (IPv6 without brackets) */
	uint16_t it_port;
	int it_ready;   /* TLS done (or plain chosen): inner requests */
	int it_tls;     /* inner requests arrive over TLS */
	char *it_token; /* the CONNECT's verified token; wiped; or NULL */
	size_t it_toklen;
	int it_logged;         /* the connect.tunnel line was written */
	const char *it_detail; /* client_tls_error: why */
	char it_id[CLIENTS_ID_LEN];
	char it_sub[TOKEN_MAX_STR + 1];
	char it_jti[TOKEN_MAX_STR + 1];
	char it_route[TOKEN_MAX_STR + 1];
	char *it_hostport; /* "host:port" for the audit line */
	struct timeval it_start;
	uint64_t it_requests, it_bytes_in, it_bytes_out;
	/* An intercept or transparent listener's tunnel: no CONNECT. */
	int it_listener;
	int it_wait;    /* transparent: 1 the ClientHello, 2 the addresses */
	int it_refused; /* closed before it was served: "deny" */
	char *it_dest;  /* transparent: the original destination */
	struct sockaddr_storage it_orig;
	struct upconn *it_probe;  /* transparent: a resolution in flight */
	struct upstreams *it_ups; /* ... and what it belongs to */
	struct config *it_cf;
};

/*
 * A client connection. Owned by the global list; freed only by
 * conn_free_cb() from the loop after conn_close().
 */
struct conn {
	TAILQ_ENTRY(conn) cn_entry;
	struct proxy_env *cn_env; /* what it was accepted into */
	enum conn_state cn_state;
	size_t cn_listener; /* index into cf_listeners */
	struct bufferevent *cn_bev;
	struct event *cn_timer; /* header deadline */
	struct event *cn_free;  /* frees the conn from the loop */
	struct request *cn_req;
	size_t cn_scan; /* request head terminator scan */
	int cn_draining;
	unsigned cn_denials; /* refusals in a row, for the cap */
	int cn_lingering;    /* FLUSH: write side shut, discarding input */
	unsigned
	    cn_tls_wait;     /* FLUSH under TLS: polls until the records left */
	int cn_counted;      /* counted in clients_conn_add() */
	int cn_broken;       /* the loop refused an event: close (timer) */
	size_t cn_discarded; /* FLUSH: input bytes thrown away */
	struct sockaddr_in6 cn_peer; /* big enough for both families */
	struct icpt *cn_icpt;        /* an intercepted CONNECT's inside */
	struct sandbox *cn_sbx;      /* gateway: the source's (a reference) */
	int cn_sbx_shared;           /* counted in share.c's table too */
	/* CONN_S_DURABLE: the wait, and the head left in the input. */
	struct audit_wait cn_aw;
	size_t cn_park_len;
	int cn_park_keep; /* a refusal may keep the connection */
	/*
	 * A refusal's response waits in the output (and nothing more is
	 * read) until its audit line is durable (fsync "always").
	 */
	int cn_hold;
};

TAILQ_HEAD(conn_list, conn);
/* conn.c: every open connection, and whether all of them are draining. */
extern struct conn_list relay_conns;
extern int relay_draining;

/*
 * conn.c: the state table. Non-zero when a connection in state from may
 * move to state to (staying is always allowed); conn_set_state() aborts
 * on any other move.
 */
int conn_state_ok(enum conn_state from, enum conn_state to);
const char *conn_state_name(enum conn_state);
void conn_set_state(struct conn *, enum conn_state to);
/*
 * The only way a connection ends. r is how: the reason the audit line of
 * a request still pending gives. Only relay_admit() makes a request ok:
 * REASON_OK leaves one not admitted with its own reason. Safe to call
 * again until the loop frees the conn: it stays closed, its line written
 * once.
 */
void conn_close(struct conn *, enum reason r);
/* Write the last response, then close gracefully (FLUSH). */
void conn_flush_close(struct conn *);
/* The event loop refused a change: close from the loop. */
void conn_broken(struct conn *);
/* bufferevent_enable/disable and evtimer_add, conn_broken() on failure. */
void bev_on(struct conn *, struct bufferevent *, short what);
void bev_off(struct conn *, struct bufferevent *, short what);
void timer_on(struct conn *, struct event *, const struct timeval *);
/* Write bev's output now (plain: 0 for TLS), arm EV_WRITE for the rest. */
void out_flush(struct conn *, struct bufferevent *, int plain);
/* Fill src's input as far as dst's output has room under the high mark. */
void in_fill_for(struct bufferevent *src, struct bufferevent *dst);
/* Pause the source while the destination holds too much. */
void
backpressure(struct conn *, struct bufferevent *src, struct bufferevent *dst);
double elapsed_s(const struct conn *, const struct timeval *start);
void peer_str(const struct conn *, char *buf, size_t len);
const struct listener_conf *
conn_listener(const struct conn *, const struct config *);
char *dup_capped(const char *p, size_t len);
struct request *request_new(struct conn *);
void request_free(struct conn *);

/*
 * conn.c, gateway mode: take (a counted reference on) the sandbox of the
 * connection's source, or let it go; conn_sbx_id() is its id or NULL.
 */
void conn_sbx_attach(struct conn *, struct sandbox *);
void conn_sbx_release(struct conn *);
const char *conn_sbx_id(const struct conn *);
/* limits.per_sandbox_rps, over every engine: 0, or the seconds to wait. */
int64_t conn_sbx_rate(struct conn *, const struct config *);

/* head.c: read and decide request heads while the conn waits for one. */
void conn_step_head(struct conn *);

/* exchange.c */
void conn_start_upstream(struct conn *, const struct http1_msg *,
    const struct uri *);
/* Relay what the client's input holds of the request body. */
void conn_req_body(struct conn *);

/* tunnel.c */
void conn_start_tunnel(struct conn *);
/* The token still holds (expiry, revocation), or -1: the tunnel closed. */
int tunnel_revalidate(struct conn *);
/*
 * Side d's read EOF is passed on to fd, the other leg's socket: shutdown()
 * of its write side, or, when the other direction has ended too, the
 * tunnel closes (close() sends that FIN) and -1 is returned.
 */
int tunnel_shut(struct conn *, int, int);
/* A failure on side's socket (0 the client's, 1 the upstream's) ends it. */
void tunnel_fail(struct conn *, int);
/*
 * splice.c: a tunnel that qualifies moves to splice(2) (1), else 0;
 * stop switches its events off (conn_close), free frees it (request_free).
 */
int tunnel_splice_try(struct conn *);
void tunnel_splice_stop(struct request *);
void tunnel_splice_free(struct request *);

/*
 * inner.c: intercepted tunnels. conn_start_intercept() answers an admitted
 * CONNECT to an intercepting route (headlen: its head, still in the
 * input) and waits for the first byte: a TLS record starts the server
 * handshake, anything else is plain HTTP. conn_icpt_sniff() runs on bytes
 * that arrive before that choice; conn_icpt_log() writes the
 * connect.tunnel line once, at close; conn_icpt_free() at free.
 */
void conn_start_intercept(struct conn *, const struct http1_msg *,
    const struct uri *, size_t headlen);
void conn_icpt_sniff(struct conn *);
void conn_icpt_log(struct conn *, enum reason r);
void conn_icpt_free(struct conn *);
/*
 * transparent.c: connections to intercept and transparent listeners,
 * intercepted tunnels from the first byte. conn_listen_intercept() runs at
 * accept: an intercept listener's tunnel is set up at once, a transparent
 * one's waits for its ClientHello, which conn_tp_step() reads (without
 * consuming it) until it can decide. -1: out of memory (close it).
 */
int conn_listen_intercept(struct conn *);
void conn_tp_step(struct conn *);
/* The refusal of a tunnel that was never served: r, detail, closed. */
void conn_icpt_refuse(struct conn *, enum reason r, const char *detail);
/*
 * conn.c: the client bufferevent's callbacks again (after it changed),
 * with ev as its event callback (NULL: the usual one).
 */
void conn_client_setcb(struct conn *,
    void (*ev)(struct bufferevent *, short, void *));
/*
 * An inner request's target as the policy sees it: origin-form, or
 * absolute-form naming the CONNECT's authority, made absolute with that
 * authority into u (pointing into the icpt); Host must name it too. 0, or
 * -1 with *why set (a 400).
 */
int conn_icpt_target(struct conn *, const struct http1_msg *, struct uri *u,
    const char **why);

/*
 * respond.c: refuse the current request with reason r (keep: the
 * connection may stay open), and the audit line and metrics of the
 * current request with reason r, written once.
 */
void conn_deny(struct conn *, enum reason r, int keep);
void request_log(struct conn *, enum reason r);
/*
 * fsync "always": the start line of an admitted request (phase "start"),
 * before a byte goes upstream; request_log() then writes its end line.
 * Returns 0 (no line needed, or written: go on), 1 (cb(c, ok) follows
 * from the loop) or -1 (lost: refuse with audit_unavailable).
 */
int request_log_start(struct conn *, audit_wait_cb *cb);
/*
 * conn.c: a refusal's line is durable (or lost): send what the output
 * holds and go on as the write callback would (cn_hold).
 */
void conn_release_cb(void *arg, int ok);

#endif
