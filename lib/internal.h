/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libkvarena internals: the device and arena handles and the one dispatch
 * point, kva_call(), which issues an arena ioctl to the kernel or runs the
 * memfd backend's emulation of it on the shared core.
 */
#ifndef KVA_LIB_INTERNAL_H
#define KVA_LIB_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>

#include "kvarena.h"
#include "kvc_arena.h"

#define KVA_EXPORT __attribute__((visibility("default")))

/* memfd backend: per-process tenant accounts. */
struct kva_utenant {
	uint32_t id;
	uint32_t arenas;
	uint64_t quota_bytes;
	uint64_t used_bytes;
	struct kva_utenant *next;
};

struct kva_dev {
	enum kva_backend backend;
	int fd;				/* /dev/kvarena (kernel) */
	pthread_mutex_t lock;		/* memfd: tenants, ids */
	struct kva_utenant *tenants;
	uint32_t next_arena_id;
};

struct kva_arena {
	struct kva_dev *dev;
	int fd;				/* arena fd (kernel) or the memfd */
	uint64_t bytes;
	uint32_t block_size;
	uint32_t blocks_per_page;
	uint32_t nblocks;
	void *base;			/* mapping, NULL until mapped */
	pthread_mutex_t map_lock;

	/* memfd backend only */
	pthread_mutex_t lock;
	struct kvc_arena core;
	struct kva_utenant *tenant;
	uint32_t id;
	int32_t numa_node;
	uint64_t created_ns;
	char name[KVA_NAME_LEN];
};

uint64_t kva_now_ns(void);
int kva_call(struct kva_arena *arena, unsigned long cmd, void *arg);

/* memfd.c */
int kva_memfd_version(struct kva_dev *dev, struct kva_version *out);
int kva_memfd_arena_create(struct kva_dev *dev, struct kva_arena_create *arg,
			   struct kva_arena *arena);
void kva_memfd_arena_destroy(struct kva_arena *arena);
int kva_memfd_call(struct kva_arena *arena, unsigned long cmd, void *arg);
int kva_memfd_tenant(struct kva_dev *dev, bool set, struct kva_tenant *t);
void kva_memfd_dev_destroy(struct kva_dev *dev);

#endif /* KVA_LIB_INTERNAL_H */
