// SPDX-License-Identifier: GPL-2.0
/*
 * An arena's memory: its 2 MiB compound pages, allocated zeroed on the
 * requested node, inserted into user mappings, and charged to the module's
 * pinned cap until they are really free.
 *
 * The mappings are ordinary page mappings, so user space can take page
 * references that outlive the arena (vmsplice into a pipe, O_DIRECT, RDMA
 * registration through GUP).  The cap must hold anyway: when an arena goes,
 * a page that someone else still references is not handed back; it lingers
 * on a list, still charged, and a periodic check frees and uncharges it once
 * only the module's reference is left (no one can then take a new one: every
 * mapping is gone and references are only copied from existing ones).
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/mm.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/workqueue.h>

#include "compat.h"
#include "kva.h"

#define KVA_LINGER_PERIOD	HZ

static LIST_HEAD(kva_lingering);
static DEFINE_MUTEX(kva_linger_lock);
static void kva_linger_fn(struct work_struct *work);
static DECLARE_DELAYED_WORK(kva_linger_work, kva_linger_fn);

int kva_pinned_reserve(u64 bytes)
{
	if (atomic64_add_return(bytes, &kva_pinned_bytes) >
	    kva_max_pinned_bytes()) {
		atomic64_sub(bytes, &kva_pinned_bytes);
		return -ENOSPC;
	}
	return 0;
}

int kva_pages_alloc(struct kva_arena *arena)
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
				GFP_KERNEL_ACCOUNT);
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

/*
 * Free (and uncharge) every page only the module still references; with
 * force, drop the module's reference on the others too (module unload:
 * their last holder frees them).  Returns how many pages are left.
 */
static u32 kva_pages_reap(struct kva_arena *arena, bool force)
{
	u32 i, left = 0;

	for (i = 0; i < arena->npages; i++) {
		struct page *page = arena->pages[i];

		if (!page)
			continue;
		if (page_count(page) > 1 && !force) {
			left++;
			continue;
		}
		__free_pages(page, KVA_PAGE_ORDER);
		arena->pages[i] = NULL;
		atomic64_sub(KVA_PAGE_SIZE, &kva_pinned_bytes);
		cond_resched();
	}
	return left;
}

/*
 * The arena is gone: free its pages, or keep those still referenced
 * elsewhere charged until they are free.  Returns true if the arena
 * struct was handed to the lingering list (which then frees it).
 */
bool kva_pages_release(struct kva_arena *arena)
{
	u32 i, never = 0;

	if (!arena->pages) {
		atomic64_sub(arena->bytes, &kva_pinned_bytes);
		return false;
	}
	/* Reserved but never allocated (a create that failed half way). */
	for (i = 0; i < arena->npages; i++)
		never += !arena->pages[i];
	atomic64_sub((u64)never << KVA_PAGE_SHIFT, &kva_pinned_bytes);
	if (!kva_pages_reap(arena, false)) {
		kvfree(arena->pages);
		arena->pages = NULL;
		return false;
	}
	mutex_lock(&kva_linger_lock);
	list_add_tail(&arena->node, &kva_lingering);
	mutex_unlock(&kva_linger_lock);
	schedule_delayed_work(&kva_linger_work, KVA_LINGER_PERIOD);
	return true;
}

static void kva_linger_fn(struct work_struct *work)
{
	struct kva_arena *arena, *tmp;
	bool again;

	mutex_lock(&kva_linger_lock);
	list_for_each_entry_safe(arena, tmp, &kva_lingering, node) {
		if (kva_pages_reap(arena, false))
			continue;
		list_del(&arena->node);
		kvfree(arena->pages);
		kfree(arena);
	}
	again = !list_empty(&kva_lingering);
	mutex_unlock(&kva_linger_lock);
	if (again)
		schedule_delayed_work(&kva_linger_work, KVA_LINGER_PERIOD);
}

/* Module unload: nothing can wait for the pages any longer. */
void kva_pages_exit(void)
{
	struct kva_arena *arena, *tmp;

	cancel_delayed_work_sync(&kva_linger_work);
	list_for_each_entry_safe(arena, tmp, &kva_lingering, node) {
		kva_pages_reap(arena, true);
		list_del(&arena->node);
		kvfree(arena->pages);
		kfree(arena);
	}
}

u64 kva_lingering_bytes(void)
{
	struct kva_arena *arena;
	u64 bytes = 0;
	u32 i;

	mutex_lock(&kva_linger_lock);
	list_for_each_entry(arena, &kva_lingering, node)
		for (i = 0; i < arena->npages; i++)
			bytes += arena->pages[i] ? KVA_PAGE_SIZE : 0;
	mutex_unlock(&kva_linger_lock);
	return bytes;
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

	/* VM_MAYSHARE: a read-only file's shared mapping has no VM_SHARED. */
	if (!(vma->vm_flags & VM_MAYSHARE))
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
