/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kvarena.ko internals shared between its files: the arena object, the
 * tenant accounts, module-wide limits and counters.
 */
#ifndef KVA_H
#define KVA_H

#include <linux/bits.h>
#include <linux/kref.h>
#include <linux/dma-buf.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/spinlock.h>
#include <linux/workqueue.h>
#include <linux/types.h>
#include <uapi/linux/kvarena.h>

#include "core/kvc_arena.h"

struct io_uring_cmd;

#define KVA_PAGE_ORDER	(KVA_PAGE_SHIFT - PAGE_SHIFT)
#define KVA_PAGES_PER_HUGE	BIT(KVA_PAGE_ORDER)

/* A tenant's account (tenant.c). */
struct kva_tenant_acct {
	u32 id;
	u32 arenas;
	u32 refs;			/* arenas and callers holding it */
	bool explicit;			/* quotas set by an administrator */
	u64 quota_bytes;		/* blocks held; 0 = unlimited */
	u64 used_bytes;
	u64 arena_quota_bytes;		/* 0 = tenant_default_mb */
	u64 arena_bytes;
};

/*
 * One arena.  Two lifetimes: the bookkeeping (core, sessions) lives while
 * the arena fd is open; the memory and this struct live until the dma-buf,
 * which the arena fd holds one reference to, is released, and until no one
 * who walks the arena list (stats, netlink) holds a reference (ref).  Its
 * 2 MiB pages stay charged to the pinned cap until they are really free:
 * a page someone else still references (a pipe, a GUP pin) lingers.
 */
struct kva_arena {
	struct kref ref;		/* the dma-buf's, and list walkers' */
	struct mutex lock;		/* core and fd_open */
	struct kvc_arena core;
	bool fd_open;

	u32 id;
	char name[KVA_NAME_LEN];
	struct kva_tenant_acct *tenant;	/* held while any page is charged */
	struct user_struct *memlock;	/* RLIMIT_MEMLOCK payer, or NULL */
	int numa_node;
	u64 created_ns;

	u64 bytes;
	bool charged;			/* tenant, pinned cap, memlock: pages.c */
	u32 npages;			/* 2 MiB compound pages */
	struct page **pages;
	u32 block_size;
	u32 blocks_per_page;

	struct dma_buf *dmabuf;
	struct dma_buf *ro_dmabuf;	/* KVA_EXPORT_RDONLY's, held by the file */

	struct mutex att_lock;		/* attachments, dev_maps, vmap */
	struct list_head attachments;
	struct list_head dev_maps;	/* one DMA mapping per device */
	u32 nattached;
	u32 nmapped;
	u32 ndev_maps;
	u32 nro_maps;			/* of them, DMA_TO_DEVICE (read-only) */
	u64 maps_total;
	void *vaddr;
	unsigned int vmap_count;

	struct list_head node;		/* kva_arenas, then kva_lingering */

	/* events.c: queued events; waiters.c: parked WAIT_EVENT commands */
	spinlock_t ev_lock;
	struct kva_queued *ev_queue;	/* ring of KVA_EVENT_QUEUE */
	u32 ev_head;
	u32 ev_count;
	u64 ev_seq;
	u64 ev_dropped;			/* since the last event delivered */
	u64 events_posted;
	u64 events_dropped;
	u64 pressure_seq;		/* last PRESSURE posted */
	u64 nl_tokens;			/* multicast budget (events.c) */
	u64 nl_refill_ns;
	u64 nl_dropped;			/* not multicast since the last one */
	struct list_head waiters;
	u32 nwaiters;			/* at most KVA_MAX_WAITERS */
	struct delayed_work monitor;	/* monitor.c: kernels without cancel */
	atomic64_t uring_eagain;
};

/* main.c: limits and module-wide state */
extern unsigned int kva_max_sessions;
extern struct mutex kva_arenas_lock;
extern struct list_head kva_arenas;
extern atomic64_t kva_pinned_bytes;
extern atomic64_t kva_arenas_created;
u64 kva_max_pinned_bytes(void);
u64 kva_max_arena_bytes(void);

/* uaccess.c: versioned structs */
int kva_copy_in(void *kstruct, size_t ksize, size_t ver0,
		void __user *uarg, u32 *usize);
int kva_copy_out(void __user *uarg, const void *kstruct, size_t ksize,
		 u32 usize);

/* arena.c */
long kva_arena_create_ioctl(struct file *dev, void __user *uarg);
int kva_arena_mmap(struct kva_arena *arena, struct vm_area_struct *vma);
/* The dma-buf lets go: the arena leaves the list, its memory goes. */
void kva_arena_free(struct kva_arena *arena);
/*
 * Walk the live arenas without holding kva_arenas_lock across anything
 * that sleeps: the first listed arena with id >= min_id (or exactly id),
 * referenced; drop it with kva_arena_put().  Its bookkeeping may be gone
 * (fd_open false) but its struct stays valid while referenced.
 */
struct kva_arena *kva_arena_get_next(u32 min_id);
struct kva_arena *kva_arena_get_id(u32 id);
void kva_arena_put(struct kva_arena *arena);
void kva_arenas_exit(void);

/* arena_ops.c */
long kva_arena_ioctl(struct file *file, unsigned int cmd, unsigned long arg);

/* arena_ops.c: the ops shared by ioctl and io_uring (nowait: -EAGAIN
 * instead of sleeping on the arena lock).
 */
long kva_arena_op(struct kva_arena *arena, unsigned int cmd,
		  void __user *uarg, bool nowait);
int kva_arena_lock(struct kva_arena *arena, bool nowait);

/*
 * An event on its way: the UAPI struct and, for SESSION_ENDED, the process
 * that ended the session, so that its pid is given as the receiver's pid
 * namespace sees it.
 */
struct kva_queued {
	struct kva_event ev;
	struct pid *pid;		/* referenced, or NULL */
};

/* events.c: the event queue */
int kva_events_init(struct kva_arena *arena);
void kva_events_destroy(struct kva_arena *arena);
/* Post ev (with the calling process as its pid if with_pid). */
void kva_event_post(struct kva_arena *arena, struct kva_event *ev,
		    bool with_pid);
/* Take the oldest queued event into q; caller holds ev_lock. */
bool kva_event_pop(struct kva_arena *arena, struct kva_queued *q);
/* Fill q->ev.pid for the current task's pid namespace; drops q->pid. */
void kva_event_pid_for_current(struct kva_queued *q);

/* waiters.c: parked KVA_URING_WAIT_EVENT commands */
struct kva_waiter;
/* Hand q to the oldest parked command, if any; caller holds ev_lock. */
bool kva_waiter_take(struct kva_arena *arena, struct kva_queued *q);
void kva_events_cancel_tgid(struct kva_arena *arena, pid_t tgid);
int kva_uring_wait_event(struct kva_arena *arena, struct io_uring_cmd *cmd,
			 const struct kva_uring_cmd *pdu,
			 unsigned int issue_flags);
void kva_uring_wait_cancel(struct kva_arena *arena, struct io_uring_cmd *cmd,
			   unsigned int issue_flags);

/* monitor.c: kernels before 6.7 cannot cancel parked commands themselves */
void kva_monitor_init(struct kva_arena *arena);
void kva_monitor_kick(struct kva_arena *arena);
void kva_monitor_stop(struct kva_arena *arena);
/* waiters.c, for the monitor: cancel commands whose ring or task dies. */
void kva_waiters_cancel_orphans(struct kva_arena *arena);

/* uring.c */
int kva_arena_uring_cmd(struct io_uring_cmd *cmd, unsigned int issue_flags);

/* netlink.c */
int kva_netlink_init(void);
void kva_netlink_exit(void);
/* Multicast ev; dropped: the arena's events not multicast since the last. */
void kva_netlink_event(const struct kva_event *ev, u64 dropped);
void kva_netlink_arena(const struct kva_arena *arena, bool created);

/* dmabuf.c */
struct dma_buf *kva_dmabuf_export(struct kva_arena *arena);
/* The arena's one read-only dma-buf (made on first use), referenced. */
struct dma_buf *kva_dmabuf_rdonly(struct kva_arena *arena);
void kva_dmabuf_rdonly_put(struct kva_arena *arena);

/* tenant.c */
void kva_tenants_init(u64 max_pinned_mb);
/* The tenant a create names (KVA_TENANT_SELF: the opener's), held. */
struct kva_tenant_acct *kva_tenant_for_caller(const struct file *dev,
					      u32 requested);
void kva_tenant_put(struct kva_tenant_acct *t);
/*
 * An arena's bytes: charged at create (-EDQUOT, holding t), uncharged page
 * by page as each is really free, released when the last one is.
 */
int kva_tenant_arena_charge(struct kva_tenant_acct *t, u64 bytes);
void kva_tenant_arena_uncharge(struct kva_tenant_acct *t, u64 bytes);
void kva_tenant_arena_release(struct kva_tenant_acct *t);
u32 kva_tenant_reserve(struct kva_tenant_acct *t, u32 blocks, u32 block_size);
void kva_tenant_uncharge(struct kva_tenant_acct *t, u32 blocks,
			 u32 block_size);
long kva_tenant_ioctl(const struct file *dev, unsigned int cmd,
		      void __user *uarg);
unsigned int kva_tenants_count(void);
void kva_tenants_destroy(void);
void kva_tenants_show(struct seq_file *m);

/* pages.c */
/*
 * Charge an arena's bytes to its tenant (-EDQUOT), the module's pinned cap
 * (-ENOSPC) and, without CAP_IPC_LOCK, the caller's RLIMIT_MEMLOCK
 * (-ENOMEM): all or none, lingering pages reaped first if they are in the
 * way.  Sets arena->charged; pages.c uncharges each page as it is freed.
 */
int kva_arena_charge(struct kva_arena *arena, struct kva_tenant_acct *t);
int kva_pages_alloc(struct kva_arena *arena);
/* true: the arena now lingers (pages.c frees it once its pages are free) */
bool kva_pages_release(struct kva_arena *arena);
/* Free lingering pages nobody references now; true if any went. */
bool kva_linger_reap(void);
u64 kva_lingering_bytes(void);
void kva_pages_exit(void);

/* stats.c */
extern const struct attribute_group *kva_attr_groups[];
void kva_debugfs_init(void);
void kva_debugfs_exit(void);

#endif /* KVA_H */
