// SPDX-License-Identifier: GPL-2.0
/*
 * Parked KVA_URING_WAIT_EVENT commands, in the style of ublk's FETCH_REQ:
 * the owner parks a command, an event completes the oldest one (events.c),
 * and delivery copies the event to the submitter's memory from task work
 * in the submitter.  At most KVA_MAX_WAITERS are parked per arena, each
 * charged to the submitter's memory cgroup.
 *
 * A waiter has exactly one owner at a time, and only the owner frees it:
 *
 *  1. the issuing call, from kzalloc until it parks the waiter; a command
 *     answered at once (an event was queued, or -EBUSY) frees its waiter
 *     there, never having shown it to anyone;
 *  2. the arena's list, while parked (arena->waiters, under ev_lock);
 *  3. whoever takes it off the list under ev_lock: an event
 *     (kva_waiter_take), a cancel by close or by the 6.1 monitor, or
 *     io_uring's IO_URING_F_CANCEL.  The first two hand it on to task work
 *     (the pdu carries it there: written by the unparker, read only by that
 *     task work), which delivers, frees it and completes the command; the
 *     last frees it and completes the command itself.
 *
 * IO_URING_F_CANCEL may be called for any command marked cancelable, from
 * a ring being torn down, at any time until the command completes, and
 * without the lock an io-wq issue runs under: it looks its waiter up on the
 * list by command and never reads the pdu, so a command that is not parked
 * (answered at once, or already unparked) is simply not found.
 *
 * Cancellation, so that nothing hangs and nothing leaks: the submitting
 * process closing the arena fd (flush, which also runs at exit) cancels its
 * commands; io_uring cancels them itself on 6.7+ (IO_URING_F_CANCEL); on
 * older kernels monitor.c notices a dying ring or submitter instead.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "compat.h"
#include "kva.h"

struct kva_waiter {
	struct list_head node;		/* arena->waiters while parked */
	struct io_uring_cmd *cmd;
	struct kva_event __user *uev;
	u32 usize;
	pid_t tgid;
	struct kva_queued q;
};

/* The pdu: the waiter handed to task work by whoever unparked it. */
static struct kva_waiter **kva_pdu(struct io_uring_cmd *cmd)
{
	return kva_uring_cmd_pdu(cmd, struct kva_waiter *);
}

static void kva_waiter_free(struct kva_waiter *w)
{
	put_pid(w->q.pid);
	kfree(w);
}

/* Copy the event out; runs in the submitter's task. */
static int kva_deliver(struct kva_waiter *w)
{
	if (current->flags & (PF_EXITING | PF_KTHREAD))
		return -ECANCELED;
	kva_event_pid_for_current(&w->q);
	w->q.ev.size = min_t(u32, w->usize, sizeof(w->q.ev));
	if (copy_to_user(w->uev, &w->q.ev, w->q.ev.size))
		return -EFAULT;
	return w->q.ev.type;
}

static void kva_wait_deliver_tw(struct io_uring_cmd *cmd,
				unsigned int issue_flags)
{
	struct kva_waiter *w = *kva_pdu(cmd);
	int res = kva_deliver(w);

	kva_waiter_free(w);
	io_uring_cmd_done(cmd, res, 0, issue_flags);
}

static void kva_wait_cancel_tw(struct io_uring_cmd *cmd,
			       unsigned int issue_flags)
{
	kva_waiter_free(*kva_pdu(cmd));
	io_uring_cmd_done(cmd, -ECANCELED, 0, issue_flags);
}

/* Take w off the list: the caller owns it now.  Caller holds ev_lock. */
static void kva_waiter_unpark(struct kva_arena *arena, struct kva_waiter *w)
{
	list_del_init(&w->node);
	arena->nwaiters--;
}

/* Unpark w and complete it from task work with cb; ev_lock held. */
static void kva_waiter_complete(struct kva_arena *arena, struct kva_waiter *w,
				void (*cb)(struct io_uring_cmd *, unsigned int))
{
	kva_waiter_unpark(arena, w);
	*kva_pdu(w->cmd) = w;
	/* Queueing task work does not sleep. */
	io_uring_cmd_complete_in_task(w->cmd, cb);
}

bool kva_waiter_take(struct kva_arena *arena, struct kva_queued *q)
{
	struct kva_waiter *w;

	if (list_empty(&arena->waiters))
		return false;
	w = list_first_entry(&arena->waiters, struct kva_waiter, node);
	w->q = *q;
	w->q.ev.dropped = arena->ev_dropped;
	arena->ev_dropped = 0;
	kva_waiter_complete(arena, w, kva_wait_deliver_tw);
	return true;
}

/* Cancel parked commands of one process (arena fd closed by it, or exit). */
void kva_events_cancel_tgid(struct kva_arena *arena, pid_t tgid)
{
	struct kva_waiter *w, *tmp;

	spin_lock(&arena->ev_lock);
	list_for_each_entry_safe(w, tmp, &arena->waiters, node)
		if (w->tgid == tgid)
			kva_waiter_complete(arena, w, kva_wait_cancel_tw);
	spin_unlock(&arena->ev_lock);
}

#if !KVA_URING_CANCELABLE
/* Kernels without IO_URING_F_CANCEL: the monitor's check; ev_lock held. */
void kva_waiters_cancel_orphans(struct kva_arena *arena)
{
	struct kva_waiter *w, *tmp;

	list_for_each_entry_safe(w, tmp, &arena->waiters, node)
		if (kva_uring_cmd_orphaned(w->cmd))
			kva_waiter_complete(arena, w, kva_wait_cancel_tw);
}
#endif

/*
 * IO_URING_F_CANCEL: complete the command now if it is still parked.  The
 * waiter is found by command on the list, never through the pdu (see the
 * top of this file).
 */
void kva_uring_wait_cancel(struct kva_arena *arena, struct io_uring_cmd *cmd,
			   unsigned int issue_flags)
{
	struct kva_waiter *w, *found = NULL;

	spin_lock(&arena->ev_lock);
	list_for_each_entry(w, &arena->waiters, node) {
		if (w->cmd == cmd) {
			found = w;
			kva_waiter_unpark(arena, w);
			break;
		}
	}
	spin_unlock(&arena->ev_lock);
	if (found) {
		kva_waiter_free(found);
		io_uring_cmd_done(cmd, -ECANCELED, 0, issue_flags);
	}
}

/* The owner handled pressure up to ack_seq: arm it again. */
static int kva_ack(struct kva_arena *arena, u64 ack_seq, bool nowait)
{
	int ret;

	if (!ack_seq)
		return 0;
	ret = kva_arena_lock(arena, nowait);
	if (ret)
		return ret;
	spin_lock(&arena->ev_lock);
	if (ack_seq >= arena->pressure_seq)
		kvc_pressure_rearm(&arena->core, true);
	spin_unlock(&arena->ev_lock);
	mutex_unlock(&arena->lock);
	return 0;
}

/*
 * Under one hold of ev_lock, so that no event can slip into the queue
 * between the two: take the oldest queued event (1), or park w (0: the
 * list owns it from here), or refuse (-EBUSY: KVA_MAX_WAITERS parked).
 */
static int kva_pop_or_park(struct kva_arena *arena, struct kva_waiter *w)
{
	int ret = 0;

	spin_lock(&arena->ev_lock);
	if (kva_event_pop(arena, &w->q)) {
		ret = 1;
	} else if (arena->nwaiters >= KVA_MAX_WAITERS) {
		ret = -EBUSY;
	} else {
		list_add_tail(&w->node, &arena->waiters);
		arena->nwaiters++;
	}
	spin_unlock(&arena->ev_lock);
	return ret;
}

int kva_uring_wait_event(struct kva_arena *arena, struct io_uring_cmd *cmd,
			 const struct kva_uring_cmd *pdu,
			 unsigned int issue_flags)
{
	struct kva_event __user *uev = u64_to_user_ptr(pdu->arg);
	struct kva_waiter *w;
	u64 ack_seq;
	u32 usize;
	int ret;

	if (get_user(usize, &uev->size) || get_user(ack_seq, &uev->ack_seq))
		return -EFAULT;
	if (usize < KVA_EVENT_SIZE_VER0)
		return -EINVAL;
	if (usize > KVA_STRUCT_MAX)
		return -E2BIG;
	ret = kva_ack(arena, ack_seq, issue_flags & IO_URING_F_NONBLOCK);
	if (ret)
		return ret;
	w = kzalloc(sizeof(*w), GFP_KERNEL_ACCOUNT);
	if (!w)
		return -ENOMEM;
	INIT_LIST_HEAD(&w->node);
	w->cmd = cmd;
	w->uev = uev;
	w->usize = usize;
	w->tgid = task_tgid_nr(current);

#if KVA_URING_CANCELABLE
	/* Cancelable before anyone can complete it through the list. */
	io_uring_cmd_mark_cancelable(cmd, issue_flags);
#endif
	ret = kva_pop_or_park(arena, w);
	if (!ret) {
		kva_monitor_kick(arena);
		return -EIOCBQUEUED;
	}
	/* Answered at once: w was never published, so it is ours to free. */
	if (ret > 0)
		ret = kva_deliver(w);
	kva_waiter_free(w);
#if KVA_URING_CANCELABLE
	io_uring_cmd_done(cmd, ret, 0, issue_flags);
	return -EIOCBQUEUED;
#else
	return ret;
#endif
}
