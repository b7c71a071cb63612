/*
 * The state table of a client connection (proxy/relay/conn.c): every move
 * between two states, legal or not, against the table written out here
 * again from the life of a connection.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "proxy/relay/conn_int.h"

/*
 * The moves a connection makes:
 * idle -> head (a request starts), closed (drain, EOF), flush (a refusal
 *   without a request: the connection limit);
 * head -> upstream or exchange (admitted; a pooled upstream is ready at
 *   once), tunnel-wait (CONNECT admitted), flush (refused, closing),
 *   idle (refused, kept), closed, durable (admitted with fsync "always":
 *   its audit line is being made durable);
 * durable -> everywhere head goes but durable (the line is durable, or
 *   lost and the request refused);
 * upstream -> exchange (connected), flush (refused: unreachable), closed;
 * exchange -> idle (done, kept), upstream (the one retry), flush (done or
 *   refused, closing), closed;
 * tunnel-wait -> tunnel, flush (refused), closed;
 * tunnel, flush -> closed; closed -> nothing.
 */
static const struct {
	enum conn_state from, to;
} legal[] = {
	{ CONN_S_IDLE, CONN_S_HEAD },
	{ CONN_S_IDLE, CONN_S_CLOSED },
	{ CONN_S_IDLE, CONN_S_FLUSH },
	{ CONN_S_HEAD, CONN_S_UPSTREAM },
	{ CONN_S_HEAD, CONN_S_EXCHANGE },
	{ CONN_S_HEAD, CONN_S_TUNNEL_WAIT },
	{ CONN_S_HEAD, CONN_S_FLUSH },
	{ CONN_S_HEAD, CONN_S_IDLE },
	{ CONN_S_HEAD, CONN_S_CLOSED },
	{ CONN_S_HEAD, CONN_S_DURABLE },
	{ CONN_S_DURABLE, CONN_S_UPSTREAM },
	{ CONN_S_DURABLE, CONN_S_EXCHANGE },
	{ CONN_S_DURABLE, CONN_S_TUNNEL_WAIT },
	{ CONN_S_DURABLE, CONN_S_FLUSH },
	{ CONN_S_DURABLE, CONN_S_IDLE },
	{ CONN_S_DURABLE, CONN_S_CLOSED },
	{ CONN_S_UPSTREAM, CONN_S_EXCHANGE },
	{ CONN_S_UPSTREAM, CONN_S_FLUSH },
	{ CONN_S_UPSTREAM, CONN_S_CLOSED },
	{ CONN_S_EXCHANGE, CONN_S_IDLE },
	{ CONN_S_EXCHANGE, CONN_S_UPSTREAM },
	{ CONN_S_EXCHANGE, CONN_S_FLUSH },
	{ CONN_S_EXCHANGE, CONN_S_CLOSED },
	{ CONN_S_TUNNEL_WAIT, CONN_S_TUNNEL },
	{ CONN_S_TUNNEL_WAIT, CONN_S_FLUSH },
	{ CONN_S_TUNNEL_WAIT, CONN_S_CLOSED },
	{ CONN_S_TUNNEL, CONN_S_CLOSED },
	{ CONN_S_FLUSH, CONN_S_CLOSED },
};

static int
is_legal(enum conn_state from, enum conn_state to)
{
	size_t i;

	if (from == to)
		return 1; /* staying is no move */
	for (i = 0; i < sizeof(legal) / sizeof(legal[0]); i++)
		if (legal[i].from == from && legal[i].to == to)
			return 1;
	return 0;
}

/* All 81 pairs: exactly the legal ones are allowed. */
static void
test_every_move(void **state)
{
	int from, to, allowed = 0;

	(void)state;
	for (from = 0; from < CONN_S__COUNT; from++)
		for (to = 0; to < CONN_S__COUNT; to++) {
			int want = is_legal((enum conn_state)from,
			    (enum conn_state)to);
			int got = conn_state_ok((enum conn_state)from,
			    (enum conn_state)to);

			if ((got != 0) != want)
				fail_msg("%s -> %s: %s, want %s",
				    conn_state_name((enum conn_state)from),
				    conn_state_name((enum conn_state)to),
				    got ? "allowed" : "refused",
				    want ? "allowed" : "refused");
			allowed += got != 0 && from != to;
		}
	assert_int_equal(allowed, (int)(sizeof(legal) / sizeof(legal[0])));
}

/* Nothing leaves closed; nothing but closed follows tunnel and flush. */
static void
test_terminal(void **state)
{
	int s;

	(void)state;
	for (s = 0; s < CONN_S__COUNT; s++) {
		if (s != CONN_S_CLOSED)
			assert_false(
			    conn_state_ok(CONN_S_CLOSED, (enum conn_state)s));
		if (s != CONN_S_CLOSED && s != CONN_S_TUNNEL)
			assert_false(
			    conn_state_ok(CONN_S_TUNNEL, (enum conn_state)s));
		if (s != CONN_S_CLOSED && s != CONN_S_FLUSH)
			assert_false(
			    conn_state_ok(CONN_S_FLUSH, (enum conn_state)s));
		/* Every state can close. */
		assert_true(conn_state_ok((enum conn_state)s, CONN_S_CLOSED));
	}
}

/* A state outside the table is refused both ways, and named "?". */
static void
test_out_of_range(void **state)
{
	(void)state;
	assert_false(conn_state_ok(CONN_S__COUNT, CONN_S_CLOSED));
	assert_false(conn_state_ok(CONN_S_IDLE, CONN_S__COUNT));
	assert_false(conn_state_ok((enum conn_state) - 1, CONN_S_IDLE));
	assert_string_equal(conn_state_name(CONN_S__COUNT), "?");
	assert_string_equal(conn_state_name(CONN_S_TUNNEL_WAIT), "tunnel-wait");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_move),
		cmocka_unit_test(test_terminal),
		cmocka_unit_test(test_out_of_range),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
