// SPDX-License-Identifier: GPL-2.0
/*
 * kmod/core/kvc_policy.c: watermarks and their defaults, the pressure
 * trigger (one event per episode, re-armed by ack or by the high
 * watermark), and victim ranking under toolwait, lru and ttl, ties
 * included.  Time is explicit: every call gets its `now`.
 */
#include "kvc_test.h"

#define BS	4096U
#define MS	1000000ULL

static void test_policy_defaults_and_errors(void)
{
	struct kvc_arena a;

	kvc_new_arena(&a, 80, BS, 16);
	CU_ASSERT_EQUAL(a.policy, KVA_POLICY_TOOLWAIT);
	CU_ASSERT_EQUAL(a.low_wm, 10);
	CU_ASSERT_EQUAL(a.high_wm, 20);
	CU_ASSERT_EQUAL(a.ttl_ms, KVA_TTL_DEFAULT_MS);
	CU_ASSERT_EQUAL(kvc_policy_set(&a, KVA_POLICY_COUNT, 0, 0, 0), -EINVAL);
	CU_ASSERT_EQUAL(kvc_policy_set(&a, KVA_POLICY_LRU, 30, 20, 0), -EINVAL);
	CU_ASSERT_EQUAL(kvc_policy_set(&a, KVA_POLICY_LRU, 10, 81, 0), -EINVAL);
	CU_ASSERT_EQUAL(a.policy, KVA_POLICY_TOOLWAIT);	/* unchanged */
	CU_ASSERT_EQUAL(kvc_policy_set(&a, KVA_POLICY_TTL, 50, 0, 7), 0);
	CU_ASSERT_EQUAL(a.high_wm, 80);			/* 2 x 50, capped */
	CU_ASSERT_EQUAL(a.ttl_ms, 7);
	kvc_arena_destroy(&a);
}

static void test_pressure_trigger(void)
{
	struct kvc_arena a;
	u32 s, ids[80], done;

	kvc_new_arena(&a, 80, BS, 16);		/* low 10, high 20 */
	s = kvc_new_session(&a, 0, 0);
	kvc_alloc_ok(&a, s, 60, 1, ids);	/* 20 free */
	CU_ASSERT_FALSE(kvc_pressure_check(&a, false));
	kvc_alloc_ok(&a, s, 11, 2, ids + 60);	/* 9 free: crossed */
	CU_ASSERT_TRUE(kvc_pressure_check(&a, false));
	CU_ASSERT_FALSE(kvc_pressure_check(&a, false));	/* once per episode */
	CU_ASSERT_FALSE(kvc_pressure_check(&a, true));
	kvc_pressure_rearm(&a, true);			/* owner acked */
	CU_ASSERT_TRUE(kvc_pressure_check(&a, false));	/* still low */
	/* Freeing to below high does not re-arm; reaching high does. */
	CU_ASSERT_EQUAL(kvc_blocks_free(&a, s, 5, ids, 3, &done), 0);
	kvc_pressure_rearm(&a, false);
	CU_ASSERT_FALSE(kvc_pressure_check(&a, true));
	CU_ASSERT_EQUAL(kvc_blocks_free(&a, s, 10, ids + 5, 4, &done), 0);
	kvc_pressure_rearm(&a, false);			/* 24 free >= 20 */
	CU_ASSERT_FALSE(kvc_pressure_check(&a, false));	/* not low */
	CU_ASSERT_TRUE(kvc_pressure_check(&a, true));	/* a failure is */
	kvc_arena_destroy(&a);
}

static u32 rank(struct kvc_arena *a, u32 policy, u64 now, u32 *ids, u32 max)
{
	struct kva_victim v[16];
	u32 n = kvc_rank_victims(a, policy, now, v, max), i;

	for (i = 0; i < n; i++) {
		ids[i] = v[i].session_id;
		CU_ASSERT_EQUAL(v[i].blocks_held,
				kvc_must_find(a, v[i].session_id)->nheld);
	}
	return n;
}

/*
 * Sessions:  A TOOL_WAIT 4 blocks, expects 1000 ms;  B TOOL_WAIT 1 block,
 * expects 3000 ms;  C IDLE 2 blocks since t=0;  D IDLE 9 blocks since
 * t=50 ms;  E DECODE 8 blocks;  F PREFILL 8 blocks;  G IDLE no blocks.
 */
static void setup(struct kvc_arena *a, u32 *id)
{
	u32 r;

	kvc_new_arena(a, 64, BS, 16);
	for (r = 0; r < 7; r++)
		id[r] = kvc_new_session(a, r, 0);
	kvc_alloc_ok(a, id[0], 4, 0, NULL);
	kvc_alloc_ok(a, id[1], 1, 0, NULL);
	kvc_alloc_ok(a, id[2], 2, 0, NULL);
	kvc_alloc_ok(a, id[3], 9, 50 * MS, NULL);
	kvc_alloc_ok(a, id[4], 8, 0, NULL);
	kvc_alloc_ok(a, id[5], 8, 0, NULL);
	CU_ASSERT_EQUAL(kvc_session_set_state(a, id[0], KVA_STATE_TOOL_WAIT, 1,
					      1000000, 10 * MS, &r), 0);
	CU_ASSERT_EQUAL(kvc_session_set_state(a, id[1], KVA_STATE_TOOL_WAIT, 2,
					      3000000, 20 * MS, &r), 0);
	kvc_state_ok(a, id[4], KVA_STATE_DECODE, 30 * MS);
	kvc_state_ok(a, id[5], KVA_STATE_PREFILL, 30 * MS);
}

static void test_rank_toolwait(void)
{
	struct kvc_arena a;
	u32 id[7], got[16];

	setup(&a, id);
	/* At 100 ms: A has 910 ms x 4 left = 3640, B 2920 ms x 1 = 2920. */
	CU_ASSERT_EQUAL_FATAL(rank(&a, KVA_POLICY_TOOLWAIT, 100 * MS, got, 16), 4);
	CU_ASSERT_EQUAL(got[0], id[0]);
	CU_ASSERT_EQUAL(got[1], id[1]);
	CU_ASSERT_EQUAL(got[2], id[2]);	/* IDLE since 0 (D's alloc was at 50) */
	CU_ASSERT_EQUAL(got[3], id[3]);	/* IDLE since 0 too: tie -> lower id */
	/* At 1200 ms A has overrun (0 left): B first; still before IDLE. */
	CU_ASSERT_EQUAL(rank(&a, KVA_POLICY_TOOLWAIT, 1200 * MS, got, 16), 4);
	CU_ASSERT_EQUAL(got[0], id[1]);
	CU_ASSERT_EQUAL(got[1], id[0]);
	/* max truncates to the best. */
	CU_ASSERT_EQUAL(rank(&a, KVA_POLICY_TOOLWAIT, 100 * MS, got, 1), 1);
	CU_ASSERT_EQUAL(got[0], id[0]);
	kvc_arena_destroy(&a);
}

static void test_rank_lru(void)
{
	struct kvc_arena a;
	u32 id[7], got[16];

	setup(&a, id);
	/* Last activity: C 0, D 50, A 10, B 20 -> C, A, B, D. */
	CU_ASSERT_EQUAL_FATAL(rank(&a, KVA_POLICY_LRU, 100 * MS, got, 16), 4);
	CU_ASSERT_EQUAL(got[0], id[2]);
	CU_ASSERT_EQUAL(got[1], id[0]);
	CU_ASSERT_EQUAL(got[2], id[1]);
	CU_ASSERT_EQUAL(got[3], id[3]);
	kvc_arena_destroy(&a);
}

static void test_rank_ttl(void)
{
	struct kvc_arena a;
	u32 id[7], got[16];

	setup(&a, id);
	CU_ASSERT_EQUAL(kvc_policy_set(&a, KVA_POLICY_TTL, 0, 0, 60), 0);
	/* At 75 ms only C (75 ms) and A (65 ms) have been inactive >= 60. */
	CU_ASSERT_EQUAL_FATAL(rank(&a, KVA_POLICY_TTL, 75 * MS, got, 16), 2);
	CU_ASSERT_EQUAL(got[0], id[2]);
	CU_ASSERT_EQUAL(got[1], id[0]);
	CU_ASSERT_EQUAL(rank(&a, KVA_POLICY_TTL, 5 * MS, got, 16), 0);
	kvc_arena_destroy(&a);
}

static void test_rank_ties_and_saturation(void)
{
	struct kvc_arena a;
	u32 id[5], got[16], r, i;

	kvc_new_arena(&a, 64, BS, 16);
	for (i = 0; i < 5; i++) {
		id[i] = kvc_new_session(&a, 0, 0);
		kvc_alloc_ok(&a, id[i], 2, 0, NULL);
		CU_ASSERT_EQUAL(kvc_session_set_state(&a, id[i], KVA_STATE_TOOL_WAIT,
						      0, i == 4 ? ~0ULL : 500, 0, &r), 0);
	}
	/* Equal scores: ascending ids.  A huge expected wait saturates, first. */
	CU_ASSERT_EQUAL_FATAL(rank(&a, KVA_POLICY_TOOLWAIT, 0, got, 16), 5);
	CU_ASSERT_EQUAL(got[0], id[4]);
	for (i = 1; i < 5; i++)
		CU_ASSERT_EQUAL(got[i], id[i - 1]);
	/* A session's activity moves it in LRU but not its TOOL_WAIT rank. */
	CU_ASSERT_EQUAL(kvc_blocks_alloc(&a, id[0], 1, false, ~0U, 5 * MS, got, &r), 0);
	CU_ASSERT_EQUAL(rank(&a, KVA_POLICY_LRU, 10 * MS, got, 16), 5);
	CU_ASSERT_EQUAL(got[4], id[0]);
	kvc_arena_destroy(&a);
}

int kvc_test_register_policy(void)
{
	static const CU_TestInfo tests[] = {
		{ "policy defaults and errors", test_policy_defaults_and_errors },
		{ "pressure trigger", test_pressure_trigger },
		{ "rank toolwait", test_rank_toolwait },
		{ "rank lru", test_rank_lru },
		{ "rank ttl", test_rank_ttl },
		{ "rank ties and saturation", test_rank_ties_and_saturation },
		CU_TEST_INFO_NULL,
	};

	return kvc_test_add_suite("policy", tests);
}
