// SPDX-License-Identifier: MIT
/*
 * step.c - what each worker computes next, and what its answers mean.
 *
 * A running job has positions [n_sched, conversation tokens) left to
 * compute: a prompt (or the tool results appended to it) being
 * prefilled, or one token just sampled. A step is a token budget
 * ([sched] step_tokens): the decode tokens of running sequences (one
 * each, at most max_batch) and chunks of pending prompts (at most
 * chunk_tokens of one sequence per step), several sequences per step, so
 * long prompts never stall decoding and many conversations prefill at
 * once. The last chunk of a prompt samples; the others only write KV.
 *
 * Who gets what: workers are taken in routing-cost order (router.c);
 * first each idle worker gets its own stage's work (prefill workers
 * prompt chunks, decode workers decode tokens and, when no prefill worker
 * is free, prompt chunks in the room left: mixed steps); then, with
 * [sched] share_stages, an idle worker whose stage has nothing to do
 * takes the other stage's work (a prefill worker decodes, a decode
 * worker prefills), so no core idles while work waits; then each worker
 * gets a second step queued behind the one it computes (steps_in_flight
 * 2): the next chunk of a prompt it is prefilling, or new work, which it
 * starts the moment the first ends, while the orchestrator already looks
 * at the first's answer. Between tenants, fair.c decides; within one,
 * conversations go in the order they began (job->place, as admission
 * orders them): a turn back from a tool computes its few new tokens
 * before the rest of the long first prompts admitted while its tool ran.
 *
 * Failures: a step that fails, or whose worker dies or outlives its
 * lease, charges only the sequence that caused it: a batch is split in
 * two groups that run apart (bisection), a sequence failing alone is
 * charged, and failed after KVD_MAX_JOB_FAILS.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "log.h"

#define KVD_MAX_JOB_FAILS 3

static struct kvd_conv *live_conv(const struct kvd_job *j)
{
	return j->state == JOB_RUNNING && j->conv && j->conv->has_kv ? j->conv : NULL;
}

/* ---- releasing steps ------------------------------------------------------ */

/* The step no longer holds the job: with nothing else in flight, what it
 * had scheduled beyond its confirmed KV is to be sent again. */
static void unhold(struct kvd *d, struct kvd_job *j)
{
	if (j->inflight && !--j->inflight) {
		j->worker = -1;
		j->n_sched = j->conv && j->conv->has_kv ? j->conv->as.s.n_tokens : 0;
		if (j->state == JOB_KV_LOAD && !j->kv_payload)
			j->state = JOB_RUNNING;
		if (j->let_go)
			kvd_job_let_go(d, j);
	}
}

static void release_job(struct kvd *d, struct kvd_job *j)
{
	unhold(d, j);
	kvd_job_put(j);	/* the step's reference */
}

/* A failed step's sequences: one alone is charged; several are split in
 * two groups that run apart until the one at fault is alone. */
static void charge(struct kvd *d, struct kvd_wstep *st)
{
	struct kvd_job *live[2];
	uint32_t i, n = 0, half, g1, g2, k = 0;

	for (i = 0; i < st->n_seq; i++)
		if (st->seqs[i].j->state != JOB_FINISHED && n++ < 2)
			live[n - 1] = st->seqs[i].j;
	if (!n)
		return;
	d->m.step_failures++;
	if (n == 1) {
		struct kvd_job *j = live[0];

		j->group = 0;
#ifdef KVD_TEST_HOOKS
		j->test_group_ok = 0;
#endif
		if (++j->fails > KVD_MAX_JOB_FAILS) {
			d->m.requests_failed_worker++;
			kvd_job_fail(d, j, KVD_ERR_INTERNAL,
				     "a worker failed on this request's step alone, 4 times");
		}
		return;
	}
	d->m.bisections++;
	g1 = ++d->next_group;
	g2 = ++d->next_group;
	half = n / 2;
	for (i = 0; i < st->n_seq; i++) {
		struct kvd_job *j = st->seqs[i].j;

		if (j->state == JOB_FINISHED)
			continue;
		j->group = k++ < half ? g1 : g2;
#ifdef KVD_TEST_HOOKS
		j->test_group_ok = 0;
#endif
	}
}

static void pop(struct kvd_worker *w)
{
	struct kvd_wstep *st = &w->q[w->q_head];

	w->q_tokens -= st->tokens;
	w->q_head = (w->q_head + 1) % KVD_MAX_DEPTH;
	w->n_q--;
	w->head_started_ns = kvd_now_ns();
}

void kvd_steps_void(struct kvd *d, struct kvd_worker *w, int charge_head)
{
	while (w->n_q) {
		struct kvd_wstep *st = &w->q[w->q_head];
		uint32_t i;

		if (charge_head && !st->void_)
			charge(d, st);
		charge_head = 0;
		for (i = 0; i < st->n_seq; i++)
			release_job(d, st->seqs[i].j);
		pop(w);
	}
	w->q_tokens = 0;
}

/* ---- answers --------------------------------------------------------------------- */

static int on_kv_loaded(struct kvd *d, struct kvd_worker *w, const void *p, size_t len)
{
	struct kvd_wstep *st = &w->q[w->q_head];
	struct kvd_result r;
	struct kvd_job *j;

	if (len != sizeof(r) || st->kind || st->n_seq != 1)
		return -EPROTO;
	memcpy(&r, p, sizeof(r));
	if (r.step_id != st->id)
		return -EPROTO;
	d->m.kv_bytes_copied += r.kv_bytes;
	j = st->seqs[0].j;
	if (!st->void_) {
		free(j->kv_payload);
		j->kv_payload = NULL;
		j->kv_payload_len = 0;
	}
	pop(w);
	release_job(d, j);
	return 0;
}

/* copy mode: the blocks an answer sends are its conversation's */
static int kv_range_ok(const struct kvd_job *j, const struct kvd_result_seq *rs)
{
	const struct kvd_conv *c = j ? j->conv : NULL;

	return c && c->has_kv && (uint64_t)rs->first_block + rs->n_kv_blocks <= c->as.s.n_blocks;
}

/* copy mode: the bytes of the blocks a prefill wrote, for a decode worker
 * (their range checked with the whole answer: kv_range_ok) */
static void keep_kv_bytes(struct kvd *d, struct kvd_job *j, const struct kvd_result_seq *rs,
			  const char *p)
{
	struct kvd_conv *c = j->conv;
	size_t kvb = (size_t)rs->n_kv_blocks * d->geom.kv_block_bytes;
	uint32_t b;
	char *q;

	free(j->kv_payload);
	j->kv_payload_len = (size_t)rs->n_kv_blocks * (4 + d->geom.kv_block_bytes);
	j->kv_payload = malloc(j->kv_payload_len);
	if (!j->kv_payload) {
		j->kv_payload_len = 0;
		return;		/* decoded from the arena as is: no copy counted */
	}
	q = j->kv_payload;
	for (b = 0; b < rs->n_kv_blocks; b++, q += 4)
		memcpy(q, &c->as.s.block_table[rs->first_block + b], 4);
	memcpy(q, p, kvb);
}

int kvd_step_result(struct kvd *d, struct kvd_worker *w, uint16_t type, const void *buf,
		    size_t len)
{
	struct kvd_wstep *st = &w->q[w->q_head];
	const char *p = buf, *end = p + len;
	struct kvd_result r;
	uint32_t i;

	if (type == KVD_MSG_KV_LOADED)
		return on_kv_loaded(d, w, buf, len);
	if (!st->kind || len < sizeof(r))
		return -EPROTO;
	memcpy(&r, p, sizeof(r));
	p += sizeof(r);
	if (r.step_id != st->id)
		return -EPROTO;
	if (r.status || st->void_) {
		if (r.status && !st->void_) {
			kvd_log(KVD_LOG_WARN, "sched", "worker %d: step failed: %s", w->index,
				strerror(-r.status));
			charge(d, st);
			/* the steps queued behind it may read what it did not write */
			for (i = 1; i < w->n_q; i++)
				w->q[(w->q_head + i) % KVD_MAX_DEPTH].void_ = 1;
		}
		for (i = 0; i < st->n_seq; i++)
			release_job(d, st->seqs[i].j);
		pop(w);
		return 0;
	}
	if (r.n_seq != st->n_seq)
		return -EPROTO;
	/* check the whole answer before anything changes */
	{
		const char *q = p;

		for (i = 0; i < st->n_seq; i++) {
			struct kvd_result_seq rs;

			if ((size_t)(end - q) < sizeof(rs))
				return -EPROTO;
			memcpy(&rs, q, sizeof(rs));
			q += sizeof(rs);
			if (rs.seq_id != st->seqs[i].seq_id || rs.n_top > KVD_MAX_TOP_LOGPROBS ||
			    (size_t)(end - q) < rs.n_top * sizeof(struct kvd_top))
				return -EPROTO;
			q += rs.n_top * sizeof(struct kvd_top);
			if ((size_t)(end - q) < (size_t)rs.n_kv_blocks * d->geom.kv_block_bytes ||
			    (rs.n_kv_blocks && !kv_range_ok(st->seqs[i].j, &rs)))
				return -EPROTO;
			q += (size_t)rs.n_kv_blocks * d->geom.kv_block_bytes;
			if (st->seqs[i].flags & KVD_SEQ_SAMPLE ?
			    rs.token < 0 || (uint32_t)rs.token >= d->vocab : rs.token != -1)
				return -EPROTO;
		}
		if (q != end)
			return -EPROTO;
	}
	d->m.kv_bytes_copied += r.kv_bytes;
	if (st->kind != KVD_STEP_DECODE) {
		kvd_hist_add(&d->m.prefill_ms, (double)r.compute_ns / 1e6);
		/* what recomputing costs, for the keep/spill/discard choice */
		if (st->kind == KVD_STEP_PREFILL)
			kvd_tiering_prefill_observed(d, st->tokens, r.compute_ns);
	}
	/* the step is done: the worker is healthy, its group proved */
	w->fails_in_row = 0;
	w->probing = 0;
	pop(w);
	for (i = 0; i < st->n_seq; i++) {
		const struct kvd_sent *e = &st->seqs[i];
		struct kvd_job *j = e->j;
		struct kvd_conv *c = j->conv;
		struct kvd_result_seq rs;
		const struct kvd_top *top;

		memcpy(&rs, p, sizeof(rs));
		p += sizeof(rs);
		top = (const struct kvd_top *)p;
		p += rs.n_top * sizeof(struct kvd_top);
		if (st->group && j->group == st->group)
			j->group = 0;
#ifdef KVD_TEST_HOOKS
		j->test_group_ok |= st->group != 0;
#endif
		/* the positions this step wrote now count as KV */
		if (c && c->has_kv && c->as.s.n_tokens == e->n_kv &&
		    e->n_kv + e->n_new <= c->n_tokens) {
			c->as.s.n_tokens = e->n_kv + e->n_new;
			kvd_prefix_offer(d, c);
			if (rs.n_kv_blocks)
				keep_kv_bytes(d, j, &rs, p);
		}
		p += (size_t)rs.n_kv_blocks * d->geom.kv_block_bytes;
		/* not in flight any more: a job its token finishes lets go of
		 * its conversation at once */
		unhold(d, j);
		if ((e->flags & KVD_SEQ_SAMPLE) && j->state == JOB_RUNNING && !j->cancelled) {
			j->rng = rs.rng;
			if (j->in_prefill)
				d->m.handoffs++;
			j->in_prefill = 0;
			if (j->kv_payload && d->cfg.handoff == KVD_HANDOFF_COPY)
				j->state = JOB_KV_LOAD;
			kvd_on_token(d, j, rs.token, rs.logprob, top, rs.n_top);
		}
		kvd_job_put(j);
	}
	return 0;
}

/* ---- building steps ----------------------------------------------------------- */

/* Do idle workers take the other stage's work? [sched] share_stages,
 * except where the stages are apart on purpose: copy hand-off (a
 * prefill worker's KV is private until copied) and remote worker hosts
 * (a deployment that put a stage on other machines: daemon/remote). */
int kvd_stages_shared(const struct kvd *d)
{
	return d->cfg.share_stages && d->cfg.handoff != KVD_HANDOFF_COPY &&
	       !d->cfg.remote_prefill && !d->cfg.remote_decode;
}

struct cand {
	struct kvd_job *j;
	uint32_t left;
};

static int cand_cmp(const void *a, const void *b)
{
	const struct kvd_job *x = ((const struct cand *)a)->j, *y = ((const struct cand *)b)->j;

	if (x->tenant != y->tenant)
		return x->tenant < y->tenant ? -1 : 1;
	if (x->place != y->place)
		return x->place < y->place ? -1 : 1;
	return x->order < y->order ? -1 : x->order > y->order;
}

/* Picks from per-tenant FIFO runs (cands sorted by tenant, then order):
 * the tenant of least virtual time, tentatively charged as it goes. */
struct picker {
	struct cand *c;
	uint32_t n, *next;		/* next index of each run */
	uint32_t *run_end;
	double *vt;
	uint32_t runs;
};

static int picker_init(struct picker *pk, const struct kvd *d, struct cand *c, uint32_t n)
{
	uint32_t i, r = 0;

	pk->c = c;
	pk->n = n;
	pk->runs = 0;
	for (i = 0; i < n; i++)
		if (!i || c[i].j->tenant != c[i - 1].j->tenant)
			pk->runs++;
	pk->next = malloc(((size_t)pk->runs + 1) * (2 * sizeof(uint32_t) + sizeof(double)));
	if (!pk->next)
		return -ENOMEM;
	pk->run_end = pk->next + pk->runs + 1;
	pk->vt = (double *)(void *)(pk->run_end + pk->runs + 1);
	for (i = 0; i < n; i++)
		if (!i || c[i].j->tenant != c[i - 1].j->tenant) {
			if (r)
				pk->run_end[r - 1] = i;
			pk->next[r] = i;
			pk->vt[r] = kvd_fair_vt(d, c[i].j->tenant);
			r++;
		}
	if (r)
		pk->run_end[r - 1] = n;
	return 0;
}

/* The next candidate (and its run), or -1. */
static int picker_next(struct picker *pk, uint32_t *run)
{
	uint32_t r, best = UINT32_MAX;

	for (r = 0; r < pk->runs; r++)
		if (pk->next[r] < pk->run_end[r] && (best == UINT32_MAX || pk->vt[r] < pk->vt[best]))
			best = r;
	if (best == UINT32_MAX)
		return -1;
	*run = best;
	return (int)pk->next[best]++;
}

static int eligible(const struct kvd *d, const struct kvd_job *j, const struct kvd_worker *w,
		    uint32_t group)
{
	const struct kvd_conv *c = live_conv(j);

	if (!c || j->cancelled || j->group != group || j->n_sched >= c->n_tokens ||
	    (j->inflight && j->worker != w->index))
		return 0;
	/* copy mode: the prefill worker's KV is private until loaded */
	if (d->cfg.handoff == KVD_HANDOFF_COPY)
		return (c->n_tokens - j->n_sched > 1) == (w->role == KVD_ROLE_PREFILL) &&
		       !j->kv_payload;
	return 1;
}

static uint32_t collect(struct kvd *d, const struct kvd_worker *w, uint32_t group, int prefill,
			struct cand *out, uint32_t max)
{
	struct kvd_job *j;
	uint32_t n = 0;

	for (j = d->jobs; j && n < max; j = j->next) {
		uint32_t left;

		if (!eligible(d, j, w, group))
			continue;
		left = j->conv->n_tokens - j->n_sched;
		if ((left > 1) != prefill)
			continue;
		out[n].j = j;
		out[n++].left = left;
	}
	qsort(out, n, sizeof(*out), cand_cmp);
	return n;
}

/* Adds job j's next k positions to the step being built in slot st. */
static int add_seq(struct kvd *d, struct kvd_worker *w, struct kvd_wstep *st,
		   struct kvd_job *j, uint32_t k)
{
	struct kvd_conv *c = j->conv;
	uint32_t end = j->n_sched + k;
	struct kvd_sent *e;

	if (st->n_seq == d->max_seqs)
		return 0;
	/* blocks for what this step writes; under pressure a lower-priority
	 * job may be preempted, or this one */
	if (kvd_reserve_or_preempt(d, j, end))
		return 0;
	e = &st->seqs[st->n_seq++];
	e->j = j;
	e->seq_id = j->seq_id;
	e->n_kv = j->n_sched;
	e->n_new = k;
	e->flags = (end == c->n_tokens ? KVD_SEQ_SAMPLE : 0) |
		   (j->s.logprobs ? KVD_SEQ_LOGPROBS : 0);
	st->tokens += k;
	j->n_sched = end;
	j->inflight++;
	j->worker = w->index;
	j->refs++;
	kvd_fair_charge(d, j->tenant, k);
	kvd_kstate_set(d, c, k > 1 || end < c->n_tokens ? KVA_STATE_PREFILL : KVA_STATE_DECODE,
		       0, 0);
	return 1;
}

/* What one step of w takes: decode tokens (up to max_batch) and prompt
 * chunks, in fair order, within the budget. decode_first: a decode
 * stage's step (decode, then chunks in the room left); else chunks then
 * decode. Returns sequences added. */
static uint32_t fill(struct kvd *d, struct kvd_worker *w, struct kvd_wstep *st, int want_decode,
		     int want_prefill, int decode_first, uint32_t group, struct cand *cbuf,
		     uint32_t cmax)
{
	uint32_t budget = d->cfg.step_tokens, added = 0, pass;
	int copy = d->cfg.handoff == KVD_HANDOFF_COPY;

	for (pass = 0; pass < 2; pass++) {
		int prefill = decode_first ? pass == 1 : pass == 0;
		struct picker pk;
		uint32_t n, run, decoded = 0;
		int i;

		if ((prefill && !want_prefill) || (!prefill && !want_decode) || !budget)
			continue;
		n = collect(d, w, group, prefill, cbuf, cmax);
		if (!n)
			continue;
		if (picker_init(&pk, d, cbuf, n)) {
#ifdef KVD_TEST_HOOKS
			d->test_build_short = 1;
#endif
			continue;
		}
		while (budget && st->n_seq < d->max_seqs && (i = picker_next(&pk, &run)) >= 0) {
			struct cand *c = &cbuf[i];
			uint32_t k = prefill ? c->left : 1;

			if (!prefill && decoded == d->cfg.max_batch)
				break;
			if (copy) {
				/* copy mode: a prompt whole (its blocks travel in
				 * one answer), one per step */
				if (st->n_seq)
					break;
			} else {
				if (prefill && k > d->cfg.chunk_tokens)
					k = d->cfg.chunk_tokens;
				if (k > budget)
					k = budget;
			}
			if (c->j->state != JOB_RUNNING || !add_seq(d, w, st, c->j, k))
				continue;
			pk.vt[run] += (double)k / kvd_fair_weight(d, c->j->tenant);
			budget -= k < budget ? k : budget;
			decoded += !prefill;
			added++;
			if (prefill)
				d->m.prefill_chunks++;
			else
				d->m.decode_seqs++;
		}
		free(pk.next);
	}
	return added;
}

static int carries_chunks(const struct kvd_worker *w)
{
	uint32_t i, k;

	for (i = 0; i < w->n_q; i++) {
		const struct kvd_wstep *st = &w->q[(w->q_head + i) % KVD_MAX_DEPTH];

		for (k = 0; k < st->n_seq; k++)
			if (st->seqs[k].n_new > 1 || !(st->seqs[k].flags & KVD_SEQ_SAMPLE))
				return 1;
	}
	return 0;
}

/* Builds and sends one step for w; 1 when it did. Not for a worker lost
 * earlier in this turn (a send that failed): its steps went back to their
 * jobs, and one queued now would never be sent, then forgotten when it
 * comes back, its job in flight for good. */
static int build(struct kvd *d, struct kvd_worker *w, int want_decode, int want_prefill,
		 int decode_first, uint32_t group, struct cand *cbuf, uint32_t cmax)
{
	struct kvd_wstep *st = &w->q[(w->q_head + w->n_q) % KVD_MAX_DEPTH];
	uint32_t i, chunks = 0, singles = 0;

	if (!kvd_worker_usable(w))
		return 0;
	st->n_seq = 0;
	st->tokens = 0;
	st->group = group;
	st->void_ = 0;
#ifdef KVD_TEST_HOOKS
	st->test_turn = d->test_turn;
	st->test_want = (want_decode ? 1 : 0) | (want_prefill ? 2 : 0);
#endif
	if (!fill(d, w, st, want_decode, want_prefill, decode_first, group, cbuf, cmax))
		return 0;
	for (i = 0; i < st->n_seq; i++) {
		if (st->seqs[i].n_new > 1 || !(st->seqs[i].flags & KVD_SEQ_SAMPLE))
			chunks++;
		else
			singles++;
	}
	st->kind = !singles ? KVD_STEP_PREFILL : !chunks ? KVD_STEP_DECODE : KVD_STEP_MIXED;
	if (st->kind == KVD_STEP_PREFILL)
		d->m.steps_prefill++;
	else if (st->kind == KVD_STEP_DECODE)
		d->m.steps_decode++;
	else
		d->m.steps_mixed++;
	d->m.step_tokens += st->tokens;
	d->m.multi_prefill_steps += chunks > 1;
	kvd_worker_send(d, w);
	if (chunks) {
		uint32_t busy = 0;

		for (i = 0; i < d->n_workers; i++)
			busy += d->workers[i].role == KVD_ROLE_PREFILL && carries_chunks(&d->workers[i]);
		if (busy > d->m.prefill_busy_max)
			d->m.prefill_busy_max = busy;
	}
	return 1;
}

/* copy mode: prefilled KV travels to a decode worker first */
static void kv_loads(struct kvd *d, struct kvd_worker **order, uint32_t n)
{
	struct kvd_job *j;
	uint32_t i;

	for (j = d->jobs; j; j = j->next) {
		struct kvd_wstep *st;

		if (j->state != JOB_KV_LOAD || !j->kv_payload || j->inflight)
			continue;
		for (i = 0; i < n; i++)
			if (order[i]->role == KVD_ROLE_DECODE && !order[i]->n_q &&
			    kvd_worker_usable(order[i]))
				break;
		if (i == n)
			return;
		st = &order[i]->q[(order[i]->q_head + order[i]->n_q) % KVD_MAX_DEPTH];
		st->kind = 0;
		st->n_seq = 1;
		st->tokens = 0;
		st->group = 0;
		st->seqs[0].j = j;
		st->seqs[0].seq_id = j->seq_id;
		st->seqs[0].n_kv = 0;
		st->seqs[0].n_new = 0;
		st->seqs[0].flags = 0;
		j->inflight++;
		j->worker = order[i]->index;
		j->refs++;
		kvd_worker_send(d, order[i]);
	}
}

/* The smallest bisection group with work, or 0. */
static uint32_t next_group(const struct kvd *d)
{
	const struct kvd_job *j;
	uint32_t g = 0;

	for (j = d->jobs; j; j = j->next)
		if (j->group && j->state == JOB_RUNNING && !j->inflight && (!g || j->group < g))
			g = j->group;
	return g;
}

void kvd_steps_build(struct kvd *d)
{
	struct kvd_worker *order[128];
	uint32_t i, n = 0, depth = d->cfg.steps_in_flight, cmax = d->n_queued + 64;
	int copy = d->cfg.handoff == KVD_HANDOFF_COPY;
	int share = kvd_stages_shared(d);
	struct kvd_job *j;
	struct cand *cbuf;

#ifdef KVD_TEST_HOOKS
	d->test_build_short = 0;
	d->test_turn++;
#endif
	if (depth > KVD_MAX_DEPTH)
		depth = KVD_MAX_DEPTH;
	if (copy)
		depth = 1;
	for (i = 0; i < d->n_workers && n < 128; i++)
		if (kvd_worker_usable(&d->workers[i]))
			order[n++] = &d->workers[i];
	if (!n)
		return;
	kvd_route_order(d, order, n);
	if (copy)
		kv_loads(d, order, n);
	for (cmax = 0, j = d->jobs; j; j = j->next)
		cmax++;
	cbuf = malloc(((size_t)cmax + 1) * sizeof(*cbuf));
	if (!cbuf) {
#ifdef KVD_TEST_HOOKS
		d->test_build_short = 1;
#endif
		return;
	}
	/* idle workers: their own stage's work; a decode worker mixes in
	 * prompt chunks when no prefill worker is free to take them */
	for (i = 0; i < n; i++) {
		struct kvd_worker *w = order[i];
		int dec = w->role == KVD_ROLE_DECODE;

		if (w->n_q)
			continue;
		if (dec) {
			uint32_t k;
			int pfree = 0;

			for (k = 0; k < n; k++)
				pfree |= order[k]->role == KVD_ROLE_PREFILL && !order[k]->n_q;
			/* a remote host's worker keeps to its stage's kind of
			 * step (it mirrors KV by stage: daemon/remote) */
			build(d, w, 1, share && !pfree && !w->remote, 1, 0, cbuf, cmax);
		} else {
			build(d, w, 0, 1, 0, 0, cbuf, cmax);
		}
	}
	/* idle workers whose stage has nothing: the other stage's work; then
	 * the bisection groups, one group per step */
	for (i = 0; i < n; i++) {
		struct kvd_worker *w = order[i];
		uint32_t g;

		if (w->n_q || w->remote)
			continue;
		if (share && build(d, w, w->role == KVD_ROLE_PREFILL, w->role == KVD_ROLE_DECODE,
				   w->role == KVD_ROLE_PREFILL, 0, cbuf, cmax))
			continue;
		if ((g = next_group(d)))
			build(d, w, 1, 1, w->role == KVD_ROLE_DECODE, g, cbuf, cmax);
	}
	/* a second step behind the one in flight: its next prompt chunks and
	 * new work, started the moment the first ends */
	for (i = 0; depth > 1 && i < n; i++) {
		struct kvd_worker *w = order[i];
		int dec = w->role == KVD_ROLE_DECODE;

		if (w->probing || w->remote || w->n_q >= depth || !kvd_worker_usable(w))
			continue;
		build(d, w, dec || share, !dec || share, dec, 0, cbuf, cmax);
	}
	free(cbuf);
}
