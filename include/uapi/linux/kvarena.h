/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * kvarena: kernel-managed KV-cache arenas for staged LLM inference.
 *
 * The one UAPI header: ioctls on /dev/kvarena and on arena fds.
 *
 * Objects are file descriptors (as in KVM):
 *   /dev/kvarena  --KVA_IOC_ARENA_CREATE-->  arena fd
 *   arena fd      --KVA_IOC_EXPORT_DMABUF--> dma-buf fd (the arena's memory)
 * Closing the last reference to an object frees it.  An arena's memory lives
 * while the arena fd or any dma-buf reference, mapping or importer
 * attachment exists.
 *
 * Every argument struct starts with `size` (the caller's sizeof) and is read
 * with copy_struct_from_user() semantics: a shorter struct from an older
 * caller is zero-extended, a longer one from a newer caller is accepted only
 * if the bytes the kernel does not know are zero (else -E2BIG).  A size below
 * the struct's first published version is -EINVAL; above KVA_STRUCT_MAX is
 * -E2BIG.  Commands are _IO(KVA_IOC_MAGIC, nr), matched exactly (as VFIO
 * does with its argsz): the command never encodes a size, so a struct can
 * grow without a new command, strace and seccomp see one number per
 * command, and `size` is the only length.  Every ioctl may also fail with
 * EFAULT (unreadable or unwritable memory) and ENOTTY (a command this fd
 * does not take, or any other number).  Output fields are written back up to the
 * caller's `size`; their values on input are ignored.  Every `flags` bit
 * not defined is rejected with -EINVAL, as is every nonzero `pad` field.
 */
#ifndef _UAPI_LINUX_KVARENA_H
#define _UAPI_LINUX_KVARENA_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define KVA_DEVICE_NAME		"kvarena"
#define KVA_API_VERSION		1

/* Feature bits returned by KVA_IOC_VERSION. */
#define KVA_FEAT_DMABUF		(1ULL << 0)	/* KVA_IOC_EXPORT_DMABUF */
#define KVA_FEAT_MMAP		(1ULL << 1)	/* mmap() of arena and dma-buf fds */
#define KVA_FEAT_SESSIONS	(1ULL << 2)	/* session ioctls and states */
#define KVA_FEAT_BLOCK_SHARE	(1ULL << 3)	/* KVA_IOC_BLOCKS_SHARE */
#define KVA_FEAT_TENANT_QUOTA	(1ULL << 4)	/* KVA_IOC_TENANT_* */
#define KVA_FEAT_NUMA		(1ULL << 5)	/* arena placement by node */
#define KVA_FEAT_TRACEPOINTS	(1ULL << 6)	/* events under kvarena: */
#define KVA_FEAT_URING_CMD	(1ULL << 7)	/* IORING_OP_URING_CMD ops */
#define KVA_FEAT_EVENTS		(1ULL << 8)	/* KVA_URING_WAIT_EVENT */
#define KVA_FEAT_EVICTION	(1ULL << 9)	/* policies, watermarks, victims */
#define KVA_FEAT_NETLINK	(1ULL << 10)	/* generic netlink "kvarena" */
#define KVA_FEAT_SESSION_UPDATE	(1ULL << 11)	/* SET_STATE's KEEP and TIER */

/* Limits. */
#define KVA_PAGE_SHIFT		21		/* arenas are made of 2 MiB pages */
#define KVA_PAGE_SIZE		(1ULL << KVA_PAGE_SHIFT)
#define KVA_BLOCK_MIN		4096U		/* block size: 4 KiB multiple... */
#define KVA_BLOCK_MAX		(1U << KVA_PAGE_SHIFT)	/* ...up to 2 MiB */
#define KVA_MAX_BATCH		1024U		/* block ids per call */
#define KVA_NAME_LEN		32		/* arena name incl. NUL */
#define KVA_STRUCT_MAX		4096U		/* largest accepted `size` */
#define KVA_NUMA_ANY		(-1)

/* Session states.  A new session starts IDLE; ENDED is terminal. */
enum kva_state {
	KVA_STATE_IDLE		= 0,	/* parked, no work queued */
	KVA_STATE_PREFILL	= 1,	/* prompt being processed */
	KVA_STATE_DECODE	= 2,	/* tokens being generated */
	KVA_STATE_TOOL_WAIT	= 3,	/* agent waits on a tool call */
	KVA_STATE_ENDED		= 4,	/* blocks released, id retired */
};

/* Room for states in kva_session_info.state_ns: future states fit. */
#define KVA_STATE_SLOTS		8

/*
 * Eviction policies: how an arena ranks victim sessions when free blocks
 * run low.  The kernel only ranks and tells; the owner spills and frees.
 *  TOOLWAIT: by the time until the KV is expected to be used again x
 *            blocks held: the expected wait left in TOOL_WAIT; past it,
 *            and in IDLE, the time the pause has lasted.  Never
 *            PREFILL/DECODE.
 *  LRU:      IDLE and TOOL_WAIT sessions by time since last activity.
 *  TTL:      as LRU, but only sessions inactive for at least ttl_ms.
 * Sessions holding no blocks are never victims; ties go to the lower id.
 */
enum kva_policy {
	KVA_POLICY_TOOLWAIT	= 0,
	KVA_POLICY_LRU		= 1,
	KVA_POLICY_TTL		= 2,
};

#define KVA_TTL_DEFAULT_MS	30000U

/*
 * KVA_IOC_VERSION (/dev/kvarena): query the API version, features and caps.
 * in:  size
 * out: everything else
 */
struct kva_version {
	__u32 size;
	__u32 api_version;
	__u64 features;			/* KVA_FEAT_* */
	__u64 max_pinned_bytes;		/* module cap on all arenas together */
	__u64 max_arena_bytes;		/* module cap per arena */
	__u64 pinned_bytes;		/* pinned by live arenas now */
	__u32 page_size;		/* KVA_PAGE_SIZE */
	__u32 max_batch;		/* KVA_MAX_BATCH */
	__u32 max_sessions;		/* per arena */
	__u32 pad;
};

#define KVA_VERSION_SIZE_VER0	56

/*
 * KVA_IOC_ARENA_CREATE (/dev/kvarena): allocate a pinned arena.
 * in:  bytes (multiple of 2 MiB), block_size (multiple of 4 KiB, at most
 *      2 MiB; blocks never straddle a 2 MiB page, so a size that does not
 *      divide 2 MiB wastes the remainder of each page), numa_node (or
 *      KVA_NUMA_ANY), tenant_id (who pays: KVA_TENANT_SELF, the device
 *      fd's own tenant, the effective uid of whoever opened it; any other
 *      only with CAP_SYS_ADMIN),
 *      name (NUL terminated, printable), flags (none defined: must be 0).
 * out: arena_id (module-wide, never reused), blocks_total, tenant_id (the
 *      tenant charged).
 * ret: the new arena fd (O_CLOEXEC).
 * errors: EINVAL bad field; E2BIG bytes above max_arena_mb, or
 *      KVA_MAX_BLOCKS blocks or more; EPERM another tenant without CAP_SYS_ADMIN;
 *      EDQUOT the tenant's arena quota would be exceeded; ENOSPC the
 *      module's pinned cap would be exceeded, or the tenant table is full;
 *      ENOMEM the caller's RLIMIT_MEMLOCK (without CAP_IPC_LOCK), or pages
 *      unavailable on the node; EINTR fatal signal while
 *      allocating; EMFILE/ENFILE no fd.  A failed create leaves nothing
 *      behind and is announced nowhere.
 */
#define KVA_TENANT_SELF		0U
/* Blocks per arena stay below this: the pool's arrays fit kvmalloc. */
#define KVA_MAX_BLOCKS		(1U << 28)
struct kva_arena_create {
	__u32 size;
	__u32 flags;
	__u64 bytes;
	__u32 block_size;
	__s32 numa_node;
	__u32 tenant_id;		/* in/out */
	__u32 arena_id;			/* out */
	__u32 blocks_total;		/* out */
	__u32 pad;
	char name[KVA_NAME_LEN];
	/* VER1: eviction (0 everywhere: the defaults) */
	__u32 policy;			/* enum kva_policy */
	__u32 low_wm;			/* free blocks; 0: blocks_total / 8 */
	__u32 high_wm;			/* re-arm level; 0: 2 x low_wm */
	__u32 ttl_ms;			/* KVA_POLICY_TTL; 0: 30 s */
};

#define KVA_ARENA_CREATE_SIZE_VER0	72
#define KVA_ARENA_CREATE_SIZE_VER1	88

/*
 * KVA_IOC_ARENA_INFO (arena fd): describe the arena.
 * in:  size, flags (0)
 * out: everything else
 */
struct kva_arena_info {
	__u32 size;
	__u32 flags;
	__u64 bytes;
	__u32 arena_id;
	__u32 block_size;
	__u32 blocks_total;
	__u32 blocks_free;
	__u32 blocks_per_page;
	__s32 numa_node;		/* as requested */
	__u32 tenant_id;
	__u32 sessions;			/* live sessions */
	__u32 dmabuf_attachments;	/* importer attachments now */
	__u32 dmabuf_mapped;		/* attachments mapped now */
	__u64 dmabuf_maps_total;	/* map_dma_buf calls ever */
	__u64 created_ns;		/* CLOCK_MONOTONIC */
	__u64 sessions_ended;
	__u64 idle_block_us;		/* ended sessions' idle block-us */
	char name[KVA_NAME_LEN];
	/* VER1 */
	__u32 policy;
	__u32 low_wm;
	__u32 high_wm;
	__u32 ttl_ms;
	__u64 events_posted;
	__u64 events_dropped;		/* queue full: nobody waiting */
	__u64 uring_eagain;		/* non-blocking issues deferred */
};

#define KVA_ARENA_INFO_SIZE_VER0	120
#define KVA_ARENA_INFO_SIZE_VER1	160

/*
 * KVA_IOC_EXPORT_DMABUF (arena fd): a dma-buf fd for the arena's memory.
 * Every call returns a new fd for the same dma-buf; with KVA_EXPORT_RDONLY,
 * a new fd for the arena's one read-only dma-buf (opened O_RDONLY: mmap
 * with PROT_WRITE is refused; importers get it mapped DMA_TO_DEVICE, and
 * DMA_FROM_DEVICE is refused with EACCES).
 * in:  flags: KVA_EXPORT_CLOEXEC, KVA_EXPORT_RDONLY
 * out: fd (also the return value)
 */
#define KVA_EXPORT_CLOEXEC	(1U << 0)
#define KVA_EXPORT_RDONLY	(1U << 1)
struct kva_export {
	__u32 size;
	__u32 flags;
	__s32 fd;			/* out */
	__u32 pad;
};

#define KVA_EXPORT_SIZE_VER0	16

/*
 * KVA_IOC_BLOCKS_ALLOC (arena fd): allocate `count` blocks into a session.
 * in:  session_id, count (1..KVA_MAX_BATCH), ids (user pointer to __u32
 *      array of count entries), flags: KVA_ALLOC_PARTIAL accepts fewer.
 * out: ids[0..done), done; the return value is `done`.
 * errors: ENOENT no such session; ENOSPC not enough free blocks (and no
 *      KVA_ALLOC_PARTIAL, or none free); EDQUOT tenant quota; ENOMEM the
 *      session's block table cannot grow; EINVAL count or flags.
 * Without KVA_ALLOC_PARTIAL the call is all or nothing.
 */
#define KVA_ALLOC_PARTIAL	(1U << 0)
struct kva_blocks {
	__u32 size;
	__u32 flags;
	__u64 session_id;
	__u32 count;
	__u32 done;			/* out */
	__u64 ids;			/* __u32 __user * */
};

#define KVA_BLOCKS_SIZE_VER0	32

/*
 * KVA_IOC_BLOCKS_FREE (arena fd): a session drops its reference on blocks.
 * A block returns to the free pool when no session holds it.
 * in:  session_id, count, ids (each must be held by the session, no
 *      duplicates); flags 0.  All or nothing.
 * errors: ENOENT no such session or a block not held by it (double free);
 *      EINVAL id out of range or repeated.
 *
 * KVA_IOC_BLOCKS_SHARE (arena fd): the session takes an extra reference on
 * blocks allocated by any session of the arena (prefix sharing).
 * errors: ENOENT no such session or block not allocated; EEXIST the session
 *      already holds one; EINVAL out of range or repeated; ENOSPC the
 *      arena's references are at their bound (max_block_refs per block).
 * Only `done` is written back, and it is checked before anything changes:
 * FREE and SHARE never fail with EFAULT once they have changed anything.
 */

/*
 * Session ids are 64-bit and never reused within an arena's lifetime: an
 * id names one session only, so a late END or FREE for an ended session
 * gets ENOENT, never another session.  Ids are opaque: they grow with
 * creation order, are above 2^32 (a caller that truncates them to 32 bits
 * fails at once) and below 2^63 (a positive int64 for JSON and other
 * languages).  The low 16 bits are the kernel's slot, the bits above a
 * per-arena serial that stops at KVA_SESSION_SERIAL_MAX (2^47 creates,
 * 4.5 years at a million a second): then SESSION_CREATE says ENOSPC rather
 * than reuse an id.
 */
#define KVA_SESSION_SERIAL_MAX	(1ULL << 47)

/*
 * KVA_IOC_SESSION_CREATE (arena fd): a new session in state IDLE.
 * in:  cookie (opaque to the kernel: the runtime's request id)
 * out: session_id (never 0); the return value is 0.
 * errors: ENOSPC max_sessions live, or the arena's ids are spent.
 *
 * KVA_IOC_SESSION_END (arena fd): release every block, retire the id.
 * in:  session_id.  errors: ENOENT; EINVAL flags.
 */
struct kva_session_create {
	__u32 size;
	__u32 flags;
	__u64 cookie;
	__u64 session_id;		/* out */
};

#define KVA_SESSION_CREATE_SIZE_VER0	24

struct kva_session_end {
	__u32 size;
	__u32 flags;
	__u64 session_id;
};

#define KVA_SESSION_END_SIZE_VER0	16

/*
 * KVA_IOC_SESSION_SET_STATE (arena fd): record a state transition.
 * in:  session_id, state (IDLE, PREFILL, DECODE, TOOL_WAIT; ENDED acts as
 *      KVA_IOC_SESSION_END), tool_class and expected_wait_us (TOOL_WAIT
 *      only; must be 0 otherwise).
 *      flags KVA_SESSION_STATE_KEEP: no transition: state must be the
 *      session's current one (not ENDED), whose tool_class and
 *      expected_wait_us are replaced (a runtime's new prediction for a tool
 *      that runs past the old one: the policies rank by it at once); the
 *      time in state, the transition count and the tracepoint are left
 *      alone, so a tool-wait measurement in progress goes on.
 *      flags KVA_SESSION_STATE_TIER (VER1): also record where the runtime
 *      keeps the session's KV (tier: enum kva_tier), shown by
 *      KVA_IOC_SESSION_INFO and the netlink dump; the kernel does not act
 *      on it.
 * errors: ENOENT; EINVAL bad state, tool fields, flags, KEEP with another
 *      state, tier out of range or TIER with a VER0 size; EALREADY already
 *      in it (without KEEP).
 */
struct kva_session_state {
	__u32 size;
	__u32 flags;
	__u64 session_id;
	__u32 state;
	__u32 tool_class;
	__u64 expected_wait_us;
	/* VER1 */
	__u32 tier;			/* with KVA_SESSION_STATE_TIER */
	__u32 pad;
};

#define KVA_SESSION_STATE_SIZE_VER0	32
#define KVA_SESSION_STATE_SIZE_VER1	40

#define KVA_SESSION_STATE_KEEP		(1U << 0)
#define KVA_SESSION_STATE_TIER		(1U << 1)

/*
 * Where a runtime keeps a session's KV (its own statement, for operators:
 * kvactl session list): in the arena, in a lower tier (a spill file), or
 * nowhere (it will be recomputed).  New sessions start in ARENA.
 */
enum kva_tier {
	KVA_TIER_ARENA		= 0,
	KVA_TIER_DISK		= 1,
	KVA_TIER_NONE		= 2,
};

#define KVA_TIER_MAX		KVA_TIER_NONE

/*
 * KVA_IOC_SESSION_INFO (arena fd): one session's state and accounting.
 * in:  session_id, flags 0.   out: the rest.   errors: ENOENT.
 * idle_block_us integrates blocks held over time spent in IDLE and
 * TOOL_WAIT, up to now; idle byte-seconds = idle_block_us * block_size / 1e6
 * (idle_byte_sec, rounded down).
 */
struct kva_session_info {
	__u32 size;
	__u32 flags;
	__u64 session_id;
	__u32 state;
	__u32 tool_class;
	__u32 blocks_held;
	__u32 pad;
	__u64 expected_wait_us;
	__u64 cookie;
	__u64 created_ns;
	__u64 state_since_ns;		/* entry into the current state */
	__u64 transitions;
	__u64 idle_block_us;
	__u64 idle_byte_sec;
	__u64 state_ns[KVA_STATE_SLOTS];	/* time per state; 0 beyond */
	/* VER1 */
	__u32 tier;			/* enum kva_tier: the runtime's word */
	__u32 pad1;
};

#define KVA_SESSION_INFO_SIZE_VER0	152
#define KVA_SESSION_INFO_SIZE_VER1	160

/*
 * A tenant is who pays for arenas: by default the effective uid of whoever
 * opened /dev/kvarena (in a user namespace an unprivileged user created,
 * that user).  An arena's bytes stay charged until its pages are really
 * free (pages still referenced elsewhere, by a pipe or a GUP pin, linger).
 * Two quotas: arena_quota_bytes caps the bytes of the tenant's live arenas
 * (checked at create: EDQUOT; 0 = the module's tenant_default_mb), and
 * quota_bytes caps the bytes of KV blocks they hold (checked at allocation:
 * EDQUOT and a QUOTA event; 0 = unlimited).
 *
 * KVA_IOC_TENANT_SET_QUOTA (/dev/kvarena, CAP_SYS_ADMIN): set both quotas;
 * the account then lives until the module unloads.
 * errors: EPERM; ENOSPC tenant table full (max_tenants).
 * KVA_IOC_TENANT_INFO (/dev/kvarena): quotas and usage of the caller's own
 * tenant (tenant_id KVA_TENANT_SELF or its own), or of any tenant with
 * CAP_SYS_ADMIN.  errors: EPERM another tenant; ENOENT no such account.
 */
struct kva_tenant {
	__u32 size;
	__u32 flags;
	__u32 tenant_id;		/* in/out */
	__u32 arenas;			/* out: live arenas */
	__u64 quota_bytes;		/* in for SET_QUOTA, out for INFO */
	__u64 used_bytes;		/* out */
	/* VER1 */
	__u64 arena_quota_bytes;	/* in for SET_QUOTA, out (effective) */
	__u64 arena_bytes;		/* out: bytes of live arenas */
};

#define KVA_TENANT_SIZE_VER0	32
#define KVA_TENANT_SIZE_VER1	48

/*
 * KVA_IOC_ARENA_SET_POLICY (arena fd): change policy and watermarks.
 * in:  policy, low_wm, high_wm, ttl_ms (0: defaults as at creation)
 * errors: EINVAL unknown policy, low_wm > high_wm, high_wm > blocks_total.
 */
struct kva_policy_set {
	__u32 size;
	__u32 flags;
	__u32 policy;
	__u32 low_wm;
	__u32 high_wm;
	__u32 ttl_ms;
};

#define KVA_POLICY_SET_SIZE_VER0	24

/* One ranked victim session (an array element: see victim_size). */
struct kva_victim {
	__u64 session_id;
	__u32 state;
	__u32 blocks_held;
	__u32 tool_class;
	__u32 pad;
	__u64 score;			/* policy-specific, larger goes first */
	__u64 idle_ns;			/* time since last activity */
};

#define KVA_VICTIM_SIZE_VER0	40

/*
 * KVA_IOC_ARENA_VICTIMS (arena fd): rank victims now.
 * in:  max (1..KVA_MAX_VICTIMS), victims (user pointer to max entries),
 *      victim_size (the caller's sizeof(struct kva_victim), at least
 *      KVA_VICTIM_SIZE_VER0: the array's stride; the kernel fills what it
 *      knows of each entry and zeroes the rest), policy (KVA_POLICY_ARENA:
 *      the arena's own, else one to compare).
 * out: count, victims[0..count), best first.  The return value is count.
 */
#define KVA_MAX_VICTIMS		256U
#define KVA_POLICY_ARENA	0xffffffffU
struct kva_victims {
	__u32 size;
	__u32 flags;
	__u32 max;
	__u32 count;			/* out */
	__u64 victims;			/* struct kva_victim __user * */
	__u32 policy;
	__u32 victim_size;
};

#define KVA_VICTIMS_SIZE_VER0	32

/*
 * Events, delivered by KVA_URING_WAIT_EVENT (a parked io_uring command on
 * the arena fd, completed when the arena needs its owner's attention).
 *  PRESSURE:      free blocks fell below low_wm (or an allocation failed
 *                 for lack of blocks); victims ranked by the policy.  Not
 *                 posted again until acknowledged (ack_seq) or free blocks
 *                 rise back to high_wm.
 *  QUOTA:         an allocation failed with EDQUOT (tenant_id, session_id,
 *                 requested).
 *  SESSION_ENDED: a session ended (pid: the process that ended it, as the
 *                 receiver's pid namespace sees it; 0 if it cannot).
 * Up to KVA_EVENT_QUEUE events wait for a command; beyond that they are
 * counted in `dropped` of the next event delivered.
 */
enum kva_event_type {
	KVA_EVENT_PRESSURE	= 1,
	KVA_EVENT_QUOTA		= 2,
	KVA_EVENT_SESSION_ENDED	= 3,
};

#define KVA_EVENT_MAX_VICTIMS	8
#define KVA_EVENT_QUEUE		64
struct kva_event {
	__u32 size;			/* in: sizeof as the caller knows it */
	__u32 type;			/* enum kva_event_type */
	__u64 seq;			/* per arena, from 1 */
	__u64 time_ns;			/* CLOCK_MONOTONIC */
	__u32 arena_id;
	__u32 tenant_id;
	__u64 session_id;
	__u32 blocks_free;
	__u32 low_wm;
	__u32 requested;
	__u32 pid;
	__u32 nvictims;
	__u32 pad;
	__u64 dropped;
	struct kva_victim victims[KVA_EVENT_MAX_VICTIMS];
	__u64 ack_seq;			/* in: last event handled (0: none) */
};

#define KVA_EVENT_SIZE_VER0	400

/*
 * io_uring: IORING_OP_URING_CMD on an arena fd, sqe->cmd_op one of the
 * arena ioctl numbers below (not EXPORT_DMABUF) or KVA_URING_WAIT_EVENT,
 * and this 16-byte payload in sqe->cmd (fits a plain 64-byte SQE).  The
 * op reads and writes the same struct as its ioctl twin, through `arg`;
 * cqe->res is what the ioctl would return (or -errno).
 * KVA_URING_WAIT_EVENT: `arg` points to a struct kva_event whose ack_seq
 * acknowledges the last event handled (0: none).  cqe->res is the event
 * type, or -ECANCELED when the command is cancelled (ring closed, arena
 * fd closed by the submitting process, process exit), or -EBUSY when
 * KVA_MAX_WAITERS commands are already parked on the arena.
 * `flags` (none defined) and `pad` must be 0: they let the payload grow.
 */
struct kva_uring_cmd {
	__u64 arg;			/* user pointer to the op's struct */
	__u32 flags;
	__u32 pad;
};

#define KVA_MAX_WAITERS		64	/* parked WAIT_EVENTs per arena */

/*
 * Generic netlink family "kvarena" (version 1), for operators: dumps of
 * arenas and sessions, per-arena policy, and the multicast group "events".
 * Attributes are one flat space; each command lists those it uses.
 *  ARENA_GET   [ARENA_ID]          doit: one arena; dump: all arenas
 *  SESSION_GET [ARENA_ID]          dump: sessions (of one arena, or all)
 *  POLICY_SET  ARENA_ID, POLICY, [LOW_WM, HIGH_WM, TTL_MS]  (CAP_NET_ADMIN)
 *  EVENT       multicast: EVENT_TYPE, ARENA_ID, EVENT_SEQ, ... VICTIM*
 *  ARENA_NEW / ARENA_DEL  multicast: ARENA_ID, ARENA_NAME, TENANT_ID, BYTES
 */
#define KVA_GENL_NAME		"kvarena"
#define KVA_GENL_VERSION	1
#define KVA_GENL_MCGRP_EVENTS	"events"

enum kva_nl_cmd {
	KVA_NL_CMD_UNSPEC,
	KVA_NL_CMD_ARENA_GET,
	KVA_NL_CMD_SESSION_GET,
	KVA_NL_CMD_POLICY_SET,
	KVA_NL_CMD_EVENT,
	KVA_NL_CMD_ARENA_NEW,
	KVA_NL_CMD_ARENA_DEL,
	__KVA_NL_CMD_MAX
};

#define KVA_NL_CMD_MAX		(__KVA_NL_CMD_MAX - 1)

enum kva_nl_attr {
	KVA_NL_A_UNSPEC,
	KVA_NL_A_PAD,
	KVA_NL_A_ARENA_ID,		/* u32 */
	KVA_NL_A_ARENA_NAME,		/* string */
	KVA_NL_A_TENANT_ID,		/* u32 */
	KVA_NL_A_BYTES,			/* u64 */
	KVA_NL_A_BLOCK_SIZE,		/* u32 */
	KVA_NL_A_BLOCKS_TOTAL,		/* u32 */
	KVA_NL_A_BLOCKS_FREE,		/* u32 */
	KVA_NL_A_SESSIONS,		/* u32: live */
	KVA_NL_A_SESSIONS_ENDED,	/* u64 */
	KVA_NL_A_NUMA_NODE,		/* s32 */
	KVA_NL_A_FD_OPEN,		/* u8: 0 once only the dma-buf holds it */
	KVA_NL_A_DMABUF_ATTACHMENTS,	/* u32 */
	KVA_NL_A_POLICY,		/* u32: enum kva_policy */
	KVA_NL_A_LOW_WM,		/* u32 */
	KVA_NL_A_HIGH_WM,		/* u32 */
	KVA_NL_A_TTL_MS,		/* u32 */
	KVA_NL_A_EVENTS_POSTED,		/* u64 */
	KVA_NL_A_EVENTS_DROPPED,	/* u64 */
	KVA_NL_A_SESSION_ID,		/* u64 */
	KVA_NL_A_STATE,			/* u32: enum kva_state */
	KVA_NL_A_TOOL_CLASS,		/* u32 */
	KVA_NL_A_BLOCKS_HELD,		/* u32 */
	KVA_NL_A_EXPECTED_WAIT_US,	/* u64 */
	KVA_NL_A_COOKIE,		/* u64 */
	KVA_NL_A_CREATED_NS,		/* u64 */
	KVA_NL_A_STATE_SINCE_NS,	/* u64 */
	KVA_NL_A_TRANSITIONS,		/* u64 */
	KVA_NL_A_IDLE_BLOCK_US,		/* u64 */
	KVA_NL_A_IDLE_BYTE_SEC,		/* u64 */
	KVA_NL_A_EVENT_TYPE,		/* u32: enum kva_event_type */
	KVA_NL_A_EVENT_SEQ,		/* u64 */
	KVA_NL_A_TIME_NS,		/* u64 */
	KVA_NL_A_PID,			/* u32 */
	KVA_NL_A_REQUESTED,		/* u32 */
	KVA_NL_A_VICTIM,		/* nest: the victim's fields */
	KVA_NL_A_SCORE,			/* u64 */
	KVA_NL_A_IDLE_NS,		/* u64 */
	KVA_NL_A_DROPPED,		/* u64: events not multicast before it */
	KVA_NL_A_TIER,			/* u32: enum kva_tier */
	__KVA_NL_A_MAX
};

#define KVA_NL_A_MAX		(__KVA_NL_A_MAX - 1)

/*
 * 0xBC: free in Documentation/userspace-api/ioctl/ioctl-number.rst (6.1 and
 * current kernels).  Arguments are passed by pointer; each struct's `size`
 * is its length (the VFIO convention), so commands are plain _IO numbers.
 */
#define KVA_IOC_MAGIC		0xBC

/* /dev/kvarena */
#define KVA_IOC_VERSION		_IO(KVA_IOC_MAGIC, 0x00)	/* kva_version */
#define KVA_IOC_ARENA_CREATE	_IO(KVA_IOC_MAGIC, 0x01)	/* kva_arena_create */
#define KVA_IOC_TENANT_SET_QUOTA _IO(KVA_IOC_MAGIC, 0x02)	/* kva_tenant */
#define KVA_IOC_TENANT_INFO	_IO(KVA_IOC_MAGIC, 0x03)	/* kva_tenant */

/* arena fd (the same numbers are the uring_cmd ops) */
#define KVA_IOC_ARENA_INFO	_IO(KVA_IOC_MAGIC, 0x10)	/* kva_arena_info */
#define KVA_IOC_EXPORT_DMABUF	_IO(KVA_IOC_MAGIC, 0x11)	/* kva_export */
#define KVA_IOC_BLOCKS_ALLOC	_IO(KVA_IOC_MAGIC, 0x12)	/* kva_blocks */
#define KVA_IOC_BLOCKS_FREE	_IO(KVA_IOC_MAGIC, 0x13)	/* kva_blocks */
#define KVA_IOC_BLOCKS_SHARE	_IO(KVA_IOC_MAGIC, 0x14)	/* kva_blocks */
#define KVA_IOC_SESSION_CREATE	_IO(KVA_IOC_MAGIC, 0x15)	/* kva_session_create */
#define KVA_IOC_SESSION_END	_IO(KVA_IOC_MAGIC, 0x16)	/* kva_session_end */
#define KVA_IOC_SESSION_SET_STATE _IO(KVA_IOC_MAGIC, 0x17)	/* kva_session_state */
#define KVA_IOC_SESSION_INFO	_IO(KVA_IOC_MAGIC, 0x18)	/* kva_session_info */
#define KVA_IOC_ARENA_SET_POLICY _IO(KVA_IOC_MAGIC, 0x19)	/* kva_policy_set */
#define KVA_IOC_ARENA_VICTIMS	_IO(KVA_IOC_MAGIC, 0x1a)	/* kva_victims */

/* io_uring only */
#define KVA_URING_WAIT_EVENT	_IO(KVA_IOC_MAGIC, 0x20)	/* kva_event */

#endif /* _UAPI_LINUX_KVARENA_H */
