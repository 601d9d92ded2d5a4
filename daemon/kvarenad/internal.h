/* SPDX-License-Identifier: MIT */
/*
 * internal.h - the orchestrator's state, shared by its files:
 *   core.c      struct kvd, jobs and their event queues (kvd.h's API)
 *   sched.c     the scheduler thread: admission, steps, results
 *   admit.c     admission (fair, by tenant) and preemption
 *   step.c      steps: token budgets, chunked prefill, results
 *   fair.c      per-tenant weighted fair queueing
 *   conv.c      conversations (one kvarena session each), text matching
 *   hmap.c      the hash table behind every lookup
 *   radix.c     the radix index over token ids (full blocks)
 *   prefix.c    the prefix cache: the radix index tied to the arena
 *   workers.c   stage worker processes: start, restart, health, leases,
 *               non-blocking I/O
 *   router.c    which worker gets a step (Dynamo-style cost)
 *   kstate.c    session states to the kernel (batched), pressure events
 *   toolwait.c  tool classes and predicted waits
 *   tiering.c   where each conversation's KV lives (arena, disk, none):
 *               keep/spill/discard, restore, prefetch (daemon/tier/)
 *   agent.c     server-side tools: declarations, the sandbox, tool rounds
 *   mcp.c       MCP tool servers ([mcp.NAME]) for agent.c
 *   metrics.c   counters, histograms, Prometheus text
 *   audit.c     test builds: the counters above checked every turn
 *
 * The lock rules. One lock (kvd.lock) guards all of the orchestrator's
 * state; everything done under it is bounded by the work at hand, never
 * by a peer:
 *   - no blocking I/O: worker sockets are non-blocking (a message is
 *     assembled across reads, written across writes), so a worker that
 *     stops mid-message costs nothing until its lease kills it;
 *   - no waitpid (killed workers are reaped after the lock is dropped),
 *     no tokenizing (prompts are tokenized by the submitting thread, tool
 *     results by the scheduler thread between turns, both unlocked);
 *   - no scans over every conversation or cache block: lookups are hash
 *     probes (hmap.c), the radix index walks a prompt once, retention
 *     deadlines are a heap, eviction pops a list;
 *   - allocation only of what the turn produces (events, growing a
 *     conversation's arrays), never proportional to the whole state.
 * The job event queues have locks of their own (core.c), taken under
 * kvd.lock, never the other way round; the tool pool's queue lock is never
 * held with it (agent.c). test_orch's "stall" test checks the first rule
 * with a worker that stops mid-message.
 */
#ifndef KVD_INTERNAL_H
#define KVD_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "chat.h"
#include "config.h"
#include "kv_arena.h"
#include "kvarena_toolwait.h"
#include "kvd.h"
#include "kvconstrain.h"
#include "kvengine.h"
#include "proto.h"

struct kvd_job;
struct kvd_conv;

/* ---- hash map (hmap.c) -------------------------------------------------- */

/* Intrusive, chained, keyed by a caller's 64-bit hash (equal keys are
 * candidates: callers verify). */
struct kvd_hnode {
	struct kvd_hnode *next;
	uint64_t key;
};

struct kvd_hmap {
	struct kvd_hnode **b;
	uint32_t mask, n;
};

int kvd_hmap_init(struct kvd_hmap *m, uint32_t expect);
void kvd_hmap_fini(struct kvd_hmap *m);
void kvd_hmap_add(struct kvd_hmap *m, struct kvd_hnode *e, uint64_t key);
void kvd_hmap_del(struct kvd_hmap *m, struct kvd_hnode *e);
struct kvd_hnode *kvd_hmap_first(const struct kvd_hmap *m, uint64_t key);
struct kvd_hnode *kvd_hmap_next(const struct kvd_hnode *e);
uint64_t kvd_mix64(uint64_t x);

/* ---- the radix index over token ids (radix.c) ---------------------------- */

struct kvd_rnode {
	struct kvd_hnode h;		/* first: in kvd_radix.map */
	struct kvd_rnode *parent;	/* NULL: the tenant's first block */
	struct kvd_rnode *lru_prev, *lru_next;
	uint64_t serial;		/* names it in its children's keys */
	uint32_t tenant, block, depth, n_children;
	uint8_t busy;			/* a conversation holds its block */
	uint8_t on_lru;			/* an evictable leaf */
	int32_t tokens[];		/* block_tokens ids */
};

struct kvd_radix {
	struct kvd_hmap map;
	struct kvd_rnode **by_block;
	uint32_t blocks_total, bt, n, n_evictable;
	uint64_t seed, serial;
	uint64_t removals;		/* nodes that have left: kvd_rmatch */
	struct kvd_rnode *lru_head, *lru_tail;	/* head: evicted first */
};

int kvd_radix_init(struct kvd_radix *r, uint32_t block_tokens, uint32_t blocks_total,
		   uint64_t seed);
void kvd_radix_fini(struct kvd_radix *r);
uint64_t kvd_radix_key(const struct kvd_radix *r, uint32_t tenant,
		       const struct kvd_rnode *parent, const int32_t *tokens);
/* The node for this block of tokens under parent, verified, or NULL. */
struct kvd_rnode *kvd_radix_child(const struct kvd_radix *r, uint32_t tenant,
				  const struct kvd_rnode *parent, const int32_t *tokens);
/* Full blocks of tokens cached from the tenant's root (<= n_blocks); their
 * nodes to path when not NULL. */
uint32_t kvd_radix_match(const struct kvd_radix *r, uint32_t tenant, const int32_t *tokens,
			 uint32_t n_blocks, struct kvd_rnode **path);
/*
 * A sequence's last match, kept from one lookup to the next (a queued
 * turn is looked up in every scheduler turn until it is admitted: the
 * walks were 29% of the scheduler's CPU in a 100-agent run). While no
 * node has left the index since, its path stands (an insertion only
 * lengthens a match), so the next lookup goes on from its end. Zeroed:
 * nothing matched yet. Its owner zeroes it when the sequence's tokens
 * change other than by appending.
 */
struct kvd_rmatch {
	uint64_t removals;		/* the index's count when taken */
	struct kvd_rnode *last;		/* the deepest node matched, or NULL */
};

/* kvd_radix_match, going on from m and leaving the match in it; path
 * (when not NULL) gets the nodes from the last one's parents. */
uint32_t kvd_radix_match_from(const struct kvd_radix *r, struct kvd_rmatch *m, uint32_t tenant,
			      const int32_t *tokens, uint32_t n_blocks, struct kvd_rnode **path);
/* A new node (no equal one may exist: kvd_radix_child first); NULL when
 * out of memory or the block is indexed already. */
struct kvd_rnode *kvd_radix_insert(struct kvd_radix *r, uint32_t tenant,
				   struct kvd_rnode *parent, const int32_t *tokens,
				   uint32_t block, int busy);
struct kvd_rnode *kvd_radix_by_block(const struct kvd_radix *r, uint32_t block);
void kvd_radix_set_busy(struct kvd_radix *r, struct kvd_rnode *n, int busy);
/* The next block to evict (an unheld leaf), or NULL. */
struct kvd_rnode *kvd_radix_victim(const struct kvd_radix *r);
/* Forgets a leaf (its parent may become evictable, first in line). */
void kvd_radix_remove(struct kvd_radix *r, struct kvd_rnode *n);

/* ---- conversations ---------------------------------------------------- */

/* markup.c: a conversation's text, byte by byte */
enum { KVD_TEXT_MARKUP, KVD_TEXT_PLAIN, KVD_TEXT_ANY };
/* The markup of a piece of text that is [off, off + len) of a prompt
 * whose markup spans these are (NULL where a piece is tokenized the old
 * way, without special tokens). */
struct kvd_markup {
	const struct kvd_span *spans;
	size_t n, off;
};
/* Tokenizes [off, off + len) of a prompt (text) with special tokens only
 * in its markup; *ids malloc'd; the count or a negative errno. Read-only:
 * called without the orchestrator's lock. */
int kvd_markup_tokenize(const struct kvd *d, const char *text, size_t len,
			const struct kvd_span *markup, size_t n_markup, size_t off,
			int add_bos, int32_t **ids);
/* The prompt's token count (BOS included), markup known. */
int kvd_markup_count(const struct kvd *d, const char *text, size_t len,
		     const struct kvd_span *markup, size_t n_markup);
/* A token's text bytes, a control marker's text included. */
int kvd_markup_token_bytes(const struct kvd *d, int32_t id, char *buf, size_t size);
/* The kinds of [off, off + len) of a prompt's bytes (known: the request
 * marked its markup; else all KVD_TEXT_ANY). */
void kvd_markup_classes(uint8_t *cls, size_t len, const struct kvd_span *markup,
			size_t n_markup, size_t off, int known);
/* How far [0, l) of a conversation's text agrees with a prompt's kinds. */
size_t kvd_markup_agree(const uint8_t *cls, size_t l, const struct kvd_span *markup,
			size_t n_markup, int known);

/* Text tokenized for appending to a conversation (conv.c), made without
 * the orchestrator's lock. ends[i]: offset in text after token i, or
 * UINT32_MAX when that is not a text boundary; cls: each text byte's
 * kind (KVD_TEXT_*). */
struct kvd_piece {
	int32_t *ids;
	uint32_t *ends;
	uint32_t n;
	char *text;
	uint8_t *cls;
	size_t len;
};

/* A prefix of a prompt that may be a conversation's whole text. */
struct kvd_cand {
	uint32_t len;
	uint64_t key;
};
#define KVD_MAX_CANDS 32
/*
 * The counting filter in front of the text index: each indexed text's key
 * counts in KVD_TEXT_PROBES of its counters, and a prompt's prefix is a
 * candidate only where all of them are set. Every byte of a prompt probes
 * it, and a false positive past a conversation's end takes one of the
 * candidates' places, so it must stay sparse when full: 64 counters a
 * conversation of [limits] max_sessions, 2^16 to 2^22 of them (with one
 * probe and 2^16, a 64 KiB tool result with 1000 conversations indexed
 * had ~1000 false positives, and the agent's own was not a candidate).
 */
#define KVD_TEXT_PROBES 3
#define KVD_TEXT_FILTER_PER_CONV 64
#define KVD_TEXT_FILTER_MIN_BITS 16
#define KVD_TEXT_FILTER_MAX_BITS 22

/* Why a request found its KV still on disk (a restore stall): what the
 * prefetch of its tool wait did (tiering.c, stall_cause()). */
enum kvd_stall_cause {
	KVD_STALL_NO_PREFETCH,	/* none armed: prefetch off, or no prediction */
	KVD_STALL_EARLY,	/* the tool returned before the prefetch was due */
	KVD_STALL_NO_ROOM,	/* the prefetch was due and found no room */
	KVD_STALL_READING,	/* the prefetch's read was still running */
	KVD_STALL_TAKEN,	/* prefetched, then evicted again before the return */
	KVD_STALL_NO_SLACK,	/* due, but its room was the turns' until the return */
	KVD_STALL_CAUSES
};
extern const char *const kvd_stall_cause_names[KVD_STALL_CAUSES];

/* Where the arena's blocks were when a tool's result found its KV on disk
 * and its prefetch had found no room (tiering.c, room_census()): a full
 * arena, or room the prefetch could not take. */
enum kvd_room_holder {
	KVD_ROOM_FREE,		/* free blocks */
	KVD_ROOM_WANTED,	/* of them, what queued work lacked */
	KVD_ROOM_CACHED,	/* the prefix cache's, no conversation's */
	KVD_ROOM_RUNNING,	/* conversations with a turn admitted */
	KVD_ROOM_QUEUED,	/* conversations whose turn waits for admission */
	KVD_ROOM_HELD,		/* prefetched for a tool's return */
	KVD_ROOM_MOVING,	/* idle, being written or read */
	KVD_ROOM_SOONER,	/* idle, expected back sooner: not taken */
	KVD_ROOM_LATER,		/* idle, expected back later: takeable */
	KVD_ROOM_HOLDERS
};
extern const char *const kvd_room_holder_names[KVD_ROOM_HOLDERS];

struct kvd_conv {
	struct kvd_hnode by_id;		/* d->conv_by_id */
	struct kvd_hnode by_sid;	/* d->conv_by_sid, while it has KV */
	struct kvd_hnode by_text;	/* d->conv_by_text, while idle */
	struct kvd_hnode by_pending;	/* d->pending, while registered */
	char id[40];			/* "sess_" + 24 hex digits */
	uint32_t tenant;
	struct kve_arena_session as;	/* as.s.n_tokens: positions with KV */
	int has_kv;			/* a kvarena session exists */
	int32_t *tokens;		/* the conversation so far */
	uint32_t *tok_end;		/* text offset after each token;
					 * UINT32_MAX: not a text boundary */
	uint32_t n_tokens, cap_tokens;
	char *text;			/* the text the tokens stand for */
	size_t text_len, text_cap;
	uint64_t text_hash;		/* FNV-1a of text, for the text index */
	int text_indexed;
	uint8_t *cls;			/* per text byte: KVD_TEXT_* (markup.c) */
	struct kvd_rnode **nodes;	/* radix node of each full block offered */
	struct kvd_rmatch match;	/* its tokens' last lookup in the index */
	uint32_t n_offered;		/* full blocks offered to the cache */
	int pending_registered;		/* computing pending_block for others */
	uint32_t pending_block;
	struct kvd_rnode *pending_parent;
	struct kvd_job *job;		/* the job using it, or NULL */
	uint32_t kstate;		/* KVA_STATE_* last sent to the kernel */
	uint32_t kclass;		/* with it: its tool class, */
	uint64_t kexpected_us;		/* expected wait (or a later prediction) */
	uint32_t ktier;			/* and KVA_TIER_* (kstate.c) */
	uint32_t tool_class;
	uint64_t wait_started_ns;	/* TOOL_WAIT entry, for measuring */
	uint64_t wait_ended_ns;		/* the client's tool result arrived */
	uint64_t last_used_ns;
	uint64_t t_start_ns;		/* its first request: its jobs' admission order */
	uint64_t deadline_ns;		/* KV retention ends */
	uint32_t dl_index;		/* in d->deadlines, UINT32_MAX: none */
	int delete_pending;		/* DELETE while a step held a lease */
	int has_workdir;		/* server-side tools made its work dir */
	uint64_t tool_disk;		/* its bytes, out of its tenant's tool disk */
	uint32_t tool_tslot;		/* that tenant's entry in the tool pool */
	/* tiering.c: the KV's other places */
	uint64_t tier_key;		/* its spill files' key (random) */
	struct kvd_tticket *tier_op;	/* a spill or restore in flight */
	uint64_t tier_file;		/* a spill file of tokens [0, tier_file_tokens) */
	uint32_t tier_file_tokens;
	uint64_t tier_file_hash;
	uint64_t *tier_bhash;		/* its blocks' chained token hashes */
	uint32_t tier_file_skip;	/* leading blocks not in it: the cache's */
	uint32_t tier_lost_tokens;	/* KV dropped: recomputed when it returns */
	uint32_t tier_timer[2];		/* prefetch, overrun: heap index + 1 */
	uint32_t tier_prefetched;	/* prefetches for this wait's prediction */
	uint8_t tier_hold;		/* KV prefetched for a return not come yet */
	uint8_t tier_spill_evicting;	/* free the blocks when the spill is done */
	uint8_t tier_setup;		/* a restore is finding its blocks */
	uint8_t tier_missed;		/* this return's miss is counted */
	uint8_t stall_cause;		/* why the stall's KV was not back (KVD_STALL_*) */
	uint16_t tier_noroom;		/* prefetch tries that found no room, this wait */
	uint8_t tier_noslack;		/* its prefetch left the room to the turns */
	uint8_t tier_due;		/* its prefetch is due and lacks room (tr->due) */
	uint8_t tool_overran;		/* this wait ran past its first prediction */
	uint32_t stall_early_ms;	/* KVD_STALL_EARLY: the return came this much before */
	/* since its last turn's admission, for the next turn's usage */
	uint32_t turn_restored;		/* tokens of KV the tier brought back */
	uint32_t turn_stall_ms;		/* the next turn waited this long for it */
	uint64_t tool_pred_us;		/* the tool wait's predicted length */
	uint64_t stall_since_ns;	/* a request waits for a restore since */
	struct kvd_conv *prev, *next;	/* d->convs, most recently used first */
};

/* ---- jobs ------------------------------------------------------------- */

enum kvd_job_state {
	JOB_QUEUED = 0,		/* waiting for admission: no blocks yet */
	JOB_RUNNING,		/* admitted: positions [n_sched, conv n_tokens)
				 * wait to be computed, the rest is in steps
				 * in flight or done */
	JOB_KV_LOAD,		/* copy mode: KV bytes wait for a decode worker */
	JOB_TOOL_RUNNING,	/* server-side tools run (agent.c), no worker */
	JOB_TOOL_RESULTS,	/* their text waits to be tokenized */
	JOB_KV_WAIT,		/* its KV is being restored (tiering.c) */
	JOB_PREEMPTED,		/* KV given back under pressure: readmitted
				 * (and recomputed) before queued jobs */
	JOB_FINISHED,
};

struct kvd_qev;			/* core.c: a queued event */

struct kvd_job {
	int refs;			/* API side + scheduler side + steps */
	/* what the workers know this job's current round by: never reused
	 * (a freed job's address is, and a worker's matcher cache must never
	 * take another sequence's grammar state for this one's) */
	uint64_t seq_id;
	enum kvd_job_state state;
	struct kvd *d;
	struct kvd_conv *conv;		/* claimed (or made) at submit */
	char sid[40];			/* its id, for the DONE event */
	char request_id[64];
	uint32_t tenant;
	uint64_t route_hint;		/* prompt_cache_key / user: routing only */
	char *session_key;		/* its text (test hooks: the replayer's key) */
	/* the request: its tokens not yet in the conversation */
	struct kvd_piece piece;
	int piece_appended;
	struct kvd_sampling s;
	char *stop[KVD_MAX_STOP];
	uint32_t stop_seq;		/* 1 + the stop sequence that ended it */
	uint32_t max_new;		/* after clipping to the context */
	/* server-side tools */
	uint32_t server_tools;		/* kvd_request.server_tools, tenant-checked */
	uint32_t tool_rounds;		/* rounds run so far */
	size_t round_start;		/* gen offset where this round's text starts */
	uint32_t round_tokens;		/* tokens sampled in this round */
	char *tool_text;		/* JOB_TOOL_RESULTS: text to append */
	size_t tool_text_len;
	struct kvd_span *tool_markup;	/* its markup (the template's, not the tools') */
	size_t tool_n_markup;
	int tool_rc;			/* its tokenizing, done unlocked */
	/* structured decoding: the spec the workers compile, and the tokens
	 * generated so far (a worker without the matcher replays them) */
	struct kvd_constraint_wire cw;
	struct kvd_jsampler *smp;	/* sampling.c: top-k, min-p, biases,
					 * penalties; NULL: none */
	char *c_json, *c_name;
	int32_t *hist;
	uint32_t n_hist, cap_hist;
	/* progress */
	uint32_t n_sched;		/* positions in steps sent (>= the KV) */
	uint32_t inflight;		/* steps in flight holding it */
	int worker;			/* the worker of those steps, -1 */
	uint32_t group;			/* bisection: only with its group, 0: any */
	uint32_t fails;			/* steps failed with it alone */
#ifdef KVD_TEST_HOOKS
	int test_group_ok;		/* a step of its group succeeded since it
					 * was put in one (audit.c) */
#endif
	uint64_t order;			/* admission order */
	/* its conversation's start (admit.c's queued_key): running jobs'
	 * prompt chunks go in this order, and preemption takes the last */
	uint64_t place;
	uint32_t preempt_lost;		/* KV positions preemption took, to recompute */
	int tried;			/* admission looked at it this turn */
	int waited_prefix;		/* waited for a shared prefix (counted once) */
	struct kvd_job *fork_of;	/* kvd_request.fork_of, a reference held
					 * until this one's first admission */
	int in_prefill;			/* new prompt tokens: its next sample is a
					 * prefill's hand-off to decoding */
	uint64_t rng;
	uint32_t n_prompt, n_cached, n_gen;
	uint32_t n_restored, stall_ms;	/* usage: the tier's part of n_cached */
	struct kve_detok detok;
	char *gen;			/* generated text */
	size_t gen_len, gen_cap, emitted;
	size_t text_base;		/* conv text length where the reply starts */
	int cancelled;
	int failed;			/* ended in an error: its KV is not trusted */
	int let_go;			/* ended with a step in flight: the
					 * conversation goes when it answers */
	/* copy mode: KV bytes from prefill, for a decode worker */
	void *kv_payload;
	size_t kv_payload_len;
	/* timing */
	uint64_t t_submit, t_first, t_last, t_wait;
	uint64_t t_admit;		/* admitted (its blocks taken) */
	/* events to the API thread */
	pthread_mutex_t qlock;
	pthread_cond_t qcond;
	struct kvd_qev *q_head, *q_tail;
	struct kvd_qev *cur;		/* returned by the last kvd_job_next */
	struct kvd_qev *end_ev;		/* its DONE or ERROR, made at submit */
	int lost_event;			/* an event could not be made: it ends
					 * in an error, not DONE */
	int q_closed;
	struct kvd_waiter *waiter;	/* kvd_job_next_any's, rung by pushes */
	void (*notify)(void *arg);	/* kvd_job_set_notify's, under qlock */
	void *notify_arg;
	int wake_queued;		/* in d->wakes (under qlock) */
	struct kvd_job *next;		/* d->jobs */
};

/* ---- workers ---------------------------------------------------------- */

enum kvd_wstate { W_DOWN = 0, W_STARTING, W_READY };

#define KVD_MAX_DEPTH 2			/* steps in flight per worker */

/* One sequence of a step in flight. */
struct kvd_sent {
	struct kvd_job *j;
	uint64_t seq_id;
	uint32_t n_kv;			/* positions before this step's */
	uint32_t n_new;
	uint32_t flags;			/* KVD_SEQ_* */
};

struct kvd_wstep {
	uint64_t id;
	uint32_t kind;			/* KVD_STEP_*, 0: a KV_LOAD */
	int void_;			/* an earlier step failed: ignore its answer */
	uint32_t group;			/* bisection group of its jobs, 0: none */
	uint32_t n_seq;
	uint32_t tokens;		/* tokens it computes (lease, routing) */
	struct kvd_sent *seqs;		/* room for max_seqs */
#ifdef KVD_TEST_HOOKS
	uint64_t test_turn;		/* the steps_build it came from (audit.c) */
	uint32_t test_want;		/* what it was built to take: 1 decode, 2 chunks */
#endif
};

struct kvd_worker {
	int index;
	uint32_t role;			/* KVD_ROLE_*: the stage it prefers */
	enum kvd_wstate state;
	pid_t pid;
	int sock;
	/* steps in flight, oldest first (the worker answers in order) */
	struct kvd_wstep q[KVD_MAX_DEPTH];
	uint32_t q_head, n_q;
	uint64_t head_started_ns;	/* the oldest step's lease runs from here */
	uint32_t q_tokens;		/* router: tokens of the steps in flight */
	struct kvd_msg_rx rx;		/* a message arriving */
	struct kvd_msg_tx tx;		/* bytes not yet written */
	/* health: a worker that keeps failing waits longer before each
	 * restart; once up again it is probed with one step (half-open) */
	uint32_t restarts;
	uint32_t fails_in_row;
	int probing;
	uint64_t next_start_ns;
	uint64_t started_ns, ready_ns;
	char backend[32];
	int remote;			/* a link to a remote host (daemon/remote) */
	uint64_t joined_ns;		/* remote: last seen with a host joined */
};

/* ---- tool classes ------------------------------------------------------ */

#define KVD_MAX_TOOL_CLASSES 256
struct kvd_toolclass {
	char name[64];			/* the tool */
	char tenant[64];		/* whose ("": requests without a tenant) */
	struct kva_toolwait_hist hist;	/* the daemon's own measurements */
};

/* ---- metrics ----------------------------------------------------------- */

#define KVD_HIST_BUCKETS 16
struct kvd_hist {
	uint64_t counts[KVD_HIST_BUCKETS + 1];	/* last: +Inf */
	double sum;
	uint64_t n;
};

struct kvd_metrics {
	uint64_t requests, requests_failed, requests_rejected;
	uint64_t prompt_tokens, cached_tokens, completion_tokens;
	uint64_t prefix_hit_tokens;		/* from the block cache */
	uint64_t session_hit_tokens;		/* from the conversation's own KV */
	uint64_t kv_bytes_copied;		/* between stages */
	uint64_t handoffs;			/* prefill -> decode */
	uint64_t evictions, evicted_blocks, cache_evictions;
	uint64_t evictions_prefetch;	/* of them, for a prefetch's room */
	uint64_t kv_expired;		/* KV out of the arena: retention over */
	uint64_t pressure_events;
	uint64_t kernel_events_dropped, kernel_resyncs;	/* kstate.c's resync */
	uint64_t worker_restarts, lease_expiries;
	uint64_t tool_waits;
	uint64_t tool_runs[KVD_N_TOOLS][8];	/* by tool and enum kvs_exit */
	uint64_t tool_rounds, tool_rounds_exhausted, tool_result_tokens;
	uint64_t mcp_calls[2], mcp_restarts;	/* [0] ok, [1] tool error */
	uint64_t steps_prefill, steps_decode, steps_mixed, decode_seqs;
	uint64_t prefill_chunks, step_tokens;	/* prompt chunks, tokens in steps */
	uint64_t preemptions, preempted_tokens;	/* recomputed on readmission */
	uint64_t preempt_recomputed_tokens;	/* ... of them, computed again */
	uint64_t step_failures, bisections, requests_failed_worker;
	uint64_t worker_failures[3];		/* by KVD_ROLE_* */
	uint64_t prefill_waits;			/* admissions that waited for a shared prefix */
	uint64_t admit_given_back;		/* KV opened at admission, given back: no room */
	uint64_t admit_ahead_waits;		/* turns admission stopped at prefill_ahead */
	uint64_t prefill_pending_max;		/* most prompt tokens admitted, not computed */
	uint64_t fork_copied_tokens;		/* n > 1: prompt KV copied from choice 0 */
	uint64_t multi_prefill_steps;		/* steps with chunks of 2+ prompts */
	uint32_t prefill_busy_max;		/* prefill workers computing at once, most seen */
	uint64_t tenant_tokens[KVD_MAX_TENANTS + 1];	/* scheduled, for fairness */
	struct kvd_hist ttft, tpot, toolwait, prefill_ms, step_ms;
	/* tiering.c */
	uint64_t tier_decisions[3];		/* keep, spill, discard at tool waits */
	uint64_t tier_spills, tier_spill_bytes, tier_spill_failures;
	uint64_t tier_spills_clean;		/* evictions a disk copy made free */
	uint64_t tier_spills_deferred;		/* spill decisions left to the eviction */
	uint64_t tier_restores, tier_restore_bytes, tier_restore_failures[4];
	uint64_t tier_restore_cached_tokens;	/* restored by sharing cached blocks */
	uint64_t tier_prefetches, tier_restore_stalls, tier_discards;
	uint64_t tier_prefetches_deferred;	/* prefetches given up: no slack */
	uint64_t tier_stall_causes[KVD_STALL_CAUSES];	/* restore stalls by cause */
	uint64_t tier_noroom_returns;		/* no_room returns, and their census */
	uint64_t tier_noroom_blocks[KVD_ROOM_HOLDERS];
	uint64_t tier_recomputed_tokens, tier_disk_evictions, tool_overruns;
	uint64_t tool_repredictions;		/* each overrun's new prediction */
	uint64_t idle_byte_s_ended;		/* idle byte-seconds of closed sessions */
	uint64_t kv_misses;			/* a request found its KV out of the arena */
	struct kvd_hist tier_restore_ms, tier_restore_stall_ms;
};

/* tiering.c's numbers for /metrics */
struct kvd_tier_gauges {
	uint32_t sessions[3];		/* arena, disk, none */
	uint64_t disk_bytes, disk_cap, files, direct_fallbacks;
	double write_bps, read_bps, recompute_tps;
};

/* The last scheduler turns' durations, for exact p50/p99 (metrics.c). */
#define KVD_STEP_RING 4096

/* ---- the orchestrator -------------------------------------------------- */

struct kvd_state_change {
	struct kva_session_state st;
};

struct kvd {
	struct kvd_config cfg;
	const char *self_exe;		/* to exec workers */
	pthread_mutex_t lock;
	pthread_t sched;
	int wake_fd;			/* eventfd: new job, cancel, stop */
	int stopping;			/* drain: refuse new, finish running */
	int stop_now;
	int ready;
	int health;			/* kvd_health(): read without the lock */
	/* model and KV */
	struct kve_model *model;
	struct kve_tokenizer *tok;
	struct kvc_vocab *cvocab;	/* constraint compiler (checks at submit) */
	struct chat_template *chat;	/* the model's family (daemon/chat) */
	uint32_t vocab, ctx_len;	/* ctx_len: the model's, bounded by the arena */
	uint32_t model_ctx;
	int32_t eos, eot;		/* end of sequence, end of turn (-1) */
	int32_t eom;			/* the family's second end of turn (Llama's
					 * <|eom_id|>; -1) */
	struct kve_arena_kv *kv;
	struct kva_arena *arena;
	struct kve_arena_geom geom;
	int data_fd;			/* the arena's dma-buf / memfd */
	enum kva_backend backend;
	uint32_t *block_users;		/* conversations holding each block */
	uint64_t kv_serial;
	/* kernel */
	struct kva_ring *ring;
	struct kva_event ev;		/* the parked WAIT_EVENT's buffer */
	uint64_t ev_ack;
	int ev_parked;
	uint64_t resync_last_ns;	/* kstate.c: a burst of drops logs once */
	struct kvd_state_change *pending_st;
	uint32_t n_pending, cap_pending;
	int kstate_update;		/* the arena takes KEEP and TIER */
	struct kva_toolwait *tw;	/* eBPF tool-wait, optional */
	struct kvd_tiering *tier;	/* tiering.c */
	/* conversations */
	struct kvd_conv *convs, *convs_tail;	/* most recently used first */
	uint32_t n_convs;
	struct kvd_hmap conv_by_id, conv_by_sid, conv_by_text;
	uint64_t text_seed;
	uint16_t *text_filter;		/* counts of text keys (KVD_TEXT_PROBES each) */
	uint32_t text_filter_mask;	/* its size - 1 */
	struct kvd_conv **deadlines;	/* a min-heap by deadline_ns */
	uint32_t n_deadlines;
	/* the prefix cache */
	struct kvd_radix radix;
	uint64_t cache_sid;
	int has_cache_sid;
	struct kvd_hmap pending;	/* prefills in flight, by their next block */
	/* jobs */
	struct kvd_job *jobs, *jobs_tail;	/* every job the scheduler holds, oldest first */
	pthread_cond_t idle_cond;	/* a job finished (kvd_drain waits) */
	uint32_t n_queued;
	uint64_t next_order;
	struct kvd_job **wakes;		/* core.c: consumers the turn woke */
	uint32_t n_wakes, cap_wakes;
	struct kvd_admit_cand *admit_buf;	/* admit.c: a turn's candidates */
	size_t admit_cap;
	uint32_t room_wanted;		/* blocks waiting work lacked at the last
					 * admission (a prefetch leaves them) */
	uint64_t hold_ns;		/* a job's blocks held, admission to its
					 * end: moving mean (sched.c, job_ended) */
	uint32_t prefetch_reserve;	/* blocks admission kept for prefetches
					 * due within hold_ns, last turn */
	uint32_t admit_reserve;		/* room_for's: free blocks to leave */
	int admit_reserved;		/* room_for: held back for the reserve */
	uint32_t next_group;
	/* workers */
	struct kvd_worker *workers;
	uint32_t n_workers;
	uint32_t max_seqs;		/* sequences per step */
	uint64_t next_step_id;
	uint64_t next_seq_id;	/* names a job's round to the workers */
	uint64_t stage_down_since[3];	/* by KVD_ROLE_*: no working worker */
	pid_t *reap;			/* killed workers to wait for (unlocked) */
	uint32_t n_reap;
	/* tenants */
	/* per tenant, by kvd_tenant_slot() (0: nobody's) */
	uint32_t tenant_blocks[KVD_MAX_TENANTS + 1];
	double tenant_tokens[KVD_MAX_TENANTS + 1];	/* token bucket */
	uint64_t tenant_refill_ns[KVD_MAX_TENANTS + 1];
	double tenant_vt[KVD_MAX_TENANTS + 1];		/* fair queueing: service / weight */
	uint32_t tenant_jobs[KVD_MAX_TENANTS + 1];	/* queued or running */
	struct kvd_toolclass classes[KVD_MAX_TOOL_CLASSES];
	uint32_t n_classes;
	/* toolwait_state.c: the table to write, copied under the lock */
	struct kvd_toolclass *tws_snap;	/* NULL: [kv] toolwait_state unset */
	uint32_t tws_n;
	uint64_t tws_waits;		/* m.tool_waits at the last copy */
	uint64_t tws_next_ns;		/* the next copy's time */
	int tws_pending, tws_failing;
	struct kvd_metrics m;
	uint32_t step_us[KVD_STEP_RING];	/* scheduler turns, microseconds */
	uint64_t n_step_us;
	struct kvd_agent *agent;	/* server-side tools, or NULL */
	/* daemon/remote: remote worker hosts, KV events (hooks.h) */
	int remote_lfd;			/* where hosts join, or -1 */
	uint64_t remote_started_ns;
	struct kvr_events *kvev;	/* NULL: no [events] endpoint */
	char startup_note[256];
	char fingerprint[24];		/* kvd_system_fingerprint() */
#ifdef KVD_TEST_HOOKS
	/* test_orch only: replies fed in place of the model's (sched.c) */
	char *test_replies[8];
	uint32_t n_test_replies;
	int test_hold_admit;		/* kvd_admit admits nothing (admit.c) */
	int test_audit;			/* KVD_AUDIT: check the books every turn */
	int test_arena_shared;		/* the test takes or ends the arena's blocks
					 * itself: audit.c leaves the arena's count */
	int test_build_short;		/* this turn's steps_build lacked memory */
	uint64_t test_turn;		/* steps_builds so far (audit.c) */
	int test_send_fail;		/* worker index + 1: its next step is not sent */
	int test_reserve_fail;		/* -errno: the next reservation fails so */
#endif
};

uint64_t kvd_now_ns(void);

#ifdef KVD_TEST_HOOKS
/* audit.c: the scheduler's counters against what its holders hold; aborts
 * on a difference (test builds, KVD_AUDIT set) */
void kvd_audit(struct kvd *d);
#endif

/* A tenant by its id (its stable identity, config.c: from its name, never
 * its place in the file) as the index of its per-tenant state (budgets,
 * blocks held) and 1 + its index in cfg.tenants; 0 for tenant 0 (no keys
 * configured) and for an id no longer configured. */
static inline uint32_t kvd_tenant_slot(const struct kvd *d, uint32_t id)
{
	for (uint32_t i = 0; id && i < d->cfg.n_tenants; i++)
		if (d->cfg.tenants[i].id == id)
			return i + 1;
	return 0;
}

/* core.c: the orchestrator's life (main.c) */
int kvd_create(const struct kvd_config *cfg, const char *self_exe,
	       struct kvd **dp, char *err, size_t errlen);
/* Stop admitting; wait up to timeout_ms for running jobs; 0 when drained. */
int kvd_drain(struct kvd *d, int timeout_ms);
void kvd_destroy(struct kvd *d);
/* Tenants and budgets, the eviction policy and the tiers' switches may
 * change on SIGHUP. */
void kvd_set_tenants(struct kvd *d, const struct kvd_config *cfg);

/* core.c */
void kvd_job_put(struct kvd_job *j);			/* drop a reference */
/* The scheduler's turn: the consumers its events wake are woken when it
 * lets go of d->lock (kvd_wakes_flush, then kvd_wakes_done with the
 * lock held again). */
void kvd_wakes_defer(struct kvd *d, int on);
void kvd_wakes_flush(struct kvd *d);
void kvd_wakes_done(struct kvd *d);
void kvd_job_emit_token(struct kvd_job *j, const char *text, size_t n,
			int32_t tok, float lp, const struct kvd_top *top,
			uint32_t n_top);
void kvd_job_emit_done(struct kvd_job *j, enum kvd_finish f);
void kvd_job_emit_tool_run(struct kvd_job *j, const struct kvd_tool_run *tr);
void kvd_job_emit_error(struct kvd_job *j, enum kvd_err_kind kind,
			const char *msg);
void kvd_wake(struct kvd *d);
void kvd_tenant_charge(struct kvd *d, uint32_t tenant, uint32_t tokens);

/* sched.c: the scheduler thread */
void *kvd_sched_main(void *arg);
/* A job's round (or the job) ends; its conversation is let go. */
void kvd_job_finish(struct kvd *d, struct kvd_job *j, enum kvd_finish f);
void kvd_job_fail(struct kvd *d, struct kvd_job *j, enum kvd_err_kind kind,
		  const char *msg);
/* The ended job's conversation is kept for later or forgotten; once no
 * step of it is in flight. */
void kvd_job_let_go(struct kvd *d, struct kvd_job *j);
/* A sampled token of a running job (or -1 with KVD_SEQ_SAMPLE unset). */
void kvd_on_token(struct kvd *d, struct kvd_job *j, int32_t tok, float lp,
		  const struct kvd_top *top, uint32_t n_top);

/* sched.c: a tool round's KV is back (tiering.c): its results prefill. */
void kvd_resume_round(struct kvd *d, struct kvd_job *j);

/* admit.c: admission, preemption */
void kvd_admit(struct kvd *d);
/* Blocks for the job's positions up to total, preempting lower-priority
 * jobs when the arena is full: 0, 1 when the job itself was preempted (or
 * must wait), <0 when it failed (the job is finished). */
int kvd_reserve_or_preempt(struct kvd *d, struct kvd_job *j, uint32_t total);

/* step.c: steps for the workers */
int kvd_stages_shared(const struct kvd *d);
void kvd_steps_build(struct kvd *d);
/* A worker's oldest step answered (RESULT or KV_LOADED), or failed. */
int kvd_step_result(struct kvd *d, struct kvd_worker *w, uint16_t type, const void *p,
		    size_t len);
/* The worker is gone or failed a step: its steps in flight are void (their
 * jobs go back to their confirmed KV); the oldest is charged (bisection). */
void kvd_steps_void(struct kvd *d, struct kvd_worker *w, int charge_head);

/* fair.c: per-tenant weighted fair queueing */
uint32_t kvd_fair_weight(const struct kvd *d, uint32_t tenant);
double kvd_fair_vt(const struct kvd *d, uint32_t tenant);
void kvd_fair_charge(struct kvd *d, uint32_t tenant, uint32_t tokens);
void kvd_fair_job_added(struct kvd *d, uint32_t tenant);
void kvd_fair_job_gone(struct kvd *d, uint32_t tenant);
/* Larger: lower priority (preempted first): the tenant's service, then
 * the conversation's start (job->place), then admission order. */
int kvd_fair_after(const struct kvd *d, const struct kvd_job *a, const struct kvd_job *b);

/* conv.c */
int kvd_conv_init(struct kvd *d);
void kvd_conv_fini(struct kvd *d);
struct kvd_conv *kvd_conv_new(struct kvd *d, uint32_t tenant);
void kvd_conv_free(struct kvd *d, struct kvd_conv *c);
struct kvd_conv *kvd_conv_find_id(struct kvd *d, const char *id);
struct kvd_conv *kvd_conv_by_sid(struct kvd *d, uint64_t sid);
uint32_t kvd_conv_candidates(const struct kvd *d, uint32_t tenant, const char *prompt,
			     size_t len, struct kvd_cand *out, uint32_t max);
/* m: the prompt's markup (NULL: not known); a conversation is continued
 * only where its text's kinds agree with it */
struct kvd_conv *kvd_conv_claim(struct kvd *d, struct kvd_job *j, const char *prompt,
				const struct kvd_markup *m, const struct kvd_cand *cand,
				uint32_t n);
void kvd_conv_release(struct kvd *d, struct kvd_conv *c);
/* m: the markup of the piece's text (m->off: where the text starts in
 * the prompt the spans are of); NULL: no special tokens, kinds unknown */
int kvd_piece_make(const struct kvd *d, const char *text, size_t len, int add_bos,
		   const struct kvd_markup *m, struct kvd_piece *pc);
void kvd_piece_free(struct kvd_piece *pc);
int kvd_conv_append_piece(struct kvd_conv *c, const struct kvd_piece *pc);
int kvd_conv_truncate(struct kvd *d, struct kvd_conv *c, uint32_t n_tokens);
/* The text grows by len bytes of unknown kind (the model's own reply). */
int kvd_conv_append_text(struct kvd_conv *c, const char *text, size_t len);
int kvd_conv_push_token(struct kvd_conv *c, int32_t tok, const char *text,
			size_t n, int boundary);
int kvd_conv_open_kv(struct kvd *d, struct kvd_conv *c);
void kvd_conv_drop_kv(struct kvd *d, struct kvd_conv *c);
int kvd_conv_reserve_to(struct kvd *d, struct kvd_conv *c, uint32_t total);
/* Blocks for n_more positions after the KV (kvd_conv_reserve_to). */
int kvd_conv_reserve(struct kvd *d, struct kvd_conv *c, uint32_t n_more);
/* The same from free blocks only: no room is made (-ENOSPC), for work
 * that must not take others' room by the kernel's ranking (a prefetch). */
int kvd_conv_reserve_free(struct kvd *d, struct kvd_conv *c, uint32_t n_more);
/* Every block back, the kvarena session kept (its KV is on disk or gone;
 * the kernel still sees its tool wait). */
void kvd_conv_free_blocks(struct kvd *d, struct kvd_conv *c);
/* The kvarena session moves out of c, to be closed by the caller. */
void kvd_conv_detach_kv(struct kvd *d, struct kvd_conv *c, struct kve_arena_session *out);
void kvd_conv_touch(struct kvd *d, struct kvd_conv *c);
uint32_t kvd_conv_blocks(const struct kvd_conv *c);
void kvd_conv_set_deadline(struct kvd *d, struct kvd_conv *c, uint64_t when_ns);
uint64_t kvd_conv_expire(struct kvd *d, uint64_t now);
void kvd_blocks_hold(struct kvd *d, struct kvd_conv *c, uint32_t from, uint32_t to,
		     int delta);

/* prefix.c: the radix index tied to the arena */
int kvd_prefix_init(struct kvd *d);
void kvd_prefix_fini(struct kvd *d);
uint32_t kvd_prefix_lookup(struct kvd *d, struct kvd_conv *c, uint32_t max_tokens,
			   struct kvd_rnode **path);
/* Shares the longest cached run of c's full blocks into c (c has a kvarena
 * session and no blocks yet); returns tokens covered. */
uint32_t kvd_prefix_attach(struct kvd *d, struct kvd_conv *c, uint32_t max_tokens);
/* Offers c's newly filled full blocks to the cache. */
void kvd_prefix_offer(struct kvd *d, struct kvd_conv *c);
void kvd_prefix_offered_to(struct kvd_conv *c, uint32_t n);
int kvd_prefix_cached(const struct kvd *d, uint32_t block);
void kvd_prefix_busy(struct kvd *d, uint32_t block, int busy);
/* Frees cached blocks no conversation holds, least recently used leaves
 * first; returns blocks released. */
uint32_t kvd_prefix_evict(struct kvd *d, uint32_t want);
void kvd_prefix_pending_add(struct kvd *d, struct kvd_conv *c);
void kvd_prefix_pending_drop(struct kvd *d, struct kvd_conv *c);
int kvd_prefix_pending_wait(struct kvd *d, const struct kvd_conv *c, uint32_t n_cached);
/* The cache lets go of blocks, leaves only, in the order given (tiering.c:
 * an evicted conversation's that it alone holds, deepest first: its spill
 * file has them; keeping them would keep their memory). */
void kvd_prefix_drop(struct kvd *d, const uint32_t *blocks, uint32_t count);

/* workers.c */
int kvd_workers_start(struct kvd *d);
void kvd_workers_stop(struct kvd *d);
/* Restarts, leases, health; returns the next time it needs a look. */
uint64_t kvd_workers_tend(struct kvd *d, uint64_t now);
void kvd_worker_lost(struct kvd *d, struct kvd_worker *w, const char *why);
/* Reads what the socket has and handles each whole message. */
void kvd_worker_readable(struct kvd *d, struct kvd_worker *w);
/* Writes queued bytes; a write error loses the worker. */
void kvd_worker_flush(struct kvd *d, struct kvd_worker *w);
/* Queues the step filled in w's next slot (its jobs' bookkeeping done):
 * in flight from here on, even when the worker is lost doing it. */
void kvd_worker_send(struct kvd *d, struct kvd_worker *w);
int kvd_worker_usable(const struct kvd_worker *w);
/* Waits for killed workers (without the lock). */
void kvd_workers_reap(pid_t *pids, uint32_t n);
/* The health /health reports, from the workers' states. */
void kvd_health_update(struct kvd *d, uint64_t now);

/* router.c */
double kvd_route_cost(const struct kvd *d, const struct kvd_worker *w);
/* Sorts workers in the order they are offered steps: prefill stage
 * first, then least cost, then index. */
void kvd_route_order(const struct kvd *d, struct kvd_worker **order, uint32_t n);

/* kstate.c */
int kvd_kstate_init(struct kvd *d);
void kvd_kstate_fini(struct kvd *d);
void kvd_kstate_set(struct kvd *d, struct kvd_conv *c, uint32_t state,
		    uint32_t tool_class, uint64_t expected_us);
void kvd_kstate_flush(struct kvd *d);
/* With the step's changes, where the arena takes them: c's tier (when it
 * moved since the kernel heard it) and a new prediction of its tool wait
 * (from the wait's start), both without a transition. */
void kvd_kstate_tier(struct kvd *d, struct kvd_conv *c);
void kvd_kstate_repredict(struct kvd *d, struct kvd_conv *c, uint64_t expected_us);
int kvd_kstate_fd(struct kvd *d);
void kvd_kstate_poll(struct kvd *d);
uint32_t kvd_blocks_free(struct kvd *d);
/* Frees blocks until want are free: cache first, then victim sessions
 * ranked by the kernel's policy (idle ones only). Returns blocks free after. */
uint32_t kvd_make_room(struct kvd *d, uint32_t want);
/* Room for need more blocks in a tenant's budget ([tenant.*] kv_blocks):
 * its idle conversations' KV, least recently used first, until the
 * budget has it. Returns blocks released. */
uint32_t kvd_make_room_tenant(struct kvd *d, uint32_t tenant, uint32_t need);

/* toolwait.c */
/* A tool's class for a tenant (its id, 0: none): each tenant's tools
 * have classes of their own, so one tenant's waits shape neither the
 * kernel's nor the daemon's prediction for another (toolwait.c). */
uint32_t kvd_toolclass(struct kvd *d, uint32_t tenant, const char *name, size_t len);
uint64_t kvd_toolwait_predict_us(struct kvd *d, uint32_t tool_class);
/* Expected time left of a wait that has lasted elapsed_us (hint: its
 * prediction at the start): the class histogram's conditional mean. */
uint64_t kvd_toolwait_remaining_us(struct kvd *d, uint32_t tool_class, uint64_t elapsed_us,
				   uint64_t hint_us);
/* P(a wait that has lasted elapsed_us lasts horizon_us more), from the
 * class's histogram; -1 when it cannot say (fewer than 8 samples, or the
 * wait outlived every one recorded). */
double kvd_toolwait_survival(struct kvd *d, uint32_t tool_class, uint64_t elapsed_us,
			     uint64_t horizon_us);
/* The time h after which a wait that has lasted elapsed_us has ended with
 * probability p (the conditional p-quantile of what is left); -1 unknown. */
int64_t kvd_toolwait_quantile_us(struct kvd *d, uint32_t tool_class, uint64_t elapsed_us,
				 double p);
void kvd_toolwait_record(struct kvd *d, uint32_t tool_class, uint64_t wait_us);
/* The class of (tenant name tn, tool name), 0 if none; *mine: the
 * tenant's other classes, counted on the way. */
uint32_t kvd_toolclass_find(const struct kvd *d, const char *tn, const char *name, size_t len,
			    uint32_t *mine);

/* toolwait_state.c: the tool-wait table across restarts. load at start
 * (never fails the start on a bad file: it says so and starts cold); snap
 * under the lock (a copy, when due and new waits came, or force); flush
 * with the lock dropped, by the thread that snapped (the write). */
int kvd_toolwait_state_load(struct kvd *d);
void kvd_toolwait_state_snap(struct kvd *d, uint64_t now, int force);
void kvd_toolwait_state_flush(struct kvd *d);

/* tiering.c */
struct kvd_tticket;
struct kvd_tiering;
int kvd_tiering_init(struct kvd *d, char *err, size_t errlen);
void kvd_tiering_fini(struct kvd *d);
/* The disk tier's completions (poll), or -1. */
int kvd_tiering_fd(struct kvd *d);
/* Completions, prefetches and overruns due; ms to the next timer or -1. */
int kvd_tiering_poll(struct kvd *d, uint64_t now);
/* c's reply ended in tool calls (wait_started_ns, tool_class set): keep,
 * spill or discard its KV for the predicted wait. */
void kvd_tiering_tool_wait(struct kvd *d, struct kvd_conv *c, uint64_t pred_us);
/* c's job is about to use its KV: 0 go on (what the arena holds is its
 * KV; what it lacks is prefilled), 1 wait (a restore runs), 2 wait for
 * room (its restore found none: a job lacking room, admit.c). */
int kvd_tiering_need_kv(struct kvd *d, struct kvd_conv *c);
/* The kernel ranked c a victim: its blocks go to disk or away. Blocks
 * freed now (a spill frees them when written: c->tier_op is then set). */
uint32_t kvd_tiering_evict(struct kvd *d, struct kvd_conv *c);
/* c's retention is over: to disk if there is one, else released. */
void kvd_tiering_expire(struct kvd *d, struct kvd_conv *c);
/* Spills or restores in flight (blocks will come free or be filled). */
int kvd_tiering_busy(const struct kvd *d);
/* Blocks that eviction spills in flight free when written: room coming. */
uint32_t kvd_tiering_freeing(const struct kvd *d);
/* c's KV was prefetched for its tool's return, which is due: not a
 * victim for another's room while a running job will free some. */
int kvd_tiering_held(struct kvd *d, const struct kvd_conv *c);
/* The earliest start (t_start_ns) of a conversation whose prefetch is
 * due and found no room; UINT64_MAX: none. Admission keeps the room
 * that comes free for it before later conversations' turns (admit.c). */
uint64_t kvd_tiering_due_start(const struct kvd *d);
/* The blocks the prefetches due by until_ns need (spilled conversations
 * waiting on a tool, no request of theirs queued), and the earliest start
 * (t_start_ns) of their conversations (UINT64_MAX: none). */
uint32_t kvd_tiering_reserve(struct kvd *d, uint64_t until_ns, uint64_t *first_start);
/* c lets go of what is in flight (its KV changes or goes). */
void kvd_tiering_abandon(struct kvd *d, struct kvd_conv *c);
/* c is forgotten: its file and timers go. */
void kvd_tiering_forget(struct kvd *d, struct kvd_conv *c);
/* A prefill step computed tokens in ns: the recompute cost. */
void kvd_tiering_prefill_observed(struct kvd *d, uint32_t tokens, uint64_t ns);
/* "arena", "disk" or "none". */
const char *kvd_tiering_tier(const struct kvd_conv *c);
uint32_t kvd_tiering_ktier(const struct kvd_conv *c);	/* KVA_TIER_* */
void kvd_tiering_gauges(struct kvd *d, struct kvd_tier_gauges *g);
/* SIGHUP: [kv] policy, watermarks, ttl_ms; [tier] decisions, prefetch,
 * prefetch_margin_ms. 0 or a negative errno (err says why; nothing
 * changed). Called with d->lock held. */
int kvd_tiering_reload(struct kvd *d, const struct kvd_config *nc, char *err, size_t errlen);

/* agent.c: server-side tools */
struct kvd_round;
/* Before the model is loaded (the sandbox's spawner forks small). */
int kvd_agent_init(struct kvd *d, char *err, size_t errlen);
/* Stops the tool threads (running tools finish first); rounds not done are
 * dropped. Work dirs of conversations freed after this go synchronously. */
void kvd_agent_stop(struct kvd *d);
void kvd_agent_fini(struct kvd *d);
/* The job's round just ended with its end of turn: when its text calls
 * server-side tools only (offered to it, within max_rounds), start them
 * (TOOL_WAIT, job -> JOB_TOOL_RUNNING) and return 1; else 0. */
int kvd_agent_try(struct kvd *d, struct kvd_job *j);
/* A round whose calls all ran, or NULL; the caller resumes its job and
 * frees it with kvd_agent_round_free(). */
struct kvd_round *kvd_agent_next_done(struct kvd *d);
struct kvd_job *kvd_agent_round_job(const struct kvd_round *r);
/* Emits the round's TOOL_RUN events, logs and counts its runs, records the
 * measured wait; returns the text to append (tool turns, then the next
 * assistant header), malloc'd, or NULL when out of memory. */
/* The text the template renders after the round's calls (the results),
 * and its markup (*markup malloc'd, relative to the text). */
char *kvd_agent_round_finish(struct kvd *d, struct kvd_round *r, size_t *len,
			     struct kvd_span **markup, size_t *n_markup);
void kvd_agent_round_free(struct kvd *d, struct kvd_round *r);
/* The conversation is forgotten: its work directory goes. */
void kvd_agent_forget(struct kvd *d, struct kvd_conv *c);
/* Where this process reaches a session's work directory (the sandbox's
 * spawner holds its mount): for tests and operators looking in. */
void kvd_agent_workdir_view(const struct kvd *d, const char *session, char *out, size_t n);
/* Bits of the declarations kvd_server_tools() lists (request bit i = the
 * i-th declaration; jobs keep the same bits). */
uint32_t kvd_agent_decl_mask(const struct kvd *d);

/* mcp.c: MCP tool servers ([mcp.NAME]) */
struct kvd_mcpsrv;
struct kvs_policy;
struct kvs_result;
struct json_t;
/* Starts the server in the sandbox (p: the [tools] policy, for tool =)
 * and lists its tools (*tools: a new JSON array, or NULL when it did not
 * start: logged, the server stays stopped). NULL: a configuration error
 * in err. */
struct kvd_mcpsrv *kvd_mcp_start(const struct kvd_mcp_cfg *cfg, const struct kvs_policy *p,
				 struct json_t **tools, char *err, size_t errlen);
/* One tools/call for a tenant (its instance with per_tenant, else the
 * shared one), serialised per instance, restarting a stopped one
 * first (after its back-off: -EAGAIN before), refusing a tool it no
 * longer lists (-ENOENT); the text content (or the error) in res. 0 or a
 * negative errno. */
int kvd_mcp_call(struct kvd_mcpsrv *s, const char *tenant, const char *name, const char *args,
		 size_t args_len, struct kva_toolwait *tw, const struct kva_toolwait_key *key,
		 struct kvs_result *res, int *restarted);
const char *kvd_mcp_name(const struct kvd_mcpsrv *s);
void kvd_mcp_free(struct kvd_mcpsrv *s);

/* sampling.c: the job's sampler state the workers get with each step */
struct kvd_jsampler;
/* Checks token ids (err: 400) and keeps what the sampler needs; 0 or
 * -errno. Nothing is kept when only temperature and top-p are set. */
int kvd_sampling_setup(struct kvd *d, struct kvd_job *j, const struct kvd_sampling *s,
		       struct kvd_error *err);
void kvd_sampling_free(struct kvd_job *j);
/* A token the model generated (frequency and presence penalties). */
int kvd_sampling_note(struct kvd_job *j, int32_t tok);
/* Bytes the step will carry after the constraint (0: no KVD_SEQ_SAMPLER);
 * brings the context set up to date with the conversation first. */
size_t kvd_sampling_wire_len(struct kvd *d, struct kvd_job *j);
void kvd_sampling_put(const struct kvd_job *j, char **p);

/* sched.c: invalid UTF-8 and NUL to U+FFFD; out needs 3 * n bytes */
size_t kvd_utf8_clean(const char *in, size_t n, char *out);

/* metrics.c */
void kvd_hist_add(struct kvd_hist *h, double v_ms);

#endif
