// SPDX-License-Identifier: GPL-2.0
/*
 * Parked KVA_URING_WAIT_EVENT commands: pressure with victims in the
 * policy's order (toolwait and lru), one event per episode until
 * acknowledged, quota and session-ended events, the queue and its overflow
 * count, and cancellation without hang or leak when the ring is closed,
 * when the arena fd is closed, and when the process is killed.  Tests
 * kmod/events.c.
 */
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kt.h"

#define BS	(64U << 10)		/* 4 MiB arena: 64 blocks */

struct env {
	struct kva_dev *d;
	struct kva_arena *a;
	struct kva_ring *r;
	int fd;
};

static void env_open(struct env *e, uint32_t policy, uint32_t low_wm,
		     uint32_t tenant)
{
	struct kva_arena_params p = { .size = sizeof(p),
		.bytes = 4 * KT_MIB, .block_size = BS,
		.numa_node = KVA_NUMA_ANY, .tenant_id = tenant, .name = "ev",
		.policy = policy, .low_wm = low_wm,
	};

	memset(e, 0, sizeof(*e));
	CU_ASSERT_FATAL(kva_open(KVA_BACKEND_KERNEL, &e->d) == 0);
	CU_ASSERT_FATAL(kva_arena_new(e->d, &p, &e->a) == 0);
	CU_ASSERT_FATAL(kva_ring_open(e->a, 16, &e->r) == 0);
	e->fd = kva_arena_fd(e->a);
}

static void env_close(struct env *e)
{
	kva_ring_close(e->r);
	kva_arena_destroy(e->a);
	kva_close(e->d);
}

static void park(struct env *e, struct kva_event *ev, uint64_t ack)
{
	memset(ev, 0, sizeof(*ev));
	ev->size = sizeof(*ev);
	CU_ASSERT_EQUAL(kva_ring_queue_wait_event(e->r, ev, ack, 1), 0);
	CU_ASSERT_EQUAL(kva_ring_submit(e->r), 1);
}

/* Has the parked command completed?  Completions arrive as task work,
 * which runs when this thread's last system call returned. */
static int done(struct env *e, struct kva_ring_cqe *c)
{
	return kva_ring_reap(e->r, c, 1, 0);
}

static int64_t session(struct env *e, uint32_t state, uint32_t tool,
		   uint64_t wait_us, uint32_t blocks)
{
	uint32_t ids[64];
	int64_t sid = kt_session(e->fd);

	CU_ASSERT_FATAL(sid > 0);
	if (blocks)
		CU_ASSERT_EQUAL(kt_alloc(e->fd, sid, blocks, ids, 0), (int)blocks);
	if (state != KVA_STATE_IDLE)
		CU_ASSERT_EQUAL(kt_set_state(e->fd, sid, state, tool, wait_us), 0);
	return sid;
}

static int wait_pinned_zero(void)
{
	int i;

	for (i = 0; i < 300; i++) {
		if (kt_sysfs("pinned_bytes") == 0)
			return 0;
		usleep(10000);
	}
	return -1;
}

static void test_pressure_toolwait(void)
{
	struct kva_ring_cqe c;
	struct kva_event ev, ev2;
	struct env e;
	uint32_t ids[16];
	int64_t a, b, cs, d, x;

	env_open(&e, KVA_POLICY_TOOLWAIT, 8, 20);
	a = session(&e, KVA_STATE_TOOL_WAIT, 3, 10000000, 4);	/* 10 s x 4 */
	b = session(&e, KVA_STATE_TOOL_WAIT, 5, 1000000, 4);	/* 1 s x 4 */
	cs = session(&e, KVA_STATE_IDLE, 0, 0, 4);
	d = session(&e, KVA_STATE_DECODE, 0, 0, 4);		/* never */
	park(&e, &ev, 0);
	CU_ASSERT_EQUAL(done(&e, &c), 0);			/* parked */
	x = session(&e, KVA_STATE_PREFILL, 0, 0, 0);
	CU_ASSERT_EQUAL(kt_alloc(e.fd, x, 16, ids, 0), 16);	/* 64-32: 32 free */
	CU_ASSERT_EQUAL(done(&e, &c), 0);
	CU_ASSERT_EQUAL(kt_alloc(e.fd, x, 16, ids, 0), 16);	/* 16 free */
	CU_ASSERT_EQUAL(kt_alloc(e.fd, x, 9, ids, 0), 9);	/* 7 < 8 */
	CU_ASSERT_EQUAL_FATAL(done(&e, &c), 1);
	CU_ASSERT_EQUAL(c.res, KVA_EVENT_PRESSURE);
	CU_ASSERT_EQUAL(ev.type, KVA_EVENT_PRESSURE);
	CU_ASSERT_EQUAL(ev.size, sizeof(ev));
	CU_ASSERT(ev.seq > 0);
	CU_ASSERT_EQUAL(ev.blocks_free, 7);
	CU_ASSERT_EQUAL(ev.low_wm, 8);
	CU_ASSERT_EQUAL(ev.tenant_id, 20);
	CU_ASSERT_EQUAL_FATAL(ev.nvictims, 3);
	CU_ASSERT_EQUAL(ev.victims[0].session_id, (uint64_t)a);
	CU_ASSERT_EQUAL(ev.victims[0].tool_class, 3);
	CU_ASSERT_EQUAL(ev.victims[1].session_id, (uint64_t)b);
	CU_ASSERT_EQUAL(ev.victims[2].session_id, (uint64_t)cs);
	CU_ASSERT_EQUAL(ev.victims[2].state, KVA_STATE_IDLE);
	CU_ASSERT(ev.victims[0].score > ev.victims[1].score);
	(void)d;

	/* Once per episode: more allocations, no new event until acked. */
	park(&e, &ev2, 0);
	CU_ASSERT_EQUAL(kt_alloc(e.fd, x, 1, ids, 0), 1);
	CU_ASSERT_EQUAL(kt_alloc(e.fd, x, 8, ids, 0), -ENOSPC);
	CU_ASSERT_EQUAL(done(&e, &c), 0);
	/* Acknowledge: the re-parked command carries ack_seq. */
	{
		struct kva_event ev3;

		park(&e, &ev3, ev.seq);
		CU_ASSERT_EQUAL(kt_alloc(e.fd, x, 1, ids, 0), 1);
		CU_ASSERT_EQUAL_FATAL(done(&e, &c), 1);	/* the oldest waiter */
		CU_ASSERT_EQUAL(c.res, KVA_EVENT_PRESSURE);
		CU_ASSERT_EQUAL(ev2.type, KVA_EVENT_PRESSURE);
		CU_ASSERT(ev2.seq > ev.seq);
		CU_ASSERT_EQUAL(ev2.blocks_free, 5);
		/* The third waiter is cancelled when we close the arena fd. */
	}
	env_close(&e);		/* with a command still parked */
	CU_ASSERT_EQUAL(wait_pinned_zero(), 0);
}

static void test_pressure_lru_order(void)
{
	struct kva_ring_cqe c;
	struct kva_event ev;
	struct timespec ts = { .tv_nsec = 2 * 1000 * 1000 };
	struct env e;
	uint32_t ids[64];
	int64_t s[3], x;
	int i;

	env_open(&e, KVA_POLICY_LRU, 8, 21);
	for (i = 0; i < 3; i++) {
		s[i] = session(&e, KVA_STATE_IDLE, 0, 0, 4);
		nanosleep(&ts, NULL);
	}
	/* Touch s[0]: it becomes the most recently used. */
	CU_ASSERT_EQUAL(kt_alloc(e.fd, s[0], 1, ids, 0), 1);
	park(&e, &ev, 0);
	x = session(&e, KVA_STATE_DECODE, 0, 0, 0);
	CU_ASSERT_EQUAL(kt_alloc(e.fd, x, 50, ids, 0), 50);	/* 1 free */
	CU_ASSERT_EQUAL_FATAL(done(&e, &c), 1);
	CU_ASSERT_EQUAL_FATAL(ev.nvictims, 3);
	CU_ASSERT_EQUAL(ev.victims[0].session_id, (uint64_t)s[1]);
	CU_ASSERT_EQUAL(ev.victims[1].session_id, (uint64_t)s[2]);
	CU_ASSERT_EQUAL(ev.victims[2].session_id, (uint64_t)s[0]);
	env_close(&e);
}

static void test_quota_and_session_ended(void)
{
	struct kva_tenant t = { .size = sizeof(t), .tenant_id = 22,
				.quota_bytes = 2 * BS };
	int dev = kt_dev_open();
	struct kva_ring_cqe c;
	struct kva_event ev;
	struct env e;
	uint32_t ids[4];
	int64_t sid;
	int st;
	pid_t pid;

	CU_ASSERT_EQUAL(kt_ioctl(dev, KVA_IOC_TENANT_SET_QUOTA, &t), 0);
	env_open(&e, KVA_POLICY_TOOLWAIT, 0, 22);
	sid = session(&e, KVA_STATE_IDLE, 0, 0, 0);
	park(&e, &ev, 0);
	CU_ASSERT_EQUAL(kt_alloc(e.fd, sid, 3, ids, 0), -EDQUOT);
	CU_ASSERT_EQUAL_FATAL(done(&e, &c), 1);
	CU_ASSERT_EQUAL(c.res, KVA_EVENT_QUOTA);
	CU_ASSERT_EQUAL(ev.tenant_id, 22);
	CU_ASSERT_EQUAL(ev.session_id, (uint64_t)sid);
	CU_ASSERT_EQUAL(ev.requested, 3);

	/* A session ended by another process (it shares the arena fd). */
	park(&e, &ev, 0);
	pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	if (pid == 0)
		_exit(kt_end(e.fd, sid) == 0 ? 0 : 1);
	CU_ASSERT_EQUAL(waitpid(pid, &st, 0), pid);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	/* Our task work runs on our next system call. */
	CU_ASSERT_EQUAL_FATAL(kva_ring_reap(e.r, &c, 1, 1), 1);
	CU_ASSERT_EQUAL(c.res, KVA_EVENT_SESSION_ENDED);
	CU_ASSERT_EQUAL(ev.session_id, (uint64_t)sid);
	CU_ASSERT_EQUAL(ev.pid, (uint32_t)pid);
	env_close(&e);
	t.quota_bytes = 0;
	kt_ioctl(dev, KVA_IOC_TENANT_SET_QUOTA, &t);
	close(dev);
}

/* Events wait for a command; past KVA_EVENT_QUEUE they are counted. */
static void test_queue_and_overflow(void)
{
	struct kva_arena_info ai = { .size = sizeof(ai) };
	struct kva_ring_cqe c;
	struct kva_event ev;
	struct env e;
	int64_t sid;
	int i;

	env_open(&e, KVA_POLICY_TOOLWAIT, 0, 23);
	for (i = 0; i < KVA_EVENT_QUEUE + 5; i++) {
		sid = kt_session(e.fd);
		CU_ASSERT_EQUAL(kt_end(e.fd, sid), 0);
	}
	CU_ASSERT_EQUAL(kt_arena_info(e.fd, &ai), 0);
	CU_ASSERT_EQUAL(ai.events_posted, KVA_EVENT_QUEUE + 5);
	CU_ASSERT_EQUAL(ai.events_dropped, 5);
	park(&e, &ev, 0);				/* completes at once */
	CU_ASSERT_EQUAL_FATAL(kva_ring_reap(e.r, &c, 1, 1), 1);
	CU_ASSERT_EQUAL(c.res, KVA_EVENT_SESSION_ENDED);
	CU_ASSERT_EQUAL(ev.seq, 1);
	CU_ASSERT_EQUAL(ev.dropped, 5);
	park(&e, &ev, 0);
	CU_ASSERT_EQUAL_FATAL(kva_ring_reap(e.r, &c, 1, 1), 1);
	CU_ASSERT_EQUAL(ev.seq, 2);
	CU_ASSERT_EQUAL(ev.dropped, 0);
	/* A bad event struct (size 0) is refused by the kernel, not parked. */
	{
		struct kva_event small = { 0 };

		CU_ASSERT_EQUAL(kva_ring_queue_wait_event(e.r, &small, 0, 5), 0);
		kva_ring_submit(e.r);
		CU_ASSERT_EQUAL_FATAL(kva_ring_reap(e.r, &c, 1, 1), 1);
		CU_ASSERT_EQUAL(c.res, -EINVAL);
	}
	env_close(&e);
}

/* Closing the ring with a parked command: no hang; the arena goes. */
static void test_cancel_ring_close(void)
{
	struct kva_event ev;
	struct env e;
	int st;
	pid_t pid = fork();

	CU_ASSERT_FATAL(pid >= 0);
	if (pid == 0) {
		alarm(20);
		env_open(&e, KVA_POLICY_TOOLWAIT, 0, 24);
		memset(&ev, 0, sizeof(ev));
		ev.size = sizeof(ev);
		kva_ring_queue_wait_event(e.r, &ev, 0, 1);
		kva_ring_submit(e.r);
		kva_ring_close(e.r);		/* the ring goes first */
		e.r = NULL;
		sleep(1);			/* alive, arena fd open */
		env_close(&e);
		_exit(0);
	}
	CU_ASSERT_EQUAL(waitpid(pid, &st, 0), pid);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CU_ASSERT_EQUAL(wait_pinned_zero(), 0);
}

/* Closing the arena fd cancels the closing process's parked commands. */
static void test_cancel_arena_close(void)
{
	struct kva_ring_cqe c;
	struct kva_event ev;
	struct env e;

	env_open(&e, KVA_POLICY_TOOLWAIT, 0, 25);
	park(&e, &ev, 0);
	park(&e, &ev, 0);
	kva_arena_destroy(e.a);		/* close(arena fd) */
	e.a = NULL;
	CU_ASSERT_EQUAL_FATAL(kva_ring_reap(e.r, &c, 1, 1), 1);
	CU_ASSERT_EQUAL(c.res, -ECANCELED);
	CU_ASSERT_EQUAL_FATAL(kva_ring_reap(e.r, &c, 1, 1), 1);
	CU_ASSERT_EQUAL(c.res, -ECANCELED);
	kva_ring_close(e.r);
	kva_close(e.d);
	CU_ASSERT_EQUAL(wait_pinned_zero(), 0);
}

/* SIGKILL with parked commands: no hang, no leak. */
static void test_cancel_kill(void)
{
	struct kva_event ev;
	struct env e;
	int p[2], st;
	char ch;
	pid_t pid;

	CU_ASSERT_FATAL(pipe(p) == 0);
	pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	if (pid == 0) {
		env_open(&e, KVA_POLICY_TOOLWAIT, 0, 26);
		park(&e, &ev, 0);
		park(&e, &ev, 0);
		if (write(p[1], "r", 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	CU_ASSERT_FATAL(read(p[0], &ch, 1) == 1);
	CU_ASSERT(kt_sysfs("pinned_bytes") > 0);
	kill(pid, SIGKILL);
	CU_ASSERT_EQUAL(waitpid(pid, &st, 0), pid);
	CU_ASSERT(WIFSIGNALED(st));
	CU_ASSERT_EQUAL(wait_pinned_zero(), 0);
	close(p[0]);
	close(p[1]);
}

void kt_register_events(void)
{
	CU_pSuite s = CU_add_suite("events", NULL, NULL);

	KT_ADD(s, test_pressure_toolwait);
	KT_ADD(s, test_pressure_lru_order);
	KT_ADD(s, test_quota_and_session_ended);
	KT_ADD(s, test_queue_and_overflow);
	KT_ADD(s, test_cancel_ring_close);
	KT_ADD(s, test_cancel_arena_close);
	KT_ADD(s, test_cancel_kill);
}
