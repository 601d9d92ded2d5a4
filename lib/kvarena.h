/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libkvarena: the C API runtimes use to hold KV caches in kvarena arenas.
 *
 * Two backends behind one API:
 *  - kernel: /dev/kvarena (kvarena.ko). Pinned 2 MiB pages, dma-buf export,
 *    isolation and accounting enforced by the kernel, shared across
 *    processes by passing fds.
 *  - memfd: user-space arenas (memfd, hugetlb or THP, mlock) running the
 *    same bookkeeping code in-process.  No dma-buf, no kernel-enforced
 *    sharing or quotas: block and session state is private to the process
 *    that created the arena (only the data can be shared, as a memfd).
 *
 * Every function returns 0 (or a count or fd) on success and a negative
 * errno on failure; nothing here calls exit().  The structs are the UAPI's
 * (<linux/kvarena.h>); `size` fields are filled in by the library.
 */
#ifndef KVARENA_H
#define KVARENA_H

#include <stddef.h>
#include <stdint.h>
#include <linux/kvarena.h>

#ifdef __cplusplus
extern "C" {
#endif

struct kva_dev;
struct kva_arena;

enum kva_backend {
	KVA_BACKEND_AUTO = 0,	/* kernel if /dev/kvarena opens, else memfd */
	KVA_BACKEND_KERNEL,
	KVA_BACKEND_MEMFD,
};

int kva_open(enum kva_backend backend, struct kva_dev **devp);
void kva_close(struct kva_dev *dev);
enum kva_backend kva_dev_backend(const struct kva_dev *dev);
/* One line: what this backend does not provide ("" for the kernel). */
const char *kva_dev_limits(const struct kva_dev *dev);
int kva_version(struct kva_dev *dev, struct kva_version *out);

struct kva_arena_params {
	uint64_t bytes;			/* multiple of 2 MiB */
	uint32_t block_size;		/* multiple of 4 KiB, <= 2 MiB */
	int32_t numa_node;		/* KVA_NUMA_ANY for any */
	uint32_t tenant_id;
	const char *name;		/* optional, < KVA_NAME_LEN bytes */
};

int kva_arena_create(struct kva_dev *dev, const struct kva_arena_params *p,
		     struct kva_arena **arenap);
/* Adopt an arena fd received from another process (kernel backend). */
int kva_arena_from_fd(struct kva_dev *dev, int arena_fd,
		      struct kva_arena **arenap);
void kva_arena_destroy(struct kva_arena *arena);
int kva_arena_fd(const struct kva_arena *arena);
int kva_arena_info(struct kva_arena *arena, struct kva_arena_info *out);

/*
 * A new fd for the arena's memory: a dma-buf (kernel backend) or a memfd
 * (memfd backend, not importable by devices).  KVA_EXPORT_CLOEXEC allowed.
 */
int kva_arena_data_fd(struct kva_arena *arena, uint32_t flags);
/* The dma-buf itself: -EOPNOTSUPP on the memfd backend. */
int kva_arena_export_dmabuf(struct kva_arena *arena, uint32_t flags);

/* Map the whole arena read-write (idempotent); the address is cached. */
int kva_arena_map(struct kva_arena *arena, void **addrp);
/* Address of a block in the mapped arena, NULL if unmapped or invalid. */
void *kva_arena_block_ptr(struct kva_arena *arena, uint32_t block);
/* Map `bytes` of a data fd (dma-buf or memfd) received from elsewhere. */
int kva_map_fd(int fd, size_t bytes, void **addrp);
int kva_unmap(void *addr, size_t bytes);

int kva_session_create(struct kva_arena *arena, uint64_t cookie,
		       uint32_t *session);
int kva_session_end(struct kva_arena *arena, uint32_t session);
int kva_session_set_state(struct kva_arena *arena, uint32_t session,
			  uint32_t state, uint32_t tool_class,
			  uint64_t expected_wait_us);
int kva_session_info(struct kva_arena *arena, uint32_t session,
		     struct kva_session_info *out);

/* Return the number of blocks allocated (all n unless KVA_ALLOC_PARTIAL). */
int kva_blocks_alloc(struct kva_arena *arena, uint32_t session, uint32_t n,
		     uint32_t *ids, uint32_t flags);
int kva_blocks_free(struct kva_arena *arena, uint32_t session, uint32_t n,
		    const uint32_t *ids);
int kva_blocks_share(struct kva_arena *arena, uint32_t session, uint32_t n,
		     const uint32_t *ids);

int kva_tenant_set_quota(struct kva_dev *dev, uint32_t tenant,
			 uint64_t quota_bytes);
int kva_tenant_info(struct kva_dev *dev, uint32_t tenant,
		    struct kva_tenant *out);

const char *kva_state_name(uint32_t state);

#ifdef __cplusplus
}
#endif

#endif /* KVARENA_H */
