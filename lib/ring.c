// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * kva_ring_*: the arena ops over io_uring (IORING_OP_URING_CMD), built on
 * liburing.  Debian's liburing 2.3 has no uring_cmd helper, so SQEs are
 * filled by hand: cmd_op is the ioctl number, and the 16-byte payload in
 * sqe->cmd is struct kva_uring_cmd (fits a plain 64-byte SQE).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <liburing.h>

#include "internal.h"

struct kva_ring {
	struct io_uring uring;
	int fd;				/* the arena fd */
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
	ret = io_uring_queue_init(entries, &r->uring, 0);
	if (ret < 0) {
		free(r);
		return ret;
	}
	r->fd = arena->fd;
	*ringp = r;
	return 0;
}

KVA_EXPORT void kva_ring_close(struct kva_ring *ring)
{
	if (!ring)
		return;
	io_uring_queue_exit(&ring->uring);
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

KVA_EXPORT int kva_ring_queue(struct kva_ring *ring, unsigned long op,
			      void *arg, uint64_t user_data)
{
	if (_IOC_TYPE(op) != KVA_IOC_MAGIC || !arg)
		return -EINVAL;
	return kva_ring_prep(ring, op, arg, user_data);
}

KVA_EXPORT int kva_ring_queue_wait_event(struct kva_ring *ring,
					 struct kva_event *ev,
					 uint64_t ack_seq, uint64_t user_data)
{
	if (!ev)
		return -EINVAL;
	ev->size = sizeof(*ev);
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
