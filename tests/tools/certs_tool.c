/*
 * certs_tool: drives the certs/ library from the integration tests (the
 * `sluice certs` CLI comes later, on top of the same calls).
 *
 *   certs_tool init DIR [--days N] [--name CN] [--permit HOST]...
 *   certs_tool ephemeral OUT.pem [--permit HOST]...
 *   certs_tool show DIR
 *   certs_tool leaf DIR HOST OUT.pem [--days N]
 *   certs_tool serve DIR SOCKET N HOST
 *
 * serve listens on a Unix socket (no address needed: openssl s_client
 * -unix), takes N connections one after the other, expects HOST on each,
 * and prints one line per connection: "ok" and the first request line it
 * read, or "fail" and certs_server_failure_str(). Exit 0, or 1 with the
 * error on stderr.
 */
#include <sys/socket.h>
#include <sys/un.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>

#include "certs/certs.h"

static char why[1024];

static int
die(const char *what)
{
	fprintf(stderr, "certs_tool: %s: %s\n", what, why);
	return 1;
}

static struct certs_ca *
load(const char *dir)
{
	char cert[4096], key[4096];

	snprintf(cert, sizeof(cert), "%s/ca.pem", dir);
	snprintf(key, sizeof(key), "%s/ca.key", dir);
	return certs_ca_load(cert, key, CERTS_ANY_OWNER, time(NULL), why,
	    sizeof(why));
}

static int
cmd_init(int argc, char **argv, int ephemeral)
{
	const char *permit[CERTS_CA_MAX_PERMIT];
	struct certs_ca_params p = { NULL, 0, permit, 0 };
	struct certs_ca *ca;
	int i, rc;

	for (i = 3; i < argc; i++) {
		if (i + 1 >= argc)
			return fprintf(stderr, "usage\n"), 2;
		if (strcmp(argv[i], "--days") == 0)
			p.cp_days = (unsigned)strtoul(argv[++i], NULL, 10);
		else if (strcmp(argv[i], "--name") == 0)
			p.cp_cn = argv[++i];
		else if (strcmp(argv[i], "--permit") == 0 &&
		    p.cp_npermit < CERTS_CA_MAX_PERMIT)
			permit[p.cp_npermit++] = argv[++i];
		else
			return fprintf(stderr, "usage\n"), 2;
	}
	if ((ca = certs_ca_generate(&p, time(NULL), why, sizeof(why))) == NULL)
		return die("init");
	rc = ephemeral ? certs_ca_write_cert(ca, argv[2], why, sizeof(why)) :
			 certs_ca_write(ca, argv[2], why, sizeof(why));
	certs_ca_free(ca);
	return rc == 0 ? 0 : die(argv[2]);
}

static int
cmd_show(const char *dir)
{
	struct certs_ca *ca = load(dir);
	char buf[16384];

	if (ca == NULL)
		return die("show");
	if (certs_show(certs_ca_cert(ca), buf, sizeof(buf)) < 0) {
		certs_ca_free(ca);
		return 1;
	}
	fputs(buf, stdout);
	certs_ca_free(ca);
	return 0;
}

static int
cmd_leaf(int argc, char **argv)
{
	struct certs_ca *ca;
	EVP_PKEY *k;
	X509 *x;
	FILE *f;
	unsigned days = 1;

	if (argc == 7 && strcmp(argv[5], "--days") == 0)
		days = (unsigned)strtoul(argv[6], NULL, 10);
	else if (argc != 5)
		return fprintf(stderr, "usage\n"), 2;
	if ((ca = load(argv[2])) == NULL)
		return die("leaf");
	if ((k = certs_leaf_key_new(why, sizeof(why))) == NULL ||
	    (x = certs_leaf_mint(ca, k, argv[3], days, time(NULL), why,
		 sizeof(why))) == NULL) {
		EVP_PKEY_free(k);
		certs_ca_free(ca);
		return die(argv[3]);
	}
	if ((f = fopen(argv[4], "w")) == NULL || PEM_write_X509(f, x) != 1 ||
	    fclose(f) != 0) {
		perror(argv[4]);
		return 1;
	}
	X509_free(x);
	EVP_PKEY_free(k);
	certs_ca_free(ca);
	return 0;
}

static int
cmd_serve(char **argv)
{
	struct sockaddr_un sun;
	struct certs_ca *ca;
	struct certs_cache *cc;
	SSL_CTX *ctx;
	int lfd, n = atoi(argv[4]), i;

	if ((ca = load(argv[2])) == NULL)
		return die("serve");
	if ((cc = certs_cache_new(ca, 0, 0, why, sizeof(why))) == NULL ||
	    (ctx = certs_server_ctx(cc, why, sizeof(why))) == NULL)
		return die("serve");
	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", argv[3]);
	if ((lfd = socket(AF_UNIX, SOCK_STREAM, 0)) == -1 ||
	    bind(lfd, (struct sockaddr *)&sun, sizeof(sun)) == -1 ||
	    listen(lfd, 4) == -1) {
		perror(argv[3]);
		return 1;
	}
	printf("listening\n");
	fflush(stdout);
	for (i = 0; i < n; i++) {
		int fd = accept(lfd, NULL, NULL), r;
		char line[256];
		SSL *ssl;

		if (fd == -1) {
			perror("accept");
			return 1;
		}
		if ((ssl = SSL_new(ctx)) == NULL || SSL_set_fd(ssl, fd) != 1 ||
		    certs_server_expect(ssl, argv[5], why, sizeof(why)) != 0)
			return die("ssl");
		if (SSL_accept(ssl) != 1) {
			printf("fail %s\n",
			    certs_server_failure_str(
				certs_server_failure(ssl)));
		} else {
			r = SSL_read(ssl, line, sizeof(line) - 1);
			line[r > 0 ? r : 0] = '\0';
			line[strcspn(line, "\r\n")] = '\0';
			printf("ok %s\n", line);
			SSL_write(ssl, "HTTP/1.1 204 No Content\r\n\r\n", 27);
			SSL_shutdown(ssl);
		}
		fflush(stdout);
		ERR_clear_error();
		SSL_free(ssl);
		close(fd);
	}
	close(lfd);
	unlink(argv[3]);
	SSL_CTX_free(ctx);
	certs_cache_free(cc);
	certs_ca_free(ca);
	return 0;
}

int
main(int argc, char **argv)
{
	if (argc >= 3 && strcmp(argv[1], "init") == 0)
		return cmd_init(argc, argv, 0);
	if (argc >= 3 && strcmp(argv[1], "ephemeral") == 0)
		return cmd_init(argc, argv, 1);
	if (argc == 3 && strcmp(argv[1], "show") == 0)
		return cmd_show(argv[2]);
	if (argc >= 5 && strcmp(argv[1], "leaf") == 0)
		return cmd_leaf(argc, argv);
	if (argc == 6 && strcmp(argv[1], "serve") == 0)
		return cmd_serve(argv);
	fprintf(stderr,
	    "usage: certs_tool init DIR [--days N] [--name CN] "
	    "[--permit HOST]...\n"
	    "       certs_tool ephemeral OUT.pem [--permit HOST]...\n"
	    "       certs_tool show DIR\n"
	    "       certs_tool leaf DIR HOST OUT.pem [--days N]\n"
	    "       certs_tool serve DIR SOCKET N HOST\n");
	return 2;
}
