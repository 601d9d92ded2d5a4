// SPDX-License-Identifier: GPL-2.0
/*
 * kva-fuzz: a seeded, reproducible fuzzer for kvarena.ko.
 *
 * Several processes x threads run random sequences of valid and invalid
 * operations on /dev/kvarena, arena fds and dma-buf fds: ioctls with random
 * sizes, flags, ids and pads; io_uring uring_cmds and parked WAIT_EVENTs
 * with random acks; generic netlink requests with random attributes; fd
 * passing over a Unix socket between processes; mmap/munmap and page
 * touching; dma-buf import into vgem; forks; and the supervisor SIGKILLs
 * children at random points and respawns them.
 *
 * Reproducibility: each thread's op sequence is a pure function of
 * (seed, process, generation, thread) -- ops never depend on results, they
 * name slots that are resolved when they run.  Interleavings and kill times
 * are not reproducible; single-threaded replay of one thread's ops is.
 *
 * Failure: an errno outside the op's documented class, a broken invariant
 * of a valid op, a child that dies of a signal nobody sent, a hang, a kernel
 * report in /dev/kmsg (KASAN, lockdep, WARN, BUG, ODEBUG, kmemleak), or (-z)
 * module counters not back to zero at the end.  The seed is printed, then
 * the failing thread is replayed alone and shrunk to a minimal sequence.
 *
 *   kva-fuzz [-s SEED] [-n OPS] [-t SECONDS] [-p PROCS] [-j THREADS]
 *            [-k KILLS_PER_SEC] [-z] [-v] [-x OP[,OP...]] [-R PROC:GEN:THREAD:NOPS]
 * -x leaves out op kinds (names as printed, e.g. VGEM,GEM_CLOSE); the op
 * streams then differ, so pass the same -x to reproduce.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <linux/dma-buf.h>
#include <linux/genetlink.h>
#include <linux/kvarena.h>
#include <linux/netlink.h>
#include <liburing.h>

#include "../common/kva_guest.h"
#include "kvarena.h"	/* kva_send_fds(), kva_recv_fds() */

#define MIB		(1ULL << 20)
#define NSLOT		4
#define NUBUF		24
#define MAXPROC		16
#define MAXTHR		16
#define NPAIRS		64
#define NHIST		32

/* ------------------------------------------------------------ DRM (vgem) */
struct fz_drm_prime_handle { uint32_t handle, flags; int32_t fd; };
struct fz_drm_gem_close { uint32_t handle, pad; };
#define FZ_DRM_IOCTL_GEM_CLOSE	_IOW('d', 0x09, struct fz_drm_gem_close)
#define FZ_DRM_IOCTL_PRIME_FD_TO_HANDLE _IOWR('d', 0x2e, struct fz_drm_prime_handle)

/* ------------------------------------------------------------ rng */
static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

struct rng { uint64_t s; };
static uint64_t rnd(struct rng *r) { r->s += 0x9e3779b97f4a7c15ULL; return mix64(r->s); }
static uint32_t below(struct rng *r, uint32_t n) { return n ? (uint32_t)(rnd(r) % n) : 0; }
static bool chance(struct rng *r, unsigned int pct) { return below(r, 100) < pct; }

/* ------------------------------------------------------------ ops */
enum {
	OP_VERSION, OP_ARENA_CREATE, OP_ARENA_CLOSE, OP_INFO, OP_EXPORT,
	OP_DMABUF_CLOSE, OP_SESS_CREATE, OP_SESS_END, OP_SET_STATE,
	OP_SESS_INFO, OP_ALLOC, OP_FREE, OP_SHARE, OP_POLICY, OP_VICTIMS,
	OP_TENANT, OP_MMAP, OP_MUNMAP, OP_TOUCH, OP_URING, OP_WAIT,
	OP_RING_CLOSE, OP_NETLINK, OP_FD_SEND, OP_FD_RECV, OP_VGEM,
	OP_GEM_CLOSE, OP_DMABUF_SYNC, OP_FORK, OP_RAW_IOCTL, OP_COUNT
};

static const char *const op_names[OP_COUNT] = {
	"VERSION", "ARENA_CREATE", "ARENA_CLOSE", "INFO", "EXPORT",
	"DMABUF_CLOSE", "SESS_CREATE", "SESS_END", "SET_STATE", "SESS_INFO",
	"ALLOC", "FREE", "SHARE", "POLICY", "VICTIMS", "TENANT", "MMAP",
	"MUNMAP", "TOUCH", "URING", "WAIT", "RING_CLOSE", "NETLINK",
	"FD_SEND", "FD_RECV", "VGEM", "GEM_CLOSE", "DMABUF_SYNC", "FORK",
	"RAW_IOCTL",
};

/* Relative weights (-x NAME sets one to 0). */
static unsigned int op_weight[OP_COUNT] = {
	[OP_VERSION] = 2, [OP_ARENA_CREATE] = 5, [OP_ARENA_CLOSE] = 2,
	[OP_INFO] = 4, [OP_EXPORT] = 3, [OP_DMABUF_CLOSE] = 2,
	[OP_SESS_CREATE] = 8, [OP_SESS_END] = 4, [OP_SET_STATE] = 6,
	[OP_SESS_INFO] = 3, [OP_ALLOC] = 10, [OP_FREE] = 8, [OP_SHARE] = 3,
	[OP_POLICY] = 2, [OP_VICTIMS] = 3, [OP_TENANT] = 1, [OP_MMAP] = 3,
	[OP_MUNMAP] = 2, [OP_TOUCH] = 3, [OP_URING] = 8, [OP_WAIT] = 3,
	[OP_RING_CLOSE] = 1, [OP_NETLINK] = 5, [OP_FD_SEND] = 2,
	[OP_FD_RECV] = 2, [OP_VGEM] = 2, [OP_GEM_CLOSE] = 1,
	[OP_DMABUF_SYNC] = 1, [OP_FORK] = 1, [OP_RAW_IOCTL] = 3,
};

struct op {
	uint8_t kind, slot, slot2, variant;
	uint32_t size, a, b, c;
	uint64_t x, y, junk;
};

static void gen_op(struct rng *r, struct op *o)
{
	static unsigned int total;
	unsigned int i, w;

	if (!total)
		for (i = 0; i < OP_COUNT; i++)
			total += op_weight[i];
	w = below(r, total);
	for (i = 0; i < OP_COUNT - 1 && w >= op_weight[i]; i++)
		w -= op_weight[i];
	memset(o, 0, sizeof(*o));
	o->kind = i;
	o->slot = below(r, NSLOT);
	o->slot2 = below(r, NSLOT);
	o->variant = below(r, 100);	/* < 70: the valid form */
	o->size = (uint32_t)rnd(r);
	o->a = (uint32_t)rnd(r);
	o->b = (uint32_t)rnd(r);
	o->c = (uint32_t)rnd(r);
	o->x = rnd(r);
	o->y = rnd(r);
	o->junk = rnd(r);
}

static void describe(const struct op *o, char *buf, size_t len)
{
	snprintf(buf, len, "%-12s slot=%u slot2=%u variant=%u size=%#x a=%#x b=%#x c=%#x x=%#" PRIx64 " y=%#" PRIx64,
		 op_names[o->kind], o->slot, o->slot2, o->variant, o->size,
		 o->a, o->b, o->c, o->x, o->y);
}

/* ------------------------------------------------------------ shared state */
struct shm {
	atomic_ulong ops;		/* ops done, all processes */
	atomic_int stop;
	atomic_int failed;
	int fail_proc, fail_gen, fail_tid;
	uint64_t fail_opno;
	char fail_msg[1024];
	/* Last op started per process slot and thread (for crash context). */
	atomic_ulong cur_op[MAXPROC][MAXTHR];
	int cur_gen[MAXPROC];
	/* Kernel calls per op kind that succeeded / failed (coverage). */
	atomic_ulong ok[OP_COUNT], err[OP_COUNT];
};

static __thread int cur_kind;

static struct shm *shm;
static uint64_t g_seed;
static unsigned long g_nops = 20000;
static unsigned int g_secs = 60, g_procs = 3, g_threads = 3;
static double g_kills = 1.0;
static int g_verbose, g_check_zero;
static int g_sock[2] = { -1, -1 };	/* SOCK_DGRAM pair: fd passing */
static bool g_replay;			/* single-threaded replay: quiet */

struct pair { uint64_t sid; uint32_t id; };

struct slot {
	int fd;
	int kind;			/* 0 empty, 1 arena */
	bool shared;			/* others may act on it: no strict checks */
	uint32_t arena_id, blocks_total;
	uint64_t sids[8];
	unsigned int nsids;
	struct pair pairs[NPAIRS];
	unsigned int npairs;
};

struct ubuf {
	union {
		struct kva_event ev;
		char raw[4200];
	};
	uint32_t ids[KVA_MAX_BATCH + 4];
	bool busy;
};

struct tctx {
	int proc, gen, tid;
	uint64_t opno;
	int dev;
	struct slot arenas[NSLOT];
	int dmabufs[NSLOT];
	struct { void *addr; size_t len; int prot; } maps[NSLOT];
	struct io_uring ring;
	bool ring_open;
	struct ubuf *ubufs;
	int nl;
	uint16_t family;
	uint32_t mcgrp;
	uint32_t nl_seq;
	int vgem;
	uint32_t handles[8];
	char *guard;			/* page 0 RW, page 1 PROT_NONE */
	char *ro;			/* read-only page */
	uint32_t *ids;			/* KVA_MAX_BATCH + 4 */
	char hist[NHIST][200];		/* last ops, for the report */
	unsigned int nhist;
};

static void fail(struct tctx *t, const struct op *o, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void fail(struct tctx *t, const struct op *o, const char *fmt, ...)
{
	char msg[400], d[200];
	va_list ap;
	int expected = 0;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	describe(o, d, sizeof(d));
	if (atomic_compare_exchange_strong(&shm->failed, &expected, 1)) {
		shm->fail_proc = t->proc;
		shm->fail_gen = t->gen;
		shm->fail_tid = t->tid;
		shm->fail_opno = t->opno;
		snprintf(shm->fail_msg, sizeof(shm->fail_msg), "op #%" PRIu64 " %s: %s",
			 t->opno, d, msg);
	}
	if (!g_replay || g_verbose)
		fprintf(stderr, "kva-fuzz: FAIL proc %d gen %d thread %d op #%" PRIu64 ": %s: %s\n",
			t->proc, t->gen, t->tid, t->opno, d, msg);
	_exit(3);
}

/* errno classes */
typedef unsigned __int128 ecls_t;
#define E(x) ((ecls_t)1 << (x))
static const ecls_t EC_IOCTL = E(EINVAL) | E(E2BIG) | E(EFAULT) | E(ENOTTY) |
	E(ENOENT) | E(ENOSPC) | E(EDQUOT) | E(ENOMEM) | E(EEXIST) | E(EALREADY) |
	E(EBADF) | E(EAGAIN) | E(EMFILE) | E(EINTR) | E(EPERM) | E(EOPNOTSUPP);
static const ecls_t EC_URING = E(EINVAL) | E(E2BIG) | E(EFAULT) | E(ENOTTY) |
	E(ENOENT) | E(ENOSPC) | E(EDQUOT) | E(ENOMEM) | E(EEXIST) | E(EALREADY) |
	E(EBADF) | E(EAGAIN) | E(EINTR) | E(EPERM) | E(EOPNOTSUPP) | E(ECANCELED) |
	E(EBUSY);
static const ecls_t EC_MMAP = E(EINVAL) | E(EBADF) | E(ENODEV) | E(EACCES) |
	E(ENOMEM) | E(EAGAIN) | E(EPERM) | E(EFAULT) | E(EOVERFLOW);
static const ecls_t EC_NL = E(EINVAL) | E(ENOENT) | E(EPERM) | E(EOPNOTSUPP) |
	E(ERANGE) | E(EMSGSIZE) | E(ENOMEM) | E(E2BIG) | E(EFAULT) | E(ENOBUFS);
static const ecls_t EC_DRM = E(EINVAL) | E(EBADF) | E(ENOENT) | E(ENOMEM) |
	E(ENOSPC) | E(EOPNOTSUPP) | E(ENODEV) | E(ENOTTY) | E(EFAULT) | E(EPERM);

static void expect(struct tctx *t, const struct op *o, const char *what,
		   long ret, ecls_t cls)
{
	int e;

	if (ret >= 0)
		return;
	e = (int)-ret;
	if (e < 128 && (cls & E(e)))
		return;
	fail(t, o, "%s: unexpected error %d (%s)", what, e, strerror(e));
}

static void note(long ret)
{
	if (ret < 0)
		atomic_fetch_add(&shm->err[cur_kind], 1);
	else
		atomic_fetch_add(&shm->ok[cur_kind], 1);
}

static long sys_ioctl(int fd, unsigned long cmd, void *arg)
{
	int ret = ioctl(fd, cmd, arg);

	note(ret < 0 ? -errno : ret);
	return ret < 0 ? -errno : ret;
}

/* ------------------------------------------------------------ helpers */
/* A struct size: mostly right, sometimes old, short, long, huge. */
static uint32_t pick_size(const struct op *o, uint32_t ver0, uint32_t cur, bool valid)
{
	if (valid)
		return (o->size & 1) ? cur : ver0;
	switch (o->size % 9) {
	case 0: return 0;
	case 1: return ver0 - 1 - (o->size >> 8) % ver0;
	case 2: return cur + 8;
	case 3: return KVA_STRUCT_MAX;
	case 4: return KVA_STRUCT_MAX + 1 + (o->size >> 12) % 64;
	case 5: return o->size;
	case 6: return cur + (o->size >> 8) % 256;
	case 7: return ver0;
	default: return cur;
	}
}

/* Fill a struct buffer: size, then zero or (invalid forms) random tail. */
static void *argbuf(struct tctx *t, const struct op *o, void *buf, size_t buflen,
		    uint32_t size, bool junk_tail, size_t known)
{
	memset(buf, 0, buflen);
	if (junk_tail && size > known && size <= buflen)
		((unsigned char *)buf)[known + (o->junk >> 8) % (size - known)] = (uint8_t)o->junk | 1;
	memcpy(buf, &size, 4);
	/* Pointer forms for the invalid variants. */
	if (o->variant >= 95)
		return NULL;
	if (o->variant >= 92)
		return t->ro;
	if (o->variant >= 89 && size >= 8 && size <= 4096)
		return t->guard + 4096 - (size / 2 & ~3U);	/* straddles the guard */
	return buf;
}

static int slot_arena_fd(struct tctx *t, const struct op *o)
{
	struct slot *s = &t->arenas[o->slot];

	if (o->variant >= 97)
		return (int)(o->a % 64);	/* any fd number */
	if (o->variant == 96)
		return t->dmabufs[o->slot];
	if (o->variant == 95)
		return t->dev;
	return s->fd;
}

static void slot_reset(struct slot *s)
{
	if (s->fd >= 0)
		close(s->fd);
	memset(s, 0, sizeof(*s));
	s->fd = -1;
}

static void pairs_drop_sid(struct slot *s, uint64_t sid)
{
	unsigned int i = 0;

	while (i < s->npairs) {
		if (s->pairs[i].sid == sid)
			s->pairs[i] = s->pairs[--s->npairs];
		else
			i++;
	}
}

static void sid_drop(struct slot *s, uint64_t sid)
{
	unsigned int i;

	for (i = 0; i < s->nsids; i++)
		if (s->sids[i] == sid) {
			s->sids[i] = s->sids[--s->nsids];
			break;
		}
	pairs_drop_sid(s, sid);
}

/* A live id; else a small one, a 32-bit one or any 64-bit one. */
static uint64_t pick_sid(struct slot *s, const struct op *o)
{
	if (s->nsids && o->variant < 80)
		return s->sids[o->b % s->nsids];
	if (o->variant < 90)
		return o->b % 8;
	return o->variant < 95 ? o->b : o->y;
}

/* ------------------------------------------------------------ netlink */
static int nl_send(struct tctx *t, const void *buf, size_t len)
{
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK };

	return sendto(t->nl, buf, len, 0, (struct sockaddr *)&sa, sizeof(sa)) < 0 ? -errno : 0;
}

/* Receive until the reply to seq ends; returns 0 or -errno from the kernel. */
static int nl_recv(struct tctx *t, uint32_t seq, int timeout_ms,
		   int (*cb)(struct tctx *, struct nlmsghdr *))
{
	static __thread char buf[65536];

	for (;;) {
		struct pollfd p = { .fd = t->nl, .events = POLLIN };
		struct nlmsghdr *h;
		ssize_t n;

		if (poll(&p, 1, timeout_ms) <= 0)
			return -ETIMEDOUT;
		n = recv(t->nl, buf, sizeof(buf), 0);
		if (n < 0) {
			if (errno == ENOBUFS || errno == EINTR)
				continue;
			return -errno;
		}
		for (h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
			if (h->nlmsg_seq != seq)
				continue;	/* multicast events, stale replies */
			if (h->nlmsg_type == NLMSG_ERROR) {
				struct nlmsgerr *e = NLMSG_DATA(h);

				return e->error;
			}
			if (h->nlmsg_type == NLMSG_DONE) {
				int err = 0;

				if (h->nlmsg_len >= NLMSG_LENGTH(sizeof(int)))
					memcpy(&err, NLMSG_DATA(h), sizeof(err));
				return err;	/* a dump ends here */
			}
			if (cb)
				cb(t, h);
		}
	}
}

static int nl_family_cb(struct tctx *t, struct nlmsghdr *h)
{
	struct genlmsghdr *g = NLMSG_DATA(h);
	struct nlattr *a = (struct nlattr *)((char *)g + GENL_HDRLEN);
	int len = (int)h->nlmsg_len - NLMSG_LENGTH(GENL_HDRLEN);

	while (len >= (int)NLA_HDRLEN && a->nla_len >= NLA_HDRLEN && a->nla_len <= len) {
		if ((a->nla_type & NLA_TYPE_MASK) == CTRL_ATTR_FAMILY_ID)
			memcpy(&t->family, (char *)a + NLA_HDRLEN, 2);
		if ((a->nla_type & NLA_TYPE_MASK) == CTRL_ATTR_MCAST_GROUPS) {
			/* nest of nests: [idx] { NAME, ID } */
			struct nlattr *g1 = (struct nlattr *)((char *)a + NLA_HDRLEN);
			int l1 = a->nla_len - NLA_HDRLEN;

			while (l1 >= (int)NLA_HDRLEN && g1->nla_len >= NLA_HDRLEN && g1->nla_len <= l1) {
				struct nlattr *g2 = (struct nlattr *)((char *)g1 + NLA_HDRLEN);
				int l2 = g1->nla_len - NLA_HDRLEN;

				while (l2 >= (int)NLA_HDRLEN && g2->nla_len >= NLA_HDRLEN && g2->nla_len <= l2) {
					if ((g2->nla_type & NLA_TYPE_MASK) == CTRL_ATTR_MCAST_GRP_ID)
						memcpy(&t->mcgrp, (char *)g2 + NLA_HDRLEN, 4);
					l2 -= NLA_ALIGN(g2->nla_len);
					g2 = (struct nlattr *)((char *)g2 + NLA_ALIGN(g2->nla_len));
				}
				l1 -= NLA_ALIGN(g1->nla_len);
				g1 = (struct nlattr *)((char *)g1 + NLA_ALIGN(g1->nla_len));
			}
		}
		len -= NLA_ALIGN(a->nla_len);
		a = (struct nlattr *)((char *)a + NLA_ALIGN(a->nla_len));
	}
	return 0;
}

static void nl_open(struct tctx *t)
{
	struct {
		struct nlmsghdr h;
		struct genlmsghdr g;
		char attrs[64];
	} req = { 0 };
	struct nlattr *a = (struct nlattr *)req.attrs;
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK };

	t->nl = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_GENERIC);
	if (t->nl < 0 || bind(t->nl, (struct sockaddr *)&sa, sizeof(sa)))
		goto fail;
	a->nla_type = CTRL_ATTR_FAMILY_NAME;
	a->nla_len = NLA_HDRLEN + sizeof(KVA_GENL_NAME);
	memcpy((char *)a + NLA_HDRLEN, KVA_GENL_NAME, sizeof(KVA_GENL_NAME));
	req.h.nlmsg_len = NLMSG_LENGTH(GENL_HDRLEN) + NLA_ALIGN(a->nla_len);
	req.h.nlmsg_type = GENL_ID_CTRL;
	req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
	req.h.nlmsg_seq = ++t->nl_seq;
	req.g.cmd = CTRL_CMD_GETFAMILY;
	req.g.version = 1;
	if (nl_send(t, &req, req.h.nlmsg_len) ||
	    nl_recv(t, req.h.nlmsg_seq, 10000, nl_family_cb) || !t->family)
		goto fail;
	return;
fail:
	if (t->nl >= 0)
		close(t->nl);
	t->nl = -1;
}

static const uint16_t nl_attr_types[] = {
	KVA_NL_A_ARENA_ID, KVA_NL_A_POLICY, KVA_NL_A_LOW_WM, KVA_NL_A_HIGH_WM,
	KVA_NL_A_TTL_MS, KVA_NL_A_ARENA_ID, KVA_NL_A_SESSION_ID,
	KVA_NL_A_ARENA_NAME, KVA_NL_A_VICTIM,
};

static void do_netlink(struct tctx *t, const struct op *o)
{
	struct {
		struct nlmsghdr h;
		struct genlmsghdr g;
		char attrs[256];
	} req;
	struct rng r = { o->junk };
	unsigned int n, i, off = 0;
	uint32_t seq;
	int ret;

	if (t->nl < 0)
		return;
	if (o->variant >= 90 && t->mcgrp) {	/* join / leave the events group */
		int opt = (o->a & 1) ? NETLINK_ADD_MEMBERSHIP : NETLINK_DROP_MEMBERSHIP;

		setsockopt(t->nl, SOL_NETLINK, opt, &t->mcgrp, sizeof(t->mcgrp));
		return;
	}
	memset(&req, 0, sizeof(req));
	n = o->variant < 40 ? (o->c & 1) : below(&r, 5);
	for (i = 0; i < n; i++) {
		struct nlattr *a = (struct nlattr *)(req.attrs + off);
		uint16_t type = o->variant < 40 ? KVA_NL_A_ARENA_ID :
				below(&r, 4) ? nl_attr_types[below(&r, sizeof(nl_attr_types) / 2)] :
					       (uint16_t)below(&r, KVA_NL_A_MAX + 4);
		uint16_t plen = below(&r, 3) ? 4 : (uint16_t)below(&r, 20);
		uint32_t v = (uint32_t)rnd(&r);
		struct slot *s = &t->arenas[below(&r, NSLOT)];

		if (type == KVA_NL_A_ARENA_ID && s->kind && below(&r, 4))
			v = s->arena_id;
		else if (type != KVA_NL_A_ARENA_ID && below(&r, 2))
			v %= 8;
		if (o->variant < 40) {
			a->nla_type = type;
			a->nla_len = NLA_HDRLEN + 4;
			v = s->arena_id ? s->arena_id : 1;
			memcpy((char *)a + NLA_HDRLEN, &v, 4);
			off += NLA_HDRLEN + 4;
			continue;
		}
		if (chance(&r, 5))
			type |= NLA_F_NESTED;
		a->nla_type = type;
		a->nla_len = NLA_HDRLEN + plen;
		for (unsigned int k = 0; k < plen; k++)
			((uint8_t *)a)[NLA_HDRLEN + k] = k < 4 ? (uint8_t)(v >> (8 * k)) : (uint8_t)rnd(&r);
		if (chance(&r, 3))
			a->nla_len += below(&r, 64);	/* claims more than there is */
		off += NLA_ALIGN(NLA_HDRLEN + plen);
	}
	req.h.nlmsg_len = NLMSG_LENGTH(GENL_HDRLEN) + off;
	if (o->variant >= 40 && chance(&r, 3) && off)
		req.h.nlmsg_len -= below(&r, 4) + 1;	/* truncated */
	req.h.nlmsg_type = t->family;
	req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
	if (o->a % 3 == 0)
		req.h.nlmsg_flags |= NLM_F_DUMP;
	req.h.nlmsg_seq = seq = ++t->nl_seq;
	req.g.cmd = o->variant < 70 ? 1 + o->b % 3 : (uint8_t)(o->b % (KVA_NL_CMD_MAX + 3));
	req.g.version = o->variant < 85 ? KVA_GENL_VERSION : (uint8_t)o->c;
	ret = nl_send(t, &req, req.h.nlmsg_len);
	if (ret == -ENOBUFS || ret == -EAGAIN)
		return;
	expect(t, o, "netlink send", ret, EC_NL);
	if (ret)
		return;
	ret = nl_recv(t, seq, 20000, NULL);
	note(ret);
	if (ret == -ETIMEDOUT)
		fail(t, o, "netlink: no reply in 20 s");
	expect(t, o, "netlink reply", ret, EC_NL);
}

/* ------------------------------------------------------------ uring */
static const unsigned long uring_ops[] = {
	KVA_IOC_ARENA_INFO, KVA_IOC_BLOCKS_ALLOC, KVA_IOC_BLOCKS_FREE,
	KVA_IOC_BLOCKS_SHARE, KVA_IOC_SESSION_CREATE, KVA_IOC_SESSION_END,
	KVA_IOC_SESSION_SET_STATE, KVA_IOC_SESSION_INFO,
	KVA_IOC_ARENA_SET_POLICY, KVA_IOC_ARENA_VICTIMS, KVA_URING_WAIT_EVENT,
	KVA_IOC_EXPORT_DMABUF, KVA_IOC_VERSION, 0xdead,
};

static void ring_reap(struct tctx *t, const struct op *o, unsigned int wait_ms)
{
	struct io_uring_cqe *cqe;

	for (;;) {
		int ret;

		if (wait_ms) {
			struct __kernel_timespec ts = { .tv_nsec = wait_ms * 1000000L };

			ret = io_uring_wait_cqe_timeout(&t->ring, &cqe, &ts);
			wait_ms = 0;
		} else {
			ret = io_uring_peek_cqe(&t->ring, &cqe);
		}
		if (ret)
			return;
		if (cqe->user_data < NUBUF)
			t->ubufs[cqe->user_data].busy = false;
		note(cqe->res);
		if (cqe->res < 0)
			expect(t, o, "uring cqe", cqe->res, EC_URING);
		io_uring_cqe_seen(&t->ring, cqe);
	}
}

static struct ubuf *ubuf_get(struct tctx *t, unsigned int *idx)
{
	unsigned int i;

	for (i = 0; i < NUBUF; i++)
		if (!t->ubufs[i].busy) {
			*idx = i;
			return &t->ubufs[i];
		}
	return NULL;
}

static int ring_ensure(struct tctx *t)
{
	if (t->ring_open)
		return 0;
	if (io_uring_queue_init(32, &t->ring, 0))
		return -1;
	t->ring_open = true;
	return 0;
}

/* Fill buf as op's struct; ids points to an id array that outlives it. */
static void fill_struct(struct tctx *t, const struct op *o, struct rng *r,
			unsigned long cmd, char *buf, uint32_t *ids)
{
	struct slot *s = &t->arenas[o->slot];
	uint32_t size;
	bool valid = chance(r, 75);

	memset(buf, 0, 4096);
	switch (_IOC_NR(cmd)) {
	case _IOC_NR(KVA_IOC_BLOCKS_ALLOC):
	case _IOC_NR(KVA_IOC_BLOCKS_FREE):
	case _IOC_NR(KVA_IOC_BLOCKS_SHARE): {
		struct kva_blocks *b = (void *)buf;
		uint32_t n = below(r, 6) ? 1 + below(r, 8) : below(r, KVA_MAX_BATCH + 3);

		b->session_id = s->nsids && valid ? s->sids[below(r, s->nsids)] : below(r, 8);
		b->count = n;
		b->flags = valid ? (below(r, 2) ? KVA_ALLOC_PARTIAL : 0) : (uint32_t)rnd(r);
		for (uint32_t i = 0; i < n && i < KVA_MAX_BATCH + 4; i++)
			ids[i] = s->npairs && valid ? s->pairs[below(r, s->npairs)].id : below(r, 64);
		b->ids = chance(r, 95) ? (uintptr_t)ids : (uintptr_t)rnd(r);
		size = valid ? sizeof(*b) : (uint32_t)(below(r, 2) ? 16 : 40);
		break;
	}
	case _IOC_NR(KVA_URING_WAIT_EVENT):
		size = valid ? (below(r, 2) ? sizeof(struct kva_event) : 4096) :
			       (uint32_t)below(r, 5000);
		break;
	case _IOC_NR(KVA_IOC_SESSION_END):
	case _IOC_NR(KVA_IOC_SESSION_SET_STATE):
	case _IOC_NR(KVA_IOC_SESSION_INFO): {
		/* the 64-bit session id, then (SET_STATE) the state */
		uint64_t sid = s->nsids && valid ? s->sids[below(r, s->nsids)] : below(r, 8);

		memcpy(buf + 8, &sid, sizeof(sid));
		((uint32_t *)buf)[4] = below(r, valid ? 5 : 6);
		size = _IOC_NR(cmd) == _IOC_NR(KVA_IOC_SESSION_END) ? 16 :
		       _IOC_NR(cmd) == _IOC_NR(KVA_IOC_SESSION_SET_STATE) ? 32 :
		       sizeof(struct kva_session_info);
		if (!valid)
			size = (uint32_t)below(r, 200);
		break;
	}
	default:
		/* info, create, policy, victims: a plausible first few fields */
		((uint32_t *)buf)[2] = below(r, 8);
		((uint32_t *)buf)[3] = below(r, 6);
		if (_IOC_NR(cmd) == _IOC_NR(KVA_IOC_ARENA_VICTIMS)) {
			struct kva_victims *v = (void *)buf;

			v->max = valid ? 1 + below(r, 16) : (uint32_t)rnd(r);
			v->victims = (uintptr_t)ids;
			v->victim_size = valid ? sizeof(struct kva_victim) : below(r, 64);
			v->policy = valid ? KVA_POLICY_ARENA : below(r, 5);
			v->count = 0;
		}
		if (_IOC_NR(cmd) == _IOC_NR(KVA_IOC_ARENA_SET_POLICY))
			((uint32_t *)buf)[2] = below(r, 4);
		size = valid ? 160 : (uint32_t)below(r, 200);
		if (_IOC_NR(cmd) == _IOC_NR(KVA_IOC_ARENA_SET_POLICY) && valid)
			size = sizeof(struct kva_policy_set);
		if (_IOC_NR(cmd) == _IOC_NR(KVA_IOC_SESSION_CREATE) && valid)
			size = sizeof(struct kva_session_create);
		if (_IOC_NR(cmd) == _IOC_NR(KVA_IOC_ARENA_VICTIMS) && valid)
			size = sizeof(struct kva_victims);
		break;
	}
	memcpy(buf, &size, 4);
}

static void do_uring(struct tctx *t, const struct op *o, bool wait_only)
{
	struct rng r = { o->junk };
	unsigned int n = wait_only ? 1 : 1 + below(&r, 6), i, q = 0;
	int fd = slot_arena_fd(t, o);

	if (ring_ensure(t))
		return;
	if (fd == t->arenas[o->slot].fd)
		t->arenas[o->slot].shared = true;	/* its sessions change behind us */
	for (i = 0; i < n; i++) {
		unsigned long cmd = wait_only ? KVA_URING_WAIT_EVENT :
				    uring_ops[below(&r, sizeof(uring_ops) / sizeof(uring_ops[0]))];
		struct kva_uring_cmd pdu = { 0 };
		uint64_t ack = 0;
		struct io_uring_sqe *sqe;
		unsigned int idx;
		struct ubuf *u = ubuf_get(t, &idx);

		if (!u)
			break;
		sqe = io_uring_get_sqe(&t->ring);
		if (!sqe)
			break;
		fill_struct(t, o, &r, cmd, u->raw, u->ids);
		pdu.arg = chance(&r, 97) ? (uintptr_t)u->raw : (uintptr_t)rnd(&r);
		if (_IOC_NR(cmd) == _IOC_NR(KVA_URING_WAIT_EVENT)) {
			unsigned int k = below(&r, 4);

			ack = k == 0 ? 0 : k == 1 ? below(&r, 16) : k == 2 ? ~0ULL : rnd(&r);
			memcpy(u->raw + offsetof(struct kva_event, ack_seq), &ack, sizeof(ack));
		} else if (chance(&r, 5)) {
			pdu.flags = 1;		/* no flags defined: EINVAL */
		} else if (chance(&r, 3)) {
			pdu.pad = (uint32_t)rnd(&r) | 1;
		}
		io_uring_prep_rw(IORING_OP_URING_CMD, sqe, fd, NULL, 0, 0);
		sqe->cmd_op = (uint32_t)cmd;
		memcpy(sqe->cmd, &pdu, sizeof(pdu));
		io_uring_sqe_set_data64(sqe, idx);
		u->busy = true;
		q++;
	}
	if (q) {
		int ret = io_uring_submit(&t->ring);

		if (ret < 0 && ret != -EBUSY && ret != -EAGAIN && ret != -EINTR)
			fail(t, o, "io_uring_submit: %s", strerror(-ret));
	}
	ring_reap(t, o, q ? 2 : 0);
}

/* ------------------------------------------------------------ fd passing */
static void do_fd_send(struct tctx *t, const struct op *o)
{
	struct slot *s = &t->arenas[o->slot];
	int fd = (o->a & 1) ? t->dmabufs[o->slot] : s->fd, ret;
	char tag = (o->a & 1) ? 'd' : 'a';

	if (fd < 0 || g_sock[0] < 0)
		return;
	ret = kva_send_fds(g_sock[0], &tag, 1, &fd, 1);	/* non-blocking */
	note(ret);
	if (!ret && tag == 'a')
		s->shared = true;
}

static void do_fd_recv(struct tctx *t, const struct op *o)
{
	unsigned int n = 1;
	char tag = 0;
	int fd = -1;

	if (g_sock[1] < 0 || kva_recv_fds(g_sock[1], &tag, 1, &fd, &n))
		return;
	note(n ? 0 : -1);
	if (!n)
		return;
	if (tag == 'a') {
		struct slot *s = &t->arenas[o->slot];
		struct kva_arena_info info = { .size = sizeof(info) };

		slot_reset(s);
		s->fd = fd;
		s->kind = 1;
		s->shared = true;
		if (sys_ioctl(fd, KVA_IOC_ARENA_INFO, &info) == 0) {
			s->arena_id = info.arena_id;
			s->blocks_total = info.blocks_total;
		} else {
			fail(t, o, "ARENA_INFO on a received arena fd: %s", strerror(errno));
		}
	} else {
		if (t->dmabufs[o->slot] >= 0)
			close(t->dmabufs[o->slot]);
		t->dmabufs[o->slot] = fd;
	}
}

/* ------------------------------------------------------------ the ops */
static void do_arena_create(struct tctx *t, const struct op *o)
{
	struct slot *s = &t->arenas[o->slot];
	char buf[4200];
	struct kva_arena_create *c = (void *)buf;
	bool valid = o->variant < 70;
	uint32_t size = pick_size(o, KVA_ARENA_CREATE_SIZE_VER0, sizeof(*c), valid);
	void *p = argbuf(t, o, buf, sizeof(buf), size, !valid && (o->c & 1), sizeof(*c));
	static const uint32_t bsz[] = { 4096, 65536, 256 << 10, 2 << 20, 12288, 1 << 20 };
	long ret;

	c->bytes = (1 + o->a % 3) * KVA_PAGE_SIZE;
	c->block_size = bsz[o->b % 6];
	c->numa_node = KVA_NUMA_ANY;
	c->tenant_id = o->c % 4;
	snprintf(c->name, sizeof(c->name), "fz%d.%d", t->proc, t->tid);
	if (size >= KVA_ARENA_CREATE_SIZE_VER1) {
		c->policy = o->y % 3;
		if (o->y & 0x100) {
			uint32_t nb = (uint32_t)(c->bytes / KVA_PAGE_SIZE) *
				      (uint32_t)(KVA_PAGE_SIZE / c->block_size);

			c->high_wm = 1 + (uint32_t)(o->y >> 24) % nb;
			c->low_wm = 1 + (uint32_t)(o->y >> 16) % c->high_wm;
		}
	}
	if (!valid) {
		switch (o->x % 10) {
		case 0: c->bytes = o->y; break;
		case 1: c->bytes = 0; break;
		case 2: c->block_size = (uint32_t)o->y; break;
		case 3: c->numa_node = (int32_t)(o->y % 8) - 3; break;
		case 4: c->flags = (uint32_t)o->y | 1; break;
		case 5: c->pad = (uint32_t)o->y | 1; break;
		case 6: memset(c->name, 'x', sizeof(c->name)); break;
		case 7: c->name[1] = '\n'; break;
		case 8: c->policy = (uint32_t)o->y; break;
		default: c->bytes = 1ULL << (30 + o->y % 30); break;
		}
	}
	ret = sys_ioctl(t->dev, KVA_IOC_ARENA_CREATE, p);
	if (valid && p == buf && t->dev >= 0) {
		if (ret < 0 && ret != -ENOSPC && ret != -EDQUOT && ret != -ENOMEM &&
		    ret != -EMFILE)
			fail(t, o, "valid ARENA_CREATE: %s", strerror((int)-ret));
	} else {
		expect(t, o, "ARENA_CREATE", ret, EC_IOCTL);
	}
	if (ret < 0)
		return;
	if (p != buf)	/* a pointer form that still worked: keep it anyway */
		memcpy(c, p, sizeof(*c) < size ? sizeof(*c) : size);
	slot_reset(s);
	s->fd = (int)ret;
	s->kind = 1;
	s->arena_id = c->arena_id;
	s->blocks_total = c->blocks_total;
}

static void do_info(struct tctx *t, const struct op *o)
{
	struct slot *s = &t->arenas[o->slot];
	char buf[4200];
	struct kva_arena_info *i = (void *)buf;
	bool valid = o->variant < 70;
	uint32_t size = pick_size(o, KVA_ARENA_INFO_SIZE_VER0, sizeof(*i), valid);
	void *p = argbuf(t, o, buf, sizeof(buf), size, !valid && (o->c & 1), sizeof(*i));
	int fd = slot_arena_fd(t, o);
	long ret;

	if (!valid && (o->a & 3) == 0)
		i->flags = o->b | 1;
	ret = sys_ioctl(fd, KVA_IOC_ARENA_INFO, p);
	if (valid && p == buf && s->kind && fd == s->fd) {
		if (ret)
			fail(t, o, "valid ARENA_INFO: %s", strerror((int)-ret));
		if (i->blocks_free > i->blocks_total || i->blocks_total != s->blocks_total ||
		    i->arena_id != s->arena_id)
			fail(t, o, "ARENA_INFO: free %u total %u (want %u) id %u (want %u)",
			     i->blocks_free, i->blocks_total, s->blocks_total,
			     i->arena_id, s->arena_id);
	} else {
		expect(t, o, "ARENA_INFO", ret, EC_IOCTL);
	}
}

static void do_export(struct tctx *t, const struct op *o)
{
	char buf[4200];
	struct kva_export *e = (void *)buf;
	bool valid = o->variant < 70;
	uint32_t size = pick_size(o, KVA_EXPORT_SIZE_VER0, sizeof(*e), valid);
	void *p = argbuf(t, o, buf, sizeof(buf), size, !valid && (o->c & 1), sizeof(*e));
	long ret;

	e->flags = valid ? (o->a & KVA_EXPORT_CLOEXEC) : o->a;
	if (!valid && (o->b & 1))
		e->pad = o->b;
	ret = sys_ioctl(slot_arena_fd(t, o), KVA_IOC_EXPORT_DMABUF, p);
	expect(t, o, "EXPORT_DMABUF", ret, EC_IOCTL);
	if (ret < 0)
		return;
	if (t->dmabufs[o->slot2] >= 0)
		close(t->dmabufs[o->slot2]);
	t->dmabufs[o->slot2] = (int)ret;
}

static void do_sess_create(struct tctx *t, const struct op *o)
{
	struct slot *s = &t->arenas[o->slot];
	char buf[4200];
	struct kva_session_create *c = (void *)buf;
	bool valid = o->variant < 70;
	uint32_t size = pick_size(o, KVA_SESSION_CREATE_SIZE_VER0, sizeof(*c), valid);
	void *p = argbuf(t, o, buf, sizeof(buf), size, !valid && (o->c & 1), sizeof(*c));
	int fd = slot_arena_fd(t, o);
	long ret;

	c->cookie = o->x;
	if (!valid && (o->a & 3) == 0)
		c->flags = o->b | 1;
	if (!valid && (o->a & 3) == 1)
		c->session_id = o->y;		/* output only: ignored */
	ret = sys_ioctl(fd, KVA_IOC_SESSION_CREATE, p);
	if (valid && p == buf && s->kind && fd == s->fd && !s->shared) {
		if (ret < 0 && ret != -ENOSPC && ret != -ENOMEM)
			fail(t, o, "valid SESSION_CREATE: %s", strerror((int)-ret));
		/* The id is 64-bit: in the struct, never the return value. */
		if (ret > 0)
			fail(t, o, "SESSION_CREATE returned %ld", ret);
		if (ret == 0 && (c->session_id <= UINT32_MAX || c->session_id >> 63))
			fail(t, o, "SESSION_CREATE gave session %#llx",
			     (unsigned long long)c->session_id);
	} else {
		expect(t, o, "SESSION_CREATE", ret, EC_IOCTL);
	}
	if (ret == 0 && p == buf && s->kind && fd == s->fd) {
		if (s->nsids == 8)
			sid_drop(s, s->sids[0]);
		s->sids[s->nsids++] = c->session_id;
	}
}

static void do_sess_end(struct tctx *t, const struct op *o, bool set_state)
{
	struct slot *s = &t->arenas[o->slot];
	char buf[4200];
	struct kva_session_state *st = (void *)buf;
	bool valid = o->variant < 70;
	uint32_t ver0 = set_state ? KVA_SESSION_STATE_SIZE_VER0 : KVA_SESSION_END_SIZE_VER0;
	uint32_t size = pick_size(o, ver0, ver0, valid);
	void *p = argbuf(t, o, buf, sizeof(buf), size, !valid && (o->c & 1), ver0);
	int fd = slot_arena_fd(t, o);
	uint64_t sid = pick_sid(s, o);
	uint32_t state = 0;
	long ret;

	st->session_id = sid;
	if (set_state) {
		state = valid ? o->a % 5 : o->a % 7;
		st->state = state;
		if (state == KVA_STATE_TOOL_WAIT || !valid) {
			st->tool_class = o->c % 4;
			st->expected_wait_us = o->x % 10000000;
		}
	}
	if (!valid && (o->a & 0x300) == 0x100)
		st->flags = o->b | 1;
	if (!valid && (o->a & 0x300) == 0x200)
		st->session_id = sid ^ (1ULL << (16 + o->b % 47));	/* a near miss */
	ret = sys_ioctl(fd, set_state ? KVA_IOC_SESSION_SET_STATE : KVA_IOC_SESSION_END, p);
	expect(t, o, set_state ? "SESSION_SET_STATE" : "SESSION_END", ret, EC_IOCTL);
	if (ret == 0 && s->kind && fd == s->fd && (!set_state || state == KVA_STATE_ENDED))
		sid_drop(s, sid);
	if (ret == -ENOENT && s->kind && fd == s->fd && valid && p == buf)
		sid_drop(s, sid);	/* ended elsewhere (shared arena) */
}

static void do_sess_info(struct tctx *t, const struct op *o)
{
	struct slot *s = &t->arenas[o->slot];
	char buf[4200];
	struct kva_session_info *i = (void *)buf;
	bool valid = o->variant < 70;
	uint32_t size = pick_size(o, KVA_SESSION_INFO_SIZE_VER0, sizeof(*i), valid);
	void *p = argbuf(t, o, buf, sizeof(buf), size, !valid && (o->c & 1), sizeof(*i));
	int fd = slot_arena_fd(t, o);
	uint64_t sid;
	long ret;

	i->session_id = pick_sid(s, o);
	if (!valid && (o->a & 3) == 0)
		i->flags = o->b | 1;
	if (!valid && (o->a & 3) == 1)
		i->pad = o->b | 1;
	sid = i->session_id;
	ret = sys_ioctl(fd, KVA_IOC_SESSION_INFO, p);
	expect(t, o, "SESSION_INFO", ret, EC_IOCTL);
	if (ret == 0 && p == buf && i->state > KVA_STATE_ENDED)
		fail(t, o, "SESSION_INFO: state %u", i->state);
	if (ret == 0 && p == buf && i->session_id != sid)
		fail(t, o, "SESSION_INFO: session %#llx for %#llx",
		     (unsigned long long)i->session_id, (unsigned long long)sid);
}

static void do_blocks(struct tctx *t, const struct op *o, int kind)
{
	static const unsigned long cmds[] = { KVA_IOC_BLOCKS_ALLOC, KVA_IOC_BLOCKS_FREE,
					      KVA_IOC_BLOCKS_SHARE };
	struct slot *s = &t->arenas[o->slot];
	char buf[4200];
	struct kva_blocks *b = (void *)buf;
	bool valid = o->variant < 70;
	uint32_t size = pick_size(o, KVA_BLOCKS_SIZE_VER0, sizeof(*b), valid);
	void *p = argbuf(t, o, buf, sizeof(buf), size, !valid && (o->c & 1), sizeof(*b));
	int fd = slot_arena_fd(t, o);
	bool strict = valid && p == buf && s->kind && fd == s->fd && !s->shared && s->nsids;
	uint32_t n = 1 + o->a % 8, i;
	struct rng r = { o->junk };
	const uint32_t *got;
	long ret;

	if (o->a % 16 == 0)
		n = 1 + o->a % KVA_MAX_BATCH;
	b->session_id = pick_sid(s, o);
	b->ids = (uintptr_t)t->ids;
	if (kind == 0) {
		b->flags = (o->c & 2) ? KVA_ALLOC_PARTIAL : 0;
	} else if (kind == 1 && valid && s->npairs) {
		/* free ids this session holds, no duplicates */
		unsigned int k = 0;

		b->session_id = s->pairs[o->b % s->npairs].sid;
		for (i = 0; i < s->npairs && k < n; i++)
			if (s->pairs[i].sid == b->session_id)
				t->ids[k++] = s->pairs[i].id;
		n = k;
	} else {
		for (i = 0; i < n; i++)
			t->ids[i] = s->npairs && below(&r, 4) ? s->pairs[below(&r, s->npairs)].id :
								below(&r, s->blocks_total + 2);
		strict = false;
	}
	b->count = n;
	if (!valid) {
		switch (o->x % 8) {
		case 0: b->count = 0; break;
		case 1: b->count = KVA_MAX_BATCH + 1 + o->y % 8; break;
		case 2: b->flags = (uint32_t)o->y | 4; break;
		case 3: b->session_id ^= 1ULL << (16 + o->y % 47); break;
		case 4: b->ids = 0; break;
		case 5: b->ids = (uintptr_t)t->ro; break;
		case 6: b->ids = (uintptr_t)(t->guard + 4096 - 4 * (o->y % n)); break;
		default: b->done = (uint32_t)o->y; break;
		}
	}
	if (kind == 0 && !(strict && s->blocks_total))
		strict = false;
	ret = sys_ioctl(fd, cmds[kind], p);
	if (strict) {
		if (kind == 0 && ret < 0 && ret != -ENOSPC && ret != -EDQUOT && ret != -ENOMEM &&
		    ret != -ENOENT)
			fail(t, o, "valid BLOCKS_ALLOC: %s", strerror((int)-ret));
		if (kind == 0 && ret >= 0 && (ret > n || (!(b->flags & KVA_ALLOC_PARTIAL) && ret != n) ||
					      b->done != ret))
			fail(t, o, "BLOCKS_ALLOC of %u returned %ld, done %u", n, ret, b->done);
		if (kind == 1 && ret != (long)n)
			fail(t, o, "valid BLOCKS_FREE of %u held ids: %ld (%s)", n, ret,
			     ret < 0 ? strerror((int)-ret) : "count");
	} else {
		expect(t, o, op_names[o->kind], ret, EC_IOCTL);
	}
	if (ret <= 0 || p != buf || !s->kind || fd != s->fd)
		return;
	/* the ids the kernel took or wrote: an invalid variant may have
	 * pointed them elsewhere (next to the guard page), and a partial
	 * allocation that fits there succeeds */
	got = (const uint32_t *)(uintptr_t)b->ids;
	if (kind == 1) {
		for (i = 0; i < (uint32_t)ret; i++)
			for (unsigned int j = 0; j < s->npairs; j++)
				if (s->pairs[j].sid == b->session_id && s->pairs[j].id == got[i]) {
					s->pairs[j] = s->pairs[--s->npairs];
					break;
				}
		return;
	}
	for (i = 0; i < (uint32_t)ret && s->npairs < NPAIRS; i++) {
		if (got[i] >= s->blocks_total)
			fail(t, o, "%s returned id %u >= blocks_total %u", op_names[o->kind],
			     got[i], s->blocks_total);
		s->pairs[s->npairs++] = (struct pair){ b->session_id, got[i] };
	}
}

static void do_policy(struct tctx *t, const struct op *o)
{
	char buf[4200];
	struct kva_policy_set *ps = (void *)buf;
	bool valid = o->variant < 70;
	uint32_t size = pick_size(o, KVA_POLICY_SET_SIZE_VER0, sizeof(*ps), valid);
	void *p = argbuf(t, o, buf, sizeof(buf), size, !valid && (o->c & 1), sizeof(*ps));

	ps->policy = valid ? o->a % 3 : o->a % 5;
	ps->low_wm = o->b % 16;
	ps->high_wm = ps->low_wm + o->c % 16;
	ps->ttl_ms = o->x % 100000;
	if (!valid && (o->y & 1))
		ps->flags = (uint32_t)o->y;
	expect(t, o, "ARENA_SET_POLICY",
	       sys_ioctl(slot_arena_fd(t, o), KVA_IOC_ARENA_SET_POLICY, p), EC_IOCTL);
}

static void do_victims(struct tctx *t, const struct op *o)
{
	char buf[4200];
	struct kva_victims *v = (void *)buf;
	bool valid = o->variant < 70;
	uint32_t size = pick_size(o, KVA_VICTIMS_SIZE_VER0, sizeof(*v), valid);
	void *p = argbuf(t, o, buf, sizeof(buf), size, !valid && (o->c & 1), sizeof(*v));
	long ret;

	v->max = valid ? 1 + o->a % 64 : o->a % (KVA_MAX_VICTIMS + 8);
	v->victims = (uintptr_t)t->ids;	/* 4 KiB+ of room: 170 victims */
	if (v->max > (KVA_MAX_BATCH * 4) / sizeof(struct kva_victim))
		v->victims = (uintptr_t)t->guard;	/* EFAULT past the first page */
	v->policy = valid ? ((o->b & 1) ? KVA_POLICY_ARENA : o->b % 3) : o->b;
	v->victim_size = sizeof(struct kva_victim);
	if (!valid && (o->y & 1))
		v->victim_size = o->y % 3 ? (uint32_t)(o->y >> 8) % 40 : 5000;
	ret = sys_ioctl(slot_arena_fd(t, o), KVA_IOC_ARENA_VICTIMS, p);
	expect(t, o, "ARENA_VICTIMS", ret, EC_IOCTL);
	if (ret > 0 && p == buf && (uint32_t)ret > v->max)
		fail(t, o, "VICTIMS returned %ld > max %u", ret, v->max);
}

static void do_tenant(struct tctx *t, const struct op *o)
{
	char buf[4200];
	struct kva_tenant *tn = (void *)buf;
	bool valid = o->variant < 70;
	uint32_t size = pick_size(o, KVA_TENANT_SIZE_VER0, sizeof(*tn), valid);
	void *p = argbuf(t, o, buf, sizeof(buf), size, !valid && (o->c & 1), sizeof(*tn));
	bool set = o->a & 1;

	tn->tenant_id = valid ? o->b % 4 : o->b;
	/* quotas: mostly unlimited, sometimes a few blocks' worth */
	tn->quota_bytes = (o->x % 4) ? 0 : (o->y % 16) * (64 << 10);
	if (!valid && (o->c & 2))
		tn->flags = 1;
	expect(t, o, set ? "TENANT_SET_QUOTA" : "TENANT_INFO",
	       sys_ioctl(t->dev, set ? KVA_IOC_TENANT_SET_QUOTA : KVA_IOC_TENANT_INFO, p),
	       EC_IOCTL);
}

static void do_version(struct tctx *t, const struct op *o)
{
	char buf[4200];
	struct kva_version *v = (void *)buf;
	bool valid = o->variant < 70;
	uint32_t size = pick_size(o, KVA_VERSION_SIZE_VER0, sizeof(*v), valid);
	void *p = argbuf(t, o, buf, sizeof(buf), size, !valid && (o->c & 1), sizeof(*v));
	long ret = sys_ioctl(t->dev, KVA_IOC_VERSION, p);

	if (valid && p == buf) {
		if (ret || v->api_version != KVA_API_VERSION || v->page_size != KVA_PAGE_SIZE)
			fail(t, o, "valid VERSION: ret %ld api %u page %u", ret, v->api_version,
			     v->page_size);
	} else {
		expect(t, o, "VERSION", ret, EC_IOCTL);
	}
}

static void do_mmap(struct tctx *t, const struct op *o)
{
	struct slot *s = &t->arenas[o->slot];
	int fd = (o->a & 1) ? t->dmabufs[o->slot] : s->fd;
	size_t len = (1 + o->b % 3) * KVA_PAGE_SIZE;
	off_t off = 0;
	int prot = PROT_READ | PROT_WRITE, flags = MAP_SHARED;
	void *addr;

	if (o->variant >= 70) {
		switch (o->c % 6) {
		case 0: len = 4096 * (1 + o->x % 1024); break;
		case 1: off = KVA_PAGE_SIZE * (o->x % 4); break;
		case 2: off = 4096 * (o->x % 2048); len = 4096 * (1 + o->y % 512); break;
		case 3: flags = MAP_PRIVATE; break;
		case 4: prot = PROT_READ; break;
		default: len = o->x % (16 * MIB); break;
		}
	}
	if (o->variant >= 97)
		fd = t->dev;
	addr = mmap(NULL, len, prot, flags, fd, off);
	note(addr == MAP_FAILED ? -errno : 0);
	if (addr == MAP_FAILED) {
		expect(t, o, "mmap", -errno, EC_MMAP);
		return;
	}
	if (t->maps[o->slot2].addr)
		munmap(t->maps[o->slot2].addr, t->maps[o->slot2].len);
	t->maps[o->slot2].addr = addr;
	t->maps[o->slot2].len = len;
	t->maps[o->slot2].prot = prot;
}

static void do_touch(struct tctx *t, const struct op *o)
{
	struct rng r = { o->junk };
	unsigned int i;

	if (!t->maps[o->slot].addr)
		return;
	for (i = 0; i < 1 + o->a % 32; i++) {
		size_t off = (size_t)(rnd(&r) % t->maps[o->slot].len) & ~7UL;
		volatile uint64_t *q = (volatile uint64_t *)((char *)t->maps[o->slot].addr + off);

		if (t->maps[o->slot].prot & PROT_WRITE)
			*q = *q + 1;
		else
			(void)*q;
	}
}

static void do_vgem(struct tctx *t, const struct op *o, bool close_h)
{
	long ret;

	if (t->vgem < 0)
		return;
	if (close_h) {
		struct fz_drm_gem_close gc = { .handle = (o->a & 1) ? t->handles[o->b % 8] : o->b % 16 };

		ret = sys_ioctl(t->vgem, FZ_DRM_IOCTL_GEM_CLOSE, &gc);
		expect(t, o, "GEM_CLOSE", ret, EC_DRM);
		if (!ret && (o->a & 1))
			t->handles[o->b % 8] = 0;
		return;
	}
	struct fz_drm_prime_handle ph = { .fd = o->variant < 80 ? t->dmabufs[o->slot] :
						o->variant < 90 ? t->arenas[o->slot].fd : (int)(o->c % 64) };

	ret = sys_ioctl(t->vgem, FZ_DRM_IOCTL_PRIME_FD_TO_HANDLE, &ph);
	expect(t, o, "PRIME_FD_TO_HANDLE", ret, EC_DRM);
	if (!ret)
		t->handles[o->b % 8] = ph.handle;
}

static void do_dmabuf_sync(struct tctx *t, const struct op *o)
{
	struct dma_buf_sync sync = { .flags = o->variant < 70 ?
		(DMA_BUF_SYNC_START | DMA_BUF_SYNC_RW) + (o->a & 1) * DMA_BUF_SYNC_END : o->a };

	expect(t, o, "DMA_BUF_IOCTL_SYNC", sys_ioctl(t->dmabufs[o->slot], DMA_BUF_IOCTL_SYNC, &sync),
	       EC_IOCTL);
}

static void do_raw_ioctl(struct tctx *t, const struct op *o)
{
	int fds[3] = { t->dev, t->arenas[o->slot].fd, t->dmabufs[o->slot] };
	unsigned long cmd = _IOC(o->a & 3, o->b % 3 ? KVA_IOC_MAGIC : (o->b >> 8) & 0xff,
				 o->c % 3 ? (o->c >> 4) % 0x24 : (o->c >> 4) & 0xff,
				 (o->x >> 8) % 4096);
	char buf[4200];
	struct rng r = { o->junk };
	void *p = argbuf(t, o, buf, sizeof(buf), (uint32_t)(o->y % 200), false, 0);
	long ret;

	for (unsigned int i = 4; i < 200; i++)
		buf[i] = chance(&r, 70) ? 0 : (char)rnd(&r);
	if (_IOC_TYPE(cmd) == 'd' || _IOC_TYPE(cmd) == 'b')	/* DMA_BUF ioctls: not ours */
		return;
	if (o->x % 3 == 1)
		t->arenas[o->slot].shared = true;
	ret = sys_ioctl(fds[o->x % 3], cmd, p);
	if (fds[o->x % 3] == t->dmabufs[o->slot] && _IOC_TYPE(cmd) != KVA_IOC_MAGIC)
		return;	/* the dma-buf core's own ioctls */
	expect(t, o, "raw ioctl", ret, EC_IOCTL);
	if (ret > 2 && _IOC_NR(cmd) != _IOC_NR(KVA_IOC_SESSION_CREATE) &&
	    _IOC_NR(cmd) != _IOC_NR(KVA_IOC_BLOCKS_ALLOC) && _IOC_NR(cmd) != _IOC_NR(KVA_IOC_BLOCKS_FREE) &&
	    _IOC_NR(cmd) != _IOC_NR(KVA_IOC_BLOCKS_SHARE) && _IOC_NR(cmd) != _IOC_NR(KVA_IOC_ARENA_VICTIMS))
		close((int)ret);	/* a new fd (arena, dma-buf) */
}

/* A child that acts on inherited fds and dies (exit or SIGKILL). */
static void do_fork(struct tctx *t, const struct op *o)
{
	struct slot *s = &t->arenas[o->slot];
	pid_t pid;
	int st;

	if (s->fd < 0)
		return;
	s->shared = true;
	pid = fork();
	if (pid < 0)
		return;
	if (pid == 0) {
		struct kva_session_create sc = { .size = sizeof(sc), .cookie = 7 };
		uint32_t ids[8];
		struct kva_blocks b = { .size = sizeof(b), .count = 8, .ids = (uintptr_t)ids,
					.flags = KVA_ALLOC_PARTIAL };
		b.session_id = ioctl(s->fd, KVA_IOC_SESSION_CREATE, &sc) == 0 ?
			       sc.session_id : 1;
		ioctl(s->fd, KVA_IOC_BLOCKS_ALLOC, &b);
		if (o->a & 1)
			close(s->fd);
		if (o->a & 2)
			raise(SIGKILL);
		_exit(0);
	}
	if (waitpid(pid, &st, 0) == pid && WIFSIGNALED(st) && WTERMSIG(st) != SIGKILL)
		fail(t, o, "forked child died of signal %d", WTERMSIG(st));
}

static void exec_op(struct tctx *t, const struct op *o)
{
	struct slot *s = &t->arenas[o->slot];

	cur_kind = o->kind;
	switch (o->kind) {
	case OP_VERSION: do_version(t, o); break;
	case OP_ARENA_CREATE: do_arena_create(t, o); break;
	case OP_ARENA_CLOSE: slot_reset(s); break;
	case OP_INFO: do_info(t, o); break;
	case OP_EXPORT: do_export(t, o); break;
	case OP_DMABUF_CLOSE:
		if (t->dmabufs[o->slot] >= 0)
			close(t->dmabufs[o->slot]);
		t->dmabufs[o->slot] = -1;
		break;
	case OP_SESS_CREATE: do_sess_create(t, o); break;
	case OP_SESS_END: do_sess_end(t, o, false); break;
	case OP_SET_STATE: do_sess_end(t, o, true); break;
	case OP_SESS_INFO: do_sess_info(t, o); break;
	case OP_ALLOC: do_blocks(t, o, 0); break;
	case OP_FREE: do_blocks(t, o, 1); break;
	case OP_SHARE: do_blocks(t, o, 2); break;
	case OP_POLICY: do_policy(t, o); break;
	case OP_VICTIMS: do_victims(t, o); break;
	case OP_TENANT: do_tenant(t, o); break;
	case OP_MMAP: do_mmap(t, o); break;
	case OP_MUNMAP:
		if (t->maps[o->slot].addr)
			munmap(t->maps[o->slot].addr, t->maps[o->slot].len);
		t->maps[o->slot].addr = NULL;
		break;
	case OP_TOUCH: do_touch(t, o); break;
	case OP_URING: do_uring(t, o, false); break;
	case OP_WAIT: do_uring(t, o, true); break;
	case OP_RING_CLOSE:
		if (t->ring_open) {
			io_uring_queue_exit(&t->ring);
			t->ring_open = false;
			for (unsigned int i = 0; i < NUBUF; i++)
				t->ubufs[i].busy = false;
		}
		break;
	case OP_NETLINK: do_netlink(t, o); break;
	case OP_FD_SEND: do_fd_send(t, o); break;
	case OP_FD_RECV: do_fd_recv(t, o); break;
	case OP_VGEM: do_vgem(t, o, false); break;
	case OP_GEM_CLOSE: do_vgem(t, o, true); break;
	case OP_DMABUF_SYNC: do_dmabuf_sync(t, o); break;
	case OP_FORK: do_fork(t, o); break;
	case OP_RAW_IOCTL: do_raw_ioctl(t, o); break;
	}
}

/* ------------------------------------------------------------ threads */
static uint64_t thread_seed(int proc, int gen, int tid)
{
	return mix64(g_seed ^ mix64(((uint64_t)proc << 40) ^ ((uint64_t)gen << 16) ^ (uint64_t)tid));
}

static void tctx_init(struct tctx *t, int proc, int gen, int tid)
{
	unsigned int i;

	memset(t, 0, sizeof(*t));
	t->proc = proc;
	t->gen = gen;
	t->tid = tid;
	t->dev = open("/dev/kvarena", O_RDWR | O_CLOEXEC);
	for (i = 0; i < NSLOT; i++) {
		t->arenas[i].fd = -1;
		t->dmabufs[i] = -1;
	}
	t->ubufs = calloc(NUBUF, sizeof(*t->ubufs));
	t->ids = calloc(KVA_MAX_BATCH + 4, sizeof(uint32_t));
	t->guard = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	t->ro = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (!t->ubufs || !t->ids || t->guard == MAP_FAILED || t->ro == MAP_FAILED) {
		fprintf(stderr, "kva-fuzz: out of memory\n");
		_exit(2);
	}
	mprotect(t->guard + 4096, 4096, PROT_NONE);
	t->nl = -1;
	nl_open(t);
	t->vgem = kvg_open_vgem();
}

static void tctx_fini(struct tctx *t)
{
	unsigned int i;

	for (i = 0; i < NSLOT; i++) {
		slot_reset(&t->arenas[i]);
		if (t->dmabufs[i] >= 0)
			close(t->dmabufs[i]);
		if (t->maps[i].addr)
			munmap(t->maps[i].addr, t->maps[i].len);
	}
	if (t->ring_open)
		io_uring_queue_exit(&t->ring);
	if (t->nl >= 0)
		close(t->nl);
	if (t->vgem >= 0)
		close(t->vgem);
	if (t->dev >= 0)
		close(t->dev);
	munmap(t->guard, 8192);
	munmap(t->ro, 4096);
	free(t->ubufs);
	free(t->ids);
}

struct targ { int proc, gen, tid; };

static void *thread_main(void *arg)
{
	struct targ *a = arg;
	struct tctx *t = calloc(1, sizeof(*t));
	struct rng r = { thread_seed(a->proc, a->gen, a->tid) };
	struct op o;

	if (!t)
		_exit(2);
	tctx_init(t, a->proc, a->gen, a->tid);
	while (!atomic_load(&shm->stop)) {
		if (atomic_fetch_add(&shm->ops, 1) >= g_nops) {
			atomic_store(&shm->stop, 1);
			break;
		}
		gen_op(&r, &o);
		atomic_store(&shm->cur_op[a->proc][a->tid], t->opno);
		if (g_verbose > 1) {
			char d[200];

			describe(&o, d, sizeof(d));
			fprintf(stderr, "[%d.%d.%d] #%" PRIu64 " %s\n", a->proc, a->gen, a->tid, t->opno, d);
		}
		exec_op(t, &o);
		t->opno++;
	}
	tctx_fini(t);
	free(t);
	return NULL;
}

static void child_main(int proc, int gen)
{
	pthread_t th[MAXTHR];
	struct targ args[MAXTHR];
	unsigned int i;

	signal(SIGPIPE, SIG_IGN);
	for (i = 0; i < g_threads; i++) {
		args[i] = (struct targ){ proc, gen, (int)i };
		if (pthread_create(&th[i], NULL, thread_main, &args[i])) {
			fprintf(stderr, "kva-fuzz: pthread_create failed\n");
			_exit(2);
		}
	}
	for (i = 0; i < g_threads; i++)
		pthread_join(th[i], NULL);
	_exit(0);
}

/* ------------------------------------------------------------ kernel log */
static const char *const klog_bad[] = {
	"BUG:", "WARNING:", "KASAN", "Oops", "general protection", "kernel BUG",
	"possible circular locking", "possible recursive locking", "INFO: ",
	"ODEBUG", "kmemleak", "UBSAN", "Call Trace", "DMA-API", "list_add corruption",
	"list_del corruption", "BUG kmalloc", "Poison overwritten", "lockdep",
	NULL,
};

static int kmsg_open(void)
{
	int fd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);

	if (fd >= 0)
		lseek(fd, 0, SEEK_END);
	return fd;
}

/* Print new kernel-log lines that look like reports; returns their count. */
static int kmsg_check(int fd, const char *who)
{
	char line[2048];
	int bad = 0;

	if (fd < 0)
		return 0;
	for (;;) {
		ssize_t n = read(fd, line, sizeof(line) - 1);
		char *msg;

		if (n < 0) {
			if (errno == EPIPE)
				continue;	/* overwritten: keep reading */
			break;
		}
		line[n] = 0;
		msg = strchr(line, ';');
		msg = msg ? msg + 1 : line;
		for (unsigned int i = 0; klog_bad[i]; i++)
			if (strstr(msg, klog_bad[i])) {
				if (bad < 40)
					fprintf(stderr, "kva-fuzz: %s: kernel: %s", who, msg);
				bad++;
				break;
			}
	}
	return bad;
}

/* ------------------------------------------------------------ replay and shrink */
static void *shared_map(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED) {
		perror("mmap");
		exit(2);
	}
	return p;
}

/* Run ops[0..n) of one thread, minus the masked ones, alone in a child. */
static bool replay_fails(int proc, int gen, int tid, const struct op *ops, const bool *skip,
			 uint64_t n, char *why, size_t whylen)
{
	int kfd = kmsg_open();
	pid_t pid;
	int st = 0, k;

	memset(shm, 0, sizeof(*shm));
	g_nops = ULONG_MAX;
	pid = fork();
	if (pid == 0) {
		struct tctx *t = calloc(1, sizeof(*t));

		alarm(120);
		tctx_init(t, proc, gen, tid);
		for (uint64_t i = 0; i < n; i++) {
			t->opno = i;
			if (!skip[i])
				exec_op(t, &ops[i]);
		}
		tctx_fini(t);
		_exit(0);
	}
	waitpid(pid, &st, 0);
	usleep(300000);	/* deferred fput, io_uring exit work, monitor */
	k = kmsg_check(kfd, "replay");
	if (kfd >= 0)
		close(kfd);
	if (WIFEXITED(st) && WEXITSTATUS(st) == 3) {
		snprintf(why, whylen, "%s", shm->fail_msg);
		return true;
	}
	if (WIFSIGNALED(st)) {
		snprintf(why, whylen, "replay child died of signal %d", WTERMSIG(st));
		return true;
	}
	if (k) {
		snprintf(why, whylen, "%d kernel report line(s)", k);
		return true;
	}
	return false;
}

static void shrink(int proc, int gen, int tid, uint64_t upto)
{
	struct rng r = { thread_seed(proc, gen, tid) };
	uint64_t n = upto + 1, i, kept;
	struct op *ops = calloc(n, sizeof(*ops));
	bool *skip = calloc(n, sizeof(*skip));
	char why[1100], d[200];
	unsigned int tries = 0;
	time_t t0 = time(NULL);

	if (!ops || !skip)
		return;
	for (i = 0; i < n; i++)
		gen_op(&r, &ops[i]);
	g_replay = true;
	fprintf(stderr, "kva-fuzz: shrink: replaying proc %d gen %d thread %d, ops 0..%" PRIu64 " alone\n",
		proc, gen, tid, upto);
	if (!replay_fails(proc, gen, tid, ops, skip, n, why, sizeof(why))) {
		fprintf(stderr, "kva-fuzz: shrink: does not reproduce single-threaded (needs the other threads or a kill); replay with -R %d:%d:%d:%" PRIu64 "\n",
			proc, gen, tid, n);
		goto out;
	}
	fprintf(stderr, "kva-fuzz: shrink: reproduces: %s\n", why);
	/* Drop chunks, halving, while it still fails (bounded). */
	for (uint64_t chunk = n / 2; chunk >= 1; chunk /= 2) {
		for (uint64_t start = 0; start + 1 < n; start += chunk) {
			bool saved[4096];
			uint64_t end = start + chunk < n - 1 ? start + chunk : n - 1;
			bool any = false;

			if (end - start > 4096 || tries > 400 || time(NULL) - t0 > 300)
				continue;
			for (i = start; i < end; i++) {
				saved[i - start] = skip[i];
				any |= !skip[i];
				skip[i] = true;
			}
			if (!any)
				continue;
			tries++;
			if (!replay_fails(proc, gen, tid, ops, skip, n, why, sizeof(why)))
				for (i = start; i < end; i++)
					skip[i] = saved[i - start];
		}
	}
	for (i = 0, kept = 0; i < n; i++)
		kept += !skip[i];
	replay_fails(proc, gen, tid, ops, skip, n, why, sizeof(why));
	fprintf(stderr, "kva-fuzz: minimal sequence (%" PRIu64 " of %" PRIu64 " ops, %u replays): %s\n",
		kept, n, tries, why);
	for (i = 0; i < n; i++)
		if (!skip[i]) {
			describe(&ops[i], d, sizeof(d));
			fprintf(stderr, "kva-fuzz:   #%" PRIu64 " %s\n", i, d);
		}
out:
	free(ops);
	free(skip);
}

/* ------------------------------------------------------------ supervisor */
static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static pid_t spawn(int proc, int gen)
{
	pid_t pid = fork();

	if (pid < 0) {
		perror("fork");
		exit(2);
	}
	if (pid == 0)
		child_main(proc, gen);
	shm->cur_gen[proc] = gen;
	return pid;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: kva-fuzz [-s SEED] [-n OPS] [-t SECONDS] [-p PROCS] [-j THREADS]\n"
		"                [-k KILLS_PER_SEC] [-z] [-v] [-x OP[,OP...]] [-R PROC:GEN:THREAD:NOPS]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	int opt, kfd, reports = 0, rc = 0;
	pid_t pids[MAXPROC];
	int gens[MAXPROC] = { 0 };
	bool killed[MAXPROC] = { false }, done[MAXPROC] = { false };
	char *replay = NULL;
	struct rng kr;
	double t0, next_kill, stop_at = 0;
	bool hang_killed = false;
	unsigned long kills = 0, crashes = 0;
	int fproc = -1, fgen = 0, ftid = -1;
	uint64_t fop = 0;

	g_seed = (uint64_t)time(NULL) * 2654435761ULL ^ (uint64_t)getpid();
	while ((opt = getopt(argc, argv, "s:n:t:p:j:k:zvR:x:h")) != -1) {
		switch (opt) {
		case 's': g_seed = strtoull(optarg, NULL, 0); break;
		case 'n': g_nops = strtoul(optarg, NULL, 0); break;
		case 't': g_secs = (unsigned int)strtoul(optarg, NULL, 0); break;
		case 'p': g_procs = (unsigned int)strtoul(optarg, NULL, 0); break;
		case 'j': g_threads = (unsigned int)strtoul(optarg, NULL, 0); break;
		case 'k': g_kills = strtod(optarg, NULL); break;
		case 'z': g_check_zero = 1; break;
		case 'v': g_verbose++; break;
		case 'R': replay = optarg; break;
		case 'x':
			for (char *tok = strtok(optarg, ","); tok; tok = strtok(NULL, ",")) {
				unsigned int k;

				for (k = 0; k < OP_COUNT && strcasecmp(tok, op_names[k]); k++)
					;
				if (k == OP_COUNT) {
					fprintf(stderr, "kva-fuzz: -x: no op '%s'\n", tok);
					return 2;
				}
				op_weight[k] = 0;
			}
			break;
		default: usage();
		}
	}
	if (!g_procs || g_procs > MAXPROC || !g_threads || g_threads > MAXTHR)
		usage();
	setvbuf(stdout, NULL, _IOLBF, 0);
	shm = shared_map(sizeof(*shm));
	signal(SIGPIPE, SIG_IGN);
	if (access("/dev/kvarena", R_OK | W_OK)) {
		fprintf(stderr, "kva-fuzz: /dev/kvarena: %s (load kvarena.ko)\n", strerror(errno));
		return 2;
	}
	if (replay) {
		int p, g, th;
		unsigned long long n;

		if (sscanf(replay, "%d:%d:%d:%llu", &p, &g, &th, &n) != 4 || !n)
			usage();
		printf("kva-fuzz: seed=%#" PRIx64 " replay %d:%d:%d:%llu\n", g_seed, p, g, th, n);
		shrink(p, g, th, n - 1);
		return 0;
	}
	printf("kva-fuzz: seed=%#" PRIx64 " ops=%lu time=%us procs=%u threads=%u kills/s=%.2f\n",
	       g_seed, g_nops, g_secs, g_procs, g_threads, g_kills);
	if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, g_sock))
		g_sock[0] = g_sock[1] = -1;
	kfd = kmsg_open();
	kr.s = mix64(g_seed ^ 0x6b696c6cULL);
	t0 = now_s();
	next_kill = t0 + (g_kills > 0 ? (below(&kr, 2000) / 1000.0) / g_kills : 1e9);
	for (unsigned int p = 0; p < g_procs; p++)
		pids[p] = spawn((int)p, 0);
	for (;;) {
		unsigned int alive = 0;
		double now = now_s();
		int st;

		for (unsigned int p = 0; p < g_procs; p++) {
			pid_t w;

			if (done[p])
				continue;
			w = waitpid(pids[p], &st, WNOHANG);
			if (w != pids[p]) {
				alive++;
				continue;
			}
			if (WIFSIGNALED(st) && killed[p] && WTERMSIG(st) == SIGKILL) {
				/* ours: respawn */
			} else if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
				if (atomic_load(&shm->stop)) {
					done[p] = true;
					continue;
				}
			} else {
				crashes++;
				if (WIFEXITED(st) && WEXITSTATUS(st) == 3) {
					fproc = shm->fail_proc;
					fgen = shm->fail_gen;
					ftid = shm->fail_tid;
					fop = shm->fail_opno;
					fprintf(stderr, "kva-fuzz: FAIL: %s\n", shm->fail_msg);
				} else {
					fproc = (int)p;
					fgen = gens[p];
					fprintf(stderr, "kva-fuzz: FAIL: process %u (gen %d) %s %d\n", p, gens[p],
						WIFSIGNALED(st) ? "died of signal" : "exited with",
						WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
				}
				atomic_store(&shm->stop, 1);
				done[p] = true;
				rc = 1;
				continue;
			}
			killed[p] = false;
			if (atomic_load(&shm->stop)) {
				done[p] = true;
				continue;
			}
			pids[p] = spawn((int)p, ++gens[p]);
			alive++;
		}
		if (!alive)
			break;
		if (!atomic_load(&shm->stop) && now - t0 > g_secs) {
			printf("kva-fuzz: time budget reached\n");
			atomic_store(&shm->stop, 1);
		}
		if (atomic_load(&shm->stop) && !stop_at)
			stop_at = now;
		if (stop_at && now - stop_at > 120 && !hang_killed) {
			fprintf(stderr, "kva-fuzz: FAIL: children still running 120 s after stop (hang?); SIGKILL\n");
			for (unsigned int p = 0; p < g_procs; p++)
				if (!done[p])
					kill(pids[p], SIGKILL);
			hang_killed = true;
			rc = 1;
		}
		if (hang_killed && now - stop_at > 150) {
			fprintf(stderr, "kva-fuzz: FAIL: children survive SIGKILL: stuck in the kernel (D state)\n");
			break;
		}
		if (!atomic_load(&shm->stop) && now >= next_kill) {
			unsigned int p = below(&kr, g_procs);

			if (!done[p] && !killed[p]) {
				kill(pids[p], SIGKILL);
				killed[p] = true;
				kills++;
			}
			next_kill = now + (below(&kr, 2000) / 1000.0) / g_kills;
		}
		reports += kmsg_check(kfd, "run");
		if (reports && !rc) {
			fprintf(stderr, "kva-fuzz: FAIL: kernel report during the run\n");
			atomic_store(&shm->stop, 1);
			rc = 1;
		}
		usleep(20000);
	}
	close(g_sock[0]);
	close(g_sock[1]);
	g_sock[0] = g_sock[1] = -1;	/* replays run without fd passing */
	printf("kva-fuzz: %lu ops in %.1f s, %lu kills, %u processes x %u threads\n",
	       (unsigned long)(atomic_load(&shm->ops) > g_nops ? g_nops : atomic_load(&shm->ops)),
	       now_s() - t0, kills, g_procs, g_threads);
	printf("kva-fuzz: kernel calls ok/failed per op:");
	for (unsigned int k = 0; k < OP_COUNT; k++)
		printf("%s %s %lu/%lu", k % 6 ? "," : "\nkva-fuzz:  ", op_names[k],
		       (unsigned long)atomic_load(&shm->ok[k]), (unsigned long)atomic_load(&shm->err[k]));
	printf("\n");
	if (g_check_zero && !rc) {
		char why[160];

		if (!kvg_counters_zero(200, 100000, why, sizeof(why))) {
			fprintf(stderr, "kva-fuzz: FAIL: module counters not back to zero: %s\n", why);
			rc = 1;
		}
	}
	usleep(500000);
	reports += kmsg_check(kfd, "end");
	if (reports) {
		fprintf(stderr, "kva-fuzz: FAIL: %d kernel report line(s)\n", reports);
		rc = 1;
	}
	if (rc) {
		fprintf(stderr, "kva-fuzz: FAILED with seed=%#" PRIx64 " (rerun: kva-fuzz -s %#" PRIx64 " -n %lu -p %u -j %u)\n",
			g_seed, g_seed, g_nops, g_procs, g_threads);
		if (fproc >= 0 && ftid >= 0) {
			shrink(fproc, fgen, ftid, fop);
		} else if (fproc >= 0) {
			uint64_t cur[MAXTHR];

			for (unsigned int th = 0; th < g_threads; th++)
				cur[th] = atomic_load(&shm->cur_op[fproc][th]);
			for (unsigned int th = 0; th < g_threads; th++)
				shrink(fproc, fgen, (int)th, cur[th]);
		}
		(void)crashes;
		return 1;
	}
	printf("kva-fuzz: PASS seed=%#" PRIx64 "\n", g_seed);
	return 0;
}
