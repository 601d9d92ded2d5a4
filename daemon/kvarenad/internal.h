/* SPDX-License-Identifier: MIT */
/*
 * internal.h - the orchestrator's state, shared by its files:
 *   core.c      struct kvd, jobs and their event queues (kvd.h's API)
 *   sched.c     the scheduler thread: admission, steps, results
 *   conv.c      conversations (one kvarena session each), text matching
 *   prefix.c    the prefix cache: full blocks by chained token hashes
 *   workers.c   stage worker processes: start, restart, leases
 *   router.c    which worker gets a step (Dynamo-style cost)
 *   kstate.c    session states to the kernel (batched), pressure events
 *   toolwait.c  tool classes and predicted waits
 *   tiering.c   where each conversation's KV lives (arena, disk, none):
 *               keep/spill/discard, restore, prefetch (daemon/tier/)
 *   agent.c     server-side tools: declarations, the sandbox, tool rounds
 *   mcp.c       MCP tool servers ([mcp.NAME]) for agent.c
 *   metrics.c   counters, histograms, Prometheus text
 * One lock (kvd.lock) guards all of it; worker I/O and tokenizing happen
 * outside it.
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

/* ---- conversations ---------------------------------------------------- */

struct kvd_conv {
	char id[40];			/* "sess_" + 24 hex digits */
	uint32_t tenant;
	char *key;			/* prompt_cache_key / user, or NULL */
	struct kve_arena_session as;	/* as.s.n_tokens: positions with KV */
	int has_kv;			/* a kvarena session exists */
	int32_t *tokens;		/* the conversation so far */
	uint32_t *tok_end;		/* text offset after each token;
					 * UINT32_MAX: not a text boundary */
	uint32_t n_tokens, cap_tokens;
	char *text;			/* the text the tokens stand for */
	size_t text_len, text_cap;
	uint8_t *cls;			/* per text byte: KVD_TEXT_* */
	uint64_t *hashes;		/* chained hash of each full block */
	uint32_t n_hashed;		/* full blocks offered to the cache */
	struct kvd_job *job;		/* the job using it, or NULL */
	uint32_t kstate;		/* KVA_STATE_* last sent to the kernel */
	uint32_t tool_class;
	uint64_t wait_started_ns;	/* TOOL_WAIT entry, for measuring */
	uint64_t last_used_ns;
	uint64_t deadline_ns;		/* KV retention ends */
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
	uint8_t tier_spill_evicting;	/* free the blocks when the spill is done */
	uint8_t tier_setup;		/* a restore is finding its blocks */
	uint8_t tier_missed;		/* this return's miss is counted */
	uint64_t tool_pred_us;		/* the tool wait's predicted length */
	uint64_t stall_since_ns;	/* a request waits for a restore since */
	struct kvd_conv *prev, *next;	/* d->convs, most recent first */
};

/* ---- jobs ------------------------------------------------------------- */

enum kvd_job_state {
	JOB_QUEUED = 0,		/* waiting for admission (blocks) */
	JOB_PREFILL_READY,	/* blocks held, waiting for a prefill worker */
	JOB_PREFILLING,
	JOB_KV_LOAD_READY,	/* copy mode: KV bytes wait for a decode worker */
	JOB_KV_LOADING,
	JOB_DECODE_READY,
	JOB_DECODING,
	JOB_TOOL_RUNNING,	/* server-side tools run (agent.c), no worker */
	JOB_KV_WAIT,		/* its KV is being restored (tiering.c) */
	JOB_FINISHED,
};

struct kvd_qev;			/* core.c: a queued event */

struct kvd_job {
	int refs;			/* API side + scheduler side */
	/* what the workers know this job's current round by: never reused
	 * (a freed job's address is, and a worker's matcher cache must never
	 * take another sequence's grammar state for this one's) */
	uint64_t seq_id;
	enum kvd_job_state state;
	struct kvd *d;
	struct kvd_conv *conv;
	char request_id[64];
	uint32_t tenant;
	/* the request */
	char *prompt;
	size_t prompt_len;
	struct kvd_span *markup;	/* the prompt's markup (kvd_request's) */
	size_t n_markup;
	int markup_known;		/* the request said where its markup is */
	char *session_key;
	struct kvd_sampling s;
	char *stop[KVD_MAX_STOP];
	uint32_t stop_seq;		/* 1 + the stop sequence that ended it */
	uint32_t max_new;		/* after clipping to the context */
	/* server-side tools */
	uint32_t server_tools;		/* kvd_request.server_tools, tenant-checked */
	uint32_t tool_rounds;		/* rounds run so far */
	size_t round_start;		/* gen offset where this round's text starts */
	uint32_t round_tokens;		/* tokens sampled in this round */
	/* structured decoding: the spec the workers compile, and the tokens
	 * generated so far (a worker without the matcher replays them) */
	struct kvd_constraint_wire cw;
	struct kvd_jsampler *smp;	/* sampling.c: top-k, min-p, biases,
					 * penalties; NULL: none */
	char *c_json, *c_name;
	int32_t *hist;
	uint32_t n_hist, cap_hist;
	/* generation */
	int32_t next_token;		/* sampled, not yet fed (KV pending) */
	uint64_t rng;
	uint32_t n_prompt, n_cached, n_gen;
	struct kve_detok detok;
	char *gen;			/* generated text */
	size_t gen_len, gen_cap, emitted;
	size_t text_base;		/* conv text length where the reply starts */
	int cancelled;
	int worker;			/* index in d->workers, -1 */
	uint32_t retries;
	/* copy mode: KV bytes from prefill, for a decode worker */
	void *kv_payload;
	size_t kv_payload_len;
	/* timing */
	uint64_t t_submit, t_first, t_last;
	/* events to the API thread */
	pthread_mutex_t qlock;
	pthread_cond_t qcond;
	struct kvd_qev *q_head, *q_tail;
	struct kvd_qev *cur;		/* returned by the last kvd_job_next */
	int q_closed;
	struct kvd_waiter *waiter;	/* kvd_job_next_any's, rung by pushes */
	struct kvd_job *next;		/* d->jobs */
};

/* ---- workers ---------------------------------------------------------- */

enum kvd_wstate { W_DOWN = 0, W_STARTING, W_IDLE, W_BUSY };

struct kvd_worker {
	int index;
	uint32_t role;			/* KVD_ROLE_* */
	enum kvd_wstate state;
	pid_t pid;
	int sock;
	uint64_t step_id;
	uint64_t step_started_ns;	/* the lease */
	uint32_t step_kind;		/* KVD_STEP_* or 0 for KV_LOAD */
	struct kvd_job **inflight;
	uint32_t n_inflight;
	uint32_t queued_tokens;		/* router: tokens of the step in flight */
	uint32_t restarts;
	uint32_t fails_in_row;
	uint64_t next_start_ns;		/* backoff after failures */
	uint64_t started_ns;
	char backend[32];
	int remote;			/* a link to a remote host (daemon/remote) */
	uint64_t joined_ns;		/* remote: last seen with a host joined */
};

/* ---- prefix cache ----------------------------------------------------- */

struct kvd_pentry {
	uint64_t hash;
	uint32_t block;
	uint32_t depth;			/* block index in its chain */
	uint64_t last_used_ns;
	int used;			/* slot in use */
};

struct kvd_prefix {
	struct kvd_pentry *slots;	/* open addressing, power of two */
	uint32_t cap, n;
	uint32_t *by_block;		/* block -> slot + 1, or 0 */
	uint64_t cache_sid;		/* the kvarena session holding references */
	int has_sid;
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
	uint64_t pressure_events;
	uint64_t worker_restarts, lease_expiries;
	uint64_t tool_waits;
	uint64_t tool_runs[KVD_N_TOOLS][8];	/* by tool and enum kvs_exit */
	uint64_t tool_rounds, tool_rounds_exhausted, tool_result_tokens;
	uint64_t mcp_calls[2], mcp_restarts;	/* [0] ok, [1] tool error */
	uint64_t steps_prefill, steps_decode, decode_seqs;
	struct kvd_hist ttft, tpot, toolwait, prefill_ms;
	/* tiering.c */
	uint64_t tier_decisions[3];		/* keep, spill, discard at tool waits */
	uint64_t tier_spills, tier_spill_bytes, tier_spill_failures;
	uint64_t tier_spills_clean;		/* evictions a disk copy made free */
	uint64_t tier_restores, tier_restore_bytes, tier_restore_failures[4];
	uint64_t tier_restore_cached_tokens;	/* restored by sharing cached blocks */
	uint64_t tier_prefetches, tier_restore_stalls, tier_discards;
	uint64_t tier_recomputed_tokens, tier_disk_evictions, tool_overruns;
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
	/* model and KV */
	struct kve_model *model;
	struct kve_tokenizer *tok;
	struct kvc_vocab *cvocab;	/* constraint compiler (checks at submit) */
	struct chat_template *chat;	/* the model's family (daemon/chat) */
	uint32_t vocab, ctx_len;
	int32_t eos, eot;		/* end of sequence, end of turn (-1) */
	int32_t eom;			/* the family's second end of turn (Llama's
					 * <|eom_id|>; -1) */
	struct kve_arena_kv *kv;
	struct kva_arena *arena;
	struct kve_arena_geom geom;
	int data_fd;			/* the arena's dma-buf / memfd */
	enum kva_backend backend;
	uint16_t *block_users;		/* conversations holding each block */
	/* kernel */
	struct kva_ring *ring;
	struct kva_event ev;		/* the parked WAIT_EVENT's buffer */
	uint64_t ev_ack;
	int ev_parked;
	struct kvd_state_change *pending;
	uint32_t n_pending, cap_pending;
	struct kva_toolwait *tw;	/* eBPF tool-wait, optional */
	struct kvd_tiering *tier;	/* tiering.c */
	/* state */
	struct kvd_conv *convs;
	uint32_t n_convs;
	struct kvd_job *jobs, *jobs_tail;	/* every job the scheduler holds, oldest first */
	pthread_cond_t idle_cond;	/* a job finished (kvd_drain waits) */
	uint32_t n_queued;
	struct kvd_prefix prefix;
	struct kvd_worker *workers;
	uint32_t n_workers;
	uint64_t next_step_id;
	uint64_t next_seq_id;	/* names a job's round to the workers */
	/* per tenant, by kvd_tenant_slot() (0: nobody's) */
	uint32_t tenant_blocks[KVD_MAX_TENANTS + 1];
	double tenant_tokens[KVD_MAX_TENANTS + 1];	/* token bucket */
	uint64_t tenant_refill_ns[KVD_MAX_TENANTS + 1];
	struct kvd_toolclass classes[KVD_MAX_TOOL_CLASSES];
	uint32_t n_classes;
	struct kvd_metrics m;
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
#endif
};

uint64_t kvd_now_ns(void);

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
void kvd_job_emit_token(struct kvd_job *j, const char *text, size_t n,
			int32_t tok, float lp, const struct kvd_top *top,
			uint32_t n_top);
void kvd_job_emit_done(struct kvd_job *j, enum kvd_finish f);
void kvd_job_emit_tool_run(struct kvd_job *j, const struct kvd_tool_run *tr);
void kvd_job_emit_error(struct kvd_job *j, enum kvd_err_kind kind,
			const char *msg);
void kvd_wake(struct kvd *d);
void kvd_tenant_charge(struct kvd *d, uint32_t tenant, uint32_t tokens);

/* sched.c */
void *kvd_sched_main(void *arg);

/* conv.c */
struct kvd_conv *kvd_conv_new(struct kvd *d, uint32_t tenant, const char *key);
void kvd_conv_free(struct kvd *d, struct kvd_conv *c);
struct kvd_conv *kvd_conv_find_id(struct kvd *d, const char *id);
/* Best conversation whose text is a prefix-match of the prompt; *keep:
 * tokens whose text the prompt repeats. */
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
 * in its markup; *ids malloc'd; the count or a negative errno. */
int kvd_markup_tokenize(struct kvd *d, const char *text, size_t len,
			const struct kvd_span *markup, size_t n_markup, size_t off,
			int add_bos, int32_t **ids);
/* The prompt's token count (BOS included), markup known. */
int kvd_markup_count(struct kvd *d, const char *text, size_t len,
		     const struct kvd_span *markup, size_t n_markup);
/* A token's text bytes, a control marker's text included. */
int kvd_markup_token_bytes(struct kvd *d, int32_t id, char *buf, size_t size);
/* The kinds of [off, off + len) of a prompt's bytes (known: the request
 * marked its markup; else all KVD_TEXT_ANY). */
void kvd_markup_classes(uint8_t *cls, size_t len, const struct kvd_span *markup,
			size_t n_markup, size_t off, int known);
/* How far [0, l) of a conversation's text agrees with a prompt's kinds. */
size_t kvd_markup_agree(const uint8_t *cls, size_t l, const struct kvd_span *markup,
			size_t n_markup, int known);

struct kvd_conv *kvd_conv_match(struct kvd *d, uint32_t tenant, const char *key,
				const char *prompt, size_t len, const struct kvd_markup *m,
				uint32_t *keep);
int kvd_conv_truncate(struct kvd *d, struct kvd_conv *c, uint32_t n_tokens);
int kvd_conv_append_text(struct kvd_conv *c, const char *text, size_t len);
int kvd_conv_append_tokens(struct kvd *d, struct kvd_conv *c, const char *text,
			   size_t len, int add_bos, const struct kvd_markup *m);
int kvd_conv_push_token(struct kvd_conv *c, int32_t tok, const char *text,
			size_t n, int boundary);
int kvd_conv_open_kv(struct kvd *d, struct kvd_conv *c);
void kvd_conv_drop_kv(struct kvd *d, struct kvd_conv *c);
int kvd_conv_reserve(struct kvd *d, struct kvd_conv *c, uint32_t n_more);
/* Every block back, the kvarena session kept (its KV is on disk or gone;
 * the kernel still sees its tool wait). */
void kvd_conv_free_blocks(struct kvd *d, struct kvd_conv *c);
/* The kvarena session moves out of c, to be closed by the caller. */
void kvd_conv_detach_kv(struct kvd *d, struct kvd_conv *c, struct kve_arena_session *out);
void kvd_conv_touch(struct kvd_conv *c);
uint32_t kvd_conv_blocks(const struct kvd_conv *c);

/* prefix.c */
int kvd_prefix_init(struct kvd *d);
void kvd_prefix_fini(struct kvd *d);
uint64_t kvd_prefix_hash(uint64_t parent, const int32_t *tokens, uint32_t n);
/* Shares the longest cached run of c's full blocks into c (c has a kvarena
 * session and no blocks yet); returns tokens covered. */
uint32_t kvd_prefix_attach(struct kvd *d, struct kvd_conv *c, uint32_t max_tokens);
/* Offers c's newly filled blocks to the cache. */
void kvd_prefix_offer(struct kvd *d, struct kvd_conv *c);
int kvd_prefix_cached(const struct kvd *d, uint32_t block);
/* Frees cached blocks no conversation holds, oldest and deepest first;
 * returns blocks released. */
uint32_t kvd_prefix_evict(struct kvd *d, uint32_t want);
/* The cache lets go of one block (tiering.c: the evicted conversation that
 * alone holds it has it in a spill file; keeping it would keep its memory). */
void kvd_prefix_drop(struct kvd *d, uint32_t block);

/* workers.c */
int kvd_workers_start(struct kvd *d);
void kvd_workers_stop(struct kvd *d);
int kvd_worker_spawn(struct kvd *d, struct kvd_worker *w);
void kvd_worker_lost(struct kvd *d, struct kvd_worker *w, const char *why);
int kvd_worker_send_step(struct kvd *d, struct kvd_worker *w, uint32_t kind,
			 struct kvd_job **jobs, uint32_t n);
int kvd_worker_send_kv_load(struct kvd *d, struct kvd_worker *w, struct kvd_job *j);

/* router.c */
struct kvd_worker *kvd_route(struct kvd *d, uint32_t role, uint32_t new_tokens,
			     uint32_t overlap_tokens);

/* kstate.c */
int kvd_kstate_init(struct kvd *d);
void kvd_kstate_fini(struct kvd *d);
void kvd_kstate_set(struct kvd *d, struct kvd_conv *c, uint32_t state,
		    uint32_t tool_class, uint64_t expected_us);
void kvd_kstate_flush(struct kvd *d);
int kvd_kstate_fd(struct kvd *d);
void kvd_kstate_poll(struct kvd *d);
uint32_t kvd_blocks_free(struct kvd *d);
/* Frees blocks until want are free: cache first, then victim sessions
 * ranked by the kernel's policy. Returns blocks free after. */
uint32_t kvd_make_room(struct kvd *d, uint32_t want);

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
 * KV; what it lacks is prefilled), 1 wait (a restore runs). */
int kvd_tiering_need_kv(struct kvd *d, struct kvd_conv *c);
/* The kernel ranked c a victim: its blocks go to disk or away. Blocks
 * freed now (a spill frees them when written: c->tier_op is then set). */
uint32_t kvd_tiering_evict(struct kvd *d, struct kvd_conv *c);
/* c's retention is over: to disk if there is one, else released. */
void kvd_tiering_expire(struct kvd *d, struct kvd_conv *c);
/* Spills or restores in flight (blocks will come free or be filled). */
int kvd_tiering_busy(const struct kvd *d);
/* c lets go of what is in flight (its KV changes or goes). */
void kvd_tiering_abandon(struct kvd *d, struct kvd_conv *c);
/* c is forgotten: its file and timers go. */
void kvd_tiering_forget(struct kvd *d, struct kvd_conv *c);
/* A prefill step computed tokens in ns: the recompute cost. */
void kvd_tiering_prefill_observed(struct kvd *d, uint32_t tokens, uint64_t ns);
/* "arena", "disk" or "none". */
const char *kvd_tiering_tier(const struct kvd_conv *c);
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
