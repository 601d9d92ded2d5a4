/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libkvarena internals: the device and arena handles and the one dispatch
 * point, kva_call(), which issues an arena ioctl to the kernel or runs the
 * memfd backend's emulation of it on the shared core.
 */
#ifndef KVA_LIB_INTERNAL_H
#define KVA_LIB_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
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
	char fallback[128];		/* AUTO: why not the kernel ("" if not) */
	pthread_mutex_t lock;		/* memfd: tenants, ids */
	struct kva_utenant *tenants;
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

/* log.c: to the caller's logger, if any (levels as syslog's). */
bool kva_log_enabled(void);
void kva_vlog(int level, const char *fmt, va_list ap);
void kva_log(int level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* abi.c: the size convention (see the top of abi.c). */
#define kva_offsetofend(type, member) \
	(offsetof(type, member) + sizeof(((type *)0)->member))
/* Copy a caller's input struct of src_size bytes into dst (dst_size). */
int kva_abi_in(void *dst, size_t dst_size, const void *src, size_t src_size,
	       size_t min_size);
/* Check a caller's output struct (its size) before filling it. */
int kva_abi_out_check(const void *out, size_t size, size_t min_size);
/* Copy the library's full record into the caller's `size` bytes. */
void kva_abi_out(void *out, size_t size, const void *full, size_t full_size);
/* The same for a UAPI struct whose leading __u32 size the caller set;
 * leaves in it the number of bytes filled in. */
void kva_abi_out_uapi(void *out, const void *full, size_t full_size);
/* A UAPI output struct: check out->size against the struct's VER0. */
#define KVA_OUT_CHECK(out, ver0) \
	kva_abi_out_check((out), (out) ? (out)->size : 0, (ver0))
int kva_call(struct kva_arena *arena, unsigned long cmd, void *arg);

/* memfd.c */
int kva_memfd_version(struct kva_dev *dev, struct kva_version *out);
int kva_memfd_arena_create(struct kva_dev *dev, struct kva_arena_create *arg,
			   uint32_t flags, struct kva_arena *arena);
void kva_memfd_arena_destroy(struct kva_arena *arena);
int kva_memfd_call(struct kva_arena *arena, unsigned long cmd, void *arg);
int kva_memfd_tenant(struct kva_dev *dev, bool set, struct kva_tenant *t);
void kva_memfd_dev_destroy(struct kva_dev *dev);

#endif /* KVA_LIB_INTERNAL_H */
