// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Validation of UAPI argument structs that does not depend on the kernel,
 * shared by kvarena.ko and libkvarena's memfd backend so that both reject
 * exactly the same input with the same errno.  Node and cap checks that
 * need the running system stay with the callers.
 */
#include "kvc_arena.h"

/*
 * The UAPI is frozen at version 1: the structs keep the sizes published
 * for them (a struct grows only by a new KVA_*_SIZE_VER<n> at its end).
 */
static_assert(sizeof(struct kva_version) == KVA_VERSION_SIZE_VER0, "uapi");
static_assert(sizeof(struct kva_arena_create) == KVA_ARENA_CREATE_SIZE_VER1,
	      "uapi");
static_assert(sizeof(struct kva_arena_info) == KVA_ARENA_INFO_SIZE_VER1,
	      "uapi");
static_assert(sizeof(struct kva_export) == KVA_EXPORT_SIZE_VER0, "uapi");
static_assert(sizeof(struct kva_blocks) == KVA_BLOCKS_SIZE_VER0, "uapi");
static_assert(sizeof(struct kva_session_create) ==
	      KVA_SESSION_CREATE_SIZE_VER0, "uapi");
static_assert(sizeof(struct kva_session_end) == KVA_SESSION_END_SIZE_VER0,
	      "uapi");
static_assert(sizeof(struct kva_session_state) ==
	      KVA_SESSION_STATE_SIZE_VER1, "uapi");
static_assert(sizeof(struct kva_session_info) == KVA_SESSION_INFO_SIZE_VER1,
	      "uapi");
static_assert(sizeof(struct kva_tenant) == KVA_TENANT_SIZE_VER1, "uapi");
static_assert(sizeof(struct kva_policy_set) == KVA_POLICY_SET_SIZE_VER0,
	      "uapi");
static_assert(sizeof(struct kva_victim) == KVA_VICTIM_SIZE_VER0, "uapi");
static_assert(sizeof(struct kva_victims) == KVA_VICTIMS_SIZE_VER0, "uapi");
static_assert(sizeof(struct kva_event) == KVA_EVENT_SIZE_VER0, "uapi");
static_assert(sizeof(struct kva_uring_cmd) == 16, "uapi");
static_assert(KVC_STATE_COUNT <= KVA_STATE_SLOTS, "uapi");

static bool kvc_isprint(char c)
{
	return c >= 0x20 && c < 0x7f;
}

int kvc_check_arena_create(const struct kva_arena_create *arg, u64 max_bytes)
{
	u32 i, len = 0, low, high;

	if (arg->flags || arg->pad)
		return -EINVAL;
	if (!arg->bytes || arg->bytes & (KVA_PAGE_SIZE - 1))
		return -EINVAL;
	if (arg->block_size < KVA_BLOCK_MIN || arg->block_size > KVA_BLOCK_MAX ||
	    arg->block_size % KVA_BLOCK_MIN)
		return -EINVAL;
	if (arg->numa_node < KVA_NUMA_ANY || arg->policy >= KVC_POLICY_COUNT)
		return -EINVAL;
	while (len < KVA_NAME_LEN && arg->name[len])
		len++;
	if (len == KVA_NAME_LEN)
		return -EINVAL;
	for (i = 0; i < len; i++)
		if (!kvc_isprint(arg->name[i]))
			return -EINVAL;
	if (arg->bytes > max_bytes)
		return -E2BIG;
	/* The pool's arrays (4 bytes a block each) stay within kvmalloc. */
	if ((arg->bytes >> KVA_PAGE_SHIFT) * (KVA_PAGE_SIZE / arg->block_size) >=
	    KVC_MAX_BLOCKS)
		return -E2BIG;
	/* Before any memory is allocated, so bad watermarks cost nothing. */
	low = arg->low_wm;
	high = arg->high_wm;
	return kvc_watermarks(kvc_arena_nblocks(arg->bytes, arg->block_size),
			      &low, &high);
}

u32 kvc_arena_nblocks(u64 bytes, u32 block_size)
{
	return (u32)(bytes >> KVA_PAGE_SHIFT) *
	       (u32)(KVA_PAGE_SIZE / block_size);
}

int kvc_check_blocks(const struct kva_blocks *arg, bool alloc)
{
	if (arg->flags & ~(alloc ? KVA_ALLOC_PARTIAL : 0))
		return -EINVAL;
	if (!arg->count || arg->count > KVA_MAX_BATCH)
		return -EINVAL;
	return 0;
}
