// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Arena handles: creation and adoption, mapping and block addresses, and
 * the session and block calls, each one UAPI struct handed to kva_call().
 */
#include <errno.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

static struct kva_arena *kva_arena_alloc(struct kva_dev *dev)
{
	struct kva_arena *arena = calloc(1, sizeof(*arena));

	if (!arena)
		return NULL;
	arena->dev = dev;
	arena->fd = -1;
	pthread_mutex_init(&arena->map_lock, NULL);
	pthread_mutex_init(&arena->lock, NULL);
	return arena;
}

static void kva_arena_put(struct kva_arena *arena)
{
	pthread_mutex_destroy(&arena->map_lock);
	pthread_mutex_destroy(&arena->lock);
	free(arena);
}

/* Learn the geometry from the arena itself. */
static int kva_arena_load(struct kva_arena *arena)
{
	KVA_STRUCT(kva_arena_info, info);
	int ret = kva_arena_get_info(arena, &info);

	if (ret < 0)
		return ret;
	arena->bytes = info.bytes;
	arena->block_size = info.block_size;
	arena->blocks_per_page = info.blocks_per_page;
	arena->nblocks = info.blocks_total;
	return 0;
}

KVA_EXPORT int kva_arena_new(struct kva_dev *dev,
				const struct kva_arena_params *params,
				struct kva_arena **arenap)
{
	struct kva_arena_create arg = { .size = sizeof(arg) };
	struct kva_arena_params p;
	struct kva_arena *arena;
	int ret;

	if (!dev || !params || !arenap)
		return -EINVAL;
	ret = kva_abi_in(&p, sizeof(p), params, params->size,
			 KVA_ARENA_PARAMS_SIZE_VER0);
	if (ret)
		return ret;
	arg.bytes = p.bytes;
	arg.block_size = p.block_size;
	arg.numa_node = p.numa_node;
	arg.tenant_id = p.tenant_id;
	arg.policy = p.policy;
	arg.low_wm = p.low_wm;
	arg.high_wm = p.high_wm;
	arg.ttl_ms = p.ttl_ms;
	if ((p.flags & ~(KVA_ARENA_NO_MLOCK | KVA_ARENA_MLOCK_TRY)) ||
	    (p.flags & KVA_ARENA_NO_MLOCK && p.flags & KVA_ARENA_MLOCK_TRY))
		return -EINVAL;
	if (p.name) {
		if (strlen(p.name) >= sizeof(arg.name))
			return -EINVAL;
		strcpy(arg.name, p.name);
	}
	arena = kva_arena_alloc(dev);
	if (!arena)
		return -ENOMEM;
	if (dev->backend == KVA_BACKEND_KERNEL) {
		ret = ioctl(dev->fd, KVA_IOC_ARENA_CREATE, &arg);
		ret = ret < 0 ? -errno : ret;
		if (ret >= 0) {
			arena->fd = ret;
			ret = kva_arena_load(arena);
		}
	} else {
		ret = kva_memfd_arena_create(dev, &arg, p.flags, arena);
	}
	if (ret < 0) {
		kva_arena_destroy(arena);
		return ret;
	}
	*arenap = arena;
	return 0;
}

KVA_EXPORT int kva_arena_from_fd(struct kva_dev *dev, int arena_fd,
				 struct kva_arena **arenap)
{
	struct kva_arena *arena;
	int ret;

	if (dev->backend != KVA_BACKEND_KERNEL)
		return -EOPNOTSUPP;
	arena = kva_arena_alloc(dev);
	if (!arena)
		return -ENOMEM;
	arena->fd = fcntl(arena_fd, F_DUPFD_CLOEXEC, 0);
	ret = arena->fd < 0 ? -errno : kva_arena_load(arena);
	if (ret < 0) {
		kva_arena_destroy(arena);
		return ret;
	}
	*arenap = arena;
	return 0;
}

KVA_EXPORT void kva_arena_destroy(struct kva_arena *arena)
{
	if (!arena)
		return;
	if (arena->dev->backend == KVA_BACKEND_MEMFD) {
		kva_memfd_arena_destroy(arena);
	} else {
		if (arena->base)
			munmap(arena->base, arena->bytes);
		if (arena->fd >= 0)
			close(arena->fd);
	}
	kva_arena_put(arena);
}

KVA_EXPORT int kva_arena_fd(const struct kva_arena *arena)
{
	return arena->fd;
}

KVA_EXPORT int kva_arena_get_info(struct kva_arena *arena,
			      struct kva_arena_info *out)
{
	struct kva_arena_info full = { .size = sizeof(full) };
	int ret = KVA_OUT_CHECK(out, KVA_ARENA_INFO_SIZE_VER0);

	if (ret)
		return ret;
	ret = kva_call(arena, KVA_IOC_ARENA_INFO, &full);
	if (ret >= 0)
		kva_abi_out_uapi(out, &full, sizeof(full));
	return ret;
}

KVA_EXPORT int kva_arena_export_dmabuf(struct kva_arena *arena, uint32_t flags)
{
	struct kva_export arg = { .size = sizeof(arg), .flags = flags };

	if (arena->dev->backend != KVA_BACKEND_KERNEL)
		return -EOPNOTSUPP;
	return kva_call(arena, KVA_IOC_EXPORT_DMABUF, &arg);
}

KVA_EXPORT int kva_arena_data_fd(struct kva_arena *arena, uint32_t flags)
{
	int fd;

	if (arena->dev->backend == KVA_BACKEND_KERNEL)
		return kva_arena_export_dmabuf(arena, flags);
	if (flags & ~KVA_EXPORT_CLOEXEC)
		return -EINVAL;
	fd = fcntl(arena->fd, flags ? F_DUPFD_CLOEXEC : F_DUPFD, 0);
	return fd < 0 ? -errno : fd;
}

/*
 * At a 2 MiB-aligned address, so that the kernel maps an arena's 2 MiB
 * pages with one PMD entry each whatever fd they come through (an arena
 * fd aligns by itself; a dma-buf fd has no say in its address): reserve
 * 2 MiB more than needed, map inside it, give the rest back.
 */
KVA_EXPORT int kva_map_fd(int fd, size_t bytes, void **addrp)
{
	const size_t align = KVA_PAGE_SIZE;
	char *r, *a;
	void *p;
	int err;

	if (bytes > SIZE_MAX - align)
		return -EINVAL;
	r = mmap(NULL, bytes + align, PROT_NONE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (r == MAP_FAILED)
		return -errno;
	a = (char *)(((uintptr_t)r + align - 1) & ~(uintptr_t)(align - 1));
	p = mmap(a, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
	if (p == MAP_FAILED) {
		err = errno;
		munmap(r, bytes + align);
		return -err;
	}
	if (a > r)
		munmap(r, a - r);
	if (a + bytes < r + bytes + align)
		munmap(a + bytes, (r + bytes + align) - (a + bytes));
	*addrp = p;
	return 0;
}

KVA_EXPORT int kva_unmap(void *addr, size_t bytes)
{
	return munmap(addr, bytes) ? -errno : 0;
}

KVA_EXPORT int kva_arena_map(struct kva_arena *arena, void **addrp)
{
	int ret = 0;

	pthread_mutex_lock(&arena->map_lock);
	if (!arena->base)
		ret = kva_map_fd(arena->fd, arena->bytes, &arena->base);
	if (!ret && addrp)
		*addrp = arena->base;
	pthread_mutex_unlock(&arena->map_lock);
	return ret;
}

KVA_EXPORT void *kva_arena_block_ptr(struct kva_arena *arena, uint32_t block)
{
	if (!arena->base || block >= arena->nblocks)
		return NULL;
	return (char *)arena->base + kva_block_offset(arena->block_size, block);
}

KVA_EXPORT int kva_session_open(struct kva_arena *arena, uint64_t cookie,
				  uint64_t *session)
{
	struct kva_session_create arg = { .size = sizeof(arg), .cookie = cookie };
	int ret = kva_call(arena, KVA_IOC_SESSION_CREATE, &arg);

	if (ret >= 0) {
		*session = arg.session_id;
		ret = 0;
	}
	return ret;
}

KVA_EXPORT int kva_session_close(struct kva_arena *arena, uint64_t session)
{
	struct kva_session_end arg = { .size = sizeof(arg),
				       .session_id = session };

	return kva_call(arena, KVA_IOC_SESSION_END, &arg);
}

KVA_EXPORT int kva_session_set_state(struct kva_arena *arena, uint64_t session,
				     uint32_t state, uint32_t tool_class,
				     uint64_t expected_wait_us)
{
	struct kva_session_state arg = {
		.size = sizeof(arg),
		.session_id = session,
		.state = state,
		.tool_class = tool_class,
		.expected_wait_us = expected_wait_us,
	};

	return kva_call(arena, KVA_IOC_SESSION_SET_STATE, &arg);
}

KVA_EXPORT int kva_session_update(struct kva_arena *arena, uint64_t session,
				  uint32_t flags, uint32_t state,
				  uint32_t tool_class,
				  uint64_t expected_wait_us, uint32_t tier)
{
	struct kva_session_state arg = {
		.size = sizeof(arg),
		.flags = flags,
		.session_id = session,
		.state = state,
		.tool_class = tool_class,
		.expected_wait_us = expected_wait_us,
		.tier = tier,
	};

	return kva_call(arena, KVA_IOC_SESSION_SET_STATE, &arg);
}

KVA_EXPORT int kva_session_get_info(struct kva_arena *arena, uint64_t session,
				struct kva_session_info *out)
{
	struct kva_session_info full = { .size = sizeof(full),
					 .session_id = session };
	int ret = KVA_OUT_CHECK(out, KVA_SESSION_INFO_SIZE_VER0);

	if (ret)
		return ret;
	ret = kva_call(arena, KVA_IOC_SESSION_INFO, &full);
	if (ret >= 0)
		kva_abi_out_uapi(out, &full, sizeof(full));
	return ret;
}

static int kva_blocks(struct kva_arena *arena, unsigned long cmd,
		      uint64_t session, uint32_t n, const uint32_t *ids,
		      uint32_t flags)
{
	struct kva_blocks arg = {
		.size = sizeof(arg),
		.flags = flags,
		.session_id = session,
		.count = n,
		.ids = (uintptr_t)ids,
	};

	return kva_call(arena, cmd, &arg);
}

KVA_EXPORT int kva_blocks_alloc(struct kva_arena *arena, uint64_t session,
				uint32_t n, uint32_t *ids, uint32_t flags)
{
	return kva_blocks(arena, KVA_IOC_BLOCKS_ALLOC, session, n, ids, flags);
}

KVA_EXPORT int kva_blocks_free(struct kva_arena *arena, uint64_t session,
			       uint32_t n, const uint32_t *ids)
{
	return kva_blocks(arena, KVA_IOC_BLOCKS_FREE, session, n, ids, 0);
}

KVA_EXPORT int kva_blocks_share(struct kva_arena *arena, uint64_t session,
				uint32_t n, const uint32_t *ids)
{
	return kva_blocks(arena, KVA_IOC_BLOCKS_SHARE, session, n, ids, 0);
}

KVA_EXPORT int kva_arena_set_policy(struct kva_arena *arena, uint32_t policy,
				    uint32_t low_wm, uint32_t high_wm,
				    uint32_t ttl_ms)
{
	struct kva_policy_set arg = {
		.size = sizeof(arg), .policy = policy, .low_wm = low_wm,
		.high_wm = high_wm, .ttl_ms = ttl_ms,
	};

	return kva_call(arena, KVA_IOC_ARENA_SET_POLICY, &arg);
}

KVA_EXPORT int kva_arena_victims(struct kva_arena *arena, uint32_t policy,
				 struct kva_victim *out, uint32_t max)
{
	struct kva_victims arg = {
		.size = sizeof(arg), .max = max, .policy = policy,
		.victims = (uintptr_t)out, .victim_size = sizeof(*out),
	};

	return kva_call(arena, KVA_IOC_ARENA_VICTIMS, &arg);
}
