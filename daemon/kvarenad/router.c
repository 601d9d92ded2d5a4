// SPDX-License-Identifier: MIT
/*
 * router.c - the order in which workers are offered the next steps. The
 * cost is NVIDIA Dynamo's published formula:
 *   cost = prefill_load_scale * max(tokens in flight - prefix overlap, 0)
 *          + decode sequences in flight
 * and the worker with the lowest cost is offered work first (lowest index
 * on ties), so prompt chunks spread over the prefill workers by the load
 * they already carry. The prefill stage's workers come before the decode
 * stage's whatever their costs: a decode worker mixes in the prompt
 * chunks they leave, never the ones they would take. With one shared arena every worker sees the same
 * blocks, so the overlap credit is the same for all of them and left out
 * today; it starts to matter when workers keep KV of their own (another
 * machine, a device tier).
 */
#include <stdlib.h>

#include "internal.h"

double kvd_route_cost(const struct kvd *d, const struct kvd_worker *w)
{
	uint32_t i, decode = 0, prefill = 0;

	for (i = 0; i < w->n_q; i++) {
		const struct kvd_wstep *st = &w->q[(w->q_head + i) % KVD_MAX_DEPTH];
		uint32_t k;

		for (k = 0; k < st->n_seq; k++) {
			if (st->seqs[k].n_new > 1 || !(st->seqs[k].flags & KVD_SEQ_SAMPLE))
				prefill += st->seqs[k].n_new;
			else
				decode++;
		}
	}
	return d->cfg.prefill_load_scale * prefill + decode;
}

static const struct kvd *order_d;

static int order_cmp(const void *a, const void *b)
{
	const struct kvd_worker *x = *(struct kvd_worker *const *)a;
	const struct kvd_worker *y = *(struct kvd_worker *const *)b;
	double cx = kvd_route_cost(order_d, x), cy = kvd_route_cost(order_d, y);

	if (x->role != y->role)
		return x->role == KVD_ROLE_PREFILL ? -1 : 1;
	if (cx != cy)
		return cx < cy ? -1 : 1;
	return x->index - y->index;
}

/* Called with the scheduler's lock held (order_d is the sort's context). */
void kvd_route_order(const struct kvd *d, struct kvd_worker **order, uint32_t n)
{
	order_d = d;
	if (n > 1)
		qsort(order, n, sizeof(*order), order_cmp);
}
