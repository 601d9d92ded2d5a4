/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * The shared core's only view of its world: fixed-width types, errno values,
 * memory and 64-bit division, from the kernel or from libc.  The core code
 * (kvc_*.c) includes nothing else, so one implementation compiles into
 * kvarena.ko, into libkvarena's memfd backend and into host unit tests.
 */
#ifndef KVC_SHIM_H
#define KVC_SHIM_H

#ifdef __KERNEL__
#include <linux/build_bug.h>
#include <linux/types.h>
#include <linux/errno.h>
#include <linux/string.h>
#include <linux/slab.h>
#include <linux/mm.h>
#include <linux/math64.h>
#include <uapi/linux/kvarena.h>

static inline void *kvc_zalloc(size_t bytes)
{
	return kvzalloc(bytes, GFP_KERNEL_ACCOUNT);
}

static inline void kvc_free(void *p)
{
	kvfree(p);
}

static inline u64 kvc_div_u64(u64 n, u32 d)
{
	return div_u64(n, d);
}

/* Loops over every session or block of a large arena give the CPU away. */
static inline void kvc_resched(u32 i)
{
	if (!(i & 1023))
		cond_resched();
}

#else /* user space */
#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <linux/kvarena.h>

typedef __u8 u8;
typedef __u16 u16;
typedef __u32 u32;
typedef __u64 u64;

#define fallthrough __attribute__((__fallthrough__))

static inline void *kvc_zalloc(size_t bytes)
{
	return calloc(1, bytes);
}

static inline void kvc_free(void *p)
{
	free(p);
}

static inline u64 kvc_div_u64(u64 n, u32 d)
{
	return n / d;
}

static inline void kvc_resched(u32 i)
{
	(void)i;
}
#endif

/* Grow an array; the old contents are kept, the tail is zeroed. */
static inline void *kvc_grow(void *old, size_t old_bytes, size_t new_bytes)
{
	void *p = kvc_zalloc(new_bytes);

	if (!p)
		return NULL;
	if (old) {
		memcpy(p, old, old_bytes < new_bytes ? old_bytes : new_bytes);
		kvc_free(old);
	}
	return p;
}

#endif /* KVC_SHIM_H */
