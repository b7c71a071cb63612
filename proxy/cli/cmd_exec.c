/*
 * "sluice exec": a sandbox in one line (docs/exec.md). The policy is the
 * one given with -c, or one made here for --profile, with sluice's own
 * listeners (forward, a reverse listener per route, an intercept listener
 * per intercepted host and port), an ephemeral HS256 key, the ephemeral
 * CA, no kernel rules (the sandbox's namespace has only lo) and a run
 * directory for what the command is given (its token, the CA). The
 * policy and the keys are held in memory files (memfd): nothing secret
 * touches a disk. Then the daemon's serve() runs the command.
 */
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "certs/certs.h"
#include "proxy/cli/cli.h"
#include "proxy/config/config.h"
#include "proxy/daemon/daemon.h"
#include "proxy/token/token.h"
#include "proxy/util/util.h"

#define EXEC_USAGE                                                             \
	"usage: sluice exec [-c POLICY.json] "                                 \
	"[--profile generic|anthropic|openai] [--key-file F]\n"                \
	"                   [--ttl S] [--max-requests N] [--user U] "          \
	"[--clean-env] [--audit FILE]\n"                                       \
	"                   [--upstream URL] [-v] -- CMD [ARG]...\n"

#define EXEC_PROXY      "127.0.0.1:3128"
#define EXEC_REVERSE    8080 /* first reverse listener's port */
#define EXEC_MAX_HOSTS  64   /* intercepted names (127.77.0.1 upward) */
#define EXEC_MAX_ROUTES 64   /* audiences of the run token */
#define EXEC_KID        "sluice-exec"
#define EXEC_KEY_LEN    32 /* the run key's bytes (HS256) */
#define SYSTEM_CA       "/etc/ssl/certs/ca-certificates.crt"

struct exec_args {
	const char *policy, *profile_name, *key_file, *user, *audit;
	const char *upstream;
	enum sandbox_profile profile;
	int64_t ttl, max_requests;
	int clean_env, verbose;
	char **argv;
};

/* A provider's public API, for the policy made without -c. */
struct provider {
	const char *name;  /* the route's audience, the profile */
	const char *url;   /* upstream */
	const char *host;  /* intercepted */
	const char *field; /* the header of the real key */
	const char *value_prefix;
	const char *token_header; /* the header the SDK sends its key in */
	const char *base_path;    /* of the SDK's base URL */
};

static const struct provider providers[] = {
	{ "anthropic", "https://api.anthropic.com", "api.anthropic.com",
	    "x-api-key", "", "x-api-key", "" },
	{ "openai", "https://api.openai.com", "api.openai.com", "authorization",
	    "Bearer ", NULL, "/v1" },
};

/* What the run is given, and what is cleaned up after it. */
struct exec_ctx {
	char rundir[256];
	char token_path[PATH_MAX], ca_path[PATH_MAX], bundle_path[PATH_MAX];
	char state_dir[PATH_MAX], audit_path[PATH_MAX];
	char key_file[PATH_MAX]; /* the real key's file, absolute: hidden */
	char policy_path[64], key_path[64], upkey_path[64];
	int policy_fd, key_fd, upkey_fd;
	unsigned char *upkey; /* the real key, raw; wiped */
	size_t upkey_len;
	char base_url[128];
	struct dnsstub_host dns[EXEC_MAX_HOSTS];
	char dns_names[EXEC_MAX_HOSTS][256];
	size_t ndns;
	const char *aud[EXEC_MAX_ROUTES];
	char aud_buf[EXEC_MAX_ROUTES][TOKEN_MAX_STR + 1];
	size_t naud;
	int intercept; /* some route intercepts: a CA to hand out */
	uid_t uid;
	gid_t gid;
};

static void sweep_stale(const char *base);

static int
exec_usage(const char *msg)
{
	if (msg != NULL)
		fprintf(stderr, "sluice: exec: %s\n", msg);
	(void)fputs(EXEC_USAGE, stderr);
	return SL_EXIT_USAGE;
}

static int
exec_parse(int argc, char **argv, struct exec_args *a)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "profile", required_argument, NULL, 'p' },
		{ "key-file", required_argument, NULL, 'k' },
		{ "ttl", required_argument, NULL, 't' },
		{ "max-requests", required_argument, NULL, 'm' },
		{ "user", required_argument, NULL, 'u' },
		{ "clean-env", no_argument, NULL, 'C' },
		{ "audit", required_argument, NULL, 'a' },
		{ "upstream", required_argument, NULL, 'U' },
		{ "verbose", no_argument, NULL, 'v' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	memset(a, 0, sizeof(*a));
	a->ttl = 3600;
	a->profile_name = "generic";
	optind = 1;
	opterr = 1;
	while ((ch = getopt_long(argc, argv, "+c:v", opts, NULL)) != -1) {
		switch (ch) {
		case 'c':
			a->policy = optarg;
			break;
		case 'p':
			a->profile_name = optarg;
			break;
		case 'k':
			a->key_file = optarg;
			break;
		case 't':
			if (cli_parse_int(optarg, 1, 604800, &a->ttl) == -1)
				return exec_usage("--ttl: 1 to 604800 seconds");
			break;
		case 'm':
			if (cli_parse_int(optarg, 1, INT64_C(9007199254740991),
				&a->max_requests) == -1)
				return exec_usage(
				    "--max-requests: a positive integer");
			break;
		case 'u':
			a->user = optarg;
			break;
		case 'C':
			a->clean_env = 1;
			break;
		case 'a':
			a->audit = optarg;
			break;
		case 'U':
			a->upstream = optarg;
			break;
		case 'v':
			a->verbose = 1;
			break;
		default:
			return exec_usage(NULL);
		}
	}
	if (optind >= argc)
		return exec_usage("no command (sluice exec [OPTIONS] -- CMD)");
	a->argv = argv + optind;
	if (strcmp(a->profile_name, "generic") == 0)
		a->profile = SANDBOX_PROFILE_GENERIC;
	else if (strcmp(a->profile_name, "anthropic") == 0)
		a->profile = SANDBOX_PROFILE_ANTHROPIC;
	else if (strcmp(a->profile_name, "openai") == 0)
		a->profile = SANDBOX_PROFILE_OPENAI;
	else
		return exec_usage("--profile: generic, anthropic or openai");
	if (a->policy == NULL && a->profile == SANDBOX_PROFILE_GENERIC)
		return exec_usage("without -c POLICY.json, --profile anthropic "
				  "or openai says what the command may reach");
	if (a->upstream != NULL && a->policy != NULL)
		return exec_usage("--upstream replaces the profile's upstream: "
				  "with -c the policy names its own");
	if (a->user != NULL && geteuid() != 0)
		return exec_usage("--user needs root");
	return 0;
}

static const struct provider *
provider_of(enum sandbox_profile p)
{
	if (p == SANDBOX_PROFILE_ANTHROPIC)
		return &providers[0];
	if (p == SANDBOX_PROFILE_OPENAI)
		return &providers[1];
	return NULL;
}

/* A memory file holding len bytes, mode 0600; its path in path. */
static int
memfile(const char *name, const void *buf, size_t len, char *path,
    size_t pathlen)
{
	const unsigned char *p = buf;
	ssize_t n;
	int fd;

	if ((fd = memfd_create(name, MFD_CLOEXEC)) == -1)
		return -1;
	if (fchmod(fd, 0600) == -1)
		goto fail;
	while (len > 0) {
		if ((n = write(fd, p, len)) <= 0) {
			if (n == -1 && errno == EINTR)
				continue;
			goto fail;
		}
		p += n;
		len -= (size_t)n;
	}
	if (certs_trust_memfd(fd) == -1)
		goto fail;
	snprintf(path, pathlen, "/proc/self/fd/%d", fd);
	return fd;
fail:
	close(fd);
	return -1;
}

/* mkdir -p, each directory made with mode. */
static int
mkdir_p(const char *path, mode_t mode)
{
	char buf[PATH_MAX], *p;

	if (strlen(path) >= sizeof(buf)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	snprintf(buf, sizeof(buf), "%s", path);
	for (p = buf + 1; *p != '\0'; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, mode) == -1 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	return mkdir(buf, mode) == -1 && errno != EEXIST ? -1 : 0;
}

/* The default audit log: $XDG_STATE_HOME/sluice/exec-DATE-PID.jsonl. */
static int
default_audit(char *out, size_t len)
{
	const char *xdg = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
	char dir[PATH_MAX], stamp[32];
	struct tm tm;
	time_t now = time(NULL);

	if (xdg != NULL && xdg[0] == '/')
		snprintf(dir, sizeof(dir), "%s/sluice", xdg);
	else if (home != NULL && home[0] == '/')
		snprintf(dir, sizeof(dir), "%s/.local/state/sluice", home);
	else
		snprintf(dir, sizeof(dir), "/var/lib/sluice/exec");
	if (mkdir_p(dir, 0700) == -1) {
		fprintf(stderr, "sluice: exec: audit: %s: %s\n", dir,
		    strerror(errno));
		return -1;
	}
	gmtime_r(&now, &tm);
	(void)strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
	if ((size_t)snprintf(out, len, "%s/exec-%s-%ld.jsonl", dir, stamp,
		(long)getpid()) >= len)
		return -1;
	return 0;
}

/* An absolute audit path whose file exists, so the wall can hide it. */
static int
prepare_audit(const struct exec_args *a, struct exec_ctx *x)
{
	char cwd[PATH_MAX];
	int fd;

	if (a->audit == NULL) {
		if (default_audit(x->audit_path, sizeof(x->audit_path)) == -1)
			return -1;
	} else if (a->audit[0] == '/')
		snprintf(x->audit_path, sizeof(x->audit_path), "%s", a->audit);
	else if (getcwd(cwd, sizeof(cwd)) == NULL ||
	    (size_t)snprintf(x->audit_path, sizeof(x->audit_path), "%s/%s", cwd,
		a->audit) >= sizeof(x->audit_path)) {
		fprintf(stderr, "sluice: exec: --audit: path too long\n");
		return -1;
	}
	fd = open(x->audit_path,
	    O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd == -1) {
		fprintf(stderr, "sluice: exec: audit: %s: %s\n", x->audit_path,
		    strerror(errno));
		return -1;
	}
	close(fd);
	return 0;
}

/* The run directory: the command's token file and CA, sluice's state. */
static int
prepare_rundir(struct exec_ctx *x)
{
	const char *base = getenv("XDG_RUNTIME_DIR");
	struct stat st;

	if (base == NULL || base[0] != '/' || strlen(base) > 200 ||
	    stat(base, &st) == -1 || !S_ISDIR(st.st_mode) ||
	    access(base, W_OK) == -1)
		base = "/tmp";
	sweep_stale(base);
	snprintf(x->rundir, sizeof(x->rundir), "%s/sluice-exec-%ld.XXXXXX",
	    base, (long)getpid());
	if (mkdtemp(x->rundir) == NULL) {
		fprintf(stderr, "sluice: exec: %s: %s\n", x->rundir,
		    strerror(errno));
		x->rundir[0] = '\0';
		return -1;
	}
	/* The command (maybe another uid) reads its token and the CA. */
	(void)chmod(x->rundir, 0711);
	snprintf(x->token_path, sizeof(x->token_path), "%s/token", x->rundir);
	snprintf(x->ca_path, sizeof(x->ca_path), "%s/ca.pem", x->rundir);
	snprintf(x->bundle_path, sizeof(x->bundle_path), "%s/ca-bundle.pem",
	    x->rundir);
	snprintf(x->state_dir, sizeof(x->state_dir), "%s/state", x->rundir);
	if (mkdir(x->state_dir, 0700) == -1) {
		fprintf(stderr, "sluice: exec: %s: %s\n", x->state_dir,
		    strerror(errno));
		return -1;
	}
	return 0;
}

static int
remove_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (type == FTW_DP)
		(void)rmdir(path);
	else
		(void)unlink(path);
	return 0;
}

/* rm -r dir: depth first, never following a link. */
static void
remove_tree(const char *dir)
{
	(void)nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

/*
 * Run directories a killed exec left behind (its pid is in the name): ours,
 * and the pid gone. Their token has expired or soon will; the rest is
 * state nobody reads.
 */
static void
sweep_stale(const char *base)
{
	char p[PATH_MAX];
	struct dirent *de;
	struct stat st;
	long pid;
	char *end;
	DIR *d;

	if ((d = opendir(base)) == NULL)
		return;
	while ((de = readdir(d)) != NULL) {
		if (strncmp(de->d_name, "sluice-exec-", 12) != 0)
			continue;
		pid = strtol(de->d_name + 12, &end, 10);
		if (end == de->d_name + 12 || *end != '.' || pid <= 0 ||
		    (kill((pid_t)pid, 0) == 0 || errno != ESRCH))
			continue;
		snprintf(p, sizeof(p), "%s/%s", base, de->d_name);
		if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode) &&
		    st.st_uid == geteuid())
			remove_tree(p);
	}
	closedir(d);
}

/* The real key: read under the secret-file rules, kept raw for the env. */
static int
read_upstream_key(const struct exec_args *a, struct exec_ctx *x,
    const struct provider *pv)
{
	const char *file = a->key_file;
	char var[64], why[512], *buf;
	size_t plen;

	if (file == NULL) {
		snprintf(var, sizeof(var), "SLUICE_%s_KEY_FILE",
		    pv == &providers[0] ? "ANTHROPIC" : "OPENAI");
		if ((file = getenv(var)) == NULL || file[0] == '\0') {
			fprintf(stderr,
			    "sluice: exec: --profile %s without -c needs the "
			    "real API key: --key-file FILE or %s\n",
			    pv->name, var);
			return -1;
		}
	}
	if (config_read_secret(file, CONFIG_ANY_OWNER, &x->upkey, &x->upkey_len,
		why, sizeof(why)) == -1) {
		fprintf(stderr, "sluice: exec: --key-file: %s\n", why);
		return -1;
	}
	/* The wall hides absolute paths only, whichever way it was named. */
	if (realpath(file, x->key_file) == NULL) {
		fprintf(stderr, "sluice: exec: --key-file: %s: %s\n", file,
		    strerror(errno));
		return -1;
	}
	if (x->upkey_len == 0 || memchr(x->upkey, '\0', x->upkey_len) ||
	    memchr(x->upkey, '\n', x->upkey_len) ||
	    memchr(x->upkey, '\r', x->upkey_len)) {
		fprintf(stderr,
		    "sluice: exec: --key-file: %s: one line, the key alone\n",
		    file);
		return -1;
	}
	plen = strlen(pv->value_prefix);
	if ((buf = malloc(plen + x->upkey_len)) == NULL)
		return -1;
	memcpy(buf, pv->value_prefix, plen);
	memcpy(buf + plen, x->upkey, x->upkey_len);
	x->upkey_fd = memfile("sluice-upstream-key", buf, plen + x->upkey_len,
	    x->upkey_path, sizeof(x->upkey_path));
	OPENSSL_cleanse(buf, plen + x->upkey_len);
	free(buf);
	if (x->upkey_fd == -1) {
		fprintf(stderr, "sluice: exec: memfd: %s\n", strerror(errno));
		return -1;
	}
	return 0;
}

/* The policy made for a profile: one route to the provider's API. */
static cJSON *
profile_policy(const struct exec_args *a, const struct exec_ctx *x,
    const struct provider *pv)
{
	cJSON *root = cJSON_CreateObject(), *routes, *rt, *arr, *conn, *up, *h;
	int ok = root != NULL;

	ok = ok && (routes = cJSON_AddArrayToObject(root, "routes")) != NULL &&
	    (rt = cJSON_CreateObject()) != NULL &&
	    cJSON_AddItemToArray(routes, rt);
	ok = ok && cJSON_AddStringToObject(rt, "audience", pv->name) &&
	    (arr = cJSON_AddArrayToObject(rt, "hosts")) != NULL &&
	    cJSON_AddItemToArray(arr, cJSON_CreateString(pv->host)) &&
	    (arr = cJSON_AddArrayToObject(rt, "methods")) != NULL &&
	    cJSON_AddItemToArray(arr, cJSON_CreateString("GET")) &&
	    cJSON_AddItemToArray(arr, cJSON_CreateString("POST")) &&
	    (arr = cJSON_AddArrayToObject(rt, "path_prefixes")) != NULL &&
	    cJSON_AddItemToArray(arr, cJSON_CreateString("/v1"));
	if (ok && pv->token_header != NULL)
		ok = cJSON_AddStringToObject(rt, "token_header",
			 pv->token_header) != NULL;
	ok = ok && (conn = cJSON_AddObjectToObject(rt, "connect")) != NULL &&
	    cJSON_AddBoolToObject(conn, "enabled", 1) &&
	    cJSON_AddBoolToObject(conn, "intercept", 1);
	ok = ok && (up = cJSON_AddObjectToObject(rt, "upstream")) != NULL &&
	    cJSON_AddStringToObject(up, "url",
		a->upstream != NULL ? a->upstream : pv->url) &&
	    cJSON_AddBoolToObject(up, "strip_token", 1) &&
	    (arr = cJSON_AddArrayToObject(up, "headers")) != NULL &&
	    (h = cJSON_CreateObject()) != NULL &&
	    cJSON_AddItemToArray(arr, h) &&
	    cJSON_AddStringToObject(h, "name", pv->field) &&
	    cJSON_AddStringToObject(h, "value_file", x->upkey_path);
	if (!ok) {
		cJSON_Delete(root);
		return NULL;
	}
	return root;
}

static cJSON *
read_policy(const char *path)
{
	char why[512];
	unsigned char *buf;
	size_t len;
	cJSON *root;

	/* The reader (and size bound) the policy's load uses. */
	if (certs_read_public(path, &buf, &len, why, sizeof(why)) == -1) {
		fprintf(stderr, "sluice: exec: %s\n", why);
		return NULL;
	}
	root = cJSON_ParseWithLength((const char *)buf, len);
	free(buf);
	if (root == NULL || !cJSON_IsObject(root)) {
		/* sluice check names the byte at fault. */
		snprintf(why, sizeof(why),
		    "%s: not a JSON object (sluice check -c %s says where)",
		    path, path);
		fprintf(stderr, "sluice: exec: %s\n", why);
		cJSON_Delete(root);
		return NULL;
	}
	return root;
}

/* Replace (or add) key in obj with item. */
static int
set_item(cJSON *obj, const char *key, cJSON *item)
{
	if (item == NULL)
		return -1;
	cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
	if (!cJSON_AddItemToObject(obj, key, item)) {
		cJSON_Delete(item);
		return -1;
	}
	return 0;
}

/* The upstream URL's host, for a route without hosts. */
static int
url_host(const char *url, char *out, size_t len)
{
	const char *p = strstr(url, "://"), *e;

	if (p == NULL)
		return -1;
	p += 3;
	if (*p == '[')
		return -1; /* an address literal: nothing to name */
	e = p + strcspn(p, ":/?#");
	if (e == p || (size_t)(e - p) >= len)
		return -1;
	memcpy(out, p, (size_t)(e - p));
	out[e - p] = '\0';
	return 0;
}

static int
add_listener(cJSON *ls, const char *name, const char *type, const char *listen,
    const char *key, const char *val)
{
	cJSON *l = cJSON_CreateObject();

	if (l == NULL || !cJSON_AddItemToArray(ls, l))
		return -1;
	if (!cJSON_AddStringToObject(l, "name", name) ||
	    !cJSON_AddStringToObject(l, "type", type) ||
	    !cJSON_AddStringToObject(l, "listen", listen) ||
	    (key != NULL && !cJSON_AddStringToObject(l, key, val)))
		return -1;
	return 0;
}

/*
 * An intercepted name: its own 127.77.0.N. 0 when new (*idx its index),
 * 2 when named before, 1 for an address literal (reached through the
 * proxy only), -1 when the table is full.
 */
static int
dns_add(struct exec_ctx *x, const char *host, size_t *idx)
{
	struct in_addr ia;
	size_t i;

	for (i = 0; i < x->ndns; i++)
		if (strcasecmp(x->dns_names[i], host) == 0)
			return 2;
	if (inet_pton(AF_INET, host, &ia) == 1 || strchr(host, ':') != NULL)
		return 1;
	if (x->ndns == EXEC_MAX_HOSTS || strlen(host) >= 256)
		return -1;
	snprintf(x->dns_names[x->ndns], 256, "%s", host);
	x->dns[x->ndns].dh_name = x->dns_names[x->ndns];
	x->dns[x->ndns].dh_addr[0] = 127;
	x->dns[x->ndns].dh_addr[1] = 77;
	x->dns[x->ndns].dh_addr[2] = 0;
	x->dns[x->ndns].dh_addr[3] = (unsigned char)(x->ndns + 1);
	*idx = x->ndns++;
	return 0;
}

/* One intercept listener: host on 127.77.0.(idx + 1):port. */
static int
intercept_listener(cJSON *ls, size_t idx, int port, const char *host)
{
	char listen[64], name[64];

	snprintf(listen, sizeof(listen), "127.77.0.%zu:%d", idx + 1, port);
	snprintf(name, sizeof(name), "exec-%zu-%d", idx + 1, port);
	return add_listener(ls, name, "intercept", listen, "host", host);
}

/* The intercept listeners of route rt: one per name and port. */
static int
intercept_listeners(cJSON *ls, struct exec_ctx *x, const cJSON *rt)
{
	const cJSON *conn = cJSON_GetObjectItemCaseSensitive(rt, "connect");
	const cJSON *hosts = cJSON_GetObjectItemCaseSensitive(rt, "hosts");
	const cJSON *up = cJSON_GetObjectItemCaseSensitive(rt, "upstream");
	const cJSON *ports, *h, *p, *url;
	char host[256];
	const char *names[EXEC_MAX_HOSTS + 1];
	size_t n = 0, j, idx;
	int r;

	if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(conn, "intercept")))
		return 0;
	x->intercept = 1;
	cJSON_ArrayForEach(h, hosts) {
		if (cJSON_IsString(h) && n < EXEC_MAX_HOSTS)
			names[n++] = h->valuestring;
	}
	url = cJSON_GetObjectItemCaseSensitive(up, "url");
	if (cJSON_IsString(url) &&
	    url_host(url->valuestring, host, sizeof(host)) == 0)
		names[n++] = host;
	ports = cJSON_GetObjectItemCaseSensitive(conn, "ports");
	for (j = 0; j < n; j++) {
		if ((r = dns_add(x, names[j], &idx)) == 1 || r == 2)
			continue;
		if (r == -1) {
			fprintf(stderr,
			    "sluice: exec: more than %d intercepted names\n",
			    EXEC_MAX_HOSTS);
			return -1;
		}
		if (!cJSON_IsArray(ports)) {
			if (intercept_listener(ls, idx, 443, names[j]) == -1)
				return -1;
			continue;
		}
		cJSON_ArrayForEach(p, ports) {
			/* Not a port: the load refuses it, naming the field. */
			if (cJSON_IsNumber(p) &&
			    intercept_listener(ls, idx, p->valueint,
				names[j]) == -1)
				return -1;
		}
	}
	return 0;
}

/* An audience for the run token, once (routes may share one). */
static int
aud_add(struct exec_ctx *x, const char *aud)
{
	size_t i;

	for (i = 0; i < x->naud; i++)
		if (strcmp(x->aud[i], aud) == 0)
			return 0;
	if (x->naud == EXEC_MAX_ROUTES) {
		fprintf(stderr, "sluice: exec: at most %d audiences\n",
		    EXEC_MAX_ROUTES);
		return -1;
	}
	snprintf(x->aud_buf[x->naud], sizeof(x->aud_buf[x->naud]), "%s", aud);
	x->aud[x->naud] = x->aud_buf[x->naud];
	x->naud++;
	return 0;
}

/* Whether route rt dials as requested (an allowlist route). */
static int
as_requested(const cJSON *rt)
{
	const cJSON *up = cJSON_GetObjectItemCaseSensitive(rt, "upstream");
	const cJSON *mode = cJSON_GetObjectItemCaseSensitive(up, "mode");

	return cJSON_IsString(mode) &&
	    strcmp(mode->valuestring, "as_requested") == 0;
}

/* exec's listeners in place of the policy's; the audiences for the token. */
static int
exec_listeners(cJSON *root, struct exec_ctx *x, const char *profile_aud)
{
	const cJSON *routes = cJSON_GetObjectItemCaseSensitive(root, "routes");
	const cJSON *rt, *aud;
	char listen[64], name[64];
	cJSON *ls = cJSON_CreateArray();
	size_t i = 0;
	int base_set = 0;

	if (ls == NULL || set_item(root, "listeners", ls) == -1)
		return -1;
	if (add_listener(ls, "exec-forward", "forward", EXEC_PROXY, NULL,
		NULL) == -1)
		return -1;
	cJSON_ArrayForEach(rt, routes) {
		aud = cJSON_GetObjectItemCaseSensitive(rt, "audience");
		if (!cJSON_IsString(aud))
			continue; /* refused by the load, with the field */
		if (aud_add(x, aud->valuestring) == -1)
			return -1;
		if (intercept_listeners(ls, x, rt) == -1)
			return -1;
		/* An allowlist route has no upstream for a base URL. */
		if (as_requested(rt))
			continue;
		snprintf(listen, sizeof(listen), "127.0.0.1:%zu",
		    EXEC_REVERSE + i);
		snprintf(name, sizeof(name), "exec-reverse-%zu", i);
		if (add_listener(ls, name, "reverse", listen, "route",
			aud->valuestring) == -1)
			return -1;
		if (!base_set &&
		    (profile_aud == NULL ||
			strcmp(aud->valuestring, profile_aud) == 0)) {
			snprintf(x->base_url, sizeof(x->base_url), "http://%s",
			    listen);
			base_set = 1;
		}
		i++;
	}
	if (!base_set && i > 0)
		snprintf(x->base_url, sizeof(x->base_url),
		    "http://127.0.0.1:%d", EXEC_REVERSE);
	return 0;
}

/* exec's key beside the policy's, and a max_ttl_s that takes --ttl. */
static int
exec_tokens(cJSON *root, const struct exec_ctx *x, const struct exec_args *a)
{
	cJSON *tokens, *keys, *k;
	const cJSON *ttl;

	if ((tokens = cJSON_GetObjectItemCaseSensitive(root, "tokens")) ==
		NULL &&
	    (tokens = cJSON_AddObjectToObject(root, "tokens")) == NULL)
		return -1;
	if (!cJSON_IsObject(tokens))
		return 0; /* the load names the field */
	if ((keys = cJSON_GetObjectItemCaseSensitive(tokens, "keys")) == NULL &&
	    (keys = cJSON_AddArrayToObject(tokens, "keys")) == NULL)
		return -1;
	if (!cJSON_IsArray(keys))
		return 0;
	/* Keys of the policy without a kid would make the kid ambiguous. */
	if ((k = cJSON_CreateObject()) == NULL ||
	    !cJSON_AddItemToArray(keys, k) ||
	    !cJSON_AddStringToObject(k, "kid", EXEC_KID) ||
	    !cJSON_AddStringToObject(k, "alg", "HS256") ||
	    !cJSON_AddStringToObject(k, "secret_file", x->key_path))
		return -1;
	ttl = cJSON_GetObjectItemCaseSensitive(tokens, "max_ttl_s");
	if ((!cJSON_IsNumber(ttl) || ttl->valuedouble < (double)a->ttl) &&
	    set_item(tokens, "max_ttl_s", cJSON_CreateNumber((double)a->ttl)) ==
		-1)
		return -1;
	return 0;
}

/* The CA: ephemeral unless the policy names one; where the command finds it. */
static int
exec_intercept(cJSON *root, struct exec_ctx *x)
{
	cJSON *ic = cJSON_GetObjectItemCaseSensitive(root, "intercept");
	const cJSON *ca, *f;

	if (ic == NULL) {
		if (!x->intercept)
			return 0;
		if ((ic = cJSON_AddObjectToObject(root, "intercept")) == NULL ||
		    !cJSON_AddStringToObject(ic, "ca", "ephemeral") ||
		    !cJSON_AddStringToObject(ic, "ca_cert_out", x->ca_path))
			return -1;
		return 0;
	}
	if (!cJSON_IsObject(ic))
		return 0; /* the load names the field */
	x->intercept = 1;
	ca = cJSON_GetObjectItemCaseSensitive(ic, "ca");
	if (cJSON_IsString(ca) && strcmp(ca->valuestring, "ephemeral") == 0)
		return set_item(ic, "ca_cert_out",
		    cJSON_CreateString(x->ca_path));
	f = cJSON_GetObjectItemCaseSensitive(ic, "ca_cert_file");
	if (cJSON_IsString(f))
		snprintf(x->ca_path, sizeof(x->ca_path), "%s", f->valuestring);
	return 0;
}

/* The rest of what exec owns in the policy: keys, CA, audit, state. */
static int
exec_sections(cJSON *root, struct exec_ctx *x, const struct exec_args *a)
{
	cJSON *au, *np;
	const cJSON *res;

	if (exec_tokens(root, x, a) == -1 || exec_intercept(root, x) == -1)
		return -1;
	au = cJSON_GetObjectItemCaseSensitive(root, "audit");
	if (au == NULL || !cJSON_IsObject(au)) {
		if (set_item(root, "audit", cJSON_CreateObject()) == -1)
			return -1;
		au = cJSON_GetObjectItemCaseSensitive(root, "audit");
	}
	if (set_item(au, "path", cJSON_CreateString(x->audit_path)) == -1)
		return -1;
	/* No kernel rules; the resolvers sluice itself uses stay. */
	res = cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(root, "netpolicy"), "resolvers");
	if ((np = cJSON_CreateObject()) == NULL ||
	    !cJSON_AddStringToObject(np, "mode", "off") ||
	    (res != NULL &&
		!cJSON_AddItemToObject(np, "resolvers",
		    cJSON_Duplicate(res, 1))) ||
	    set_item(root, "netpolicy", np) == -1)
		return -1;
	if (set_item(root, "state_dir", cJSON_CreateString(x->state_dir)) == -1)
		return -1;
	/* A running daemon's sockets and files are not exec's. */
	cJSON_DeleteItemFromObjectCaseSensitive(root, "admin");
	cJSON_DeleteItemFromObjectCaseSensitive(root, "metrics");
	cJSON_DeleteItemFromObjectCaseSensitive(root, "ready_file");
	return 0;
}

/* The run token, in a 0600 file the command may read (and unlink). */
static int
mint_token(const struct exec_args *a, struct exec_ctx *x,
    const unsigned char *key, size_t keylen, char *tok, size_t toklen)
{
	struct token_key tk;
	char sub[32];
	int fd, rc;
	size_t len;

	memset(&tk, 0, sizeof(tk));
	snprintf(tk.tk_kid, sizeof(tk.tk_kid), "%s", EXEC_KID);
	tk.tk_alg = TOKEN_ALG_HS256;
	tk.tk_secret = (unsigned char *)(uintptr_t)key;
	tk.tk_secret_len = keylen;
	snprintf(sub, sizeof(sub), "exec-%ld", (long)getpid());
	if (x->naud == 0) {
		fprintf(stderr, "sluice: exec: the policy has no routes\n");
		return -1;
	}
	if (cli_token_sign(&tk, sub, x->aud, x->naud, (int64_t)time(NULL),
		a->ttl, a->max_requests, tok, toklen) == -1) {
		fprintf(stderr, "sluice: exec: cannot sign the run token\n");
		return -1;
	}
	fd = open(x->token_path,
	    O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd == -1) {
		fprintf(stderr, "sluice: exec: %s: %s\n", x->token_path,
		    strerror(errno));
		return -1;
	}
	len = strlen(tok);
	rc = write(fd, tok, len) == (ssize_t)len && write(fd, "\n", 1) == 1 ?
	    0 :
	    -1;
	if (rc == 0 && x->uid != (uid_t)-1 && fchown(fd, x->uid, x->gid) == -1)
		rc = -1;
	close(fd);
	if (rc == -1)
		fprintf(stderr, "sluice: exec: %s: cannot write it\n",
		    x->token_path);
	return rc;
}

static int
resolve_user(const char *user, struct exec_ctx *x)
{
	struct passwd *pw;
	int64_t n;

	x->uid = (uid_t)-1;
	x->gid = (gid_t)-1;
	if (user == NULL)
		return 0;
	if ((pw = getpwnam(user)) != NULL) {
		x->uid = pw->pw_uid;
		x->gid = pw->pw_gid;
		return 0;
	}
	if (cli_parse_int(user, 1, 0x7ffffffe, &n) == 0) {
		x->uid = (uid_t)n;
		x->gid = (gid_t)n;
		return 0;
	}
	fprintf(stderr, "sluice: exec: --user: %s: no such user\n", user);
	return -1;
}

static void
ctx_free(struct exec_ctx *x)
{
	if (x->policy_fd != -1)
		close(x->policy_fd);
	if (x->key_fd != -1)
		close(x->key_fd);
	if (x->upkey_fd != -1)
		close(x->upkey_fd);
	if (x->upkey != NULL) {
		OPENSSL_cleanse(x->upkey, x->upkey_len);
		free(x->upkey);
	}
	if (x->rundir[0] != '\0')
		remove_tree(x->rundir);
}

int
cmd_exec(int argc, char **argv)
{
	static struct exec_ctx x;
	struct exec_args a;
	struct exec_run xr;
	struct run_opts o;
	const struct provider *pv;
	unsigned char key[EXEC_KEY_LEN + 1];
	char tok[TOKEN_MAX_LEN + 1], why[512], *json = NULL, *secret = NULL;
	const char *hide[1], *secrets[1];
	cJSON *root = NULL;
	int rc = SANDBOX_EXIT_SETUP;

	if (exec_parse(argc, argv, &a) != 0)
		return SL_EXIT_USAGE;
	memset(&x, 0, sizeof(x));
	x.policy_fd = x.key_fd = x.upkey_fd = -1;
	pv = provider_of(a.profile);
	if (sandbox_userns_probe(why, sizeof(why)) == -1) {
		fprintf(stderr, "sluice: exec: %s\n", why);
		return SANDBOX_EXIT_SETUP;
	}
	if (resolve_user(a.user, &x) == -1 || prepare_rundir(&x) == -1 ||
	    prepare_audit(&a, &x) == -1)
		goto out;
	if (a.policy == NULL && read_upstream_key(&a, &x, pv) == -1)
		goto out;
	/*
	 * The loader strips one trailing newline from a secret file: the
	 * file ends with one, so a key whose last byte is 0x0a stays whole.
	 */
	key[EXEC_KEY_LEN] = '\n';
	if (RAND_bytes(key, EXEC_KEY_LEN) != 1 ||
	    (x.key_fd = memfile("sluice-exec-key", key, sizeof(key), x.key_path,
		 sizeof(x.key_path))) == -1) {
		fprintf(stderr, "sluice: exec: cannot make the run key\n");
		goto out;
	}
	root = a.policy != NULL ? read_policy(a.policy) :
				  profile_policy(&a, &x, pv);
	if (root == NULL)
		goto out;
	if (exec_listeners(root, &x, pv != NULL ? pv->name : NULL) == -1 ||
	    exec_sections(root, &x, &a) == -1 ||
	    (json = cJSON_Print(root)) == NULL) {
		fprintf(stderr, "sluice: exec: cannot build the policy\n");
		goto out;
	}
	if ((x.policy_fd = memfile("sluice-exec-policy", json, strlen(json),
		 x.policy_path, sizeof(x.policy_path))) == -1) {
		fprintf(stderr, "sluice: exec: memfd: %s\n", strerror(errno));
		goto out;
	}
	if (mint_token(&a, &x, key, EXEC_KEY_LEN, tok, sizeof(tok)) == -1)
		goto out;

	memset(&xr, 0, sizeof(xr));
	xr.xr_argv = (const char *const *)a.argv;
	xr.xr_env.es_token = tok;
	xr.xr_env.es_proxy = EXEC_PROXY;
	xr.xr_env.es_ca_bundle = x.intercept ? x.bundle_path : NULL;
	xr.xr_env.es_ca_cert = x.intercept ? x.ca_path : NULL;
	xr.xr_env.es_token_file = x.token_path;
	xr.xr_env.es_profile = a.profile;
	if (pv != NULL && pv->base_path[0] != '\0')
		(void)strncat(x.base_url, pv->base_path,
		    sizeof(x.base_url) - strlen(x.base_url) - 1);
	xr.xr_env.es_base_url = x.base_url[0] != '\0' ? x.base_url : NULL;
	xr.xr_env.es_clean = a.clean_env;
	xr.xr_rundir = x.rundir;
	xr.xr_bundle = x.intercept ? x.bundle_path : NULL;
	xr.xr_bundle_system = SYSTEM_CA;
	if (x.upkey != NULL &&
	    (secret = strndup((const char *)x.upkey, x.upkey_len)) != NULL) {
		secrets[0] = secret;
		xr.xr_secrets = secrets;
		xr.xr_nsecrets = 1;
	}
	if (x.key_file[0] != '\0') {
		hide[0] = x.key_file;
		xr.xr_hide = hide;
		xr.xr_nhide = 1;
	}
	xr.xr_dns = x.dns;
	xr.xr_ndns = x.ndns;
	xr.xr_uid = x.uid;
	xr.xr_gid = x.gid;
	xr.xr_status = -1;

	memset(&o, 0, sizeof(o));
	o.path = x.policy_path;
	o.verbose = a.verbose ? 1 : -1; /* the command's stderr is shared */
	o.exec = &xr;
	rc = serve(&o);
	/* serve() returns its own codes before the command ran. */
	if (xr.xr_status >= 0)
		rc = xr.xr_status;
	fprintf(stderr,
	    "sluice: %llu allowed, %llu denied, %llu dns refused; audit %s\n",
	    (unsigned long long)xr.xr_allowed, (unsigned long long)xr.xr_denied,
	    (unsigned long long)xr.xr_dns_refused, x.audit_path);
out:
	OPENSSL_cleanse(key, sizeof(key));
	OPENSSL_cleanse(tok, sizeof(tok));
	if (secret != NULL) {
		OPENSSL_cleanse(secret, strlen(secret));
		free(secret);
	}
	if (json != NULL) {
		OPENSSL_cleanse(json, strlen(json));
		free(json);
	}
	cJSON_Delete(root);
	ctx_free(&x);
	return rc;
}
