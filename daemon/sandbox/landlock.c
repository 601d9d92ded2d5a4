// SPDX-License-Identifier: MIT
/*
 * landlock.c - the Landlock ruleset of a tool run: reads only from the
 * read-only system paths, execution only of the policy's executables,
 * writes only in the work directory and /tmp, and (ABI >= 4) no TCP
 * bind/connect when the network is denied, (ABI >= 6) no signals or
 * abstract Unix sockets beyond the sandbox. Built in the child after it
 * has pivoted into its root, with raw system calls only (rawsys.h: the
 * child shares the caller's memory and thread-local errno).
 *
 * Defined here rather than taken from <linux/landlock.h> because the
 * build host's headers may predate the ABI the running kernel offers.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "rawsys.h"
#include "sandbox_internal.h"

#ifndef __NR_landlock_create_ruleset
#define __NR_landlock_create_ruleset 444
#define __NR_landlock_add_rule 445
#define __NR_landlock_restrict_self 446
#endif

#define LL_CREATE_RULESET_VERSION (1u << 0)
#define LL_RULE_PATH_BENEATH 1

#define LL_FS_EXECUTE (1ull << 0)
#define LL_FS_WRITE_FILE (1ull << 1)
#define LL_FS_READ_FILE (1ull << 2)
#define LL_FS_READ_DIR (1ull << 3)
#define LL_FS_REMOVE_DIR (1ull << 4)
#define LL_FS_REMOVE_FILE (1ull << 5)
#define LL_FS_MAKE_CHAR (1ull << 6)
#define LL_FS_MAKE_DIR (1ull << 7)
#define LL_FS_MAKE_REG (1ull << 8)
#define LL_FS_MAKE_SOCK (1ull << 9)
#define LL_FS_MAKE_FIFO (1ull << 10)
#define LL_FS_MAKE_BLOCK (1ull << 11)
#define LL_FS_MAKE_SYM (1ull << 12)
#define LL_FS_REFER (1ull << 13)	/* ABI 2 */
#define LL_FS_TRUNCATE (1ull << 14)	/* ABI 3 */
#define LL_FS_IOCTL_DEV (1ull << 15)	/* ABI 5 */
#define LL_NET_BIND_TCP (1ull << 0)	/* ABI 4 */
#define LL_NET_CONNECT_TCP (1ull << 1)
#define LL_SCOPE_ABSTRACT_UNIX (1ull << 0)	/* ABI 6 */
#define LL_SCOPE_SIGNAL (1ull << 1)

struct ll_ruleset_attr {
	uint64_t handled_access_fs;
	uint64_t handled_access_net;
	uint64_t scoped;
};

struct ll_path_beneath {
	uint64_t allowed_access;
	int32_t parent_fd;
} __attribute__((packed));

#define LL_FILE_RIGHTS (LL_FS_EXECUTE | LL_FS_WRITE_FILE | LL_FS_READ_FILE | \
			LL_FS_TRUNCATE | LL_FS_IOCTL_DEV)

int kvs_landlock_abi(void)
{
	long abi = syscall(__NR_landlock_create_ruleset, NULL, 0,
			   LL_CREATE_RULESET_VERSION);

	return abi < 0 ? 0 : (int)abi;
}

static __attribute__((no_sanitize_address)) uint64_t fs_handled(int abi)
{
	uint64_t m = (LL_FS_MAKE_SYM << 1) - 1;

	if (abi >= 2)
		m |= LL_FS_REFER;
	if (abi >= 3)
		m |= LL_FS_TRUNCATE;
	if (abi >= 5)
		m |= LL_FS_IOCTL_DEV;
	return m;
}

static __attribute__((no_sanitize_address)) uint64_t access_of(enum kvs_access acc)
{
	const uint64_t rd = LL_FS_READ_FILE | LL_FS_READ_DIR;
	const uint64_t wr = LL_FS_WRITE_FILE | LL_FS_REMOVE_DIR | LL_FS_REMOVE_FILE |
			    LL_FS_MAKE_DIR | LL_FS_MAKE_REG | LL_FS_MAKE_SOCK |
			    LL_FS_MAKE_FIFO | LL_FS_MAKE_SYM | LL_FS_REFER | LL_FS_TRUNCATE;

	switch (acc) {
	case KVS_ACC_RO: return rd;
	case KVS_ACC_EXEC: return rd | LL_FS_EXECUTE;
	case KVS_ACC_RW: return rd | wr;
	case KVS_ACC_RWX: return rd | wr | LL_FS_EXECUTE;
	case KVS_ACC_DEV: return LL_FS_READ_FILE | LL_FS_WRITE_FILE | LL_FS_IOCTL_DEV;
	}
	return 0;
}

__attribute__((no_sanitize_address))
int kvs_landlock_apply(int abi, const struct kvs_rule *const *rules, int n,
		       int network_denied)
{
	struct ll_ruleset_attr attr = { 0 };
	size_t attr_size = sizeof(uint64_t);
	uint64_t handled = fs_handled(abi);
	long rfd, rc = 0;
	int i;

	attr.handled_access_fs = handled;
	if (abi >= 4) {
		attr_size = 2 * sizeof(uint64_t);
		if (network_denied)
			attr.handled_access_net = LL_NET_BIND_TCP | LL_NET_CONNECT_TCP;
	}
	if (abi >= 6) {
		attr_size = sizeof(attr);
		attr.scoped = LL_SCOPE_ABSTRACT_UNIX | LL_SCOPE_SIGNAL;
	}
	rfd = KVS_SYS(__NR_landlock_create_ruleset, &attr, attr_size, 0);
	if (rfd < 0)
		return (int)rfd;
	for (i = 0; i < n; i++) {
		struct ll_path_beneath pb;
		struct statx stx;
		long fd = KVS_SYS(SYS_openat, AT_FDCWD, rules[i]->path, O_PATH | O_CLOEXEC);

		if (fd < 0)
			continue;	/* not in this root (e.g. no /tmp) */
		pb.allowed_access = access_of(rules[i]->acc) & handled;
		if (KVS_SYS(SYS_statx, fd, "", AT_EMPTY_PATH, STATX_TYPE, &stx) == 0 &&
		    !S_ISDIR(stx.stx_mode))
			pb.allowed_access &= LL_FILE_RIGHTS;
		pb.parent_fd = (int32_t)fd;
		if (pb.allowed_access)
			rc = KVS_SYS(__NR_landlock_add_rule, rfd, LL_RULE_PATH_BENEATH, &pb, 0);
		KVS_SYS(SYS_close, fd);
		if (rc < 0)
			break;
	}
	if (rc >= 0)
		rc = KVS_SYS(__NR_landlock_restrict_self, rfd, 0);
	KVS_SYS(SYS_close, rfd);
	return rc < 0 ? (int)rc : 0;
}
