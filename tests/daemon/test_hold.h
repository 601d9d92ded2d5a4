/* SPDX-License-Identifier: MIT */
/*
 * test_hold.h - a daemon test takes part of the arena itself: a kvarena
 * session of the test's own holds blocks no holder of the daemon's has
 * (the room a test wants gone), and audit.c is told so. Test builds only.
 */
#ifndef KVD_TEST_HOLD_H
#define KVD_TEST_HOLD_H

#ifdef KVD_TEST_HOOKS
#include "internal.h"

/* With d->lock held: n of the arena's blocks taken by a kvarena session
 * of the test's own. 0 or a negative errno; *opened: the session is to
 * be closed. */
static inline int hold_blocks(struct kvd *d, uint32_t n, struct kve_arena_session *blk,
			      int *opened)
{
	uint32_t bt = d->geom.block_tokens;
	int rc = kve_arena_session_open(d->kv, 1, n * bt, blk);

	d->test_arena_shared = 1;	/* blocks no holder of the daemon's has */
	*opened = !rc;
	if (!rc)
		rc = kve_arena_session_reserve(d->kv, blk, n * bt);
	return rc;
}

/* The test's blocks given back (d->lock not held), if it holds them. */
static inline void release_blocks(struct kvd *d, struct kve_arena_session *blk, int *opened)
{
	if (!*opened)
		return;
	pthread_mutex_lock(&d->lock);
	kve_arena_session_close(d->kv, blk);
	pthread_mutex_unlock(&d->lock);
	*opened = 0;
}
#endif

#endif
