/*
 * fakeup: a fake model upstream for the integration tests. It serves
 * HTTP/1.1 over TLS (or plain HTTP) on one or more addresses, answers a few
 * scripted endpoints (JSON echo, an SSE stream with pauses, big and slow
 * bodies, a hang, a malformed or cut response, a close of a reused
 * connection, any status), and records every
 * connection, TLS handshake and request as one JSON line, so that a test
 * can check what sluice really sent upstream.
 *
 * It is a test tool, not a proxy: its parser is lenient where sluice must
 * be strict, and it refuses (and records) only what it cannot frame. It
 * never decides whether a request should have arrived; the tests do.
 */
#include <sys/types.h>
#include <sys/socket.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>

#define MAX_LISTEN     16
#define MAX_HEAD       (256 * 1024) /* a larger head is refused with 431 */
#define MAX_HDRS       1000
#define MAX_LINE       4096         /* chunk-size and trailer lines */
#define BIG_HIGH       (256 * 1024) /* refill output below this */
#define BIG_PIECE      (64 * 1024)  /* bytes added per refill step */
#define MAX_BODY_PARAM (1ULL << 40) /* ?bytes= upper bound */
#define MAX_GAP_MS     60000ULL     /* ?gap_ms= upper bound */
#define MAX_EVENTS     100000ULL    /* ?n= upper bound */
#define MAX_FIELDS     4000ULL      /* /v1/fields ?n= upper bound */
#define SSE_FMT        "data: {\"i\":%u}\n\n"

/* Where a connection is in its request/response cycle. */
enum conn_state {
	CS_HEAD = 0,  /* waiting for a complete request head */
	CS_BODY_CL,   /* reading a Content-Length body */
	CS_CHUNK_LEN, /* reading a chunk-size line */
	CS_CHUNK_DAT, /* reading chunk data */
	CS_CHUNK_END, /* reading the CRLF after chunk data */
	CS_TRAILER,   /* reading trailer lines up to the empty one */
	CS_RESPOND,   /* answering; further input waits */
	CS_CLOSING    /* flushing the output, then free */
};

/* Which scripted answer is in progress while in CS_RESPOND. */
enum resp_kind {
	RK_NONE = 0, /* the answer was written whole */
	RK_STREAM,   /* SSE events paced by the timer */
	RK_BIG,      /* a large body refilled from the write callback */
	RK_SLOW,     /* a body in small pieces paced by the timer */
	RK_HANG      /* never answers */
};

struct conn {
	struct conn *next;
	struct conn *prev;
	uint64_t id;
	struct bufferevent *bev;
	SSL *ssl;       /* owned by bev; NULL for plain HTTP */
	int handshaken; /* the TLS handshake completed */
	enum conn_state state;
	uint64_t nreq; /* requests completed on this connection */

	/* The request being read. */
	char *method;
	char *target;
	char *version;
	cJSON *hdrs; /* [[name, value], ...] in arrival order */
	int keepalive;
	uint64_t body_left; /* CL bytes or chunk bytes still to read */
	uint64_t body_bytes;
	EVP_MD_CTX *sha;
	FILE *body_f; /* --body-dir: the body as received */
	char body_path[4096];

	/* The response being written. */
	enum resp_kind resp;
	struct event *timer;
	uint64_t resp_left; /* body bytes still to send */
	uint64_t resp_off;  /* offset of the next body byte (content) */
	unsigned ev_i;      /* next SSE event */
	unsigned ev_n;      /* SSE events in all */
	char ev_name[32];   /* SSE "event:" field, "" for none */
	uint64_t gap_ms;
	uint64_t piece;
	int resp_chunked;
};

static struct event_base *base;
static SSL_CTX *ssl_ctx;
static int log_fd = -1;
static const char *body_dir; /* --body-dir, or NULL */
static uint64_t next_conn_id = 1;
static struct conn *conns;

static void conn_free(struct conn *);
static void conn_process(struct conn *);

static void
die(const char *msg)
{
	fprintf(stderr, "fakeup: %s\n", msg);
	exit(1);
}

/*
 * Write one JSON line to the log (or stdout). One write(2) per line on an
 * O_APPEND descriptor, so a reader never sees a line interleaved with
 * another; a reader may see a line's start before its end, and the test
 * side only parses lines that end in a newline.
 */
static void
log_json(cJSON *obj)
{
	char *s, *line;
	size_t len, off;
	ssize_t n;
	int fd = log_fd >= 0 ? log_fd : STDOUT_FILENO;

	s = cJSON_PrintUnformatted(obj);
	cJSON_Delete(obj);
	if (s == NULL)
		die("out of memory");
	len = strlen(s);
	line = malloc(len + 1);
	if (line == NULL)
		die("out of memory");
	memcpy(line, s, len);
	line[len++] = '\n';
	cJSON_free(s);
	for (off = 0; off < len; off += (size_t)n) {
		n = write(fd, line + off, len - off);
		if (n < 0 && errno == EINTR) {
			n = 0;
			continue;
		}
		if (n <= 0)
			die("cannot write the log");
	}
	free(line);
}

static cJSON *
log_event(const char *event, const struct conn *c)
{
	cJSON *o = cJSON_CreateObject();

	if (o == NULL)
		die("out of memory");
	cJSON_AddStringToObject(o, "event", event);
	if (c != NULL)
		cJSON_AddNumberToObject(o, "conn", (double)c->id);
	return o;
}

static void
log_problem(const struct conn *c, const char *event, const char *why)
{
	cJSON *o = log_event(event, c);

	cJSON_AddStringToObject(o, "why", why);
	log_json(o);
}

static const char *
status_text(int code)
{
	switch (code) {
	case 200:
		return "OK";
	case 201:
		return "Created";
	case 204:
		return "No Content";
	case 400:
		return "Bad Request";
	case 401:
		return "Unauthorized";
	case 403:
		return "Forbidden";
	case 404:
		return "Not Found";
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
		return "Status";
	}
}

/* The value of ?name=N in the query (decimal), or def when absent/bad. */
static uint64_t
query_num(const char *query, const char *name, uint64_t def, uint64_t max)
{
	size_t nlen = strlen(name);
	const char *p = query;
	unsigned long long v;
	char *end;

	while (p != NULL && *p != '\0') {
		if (strncmp(p, name, nlen) == 0 && p[nlen] == '=') {
			errno = 0;
			v = strtoull(p + nlen + 1, &end, 10);
			if (errno != 0 || end == p + nlen + 1 ||
			    (*end != '\0' && *end != '&') || v > max)
				return def;
			return (uint64_t)v;
		}
		p = strchr(p, '&');
		if (p != NULL)
			p++;
	}
	return def;
}

static const char *
query_str(const char *query, const char *name, char *buf, size_t len)
{
	size_t nlen = strlen(name);
	const char *p = query, *e;

	while (p != NULL && *p != '\0') {
		if (strncmp(p, name, nlen) == 0 && p[nlen] == '=') {
			p += nlen + 1;
			e = strchr(p, '&');
			if (e == NULL)
				e = p + strlen(p);
			if ((size_t)(e - p) >= len)
				return NULL;
			memcpy(buf, p, (size_t)(e - p));
			buf[e - p] = '\0';
			return buf;
		}
		p = strchr(p, '&');
		if (p != NULL)
			p++;
	}
	return NULL;
}

/* Deterministic body content: byte at offset o is 'a' + o % 26. */
static void
fill_pattern(char *buf, size_t len, uint64_t off)
{
	size_t i;

	for (i = 0; i < len; i++)
		buf[i] = (char)('a' + (off + i) % 26);
}

static void
request_reset(struct conn *c)
{
	free(c->method);
	free(c->target);
	free(c->version);
	c->method = c->target = c->version = NULL;
	cJSON_Delete(c->hdrs);
	c->hdrs = NULL;
	c->body_left = 0;
	c->body_bytes = 0;
	if (c->sha != NULL)
		EVP_MD_CTX_free(c->sha);
	c->sha = NULL;
	if (c->body_f != NULL && fclose(c->body_f) != 0)
		die("cannot write a body file");
	c->body_f = NULL;
	c->body_path[0] = '\0';
}

/* Answer a framing problem with a status and close the connection. */
static void
conn_refuse(struct conn *c, int code, const char *why)
{
	struct evbuffer *out = bufferevent_get_output(c->bev);

	log_problem(c, "bad_request", why);
	evbuffer_add_printf(out,
	    "HTTP/1.1 %d %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
	    code, status_text(code));
	c->state = CS_CLOSING;
	bufferevent_disable(c->bev, EV_READ);
}

static int
is_tchar(unsigned char ch)
{
	if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
	    (ch >= '0' && ch <= '9'))
		return 1;
	return strchr("!#$%&'*+-.^_`|~", ch) != NULL && ch != '\0';
}

/* Does a comma list (Connection) hold the token tok? */
static int
list_has(const char *list, const char *tok)
{
	size_t tlen = strlen(tok);
	const char *p = list;

	while (*p != '\0') {
		while (*p == ' ' || *p == '\t' || *p == ',')
			p++;
		if (strncasecmp(p, tok, tlen) == 0 &&
		    (p[tlen] == '\0' || p[tlen] == ',' || p[tlen] == ' ' ||
			p[tlen] == '\t'))
			return 1;
		while (*p != '\0' && *p != ',')
			p++;
	}
	return 0;
}

static char *
xstrndup(const char *s, size_t n)
{
	char *d = strndup(s, n);

	if (d == NULL)
		die("out of memory");
	return d;
}

/*
 * Parse one header line "name: value" (without its CRLF) into c->hdrs.
 * Returns 0, or -1 with why set.
 */
static int
parse_header_line(struct conn *c, const char *line, size_t len,
    const char **why)
{
	const char *colon = memchr(line, ':', len);
	const char *v, *ve;
	size_t i;
	cJSON *pair;
	char *name, *value;

	if (len > 0 && (line[0] == ' ' || line[0] == '\t')) {
		*why = "obs-fold";
		return -1;
	}
	if (colon == NULL || colon == line) {
		*why = "header line without a name";
		return -1;
	}
	for (i = 0; line + i < colon; i++)
		if (!is_tchar((unsigned char)line[i])) {
			*why = "bad character in a field name";
			return -1;
		}
	v = colon + 1;
	ve = line + len;
	while (v < ve && (*v == ' ' || *v == '\t'))
		v++;
	while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
		ve--;
	if (memchr(v, '\0', (size_t)(ve - v)) != NULL) {
		*why = "NUL in a field value";
		return -1;
	}
	if (cJSON_GetArraySize(c->hdrs) >= MAX_HDRS) {
		*why = "too many header fields";
		return -1;
	}
	name = xstrndup(line, (size_t)(colon - line));
	value = xstrndup(v, (size_t)(ve - v));
	pair = cJSON_CreateArray();
	if (pair == NULL)
		die("out of memory");
	cJSON_AddItemToArray(pair, cJSON_CreateString(name));
	cJSON_AddItemToArray(pair, cJSON_CreateString(value));
	cJSON_AddItemToArray(c->hdrs, pair);
	free(name);
	free(value);
	return 0;
}

/* The value of the first header named name, or NULL; *count gets the count. */
static const char *
header_get(const struct conn *c, const char *name, int *count)
{
	const cJSON *pair;
	const char *found = NULL;
	int n = 0;

	cJSON_ArrayForEach(pair, c->hdrs) {
		const char *hn = cJSON_GetArrayItem(pair, 0)->valuestring;

		if (strcasecmp(hn, name) == 0) {
			if (found == NULL)
				found =
				    cJSON_GetArrayItem(pair, 1)->valuestring;
			n++;
		}
	}
	if (count != NULL)
		*count = n;
	return found;
}

/*
 * Parse the request line and header lines of head (len bytes ending in
 * CRLF CRLF). Returns 0, or -1 with why set.
 */
static int
parse_head(struct conn *c, const char *head, size_t len, const char **why)
{
	const char *p = head, *end = head + len - 2, *eol, *sp1, *sp2;
	size_t i;

	for (i = 0; i < len; i++) {
		if (head[i] == '\n' && (i == 0 || head[i - 1] != '\r')) {
			*why = "bare LF";
			return -1;
		}
		if (head[i] == '\r' && (i + 1 >= len || head[i + 1] != '\n')) {
			*why = "bare CR";
			return -1;
		}
	}
	eol = strstr(p, "\r\n");
	sp1 = memchr(p, ' ', (size_t)(eol - p));
	sp2 =
	    sp1 != NULL ? memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1)) : NULL;
	if (sp1 == NULL || sp2 == NULL || sp1 == p || sp2 == sp1 + 1 ||
	    memchr(sp2 + 1, ' ', (size_t)(eol - sp2 - 1)) != NULL) {
		*why = "malformed request line";
		return -1;
	}
	c->method = xstrndup(p, (size_t)(sp1 - p));
	c->target = xstrndup(sp1 + 1, (size_t)(sp2 - sp1 - 1));
	c->version = xstrndup(sp2 + 1, (size_t)(eol - sp2 - 1));
	if (strcmp(c->version, "HTTP/1.1") != 0 &&
	    strcmp(c->version, "HTTP/1.0") != 0) {
		*why = "unsupported HTTP version";
		return -1;
	}
	c->hdrs = cJSON_CreateArray();
	if (c->hdrs == NULL)
		die("out of memory");
	for (p = eol + 2; p < end; p = eol + 2) {
		eol = strstr(p, "\r\n");
		if (parse_header_line(c, p, (size_t)(eol - p), why) != 0)
			return -1;
	}
	return 0;
}

/*
 * Work out keep-alive and body framing from the parsed head. Returns 0,
 * or -1 with why set for framing fakeup cannot follow.
 */
static int
setup_body(struct conn *c, const char **why)
{
	const char *te, *cl, *conn, *expect;
	int ncl, nte;
	unsigned long long v;
	char *end;

	conn = header_get(c, "Connection", NULL);
	if (strcmp(c->version, "HTTP/1.1") == 0)
		c->keepalive = conn == NULL || !list_has(conn, "close");
	else
		c->keepalive = conn != NULL && list_has(conn, "keep-alive");
	te = header_get(c, "Transfer-Encoding", &nte);
	cl = header_get(c, "Content-Length", &ncl);
	c->sha = EVP_MD_CTX_new();
	if (c->sha == NULL ||
	    EVP_DigestInit_ex(c->sha, EVP_sha256(), NULL) != 1)
		die("cannot start SHA-256");
	if (body_dir != NULL) {
		snprintf(c->body_path, sizeof(c->body_path), "%s/%llu-%llu.bin",
		    body_dir, (unsigned long long)c->id,
		    (unsigned long long)c->nreq + 1);
		c->body_f = fopen(c->body_path, "w");
		if (c->body_f == NULL)
			die("cannot create a body file");
	}
	if (te != NULL && cl != NULL) {
		*why = "Content-Length and Transfer-Encoding";
		return -1;
	}
	if (te != NULL) {
		if (nte != 1 || strcasecmp(te, "chunked") != 0) {
			*why = "Transfer-Encoding is not chunked";
			return -1;
		}
		c->state = CS_CHUNK_LEN;
	} else if (cl != NULL) {
		errno = 0;
		v = strtoull(cl, &end, 10);
		if (ncl != 1 || errno != 0 || end == cl || *end != '\0' ||
		    cl[0] < '0' || cl[0] > '9') {
			*why = "bad Content-Length";
			return -1;
		}
		c->body_left = (uint64_t)v;
		c->state = CS_BODY_CL;
	} else {
		c->state = CS_BODY_CL;
		c->body_left = 0;
	}
	expect = header_get(c, "Expect", NULL);
	if (expect != NULL && strcasecmp(expect, "100-continue") == 0 &&
	    (c->state != CS_BODY_CL || c->body_left > 0))
		evbuffer_add_printf(bufferevent_get_output(c->bev),
		    "HTTP/1.1 100 Continue\r\n\r\n");
	return 0;
}

/* Try to take a request head from the input. Returns 1 when one was taken. */
static int
step_head(struct conn *c, struct evbuffer *in)
{
	struct evbuffer_ptr pos;
	size_t hlen;
	char *head;
	const char *why = NULL;
	cJSON *o;

	pos = evbuffer_search(in, "\r\n\r\n", 4, NULL);
	if (pos.pos < 0) {
		if (evbuffer_get_length(in) > MAX_HEAD)
			conn_refuse(c, 431, "request head too large");
		return 0;
	}
	hlen = (size_t)pos.pos + 4;
	if (hlen > MAX_HEAD) {
		conn_refuse(c, 431, "request head too large");
		return 0;
	}
	head = malloc(hlen + 1);
	if (head == NULL)
		die("out of memory");
	if (evbuffer_remove(in, head, hlen) != (int)hlen)
		die("evbuffer_remove");
	head[hlen] = '\0';
	if (memchr(head, '\0', hlen) != NULL)
		why = "NUL in the request head";
	else if (parse_head(c, head, hlen, &why) == 0)
		(void)setup_body(c, &why);
	free(head);
	if (why != NULL) {
		conn_refuse(c, 400, why);
		return 0;
	}
	/*
	 * The head alone, before its body: a test can then see that a
	 * request whose body went wrong had started upstream.
	 */
	o = log_event("head", c);
	cJSON_AddStringToObject(o, "method", c->method);
	cJSON_AddStringToObject(o, "target", c->target);
	log_json(o);
	return 1;
}

/* Hash and drop up to n body bytes from the input; returns bytes taken. */
static size_t
take_body(struct conn *c, struct evbuffer *in, uint64_t n)
{
	char buf[16384];
	size_t want, got = 0;
	int r;

	while (n > 0 && evbuffer_get_length(in) > 0) {
		want = n < sizeof(buf) ? (size_t)n : sizeof(buf);
		r = evbuffer_remove(in, buf, want);
		if (r <= 0)
			break;
		if (EVP_DigestUpdate(c->sha, buf, (size_t)r) != 1)
			die("EVP_DigestUpdate");
		if (c->body_f != NULL &&
		    fwrite(buf, 1, (size_t)r, c->body_f) != (size_t)r)
			die("cannot write a body file");
		c->body_bytes += (uint64_t)r;
		n -= (uint64_t)r;
		got += (size_t)r;
	}
	return got;
}

/* Read a CRLF line of the chunked framing. Returns 1 with line set, 0, -1. */
static int
take_line(struct conn *c, struct evbuffer *in, char *line, size_t len)
{
	size_t n = 0;
	char *s;

	s = evbuffer_readln(in, &n, EVBUFFER_EOL_CRLF_STRICT);
	if (s == NULL) {
		if (evbuffer_get_length(in) > MAX_LINE) {
			conn_refuse(c, 400, "chunk framing line too long");
			return -1;
		}
		return 0;
	}
	if (n >= len || memchr(s, '\n', n) != NULL) {
		free(s);
		conn_refuse(c, 400, "bad chunk framing line");
		return -1;
	}
	memcpy(line, s, n + 1);
	free(s);
	return 1;
}

/* Advance the chunked decoder. Returns 1 when the body is complete. */
static int
step_chunked(struct conn *c, struct evbuffer *in)
{
	char line[MAX_LINE + 1], *end;
	unsigned long long v;
	int r;

	for (;;) {
		switch (c->state) {
		case CS_CHUNK_LEN:
			r = take_line(c, in, line, sizeof(line));
			if (r <= 0)
				return 0;
			errno = 0;
			v = strtoull(line, &end, 16);
			if (errno != 0 || end == line ||
			    (*end != '\0' && *end != ';') ||
			    !((line[0] >= '0' && line[0] <= '9') ||
				(line[0] >= 'a' && line[0] <= 'f') ||
				(line[0] >= 'A' && line[0] <= 'F'))) {
				conn_refuse(c, 400, "bad chunk size");
				return 0;
			}
			c->body_left = (uint64_t)v;
			c->state = v == 0 ? CS_TRAILER : CS_CHUNK_DAT;
			break;
		case CS_CHUNK_DAT:
			c->body_left -= take_body(c, in, c->body_left);
			if (c->body_left > 0)
				return 0;
			c->state = CS_CHUNK_END;
			break;
		case CS_CHUNK_END:
			r = take_line(c, in, line, sizeof(line));
			if (r <= 0)
				return 0;
			if (line[0] != '\0') {
				conn_refuse(c, 400, "no CRLF after chunk data");
				return 0;
			}
			c->state = CS_CHUNK_LEN;
			break;
		case CS_TRAILER:
			r = take_line(c, in, line, sizeof(line));
			if (r <= 0)
				return 0;
			if (line[0] == '\0')
				return 1;
			break;
		default:
			return 0;
		}
	}
}

static char *
hex_digest(struct conn *c, char out[65])
{
	unsigned char md[32];
	unsigned int mdlen = 0;
	unsigned int i;

	if (EVP_DigestFinal_ex(c->sha, md, &mdlen) != 1 || mdlen != 32)
		die("EVP_DigestFinal_ex");
	for (i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
	return out;
}

static void
log_request(struct conn *c, const char *sha)
{
	cJSON *o = log_event("request", c);

	cJSON_AddStringToObject(o, "method", c->method);
	cJSON_AddStringToObject(o, "target", c->target);
	cJSON_AddStringToObject(o, "version", c->version);
	cJSON_AddItemReferenceToObject(o, "headers", c->hdrs);
	cJSON_AddNumberToObject(o, "body_bytes", (double)c->body_bytes);
	cJSON_AddStringToObject(o, "body_sha256", sha);
	if (c->body_f != NULL)
		cJSON_AddStringToObject(o, "body_file", c->body_path);
	/* A reference: deleting o leaves c->hdrs to request_reset(). */
	log_json(o);
}

static void
write_head(struct conn *c, int code, const char *ctype, int chunked,
    uint64_t clen)
{
	struct evbuffer *out = bufferevent_get_output(c->bev);

	evbuffer_add_printf(out, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n", code,
	    status_text(code), ctype);
	if (chunked)
		evbuffer_add_printf(out, "Transfer-Encoding: chunked\r\n");
	else if (code != 204)
		evbuffer_add_printf(out, "Content-Length: %llu\r\n",
		    (unsigned long long)clen);
	if (!c->keepalive)
		evbuffer_add_printf(out, "Connection: close\r\n");
	evbuffer_add(out, "\r\n", 2);
}

static void
answer_json(struct conn *c, int code, cJSON *body)
{
	char *s = cJSON_PrintUnformatted(body);
	size_t len;

	cJSON_Delete(body);
	if (s == NULL)
		die("out of memory");
	len = code == 204 ? 0 : strlen(s);
	write_head(c, code, "application/json", 0, len);
	evbuffer_add(bufferevent_get_output(c->bev), s, len);
	cJSON_free(s);
}

static void
answer_echo(struct conn *c, const char *path, const char *query,
    const char *sha)
{
	cJSON *o = cJSON_CreateObject(), *h = cJSON_CreateObject();
	const cJSON *pair;

	if (o == NULL || h == NULL)
		die("out of memory");
	cJSON_AddStringToObject(o, "method", c->method);
	cJSON_AddStringToObject(o, "path", path);
	cJSON_AddStringToObject(o, "query", query);
	cJSON_ArrayForEach(pair, c->hdrs) {
		char name[256];
		const char *hn = cJSON_GetArrayItem(pair, 0)->valuestring;
		const char *hv = cJSON_GetArrayItem(pair, 1)->valuestring;
		cJSON *old;
		size_t i;

		snprintf(name, sizeof(name), "%s", hn);
		for (i = 0; name[i] != '\0'; i++)
			if (name[i] >= 'A' && name[i] <= 'Z')
				name[i] = (char)(name[i] - 'A' + 'a');
		old = cJSON_GetObjectItemCaseSensitive(h, name);
		if (old != NULL) {
			/* Repeated fields are joined as a list would be. */
			size_t len = strlen(old->valuestring) + strlen(hv) + 3;
			char *joined = malloc(len);

			if (joined == NULL)
				die("out of memory");
			snprintf(joined, len, "%s, %s", old->valuestring, hv);
			cJSON_ReplaceItemInObjectCaseSensitive(h, name,
			    cJSON_CreateString(joined));
			free(joined);
		} else
			cJSON_AddStringToObject(h, name, hv);
	}
	cJSON_AddItemToObject(o, "headers", h);
	cJSON_AddNumberToObject(o, "body_bytes", (double)c->body_bytes);
	cJSON_AddStringToObject(o, "body_sha256", sha);
	cJSON_AddNumberToObject(o, "conn", (double)c->id);
	answer_json(c, 200, o);
}

/* The malformed answers of /v1/bad, by ?kind=. */
static const char *
bad_response(const char *kind)
{
	if (kind == NULL || strcmp(kind, "clte") == 0)
		return "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n"
		       "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
	if (strcmp(kind, "lf") == 0)
		return "HTTP/1.1 200 OK\nContent-Length: 2\n\nok";
	if (strcmp(kind, "fold") == 0)
		return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: b\r\n"
		       " c\r\n\r\nok";
	if (strcmp(kind, "twocl") == 0)
		return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
		       "Content-Length: 3\r\n\r\nok!";
	if (strcmp(kind, "status") == 0)
		return "HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\nok";
	if (strcmp(kind, "chunk") == 0)
		return "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		       "zz\r\nhello\r\n0\r\n\r\n";
	if (strcmp(kind, "garbage") == 0)
		return "this is not http\r\n\r\n";
	return NULL;
}

static void
timer_arm(struct conn *c, uint64_t ms)
{
	struct timeval tv;

	tv.tv_sec = (time_t)(ms / 1000);
	tv.tv_usec = (suseconds_t)((ms % 1000) * 1000);
	if (evtimer_add(c->timer, &tv) != 0)
		die("evtimer_add");
}

/* The response is fully queued: go on with the next request, or close. */
static void
response_done(struct conn *c)
{
	c->resp = RK_NONE;
	c->nreq++;
	bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
	request_reset(c);
	if (!c->keepalive) {
		c->state = CS_CLOSING;
		bufferevent_disable(c->bev, EV_READ);
		return;
	}
	c->state = CS_HEAD;
	/* Requests pipelined behind this one are already in the input. */
	conn_process(c);
}

static void
stream_step(struct conn *c)
{
	struct evbuffer *out = bufferevent_get_output(c->bev);
	char ev[96];
	int n;

	if (c->ev_name[0] != '\0')
		n = snprintf(ev, sizeof(ev), "event: %s\n" SSE_FMT, c->ev_name,
		    c->ev_i);
	else
		n = snprintf(ev, sizeof(ev), SSE_FMT, c->ev_i);
	evbuffer_add_printf(out, "%x\r\n%s\r\n", (unsigned)n, ev);
	c->ev_i++;
	if (c->ev_i < c->ev_n) {
		timer_arm(c, c->gap_ms);
		return;
	}
	evbuffer_add(out, "0\r\n\r\n", 5);
	response_done(c);
}

static void
big_fill(struct conn *c)
{
	struct evbuffer *out = bufferevent_get_output(c->bev);
	static char buf[BIG_PIECE];
	size_t n;

	while (c->resp_left > 0 && evbuffer_get_length(out) < BIG_HIGH) {
		n = c->resp_left < sizeof(buf) ? (size_t)c->resp_left :
						 sizeof(buf);
		fill_pattern(buf, n, c->resp_off);
		if (c->resp_chunked)
			evbuffer_add_printf(out, "%zx\r\n", n);
		evbuffer_add(out, buf, n);
		if (c->resp_chunked)
			evbuffer_add(out, "\r\n", 2);
		c->resp_off += n;
		c->resp_left -= n;
	}
	if (c->resp_left == 0) {
		if (c->resp_chunked)
			evbuffer_add(out, "0\r\n\r\n", 5);
		response_done(c);
	}
}

static void
slow_step(struct conn *c)
{
	char buf[4096];
	size_t n;

	n = c->resp_left < c->piece ? (size_t)c->resp_left : (size_t)c->piece;
	fill_pattern(buf, n, c->resp_off);
	evbuffer_add(bufferevent_get_output(c->bev), buf, n);
	c->resp_off += n;
	c->resp_left -= n;
	if (c->resp_left > 0) {
		timer_arm(c, c->gap_ms);
		return;
	}
	response_done(c);
}

static void
timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;

	(void)fd;
	(void)what;
	if (c->resp == RK_STREAM)
		stream_step(c);
	else if (c->resp == RK_SLOW)
		slow_step(c);
}

/* The body is complete: record the request and start its answer. */
static void
dispatch(struct conn *c)
{
	char sha[65], kind[32];
	const char *q, *ep;
	char *path, *query;
	uint64_t code;
	const char *bad;

	hex_digest(c, sha);
	log_request(c, sha);
	q = strchr(c->target, '?');
	path = xstrndup(c->target,
	    q != NULL ? (size_t)(q - c->target) : strlen(c->target));
	query = xstrndup(q != NULL ? q + 1 : "", q != NULL ? strlen(q + 1) : 0);
	/* The upstream URL's path is a prefix: select by what follows /v1/. */
	ep = strstr(path, "/v1/");
	ep = ep != NULL ? ep + 4 : "";
	c->state = CS_RESPOND;
	c->resp = RK_NONE;
	c->resp_off = 0;
	/* ?sse=1 selects the stream on any path (an SDK picks the path). */
	if (strcmp(ep, "stream") == 0 ||
	    (query_str(query, "sse", kind, sizeof(kind)) != NULL &&
		strcmp(kind, "1") == 0)) {
		c->ev_n = (unsigned)query_num(query, "n", 5, MAX_EVENTS);
		c->ev_i = 0;
		c->gap_ms = query_num(query, "gap_ms", 300, MAX_GAP_MS);
		/* ?event=NAME: an "event:" line per event (letters, '_'). */
		if (query_str(query, "event", c->ev_name, sizeof(c->ev_name)) ==
			NULL ||
		    c->ev_name[strspn(c->ev_name,
			"abcdefghijklmnopqrstuvwxyz_")] != '\0')
			c->ev_name[0] = '\0';
		write_head(c, 200, "text/event-stream", 1, 0);
		c->resp = RK_STREAM;
		if (c->ev_n == 0) {
			evbuffer_add(bufferevent_get_output(c->bev),
			    "0\r\n\r\n", 5);
			response_done(c);
		} else
			stream_step(c);
	} else if (strcmp(ep, "big") == 0) {
		c->resp_left = query_num(query, "bytes", 1024, MAX_BODY_PARAM);
		c->resp_chunked = query_num(query, "chunked", 0, 1) == 1;
		write_head(c, 200, "application/octet-stream", c->resp_chunked,
		    c->resp_left);
		c->resp = RK_BIG;
		bufferevent_setwatermark(c->bev, EV_WRITE, BIG_HIGH / 2, 0);
		big_fill(c);
	} else if (strcmp(ep, "slow-body") == 0) {
		c->resp_left = query_num(query, "bytes", 1024, MAX_BODY_PARAM);
		c->gap_ms = query_num(query, "gap_ms", 100, MAX_GAP_MS);
		c->piece = query_num(query, "piece", 64, 4096);
		if (c->piece == 0)
			c->piece = 1;
		write_head(c, 200, "application/octet-stream", 0, c->resp_left);
		c->resp = RK_SLOW;
		if (c->resp_left == 0)
			response_done(c);
		else
			slow_step(c);
	} else if (strcmp(ep, "hang") == 0) {
		c->resp = RK_HANG;
	} else if (strcmp(ep, "cut") == 0) {
		/* Half of the promised body, then close: a cut response. */
		c->resp_left = query_num(query, "bytes", 1024, 1 << 20);
		write_head(c, 200, "application/octet-stream", 0, c->resp_left);
		for (c->resp_off = 0; c->resp_off < c->resp_left / 2;
		     c->resp_off++)
			evbuffer_add(bufferevent_get_output(c->bev), "x", 1);
		c->keepalive = 0;
		response_done(c);
	} else if (strcmp(ep, "drop-reused") == 0 && c->nreq > 0) {
		/*
		 * The keep-alive race: a request on a reused connection meets
		 * an upstream that closes it without an answer. The first
		 * request of a connection is echoed.
		 */
		free(path);
		free(query);
		conn_free(c);
		return;
	} else if (strcmp(ep, "bad") == 0) {
		bad =
		    bad_response(query_str(query, "kind", kind, sizeof(kind)));
		if (bad == NULL)
			bad = bad_response(NULL);
		evbuffer_add(bufferevent_get_output(c->bev), bad, strlen(bad));
		c->keepalive = 0;
		response_done(c);
	} else if (strcmp(ep, "fields") == 0) {
		/* A valid answer with ?n= header fields besides its framing. */
		struct evbuffer *out = bufferevent_get_output(c->bev);
		uint64_t i, n = query_num(query, "n", 0, MAX_FIELDS);

		evbuffer_add_printf(out,
		    "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n");
		for (i = 0; i < n; i++)
			evbuffer_add_printf(out, "X-F%llu: v\r\n",
			    (unsigned long long)i);
		evbuffer_add(out, "\r\nok", 4);
		response_done(c);
	} else if (strcmp(ep, "reflect") == 0) {
		/*
		 * An upstream that echoes what it was sent in its response
		 * head (as some error pages do with a key): every request
		 * field comes back as "X-Req-<name>: <value>".
		 */
		struct evbuffer *out = bufferevent_get_output(c->bev);
		const cJSON *pair;

		evbuffer_add_printf(out,
		    "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n");
		cJSON_ArrayForEach(pair, c->hdrs)
			evbuffer_add_printf(out, "X-Req-%s: %s\r\n",
			    cJSON_GetArrayItem(pair, 0)->valuestring,
			    cJSON_GetArrayItem(pair, 1)->valuestring);
		evbuffer_add(out, "\r\nok", 4);
		response_done(c);
	} else if (strcmp(ep, "status") == 0) {
		cJSON *o = cJSON_CreateObject();

		code = query_num(query, "code", 200, 599);
		if (code < 200)
			code = 200;
		if (o == NULL)
			die("out of memory");
		cJSON_AddNumberToObject(o, "status", (double)code);
		answer_json(c, (int)code, o);
		response_done(c);
	} else {
		answer_echo(c, path, query, sha);
		response_done(c);
	}
	free(path);
	free(query);
}

/* Run the request cycle over whatever input is buffered. */
static void
conn_process(struct conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->bev);

	for (;;) {
		switch (c->state) {
		case CS_HEAD:
			if (!step_head(c, in))
				return;
			continue;
		case CS_BODY_CL:
			c->body_left -= take_body(c, in, c->body_left);
			if (c->body_left > 0)
				return;
			break;
		case CS_CHUNK_LEN:
		case CS_CHUNK_DAT:
		case CS_CHUNK_END:
		case CS_TRAILER:
			if (!step_chunked(c, in))
				return;
			break;
		case CS_RESPOND:
		case CS_CLOSING:
			return;
		}
		/*
		 * The body is complete. A response that finishes at once ends
		 * in response_done(), which already ran the requests queued
		 * behind this one, so there is nothing left to do here.
		 */
		dispatch(c);
		return;
	}
}

static void
read_cb(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;

	(void)bev;
	conn_process(c);
}

static void
write_cb(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;

	if (c->state == CS_RESPOND && c->resp == RK_BIG) {
		big_fill(c);
		return;
	}
	if (c->state == CS_CLOSING &&
	    evbuffer_get_length(bufferevent_get_output(bev)) == 0) {
		/* Say close_notify, so a truncation is never our doing. */
		if (c->ssl != NULL)
			(void)SSL_shutdown(c->ssl);
		conn_free(c);
	}
}

static void
ssl_error_string(char *buf, size_t len)
{
	unsigned long e;
	size_t off = 0;

	buf[0] = '\0';
	while ((e = ERR_get_error()) != 0 && off + 2 < len) {
		if (off > 0)
			buf[off++] = ';';
		ERR_error_string_n(e, buf + off, len - off);
		off += strlen(buf + off);
	}
	if (buf[0] == '\0')
		snprintf(buf, len, "%s", strerror(errno));
}

/*
 * Why a connection failed: libevent moves OpenSSL's errors into the
 * bufferevent's own queue, so read them from there; else the socket error.
 */
static void
bev_error_string(struct conn *c, char *buf, size_t len)
{
	unsigned long e;
	size_t off = 0;
	int err = EVUTIL_SOCKET_ERROR();

	buf[0] = '\0';
	while (c->ssl != NULL &&
	    (e = bufferevent_get_openssl_error(c->bev)) != 0 && off + 2 < len) {
		if (off > 0)
			buf[off++] = ';';
		ERR_error_string_n(e, buf + off, len - off);
		off += strlen(buf + off);
	}
	if (buf[0] == '\0')
		snprintf(buf, len, "socket: %s",
		    err != 0 ? evutil_socket_error_to_string(err) : "EOF");
}

static void
event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct conn *c = arg;
	char why[512];
	cJSON *o;
	const char *sni;

	(void)bev;
	if ((what & BEV_EVENT_CONNECTED) && c->ssl != NULL) {
		o = log_event("handshake", c);
		cJSON_AddBoolToObject(o, "resumed", SSL_session_reused(c->ssl));
		sni = SSL_get_servername(c->ssl, TLSEXT_NAMETYPE_host_name);
		cJSON_AddStringToObject(o, "sni", sni != NULL ? sni : "");
		cJSON_AddStringToObject(o, "version", SSL_get_version(c->ssl));
		log_json(o);
		c->handshaken = 1;
		return;
	}
	if ((what & BEV_EVENT_EOF) && !(what & BEV_EVENT_ERROR) &&
	    c->state == CS_RESPOND && c->resp == RK_BIG) {
		/*
		 * The client half-closed after its request: the response
		 * is still owed. Finish it, then close (a TLS bufferevent
		 * stopped writing on the EOF: start it again).
		 */
		c->keepalive = 0;
		bufferevent_disable(c->bev, EV_READ);
		bufferevent_enable(c->bev, EV_WRITE);
		big_fill(c);
		return;
	}
	if (what & BEV_EVENT_ERROR) {
		bev_error_string(c, why, sizeof(why));
		log_problem(c,
		    c->ssl != NULL && !c->handshaken ? "handshake_failed" :
						       "conn_error",
		    why);
	}
	conn_free(c);
}

static void
conn_free(struct conn *c)
{
	cJSON *o;

	o = log_event("close", c);
	cJSON_AddNumberToObject(o, "requests", (double)c->nreq);
	cJSON_AddBoolToObject(o, "mid_request",
	    c->state != CS_HEAD && c->state != CS_CLOSING);
	log_json(o);
	if (c->prev != NULL)
		c->prev->next = c->next;
	else
		conns = c->next;
	if (c->next != NULL)
		c->next->prev = c->prev;
	request_reset(c);
	if (c->timer != NULL)
		event_free(c->timer);
	bufferevent_free(c->bev);
	free(c);
}

static void
addr_str(const struct sockaddr *sa, char *buf, size_t len)
{
	char ip[INET6_ADDRSTRLEN];

	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const void *)sa;

		inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof(ip));
		snprintf(buf, len, "[%s]:%u", ip, ntohs(s6->sin6_port));
	} else {
		const struct sockaddr_in *s4 = (const void *)sa;

		inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof(ip));
		snprintf(buf, len, "%s:%u", ip, ntohs(s4->sin_port));
	}
}

static void
accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
    int salen, void *arg)
{
	struct conn *c;
	struct sockaddr_storage local;
	socklen_t llen = sizeof(local);
	char peer[80], self[80];
	cJSON *o;
	int one = 1;

	(void)l;
	(void)salen;
	(void)arg;
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c = calloc(1, sizeof(*c));
	if (c == NULL)
		die("out of memory");
	c->id = next_conn_id++;
	if (ssl_ctx != NULL) {
		c->ssl = SSL_new(ssl_ctx);
		if (c->ssl == NULL)
			die("SSL_new");
		c->bev = bufferevent_openssl_socket_new(base, fd, c->ssl,
		    BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE);
		if (c->bev != NULL)
			bufferevent_openssl_set_allow_dirty_shutdown(c->bev, 1);
	} else
		c->bev =
		    bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
	c->timer = evtimer_new(base, timer_cb, c);
	if (c->bev == NULL || c->timer == NULL)
		die("cannot set up a connection");
	c->next = conns;
	if (conns != NULL)
		conns->prev = c;
	conns = c;
	addr_str(sa, peer, sizeof(peer));
	if (getsockname(fd, (struct sockaddr *)&local, &llen) == 0)
		addr_str((struct sockaddr *)&local, self, sizeof(self));
	else
		snprintf(self, sizeof(self), "?");
	o = log_event("accept", c);
	cJSON_AddStringToObject(o, "peer", peer);
	cJSON_AddStringToObject(o, "local", self);
	cJSON_AddBoolToObject(o, "tls", c->ssl != NULL);
	log_json(o);
	bufferevent_setcb(c->bev, read_cb, write_cb, event_cb, c);
	if (bufferevent_enable(c->bev, EV_READ | EV_WRITE) != 0)
		die("bufferevent_enable");
}

static void
signal_cb(evutil_socket_t sig, short what, void *arg)
{
	(void)sig;
	(void)what;
	(void)arg;
	event_base_loopexit(base, NULL);
}

static void
setup_tls(const char *cert, const char *key)
{
	static const unsigned char sid[] = "fakeup";

	ssl_ctx = SSL_CTX_new(TLS_server_method());
	if (ssl_ctx == NULL ||
	    SSL_CTX_set_min_proto_version(ssl_ctx, TLS1_2_VERSION) != 1 ||
	    SSL_CTX_use_certificate_chain_file(ssl_ctx, cert) != 1 ||
	    SSL_CTX_use_PrivateKey_file(ssl_ctx, key, SSL_FILETYPE_PEM) != 1 ||
	    SSL_CTX_check_private_key(ssl_ctx) != 1 ||
	    SSL_CTX_set_session_id_context(ssl_ctx, sid, sizeof(sid) - 1) !=
		1) {
		char why[512];

		ssl_error_string(why, sizeof(why));
		fprintf(stderr, "fakeup: TLS set-up: %s\n", why);
		exit(1);
	}
	/* Resumption lets a test tell a reused session from a new one. */
	SSL_CTX_set_session_cache_mode(ssl_ctx, SSL_SESS_CACHE_SERVER);
	/*
	 * A peer that closes without close_notify (allowed for HTTP framed by
	 * length) is an EOF here, not an error in the log.
	 */
	SSL_CTX_set_options(ssl_ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
}

static void
write_ready(const char *path)
{
	char tmp[4096];
	FILE *f;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		die("--ready path too long");
	f = fopen(tmp, "w");
	if (f == NULL || fprintf(f, "%ld\n", (long)getpid()) < 0 ||
	    fclose(f) != 0 || rename(tmp, path) != 0)
		die("cannot write the ready file");
}

static void
usage(void)
{
	fprintf(stderr,
	    "usage: fakeup --listen ADDR:PORT [--listen ...] "
	    "(--cert FILE --key FILE | --plain)\n"
	    "              [--log FILE] [--ready FILE] [--body-dir DIR]\n");
	exit(2);
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "cert", required_argument, NULL, 'c' },
		{ "key", required_argument, NULL, 'k' },
		{ "plain", no_argument, NULL, 'p' },
		{ "log", required_argument, NULL, 'L' },
		{ "ready", required_argument, NULL, 'r' },
		{ "body-dir", required_argument, NULL, 'b' },
		{ NULL, 0, NULL, 0 },
	};
	const char *listen_on[MAX_LISTEN];
	struct evconnlistener *ls[MAX_LISTEN];
	const char *cert = NULL, *key = NULL, *logpath = NULL, *ready = NULL;
	struct event *sig_term, *sig_int;
	struct sockaddr_storage ss;
	int nlisten = 0, plain = 0, ch, i, sslen;

	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (ch) {
		case 'l':
			if (nlisten == MAX_LISTEN)
				die("too many --listen");
			listen_on[nlisten++] = optarg;
			break;
		case 'c':
			cert = optarg;
			break;
		case 'k':
			key = optarg;
			break;
		case 'p':
			plain = 1;
			break;
		case 'L':
			logpath = optarg;
			break;
		case 'r':
			ready = optarg;
			break;
		case 'b':
			body_dir = optarg;
			break;
		default:
			usage();
		}
	}
	if (optind != argc || nlisten == 0 || (cert == NULL) != (key == NULL) ||
	    (plain && cert != NULL) || (!plain && cert == NULL))
		usage();
	signal(SIGPIPE, SIG_IGN);
	if (logpath != NULL) {
		log_fd = open(logpath,
		    O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (log_fd < 0)
			die("cannot open the log");
	}
	base = event_base_new();
	if (base == NULL)
		die("event_base_new");
	if (cert != NULL)
		setup_tls(cert, key);
	for (i = 0; i < nlisten; i++) {
		memset(&ss, 0, sizeof(ss));
		sslen = (int)sizeof(ss);
		if (evutil_parse_sockaddr_port(listen_on[i],
			(struct sockaddr *)&ss, &sslen) != 0 ||
		    (ss.ss_family == AF_INET &&
			((struct sockaddr_in *)&ss)->sin_port == 0) ||
		    (ss.ss_family == AF_INET6 &&
			((struct sockaddr_in6 *)&ss)->sin6_port == 0)) {
			fprintf(stderr, "fakeup: bad --listen %s\n",
			    listen_on[i]);
			return 2;
		}
		ls[i] = evconnlistener_new_bind(base, accept_cb, NULL,
		    LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_FREE |
			LEV_OPT_CLOSE_ON_EXEC,
		    128, (struct sockaddr *)&ss, sslen);
		if (ls[i] == NULL) {
			fprintf(stderr, "fakeup: cannot listen on %s: %s\n",
			    listen_on[i], strerror(errno));
			return 1;
		}
	}
	sig_term = evsignal_new(base, SIGTERM, signal_cb, NULL);
	sig_int = evsignal_new(base, SIGINT, signal_cb, NULL);
	if (sig_term == NULL || sig_int == NULL ||
	    evsignal_add(sig_term, NULL) != 0 ||
	    evsignal_add(sig_int, NULL) != 0)
		die("cannot watch signals");
	if (ready != NULL)
		write_ready(ready);
	event_base_dispatch(base);

	while (conns != NULL)
		conn_free(conns);
	for (i = 0; i < nlisten; i++)
		evconnlistener_free(ls[i]);
	event_free(sig_term);
	event_free(sig_int);
	event_base_free(base);
	SSL_CTX_free(ssl_ctx);
	if (log_fd >= 0)
		close(log_fd);
	return 0;
}
