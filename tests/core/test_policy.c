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
	CU_ASSERT_EQUAL(kvc_policy_set(&a, KVC_POLICY_COUNT, 0, 0, 0), -EINVAL);
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
	u64 s;
	u32 ids[80], done;

	kvc_new_arena(&a, 80, BS, 16);		/* low 10, high 20 */
	s = kvc_new_session(&a, 0, 0);
	kvc_alloc_ok(&a, s, 60, 1, ids);	/* 20 free */
	CU_ASSERT_FALSE(kvc_pressure_check(&a, false));
	kvc_alloc_ok(&a, s, 10, 2, ids + 60);	/* 10 free: at low, not under */
	CU_ASSERT_FALSE(kvc_pressure_check(&a, false));
	kvc_alloc_ok(&a, s, 1, 2, ids + 70);	/* 9 free: crossed */
	CU_ASSERT_TRUE(kvc_pressure_check(&a, false));
	CU_ASSERT_FALSE(kvc_pressure_check(&a, false));	/* once per episode */
	CU_ASSERT_FALSE(kvc_pressure_check(&a, true));
	kvc_pressure_rearm(&a, true);			/* owner acked */
	CU_ASSERT_TRUE(kvc_pressure_check(&a, false));	/* still low */
	/* Freeing to below high does not re-arm; reaching high does. */
	CU_ASSERT_EQUAL(kvc_blocks_free(&a, s, 5, ids, 3, &done), 0);
	kvc_pressure_rearm(&a, false);
	CU_ASSERT_FALSE(kvc_pressure_check(&a, true));
	CU_ASSERT_EQUAL(kvc_blocks_free(&a, s, 5, ids + 5, 4, &done), 0);
	kvc_pressure_rearm(&a, false);			/* 19 free < 20 */
	CU_ASSERT_FALSE(kvc_pressure_check(&a, true));
	CU_ASSERT_EQUAL(kvc_blocks_free(&a, s, 1, ids + 10, 4, &done), 0);
	kvc_pressure_rearm(&a, false);			/* 20 free: high */
	CU_ASSERT_FALSE(kvc_pressure_check(&a, false));	/* not low */
	CU_ASSERT_TRUE(kvc_pressure_check(&a, true));	/* a failure is */
	kvc_arena_destroy(&a);
}

/*
 * Rank into an array of exactly max entries (ASan reports a write past
 * it), check every field of each victim against its session, and return
 * the ids in order.
 */
static u32 rank(struct kvc_arena *a, u32 policy, u64 now, u64 *ids, u32 max)
{
	struct kva_victim *v = malloc(max * sizeof(*v) + !max);
	u32 n, i;

	CU_ASSERT_PTR_NOT_NULL_FATAL(v);
	n = kvc_rank_victims(a, policy, now, v, max);
	CU_ASSERT(n <= max);
	for (i = 0; i < n && i < max; i++) {
		const struct kvc_session *s = kvc_must_find(a, v[i].session_id);

		ids[i] = v[i].session_id;
		CU_ASSERT_EQUAL(v[i].blocks_held, s->nheld);
		CU_ASSERT_EQUAL(v[i].state, s->state);
		CU_ASSERT_EQUAL(v[i].tool_class, s->tool_class);
		CU_ASSERT_EQUAL(v[i].idle_ns, now - s->last_active_ns);
	}
	free(v);
	return n;
}

/*
 * Sessions:  A TOOL_WAIT 4 blocks, expects 1000 ms;  B TOOL_WAIT 1 block,
 * expects 3000 ms;  C IDLE 2 blocks since t=0;  D IDLE 9 blocks since
 * t=50 ms;  E DECODE 8 blocks;  F PREFILL 8 blocks;  G IDLE no blocks.
 */
static void setup(struct kvc_arena *a, u64 *id)
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
	u64 id[7], got[16];

	setup(&a, id);
	/*
	 * One scale, ms until the KV is used again x blocks.  At 100 ms: A
	 * has 910 left x 4 = 3640, B 2920 x 1 = 2920; C and D have been IDLE
	 * 100 ms (D's alloc at 50 ms is activity, not a state change), so
	 * expected about as long again: D 100 x 9 = 900, C 100 x 2 = 200.
	 */
	CU_ASSERT_EQUAL_FATAL(rank(&a, KVA_POLICY_TOOLWAIT, 100 * MS, got, 16), 4);
	CU_ASSERT_EQUAL(got[0], id[0]);
	CU_ASSERT_EQUAL(got[1], id[1]);
	CU_ASSERT_EQUAL(got[2], id[3]);
	CU_ASSERT_EQUAL(got[3], id[2]);
	/*
	 * At 1200 ms A has overrun its 1000 ms: 1190 ms so far, as long
	 * again expected: 4760; B 1820 x 1; the IDLE ones 1200 ms: D 10800,
	 * C 2400.  D, A, C, B: finished conversations before a tool that
	 * returns in 1.8 s.
	 */
	CU_ASSERT_EQUAL(rank(&a, KVA_POLICY_TOOLWAIT, 1200 * MS, got, 16), 4);
	CU_ASSERT_EQUAL(got[0], id[3]);
	CU_ASSERT_EQUAL(got[1], id[0]);
	CU_ASSERT_EQUAL(got[2], id[2]);
	CU_ASSERT_EQUAL(got[3], id[1]);
	/* max truncates to the best. */
	CU_ASSERT_EQUAL(rank(&a, KVA_POLICY_TOOLWAIT, 100 * MS, got, 1), 1);
	CU_ASSERT_EQUAL(got[0], id[0]);
	/* A full array of 3: B (the worst) is the one left out. */
	CU_ASSERT_EQUAL_FATAL(rank(&a, KVA_POLICY_TOOLWAIT, 1200 * MS, got, 3), 3);
	CU_ASSERT_EQUAL(got[0], id[3]);
	CU_ASSERT_EQUAL(got[1], id[0]);
	CU_ASSERT_EQUAL(got[2], id[2]);
	CU_ASSERT_EQUAL(rank(&a, KVA_POLICY_TOOLWAIT, 100 * MS, got, 0), 0);
	kvc_arena_destroy(&a);
}

/*
 * A full array whose later candidates are better: slot order A, B, C but
 * LRU wants C, A, B.  With max 2, C arrives when [A, B] is full and must
 * evict B, the worst; a candidate no better than the worst is dropped.
 */
static void test_rank_replace_worst(void)
{
	struct kvc_arena a;
	u64 id[7], got[16];

	setup(&a, id);
	CU_ASSERT_EQUAL_FATAL(rank(&a, KVA_POLICY_LRU, 100 * MS, got, 2), 2);
	CU_ASSERT_EQUAL(got[0], id[2]);
	CU_ASSERT_EQUAL(got[1], id[0]);
	CU_ASSERT_EQUAL_FATAL(rank(&a, KVA_POLICY_LRU, 100 * MS, got, 3), 3);
	CU_ASSERT_EQUAL(got[0], id[2]);
	CU_ASSERT_EQUAL(got[1], id[0]);
	CU_ASSERT_EQUAL(got[2], id[1]);
	CU_ASSERT_EQUAL_FATAL(rank(&a, KVA_POLICY_LRU, 100 * MS, got, 1), 1);
	CU_ASSERT_EQUAL(got[0], id[2]);
	kvc_arena_destroy(&a);
}

/*
 * Ranking by the wait left (expected - elapsed) x blocks, not by the
 * expected wait: X expects 500 ms from t=0, Y 400 ms from t=300 ms; at
 * 350 ms X has 150 ms x 2 left and Y 350 ms x 2, so Y goes first.  IDLE
 * sessions rank by time in their state, not by last activity: P (lower
 * id) and Q are IDLE since 0, P allocated more recently; equal time in
 * state (350 ms x 1 block each), so the lower id, P; both before X.
 */
static void test_rank_remaining_wait(void)
{
	struct kvc_arena a;
	u64 x, y, p, q, got[16];
	u32 r;

	kvc_new_arena(&a, 64, BS, 16);
	p = kvc_new_session(&a, 0, 0);
	q = kvc_new_session(&a, 0, 0);
	x = kvc_new_session(&a, 0, 0);
	y = kvc_new_session(&a, 0, 0);
	kvc_alloc_ok(&a, p, 1, 60 * MS, NULL);
	kvc_alloc_ok(&a, q, 1, 10 * MS, NULL);
	kvc_alloc_ok(&a, x, 2, 0, NULL);
	kvc_alloc_ok(&a, y, 2, 0, NULL);
	CU_ASSERT_EQUAL(kvc_session_set_state(&a, x, KVA_STATE_TOOL_WAIT, 3,
					      500000, 0, &r), 0);
	CU_ASSERT_EQUAL(kvc_session_set_state(&a, y, KVA_STATE_TOOL_WAIT, 4,
					      400000, 300 * MS, &r), 0);
	CU_ASSERT_EQUAL_FATAL(rank(&a, KVA_POLICY_TOOLWAIT, 350 * MS, got, 16), 4);
	CU_ASSERT_EQUAL(got[0], y);
	CU_ASSERT_EQUAL(got[1], p);
	CU_ASSERT_EQUAL(got[2], q);
	CU_ASSERT_EQUAL(got[3], x);
	/* LRU: Q (inactive since 10 ms) before P (60 ms). */
	CU_ASSERT_EQUAL_FATAL(rank(&a, KVA_POLICY_LRU, 350 * MS, got, 16), 4);
	CU_ASSERT_EQUAL(got[0], x);
	CU_ASSERT_EQUAL(got[1], q);
	CU_ASSERT_EQUAL(got[2], p);
	CU_ASSERT_EQUAL(got[3], y);
	kvc_arena_destroy(&a);
}

/*
 * The wait left is counted in microseconds exactly: X expects 1 s from
 * t=0, Z 500 us from t=999 ms; at 999 ms X has 1000 us left and Z 500,
 * so X goes first (elapsed time divided by 999 instead of 1000 would
 * leave X nothing).
 */
static void test_rank_wait_left_us(void)
{
	struct kvc_arena a;
	u64 x, z, got[16];
	u32 r;

	kvc_new_arena(&a, 64, BS, 16);
	x = kvc_new_session(&a, 0, 0);
	z = kvc_new_session(&a, 0, 0);
	kvc_alloc_ok(&a, x, 1, 0, NULL);
	kvc_alloc_ok(&a, z, 1, 0, NULL);
	CU_ASSERT_EQUAL(kvc_session_set_state(&a, x, KVA_STATE_TOOL_WAIT, 3,
					      1000000, 0, &r), 0);
	CU_ASSERT_EQUAL(kvc_session_set_state(&a, z, KVA_STATE_TOOL_WAIT, 4,
					      500, 999 * MS, &r), 0);
	CU_ASSERT_EQUAL_FATAL(rank(&a, KVA_POLICY_TOOLWAIT, 999 * MS, got, 16), 2);
	CU_ASSERT_EQUAL(got[0], x);
	CU_ASSERT_EQUAL(got[1], z);
	kvc_arena_destroy(&a);
}

/*
 * A new prediction without a transition (KVA_SESSION_STATE_KEEP) re-ranks
 * at once (issue 39.2): X's tool expected 1 s, Y's 10 s; at 1.5 s X has
 * overrun (ranked by the 1.5 s it lasted) and Y has 8.5 s left, so Y goes
 * first.  The runtime re-predicts X (1.5 s so far, 20 s more): X first.
 * The time in state, the transition count and the tier's flag as stated.
 */
static void test_rank_after_keep(void)
{
	struct kvc_arena a;
	struct kva_session_info info;
	bool tr;
	u64 x, y, got[16];
	u32 r;

	kvc_new_arena(&a, 64, BS, 16);
	x = kvc_new_session(&a, 0, 0);
	y = kvc_new_session(&a, 0, 0);
	kvc_alloc_ok(&a, x, 1, 0, NULL);
	kvc_alloc_ok(&a, y, 1, 0, NULL);
	CU_ASSERT_EQUAL(kvc_session_set_state(&a, x, KVA_STATE_TOOL_WAIT, 3,
					      1000000, 0, &r), 0);
	CU_ASSERT_EQUAL(kvc_session_set_state(&a, y, KVA_STATE_TOOL_WAIT, 4,
					      10000000, 0, &r), 0);
	CU_ASSERT_EQUAL_FATAL(rank(&a, KVA_POLICY_TOOLWAIT, 1500 * MS, got, 16), 2);
	CU_ASSERT_EQUAL(got[0], y);
	CU_ASSERT_EQUAL(got[1], x);
	CU_ASSERT_EQUAL(kvc_session_set_state_flags(&a, x, KVA_SESSION_STATE_KEEP |
						    KVA_SESSION_STATE_TIER,
						    KVA_STATE_TOOL_WAIT, 3, 21500000,
						    KVA_TIER_DISK, 1500 * MS, &r, &tr), 0);
	CU_ASSERT_FALSE(tr);
	CU_ASSERT_EQUAL_FATAL(rank(&a, KVA_POLICY_TOOLWAIT, 1500 * MS, got, 16), 2);
	CU_ASSERT_EQUAL(got[0], x);
	CU_ASSERT_EQUAL(got[1], y);
	info = kvc_info_ok(&a, x, 1600 * MS);
	CU_ASSERT_EQUAL(info.expected_wait_us, 21500000);
	CU_ASSERT_EQUAL(info.state_since_ns, 0);	/* the wait goes on */
	CU_ASSERT_EQUAL(info.transitions, 1);
	CU_ASSERT_EQUAL(info.tier, KVA_TIER_DISK);
	kvc_arena_destroy(&a);
}

/*
 * IDLE sessions rank by how long they have been IDLE, whatever their id:
 * Q (the higher id) IDLE since 0, P back to IDLE at 60 ms after a decode;
 * at 100 ms Q (100 ms) goes before P (40 ms) under TOOLWAIT.
 */
static void test_rank_idle_time(void)
{
	struct kvc_arena a;
	u64 p, q, got[16];

	kvc_new_arena(&a, 64, BS, 16);
	p = kvc_new_session(&a, 0, 0);
	q = kvc_new_session(&a, 0, 0);
	kvc_alloc_ok(&a, p, 1, 0, NULL);
	kvc_alloc_ok(&a, q, 1, 0, NULL);
	kvc_state_ok(&a, p, KVA_STATE_DECODE, 50 * MS);
	kvc_state_ok(&a, p, KVA_STATE_IDLE, 60 * MS);
	CU_ASSERT_EQUAL_FATAL(rank(&a, KVA_POLICY_TOOLWAIT, 100 * MS, got, 16), 2);
	CU_ASSERT_EQUAL(got[0], q);
	CU_ASSERT_EQUAL(got[1], p);
	kvc_arena_destroy(&a);
}

static void test_rank_lru(void)
{
	struct kvc_arena a;
	u64 id[7], got[16];

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
	u64 id[7], got[16];

	setup(&a, id);
	CU_ASSERT_EQUAL(kvc_policy_set(&a, KVA_POLICY_TTL, 0, 0, 60), 0);
	/* At 75 ms only C (75 ms) and A (65 ms) have been inactive >= 60. */
	CU_ASSERT_EQUAL_FATAL(rank(&a, KVA_POLICY_TTL, 75 * MS, got, 16), 2);
	CU_ASSERT_EQUAL(got[0], id[2]);
	CU_ASSERT_EQUAL(got[1], id[0]);
	CU_ASSERT_EQUAL(rank(&a, KVA_POLICY_TTL, 5 * MS, got, 16), 0);
	/* Exactly the TTL counts: at 70 ms A has been inactive 60 ms. */
	CU_ASSERT_EQUAL_FATAL(rank(&a, KVA_POLICY_TTL, 70 * MS, got, 16), 2);
	CU_ASSERT_EQUAL(got[1], id[0]);
	CU_ASSERT_EQUAL(rank(&a, KVA_POLICY_TTL, 70 * MS - 1, got, 16), 1);
	kvc_arena_destroy(&a);
}

static void test_rank_ties_and_saturation(void)
{
	struct kvc_arena a;
	u64 id[5], got[16];
	u32 r, i, b;

	kvc_new_arena(&a, 64, BS, 16);
	for (i = 0; i < 5; i++) {
		id[i] = kvc_new_session(&a, 0, 0);
		kvc_alloc_ok(&a, id[i], 2, 0, NULL);
		CU_ASSERT_EQUAL(kvc_session_set_state(&a, id[i], KVA_STATE_TOOL_WAIT,
						      0, i == 4 ? (1ULL << 63) + 1 : 500,
						      0, &r), 0);
	}
	/*
	 * Equal scores: ascending ids.  A huge expected wait saturates and
	 * goes first: (2^63 + 1) x 2 blocks would wrap to 2, the last place.
	 */
	CU_ASSERT_EQUAL_FATAL(rank(&a, KVA_POLICY_TOOLWAIT, 0, got, 16), 5);
	CU_ASSERT_EQUAL(got[0], id[4]);
	for (i = 1; i < 5; i++)
		CU_ASSERT_EQUAL(got[i], id[i - 1]);
	/* A session's activity moves it in LRU but not its TOOL_WAIT rank. */
	CU_ASSERT_EQUAL(kvc_blocks_alloc(&a, id[0], 1, false, ~0U, 5 * MS, &b, &r), 0);
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
		{ "rank: a full array replaces its worst", test_rank_replace_worst },
		{ "rank by the wait left", test_rank_remaining_wait },
		{ "the wait left in microseconds", test_rank_wait_left_us },
		{ "a new prediction re-ranks (KEEP)", test_rank_after_keep },
		{ "IDLE ranks by time IDLE", test_rank_idle_time },
		CU_TEST_INFO_NULL,
	};

	return kvc_test_add_suite("policy", tests);
}
