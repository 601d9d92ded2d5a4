// SPDX-License-Identifier: MIT
/*
 * spawn.c - one tool run: clone3() into new user, mount, PID, network,
 * IPC, UTS and cgroup namespaces and straight into the run's cgroup; the
 * child builds its root from the tool's compiled plan, drops every
 * privilege and execs; the parent maps the child's ids, feeds stdin,
 * captures stdout/stderr up to the cap, enforces the wall-clock timeout by
 * killing the whole cgroup, and reports why the run ended.
 *
 * kvs_spawn() is the same launch, handing the running tool over (MCP
 * servers); kvs_run_many() is kvs_run() from a few threads. Also here: the
 * template mount namespace a root launcher's runs copy, and removing the
 * work directories it made.
 *
 * The child between clone3() and execve() makes system calls only: the
 * caller may be multi-threaded and raw clone3() runs no atfork handlers.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/mount.h>
#include <linux/sched.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/fsuid.h>
#include <unistd.h>
#include <grp.h>
#include <linux/securebits.h>
#include <linux/seccomp.h>

#include "rawsys.h"
#include "sandbox_internal.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif
#ifndef MOUNT_ATTR_NOSYMFOLLOW
#define MOUNT_ATTR_NOSYMFOLLOW 0x00200000
#endif

/* glibc 2.36 lacks wrappers for the new mount API */
struct kvs_mount_attr {
	uint64_t attr_set, attr_clr, propagation, userns_fd;
};

const char *kvs_exit_name(enum kvs_exit reason)
{
	switch (reason) {
	case KVS_EXIT_CODE: return "exit";
	case KVS_EXIT_SIGNAL: return "signal";
	case KVS_EXIT_TIMEOUT: return "timeout";
	case KVS_EXIT_OOM: return "oom";
	case KVS_EXIT_OUTPUT_CAP: return "output-cap";
	case KVS_EXIT_SETUP: return "setup-failed";
	case KVS_EXIT_REFUSED: return "refused";
	}
	return "?";
}

/* ---- the child ------------------------------------------------------ */

/*
 * Everything from here to child_main() runs in the child, which shares
 * the caller's memory until its execve() (kvs_clone3_vm(), where
 * KVS_CLONE_VM): system calls through KVS_SYS() only, which touch no
 * errno; no allocation, no lock, no stdio; nothing written but its own
 * stack and the descriptors it owns; the plan is read-only to both sides.
 * Not instrumented by ASan: its stack is not a thread ASan knows of.
 */
#define KVS_CHILD __attribute__((no_sanitize_address))

enum step {
	ST_SYNC = 1, ST_HOSTNAME, ST_PRIVATE, ST_CLONE_TREE, ST_ATTR, ST_STAGE,
	ST_SKELETON, ST_MOVE, ST_TMP, ST_PROC, ST_PROC_SYS, ST_PIVOT, ST_ROOT_RO,
	ST_CHDIR, ST_SECUREBITS, ST_BOUNDING, ST_GROUPS, ST_GID, ST_UID, ST_CAPS,
	ST_RLIMIT, ST_NNP, ST_LANDLOCK, ST_STDIO, ST_SECCOMP, ST_NETNS, ST_USERNS, ST_MNTNS,
	ST_SYSCTL, ST_EXEC,
};

static const char *const step_names[] = {
	[ST_SYNC] = "waiting for the id map", [ST_HOSTNAME] = "sethostname",
	[ST_PRIVATE] = "making mounts private", [ST_CLONE_TREE] = "cloning a bind source",
	[ST_ATTR] = "making a bind read-only", [ST_STAGE] = "mounting the root tmpfs",
	[ST_SKELETON] = "creating the root skeleton", [ST_MOVE] = "attaching a bind",
	[ST_TMP] = "mounting /tmp", [ST_PROC] = "mounting /proc",
	[ST_PROC_SYS] = "making /proc/sys read-only", [ST_PIVOT] = "switching to the new root",
	[ST_ROOT_RO] = "making the root read-only", [ST_CHDIR] = "entering the work directory",
	[ST_SECUREBITS] = "securebits", [ST_BOUNDING] = "dropping the bounding set",
	[ST_GROUPS] = "setgroups", [ST_GID] = "setresgid", [ST_UID] = "setresuid",
	[ST_CAPS] = "dropping capabilities", [ST_RLIMIT] = "setrlimit",
	[ST_NNP] = "no_new_privs", [ST_LANDLOCK] = "Landlock", [ST_STDIO] = "stdio",
	[ST_SECCOMP] = "seccomp", [ST_NETNS] = "joining the empty network namespace",
	[ST_USERNS] = "creating the user namespace",
	[ST_MNTNS] = "entering the template mount namespace",
	[ST_SYSCTL] = "setting the run's namespace sysctls", [ST_EXEC] = "execve",
};

struct child_err {
	int step;
	int err;
	int index;		/* which bind, for ST_CLONE_TREE and friends */
};

struct plan {
	const struct kvs_policy *p;
	const struct kvs_tool *t;
	int sync_fd, status_fd, in_fd, out_fd, err_fd;
	/* root launcher: build the root as real root in namespaces owned by
	 * the initial user namespace, then unshare the user namespace the
	 * tool runs in (and join a network namespace made ahead, if any) */
	int priv;
	int netns_fd;
	int mntns_fd;			/* root: the policy's template; -1: clone3
					 * copied the host's (unprivileged) */
	int sync_fd_parent;
	const char *workdir;		/* host, canonical; also the stage */
	const char *exe;		/* inside */
	char *const *argv;
	int network;
	int exec_workdir;
	uid_t uid;			/* outside ids of the tool: the work
					 * directory's own, or the policy's */
	gid_t gid;
	uint64_t tmp_bytes;
	char tmp_opts[64];
	struct rlimit rl_cpu, rl_nofile, rl_fsize, rl_core, rl_nproc, rl_as;
	int set_nproc, set_as;
	const struct kvs_rule *rules[KVS_MAX_RULES];
	int n_rules;
	struct kvs_rule work_rule;
};

#define SECBITS_CHILD (SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_SETUID_FIXUP | \
		       SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | \
		       SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED)

static __attribute__((noreturn)) KVS_CHILD void child_fail(const struct plan *c, int step,
							    int err, int index)
{
	struct child_err e = { step, err, index };

	KVS_SYS(SYS_write, c->status_fd, &e, sizeof(e));
	KVS_SYS(SYS_exit_group, 125);
	__builtin_unreachable();
}

static __attribute__((noreturn)) KVS_CHILD void child_exit(void)
{
	KVS_SYS(SYS_exit_group, 125);
	__builtin_unreachable();
}

/* a system call that must succeed, else the run fails at step */
#define MUST(call, step, index) do { \
	long r_ = (call); \
	if (r_ < 0) \
		child_fail(c, (step), (int)-r_, (index)); \
} while (0)

static KVS_CHILD size_t child_strlen(const char *s)
{
	size_t n = 0;

	while (s[n])
		n++;
	return n;
}

static KVS_CHILD long child_mount(const char *src, const char *dst, const char *type,
				  unsigned long flags, const void *data)
{
	return KVS_SYS(SYS_mount, src, dst, type, flags, data);
}

static KVS_CHILD long child_setattr(int fd, unsigned int flags, uint64_t set, uint64_t clr)
{
	struct kvs_mount_attr a = { .attr_set = set, .attr_clr = clr };

	return KVS_SYS(__NR_mount_setattr, fd, "", AT_EMPTY_PATH | flags, &a, sizeof(a));
}

static KVS_CHILD long child_setrlimit(int res, const struct rlimit *rl)
{
	return KVS_SYS(SYS_prlimit64, 0, res, rl, NULL);
}

/* Write a sysctl of the run's namespaces through the proc at base;
 * required: a missing file fails the run (else it is a kernel without
 * that knob, which the policy knew at load). */
static KVS_CHILD void child_sysctl(const struct plan *c, const char *base, const char *name,
				   const char *val, int required)
{
	char path[96];
	size_t a = child_strlen(base), n = child_strlen(name), vl = child_strlen(val);
	size_t i;
	long fd, w;

	if (a + n >= sizeof(path))
		child_fail(c, ST_SYSCTL, ENAMETOOLONG, 0);
	for (i = 0; i < a; i++)
		path[i] = base[i];
	for (i = 0; i <= n; i++)
		path[a + i] = name[i];
	fd = KVS_SYS(SYS_openat, AT_FDCWD, path, O_WRONLY | O_CLOEXEC);
	if (fd == -ENOENT && !required)
		return;
	if (fd < 0)
		child_fail(c, ST_SYSCTL, (int)-fd, 0);
	w = KVS_SYS(SYS_write, fd, val, vl);
	if (w != (long)vl)
		child_fail(c, ST_SYSCTL, w < 0 ? (int)-w : EIO, 0);
	KVS_SYS(SYS_close, fd);
}

static KVS_CHILD void child_mounts(const struct plan *c)
{
	const struct kvs_tool *t = c->t;
	const char *stage = c->priv ? KVS_STAGE : c->workdir;
	int fds[KVS_MAX_MOUNTS], i;
	long wfd, sfd;
	char b;

	if (!c->priv) {
		if (KVS_SYS(SYS_read, c->sync_fd, &b, 1) != 1)
			child_exit();	/* the parent gave up on us */
		/* files the child creates (the root's skeleton) need an owner
		 * mapped in its user namespace; NO_SETUID_FIXUP keeps the
		 * capabilities meanwhile */
		MUST(KVS_SYS(SYS_prctl, PR_SET_SECUREBITS, SECBITS_CHILD), ST_SECUREBITS, 0);
		KVS_SYS(SYS_setfsgid, KVS_INSIDE_UID);
		KVS_SYS(SYS_setfsuid, KVS_INSIDE_UID);
	} else {
		MUST(KVS_SYS(SYS_prctl, PR_SET_SECUREBITS, SECBITS_CHILD), ST_SECUREBITS, 0);
		if (c->netns_fd >= 0)
			MUST(KVS_SYS(SYS_setns, c->netns_fd, CLONE_NEWNET), ST_NETNS, 0);
	}
	MUST(KVS_SYS(SYS_sethostname, "kvs", 3), ST_HOSTNAME, 0);
	/* with the template the child is still in the host's mount
	 * namespace here: it must change nothing in it (the clones below are
	 * detached trees of their own) */
	if (c->mntns_fd < 0)
		MUST(child_mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), ST_PRIVATE, 0);
	/* clone every source first: the stage tmpfs may hide some of them */
	for (i = 0; i < t->n_binds; i++) {
		const struct kvs_bind *bd = &t->binds[i];
		uint64_t set = MOUNT_ATTR_NOSUID;
		unsigned int rec = bd->is_dir ? AT_RECURSIVE : 0;
		long fd = KVS_SYS(__NR_open_tree, AT_FDCWD, bd->src,
				  OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | rec);

		if (fd < 0)
			child_fail(c, ST_CLONE_TREE, (int)-fd, i);
		fds[i] = (int)fd;
		if (!bd->writable)
			set |= MOUNT_ATTR_RDONLY;
		if (!bd->dev)
			set |= MOUNT_ATTR_NODEV;
		MUST(child_setattr(fds[i], rec, set, 0), ST_ATTR, i);
	}
	wfd = KVS_SYS(__NR_open_tree, AT_FDCWD, c->workdir,
		      OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
	if (wfd < 0)
		child_fail(c, ST_CLONE_TREE, (int)-wfd, -1);
	/* a session's tmpfs is noexec on the host side */
	MUST(child_setattr((int)wfd, AT_RECURSIVE,
			   MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
			   (c->exec_workdir ? 0 : MOUNT_ATTR_NOEXEC),
			   c->exec_workdir ? MOUNT_ATTR_NOEXEC : 0), ST_ATTR, -1);
	/* into a private copy of the template: one empty read-only tmpfs
	 * with a /stage directory, instead of every host mount */
	if (c->mntns_fd >= 0) {
		MUST(KVS_SYS(SYS_setns, c->mntns_fd, CLONE_NEWNS), ST_MNTNS, 0);
		MUST(KVS_SYS(SYS_unshare, CLONE_NEWNS), ST_MNTNS, 1);
	}
	/* the new root: a small tmpfs over the template's /stage, or else
	 * over the work directory's host path, which exists by construction
	 * and is private to this namespace */
	MUST(child_mount("tmpfs", stage, "tmpfs", MS_NOSUID | MS_NODEV,
			 "size=1m,nr_inodes=4096,mode=0755"), ST_STAGE, 0);
	MUST(KVS_SYS(SYS_chdir, stage), ST_STAGE, 1);
	/* /tmp first: binds below it (a work file under the host's /tmp)
	 * then land on top of it, not under it */
	if (c->tmp_bytes) {
		MUST(KVS_SYS(SYS_mkdirat, AT_FDCWD, "tmp", 0755), ST_TMP, 0);
		MUST(child_mount("tmpfs", "tmp", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
				 c->tmp_opts), ST_TMP, 0);
	}
	for (i = 0; i < t->n_skel; i++) {
		const struct kvs_skel *s = &t->skel[i];
		long rc = 0, fd;

		switch (s->kind) {
		case KVS_NODE_DIR:
			rc = KVS_SYS(SYS_mkdirat, AT_FDCWD, s->rel, 0755);
			break;
		case KVS_NODE_FILE:
			fd = KVS_SYS(SYS_openat, AT_FDCWD, s->rel, O_CREAT | O_WRONLY | O_CLOEXEC,
				     0644);
			rc = fd < 0 ? fd : KVS_SYS(SYS_close, fd);
			break;
		case KVS_NODE_LINK:
			rc = KVS_SYS(SYS_symlinkat, s->target, AT_FDCWD, s->rel);
			break;
		}
		if (rc < 0 && rc != -EEXIST)
			child_fail(c, ST_SKELETON, (int)-rc, i);
	}
	for (i = 0; i < t->n_binds; i++)
		MUST(KVS_SYS(__NR_move_mount, fds[i], "", AT_FDCWD, t->binds[i].src + 1,
			     MOVE_MOUNT_F_EMPTY_PATH), ST_MOVE, i);
	MUST(KVS_SYS(__NR_move_mount, wfd, "", AT_FDCWD, KVS_WORK + 1, MOVE_MOUNT_F_EMPTY_PATH),
	     ST_MOVE, -1);
	/* before the host's /proc leaves this namespace: a new proc is only
	 * allowed while a fully visible one is mounted */
	MUST(child_mount("proc", "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL),
	     ST_PROC, 0);
	if (c->priv) {
		/* still real root: the run's PID namespace's, through its own
		 * proc, before /proc/sys goes read-only */
		if (c->p->have_memfd_noexec)
			child_sysctl(c, "proc", "/sys/vm/memfd_noexec", "2", 0);
	} else {
		/* in the user namespace clone3() made, whose sysctls these are
		 * (vm.memfd_noexec is root's alone: seccomp denies memfd) */
		child_sysctl(c, "proc", "/sys/user/max_user_namespaces", "0", 1);
	}
	sfd = KVS_SYS(__NR_open_tree, AT_FDCWD, "proc/sys", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
	if (sfd >= 0) {
		MUST(child_setattr((int)sfd, 0, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID |
				   MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, 0), ST_PROC_SYS, 0);
		MUST(KVS_SYS(__NR_move_mount, sfd, "", AT_FDCWD, "proc/sys",
			     MOVE_MOUNT_F_EMPTY_PATH), ST_PROC_SYS, 0);
	}
	if (c->priv) {
		/*
		 * The root launcher chroots into the new root, which stays
		 * where it was built (the template's /stage): a chrooted
		 * process is refused a new user namespace by the kernel
		 * (current_chrooted()), besides seccomp and the run's
		 * max_user_namespaces of 0; /proc/self/mountinfo lists only
		 * mounts beneath the root; the tool can neither chroot, mount
		 * nor pivot (seccomp; no capability in the namespaces that own
		 * its mounts) and holds no descriptor outside. pivot_root
		 * would leave the old root to be lazily unmounted, whose RCU
		 * grace period was ~1.6 ms of every spawn. The root is made
		 * read-only here, while this namespace's capabilities last;
		 * the user namespace is made before the chroot, which would
		 * forbid it.
		 */
		struct child_err e = { 0, 0, 0 };

		MUST(child_mount(NULL, ".", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID |
				 MS_NODEV, NULL), ST_ROOT_RO, 0);
		/* while still real root: the work directory is the tool's */
		MUST(KVS_SYS(SYS_chdir, KVS_WORK + 1), ST_CHDIR, 0);
		MUST(KVS_SYS(SYS_unshare, CLONE_NEWUSER), ST_USERNS, 0);
		if (KVS_SYS(SYS_write, c->status_fd, &e, sizeof(e)) != sizeof(e) ||
		    KVS_SYS(SYS_read, c->sync_fd, &b, 1) != 1)
			child_exit();
		/* mapped, with every capability of the new user namespace until
		 * the drop: its sysctls (through the template's proc, out of
		 * the tool's reach: /proc/sys/user is the opener's user
		 * namespace's whichever proc shows it), then the chroot (the
		 * working directory stays the work directory, inside the new
		 * root) */
		child_sysctl(c, KVS_SYSCTL, "/sys/user/max_user_namespaces", "0", 1);
		MUST(KVS_SYS(SYS_chroot, KVS_STAGE), ST_PIVOT, 3);
		return;
	}
	/* the unprivileged launcher's tool owns its mount namespace until it
	 * drops its capabilities: pivot_root, and the old root detached; on
	 * an initramfs root, which cannot be pivoted away from, MS_MOVE and
	 * chroot */
	{
		long r = KVS_SYS(SYS_pivot_root, ".", ".");

		if (r == -EINVAL) {
			MUST(child_mount(".", "/", NULL, MS_MOVE, NULL), ST_PIVOT, 3);
			MUST(KVS_SYS(SYS_chroot, "."), ST_PIVOT, 3);
		} else if (r < 0) {
			child_fail(c, ST_PIVOT, (int)-r, 0);
		} else {
			MUST(KVS_SYS(SYS_umount2, ".", MNT_DETACH), ST_PIVOT, 1);
		}
	}
	MUST(KVS_SYS(SYS_chdir, "/"), ST_PIVOT, 2);
	MUST(child_mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
			 NULL), ST_ROOT_RO, 0);
	MUST(KVS_SYS(SYS_chdir, KVS_WORK), ST_CHDIR, 0);
}

static KVS_CHILD void child_creds(const struct plan *c)
{
	struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct data[2] = { { 0, 0, 0 }, { 0, 0, 0 } };
	unsigned int cap;
	long r;

	for (cap = 0; cap <= c->p->cap_last; cap++) {
		r = KVS_SYS(SYS_prctl, PR_CAPBSET_DROP, cap, 0, 0, 0);
		if (r < 0 && r != -EINVAL)
			child_fail(c, ST_BOUNDING, (int)-r, (int)cap);
	}
	/* raw system calls: glibc's wrappers broadcast the change to every
	 * thread it knows of, which are the caller's, not this child's */
	if (c->p->privileged)
		MUST(KVS_SYS(SYS_setgroups, 0, NULL), ST_GROUPS, 0);
	MUST(KVS_SYS(SYS_setresgid, KVS_INSIDE_UID, KVS_INSIDE_UID, KVS_INSIDE_UID), ST_GID, 0);
	MUST(KVS_SYS(SYS_setresuid, KVS_INSIDE_UID, KVS_INSIDE_UID, KVS_INSIDE_UID), ST_UID, 0);
	MUST(KVS_SYS(SYS_capset, &hdr, data), ST_CAPS, 0);
	r = KVS_SYS(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
	if (r < 0 && r != -EINVAL)
		child_fail(c, ST_CAPS, (int)-r, 1);
	MUST(child_setrlimit(RLIMIT_CORE, &c->rl_core), ST_RLIMIT, 0);
	MUST(child_setrlimit(RLIMIT_CPU, &c->rl_cpu), ST_RLIMIT, 0);
	MUST(child_setrlimit(RLIMIT_FSIZE, &c->rl_fsize), ST_RLIMIT, 0);
	if (c->set_nproc)
		MUST(child_setrlimit(RLIMIT_NPROC, &c->rl_nproc), ST_RLIMIT, 0);
	/* the limit applies to mappings made from now on: the caller's
	 * address space this child shares until execve is not its own */
	if (c->set_as)
		MUST(child_setrlimit(RLIMIT_AS, &c->rl_as), ST_RLIMIT, 0);
	/* after the uid change, which clears it */
	KVS_SYS(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	MUST(KVS_SYS(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), ST_NNP, 0);
}

static __attribute__((noreturn)) KVS_CHILD void child_main(void *arg)
{
	const struct plan *c = arg;
	const struct kvs_bpf *bpf = &c->p->bpf[c->network ? 1 : 0];
	struct sock_fprog prog = { .len = bpf->len, .filter = bpf->f };
	long r;

	child_mounts(c);
	child_creds(c);
	if (c->p->landlock_abi > 0) {
		r = kvs_landlock_apply(c->p->landlock_abi, c->rules, c->n_rules, !c->network);
		if (r)
			child_fail(c, ST_LANDLOCK, (int)-r, 0);
	}
	/* what the caller's thread had: ignored signals (a daemon often
	 * ignores SIGPIPE) would survive execve, and the handlers are the
	 * caller's code; every signal stayed blocked until here (run_common
	 * blocked them around clone3) */
	{
		struct kvs_ksigaction { void *handler; unsigned long flags; void *restorer;
					uint64_t mask; } dfl = { SIG_DFL, 0, NULL, 0 };
		uint64_t none = 0;
		int sig;

		for (sig = 1; sig < 65; sig++)
			if (sig != SIGKILL && sig != SIGSTOP)
				KVS_SYS(SYS_rt_sigaction, sig, &dfl, NULL, sizeof(uint64_t));
		KVS_SYS(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL, sizeof(uint64_t));
	}
	KVS_SYS(SYS_umask, 022);
	MUST(KVS_SYS(SYS_dup3, c->in_fd, 0, 0), ST_STDIO, 0);
	MUST(KVS_SYS(SYS_dup3, c->out_fd, 1, 0), ST_STDIO, 0);
	MUST(KVS_SYS(SYS_dup3, c->err_fd, 2, 0), ST_STDIO, 0);
	/* nothing of the launcher's reaches the tool; status_fd is O_CLOEXEC */
	MUST(KVS_SYS(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC), ST_STDIO, 1);
	/* last: the launcher's descriptors (a busy caller's are many) are
	 * open until execve, and Landlock opened some of its own */
	MUST(child_setrlimit(RLIMIT_NOFILE, &c->rl_nofile), ST_RLIMIT, 1);
	MUST(KVS_SYS(SYS_prctl, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog), ST_SECCOMP, 0);
	r = KVS_SYS(SYS_execve, c->exe, c->argv, c->t->envp);
	child_fail(c, ST_EXEC, (int)-r, 0);
}
/* ---- the parent ----------------------------------------------------- */

/* The bind or skeleton entry a failed step was working on. */
static const char *what_of(const struct kvs_tool *t, const struct child_err *ce)
{
	if (ce->step == ST_SKELETON && ce->index >= 0 && ce->index < t->n_skel)
		return t->skel[ce->index].rel;
	if ((ce->step == ST_CLONE_TREE || ce->step == ST_ATTR || ce->step == ST_MOVE) &&
	    ce->index >= 0 && ce->index < t->n_binds)
		return t->binds[ce->index].src;
	if ((ce->step == ST_CLONE_TREE || ce->step == ST_ATTR || ce->step == ST_MOVE) &&
	    ce->index == -1)
		return "(the work directory)";
	return NULL;
}

static int write_map(pid_t pid, const char *file, const char *text)
{
	char path[64];
	int fd, rc = 0;
	size_t len = strlen(text);

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (write(fd, text, len) != (ssize_t)len)
		rc = -errno;
	close(fd);
	return rc;
}

static int map_ids(const struct kvs_policy *p, const struct plan *c, pid_t pid)
{
	char buf[64];
	int rc;

	if (!p->privileged) {
		rc = write_map(pid, "setgroups", "deny");
		if (rc)
			return rc;
	}
	snprintf(buf, sizeof(buf), "%u %u 1\n", KVS_INSIDE_UID, (unsigned int)c->uid);
	rc = write_map(pid, "uid_map", buf);
	if (rc)
		return rc;
	snprintf(buf, sizeof(buf), "%u %u 1\n", KVS_INSIDE_UID, (unsigned int)c->gid);
	return write_map(pid, "gid_map", buf);
}

/* Let the child go on: an unprivileged launcher maps the ids of the user
 * namespace clone3() made; a root launcher waits for the child to have
 * built its root and unshared its user namespace, then maps it. A child
 * that fails first leaves its record in *early and -EAGAIN comes back. */
static int handshake(const struct kvs_policy *p, const struct plan *c, pid_t pid,
		     int status_fd, double deadline, struct child_err *early)
{
	struct child_err e;
	int rc;

	if (c->priv) {
		struct pollfd pf = { .fd = status_fd, .events = POLLIN };
		double left = deadline - kvs_now();

		if (poll(&pf, 1, left > 0 ? (int)(left * 1000) + 1 : 0) <= 0)
			return -ETIMEDOUT;
		if (read(status_fd, &e, sizeof(e)) != sizeof(e)) {
			early->step = ST_SYNC;
			early->err = EIO;
			return -EAGAIN;
		}
		if (e.step != 0) {
			*early = e;
			return -EAGAIN;
		}
	}
	rc = map_ids(p, c, pid);
	if (rc)
		return rc;
	return write(c->sync_fd_parent, "g", 1) == 1 ? 0 : -EIO;
}

/* An fd >= 3 (the child dup2()s onto 0..2). */
static int high_fd(int fd)
{
	int nfd;

	if (fd < 0 || fd > 2)
		return fd;
	nfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	close(fd);
	return nfd;
}

int kvs_make_stdin(const void *data, size_t len)
{
	int fd = memfd_create("kvs-stdin", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	const char *s = data;
	size_t off = 0;

	if (fd < 0)
		return -errno;
	while (off < len) {
		ssize_t n = write(fd, s + off, len - off);

		if (n <= 0) {
			close(fd);
			return -EIO;
		}
		off += n;
	}
	if (lseek(fd, 0, SEEK_SET) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL)) {
		close(fd);
		return -errno;
	}
	return high_fd(fd);
}

struct capture {
	int fd;
	char *buf;
	size_t len, cap_bytes, alloc;
	int truncated, eof;
};

/* Read what is there; 1 when the cap was passed. */
static int capture_read(struct capture *c)
{
	char tmp[65536];

	for (;;) {
		ssize_t n = read(c->fd, tmp, sizeof(tmp));

		if (n == 0) {
			c->eof = 1;
			return 0;
		}
		if (n < 0)
			return 0;	/* EAGAIN */
		if (c->len + n > c->cap_bytes) {
			n = c->cap_bytes - c->len;
			c->truncated = 1;
		}
		if (c->len + n + 1 > c->alloc) {
			size_t want = c->alloc ? c->alloc : 4096;
			char *nb;

			while (want < c->len + n + 1)
				want *= 2;
			if (want > c->cap_bytes + 1)
				want = c->cap_bytes + 1;
			nb = realloc(c->buf, want);
			if (!nb) {
				c->truncated = 1;
				return 1;
			}
			c->buf = nb;
			c->alloc = want;
		}
		memcpy(c->buf + c->len, tmp, n);
		c->len += n;
		if (c->truncated)
			return 1;
	}
}

static void kill_run(const struct kvs_policy *p, struct kvs_cg *cg, int pidfd)
{
	kvs_cgroup_kill(p, cg);
	if (pidfd >= 0)
		syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
}

static int resolve_exe(const struct kvs_tool *t, const char *name, int exec_workdir,
		       char *out, size_t outlen, char *note, size_t notelen)
{
	char cand[PATH_MAX], canon[PATH_MAX];
	const char *s, *e;

	/* the tool's own work directory, when the tool may run what it built */
	if (exec_workdir && !strncmp(name, KVS_WORK "/", strlen(KVS_WORK) + 1)) {
		if (strstr(name, "/..") || strlen(name) >= outlen)
			return -EINVAL;
		snprintf(out, outlen, "%s", name);
		return 0;
	}
	if (strchr(name, '/')) {
		if (name[0] != '/') {
			kvs_note(note, notelen, "'%s': want an absolute path or a name on the "
				 "tool's path", name);
			return -EINVAL;
		}
		if (!realpath(name, canon)) {
			kvs_note(note, notelen, "%s: %s", name, strerror(errno));
			return -ENOENT;
		}
		if (!kvs_exec_allowed(t, canon)) {
			kvs_note(note, notelen, "tool '%s' may not execute %s", t->name, canon);
			return -EPERM;
		}
		snprintf(out, outlen, "%s", canon);
		return 0;
	}
	for (s = t->path; *s; s = *e ? e + 1 : e) {
		e = strchr(s, ':');
		if (!e)
			e = s + strlen(s);
		if (e == s)
			continue;
		snprintf(cand, sizeof(cand), "%.*s/%s", (int)(e - s), s, name);
		if (realpath(cand, canon) && kvs_exec_allowed(t, canon) &&
		    access(canon, X_OK) == 0) {
			snprintf(out, outlen, "%s", canon);
			return 0;
		}
	}
	kvs_note(note, notelen, "'%s' is not an executable the tool '%s' may run (path %s)",
		 name, t->name, t->path);
	return -ENOENT;
}

/*
 * The template mount namespace a root launcher's runs copy: one empty
 * tmpfs, read-only, holding only the directories /stage (where a run
 * builds its root) and /sysctl, a proc through which a run, out of its
 * tool's reach, sets its user namespace's sysctls (the /proc/sys/user
 * files are the opener's user namespace's, whichever proc shows them). A run's child
 * clones its binds from the host's namespace (detached trees), then
 * enters a private copy of this one to build its root, so clone3() no
 * longer copies every host mount (and the run's exit tears none of them
 * down), and what lies beneath the run's root after its chroot is this
 * empty tmpfs, not the host's root.
 */
int kvs_mntns_create(void)
{
	struct clone_args ca;
	char path[64], b = 0;
	long pid;
	int pidfd = -1, fd = -1, sp[2];
	siginfo_t si;

	if (pipe2(sp, O_CLOEXEC))
		return -errno;
	memset(&ca, 0, sizeof(ca));
	ca.flags = CLONE_NEWNS | CLONE_PIDFD;
	ca.pidfd = (uint64_t)(uintptr_t)&pidfd;
	ca.exit_signal = 0;
	pid = syscall(SYS_clone3, &ca, sizeof(ca));
	if (pid == 0) {
		/* system calls only (the caller may be multi-threaded) */
		char ok = 1;

		if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
		    mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
			  "size=4k,nr_inodes=8,mode=0755") ||
		    mkdir("/tmp" KVS_STAGE, 0755) || mkdir("/tmp" KVS_SYSCTL, 0755) ||
		    mount("proc", "/tmp" KVS_SYSCTL, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) ||
		    chdir("/tmp"))
			ok = 0;
		/* an initramfs root cannot be pivoted away from: moved over
		 * instead (setns() of this namespace finds the tmpfs on top) */
		else if (syscall(SYS_pivot_root, ".", ".") ? errno != EINVAL ||
			 mount(".", "/", NULL, MS_MOVE, NULL) || chroot(".") :
			 umount2(".", MNT_DETACH))
			ok = 0;
		else if (chdir("/") ||
			 mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID |
			       MS_NODEV | MS_NOEXEC, NULL))
			ok = 0;
		if (write(sp[1], &ok, 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	close(sp[1]);
	if (pid < 0) {
		close(sp[0]);
		return -errno;
	}
	if (read(sp[0], &b, 1) == 1 && b == 1) {
		snprintf(path, sizeof(path), "/proc/%ld/ns/mnt", pid);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			fd = -errno;
	} else {
		fd = -EIO;
	}
	close(sp[0]);
	syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
	waitid((idtype_t)P_PIDFD, (id_t)pidfd, &si, WEXITED | __WALL);
	close(pidfd);
	return fd;
}

static void result_init(struct kvs_result *res)
{
	memset(res, 0, sizeof(*res));
}

static int refuse(struct kvs_result *res, int rc, const char *fmt, const char *a)
{
	res->reason = KVS_EXIT_REFUSED;
	if (fmt)
		kvs_note(res->note, sizeof(res->note), fmt, a);
	return rc;
}

/*
 * The stacks the children run on until their execve (KVS_CLONE_VM): a
 * guard page below each, kept for the next spawn rather than unmapped
 * (unmapping from a multi-threaded caller costs a TLB shootdown, a fresh
 * mapping its page faults). As many as spawns ran at once.
 */
#define CHILD_STACK (64u << 10)
#define CHILD_GUARD 4096u
#define STACKS_KEPT 64

static struct {
	pthread_mutex_t lock;
	void *free[STACKS_KEPT];
	int n;
} stacks = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void *stack_get(void)
{
	void *s = NULL;

	pthread_mutex_lock(&stacks.lock);
	if (stacks.n)
		s = stacks.free[--stacks.n];
	pthread_mutex_unlock(&stacks.lock);
	if (s)
		return s;
	s = mmap(NULL, CHILD_GUARD + CHILD_STACK, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (s == MAP_FAILED)
		return NULL;
	if (mprotect(s, CHILD_GUARD, PROT_NONE)) {
		munmap(s, CHILD_GUARD + CHILD_STACK);
		return NULL;
	}
	return s;
}

static void stack_put(void *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&stacks.lock);
	if (stacks.n < STACKS_KEPT) {
		stacks.free[stacks.n++] = s;
		s = NULL;
	}
	pthread_mutex_unlock(&stacks.lock);
	if (s)
		munmap(s, CHILD_GUARD + CHILD_STACK);
}

void kvs_spawn_stacks_reset(void)
{
	/* after fork(): the lock may have been held by a thread that is not
	 * here; the kept stacks are mapped here too, and free */
	pthread_mutex_init(&stacks.lock, NULL);
}

/* A tool left running with its stdio open (kvs_spawn). */
struct kvs_proc {
	const struct kvs_policy *p;
	struct kvs_cg cg;
	pid_t pid;
	int pidfd;
	int in_fd, out_fd, err_fd;
	double t0, deadline;
	int temp_wd;
	char workdir[PATH_MAX];
};

/* kvs_run(), or with ip set kvs_spawn(): the same launch, then either
 * supervise the run to its end or hand the running tool over. */
static int run_common(const struct kvs_policy *p, const struct kvs_request *req,
		      struct kvs_result *res, struct kvs_proc *ip, int stdin_fd)
{
	const struct kvs_tool *t;
	const struct kvs_limits *lim = req->limits;
	struct plan *c;
	struct kvs_cg cg = { .dirfd = -1 };
	struct capture out = { .fd = -1 }, err = { .fd = -1 };
	char canon_wd[PATH_MAX], exe[PATH_MAX];
	int sync_p[2] = { -1, -1 }, stat_p[2] = { -1, -1 }, out_p[2] = { -1, -1 };
	int err_p[2] = { -1, -1 }, in_fd = -1, pidfd = -1, temp_wd = 0, rc = 0, i;
	int in_w = -1;
	uint32_t timeout_ms;
	uint64_t cap_bytes;
	size_t argbytes = 0;
	struct clone_args ca;
	double t0, deadline, exited_at = 0;
	long pid;
	int exited = 0, killed = 0, setup_done = 0, rc_wait;
	struct child_err early = { -1, 0, 0 };
	siginfo_t si;
	uint64_t all = ~0ull, old = 0;
	void *stack = NULL;
	int netns_fd = -1;

	result_init(res);
	t = kvs_find_tool(p, req->tool);
	if (!t)
		return refuse(res, -ENOENT, "unknown tool '%s': refused", req->tool ? req->tool : "");
	if (!req->argv || !req->argv[0] || !req->argv[0][0])
		return refuse(res, -EINVAL, "%sno command", "");
	for (i = 0; req->argv[i]; i++) {
		if (i >= KVS_MAX_ARGS)
			return refuse(res, -E2BIG, "%smore than 256 arguments", "");
		argbytes += strlen(req->argv[i]) + 1;
	}
	if (argbytes > KVS_MAX_ARG_BYTES)
		return refuse(res, -E2BIG, "%sarguments longer than 256 KiB", "");
	if (req->stdin_len > KVS_MAX_STDIN || (req->stdin_len && !req->stdin_data))
		return refuse(res, -E2BIG, "%sstdin larger than 16 MiB", "");
	if (p->without_memcg == KVS_NOMEM_REFUSE && (!p->cgroup_ok || !p->have_memory))
		return refuse(res, -EPERM, "%sno memory controller on this host: runs are refused "
			      "(without_memory_controller = refuse)", "");
	c = calloc(1, sizeof(*c));
	if (!c)
		return refuse(res, -ENOMEM, "%sout of memory", "");
	c->p = p;
	c->t = t;
	res->unenforced = (p->landlock_abi <= 0 ? KVS_UNENF_LANDLOCK : 0) |
			  (!p->cgroup_ok ? KVS_UNENF_CGROUP : 0) |
			  (!p->cgroup_ok || !p->have_cpu ? KVS_UNENF_CPU : 0) |
			  (!p->cgroup_ok || !p->have_memory ? KVS_UNENF_MEMORY : 0) |
			  (!p->cgroup_ok || !p->have_pids ? KVS_UNENF_PIDS : 0);
	c->exec_workdir = t->exec_workdir;
	c->network = t->network;
	rc = resolve_exe(t, req->argv[0], t->exec_workdir, exe, sizeof(exe), res->note,
			 sizeof(res->note));
	if (rc) {
		free(c);
		res->reason = KVS_EXIT_REFUSED;
		return rc;
	}
	rc = kvs_wd_prepare(p, req->workdir, 0, canon_wd, &temp_wd, res->note, sizeof(res->note));
	if (rc) {
		free(c);
		res->reason = KVS_EXIT_SETUP;
		return rc;
	}
	timeout_ms = t->timeout_ms;
	cap_bytes = t->output;
	if (lim) {
		if (lim->timeout_ms && lim->timeout_ms < timeout_ms)
			timeout_ms = lim->timeout_ms;
		if (lim->output_bytes && lim->output_bytes < cap_bytes)
			cap_bytes = lim->output_bytes;
	}
	c->workdir = canon_wd;
	kvs_wd_ids(p, canon_wd, &c->uid, &c->gid);
	c->exe = exe;
	c->argv = (char *const *)req->argv;
	c->tmp_bytes = t->tmp_bytes;
	snprintf(c->tmp_opts, sizeof(c->tmp_opts), "size=%llu,mode=1777,nr_inodes=16384",
		 (unsigned long long)t->tmp_bytes);
	c->rl_core = (struct rlimit){ 0, 0 };
	c->rl_cpu = (struct rlimit){ timeout_ms / 1000 + 1, timeout_ms / 1000 + 2 };
	c->rl_nofile = (struct rlimit){ t->nofile, t->nofile };
	/* pipes and socket buffers are memory RLIMIT_AS does not see (a
	 * tool's own nofile, such as node's need, is the operator's call) */
	if (p->restrict_memory && !t->nofile_set && c->rl_nofile.rlim_cur > KVS_NOMEM_NOFILE)
		c->rl_nofile = (struct rlimit){ KVS_NOMEM_NOFILE, KVS_NOMEM_NOFILE };
	c->rl_fsize = (struct rlimit){ t->fsize, t->fsize };
	if (!p->have_pids || !p->cgroup_ok) {
		uint32_t pids = lim && lim->pids && lim->pids < t->pids ? lim->pids : t->pids;

		c->set_nproc = 1;
		c->rl_nproc = (struct rlimit){ pids, pids };
	}
	if (!p->have_memory || !p->cgroup_ok) {
		uint64_t mem = lim && lim->memory_bytes && lim->memory_bytes < t->memory ?
			       lim->memory_bytes : t->memory;

		c->set_as = 1;
		/* address space, not memory: leave room for mappings never touched */
		c->rl_as = (struct rlimit){ mem + (256ull << 20), mem + (256ull << 20) };
	}
	for (i = 0; i < t->n_rules; i++)
		c->rules[c->n_rules++] = &t->rules[i];
	snprintf(c->work_rule.path, sizeof(c->work_rule.path), "%s", KVS_WORK);
	c->work_rule.acc = t->exec_workdir ? KVS_ACC_RWX : KVS_ACC_RW;
	c->rules[c->n_rules++] = &c->work_rule;

	if (pipe2(sync_p, O_CLOEXEC) || pipe2(stat_p, O_CLOEXEC) || pipe2(out_p, O_CLOEXEC) ||
	    pipe2(err_p, O_CLOEXEC)) {
		rc = -errno;
		goto setup_fail;
	}
	for (i = 0; i < 2; i++) {
		sync_p[i] = high_fd(sync_p[i]);
		stat_p[i] = high_fd(stat_p[i]);
		out_p[i] = high_fd(out_p[i]);
		err_p[i] = high_fd(err_p[i]);
	}
	if (ip) {
		/* a socket, not a pipe: the caller writes with MSG_NOSIGNAL and
		 * a server that died costs it an EPIPE, never a SIGPIPE */
		int sv[2];

		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
			rc = -errno;
			goto setup_fail;
		}
		in_fd = high_fd(sv[0]);
		in_w = high_fd(sv[1]);
		shutdown(in_fd, SHUT_WR);
		shutdown(in_w, SHUT_RD);
	} else {
		in_fd = stdin_fd >= 0 ? high_fd(fcntl(stdin_fd, F_DUPFD_CLOEXEC, 3)) :
			kvs_make_stdin(req->stdin_data, req->stdin_len);
	}
	if (in_fd < 0) {
		rc = in_fd;
		goto setup_fail;
	}
	c->sync_fd = sync_p[0];
	c->sync_fd_parent = sync_p[1];
	c->status_fd = stat_p[1];
	c->in_fd = in_fd;
	c->out_fd = out_p[1];
	c->err_fd = err_p[1];

	rc = kvs_cgroup_create(p, t, lim, &cg, res->note, sizeof(res->note));
	if (rc && p->cgroup_ok)
		goto setup_fail;
	rc = 0;
	res->cgroup_id = cg.id;

	memset(&ca, 0, sizeof(ca));
	c->priv = p->privileged;
	c->mntns_fd = c->priv ? p->mntns_fd : -1;
	ca.flags = CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP | CLONE_PIDFD;
	if (c->mntns_fd < 0)
		ca.flags |= CLONE_NEWNS;
	if (!c->priv)
		ca.flags |= CLONE_NEWUSER;
	if (!t->network) {
		/* a network namespace of its own: one made ahead when the pool
		 * has one (root), else clone3 makes it */
		if (c->priv)
			netns_fd = kvs_netns_take();
		if (netns_fd < 0)
			ca.flags |= CLONE_NEWNET;
	}
	c->netns_fd = netns_fd;
	if (cg.dirfd >= 0) {
		ca.flags |= CLONE_INTO_CGROUP;
		ca.cgroup = (uint64_t)cg.dirfd;
	}
	ca.pidfd = (uint64_t)(uintptr_t)&pidfd;
	ca.exit_signal = 0;	/* no SIGCHLD into the caller's process */
	if (KVS_CLONE_VM) {
		/* the child shares this address space until its execve: no
		 * page tables copied, none torn down, no copy-on-write faults
		 * on either side; the plan is read-only from here on, and
		 * stack and plan live until the child has exec'd or died */
		stack = stack_get();
		if (!stack) {
			rc = -ENOMEM;
			goto setup_fail;
		}
		ca.flags |= CLONE_VM;
		ca.stack = (uint64_t)(uintptr_t)stack + CHILD_GUARD;
		ca.stack_size = CHILD_STACK;
	}
	/* no signal handler of the caller's may run in the child (in its
	 * memory, with CLONE_VM): blocked until the child has reset them;
	 * every one, glibc's own two included, which pthread_sigmask()
	 * would leave out */
	KVS_SYS(SYS_rt_sigprocmask, SIG_SETMASK, &all, &old, sizeof(all));
	t0 = kvs_now();
#if KVS_CLONE_VM
	pid = kvs_clone3_vm(&ca, sizeof(ca), child_main, c);
#else
	pid = syscall(SYS_clone3, &ca, sizeof(ca));
	if (pid == 0)
		child_main(c);
	if (pid < 0)
		pid = -errno;
#endif
	KVS_SYS(SYS_rt_sigprocmask, SIG_SETMASK, &old, NULL, sizeof(old));
	if (pid < 0) {
		rc = (int)pid;
		kvs_note(res->note, sizeof(res->note), "clone3: %s", strerror(-rc));
		goto setup_fail;
	}
	if (netns_fd >= 0) {
		close(netns_fd);	/* the child has its own descriptor */
		netns_fd = -1;
	}
	close(sync_p[0]);
	sync_p[0] = -1;
	close(stat_p[1]);
	stat_p[1] = -1;
	close(out_p[1]);
	out_p[1] = -1;
	close(err_p[1]);
	err_p[1] = -1;
	close(in_fd);
	in_fd = -1;

	if (req->on_cgroup && req->on_cgroup(req->ctx, cg.id, (pid_t)pid)) {
		rc = -ECANCELED;
		kvs_note(res->note, sizeof(res->note), "refused by the caller's cgroup hook");
	} else {
		rc = handshake(p, c, (pid_t)pid, stat_p[0], t0 + timeout_ms / 1000.0, &early);
		if (rc == -EAGAIN)
			rc = 0;	/* the child failed; its record is in early */
		else if (rc)
			kvs_note(res->note, sizeof(res->note), "writing the id map: %s",
				 strerror(-rc));
	}
	if (rc) {
		syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
		res->reason = KVS_EXIT_SETUP;
	}
	close(sync_p[1]);
	sync_p[1] = -1;

	if (ip && !rc && early.step <= 0) {
		/* the tool is released: wait for its execve (the status pipe
		 * closes) or its setup failure (a record) */
		struct pollfd spf = { .fd = stat_p[0], .events = POLLIN };
		double left = t0 + timeout_ms / 1000.0 - kvs_now();
		struct child_err ce;

		if (poll(&spf, 1, left > 0 ? (int)(left * 1000) + 1 : 0) <= 0) {
			early = (struct child_err){ ST_EXEC, ETIMEDOUT, 0 };
		} else if (read(stat_p[0], &ce, sizeof(ce)) == sizeof(ce) && ce.step > 0) {
			early = ce;
		} else {
			res->setup_s = kvs_now() - t0;
			fcntl(out_p[0], F_SETFL, O_NONBLOCK);
			fcntl(err_p[0], F_SETFL, O_NONBLOCK);
			fcntl(in_w, F_SETFL, O_NONBLOCK);
			ip->p = p;
			ip->cg = cg;
			ip->pid = (pid_t)pid;
			ip->pidfd = pidfd;
			ip->in_fd = in_w;
			ip->out_fd = out_p[0];
			ip->err_fd = err_p[0];
			ip->t0 = t0;
			ip->deadline = t0 + timeout_ms / 1000.0;
			ip->temp_wd = temp_wd;
			snprintf(ip->workdir, sizeof(ip->workdir), "%s", canon_wd);
			cg.dirfd = -1;
			pidfd = -1;
			in_w = -1;
			out_p[0] = err_p[0] = -1;
			temp_wd = 0;
			goto done;
		}
	}
	if (in_w >= 0) {
		close(in_w);
		in_w = -1;
	}

	out.fd = out_p[0];
	err.fd = err_p[0];
	out.cap_bytes = err.cap_bytes = cap_bytes;
	fcntl(out.fd, F_SETFL, O_NONBLOCK);
	fcntl(err.fd, F_SETFL, O_NONBLOCK);
	deadline = t0 + timeout_ms / 1000.0;
	while (!exited || !out.eof || !err.eof || !setup_done) {
		struct pollfd pf[4];
		int nf = 0, ms, ix_pid = -1, ix_out = -1, ix_err = -1, ix_st = -1;
		double now = kvs_now();

		if (exited && now - exited_at > 2.0)
			break;	/* every holder of the pipes is dead by now */
		if (!exited) {
			ix_pid = nf;
			pf[nf++] = (struct pollfd){ .fd = pidfd, .events = POLLIN };
		}
		if (!out.eof) {
			ix_out = nf;
			pf[nf++] = (struct pollfd){ .fd = out.fd, .events = POLLIN };
		}
		if (!err.eof) {
			ix_err = nf;
			pf[nf++] = (struct pollfd){ .fd = err.fd, .events = POLLIN };
		}
		if (!setup_done) {
			ix_st = nf;
			pf[nf++] = (struct pollfd){ .fd = stat_p[0], .events = POLLIN };
		}
		if (!killed && now >= deadline) {
			killed = 1;
			if (res->reason == KVS_EXIT_CODE)
				res->reason = KVS_EXIT_TIMEOUT;
			kill_run(p, &cg, pidfd);
		}
		ms = killed || exited ? 100 : (int)((deadline - now) * 1000) + 1;
		if (poll(pf, nf, ms) < 0 && errno != EINTR)
			break;
		if (ix_st >= 0 && (pf[ix_st].revents || early.step > 0)) {
			struct child_err ce = early;
			ssize_t n = early.step > 0 ? (ssize_t)sizeof(ce) :
				    read(stat_p[0], &ce, sizeof(ce));

			setup_done = 1;
			res->setup_s = kvs_now() - t0;
			if (n == sizeof(ce) && ce.step > 0 && ce.step <= ST_EXEC) {
				res->reason = KVS_EXIT_SETUP;
				if (ce.step == ST_EXEC)
					kvs_note(res->note, sizeof(res->note), "execve %s: %s", exe,
						 strerror(ce.err));
				else
					kvs_note(res->note, sizeof(res->note),
						 "sandbox setup failed at %s%s%s: %s",
						 step_names[ce.step], what_of(t, &ce) ? " " : "",
						 what_of(t, &ce) ? what_of(t, &ce) : "",
						 strerror(ce.err));
				rc = -(ce.err ? ce.err : EIO);
			}
		}
		if (ix_out >= 0 && pf[ix_out].revents && capture_read(&out) && !killed) {
			killed = 1;
			res->reason = KVS_EXIT_OUTPUT_CAP;
			kill_run(p, &cg, pidfd);
		}
		if (ix_err >= 0 && pf[ix_err].revents && capture_read(&err) && !killed) {
			killed = 1;
			res->reason = KVS_EXIT_OUTPUT_CAP;
			kill_run(p, &cg, pidfd);
		}
		if (ix_pid >= 0 && pf[ix_pid].revents) {
			exited = 1;
			exited_at = kvs_now();
		}
		if (out.truncated && !out.eof)
			capture_read(&out);	/* drain past the cap */
	}
	memset(&si, 0, sizeof(si));
	while ((rc_wait = waitid((idtype_t)P_PIDFD, (id_t)pidfd, &si, WEXITED | __WALL)) &&
	       errno == EINTR)
		;	/* the plan and the stack are the child's until it is gone */
	if (rc_wait == 0) {
		if (res->reason == KVS_EXIT_CODE) {
			if (si.si_code == CLD_EXITED) {
				res->status = si.si_status;
			} else {
				res->reason = KVS_EXIT_SIGNAL;
				res->status = si.si_status;
			}
		} else if (res->reason != KVS_EXIT_SETUP) {
			res->status = si.si_status;
		}
	}
	if (!setup_done)
		res->setup_s = kvs_now() - t0;
	kill_run(p, &cg, -1);	/* anything left in the cgroup, e.g. after a setup failure */
	kvs_cgroup_finish(p, &cg, res);
	res->wall_s = kvs_now() - t0;
	if (res->reason == KVS_EXIT_SETUP && !rc)
		rc = -EIO;
	goto done;

setup_fail:
	if (netns_fd >= 0)
		close(netns_fd);
	res->reason = KVS_EXIT_SETUP;
	if (!res->note[0])
		kvs_note(res->note, sizeof(res->note), "setting up the run: %s", strerror(-rc));
	if (cg.dirfd >= 0)
		kvs_cgroup_finish(p, &cg, res);
done:
	res->out = out.buf ? out.buf : calloc(1, 1);
	res->err = err.buf ? err.buf : calloc(1, 1);
	if (res->out)
		res->out[out.len] = 0;
	if (res->err)
		res->err[err.len] = 0;
	res->out_len = out.len;
	res->err_len = err.len;
	res->out_truncated = out.truncated;
	res->err_truncated = err.truncated;
	for (i = 0; i < 2; i++) {
		if (sync_p[i] >= 0)
			close(sync_p[i]);
		if (stat_p[i] >= 0)
			close(stat_p[i]);
		if (out_p[i] >= 0)
			close(out_p[i]);
		if (err_p[i] >= 0)
			close(err_p[i]);
	}
	if (in_fd >= 0)
		close(in_fd);
	if (in_w >= 0)
		close(in_w);
	if (pidfd >= 0)
		close(pidfd);
	if (temp_wd)
		kvs_wd_remove(p, canon_wd);
	stack_put(stack);
	free(c);
	return rc;
}

int kvs_run(const struct kvs_policy *p, const struct kvs_request *req, struct kvs_result *res)
{
	if (p->spawner_fd >= 0)
		return kvs_spawner_run(p, req, res);
	return run_common(p, req, res, NULL, -1);
}

int kvs_run_direct(const struct kvs_policy *p, const struct kvs_request *req,
		   struct kvs_result *res, int stdin_fd)
{
	return run_common(p, req, res, NULL, stdin_fd);
}

int kvs_spawn(const struct kvs_policy *p, const struct kvs_request *req, struct kvs_proc **out,
	      struct kvs_result *res)
{
	struct kvs_proc *ip = calloc(1, sizeof(*ip));
	int rc;

	*out = NULL;
	if (!ip) {
		result_init(res);
		return refuse(res, -ENOMEM, "%sout of memory", "");
	}
	ip->pidfd = ip->in_fd = ip->out_fd = ip->err_fd = -1;
	rc = run_common(p, req, res, ip, -1);
	if (rc || ip->pidfd < 0) {
		free(ip);
		return rc ? rc : -EIO;
	}
	*out = ip;
	return 0;
}

int kvs_proc_stdin(const struct kvs_proc *ip) { return ip->in_fd; }
int kvs_proc_stdout(const struct kvs_proc *ip) { return ip->out_fd; }
int kvs_proc_stderr(const struct kvs_proc *ip) { return ip->err_fd; }
int kvs_proc_pidfd(const struct kvs_proc *ip) { return ip->pidfd; }
uint64_t kvs_proc_cgroup_id(const struct kvs_proc *ip) { return ip->cg.id; }
double kvs_proc_deadline(const struct kvs_proc *ip) { return ip->deadline; }

int kvs_proc_finish(struct kvs_proc *ip, unsigned int grace_ms, struct kvs_result *res)
{
	struct pollfd pf;
	siginfo_t si;

	result_init(res);
	if (!ip)
		return -EINVAL;
	if (ip->in_fd >= 0) {
		close(ip->in_fd);	/* EOF on its stdin: the polite way to stop */
		ip->in_fd = -1;
	}
	pf = (struct pollfd){ .fd = ip->pidfd, .events = POLLIN };
	if (poll(&pf, 1, (int)grace_ms) <= 0) {
		res->reason = KVS_EXIT_SIGNAL;
		kill_run(ip->p, &ip->cg, ip->pidfd);
	}
	memset(&si, 0, sizeof(si));
	if (waitid((idtype_t)P_PIDFD, (id_t)ip->pidfd, &si, WEXITED | __WALL) == 0) {
		res->status = si.si_status;
		if (si.si_code != CLD_EXITED)
			res->reason = KVS_EXIT_SIGNAL;
		else if (res->reason == KVS_EXIT_SIGNAL)
			res->reason = KVS_EXIT_CODE;
	}
	kill_run(ip->p, &ip->cg, -1);
	res->cgroup_id = ip->cg.id;
	kvs_cgroup_finish(ip->p, &ip->cg, res);
	res->wall_s = kvs_now() - ip->t0;
	res->out = calloc(1, 1);
	res->err = calloc(1, 1);
	close(ip->pidfd);
	if (ip->out_fd >= 0)
		close(ip->out_fd);
	if (ip->err_fd >= 0)
		close(ip->err_fd);
	if (ip->temp_wd)
		kvs_wd_remove(ip->p, ip->workdir);
	free(ip);
	return 0;
}

void kvs_result_free(struct kvs_result *res)
{
	if (!res)
		return;
	free(res->out);
	free(res->err);
	res->out = res->err = NULL;
}

struct many {
	const struct kvs_policy *p;
	const struct kvs_request *reqs;
	struct kvs_result *res;
	size_t n;
	atomic_size_t next;
	atomic_int first_rc;
};

static void *many_worker(void *arg)
{
	struct many *m = arg;
	size_t i;

	while ((i = atomic_fetch_add(&m->next, 1)) < m->n) {
		int rc = kvs_run(m->p, &m->reqs[i], &m->res[i]), zero = 0;

		if (rc)
			atomic_compare_exchange_strong(&m->first_rc, &zero, rc);
	}
	return NULL;
}

int kvs_run_many(const struct kvs_policy *p, const struct kvs_request *reqs,
		 struct kvs_result *res, size_t n, unsigned int max_parallel)
{
	struct many m = { .p = p, .reqs = reqs, .res = res, .n = n };
	pthread_t th[64];
	unsigned int k, started = 0;

	if (!max_parallel || max_parallel > n)
		max_parallel = (unsigned int)n;
	if (max_parallel > 64)
		max_parallel = 64;
	atomic_init(&m.next, 0);
	atomic_init(&m.first_rc, 0);
	for (k = 0; k < max_parallel; k++) {
		if (pthread_create(&th[k], NULL, many_worker, &m))
			break;
		started++;
	}
	if (!started)
		many_worker(&m);
	for (k = 0; k < started; k++)
		pthread_join(th[k], NULL);
	return atomic_load(&m.first_rc);
}
