// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Wait prediction over a log2 histogram (see kvc_predict.h): the
 * conditional mean and survival of a tool wait given how long it has
 * lasted.  Owns no state; the histograms come from the toolwait BPF maps
 * (user space) or, later, from the module's own eviction policy.
 *
 * Overflow: counts are scaled down until they sum to at most 2^20, each
 * slot's weight carries 10 fractional bits (< 2^31 in all) and slot
 * midpoints are below 2^32 us, so every sum fits in a u64.
 */
#include "kvc_predict.h"

#define KVC_FRAC_BITS	10
#define KVC_MAX_MASS	1048576ULL	/* 2^20 */

static u64 kvc_slot_lo(u32 i)
{
	return i ? 1ULL << i : 0;
}

/* Counts as used: scaled so their sum is at most KVC_MAX_MASS + nslots. */
static u32 kvc_scale_shift(const u32 *slots, u32 nslots, u64 *total)
{
	u32 i, shift = 0;
	u64 sum = 0;

	for (i = 0; i < nslots; i++)
		sum += slots[i];
	*total = sum;
	while ((sum >> shift) > KVC_MAX_MASS)
		shift++;
	return shift;
}

static u64 kvc_scaled(u32 count, u32 shift)
{
	/* Round up so that a rare long wait never scales away. */
	return ((u64)count + (1ULL << shift) - 1) >> shift;
}

/*
 * Mass above `from` (weight, KVC_FRAC_BITS fractional bits) and, if
 * `moment` is set, its first moment (weight x mean us).
 */
static u64 kvc_mass_above(const u32 *slots, u32 nslots, u32 shift, u64 from,
			  u64 *moment)
{
	u64 w, lo, hi, mass = 0, m1 = 0;
	u32 i;

	for (i = 0; i < nslots; i++) {
		u64 c = kvc_scaled(slots[i], shift);

		lo = kvc_slot_lo(i);
		hi = 1ULL << (i + 1);
		if (!c || hi <= from)
			continue;
		if (lo >= from) {
			w = c << KVC_FRAC_BITS;
		} else {
			w = kvc_div_u64(c * ((hi - from) << KVC_FRAC_BITS),
					(u32)(hi - lo));
			lo = from;
		}
		mass += w;
		m1 += w * ((lo + hi) / 2);
	}
	if (moment)
		*moment = m1;
	return mass;
}

static u32 kvc_slot_of(u64 us, u32 nslots)
{
	u32 i = 0;

	while (i + 1 < nslots && (us >> (i + 1)))
		i++;
	return i;
}

static u64 kvc_lindy(u64 base, u64 elapsed)
{
	return base > 2 * elapsed ? base - elapsed : elapsed;
}

u64 kvc_predict_remaining_us(const u32 *slots, u32 nslots, u64 elapsed_us,
			     u64 hint_us)
{
	u64 total, mass, moment, mean, base, rest, least;
	u32 shift, i;

	base = hint_us ? hint_us : KVC_PREDICT_COLD_US;
	if (nslots > KVC_PREDICT_SLOTS)
		nslots = KVC_PREDICT_SLOTS;
	shift = kvc_scale_shift(slots, nslots, &total);
	if (total < KVC_PREDICT_MIN_SAMPLES)
		return kvc_lindy(base, elapsed_us);
	mass = kvc_mass_above(slots, nslots, shift, elapsed_us, &moment);
	if (!mass)
		return kvc_lindy(base, elapsed_us);
	/* mass < 2^31: the shim's u32 divisor holds it. */
	mean = kvc_div_u64(moment, (u32)mass);
	rest = mean > elapsed_us ? mean - elapsed_us : 0;
	/*
	 * In the last slot holding any wait, the spread mass leaves
	 * (hi - elapsed) / 2 to go: nothing at the slot's top, so a runtime
	 * predicting anew at each overrun does so ever sooner (211, 55,
	 * 30 ms more...).  The slot hides where its waits ended; past its
	 * middle, hold the rest at its value there, a quarter of the slot,
	 * until the Lindy rule takes over at the top.
	 */
	i = kvc_slot_of(elapsed_us, nslots);
	least = ((1ULL << (i + 1)) - kvc_slot_lo(i)) / 4;
	if (rest < least &&
	    !kvc_mass_above(slots, nslots, shift, 1ULL << (i + 1), NULL))
		rest = least;
	return rest;
}

u32 kvc_predict_survival(const u32 *slots, u32 nslots, u64 elapsed_us,
			 u64 horizon_us)
{
	u64 total, now, later;
	u32 shift;

	if (nslots > KVC_PREDICT_SLOTS)
		nslots = KVC_PREDICT_SLOTS;
	shift = kvc_scale_shift(slots, nslots, &total);
	if (total < KVC_PREDICT_MIN_SAMPLES)
		return 512;
	now = kvc_mass_above(slots, nslots, shift, elapsed_us, NULL);
	if (!now)
		return 512;
	later = kvc_mass_above(slots, nslots, shift, elapsed_us + horizon_us,
			       NULL);
	/* later <= now < 2^31, so later << 10 fits. */
	return (u32)kvc_div_u64(later << 10, (u32)now);
}
