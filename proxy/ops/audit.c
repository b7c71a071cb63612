/*
 * The audit log writer (DESIGN.md "Audit log", docs/audit.md): one JSON
 * object per line, appended, hash-chained, with the durability and failure
 * behaviour the policy asks for. It owns the file, the chain head
 * (<state_dir>/audit.head) and crash recovery of a partial last line. What
 * to log is the callers' business (daemon, conn, netguard); checking a log
 * is cmd_audit.c's.
 */
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <event2/event.h>
#include <openssl/evp.h>

#include "proxy/config/config.h"
#include "proxy/http/http1.h"
#include "proxy/ops/ops.h"
#include "proxy/token/store.h"
#include "proxy/util/ascii.h"
#include "proxy/util/utf8.h"
#include "proxy/util/util.h"

#define AUDIT_HEAD_NAME "audit.head"
#define AUDIT_MODE      0640 /* group may read (e.g. adm); never world */
#define AUDIT_KEY_MAX   128  /* bytes of one escaped key */
#define AUDIT_LOG_EVERY 10   /* seconds between warnings with "allow" */
/*
 * Room kept free at the end of the line buffer for ,"overflow":true, the
 * closing brace and the newline, so that commit never runs out of space.
 */
#define AUDIT_TAIL_ROOM 32

/*
 * The writer thread (with an event loop only): the loop formats and chains
 * each line and appends it to w_buf; the thread writes what is queued in
 * order, one write(2) per batch, and fsyncs as audit.fsync asks. w_mu
 * guards every field but w_bad. The file fields of struct audit (a_fd,
 * a_size, a_cut, a_unsynced, a_synced) belong to the thread while it runs,
 * and to the loop only while the thread is held (w_hold) or joined.
 * Failures are reported back (w_nfail..., w_bad, the eventfd) and the loop
 * accounts for them (audit_poll()), so metrics and logs stay on the loop.
 */
struct audit_writer {
	pthread_t w_thread;
	pthread_mutex_t w_mu;
	pthread_cond_t w_work; /* the thread waits: bytes, a sync, stop */
	pthread_cond_t w_prog; /* the loop waits: the thread's progress */
	char *w_buf;           /* queued lines, in order */
	size_t w_len, w_cap;
	char *w_out; /* the batch being written (swapped with w_buf) */
	size_t w_outcap;
	size_t w_inflight; /* its bytes: counted in AUDIT_QUEUE_MAX */
	uint64_t w_qseq;   /* seq and hash of the last line queued */
	unsigned char w_qhash[32];
	uint64_t w_seq; /* seq and hash of the last line in the file */
	unsigned char w_hash[32];
	uint64_t w_dseq;  /* seq of the last line made durable */
	uint64_t w_epoch; /* +1 each time queued lines were dropped */
	uint64_t w_sync_req, w_sync_done;
	enum audit_fsync w_fsync;
	int w_busy;     /* writing or syncing outside the lock */
	int w_hold;     /* the loop has the file: touch nothing */
	int w_parked;   /* held, and waiting (no lock but w_mu, released) */
	int w_stop;     /* finish what is queued, then return */
	int w_notify;   /* wake the loop after each good batch too */
	int w_wake_dur; /* the loop waits for durability (struct audit_wait) */
	/* Failures the loop has not seen yet. */
	uint64_t w_nfail;
	uint64_t w_fails; /* ever */
	int w_errno;
	const char *w_what;
	uint64_t w_fail_seq; /* w_seq at the last failure */
	atomic_int w_bad;    /* w_nfail != 0: audit_poll() has work */
	int w_efd;           /* eventfd: wakes the loop */
	struct event *w_ev;
};

/*
 * The writer. Owned by the daemon (daemon.c); freed by audit_close(). Only
 * the libevent loop's thread touches it (the writer thread has its own
 * part, above).
 */
struct audit {
	char *a_path;      /* the log file */
	char *a_head_path; /* <state_dir>/audit.head, or NULL */
	enum audit_fsync a_fsync;
	int a_chain;              /* write "prev" */
	int a_allow;              /* on_error "allow" */
	int a_fd;                 /* O_RDWR|O_APPEND */
	off_t a_size;             /* bytes of complete lines in the file */
	off_t a_cut;              /* >= 0: cut the file back to this first */
	int a_unsynced;           /* lines written since the last fsync */
	struct timespec a_synced; /* CLOCK_MONOTONIC of the last fsync */
	uint64_t a_seq;           /* seq of the last line written; 0: none */
	unsigned char a_hash[32]; /* its SHA-256; zeros when none */
	int a_failed;             /* "deny": the last write failed */
	uint64_t a_errors;        /* failed writes, ever */
	uint64_t a_unlogged;      /* failures not yet logged ("allow") */
	struct timespec a_logged; /* CLOCK_MONOTONIC of the last warning */
	int a_building;           /* audit_begin() was called */
	int a_overflow;           /* a field did not fit in the line */
	size_t a_len;             /* bytes in a_line */
	/*
	 * With an event loop the writer thread does the I/O: a_seq/a_hash
	 * then run ahead of the file (they are the last line queued).
	 */
	struct audit_writer *a_w; /* NULL: write inline (no event loop) */
	uint64_t a_epoch;         /* w_epoch the chain head was taken at */
	int a_batch;         /* audit_batch(): wake the thread at the end */
	int a_batch_queued;  /* a line was queued in the batch */
	uint64_t a_fail_seq; /* failed state: ends once w_seq is past */
	/*
	 * A privsep engine's writer (audit_remote()): the parent chains and
	 * writes; lines go to it over a_rfd, a_line then holds the fields
	 * only (ts and event are kept apart).
	 */
	int a_rfd;              /* -1: not remote */
	struct event *a_rev;    /* a_rfd: acks and state in */
	struct event *a_rwev;   /* a_rfd: the queue out, while one waits */
	struct event *a_rflush; /* sends the queue, next turn of the loop */
	struct audit_rq *a_rq;  /* lines the socket did not take yet */
	struct audit_rq **a_rq_tail;
	size_t a_rq_bytes;
	uint64_t a_rsent, a_racked; /* "sync" lines sent, acked durable */
	int a_rfull;                /* the queue overflowed */
	int a_rparent;              /* the parent's writer is failed */
	int a_rdead;                /* the parent's channel is closed */
	char a_rts[32];
	char a_revent[AUDIT_EVENT_MAX + 1];
	/* The parent: told when the failed state starts or ends. */
	audit_state_cb *a_state_cb;
	void *a_state_arg;
	/*
	 * Waits for durability (audit_commit_wait()), in commit order; run
	 * from a_wev, so that no callback runs inside a commit.
	 */
	TAILQ_HEAD(audit_waits, audit_wait) a_waits;
	struct event *a_wev;
	char a_line[AUDIT_LINE_MAX];
};

/* A queued remote message (audit_remote()). */
struct audit_rq {
	struct audit_rq *rq_next;
	size_t rq_len;
	unsigned char rq_data[];
};

/* What the tail of an existing log file holds. */
struct audit_tail {
	int at_has_last;           /* a complete line was found */
	uint64_t at_seq;           /* its seq */
	unsigned char at_hash[32]; /* its SHA-256 */
	off_t at_keep;             /* bytes of complete lines */
	off_t at_size;             /* file size; > at_keep: a partial line */
	unsigned char at_partial_hash[32];
};

static int audit_enqueue(struct audit *, size_t, const unsigned char[32]);
static void audit_poll(struct audit *);
static void audit_notify(struct audit *, int);
static void audit_drain(struct audit *, int hold);
static void audit_release(struct audit *);
static void audit_remote_begin(struct audit *, const char *event);
static void
audit_begin_ts(struct audit *, const char *event, const char *given);
static int audit_remote_commit(struct audit *, struct audit_wait *,
    audit_wait_cb *, void *);
static void audit_waits_drop(struct audit *);
static void audit_waits_cb(evutil_socket_t, short, void *);
static int audit_remote_read(struct audit *);
static void audit_remote_flush_cb(evutil_socket_t, short, void *);
static void audit_remote_free(struct audit *);
static void audit_waits_run(struct audit *);
static void audit_waits_answer(struct audit *, uint64_t, int);

/*
 * Escape len bytes of s as the inside of a JSON string into dst, writing
 * at most cap bytes and never half an escape or half a character. Quote,
 * backslash, C0 and C1 controls and DEL become escapes (a C1 control or
 * DEL is valid JSON, but a terminal would act on it); valid UTF-8 passes
 * through; each byte that starts no valid sequence becomes \ufffd. Returns
 * the bytes written; *used is the input consumed (< len when cut).
 */
static size_t
audit_escape(char *dst, size_t cap, const unsigned char *s, size_t len,
    size_t *used)
{
	size_t i = 0, o = 0, run;

	while (i < len) {
		const char *out;
		char esc[7] = "\\u00"; /* and ascii_hex_encode()'s NUL */
		size_t olen, step = 1;
		unsigned int ctl = 0x100; /* none */
		unsigned char c;

		/* Most bytes are printable ASCII: copy such runs whole. */
		for (run = i; run < len && s[run] >= 0x20 && s[run] < 0x7f &&
		     s[run] != '"' && s[run] != '\\';
		     run++)
			;
		if (run > i) {
			if (run - i > cap - o)
				run = i + (cap - o);
			memcpy(dst + o, s + i, run - i);
			o += run - i;
			i = run;
			if (o == cap)
				break;
			continue;
		}
		if (s[i] == '"' || s[i] == '\\') {
			esc[0] = '\\';
			esc[1] = (char)s[i];
			out = esc;
			olen = 2;
		} else if (s[i] < 0x20 || s[i] == 0x7f)
			ctl = s[i];
		else if (s[i] < 0x80) {
			out = (const char *)s + i;
			olen = 1;
		} else if ((step = utf8_len(s + i, len - i)) == 0) {
			out = "\\ufffd";
			olen = 6;
			step = 1;
		} else if (step == 2 && s[i] == 0xc2 && s[i + 1] < 0xa0)
			ctl = s[i + 1]; /* U+0080..U+009F */
		else {
			out = (const char *)s + i;
			olen = step;
		}
		if (ctl != 0x100) {
			/* esc holds "\u00" (a quote took none of it). */
			c = (unsigned char)ctl;
			ascii_hex_encode(esc + 4, &c, 1);
			out = esc;
			olen = 6;
		}
		if (olen > cap - o)
			break;
		memcpy(dst + o, out, olen);
		o += olen;
		i += step;
	}
	*used = i;
	return o;
}

static double
audit_elapsed(const struct timespec *since)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - since->tv_sec) +
	    (double)(now.tv_nsec - since->tv_nsec) / 1e9;
}

/* Append n bytes to the line, or fail leaving the line as it was. */
static int
audit_put(struct audit *a, const char *s, size_t n)
{
	if (n > AUDIT_LINE_MAX - AUDIT_TAIL_ROOM - a->a_len)
		return -1;
	memcpy(a->a_line + a->a_len, s, n);
	a->a_len += n;
	return 0;
}

/* Append ,"key": (the key escaped and capped). */
static int
audit_put_key(struct audit *a, const char *key)
{
	char k[AUDIT_KEY_MAX];
	size_t klen, used;

	klen = audit_escape(k, sizeof(k), (const unsigned char *)key,
	    strlen(key), &used);
	if (audit_put(a, ",\"", 2) == -1 || audit_put(a, k, klen) == -1 ||
	    audit_put(a, "\":", 2) == -1)
		return -1;
	return 0;
}

/* Append a field whose value is already JSON (a number, a hex string). */
static void
audit_put_raw(struct audit *a, const char *key, const char *val, size_t n)
{
	size_t mark;

	if (a == NULL || !a->a_building)
		return;
	mark = a->a_len;
	if (audit_put_key(a, key) == -1 || audit_put(a, val, n) == -1) {
		a->a_len = mark;
		a->a_overflow = 1;
	}
}

/* Decimal digits of v at the start of buf (at least 21 bytes); length. */
static size_t
audit_fmt_u64(char *buf, size_t len, uint64_t v)
{
	char tmp[20];
	size_t n = 0, i;

	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v != 0 && n < sizeof(tmp));
	for (i = 0; i < n && i < len; i++)
		buf[i] = tmp[n - 1 - i];
	return i;
}

static void
audit_timestamp(char *buf, size_t len)
{
	static time_t cached_sec = (time_t)-1;
	static char cached[64]; /* "YYYY-MM-DDTHH:MM:SS." */
	struct timespec ts;
	struct tm tm;
	long us;
	int i;

	/*
	 * Every line has a timestamp: format the date and time once a
	 * second and only the microseconds per line.
	 */
	clock_gettime(CLOCK_REALTIME, &ts);
	if (ts.tv_sec != cached_sec) {
		gmtime_r(&ts.tv_sec, &tm);
		snprintf(cached, sizeof(cached),
		    "%04d-%02d-%02dT%02d:%02d:%02d.", tm.tm_year + 1900,
		    tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
		    tm.tm_sec);
		cached_sec = ts.tv_sec;
	}
	if (len < 28) {
		if (len > 0)
			buf[0] = '\0';
		return;
	}
	memcpy(buf, cached, 20);
	us = ts.tv_nsec / 1000;
	for (i = 25; i >= 20; i--) {
		buf[i] = (char)('0' + us % 10);
		us /= 10;
	}
	buf[26] = 'Z';
	buf[27] = '\0';
}

void
audit_begin(struct audit *a, const char *event)
{
	if (a == NULL)
		return;
	if (a->a_rfd != -1) {
		audit_remote_begin(a, event);
		return;
	}
	audit_begin_ts(a, event, NULL);
}

/* As audit_begin, at the time ts when it is not NULL (an engine's line). */
static void
audit_begin_ts(struct audit *a, const char *event, const char *given)
{
	char ts[64], num[32], hex[65];
	size_t n;

	/* A write the thread lost moves the chain head back: see first. */
	if (a->a_w != NULL && atomic_load(&a->a_w->w_bad))
		audit_poll(a);
	a->a_len = 0;
	a->a_overflow = 0;
	a->a_building = 1;
	if (given != NULL)
		snprintf(ts, sizeof(ts), "%s", given);
	else
		audit_timestamp(ts, sizeof(ts));
	/* The head fits: the buffer is far larger than these fields. */
	(void)audit_put(a, "{\"ts\":\"", 7);
	(void)audit_put(a, ts, strlen(ts));
	(void)audit_put(a, "\",\"seq\":", 8);
	n = audit_fmt_u64(num, sizeof(num), a->a_seq + 1);
	(void)audit_put(a, num, n);
	audit_add_cstr(a, "event", event);
	if (a->a_chain) {
		ascii_hex_encode(hex, a->a_hash, sizeof(a->a_hash));
		hex[64] = '"';
		(void)audit_put(a, ",\"prev\":\"", 9);
		(void)audit_put(a, hex, 65);
	}
}

void
audit_add_str(struct audit *a, const char *key, const char *val, size_t len)
{
	char v[AUDIT_VALUE_MAX];
	size_t vlen, used, mark;

	if (a == NULL || !a->a_building || val == NULL)
		return;
	mark = a->a_len;
	vlen =
	    audit_escape(v, sizeof(v), (const unsigned char *)val, len, &used);
	if (audit_put_key(a, key) == -1 || audit_put(a, "\"", 1) == -1 ||
	    audit_put(a, v, vlen) == -1 || audit_put(a, "\"", 1) == -1) {
		a->a_len = mark;
		a->a_overflow = 1;
		return;
	}
	if (used < len) {
		/*
		 * The value was cut at a character boundary: say so, with the
		 * original length, rather than let a reader take the prefix
		 * for the whole value.
		 */
		char k[AUDIT_KEY_MAX + 16], num[32];
		int kn, nn;

		kn = snprintf(k, sizeof(k), "%.*s_truncated",
		    (int)strnlen(key, AUDIT_KEY_MAX - 16), key);
		nn = snprintf(num, sizeof(num), "%zu", len);
		if (kn > 0 && nn > 0)
			audit_put_raw(a, k, num, (size_t)nn);
	}
}

void
audit_add_cstr(struct audit *a, const char *key, const char *val)
{
	if (val != NULL)
		audit_add_str(a, key, val, strlen(val));
}

void
audit_add_int(struct audit *a, const char *key, int64_t val)
{
	char num[24];
	size_t n;

	if (val < 0) {
		n = audit_fmt_u64(num + 1, sizeof(num) - 1,
		    (uint64_t)(-(val + 1)) + 1);
		num[0] = '-';
		audit_put_raw(a, key, num, n + 1);
	} else {
		n = audit_fmt_u64(num, sizeof(num), (uint64_t)val);
		audit_put_raw(a, key, num, n);
	}
}

void
audit_add_uint(struct audit *a, const char *key, uint64_t val)
{
	char num[24];
	size_t n;

	n = audit_fmt_u64(num, sizeof(num), val);
	audit_put_raw(a, key, num, n);
}

void
audit_add_bool(struct audit *a, const char *key, int val)
{
	if (val)
		audit_put_raw(a, key, "true", 4);
	else
		audit_put_raw(a, key, "false", 5);
}

void
audit_add_hex(struct audit *a, const char *key, const unsigned char *p,
    size_t len)
{
	char v[AUDIT_VALUE_MAX];

	if (p == NULL || 2 * len + 2 > sizeof(v)) {
		if (a != NULL && a->a_building)
			a->a_overflow = 1;
		return;
	}
	v[0] = '"';
	ascii_hex_encode(v + 1, p, len);
	v[2 * len + 1] = '"';
	audit_put_raw(a, key, v, 2 * len + 2);
}

/*
 * Cut the file back to the end of its last complete line, after a write
 * left written bytes of a line behind it. With O_APPEND the offset is not
 * ours to track, so the size comes from fstat when possible: that also
 * stays right if the file was truncated under us. Returns 0 or -1 (a_cut
 * then tells the next write to try again first).
 */
static int
audit_cut_back(struct audit *a, size_t written)
{
	struct stat st;

	if (fstat(a->a_fd, &st) == 0 && st.st_size >= (off_t)written)
		a->a_cut = st.st_size - (off_t)written;
	else
		a->a_cut = a->a_size;
	if (ftruncate(a->a_fd, a->a_cut) == -1)
		return -1;
	a->a_size = a->a_cut;
	a->a_cut = -1;
	return 0;
}

/* Write a whole line or nothing (as far as the file's bytes go). */
static int
audit_append(struct audit *a, const char *buf, size_t len)
{
	size_t off = 0;
	ssize_t n;
	int saved;

	if (a->a_cut >= 0) {
		if (ftruncate(a->a_fd, a->a_cut) == -1)
			return -1;
		a->a_size = a->a_cut;
		a->a_cut = -1;
	}
	while (off < len) {
		n = write(a->a_fd, buf + off, len - off);
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n == 0)
				errno = EIO;
			saved = errno;
			if (off > 0)
				(void)audit_cut_back(a, off);
			errno = saved;
			return -1;
		}
		off += (size_t)n;
	}
	a->a_size += (off_t)len;
	return 0;
}

static int
audit_fsync_now(struct audit *a)
{
	if (fsync(a->a_fd) == -1)
		return -1;
	a->a_unsynced = 0;
	clock_gettime(CLOCK_MONOTONIC, &a->a_synced);
	return 0;
}

/* Count and report a failure; errno is the cause. */
static void
audit_fail(struct audit *a, const char *what)
{
	int saved = errno;

	a->a_errors++;
	metrics_audit_error();
	if (!a->a_allow) {
		if (!a->a_failed) {
			errno = saved;
			log_warn("audit: %s %s failed; refusing requests until "
				 "a write succeeds",
			    what, a->a_path);
			metrics_audit_failed(1);
		}
		if (!a->a_failed && a->a_state_cb != NULL)
			a->a_state_cb(1, a->a_state_arg);
		a->a_failed = 1;
		audit_notify(a, 1);
		errno = saved;
		return;
	}
	/* "allow": the daemon goes on, so keep the log from flooding. */
	a->a_unlogged++;
	if (a->a_logged.tv_sec == 0 ||
	    audit_elapsed(&a->a_logged) >= AUDIT_LOG_EVERY) {
		errno = saved;
		log_warn("audit: %s %s failed (%" PRIu64 " failure(s) "
			 "since the last warning; on_error allow: going on)",
		    what, a->a_path, a->a_unlogged);
		a->a_unlogged = 0;
		clock_gettime(CLOCK_MONOTONIC, &a->a_logged);
	}
	errno = saved;
}

static void
audit_recovered(struct audit *a)
{
	if (!a->a_failed)
		return;
	a->a_failed = 0;
	audit_notify(a, 0);
	metrics_audit_failed(0);
	if (a->a_state_cb != NULL)
		a->a_state_cb(0, a->a_state_arg);
	log_info("audit: %s: writes succeed again; failed state ended",
	    a->a_path);
}

/*
 * The "interval" fsync after an inline write (no event loop: the CLI,
 * tests): at most once a second.
 */
static void
audit_after_write(struct audit *a)
{
	a->a_unsynced = 1;
	if (a->a_fsync != AUDIT_FSYNC_INTERVAL)
		return;
	if (audit_elapsed(&a->a_synced) >= 1.0 && audit_fsync_now(a) == -1)
		audit_fail(a, "fsync");
}

int
audit_commit(struct audit *a)
{
	unsigned char h[32];
	size_t len;

	if (a == NULL)
		return 0;
	if (!a->a_building)
		return -1;
	if (a->a_rfd != -1)
		return audit_remote_commit(a, NULL, NULL, NULL);
	a->a_building = 0;
	if (a->a_overflow) {
		memcpy(a->a_line + a->a_len, ",\"overflow\":true", 16);
		a->a_len += 16;
	}
	a->a_line[a->a_len] = '}';
	len = a->a_len + 1;
	if (digest_sha256(a->a_line, len, h) == -1) {
		errno = EIO;
		audit_fail(a, "hash of a line for");
		return -1;
	}
	a->a_line[len] = '\n';
	if (a->a_w != NULL)
		return audit_enqueue(a, len + 1, h);
	if (audit_append(a, a->a_line, len + 1) == -1) {
		audit_fail(a, "write to");
		return -1;
	}
	if (a->a_fsync == AUDIT_FSYNC_ALWAYS && audit_fsync_now(a) == -1) {
		/* Not durable: take the line back so the chain stays whole. */
		int saved = errno;

		(void)audit_cut_back(a, len + 1);
		errno = saved;
		audit_fail(a, "fsync of");
		return -1;
	}
	a->a_seq++;
	memcpy(a->a_hash, h, sizeof(h));
	if (a->a_fsync != AUDIT_FSYNC_ALWAYS)
		audit_after_write(a);
	audit_recovered(a);
	return 0;
}

/* Wake the loop (its audit_wake_cb()); w_mu held. */
static void
audit_wake(struct audit_writer *w)
{
	uint64_t one = 1;
	ssize_t n;

	/* EAGAIN: the counter is already non-zero, the loop will look. */
	n = write(w->w_efd, &one, sizeof(one));
	(void)n;
}

/* Report a failure of the thread to the loop; w_mu held. */
static void
audit_thread_fail(struct audit_writer *w, const char *what, int err)
{
	w->w_nfail++;
	w->w_fails++;
	w->w_errno = err;
	w->w_what = what;
	w->w_fail_seq = w->w_seq;
	atomic_store(&w->w_bad, 1);
	audit_wake(w);
}

/* Write one batch taken off the queue; w_mu held, and dropped meanwhile. */
static void
audit_thread_write(struct audit *a)
{
	struct audit_writer *w = a->a_w;
	unsigned char hash[32];
	const char *what = "write to";
	enum audit_fsync mode;
	uint64_t seq;
	size_t len, cap;
	char *buf;
	int rc, err;

	buf = w->w_buf;
	cap = w->w_cap;
	w->w_buf = w->w_out;
	w->w_cap = w->w_outcap;
	w->w_out = buf;
	w->w_outcap = cap;
	len = w->w_inflight = w->w_len;
	w->w_len = 0;
	seq = w->w_qseq;
	memcpy(hash, w->w_qhash, sizeof(hash));
	mode = w->w_fsync;
	w->w_busy = 1;
	pthread_mutex_unlock(&w->w_mu);
	rc = audit_append(a, buf, len);
	if (rc == 0 && mode == AUDIT_FSYNC_ALWAYS) {
		if (audit_fsync_now(a) == -1) {
			/* Not durable: take the lines back (as inline). */
			err = errno;
			(void)audit_cut_back(a, len);
			errno = err;
			what = "fsync of";
			rc = -1;
		}
	} else if (rc == 0)
		a->a_unsynced = 1;
	err = errno;
	pthread_mutex_lock(&w->w_mu);
	w->w_busy = 0;
	w->w_inflight = 0;
	if (rc == 0) {
		w->w_seq = seq;
		memcpy(w->w_hash, hash, sizeof(hash));
		if (!a->a_unsynced)
			w->w_dseq = seq;
		if (w->w_notify || (w->w_wake_dur && !a->a_unsynced))
			audit_wake(w);
	} else {
		/*
		 * The batch is lost (none of it is left in the file), and so
		 * are lines queued since: they chain onto it. The loop goes
		 * on from w_seq when it sees the new epoch.
		 */
		w->w_len = 0;
		w->w_epoch++;
		audit_thread_fail(w, what, err);
	}
	pthread_cond_broadcast(&w->w_prog);
}

/* fsync what is written (a sync asked for, or "interval"); w_mu held. */
static void
audit_thread_sync(struct audit *a)
{
	struct audit_writer *w = a->a_w;
	uint64_t seq = w->w_seq, req = w->w_sync_req;
	int rc, err;

	w->w_busy = 1;
	pthread_mutex_unlock(&w->w_mu);
	rc = audit_fsync_now(a);
	err = errno;
	if (rc == -1) /* "interval": try again in a second */
		clock_gettime(CLOCK_MONOTONIC, &a->a_synced);
	pthread_mutex_lock(&w->w_mu);
	w->w_busy = 0;
	if (rc == 0) {
		w->w_dseq = seq;
		if (w->w_notify || w->w_wake_dur)
			audit_wake(w);
	} else
		audit_thread_fail(w, "fsync of", err);
	if (w->w_sync_done < req)
		w->w_sync_done = req;
	pthread_cond_broadcast(&w->w_prog);
}

static void *
audit_thread(void *arg)
{
	struct audit *a = arg;
	struct audit_writer *w = a->a_w;
	struct timespec dl;

	pthread_mutex_lock(&w->w_mu);
	for (;;) {
		if (w->w_hold) {
			w->w_parked = 1;
			pthread_cond_broadcast(&w->w_prog);
			pthread_cond_wait(&w->w_work, &w->w_mu);
			w->w_parked = 0;
			continue;
		}
		if (w->w_len > 0) {
			audit_thread_write(a);
			continue;
		}
		if (a->a_unsynced &&
		    (w->w_sync_done < w->w_sync_req ||
			(w->w_fsync == AUDIT_FSYNC_INTERVAL &&
			    audit_elapsed(&a->a_synced) >= 1.0))) {
			audit_thread_sync(a);
			continue;
		}
		if (w->w_sync_done < w->w_sync_req) {
			/* Nothing to sync. */
			w->w_sync_done = w->w_sync_req;
			pthread_cond_broadcast(&w->w_prog);
			continue;
		}
		if (w->w_stop)
			break;
		if (a->a_unsynced && w->w_fsync == AUDIT_FSYNC_INTERVAL) {
			dl = a->a_synced;
			dl.tv_sec++;
			(void)pthread_cond_timedwait(&w->w_work, &w->w_mu, &dl);
		} else
			pthread_cond_wait(&w->w_work, &w->w_mu);
	}
	pthread_mutex_unlock(&w->w_mu);
	return NULL;
}

/* Ask the thread to wake the loop after each good batch (failed state). */
static void
audit_notify(struct audit *a, int on)
{
	if (a->a_w == NULL)
		return;
	pthread_mutex_lock(&a->a_w->w_mu);
	a->a_w->w_notify = on;
	pthread_mutex_unlock(&a->a_w->w_mu);
}

/*
 * Take in what the thread reported: count and log its failures, go back
 * to the file's last line when queued lines were lost, and end the failed
 * state once a line queued after the failure is in the file.
 */
static void
audit_poll(struct audit *a)
{
	struct audit_writer *w = a->a_w;
	struct audit_wait *aw;
	const char *what;
	uint64_t n, fseq, wseq, dseq;
	int err, moved = 0, lost = 0;

	if (w == NULL)
		return;
	pthread_mutex_lock(&w->w_mu);
	atomic_store(&w->w_bad, 0);
	n = w->w_nfail;
	w->w_nfail = 0;
	err = w->w_errno;
	what = w->w_what;
	fseq = w->w_fail_seq;
	if (w->w_epoch != a->a_epoch) {
		a->a_epoch = w->w_epoch;
		a->a_seq = w->w_seq;
		memcpy(a->a_hash, w->w_hash, sizeof(a->a_hash));
		moved = 1;
	}
	wseq = w->w_seq;
	dseq = w->w_dseq;
	pthread_mutex_unlock(&w->w_mu);
	/*
	 * Lines of an older epoch past the last durable one were lost (no
	 * line of the new epoch is queued before the loop has seen it).
	 */
	if (moved) {
		TAILQ_FOREACH(aw, &a->a_waits, aw_entry) {
			if (aw->aw_done || aw->aw_epoch == a->a_epoch)
				continue;
			aw->aw_done = 1;
			aw->aw_ok = aw->aw_seq <= dseq;
			lost = 1;
		}
	}
	if (lost)
		event_active(a->a_wev, EV_TIMEOUT, 0);
	if (n > 0) {
		if (moved || fseq > a->a_fail_seq)
			a->a_fail_seq = fseq;
		while (n-- > 0) {
			errno = err;
			audit_fail(a, what);
		}
	}
	if (a->a_failed && wseq > a->a_fail_seq)
		audit_recovered(a);
}

static void
audit_wake_cb(evutil_socket_t fd, short what, void *arg)
{
	uint64_t v;
	ssize_t n;

	(void)what;
	n = read(fd, &v, sizeof(v));
	(void)n;
	audit_poll(arg);
	audit_waits_run(arg);
}

/*
 * Hand the line in a_line (len bytes, newline included; hash h) to the
 * thread. The queue holds at most AUDIT_QUEUE_MAX bytes (queued and being
 * written): a line that does not fit is a failed write. Nobody waits here,
 * whatever the fsync mode: audit_commit_wait() waits from the loop.
 */
static int
audit_enqueue(struct audit *a, size_t len, const unsigned char h[32])
{
	struct audit_writer *w = a->a_w;
	size_t ncap;
	char *nb;

	pthread_mutex_lock(&w->w_mu);
	if (w->w_epoch != a->a_epoch) {
		/* Begun on a chain head the thread has since lost. */
		pthread_mutex_unlock(&w->w_mu);
		audit_poll(a);
		errno = EIO;
		audit_fail(a, "write to");
		return -1;
	}
	if (len > AUDIT_QUEUE_MAX - w->w_inflight - w->w_len) {
		pthread_mutex_unlock(&w->w_mu);
		errno = ENOBUFS;
		goto full;
	}
	if (w->w_len + len > w->w_cap) {
		for (ncap = w->w_cap != 0 ? w->w_cap :
					    2 * (size_t)AUDIT_LINE_MAX;
		     ncap < w->w_len + len; ncap *= 2)
			;
		if (ncap > AUDIT_QUEUE_MAX)
			ncap = AUDIT_QUEUE_MAX;
		if ((nb = realloc(w->w_buf, ncap)) == NULL) {
			pthread_mutex_unlock(&w->w_mu);
			errno = ENOMEM;
			goto full;
		}
		w->w_buf = nb;
		w->w_cap = ncap;
	}
	memcpy(w->w_buf + w->w_len, a->a_line, len);
	w->w_len += len;
	a->a_seq++;
	memcpy(a->a_hash, h, sizeof(a->a_hash));
	w->w_qseq = a->a_seq;
	memcpy(w->w_qhash, h, sizeof(w->w_qhash));
	if (a->a_batch && w->w_len < AUDIT_BATCH_KICK)
		a->a_batch_queued = 1;
	else
		pthread_cond_signal(&w->w_work);
	pthread_mutex_unlock(&w->w_mu);
	return 0;
full:
	audit_fail(a, "queueing a line for");
	a->a_fail_seq = a->a_seq;
	return -1;
}

void
audit_batch(struct audit *a, int on)
{
	struct audit_writer *w;

	if (a == NULL || (w = a->a_w) == NULL)
		return;
	a->a_batch = on;
	if (on || !a->a_batch_queued)
		return;
	a->a_batch_queued = 0;
	pthread_mutex_lock(&w->w_mu);
	pthread_cond_signal(&w->w_work);
	pthread_mutex_unlock(&w->w_mu);
}

/*
 * Wait until the thread has written everything queued; with hold, keep it
 * away from the file until audit_release() (the loop may then use a_fd).
 */
static void
audit_drain(struct audit *a, int hold)
{
	struct audit_writer *w = a->a_w;

	pthread_mutex_lock(&w->w_mu);
	if (w->w_len > 0) /* queued in a batch: not signalled yet */
		pthread_cond_signal(&w->w_work);
	while (w->w_len > 0 || w->w_busy)
		pthread_cond_wait(&w->w_prog, &w->w_mu);
	if (hold)
		w->w_hold = 1;
	pthread_mutex_unlock(&w->w_mu);
	audit_poll(a);
}

static void
audit_release(struct audit *a)
{
	struct audit_writer *w = a->a_w;

	pthread_mutex_lock(&w->w_mu);
	if (!a->a_unsynced)
		w->w_dseq = w->w_seq;
	w->w_hold = 0;
	pthread_cond_signal(&w->w_work);
	pthread_mutex_unlock(&w->w_mu);
}

void
audit_fork_prepare(struct audit *a)
{
	struct audit_writer *w;

	if (a == NULL || (w = a->a_w) == NULL)
		return;
	audit_drain(a, 1);
	pthread_mutex_lock(&w->w_mu);
	/* Out of an idle wait, to see the hold. */
	pthread_cond_signal(&w->w_work);
	while (!w->w_parked)
		pthread_cond_wait(&w->w_prog, &w->w_mu);
	pthread_mutex_unlock(&w->w_mu);
}

void
audit_fork_done(struct audit *a)
{
	if (a == NULL || a->a_w == NULL)
		return;
	audit_release(a);
}

int
audit_writer_sched(struct audit *a, int policy)
{
	struct sched_param sp = { .sched_priority = 0 };
	int rc;

	if (a == NULL || a->a_w == NULL)
		return 0;
	if ((rc = pthread_setschedparam(a->a_w->w_thread, policy, &sp)) != 0) {
		errno = rc;
		return -1;
	}
	return 0;
}

static void
audit_writer_free(struct audit_writer *w)
{
	if (w == NULL)
		return;
	if (w->w_ev != NULL)
		event_free(w->w_ev);
	if (w->w_efd != -1)
		close(w->w_efd);
	pthread_cond_destroy(&w->w_prog);
	pthread_cond_destroy(&w->w_work);
	pthread_mutex_destroy(&w->w_mu);
	free(w->w_buf);
	free(w->w_out);
	free(w);
}

/*
 * Start the writer thread (after the file is open and the chain resumed).
 * Signals stay with the main thread. Returns 0 or -1.
 */
static int
audit_writer_start(struct audit *a, struct event_base *base)
{
	struct audit_writer *w;
	pthread_condattr_t ca;
	sigset_t all, old;
	int rc;

	if ((w = calloc(1, sizeof(*w))) == NULL)
		return -1;
	w->w_efd = -1;
	if (pthread_mutex_init(&w->w_mu, NULL) != 0) {
		free(w);
		return -1;
	}
	if (pthread_condattr_init(&ca) != 0) {
		pthread_mutex_destroy(&w->w_mu);
		free(w);
		return -1;
	}
	rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	if (rc == 0 && (rc = pthread_cond_init(&w->w_work, &ca)) == 0 &&
	    (rc = pthread_cond_init(&w->w_prog, NULL)) != 0)
		pthread_cond_destroy(&w->w_work);
	pthread_condattr_destroy(&ca);
	if (rc != 0) {
		pthread_mutex_destroy(&w->w_mu);
		free(w);
		return -1;
	}
	w->w_fsync = a->a_fsync;
	w->w_seq = w->w_dseq = w->w_qseq = a->a_seq;
	memcpy(w->w_hash, a->a_hash, sizeof(w->w_hash));
	memcpy(w->w_qhash, a->a_hash, sizeof(w->w_qhash));
	atomic_init(&w->w_bad, 0);
	if ((w->w_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) == -1 ||
	    (w->w_ev = event_new(base, w->w_efd, EV_READ | EV_PERSIST,
		 audit_wake_cb, a)) == NULL ||
	    event_add(w->w_ev, NULL) == -1 ||
	    (a->a_wev == NULL &&
		(a->a_wev = event_new(base, -1, 0, audit_waits_cb, a)) ==
		    NULL)) {
		audit_writer_free(w);
		return -1;
	}
	a->a_w = w;
	a->a_epoch = 0;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&w->w_thread, NULL, audit_thread, a);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		a->a_w = NULL;
		audit_writer_free(w);
		errno = rc;
		return -1;
	}
	return 0;
}

/* Drain, stop and join the thread; the loop then owns the file. */
static void
audit_writer_stop(struct audit *a)
{
	struct audit_writer *w = a->a_w;

	if (w == NULL)
		return;
	audit_drain(a, 0);
	pthread_mutex_lock(&w->w_mu);
	w->w_stop = 1;
	pthread_cond_signal(&w->w_work);
	pthread_mutex_unlock(&w->w_mu);
	pthread_join(w->w_thread, NULL);
	audit_poll(a);
	a->a_w = NULL;
	audit_writer_free(w);
}

int
audit_sync(struct audit *a)
{
	struct audit_writer *w;
	uint64_t req, fails;
	int bad = 0;

	if (a == NULL)
		return 0;
	/*
	 * An engine's lines are the parent's to make durable (a request
	 * waits for its own with audit_commit_wait()): only the state here.
	 */
	if (a->a_rfd != -1)
		return a->a_failed ? -1 : 0;
	if ((w = a->a_w) == NULL) {
		if (a->a_failed)
			return -1;
		if (!a->a_unsynced)
			return 0;
		if (audit_fsync_now(a) == -1) {
			audit_fail(a, "fsync of");
			return -1;
		}
		return 0;
	}
	audit_poll(a);
	if (a->a_failed)
		return -1;
	pthread_mutex_lock(&w->w_mu);
	/* Everything queued is durable already ("always"): no round trip. */
	if (w->w_len != 0 || w->w_busy || w->w_dseq != a->a_seq) {
		fails = w->w_fails;
		req = ++w->w_sync_req;
		pthread_cond_signal(&w->w_work);
		while (w->w_sync_done < req)
			pthread_cond_wait(&w->w_prog, &w->w_mu);
		bad = w->w_fails != fails;
	}
	pthread_mutex_unlock(&w->w_mu);
	audit_poll(a);
	return bad || a->a_failed ? -1 : 0;
}

/*
 * Queue a wait for line seq (or, remote, 'S' line seq) behind the others.
 * The thread is told to wake the loop once lines become durable; one that
 * already is, is answered on the next turn of the loop.
 */
static void
audit_wait_add(struct audit *a, struct audit_wait *aw, uint64_t seq,
    audit_wait_cb *cb, void *arg)
{
	struct audit_writer *w = a->a_w;
	int done = 0;

	aw->aw_seq = seq;
	aw->aw_epoch = a->a_epoch;
	aw->aw_cb = cb;
	aw->aw_arg = arg;
	aw->aw_done = aw->aw_ok = 0;
	aw->aw_on = 1;
	TAILQ_INSERT_TAIL(&a->a_waits, aw, aw_entry);
	if (w != NULL) {
		pthread_mutex_lock(&w->w_mu);
		w->w_wake_dur = 1;
		done = w->w_dseq >= seq || w->w_epoch != aw->aw_epoch;
		pthread_mutex_unlock(&w->w_mu);
	}
	if (done)
		event_active(a->a_wev, EV_TIMEOUT, 0);
}

/* Answer every wait whose line is durable or lost, in order. */
static void
audit_waits_run(struct audit *a)
{
	struct audit_writer *w = a->a_w;
	struct audit_wait *aw;
	uint64_t dseq = 0;

	if (w != NULL) {
		audit_poll(a);
		pthread_mutex_lock(&w->w_mu);
		dseq = w->w_dseq;
		pthread_mutex_unlock(&w->w_mu);
	}
	/* A callback may commit (a new wait goes to the tail) or cancel. */
	while ((aw = TAILQ_FIRST(&a->a_waits)) != NULL) {
		if (!aw->aw_done) {
			if (w == NULL || aw->aw_epoch != a->a_epoch ||
			    aw->aw_seq > dseq)
				break;
			aw->aw_ok = 1;
		}
		TAILQ_REMOVE(&a->a_waits, aw, aw_entry);
		aw->aw_on = 0;
		aw->aw_cb(aw->aw_arg, aw->aw_ok || a->a_allow);
	}
	if (w != NULL && TAILQ_EMPTY(&a->a_waits)) {
		pthread_mutex_lock(&w->w_mu);
		w->w_wake_dur = 0;
		pthread_mutex_unlock(&w->w_mu);
	}
}

static void
audit_waits_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	audit_waits_run(arg);
}

/*
 * An engine's waits up to 'S' line upto are answered (ok or not), to be
 * run on the next turn of the loop: the parent's ack, or its channel gone
 * (UINT64_MAX, not ok).
 */
static void
audit_waits_answer(struct audit *a, uint64_t upto, int ok)
{
	struct audit_wait *aw;
	int any = 0;

	TAILQ_FOREACH(aw, &a->a_waits, aw_entry) {
		if (aw->aw_seq > upto)
			break;
		if (!aw->aw_done) {
			aw->aw_done = 1;
			aw->aw_ok = ok;
			any = 1;
		}
	}
	if (any)
		event_active(a->a_wev, EV_TIMEOUT, 0);
}

/* Forget every wait without answering it (the writer goes away). */
static void
audit_waits_drop(struct audit *a)
{
	struct audit_wait *aw;

	while ((aw = TAILQ_FIRST(&a->a_waits)) != NULL) {
		TAILQ_REMOVE(&a->a_waits, aw, aw_entry);
		aw->aw_on = 0;
	}
}

int
audit_durable(const struct audit *a)
{
	return a != NULL && a->a_fsync == AUDIT_FSYNC_ALWAYS;
}

int
audit_commit_wait(struct audit *a, struct audit_wait *aw, audit_wait_cb *cb,
    void *arg)
{
	int rc;

	if (a == NULL)
		return 0;
	if (!a->a_building)
		return -1;
	/* a_wev: an event loop, with the writer thread or the parent's. */
	if (a->a_fsync != AUDIT_FSYNC_ALWAYS || a->a_wev == NULL) {
		/* Inline: written (and fsynced, "always") on return. */
		rc = audit_commit(a);
		return rc == -1 && !a->a_allow ? -1 : 0;
	}
	if (a->a_rfd != -1)
		return audit_remote_commit(a, aw, cb, arg);
	if (audit_commit(a) == -1)
		return a->a_allow ? 0 : -1;
	audit_wait_add(a, aw, a->a_seq, cb, arg);
	return 1;
}

void
audit_wait_cancel(struct audit *a, struct audit_wait *aw)
{
	if (a == NULL || aw == NULL || !aw->aw_on)
		return;
	TAILQ_REMOVE(&a->a_waits, aw, aw_entry);
	aw->aw_on = 0;
}

int
audit_failed(const struct audit *a)
{
	if (a == NULL)
		return 0;
	/*
	 * An engine hears that the parent's writer recovered by a message:
	 * take in one already there rather than refuse another request.
	 */
	if (a->a_failed && a->a_rfd != -1)
		(void)audit_remote_read((struct audit *)(uintptr_t)a);
	if (a->a_failed)
		return 1;
	/* A failure of the thread that the loop has not taken in yet. */
	return a->a_w != NULL && !a->a_allow && atomic_load(&a->a_w->w_bad);
}

void
audit_head(const struct audit *a, uint64_t *seq, char hex[65])
{
	static const unsigned char zero[32];
	struct audit_writer *w;

	if (a == NULL) {
		*seq = 0;
		ascii_hex_encode(hex, zero, 32);
		return;
	}
	if ((w = a->a_w) == NULL) {
		*seq = a->a_seq;
		ascii_hex_encode(hex, a->a_hash, 32);
		return;
	}
	/* The last line in the file, not the last one queued. */
	pthread_mutex_lock(&w->w_mu);
	*seq = w->w_seq;
	ascii_hex_encode(hex, w->w_hash, 32);
	pthread_mutex_unlock(&w->w_mu);
}

int
audit_policy_event(struct audit *a, const char *event,
    const unsigned char *sha256, const char *error)
{
	audit_begin(a, event);
	if (sha256 != NULL)
		audit_add_hex(a, "sha256", sha256, 32);
	audit_add_cstr(a, "error", error);
	return audit_commit(a);
}

/* fsync the directory holding path, so that a new entry survives a crash. */
static int
audit_sync_dir(const char *path)
{
	char dir[4096];
	const char *slash;
	int fd, rc;

	slash = strrchr(path, '/');
	if (slash == NULL)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == path)
		snprintf(dir, sizeof(dir), "/");
	else if ((size_t)(slash - path) < sizeof(dir))
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	else {
		errno = ENAMETOOLONG;
		return -1;
	}
	if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) == -1)
		return -1;
	rc = fsync(fd);
	close(fd);
	return rc;
}

/*
 * Open path for appending, creating it (mode AUDIT_MODE) with its
 * directory entry made durable. Returns the fd or -1 with why set.
 */
static int
audit_open_file(const char *path, char *why, size_t whylen)
{
	struct stat st;
	int fd, created = 0;

	/* O_NOFOLLOW: a link planted in a shared directory is refused. */
	fd = open(path, O_RDWR | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
	if (fd == -1 && errno == ENOENT) {
		fd = open(path,
		    O_RDWR | O_APPEND | O_CREAT | O_EXCL | O_CLOEXEC |
			O_NOFOLLOW,
		    AUDIT_MODE);
		created = fd != -1;
		if (fd == -1 && errno == EEXIST) /* lost a race: use theirs */
			fd = open(path,
			    O_RDWR | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
	}
	if (fd == -1) {
		snprintf(why, whylen, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) == -1 || !S_ISREG(st.st_mode)) {
		snprintf(why, whylen, "%s: not a regular file", path);
		close(fd);
		return -1;
	}
	if (created && audit_sync_dir(path) == -1) {
		snprintf(why, whylen, "%s: fsync of its directory: %s", path,
		    strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

/* Parse the seq of a complete line (an object with an integer "seq"). */
static int
audit_line_seq(const char *line, size_t len, uint64_t *seq)
{
	cJSON *j, *s;
	int rc = -1;

	if ((j = cJSON_ParseWithLength(line, len)) == NULL)
		return -1;
	s = cJSON_GetObjectItemCaseSensitive(j, "seq");
	if (cJSON_IsObject(j) && cJSON_IsNumber(s) && s->valuedouble >= 1 &&
	    s->valuedouble <= 9007199254740992.0 &&
	    s->valuedouble == (double)(uint64_t)s->valuedouble) {
		*seq = (uint64_t)s->valuedouble;
		rc = 0;
	}
	cJSON_Delete(j);
	return rc;
}

/*
 * Read the tail of the file at fd: the last complete line (its seq and
 * hash) and whether a partial line follows it. Both fit in the last two
 * line lengths of the file, because the writer never writes longer lines.
 */
static int
audit_scan(int fd, const char *path, struct audit_tail *t, char *why,
    size_t whylen)
{
	struct stat st;
	char *buf = NULL, *nl, *start;
	size_t win, got = 0;
	off_t base;
	ssize_t n;
	int rc = -1;

	memset(t, 0, sizeof(*t));
	if (fstat(fd, &st) == -1) {
		snprintf(why, whylen, "%s: %s", path, strerror(errno));
		return -1;
	}
	t->at_size = t->at_keep = st.st_size;
	if (st.st_size == 0)
		return 0;
	win = st.st_size > 2 * (off_t)AUDIT_LINE_MAX ?
	    2 * (size_t)AUDIT_LINE_MAX :
	    (size_t)st.st_size;
	base = st.st_size - (off_t)win;
	if ((buf = malloc(win)) == NULL) {
		snprintf(why, whylen, "%s: out of memory", path);
		return -1;
	}
	while (got < win) {
		n = pread(fd, buf + got, win - got, base + (off_t)got);
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0) {
			snprintf(why, whylen, "%s: read: %s", path,
			    n == 0 ? "file shrank" : strerror(errno));
			goto out;
		}
		got += (size_t)n;
	}
	/* Where do the complete lines end? */
	nl = memrchr(buf, '\n', win);
	if (nl == NULL && base > 0) {
		snprintf(why, whylen,
		    "%s: no line end in the last %zu bytes: not an audit log",
		    path, win);
		goto out;
	}
	t->at_keep = nl == NULL ? 0 : base + (nl - buf) + 1;
	if (t->at_keep < t->at_size) {
		size_t off = (size_t)(t->at_keep - base);

		if (digest_sha256(buf + off, win - off, t->at_partial_hash) ==
		    -1) {
			snprintf(why, whylen, "%s: SHA-256 failed", path);
			goto out;
		}
	}
	if (nl == NULL) {
		rc = 0;
		goto out;
	}
	/* The last complete line is [start, nl). */
	start = memrchr(buf, '\n', (size_t)(nl - buf));
	if (start == NULL && base > 0) {
		snprintf(why, whylen, "%s: last line longer than %d bytes",
		    path, AUDIT_LINE_MAX);
		goto out;
	}
	start = start == NULL ? buf : start + 1;
	if (audit_line_seq(start, (size_t)(nl - start), &t->at_seq) == -1 ||
	    digest_sha256(start, (size_t)(nl - start), t->at_hash) == -1) {
		snprintf(why, whylen,
		    "%s: last line is not an audit line with a seq; move the "
		    "file away to start a new one",
		    path);
		goto out;
	}
	t->at_has_last = 1;
	rc = 0;
out:
	free(buf);
	return rc;
}

/*
 * Read <state_dir>/audit.head: "<seq> <64 hex>\n". Returns 1 (found), 0
 * (absent) or -1 (unreadable or malformed: refuse rather than guess).
 */
static int
audit_read_head(const char *path, uint64_t *seq, unsigned char hash[32],
    char *why, size_t whylen)
{
	char buf[128], *end;
	ssize_t n;
	int fd;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1) {
		if (errno == ENOENT)
			return 0;
		snprintf(why, whylen, "%s: %s", path, strerror(errno));
		return -1;
	}
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0)
		n = 0;
	buf[n] = '\0';
	errno = 0;
	if (buf[0] >= '0' && buf[0] <= '9') {
		*seq = strtoull(buf, &end, 10);
		if (errno == 0 && *end == ' ' && strlen(end + 1) == 65 &&
		    end[65] == '\n' && ascii_hex_decode(end + 1, hash, 32) == 0)
			return 1;
	}
	snprintf(why, whylen,
	    "%s: malformed (want \"SEQ HEX\\n\"); remove it to start a new "
	    "chain",
	    path);
	return -1;
}

/* Write the chain head atomically (temporary file, fsync, rename). */
static int
audit_write_head(struct audit *a)
{
	char tmp[4096], line[128], hex[65];
	int fd, n, rc = -1;

	if (a->a_head_path == NULL)
		return 0;
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", a->a_head_path) >=
	    sizeof(tmp))
		return -1;
	ascii_hex_encode(hex, a->a_hash, sizeof(a->a_hash));
	n = snprintf(line, sizeof(line), "%" PRIu64 " %s\n", a->a_seq, hex);
	/* A fresh file of our own: never through a planted link. */
	(void)unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
	    0600);
	if (fd == -1)
		goto out;
	if (write(fd, line, (size_t)n) != n || fsync(fd) == -1) {
		close(fd);
		unlink(tmp);
		goto out;
	}
	close(fd);
	if (rename(tmp, a->a_head_path) == -1) {
		unlink(tmp);
		goto out;
	}
	(void)audit_sync_dir(a->a_head_path);
	rc = 0;
out:
	if (rc == -1)
		log_warn("audit: cannot write %s", a->a_head_path);
	return rc;
}

/* Cut a partial last line off the file at fd (a crash mid-write). */
static int
audit_cut_partial(int fd, const char *path, const struct audit_tail *t,
    char *why, size_t whylen)
{
	if (ftruncate(fd, t->at_keep) == -1 || fsync(fd) == -1) {
		snprintf(why, whylen, "%s: cutting off a partial line: %s",
		    path, strerror(errno));
		return -1;
	}
	return 0;
}

/* Record the partial line cut off at open, chained to the last one. */
static int
audit_log_truncated(struct audit *a, const struct audit_tail *t, char *why,
    size_t whylen)
{
	audit_begin(a, "audit.truncated");
	audit_add_uint(a, "bytes", (uint64_t)(t->at_size - t->at_keep));
	audit_add_hex(a, "sha256", t->at_partial_hash, 32);
	if (audit_commit(a) == -1) {
		snprintf(why, whylen, "%s: writing audit.truncated: %s",
		    a->a_path, strerror(errno));
		return -1;
	}
	return 0;
}

/* fsync, chain and on_error of ac take effect. */
static void
audit_set_mode(struct audit *a, const struct audit_conf *ac)
{
	a->a_fsync = ac->ac_fsync;
	a->a_chain = ac->ac_chain;
	a->a_allow = ac->ac_on_error_allow;
	if (a->a_w != NULL) {
		pthread_mutex_lock(&a->a_w->w_mu);
		a->a_w->w_fsync = a->a_fsync;
		pthread_cond_signal(&a->a_w->w_work);
		pthread_mutex_unlock(&a->a_w->w_mu);
	}
	if (a->a_allow && a->a_failed) {
		/* "allow" has no failed state. */
		a->a_failed = 0;
		audit_notify(a, 0);
		metrics_audit_failed(0);
	}
}

static int
audit_set_conf(struct audit *a, const struct audit_conf *ac, char *why,
    size_t whylen)
{
	char *p;

	if (ac->ac_path == NULL || ac->ac_path[0] == '\0') {
		snprintf(why, whylen, "audit.path: empty");
		return -1;
	}
	if (a->a_path == NULL || strcmp(a->a_path, ac->ac_path) != 0) {
		if ((p = strdup(ac->ac_path)) == NULL) {
			snprintf(why, whylen, "audit.path: out of memory");
			return -1;
		}
		free(a->a_path);
		a->a_path = p;
	}
	audit_set_mode(a, ac);
	return 0;
}

struct audit *
audit_open(const struct audit_conf *ac, const char *state_dir,
    struct event_base *base, char *why, size_t whylen)
{
	struct audit *a;
	struct audit_tail t;
	int r;

	if ((a = calloc(1, sizeof(*a))) == NULL) {
		snprintf(why, whylen, "audit: out of memory");
		return NULL;
	}
	a->a_fd = -1;
	a->a_rfd = -1;
	a->a_cut = -1;
	TAILQ_INIT(&a->a_waits);
	clock_gettime(CLOCK_MONOTONIC, &a->a_synced);
	if (audit_set_conf(a, ac, why, whylen) == -1)
		goto fail;
	if (state_dir != NULL &&
	    asprintf(&a->a_head_path, "%s/%s", state_dir, AUDIT_HEAD_NAME) ==
		-1) {
		a->a_head_path = NULL;
		snprintf(why, whylen, "audit: out of memory");
		goto fail;
	}
	if ((a->a_fd = audit_open_file(a->a_path, why, whylen)) == -1)
		goto fail;
	if (audit_scan(a->a_fd, a->a_path, &t, why, whylen) == -1)
		goto fail;
	/* The file's own last line wins; audit.head covers a rotated file. */
	if (t.at_has_last) {
		a->a_seq = t.at_seq;
		memcpy(a->a_hash, t.at_hash, sizeof(a->a_hash));
	} else if (a->a_head_path != NULL) {
		r = audit_read_head(a->a_head_path, &a->a_seq, a->a_hash, why,
		    whylen);
		if (r == -1)
			goto fail;
	}
	if (t.at_keep < t.at_size) {
		if (audit_cut_partial(a->a_fd, a->a_path, &t, why, whylen) ==
		    -1)
			goto fail;
		a->a_size = t.at_keep;
		if (audit_log_truncated(a, &t, why, whylen) == -1)
			goto fail;
	} else
		a->a_size = t.at_size;
	if (base != NULL && audit_writer_start(a, base) == -1) {
		snprintf(why, whylen, "audit: cannot start the writer thread");
		goto fail;
	}
	return a;
fail:
	if (a->a_wev != NULL)
		event_free(a->a_wev);
	if (a->a_fd != -1)
		close(a->a_fd);
	a->a_fd = -1;
	free(a->a_head_path);
	free(a->a_path);
	free(a);
	return NULL;
}

/*
 * Open and check the file a switch goes to (a partial last line is cut):
 * nothing of a changes.
 */
static int
audit_switch_open(const struct audit *a, const char *path, int *fdp,
    struct audit_tail *t, char *why, size_t whylen)
{
	int fd;

	if ((fd = audit_open_file(path, why, whylen)) == -1)
		return -1;
	if (audit_scan(fd, path, t, why, whylen) == -1) {
		close(fd);
		return -1;
	}
	if (t->at_has_last &&
	    (t->at_seq != a->a_seq ||
		memcmp(t->at_hash, a->a_hash, sizeof(t->at_hash)) != 0))
		log_warnx("audit: %s ends with seq %" PRIu64 ", not with this "
			  "chain's last line (seq %" PRIu64 "); the chain "
			  "continues from memory and verify will show the seam",
		    path, t->at_seq, a->a_seq);
	if (t->at_keep < t->at_size &&
	    audit_cut_partial(fd, path, t, why, whylen) == -1) {
		close(fd);
		return -1;
	}
	*fdp = fd;
	return 0;
}

/* Go over to fd (from audit_switch_open()); cannot fail. */
static void
audit_switch_to(struct audit *a, const char *oldpath, int fd,
    const struct audit_tail *t)
{
	char why[256];
	int oldfd;

	/*
	 * Lines still queued belong in the old file, before the head; the
	 * thread then keeps off the file until the new one is in place.
	 */
	if (a->a_w != NULL)
		audit_drain(a, 1);
	(void)audit_write_head(a);
	/* Pending bytes of the old file become durable before it is left. */
	if (a->a_unsynced && fsync(a->a_fd) == -1)
		log_warn("audit: fsync of %s", oldpath);
	oldfd = a->a_fd;
	a->a_fd = fd;
	a->a_size = t->at_keep;
	a->a_cut = -1;
	a->a_unsynced = 0;
	close(oldfd);
	if (a->a_w != NULL)
		audit_release(a);
	if (t->at_keep < t->at_size)
		(void)audit_log_truncated(a, t, why, sizeof(why));
}

/*
 * Switch to the file at a->a_path, continuing the chain from memory. The
 * old file stays in use until the new one is ready.
 */
static int
audit_switch(struct audit *a, const char *oldpath, char *why, size_t whylen)
{
	struct audit_tail t;
	int fd;

	/* Drained first: a reopen of the same file must see its last line. */
	if (a->a_w != NULL)
		audit_drain(a, 0);
	(void)audit_write_head(a);
	if (audit_switch_open(a, a->a_path, &fd, &t, why, whylen) == -1)
		return -1;
	audit_switch_to(a, oldpath, fd, &t);
	return 0;
}

int
audit_reopen(struct audit *a)
{
	char why[512];

	if (a == NULL)
		return 0;
	if (audit_switch(a, a->a_path, why, sizeof(why)) == -1) {
		log_warnx("audit: reopen: %s; still writing to the old file",
		    why);
		return -1;
	}
	return 0;
}

/* A reloaded audit section, ready to take over (audit_prepare()). */
struct audit_next {
	struct audit_conf an_conf; /* an_conf.ac_path: ours, or NULL */
	int an_fd;                 /* the new path's file, or -1 */
	struct audit_tail an_t;
};

struct audit_next *
audit_prepare(struct audit *a, const struct audit_conf *ac, char *why,
    size_t whylen)
{
	struct audit_next *nx;

	if (ac->ac_path == NULL || ac->ac_path[0] == '\0') {
		snprintf(why, whylen, "audit.path: empty");
		return NULL;
	}
	if ((nx = calloc(1, sizeof(*nx))) == NULL) {
		snprintf(why, whylen, "audit: out of memory");
		return NULL;
	}
	nx->an_conf = *ac;
	nx->an_conf.ac_path = NULL;
	nx->an_fd = -1;
	if (a == NULL ||
	    (a->a_path != NULL && strcmp(ac->ac_path, a->a_path) == 0))
		return nx;
	/* A new path: open it now, so that the commit cannot fail. */
	if ((nx->an_conf.ac_path = strdup(ac->ac_path)) == NULL) {
		snprintf(why, whylen, "audit: out of memory");
		free(nx);
		return NULL;
	}
	if (a->a_w != NULL)
		audit_drain(a, 0);
	if (audit_switch_open(a, nx->an_conf.ac_path, &nx->an_fd, &nx->an_t,
		why, whylen) == -1) {
		audit_next_free(nx);
		return NULL;
	}
	return nx;
}

void
audit_next_free(struct audit_next *nx)
{
	if (nx == NULL)
		return;
	if (nx->an_fd != -1)
		close(nx->an_fd);
	free(nx->an_conf.ac_path);
	free(nx);
}

void
audit_apply(struct audit *a, struct audit_next *nx)
{
	char *oldpath;

	if (a == NULL) {
		audit_next_free(nx);
		return;
	}
	audit_set_mode(a, &nx->an_conf);
	if (nx->an_conf.ac_path != NULL) {
		oldpath = a->a_path;
		a->a_path = nx->an_conf.ac_path;
		nx->an_conf.ac_path = NULL;
		audit_switch_to(a, oldpath != NULL ? oldpath : "?", nx->an_fd,
		    &nx->an_t);
		nx->an_fd = -1;
		free(oldpath);
	}
	audit_next_free(nx);
}

int
audit_configure(struct audit *a, const struct audit_conf *ac, char *why,
    size_t whylen)
{
	struct audit_next *nx;

	if (a == NULL)
		return 0;
	if ((nx = audit_prepare(a, ac, why, whylen)) == NULL)
		return -1;
	audit_apply(a, nx);
	return 0;
}

void
audit_close(struct audit *a)
{
	if (a == NULL)
		return;
	audit_waits_drop(a);
	if (a->a_wev != NULL)
		event_free(a->a_wev);
	a->a_wev = NULL;
	if (a->a_rfd != -1) {
		/* An engine's: no file of its own; the socket is the caller's.
		 */
		audit_remote_free(a);
		free(a->a_head_path);
		free(a->a_path);
		free(a);
		return;
	}
	/* Everything queued is written first: the last line is the last. */
	audit_writer_stop(a);
	if (a->a_unsynced && fsync(a->a_fd) == -1)
		log_warn("audit: fsync of %s", a->a_path);
	(void)audit_write_head(a);
	close(a->a_fd);
	free(a->a_head_path);
	free(a->a_path);
	free(a);
}

/*
 * Privilege separation (DESIGN.md "Privilege separation"): an engine's
 * lines go to the parent, which alone holds the file and the chain.
 *
 * Engine to parent, one datagram per line: a kind byte ('L', or 'S' when
 * the engine waits for the line to be durable: fsync "always"), the
 * 27-byte timestamp, the event's length (one byte) and name, then the
 * fields as audit_add_*() wrote them (each ",\"key\":value"). Parent to
 * engine: struct audit_rmsg, an ack per 'S' line (ar_val 1: durable, 0:
 * not written) or the failed state of the parent's writer.
 */
#define AUDIT_RKIND_ACK   1
#define AUDIT_RKIND_STATE 2
#define AUDIT_TS_LEN      27
#define AUDIT_RBATCH      64 /* datagrams a sendmmsg(2) */

struct audit_rmsg {
	uint32_t ar_kind;
	uint32_t ar_val;
	uint64_t ar_n;
};

static void
audit_remote_begin(struct audit *a, const char *event)
{
	size_t n = strlen(event);

	if (n > AUDIT_EVENT_MAX)
		n = AUDIT_EVENT_MAX;
	memcpy(a->a_revent, event, n);
	a->a_revent[n] = '\0';
	audit_timestamp(a->a_rts, sizeof(a->a_rts));
	a->a_len = 0;
	a->a_overflow = 0;
	a->a_building = 1;
}

static void
audit_remote_state(struct audit *a)
{
	int failed = !a->a_allow && (a->a_rfull || a->a_rparent);

	a->a_failed = failed;
}

/* Take in what the parent sent. -1: the channel is over or malformed. */
static int
audit_remote_read(struct audit *a)
{
	struct audit_rmsg m;
	ssize_t n;

	for (;;) {
		n = recv(a->a_rfd, &m, sizeof(m), MSG_DONTWAIT);
		if (n == -1 && (errno == EAGAIN || errno == EINTR))
			return 0;
		if (n != (ssize_t)sizeof(m))
			return -1;
		if (m.ar_kind == AUDIT_RKIND_ACK && m.ar_n <= a->a_rsent &&
		    m.ar_n >= a->a_racked) {
			/*
			 * The answer for the lines waited on only: the
			 * parent's failed state comes as its own message
			 * (an ack may arrive after the state it had ended).
			 */
			a->a_racked = m.ar_n;
			audit_waits_answer(a, a->a_racked, m.ar_val == 1);
		} else if (m.ar_kind == AUDIT_RKIND_STATE && m.ar_val <= 1)
			a->a_rparent = (int)m.ar_val;
		else
			return -1;
		audit_remote_state(a);
	}
}

/* An engine's events and what is still queued (audit_close). */
static void
audit_remote_free(struct audit *a)
{
	struct audit_rq *q;
	struct event **evs[] = { &a->a_rev, &a->a_rwev, &a->a_rflush };
	size_t i;

	for (i = 0; i < SL_NELEM(evs); i++) {
		if (*evs[i] != NULL)
			event_free(*evs[i]);
		*evs[i] = NULL;
	}
	while ((q = a->a_rq) != NULL) {
		a->a_rq = q->rq_next;
		free(q);
	}
	a->a_rq_tail = &a->a_rq;
	a->a_rq_bytes = 0;
}

/* Drop the first n queued messages (sent, or lost with an error). */
static void
audit_remote_pop(struct audit *a, unsigned n)
{
	struct audit_rq *q;

	while (n-- > 0 && (q = a->a_rq) != NULL) {
		if ((a->a_rq = q->rq_next) == NULL)
			a->a_rq_tail = &a->a_rq;
		a->a_rq_bytes -= q->rq_len;
		free(q);
	}
}

/*
 * Send what is queued, AUDIT_RBATCH datagrams a call; 0 when all of it
 * went, 1 when some is left (the socket is full).
 */
static int
audit_remote_flush(struct audit *a)
{
	struct mmsghdr mm[AUDIT_RBATCH];
	struct iovec iov[AUDIT_RBATCH];
	struct audit_rq *q;
	unsigned n;
	int r;

	while (a->a_rq != NULL) {
		memset(mm, 0, sizeof(mm));
		for (n = 0, q = a->a_rq; q != NULL && n < AUDIT_RBATCH;
		     q = q->rq_next, n++) {
			iov[n] = (struct iovec){ q->rq_data, q->rq_len };
			mm[n].msg_hdr.msg_iov = &iov[n];
			mm[n].msg_hdr.msg_iovlen = 1;
		}
		r = sendmmsg(a->a_rfd, mm, n, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (r == -1 && errno == EAGAIN)
			return 1;
		if (r == -1 && errno == EINTR)
			continue;
		if (r == -1) {
			/* A datagram goes whole or not at all: this one is
			 * lost. */
			audit_remote_pop(a, 1);
			audit_fail(a, "sending a line for");
			continue;
		}
		audit_remote_pop(a, (unsigned)r);
	}
	if (a->a_rfull) {
		a->a_rfull = 0;
		audit_remote_state(a);
	}
	return 0;
}

/* The write event is armed only while lines wait for room. */
static void
audit_remote_arm(struct audit *a)
{
	int pending;

	if (a->a_rwev == NULL)
		return;
	pending = event_pending(a->a_rwev, EV_WRITE, NULL) != 0;
	if (a->a_rq != NULL && !pending && !a->a_rparent)
		(void)event_add(a->a_rwev, NULL);
	else if (a->a_rq == NULL && pending)
		(void)event_del(a->a_rwev);
}

static void
audit_remote_cb(evutil_socket_t fd, short what, void *arg)
{
	struct audit *a = arg;

	(void)fd;
	if ((what & EV_READ) && audit_remote_read(a) == -1) {
		/* The parent is gone: nothing can be written any more. */
		log_warnx("audit: the parent's channel is closed");
		a->a_rparent = 1;
		a->a_rdead = 1;
		a->a_allow = 0;
		audit_remote_state(a);
		audit_waits_answer(a, UINT64_MAX, 0);
		(void)event_del(a->a_rev);
		(void)event_del(a->a_rwev);
		return;
	}
	if (what & EV_WRITE)
		(void)audit_remote_flush(a);
	audit_remote_arm(a);
}

/* Queue a copy of msg behind what the socket did not take. */
static int
audit_remote_queue(struct audit *a, const struct iovec *iov, int n, size_t len)
{
	struct audit_rq *q;
	size_t off = 0;
	int i;

	if (len > AUDIT_QUEUE_MAX - a->a_rq_bytes ||
	    (q = malloc(sizeof(*q) + len)) == NULL) {
		errno = ENOBUFS;
		a->a_rfull = 1;
		audit_fail(a, "queueing a line for");
		audit_remote_state(a);
		return -1;
	}
	for (i = 0; i < n; i++) {
		memcpy(q->rq_data + off, iov[i].iov_base, iov[i].iov_len);
		off += iov[i].iov_len;
	}
	q->rq_len = len;
	q->rq_next = NULL;
	*a->a_rq_tail = q;
	a->a_rq_tail = &q->rq_next;
	a->a_rq_bytes += len;
	return 0;
}

/*
 * Send a line to the parent; with aw, wait for its ack (returns 1).
 */
static int
audit_remote_commit(struct audit *a, struct audit_wait *aw, audit_wait_cb *cb,
    void *arg)
{
	unsigned char kind, elen;
	struct iovec iov[5];
	size_t len;
	int sync;

	/* Nobody is left to answer: a wait would never end. */
	if (a->a_rdead)
		aw = NULL;
	/*
	 * Failed: the line asks for the parent's answer, which says whether
	 * the write that ends the failed state went through.
	 */
	sync = aw != NULL || a->a_failed;

	a->a_building = 0;
	if (a->a_overflow) {
		memcpy(a->a_line + a->a_len, ",\"overflow\":true", 16);
		a->a_len += 16;
	}
	kind = sync ? 'S' : 'L';
	elen = (unsigned char)strlen(a->a_revent);
	iov[0] = (struct iovec){ &kind, 1 };
	iov[1] = (struct iovec){ a->a_rts, AUDIT_TS_LEN };
	iov[2] = (struct iovec){ &elen, 1 };
	iov[3] = (struct iovec){ a->a_revent, elen };
	iov[4] = (struct iovec){ a->a_line, a->a_len };
	len = 2 + AUDIT_TS_LEN + elen + a->a_len;
	if (audit_remote_queue(a, iov, 5, len) == -1)
		return -1;
	if (sync) {
		a->a_rsent++;
		if (aw != NULL)
			audit_wait_add(a, aw, a->a_rsent, cb, arg);
	}
	/*
	 * Sent once the callbacks of this turn of the loop are done (a zero
	 * timer fires on the next turn): the response goes to the client
	 * before the parent is woken, and one wake takes a turn's lines,
	 * the waiting ones too (many to one fsync).
	 */
	if (!evtimer_pending(a->a_rflush, NULL)) {
		struct timeval zero = { 0, 0 };

		(void)evtimer_add(a->a_rflush, &zero);
	}
	if (aw != NULL)
		return 1;
	return a->a_failed ? -1 : 0;
}

static void
audit_remote_flush_cb(evutil_socket_t fd, short what, void *arg)
{
	struct audit *a = arg;

	(void)fd;
	(void)what;
	(void)audit_remote_flush(a);
	audit_remote_arm(a);
}

int
audit_remote(struct audit *a, int fd, struct event_base *base)
{
	struct audit_writer *w;

	if (a == NULL)
		return 0;
	/*
	 * The writer thread did not survive the fork, and its lock may be
	 * held: never touch it, only stop watching its eventfd here.
	 */
	if ((w = a->a_w) != NULL) {
		if (w->w_ev != NULL)
			event_free(w->w_ev);
		if (w->w_efd != -1)
			close(w->w_efd);
		a->a_w = NULL;
	}
	if (a->a_fd != -1)
		close(a->a_fd);
	a->a_fd = -1;
	a->a_rfd = fd;
	a->a_rq = NULL;
	a->a_rq_tail = &a->a_rq;
	a->a_rq_bytes = 0;
	a->a_rsent = a->a_racked = 0;
	a->a_rfull = a->a_rparent = a->a_rdead = 0;
	a->a_failed = 0;
	a->a_state_cb = NULL;
	/* The parent's waits are its engines', not this one's. */
	audit_waits_drop(a);
	if (a->a_wev != NULL)
		event_free(a->a_wev);
	if ((a->a_wev = event_new(base, -1, 0, audit_waits_cb, a)) == NULL ||
	    (a->a_rev = event_new(base, fd, EV_READ | EV_PERSIST,
		 audit_remote_cb, a)) == NULL ||
	    event_add(a->a_rev, NULL) == -1 ||
	    (a->a_rwev = event_new(base, fd, EV_WRITE, audit_remote_cb, a)) ==
		NULL ||
	    (a->a_rflush = evtimer_new(base, audit_remote_flush_cb, a)) == NULL)
		return -1;
	return 0;
}

int
audit_remote_drain(struct audit *a, int timeout_ms)
{
	struct pollfd pfd;

	if (a == NULL || a->a_rfd == -1)
		return 0;
	while (a->a_rq != NULL) {
		pfd.fd = a->a_rfd;
		pfd.events = POLLOUT;
		pfd.revents = 0;
		if (poll(&pfd, 1, timeout_ms) <= 0)
			return -1;
		if (audit_remote_flush(a) == -1)
			return -1;
	}
	return 0;
}

void
audit_on_state(struct audit *a, audit_state_cb *cb, void *arg)
{
	if (a == NULL)
		return;
	a->a_state_cb = cb;
	a->a_state_arg = arg;
}

/* An event name as sluice writes them: [a-z0-9._], 1 to 64 bytes. */
static int
audit_event_ok(const unsigned char *p, size_t n)
{
	size_t i;

	if (n == 0 || n > AUDIT_EVENT_MAX)
		return 0;
	for (i = 0; i < n; i++)
		if (!((p[i] >= 'a' && p[i] <= 'z') ||
			(p[i] >= '0' && p[i] <= '9') || p[i] == '.' ||
			p[i] == '_'))
			return 0;
	return 1;
}

/* 2026-12-02T07:41:03.123456Z */
static int
audit_ts_ok(const unsigned char *p)
{
	static const char shape[] = "dddd-dd-ddTdd:dd:dd.ddddddZ";
	size_t i;

	for (i = 0; i < AUDIT_TS_LEN; i++)
		if (shape[i] == 'd' ? !(p[i] >= '0' && p[i] <= '9') :
				      p[i] != (unsigned char)shape[i])
			return 0;
	return 1;
}

/*
 * Fields as audit_add_*() writes them: empty, or starting ",\"", no byte
 * below 0x20 (escaped by the engine), valid UTF-8, and of the grammar
 * above (so in braces one JSON object). A compromised engine can still write
 * false fields; it cannot break a line or the chain.
 */
/* A JSON string at p[*i..n) (escapes checked); *i past it. */
static int
audit_json_str(const unsigned char *p, size_t n, size_t *i)
{
	size_t k = *i;

	if (k >= n || p[k++] != '"')
		return 0;
	while (k < n && p[k] != '"') {
		if (p[k] != '\\') {
			k++;
			continue;
		}
		if (++k >= n)
			return 0;
		if (p[k] == 'u') {
			size_t d;

			for (d = 1; d <= 4; d++)
				if (k + d >= n || !isxdigit(p[k + d]))
					return 0;
			k += 5;
		} else if (strchr("\"\\/bfnrt", p[k]) != NULL && p[k] != '\0')
			k++;
		else
			return 0;
	}
	if (k >= n)
		return 0;
	*i = k + 1;
	return 1;
}

/* A value as audit_add_*() writes one: a string, an integer, a bool. */
static int
audit_json_value(const unsigned char *p, size_t n, size_t *i)
{
	size_t k = *i, d;

	if (k < n && p[k] == '"')
		return audit_json_str(p, n, i);
	if (n - k >= 4 && memcmp(p + k, "true", 4) == 0) {
		*i = k + 4;
		return 1;
	}
	if (n - k >= 5 && memcmp(p + k, "false", 5) == 0) {
		*i = k + 5;
		return 1;
	}
	if (k < n && p[k] == '-')
		k++;
	for (d = k; d < n && p[d] >= '0' && p[d] <= '9'; d++)
		;
	if (d == k)
		return 0;
	*i = d;
	return 1;
}

/*
 * The fields' grammar, exactly what audit_add_*() writes: (,"key":value)*
 * with string keys and string, integer or boolean values.
 */
static int
audit_fields_json(const unsigned char *p, size_t n)
{
	size_t i = 0;

	while (i < n) {
		if (p[i++] != ',' || !audit_json_str(p, n, &i) || i >= n ||
		    p[i++] != ':' || !audit_json_value(p, n, &i))
			return 0;
	}
	return 1;
}

static int
audit_fields_ok(const unsigned char *p, size_t n)
{
	size_t i;

	if (n == 0)
		return 1;
	if (n < 2 || p[0] != ',' || p[1] != '"' ||
	    n > AUDIT_LINE_MAX - AUDIT_TAIL_ROOM - 512)
		return 0;
	for (i = 0; i < n;) {
		size_t l;

		if (p[i] < 0x20 || p[i] == 0x7f)
			return 0;
		if (p[i] < 0x80) {
			i++;
			continue;
		}
		if ((l = utf8_len(p + i, n - i)) == 0)
			return 0;
		i += l;
	}
	return audit_fields_json(p, n);
}

int
audit_remote_line(struct audit *a, const unsigned char *m, size_t len,
    int *sync, struct audit_wait *aw, audit_wait_cb *cb, void *arg, char *why,
    size_t whylen)
{
	char ts[AUDIT_TS_LEN + 1], event[AUDIT_EVENT_MAX + 1];
	size_t elen, flen;
	const unsigned char *f;

	*sync = 0;
	if (len < 2 + AUDIT_TS_LEN + 1 || (m[0] != 'L' && m[0] != 'S')) {
		snprintf(why, whylen, "audit line: bad kind or length %zu",
		    len);
		return -2;
	}
	elen = m[1 + AUDIT_TS_LEN];
	if (!audit_ts_ok(m + 1) || 2 + AUDIT_TS_LEN + elen > len ||
	    !audit_event_ok(m + 2 + AUDIT_TS_LEN, elen)) {
		snprintf(why, whylen, "audit line: bad timestamp or event");
		return -2;
	}
	f = m + 2 + AUDIT_TS_LEN + elen;
	flen = len - (2 + AUDIT_TS_LEN + elen);
	if (!audit_fields_ok(f, flen)) {
		snprintf(why, whylen,
		    "audit line: fields of %zu bytes are not as sluice writes "
		    "them",
		    flen);
		return -2;
	}
	*sync = m[0] == 'S';
	memcpy(ts, m + 1, AUDIT_TS_LEN);
	ts[AUDIT_TS_LEN] = '\0';
	memcpy(event, m + 2 + AUDIT_TS_LEN, elen);
	event[elen] = '\0';
	if (a == NULL)
		return 0;
	audit_begin_ts(a, event, ts);
	if (audit_put(a, (const char *)f, flen) == -1)
		a->a_overflow = 1;
	if (*sync && aw != NULL)
		return audit_commit_wait(a, aw, cb, arg);
	return audit_commit(a);
}

int
audit_remote_reply(int fd, int state, int ok, uint64_t n)
{
	struct audit_rmsg m = { state ? AUDIT_RKIND_STATE : AUDIT_RKIND_ACK,
		(uint32_t)(ok != 0), n };
	ssize_t r;

	do
		r = send(fd, &m, sizeof(m), MSG_DONTWAIT | MSG_NOSIGNAL);
	while (r == -1 && errno == EINTR);
	return r == (ssize_t)sizeof(m) ? 0 : -1;
}
