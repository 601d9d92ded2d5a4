/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Differences between the kernels kvarena supports (Debian's 6.1 and 6.12),
 * kept in one place so the rest of the module reads as current code.
 */
#ifndef KVA_COMPAT_H
#define KVA_COMPAT_H

#include <linux/version.h>
#include <linux/mm.h>

#if KERNEL_VERSION(6, 3, 0) > LINUX_VERSION_CODE
/* vm_flags became read-only outside these helpers in 6.3. */
static inline void vm_flags_set(struct vm_area_struct *vma, vm_flags_t flags)
{
	vma->vm_flags |= flags;
}
#endif

/* uring_cmd: the header moved in 6.6, the payload accessor came with it. */
#if KERNEL_VERSION(6, 6, 0) > LINUX_VERSION_CODE
#include <linux/io_uring.h>
#include <linux/io_uring_types.h>
static inline const void *kva_uring_payload(struct io_uring_cmd *cmd)
{
	return cmd->cmd;
}
#else
#include <linux/io_uring/cmd.h>
static inline const void *kva_uring_payload(struct io_uring_cmd *cmd)
{
	return io_uring_sqe_cmd(cmd->sqe);
}
#endif

/*
 * 6.7 lets io_uring cancel parked commands (IO_URING_F_CANCEL); before it,
 * kvarena watches the submitter and its ring itself (monitor.c).
 */
#if KERNEL_VERSION(6, 7, 0) <= LINUX_VERSION_CODE
#define KVA_URING_CANCELABLE	1
#else
#define KVA_URING_CANCELABLE	0
#endif

/* The command's 32 bytes of driver data (6.12 has an accessor for it). */
#ifdef io_uring_cmd_to_pdu
#define kva_uring_cmd_pdu(cmd, type)	io_uring_cmd_to_pdu(cmd, type)
#else
#define kva_uring_cmd_pdu(cmd, type) \
	((type *)((cmd)->pdu + BUILD_BUG_ON_ZERO(sizeof(type) > sizeof((cmd)->pdu))))
#endif

#if !KVA_URING_CANCELABLE
#include <linux/sched.h>
/*
 * Is the command's ring being torn down, or its submitter exiting?  The one
 * place kvarena reads io_uring internals (struct io_kiocb, its ring's
 * reference count and submitting task): 6.1 exports nothing that tells a
 * driver this, which is what IO_URING_F_CANCEL added in 6.7.  Listed in
 * Documentation/design.md.
 */
static inline bool kva_uring_cmd_orphaned(struct io_uring_cmd *cmd)
{
	struct io_kiocb *req = cmd_to_io_kiocb(cmd);

	return percpu_ref_is_dying(&req->ctx->refs) ||
	       (req->task->flags & PF_EXITING);
}
#endif

/*
 * An anonymous file of `size` bytes.  6.12 (since 6.12.y's "do not map
 * beyond i_size") maps a large folio with a PMD only within the file's
 * i_size, and the shared anon inode's is 0: there the arena file gets an
 * inode of its own (anon_inode_create_getfile(), 6.7+), sized as the
 * arena.  6.1's fault path has no such check.
 */
#include <linux/anon_inodes.h>
#include <linux/fs.h>
#if KERNEL_VERSION(6, 7, 0) <= LINUX_VERSION_CODE
static inline struct file *kva_anon_file(const char *name,
					 const struct file_operations *fops,
					 void *priv, int flags, loff_t size)
{
	struct file *file = anon_inode_create_getfile(name, fops, priv, flags,
						      NULL);

	if (!IS_ERR(file))
		i_size_write(file_inode(file), size);
	return file;
}
#else
static inline struct file *kva_anon_file(const char *name,
					 const struct file_operations *fops,
					 void *priv, int flags, loff_t size)
{
	return anon_inode_getfile(name, fops, priv, flags);
}
#endif

#endif /* KVA_COMPAT_H */
