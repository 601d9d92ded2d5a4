// SPDX-License-Identifier: MIT
/*
 * toolwait.c - tool classes and predicted tool waits. A tool class is a
 * small id per tool name (what the kernel's TOOL_WAIT state and the eBPF
 * histograms are keyed by). The prediction comes from the eBPF tool-wait
 * maps when they are loaded (the kernel measured every wait), else from
 * the waits this daemon measured itself (from a response ending in tool
 * calls to the request that brings the results), through the same
 * conditional-mean predictor (kva_toolwait_predict).
 */
#include <string.h>

#include "internal.h"

uint32_t kvd_toolclass(struct kvd *d, const char *name, size_t len)
{
	uint32_t i;

	if (len >= sizeof(d->classes[0].name))
		len = sizeof(d->classes[0].name) - 1;
	for (i = 0; i < d->n_classes; i++)
		if (strlen(d->classes[i].name) == len && !memcmp(d->classes[i].name, name, len))
			return i + 1;
	if (d->n_classes == KVD_MAX_TOOL_CLASSES)
		return KVD_MAX_TOOL_CLASSES;	/* the last class takes the rest */
	memcpy(d->classes[d->n_classes].name, name, len);
	d->classes[d->n_classes].name[len] = 0;
	return ++d->n_classes;
}

/* At a wait's start its expectation is the class's mean, which the totals
 * give exactly (the log2 histogram only to its bucket: a tool that always
 * takes 1.2 s would be predicted at ~1.57 s, and its prefetch would come
 * late); until the predictor trusts the class (8 samples), its cold start. */
static uint64_t predict_start(const struct kva_toolwait_hist *h)
{
	if (h->count >= 8)
		return h->total_us / h->count;
	return kva_toolwait_predict(h, 0, 0);
}

uint64_t kvd_toolwait_predict_us(struct kvd *d, uint32_t cls)
{
	static const struct kva_toolwait_hist none;
	struct kva_toolwait_hist h;

	if (!cls || cls > d->n_classes)
		return predict_start(&none);
	if (d->tw && kva_toolwait_class_hist(d->tw, cls, &h, sizeof(h)) == 0 &&
	    h.count >= d->classes[cls - 1].hist.count)
		return predict_start(&h);
	return predict_start(&d->classes[cls - 1].hist);
}

uint64_t kvd_toolwait_remaining_us(struct kvd *d, uint32_t cls, uint64_t elapsed_us,
				   uint64_t hint_us)
{
	static const struct kva_toolwait_hist none;
	struct kva_toolwait_hist h;

	if (!cls || cls > d->n_classes)
		return kva_toolwait_predict(&none, elapsed_us, hint_us);
	if (d->tw && kva_toolwait_class_hist(d->tw, cls, &h, sizeof(h)) == 0 &&
	    h.count >= d->classes[cls - 1].hist.count)
		return kva_toolwait_predict(&h, elapsed_us, hint_us);
	return kva_toolwait_predict(&d->classes[cls - 1].hist, elapsed_us, hint_us);
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
