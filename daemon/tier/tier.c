// SPDX-License-Identifier: MIT
/*
 * tier.c - the disk tier: a directory of spill files under a byte cap and
 * the one thread that moves KV blocks between the arena and those files
 * with io_uring.
 *
 * The owner's calls (kvt_spill, kvt_restore, kvt_drop, kvt_reap...) only
 * touch the file table and two queues under t->lock: requests to the I/O
 * thread, completions back (an eventfd says when there are some). The
 * thread opens files, hashes blocks (XXH3 of each block's bytes, read in
 * the arena's own mapping), and keeps up to queue_depth block reads or
 * writes in flight, restores before spills (a restore is someone waiting,
 * a spill is memory that can wait). Blocks go straight between the arena
 * mapping and the file with O_DIRECT where the file system and the
 * mapping allow it (probed at open, and again when a transfer is refused:
 * then the operation starts over buffered), through registered buffers
 * over the whole mapping when the kernel takes them.
 *
 * Not here: which sessions to spill or when (cost.c and the owner), the
 * file layout (spillfile.c).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "kvtier.h"
#include "spillfile.h"

#define SUFFIX		".kvspill"
#define PROBE_NAME	".probe.kvspill"
#define UD_WAKE		1ull
#define OP_UNLINK	100
#define FIXED_CHUNK	(1ull << 30)	/* io_uring's largest registered buffer */
#define MAX_FIXED	1024
#define KVT_IO_AGAIN	8	/* -EAGAIN or -EINTR: how often an I/O goes again */

enum fstate { F_WRITING = 0, F_READY, F_FAILED };

struct fent {
	kvt_file_id id;
	void *owner;			/* kvt_set_owner, else the spill's ctx */
	struct kvt_ident ident;
	uint32_t n_blocks;
	uint64_t bytes;			/* counted against the cap */
	enum fstate state;
	int busy;			/* a spill or restore in flight */
	int dropped;			/* the owner forgot it: remove when idle */
	int removing;			/* an unlink is queued */
	struct fent *older, *newer;	/* age list, oldest at t->oldest */
	struct fent *hnext;
};

struct op {
	int kind;			/* KVT_OP_SPILL, KVT_OP_RESTORE, OP_UNLINK */
	struct fent *f;
	kvt_file_id id;
	void *ctx;
	struct kvt_ident ident;		/* spill: recorded; restore: expected */
	uint32_t first, n;
	uint32_t *blocks;
	uint64_t submit_ns, start_ns;
	/* the I/O thread's */
	int started;
	int fd;
	int direct;
	void *hdr;
	size_t hb;
	int hdr_state;			/* 0 none, 1 in flight, 2 done */
	uint32_t issued, completed, inflight;
	int8_t *res;			/* per block: 0 pending, 1 ok, else -errno */
	int status;			/* first error (spill) */
	int redo_buffered;		/* O_DIRECT refused: start over buffered */
	uint64_t bytes;
	struct op *next;
};

struct io {
	struct op *op;
	uint32_t idx;			/* block, or UINT32_MAX for the header */
	uint32_t done;			/* bytes of it moved by earlier completions */
	uint32_t again;			/* times it went again after -EAGAIN/-EINTR */
	struct io *next_free;
};

struct kvt {
	struct kvt_geom g;
	uint8_t *base;
	uint64_t arena_bytes;
	int dirfd, lockfd;
	char dir[512];
	uint64_t cap;
	uint32_t qd;
	enum kvt_mode direct_mode;
	int direct;			/* O_DIRECT in use now */
	int fixed;			/* registered buffers in use */
	char describe[1024];

	struct io_uring ring;
	int ring_ok;
	pthread_t thread;
	int thread_ok;
	int req_efd, done_efd;
	uint64_t wake_buf;

	pthread_mutex_t lock;
	/* under lock */
	struct fent **buckets;
	uint32_t n_buckets, n_files;
	struct fent *oldest, *newest;
	kvt_file_id next_id;
	uint64_t used;
	struct op *req_head, *req_tail;
	struct kvt_done *done;
	uint32_t n_done, cap_done;
	int stopping;
	uint32_t busy_ops;		/* spills and restores not yet finished */
	pthread_cond_t idle;		/* busy_ops reached 0 */
	struct kvt_stats st;
#ifdef KVT_TEST_HOOKS
	uint32_t hold_ios;		/* kvt_test_hold(): I/Os left to issue */
	uint32_t piece;			/* kvt_test_piece(): the most one transfer moves */
	uint32_t eagain;		/* kvt_test_eagain(): completions to read as -EAGAIN */
#endif

	/* the thread's own */
	struct op *active;		/* started or waiting, in arrival order */
	struct io *ios, *free_ios;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t kvt_tokens_hash(const int32_t *tokens, uint32_t n)
{
	return XXH3_64bits(tokens, (size_t)n * sizeof(*tokens));
}

uint64_t kvt_tokens_chain(uint64_t prev, const int32_t *tokens, uint32_t n)
{
	return XXH3_64bits_withSeed(tokens, (size_t)n * sizeof(*tokens), prev);
}

static uint8_t *block_ptr(const struct kvt *t, uint32_t id)
{
	return t->base + (uint64_t)(id / t->g.blocks_per_page) * (2ull << 20) +
	       (uint64_t)(id % t->g.blocks_per_page) * t->g.block_size;
}

static void file_name(char *buf, size_t len, kvt_file_id id)
{
	snprintf(buf, len, "%016llx" SUFFIX, (unsigned long long)id);
}

uint64_t kvt_file_bytes(const struct kvt *t, uint32_t n_blocks)
{
	return kvt_sf_header_bytes(n_blocks) + (uint64_t)n_blocks * t->g.block_size;
}

/* ---- the file table (under lock) ------------------------------------------ */

static struct fent *ftab_find(struct kvt *t, kvt_file_id id)
{
	struct fent *f;

	for (f = t->buckets[id & (t->n_buckets - 1)]; f; f = f->hnext)
		if (f->id == id)
			return f;
	return NULL;
}

static int ftab_grow(struct kvt *t)
{
	uint32_t nb = t->n_buckets * 2, i;
	struct fent **b = calloc(nb, sizeof(*b));

	if (!b)
		return -ENOMEM;
	for (i = 0; i < t->n_buckets; i++) {
		struct fent *f, *next;

		for (f = t->buckets[i]; f; f = next) {
			next = f->hnext;
			f->hnext = b[f->id & (nb - 1)];
			b[f->id & (nb - 1)] = f;
		}
	}
	free(t->buckets);
	t->buckets = b;
	t->n_buckets = nb;
	return 0;
}

static void ftab_add(struct kvt *t, struct fent *f)
{
	if (t->n_files >= t->n_buckets)
		(void)ftab_grow(t);	/* longer chains if it fails */
	f->hnext = t->buckets[f->id & (t->n_buckets - 1)];
	t->buckets[f->id & (t->n_buckets - 1)] = f;
	f->older = t->newest;
	f->newer = NULL;
	if (t->newest)
		t->newest->newer = f;
	else
		t->oldest = f;
	t->newest = f;
	t->n_files++;
}

static void ftab_del(struct kvt *t, struct fent *f)
{
	struct fent **pp = &t->buckets[f->id & (t->n_buckets - 1)];

	while (*pp && *pp != f)
		pp = &(*pp)->hnext;
	if (*pp)
		*pp = f->hnext;
	if (f->older)
		f->older->newer = f->newer;
	else
		t->oldest = f->newer;
	if (f->newer)
		f->newer->older = f->older;
	else
		t->newest = f->older;
	t->n_files--;
}

/* ---- queues ---------------------------------------------------------------- */

static void efd_signal(int fd)
{
	uint64_t one = 1;

	if (write(fd, &one, sizeof(one)) < 0)
		return;		/* saturated: a wake-up is pending anyway */
}

static void req_push(struct kvt *t, struct op *o)
{
	o->next = NULL;
	if (t->req_tail)
		t->req_tail->next = o;
	else
		t->req_head = o;
	t->req_tail = o;
	efd_signal(t->req_efd);
}

static struct op *op_new(int kind, struct fent *f)
{
	struct op *o = calloc(1, sizeof(*o));

	if (!o)
		return NULL;
	o->kind = kind;
	o->f = f;
	o->id = f->id;
	o->fd = -1;
	o->submit_ns = now_ns();
	return o;
}

static void op_free(struct op *o)
{
	if (!o)
		return;
	if (o->fd >= 0)
		close(o->fd);
	free(o->hdr);
	free(o->res);
	free(o->blocks);
	free(o);
}

/* Queue the file's removal (under lock); the unlink happens on the thread. */
static void remove_file(struct kvt *t, struct fent *f)
{
	struct op *o;

	if (f->removing)
		return;
	o = op_new(OP_UNLINK, f);
	if (!o) {
		/* no memory for the request: remove it here, the slow way */
		char name[64];

		file_name(name, sizeof(name), f->id);
		unlinkat(t->dirfd, name, 0);
		t->used -= f->bytes;
		t->st.removed++;
		ftab_del(t, f);
		free(f);
		return;
	}
	f->removing = 1;
	/* its bytes count no more: the unlink is queued before any later
	 * spill, and the thread takes requests in order, so a new file is
	 * never created before this one is gone */
	t->used -= f->bytes;
	f->bytes = 0;
	req_push(t, o);
}

/* ---- owner's API ----------------------------------------------------------- */

int kvt_spill(struct kvt *t, const struct kvt_ident *id, const uint32_t *blocks,
	      uint32_t n_blocks, void *ctx, kvt_file_id *file)
{
	uint64_t bytes;
	struct fent *f;
	struct op *o;
	uint32_t i;

	if (!n_blocks || n_blocks > KVT_SF_MAX_BLOCKS)
		return -EINVAL;
	for (i = 0; i < n_blocks; i++)
		if (blocks[i] >= t->g.blocks_total)
			return -EINVAL;
	bytes = kvt_file_bytes(t, n_blocks);
	f = calloc(1, sizeof(*f));
	o = f ? op_new(KVT_OP_SPILL, f) : NULL;
	if (o)
		o->blocks = malloc((size_t)n_blocks * sizeof(*blocks));
	if (!f || !o || !o->blocks) {
		free(f);
		op_free(o);
		return -ENOMEM;
	}
	memcpy(o->blocks, blocks, (size_t)n_blocks * sizeof(*blocks));
	o->n = n_blocks;
	o->ctx = ctx;
	o->ident = *id;
	f->owner = ctx;
	f->ident = *id;
	f->n_blocks = n_blocks;
	f->bytes = bytes;
	f->state = F_WRITING;
	f->busy = 1;
	pthread_mutex_lock(&t->lock);
	if (t->stopping || (t->cap && t->used + bytes > t->cap)) {
		int rc = t->stopping ? -ESHUTDOWN : -ENOSPC;

		pthread_mutex_unlock(&t->lock);
		free(f);
		op_free(o);
		return rc;
	}
	f->id = ++t->next_id;
	o->id = f->id;
	t->used += bytes;
	t->busy_ops++;
	ftab_add(t, f);
	req_push(t, o);
	pthread_mutex_unlock(&t->lock);
	*file = f->id;
	return 0;
}

int kvt_restore(struct kvt *t, kvt_file_id file, const struct kvt_ident *id,
		uint32_t first, uint32_t n, const uint32_t *dst, void *ctx)
{
	struct fent *f;
	struct op *o;
	uint32_t i;
	int rc = 0;

	if (!n)
		return -EINVAL;
	for (i = 0; i < n; i++)
		if (dst[i] >= t->g.blocks_total)
			return -EINVAL;
	o = calloc(1, sizeof(*o));
	if (!o || !(o->blocks = malloc((size_t)n * sizeof(*dst)))) {
		free(o);
		return -ENOMEM;
	}
	memcpy(o->blocks, dst, (size_t)n * sizeof(*dst));
	o->kind = KVT_OP_RESTORE;
	o->fd = -1;
	o->first = first;
	o->n = n;
	o->ctx = ctx;
	o->ident = *id;
	o->submit_ns = now_ns();
	pthread_mutex_lock(&t->lock);
	f = ftab_find(t, file);
	if (t->stopping)
		rc = -ESHUTDOWN;
	else if (!f || f->dropped || f->removing)
		rc = -ENOENT;
	else if (f->busy)
		rc = -EBUSY;
	else if (f->state != F_READY)
		rc = -ENOENT;		/* a spill that failed holds nothing */
	else if (first > f->n_blocks || n > f->n_blocks - first)
		rc = -EINVAL;
	if (!rc) {
		o->f = f;
		o->id = file;
		f->busy = 1;
		t->busy_ops++;
		req_push(t, o);
	}
	pthread_mutex_unlock(&t->lock);
	if (rc)
		op_free(o);
	return rc;
}

void kvt_drop(struct kvt *t, kvt_file_id file)
{
	struct fent *f;

	pthread_mutex_lock(&t->lock);
	f = ftab_find(t, file);
	if (f && !f->dropped) {
		f->dropped = 1;
		if (!f->busy)
			remove_file(t, f);
	}
	pthread_mutex_unlock(&t->lock);
}

void kvt_set_owner(struct kvt *t, kvt_file_id file, void *owner)
{
	struct fent *f;

	pthread_mutex_lock(&t->lock);
	f = ftab_find(t, file);
	if (f)
		f->owner = owner;
	pthread_mutex_unlock(&t->lock);
}

kvt_file_id kvt_oldest(struct kvt *t, void **owner)
{
	kvt_file_id id = 0;
	struct fent *f;

	pthread_mutex_lock(&t->lock);
	for (f = t->oldest; f; f = f->newer)
		if (!f->busy && !f->dropped && !f->removing && f->state == F_READY) {
			id = f->id;
			if (owner)
				*owner = f->owner;
			break;
		}
	pthread_mutex_unlock(&t->lock);
	return id;
}

int kvt_drain(struct kvt *t, int timeout_ms)
{
	struct timespec dl;
	int rc = 0;

	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += timeout_ms / 1000;
	dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&t->lock);
	t->stopping = 1;	/* no new operations */
	efd_signal(t->req_efd);
	while (t->busy_ops && !rc)
		rc = pthread_cond_timedwait(&t->idle, &t->lock, &dl) == ETIMEDOUT ? -ETIMEDOUT : 0;
	pthread_mutex_unlock(&t->lock);
	return rc;
}

uint64_t kvt_bytes_used(const struct kvt *t)
{
	uint64_t u;

	pthread_mutex_lock((pthread_mutex_t *)&t->lock);
	u = t->used;
	pthread_mutex_unlock((pthread_mutex_t *)&t->lock);
	return u;
}

uint64_t kvt_cap_bytes(const struct kvt *t)
{
	return t->cap;
}

int kvt_event_fd(const struct kvt *t)
{
	return t->done_efd;
}

const char *kvt_describe(const struct kvt *t)
{
	return t->describe;
}

int kvt_reap(struct kvt *t, struct kvt_done *out, unsigned int max)
{
	uint64_t cnt;
	unsigned int n;

	(void)!read(t->done_efd, &cnt, sizeof(cnt));
	pthread_mutex_lock(&t->lock);
	n = t->n_done < max ? t->n_done : max;
	if (n) {
		memcpy(out, t->done, n * sizeof(*out));
		memmove(t->done, t->done + n, (t->n_done - n) * sizeof(*out));
		t->n_done -= n;
	}
	if (t->n_done)
		efd_signal(t->done_efd);	/* the rest at the next reap */
	pthread_mutex_unlock(&t->lock);
	return (int)n;
}

void kvt_get_stats(const struct kvt *t, struct kvt_stats *s)
{
	pthread_mutex_lock((pthread_mutex_t *)&t->lock);
	*s = t->st;
	s->files = t->n_files;
	pthread_mutex_unlock((pthread_mutex_t *)&t->lock);
}

/* ---- the I/O thread ---------------------------------------------------------- */

static int restart_able(const struct kvt *t, const struct op *o, int res)
{
	/* what O_DIRECT refuses: the file system (EINVAL) or the mapping
	 * (EFAULT: pages it cannot pin, EOPNOTSUPP) */
	return o->direct && t->direct_mode == KVT_AUTO &&
	       (res == -EINVAL || res == -EFAULT || res == -EOPNOTSUPP);
}

static int open_file(struct kvt *t, struct op *o)
{
	char name[64];
	int flags = O_CLOEXEC | O_NOFOLLOW;

	file_name(name, sizeof(name), o->id);
	if (o->kind == KVT_OP_SPILL)
		flags |= O_WRONLY | O_CREAT | O_TRUNC;
	else
		flags |= O_RDONLY;
	o->direct = t->direct;
	if (o->fd >= 0)
		close(o->fd);
	o->fd = openat(t->dirfd, name, flags | (o->direct ? O_DIRECT : 0), 0600);
	if (o->fd < 0 && o->direct && errno == EINVAL && t->direct_mode == KVT_AUTO) {
		o->direct = 0;
		o->fd = openat(t->dirfd, name, flags, 0600);
	}
	if (o->fd < 0)
		/* a restore's file gone from under us: as truncated to nothing */
		return errno == ENOENT && o->kind == KVT_OP_RESTORE ? -ENODATA : -errno;
	if (o->kind == KVT_OP_SPILL) {
		/* the space now: a full disk fails the spill before any I/O */
		int rc = posix_fallocate(o->fd, 0, (off_t)(o->hb + (uint64_t)o->n * t->g.block_size));

		if (rc && rc != EOPNOTSUPP && rc != EINVAL)
			return -rc;
	}
	return 0;
}

static int op_start(struct kvt *t, struct op *o)
{
	int rc;

	o->started = 1;
	o->start_ns = now_ns();
	o->hb = kvt_sf_header_bytes(o->kind == KVT_OP_SPILL ? o->n : o->f->n_blocks);
	if (!o->hdr && posix_memalign(&o->hdr, KVT_SF_ALIGN, o->hb))
		return -ENOMEM;
	if (!o->res && !(o->res = calloc(o->n, 1)))
		return -ENOMEM;
	rc = open_file(t, o);
	if (rc)
		return rc;
	if (o->kind == KVT_OP_SPILL)
		kvt_sf_header_init(o->hdr, &o->ident, t->g.shape_id, t->g.block_size, o->n);
	return 0;
}

/* Start the operation over, buffered: O_DIRECT was refused. */
static void op_redo_buffered(struct kvt *t, struct op *o)
{
	if (t->direct) {
		t->direct = 0;
		pthread_mutex_lock(&t->lock);
		t->st.direct_fallbacks++;
		pthread_mutex_unlock(&t->lock);
		snprintf(t->describe + strlen(t->describe), sizeof(t->describe) - strlen(t->describe),
			 " (O_DIRECT refused at run time: buffered since)");
	}
	o->redo_buffered = 0;
	o->issued = o->completed = 0;
	o->hdr_state = 0;
	o->status = 0;
	o->bytes = 0;
	memset(o->res, 0, o->n);
	o->status = open_file(t, o);
}

static struct io_uring_sqe *get_sqe(struct kvt *t)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&t->ring);

	if (!sqe) {
		io_uring_submit(&t->ring);
		sqe = io_uring_get_sqe(&t->ring);
	}
	return sqe;
}

/* The I/O's bytes from io->done on: a block's, or the header's. */
static void prep_io(struct kvt *t, struct op *o, struct io *io)
{
	struct io_uring_sqe *sqe = get_sqe(t);
	int hdr = io->idx == UINT32_MAX, w = o->kind == KVT_OP_SPILL;
	uint32_t fidx = w ? io->idx : o->first + io->idx;
	uint8_t *p = hdr ? o->hdr : block_ptr(t, o->blocks[io->idx]);
	unsigned int len = hdr ? (unsigned int)o->hb : (unsigned int)t->g.block_size;
	off_t off = hdr ? 0 : (off_t)(o->hb + (uint64_t)fidx * t->g.block_size);

	p += io->done;
	len -= io->done;
	off += io->done;
#ifdef KVT_TEST_HOOKS
	pthread_mutex_lock(&t->lock);
	if (t->piece && len > t->piece)
		len = t->piece;
	pthread_mutex_unlock(&t->lock);
#endif
	if (t->fixed && !hdr) {
		int bi = (int)((uint64_t)(p - io->done - t->base) / FIXED_CHUNK);

		if (w)
			io_uring_prep_write_fixed(sqe, o->fd, p, len, off, bi);
		else
			io_uring_prep_read_fixed(sqe, o->fd, p, len, off, bi);
	} else if (w) {
		io_uring_prep_write(sqe, o->fd, p, len, off);
	} else {
		io_uring_prep_read(sqe, o->fd, p, len, off);
	}
	io_uring_sqe_set_data(sqe, io);
}

static void prep_block(struct kvt *t, struct op *o, struct io *io, uint32_t i)
{
	io->op = o;
	io->idx = i;
	io->done = 0;
	io->again = 0;
	prep_io(t, o, io);
	o->inflight++;
}

static void prep_header(struct kvt *t, struct op *o, struct io *io)
{
	io->op = o;
	io->idx = UINT32_MAX;
	io->done = 0;
	io->again = 0;
	prep_io(t, o, io);
	o->inflight++;
	o->hdr_state = 1;
}

static struct io *io_get(struct kvt *t)
{
	struct io *io = t->free_ios;

	if (io)
		t->free_ios = io->next_free;
	return io;
}

static void io_put(struct kvt *t, struct io *io)
{
	io->next_free = t->free_ios;
	t->free_ios = io;
}

#ifdef KVT_TEST_HOOKS
/* The tests' hold (kvt_test_hold): one more block or header I/O allowed? */
static int may_issue(struct kvt *t)
{
	int ok;

	pthread_mutex_lock(&t->lock);
	ok = t->hold_ios != 0;
	if (ok && t->hold_ios != UINT32_MAX)
		t->hold_ios--;
	pthread_mutex_unlock(&t->lock);
	return ok;
}

void kvt_test_eagain(struct kvt *t, uint32_t n)
{
	pthread_mutex_lock(&t->lock);
	t->eagain = n;
	pthread_mutex_unlock(&t->lock);
}

void kvt_test_piece(struct kvt *t, uint32_t bytes)
{
	pthread_mutex_lock(&t->lock);
	t->piece = bytes;
	pthread_mutex_unlock(&t->lock);
}

void kvt_test_hold(struct kvt *t, uint32_t ios)
{
	pthread_mutex_lock(&t->lock);
	t->hold_ios = ios;
	pthread_mutex_unlock(&t->lock);
	efd_signal(t->req_efd);
}
#else
static inline int may_issue(struct kvt *t)
{
	(void)t;
	return 1;
}
#endif

/* A free I/O slot, if the operation may issue one now. */
static struct io *io_take(struct kvt *t)
{
	struct io *io = io_get(t);

	if (io && !may_issue(t)) {
		io_put(t, io);
		io = NULL;
	}
	return io;
}

/* Issue what the operation can issue now; 1 when it has finished. */
static int op_issue(struct kvt *t, struct op *o)
{
	struct kvt_sf_header *h;
	struct io *io;

	if (!o->started) {
		int rc = op_start(t, o);

		if (rc) {
			o->status = rc;
			return 1;
		}
	}
	if (o->redo_buffered) {
		if (o->inflight)
			return 0;
		op_redo_buffered(t, o);
	}
	h = o->hdr;
	if (o->status && !o->inflight && o->kind == KVT_OP_SPILL)
		return 1;
	if (o->kind == KVT_OP_SPILL) {
		while (!o->status && o->issued < o->n && (io = io_take(t))) {
			const uint8_t *p = block_ptr(t, o->blocks[o->issued]);

			/* the sum of exactly what this write sends: the owner
			 * keeps the block unwritten until the completion */
			h->block_sum[o->issued] = kvt_sf_block_sum(p, t->g.block_size,
								   o->ident.key, o->issued);
			prep_block(t, o, io, o->issued++);
			/* the disk works on this block while the next is hashed */
			io_uring_submit(&t->ring);
		}
		if (!o->status && o->completed == o->n && o->hdr_state == 0 && (io = io_take(t))) {
			/* the header last: a file is only whole once it is written */
			kvt_sf_header_seal(o->hdr);
			prep_header(t, o, io);
		}
		return o->hdr_state == 2 || (o->status && !o->inflight);
	}
	/* restore: the header first, checked before any block is read */
	if (o->hdr_state == 0) {
		if (!(io = io_take(t)))
			return 0;
		prep_header(t, o, io);
		return 0;
	}
	if (o->hdr_state == 1)
		return 0;
	if (o->status)
		return !o->inflight;
	while (o->issued < o->n && (io = io_take(t)))
		prep_block(t, o, io, o->issued++);
	return o->completed == o->n;
}

static void on_cqe(struct kvt *t, struct io *io, int res)
{
	struct op *o = io->op;
	uint32_t i = io->idx;
	size_t want = i == UINT32_MAX ? o->hb : t->g.block_size;

#ifdef KVT_TEST_HOOKS
	pthread_mutex_lock(&t->lock);
	if (t->eagain && res >= 0) {
		t->eagain--;
		res = -EAGAIN;
	}
	pthread_mutex_unlock(&t->lock);
#endif
	/* a transfer the kernel refused for now (io-wq out of workers, a
	 * signal): it goes again, a few times */
	if ((res == -EAGAIN || res == -EINTR) && io->again < KVT_IO_AGAIN) {
		io->again++;
		prep_io(t, o, io);
		return;
	}
	/* a short read or write that moved bytes: the rest goes again (a
	 * write may stop short of what was asked without the disk being
	 * full; a read short of the file's end likewise); only one that
	 * moves nothing, or fails, ends the I/O short */
	if (res > 0 && io->done + (size_t)res < want) {
		io->done += (uint32_t)res;
		prep_io(t, o, io);
		return;
	}
	if (res >= 0)
		res += (int)io->done;
	io_put(t, io);
	o->inflight--;
	if (res < 0 && restart_able(t, o, res)) {
		o->redo_buffered = 1;
		return;
	}
	if (i == UINT32_MAX) {
		o->hdr_state = 2;
		if (res > 0)
			o->bytes += (uint64_t)res;
		if (res < 0)
			o->status = res;
		else if ((size_t)res < want)
			o->status = o->kind == KVT_OP_SPILL ? -EIO : -ENODATA;
		else if (o->kind == KVT_OP_RESTORE)
			o->status = kvt_sf_header_check(o->hdr, o->hb, &o->ident,
							t->g.shape_id, t->g.block_size);
		if (!o->status && o->kind == KVT_OP_RESTORE &&
		    ((struct kvt_sf_header *)o->hdr)->n_blocks != o->f->n_blocks)
			o->status = -ESTALE;
		return;
	}
	o->completed++;
	if (res >= 0)
		o->bytes += (uint64_t)res;
	if (o->kind == KVT_OP_SPILL) {
		if (!o->status && res < 0)
			o->status = res;
		else if (!o->status && (size_t)res < want)
			o->status = -EIO;	/* short write: the disk is full */
		return;
	}
	if (res < 0) {
		o->res[i] = (int8_t)(res < -127 ? -EIO : res);
	} else if ((size_t)res < want) {
		o->res[i] = -ENODATA;		/* the file ends early: truncated */
	} else {
		const struct kvt_sf_header *h = o->hdr;
		uint64_t sum = kvt_sf_block_sum(block_ptr(t, o->blocks[i]), t->g.block_size,
						h->key, o->first + i);

		o->res[i] = sum == h->block_sum[o->first + i] ? 1 : -EBADMSG;
	}
}

/* Post the operation's completion (and remove a dropped file). */
static void op_finish(struct kvt *t, struct op *o)
{
	struct kvt_done d = { 0 };
	struct fent *f = o->f;
	uint32_t i;

	if (o->fd >= 0) {
		close(o->fd);
		o->fd = -1;
	}
	d.op = (enum kvt_op)o->kind;
	d.file = o->id;
	d.ctx = o->ctx;
	d.bytes = o->bytes;
	d.queued_ns = o->start_ns > o->submit_ns ? o->start_ns - o->submit_ns : 0;
	d.ns = now_ns() - (o->start_ns ? o->start_ns : o->submit_ns);
	if (o->kind == KVT_OP_RESTORE) {
		d.status = o->status;
		for (i = 0; !d.status && i < o->n; i++) {
			if (o->res[i] == 1) {
				d.blocks_ok++;
				continue;
			}
			d.status = o->res[i] ? o->res[i] : -EIO;
		}
	} else {
		d.status = o->status;
	}
	pthread_mutex_lock(&t->lock);
	f->busy = 0;
	if (o->kind == KVT_OP_SPILL) {
		f->state = d.status ? F_FAILED : F_READY;
		if (d.status)
			t->st.spill_failures++;
		else {
			t->st.spills++;
			t->st.spill_bytes += d.bytes;
		}
	} else if (!d.status) {
		t->st.restores++;
		t->st.restore_bytes += d.bytes;
	} else if (d.status == -EBADMSG) {
		t->st.restore_failures[0]++;
	} else if (d.status == -ENODATA) {
		t->st.restore_failures[1]++;
	} else if (d.status == -ESTALE) {
		t->st.restore_failures[2]++;
	} else {
		t->st.restore_failures[3]++;
	}
	if (f->dropped) {
		if (!d.status)
			d.status = -ECANCELED;
		remove_file(t, f);
	}
	if (t->n_done == t->cap_done) {
		uint32_t cap = t->cap_done ? t->cap_done * 2 : 64;
		struct kvt_done *nd = realloc(t->done, cap * sizeof(*nd));

		if (nd) {
			t->done = nd;
			t->cap_done = cap;
		}
	}
	if (t->n_done < t->cap_done)
		t->done[t->n_done++] = d;	/* else lost: only without memory */
	if (!--t->busy_ops)
		pthread_cond_broadcast(&t->idle);
	pthread_mutex_unlock(&t->lock);
	efd_signal(t->done_efd);
}

static void do_unlink(struct kvt *t, struct op *o)
{
	char name[64];

	file_name(name, sizeof(name), o->id);
	(void)unlinkat(t->dirfd, name, 0);
	pthread_mutex_lock(&t->lock);
	t->used -= o->f->bytes;		/* 0 unless removed at close */
	t->st.removed++;
	ftab_del(t, o->f);
	pthread_mutex_unlock(&t->lock);
	free(o->f);
}

static void arm_wake(struct kvt *t)
{
	struct io_uring_sqe *sqe = get_sqe(t);

	io_uring_prep_read(sqe, t->req_efd, &t->wake_buf, sizeof(t->wake_buf), 0);
	io_uring_sqe_set_data64(sqe, UD_WAKE);
}

static void *io_thread(void *arg)
{
	struct kvt *t = arg;
	struct op **tail;
	int armed = 0;

	for (;;) {
		struct io_uring_cqe *cqe;
		struct op *o, **pp, *todo;
		unsigned int head, seen = 0;
		int stop, kind, rc;

		pthread_mutex_lock(&t->lock);
		todo = t->req_head;
		t->req_head = t->req_tail = NULL;
#ifdef KVT_TEST_HOOKS
		if (!t->hold_ios && !t->stopping) {	/* held: nothing new starts */
			t->req_head = todo;
			for (t->req_tail = todo; t->req_tail && t->req_tail->next;
			     t->req_tail = t->req_tail->next)
				;
			todo = NULL;
		}
#endif
		stop = t->stopping;
		pthread_mutex_unlock(&t->lock);
		/* unlinks at once; the rest join the active list in order */
		for (tail = &t->active; *tail; tail = &(*tail)->next)
			;
		while ((o = todo)) {
			todo = o->next;
			o->next = NULL;
			if (o->kind == OP_UNLINK) {
				do_unlink(t, o);
				op_free(o);
				continue;
			}
			*tail = o;
			tail = &o->next;
		}
		/* restores first: someone waits for them */
		for (kind = KVT_OP_RESTORE; kind >= KVT_OP_SPILL; kind--) {
			for (pp = &t->active; (o = *pp);) {
				if (o->kind != kind || !op_issue(t, o)) {
					pp = &o->next;
					continue;
				}
				*pp = o->next;
				op_finish(t, o);
				op_free(o);
			}
		}
		for (tail = &t->active; *tail; tail = &(*tail)->next)
			;
		if (stop && !t->active)
			break;
		if (!armed) {
			arm_wake(t);
			armed = 1;
		}
		rc = io_uring_submit_and_wait(&t->ring, 1);
		if (rc < 0 && rc != -EINTR && rc != -EAGAIN) {
			/* a ring that refuses to wait: back off instead of spinning */
			usleep(1000);
		}
		io_uring_for_each_cqe(&t->ring, head, cqe) {
			uint64_t ud = io_uring_cqe_get_data64(cqe);

			seen++;
			if (ud == UD_WAKE) {
				armed = 0;
				continue;
			}
			on_cqe(t, (struct io *)(uintptr_t)ud, cqe->res);
		}
		io_uring_cq_advance(&t->ring, seen);
	}
	return NULL;
}

/* ---- open and close ---------------------------------------------------------- */

static int mkdirs(const char *path)
{
	char buf[512], *p;

	if (strlen(path) >= sizeof(buf))
		return -ENAMETOOLONG;
	strcpy(buf, path);
	for (p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(buf, 0755) && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, 0700) && errno != EEXIST)
		return -errno;
	return 0;
}

static int has_suffix(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);

	return a >= b && !strcmp(s + a - b, suf);
}

/* Every spill file an earlier life left: never read, removed. */
static uint64_t clean_dir(struct kvt *t)
{
	int fd = openat(t->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct dirent *de;
	uint64_t n = 0;
	DIR *dir;

	if (fd < 0)
		return 0;
	dir = fdopendir(fd);
	if (!dir) {
		close(fd);
		return 0;
	}
	while ((de = readdir(dir)))
		if ((has_suffix(de->d_name, SUFFIX) || !strcmp(de->d_name, PROBE_NAME)) &&
		    !unlinkat(t->dirfd, de->d_name, 0) && strcmp(de->d_name, PROBE_NAME))
			n++;
	closedir(dir);
	return n;
}

static int sync_io(struct kvt *t, int write, int fd, void *p, size_t len, int fixed_idx)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&t->ring);
	struct io_uring_cqe *cqe;
	int rc;

	if (fixed_idx >= 0 && write)
		io_uring_prep_write_fixed(sqe, fd, p, (unsigned int)len, 0, fixed_idx);
	else if (fixed_idx >= 0)
		io_uring_prep_read_fixed(sqe, fd, p, (unsigned int)len, 0, fixed_idx);
	else if (write)
		io_uring_prep_write(sqe, fd, p, (unsigned int)len, 0);
	else
		io_uring_prep_read(sqe, fd, p, (unsigned int)len, 0);
	io_uring_sqe_set_data64(sqe, 2);
	rc = io_uring_submit_and_wait(&t->ring, 1);
	if (rc < 0)
		return rc;
	rc = io_uring_wait_cqe(&t->ring, &cqe);
	if (rc)
		return rc;
	rc = cqe->res;
	io_uring_cqe_seen(&t->ring, cqe);
	return rc;
}

/*
 * Registered buffers over the whole mapping (1 GiB each), then O_DIRECT:
 * a 4 KiB write from the arena's first page and a read back into private
 * memory. What refuses (the file system, the mapping, the kernel) is said
 * in kvt_describe().
 */
static int probe(struct kvt *t, const struct kvt_params *p, char *err, size_t errlen)
{
	char why_fixed[128] = "", why_direct[128] = "";
	void *buf = NULL;
	int fd, rc;

	t->fixed = 0;
	if (p->fixed != KVT_OFF) {
		uint32_t n = (uint32_t)((t->arena_bytes + FIXED_CHUNK - 1) / FIXED_CHUNK), i;
		struct iovec *iov = calloc(n ? n : 1, sizeof(*iov));

		if (!iov)
			return -ENOMEM;
		for (i = 0; i < n; i++) {
			uint64_t off = (uint64_t)i * FIXED_CHUNK;

			iov[i].iov_base = t->base + off;
			iov[i].iov_len = t->arena_bytes - off < FIXED_CHUNK ?
					 t->arena_bytes - off : FIXED_CHUNK;
		}
		rc = n <= MAX_FIXED ? io_uring_register_buffers(&t->ring, iov, n) : -E2BIG;
		free(iov);
		if (rc == 0) {
			t->fixed = 1;
		} else if (p->fixed == KVT_ON) {
			snprintf(err, errlen, "registered buffers over the arena: %s", strerror(-rc));
			return rc;
		} else {
			snprintf(why_fixed, sizeof(why_fixed), " (registered buffers: %s)",
				 strerror(-rc));
		}
	}
	t->direct = 0;
	if (p->direct != KVT_OFF) {
		fd = openat(t->dirfd, PROBE_NAME, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT,
			    0600);
		if (fd < 0) {
			rc = -errno;
			snprintf(why_direct, sizeof(why_direct), " (O_DIRECT: the file system: %s)",
				 strerror(-rc));
		} else {
			rc = sync_io(t, 1, fd, t->base, 4096, t->fixed ? 0 : -1);
			if (rc == 4096) {
				if (posix_memalign(&buf, 4096, 4096)) {
					close(fd);
					unlinkat(t->dirfd, PROBE_NAME, 0);
					return -ENOMEM;
				}
				rc = sync_io(t, 0, fd, buf, 4096, -1);
				if (rc == 4096 && memcmp(buf, t->base, 4096))
					rc = -EIO;
				free(buf);
			}
			if (rc == 4096)
				t->direct = 1;
			else
				snprintf(why_direct, sizeof(why_direct),
					 " (O_DIRECT from the arena mapping: %s)",
					 strerror(rc < 0 ? -rc : EIO));
			close(fd);
		}
		unlinkat(t->dirfd, PROBE_NAME, 0);
		if (!t->direct && p->direct == KVT_ON) {
			snprintf(err, errlen, "O_DIRECT required:%s", why_direct);
			return -EOPNOTSUPP;
		}
	}
	snprintf(t->describe, sizeof(t->describe), "dir=%.300s direct=%s%s fixed=%s%s cap=%.1fGiB qd=%u",
		 t->dir, t->direct ? "on" : "off", why_direct, t->fixed ? "on" : "off", why_fixed,
		 (double)t->cap / (double)(1ull << 30), t->qd);
	return 0;
}

int kvt_open(const struct kvt_params *p, const struct kvt_geom *g, void *arena_base,
	     uint64_t arena_bytes, struct kvt **tp, char *err, size_t errlen)
{
	struct stat sb;
	struct kvt *t;
	uint32_t i;
	int rc;

	err[0] = 0;
	if (!p->dir || !*p->dir || p->dir[0] != '/') {
		snprintf(err, errlen, "spill directory: an absolute path is needed");
		return -EINVAL;
	}
	if (!g->block_size || g->block_size % KVT_SF_ALIGN || g->block_size > (2u << 20) ||
	    !g->blocks_per_page || g->blocks_per_page * (uint64_t)g->block_size > (2u << 20) ||
	    !arena_base || (uintptr_t)arena_base % 4096 ||
	    (uint64_t)(g->blocks_total + g->blocks_per_page - 1) / g->blocks_per_page *
	    (2ull << 20) > arena_bytes) {
		snprintf(err, errlen, "spill tier: the arena's geometry does not add up");
		return -EINVAL;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->g = *g;
	t->base = arena_base;
	t->arena_bytes = arena_bytes;
	t->dirfd = t->lockfd = t->req_efd = t->done_efd = -1;
#ifdef KVT_TEST_HOOKS
	t->hold_ios = UINT32_MAX;
#endif
	t->cap = p->cap_bytes;
	t->qd = p->queue_depth ? p->queue_depth : 32;
	if (t->qd > 1024)
		t->qd = 1024;
	t->direct_mode = p->direct;
	pthread_mutex_init(&t->lock, NULL);
	{
		pthread_condattr_t ca;

		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&t->idle, &ca);
		pthread_condattr_destroy(&ca);
	}
	snprintf(t->dir, sizeof(t->dir), "%s", p->dir);
	t->n_buckets = 1024;
	t->buckets = calloc(t->n_buckets, sizeof(*t->buckets));
	t->ios = calloc(t->qd + 2, sizeof(*t->ios));
	if (!t->buckets || !t->ios) {
		rc = -ENOMEM;
		goto fail;
	}
	for (i = 0; i < t->qd + 2; i++)
		io_put(t, &t->ios[i]);
	rc = mkdirs(p->dir);
	if (rc) {
		snprintf(err, errlen, "spill directory %s: %s", p->dir, strerror(-rc));
		goto fail;
	}
	t->dirfd = open(p->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (t->dirfd < 0 || fstat(t->dirfd, &sb)) {
		rc = -errno;
		snprintf(err, errlen, "spill directory %s: %s", p->dir, strerror(-rc));
		goto fail;
	}
	/* spill files hold KV: what users sent; nobody else writes here */
	if ((sb.st_mode & 022) || sb.st_uid != geteuid()) {
		rc = -EPERM;
		snprintf(err, errlen, "spill directory %s: must be owned by this user and not "
			 "writable by group or others (mode %03o)", p->dir,
			 (unsigned int)(sb.st_mode & 0777));
		goto fail;
	}
	t->lockfd = openat(t->dirfd, ".lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (t->lockfd < 0) {
		rc = -errno;
		snprintf(err, errlen, "spill directory %s: .lock: %s", p->dir, strerror(-rc));
		goto fail;
	}
	if (flock(t->lockfd, LOCK_EX | LOCK_NB)) {
		rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
		snprintf(err, errlen, "spill directory %s is in use by another process", p->dir);
		goto fail;
	}
	t->st.cleaned_at_open = clean_dir(t);
	t->req_efd = eventfd(0, EFD_CLOEXEC);
	t->done_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (t->req_efd < 0 || t->done_efd < 0) {
		rc = -errno;
		goto fail;
	}
	rc = io_uring_queue_init(t->qd * 2 + 8, &t->ring, 0);
	if (rc) {
		snprintf(err, errlen, "io_uring: %s", strerror(-rc));
		goto fail;
	}
	t->ring_ok = 1;
	rc = probe(t, p, err, errlen);
	if (rc)
		goto fail;
	rc = pthread_create(&t->thread, NULL, io_thread, t);
	if (rc) {
		rc = -rc;
		goto fail;
	}
	t->thread_ok = 1;
	*tp = t;
	return 0;
fail:
	if (!err[0])
		snprintf(err, errlen, "spill tier: %s", strerror(-rc));
	kvt_close(t);
	return rc;
}

void kvt_close(struct kvt *t)
{
	struct fent *f;

	if (!t)
		return;
	if (t->thread_ok) {
		pthread_mutex_lock(&t->lock);
		t->stopping = 1;
		efd_signal(t->req_efd);
		pthread_mutex_unlock(&t->lock);
		pthread_join(t->thread, NULL);
	}
	/* unlinks the thread did not get to, then every file left */
	while (t->req_head) {
		struct op *o = t->req_head;

		t->req_head = o->next;
		if (o->kind == OP_UNLINK)
			do_unlink(t, o);
		op_free(o);
	}
	while ((f = t->oldest)) {
		char name[64];

		file_name(name, sizeof(name), f->id);
		unlinkat(t->dirfd, name, 0);
		ftab_del(t, f);
		free(f);
	}
	if (t->ring_ok) {
		if (t->fixed)
			io_uring_unregister_buffers(&t->ring);
		io_uring_queue_exit(&t->ring);
	}
	if (t->req_efd >= 0)
		close(t->req_efd);
	if (t->done_efd >= 0)
		close(t->done_efd);
	if (t->lockfd >= 0)
		close(t->lockfd);
	if (t->dirfd >= 0)
		close(t->dirfd);
	free(t->done);
	free(t->buckets);
	free(t->ios);
	pthread_cond_destroy(&t->idle);
	pthread_mutex_destroy(&t->lock);
	free(t);
}
