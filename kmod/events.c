// SPDX-License-Identifier: GPL-2.0
/*
 * An arena's events (pressure, quota, session ended): numbered per arena,
 * handed to the oldest parked KVA_URING_WAIT_EVENT command (waiters.c) or
 * kept in a bounded queue for the next one (overflow is counted and
 * reported), and multicast to netlink listeners.  A SESSION_ENDED event
 * carries a reference to the process that ended the session, turned into
 * a pid only where it is delivered: as the receiver's pid namespace sees
 * it, or 0 if that namespace cannot see the process.
 *
 * Any arena owner can post events as fast as it can end sessions, so the
 * multicast is rate-limited per arena (nl_events_per_sec): the owner's own
 * WAIT_EVENT still gets every event, netlink listeners get at most that
 * many a second from one arena, and the next event that is sent says how
 * many were not (KVA_NL_A_DROPPED), so a listener knows to resync.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/moduleparam.h>
#include <linux/pid.h>
#include <linux/pid_namespace.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/timekeeping.h>

#include "kva.h"

static unsigned int nl_events_per_sec = 100;
module_param(nl_events_per_sec, uint, 0644);
MODULE_PARM_DESC(nl_events_per_sec, "Most events one arena multicasts to netlink listeners per second, in bursts of as many (0: no limit; default 100)");

/*
 * A token bucket of a second's worth of events, refilled as time passes;
 * false if the event must not be multicast.  Caller holds ev_lock.
 */
static bool kva_nl_budget(struct kva_arena *arena, u64 now)
{
	u32 rate = READ_ONCE(nl_events_per_sec);
	u64 earned;

	if (!rate)
		return true;
	earned = div_u64(min_t(u64, now - arena->nl_refill_ns, NSEC_PER_SEC) *
			 rate, NSEC_PER_SEC);
	if (earned) {
		arena->nl_tokens = min_t(u64, arena->nl_tokens + earned, rate);
		arena->nl_refill_ns = now;
	}
	if (!arena->nl_tokens)
		return false;
	arena->nl_tokens--;
	return true;
}

int kva_events_init(struct kva_arena *arena)
{
	spin_lock_init(&arena->ev_lock);
	INIT_LIST_HEAD(&arena->waiters);
	kva_monitor_init(arena);
	atomic64_set(&arena->uring_eagain, 0);
	arena->ev_queue = kcalloc(KVA_EVENT_QUEUE, sizeof(*arena->ev_queue),
				  GFP_KERNEL_ACCOUNT);
	return arena->ev_queue ? 0 : -ENOMEM;
}

void kva_events_destroy(struct kva_arena *arena)
{
	kva_monitor_stop(arena);
	if (arena->ev_queue) {
		while (arena->ev_count) {
			put_pid(arena->ev_queue[arena->ev_head].pid);
			arena->ev_head = (arena->ev_head + 1) % KVA_EVENT_QUEUE;
			arena->ev_count--;
		}
	}
	kfree(arena->ev_queue);
	arena->ev_queue = NULL;
}

bool kva_event_pop(struct kva_arena *arena, struct kva_queued *q)
{
	if (!arena->ev_count)
		return false;
	*q = arena->ev_queue[arena->ev_head];
	q->ev.dropped = arena->ev_dropped;
	arena->ev_dropped = 0;
	arena->ev_head = (arena->ev_head + 1) % KVA_EVENT_QUEUE;
	arena->ev_count--;
	return true;
}

void kva_event_pid_for_current(struct kva_queued *q)
{
	q->ev.pid = q->pid ? pid_nr_ns(q->pid, task_active_pid_ns(current)) : 0;
	put_pid(q->pid);
	q->pid = NULL;
}

void kva_event_post(struct kva_arena *arena, struct kva_event *ev,
		    bool with_pid)
{
	struct kva_queued q = { .pid = NULL };
	struct pid *pid = with_pid ? get_task_pid(current, PIDTYPE_TGID) : NULL;
	u64 nl_dropped = 0;
	bool multicast;

	ev->time_ns = ktime_get_ns();
	ev->arena_id = arena->id;
	/* Netlink listeners are in the initial namespaces (netlink.c). */
	ev->pid = pid ? pid_nr(pid) : 0;
	spin_lock(&arena->ev_lock);
	ev->seq = ++arena->ev_seq;
	if (ev->type == KVA_EVENT_PRESSURE)
		arena->pressure_seq = ev->seq;
	arena->events_posted++;
	q.ev = *ev;
	q.pid = get_pid(pid);
	if (kva_waiter_take(arena, &q)) {
		q.pid = NULL;		/* the waiter has it */
	} else if (arena->ev_count < KVA_EVENT_QUEUE) {
		arena->ev_queue[(arena->ev_head + arena->ev_count) %
				KVA_EVENT_QUEUE] = q;
		arena->ev_count++;
		q.pid = NULL;
	} else {
		arena->ev_dropped++;
		arena->events_dropped++;
	}
	multicast = kva_nl_budget(arena, ev->time_ns);
	if (multicast) {
		nl_dropped = arena->nl_dropped;
		arena->nl_dropped = 0;
	} else {
		arena->nl_dropped++;
	}
	spin_unlock(&arena->ev_lock);
	put_pid(q.pid);
	if (multicast)
		kva_netlink_event(ev, nl_dropped);
	put_pid(pid);
}
