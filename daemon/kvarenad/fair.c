// SPDX-License-Identifier: MIT
/*
 * fair.c - per-tenant weighted fair queueing of the scheduler's two
 * resources: prompt tokens prefilled and decode slots (one token each).
 *
 * Each tenant has a virtual time: the tokens scheduled for it divided by
 * its weight ([tenant.NAME] weight, default 1). Wherever the scheduler
 * chooses between tenants (which queued request to admit, whose prompt
 * chunk or decode token goes into a step, whom to preempt) the tenant
 * with the smallest virtual time goes first and, for preemption, the one
 * with the largest goes first; within a tenant, the oldest request first
 * (and the newest is preempted first). A tenant that had nothing waiting
 * restarts at the smallest virtual time among those that have, so idle
 * time is not banked into a burst later. Two tenants flooding at once
 * therefore get steps' tokens in the ratio of their weights, and one
 * tenant's flood cannot starve another's interactive turn: that turn's
 * tenant has the smaller virtual time and goes into the next step.
 */
#include "internal.h"

/* The per-tenant arrays are indexed by kvd_tenant_slot() (0: tenant 0,
 * or an id no longer configured). */
uint32_t kvd_fair_weight(const struct kvd *d, uint32_t tenant)
{
	uint32_t slot = kvd_tenant_slot(d, tenant), w;

	if (!slot)
		return 1;
	w = d->cfg.tenants[slot - 1].weight;
	return w ? w : 1;
}

double kvd_fair_vt(const struct kvd *d, uint32_t tenant)
{
	return d->tenant_vt[kvd_tenant_slot(d, tenant)];
}

void kvd_fair_charge(struct kvd *d, uint32_t tenant, uint32_t tokens)
{
	uint32_t slot = kvd_tenant_slot(d, tenant);

	d->tenant_vt[slot] += (double)tokens / kvd_fair_weight(d, tenant);
	d->m.tenant_tokens[slot] += tokens;
}

void kvd_fair_job_added(struct kvd *d, uint32_t tenant)
{
	uint32_t slot = kvd_tenant_slot(d, tenant), t;
	double floor = -1;

	if (d->tenant_jobs[slot]++)
		return;
	for (t = 0; t <= KVD_MAX_TENANTS; t++)
		if (t != slot && d->tenant_jobs[t] && (floor < 0 || d->tenant_vt[t] < floor))
			floor = d->tenant_vt[t];
	if (floor >= 0 && d->tenant_vt[slot] < floor)
		d->tenant_vt[slot] = floor;
}

void kvd_fair_job_gone(struct kvd *d, uint32_t tenant)
{
	uint32_t slot = kvd_tenant_slot(d, tenant);

	if (d->tenant_jobs[slot])
		d->tenant_jobs[slot]--;
}

int kvd_fair_after(const struct kvd *d, const struct kvd_job *a, const struct kvd_job *b)
{
	double va = kvd_fair_vt(d, a->tenant), vb = kvd_fair_vt(d, b->tenant);

	if (a->tenant != b->tenant && va != vb)
		return va > vb;
	if (a->place != b->place)
		return a->place > b->place;
	return a->order > b->order;
}
