// SPDX-License-Identifier: GPL-2.0
/*
 * Arena events and the parked KVA_URING_WAIT_EVENT commands that deliver
 * them, in the style of ublk's FETCH_REQ: the owner parks a command; an
 * event completes the oldest parked one, or waits in a bounded queue for
 * the next (overflow is counted and reported).  Delivery copies the event
 * to the submitter's memory from task work in the submitter.
 *
 * Cancellation, so that nothing hangs and nothing leaks: the submitting
 * process closing the arena fd (flush, which also runs at exit) cancels its
 * commands; io_uring cancels them itself on 6.7+ (IO_URING_F_CANCEL); on
 * older kernels a monitor notices a dying ring or submitter instead.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/timekeeping.h>
#include <linux/uaccess.h>

#include "compat.h"
#include "kva.h"

#define KVA_MONITOR_PERIOD	(HZ / 20)

struct kva_waiter {
	struct list_head node;
	struct io_uring_cmd *cmd;
	struct kva_event __user *uev;
	u32 usize;
	pid_t tgid;
	struct kva_event ev;
};

static struct kva_waiter **kva_pdu(struct io_uring_cmd *cmd)
{
	BUILD_BUG_ON(sizeof(struct kva_waiter *) > sizeof(cmd->pdu));
	return (struct kva_waiter **)cmd->pdu;
}

static void kva_monitor_fn(struct work_struct *work);

int kva_events_init(struct kva_arena *arena)
{
	spin_lock_init(&arena->ev_lock);
	INIT_LIST_HEAD(&arena->waiters);
	INIT_DELAYED_WORK(&arena->monitor, kva_monitor_fn);
	atomic64_set(&arena->uring_eagain, 0);
	arena->ev_queue = kcalloc(KVA_EVENT_QUEUE, sizeof(*arena->ev_queue),
				  GFP_KERNEL_ACCOUNT);
	return arena->ev_queue ? 0 : -ENOMEM;
}

void kva_events_destroy(struct kva_arena *arena)
{
	cancel_delayed_work_sync(&arena->monitor);
	kfree(arena->ev_queue);
	arena->ev_queue = NULL;
}

/* Copy the event out and complete; runs in the submitter's task. */
static int kva_deliver(struct kva_waiter *w)
{
	if (current->flags & (PF_EXITING | PF_KTHREAD))
		return -ECANCELED;
	w->ev.size = min_t(u32, w->usize, sizeof(w->ev));
	if (copy_to_user(w->uev, &w->ev, w->ev.size))
		return -EFAULT;
	return w->ev.type;
}

static void kva_wait_deliver_tw(struct io_uring_cmd *cmd,
				unsigned int issue_flags)
{
	struct kva_waiter *w = *kva_pdu(cmd);
	int res = kva_deliver(w);

	kfree(w);
	io_uring_cmd_done(cmd, res, 0, issue_flags);
}

static void kva_wait_cancel_tw(struct io_uring_cmd *cmd,
			       unsigned int issue_flags)
{
	kfree(*kva_pdu(cmd));
	io_uring_cmd_done(cmd, -ECANCELED, 0, issue_flags);
}

/* Take the oldest queued event into w; caller holds ev_lock. */
static bool kva_event_pop(struct kva_arena *arena, struct kva_waiter *w)
{
	if (!arena->ev_count)
		return false;
	w->ev = arena->ev_queue[arena->ev_head];
	w->ev.dropped = arena->ev_dropped;
	arena->ev_dropped = 0;
	arena->ev_head = (arena->ev_head + 1) % KVA_EVENT_QUEUE;
	arena->ev_count--;
	return true;
}

void kva_event_post(struct kva_arena *arena, struct kva_event *ev)
{
	struct kva_waiter *w = NULL;

	ev->time_ns = ktime_get_ns();
	ev->arena_id = arena->id;
	spin_lock(&arena->ev_lock);
	ev->seq = ++arena->ev_seq;
	if (ev->type == KVA_EVENT_PRESSURE)
		arena->pressure_seq = ev->seq;
	arena->events_posted++;
	if (!list_empty(&arena->waiters)) {
		w = list_first_entry(&arena->waiters, struct kva_waiter, node);
		list_del_init(&w->node);
		w->ev = *ev;
		w->ev.dropped = arena->ev_dropped;
		arena->ev_dropped = 0;
	} else if (arena->ev_count < KVA_EVENT_QUEUE) {
		arena->ev_queue[(arena->ev_head + arena->ev_count) %
				KVA_EVENT_QUEUE] = *ev;
		arena->ev_count++;
	} else {
		arena->ev_dropped++;
		arena->events_dropped++;
	}
	spin_unlock(&arena->ev_lock);
	if (w)
		io_uring_cmd_complete_in_task(w->cmd, kva_wait_deliver_tw);
	kva_netlink_event(ev);
}

/*
 * Unpark w and have it completed with -ECANCELED.  Under ev_lock, so that
 * w->node is empty by the time anyone else (IO_URING_F_CANCEL) looks;
 * queueing task work does not sleep.
 */
static void kva_waiter_cancel(struct kva_waiter *w)
{
	list_del_init(&w->node);
	io_uring_cmd_complete_in_task(w->cmd, kva_wait_cancel_tw);
}

/* Cancel parked commands of one process (arena fd closed by it, or exit). */
void kva_events_cancel_tgid(struct kva_arena *arena, pid_t tgid)
{
	struct kva_waiter *w, *tmp;

	spin_lock(&arena->ev_lock);
	list_for_each_entry_safe(w, tmp, &arena->waiters, node)
		if (w->tgid == tgid)
			kva_waiter_cancel(w);
	spin_unlock(&arena->ev_lock);
}

#if !KVA_URING_CANCELABLE
/* Without IO_URING_F_CANCEL: is the command's ring or submitter going away? */
static bool kva_cmd_orphaned(struct io_uring_cmd *cmd)
{
	struct io_kiocb *req = cmd_to_io_kiocb(cmd);

	return percpu_ref_is_dying(&req->ctx->refs) ||
	       (req->task->flags & PF_EXITING);
}

static void kva_monitor_fn(struct work_struct *work)
{
	struct kva_arena *arena = container_of(to_delayed_work(work),
					       struct kva_arena, monitor);
	struct kva_waiter *w, *tmp;
	bool again;

	spin_lock(&arena->ev_lock);
	list_for_each_entry_safe(w, tmp, &arena->waiters, node)
		if (kva_cmd_orphaned(w->cmd))
			kva_waiter_cancel(w);
	again = !list_empty(&arena->waiters);
	spin_unlock(&arena->ev_lock);
	if (again)
		schedule_delayed_work(&arena->monitor, KVA_MONITOR_PERIOD);
}
#else
static void kva_monitor_fn(struct work_struct *work)
{
}
#endif

/* IO_URING_F_CANCEL: complete the command now if it is still parked. */
void kva_uring_wait_cancel(struct kva_arena *arena, struct io_uring_cmd *cmd,
			   unsigned int issue_flags)
{
	struct kva_waiter *w = *kva_pdu(cmd);
	bool parked;

	spin_lock(&arena->ev_lock);
	parked = !list_empty(&w->node);
	if (parked)
		list_del_init(&w->node);
	spin_unlock(&arena->ev_lock);
	if (parked) {
		kfree(w);
		io_uring_cmd_done(cmd, -ECANCELED, 0, issue_flags);
	}
}

int kva_uring_wait_event(struct kva_arena *arena, struct io_uring_cmd *cmd,
			 const struct kva_uring_cmd *pdu,
			 unsigned int issue_flags)
{
	struct kva_event __user *uev = u64_to_user_ptr(pdu->arg);
	struct kva_waiter *w;
	u32 usize;
	int ret;

	if (get_user(usize, &uev->size))
		return -EFAULT;
	if (usize < KVA_EVENT_SIZE_VER0)
		return -EINVAL;
	if (usize > KVA_STRUCT_MAX)
		return -E2BIG;
	if (pdu->ack_seq) {
		/* The owner handled pressure up to ack_seq: arm it again. */
		ret = kva_arena_lock(arena, issue_flags & IO_URING_F_NONBLOCK);
		if (ret)
			return ret;
		spin_lock(&arena->ev_lock);
		if (pdu->ack_seq >= arena->pressure_seq)
			kvc_pressure_rearm(&arena->core, true);
		spin_unlock(&arena->ev_lock);
		mutex_unlock(&arena->lock);
	}
	w = kzalloc(sizeof(*w), GFP_KERNEL);
	if (!w)
		return -ENOMEM;
	INIT_LIST_HEAD(&w->node);
	w->cmd = cmd;
	w->uev = uev;
	w->usize = usize;
	w->tgid = task_tgid_nr(current);
	*kva_pdu(cmd) = w;

	spin_lock(&arena->ev_lock);
	if (kva_event_pop(arena, w)) {
		spin_unlock(&arena->ev_lock);
		ret = kva_deliver(w);
		kfree(w);
		return ret;
	}
#if KVA_URING_CANCELABLE
	spin_unlock(&arena->ev_lock);
	/* Cancelable before anyone can complete it through the list. */
	io_uring_cmd_mark_cancelable(cmd, issue_flags);
	spin_lock(&arena->ev_lock);
	if (kva_event_pop(arena, w)) {		/* one arrived meanwhile */
		spin_unlock(&arena->ev_lock);
		ret = kva_deliver(w);
		kfree(w);
		io_uring_cmd_done(cmd, ret, 0, issue_flags);
		return -EIOCBQUEUED;
	}
#endif
	list_add_tail(&w->node, &arena->waiters);
	spin_unlock(&arena->ev_lock);
#if !KVA_URING_CANCELABLE
	schedule_delayed_work(&arena->monitor, KVA_MONITOR_PERIOD);
#endif
	return -EIOCBQUEUED;
}
