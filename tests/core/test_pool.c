// SPDX-License-Identifier: GPL-2.0
/*
 * Tests for kmod/core/kvc_pool.c: the free-id stack and refcounts.
 * Id validation is the caller's job, so only valid calls are made here.
 */
#include "kvc_test.h"

static void test_init_hands_out_ascending(void)
{
	struct kvc_pool p;
	u32 ids[10], i;

	T_OK(kvc_pool_init(&p, 10));
	CU_ASSERT_EQUAL(p.nblocks, 10);
	CU_ASSERT_EQUAL(p.nfree, 10);
	for (i = 0; i < 10; i++) {
		CU_ASSERT_EQUAL(p.refcnt[i], 0);
		CU_ASSERT(kvc_pool_valid(&p, i));
		CU_ASSERT(!kvc_pool_allocated(&p, i));
	}
	kvc_pool_alloc(&p, 10, ids);
	CU_ASSERT_EQUAL(p.nfree, 0);
	for (i = 0; i < 10; i++) {
		CU_ASSERT_EQUAL(ids[i], i);
		CU_ASSERT_EQUAL(p.refcnt[i], 1);
		CU_ASSERT(kvc_pool_allocated(&p, i));
	}
	kvc_pool_destroy(&p);
}

static void test_alloc_zero_is_noop(void)
{
	struct kvc_pool p;
	u32 id = 77;

	T_OK(kvc_pool_init(&p, 3));
	kvc_pool_alloc(&p, 0, &id);
	CU_ASSERT_EQUAL(p.nfree, 3);
	CU_ASSERT_EQUAL(id, 77);
	kvc_pool_destroy(&p);
}

static void test_valid_and_allocated_bounds(void)
{
	struct kvc_pool p;
	u32 id;

	T_OK(kvc_pool_init(&p, 4));
	CU_ASSERT(kvc_pool_valid(&p, 3));
	CU_ASSERT(!kvc_pool_valid(&p, 4));
	CU_ASSERT(!kvc_pool_valid(&p, UINT32_MAX));
	CU_ASSERT(!kvc_pool_valid(&p, 0x80000000u));
	CU_ASSERT(!kvc_pool_allocated(&p, 4));
	CU_ASSERT(!kvc_pool_allocated(&p, UINT32_MAX));
	kvc_pool_alloc(&p, 1, &id);
	CU_ASSERT_EQUAL(id, 0);
	CU_ASSERT(kvc_pool_allocated(&p, 0));
	CU_ASSERT(!kvc_pool_allocated(&p, 1));
	kvc_pool_destroy(&p);
}

static void test_get_put_refcount(void)
{
	struct kvc_pool p;
	u32 id;

	T_OK(kvc_pool_init(&p, 2));
	kvc_pool_alloc(&p, 1, &id);
	kvc_pool_get(&p, id);
	kvc_pool_get(&p, id);
	CU_ASSERT_EQUAL(p.refcnt[id], 3);
	CU_ASSERT_FALSE(kvc_pool_put(&p, id));
	CU_ASSERT_FALSE(kvc_pool_put(&p, id));
	CU_ASSERT_EQUAL(p.nfree, 1);
	CU_ASSERT(kvc_pool_allocated(&p, id));
	CU_ASSERT_TRUE(kvc_pool_put(&p, id));
	CU_ASSERT_EQUAL(p.refcnt[id], 0);
	CU_ASSERT_EQUAL(p.nfree, 2);
	CU_ASSERT(!kvc_pool_allocated(&p, id));
	kvc_pool_destroy(&p);
}

/* Freed ids go on top of the stack: the next allocation reuses them. */
static void test_free_stack_is_lifo(void)
{
	struct kvc_pool p;
	u32 ids[6], again[4];

	T_OK(kvc_pool_init(&p, 6));
	kvc_pool_alloc(&p, 4, ids);
	CU_ASSERT(kvc_pool_put(&p, 2));
	CU_ASSERT(kvc_pool_put(&p, 0));
	CU_ASSERT(kvc_pool_put(&p, 3));
	CU_ASSERT_EQUAL(p.nfree, 5);
	kvc_pool_alloc(&p, 4, again);
	CU_ASSERT_EQUAL(again[0], 3);
	CU_ASSERT_EQUAL(again[1], 0);
	CU_ASSERT_EQUAL(again[2], 2);
	CU_ASSERT_EQUAL(again[3], 4);
	CU_ASSERT_EQUAL(p.nfree, 1);
	CU_ASSERT_EQUAL(p.free_ids[0], 5);
	kvc_pool_destroy(&p);
}

/* Cycle every block many times; the stack never holds an id twice. */
static void test_cycle_all_blocks(void)
{
	enum { N = 257 };
	struct kvc_pool p;
	u32 ids[N], seen[N], round, i;

	T_OK(kvc_pool_init(&p, N));
	for (round = 0; round < 20; round++) {
		kvc_pool_alloc(&p, N, ids);
		CU_ASSERT_EQUAL(p.nfree, 0);
		memset(seen, 0, sizeof(seen));
		for (i = 0; i < N; i++) {
			CU_ASSERT_FATAL(ids[i] < N);
			CU_ASSERT_EQUAL(seen[ids[i]]++, 0);
		}
		/* Put back in a round-dependent order. */
		for (i = 0; i < N; i++)
			CU_ASSERT(kvc_pool_put(&p, ids[(i * 7 + round) % N]));
		CU_ASSERT_EQUAL(p.nfree, N);
	}
	kvc_pool_destroy(&p);
}

static void test_one_block(void)
{
	struct kvc_pool p;
	u32 id = 9;

	T_OK(kvc_pool_init(&p, 1));
	kvc_pool_alloc(&p, 1, &id);
	CU_ASSERT_EQUAL(id, 0);
	CU_ASSERT_EQUAL(p.nfree, 0);
	CU_ASSERT(kvc_pool_put(&p, 0));
	CU_ASSERT_EQUAL(p.nfree, 1);
	kvc_pool_destroy(&p);
}

static void test_destroy_resets(void)
{
	struct kvc_pool p;

	T_OK(kvc_pool_init(&p, 5));
	kvc_pool_destroy(&p);
	CU_ASSERT_PTR_NULL(p.free_ids);
	CU_ASSERT_PTR_NULL(p.refcnt);
	CU_ASSERT_EQUAL(p.nblocks, 0);
	CU_ASSERT_EQUAL(p.nfree, 0);
	kvc_pool_destroy(&p);	/* twice is harmless */
}

/* Either allocation failing: -ENOMEM, nothing leaked (LSan), pool empty. */
static void test_init_enomem(void)
{
	struct kvc_pool p;
	long k;

	for (k = 0; k < 2; k++) {
		memset(&p, 0xa5, sizeof(p));
		kvc_fail_calloc(k);
		T_ERR(kvc_pool_init(&p, 8), ENOMEM);
		kvc_fail_calloc(-1);
		CU_ASSERT_PTR_NULL(p.free_ids);
		CU_ASSERT_PTR_NULL(p.refcnt);
		CU_ASSERT_EQUAL(p.nblocks, 0);
		CU_ASSERT_EQUAL(p.nfree, 0);
	}
	T_OK(kvc_pool_init(&p, 8));
	kvc_pool_destroy(&p);
}

static const CU_TestInfo pool_tests[] = {
	{ "init hands out 0, 1, 2, ...", test_init_hands_out_ascending },
	{ "alloc of zero ids", test_alloc_zero_is_noop },
	{ "valid/allocated bounds", test_valid_and_allocated_bounds },
	{ "get/put refcounting", test_get_put_refcount },
	{ "free stack is LIFO", test_free_stack_is_lifo },
	{ "cycle all blocks", test_cycle_all_blocks },
	{ "one-block pool", test_one_block },
	{ "destroy resets", test_destroy_resets },
	{ "init -ENOMEM", test_init_enomem },
	CU_TEST_INFO_NULL,
};

int kvc_test_register_pool(void)
{
	return kvc_test_add_suite("pool", pool_tests);
}
