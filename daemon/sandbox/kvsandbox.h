/* SPDX-License-Identifier: MIT */
/*
 * kvsandbox.h - the tool-run launcher: run one command of an agent's tool
 * inside fresh namespaces, its own cgroup v2, seccomp and Landlock, with
 * limits, a wall-clock timeout and capped output; and the built-in file
 * tools confined to a session's work directory.
 *
 * Use: load a policy once (kvs_policy_load() or kvs_policy_default()); it
 * is read-only afterwards and shared by any number of threads, each calling
 * kvs_run() (or kvs_run_many() for N at once). Errors are negative errno
 * values; a message for people goes into the caller's err buffer or the
 * result's note.
 *
 * Privilege: the launcher runs as root (the tool then runs as the policy's
 * unprivileged uid/gid, default 65534) or as any user whose kernel allows
 * unprivileged user namespaces (the tool then runs as that user, mapped to
 * uid 1000 inside). See Documentation/sandbox.md.
 */
#ifndef KVSANDBOX_H
#define KVSANDBOX_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

struct kvs_policy;
struct kvs_tool;

/* Bounds: every list and size the launcher accepts is capped. */
#define KVS_MAX_PATHS 32	/* entries per path list of a tool */
#define KVS_MAX_TOOLS 64	/* tools per policy file */
#define KVS_MAX_ARGS 256	/* argv entries of one run */
#define KVS_MAX_ARG_BYTES (256u << 10)	/* argv + env bytes of one run */
#define KVS_MAX_STDIN (16u << 20)	/* bytes fed to a run's stdin */
#define KVS_MAX_OUTPUT (64u << 20)	/* the largest output cap a policy may set */
#define KVS_MAX_TIMEOUT_MS (3600u * 1000u)
#define KVS_NOTE_LEN 1024

/* Why a run ended. */
enum kvs_exit {
	KVS_EXIT_CODE = 0,	/* exited; status = exit code */
	KVS_EXIT_SIGNAL,	/* killed by a signal; status = signal number */
	KVS_EXIT_TIMEOUT,	/* ran past the wall-clock timeout; cgroup killed */
	KVS_EXIT_OOM,		/* the cgroup's memory.max OOM killer fired */
	KVS_EXIT_OUTPUT_CAP,	/* wrote more than the output cap; cgroup killed */
	KVS_EXIT_SETUP,		/* the sandbox could not be built (note says why) */
	KVS_EXIT_REFUSED,	/* the policy refused the run (note says why) */
};

const char *kvs_exit_name(enum kvs_exit reason);

/* Per-run overrides; each may only tighten the tool's policy (0 = keep). */
struct kvs_limits {
	uint32_t timeout_ms;
	uint64_t memory_bytes;
	uint32_t pids;
	uint32_t cpu_millicores;	/* 1000 = one core */
	uint64_t output_bytes;		/* per stream */
};

struct kvs_request {
	const char *tool;		/* a tool of the policy; unknown: refused */
	const char *workdir;		/* host directory, created 0700 if absent;
					   NULL: a fresh empty one, removed after */
	const char *const *argv;	/* argv[0]: absolute path or a name on the
					   tool's path; NULL-terminated */
	const void *stdin_data;		/* NULL: /dev/null-like empty stdin */
	size_t stdin_len;
	const struct kvs_limits *limits;	/* NULL: the tool's */
	/* Called from the calling thread after the run's cgroup exists and
	 * before the tool's first instruction (the daemon registers the
	 * cgroup id with the tool-wait eBPF programs here). Nonzero return:
	 * the run is refused. */
	int (*on_cgroup)(void *ctx, uint64_t cgroup_id, pid_t pid);
	void *ctx;
};

/* What a run went without because this host cannot enforce it. */
#define KVS_UNENF_LANDLOCK (1u << 0)	/* kernel without Landlock */
#define KVS_UNENF_CGROUP (1u << 1)	/* no cgroup of its own at all */
#define KVS_UNENF_CPU (1u << 2)		/* no cpu.max (RLIMIT_CPU only) */
#define KVS_UNENF_MEMORY (1u << 3)	/* no memory.max (RLIMIT_AS instead) */
#define KVS_UNENF_PIDS (1u << 4)	/* no pids.max (RLIMIT_NPROC instead) */

struct kvs_result {
	enum kvs_exit reason;
	unsigned int unenforced;	/* KVS_UNENF_* */
	int status;			/* exit code or signal number */
	char *out, *err;		/* captured (NUL-terminated, malloc'd) */
	size_t out_len, err_len;
	int out_truncated, err_truncated;
	uint64_t cgroup_id;		/* 0: no cgroup could be used */
	double setup_s;			/* clone3 to execve of the tool */
	double wall_s;			/* clone3 to the last process gone */
	double cpu_user_s, cpu_sys_s;	/* from cpu.stat (0 when unavailable) */
	uint64_t memory_peak;		/* memory.peak, bytes (0: unavailable) */
	/* What could not be enforced on this host and why the run failed, in
	 * words, '; '-separated. */
	char note[KVS_NOTE_LEN];
};

/* Load a policy file (INI, see kva-sandbox(1)). The built-in tools sh,
 * c_compile_run, read_file, write_file and list_dir exist with their
 * defaults unless the file redefines them. err gets a line on failure. */
int kvs_policy_load(const char *path, struct kvs_policy **out,
		    char *err, size_t errlen);
/* The built-in policy only, plus a tool "default": least privilege (no
 * network, no system paths beyond the C library, nothing executable but
 * the files in extra_exec). extra_exec may be NULL. */
int kvs_policy_default(const char *const *extra_exec, struct kvs_policy **out,
		       char *err, size_t errlen);
void kvs_policy_free(struct kvs_policy *p);

/* Fork a small spawner process that makes the policy's runs from now on:
 * spawning clones the caller's page tables (as fork does), so a caller
 * holding much private memory (a model, activations) would pay for it on
 * every run; the spawner, forked while the caller is still small, does
 * not. Call it right after loading the policy, before loading the model;
 * kvs_run() and kvs_run_many() then go through it (kvs_spawn() does not).
 * Its runs' outputs come back through a socket. Stopped by
 * kvs_policy_free(). Returns 0 or a negative errno (runs stay direct). */
int kvs_policy_start_spawner(struct kvs_policy *p);

/* The spawner's pid (monitoring: its CPU, its /proc/PID/root), 0 if none. */
pid_t kvs_policy_spawner_pid(const struct kvs_policy *p);

/* Human-readable lines on what this host can enforce for the policy
 * (controllers, Landlock ABI, cgroup.kill); "" when everything. */
const char *kvs_policy_host_notes(const struct kvs_policy *p);
/* 1 when the policy names this tool. */
int kvs_policy_has_tool(const struct kvs_policy *p, const char *tool);

/* Run one command. Always fills *res (free it with kvs_result_free());
 * returns 0 when the command ran (whatever its exit), a negative errno
 * when it was refused or could not be set up (res->reason says which). */
int kvs_run(const struct kvs_policy *p, const struct kvs_request *req,
	    struct kvs_result *res);
void kvs_result_free(struct kvs_result *res);

/* Run n requests concurrently, at most max_parallel at a time (0: n).
 * Returns 0, or the first negative errno of a run. */
int kvs_run_many(const struct kvs_policy *p, const struct kvs_request *reqs,
		 struct kvs_result *res, size_t n, unsigned int max_parallel);

/* Make a work directory as kvs_run() would; 0 when it exists already.
 * With a root launcher's spawner it is a tmpfs of at most size bytes (0
 * or more than the policy's workdir_size: workdir_size), owned by a uid of
 * the policy's uid_range that no other work directory has (the tool's uid
 * outside), living in the spawner's mount namespace only; else a plain
 * directory, 0700, owned by the tool's uid. err (may be NULL) gets why it
 * failed. Keep work directories in a directory only root can enter. */
int kvs_workdir_setup(const struct kvs_policy *p, const char *workdir, uint64_t size,
		      char *err, size_t errlen);
/* The size cap of the work directories kvs_workdir_setup() makes now:
 * the policy's workdir_size with a root launcher's spawner running, else
 * 0 (plain directories, no cap). */
uint64_t kvs_policy_workdir_size(const struct kvs_policy *p);
/* kvs_workdir_setup() with the policy's size. */
int kvs_workdir_create(const struct kvs_policy *p, const char *workdir);
/* Remove a work directory made by the two above (its tmpfs unmounted,
 * its uid free again), however deep, never following a link out of it. */
void kvs_workdir_remove(const struct kvs_policy *p, const char *workdir);
/* Where this process reaches workdir: its mount is the spawner's, so
 * through /proc/SPAWNER/root; without a spawner, workdir itself. For tests
 * and operators looking in; 0 or -ENAMETOOLONG. */
int kvs_workdir_view(const struct kvs_policy *p, const char *workdir, char *out, size_t len);
/* Remove a directory tree in this process's view, however deep, without
 * following symbolic links out of it (a tmpfs mounted at path goes whole). */
void kvs_remove_tree(const char *path);

/* ---- long-running tools (MCP servers) -------------------------------- */

struct kvs_proc;

/* Start the request's command as kvs_run() would and hand it over running,
 * once it has exec'd: the caller talks to it through its stdin (a Unix
 * stream socket: write with send(MSG_NOSIGNAL)) and stdout/stderr (pipes,
 * non-blocking). req->stdin_data is ignored. The tool's timeout is its
 * lifetime (kvs_proc_deadline(), CLOCK_MONOTONIC seconds): the caller
 * ends it by then with kvs_proc_finish(). On failure *res says why. */
int kvs_spawn(const struct kvs_policy *p, const struct kvs_request *req,
	      struct kvs_proc **proc, struct kvs_result *res);
int kvs_proc_stdin(const struct kvs_proc *proc);
int kvs_proc_stdout(const struct kvs_proc *proc);
int kvs_proc_stderr(const struct kvs_proc *proc);
int kvs_proc_pidfd(const struct kvs_proc *proc);	/* readable when it exits */
uint64_t kvs_proc_cgroup_id(const struct kvs_proc *proc);
double kvs_proc_deadline(const struct kvs_proc *proc);
/* Close its stdin, give it grace_ms to exit, kill its cgroup, reap, remove
 * the cgroup, free proc. res gets the exit (no output: the caller read it). */
int kvs_proc_finish(struct kvs_proc *proc, unsigned int grace_ms, struct kvs_result *res);

/* ---- built-in tools ------------------------------------------------- */

/* sh: one shell command through the policy's "sh" tool. */
int kvs_tool_sh(const struct kvs_policy *p, const char *workdir,
		const char *command, const struct kvs_limits *lim,
		struct kvs_result *res);
/* c_compile_run: write source to WORKDIR/snippet.c, compile it with gcc
 * in the "c_compile_run" tool's sandbox, run it in a second one (stdin
 * fed to the program). res gets the program's run; compiler diagnostics
 * go to res->err when compilation fails (reason KVS_EXIT_CODE, status
 * the compiler's). */
int kvs_tool_c_compile_run(const struct kvs_policy *p, const char *workdir,
			   const char *source, size_t source_len,
			   const void *stdin_data, size_t stdin_len,
			   const struct kvs_limits *lim, struct kvs_result *res);
/* The same with a cgroup hook (struct kvs_request's on_cgroup), called for
 * both of its runs. */
int kvs_tool_c_compile_run_hook(const struct kvs_policy *p, const char *workdir,
				const char *source, size_t source_len,
				const void *stdin_data, size_t stdin_len,
				const struct kvs_limits *lim,
				int (*on_cgroup)(void *ctx, uint64_t cgroup_id, pid_t pid),
				void *ctx, struct kvs_result *res);

/* read_file / write_file / list_dir: in the launcher's process, confined
 * to workdir by the kernel (openat2 RESOLVE_BENEATH | NO_MAGICLINKS |
 * NO_XDEV): no "..", absolute path or symlink leads out. Sizes are capped
 * by the "read_file"/"write_file" tools' output cap. Results land in
 * res->out; refusals set reason KVS_EXIT_REFUSED and the note. */
int kvs_read_file(const struct kvs_policy *p, const char *workdir,
		  const char *path, struct kvs_result *res);
int kvs_write_file(const struct kvs_policy *p, const char *workdir,
		   const char *path, const void *data, size_t len,
		   struct kvs_result *res);
int kvs_list_dir(const struct kvs_policy *p, const char *workdir,
		 const char *path, struct kvs_result *res);

#ifdef __cplusplus
}
#endif
#endif
