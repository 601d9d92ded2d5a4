// SPDX-License-Identifier: GPL-2.0
/*
 * kmod/core/kvc_args.c on the host: every check of an arena-create and a
 * blocks argument struct, each probed on both sides of its bound (the
 * last accepted value and the first refused one), so that a check dropped
 * or off by one fails here.  libkvarena validates before the core sees a
 * request, so the library's suite cannot reach most of these.
 */
#include "kvc_test.h"

#define MIB	(1ULL << 20)
#define PAGE	KVA_PAGE_SIZE

/* 8 pages of 64 KiB blocks: 256 blocks, default watermarks 32 / 64. */
static struct kva_arena_create good(void)
{
	struct kva_arena_create c;

	memset(&c, 0, sizeof(c));
	c.size = sizeof(c);
	c.bytes = 8 * PAGE;
	c.block_size = 64 * 1024;
	c.numa_node = KVA_NUMA_ANY;
	strcpy(c.name, "ok-name");
	return c;
}

static int create(const struct kva_arena_create *c)
{
	return kvc_check_arena_create(c, 64 * PAGE);
}

static void test_args_create_valid(void)
{
	struct kva_arena_create c = good();

	T_OK(create(&c));
	c.numa_node = 0;
	T_OK(create(&c));
	c.policy = KVC_POLICY_COUNT - 1;
	T_OK(create(&c));
	c.name[0] = 0;				/* no name at all */
	T_OK(create(&c));
	CU_ASSERT_EQUAL(kvc_arena_nblocks(8 * PAGE, 64 * 1024), 256);
	CU_ASSERT_EQUAL(kvc_arena_nblocks(3 * PAGE, 4096), 3 * 512);
	CU_ASSERT_EQUAL(kvc_arena_nblocks(PAGE, KVA_BLOCK_MAX), 1);
}

static void test_args_create_flags_bytes(void)
{
	struct kva_arena_create c = good();

	c.flags = 1;
	T_ERR(create(&c), EINVAL);
	c = good();
	c.pad = 1;
	T_ERR(create(&c), EINVAL);
	c = good();
	c.bytes = 0;
	T_ERR(create(&c), EINVAL);
	c.bytes = PAGE + 4096;			/* not whole 2 MiB pages */
	T_ERR(create(&c), EINVAL);
	c.bytes = PAGE - 1;
	T_ERR(create(&c), EINVAL);
	c.bytes = 2 * PAGE;
	T_OK(create(&c));
	/* The module's limit: exactly at it is fine, one page over is not. */
	c.bytes = 64 * PAGE;
	T_OK(create(&c));
	c.bytes = 65 * PAGE;
	T_ERR(create(&c), E2BIG);
	CU_ASSERT_EQUAL(kvc_check_arena_create(&c, 65 * PAGE), 0);
	CU_ASSERT_EQUAL(kvc_check_arena_create(&c, 65 * PAGE - 1), -E2BIG);
}

static void test_args_create_block_size(void)
{
	struct kva_arena_create c = good();
	static const u32 bad[] = { 0, 1, KVA_BLOCK_MIN - 1, KVA_BLOCK_MIN + 512,
				   2 * KVA_BLOCK_MIN + 1, 3 * KVA_BLOCK_MIN - 4,
				   KVA_BLOCK_MAX + KVA_BLOCK_MIN, KVA_BLOCK_MAX * 2,
				   KVA_BLOCK_MAX - 1 };
	static const u32 fine[] = { KVA_BLOCK_MIN, 2 * KVA_BLOCK_MIN,
				    3 * KVA_BLOCK_MIN, KVA_BLOCK_MAX };
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		c.block_size = bad[i];
		CU_ASSERT_EQUAL(create(&c), -EINVAL);
		if (create(&c) != -EINVAL)
			fprintf(stderr, "\n  block_size %u accepted\n", bad[i]);
	}
	for (i = 0; i < sizeof(fine) / sizeof(fine[0]); i++) {
		c.block_size = fine[i];
		CU_ASSERT_EQUAL(create(&c), 0);
		if (create(&c))
			fprintf(stderr, "\n  block_size %u refused\n", fine[i]);
	}
}

static void test_args_create_node_policy(void)
{
	struct kva_arena_create c = good();

	c.numa_node = KVA_NUMA_ANY - 1;
	T_ERR(create(&c), EINVAL);
	c.numa_node = -100;
	T_ERR(create(&c), EINVAL);
	c = good();
	c.policy = KVC_POLICY_COUNT;
	T_ERR(create(&c), EINVAL);
	c.policy = ~0U;
	T_ERR(create(&c), EINVAL);
}

static void test_args_create_name(void)
{
	struct kva_arena_create c = good();
	char ch;

	/* Longest name: 31 characters and the NUL; 32 without one is bad. */
	memset(c.name, 'a', KVA_NAME_LEN - 1);
	c.name[KVA_NAME_LEN - 1] = 0;
	T_OK(create(&c));
	c.name[KVA_NAME_LEN - 1] = 'a';
	T_ERR(create(&c), EINVAL);
	/* Printable ASCII only: the space and '~' are the bounds. */
	c = good();
	c.name[1] = ' ';
	c.name[2] = '~';
	T_OK(create(&c));
	for (ch = 1; ch != 0; ch++) {
		int want = (ch >= 0x20 && ch < 0x7f) ? 0 : -EINVAL;

		c.name[3] = ch;
		CU_ASSERT_EQUAL(create(&c), want);
		if (create(&c) != want)
			fprintf(stderr, "\n  name byte 0x%02x: %d\n",
				(unsigned char)ch, create(&c));
	}
	/* A bad byte past the NUL is not part of the name. */
	c = good();
	c.name[10] = 0x7f;
	T_OK(create(&c));
	/* The last character before the NUL is checked too. */
	c = good();
	c.name[6] = 0x7f;
	T_ERR(create(&c), EINVAL);
	c.name[6] = 0x1f;
	T_ERR(create(&c), EINVAL);
	/* And the first. */
	c = good();
	c.name[0] = 0x7f;
	T_ERR(create(&c), EINVAL);
	c.name[0] = '\t';
	T_ERR(create(&c), EINVAL);
}

static void test_args_create_block_count(void)
{
	struct kva_arena_create c = good();

	/*
	 * KVA_MAX_BLOCKS (2^28: the pool stays within what kvmalloc takes)
	 * or more blocks are refused, with a limit that does not stop it
	 * first.  4 KiB blocks, 512 per page: KVA_MAX_BLOCKS / 512 pages is
	 * exactly the cap; one page less is fine.
	 */
	c.block_size = KVA_BLOCK_MIN;
	c.bytes = (uint64_t)(KVA_MAX_BLOCKS / 512) * PAGE;
	CU_ASSERT_EQUAL(kvc_check_arena_create(&c, ~0ULL), -E2BIG);
	c.bytes -= PAGE;
	CU_ASSERT_EQUAL(kvc_check_arena_create(&c, ~0ULL), 0);
	/* The same bytes in 8 KiB blocks: half the count, fine. */
	c.bytes = (uint64_t)(KVA_MAX_BLOCKS / 512) * PAGE;
	c.block_size = 2 * KVA_BLOCK_MIN;
	CU_ASSERT_EQUAL(kvc_check_arena_create(&c, ~0ULL), 0);
}

static void test_args_create_watermarks(void)
{
	struct kva_arena_create c = good();	/* 256 blocks */

	c.low_wm = 256;
	c.high_wm = 256;
	T_OK(create(&c));
	c.high_wm = 257;
	T_ERR(create(&c), EINVAL);
	c.low_wm = 100;
	c.high_wm = 99;
	T_ERR(create(&c), EINVAL);
	c.high_wm = 100;
	T_OK(create(&c));
	c.low_wm = 200;				/* default high: 2 x 200 capped */
	c.high_wm = 0;
	T_OK(create(&c));
	c.low_wm = 257;
	T_ERR(create(&c), EINVAL);
}

static void test_args_blocks(void)
{
	struct kva_blocks b;

	memset(&b, 0, sizeof(b));
	b.size = sizeof(b);
	b.count = 1;
	T_OK(kvc_check_blocks(&b, true));
	T_OK(kvc_check_blocks(&b, false));
	b.count = KVA_MAX_BATCH;
	T_OK(kvc_check_blocks(&b, true));
	T_OK(kvc_check_blocks(&b, false));
	b.count = KVA_MAX_BATCH + 1;
	T_ERR(kvc_check_blocks(&b, true), EINVAL);
	T_ERR(kvc_check_blocks(&b, false), EINVAL);
	b.count = 0;
	T_ERR(kvc_check_blocks(&b, true), EINVAL);
	b.count = 3;
	/* PARTIAL is for allocation only; no other flag anywhere. */
	b.flags = KVA_ALLOC_PARTIAL;
	T_OK(kvc_check_blocks(&b, true));
	T_ERR(kvc_check_blocks(&b, false), EINVAL);
	b.flags = KVA_ALLOC_PARTIAL << 1;
	T_ERR(kvc_check_blocks(&b, true), EINVAL);
	T_ERR(kvc_check_blocks(&b, false), EINVAL);
	b.flags = 1U << 31;
	T_ERR(kvc_check_blocks(&b, true), EINVAL);
	b.flags = 0;
	/* Any 64-bit session id passes here; the lookup says ENOENT. */
	b.session_id = UINT64_MAX;
	T_OK(kvc_check_blocks(&b, true));
	T_OK(kvc_check_blocks(&b, false));
}

int kvc_test_register_args(void)
{
	static const CU_TestInfo tests[] = {
		{ "create: valid", test_args_create_valid },
		{ "create: flags, pad, bytes and the limit",
		  test_args_create_flags_bytes },
		{ "create: block size", test_args_create_block_size },
		{ "create: node and policy", test_args_create_node_policy },
		{ "create: name", test_args_create_name },
		{ "create: block count", test_args_create_block_count },
		{ "create: watermarks", test_args_create_watermarks },
		{ "blocks: count, flags, session id", test_args_blocks },
		CU_TEST_INFO_NULL,
	};

	return kvc_test_add_suite("args", tests);
}
