// SPDX-License-Identifier: GPL-2.0
/*
 * The arena's dma-buf exporter: one DMA mapping per importing device and
 * direction shared by its attachments (at most max_attachments, their
 * tables charged to the importer's memcg), CPU-access sync of those
 * mappings, a refcounted kernel vmap and mmap.  The dma-buf owns the
 * arena's memory: its release frees it.
 *
 * An arena also has at most one read-only dma-buf (KVA_EXPORT_RDONLY),
 * made on first use: its file is O_RDONLY (mmap cannot write), and its
 * importers get the arena mapped DMA_TO_DEVICE, whatever they ask for
 * (DMA_FROM_DEVICE, which can only mean writing, is refused): through an
 * IOMMU the device can then only read.  It holds a reference on the
 * arena's memory, and the arena file holds one on it.
 *
 * Since 6.2 the core calls map/unmap with the reservation lock held; these
 * ops never take it, and use att_lock for their own state.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/dma-mapping.h>
#include <linux/highmem.h>
#include <linux/module.h>
#include <linux/overflow.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <linux/vmalloc.h>

#include "kva.h"

static unsigned int max_attachments = 64;
module_param(max_attachments, uint, 0644);
MODULE_PARM_DESC(max_attachments, "Most importer attachments per arena, all its dma-bufs together (default 64)");

/*
 * One DMA mapping per device, shared by every attachment of that device.
 * DRM imports per file, so a prefill and a decode process on one GPU each
 * attach: mapping the arena once per attachment would give the same pages
 * two live mappings on one device, which the DMA API cannot track (its
 * debug code keeps one entry per device address).
 */
struct kva_dev_map {
	struct device *dev;
	enum dma_data_direction dir;	/* BIDIRECTIONAL, or TO_DEVICE (read-only) */
	struct sg_table sgt;		/* never handed out: page links valid */
	struct list_head node;		/* arena->dev_maps */
	unsigned int users;		/* mapped attachments */
};

struct kva_attachment {
	struct sg_table sgt;		/* the importer's copy of map->sgt */
	struct kva_dev_map *map;	/* while mapped */
	struct list_head node;		/* arena->attachments */
};

/* One sg entry per chunk: 2 MiB pages split to the device's segment limit. */
static int kva_sgt_build(struct kva_arena *arena, struct device *dev,
			 struct sg_table *sgt)
{
	unsigned int seg = dma_get_max_seg_size(dev);
	unsigned int per_page, i, j;
	struct scatterlist *sg;
	size_t nents;
	int ret;

	seg = min_t(unsigned int, rounddown(seg, PAGE_SIZE), KVA_PAGE_SIZE);
	if (!seg)
		seg = PAGE_SIZE;
	per_page = DIV_ROUND_UP(KVA_PAGE_SIZE, seg);
	/* 2^32 entries at 16 TiB with 4 KiB segments: never wrap. */
	nents = size_mul(arena->npages, per_page);
	if (nents > UINT_MAX)
		return -E2BIG;
	/* Kernel memory an importer makes us spend: its memcg pays. */
	ret = sg_alloc_table(sgt, nents, GFP_KERNEL_ACCOUNT);
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
		cond_resched();
	}
	return 0;
}

/*
 * Map the arena for @dev in direction @dir, or take another user of that
 * mapping.  The read-write dma-buf maps bidirectional, so every importer's
 * direction and every CPU-access sync is covered; the read-only one maps
 * DMA_TO_DEVICE.  The implicit sync is skipped because other devices may
 * map the same pages (overlap is an error to the DMA API's sync tracking),
 * and done explicitly instead, always in the mapping's own direction.
 * Caller holds att_lock.
 */
static struct kva_dev_map *kva_dev_map_get(struct kva_arena *arena,
					   struct device *dev,
					   enum dma_data_direction dir)
{
	struct kva_dev_map *map;
	int ret;

	list_for_each_entry(map, &arena->dev_maps, node) {
		if (map->dev == dev && map->dir == dir) {
			dma_sync_sgtable_for_device(dev, &map->sgt, dir);
			map->users++;
			return map;
		}
	}
	map = kzalloc(sizeof(*map), GFP_KERNEL_ACCOUNT);
	if (!map)
		return ERR_PTR(-ENOMEM);
	ret = kva_sgt_build(arena, dev, &map->sgt);
	if (ret)
		goto err_free;
	ret = dma_map_sgtable(dev, &map->sgt, dir, DMA_ATTR_SKIP_CPU_SYNC);
	if (ret)
		goto err_table;
	dma_sync_sgtable_for_device(dev, &map->sgt, dir);
	map->dev = dev;
	map->dir = dir;
	map->users = 1;
	list_add(&map->node, &arena->dev_maps);
	arena->ndev_maps++;
	arena->nro_maps += dir == DMA_TO_DEVICE;
	return map;

err_table:
	sg_free_table(&map->sgt);
err_free:
	kfree(map);
	return ERR_PTR(ret);
}

/* Drop a user; the last one unmaps.  Caller holds att_lock. */
static void kva_dev_map_put(struct kva_arena *arena, struct kva_dev_map *map)
{
	dma_sync_sgtable_for_cpu(map->dev, &map->sgt, map->dir);
	if (--map->users)
		return;
	list_del(&map->node);
	arena->ndev_maps--;
	arena->nro_maps -= map->dir == DMA_TO_DEVICE;
	dma_unmap_sgtable(map->dev, &map->sgt, map->dir,
			  DMA_ATTR_SKIP_CPU_SYNC);
	sg_free_table(&map->sgt);
	kfree(map);
}

/* Give the importer's table the device mapping's DMA segments. */
static void kva_sgt_copy_dma(struct sg_table *dst, const struct sg_table *src)
{
	struct scatterlist *d = dst->sgl, *s;
	int i;

	for_each_sgtable_dma_sg(src, s, i) {
		sg_dma_address(d) = sg_dma_address(s);
		sg_dma_len(d) = sg_dma_len(s);
		d = sg_next(d);
	}
	dst->nents = src->nents;
}

static int kva_dmabuf_attach(struct dma_buf *dmabuf,
			     struct dma_buf_attachment *attachment)
{
	struct kva_arena *arena = dmabuf->priv;
	struct kva_attachment *a;
	int ret;

	/* Each attachment costs a scatterlist of the whole arena: bounded. */
	mutex_lock(&arena->att_lock);
	ret = arena->nattached >= READ_ONCE(max_attachments) ? -ENOSPC : 0;
	if (!ret)
		arena->nattached++;
	mutex_unlock(&arena->att_lock);
	if (ret)
		return ret;
	a = kzalloc(sizeof(*a), GFP_KERNEL_ACCOUNT);
	if (!a) {
		ret = -ENOMEM;
		goto err;
	}
	ret = kva_sgt_build(arena, attachment->dev, &a->sgt);
	if (ret) {
		kfree(a);
		goto err;
	}
	attachment->priv = a;
	mutex_lock(&arena->att_lock);
	list_add(&a->node, &arena->attachments);
	mutex_unlock(&arena->att_lock);
	return 0;
err:
	mutex_lock(&arena->att_lock);
	arena->nattached--;
	mutex_unlock(&arena->att_lock);
	return ret;
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

static bool kva_dmabuf_is_rdonly(const struct dma_buf *dmabuf);

static struct sg_table *kva_dmabuf_map(struct dma_buf_attachment *attachment,
				       enum dma_data_direction dir)
{
	struct kva_arena *arena = attachment->dmabuf->priv;
	struct kva_attachment *a = attachment->priv;
	enum dma_data_direction mdir = DMA_BIDIRECTIONAL;
	struct kva_dev_map *map;

	/* The read-only dma-buf: the device may read, nothing else. */
	if (kva_dmabuf_is_rdonly(attachment->dmabuf)) {
		if (dir == DMA_FROM_DEVICE)
			return ERR_PTR(-EACCES);
		mdir = DMA_TO_DEVICE;
	}
	mutex_lock(&arena->att_lock);
	if (a->map) {			/* the core maps an attachment once */
		map = ERR_PTR(-EBUSY);
		goto out;
	}
	map = kva_dev_map_get(arena, attachment->dev, mdir);
	if (IS_ERR(map))
		goto out;
	kva_sgt_copy_dma(&a->sgt, &map->sgt);
	a->map = map;
	arena->nmapped++;
	arena->maps_total++;
out:
	mutex_unlock(&arena->att_lock);
	return IS_ERR(map) ? ERR_CAST(map) : &a->sgt;
}

static void kva_dmabuf_unmap(struct dma_buf_attachment *attachment,
			     struct sg_table *sgt, enum dma_data_direction dir)
{
	struct kva_arena *arena = attachment->dmabuf->priv;
	struct kva_attachment *a = attachment->priv;

	mutex_lock(&arena->att_lock);
	if (!WARN_ON_ONCE(!a->map)) {
		kva_dev_map_put(arena, a->map);
		a->map = NULL;
		arena->nmapped--;
	}
	mutex_unlock(&arena->att_lock);
}

/*
 * The kernel vmap's cache maintenance, in pieces: these helpers take an int
 * size, and an arena may be larger than 2 GiB.
 */
static void kva_vmap_sync(struct kva_arena *arena, bool flush)
{
	const u64 chunk = SZ_1G;
	u64 off;

	for (off = 0; off < arena->bytes; off += chunk) {
		void *p = arena->vaddr + off;
		int len = min(chunk, arena->bytes - off);

		if (flush)
			flush_kernel_vmap_range(p, len);
		else
			invalidate_kernel_vmap_range(p, len);
	}
}

/* CPU access syncs each device's mapping once, whatever its attachments. */
static int kva_dmabuf_begin_cpu(struct dma_buf *dmabuf,
				enum dma_data_direction dir)
{
	struct kva_arena *arena = dmabuf->priv;
	struct kva_dev_map *map;

	mutex_lock(&arena->att_lock);
	if (arena->vmap_count)
		kva_vmap_sync(arena, false);
	list_for_each_entry(map, &arena->dev_maps, node)
		dma_sync_sgtable_for_cpu(map->dev, &map->sgt, map->dir);
	mutex_unlock(&arena->att_lock);
	return 0;
}

static int kva_dmabuf_end_cpu(struct dma_buf *dmabuf,
			      enum dma_data_direction dir)
{
	struct kva_arena *arena = dmabuf->priv;
	struct kva_dev_map *map;

	mutex_lock(&arena->att_lock);
	if (arena->vmap_count)
		kva_vmap_sync(arena, true);
	list_for_each_entry(map, &arena->dev_maps, node)
		dma_sync_sgtable_for_device(map->dev, &map->sgt, map->dir);
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

	pages = kvmalloc_array(n, sizeof(*pages), GFP_KERNEL_ACCOUNT);
	if (!pages)
		return NULL;
	for (i = 0; i < n; i++) {
		pages[i] = nth_page(arena->pages[i >> KVA_PAGE_ORDER],
				    i & (KVA_PAGES_PER_HUGE - 1));
		if (!(i & (KVA_PAGES_PER_HUGE - 1)))
			cond_resched();
	}
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

/* A read-only dma-buf holds a reference on the arena's memory only. */
static void kva_dmabuf_ro_release(struct dma_buf *dmabuf)
{
	kva_arena_put(dmabuf->priv);
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

static const struct dma_buf_ops kva_dmabuf_ro_ops = {
	.attach = kva_dmabuf_attach,
	.detach = kva_dmabuf_detach,
	.map_dma_buf = kva_dmabuf_map,
	.unmap_dma_buf = kva_dmabuf_unmap,
	.begin_cpu_access = kva_dmabuf_begin_cpu,
	.end_cpu_access = kva_dmabuf_end_cpu,
	.mmap = kva_dmabuf_mmap,
	.vmap = kva_dmabuf_vmap,
	.vunmap = kva_dmabuf_vunmap,
	.release = kva_dmabuf_ro_release,
};

static bool kva_dmabuf_is_rdonly(const struct dma_buf *dmabuf)
{
	return dmabuf->ops == &kva_dmabuf_ro_ops;
}

static struct dma_buf *kva_export_one(struct kva_arena *arena,
				      const struct dma_buf_ops *ops, int flags)
{
	DEFINE_DMA_BUF_EXPORT_INFO(exp_info);

	exp_info.exp_name = KBUILD_MODNAME;
	exp_info.owner = THIS_MODULE;
	exp_info.ops = ops;
	exp_info.size = arena->bytes;
	exp_info.flags = flags;
	exp_info.priv = arena;
	return dma_buf_export(&exp_info);
}

struct dma_buf *kva_dmabuf_export(struct kva_arena *arena)
{
	return kva_export_one(arena, &kva_dmabuf_ops, O_RDWR);
}

/*
 * The arena's read-only dma-buf, made on first use and kept by the arena
 * file (kva_dmabuf_rdonly_put() at its release), with a reference for the
 * caller.  Its file is O_RDONLY: mmap gives read-only mappings (MAP_SHARED
 * with PROT_WRITE is refused by the VFS).  Called with the arena file open
 * (an ioctl on it), so the arena lock is there and ro_dmabuf stays.
 */
struct dma_buf *kva_dmabuf_rdonly(struct kva_arena *arena)
{
	struct dma_buf *dmabuf;

	mutex_lock(&arena->lock);
	dmabuf = arena->ro_dmabuf;
	if (!dmabuf) {
		kref_get(&arena->ref);
		dmabuf = kva_export_one(arena, &kva_dmabuf_ro_ops, O_RDONLY);
		if (IS_ERR(dmabuf)) {
			mutex_unlock(&arena->lock);
			kva_arena_put(arena);
			return dmabuf;
		}
		arena->ro_dmabuf = dmabuf;
	}
	get_dma_buf(dmabuf);
	mutex_unlock(&arena->lock);
	return dmabuf;
}

/* The arena file is released: its reference on the read-only dma-buf goes. */
void kva_dmabuf_rdonly_put(struct kva_arena *arena)
{
	if (arena->ro_dmabuf)
		dma_buf_put(arena->ro_dmabuf);
}
