// SPDX-License-Identifier: GPL-2.0
/*
 * Versioned ioctl structs: every struct starts with its caller's `size` and
 * is read with copy_struct_from_user() semantics (see the UAPI header).
 */
#include <linux/uaccess.h>

#include "kva.h"

int kva_copy_in(void *kstruct, size_t ksize, size_t ver0,
		void __user *uarg, u32 *usize)
{
	u32 size;
	int ret;

	if (get_user(size, (u32 __user *)uarg))
		return -EFAULT;
	if (size < ver0)
		return -EINVAL;
	if (size > KVA_STRUCT_MAX)
		return -E2BIG;
	ret = copy_struct_from_user(kstruct, ksize, uarg, size);
	if (ret)
		return ret;
	*usize = size;
	return 0;
}

int kva_copy_out(void __user *uarg, const void *kstruct, size_t ksize,
		 u32 usize)
{
	if (copy_to_user(uarg, kstruct, min_t(size_t, ksize, usize)))
		return -EFAULT;
	return 0;
}
