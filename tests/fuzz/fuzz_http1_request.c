/*
 * libFuzzer target for http1_parse_request: the input is a request head
 * (and maybe body bytes). Invariants are in fuzz_http1.h.
 */
#include <stddef.h>
#include <stdint.h>

#include "tests/fuzz/fuzz_http1.h"

int LLVMFuzzerTestOneInput(const uint8_t *, size_t);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fz_http1(data, size, 0, 0);
	return 0;
}
