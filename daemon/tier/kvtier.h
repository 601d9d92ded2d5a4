/* SPDX-License-Identifier: MIT */
/*
 * kvtier.h - KV tiers below the arena: a session's KV blocks written to a
 * spill file on disk with io_uring and read back into fresh arena blocks,
 * and the numbers that decide whether that is worth doing.
 *
 * Two concepts, two halves of this header:
 *
 *  - The disk tier (tier.c, spillfile.c): a directory of spill files under
 *    a byte cap, one file per spilled KV (a conversation's blocks), written
 *    and read by one I/O thread with io_uring, O_DIRECT from and into the
 *    arena's own mapping where the file system and the mapping allow it
 *    (buffered I/O otherwise, said by kvt_describe()), a checksum per
 *    block. The tier never decides anything: its owner (kvarenad's
 *    scheduler) asks it to spill, restore and drop, and reaps completions.
 *
 *  - The economics (cost.c): spill and restore bandwidth and recompute
 *    speed, measured and kept up to date, and the keep / spill / discard
 *    choice for a session entering a tool wait, with the time a prefetch
 *    must start so that a spilled session is back before its tool returns.
 *
 * Threads: every kvt_* function of the disk tier may be called from any
 * thread, one at a time per struct kvt (kvarenad calls them under its lock;
 * none of them waits for I/O or hashes KV: that happens on the tier's
 * thread). Errors are negative errno values; nothing here prints or exits
 * (kvt_open's err buffer says why it failed).
 *
 * Contract with the owner about arena blocks: the blocks named in a spill
 * are only read by the tier, and must keep their bytes until the spill's
 * completion is reaped (the owner keeps them allocated and unwritten). The
 * blocks named in a restore are written by the tier until its completion
 * is reaped: the owner must not free or use them before. Every submitted
 * operation gets exactly one completion, also when its file was dropped
 * meanwhile (then with -ECANCELED).
 */
#ifndef KVTIER_H
#define KVTIER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the disk tier ------------------------------------------------------ */

struct kvt;

/* The arena as the tier addresses it: block id -> byte offset by the UAPI's
 * formula ((id / blocks_per_page) * 2 MiB + (id % blocks_per_page) *
 * block_size). A spill file holds block_size bytes per block (the whole
 * arena block, a multiple of 4 KiB, so O_DIRECT lengths and offsets stay
 * aligned); shape_id names everything that makes the bytes meaningful (the
 * model's layers, heads, dtype, block_tokens): a file restores only into an
 * arena of the same shape. */
struct kvt_geom {
	uint32_t block_size;		/* multiple of 4096, <= 2 MiB */
	uint32_t blocks_per_page;
	uint32_t blocks_total;
	uint32_t block_tokens;
	uint64_t shape_id;
};

enum kvt_mode {
	KVT_AUTO = 0,		/* use it when it works (probed, then on failure) */
	KVT_ON,			/* required: kvt_open fails without it */
	KVT_OFF,
};

struct kvt_params {
	const char *dir;		/* spill directory; created (0700) if absent */
	uint64_t cap_bytes;		/* disk bytes the files may take; 0: no cap */
	enum kvt_mode direct;		/* O_DIRECT */
	enum kvt_mode fixed;		/* registered buffers over the arena mapping */
	uint32_t queue_depth;		/* block I/Os in flight; 0: 32 */
};

/*
 * Opens the tier over an arena mapped at arena_base (arena_bytes long):
 * takes the directory's lock (flock on DIR/.lock: a second tier on the
 * same directory gets -EBUSY), removes every spill file and temporary file
 * a previous life left there (spill files are a cache that never outlives
 * its process; a crash mid-spill leaves nothing that is ever read), probes
 * O_DIRECT and registered buffers, and starts the I/O thread.
 */
int kvt_open(const struct kvt_params *p, const struct kvt_geom *g, void *arena_base,
	     uint64_t arena_bytes, struct kvt **tp, char *err, size_t errlen);
/* Waits for I/O in flight, removes every file, stops the thread. NULL ok. */
void kvt_close(struct kvt *t);

/* What the tier runs with, e.g. "dir=/var/lib/kvarenad/spill direct=on
 * fixed=on cap=64.0GiB". */
const char *kvt_describe(const struct kvt *t);

/* Readable (poll) when completions wait to be reaped. */
int kvt_event_fd(const struct kvt *t);

/* A spill file's identity, chosen by the tier (never 0, never reused). */
typedef uint64_t kvt_file_id;

/*
 * What the file stands for, checked again at restore: key is the owner's
 * name for the KV (kvarenad: the conversation's serial), tokens_hash a hash
 * of the tokens whose KV it is (kvt_tokens_hash), n_tokens how many. A
 * file whose header does not match the restore's expectation is refused
 * (-ESTALE), so a file never restores another conversation's KV.
 */
struct kvt_ident {
	uint64_t key;
	uint64_t tokens_hash;
	uint32_t n_tokens;
};

/* XXH3 of the token ids: the tokens_hash of kvt_ident. */
uint64_t kvt_tokens_hash(const int32_t *tokens, uint32_t n);
/* A chain of such hashes (seeded with the previous one): per block, so an
 * owner can tell how much of a file's leading KV still matches its tokens. */
uint64_t kvt_tokens_chain(uint64_t prev, const int32_t *tokens, uint32_t n);

/*
 * Spill n_blocks arena blocks (in order: block i of the file is blocks[i])
 * to a new file. The bytes the file takes are reserved at once against
 * the cap: -ENOSPC when they do not fit (make room with kvt_evict_oldest
 * first). ctx comes back in the completion. *file is the new file's id;
 * it can be restored from only after the spill completed successfully.
 */
int kvt_spill(struct kvt *t, const struct kvt_ident *id, const uint32_t *blocks,
	      uint32_t n_blocks, void *ctx, kvt_file_id *file);

/*
 * Restore blocks [first, first + n) of a spilled file into the given arena
 * blocks (dst[i] gets file block first + i), verifying each block's
 * checksum and the header against id. -ENOENT for an unknown file, -EBUSY
 * while another operation on it is in flight, -EINVAL for a range beyond
 * the file.
 */
int kvt_restore(struct kvt *t, kvt_file_id file, const struct kvt_ident *id,
		uint32_t first, uint32_t n, const uint32_t *dst, void *ctx);

/*
 * Forget a file: it is removed from disk (after any operation in flight on
 * it, whose completion then says -ECANCELED unless it had already
 * finished); its bytes stop counting then (kvt_bytes_used).
 */
void kvt_drop(struct kvt *t, kvt_file_id file);

/*
 * Who holds a file (the spill's ctx until set): what kvt_oldest returns
 * with it. The owner keeps it valid until it drops the file.
 */
void kvt_set_owner(struct kvt *t, kvt_file_id file, void *owner);

/*
 * The oldest file with no operation in flight, for the owner to forget
 * (its cap eviction: oldest first), and its owner. 0 when there is none.
 * The owner marks its KV as gone and calls kvt_drop().
 */
kvt_file_id kvt_oldest(struct kvt *t, void **owner);

/*
 * Waits (at most timeout_ms) until no spill or restore is in flight, so
 * that every completion can be reaped before kvt_close(); refuses new
 * operations from then on (-ESHUTDOWN). 0, or -ETIMEDOUT.
 */
int kvt_drain(struct kvt *t, int timeout_ms);

/* Bytes the files count against the cap: live ones and those being
 * written. A dropped file's count no more once its removal is queued (the
 * thread takes requests in order: no later file is created before it is
 * gone, so the bytes on disk stay under the cap too). */
uint64_t kvt_bytes_used(const struct kvt *t);
uint64_t kvt_cap_bytes(const struct kvt *t);
/* Bytes a file of n blocks takes (header + blocks). */
uint64_t kvt_file_bytes(const struct kvt *t, uint32_t n_blocks);

enum kvt_op {
	KVT_OP_SPILL = 1,
	KVT_OP_RESTORE,
};

struct kvt_done {
	enum kvt_op op;
	kvt_file_id file;
	void *ctx;
	/*
	 * 0: every block written (spill) or read and verified (restore).
	 * Restore failures: -EBADMSG a checksum or the header did not
	 * match, -ENODATA the file is shorter than its header says
	 * (truncated), -ESTALE the file holds other KV than asked for,
	 * -EIO and others from the I/O; -ECANCELED the file was dropped.
	 */
	int status;
	/* restore: leading blocks verified and in place (all n when status
	 * is 0); the owner may keep these and recompute the rest */
	uint32_t blocks_ok;
	uint64_t bytes;			/* moved to or from the disk */
	uint64_t ns;			/* from the first I/O to the last */
	uint64_t queued_ns;		/* from kvt_spill/kvt_restore to the first I/O */
};

/* Up to max completions, without waiting; returns how many. */
int kvt_reap(struct kvt *t, struct kvt_done *out, unsigned int max);

struct kvt_stats {
	uint64_t files;			/* live */
	uint64_t spills, spill_bytes, spill_failures;
	uint64_t restores, restore_bytes;
	uint64_t restore_failures[4];	/* checksum, truncated, stale, io */
	uint64_t removed;		/* files removed (dropped, evicted) */
	uint64_t cleaned_at_open;	/* stray files removed by kvt_open */
	uint64_t direct_fallbacks;	/* O_DIRECT refused at run time */
};
void kvt_get_stats(const struct kvt *t, struct kvt_stats *s);

/* ---- the economics ------------------------------------------------------ */

/*
 * The costs this machine measured: disk write and read bandwidth
 * (bytes/s, from spills and restores, or the start-up probe), recompute
 * speed (prefill tokens/s, from the prefill workers' steps). Each is an
 * exponentially weighted mean of observations (weight 1/4 for the newest),
 * so it follows a disk that fills up or a CPU that gets busy.
 */
struct kvt_costs {
	double write_bps, read_bps;	/* 0: not measured yet */
	double recompute_tps;
	uint64_t n_write, n_read, n_recompute;
};

void kvt_costs_init(struct kvt_costs *c);
void kvt_costs_add_write(struct kvt_costs *c, uint64_t bytes, uint64_t ns);
void kvt_costs_add_read(struct kvt_costs *c, uint64_t bytes, uint64_t ns);
void kvt_costs_add_recompute(struct kvt_costs *c, uint64_t tokens, uint64_t ns);

enum kvt_choice {
	KVT_KEEP = 0,		/* the KV stays in the arena */
	KVT_SPILL,		/* written to disk, freed, restored before the return */
	KVT_DISCARD,		/* freed, recomputed from the tokens when it returns */
};

const char *kvt_choice_name(enum kvt_choice c);

/* A session entering a tool wait, and the state of the arena. */
struct kvt_decision_in {
	uint64_t kv_bytes;		/* what it holds (blocks x block size) */
	uint32_t kv_tokens;		/* positions with KV (what recomputing costs) */
	uint64_t predicted_wait_us;	/* the tool class's expected wait */
	uint64_t margin_us;		/* prefetch safety margin */
	int pressure;			/* the arena needs the memory (below its
					 * watermark, or requests wait for blocks) */
	int disk_ok;			/* a tier exists and the file fits the cap */
	/*
	 * Optional: P(the wait lasts longer than horizon_us more), from the
	 * tool class's distribution; < 0 when it has too few samples to say.
	 * With it a spill must outlast writing, restoring and the margin with
	 * probability >= 1 - max_stall (a restore stall otherwise); without
	 * it (or while it cannot say), the mean wait must.
	 */
	double (*survival)(void *ctx, uint64_t horizon_us);
	void *survival_ctx;
	double max_stall;		/* 0: 0.05 */
};

struct kvt_decision {
	enum kvt_choice choice;
	/* the inputs' costs, in microseconds */
	uint64_t spill_us, restore_us, recompute_us;
	/* memory-time the choice frees, in byte-seconds (the KV idle time it
	 * avoids): keep 0; spill: during the wait less write, restore and
	 * margin; discard: during the whole wait */
	double freed_byte_s;
	/* P(the wait outlasts spill + restore + margin), or -1 unknown */
	double p_outlast;
	const char *why;		/* a short reason for the log */
};

/*
 * InferCept's choice, on this machine's numbers. Without pressure: keep
 * (memory nobody needs costs nothing). With pressure, the cheaper way of
 * giving the memory back: spill when the wait outlasts writing and
 * restoring it (with the margin: by the class's distribution, with
 * probability 1 - max_stall, else by its mean) and restoring is cheaper
 * than recomputing; discard when recomputing is cheaper than the disk
 * (short contexts, slow disks) or there is no disk; keep when the wait is
 * too short for either to pay (the session returns before the memory
 * could be used).
 */
void kvt_decide(const struct kvt_costs *c, const struct kvt_decision_in *in,
		struct kvt_decision *out);

/* Microseconds to restore kv_bytes at the measured read bandwidth
 * (a conservative 200 MB/s before any measurement). */
uint64_t kvt_restore_us(const struct kvt_costs *c, uint64_t kv_bytes);

/*
 * When a spilled session's prefetch starts (KVFlow): the predicted return
 * (wait start + predicted wait) less the restore time and the margin, in
 * the same clock as wait_start_ns; never before wait_start_ns.
 */
uint64_t kvt_prefetch_at_ns(const struct kvt_costs *c, uint64_t wait_start_ns,
			    uint64_t predicted_wait_us, uint64_t kv_bytes,
			    uint64_t margin_us);

#ifdef KVT_TEST_HOOKS
/*
 * Tests only (the tier built with -DKVT_TEST_HOOKS, never the daemon's):
 * the I/O thread issues at most ios more block or header I/Os, and starts
 * no queued operation while none are left; UINT32_MAX lifts the hold. An
 * operation is then in flight, or a file half written, by construction
 * rather than by the scheduler's timing.
 */
void kvt_test_hold(struct kvt *t, uint32_t ios);
/* Every transfer moves at most bytes (0: all it is asked), as a short
 * read or write would: the rest goes again. */
void kvt_test_piece(struct kvt *t, uint32_t bytes);
/* The next n completions that moved bytes read as -EAGAIN instead (the
 * transfer is made again, as a refused one would be). */
void kvt_test_eagain(struct kvt *t, uint32_t n);
#endif

#ifdef __cplusplus
}
#endif
#endif
