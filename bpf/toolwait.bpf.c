// SPDX-License-Identifier: (LGPL-2.1-or-later OR BSD-2-Clause)
/*
 * toolwait: how long each agent session's KV cache sits idle while a tool
 * runs, measured from the kernel's own events.
 *
 * Owns: timing every TOOL_WAIT interval from kvarena's session-state
 * transitions (module tracepoint via raw_tp/ or tracepoint/, or the
 * kvarena:session_state USDT of libkvarena's memfd backend), log2
 * histograms per tool class and per session, per-session totals, a ring
 * buffer of completed waits, and the attribution of tool processes to
 * sessions through their cgroup v2 id (sched_process_fork/exec/exit via
 * tp_btf/, raw_tp/ or tracepoint/, whichever the loader keeps).
 * Does not own: which programs load (lib/toolwait.c picks one attach kind
 * per event at load time), pinning, or cgroup registration (user space
 * fills the cgroups map).
 *
 * CO-RE: the only kernel structs read are task_struct (pid, tgid,
 * se.sum_exec_runtime, cgroups->dfl_cgrp->kn->id) and the sched tracepoint
 * records.  The module's tracepoint has no BTF on 6.1 (out-of-tree), so its
 * record layout is spelled out below; it is kvarena's own ABI (kmod/trace.h).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include <bpf/usdt.bpf.h>
#include "toolwait.h"

/* Knobs, set by the loader before load. */
const volatile __u32 targ_arena = 0;		/* 0: every arena */
const volatile __u64 min_wait_us = 0;		/* shorter waits: no event */

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, TW_MAX_SESSIONS);
	__type(key, struct tw_key);
	__type(value, struct tw_session);
} sessions SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TW_MAX_CLASSES);
	__type(key, __u32);
	__type(value, struct tw_hist);
} classes SEC(".maps");

/* cgroup v2 id (kernfs inode) -> the session whose tools run in it */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TW_MAX_CGROUPS);
	__type(key, __u64);
	__type(value, struct tw_key);
} cgroups SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, TW_MAX_PROCS);
	__type(key, __u32);
	__type(value, struct tw_proc);
} procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tw_stats);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, TW_RINGBUF_BYTES);
} events SEC(".maps");

static const struct tw_session zero_session;
static const struct tw_hist zero_hist;

#define STAT_INC(field)							\
	do {								\
		__u32 _z = 0;						\
		struct tw_stats *_st = bpf_map_lookup_elem(&stats, &_z); \
		if (_st)						\
			__sync_fetch_and_add(&_st->field, 1);		\
	} while (0)

static __always_inline __u32 log2_u32(__u32 v)
{
	__u32 r, shift;

	r = (v > 0xFFFF) << 4; v >>= r;
	shift = (v > 0xFF) << 3; v >>= shift; r |= shift;
	shift = (v > 0xF) << 2; v >>= shift; r |= shift;
	shift = (v > 0x3) << 1; v >>= shift; r |= shift;
	r |= (v >> 1);
	return r;
}

static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 hi = v >> 32;

	return hi ? log2_u32(hi) + 32 : log2_u32(v);
}

static __always_inline __u32 slot_of(__u64 us)
{
	__u32 slot = log2_u64(us);

	return slot >= TW_SLOTS ? TW_SLOTS - 1 : slot;
}

/*
 * An index the verifier can see is in range: the mask must survive the
 * compiler, which knows slot_of() < TW_SLOTS (6.1's verifier does not).
 */
#define SLOT(x) ({ __u32 _s = (x); barrier_var(_s); _s & (TW_SLOTS - 1); })

/* blocks x block_size x us / 1e6 without overflowing for hours of GiBs */
static __always_inline __u64 byte_sec(__u64 block_us, __u32 block_size)
{
	return (block_us / 1000000) * block_size +
	       (block_us % 1000000) * block_size / 1000000;
}

static __always_inline void class_add(__u32 tool_class, __u64 us, __u32 slot,
				      __u64 cpu_ns, __u64 wall_ns)
{
	struct tw_hist *h = bpf_map_lookup_elem(&classes, &tool_class);

	if (!h) {
		bpf_map_update_elem(&classes, &tool_class, &zero_hist,
				    BPF_NOEXIST);
		h = bpf_map_lookup_elem(&classes, &tool_class);
		if (!h)
			return;
	}
	__sync_fetch_and_add(&h->count, 1);
	__sync_fetch_and_add(&h->total_us, us);
	__sync_fetch_and_add(&h->tool_cpu_ns, cpu_ns);
	__sync_fetch_and_add(&h->tool_wall_ns, wall_ns);
	__sync_fetch_and_add(&h->slots[SLOT(slot)], 1);
	if (us > h->max_us)
		h->max_us = us;
}

/* The wait that `s` was in ends now; account it everywhere. */
static __always_inline void wait_end(const struct tw_key *key,
				     struct tw_session *s, __u64 now,
				     __u32 next_state, __u32 source)
{
	__u64 us = (now - s->wait_start_ns) / 1000;
	__u64 cpu_ns = s->cur_cpu_ns, wall_ns = 0, block_us;
	__u32 procs = s->cur_procs, slot = slot_of(us);
	struct tw_event *e;

	if (s->cur_last_ns > s->cur_first_ns && s->cur_first_ns)
		wall_ns = s->cur_last_ns - s->cur_first_ns;
	block_us = (__u64)s->blocks_held * us;

	s->waits++;
	s->total_us += us;
	if (us > s->max_us)
		s->max_us = us;
	s->idle_block_us += block_us;
	s->idle_byte_sec = byte_sec(s->idle_block_us, s->block_size);
	s->tool_cpu_ns += cpu_ns;
	s->tool_wall_ns += wall_ns;
	s->tool_procs += procs;
	s->slots[SLOT(slot)]++;
	s->wait_start_ns = 0;
	class_add(s->tool_class, us, slot, cpu_ns, wall_ns);
	STAT_INC(waits);
	/*
	 * Tools are counted from here to the end of the next wait, so a
	 * tool started just before its TOOL_WAIT transition still counts.
	 */
	s->cur_cpu_ns = 0;
	s->cur_first_ns = 0;
	s->cur_last_ns = 0;
	s->cur_procs = 0;

	if (us < min_wait_us) {
		STAT_INC(short_waits);
		return;
	}
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		STAT_INC(events_lost);
		return;
	}
	e->session = *key;
	e->cookie = s->cookie;
	e->start_ns = now - us * 1000;
	e->wait_us = us;
	e->expected_wait_us = s->expected_wait_us;
	e->tool_cpu_ns = cpu_ns;
	e->tool_wall_ns = wall_ns;
	e->tool_procs = procs;
	e->tool_class = s->tool_class;
	e->blocks_held = s->blocks_held;
	e->block_size = s->block_size;
	e->next_state = next_state;
	e->source = source;
	bpf_ringbuf_submit(e, 0);
	STAT_INC(events);
}

static __always_inline int on_state(struct tw_key *key, __u32 old_state,
				    __u32 new_state, __u32 tool_class,
				    __u64 expected_us, __u32 blocks,
				    __u32 block_size, __u64 cookie,
				    __u32 source)
{
	__u64 now = bpf_ktime_get_ns();
	struct tw_session *s;

	STAT_INC(transitions);
	if (targ_arena && key->arena_id != targ_arena) {
		STAT_INC(filtered);
		return 0;
	}
	s = bpf_map_lookup_elem(&sessions, key);
	if (!s) {
		if (new_state == TW_STATE_ENDED)
			return 0;
		if (bpf_map_update_elem(&sessions, key, &zero_session,
					BPF_NOEXIST) == 0)
			s = bpf_map_lookup_elem(&sessions, key);
		if (!s) {
			STAT_INC(sessions_full);
			return 0;
		}
	}
	s->cookie = cookie;
	s->block_size = block_size;
	s->source = source;
	if (old_state == TW_STATE_TOOL_WAIT && s->wait_start_ns)
		wait_end(key, s, now, new_state, source);
	s->state = new_state;
	s->blocks_held = blocks;
	if (new_state == TW_STATE_TOOL_WAIT) {
		s->tool_class = tool_class;
		s->expected_wait_us = expected_us;
		s->wait_start_ns = now;
	}
	return 0;
}

/* ------------------------------------------------ the module's tracepoint */

SEC("raw_tp/kvarena_session_state")
int BPF_PROG(raw_tp_session_state, __u32 arena_id, __u64 session_id,
	     __u32 old_state, __u32 new_state, __u32 tool_class,
	     __u64 expected_us, __u32 blocks, __u32 block_size, __u64 cookie)
{
	struct tw_key key = { .arena_id = arena_id, .session_id = session_id };

	return on_state(&key, old_state, new_state, tool_class, expected_us,
			blocks, block_size, cookie, TW_SRC_RAW_TP);
}

/* The record of kvarena:kvarena_session_state (kmod/trace.h field order). */
struct kvarena_session_state_rec {
	__u16 common_type;
	__u8 common_flags;
	__u8 common_preempt_count;
	__s32 common_pid;
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

SEC("tracepoint/kvarena/kvarena_session_state")
int tp_session_state(struct kvarena_session_state_rec *ctx)
{
	struct tw_key key = { .arena_id = ctx->arena_id,
			      .session_id = ctx->session_id };

	return on_state(&key, ctx->old_state, ctx->new_state, ctx->tool_class,
			ctx->expected_wait_us, ctx->blocks_held,
			ctx->block_size, ctx->cookie, TW_SRC_TP);
}

/* ------------------------------------ libkvarena's memfd backend (USDT) */

SEC("usdt")
int BPF_USDT(usdt_session_state, void *rec_ptr)
{
	struct tw_key key = { .pid = bpf_get_current_pid_tgid() >> 32 };
	struct tw_usdt_state r;

	if (bpf_probe_read_user(&r, sizeof(r), rec_ptr))
		return 0;
	key.arena_id = r.arena_id;
	key.session_id = r.session_id;
	return on_state(&key, r.old_state, r.new_state, r.tool_class,
			r.expected_wait_us, r.blocks_held, r.block_size,
			r.cookie, TW_SRC_USDT);
}

/* ------------------------------------------------- tool process tracking */

static __always_inline void proc_start(__u32 pid, const struct tw_key *key)
{
	struct tw_proc p = { .session = *key, .start_ns = bpf_ktime_get_ns() };
	struct tw_session *s;

	bpf_map_update_elem(&procs, &pid, &p, BPF_ANY);
	s = bpf_map_lookup_elem(&sessions, key);
	if (s && !s->cur_first_ns)
		s->cur_first_ns = p.start_ns;
}

static __always_inline int on_fork(__u32 pid, __u32 tgid, __u64 cgid)
{
	struct tw_key *key;

	if (pid != tgid)	/* a thread: its CPU time counts at its exit */
		return 0;
	key = bpf_map_lookup_elem(&cgroups, &cgid);
	if (!key)
		return 0;
	STAT_INC(forks);
	proc_start(pid, key);
	return 0;
}

/* exec: catches processes moved into a session's cgroup after fork. */
static __always_inline int on_exec(void)
{
	__u64 cgid = bpf_get_current_cgroup_id();
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	struct tw_key *key = bpf_map_lookup_elem(&cgroups, &cgid);

	if (!key)
		return 0;
	STAT_INC(execs);
	if (!bpf_map_lookup_elem(&procs, &pid))
		proc_start(pid, key);
	return 0;
}

/* exit of any task: its CPU time joins the session's tool tree. */
static __always_inline int on_exit(void)
{
	__u64 id = bpf_get_current_pid_tgid(), cgid, now, cpu;
	__u32 pid = id, tgid = id >> 32;
	struct task_struct *task;
	struct tw_session *s;
	struct tw_proc *p;
	struct tw_key *key;

	p = bpf_map_lookup_elem(&procs, &pid);
	if (p) {
		key = &p->session;
	} else {
		cgid = bpf_get_current_cgroup_id();
		key = bpf_map_lookup_elem(&cgroups, &cgid);
		if (!key)
			return 0;
	}
	STAT_INC(exits);
	task = (struct task_struct *)bpf_get_current_task();
	cpu = BPF_CORE_READ(task, se.sum_exec_runtime);
	now = bpf_ktime_get_ns();
	s = bpf_map_lookup_elem(&sessions, key);
	if (s) {
		__sync_fetch_and_add(&s->cur_cpu_ns, cpu);
		if (p && pid == tgid) {
			__sync_fetch_and_add(&s->cur_procs, 1);
			if (now > s->cur_last_ns)
				s->cur_last_ns = now;
		}
	}
	if (p)
		bpf_map_delete_elem(&procs, &pid);
	return 0;
}

static __always_inline __u64 task_cgroup_id(struct task_struct *t)
{
	return BPF_CORE_READ(t, cgroups, dfl_cgrp, kn, id);
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(btf_fork, struct task_struct *parent, struct task_struct *child)
{
	return on_fork(BPF_CORE_READ(child, pid), BPF_CORE_READ(child, tgid),
		       task_cgroup_id(child));
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(btf_exec)
{
	return on_exec();
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(btf_exit)
{
	return on_exit();
}

SEC("raw_tp/sched_process_fork")
int BPF_PROG(raw_fork, struct task_struct *parent, struct task_struct *child)
{
	return on_fork(BPF_CORE_READ(child, pid), BPF_CORE_READ(child, tgid),
		       task_cgroup_id(child));
}

SEC("raw_tp/sched_process_exec")
int BPF_PROG(raw_exec)
{
	return on_exec();
}

SEC("raw_tp/sched_process_exit")
int BPF_PROG(raw_exit)
{
	return on_exit();
}

/*
 * tracepoint/: no task pointer for the child, so a new process is timed
 * from its first exec in a session's cgroup (threads cannot be told apart
 * from processes here either; both are keyed by pid).
 */
SEC("tracepoint/sched/sched_process_fork")
int tp_fork(struct trace_event_raw_sched_process_fork *ctx)
{
	__u64 cgid = bpf_get_current_cgroup_id();
	__u32 pid = ctx->child_pid;

	return on_fork(pid, pid, cgid);
}

SEC("tracepoint/sched/sched_process_exec")
int tp_exec(void *ctx)
{
	return on_exec();
}

SEC("tracepoint/sched/sched_process_exit")
int tp_exit(void *ctx)
{
	return on_exit();
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
