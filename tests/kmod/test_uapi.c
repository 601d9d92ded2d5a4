// SPDX-License-Identifier: GPL-2.0
/*
 * The ioctls on /dev/kvarena and the UAPI rules every ioctl shares: struct
 * sizes (short, long, zero and nonzero tails), flags and pad, argument
 * ranges, fd types, module caps and tenant quotas.  Tests kmod/main.c,
 * kmod/arena.c, kmod/uaccess.c, kmod/tenant.c.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/capability.h>

#include "kt.h"

static int dev = -1;

static int uapi_init(void)
{
	dev = kt_dev_open();
	return dev < 0;
}

static int uapi_clean(void)
{
	close(dev);
	return 0;
}

static void test_version(void)
{
	struct kva_version v = { .size = sizeof(v) };

	CU_ASSERT_EQUAL(kt_ioctl(dev, KVA_IOC_VERSION, &v), 0);
	CU_ASSERT_EQUAL(v.api_version, KVA_API_VERSION);
	CU_ASSERT(v.features & KVA_FEAT_DMABUF);
	CU_ASSERT(v.features & KVA_FEAT_SESSIONS);
	CU_ASSERT(v.features & KVA_FEAT_SESSION_UPDATE);
	CU_ASSERT_EQUAL(v.page_size, KVA_PAGE_SIZE);
	CU_ASSERT_EQUAL(v.max_batch, KVA_MAX_BATCH);
	CU_ASSERT_EQUAL(v.max_pinned_bytes,
			(uint64_t)kt_param("max_pinned_mb") << 20);
	CU_ASSERT_EQUAL(v.size, sizeof(v));
}

/* The size field: short, exact, longer with a zero tail, nonzero tail. */
static void test_struct_sizes(void)
{
	struct {
		struct kva_version v;
		uint64_t tail[4];
	} big;
	struct kva_version v;

	memset(&v, 0, sizeof(v));
	CU_ASSERT_EQUAL(kt_ioctl(dev, KVA_IOC_VERSION, &v), -EINVAL);
	v.size = KVA_VERSION_SIZE_VER0 - 8;
	CU_ASSERT_EQUAL(kt_ioctl(dev, KVA_IOC_VERSION, &v), -EINVAL);

	memset(&big, 0, sizeof(big));
	big.v.size = sizeof(big);
	CU_ASSERT_EQUAL(kt_ioctl(dev, KVA_IOC_VERSION, &big), 0);
	CU_ASSERT_EQUAL(big.v.api_version, KVA_API_VERSION);
	CU_ASSERT_EQUAL(big.tail[0], 0);	/* kernel writes only its part */

	big.tail[2] = 1;
	CU_ASSERT_EQUAL(kt_ioctl(dev, KVA_IOC_VERSION, &big), -E2BIG);
	big.tail[2] = 0;
	big.v.size = KVA_STRUCT_MAX + 8;
	CU_ASSERT_EQUAL(kt_ioctl(dev, KVA_IOC_VERSION, &big), -E2BIG);

	CU_ASSERT_EQUAL(kt_ioctl(dev, KVA_IOC_VERSION, (void *)8), -EFAULT);
	CU_ASSERT_EQUAL(kt_ioctl(dev, KVA_IOC_VERSION, NULL), -EFAULT);
}

static int create(struct kva_arena_create *c)
{
	return kt_ioctl(dev, KVA_IOC_ARENA_CREATE, c);
}

static struct kva_arena_create good(void)
{
	struct kva_arena_create c = {
		.size = sizeof(c), .bytes = 4 * KT_MIB, .block_size = 64 << 10,
		.numa_node = KVA_NUMA_ANY, .tenant_id = 1, .name = "ok",
	};
	return c;
}

static void test_create_ok(void)
{
	struct kva_arena_create c = good();
	struct kva_arena_info info;
	int fd = create(&c);

	CU_ASSERT_FATAL(fd >= 0);
	CU_ASSERT(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	CU_ASSERT(c.arena_id > 0);
	CU_ASSERT_EQUAL(c.blocks_total, 2 * 32);
	CU_ASSERT_EQUAL(kt_arena_info(fd, &info), 0);
	CU_ASSERT_EQUAL(info.bytes, 4 * KT_MIB);
	CU_ASSERT_EQUAL(info.blocks_free, 64);
	CU_ASSERT_EQUAL(info.blocks_per_page, 32);
	CU_ASSERT_EQUAL(info.arena_id, c.arena_id);
	CU_ASSERT_STRING_EQUAL(info.name, "ok");
	CU_ASSERT_EQUAL(kt_sysfs("pinned_bytes"), (long long)(4 * KT_MIB));
	close(fd);
	CU_ASSERT_EQUAL(kt_sysfs("pinned_bytes"), 0);

	/* A block size that does not divide 2 MiB: no block straddles. */
	c = good();
	c.block_size = 768 << 10;
	fd = create(&c);
	CU_ASSERT_FATAL(fd >= 0);
	CU_ASSERT_EQUAL(c.blocks_total, 2 * 2);
	close(fd);

	/* numa node 0 exists in every guest. */
	c = good();
	c.numa_node = 0;
	fd = create(&c);
	CU_ASSERT(fd >= 0);
	close(fd);
}

static void test_create_bad(void)
{
	struct kva_arena_create c;

#define EXPECT(field_stmt, err) do {			\
		c = good();				\
		field_stmt;				\
		CU_ASSERT_EQUAL(create(&c), err);	\
	} while (0)

	EXPECT(c.bytes = 0, -EINVAL);
	EXPECT(c.bytes = 3 * KT_MIB, -EINVAL);		/* not 2 MiB multiple */
	EXPECT(c.bytes = 4 * KT_MIB + 4096, -EINVAL);
	EXPECT(c.bytes = 1ULL << 62, -E2BIG);		/* huge */
	EXPECT(c.bytes = ~0ULL << 21, -E2BIG);
	EXPECT(c.block_size = 0, -EINVAL);
	EXPECT(c.block_size = 4095, -EINVAL);
	EXPECT(c.block_size = 6000, -EINVAL);		/* not 4 KiB multiple */
	EXPECT(c.block_size = 4 << 20, -EINVAL);	/* > 2 MiB */
	EXPECT(c.numa_node = 4000, -EINVAL);
	EXPECT(c.numa_node = -2, -EINVAL);
	EXPECT(c.flags = 1, -EINVAL);			/* unknown flag */
	EXPECT(c.flags = 1U << 31, -EINVAL);
	EXPECT(c.pad = 1, -EINVAL);			/* reserved field */
	EXPECT(memset(c.name, 'a', sizeof(c.name)), -EINVAL);	/* no NUL */
	EXPECT(c.name[0] = '\n', -EINVAL);		/* unprintable */
	EXPECT(c.size = 8, -EINVAL);			/* short struct */
	CU_ASSERT_EQUAL(kt_sysfs("pinned_bytes"), 0);	/* nothing leaked */
	CU_ASSERT_EQUAL(kt_sysfs("arenas"), 0);
#undef EXPECT
}

/* Caps from module parameters: per arena (E2BIG) and in total (ENOSPC). */
static void test_caps(void)
{
	long long pinned = kt_param("max_pinned_mb");
	long long arena = kt_param("max_arena_mb");
	struct kva_arena_create c = good();
	int fds[8], i, n = 0;

	CU_ASSERT_FATAL(kt_param_set("max_pinned_mb", 16) == 0);
	CU_ASSERT_FATAL(kt_param_set("max_arena_mb", 8) == 0);
	c.bytes = 10 * KT_MIB;
	CU_ASSERT_EQUAL(create(&c), -E2BIG);
	c.bytes = 6 * KT_MIB;
	for (i = 0; i < 8; i++) {
		fds[n] = create(&c);
		if (fds[n] < 0)
			break;
		n++;
	}
	CU_ASSERT_EQUAL(n, 2);			/* 12 MiB fits, 18 does not */
	CU_ASSERT_EQUAL(i < 8 ? fds[n] : 0, -ENOSPC);
	c.bytes = 4 * KT_MIB;			/* exactly what is left */
	fds[n] = create(&c);
	CU_ASSERT(fds[n] >= 0);
	if (fds[n] >= 0)
		n++;
	CU_ASSERT_EQUAL(kt_sysfs("pinned_bytes"), (long long)(16 * KT_MIB));
	while (n--)
		close(fds[n]);
	CU_ASSERT_EQUAL(kt_sysfs("pinned_bytes"), 0);
	kt_param_set("max_pinned_mb", pinned);
	kt_param_set("max_arena_mb", arena);
}

static void test_wrong_fd_types(void)
{
	struct kva_arena_info info = { .size = sizeof(info) };
	struct kva_version v = { .size = sizeof(v) };
	struct kva_arena_create c = good();
	int arena = create(&c), dmabuf, nul;

	CU_ASSERT_FATAL(arena >= 0);
	dmabuf = kt_export(arena);
	CU_ASSERT_FATAL(dmabuf >= 0);
	/* Arena ioctls on the device, device ioctls on the arena. */
	CU_ASSERT_EQUAL(kt_ioctl(dev, KVA_IOC_ARENA_INFO, &info), -ENOTTY);
	CU_ASSERT_EQUAL(kt_ioctl(arena, KVA_IOC_VERSION, &v), -ENOTTY);
	CU_ASSERT_EQUAL(kt_ioctl(arena, KVA_IOC_ARENA_CREATE, &c), -ENOTTY);
	/* kvarena ioctls on the dma-buf and on an unrelated file. */
	CU_ASSERT_EQUAL(kt_ioctl(dmabuf, KVA_IOC_ARENA_INFO, &info), -ENOTTY);
	nul = open("/dev/null", O_RDWR);
	CU_ASSERT(kt_ioctl(nul, KVA_IOC_ARENA_INFO, &info) < 0);
	/* Unknown command numbers in our type. */
	CU_ASSERT_EQUAL(kt_ioctl(arena, _IOWR(KVA_IOC_MAGIC, 0x7f, struct kva_blocks), &info), -ENOTTY);
	CU_ASSERT_EQUAL(kt_ioctl(dev, _IOWR(KVA_IOC_MAGIC, 0x7f, struct kva_version), &v), -ENOTTY);
	/* A closed fd. */
	close(nul);
	CU_ASSERT_EQUAL(kt_ioctl(nul, KVA_IOC_ARENA_INFO, &info), -EBADF);
	close(dmabuf);
	close(arena);
}

static void test_tenant_quota(void)
{
	struct kva_tenant t = { .size = sizeof(t), .tenant_id = 77,
				.quota_bytes = 3 * 64 << 10 };
	struct kva_arena_create c = good();
	uint32_t ids[8];
	int64_t sid;
	int arena;

	CU_ASSERT_EQUAL(kt_ioctl(dev, KVA_IOC_TENANT_SET_QUOTA, &t), 0);
	t.flags = 1;
	CU_ASSERT_EQUAL(kt_ioctl(dev, KVA_IOC_TENANT_SET_QUOTA, &t), -EINVAL);
	c.tenant_id = 77;
	arena = create(&c);
	CU_ASSERT_FATAL(arena >= 0);
	sid = kt_session(arena);
	CU_ASSERT_FATAL(sid > 0);
	CU_ASSERT_EQUAL(kt_alloc(arena, sid, 4, ids, 0), -EDQUOT);
	CU_ASSERT_EQUAL(kt_alloc(arena, sid, 2, ids, 0), 2);
	CU_ASSERT_EQUAL(kt_alloc(arena, sid, 4, ids + 2, KVA_ALLOC_PARTIAL), 1);
	CU_ASSERT_EQUAL(kt_alloc(arena, sid, 1, ids + 3, KVA_ALLOC_PARTIAL), -EDQUOT);
	/* Shared references are not charged again. */
	CU_ASSERT_EQUAL(kt_share(arena, kt_session(arena), 3, ids), 3);

	memset(&t, 0, sizeof(t));
	t.size = sizeof(t);
	t.tenant_id = 77;
	CU_ASSERT_EQUAL(kt_ioctl(dev, KVA_IOC_TENANT_INFO, &t), 0);
	CU_ASSERT_EQUAL(t.used_bytes, 3 * 64 << 10);
	CU_ASSERT_EQUAL(t.quota_bytes, 3 * 64 << 10);
	CU_ASSERT_EQUAL(t.arenas, 1);
	close(arena);
	CU_ASSERT_EQUAL(kt_ioctl(dev, KVA_IOC_TENANT_INFO, &t), 0);
	CU_ASSERT_EQUAL(t.used_bytes, 0);
	CU_ASSERT_EQUAL(t.arenas, 0);

	t.tenant_id = 123456;		/* never seen */
	CU_ASSERT_EQUAL(kt_ioctl(dev, KVA_IOC_TENANT_INFO, &t), -ENOENT);
}

/* Setting a quota needs CAP_SYS_ADMIN: a child drops it and is refused. */
static void test_tenant_quota_eperm(void)
{
	pid_t pid = fork();
	int st;

	CU_ASSERT_FATAL(pid >= 0);
	if (pid == 0) {
		struct __user_cap_header_struct h = {
			.version = _LINUX_CAPABILITY_VERSION_3,
		};
		struct __user_cap_data_struct d[2];
		struct kva_tenant t = { .size = sizeof(t), .tenant_id = 5 };

		syscall(SYS_capget, &h, d);
		d[CAP_SYS_ADMIN / 32].effective &= ~(1U << (CAP_SYS_ADMIN % 32));
		if (syscall(SYS_capset, &h, d))
			_exit(2);
		_exit(kt_ioctl(dev, KVA_IOC_TENANT_SET_QUOTA, &t) == -EPERM ?
		      0 : 1);
	}
	CU_ASSERT_EQUAL(waitpid(pid, &st, 0), pid);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

void kt_register_uapi(void)
{
	CU_pSuite s = CU_add_suite("uapi", uapi_init, uapi_clean);

	KT_ADD(s, test_version);
	KT_ADD(s, test_struct_sizes);
	KT_ADD(s, test_create_ok);
	KT_ADD(s, test_create_bad);
	KT_ADD(s, test_caps);
	KT_ADD(s, test_wrong_fd_types);
	KT_ADD(s, test_tenant_quota);
	KT_ADD(s, test_tenant_quota_eperm);
}
