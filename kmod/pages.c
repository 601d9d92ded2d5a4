// SPDX-License-Identifier: GPL-2.0
/*
 * An arena's memory: its 2 MiB compound pages, allocated zeroed on the
 * requested node, inserted into user mappings, and charged until they are
 * really free: to the module's pinned cap, to the arena's tenant, and,
 * for a creator without CAP_IPC_LOCK, to its user's locked memory
 * (RLIMIT_MEMLOCK, the counter io_uring's registered buffers use).
 *
 * The mappings are ordinary page mappings, so user space can take page
 * references that outlive the arena (vmsplice into a pipe, O_DIRECT, RDMA
 * registration through GUP).  The charges must hold anyway: when an arena
 * goes, a page that someone else still references is not handed back; it
 * lingers on a list, still charged, and is freed and uncharged once only
 * the module's reference is left (no one can then take a new one: every
 * mapping is gone and references are only copied from existing ones): by a
 * periodic check, and at once by a create that would otherwise fail.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/capability.h>
#include <linux/cred.h>
#include <linux/mm.h>
#include <linux/sched/signal.h>
#include <linux/sched/user.h>
#include <linux/slab.h>
#include <linux/workqueue.h>

#include "compat.h"
#include "kva.h"

#define KVA_LINGER_PERIOD	HZ

static LIST_HEAD(kva_lingering);
static DEFINE_MUTEX(kva_linger_lock);
static void kva_linger_fn(struct work_struct *work);
static DECLARE_DELAYED_WORK(kva_linger_work, kva_linger_fn);

static int kva_pinned_reserve(u64 bytes)
{
	if (atomic64_add_return(bytes, &kva_pinned_bytes) >
	    kva_max_pinned_bytes()) {
		atomic64_sub(bytes, &kva_pinned_bytes);
		return -ENOSPC;
	}
	return 0;
}

/*
 * RLIMIT_MEMLOCK, as io_uring charges registered buffers: the creator's
 * user pays (all its processes share the count), unless it has
 * CAP_IPC_LOCK.  The memfd backend mlocks its arenas, so both backends
 * count against the same limit.
 */
static int kva_memlock_charge(struct kva_arena *arena, u64 bytes)
{
	unsigned long pages = bytes >> PAGE_SHIFT, limit, cur;
	struct user_struct *user;

	if (capable(CAP_IPC_LOCK))
		return 0;
	limit = rlimit(RLIMIT_MEMLOCK) >> PAGE_SHIFT;
	user = get_uid(current_user());
	cur = atomic_long_read(&user->locked_vm);
	do {
		if (pages > limit || cur > limit - pages) {
			free_uid(user);
			return -ENOMEM;
		}
	} while (!atomic_long_try_cmpxchg(&user->locked_vm, &cur,
					  cur + pages));
	arena->memlock = user;
	return 0;
}

/* The arena's first charge; each step, failing, reaps lingering pages once. */
static int kva_charge_once(struct kva_arena *arena, struct kva_tenant_acct *t)
{
	int ret;

	ret = kva_tenant_arena_charge(t, arena->bytes);
	if (ret)
		return ret;
	ret = kva_pinned_reserve(arena->bytes);
	if (ret)
		goto err_tenant;
	ret = kva_memlock_charge(arena, arena->bytes);
	if (ret)
		goto err_pinned;
	arena->tenant = t;
	arena->charged = true;
	return 0;

err_pinned:
	atomic64_sub(arena->bytes, &kva_pinned_bytes);
err_tenant:
	kva_tenant_arena_uncharge(t, arena->bytes);
	kva_tenant_arena_release(t);
	return ret;
}

int kva_arena_charge(struct kva_arena *arena, struct kva_tenant_acct *t)
{
	int ret = kva_charge_once(arena, t);

	/*
	 * Pages of arenas that are gone may still be charged because the
	 * periodic check has not seen their last reference go: a program
	 * that closed its pipes must not get ENOSPC for a second.
	 */
	if (ret && kva_linger_reap())
		ret = kva_charge_once(arena, t);
	return ret;
}

/* n pages of the arena are free (or were never allocated): uncharge them. */
static void kva_pages_uncharge(struct kva_arena *arena, u32 n)
{
	u64 bytes = (u64)n << KVA_PAGE_SHIFT;

	if (!n)
		return;
	atomic64_sub(bytes, &kva_pinned_bytes);
	kva_tenant_arena_uncharge(arena->tenant, bytes);
	if (arena->memlock)
		atomic_long_sub(bytes >> PAGE_SHIFT, &arena->memlock->locked_vm);
}

/* Every page uncharged: let go of the tenant and the memlock payer. */
static void kva_charges_release(struct kva_arena *arena)
{
	kva_tenant_arena_release(arena->tenant);
	if (arena->memlock)
		free_uid(arena->memlock);
	arena->charged = false;
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
 * their last holder frees them).  Returns how many pages are left; *freed
 * counts up those freed.
 */
static u32 kva_pages_reap(struct kva_arena *arena, bool force, u32 *freed)
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
		kva_pages_uncharge(arena, 1);
		(*freed)++;
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
	u32 i, never = 0, freed = 0;

	if (!arena->charged)
		return false;		/* a create that failed before */
	/* Charged but never allocated (a create that failed half way). */
	for (i = 0; i < arena->npages; i++)
		never += !arena->pages || !arena->pages[i];
	kva_pages_uncharge(arena, never);
	if (!arena->pages || !kva_pages_reap(arena, false, &freed)) {
		kvfree(arena->pages);
		arena->pages = NULL;
		kva_charges_release(arena);
		return false;
	}
	mutex_lock(&kva_linger_lock);
	list_add_tail(&arena->node, &kva_lingering);
	mutex_unlock(&kva_linger_lock);
	schedule_delayed_work(&kva_linger_work, KVA_LINGER_PERIOD);
	return true;
}

/*
 * Free what is free now; an arena with nothing left goes.  Returns the
 * pages freed.  kva_linger_lock held.
 */
static u32 kva_linger_reap_locked(bool force)
{
	struct kva_arena *arena, *tmp;
	u32 freed = 0;

	list_for_each_entry_safe(arena, tmp, &kva_lingering, node) {
		if (kva_pages_reap(arena, force, &freed))
			continue;
		list_del(&arena->node);
		kva_charges_release(arena);
		kvfree(arena->pages);
		kfree(arena);
	}
	return freed;
}

bool kva_linger_reap(void)
{
	u32 freed;

	mutex_lock(&kva_linger_lock);
	freed = kva_linger_reap_locked(false);
	mutex_unlock(&kva_linger_lock);
	return freed;
}

static void kva_linger_fn(struct work_struct *work)
{
	bool again;

	mutex_lock(&kva_linger_lock);
	kva_linger_reap_locked(false);
	again = !list_empty(&kva_lingering);
	mutex_unlock(&kva_linger_lock);
	if (again)
		schedule_delayed_work(&kva_linger_work, KVA_LINGER_PERIOD);
}

/* Module unload: nothing can wait for the pages any longer. */
void kva_pages_exit(void)
{
	cancel_delayed_work_sync(&kva_linger_work);
	mutex_lock(&kva_linger_lock);
	kva_linger_reap_locked(true);
	mutex_unlock(&kva_linger_lock);
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

/*
 * User mappings fault the arena's pages in, as a file system's huge pages
 * are: the fault hands the core one 4 KiB page of a 2 MiB compound page
 * (with a reference), and the core maps the whole compound page with one
 * PMD entry when the mapping covers it, 2 MiB aligned in the address space
 * and in the file (finish_fault() -> do_set_pmd(), on 6.1 and 6.12 alike),
 * or that one page with a PTE otherwise.  Either way these are ordinary
 * page mappings: no VM_PFNMAP or VM_MIXEDMAP, so get_user_pages() can pin
 * them (O_DIRECT, vmsplice, RDMA), which the lingering accounting above
 * keeps honest.  (A huge_fault handler would be the PFN-map way: on 6.12
 * vmf_insert_pfn_pmd() makes special PMDs that GUP refuses, and 6.1 maps
 * PFN maps with PTEs only.)
 */
static vm_fault_t kva_vm_fault(struct vm_fault *vmf)
{
	struct kva_arena *arena = vmf->vma->vm_private_data;
	pgoff_t pg = vmf->pgoff;
	struct page *page;

	if (pg >= (pgoff_t)arena->npages << KVA_PAGE_ORDER)
		return VM_FAULT_SIGBUS;
	page = nth_page(arena->pages[pg >> KVA_PAGE_ORDER],
			pg & (KVA_PAGES_PER_HUGE - 1));
	get_page(page);
	vmf->page = page;
	return 0;
}

static const struct vm_operations_struct kva_vm_ops = {
	.fault = kva_vm_fault,
};

/* A shared mapping of the arena's pages; faulted in on first touch. */
int kva_arena_mmap(struct kva_arena *arena, struct vm_area_struct *vma)
{
	unsigned long len = vma->vm_end - vma->vm_start;
	u64 off = (u64)vma->vm_pgoff << PAGE_SHIFT;

	/* VM_MAYSHARE: a read-only file's shared mapping has no VM_SHARED. */
	if (!(vma->vm_flags & VM_MAYSHARE))
		return -EINVAL;
	if (off >= arena->bytes || len > arena->bytes - off)
		return -EINVAL;
	vm_flags_set(vma, VM_DONTEXPAND | VM_DONTDUMP);
	vma->vm_ops = &kva_vm_ops;
	vma->vm_private_data = arena;
	return 0;
}
