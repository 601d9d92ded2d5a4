// SPDX-License-Identifier: GPL-2.0
/*
 * The operations on an arena fd, shared by ioctl and io_uring: info,
 * dma-buf export, blocks, sessions, policy and victims.  Each handler
 * validates (copies its struct in through kva_op_in(), checks every field,
 * and checks that its output can be written), then runs the shared core
 * (core/) under the arena lock, charging the tenant for blocks that leave
 * the free pool, and only then publishes: writes the result back and emits
 * tracepoints and events (pressure, quota, session ended).  A result that
 * cannot be written back after all (memory unmapped meanwhile by another
 * thread) is undone.  With nowait (io_uring's inline issue) a contended arena
 * lock gives -EAGAIN, and io_uring retries from a worker.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/file.h>
#include <linux/fs.h>
#include <linux/pagemap.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/timekeeping.h>
#include <linux/uaccess.h>

#include "kva.h"
#include "trace.h"

enum { KVA_TRACE_ALLOC, KVA_TRACE_FREE, KVA_TRACE_SHARE, KVA_TRACE_RELEASE };

/* Every arena op's struct starts with these two fields. */
struct kva_op_hdr {
	u32 size;
	u32 flags;
};

/*
 * Validate, the first of each op's three steps (then allocate, then
 * publish): copy the struct in (size rules of the UAPI header) and refuse
 * flags the op does not define.
 */
static int kva_op_in(void *karg, size_t ksize, size_t ver0,
		     void __user *uarg, u32 *usize, u32 flags_ok)
{
	int ret = kva_copy_in(karg, ksize, ver0, uarg, usize);

	if (ret)
		return ret;
	return ((struct kva_op_hdr *)karg)->flags & ~flags_ok ? -EINVAL : 0;
}

int kva_arena_lock(struct kva_arena *arena, bool nowait)
{
	if (!nowait) {
		mutex_lock(&arena->lock);
		return 0;
	}
	if (mutex_trylock(&arena->lock))
		return 0;
	atomic64_inc(&arena->uring_eagain);
	return -EAGAIN;
}

/*
 * att_lock is held across the DMA mapping of a whole arena for a device,
 * which can take milliseconds: the non-blocking issue must not wait for it.
 */
static int kva_att_lock(struct kva_arena *arena, bool nowait)
{
	if (!nowait) {
		mutex_lock(&arena->att_lock);
		return 0;
	}
	if (mutex_trylock(&arena->att_lock))
		return 0;
	atomic64_inc(&arena->uring_eagain);
	return -EAGAIN;
}

static int kva_info(struct kva_arena *arena, void __user *uarg, bool nowait)
{
	struct kva_arena_info arg;
	u32 usize;
	int ret;

	ret = kva_op_in(&arg, sizeof(arg), KVA_ARENA_INFO_SIZE_VER0, uarg,
			&usize, 0);
	if (ret)
		return ret;
	arg = (struct kva_arena_info){ .size = usize };
	arg.bytes = arena->bytes;
	arg.arena_id = arena->id;
	arg.block_size = arena->block_size;
	arg.blocks_per_page = arena->blocks_per_page;
	arg.numa_node = arena->numa_node;
	arg.tenant_id = arena->tenant->id;
	arg.created_ns = arena->created_ns;
	memcpy(arg.name, arena->name, sizeof(arg.name));
	ret = kva_arena_lock(arena, nowait);
	if (ret)
		return ret;
	arg.blocks_total = arena->core.pool.nblocks;
	arg.blocks_free = arena->core.pool.nfree;
	arg.sessions = arena->core.nsessions;
	arg.sessions_ended = arena->core.sessions_ended;
	arg.idle_block_us = arena->core.ended_idle_block_us;
	arg.policy = arena->core.policy;
	arg.low_wm = arena->core.low_wm;
	arg.high_wm = arena->core.high_wm;
	arg.ttl_ms = arena->core.ttl_ms;
	mutex_unlock(&arena->lock);
	spin_lock(&arena->ev_lock);
	arg.events_posted = arena->events_posted;
	arg.events_dropped = arena->events_dropped;
	spin_unlock(&arena->ev_lock);
	ret = kva_att_lock(arena, nowait);
	if (ret)
		return ret;
	arg.uring_eagain = atomic64_read(&arena->uring_eagain);
	arg.dmabuf_attachments = arena->nattached;
	arg.dmabuf_mapped = arena->nmapped;
	arg.dmabuf_maps_total = arena->maps_total;
	mutex_unlock(&arena->att_lock);
	return kva_copy_out(uarg, &arg, sizeof(arg), usize);
}

static int kva_export(struct kva_arena *arena, void __user *uarg)
{
	struct dma_buf *dmabuf;
	struct kva_export arg;
	u32 usize;
	int fd, ret;

	ret = kva_op_in(&arg, sizeof(arg), KVA_EXPORT_SIZE_VER0, uarg, &usize,
			KVA_EXPORT_CLOEXEC | KVA_EXPORT_RDONLY);
	if (ret)
		return ret;
	if (arg.pad)
		return -EINVAL;
	if (arg.flags & KVA_EXPORT_RDONLY) {
		dmabuf = kva_dmabuf_rdonly(arena);
		if (IS_ERR(dmabuf))
			return PTR_ERR(dmabuf);
	} else {
		dmabuf = arena->dmabuf;
		get_dma_buf(dmabuf);
	}
	fd = get_unused_fd_flags(arg.flags & KVA_EXPORT_CLOEXEC ? O_CLOEXEC : 0);
	if (fd < 0) {
		dma_buf_put(dmabuf);
		return fd;
	}
	arg.fd = fd;
	ret = kva_copy_out(uarg, &arg, sizeof(arg), usize);
	if (ret) {
		put_unused_fd(fd);
		dma_buf_put(dmabuf);
		return ret;
	}
	fd_install(fd, dmabuf->file);
	return fd;
}

/* Copy in a kva_blocks and its id array (ids_out: array is output only). */
static int kva_blocks_in(void __user *uarg, struct kva_blocks *arg,
			 u32 *usize, u32 **ids, bool ids_out)
{
	int ret;

	ret = kva_copy_in(arg, sizeof(*arg), KVA_BLOCKS_SIZE_VER0, uarg, usize);
	if (ret)
		return ret;
	ret = kvc_check_blocks(arg, ids_out);
	if (ret)
		return ret;
	/*
	 * Output that cannot be written fails the call before anything is
	 * committed (every op: `done`; alloc: the id array, faulted in
	 * writable without being written: fault_in_writeable() would store a
	 * zero byte at its start and at each page boundary, in entries the
	 * UAPI promises are left alone).
	 */
	if (put_user(0, &((struct kva_blocks __user *)uarg)->done))
		return -EFAULT;
	if (ids_out &&
	    (!access_ok(u64_to_user_ptr(arg->ids), arg->count * sizeof(u32)) ||
	     fault_in_safe_writeable(u64_to_user_ptr(arg->ids),
				     arg->count * sizeof(u32))))
		return -EFAULT;
	*ids = kmalloc_array(arg->count, sizeof(u32), GFP_KERNEL);
	if (!*ids)
		return -ENOMEM;
	if (!ids_out && copy_from_user(*ids, u64_to_user_ptr(arg->ids),
				       arg->count * sizeof(u32))) {
		kfree(*ids);
		return -EFAULT;
	}
	return 0;
}

static void kva_uncharge(struct kva_arena *arena, u32 released)
{
	if (released)
		kva_tenant_uncharge(arena->tenant, released, arena->block_size);
}

/* Fill a PRESSURE event with the policy's victims; arena lock held. */
static void kva_pressure_event(struct kva_arena *arena, struct kva_event *ev)
{
	*ev = (struct kva_event){ .type = KVA_EVENT_PRESSURE };
	ev->tenant_id = arena->tenant->id;
	ev->blocks_free = arena->core.pool.nfree;
	ev->low_wm = arena->core.low_wm;
	ev->nvictims = kvc_rank_victims(&arena->core, arena->core.policy,
					ktime_get_ns(), ev->victims,
					KVA_EVENT_MAX_VICTIMS);
}

static int kva_blocks_alloc(struct kva_arena *arena, void __user *uarg,
			    bool nowait)
{
	struct kva_event *ev = NULL;
	struct kva_blocks arg;
	u32 usize, *ids, quota, released;
	bool pressure;
	int ret;

	ret = kva_blocks_in(uarg, &arg, &usize, &ids, true);
	if (ret)
		return ret;
	ret = kva_arena_lock(arena, nowait);
	if (ret)
		goto out;
	quota = kva_tenant_reserve(arena->tenant, arg.count, arena->block_size);
	ret = kvc_blocks_alloc(&arena->core, arg.session_id, arg.count,
			       arg.flags & KVA_ALLOC_PARTIAL, quota,
			       ktime_get_ns(), ids, &arg.done);
	kva_uncharge(arena, quota - arg.done);
	if (!ret)
		trace_kvarena_blocks(arena->id, arg.session_id, KVA_TRACE_ALLOC,
				     arg.done, 0, arena->core.pool.nfree);
	/* Allocation never waits: it fails fast and tells the owner. */
	pressure = (!ret || ret == -ENOSPC) &&
		   kvc_pressure_check(&arena->core, ret == -ENOSPC);
	if (pressure || ret == -EDQUOT)
		ev = kmalloc(sizeof(*ev), GFP_KERNEL);
	if (ev && pressure) {
		kva_pressure_event(arena, ev);
	} else if (ev) {
		*ev = (struct kva_event){ .type = KVA_EVENT_QUOTA };
		ev->tenant_id = arena->tenant->id;
		ev->session_id = arg.session_id;
		ev->blocks_free = arena->core.pool.nfree;
		ev->requested = arg.count;
	}
	mutex_unlock(&arena->lock);
	if (ev) {
		kva_event_post(arena, ev, false);
		kfree(ev);
	}
	if (ret)
		goto out;

	if (copy_to_user(u64_to_user_ptr(arg.ids), ids,
			 arg.done * sizeof(u32)) ||
	    kva_copy_out(uarg, &arg, sizeof(arg), usize)) {
		/*
		 * Only if the memory went away since it was checked (another
		 * thread's munmap): the caller cannot learn the ids, so the
		 * blocks go back.
		 */
		mutex_lock(&arena->lock);
		if (!kvc_blocks_free(&arena->core, arg.session_id, arg.done,
				     ids, ktime_get_ns(), &released)) {
			kva_uncharge(arena, released);
			trace_kvarena_blocks(arena->id, arg.session_id,
					     KVA_TRACE_FREE, arg.done, released,
					     arena->core.pool.nfree);
		}
		mutex_unlock(&arena->lock);
		ret = -EFAULT;
		goto out;
	}
	ret = arg.done;
out:
	kfree(ids);
	return ret;
}

static int kva_blocks_free(struct kva_arena *arena, void __user *uarg,
			   bool share, bool nowait)
{
	struct kva_blocks arg;
	u32 usize, *ids, released = 0;
	u64 now = ktime_get_ns();
	int ret;

	ret = kva_blocks_in(uarg, &arg, &usize, &ids, false);
	if (ret)
		return ret;
	ret = kva_arena_lock(arena, nowait);
	if (ret) {
		kfree(ids);
		return ret;
	}
	if (share)
		ret = kvc_blocks_share(&arena->core, arg.session_id, arg.count,
				       ids, now);
	else
		ret = kvc_blocks_free(&arena->core, arg.session_id, arg.count,
				      ids, now, &released);
	if (!ret) {
		kva_uncharge(arena, released);
		kvc_pressure_rearm(&arena->core, false);
		trace_kvarena_blocks(arena->id, arg.session_id,
				     share ? KVA_TRACE_SHARE : KVA_TRACE_FREE,
				     arg.count, released,
				     arena->core.pool.nfree);
	}
	mutex_unlock(&arena->lock);
	kfree(ids);
	if (ret)
		return ret;
	/*
	 * Done, and it cannot be taken back: only `done` is output, and it
	 * was found writable before anything changed (kva_blocks_in).  If
	 * another thread unmapped it since, the return value still tells
	 * the caller what happened: never EFAULT for a free that was made.
	 */
	if (put_user(arg.count, &((struct kva_blocks __user *)uarg)->done))
		pr_debug("blocks %s: done not written back\n",
			 share ? "share" : "free");
	return arg.count;
}

static int kva_session_create(struct kva_arena *arena, void __user *uarg,
			      bool nowait)
{
	struct kva_session_create arg;
	u64 now = ktime_get_ns();
	u32 usize, released;
	int ret;

	ret = kva_op_in(&arg, sizeof(arg), KVA_SESSION_CREATE_SIZE_VER0, uarg,
			&usize, 0);
	if (ret)
		return ret;
	/* The id must be writable before a session exists to write. */
	if (put_user(0, &((struct kva_session_create __user *)uarg)->session_id))
		return -EFAULT;
	ret = kva_arena_lock(arena, nowait);
	if (ret)
		return ret;
	ret = kvc_session_create(&arena->core, arg.cookie, now,
				 &arg.session_id);
	if (!ret)
		trace_kvarena_session_state(arena->id, arg.session_id,
					    KVA_STATE_ENDED, KVA_STATE_IDLE, 0,
					    0, 0, arena->block_size,
					    arg.cookie);
	mutex_unlock(&arena->lock);
	if (ret)
		return ret;
	ret = kva_copy_out(uarg, &arg, sizeof(arg), usize);
	if (ret) {
		/* Unmapped since the check: nobody could ever end it. */
		mutex_lock(&arena->lock);
		if (!kvc_session_end(&arena->core, arg.session_id, now,
				     &released))
			trace_kvarena_session_state(arena->id, arg.session_id,
						    KVA_STATE_IDLE,
						    KVA_STATE_ENDED, 0, 0, 0,
						    arena->block_size,
						    arg.cookie);
		mutex_unlock(&arena->lock);
		return ret;
	}
	/* The id is 64-bit: it goes back in the struct only, never as ret. */
	return 0;
}

/* Transition under the lock, with the tracepoint and quota accounting. */
static int kva_set_state(struct kva_arena *arena, u64 id, u32 flags,
			 u32 state, u32 tool_class, u64 wait_us, u32 tier,
			 bool nowait)
{
	struct kva_event ev;
	struct kvc_session *s;
	u32 old, held, released;
	bool transition;
	u64 cookie;
	int ret;

	ret = kva_arena_lock(arena, nowait);
	if (ret)
		return ret;
	s = kvc_session_find(&arena->core, id);
	if (!s) {
		mutex_unlock(&arena->lock);
		return -ENOENT;
	}
	old = s->state;
	held = s->nheld;
	cookie = s->cookie;
	ret = kvc_session_set_state_flags(&arena->core, id, flags, state,
					  tool_class, wait_us, tier,
					  ktime_get_ns(), &released,
					  &transition);
	if (!ret && transition) {
		kva_uncharge(arena, released);
		if (state == KVA_STATE_ENDED) {
			kvc_pressure_rearm(&arena->core, false);
			trace_kvarena_blocks(arena->id, id, KVA_TRACE_RELEASE,
					     held, released,
					     arena->core.pool.nfree);
		}
		trace_kvarena_session_state(arena->id, id, old, state,
					    tool_class, wait_us, held,
					    arena->block_size, cookie);
	}
	mutex_unlock(&arena->lock);
	if (!ret && state == KVA_STATE_ENDED) {
		ev = (struct kva_event){ .type = KVA_EVENT_SESSION_ENDED };
		ev.session_id = id;
		ev.tenant_id = arena->tenant->id;
		kva_event_post(arena, &ev, true);
	}
	return ret;
}

static int kva_session_end(struct kva_arena *arena, void __user *uarg,
			   bool nowait)
{
	struct kva_session_end arg;
	u32 usize;
	int ret;

	ret = kva_op_in(&arg, sizeof(arg), KVA_SESSION_END_SIZE_VER0, uarg,
			&usize, 0);
	if (ret)
		return ret;
	return kva_set_state(arena, arg.session_id, 0, KVA_STATE_ENDED, 0, 0,
			     0, nowait);
}

static int kva_session_set_state(struct kva_arena *arena, void __user *uarg,
				 bool nowait)
{
	struct kva_session_state arg;
	u32 usize;
	int ret;

	ret = kva_op_in(&arg, sizeof(arg), KVA_SESSION_STATE_SIZE_VER0, uarg,
			&usize, KVA_SESSION_STATE_KEEP | KVA_SESSION_STATE_TIER);
	if (ret)
		return ret;
	if (arg.state >= KVC_STATE_COUNT || arg.pad ||
	    ((arg.flags & KVA_SESSION_STATE_TIER) &&
	     usize < KVA_SESSION_STATE_SIZE_VER1))
		return -EINVAL;
	return kva_set_state(arena, arg.session_id, arg.flags, arg.state,
			     arg.tool_class, arg.expected_wait_us, arg.tier,
			     nowait);
}

static int kva_session_info(struct kva_arena *arena, void __user *uarg,
			    bool nowait)
{
	struct kva_session_info arg;
	u32 usize;
	int ret;

	ret = kva_op_in(&arg, sizeof(arg), KVA_SESSION_INFO_SIZE_VER0, uarg,
			&usize, 0);
	if (ret)
		return ret;
	if (arg.pad)
		return -EINVAL;
	ret = kva_arena_lock(arena, nowait);
	if (ret)
		return ret;
	ret = kvc_session_info(&arena->core, arg.session_id, ktime_get_ns(),
			       &arg);
	mutex_unlock(&arena->lock);
	if (ret)
		return ret;
	return kva_copy_out(uarg, &arg, sizeof(arg), usize);
}

static int kva_set_policy(struct kva_arena *arena, void __user *uarg,
			  bool nowait)
{
	struct kva_policy_set arg;
	u32 usize;
	int ret;

	ret = kva_op_in(&arg, sizeof(arg), KVA_POLICY_SET_SIZE_VER0, uarg,
			&usize, 0);
	if (ret)
		return ret;
	ret = kva_arena_lock(arena, nowait);
	if (ret)
		return ret;
	ret = kvc_policy_set(&arena->core, arg.policy, arg.low_wm,
			     arg.high_wm, arg.ttl_ms);
	mutex_unlock(&arena->lock);
	return ret;
}

/* Victims at the caller's stride: what the kernel knows, zeros past it. */
static int kva_victims_out(u8 __user *out, u32 stride,
			   const struct kva_victim *v, u32 count)
{
	size_t known = min_t(size_t, stride, sizeof(*v));
	u32 i;

	for (i = 0; i < count; i++, out += stride) {
		if (copy_to_user(out, &v[i], known) ||
		    (stride > known && clear_user(out + known, stride - known)))
			return -EFAULT;
	}
	return 0;
}

static int kva_victims(struct kva_arena *arena, void __user *uarg, bool nowait)
{
	struct kva_victim *v;
	struct kva_victims arg;
	u32 usize, policy;
	int ret;

	ret = kva_op_in(&arg, sizeof(arg), KVA_VICTIMS_SIZE_VER0, uarg,
			&usize, 0);
	if (ret)
		return ret;
	if (!arg.max || arg.max > KVA_MAX_VICTIMS ||
	    arg.victim_size < KVA_VICTIM_SIZE_VER0 ||
	    (arg.policy >= KVC_POLICY_COUNT && arg.policy != KVA_POLICY_ARENA))
		return -EINVAL;
	if (arg.victim_size > KVA_STRUCT_MAX)
		return -E2BIG;
	v = kcalloc(arg.max, sizeof(*v), GFP_KERNEL);
	if (!v)
		return -ENOMEM;
	ret = kva_arena_lock(arena, nowait);
	if (ret)
		goto out;
	policy = arg.policy == KVA_POLICY_ARENA ? arena->core.policy :
						  arg.policy;
	arg.count = kvc_rank_victims(&arena->core, policy, ktime_get_ns(), v,
				     arg.max);
	mutex_unlock(&arena->lock);
	ret = kva_victims_out(u64_to_user_ptr(arg.victims), arg.victim_size,
			      v, arg.count);
	if (ret)
		goto out;
	ret = kva_copy_out(uarg, &arg, sizeof(arg), usize);
	if (!ret)
		ret = arg.count;
out:
	kfree(v);
	return ret;
}

long kva_arena_op(struct kva_arena *arena, unsigned int cmd,
		  void __user *uarg, bool nowait)
{
	switch (cmd) {
	case KVA_IOC_ARENA_INFO:
		return kva_info(arena, uarg, nowait);
	case KVA_IOC_EXPORT_DMABUF:
		return kva_export(arena, uarg);
	case KVA_IOC_BLOCKS_ALLOC:
		return kva_blocks_alloc(arena, uarg, nowait);
	case KVA_IOC_BLOCKS_FREE:
		return kva_blocks_free(arena, uarg, false, nowait);
	case KVA_IOC_BLOCKS_SHARE:
		return kva_blocks_free(arena, uarg, true, nowait);
	case KVA_IOC_SESSION_CREATE:
		return kva_session_create(arena, uarg, nowait);
	case KVA_IOC_SESSION_END:
		return kva_session_end(arena, uarg, nowait);
	case KVA_IOC_SESSION_SET_STATE:
		return kva_session_set_state(arena, uarg, nowait);
	case KVA_IOC_SESSION_INFO:
		return kva_session_info(arena, uarg, nowait);
	case KVA_IOC_ARENA_SET_POLICY:
		return kva_set_policy(arena, uarg, nowait);
	case KVA_IOC_ARENA_VICTIMS:
		return kva_victims(arena, uarg, nowait);
	}
	return -ENOTTY;
}

long kva_arena_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	return kva_arena_op(file->private_data, cmd, (void __user *)arg, false);
}
