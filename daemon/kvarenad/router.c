// SPDX-License-Identifier: MIT
/*
 * router.c - which stage worker gets the next step. The cost is NVIDIA
 * Dynamo's published formula:
 *   cost = prefill_load_scale * max(queued prefill tokens + new tokens
 *                                   - prefix overlap credit, 0)
 *          + decode sequences in flight
 * and the idle worker with the lowest cost wins (lowest index on ties).
 * With one shared arena every worker sees the same blocks, so the overlap
 * credit is the same for all of them today; it starts to matter when
 * workers keep KV of their own (another machine, a device tier), which is
 * why the router takes it as an input now.
 */
#include "internal.h"

struct kvd_worker *kvd_route(struct kvd *d, uint32_t role, uint32_t new_tokens,
			     uint32_t overlap_tokens)
{
	struct kvd_worker *best = NULL;
	double best_cost = 0;
	uint32_t i;

	for (i = 0; i < d->n_workers; i++) {
		struct kvd_worker *w = &d->workers[i];
		double prefill, cost;

		if (w->role != role || w->state != W_IDLE)
			continue;
		prefill = (double)w->queued_tokens + new_tokens - overlap_tokens;
		if (prefill < 0)
			prefill = 0;
		cost = d->cfg.prefill_load_scale * prefill +
		       (w->step_kind == KVD_STEP_DECODE ? w->n_inflight : 0);
		if (!best || cost < best_cost) {
			best = w;
			best_cost = cost;
		}
	}
	return best;
}
