// SPDX-License-Identifier: GPL-2.0
/*
 * Kernels before 6.7 cannot cancel a parked io_uring command themselves
 * (no IO_URING_F_CANCEL): while an arena has parked KVA_URING_WAIT_EVENT
 * commands, a periodic check cancels those whose ring or submitter is
 * going away, so that nothing hangs and nothing leaks.  On 6.7+ this is
 * empty.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/sched.h>
#include <linux/workqueue.h>

#include "compat.h"
#include "kva.h"

#define KVA_MONITOR_PERIOD	(HZ / 20)

#if !KVA_URING_CANCELABLE
static void kva_monitor_fn(struct work_struct *work)
{
	struct kva_arena *arena = container_of(to_delayed_work(work),
					       struct kva_arena, monitor);
	bool again;

	spin_lock(&arena->ev_lock);
	kva_waiters_cancel_orphans(arena);
	again = !list_empty(&arena->waiters);
	spin_unlock(&arena->ev_lock);
	if (again)
		schedule_delayed_work(&arena->monitor, KVA_MONITOR_PERIOD);
}

void kva_monitor_init(struct kva_arena *arena)
{
	INIT_DELAYED_WORK(&arena->monitor, kva_monitor_fn);
}

void kva_monitor_kick(struct kva_arena *arena)
{
	schedule_delayed_work(&arena->monitor, KVA_MONITOR_PERIOD);
}

void kva_monitor_stop(struct kva_arena *arena)
{
	cancel_delayed_work_sync(&arena->monitor);
}
#else
void kva_monitor_init(struct kva_arena *arena)
{
}

void kva_monitor_kick(struct kva_arena *arena)
{
}

void kva_monitor_stop(struct kva_arena *arena)
{
}
#endif
