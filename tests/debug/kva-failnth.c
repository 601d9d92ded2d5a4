// SPDX-License-Identifier: GPL-2.0
/*
 * kva-failnth: fail every allocation of a kvarena operation in turn.
 *
 * For each scenario (arena create, dma-buf export, session create, blocks
 * alloc/share, victims, uring WAIT_EVENT park, netlink get and dump, mmap,
 * vgem import) and N = 1, 2, ...: set up without faults, write N to
 * /proc/thread-self/fail-nth (failslab + fail_page_alloc count every slab
 * and page allocation of this thread), run the one operation, read back
 * whether the fault fired, tear down, and check
 *  - the operation either succeeded or failed with a clean errno
 *    (ENOMEM, ENOBUFS, ENFILE, EMFILE, EFAULT, EAGAIN, EINTR);
 *  - the module's counters (arenas, pinned_bytes, sessions, blocks_used)
 *    are back to zero after teardown;
 * until an N whose fault never fires (every allocation point was failed).
 * The caller runs kmemleak afterwards.  Needs CONFIG_FAULT_INJECTION_DEBUG_FS,
 * FAILSLAB and FAIL_PAGE_ALLOC; configures them (verbose 0, GFP_KERNEL
 * allocations included, order 0 pages included).
 *
 *   kva-failnth [-m MAX_N] [scenario...]
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <linux/genetlink.h>
#include <linux/kvarena.h>
#include <linux/netlink.h>
#include <liburing.h>

#include "../common/kva_guest.h"

struct drm_prime { uint32_t handle, flags; int32_t fd; };
struct drm_gclose { uint32_t handle, pad; };
#define DRM_GEM_CLOSE	_IOW('d', 0x09, struct drm_gclose)
#define DRM_PRIME_FD_TO_HANDLE _IOWR('d', 0x2e, struct drm_prime)

/* A tenant of our own, without quota (the fuzzer sets quotas on 0-3). */
#define FAILNTH_TENANT	4077

static int dev = -1, nthfd = -1, max_n = 3000, failures;
static uint16_t family;

static int wr(const char *path, const char *v)
{
	int fd = open(path, O_WRONLY), ok;

	if (fd < 0)
		return -errno;
	ok = write(fd, v, strlen(v)) == (ssize_t)strlen(v);
	close(fd);
	return ok ? 0 : -EIO;
}



static void nth_arm(int n)
{
	char b[32];

	snprintf(b, sizeof(b), "%d", n);
	if (pwrite(nthfd, b, strlen(b), 0) < 0) {
		perror("fail-nth");
		exit(2);
	}
}

/* Disarm; true if the fault fired. */
static bool nth_fired(void)
{
	char b[32] = { 0 };
	bool fired;

	if (pread(nthfd, b, sizeof(b) - 1, 0) < 0) {
		perror("fail-nth");
		exit(2);
	}
	fired = atoi(b) == 0;
	if (pwrite(nthfd, "0", 1, 0) < 0)
		exit(2);
	return fired;
}

/* ------------------------------------------------------------ fixtures */
struct fx {
	int arena, dmabuf, vgem, nl;
	uint32_t arena_id, blocks_total;
	uint64_t sid, sid2;
	uint32_t ids[16];
	struct io_uring ring;
	bool ring_open;
	struct kva_event ev;
	void *map;
};

static int arena_create(uint32_t *id, uint32_t *total)
{
	struct kva_arena_create c = { .size = sizeof(c), .bytes = 4ULL << 20,
				      .block_size = 256 << 10, .numa_node = KVA_NUMA_ANY,
				      .tenant_id = FAILNTH_TENANT };
	int fd;

	strcpy(c.name, "failnth");
	fd = ioctl(dev, KVA_IOC_ARENA_CREATE, &c);
	if (fd >= 0) {
		*id = c.arena_id;
		*total = c.blocks_total;
	}
	return fd < 0 ? -errno : fd;
}

/* 0 and the new session's id in *sid, or -errno (*sid 0). */
static int sess(int arena, uint64_t *sid)
{
	struct kva_session_create s = { .size = sizeof(s), .cookie = 1 };
	int r = ioctl(arena, KVA_IOC_SESSION_CREATE, &s);

	*sid = r ? 0 : s.session_id;
	return r < 0 ? -errno : r ? -EBADMSG : 0;
}

static int alloc_blocks(int arena, uint64_t sid, uint32_t n, uint32_t *ids)
{
	struct kva_blocks b = { .size = sizeof(b), .session_id = sid, .count = n,
				.ids = (uintptr_t)ids };
	int r = ioctl(arena, KVA_IOC_BLOCKS_ALLOC, &b);

	return r < 0 ? -errno : r;
}

static int nl_open(void)
{
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK };
	int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_GENERIC);

	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* One request; returns 0 or -errno (from the kernel, or the socket). */
static int nl_req(int fd, uint16_t type, uint8_t cmd, int flags, const void *attrs,
		  size_t alen, uint16_t *family_out)
{
	static uint32_t seq;
	struct {
		struct nlmsghdr h;
		struct genlmsghdr g;
		char a[64];
	} req = { 0 };
	char buf[16384];

	req.h.nlmsg_len = NLMSG_LENGTH(GENL_HDRLEN) + alen;
	req.h.nlmsg_type = type;
	req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | flags;
	req.h.nlmsg_seq = ++seq;
	req.g.cmd = cmd;
	req.g.version = 1;
	memcpy(req.a, attrs, alen);
	if (send(fd, &req, req.h.nlmsg_len, 0) < 0)
		return -errno;
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		struct nlmsghdr *h;
		ssize_t n;

		if (poll(&p, 1, 10000) <= 0)
			return -ETIMEDOUT;
		n = recv(fd, buf, sizeof(buf), 0);
		if (n < 0)
			return -errno;
		for (h = (void *)buf; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
			if (h->nlmsg_seq != seq)
				continue;
			if (h->nlmsg_type == NLMSG_ERROR)
				return ((struct nlmsgerr *)NLMSG_DATA(h))->error;
			if (h->nlmsg_type == NLMSG_DONE) {
				int e = 0;

				memcpy(&e, NLMSG_DATA(h), sizeof(e));
				return e;
			}
			if (family_out) {
				struct nlattr *a = (void *)((char *)NLMSG_DATA(h) + GENL_HDRLEN);

				if (a->nla_type == CTRL_ATTR_FAMILY_ID)
					memcpy(family_out, (char *)a + NLA_HDRLEN, 2);
				else if (NLA_ALIGN(a->nla_len) < 64) {
					a = (void *)((char *)a + NLA_ALIGN(a->nla_len));
					if (a->nla_type == CTRL_ATTR_FAMILY_ID)
						memcpy(family_out, (char *)a + NLA_HDRLEN, 2);
				}
			}
		}
	}
}

static int nl_arena_attr(char *a, uint32_t id)
{
	struct nlattr *na = (void *)a;

	na->nla_type = KVA_NL_A_ARENA_ID;
	na->nla_len = NLA_HDRLEN + 4;
	memcpy(a + NLA_HDRLEN, &id, 4);
	return NLA_ALIGN(na->nla_len);
}


/* ------------------------------------------------------------ scenarios */
struct scenario {
	const char *name;
	int (*setup)(struct fx *f);
	int (*op)(struct fx *f);	/* 0 or -errno */
	int (*check)(struct fx *f);	/* after a successful op: 0 or -errno */
};

static int setup_none(struct fx *f) { (void)f; return 0; }

static int setup_arena(struct fx *f)
{
	f->arena = arena_create(&f->arena_id, &f->blocks_total);
	return f->arena < 0 ? f->arena : 0;
}

static int setup_session(struct fx *f)
{
	int r = setup_arena(f);
	struct kva_policy_set ps = { .size = sizeof(ps), .policy = KVA_POLICY_TOOLWAIT };

	if (r)
		return r;
	r = sess(f->arena, &f->sid);
	if (!r)
		r = sess(f->arena, &f->sid2);
	if (r)
		return r;
	/* pressure on the first allocation: the event path allocates too */
	ps.low_wm = f->blocks_total - 1;
	ps.high_wm = f->blocks_total;
	if (ioctl(f->arena, KVA_IOC_ARENA_SET_POLICY, &ps))
		return -errno;
	return 0;
}

static int setup_blocks(struct fx *f)
{
	int r = setup_session(f);

	if (r)
		return r;
	r = alloc_blocks(f->arena, f->sid, 4, f->ids);
	return r < 0 ? r : 0;
}

static int setup_ring(struct fx *f)
{
	int r = setup_session(f);

	if (r)
		return r;
	r = io_uring_queue_init(8, &f->ring, 0);
	if (r)
		return r;
	f->ring_open = true;
	return 0;
}

static int setup_nl(struct fx *f)
{
	int r = setup_blocks(f);

	if (r)
		return r;
	f->nl = nl_open();
	return f->nl < 0 ? -errno : 0;
}

static int setup_vgem(struct fx *f)
{
	struct kva_export e = { .size = sizeof(e), .flags = KVA_EXPORT_CLOEXEC };
	int r = setup_arena(f);

	if (r)
		return r;
	f->vgem = kvg_open_vgem();
	if (f->vgem < 0)
		return -ENODEV;
	f->dmabuf = ioctl(f->arena, KVA_IOC_EXPORT_DMABUF, &e);
	return f->dmabuf < 0 ? -errno : 0;
}

static int op_create(struct fx *f)
{
	f->arena = arena_create(&f->arena_id, &f->blocks_total);
	return f->arena < 0 ? f->arena : 0;
}

static int check_arena(struct fx *f)
{
	struct kva_arena_info i = { .size = sizeof(i) };

	if (ioctl(f->arena, KVA_IOC_ARENA_INFO, &i))
		return -errno;
	return i.blocks_total == f->blocks_total && i.blocks_free == i.blocks_total ? 0 : -EBADMSG;
}

static int op_export(struct fx *f)
{
	struct kva_export e = { .size = sizeof(e), .flags = KVA_EXPORT_CLOEXEC };

	f->dmabuf = ioctl(f->arena, KVA_IOC_EXPORT_DMABUF, &e);
	return f->dmabuf < 0 ? -errno : 0;
}

static int op_session(struct fx *f)
{
	return sess(f->arena, &f->sid);
}

static int op_alloc(struct fx *f)
{
	int r = alloc_blocks(f->arena, f->sid, 8, f->ids);

	return r < 0 ? r : r == 8 ? 0 : -EBADMSG;
}

static int check_alloc(struct fx *f)
{
	struct kva_arena_info i = { .size = sizeof(i) };

	if (ioctl(f->arena, KVA_IOC_ARENA_INFO, &i))
		return -errno;
	return i.blocks_free == i.blocks_total - 8 ? 0 : -EBADMSG;
}

static int op_share(struct fx *f)
{
	struct kva_blocks b = { .size = sizeof(b), .session_id = f->sid2, .count = 4,
				.ids = (uintptr_t)f->ids };

	return ioctl(f->arena, KVA_IOC_BLOCKS_SHARE, &b) < 0 ? -errno : 0;
}

static int op_free(struct fx *f)
{
	struct kva_blocks b = { .size = sizeof(b), .session_id = f->sid, .count = 4,
				.ids = (uintptr_t)f->ids };

	return ioctl(f->arena, KVA_IOC_BLOCKS_FREE, &b) < 0 ? -errno : 0;
}

static int op_end(struct fx *f)
{
	struct kva_session_end e = { .size = sizeof(e), .session_id = f->sid };

	return ioctl(f->arena, KVA_IOC_SESSION_END, &e) < 0 ? -errno : 0;
}

static int op_victims(struct fx *f)
{
	struct kva_victim v[8];
	struct kva_victims a = { .size = sizeof(a), .max = 8, .victims = (uintptr_t)v,
				 .victim_size = sizeof(*v),
				 .policy = KVA_POLICY_ARENA };

	return ioctl(f->arena, KVA_IOC_ARENA_VICTIMS, &a) < 0 ? -errno : 0;
}

/* Park a WAIT_EVENT (and an ARENA_INFO twin), then post an event unarmed. */
static int op_uring(struct fx *f)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&f->ring);
	struct kva_uring_cmd pdu = { .arg = (uintptr_t)&f->ev };
	int r;

	memset(&f->ev, 0, sizeof(f->ev));
	f->ev.size = sizeof(f->ev);
	io_uring_prep_rw(IORING_OP_URING_CMD, sqe, f->arena, NULL, 0, 0);
	sqe->cmd_op = KVA_URING_WAIT_EVENT;
	memcpy(sqe->cmd, &pdu, sizeof(pdu));
	io_uring_sqe_set_data64(sqe, 1);
	r = io_uring_submit(&f->ring);
	if (r < 0)
		return r;
	return r == 1 ? 0 : -EBADMSG;
}

static int check_uring(struct fx *f)
{
	struct kva_session_end e = { .size = sizeof(e), .session_id = f->sid2 };
	struct __kernel_timespec ts = { .tv_sec = 5 };
	struct io_uring_cqe *cqe;
	int r;

	/* a parked command completes with the event; a failed one already did */
	if (ioctl(f->arena, KVA_IOC_SESSION_END, &e))
		return -errno;
	r = io_uring_wait_cqe_timeout(&f->ring, &cqe, &ts);
	if (r)
		return r;
	r = cqe->res;
	io_uring_cqe_seen(&f->ring, cqe);
	if (r == -ENOMEM || r == -EAGAIN)
		return 1;	/* a clean failure reported in the CQE */
	return r == KVA_EVENT_SESSION_ENDED || r == KVA_EVENT_PRESSURE ? 0 : (r < 0 ? r : -EBADMSG);
}

static int op_nl_get(struct fx *f)
{
	char a[16];
	int n = nl_arena_attr(a, f->arena_id);

	return nl_req(f->nl, family, KVA_NL_CMD_ARENA_GET, 0, a, n, NULL);
}

static int op_nl_dump_arenas(struct fx *f)
{
	return nl_req(f->nl, family, KVA_NL_CMD_ARENA_GET, NLM_F_DUMP, NULL, 0, NULL);
}

static int op_nl_dump_sessions(struct fx *f)
{
	char a[16];
	int n = nl_arena_attr(a, f->arena_id);

	return nl_req(f->nl, family, KVA_NL_CMD_SESSION_GET, NLM_F_DUMP, a, n, NULL);
}

static int op_nl_policy(struct fx *f)
{
	char a[32];
	int n = nl_arena_attr(a, f->arena_id);
	struct nlattr *p = (void *)(a + n);
	uint32_t pol = KVA_POLICY_LRU;

	p->nla_type = KVA_NL_A_POLICY;
	p->nla_len = NLA_HDRLEN + 4;
	memcpy(a + n + NLA_HDRLEN, &pol, 4);
	return nl_req(f->nl, family, KVA_NL_CMD_POLICY_SET, 0, a, n + 8, NULL);
}

static int op_mmap(struct fx *f)
{
	f->map = mmap(NULL, 4 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, f->arena, 0);
	if (f->map == MAP_FAILED) {
		f->map = NULL;
		return -errno;
	}
	return 0;
}

static int op_vgem(struct fx *f)
{
	struct drm_prime p = { .fd = f->dmabuf };
	struct drm_gclose c = { 0 };

	if (ioctl(f->vgem, DRM_PRIME_FD_TO_HANDLE, &p))
		return -errno;
	c.handle = p.handle;
	ioctl(f->vgem, DRM_GEM_CLOSE, &c);
	return 0;
}

static const struct scenario scenarios[] = {
	{ "arena_create", setup_none, op_create, check_arena },
	{ "export", setup_arena, op_export, NULL },
	{ "session_create", setup_arena, op_session, NULL },
	{ "blocks_alloc", setup_session, op_alloc, check_alloc },
	{ "blocks_share", setup_blocks, op_share, NULL },
	{ "blocks_free", setup_blocks, op_free, NULL },
	{ "session_end", setup_blocks, op_end, NULL },
	{ "victims", setup_blocks, op_victims, NULL },
	{ "uring_wait", setup_ring, op_uring, check_uring },
	{ "nl_arena_get", setup_nl, op_nl_get, NULL },
	{ "nl_arena_dump", setup_nl, op_nl_dump_arenas, NULL },
	{ "nl_session_dump", setup_nl, op_nl_dump_sessions, NULL },
	{ "nl_policy_set", setup_nl, op_nl_policy, NULL },
	{ "mmap", setup_arena, op_mmap, NULL },
	{ "vgem_import", setup_vgem, op_vgem, NULL },
};

static void teardown(struct fx *f)
{
	if (f->map)
		munmap(f->map, 4 << 20);
	if (f->ring_open)
		io_uring_queue_exit(&f->ring);
	if (f->nl >= 0)
		close(f->nl);
	if (f->dmabuf >= 0)
		close(f->dmabuf);
	if (f->vgem >= 0)
		close(f->vgem);
	if (f->arena >= 0)
		close(f->arena);
}

static bool clean_errno(int e)
{
	return e == ENOMEM || e == ENOBUFS || e == ENFILE || e == EMFILE || e == EFAULT ||
	       e == EAGAIN || e == EINTR;
}

static int run(const struct scenario *s)
{
	int n, fired_n = 0, fails = 0, okays = 0, bad = 0;
	char why[256];

	for (n = 1; n <= max_n; n++) {
		struct fx f = { .arena = -1, .dmabuf = -1, .vgem = -1, .nl = -1 };
		bool fired;
		int r, c = 0;

		r = s->setup(&f);
		if (r) {
			teardown(&f);
			if (r == -ENODEV) {
				printf("failnth: %-16s skipped (no vgem)\n", s->name);
				return 0;
			}
			printf("failnth: %-16s FAIL: setup failed without faults: %s\n", s->name,
			       strerror(-r));
			return 1;
		}
		nth_arm(n);
		r = s->op(&f);
		fired = nth_fired();
		if (!r && s->check)
			c = s->check(&f);
		if (fired)
			fired_n++;
		if (r) {
			fails++;
			if (!fired || !clean_errno(-r)) {
				printf("failnth: %-16s FAIL: fault %d: %s (%s)\n", s->name, n,
				       strerror(-r), fired ? "unexpected errno" : "fault did not fire");
				bad++;
			}
		} else {
			okays++;
			if (c < 0) {
				printf("failnth: %-16s FAIL: fault %d: op succeeded, state check: %s\n",
				       s->name, n, strerror(-c));
				bad++;
			}
		}
		teardown(&f);
		if (!kvg_counters_zero(300, 10000, why, sizeof(why))) {
			printf("failnth: %-16s FAIL: fault %d (%s): leak: %s\n", s->name, n,
			       r ? strerror(-r) : "op succeeded", why);
			bad++;
		}
		if (!fired)
			break;	/* the op has fewer than n allocations: all failed once */
		if (bad > 5)
			break;
	}
	printf("failnth: %-16s %s: %d allocation points failed (%d errors returned, %d absorbed)\n",
	       s->name, bad ? "FAIL" : "ok", fired_n, fails, fired_n - fails);
	return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
	int opt, rc = 0, ran = 0;
	char path[64];

	while ((opt = getopt(argc, argv, "m:")) != -1) {
		if (opt == 'm')
			max_n = atoi(optarg);
		else
			return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (const char *d = "failslab", *e = "fail_page_alloc"; d; d = e, e = NULL) {
		char p[128];

		snprintf(p, sizeof(p), "/sys/kernel/debug/%s/ignore-gfp-wait", d);
		if (wr(p, "N")) {
			fprintf(stderr, "failnth: %s: no fault injection (CONFIG_FAULT_INJECTION_DEBUG_FS, FAILSLAB, FAIL_PAGE_ALLOC)\n", p);
			return 77;
		}
		snprintf(p, sizeof(p), "/sys/kernel/debug/%s/verbose", d);
		wr(p, "0");
		snprintf(p, sizeof(p), "/sys/kernel/debug/%s/probability", d);
		wr(p, "0");	/* only fail-nth fires */
		snprintf(p, sizeof(p), "/sys/kernel/debug/%s/times", d);
		wr(p, "-1");
	}
	wr("/sys/kernel/debug/fail_page_alloc/min-order", "0");
	wr("/sys/kernel/debug/fail_page_alloc/ignore-gfp-highmem", "N");
	dev = open("/dev/kvarena", O_RDWR | O_CLOEXEC);
	if (dev < 0) {
		perror("/dev/kvarena");
		return 2;
	}
	{
		struct kva_tenant t = { .size = sizeof(t), .tenant_id = FAILNTH_TENANT };

		if (ioctl(dev, KVA_IOC_TENANT_SET_QUOTA, &t))
			perror("TENANT_SET_QUOTA");
	}
	{
		int nl = nl_open();
		char a[32] = { 0 };
		struct nlattr *na = (void *)a;

		na->nla_type = CTRL_ATTR_FAMILY_NAME;
		na->nla_len = NLA_HDRLEN + sizeof(KVA_GENL_NAME);
		memcpy(a + NLA_HDRLEN, KVA_GENL_NAME, sizeof(KVA_GENL_NAME));
		if (nl < 0 || nl_req(nl, GENL_ID_CTRL, CTRL_CMD_GETFAMILY, 0, a,
				     NLA_ALIGN(na->nla_len), &family) || !family) {
			fprintf(stderr, "failnth: cannot resolve the kvarena genl family\n");
			return 2;
		}
		close(nl);
	}
	snprintf(path, sizeof(path), "/proc/self/task/%d/fail-nth", gettid());
	nthfd = open(path, O_RDWR);
	if (nthfd < 0) {
		perror(path);
		return 77;
	}
	for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++) {
		bool want = optind >= argc;

		for (int a = optind; a < argc; a++)
			want |= !strcmp(argv[a], scenarios[i].name);
		if (!want)
			continue;
		ran++;
		rc |= run(&scenarios[i]);
	}
	failures = rc;
	printf("failnth: %d scenario(s): %s\n", ran, rc ? "FAIL" : "PASS");
	return rc ? 1 : 0;
}
