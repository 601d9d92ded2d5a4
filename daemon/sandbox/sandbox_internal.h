/* SPDX-License-Identifier: MIT */
/*
 * sandbox_internal.h - what the launcher's files share: a policy compiled
 * once (mount plan, Landlock rules, seccomp BPF, host capabilities) and
 * read-only afterwards, so that a spawn does no parsing, no path
 * resolution and no filter compilation, and the child between clone3()
 * and execve() only issues system calls (no malloc: the caller may be
 * multi-threaded).
 */
#ifndef KVS_INTERNAL_H
#define KVS_INTERNAL_H

#include <limits.h>
#include <linux/filter.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvsandbox.h"

#define KVS_TOOL_NAME_MAX 64
#define KVS_MAX_MOUNTS 48	/* binds + links of one tool's root */
#define KVS_MAX_RULES 64	/* Landlock rules of one run */
#define KVS_MAX_ENV 32
#define KVS_INSIDE_UID 1000	/* the tool's uid and gid inside its namespace */
#define KVS_WORK "/home/tool"	/* the work directory inside the sandbox */
#define KVS_STAGE "/stage"	/* where a run builds its root in the template */
#define KVS_SYSCTL "/sysctl"	/* a run's second proc, in the template */
#define KVS_PATH 512		/* longest path a policy may name */
#define KVS_NOMEM_NOFILE 64	/* RLIMIT_NOFILE without a memory controller */
#define KVS_UID_BASE 1879048192u	/* 0x70000000: above systemd's container range */
#define KVS_UID_COUNT 65536u
#define KVS_WORKDIR_SIZE (64ull << 20)

/* Landlock access classes (translated to rights by landlock.c). */
enum kvs_access { KVS_ACC_RO = 1, KVS_ACC_EXEC, KVS_ACC_RW, KVS_ACC_RWX, KVS_ACC_DEV };

/* One entry of a root's skeleton, in creation order (parents first). */
enum kvs_node { KVS_NODE_DIR, KVS_NODE_FILE, KVS_NODE_LINK };
struct kvs_skel {
	enum kvs_node kind;
	char rel[KVS_PATH];		/* path relative to the new root */
	char target[KVS_PATH];		/* KVS_NODE_LINK: the link's text */
};

/* A read-only (or read-write) bind of a host path at the same path. */
struct kvs_bind {
	char src[KVS_PATH];		/* host path (canonical) */
	int writable;
	int is_dir;
	int dev;			/* a device node: no nodev */
};

struct kvs_rule {
	char path[KVS_PATH];		/* inside the sandbox */
	enum kvs_access acc;
};

struct kvs_tool {
	char name[KVS_TOOL_NAME_MAX];
	/* as written in the policy */
	char *exec[KVS_MAX_PATHS];
	char *ro[KVS_MAX_PATHS];
	char *rw[KVS_MAX_PATHS];
	char *env[KVS_MAX_ENV];
	int n_exec, n_ro, n_rw, n_env;
	char path[1024];		/* PATH inside, ':'-separated */
	int network;
	int exec_workdir;
	int system_libs;		/* the loader and shared libraries, read-only */
	uint32_t cpu_millicores;
	uint64_t memory;
	uint32_t pids;
	uint32_t timeout_ms;
	uint64_t output;
	uint64_t tmp_bytes;		/* private /tmp size; 0: none */
	uint32_t nofile;
	int nofile_set;			/* nofile written in the policy */
	uint64_t fsize;
	int builtin;			/* 1: one of the built-in tools' defaults */
	/* compiled */
	struct kvs_skel *skel;		/* n_skel entries */
	int n_skel;
	struct kvs_bind binds[KVS_MAX_MOUNTS];
	int n_binds;
	struct kvs_rule rules[KVS_MAX_RULES];
	int n_rules;
	char *envp[KVS_MAX_ENV + 8];	/* NULL-terminated, HOME/PATH/... first */
};

struct kvs_bpf {
	struct sock_filter *f;
	unsigned short len;
};

/* What a policy does on a host whose cgroups have no memory controller. */
enum kvs_nomem { KVS_NOMEM_RESTRICT, KVS_NOMEM_REFUSE };

struct kvs_policy {
	uid_t uid;			/* outside uid/gid of tools (root launcher) */
	gid_t gid;
	int privileged;			/* geteuid() == 0 at load */
	char cgroup_parent[PATH_MAX - 256];	/* "" = auto */
	int cgroup_ok;			/* parent exists and is ours to write */
	int have_cpu, have_memory, have_pids, have_kill, have_freeze, have_peak;
	int landlock_abi;		/* 0: none */
	int mntns_fd;			/* the empty template mount namespace
					 * runs copy; -1: they copy the host's */
	int spawner_fd;			/* control socket to the spawner; -1: none */
	pid_t spawner_pid;
	unsigned int cap_last;
	struct kvs_bpf bpf[2];		/* seccomp: [0] no network, [1] network */
	enum kvs_nomem without_memcg;	/* [sandbox] without_memory_controller */
	int restrict_memory;		/* no memory controller: memfd, shm, msg
					 * denied, RLIMIT_NOFILE lowered */
	int have_memfd_noexec;		/* vm.memfd_noexec (6.3+): set to 2 per run */
	/* work directories (workdir.c) */
	uint64_t workdir_size;		/* a session tmpfs's bytes; 0: plain dirs */
	uint32_t workdir_inodes;
	uid_t uid_base;			/* uid_range: a uid per work directory */
	uint32_t uid_count;		/* 0: every run as uid */
	uint8_t *uid_slots;		/* taken uids (the spawner's) */
	int private_mounts;		/* this process (the spawner) mounts them */
	char ld_so[PATH_MAX];		/* the ELF interpreter, host realpath */
	char notes[2048];		/* what this host cannot enforce */
	struct kvs_tool *tools[KVS_MAX_TOOLS];
	int n_tools;
};

/* policy.c */
const struct kvs_tool *kvs_find_tool(const struct kvs_policy *p, const char *name);
int kvs_compile_tool(struct kvs_policy *p, struct kvs_tool *t, char *err, size_t errlen);
/* 1 when host path (canonical) may be executed under t's exec list */
int kvs_exec_allowed(const struct kvs_tool *t, const char *host_path);

/* seccomp.c */
int kvs_seccomp_build(struct kvs_policy *p, char *err, size_t errlen);

/* landlock.c */
int kvs_landlock_abi(void);
/* child side: system calls only; returns 0 or -errno */
int kvs_landlock_apply(int abi, const struct kvs_rule *const *rules, int n,
		       int network_denied);

/* cgroup.c */
int kvs_cgroup_setup(struct kvs_policy *p);
struct kvs_cg {
	char path[PATH_MAX];
	int dirfd;
	uint64_t id;
};
int kvs_cgroup_create(const struct kvs_policy *p, const struct kvs_tool *t,
		      const struct kvs_limits *lim, struct kvs_cg *cg,
		      char *note, size_t notelen);
void kvs_cgroup_kill(const struct kvs_policy *p, struct kvs_cg *cg);
void kvs_cgroup_finish(const struct kvs_policy *p, struct kvs_cg *cg,
		       struct kvs_result *res);

/* workdir.c */
int kvs_wd_prepare(const struct kvs_policy *p, const char *want, uint64_t size, char *canon,
		   int *temp, char *note, size_t notelen);
void kvs_wd_ids(const struct kvs_policy *p, const char *canon, uid_t *uid, gid_t *gid);
void kvs_wd_remove(const struct kvs_policy *p, const char *path);

/* spawn.c */
/* netns.c: an empty network namespace made ahead (root), or -EAGAIN */
int kvs_netns_take(void);
void kvs_netns_pool_reset(void);
int kvs_mntns_create(void);
/* after fork(): the child stacks' lock as new (the spawner) */
void kvs_spawn_stacks_reset(void);
/* kvs_run() in this process, stdin from stdin_fd when >= 0 */
int kvs_run_direct(const struct kvs_policy *p, const struct kvs_request *req,
		   struct kvs_result *res, int stdin_fd);
int kvs_make_stdin(const void *data, size_t len);

/* spawner.c */
enum kvs_sp_op {
	KVS_SP_RUN, KVS_SP_WD_SETUP, KVS_SP_WD_REMOVE, KVS_SP_READ_FILE, KVS_SP_WRITE_FILE,
	KVS_SP_LIST_DIR,
};
int kvs_spawner_run(const struct kvs_policy *p, const struct kvs_request *req,
		    struct kvs_result *res);
int kvs_spawner_call(const struct kvs_policy *p, enum kvs_sp_op op, const struct kvs_request *req,
		     uint64_t size, struct kvs_result *res);

/* tools.c: the file tools in this process */
int kvs_file_read(const struct kvs_policy *p, const char *workdir, const char *path,
		  struct kvs_result *res);
int kvs_file_write(const struct kvs_policy *p, const char *workdir, const char *path,
		   const void *data, size_t len, struct kvs_result *res);
int kvs_file_list(const struct kvs_policy *p, const char *workdir, const char *path,
		  struct kvs_result *res);
void kvs_spawner_stop(struct kvs_policy *p);

/* util */
void kvs_note(char *note, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int kvs_parse_size(const char *s, uint64_t *out);
double kvs_now(void);
int kvs_write_file_str(int dirfd, const char *name, const char *val);
ssize_t kvs_read_small(int dirfd, const char *name, char *buf, size_t len);

#endif
