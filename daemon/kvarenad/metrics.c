// SPDX-License-Identifier: MIT
/*
 * metrics.c - kvarenad's Prometheus metrics (text exposition format 0.0.4),
 * rendered from the orchestrator's counters and the arena's own numbers.
 * Histograms are in milliseconds with fixed buckets.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hooks.h"
#include "internal.h"
#include "kvsandbox.h"

static const double bucket_ms[KVD_HIST_BUCKETS] = {
	1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000,
	60000, 300000,
};

void kvd_hist_add(struct kvd_hist *h, double v)
{
	int i;

	for (i = 0; i < KVD_HIST_BUCKETS && v > bucket_ms[i]; i++)
		;
	h->counts[i]++;
	h->sum += v;
	h->n++;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

struct out {
	char *buf;
	size_t len, cap;
	int oom;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (o->oom)
		return;
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			o->oom = 1;
			return;
		}
		if ((size_t)n < o->cap - o->len)
			break;
		o->cap = (o->cap + (size_t)n) * 2;
		o->buf = realloc(o->buf, o->cap);
		if (!o->buf) {
			o->oom = 1;
			return;
		}
	}
	o->len += (size_t)n;
}

static void counter(struct out *o, const char *name, const char *help, uint64_t v)
{
	put(o, "# HELP kvarenad_%s %s\n# TYPE kvarenad_%s counter\nkvarenad_%s %llu\n",
	    name, help, name, name, (unsigned long long)v);
}

static void gauge(struct out *o, const char *name, const char *help, double v)
{
	put(o, "# HELP kvarenad_%s %s\n# TYPE kvarenad_%s gauge\nkvarenad_%s %.17g\n",
	    name, help, name, name, v);
}

static void hist(struct out *o, const char *name, const char *help,
		 const struct kvd_hist *h)
{
	uint64_t cum = 0;
	int i;

	put(o, "# HELP kvarenad_%s %s\n# TYPE kvarenad_%s histogram\n", name, help, name);
	for (i = 0; i < KVD_HIST_BUCKETS; i++) {
		cum += h->counts[i];
		put(o, "kvarenad_%s_bucket{le=\"%g\"} %llu\n", name, bucket_ms[i],
		    (unsigned long long)cum);
	}
	cum += h->counts[KVD_HIST_BUCKETS];
	put(o, "kvarenad_%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
	put(o, "kvarenad_%s_sum %.17g\nkvarenad_%s_count %llu\n", name, h->sum, name,
	    (unsigned long long)h->n);
}

char *kvd_metrics_text(struct kvd *d)
{
	struct out o = { 0 };
	struct kva_arena_info ai = { .size = sizeof(ai) };
	uint32_t states[KVA_STATE_ENDED + 1] = { 0 }, queued = 0, running = 0, i;
	uint32_t up[3] = { 0 }, *turns = NULL, n_turns = 0;
	int health;
	struct kvd_conv *c;
	struct kvd_job *j;
	struct kvd_metrics m;
	struct kvd_tier_gauges tg;
	uint64_t idle_bs = 0, tw_blocks = 0;
	uint32_t reserve;
	static const char *const st_names[] = { "idle", "prefill", "decode", "tool_wait",
						"ended" };

	o.cap = 8192;
	o.buf = malloc(o.cap);
	if (!o.buf)
		return NULL;
	pthread_mutex_lock(&d->lock);
	m = d->m;
	reserve = d->prefetch_reserve;
	kva_arena_get_info(d->arena, &ai);
	for (c = d->convs; c; c = c->next) {
		struct kva_session_info si = { .size = sizeof(si) };

		states[c->has_kv ? (c->kstate <= KVA_STATE_ENDED ? c->kstate : 0) : KVA_STATE_ENDED]++;
		if (c->has_kv && kva_session_get_info(d->arena, c->as.sid, &si) == 0)
			idle_bs += si.idle_byte_sec;
		/* KV waiting on a tool, nothing queued on it: what a tool-aware
		 * policy has to choose among (the eviction benchmark sizes its
		 * arena by it, replay.md) */
		if (c->has_kv && c->kstate == KVA_STATE_TOOL_WAIT &&
		    (!c->job || c->job->state == JOB_TOOL_RUNNING))
			tw_blocks += c->as.s.n_blocks;
	}
	idle_bs += m.idle_byte_s_ended;
	kvd_tiering_gauges(d, &tg);
	for (j = d->jobs; j; j = j->next) {
		if (j->state == JOB_QUEUED)
			queued++;
		else if (j->state != JOB_FINISHED)
			running++;
	}
	for (i = 0; i < d->n_workers; i++)
		if (kvd_worker_usable(&d->workers[i]))
			up[d->workers[i].role]++;
	{	/* the scheduler's last turns: exact quantiles */
		uint32_t n = d->n_step_us < KVD_STEP_RING ? (uint32_t)d->n_step_us : KVD_STEP_RING;

		if (n && (turns = malloc(n * sizeof(*turns)))) {
			memcpy(turns, d->step_us, n * sizeof(*turns));
			n_turns = n;
		}
	}
	health = d->health;
	put(&o, "# HELP kvarenad_info The served model and KV backend.\n"
		"# TYPE kvarenad_info gauge\n"
		"kvarenad_info{model=\"%s\",kv_backend=\"%s\",handoff=\"%s\"} 1\n",
	    d->cfg.model_id, d->backend == KVA_BACKEND_KERNEL ? "kernel" : "memfd",
	    d->cfg.handoff == KVD_HANDOFF_COPY ? "copy" : "arena");
	put(&o, "# HELP kvarenad_sessions Conversations by kvarena session state "
		"(ended: remembered without KV).\n# TYPE kvarenad_sessions gauge\n");
	for (i = 0; i <= KVA_STATE_ENDED; i++)
		put(&o, "kvarenad_sessions{state=\"%s\"} %u\n", st_names[i], states[i]);
	gauge(&o, "queue_depth", "Requests waiting for admission.", queued);
	gauge(&o, "prefetch_reserve_blocks", "Blocks admission kept free for prefetches due "
	      "while a job admitted now would run (last turn).", reserve);
	gauge(&o, "requests_running", "Requests being prefilled or decoded.", running);
	put(&o, "# HELP kvarenad_workers_up Stage workers serving.\n"
		"# TYPE kvarenad_workers_up gauge\n"
		"kvarenad_workers_up{stage=\"prefill\"} %u\nkvarenad_workers_up{stage=\"decode\"} %u\n",
	    up[KVD_ROLE_PREFILL], up[KVD_ROLE_DECODE]);
	gauge(&o, "kv_blocks_total", "KV blocks in the arena.", ai.blocks_total);
	gauge(&o, "kv_blocks_free", "KV blocks free in the arena.", ai.blocks_free);
	gauge(&o, "kv_blocks_used", "KV blocks held (sessions and the prefix cache).",
	      ai.blocks_total - ai.blocks_free);
	gauge(&o, "kv_blocks_cached", "KV blocks indexed by the prefix cache.", d->radix.n);
	gauge(&o, "kv_blocks_evictable", "Cached blocks no conversation holds (evicted first).",
	      d->radix.n_evictable);
	{
		uint32_t held = 0, b;

		for (b = 0; d->block_users && b < d->geom.blocks_total; b++)
			held += d->block_users[b] != 0;
		gauge(&o, "kv_blocks_conversations",
		      "KV blocks some conversation holds (the rest of the used ones: the prefix "
		      "cache's alone).", held);
	}
	gauge(&o, "kv_blocks_tool_wait",
	      "KV blocks of conversations waiting on a tool with nothing queued (each "
	      "conversation's, shared ones counted once per holder).", tw_blocks);
	put(&o, "# HELP kvarenad_tenant_scheduled_tokens_total Tokens scheduled in steps, by "
		"tenant (fair queueing's service; tenant 0: no API keys).\n"
		"# TYPE kvarenad_tenant_scheduled_tokens_total counter\n");
	for (i = 0; i <= d->cfg.n_tenants && i <= KVD_MAX_TENANTS; i++)
		put(&o, "kvarenad_tenant_scheduled_tokens_total{tenant=\"%s\"} %llu\n",
		    i ? d->cfg.tenants[i - 1].name : "", (unsigned long long)m.tenant_tokens[i]);
	gauge(&o, "kv_block_bytes", "Bytes of one arena block.", ai.block_size);
	{
		char rm[4096];

		/* the same load under the names KV-aware routers read */
		if (kvd_router_metrics(d, rm, sizeof(rm), queued, running, &ai) < (int)sizeof(rm))
			put(&o, "%s", rm);
	}
	pthread_mutex_unlock(&d->lock);

	counter(&o, "requests_total", "Completions admitted.", m.requests);
	counter(&o, "requests_rejected_total", "Completions refused with 429.",
		m.requests_rejected);
	counter(&o, "requests_failed_total", "Completions that ended in an error.",
		m.requests_failed);
	counter(&o, "prompt_tokens_total", "Prompt tokens.", m.prompt_tokens);
	counter(&o, "prompt_cached_tokens_total", "Prompt tokens whose KV was reused.",
		m.cached_tokens);
	counter(&o, "prefix_hit_tokens_total", "Prompt tokens reused from the prefix cache.",
		m.prefix_hit_tokens);
	counter(&o, "session_hit_tokens_total",
		"Prompt tokens reused from the conversation's own KV.", m.session_hit_tokens);
	counter(&o, "completion_tokens_total", "Generated tokens.", m.completion_tokens);
	counter(&o, "kv_bytes_copied_total", "KV bytes copied between pipeline stages.",
		m.kv_bytes_copied);
	counter(&o, "handoffs_total", "Prefill to decode hand-offs.", m.handoffs);
	counter(&o, "evictions_total", "Sessions whose KV left the arena because the arena "
		"needed it (victims the kernel ranked, and tool waits spilled or discarded under "
		"pressure).", m.evictions);
	counter(&o, "evictions_prefetch_total", "Of those, the KV a prefetch took the room "
		"of (conversations expected back later than the prefetched one).",
		m.evictions_prefetch);
	counter(&o, "kv_expired_total", "Sessions whose KV left the arena because its "
		"retention ended (to disk, or released): no eviction.", m.kv_expired);
	counter(&o, "kv_misses_total", "Requests whose conversation's KV was not in the arena "
		"when they needed it (restored while they waited, or recomputed).", m.kv_misses);
	counter(&o, "evicted_blocks_total", "Blocks released by evicted sessions.",
		m.evicted_blocks);
	counter(&o, "cache_evictions_total", "Prefix-cache blocks freed.", m.cache_evictions);
	counter(&o, "pressure_events_total", "Kernel pressure events received.",
		m.pressure_events);
	counter(&o, "kernel_events_dropped_total",
		"Kernel events dropped while its queue was full (each made up by a resync).",
		m.kernel_events_dropped);
	counter(&o, "kernel_resyncs_total",
		"Resyncs from the kernel's state after dropped events.", m.kernel_resyncs);
	counter(&o, "worker_restarts_total", "Stage workers restarted.", m.worker_restarts);
	counter(&o, "lease_expiries_total", "Steps past their KV lease (worker killed).",
		m.lease_expiries);
	counter(&o, "tool_waits_total", "Tool waits measured.", m.tool_waits);
	put(&o, "# HELP kvarenad_tool_runs_total Server-side tool runs, by tool and exit "
		"reason.\n# TYPE kvarenad_tool_runs_total counter\n");
	for (i = 0; i < KVD_N_TOOLS; i++)
		for (int r = 0; r < 8; r++)
			if (m.tool_runs[i][r])
				put(&o, "kvarenad_tool_runs_total{tool=\"%s\",reason=\"%s\"} %llu\n",
				    kvd_stool_names[i], kvs_exit_name((enum kvs_exit)r),
				    (unsigned long long)m.tool_runs[i][r]);
	put(&o, "# HELP kvarenad_mcp_calls_total Calls to MCP tool servers' tools, by result "
		"(error: isError, or the call failed).\n# TYPE kvarenad_mcp_calls_total counter\n"
		"kvarenad_mcp_calls_total{result=\"ok\"} %llu\n"
		"kvarenad_mcp_calls_total{result=\"error\"} %llu\n",
		(unsigned long long)m.mcp_calls[0], (unsigned long long)m.mcp_calls[1]);
	counter(&o, "mcp_restarts_total", "MCP tool servers started again for a call.",
		m.mcp_restarts);
	counter(&o, "tool_rounds_total", "Rounds of server-side tool calls run.",
		m.tool_rounds);
	counter(&o, "tool_rounds_exhausted_total",
		"Replies whose server-side calls were not run: [tools] max_rounds reached.",
		m.tool_rounds_exhausted);
	counter(&o, "tool_result_tokens_total",
		"Tokens of server-side tool results appended (and prefilled).",
		m.tool_result_tokens);
	put(&o, "# HELP kvarenad_steps_total Steps sent to workers, by what they carry "
		"(mixed: decode tokens and prompt chunks).\n"
		"# TYPE kvarenad_steps_total counter\n"
		"kvarenad_steps_total{stage=\"prefill\"} %llu\n"
		"kvarenad_steps_total{stage=\"decode\"} %llu\n"
		"kvarenad_steps_total{stage=\"mixed\"} %llu\n",
	    (unsigned long long)m.steps_prefill, (unsigned long long)m.steps_decode,
	    (unsigned long long)m.steps_mixed);
	counter(&o, "decode_sequences_total", "Decode tokens in steps (batching).",
		m.decode_seqs);
	counter(&o, "prefill_chunks_total", "Prompt chunks in steps.", m.prefill_chunks);
	counter(&o, "step_tokens_total", "Tokens computed by steps (chunks and decode).",
		m.step_tokens);
	counter(&o, "preemptions_total", "Running requests whose KV was given back under "
		"pressure (recomputed when readmitted).", m.preemptions);
	counter(&o, "preempted_tokens_total", "KV positions given back by preemptions.",
		m.preempted_tokens);
	counter(&o, "preempt_recomputed_tokens_total", "KV positions preemptions made "
		"readmission compute again (what the prefix cache kept excluded).",
		m.preempt_recomputed_tokens);
	counter(&o, "multi_prefill_steps_total", "Steps carrying chunks of two or more "
		"prompts.", m.multi_prefill_steps);
	gauge(&o, "prefill_workers_busy_max", "Most prefill workers seen with prompt chunks in "
	      "flight at once.", m.prefill_busy_max);
	counter(&o, "prefix_waits_total", "Admissions that waited for another request "
		"computing the same uncached prefix.", m.prefill_waits);
	counter(&o, "admit_kv_given_back_total", "KV sessions a turn opened (its cached prefix "
		"attached) to admit a request, then gave back for want of room.",
		m.admit_given_back);
	counter(&o, "admit_ahead_waits_total", "Admission turns that left the next request "
		"queued because [sched] prefill_ahead prompt tokens were admitted and not yet "
		"computed.", m.admit_ahead_waits);
	gauge(&o, "admit_prefill_pending_max", "Most prompt tokens seen admitted and not yet "
	      "computed at once (at an admission turn).", (double)m.prefill_pending_max);
	counter(&o, "prompt_copied_tokens_total", "Prompt tokens whose KV an n > 1 choice "
		"copied from the first choice's (the blocks the prefix cache does not share).",
		m.fork_copied_tokens);
	counter(&o, "step_failures_total", "Steps that failed (a worker error, death or "
		"lease expiry while computing them).", m.step_failures);
	counter(&o, "step_bisections_total", "Failed batches split in two to find the "
		"sequence at fault.", m.bisections);
	counter(&o, "requests_failed_worker_total", "Requests failed because a worker failed "
		"on their step alone, again and again.", m.requests_failed_worker);
	put(&o, "# HELP kvarenad_worker_failures_total Worker losses (death, protocol error, "
		"lease expiry, failed start).\n# TYPE kvarenad_worker_failures_total counter\n"
		"kvarenad_worker_failures_total{stage=\"prefill\"} %llu\n"
		"kvarenad_worker_failures_total{stage=\"decode\"} %llu\n",
	    (unsigned long long)m.worker_failures[KVD_ROLE_PREFILL],
	    (unsigned long long)m.worker_failures[KVD_ROLE_DECODE]);
	gauge(&o, "health", "0 ok, 1 degraded (a stage has no working worker; the other "
	      "stage serves), 2 down (no worker can serve).", health);
	if (n_turns) {
		qsort(turns, n_turns, sizeof(*turns), cmp_u32);
		gauge(&o, "sched_step_p50_us", "Scheduler turn (lock held: answers, admission, "
		      "steps), median of the last 4096, microseconds.", turns[n_turns / 2]);
		gauge(&o, "sched_step_p99_us", "Scheduler turn, 99th percentile of the last 4096, "
		      "microseconds.", turns[(uint64_t)n_turns * 99 / 100]);
	}
	free(turns);
	put(&o, "# HELP kvarenad_kv_sessions Conversations by where their KV is (arena; disk: a "
		"spill file; none: recomputed if they return).\n# TYPE kvarenad_kv_sessions gauge\n"
		"kvarenad_kv_sessions{tier=\"arena\"} %u\nkvarenad_kv_sessions{tier=\"disk\"} %u\n"
		"kvarenad_kv_sessions{tier=\"none\"} %u\n", tg.sessions[0], tg.sessions[1],
	    tg.sessions[2]);
	counter(&o, "kv_idle_byte_seconds_total",
		"KV bytes held idle (IDLE, TOOL_WAIT) times seconds, from the kernel's (or the "
		"memfd backend's) session accounting.", idle_bs);
	gauge(&o, "tier_disk_bytes", "Bytes the spill files take.", (double)tg.disk_bytes);
	gauge(&o, "tier_disk_cap_bytes", "The spill files' cap (0: none).", (double)tg.disk_cap);
	gauge(&o, "tier_files", "Spill files.", (double)tg.files);
	gauge(&o, "tier_write_bytes_per_second", "Measured spill bandwidth (running mean).",
	      tg.write_bps);
	gauge(&o, "tier_read_bytes_per_second", "Measured restore bandwidth (running mean).",
	      tg.read_bps);
	gauge(&o, "tier_recompute_tokens_per_second",
	      "Measured prefill speed, the cost of recomputing (running mean).", tg.recompute_tps);
	put(&o, "# HELP kvarenad_tier_decisions_total Keep / spill / discard choices when a tool "
		"call starts.\n# TYPE kvarenad_tier_decisions_total counter\n"
		"kvarenad_tier_decisions_total{choice=\"keep\"} %llu\n"
		"kvarenad_tier_decisions_total{choice=\"spill\"} %llu\n"
		"kvarenad_tier_decisions_total{choice=\"discard\"} %llu\n",
	    (unsigned long long)m.tier_decisions[0], (unsigned long long)m.tier_decisions[1],
	    (unsigned long long)m.tier_decisions[2]);
	counter(&o, "tier_spills_total", "KV written to spill files.", m.tier_spills);
	counter(&o, "tier_spill_bytes_total", "Bytes written to spill files.", m.tier_spill_bytes);
	counter(&o, "tier_spill_failures_total", "Spills that failed (the KV stayed or went).",
		m.tier_spill_failures);
	counter(&o, "tier_spills_clean_total",
		"Evictions made free by a copy already on disk (no write).", m.tier_spills_clean);
	counter(&o, "tier_spills_deferred_total",
		"Tool waits decided spill whose write waits for an eviction (lazy).",
		m.tier_spills_deferred);
	counter(&o, "tier_restores_total", "Spill files read back and verified.", m.tier_restores);
	counter(&o, "tier_restore_bytes_total", "Bytes read back from spill files.",
		m.tier_restore_bytes);
	put(&o, "# HELP kvarenad_tier_restore_failures_total Restores refused by verification "
		"(the session recomputed what did not verify).\n"
		"# TYPE kvarenad_tier_restore_failures_total counter\n"
		"kvarenad_tier_restore_failures_total{reason=\"checksum\"} %llu\n"
		"kvarenad_tier_restore_failures_total{reason=\"truncated\"} %llu\n"
		"kvarenad_tier_restore_failures_total{reason=\"stale\"} %llu\n"
		"kvarenad_tier_restore_failures_total{reason=\"io\"} %llu\n",
	    (unsigned long long)m.tier_restore_failures[0],
	    (unsigned long long)m.tier_restore_failures[1],
	    (unsigned long long)m.tier_restore_failures[2],
	    (unsigned long long)m.tier_restore_failures[3]);
	counter(&o, "tier_restore_cached_tokens_total",
		"Tokens of restored KV shared from the prefix cache instead of read.",
		m.tier_restore_cached_tokens);
	counter(&o, "tier_prefetches_total", "Restores started before the tool returned.",
		m.tier_prefetches);
	counter(&o, "tier_prefetches_deferred_total", "Prefetches left to the return: their "
		"room was the turns' until then (no slack).", m.tier_prefetches_deferred);
	counter(&o, "tier_restore_stalls_total",
		"Requests that waited for their KV to come back from disk.", m.tier_restore_stalls);
	put(&o, "# HELP kvarenad_tier_restore_stall_causes_total Restore stalls by what the "
		"tool wait's prefetch did.\n# TYPE kvarenad_tier_restore_stall_causes_total counter\n");
	for (i = 0; i < KVD_STALL_CAUSES; i++)
		put(&o, "kvarenad_tier_restore_stall_causes_total{cause=\"%s\"} %llu\n",
		    kvd_stall_cause_names[i], (unsigned long long)m.tier_stall_causes[i]);
	counter(&o, "tier_no_room_returns_total", "Tool results that found their KV on disk "
		"after its prefetch found no room.", m.tier_noroom_returns);
	put(&o, "# HELP kvarenad_tier_no_room_blocks_total The arena's blocks at those returns, "
		"by holder (summed over the returns).\n# TYPE kvarenad_tier_no_room_blocks_total "
		"counter\n");
	for (i = 0; i < KVD_ROOM_HOLDERS; i++)
		put(&o, "kvarenad_tier_no_room_blocks_total{holder=\"%s\"} %llu\n",
		    kvd_room_holder_names[i], (unsigned long long)m.tier_noroom_blocks[i]);
	counter(&o, "tier_discards_total", "KV discarded (recomputed if it returns).",
		m.tier_discards);
	counter(&o, "tier_recomputed_tokens_total",
		"Tokens whose KV had been evicted or failed to restore, recomputed.",
		m.tier_recomputed_tokens);
	counter(&o, "tier_disk_evictions_total", "Spill files removed by the disk cap.",
		m.tier_disk_evictions);
	counter(&o, "tier_direct_fallbacks_total",
		"O_DIRECT transfers the kernel refused (buffered since).", tg.direct_fallbacks);
	counter(&o, "tool_overruns_total", "Tool waits that ran past their prediction (re-ranked), "
		"each wait once.", m.tool_overruns);
	counter(&o, "tool_repredictions_total", "New predictions of tool waits past their "
		"prediction (a wait may overrun several).", m.tool_repredictions);
	hist(&o, "tier_restore_ms", "Restore time (read and verify).", &m.tier_restore_ms);
	hist(&o, "tier_restore_stall_ms",
	     "How long a request waited for its KV to come back from disk.",
	     &m.tier_restore_stall_ms);
	hist(&o, "ttft_ms", "Time to first token.", &m.ttft);
	hist(&o, "tpot_ms", "Time per output token after the first.", &m.tpot);
	hist(&o, "prefill_ms", "Compute time of steps with prompt chunks.", &m.prefill_ms);
	hist(&o, "sched_step_ms", "Scheduler turns (lock held).", &m.step_ms);
	hist(&o, "tool_wait_ms", "Tool waits: from a response with tool calls to the "
	     "request with their results.", &m.toolwait);
	if (o.oom) {
		free(o.buf);
		return NULL;
	}
	return o.buf;
}
