#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# make bench BENCH=eviction: the agent-trace replay (tools/replay/kvreplay.py)
# against kvarenad with a KV arena that holds the running conversations,
# about half of the KV waiting on tools and at least half the working set
# (replay.md, "Sizing the arena"),
# every policy in one run (the same sessions, one daemon each, one after
# the other):
#
#   ample     an arena that never fills: the working set, the arena's
#             size (from its samples), and the bound (no eviction at all:
#             the best mean completion any policy can reach)
#   toolwait  the kernel's tool-aware ranking, the disk tier, keep/spill/
#             discard decisions and prefetch (kvarena as shipped)
#   lru       recency ranking, no disk tier, no decisions: a victim is
#             recomputed (what a recency cache does)
#   ttl       kept for ttl_ms after its last activity, then fair game
#             (Continuum-style retention), no disk tier
#   lru-tier  recency ranking with the disk tier and decisions (which part
#             of the gain is the ranking, which the tier)
#   toolwait-rank  the kernel's tool-aware ranking alone, as lru runs: no
#             disk tier, no decisions (the ranking against recency)
#
# The regime where eviction matters (Documentation/replay.md): the 110M
# Q8_0 model (36 KiB of KV per token; prefill ~200 tokens/s measured on
# the shared cores, so a recomputed 2k-token context costs ~10 s of the
# CPU every other session waits for), Mooncake conversations scaled to
# ~2k tokens, 10 agents that wait on tools (builds, test runs) most of
# the time. No session outgrows the model's 4096 tokens: convert bounds
# each by --max-context with its tool calls' decode budgets counted, and
# the chat markup fits in the rest.
#
# Writes build/bench/eviction/ (sessions, one JSON per run, report.txt,
# report.out with the bound, plan.txt with the arena rule's figures,
# bound.txt with the evictions recency and the best offline ranking need,
# completion-cdf.png, occupancy.png; the other load points in loadL/) and
# rows to build/bench/results.tsv. About 30-40 minutes on the 2-core
# machine (quiet, 2026-12-07: the main load's runs 10, load 1's three 14,
# load 2's three 7).
# Environment: BENCH_EVICTION_SESSIONS (10), BENCH_EVICTION_CONCURRENCY
# (the sessions: all at once), BENCH_EVICTION_MIX (the tool mix,
# kvreplay's syntax), BENCH_EVICTION_TOOL_SCALE (tool durations x, 1),
# BENCH_EVICTION_SCALE (tokens x, 0.125), BENCH_EVICTION_MAX_CONTEXT
# (2400), BENCH_EVICTION_CALL_TOKENS (a call's decode budget, 64),
# BENCH_EVICTION_RUN_TIMEOUT (seconds a run may take; default from the
# workload: kvreplay.py plan), BENCH_EVICTION_TIME_SCALE (arrivals x),
# BENCH_EVICTION_MIN_TURNS (model calls a session makes at least),
# BENCH_EVICTION_RUNS (the policies' runs to make, a trial: "toolwait lru";
# ample always runs, it sizes the arena), BENCH_EVICTION_MODEL (a GGUF instead of
# the 110M one: a smoke trial), BENCH_EVICTION_LOAD (the load factor of the
# main table, 3: arrivals and tool times / this), BENCH_EVICTION_LOADS (more
# load factors, each with ample, toolwait and lru only: "1 2"; "" for none),
# BENCH_EVICTION_ARENA_SHARE (the policies' arena at least this share of
# the working set, 0.5), BENCH_EVICTION_WARMUP (1: each daemon first
# replays other sessions of the workload, uncounted: a warm predictor).
# Usage: tools/replay/eviction-bench.sh KVARENAD MKMODEL
set -euo pipefail
cd "$(dirname "$0")/../.."

kvd=$1 mk=$2
py=/usr/bin/python3
out=build/bench/eviction
tsv=build/bench/results.tsv
rm -rf "$out" && mkdir -p "$out" && chmod 700 "$out"
md=build/bench/models
mkdir -p "$md"
model=${BENCH_EVICTION_MODEL:-}
if [ -z "$model" ]; then
	model=$md/110m_q8_ctx4k.gguf
	[ -f "$model" ] || "$mk" --dim 768 --layers 12 --heads 12 --ffn 2048 --vocab 32000 \
		--ctx 4096 --type q8_0 -o "$model" >/dev/null
fi
[ -f "$model" ] || { echo "eviction: no model $model" >&2; exit 1; }
shared=${KVA_SHARED:-../shared}
[ -d "$shared" ] || shared=$(cd "$(git rev-parse --git-common-dir)/../.." && pwd)/shared
n=${BENCH_EVICTION_SESSIONS:-10}
conc=${BENCH_EVICTION_CONCURRENCY:-$n}
scale=${BENCH_EVICTION_SCALE:-0.125}
maxctx=${BENCH_EVICTION_MAX_CONTEXT:-2400}
# a forced call's budget: the 110M random model closes its call in 64
# tokens under close_in_budget, not in 48 (measured)
calltok=${BENCH_EVICTION_CALL_TOKENS:-64}
# the regime where a tool-aware policy can matter (replay.md, "The
# regime"): agents that wait on builds and test runs most of the time,
# their model calls short beside them. A build-and-test agent's mix:
# reads and greps of seconds, builds of tens of seconds, test runs of
# about a minute (log-normal, sigma 0.5), unscaled; 6 model calls a
# session at least, 10 sessions arriving over a minute (x 0.02: the
# first prefills, seconds each here, do not all queue at once). The
# trace's own mix (86% of waits under 1 s) x5 left the agents in model
# calls 94% of the time on this machine: nothing for a policy to choose
mix=${BENCH_EVICTION_MIX:-read:0.5:5:0.5:200,compile:0.3:20:0.5:100,test:0.2:60:0.5:300}
tscale=${BENCH_EVICTION_TOOL_SCALE:-1}
tmscale=${BENCH_EVICTION_TIME_SCALE:-0.02}
minturns=${BENCH_EVICTION_MIN_TURNS:-6}
allruns=${BENCH_EVICTION_RUNS:-toolwait lru ttl lru-tier toolwait-rank}
# The load (replay.md, "Load"): a factor L replays the same sessions with
# arrivals and tool times divided by L, the model's work unchanged, so the
# server computes L times as much per second of wall. At 1 the model ran
# about a third of the time (the 04:43 run), where a recompute delays
# little else; CacheWise's completion gain is from a server near
# saturation. The main table is at 3, where without eviction the model
# ran 69% of the time and never queued a request (the 07:19 trial); 1
# and 2 run too, toolwait against lru. The policies' configuration is
# the same at every load. Each run reports the share of its samples with
# a request running (busy%) and waiting (queue%).
mainload=${BENCH_EVICTION_LOAD:-3}
loads=${BENCH_EVICTION_LOADS-1 2}
# the policies' arena at least this share of the working set (the issue's
# "about half"); a trial at another share shows a policy against the
# offline bound there (kvreplay.py bound)
share=${BENCH_EVICTION_ARENA_SHARE:-0.5}
# 1: each daemon replays other sessions of the workload (seed 40) before
# the measured ones, so that its tool-wait predictor starts warm
warmup=${BENCH_EVICTION_WARMUP:-0}
# the arena that never fills: every session at its largest, with the chat
# markup and tool declarations (~600 tokens), 16 tokens a block (the
# prefix cache may keep ended sessions' blocks)
ample=$((n * ((maxctx + 600) / 16 + 2) + 64))
t_start=$(date +%s)
top=$out

# a port the kernel says is free now (bound to port 0), not a guess: a
# random base plus one per run once met another server's port and the
# run failed (or would have replayed against that server)
free_port() {
	$py -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
port=
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true' EXIT

# $1 label, $2 kv blocks, then [kv]/[tier] lines
run() {
	local label=$1 blocks=$2 conf=$out/$1.conf i
	shift 2
	case " ample $runs " in *" $label "*) ;; *) return 0 ;; esac
	{
		echo "[model]"; echo "path = $model"
		echo "[kv]"; echo "backend = memfd"; echo "blocks = $blocks"
		printf '%s\n' "$@"
		echo "[limits]"; echo "max_queue = 4096"
		# a step's lease is a net for hung workers; on a loaded 2-core
		# machine a 110M decode step of 16 sequences ran past the 30 s
		# default and the worker was killed and its steps redone, a
		# stall of minutes that is the machine's, not the policy's
		echo "[workers]"; echo "lease_ms = 300000"
	} >"$conf"
	port=$(free_port)
	"$kvd" --config "$conf" --listen "127.0.0.1:$port" >"$out/$label.log" 2>&1 &
	pid=$!
	for i in $(seq 1 600); do
		curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
		kill -0 "$pid" 2>/dev/null || { tail -5 "$out/$label.log" >&2; exit 1; }
		sleep 0.2
	done
	# the server answering is ours (someone may have taken the port since)
	kill -0 "$pid" 2>/dev/null || { tail -5 "$out/$label.log" >&2; exit 1; }
	# a warm predictor: other sessions of the same workload first, in
	# the same daemon (its tool-wait histograms then know the tools, as
	# a daemon that has served a while does); not counted
	if [ "$warmup" = 1 ]; then
		echo "== $label: warm-up, at $(date -u +%H:%M:%S) =="
		timeout "$tmo" \
			$py tools/replay/kvreplay.py run --url "http://127.0.0.1:$port" \
			--sessions "$out/warmup/sessions.jsonl" --label "$label" --out "$out/warmup" \
			--concurrency "$conc" --scale-tokens "$scale" --min-call-tokens "$calltok" \
			--close --run-id "wu$label" || {
			echo "eviction: warm-up $label failed or hung (time limit $tmo s)" >&2
			exit 1
		}
	fi
	# --close: an agent that is done closes its session (DELETE), as a
	# harness does; left to its retention, an ended session's KV was
	# spilled by every eviction that took it, disk bandwidth and an
	# eviction counted for KV nobody would read again
	echo "== $label: $blocks blocks, time limit $tmo s, at $(date -u +%H:%M:%S) =="
	timeout "$tmo" \
		$py tools/replay/kvreplay.py run --url "http://127.0.0.1:$port" --sessions "$out/sessions.jsonl" \
		--label "$label" --out "$out" --concurrency "$conc" --scale-tokens "$scale" \
		--min-call-tokens "$calltok" --close --run-id "ev$label" || {
		echo "eviction: run $label failed or hung (time limit $tmo s)" >&2
		exit 1
	}
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	pid=
	echo "== $label: done at $(($(date +%s) - t_start)) s =="
}

# $1 the load factor, $2 the seed, $3 a directory: the workload's sessions
# at that load in $3/sessions.jsonl
sessions_at() {
	mkdir -p "$3" && chmod 700 "$3"
	$py tools/replay/kvreplay.py convert --mooncake "$shared/data/mooncake/conversation_trace.jsonl" \
		--sessions "$n" --multi-turn-only --min-turns "$minturns" --max-context "$maxctx" \
		--call-tokens "$calltok" --trim-first --scale-tokens "$scale" --tool-mix "$mix" \
		--tool-scale "$($py -c "print($tscale / $1)")" \
		--time-scale "$($py -c "print($tmscale / $1)")" --seed "$2" \
		>"$3/sessions.jsonl" 2>"$3/convert.log"
}

# $1 the load factor, $2 its directory, $3 the policies' runs: the
# sessions at that load, ample, the arena rule, the runs, the report
at_load() {
	local L=$1
	out=$2 runs=$3
	sessions_at "$L" 39 "$out"
	cat "$out/convert.log"
	if [ "$warmup" = 1 ]; then
		sessions_at "$L" 40 "$out/warmup"
		echo "warm-up: $(cat "$out/warmup/convert.log")"
	fi
	echo "== load $L: arrivals and tool times / $L, in $out =="
	# a run's time limit from the workload (its sessions' own tool time),
	# then from the ample run's wall (kvreplay.py run_timeout): a constant
	# 1200 s stopped the benchmark in lru's run once
	tmo=${BENCH_EVICTION_RUN_TIMEOUT:-$($py tools/replay/kvreplay.py plan \
		--sessions "$out/sessions.jsonl" | sed -n 's/^timeout_s //p')}

	# the working set, and the arena: at the median moment of a run that
	# never evicts, the KV of the conversations not waiting on a tool (they
	# need it now, under any policy) and half of the KV waiting on tools (what
	# a policy chooses about). Half of the whole working set, the rule before,
	# was less than the running conversations alone held (700-840 of 853
	# blocks in the 18:33 trial): every waiting session was evicted whatever
	# the ranking, and stalls were waits for room (replay.md)
	run ample "$ample" "policy = toolwait" "[tier]" "decisions = no"
	$py tools/replay/kvreplay.py plan --sessions "$out/sessions.jsonl" --ample "$out/ample.json" \
		>"$out/plan.txt"
	cat "$out/plan.txt"
	half=$(sed -n 's/^arena \([0-9]*\) .*/\1/p' "$out/plan.txt")
	ws=$(sed -n 's/.* working_set \([0-9]*\) .*/\1/p' "$out/plan.txt")
	wshare=$(sed -n 's/.* waiting_share \([0-9.]*\).*/\1/p' "$out/plan.txt")
	[ -n "${BENCH_EVICTION_RUN_TIMEOUT:-}" ] || tmo=$(sed -n 's/^timeout_s //p' "$out/plan.txt")
	# at least one session at its largest, twice: a request the arena cannot
	# hold is refused, never queued
	floor=$((2 * ((maxctx + 600) / 16 + 2)))
	[ "$half" -ge "$floor" ] || half=$floor
	# and at least half the working set (the issue's "a KV capacity holding
	# about half the working set"): with agents mostly waiting on tools the
	# rule alone gave a third of it, about the running requests' own KV when
	# a few ran at once, so a prefetch found no room and every tool return
	# waited for a reply to end (a trial: 29 stalls in 42 returns)
	least=$($py -c "print(int($ws * $share))")
	[ "$half" -ge "$least" ] || half=$least
	[ "$half" -ge 64 ] || half=64
	echo "working set: $ws blocks at most; the policies run with $half (waiting share $wshare)"
	low=$((half / 16)) high=$((half / 8))
	run toolwait "$half" "policy = toolwait" "low_watermark = $low" "high_watermark = $high" \
		"[tier]" "dir = $PWD/$out/spill-toolwait"
	run lru "$half" "policy = lru" "low_watermark = $low" "high_watermark = $high" \
		"[tier]" "decisions = no"
	run ttl "$half" "policy = ttl" "ttl_ms = 2000" "low_watermark = $low" "high_watermark = $high" \
		"[tier]" "decisions = no"
	run lru-tier "$half" "policy = lru" "low_watermark = $low" "high_watermark = $high" \
		"[tier]" "dir = $PWD/$out/spill-lru"
	# the kernel's ranking alone, as lru runs: no disk tier, no decisions
	run toolwait-rank "$half" "policy = toolwait" "low_watermark = $low" \
		"high_watermark = $high" "[tier]" "decisions = no"

	# shellcheck disable=SC2086
	$py tools/replay/kvreplay.py report --out "$out" ample $runs | tee "$out/report.out"
	# what any ranking could do here: lru against the best offline ranking
	# (knowing every return, or each tool's mean wait), on ample's timing
	$py tools/replay/kvreplay.py bound --run "$out/ample.json" --arena "$half" | tee "$out/bound.txt"
}

at_load "$mainload" "$top" "$allruns"
ws_main=$ws half_main=$half wshare_main=$wshare
# the other load points: the same sessions faster, toolwait against lru
for L in $loads; do
	at_load "$L" "$top/load$L" "toolwait lru"
done
out=$top

# the rows compare every policy: a trial of some of them writes none
[ "$allruns" = "toolwait lru ttl lru-tier toolwait-rank" ] || {
	echo "eviction: a trial ($allruns): no rows"
	exit 0
}
# shellcheck disable=SC2086
$py - "$out" "$ws_main" "$half_main" "$wshare_main" "$mainload" $loads >>"$tsv" <<'EOF'
import json, os, sys
sys.path.insert(0, "tools/replay")
import kvreplay
out, ws, half, wshare, mainload = sys.argv[1:6]
s = {lab: kvreplay.summarize(json.load(open(os.path.join(out, lab + ".json"))))
     for lab in ("ample", "toolwait", "lru", "ttl", "lru-tier", "toolwait-rank")}
misses = {lab: s[lab]["misses"] for lab in s}
t = s["toolwait"]


def row(name, v, unit, peer, pv, ratio):
    print("%s\t%.3f\t%s\t%s\t%.3f\t%.2f" % (name, v, unit, peer, pv, ratio))


for peer in ("lru", "ttl"):
    p = s[peer]
    row("evictions_toolwait_vs_" + peer, t["evictions"], "evictions", peer, p["evictions"],
        p["evictions"] / t["evictions"] if t["evictions"] else float("inf"))
    row("kv_misses_toolwait_vs_" + peer, misses["toolwait"], "misses", peer, misses[peer],
        misses[peer] / misses["toolwait"] if misses["toolwait"] else float("inf"))
    row("completion_toolwait_vs_" + peer, t["comp_mean"], "s", peer, p["comp_mean"],
        p["comp_mean"] / t["comp_mean"])
    row("completion_p99_toolwait_vs_" + peer, t["comp_p99"], "s", peer, p["comp_p99"],
        p["comp_p99"] / t["comp_p99"])
    row("ttft_p99_toolwait_vs_" + peer, t["ttft_p99"], "ms", peer, p["ttft_p99"],
        p["ttft_p99"] / t["ttft_p99"])
# the bound: no eviction at all; no policy's mean completion can be below
# ample's, so theirs over ample's is the most any policy can gain on them
a = s["ample"]
if a["evictions"]:
    sys.stderr.write("eviction: the ample run evicted %d times: its bound is not one\n"
                     % a["evictions"])
for peer in ("lru", "ttl"):
    p = s[peer]
    row("completion_bound_ample_vs_" + peer, a["comp_mean"], "s", peer, p["comp_mean"],
        p["comp_mean"] / a["comp_mean"])
# the evictions recency and the best offline ranking (perfect knowledge
# of every return) need on ample's timing in this arena: the most any
# ranking can evict fewer than lru here; and the smallest share of the
# working set at which that reaches the goal's 3x
b = kvreplay.eviction_bound(json.load(open(os.path.join(out, "ample.json"))), int(half))
row("evictions_bound_oracle_vs_lru", b["oracle"], "evictions", "lru_offline", b["lru"],
    b["ratio"])
f3 = [c["fraction"] for c in b["curve"] if c["ratio"] >= 3]
print("evictions_bound_3x_working_set_share\t%.2f\tshare\t-\t-\t-" % (min(f3) if f3 else 1.0))
# the tool returns whose KV had no room beside the turns running then:
# a wait for room under any policy, a restore stall with a disk tier
print("restore_stalls_floor_pct\t%.2f\t%%\treturns\t%d\t-"
      % (100.0 * b["stall_floor"] / max(b["returns"], 1), b["returns"]))
row("completion_toolwait_vs_lru_tier", t["comp_mean"], "s", "lru-tier",
    s["lru-tier"]["comp_mean"], s["lru-tier"]["comp_mean"] / t["comp_mean"])
# the kernel's ranking alone (no disk tier, no decisions) against lru:
# which part of the difference is the ranking, beside the offline bound
r, p = s["toolwait-rank"], s["lru"]
row("evictions_toolwait_rank_vs_lru", r["evictions"], "evictions", "lru", p["evictions"],
    p["evictions"] / r["evictions"] if r["evictions"] else float("inf"))
row("completion_toolwait_rank_vs_lru", r["comp_mean"], "s", "lru", p["comp_mean"],
    p["comp_mean"] / r["comp_mean"])
print("restore_stalls_pct_toolwait\t%.2f\t%%\t-\t-\t-" % t["stall_pct"])
print("recomputed_tokens_toolwait_vs_lru\t%d\ttokens\tlru\t%d\t-" % (t["recomputed"],
                                                                     s["lru"]["recomputed"]))
print("eviction_arena_blocks\t%s\tblocks\tworking_set\t%s\t%.2f" % (half, ws,
                                                                   int(half) / float(ws)))
# the share of the conversations' KV that waited on tools (ample's
# samples): what the policies choose about
print("eviction_tool_wait_kv_share\t%s\tshare\t-\t-\t-" % wshare)


# the load each point ran at (busy: samples with a request running;
# queued: with one waiting), and toolwait against lru at the other points
def load_rows(L, runs):
    for lab in ("ample", "toolwait", "lru"):
        print("server_busy_pct_%s_load%s\t%.1f\t%%\tqueued_pct\t%.1f\t-"
              % (lab, L, runs[lab]["busy_pct"], runs[lab]["queued_pct"]))


load_rows(mainload, s)
for L in sys.argv[6:]:
    d = os.path.join(out, "load" + L)
    r = {lab: kvreplay.summarize(json.load(open(os.path.join(d, lab + ".json"))))
         for lab in ("ample", "toolwait", "lru")}
    t, p, a = r["toolwait"], r["lru"], r["ample"]
    row("completion_toolwait_vs_lru_load" + L, t["comp_mean"], "s", "lru", p["comp_mean"],
        p["comp_mean"] / t["comp_mean"])
    row("completion_bound_ample_vs_lru_load" + L, a["comp_mean"], "s", "lru", p["comp_mean"],
        p["comp_mean"] / a["comp_mean"])
    row("evictions_toolwait_vs_lru_load" + L, t["evictions"], "evictions", "lru",
        p["evictions"], p["evictions"] / t["evictions"] if t["evictions"] else float("inf"))
    print("restore_stalls_pct_toolwait_load%s\t%.2f\t%%\t-\t-\t-" % (L, t["stall_pct"]))
    load_rows(L, r)
EOF
echo "eviction: rows in $tsv; report and plots in $out"
