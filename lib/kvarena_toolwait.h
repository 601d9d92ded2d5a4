/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libkvarena: tool-wait observability (eBPF).  How long each session's KV
 * cache sits idle while the agent waits on a tool, measured by
 * bpf/toolwait.bpf.c from kvarena's own session-state events: the module's
 * tracepoint, or the memfd backend's USDT probe.  Tool processes are tied
 * to sessions through the cgroup v2 directory they run in.
 *
 * Needs CAP_BPF + CAP_PERFMON (in practice root), a kernel with BTF, bpffs
 * at /sys/fs/bpf (for pinning) and, for tracepoint/ attachment, tracefs;
 * the loader mounts them only when asked (KVA_TOOLWAIT_MOUNT).  libbpf's
 * messages go to kva_set_logger()'s logger, never to stderr.
 * Documentation/toolwait.md describes the maps.
 *
 * Every function returns 0 (or a count) on success and a negative errno.
 * The map records below mirror the BPF maps and carry no size member: the
 * functions that fill one take the caller's sizeof as `size` (the ABI
 * convention of <kvarena/kvarena.h>); kva_toolwait_opts has a leading size.
 */
#ifndef KVARENA_TOOLWAIT_H
#define KVARENA_TOOLWAIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvarena.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVA_TOOLWAIT_SLOTS	32	/* log2 us buckets: [2^i, 2^(i+1)) */
#define KVA_TOOLWAIT_PIN_DIR	"/sys/fs/bpf/kvarena"

/*
 * The map records, field for field bpf/toolwait.h's tw_* structs (checked
 * at build time), so pinned maps read the same through this API and
 * bpftool.
 */
struct kva_toolwait_key {
	uint32_t arena_id;
	uint32_t pid;			/* memfd backend: owner's tgid; kernel: 0 */
	uint64_t session_id;
};

struct kva_toolwait_session {
	uint64_t waits;
	uint64_t total_us;
	uint64_t max_us;
	uint64_t idle_block_us;		/* blocks held x us, over TOOL_WAITs */
	uint64_t idle_byte_sec;		/* idle_block_us x block_size / 1e6 */
	uint64_t tool_procs;
	uint64_t tool_cpu_ns;		/* CPU time of the tools' process tree */
	uint64_t tool_wall_ns;		/* first tool start to last exit, per wait */
	uint64_t cookie;
	uint32_t state;
	uint32_t tool_class;
	uint32_t blocks_held;
	uint32_t block_size;
	uint32_t source;		/* KVA_TOOLWAIT_SRC_* */
	uint32_t pad;
	uint64_t wait_start_ns;		/* the wait in progress; 0: none */
	uint64_t expected_wait_us;
	uint64_t cur_cpu_ns;
	uint64_t cur_first_ns;
	uint64_t cur_last_ns;
	uint64_t cur_procs;
	uint32_t slots[KVA_TOOLWAIT_SLOTS];
};

struct kva_toolwait_hist {
	uint64_t count;
	uint64_t total_us;
	uint64_t max_us;
	uint64_t tool_cpu_ns;
	uint64_t tool_wall_ns;
	uint32_t slots[KVA_TOOLWAIT_SLOTS];
};

struct kva_toolwait_event {
	struct kva_toolwait_key session;
	uint64_t cookie;
	uint64_t start_ns;		/* CLOCK_MONOTONIC */
	uint64_t wait_us;
	uint64_t expected_wait_us;
	uint64_t tool_cpu_ns;
	uint64_t tool_wall_ns;
	uint32_t tool_procs;
	uint32_t tool_class;
	uint32_t blocks_held;
	uint32_t block_size;
	uint32_t next_state;
	uint32_t source;
};

struct kva_toolwait_stats {
	uint64_t transitions;
	uint64_t filtered;
	uint64_t waits;
	uint64_t events;
	uint64_t events_lost;
	uint64_t short_waits;
	uint64_t sessions_full;
	uint64_t forks;
	uint64_t execs;
	uint64_t exits;
};

#define KVA_TOOLWAIT_SRC_RAW_TP	1
#define KVA_TOOLWAIT_SRC_TP	2
#define KVA_TOOLWAIT_SRC_USDT	3

/* How to attach; AUTO picks at load time, the rest force one kind. */
enum kva_toolwait_kind {
	KVA_TOOLWAIT_AUTO = 0,
	KVA_TOOLWAIT_TP_BTF,		/* sched only */
	KVA_TOOLWAIT_RAW_TP,
	KVA_TOOLWAIT_TP,
	KVA_TOOLWAIT_OFF,
};

struct kva_toolwait_opts {
	size_t size;			/* sizeof(struct kva_toolwait_opts) */
	uint32_t arena_filter;		/* only this arena (0: all) */
	uint64_t min_wait_us;		/* shorter waits send no event */
	/* Module tracepoint: AUTO = raw_tp if kvarena is loaded, else OFF. */
	enum kva_toolwait_kind module;
	/* sched fork/exec/exit: AUTO = tp_btf, else raw_tp. */
	enum kva_toolwait_kind sched;
	/* USDT in libkvarena's memfd backend: AUTO/ON = attach, OFF = not. */
	enum kva_toolwait_kind usdt;
	const char *usdt_binary;	/* NULL: the file this library is in */
	int usdt_pid;			/* 0: every process; else that one */
	/* Pin the maps here (NULL: KVA_TOOLWAIT_PIN_DIR, "": do not pin). */
	const char *pin_dir;
	/* After VER0: KVA_TOOLWAIT_* flags (0: mount nothing, replace no pin). */
	uint32_t flags;
};
/* Mount bpffs on /sys/fs/bpf and tracefs on /sys/kernel/tracing if they
 * are needed and absent (else: -ENODEV, with the reason logged). */
#define KVA_TOOLWAIT_MOUNT		(1U << 0)
/* Unlink pins found in pin_dir and pin ours, whoever's they are (else:
 * -EEXIST while a loaded program uses their maps, a live loader's; pins
 * no program uses, a loader's that died without unpinning, are replaced
 * without this flag). */
#define KVA_TOOLWAIT_REPLACE_PINS	(1U << 1)
#define KVA_TOOLWAIT_OPTS_SIZE_VER0 \
	(offsetof(struct kva_toolwait_opts, pin_dir) + sizeof(const char *))

struct kva_toolwait;

/* Load (knobs set, attach kinds chosen), pin the maps, attach. */
int kva_toolwait_open(const struct kva_toolwait_opts *opts,
		      struct kva_toolwait **twp);
/* Read-only view of maps another process pinned (no programs). */
int kva_toolwait_open_pinned(const char *pin_dir, struct kva_toolwait **twp);
/* Detach (programs stop), unpin what this handle pinned, free. */
void kva_toolwait_close(struct kva_toolwait *tw);
/* Detach only: maps stay readable (and pinned). */
void kva_toolwait_detach(struct kva_toolwait *tw);
int kva_toolwait_attach(struct kva_toolwait *tw);
/* What is attached, e.g. "module=raw_tp sched=tp_btf usdt=on". */
const char *kva_toolwait_describe(const struct kva_toolwait *tw);

/* The key of a session of an arena (arena id; pid for the memfd backend). */
int kva_toolwait_session_key(struct kva_arena *arena, uint64_t session,
			     struct kva_toolwait_key *key);
/* cgroup v2 id of a directory: its inode number. */
int kva_toolwait_cgroup_id(const char *path, uint64_t *id);
/* Tools run in cgroup `cgroup_id` belong to `key`'s session. */
int kva_toolwait_register_cgroup(struct kva_toolwait *tw, uint64_t cgroup_id,
				 const struct kva_toolwait_key *key);
int kva_toolwait_unregister_cgroup(struct kva_toolwait *tw,
				   uint64_t cgroup_id);

/* Up to n keys; returns how many there are (may exceed n). */
int kva_toolwait_sessions(struct kva_toolwait *tw,
			  struct kva_toolwait_key *keys, int n);
int kva_toolwait_get_session(struct kva_toolwait *tw,
			     const struct kva_toolwait_key *key,
			     struct kva_toolwait_session *out, size_t size);
int kva_toolwait_forget_session(struct kva_toolwait *tw,
				const struct kva_toolwait_key *key);
/* Tool classes seen, sorted; returns how many (may exceed n). */
int kva_toolwait_classes(struct kva_toolwait *tw, uint32_t *classes, int n);
int kva_toolwait_class_hist(struct kva_toolwait *tw, uint32_t tool_class,
			    struct kva_toolwait_hist *out, size_t size);
/* Zero the per-class histograms (interval reporting). */
int kva_toolwait_clear_classes(struct kva_toolwait *tw);
int kva_toolwait_get_stats(struct kva_toolwait *tw,
			   struct kva_toolwait_stats *out, size_t size);

/*
 * Completed waits from the ring buffer: calls fn for each (stop early by
 * returning non-zero), waiting up to timeout_ms (0: do not wait, -1:
 * forever) for the first.  Returns the number consumed.
 */
typedef int (*kva_toolwait_event_fn)(const struct kva_toolwait_event *e,
				     void *ctx);
int kva_toolwait_consume(struct kva_toolwait *tw, kva_toolwait_event_fn fn,
			 void *ctx, int timeout_ms);

/*
 * Expected remaining wait (us) of a tool-class wait that has lasted
 * elapsed_us: conditional mean over the class's histogram (kvc_predict.h:
 * cold start below 8 samples = max(base - elapsed, elapsed), base = hint_us
 * or 1 s).
 */
uint64_t kva_toolwait_predict(const struct kva_toolwait_hist *h,
			      uint64_t elapsed_us, uint64_t hint_us);

#ifdef __cplusplus
}
#endif

#endif /* KVARENA_TOOLWAIT_H */
