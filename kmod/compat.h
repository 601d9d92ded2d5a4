/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Differences between the kernels kvarena supports (Debian's 6.1 and 6.12),
 * kept in one place so the rest of the module reads as current code.
 */
#ifndef KVA_COMPAT_H
#define KVA_COMPAT_H

#include <linux/version.h>
#include <linux/mm.h>

#if KERNEL_VERSION(6, 3, 0) > LINUX_VERSION_CODE
/* vm_flags became read-only outside these helpers in 6.3. */
static inline void vm_flags_set(struct vm_area_struct *vma, vm_flags_t flags)
{
	vma->vm_flags |= flags;
}
#endif

#endif /* KVA_COMPAT_H */
