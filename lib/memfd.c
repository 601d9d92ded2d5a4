// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The memfd backend: arenas in user space for hosts without kvarena.ko.
 * Memory is a memfd (hugetlb 2 MiB pages if the host has them reserved,
 * else transparent huge pages via MADV_HUGEPAGE), locked with mlock.  The
 * bookkeeping is the module's own shared core (kmod/core/), run under a
 * mutex, and each arena ioctl is emulated with the module's semantics and
 * errno values.  What it cannot give: dma-buf export, device import, and
 * sharing of block/session state with other processes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <linux/memfd.h>
#include <unistd.h>

#include "internal.h"
#include "toolwait_usdt.h"

#define KVA_MEMFD_MAX_SESSIONS	KVC_MAX_SESSIONS
#define KVA_MPOL_BIND		2	/* <linux/mempolicy.h> MPOL_BIND */

static uint64_t kva_memfd_cap(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);

	if (pages <= 0 || psize <= 0)
		return 0;
	/* Like the module's default: half of RAM, in whole 2 MiB pages. */
	return ((uint64_t)pages * (uint64_t)psize / 2) & ~(KVA_PAGE_SIZE - 1);
}

int kva_memfd_version(struct kva_dev *dev, struct kva_version *out)
{
	(void)dev;
	out->api_version = KVA_API_VERSION;
	out->features = KVA_FEAT_MMAP | KVA_FEAT_SESSIONS |
			KVA_FEAT_BLOCK_SHARE | KVA_FEAT_TENANT_QUOTA |
			KVA_FEAT_NUMA | KVA_FEAT_EVICTION |
			KVA_FEAT_SESSION_UPDATE;
	out->max_pinned_bytes = kva_memfd_cap();
	out->max_arena_bytes = kva_memfd_cap();
	out->page_size = KVA_PAGE_SIZE;
	out->max_batch = KVA_MAX_BATCH;
	out->max_sessions = KVA_MEMFD_MAX_SESSIONS;
	return 0;
}

/* Caller holds dev->lock. */
static struct kva_utenant *kva_utenant_find(struct kva_dev *dev, uint32_t id,
					    bool create)
{
	struct kva_utenant *t;

	for (t = dev->tenants; t; t = t->next)
		if (t->id == id)
			return t;
	if (!create)
		return NULL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->id = id;
	t->next = dev->tenants;
	dev->tenants = t;
	return t;
}

int kva_memfd_tenant(struct kva_dev *dev, bool set, struct kva_tenant *arg)
{
	struct kva_utenant *t;
	int ret = 0;

	if (arg->flags)
		return -EINVAL;
	pthread_mutex_lock(&dev->lock);
	t = kva_utenant_find(dev, arg->tenant_id, set);
	if (!t) {
		ret = set ? -ENOMEM : -ENOENT;
	} else {
		if (set)
			t->quota_bytes = arg->quota_bytes;
		arg->quota_bytes = t->quota_bytes;
		arg->used_bytes = t->used_bytes;
		arg->arenas = t->arenas;
	}
	pthread_mutex_unlock(&dev->lock);
	return ret;
}

void kva_memfd_dev_destroy(struct kva_dev *dev)
{
	while (dev->tenants) {
		struct kva_utenant *t = dev->tenants;

		dev->tenants = t->next;
		free(t);
	}
}

static uint32_t kva_utenant_reserve(struct kva_arena *arena, uint32_t blocks)
{
	struct kva_utenant *t = arena->tenant;
	uint64_t room;

	pthread_mutex_lock(&arena->dev->lock);
	if (t->quota_bytes) {
		room = t->quota_bytes > t->used_bytes ?
		       t->quota_bytes - t->used_bytes : 0;
		room /= arena->block_size;
		if (room < blocks)
			blocks = (uint32_t)room;
	}
	t->used_bytes += (uint64_t)blocks * arena->block_size;
	pthread_mutex_unlock(&arena->dev->lock);
	return blocks;
}

static void kva_utenant_uncharge(struct kva_arena *arena, uint32_t blocks)
{
	pthread_mutex_lock(&arena->dev->lock);
	arena->tenant->used_bytes -= (uint64_t)blocks * arena->block_size;
	pthread_mutex_unlock(&arena->dev->lock);
}

static int kva_node_online(int node)
{
	char path[64];

	snprintf(path, sizeof(path), "/sys/devices/system/node/node%d", node);
	return access(path, F_OK) == 0;
}

/* Arena ids: one sequence for the whole process, so that two kva_dev
 * handles never hand out the same id (tool-wait keys, logs). */
static uint32_t kva_memfd_next_id;

/* hugetlb pages if the host has them reserved, else THP; locked unless
 * the caller said otherwise (KVA_ARENA_NO_MLOCK, KVA_ARENA_MLOCK_TRY). */
static int kva_memfd_memory(struct kva_arena *arena, const char *name,
			    int32_t node, uint32_t flags)
{
	char label[KVA_NAME_LEN + 16];
	void *p = MAP_FAILED;
	int fd;

	snprintf(label, sizeof(label), "kvarena:%s", name);
	fd = memfd_create(label, MFD_CLOEXEC | MFD_HUGETLB | MFD_HUGE_2MB);
	if (fd >= 0 && ftruncate(fd, (off_t)arena->bytes) == 0)
		p = mmap(NULL, arena->bytes, PROT_READ | PROT_WRITE,
			 MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		if (fd >= 0)
			close(fd);
		fd = memfd_create(label, MFD_CLOEXEC);
		if (fd < 0)
			return -errno;
		if (ftruncate(fd, (off_t)arena->bytes)) {
			close(fd);
			return -errno;
		}
		p = mmap(NULL, arena->bytes, PROT_READ | PROT_WRITE,
			 MAP_SHARED, fd, 0);
		if (p == MAP_FAILED) {
			close(fd);
			return -errno;
		}
		madvise(p, arena->bytes, MADV_HUGEPAGE);
	}
	arena->fd = fd;
	arena->base = p;
	if (node != KVA_NUMA_ANY) {
		unsigned long mask[16] = { 0 };

		mask[node / 64] = 1UL << (node % 64);
		if (syscall(SYS_mbind, p, arena->bytes, KVA_MPOL_BIND, mask,
			    sizeof(mask) * 8, 0))
			return -errno;
	}
	if (flags & KVA_ARENA_NO_MLOCK)
		return 0;
	/* Fault everything in now, as the module does at creation. */
	if (mlock(p, arena->bytes)) {
		int err = errno;

		kva_log(flags & KVA_ARENA_MLOCK_TRY ? KVA_LOG_INFO : KVA_LOG_ERR,
			"memfd arena \"%s\": mlock of %llu bytes: %s%s", name,
			(unsigned long long)arena->bytes, strerror(err),
			flags & KVA_ARENA_MLOCK_TRY ? "; going on unlocked" :
			" (raise ulimit -l, or create with KVA_ARENA_MLOCK_TRY"
			" or KVA_ARENA_NO_MLOCK)");
		if (!(flags & KVA_ARENA_MLOCK_TRY))
			return -err;
	}
	return 0;
}

int kva_memfd_arena_create(struct kva_dev *dev, struct kva_arena_create *arg,
			   uint32_t flags, struct kva_arena *arena)
{
	int ret;

	ret = kvc_check_arena_create(arg, kva_memfd_cap());
	if (ret)
		return ret;
	if (arg->numa_node != KVA_NUMA_ANY &&
	    (arg->numa_node >= 1024 || !kva_node_online(arg->numa_node)))
		return -EINVAL;
	arena->bytes = arg->bytes;
	arena->block_size = arg->block_size;
	arena->blocks_per_page = (uint32_t)(KVA_PAGE_SIZE / arg->block_size);
	arena->nblocks = kvc_arena_nblocks(arg->bytes, arg->block_size);
	arena->numa_node = arg->numa_node;
	arena->created_ns = kva_now_ns();
	memcpy(arena->name, arg->name, sizeof(arena->name));

	pthread_mutex_lock(&dev->lock);
	arena->tenant = kva_utenant_find(dev, arg->tenant_id, true);
	if (arena->tenant)
		arena->tenant->arenas++;
	arena->id = __atomic_add_fetch(&kva_memfd_next_id, 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&dev->lock);
	if (!arena->tenant)
		return -ENOMEM;

	ret = kva_memfd_memory(arena, arg->name, arg->numa_node, flags);
	if (ret)
		return ret;
	ret = kvc_arena_init(&arena->core, arena->nblocks, arena->block_size,
			     KVA_MEMFD_MAX_SESSIONS);
	if (!ret)
		ret = kvc_policy_set(&arena->core, arg->policy, arg->low_wm,
				     arg->high_wm, arg->ttl_ms);
	if (ret)
		return ret;
	arg->arena_id = arena->id;
	arg->blocks_total = arena->nblocks;
	return 0;
}

void kva_memfd_arena_destroy(struct kva_arena *arena)
{
	if (arena->core.pool.refcnt) {
		kva_utenant_uncharge(arena, kvc_blocks_in_use(&arena->core));
		kvc_arena_destroy(&arena->core);
	}
	if (arena->tenant) {
		pthread_mutex_lock(&arena->dev->lock);
		arena->tenant->arenas--;
		pthread_mutex_unlock(&arena->dev->lock);
	}
	if (arena->base)
		munmap(arena->base, arena->bytes);
	if (arena->fd >= 0)
		close(arena->fd);
}

static int kva_memfd_info(struct kva_arena *arena, struct kva_arena_info *out)
{
	if (out->flags)
		return -EINVAL;
	*out = (struct kva_arena_info){ .size = out->size };
	out->bytes = arena->bytes;
	out->arena_id = arena->id;
	out->block_size = arena->block_size;
	out->blocks_per_page = arena->blocks_per_page;
	out->numa_node = arena->numa_node;
	out->tenant_id = arena->tenant->id;
	out->created_ns = arena->created_ns;
	memcpy(out->name, arena->name, sizeof(out->name));
	out->blocks_total = arena->core.pool.nblocks;
	out->blocks_free = arena->core.pool.nfree;
	out->sessions = arena->core.nsessions;
	out->sessions_ended = arena->core.sessions_ended;
	out->idle_block_us = arena->core.ended_idle_block_us;
	out->policy = arena->core.policy;
	out->low_wm = arena->core.low_wm;
	out->high_wm = arena->core.high_wm;
	out->ttl_ms = arena->core.ttl_ms;
	return 0;
}

static int kva_memfd_blocks(struct kva_arena *arena, unsigned int nr,
			    struct kva_blocks *arg)
{
	bool alloc = nr == _IOC_NR(KVA_IOC_BLOCKS_ALLOC);
	uint32_t *ids = (uint32_t *)(uintptr_t)arg->ids;
	uint32_t quota, released = 0;
	uint64_t now = kva_now_ns();
	int ret;

	ret = kvc_check_blocks(arg, alloc);
	if (ret)
		return ret;
	if (!ids)
		return -EFAULT;
	if (alloc) {
		quota = kva_utenant_reserve(arena, arg->count);
		ret = kvc_blocks_alloc(&arena->core, arg->session_id,
				       arg->count,
				       arg->flags & KVA_ALLOC_PARTIAL, quota,
				       now, ids, &arg->done);
		kva_utenant_uncharge(arena, quota - arg->done);
		return ret ? ret : (int)arg->done;
	}
	if (nr == _IOC_NR(KVA_IOC_BLOCKS_SHARE))
		ret = kvc_blocks_share(&arena->core, arg->session_id,
				       arg->count, ids, now);
	else
		ret = kvc_blocks_free(&arena->core, arg->session_id,
				      arg->count, ids, now, &released);
	if (ret)
		return ret;
	kva_utenant_uncharge(arena, released);
	arg->done = arg->count;
	return (int)arg->done;
}

/*
 * End a session or change its state; the kvarena:session_state USDT probe
 * (lib/toolwait_usdt.h) sees what the module's tracepoint would.
 */
static int kva_memfd_transition(struct kva_arena *arena, uint64_t id,
				bool end, uint32_t flags, uint32_t state,
				uint32_t tool_class, uint64_t wait_us,
				uint32_t tier, uint64_t now,
				uint32_t *released)
{
	const struct kvc_session *s = kvc_session_find(&arena->core, id);
	uint32_t old = s ? s->state : 0, held = s ? s->nheld : 0;
	uint64_t cookie = s ? s->cookie : 0;
	bool transition = true;
	int ret;

	if (end)
		ret = kvc_session_end(&arena->core, id, now, released);
	else
		ret = kvc_session_set_state_flags(&arena->core, id, flags,
						  state, tool_class, wait_us,
						  tier, now, released,
						  &transition);
	if (!ret && transition)
		KVA_USDT_SESSION_STATE(arena->id, id, old,
				       end ? KVA_STATE_ENDED : state,
				       tool_class, wait_us, held,
				       arena->block_size, cookie);
	return ret;
}

static int kva_memfd_session(struct kva_arena *arena, unsigned int nr,
			     void *argp)
{
	uint64_t now = kva_now_ns();
	uint32_t released = 0;
	int ret = -ENOTTY;

	if (nr == _IOC_NR(KVA_IOC_SESSION_CREATE)) {
		struct kva_session_create *arg = argp;

		if (arg->flags)
			return -EINVAL;
		ret = kvc_session_create(&arena->core, arg->cookie, now,
					 &arg->session_id);
		if (!ret)
			KVA_USDT_SESSION_STATE(arena->id, arg->session_id,
					       KVA_STATE_ENDED, KVA_STATE_IDLE,
					       0, 0, 0, arena->block_size,
					       arg->cookie);
		return ret;		/* the id is in arg, as the module does */
	}
	if (nr == _IOC_NR(KVA_IOC_SESSION_END)) {
		struct kva_session_end *arg = argp;

		if (arg->flags)
			return -EINVAL;
		ret = kva_memfd_transition(arena, arg->session_id, true, 0, 0,
					   0, 0, 0, now, &released);
	} else if (nr == _IOC_NR(KVA_IOC_SESSION_SET_STATE)) {
		struct kva_session_state *arg = argp;

		/* VER1's fields only where the caller's struct has them */
		bool ver1 = arg->size >= KVA_SESSION_STATE_SIZE_VER1;

		if (arg->state >= KVC_STATE_COUNT || (ver1 && arg->pad) ||
		    (arg->flags & ~(KVA_SESSION_STATE_KEEP |
				    KVA_SESSION_STATE_TIER)) ||
		    ((arg->flags & KVA_SESSION_STATE_TIER) && !ver1))
			return -EINVAL;
		ret = kva_memfd_transition(arena, arg->session_id, false,
					   arg->flags, arg->state,
					   arg->tool_class,
					   arg->expected_wait_us,
					   ver1 ? arg->tier : 0, now,
					   &released);
	} else if (nr == _IOC_NR(KVA_IOC_SESSION_INFO)) {
		struct kva_session_info *arg = argp;

		if (arg->flags || arg->pad)
			return -EINVAL;
		return kvc_session_info(&arena->core, arg->session_id, now,
					arg);
	}
	if (!ret)
		kva_utenant_uncharge(arena, released);
	return ret;
}

/* Victims at the caller's stride, as the module writes them. */
static int kva_memfd_victims_out(struct kva_arena *arena, uint32_t policy,
				 struct kva_victims *v)
{
	struct kva_victim *tmp = calloc(v->max, sizeof(*tmp));
	size_t known = v->victim_size < sizeof(*tmp) ? v->victim_size :
						      sizeof(*tmp);
	char *out = (char *)(uintptr_t)v->victims;
	uint32_t i;

	if (!tmp)
		return -ENOMEM;
	v->count = kvc_rank_victims(&arena->core, policy, kva_now_ns(), tmp,
				    v->max);
	for (i = 0; i < v->count; i++, out += v->victim_size) {
		memcpy(out, &tmp[i], known);
		memset(out + known, 0, v->victim_size - known);
	}
	free(tmp);
	return (int)v->count;
}

static int kva_memfd_policy(struct kva_arena *arena, unsigned int nr,
			    void *argp)
{
	struct kva_victims *v = argp;
	struct kva_policy_set *p = argp;
	uint32_t policy;

	if (nr == _IOC_NR(KVA_IOC_ARENA_SET_POLICY))
		return p->flags ? -EINVAL :
		       kvc_policy_set(&arena->core, p->policy, p->low_wm,
				      p->high_wm, p->ttl_ms);
	if (v->flags || !v->max || v->max > KVA_MAX_VICTIMS ||
	    v->victim_size < KVA_VICTIM_SIZE_VER0 ||
	    (v->policy >= KVC_POLICY_COUNT && v->policy != KVA_POLICY_ARENA))
		return -EINVAL;
	if (v->victim_size > KVA_STRUCT_MAX)
		return -E2BIG;
	if (!v->victims)
		return -EFAULT;
	policy = v->policy == KVA_POLICY_ARENA ? arena->core.policy : v->policy;
	return kva_memfd_victims_out(arena, policy, v);
}

int kva_memfd_call(struct kva_arena *arena, unsigned long cmd, void *arg)
{
	unsigned int nr = _IOC_NR(cmd);
	int ret;

	/* Commands are matched exactly, as the module does. */
	if (cmd != _IO(KVA_IOC_MAGIC, nr))
		return -ENOTTY;
	if (nr == _IOC_NR(KVA_IOC_EXPORT_DMABUF))
		return -EOPNOTSUPP;
	pthread_mutex_lock(&arena->lock);
	if (nr == _IOC_NR(KVA_IOC_ARENA_INFO))
		ret = kva_memfd_info(arena, arg);
	else if (nr >= _IOC_NR(KVA_IOC_BLOCKS_ALLOC) &&
		 nr <= _IOC_NR(KVA_IOC_BLOCKS_SHARE))
		ret = kva_memfd_blocks(arena, nr, arg);
	else if (nr == _IOC_NR(KVA_IOC_ARENA_SET_POLICY) ||
		 nr == _IOC_NR(KVA_IOC_ARENA_VICTIMS))
		ret = kva_memfd_policy(arena, nr, arg);
	else
		ret = kva_memfd_session(arena, nr, arg);
	pthread_mutex_unlock(&arena->lock);
	return ret;
}
