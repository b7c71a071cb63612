/*
 * libFuzzer target for tls_hello_sni (proxy/http/tlshello.c). The input is
 * what a client sends first on a transparent listener. It runs on an
 * exact-size copy (a read past the end is caught) and its answer is
 * checked against properties that hold whatever the bytes: a verdict on a
 * prefix never changes once the input goes on (more bytes cannot turn a
 * refusal into a name), a name is a lower-case LDH host name that occurs
 * in the input, and NOT_TLS is exactly "the first byte is not 0x16". A
 * violation aborts.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/http/http1.h"

int LLVMFuzzerTestOneInput(const uint8_t *, size_t);

static void
check(int ok)
{
	if (!ok)
		abort();
}

static enum tls_hello
run(const uint8_t *data, size_t n, char *out)
{
	unsigned char *c = malloc(n > 0 ? n : 1);
	const char *why = NULL;
	enum tls_hello r;

	if (c == NULL)
		abort();
	memcpy(c, data, n);
	r = tls_hello_sni(c, n, out, 256, &why);
	free(c);
	check(why != NULL);
	check(r == TLS_HELLO_OK || r == TLS_HELLO_MORE || why[0] != '\0');
	return r;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char out[256], pre[256];
	enum tls_hello r, rp;
	size_t i, n, cut;

	if (size > 3 * TLS_HELLO_MAX)
		return 0;
	r = run(data, size, out);
	check((r == TLS_HELLO_NOT_TLS) == (size > 0 && data[0] != 0x16));
	if (r == TLS_HELLO_OK) {
		n = strlen(out);
		check(n > 0 && n <= 253);
		for (i = 0; i < n; i++)
			check((out[i] >= 'a' && out[i] <= 'z') ||
			    (out[i] >= '0' && out[i] <= '9') || out[i] == '-' ||
			    out[i] == '.');
		check(out[0] != '.' && out[0] != '-' && out[n - 1] != '.' &&
		    out[n - 1] != '-');
		check(strstr(out, "..") == NULL);
	} else
		check(out[0] == '\0' || r != TLS_HELLO_NOT_TLS);
	/* A prefix says "more" or the same as the whole input. */
	cut = size / 2;
	rp = run(data, cut, pre);
	if (rp != TLS_HELLO_MORE) {
		check(rp == r);
		if (r == TLS_HELLO_OK)
			check(strcmp(pre, out) == 0);
	}
	return 0;
}
