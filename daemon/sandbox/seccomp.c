// SPDX-License-Identifier: MIT
/*
 * seccomp.c - the system-call filter every tool runs under, built with
 * libseccomp once per policy and exported as a BPF program the child
 * loads with one prctl() (no libseccomp calls, no allocation after
 * clone3()).
 *
 * Default allow, with a deny list of the calls that reach the kernel's
 * privileged or namespace-escaping surfaces; a denied call fails with
 * EPERM (the tool sees a clear "Operation not permitted"), clone3 with
 * ENOSYS so libc falls back to clone(), whose namespace flags are
 * filtered. Calls of foreign ABIs (i386, x32) kill the process.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
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

int kvs_seccomp_build(struct kvs_policy *p, char *err, size_t errlen)
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
		nr = seccomp_syscall_resolve_name(denied[i]);
		if (nr == __NR_SCMP_ERROR)
			continue;
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
		if (rc && rc != -EEXIST)
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
	p->bpf = malloc(len);
	if (!p->bpf) {
		rc = -ENOMEM;
		goto fail;
	}
	if (pread(fd, p->bpf, len, 0) != len) {
		rc = -EIO;
		goto fail;
	}
	p->bpf_len = len / sizeof(struct sock_filter);
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
