/* SPDX-License-Identifier: (LGPL-2.1-or-later OR BSD-2-Clause) */
/*
 * toolwait: the structs shared by bpf/toolwait.bpf.c and user space
 * (lib/toolwait.c, kvactl toolwait).  Every map value is one of these, so
 * `bpftool map dump pinned /sys/fs/bpf/kvarena/<map>` prints named fields.
 *
 * Only fixed-width types, no kernel or libc headers: the BPF side includes
 * this after vmlinux.h, user space after <linux/types.h>.
 */
#ifndef KVA_TOOLWAIT_H
#define KVA_TOOLWAIT_H

/* log2 buckets in microseconds: slot i counts waits in [2^i, 2^(i+1)) us
 * (slot 0 also takes 0 us); the last slot takes everything longer. */
#define TW_SLOTS		32
#define TW_MAX_SESSIONS		16384
#define TW_MAX_CLASSES		256
#define TW_MAX_CGROUPS		4096
#define TW_MAX_PROCS		16384
#define TW_RINGBUF_BYTES	(256 * 1024)

/* Session states, as in <linux/kvarena.h> (enum kva_state). */
#define TW_STATE_TOOL_WAIT	3
#define TW_STATE_ENDED		4

/* Where a transition was seen (tw_event.source, tw_session.source). */
#define TW_SRC_RAW_TP		1	/* raw_tp/kvarena_session_state */
#define TW_SRC_TP		2	/* tracepoint/kvarena/kvarena_session_state */
#define TW_SRC_USDT		3	/* usdt kvarena:session_state (memfd backend) */

/*
 * A session: the module's (arena_id, session_id), pid 0; or a memfd-backend
 * session, whose ids are private to the process that owns the arena, so
 * its tgid is part of the key.
 */
struct tw_key {
	__u32 arena_id;
	__u32 pid;
	__u64 session_id;
};

/* sessions map value: totals over the session's life and its histogram. */
struct tw_session {
	__u64 waits;			/* completed TOOL_WAIT intervals */
	__u64 total_us;			/* their summed length */
	__u64 max_us;
	__u64 idle_block_us;		/* sum of blocks held x wait us */
	__u64 idle_byte_sec;		/* idle_block_us x block_size / 1e6 */
	__u64 tool_procs;		/* tool processes that exited */
	__u64 tool_cpu_ns;		/* CPU time of the tool process tree */
	__u64 tool_wall_ns;		/* per wait: first tool start to last exit */
	__u64 cookie;			/* the runtime's request id */
	__u32 state;			/* last state seen */
	__u32 tool_class;		/* current or last tool class */
	__u32 blocks_held;		/* at the last transition */
	__u32 block_size;
	__u32 source;			/* TW_SRC_* */
	__u32 pad;
	/* The wait in progress (wait_start_ns 0: none). */
	__u64 wait_start_ns;
	__u64 expected_wait_us;		/* the runtime's hint for it */
	__u64 cur_cpu_ns;
	__u64 cur_first_ns;		/* first tool process start in it */
	__u64 cur_last_ns;		/* last tool process exit in it */
	__u64 cur_procs;
	__u32 slots[TW_SLOTS];		/* log2 histogram of wait us */
};

/* classes map value (key: __u32 tool class). */
struct tw_hist {
	__u64 count;
	__u64 total_us;
	__u64 max_us;
	__u64 tool_cpu_ns;
	__u64 tool_wall_ns;
	__u32 slots[TW_SLOTS];
};

/* procs map value (key: __u32 pid): a tool process being timed. */
struct tw_proc {
	struct tw_key session;
	__u64 start_ns;
};

/* Ring-buffer record: one completed wait. */
struct tw_event {
	struct tw_key session;
	__u64 cookie;
	__u64 start_ns;			/* CLOCK_MONOTONIC (bpf_ktime_get_ns) */
	__u64 wait_us;
	__u64 expected_wait_us;
	__u64 tool_cpu_ns;
	__u64 tool_wall_ns;
	__u32 tool_procs;
	__u32 tool_class;
	__u32 blocks_held;
	__u32 block_size;
	__u32 next_state;		/* what ended the wait */
	__u32 source;
};

/*
 * The memfd backend's USDT probe kvarena:session_state has one argument, a
 * pointer to this record (lib/toolwait_usdt.h): one user read instead of
 * nine argument fetches, four of them from the stack (875 -> ~N ns).
 * Same fields as the module's tracepoint.
 */
struct tw_usdt_state {
	__u32 arena_id;
	__u32 old_state;
	__u64 session_id;
	__u32 new_state;
	__u32 tool_class;
	__u32 blocks_held;
	__u32 block_size;
	__u64 expected_wait_us;
	__u64 cookie;
};

/* stats map (array, one entry): what the programs saw and dropped. */
struct tw_stats {
	__u64 transitions;
	__u64 filtered;			/* other arena (targ_arena) */
	__u64 waits;
	__u64 events;			/* sent to the ring buffer */
	__u64 events_lost;		/* ring buffer full */
	__u64 short_waits;		/* below min_wait_us: no event */
	__u64 sessions_full;		/* sessions map update failed */
	__u64 forks;
	__u64 execs;
	__u64 exits;
};

#endif /* KVA_TOOLWAIT_H */
