/*
 * Gateway identity (DESIGN.md "Gateway identity", docs/deployment.md): the
 * policy's "sandboxes" section, and the registry in force at run time (the
 * policy's sandboxes and those added over the admin socket, persisted in
 * state_dir). A connection's source address names its sandbox through a
 * hash of every registered address: open addressing, a power-of-two table
 * at most half full, keyed with a random seed so that a sandbox cannot
 * pick colliding addresses. The table is rebuilt when a sandbox goes (an
 * operator's action, not a request's).
 */
#include <sys/socket.h>
#include <sys/stat.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <openssl/rand.h>

#include "proxy/config/config.h"
#include "proxy/config/config_int.h"
#include "proxy/util/util.h"

/*
 * One sandbox's parts.
 */
static int
sbx_valid_id(const char *id)
{
	size_t i, n = strlen(id);

	if (n == 0 || n > SANDBOX_ID_MAX || !isalnum((unsigned char)id[0]))
		return 0;
	for (i = 0; i < n; i++)
		if (!(isalnum((unsigned char)id[i]) || id[i] == '-' ||
			id[i] == '_' || id[i] == '.'))
			return 0;
	return 1;
}

/* A sandbox_interfaces pattern: an exact name, or "prefix*". */
static int
sbx_iface_matches(const char *pat, const char *name)
{
	size_t n = strlen(pat);

	if (n > 0 && pat[n - 1] == '*')
		return strncmp(pat, name, n - 1) == 0;
	return strcmp(pat, name) == 0;
}

int
sandbox_addr_of(const struct sockaddr *sa, struct sandbox_addr *out)
{
	memset(out, 0, sizeof(*out));
	if (sa == NULL)
		return -1;
	if (sa->sa_family == AF_INET) {
		memcpy(out->sa_b, &((const struct sockaddr_in *)sa)->sin_addr,
		    4);
		out->sa_fam = 4;
		return 0;
	}
	if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a =
		    &((const struct sockaddr_in6 *)sa)->sin6_addr;

		if (IN6_IS_ADDR_V4MAPPED(a)) {
			memcpy(out->sa_b, a->s6_addr + 12, 4);
			out->sa_fam = 4;
		} else {
			memcpy(out->sa_b, a->s6_addr, 16);
			out->sa_fam = 6;
		}
		return 0;
	}
	return -1;
}

void
sandbox_addr_str(const struct sandbox_addr *a, char *buf, size_t len)
{
	if (a->sa_fam == 0 ||
	    inet_ntop(a->sa_fam == 4 ? AF_INET : AF_INET6, a->sa_b, buf,
		(socklen_t)len) == NULL)
		snprintf(buf, len, "?");
}

/* An IP literal a sandbox may send from: unicast, not loopback. */
static int
sbx_parse_addr(const char *s, struct sandbox_addr *out, const char **bad)
{
	struct in6_addr a6;
	struct in_addr a4;

	memset(out, 0, sizeof(*out));
	if (inet_pton(AF_INET, s, &a4) == 1) {
		uint32_t h = ntohl(a4.s_addr);

		if (h == 0 || h == 0xffffffffu || (h >> 24) == 127 ||
		    (h >> 28) == 0xe) {
			*bad = "not a unicast address";
			return -1;
		}
		out->sa_fam = 4;
		memcpy(out->sa_b, &a4, 4);
		return 0;
	}
	if (inet_pton(AF_INET6, s, &a6) == 1) {
		if (IN6_IS_ADDR_UNSPECIFIED(&a6) || IN6_IS_ADDR_LOOPBACK(&a6) ||
		    IN6_IS_ADDR_MULTICAST(&a6)) {
			*bad = "not a unicast address";
			return -1;
		}
		if (IN6_IS_ADDR_V4MAPPED(&a6)) {
			*bad = "an IPv4-mapped address (write the IPv4 one)";
			return -1;
		}
		out->sa_fam = 6;
		memcpy(out->sa_b, &a6, 16);
		return 0;
	}
	*bad = "not an IP address";
	return -1;
}

static int
sbx_addr_eq(const struct sandbox_addr *a, const struct sandbox_addr *b)
{
	return a->sa_fam == b->sa_fam &&
	    memcmp(a->sa_b, b->sa_b, a->sa_fam == 4 ? 4 : 16) == 0;
}

int
sandbox_conf_make(const struct config *cf, const char *id, const char *iface,
    const char *const *addrs, size_t naddrs, struct sandbox_conf *out,
    char *why, size_t whylen)
{
	const char *bad = "";
	size_t i, j, n;

	memset(out, 0, sizeof(*out));
	if (!sbx_valid_id(id)) {
		snprintf(why, whylen,
		    "id: \"%.*s\": 1-%d letters, digits, '-', '_' or '.', "
		    "starting with a letter or digit",
		    (int)strcspn(id, "\r\n"), id, SANDBOX_ID_MAX);
		return -1;
	}
	n = strlen(iface);
	if (n == 0 || n >= SANDBOX_IFACE_MAX) {
		snprintf(why, whylen, "interface: \"%.*s\": 1-%d bytes",
		    (int)strcspn(iface, "\r\n"), iface, SANDBOX_IFACE_MAX - 1);
		return -1;
	}
	for (i = 0; i < n; i++)
		if (!(isalnum((unsigned char)iface[i]) || iface[i] == '-' ||
			iface[i] == '_' || iface[i] == '.')) {
			snprintf(why, whylen,
			    "interface: \"%.*s\": an exact name (letters, "
			    "digits, '-', '_', '.')",
			    (int)strcspn(iface, "\r\n"), iface);
			return -1;
		}
	for (i = 0; i < cf->cf_np.np_nifaces; i++)
		if (sbx_iface_matches(cf->cf_np.np_ifaces[i], iface))
			break;
	if (i == cf->cf_np.np_nifaces) {
		snprintf(why, whylen,
		    "interface: \"%s\" matches no netpolicy.sandbox_interfaces "
		    "pattern",
		    iface);
		return -1;
	}
	if (naddrs == 0 || naddrs > SANDBOX_MAX_ADDRS) {
		snprintf(why, whylen, "addresses: 1 to %d IP addresses",
		    SANDBOX_MAX_ADDRS);
		return -1;
	}
	for (i = 0; i < naddrs; i++) {
		if (sbx_parse_addr(addrs[i], &out->sc_addrs[i], &bad) == -1) {
			snprintf(why, whylen, "addresses[%zu]: \"%.*s\": %s", i,
			    (int)strcspn(addrs[i], "\r\n"), addrs[i], bad);
			return -1;
		}
		for (j = 0; j < i; j++)
			if (sbx_addr_eq(&out->sc_addrs[i], &out->sc_addrs[j])) {
				snprintf(why, whylen,
				    "addresses[%zu]: listed twice", i);
				return -1;
			}
	}
	snprintf(out->sc_id, sizeof(out->sc_id), "%s", id);
	snprintf(out->sc_iface, sizeof(out->sc_iface), "%s", iface);
	out->sc_naddrs = naddrs;
	return 0;
}

/* One JSON sandbox object at jp (the policy's, or the state file's). */
static int
sbx_from_json(const struct config *cf, const cJSON *el, struct sandbox_conf *sc,
    char *why, size_t whylen)
{
	static const char *const keys[] = { "id", "interface", "addresses",
		NULL };
	const char *addrs[SANDBOX_MAX_ADDRS];
	const cJSON *id, *ifc, *arr, *a, *k;
	size_t n = 0;

	if (!cJSON_IsObject(el)) {
		snprintf(why, whylen, "must be an object");
		return -1;
	}
	for (k = el->child; k != NULL; k = k->next) {
		size_t i;

		for (i = 0; keys[i] != NULL; i++)
			if (k->string != NULL &&
			    strcmp(k->string, keys[i]) == 0)
				break;
		if (keys[i] == NULL) {
			snprintf(why, whylen, "unknown key \"%.*s\"",
			    k->string != NULL ?
				(int)strcspn(k->string, "\r\n") :
				0,
			    k->string != NULL ? k->string : "");
			return -1;
		}
	}
	id = cJSON_GetObjectItemCaseSensitive(el, "id");
	ifc = cJSON_GetObjectItemCaseSensitive(el, "interface");
	arr = cJSON_GetObjectItemCaseSensitive(el, "addresses");
	if (!cJSON_IsString(id) || !cJSON_IsString(ifc)) {
		snprintf(why, whylen, "%s: required, a string",
		    !cJSON_IsString(id) ? "id" : "interface");
		return -1;
	}
	if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) == 0 ||
	    cJSON_GetArraySize(arr) > SANDBOX_MAX_ADDRS) {
		snprintf(why, whylen,
		    "addresses: required, an array of 1 to %d IP addresses",
		    SANDBOX_MAX_ADDRS);
		return -1;
	}
	cJSON_ArrayForEach(a, arr) {
		if (!cJSON_IsString(a)) {
			snprintf(why, whylen, "addresses[%zu]: not a string",
			    n);
			return -1;
		}
		addrs[n++] = a->valuestring;
	}
	return sandbox_conf_make(cf, id->valuestring, ifc->valuestring, addrs,
	    n, sc, why, whylen);
}

/* Whether two sandboxes share an id, an interface or an address. */
static const char *
sbx_clash(const struct sandbox_conf *a, const struct sandbox_conf *b)
{
	size_t i, j;

	if (strcmp(a->sc_id, b->sc_id) == 0)
		return "id";
	if (strcmp(a->sc_iface, b->sc_iface) == 0)
		return "interface";
	for (i = 0; i < a->sc_naddrs; i++)
		for (j = 0; j < b->sc_naddrs; j++)
			if (sbx_addr_eq(&a->sc_addrs[i], &b->sc_addrs[j]))
				return "addresses";
	return NULL;
}

int
cf_load_sandboxes(struct cfctx *cx, const cJSON *root)
{
	struct config *cf = cx->cf;
	const cJSON *arr, *el;
	char jp[64], why[384];
	const char *what;
	size_t i = 0, j;
	int n;

	if ((n = cf_array(cx, "", root, "sandboxes", 0, SANDBOX_MAX, &arr)) ==
	    -1)
		return -1;
	if (arr == NULL)
		return 0;
	if (cf->cf_np.np_mode != NETPOLICY_GATEWAY)
		return cf_err(cx, "sandboxes",
		    "only in gateway mode (netpolicy.mode \"gateway\")");
	if (n == 0)
		return 0;
	if ((cf->cf_sandboxes = cf_calloc(cx, "sandboxes", (size_t)n,
		 sizeof(*cf->cf_sandboxes))) == NULL)
		return -1;
	cJSON_ArrayForEach(el, arr) {
		cf_idx(jp, sizeof(jp), "sandboxes", i);
		if (sbx_from_json(cf, el, &cf->cf_sandboxes[i], why,
			sizeof(why)) == -1)
			return cf_err(cx, jp, "%s", why);
		for (j = 0; j < i; j++)
			if ((what = sbx_clash(&cf->cf_sandboxes[i],
				 &cf->cf_sandboxes[j])) != NULL)
				return cf_err(cx, jp,
				    "%s: also sandboxes[%zu]'s (each sandbox "
				    "has its own id, interface and addresses)",
				    what, j);
		cf->cf_nsandboxes = ++i;
	}
	return 0;
}

/*
 * The registry.
 */
struct sbx_slot {
	struct sandbox_addr ss_addr; /* sa_fam 0: empty */
	struct sandbox *ss_sbx;
};

struct sbx_registry {
	struct sandbox **sr_list; /* in the order added */
	size_t sr_n, sr_cap;
	struct sbx_slot *sr_slots;
	size_t sr_nslots; /* a power of two, 0 when empty */
	size_t sr_naddrs;
	uint64_t sr_seed[2];
};

struct sbx_registry *
sbx_registry_new(void)
{
	struct sbx_registry *r;

	if ((r = calloc(1, sizeof(*r))) == NULL)
		return NULL;
	/* A fixed seed would only weaken the spreading, never a decision. */
	if (RAND_bytes((unsigned char *)r->sr_seed, sizeof(r->sr_seed)) != 1)
		r->sr_seed[0] = r->sr_seed[1] = 0x9e3779b97f4a7c15ULL;
	return r;
}

struct sandbox *
sandbox_ref(struct sandbox *sb)
{
	sb->sb_refs++;
	return sb;
}

void
sandbox_unref(struct sandbox *sb)
{
	if (sb != NULL && --sb->sb_refs == 0)
		free(sb);
}

void
sbx_registry_free(struct sbx_registry *r)
{
	size_t i;

	if (r == NULL)
		return;
	for (i = 0; i < r->sr_n; i++) {
		r->sr_list[i]->sb_removed = 1;
		sandbox_unref(r->sr_list[i]);
	}
	free(r->sr_list);
	free(r->sr_slots);
	free(r);
}

static size_t
sbx_hash(const struct sbx_registry *r, const struct sandbox_addr *a)
{
	uint64_t h = r->sr_seed[0] ^ a->sa_fam;
	size_t i;

	for (i = 0; i < 16; i++) {
		h ^= a->sa_b[i];
		h *= 0x100000001b3ULL;
	}
	h ^= r->sr_seed[1];
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	return (size_t)h;
}

static void
sbx_slot_put(struct sbx_slot *slots, size_t nslots,
    const struct sbx_registry *r, const struct sandbox_addr *a,
    struct sandbox *sb)
{
	size_t i = sbx_hash(r, a) & (nslots - 1);

	while (slots[i].ss_addr.sa_fam != 0)
		i = (i + 1) & (nslots - 1);
	slots[i].ss_addr = *a;
	slots[i].ss_sbx = sb;
}

/* A table for want addresses (at most half full), filled from the list. */
static int
sbx_rehash(struct sbx_registry *r, size_t want)
{
	struct sbx_slot *slots;
	size_t n = 16, i, j;

	while (n < 2 * want)
		n *= 2;
	if ((slots = calloc(n, sizeof(*slots))) == NULL)
		return -1;
	for (i = 0; i < r->sr_n; i++)
		for (j = 0; j < r->sr_list[i]->sb_conf.sc_naddrs; j++)
			sbx_slot_put(slots, n, r,
			    &r->sr_list[i]->sb_conf.sc_addrs[j], r->sr_list[i]);
	free(r->sr_slots);
	r->sr_slots = slots;
	r->sr_nslots = n;
	return 0;
}

static struct sandbox *
sbx_lookup_addr(const struct sbx_registry *r, const struct sandbox_addr *a)
{
	size_t i;

	if (r == NULL || r->sr_nslots == 0)
		return NULL;
	i = sbx_hash(r, a) & (r->sr_nslots - 1);
	while (r->sr_slots[i].ss_addr.sa_fam != 0) {
		if (sbx_addr_eq(&r->sr_slots[i].ss_addr, a))
			return r->sr_slots[i].ss_sbx;
		i = (i + 1) & (r->sr_nslots - 1);
	}
	return NULL;
}

struct sandbox *
sbx_registry_lookup(const struct sbx_registry *r, const struct sockaddr *sa)
{
	struct sandbox_addr a;

	if (sandbox_addr_of(sa, &a) == -1)
		return NULL;
	return sbx_lookup_addr(r, &a);
}

struct sandbox *
sbx_registry_find(const struct sbx_registry *r, const char *id)
{
	size_t i;

	for (i = 0; r != NULL && i < r->sr_n; i++)
		if (strcmp(r->sr_list[i]->sb_conf.sc_id, id) == 0)
			return r->sr_list[i];
	return NULL;
}

size_t
sbx_registry_count(const struct sbx_registry *r)
{
	return r != NULL ? r->sr_n : 0;
}

struct sandbox *
sbx_registry_at(const struct sbx_registry *r, size_t i)
{
	return r != NULL && i < r->sr_n ? r->sr_list[i] : NULL;
}

int
sbx_registry_add(struct sbx_registry *r, const struct sandbox_conf *sc,
    int admin, char *why, size_t whylen)
{
	struct sandbox *sb;
	const char *what;
	size_t i, cap;

	if (r->sr_n >= SANDBOX_MAX) {
		snprintf(why, whylen, "more than %d sandboxes", SANDBOX_MAX);
		return -1;
	}
	for (i = 0; i < r->sr_n; i++)
		if ((what = sbx_clash(sc, &r->sr_list[i]->sb_conf)) != NULL) {
			snprintf(why, whylen, "%s: also sandbox %s's", what,
			    r->sr_list[i]->sb_conf.sc_id);
			return -1;
		}
	if (r->sr_n == r->sr_cap) {
		struct sandbox **l;

		cap = r->sr_cap ? 2 * r->sr_cap : 16;
		if ((l = reallocarray(r->sr_list, cap,
			 sizeof(struct sandbox *))) == NULL)
			goto nomem;
		r->sr_list = l;
		r->sr_cap = cap;
	}
	if ((sb = calloc(1, sizeof(*sb))) == NULL)
		goto nomem;
	sb->sb_conf = *sc;
	sb->sb_admin = admin;
	sb->sb_refs = 1;
	r->sr_list[r->sr_n++] = sb;
	if (2 * (r->sr_naddrs + sc->sc_naddrs) > r->sr_nslots) {
		if (sbx_rehash(r, r->sr_naddrs + sc->sc_naddrs) == -1) {
			r->sr_n--;
			free(sb);
			goto nomem;
		}
	} else
		for (i = 0; i < sc->sc_naddrs; i++)
			sbx_slot_put(r->sr_slots, r->sr_nslots, r,
			    &sc->sc_addrs[i], sb);
	r->sr_naddrs += sc->sc_naddrs;
	return 0;
nomem:
	snprintf(why, whylen, "out of memory");
	return -1;
}

/* Take entry i out: the table is rebuilt without it (or left, on ENOMEM). */
static void
sbx_remove_at(struct sbx_registry *r, size_t i)
{
	struct sandbox *sb = r->sr_list[i];
	size_t j;

	memmove(&r->sr_list[i], &r->sr_list[i + 1],
	    (r->sr_n - i - 1) * sizeof(struct sandbox *));
	r->sr_n--;
	r->sr_naddrs -= sb->sb_conf.sc_naddrs;
	if (sbx_rehash(r, r->sr_naddrs) == -1) {
		/* Out of memory: empty its slots in place (keep probing). */
		for (j = 0; j < r->sr_nslots; j++)
			if (r->sr_slots[j].ss_sbx == sb) {
				/* No source is all ones: it never matches. */
				memset(&r->sr_slots[j].ss_addr.sa_b, 0xff,
				    sizeof(r->sr_slots[j].ss_addr.sa_b));
				r->sr_slots[j].ss_sbx = NULL;
			}
	}
	sb->sb_removed = 1;
	sandbox_unref(sb);
}

int
sbx_registry_del(struct sbx_registry *r, const char *id)
{
	size_t i;

	for (i = 0; i < r->sr_n; i++)
		if (strcmp(r->sr_list[i]->sb_conf.sc_id, id) == 0) {
			sbx_remove_at(r, i);
			return 0;
		}
	return -1;
}

static int
sbx_conf_eq(const struct sandbox_conf *a, const struct sandbox_conf *b)
{
	size_t i;

	if (strcmp(a->sc_id, b->sc_id) != 0 ||
	    strcmp(a->sc_iface, b->sc_iface) != 0 ||
	    a->sc_naddrs != b->sc_naddrs)
		return 0;
	for (i = 0; i < a->sc_naddrs; i++)
		if (!sbx_addr_eq(&a->sc_addrs[i], &b->sc_addrs[i]))
			return 0;
	return 1;
}

int
sbx_registry_sync(struct sbx_registry *r, const struct config *cf, char *why,
    size_t whylen)
{
	size_t i, j, dropped = 0;
	struct sandbox *sb;
	int keep;

	/*
	 * The policy's that stay as they are keep their state; an admin
	 * one stays unless it clashes with one of the policy's.
	 */
	for (i = 0; i < r->sr_n;) {
		sb = r->sr_list[i];
		for (keep = sb->sb_admin, j = 0; j < cf->cf_nsandboxes; j++) {
			if (!sb->sb_admin &&
			    sbx_conf_eq(&sb->sb_conf, &cf->cf_sandboxes[j])) {
				keep = 1;
				break;
			}
			if (sb->sb_admin &&
			    sbx_clash(&sb->sb_conf, &cf->cf_sandboxes[j]) !=
				NULL) {
				keep = 0;
				break;
			}
		}
		if (keep) {
			i++;
			continue;
		}
		if (sb->sb_admin && dropped++ == 0)
			snprintf(why, whylen,
			    "admin sandbox %s clashes with the policy's "
			    "sandboxes[%zu]; the policy's is used",
			    sb->sb_conf.sc_id, j);
		sbx_remove_at(r, i);
	}
	for (j = 0; j < cf->cf_nsandboxes; j++) {
		if ((sb = sbx_registry_find(r, cf->cf_sandboxes[j].sc_id)) !=
			NULL &&
		    !sb->sb_admin)
			continue;
		if (sbx_registry_add(r, &cf->cf_sandboxes[j], 0, why, whylen) ==
		    -1)
			return -1;
	}
	return dropped > 0 ? 1 : 0;
}

/*
 * The persisted admin sandboxes.
 */
static int
sbx_state_path(const char *dir, char *buf, size_t len, const char *suffix)
{
	int n = snprintf(buf, len, "%s/%s%s", dir, SBX_STATE_FILE, suffix);

	return n < 0 || (size_t)n >= len ? -1 : 0;
}

int
sbx_registry_save(const struct sbx_registry *r, int dirfd, const char *dir,
    char *why, size_t whylen)
{
	char path[4096], tmp[4096], addr[INET6_ADDRSTRLEN];
	const char *pn = SBX_STATE_FILE, *tn = SBX_STATE_FILE ".tmp";
	cJSON *root, *o, *a;
	char *text = NULL;
	size_t i, j, len;
	int fd = -1, rc = -1;

	if (sbx_state_path(dir, path, sizeof(path), "") == -1 ||
	    sbx_state_path(dir, tmp, sizeof(tmp), ".tmp") == -1) {
		snprintf(why, whylen, "state_dir: path too long");
		return -1;
	}
	if (dirfd == -1) {
		dirfd = AT_FDCWD;
		pn = path;
		tn = tmp;
	}
	if ((root = cJSON_CreateArray()) == NULL)
		goto nomem;
	for (i = 0; i < r->sr_n; i++) {
		const struct sandbox_conf *sc = &r->sr_list[i]->sb_conf;

		if (!r->sr_list[i]->sb_admin)
			continue;
		if ((o = cJSON_CreateObject()) == NULL)
			goto nomem;
		cJSON_AddItemToArray(root, o);
		if (cJSON_AddStringToObject(o, "id", sc->sc_id) == NULL ||
		    cJSON_AddStringToObject(o, "interface", sc->sc_iface) ==
			NULL ||
		    (a = cJSON_AddArrayToObject(o, "addresses")) == NULL)
			goto nomem;
		for (j = 0; j < sc->sc_naddrs; j++) {
			sandbox_addr_str(&sc->sc_addrs[j], addr, sizeof(addr));
			cJSON_AddItemToArray(a, cJSON_CreateString(addr));
		}
	}
	if ((text = cJSON_Print(root)) == NULL)
		goto nomem;
	len = strlen(text);
	fd = openat(dirfd, tn,
	    O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd == -1 || write(fd, text, len) != (ssize_t)len ||
	    write(fd, "\n", 1) != 1 || fsync(fd) == -1) {
		snprintf(why, whylen, "%s: %s", tmp, strerror(errno));
		goto out;
	}
	if (close(fd) == -1 || renameat(dirfd, tn, dirfd, pn) == -1) {
		fd = -1;
		snprintf(why, whylen, "%s: %s", path, strerror(errno));
		(void)unlinkat(dirfd, tn, 0);
		goto out;
	}
	fd = -1;
	rc = 0;
	goto out;
nomem:
	snprintf(why, whylen, "%s: out of memory", path);
out:
	if (fd != -1) {
		close(fd);
		(void)unlinkat(dirfd, tn, 0);
	}
	free(text);
	cJSON_Delete(root);
	return rc;
}

int
sbx_registry_load(struct sbx_registry *r, const struct config *cf,
    const char *dir, char *why, size_t whylen)
{
	char path[4096], sub[384];
	unsigned char *buf;
	struct sandbox_conf sc;
	const cJSON *el;
	cJSON *root;
	size_t len, i = 0, skipped = 0;

	if (sbx_state_path(dir, path, sizeof(path), "") == -1) {
		snprintf(why, whylen, "state_dir: path too long");
		return -1;
	}
	if (access(path, F_OK) == -1 && errno == ENOENT)
		return 0;
	if (cf_read_path(path, &buf, &len, why, whylen) == -1)
		return -1;
	root = cJSON_ParseWithLength((const char *)buf, len);
	free(buf);
	if (!cJSON_IsArray(root)) {
		snprintf(why, whylen, "%s: not a JSON array", path);
		cJSON_Delete(root);
		return -1;
	}
	cJSON_ArrayForEach(el, root) {
		if (sbx_from_json(cf, el, &sc, sub, sizeof(sub)) == -1) {
			snprintf(why, whylen, "%s: [%zu]: %s", path, i, sub);
			cJSON_Delete(root);
			return -1;
		}
		/* One the policy now has (or out of memory): left out. */
		if (sbx_registry_add(r, &sc, 1, sub, sizeof(sub)) == -1 &&
		    skipped++ == 0)
			snprintf(why, whylen, "%s: [%zu] (%s) left out: %s",
			    path, i, sc.sc_id, sub);
		i++;
	}
	cJSON_Delete(root);
	return skipped > 0 ? 1 : 0;
}

int64_t
sandbox_rate(struct sandbox *sb, uint64_t rps, int64_t now_us)
{
	int64_t next, wait;

	if ((wait = sl_gcra(sb->sb_tat_us, rps, now_us, &next)) == 0)
		sb->sb_tat_us = next;
	return wait;
}
