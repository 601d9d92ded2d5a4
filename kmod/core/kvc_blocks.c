// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Block membership: allocating blocks into a session's block table, freeing
 * them, sharing allocated blocks into another session, and the invariant
 * check.  Each batch is validated completely before anything changes; bit 31
 * of a block's refcount (KVC_MARK) temporarily marks the batch's ids, so a
 * batch costs O(batch + blocks held), whatever the sizes.
 *
 * What a block table costs is bounded: every reference counts against the
 * arena's budget (max_refs, checked by shares: allocations add at most
 * nblocks), and a table shrinks when a free leaves it three quarters
 * empty, so its capacity stays below max(8, 4 x blocks held).  Without the
 * shrink, sessions that each held the whole arena once would keep that
 * much each.
 */
#include "kvc_arena.h"

#define KVC_MARK	KVC_MAX_BLOCKS

static int kvc_held_reserve(struct kvc_session *s, u32 extra)
{
	u32 need = s->nheld + extra, cap = s->cap ? s->cap : 8;
	u32 *held;

	if (need <= s->cap)
		return 0;
	while (cap < need)
		cap *= 2;
	held = kvc_grow(s->held, s->nheld * sizeof(u32), cap * sizeof(u32));
	if (!held)
		return -ENOMEM;
	s->held = held;
	s->cap = cap;
	return 0;
}

/* After a free: halve the table while it is three quarters empty. */
static void kvc_held_shrink(struct kvc_session *s)
{
	u32 cap = s->cap;
	u32 *held;

	while (cap > 8 && s->nheld <= cap / 4)
		cap /= 2;
	if (cap == s->cap)
		return;
	held = kvc_grow(NULL, 0, cap * sizeof(u32));
	if (!held)
		return;			/* keep the larger one */
	memcpy(held, s->held, s->nheld * sizeof(u32));
	kvc_free(s->held);
	s->held = held;
	s->cap = cap;
}

int kvc_blocks_alloc(struct kvc_arena *a, u64 id, u32 n, bool partial,
		     u32 quota_left, u64 now, u32 *ids, u32 *done)
{
	struct kvc_session *s = kvc_session_find(a, id);
	int ret;

	*done = 0;
	if (!s)
		return -ENOENT;
	if (!n || n > KVA_MAX_BATCH)
		return -EINVAL;
	if (n > a->pool.nfree) {
		if (!partial || !a->pool.nfree)
			return -ENOSPC;
		n = a->pool.nfree;
	}
	if (n > quota_left) {
		if (!partial || !quota_left)
			return -EDQUOT;
		n = quota_left;
	}
	ret = kvc_held_reserve(s, n);
	if (ret)
		return ret;
	kvc_session_settle(s, now);
	s->last_active_ns = now;
	kvc_pool_alloc(&a->pool, n, s->held + s->nheld);
	memcpy(ids, s->held + s->nheld, n * sizeof(u32));
	s->nheld += n;
	a->nrefs += n;
	*done = n;
	return 0;
}

/*
 * Mark the batch's ids in the refcount array (bit 31: refcounts never get
 * there, one per session at most).  Fails on an id out of range (EINVAL),
 * not allocated (ENOENT) or repeated (EINVAL); unmarks on failure.
 */
static int kvc_batch_mark(struct kvc_pool *pool, u32 n, const u32 *ids)
{
	u32 i;
	int ret = 0;

	for (i = 0; i < n; i++) {
		u32 b = ids[i];

		if (!kvc_pool_valid(pool, b))
			ret = -EINVAL;
		else if (!pool->refcnt[b])
			ret = -ENOENT;
		else if (pool->refcnt[b] & KVC_MARK)
			ret = -EINVAL;
		if (ret)
			break;
		pool->refcnt[b] |= KVC_MARK;
	}
	if (ret)
		while (i--)
			pool->refcnt[ids[i]] &= ~KVC_MARK;
	return ret;
}

static void kvc_batch_unmark(struct kvc_pool *pool, u32 n, const u32 *ids)
{
	u32 i;

	for (i = 0; i < n; i++)
		pool->refcnt[ids[i]] &= ~KVC_MARK;
}

/* How many of the session's blocks are marked: one pass, O(held). */
static u32 kvc_held_marked(const struct kvc_session *s,
			   const struct kvc_pool *pool)
{
	u32 i, n = 0;

	for (i = 0; i < s->nheld; i++) {
		n += !!(pool->refcnt[s->held[i]] & KVC_MARK);
		kvc_resched(i + 1);
	}
	return n;
}

int kvc_blocks_free(struct kvc_arena *a, u64 id, u32 n, const u32 *ids,
		    u64 now, u32 *released)
{
	struct kvc_session *s = kvc_session_find(a, id);
	struct kvc_pool *pool = &a->pool;
	u32 i, kept = 0, freed = 0;
	int ret;

	*released = 0;
	if (!s)
		return -ENOENT;
	if (!n || n > KVA_MAX_BATCH)
		return -EINVAL;
	ret = kvc_batch_mark(pool, n, ids);
	if (ret)
		return ret;
	/* A session holds a block at most once: all held iff n are found. */
	if (kvc_held_marked(s, pool) != n) {
		kvc_batch_unmark(pool, n, ids);
		return -ENOENT;
	}
	kvc_session_settle(s, now);
	s->last_active_ns = now;
	for (i = 0; i < s->nheld; i++) {
		u32 b = s->held[i];

		if (pool->refcnt[b] & KVC_MARK) {
			pool->refcnt[b] &= ~KVC_MARK;
			freed += kvc_pool_put(pool, b);
		} else {
			s->held[kept++] = b;
		}
		kvc_resched(i + 1);
	}
	a->nrefs -= s->nheld - kept;
	s->nheld = kept;
	kvc_held_shrink(s);
	*released = freed;
	return 0;
}

int kvc_blocks_share(struct kvc_arena *a, u64 id, u32 n, const u32 *ids,
		     u64 now)
{
	struct kvc_session *s = kvc_session_find(a, id);
	struct kvc_pool *pool = &a->pool;
	u32 i;
	int ret;

	if (!s)
		return -ENOENT;
	if (!n || n > KVA_MAX_BATCH)
		return -EINVAL;
	ret = kvc_batch_mark(pool, n, ids);
	if (ret)
		return ret;
	if (kvc_held_marked(s, pool))
		ret = -EEXIST;
	else if (a->nrefs + n > a->max_refs)
		ret = -ENOSPC;		/* the arena's reference budget */
	else
		ret = kvc_held_reserve(s, n);
	kvc_batch_unmark(pool, n, ids);
	if (ret)
		return ret;
	kvc_session_settle(s, now);
	s->last_active_ns = now;
	for (i = 0; i < n; i++) {
		kvc_pool_get(pool, ids[i]);
		s->held[s->nheld++] = ids[i];
	}
	a->nrefs += n;
	return 0;
}

/* The slot table: free slots empty, distinct, and counted with the live. */
static int kvc_slots_check(const struct kvc_arena *a)
{
	u8 *seen;
	u32 i;
	int ret = 0;

	if (a->slots_used > a->nslots ||
	    a->nfree_slots + a->nsessions != a->slots_used)
		return -EUCLEAN;
	seen = kvc_zalloc(a->slots_used + 1);
	if (!seen)
		return -ENOMEM;
	for (i = 0; i < a->nfree_slots && !ret; i++) {
		u32 slot = a->free_slots[(a->free_head + i) % a->nslots];

		if (slot >= a->slots_used || a->slot[slot] || seen[slot])
			ret = -EUCLEAN;
		else
			seen[slot] = 1;
	}
	kvc_free(seen);
	return ret;
}

int kvc_arena_check(const struct kvc_arena *a)
{
	const struct kvc_pool *p = &a->pool;
	u32 *refs, *last, i, cursor = 0, live = 0, used = 0;
	u64 refs_total = 0;
	struct kvc_session *s;
	int ret;

	ret = kvc_slots_check(a);
	if (ret)
		return ret;
	refs = kvc_zalloc((size_t)p->nblocks * sizeof(u32));
	last = kvc_zalloc((size_t)p->nblocks * sizeof(u32));
	if (!refs || !last) {
		ret = -ENOMEM;
		goto out;
	}
	while ((s = kvc_session_next(a, &cursor))) {
		/* slot + 1: distinct among live sessions, never 0 */
		u32 tag = (u32)(s->id & KVC_SLOT_MASK);

		live++;
		refs_total += s->nheld;
		if (s->nheld > s->cap || s->state >= KVA_STATE_ENDED ||
		    kvc_session_find(a, s->id) != s ||
		    (s->id >> KVC_SLOT_BITS) >= a->next_serial)
			ret = -EUCLEAN;
		/* Every held id in range, and held once by this session. */
		for (i = 0; i < s->nheld && !ret; i++) {
			u32 b = s->held[i];

			if (b >= p->nblocks || last[b] == tag)
				ret = -EUCLEAN;
			else
				refs[b]++;
			if (!ret)
				last[b] = tag;
		}
	}
	if (live != a->nsessions || p->nfree > p->nblocks)
		ret = -EUCLEAN;
	if (!ret && refs_total != a->nrefs)
		ret = -EUCLEAN;
	for (i = 0; i < p->nblocks && !ret; i++) {
		if (refs[i] != p->refcnt[i])
			ret = -EUCLEAN;
		used += !!p->refcnt[i];
	}
	if (!ret && used + p->nfree != p->nblocks)
		ret = -EUCLEAN;
	/* Each free id exactly once, and only ids with no references. */
	for (i = 0; i < p->nfree && !ret; i++) {
		u32 b = p->free_ids[i];

		if (b >= p->nblocks || p->refcnt[b] || refs[b])
			ret = -EUCLEAN;
		else
			refs[b] = 1;
	}
out:
	kvc_free(refs);
	kvc_free(last);
	return ret;
}
