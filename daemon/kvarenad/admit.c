// SPDX-License-Identifier: MIT
/*
 * admit.c - admission and preemption: which waiting requests get KV
 * blocks, and whose blocks go back when the arena runs out.
 *
 * Admission: preempted jobs first (oldest first: they were running),
 * then queued ones in fair order (fair.c), within a tenant by their
 * conversations' start (queued_key()). A job is admitted when its
 * conversation's KV session is open, the longest cached prefix shared
 * from the radix index, and blocks reserved for the whole prompt, so its
 * chunks never wait for room halfway. Admission does not take what it
 * would soon have to preempt (vLLM's watermark, SGLang's reserved new
 * tokens): a prompt is admitted only when the free blocks, after the
 * room the running replies are projected to need for their next tokens
 * ([sched] decode_reserve each, at most what is left of their max_tokens:
 * room_for()), cover its blocks and its own reserve. Running replies are
 * finished first; a job alone is admitted whenever its prompt fits. A
 * job whose next uncached block another conversation is computing right
 * now waits for it (prefix.c)
 * and lets the others pass, as does one whose KV is being read back
 * from disk (tiering.c); a job that does not fit waits for running
 * ones to free blocks, and stops admission behind it (so that a large
 * prompt is not starved by a stream of small ones), and so does one
 * whose KV's restore found no room. When nothing runs, the job first
 * in line that lacks room takes the KV that queued turns behind it kept
 * from their last turns (take_queued_kv). A request that could
 * never fit was refused at submit with a 400 naming the limit (core.c):
 * the context is bounded by the arena.
 *
 * Admission keeps only a few steps ahead of the prefill stage: at most
 * [sched] prefill_ahead prompt tokens of a tenant admitted and not yet
 * computed (prefill_pending()), or one prompt however long. A prompt
 * admitted holds its blocks until it is computed: in the 1000-agent
 * benchmark, hundreds of first turns admitted at once held most of an
 * 8-bit KV's arena for the minutes one prefill worker took to compute
 * them, while the turns of conversations back from their tools, a few
 * tokens each, waited for room. The next in line waits instead, not
 * counted as lacking room, and a turn that continues a conversation is
 * first in line before the first turns of conversations that began after
 * it (queued_key()).
 *
 * Preemption: when a running job needs a block (its next decode token,
 * the tool results appended to it) and evicting idle KV, then the KV
 * queued turns kept, cannot free one, the running job of lowest priority
 * (fair.c: the tenant served most, then the newest) that has no step in
 * flight gives its KV back and
 * waits to be readmitted; its full blocks stay in the prefix cache until
 * pressure takes them too. kvd_preempt_how() is the one place the choice
 * of what happens to the victim's KV is made: recompute today (the
 * tokens are kept; readmission recomputes what the cache lost, with the
 * same outputs); a disk tier adds spilling there.
 *
 * n > 1 choices of one request (kvd_request.fork_of): each choice after
 * the first waits until the first one's prompt KV is computed, shares
 * its full blocks through the prefix cache and copies the rest (the
 * partial last block: a block is shared whole or not at all) from the
 * first choice's blocks in the arena into blocks of its own, so the
 * prompt is computed once; its last token is computed again by each
 * choice, for the logits it samples from (as after any full cache hit).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "log.h"

enum kvd_preempt {
	KVD_PREEMPT_RECOMPUTE = 0,	/* drop the KV, recompute on readmission */
};

/* What becomes of a preempted job's KV. The tiering work (issue 39)
 * decides here between recomputing and spilling, from the KV's size and
 * the measured costs. */
static enum kvd_preempt kvd_preempt_how(const struct kvd *d, const struct kvd_job *j)
{
	(void)d;
	(void)j;
	return KVD_PREEMPT_RECOMPUTE;
}

static void preempt(struct kvd *d, struct kvd_job *j)
{
	struct kvd_conv *c = j->conv;

	switch (kvd_preempt_how(d, j)) {
	case KVD_PREEMPT_RECOMPUTE:
		break;
	}
	d->m.preemptions++;
	d->m.preempted_tokens += c->as.s.n_tokens;
	/* what readmission will have to compute again (less what the
	 * prefix cache still has then) */
	j->preempt_lost = c->as.s.n_tokens > j->preempt_lost ? c->as.s.n_tokens : j->preempt_lost;
	kvd_log(KVD_LOG_INFO, "sched", "%s: preempted (%u tokens of KV, %u blocks): recomputed "
		"when readmitted", j->request_id, c->as.s.n_tokens, c->as.s.n_blocks);
	kvd_conv_drop_kv(d, c);
	j->n_sched = 0;
	j->state = JOB_PREEMPTED;
}

/* The running job to preempt: the lowest priority one with no step in
 * flight (tenant, when given: only that tenant's), or NULL. */
static struct kvd_job *victim(struct kvd *d, uint32_t tenant, int any_tenant)
{
	struct kvd_job *j, *v = NULL;

	for (j = d->jobs; j; j = j->next)
		if (j->state == JOB_RUNNING && !j->inflight && j->conv && j->conv->has_kv &&
		    (any_tenant || j->tenant == tenant) && (!v || kvd_fair_after(d, j, v)))
			v = j;
	return v;
}

static uint64_t queued_key(const struct kvd_job *j);

/* Is queued job a admitted after queued job b (fair order, then its
 * conversation's start: queued_key)? */
static int admitted_after(const struct kvd *d, const struct kvd_job *a, const struct kvd_job *b)
{
	double va = kvd_fair_vt(d, a->tenant), vb = kvd_fair_vt(d, b->tenant);

	if (a->tenant != b->tenant && va != vb)
		return va > vb;
	return queued_key(a) > queued_key(b);
}

/* The queued job other than j whose conversation's kept KV goes first:
 * the last in admission order; NULL when none keeps any. */
static struct kvd_job *last_queued_kv(const struct kvd *d, const struct kvd_job *j)
{
	struct kvd_job *q, *last = NULL;

	for (q = d->jobs; q; q = q->next) {
		const struct kvd_conv *c = q->conv;

		if (q != j && q->state == JOB_QUEUED && !q->cancelled && c && c->has_kv &&
		    c->as.s.n_blocks && !c->tier_op && !c->tier_setup &&
		    (!last || admitted_after(d, q, last)))
			last = q;
	}
	return last;
}

/*
 * The KV that queued jobs' conversations kept from their last turns (not
 * idle while a job waits on it, so kvd_make_room leaves it) goes, the
 * last in admission order first, until `want` blocks are free or on
 * their way; not j's own. Taken for a running job's next block before
 * any running job is preempted (a preempted job is readmitted before any
 * queued one: keeping their KV at its cost inverts that order), and for
 * the job first in line when nothing runs: then nothing else would ever
 * give blocks back (a trace replay stopped for good so: a readmitted
 * job lacking 108 blocks of 192, two queued turns holding 122). They
 * recompute it, or restore it from disk, when admitted. 1 when any went.
 */
static int take_queued_kv(struct kvd *d, const struct kvd_job *j, uint32_t want)
{
	struct kvd_job *last;
	int took = 0;

	/* with no queued turn's KV (the usual case under pressure) the room
	 * is not even counted again */
	while ((last = last_queued_kv(d, j)) &&
	       kvd_make_room(d, want) + kvd_tiering_freeing(d) < want) {
		kvd_log(KVD_LOG_INFO, "sched", "%s: %u blocks of KV kept for its queued turn "
			"taken for %s", last->request_id, last->conv->as.s.n_blocks, j->request_id);
		if (!kvd_tiering_evict(d, last->conv) && last->conv->as.s.n_blocks)
			break;	/* nothing came free: do not spin */
		took = 1;
	}
	return took;
}

int kvd_reserve_or_preempt(struct kvd *d, struct kvd_job *j, uint32_t total)
{
	struct kvd_conv *c = j->conv;
	int rc;

	for (;;) {
		struct kvd_job *v;

		rc = kvd_conv_reserve_to(d, c, total);
		if (rc == -EDQUOT) {
			/* the tenant's own idle KV first, then its running jobs */
			uint32_t bt = d->geom.block_tokens;
			uint32_t need = (total + bt - 1) / bt - c->as.s.n_blocks;

			if (kvd_make_room_tenant(d, j->tenant, need))
				continue;
			v = victim(d, j->tenant, 0);
			if (!v || v == j) {
				/* alone over its budget: the budget is its context */
				kvd_job_finish(d, j, KVD_FINISH_LENGTH);
				return -EDQUOT;
			}
			preempt(d, v);
			continue;
		}
		if (rc != -ENOSPC)
			break;
		if (kvd_tiering_freeing(d))
			return 1;	/* spills being written free blocks: next turn */
		if (take_queued_kv(d, j, (total + d->geom.block_tokens - 1) / d->geom.block_tokens -
					       c->as.s.n_blocks))
			continue;
		v = victim(d, 0, 1);
		if (!v)
			return 1;	/* everyone holding blocks is in flight: next turn */
		preempt(d, v);
		if (v == j)
			return 1;
	}
	if (rc == -E2BIG) {
		kvd_job_finish(d, j, KVD_FINISH_LENGTH);
		return rc;
	}
	if (rc) {
		kvd_job_fail(d, j, KVD_ERR_INTERNAL, "cannot reserve KV blocks");
		return rc;
	}
	return 0;
}

/* ---- n > 1: the prompt's KV from the first choice -------------------------- */

static void fork_drop(struct kvd_job *j)
{
	if (j->fork_of) {
		kvd_job_put(j->fork_of);
		j->fork_of = NULL;
	}
}

/*
 * The first choice's conversation when it holds KV for the first `need`
 * tokens of j's prompt, the same tokens. NULL with *wait set: not yet
 * (it is queued, preempted, restoring its KV or computing the prompt);
 * NULL alone: nothing to copy from (it ended, its text differs, its KV
 * lives where this process does not read it: a copy hand-off keeps a
 * prefill worker's KV private, remote hosts keep theirs).
 */
static struct kvd_conv *fork_source(struct kvd *d, struct kvd_job *j, uint32_t need,
				    int *wait)
{
	struct kvd_job *p = j->fork_of;
	struct kvd_conv *pc = p->conv;

	*wait = 0;
	if (d->cfg.handoff != KVD_HANDOFF_ARENA || d->cfg.remote_prefill ||
	    d->cfg.remote_decode || p->state == JOB_FINISHED || p->cancelled || p->failed ||
	    !pc)
		return NULL;
	if (!p->piece_appended) {
		*wait = 1;
		return NULL;
	}
	if (pc->n_tokens < need ||
	    memcmp(pc->tokens, j->conv->tokens, (size_t)need * sizeof(*pc->tokens)))
		return NULL;
	if (pc->has_kv && pc->as.s.n_tokens >= need)
		return pc;
	/* its prompt is on its way; a tool round's dropped KV is not */
	*wait = p->state == JOB_QUEUED || p->state == JOB_PREEMPTED ||
		p->state == JOB_RUNNING || p->state == JOB_KV_WAIT;
	return NULL;
}

/* 1: j waits for the first choice's prompt KV; 0: go on (j->fork_of
 * dropped when there is nothing to copy from). */
static int fork_wait(struct kvd *d, struct kvd_job *j)
{
	int wait;

	if (!j->fork_of || fork_source(d, j, j->conv->n_tokens - 1, &wait))
		return 0;
	if (!wait)
		fork_drop(j);
	return wait;
}

/* After the prefix cache's blocks are shared and the prompt's blocks
 * reserved: the positions after the shared ones, up to the last prompt
 * token, copied from the first choice's blocks. Returns how many. */
static uint32_t fork_copy(struct kvd *d, struct kvd_job *j)
{
	struct kvd_conv *c = j->conv, *pc;
	uint32_t bt = d->geom.block_tokens, need = c->n_tokens - 1, b;
	int wait;

	if (!j->fork_of || c->as.s.n_tokens >= need || c->as.s.n_tokens % bt)
		return 0;
	/* reserving may have made room by evicting idle KV: look again */
	pc = fork_source(d, j, need, &wait);
	if (!pc || kva_arena_map(d->arena, NULL))
		return 0;
	for (b = c->as.s.n_tokens / bt; b * bt < need; b++) {
		void *to = kva_arena_block_ptr(d->arena, c->as.s.block_table[b]);
		const void *from = kva_arena_block_ptr(d->arena, pc->as.s.block_table[b]);

		if (b >= c->as.s.n_blocks || b >= pc->as.s.n_blocks || !to || !from)
			return 0;	/* computed instead */
		memcpy(to, from, d->geom.kv_block_bytes);
	}
	b = need - c->as.s.n_tokens;
	d->m.fork_copied_tokens += b;
	c->as.s.n_tokens = need;
	return b;
}

/* The request's tokens join its conversation (once). */
static int take_piece(struct kvd *d, struct kvd_job *j)
{
	struct kvd_conv *c = j->conv;
	int rc;

	if (j->piece_appended)
		return 0;
	rc = kvd_conv_append_piece(c, &j->piece);
	kvd_piece_free(&j->piece);
	if (rc)
		return rc;
	j->piece_appended = 1;
	if (c->wait_started_ns && c->tool_class) {
		/* the tool ran until its result arrived, not until admission:
		 * time queued here is the server's, not the tool's */
		uint64_t end = c->wait_ended_ns > c->wait_started_ns ? c->wait_ended_ns : kvd_now_ns();

		kvd_toolwait_record(d, c->tool_class, (end - c->wait_started_ns) / 1000);
		c->wait_started_ns = 0;
	}
	c->wait_ended_ns = 0;
	/* the reply continues a text */
	j->text_base = c->text_len;
	kve_detok_init(&j->detok, d->tok);
	j->detok.at_start = 0;
	j->n_prompt = c->n_tokens;
	return 0;
}

/* Blocks the running job j is projected to need beyond those it holds:
 * its next decode_reserve tokens (at most what is left of its max_tokens;
 * a prompt's blocks are reserved at admission). */
static uint32_t decode_need(const struct kvd *d, const struct kvd_job *j)
{
	const struct kvd_conv *c = j->conv;
	uint32_t bt = d->geom.block_tokens, left, want;

	if (!c || !c->has_kv)
		return 0;
	left = j->max_new > j->n_gen ? j->max_new - j->n_gen : 0;
	if (left > d->cfg.decode_reserve)
		left = d->cfg.decode_reserve;
	want = (uint32_t)(((uint64_t)c->n_tokens + left + bt - 1) / bt);
	if (want > c->as.cap)
		want = c->as.cap;
	return want > c->as.s.n_blocks ? want - c->as.s.n_blocks : 0;
}

/* What the running jobs are projected to need (decode_need), and whether
 * any runs (with KV that grows). */
static uint32_t committed_blocks(const struct kvd *d, int *any)
{
	const struct kvd_job *j;
	uint32_t sum = 0;

	*any = 0;
	for (j = d->jobs; j; j = j->next)
		if ((j->state == JOB_RUNNING || j->state == JOB_KV_LOAD) && j->conv &&
		    j->conv->has_kv) {
			*any = 1;
			sum += decode_need(d, j);
		}
	return sum;
}

/* The blocks j's prompt lacks with `held` of them in its session, and its
 * own decode reserve. */
static uint32_t blocks_wanted(const struct kvd *d, const struct kvd_job *j, uint32_t held)
{
	const struct kvd_conv *c = j->conv;
	uint32_t bt = d->geom.block_tokens, prompt, own;

	prompt = (c->n_tokens + bt - 1) / bt;
	prompt = prompt > held ? prompt - held : 0;
	own = j->max_new > j->n_gen ? j->max_new - j->n_gen : 0;
	if (own > d->cfg.decode_reserve)
		own = d->cfg.decode_reserve;
	own = (c->n_tokens + own + bt - 1) / bt - (c->n_tokens + bt - 1) / bt;
	return prompt + own;
}

/*
 * Is there room to admit j (its conversation's KV session open, cached
 * blocks shared) without taking what the running jobs will need? Its
 * prompt's blocks not yet held, its own reserve and the running ones'
 * must be free, after evicting idle KV and unused cached blocks for them
 * (kvd_make_room: never a running job's). A job alone is admitted when its
 * prompt fits: nothing else will give blocks back.
 */
static int room_for(struct kvd *d, struct kvd_job *j, uint32_t committed, int others)
{
	uint32_t want, free_now;

	if (!others || !d->cfg.decode_reserve)
		return 1;
	want = blocks_wanted(d, j, j->conv->as.s.n_blocks) + committed;
	free_now = kvd_blocks_free(d);
	if (free_now < want && !kvd_tiering_busy(d))
		free_now = kvd_make_room(d, want);
	if (free_now < want)
		return 0;
	/* what prefetches due while it runs will need stays free (kvd_admit):
	 * nothing is evicted for it here, their prefetches take their own
	 * room when due (tiering.c, prefetch_room) */
	if (free_now < want + d->admit_reserve) {
		d->admit_reserved = 1;
		return 0;
	}
	return 1;
}

/*
 * room_for's "no" for j, told before its KV session is opened and its n
 * cached blocks attached, where that is certain: the room free now holds
 * it (room_for would make none) but not beside the prefetch reserve.
 * Beside the reserve a turn tries every waiting job, since a smaller one
 * may fit; opening each, attaching its prefix (a second walk of the
 * index) and giving both back was most of a turn with 600 first turns
 * queued (6.7 ms a turn, the lock held: a 1000-agent trial).
 */
static int short_beside_reserve(struct kvd *d, const struct kvd_job *j, uint32_t n,
				uint32_t committed, int others)
{
	uint32_t want, free_now;

	if (!d->admit_reserve || !others || !d->cfg.decode_reserve)
		return 0;
	want = blocks_wanted(d, j, n) + committed;
	free_now = kvd_blocks_free(d);
	if (free_now < want || free_now >= want + d->admit_reserve)
		return 0;
	d->admit_reserved = 1;
	return 1;
}

/*
 * No room for j after its KV session was opened and the cached prefix
 * attached in this turn: it gives them back and waits holding nothing.
 * A waiting job that kept the blocks it attached would hold part of the
 * arena that no running job can take (its conversation is not idle):
 * with readmitted preempted jobs each holding their cached prefixes and
 * waiting for the rest, nothing ran again (a livelock seen at the arena's
 * floor). Its full blocks stay in the prefix cache: it shares them again
 * when it fits, unless pressure takes them first.
 */
static int wait_empty(struct kvd *d, struct kvd_conv *c, int opened)
{
	if (opened)
		d->m.admit_given_back++;
	if (opened == 1)
		kvd_conv_drop_kv(d, c);
	else if (opened == 2)
		kvd_conv_free_blocks(d, c);	/* the session stays (tiering.c) */
	return 1;
}

/* 0 admitted, 1 no room (wait; stop admitting), 2 waiting for a shared
 * prefix being computed (others may pass), <0 failed (job finished). */
static int admit_one(struct kvd *d, struct kvd_job *j, uint32_t *committed, int *others)
{
	struct kvd_conv *c = j->conv;
	uint32_t kv0 = 0, sess_hit, n, copied = 0;
	int rc, readmit = j->state == JOB_PREEMPTED, opened = 0;

	rc = take_piece(d, j);
	if (rc) {
		kvd_job_fail(d, j, KVD_ERR_INTERNAL, "out of memory");
		return rc;
	}
	if (c->n_tokens >= d->ctx_len || !c->n_tokens) {
		kvd_job_fail(d, j, KVD_ERR_TOO_LONG, "the conversation exceeds the context length");
		return -E2BIG;
	}
	/* its KV may be on disk: the job waits for the restore (tiering.c)
	 * and the others pass; a restore that found no room is a job
	 * lacking room and holds admission behind it like one (later
	 * arrivals took the room it had made: a 57 ms restore stalled 41 s
	 * in an eviction trial) */
	switch (kvd_tiering_need_kv(d, c)) {
	case 0:
		break;
	case 2:
		return 1;
	default:
		return 2;
	}
	if (!readmit) {
		/* what room_for() and short_beside_reserve() reserve for it */
		j->max_new = j->s.max_tokens ? j->s.max_tokens : d->cfg.max_tokens_cap;
		if (j->max_new > d->ctx_len - c->n_tokens)
			j->max_new = d->ctx_len - c->n_tokens;
	}
	sess_hit = c->has_kv ? c->as.s.n_tokens : 0;
	if (!c->has_kv || (!c->as.s.n_blocks && !c->as.s.n_tokens)) {
		opened = c->has_kv ? 2 : 1;
		n = kvd_prefix_lookup(d, c, c->n_tokens - 1, NULL);
		if ((!readmit && fork_wait(d, j)) || kvd_prefix_pending_wait(d, c, n)) {
			if (!j->waited_prefix)
				d->m.prefill_waits++;
			j->waited_prefix = 1;
			return 2;
		}
		if (short_beside_reserve(d, j, d->cfg.prefix_cache ? n : 0, *committed, *others))
			return 1;
		rc = kvd_conv_open_kv(d, c);
		if (rc == -ENOSPC || rc == -EBUSY) {
			kvd_make_room(d, 1);
			rc = kvd_conv_open_kv(d, c);
		}
		if (rc == -ENOSPC || rc == -EBUSY)
			return 1;
		if (rc) {
			kvd_job_fail(d, j, KVD_ERR_INTERNAL, "cannot open a kvarena session");
			return rc;
		}
		if (d->cfg.prefix_cache)
			kv0 = kvd_prefix_attach(d, c, c->n_tokens - 1);
	}
	if (!room_for(d, j, *committed, *others))
		return wait_empty(d, c, opened);
	rc = kvd_conv_reserve_to(d, c, c->n_tokens);
	if (rc == -EDQUOT) {
		uint32_t bt = d->geom.block_tokens;

		kvd_make_room_tenant(d, j->tenant, (c->n_tokens + bt - 1) / bt - c->as.s.n_blocks);
		rc = kvd_conv_reserve_to(d, c, c->n_tokens);
		if (rc == -EDQUOT)	/* its tenant's running jobs hold the budget */
			return wait_empty(d, c, opened);
	}
	if (rc == -ENOSPC)
		return wait_empty(d, c, opened);
	if (rc) {
		kvd_job_fail(d, j, rc == -E2BIG ? KVD_ERR_TOO_LONG : KVD_ERR_INTERNAL,
			     rc == -E2BIG ? "the conversation exceeds the context length" :
					    "cannot reserve KV blocks");
		return rc;
	}
	if (!readmit)
		copied = fork_copy(d, j);
	fork_drop(j);
	j->n_sched = c->as.s.n_tokens;
	if (!readmit) {
		j->n_cached = c->as.s.n_tokens;
		if (j->n_cached > c->n_tokens - 1)
			j->n_cached = c->n_tokens - 1;
		j->n_restored = c->turn_restored < j->n_cached ? c->turn_restored : j->n_cached;
		j->stall_ms = c->turn_stall_ms;
		c->turn_restored = c->turn_stall_ms = 0;
		d->m.prompt_tokens += j->n_prompt;
		d->m.cached_tokens += j->n_cached;
		if (kv0 && !sess_hit)
			d->m.prefix_hit_tokens += j->n_cached - copied;
		else
			d->m.session_hit_tokens += j->n_cached - copied;
		j->order = ++d->next_order;
		j->place = queued_key(j);
		j->t_admit = kvd_now_ns();
		j->in_prefill = 1;
		d->n_queued--;
	}
	if (readmit && j->preempt_lost) {
		/* the positions computed before, less what the cache kept */
		if (j->preempt_lost > c->as.s.n_tokens)
			d->m.preempt_recomputed_tokens += j->preempt_lost - c->as.s.n_tokens;
		j->preempt_lost = 0;
	}
	kvd_prefix_pending_add(d, c);
	j->state = JOB_RUNNING;
	kvd_kstate_set(d, c, KVA_STATE_PREFILL, 0, 0);
	*committed += decode_need(d, j);
	*others = 1;
	return 0;
}

/* Prompt tokens each tenant's running jobs were admitted for and no step
 * has taken yet (their blocks reserved, their KV to compute; a reply's
 * next token to decode is not one): per tenant, so that the steps' fair
 * shares (fair.c) have each tenant's prompts to choose from. */
static void prefill_pending(const struct kvd *d, uint64_t *pend)
{
	const struct kvd_job *j;

	memset(pend, 0, (KVD_MAX_TENANTS + 1) * sizeof(*pend));
	for (j = d->jobs; j; j = j->next)
		if (j->state == JOB_RUNNING && j->in_prefill && j->conv &&
		    j->n_sched < j->conv->n_tokens && j->tenant <= KVD_MAX_TENANTS)
			pend[j->tenant] += j->conv->n_tokens - j->n_sched;
}

/* What j would add to it, before its cached prefix is known: all but
 * the KV its conversation holds (a first turn's shared prompt counts),
 * its request's tokens too while they have not joined the conversation
 * (take_piece). */
static uint64_t prefill_guess(const struct kvd_job *j)
{
	const struct kvd_conv *c = j->conv;
	uint64_t n = (uint64_t)c->n_tokens + (j->piece_appended ? 0 : j->piece.n);
	uint32_t held = c->has_kv ? c->as.s.n_tokens : 0;

	return n > held ? n - held : 0;
}

/* Admission order, fixed for a turn: virtual times change only when
 * steps are built (fair.c), never while admitting. */
struct kvd_admit_cand {
	struct kvd_job *j;
	double vt;
	uint64_t key;			/* preempted: order; queued: queued_key() */
	size_t pos;			/* in d->jobs: ties keep the list's order */
};

static int cand_cmp(const void *a, const void *b)
{
	const struct kvd_admit_cand *x = a, *y = b;

	if (x->j->tenant != y->j->tenant && x->vt != y->vt)
		return x->vt < y->vt ? -1 : 1;
	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* A queued job's place among its tenant's: its conversation's start
 * (program-level first come, first served, as Continuum orders agent
 * programs): a conversation back from a tool goes before the
 * first turns of conversations that began after it, instead of queueing
 * its few new tokens behind every prompt that arrived while its tool
 * ran. A new conversation starts with its first request. */
static uint64_t queued_key(const struct kvd_job *j)
{
	uint64_t t = j->conv ? j->conv->t_start_ns : 0;

	return t && t < j->t_submit ? t : j->t_submit;
}

/* The jobs in state st, not cancelled, in admission order (d->admit_buf):
 * sorted once, so that a turn admitting or passing over n waiting jobs
 * costs n log n, not n scans of every job (1000 first turns waiting for
 * one shared prefix were a million job visits a turn). */
static size_t candidates(struct kvd *d, enum kvd_job_state st, struct kvd_admit_cand **out)
{
	struct kvd_job *j;
	size_t n = 0, pos = 0;

	for (j = d->jobs; j; j = j->next, pos++) {
		if (j->state != st || j->cancelled)
			continue;
		if (n == d->admit_cap) {
			size_t cap = d->admit_cap ? 2 * d->admit_cap : 64;
			struct kvd_admit_cand *c = realloc(d->admit_buf, cap * sizeof(*c));

			if (!c)
				break;	/* the rest wait for the next turn */
			d->admit_buf = c;
			d->admit_cap = cap;
		}
		d->admit_buf[n++] = (struct kvd_admit_cand){
			j, st == JOB_QUEUED ? kvd_fair_vt(d, j->tenant) : 0,
			st == JOB_QUEUED ? queued_key(j) : j->order, pos };
	}
	/* preempted: oldest first, whatever the tenant (vt 0) */
	if (n > 1)
		qsort(d->admit_buf, n, sizeof(*d->admit_buf), cand_cmp);
	*out = d->admit_buf;
	return n;
}

/* j waits for room: the blocks its prompt lacks are wanted now. */
static void wanted(struct kvd *d, const struct kvd_job *j)
{
	const struct kvd_conv *c = j->conv;
	uint32_t bt = d->geom.block_tokens, need = (c->n_tokens + bt - 1) / bt;
	uint32_t held = c->has_kv ? c->as.s.n_blocks : 0;

	d->room_wanted += need > held ? need - held : 0;
}

/* The blocks j lacks for its prompt and its first token. */
static uint32_t line_need(const struct kvd *d, const struct kvd_job *j)
{
	const struct kvd_conv *c = j->conv;
	uint32_t bt = d->geom.block_tokens, need = (c->n_tokens + bt) / bt;
	uint32_t held = c->has_kv ? c->as.s.n_blocks : 0;

	return need > held ? need - held : 0;
}

/* Nothing runs, none was admitted in this turn and no spill is on its
 * way: the job first in line that lacks room waits for nothing. */
static int first_in_line_alone(struct kvd *d, uint32_t running, int others)
{
	return !running && !others && !kvd_tiering_busy(d);
}

void kvd_admit(struct kvd *d)
{
	struct kvd_job *j, *best, *head = NULL;
	struct kvd_admit_cand *c;
	uint32_t running = 0, committed;
	uint64_t due = UINT64_MAX, reserve_start = UINT64_MAX;
	uint64_t pend[KVD_MAX_TENANTS + 1] = { 0 };	/* prefill_pending() */
	uint8_t ahead[KVD_MAX_TENANTS + 1] = { 0 };	/* a tenant's line waits */
	size_t n, i;
	int others, restore_waits = 0, giving = 0, rc;

#ifdef KVD_TEST_HOOKS
	/* test_orch: turns queued while this is set meet in one admission */
	if (d->test_hold_admit)
		return;
#endif
	/* what the waiting work lacks, counted again this turn (restores
	 * on demand that found no room too: a prefetch leaves it them) */
	d->room_wanted = 0;
	for (j = d->jobs; j; j = j->next) {
		/* a tool round whose KV came back from disk goes on; one whose
		 * restore lacks room holds admission (as admit_one) */
		if (j->state == JOB_KV_WAIT) {
			switch (kvd_tiering_need_kv(d, j->conv)) {
			case 0:
				kvd_resume_round(d, j);
				break;
			case 2:
				wanted(d, j);
				restore_waits = 1;
				break;
			}
		}
		if (j->state == JOB_RUNNING || j->state == JOB_KV_LOAD || j->state == JOB_TOOL_RUNNING ||
		    j->state == JOB_TOOL_RESULTS || j->state == JOB_KV_WAIT)
			running++;
		giving |= j->state == JOB_RUNNING || j->state == JOB_KV_LOAD;
	}
	/* a prefetch due that lacks room is its conversation's next turn come
	 * early: the turns of conversations that started after it wait, as
	 * they would behind that turn (queued_key), while a running job will
	 * give room back (with nothing running, waiting would idle the
	 * machine until the tool returned). Before, they took each block a
	 * reply gave back ahead of it, and the tool's result found its KV on
	 * disk: 10 of 22 restore stalls in an eviction run, 1-31 s each. */
	if (giving)
		due = kvd_tiering_due_start(d);
	/* and the prefetches due while a job admitted now would hold its
	 * blocks (hold_ns, measured): their room is kept from the turns of
	 * conversations that started after theirs (a first turn admitted
	 * into it held it through its prefill and decode, tens of seconds
	 * under load, while the prefetch waited: no_room stalls). With
	 * nothing running they pass: the machine would idle. */
	d->prefetch_reserve = giving && d->hold_ns ?
		kvd_tiering_reserve(d, kvd_now_ns() + d->hold_ns, &reserve_start) : 0;
	committed = committed_blocks(d, &others);
	/* preempted jobs, oldest first */
	n = candidates(d, JOB_PREEMPTED, &c);
	for (i = 0; i < n && !head; i++)
		if (admit_one(d, c[i].j, &committed, &others) == 1)
			head = c[i].j;
	/* queued jobs, fair order: the tenant of least virtual time, its
	 * oldest job; one that does not fit stops the rest, and so does a
	 * tool round's restore that found no room (it was running) */
	n = head || restore_waits ? 0 : candidates(d, JOB_QUEUED, &c);
	if (n)
		prefill_pending(d, pend);
	for (i = 0; i < n && !head; i++) {
		uint32_t t;

		best = c[i].j;
		if (queued_key(best) > due)
			continue;
		/* the prefill stage has work enough of this tenant's: its next
		 * in line waits (it does not lack room), and so do those behind */
		t = best->tenant <= KVD_MAX_TENANTS ? best->tenant : 0;
		if (d->cfg.prefill_ahead && (ahead[t] ||
					     (pend[t] && pend[t] + prefill_guess(best) >
							 d->cfg.prefill_ahead))) {
			d->m.admit_ahead_waits += !ahead[t];
			ahead[t] = 1;
			continue;
		}
		d->admit_reserve = queued_key(best) > reserve_start ? d->prefetch_reserve : 0;
		d->admit_reserved = 0;
		rc = admit_one(d, best, &committed, &others);
		d->admit_reserve = 0;
		if (rc == 1 && d->admit_reserved)
			continue;	/* a smaller one may fit beside the reserve */
		switch (rc) {
		case 0:
			running++;
			pend[t] += best->conv->n_tokens - best->n_sched;
			break;
		case 1:
			/* nothing running will free blocks: make room from idle
			 * KV and the cache (unless a spill in flight frees
			 * blocks soon) */
			if (!running && !kvd_tiering_busy(d)) {
				kvd_make_room(d, line_need(d, best));
				if (admit_one(d, best, &committed, &others) == 0) {
					running++;
					pend[t] += best->conv->n_tokens - best->n_sched;
					break;
				}
			}
			head = best;
			break;
		default:
			break;
		}
	}
	if (n) {
		uint64_t sum = 0;

		for (i = 0; i <= KVD_MAX_TENANTS; i++)
			sum += pend[i];
		if (sum > d->m.prefill_pending_max)
			d->m.prefill_pending_max = sum;
	}
	/* the job first in line lacks room and nothing runs: the KV queued
	 * turns behind it kept is all that can give blocks back */
	if (head && first_in_line_alone(d, running, others) &&
	    take_queued_kv(d, head, line_need(d, head)) &&
	    admit_one(d, head, &committed, &others) == 0)
		head = NULL;
	if (head)
		wanted(d, head);
}
