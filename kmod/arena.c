// SPDX-License-Identifier: GPL-2.0
/*
 * Arena lifetime: KVA_IOC_ARENA_CREATE (validate; allocate the arena, its
 * pages, its dma-buf and fd; publish), the list of live arenas and the
 * references that let stats and netlink walk it without holding its lock,
 * and the two releases: the arena fd's (bookkeeping) and the dma-buf's
 * (memory).  The pages are in pages.c, the ioctls on an arena fd in
 * arena_ops.c.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/anon_inodes.h>
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/mm.h>
#include <linux/moduleparam.h>
#include <linux/nodemask.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/timekeeping.h>

#include "compat.h"
#include "kva.h"
#include "trace.h"

static const struct file_operations kva_arena_fops;

static unsigned int max_block_refs = KVC_REFS_PER_BLOCK;
module_param(max_block_refs, uint, 0644);
MODULE_PARM_DESC(max_block_refs, "Block references (sessions holding a block) per arena, per block on average; BLOCKS_SHARE past it: ENOSPC (default 16)");

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

/* Keep kva_arenas sorted by id: walkers resume from the last id. */
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

struct kva_arena *kva_arena_get_next(u32 min_id)
{
	struct kva_arena *arena, *found = NULL;

	mutex_lock(&kva_arenas_lock);
	list_for_each_entry(arena, &kva_arenas, node) {
		if (arena->id >= min_id) {
			/* Listed: the dma-buf's reference is still held. */
			kref_get(&arena->ref);
			found = arena;
			break;
		}
	}
	mutex_unlock(&kva_arenas_lock);
	return found;
}

struct kva_arena *kva_arena_get_id(u32 id)
{
	struct kva_arena *arena = kva_arena_get_next(id);

	if (arena && arena->id != id) {
		kva_arena_put(arena);
		arena = NULL;
	}
	return arena;
}

/* The last reference: everything goes but pages still referenced elsewhere. */
static void kva_arena_release_mem(struct kref *ref)
{
	struct kva_arena *arena = container_of(ref, struct kva_arena, ref);

	kvc_arena_destroy(&arena->core);	/* a create that failed */
	kva_events_destroy(arena);
	mutex_destroy(&arena->att_lock);
	mutex_destroy(&arena->lock);
	if (!kva_pages_release(arena))
		kfree(arena);
}

void kva_arena_put(struct kva_arena *arena)
{
	kref_put(&arena->ref, kva_arena_release_mem);
}

/* Memory side: called when the dma-buf lets go. */
void kva_arena_free(struct kva_arena *arena)
{
	bool listed;

	mutex_lock(&kva_arenas_lock);
	listed = !list_empty(&arena->node);
	if (listed)
		list_del_init(&arena->node);
	mutex_unlock(&kva_arenas_lock);
	/* Only an arena that was announced is announced gone. */
	if (listed) {
		trace_kvarena_arena(arena->id, arena->tenant->id, arena->bytes,
				    arena->block_size, false);
		kva_netlink_arena(arena, false);
	}
	kva_arena_put(arena);
}

/* Bookkeeping side: every session ends, every block is uncharged. */
static void kva_arena_close(struct kva_arena *arena)
{
	struct kvc_session *s;
	u32 cursor = 0;

	mutex_lock(&arena->lock);
	arena->fd_open = false;
	/* Tracers see every session end, including these. */
	while ((s = kvc_session_next(&arena->core, &cursor))) {
		trace_kvarena_session_state(arena->id, s->id, s->state,
					    KVA_STATE_ENDED, 0, 0, s->nheld,
					    arena->block_size, s->cookie);
		kvc_resched(cursor);	/* up to 65,535 sessions */
	}
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
	kva_dmabuf_rdonly_put(arena);
	dma_buf_put(arena->dmabuf);
	return 0;
}

/* Arena ids are u32 in the UAPI and never reused: refuse the 2^32nd. */
static int kva_arena_new_id(u32 *id)
{
	s64 n = atomic64_inc_return(&kva_arenas_created);

	if (n > U32_MAX) {
		atomic64_dec(&kva_arenas_created);
		return -ENOSPC;
	}
	*id = n;
	return 0;
}

/*
 * Allocate everything an arena needs, charging the caller's memcg, the
 * tenant, the pinned cap and the caller's locked memory; nothing is
 * visible to anyone yet.  On error the arena's own release undoes whatever
 * was done.
 */
static struct kva_arena *kva_arena_alloc(const struct kva_arena_create *arg,
					 struct kva_tenant_acct *tenant)
{
	struct kva_arena *arena;
	int ret;

	arena = kzalloc(sizeof(*arena), GFP_KERNEL_ACCOUNT);
	if (!arena)
		return ERR_PTR(-ENOMEM);
	kref_init(&arena->ref);
	mutex_init(&arena->lock);
	mutex_init(&arena->att_lock);
	INIT_LIST_HEAD(&arena->attachments);
	INIT_LIST_HEAD(&arena->dev_maps);
	INIT_LIST_HEAD(&arena->node);
	strscpy(arena->name, arg->name, sizeof(arena->name));
	arena->numa_node = arg->numa_node;
	arena->created_ns = ktime_get_ns();
	arena->bytes = arg->bytes;
	arena->npages = arg->bytes >> KVA_PAGE_SHIFT;
	arena->block_size = arg->block_size;
	arena->blocks_per_page = KVA_PAGE_SIZE / arg->block_size;

	ret = kva_events_init(arena);
	if (ret)
		goto err;
	ret = kva_arena_new_id(&arena->id);
	if (ret)
		goto err;
	ret = kva_arena_charge(arena, tenant);	/* the release uncharges */
	if (ret)
		goto err;
	ret = kva_pages_alloc(arena);
	if (ret)
		goto err;
	ret = kvc_arena_init(&arena->core,
			     kvc_arena_nblocks(arena->bytes, arena->block_size),
			     arena->block_size, kva_max_sessions);
	if (ret)
		goto err;
	kvc_set_ref_budget(&arena->core, READ_ONCE(max_block_refs));
	ret = kvc_policy_set(&arena->core, arg->policy, arg->low_wm,
			     arg->high_wm, arg->ttl_ms);
	if (ret)
		goto err;
	arena->fd_open = true;
	return arena;
err:
	kva_arena_put(arena);
	return ERR_PTR(ret);
}

/*
 * KVA_IOC_ARENA_CREATE in udmabuf's order: validate the request, allocate
 * everything (memory, dma-buf, file, fd) and tell the caller, and only then
 * publish the arena (list, tracepoint, netlink) and install its fd, so a
 * failed create is never seen by anyone.
 */
long kva_arena_create_ioctl(struct file *dev, void __user *uarg)
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
	tenant = kva_tenant_for_caller(dev, arg.tenant_id);
	if (IS_ERR(tenant))
		return PTR_ERR(tenant);
	arena = kva_arena_alloc(&arg, tenant);
	kva_tenant_put(tenant);		/* the arena holds its own */
	if (IS_ERR(arena))
		return PTR_ERR(arena);

	dmabuf = kva_dmabuf_export(arena);
	if (IS_ERR(dmabuf)) {
		kva_arena_put(arena);
		return PTR_ERR(dmabuf);
	}
	/* From here the dma-buf owns the arena: its release frees it. */
	arena->dmabuf = dmabuf;
	fd = get_unused_fd_flags(O_CLOEXEC);
	if (fd < 0) {
		ret = fd;
		goto err_close;
	}
	file = kva_anon_file("[kvarena]", &kva_arena_fops, arena, O_RDWR,
			     arena->bytes);
	if (IS_ERR(file)) {
		ret = PTR_ERR(file);
		goto err_fd;
	}
	arg.arena_id = arena->id;
	arg.blocks_total = arena->core.pool.nblocks;
	arg.tenant_id = tenant->id;
	ret = kva_copy_out(uarg, &arg, sizeof(arg), usize);
	if (ret) {
		put_unused_fd(fd);
		fput(file);		/* releases like a close() */
		return ret;
	}

	kva_arenas_insert(arena);
	trace_kvarena_arena(arena->id, tenant->id, arena->bytes,
			    arena->block_size, true);
	kva_netlink_arena(arena, true);
	fd_install(fd, file);
	return fd;

err_fd:
	put_unused_fd(fd);
err_close:
	kva_arena_close(arena);
	dma_buf_put(dmabuf);
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
	/* 2 MiB-aligned addresses, so that mappings get PMD entries. */
	.get_unmapped_area = thp_get_unmapped_area,
	.llseek = noop_llseek,
};
