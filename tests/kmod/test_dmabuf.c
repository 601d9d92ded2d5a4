// SPDX-License-Identifier: GPL-2.0
/*
 * The dma-buf exporter: mmap through the arena fd and the dma-buf fd, CPU
 * access sync, two processes sharing blocks through a dma-buf fd passed
 * over a Unix socket, import by a real third-party driver (vgem), and the
 * memory outliving the arena fd while the dma-buf lives, and two importers
 * on one device sharing one DMA mapping.  Tests
 * kmod/dmabuf.c and kmod/arena.c (mmap).
 */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/dma-buf.h>

#include "kt.h"
#include "../common/kva_guest.h"

#define BS	(256U << 10)

static int dev = -1;

static int dmabuf_init(void)
{
	dev = kt_dev_open();
	return dev < 0;
}

static int dmabuf_clean(void)
{
	close(dev);
	return 0;
}

static uint64_t pat(uint32_t block, uint64_t w)
{
	return ((uint64_t)block << 32) ^ (w * 0x9e3779b97f4a7c15ULL) ^ 0x5a5a;
}

static void *blk(void *base, uint32_t id)
{
	return (char *)base + kva_block_offset(BS, id);
}

static void fill(void *base, const uint32_t *ids, int n)
{
	int i;
	uint64_t w;

	for (i = 0; i < n; i++) {
		uint64_t *p = blk(base, ids[i]);

		for (w = 0; w < BS / 8; w++)
			p[w] = pat(ids[i], w);
	}
}

static uint64_t mismatches(void *base, const uint32_t *ids, int n)
{
	uint64_t w, bad = 0;
	int i;

	for (i = 0; i < n; i++) {
		uint64_t *p = blk(base, ids[i]);

		for (w = 0; w < BS / 8; w++)
			bad += p[w] != pat(ids[i], w);
	}
	return bad;
}

static void test_mmap_both_fds(void)
{
	size_t len = 8 * KT_MIB;
	int arena = kt_arena(dev, len, BS, 3), dmabuf;
	struct dma_buf_sync sync = { .flags = DMA_BUF_SYNC_START | DMA_BUF_SYNC_RW };
	uint32_t ids[8];
	void *a, *d;
	int64_t sid;

	CU_ASSERT_FATAL(arena >= 0);
	dmabuf = kt_export(arena);
	CU_ASSERT_FATAL(dmabuf >= 0);
	CU_ASSERT(fcntl(dmabuf, F_GETFD) & FD_CLOEXEC);
	sid = kt_session(arena);
	CU_ASSERT_EQUAL(kt_alloc(arena, sid, 8, ids, 0), 8);
	a = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, arena, 0);
	d = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, dmabuf, 0);
	CU_ASSERT_FATAL(a != MAP_FAILED && d != MAP_FAILED);
	/* New memory is zeroed: nothing of a previous owner shows. */
	CU_ASSERT_EQUAL(((uint64_t *)a)[0] | ((uint64_t *)blk(a, 31))[100], 0);
	CU_ASSERT_EQUAL(kt_ioctl(dmabuf, DMA_BUF_IOCTL_SYNC, &sync), 0);
	fill(a, ids, 8);
	sync.flags = DMA_BUF_SYNC_END | DMA_BUF_SYNC_RW;
	CU_ASSERT_EQUAL(kt_ioctl(dmabuf, DMA_BUF_IOCTL_SYNC, &sync), 0);
	CU_ASSERT_EQUAL(mismatches(d, ids, 8), 0);	/* same pages */
	/* An offset mapping of the second 2 MiB page. */
	{
		uint64_t *second = mmap(NULL, KVA_PAGE_SIZE, PROT_READ,
					MAP_SHARED, dmabuf, KVA_PAGE_SIZE);

		CU_ASSERT_FATAL(second != MAP_FAILED);
		CU_ASSERT_EQUAL(second[0], ((uint64_t *)a)[KVA_PAGE_SIZE / 8]);
		munmap(second, KVA_PAGE_SIZE);
	}
	/* Private, oversized and out-of-range mappings are refused. */
	CU_ASSERT_EQUAL(mmap(NULL, len, PROT_READ, MAP_PRIVATE, arena, 0), MAP_FAILED);
	CU_ASSERT_EQUAL(mmap(NULL, len + 4096, PROT_READ, MAP_SHARED, arena, 0), MAP_FAILED);
	CU_ASSERT_EQUAL(mmap(NULL, 4096, PROT_READ, MAP_SHARED, arena, len), MAP_FAILED);
	CU_ASSERT_EQUAL(mmap(NULL, len + 4096, PROT_READ, MAP_SHARED, dmabuf, 0), MAP_FAILED);
	munmap(a, len);
	munmap(d, len);
	close(dmabuf);
	close(arena);
	CU_ASSERT_EQUAL(kt_sysfs("pinned_bytes"), 0);
}

static int send_fd(int sock, int fd, const uint32_t *ids, size_t n)
{
	return kva_send_fds(sock, ids, n * 4, &fd, 1) ? -1 : 0;
}

static int recv_fd(int sock, uint32_t *ids, size_t n)
{
	unsigned int nfd = 1;
	int fd;

	if (kva_recv_fds(sock, ids, n * 4, &fd, &nfd) || nfd != 1)
		return -1;
	return fd;
}

/*
 * Process A allocates and writes; B gets only the dma-buf fd and the ids
 * over a Unix socket, reads the same bytes, writes an answer back in place.
 */
static void test_two_processes(void)
{
	size_t len = 16 * KT_MIB;
	int64_t sid;
	int sv[2], arena, dmabuf, st;
	uint32_t ids[20];
	uint64_t *a;
	pid_t pid;

	arena = kt_arena(dev, len, BS, 3);
	CU_ASSERT_FATAL(arena >= 0);
	sid = kt_session(arena);
	CU_ASSERT_EQUAL_FATAL(kt_alloc(arena, sid, 20, ids, 0), 20);
	a = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, arena, 0);
	CU_ASSERT_FATAL(a != MAP_FAILED);
	fill(a, ids, 20);
	dmabuf = kt_export(arena);
	CU_ASSERT_FATAL(dmabuf >= 0);
	CU_ASSERT_FATAL(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) == 0);

	pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	if (pid == 0) {
		uint32_t rids[20];
		int fd;
		uint64_t *b;

		close(sv[0]);
		close(arena);	/* B holds the data handle only */
		close(dmabuf);
		fd = recv_fd(sv[1], rids, 20);
		if (fd < 0)
			_exit(10);
		b = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (b == MAP_FAILED)
			_exit(11);
		if (mismatches(b, rids, 20))
			_exit(12);
		*(uint64_t *)blk(b, rids[19]) = 0xfeedULL;	/* answer */
		_exit(0);
	}
	close(sv[1]);
	CU_ASSERT_EQUAL(send_fd(sv[0], dmabuf, ids, 20), 0);
	CU_ASSERT_EQUAL(waitpid(pid, &st, 0), pid);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CU_ASSERT_EQUAL(*(uint64_t *)blk(a, ids[19]), 0xfeedULL);
	close(sv[0]);
	munmap(a, len);
	close(dmabuf);
	close(arena);
}

/* The dma-buf keeps the memory (and its contents) after the arena fd goes. */
static void test_memory_outlives_arena_fd(void)
{
	size_t len = 4 * KT_MIB;
	int arena = kt_arena(dev, len, BS, 3), dmabuf;
	uint64_t *d;

	CU_ASSERT_FATAL(arena >= 0);
	dmabuf = kt_export(arena);
	CU_ASSERT_FATAL(dmabuf >= 0);
	d = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, dmabuf, 0);
	CU_ASSERT_FATAL(d != MAP_FAILED);
	d[12345] = 0xabcdef;
	close(arena);
	CU_ASSERT_EQUAL(kt_sysfs("pinned_bytes"), (long long)len);
	CU_ASSERT_EQUAL(kt_sysfs("arenas"), 1);
	CU_ASSERT_EQUAL(kt_sysfs("sessions"), 0);
	close(dmabuf);			/* the mapping still holds it */
	CU_ASSERT_EQUAL(kt_sysfs("pinned_bytes"), (long long)len);
	CU_ASSERT_EQUAL(d[12345], 0xabcdef);
	munmap(d, len);
	CU_ASSERT_EQUAL(kt_sysfs("pinned_bytes"), 0);
	CU_ASSERT_EQUAL(kt_sysfs("arenas"), 0);
}

static void test_vgem_import(void)
{
	struct kt_drm_prime_handle prime = { 0 };
	struct kt_drm_gem_close gclose = { 0 };
	struct kva_arena_info info;
	int vgem = kt_vgem_open(), arena, dmabuf;
	uint64_t maps_before;

	CU_ASSERT_FATAL(vgem >= 0);
	arena = kt_arena(dev, 4 * KT_MIB, BS, 3);
	CU_ASSERT_FATAL(arena >= 0);
	dmabuf = kt_export(arena);
	CU_ASSERT_FATAL(dmabuf >= 0);

	CU_ASSERT_EQUAL(kt_arena_info(arena, &info), 0);
	CU_ASSERT_EQUAL(info.dmabuf_attachments, 0);
	maps_before = info.dmabuf_maps_total;
	prime.fd = dmabuf;
	CU_ASSERT_EQUAL_FATAL(kt_ioctl(vgem, KT_DRM_IOCTL_PRIME_FD_TO_HANDLE, &prime), 0);
	CU_ASSERT(prime.handle != 0);
	/* The importer attached and mapped through our ops. */
	CU_ASSERT_EQUAL(kt_arena_info(arena, &info), 0);
	CU_ASSERT_EQUAL(info.dmabuf_attachments, 1);
	CU_ASSERT_EQUAL(info.dmabuf_mapped, 1);
	CU_ASSERT_EQUAL(info.dmabuf_maps_total, maps_before + 1);

	/* The importer keeps the memory alive after both of our fds close. */
	close(dmabuf);
	close(arena);
	CU_ASSERT_EQUAL(kt_sysfs("pinned_bytes"), (long long)(4 * KT_MIB));
	gclose.handle = prime.handle;
	CU_ASSERT_EQUAL(kt_ioctl(vgem, KT_DRM_IOCTL_GEM_CLOSE, &gclose), 0);
	CU_ASSERT_EQUAL(kt_sysfs("pinned_bytes"), 0);
	close(vgem);
}

/*
 * The arena's `devmaps` (ro: `romaps`, the read-only ones) column in
 * debugfs, -1 if the row is missing.
 */
int kt_devmaps(uint32_t arena_id, bool ro)
{
	FILE *f = fopen("/sys/kernel/debug/kvarena/arenas", "r");
	char line[256], name[64], bytes[32], fd[16];
	unsigned int id, t, bs, nb, fr, ss, at;
	int n = -1, dm, rm;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%u %63s %u %31s %u %u %u %u %u %d %d %15s", &id,
			   name, &t, bytes, &bs, &nb, &fr, &ss, &at, &dm, &rm,
			   fd) == 12 && id == arena_id)
			n = ro ? rm : dm;
	fclose(f);
	return n;
}

static int devmaps(uint32_t arena_id)
{
	return kt_devmaps(arena_id, false);
}

/* A CPU access bracket (DMA_BUF_IOCTL_SYNC start, end): 0 if both pass. */
static int cpu_access(int dmabuf, uint64_t rw)
{
	struct dma_buf_sync sync = { .flags = DMA_BUF_SYNC_START | rw };

	if (kt_ioctl(dmabuf, DMA_BUF_IOCTL_SYNC, &sync))
		return -1;
	sync.flags = DMA_BUF_SYNC_END | rw;
	return kt_ioctl(dmabuf, DMA_BUF_IOCTL_SYNC, &sync);
}

/* Closes one vgem import of the arena's dma-buf; `left` importers remain,
 * and the device's one mapping with them. */
static void drop_import(int vgem, uint32_t handle, int arena, uint32_t left)
{
	struct kt_drm_gem_close gclose = { .handle = handle };
	struct kva_arena_info info;

	CU_ASSERT_EQUAL(kt_ioctl(vgem, KT_DRM_IOCTL_GEM_CLOSE, &gclose), 0);
	CU_ASSERT_EQUAL(kt_arena_info(arena, &info), 0);
	CU_ASSERT_EQUAL(info.dmabuf_attachments, left);
	CU_ASSERT_EQUAL(info.dmabuf_mapped, left);
	CU_ASSERT_EQUAL(devmaps(info.arena_id), left ? 1 : 0);
}

/*
 * Two importers on one device (two DRM files, as a prefill and a decode
 * process on one GPU) share one DMA mapping of the arena; CPU-access sync
 * works while both hold it, and the mapping goes with the last of them.
 */
static void test_vgem_two_importers(void)
{
	struct kt_drm_prime_handle prime[2] = { 0 };
	struct kva_arena_info info;
	int vgem[2], arena, dmabuf, i;

	vgem[0] = kt_vgem_open();
	vgem[1] = kt_vgem_open();
	CU_ASSERT_FATAL(vgem[0] >= 0 && vgem[1] >= 0);
	arena = kt_arena(dev, 4 * KT_MIB, BS, 3);
	CU_ASSERT_FATAL(arena >= 0);
	dmabuf = kt_export(arena);
	CU_ASSERT_FATAL(dmabuf >= 0);
	CU_ASSERT_EQUAL_FATAL(kt_arena_info(arena, &info), 0);
	CU_ASSERT_EQUAL(devmaps(info.arena_id), 0);

	for (i = 0; i < 2; i++) {
		prime[i].fd = dmabuf;
		CU_ASSERT_EQUAL_FATAL(kt_ioctl(vgem[i], KT_DRM_IOCTL_PRIME_FD_TO_HANDLE,
					       &prime[i]), 0);
	}
	CU_ASSERT_EQUAL(kt_arena_info(arena, &info), 0);
	CU_ASSERT_EQUAL(info.dmabuf_attachments, 2);
	CU_ASSERT_EQUAL(info.dmabuf_mapped, 2);
	CU_ASSERT_EQUAL(devmaps(info.arena_id), 1);

	CU_ASSERT_EQUAL(cpu_access(dmabuf, DMA_BUF_SYNC_RW), 0);

	/* the first importer lets go: the mapping stays for the second */
	drop_import(vgem[0], prime[0].handle, arena, 1);
	CU_ASSERT_EQUAL(cpu_access(dmabuf, DMA_BUF_SYNC_READ), 0);
	drop_import(vgem[1], prime[1].handle, arena, 0);
	close(dmabuf);
	close(arena);
	close(vgem[0]);
	close(vgem[1]);
	CU_ASSERT_EQUAL(kt_sysfs("pinned_bytes"), 0);
}

void kt_register_dmabuf(void)
{
	CU_pSuite s = CU_add_suite("dmabuf", dmabuf_init, dmabuf_clean);

	KT_ADD(s, test_mmap_both_fds);
	KT_ADD(s, test_two_processes);
	KT_ADD(s, test_memory_outlives_arena_fd);
	KT_ADD(s, test_vgem_import);
	KT_ADD(s, test_vgem_two_importers);
}
