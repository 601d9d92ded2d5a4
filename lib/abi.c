// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The size convention of every struct crossing the library boundary
 * (Documentation/library.md, "ABI"): the caller says how big its struct
 * is (a leading `size` member, or a size argument for the tool-wait map
 * records); the library reads and writes only that much.  An older caller
 * gets zero defaults for fields it does not know; a newer caller's unknown
 * fields must be zero on input (-E2BIG otherwise) and read back as zero on
 * output.
 */
#include <errno.h>
#include <string.h>

#include "internal.h"

int kva_abi_in(void *dst, size_t dst_size, const void *src, size_t src_size,
	       size_t min_size)
{
	const unsigned char *tail = (const unsigned char *)src + dst_size;
	size_t i;

	if (!src || src_size < min_size || src_size > KVA_STRUCT_MAX)
		return -EINVAL;
	for (i = 0; src_size > dst_size && i < src_size - dst_size; i++)
		if (tail[i])
			return -E2BIG;
	memset(dst, 0, dst_size);
	memcpy(dst, src, src_size < dst_size ? src_size : dst_size);
	return 0;
}

int kva_abi_out_check(const void *out, size_t size, size_t min_size)
{
	if (!out || size < min_size || size > KVA_STRUCT_MAX)
		return -EINVAL;
	return 0;
}

void kva_abi_out(void *out, size_t size, const void *full, size_t full_size)
{
	size_t n = size < full_size ? size : full_size;

	memcpy(out, full, n);
	if (size > n)
		memset((char *)out + n, 0, size - n);
}

void kva_abi_out_uapi(void *out, const void *full, size_t full_size)
{
	uint32_t size;

	memcpy(&size, out, sizeof(size));
	kva_abi_out(out, size, full, full_size);
	/* What the caller's size field says now: the bytes filled in. */
	if (size > full_size)
		size = (uint32_t)full_size;
	memcpy(out, &size, sizeof(size));
}
