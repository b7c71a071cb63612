/*
 * libFuzzer target for the parent's side of an engine's audit lines
 * (audit_remote_line() in proxy/ops/audit.c): under privilege separation
 * the engine, which parses what the sandbox sends and so may be taken
 * over, hands the parent a timestamp, an event and fields, and the parent
 * chains and writes them. Whatever the datagram holds, the parent must
 * either refuse it (-2) or write exactly one line that is one JSON object
 * on one line, whose "ts" and "event" are the ones sent, whose "seq" is one
 * more than the line before and whose "prev" is that line's SHA-256: a
 * broken line or chain is the one thing a taken-over engine must not get.
 * The real writer on a temporary file (fsync "never", no event loop).
 */
#include <sys/stat.h>

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <openssl/sha.h>

#include "proxy/proxy.h"
#include "tests/fuzz/fuzz_audit_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define TS_LEN 27

static char line[AUDIT_LINE_MAX + 1];
static char prev[AUDIT_LINE_MAX + 1];
static size_t prevlen;
static off_t at;
static uint64_t seq;

/* The line written since the last call, into line; its length. */
static size_t
new_line(void)
{
	struct stat st;
	ssize_t n;

	check(fstat(rfd, &st) == 0, "fstat");
	if (st.st_size == at)
		return 0;
	check(st.st_size - at <= AUDIT_LINE_MAX, "a line over the cap");
	n = pread(rfd, line, (size_t)(st.st_size - at), at);
	check(n == st.st_size - at, "pread");
	line[n] = '\0';
	at = st.st_size;
	return (size_t)n;
}

static void
check_line(const uint8_t *data, size_t len)
{
	unsigned char h[SHA256_DIGEST_LENGTH];
	char hex[2 * SHA256_DIGEST_LENGTH + 1];
	const cJSON *ts, *ev, *sq, *pv;
	size_t elen = data[1 + TS_LEN], i;
	cJSON *o;

	check(len >= 2 && line[len - 1] == '\n' &&
		memchr(line, '\n', len - 1) == NULL,
	    "not exactly one line");
	check((o = cJSON_ParseWithLength(line, len - 1)) != NULL &&
		cJSON_IsObject(o),
	    "not one JSON object");
	ts = cJSON_GetObjectItemCaseSensitive(o, "ts");
	ev = cJSON_GetObjectItemCaseSensitive(o, "event");
	sq = cJSON_GetObjectItemCaseSensitive(o, "seq");
	pv = cJSON_GetObjectItemCaseSensitive(o, "prev");
	check(cJSON_IsString(ts) && strlen(ts->valuestring) == TS_LEN &&
		memcmp(ts->valuestring, data + 1, TS_LEN) == 0,
	    "ts not the one sent");
	check(cJSON_IsString(ev) && strlen(ev->valuestring) == elen &&
		memcmp(ev->valuestring, data + 2 + TS_LEN, elen) == 0,
	    "event not the one sent");
	check(cJSON_IsNumber(sq) && (uint64_t)sq->valuedouble == seq + 1,
	    "seq does not follow");
	check(cJSON_IsString(pv), "no prev");
	if (prevlen > 0) {
		SHA256((const unsigned char *)prev, prevlen - 1, h);
		for (i = 0; i < sizeof(h); i++)
			snprintf(hex + 2 * i, 3, "%02x", h[i]);
		check(strcmp(pv->valuestring, hex) == 0,
		    "prev is not the last line's hash");
	}
	cJSON_Delete(o);
	seq++;
	memcpy(prev, line, len);
	prevlen = len;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char why[256];
	size_t len;
	int sync, rc;

	if (aw == NULL)
		fz_audit_open("fuzz_audit_remote");
	rc = audit_remote_line(aw, data, size, &sync, NULL, NULL, NULL, why,
	    sizeof(why));
	len = new_line();
	if (rc == -2) {
		check(len == 0, "a refused datagram wrote something");
		check(why[0] != '\0', "a refusal without a reason");
		return 0;
	}
	check(size >= 2 + TS_LEN && (data[0] == 'L' || data[0] == 'S'),
	    "a datagram of no kind was taken");
	check(sync == (data[0] == 'S'), "sync not as sent");
	check(len > 0, "an accepted datagram wrote nothing");
	check_line(data, len);
	return 0;
}
