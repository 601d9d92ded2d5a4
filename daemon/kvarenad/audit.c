// SPDX-License-Identifier: MIT
/*
 * audit.c - the scheduler's books, checked after every turn in the test
 * builds. What each conversation, job and worker holds must add up to the
 * counters admission and eviction decide by (blocks per holder and per
 * tenant, jobs per tenant, steps in flight per job, the retention heap,
 * the prefix cache's busy and evictable blocks), and a conversation's
 * text must be what its hash and token ends say. A count that drifts only
 * shows much later as a wrong decision (a block freed under a holder, a
 * tenant over or under its budget, a leaf never evicted); here it aborts
 * the turn that broke it, with what broke.
 *
 * Test builds only (KVD_TEST_HOOKS), and only with KVD_AUDIT set in the
 * environment (test_orch and test_tiering set it): it walks every
 * conversation, job and block, which the daemon's turns must never do
 * (internal.h's lock rules), and a benchmark on the hooks build must not
 * pay for it.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#ifdef KVD_TEST_HOOKS

static void broken(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "kvarenad audit: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	abort();
}

/* FNV-1a of the text, as conv.c keeps it (internal.h: text_hash) */
static uint64_t text_fnv(const char *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	while (n--)
		h = (h ^ (uint8_t)*p++) * 0x100000001b3ull;
	return h;
}

static void audit_text(const struct kvd_conv *c)
{
	uint32_t i, last = 0;

	if (c->n_tokens > c->cap_tokens)
		broken("%s: %u tokens in room for %u", c->id, c->n_tokens, c->cap_tokens);
	if (c->text ? c->text_len >= c->text_cap || c->text[c->text_len] : c->text_len != 0)
		broken("%s: text of %zu bytes in %zu, or not terminated", c->id, c->text_len,
		       c->text_cap);
	if (c->text_hash != text_fnv(c->text, c->text_len))
		broken("%s: text hash is not its %zu bytes'", c->id, c->text_len);
	for (i = 0; i < c->n_tokens; i++) {
		uint32_t e = c->tok_end[i];

		if (e == UINT32_MAX)
			continue;
		if (e < last || e > c->text_len)
			broken("%s: token %u ends at %u (previous end %u, text %zu)", c->id, i, e,
			       last, c->text_len);
		last = e;
	}
}

/* Its KV: the blocks it holds (counted into users and the tenant's), the
 * positions they hold, the cached blocks it offered. */
static void audit_kv(struct kvd *d, struct kvd_conv *c, uint32_t *users, uint32_t *tblocks)
{
	uint32_t bt = d->geom.block_tokens, i;

	if (!c->has_kv) {
		if (c->as.s.n_blocks || c->as.s.n_tokens || c->n_offered)
			broken("%s: no session but %u blocks, %u positions, %u offered", c->id,
			       c->as.s.n_blocks, c->as.s.n_tokens, c->n_offered);
		return;
	}
	if (kvd_conv_by_sid(d, c->as.sid) != c)
		broken("%s: its session %llu finds another", c->id,
		       (unsigned long long)c->as.sid);
	if (c->as.s.n_blocks > c->as.cap || c->as.s.n_tokens > c->as.s.n_blocks * bt ||
	    c->as.s.n_tokens > c->n_tokens)
		broken("%s: %u positions of KV in %u blocks (table %u) for %u tokens", c->id,
		       c->as.s.n_tokens, c->as.s.n_blocks, c->as.cap, c->n_tokens);
	if (c->n_offered > c->as.s.n_tokens / bt)
		broken("%s: %u blocks offered of %u positions", c->id, c->n_offered,
		       c->as.s.n_tokens);
	for (i = 0; i < c->as.s.n_blocks; i++) {
		uint32_t b = c->as.s.block_table[i];

		if (b >= d->geom.blocks_total)
			broken("%s: block %u of %u", c->id, b, d->geom.blocks_total);
		users[b]++;
	}
	tblocks[kvd_tenant_slot(d, c->tenant)] += c->as.s.n_blocks;
	for (i = 0; i < c->n_offered; i++) {
		const struct kvd_rnode *n = c->nodes ? c->nodes[i] : NULL;

		if (!n || n->block != c->as.s.block_table[i] ||
		    kvd_radix_by_block(&d->radix, n->block) != n || n->tenant != c->tenant ||
		    n->parent != (i ? c->nodes[i - 1] : NULL) ||
		    memcmp(n->tokens, c->tokens + (size_t)i * bt, (size_t)bt * sizeof(*c->tokens)))
			broken("%s: offered block %u is not the cache's node of its tokens", c->id,
			       i);
	}
	for (i = c->n_offered; c->nodes && i <= d->ctx_len / bt; i++)
		if (c->nodes[i])
			broken("%s: block %u not offered (of %u) still names a cache node", c->id,
			       i, c->n_offered);
}

/* Its last lookup in the index, where the next one goes on from: while
 * no node has left since, the index's nodes of its own tokens. */
static void audit_match(struct kvd *d, const struct kvd_conv *c)
{
	uint32_t bt = d->geom.block_tokens;
	const struct kvd_rnode *n;

	if (c->match.removals != d->radix.removals)
		return;
	for (n = c->match.last; n; n = n->parent)
		if (kvd_radix_by_block(&d->radix, n->block) != n || n->tenant != c->tenant ||
		    (n->depth + 1) * bt > c->n_tokens ||
		    (n->parent ? n->parent->depth + 1 : 0) != n->depth ||
		    memcmp(n->tokens, c->tokens + (size_t)n->depth * bt,
			   (size_t)bt * sizeof(*c->tokens)))
			broken("%s: its last match names block %u, not the cache's node of its tokens at block %u",
			       c->id, n->block, n->depth);
}

static void audit_convs(struct kvd *d, uint32_t *users, uint32_t *tblocks)
{
	struct kvd_conv *c, *prev = NULL;
	uint32_t n = 0, i;

	for (c = d->convs; c; prev = c, c = c->next) {
		n++;
		if (c->prev != prev)
			broken("%s: the list's back link", c->id);
		if (kvd_conv_find_id(d, c->id) != c)
			broken("%s: its id finds another", c->id);
		if (c->dl_index != UINT32_MAX &&
		    (c->dl_index >= d->n_deadlines || d->deadlines[c->dl_index] != c))
			broken("%s: not at its place %u in the retention heap", c->id, c->dl_index);
		if (c->job && c->job->conv != c)
			broken("%s: its job is another conversation's", c->id);
		audit_text(c);
		audit_kv(d, c, users, tblocks);
		audit_match(d, c);
	}
	if (n != d->n_convs || d->convs_tail != prev)
		broken("%u conversations listed, %u counted", n, d->n_convs);
	for (i = 0; i < d->n_deadlines; i++) {
		const struct kvd_conv *x = d->deadlines[i];

		if (x->dl_index != i ||
		    (i && x->deadline_ns < d->deadlines[(i - 1) / 2]->deadline_ns))
			broken("%s: retention heap out of order at %u", x->id, i);
	}
}

/* Every block's holders as recounted; the cache's busy and evictable
 * blocks follow from them. */
static void audit_blocks(struct kvd *d, const uint32_t *users, const uint32_t *tblocks)
{
	const struct kvd_radix *r = &d->radix;
	struct kva_arena_info ai = { .size = sizeof(ai) };
	uint32_t b, slot, nodes = 0, leaves = 0, used = 0, *kids = NULL;
	const struct kvd_rnode *n;

	for (b = 0; b < d->geom.blocks_total; b++) {
		if (users[b] != d->block_users[b])
			broken("block %u: %u holders counted, %u held", b, d->block_users[b],
			       users[b]);
		used += users[b] || kvd_radix_by_block(r, b);
	}
	/* the arena's own count: every block it has given out is a
	 * conversation's or the cache's, or a disk transfer's in flight */
	if (!d->test_arena_shared && !kva_arena_get_info(d->arena, &ai) &&
	    (kvd_tiering_busy(d) ? ai.blocks_total - ai.blocks_free < used :
				   ai.blocks_total - ai.blocks_free != used))
		broken("the arena has %u blocks out, %u are held", ai.blocks_total - ai.blocks_free,
		       used);
	for (slot = 1; slot <= d->cfg.n_tenants; slot++)
		if (tblocks[slot] != d->tenant_blocks[slot])
			broken("tenant %u: %u blocks counted, %u held", slot,
			       d->tenant_blocks[slot], tblocks[slot]);
	if (!d->has_cache_sid || !r->by_block)
		return;
	kids = calloc(r->blocks_total, sizeof(*kids));
	if (!kids)
		return;
	for (b = 0; b < r->blocks_total; b++) {
		n = r->by_block[b];
		if (!n)
			continue;
		nodes++;
		if (n->block != b || n->busy != (users[b] > 0))
			broken("cache block %u: busy %u with %u holders", b, n->busy, users[b]);
		if (n->parent) {
			if (kvd_radix_by_block(r, n->parent->block) != n->parent)
				broken("cache block %u: its parent is not indexed", b);
			kids[n->parent->block]++;
		}
	}
	for (b = 0; b < r->blocks_total; b++) {
		n = r->by_block[b];
		if (!n)
			continue;
		if (n->n_children != kids[b] || n->on_lru != (!n->busy && !n->n_children))
			broken("cache block %u: %u children counted, %u found, evictable %u", b,
			       n->n_children, kids[b], n->on_lru);
	}
	free(kids);
	for (n = r->lru_head; n; n = n->lru_next)
		if (!n->on_lru || ++leaves > nodes)
			broken("cache block %u on the eviction list, not evictable", n->block);
	if (nodes != r->n || leaves != r->n_evictable)
		broken("cache: %u nodes and %u evictable counted, %u and %u found", r->n,
		       r->n_evictable, nodes, leaves);
}

/* A running job's positions: the KV, then those sent in steps, then
 * those to send; blocks for all sent. A preempted one's: none. */
static void audit_progress(const struct kvd *d, const struct kvd_job *j)
{
	const struct kvd_conv *c = j->conv;

	/* preempted: nothing sent, nothing in flight, all recomputed */
	if (j->state == JOB_PREEMPTED && (j->n_sched || j->inflight))
		broken("job %llu: preempted with %u positions sent, %u steps in flight",
		       (unsigned long long)j->seq_id, j->n_sched, j->inflight);
	if (j->state != JOB_RUNNING || !c || !c->has_kv)
		return;
	if (j->n_sched < c->as.s.n_tokens || j->n_sched > c->n_tokens ||
	    j->n_sched > c->as.s.n_blocks * d->geom.block_tokens)
		broken("job %llu: %u positions sent, KV %u, tokens %u, blocks %u",
		       (unsigned long long)j->seq_id, j->n_sched, c->as.s.n_tokens, c->n_tokens,
		       c->as.s.n_blocks);
}

/* Jobs per tenant (fair.c), steps in flight per job and per worker. */
static void audit_jobs(struct kvd *d)
{
	uint32_t per[KVD_MAX_TENANTS + 1] = { 0 }, queued = 0, slot, i, k, s;
	struct kvd_job *j;

	for (j = d->jobs; j; j = j->next) {
		uint32_t held = 0;

		if (j->state != JOB_FINISHED) {
			per[kvd_tenant_slot(d, j->tenant)]++;
			if (j->conv && j->conv->job != j)
				broken("job %llu: its conversation %s is another's",
				       (unsigned long long)j->seq_id, j->conv->id);
		}
		queued += j->state == JOB_QUEUED;
		for (i = 0; i < d->n_workers; i++) {
			const struct kvd_worker *w = &d->workers[i];

			for (k = 0; k < w->n_q; k++) {
				const struct kvd_wstep *st = &w->q[(w->q_head + k) % KVD_MAX_DEPTH];

				for (s = 0; s < st->n_seq; s++) {
					if (st->seqs[s].j != j)
						continue;
					held++;
					if (j->worker != (int)i)
						broken("job %llu: in worker %u's step, its worker %d",
						       (unsigned long long)j->seq_id, i, j->worker);
				}
			}
		}
		if (held != j->inflight || (!held && j->worker != -1))
			broken("job %llu: %u steps in flight counted, %u found (worker %d)",
			       (unsigned long long)j->seq_id, j->inflight, held, j->worker);
		/* bisection: a step of its group that succeeded proved it */
		if (j->group && j->test_group_ok)
			broken("job %llu: still in bisection group %u after a step of it succeeded",
			       (unsigned long long)j->seq_id, j->group);
		audit_progress(d, j);
	}
	if (queued > d->n_queued)
		broken("%u queued jobs, %u counted", queued, d->n_queued);
	for (slot = 0; slot <= d->cfg.n_tenants; slot++)
		if (per[slot] != d->tenant_jobs[slot])
			broken("tenant %u: %u jobs counted, %u found", slot, d->tenant_jobs[slot],
			       per[slot]);
	for (i = 0; i < d->n_workers; i++) {
		const struct kvd_worker *w = &d->workers[i];
		uint32_t tokens = 0;

		if (w->n_q > KVD_MAX_DEPTH || (w->n_q && w->state == W_DOWN))
			broken("worker %u: %u steps in flight (%s)", i, w->n_q,
			       w->state == W_DOWN ? "down" : "up");
		for (k = 0; k < w->n_q; k++) {
			const struct kvd_wstep *st = &w->q[(w->q_head + k) % KVD_MAX_DEPTH];
			uint32_t n_new = 0;

			for (s = 0; s < st->n_seq; s++)
				n_new += st->seqs[s].n_new;
			if (n_new != st->tokens)
				broken("worker %u: a step of %u tokens sends %u", i, st->tokens, n_new);
			tokens += st->tokens;
		}
		if (tokens != w->q_tokens)
			broken("worker %u: %u tokens in flight counted, %u found", i, w->q_tokens,
			       tokens);
	}
}

/*
 * No worker idles while work it may take waits (step.c, kvd_steps_build):
 * after a turn, a usable worker with nothing in flight means no running
 * job had a next step for it. Left out: the copy handoff and remote
 * stages (their own rules), a turn whose build ran short of memory, a
 * job whose next step needs blocks it does not hold (reserving them may
 * wait for room), and with stages apart a job of the other stage's kind
 * outside a bisection group (a group's steps go to any idle worker).
 */
static void audit_idle(const struct kvd *d)
{
	int share = kvd_stages_shared(d);
	uint32_t i, bt = d->geom.block_tokens;
	const struct kvd_job *j;

	if (d->cfg.handoff == KVD_HANDOFF_COPY || d->test_build_short)
		return;
	for (i = 0; i < d->n_workers; i++)
		if (d->workers[i].remote)
			return;
	for (i = 0; i < d->n_workers; i++) {
		const struct kvd_worker *w = &d->workers[i];

		if (w->n_q || !kvd_worker_usable(w))
			continue;
		for (j = d->jobs; j; j = j->next) {
			const struct kvd_conv *c = j->conv;
			uint32_t left, k;

			if (j->state != JOB_RUNNING || !c || !c->has_kv || j->cancelled ||
			    j->inflight || j->n_sched >= c->n_tokens)
				continue;
			left = c->n_tokens - j->n_sched;
			k = 1;
			if (left > 1) {
				k = left < d->cfg.chunk_tokens ? left : d->cfg.chunk_tokens;
				if (k > d->cfg.step_tokens)
					k = d->cfg.step_tokens;
			}
			if ((uint64_t)c->as.s.n_blocks * bt < (uint64_t)j->n_sched + k)
				continue;
			if (!j->group && !share && (left > 1) != (w->role == KVD_ROLE_PREFILL))
				continue;
			broken("worker %u (%s) idle while job %llu waits for a step of %u at %u of "
			       "%u tokens (group %u, stages %s)", i,
			       w->role == KVD_ROLE_PREFILL ? "prefill" : "decode",
			       (unsigned long long)j->seq_id, k, j->n_sched, c->n_tokens, j->group,
			       share ? "shared" : "apart");
		}
	}
}

/* Is job j in step st? */
static int in_step(const struct kvd_wstep *st, const struct kvd_job *j)
{
	uint32_t s;

	for (s = 0; s < st->n_seq; s++)
		if (st->seqs[s].j == j)
			return 1;
	return 0;
}

/*
 * What a step took is what it was built to take (step.c, fill): only the
 * kinds it wanted (1 decode, 2 prompt chunks) and only its group's jobs;
 * and the last step a worker got in this turn is full: with tokens of
 * its budget and room for sequences left, no running job it could have
 * taken waits (for decode, unless max_batch were reached). Left out, as
 * in audit_idle: the copy handoff, remote workers, a build short of
 * memory, and a job whose next step needs blocks it does not hold (its
 * reservation may rightly wait). Only the last step: a job may change
 * kind or become the worker's own after an earlier one was built.
 */
static void audit_steps(const struct kvd *d)
{
	uint32_t i, k, s, bt = d->geom.block_tokens;
	const struct kvd_job *j;

	if (d->cfg.handoff == KVD_HANDOFF_COPY || d->test_build_short)
		return;
	for (i = 0; i < d->n_workers; i++) {
		const struct kvd_worker *w = &d->workers[i];
		const struct kvd_wstep *last = NULL;
		uint32_t decoded = 0;

		if (w->remote)
			continue;
		for (k = 0; k < w->n_q; k++) {
			const struct kvd_wstep *st = &w->q[(w->q_head + k) % KVD_MAX_DEPTH];

			if (!st->kind || st->test_turn != d->test_turn)
				continue;
			last = st;
			for (s = 0; s < st->n_seq; s++) {
				const struct kvd_sent *e = &st->seqs[s];
				uint32_t want = e->n_new > 1 || !(e->flags & KVD_SEQ_SAMPLE) ? 2 : 1;

				if (!(st->test_want & want) || e->j->group != st->group)
					broken("worker %u: a step built for %s%s (group %u) took job %llu's "
					       "%s of %u (group %u)", i,
					       st->test_want & 1 ? "decode " : "",
					       st->test_want & 2 ? "chunks" : "", st->group,
					       (unsigned long long)e->j->seq_id,
					       want == 1 ? "decode token" : "chunk", e->n_new,
					       e->j->group);
			}
		}
		if (!last || last->tokens >= d->cfg.step_tokens || last->n_seq >= d->max_seqs)
			continue;
		for (s = 0; s < last->n_seq; s++)
			decoded += last->seqs[s].n_new == 1 && (last->seqs[s].flags & KVD_SEQ_SAMPLE);
		for (j = d->jobs; j; j = j->next) {
			const struct kvd_conv *c = j->conv;
			uint32_t left, kmax, want;

			if (j->state != JOB_RUNNING || !c || !c->has_kv || j->cancelled ||
			    j->group != last->group || j->n_sched >= c->n_tokens ||
			    (j->inflight && j->worker != (int)i) || in_step(last, j))
				continue;
			left = c->n_tokens - j->n_sched;
			want = left > 1 ? 2 : 1;
			if (!(last->test_want & want) || (want == 1 && decoded >= d->cfg.max_batch))
				continue;
			kmax = left < d->cfg.chunk_tokens ? left : d->cfg.chunk_tokens;
			if (kmax > d->cfg.step_tokens)
				kmax = d->cfg.step_tokens;
			if ((uint64_t)c->as.s.n_blocks * bt < (uint64_t)j->n_sched + kmax)
				continue;
			broken("worker %u: its step (%u of %u tokens, %u sequences, built for %s%s) "
			       "left job %llu's %s waiting at %u of %u tokens", i, last->tokens,
			       d->cfg.step_tokens, last->n_seq, last->test_want & 1 ? "decode " : "",
			       last->test_want & 2 ? "chunks" : "", (unsigned long long)j->seq_id,
			       want == 1 ? "decode token" : "chunk", j->n_sched, c->n_tokens);
		}
	}
}

/* The token counters /metrics and usage are made of: what was reused
 * comes from the cache, the conversation's own KV or a first choice's. */
static void audit_metrics(const struct kvd *d)
{
	const struct kvd_metrics *m = &d->m;

	if (m->cached_tokens != m->prefix_hit_tokens + m->session_hit_tokens +
				m->fork_copied_tokens || m->cached_tokens > m->prompt_tokens ||
	    m->preempt_recomputed_tokens > m->preempted_tokens)
		broken("tokens: %llu prompt, %llu cached = %llu cache + %llu session + %llu copied; "
		       "%llu of %llu preempted recomputed", (unsigned long long)m->prompt_tokens,
		       (unsigned long long)m->cached_tokens,
		       (unsigned long long)m->prefix_hit_tokens,
		       (unsigned long long)m->session_hit_tokens,
		       (unsigned long long)m->fork_copied_tokens,
		       (unsigned long long)m->preempt_recomputed_tokens,
		       (unsigned long long)m->preempted_tokens);
}

void kvd_audit(struct kvd *d)
{
	uint32_t tblocks[KVD_MAX_TENANTS + 1] = { 0 }, *users;

	if (!d->test_audit)
		return;
	users = calloc(d->geom.blocks_total ? d->geom.blocks_total : 1, sizeof(*users));
	if (!users)
		return;
	audit_convs(d, users, tblocks);
	audit_blocks(d, users, tblocks);
	audit_jobs(d);
	audit_idle(d);
	audit_steps(d);
	audit_metrics(d);
	free(users);
}

#endif
