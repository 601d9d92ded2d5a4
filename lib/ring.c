// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * kva_ring_*: the arena ops over io_uring (IORING_OP_URING_CMD), built on
 * liburing.  Debian's liburing 2.3 has no uring_cmd helper, so SQEs are
 * filled by hand: cmd_op is the ioctl number, and the 16-byte payload in
 * sqe->cmd is struct kva_uring_cmd (fits a plain 64-byte SQE).
 */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <liburing.h>

#include "internal.h"

struct kva_ring {
	struct io_uring uring;
	int fd;				/* our own dup of the arena fd */
};

/* The op -> ioctl number table: the numbers stay inside the library. */
static const unsigned long kva_ring_ops[] = {
	[KVA_RING_ARENA_INFO] = KVA_IOC_ARENA_INFO,
	[KVA_RING_BLOCKS_ALLOC] = KVA_IOC_BLOCKS_ALLOC,
	[KVA_RING_BLOCKS_FREE] = KVA_IOC_BLOCKS_FREE,
	[KVA_RING_BLOCKS_SHARE] = KVA_IOC_BLOCKS_SHARE,
	[KVA_RING_SESSION_OPEN] = KVA_IOC_SESSION_CREATE,
	[KVA_RING_SESSION_CLOSE] = KVA_IOC_SESSION_END,
	[KVA_RING_SESSION_SET_STATE] = KVA_IOC_SESSION_SET_STATE,
	[KVA_RING_SESSION_INFO] = KVA_IOC_SESSION_INFO,
	[KVA_RING_SET_POLICY] = KVA_IOC_ARENA_SET_POLICY,
	[KVA_RING_VICTIMS] = KVA_IOC_ARENA_VICTIMS,
};

KVA_EXPORT int kva_ring_open(struct kva_arena *arena, unsigned int entries,
			     struct kva_ring **ringp)
{
	struct kva_ring *r;
	int ret;

	if (arena->dev->backend != KVA_BACKEND_KERNEL)
		return -EOPNOTSUPP;
	if (!entries || entries > 4096)
		return -EINVAL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	/*
	 * The ring holds its own reference to the arena: destroying the
	 * arena handle first leaves the ring's commands on the same arena,
	 * never on whatever file reuses the number.
	 */
	r->fd = fcntl(arena->fd, F_DUPFD_CLOEXEC, 0);
	if (r->fd < 0) {
		ret = -errno;
		free(r);
		return ret;
	}
	ret = io_uring_queue_init(entries, &r->uring, 0);
	if (ret < 0) {
		close(r->fd);
		free(r);
		return ret;
	}
	*ringp = r;
	return 0;
}

KVA_EXPORT void kva_ring_close(struct kva_ring *ring)
{
	if (!ring)
		return;
	io_uring_queue_exit(&ring->uring);
	close(ring->fd);
	free(ring);
}

KVA_EXPORT int kva_ring_fd(const struct kva_ring *ring)
{
	return ring->uring.ring_fd;
}

static int kva_ring_prep(struct kva_ring *ring, unsigned long op, void *arg,
			 uint64_t user_data)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&ring->uring);
	struct kva_uring_cmd pdu = { .arg = (uintptr_t)arg };

	if (!sqe)
		return -EBUSY;
	io_uring_prep_rw(IORING_OP_URING_CMD, sqe, ring->fd, NULL, 0, 0);
	sqe->cmd_op = (uint32_t)op;
	memcpy(sqe->cmd, &pdu, sizeof(pdu));
	io_uring_sqe_set_data64(sqe, user_data);
	return 0;
}

KVA_EXPORT int kva_ring_queue(struct kva_ring *ring, enum kva_ring_op op,
			      void *arg, uint64_t user_data)
{
	if ((unsigned int)op >= sizeof(kva_ring_ops) / sizeof(kva_ring_ops[0]) ||
	    !kva_ring_ops[op] || !arg)
		return -EINVAL;
	return kva_ring_prep(ring, kva_ring_ops[op], arg, user_data);
}

KVA_EXPORT int kva_ring_queue_wait_event(struct kva_ring *ring,
					 struct kva_event *ev,
					 uint64_t ack_seq, uint64_t user_data)
{
	if (!ev)
		return -EINVAL;
	/* ev->size is the caller's, read by the kernel when the op runs. */
	ev->ack_seq = ack_seq;
	return kva_ring_prep(ring, KVA_URING_WAIT_EVENT, ev, user_data);
}

KVA_EXPORT int kva_ring_submit(struct kva_ring *ring)
{
	return io_uring_submit(&ring->uring);
}

KVA_EXPORT int kva_ring_reap(struct kva_ring *ring, struct kva_ring_cqe *out,
			     unsigned int max, unsigned int wait_nr)
{
	struct io_uring_cqe *cqe;
	unsigned int n = 0;
	int ret;

	while (n < max) {
		if (n < wait_nr)
			ret = io_uring_wait_cqe(&ring->uring, &cqe);
		else
			ret = io_uring_peek_cqe(&ring->uring, &cqe);
		if (ret == -EAGAIN || (ret == -EINTR && n))
			break;
		if (ret < 0)
			return ret;
		out[n].user_data = io_uring_cqe_get_data64(cqe);
		out[n].res = cqe->res;
		io_uring_cqe_seen(&ring->uring, cqe);
		n++;
	}
	return (int)n;
}
