// SPDX-License-Identifier: GPL-2.0
/*
 * kvarena.ko entry: module parameters (the caps on what user space may pin),
 * the /dev/kvarena misc device and its ioctls (version, arena creation,
 * tenant quotas).  Arenas themselves are in arena.c.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>

#include "kva.h"

#define CREATE_TRACE_POINTS
#include "trace.h"

static unsigned int max_pinned_mb;
module_param(max_pinned_mb, uint, 0644);
MODULE_PARM_DESC(max_pinned_mb, "Cap on memory pinned by all arenas, MiB (0 at load: half of RAM)");

static unsigned int max_arena_mb;
module_param(max_arena_mb, uint, 0644);
MODULE_PARM_DESC(max_arena_mb, "Cap on one arena, MiB (0 at load: max_pinned_mb)");

unsigned int kva_max_sessions = KVC_MAX_SESSIONS;
module_param_named(max_sessions, kva_max_sessions, uint, 0444);
MODULE_PARM_DESC(max_sessions, "Most live sessions per arena (default and limit 65535)");

/* The live arenas, for stats; each arena locks its own state. */
DEFINE_MUTEX(kva_arenas_lock);
LIST_HEAD(kva_arenas);
atomic64_t kva_pinned_bytes = ATOMIC64_INIT(0);
atomic64_t kva_arenas_created = ATOMIC64_INIT(0);

u64 kva_max_pinned_bytes(void)
{
	return (u64)READ_ONCE(max_pinned_mb) << 20;
}

u64 kva_max_arena_bytes(void)
{
	return (u64)READ_ONCE(max_arena_mb) << 20;
}

static long kva_version_ioctl(void __user *uarg)
{
	struct kva_version arg;
	u32 usize;
	int ret;

	ret = kva_copy_in(&arg, sizeof(arg), KVA_VERSION_SIZE_VER0, uarg, &usize);
	if (ret)
		return ret;
	arg = (struct kva_version){ .size = usize };
	arg.api_version = KVA_API_VERSION;
	arg.features = KVA_FEAT_DMABUF | KVA_FEAT_MMAP | KVA_FEAT_SESSIONS |
		       KVA_FEAT_BLOCK_SHARE | KVA_FEAT_TENANT_QUOTA |
		       KVA_FEAT_NUMA | KVA_FEAT_TRACEPOINTS |
		       KVA_FEAT_URING_CMD | KVA_FEAT_EVENTS |
		       KVA_FEAT_EVICTION | KVA_FEAT_NETLINK |
		       KVA_FEAT_SESSION_UPDATE;
	arg.max_pinned_bytes = kva_max_pinned_bytes();
	arg.max_arena_bytes = kva_max_arena_bytes();
	kva_linger_reap();		/* pinned as of now */
	arg.pinned_bytes = atomic64_read(&kva_pinned_bytes);
	arg.page_size = KVA_PAGE_SIZE;
	arg.max_batch = KVA_MAX_BATCH;
	arg.max_sessions = kva_max_sessions;
	return kva_copy_out(uarg, &arg, sizeof(arg), usize);
}

static long kva_dev_ioctl(struct file *file, unsigned int cmd,
			  unsigned long arg)
{
	void __user *uarg = (void __user *)arg;

	switch (cmd) {
	case KVA_IOC_VERSION:
		return kva_version_ioctl(uarg);
	case KVA_IOC_ARENA_CREATE:
		return kva_arena_create_ioctl(file, uarg);
	case KVA_IOC_TENANT_SET_QUOTA:
	case KVA_IOC_TENANT_INFO:
		return kva_tenant_ioctl(file, cmd, uarg);
	}
	return -ENOTTY;
}

static const struct file_operations kva_dev_fops = {
	.owner = THIS_MODULE,
	.unlocked_ioctl = kva_dev_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.llseek = noop_llseek,
};

static struct miscdevice kva_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = KVA_DEVICE_NAME,
	.fops = &kva_dev_fops,
	.mode = 0660,
	.groups = kva_attr_groups,
};

static int __init kva_init(void)
{
	int ret;

	if (!max_pinned_mb)
		max_pinned_mb = (totalram_pages() >> (20 - PAGE_SHIFT)) / 2;
	if (!max_arena_mb)
		max_arena_mb = max_pinned_mb;
	if (!kva_max_sessions || kva_max_sessions > KVC_MAX_SESSIONS)
		kva_max_sessions = KVC_MAX_SESSIONS;
	kva_tenants_init(max_pinned_mb);
	kva_debugfs_init();
	ret = kva_netlink_init();
	if (ret)
		goto err_debugfs;
	/* Last: from here user space can open /dev/kvarena and use it all. */
	ret = misc_register(&kva_misc);
	if (ret)
		goto err_netlink;
	pr_info("loaded: max_pinned_mb=%u max_arena_mb=%u\n", max_pinned_mb,
		max_arena_mb);
	return 0;

err_netlink:
	kva_netlink_exit();
err_debugfs:
	kva_debugfs_exit();
	return ret;
}

/* In the reverse order: first no one can open the device any more. */
static void __exit kva_exit(void)
{
	misc_deregister(&kva_misc);
	kva_netlink_exit();
	kva_debugfs_exit();
	kva_pages_exit();
	kva_tenants_destroy();
}

module_init(kva_init);
module_exit(kva_exit);

MODULE_DESCRIPTION("kvarena: pinned hugepage KV-cache arenas shared by dma-buf");
MODULE_AUTHOR("The kvarena authors");
MODULE_LICENSE("GPL");
MODULE_IMPORT_NS(DMA_BUF);
