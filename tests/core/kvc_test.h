/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Shared helpers for the host unit tests of kmod/core: suite registration,
 * allocation-failure injection (the test binary is linked with
 * -Wl,--wrap=calloc, and the core allocates only through calloc), arena
 * snapshots for "an error leaves the arena unchanged", and the common
 * assertions.  The tests themselves live in test_<file>.c.
 */
#ifndef KVC_TEST_H
#define KVC_TEST_H

#include <stdio.h>
#include <CUnit/CUnit.h>

#include "kvc_arena.h"

/* Suites; each returns a CUE_* code. */
int kvc_test_register_pool(void);
int kvc_test_register_session(void);
int kvc_test_register_blocks(void);
int kvc_test_register_random(void);
int kvc_test_register_policy(void);
int kvc_test_register_args(void);
/* Add a suite; every test starts and ends with failure injection off. */
int kvc_test_add_suite(const char *name, const CU_TestInfo *tests);

/*
 * Allocation-failure injection.  kvc_fail_calloc(k): the k-th calloc from now
 * (0 = the next one) returns NULL; later ones succeed again.  -1 disarms.
 * kvc_calloc_calls() counts every calloc since the program started.
 */
void kvc_fail_calloc(long k);
unsigned long kvc_calloc_calls(void);
void *__real_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size);

/*
 * A deep copy of everything observable in an arena: pool arrays, slot
 * table, free slot ring, id serial, every live session including its
 * block table in order.  kvc_snap_same() reports the first difference on
 * stderr and returns false.
 */
struct kvc_snap;
struct kvc_snap *kvc_snap_take(const struct kvc_arena *a);
bool kvc_snap_same(const struct kvc_snap *snap, const struct kvc_arena *a);
void kvc_snap_free(struct kvc_snap *snap);

/* The session an id names, asserting that it exists. */
struct kvc_session *kvc_must_find(const struct kvc_arena *a, u64 id);

/*
 * Steps that must succeed (fatal CUnit assertions otherwise), for setting
 * up the situation a test is about.
 */
void kvc_new_arena(struct kvc_arena *a, u32 nblocks, u32 block_size,
		   u32 max_sessions);
u64 kvc_new_session(struct kvc_arena *a, u64 cookie, u64 now);
/* Allocate exactly n blocks; their ids go to ids (may be NULL). */
void kvc_alloc_ok(struct kvc_arena *a, u64 id, u32 n, u64 now, u32 *ids);
void kvc_state_ok(struct kvc_arena *a, u64 id, u32 state, u64 now);
struct kva_session_info kvc_info_ok(struct kvc_arena *a, u64 id, u64 now);

/* Shorthands. */
#define T_OK(expr)		CU_ASSERT_EQUAL((expr), 0)
#define T_ERR(expr, err)	CU_ASSERT_EQUAL((expr), -(err))
#define T_CHECK(a)		CU_ASSERT_EQUAL(kvc_arena_check(a), 0)

/*
 * Run an operation that must fail with err and leave the arena exactly as it
 * was (compared field by field), and still pass kvc_arena_check().
 */
#define T_ERR_UNCHANGED(a, expr, err)					\
	do {								\
		struct kvc_snap *snap_ = kvc_snap_take(a);		\
		int ret_ = (expr);					\
		CU_ASSERT_EQUAL(ret_, -(err));				\
		if (ret_ != -(err))					\
			fprintf(stderr, "\n  %s:%d: %s = %d, want %d\n",	\
				__FILE__, __LINE__, #expr, ret_, -(err));	\
		CU_ASSERT(kvc_snap_same(snap_, a));			\
		CU_ASSERT_EQUAL(kvc_arena_check(a), 0);			\
		kvc_snap_free(snap_);					\
	} while (0)

#endif /* KVC_TEST_H */
