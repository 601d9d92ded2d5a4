// SPDX-License-Identifier: GPL-2.0
/* Helpers for the in-guest suite (see kt.h). */
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kt.h"
#include "../common/kva_guest.h"

int kt_dev_open(void)
{
	int fd = open("/dev/kvarena", O_RDWR | O_CLOEXEC);

	return fd < 0 ? -errno : fd;
}

int kt_dev_group(unsigned int gid)
{
	return chown("/dev/kvarena", 0, gid) ? -errno : 0;
}

int kt_arena(int dev, uint64_t bytes, uint32_t block_size, uint32_t tenant)
{
	struct kva_arena_create c = {
		.size = sizeof(c), .bytes = bytes, .block_size = block_size,
		.numa_node = KVA_NUMA_ANY, .tenant_id = tenant, .name = "kt",
	};

	return kt_ioctl(dev, KVA_IOC_ARENA_CREATE, &c);
}

int64_t kt_session(int arena)
{
	struct kva_session_create c = { .size = sizeof(c), .cookie = 42 };
	int ret = kt_ioctl(arena, KVA_IOC_SESSION_CREATE, &c);

	/* The id is 64-bit and comes back in the struct only. */
	if (ret > 0)
		return -EPROTO;
	return ret < 0 ? ret : (int64_t)c.session_id;
}

static int kt_blocks(int arena, unsigned long cmd, uint64_t sid, uint32_t n,
		     const uint32_t *ids, uint32_t flags)
{
	struct kva_blocks b = {
		.size = sizeof(b), .flags = flags, .session_id = sid,
		.count = n, .ids = (uintptr_t)ids,
	};

	return kt_ioctl(arena, cmd, &b);
}

int kt_alloc(int arena, uint64_t sid, uint32_t n, uint32_t *ids, uint32_t flags)
{
	return kt_blocks(arena, KVA_IOC_BLOCKS_ALLOC, sid, n, ids, flags);
}

int kt_free(int arena, uint64_t sid, uint32_t n, const uint32_t *ids)
{
	return kt_blocks(arena, KVA_IOC_BLOCKS_FREE, sid, n, ids, 0);
}

int kt_share(int arena, uint64_t sid, uint32_t n, const uint32_t *ids)
{
	return kt_blocks(arena, KVA_IOC_BLOCKS_SHARE, sid, n, ids, 0);
}

int kt_set_state(int arena, uint64_t sid, uint32_t state, uint32_t tool,
		 uint64_t wait_us)
{
	struct kva_session_state s = {
		.size = sizeof(s), .session_id = sid, .state = state,
		.tool_class = tool, .expected_wait_us = wait_us,
	};

	return kt_ioctl(arena, KVA_IOC_SESSION_SET_STATE, &s);
}

int kt_end(int arena, uint64_t sid)
{
	struct kva_session_end e = { .size = sizeof(e), .session_id = sid };

	return kt_ioctl(arena, KVA_IOC_SESSION_END, &e);
}

int kt_arena_info(int arena, struct kva_arena_info *info)
{
	memset(info, 0, sizeof(*info));
	info->size = sizeof(*info);
	return kt_ioctl(arena, KVA_IOC_ARENA_INFO, info);
}

int kt_session_info(int arena, uint64_t sid, struct kva_session_info *info)
{
	memset(info, 0, sizeof(*info));
	info->size = sizeof(*info);
	info->session_id = sid;
	return kt_ioctl(arena, KVA_IOC_SESSION_INFO, info);
}

int kt_export(int arena)
{
	struct kva_export e = { .size = sizeof(e), .flags = KVA_EXPORT_CLOEXEC };

	return kt_ioctl(arena, KVA_IOC_EXPORT_DMABUF, &e);
}

static long long kt_read_ll(const char *path)
{
	char buf[64] = { 0 };
	int fd = open(path, O_RDONLY);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	return n > 0 ? strtoll(buf, NULL, 10) : -EIO;
}

long long kt_sysfs(const char *name)
{
	char path[128];

	snprintf(path, sizeof(path), "/sys/class/misc/kvarena/%s", name);
	return kt_read_ll(path);
}

long long kt_param(const char *name)
{
	char path[128];

	snprintf(path, sizeof(path), "/sys/module/kvarena/parameters/%s", name);
	return kt_read_ll(path);
}

int kt_param_set(const char *name, long long value)
{
	char path[128], buf[32];
	int fd, len, ret = 0;

	snprintf(path, sizeof(path), "/sys/module/kvarena/parameters/%s", name);
	fd = open(path, O_WRONLY);
	if (fd < 0)
		return -errno;
	len = snprintf(buf, sizeof(buf), "%lld", value);
	if (write(fd, buf, len) != len)
		ret = -errno;
	close(fd);
	return ret;
}

long long kt_zone_free_pages(void)
{
	FILE *f = fopen("/proc/zoneinfo", "r");
	char line[256];
	long long total = 0, v;

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, " pages free %lld", &v) == 1 ||
		    sscanf(line, " count: %lld", &v) == 1)
			total += v;
	}
	fclose(f);
	return total;
}

int kt_sh(const char *fmt, ...)
{
	char cmd[512];
	va_list ap;
	int st;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int kt_vgem_open(void)
{
	kt_sh("modprobe vgem 2>/dev/null");
	return kvg_open_vgem();
}

int kt_vgem_import(int vgem, int dmabuf)
{
	struct kt_drm_prime_handle prime = { .fd = dmabuf };
	int ret = kt_ioctl(vgem, KT_DRM_IOCTL_PRIME_FD_TO_HANDLE, &prime);

	return ret < 0 ? ret : (int)prime.handle;
}

int kt_vgem_close(int vgem, uint32_t handle)
{
	struct kt_drm_gem_close gclose = { .handle = handle };

	return kt_ioctl(vgem, KT_DRM_IOCTL_GEM_CLOSE, &gclose);
}
