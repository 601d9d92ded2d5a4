// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Sessions: the id table (serial + slot, O(1) lookup, ids never reused),
 * the state machine and its accounting (time per state, transitions, idle
 * block-time).  Block membership lives in kvc_blocks.c.
 */
#include "kvc_arena.h"

int kvc_arena_init(struct kvc_arena *a, u32 nblocks, u32 block_size,
		   u32 max_sessions)
{
	int ret;

	memset(a, 0, sizeof(*a));
	if (!nblocks || nblocks >= KVC_MAX_BLOCKS || !block_size ||
	    !max_sessions || max_sessions > KVC_MAX_SESSIONS)
		return -EINVAL;
	a->block_size = block_size;
	a->max_sessions = max_sessions;
	a->next_serial = KVC_SERIAL_FIRST;
	ret = kvc_pool_init(&a->pool, nblocks);
	if (ret)
		return ret;
	kvc_set_ref_budget(a, KVC_REFS_PER_BLOCK);
	return kvc_policy_set(a, KVA_POLICY_TOOLWAIT, 0, 0, 0);
}

void kvc_set_ref_budget(struct kvc_arena *a, u32 per_block)
{
	a->max_refs = (u64)a->pool.nblocks * (per_block ? per_block : 1);
}

static void kvc_session_free(struct kvc_session *s)
{
	kvc_free(s->held);
	kvc_free(s);
}

void kvc_arena_destroy(struct kvc_arena *a)
{
	u32 i;

	for (i = 0; i < a->slots_used; i++) {
		if (a->slot[i])
			kvc_session_free(a->slot[i]);
		kvc_resched(i);
	}
	kvc_free(a->slot);
	kvc_free(a->free_slots);
	kvc_pool_destroy(&a->pool);
	memset(a, 0, sizeof(*a));
}

static u32 kvc_id_slot(u64 id)
{
	return (u32)(id & KVC_SLOT_MASK) - 1;
}

struct kvc_session *kvc_session_find(const struct kvc_arena *a, u64 id)
{
	u32 slot = kvc_id_slot(id);
	struct kvc_session *s;

	if (!(id & KVC_SLOT_MASK) || slot >= a->slots_used)
		return NULL;
	s = a->slot[slot];
	return s && s->id == id ? s : NULL;
}

struct kvc_session *kvc_session_next(const struct kvc_arena *a, u32 *cursor)
{
	while (*cursor < a->slots_used) {
		struct kvc_session *s = a->slot[(*cursor)++];

		if (s)
			return s;
	}
	return NULL;
}

/* Unwrap the free ring to start at index 0 (before its array grows). */
static int kvc_free_unwrap(struct kvc_arena *a)
{
	u32 *ring, i;

	if (!a->free_head)
		return 0;
	ring = kvc_zalloc((size_t)a->nslots * sizeof(*ring));
	if (!ring)
		return -ENOMEM;
	for (i = 0; i < a->nfree_slots; i++)
		ring[i] = a->free_slots[(a->free_head + i) % a->nslots];
	kvc_free(a->free_slots);
	a->free_slots = ring;
	a->free_head = 0;
	return 0;
}

static int kvc_slots_grow(struct kvc_arena *a)
{
	u32 n = a->nslots ? a->nslots * 2 : 16;
	struct kvc_session **slot;
	u32 *free_slots;
	int ret;

	if (n > a->max_sessions)
		n = a->max_sessions;
	ret = kvc_free_unwrap(a);
	if (ret)
		return ret;
	slot = kvc_grow(a->slot, a->nslots * sizeof(*slot), n * sizeof(*slot));
	if (!slot)
		return -ENOMEM;
	a->slot = slot;
	free_slots = kvc_grow(a->free_slots, a->nslots * sizeof(*free_slots),
			      n * sizeof(*free_slots));
	if (!free_slots)
		return -ENOMEM;
	a->free_slots = free_slots;
	a->nslots = n;
	return 0;
}

int kvc_session_create(struct kvc_arena *a, u64 cookie, u64 now, u64 *id)
{
	struct kvc_session *s;
	u32 slot;
	int ret;

	/* Ids spent (2^47 creates) is ENOSPC too: an id is never reused. */
	if (a->nsessions >= a->max_sessions ||
	    a->next_serial >= KVA_SESSION_SERIAL_MAX)
		return -ENOSPC;
	/* Fresh slots first, then the one freed longest ago: slow reuse. */
	if (a->slots_used < a->max_sessions && a->slots_used == a->nslots) {
		ret = kvc_slots_grow(a);
		if (ret)
			return ret;
	}
	s = kvc_zalloc(sizeof(*s));
	if (!s)
		return -ENOMEM;
	if (a->slots_used < a->max_sessions) {
		slot = a->slots_used++;
	} else {
		slot = a->free_slots[a->free_head];
		a->free_head = (a->free_head + 1) % a->nslots;
		a->nfree_slots--;
	}
	s->id = (a->next_serial++ << KVC_SLOT_BITS) | (slot + 1);
	s->state = KVA_STATE_IDLE;
	s->cookie = cookie;
	s->created_ns = now;
	s->state_since_ns = now;
	s->idle_settled_ns = now;
	s->last_active_ns = now;
	a->slot[slot] = s;
	a->nsessions++;
	*id = s->id;
	return 0;
}

static bool kvc_state_is_idle(u32 state)
{
	return state == KVA_STATE_IDLE || state == KVA_STATE_TOOL_WAIT;
}

/*
 * Integrate blocks held x idle time since the last settle, exactly:
 * idle_block_us is floor(sum(nheld * dt_ns) / 1000), with the sub-us
 * remainder carried in block-ns at the block count it was earned at.
 */
void kvc_session_settle(struct kvc_session *s, u64 now)
{
	u64 dt, us, rem;

	if (now <= s->idle_settled_ns)
		return;
	dt = now - s->idle_settled_ns;
	s->idle_settled_ns = now;
	if (!kvc_state_is_idle(s->state) || !s->nheld)
		return;
	us = kvc_div_u64(dt, 1000);
	/* (dt % 1000) * nheld < 2^42: no overflow. */
	rem = s->idle_rem_block_ns + (dt - us * 1000) * s->nheld;
	s->idle_block_us += us * s->nheld + kvc_div_u64(rem, 1000);
	s->idle_rem_block_ns = rem - kvc_div_u64(rem, 1000) * 1000;
}

int kvc_session_end(struct kvc_arena *a, u64 id, u64 now, u32 *released)
{
	struct kvc_session *s = kvc_session_find(a, id);
	u32 slot, i, n = 0;

	*released = 0;
	if (!s)
		return -ENOENT;
	kvc_session_settle(s, now);
	for (i = 0; i < s->nheld; i++) {
		n += kvc_pool_put(&a->pool, s->held[i]);
		kvc_resched(i + 1);
	}
	a->nrefs -= s->nheld;
	slot = kvc_id_slot(id);
	a->slot[slot] = NULL;
	a->free_slots[(a->free_head + a->nfree_slots++) % a->nslots] = slot;
	a->nsessions--;
	a->sessions_ended++;
	a->ended_idle_block_us += s->idle_block_us;
	kvc_session_free(s);
	*released = n;
	return 0;
}

int kvc_session_set_state(struct kvc_arena *a, u64 id, u32 state,
			  u32 tool_class, u64 expected_wait_us, u64 now,
			  u32 *released)
{
	bool transition;

	return kvc_session_set_state_flags(a, id, 0, state, tool_class,
					   expected_wait_us, 0, now, released,
					   &transition);
}

int kvc_session_set_state_flags(struct kvc_arena *a, u64 id, u32 flags,
				u32 state, u32 tool_class,
				u64 expected_wait_us, u32 tier, u64 now,
				u32 *released, bool *transition)
{
	struct kvc_session *s = kvc_session_find(a, id);

	*released = 0;
	*transition = false;
	if (!s)
		return -ENOENT;
	if (state >= KVC_STATE_COUNT ||
	    (flags & ~(KVA_SESSION_STATE_KEEP | KVA_SESSION_STATE_TIER)))
		return -EINVAL;
	if (state != KVA_STATE_TOOL_WAIT && (tool_class || expected_wait_us))
		return -EINVAL;
	if ((flags & KVA_SESSION_STATE_TIER) ? tier > KVA_TIER_MAX : tier)
		return -EINVAL;
	if (flags & KVA_SESSION_STATE_KEEP) {
		/* a new prediction or tier, the state and its clock untouched */
		if (state != s->state || state == KVA_STATE_ENDED)
			return -EINVAL;
		s->tool_class = tool_class;
		s->expected_wait_us = expected_wait_us;
		if (flags & KVA_SESSION_STATE_TIER)
			s->tier = tier;
		return 0;
	}
	if (state == KVA_STATE_ENDED) {
		if (flags)
			return -EINVAL;
		*transition = true;
		return kvc_session_end(a, id, now, released);
	}
	if (state == s->state)
		return -EALREADY;
	if (flags & KVA_SESSION_STATE_TIER)
		s->tier = tier;
	*transition = true;
	kvc_session_settle(s, now);
	if (now > s->state_since_ns)
		s->state_ns[s->state] += now - s->state_since_ns;
	s->state = state;
	s->state_since_ns = now;
	s->last_active_ns = now;
	s->tool_class = tool_class;
	s->expected_wait_us = expected_wait_us;
	s->transitions++;
	return 0;
}

u64 kvc_idle_byte_sec(u64 idle_block_us, u32 block_size)
{
	u64 sec = kvc_div_u64(idle_block_us, 1000000);
	u64 rem = idle_block_us - sec * 1000000;

	return sec * block_size + kvc_div_u64(rem * block_size, 1000000);
}

int kvc_session_info(struct kvc_arena *a, u64 id, u64 now,
		     struct kva_session_info *out)
{
	struct kvc_session *s = kvc_session_find(a, id);
	u32 i;

	if (!s)
		return -ENOENT;
	kvc_session_settle(s, now);
	out->session_id = s->id;
	out->state = s->state;
	out->tool_class = s->tool_class;
	out->tier = s->tier;
	out->pad1 = 0;
	out->blocks_held = s->nheld;
	out->expected_wait_us = s->expected_wait_us;
	out->cookie = s->cookie;
	out->created_ns = s->created_ns;
	out->state_since_ns = s->state_since_ns;
	out->transitions = s->transitions;
	out->idle_block_us = s->idle_block_us;
	out->idle_byte_sec = kvc_idle_byte_sec(s->idle_block_us, a->block_size);
	for (i = 0; i < KVC_STATE_COUNT; i++)
		out->state_ns[i] = s->state_ns[i];
	if (now > s->state_since_ns)
		out->state_ns[s->state] += now - s->state_since_ns;
	return 0;
}
