// SPDX-License-Identifier: MIT
/*
 * cost.c - the economics of a tool wait: what moving a session's KV out of
 * the arena costs on this machine (disk write and read bandwidth,
 * recompute speed, each a running mean of what was measured), the keep /
 * spill / discard choice (InferCept's idea, on these numbers), and when a
 * prefetch must start so that a spilled session is back before its tool
 * returns (KVFlow's). Pure arithmetic: no I/O, no clock, no locks.
 */
#include <stddef.h>

#include "kvtier.h"

/* Before anything was measured: a disk no faster than a SATA SSD. */
#define DEFAULT_BPS	(200.0 * 1000 * 1000)
/* The newest observation's weight in the running means. */
#define EWMA_NEW	0.25

void kvt_costs_init(struct kvt_costs *c)
{
	c->write_bps = c->read_bps = c->recompute_tps = 0;
	c->n_write = c->n_read = c->n_recompute = 0;
}

static void ewma(double *v, uint64_t *n, double x)
{
	*v = *n ? (1 - EWMA_NEW) * *v + EWMA_NEW * x : x;
	(*n)++;
}

/* Transfers shorter than this say more about latency than bandwidth. */
#define MIN_BYTES	(256u << 10)

void kvt_costs_add_write(struct kvt_costs *c, uint64_t bytes, uint64_t ns)
{
	if (bytes >= MIN_BYTES && ns)
		ewma(&c->write_bps, &c->n_write, (double)bytes * 1e9 / (double)ns);
}

void kvt_costs_add_read(struct kvt_costs *c, uint64_t bytes, uint64_t ns)
{
	if (bytes >= MIN_BYTES && ns)
		ewma(&c->read_bps, &c->n_read, (double)bytes * 1e9 / (double)ns);
}

void kvt_costs_add_recompute(struct kvt_costs *c, uint64_t tokens, uint64_t ns)
{
	/* one or two tokens are a decode step's cost, not a prefill's */
	if (tokens >= 16 && ns)
		ewma(&c->recompute_tps, &c->n_recompute, (double)tokens * 1e9 / (double)ns);
}

static uint64_t us_at(double bytes, double per_s)
{
	return (uint64_t)(bytes / per_s * 1e6);
}

uint64_t kvt_restore_us(const struct kvt_costs *c, uint64_t kv_bytes)
{
	return us_at((double)kv_bytes, c->read_bps > 0 ? c->read_bps : DEFAULT_BPS);
}

const char *kvt_choice_name(enum kvt_choice c)
{
	switch (c) {
	case KVT_KEEP:
		return "keep";
	case KVT_SPILL:
		return "spill";
	case KVT_DISCARD:
		return "discard";
	}
	return "?";
}

void kvt_decide(const struct kvt_costs *c, const struct kvt_decision_in *in,
		struct kvt_decision *out)
{
	double bytes = (double)in->kv_bytes, wait = (double)in->predicted_wait_us;
	uint64_t away;

	out->spill_us = us_at(bytes, c->write_bps > 0 ? c->write_bps : DEFAULT_BPS);
	out->restore_us = kvt_restore_us(c, in->kv_bytes);
	/* unmeasured recompute: as dear as it can be (never chosen blind) */
	out->recompute_us = c->recompute_tps > 0 ?
			    (uint64_t)((double)in->kv_tokens / c->recompute_tps * 1e6) : UINT64_MAX;
	out->freed_byte_s = 0;
	out->p_outlast = -1;
	away = out->spill_us + out->restore_us + in->margin_us;
	if (!in->kv_bytes) {
		out->choice = KVT_KEEP;
		out->why = "holds no KV";
		return;
	}
	if (!in->pressure) {
		out->choice = KVT_KEEP;
		out->why = "no memory pressure";
		return;
	}
	if (in->survival)
		out->p_outlast = in->survival(in->survival_ctx, away);
	if (in->disk_ok && out->restore_us <= out->recompute_us &&
	    (out->p_outlast >= 0 ? out->p_outlast >= 1 - (in->max_stall > 0 ? in->max_stall : 0.05) :
				   in->predicted_wait_us > away)) {
		out->choice = KVT_SPILL;
		out->freed_byte_s = bytes * (wait - (double)away) / 1e6;
		out->why = out->p_outlast >= 0 ?
			   "the wait very likely outlasts writing and restoring it, and reading is "
			   "cheaper than recomputing" :
			   "the wait outlasts writing and restoring it, and reading is cheaper than "
			   "recomputing";
		return;
	}
	if (out->recompute_us < out->restore_us || (!in->disk_ok && out->recompute_us != UINT64_MAX)) {
		/* discarding frees the memory for the whole wait; recomputing
		 * at the return is the price (worth it only when the wait is
		 * longer than the recompute, else the memory comes back too
		 * soon to matter) */
		if (in->predicted_wait_us > out->recompute_us) {
			out->choice = KVT_DISCARD;
			out->freed_byte_s = bytes * wait / 1e6;
			out->why = in->disk_ok ? "recomputing is cheaper than reading it back" :
						 "no disk tier; the wait outlasts recomputing it";
			return;
		}
	}
	out->choice = KVT_KEEP;
	out->why = !in->disk_ok ? "the wait is too short to pay for recomputing it" :
		   out->p_outlast >= 0 ? "the tool may return before it could be back" :
		   "the wait is too short to write and read it back";
}

uint64_t kvt_prefetch_at_ns(const struct kvt_costs *c, uint64_t wait_start_ns,
			    uint64_t predicted_wait_us, uint64_t kv_bytes, uint64_t margin_us)
{
	uint64_t lead = kvt_restore_us(c, kv_bytes) + margin_us;

	if (lead >= predicted_wait_us)
		return wait_start_ns;
	return wait_start_ns + (predicted_wait_us - lead) * 1000ull;
}
