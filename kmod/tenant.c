// SPDX-License-Identifier: GPL-2.0
/*
 * Tenant accounts: bytes of KV blocks held by each tenant's arenas, against
 * a quota an administrator sets.  Charged when a block leaves the free pool
 * and uncharged when it returns; shared references cost nothing extra.
 * The table is bounded by max_tenants and lives until the module unloads.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/capability.h>
#include <linux/moduleparam.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/xarray.h>

#include "kva.h"

static unsigned int max_tenants = 1024;
module_param(max_tenants, uint, 0644);
MODULE_PARM_DESC(max_tenants, "Most tenant accounts the module keeps (default 1024)");

static DEFINE_XARRAY(kva_tenants);
static DEFINE_MUTEX(kva_tenants_lock);		/* insertion */
static DEFINE_SPINLOCK(kva_charge_lock);	/* quota_bytes, used_bytes */
static unsigned int kva_ntenants;

static struct kva_tenant_acct *kva_tenant_lookup(u32 id, bool create)
{
	struct kva_tenant_acct *t;
	int ret;

	mutex_lock(&kva_tenants_lock);
	t = xa_load(&kva_tenants, id);
	if (t || !create)
		goto out;
	t = ERR_PTR(-ENOSPC);
	if (kva_ntenants >= max_tenants)
		goto out;
	t = kzalloc(sizeof(*t), GFP_KERNEL);
	if (!t) {
		t = ERR_PTR(-ENOMEM);
		goto out;
	}
	t->id = id;
	ret = xa_err(xa_store(&kva_tenants, id, t, GFP_KERNEL));
	if (ret) {
		kfree(t);
		t = ERR_PTR(ret);
		goto out;
	}
	kva_ntenants++;
out:
	mutex_unlock(&kva_tenants_lock);
	return t;
}

struct kva_tenant_acct *kva_tenant_get(u32 id)
{
	return kva_tenant_lookup(id, true);
}

/* Charge up to `blocks` blocks within the quota; returns how many fit. */
u32 kva_tenant_reserve(struct kva_tenant_acct *t, u32 blocks, u32 block_size)
{
	u64 room;
	u32 n = blocks;

	spin_lock(&kva_charge_lock);
	if (t->quota_bytes) {
		room = t->quota_bytes > t->used_bytes ?
		       t->quota_bytes - t->used_bytes : 0;
		room = div_u64(room, block_size);
		if (room < n)
			n = room;
	}
	t->used_bytes += (u64)n * block_size;
	spin_unlock(&kva_charge_lock);
	return n;
}

void kva_tenant_uncharge(struct kva_tenant_acct *t, u32 blocks, u32 block_size)
{
	u64 bytes = (u64)blocks * block_size;

	spin_lock(&kva_charge_lock);
	if (WARN_ON_ONCE(bytes > t->used_bytes))
		bytes = t->used_bytes;
	t->used_bytes -= bytes;
	spin_unlock(&kva_charge_lock);
}

void kva_tenant_arena_add(struct kva_tenant_acct *t, int delta)
{
	spin_lock(&kva_charge_lock);
	t->arenas += delta;
	spin_unlock(&kva_charge_lock);
}

long kva_tenant_ioctl(unsigned int cmd, void __user *uarg)
{
	struct kva_tenant_acct *t;
	struct kva_tenant arg;
	bool set = _IOC_NR(cmd) == _IOC_NR(KVA_IOC_TENANT_SET_QUOTA);
	u32 usize;
	int ret;

	ret = kva_copy_in(&arg, sizeof(arg), KVA_TENANT_SIZE_VER0, uarg, &usize);
	if (ret)
		return ret;
	if (arg.flags)
		return -EINVAL;
	if (set && !capable(CAP_SYS_ADMIN))
		return -EPERM;
	t = kva_tenant_lookup(arg.tenant_id, set);
	if (!t)
		return -ENOENT;
	if (IS_ERR(t))
		return PTR_ERR(t);
	spin_lock(&kva_charge_lock);
	if (set)
		t->quota_bytes = arg.quota_bytes;
	arg.quota_bytes = t->quota_bytes;
	arg.used_bytes = t->used_bytes;
	arg.arenas = t->arenas;
	spin_unlock(&kva_charge_lock);
	return set ? 0 : kva_copy_out(uarg, &arg, sizeof(arg), usize);
}

void kva_tenants_show(struct seq_file *m)
{
	struct kva_tenant_acct *t;
	unsigned long id;

	seq_printf(m, "%-10s %-7s %-16s %-16s\n", "tenant", "arenas",
		   "used_bytes", "quota_bytes");
	mutex_lock(&kva_tenants_lock);
	xa_for_each(&kva_tenants, id, t) {
		spin_lock(&kva_charge_lock);
		seq_printf(m, "%-10u %-7u %-16llu %-16llu\n", t->id, t->arenas,
			   t->used_bytes, t->quota_bytes);
		spin_unlock(&kva_charge_lock);
	}
	mutex_unlock(&kva_tenants_lock);
}

void kva_tenants_destroy(void)
{
	struct kva_tenant_acct *t;
	unsigned long id;

	xa_for_each(&kva_tenants, id, t)
		kfree(t);
	xa_destroy(&kva_tenants);
}
