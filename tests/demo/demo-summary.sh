#!/bin/sh
# SPDX-License-Identifier: MIT
# Prints a readable summary of kvarenad's /metrics (from stdin): per-stage
# timings, KV reuse, blocks, bytes copied between stages, evictions.
awk '
/^kvarenad_[a-z_]+(\{[^}]*\})? / {
	split($1, a, "{"); name = a[1]; v[$1] = $2; base[name] += $2
}
function avg(n) { return base[n "_count"] ? base[n "_sum"] / base[n "_count"] : 0 }
END {
	printf "  per stage: prefill step %.1f ms avg (%d steps), decode steps %d carrying %d sequences (%.2f per step)\n",
		avg("kvarenad_prefill_ms"), base["kvarenad_prefill_ms_count"],
		v["kvarenad_steps_total{stage=\"decode\"}"], base["kvarenad_decode_sequences_total"],
		v["kvarenad_steps_total{stage=\"decode\"}"] ? base["kvarenad_decode_sequences_total"] / v["kvarenad_steps_total{stage=\"decode\"}"] : 0
	printf "  latency:   TTFT %.1f ms avg over %d requests, %.2f ms per output token after the first\n",
		avg("kvarenad_ttft_ms"), base["kvarenad_ttft_ms_count"], avg("kvarenad_tpot_ms")
	printf "  KV reuse:  %d of %d prompt tokens not recomputed (%d from the conversation'"'"'s own KV, %d from the prefix cache)\n",
		base["kvarenad_prompt_cached_tokens_total"], base["kvarenad_prompt_tokens_total"],
		base["kvarenad_session_hit_tokens_total"], base["kvarenad_prefix_hit_tokens_total"]
	printf "  KV blocks: %d in the arena, %d used, %d indexed by the prefix cache, %d free\n",
		base["kvarenad_kv_blocks_total"], base["kvarenad_kv_blocks_used"],
		base["kvarenad_kv_blocks_cached"], base["kvarenad_kv_blocks_free"]
	printf "  hand-off:  %d prefill->decode hand-offs, %d KV bytes copied between stages\n",
		base["kvarenad_handoffs_total"], base["kvarenad_kv_bytes_copied_total"]
	printf "  tools:     %d tool waits measured (%.0f ms avg); %d evictions, %d pressure events, %d worker restarts\n",
		base["kvarenad_tool_waits_total"], avg("kvarenad_tool_wait_ms"), base["kvarenad_evictions_total"],
		base["kvarenad_pressure_events_total"], base["kvarenad_worker_restarts_total"]
}'
