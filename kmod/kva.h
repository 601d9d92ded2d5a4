/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kvarena.ko internals shared between its files: the arena object, the
 * tenant accounts, module-wide limits and counters.
 */
#ifndef KVA_H
#define KVA_H

#include <linux/bits.h>
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

/* A tenant's KV quota; entries live until the module unloads. */
struct kva_tenant_acct {
	u32 id;
	u32 arenas;
	u64 quota_bytes;		/* 0 = unlimited */
	u64 used_bytes;
};

/*
 * One arena.  Two lifetimes: the bookkeeping (core, sessions) lives while
 * the arena fd is open; the memory and this struct live until the dma-buf,
 * which the arena fd holds one reference to, is released.
 */
struct kva_arena {
	struct mutex lock;		/* core and fd_open */
	struct kvc_arena core;
	bool fd_open;

	u32 id;
	char name[KVA_NAME_LEN];
	struct kva_tenant_acct *tenant;
	int numa_node;
	u64 created_ns;

	u64 bytes;
	u32 npages;			/* 2 MiB compound pages */
	struct page **pages;
	u32 block_size;
	u32 blocks_per_page;

	struct dma_buf *dmabuf;

	struct mutex att_lock;		/* attachments, dev_maps, vmap */
	struct list_head attachments;
	struct list_head dev_maps;	/* one DMA mapping per device */
	u32 nattached;
	u32 nmapped;
	u32 ndev_maps;
	u64 maps_total;
	void *vaddr;
	unsigned int vmap_count;

	struct list_head node;		/* kva_arenas */

	/* events.c: queued events and parked KVA_URING_WAIT_EVENT commands */
	spinlock_t ev_lock;
	struct kva_event *ev_queue;	/* ring of KVA_EVENT_QUEUE */
	u32 ev_head;
	u32 ev_count;
	u64 ev_seq;
	u64 ev_dropped;			/* since the last event delivered */
	u64 events_posted;
	u64 events_dropped;
	u64 pressure_seq;		/* last PRESSURE posted */
	struct list_head waiters;
	struct delayed_work monitor;	/* kernels without uring cancel */
	atomic64_t uring_eagain;
};

/* main.c: limits and module-wide state */
extern unsigned int kva_max_sessions;
extern struct mutex kva_arenas_lock;
extern struct list_head kva_arenas;
extern atomic64_t kva_pinned_bytes;
extern atomic64_t kva_arenas_created;
extern struct device *kva_device;
u64 kva_max_pinned_bytes(void);
u64 kva_max_arena_bytes(void);

/* uaccess.c: versioned structs */
int kva_copy_in(void *kstruct, size_t ksize, size_t ver0,
		void __user *uarg, u32 *usize);
int kva_copy_out(void __user *uarg, const void *kstruct, size_t ksize,
		 u32 usize);

/* arena.c */
long kva_arena_create_ioctl(void __user *uarg);
int kva_arena_mmap(struct kva_arena *arena, struct vm_area_struct *vma);
void kva_arena_free(struct kva_arena *arena);

/* arena_ops.c */
long kva_arena_ioctl(struct file *file, unsigned int cmd, unsigned long arg);

/* arena_ops.c: the ops shared by ioctl and io_uring (nowait: -EAGAIN
 * instead of sleeping on the arena lock).
 */
long kva_arena_op(struct kva_arena *arena, unsigned int nr,
		  void __user *uarg, bool nowait);
int kva_arena_lock(struct kva_arena *arena, bool nowait);

/* events.c */
int kva_events_init(struct kva_arena *arena);
void kva_events_destroy(struct kva_arena *arena);
void kva_event_post(struct kva_arena *arena, struct kva_event *ev);
void kva_events_cancel_tgid(struct kva_arena *arena, pid_t tgid);
int kva_uring_wait_event(struct kva_arena *arena, struct io_uring_cmd *cmd,
			 const struct kva_uring_cmd *pdu,
			 unsigned int issue_flags);
void kva_uring_wait_cancel(struct kva_arena *arena, struct io_uring_cmd *cmd,
			   unsigned int issue_flags);

/* uring.c */
int kva_arena_uring_cmd(struct io_uring_cmd *cmd, unsigned int issue_flags);

/* netlink.c */
int kva_netlink_init(void);
void kva_netlink_exit(void);
void kva_netlink_event(const struct kva_event *ev);
void kva_netlink_arena(const struct kva_arena *arena, bool created);

/* dmabuf.c */
struct dma_buf *kva_dmabuf_export(struct kva_arena *arena);

/* tenant.c */
struct kva_tenant_acct *kva_tenant_get(u32 id);
u32 kva_tenant_reserve(struct kva_tenant_acct *t, u32 blocks, u32 block_size);
void kva_tenant_uncharge(struct kva_tenant_acct *t, u32 blocks,
			 u32 block_size);
void kva_tenant_arena_add(struct kva_tenant_acct *t, int delta);
long kva_tenant_ioctl(unsigned int cmd, void __user *uarg);
void kva_tenants_destroy(void);
void kva_tenants_show(struct seq_file *m);

/* stats.c */
extern const struct attribute_group *kva_attr_groups[];
void kva_debugfs_init(void);
void kva_debugfs_exit(void);

#endif /* KVA_H */
