/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Tool-wait prediction from a log2 histogram of past waits (the toolwait
 * BPF maps' slots[]: slot i counts waits in [2^i, 2^(i+1)) us, slot 0 also
 * 0 us).  Integer math only: compiled into kvarena.ko, libkvarena and the
 * host tests alike.
 */
#ifndef KVC_PREDICT_H
#define KVC_PREDICT_H

#include "kvc_shim.h"

#define KVC_PREDICT_SLOTS	32	/* the histograms' length (TW_SLOTS) */
/* Fewer samples than this: the cold-start rule, not the histogram. */
#define KVC_PREDICT_MIN_SAMPLES	8
/* Cold start with no hint from the runtime: assume a 1 s tool call. */
#define KVC_PREDICT_COLD_US	1000000ULL

/*
 * Expected remaining wait (us) of a wait that has lasted elapsed_us so
 * far: E[T - elapsed | T > elapsed] over the histogram, with each slot's
 * mass spread uniformly over it.  hint_us is the runtime's own estimate
 * (expected_wait_us, 0 if none).
 *
 * Cold start (fewer than KVC_PREDICT_MIN_SAMPLES waits) and waits that
 * outlived every recorded one: max(base - elapsed, elapsed), base = hint_us
 * or KVC_PREDICT_COLD_US (without a hint).  Past the base this is the
 * Lindy rule: a wait that has lasted t is expected to last about t more,
 * the mean residual life of a heavy tail; never less than base / 2.
 */
u64 kvc_predict_remaining_us(const u32 *slots, u32 nslots, u64 elapsed_us,
			     u64 hint_us);

/*
 * P(T > elapsed + horizon | T > elapsed) in parts per 1024, same model;
 * cold start: 512.  For an eviction policy: will it still be idle then?
 */
u32 kvc_predict_survival(const u32 *slots, u32 nslots, u64 elapsed_us,
			 u64 horizon_us);

#endif /* KVC_PREDICT_H */
