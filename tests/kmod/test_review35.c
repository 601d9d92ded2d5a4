// SPDX-License-Identifier: GPL-2.0
/*
 * Issue 35, the module's second security review: what a caller with
 * /dev/kvarena or an arena fd could do that it should not, one test per
 * finding, each failing on the module before its fix (tests/kmod/run-ab.sh)
 * and passing after.  The findings and their bounds are in
 * Documentation/threat-model.md.
 */
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <grp.h>
#include <liburing.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/genetlink.h>
#include <linux/netlink.h>
#include <netlink/genl/ctrl.h>
#include <netlink/genl/genl.h>

#include "kt.h"

#define NOBODY	65534

static int dev = -1;

static int r35_init(void)
{
	dev = kt_dev_open();
	/* The unprivileged children open the device themselves. */
	return dev < 0 || kt_dev_group(NOBODY);
}

static int r35_clean(void)
{
	kt_dev_group(0);
	close(dev);
	return 0;
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/*
 * Run fn in a child as uid/gid NOBODY, without capabilities, with
 * RLIMIT_MEMLOCK memlock (RLIM_INFINITY: locked memory is not what the
 * test is about); its exit status.
 */
static int as_nobody_memlock(int (*fn)(void *), void *ctx, rlim_t memlock)
{
	struct rlimit lim = { memlock, memlock };
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		if (setrlimit(RLIMIT_MEMLOCK, &lim) || setgroups(0, NULL) ||
		    setgid(NOBODY) || setuid(NOBODY))
			_exit(99);
		_exit(fn(ctx));
	}
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

static int as_nobody(int (*fn)(void *), void *ctx)
{
	return as_nobody_memlock(fn, ctx, RLIM_INFINITY);
}

/*
 * Keep a page of each 2 MiB page of an arena fd's first `bytes` in pipe w
 * (as vmsplice does for any user), then unmap: the arena's pages are now
 * referenced from the pipe only.  0 or -1.
 */
static int pages_into_pipe(int arena, uint64_t bytes, int w)
{
	struct iovec iov[64];
	int i, n = bytes / (2 * KT_MIB);
	char *m;

	if (n > 64)
		return -1;
	m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, arena, 0);
	if (m == MAP_FAILED)
		return -1;
	for (i = 0; i < n; i++) {
		iov[i].iov_base = m + (size_t)i * 2 * KT_MIB;
		iov[i].iov_len = 4096;
	}
	i = vmsplice(w, iov, n, 0) == (ssize_t)n * 4096 ? 0 : -1;
	munmap(m, bytes);
	return i;
}

static int tenant_info(uint32_t id, struct kva_tenant *t)
{
	*t = (struct kva_tenant){ .size = sizeof(*t), .tenant_id = id };
	return kt_ioctl(dev, KVA_IOC_TENANT_INFO, t);
}

/* One WAIT_EVENT SQE on arena fd, with its own event buffer. */
static void prep_wait(struct io_uring *ring, int fd, struct kva_event *ev,
		      bool async)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
	struct kva_uring_cmd pdu = { .arg = (uintptr_t)ev };

	memset(ev, 0, sizeof(*ev));
	ev->size = sizeof(*ev);
	io_uring_prep_rw(IORING_OP_URING_CMD, sqe, fd, NULL, 0, 0);
	sqe->cmd_op = KVA_URING_WAIT_EVENT;
	memcpy(sqe->cmd, &pdu, sizeof(pdu));
	if (async)
		sqe->flags |= IOSQE_ASYNC;
}

/*
 * Rounds of WAIT_EVENTs answered at once from io-wq workers (IOSQE_ASYNC),
 * each round's ring torn down the moment they are submitted, for secs
 * seconds or at most rounds rounds.  queued: the arena has events waiting
 * (each wait takes one); else KVA_MAX_WAITERS plain waits park first (the
 * teardown cancels them) and the async ones get -EBUSY.
 */
static int teardown_rounds(int fd, bool queued, double secs, int rounds)
{
	enum { ASYNC = 32 };
	static struct kva_event ev[KVA_MAX_WAITERS + ASYNC];
	double t0 = now_s();
	struct io_uring ring;
	int r, i, n;

	for (r = 0; r < rounds && now_s() - t0 < secs; r++) {
		if (io_uring_queue_init(KVA_MAX_WAITERS + ASYNC, &ring, 0))
			return 60;
		n = 0;
		if (queued) {
			for (i = 0; i < ASYNC; i++) {
				int64_t sid = kt_session(fd);

				if (sid <= 0 || kt_end(fd, sid))
					return 61;
			}
		} else {
			for (; n < KVA_MAX_WAITERS; n++)
				prep_wait(&ring, fd, &ev[n], false);
		}
		for (i = 0; i < ASYNC; i++, n++)
			prep_wait(&ring, fd, &ev[n], true);
		if (io_uring_submit(&ring) != n)
			return 62;
		io_uring_queue_exit(&ring);	/* while io-wq answers them */
	}
	return 0;
}

/*
 * Finding 1: a WAIT_EVENT answered at once (an event queued, or -EBUSY)
 * freed its waiter while the command was still on io_uring's list of
 * cancelable commands.  Issued from io-wq, where the ring's lock is not
 * held, a ring torn down right then had IO_URING_F_CANCEL (6.7+) read the
 * freed waiter through the command's pdu.  With the guest suites' slab
 * poisoning Debian's 6.12 oopses on it, usually within seconds (the -EBUSY
 * rounds; once not within 15 s, hence 30); the 6.12 debug kernel, slower,
 * needs longer (make check-debug runs it 120 s: KT_RACE_SECS), and KASAN
 * reported the use-after-free in kva_uring_wait_cancel about 50 s in.  Now the cancel finds its waiter on the arena's list and never
 * reads the pdu.  On every kernel the rounds must end (nothing hangs in
 * ring exit) and free everything.
 */
static void test_async_waits_race_ring_teardown(void)
{
	int qfd = kt_arena(dev, 2 * KT_MIB, 64 << 10, 0);
	int bfd = kt_arena(dev, 2 * KT_MIB, 64 << 10, 0);
	int maj = 0, min = 0, rounds, i, st, rc[2];
	double t0 = now_s(), secs;
	struct utsname u;
	pid_t pid[2];

	CU_ASSERT_FATAL(qfd >= 0 && bfd >= 0);
	/* 6.1 has no IO_URING_F_CANCEL: no race, and each ring exit waits
	 * up to 50 ms for the monitor to cancel what is parked. */
	uname(&u);
	sscanf(u.release, "%d.%d", &maj, &min);
	if (maj > 6 || (maj == 6 && min >= 7)) {
		/* KT_RACE_SECS: longer runs (the debug kernel is slower) */
		secs = getenv("KT_RACE_SECS") ? atof(getenv("KT_RACE_SECS")) : 30;
		rounds = 1 << 30;
	} else {
		secs = 30;
		rounds = 30;
	}
	for (i = 0; i < 2; i++) {
		pid[i] = fork();
		CU_ASSERT_FATAL(pid[i] >= 0);
		if (pid[i] == 0)
			_exit(teardown_rounds(i ? bfd : qfd, !i, secs, rounds));
	}
	for (i = 0; i < 2; i++) {
		rc[i] = -1;
		if (waitpid(pid[i], &st, 0) == pid[i] && WIFEXITED(st))
			rc[i] = WEXITSTATUS(st);
	}
	printf("\n    %.1f s of rounds\n", now_s() - t0);
	CU_ASSERT_EQUAL(rc[0], 0);
	CU_ASSERT_EQUAL(rc[1], 0);
	close(qfd);
	close(bfd);
	for (i = 0; i < 50 && kt_sysfs("pinned_bytes"); i++)
		usleep(100000);
	CU_ASSERT_EQUAL(kt_sysfs("pinned_bytes"), 0);
}

/*
 * Finding 6: BLOCKS_FREE wrote the whole struct back after the blocks were
 * freed, so a struct whose `done` was writable but whose tail was not got
 * EFAULT for a free that had happened (and a retry got ENOENT).  Only
 * `done` is output: it is checked before, written after.
 */
static void test_blocks_free_never_efault_after_the_fact(void)
{
	int arena = kt_arena(dev, 2 * KT_MIB, 64 << 10, 0);
	long pg = sysconf(_SC_PAGESIZE);
	char *m = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct kva_blocks *b;
	struct kva_arena_info ai;
	uint32_t ids[2];
	int64_t sid, other;

	CU_ASSERT_FATAL(arena >= 0 && m != MAP_FAILED);
	sid = kt_session(arena);
	other = kt_session(arena);
	CU_ASSERT_EQUAL_FATAL(kt_alloc(arena, sid, 2, ids, 0), 2);
	/* `done` ends the first page; `ids` is on the second, read-only. */
	b = (void *)(m + pg - offsetof(struct kva_blocks, ids));
	*b = (struct kva_blocks){ .size = sizeof(*b), .session_id = other,
				  .count = 2, .ids = (uintptr_t)ids };
	CU_ASSERT_EQUAL_FATAL(mprotect(m + pg, pg, PROT_READ), 0);
	CU_ASSERT_EQUAL(kt_ioctl(arena, KVA_IOC_BLOCKS_SHARE, b), 2);
	CU_ASSERT_EQUAL(b->done, 2);
	b->session_id = sid;
	b->done = 0;
	CU_ASSERT_EQUAL(kt_ioctl(arena, KVA_IOC_BLOCKS_FREE, b), 2);
	CU_ASSERT_EQUAL(b->done, 2);
	b->session_id = other;
	b->done = 0;
	CU_ASSERT_EQUAL(kt_ioctl(arena, KVA_IOC_BLOCKS_FREE, b), 2);
	CU_ASSERT_EQUAL(kt_arena_info(arena, &ai), 0);
	CU_ASSERT_EQUAL(ai.blocks_free, ai.blocks_total);
	munmap(m, 2 * pg);
	close(arena);
}

static int sysfs_child(void *p)
{
	static const char *const root_only[] = { "sessions", "blocks_used" };
	char path[128];
	unsigned int i;
	int fd;

	(void)p;
	for (i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "/sys/class/misc/kvarena/%s",
			 root_only[i]);
		fd = open(path, O_RDONLY);
		if (fd >= 0 || errno != EACCES)
			return 10 + i;
	}
	/* Module-wide totals, as KVA_IOC_VERSION shows them, stay open. */
	return kt_sysfs("pinned_bytes") < 0 ? 20 : 0;
}

/*
 * Finding 6: the sysfs totals `sessions` and `blocks_used` were world
 * readable: other tenants' usage, and each read locks every arena in turn.
 * They are root's now.
 */
static void test_sysfs_usage_totals_root_only(void)
{
	int arena = kt_arena(dev, 2 * KT_MIB, 64 << 10, 0);

	CU_ASSERT_FATAL(arena >= 0);
	CU_ASSERT_FATAL(kt_session(arena) > 0);
	CU_ASSERT_EQUAL(kt_sysfs("sessions"), 1);
	CU_ASSERT_EQUAL(as_nobody(sysfs_child, NULL), 0);
	close(arena);
}

/* The family's id, through the controller. */
static int genl_family(void)
{
	struct nl_sock *sk = nl_socket_alloc();
	int id = -1;

	if (sk && !genl_connect(sk))
		id = genl_ctrl_resolve(sk, KVA_GENL_NAME);
	nl_socket_free(sk);
	return id;
}

/*
 * One request built by hand (the genetlink header's reserved byte, any
 * attributes): 0 if the kernel accepted it, else -errno from its ack.
 */
static int genl_raw(int family, uint8_t cmd, uint16_t reserved,
		    const void *attrs, size_t len)
{
	struct {
		struct nlmsghdr n;
		struct genlmsghdr g;
		char attrs[256];
	} req = { 0 };
	char buf[8192];
	int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_GENERIC);
	int ret = -EIO;
	ssize_t n;

	if (fd < 0)
		return -errno;
	req.n.nlmsg_len = NLMSG_LENGTH(GENL_HDRLEN + len);
	req.n.nlmsg_type = family;
	req.n.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
	req.n.nlmsg_seq = 1;
	req.g.cmd = cmd;
	req.g.version = KVA_GENL_VERSION;
	req.g.reserved = reserved;
	memcpy(req.attrs, attrs, len);
	if (send(fd, &req, req.n.nlmsg_len, 0) < 0)
		goto out;
	/* The reply, if any, then the ack. */
	while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) {
		struct nlmsghdr *h = (struct nlmsghdr *)buf;

		for (; NLMSG_OK(h, n); h = NLMSG_NEXT(h, n)) {
			if (h->nlmsg_type == NLMSG_ERROR) {
				ret = ((struct nlmsgerr *)NLMSG_DATA(h))->error;
				goto out;
			}
		}
	}
out:
	close(fd);
	return ret;
}

static size_t nla_u32(char *buf, uint16_t type, uint32_t v)
{
	struct nlattr *a = (struct nlattr *)buf;

	a->nla_type = type;
	a->nla_len = NLA_HDRLEN + 4;
	memcpy(buf + NLA_HDRLEN, &v, 4);
	return NLA_ALIGN(a->nla_len);
}

/*
 * Finding 6: the family set resv_start_op past every command, which turns
 * off the core's check of the genetlink header's reserved field, and
 * shared one policy between its commands, so ARENA_GET accepted LOW_WM,
 * which it ignores.  Now the header is checked and each command admits only
 * the attributes it reads.
 */
static void test_netlink_requests_checked_per_command(void)
{
	int arena = kt_arena(dev, 2 * KT_MIB, 64 << 10, 0);
	int family = genl_family();
	struct kva_arena_info ai;
	char a[64];
	size_t n;

	CU_ASSERT_FATAL(arena >= 0 && family > 0);
	CU_ASSERT_EQUAL_FATAL(kt_arena_info(arena, &ai), 0);
	n = nla_u32(a, KVA_NL_A_ARENA_ID, ai.arena_id);
	CU_ASSERT_EQUAL(genl_raw(family, KVA_NL_CMD_ARENA_GET, 0, a, n), 0);
	CU_ASSERT_EQUAL(genl_raw(family, KVA_NL_CMD_ARENA_GET, 1, a, n), -EINVAL);
	/* LOW_WM belongs to POLICY_SET only. */
	n += nla_u32(a + n, KVA_NL_A_LOW_WM, 1);
	CU_ASSERT_EQUAL(genl_raw(family, KVA_NL_CMD_ARENA_GET, 0, a, n), -EINVAL);
	n += nla_u32(a + n, KVA_NL_A_POLICY, KVA_POLICY_LRU);
	CU_ASSERT_EQUAL(genl_raw(family, KVA_NL_CMD_POLICY_SET, 0, a, n), 0);
	CU_ASSERT_EQUAL(genl_raw(family, KVA_NL_CMD_POLICY_SET, 7, a, n), -EINVAL);
	CU_ASSERT_EQUAL(kt_arena_info(arena, &ai), 0);
	CU_ASSERT_EQUAL(ai.policy, KVA_POLICY_LRU);
	CU_ASSERT_EQUAL(ai.low_wm, 1);
	close(arena);
}

struct busy {
	int fd;
	uint32_t arena_id;
	volatile int stop;
	double longest, total;
	long rankings, gets;
};

/* Rank 20,000 victims again and again: the arena's lock is mostly held. */
static void *rank_main(void *p)
{
	static struct kva_victim out[KVA_MAX_VICTIMS];
	struct busy *b = p;
	struct kva_victims v = {
		.size = sizeof(v), .max = KVA_MAX_VICTIMS,
		.victims = (uintptr_t)out, .victim_size = sizeof(out[0]),
		.policy = KVA_POLICY_LRU,
	};

	while (!b->stop) {
		double t0 = now_s(), dt;

		if (kt_ioctl(b->fd, KVA_IOC_ARENA_VICTIMS, &v) < 0)
			break;
		dt = now_s() - t0;
		if (dt > b->longest)
			b->longest = dt;
		b->total += dt;
		b->rankings++;
	}
	return NULL;
}

/* An operator reading the busy arena: waits for its lock each time. */
static void *get_busy_main(void *p)
{
	struct kva_nl_arena one = { .size = sizeof(one) };
	struct busy *b = p;
	struct kva_nl *nl;

	if (kva_nl_open(&nl))
		return NULL;
	while (!b->stop) {
		kva_nl_arena_get(nl, b->arena_id, &one);
		b->gets++;
	}
	kva_nl_close(nl);
	return NULL;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/*
 * Finding 6: the family's ops ran under genetlink's global genl_mutex, so
 * an operator's request waiting for one busy arena held up every request
 * of every non-parallel genetlink family on the host, this one's for other
 * arenas included.  The family is parallel_ops now: a request for an idle
 * arena does not wait for the busy one.
 */
static void test_netlink_never_waits_for_another_arena(void)
{
	enum { N = 20000 };
	struct kva_nl_arena one = { .size = sizeof(one) };
	struct kva_arena_info ai;
	struct busy b = { 0 };
	static int64_t sids[N];
	static double lat[512];
	pthread_t tr, tg;
	struct kva_nl *nl;
	double t0, median;
	uint32_t id;
	int idle, i, n = 0;

	b.fd = kt_arena(dev, 128 * KT_MIB, 4096, 0);
	idle = kt_arena(dev, 2 * KT_MIB, 64 << 10, 0);
	CU_ASSERT_FATAL(b.fd >= 0 && idle >= 0);
	CU_ASSERT_FATAL(kva_nl_open(&nl) == 0);
	kt_arena_info(b.fd, &ai);
	b.arena_id = ai.arena_id;
	kt_arena_info(idle, &ai);
	for (i = 0; i < N; i++) {
		sids[i] = kt_session(b.fd);
		CU_ASSERT_FATAL(sids[i] > 0);
	}
	/* Later slots idle longer: every candidate goes to the front. */
	for (i = N - 1; i >= 0; i--)
		CU_ASSERT_EQUAL_FATAL(kt_alloc(b.fd, sids[i], 1, &id, 0), 1);
	pthread_create(&tr, NULL, rank_main, &b);
	pthread_create(&tg, NULL, get_busy_main, &b);
	t0 = now_s();
	while ((now_s() - t0 < 6 || b.rankings < 3) && n < 512 &&
	       now_s() - t0 < 60) {
		double c0 = now_s();

		CU_ASSERT_EQUAL(kva_nl_arena_get(nl, ai.arena_id, &one), 0);
		lat[n++] = now_s() - c0;
		usleep(10000);
	}
	b.stop = 1;
	pthread_join(tr, NULL);
	pthread_join(tg, NULL);
	qsort(lat, n, sizeof(lat[0]), cmp_double);
	median = lat[n / 2];
	printf("\n    %d gets of the idle arena, median %.4f s; %ld rankings, mean %.3f s, longest %.3f s; %ld gets of the busy one\n",
	       n, median, b.rankings, b.total / b.rankings, b.longest, b.gets);
	CU_ASSERT(b.total / b.rankings > 0.02);	/* else it proves nothing */
	/*
	 * Behind genl_mutex the idle arena's get waits for one of the busy
	 * gets, which wait for rankings: a good part of a ranking.
	 */
	CU_ASSERT(median < b.total / b.rankings / 10);
	kva_nl_close(nl);
	close(idle);
	close(b.fd);
}

/*
 * Finding 6: any arena owner could flood the netlink group "events" (one
 * event per session it ends, as fast as it ends them).  Each arena now
 * multicasts at most nl_events_per_sec a second; its own WAIT_EVENT queue
 * still counts every one, and the next event multicast says how many were
 * not (dropped), so a listener knows to resync (kvactl monitor does:
 * kvactl/test_monitor_resyncs).
 */
static void test_netlink_events_rate_limited(void)
{
	struct kva_nl_event ev = { .size = sizeof(ev) };
	long long saved = kt_param("nl_events_per_sec");
	struct kva_arena_info ai;
	struct kva_nl *sub;
	int arena, i, got = 0, ret;
	uint64_t dropped = 0, last = 0;
	double t0, secs;

	CU_ASSERT_FATAL(saved >= 0);
	CU_ASSERT_EQUAL_FATAL(kt_param_set("nl_events_per_sec", 20), 0);
	CU_ASSERT_FATAL(kva_nl_open(&sub) == 0);
	CU_ASSERT_FATAL(kva_nl_subscribe(sub) == 0);
	arena = kt_arena(dev, 2 * KT_MIB, 64 << 10, 0);
	CU_ASSERT_FATAL(arena >= 0);
	kt_arena_info(arena, &ai);
	t0 = now_s();
	for (i = 0; i < 500; i++)
		CU_ASSERT_EQUAL(kt_end(arena, kt_session(arena)), 0);
	/* A second later the budget is back; the next one tells of the rest. */
	usleep(1100000);
	CU_ASSERT_EQUAL(kt_end(arena, kt_session(arena)), 0);
	secs = now_s() - t0;
	/* Every event multicast, each with the number not sent before it. */
	while (last != 501 && (ret = kva_nl_next_event(sub, &ev, 2000)) != 0) {
		ev.size = sizeof(ev);
		if (ret != 1 || ev.kind != KVA_NL_EV_EVENT ||
		    ev.ev.arena_id != ai.arena_id)
			continue;
		got++;
		dropped += ev.ev.dropped;
		last = ev.ev.seq;
	}
	kt_arena_info(arena, &ai);
	printf("\n    501 events posted in %.1f s: %d multicast, %llu dropped\n",
	       secs, got, (unsigned long long)dropped);
	CU_ASSERT_EQUAL(ai.events_posted, 501);
	CU_ASSERT_EQUAL(last, 501);
	CU_ASSERT_EQUAL(got + dropped, 501);
	/* A burst of 20, then 20 a second. */
	CU_ASSERT(got >= 20 && got <= 20 + 20 * secs + 2);
	kt_param_set("nl_events_per_sec", saved);
	kva_nl_close(sub);
	close(arena);
}

/* As NOBODY with 4 MiB of RLIMIT_MEMLOCK. */
static int memlock_child(void *p)
{
	int d = kt_dev_open(), a, b, pw[2];

	(void)p;
	if (d < 0 || pipe(pw))
		return 10;
	a = kt_arena(d, 4 * KT_MIB, 64 << 10, 0);
	if (a < 0)
		return 11;
	b = kt_arena(d, 2 * KT_MIB, 64 << 10, 0);
	if (b != -ENOMEM)
		return 12;
	/* A page of a closed arena in a pipe still counts... */
	if (pages_into_pipe(a, 2 * KT_MIB, pw[1]))
		return 13;
	close(a);
	if (kt_arena(d, 4 * KT_MIB, 64 << 10, 0) != -ENOMEM)
		return 14;
	b = kt_arena(d, 2 * KT_MIB, 64 << 10, 0);
	if (b < 0)
		return 15;
	close(b);
	/* ...until the pipe lets go: then at once, no periodic check. */
	close(pw[0]);
	close(pw[1]);
	a = kt_arena(d, 4 * KT_MIB, 64 << 10, 0);
	if (a < 0)
		return 16;
	close(a);
	return 0;
}

/*
 * Finding 3: arenas did not count against RLIMIT_MEMLOCK, as io_uring's
 * registered buffers, VFIO and the memfd backend's mlock'ed arenas do.
 * Now a creator without CAP_IPC_LOCK pays its user's locked memory, until
 * the pages are really free (a lingering page included).
 */
static void test_arenas_count_against_memlock(void)
{
	struct rlimit four = { 4 * KT_MIB, 4 * KT_MIB };
	pid_t pid;
	int st;

	CU_ASSERT_EQUAL(as_nobody_memlock(memlock_child, NULL, 4 * KT_MIB), 0);
	/* CAP_IPC_LOCK is exempt, as for mlock and io_uring. */
	pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	if (pid == 0) {
		int a = setrlimit(RLIMIT_MEMLOCK, &four) ? -1 :
			kt_arena(dev, 8 * KT_MIB, 64 << 10, 0);

		_exit(a < 0);
	}
	CU_ASSERT(waitpid(pid, &st, 0) == pid && WIFEXITED(st) &&
		  WEXITSTATUS(st) == 0);
}

struct linger_run {
	int pw[2];
	int go[2];
	int ready[2];
	int created;
	int err;
};

/* As NOBODY: 16 MiB arenas, each closed with a page per 2 MiB in a pipe. */
static int linger_child(void *p)
{
	struct linger_run *r = p;
	int d = kt_dev_open(), i, a;
	char b = 0;

	if (d < 0 || fcntl(r->pw[1], F_SETPIPE_SZ, 256 << 10) < 0)
		return 10;
	for (i = 0; i < 8; i++) {
		a = kt_arena(d, 16 * KT_MIB, 64 << 10, 0);
		if (a < 0) {
			r->err = -a;
			break;
		}
		if (pages_into_pipe(a, 16 * KT_MIB, r->pw[1]))
			return 11;
		close(a);
		r->created++;
	}
	if (write(r->ready[1], &b, 1) != 1 || read(r->go[0], &b, 1) != 1)
		return 12;
	return 0;
}

/*
 * Finding 3: a tenant's arena charge went when its arena did, though its
 * pages could stay pinned (a pipe, a GUP pin) and charged to the module's
 * cap: one user could fill max_pinned_mb with lingering pages and lock
 * every other tenant out (ENOSPC).  Now the charge stays with the tenant
 * until the pages are free: the user meets its own quota (EDQUOT), and
 * the others still have room.
 */
static void test_lingering_pages_stay_charged_to_their_tenant(void)
{
	struct kva_tenant q = { .size = sizeof(q), .tenant_id = NOBODY,
				.arena_quota_bytes = 48 * KT_MIB };
	struct linger_run *r = mmap(NULL, sizeof(*r), PROT_READ | PROT_WRITE,
				    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct kva_tenant t;
	char b = 0;
	int st, other;
	pid_t pid;

	CU_ASSERT_FATAL(r != MAP_FAILED);
	CU_ASSERT_EQUAL_FATAL(kt_ioctl(dev, KVA_IOC_TENANT_SET_QUOTA, &q), 0);
	CU_ASSERT_FATAL(pipe(r->pw) == 0 && pipe(r->go) == 0 &&
			pipe(r->ready) == 0);
	pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	if (pid == 0)
		_exit(as_nobody(linger_child, r));
	CU_ASSERT_FATAL(read(r->ready[0], &b, 1) == 1);
	printf("\n    %d arenas of 16 MiB, then %s\n", r->created, strerror(r->err));
	CU_ASSERT_EQUAL(r->created, 3);
	CU_ASSERT_EQUAL(r->err, EDQUOT);
	CU_ASSERT_EQUAL(tenant_info(NOBODY, &t), 0);
	CU_ASSERT_EQUAL(t.arena_bytes, 48 * KT_MIB);
	CU_ASSERT_EQUAL(t.arenas, 3);
	CU_ASSERT_EQUAL(kt_sysfs("lingering_bytes"), (long long)(48 * KT_MIB));
	/* Another tenant is not locked out by them. */
	other = kt_arena(dev, 64 * KT_MIB, 64 << 10, 0);
	CU_ASSERT(other >= 0);
	close(other);
	CU_ASSERT(write(r->go[1], &b, 1) == 1);
	CU_ASSERT(waitpid(pid, &st, 0) == pid && WIFEXITED(st) &&
		  WEXITSTATUS(st) == 0);
	close(r->pw[0]);
	close(r->pw[1]);
	/* The pipe is gone: uncharged at once. */
	CU_ASSERT_EQUAL(tenant_info(NOBODY, &t), 0);
	CU_ASSERT_EQUAL(t.arena_bytes, 0);
	CU_ASSERT_EQUAL(t.arenas, 0);
	CU_ASSERT_EQUAL(kt_sysfs("pinned_bytes"), 0);
	q.arena_quota_bytes = 0;
	CU_ASSERT_EQUAL(kt_ioctl(dev, KVA_IOC_TENANT_SET_QUOTA, &q), 0);
	close(r->go[0]);
	close(r->go[1]);
	close(r->ready[0]);
	close(r->ready[1]);
	munmap(r, sizeof(*r));
}

/* As NOBODY: an arena of the whole cap, its pages kept by a pipe, exit. */
static int holder_child(void *p)
{
	uint64_t bytes = *(uint64_t *)p;
	int d = kt_dev_open(), a, pw[2];

	if (d < 0 || pipe(pw) || fcntl(pw[1], F_SETPIPE_SZ, 256 << 10) < 0)
		return 10;
	a = kt_arena(d, bytes, 64 << 10, 0);
	if (a < 0 || pages_into_pipe(a, bytes, pw[1]))
		return 11;
	close(a);
	return 0;			/* exit: the pipe goes */
}

/*
 * Finding 3: lingering pages went back to the cap only at the next
 * periodic check (up to a second): right after the holder of the pipe
 * exited, the cap was still full and a create got ENOSPC.  A create that
 * would fail on a charge now reaps lingering pages first, and the sysfs
 * totals are as of the read.
 */
static void test_create_reaps_lingering_pages_first(void)
{
	long long saved = kt_param("max_pinned_mb");
	uint64_t bytes = 32 * KT_MIB;
	int a;

	CU_ASSERT_FATAL(saved > 0 && kt_sysfs("pinned_bytes") == 0);
	CU_ASSERT_EQUAL_FATAL(kt_param_set("max_pinned_mb", 32), 0);
	CU_ASSERT_EQUAL(as_nobody(holder_child, &bytes), 0);
	a = kt_arena(dev, bytes, 64 << 10, 0);	/* the cap is "full" */
	CU_ASSERT(a >= 0);
	close(a);
	CU_ASSERT_EQUAL(as_nobody(holder_child, &bytes), 0);
	CU_ASSERT_EQUAL(kt_sysfs("pinned_bytes"), 0);
	CU_ASSERT_EQUAL(kt_sysfs("lingering_bytes"), 0);
	kt_param_set("max_pinned_mb", saved);
}

struct userns_run {
	int to_child[2];
	int to_parent[2];
	uint32_t tenant[3];
	int err;
};

/* Uid 1000, then root of its own user namespace mapping 65,536 uids. */
static int userns_child(void *p)
{
	struct kva_arena_create c = {
		.size = sizeof(c), .bytes = 2 * KT_MIB, .block_size = 64 << 10,
		.numa_node = KVA_NUMA_ANY, .name = "userns",
	};
	struct kva_tenant t = { .size = sizeof(t) };
	struct userns_run *r = p;
	gid_t grp = NOBODY;
	int outside, inside, a;
	char b = 0;

	if (setgroups(1, &grp) || setgid(1000) || setuid(1000))
		return 10;
	outside = kt_dev_open();		/* opened as uid 1000 */
	if (outside < 0)
		return 11;
	if (unshare(CLONE_NEWUSER))
		return errno == EPERM || errno == EINVAL ? 39 : 12;
	/* The parent maps 0-65535 here to 200000-265535, as newuidmap would. */
	if (write(r->to_parent[1], &b, 1) != 1 || read(r->to_child[0], &b, 1) != 1)
		return 13;
	if (setresgid(5, 5, 5) || setresuid(5, 5, 5))	/* 200005 outside */
		return 14;
	a = kt_ioctl(outside, KVA_IOC_ARENA_CREATE, &c);
	if (a < 0)
		return 15;
	r->tenant[0] = c.tenant_id;
	inside = kt_dev_open();			/* opened as 200005 */
	if (inside < 0)
		return 16;
	c.tenant_id = KVA_TENANT_SELF;
	a = kt_ioctl(inside, KVA_IOC_ARENA_CREATE, &c);
	if (a < 0)
		return 17;
	r->tenant[1] = c.tenant_id;
	if (kt_ioctl(inside, KVA_IOC_TENANT_INFO, &t))
		return 18;
	r->tenant[2] = t.tenant_id;
	/* Naming a subordinate uid outright needs CAP_SYS_ADMIN. */
	c.tenant_id = 200005;
	r->err = -kt_ioctl(inside, KVA_IOC_ARENA_CREATE, &c);
	return 0;
}

static int write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY), ret;

	if (fd < 0)
		return -1;
	ret = write(fd, text, strlen(text)) == (ssize_t)strlen(text) ? 0 : -1;
	close(fd);
	return ret;
}

/*
 * Finding 4: the tenant was the caller's effective uid at each call, so a
 * user holding /dev/kvarena acted as up to 65,536 tenants through its
 * subordinate uids (a user namespace mapping them, as newuidmap sets up),
 * multiplying its quota and filling the tenant table.  Now the tenant is
 * the opener's (the file's credentials), and a file opened in a user
 * namespace a user created is that user's.
 */
static void test_tenant_is_the_opener_not_its_subordinate_uids(void)
{
	struct userns_run *r = mmap(NULL, sizeof(*r), PROT_READ | PROT_WRITE,
				    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	char path[64], b = 0;
	int st, rc = -1;
	pid_t pid;

	CU_ASSERT_FATAL(r != MAP_FAILED);
	CU_ASSERT_FATAL(pipe(r->to_child) == 0 && pipe(r->to_parent) == 0);
	pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	if (pid == 0)
		_exit(userns_child(r));
	if (read(r->to_parent[0], &b, 1) == 1) {
		snprintf(path, sizeof(path), "/proc/%d/uid_map", pid);
		CU_ASSERT_EQUAL(write_file(path, "0 200000 65536\n"), 0);
		snprintf(path, sizeof(path), "/proc/%d/gid_map", pid);
		CU_ASSERT_EQUAL(write_file(path, "0 200000 65536\n"), 0);
		CU_ASSERT(write(r->to_child[1], &b, 1) == 1);
	}
	if (waitpid(pid, &st, 0) == pid && WIFEXITED(st))
		rc = WEXITSTATUS(st);
	if (rc == 39) {
		printf("(skipped: no unprivileged user namespaces) ");
	} else {
		printf("\n    tenants: fd from outside %u, fd from inside %u, info %u; naming 200005: %s\n",
		       r->tenant[0], r->tenant[1], r->tenant[2], strerror(r->err));
		CU_ASSERT_EQUAL(rc, 0);
		CU_ASSERT_EQUAL(r->tenant[0], 1000);
		CU_ASSERT_EQUAL(r->tenant[1], 1000);
		CU_ASSERT_EQUAL(r->tenant[2], 1000);
		CU_ASSERT_EQUAL(r->err, EPERM);
	}
	CU_ASSERT_EQUAL(kt_sysfs("tenants") >= 0, 1);
	close(r->to_child[0]);
	close(r->to_child[1]);
	close(r->to_parent[0]);
	close(r->to_parent[1]);
	munmap(r, sizeof(*r));
}

/* Slab memory now, KiB (/proc/meminfo): where block tables live. */
static long long slab_kib(void)
{
	char line[128];
	long long v = -1;
	FILE *f = fopen("/proc/meminfo", "r");

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "Slab: %lld kB", &v) == 1)
			break;
	if (f)
		fclose(f);
	return v;
}

struct share_run {
	long long refs;			/* references the module accepted */
	long long slab_kib;		/* slab growth meanwhile */
	int err;			/* what stopped the sharing */
};

/*
 * As NOBODY: a 2 MiB arena of 512 blocks of 4 KiB, all allocated by one
 * session, then shared whole into one new session after another, up to
 * 2000 of them (a million references, 4 MiB of block tables) unless the
 * module says no.
 */
static int share_child(void *p)
{
	static uint32_t ids[512];
	struct share_run *r = p;
	int d = kt_dev_open(), a, i;
	long long slab0 = slab_kib();
	int64_t owner, sid;

	if (d < 0 || (a = kt_arena(d, 2 * KT_MIB, 4096, 0)) < 0)
		return 10;
	owner = kt_session(a);
	if (owner <= 0 || kt_alloc(a, owner, 512, ids, 0) != 512)
		return 11;
	r->refs = 512;
	for (i = 0; i < 2000; i++) {
		sid = kt_session(a);
		if (sid <= 0)
			return 12;
		r->err = -kt_share(a, sid, 512, ids);
		if (r->err > 0)
			break;
		r->refs += 512;
	}
	r->slab_kib = slab_kib() - slab0;
	close(a);
	return 0;
}

/*
 * Finding 2: up to 65,535 sessions could each hold a reference on every
 * block, each reference a u32 in the session's block table, bounded by
 * nothing the quota or the cap counts: about 64x the arena in kernel memory
 * with 4 KiB blocks.  Now an arena holds at most max_block_refs (16) per
 * block, and a share past that fails with ENOSPC.
 */
static void test_sharing_cannot_multiply_kernel_memory(void)
{
	struct share_run *r = mmap(NULL, sizeof(*r), PROT_READ | PROT_WRITE,
				   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	long long per_block = kt_param("max_block_refs");

	CU_ASSERT_FATAL(r != MAP_FAILED);
	CU_ASSERT_EQUAL(per_block, 16);
	CU_ASSERT_EQUAL(as_nobody(share_child, r), 0);
	printf("\n    %lld references accepted (%lld KiB of them), then %s; slab grew %lld KiB\n",
	       r->refs, r->refs * 4 / 1024, strerror(r->err), r->slab_kib);
	CU_ASSERT_EQUAL(r->err, ENOSPC);
	CU_ASSERT(r->refs <= 512 * 16);
	/* Block tables of 16 x 2 KiB, sessions: far from 4 MiB. */
	CU_ASSERT(r->slab_kib < 1024);
	munmap(r, sizeof(*r));
}

/*
 * Slab in use once what was freed is really free: root writes every
 * cache's `shrink` first.  Under KASAN a freed object waits in the
 * quarantine, still counted in Slab, until its cache is shrunk (the debug
 * lane saw the 1000 x 2 KiB tables this test frees as growth).
 */
static long long settled_slab_kib(int *shrunk)
{
	DIR *dir = opendir("/sys/kernel/slab");
	struct dirent *e;
	char path[320];
	int fd;

	while (dir && (e = readdir(dir))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/sys/kernel/slab/%s/shrink", e->d_name);
		fd = open(path, O_WRONLY);
		if (fd < 0)
			continue;
		/* a cache that cannot be shrunk is counted as it is */
		*shrunk += write(fd, "1", 1) == 1;
		close(fd);
	}
	if (dir)
		closedir(dir);
	return slab_kib();
}

struct churn_run {
	int ready[2];			/* child -> parent: churned, arena open */
	int go[2];			/* parent -> child: measured, close it */
};

/*
 * As NOBODY: 1000 sessions, each allocates the whole arena and frees it;
 * then, the sessions still open, waits for the parent to measure.
 */
static int churn_child(void *p)
{
	static uint32_t ids[512];
	struct churn_run *r = p;
	int d = kt_dev_open(), a, i;
	int64_t sid;
	char c;

	close(r->ready[0]);
	close(r->go[1]);
	if (d < 0 || (a = kt_arena(d, 2 * KT_MIB, 4096, 0)) < 0)
		return 10;
	for (i = 0; i < 1000; i++) {
		sid = kt_session(a);
		if (sid <= 0 || kt_alloc(a, sid, 512, ids, 0) != 512 ||
		    kt_free(a, sid, 512, ids) != 512)
			return 11;
	}
	if (write(r->ready[1], "r", 1) != 1 || read(r->go[0], &c, 1) < 0)
		return 12;
	close(a);
	return 0;
}

/*
 * Finding 2, without sharing: a block table never shrank, so sessions that
 * each held the whole arena once kept a table of its size each (1000 x
 * 2 KiB here, 128 MiB for 65,535 of them).  A table now shrinks as it
 * empties: below max(8, 4 x blocks held) entries.  The parent (root)
 * measures, the child's sessions open, with the caches shrunk.
 */
static void test_block_tables_shrink_when_freed(void)
{
	struct churn_run r;
	long long slab0, grew = -1;
	int st = -1, shrunk = 0;
	pid_t pid;
	char c;

	CU_ASSERT_FATAL(pipe(r.ready) == 0 && pipe(r.go) == 0);
	slab0 = settled_slab_kib(&shrunk);
	pid = fork();
	if (pid == 0) {
		if (setgroups(0, NULL) || setgid(NOBODY) || setuid(NOBODY))
			_exit(99);
		_exit(churn_child(&r));
	}
	close(r.ready[1]);
	close(r.go[0]);
	if (pid > 0 && read(r.ready[0], &c, 1) == 1)
		grew = settled_slab_kib(&shrunk) - slab0;
	/* closing go tells a child still waiting as well as a byte would */
	close(r.go[1]);
	close(r.ready[0]);
	CU_ASSERT_FATAL(pid > 0 && waitpid(pid, &st, 0) == pid);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	printf("\n    1000 sessions that held and freed 512 blocks: slab grew %lld KiB (%d cache shrinks)\n",
	       grew, shrunk);
	CU_ASSERT(grew >= 0 && grew < 1024);
}

/*
 * Finding 5: the header promised "the arena's one read-only dma-buf ...
 * importers map it DMA_TO_DEVICE", but each RDONLY export made a new
 * dma-buf, and importers got the arena's bidirectional mapping.  Now there
 * is one read-only dma-buf per arena (every export an fd for it), and a
 * device importing it gets a mapping of its own, DMA_TO_DEVICE (through an
 * IOMMU the device can only read), next to the read-write one.
 */
static void test_readonly_export_is_one_read_only_dmabuf(void)
{
	struct kva_export e = { .size = sizeof(e), .flags = KVA_EXPORT_RDONLY };
	int arena = kt_arena(dev, 4 * KT_MIB, 64 << 10, 0);
	int ro1, ro2, rw, vgem = kt_vgem_open(), h1, h2;
	struct kva_arena_info ai;
	struct stat s1, s2, s3;

	CU_ASSERT_FATAL(arena >= 0 && vgem >= 0);
	kt_arena_info(arena, &ai);
	ro1 = kt_ioctl(arena, KVA_IOC_EXPORT_DMABUF, &e);
	ro2 = kt_ioctl(arena, KVA_IOC_EXPORT_DMABUF, &e);
	rw = kt_export(arena);
	CU_ASSERT_FATAL(ro1 >= 0 && ro2 >= 0 && rw >= 0);
	CU_ASSERT(!fstat(ro1, &s1) && !fstat(ro2, &s2) && !fstat(rw, &s3));
	CU_ASSERT_EQUAL(s1.st_ino, s2.st_ino);	/* one dma-buf */
	CU_ASSERT_NOT_EQUAL(s1.st_ino, s3.st_ino);
	h1 = kt_vgem_import(vgem, ro1);
	CU_ASSERT(h1 > 0);
	CU_ASSERT_EQUAL(kt_devmaps(ai.arena_id, false), 1);
	CU_ASSERT_EQUAL(kt_devmaps(ai.arena_id, true), 1);
	/* The same device importing the read-write one: a mapping of its own. */
	h2 = kt_vgem_import(vgem, rw);
	CU_ASSERT(h2 > 0);
	CU_ASSERT_EQUAL(kt_devmaps(ai.arena_id, false), 2);
	CU_ASSERT_EQUAL(kt_devmaps(ai.arena_id, true), 1);
	if (h2 > 0)
		kt_vgem_close(vgem, h2);
	if (h1 > 0)
		kt_vgem_close(vgem, h1);
	CU_ASSERT_EQUAL(kt_devmaps(ai.arena_id, false), 0);
	close(vgem);
	close(ro1);
	close(rw);
	close(arena);
	/* ro2 alone keeps the memory; with it, everything goes. */
	CU_ASSERT_EQUAL(kt_sysfs("pinned_bytes"), (long long)(4 * KT_MIB));
	close(ro2);
	CU_ASSERT_EQUAL(kt_sysfs("pinned_bytes"), 0);
}

/* 2 MiB aligned, far from where the kernel places mappings (47-bit VA). */
#define FRESH_VA	0x3f0000000000UL

/* Bytes of vma [start, ...) PMD-mapped from a file, per /proc/self/smaps. */
static long long pmd_mapped_kib(const void *start)
{
	char line[256];
	unsigned long lo, hi;
	long long v = -1;
	bool in = false;
	FILE *f = fopen("/proc/self/smaps", "r");

	while (f && fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2)
			in = lo == (uintptr_t)start;
		else if (in && sscanf(line, "FilePmdMapped: %lld kB", &v) == 1)
			break;
	}
	if (f)
		fclose(f);
	return v;
}

/*
 * Finding 7: user space mapped the arena's 2 MiB pages with 4 KiB page
 * table entries (VM_MIXEDMAP, vm_insert_pages), so every access to a big
 * KV cache walked page tables a THP mapping does not.  Now each 2 MiB page
 * maps with one PMD entry (arena fds align their mappings; libkvarena's
 * kva_map_fd() aligns a dma-buf fd's), and they stay ordinary page
 * mappings: GUP still pins them (vmsplice here; O_DIRECT, RDMA).
 */
static void test_user_mappings_use_2mib_entries(void)
{
	int arena = kt_arena(dev, 8 * KT_MIB, 64 << 10, 0), dmabuf, pw[2];
	struct iovec iov = { .iov_len = 4096 };
	long long whole, dmabuf_kib, split;
	char *m, *d, buf[8];
	size_t i;

	CU_ASSERT_FATAL(arena >= 0);
	/* The module's get_unmapped_area aligns an arena fd's mapping. */
	m = mmap(NULL, 8 * KT_MIB, PROT_READ | PROT_WRITE, MAP_SHARED, arena, 0);
	CU_ASSERT_FATAL(m != MAP_FAILED);
	CU_ASSERT_EQUAL((uintptr_t)m % (2 * KT_MIB), 0);
	munmap(m, 8 * KT_MIB);
	/*
	 * The PMD entries are checked where this process never mapped
	 * anything: a PMD entry needs an empty PMD slot, and munmap keeps a
	 * page table a neighbouring mapping shared at the time, so at a reused
	 * address the kernel may map with PTEs (as it would shmem's THP).  The
	 * debug lane's suite once met such a table.
	 */
	m = mmap((void *)FRESH_VA, 8 * KT_MIB, PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_FIXED_NOREPLACE, arena, 0);
	CU_ASSERT_FATAL(m == (void *)FRESH_VA);
	for (i = 0; i < 8 * KT_MIB; i += 4096)
		m[i] = (char)i;
	whole = pmd_mapped_kib(m);
	CU_ASSERT_EQUAL(whole, 8192);
	/* A dma-buf fd, mapped at an address libkvarena aligned. */
	dmabuf = kt_export(arena);
	CU_ASSERT_FATAL(dmabuf >= 0);
	CU_ASSERT_EQUAL_FATAL(kva_map_fd(dmabuf, 8 * KT_MIB, (void **)&d), 0);
	CU_ASSERT_EQUAL(d[4096 * 3], (char)(4096 * 3));
	dmabuf_kib = pmd_mapped_kib(d);
	CU_ASSERT_EQUAL(dmabuf_kib, 2048);
	/* GUP: a pipe takes a page of the PMD mapping. */
	CU_ASSERT_FATAL(pipe(pw) == 0);
	iov.iov_base = m + 2 * KT_MIB;
	CU_ASSERT_EQUAL(vmsplice(pw[1], &iov, 1, 0), 4096);
	CU_ASSERT_EQUAL(read(pw[0], buf, sizeof(buf)), (ssize_t)sizeof(buf));
	CU_ASSERT_EQUAL(buf[0], (char)(2 * KT_MIB));
	/* A partial unmap splits the PMD; the rest still reads. */
	CU_ASSERT_EQUAL(munmap(m + KT_MIB, 4096), 0);
	CU_ASSERT_EQUAL(m[KT_MIB + 8192], (char)(KT_MIB + 8192));
	split = pmd_mapped_kib(m + KT_MIB + 4096);
	CU_ASSERT_EQUAL(split, 6144);
	printf("\n    FilePmdMapped: arena fd %lld KiB, dma-buf %lld KiB, after a split %lld KiB\n",
	       whole, dmabuf_kib, split);
	munmap(m, KT_MIB);
	munmap(m + KT_MIB + 4096, 7 * KT_MIB - 4096);
	kva_unmap(d, 8 * KT_MIB);
	close(pw[0]);
	close(pw[1]);
	close(dmabuf);
	close(arena);
	CU_ASSERT_EQUAL(kt_sysfs("pinned_bytes"), 0);
}

void kt_register_review35(void)
{
	CU_pSuite s = CU_add_suite("review35", r35_init, r35_clean);

	KT_ADD(s, test_blocks_free_never_efault_after_the_fact);
	KT_ADD(s, test_sysfs_usage_totals_root_only);
	KT_ADD(s, test_netlink_requests_checked_per_command);
	KT_ADD(s, test_netlink_never_waits_for_another_arena);
	KT_ADD(s, test_netlink_events_rate_limited);
	KT_ADD(s, test_sharing_cannot_multiply_kernel_memory);
	KT_ADD(s, test_block_tables_shrink_when_freed);
	KT_ADD(s, test_arenas_count_against_memlock);
	KT_ADD(s, test_lingering_pages_stay_charged_to_their_tenant);
	KT_ADD(s, test_create_reaps_lingering_pages_first);
	KT_ADD(s, test_tenant_is_the_opener_not_its_subordinate_uids);
	KT_ADD(s, test_readonly_export_is_one_read_only_dmabuf);
	KT_ADD(s, test_user_mappings_use_2mib_entries);
	/* Last: against a module with the bug it oopses the guest. */
	KT_ADD(s, test_async_waits_race_ring_teardown);
}
