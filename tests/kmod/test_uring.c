// SPDX-License-Identifier: GPL-2.0
/*
 * io_uring twins of the arena ioctls: every op gives what its ioctl gives
 * (results, ids, errors), many ops per submission, a block batch in one
 * SQE, and the non-blocking issue that finds the arena busy (-EAGAIN inside,
 * retried by io_uring's worker: the caller still sees success).  Tests
 * kmod/uring.c and kva_arena_op() in kmod/arena_ops.c.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <liburing.h>

#include "kt.h"

static int dev = -1;

static int uring_init(void)
{
	dev = kt_dev_open();
	return dev < 0;
}

static int uring_clean(void)
{
	close(dev);
	return 0;
}

/* The library's op for an ioctl number (0: none, the library refuses). */
static enum kva_ring_op ring_op_of(unsigned long ioc)
{
	static const struct { unsigned long ioc; enum kva_ring_op op; } map[] = {
		{ KVA_IOC_ARENA_INFO, KVA_RING_ARENA_INFO },
		{ KVA_IOC_BLOCKS_ALLOC, KVA_RING_BLOCKS_ALLOC },
		{ KVA_IOC_BLOCKS_FREE, KVA_RING_BLOCKS_FREE },
		{ KVA_IOC_BLOCKS_SHARE, KVA_RING_BLOCKS_SHARE },
		{ KVA_IOC_SESSION_CREATE, KVA_RING_SESSION_OPEN },
		{ KVA_IOC_SESSION_END, KVA_RING_SESSION_CLOSE },
		{ KVA_IOC_SESSION_SET_STATE, KVA_RING_SESSION_SET_STATE },
		{ KVA_IOC_SESSION_INFO, KVA_RING_SESSION_INFO },
		{ KVA_IOC_ARENA_SET_POLICY, KVA_RING_SET_POLICY },
		{ KVA_IOC_ARENA_VICTIMS, KVA_RING_VICTIMS },
	};
	size_t i;

	for (i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (map[i].ioc == ioc)
			return map[i].op;
	return (enum kva_ring_op)0;
}

/*
 * A raw IORING_OP_URING_CMD with any cmd_op on its own ring, for what the
 * library will not send (ops it has no name for): the kernel's refusals.
 */
static int raw_ring_op(int fd, unsigned long op, void *arg)
{
	struct kva_uring_cmd pdu = { .arg = (uintptr_t)arg };
	struct io_uring_sqe *sqe;
	struct io_uring_cqe *cqe;
	struct io_uring ring;
	int ret;

	if (io_uring_queue_init(4, &ring, 0))
		return -9999;
	sqe = io_uring_get_sqe(&ring);
	io_uring_prep_rw(IORING_OP_URING_CMD, sqe, fd, NULL, 0, 0);
	sqe->cmd_op = (uint32_t)op;
	memcpy(sqe->cmd, &pdu, sizeof(pdu));
	ret = io_uring_submit(&ring) == 1 && !io_uring_wait_cqe(&ring, &cqe) ?
	      cqe->res : -9999;
	io_uring_queue_exit(&ring);
	return ret;
}

/* One op through the ring, waited for: the uring twin of kt_ioctl. */
static int ring_op(struct kva_ring *r, unsigned long ioc, void *arg)
{
	struct kva_ring_cqe cqe;

	if (kva_ring_queue(r, ring_op_of(ioc), arg, 77) ||
	    kva_ring_submit(r) != 1 ||
	    kva_ring_reap(r, &cqe, 1, 1) != 1 || cqe.user_data != 77)
		return -9999;
	return cqe.res;
}

/* Run the same script on two fresh arenas, by ioctl and by io_uring. */
struct twin {
	int fd;
	struct kva_ring *ring;
	struct kva_arena *a;
	struct kva_dev *d;
};

static int call(struct twin *t, unsigned long op, void *arg)
{
	return t->ring ? ring_op(t->ring, op, arg) : kt_ioctl(t->fd, op, arg);
}

static void twin_open(struct twin *t, bool uring)
{
	struct kva_arena_params p = { .size = sizeof(p),
		.bytes = 4 * KT_MIB, .block_size = 64 << 10,
		.numa_node = KVA_NUMA_ANY, .tenant_id = 8, .name = "twin",
	};

	memset(t, 0, sizeof(*t));
	CU_ASSERT_FATAL(kva_open(KVA_BACKEND_KERNEL, &t->d) == 0);
	CU_ASSERT_FATAL(kva_arena_new(t->d, &p, &t->a) == 0);
	t->fd = kva_arena_fd(t->a);
	if (uring)
		CU_ASSERT_FATAL(kva_ring_open(t->a, 64, &t->ring) == 0);
}

static void twin_close(struct twin *t)
{
	kva_ring_close(t->ring);
	kva_arena_destroy(t->a);
	kva_close(t->d);
}

#define NRES 40
static void script(struct twin *t, int *res, uint32_t *ids,
		   struct kva_session_info *si, struct kva_arena_info *ai,
		   struct kva_victim *vic)
{
	struct kva_session_create sc = { .size = sizeof(sc), .cookie = 5 };
	struct kva_blocks b = { .size = sizeof(b) };
	struct kva_session_state st = { .size = sizeof(st) };
	struct kva_session_end se = { .size = sizeof(se) };
	struct kva_policy_set ps = { .size = sizeof(ps) };
	struct kva_victims v = { .size = sizeof(v), .max = 8,
				 .victim_size = sizeof(struct kva_victim),
				 .policy = KVA_POLICY_ARENA };
	uint64_t s1, s2;
	uint32_t bad[2];
	int n = 0;

	res[n++] = call(t, KVA_IOC_SESSION_CREATE, &sc);
	s1 = sc.session_id;
	res[n++] = call(t, KVA_IOC_SESSION_CREATE, &sc);
	s2 = sc.session_id;
	b.session_id = s1;
	b.count = 20;
	b.ids = (uintptr_t)ids;
	res[n++] = call(t, KVA_IOC_BLOCKS_ALLOC, &b);
	res[n++] = b.done;
	b.count = 60;					/* too many */
	res[n++] = call(t, KVA_IOC_BLOCKS_ALLOC, &b);
	b.flags = KVA_ALLOC_PARTIAL;
	b.ids = (uintptr_t)(ids + 20);
	res[n++] = call(t, KVA_IOC_BLOCKS_ALLOC, &b);	/* 44 left */
	b.flags = 4;					/* unknown flag */
	res[n++] = call(t, KVA_IOC_BLOCKS_ALLOC, &b);
	b.flags = 0;
	b.session_id = s2;
	b.count = 3;
	b.ids = (uintptr_t)ids;
	res[n++] = call(t, KVA_IOC_BLOCKS_SHARE, &b);
	res[n++] = call(t, KVA_IOC_BLOCKS_SHARE, &b);	/* EEXIST */
	bad[0] = ids[30];
	bad[1] = ids[30];
	b.ids = (uintptr_t)bad;
	b.count = 1;
	res[n++] = call(t, KVA_IOC_BLOCKS_FREE, &b);	/* foreign: ENOENT */
	b.session_id = s1;
	b.count = 2;
	res[n++] = call(t, KVA_IOC_BLOCKS_FREE, &b);	/* repeated: EINVAL */
	b.count = 1;
	res[n++] = call(t, KVA_IOC_BLOCKS_FREE, &b);
	res[n++] = call(t, KVA_IOC_BLOCKS_FREE, &b);	/* double: ENOENT */
	st.session_id = s1;
	st.state = KVA_STATE_TOOL_WAIT;
	st.tool_class = 4;
	st.expected_wait_us = 5000000;
	res[n++] = call(t, KVA_IOC_SESSION_SET_STATE, &st);
	res[n++] = call(t, KVA_IOC_SESSION_SET_STATE, &st);	/* EALREADY */
	st.state = 99;
	res[n++] = call(t, KVA_IOC_SESSION_SET_STATE, &st);
	st.session_id = s2;
	st.state = KVA_STATE_DECODE;
	st.tool_class = 0;
	st.expected_wait_us = 0;
	res[n++] = call(t, KVA_IOC_SESSION_SET_STATE, &st);
	memset(si, 0, sizeof(*si));
	si->size = sizeof(*si);
	si->session_id = s1;
	res[n++] = call(t, KVA_IOC_SESSION_INFO, si);
	ps.policy = KVA_POLICY_LRU;
	ps.low_wm = 4;
	res[n++] = call(t, KVA_IOC_ARENA_SET_POLICY, &ps);
	ps.low_wm = 100;				/* > blocks */
	res[n++] = call(t, KVA_IOC_ARENA_SET_POLICY, &ps);
	v.victims = (uintptr_t)vic;
	res[n++] = call(t, KVA_IOC_ARENA_VICTIMS, &v);
	memset(ai, 0, sizeof(*ai));
	ai->size = sizeof(*ai);
	res[n++] = call(t, KVA_IOC_ARENA_INFO, ai);
	se.session_id = s2;
	res[n++] = call(t, KVA_IOC_SESSION_END, &se);
	res[n++] = call(t, KVA_IOC_SESSION_END, &se);	/* ENOENT */
	sc.flags = 1;
	res[n++] = call(t, KVA_IOC_SESSION_CREATE, &sc);	/* EINVAL */
	sc.size = 4;
	res[n++] = call(t, KVA_IOC_SESSION_CREATE, &sc);	/* short */
	res[n++] = call(t, KVA_IOC_SESSION_INFO, (void *)8);	/* EFAULT */
	while (n < NRES)
		res[n++] = 0;
}

static void test_twins(void)
{
	struct kva_session_info si[2] = { { .size = sizeof(si[0]) },
					  { .size = sizeof(si[1]) } };
	struct kva_arena_info ai[2] = { { .size = sizeof(ai[0]) },
				       { .size = sizeof(ai[1]) } };
	struct kva_victim vic[2][8];
	uint32_t ids[2][64];
	int res[2][NRES], i;
	struct twin t[2];

	for (i = 0; i < 2; i++) {
		twin_open(&t[i], i == 1);
		script(&t[i], res[i], ids[i], &si[i], &ai[i], vic[i]);
	}
	for (i = 0; i < NRES; i++) {
		if (res[0][i] != res[1][i])
			fprintf(stderr, "step %d: ioctl %d, uring %d\n", i,
				res[0][i], res[1][i]);
		CU_ASSERT_EQUAL(res[0][i], res[1][i]);
	}
	/* A 64-bit id comes back in the struct; cqe->res is 0. */
	CU_ASSERT_EQUAL(res[0][0], 0);
	CU_ASSERT_EQUAL(res[0][1], 0);
	CU_ASSERT(si[0].session_id > UINT32_MAX);
	CU_ASSERT_EQUAL(si[0].session_id, si[1].session_id);
	CU_ASSERT_EQUAL(res[0][2], 20);
	CU_ASSERT_EQUAL(res[0][4], -ENOSPC);
	CU_ASSERT_EQUAL(res[0][5], 44);
	CU_ASSERT_EQUAL(res[0][8], -EEXIST);
	CU_ASSERT_EQUAL(res[0][9], -ENOENT);
	CU_ASSERT_EQUAL(res[0][10], -EINVAL);
	CU_ASSERT_EQUAL(res[0][11], 1);
	CU_ASSERT_EQUAL(res[0][12], -ENOENT);
	CU_ASSERT_EQUAL(res[0][14], -EALREADY);
	CU_ASSERT_EQUAL(res[0][20], 1);		/* one victim: s1 */
	CU_ASSERT_EQUAL(memcmp(ids[0], ids[1], sizeof(ids[0])), 0);
	for (i = 0; i < 64; i++)
		if (ids[0][i] != ids[1][i])
			fprintf(stderr, "ids[%d]: ioctl %u, uring %u\n", i,
				ids[0][i], ids[1][i]);
	CU_ASSERT_EQUAL(si[0].blocks_held, si[1].blocks_held);
	CU_ASSERT_EQUAL(si[0].state, si[1].state);
	CU_ASSERT_EQUAL(si[0].tool_class, si[1].tool_class);
	CU_ASSERT_EQUAL(si[0].transitions, si[1].transitions);
	CU_ASSERT_EQUAL(ai[0].blocks_free, ai[1].blocks_free);
	CU_ASSERT_EQUAL(ai[0].sessions, ai[1].sessions);
	CU_ASSERT_EQUAL(ai[1].policy, KVA_POLICY_LRU);
	CU_ASSERT_EQUAL(ai[1].low_wm, 4);
	CU_ASSERT_EQUAL(vic[0][0].blocks_held, vic[1][0].blocks_held);
	for (i = 0; i < 2; i++)
		twin_close(&t[i]);
}

/* 64 single-block allocs in one submission; then one 64-block SQE. */
static void test_batched(void)
{
	struct kva_blocks b[64];
	struct kva_ring_cqe cqe[64];
	uint32_t ids[64], many[64];
	struct kva_arena_info ai = { .size = sizeof(ai) };
	struct twin t;
	int64_t sid;
	int i, got = 0;

	twin_open(&t, true);
	sid = kt_session(t.fd);
	for (i = 0; i < 64; i++) {
		b[i] = (struct kva_blocks){ .size = sizeof(b[i]),
			.session_id = sid, .count = 1,
			.ids = (uintptr_t)&ids[i] };
		CU_ASSERT_EQUAL(kva_ring_queue(t.ring, KVA_RING_BLOCKS_ALLOC,
					       &b[i], i), 0);
	}
	CU_ASSERT_EQUAL(kva_ring_queue(t.ring, KVA_RING_BLOCKS_ALLOC, &b[0], 99),
			-EBUSY);			/* SQ full */
	CU_ASSERT_EQUAL(kva_ring_submit(t.ring), 64);
	while (got < 64) {
		int n = kva_ring_reap(t.ring, cqe, 64, 1);

		CU_ASSERT_FATAL(n > 0);
		for (i = 0; i < n; i++)
			CU_ASSERT_EQUAL(cqe[i].res, 1);
		got += n;
	}
	CU_ASSERT_EQUAL(kt_arena_info(t.fd, &ai), 0);
	CU_ASSERT_EQUAL(ai.blocks_free, 0);
	/* One SQE frees them all; one allocates 64 again. */
	b[0] = (struct kva_blocks){ .size = sizeof(b[0]), .session_id = sid,
				    .count = 64, .ids = (uintptr_t)ids };
	CU_ASSERT_EQUAL(ring_op(t.ring, KVA_IOC_BLOCKS_FREE, &b[0]), 64);
	b[0].ids = (uintptr_t)many;
	CU_ASSERT_EQUAL(ring_op(t.ring, KVA_IOC_BLOCKS_ALLOC, &b[0]), 64);
	CU_ASSERT_EQUAL(b[0].done, 64);
	twin_close(&t);
}

static void test_uring_only_rules(void)
{
	struct kva_export e = { .size = sizeof(e) };
	struct kva_arena_info ai = { .size = sizeof(ai) };
	struct twin t;

	twin_open(&t, true);
	CU_ASSERT_EQUAL(raw_ring_op(t.fd, KVA_IOC_EXPORT_DMABUF, &e), -EOPNOTSUPP);
	CU_ASSERT_EQUAL(raw_ring_op(t.fd, _IOWR(KVA_IOC_MAGIC, 0x7e, struct kva_export), &e),
			-ENOTTY);
	CU_ASSERT_EQUAL(raw_ring_op(t.fd, KVA_IOC_VERSION, &ai), -ENOTTY);
	CU_ASSERT_EQUAL(kva_ring_queue(t.ring, (enum kva_ring_op)0x1234, &ai, 1),
			-EINVAL);
	CU_ASSERT_EQUAL(kva_ring_queue(t.ring, (enum kva_ring_op)0, &ai, 1),
			-EINVAL);
	twin_close(&t);
	/* The memfd backend has no ring. */
	{
		struct kva_arena_params p = { .size = sizeof(p), .bytes = 2 * KT_MIB,
			.block_size = 4096, .numa_node = KVA_NUMA_ANY };
		struct kva_arena *a;
		struct kva_ring *r;
		struct kva_dev *d;

		CU_ASSERT_FATAL(kva_open(KVA_BACKEND_MEMFD, &d) == 0);
		CU_ASSERT_FATAL(kva_arena_new(d, &p, &a) == 0);
		CU_ASSERT_EQUAL(kva_ring_open(a, 8, &r), -EOPNOTSUPP);
		kva_arena_destroy(a);
		kva_close(d);
	}
}

struct hammer {
	int fd;
	volatile int stop;
};

static void *hammer_main(void *p)
{
	struct hammer *h = p;
	uint32_t id;
	int64_t sid = kt_session(h->fd);

	while (!h->stop)
		if (kt_alloc(h->fd, sid, 1, &id, 0) == 1)
			kt_free(h->fd, sid, 1, &id);
	kt_end(h->fd, sid);
	return NULL;
}

/*
 * A busy arena makes the inline (non-blocking) issue return -EAGAIN;
 * io_uring retries from a worker and the op still succeeds.
 */
static void test_eagain_path(void)
{
	struct kva_ring_cqe cqe[32];
	struct kva_blocks b[32];
	struct kva_arena_info ai = { .size = sizeof(ai) };
	struct hammer h;
	struct timespec t0, t;
	uint32_t ids[32];
	pthread_t th;
	struct twin tw;
	int64_t sid;
	int i, n, bad = 0;
	long rounds = 0;

	twin_open(&tw, true);
	h.fd = tw.fd;
	h.stop = 0;
	sid = kt_session(tw.fd);
	pthread_create(&th, NULL, hammer_main, &h);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		for (i = 0; i < 32; i++) {
			b[i] = (struct kva_blocks){ .size = sizeof(b[i]),
				.session_id = sid, .count = 1,
				.ids = (uintptr_t)&ids[i] };
			kva_ring_queue(tw.ring, KVA_RING_BLOCKS_ALLOC, &b[i], i);
		}
		kva_ring_submit(tw.ring);
		for (n = 0; n < 32;) {
			int k = kva_ring_reap(tw.ring, cqe, 32, 1);

			for (i = 0; i < k; i++)
				bad += cqe[i].res != 1;
			n += k > 0 ? k : 32;
		}
		for (i = 0; i < 32; i++)
			bad += kt_free(tw.fd, sid, 1, &ids[i]) != 1;
		rounds++;
		kt_arena_info(tw.fd, &ai);
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while (!ai.uring_eagain && t.tv_sec - t0.tv_sec < 8);
	h.stop = 1;
	pthread_join(th, NULL);
	printf("\n    eagain: %llu deferred issues in %ld rounds\n",
	       (unsigned long long)ai.uring_eagain, rounds);
	CU_ASSERT(ai.uring_eagain > 0);
	CU_ASSERT_EQUAL(bad, 0);
	CU_ASSERT_EQUAL(kt_arena_info(tw.fd, &ai), 0);
	CU_ASSERT_EQUAL(ai.blocks_free, ai.blocks_total);
	twin_close(&tw);
}

/*
 * A ring outlives its arena handle: it holds its own dup of the arena fd,
 * so after kva_arena_destroy() and the fd number's reuse by another file,
 * its ops still reach the same arena (never the file now at that number).
 */
static void test_ring_outlives_arena(void)
{
	struct kva_arena_info ai = { .size = sizeof(ai) };
	struct kva_arena_info after = { .size = sizeof(after) };
	struct twin t;
	int old_fd, reuse;

	twin_open(&t, true);
	CU_ASSERT_EQUAL(kt_arena_info(t.fd, &ai), 0);
	old_fd = t.fd;
	kva_arena_destroy(t.a);
	t.a = NULL;
	reuse = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (reuse != old_fd) {			/* put it at the old number */
		CU_ASSERT_EQUAL(dup2(reuse, old_fd), old_fd);
		close(reuse);
		reuse = old_fd;
	}
	CU_ASSERT_EQUAL(ring_op(t.ring, KVA_IOC_ARENA_INFO, &after), 0);
	CU_ASSERT_EQUAL(after.arena_id, ai.arena_id);
	CU_ASSERT_EQUAL(after.blocks_total, ai.blocks_total);
	close(reuse);
	kva_ring_close(t.ring);
	kva_close(t.d);
}

void kt_register_uring(void)
{
	CU_pSuite s = CU_add_suite("uring", uring_init, uring_clean);

	KT_ADD(s, test_twins);
	KT_ADD(s, test_batched);
	KT_ADD(s, test_uring_only_rules);
	KT_ADD(s, test_eagain_path);
	KT_ADD(s, test_ring_outlives_arena);
}
