// SPDX-License-Identifier: GPL-2.0
/*
 * Test helpers: calloc failure injection and arena snapshots (kvc_test.h).
 * Owns no tests.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvc_test.h"

static long fail_countdown = -1;
static unsigned long calloc_calls;

void *__wrap_calloc(size_t n, size_t size)
{
	calloc_calls++;
	if (fail_countdown >= 0 && fail_countdown-- == 0)
		return NULL;
	return __real_calloc(n, size);
}

void kvc_fail_calloc(long k)
{
	fail_countdown = k;
}

unsigned long kvc_calloc_calls(void)
{
	return calloc_calls;
}

static void injection_off(void)
{
	kvc_fail_calloc(-1);
}

int kvc_test_add_suite(const char *name, const CU_TestInfo *tests)
{
	CU_pSuite suite;

	suite = CU_add_suite_with_setup_and_teardown(name, NULL, NULL,
						     injection_off,
						     injection_off);
	if (!suite)
		return CU_get_error();
	for (; tests->pName; tests++)
		if (!CU_add_test(suite, tests->pName, tests->pTestFunc))
			return CU_get_error();
	return CUE_SUCCESS;
}

struct kvc_snap {
	struct kvc_arena arena;		/* scalars; pointers not compared */
	u32 *free_ids;
	u32 *refcnt;
	u32 *free_slots;
	struct kvc_session *sess;	/* per slot; id 0 = empty slot */
	u32 **held;			/* per slot */
};

static void *dup_array(const void *p, size_t bytes)
{
	void *q = malloc(bytes ? bytes : 1);

	if (!q) {
		perror("malloc");
		abort();
	}
	if (p && bytes)
		memcpy(q, p, bytes);
	return q;
}

struct kvc_snap *kvc_snap_take(const struct kvc_arena *a)
{
	struct kvc_snap *snap = dup_array(NULL, sizeof(*snap));
	u32 i;

	snap->arena = *a;
	snap->free_ids = dup_array(a->pool.free_ids,
				   a->pool.nfree * sizeof(u32));
	snap->refcnt = dup_array(a->pool.refcnt, a->pool.nblocks * sizeof(u32));
	/* The free slots in ring order (kvc_arena.free_head). */
	snap->free_slots = dup_array(NULL, a->nfree_slots * sizeof(u32));
	for (i = 0; i < a->nfree_slots; i++)
		snap->free_slots[i] = a->free_slots[(a->free_head + i) %
						    a->nslots];
	snap->sess = dup_array(NULL, a->slots_used * sizeof(*snap->sess));
	snap->held = dup_array(NULL, a->slots_used * sizeof(u32 *));
	for (i = 0; i < a->slots_used; i++) {
		const struct kvc_session *s = a->slot[i];

		memset(&snap->sess[i], 0, sizeof(snap->sess[i]));
		snap->held[i] = NULL;
		if (!s)
			continue;
		snap->sess[i] = *s;
		snap->held[i] = dup_array(s->held, s->nheld * sizeof(u32));
	}
	return snap;
}

void kvc_snap_free(struct kvc_snap *snap)
{
	u32 i;

	for (i = 0; i < snap->arena.slots_used; i++)
		free(snap->held[i]);
	free(snap->held);
	free(snap->sess);
	free(snap->free_slots);
	free(snap->refcnt);
	free(snap->free_ids);
	free(snap);
}

#define SNAP_FIELD(x, y, what)						\
	do {								\
		if ((x) != (y)) {					\
			fprintf(stderr, "\n  snapshot: %s was %llu, now %llu\n", \
				what, (unsigned long long)(x),		\
				(unsigned long long)(y));		\
			return false;					\
		}							\
	} while (0)

static bool session_same(const struct kvc_session *o,
			 const struct kvc_session *s, const u32 *held, u32 slot)
{
	u32 i;

	if (!s) {
		fprintf(stderr, "\n  snapshot: slot %u lost its session\n", slot);
		return false;
	}
	SNAP_FIELD(o->id, s->id, "session id");
	SNAP_FIELD(o->state, s->state, "state");
	SNAP_FIELD(o->tool_class, s->tool_class, "tool_class");
	SNAP_FIELD(o->nheld, s->nheld, "nheld");
	SNAP_FIELD(o->cap, s->cap, "held cap");
	SNAP_FIELD(o->cookie, s->cookie, "cookie");
	SNAP_FIELD(o->expected_wait_us, s->expected_wait_us, "expected_wait");
	SNAP_FIELD(o->created_ns, s->created_ns, "created_ns");
	SNAP_FIELD(o->state_since_ns, s->state_since_ns, "state_since_ns");
	SNAP_FIELD(o->idle_settled_ns, s->idle_settled_ns, "idle_settled_ns");
	SNAP_FIELD(o->transitions, s->transitions, "transitions");
	SNAP_FIELD(o->idle_block_us, s->idle_block_us, "idle_block_us");
	for (i = 0; i < KVC_STATE_COUNT; i++)
		SNAP_FIELD(o->state_ns[i], s->state_ns[i], "state_ns[]");
	for (i = 0; i < o->nheld; i++)
		SNAP_FIELD(held[i], s->held[i], "held[] entry");
	return true;
}

bool kvc_snap_same(const struct kvc_snap *snap, const struct kvc_arena *a)
{
	const struct kvc_arena *o = &snap->arena;
	u32 i;

	SNAP_FIELD(o->pool.nblocks, a->pool.nblocks, "pool.nblocks");
	SNAP_FIELD(o->pool.nfree, a->pool.nfree, "pool.nfree");
	SNAP_FIELD(o->block_size, a->block_size, "block_size");
	SNAP_FIELD(o->max_sessions, a->max_sessions, "max_sessions");
	SNAP_FIELD(o->nsessions, a->nsessions, "nsessions");
	SNAP_FIELD(o->nslots, a->nslots, "nslots");
	SNAP_FIELD(o->slots_used, a->slots_used, "slots_used");
	SNAP_FIELD(o->nfree_slots, a->nfree_slots, "nfree_slots");
	SNAP_FIELD(o->sessions_ended, a->sessions_ended, "sessions_ended");
	SNAP_FIELD(o->ended_idle_block_us, a->ended_idle_block_us,
		   "ended_idle_block_us");
	for (i = 0; i < o->pool.nfree; i++)
		SNAP_FIELD(snap->free_ids[i], a->pool.free_ids[i], "free_ids[]");
	for (i = 0; i < o->pool.nblocks; i++)
		SNAP_FIELD(snap->refcnt[i], a->pool.refcnt[i], "refcnt[]");
	SNAP_FIELD(o->next_serial, a->next_serial, "next_serial");
	SNAP_FIELD(o->free_head, a->free_head, "free_head");
	for (i = 0; i < o->nfree_slots; i++)
		SNAP_FIELD(snap->free_slots[i],
			   a->free_slots[(a->free_head + i) % a->nslots],
			   "free_slots[]");
	for (i = 0; i < o->slots_used; i++) {
		if (!snap->sess[i].id) {
			if (a->slot[i]) {
				fprintf(stderr, "\n  snapshot: slot %u filled\n",
					i);
				return false;
			}
			continue;
		}
		if (!session_same(&snap->sess[i], a->slot[i], snap->held[i], i))
			return false;
	}
	return true;
}

struct kvc_session *kvc_must_find(const struct kvc_arena *a, u64 id)
{
	struct kvc_session *s = kvc_session_find(a, id);

	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	return s;
}

void kvc_new_arena(struct kvc_arena *a, u32 nblocks, u32 block_size,
		   u32 max_sessions)
{
	CU_ASSERT_EQUAL_FATAL(kvc_arena_init(a, nblocks, block_size,
					     max_sessions), 0);
}

u64 kvc_new_session(struct kvc_arena *a, u64 cookie, u64 now)
{
	u64 id = 0;

	CU_ASSERT_EQUAL_FATAL(kvc_session_create(a, cookie, now, &id), 0);
	CU_ASSERT_NOT_EQUAL_FATAL(id, 0);
	return id;
}

void kvc_alloc_ok(struct kvc_arena *a, u64 id, u32 n, u64 now, u32 *ids)
{
	u32 *buf = malloc((n ? n : 1) * sizeof(u32)), done = ~0u;

	CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
	CU_ASSERT_EQUAL_FATAL(kvc_blocks_alloc(a, id, n, false, UINT32_MAX,
					       now, buf, &done), 0);
	CU_ASSERT_EQUAL_FATAL(done, n);
	if (ids)
		memcpy(ids, buf, n * sizeof(u32));
	free(buf);
}

void kvc_state_ok(struct kvc_arena *a, u64 id, u32 state, u64 now)
{
	u32 released = ~0u;

	CU_ASSERT_EQUAL_FATAL(kvc_session_set_state(a, id, state, 0, 0, now,
						    &released), 0);
	CU_ASSERT_EQUAL(released, 0);
}

struct kva_session_info kvc_info_ok(struct kvc_arena *a, u64 id, u64 now)
{
	struct kva_session_info info;

	memset(&info, 0, sizeof(info));
	CU_ASSERT_EQUAL_FATAL(kvc_session_info(a, id, now, &info), 0);
	return info;
}
