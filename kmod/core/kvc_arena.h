/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * The arena's bookkeeping: its block pool, its sessions (state machine,
 * timestamps, idle accounting) and which blocks each session holds.  Pure
 * logic on caller-supplied time; no locks, no memory of the KV itself.
 * Every operation validates its whole input before it changes anything, so
 * an error leaves the arena exactly as it was.
 */
#ifndef KVC_ARENA_H
#define KVC_ARENA_H

#include "kvc_shim.h"
#include "kvc_pool.h"

/*
 * A session id: a per-arena serial (one per create) above 16 bits of
 * slot + 1.  The slot gives the O(1) lookup; the serial makes the id
 * unique for the arena's lifetime, so an ended session's id misses even
 * after its slot is reused.  Serials start at KVC_SERIAL_FIRST, so every
 * id is above 2^32 and a consumer that keeps ids in 32 bits fails at its
 * first session rather than after 65536; they stop at
 * KVA_SESSION_SERIAL_MAX (ids < 2^63): creation then fails rather than
 * reuse an id.  Slots are handed out fresh until max_sessions of them
 * exist, then reused oldest-freed first.
 */
#define KVC_SLOT_BITS		16
#define KVC_SLOT_MASK		0xffffU		/* KVC_SLOT_BITS ones */
#define KVC_MAX_SESSIONS	KVC_SLOT_MASK
#define KVC_SERIAL_FIRST	(1ULL << (32 - KVC_SLOT_BITS))
#define KVC_MAX_BLOCKS		KVA_MAX_BLOCKS	/* < 2^31: bit 31 marks ids in checks */

/*
 * The states and policies this core knows.  The UAPI's enums carry no
 * count: a count there would be frozen with the ABI, and would lie to a
 * program built against one header and run on a module that knows more.
 */
#define KVC_STATE_COUNT		(KVA_STATE_ENDED + 1)

/*
 * Block references (a session holding a block, by allocation or share) per
 * arena: at most nblocks x this many by default; past it BLOCKS_SHARE says
 * -ENOSPC.  Each reference is a u32 in a session's block table, so this is
 * what bounds the kernel memory sharing can make an arena spend.
 */
#define KVC_REFS_PER_BLOCK	16
#define KVC_POLICY_COUNT	(KVA_POLICY_TTL + 1)

struct kvc_session {
	u64 id;
	u32 state;			/* enum kva_state */
	u32 tool_class;
	u32 tier;			/* enum kva_tier: the owner's word */
	u32 nheld;
	u32 cap;
	u32 *held;			/* block table, in allocation order */
	u64 cookie;
	u64 expected_wait_us;
	u64 created_ns;
	u64 state_since_ns;
	u64 idle_settled_ns;		/* idle time integrated up to here */
	u64 idle_rem_block_ns;		/* < 1000: carried block-ns */
	u64 last_active_ns;		/* last state change or block op */
	u64 transitions;
	u64 idle_block_us;		/* blocks held x us in IDLE/TOOL_WAIT */
	u64 state_ns[KVC_STATE_COUNT];	/* closed intervals only */
};

struct kvc_arena {
	struct kvc_pool pool;
	u32 block_size;
	u32 max_sessions;
	u32 nsessions;			/* live */
	u32 nslots;			/* capacity of slot[], free_slots[] */
	u32 slots_used;			/* slots ever handed out */
	u32 nfree_slots;
	u32 free_head;			/* free_slots[] is a FIFO ring */
	u64 next_serial;		/* the next id's high bits */
	struct kvc_session **slot;
	u32 *free_slots;
	u64 sessions_ended;
	u64 ended_idle_block_us;
	u64 nrefs;			/* sum of every session's nheld */
	u64 max_refs;			/* shares stop there (-ENOSPC) */

	/* Eviction (kvc_policy.c) */
	u32 policy;			/* enum kva_policy */
	u32 low_wm;
	u32 high_wm;
	u32 ttl_ms;
	bool pressure_armed;
};

int kvc_arena_init(struct kvc_arena *a, u32 nblocks, u32 block_size,
		   u32 max_sessions);
/* References allowed: nblocks x per_block (at least one per block). */
void kvc_set_ref_budget(struct kvc_arena *a, u32 per_block);
void kvc_arena_destroy(struct kvc_arena *a);

static inline u32 kvc_blocks_in_use(const struct kvc_arena *a)
{
	return a->pool.nblocks - a->pool.nfree;
}

struct kvc_session *kvc_session_find(const struct kvc_arena *a, u64 id);
/* Live sessions in slot order; start with *cursor = 0. */
struct kvc_session *kvc_session_next(const struct kvc_arena *a, u32 *cursor);

int kvc_session_create(struct kvc_arena *a, u64 cookie, u64 now, u64 *id);
/* *released: blocks that went back to the pool (for quota accounting). */
int kvc_session_end(struct kvc_arena *a, u64 id, u64 now, u32 *released);
int kvc_session_set_state(struct kvc_arena *a, u64 id, u32 state,
			  u32 tool_class, u64 expected_wait_us, u64 now,
			  u32 *released);
/*
 * SET_STATE with its flags (KVA_SESSION_STATE_KEEP, _TIER): the caller has
 * checked that TIER comes with a VER1 size.  *transition: whether the state
 * changed (the callers' tracepoint).
 */
int kvc_session_set_state_flags(struct kvc_arena *a, u64 id, u32 flags,
				u32 state, u32 tool_class,
				u64 expected_wait_us, u32 tier, u64 now,
				u32 *released, bool *transition);
int kvc_session_info(struct kvc_arena *a, u64 id, u64 now,
		     struct kva_session_info *out);

/*
 * Allocate n blocks (1..KVA_MAX_BATCH) into a session.  quota_left caps how
 * many the tenant may still take.  Without partial: all n or an error.
 */
int kvc_blocks_alloc(struct kvc_arena *a, u64 id, u32 n, bool partial,
		     u32 quota_left, u64 now, u32 *ids, u32 *done);
int kvc_blocks_free(struct kvc_arena *a, u64 id, u32 n, const u32 *ids,
		    u64 now, u32 *released);
int kvc_blocks_share(struct kvc_arena *a, u64 id, u32 n, const u32 *ids,
		     u64 now);

/* Integrate idle block-time up to now; call before nheld or state changes. */
void kvc_session_settle(struct kvc_session *s, u64 now);

/* Idle byte-seconds from idle block-microseconds, without overflow. */
u64 kvc_idle_byte_sec(u64 idle_block_us, u32 block_size);

/* kvc_args.c: input checks shared by the module and the memfd backend. */
int kvc_check_arena_create(const struct kva_arena_create *arg, u64 max_bytes);
u32 kvc_arena_nblocks(u64 bytes, u32 block_size);
int kvc_check_blocks(const struct kva_blocks *arg, bool alloc);

/* kvc_policy.c: watermarks, the pressure trigger, victim ranking. */
int kvc_policy_set(struct kvc_arena *a, u32 policy, u32 low_wm, u32 high_wm,
		   u32 ttl_ms);
/* Apply the defaults (0 = default) and check low <= high <= nblocks. */
int kvc_watermarks(u32 nblocks, u32 *low_wm, u32 *high_wm);
/* After an allocation (failed: for lack of blocks): post PRESSURE now? */
bool kvc_pressure_check(struct kvc_arena *a, bool failed);
/* After blocks return, or the owner acknowledged: arm the trigger again. */
void kvc_pressure_rearm(struct kvc_arena *a, bool acked);
/* Rank up to max victims, best first; returns how many. */
u32 kvc_rank_victims(const struct kvc_arena *a, u32 policy, u64 now,
		     struct kva_victim *out, u32 max);

/* Cross-check every invariant; 0 or -EUCLEAN (-ENOMEM if it cannot). */
int kvc_arena_check(const struct kvc_arena *a);

#endif /* KVC_ARENA_H */
