/*
 * "sluice certs init --dir DIR [--days N] [--name CN] [--permit HOST]...
 * [--permit-from POLICY.json]" and "sluice certs show --dir DIR": the local
 * CA of TLS interception (docs/interception.md), on top of certs/.
 *
 * --permit-from reads the policy with cJSON for the intercepted routes'
 * host names only (their upstream URL's host and "hosts"), with no other
 * check: the files a policy names (keys, secrets) may not be readable by
 * whoever makes the CA, and need not be.
 *
 * Exit 0, 1 for bad input (a host name, a policy, existing files), 2 for a
 * usage error; every message names the argument at fault.
 */
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "certs/certs.h"
#include "proxy/cli/cli.h"
#include "proxy/util/util.h"

#define CERTS_SHOW_MAX 16384 /* bytes of `certs show` text */

static const char certs_usage_text[] =
    "usage: sluice certs init --dir DIR [--days N] [--name CN] "
    "[--permit HOST]... [--permit-from POLICY.json]\n"
    "       sluice certs show --dir DIR\n";

/* The host names the CA will permit, canonical, without duplicates. */
struct permits {
	char *p_host[CERTS_CA_MAX_PERMIT];
	size_t p_n;
};

static int
certs_usage(void)
{
	(void)fputs(certs_usage_text, stderr);
	return SL_EXIT_USAGE;
}

static void
permits_free(struct permits *p)
{
	size_t i;

	for (i = 0; i < p->p_n; i++)
		free(p->p_host[i]);
	p->p_n = 0;
}

/*
 * Add host (canonicalized) to p; what names where it came from in errors.
 * 0 or -1 (said).
 */
static int
permits_add(struct permits *p, const char *host, const char *what)
{
	char canon[CERTS_HOST_MAX + 1], why[256];
	size_t i;

	if (certs_host_canon(host, canon, sizeof(canon), why, sizeof(why)) ==
	    -1) {
		fprintf(stderr, "sluice certs: %s: %s\n", what, why);
		return -1;
	}
	for (i = 0; i < p->p_n; i++)
		if (strcmp(p->p_host[i], canon) == 0)
			return 0;
	if (p->p_n == CERTS_CA_MAX_PERMIT) {
		fprintf(stderr,
		    "sluice certs: %s: more than %d host names to permit\n",
		    what, CERTS_CA_MAX_PERMIT);
		return -1;
	}
	if ((p->p_host[p->p_n] = strdup(canon)) == NULL) {
		fprintf(stderr, "sluice certs: out of memory\n");
		return -1;
	}
	p->p_n++;
	return 0;
}

/*
 * The host of an upstream URL ("https://host[:port][/path]", IPv6 in
 * brackets) into out. 0, or -1 with why.
 */
static int
url_host(const char *url, char *out, size_t len, char *why, size_t whylen)
{
	const char *p, *end;
	size_t n;

	if (strncasecmp(url, "https://", 8) == 0)
		p = url + 8;
	else if (strncasecmp(url, "http://", 7) == 0)
		p = url + 7;
	else {
		snprintf(why, whylen, "not an http:// or https:// URL");
		return -1;
	}
	if (*p == '[') {
		if ((end = strchr(++p, ']')) == NULL) {
			snprintf(why, whylen, "'[' without ']'");
			return -1;
		}
	} else
		end = p + strcspn(p, ":/?#@");
	if (*end == '@' || memchr(p, '@', (size_t)(end - p)) != NULL) {
		snprintf(why, whylen, "user information in the URL");
		return -1;
	}
	if ((n = (size_t)(end - p)) == 0 || n >= len) {
		snprintf(why, whylen, "%s host", n == 0 ? "empty" : "too long");
		return -1;
	}
	memcpy(out, p, n);
	out[n] = '\0';
	return 0;
}

/* Read a whole file of at most CERTS_MAX_FILE bytes; NULL (said). */
static char *
read_policy(const char *path, size_t *lenp)
{
	unsigned char *buf;
	size_t len;
	char why[512];

	if (certs_read_public(path, &buf, &len, why, sizeof(why)) == -1) {
		fprintf(stderr, "sluice certs: --permit-from: %s\n", why);
		return NULL;
	}
	*lenp = len;
	return (char *)buf;
}

/* The host names of one intercepted route (index i) into p. 0 or -1. */
static int
route_hosts(const char *path, size_t i, const cJSON *r, struct permits *p)
{
	const cJSON *up, *url, *hosts, *h;
	char host[CERTS_HOST_MAX + 3], what[512], why[128];
	size_t j = 0;

	up = cJSON_GetObjectItemCaseSensitive(r, "upstream");
	url = cJSON_GetObjectItemCaseSensitive(up, "url");
	if (!cJSON_IsString(url)) {
		fprintf(stderr,
		    "sluice certs: --permit-from %s: routes[%zu].upstream.url: "
		    "not a string\n",
		    path, i);
		return -1;
	}
	snprintf(what, sizeof(what),
	    "--permit-from %s: routes[%zu].upstream.url", path, i);
	if (url_host(url->valuestring, host, sizeof(host), why, sizeof(why)) ==
	    -1) {
		fprintf(stderr, "sluice certs: %s: %s\n", what, why);
		return -1;
	}
	if (permits_add(p, host, what) == -1)
		return -1;
	hosts = cJSON_GetObjectItemCaseSensitive(r, "hosts");
	if (hosts != NULL && !cJSON_IsArray(hosts)) {
		fprintf(stderr,
		    "sluice certs: --permit-from %s: routes[%zu].hosts: not an "
		    "array\n",
		    path, i);
		return -1;
	}
	cJSON_ArrayForEach(h, hosts) {
		snprintf(what, sizeof(what),
		    "--permit-from %s: routes[%zu].hosts[%zu]", path, i, j++);
		if (!cJSON_IsString(h)) {
			fprintf(stderr, "sluice certs: %s: not a string\n",
			    what);
			return -1;
		}
		if (permits_add(p, h->valuestring, what) == -1)
			return -1;
	}
	return 0;
}

/*
 * Every intercepted route's host names from the policy at path into p.
 * A policy with no intercepted route is an error: the CA would otherwise
 * be unconstrained without anyone asking for it. 0 or -1 (said).
 */
static int
permits_from_policy(const char *path, struct permits *p)
{
	const cJSON *routes, *r, *c, *ic;
	cJSON *doc;
	char *buf;
	size_t len, i = 0, found = 0;
	int rc = -1;

	if ((buf = read_policy(path, &len)) == NULL)
		return -1;
	doc = cJSON_ParseWithLength(buf, len);
	free(buf);
	if (doc == NULL || !cJSON_IsObject(doc)) {
		fprintf(stderr,
		    "sluice certs: --permit-from %s: not a JSON object\n",
		    path);
		goto out;
	}
	routes = cJSON_GetObjectItemCaseSensitive(doc, "routes");
	if (!cJSON_IsArray(routes)) {
		fprintf(stderr,
		    "sluice certs: --permit-from %s: routes: not an array\n",
		    path);
		goto out;
	}
	cJSON_ArrayForEach(r, routes) {
		c = cJSON_GetObjectItemCaseSensitive(r, "connect");
		ic = cJSON_GetObjectItemCaseSensitive(c, "intercept");
		if (cJSON_IsTrue(ic)) {
			if (route_hosts(path, i, r, p) == -1)
				goto out;
			found++;
		}
		i++;
	}
	if (found == 0) {
		fprintf(stderr,
		    "sluice certs: --permit-from %s: no route has "
		    "connect.intercept true\n",
		    path);
		goto out;
	}
	rc = 0;
out:
	cJSON_Delete(doc);
	return rc;
}

/* --days: 1..CERTS_CA_MAX_DAYS. 0 or -1 (said). */
static int
parse_days(const char *s, unsigned *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (s[0] < '0' || s[0] > '9' || *end != '\0' || errno != 0 || v < 1 ||
	    v > CERTS_CA_MAX_DAYS) {
		fprintf(stderr,
		    "sluice certs: --days: \"%s\": not a whole number of days "
		    "from 1 to %d\n",
		    s, CERTS_CA_MAX_DAYS);
		return -1;
	}
	*out = (unsigned)v;
	return 0;
}

/* Print the certificate's description; 0 or -1 (said). */
static int
show_cert(X509 *cert, const char *what)
{
	char *buf;
	int n;

	if ((buf = malloc(CERTS_SHOW_MAX)) == NULL) {
		fprintf(stderr, "sluice certs: out of memory\n");
		return -1;
	}
	n = certs_show(cert, buf, CERTS_SHOW_MAX);
	if (n < 0 || n >= CERTS_SHOW_MAX) {
		fprintf(stderr,
		    "sluice certs: %s: cannot describe the "
		    "certificate\n",
		    what);
		free(buf);
		return -1;
	}
	(void)fputs(buf, stdout);
	free(buf);
	return 0;
}

static int
certs_init(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "dir", required_argument, NULL, 'd' },
		{ "days", required_argument, NULL, 'D' },
		{ "name", required_argument, NULL, 'n' },
		{ "permit", required_argument, NULL, 'p' },
		{ "permit-from", required_argument, NULL, 'P' },
		{ NULL, 0, NULL, 0 },
	};
	struct certs_ca_params cp;
	struct certs_ca *ca = NULL;
	struct permits p;
	const char *dir = NULL, *cn = NULL, *from[16];
	char why[512], what[64];
	size_t i, nfrom = 0;
	unsigned days = 0;
	int ch, rc = SL_EXIT_INVALID;

	memset(&p, 0, sizeof(p));
	optind = 0;
	opterr = 1;
	while ((ch = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
		switch (ch) {
		case 'd':
			dir = optarg;
			break;
		case 'D':
			if (parse_days(optarg, &days) == -1)
				return certs_usage();
			break;
		case 'n':
			cn = optarg;
			break;
		case 'p':
			break;
		case 'P':
			if (nfrom == SL_NELEM(from)) {
				fprintf(stderr,
				    "sluice certs: --permit-from: "
				    "at most 16\n");
				return certs_usage();
			}
			from[nfrom++] = optarg;
			break;
		default:
			return certs_usage();
		}
	}
	if (optind != argc) {
		fprintf(stderr, "sluice certs init: unexpected argument: %s\n",
		    argv[optind]);
		return certs_usage();
	}
	if (dir == NULL || dir[0] == '\0') {
		fprintf(stderr, "sluice certs init: --dir is required\n");
		return certs_usage();
	}
	if (cn != NULL && (cn[0] == '\0' || strlen(cn) > 64)) {
		fprintf(stderr,
		    "sluice certs: --name: a common name of 1 to 64 bytes\n");
		return certs_usage();
	}
	/* A second pass for --permit, in command-line order. */
	optind = 0;
	opterr = 0;
	i = 0;
	while ((ch = getopt_long(argc, argv, "+", opts, NULL)) != -1)
		if (ch == 'p') {
			snprintf(what, sizeof(what), "--permit #%zu", ++i);
			if (permits_add(&p, optarg, what) == -1)
				goto out;
		}
	for (i = 0; i < nfrom; i++)
		if (permits_from_policy(from[i], &p) == -1)
			goto out;
	if (mkdir(dir, 0700) == -1 && errno != EEXIST) {
		fprintf(stderr, "sluice certs: --dir %s: %s\n", dir,
		    strerror(errno));
		goto out;
	}
	memset(&cp, 0, sizeof(cp));
	cp.cp_cn = cn;
	cp.cp_days = days;
	cp.cp_permit = (const char *const *)p.p_host;
	cp.cp_npermit = p.p_n;
	if ((ca = certs_ca_generate(&cp, time(NULL), why, sizeof(why))) ==
	    NULL) {
		fprintf(stderr, "sluice certs: %s\n", why);
		goto out;
	}
	if (certs_ca_write(ca, dir, why, sizeof(why)) == -1) {
		fprintf(stderr, "sluice certs: --dir %s: %s\n", dir, why);
		goto out;
	}
	printf("wrote %s/ca.key (mode 0600) and %s/ca.pem\n", dir, dir);
	if (p.p_n == 0)
		fprintf(stderr,
		    "sluice certs: warning: no --permit or --permit-from: the "
		    "CA is unconstrained and can sign any name\n");
	rc = show_cert(certs_ca_cert(ca), "ca.pem") == 0 ? SL_EXIT_OK :
							   SL_EXIT_INVALID;
out:
	certs_ca_free(ca);
	permits_free(&p);
	return rc;
}

/* DIR/ca.pem (PEM or DER) as a certificate; NULL (said). */
static X509 *
load_cert(const char *path)
{
	unsigned char *buf;
	const unsigned char *q;
	size_t len;
	char why[512];
	BIO *b;
	X509 *x = NULL;

	if (certs_read_public(path, &buf, &len, why, sizeof(why)) == -1) {
		fprintf(stderr, "sluice certs: %s\n", why);
		return NULL;
	}
	if (len <= INT_MAX && (b = BIO_new_mem_buf(buf, (int)len)) != NULL) {
		x = PEM_read_bio_X509(b, NULL, NULL, NULL);
		BIO_free(b);
		if (x == NULL) {
			q = buf;
			x = d2i_X509(NULL, &q, (long)len);
		}
	}
	ERR_clear_error();
	free(buf);
	if (x == NULL)
		fprintf(stderr,
		    "sluice certs: %s: not a PEM or DER certificate\n", path);
	return x;
}

static int
certs_show_cmd(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "dir", required_argument, NULL, 'd' },
		{ NULL, 0, NULL, 0 },
	};
	const char *dir = NULL;
	char path[PATH_MAX];
	X509 *x;
	int ch, rc;

	optind = 0;
	opterr = 1;
	while ((ch = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
		if (ch != 'd')
			return certs_usage();
		dir = optarg;
	}
	if (optind != argc) {
		fprintf(stderr, "sluice certs show: unexpected argument: %s\n",
		    argv[optind]);
		return certs_usage();
	}
	if (dir == NULL || dir[0] == '\0') {
		fprintf(stderr, "sluice certs show: --dir is required\n");
		return certs_usage();
	}
	if ((size_t)snprintf(path, sizeof(path), "%s/ca.pem", dir) >=
	    sizeof(path)) {
		fprintf(stderr, "sluice certs: --dir: too long\n");
		return certs_usage();
	}
	if ((x = load_cert(path)) == NULL)
		return SL_EXIT_INVALID;
	rc = show_cert(x, path) == 0 ? SL_EXIT_OK : SL_EXIT_INVALID;
	X509_free(x);
	return rc;
}

int
cmd_certs(int argc, char **argv)
{
	if (argc < 2)
		return certs_usage();
	if (strcmp(argv[1], "init") == 0)
		return certs_init(argc - 1, argv + 1);
	if (strcmp(argv[1], "show") == 0)
		return certs_show_cmd(argc - 1, argv + 1);
	fprintf(stderr, "sluice certs: unknown subcommand: %s\n", argv[1]);
	return certs_usage();
}
