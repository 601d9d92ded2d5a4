// SPDX-License-Identifier: GPL-2.0
/*
 * Stats without special tools: module-wide counters as sysfs attributes of
 * /dev/kvarena's device (/sys/class/misc/kvarena/), and per-arena and
 * per-tenant tables in debugfs (/sys/kernel/debug/kvarena/).
 */
#include <linux/debugfs.h>
#include <linux/device.h>
#include <linux/seq_file.h>
#include <linux/sysfs.h>

#include "kva.h"

/* Pinned and lingering as of now: pages freed since the last check go. */
static ssize_t pinned_bytes_show(struct device *dev,
				 struct device_attribute *attr, char *buf)
{
	kva_linger_reap();
	return sysfs_emit(buf, "%lld\n", atomic64_read(&kva_pinned_bytes));
}
static DEVICE_ATTR_RO(pinned_bytes);

static ssize_t arenas_created_show(struct device *dev,
				   struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%lld\n", atomic64_read(&kva_arenas_created));
}
static DEVICE_ATTR_RO(arenas_created);

static ssize_t arenas_show(struct device *dev, struct device_attribute *attr,
			   char *buf)
{
	struct kva_arena *arena;
	unsigned int n = 0;

	mutex_lock(&kva_arenas_lock);
	list_for_each_entry(arena, &kva_arenas, node)
		n++;
	mutex_unlock(&kva_arenas_lock);
	return sysfs_emit(buf, "%u\n", n);
}
static DEVICE_ATTR_RO(arenas);

static ssize_t lingering_bytes_show(struct device *dev,
				    struct device_attribute *attr, char *buf)
{
	kva_linger_reap();
	return sysfs_emit(buf, "%llu\n", kva_lingering_bytes());
}
static DEVICE_ATTR_RO(lingering_bytes);

static ssize_t tenants_show(struct device *dev, struct device_attribute *attr,
			    char *buf)
{
	return sysfs_emit(buf, "%u\n", kva_tenants_count());
}
static DEVICE_ATTR_RO(tenants);

/*
 * Blocks, sessions summed over live arenas, one arena lock at a time and
 * never under kva_arenas_lock: a busy arena delays this reader only.
 */
static void kva_sum(u64 *blocks_used, u64 *sessions)
{
	struct kva_arena *arena;
	u32 next = 0;

	*blocks_used = 0;
	*sessions = 0;
	while ((arena = kva_arena_get_next(next))) {
		mutex_lock(&arena->lock);
		if (arena->fd_open) {
			*blocks_used += kvc_blocks_in_use(&arena->core);
			*sessions += arena->core.nsessions;
		}
		mutex_unlock(&arena->lock);
		next = arena->id + 1;
		kva_arena_put(arena);
		if (!next)
			break;
	}
}

/* Root only (0400): every tenant's usage, and a read locks each arena. */
static ssize_t blocks_used_show(struct device *dev,
				struct device_attribute *attr, char *buf)
{
	u64 blocks, sessions;

	kva_sum(&blocks, &sessions);
	return sysfs_emit(buf, "%llu\n", blocks);
}
static DEVICE_ATTR_ADMIN_RO(blocks_used);

static ssize_t sessions_show(struct device *dev, struct device_attribute *attr,
			     char *buf)
{
	u64 blocks, sessions;

	kva_sum(&blocks, &sessions);
	return sysfs_emit(buf, "%llu\n", sessions);
}
static DEVICE_ATTR_ADMIN_RO(sessions);

static struct attribute *kva_attrs[] = {
	&dev_attr_pinned_bytes.attr,
	&dev_attr_arenas.attr,
	&dev_attr_arenas_created.attr,
	&dev_attr_blocks_used.attr,
	&dev_attr_sessions.attr,
	&dev_attr_lingering_bytes.attr,
	&dev_attr_tenants.attr,
	NULL,
};

static const struct attribute_group kva_attr_group = {
	.attrs = kva_attrs,
};

const struct attribute_group *kva_attr_groups[] = {
	&kva_attr_group,
	NULL,
};

static struct dentry *kva_debugfs;

static int kva_arenas_seq_show(struct seq_file *m, void *unused)
{
	struct kva_arena *arena;

	seq_printf(m, "%-6s %-16s %-6s %-12s %-8s %-8s %-8s %-8s %-6s %-7s %-6s %-6s\n",
		   "id", "name", "tenant", "bytes", "bsize", "blocks", "free",
		   "sessions", "attach", "devmaps", "romaps", "fd");
	u32 next = 0;

	while ((arena = kva_arena_get_next(next))) {
		u32 free, sessions;
		bool open;

		mutex_lock(&arena->lock);
		open = arena->fd_open;
		free = open ? arena->core.pool.nfree : 0;
		sessions = open ? arena->core.nsessions : 0;
		mutex_unlock(&arena->lock);
		seq_printf(m, "%-6u %-16s %-6u %-12llu %-8u %-8u %-8u %-8u %-6u %-7u %-6u %-6s\n",
			   arena->id, arena->name[0] ? arena->name : "-",
			   arena->tenant->id, arena->bytes, arena->block_size,
			   arena->npages * arena->blocks_per_page, free,
			   sessions, READ_ONCE(arena->nattached),
			   READ_ONCE(arena->ndev_maps),
			   READ_ONCE(arena->nro_maps),
			   open ? "open" : "closed");
		next = arena->id + 1;
		kva_arena_put(arena);
		if (!next)
			break;
	}
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(kva_arenas_seq);

static int kva_tenants_seq_show(struct seq_file *m, void *unused)
{
	kva_tenants_show(m);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(kva_tenants_seq);

void kva_debugfs_init(void)
{
	kva_debugfs = debugfs_create_dir(KBUILD_MODNAME, NULL);
	debugfs_create_file("arenas", 0444, kva_debugfs, NULL,
			    &kva_arenas_seq_fops);
	debugfs_create_file("tenants", 0444, kva_debugfs, NULL,
			    &kva_tenants_seq_fops);
}

void kva_debugfs_exit(void)
{
	debugfs_remove_recursive(kva_debugfs);
}
