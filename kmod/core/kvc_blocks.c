// SPDX-License-Identifier: GPL-2.0
/*
 * Block membership: allocating blocks into a session's block table, freeing
 * them, sharing allocated blocks into another session, and the invariant
 * check.  Each batch is validated completely before anything changes; bit 31
 * (KVC_MAX_BLOCKS) temporarily marks entries seen during validation.
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

int kvc_blocks_alloc(struct kvc_arena *a, u32 id, u32 n, bool partial,
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
	kvc_pool_alloc(&a->pool, n, s->held + s->nheld);
	memcpy(ids, s->held + s->nheld, n * sizeof(u32));
	s->nheld += n;
	*done = n;
	return 0;
}

/* Index of block in the session's table, searching from the newest. */
static int kvc_held_find(const struct kvc_session *s, u32 block)
{
	u32 i = s->nheld;

	while (i--)
		if ((s->held[i] & ~KVC_MARK) == block)
			return i;
	return -1;
}

static void kvc_held_unmark(struct kvc_session *s)
{
	u32 i;

	for (i = 0; i < s->nheld; i++)
		s->held[i] &= ~KVC_MARK;
}

int kvc_blocks_free(struct kvc_arena *a, u32 id, u32 n, const u32 *ids,
		    u64 now, u32 *released)
{
	struct kvc_session *s = kvc_session_find(a, id);
	u32 i, kept = 0, freed = 0;
	int j, ret = 0;

	*released = 0;
	if (!s)
		return -ENOENT;
	if (!n || n > KVA_MAX_BATCH)
		return -EINVAL;
	for (i = 0; i < n && !ret; i++) {
		if (!kvc_pool_valid(&a->pool, ids[i])) {
			ret = -EINVAL;
			break;
		}
		j = kvc_held_find(s, ids[i]);
		if (j < 0)
			ret = -ENOENT;
		else if (s->held[j] & KVC_MARK)
			ret = -EINVAL;
		else
			s->held[j] |= KVC_MARK;
	}
	if (ret) {
		kvc_held_unmark(s);
		return ret;
	}
	kvc_session_settle(s, now);
	for (i = 0; i < s->nheld; i++) {
		u32 b = s->held[i];

		if (b & KVC_MARK)
			freed += kvc_pool_put(&a->pool, b & ~KVC_MARK);
		else
			s->held[kept++] = b;
	}
	s->nheld = kept;
	*released = freed;
	return 0;
}

int kvc_blocks_share(struct kvc_arena *a, u32 id, u32 n, const u32 *ids,
		     u64 now)
{
	struct kvc_session *s = kvc_session_find(a, id);
	u32 *ref = a->pool.refcnt;
	u32 i;
	int ret = 0;

	if (!s)
		return -ENOENT;
	if (!n || n > KVA_MAX_BATCH)
		return -EINVAL;
	/* Refcounts never reach bit 31 (one per session): mark with it. */
	for (i = 0; i < n; i++) {
		u32 b = ids[i];

		if (!kvc_pool_valid(&a->pool, b))
			ret = -EINVAL;
		else if (!ref[b])
			ret = -ENOENT;
		else if (ref[b] & KVC_MARK)
			ret = -EINVAL;
		else if (kvc_held_find(s, b) >= 0)
			ret = -EEXIST;
		if (ret)
			break;
		ref[b] |= KVC_MARK;
	}
	if (!ret)
		ret = kvc_held_reserve(s, n);
	while (i--)
		ref[ids[i]] &= ~KVC_MARK;
	if (ret)
		return ret;
	kvc_session_settle(s, now);
	for (i = 0; i < n; i++) {
		kvc_pool_get(&a->pool, ids[i]);
		s->held[s->nheld++] = ids[i];
	}
	return 0;
}

int kvc_arena_check(const struct kvc_arena *a)
{
	const struct kvc_pool *p = &a->pool;
	struct kvc_session *s;
	u32 *refs, i, cursor = 0, live = 0;
	int ret = 0;

	refs = kvc_zalloc((size_t)p->nblocks * sizeof(u32));
	if (!refs)
		return -ENOMEM;
	while ((s = kvc_session_next(a, &cursor))) {
		live++;
		if (s->nheld > s->cap || s->state >= KVA_STATE_ENDED ||
		    kvc_session_find(a, s->id) != s)
			ret = -EUCLEAN;
		for (i = 0; i < s->nheld && !ret; i++) {
			if (s->held[i] >= p->nblocks)
				ret = -EUCLEAN;
			else
				refs[s->held[i]]++;
		}
	}
	if (live != a->nsessions || p->nfree > p->nblocks)
		ret = -EUCLEAN;
	for (i = 0; i < p->nblocks && !ret; i++)
		if (refs[i] != p->refcnt[i])
			ret = -EUCLEAN;
	/* Each free id exactly once, and only ids with no references. */
	for (i = 0; i < p->nfree && !ret; i++) {
		u32 b = p->free_ids[i];

		if (b >= p->nblocks || p->refcnt[b] || refs[b])
			ret = -EUCLEAN;
		else
			refs[b] = 1;
	}
	for (i = 0, cursor = 0; i < p->nblocks && !ret; i++)
		cursor += p->refcnt[i] ? 1 : 0;
	if (!ret && cursor + p->nfree != p->nblocks)
		ret = -EUCLEAN;
	kvc_free(refs);
	return ret;
}
