// SPDX-License-Identifier: GPL-2.0
/*
 * Tests for kmod/core/kvc_session.c: arena setup, the session id table
 * (serials and slots, growth, iteration), the state machine and its
 * accounting (time per state, transitions, idle block-time, byte-seconds).
 * Block membership is tested in test_blocks.c.
 */
#include "kvc_test.h"

#define BS	4096u		/* block size used unless a test needs another */
#define US	1000ull		/* ns per microsecond */

static const u32 live_states[] = {
	KVA_STATE_IDLE, KVA_STATE_PREFILL, KVA_STATE_DECODE,
	KVA_STATE_TOOL_WAIT,
};

/* ---- arena setup ---- */

static void test_init_rejects_bad_params(void)
{
	struct kvc_arena a;

	T_ERR(kvc_arena_init(&a, 0, BS, 4), EINVAL);
	T_ERR(kvc_arena_init(&a, KVC_MAX_BLOCKS, BS, 4), EINVAL);
	T_ERR(kvc_arena_init(&a, UINT32_MAX, BS, 4), EINVAL);
	T_ERR(kvc_arena_init(&a, 4, 0, 4), EINVAL);
	T_ERR(kvc_arena_init(&a, 4, BS, 0), EINVAL);
	T_ERR(kvc_arena_init(&a, 4, BS, KVC_MAX_SESSIONS + 1), EINVAL);
	T_ERR(kvc_arena_init(&a, 4, BS, UINT32_MAX), EINVAL);
	/* A failed init leaves a zeroed arena that destroy accepts. */
	CU_ASSERT_PTR_NULL(a.pool.refcnt);
	kvc_arena_destroy(&a);

	T_OK(kvc_arena_init(&a, 1, 1, 1));
	T_CHECK(&a);
	kvc_arena_destroy(&a);
	T_OK(kvc_arena_init(&a, 4, BS, KVC_MAX_SESSIONS));
	CU_ASSERT_EQUAL(a.max_sessions, KVC_MAX_SESSIONS);
	CU_ASSERT_EQUAL(a.pool.nfree, 4);
	CU_ASSERT_EQUAL(a.block_size, BS);
	T_CHECK(&a);
	kvc_arena_destroy(&a);
}

static void test_init_enomem(void)
{
	struct kvc_arena a;
	long k;

	for (k = 0; k < 2; k++) {
		kvc_fail_calloc(k);
		T_ERR(kvc_arena_init(&a, 16, BS, 4), ENOMEM);
		kvc_fail_calloc(-1);
		kvc_arena_destroy(&a);
	}
}

/* ---- the id table ---- */

static void test_create_starts_idle(void)
{
	struct kvc_arena a;
	struct kva_session_info info;
	struct kvc_session *s;
	u64 id;
	u32 i;

	kvc_new_arena(&a, 8, BS, 4);
	id = kvc_new_session(&a, 0xfeedfacecafebeefull, 5000);
	/* Above 2^32: 32-bit truncation anywhere shows at once. */
	CU_ASSERT(id > UINT32_MAX && id < (1ull << 63));
	CU_ASSERT_EQUAL(a.nsessions, 1);
	s = kvc_must_find(&a, id);
	CU_ASSERT_EQUAL(s->id, id);
	info = kvc_info_ok(&a, id, 5000);
	CU_ASSERT_EQUAL(info.session_id, id);
	CU_ASSERT_EQUAL(info.state, KVA_STATE_IDLE);
	CU_ASSERT_EQUAL(info.tool_class, 0);
	CU_ASSERT_EQUAL(info.blocks_held, 0);
	CU_ASSERT_EQUAL(info.expected_wait_us, 0);
	CU_ASSERT_EQUAL(info.cookie, 0xfeedfacecafebeefull);
	CU_ASSERT_EQUAL(info.created_ns, 5000);
	CU_ASSERT_EQUAL(info.state_since_ns, 5000);
	CU_ASSERT_EQUAL(info.transitions, 0);
	CU_ASSERT_EQUAL(info.idle_block_us, 0);
	CU_ASSERT_EQUAL(info.idle_byte_sec, 0);
	for (i = 0; i < KVC_STATE_COUNT; i++)
		CU_ASSERT_EQUAL(info.state_ns[i], 0);
	T_CHECK(&a);
	kvc_arena_destroy(&a);
}

static void test_ids_unique(void)
{
	enum { N = 50 };
	struct kvc_arena a;
	u64 ids[N];
	u32 i, j;

	kvc_new_arena(&a, 8, BS, N);
	for (i = 0; i < N; i++) {
		ids[i] = kvc_new_session(&a, i, 0);
		CU_ASSERT(ids[i] < (1ull << 63));
		CU_ASSERT(!i || ids[i] > ids[i - 1]);	/* creation order */
		for (j = 0; j < i; j++)
			CU_ASSERT_NOT_EQUAL(ids[i], ids[j]);
	}
	for (i = 0; i < N; i++)
		CU_ASSERT_EQUAL(kvc_must_find(&a, ids[i])->cookie, i);
	T_CHECK(&a);
	kvc_arena_destroy(&a);
}

static void test_find_rejects_foreign_ids(void)
{
	struct kvc_arena a;
	u64 id;
	u32 bit;

	kvc_new_arena(&a, 8, BS, 8);
	CU_ASSERT_PTR_NULL(kvc_session_find(&a, 1));	/* empty table */
	id = kvc_new_session(&a, 1, 0);
	kvc_new_session(&a, 2, 0);
	CU_ASSERT_PTR_NULL(kvc_session_find(&a, 0));
	CU_ASSERT_PTR_NULL(kvc_session_find(&a, 3));	/* slot not used */
	CU_ASSERT_PTR_NULL(kvc_session_find(&a, KVC_SLOT_MASK));
	CU_ASSERT_PTR_NULL(kvc_session_find(&a, UINT32_MAX));
	CU_ASSERT_PTR_NULL(kvc_session_find(&a, UINT64_MAX));
	CU_ASSERT_PTR_NULL(kvc_session_find(&a, id & ~(u64)KVC_SLOT_MASK));
	/* Any flipped bit outside the slot field is another id. */
	for (bit = KVC_SLOT_BITS; bit < 64; bit++)
		CU_ASSERT_PTR_NULL(kvc_session_find(&a, id ^ (1ull << bit)));
	CU_ASSERT_PTR_NOT_NULL(kvc_session_find(&a, id));
	kvc_arena_destroy(&a);
}

static void test_end(void)
{
	struct kvc_arena a;
	u64 id, other;
	u32 released = 77;

	kvc_new_arena(&a, 8, BS, 4);
	id = kvc_new_session(&a, 1, 0);
	other = kvc_new_session(&a, 2, 0);
	T_ERR_UNCHANGED(&a, kvc_session_end(&a, 0, 10, &released), ENOENT);
	T_ERR_UNCHANGED(&a, kvc_session_end(&a, id + 2, 10, &released),
			ENOENT);
	T_OK(kvc_session_end(&a, id, 10, &released));
	CU_ASSERT_EQUAL(released, 0);
	CU_ASSERT_PTR_NULL(kvc_session_find(&a, id));
	CU_ASSERT_PTR_NOT_NULL(kvc_session_find(&a, other));
	CU_ASSERT_EQUAL(a.nsessions, 1);
	CU_ASSERT_EQUAL(a.sessions_ended, 1);
	T_CHECK(&a);
	T_ERR_UNCHANGED(&a, kvc_session_end(&a, id, 20, &released), ENOENT);
	T_OK(kvc_session_end(&a, other, 20, &released));
	CU_ASSERT_EQUAL(a.nsessions, 0);
	CU_ASSERT_EQUAL(a.sessions_ended, 2);
	T_CHECK(&a);
	kvc_arena_destroy(&a);
}

/*
 * SET_STATE's flags: KEEP replaces the current state's tool fields without
 * a transition (the clock, the count, idle accounting untouched); TIER
 * records the runtime's tier, with KEEP or with a transition; every
 * misuse is EINVAL and changes nothing.
 */
static void test_set_state_flags(void)
{
	struct kvc_arena a;
	struct kva_session_info info;
	const u32 K = KVA_SESSION_STATE_KEEP, T = KVA_SESSION_STATE_TIER;
	bool tr;
	u64 id;
	u32 released;

	kvc_new_arena(&a, 8, BS, 4);
	id = kvc_new_session(&a, 0, 0);
	info = kvc_info_ok(&a, id, 0);
	CU_ASSERT_EQUAL(info.tier, KVA_TIER_ARENA);	/* new sessions */
	T_OK(kvc_session_set_state_flags(&a, id, T, KVA_STATE_TOOL_WAIT, 7,
					 2000000, KVA_TIER_NONE, 10, &released,
					 &tr));
	CU_ASSERT_TRUE(tr);
	info = kvc_info_ok(&a, id, 20);
	CU_ASSERT_EQUAL(info.tier, KVA_TIER_NONE);
	CU_ASSERT_EQUAL(info.transitions, 1);
	/* KEEP: a new prediction, same state and clock */
	T_OK(kvc_session_set_state_flags(&a, id, K, KVA_STATE_TOOL_WAIT, 7,
					 9000000, 0, 30, &released, &tr));
	CU_ASSERT_FALSE(tr);
	info = kvc_info_ok(&a, id, 40);
	CU_ASSERT_EQUAL(info.state, KVA_STATE_TOOL_WAIT);
	CU_ASSERT_EQUAL(info.expected_wait_us, 9000000);
	CU_ASSERT_EQUAL(info.state_since_ns, 10);
	CU_ASSERT_EQUAL(info.transitions, 1);
	CU_ASSERT_EQUAL(info.tier, KVA_TIER_NONE);	/* KEEP alone keeps it */
	T_OK(kvc_session_set_state_flags(&a, id, K | T, KVA_STATE_TOOL_WAIT, 7,
					 9000000, KVA_TIER_DISK, 50, &released,
					 &tr));
	CU_ASSERT_EQUAL(kvc_info_ok(&a, id, 50).tier, KVA_TIER_DISK);
	/* misuse: KEEP with another state or ENDED, a tier out of range, a
	 * tier without the flag, unknown flags, ENDED with flags */
	T_ERR_UNCHANGED(&a, kvc_session_set_state_flags(&a, id, K, KVA_STATE_IDLE,
							0, 0, 0, 60, &released, &tr),
			EINVAL);
	T_ERR_UNCHANGED(&a, kvc_session_set_state_flags(&a, id, K, KVA_STATE_ENDED,
							0, 0, 0, 60, &released, &tr),
			EINVAL);
	T_ERR_UNCHANGED(&a, kvc_session_set_state_flags(&a, id, K | T,
							KVA_STATE_TOOL_WAIT, 7, 1,
							KVA_TIER_MAX + 1, 60, &released,
							&tr), EINVAL);
	T_ERR_UNCHANGED(&a, kvc_session_set_state_flags(&a, id, K,
							KVA_STATE_TOOL_WAIT, 7, 1,
							KVA_TIER_ARENA + 1, 60, &released,
							&tr), EINVAL);
	T_ERR_UNCHANGED(&a, kvc_session_set_state_flags(&a, id, 4, KVA_STATE_IDLE,
							0, 0, 0, 60, &released, &tr),
			EINVAL);
	T_ERR_UNCHANGED(&a, kvc_session_set_state_flags(&a, id, T, KVA_STATE_ENDED,
							0, 0, 0, 60, &released, &tr),
			EINVAL);
	T_OK(kvc_session_set_state_flags(&a, id, K, KVA_STATE_TOOL_WAIT, 0, 0, 0,
					 60, &released, &tr));
	info = kvc_info_ok(&a, id, 70);
	CU_ASSERT_EQUAL(info.expected_wait_us, 0);	/* the KEEP just above */
	CU_ASSERT_EQUAL(info.tier, KVA_TIER_DISK);
	/* a transition leaves the tier where it was */
	kvc_state_ok(&a, id, KVA_STATE_PREFILL, 80);
	CU_ASSERT_EQUAL(kvc_info_ok(&a, id, 80).tier, KVA_TIER_DISK);
	kvc_arena_destroy(&a);
}

/* An id, once ended, misses everywhere even when its slot is reused. */
static void test_stale_id_after_slot_reuse(void)
{
	struct kvc_arena a;
	struct kva_session_info info;
	u64 old, fresh;
	u32 released, done, ids[2], blk;

	kvc_new_arena(&a, 8, BS, 1);
	old = kvc_new_session(&a, 1, 0);
	kvc_alloc_ok(&a, old, 1, 0, &blk);
	T_OK(kvc_session_end(&a, old, 1, &released));
	CU_ASSERT_EQUAL(released, 1);
	fresh = kvc_new_session(&a, 2, 2);
	CU_ASSERT_NOT_EQUAL(fresh, old);
	CU_ASSERT_EQUAL(fresh & KVC_SLOT_MASK, old & KVC_SLOT_MASK);
	kvc_alloc_ok(&a, fresh, 2, 2, ids);

	CU_ASSERT_PTR_NULL(kvc_session_find(&a, old));
	T_ERR_UNCHANGED(&a, kvc_session_end(&a, old, 3, &released), ENOENT);
	T_ERR_UNCHANGED(&a, kvc_session_set_state(&a, old, KVA_STATE_DECODE,
						  0, 0, 3, &released), ENOENT);
	T_ERR_UNCHANGED(&a, kvc_session_set_state(&a, old, KVA_STATE_ENDED,
						  0, 0, 3, &released), ENOENT);
	T_ERR_UNCHANGED(&a, kvc_session_info(&a, old, 3, &info), ENOENT);
	T_ERR_UNCHANGED(&a, kvc_blocks_alloc(&a, old, 1, true, UINT32_MAX, 3,
					     ids, &done), ENOENT);
	T_ERR_UNCHANGED(&a, kvc_blocks_free(&a, old, 1, ids, 3, &released),
			ENOENT);
	T_ERR_UNCHANGED(&a, kvc_blocks_share(&a, old, 1, ids, 3), ENOENT);
	CU_ASSERT_EQUAL(kvc_must_find(&a, fresh)->nheld, 2);
	kvc_arena_destroy(&a);
}

/* One slot reused 2047 times: 2048 distinct ids, no stale one ever hits. */
static void test_serials_distinct(void)
{
	enum { N = 2048 };
	static u64 ids[N];
	static unsigned char seen[1u << 11];
	struct kvc_arena a;
	u32 i, released;

	memset(seen, 0, sizeof(seen));
	kvc_new_arena(&a, 1, BS, 1);
	for (i = 0; i < N; i++) {
		ids[i] = kvc_new_session(&a, i, i);
		CU_ASSERT_EQUAL(ids[i] & KVC_SLOT_MASK, 1);
		CU_ASSERT(ids[i] > UINT32_MAX && ids[i] < (1ull << 63));
		CU_ASSERT_EQUAL(seen[(ids[i] >> KVC_SLOT_BITS) -
				     KVC_SERIAL_FIRST]++, 0);
		if (i)
			CU_ASSERT_PTR_NULL(kvc_session_find(&a, ids[i - 1]));
		T_OK(kvc_session_end(&a, ids[i], i, &released));
	}
	CU_ASSERT_EQUAL(a.sessions_ended, N);
	T_CHECK(&a);
	kvc_arena_destroy(&a);
}

static void test_max_sessions_enospc(void)
{
	struct kvc_arena a;
	u64 ids[3], id = 12345, again;
	u32 released;

	kvc_new_arena(&a, 8, BS, 3);
	ids[0] = kvc_new_session(&a, 0, 0);
	ids[1] = kvc_new_session(&a, 1, 0);
	ids[2] = kvc_new_session(&a, 2, 0);
	T_ERR_UNCHANGED(&a, kvc_session_create(&a, 3, 0, &id), ENOSPC);
	T_ERR_UNCHANGED(&a, kvc_session_create(&a, 3, 0, &id), ENOSPC);
	CU_ASSERT_EQUAL(id, 12345);
	T_OK(kvc_session_end(&a, ids[1], 1, &released));
	again = kvc_new_session(&a, 4, 2);
	CU_ASSERT_NOT_EQUAL(again, ids[1]);
	T_ERR_UNCHANGED(&a, kvc_session_create(&a, 5, 3, &id), ENOSPC);
	CU_ASSERT_EQUAL(a.nsessions, 3);
	kvc_arena_destroy(&a);

	kvc_new_arena(&a, 8, BS, 1);
	ids[0] = kvc_new_session(&a, 0, 0);
	T_ERR_UNCHANGED(&a, kvc_session_create(&a, 1, 0, &id), ENOSPC);
	kvc_arena_destroy(&a);
}

/* The table doubles from 16, capped at max_sessions; sessions survive. */
static void test_growth(void)
{
	enum { MAX = 100 };
	struct kvc_arena a;
	u64 ids[MAX], id;
	u32 i, released;

	kvc_new_arena(&a, 8, BS, MAX);
	CU_ASSERT_EQUAL(a.nslots, 0);
	for (i = 0; i < MAX; i++) {
		ids[i] = kvc_new_session(&a, 1000 + i, i);
		CU_ASSERT_EQUAL(a.nslots, i < 16 ? 16 : i < 32 ? 32 :
				i < 64 ? 64 : MAX);
		if (i == 16 || i == 32 || i == 64) {
			u32 j;

			for (j = 0; j <= i; j++)
				CU_ASSERT_EQUAL(kvc_must_find(&a, ids[j])->cookie,
						1000 + j);
			T_CHECK(&a);
		}
	}
	T_ERR_UNCHANGED(&a, kvc_session_create(&a, 0, 0, &id), ENOSPC);
	/* Ending and recreating reuses slots without growing. */
	for (i = 0; i < MAX; i += 2)
		T_OK(kvc_session_end(&a, ids[i], 200, &released));
	for (i = 0; i < MAX; i += 2) {
		ids[i] = kvc_new_session(&a, 5000 + i, 300);
		CU_ASSERT_EQUAL(a.nslots, MAX);
	}
	for (i = 0; i < MAX; i++)
		CU_ASSERT_EQUAL(kvc_must_find(&a, ids[i])->cookie,
				(i % 2 ? 1000 : 5000) + i);
	T_ERR_UNCHANGED(&a, kvc_session_create(&a, 0, 0, &id), ENOSPC);
	T_CHECK(&a);
	kvc_arena_destroy(&a);
}

static void test_growth_capped_odd_max(void)
{
	struct kvc_arena a;
	u64 id;
	u32 i;

	kvc_new_arena(&a, 8, BS, 17);
	for (i = 0; i < 17; i++)
		kvc_new_session(&a, i, 0);
	CU_ASSERT_EQUAL(a.nslots, 17);
	T_ERR_UNCHANGED(&a, kvc_session_create(&a, 0, 0, &id), ENOSPC);
	kvc_arena_destroy(&a);

	kvc_new_arena(&a, 8, BS, 5);
	for (i = 0; i < 5; i++)
		kvc_new_session(&a, i, 0);
	CU_ASSERT_EQUAL(a.nslots, 5);
	T_ERR_UNCHANGED(&a, kvc_session_create(&a, 0, 0, &id), ENOSPC);
	kvc_arena_destroy(&a);
}

/* -ENOMEM at each allocation of a create that grows the table. */
static void test_create_enomem(void)
{
	struct kvc_arena a;
	u64 id = 0;
	u32 i;
	unsigned long before, calls;
	long k;

	kvc_new_arena(&a, 8, BS, 64);
	for (i = 0; i < 16; i++)
		kvc_new_session(&a, i, 0);
	/* Count the allocations of a growing create. */
	before = kvc_calloc_calls();
	id = kvc_new_session(&a, 16, 0);
	calls = kvc_calloc_calls() - before;
	CU_ASSERT(calls >= 2);	/* today: slot[], free_slots[], session */
	T_OK(kvc_session_end(&a, id, 0, &i));
	kvc_arena_destroy(&a);

	for (k = 0; k < (long)calls; k++) {
		kvc_new_arena(&a, 8, BS, 64);
		for (i = 0; i < 16; i++)
			kvc_new_session(&a, i, 0);
		id = 4242;
		kvc_fail_calloc(k);
		T_ERR(kvc_session_create(&a, 16, 0, &id), ENOMEM);
		kvc_fail_calloc(-1);
		CU_ASSERT_EQUAL(id, 4242);
		CU_ASSERT_EQUAL(a.nsessions, 16);
		CU_ASSERT_EQUAL(a.slots_used, 16);
		T_CHECK(&a);
		/* And the arena still works. */
		for (i = 16; i < 40; i++)
			kvc_new_session(&a, i, 0);
		T_CHECK(&a);
		kvc_arena_destroy(&a);
	}

	/* Without growth only the session itself is allocated. */
	kvc_new_arena(&a, 8, BS, 4);
	kvc_new_session(&a, 0, 0);
	kvc_fail_calloc(0);
	T_ERR_UNCHANGED(&a, kvc_session_create(&a, 1, 0, &id), ENOMEM);
	kvc_arena_destroy(&a);
}

static void test_next_iterates_live_in_slot_order(void)
{
	enum { N = 40 };
	struct kvc_arena a;
	struct kvc_session *s;
	u64 ids[N];
	u32 i, cursor = 0, count = 0, released, last_slot = 0;

	kvc_new_arena(&a, 8, BS, N);
	CU_ASSERT_PTR_NULL(kvc_session_next(&a, &cursor));
	for (i = 0; i < N; i++)
		ids[i] = kvc_new_session(&a, i, 0);
	for (i = 0; i < N; i += 3)
		T_OK(kvc_session_end(&a, ids[i], 0, &released));
	cursor = 0;
	while ((s = kvc_session_next(&a, &cursor))) {
		u32 slot = s->id & KVC_SLOT_MASK;

		CU_ASSERT(slot > last_slot);
		last_slot = slot;
		CU_ASSERT_NOT_EQUAL(s->cookie % 3, 0);
		CU_ASSERT_EQUAL(s->id, ids[s->cookie]);
		count++;
	}
	CU_ASSERT_EQUAL(count, a.nsessions);
	CU_ASSERT_EQUAL(count, N - (N + 2) / 3);
	/* Exhausted cursors stay exhausted. */
	CU_ASSERT_PTR_NULL(kvc_session_next(&a, &cursor));
	/* Ending everything leaves nothing to iterate. */
	for (i = 0; i < N; i++)
		if (i % 3)
			T_OK(kvc_session_end(&a, ids[i], 0, &released));
	cursor = 0;
	CU_ASSERT_PTR_NULL(kvc_session_next(&a, &cursor));
	kvc_arena_destroy(&a);
}

/* ---- state machine ---- */

static void test_every_transition(void)
{
	struct kvc_arena a;
	u64 id;
	u32 f, t, released;

	kvc_new_arena(&a, 8, BS, 4);
	for (f = 0; f < 4; f++) {
		for (t = 0; t < 4; t++) {
			u32 from = live_states[f], to = live_states[t];
			u64 now = 1000;
			struct kva_session_info info;

			id = kvc_new_session(&a, 0, now);
			if (from != KVA_STATE_IDLE)
				kvc_state_ok(&a, id, from, now += 10);
			info = kvc_info_ok(&a, id, now);
			CU_ASSERT_EQUAL(info.state, from);
			if (from == to) {
				T_ERR_UNCHANGED(&a, kvc_session_set_state(&a,
						id, to, 0, 0, now + 5,
						&released), EALREADY);
			} else {
				u64 before = info.transitions;

				kvc_state_ok(&a, id, to, now + 5);
				info = kvc_info_ok(&a, id, now + 5);
				CU_ASSERT_EQUAL(info.state, to);
				CU_ASSERT_EQUAL(info.transitions, before + 1);
				CU_ASSERT_EQUAL(info.state_since_ns, now + 5);
			}
			T_CHECK(&a);
			/* And ENDED from every state. */
			T_OK(kvc_session_set_state(&a, id, KVA_STATE_ENDED, 0,
						   0, now + 9, &released));
			CU_ASSERT_EQUAL(released, 0);
			CU_ASSERT_PTR_NULL(kvc_session_find(&a, id));
			T_CHECK(&a);
		}
	}
	CU_ASSERT_EQUAL(a.nsessions, 0);
	CU_ASSERT_EQUAL(a.sessions_ended, 16);
	kvc_arena_destroy(&a);
}

static void test_set_state_rejects(void)
{
	struct kvc_arena a;
	u64 id;
	u32 released, i;
	static const u32 bad_states[] = {
		KVC_STATE_COUNT, KVC_STATE_COUNT + 1, 0x80000000u, UINT32_MAX,
	};

	kvc_new_arena(&a, 8, BS, 4);
	id = kvc_new_session(&a, 0, 0);
	kvc_alloc_ok(&a, id, 2, 0, NULL);
	for (i = 0; i < sizeof(bad_states) / sizeof(bad_states[0]); i++) {
		released = 99;
		T_ERR_UNCHANGED(&a, kvc_session_set_state(&a, id,
				bad_states[i], 0, 0, 10, &released), EINVAL);
		CU_ASSERT_EQUAL(released, 0);
	}
	/* Tool fields belong to TOOL_WAIT only, ENDED included. */
	for (i = 0; i <= KVA_STATE_ENDED; i++) {
		if (i == KVA_STATE_TOOL_WAIT)
			continue;
		T_ERR_UNCHANGED(&a, kvc_session_set_state(&a, id, i, 1, 0, 10,
							  &released), EINVAL);
		T_ERR_UNCHANGED(&a, kvc_session_set_state(&a, id, i, 0, 1, 10,
							  &released), EINVAL);
		T_ERR_UNCHANGED(&a, kvc_session_set_state(&a, id, i,
				UINT32_MAX, UINT64_MAX, 10, &released), EINVAL);
	}
	/* Unknown session: ENOENT, even with otherwise bad arguments. */
	released = 99;
	T_ERR_UNCHANGED(&a, kvc_session_set_state(&a, id + 1, KVA_STATE_DECODE,
						  0, 0, 10, &released), ENOENT);
	CU_ASSERT_EQUAL(released, 0);
	T_ERR_UNCHANGED(&a, kvc_session_set_state(&a, 0, UINT32_MAX, 1, 1, 10,
						  &released), ENOENT);
	CU_ASSERT_EQUAL(kvc_must_find(&a, id)->nheld, 2);
	kvc_arena_destroy(&a);
}

static void test_tool_fields(void)
{
	struct kvc_arena a;
	struct kva_session_info info;
	u64 id;
	u32 released;

	kvc_new_arena(&a, 8, BS, 4);
	id = kvc_new_session(&a, 0, 0);
	T_OK(kvc_session_set_state(&a, id, KVA_STATE_TOOL_WAIT, 7,
				   2500000, 10, &released));
	info = kvc_info_ok(&a, id, 20);
	CU_ASSERT_EQUAL(info.state, KVA_STATE_TOOL_WAIT);
	CU_ASSERT_EQUAL(info.tool_class, 7);
	CU_ASSERT_EQUAL(info.expected_wait_us, 2500000);
	/* Same state again, other fields: EALREADY, fields kept. */
	T_ERR_UNCHANGED(&a, kvc_session_set_state(&a, id, KVA_STATE_TOOL_WAIT,
						  8, 1, 30, &released),
			EALREADY);
	info = kvc_info_ok(&a, id, 30);
	CU_ASSERT_EQUAL(info.tool_class, 7);
	CU_ASSERT_EQUAL(info.expected_wait_us, 2500000);
	/* Leaving TOOL_WAIT clears them. */
	kvc_state_ok(&a, id, KVA_STATE_PREFILL, 40);
	info = kvc_info_ok(&a, id, 40);
	CU_ASSERT_EQUAL(info.tool_class, 0);
	CU_ASSERT_EQUAL(info.expected_wait_us, 0);
	/* Zero fields in TOOL_WAIT are fine, and extreme ones too. */
	kvc_state_ok(&a, id, KVA_STATE_TOOL_WAIT, 50);
	kvc_state_ok(&a, id, KVA_STATE_DECODE, 60);
	T_OK(kvc_session_set_state(&a, id, KVA_STATE_TOOL_WAIT, UINT32_MAX,
				   UINT64_MAX, 70, &released));
	info = kvc_info_ok(&a, id, 70);
	CU_ASSERT_EQUAL(info.tool_class, UINT32_MAX);
	CU_ASSERT_EQUAL(info.expected_wait_us, UINT64_MAX);
	CU_ASSERT_EQUAL(info.transitions, 5);
	kvc_arena_destroy(&a);
}

/* ENDED through set_state releases blocks nobody else holds. */
static void test_ended_via_set_state_releases(void)
{
	struct kvc_arena a;
	u64 s1, s2;
	u32 ids[5], released = 0, nfree;

	kvc_new_arena(&a, 8, BS, 4);
	s1 = kvc_new_session(&a, 1, 0);
	s2 = kvc_new_session(&a, 2, 0);
	kvc_alloc_ok(&a, s1, 5, 0, ids);
	T_OK(kvc_blocks_share(&a, s2, 2, ids + 1, 0));
	kvc_state_ok(&a, s1, KVA_STATE_DECODE, 10);
	nfree = a.pool.nfree;
	T_OK(kvc_session_set_state(&a, s1, KVA_STATE_ENDED, 0, 0, 20,
				   &released));
	CU_ASSERT_EQUAL(released, 3);
	CU_ASSERT_EQUAL(a.pool.nfree, nfree + 3);
	CU_ASSERT_PTR_NULL(kvc_session_find(&a, s1));
	CU_ASSERT_EQUAL(a.pool.refcnt[ids[1]], 1);
	CU_ASSERT_EQUAL(a.pool.refcnt[ids[2]], 1);
	CU_ASSERT_EQUAL(a.pool.refcnt[ids[0]], 0);
	CU_ASSERT_EQUAL(a.sessions_ended, 1);
	T_CHECK(&a);
	T_OK(kvc_session_set_state(&a, s2, KVA_STATE_ENDED, 0, 0, 30,
				   &released));
	CU_ASSERT_EQUAL(released, 2);
	CU_ASSERT_EQUAL(a.pool.nfree, 8);
	T_CHECK(&a);
	kvc_arena_destroy(&a);
}

/* ---- time per state and transitions ---- */

static void test_time_per_state(void)
{
	struct kvc_arena a;
	struct kva_session_info info;
	u64 id;
	u32 i;
	u64 sum = 0;

	kvc_new_arena(&a, 8, BS, 4);
	id = kvc_new_session(&a, 0, 1000);
	kvc_state_ok(&a, id, KVA_STATE_PREFILL, 1500);
	kvc_state_ok(&a, id, KVA_STATE_DECODE, 4000);
	kvc_state_ok(&a, id, KVA_STATE_TOOL_WAIT, 10000);
	kvc_state_ok(&a, id, KVA_STATE_IDLE, 10001);
	kvc_state_ok(&a, id, KVA_STATE_DECODE, 10001);	/* zero-length */
	kvc_state_ok(&a, id, KVA_STATE_IDLE, 12001);
	info = kvc_info_ok(&a, id, 20000);
	CU_ASSERT_EQUAL(info.state, KVA_STATE_IDLE);
	CU_ASSERT_EQUAL(info.transitions, 6);
	CU_ASSERT_EQUAL(info.state_since_ns, 12001);
	CU_ASSERT_EQUAL(info.created_ns, 1000);
	CU_ASSERT_EQUAL(info.state_ns[KVA_STATE_IDLE], 500 + 7999);
	CU_ASSERT_EQUAL(info.state_ns[KVA_STATE_PREFILL], 2500);
	CU_ASSERT_EQUAL(info.state_ns[KVA_STATE_DECODE], 6000 + 2000);
	CU_ASSERT_EQUAL(info.state_ns[KVA_STATE_TOOL_WAIT], 1);
	CU_ASSERT_EQUAL(info.state_ns[KVA_STATE_ENDED], 0);
	for (i = 0; i < KVC_STATE_COUNT; i++)
		sum += info.state_ns[i];
	CU_ASSERT_EQUAL(sum, 20000 - 1000);

	/* info is a read: the open interval grows with now, nothing else. */
	info = kvc_info_ok(&a, id, 30000);
	CU_ASSERT_EQUAL(info.state_ns[KVA_STATE_IDLE], 500 + 7999 + 10000);
	CU_ASSERT_EQUAL(info.state_ns[KVA_STATE_DECODE], 8000);
	CU_ASSERT_EQUAL(info.transitions, 6);
	info = kvc_info_ok(&a, id, 25000);	/* an earlier now */
	CU_ASSERT_EQUAL(info.state_ns[KVA_STATE_IDLE], 500 + 7999 + 5000);
	kvc_arena_destroy(&a);
}

/* A now earlier than the last event must not wrap any counter. */
static void test_time_going_backwards(void)
{
	struct kvc_arena a;
	struct kva_session_info info;
	u64 id;
	u32 i;

	kvc_new_arena(&a, 8, BS, 4);
	id = kvc_new_session(&a, 0, 1000000);
	kvc_alloc_ok(&a, id, 3, 1000000, NULL);
	kvc_state_ok(&a, id, KVA_STATE_PREFILL, 500);
	info = kvc_info_ok(&a, id, 400);
	for (i = 0; i < KVC_STATE_COUNT; i++)
		CU_ASSERT(info.state_ns[i] < 1000000);
	CU_ASSERT(info.idle_block_us < 1000);
	kvc_state_ok(&a, id, KVA_STATE_IDLE, 2000000);
	info = kvc_info_ok(&a, id, 1999999);
	CU_ASSERT(info.idle_block_us < 1000);
	for (i = 0; i < KVC_STATE_COUNT; i++)
		CU_ASSERT(info.state_ns[i] < 2000000);
	T_CHECK(&a);
	kvc_arena_destroy(&a);
}

/* ---- idle block-time ---- */

static u64 idle_us(struct kvc_arena *a, u64 id, u64 now)
{
	return kvc_info_ok(a, id, now).idle_block_us;
}

/* Blocks x time, counted in IDLE and TOOL_WAIT only. */
static void test_idle_only_in_idle_states(void)
{
	struct kvc_arena a;
	u64 id;
	u32 released;

	kvc_new_arena(&a, 64, BS, 4);
	id = kvc_new_session(&a, 0, 0);
	kvc_alloc_ok(&a, id, 4, 0, NULL);
	CU_ASSERT_EQUAL(idle_us(&a, id, 10 * US), 40);
	kvc_state_ok(&a, id, KVA_STATE_PREFILL, 10 * US);
	CU_ASSERT_EQUAL(idle_us(&a, id, 30 * US), 40);
	kvc_state_ok(&a, id, KVA_STATE_DECODE, 30 * US);
	kvc_alloc_ok(&a, id, 6, 40 * US, NULL);		/* busy: not idle */
	CU_ASSERT_EQUAL(idle_us(&a, id, 50 * US), 40);
	T_OK(kvc_session_set_state(&a, id, KVA_STATE_TOOL_WAIT, 3, 100,
				   50 * US, &released));
	CU_ASSERT_EQUAL(idle_us(&a, id, 60 * US), 40 + 10 * 10);
	kvc_state_ok(&a, id, KVA_STATE_IDLE, 60 * US);
	CU_ASSERT_EQUAL(idle_us(&a, id, 70 * US), 140 + 10 * 10);
	kvc_state_ok(&a, id, KVA_STATE_DECODE, 70 * US);
	CU_ASSERT_EQUAL(idle_us(&a, id, 1000 * US), 240);
	kvc_arena_destroy(&a);
}

/* Changes of the block count mid-idle split the integral exactly. */
static void test_idle_with_block_changes(void)
{
	struct kvc_arena a;
	u64 s1, s2;
	u32 ids[10], released;
	u64 t = 0, want = 0;

	kvc_new_arena(&a, 64, BS, 4);
	s1 = kvc_new_session(&a, 0, 0);
	s2 = kvc_new_session(&a, 0, 0);
	kvc_alloc_ok(&a, s1, 10, t, ids);		/* s1: 10 blocks */
	t += 7 * US;
	want += 10 * 7;
	T_OK(kvc_blocks_free(&a, s1, 3, ids, t, &released));	/* 7 left */
	t += 11 * US;
	want += 7 * 11;
	T_OK(kvc_blocks_share(&a, s2, 2, ids + 3, t));	/* s1 unchanged */
	t += 5 * US;
	want += 7 * 5;
	kvc_alloc_ok(&a, s1, 20, t, NULL);		/* 27 */
	t += 2 * US;
	want += 27 * 2;
	CU_ASSERT_EQUAL(idle_us(&a, s1, t), want);
	/* s2 held 2 blocks for 7 us so far. */
	CU_ASSERT_EQUAL(idle_us(&a, s2, t), 2 * 7);
	/* Ending moves the total into the arena's counter. */
	t += 3 * US;
	want += 27 * 3;
	T_OK(kvc_session_end(&a, s1, t, &released));
	CU_ASSERT_EQUAL(a.ended_idle_block_us, want);
	t += 1 * US;
	T_OK(kvc_session_set_state(&a, s2, KVA_STATE_ENDED, 0, 0, t,
				   &released));
	CU_ASSERT_EQUAL(a.ended_idle_block_us, want + 2 * 11);
	CU_ASSERT_EQUAL(a.sessions_ended, 2);
	T_CHECK(&a);
	kvc_arena_destroy(&a);
}

/* Sub-microsecond steps within one idle stretch: nothing is lost. */
static void test_idle_carry_small_steps(void)
{
	struct kvc_arena a;
	u64 id;
	u32 i;
	u64 t = 0;

	kvc_new_arena(&a, 64, BS, 4);
	id = kvc_new_session(&a, 0, 0);
	kvc_alloc_ok(&a, id, 3, 0, NULL);
	for (i = 0; i < 10000; i++) {
		t += 300;
		(void)idle_us(&a, id, t);	/* settles each time */
	}
	CU_ASSERT_EQUAL(idle_us(&a, id, t), 3 * 3000);
	/* IDLE <-> TOOL_WAIT every 700 ns: both idle, still exact. */
	for (i = 0; i < 10000; i++) {
		t += 700;
		kvc_state_ok(&a, id, i % 2 ? KVA_STATE_IDLE :
			     KVA_STATE_TOOL_WAIT, t);
	}
	CU_ASSERT_EQUAL(idle_us(&a, id, t), 3 * 3000 + 3 * 7000);
	kvc_arena_destroy(&a);
}

/*
 * BUG: the sub-microsecond remainder of each idle stretch is dropped when
 * the session goes busy.  1000 cycles of 1.5 us IDLE + 0.5 us PREFILL with
 * one block are 1500 block-us of idle time; kvc_session_settle() counts 1000.
 */
static void test_idle_remainder_kept_across_busy(void)
{
	struct kvc_arena a;
	struct kva_session_info info;
	u64 id;
	u32 i;
	u64 t = 0;

	kvc_new_arena(&a, 64, BS, 4);
	id = kvc_new_session(&a, 0, 0);
	kvc_alloc_ok(&a, id, 1, 0, NULL);
	for (i = 0; i < 1000; i++) {
		t += 1500;
		kvc_state_ok(&a, id, KVA_STATE_PREFILL, t);
		t += 500;
		kvc_state_ok(&a, id, KVA_STATE_IDLE, t);
	}
	info = kvc_info_ok(&a, id, t);
	CU_ASSERT_EQUAL(info.state_ns[KVA_STATE_IDLE], 1000 * 1500);
	CU_ASSERT_EQUAL(info.idle_block_us, 1500);
	if (info.idle_block_us != 1500)
		fprintf(stderr, "\n  idle_block_us = %llu, want 1500 "
			"(1000 x 1.5 us idle, 1 block)\n",
			(unsigned long long)info.idle_block_us);
	kvc_arena_destroy(&a);
}

/*
 * BUG: a carried remainder is charged at the block count after a change.
 * 0 blocks for 999 ns, then 1000 blocks for 1 ns: 1000 block-ns = 1 block-us.
 * kvc_session_settle() reports 1000 block-us (the 999 ns at 1000 blocks).
 */
static void test_idle_remainder_at_old_count_alloc(void)
{
	struct kvc_arena a;
	u64 got;
	u64 id;

	kvc_new_arena(&a, 1024, BS, 4);
	id = kvc_new_session(&a, 0, 0);
	kvc_alloc_ok(&a, id, 1000, 999, NULL);
	got = idle_us(&a, id, 1000);
	CU_ASSERT_EQUAL(got, 1);
	if (got != 1)
		fprintf(stderr, "\n  idle_block_us = %llu, want 1\n",
			(unsigned long long)got);
	kvc_arena_destroy(&a);
}

/* BUG, the mirror image: 1000 blocks for 999 ns, then freed = 999. */
static void test_idle_remainder_at_old_count_free(void)
{
	struct kvc_arena a;
	u64 id;
	u32 ids[1000], released;
	u64 got;

	kvc_new_arena(&a, 1024, BS, 4);
	id = kvc_new_session(&a, 0, 0);
	kvc_alloc_ok(&a, id, 1000, 0, ids);
	T_OK(kvc_blocks_free(&a, id, 1000, ids, 999, &released));
	CU_ASSERT_EQUAL(released, 1000);
	got = idle_us(&a, id, 1000 * US);
	CU_ASSERT_EQUAL(got, 999);
	if (got != 999)
		fprintf(stderr, "\n  idle_block_us = %llu, want 999\n",
			(unsigned long long)got);
	kvc_arena_destroy(&a);
}

/* ---- byte-seconds ---- */

static u64 byte_sec_ref(u64 us, u32 bs)
{
	return (u64)((unsigned __int128)us * bs / 1000000);
}

static bool byte_sec_fits(u64 us, u32 bs)
{
	return (unsigned __int128)us * bs / 1000000 <= UINT64_MAX;
}

static void test_idle_byte_sec_exact(void)
{
	static const struct { u64 us; u32 bs; u64 want; } cases[] = {
		{ 0, 4096, 0 },
		{ 999999, 1, 0 },
		{ 1000000, 1, 1 },
		{ 1999999, 1, 1 },
		{ 1, 1000000, 1 },
		{ 244, 4096, 0 },		/* 0.999424 */
		{ 245, 4096, 1 },		/* 1.003520 */
		{ 1000000, 2097152, 2097152 },
		{ 1500000, 4096, 6144 },
		{ UINT64_MAX, 1, UINT64_MAX / 1000000 },
		{ UINT64_MAX, 1000000, UINT64_MAX },
		{ UINT64_MAX / 2, 2000000, UINT64_MAX - 1 },
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		CU_ASSERT_EQUAL(kvc_idle_byte_sec(cases[i].us, cases[i].bs),
				cases[i].want);
		CU_ASSERT_EQUAL(byte_sec_ref(cases[i].us, cases[i].bs),
				cases[i].want);
	}
}

/* Wherever the true result fits in 64 bits, no intermediate overflows. */
static void test_idle_byte_sec_no_overflow(void)
{
	static const u32 sizes[] = {
		1, 7, 4096, 65536, 999999, 1000000, 1000001, 2097152,
		0x7fffffffu, UINT32_MAX,
	};
	u64 x = 0x9e3779b97f4a7c15ull;
	size_t i;
	int n;

	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		u32 bs = sizes[i];
		/* The largest idle_block_us whose byte-seconds still fit. */
		u64 top = (u64)(((unsigned __int128)UINT64_MAX * 1000000 +
				 999999) / bs);

		if ((unsigned __int128)UINT64_MAX * 1000000 / bs > UINT64_MAX)
			top = UINT64_MAX;
		while (!byte_sec_fits(top, bs))
			top--;
		CU_ASSERT_EQUAL(kvc_idle_byte_sec(top, bs),
				byte_sec_ref(top, bs));
		CU_ASSERT_EQUAL(kvc_idle_byte_sec(top - 1, bs),
				byte_sec_ref(top - 1, bs));
		for (n = 0; n < 2000; n++) {
			u64 us;

			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			us = x % top;
			CU_ASSERT_EQUAL(kvc_idle_byte_sec(us, bs),
					byte_sec_ref(us, bs));
		}
	}
}

/* info reports idle_byte_sec with the arena's block size. */
static void test_info_byte_sec(void)
{
	struct kvc_arena a;
	struct kva_session_info info;
	u64 id;

	kvc_new_arena(&a, 64, 2097152, 4);
	id = kvc_new_session(&a, 0, 0);
	kvc_alloc_ok(&a, id, 3, 0, NULL);
	info = kvc_info_ok(&a, id, 2500000 * US);	/* 2.5 s x 3 blocks */
	CU_ASSERT_EQUAL(info.idle_block_us, 7500000);
	CU_ASSERT_EQUAL(info.idle_byte_sec, 7500000ull * 2097152 / 1000000);
	CU_ASSERT_EQUAL(info.blocks_held, 3);
	kvc_arena_destroy(&a);
}

/* Years of idle time on a large arena: the counters do not wrap. */
static void test_idle_large_values(void)
{
	struct kvc_arena a;
	struct kva_session_info info;
	u64 year = 365ull * 24 * 3600 * 1000000000ull, want;
	u64 id;

	kvc_new_arena(&a, 4096, 2097152, 4);
	id = kvc_new_session(&a, 0, 0);
	kvc_alloc_ok(&a, id, 1024, 0, NULL);
	kvc_alloc_ok(&a, id, 1024, 0, NULL);
	info = kvc_info_ok(&a, id, 100 * year);
	want = 2048 * (100 * year / US);
	CU_ASSERT_EQUAL(info.idle_block_us, want);
	CU_ASSERT_EQUAL(info.idle_byte_sec, byte_sec_ref(want, 2097152));
	CU_ASSERT_EQUAL(info.state_ns[KVA_STATE_IDLE], 100 * year);
	kvc_arena_destroy(&a);
}

static void test_info_enoent(void)
{
	struct kvc_arena a;
	struct kva_session_info info;
	u64 id;
	u32 released;

	kvc_new_arena(&a, 8, BS, 4);
	T_ERR(kvc_session_info(&a, 1, 0, &info), ENOENT);
	id = kvc_new_session(&a, 0, 0);
	T_ERR(kvc_session_info(&a, 0, 0, &info), ENOENT);
	T_ERR(kvc_session_info(&a, id + 1, 0, &info), ENOENT);
	T_OK(kvc_session_end(&a, id, 0, &released));
	T_ERR(kvc_session_info(&a, id, 0, &info), ENOENT);
	kvc_arena_destroy(&a);
}

/*
 * A tight create/end loop never sees an id again (issue 11, finding 6;
 * 15 bits of generation gave the 32769th session the first one's id): a
 * million sessions through one slot, each id above the last (so none
 * repeats), and every stale id misses although its slot is taken again.
 */
static void test_ids_not_reused_in_tight_loop(void)
{
	enum { N = 1000000 };
	struct kva_session_info info;
	struct kvc_arena a;
	u64 id, prev = 0, first = 0;
	u32 i, released, bad = 0;

	kvc_new_arena(&a, 1, BS, 1);
	for (i = 0; i < N; i++) {
		id = kvc_new_session(&a, i, i);
		bad += id <= prev || id >= (1ull << 63) ||
		       (id & KVC_SLOT_MASK) != 1;
		if (prev)
			bad += kvc_session_info(&a, prev, i, &info) != -ENOENT ||
			       kvc_session_find(&a, first) != NULL;
		if (!first)
			first = id;
		prev = id;
		T_OK(kvc_session_end(&a, id, i, &released));
	}
	CU_ASSERT_EQUAL(bad, 0);
	CU_ASSERT_EQUAL(a.sessions_ended, N);
	CU_ASSERT_EQUAL(a.next_serial, KVC_SERIAL_FIRST + N);
	T_CHECK(&a);
	kvc_arena_destroy(&a);
}

/* When the serials are spent, create says ENOSPC rather than reuse one. */
static void test_serials_spent_enospc(void)
{
	struct kvc_arena a;
	u64 id, last = 0, stale;
	u32 released;

	kvc_new_arena(&a, 1, BS, 4);
	stale = kvc_new_session(&a, 0, 0);
	T_OK(kvc_session_end(&a, stale, 0, &released));
	a.next_serial = KVA_SESSION_SERIAL_MAX - 1;
	last = kvc_new_session(&a, 1, 1);
	CU_ASSERT_EQUAL(last >> KVC_SLOT_BITS, KVA_SESSION_SERIAL_MAX - 1);
	CU_ASSERT(last < (1ull << 63));
	CU_ASSERT_PTR_NULL(kvc_session_find(&a, stale));
	id = 77;
	T_ERR_UNCHANGED(&a, kvc_session_create(&a, 2, 2, &id), ENOSPC);
	CU_ASSERT_EQUAL(id, 77);
	/* Ending sessions frees slots, not ids. */
	T_OK(kvc_session_end(&a, last, 3, &released));
	T_ERR_UNCHANGED(&a, kvc_session_create(&a, 2, 4, &id), ENOSPC);
	CU_ASSERT_EQUAL(a.nsessions, 0);
	kvc_arena_destroy(&a);
}

/* Blocks per arena stay below KVA_MAX_BLOCKS: the pool fits kvmalloc. */
static void test_create_args_block_cap(void)
{
	struct kva_arena_create c = {
		.size = sizeof(c), .block_size = KVA_BLOCK_MIN,
		.numa_node = KVA_NUMA_ANY,
	};
	u64 per_page = KVA_PAGE_SIZE / KVA_BLOCK_MIN;

	c.bytes = (u64)KVA_MAX_BLOCKS / per_page * KVA_PAGE_SIZE;
	T_ERR(kvc_check_arena_create(&c, ~0ULL), E2BIG);
	c.bytes -= KVA_PAGE_SIZE;
	T_OK(kvc_check_arena_create(&c, ~0ULL));
	c.block_size = KVA_BLOCK_MAX;
	c.bytes = 1ULL << 40;
	T_OK(kvc_check_arena_create(&c, ~0ULL));
}

static const CU_TestInfo session_tests[] = {
	{ "ids not reused in a tight loop", test_ids_not_reused_in_tight_loop },
	{ "serials spent -> -ENOSPC", test_serials_spent_enospc },
	{ "create args: block cap", test_create_args_block_cap },
	{ "init rejects bad parameters", test_init_rejects_bad_params },
	{ "init -ENOMEM", test_init_enomem },
	{ "create starts IDLE", test_create_starts_idle },
	{ "ids unique, nonzero, positive", test_ids_unique },
	{ "find rejects foreign ids", test_find_rejects_foreign_ids },
	{ "end", test_end },
	{ "stale id after slot reuse", test_stale_id_after_slot_reuse },
	{ "2048 serials distinct", test_serials_distinct },
	{ "max_sessions -> -ENOSPC", test_max_sessions_enospc },
	{ "slot table growth 16/32/64/max", test_growth },
	{ "growth capped at odd max", test_growth_capped_odd_max },
	{ "create -ENOMEM at every allocation", test_create_enomem },
	{ "next iterates live sessions", test_next_iterates_live_in_slot_order },
	{ "every state transition", test_every_transition },
	{ "set_state rejects", test_set_state_rejects },
	{ "tool fields only in TOOL_WAIT", test_tool_fields },
	{ "SET_STATE flags: KEEP and TIER", test_set_state_flags },
	{ "ENDED via set_state releases", test_ended_via_set_state_releases },
	{ "time per state, transitions", test_time_per_state },
	{ "time going backwards", test_time_going_backwards },
	{ "idle only in IDLE/TOOL_WAIT", test_idle_only_in_idle_states },
	{ "idle with block changes", test_idle_with_block_changes },
	{ "idle carry, small steps", test_idle_carry_small_steps },
	{ "idle remainder kept across busy (BUG)",
	  test_idle_remainder_kept_across_busy },
	{ "idle remainder at old count, alloc (BUG)",
	  test_idle_remainder_at_old_count_alloc },
	{ "idle remainder at old count, free (BUG)",
	  test_idle_remainder_at_old_count_free },
	{ "idle_byte_sec exact", test_idle_byte_sec_exact },
	{ "idle_byte_sec no overflow", test_idle_byte_sec_no_overflow },
	{ "info idle_byte_sec", test_info_byte_sec },
	{ "idle large values", test_idle_large_values },
	{ "info -ENOENT", test_info_enoent },
	CU_TEST_INFO_NULL,
};

int kvc_test_register_session(void)
{
	return kvc_test_add_suite("session", session_tests);
}
