/*
 * The steps that take a process's power away before it runs code we do
 * not trust: capabilities, no_new_privs, the seccomp filter, Landlock, the
 * user and groups. Each step stands alone and reports what failed; the
 * order they run in (identity, capabilities, no_new_privs, Landlock,
 * seccomp) is the caller's (ns.c, later the privsep engine).
 */
#include <sys/types.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include <linux/capability.h>
#include <linux/landlock.h>
#include <linux/netlink.h>

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "proxy/util/util.h"
#include "proxy/sandbox/confine_int.h"
#include "proxy/sandbox/sandbox.h"

/* Rights newer than Debian 12's headers (linux/landlock.h of 6.1). */
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15)
#endif

#define PER_QUERY 0xffffffffULL /* personality(): ask, change nothing */

int
sandbox_drop_bounding(char *why, size_t whylen)
{
	unsigned long cap;
	int in;

	for (cap = 0; cap < 64; cap++) {
		if ((in = prctl(PR_CAPBSET_READ, cap, 0, 0, 0)) == -1)
			break; /* EINVAL: past the kernel's last capability */
		if (in == 0)
			continue; /* gone already: dropping needs CAP_SETPCAP */
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == -1) {
			snprintf(why, whylen,
			    "capabilities: drop %lu from "
			    "the bounding set: %s",
			    cap, strerror(errno));
			return -1;
		}
	}
	return 0;
}

int
sandbox_drop_caps(char *why, size_t whylen)
{
	if (sandbox_drop_bounding(why, whylen) == -1)
		return -1;
	return sandbox_drop_cap_sets(why, whylen);
}

int
sandbox_drop_cap_sets(char *why, size_t whylen)
{
	struct __user_cap_header_struct h;
	struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];

	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) == -1 &&
	    errno != EINVAL) {
		snprintf(why, whylen, "capabilities: clear ambient: %s",
		    strerror(errno));
		return -1;
	}
	memset(&h, 0, sizeof(h));
	memset(d, 0, sizeof(d));
	h.version = _LINUX_CAPABILITY_VERSION_3;
	if (syscall(SYS_capset, &h, d) == -1) {
		snprintf(why, whylen, "capabilities: capset: %s",
		    strerror(errno));
		return -1;
	}
	return 0;
}

int
sandbox_no_new_privs(char *why, size_t whylen)
{
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == -1) {
		snprintf(why, whylen, "no_new_privs: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/* Syscalls refused outright: they leave or reshape the namespaces, or
 * reach kernel surfaces a sandboxed command has no use for. */
static const char *const deny_always[] = {
	"ptrace",
	"bpf",
	"perf_event_open",
	"keyctl",
	"add_key",
	"request_key",
	"userfaultfd",
	"unshare",
	"setns",
	"mount",
	"umount2",
	"pivot_root",
	"fsopen",
	"fsconfig",
	"fsmount",
	"fspick",
	"move_mount",
	"open_tree",
	"mount_setattr",
	/* io_uring can create sockets without socket(2) (IORING_OP_SOCKET),
	 * out of the family checks' reach. */
	"io_uring_setup",
	"io_uring_enter",
	"io_uring_register",
};

static const unsigned long clone_new[] = {
	CLONE_NEWNS,
	CLONE_NEWCGROUP,
	CLONE_NEWUTS,
	CLONE_NEWIPC,
	CLONE_NEWUSER,
	CLONE_NEWPID,
	CLONE_NEWNET,
};

static const uint64_t ip_families[] = { AF_INET, AF_INET6 };

/* An argument comparison (the SCMP_A* macros leave datum_b to C's
 * implicit zero, which clang's -Wmissing-field-initializers refuses). */
struct scmp_arg_cmp
sandbox_scmp_cmp(unsigned arg, enum scmp_compare op, uint64_t a, uint64_t b)
{
	struct scmp_arg_cmp c;

	c.arg = arg;
	c.op = op;
	c.datum_a = a;
	c.datum_b = b;
	return c;
}

#define SECCOMP_FAMILIES 64 /* families below this are listed one by one */

/*
 * EPERM for socket(2) with a family in [lo, hi]: the range cut into
 * aligned power-of-two blocks, one masked comparison on all 64 bits each
 * (far fewer rules, and a faster filter to build, than one per value).
 */
static int
deny_range(scmp_filter_ctx ctx, int sys, uint64_t lo, uint64_t hi)
{
	uint64_t size;
	int r;

	while (lo <= hi) {
		size = 1;
		while ((lo & (size * 2 - 1)) == 0 && lo + size * 2 - 1 <= hi)
			size *= 2;
		if ((r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), sys, 1,
			 sandbox_scmp_cmp(0, SCMP_CMP_MASKED_EQ, ~(size - 1),
			     lo))) < 0)
			return r;
		lo += size;
	}
	return 0;
}

static int
seccomp_rules(scmp_filter_ctx ctx, unsigned flags, const char **what)
{
	const uint32_t eperm = SCMP_ACT_ERRNO(EPERM);
	int sys, r;
	size_t i;
	unsigned b;
	uint64_t m;

	for (i = 0; i < SL_NELEM(deny_always); i++) {
		*what = deny_always[i];
		if ((sys = seccomp_syscall_resolve_name(deny_always[i])) ==
		    __NR_SCMP_ERROR)
			return -EINVAL;
		if ((r = seccomp_rule_add(ctx, eperm, sys, 0)) < 0)
			return r;
	}
	*what = "clone3";
	if ((r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3),
		 0)) < 0)
		return r;
	*what = "clone";
	for (i = 0; i < SL_NELEM(clone_new); i++)
		if ((r = seccomp_rule_add(ctx, eperm, SCMP_SYS(clone), 1,
			 sandbox_scmp_cmp(0, SCMP_CMP_MASKED_EQ, clone_new[i],
			     clone_new[i]))) < 0)
			return r;

	/*
	 * socket(2): every family but the allowed ones, compared on all 64
	 * bits of the argument, so garbage in the upper half (which the
	 * kernel ignores) can only make a call refused, never let one by.
	 * libseccomp takes one comparison per argument in a rule, so the
	 * refused ranges are cut into blocks (deny_range).
	 */
	*what = "socket";
	if ((r = deny_range(ctx, SCMP_SYS(socket), 0, AF_UNIX - 1)) < 0 ||
	    (r = deny_range(ctx, SCMP_SYS(socket), AF_INET + 1, AF_INET6 - 1)) <
		0 ||
	    (r = deny_range(ctx, SCMP_SYS(socket), AF_INET6 + 1,
		 AF_NETLINK - 1)) < 0 ||
	    (r = deny_range(ctx, SCMP_SYS(socket), AF_NETLINK + 1,
		 SECCOMP_FAMILIES - 1)) < 0)
		return r;
	if (flags & SANDBOX_SECCOMP_NETLINK_ROUTE)
		r = seccomp_rule_add(ctx, eperm, SCMP_SYS(socket), 2,
		    sandbox_scmp_cmp(0, SCMP_CMP_EQ, AF_NETLINK, 0),
		    sandbox_scmp_cmp(2, SCMP_CMP_NE, NETLINK_ROUTE, 0));
	else
		r = seccomp_rule_add(ctx, eperm, SCMP_SYS(socket), 1,
		    sandbox_scmp_cmp(0, SCMP_CMP_EQ, AF_NETLINK, 0));
	if (r < 0)
		return r;
	if ((r = seccomp_rule_add(ctx, eperm, SCMP_SYS(socket), 1,
		 sandbox_scmp_cmp(0, SCMP_CMP_GE, SECCOMP_FAMILIES, 0))) < 0)
		return r;
	/* Raw and packet sockets of the IP families (type & 0xf; netlink
	 * sockets are SOCK_RAW by nature, unix ones take it as datagram). */
	for (i = 0; i < SL_NELEM(ip_families); i++)
		if ((r = seccomp_rule_add(ctx, eperm, SCMP_SYS(socket), 2,
			 sandbox_scmp_cmp(0, SCMP_CMP_EQ, ip_families[i], 0),
			 sandbox_scmp_cmp(1, SCMP_CMP_MASKED_EQ, 0xf,
			     SOCK_RAW))) < 0 ||
		    (r = seccomp_rule_add(ctx, eperm, SCMP_SYS(socket), 2,
			 sandbox_scmp_cmp(0, SCMP_CMP_EQ, ip_families[i], 0),
			 sandbox_scmp_cmp(1, SCMP_CMP_MASKED_EQ, 0xf,
			     SOCK_PACKET))) < 0)
			return r;
	*what = "socketpair";
	if ((r = seccomp_rule_add(ctx, eperm, SCMP_SYS(socketpair), 1,
		 sandbox_scmp_cmp(0, SCMP_CMP_NE, AF_UNIX, 0))) < 0)
		return r;

	/*
	 * personality(2): only PER_LINUX (0) and the query (0xffffffff).
	 * Refused: anything with the upper half set; with bit 31 clear, any
	 * other bit set; with bit 31 set, any other bit clear.
	 */
	*what = "personality";
	if ((r = seccomp_rule_add(ctx, eperm, SCMP_SYS(personality), 1,
		 sandbox_scmp_cmp(0, SCMP_CMP_GT, PER_QUERY, 0))) < 0)
		return r;
	for (b = 0; b < 31; b++) {
		m = 0xffffffff80000000ULL | (1ULL << b);
		if ((r = seccomp_rule_add(ctx, eperm, SCMP_SYS(personality), 1,
			 sandbox_scmp_cmp(0, SCMP_CMP_MASKED_EQ, m,
			     1ULL << b))) < 0 ||
		    (r = seccomp_rule_add(ctx, eperm, SCMP_SYS(personality), 1,
			 sandbox_scmp_cmp(0, SCMP_CMP_MASKED_EQ, m,
			     0x80000000ULL))) < 0)
			return r;
	}
	return 0;
}

int
sandbox_seccomp(unsigned flags, char *why, size_t whylen)
{
	scmp_filter_ctx ctx;
	const char *what = "init";
	int r;

	if ((ctx = seccomp_init(SCMP_ACT_ALLOW)) == NULL) {
		snprintf(why, whylen, "seccomp: init failed");
		return -1;
	}
	if ((r = seccomp_rules(ctx, flags, &what)) < 0) {
		snprintf(why, whylen, "seccomp: rule for %s: %s", what,
		    strerror(-r));
		seccomp_release(ctx);
		return -1;
	}
	if ((r = seccomp_load(ctx)) < 0) {
		snprintf(why, whylen, "seccomp: load: %s", strerror(-r));
		seccomp_release(ctx);
		return -1;
	}
	seccomp_release(ctx);
	return 0;
}

static long
ll_create(const struct landlock_ruleset_attr *a, size_t size, uint32_t fl)
{
	return syscall(SYS_landlock_create_ruleset, a, size, fl);
}

int
sandbox_landlock_abi(void)
{
	long v = ll_create(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);

	return v < 0 ? 0 : (int)v;
}

/* Every filesystem right of ABI abi. */
static uint64_t
ll_fs_all(int abi)
{
	uint64_t a = (LANDLOCK_ACCESS_FS_MAKE_SYM << 1) - 1; /* ABI 1 */

	if (abi >= 2)
		a |= LANDLOCK_ACCESS_FS_REFER;
	if (abi >= 3)
		a |= LANDLOCK_ACCESS_FS_TRUNCATE;
	if (abi >= 5)
		a |= LANDLOCK_ACCESS_FS_IOCTL_DEV;
	return a;
}

#define LL_FILE_RIGHTS                                                         \
	(LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE |          \
	    LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_TRUNCATE |       \
	    LANDLOCK_ACCESS_FS_IOCTL_DEV)
#define LL_RO_RIGHTS                                                           \
	(LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE |           \
	    LANDLOCK_ACCESS_FS_READ_DIR)

static int
ll_add(int rs, const char *path, uint64_t rights, uint64_t handled, char *why,
    size_t whylen)
{
	struct landlock_path_beneath_attr pb;
	struct stat st;
	int fd, saved;

	if ((fd = open(path, O_PATH | O_CLOEXEC)) == -1 ||
	    fstat(fd, &st) == -1) {
		snprintf(why, whylen, "landlock: %s: %s", path,
		    strerror(errno));
		if (fd != -1)
			close(fd);
		return -1;
	}
	if (!S_ISDIR(st.st_mode))
		rights &= LL_FILE_RIGHTS;
	memset(&pb, 0, sizeof(pb));
	pb.allowed_access = rights & handled;
	pb.parent_fd = fd;
	if (syscall(SYS_landlock_add_rule, rs, LANDLOCK_RULE_PATH_BENEATH, &pb,
		0) == -1) {
		saved = errno;
		close(fd);
		snprintf(why, whylen, "landlock: rule for %s: %s", path,
		    strerror(saved));
		return -1;
	}
	close(fd);
	return 0;
}

int
sandbox_landlock_prepare(const char *const *rw, size_t nrw,
    const char *const *ro, size_t nro, char *why, size_t whylen)
{
	struct landlock_ruleset_attr attr;
	int abi, rs;
	size_t i;

	if ((abi = sandbox_landlock_abi()) == 0) {
		snprintf(why, whylen,
		    "landlock: asked for, but this kernel "
		    "does not offer it (not built in or not in the lsm= "
		    "list)");
		return -1;
	}
	memset(&attr, 0, sizeof(attr));
	attr.handled_access_fs = ll_fs_all(abi);
	if ((rs = (int)ll_create(&attr, sizeof(attr), 0)) == -1) {
		snprintf(why, whylen, "landlock: create ruleset: %s",
		    strerror(errno));
		return -1;
	}
	for (i = 0; i < nrw; i++)
		if (ll_add(rs, rw[i], attr.handled_access_fs,
			attr.handled_access_fs, why, whylen) == -1)
			goto fail;
	for (i = 0; i < nro; i++)
		if (ll_add(rs, ro[i], LL_RO_RIGHTS, attr.handled_access_fs, why,
			whylen) == -1)
			goto fail;
	return rs;
fail:
	close(rs);
	return -1;
}

int
sandbox_landlock_apply(int ruleset, char *why, size_t whylen)
{
	int saved;

	if (syscall(SYS_landlock_restrict_self, ruleset, 0) == -1) {
		saved = errno;
		close(ruleset);
		snprintf(why, whylen, "landlock: restrict: %s",
		    strerror(saved));
		return -1;
	}
	close(ruleset);
	return 0;
}

int
sandbox_set_user(uid_t uid, gid_t gid, char *why, size_t whylen)
{
	if (uid == (uid_t)-1)
		return 0;
	if (getuid() != 0) {
		snprintf(why, whylen,
		    "user: only root may run the command "
		    "as another user");
		return -1;
	}
	if (setgroups(1, &gid) == -1 || setresgid(gid, gid, gid) == -1 ||
	    setresuid(uid, uid, uid) == -1) {
		snprintf(why, whylen, "user: become %lu:%lu: %s",
		    (unsigned long)uid, (unsigned long)gid, strerror(errno));
		return -1;
	}
	return 0;
}
