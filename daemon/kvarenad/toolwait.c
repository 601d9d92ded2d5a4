// SPDX-License-Identifier: MIT
/*
 * toolwait.c - tool classes and predicted tool waits. A tool class is a
 * small id per (tenant, tool name) (what the kernel's TOOL_WAIT state and
 * the eBPF histograms are keyed by): each tenant's waits are its own, so
 * one tenant's slow or hostile tools shift neither the kernel's ranking
 * nor the daemon's prediction for another's sessions. The prediction
 * comes from the class's histogram (the eBPF tool-wait maps' when they are
 * loaded: the kernel measured every wait; else the waits this daemon
 * measured itself, from a response ending in tool calls to the request
 * that brings the results), blended with a prior: the same tool's waits
 * of every other tenant, weighted as KVD_TOOLWAIT_PRIOR observations, so a
 * tenant's first calls are predicted from everyone's and its own
 * measurements take over as they come. The conditional-mean predictor is
 * kva_toolwait_predict.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "kvc_predict.h"

/* the prior's weight, in observations of the tenant's own */
#define KVD_TOOLWAIT_PRIOR 8

static const char *tenant_name(const struct kvd *d, uint32_t tenant)
{
	uint32_t slot = kvd_tenant_slot(d, tenant);

	return slot ? d->cfg.tenants[slot - 1].name : "";
}

uint32_t kvd_toolclass_find(const struct kvd *d, const char *tn, const char *name, size_t len,
			    uint32_t *mine)
{
	uint32_t i;

	*mine = 0;
	for (i = 0; i < d->n_classes; i++) {
		if (strcmp(d->classes[i].tenant, tn))
			continue;
		if (strlen(d->classes[i].name) == len && !memcmp(d->classes[i].name, name, len))
			return i + 1;
		(*mine)++;
	}
	return 0;
}

/*
 * A tenant's share of the classes: the tool names come from what the
 * model wrote, so one tenant's requests could make up names until every
 * class was theirs, and every other tenant's new tools would then share
 * the last one (and, kept in [kv] toolwait_state, after restarts too).
 * Past its share a tenant's new tools share its class "*" (no tool name
 * has that form: OpenAI's are [a-zA-Z0-9_-]).
 */
static uint32_t tenant_share(const struct kvd *d)
{
	return KVD_MAX_TOOL_CLASSES / (d->cfg.n_tenants + 1);
}
_Static_assert(KVD_MAX_TOOL_CLASSES / (KVD_MAX_TENANTS + 1) >= 2,
	       "every tenant's share holds a tool and its \"*\"");

uint32_t kvd_toolclass(struct kvd *d, uint32_t tenant, const char *name, size_t len)
{
	const char *tn = tenant_name(d, tenant);
	uint32_t i, mine;

	if (len >= sizeof(d->classes[0].name))
		len = sizeof(d->classes[0].name) - 1;
	i = kvd_toolclass_find(d, tn, name, len, &mine);
	if (i)
		return i;
	if (mine + 1 >= tenant_share(d)) {
		name = "*";
		len = 1;
		i = kvd_toolclass_find(d, tn, name, len, &mine);
		if (i)
			return i;
	}
	if (d->n_classes == KVD_MAX_TOOL_CLASSES)
		return KVD_MAX_TOOL_CLASSES;	/* the last class takes the rest */
	memcpy(d->classes[d->n_classes].name, name, len);
	d->classes[d->n_classes].name[len] = 0;
	snprintf(d->classes[d->n_classes].tenant, sizeof(d->classes[0].tenant), "%s", tn);
	return ++d->n_classes;
}

/* A class's histogram: the kernel's when it has seen as many waits as
 * this daemon, else the daemon's. */
static void class_hist(struct kvd *d, uint32_t cls, struct kva_toolwait_hist *h)
{
	if (d->tw && kva_toolwait_class_hist(d->tw, cls, h, sizeof(*h)) == 0 &&
	    h->count >= d->classes[cls - 1].hist.count)
		return;
	*h = d->classes[cls - 1].hist;
}

/*
 * The waits of every class but cls pooled into *pool: only those of the
 * same tool (other tenants') when same_tool, else every tool's.
 */
static void pooled(struct kvd *d, uint32_t cls, int same_tool, struct kva_toolwait_hist *pool)
{
	uint32_t i, k;

	memset(pool, 0, sizeof(*pool));
	for (i = 1; i <= d->n_classes; i++) {
		struct kva_toolwait_hist c;

		if (i == cls ||
		    (same_tool && strcmp(d->classes[i - 1].name, d->classes[cls - 1].name)))
			continue;
		class_hist(d, i, &c);
		pool->count += c.count;
		pool->total_us += c.total_us;
		for (k = 0; k < KVA_TOOLWAIT_SLOTS; k++)
			pool->slots[k] += c.slots[k];
	}
}

/*
 * The class's waits blended with its prior (the same tool's of every other
 * tenant, as KVD_TOOLWAIT_PRIOR observations; none, and fewer than the
 * predictor trusts of its own: every tool's, for the observations it
 * lacks; else the class's alone): h gets the blend's
 * histogram (slots scaled to integers, for the conditional mean), *mean
 * its mean in us and *n its weight in observations (own + prior).
 */
static void blended(struct kvd *d, uint32_t cls, struct kva_toolwait_hist *h, double *mean,
		    double *n)
{
	struct kva_toolwait_hist own, prior;
	uint64_t w[KVA_TOOLWAIT_SLOTS], max = 0;
	uint32_t k, pw = KVD_TOOLWAIT_PRIOR;

	class_hist(d, cls, &own);
	pooled(d, cls, 1, &prior);
	if (!prior.count && own.count < KVC_PREDICT_MIN_SAMPLES) {
		/* a tool no tenant has measured enough: every tool's waits
		 * stand in for its missing observations (a new class was
		 * predicted at the predictor's 1 s cold start, whatever this
		 * daemon's tools take), fading as its own come in */
		pooled(d, cls, 0, &prior);
		pw = KVC_PREDICT_MIN_SAMPLES - own.count;
		if (pw > prior.count)
			pw = (uint32_t)prior.count;
	}
	if (!prior.count) {
		*h = own;
		*n = (double)own.count;
		*mean = own.count ? (double)own.total_us / (double)own.count : 0;
		return;
	}
	*n = (double)own.count + pw;
	*mean = ((double)own.total_us + pw * (double)prior.total_us /
		 (double)prior.count) / *n;
	/* own + pw * prior / prior.count, in fixed point (x prior.count) */
	for (k = 0; k < KVA_TOOLWAIT_SLOTS; k++) {
		w[k] = (uint64_t)own.slots[k] * prior.count + (uint64_t)pw * prior.slots[k];
		if (w[k] > max)
			max = w[k];
	}
	memset(h, 0, sizeof(*h));
	for (k = 0; k < KVA_TOOLWAIT_SLOTS; k++) {
		h->slots[k] = (uint32_t)(max > UINT32_MAX ? w[k] / (max / UINT32_MAX + 1) : w[k]);
		h->count += h->slots[k];
	}
}

/* At a wait's start its expectation is the (blended) class's mean, which
 * the totals give exactly (the log2 histogram only to its bucket: a tool
 * that always takes 1.2 s would be predicted at ~1.57 s, and its prefetch
 * would come late); until the predictor trusts it (8 observations), its
 * cold start. */
uint64_t kvd_toolwait_predict_us(struct kvd *d, uint32_t cls)
{
	static const struct kva_toolwait_hist none;
	struct kva_toolwait_hist h;
	double mean, n;

	if (!cls || cls > d->n_classes)
		return kva_toolwait_predict(&none, 0, 0);
	blended(d, cls, &h, &mean, &n);
	if (n >= 8)
		return (uint64_t)mean;
	return kva_toolwait_predict(&h, 0, 0);
}

uint64_t kvd_toolwait_remaining_us(struct kvd *d, uint32_t cls, uint64_t elapsed_us,
				   uint64_t hint_us)
{
	static const struct kva_toolwait_hist none;
	struct kva_toolwait_hist h;
	double mean, n;

	if (!cls || cls > d->n_classes)
		return kva_toolwait_predict(&none, elapsed_us, hint_us);
	blended(d, cls, &h, &mean, &n);
	return kva_toolwait_predict(&h, elapsed_us, hint_us);
}

/* The (blended) class's distribution: P(T > e + h | T > e); -1 when it
 * cannot say: too few observations, or a wait past every one recorded
 * (the histogram has no mass above e: kvc_predict_survival's 512). */
double kvd_toolwait_survival(struct kvd *d, uint32_t cls, uint64_t elapsed_us,
			     uint64_t horizon_us)
{
	struct kva_toolwait_hist h;
	double mean, n;

	if (!cls || cls > d->n_classes)
		return -1;
	blended(d, cls, &h, &mean, &n);
	if (n < KVC_PREDICT_MIN_SAMPLES ||
	    kvc_predict_survival(h.slots, KVA_TOOLWAIT_SLOTS, elapsed_us, 0) != 1024)
		return -1;
	return kvc_predict_survival(h.slots, KVA_TOOLWAIT_SLOTS, elapsed_us, horizon_us) /
	       1024.0;
}

int64_t kvd_toolwait_quantile_us(struct kvd *d, uint32_t cls, uint64_t elapsed_us, double p)
{
	uint64_t lo = 0, hi = 1ull << 40;

	if (kvd_toolwait_survival(d, cls, elapsed_us, 0) < 0)
		return -1;
	/* the least h with P(T > e + h | T > e) <= 1 - p */
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;

		if (kvd_toolwait_survival(d, cls, elapsed_us, mid) <= 1 - p)
			hi = mid;
		else
			lo = mid + 1;
	}
	return (int64_t)lo;
}

void kvd_toolwait_record(struct kvd *d, uint32_t cls, uint64_t us)
{
	struct kva_toolwait_hist *h;
	uint32_t slot = 0;

	if (!cls || cls > d->n_classes)
		return;
	h = &d->classes[cls - 1].hist;
	while (slot + 1 < KVA_TOOLWAIT_SLOTS && (us >> (slot + 1)))
		slot++;
	h->slots[slot]++;
	h->count++;
	h->total_us += us;
	if (us > h->max_us)
		h->max_us = us;
	d->m.tool_waits++;
	kvd_hist_add(&d->m.toolwait, (double)us / 1000.0);
}
