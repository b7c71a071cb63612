/*
 * libFuzzer target for http1_parse_response: the input is a response head
 * (and maybe body bytes), parsed as the answer to a GET and to a HEAD.
 * Invariants are in fuzz_http1.h.
 */
#include <stddef.h>
#include <stdint.h>

#include "tests/fuzz/fuzz_http1.h"

int LLVMFuzzerTestOneInput(const uint8_t *, size_t);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct http1_hdr hdrs[FZ_MAXH];
	struct http1_msg get, head;
	ssize_t a, b;

	fz_http1(data, size, 1, 0);
	fz_http1(data, size, 1, 1);

	/* HEAD changes the body, never whether the head is valid. */
	memset(&get, 0, sizeof(get));
	get.hdrs = hdrs;
	get.max_hdrs = FZ_MAXH;
	a = http1_parse_response(&get, (const char *)data, size, 0, 0);
	memset(&head, 0, sizeof(head));
	head.hdrs = hdrs;
	head.max_hdrs = FZ_MAXH;
	b = http1_parse_response(&head, (const char *)data, size, 0, 1);
	fz_check(a == b && get.err == head.err);
	if (b >= 0)
		fz_check(head.body == HTTP1_BODY_NONE);
	return 0;
}
