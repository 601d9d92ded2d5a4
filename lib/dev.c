// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Opening a backend, version and tenant queries, and kva_call(): the point
 * where the kernel and memfd backends part ways.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

uint64_t kva_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static int kva_ioctl(int fd, unsigned long cmd, void *arg)
{
	int ret = ioctl(fd, cmd, arg);

	return ret < 0 ? -errno : ret;
}

int kva_call(struct kva_arena *arena, unsigned long cmd, void *arg)
{
	if (arena->dev->backend == KVA_BACKEND_KERNEL)
		return kva_ioctl(arena->fd, cmd, arg);
	return kva_memfd_call(arena, cmd, arg);
}

#define KVA_STR2(x) #x
#define KVA_STR(x) KVA_STR2(x)

KVA_EXPORT unsigned int kva_lib_version(void)
{
	return KVA_LIB_VERSION;
}

KVA_EXPORT const char *kva_lib_version_string(void)
{
	return KVA_STR(KVA_LIB_VERSION_MAJOR) "." KVA_STR(KVA_LIB_VERSION_MINOR)
	       "." KVA_STR(KVA_LIB_VERSION_PATCH);
}

KVA_EXPORT int kva_open(enum kva_backend backend, struct kva_dev **devp)
{
	struct kva_dev *dev;
	int fd = -1, err = 0;

	if (!devp || backend > KVA_BACKEND_MEMFD)
		return -EINVAL;
	if (backend != KVA_BACKEND_MEMFD) {
		fd = open("/dev/" KVA_DEVICE_NAME, O_RDWR | O_CLOEXEC);
		err = errno;
		if (fd < 0 && backend == KVA_BACKEND_KERNEL)
			return -err;
	}
	dev = calloc(1, sizeof(*dev));
	if (!dev) {
		if (fd >= 0)
			close(fd);
		return -ENOMEM;
	}
	if (fd < 0 && backend == KVA_BACKEND_AUTO) {
		snprintf(dev->fallback, sizeof(dev->fallback),
			 "open /dev/" KVA_DEVICE_NAME ": %s", strerror(err));
		kva_log(KVA_LOG_INFO, "AUTO backend: memfd, as %s",
			dev->fallback);
	}
	dev->fd = fd;
	dev->backend = fd >= 0 ? KVA_BACKEND_KERNEL : KVA_BACKEND_MEMFD;
	pthread_mutex_init(&dev->lock, NULL);
	*devp = dev;
	return 0;
}

KVA_EXPORT void kva_close(struct kva_dev *dev)
{
	if (!dev)
		return;
	if (dev->fd >= 0)
		close(dev->fd);
	kva_memfd_dev_destroy(dev);
	pthread_mutex_destroy(&dev->lock);
	free(dev);
}

KVA_EXPORT const char *kva_dev_fallback(const struct kva_dev *dev)
{
	return dev->fallback[0] ? dev->fallback : NULL;
}

KVA_EXPORT enum kva_backend kva_dev_backend(const struct kva_dev *dev)
{
	return dev->backend;
}

KVA_EXPORT const char *kva_dev_limits(const struct kva_dev *dev)
{
	if (dev->backend == KVA_BACKEND_KERNEL)
		return "";
	return "memfd backend: no dma-buf export, no device import, "
	       "block/session state private to this process, quotas "
	       "per kva_dev handle, memory pinned only if mlock is allowed "
	       "(KVA_ARENA_MLOCK_TRY, KVA_ARENA_NO_MLOCK)";
}

KVA_EXPORT int kva_dev_version(struct kva_dev *dev, struct kva_version *out)
{
	struct kva_version full = { .size = sizeof(full) };
	int ret = KVA_OUT_CHECK(out, KVA_VERSION_SIZE_VER0);

	if (ret)
		return ret;
	if (dev->backend == KVA_BACKEND_KERNEL)
		ret = kva_ioctl(dev->fd, KVA_IOC_VERSION, &full);
	else
		ret = kva_memfd_version(dev, &full);
	if (ret >= 0)
		kva_abi_out_uapi(out, &full, sizeof(full));
	return ret;
}

static int kva_tenant(struct kva_dev *dev, bool set, struct kva_tenant *t)
{
	if (dev->backend == KVA_BACKEND_KERNEL)
		return kva_ioctl(dev->fd, set ? KVA_IOC_TENANT_SET_QUOTA :
						 KVA_IOC_TENANT_INFO, t);
	return kva_memfd_tenant(dev, set, t);
}

KVA_EXPORT int kva_tenant_set_quota(struct kva_dev *dev, uint32_t tenant,
				    uint64_t quota_bytes)
{
	struct kva_tenant t = {
		.size = sizeof(t),
		.tenant_id = tenant,
		.quota_bytes = quota_bytes,
	};

	return kva_tenant(dev, true, &t);
}

KVA_EXPORT int kva_tenant_info(struct kva_dev *dev, uint32_t tenant,
			       struct kva_tenant *out)
{
	struct kva_tenant full = { .size = sizeof(full), .tenant_id = tenant };
	int ret = KVA_OUT_CHECK(out, KVA_TENANT_SIZE_VER0);

	if (ret)
		return ret;
	ret = kva_tenant(dev, false, &full);
	if (ret >= 0)
		kva_abi_out_uapi(out, &full, sizeof(full));
	return ret;
}

KVA_EXPORT const char *kva_state_name(uint32_t state)
{
	static const char *const names[KVC_STATE_COUNT] = {
		[KVA_STATE_IDLE] = "idle",
		[KVA_STATE_PREFILL] = "prefill",
		[KVA_STATE_DECODE] = "decode",
		[KVA_STATE_TOOL_WAIT] = "tool_wait",
		[KVA_STATE_ENDED] = "ended",
	};

	return state < KVC_STATE_COUNT ? names[state] : "unknown";
}

static const char *const kva_policy_names[KVC_POLICY_COUNT] = {
	[KVA_POLICY_TOOLWAIT] = "toolwait",
	[KVA_POLICY_LRU] = "lru",
	[KVA_POLICY_TTL] = "ttl",
};

KVA_EXPORT const char *kva_policy_name(uint32_t policy)
{
	return policy < KVC_POLICY_COUNT ? kva_policy_names[policy] : "unknown";
}

KVA_EXPORT int kva_policy_parse(const char *name)
{
	int i;

	for (i = 0; i < KVC_POLICY_COUNT; i++)
		if (!strcmp(name, kva_policy_names[i]))
			return i;
	return -EINVAL;
}
