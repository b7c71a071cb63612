/*
 * The policy file (DESIGN.md "Policy file"): strict JSON loading into an
 * immutable, refcounted struct config. Unknown keys, duplicate keys, wrong
 * types and out-of-range values are errors naming the file and the JSON
 * path; every optional field gets its documented default (docs/config.md).
 * Key and value files are read here, once per load, with the permission
 * rules for secrets. Printing the normalized policy lives here too, so the
 * defaults are written down in one file.
 */
#include <sys/stat.h>
#include <sys/un.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/sha.h>
#include <openssl/ssl.h>

#include "certs/certs.h"
#include "proxy/config/config.h"
#include "proxy/http/http1.h"
#include "proxy/token/store.h"
#include "proxy/token/token.h"
#include "proxy/util/ascii.h"
#include "proxy/util/util.h"

#define CONFIG_MAX_FILE (1024 * 1024) /* policy and key files */
#define CONFIG_MAX_LIST 1024          /* entries of any array */

/* Where an error is reported: the file name and the buffer for "why". */
struct cfctx {
	const char *file;
	char *why;
	size_t whylen;
	const struct config *prev;
	struct config *cf;
};

static uint64_t config_generation;

static int
cf_err(struct cfctx *cx, const char *jp, const char *fmt, ...) SL_PRINTF(3, 4);

static int
cf_err(struct cfctx *cx, const char *jp, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	size_t i;

	va_start(ap, fmt);
	(void)vsnprintf(msg, sizeof(msg), fmt, ap); /* cut is fine */
	va_end(ap);
	/* Names from the policy may hold controls: the error stays one line. */
	for (i = 0; msg[i] != '\0'; i++)
		if ((unsigned char)msg[i] < 0x20 || msg[i] == 0x7f)
			msg[i] = '?';
	if (jp != NULL && jp[0] != '\0')
		snprintf(cx->why, cx->whylen, "%s: %s: %s", cx->file, jp, msg);
	else
		snprintf(cx->why, cx->whylen, "%s: %s", cx->file, msg);
	return -1;
}

/*
 * Allocation never ends the process: a reload (SIGHUP, admin "reload")
 * that runs out of memory is refused like any other bad policy. Both
 * return NULL after cf_err(), with jp naming what was being loaded.
 */
unsigned long config_alloc_fail_at;
static unsigned long config_allocs;

/* The unit tests' failure injection: the config_alloc_fail_at-th fails. */
static int
cf_alloc_fails(void)
{
	return config_alloc_fail_at != 0 &&
	    ++config_allocs == config_alloc_fail_at;
}

static char *
cf_strdup(struct cfctx *cx, const char *jp, const char *s)
{
	char *p = NULL;

	if (cf_alloc_fails() || (p = strdup(s)) == NULL)
		cf_err(cx, jp, "out of memory");
	return p;
}

static void *
cf_calloc(struct cfctx *cx, const char *jp, size_t n, size_t size)
{
	void *p = NULL;

	if (cf_alloc_fails() || (p = calloc(n == 0 ? 1 : n, size)) == NULL)
		cf_err(cx, jp, "out of memory");
	return p;
}

/* Read a whole file of at most CONFIG_MAX_FILE bytes; NUL-terminated. */
static int
read_file(const char *path, int fd, unsigned char **out, size_t *outlen,
    char *why, size_t whylen)
{
	struct stat st;
	unsigned char *buf;
	size_t off = 0;
	ssize_t n;

	if (fstat(fd, &st) == -1) {
		snprintf(why, whylen, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(why, whylen, "%s: not a regular file", path);
		return -1;
	}
	if (st.st_size > (off_t)CONFIG_MAX_FILE) {
		snprintf(why, whylen, "%s: larger than %d bytes", path,
		    CONFIG_MAX_FILE);
		return -1;
	}
	if (cf_alloc_fails() ||
	    (buf = calloc((size_t)st.st_size + 1, 1)) == NULL) {
		snprintf(why, whylen, "%s: out of memory", path);
		return -1;
	}
	while (off < (size_t)st.st_size) {
		n = read(fd, buf + off, (size_t)st.st_size - off);
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0) {
			snprintf(why, whylen, "%s: %s", path,
			    n == 0 ? "short read" : strerror(errno));
			explicit_bzero(buf, (size_t)st.st_size + 1);
			free(buf);
			return -1;
		}
		off += (size_t)n;
	}
	*out = buf;
	*outlen = off;
	return 0;
}

int
config_read_secret(const char *path, uid_t owner, unsigned char **out,
    size_t *outlen, char *why, size_t whylen)
{
	struct stat st;
	int fd;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) == -1) {
		/* O_NOFOLLOW: a link could point anywhere the sandbox likes. */
		snprintf(why, whylen, "%s: %s", path,
		    errno == ELOOP ? "is a symbolic link (refused)" :
				     strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) == -1) {
		snprintf(why, whylen, "%s: %s", path, strerror(errno));
		close(fd);
		return -1;
	}
	/*
	 * A secret readable by others may already be known to the sandbox;
	 * refuse it rather than trust it (DESIGN.md "Policy file").
	 */
	if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
		snprintf(why, whylen,
		    "%s: mode %04o gives group/other access (chmod 600)", path,
		    (unsigned)(st.st_mode & 07777));
		close(fd);
		return -1;
	}
	if (owner != CONFIG_ANY_OWNER && st.st_uid != 0 && st.st_uid != owner &&
	    st.st_uid != geteuid()) {
		snprintf(why, whylen, "%s: owned by uid %u, not root or %u",
		    path, (unsigned)st.st_uid, (unsigned)owner);
		close(fd);
		return -1;
	}
	if (read_file(path, fd, out, outlen, why, whylen) == -1) {
		close(fd);
		return -1;
	}
	close(fd);
	if (*outlen > 0 && (*out)[*outlen - 1] == '\n')
		(*outlen)--;
	return 0;
}

/*
 * Generic checks. Each takes the JSON path of the value ("routes[0].hosts")
 * so that its error names it.
 */

/* The object's keys must all be in allowed[] and appear once each. */
static int
cf_keys(struct cfctx *cx, const char *jp, const cJSON *obj,
    const char *const *allowed)
{
	const cJSON *it, *jt;
	size_t i;

	if (!cJSON_IsObject(obj))
		return cf_err(cx, jp, "must be an object");
	cJSON_ArrayForEach(it, obj) {
		for (i = 0; allowed[i] != NULL; i++)
			if (strcmp(it->string, allowed[i]) == 0)
				break;
		if (allowed[i] == NULL)
			return cf_err(cx, jp, "unknown key \"%s\"", it->string);
		for (jt = obj->child; jt != it; jt = jt->next)
			if (strcmp(jt->string, it->string) == 0)
				return cf_err(cx, jp, "duplicate key \"%s\"",
				    it->string);
	}
	return 0;
}

static void
cf_sub(char *out, size_t len, const char *jp, const char *key)
{
	snprintf(out, len, "%s%s%s", jp, jp[0] ? "." : "", key);
}

static void
cf_idx(char *out, size_t len, const char *jp, size_t i)
{
	snprintf(out, len, "%s[%zu]", jp, i);
}

/* A string member; absent → *out unchanged (the default) unless required. */
static int
cf_str(struct cfctx *cx, const char *jp, const cJSON *obj, const char *key,
    int required, const char **out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
	char sub[256];

	cf_sub(sub, sizeof(sub), jp, key);
	if (v == NULL) {
		if (required)
			return cf_err(cx, jp, "missing \"%s\"", key);
		return 0;
	}
	if (!cJSON_IsString(v))
		return cf_err(cx, sub, "must be a string");
	if (v->valuestring[0] == '\0')
		return cf_err(cx, sub, "must not be empty");
	*out = v->valuestring;
	return 0;
}

static int
cf_bool(struct cfctx *cx, const char *jp, const cJSON *obj, const char *key,
    int *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
	char sub[256];

	if (v == NULL)
		return 0;
	cf_sub(sub, sizeof(sub), jp, key);
	if (!cJSON_IsBool(v))
		return cf_err(cx, sub, "must be true or false");
	*out = cJSON_IsTrue(v);
	return 0;
}

/* An integer member in [min, max]; JSON numbers must be integral. */
static int
cf_uint(struct cfctx *cx, const char *jp, const cJSON *obj, const char *key,
    uint64_t min, uint64_t max, uint64_t *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
	char sub[256];
	double d;

	if (v == NULL)
		return 0;
	cf_sub(sub, sizeof(sub), jp, key);
	if (!cJSON_IsNumber(v))
		return cf_err(cx, sub, "must be a number");
	d = v->valuedouble;
	if (d < 0)
		return cf_err(cx, sub, "must not be negative");
	/* 2^53: beyond it a double no longer holds every integer. */
	if (!(d <= 9007199254740992.0) || d != (double)(uint64_t)d)
		return cf_err(cx, sub, "must be a whole number below 2^53");
	if ((uint64_t)d < min || (uint64_t)d > max)
		return cf_err(cx, sub, "must be between %llu and %llu",
		    (unsigned long long)min, (unsigned long long)max);
	*out = (uint64_t)d;
	return 0;
}

/*
 * A string array member. Absent → *n unchanged. Each element must be a
 * non-empty string; check (may be NULL) validates one element.
 */
static int
cf_strlist(struct cfctx *cx, const char *jp, const cJSON *obj, const char *key,
    char ***out, size_t *n,
    int (*check)(struct cfctx *, const char *, const char *))
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key), *it;
	char sub[256], el[300];
	size_t i = 0, count;
	char **list;

	if (v == NULL)
		return 0;
	cf_sub(sub, sizeof(sub), jp, key);
	if (!cJSON_IsArray(v))
		return cf_err(cx, sub, "must be an array");
	count = (size_t)cJSON_GetArraySize(v);
	if (count > CONFIG_MAX_LIST)
		return cf_err(cx, sub, "more than %d entries", CONFIG_MAX_LIST);
	if ((list = cf_calloc(cx, sub, count + 1, sizeof(*list))) == NULL)
		return -1;
	cJSON_ArrayForEach(it, v) {
		cf_idx(el, sizeof(el), sub, i);
		if (!cJSON_IsString(it) || it->valuestring[0] == '\0') {
			cf_err(cx, el, "must be a non-empty string");
			goto fail;
		}
		if (check != NULL && check(cx, el, it->valuestring) == -1)
			goto fail;
		if ((list[i] = cf_strdup(cx, el, it->valuestring)) == NULL)
			goto fail;
		i++;
	}
	*out = list;
	*n = count;
	return 0;
fail:
	while (i > 0)
		free(list[--i]);
	free(list);
	return -1;
}

static void
strlist_free(char **list, size_t n)
{
	size_t i;

	if (list == NULL)
		return;
	for (i = 0; i < n; i++)
		free(list[i]);
	free(list);
}

static int
has_dup(char **list, size_t n, size_t *dup)
{
	size_t i, j;

	for (i = 0; i < n; i++)
		for (j = 0; j < i; j++)
			if (strcmp(list[i], list[j]) == 0) {
				*dup = i;
				return 1;
			}
	return 0;
}

/*
 * Element checks.
 */
static int
check_method(struct cfctx *cx, const char *jp, const char *s)
{
	const char *p;

	for (p = s; *p != '\0'; p++)
		if (!ascii_is_tchar((unsigned char)*p))
			return cf_err(cx, jp, "\"%s\" is not a method name", s);
	if (strcmp(s, "CONNECT") == 0)
		return cf_err(cx, jp,
		    "CONNECT is controlled by connect.enabled");
	return 0;
}

static int
check_prefix(struct cfctx *cx, const char *jp, const char *s)
{
	size_t bad;

	if (s[0] != '/')
		return cf_err(cx, jp, "\"%s\" must start with '/'", s);
	if (strchr(s, '?') != NULL || strchr(s, '#') != NULL)
		return cf_err(cx, jp, "\"%s\" must be a path only", s);
	if (path_check(s, strlen(s), &bad) == -1)
		return cf_err(cx, jp, "\"%s\" is ambiguous at byte %zu", s,
		    bad);
	return 0;
}

static int
check_host(struct cfctx *cx, const char *jp, const char *s)
{
	struct in6_addr a6;
	struct uri u;
	const char *why = "invalid";

	/* A bare IPv6 literal is taken as if bracketed. */
	if (inet_pton(AF_INET6, s, &a6) == 1)
		return 0;
	memset(&u, 0, sizeof(u));
	if (uri_parse_host(s, strlen(s), &u, &why) == -1)
		return cf_err(cx, jp,
		    "\"%s\" is not a host name or address: %s", s, why);
	if (u.has_port)
		return cf_err(cx, jp, "\"%s\": no port allowed", s);
	return 0;
}

/* Hosts are kept as policy_route_for() compares them: lower case, IPv6
 * literals without brackets. */
static void
normalize_host(char *h)
{
	size_t len = strlen(h);

	if (len >= 2 && h[0] == '[' && h[len - 1] == ']') {
		memmove(h, h + 1, len - 2);
		h[len - 2] = '\0';
	}
	for (; *h != '\0'; h++)
		*h = (char)tolower((unsigned char)*h);
}

static int
check_ip(struct cfctx *cx, const char *jp, const char *s)
{
	unsigned char buf[16];

	if (inet_pton(AF_INET, s, buf) != 1 && inet_pton(AF_INET6, s, buf) != 1)
		return cf_err(cx, jp, "\"%s\" is not an IP address", s);
	return 0;
}

static int
check_iface(struct cfctx *cx, const char *jp, const char *s)
{
	const char *p;
	size_t len = strlen(s);

	/* IFNAMSIZ - 1 bytes; '*' only as the last character (nft wildcard). */
	if (len >= 16)
		return cf_err(cx, jp, "\"%s\" is longer than 15 bytes", s);
	for (p = s; *p != '\0'; p++)
		if (!(isalnum((unsigned char)*p) || *p == '-' || *p == '_' ||
			*p == '.' || (*p == '*' && p[1] == '\0')))
			return cf_err(cx, jp,
			    "\"%s\": only letters, digits, '-', '_', '.' and a trailing '*'",
			    s);
	return 0;
}

/* Lower-case a host name in place (IP literals are unaffected). */
static void
lower(char *s)
{
	for (; *s != '\0'; s++)
		*s = (char)tolower((unsigned char)*s);
}

/*
 * "IP:port" or "[IPv6]:port" into a sockaddr.
 */
static int
parse_listen(const char *s, struct sockaddr_storage *ss, socklen_t *len)
{
	char host[INET6_ADDRSTRLEN + 1];
	const char *colon, *h;
	size_t hlen;
	char *end;
	unsigned long port;

	memset(ss, 0, sizeof(*ss));
	if (s[0] == '[') {
		if ((colon = strstr(s, "]:")) == NULL)
			return -1;
		h = s + 1;
		hlen = (size_t)(colon - h);
		colon++;
	} else {
		if ((colon = strrchr(s, ':')) == NULL)
			return -1;
		h = s;
		hlen = (size_t)(colon - s);
	}
	if (hlen == 0 || hlen >= sizeof(host))
		return -1;
	memcpy(host, h, hlen);
	host[hlen] = '\0';
	if (colon[1] < '0' || colon[1] > '9')
		return -1;
	errno = 0;
	port = strtoul(colon + 1, &end, 10);
	if (errno != 0 || *end != '\0' || port == 0 || port > 65535 ||
	    strlen(colon + 1) > 5)
		return -1;
	if (s[0] != '[') {
		struct sockaddr_in *sin = (struct sockaddr_in *)ss;

		if (inet_pton(AF_INET, host, &sin->sin_addr) != 1)
			return -1;
		sin->sin_family = AF_INET;
		sin->sin_port = htons((uint16_t)port);
		*len = sizeof(*sin);
	} else {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

		if (inet_pton(AF_INET6, host, &sin6->sin6_addr) != 1)
			return -1;
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons((uint16_t)port);
		*len = sizeof(*sin6);
	}
	return 0;
}

/*
 * Sections.
 */
static int
load_user(struct cfctx *cx, const cJSON *root)
{
	struct config *cf = cx->cf;
	const char *user = NULL;
	struct passwd *pw;
	char *end;
	unsigned long id;

	cf->cf_uid = geteuid();
	cf->cf_gid = getegid();
	if (cf_str(cx, "", root, "user", 0, &user) == -1)
		return -1;
	if (user == NULL)
		return 0;
	if ((cf->cf_user = cf_strdup(cx, "user", user)) == NULL)
		return -1;
	if ((pw = getpwnam(user)) != NULL) {
		cf->cf_uid = pw->pw_uid;
		cf->cf_gid = pw->pw_gid;
		return 0;
	}
	/* A numeric uid that has no passwd entry: its group is the same id. */
	errno = 0;
	id = strtoul(user, &end, 10);
	if (isdigit((unsigned char)user[0]) && *end == '\0' && errno == 0 &&
	    id < UINT32_MAX) {
		cf->cf_uid = (uid_t)id;
		cf->cf_gid = (gid_t)id;
		return 0;
	}
	return cf_err(cx, "user", "no such user \"%s\"", user);
}

/* One entry of "listeners" (at jp) into lc. */
static int
load_listener(struct cfctx *cx, const char *jp, const cJSON *it,
    struct listener_conf *lc)
{
	static const char *const keys[] = { "name", "type", "listen", "route",
		NULL };
	const char *name = NULL, *type = NULL, *listen = NULL;
	const char *route = NULL;

	if (cf_keys(cx, jp, it, keys) == -1 ||
	    cf_str(cx, jp, it, "type", 1, &type) == -1 ||
	    cf_str(cx, jp, it, "listen", 1, &listen) == -1 ||
	    cf_str(cx, jp, it, "name", 0, &name) == -1 ||
	    cf_str(cx, jp, it, "route", 0, &route) == -1)
		return -1;
	if (strcmp(type, "forward") == 0)
		lc->lc_type = LISTENER_FORWARD;
	else if (strcmp(type, "reverse") == 0)
		lc->lc_type = LISTENER_REVERSE;
	else
		return cf_err(cx, jp,
		    "type: \"%s\" is not \"forward\" or \"reverse\"", type);
	if (strlen(listen) >= sizeof(lc->lc_listen) ||
	    parse_listen(listen, &lc->lc_addr, &lc->lc_addrlen) == -1)
		return cf_err(cx, jp,
		    "listen: \"%s\" is not IP:PORT or [IPv6]:PORT", listen);
	snprintf(lc->lc_listen, sizeof(lc->lc_listen), "%s", listen);
	if (name == NULL)
		name = listen;
	if (strlen(name) >= sizeof(lc->lc_name))
		return cf_err(cx, jp, "name: longer than %zu bytes",
		    sizeof(lc->lc_name) - 1);
	snprintf(lc->lc_name, sizeof(lc->lc_name), "%s", name);
	if (lc->lc_type == LISTENER_REVERSE && route == NULL)
		return cf_err(cx, jp, "a reverse listener needs \"route\"");
	if (lc->lc_type == LISTENER_FORWARD && route != NULL)
		return cf_err(cx, jp,
		    "route: only reverse listeners are bound to a route");
	if (route != NULL) {
		if (strlen(route) > TOKEN_MAX_STR)
			return cf_err(cx, jp, "route: too long");
		snprintf(lc->lc_route, sizeof(lc->lc_route), "%s", route);
	}
	return 0;
}

/* Listener i (at jp) takes no name or address of one before it. */
static int
listener_unique(struct cfctx *cx, const char *jp, size_t i)
{
	const struct listener_conf *ls = cx->cf->cf_listeners, *lc = &ls[i];
	size_t j;

	for (j = 0; j < i; j++) {
		if (strcmp(ls[j].lc_name, lc->lc_name) == 0)
			return cf_err(cx, jp,
			    "name: \"%s\" is used by listeners[%zu]",
			    lc->lc_name, j);
		if (ls[j].lc_addrlen == lc->lc_addrlen &&
		    memcmp(&ls[j].lc_addr, &lc->lc_addr, lc->lc_addrlen) == 0)
			return cf_err(cx, jp,
			    "listen: %s is used by listeners[%zu]",
			    lc->lc_listen, j);
	}
	return 0;
}

static int
load_listeners(struct cfctx *cx, const cJSON *root)
{
	struct config *cf = cx->cf;
	const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "listeners");
	const cJSON *it;
	char jp[64];
	size_t i = 0;

	if (arr == NULL)
		return cf_err(cx, "", "missing \"listeners\"");
	if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) == 0)
		return cf_err(cx, "listeners", "must be a non-empty array");
	if (cJSON_GetArraySize(arr) > 64)
		return cf_err(cx, "listeners", "more than 64 listeners");
	if ((cf->cf_listeners = cf_calloc(cx, "listeners",
		 (size_t)cJSON_GetArraySize(arr), sizeof(*cf->cf_listeners))) ==
	    NULL)
		return -1;
	cf->cf_nlisteners = (size_t)cJSON_GetArraySize(arr);
	cJSON_ArrayForEach(it, arr) {
		cf_idx(jp, sizeof(jp), "listeners", i);
		if (load_listener(cx, jp, it, &cf->cf_listeners[i]) == -1 ||
		    listener_unique(cx, jp, i) == -1)
			return -1;
		i++;
	}
	return 0;
}

/* Find the previous policy's copy of a key whose file was unlinked. */
static const struct token_key *
prev_key(const struct config *prev, const char *file, size_t *idx)
{
	size_t i;

	if (prev == NULL)
		return NULL;
	for (i = 0; i < prev->cf_tokens.tc_nkeys; i++)
		if (prev->cf_tokens.tc_key_unlink[i] &&
		    strcmp(prev->cf_tokens.tc_key_files[i], file) == 0) {
			*idx = i;
			return &prev->cf_tokens.tc_keys[i];
		}
	return NULL;
}

static int
load_pubkey(struct cfctx *cx, const char *jp, const char *file, EVP_PKEY **out)
{
	unsigned char *buf;
	size_t len;
	BIO *bio;
	EVP_PKEY *pk;
	int fd;
	char why[512];

	if ((fd = open(file, O_RDONLY | O_CLOEXEC)) == -1)
		return cf_err(cx, jp, "public_key_file: %s: %s", file,
		    strerror(errno));
	if (read_file(file, fd, &buf, &len, why, sizeof(why)) == -1) {
		close(fd);
		return cf_err(cx, jp, "public_key_file: %s", why);
	}
	close(fd);
	if ((bio = BIO_new_mem_buf(buf, (int)len)) == NULL) {
		free(buf);
		return cf_err(cx, jp, "public_key_file: %s: out of memory",
		    file);
	}
	pk = PEM_read_bio_PUBKEY(bio, NULL, NULL, NULL);
	BIO_free(bio);
	free(buf);
	ERR_clear_error();
	if (pk == NULL)
		return cf_err(cx, jp,
		    "public_key_file: %s: not a PEM public key", file);
	if (EVP_PKEY_get_id(pk) != EVP_PKEY_ED25519) {
		EVP_PKEY_free(pk);
		return cf_err(cx, jp,
		    "public_key_file: %s: not an Ed25519 public key", file);
	}
	*out = pk;
	return 0;
}

static int
load_key(struct cfctx *cx, const char *jp, const cJSON *it, size_t i)
{
	static const char *const keys[] = { "kid", "alg", "secret_file",
		"public_key_file", "unlink_after_read", NULL };
	struct tokens_conf *tc = &cx->cf->cf_tokens;
	struct token_key *k = &tc->tc_keys[i];
	const char *kid = NULL, *alg = NULL, *secret = NULL, *pub = NULL;
	const struct token_key *old;
	size_t oldidx;
	int unlink_after = 0;
	char why[512];

	if (cf_keys(cx, jp, it, keys) == -1 ||
	    cf_str(cx, jp, it, "alg", 1, &alg) == -1 ||
	    cf_str(cx, jp, it, "kid", 0, &kid) == -1 ||
	    cf_str(cx, jp, it, "secret_file", 0, &secret) == -1 ||
	    cf_str(cx, jp, it, "public_key_file", 0, &pub) == -1 ||
	    cf_bool(cx, jp, it, "unlink_after_read", &unlink_after) == -1)
		return -1;
	if (kid != NULL) {
		if (strlen(kid) > TOKEN_MAX_STR)
			return cf_err(cx, jp, "kid: longer than %d bytes",
			    TOKEN_MAX_STR);
		snprintf(k->tk_kid, sizeof(k->tk_kid), "%s", kid);
	}
	if (strcmp(alg, "HS256") == 0) {
		k->tk_alg = TOKEN_ALG_HS256;
		if (secret == NULL || pub != NULL)
			return cf_err(cx, jp,
			    "an HS256 key takes \"secret_file\" (and no public_key_file)");
	} else if (strcmp(alg, "EdDSA") == 0) {
		k->tk_alg = TOKEN_ALG_EDDSA;
		if (pub == NULL || secret != NULL)
			return cf_err(cx, jp,
			    "an EdDSA key takes \"public_key_file\" (and no secret_file)");
	} else
		return cf_err(cx, jp, "alg: \"%s\" is not HS256 or EdDSA", alg);
	if ((tc->tc_key_files[i] =
		    cf_strdup(cx, jp, secret != NULL ? secret : pub)) == NULL)
		return -1;
	tc->tc_key_unlink[i] = unlink_after;

	/* A key read and unlinked by an earlier load stays in memory. */
	if (unlink_after && access(tc->tc_key_files[i], F_OK) == -1 &&
	    errno == ENOENT &&
	    (old = prev_key(cx->prev, tc->tc_key_files[i], &oldidx)) != NULL &&
	    old->tk_alg == k->tk_alg) {
		if (old->tk_secret != NULL) {
			if ((k->tk_secret = cf_calloc(cx, jp,
				 old->tk_secret_len, 1)) == NULL)
				return -1;
			memcpy(k->tk_secret, old->tk_secret,
			    old->tk_secret_len);
			k->tk_secret_len = old->tk_secret_len;
		}
		if (old->tk_pkey != NULL) {
			EVP_PKEY_up_ref(old->tk_pkey);
			k->tk_pkey = old->tk_pkey;
		}
		return 0;
	}
	if (k->tk_alg == TOKEN_ALG_HS256) {
		if (config_read_secret(secret, cx->cf->cf_uid, &k->tk_secret,
			&k->tk_secret_len, why, sizeof(why)) == -1)
			return cf_err(cx, jp, "secret_file: %s", why);
		if (k->tk_secret_len < 32)
			return cf_err(cx, jp,
			    "secret_file: %s: an HS256 secret needs at least 32 bytes",
			    secret);
	} else if (load_pubkey(cx, jp, pub, &k->tk_pkey) == -1)
		return -1;
	/* Removed by config_unlink_keys(), once "run" has it all loaded. */
	tc->tc_key_fresh[i] = unlink_after;
	return 0;
}

int
config_unlink_keys(struct config *cf, char *why, size_t whylen)
{
	struct tokens_conf *tc = &cf->cf_tokens;
	size_t i;
	int rc = 0;

	for (i = 0; i < tc->tc_nkeys; i++) {
		if (!tc->tc_key_unlink[i] || !tc->tc_key_fresh[i])
			continue;
		tc->tc_key_fresh[i] = 0;
		if (unlink(tc->tc_key_files[i]) == -1 && errno != ENOENT &&
		    rc == 0) {
			snprintf(why, whylen,
			    "%s: tokens.keys[%zu]: unlink_after_read: %s: %s",
			    cf->cf_path, i, tc->tc_key_files[i],
			    strerror(errno));
			rc = -1;
		}
	}
	return rc;
}

static int
load_tokens(struct cfctx *cx, const cJSON *root)
{
	static const char *const keys[] = { "issuer", "leeway_s", "max_ttl_s",
		"keys", "revoked_file", NULL };
	struct tokens_conf *tc = &cx->cf->cf_tokens;
	const cJSON *obj = cJSON_GetObjectItemCaseSensitive(root, "tokens");
	const cJSON *arr, *it;
	const char *issuer = NULL, *revoked = NULL;
	uint64_t leeway = 30, ttl = 3600;
	char jp[64], why[512];
	size_t i = 0, j;

	if (obj == NULL)
		return cf_err(cx, "", "missing \"tokens\"");
	if (cf_keys(cx, "tokens", obj, keys) == -1 ||
	    cf_str(cx, "tokens", obj, "issuer", 0, &issuer) == -1 ||
	    cf_str(cx, "tokens", obj, "revoked_file", 0, &revoked) == -1 ||
	    cf_uint(cx, "tokens", obj, "leeway_s", 0, 600, &leeway) == -1 ||
	    cf_uint(cx, "tokens", obj, "max_ttl_s", 1, 7 * (uint64_t)86400,
		&ttl) == -1)
		return -1;
	if (issuer != NULL && strlen(issuer) > TOKEN_MAX_STR)
		return cf_err(cx, "tokens.issuer", "longer than %d bytes",
		    TOKEN_MAX_STR);
	if (issuer != NULL &&
	    (tc->tc_issuer = cf_strdup(cx, "tokens.issuer", issuer)) == NULL)
		return -1;
	tc->tc_leeway_s = (int64_t)leeway;
	tc->tc_max_ttl_s = (int64_t)ttl;
	tc->tc_rules.issuer = tc->tc_issuer;
	tc->tc_rules.leeway_s = tc->tc_leeway_s;
	tc->tc_rules.max_ttl_s = tc->tc_max_ttl_s;

	arr = cJSON_GetObjectItemCaseSensitive(obj, "keys");
	if (arr == NULL)
		return cf_err(cx, "tokens", "missing \"keys\"");
	if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) == 0)
		return cf_err(cx, "tokens.keys", "must be a non-empty array");
	if (cJSON_GetArraySize(arr) > 32)
		return cf_err(cx, "tokens.keys", "more than 32 keys");
	j = (size_t)cJSON_GetArraySize(arr);
	if ((tc->tc_keys = cf_calloc(cx, "tokens.keys", j,
		 sizeof(*tc->tc_keys))) == NULL ||
	    (tc->tc_key_files = cf_calloc(cx, "tokens.keys", j,
		 sizeof(*tc->tc_key_files))) == NULL ||
	    (tc->tc_key_unlink = cf_calloc(cx, "tokens.keys", j,
		 sizeof(*tc->tc_key_unlink))) == NULL ||
	    (tc->tc_key_fresh = cf_calloc(cx, "tokens.keys", j,
		 sizeof(*tc->tc_key_fresh))) == NULL)
		return -1;
	tc->tc_nkeys = j;
	cJSON_ArrayForEach(it, arr) {
		cf_idx(jp, sizeof(jp), "tokens.keys", i);
		if (load_key(cx, jp, it, i) == -1)
			return -1;
		/* Without a kid a token could not say which key it uses. */
		if (tc->tc_nkeys > 1 && tc->tc_keys[i].tk_kid[0] == '\0')
			return cf_err(cx, jp,
			    "kid: required when there are several keys");
		for (j = 0; j < i; j++)
			if (strcmp(tc->tc_keys[j].tk_kid,
				tc->tc_keys[i].tk_kid) == 0)
				return cf_err(cx, jp,
				    "kid: also used by an earlier key");
		i++;
	}
	if (revoked != NULL) {
		if ((tc->tc_revoked_file = cf_strdup(cx, "tokens.revoked_file",
			 revoked)) == NULL)
			return -1;
		if (revocations_read_file(revoked, &cx->cf->cf_revoked,
			&cx->cf->cf_nrevoked, why, sizeof(why)) == -1)
			return cf_err(cx, "tokens.revoked_file", "%s", why);
	}
	return 0;
}

/* An injected header's name (at el): a token, not ours, not twice. */
static int
check_header_name(struct cfctx *cx, const char *el,
    const struct upstream_conf *uc, size_t i, const char *name)
{
	static const char *const forbidden[] = { "host", "content-length",
		"transfer-encoding", "connection", "keep-alive",
		"proxy-authorization", "proxy-connection", "te", "trailer",
		"upgrade", NULL };
	const char *p;
	size_t j, k;

	for (p = name; *p != '\0'; p++)
		if (!ascii_is_tchar((unsigned char)*p))
			return cf_err(cx, el,
			    "name: \"%s\" is not a field name", name);
	for (k = 0; forbidden[k] != NULL; k++)
		if (strcasecmp(name, forbidden[k]) == 0)
			return cf_err(cx, el,
			    "name: %s is set by sluice itself", name);
	for (j = 0; j < i; j++)
		if (strcasecmp(uc->uc_headers[j].uh_name, name) == 0)
			return cf_err(cx, el, "name: %s is already configured",
			    name);
	return 0;
}

/* Entry i of an upstream's "headers" (at el): its name and secret value. */
static int
load_header(struct cfctx *cx, const char *el, const cJSON *it,
    struct upstream_conf *uc, size_t i)
{
	static const char *const keys[] = { "name", "value_file", NULL };
	struct upstream_header *uh = &uc->uc_headers[i];
	const char *name = NULL, *file = NULL;
	char why[512];
	size_t k;

	if (cf_keys(cx, el, it, keys) == -1 ||
	    cf_str(cx, el, it, "name", 1, &name) == -1 ||
	    cf_str(cx, el, it, "value_file", 1, &file) == -1 ||
	    check_header_name(cx, el, uc, i, name) == -1)
		return -1;
	if ((uh->uh_name = cf_strdup(cx, el, name)) == NULL ||
	    (uh->uh_file = cf_strdup(cx, el, file)) == NULL)
		return -1;
	if (config_read_secret(file, cx->cf->cf_uid, &uh->uh_value,
		&uh->uh_value_len, why, sizeof(why)) == -1)
		return cf_err(cx, el, "value_file: %s", why);
	/* A CR, LF or other CTL would split or corrupt the head. */
	for (k = 0; k < uh->uh_value_len; k++) {
		unsigned char c = uh->uh_value[k];

		if ((c < 0x20 && c != '\t') || c == 0x7f)
			return cf_err(cx, el,
			    "value_file: %s: control byte at offset %zu", file,
			    k);
	}
	return 0;
}

static int
load_headers(struct cfctx *cx, const char *jp, const cJSON *up,
    struct upstream_conf *uc)
{
	const cJSON *arr = cJSON_GetObjectItemCaseSensitive(up, "headers");
	const cJSON *it;
	char sub[128], el[160];
	size_t i = 0;

	if (arr == NULL)
		return 0;
	cf_sub(sub, sizeof(sub), jp, "headers");
	if (!cJSON_IsArray(arr))
		return cf_err(cx, sub, "must be an array");
	if (cJSON_GetArraySize(arr) > 32)
		return cf_err(cx, sub, "more than 32 headers");
	if ((uc->uc_headers = cf_calloc(cx, sub,
		 (size_t)cJSON_GetArraySize(arr), sizeof(*uc->uc_headers))) ==
	    NULL)
		return -1;
	uc->uc_nheaders = (size_t)cJSON_GetArraySize(arr);
	cJSON_ArrayForEach(it, arr) {
		cf_idx(el, sizeof(el), sub, i);
		if (load_header(cx, el, it, uc, i) == -1)
			return -1;
		i++;
	}
	return 0;
}

/* host (brackets around an IPv6 literal) and port if with_port, in buf. */
static void
upstream_hostport(char *buf, size_t len, const struct uri *u, const char *host,
    int with_port)
{
	const char *lb = u->host_type == URI_HOST_V6 ? "[" : "";
	const char *rb = u->host_type == URI_HOST_V6 ? "]" : "";

	if (with_port)
		snprintf(buf, len, "%s%s%s:%u", lb, host, rb, u->port);
	else
		snprintf(buf, len, "%s%s%s", lb, host, rb);
}

/*
 * The upstream's "url" (at sub): an absolute http(s) URL without a query,
 * into scheme, host, port, authority and path (no trailing '/'); an IP
 * literal must not be private unless allow_private.
 */
static int
load_upstream_url(struct cfctx *cx, const char *sub, const char *url,
    struct upstream_conf *uc)
{
	const char *uwhy = "invalid";
	char auth[300];
	struct uri u;

	if ((uc->uc_url = cf_strdup(cx, sub, url)) == NULL)
		return -1;
	memset(&u, 0, sizeof(u));
	if (uri_parse_target(url, strlen(url), 0, &u, &uwhy) == -1 ||
	    u.form != URI_ABSOLUTE)
		return cf_err(cx, sub, "\"%s\" is not an absolute URL (%s)",
		    url, u.form != URI_ABSOLUTE ? "need scheme://host" : uwhy);
	if (u.query != NULL)
		return cf_err(cx, sub, "a query string is not allowed");
	if (!u.https && !uc->uc_allow_plaintext)
		return cf_err(cx, sub,
		    "scheme must be https (or set allow_plaintext)");
	uc->uc_https = u.https;
	if ((uc->uc_host = cf_calloc(cx, sub, u.host_len + 1, 1)) == NULL)
		return -1;
	memcpy(uc->uc_host, u.host, u.host_len);
	lower(uc->uc_host);
	uc->uc_host_is_ip = u.host_type != URI_HOST_NAME;
	uc->uc_port = u.port;
	/* The Host value sent upstream: the URL's authority as written. */
	upstream_hostport(auth, sizeof(auth), &u, uc->uc_host, u.has_port);
	if ((uc->uc_authority = cf_strdup(cx, sub, auth)) == NULL ||
	    (uc->uc_path = cf_calloc(cx, sub, u.path_len + 1, 1)) == NULL)
		return -1;
	memcpy(uc->uc_path, u.path, u.path_len);
	while (strlen(uc->uc_path) > 0 &&
	    uc->uc_path[strlen(uc->uc_path) - 1] == '/')
		uc->uc_path[strlen(uc->uc_path) - 1] = '\0';
	if (uc->uc_host_is_ip && !uc->uc_allow_private) {
		struct sockaddr_storage ss;
		socklen_t sl;
		char lit[300];

		upstream_hostport(lit, sizeof(lit), &u, uc->uc_host, 1);
		if (parse_listen(lit, &ss, &sl) == 0 &&
		    addr_private((struct sockaddr *)&ss))
			return cf_err(cx, sub,
			    "%s is a private address (set allow_private)",
			    uc->uc_host);
	}
	return 0;
}

/*
 * The upstream's TLS (at jp): its pins, its CA file and the client
 * context; both need an https URL.
 */
static int
load_upstream_tls(struct cfctx *cx, const char *jp, const cJSON *up,
    const char *ca, struct upstream_conf *uc)
{
	char sub[128], why[512];
	char **pins = NULL;
	size_t npins = 0, i;

	if (cf_strlist(cx, jp, up, "pin_sha256", &pins, &npins, NULL) == -1)
		return -1;
	if ((uc->uc_pins = cf_calloc(cx, jp, npins, sizeof(*uc->uc_pins))) ==
	    NULL) {
		strlist_free(pins, npins);
		return -1;
	}
	uc->uc_npins = npins;
	for (i = 0; i < npins; i++) {
		char el[160];

		cf_sub(el, sizeof(el), jp, "pin_sha256");
		snprintf(el + strlen(el), sizeof(el) - strlen(el), "[%zu]", i);
		if (certs_pin_decode(pins[i], uc->uc_pins[i], why,
			sizeof(why)) == -1) {
			strlist_free(pins, npins);
			return cf_err(cx, el, "%s", why);
		}
	}
	strlist_free(pins, npins);
	if (!uc->uc_https && (npins > 0 || ca != NULL))
		return cf_err(cx, jp,
		    "ca_file and pin_sha256 need an https URL");
	if (ca != NULL && (uc->uc_ca_file = cf_strdup(cx, jp, ca)) == NULL)
		return -1;
	if (uc->uc_https) {
		uc->uc_ssl_ctx = certs_client_ctx(ca, why, sizeof(why));
		if (uc->uc_ssl_ctx == NULL) {
			cf_sub(sub, sizeof(sub), jp,
			    ca != NULL ? "ca_file" : "url");
			return cf_err(cx, sub, "%s%s%s", ca != NULL ? ca : "",
			    ca != NULL ? ": " : "", why);
		}
	}
	return 0;
}

static int
load_upstream(struct cfctx *cx, const char *rjp, const cJSON *r,
    struct upstream_conf *uc)
{
	static const char *const keys[] = { "url", "ca_file", "pin_sha256",
		"allow_private", "allow_plaintext", "headers", NULL };
	const cJSON *up = cJSON_GetObjectItemCaseSensitive(r, "upstream");
	const char *url = NULL, *ca = NULL;
	char jp[96], sub[128];

	cf_sub(jp, sizeof(jp), rjp, "upstream");
	if (up == NULL)
		return cf_err(cx, rjp, "missing \"upstream\"");
	if (cf_keys(cx, jp, up, keys) == -1 ||
	    cf_str(cx, jp, up, "url", 1, &url) == -1 ||
	    cf_str(cx, jp, up, "ca_file", 0, &ca) == -1 ||
	    cf_bool(cx, jp, up, "allow_private", &uc->uc_allow_private) == -1 ||
	    cf_bool(cx, jp, up, "allow_plaintext", &uc->uc_allow_plaintext) ==
		-1)
		return -1;
	cf_sub(sub, sizeof(sub), jp, "url");
	if (load_upstream_url(cx, sub, url, uc) == -1 ||
	    load_upstream_tls(cx, jp, up, ca, uc) == -1)
		return -1;
	return load_headers(cx, jp, up, uc);
}

static int
load_route(struct cfctx *cx, const char *jp, const cJSON *it, struct route *rt)
{
	static const char *const keys[] = { "audience", "hosts", "methods",
		"path_prefixes", "max_requests_per_token", "connect",
		"upstream", NULL };
	static const char *const ckeys[] = { "enabled", "intercept", NULL };
	const char *aud = NULL, *p;
	const cJSON *conn;
	char sub[96];
	size_t dup;

	if (cf_keys(cx, jp, it, keys) == -1 ||
	    cf_str(cx, jp, it, "audience", 1, &aud) == -1 ||
	    cf_uint(cx, jp, it, "max_requests_per_token", 0, UINT32_MAX,
		&rt->rt_max_requests) == -1)
		return -1;
	if (strlen(aud) > TOKEN_MAX_STR)
		return cf_err(cx, jp, "audience: longer than %d bytes",
		    TOKEN_MAX_STR);
	for (p = aud; *p != '\0'; p++)
		if ((unsigned char)*p <= 0x20 || *p == 0x7f)
			return cf_err(cx, jp,
			    "audience: no spaces or control characters");
	if ((rt->rt_audience = cf_strdup(cx, jp, aud)) == NULL)
		return -1;
	if (cf_strlist(cx, jp, it, "hosts", &rt->rt_hosts, &rt->rt_nhosts,
		check_host) == -1 ||
	    cf_strlist(cx, jp, it, "methods", &rt->rt_methods, &rt->rt_nmethods,
		check_method) == -1 ||
	    cf_strlist(cx, jp, it, "path_prefixes", &rt->rt_prefixes,
		&rt->rt_nprefixes, check_prefix) == -1)
		return -1;
	/* Defaults: the model APIs are POST, and every path is allowed. */
	if (rt->rt_methods == NULL) {
		if ((rt->rt_methods = cf_calloc(cx, jp, 2, sizeof(char *))) ==
			NULL ||
		    (rt->rt_methods[0] = cf_strdup(cx, jp, "POST")) == NULL)
			return -1;
		rt->rt_nmethods = 1;
	}
	if (rt->rt_prefixes == NULL) {
		if ((rt->rt_prefixes = cf_calloc(cx, jp, 2, sizeof(char *))) ==
			NULL ||
		    (rt->rt_prefixes[0] = cf_strdup(cx, jp, "/")) == NULL)
			return -1;
		rt->rt_nprefixes = 1;
	}
	if (rt->rt_nmethods == 0)
		return cf_err(cx, jp, "methods: must not be empty");
	if (rt->rt_nprefixes == 0)
		return cf_err(cx, jp, "path_prefixes: must not be empty");
	for (dup = 0; dup < rt->rt_nhosts; dup++)
		normalize_host(rt->rt_hosts[dup]);
	if (has_dup(rt->rt_hosts, rt->rt_nhosts, &dup))
		return cf_err(cx, jp, "hosts[%zu]: listed twice", dup);
	if (has_dup(rt->rt_methods, rt->rt_nmethods, &dup))
		return cf_err(cx, jp, "methods[%zu]: listed twice", dup);

	conn = cJSON_GetObjectItemCaseSensitive(it, "connect");
	if (conn != NULL) {
		cf_sub(sub, sizeof(sub), jp, "connect");
		if (cf_keys(cx, sub, conn, ckeys) == -1 ||
		    cf_bool(cx, sub, conn, "enabled", &rt->rt_connect) == -1 ||
		    cf_bool(cx, sub, conn, "intercept", &rt->rt_intercept) ==
			-1)
			return -1;
		if (rt->rt_intercept)
			return cf_err(cx, sub,
			    "intercept: not supported by this version");
	}
	return load_upstream(cx, jp, it, &rt->rt_up);
}

static int
in_list(char *const *list, size_t n, const char *s)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (strcmp(list[i], s) == 0)
			return 1;
	return 0;
}

/*
 * A forward request selects its route by host (DESIGN.md "Requests and
 * routing"). Routes may share an upstream (the token's audience picks
 * among them), but an alias in hosts selects exactly one route: it may be
 * neither another route's alias nor another route's upstream host.
 */
static int
route_overlap(struct cfctx *cx, const char *jp, const struct route *rt,
    const struct route *o, size_t oidx)
{
	size_t h;

	for (h = 0; h < rt->rt_nhosts; h++)
		if (in_list(o->rt_hosts, o->rt_nhosts, rt->rt_hosts[h]) ||
		    strcmp(rt->rt_hosts[h], o->rt_up.uc_host) == 0)
			return cf_err(cx, jp,
			    "hosts[%zu]: \"%s\" also selects routes[%zu]", h,
			    rt->rt_hosts[h], oidx);
	if (in_list(o->rt_hosts, o->rt_nhosts, rt->rt_up.uc_host))
		return cf_err(cx, jp,
		    "upstream.url: %s is listed in routes[%zu].hosts",
		    rt->rt_up.uc_host, oidx);
	return 0;
}

static int
load_routes(struct cfctx *cx, const cJSON *root)
{
	struct config *cf = cx->cf;
	const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "routes");
	const cJSON *it;
	char jp[64];
	size_t i = 0, j;

	if (arr == NULL)
		return cf_err(cx, "", "missing \"routes\"");
	if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) == 0)
		return cf_err(cx, "routes", "must be a non-empty array");
	if (cJSON_GetArraySize(arr) > 256)
		return cf_err(cx, "routes", "more than 256 routes");
	if ((cf->cf_routes = cf_calloc(cx, "routes",
		 (size_t)cJSON_GetArraySize(arr), sizeof(*cf->cf_routes))) ==
	    NULL)
		return -1;
	cf->cf_nroutes = (size_t)cJSON_GetArraySize(arr);
	cJSON_ArrayForEach(it, arr) {
		struct route *rt = &cf->cf_routes[i];

		cf_idx(jp, sizeof(jp), "routes", i);
		if (load_route(cx, jp, it, rt) == -1)
			return -1;
		for (j = 0; j < i; j++) {
			const struct route *o = &cf->cf_routes[j];

			if (strcmp(o->rt_audience, rt->rt_audience) == 0)
				return cf_err(cx, jp,
				    "audience: \"%s\" is used by routes[%zu]",
				    rt->rt_audience, j);
			if (route_overlap(cx, jp, rt, o, j) == -1)
				return -1;
		}
		i++;
	}
	return 0;
}

static int
load_limits(struct cfctx *cx, const cJSON *root)
{
	static const char *const keys[] = { "max_header_bytes", "max_headers",
		"max_body_bytes", "max_connections", "header_timeout_ms",
		"idle_timeout_ms", "connect_timeout_ms",
		"upstream_response_timeout_ms", "drain_timeout_ms",
		"per_client_connections", "per_client_refusals_per_s", NULL };
	struct limits *l = &cx->cf->cf_limits;
	const cJSON *obj = cJSON_GetObjectItemCaseSensitive(root, "limits");
	const char *jp = "limits";

	l->max_header_bytes = 16384;
	l->max_headers = 100;
	l->max_body_bytes = (uint64_t)32 * 1024 * 1024;
	l->max_connections = 4096;
	l->header_timeout_ms = 10000;
	l->idle_timeout_ms = 60000;
	l->connect_timeout_ms = 5000;
	l->upstream_response_timeout_ms = 300000;
	l->drain_timeout_ms = 10000;
	l->per_client_connections = 256;
	l->per_client_refusals_per_s = 20;
	if (obj == NULL)
		return 0;
	if (cf_keys(cx, jp, obj, keys) == -1 ||
	    cf_uint(cx, jp, obj, "max_header_bytes", 1024,
		(uint64_t)1024 * 1024, &l->max_header_bytes) == -1 ||
	    cf_uint(cx, jp, obj, "max_headers", 8, 1000, &l->max_headers) ==
		-1 ||
	    cf_uint(cx, jp, obj, "max_body_bytes", 0, (uint64_t)1 << 50,
		&l->max_body_bytes) == -1 ||
	    cf_uint(cx, jp, obj, "max_connections", 1, 1000000,
		&l->max_connections) == -1 ||
	    cf_uint(cx, jp, obj, "header_timeout_ms", 100, 3600000,
		&l->header_timeout_ms) == -1 ||
	    cf_uint(cx, jp, obj, "idle_timeout_ms", 100, 86400000,
		&l->idle_timeout_ms) == -1 ||
	    cf_uint(cx, jp, obj, "connect_timeout_ms", 100, 600000,
		&l->connect_timeout_ms) == -1 ||
	    cf_uint(cx, jp, obj, "upstream_response_timeout_ms", 100, 86400000,
		&l->upstream_response_timeout_ms) == -1 ||
	    cf_uint(cx, jp, obj, "drain_timeout_ms", 0, 3600000,
		&l->drain_timeout_ms) == -1 ||
	    cf_uint(cx, jp, obj, "per_client_connections", 1, 1000000,
		&l->per_client_connections) == -1 ||
	    cf_uint(cx, jp, obj, "per_client_refusals_per_s", 0, 1000000,
		&l->per_client_refusals_per_s) == -1)
		return -1;
	return 0;
}

static int
load_audit(struct cfctx *cx, const cJSON *root)
{
	static const char *const keys[] = { "path", "fsync", "chain",
		"on_error", NULL };
	struct audit_conf *ac = &cx->cf->cf_audit;
	const cJSON *obj = cJSON_GetObjectItemCaseSensitive(root, "audit");
	const char *path = "/var/log/sluice/audit.jsonl", *fs = NULL;
	const char *onerr = NULL;

	ac->ac_chain = 1;
	if (obj != NULL &&
	    (cf_keys(cx, "audit", obj, keys) == -1 ||
		cf_str(cx, "audit", obj, "path", 0, &path) == -1 ||
		cf_str(cx, "audit", obj, "fsync", 0, &fs) == -1 ||
		cf_str(cx, "audit", obj, "on_error", 0, &onerr) == -1 ||
		cf_bool(cx, "audit", obj, "chain", &ac->ac_chain) == -1))
		return -1;
	if (path[0] != '/')
		return cf_err(cx, "audit.path", "must be an absolute path");
	if ((ac->ac_path = cf_strdup(cx, "audit.path", path)) == NULL)
		return -1;
	if (fs == NULL || strcmp(fs, "interval") == 0)
		ac->ac_fsync = AUDIT_FSYNC_INTERVAL;
	else if (strcmp(fs, "always") == 0)
		ac->ac_fsync = AUDIT_FSYNC_ALWAYS;
	else if (strcmp(fs, "never") == 0)
		ac->ac_fsync = AUDIT_FSYNC_NEVER;
	else
		return cf_err(cx, "audit.fsync",
		    "\"%s\" is not always, interval or never", fs);
	if (onerr == NULL || strcmp(onerr, "deny") == 0)
		ac->ac_on_error_allow = 0;
	else if (strcmp(onerr, "allow") == 0)
		ac->ac_on_error_allow = 1;
	else
		return cf_err(cx, "audit.on_error",
		    "\"%s\" is not deny or allow", onerr);
	return 0;
}

static int
load_netpolicy(struct cfctx *cx, const cJSON *root)
{
	static const char *const keys[] = { "mode", "table", "allow_loopback",
		"resolvers", "log_group", "sandbox_interfaces", "flush_on_exit",
		NULL };
	struct netpolicy_conf *np = &cx->cf->cf_np;
	const cJSON *obj = cJSON_GetObjectItemCaseSensitive(root, "netpolicy");
	const char *mode = NULL, *table = "sluice", *p;
	uint64_t group = 7;
	size_t dup;

	np->np_allow_loopback = 1;
	if (obj != NULL &&
	    (cf_keys(cx, "netpolicy", obj, keys) == -1 ||
		cf_str(cx, "netpolicy", obj, "mode", 0, &mode) == -1 ||
		cf_str(cx, "netpolicy", obj, "table", 0, &table) == -1 ||
		cf_bool(cx, "netpolicy", obj, "allow_loopback",
		    &np->np_allow_loopback) == -1 ||
		cf_bool(cx, "netpolicy", obj, "flush_on_exit",
		    &np->np_flush_on_exit) == -1 ||
		cf_uint(cx, "netpolicy", obj, "log_group", 0, 65535, &group) ==
		    -1 ||
		cf_strlist(cx, "netpolicy", obj, "resolvers", &np->np_resolvers,
		    &np->np_nresolvers, check_ip) == -1 ||
		cf_strlist(cx, "netpolicy", obj, "sandbox_interfaces",
		    &np->np_ifaces, &np->np_nifaces, check_iface) == -1))
		return -1;
	/* The secure default: kernel rules on, as a sidecar. */
	if (mode == NULL || strcmp(mode, "sidecar") == 0)
		np->np_mode = NETPOLICY_SIDECAR;
	else if (strcmp(mode, "gateway") == 0)
		np->np_mode = NETPOLICY_GATEWAY;
	else if (strcmp(mode, "off") == 0)
		np->np_mode = NETPOLICY_OFF;
	else
		return cf_err(cx, "netpolicy.mode",
		    "\"%s\" is not sidecar, gateway or off", mode);
	if (strlen(table) >= sizeof(np->np_table))
		return cf_err(cx, "netpolicy.table", "longer than %zu bytes",
		    sizeof(np->np_table) - 1);
	for (p = table; *p != '\0'; p++)
		if (!(isalnum((unsigned char)*p) || *p == '_' || *p == '-'))
			return cf_err(cx, "netpolicy.table",
			    "\"%s\": letters, digits, '_' and '-' only", table);
	snprintf(np->np_table, sizeof(np->np_table), "%s", table);
	np->np_log_group = (uint16_t)group;
	if (np->np_ifaces == NULL) {
		if ((np->np_ifaces = cf_calloc(cx, "netpolicy", 2,
			 sizeof(char *))) == NULL ||
		    (np->np_ifaces[0] = cf_strdup(cx, "netpolicy", "sbx-*")) ==
			NULL)
			return -1;
		np->np_nifaces = 1;
	}
	if (has_dup(np->np_resolvers, np->np_nresolvers, &dup))
		return cf_err(cx, "netpolicy.resolvers",
		    "entry %zu listed twice", dup);
	/*
	 * The sidecar rules let exactly one uid out; it must not be root
	 * (root can rewrite the rules) nor be left to chance.
	 */
	if (np->np_mode == NETPOLICY_SIDECAR) {
		if (cx->cf->cf_user == NULL)
			return cf_err(cx, "user",
			    "required in sidecar mode (the uid the kernel rules let out)");
		if (cx->cf->cf_uid == 0)
			return cf_err(cx, "user",
			    "must not be root in sidecar mode");
	}
	/*
	 * In gateway mode sluice sits in the host's namespace and parses
	 * what sandboxes send: it must not do that as root.
	 */
	if (np->np_mode == NETPOLICY_GATEWAY &&
	    (cx->cf->cf_user == NULL || cx->cf->cf_uid == 0))
		return cf_err(cx, "user",
		    "required and not root in gateway mode");
	return 0;
}

static int
load_misc(struct cfctx *cx, const cJSON *root)
{
	static const char *const akeys[] = { "socket", NULL };
	static const char *const mkeys[] = { "listen", NULL };
	struct config *cf = cx->cf;
	const cJSON *admin = cJSON_GetObjectItemCaseSensitive(root, "admin");
	const cJSON *met = cJSON_GetObjectItemCaseSensitive(root, "metrics");
	const char *sock = NULL, *listen = NULL, *sd = "/var/lib/sluice";
	const char *ready = NULL;

	if (admin != NULL &&
	    (cf_keys(cx, "admin", admin, akeys) == -1 ||
		cf_str(cx, "admin", admin, "socket", 0, &sock) == -1))
		return -1;
	if (met != NULL &&
	    (cf_keys(cx, "metrics", met, mkeys) == -1 ||
		cf_str(cx, "metrics", met, "listen", 0, &listen) == -1))
		return -1;
	if (cf_str(cx, "", root, "state_dir", 0, &sd) == -1 ||
	    cf_str(cx, "", root, "ready_file", 0, &ready) == -1)
		return -1;
	if (sock != NULL) {
		if (sock[0] != '/')
			return cf_err(cx, "admin.socket",
			    "must be an absolute path");
		if (strlen(sock) >= sizeof(((struct sockaddr_un *)0)->sun_path))
			return cf_err(cx, "admin.socket", "path too long");
		if ((cf->cf_admin_socket =
			    cf_strdup(cx, "admin.socket", sock)) == NULL)
			return -1;
	}
	if (listen != NULL) {
		struct sockaddr_storage ss;
		socklen_t sl;

		if (strncmp(listen, "unix:", 5) == 0) {
			if (listen[5] != '/' || strlen(listen + 5) >= 108)
				return cf_err(cx, "metrics.listen",
				    "unix: needs an absolute path under 108 bytes");
		} else if (parse_listen(listen, &ss, &sl) == -1)
			return cf_err(cx, "metrics.listen",
			    "\"%s\" is not IP:PORT, [IPv6]:PORT or unix:/path",
			    listen);
		if ((cf->cf_metrics_listen =
			    cf_strdup(cx, "metrics.listen", listen)) == NULL)
			return -1;
	}
	if (sd[0] != '/')
		return cf_err(cx, "state_dir", "must be an absolute path");
	if ((cf->cf_state_dir = cf_strdup(cx, "state_dir", sd)) == NULL)
		return -1;
	if (ready != NULL) {
		if (ready[0] != '/')
			return cf_err(cx, "ready_file",
			    "must be an absolute path");
		if ((cf->cf_ready_file = cf_strdup(cx, "ready_file", ready)) ==
		    NULL)
			return -1;
	}
	return 0;
}

/*
 * In sidecar mode the kernel lets sluice reach only the listed resolvers:
 * an upstream named by host name needs at least one.
 */
static int
check_resolvers(struct cfctx *cx)
{
	const struct config *cf = cx->cf;
	size_t i;

	if (cf->cf_np.np_mode != NETPOLICY_SIDECAR || cf->cf_np.np_nresolvers)
		return 0;
	for (i = 0; i < cf->cf_nroutes; i++)
		if (!cf->cf_routes[i].rt_up.uc_host_is_ip)
			return cf_err(cx, "netpolicy.resolvers",
			    "required in sidecar mode: routes[%zu] names its upstream by host name (%s)",
			    i, cf->cf_routes[i].rt_up.uc_host);
	return 0;
}

static int
link_listeners(struct cfctx *cx)
{
	struct config *cf = cx->cf;
	size_t i, j;
	char jp[64];

	for (i = 0; i < cf->cf_nlisteners; i++) {
		struct listener_conf *lc = &cf->cf_listeners[i];

		if (lc->lc_type != LISTENER_REVERSE)
			continue;
		for (j = 0; j < cf->cf_nroutes; j++)
			if (strcmp(cf->cf_routes[j].rt_audience,
				lc->lc_route) == 0)
				break;
		if (j == cf->cf_nroutes) {
			cf_idx(jp, sizeof(jp), "listeners", i);
			return cf_err(cx, jp,
			    "route: no route has audience \"%s\"",
			    lc->lc_route);
		}
		lc->lc_route_idx = j;
	}
	return 0;
}

/* Line and column of a byte offset, for JSON syntax errors. */
static void
line_col(const char *buf, size_t off, unsigned *line, unsigned *col)
{
	size_t i;

	*line = 1;
	*col = 1;
	for (i = 0; i < off; i++) {
		if (buf[i] == '\n') {
			(*line)++;
			*col = 1;
		} else
			(*col)++;
	}
}

/*
 * Offset of the first "\u0000" escape inside a JSON string, or len. cJSON
 * turns it into a NUL that ends the C string: "a\u0000b" would load as
 * "a" (a host or path quietly shortened), so such a policy is refused.
 */
static size_t
nul_escape_at(const unsigned char *p, size_t len)
{
	size_t i;
	int in_str = 0;

	for (i = 0; i < len; i++) {
		if (!in_str) {
			in_str = p[i] == '"';
			continue;
		}
		if (p[i] == '"')
			in_str = 0;
		else if (p[i] == '\\' && i + 1 < len) {
			if (p[i + 1] == 'u' && i + 5 < len &&
			    memcmp(p + i + 2, "0000", 4) == 0)
				return i;
			i++; /* the escaped character */
		}
	}
	return len;
}

struct config *
config_load(const char *path, const struct config *prev, char *why,
    size_t whylen)
{
	static const char *const keys[] = { "user", "listeners", "tokens",
		"routes", "limits", "audit", "netpolicy", "admin", "metrics",
		"state_dir", "ready_file", NULL };
	struct cfctx cx = { path, why, whylen, prev, NULL };
	unsigned char *buf;
	size_t len;
	cJSON *root;
	const char *end = NULL;
	size_t nul;
	int fd;

	config_allocs = 0;
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1) {
		snprintf(why, whylen, "%s: %s", path, strerror(errno));
		return NULL;
	}
	if (read_file(path, fd, &buf, &len, why, whylen) == -1) {
		close(fd);
		return NULL;
	}
	close(fd);
	if (memchr(buf, '\0', len) != NULL) {
		snprintf(why, whylen, "%s: NUL byte at offset %zu", path,
		    (size_t)((unsigned char *)memchr(buf, '\0', len) - buf));
		free(buf);
		return NULL;
	}
	if ((nul = nul_escape_at(buf, len)) != len) {
		unsigned line, col;

		line_col((const char *)buf, nul, &line, &col);
		snprintf(why, whylen,
		    "%s: \\u0000 in a string at line %u column %u (a NUL would "
		    "silently cut it short)",
		    path, line, col);
		free(buf);
		return NULL;
	}
	/* len + 1: cJSON wants to see the terminating NUL read_file added. */
	root = cJSON_ParseWithLengthOpts((const char *)buf, len + 1, &end, 1);
	if (root == NULL) {
		unsigned line, col;
		size_t off =
		    end != NULL ? (size_t)(end - (const char *)buf) : len;

		if (off > len)
			off = len;
		line_col((const char *)buf, off, &line, &col);
		snprintf(why, whylen, "%s: invalid JSON at line %u column %u",
		    path, line, col);
		free(buf);
		return NULL;
	}
	if ((cx.cf = cf_calloc(&cx, "", 1, sizeof(*cx.cf))) == NULL) {
		cJSON_Delete(root);
		free(buf);
		return NULL;
	}
	cx.cf->cf_refs = 1;
	SHA256(buf, len, cx.cf->cf_sha256);
	free(buf);
	if ((cx.cf->cf_path = cf_strdup(&cx, "", path)) == NULL) {
		cJSON_Delete(root);
		config_unref(cx.cf);
		return NULL;
	}

	if (cf_keys(&cx, "", root, keys) == -1 || load_user(&cx, root) == -1 ||
	    load_listeners(&cx, root) == -1 || load_limits(&cx, root) == -1 ||
	    load_audit(&cx, root) == -1 || load_netpolicy(&cx, root) == -1 ||
	    load_misc(&cx, root) == -1 || load_routes(&cx, root) == -1 ||
	    link_listeners(&cx) == -1 || check_resolvers(&cx) == -1 ||
	    load_tokens(&cx, root) == -1) {
		cJSON_Delete(root);
		config_unref(cx.cf);
		return NULL;
	}
	cJSON_Delete(root);
	cx.cf->cf_gen = ++config_generation;
	return cx.cf;
}

struct config *
config_ref(struct config *cf)
{
	cf->cf_refs++;
	return cf;
}

static void
upstream_conf_free(struct upstream_conf *uc)
{
	size_t i;

	free(uc->uc_url);
	free(uc->uc_host);
	free(uc->uc_authority);
	free(uc->uc_path);
	free(uc->uc_ca_file);
	free(uc->uc_pins);
	for (i = 0; i < uc->uc_nheaders; i++) {
		struct upstream_header *uh = &uc->uc_headers[i];

		free(uh->uh_name);
		free(uh->uh_file);
		if (uh->uh_value != NULL) {
			explicit_bzero(uh->uh_value, uh->uh_value_len);
			free(uh->uh_value);
		}
	}
	free(uc->uc_headers);
	SSL_CTX_free(uc->uc_ssl_ctx);
}

void
config_unref(struct config *cf)
{
	size_t i;

	if (cf == NULL || --cf->cf_refs > 0)
		return;
	for (i = 0; i < cf->cf_nroutes; i++) {
		struct route *rt = &cf->cf_routes[i];

		free(rt->rt_audience);
		strlist_free(rt->rt_hosts, rt->rt_nhosts);
		strlist_free(rt->rt_methods, rt->rt_nmethods);
		strlist_free(rt->rt_prefixes, rt->rt_nprefixes);
		upstream_conf_free(&rt->rt_up);
	}
	free(cf->cf_routes);
	for (i = 0; i < cf->cf_tokens.tc_nkeys; i++) {
		struct token_key *k = &cf->cf_tokens.tc_keys[i];

		if (k->tk_secret != NULL) {
			explicit_bzero(k->tk_secret, k->tk_secret_len);
			free(k->tk_secret);
		}
		EVP_PKEY_free(k->tk_pkey);
		if (cf->cf_tokens.tc_key_files != NULL)
			free(cf->cf_tokens.tc_key_files[i]);
	}
	free(cf->cf_tokens.tc_keys);
	free(cf->cf_tokens.tc_key_files);
	free(cf->cf_tokens.tc_key_unlink);
	free(cf->cf_tokens.tc_key_fresh);
	free(cf->cf_tokens.tc_issuer);
	free(cf->cf_tokens.tc_revoked_file);
	strlist_free(cf->cf_revoked, cf->cf_nrevoked);
	free(cf->cf_listeners);
	free(cf->cf_audit.ac_path);
	strlist_free(cf->cf_np.np_resolvers, cf->cf_np.np_nresolvers);
	strlist_free(cf->cf_np.np_ifaces, cf->cf_np.np_nifaces);
	free(cf->cf_admin_socket);
	free(cf->cf_metrics_listen);
	free(cf->cf_state_dir);
	free(cf->cf_ready_file);
	free(cf->cf_user);
	free(cf->cf_path);
	free(cf);
}

const struct route *
config_route(const struct config *cf, const char *aud)
{
	size_t i;

	for (i = 0; i < cf->cf_nroutes; i++)
		if (strcmp(cf->cf_routes[i].rt_audience, aud) == 0)
			return &cf->cf_routes[i];
	return NULL;
}

/*
 * Printing the normalized policy.
 */
static cJSON *
strarray(char *const *list, size_t n)
{
	cJSON *a = cJSON_CreateArray();
	size_t i;

	for (i = 0; i < n; i++)
		cJSON_AddItemToArray(a, cJSON_CreateString(list[i]));
	return a;
}

static cJSON *
print_route(const struct route *rt)
{
	const struct upstream_conf *uc = &rt->rt_up;
	cJSON *r = cJSON_CreateObject(), *c, *u, *pins, *hdrs;
	size_t i;

	cJSON_AddStringToObject(r, "audience", rt->rt_audience);
	cJSON_AddItemToObject(r, "hosts",
	    strarray(rt->rt_hosts, rt->rt_nhosts));
	cJSON_AddItemToObject(r, "methods",
	    strarray(rt->rt_methods, rt->rt_nmethods));
	cJSON_AddItemToObject(r, "path_prefixes",
	    strarray(rt->rt_prefixes, rt->rt_nprefixes));
	cJSON_AddNumberToObject(r, "max_requests_per_token",
	    (double)rt->rt_max_requests);
	c = cJSON_AddObjectToObject(r, "connect");
	cJSON_AddBoolToObject(c, "enabled", rt->rt_connect);
	cJSON_AddBoolToObject(c, "intercept", rt->rt_intercept);
	u = cJSON_AddObjectToObject(r, "upstream");
	cJSON_AddStringToObject(u, "url", uc->uc_url);
	if (uc->uc_ca_file != NULL)
		cJSON_AddStringToObject(u, "ca_file", uc->uc_ca_file);
	else
		cJSON_AddNullToObject(u, "ca_file");
	pins = cJSON_AddArrayToObject(u, "pin_sha256");
	for (i = 0; i < uc->uc_npins; i++) {
		unsigned char b64[48];

		EVP_EncodeBlock(b64, uc->uc_pins[i], 32);
		cJSON_AddItemToArray(pins, cJSON_CreateString((char *)b64));
	}
	cJSON_AddBoolToObject(u, "allow_private", uc->uc_allow_private);
	cJSON_AddBoolToObject(u, "allow_plaintext", uc->uc_allow_plaintext);
	hdrs = cJSON_AddArrayToObject(u, "headers");
	for (i = 0; i < uc->uc_nheaders; i++) {
		cJSON *h = cJSON_CreateObject();

		/* The value is secret: only the file it came from is shown. */
		cJSON_AddStringToObject(h, "name", uc->uc_headers[i].uh_name);
		cJSON_AddStringToObject(h, "value_file",
		    uc->uc_headers[i].uh_file);
		cJSON_AddItemToArray(hdrs, h);
	}
	return r;
}

static void
add_str_or_null(cJSON *o, const char *k, const char *v)
{
	if (v != NULL)
		cJSON_AddStringToObject(o, k, v);
	else
		cJSON_AddNullToObject(o, k);
}

void
config_print(const struct config *cf, FILE *f)
{
	static const char *const fsyncs[] = { "interval", "always", "never" };
	static const char *const modes[] = { "off", "sidecar", "gateway" };
	const struct limits *l = &cf->cf_limits;
	cJSON *root = cJSON_CreateObject(), *a, *o;
	char hex[65], *out;
	size_t i;

	for (i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", cf->cf_sha256[i]);
	cJSON_AddStringToObject(root, "sha256", hex);
	add_str_or_null(root, "user", cf->cf_user);
	a = cJSON_AddArrayToObject(root, "listeners");
	for (i = 0; i < cf->cf_nlisteners; i++) {
		const struct listener_conf *lc = &cf->cf_listeners[i];

		o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "name", lc->lc_name);
		cJSON_AddStringToObject(o, "type",
		    lc->lc_type == LISTENER_FORWARD ? "forward" : "reverse");
		cJSON_AddStringToObject(o, "listen", lc->lc_listen);
		if (lc->lc_type == LISTENER_REVERSE)
			cJSON_AddStringToObject(o, "route", lc->lc_route);
		cJSON_AddItemToArray(a, o);
	}
	o = cJSON_AddObjectToObject(root, "tokens");
	add_str_or_null(o, "issuer", cf->cf_tokens.tc_issuer);
	cJSON_AddNumberToObject(o, "leeway_s",
	    (double)cf->cf_tokens.tc_leeway_s);
	cJSON_AddNumberToObject(o, "max_ttl_s",
	    (double)cf->cf_tokens.tc_max_ttl_s);
	a = cJSON_AddArrayToObject(o, "keys");
	for (i = 0; i < cf->cf_tokens.tc_nkeys; i++) {
		const struct token_key *k = &cf->cf_tokens.tc_keys[i];
		cJSON *ko = cJSON_CreateObject();
		int hs = k->tk_alg == TOKEN_ALG_HS256;

		if (k->tk_kid[0] != '\0')
			cJSON_AddStringToObject(ko, "kid", k->tk_kid);
		cJSON_AddStringToObject(ko, "alg", hs ? "HS256" : "EdDSA");
		cJSON_AddStringToObject(ko,
		    hs ? "secret_file" : "public_key_file",
		    cf->cf_tokens.tc_key_files[i]);
		cJSON_AddBoolToObject(ko, "unlink_after_read",
		    cf->cf_tokens.tc_key_unlink[i]);
		cJSON_AddItemToArray(a, ko);
	}
	add_str_or_null(o, "revoked_file", cf->cf_tokens.tc_revoked_file);
	a = cJSON_AddArrayToObject(root, "routes");
	for (i = 0; i < cf->cf_nroutes; i++)
		cJSON_AddItemToArray(a, print_route(&cf->cf_routes[i]));
	o = cJSON_AddObjectToObject(root, "limits");
	cJSON_AddNumberToObject(o, "max_header_bytes",
	    (double)l->max_header_bytes);
	cJSON_AddNumberToObject(o, "max_headers", (double)l->max_headers);
	cJSON_AddNumberToObject(o, "max_body_bytes", (double)l->max_body_bytes);
	cJSON_AddNumberToObject(o, "max_connections",
	    (double)l->max_connections);
	cJSON_AddNumberToObject(o, "header_timeout_ms",
	    (double)l->header_timeout_ms);
	cJSON_AddNumberToObject(o, "idle_timeout_ms",
	    (double)l->idle_timeout_ms);
	cJSON_AddNumberToObject(o, "connect_timeout_ms",
	    (double)l->connect_timeout_ms);
	cJSON_AddNumberToObject(o, "upstream_response_timeout_ms",
	    (double)l->upstream_response_timeout_ms);
	cJSON_AddNumberToObject(o, "drain_timeout_ms",
	    (double)l->drain_timeout_ms);
	cJSON_AddNumberToObject(o, "per_client_connections",
	    (double)l->per_client_connections);
	cJSON_AddNumberToObject(o, "per_client_refusals_per_s",
	    (double)l->per_client_refusals_per_s);
	o = cJSON_AddObjectToObject(root, "audit");
	cJSON_AddStringToObject(o, "path", cf->cf_audit.ac_path);
	cJSON_AddStringToObject(o, "fsync", fsyncs[cf->cf_audit.ac_fsync]);
	cJSON_AddBoolToObject(o, "chain", cf->cf_audit.ac_chain);
	cJSON_AddStringToObject(o, "on_error",
	    cf->cf_audit.ac_on_error_allow ? "allow" : "deny");
	o = cJSON_AddObjectToObject(root, "netpolicy");
	cJSON_AddStringToObject(o, "mode", modes[cf->cf_np.np_mode]);
	cJSON_AddStringToObject(o, "table", cf->cf_np.np_table);
	cJSON_AddBoolToObject(o, "allow_loopback", cf->cf_np.np_allow_loopback);
	cJSON_AddItemToObject(o, "resolvers",
	    strarray(cf->cf_np.np_resolvers, cf->cf_np.np_nresolvers));
	cJSON_AddNumberToObject(o, "log_group", cf->cf_np.np_log_group);
	cJSON_AddItemToObject(o, "sandbox_interfaces",
	    strarray(cf->cf_np.np_ifaces, cf->cf_np.np_nifaces));
	cJSON_AddBoolToObject(o, "flush_on_exit", cf->cf_np.np_flush_on_exit);
	o = cJSON_AddObjectToObject(root, "admin");
	add_str_or_null(o, "socket", cf->cf_admin_socket);
	o = cJSON_AddObjectToObject(root, "metrics");
	add_str_or_null(o, "listen", cf->cf_metrics_listen);
	cJSON_AddStringToObject(root, "state_dir", cf->cf_state_dir);
	add_str_or_null(root, "ready_file", cf->cf_ready_file);

	if ((out = cJSON_Print(root)) == NULL)
		fatalx("cannot print the policy");
	fprintf(f, "%s\n", out);
	free(out);
	cJSON_Delete(root);
}
