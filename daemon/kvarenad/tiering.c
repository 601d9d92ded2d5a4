// SPDX-License-Identifier: MIT
/*
 * tiering.c - where each conversation's KV lives, and the moves between:
 *
 *   arena  the blocks are in the arena (maybe with a clean copy on disk)
 *   disk   a spill file holds it; restored into fresh blocks before use
 *   none   nothing: recomputed from the conversation's tokens
 *
 * When a reply ends in tool calls the conversation's KV is kept, spilled
 * or discarded (kvt_decide: the predicted wait, the KV's size, this
 * machine's measured disk and recompute speeds, and whether the arena
 * needs the memory). A spilled conversation is restored by prefetch at
 * predicted return - restore time - margin (KVFlow), or on demand when
 * its request arrives first (a restore stall, counted and timed). A
 * victim the kernel ranks under pressure is spilled (or discarded, when
 * there is no disk tier or recomputing is cheaper); a tool that runs past
 * its prediction gets a new one from the class's histogram, conditioned
 * on the time it has run (a re-rank), and its KV is reconsidered.
 *
 * The disk tier (daemon/tier/) does the I/O on its own thread: nothing
 * here waits for it. Everything here runs under kvd.lock, in the
 * scheduler thread (completions and timers come through
 * kvd_tiering_poll) or where the scheduler's own calls are.
 *
 * Blocks during an operation: a spill only reads the conversation's
 * blocks, which stay allocated until its completion (a conversation that
 * resumes meanwhile keeps using them: the spill is cancelled and its file
 * dropped). A restore writes into blocks the conversation holds; if the
 * conversation lets go of its KV meanwhile (forgotten, truncated,
 * failed), the operation's ticket takes its kvarena session over and
 * closes it only when the restore has completed, so no block is freed
 * while the disk still writes into it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kvtier.h"
#include "log.h"

enum { TIMER_PREFETCH = 0, TIMER_OVERRUN = 1 };

/* The inflow's window: 16 slots of 250 ms. */
#define FLOW_SLOTS 16
#define FLOW_SLOT_NS 250000000ull

/* An operation in flight: the completion's ctx. */
struct kvd_tticket {
	struct kvd_conv *c;		/* NULL: the conversation let go of it */
	int restore;
	uint32_t first;			/* restore: first file block read */
	uint32_t want;			/* restore: positions it brings back */
	kvt_file_id file;
	struct kve_arena_session as;	/* restore abandoned: its blocks */
	int owns_as;
	uint32_t freeing;		/* eviction spill: blocks freed when written */
	uint32_t evicted;		/* eviction spill: its blocks, an eviction
					 * once written (spill_done) */
	int for_prefetch;		/* that eviction made a prefetch's room */
	uint64_t started_ns;
};

struct ttimer {
	uint64_t at;
	struct kvd_conv *c;
	uint32_t kind;
};

struct kvd_tiering {
	struct kvt *t;			/* NULL: no disk tier */
	struct kvt_costs costs;
	uint64_t shape_id;
	uint32_t in_flight;		/* tickets not yet completed */
	uint32_t freeing;		/* blocks eviction spills free when written */
	struct ttimer *heap;
	uint32_t n_heap, cap_heap;
	struct kvd_conv **due;		/* prefetches due that found no room */
	uint32_t n_due, cap_due;
	int for_prefetch;		/* evictions now make a prefetch's room */
	uint64_t flow_blocks;		/* the inflow: blocks filled, last sample */
	uint64_t flow_slot;		/* its last slot (FLOW_SLOT_NS) */
	uint32_t flow[FLOW_SLOTS];	/* blocks filled per slot, the last window */
};

uint32_t kvd_tiering_ktier(const struct kvd_conv *c)
{
	if (c->has_kv && c->as.s.n_blocks)
		return KVA_TIER_ARENA;
	return c->tier_file ? KVA_TIER_DISK : KVA_TIER_NONE;
}

const char *kvd_tiering_tier(const struct kvd_conv *c)
{
	static const char *const names[] = { "arena", "disk", "none" };

	return names[kvd_tiering_ktier(c)];
}

/* ---- timers: a min-heap, each conversation's entries indexed from it ----- */

static void heap_set(struct kvd_tiering *tr, uint32_t i, struct ttimer e)
{
	tr->heap[i] = e;
	e.c->tier_timer[e.kind] = i + 1;
}

static void heap_up(struct kvd_tiering *tr, uint32_t i)
{
	struct ttimer e = tr->heap[i];

	while (i) {
		uint32_t p = (i - 1) / 2;

		if (tr->heap[p].at <= e.at)
			break;
		heap_set(tr, i, tr->heap[p]);
		i = p;
	}
	heap_set(tr, i, e);
}

static void heap_down(struct kvd_tiering *tr, uint32_t i)
{
	struct ttimer e = tr->heap[i];

	for (;;) {
		uint32_t l = 2 * i + 1, m = i;

		if (l < tr->n_heap && tr->heap[l].at < (m == i ? e.at : tr->heap[m].at))
			m = l;
		if (l + 1 < tr->n_heap && tr->heap[l + 1].at < (m == i ? e.at : tr->heap[m].at))
			m = l + 1;
		if (m == i)
			break;
		heap_set(tr, i, tr->heap[m]);
		i = m;
	}
	heap_set(tr, i, e);
}

/* c's prefetch is due and waits for room (a few at a time: a list). */
static void due_add(struct kvd_tiering *tr, struct kvd_conv *c)
{
	if (c->tier_due)
		return;
	if (tr->n_due == tr->cap_due) {
		uint32_t cap = tr->cap_due ? tr->cap_due * 2 : 16;
		struct kvd_conv **v = realloc(tr->due, cap * sizeof(*v));

		if (!v)
			return;		/* admission just does not wait for it */
		tr->due = v;
		tr->cap_due = cap;
	}
	tr->due[tr->n_due++] = c;
	c->tier_due = 1;
}

static void due_del(struct kvd_tiering *tr, struct kvd_conv *c)
{
	uint32_t i;

	if (!c->tier_due)
		return;
	c->tier_due = 0;
	for (i = 0; i < tr->n_due; i++)
		if (tr->due[i] == c) {
			tr->due[i] = tr->due[--tr->n_due];
			return;
		}
}

static void timer_cancel(struct kvd_tiering *tr, struct kvd_conv *c, uint32_t kind)
{
	uint32_t i = c->tier_timer[kind];

	if (kind == TIMER_PREFETCH)
		due_del(tr, c);	/* due no more: started, returned, moved */
	if (!i)
		return;
	i--;
	c->tier_timer[kind] = 0;
	if (i == --tr->n_heap)
		return;
	{
		struct ttimer moved = tr->heap[tr->n_heap];

		heap_set(tr, i, moved);
		heap_up(tr, i);
		heap_down(tr, moved.c->tier_timer[moved.kind] - 1);
	}
}

static void timer_arm(struct kvd_tiering *tr, struct kvd_conv *c, uint32_t kind, uint64_t at)
{
	timer_cancel(tr, c, kind);
	if (tr->n_heap == tr->cap_heap) {
		uint32_t cap = tr->cap_heap ? tr->cap_heap * 2 : 64;
		struct ttimer *h = realloc(tr->heap, cap * sizeof(*h));

		if (!h)
			return;		/* no timer: the return restores on demand */
		tr->heap = h;
		tr->cap_heap = cap;
	}
	tr->heap[tr->n_heap] = (struct ttimer){ at, c, kind };
	heap_up(tr, tr->n_heap++);
}

/* n blocks of KV left the arena because the arena needed them. */
static void count_eviction(struct kvd *d, uint32_t n, int for_prefetch)
{
	d->m.evictions++;
	d->m.evicted_blocks += n;
	if (for_prefetch)
		d->m.evictions_prefetch++;
}

/* ---- the arena's state ------------------------------------------------------- */

/* The arena needs memory: free blocks below the high watermark. */
static int under_pressure(struct kvd *d)
{
	struct kva_arena_info ai = { .size = sizeof(ai) };
	uint32_t high;

	if (kva_arena_get_info(d->arena, &ai))
		return 0;
	high = ai.high_wm ? ai.high_wm : 2 * (ai.low_wm ? ai.low_wm : ai.blocks_total / 8);
	return ai.blocks_free < high;
}

static uint32_t bt_of(const struct kvd *d)
{
	return d->geom.block_tokens;
}

static uint64_t kv_bytes(const struct kvd *d, const struct kvd_conv *c)
{
	return (uint64_t)c->as.s.n_blocks * d->geom.block_size;
}

/* The stall rate a spill may risk: a restore is late at most this often. */
#define MAX_STALL 0.05

/* How long c's tool has run. */
static uint64_t elapsed_us(const struct kvd_conv *c, uint64_t now)
{
	return c->kstate == KVA_STATE_TOOL_WAIT && c->wait_started_ns && now > c->wait_started_ns ?
	       (now - c->wait_started_ns) / 1000 : 0;
}

static void arm_prefetch(struct kvd *d, struct kvd_conv *c, uint64_t now);

/* The session waits on a tool and nothing computes on its KV. */
static int idle_kv(const struct kvd_conv *c)
{
	return c->has_kv && (!c->job || c->job->state == JOB_TOOL_RUNNING);
}

/* ---- moves --------------------------------------------------------------------- */

static void drop_file(struct kvd *d, struct kvd_conv *c)
{
	if (!c->tier_file)
		return;
	kvt_drop(d->tier->t, c->tier_file);
	c->tier_file = 0;
	c->tier_file_tokens = 0;
	free(c->tier_bhash);
	c->tier_bhash = NULL;
	timer_cancel(d->tier, c, TIMER_PREFETCH);
	kvd_kstate_tier(d, c);
}

/* How many of the file's leading positions still hold the KV of the
 * conversation's tokens: a request may have cut the conversation back
 * (a client that rewrites its last turn); the blocks before the cut are
 * still good. Whole blocks, and the file's last, partial one. */
static uint32_t file_valid_tokens(const struct kvd *d, const struct kvd_conv *c)
{
	uint32_t bt = bt_of(d), nb = (c->tier_file_tokens + bt - 1) / bt, i, v = 0;
	uint64_t h = 0;

	if (!c->tier_bhash)
		return 0;
	for (i = 0; i < nb; i++) {
		uint32_t lo = i * bt, hi = lo + bt < c->tier_file_tokens ? lo + bt :
					     c->tier_file_tokens;

		if (c->n_tokens < hi)
			break;
		h = kvt_tokens_chain(h, c->tokens + lo, hi - lo);
		if (h != c->tier_bhash[i])
			break;
		v = hi;
	}
	return v;
}

/* The KV leaves the arena for nowhere: recomputed from the tokens. */
static void discard(struct kvd *d, struct kvd_conv *c, const char *why)
{
	uint32_t n = c->as.s.n_blocks;

	if (!c->has_kv || !n)
		return;
	c->tier_lost_tokens += c->as.s.n_tokens;
	d->m.tier_discards++;
	kvd_log(KVD_LOG_INFO, "tier", "%s: %u blocks discarded (%s), %u tokens recomputed "
		"if it returns", c->id, n, why, c->as.s.n_tokens);
	kvd_conv_free_blocks(d, c);
	kvd_kstate_tier(d, c);
}

/*
 * c's KV leaves the arena for its spill file: its blocks go back, and the
 * prefix cache lets go of those only c held (the file has them; kept
 * cached they would keep the memory the eviction is for, and the cache
 * would give up older, shared ones first). Blocks other conversations
 * hold, a shared system prompt, stay cached.
 */
static void free_to_disk(struct kvd *d, struct kvd_conv *c)
{
	uint32_t i = c->as.s.n_blocks, n, only[256];

	/* deepest first: the prefix cache's index lets go of leaves only;
	 * many blocks a call (prefix.c, cache_let_go) */
	while (i > c->tier_file_skip) {
		for (n = 0; i > c->tier_file_skip && n < 256;) {
			uint32_t b = c->as.s.block_table[--i];

			if (d->block_users[b] == 1)
				only[n++] = b;
		}
		if (n)
			kvd_prefix_drop(d, only, n);
	}
	kvd_conv_free_blocks(d, c);
	kvd_kstate_tier(d, c);
}

/* A copy of exactly the KV the arena holds is on disk. */
static int clean_copy(const struct kvd_conv *c)
{
	return c->tier_file && !c->tier_op && c->has_kv && c->as.s.n_blocks &&
	       c->tier_file_tokens == c->as.s.n_tokens;
}

static struct kvd_tticket *ticket(struct kvd_conv *c, int restore, kvt_file_id f)
{
	struct kvd_tticket *tk = calloc(1, sizeof(*tk));

	if (tk) {
		tk->c = c;
		tk->restore = restore;
		tk->file = f;
		tk->started_ns = kvd_now_ns();
	}
	return tk;
}

/* Makes the file fit the cap: the oldest files go first (their
 * conversations keep what the arena holds, or become recomputed). */
static int make_disk_room(struct kvd *d, uint64_t bytes)
{
	struct kvt *t = d->tier->t;
	uint64_t cap = kvt_cap_bytes(t);

	if (!cap)
		return 0;
	if (bytes > cap)
		return -ENOSPC;
	while (kvt_bytes_used(t) + bytes > cap) {
		void *owner = NULL;
		kvt_file_id f = kvt_oldest(t, &owner);
		struct kvd_conv *c = owner;

		if (!f)
			return -ENOSPC;		/* the rest is being written or read */
		kvt_drop(t, f);
		d->m.tier_disk_evictions++;
		if (c && c->tier_file == f) {
			c->tier_file = 0;
			timer_cancel(d->tier, c, TIMER_PREFETCH);
			if (!c->has_kv || !c->as.s.n_blocks)
				c->tier_lost_tokens += c->tier_file_tokens;
			c->tier_file_tokens = 0;
			free(c->tier_bhash);
			c->tier_bhash = NULL;
			kvd_log(KVD_LOG_INFO, "tier", "%s: spill file removed (disk cap, oldest first)",
				c->id);
		}
		/* the bytes come back when the tier thread has removed it */
		if (kvt_bytes_used(t) + bytes > cap)
			return -EAGAIN;
	}
	return 0;
}

/* Starts writing c's KV to disk; its blocks are freed at completion.
 * 0 started (or nothing to write), <0 not possible now. */
static int start_spill(struct kvd *d, struct kvd_conv *c, int evicting)
{
	struct kvd_tiering *tr = d->tier;
	uint32_t bt = bt_of(d), nb, i, skip;
	struct kvd_tticket *tk;
	struct kvt_ident id;
	uint64_t *bh;
	kvt_file_id f;
	int rc;

	if (!tr->t || !idle_kv(c) || c->tier_op || !c->as.s.n_tokens)
		return -EINVAL;
	if (clean_copy(c)) {
		/* already on disk: the blocks can go at once */
		if (!evicting)
			return 0;
		d->m.tier_spills_clean++;
		free_to_disk(d, c);
		arm_prefetch(d, c, kvd_now_ns());
		return 0;
	}
	drop_file(d, c);
	nb = (c->as.s.n_tokens + bt - 1) / bt;
	if (nb > c->as.s.n_blocks)
		return -EINVAL;
	/* the leading blocks other conversations hold too, through the
	 * prefix cache (a system prompt every agent shares), stay in the
	 * arena anyway and are shared again at restore: only the rest is
	 * written (at least one block). Blocks only this conversation holds
	 * are written even when cached: the cache lets go of those first. */
	for (skip = 0; skip + 1 < nb && (skip + 1) * bt <= c->as.s.n_tokens &&
	     d->block_users[c->as.s.block_table[skip]] > 1 &&
	     kvd_prefix_cached(d, c->as.s.block_table[skip]); skip++)
		;
	rc = make_disk_room(d, kvt_file_bytes(tr->t, nb - skip));
	if (rc)
		return rc;
	id.key = c->tier_key;
	id.n_tokens = c->as.s.n_tokens;
	id.tokens_hash = kvt_tokens_hash(c->tokens, c->as.s.n_tokens);
	tk = ticket(c, 0, 0);
	bh = malloc(nb * sizeof(*bh));
	if (!tk || !bh) {
		free(tk);
		free(bh);
		return -ENOMEM;
	}
	for (i = 0; i < nb; i++) {
		uint32_t lo = i * bt, hi = lo + bt < id.n_tokens ? lo + bt : id.n_tokens;

		bh[i] = kvt_tokens_chain(i ? bh[i - 1] : 0, c->tokens + lo, hi - lo);
	}
	rc = kvt_spill(tr->t, &id, c->as.s.block_table + skip, nb - skip, tk, &f);
	if (rc) {
		free(tk);
		free(bh);
		return rc;
	}
	c->tier_bhash = bh;
	tk->file = f;
	kvt_set_owner(tr->t, f, c);	/* the cap's eviction finds c by it */
	c->tier_op = tk;
	c->tier_file = f;
	c->tier_file_tokens = id.n_tokens;
	c->tier_file_hash = id.tokens_hash;
	c->tier_file_skip = skip;
	c->tier_spill_evicting = evicting;
	if (evicting) {
		/* the blocks only c holds go back to the pool when written:
		 * room on its way, which kvd_make_room counts (else it would
		 * take victim after victim while the first one's write runs) */
		for (i = 0; i < c->as.s.n_blocks; i++)
			tk->freeing += d->block_users[c->as.s.block_table[i]] == 1;
		tr->freeing += tk->freeing;
	}
	tr->in_flight++;
	return 0;
}

/* c holds no KV beyond a block-aligned prefix short of the file's valid
 * `want` tokens: nothing, or the prefix cache's blocks a restore that
 * lacked room attached. (Holding them made c look restored to the next
 * try before, which dropped the file and recomputed all but the shared
 * prefix, counted nowhere: 66 of toolwait's 124 resumed turns in an
 * eviction trial.) */
static int restoring(const struct kvd *d, const struct kvd_conv *c, uint32_t want)
{
	uint32_t bt = bt_of(d), n = c->has_kv ? c->as.s.n_tokens : 0;

	return n < want && n % bt == 0 && (!c->has_kv || c->as.s.n_blocks == n / bt);
}

/* Starts reading c's spill file back into fresh blocks; the leading full
 * blocks the prefix cache holds are shared instead of read. 0 started
 * (c->tier_op set) or done (all from the cache), -EAGAIN no room yet,
 * other <0: the file cannot be used (c is recomputed). A prefetch takes
 * free blocks only (prefetch_room made them, in the order of expected
 * returns): making room here would evict by the kernel's ranking, KV
 * due back sooner too. */
static int start_restore(struct kvd *d, struct kvd_conv *c, uint32_t want, int prefetch)
{
	struct kvd_tiering *tr = d->tier;
	uint32_t bt = bt_of(d), covered = 0, first, nb;
	struct kvd_tticket *tk;
	struct kvt_ident id;
	int rc;

	if (c->tier_op || !c->tier_file || !want || want > c->tier_file_tokens)
		return -EINVAL;
	if (!c->has_kv) {
		rc = kvd_conv_open_kv(d, c);
		if ((rc == -ENOSPC || rc == -EBUSY) && !prefetch) {
			kvd_make_room(d, 1);
			rc = kvd_conv_open_kv(d, c);
		}
		if (rc)
			return rc == -ENOSPC || rc == -EBUSY ? -EAGAIN : rc;
	}
	if (!restoring(d, c, want))
		return -EINVAL;		/* the arena holds it: nothing to read */
	c->tier_setup = 1;		/* not a victim while its blocks are found */
	/* what an earlier try that lacked room attached is still held */
	covered = c->as.s.n_tokens;
	if (!covered && d->cfg.prefix_cache)
		covered = kvd_prefix_attach(d, c, want);
	if (covered >= want) {
		c->tier_setup = 0;
		d->m.tier_restore_cached_tokens += covered;
		return 0;
	}
	rc = prefetch ? kvd_conv_reserve_free(d, c, want - covered) :
			kvd_conv_reserve(d, c, want - covered);
	c->tier_setup = 0;
	if (rc) {
		/* keep what the cache gave (given back, the next room made
		 * for the waiting request took it from the cache, and the
		 * file's skipped blocks were lost); the rest when there is
		 * room. A prefetch gives it back: its conversation waits on
		 * a tool, where holding a part would make it a victim */
		if (prefetch)
			kvd_conv_free_blocks(d, c);
		return rc == -EDQUOT ? rc : -EAGAIN;
	}
	first = covered / bt;
	if (first < c->tier_file_skip) {
		/* the cache lost blocks the file does not hold: recompute
		 * from what it still had */
		return -ESTALE;
	}
	d->m.tier_restore_cached_tokens += covered;
	nb = (want + bt - 1) / bt;
	id.key = c->tier_key;
	id.n_tokens = c->tier_file_tokens;	/* what the file was written as */
	id.tokens_hash = c->tier_file_hash;
	tk = ticket(c, 1, c->tier_file);
	if (!tk)
		return -ENOMEM;
	tk->first = first;
	tk->want = want;
	rc = kvt_restore(tr->t, c->tier_file, &id, first - c->tier_file_skip, nb - first,
			 c->as.s.block_table + first, tk);
	if (rc) {
		free(tk);
		return rc;
	}
	c->tier_op = tk;
	tr->in_flight++;
	return 0;
}

/* The conversation lets go of an operation in flight (its KV is about
 * to change or go): a spill is cancelled (its file dropped; the blocks it
 * reads stay the conversation's), a restore's ticket takes the session. */
void kvd_tiering_abandon(struct kvd *d, struct kvd_conv *c)
{
	struct kvd_tticket *tk = c->tier_op;

	if (!tk)
		return;
	c->tier_op = NULL;
	tk->c = NULL;
	d->tier->freeing -= tk->freeing;	/* the blocks stay c's */
	tk->freeing = 0;
	if (tk->restore) {
		kvd_conv_detach_kv(d, c, &tk->as);
		tk->owns_as = 1;
		c->stall_since_ns = 0;
	} else {
		drop_file(d, c);
	}
}

/*
 * A spilled session's restore starts so that it is back before its tool
 * returns: at the time by which the tool has returned with probability
 * MAX_STALL (the conditional quantile of the class's distribution, given
 * how long it has run), less the restore time and the margin; while the
 * class has too few samples, at the predicted (mean) return less those.
 */
static uint64_t prefetch_due_ns(struct kvd *d, struct kvd_conv *c, uint64_t now)
{
	uint32_t bt = bt_of(d);
	uint64_t bytes, lead;
	int64_t q;

	bytes = kvt_file_bytes(d->tier->t, (c->tier_file_tokens + bt - 1) / bt - c->tier_file_skip);
	lead = kvt_restore_us(&d->tier->costs, bytes) + (uint64_t)d->cfg.tier_margin_ms * 1000;
	q = kvd_toolwait_quantile_us(d, c->tool_class, elapsed_us(c, now), MAX_STALL);
	if (q >= 0)
		return now + ((uint64_t)q > lead ? ((uint64_t)q - lead) * 1000ull : 0);
	return kvt_prefetch_at_ns(&d->tier->costs, c->wait_started_ns, c->tool_pred_us, bytes,
				  (uint64_t)d->cfg.tier_margin_ms * 1000);
}

static void arm_prefetch(struct kvd *d, struct kvd_conv *c, uint64_t now)
{
	/* once per prediction: KV prefetched and then taken again before
	 * the tool returned comes back when the result does, or when the
	 * tool overruns and is predicted anew (prefetching it again for
	 * the same prediction would take another's room, which would be
	 * prefetched again: a restore loop of the whole disk tier under
	 * pressure) */
	if (!d->cfg.tier_prefetch || c->kstate != KVA_STATE_TOOL_WAIT || !c->wait_started_ns ||
	    !c->tool_pred_us || !c->tier_file || c->tier_prefetched)
		return;
	timer_arm(d->tier, c, TIMER_PREFETCH, prefetch_due_ns(d, c, now));
}

/* ---- completions -------------------------------------------------------------- */

static void spill_done(struct kvd *d, struct kvd_tticket *tk, const struct kvt_done *dn)
{
	struct kvd_conv *c = tk->c;

	d->tier->freeing -= tk->freeing;
	if (!dn->status)
		kvt_costs_add_write(&d->tier->costs, dn->bytes, dn->ns);
	if (!c)
		return;		/* cancelled: the file is being removed */
	c->tier_op = NULL;
	if (dn->status) {
		d->m.tier_spill_failures++;
		kvd_log(KVD_LOG_WARN, "tier", "%s: spill failed: %s", c->id, strerror(-dn->status));
		drop_file(d, c);
		return;
	}
	d->m.tier_spills++;
	d->m.tier_spill_bytes += dn->bytes;
	/* written behind (a tool wait's decision): the blocks stay, and an
	 * eviction frees them at once when the arena needs them */
	if (!c->tier_spill_evicting)
		return;
	if (tk->evicted)	/* the KV leaves the arena now: an eviction (one
				 * whose conversation resumed or ended first never
				 * left it) */
		count_eviction(d, tk->evicted, tk->for_prefetch);
	kvd_log(KVD_LOG_DEBUG, "tier", "%s: %u blocks on disk (%.1f MB in %.1f ms)", c->id,
		c->as.s.n_blocks, (double)dn->bytes / 1e6, (double)dn->ns / 1e6);
	free_to_disk(d, c);
	arm_prefetch(d, c, kvd_now_ns());	/* back before the tool returns */
}

const char *const kvd_stall_cause_names[KVD_STALL_CAUSES] = {
	[KVD_STALL_NO_PREFETCH] = "no_prefetch", [KVD_STALL_EARLY] = "early",
	[KVD_STALL_NO_ROOM] = "no_room", [KVD_STALL_READING] = "reading",
	[KVD_STALL_TAKEN] = "taken_again", [KVD_STALL_NO_SLACK] = "no_slack",
};

/* Why c's KV is not back when its request needs it: what its tool wait's
 * prefetch did (before the return cancels its timer). */
static void stall_cause(struct kvd *d, struct kvd_conv *c, uint64_t now)
{
	uint32_t t = c->tier_timer[TIMER_PREFETCH];

	c->stall_early_ms = 0;
	if (c->tier_op && c->tier_op->restore)
		c->stall_cause = KVD_STALL_READING;
	else if (c->tier_prefetched)
		c->stall_cause = KVD_STALL_TAKEN;
	else if (c->tier_noslack)
		c->stall_cause = KVD_STALL_NO_SLACK;
	else if (c->tier_noroom)
		c->stall_cause = KVD_STALL_NO_ROOM;
	else if (t && d->tier->heap[t - 1].at > now) {
		c->stall_cause = KVD_STALL_EARLY;
		c->stall_early_ms = (uint32_t)((d->tier->heap[t - 1].at - now) / 1000000ull);
	} else
		c->stall_cause = KVD_STALL_NO_PREFETCH;
}

static int takeable(const struct kvd_conv *o, const struct kvd_conv *c, uint64_t back);
static uint64_t expected_back_ns(const struct kvd_conv *c);

const char *const kvd_room_holder_names[KVD_ROOM_HOLDERS] = {
	[KVD_ROOM_FREE] = "free", [KVD_ROOM_WANTED] = "wanted", [KVD_ROOM_CACHED] = "cached",
	[KVD_ROOM_RUNNING] = "running", [KVD_ROOM_QUEUED] = "queued", [KVD_ROOM_HELD] = "held",
	[KVD_ROOM_MOVING] = "moving", [KVD_ROOM_SOONER] = "sooner", [KVD_ROOM_LATER] = "later",
};

/*
 * Where the arena's blocks were when c's tool returned and its prefetch
 * had found no room: a full arena (turns running or queued, KV of
 * conversations back sooner) or room the prefetch could have taken
 * (`later`, which prefetch_room takes: a defect if ever counted). Blocks
 * a prefix shares count once per conversation holding them.
 */
static void room_census(struct kvd *d, const struct kvd_conv *c)
{
	uint64_t back = expected_back_ns(c), n[KVD_ROOM_HOLDERS] = { 0 };
	const struct kvd_conv *o;
	char line[KVD_ROOM_HOLDERS * 32];
	size_t len = 0;
	uint32_t i;

	n[KVD_ROOM_FREE] = kvd_blocks_free(d);
	n[KVD_ROOM_WANTED] = d->room_wanted;
	n[KVD_ROOM_CACHED] = d->cfg.prefix_cache ? d->radix.n_evictable : 0;
	for (o = d->convs; o; o = o->next) {
		uint32_t b = o->has_kv && o != c ? o->as.s.n_blocks : 0;

		if (!b)
			continue;
		if (!idle_kv(o))
			n[o->job->state == JOB_QUEUED ? KVD_ROOM_QUEUED : KVD_ROOM_RUNNING] += b;
		else if (o->tier_hold && o->kstate == KVA_STATE_TOOL_WAIT)
			n[KVD_ROOM_HELD] += b;
		else if (o->tier_op || o->tier_setup)
			n[KVD_ROOM_MOVING] += b;
		else
			n[takeable(o, c, back) ? KVD_ROOM_LATER : KVD_ROOM_SOONER] += b;
	}
	d->m.tier_noroom_returns++;
	for (i = 0; i < KVD_ROOM_HOLDERS; i++) {
		d->m.tier_noroom_blocks[i] += n[i];
		len += snprintf(line + len, sizeof(line) - len, " %s %llu", kvd_room_holder_names[i],
				(unsigned long long)n[i]);
	}
	kvd_log(KVD_LOG_INFO, "tier", "%s: no room at the return, blocks:%s", c->id, line);
}

static void log_stall(const struct kvd_conv *c, uint64_t now, const struct kvd_tticket *tk)
{
	kvd_log(KVD_LOG_INFO, "tier", "%s: restore stall %.1f ms (read %.1f ms), %s: tool class "
		"%u, predicted %.1f ms, %u prefetch tries without room, due %u ms after the "
		"return", c->id, (double)(now - c->stall_since_ns) / 1e6,
		(double)(now - tk->started_ns) / 1e6, kvd_stall_cause_names[c->stall_cause],
		c->tool_class, (double)c->tool_pred_us / 1e3, c->tier_noroom, c->stall_early_ms);
}

static void restore_done(struct kvd *d, struct kvd_tticket *tk, const struct kvt_done *dn)
{
	struct kvd_conv *c = tk->c;
	uint32_t bt = bt_of(d), valid;
	uint64_t now = kvd_now_ns();

	if (!dn->status)
		kvt_costs_add_read(&d->tier->costs, dn->bytes, dn->ns);
	if (tk->owns_as) {
		/* abandoned: the disk is done with these blocks now */
		kve_arena_session_close(d->kv, &tk->as);
		return;
	}
	if (!c)
		return;
	c->tier_op = NULL;
	valid = (tk->first + dn->blocks_ok) * bt;
	if (!dn->status || valid > tk->want)
		valid = tk->want;
	if (valid > c->as.s.n_tokens)
		c->as.s.n_tokens = valid;
	c->turn_restored = c->as.s.n_tokens;
	kvd_hist_add(&d->m.tier_restore_ms, (double)(now - tk->started_ns) / 1e6);
	if (dn->status) {
		static const char *const why[] = { "checksum", "truncated", "stale", "io" };
		int k = dn->status == -EBADMSG ? 0 : dn->status == -ENODATA ? 1 :
			dn->status == -ESTALE ? 2 : 3;

		d->m.tier_restore_failures[k]++;
		c->tier_lost_tokens += tk->want - c->as.s.n_tokens;
		kvd_log(KVD_LOG_WARN, "tier", "%s: restore failed (%s: %s): %u tokens verified and "
			"kept, %u recomputed", c->id, why[k], strerror(-dn->status),
			c->as.s.n_tokens, tk->want - c->as.s.n_tokens);
		drop_file(d, c);
	} else {
		d->m.tier_restores++;
		d->m.tier_restore_bytes += dn->bytes;
	}
	if (c->stall_since_ns) {
		d->m.tier_restore_stalls++;
		d->m.tier_stall_causes[c->stall_cause]++;
		kvd_hist_add(&d->m.tier_restore_stall_ms, (double)(now - c->stall_since_ns) / 1e6);
		c->turn_stall_ms = (uint32_t)((now - c->stall_since_ns + 999999) / 1000000);
		log_stall(c, now, tk);
		c->stall_since_ns = 0;
	}
	kvd_kstate_tier(d, c);
	if (c->delete_pending && !c->job)
		kvd_conv_free(d, c);
}

/* ---- decisions --------------------------------------------------------------- */

struct surv_ctx {
	struct kvd *d;
	const struct kvd_conv *c;
	uint64_t elapsed_us;
};

static double surv(void *ctx, uint64_t horizon_us)
{
	struct surv_ctx *s = ctx;

	return kvd_toolwait_survival(s->d, s->c->tool_class, s->elapsed_us, horizon_us);
}

static void decide(struct kvd *d, struct kvd_conv *c, uint64_t wait_us, int pressure,
		   struct kvt_decision *o)
{
	struct kvd_tiering *tr = d->tier;
	uint32_t bt = bt_of(d);
	struct surv_ctx sc = { d, c, elapsed_us(c, kvd_now_ns()) };
	struct kvt_decision_in in = {
		.kv_bytes = kv_bytes(d, c),
		.kv_tokens = c->as.s.n_tokens,
		.predicted_wait_us = wait_us,
		.margin_us = (uint64_t)d->cfg.tier_margin_ms * 1000,
		.pressure = pressure,
		.max_stall = MAX_STALL,
	};

	/* the tool class's distribution, for a wait in a tool call */
	if (c->kstate == KVA_STATE_TOOL_WAIT && c->tool_class) {
		in.survival = surv;
		in.survival_ctx = &sc;
	}

	if (tr->t) {
		uint64_t cap = kvt_cap_bytes(tr->t);
		uint64_t fb = kvt_file_bytes(tr->t, (c->as.s.n_tokens + bt - 1) / bt);

		in.disk_ok = !cap || fb <= cap;
	}
	kvt_decide(&tr->costs, &in, o);
}

static void log_decision(struct kvd *d, struct kvd_conv *c, const char *when, uint64_t wait_us,
			 int pressure, const struct kvt_decision *o)
{
	char rc[32];

	if (o->recompute_us == UINT64_MAX)
		snprintf(rc, sizeof(rc), "unmeasured");
	else
		snprintf(rc, sizeof(rc), "%.1f ms", (double)o->recompute_us / 1e3);
	kvd_log(o->choice == KVT_KEEP ? KVD_LOG_DEBUG : KVD_LOG_INFO, "tier",
		"%s: %s: %s (tool class %u, wait %.1f ms, P(outlasts) %.2f, KV %.2f MiB / %u "
		"tokens, spill %.1f ms, restore %.1f ms, recompute %s, pressure %s): %s", c->id,
		when, kvt_choice_name(o->choice), c->tool_class, (double)wait_us / 1e3,
		o->p_outlast, (double)kv_bytes(d, c) / 1048576.0, c->as.s.n_tokens,
		(double)o->spill_us / 1e3, (double)o->restore_us / 1e3, rc,
		pressure ? "yes" : "no", o->why);
}

/*
 * Write a spill ahead, at the tool wait, or only when an eviction takes
 * the blocks (lazy)? Lazy by default: a write ahead for a session that
 * is never evicted is disk bandwidth and cap taken from the restores for
 * nothing, and the arena under pressure has other idle KV to give first;
 * the cost of lazy is that the eviction waits for the write (its blocks
 * are freed when it is on disk: tens of ms for a 2k-token context at the
 * measured bandwidth, against seconds to recompute it). Ahead only when
 * the arena's shortfall (to its high watermark) is more than every other
 * idle conversation holds: this one is going whichever the ranking.
 */
static int spill_ahead(struct kvd *d, const struct kvd_conv *c)
{
	struct kva_arena_info ai = { .size = sizeof(ai) };
	const struct kvd_conv *o;
	uint32_t high, short_by, others = 0;

	if (kva_arena_get_info(d->arena, &ai))
		return 1;
	high = ai.high_wm ? ai.high_wm : 2 * (ai.low_wm ? ai.low_wm : ai.blocks_total / 8);
	short_by = high > ai.blocks_free ? high - ai.blocks_free : 0;
	for (o = d->convs; o && others < short_by; o = o->next)
		if (o != c && idle_kv(o) && o->as.s.n_blocks && !o->tier_op && !o->tier_setup)
			others += o->as.s.n_blocks;
	return others < short_by;
}

void kvd_tiering_tool_wait(struct kvd *d, struct kvd_conv *c, uint64_t pred_us)
{
	struct kvd_tiering *tr = d->tier;
	struct kvt_decision o;
	int pressure;

	if (!tr)
		return;
	c->tool_pred_us = pred_us;
	c->tool_overran = 0;
	c->tier_prefetched = 0;
	c->tier_noroom = 0;
	c->tier_noslack = 0;
	c->tier_hold = 0;
	timer_cancel(tr, c, TIMER_PREFETCH);
	/* re-rank when the tool outlives its prediction */
	timer_arm(tr, c, TIMER_OVERRUN, c->wait_started_ns + pred_us * 1000ull +
		  (uint64_t)d->cfg.tier_margin_ms * 1000000ull);
	if (!d->cfg.tier_decisions || !c->has_kv || !c->as.s.n_blocks || c->tier_op)
		return;
	pressure = under_pressure(d);
	decide(d, c, pred_us, pressure, &o);
	d->m.tier_decisions[o.choice]++;
	log_decision(d, c, "tool wait", pred_us, pressure, &o);
	/* a spill written ahead: the blocks stay until the arena needs them,
	 * and then go at once (an eviction of a clean copy); else it is
	 * written when an eviction takes them (spill_ahead) */
	if (o.choice == KVT_SPILL) {
		if (!spill_ahead(d, c))
			d->m.tier_spills_deferred++;
		else if (start_spill(d, c, 0) == 0)
			return;
	}
	if (o.choice != KVT_DISCARD)
		return;
	/* the KV leaves the arena because the arena needs it: an eviction,
	 * as much as a victim the kernel ranks */
	count_eviction(d, c->as.s.n_blocks, 0);
	discard(d, c, "tool wait");
}

uint32_t kvd_tiering_evict(struct kvd *d, struct kvd_conv *c)
{
	struct kvd_tiering *tr = d->tier;
	uint32_t n = c->has_kv ? c->as.s.n_blocks : 0;
	uint64_t wait_us = 0;
	struct kvt_decision o;

	if (!n || c->tier_op || c->tier_setup)
		return 0;
	if (clean_copy(c)) {
		count_eviction(d, n, tr && tr->for_prefetch);
		d->m.tier_spills_clean++;
		kvd_log(KVD_LOG_INFO, "tier", "evict %s: %u blocks, already on disk", c->id, n);
		free_to_disk(d, c);
		arm_prefetch(d, c, kvd_now_ns());
		return n;
	}
	if (tr && tr->t && d->cfg.tier_decisions && idle_kv(c)) {
		if (c->kstate == KVA_STATE_TOOL_WAIT && c->wait_started_ns) {
			uint64_t el = (kvd_now_ns() - c->wait_started_ns) / 1000;

			wait_us = kvd_toolwait_remaining_us(d, c->tool_class, el, c->tool_pred_us);
		} else {
			/* idle: it may return any time up to its retention */
			wait_us = (uint64_t)d->cfg.idle_retention_s * 1000000ull;
		}
		decide(d, c, wait_us, 1, &o);
		log_decision(d, c, "evict", wait_us, 1, &o);
		/* the kernel's ranking chose it: it goes, by the cheaper way;
		 * a spill's blocks leave when written, and it is an eviction
		 * then (spill_done): an agent that closes its session, or
		 * returns, before that (a victim ranked first because its turn
		 * just ended without a tool call: 24 of 135 evictions in a
		 * trial came 1-17 ms before their DELETE) frees or keeps them */
		if (o.choice != KVT_DISCARD && o.restore_us <= o.recompute_us &&
		    start_spill(d, c, 1) == 0) {
			if (c->tier_op) {
				c->tier_op->evicted = n;
				c->tier_op->for_prefetch = tr->for_prefetch;
				return 0;
			}
			count_eviction(d, n, tr->for_prefetch);
			return c->as.s.n_blocks ? 0 : n;
		}
	}
	count_eviction(d, n, tr && tr->for_prefetch);
	discard(d, c, "evicted");
	return n;
}

static void on_overrun(struct kvd *d, struct kvd_conv *c, uint64_t now)
{
	uint64_t el, left, pred;

	if (c->kstate != KVA_STATE_TOOL_WAIT || !c->wait_started_ns ||
	    (c->job && c->job->state != JOB_TOOL_RUNNING))
		return;
	el = (now - c->wait_started_ns) / 1000;
	left = kvd_toolwait_remaining_us(d, c->tool_class, el, c->tool_pred_us);
	pred = el + left;
	/* a wait once, however often it is predicted anew (a re-prediction
	 * is the class's conditional mean, passed again by ~40% of waits of
	 * a log-normal tool: counted per re-prediction, 261 for 148 waits
	 * that overran in a pilot read as 87% of 300 waits overrunning) */
	d->m.tool_repredictions++;
	if (!c->tool_overran)
		d->m.tool_overruns++;
	c->tool_overran = 1;
	kvd_log(KVD_LOG_INFO, "tier", "%s: tool class %u ran past its prediction (%.1f ms): "
		"%.1f ms so far, %.1f ms more expected", c->id, c->tool_class,
		(double)c->tool_pred_us / 1e3, (double)el / 1e3, (double)left / 1e3);
	c->tool_pred_us = pred;
	kvd_kstate_repredict(d, c, pred);	/* the kernel's ranking too */
	timer_arm(d->tier, c, TIMER_OVERRUN, now + left * 1000ull +
		  (uint64_t)d->cfg.tier_margin_ms * 1000000ull);
	/*
	 * KV a prefetch brought back for the old prediction: a prefetch for
	 * the new one would be due now (the tool's return is likely within
	 * the read's lead), so it stays held; else its hold ends (it is
	 * ranked like any other KV again) and, taken, it is prefetched for
	 * the new prediction. Before, the hold ended at every overrun and a
	 * wait was prefetched once: a tool past its prediction lost its KV
	 * to the next request's room and its return read it back on demand
	 * (8 of 14 stalls, taken_again, in an eviction run; test_tiering's
	 * overrun_hold and overrun_prefetch).
	 */
	if (c->tier_hold && c->has_kv && c->as.s.n_blocks && c->tier_file &&
	    prefetch_due_ns(d, c, now) <= now) {
		kvd_log(KVD_LOG_DEBUG, "tier", "%s: prefetched KV held (the return is due)", c->id);
		return;
	}
	c->tier_hold = 0;
	c->tier_prefetched = 0;
	c->tier_noslack = 0;
	if (c->has_kv && c->as.s.n_blocks && !c->tier_op && d->cfg.tier_decisions) {
		/* a KV prefetched (or kept) for a return that did not come */
		struct kvt_decision o;
		int pressure = under_pressure(d);

		decide(d, c, left, pressure, &o);
		log_decision(d, c, "overrun", left, pressure, &o);
		if (o.choice == KVT_SPILL)
			start_spill(d, c, 0);	/* behind: free when needed */
		else if (o.choice == KVT_DISCARD)
			discard(d, c, "overrun");
	} else if (c->tier_file && !c->tier_op) {
		arm_prefetch(d, c, now);
	}
}

/* When c is expected back: its tool's predicted return (moved on when
 * the tool overran). A conversation not waiting on a tool returns when
 * its user writes, which nothing here predicts: last. */
static uint64_t expected_back_ns(const struct kvd_conv *c)
{
	if (c->kstate != KVA_STATE_TOOL_WAIT || !c->wait_started_ns || !c->tool_pred_us)
		return UINT64_MAX;
	return c->wait_started_ns + c->tool_pred_us * 1000ull;
}

/* Blocks free and on their way (spills being written), less what waiting
 * work lacks. */
static uint32_t room_coming(struct kvd *d)
{
	uint32_t f = kvd_blocks_free(d) + d->tier->freeing;

	return f > d->room_wanted ? f - d->room_wanted : 0;
}

/*
 * May c's prefetch take o's KV? Idle, expected back later than c (at
 * `back`), and not itself brought back by a prefetch in this wait: that
 * one is not prefetched again (once per wait), so taking it makes its
 * return a stall for certain, while c waiting for room stalls only if
 * none comes before c's tool returns. (Two tools of one class started
 * together are expected back within a millisecond of each other: their
 * prefetches took each other's KV, each return stalled; a 10-agent run.)
 */
static int takeable(const struct kvd_conv *o, const struct kvd_conv *c, uint64_t back)
{
	return o != c && idle_kv(o) && o->as.s.n_blocks && !o->tier_op && !o->tier_setup &&
	       !(o->tier_hold && o->kstate == KVA_STATE_TOOL_WAIT) && expected_back_ns(o) > back;
}

/*
 * The arena's inflow: the blocks the turns filled (tokens computed in
 * steps, prompt and generated, and KV read back), per slot over the last
 * four seconds; an idle machine's is 0 once the window has passed.
 */
static void inflow_sample(struct kvd *d, uint64_t now)
{
	struct kvd_tiering *tr = d->tier;
	uint64_t blocks = d->m.step_tokens / bt_of(d) +
			  d->m.tier_restore_bytes / (d->geom.kv_block_bytes ? d->geom.kv_block_bytes : 1);
	uint64_t slot = now / FLOW_SLOT_NS, n;

	for (n = 0; tr->flow_slot < slot && n < FLOW_SLOTS; n++)
		tr->flow[++tr->flow_slot % FLOW_SLOTS] = 0;
	tr->flow_slot = slot;
	tr->flow[slot % FLOW_SLOTS] += (uint32_t)(blocks - tr->flow_blocks);
	tr->flow_blocks = blocks;
}

/* Blocks a second, the window's mean. */
static double inflow_bps(const struct kvd_tiering *tr)
{
	uint64_t sum = 0;
	uint32_t i;

	for (i = 0; i < FLOW_SLOTS; i++)
		sum += tr->flow[i];
	return (double)sum * 1e9 / (double)(FLOW_SLOTS * FLOW_SLOT_NS);
}

/*
 * The room the turns will fill before c's tool returns, at the measured
 * inflow (sampled by kvd_tiering_poll, whose timers call this): KV
 * brought back now sits idle until then in room they would take
 * (evicting another's KV for it, or queueing for it), while the read it
 * saves is tens of ms at the return.
 */
static uint32_t slack_wanted(struct kvd *d, const struct kvd_conv *c, uint64_t now)
{
	uint64_t back = expected_back_ns(c);
	double w;

	if (!d->cfg.tier_prefetch_slack || back == UINT64_MAX || back <= now)
		return 0;
	w = inflow_bps(d->tier) * (double)(back - now) / 1e9;
	return w >= (double)d->geom.blocks_total ? d->geom.blocks_total : (uint32_t)w;
}

/*
 * Room for c's prefetch of `need` blocks, in the order of expected
 * returns: the free blocks that waiting work does not lack
 * (d->room_wanted), the prefix cache's blocks no conversation holds,
 * and the KV of idle conversations expected back later than c (least
 * recently used first) - never that of one expected back sooner. (A
 * prefetch that evicted by the kernel's ranking took the room of
 * conversations returning before it, which were then restored on demand,
 * stalling, and took room in turn: 83% of tool returns stalled in a
 * 400-agent trial.) Nothing is taken unless all of it is there, and,
 * with `prefetch_slack`, room beside it for the turns coming in before
 * the return (slack_wanted): else the KV comes back at the return, read
 * on demand. 1: free now, start the restore; 0: on its way (victims
 * being written); -1: not there; -2: there, but the turns' (no slack).
 */
static int prefetch_room(struct kvd *d, struct kvd_conv *c, uint32_t need, uint64_t now)
{
	uint64_t back = expected_back_ns(c);
	uint32_t free_now = kvd_blocks_free(d), avail, later = 0, cached, slack;
	struct kvd_conv *o;

	slack = slack_wanted(d, c, now);
	avail = free_now > d->room_wanted ? free_now - d->room_wanted : 0;
	if (avail >= need + slack)
		return 1;
	avail = room_coming(d);
	if (avail >= need + slack)
		return 0;		/* on its way: victims taken before */
	cached = d->cfg.prefix_cache ? d->radix.n_evictable : 0;
	for (o = d->convs_tail; o && avail + cached + later < need + slack; o = o->prev)
		if (takeable(o, c, back))
			later += o->as.s.n_blocks;
	if (avail + cached + later < need + slack)
		return slack ? -2 : -1;
	if (cached)
		kvd_prefix_evict(d, need - avail);
	d->tier->for_prefetch = 1;	/* counted apart too: kvarenad_evictions_prefetch_total */
	for (o = d->convs_tail; o && room_coming(d) < need; o = o->prev)
		if (takeable(o, c, back))
			kvd_tiering_evict(d, o);
	d->tier->for_prefetch = 0;
	return kvd_blocks_free(d) >= need + d->room_wanted;
}

static void on_prefetch(struct kvd *d, struct kvd_conv *c, uint64_t now)
{
	uint32_t bt = bt_of(d), want, need, cached;
	int rc = -EAGAIN, room;

	if (c->tier_op || !c->tier_file || (c->has_kv && c->as.s.n_blocks))
		return;
	want = file_valid_tokens(d, c);
	/* the leading blocks the cache holds are shared, the rest need room
	 * (counted from the file's skip, a prefetch whose skipped blocks the
	 * cache had lost since made too little room, and its restore made
	 * the rest by the kernel's ranking) */
	need = (want + bt - 1) / bt;
	cached = d->cfg.prefix_cache ? kvd_prefix_lookup(d, c, want, NULL) : 0;
	need = need > cached ? need - cached : 0;
	room = prefetch_room(d, c, need, now);
	if (room > 0)
		rc = start_restore(d, c, want, 1);
	if (room == -2) {
		/* no slack: the KV stays on disk until the return (or a new
		 * prediction: an overrun). Tried again as the return neared,
		 * it took the room the turns had used meanwhile (an eviction
		 * for one read saved, each): in an eviction trial, 82 and 97
		 * evictions against 42 so, and 32 with no prefetch at all */
		d->m.tier_prefetches_deferred++;
		c->tier_noslack = 1;
		return;
	}
	if (rc == 0) {
		d->m.tier_prefetches++;
		c->tier_prefetched++;
		c->tier_hold = 1;
		kvd_log(KVD_LOG_DEBUG, "tier", "%s: prefetch", c->id);
	} else if (rc == -EAGAIN) {
		/* no room yet: try again shortly, until the tool returns
		 * (later when the room is not even on its way: each try
		 * looks through the idle conversations) */
		if (c->tier_noroom < UINT16_MAX)
			c->tier_noroom++;
		timer_arm(d->tier, c, TIMER_PREFETCH, now + (room < 0 ? 100000000ull : 20000000ull));
		due_add(d->tier, c);
	}
}

/* ---- the scheduler's calls --------------------------------------------------------- */

int kvd_tiering_need_kv(struct kvd *d, struct kvd_conv *c)
{
	struct kvd_tiering *tr = d->tier;
	uint64_t now = kvd_now_ns();
	uint32_t want;
	int rc;

	if (!tr)
		return 0;
	if (!c->stall_since_ns) {
		stall_cause(d, c, now);
		if (c->stall_cause == KVD_STALL_NO_ROOM && c->tier_file &&
		    !(c->has_kv && c->as.s.n_blocks))
			room_census(d, c);
	}
	c->tier_hold = 0;
	timer_cancel(tr, c, TIMER_OVERRUN);
	timer_cancel(tr, c, TIMER_PREFETCH);
	if (c->tier_op) {
		if (c->tier_op->restore) {
			if (!c->stall_since_ns)
				c->stall_since_ns = now;
			if (!c->tier_missed)
				d->m.kv_misses++;
			c->tier_missed = 1;
			return 1;
		}
		/* being written: the blocks are still here, use them */
		kvd_tiering_abandon(d, c);
	}
	if (c->tier_file) {
		want = file_valid_tokens(d, c);
		if (c->has_kv && c->as.s.n_blocks && !restoring(d, c, want)) {
			/* the arena has it: the disk copy goes stale from now */
			drop_file(d, c);
		} else if (!want) {
			/* cut back before the file's first block: nothing to read */
			drop_file(d, c);
		} else {
			rc = start_restore(d, c, want, 0);
			if (rc == 0 && !c->tier_op) {
				/* all of it from the prefix cache */
				c->turn_restored = c->as.s.n_tokens;
				return 0;
			}
			if (rc == 0 || rc == -EAGAIN) {
				if (!c->stall_since_ns)
					c->stall_since_ns = now;
				if (!c->tier_missed)
					d->m.kv_misses++;
				c->tier_missed = 1;
				/* no room: the caller counts it wanted (a
				 * prefetch leaves it the room) */
				return rc == -EAGAIN ? 2 : 1;
			}
			kvd_log(KVD_LOG_WARN, "tier", "%s: cannot restore (%s): recomputed", c->id,
				strerror(-rc));
			c->tier_lost_tokens += want > c->as.s.n_tokens ? want - c->as.s.n_tokens : 0;
			drop_file(d, c);
		}
	}
	if (c->tier_lost_tokens) {
		uint32_t lost = c->tier_lost_tokens, cached = 0;

		/* KV lost whole: the leading blocks the prefix cache still
		 * holds (a shared prompt; blocks a released session left
		 * cached) are shared, not computed (counted, they made lru's
		 * recomputed tokens more than all the prompt tokens it computed
		 * in an eviction run, 61.5k against 52.1k) */
		if (!(c->has_kv && c->as.s.n_tokens) && c->n_tokens > 1)
			cached = kvd_prefix_lookup(d, c, c->n_tokens - 1, NULL) * bt_of(d);
		lost = lost > cached ? lost - cached : 0;
		if (lost && !c->tier_missed)
			d->m.kv_misses++;
		d->m.tier_recomputed_tokens += lost;
		c->tier_lost_tokens = 0;
	}
	c->tier_missed = 0;	/* the next return counts afresh */
	return 0;
}

void kvd_tiering_expire(struct kvd *d, struct kvd_conv *c)
{
	/* no eviction (the arena did not need the memory), but KV that is
	 * restored or recomputed if the conversation comes back */
	if (c->has_kv && c->as.s.n_blocks)
		d->m.kv_expired++;
	/* past its retention the arena lets it go; the disk may keep it */
	if (d->tier && d->tier->t && d->cfg.tier_decisions && idle_kv(c) && c->as.s.n_blocks) {
		if (clean_copy(c)) {
			/* written behind already: the blocks go now (they
			 * stayed until pressure came), no read back planned */
			free_to_disk(d, c);
			return;
		}
		if (start_spill(d, c, 1) == 0)
			return;
	}
	/* released: what its return recomputes of it is a miss (before, it
	 * was counted nowhere); the prefix cache keeps its blocks (drop_kv
	 * leaves them cached), and what the return finds there is not
	 * counted (kvd_tiering_need_kv) */
	c->tier_lost_tokens += c->as.s.n_tokens;
	kvd_conv_drop_kv(d, c);
}

/*
 * c's KV came back by prefetch for its tool's return, which has not come
 * and is not late (an overrun ends the hold, unless the new prediction's
 * prefetch would be due at once: on_overrun): not a victim for
 * another request's room while a job runs, which will give room back
 * anyway. Taken, it was read back on demand at the return, a restore
 * stall and a prefetch spent for nothing (6 of 29 stalls in a 12-agent
 * trial with an arena of two sessions). With nothing running, the
 * waiting request goes first: the machine would idle until the tool
 * returned.
 */
int kvd_tiering_held(struct kvd *d, const struct kvd_conv *c)
{
	const struct kvd_job *j;

	if (!c->tier_hold || c->kstate != KVA_STATE_TOOL_WAIT || !c->has_kv ||
	    !c->as.s.n_blocks)
		return 0;
	for (j = d->jobs; j; j = j->next)
		if (j->state == JOB_RUNNING || j->state == JOB_KV_LOAD)
			return 1;
	return 0;
}

uint64_t kvd_tiering_due_start(const struct kvd *d)
{
	uint64_t t = UINT64_MAX;
	uint32_t i;

	for (i = 0; d->tier && i < d->tier->n_due; i++)
		if (d->tier->due[i]->t_start_ns < t)
			t = d->tier->due[i]->t_start_ns;
	return t;
}

/*
 * What the prefetches due by until_ns will need: a spilled conversation
 * waiting on its tool (none of its requests queued yet) needs its file's
 * blocks back (the shared ones it skipped are the cache's) when its
 * prefetch comes due. Admission keeps them free from jobs of later
 * conversations that would hold them past then (admit.c): taken, the
 * prefetch found no room and its tool's result found its KV on disk
 * (no_room: 51 of 69 restore stalls in a 100-agent pilot).
 */
uint32_t kvd_tiering_reserve(struct kvd *d, uint64_t until_ns, uint64_t *first_start)
{
	struct kvd_tiering *tr = d->tier;
	uint32_t bt = bt_of(d), sum = 0, i, n;

	*first_start = UINT64_MAX;
	for (i = 0; tr && i < tr->n_heap; i++) {
		const struct kvd_conv *c = tr->heap[i].c;

		if (tr->heap[i].kind != TIMER_PREFETCH || tr->heap[i].at > until_ns || c->job ||
		    c->tier_op || !c->tier_file || (c->has_kv && c->as.s.n_blocks))
			continue;
		n = (c->tier_file_tokens + bt - 1) / bt;
		sum += n > c->tier_file_skip ? n - c->tier_file_skip : 0;
		if (c->t_start_ns < *first_start)
			*first_start = c->t_start_ns;
	}
	return sum;
}

int kvd_tiering_busy(const struct kvd *d)
{
	return d->tier && d->tier->in_flight;
}

uint32_t kvd_tiering_freeing(const struct kvd *d)
{
	return d->tier ? d->tier->freeing : 0;
}

void kvd_tiering_forget(struct kvd *d, struct kvd_conv *c)
{
	if (!d->tier)
		return;
	kvd_tiering_abandon(d, c);
	timer_cancel(d->tier, c, TIMER_PREFETCH);
	timer_cancel(d->tier, c, TIMER_OVERRUN);
	drop_file(d, c);
}

void kvd_tiering_prefill_observed(struct kvd *d, uint32_t tokens, uint64_t ns)
{
	if (d->tier)
		kvt_costs_add_recompute(&d->tier->costs, tokens, ns);
}

int kvd_tiering_fd(struct kvd *d)
{
	return d->tier && d->tier->t ? kvt_event_fd(d->tier->t) : -1;
}

int kvd_tiering_poll(struct kvd *d, uint64_t now)
{
	struct kvd_tiering *tr = d->tier;
	struct kvt_done dn[32];
	int n, i;

	if (!tr)
		return -1;
	inflow_sample(d, now);
	while (tr->t && (n = kvt_reap(tr->t, dn, 32)) > 0) {
		for (i = 0; i < n; i++) {
			struct kvd_tticket *tk = dn[i].ctx;

			tr->in_flight--;
			if (tk->restore)
				restore_done(d, tk, &dn[i]);
			else
				spill_done(d, tk, &dn[i]);
			free(tk);
		}
	}
	while (tr->n_heap && tr->heap[0].at <= now) {
		struct ttimer e = tr->heap[0];

		timer_cancel(tr, e.c, e.kind);
		if (e.kind == TIMER_PREFETCH)
			on_prefetch(d, e.c, now);
		else
			on_overrun(d, e.c, now);
	}
	if (!tr->n_heap)
		return -1;
	return (int)((tr->heap[0].at - now) / 1000000ull) + 1;
}

void kvd_tiering_gauges(struct kvd *d, struct kvd_tier_gauges *g)
{
	struct kvd_tiering *tr = d->tier;
	struct kvd_conv *c;

	memset(g, 0, sizeof(*g));
	for (c = d->convs; c; c = c->next) {
		const char *t = kvd_tiering_tier(c);

		g->sessions[t[0] == 'a' ? 0 : t[0] == 'd' ? 1 : 2]++;
	}
	if (!tr)
		return;
	g->write_bps = tr->costs.write_bps;
	g->read_bps = tr->costs.read_bps;
	g->recompute_tps = tr->costs.recompute_tps;
	if (tr->t) {
		struct kvt_stats st;

		kvt_get_stats(tr->t, &st);
		g->disk_bytes = kvt_bytes_used(tr->t);
		g->disk_cap = kvt_cap_bytes(tr->t);
		g->files = st.files;
		g->direct_fallbacks = st.direct_fallbacks;
	}
}

/* SIGHUP: the kernel's ranking policy and watermarks, the decisions and
 * prefetch switches, the margin. (kvactl policy set changes the arena's
 * policy too; the next reload restates the configuration's.) */
int kvd_tiering_reload(struct kvd *d, const struct kvd_config *nc, char *err, size_t errlen)
{
	int pol = kva_policy_parse(nc->policy), rc;

	if (pol < 0) {
		snprintf(err, errlen, "[kv] policy %s: unknown", nc->policy);
		return pol;
	}
	rc = kva_arena_set_policy(d->arena, (uint32_t)pol, nc->low_wm, nc->high_wm, nc->ttl_ms);
	if (rc) {
		snprintf(err, errlen, "[kv] policy %s (watermarks %u/%u): %s", nc->policy,
			 nc->low_wm, nc->high_wm, strerror(-rc));
		return rc;
	}
	snprintf(d->cfg.policy, sizeof(d->cfg.policy), "%s", nc->policy);
	d->cfg.low_wm = nc->low_wm;
	d->cfg.high_wm = nc->high_wm;
	d->cfg.ttl_ms = nc->ttl_ms;
	d->cfg.tier_decisions = nc->tier_decisions;
	d->cfg.tier_prefetch = nc->tier_prefetch;
	d->cfg.tier_prefetch_slack = nc->tier_prefetch_slack;
	d->cfg.tier_margin_ms = nc->tier_margin_ms;
	kvd_log(KVD_LOG_INFO, "tier", "policy %s (watermarks %u/%u, ttl %u ms), decisions %s, "
		"prefetch %s%s (margin %u ms)", nc->policy, nc->low_wm, nc->high_wm, nc->ttl_ms,
		nc->tier_decisions ? "on" : "off", nc->tier_prefetch ? "on" : "off",
		nc->tier_prefetch && nc->tier_prefetch_slack ? " with slack" : "", nc->tier_margin_ms);
	return 0;
}

/* ---- life ---------------------------------------------------------------------- */

static enum kvt_mode mode_of(const char *s)
{
	return !strcmp(s, "on") ? KVT_ON : !strcmp(s, "off") ? KVT_OFF : KVT_AUTO;
}

/* Measures the disk at start: a spill and a restore of 16 MiB of free
 * arena blocks (their contents do not matter), so the first decisions use
 * this machine's numbers. */
static void measure_disk(struct kvd *d)
{
	struct kvd_tiering *tr = d->tier;
	uint32_t n = (16u << 20) / d->geom.block_size, i;
	struct kvt_ident id = { .key = 0, .tokens_hash = 0, .n_tokens = 0 };
	uint32_t *ids;
	struct kvt_done dn;
	kvt_file_id f;
	uint64_t sid;
	int rc, step;

	if (n < 2)
		n = 2;
	if (n > d->geom.blocks_total / 4)
		n = d->geom.blocks_total / 4;
	ids = calloc(n ? n : 1, sizeof(*ids));
	if (!ids || n < 1 || kva_session_open(d->arena, 0, &sid)) {
		free(ids);
		return;
	}
	rc = kva_blocks_alloc(d->arena, sid, n, ids, 0);
	for (step = 0; rc >= 0 && step < 2; step++) {
		rc = step ? kvt_restore(tr->t, f, &id, 0, n, ids, NULL) :
			    kvt_spill(tr->t, &id, ids, n, NULL, &f);
		if (rc)
			break;
		for (i = 0; i < 1000; i++) {
			struct pollfd pfd = { .fd = kvt_event_fd(tr->t), .events = POLLIN };

			if (kvt_reap(tr->t, &dn, 1) == 1)
				break;
			poll(&pfd, 1, 10);
		}
		if (i == 1000 || dn.status) {
			rc = -EIO;
			break;
		}
		if (step)
			kvt_costs_add_read(&tr->costs, dn.bytes, dn.ns);
		else
			kvt_costs_add_write(&tr->costs, dn.bytes, dn.ns);
	}
	if (step > 0)
		kvt_drop(tr->t, f);
	kva_session_close(d->arena, sid);
	free(ids);
	kvd_log(KVD_LOG_INFO, "tier", "disk measured at start: write %.0f MB/s, read %.0f MB/s%s",
		tr->costs.write_bps / 1e6, tr->costs.read_bps / 1e6,
		rc ? " (the probe failed: a conservative guess stands in until spills measure)" : "");
}

int kvd_tiering_init(struct kvd *d, char *err, size_t errlen)
{
	struct kvd_tiering *tr = calloc(1, sizeof(*tr));
	struct kvt_params p = { 0 };
	struct kvt_geom g;
	void *base = NULL;
	uint32_t v[6];
	int rc;

	if (!tr)
		return -ENOMEM;
	d->tier = tr;
	kvt_costs_init(&tr->costs);
	v[0] = d->geom.n_layers;
	v[1] = d->geom.n_kv_heads;
	v[2] = d->geom.head_dim;
	v[3] = d->geom.dtype;
	v[4] = d->geom.block_tokens;
	v[5] = d->geom.kv_block_bytes;
	tr->shape_id = kvt_tokens_hash((const int32_t *)v, 6);
	if (!d->cfg.tier_dir[0]) {
		kvd_log(KVD_LOG_INFO, "tier", "no disk tier ([tier] dir unset): evicted KV is "
			"recomputed; keep/discard decisions %s", d->cfg.tier_decisions ? "on" : "off");
		return 0;
	}
	rc = kva_arena_map(d->arena, &base);
	if (rc) {
		snprintf(err, errlen, "disk tier: mapping the arena: %s", strerror(-rc));
		return rc;
	}
	g.block_size = d->geom.block_size;
	g.blocks_per_page = d->geom.blocks_per_page;
	g.blocks_total = d->geom.blocks_total;
	g.block_tokens = d->geom.block_tokens;
	g.shape_id = tr->shape_id;
	p.dir = d->cfg.tier_dir;
	p.cap_bytes = d->cfg.tier_cap_mb << 20;
	p.direct = mode_of(d->cfg.tier_direct);
	p.fixed = mode_of(d->cfg.tier_fixed);
	p.queue_depth = d->cfg.tier_queue_depth;
	rc = kvt_open(&p, &g, base, d->geom.arena_bytes, &tr->t, err, errlen);
	if (rc)
		return rc;
	{
		struct kvt_stats st;

		kvt_get_stats(tr->t, &st);
		kvd_log(KVD_LOG_INFO, "tier", "disk tier: %s%s; %llu stray file(s) of an earlier "
			"run removed; decisions %s, prefetch %s%s (margin %u ms)", kvt_describe(tr->t),
			d->backend == KVA_BACKEND_KERNEL ? " (kernel arena)" : " (memfd arena)",
			(unsigned long long)st.cleaned_at_open, d->cfg.tier_decisions ? "on" : "off",
			d->cfg.tier_prefetch ? "on" : "off",
			d->cfg.tier_prefetch && d->cfg.tier_prefetch_slack ? " with slack" : "",
			d->cfg.tier_margin_ms);
	}
	measure_disk(d);
	return 0;
}

void kvd_tiering_fini(struct kvd *d)
{
	struct kvd_tiering *tr = d->tier;

	if (!tr)
		return;
	if (tr->t) {
		struct kvt_done dn[32];
		int n, i;

		/* completes everything in flight, then reaps the tickets */
		if (kvt_drain(tr->t, 30000))
			kvd_log(KVD_LOG_WARN, "tier", "disk I/O still in flight after 30 s");
		while ((n = kvt_reap(tr->t, dn, 32)) > 0)
			for (i = 0; i < n; i++) {
				struct kvd_tticket *tk = dn[i].ctx;

				if (tk && tk->owns_as)
					kve_arena_session_close(d->kv, &tk->as);
				free(tk);
			}
		kvt_close(tr->t);
	}
	free(tr->heap);
	free(tr->due);
	free(tr);
	d->tier = NULL;
}
