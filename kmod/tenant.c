// SPDX-License-Identifier: GPL-2.0
/*
 * Tenant accounts.  A tenant is who pays: by default the effective uid, as
 * the host sees it, of whoever opened /dev/kvarena (the file's f_cred, not
 * the caller's: permissions are checked at open, so a process holding the
 * fd is the opener's tenant whatever uid it switches to); in a user
 * namespace an unprivileged user created, the uid that owns it, so the uids
 * it maps (its subordinate range) are all that one user.  An unprivileged
 * caller cannot choose it; only CAP_SYS_ADMIN may act for another tenant.
 * Two charges: the bytes of the tenant's arenas (the pinned memory, the real
 * resource), checked at create against its arena quota (tenant_default_mb
 * unless an administrator set one) and kept until the pages are really
 * free, lingering ones included; and the bytes of KV blocks its arenas
 * hold, against its block quota (charged when a block leaves the free
 * pool; shared references cost nothing extra).  An account lives while an
 * arena holds it, or until unload once an administrator set its quotas; a
 * failed call never leaves one behind.  The table is bounded by
 * max_tenants.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/capability.h>
#include <linux/cred.h>
#include <linux/moduleparam.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/user_namespace.h>
#include <linux/xarray.h>

#include "kva.h"

static unsigned int max_tenants = 1024;
module_param(max_tenants, uint, 0644);
MODULE_PARM_DESC(max_tenants, "Most tenant accounts the module keeps (default 1024)");

static unsigned int tenant_default_mb;
module_param(tenant_default_mb, uint, 0644);
MODULE_PARM_DESC(tenant_default_mb, "Arena bytes a tenant may hold unless an administrator set its quota, MiB (0 at load: half of max_pinned_mb)");

static DEFINE_XARRAY(kva_tenants);
static DEFINE_MUTEX(kva_tenants_lock);		/* table, refs, explicit */
static DEFINE_SPINLOCK(kva_charge_lock);	/* quotas and usage */
static unsigned int kva_ntenants;

void kva_tenants_init(u64 max_pinned_mb)
{
	if (!tenant_default_mb)
		tenant_default_mb = max_pinned_mb / 2 ?: 1;
}

/*
 * The tenant of an opener's credentials: its effective uid as the host
 * sees it, unless it is in a user namespace that a user other than root
 * created (directly or further out): then the outermost such owner.  A
 * namespace root creates maps uids an administrator chose; one a user
 * creates maps that user's subordinate uids, which must not be tenants of
 * their own.
 */
static u32 kva_tenant_of(const struct cred *cred)
{
	const struct user_namespace *ns;
	kuid_t uid = cred->euid;

	for (ns = cred->user_ns; ns != &init_user_ns; ns = ns->parent)
		if (!uid_eq(ns->owner, GLOBAL_ROOT_UID))
			uid = ns->owner;
	return from_kuid_munged(&init_user_ns, uid);
}

/*
 * Which tenant may the caller act for?  Its file's own always; any other
 * only with CAP_SYS_ADMIN (an administrator, or a daemon it trusts that
 * way).
 */
static int kva_tenant_resolve(const struct file *file, u32 requested,
			      u32 *id)
{
	u32 self = kva_tenant_of(file->f_cred);

	*id = requested == KVA_TENANT_SELF ? self : requested;
	if (*id != self && !capable(CAP_SYS_ADMIN))
		return -EPERM;
	return 0;
}

/* Find or add an account and hold it; kva_tenants_lock held. */
static struct kva_tenant_acct *kva_tenant_hold(u32 id, bool create)
{
	struct kva_tenant_acct *t = xa_load(&kva_tenants, id);
	int ret;

	if (!t && !create)
		return ERR_PTR(-ENOENT);
	if (!t) {
		if (kva_ntenants >= max_tenants)
			return ERR_PTR(-ENOSPC);
		t = kzalloc(sizeof(*t), GFP_KERNEL_ACCOUNT);
		if (!t)
			return ERR_PTR(-ENOMEM);
		t->id = id;
		ret = xa_err(xa_store(&kva_tenants, id, t, GFP_KERNEL_ACCOUNT));
		if (ret) {
			kfree(t);
			return ERR_PTR(ret);
		}
		kva_ntenants++;
	}
	t->refs++;
	return t;
}

/* Drop a hold; an account nobody holds and no administrator set goes. */
static void kva_tenant_unhold(struct kva_tenant_acct *t)
{
	if (--t->refs || t->explicit)
		return;
	xa_erase(&kva_tenants, t->id);
	kva_ntenants--;
	kfree(t);
}

struct kva_tenant_acct *kva_tenant_for_caller(const struct file *file,
					      u32 requested)
{
	struct kva_tenant_acct *t;
	u32 id;
	int ret;

	ret = kva_tenant_resolve(file, requested, &id);
	if (ret)
		return ERR_PTR(ret);
	mutex_lock(&kva_tenants_lock);
	t = kva_tenant_hold(id, true);
	mutex_unlock(&kva_tenants_lock);
	return t;
}

void kva_tenant_put(struct kva_tenant_acct *t)
{
	mutex_lock(&kva_tenants_lock);
	kva_tenant_unhold(t);
	mutex_unlock(&kva_tenants_lock);
}

static u64 kva_arena_quota(const struct kva_tenant_acct *t)
{
	return t->arena_quota_bytes ?: (u64)READ_ONCE(tenant_default_mb) << 20;
}

/* An arena of `bytes` for t: within its arena quota, or -EDQUOT. */
int kva_tenant_arena_charge(struct kva_tenant_acct *t, u64 bytes)
{
	int ret = 0;

	mutex_lock(&kva_tenants_lock);
	spin_lock(&kva_charge_lock);
	if (bytes > kva_arena_quota(t) ||
	    t->arena_bytes > kva_arena_quota(t) - bytes) {
		ret = -EDQUOT;
	} else {
		t->arena_bytes += bytes;
		t->arenas++;
		t->refs++;
	}
	spin_unlock(&kva_charge_lock);
	mutex_unlock(&kva_tenants_lock);
	return ret;
}

/* Pages of one of t's arenas are really free (or were never allocated). */
void kva_tenant_arena_uncharge(struct kva_tenant_acct *t, u64 bytes)
{
	spin_lock(&kva_charge_lock);
	if (WARN_ON_ONCE(bytes > t->arena_bytes))
		bytes = t->arena_bytes;
	t->arena_bytes -= bytes;
	spin_unlock(&kva_charge_lock);
}

/* One of t's arenas is gone, every page of it uncharged. */
void kva_tenant_arena_release(struct kva_tenant_acct *t)
{
	mutex_lock(&kva_tenants_lock);
	spin_lock(&kva_charge_lock);
	if (!WARN_ON_ONCE(!t->arenas))
		t->arenas--;
	spin_unlock(&kva_charge_lock);
	kva_tenant_unhold(t);
	mutex_unlock(&kva_tenants_lock);
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

/*
 * SET_QUOTA: administrators only; the account is kept until unload.
 * INFO: the caller's own tenant, or any with CAP_SYS_ADMIN.
 */
long kva_tenant_ioctl(const struct file *file, unsigned int cmd,
		      void __user *uarg)
{
	bool set = cmd == KVA_IOC_TENANT_SET_QUOTA;
	struct kva_tenant_acct *t;
	struct kva_tenant arg;
	u32 usize, id;
	int ret;

	ret = kva_copy_in(&arg, sizeof(arg), KVA_TENANT_SIZE_VER0, uarg, &usize);
	if (ret)
		return ret;
	if (arg.flags)
		return -EINVAL;
	if (set && !capable(CAP_SYS_ADMIN))
		return -EPERM;
	ret = kva_tenant_resolve(file, arg.tenant_id, &id);
	if (ret)
		return ret;
	kva_linger_reap();		/* usage as of now */
	mutex_lock(&kva_tenants_lock);
	t = kva_tenant_hold(id, set);
	if (IS_ERR(t)) {
		mutex_unlock(&kva_tenants_lock);
		return PTR_ERR(t);
	}
	spin_lock(&kva_charge_lock);
	if (set) {
		t->explicit = true;
		t->quota_bytes = arg.quota_bytes;
		t->arena_quota_bytes = arg.arena_quota_bytes;
	}
	arg.tenant_id = t->id;
	arg.quota_bytes = t->quota_bytes;
	arg.used_bytes = t->used_bytes;
	arg.arenas = t->arenas;
	arg.arena_quota_bytes = kva_arena_quota(t);
	arg.arena_bytes = t->arena_bytes;
	spin_unlock(&kva_charge_lock);
	kva_tenant_unhold(t);
	mutex_unlock(&kva_tenants_lock);
	return set ? 0 : kva_copy_out(uarg, &arg, sizeof(arg), usize);
}

void kva_tenants_show(struct seq_file *m)
{
	struct kva_tenant_acct *t;
	unsigned long id;

	seq_printf(m, "%-10s %-7s %-16s %-16s %-16s %-16s\n", "tenant",
		   "arenas", "used_bytes", "quota_bytes", "arena_bytes",
		   "arena_quota");
	mutex_lock(&kva_tenants_lock);
	xa_for_each(&kva_tenants, id, t) {
		spin_lock(&kva_charge_lock);
		seq_printf(m, "%-10u %-7u %-16llu %-16llu %-16llu %-16llu\n",
			   t->id, t->arenas, t->used_bytes, t->quota_bytes,
			   t->arena_bytes, kva_arena_quota(t));
		spin_unlock(&kva_charge_lock);
	}
	mutex_unlock(&kva_tenants_lock);
}

unsigned int kva_tenants_count(void)
{
	return READ_ONCE(kva_ntenants);
}

void kva_tenants_destroy(void)
{
	struct kva_tenant_acct *t;
	unsigned long id;

	xa_for_each(&kva_tenants, id, t)
		kfree(t);
	xa_destroy(&kva_tenants);
}
