/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libkvarena: the C API runtimes use to hold KV caches in kvarena arenas.
 *
 * Two backends behind one API:
 *  - kernel: /dev/kvarena (kvarena.ko). Pinned 2 MiB pages, dma-buf export,
 *    isolation and accounting enforced by the kernel, shared across
 *    processes by passing fds.
 *  - memfd: user-space arenas (memfd, hugetlb or THP, mlock) running the
 *    same bookkeeping code in-process.  No dma-buf, no kernel-enforced
 *    sharing or quotas: block and session state is private to the process
 *    that created the arena (only the data can be shared, as a memfd).
 *
 * Every function returns 0 (or a count or fd) on success and a negative
 * errno on failure; nothing here calls exit().
 *
 * ABI: every struct passed across this API, in or out, starts with a
 * `size` member the caller sets to sizeof(the struct as it was compiled)
 * (KVA_STRUCT() does it); the library reads and writes only that many
 * bytes.  Fields a caller's older header lacks default to zero on input
 * and are not written on output; fields a newer header has that this
 * library lacks must be zero on input (-E2BIG) and come back zero.  A size
 * below the struct's first version is -EINVAL.  The tool-wait map records
 * (<kvarena/kvarena_toolwait.h>) carry no size member: their functions take
 * the size as an argument.  Arrays of kva_ring_cqe and kva_victim records
 * are frozen layouts (they never grow).  Records the library hands to a
 * callback have the library's size in `size` and only grow at the end.
 */
#ifndef KVARENA_H
#define KVARENA_H

#include <stddef.h>
#include <stdint.h>
/* The UAPI header next to this one when installed (kvarena/linux/), the
 * tree's include/uapi/ when built in place: never the system's linux/. */
#include "linux/kvarena.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header; kva_lib_version() is the library's. */
#define KVA_LIB_VERSION_MAJOR	0
#define KVA_LIB_VERSION_MINOR	2
#define KVA_LIB_VERSION_PATCH	0
#define KVA_LIB_VERSION_NUM(maj, min, pat) \
	((unsigned int)(maj) * 10000U + (unsigned int)(min) * 100U + (unsigned int)(pat))
#define KVA_LIB_VERSION	KVA_LIB_VERSION_NUM(KVA_LIB_VERSION_MAJOR, \
	KVA_LIB_VERSION_MINOR, KVA_LIB_VERSION_PATCH)

/* The library running: KVA_LIB_VERSION_NUM of it, and "0.2.0". */
unsigned int kva_lib_version(void);
const char *kva_lib_version_string(void);

struct kva_dev;
struct kva_arena;

/* A zeroed struct with its size set: KVA_STRUCT(kva_arena_info, ai); */
#define KVA_STRUCT(type, name, ...) \
	struct type name = { .size = sizeof(struct type), __VA_ARGS__ }

enum kva_backend {
	KVA_BACKEND_AUTO = 0,	/* kernel if /dev/kvarena opens, else memfd */
	KVA_BACKEND_KERNEL,
	KVA_BACKEND_MEMFD,
};

/*
 * The library never prints.  A caller-set logger receives what it would
 * say (libbpf's messages during tool-wait loading, why AUTO fell back to
 * memfd), one message per call without a newline; level as syslog's
 * (KVA_LOG_ERR 3 .. KVA_LOG_DEBUG 7).  NULL (the default): silence.
 * Process-wide; may be called at any time from any thread.
 */
#define KVA_LOG_ERR	3
#define KVA_LOG_WARN	4
#define KVA_LOG_INFO	6
#define KVA_LOG_DEBUG	7
typedef void (*kva_log_fn)(int level, const char *msg, void *ctx);
void kva_set_logger(kva_log_fn fn, void *ctx);

int kva_open(enum kva_backend backend, struct kva_dev **devp);
/* AUTO fell back to memfd: why, e.g. "open /dev/kvarena: Permission
 * denied"; NULL when the backend is the one asked for. */
const char *kva_dev_fallback(const struct kva_dev *dev);
void kva_close(struct kva_dev *dev);
enum kva_backend kva_dev_backend(const struct kva_dev *dev);
/* One line: what this backend does not provide ("" for the kernel). */
const char *kva_dev_limits(const struct kva_dev *dev);
int kva_dev_version(struct kva_dev *dev, struct kva_version *out);

struct kva_arena_params {
	size_t size;			/* sizeof(struct kva_arena_params) */
	uint64_t bytes;			/* multiple of 2 MiB */
	uint32_t block_size;		/* multiple of 4 KiB, <= 2 MiB */
	int32_t numa_node;		/* KVA_NUMA_ANY for any */
	uint32_t tenant_id;
	const char *name;		/* optional, < KVA_NAME_LEN bytes */
	/* Eviction; 0 everywhere means the defaults (see kvarena.h UAPI). */
	uint32_t policy;		/* enum kva_policy */
	uint32_t low_wm;
	uint32_t high_wm;
	uint32_t ttl_ms;
	/* Since 0.1 too, after VER0: KVA_ARENA_* flags. */
	uint32_t flags;
};
/*
 * memfd backend: memory is mlock()ed (pinned, faulted in) by default and
 * creation fails if RLIMIT_MEMLOCK refuses.  NO_MLOCK: never lock (the
 * memory may be swapped); MLOCK_TRY: lock if allowed, else go on unlocked.
 * The kernel backend always pins and ignores both.
 */
#define KVA_ARENA_NO_MLOCK	(1U << 0)
#define KVA_ARENA_MLOCK_TRY	(1U << 1)
/* The first version: up to and including `name`. */
#define KVA_ARENA_PARAMS_SIZE_VER0	offsetof(struct kva_arena_params, policy)

int kva_arena_new(struct kva_dev *dev, const struct kva_arena_params *p,
		     struct kva_arena **arenap);
/* Adopt an arena fd received from another process (kernel backend). */
int kva_arena_from_fd(struct kva_dev *dev, int arena_fd,
		      struct kva_arena **arenap);
void kva_arena_destroy(struct kva_arena *arena);
int kva_arena_fd(const struct kva_arena *arena);
int kva_arena_get_info(struct kva_arena *arena, struct kva_arena_info *out);

/*
 * A new fd for the arena's memory: a dma-buf (kernel backend) or a memfd
 * (memfd backend, not importable by devices).  KVA_EXPORT_CLOEXEC allowed.
 */
int kva_arena_data_fd(struct kva_arena *arena, uint32_t flags);
/* The dma-buf itself: -EOPNOTSUPP on the memfd backend. */
int kva_arena_export_dmabuf(struct kva_arena *arena, uint32_t flags);

/* Map the whole arena read-write (idempotent); the address is cached. */
int kva_arena_map(struct kva_arena *arena, void **addrp);
/* Address of a block in the mapped arena, NULL if unmapped or invalid. */
void *kva_arena_block_ptr(struct kva_arena *arena, uint32_t block);
/* Map `bytes` of a data fd (dma-buf or memfd) received from elsewhere. */
int kva_map_fd(int fd, size_t bytes, void **addrp);
int kva_unmap(void *addr, size_t bytes);

/*
 * Sharing an arena between processes.  The byte offset of `block` in a
 * mapping of an arena with `block_size`-byte blocks (blocks never straddle
 * a 2 MiB page): (block / per_page) * 2 MiB + (block % per_page) *
 * block_size; UINT64_MAX for a block size no arena can have.
 */
uint64_t kva_block_offset(uint32_t block_size, uint32_t block);

/*
 * Send `len` bytes (at least 1) with up to KVA_MAX_FDS fds over a Unix
 * socket (SCM_RIGHTS); the caller still owns its fds.  Receive exactly
 * `len` bytes and up to *nfds fds (O_CLOEXEC; *nfds is set to how many came;
 * the caller owns them).  On a stream socket the bytes may arrive in
 * pieces; on a datagram or seqpacket socket they are one message.  -EPIPE:
 * the peer closed first; -EMSGSIZE: more fds than asked for or a short
 * message (nothing is kept: every fd received is closed).
 */
#define KVA_MAX_FDS	16
int kva_send_fds(int sock, const void *data, size_t len, const int *fds,
		 unsigned int nfds);
int kva_recv_fds(int sock, void *data, size_t len, int *fds,
		 unsigned int *nfds);

int kva_session_open(struct kva_arena *arena, uint64_t cookie,
		       uint64_t *session);
int kva_session_close(struct kva_arena *arena, uint64_t session);
int kva_session_set_state(struct kva_arena *arena, uint64_t session,
			  uint32_t state, uint32_t tool_class,
			  uint64_t expected_wait_us);
/*
 * SET_STATE with flags (KVA_SESSION_STATE_KEEP: no transition, state must be
 * the session's current one, its tool_class and expected wait replaced;
 * KVA_SESSION_STATE_TIER: record tier, enum kva_tier).  Errors as
 * kva_session_set_state(), -EINVAL for KEEP with another state.
 */
int kva_session_update(struct kva_arena *arena, uint64_t session,
		       uint32_t flags, uint32_t state, uint32_t tool_class,
		       uint64_t expected_wait_us, uint32_t tier);
int kva_session_get_info(struct kva_arena *arena, uint64_t session,
		     struct kva_session_info *out);

/* Return the number of blocks allocated (all n unless KVA_ALLOC_PARTIAL). */
int kva_blocks_alloc(struct kva_arena *arena, uint64_t session, uint32_t n,
		     uint32_t *ids, uint32_t flags);
int kva_blocks_free(struct kva_arena *arena, uint64_t session, uint32_t n,
		    const uint32_t *ids);
int kva_blocks_share(struct kva_arena *arena, uint64_t session, uint32_t n,
		     const uint32_t *ids);

int kva_tenant_set_quota(struct kva_dev *dev, uint32_t tenant,
			 uint64_t quota_bytes);
int kva_tenant_info(struct kva_dev *dev, uint32_t tenant,
		    struct kva_tenant *out);

const char *kva_state_name(uint32_t state);
const char *kva_policy_name(uint32_t policy);
/* "toolwait", "lru", "ttl" -> enum kva_policy, or -EINVAL. */
int kva_policy_parse(const char *name);

/* Eviction: change the policy; rank victims now (KVA_POLICY_ARENA: the
 * arena's own policy).  Returns the number of victims written. */
int kva_arena_set_policy(struct kva_arena *arena, uint32_t policy,
			 uint32_t low_wm, uint32_t high_wm, uint32_t ttl_ms);
int kva_arena_victims(struct kva_arena *arena, uint32_t policy,
		      struct kva_victim *out, uint32_t max);

/*
 * io_uring (kernel backend only): the arena ioctls as IORING_OP_URING_CMD,
 * many per system call, and parked KVA_URING_WAIT_EVENT commands.  `arg`
 * is the op's UAPI struct (with `size` set) and must stay valid until its
 * completion is reaped; res is what the ioctl would return, or -errno.
 */
struct kva_ring;
struct kva_ring_cqe {
	uint64_t user_data;
	int32_t res;
};

int kva_ring_open(struct kva_arena *arena, unsigned int entries,
		  struct kva_ring **ringp);
void kva_ring_close(struct kva_ring *ring);
int kva_ring_fd(const struct kva_ring *ring);
/* The ops a ring carries; `arg` is the op's UAPI struct. */
enum kva_ring_op {
	KVA_RING_ARENA_INFO = 1,	/* struct kva_arena_info */
	KVA_RING_BLOCKS_ALLOC,		/* struct kva_blocks */
	KVA_RING_BLOCKS_FREE,		/* struct kva_blocks */
	KVA_RING_BLOCKS_SHARE,		/* struct kva_blocks */
	KVA_RING_SESSION_OPEN,		/* struct kva_session_create */
	KVA_RING_SESSION_CLOSE,		/* struct kva_session_end */
	KVA_RING_SESSION_SET_STATE,	/* struct kva_session_state */
	KVA_RING_SESSION_INFO,		/* struct kva_session_info */
	KVA_RING_SET_POLICY,		/* struct kva_policy_set */
	KVA_RING_VICTIMS,		/* struct kva_victims */
};
/* Queue one op; -EINVAL for an unknown op, -EBUSY when the SQ is full. */
int kva_ring_queue(struct kva_ring *ring, enum kva_ring_op op, void *arg,
		   uint64_t user_data);
/* Park a wait for the next event, acknowledging ack_seq (0: none). */
int kva_ring_queue_wait_event(struct kva_ring *ring, struct kva_event *ev,
			      uint64_t ack_seq, uint64_t user_data);
/* Submit what is queued; returns how many were submitted. */
int kva_ring_submit(struct kva_ring *ring);
/* Reap up to max completions, waiting for at least wait_nr of them. */
int kva_ring_reap(struct kva_ring *ring, struct kva_ring_cqe *out,
		  unsigned int max, unsigned int wait_nr);

/*
 * Generic netlink (kernel backend): what operators see without an arena
 * fd.  Errors carry the kernel's extack text in kva_nl_error().
 */
struct kva_nl;
/* The UAPI record is last in each, so that it can grow. */
struct kva_nl_arena {
	size_t size;			/* sizeof(struct kva_nl_arena) */
	int fd_open;			/* some process holds an arena fd */
	struct kva_arena_info info;
};
struct kva_nl_session {
	size_t size;
	uint32_t arena_id;
	struct kva_session_info info;
};
enum kva_nl_event_kind {
	KVA_NL_EV_EVENT = 1,		/* an arena event: ev */
	KVA_NL_EV_ARENA_NEW,		/* ev.arena_id, ev.tenant_id, name, bytes */
	KVA_NL_EV_ARENA_DEL,		/* likewise */
};
struct kva_nl_event {
	size_t size;			/* sizeof(struct kva_nl_event) */
	uint32_t kind;			/* enum kva_nl_event_kind */
	char name[KVA_NAME_LEN];	/* ARENA_* */
	uint64_t bytes;			/* ARENA_* */
	struct kva_event ev;
};

int kva_nl_open(struct kva_nl **nlp);
void kva_nl_close(struct kva_nl *nl);
const char *kva_nl_error(const struct kva_nl *nl);
int kva_nl_arena_get(struct kva_nl *nl, uint32_t arena_id,
		     struct kva_nl_arena *out);
int kva_nl_arenas(struct kva_nl *nl,
		  int (*cb)(const struct kva_nl_arena *a, void *ctx),
		  void *ctx);
/* Sessions of one arena (0: of all arenas). */
int kva_nl_sessions(struct kva_nl *nl, uint32_t arena_id,
		    int (*cb)(const struct kva_nl_session *s, void *ctx),
		    void *ctx);
int kva_nl_policy_set(struct kva_nl *nl, uint32_t arena_id, uint32_t policy,
		      uint32_t low_wm, uint32_t high_wm, uint32_t ttl_ms);
/* Join the "events" group (needs CAP_NET_ADMIN); then wait for one event
 * (1), time out (0), or find only messages that are not events (-EAGAIN). */
int kva_nl_subscribe(struct kva_nl *nl);
int kva_nl_next_event(struct kva_nl *nl, struct kva_nl_event *out,
		      int timeout_ms);
/* Send a raw request (tests): a genl command with raw attribute bytes. */
int kva_nl_raw(struct kva_nl *nl, uint8_t cmd, const void *attrs,
	       size_t len, int flags);

#ifdef __cplusplus
}
#endif

#endif /* KVARENA_H */
