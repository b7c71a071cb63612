/*
 * "sluice audit verify [--head FILE] FILE...": checks audit logs written by
 * audit.c (docs/audit.md): every line a JSON object with ts, seq, event and
 * prev; seq +1 per line and prev the SHA-256 of the previous line, across
 * the files in the order given. It reads, never writes, and keeps one line
 * in memory. Verification proves the files are one unbroken chain; only an
 * anchor kept elsewhere (audit.head, a head hash printed earlier) also
 * proves that lines were not removed from, or changed at, the very end.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <openssl/evp.h>

#include "proxy/cli/cli.h"
#include "proxy/config/config.h"
#include "proxy/daemon/daemon.h"
#include "proxy/ops/ops.h"
#include "proxy/token/store.h"
#include "proxy/util/ascii.h"
#include "proxy/util/utf8.h"
#include "proxy/util/util.h"

#define VERIFY_MAX_FIELDS 256 /* more in one line: not written by sluice */
#define VERIFY_MAX_SEQ    9007199254740992.0 /* 2^53: exact in a double */
/*
 * Two hex strings that differ in at most this many digits are taken as one
 * edited by hand; a changed line changes its SHA-256 in about 60 of 64.
 */
#define VERIFY_NEAR_HEX 4

/* One verified line, as far as the chain is concerned. */
struct vline {
	const char *vl_file;
	uint64_t vl_lineno;
	uint64_t vl_seq;
	unsigned char vl_prev[32]; /* its prev field */
	unsigned char vl_hash[32]; /* SHA-256 of its bytes */
};

/*
 * A broken link between two lines, waiting for the line after vp_cur to
 * tell which of the two was changed.
 */
struct vpending {
	int vp_set;
	struct vline vp_before; /* the line before the link */
	struct vline vp_cur;    /* the line after it */
	int vp_seq_broken;      /* seq is not before's + 1 */
};

struct vstate {
	struct phases *vs_open; /* start lines not ended yet */
	uint64_t vs_unstarted;  /* end lines without their start */
	EVP_MD_CTX *vs_md;
	FILE *vs_err;
	uint64_t vs_lines;
	int vs_have_last;
	int vs_last_first; /* vs_last is the first line of all */
	struct vline vs_last;
	struct vpending vs_pend;
	int vs_have_anchor; /* --head given */
	uint64_t vs_anchor_seq;
	unsigned char vs_anchor_hash[32];
	int vs_anchor_seen;
};

static const unsigned char verify_zero[32];

static int
verify_unhex(const char *s, unsigned char out[32])
{
	if (strlen(s) != 64)
		return -1;
	return ascii_hex_decode(s, out, 32);
}

/* Hex digits in which two hashes differ. */
static int
verify_hex_distance(const unsigned char a[32], const unsigned char b[32])
{
	int i, d = 0;

	for (i = 0; i < 32; i++) {
		d += (a[i] >> 4) != (b[i] >> 4);
		d += (a[i] & 0xf) != (b[i] & 0xf);
	}
	return d;
}

static int verify_fail(struct vstate *vs, const struct vline *l,
    const char *fmt, ...) SL_PRINTF(3, 4);

static int
verify_fail(struct vstate *vs, const struct vline *l, const char *fmt, ...)
{
	va_list ap;

	fprintf(vs->vs_err, "%s:%" PRIu64 ": ", l->vl_file, l->vl_lineno);
	va_start(ap, fmt);
	(void)vfprintf(vs->vs_err, fmt, ap);
	va_end(ap);
	(void)fputc('\n', vs->vs_err);
	return -1;
}

/* ts must look like 2026-11-30T04:22:36.123456Z. */
static int
verify_ts_shape(const char *ts)
{
	static const char shape[] = "dddd-dd-ddTdd:dd:dd.ddddddZ";
	size_t i;

	if (strlen(ts) != sizeof(shape) - 1)
		return -1;
	for (i = 0; shape[i] != '\0'; i++) {
		if (shape[i] == 'd' ? ts[i] < '0' || ts[i] > '9' :
				      ts[i] != shape[i])
			return -1;
	}
	return 0;
}

/*
 * The bytes of a line must be what audit.c writes: valid UTF-8 without
 * raw control bytes (cJSON alone accepts both).
 */
static int
verify_bytes(struct vstate *vs, const struct vline *l, const char *p,
    size_t len)
{
	const unsigned char *u = (const unsigned char *)p;
	size_t i = 0, n;

	while (i < len) {
		if (u[i] < 0x20 || u[i] == 0x7f)
			return verify_fail(vs, l,
			    "control byte 0x%02x at byte %zu", u[i], i + 1);
		if ((n = utf8_len(u + i, len - i)) == 0)
			return verify_fail(vs, l, "invalid UTF-8 at byte %zu",
			    i + 1);
		i += n;
	}
	return 0;
}

/*
 * fsync "always" writes a start line (phase "start") and an http.end or
 * connect.end line with the same id (docs/audit.md): count the starts
 * that have no end (in flight when the log stopped) and the ends whose
 * start is not in the files given (an earlier file left out). Neither
 * breaks the chain. -1: out of memory.
 */
static int
verify_phase(struct vstate *vs, const cJSON *j, const char *event)
{
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "id");
	const char *sid;
	cJSON *start;

	if (phases_is_end(event) && cJSON_IsString(id)) {
		if (phases_end(vs->vs_open, id->valuestring, &start) == 0)
			vs->vs_unstarted++;
		cJSON_Delete(start);
		return 0;
	}
	if ((sid = phases_start_id(j)) == NULL)
		return 0;
	return phases_start(vs->vs_open, sid, NULL);
}

/* Parse one line into l (seq, prev); -1 after reporting why. */
static int
verify_parse(struct vstate *vs, struct vline *l, const char *p, size_t len)
{
	const char *end = NULL;
	cJSON *j, *f, *g, *seq, *prev, *ts, *ev;
	int n = 0, rc = -1;

	if (len == 0)
		return verify_fail(vs, l, "empty line");
	if (verify_bytes(vs, l, p, len) == -1)
		return -1;
	j = cJSON_ParseWithLengthOpts(p, len, &end, 0);
	if (j == NULL || end != p + len || !cJSON_IsObject(j)) {
		verify_fail(vs, l, "not a JSON object");
		goto out;
	}
	/* Duplicate keys would let two readers see two different lines. */
	cJSON_ArrayForEach(f, j) {
		if (++n > VERIFY_MAX_FIELDS) {
			verify_fail(vs, l, "more than %d fields",
			    VERIFY_MAX_FIELDS);
			goto out;
		}
		for (g = j->child; g != f; g = g->next)
			if (strcmp(g->string, f->string) == 0) {
				verify_fail(vs, l, "duplicate key \"%s\"",
				    f->string);
				goto out;
			}
	}
	ts = cJSON_GetObjectItemCaseSensitive(j, "ts");
	ev = cJSON_GetObjectItemCaseSensitive(j, "event");
	seq = cJSON_GetObjectItemCaseSensitive(j, "seq");
	prev = cJSON_GetObjectItemCaseSensitive(j, "prev");
	if (!cJSON_IsString(ts) || verify_ts_shape(ts->valuestring) == -1) {
		verify_fail(vs, l,
		    "no \"ts\" in RFC 3339 UTC with microseconds");
		goto out;
	}
	if (!cJSON_IsString(ev) || ev->valuestring[0] == '\0') {
		verify_fail(vs, l, "no \"event\"");
		goto out;
	}
	if (!cJSON_IsNumber(seq) || seq->valuedouble < 1 ||
	    seq->valuedouble > VERIFY_MAX_SEQ ||
	    seq->valuedouble != (double)(uint64_t)seq->valuedouble) {
		verify_fail(vs, l, "no \"seq\" (a positive integer)");
		goto out;
	}
	l->vl_seq = (uint64_t)seq->valuedouble;
	if (prev == NULL) {
		verify_fail(vs, l, "no \"prev\" (was audit.chain off?)");
		goto out;
	}
	if (!cJSON_IsString(prev) ||
	    verify_unhex(prev->valuestring, l->vl_prev) == -1) {
		verify_fail(vs, l, "\"prev\" is not 64 lower-case hex digits");
		goto out;
	}
	if (verify_phase(vs, j, ev->valuestring) == -1) {
		verify_fail(vs, l, "out of memory");
		goto out;
	}
	rc = 0;
out:
	cJSON_Delete(j);
	return rc;
}

static int
verify_linked(const struct vline *a, const struct vline *b)
{
	return b->vl_seq == a->vl_seq + 1 &&
	    memcmp(b->vl_prev, a->vl_hash, 32) == 0;
}

/*
 * Report a pending broken link. next is the line after vp_cur, or NULL at
 * the end of the input. If vp_cur links correctly to next, vp_cur is
 * intact and the line before it was changed; otherwise vp_cur is at fault.
 * At the end, the anchor decides when it covers vp_cur; without one, a
 * prev that is one or two digits off its expected value was edited in
 * place (line cur), while a changed line before it yields an unrelated
 * hash.
 */
static int
verify_resolve(struct vstate *vs, const struct vline *next)
{
	const struct vpending *p = &vs->vs_pend;
	const struct vline *b = &p->vp_before, *c = &p->vp_cur;
	int before_changed;

	if (p->vp_seq_broken) {
		/* Only reached when before is the very first line. */
		before_changed = next != NULL && verify_linked(c, next);
		if (next == NULL && memcmp(c->vl_prev, b->vl_hash, 32) == 0)
			before_changed = 0; /* c's seq itself was edited */
	} else if (next != NULL)
		before_changed = verify_linked(c, next);
	else if (vs->vs_have_anchor && vs->vs_anchor_seq == c->vl_seq)
		before_changed =
		    memcmp(vs->vs_anchor_hash, c->vl_hash, 32) == 0;
	else
		before_changed = verify_hex_distance(c->vl_prev, b->vl_hash) >
		    VERIFY_NEAR_HEX;
	if (before_changed)
		return verify_fail(vs, b,
		    "line changed: its SHA-256 is not the prev of the next line "
		    "(%s:%" PRIu64 ")",
		    c->vl_file, c->vl_lineno);
	if (p->vp_seq_broken)
		return verify_fail(vs, c, "seq %" PRIu64 " after %" PRIu64,
		    c->vl_seq, b->vl_seq);
	return verify_fail(vs, c,
	    "prev is not the SHA-256 of the previous line (%s:%" PRIu64 ")",
	    b->vl_file, b->vl_lineno);
}

/* Check one complete line (without its newline) against the chain. */
static int
verify_line(struct vstate *vs, struct vline *l, const char *p, size_t len)
{
	unsigned int hl = 0;

	if (EVP_DigestInit_ex(vs->vs_md, EVP_sha256(), NULL) != 1 ||
	    EVP_DigestUpdate(vs->vs_md, p, len) != 1 ||
	    EVP_DigestFinal_ex(vs->vs_md, l->vl_hash, &hl) != 1 || hl != 32)
		return verify_fail(vs, l, "SHA-256 failed");
	if (verify_parse(vs, l, p, len) == -1) {
		/* An earlier break is the first one. */
		if (vs->vs_pend.vp_set)
			verify_resolve(vs, NULL);
		return -1;
	}
	if (vs->vs_pend.vp_set)
		return verify_resolve(vs, l);
	if (!vs->vs_have_last) {
		/* The first line: its prev is taken as given, unless seq 1. */
		if (l->vl_seq == 1 && memcmp(l->vl_prev, verify_zero, 32) != 0)
			return verify_fail(vs, l,
			    "seq 1 (the first line ever) must have a prev of "
			    "64 zeros");
	} else if (!verify_linked(&vs->vs_last, l)) {
		int seq_broken = l->vl_seq != vs->vs_last.vl_seq + 1;

		/*
		 * A seq that does not follow its predecessor is this line's
		 * fault (a gap, a duplicate, an edit), because the link
		 * before the predecessor held: except after the very first
		 * line, whose own seq nothing vouched for. There, a seq too
		 * high still reads as missing lines; one too low waits for
		 * the next line to tell whether the first line was edited.
		 */
		if (seq_broken &&
		    (!vs->vs_last_first ||
			l->vl_seq > vs->vs_last.vl_seq + 1)) {
			if (l->vl_seq > vs->vs_last.vl_seq + 1)
				return verify_fail(vs, l,
				    "seq %" PRIu64 " after %" PRIu64
				    ": %" PRIu64 " line(s) missing before this "
				    "one",
				    l->vl_seq, vs->vs_last.vl_seq,
				    l->vl_seq - vs->vs_last.vl_seq - 1);
			return verify_fail(vs, l,
			    "seq %" PRIu64 " after %" PRIu64, l->vl_seq,
			    vs->vs_last.vl_seq);
		}
		vs->vs_pend.vp_set = 1;
		vs->vs_pend.vp_before = vs->vs_last;
		vs->vs_pend.vp_cur = *l;
		vs->vs_pend.vp_seq_broken = seq_broken;
	}
	if (vs->vs_have_anchor && l->vl_seq == vs->vs_anchor_seq &&
	    !vs->vs_pend.vp_set) {
		if (memcmp(l->vl_hash, vs->vs_anchor_hash, 32) != 0)
			return verify_fail(vs, l,
			    "line changed: its SHA-256 is not the one in the "
			    "head file");
		vs->vs_anchor_seen = 1;
	}
	vs->vs_last_first = !vs->vs_have_last;
	vs->vs_have_last = 1;
	vs->vs_last = *l;
	return 0;
}

/* Read the lines of one stream; -1 at the first break (reported). */
static int
verify_stream(struct vstate *vs, FILE *f, const char *name, char *buf)
{
	struct vline l;
	size_t len = 0;
	int c;

	memset(&l, 0, sizeof(l));
	l.vl_file = name;
	l.vl_lineno = 1;
	while ((c = getc_unlocked(f)) != EOF) {
		if (c != '\n') {
			if (len == AUDIT_LINE_MAX - 1)
				return verify_fail(vs, &l,
				    "line longer than %d bytes",
				    AUDIT_LINE_MAX - 1);
			buf[len++] = (char)c;
			continue;
		}
		if (verify_line(vs, &l, buf, len) == -1)
			return -1;
		vs->vs_lines++;
		l.vl_lineno++;
		len = 0;
	}
	if (ferror(f)) {
		fprintf(vs->vs_err, "%s: read error: %s\n", name,
		    strerror(errno));
		return -1;
	}
	if (len > 0) {
		if (vs->vs_pend.vp_set)
			return verify_resolve(vs, NULL);
		return verify_fail(vs, &l,
		    "no newline at the end (a partial line)");
	}
	return 0;
}

/* Parse "<seq> <64 lower-case hex>\n", as the daemon reads it. */
static int
verify_parse_head(const char *buf, uint64_t *seq, unsigned char hash[32])
{
	char *end;

	if (buf[0] < '0' || buf[0] > '9')
		return -1;
	errno = 0;
	*seq = strtoull(buf, &end, 10);
	if (errno != 0 || *end != ' ' || strlen(end + 1) != 65 ||
	    end[65] != '\n')
		return -1;
	return ascii_hex_decode(end + 1, hash, 32);
}

/* Read an audit.head file: "<seq> <64 hex>\n". */
static int
verify_read_head(struct vstate *vs, const char *path)
{
	char buf[128];
	FILE *f;
	size_t n;

	if ((f = fopen(path, "r")) == NULL) {
		fprintf(vs->vs_err, "%s: %s\n", path, strerror(errno));
		return -1;
	}
	n = fread(buf, 1, sizeof(buf) - 1, f);
	(void)fclose(f); /* read only */
	buf[n] = '\0';
	if (verify_parse_head(buf, &vs->vs_anchor_seq, vs->vs_anchor_hash) ==
	    -1) {
		fprintf(vs->vs_err, "%s: not an audit.head file\n", path);
		return -1;
	}
	vs->vs_have_anchor = 1;
	return 0;
}

int
audit_verify(const char *const *files, size_t nfiles, const char *head,
    FILE *out, FILE *err)
{
	struct vstate vs;
	char *buf = NULL, hex[65];
	size_t i;
	int rc = SL_EXIT_INVALID;

	memset(&vs, 0, sizeof(vs));
	vs.vs_err = err;
	if ((vs.vs_md = EVP_MD_CTX_new()) == NULL ||
	    (vs.vs_open = phases_new()) == NULL ||
	    (buf = malloc(AUDIT_LINE_MAX)) == NULL) {
		fprintf(err, "sluice: audit verify: out of memory\n");
		rc = SL_EXIT_RUNTIME;
		goto out;
	}
	if (head != NULL && verify_read_head(&vs, head) == -1)
		goto out;
	for (i = 0; i < nfiles; i++) {
		FILE *f;
		int r;

		if (strcmp(files[i], "-") == 0)
			f = stdin;
		else if ((f = fopen(files[i], "r")) == NULL) {
			fprintf(err, "%s: %s\n", files[i], strerror(errno));
			goto out;
		}
		r = verify_stream(&vs, f,
		    strcmp(files[i], "-") == 0 ? "(stdin)" : files[i], buf);
		if (f != stdin)
			(void)fclose(f); /* read only */
		if (r == -1)
			goto out;
	}
	if (vs.vs_pend.vp_set) {
		verify_resolve(&vs, NULL);
		goto out;
	}
	if (vs.vs_have_anchor && !vs.vs_anchor_seen) {
		fprintf(err,
		    "%s: seq %" PRIu64 " of the head file is not in the files "
		    "given\n",
		    head, vs.vs_anchor_seq);
		goto out;
	}
	if (vs.vs_have_last) {
		ascii_hex_encode(hex, vs.vs_last.vl_hash, 32);
		fprintf(out,
		    "ok: %zu file(s), %" PRIu64 " line(s), last seq %" PRIu64
		    ", head %s\n",
		    nfiles, vs.vs_lines, vs.vs_last.vl_seq, hex);
	} else
		fprintf(out, "ok: %zu file(s), 0 lines\n", nfiles);
	if (phases_open(vs.vs_open) > 0)
		fprintf(out,
		    "note: %" PRIu64 " request(s) started and not ended (in "
		    "flight when the log stopped, or ended in a later file)\n",
		    phases_open(vs.vs_open));
	if (vs.vs_unstarted > 0)
		fprintf(out,
		    "note: %" PRIu64 " end line(s) without their start line "
		    "(started in an earlier file)\n",
		    vs.vs_unstarted);
	rc = SL_EXIT_OK;
out:
	phases_free(vs.vs_open, NULL, NULL);
	free(buf);
	EVP_MD_CTX_free(vs.vs_md);
	return rc;
}

static void
cmd_audit_usage(FILE *f)
{
	fprintf(f,
	    "usage: sluice audit verify [--head STATE_DIR/audit.head] "
	    "FILE...\n"
	    "       sluice audit tail [-f] [--deny] [--sub RUN] "
	    "[--color=auto|always|never] FILE\n"
	    "       sluice audit stats FILE...\n"
	    "       sluice audit suggest [--wildcards] [--depth N] "
	    "[--audience AUD] FILE...\n");
}

int
cmd_audit(int argc, char **argv)
{
	const char *head = NULL;
	int i = 2;

	if (argc >= 2 &&
	    (strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 ||
		strcmp(argv[1], "-h") == 0)) {
		cmd_audit_usage(stdout);
		return SL_EXIT_OK;
	}
	if (argc >= 2 &&
	    (strcmp(argv[1], "tail") == 0 || strcmp(argv[1], "stats") == 0))
		return cmd_audit_view(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "suggest") == 0)
		return audit_suggest(argc - 1, argv + 1);
	if (argc < 2 || strcmp(argv[1], "verify") != 0) {
		cmd_audit_usage(stderr);
		return SL_EXIT_USAGE;
	}
	while (i < argc && argv[i][0] == '-' && argv[i][1] != '\0') {
		if (strcmp(argv[i], "--") == 0) {
			i++;
			break;
		}
		if (strcmp(argv[i], "--head") == 0 && i + 1 < argc) {
			head = argv[i + 1];
			i += 2;
			continue;
		}
		fprintf(stderr, "sluice: audit verify: unknown option %s\n",
		    argv[i]);
		cmd_audit_usage(stderr);
		return SL_EXIT_USAGE;
	}
	if (i >= argc) {
		cmd_audit_usage(stderr);
		return SL_EXIT_USAGE;
	}
	return audit_verify((const char *const *)(argv + i), (size_t)(argc - i),
	    head, stdout, stderr);
}
