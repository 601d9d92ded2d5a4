// SPDX-License-Identifier: GPL-2.0
/*
 * Blocks and sessions through the arena fd: every ioctl's success path and
 * its errors (zero and oversized batches, unknown flags, nonzero pad,
 * foreign and out-of-range ids, double free, bad states), and that a failed
 * call changes nothing.  Tests kmod/arena_ops.c on top of the shared core.
 */
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "kt.h"

#define BS	(64U << 10)
#define NBLK	64U		/* 4 MiB / 64 KiB */

static int dev = -1, arena = -1;

static int blocks_init(void)
{
	dev = kt_dev_open();
	if (dev < 0)
		return 1;
	arena = kt_arena(dev, 4 * KT_MIB, BS, 2);
	return arena < 0;
}

static int blocks_clean(void)
{
	close(arena);
	close(dev);
	return 0;
}

static uint32_t free_blocks(void)
{
	struct kva_arena_info info;

	kt_arena_info(arena, &info);
	return info.blocks_free;
}

static void test_session_lifecycle(void)
{
	struct kva_session_info si;
	int64_t sid = kt_session(arena), sid2;

	CU_ASSERT_FATAL(sid > 0);
	CU_ASSERT_EQUAL(kt_session_info(arena, sid, &si), 0);
	CU_ASSERT_EQUAL(si.state, KVA_STATE_IDLE);
	CU_ASSERT_EQUAL(si.cookie, 42);
	CU_ASSERT_EQUAL(si.blocks_held, 0);
	CU_ASSERT_EQUAL(kt_set_state(arena, sid, KVA_STATE_PREFILL, 0, 0), 0);
	CU_ASSERT_EQUAL(kt_set_state(arena, sid, KVA_STATE_PREFILL, 0, 0), -EALREADY);
	CU_ASSERT_EQUAL(kt_set_state(arena, sid, KVA_STATE_DECODE, 0, 0), 0);
	CU_ASSERT_EQUAL(kt_set_state(arena, sid, KVA_STATE_TOOL_WAIT, 9, 5000), 0);
	CU_ASSERT_EQUAL(kt_session_info(arena, sid, &si), 0);
	CU_ASSERT_EQUAL(si.state, KVA_STATE_TOOL_WAIT);
	CU_ASSERT_EQUAL(si.tool_class, 9);
	CU_ASSERT_EQUAL(si.expected_wait_us, 5000);
	CU_ASSERT_EQUAL(si.transitions, 3);
	CU_ASSERT(si.state_ns[KVA_STATE_PREFILL] > 0);
	CU_ASSERT(si.state_since_ns >= si.created_ns);
	CU_ASSERT_EQUAL(si.tier, KVA_TIER_ARENA);
	{	/* KEEP: a new prediction, no transition; TIER recorded (VER1) */
		struct kva_session_state s = { .size = sizeof(s),
			.flags = KVA_SESSION_STATE_KEEP | KVA_SESSION_STATE_TIER,
			.session_id = sid, .state = KVA_STATE_TOOL_WAIT,
			.tool_class = 9, .expected_wait_us = 90000,
			.tier = KVA_TIER_DISK };
		uint64_t since = si.state_since_ns;

		CU_ASSERT_EQUAL(kt_ioctl(arena, KVA_IOC_SESSION_SET_STATE, &s), 0);
		CU_ASSERT_EQUAL(kt_session_info(arena, sid, &si), 0);
		CU_ASSERT_EQUAL(si.expected_wait_us, 90000);
		CU_ASSERT_EQUAL(si.transitions, 3);
		CU_ASSERT_EQUAL(si.state_since_ns, since);
		CU_ASSERT_EQUAL(si.tier, KVA_TIER_DISK);
		s.state = KVA_STATE_IDLE;	/* KEEP with another state */
		s.tool_class = 0;
		s.expected_wait_us = 0;
		CU_ASSERT_EQUAL(kt_ioctl(arena, KVA_IOC_SESSION_SET_STATE, &s), -EINVAL);
		s.state = KVA_STATE_TOOL_WAIT;	/* TIER in a VER0 struct */
		s.size = KVA_SESSION_STATE_SIZE_VER0;
		CU_ASSERT_EQUAL(kt_ioctl(arena, KVA_IOC_SESSION_SET_STATE, &s), -EINVAL);
		s.size = sizeof(s);
		s.tier = KVA_TIER_MAX + 1;
		CU_ASSERT_EQUAL(kt_ioctl(arena, KVA_IOC_SESSION_SET_STATE, &s), -EINVAL);
		CU_ASSERT_EQUAL(kt_session_info(arena, sid, &si), 0);
		CU_ASSERT_EQUAL(si.tier, KVA_TIER_DISK);
		CU_ASSERT_EQUAL(si.transitions, 3);
	}

	/* Errors: bad state, tool fields outside TOOL_WAIT, flags. */
	CU_ASSERT_EQUAL(kt_set_state(arena, sid, KVA_STATE_ENDED + 1, 0, 0), -EINVAL);
	CU_ASSERT_EQUAL(kt_set_state(arena, sid, 1000, 0, 0), -EINVAL);
	CU_ASSERT_EQUAL(kt_set_state(arena, sid, KVA_STATE_DECODE, 1, 0), -EINVAL);
	CU_ASSERT_EQUAL(kt_set_state(arena, sid, KVA_STATE_IDLE, 0, 7), -EINVAL);
	{
		struct kva_session_state s = { .size = sizeof(s), .flags = 1u << 31,
			.session_id = sid, .state = KVA_STATE_IDLE };
		struct kva_session_end e = { .size = sizeof(e), .flags = 1,
			.session_id = sid };
		struct kva_session_create c = { .size = sizeof(c), .flags = 2 };
		struct kva_session_info i = { .size = sizeof(i), .pad = 1,
			.session_id = sid };

		CU_ASSERT_EQUAL(kt_ioctl(arena, KVA_IOC_SESSION_SET_STATE, &s), -EINVAL);
		CU_ASSERT_EQUAL(kt_ioctl(arena, KVA_IOC_SESSION_END, &e), -EINVAL);
		CU_ASSERT_EQUAL(kt_ioctl(arena, KVA_IOC_SESSION_CREATE, &c), -EINVAL);
		CU_ASSERT_EQUAL(kt_ioctl(arena, KVA_IOC_SESSION_INFO, &i), -EINVAL);
	}
	/* Ending: through SET_STATE(ENDED) or SESSION_END; ids never reused. */
	CU_ASSERT_EQUAL(kt_set_state(arena, sid, KVA_STATE_ENDED, 0, 0), 0);
	CU_ASSERT_EQUAL(kt_session_info(arena, sid, &si), -ENOENT);
	CU_ASSERT_EQUAL(kt_end(arena, sid), -ENOENT);
	CU_ASSERT_EQUAL(kt_set_state(arena, sid, KVA_STATE_DECODE, 0, 0), -ENOENT);
	sid2 = kt_session(arena);
	CU_ASSERT(sid2 > sid);			/* same slot, a new id */
	CU_ASSERT_EQUAL(kt_end(arena, sid2), 0);
	CU_ASSERT_EQUAL(kt_end(arena, 0), -ENOENT);
	CU_ASSERT_EQUAL(kt_end(arena, 0x7fffffff), -ENOENT);
	/* 32 bits of an id name nothing; neither do ids not handed out. */
	CU_ASSERT_EQUAL(kt_end(arena, (uint32_t)sid), -ENOENT);
	CU_ASSERT_EQUAL(kt_end(arena, UINT64_MAX), -ENOENT);
	CU_ASSERT_EQUAL(kt_end(arena, sid2 + (1ULL << 40)), -ENOENT);
}

static void test_alloc_free(void)
{
	uint32_t ids[NBLK + 1], more[4];
	int64_t sid = kt_session(arena);
	int i;

	CU_ASSERT_FATAL(sid > 0);
	CU_ASSERT_EQUAL(kt_alloc(arena, sid, 10, ids, 0), 10);
	CU_ASSERT_EQUAL(free_blocks(), NBLK - 10);
	for (i = 0; i < 10; i++)
		CU_ASSERT(ids[i] < NBLK);
	/* All or nothing, then partial. */
	CU_ASSERT_EQUAL(kt_alloc(arena, sid, NBLK, ids + 10, 0), -ENOSPC);
	CU_ASSERT_EQUAL(free_blocks(), NBLK - 10);
	CU_ASSERT_EQUAL(kt_alloc(arena, sid, NBLK, ids + 10, KVA_ALLOC_PARTIAL),
			(int)NBLK - 10);
	CU_ASSERT_EQUAL(free_blocks(), 0);
	CU_ASSERT_EQUAL(kt_alloc(arena, sid, 1, more, KVA_ALLOC_PARTIAL), -ENOSPC);
	/* Ids are distinct. */
	for (i = 0; i < (int)NBLK; i++) {
		int j;

		for (j = i + 1; j < (int)NBLK; j++)
			CU_ASSERT(ids[i] != ids[j]);
	}
	CU_ASSERT_EQUAL(kt_free(arena, sid, NBLK, ids), (int)NBLK);
	CU_ASSERT_EQUAL(free_blocks(), NBLK);
	CU_ASSERT_EQUAL(kt_end(arena, sid), 0);
}

static void test_blocks_errors(void)
{
	uint32_t ids[4], bad[2], big_ids[1];
	int64_t sid = kt_session(arena), other = kt_session(arena);
	struct kva_blocks b;
	uint32_t before;

	CU_ASSERT_FATAL(sid > 0 && other > 0);
	CU_ASSERT_EQUAL(kt_alloc(arena, sid, 4, ids, 0), 4);
	before = free_blocks();

	/* Zero and oversized batches, unknown flags, bad session. */
	CU_ASSERT_EQUAL(kt_alloc(arena, sid, 0, ids, 0), -EINVAL);
	CU_ASSERT_EQUAL(kt_alloc(arena, sid, KVA_MAX_BATCH + 1, ids, 0), -EINVAL);
	CU_ASSERT_EQUAL(kt_alloc(arena, sid, 1, ids, 2), -EINVAL);
	CU_ASSERT_EQUAL(kt_free(arena, sid, 0, ids), -EINVAL);
	CU_ASSERT_EQUAL(kt_alloc(arena, 9999, 1, big_ids, 0), -ENOENT);
	memset(&b, 0, sizeof(b));
	b.size = sizeof(b);
	b.session_id = sid;
	b.count = 1;
	b.ids = (uintptr_t)big_ids;
	b.flags = KVA_ALLOC_PARTIAL;	/* only alloc takes it */
	CU_ASSERT_EQUAL(kt_ioctl(arena, KVA_IOC_BLOCKS_FREE, &b), -EINVAL);
	/* Bad user pointers: nothing allocated, nothing freed. */
	CU_ASSERT_EQUAL(kt_alloc(arena, sid, 2, (uint32_t *)8, 0), -EFAULT);
	CU_ASSERT_EQUAL(kt_free(arena, sid, 2, (uint32_t *)8), -EFAULT);
	CU_ASSERT_EQUAL(free_blocks(), before);

	/* Out of range, foreign (held by another session), repeated. */
	bad[0] = ids[0];
	bad[1] = NBLK;
	CU_ASSERT_EQUAL(kt_free(arena, sid, 2, bad), -EINVAL);
	bad[1] = 0xffffffff;
	CU_ASSERT_EQUAL(kt_free(arena, sid, 2, bad), -EINVAL);
	CU_ASSERT_EQUAL(kt_free(arena, other, 1, ids), -ENOENT);
	bad[1] = ids[0];
	CU_ASSERT_EQUAL(kt_free(arena, sid, 2, bad), -EINVAL);
	CU_ASSERT_EQUAL(free_blocks(), before);

	/* Double free. */
	CU_ASSERT_EQUAL(kt_free(arena, sid, 1, ids), 1);
	CU_ASSERT_EQUAL(kt_free(arena, sid, 1, ids), -ENOENT);
	/* A failed batch frees none of its valid ids. */
	bad[0] = ids[1];
	bad[1] = ids[0];
	CU_ASSERT_EQUAL(kt_free(arena, sid, 2, bad), -ENOENT);
	CU_ASSERT_EQUAL(free_blocks(), before + 1);
	CU_ASSERT_EQUAL(kt_end(arena, sid), 0);
	CU_ASSERT_EQUAL(kt_end(arena, other), 0);
	CU_ASSERT_EQUAL(free_blocks(), NBLK);
}

static void test_share(void)
{
	uint32_t ids[4], bad[2], freed_id;
	int64_t a = kt_session(arena), b = kt_session(arena);
	struct kva_session_info si;

	CU_ASSERT_FATAL(a > 0 && b > 0);
	CU_ASSERT_EQUAL(kt_alloc(arena, a, 4, ids, 0), 4);
	CU_ASSERT_EQUAL(kt_share(arena, b, 2, ids), 2);
	CU_ASSERT_EQUAL(kt_share(arena, b, 1, ids), -EEXIST);
	bad[0] = ids[2];
	bad[1] = ids[2];
	CU_ASSERT_EQUAL(kt_share(arena, b, 2, bad), -EINVAL);
	bad[1] = NBLK + 5;
	CU_ASSERT_EQUAL(kt_share(arena, b, 2, bad), -EINVAL);
	CU_ASSERT_EQUAL(kt_share(arena, 4242, 1, ids), -ENOENT);
	/* Unallocated blocks cannot be shared. */
	CU_ASSERT_EQUAL(kt_free(arena, a, 1, ids + 3), 1);
	freed_id = ids[3];
	CU_ASSERT_EQUAL(kt_share(arena, b, 1, &freed_id), -ENOENT);
	CU_ASSERT_EQUAL(kt_session_info(arena, b, &si), 0);
	CU_ASSERT_EQUAL(si.blocks_held, 2);

	/* A shared block stays allocated until its last holder lets go. */
	CU_ASSERT_EQUAL(free_blocks(), NBLK - 3);
	CU_ASSERT_EQUAL(kt_end(arena, a), 0);
	CU_ASSERT_EQUAL(free_blocks(), NBLK - 2);
	CU_ASSERT_EQUAL(kt_free(arena, b, 2, ids), 2);
	CU_ASSERT_EQUAL(free_blocks(), NBLK);
	CU_ASSERT_EQUAL(kt_end(arena, b), 0);
}

/* Idle byte-seconds: blocks held x time in IDLE and TOOL_WAIT only. */
static void test_idle_accounting(void)
{
	struct timespec ts = { .tv_nsec = 50 * 1000 * 1000 };
	struct kva_session_info si;
	uint32_t ids[8];
	int64_t sid = kt_session(arena);
	uint64_t expect;

	CU_ASSERT_FATAL(sid > 0);
	CU_ASSERT_EQUAL(kt_set_state(arena, sid, KVA_STATE_DECODE, 0, 0), 0);
	CU_ASSERT_EQUAL(kt_alloc(arena, sid, 8, ids, 0), 8);
	nanosleep(&ts, NULL);		/* DECODE: not idle */
	CU_ASSERT_EQUAL(kt_session_info(arena, sid, &si), 0);
	CU_ASSERT_EQUAL(si.idle_block_us, 0);
	CU_ASSERT_EQUAL(kt_set_state(arena, sid, KVA_STATE_TOOL_WAIT, 1, 1), 0);
	nanosleep(&ts, NULL);		/* 8 blocks x >= 50 ms */
	CU_ASSERT_EQUAL(kt_set_state(arena, sid, KVA_STATE_DECODE, 0, 0), 0);
	CU_ASSERT_EQUAL(kt_session_info(arena, sid, &si), 0);
	expect = 8ULL * 50000;
	CU_ASSERT(si.idle_block_us >= expect);
	CU_ASSERT(si.idle_block_us < expect * 10);
	CU_ASSERT_EQUAL(si.idle_byte_sec, si.idle_block_us * BS / 1000000);
	CU_ASSERT(si.state_ns[KVA_STATE_TOOL_WAIT] >= 50000000ULL);
	CU_ASSERT_EQUAL(kt_end(arena, sid), 0);
}

/*
 * An allocation writes ids[0..done) and nothing else: a failed one leaves
 * the array as it was, a partial one the entries past `done`, even where
 * the array crosses a page boundary (the writability check once stored a
 * zero byte at the array's start and at each page boundary in it).
 */
static void test_alloc_writes_only_done(void)
{
	long pg = sysconf(_SC_PAGESIZE);
	unsigned char *buf = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint32_t *ids, held[NBLK], i;
	int64_t sid = kt_session(arena);
	long bad = 0;

	CU_ASSERT_FATAL(buf != MAP_FAILED && sid > 0);
	memset(buf, 0xa5, 2 * pg);
	/* 100 entries from 2 bytes before the second page's start */
	ids = (uint32_t *)(buf + pg - 4 * 50 + 2);
	CU_ASSERT_EQUAL(kt_alloc(arena, sid, NBLK - 4, held, 0), (int)NBLK - 4);
	CU_ASSERT_EQUAL(kt_alloc(arena, sid, 100, ids, 0), -ENOSPC);
	for (i = 0; i < 2 * pg; i++)
		bad += buf[i] != 0xa5;
	CU_ASSERT_EQUAL(bad, 0);
	CU_ASSERT_EQUAL(kt_alloc(arena, sid, 100, ids, KVA_ALLOC_PARTIAL), 4);
	for (i = 0; i < 2 * pg; i++)
		bad += (buf + i < (unsigned char *)(ids + 4) &&
			buf + i >= (unsigned char *)ids) ? 0 : buf[i] != 0xa5;
	CU_ASSERT_EQUAL(bad, 0);
	CU_ASSERT_EQUAL(kt_end(arena, sid), 0);
	CU_ASSERT_EQUAL(free_blocks(), NBLK);
	munmap(buf, 2 * pg);
}

void kt_register_blocks(void)
{
	CU_pSuite s = CU_add_suite("blocks", blocks_init, blocks_clean);

	KT_ADD(s, test_session_lifecycle);
	KT_ADD(s, test_alloc_free);
	KT_ADD(s, test_blocks_errors);
	KT_ADD(s, test_alloc_writes_only_done);
	KT_ADD(s, test_share);
	KT_ADD(s, test_idle_accounting);
}
