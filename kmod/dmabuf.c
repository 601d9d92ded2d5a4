// SPDX-License-Identifier: GPL-2.0
/*
 * The arena's dma-buf exporter: per-attachment sg tables over the 2 MiB
 * pages, CPU-access sync of mapped attachments, a refcounted kernel vmap and
 * mmap.  The dma-buf owns the arena's memory: its release frees it.
 *
 * Since 6.2 the core calls map/unmap with the reservation lock held; these
 * ops never take it, and use att_lock for their own state.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/dma-mapping.h>
#include <linux/highmem.h>
#include <linux/module.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <linux/vmalloc.h>

#include "kva.h"

struct kva_attachment {
	struct device *dev;
	struct sg_table sgt;
	struct list_head node;
	bool mapped;
};

/* One sg entry per chunk: 2 MiB pages split to the device's segment limit. */
static int kva_sgt_build(struct kva_arena *arena, struct device *dev,
			 struct sg_table *sgt)
{
	unsigned int seg = dma_get_max_seg_size(dev);
	unsigned int per_page, i, j;
	struct scatterlist *sg;
	int ret;

	seg = min_t(unsigned int, rounddown(seg, PAGE_SIZE), KVA_PAGE_SIZE);
	if (!seg)
		seg = PAGE_SIZE;
	per_page = DIV_ROUND_UP(KVA_PAGE_SIZE, seg);
	ret = sg_alloc_table(sgt, arena->npages * per_page, GFP_KERNEL);
	if (ret)
		return ret;
	sg = sgt->sgl;
	for (i = 0; i < arena->npages; i++) {
		for (j = 0; j < per_page; j++) {
			unsigned int off = j * seg;
			unsigned int len = min_t(unsigned int, seg,
						 KVA_PAGE_SIZE - off);

			sg_set_page(sg, arena->pages[i], len, off);
			sg = sg_next(sg);
		}
	}
	return 0;
}

static int kva_dmabuf_attach(struct dma_buf *dmabuf,
			     struct dma_buf_attachment *attachment)
{
	struct kva_arena *arena = dmabuf->priv;
	struct kva_attachment *a;
	int ret;

	a = kzalloc(sizeof(*a), GFP_KERNEL);
	if (!a)
		return -ENOMEM;
	ret = kva_sgt_build(arena, attachment->dev, &a->sgt);
	if (ret) {
		kfree(a);
		return ret;
	}
	a->dev = attachment->dev;
	attachment->priv = a;
	mutex_lock(&arena->att_lock);
	list_add(&a->node, &arena->attachments);
	arena->nattached++;
	mutex_unlock(&arena->att_lock);
	return 0;
}

static void kva_dmabuf_detach(struct dma_buf *dmabuf,
			      struct dma_buf_attachment *attachment)
{
	struct kva_arena *arena = dmabuf->priv;
	struct kva_attachment *a = attachment->priv;

	mutex_lock(&arena->att_lock);
	list_del(&a->node);
	arena->nattached--;
	mutex_unlock(&arena->att_lock);
	sg_free_table(&a->sgt);
	kfree(a);
}

static struct sg_table *kva_dmabuf_map(struct dma_buf_attachment *attachment,
				       enum dma_data_direction dir)
{
	struct kva_arena *arena = attachment->dmabuf->priv;
	struct kva_attachment *a = attachment->priv;
	int ret;

	/*
	 * Several importers on one device (each DRM file attaches on its
	 * own) map the same pages: skip the implicit sync, which treats
	 * overlapping mappings as an error, and sync explicitly instead.
	 */
	ret = dma_map_sgtable(attachment->dev, &a->sgt, dir,
			      DMA_ATTR_SKIP_CPU_SYNC);
	if (ret)
		return ERR_PTR(ret);
	dma_sync_sgtable_for_device(attachment->dev, &a->sgt, dir);
	mutex_lock(&arena->att_lock);
	a->mapped = true;
	arena->nmapped++;
	arena->maps_total++;
	mutex_unlock(&arena->att_lock);
	return &a->sgt;
}

static void kva_dmabuf_unmap(struct dma_buf_attachment *attachment,
			     struct sg_table *sgt, enum dma_data_direction dir)
{
	struct kva_arena *arena = attachment->dmabuf->priv;
	struct kva_attachment *a = attachment->priv;

	mutex_lock(&arena->att_lock);
	a->mapped = false;
	arena->nmapped--;
	mutex_unlock(&arena->att_lock);
	dma_sync_sgtable_for_cpu(attachment->dev, sgt, dir);
	dma_unmap_sgtable(attachment->dev, sgt, dir, DMA_ATTR_SKIP_CPU_SYNC);
}

/*
 * Sync a mapped attachment by its DMA segments only: while an importer
 * holds the table, CONFIG_DMABUF_DEBUG mangles its page links, so nothing
 * here may look at sg_page().
 */
static void kva_sync_mapped(struct kva_attachment *a,
			    enum dma_data_direction dir, bool for_cpu)
{
	struct scatterlist *sg;
	int i;

	for_each_sgtable_dma_sg(&a->sgt, sg, i) {
		if (for_cpu)
			dma_sync_single_for_cpu(a->dev, sg_dma_address(sg),
						sg_dma_len(sg), dir);
		else
			dma_sync_single_for_device(a->dev, sg_dma_address(sg),
						   sg_dma_len(sg), dir);
	}
}

static int kva_dmabuf_begin_cpu(struct dma_buf *dmabuf,
				enum dma_data_direction dir)
{
	struct kva_arena *arena = dmabuf->priv;
	struct kva_attachment *a;

	mutex_lock(&arena->att_lock);
	if (arena->vmap_count)
		invalidate_kernel_vmap_range(arena->vaddr, arena->bytes);
	list_for_each_entry(a, &arena->attachments, node)
		if (a->mapped)
			kva_sync_mapped(a, dir, true);
	mutex_unlock(&arena->att_lock);
	return 0;
}

static int kva_dmabuf_end_cpu(struct dma_buf *dmabuf,
			      enum dma_data_direction dir)
{
	struct kva_arena *arena = dmabuf->priv;
	struct kva_attachment *a;

	mutex_lock(&arena->att_lock);
	if (arena->vmap_count)
		flush_kernel_vmap_range(arena->vaddr, arena->bytes);
	list_for_each_entry(a, &arena->attachments, node)
		if (a->mapped)
			kva_sync_mapped(a, dir, false);
	mutex_unlock(&arena->att_lock);
	return 0;
}

static int kva_dmabuf_mmap(struct dma_buf *dmabuf, struct vm_area_struct *vma)
{
	return kva_arena_mmap(dmabuf->priv, vma);
}

static void *kva_vmap_pages(struct kva_arena *arena)
{
	unsigned long n = (unsigned long)arena->npages * KVA_PAGES_PER_HUGE;
	struct page **pages;
	unsigned long i;
	void *vaddr;

	pages = kvmalloc_array(n, sizeof(*pages), GFP_KERNEL);
	if (!pages)
		return NULL;
	for (i = 0; i < n; i++)
		pages[i] = nth_page(arena->pages[i >> KVA_PAGE_ORDER],
				    i & (KVA_PAGES_PER_HUGE - 1));
	vaddr = vmap(pages, n, VM_MAP, PAGE_KERNEL);
	kvfree(pages);
	return vaddr;
}

static int kva_dmabuf_vmap(struct dma_buf *dmabuf, struct iosys_map *map)
{
	struct kva_arena *arena = dmabuf->priv;
	int ret = 0;

	mutex_lock(&arena->att_lock);
	if (!arena->vmap_count) {
		arena->vaddr = kva_vmap_pages(arena);
		if (!arena->vaddr) {
			ret = -ENOMEM;
			goto out;
		}
	}
	arena->vmap_count++;
	iosys_map_set_vaddr(map, arena->vaddr);
out:
	mutex_unlock(&arena->att_lock);
	return ret;
}

static void kva_dmabuf_vunmap(struct dma_buf *dmabuf, struct iosys_map *map)
{
	struct kva_arena *arena = dmabuf->priv;

	mutex_lock(&arena->att_lock);
	if (!WARN_ON_ONCE(!arena->vmap_count) && !--arena->vmap_count) {
		vunmap(arena->vaddr);
		arena->vaddr = NULL;
	}
	mutex_unlock(&arena->att_lock);
	iosys_map_clear(map);
}

static void kva_dmabuf_release(struct dma_buf *dmabuf)
{
	kva_arena_free(dmabuf->priv);
}

static const struct dma_buf_ops kva_dmabuf_ops = {
	.attach = kva_dmabuf_attach,
	.detach = kva_dmabuf_detach,
	.map_dma_buf = kva_dmabuf_map,
	.unmap_dma_buf = kva_dmabuf_unmap,
	.begin_cpu_access = kva_dmabuf_begin_cpu,
	.end_cpu_access = kva_dmabuf_end_cpu,
	.mmap = kva_dmabuf_mmap,
	.vmap = kva_dmabuf_vmap,
	.vunmap = kva_dmabuf_vunmap,
	.release = kva_dmabuf_release,
};

struct dma_buf *kva_dmabuf_export(struct kva_arena *arena)
{
	DEFINE_DMA_BUF_EXPORT_INFO(exp_info);

	exp_info.exp_name = KBUILD_MODNAME;
	exp_info.owner = THIS_MODULE;
	exp_info.ops = &kva_dmabuf_ops;
	exp_info.size = arena->bytes;
	exp_info.flags = O_RDWR;
	exp_info.priv = arena;
	return dma_buf_export(&exp_info);
}
