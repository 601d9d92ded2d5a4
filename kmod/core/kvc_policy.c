// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Eviction policy: the arena's watermarks, the pressure trigger (one event
 * per episode, re-armed when the owner acknowledges it or when free blocks
 * climb back to the high watermark), and victim ranking under the three
 * policies described in the UAPI header.  Ranking keeps the best `max`
 * candidates in a sorted array: O(sessions x max), no allocation.
 */
#include "kvc_arena.h"

int kvc_watermarks(u32 nblocks, u32 *low_wm, u32 *high_wm)
{
	if (!*low_wm)
		*low_wm = nblocks / 8;
	if (!*high_wm)
		*high_wm = *low_wm * 2 < nblocks ? *low_wm * 2 : nblocks;
	return *low_wm > *high_wm || *high_wm > nblocks ? -EINVAL : 0;
}

int kvc_policy_set(struct kvc_arena *a, u32 policy, u32 low_wm, u32 high_wm,
		   u32 ttl_ms)
{
	if (policy >= KVC_POLICY_COUNT ||
	    kvc_watermarks(a->pool.nblocks, &low_wm, &high_wm))
		return -EINVAL;
	a->policy = policy;
	a->low_wm = low_wm;
	a->high_wm = high_wm;
	a->ttl_ms = ttl_ms ? ttl_ms : KVA_TTL_DEFAULT_MS;
	/* A new policy gets a fresh episode: already low means tell now. */
	a->pressure_armed = true;
	return 0;
}

bool kvc_pressure_check(struct kvc_arena *a, bool failed)
{
	if (!a->pressure_armed || (!failed && a->pool.nfree >= a->low_wm))
		return false;
	a->pressure_armed = false;
	return true;
}

void kvc_pressure_rearm(struct kvc_arena *a, bool acked)
{
	if (acked || a->pool.nfree >= a->high_wm)
		a->pressure_armed = true;
}

static u64 kvc_sat_mul(u64 x, u32 y)
{
	if (y && x > ~0ULL / y)
		return ~0ULL;
	return x * y;
}

/*
 * Is s a candidate under policy?  Sets its score (larger goes first).
 *
 * TOOLWAIT scores every candidate on one scale: the microseconds until its
 * KV is expected to be used again, times the blocks it pins (the memory it
 * would hold idle).  In a tool wait that is the expected wait left; once a
 * wait has outlived its expectation, and for an IDLE session, the time it
 * has lasted so far (Lindy: a pause that has lasted t is expected to last
 * about t more).  So a session that finished its reply long ago goes
 * before one whose tool is about to return, and one whose tool returns in
 * ten seconds before one idle for a moment.
 */
static bool kvc_candidate(const struct kvc_arena *a, const struct kvc_session *s,
			  u32 policy, u64 now, u64 *score)
{
	u64 inactive = now > s->last_active_ns ? now - s->last_active_ns : 0;
	u64 in_state = now > s->state_since_ns ? now - s->state_since_ns : 0;
	u64 elapsed_us;

	if (!s->nheld ||
	    (s->state != KVA_STATE_IDLE && s->state != KVA_STATE_TOOL_WAIT))
		return false;
	switch (policy) {
	case KVA_POLICY_TOOLWAIT:
		elapsed_us = kvc_div_u64(in_state, 1000);
		*score = kvc_sat_mul(s->state == KVA_STATE_TOOL_WAIT &&
				     s->expected_wait_us > elapsed_us ?
				     s->expected_wait_us - elapsed_us : elapsed_us,
				     s->nheld);
		return true;
	case KVA_POLICY_TTL:
		if (inactive < (u64)a->ttl_ms * 1000000)
			return false;
		fallthrough;
	case KVA_POLICY_LRU:
		*score = inactive;
		return true;
	}
	return false;
}

static bool kvc_before(const struct kva_victim *x, const struct kva_victim *y)
{
	if (x->score != y->score)
		return x->score > y->score;
	return x->session_id < y->session_id;
}

u32 kvc_rank_victims(const struct kvc_arena *a, u32 policy, u64 now,
		     struct kva_victim *out, u32 max)
{
	const struct kvc_session *s;
	struct kva_victim v;
	u32 n = 0, cursor = 0, i;

	if (!max)
		return 0;
	while ((s = kvc_session_next(a, &cursor))) {
		kvc_resched(cursor);
		if (!kvc_candidate(a, s, policy, now, &v.score))
			continue;
		v.session_id = s->id;
		v.state = s->state;
		v.blocks_held = s->nheld;
		v.tool_class = s->tool_class;
		v.pad = 0;
		v.idle_ns = now > s->last_active_ns ? now - s->last_active_ns : 0;
		if (n == max && !kvc_before(&v, &out[n - 1]))
			continue;
		/* Insert into out[0..n), sorted best first. */
		i = n < max ? n++ : n - 1;
		while (i && kvc_before(&v, &out[i - 1])) {
			out[i] = out[i - 1];
			i--;
		}
		out[i] = v;
	}
	return n;
}
