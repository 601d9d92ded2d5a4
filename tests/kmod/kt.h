/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Helpers for the in-guest suite against /dev/kvarena: raw ioctls (so edge
 * cases reach the kernel exactly as written), module state from sysfs, and
 * the CUnit suite registrations.
 */
#ifndef KT_H
#define KT_H

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>

#include <CUnit/CUnit.h>
#include <linux/kvarena.h>

#include "kvarena.h"

#define KT_MIB		(1ULL << 20)

static inline int kt_ioctl(int fd, unsigned long cmd, void *arg)
{
	int ret = ioctl(fd, cmd, arg);

	return ret < 0 ? -errno : ret;
}

int kt_dev_open(void);
/* /dev/kvarena (mode 0660) to group gid: unprivileged test users open it. */
int kt_dev_group(unsigned int gid);
/* Create an arena through the raw ioctl; returns the fd or -errno. */
int kt_arena(int dev, uint64_t bytes, uint32_t block_size, uint32_t tenant);
/* A session's id (above 2^32, below 2^63) or -errno. */
int64_t kt_session(int arena);
int kt_alloc(int arena, uint64_t sid, uint32_t n, uint32_t *ids, uint32_t flags);
int kt_free(int arena, uint64_t sid, uint32_t n, const uint32_t *ids);
int kt_share(int arena, uint64_t sid, uint32_t n, const uint32_t *ids);
int kt_set_state(int arena, uint64_t sid, uint32_t state, uint32_t tool,
		 uint64_t wait_us);
int kt_end(int arena, uint64_t sid);
int kt_arena_info(int arena, struct kva_arena_info *info);
int kt_session_info(int arena, uint64_t sid, struct kva_session_info *info);
int kt_export(int arena);

/* /sys/class/misc/kvarena/<name>, /sys/module/kvarena/parameters/<name> */
long long kt_sysfs(const char *name);
long long kt_param(const char *name);
int kt_param_set(const char *name, long long value);
/* Free pages in /proc/zoneinfo, per-cpu lists included. */
long long kt_zone_free_pages(void);
/* Run a shell command; returns its exit status. */
int kt_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The two DRM ioctls used, from <drm/drm.h> (not in linux-libc-dev). */
struct kt_drm_prime_handle {
	uint32_t handle;
	uint32_t flags;
	int32_t fd;
};

struct kt_drm_gem_close {
	uint32_t handle;
	uint32_t pad;
};

#define KT_DRM_IOCTL_GEM_CLOSE	_IOW('d', 0x09, struct kt_drm_gem_close)
#define KT_DRM_IOCTL_PRIME_FD_TO_HANDLE \
	_IOWR('d', 0x2e, struct kt_drm_prime_handle)

/* vgem's DRM card, loading the module first; -1 if none. */
int kt_vgem_open(void);
/* Import a dma-buf into vgem (attach + map); the GEM handle or -errno. */
int kt_vgem_import(int vgem, int dmabuf);
int kt_vgem_close(int vgem, uint32_t handle);
/* debugfs `arenas`: the arena's device mappings (ro: read-only ones); -1. */
int kt_devmaps(uint32_t arena_id, bool ro);

/* Suites (one per file). */
void kt_register_uapi(void);
void kt_register_blocks(void);
void kt_register_dmabuf(void);
void kt_register_lifetime(void);
void kt_register_stress(void);
void kt_register_trace(void);
void kt_register_uring(void);
void kt_register_events(void);
void kt_register_netlink(void);
void kt_register_kvactl(void);
void kt_register_module(void);
void kt_register_security(void);
void kt_register_review35(void);

#define KT_ADD(suite, fn) CU_add_test(suite, #fn, fn)

#endif /* KT_H */
