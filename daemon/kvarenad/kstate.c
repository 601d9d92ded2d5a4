// SPDX-License-Identifier: MIT
/*
 * kstate.c - what the kernel hears from the orchestrator, and what it
 * says back. Session state changes (PREFILL, DECODE, TOOL_WAIT with tool
 * class and predicted wait, IDLE) are collected during a scheduler step
 * and sent together: through io_uring (many uring_cmds, one system call)
 * with kvarena.ko, one call each with the memfd backend. A parked
 * KVA_URING_WAIT_EVENT command brings the kernel's pressure events; on
 * one, the orchestrator frees blocks (the cache's unused ones first, then
 * the kernel's ranked victims) back up to the high watermark. Where the
 * arena says it can (KVA_SESSION_STATE_KEEP, _TIER), the kernel also hears
 * a tool's new prediction when it overruns (its ranking re-ranks) and
 * where each session's KV is (arena, disk, none: kvactl session list),
 * with the step's other changes. Events the kernel dropped (its queue
 * full) are made up for by a resync from the kernel's state (resync()).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "log.h"

#define RING_ENTRIES 256
#define UD_EVENT 1ull		/* user_data of the parked wait */

static void park_wait(struct kvd *d)
{
	if (!d->ring || d->ev_parked)
		return;
	memset(&d->ev, 0, sizeof(d->ev));
	d->ev.size = sizeof(d->ev);
	if (kva_ring_queue_wait_event(d->ring, &d->ev, d->ev_ack, UD_EVENT) == 0 &&
	    kva_ring_submit(d->ring) >= 0)
		d->ev_parked = 1;
}

/* Does the arena take SET_STATE's KEEP and TIER (a module older than
 * them refuses the flags)? Asked of a session made for the question. */
static int probe_update(struct kvd *d)
{
	uint64_t sid;
	int rc;

	if (kva_session_open(d->arena, 0, &sid))
		return 0;
	rc = kva_session_update(d->arena, sid, KVA_SESSION_STATE_KEEP | KVA_SESSION_STATE_TIER,
				KVA_STATE_IDLE, 0, 0, KVA_TIER_ARENA);
	kva_session_close(d->arena, sid);
	return rc == 0;
}

int kvd_kstate_init(struct kvd *d)
{
	int rc;

	d->kstate_update = probe_update(d);
	if (!d->kstate_update)
		kvd_log(KVD_LOG_INFO, "kstate", "the arena takes no session updates (an older "
			"kvarena.ko): re-predictions and tiers stay in the daemon");
	if (d->backend != KVA_BACKEND_KERNEL)
		return 0;
	rc = kva_ring_open(d->arena, RING_ENTRIES, &d->ring);
	if (rc) {
		kvd_log(KVD_LOG_WARN, "kstate", "io_uring: %s; state changes go by ioctl",
			strerror(-rc));
		d->ring = NULL;
	}
	park_wait(d);
	if (d->cfg.toolwait_bpf) {
		struct kva_toolwait_opts o = { 0 };

		o.size = sizeof(o);
		o.module = KVA_TOOLWAIT_AUTO;
		o.sched = KVA_TOOLWAIT_AUTO;
		o.usdt = KVA_TOOLWAIT_OFF;
		rc = kva_toolwait_open(&o, &d->tw);
		if (rc) {
			kvd_log(KVD_LOG_INFO, "kstate",
				"eBPF tool-wait programs not loaded (%s): waits are predicted "
				"from this daemon's own measurements", strerror(-rc));
			d->tw = NULL;
		} else {
			kvd_log(KVD_LOG_INFO, "kstate", "eBPF tool-wait programs: %s",
				kva_toolwait_describe(d->tw));
		}
	}
	return 0;
}

void kvd_kstate_fini(struct kvd *d)
{
	if (d->ring)
		kva_ring_close(d->ring);
	d->ring = NULL;
	if (d->tw)
		kva_toolwait_close(d->tw);
	d->tw = NULL;
	free(d->pending_st);
	d->pending_st = NULL;
	d->n_pending = d->cap_pending = 0;
}

int kvd_kstate_fd(struct kvd *d)
{
	return d->ring ? kva_ring_fd(d->ring) : -1;
}

/* c's change in this step (a later one replaces it), or a new one; NULL
 * without memory. *fresh: made now. */
static struct kva_session_state *pending_of(struct kvd *d, const struct kvd_conv *c, int *fresh)
{
	uint32_t i;

	*fresh = 0;
	for (i = 0; i < d->n_pending; i++)
		if (d->pending_st[i].st.session_id == c->as.sid)
			return &d->pending_st[i].st;
	if (d->n_pending == d->cap_pending) {
		uint32_t cap = d->cap_pending ? d->cap_pending * 2 : 64;
		void *p = realloc(d->pending_st, cap * sizeof(*d->pending_st));

		if (!p)
			return NULL;
		d->pending_st = p;
		d->cap_pending = cap;
	}
	*fresh = 1;
	return &d->pending_st[d->n_pending++].st;
}

/* The tier the kernel has not heard yet goes with st. */
static void add_tier(struct kvd *d, struct kvd_conv *c, struct kva_session_state *st)
{
	uint32_t t = kvd_tiering_ktier(c);

	if (!d->kstate_update || (t == c->ktier && !(st->flags & KVA_SESSION_STATE_TIER)))
		return;
	st->flags |= KVA_SESSION_STATE_TIER;
	st->tier = t;
	c->ktier = t;
}

void kvd_kstate_set(struct kvd *d, struct kvd_conv *c, uint32_t state,
		    uint32_t tool_class, uint64_t expected_us)
{
	struct kva_session_state *st;
	uint32_t had_tier, again;
	int fresh;

	if (!c->has_kv || (c->kstate == state && state != KVA_STATE_TOOL_WAIT))
		return;
	again = c->kstate == state;
	c->kstate = state;
	st = pending_of(d, c, &fresh);
	if (!st)
		return;
	/* a tier not yet sent stays with the change that replaces it */
	had_tier = !fresh && (st->flags & KVA_SESSION_STATE_TIER);
	/* a tool wait after one the kernel has: its new class and prediction
	 * without a transition (which it would refuse: EALREADY) */
	again = again && fresh && d->kstate_update;
	memset(st, 0, sizeof(*st));
	st->size = sizeof(*st);
	st->session_id = c->as.sid;
	st->state = state;
	if (state == KVA_STATE_TOOL_WAIT) {
		st->tool_class = tool_class;
		st->expected_wait_us = expected_us;
	}
	c->kclass = st->tool_class;
	c->kexpected_us = st->expected_wait_us;
	if (had_tier)
		st->flags = KVA_SESSION_STATE_TIER;
	if (again)
		st->flags |= KVA_SESSION_STATE_KEEP;
	add_tier(d, c, st);
}

/* No transition (KEEP): the state the kernel has (or gets in this step). */
static struct kva_session_state *keep_of(struct kvd *d, struct kvd_conv *c)
{
	struct kva_session_state *st;
	int fresh;

	st = pending_of(d, c, &fresh);
	if (st && fresh) {
		memset(st, 0, sizeof(*st));
		st->size = sizeof(*st);
		st->flags = KVA_SESSION_STATE_KEEP;
		st->session_id = c->as.sid;
		st->state = c->kstate;
		st->tool_class = c->kclass;
		st->expected_wait_us = c->kexpected_us;
	}
	return st;
}

void kvd_kstate_tier(struct kvd *d, struct kvd_conv *c)
{
	struct kva_session_state *st;

	if (!d->kstate_update || !c->has_kv || kvd_tiering_ktier(c) == c->ktier)
		return;
	st = keep_of(d, c);
	if (st)
		add_tier(d, c, st);
}

void kvd_kstate_repredict(struct kvd *d, struct kvd_conv *c, uint64_t expected_us)
{
	struct kva_session_state *st;

	if (!d->kstate_update || !c->has_kv || c->kstate != KVA_STATE_TOOL_WAIT)
		return;
	st = keep_of(d, c);
	if (!st || st->state != KVA_STATE_TOOL_WAIT)
		return;
	st->expected_wait_us = expected_us;
	c->kexpected_us = expected_us;
	add_tier(d, c, st);
}

/*
 * The kernel dropped events (its queue of KVA_EVENT_QUEUE was full while
 * this daemon was not waiting): a PRESSURE among them would go unheard
 * (the kernel re-arms it on our ack of a later event and posts it again
 * only at the next allocation that finds the arena low), and so would a
 * SESSION_ENDED of a session mirrored here. So look again: every mirrored
 * session's state in the kernel (one that is gone has lost its KV: it is
 * forgotten here and recomputed when it returns; a state the kernel does
 * not have is sent again), then the arena's free blocks, making room up
 * to the high watermark when below the low one. O(conversations with KV)
 * system calls, only after a drop. Logged once per burst (drops less than
 * a second apart).
 */
static void resync(struct kvd *d, uint64_t dropped)
{
	struct kva_arena_info ai = { .size = sizeof(ai) };
	uint32_t gone = 0, restated = 0, low, want;
	struct kvd_conv *c, *next;
	uint64_t now = kvd_now_ns();
	int quiet = d->resync_last_ns && now - d->resync_last_ns < 1000000000ull;

	d->m.kernel_events_dropped += dropped;
	d->m.kernel_resyncs++;
	d->resync_last_ns = now;
	for (c = d->convs; c; c = next) {
		struct kva_session_info si = { .size = sizeof(si) };
		int rc;

		next = c->next;
		if (!c->has_kv)
			continue;
		rc = kva_session_get_info(d->arena, c->as.sid, &si);
		if (rc == -ENOENT || (!rc && si.state == KVA_STATE_ENDED)) {
			struct kvd_job *j = c->job;

			/* ended outside this daemon: its blocks are gone (a
			 * step or disk transfer on them ends first: the next
			 * resync or its own error sees to it) */
			if (c->tier_op || c->tier_setup ||
			    (j && (j->inflight || j->state == JOB_KV_LOAD || j->state == JOB_KV_WAIT)))
				continue;
			kvd_conv_drop_kv(d, c);
			if (j && j->state == JOB_RUNNING) {
				/* recomputed on readmission, as if preempted */
				j->n_sched = 0;
				j->state = JOB_PREEMPTED;
			}
			gone++;
			continue;
		}
		if (!rc && si.state != c->kstate && c->kstate != KVA_STATE_ENDED) {
			uint32_t want_state = c->kstate;

			c->kstate = si.state;
			kvd_kstate_set(d, c, want_state, c->kclass, c->kexpected_us);
			restated++;
		}
	}
	if (kva_arena_get_info(d->arena, &ai))
		return;
	low = d->cfg.low_wm ? d->cfg.low_wm : ai.low_wm;
	if (!quiet)
		kvd_log(KVD_LOG_WARN, "kstate", "the kernel dropped %llu events (its queue was "
			"full): resync: %u blocks free (low %u), %u sessions ended outside, "
			"%u states sent again", (unsigned long long)dropped, ai.blocks_free, low,
			gone, restated);
	if (ai.blocks_free >= low)
		return;
	want = d->cfg.high_wm ? d->cfg.high_wm : ai.high_wm ? ai.high_wm : 2 * low;
	kvd_make_room(d, want < ai.blocks_total ? want : ai.blocks_total);
}

static void handle_event(struct kvd *d, int res)
{
	d->ev_parked = 0;
	if (res < 0) {
		if (res != -ECANCELED)
			kvd_log(KVD_LOG_WARN, "kstate", "wait event: %s", strerror(-res));
		return;
	}
	d->ev_ack = d->ev.seq;
	if (d->ev.dropped)
		resync(d, d->ev.dropped);
	if (d->ev.type == KVA_EVENT_PRESSURE) {
		struct kva_arena_info ai = { .size = sizeof(ai) };
		uint32_t want;

		d->m.pressure_events++;
		kva_arena_get_info(d->arena, &ai);
		/* back up to the high watermark (the kernel's default: 2 x low) */
		want = d->cfg.high_wm ? d->cfg.high_wm : 2 * d->ev.low_wm;
		kvd_log(KVD_LOG_INFO, "kstate", "pressure: %u blocks free (low %u), %u victims ranked",
			d->ev.blocks_free, d->ev.low_wm, d->ev.nvictims);
		kvd_make_room(d, want < ai.blocks_total ? want : ai.blocks_total);
	}
}

/* Reap completions without waiting; re-park the event wait. */
void kvd_kstate_poll(struct kvd *d)
{
	struct kva_ring_cqe cqe[32];
	int n, i;

	if (!d->ring)
		return;
	while ((n = kva_ring_reap(d->ring, cqe, 32, 0)) > 0) {
		for (i = 0; i < n; i++)
			if (cqe[i].user_data == UD_EVENT)
				handle_event(d, cqe[i].res);
	}
	park_wait(d);
}

void kvd_kstate_flush(struct kvd *d)
{
	uint32_t i, queued = 0, done = 0;
	struct kva_ring_cqe cqe[32];
	int rc;

	if (!d->n_pending)
		return;
	for (i = 0; i < d->n_pending; i++) {
		struct kva_session_state *st = &d->pending_st[i].st;

		if (d->ring) {
			rc = kva_ring_queue(d->ring, KVA_RING_SESSION_SET_STATE, st, 2 + i);
			if (rc == 0) {
				queued++;
				continue;
			}
		}
		rc = kva_session_update(d->arena, st->session_id, st->flags, st->state,
					st->tool_class, st->expected_wait_us, st->tier);
		if (rc && rc != -EALREADY && rc != -ENOENT)
			kvd_log(KVD_LOG_WARN, "kstate", "session %llu -> %s: %s",
				(unsigned long long)st->session_id,
				kva_state_name(st->state), strerror(-rc));
	}
	if (queued && kva_ring_submit(d->ring) >= 0) {
		/* wait for this step's completions: the args live in d->pending */
		while (done < queued) {
			int n = kva_ring_reap(d->ring, cqe, 32, 1);

			if (n <= 0)
				break;
			for (int k = 0; k < n; k++) {
				if (cqe[k].user_data == UD_EVENT) {
					handle_event(d, cqe[k].res);
					continue;
				}
				done++;
				if (cqe[k].res < 0 && cqe[k].res != -EALREADY && cqe[k].res != -ENOENT)
					kvd_log(KVD_LOG_WARN, "kstate", "uring set_state: %s",
						strerror(-cqe[k].res));
			}
		}
	}
	d->n_pending = 0;
	park_wait(d);
}

uint32_t kvd_blocks_free(struct kvd *d)
{
	struct kva_arena_info ai = { .size = sizeof(ai) };

	if (kva_arena_get_info(d->arena, &ai))
		return 0;
	return ai.blocks_free;
}

/* May c's blocks go? Not while a step computes on them (a server-side
 * tool round's KV waits like a client's), nor while they were prefetched
 * for a tool's return that is due (tiering.c). */
static int evictable(struct kvd *d, const struct kvd_conv *c)
{
	return c->has_kv && c->as.s.n_blocks && !c->tier_op && !c->tier_setup &&
	       (!c->job || c->job->state == JOB_TOOL_RUNNING) && !kvd_tiering_held(d, c);
}

/* The least recently used evictable conversation (of the tenant when one
 * is given), from the tail: jobs' conversations are skipped, at most as
 * many as there are jobs. */
static struct kvd_conv *oldest_idle(struct kvd *d, uint32_t tenant, int any)
{
	struct kvd_conv *c;

	for (c = d->convs_tail; c; c = c->prev)
		if (evictable(d, c) && (any || c->tenant == tenant))
			return c;
	return NULL;
}

/*
 * Victims go to disk or away by tiering.c's choice; a spill frees its
 * blocks when written, so less may be free on return than wanted: the
 * waiting request is admitted when the spill completes. Blocks that
 * spills in flight will free count as room: no more victims are taken
 * for them (without that, every victim ranked would be spilled while the
 * first one's write runs).
 */
uint32_t kvd_make_room(struct kvd *d, uint32_t want)
{
	struct kva_victim v[64];
	uint32_t free_now = kvd_blocks_free(d);
	int n, i, progress = 1;

#define COMING(f) ((f) + kvd_tiering_freeing(d))
	if (COMING(free_now) >= want)
		return free_now;
	kvd_prefix_evict(d, want - COMING(free_now));
	free_now = kvd_blocks_free(d);
	while (COMING(free_now) < want && progress) {
		progress = 0;
		n = kva_arena_victims(d->arena, KVA_POLICY_ARENA, v, 64);
		for (i = 0; i < n && COMING(free_now) < want; i++) {
			struct kvd_conv *c = kvd_conv_by_sid(d, v[i].session_id);

			if (!c || !evictable(d, c))
				continue;
			kvd_tiering_evict(d, c);
			/* what the victim gave back first: the cache only for
			 * the rest (its blocks may be what the victim's restore
			 * shares again) */
			free_now = kvd_blocks_free(d);
			if (COMING(free_now) < want)
				kvd_prefix_evict(d, want - COMING(free_now));
			free_now = kvd_blocks_free(d);
			progress = 1;
		}
		if (!progress) {
			/* the kernel ranked none we may evict: oldest idle first */
			struct kvd_conv *old = oldest_idle(d, 0, 1);

			if (old) {
				kvd_tiering_evict(d, old);
				free_now = kvd_blocks_free(d);
				if (COMING(free_now) < want)
					kvd_prefix_evict(d, want - COMING(free_now));
				free_now = kvd_blocks_free(d);
				progress = 1;
			}
		}
	}
#undef COMING
	return free_now;
}

uint32_t kvd_make_room_tenant(struct kvd *d, uint32_t tenant, uint32_t need)
{
	uint32_t slot = kvd_tenant_slot(d, tenant), lim, want, freed = 0;
	struct kvd_conv *c;

	lim = slot ? d->cfg.tenants[slot - 1].kv_blocks : 0;
	if (!lim)
		return 0;
	/* what the budget lacks, not all the caller needs: the rest of the
	 * tenant's idle KV stays */
	want = d->tenant_blocks[slot] + need > lim ? d->tenant_blocks[slot] + need - lim : 0;
	while (freed < want && (c = oldest_idle(d, tenant, 0))) {
		uint32_t n = c->as.s.n_blocks;

		kvd_tiering_evict(d, c);
		if (c->as.s.n_blocks == n && !c->tier_op)
			break;		/* nothing came free: do not spin */
		freed += n - (c->has_kv ? c->as.s.n_blocks : 0);
	}
	return freed;
}
