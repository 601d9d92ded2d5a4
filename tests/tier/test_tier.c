// SPDX-License-Identifier: MIT
/*
 * test_tier.c - the disk tier (daemon/tier/) on real files and a real
 * io_uring, over a real libkvarena arena (memfd backend): spill and
 * restore byte for byte (O_DIRECT and buffered, registered buffers or
 * not), corruption, truncation and a foreign file detected per block, the
 * byte cap with oldest-first eviction, the directory's start-up clean and
 * lock, a process killed mid-spill, many operations in flight; then the
 * keep / spill / discard economics and the prefetch time.
 *
 * Usage: test_tier WORKDIR   (spill directories are made under it)
 * KVT_TEST_BACKEND=kernel: the arena is kvarena.ko's (in a guest); then
 * O_DIRECT and registered buffers are required only where the guest's
 * file system and kernel allow them (KVT_TEST_DIRECT=0 / KVT_TEST_FIXED=0
 * say they do not; the tier then runs without them, and says so).
 */
#include <CUnit/Basic.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvarena.h"
#include "kvtier.h"

#define BLOCK	(64u << 10)		/* 32 blocks per 2 MiB page */
#define ARENA	(32ull << 20)

static const char *workdir;
static struct kva_dev *dev;
static struct kva_arena *arena;
static uint8_t *base;
static struct kvt_geom geom;

static uint8_t *blk(uint32_t id)
{
	return kva_arena_block_ptr(arena, id);
}

static void fill(uint32_t id, uint64_t seed)
{
	uint64_t *p = (uint64_t *)blk(id), x = seed * 0x9e3779b97f4a7c15ull + 1;
	size_t i;

	for (i = 0; i < BLOCK / 8; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = x;
	}
}

static int same(uint32_t a, uint32_t b)
{
	return !memcmp(blk(a), blk(b), BLOCK);
}

static char *new_dir(const char *tag)
{
	static int n;
	char *d;

	if (asprintf(&d, "%s/%s-%d-XXXXXX", workdir, tag, n++) < 0)
		return NULL;
	return mkdtemp(d);
}

static struct kvt *open_tier(const char *dir, uint64_t cap, enum kvt_mode direct,
			     enum kvt_mode fixed, uint32_t qd)
{
	struct kvt_params p = { .dir = dir, .cap_bytes = cap, .direct = direct, .fixed = fixed,
				.queue_depth = qd };
	struct kvt *t = NULL;
	char err[256];
	int rc = kvt_open(&p, &geom, base, ARENA, &t, err, sizeof(err));

	if (rc)
		fprintf(stderr, "kvt_open: %s\n", err);
	CU_ASSERT_EQUAL(rc, 0);
	return t;
}

/* Wait for n completions (at most 20 s). */
static int wait_done(struct kvt *t, struct kvt_done *out, int n)
{
	int got = 0;
	time_t end = time(NULL) + 20;

	while (got < n && time(NULL) < end) {
		struct pollfd pfd = { .fd = kvt_event_fd(t), .events = POLLIN };

		poll(&pfd, 1, 200);
		got += kvt_reap(t, out + got, (unsigned int)(n - got));
	}
	return got;
}

static int files_in(const char *dir, uint64_t *bytes)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	if (bytes)
		*bytes = 0;
	if (!d)
		return -1;
	while ((de = readdir(d))) {
		struct stat sb;
		char p[1024];

		if (de->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
		if (stat(p, &sb) == 0 && bytes)
			*bytes += (uint64_t)sb.st_size;
		n++;
	}
	closedir(d);
	return n;
}

/* Removal is the I/O thread's: wait for it (files and their bytes; 20 s
 * at most). */
static void wait_files(struct kvt *t, const char *dir, int want)
{
	int i;

	for (i = 0; i < 2000 && (files_in(dir, NULL) != want || (!want && kvt_bytes_used(t))); i++)
		usleep(10000);
}

static char *only_file(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	char *r = NULL;

	while (d && (de = readdir(d)))
		if (strstr(de->d_name, ".kvspill") && de->d_name[0] != '.')
			if (asprintf(&r, "%s/%s", dir, de->d_name) < 0)
				r = NULL;
	if (d)
		closedir(d);
	return r;
}

static const struct kvt_ident ID = { .key = 42, .tokens_hash = 0x1234, .n_tokens = 190 };

/* Spill 12 scattered blocks, restore all into others and a part into
 * more; every byte back; the file gone after the drop. */
static void roundtrip(enum kvt_mode direct, enum kvt_mode fixed, const char *want,
		      uint32_t piece, uint32_t eagain)
{
	uint32_t src[12], dst[12], part[5], i;
	char *dir = new_dir("rt");
	struct kvt *t = open_tier(dir, 0, direct, fixed, 4);
	struct kvt_done d[2];
	kvt_file_id f;
	uint64_t bytes;

	if (!t)
		return;
	kvt_test_piece(t, piece);
	kvt_test_eagain(t, eagain);
	CU_ASSERT_PTR_NOT_NULL(strstr(kvt_describe(t), want));
	for (i = 0; i < 12; i++) {
		src[i] = 3 + i * 17 % 100;	/* across pages */
		dst[i] = 200 + i;
		fill(src[i], i + 1);
		memset(blk(dst[i]), 0, BLOCK);
	}
	/* held, the spill is in flight whatever the scheduler does: a
	 * restore of it is refused until it completes */
	kvt_test_hold(t, 0);
	CU_ASSERT_EQUAL(kvt_spill(t, &ID, src, 12, (void *)7, &f), 0);
	CU_ASSERT_EQUAL(kvt_restore(t, f, &ID, 0, 12, dst, NULL), -EBUSY);
	CU_ASSERT_EQUAL(kvt_reap(t, d, 2), 0);
	kvt_test_hold(t, UINT32_MAX);
	CU_ASSERT_EQUAL_FATAL(wait_done(t, d, 1), 1);
	CU_ASSERT_EQUAL(d[0].op, KVT_OP_SPILL);
	CU_ASSERT_EQUAL(d[0].status, 0);
	CU_ASSERT_EQUAL(d[0].file, f);
	CU_ASSERT_PTR_EQUAL(d[0].ctx, (void *)7);
	CU_ASSERT_EQUAL(d[0].bytes, 12ull * BLOCK + 4096);
	CU_ASSERT_EQUAL(files_in(dir, &bytes), 1);
	CU_ASSERT_EQUAL(bytes, kvt_file_bytes(t, 12));
	CU_ASSERT_EQUAL(kvt_bytes_used(t), kvt_file_bytes(t, 12));
	CU_ASSERT_EQUAL(kvt_restore(t, f, &ID, 0, 12, dst, (void *)8), 0);
	CU_ASSERT_EQUAL_FATAL(wait_done(t, d, 1), 1);
	CU_ASSERT_EQUAL(d[0].op, KVT_OP_RESTORE);
	CU_ASSERT_EQUAL(d[0].status, 0);
	CU_ASSERT_EQUAL(d[0].blocks_ok, 12);
	for (i = 0; i < 12; i++)
		CU_ASSERT(same(src[i], dst[i]));
	/* a part, again (a file restores as often as asked) */
	for (i = 0; i < 5; i++) {
		part[i] = 300 + i;
		memset(blk(part[i]), 0xee, BLOCK);
	}
	CU_ASSERT_EQUAL(kvt_restore(t, f, &ID, 4, 5, part, NULL), 0);
	CU_ASSERT_EQUAL_FATAL(wait_done(t, d, 1), 1);
	CU_ASSERT_EQUAL(d[0].status, 0);
	CU_ASSERT_EQUAL(d[0].blocks_ok, 5);
	for (i = 0; i < 5; i++)
		CU_ASSERT(same(src[4 + i], part[i]));
	CU_ASSERT_EQUAL(kvt_restore(t, f, &ID, 8, 5, part, NULL), -EINVAL);
	kvt_drop(t, f);
	CU_ASSERT_EQUAL(kvt_restore(t, f, &ID, 0, 1, part, NULL), -ENOENT);
	wait_files(t, dir, 0);
	CU_ASSERT_EQUAL(files_in(dir, NULL), 0);
	CU_ASSERT_EQUAL(kvt_bytes_used(t), 0);
	kvt_close(t);
	rmdir(dir);
	free(dir);
}

static int env_off(const char *name)
{
	const char *v = getenv(name);

	return v && !strcmp(v, "0");
}

static void test_roundtrip_direct(void)
{
	if (env_off("KVT_TEST_DIRECT"))
		roundtrip(KVT_AUTO, KVT_AUTO, "direct=off (O_DIRECT", 0, 0);
	else
		roundtrip(KVT_ON, KVT_AUTO, "direct=on", 0, 0);
}

static void test_roundtrip_direct_fixed(void)
{
	if (env_off("KVT_TEST_FIXED"))
		roundtrip(KVT_AUTO, KVT_AUTO, "fixed=off (registered buffers", 0, 0);
	else
		roundtrip(KVT_AUTO, KVT_ON, "fixed=on", 0, 0);
}

static void test_roundtrip_buffered(void)
{
	roundtrip(KVT_OFF, KVT_OFF, "direct=off fixed=off", 0, 0);
}

/* Reads and writes that stop short (as POSIX lets them, a write without
 * a full disk too): the rest goes again, every byte back, every block's
 * checksum good. Before, a short write failed the spill ("disk full"). */
static void test_roundtrip_pieces(void)
{
	roundtrip(KVT_OFF, KVT_OFF, "direct=off fixed=off", 1000, 0);
}

/* Transfers the kernel refuses for now (-EAGAIN: io-wq out of workers;
 * -EINTR): they go again, and the spill and restores complete. */
static void test_roundtrip_again(void)
{
	roundtrip(KVT_OFF, KVT_OFF, "direct=off fixed=off", 0, 6);
}

/* A file spilled from 8 blocks, for the damage tests. */
static kvt_file_id spill8(struct kvt *t, uint32_t *src)
{
	struct kvt_done d;
	kvt_file_id f = 0;
	uint32_t i;

	for (i = 0; i < 8; i++) {
		src[i] = 40 + i * 3;
		fill(src[i], 100 + i);
	}
	CU_ASSERT_EQUAL(kvt_spill(t, &ID, src, 8, NULL, &f), 0);
	CU_ASSERT_EQUAL(wait_done(t, &d, 1), 1);
	CU_ASSERT_EQUAL(d.status, 0);
	return f;
}

static int restore8(struct kvt *t, kvt_file_id f, const struct kvt_ident *id, uint32_t *ok)
{
	uint32_t dst[8], i;
	struct kvt_done d;

	for (i = 0; i < 8; i++)
		dst[i] = 400 + i;
	if (kvt_restore(t, f, id, 0, 8, dst, NULL))
		return -999;
	if (wait_done(t, &d, 1) != 1)
		return -998;
	*ok = d.blocks_ok;
	return d.status;
}

static void poke(const char *path, off_t off)
{
	int fd = open(path, O_RDWR);
	uint8_t b;

	CU_ASSERT(fd >= 0);
	CU_ASSERT_EQUAL(pread(fd, &b, 1, off), 1);
	b ^= 0x40;
	CU_ASSERT_EQUAL(pwrite(fd, &b, 1, off), 1);
	fsync(fd);
	close(fd);
}

/* Damage is found, block by block; the good leading blocks are kept. */
static void test_damage(void)
{
	char *dir = new_dir("damage"), *path;
	struct kvt *t = open_tier(dir, 0, KVT_AUTO, KVT_AUTO, 8);
	struct kvt_ident other = ID;
	struct kvt_stats st;
	uint32_t src[8], ok = 99, i;
	kvt_file_id f;

	if (!t)
		return;
	/* a flipped bit in block 5 */
	f = spill8(t, src);
	path = only_file(dir);
	CU_ASSERT_PTR_NOT_NULL_FATAL(path);
	poke(path, 4096 + 5 * BLOCK + 1234);
	CU_ASSERT_EQUAL(restore8(t, f, &ID, &ok), -EBADMSG);
	CU_ASSERT_EQUAL(ok, 5);
	for (i = 0; i < 5; i++)
		CU_ASSERT(same(src[i], 400 + i));
	/* the header's own bytes */
	poke(path, 4096 + 5 * BLOCK + 1234);	/* data good again */
	CU_ASSERT_EQUAL(restore8(t, f, &ID, &ok), 0);
	CU_ASSERT_EQUAL(ok, 8);
	poke(path, 30);
	CU_ASSERT_EQUAL(restore8(t, f, &ID, &ok), -EBADMSG);
	CU_ASSERT_EQUAL(ok, 0);
	poke(path, 30);
	/* a block's checksum in the header (the header then fails its own) */
	poke(path, 72 + 8 * 2);
	CU_ASSERT_EQUAL(restore8(t, f, &ID, &ok), -EBADMSG);
	CU_ASSERT_EQUAL(ok, 0);
	poke(path, 72 + 8 * 2);
	/* other KV than asked for */
	other.tokens_hash++;
	CU_ASSERT_EQUAL(restore8(t, f, &other, &ok), -ESTALE);
	CU_ASSERT_EQUAL(ok, 0);
	/* truncated inside block 6: six blocks come back */
	CU_ASSERT_EQUAL(truncate(path, 4096 + 6 * BLOCK + 100), 0);
	CU_ASSERT_EQUAL(restore8(t, f, &ID, &ok), -ENODATA);
	CU_ASSERT_EQUAL(ok, 6);
	for (i = 0; i < 6; i++)
		CU_ASSERT(same(src[i], 400 + i));
	/* truncated to nothing, then gone */
	CU_ASSERT_EQUAL(truncate(path, 0), 0);
	CU_ASSERT_EQUAL(restore8(t, f, &ID, &ok), -ENODATA);
	CU_ASSERT_EQUAL(ok, 0);
	CU_ASSERT_EQUAL(unlink(path), 0);
	CU_ASSERT_EQUAL(restore8(t, f, &ID, &ok), -ENODATA);
	kvt_get_stats(t, &st);
	CU_ASSERT_EQUAL(st.restore_failures[0], 3);
	CU_ASSERT_EQUAL(st.restore_failures[1], 3);
	CU_ASSERT_EQUAL(st.restore_failures[2], 1);
	CU_ASSERT_EQUAL(st.restores, 1);
	kvt_drop(t, f);
	kvt_close(t);
	free(path);
	rmdir(dir);
	free(dir);
}

/* The cap: a spill that does not fit is refused; the oldest file goes
 * first; the bytes on disk never pass the cap. */
static void test_cap(void)
{
	char *dir = new_dir("cap");
	uint32_t src[4] = { 1, 2, 3, 4 }, i;
	struct kvt *t;
	struct kvt_done d[4];
	kvt_file_id f[5], old;
	uint64_t cap, disk;
	void *ctx = NULL;

	/* room for three files of 4 blocks */
	t = open_tier(dir, 0, KVT_AUTO, KVT_AUTO, 8);
	if (!t)
		return;
	cap = 3 * kvt_file_bytes(t, 4);
	kvt_close(t);
	t = open_tier(dir, cap, KVT_AUTO, KVT_AUTO, 8);
	for (i = 0; i < 4; i++)
		fill(src[i], i);
	kvt_test_hold(t, 0);	/* the three in flight until released */
	for (i = 0; i < 3; i++)
		CU_ASSERT_EQUAL(kvt_spill(t, &ID, src, 4, (void *)(uintptr_t)(i + 1), &f[i]), 0);
	CU_ASSERT_EQUAL(kvt_spill(t, &ID, src, 4, NULL, &f[3]), -ENOSPC);
	CU_ASSERT_EQUAL(kvt_oldest(t, &ctx), 0);	/* all still being written */
	kvt_test_hold(t, UINT32_MAX);
	CU_ASSERT_EQUAL(wait_done(t, d, 3), 3);
	CU_ASSERT(kvt_bytes_used(t) <= cap);
	CU_ASSERT_EQUAL(files_in(dir, &disk), 3);
	CU_ASSERT(disk <= cap);
	/* oldest first, until the new file fits */
	while (kvt_spill(t, &ID, src, 4, NULL, &f[3]) == -ENOSPC) {
		old = kvt_oldest(t, &ctx);
		CU_ASSERT_EQUAL(old, f[0]);
		CU_ASSERT_PTR_EQUAL(ctx, (void *)1);
		if (old != f[0])
			break;
		kvt_drop(t, old);
		/* the bytes come back once the file is removed */
		for (i = 0; i < 2000 && kvt_bytes_used(t) + kvt_file_bytes(t, 4) > cap; i++)
			usleep(10000);
	}
	CU_ASSERT_EQUAL(wait_done(t, d, 1), 1);
	CU_ASSERT_EQUAL(d[0].status, 0);
	CU_ASSERT_EQUAL(files_in(dir, &disk), 3);
	CU_ASSERT(disk <= cap);
	old = kvt_oldest(t, &ctx);
	CU_ASSERT_EQUAL(old, f[1]);
	CU_ASSERT_PTR_EQUAL(ctx, (void *)2);
	/* a spill larger than the whole cap never fits */
	{
		uint32_t many[16];

		for (i = 0; i < 16; i++)
			many[i] = i;
		CU_ASSERT_EQUAL(kvt_spill(t, &ID, many, 16, NULL, &f[4]), -ENOSPC);
	}
	kvt_close(t);
	CU_ASSERT_EQUAL(files_in(dir, NULL), 0);
	rmdir(dir);
	free(dir);
}

/* Start-up: stray spill files of an earlier life go, other files stay;
 * one tier per directory; a directory others may write is refused. */
static void test_open_clean_lock(void)
{
	char *dir = new_dir("clean"), p[1024];
	struct kvt_params prm = { .dir = dir };
	struct kvt *t, *t2 = NULL;
	struct kvt_stats st;
	char err[256];
	int fd;

	snprintf(p, sizeof(p), "%s/00000000000000aa.kvspill", dir);
	fd = open(p, O_CREAT | O_WRONLY, 0600);
	CU_ASSERT(fd >= 0 && write(fd, "junk", 4) == 4);
	close(fd);
	snprintf(p, sizeof(p), "%s/.probe.kvspill", dir);
	close(open(p, O_CREAT | O_WRONLY, 0600));
	snprintf(p, sizeof(p), "%s/operator-notes.txt", dir);
	close(open(p, O_CREAT | O_WRONLY, 0600));
	t = open_tier(dir, 0, KVT_AUTO, KVT_AUTO, 0);
	if (!t)
		return;
	kvt_get_stats(t, &st);
	CU_ASSERT_EQUAL(st.cleaned_at_open, 1);
	CU_ASSERT_EQUAL(files_in(dir, NULL), 1);	/* the notes */
	CU_ASSERT_EQUAL(kvt_open(&prm, &geom, base, ARENA, &t2, err, sizeof(err)), -EBUSY);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "in use"));
	kvt_close(t);
	CU_ASSERT_EQUAL(kvt_open(&prm, &geom, base, ARENA, &t2, err, sizeof(err)), 0);
	kvt_close(t2);
	unlink(p);
	/* group-writable: refused */
	chmod(dir, 0770);
	CU_ASSERT_EQUAL(kvt_open(&prm, &geom, base, ARENA, &t2, err, sizeof(err)), -EPERM);
	chmod(dir, 0700);
	/* relative paths and impossible geometry */
	prm.dir = "relative/dir";
	CU_ASSERT_EQUAL(kvt_open(&prm, &geom, base, ARENA, &t2, err, sizeof(err)), -EINVAL);
	prm.dir = dir;
	{
		struct kvt_geom g = geom;

		g.block_size = 1000;
		CU_ASSERT_EQUAL(kvt_open(&prm, &g, base, ARENA, &t2, err, sizeof(err)), -EINVAL);
		g = geom;
		g.blocks_total = 100000;
		CU_ASSERT_EQUAL(kvt_open(&prm, &g, base, ARENA, &t2, err, sizeof(err)), -EINVAL);
	}
	unlink(p);
	snprintf(p, sizeof(p), "%s/.lock", dir);
	unlink(p);
	rmdir(dir);
	free(dir);
}

/* Bad requests are refused before anything happens. */
static void test_bad_requests(void)
{
	char *dir = new_dir("bad");
	struct kvt *t = open_tier(dir, 0, KVT_AUTO, KVT_AUTO, 0);
	uint32_t ids[2] = { 1, 100000 };
	kvt_file_id f = 0;

	if (!t)
		return;
	CU_ASSERT_EQUAL(kvt_spill(t, &ID, ids, 2, NULL, &f), -EINVAL);
	CU_ASSERT_EQUAL(kvt_spill(t, &ID, ids, 0, NULL, &f), -EINVAL);
	CU_ASSERT_EQUAL(kvt_restore(t, 12345, &ID, 0, 1, ids, NULL), -ENOENT);
	CU_ASSERT_EQUAL(kvt_restore(t, 12345, &ID, 0, 2, ids, NULL), -EINVAL);
	CU_ASSERT_EQUAL(kvt_oldest(t, NULL), 0);
	kvt_drop(t, 999);	/* unknown: nothing */
	kvt_close(t);
	rmdir(dir);
	free(dir);
}

/* 40 files written, then read, with at most 8 block I/Os in flight:
 * every completion once, every byte back. */
static void test_many_in_flight(void)
{
	char *dir = new_dir("many");
	struct kvt *t = open_tier(dir, 0, KVT_AUTO, KVT_AUTO, 8);
	struct kvt_done d[40];
	uint32_t src[40][3], dst[40][3], i, k;
	kvt_file_id f[40];
	int seen[40] = { 0 };

	if (!t)
		return;
	for (i = 0; i < 40; i++)
		for (k = 0; k < 3; k++) {
			src[i][k] = i * 3 + k;
			dst[i][k] = 200 + i * 3 + k;
			fill(src[i][k], 1000 + i * 3 + k);
		}
	for (i = 0; i < 40; i++) {
		struct kvt_ident id = { .key = i, .tokens_hash = i, .n_tokens = 48 };

		CU_ASSERT_EQUAL(kvt_spill(t, &id, src[i], 3, (void *)(uintptr_t)i, &f[i]), 0);
	}
	CU_ASSERT_EQUAL_FATAL(wait_done(t, d, 40), 40);
	for (i = 0; i < 40; i++) {
		CU_ASSERT_EQUAL(d[i].status, 0);
		if (d[i].status)
			printf("(spill of file %u: %s) ", (unsigned)(uintptr_t)d[i].ctx,
			       strerror(-d[i].status));
		seen[(uintptr_t)d[i].ctx]++;
	}
	for (i = 0; i < 40; i++) {
		struct kvt_ident id = { .key = i, .tokens_hash = i, .n_tokens = 48 };

		CU_ASSERT_EQUAL(seen[i], 1);
		CU_ASSERT_EQUAL(kvt_restore(t, f[i], &id, 0, 3, dst[i], (void *)(uintptr_t)i), 0);
	}
	CU_ASSERT_EQUAL_FATAL(wait_done(t, d, 40), 40);
	for (i = 0; i < 40; i++) {
		CU_ASSERT_EQUAL(d[i].status, 0);
		seen[(uintptr_t)d[i].ctx]++;
	}
	for (i = 0; i < 40; i++) {
		CU_ASSERT_EQUAL(seen[i], 2);
		for (k = 0; k < 3; k++)
			CU_ASSERT(same(src[i][k], dst[i][k]));
		kvt_drop(t, f[i]);
	}
	kvt_close(t);
	CU_ASSERT_EQUAL(files_in(dir, NULL), 0);
	rmdir(dir);
	free(dir);
}

/* A file dropped while its spill is in flight: one completion, then the
 * file goes. */
static void test_drop_in_flight(void)
{
	char *dir = new_dir("drop");
	struct kvt *t = open_tier(dir, 0, KVT_AUTO, KVT_AUTO, 2);
	uint32_t src[256], i;
	struct kvt_done d[2];
	kvt_file_id f;

	if (!t)
		return;
	for (i = 0; i < 256; i++)
		src[i] = i;
	kvt_test_hold(t, 2);	/* two blocks written, then in flight until released */
	CU_ASSERT_EQUAL(kvt_spill(t, &ID, src, 256, NULL, &f), 0);
	kvt_drop(t, f);
	CU_ASSERT_EQUAL(kvt_reap(t, d, 2), 0);
	kvt_test_hold(t, UINT32_MAX);
	CU_ASSERT_EQUAL(wait_done(t, d, 1), 1);
	CU_ASSERT_EQUAL(d[0].status, -ECANCELED);
	usleep(100000);
	CU_ASSERT_EQUAL(kvt_reap(t, d, 2), 0);
	wait_files(t, dir, 0);
	CU_ASSERT_EQUAL(files_in(dir, NULL), 0);
	CU_ASSERT_EQUAL(kvt_bytes_used(t), 0);
	kvt_close(t);
	rmdir(dir);
	free(dir);
}

/* A process killed mid-spill (three of its 512 blocks written, the rest
 * held back) leaves a partial file; the next open removes it. */
static void test_killed_mid_spill(void)
{
	char *dir = new_dir("kill");
	int st, n;
	pid_t pid = fork();

	if (pid == 0) {
		uint32_t src[512], i;
		struct kvt *t = NULL;
		struct kvt_params p = { .dir = dir, .queue_depth = 1 };
		char err[256], name[1024];
		uint8_t *got = malloc(BLOCK);
		uint64_t hb;
		kvt_file_id f;
		int fd = -1;

		for (i = 0; i < 512; i++)
			src[i] = i;
		for (i = 0; i < 3; i++)
			fill(src[i], 7000 + i);
		if (!got || kvt_open(&p, &geom, base, ARENA, &t, err, sizeof(err)))
			_exit(3);
		hb = kvt_file_bytes(t, 512) - 512ull * BLOCK;
		kvt_test_hold(t, 3);
		if (kvt_spill(t, &ID, src, 512, NULL, &f))
			_exit(3);
		snprintf(name, sizeof(name), "%s/%016llx.kvspill", dir, (unsigned long long)f);
		/* until the third block is in the file (20 s at most) */
		for (i = 0; i < 2000; i++) {
			if (fd < 0)
				fd = open(name, O_RDONLY | O_CLOEXEC);
			if (fd >= 0 && pread(fd, got, BLOCK, (off_t)(hb + 2ull * BLOCK)) == BLOCK &&
			    !memcmp(got, blk(src[2]), BLOCK))
				break;
			usleep(10000);
		}
		if (i == 2000)
			_exit(5);
		raise(SIGKILL);
		_exit(4);
	}
	CU_ASSERT_FATAL(pid > 0);
	waitpid(pid, &st, 0);
	CU_ASSERT(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	n = files_in(dir, NULL);
	CU_ASSERT_EQUAL(n, 1);		/* the partial file */
	{
		struct kvt *t = open_tier(dir, 0, KVT_AUTO, KVT_AUTO, 0);
		struct kvt_stats s;

		if (t) {
			kvt_get_stats(t, &s);
			CU_ASSERT_EQUAL(s.cleaned_at_open, (uint64_t)n);
			CU_ASSERT_EQUAL(files_in(dir, NULL), 0);
			kvt_close(t);
		}
	}
	fprintf(stderr, "(killed mid-spill: %d stray file(s) cleaned) ", n);
	{
		char p[1024];

		snprintf(p, sizeof(p), "%s/.lock", dir);
		unlink(p);
	}
	rmdir(dir);
	free(dir);
}

/* ---- economics -------------------------------------------------------------- */

static void test_costs(void)
{
	struct kvt_costs c;

	kvt_costs_init(&c);
	kvt_costs_add_write(&c, 1000, 1000);	/* too small: ignored */
	CU_ASSERT_EQUAL(c.n_write, 0);
	kvt_costs_add_write(&c, 1ull << 30, 1000000000ull);
	CU_ASSERT_DOUBLE_EQUAL(c.write_bps, 1073741824.0, 1);
	kvt_costs_add_write(&c, 1ull << 29, 1000000000ull);
	CU_ASSERT_DOUBLE_EQUAL(c.write_bps, 0.75 * 1073741824.0 + 0.25 * 536870912.0, 1);
	kvt_costs_add_recompute(&c, 1, 1000);	/* a decode step: ignored */
	CU_ASSERT_EQUAL(c.n_recompute, 0);
	kvt_costs_add_recompute(&c, 1000, 2000000000ull);
	CU_ASSERT_DOUBLE_EQUAL(c.recompute_tps, 500, 1e-9);
	/* before a read is measured: 200 MB/s */
	CU_ASSERT_EQUAL(kvt_restore_us(&c, 200000000ull), 1000000);
	kvt_costs_add_read(&c, 2000000000ull, 1000000000ull);
	CU_ASSERT_EQUAL(kvt_restore_us(&c, 2000000000ull), 1000000);
}

static void test_decide(void)
{
	/* 1 GB/s both ways, 500 tokens/s: a 2k-token session of 72 MiB */
	struct kvt_costs c = { .write_bps = 1e9, .read_bps = 1e9, .recompute_tps = 500,
			       .n_write = 1, .n_read = 1, .n_recompute = 1 };
	struct kvt_decision_in in = { .kv_bytes = 72ull << 20, .kv_tokens = 2048,
				      .predicted_wait_us = 5000000, .margin_us = 50000,
				      .pressure = 1, .disk_ok = 1 };
	struct kvt_decision o;

	kvt_decide(&c, &in, &o);
	CU_ASSERT_EQUAL(o.choice, KVT_SPILL);
	CU_ASSERT_EQUAL(o.spill_us, 75497);
	CU_ASSERT_EQUAL(o.restore_us, 75497);
	CU_ASSERT_EQUAL(o.recompute_us, 4096000);
	CU_ASSERT_DOUBLE_EQUAL(o.freed_byte_s,
			       (double)(72ull << 20) * (5000000 - 75497 * 2 - 50000) / 1e6, 1);
	/* no pressure: keep */
	in.pressure = 0;
	kvt_decide(&c, &in, &o);
	CU_ASSERT_EQUAL(o.choice, KVT_KEEP);
	CU_ASSERT_EQUAL(o.freed_byte_s, 0);
	in.pressure = 1;
	/* a 100 ms wait: too short to write and read 72 MiB back */
	in.predicted_wait_us = 100000;
	kvt_decide(&c, &in, &o);
	CU_ASSERT_EQUAL(o.choice, KVT_KEEP);
	/* no disk: discard when the wait outlasts the recompute */
	in.predicted_wait_us = 5000000;
	in.disk_ok = 0;
	kvt_decide(&c, &in, &o);
	CU_ASSERT_EQUAL(o.choice, KVT_DISCARD);
	in.predicted_wait_us = 3000000;
	kvt_decide(&c, &in, &o);
	CU_ASSERT_EQUAL(o.choice, KVT_KEEP);
	/* recompute cheaper than the disk (a tiny context on a slow disk) */
	in.disk_ok = 1;
	in.kv_tokens = 16;
	c.read_bps = 1e6;
	in.predicted_wait_us = 200000000;
	kvt_decide(&c, &in, &o);
	CU_ASSERT_EQUAL(o.choice, KVT_DISCARD);
	/* recompute never measured: never discarded blind */
	c.recompute_tps = 0;
	c.read_bps = 1e9;
	in.kv_tokens = 2048;
	in.disk_ok = 0;
	kvt_decide(&c, &in, &o);
	CU_ASSERT_EQUAL(o.choice, KVT_KEEP);
	CU_ASSERT_STRING_EQUAL(kvt_choice_name(KVT_DISCARD), "discard");
}

/* A tool class whose waits are uniform on [0, 1 s]. */
static double uniform_1s(void *ctx, uint64_t h)
{
	(void)ctx;
	return h >= 1000000 ? 0 : 1 - (double)h / 1e6;
}

static double unknown(void *ctx, uint64_t h)
{
	(void)ctx;
	(void)h;
	return -1;
}

static void test_decide_distribution(void)
{
	struct kvt_costs c = { .write_bps = 1e9, .read_bps = 1e9, .recompute_tps = 500,
			       .n_write = 1, .n_read = 1, .n_recompute = 1 };
	/* 10 MB: 10 ms out, 10 ms back, 10 ms margin: 30 ms away */
	struct kvt_decision_in in = { .kv_bytes = 10000000, .kv_tokens = 1000,
				      .predicted_wait_us = 500000, .margin_us = 10000,
				      .pressure = 1, .disk_ok = 1, .survival = uniform_1s };
	struct kvt_decision o;

	/* P(T > 30 ms) = 0.97: spill (1 in 33 would stall) */
	kvt_decide(&c, &in, &o);
	CU_ASSERT_EQUAL(o.choice, KVT_SPILL);
	CU_ASSERT_DOUBLE_EQUAL(o.p_outlast, 0.97, 1e-9);
	/* 100 MB: 210 ms away, P = 0.79: the mean (500 ms) would spill, the
	 * distribution keeps it (1 in 5 would stall) */
	in.kv_bytes = 100000000;
	kvt_decide(&c, &in, &o);
	CU_ASSERT_EQUAL(o.choice, KVT_KEEP);
	CU_ASSERT_DOUBLE_EQUAL(o.p_outlast, 0.79, 1e-9);
	/* a looser stall target takes it */
	in.max_stall = 0.25;
	kvt_decide(&c, &in, &o);
	CU_ASSERT_EQUAL(o.choice, KVT_SPILL);
	/* a class without data: the mean decides */
	in.max_stall = 0;
	in.survival = unknown;
	kvt_decide(&c, &in, &o);
	CU_ASSERT_EQUAL(o.choice, KVT_SPILL);
	CU_ASSERT_DOUBLE_EQUAL(o.p_outlast, -1, 1e-9);
}

static void test_prefetch(void)
{
	struct kvt_costs c = { .read_bps = 1e9, .n_read = 1 };

	/* 100 MB at 1 GB/s = 100 ms, margin 50 ms: 850 ms into a 1 s wait */
	CU_ASSERT_EQUAL(kvt_prefetch_at_ns(&c, 5000000000ull, 1000000, 100000000, 50000),
			5000000000ull + 850000000ull);
	/* a wait shorter than the restore: at once */
	CU_ASSERT_EQUAL(kvt_prefetch_at_ns(&c, 7, 100000, 100000000, 50000), 7);
}

int main(int argc, char **argv)
{
	struct kva_arena_params p = { .size = sizeof(p), .bytes = ARENA, .block_size = BLOCK,
				      .numa_node = KVA_NUMA_ANY, .tenant_id = KVA_TENANT_SELF,
				      .name = "tier-test", .flags = KVA_ARENA_MLOCK_TRY };
	struct kva_arena_info ai = { .size = sizeof(ai) };
	CU_pSuite s;
	unsigned int fails;
	int rc;

	if (argc != 2) {
		fprintf(stderr, "usage: test_tier WORKDIR\n");
		return 2;
	}
	workdir = realpath(argv[1], NULL);
	if (!workdir && mkdir(argv[1], 0700) == 0)
		workdir = realpath(argv[1], NULL);
	if (!workdir) {
		perror(argv[1]);
		return 2;
	}
	/* KVT_TEST_BACKEND=kernel: over kvarena.ko's mapping (the guests) */
	rc = kva_open(getenv("KVT_TEST_BACKEND") && !strcmp(getenv("KVT_TEST_BACKEND"), "kernel") ?
		      KVA_BACKEND_KERNEL : KVA_BACKEND_MEMFD, &dev);
	if (!rc)
		rc = kva_arena_new(dev, &p, &arena);
	if (!rc)
		rc = kva_arena_map(arena, (void **)&base);
	if (!rc)
		rc = kva_arena_get_info(arena, &ai);
	if (rc) {
		fprintf(stderr, "arena: %s\n", strerror(-rc));
		return 1;
	}
	geom.block_size = BLOCK;
	geom.blocks_per_page = ai.blocks_per_page;
	geom.blocks_total = ai.blocks_total;
	geom.block_tokens = 16;
	geom.shape_id = 0xabcdef;

	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	s = CU_add_suite("tier", NULL, NULL);
	CU_add_test(s, "roundtrip O_DIRECT", test_roundtrip_direct);
	CU_add_test(s, "roundtrip O_DIRECT, registered buffers", test_roundtrip_direct_fixed);
	CU_add_test(s, "roundtrip buffered", test_roundtrip_buffered);
	CU_add_test(s, "roundtrip buffered, short reads and writes", test_roundtrip_pieces);
	CU_add_test(s, "roundtrip buffered, transfers refused for now", test_roundtrip_again);
	CU_add_test(s, "damage: bit flips, header, foreign, truncation", test_damage);
	CU_add_test(s, "cap: refused, oldest first, bytes on disk", test_cap);
	CU_add_test(s, "open: clean, lock, permissions", test_open_clean_lock);
	CU_add_test(s, "bad requests", test_bad_requests);
	CU_add_test(s, "40 files in flight", test_many_in_flight);
	CU_add_test(s, "drop while spilling", test_drop_in_flight);
	CU_add_test(s, "killed mid-spill, cleaned at open", test_killed_mid_spill);
	CU_add_test(s, "costs: running means", test_costs);
	CU_add_test(s, "keep / spill / discard", test_decide);
	CU_add_test(s, "keep / spill by the wait's distribution", test_decide_distribution);
	CU_add_test(s, "prefetch time", test_prefetch);
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	fails = CU_get_number_of_failures();
	CU_cleanup_registry();
	kva_arena_destroy(arena);
	kva_close(dev);
	free((void *)workdir);
	return fails ? 1 : 0;
}
