// SPDX-License-Identifier: GPL-2.0
/*
 * io_uring passthrough (IORING_OP_URING_CMD) on an arena fd.  sqe->cmd_op
 * is an arena ioctl command and the 16-byte payload points to that ioctl's
 * struct, so every op runs the very handler its ioctl twin runs; only
 * KVA_URING_WAIT_EVENT is io_uring's own (events.c).  The inline issue is
 * non-blocking: a contended arena gives -EAGAIN and io_uring retries the
 * command from a worker that may sleep.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/fs.h>

#include "compat.h"
#include "kva.h"

static int kva_uring_issue(struct kva_arena *arena, struct io_uring_cmd *cmd,
			   unsigned int issue_flags)
{
	struct kva_uring_cmd pdu;

	/* The SQE may be shared with user space: read it once. */
	memcpy(&pdu, kva_uring_payload(cmd), sizeof(pdu));
	if (pdu.flags || pdu.pad)
		return -EINVAL;
	if (cmd->cmd_op == KVA_URING_WAIT_EVENT)
		return kva_uring_wait_event(arena, cmd, &pdu, issue_flags);
	/* An fd installed from an io_uring worker is not worth the risk. */
	if (cmd->cmd_op == KVA_IOC_EXPORT_DMABUF)
		return -EOPNOTSUPP;
	return kva_arena_op(arena, cmd->cmd_op, u64_to_user_ptr(pdu.arg),
			    issue_flags & IO_URING_F_NONBLOCK);
}

int kva_arena_uring_cmd(struct io_uring_cmd *cmd, unsigned int issue_flags)
{
	struct kva_arena *arena = cmd->file->private_data;
	int ret;

#if KVA_URING_CANCELABLE
	if (issue_flags & IO_URING_F_CANCEL) {
		kva_uring_wait_cancel(arena, cmd, issue_flags);
		return 0;
	}
#endif
	ret = kva_uring_issue(arena, cmd, issue_flags);
	if (ret == -EIOCBQUEUED ||
	    (ret == -EAGAIN && (issue_flags & IO_URING_F_NONBLOCK)))
		return ret;
	/*
	 * Complete here rather than returning the result: 6.1's io-wq path
	 * drops a positive return from ->uring_cmd without posting a CQE.
	 */
	io_uring_cmd_done(cmd, ret, 0, issue_flags);
	return -EIOCBQUEUED;
}
