// SPDX-License-Identifier: GPL-2.0
/*
 * Arena lifetime and memory: KVA_IOC_ARENA_CREATE (validate, reserve against
 * the module cap, allocate 2 MiB pages on the node, export the dma-buf,
 * return the arena fd), mmap of the pages, and the two releases: the arena
 * fd's (bookkeeping) and the dma-buf's (memory).  The ioctls on an arena fd
 * are in arena_ops.c.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/anon_inodes.h>
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/mm.h>
#include <linux/nodemask.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/timekeeping.h>

#include "compat.h"
#include "kva.h"
#include "trace.h"

static const struct file_operations kva_arena_fops;

static int kva_arena_check_args(const struct kva_arena_create *arg)
{
	int ret = kvc_check_arena_create(arg, kva_max_arena_bytes());

	if (ret)
		return ret;
	if (arg->numa_node != KVA_NUMA_ANY &&
	    (arg->numa_node >= MAX_NUMNODES || !node_online(arg->numa_node)))
		return -EINVAL;
	return 0;
}

static int kva_pinned_reserve(u64 bytes)
{
	if (atomic64_add_return(bytes, &kva_pinned_bytes) >
	    kva_max_pinned_bytes()) {
		atomic64_sub(bytes, &kva_pinned_bytes);
		return -ENOSPC;
	}
	return 0;
}

static void kva_pages_free(struct kva_arena *arena)
{
	u32 i;

	if (!arena->pages)	/* a create that failed before allocating */
		return;
	for (i = 0; i < arena->npages; i++)
		if (arena->pages[i])
			__free_pages(arena->pages[i], KVA_PAGE_ORDER);
	kvfree(arena->pages);
}

static int kva_pages_alloc(struct kva_arena *arena)
{
	/* Zeroed: the previous owner's data must never reach user space. */
	gfp_t gfp = GFP_KERNEL_ACCOUNT | __GFP_COMP | __GFP_ZERO |
		    __GFP_NOWARN | __GFP_RETRY_MAYFAIL;
	int nid = arena->numa_node;
	u32 i;

	if (nid != KVA_NUMA_ANY)
		gfp |= __GFP_THISNODE;
	else
		nid = NUMA_NO_NODE;
	arena->pages = kvcalloc(arena->npages, sizeof(*arena->pages),
				GFP_KERNEL);
	if (!arena->pages)
		return -ENOMEM;
	for (i = 0; i < arena->npages; i++) {
		if (fatal_signal_pending(current))
			return -EINTR;
		arena->pages[i] = alloc_pages_node(nid, gfp, KVA_PAGE_ORDER);
		if (!arena->pages[i])
			return -ENOMEM;
		cond_resched();
	}
	return 0;
}

/* Keep kva_arenas sorted by id: netlink dumps resume from the last id. */
static void kva_arenas_insert(struct kva_arena *arena)
{
	struct kva_arena *pos;

	mutex_lock(&kva_arenas_lock);
	list_for_each_entry_reverse(pos, &kva_arenas, node)
		if (pos->id < arena->id)
			break;
	list_add(&arena->node, &pos->node);
	mutex_unlock(&kva_arenas_lock);
}

/* Memory side: called when the dma-buf (or a failed create) lets go. */
void kva_arena_free(struct kva_arena *arena)
{
	bool listed;

	mutex_lock(&kva_arenas_lock);
	listed = !list_empty(&arena->node);
	if (listed)
		list_del(&arena->node);
	mutex_unlock(&kva_arenas_lock);
	/* Only an arena that was announced is announced gone. */
	if (listed) {
		trace_kvarena_arena(arena->id, arena->tenant->id, arena->bytes,
				    arena->block_size, false);
		kva_netlink_arena(arena, false);
	}
	kva_pages_free(arena);
	atomic64_sub(arena->bytes, &kva_pinned_bytes);
	kva_tenant_arena_add(arena->tenant, -1);
	kva_events_destroy(arena);
	mutex_destroy(&arena->att_lock);
	mutex_destroy(&arena->lock);
	kfree(arena);
}

/* Bookkeeping side: every session ends, every block is uncharged. */
static void kva_arena_close(struct kva_arena *arena)
{
	struct kvc_session *s;
	u32 cursor = 0;

	mutex_lock(&arena->lock);
	arena->fd_open = false;
	/* Tracers see every session end, including these. */
	while ((s = kvc_session_next(&arena->core, &cursor)))
		trace_kvarena_session_state(arena->id, s->id, s->state,
					    KVA_STATE_ENDED, 0, 0, s->nheld,
					    arena->block_size, s->cookie);
	kva_tenant_uncharge(arena->tenant, kvc_blocks_in_use(&arena->core),
			    arena->block_size);
	kvc_arena_destroy(&arena->core);
	mutex_unlock(&arena->lock);
}

/* Every close(): the closing process's parked event commands end. */
static int kva_arena_flush(struct file *file, fl_owner_t id)
{
	kva_events_cancel_tgid(file->private_data, task_tgid_nr(current));
	return 0;
}

static int kva_arena_release(struct inode *inode, struct file *file)
{
	struct kva_arena *arena = file->private_data;

	kva_arena_close(arena);
	dma_buf_put(arena->dmabuf);
	return 0;
}

static struct kva_arena *kva_arena_alloc(const struct kva_arena_create *arg,
					 struct kva_tenant_acct *tenant)
{
	struct kva_arena *arena;
	u32 nblocks;
	int ret;

	arena = kzalloc(sizeof(*arena), GFP_KERNEL_ACCOUNT);
	if (!arena)
		return ERR_PTR(-ENOMEM);
	mutex_init(&arena->lock);
	mutex_init(&arena->att_lock);
	INIT_LIST_HEAD(&arena->attachments);
	INIT_LIST_HEAD(&arena->dev_maps);
	INIT_LIST_HEAD(&arena->node);
	arena->id = (u32)atomic64_inc_return(&kva_arenas_created);
	strscpy(arena->name, arg->name, sizeof(arena->name));
	arena->tenant = tenant;
	arena->numa_node = arg->numa_node;
	arena->created_ns = ktime_get_ns();
	arena->bytes = arg->bytes;
	arena->npages = arg->bytes >> KVA_PAGE_SHIFT;
	arena->block_size = arg->block_size;
	arena->blocks_per_page = KVA_PAGE_SIZE / arg->block_size;
	kva_tenant_arena_add(tenant, 1);

	ret = kva_events_init(arena);
	if (ret)
		goto err_free;
	ret = kva_pages_alloc(arena);
	if (ret)
		goto err_free;
	nblocks = kvc_arena_nblocks(arena->bytes, arena->block_size);
	ret = kvc_arena_init(&arena->core, nblocks, arena->block_size,
			     kva_max_sessions);
	if (ret)
		goto err_free;
	ret = kvc_policy_set(&arena->core, arg->policy, arg->low_wm,
			     arg->high_wm, arg->ttl_ms);
	if (ret)
		goto err_core;
	arena->fd_open = true;
	return arena;

err_core:
	kvc_arena_destroy(&arena->core);
err_free:
	/* Nothing is shared yet: undo by hand what kva_arena_free would. */
	kva_pages_free(arena);
	kva_events_destroy(arena);
	kva_tenant_arena_add(tenant, -1);
	mutex_destroy(&arena->att_lock);
	mutex_destroy(&arena->lock);
	kfree(arena);
	return ERR_PTR(ret);
}

long kva_arena_create_ioctl(void __user *uarg)
{
	struct kva_tenant_acct *tenant;
	struct kva_arena_create arg;
	struct kva_arena *arena;
	struct dma_buf *dmabuf;
	struct file *file;
	u32 usize;
	int fd, ret;

	ret = kva_copy_in(&arg, sizeof(arg), KVA_ARENA_CREATE_SIZE_VER0, uarg,
			  &usize);
	if (ret)
		return ret;
	ret = kva_arena_check_args(&arg);
	if (ret)
		return ret;
	tenant = kva_tenant_get(arg.tenant_id);
	if (IS_ERR(tenant))
		return PTR_ERR(tenant);
	ret = kva_pinned_reserve(arg.bytes);
	if (ret)
		return ret;
	arena = kva_arena_alloc(&arg, tenant);
	if (IS_ERR(arena)) {
		atomic64_sub(arg.bytes, &kva_pinned_bytes);
		return PTR_ERR(arena);
	}

	/* From here the dma-buf owns the memory and the pinned charge. */
	dmabuf = kva_dmabuf_export(arena);
	if (IS_ERR(dmabuf)) {
		kvc_arena_destroy(&arena->core);
		kva_arena_free(arena);
		return PTR_ERR(dmabuf);
	}
	arena->dmabuf = dmabuf;
	kva_arenas_insert(arena);
	trace_kvarena_arena(arena->id, tenant->id, arena->bytes,
			    arena->block_size, true);
	kva_netlink_arena(arena, true);

	fd = get_unused_fd_flags(O_CLOEXEC);
	if (fd < 0) {
		ret = fd;
		goto err_close;
	}
	file = anon_inode_getfile("[kvarena]", &kva_arena_fops, arena, O_RDWR);
	if (IS_ERR(file)) {
		ret = PTR_ERR(file);
		goto err_fd;
	}
	arg.arena_id = arena->id;
	arg.blocks_total = arena->core.pool.nblocks;
	ret = kva_copy_out(uarg, &arg, sizeof(arg), usize);
	if (ret) {
		put_unused_fd(fd);
		fput(file);		/* releases like a close() */
		return ret;
	}
	fd_install(fd, file);
	return fd;

err_fd:
	put_unused_fd(fd);
err_close:
	kva_arena_close(arena);
	dma_buf_put(dmabuf);
	return ret;
}

/* The pages are inserted at mmap time; there is nothing to fault in. */
static const struct vm_operations_struct kva_vm_ops = {};

/* Map the whole range now: normal pages, so GUP (RDMA) can pin them. */
int kva_arena_mmap(struct kva_arena *arena, struct vm_area_struct *vma)
{
	unsigned long len = vma->vm_end - vma->vm_start;
	unsigned long addr = vma->vm_start;
	u64 off = (u64)vma->vm_pgoff << PAGE_SHIFT;
	struct page **batch;
	int ret = 0;

	if (!(vma->vm_flags & VM_SHARED))
		return -EINVAL;
	if (off >= arena->bytes || len > arena->bytes - off)
		return -EINVAL;
	batch = kmalloc_array(KVA_PAGES_PER_HUGE, sizeof(*batch), GFP_KERNEL);
	if (!batch)
		return -ENOMEM;
	vm_flags_set(vma, VM_DONTEXPAND | VM_DONTDUMP);
	vma->vm_ops = &kva_vm_ops;
	while (len && !ret) {
		u64 pg = off >> PAGE_SHIFT;
		struct page *huge = arena->pages[pg >> KVA_PAGE_ORDER];
		unsigned long first = pg & (KVA_PAGES_PER_HUGE - 1);
		unsigned long n = min_t(unsigned long,
					KVA_PAGES_PER_HUGE - first,
					len >> PAGE_SHIFT);
		unsigned long i, left = n;

		for (i = 0; i < n; i++)
			batch[i] = nth_page(huge, first + i);
		ret = vm_insert_pages(vma, addr, batch, &left);
		if (!ret && left)
			ret = -EFAULT;
		addr += n << PAGE_SHIFT;
		off += (u64)n << PAGE_SHIFT;
		len -= n << PAGE_SHIFT;
		cond_resched();
	}
	kfree(batch);
	return ret;
}

static int kva_arena_fop_mmap(struct file *file, struct vm_area_struct *vma)
{
	return kva_arena_mmap(file->private_data, vma);
}

static const struct file_operations kva_arena_fops = {
	.owner = THIS_MODULE,
	.flush = kva_arena_flush,
	.release = kva_arena_release,
	.unlocked_ioctl = kva_arena_ioctl,
	.uring_cmd = kva_arena_uring_cmd,
	.compat_ioctl = compat_ptr_ioctl,
	.mmap = kva_arena_fop_mmap,
	.llseek = noop_llseek,
};
