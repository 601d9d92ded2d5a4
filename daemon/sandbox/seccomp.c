// SPDX-License-Identifier: MIT
/*
 * seccomp.c - the system-call filters tools run under, built with
 * libseccomp once per policy and exported as BPF programs the child loads
 * with one prctl() (no libseccomp calls, no allocation after clone3()):
 * one for tools granted the network, one for the rest.
 *
 * Default allow, with a deny list of the calls that reach the kernel's
 * privileged or namespace-escaping surfaces; a denied call fails with
 * EPERM (the tool sees a clear "Operation not permitted"), clone3 with
 * ENOSYS so libc falls back to clone(), whose namespace flags are
 * filtered. Socket families are an allow list: AF_UNIX, AF_NETLINK for
 * NETLINK_ROUTE only, and AF_INET/AF_INET6 with the network; any other
 * family (AF_VSOCK is in no network namespace at all) fails with
 * EAFNOSUPPORT. Modes with the setuid or setgid bit are refused, so no
 * such file is ever made. memfd_create is refused where a memfd would be
 * memory outside every limit (no memory controller) or executable code on
 * no path (a kernel without vm.memfd_noexec), and so are SysV shared
 * memory and message queues without a memory controller. Calls of foreign
 * ABIs (i386, x32) kill the process.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <linux/netlink.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox_internal.h"

/* Denied with EPERM. Names unknown to this libseccomp are skipped. */
static const char *const denied[] = {
	/* debugging and other processes' memory */
	"ptrace", "process_vm_writev", "process_vm_readv", "pidfd_getfd",
	"kcmp",
	/* file systems and namespaces */
	"mount", "umount", "umount2", "pivot_root", "chroot", "unshare", "setns",
	"fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree",
	"mount_setattr", "open_by_handle_at", "name_to_handle_at", "quotactl",
	"quotactl_fd",
	/* the kernel itself */
	"kexec_load", "kexec_file_load", "init_module", "finit_module",
	"delete_module", "bpf", "perf_event_open", "userfaultfd", "keyctl",
	"add_key", "request_key", "reboot", "swapon", "swapoff", "acct",
	"syslog", "iopl", "ioperm", "lookup_dcookie", "vhangup", "uselib",
	"nfsservctl", "_sysctl", "settimeofday", "clock_settime",
	"clock_adjtime", "adjtimex", "sethostname", "setdomainname",
	/* io_uring runs work outside this filter */
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	/* namespaces through the new mount API's cousins */
	"open_tree_attr", "listmount", "statmount",
};

static const unsigned long ns_flags[] = {
	CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWIPC,
	CLONE_NEWUTS, CLONE_NEWCGROUP,
#ifdef CLONE_NEWTIME
	CLONE_NEWTIME,
#endif
};

static int deny(scmp_filter_ctx ctx, int err, const char *name, unsigned int n,
		struct scmp_arg_cmp a, struct scmp_arg_cmp b)
{
	int nr = seccomp_syscall_resolve_name(name), rc;

	if (nr == __NR_SCMP_ERROR)
		return 0;	/* unknown to this libseccomp: not on this kernel either */
	if (n == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(err), nr, 0);
	else if (n == 1)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(err), nr, 1, a);
	else
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(err), nr, 2, a, b);
	return rc == -EEXIST ? 0 : rc;
}

#define NO_ARG SCMP_A0(SCMP_CMP_EQ, 0)

/* The socket families a tool may use; the rest, EAFNOSUPPORT. Anything
 * above AF_NETLINK (16, the largest allowed), which is also any value
 * with high bits set, is refused whole; the few below it one by one
 * (short rules: the filter is JIT-compiled at every spawn). */
static int socket_rules(scmp_filter_ctx ctx, int network)
{
	static const char *const calls[] = { "socket", "socketpair" };
	unsigned int fam;
	size_t k;
	int rc = 0;

	for (k = 0; k < 2 && !rc; k++) {
		rc = deny(ctx, EAFNOSUPPORT, calls[k], 1, SCMP_A0(SCMP_CMP_GT, AF_NETLINK),
			  NO_ARG);
		for (fam = 0; fam < AF_NETLINK && !rc; fam++) {
			if (fam == AF_UNIX || (network && (fam == AF_INET || fam == AF_INET6)))
				continue;
			rc = deny(ctx, EAFNOSUPPORT, calls[k], 1, SCMP_A0(SCMP_CMP_EQ, fam), NO_ARG);
		}
	}
	/* netlink: routes and links (getaddrinfo, ip) only */
	if (!rc)
		rc = deny(ctx, EPROTONOSUPPORT, "socket", 2,
			  SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffu, AF_NETLINK),
			  SCMP_A2(SCMP_CMP_NE, NETLINK_ROUTE));
	return rc;
}

/* No file or directory gets the setuid or setgid bit: every call that
 * sets a mode refuses one that has them. */
static int mode_rules(scmp_filter_ctx ctx)
{
	static const struct { const char *name; unsigned int arg; } calls[] = {
		{ "chmod", 1 }, { "fchmod", 1 }, { "fchmodat", 2 }, { "fchmodat2", 2 },
		{ "open", 2 }, { "openat", 3 }, { "creat", 1 }, { "mknod", 1 },
		{ "mknodat", 2 }, { "mkdir", 1 }, { "mkdirat", 2 },
	};
	static const unsigned int bits[] = { S_ISUID, S_ISGID };
	size_t i, k;
	int rc = 0;

	for (i = 0; i < sizeof(calls) / sizeof(calls[0]) && !rc; i++)
		for (k = 0; k < 2 && !rc; k++) {
			struct scmp_arg_cmp c = { calls[i].arg, SCMP_CMP_MASKED_EQ, bits[k],
						  bits[k] };

			rc = deny(ctx, EPERM, calls[i].name, 1, c, NO_ARG);
		}
	/* its mode is in a struct seccomp cannot read: libc falls back */
	if (!rc)
		rc = deny(ctx, ENOSYS, "openat2", 0, NO_ARG, NO_ARG);
	return rc;
}

static int build_one(const struct kvs_policy *p, int network, struct kvs_bpf *out,
		     char *err, size_t errlen)
{
	scmp_filter_ctx ctx;
	size_t i;
	int rc, nr, fd = -1;
	off_t len;

	ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx) {
		snprintf(err, errlen, "seccomp_init failed");
		return -ENOMEM;
	}
	/* foreign ABIs are not in this filter: they hit the bad-arch action */
	rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
	/* a binary tree of the syscall numbers, not a list: at attach the
	 * kernel runs the filter for every syscall of every arch to build its
	 * action cache (with interrupts off), and each run is a short walk
	 * down the tree instead of ~60 compares (less CPU per spawn) */
	if (!rc)
		rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
	if (rc)
		goto fail;
	for (i = 0; i < sizeof(denied) / sizeof(denied[0]); i++) {
		rc = deny(ctx, EPERM, denied[i], 0, NO_ARG, NO_ARG);
		if (rc)
			goto fail;
	}
	for (i = 0; i < sizeof(ns_flags) / sizeof(ns_flags[0]); i++) {
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
				      SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags[i], ns_flags[i]));
		if (rc)
			goto fail;
	}
	nr = seccomp_syscall_resolve_name("clone3");
	if (nr != __NR_SCMP_ERROR) {
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), nr, 0);
		if (rc)
			goto fail;
	}
	/* typing into a terminal the tool does not own */
	rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
			      SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCSTI));
	if (!rc)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
				      SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCLINUX));
	if (!rc)
		rc = socket_rules(ctx, network);
	if (!rc)
		rc = mode_rules(ctx);
	/* memory no limit sees, code on no path */
	if (!rc && (p->restrict_memory || !p->have_memfd_noexec))
		rc = deny(ctx, EPERM, "memfd_create", 0, NO_ARG, NO_ARG) ?:
		     deny(ctx, EPERM, "memfd_secret", 0, NO_ARG, NO_ARG);
	if (!rc && p->restrict_memory)
		rc = deny(ctx, EPERM, "shmget", 0, NO_ARG, NO_ARG) ?:
		     deny(ctx, EPERM, "msgget", 0, NO_ARG, NO_ARG);
	if (rc)
		goto fail;

	fd = memfd_create("kvs-seccomp", MFD_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		goto fail;
	}
	rc = seccomp_export_bpf(ctx, fd);
	if (rc)
		goto fail;
	len = lseek(fd, 0, SEEK_END);
	if (len <= 0 || len % sizeof(struct sock_filter) ||
	    len / sizeof(struct sock_filter) > BPF_MAXINSNS) {
		rc = -EINVAL;
		goto fail;
	}
	out->f = malloc(len);
	if (!out->f) {
		rc = -ENOMEM;
		goto fail;
	}
	if (pread(fd, out->f, len, 0) != len) {
		free(out->f);
		out->f = NULL;
		rc = -EIO;
		goto fail;
	}
	out->len = len / sizeof(struct sock_filter);
	close(fd);
	seccomp_release(ctx);
	return 0;
fail:
	snprintf(err, errlen, "building the seccomp filter: %s", strerror(-rc));
	if (fd >= 0)
		close(fd);
	seccomp_release(ctx);
	return rc;
}

int kvs_seccomp_build(struct kvs_policy *p, char *err, size_t errlen)
{
	return build_one(p, 0, &p->bpf[0], err, errlen) ?:
	       build_one(p, 1, &p->bpf[1], err, errlen);
}
