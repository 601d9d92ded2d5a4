// SPDX-License-Identifier: MIT
/*
 * cgroup.c - each tool run's own cgroup v2: the parent the launcher
 * creates once (and enables cpu/memory/pids in, where the hierarchy
 * offers them), a child per run that clone3(CLONE_INTO_CGROUP) starts the
 * tool in, its limits, killing everything in it (cgroup.kill, else freeze
 * and SIGKILL each member), and its accounting and removal afterwards.
 *
 * Hosts with a hybrid hierarchy (v1 owns cpu, memory, pids) still get a
 * v2 cgroup per run (its id is what the tool-wait eBPF programs key on,
 * and it can be killed as a whole) but no v2 limits: that is detected and
 * said, and rlimits stand in where they can.
 *
 * Where the runs' parent goes, unless the policy says (cgroup_parent): in
 * a cgroup delegated to this process (systemd's Delegate=yes marks it
 * with the trusted.delegate or user.delegate xattr), inside it: the
 * process moves itself into a leaf, "daemon" (a cgroup with processes
 * may not hand controllers to its children), and the runs go under
 * "tools" beside it, so they live and die with the service and its
 * limits hold them; else kvarena-sandbox at the cgroup2 root.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "sandbox_internal.h"

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif

static atomic_uint run_seq;

/* The first cgroup2 mount in mountinfo. */
static int find_cgroup2(char *out, size_t len)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[4096];
	int found = 0;

	if (!f)
		return -errno;
	while (!found && fgets(line, sizeof(line), f)) {
		char *dash = strstr(line, " - "), *save = NULL, *tok;
		int field = 0;
		char mnt[PATH_MAX - 512] = "";

		if (!dash || strncmp(dash + 3, "cgroup2 ", 8))
			continue;
		*dash = 0;
		for (tok = strtok_r(line, " ", &save); tok; tok = strtok_r(NULL, " ", &save))
			if (++field == 5) {
				snprintf(mnt, sizeof(mnt), "%s", tok);
				break;
			}
		if (mnt[0] && !strchr(mnt, '\\')) {
			snprintf(out, len, "%s", mnt);
			found = 1;
		}
	}
	fclose(f);
	return found ? 0 : -ENOENT;
}

static int has_word(const char *list, const char *w);

/* This process's cgroup v2 path ("/system.slice/x.service"), or "". */
static void own_cgroup(char *out, size_t len)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	char line[PATH_MAX];

	out[0] = 0;
	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "0::", 3)) {
			size_t n = strcspn(line + 3, "\n");

			if (n < len) {
				memcpy(out, line + 3, n);
				out[n] = 0;
			}
			break;
		}
	fclose(f);
}

static int delegated(const char *dir)
{
	char v[8];
	ssize_t n = getxattr(dir, "trusted.delegate", v, sizeof(v) - 1);

	if (n <= 0)
		n = getxattr(dir, "user.delegate", v, sizeof(v) - 1);
	return n > 0 && v[0] == '1';
}

/*
 * In a delegated cgroup: move this process into its leaf "daemon" and
 * offer the controllers to the children, so that "tools" can have them.
 * 0 and the parent's path in out, or -errno (then the root's default).
 */
static int delegated_parent(const char *mnt, char *out, size_t len, char *note,
			    size_t notelen)
{
	char own[PATH_MAX - 600], dir[PATH_MAX - 64], leaf[PATH_MAX], pid[32], buf[512];
	static const char *const ctl[] = { "cpu", "memory", "pids" };
	int dfd, lfd, i;

	own_cgroup(own, sizeof(own));
	if (!own[0] || !strcmp(own, "/"))
		return -ENOENT;
	if (snprintf(dir, sizeof(dir), "%s%s", mnt, own) >= (int)sizeof(dir))
		return -ENAMETOOLONG;
	if (!delegated(dir))
		return -EPERM;
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	if (snprintf(leaf, sizeof(leaf), "%s/daemon", dir) >= (int)sizeof(leaf)) {
		close(dfd);
		return -ENAMETOOLONG;
	}
	if ((mkdir(leaf, 0755) && errno != EEXIST) ||
	    (lfd = open(leaf, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		close(dfd);
		return -errno;
	}
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	if (kvs_write_file_str(lfd, "cgroup.procs", pid)) {
		kvs_note(note, notelen, "cannot move into %s: runs go elsewhere", leaf);
		close(lfd);
		close(dfd);
		return -EIO;
	}
	close(lfd);
	if (kvs_read_small(dfd, "cgroup.controllers", buf, sizeof(buf)) < 0)
		buf[0] = 0;
	for (i = 0; i < 3; i++) {
		char w[16];

		if (!has_word(buf, ctl[i]))
			continue;
		snprintf(w, sizeof(w), "+%s", ctl[i]);
		kvs_write_file_str(dfd, "cgroup.subtree_control", w);
	}
	close(dfd);
	return snprintf(out, len, "%s/tools", dir) >= (int)len ? -ENAMETOOLONG : 0;
}

static int has_word(const char *list, const char *w)
{
	size_t n = strlen(w);
	const char *s = list;

	while ((s = strstr(s, w))) {
		if ((s == list || s[-1] == ' ') && (s[n] == ' ' || s[n] == '\n' || !s[n]))
			return 1;
		s += n;
	}
	return 0;
}

int kvs_cgroup_setup(struct kvs_policy *p)
{
	static const char *const ctl[] = { "cpu", "memory", "pids" };
	char mnt[PATH_MAX - 512], buf[512], up[PATH_MAX];
	struct statfs sfs;
	int dfd, i, *have[] = { &p->have_cpu, &p->have_memory, &p->have_pids };
	size_t k;

	if (!p->cgroup_parent[0]) {
		if (find_cgroup2(mnt, sizeof(mnt))) {
			kvs_note(p->notes, sizeof(p->notes),
				 "no cgroup2 mount: runs get no cgroup, no limits but rlimits");
			return -ENOENT;
		}
		if (delegated_parent(mnt, p->cgroup_parent, sizeof(p->cgroup_parent), p->notes,
				     sizeof(p->notes)))
			snprintf(p->cgroup_parent, sizeof(p->cgroup_parent), "%s/kvarena-sandbox",
				 mnt);
	}
	if (mkdir(p->cgroup_parent, 0755) && errno != EEXIST) {
		kvs_note(p->notes, sizeof(p->notes),
			 "cannot create cgroup %s (%s): runs get no cgroup, no limits but rlimits",
			 p->cgroup_parent, strerror(errno));
		return -errno;
	}
	dfd = open(p->cgroup_parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || fstatfs(dfd, &sfs) || sfs.f_type != CGROUP2_SUPER_MAGIC ||
	    faccessat(dfd, "cgroup.procs", W_OK, AT_EACCESS)) {
		kvs_note(p->notes, sizeof(p->notes),
			 "%s is not a writable cgroup v2 directory: runs get no cgroup", p->cgroup_parent);
		if (dfd >= 0)
			close(dfd);
		return -ENOTDIR;
	}
	p->cgroup_ok = 1;
	/* offer the controllers one level up, then take them for our children */
	snprintf(up, sizeof(up), "%s/..", p->cgroup_parent);
	for (k = 0; k < 3; k++) {
		int ufd = open(up, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		char w[16];

		if (ufd < 0)
			break;
		if (kvs_read_small(ufd, "cgroup.controllers", buf, sizeof(buf)) > 0 &&
		    has_word(buf, ctl[k])) {
			snprintf(w, sizeof(w), "+%s", ctl[k]);
			kvs_write_file_str(ufd, "cgroup.subtree_control", w);
		}
		close(ufd);
	}
	if (kvs_read_small(dfd, "cgroup.controllers", buf, sizeof(buf)) < 0)
		buf[0] = 0;
	for (i = 0; i < 3; i++) {
		char w[16];

		if (!has_word(buf, ctl[i]))
			continue;
		snprintf(w, sizeof(w), "+%s", ctl[i]);
		if (kvs_write_file_str(dfd, "cgroup.subtree_control", w) == 0)
			*have[i] = 1;
	}
	for (i = 0; i < 3; i++)
		if (!*have[i])
			kvs_note(p->notes, sizeof(p->notes),
				 "cgroup v2 controller '%s' unavailable under %s (hybrid or "
				 "undelegated hierarchy): %s", ctl[i], p->cgroup_parent,
				 i == 0 ? "no CPU limit (RLIMIT_CPU stops a spinning tool at its timeout)" :
				 i == 1 ? "no memory.max; RLIMIT_AS stands in, OOM is not reported" :
				 "no pids.max; RLIMIT_NPROC stands in");
	{
		/* cgroup.kill and cgroup.freeze exist only below the root: probe
		 * with a scratch child */
		char probe[64];
		int pfd;

		snprintf(probe, sizeof(probe), "probe-%d", (int)getpid());
		if (mkdirat(dfd, probe, 0755) == 0 || errno == EEXIST) {
			pfd = openat(dfd, probe, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			if (pfd >= 0) {
				p->have_kill = faccessat(pfd, "cgroup.kill", F_OK, 0) == 0;
				p->have_freeze = faccessat(pfd, "cgroup.freeze", F_OK, 0) == 0;
				p->have_peak = faccessat(pfd, "memory.peak", F_OK, 0) == 0;
				close(pfd);
			}
			unlinkat(dfd, probe, AT_REMOVEDIR);
		}
	}
	if (!p->have_kill)
		kvs_note(p->notes, sizeof(p->notes), "no cgroup.kill (kernel < 5.14): "
			 "killing a run freezes its cgroup and kills each member");
	close(dfd);
	return 0;
}

int kvs_cgroup_create(const struct kvs_policy *p, const struct kvs_tool *t,
		      const struct kvs_limits *lim, struct kvs_cg *cg,
		      char *note, size_t notelen)
{
	char buf[64];
	struct stat st;
	uint64_t mem = t->memory;
	uint32_t pids = t->pids, cpu = t->cpu_millicores;
	int rc;

	cg->dirfd = -1;
	cg->id = 0;
	cg->path[0] = 0;
	if (!p->cgroup_ok)
		return -ENOENT;
	if (lim) {
		if (lim->memory_bytes && lim->memory_bytes < mem)
			mem = lim->memory_bytes;
		if (lim->pids && lim->pids < pids)
			pids = lim->pids;
		if (lim->cpu_millicores && lim->cpu_millicores < cpu)
			cpu = lim->cpu_millicores;
	}
	snprintf(cg->path, sizeof(cg->path), "%s/run-%d-%u", p->cgroup_parent, (int)getpid(),
		 atomic_fetch_add(&run_seq, 1));
	if (mkdir(cg->path, 0755)) {
		rc = -errno;
		kvs_note(note, notelen, "cannot create cgroup %s: %s", cg->path, strerror(errno));
		cg->path[0] = 0;
		return rc;
	}
	cg->dirfd = open(cg->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (cg->dirfd < 0 || fstat(cg->dirfd, &st)) {
		rc = -errno;
		if (cg->dirfd >= 0)
			close(cg->dirfd);
		cg->dirfd = -1;
		rmdir(cg->path);
		cg->path[0] = 0;
		return rc;
	}
	/* on cgroup2 a directory's inode number is the kernfs id, which is
	 * what bpf_get_current_cgroup_id() returns */
	cg->id = st.st_ino;
	if (p->have_cpu) {
		snprintf(buf, sizeof(buf), "%u 100000", cpu * 100);
		if (kvs_write_file_str(cg->dirfd, "cpu.max", buf))
			kvs_note(note, notelen, "cpu.max not set");
	}
	if (p->have_memory) {
		snprintf(buf, sizeof(buf), "%" PRIu64, mem);
		if (kvs_write_file_str(cg->dirfd, "memory.max", buf))
			kvs_note(note, notelen, "memory.max not set");
		kvs_write_file_str(cg->dirfd, "memory.swap.max", "0");
		kvs_write_file_str(cg->dirfd, "memory.oom.group", "1");
	}
	if (p->have_pids) {
		snprintf(buf, sizeof(buf), "%u", pids);
		if (kvs_write_file_str(cg->dirfd, "pids.max", buf))
			kvs_note(note, notelen, "pids.max not set");
	}
	return 0;
}

void kvs_cgroup_kill(const struct kvs_policy *p, struct kvs_cg *cg)
{
	char buf[8192];
	ssize_t n;
	char *s, *save = NULL;
	int round;

	if (cg->dirfd < 0)
		return;
	if (p->have_kill && kvs_write_file_str(cg->dirfd, "cgroup.kill", "1") == 0)
		return;
	/* freeze so nothing forks while we walk the members, kill, thaw; a
	 * few rounds in case the list was longer than the buffer */
	if (p->have_freeze)
		kvs_write_file_str(cg->dirfd, "cgroup.freeze", "1");
	for (round = 0; round < 8; round++) {
		int killed = 0;

		n = kvs_read_small(cg->dirfd, "cgroup.procs", buf, sizeof(buf));
		if (n <= 0)
			break;
		for (s = strtok_r(buf, "\n", &save); s; s = strtok_r(NULL, "\n", &save)) {
			pid_t pid = (pid_t)atoi(s);

			if (pid > 0 && kill(pid, SIGKILL) == 0)
				killed++;
		}
		if (!killed)
			break;
	}
	if (p->have_freeze)
		kvs_write_file_str(cg->dirfd, "cgroup.freeze", "0");
}

static uint64_t key_value(const char *text, const char *key)
{
	size_t n = strlen(key);
	const char *s = text;

	while ((s = strstr(s, key))) {
		if ((s == text || s[-1] == '\n') && s[n] == ' ')
			return strtoull(s + n + 1, NULL, 10);
		s += n;
	}
	return 0;
}

/* Wait (bounded) for the cgroup to empty, take its accounting, remove it. */
void kvs_cgroup_finish(const struct kvs_policy *p, struct kvs_cg *cg,
		       struct kvs_result *res)
{
	char buf[1024];
	int i;

	if (cg->dirfd < 0)
		return;
	for (i = 0; i < 500; i++) {
		if (kvs_read_small(cg->dirfd, "cgroup.events", buf, sizeof(buf)) <= 0 ||
		    key_value(buf, "populated") == 0)
			break;
		if (i == 50 || i == 250)
			kvs_cgroup_kill(p, cg);
		/* cgroup.events signals POLLPRI when populated changes */
		{
			int efd = openat(cg->dirfd, "cgroup.events", O_RDONLY | O_CLOEXEC);
			struct pollfd pfd = { .fd = efd, .events = POLLPRI };

			if (efd < 0)
				break;
			if (read(efd, buf, sizeof(buf) - 1) > 0) {
				buf[sizeof(buf) - 1] = 0;
				if (key_value(buf, "populated") != 0)
					poll(&pfd, 1, 10);
			}
			close(efd);
		}
	}
	if (kvs_read_small(cg->dirfd, "cpu.stat", buf, sizeof(buf)) > 0) {
		res->cpu_user_s = key_value(buf, "user_usec") / 1e6;
		res->cpu_sys_s = key_value(buf, "system_usec") / 1e6;
	}
	if (p->have_memory) {
		if (kvs_read_small(cg->dirfd, "memory.events", buf, sizeof(buf)) > 0 &&
		    key_value(buf, "oom_kill") > 0 && res->reason != KVS_EXIT_TIMEOUT &&
		    res->reason != KVS_EXIT_OUTPUT_CAP && res->reason != KVS_EXIT_SETUP)
			res->reason = KVS_EXIT_OOM;
		if (p->have_peak && kvs_read_small(cg->dirfd, "memory.peak", buf, sizeof(buf)) > 0)
			res->memory_peak = strtoull(buf, NULL, 10);
	}
	close(cg->dirfd);
	cg->dirfd = -1;
	if (rmdir(cg->path))
		kvs_note(res->note, sizeof(res->note), "cgroup %s not removed: %s", cg->path,
			 strerror(errno));
}
