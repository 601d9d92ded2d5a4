#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# make bench BENCH=agents1000: many agent conversations against one
# kvarenad whose KV does not fit in the machine (issue 39.6), replayed over
# real HTTP by kvreplay (tools/replay/kvreplay.py, client-side tools):
#
#   the 110M Q8_0 model (36 KiB of KV per token), each conversation a
#   shared 512-token system prompt, a first user turn (1000 tokens), then
#   tool rounds of seconds with 32-token results and forced calls: about
#   2.4k tokens of context with the markup, 82 GiB of KV for 1000; the arena holds
#   an eighth of it, the disk tier (spill files, prefetch) the rest.
#
#   base    a few of the same conversations with their KV in the arena
#           all along: a quiet machine's resume TTFT
#   agents  all of them at once
#
# Rows in build/bench/results.tsv: agents_concurrent (goal: all of them,
# every turn answered), daemon_bytes_per_idle_session (the daemon's
# anonymous memory besides KV per conversation held, goal <= 256 KiB),
# sched_step_p99_us (the scheduler's turn, lock held, at its worst sample),
# resume_ttft_p99_ms_at_N (resumes whose KV came back from disk against
# those whose KV stayed in the arena, the same run, at like moments: goal
# <= 2x; _pooled unweighted), the same against base (_vs_quiet),
# restore_stalls_pct
# (goal < 5) and by cause, the arena at no_room returns, and what the run
# was: kv_total_gib, arena_gib, spilled GiB.
# Writes build/bench/agents1000/ (sessions, runs' JSON, daemon logs, the
# report and its plots).
#
# Environment: BENCH_AGENTS (1000), BENCH_AGENTS_TURNS (4),
# BENCH_AGENTS_FIRST (1000), BENCH_AGENTS_RAMP_S (arrivals spread over,
# 120), BENCH_AGENTS_MIX (tool mix, kvreplay's syntax), BENCH_AGENTS_ARENA_MB
# (KV total / 8), BENCH_AGENTS_DISK_MB (the spill cap: KV total, at most the
# free space less 4 GiB), BENCH_AGENTS_BASE (8),
# BENCH_AGENTS_REQUEST_TIMEOUT_S (5400: a request's longest silence),
# BENCH_AGENTS_KV (f16; q8_0: the 8-bit KV in the same arena bytes, so
# that it holds 1.9x the tokens; the KV totals and the spill cap stay
# those of f16, the workload's).
# Usage: tools/replay/agents1000-bench.sh KVARENAD MKMODEL
set -euo pipefail
cd "$(dirname "$0")/../.."

kvd=$1 mk=$2
py=/usr/bin/python3
out=build/bench/agents1000
tsv=build/bench/results.tsv
n=${BENCH_AGENTS:-1000}
turns=${BENCH_AGENTS_TURNS:-4}
first=${BENCH_AGENTS_FIRST:-1000}
ramp=${BENCH_AGENTS_RAMP_S:-120}
nbase=${BENCH_AGENTS_BASE:-8}
# a first turn may queue behind most of the others' prefills (1M tokens
# on two cores: most of an hour) before its first byte
req_timeout=${BENCH_AGENTS_REQUEST_TIMEOUT_S:-5400}
calltok=${BENCH_AGENTS_CALL_TOKENS:-128}	# a call's budget (a forced call closes in ~70-100)
# tool-wait dominated: seconds per call (quick reads, builds, test runs)
mix=${BENCH_AGENTS_MIX:-read:0.5:2.0:0.5:32,compile:0.3:8.0:0.5:32,test:0.2:20.0:0.5:32}
rm -rf "$out" && mkdir -p "$out" && chmod 700 "$out"
md=build/bench/models
mkdir -p "$md"
model=$md/110m_q8_ctx4k.gguf
[ -f "$model" ] || "$mk" --dim 768 --layers 12 --heads 12 --ffn 2048 --vocab 32000 --ctx 4096 \
	--type q8_0 -o "$model" >/dev/null

synth() {	# $1 sessions, $2 file
	$py tools/replay/kvreplay.py synth --sessions "$1" --turns "$turns" --prefix-blocks 1 \
		--first-input "$first" --tool-input 32 --call-output 16 --output 8 \
		--ramp-s "$ramp" --tool-mix "$mix" --seed 39 >"$2"
}
synth "$n" "$out/sessions.jsonl" 2>"$out/synth.log"
synth "$nbase" "$out/base-sessions.jsonl" 2>/dev/null
cat "$out/synth.log"

# sizes: KV per conversation from its context, the arena an eighth of all
kv_token=$((36 * 1024))
kv_dtype=${BENCH_AGENTS_KV:-f16}
# (+ ~400: the chat markup and the three tools' declarations; a call's
# decode up to its budget)
ctx=$((512 + 400 + first + (turns - 1) * (32 + calltok) + 8))
block=$((16 * kv_token))				# 16 tokens a block (576 KiB)
# q8_0: 17/32 of those bytes, in the arena's 4 KiB units (308 KiB)
[ "$kv_dtype" = f16 ] || block=$(((16 * kv_token * 17 / 32 + 4095) / 4096 * 4096))
kv_total=$((n * ctx * kv_token))
arena_mb=${BENCH_AGENTS_ARENA_MB:-$((kv_total / 8 / 1048576))}
# at least 12 conversations at once (a small trial of the script)
floor_mb=$((12 * (ctx + calltok) * kv_token / 1048576))
[ "$arena_mb" -ge "$floor_mb" ] || arena_mb=$floor_mb
blocks=$((arena_mb * 1048576 / block))
# the arena is whole 2 MiB pages of whole blocks (3 blocks of 576 KiB a
# page), and the memfd backend caps an arena at half of RAM in whole
# pages (lib/memfd.c): stay under it
per_page=$((2097152 / block))
ram_b=$(awk '/^MemTotal:/ { printf "%.0f", $2 * 1024 }' /proc/meminfo)
cap_blocks=$((ram_b / 2 / 2097152 * per_page))
if [ "$blocks" -gt "$cap_blocks" ]; then
	blocks=$cap_blocks
	arena_mb=$((blocks * block / 1048576))
fi
free_mb=$(df -Pm build | awk 'NR == 2 { print $4 }')
disk_mb=${BENCH_AGENTS_DISK_MB:-$((kv_total / 1048576))}
[ "$disk_mb" -le $((free_mb - 4096)) ] || disk_mb=$((free_mb - 4096))
[ "$disk_mb" -gt 0 ] || { echo "agents1000: no disk for the spill files" >&2; exit 1; }
base_blocks=$(((nbase + 2) * ((ctx + calltok) / 16 + 2)))
echo "agents1000: $n conversations of ~$ctx tokens: KV $((kv_total >> 20)) MiB in all;" \
	"arena $arena_mb MiB ($blocks blocks), spill cap $disk_mb MiB"

# a port the kernel says is free now (bound to port 0), not a guess: a
# random base plus one per run once met another server's port and the
# run failed (or would have replayed against that server)
free_port() {
	$py -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
port=
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true' EXIT

# $1 label, $2 blocks, $3 sessions file, $4 concurrency
run() {
	local label=$1 nb=$2 conf=$out/$1.conf i
	{
		echo "[model]"; echo "path = $PWD/$model"
		echo "[kv]"; echo "backend = memfd"; echo "blocks = $nb"; echo "policy = toolwait"
		echo "dtype = $kv_dtype"
		echo "[tier]"; echo "dir = $PWD/$out/spill-$label"; echo "cap_mb = $disk_mb"
		# every conversation is a connection from this one address
		echo "[server]"; echo "max_connections = $((n + 64))"
		echo "max_connections_per_ip = $((n + 64))"
		echo "[limits]"; echo "max_queue = $((n * 2 + 64))"; echo "max_sessions = $((n * 2 + 64))"
	} >"$conf"
	port=$(free_port)
	"$kvd" --config "$conf" --listen "127.0.0.1:$port" >"$out/$label.log" 2>&1 &
	pid=$!
	for i in $(seq 1 900); do
		curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
		kill -0 "$pid" 2>/dev/null || { tail -5 "$out/$label.log" >&2; exit 1; }
		sleep 0.2
	done
	# the server answering is ours (someone may have taken the port since)
	kill -0 "$pid" 2>/dev/null || { tail -5 "$out/$label.log" >&2; exit 1; }
	echo "== $label: $nb blocks, concurrency $4 =="
	$py tools/replay/kvreplay.py run --url "http://127.0.0.1:$port" --sessions "$3" \
		--label "$label" --out "$out" --concurrency "$4" --scale-tokens 1 \
		--request-timeout "$req_timeout" \
		--min-call-tokens "$calltok" --sample-s 1 --pid "$pid" --run-id "ag$label"
	curl -sf "http://127.0.0.1:$port/metrics" >"$out/$label.metrics" || true
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	pid=
}

run base "$base_blocks" "$out/base-sessions.jsonl" "$nbase"
run agents "$blocks" "$out/sessions.jsonl" "$n"
$py tools/replay/kvreplay.py report --out "$out" base agents | tee "$out/report.out"

# the rows
$py - "$out" "$n" "$kv_total" "$arena_mb" "$blocks" >>"$tsv" <<'EOF'
import json, math, sys
sys.path.insert(0, "tools/replay")
from kvreplay import STALL_CAUSES
out, n, kv_total, arena_mb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
blocks = int(sys.argv[5])
base = json.load(open(out + "/base.json"))
ag = json.load(open(out + "/agents.json"))

def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(math.ceil(p / 100.0 * len(v))) - 1)] if v else float("nan")

def resumes(r, key="ttft"):
    return [q[key] * 1000 for s in r["sessions"] for q in s["requests"]
            if q["turn"] > 0 and q.get(key) is not None and not q["error"]]

def fmt(name, v, unit, peer, pv, ratio):
    return "%s\t%s\t%s\t%s\t%s\t%s" % (name, v, unit, peer, pv, ratio)

rows = []
# conversations alive at once (first request sent .. last reply done)
ev = sorted([(s["start"], 1) for s in ag["sessions"]] + [(s["end"], -1) for s in ag["sessions"]])
alive = peak = 0
for _, k in ev:
    alive += k
    peak = max(peak, alive)
failed = sum(1 for s in ag["sessions"] for q in s["requests"] if q["error"])
ok = sum(1 for s in ag["sessions"] if not s["errors"])
rows.append(fmt("agents_concurrent", peak, "sessions", "goal", n, "%.3f" % (peak / n)))
rows.append(fmt("agents_sessions_ok", ok, "sessions", "of", len(ag["sessions"]),
                "%.3f" % (ok / max(1, len(ag["sessions"])))))
rows.append(fmt("agents_turns_failed", failed, "requests", "-", "-", "-"))
# the daemon's anonymous memory (heap, stacks: not the arena, a memfd)
# per conversation held, at the sample holding the most
tl = ag["timeline"]
a0 = next((m["proc_RssAnon"] for m in tl if "proc_RssAnon" in m), None)
best = None
for m in tl:
    held = sum(v for k, v in m.items() if k.startswith("kvarenad_kv_sessions{"))
    if "proc_RssAnon" in m and held and (best is None or held > best[0]):
        best = (held, m["proc_RssAnon"], m.get("proc_Threads", 0), m.get("proc_fds", 0))
if best and a0 is not None:
    per = (best[1] - a0) / best[0]
    rows.append(fmt("daemon_bytes_per_idle_session", "%.0f" % per, "bytes", "goal", 262144,
                    "%.3f" % (per / 262144)))
    rows.append(fmt("agents_daemon_threads_at_peak", "%d" % best[2], "threads", "sessions",
                    "%d" % best[0], "-"))
    rows.append(fmt("agents_daemon_fds_at_peak", "%d" % best[3], "fds", "sessions",
                    "%d" % best[0], "-"))
# the scheduler's turns (lock held), p99 of its last 4096, at its worst
# sample of the run, with that sample's median
steps = [(m["kvarenad_sched_step_p99_us"], m.get("kvarenad_sched_step_p50_us", float("nan")))
         for m in tl if "kvarenad_sched_step_p99_us" in m]
if steps:
    q99, q50 = max(steps)
    rows.append(fmt("sched_step_p99_us", "%.0f" % q99, "us", "p50", "%.0f" % q50, "-"))
else:
    rows.append(fmt("sched_step_p99_us", "-", "us", "-", "-", "-"))
# The goal row: a resume at this load against the same resume with the
# conversation's KV in the arena (issue 39.6: "i.e. the prefetch hides the
# disk"). In the same run, resumes whose KV the disk tier brought back
# (the server's kvarena.kv) against those whose KV stayed in the arena
# (kept: no more than the tool result and the markup computed anew; a
# conversation whose KV was dropped recomputes its first turn too, and
# is in neither). The load changes through the run (the first turns'
# backlog, then its tail) and which KV stays depends on when (room is
# short early), so the two are compared at like moments: the kept
# resumes of each 120 s window of send times weighted by the restored
# resumes sent in it (a restored resume in a window with no kept one is
# left out, and counted). The pooled p99s, unweighted, are the _pooled row.
def split(r, restored, key="ttft"):
    return [q for s in r["sessions"] for q in s["requests"]
            if q["turn"] > 0 and q.get(key) is not None and not q["error"]
            and (q.get("restored_tokens", 0) > 0 if restored else
                 not q.get("restored_tokens") and
                 q["prompt_tokens"] - q["cached_tokens"] < 256)]

def wpct(pairs, p):
    """the p-th percentile of (value, weight) pairs"""
    pairs = sorted(pairs)
    tot, acc = sum(w for _, w in pairs), 0.0
    for v, w in pairs:
        acc += w
        if acc >= p / 100.0 * tot - 1e-9:
            return v
    return pairs[-1][0] if pairs else float("nan")

def matched(rd, ra_, key, window=120.0):
    by_r, by_a = {}, {}
    for q in rd:
        by_r.setdefault(int(q["send"] // window), []).append(q[key] * 1000)
    for q in ra_:
        by_a.setdefault(int(q["send"] // window), []).append(q[key] * 1000)
    rp, ap, left = [], [], 0
    for w, vr in by_r.items():
        va = by_a.get(w)
        if not va:
            left += len(vr)
            continue
        rp += [(v, 1.0) for v in vr]
        ap += [(v, len(vr) / len(va)) for v in va]
    return wpct(rp, 99), wpct(ap, 99), left

# a call turn's first byte reaches the client when the call's head is
# decoded (its tag, name and "arguments": the random model, sampled at
# temperature 1 within the grammar, takes about 70 of a call's ~100 tokens
# to get there), which "ttft" includes; "server_ttft" is the server's
# first token
for key, row in (("ttft", "resume_ttft"), ("server_ttft", "resume_first_token")):
    rd, ra_ = split(ag, True, key), split(ag, False, key)
    if not rd or not ra_:
        rows.append(fmt("%s_p99_ms_at_%d" % (row, n), "-", "ms", "kv_in_arena", "-", "-"))
        continue
    pd, pa, left = matched(rd, ra_, key)
    rows.append(fmt("%s_p99_ms_at_%d" % (row, n), "%.1f" % pd, "ms", "kv_in_arena",
                    "%.1f" % pa, "%.2f" % (pd / pa if pa else float("nan"))))
    pd = pct([q[key] * 1000 for q in rd], 99)
    pa = pct([q[key] * 1000 for q in ra_], 99)
    rows.append(fmt("%s_p99_ms_at_%d_pooled" % (row, n), "%.1f" % pd, "ms", "kv_in_arena",
                    "%.1f" % pa, "%.2f" % (pd / pa if pa else float("nan"))))
    if key == "ttft":
        rows.append(fmt("resumes_restored", "%d" % len(rd), "turns", "arena",
                        "%d" % len(ra_), "-"))
        rows.append(fmt("resumes_restored_unmatched", "%d" % left, "turns", "restored",
                        "%d" % len(rd), "%.3f" % (left / len(rd))))
# and against a quiet machine: base's few conversations, KV in the arena
# all along; at this load the difference is the queue, not the disk
for key, row in (("ttft", "resume_ttft"), ("server_ttft", "resume_first_token")):
    rb, ra = pct(resumes(base, key), 99), pct(resumes(ag, key), 99)
    rows.append(fmt("%s_p99_ms_at_%d_vs_quiet" % (row, n), "%.1f" % ra, "ms", "base",
                    "%.1f" % rb, "%.2f" % (ra / rb if rb else float("nan"))))
d = ag["metrics_delta"]
ret = d.get("kvarenad_tool_waits_total", 0)
st = d.get("kvarenad_tier_restore_stalls_total", 0)
rows.append(fmt("restore_stalls_pct", "%.2f" % (100.0 * st / ret if ret else 0), "%", "goal", 5,
                "-"))
# by cause (tier.md): no_room is a return whose prefetch found the arena
# full; the census says of what, and whether room due back later was left
# (idle_later: what a prefetch takes, so anything there is a defect);
# no_slack a prefetch left to the return ([tier] prefetch_slack); the
# causes are kvreplay's (its report prints them too)
cause = lambda c: d.get('kvarenad_tier_restore_stall_causes_total{cause="%s"}' % c, 0)
for c in STALL_CAUSES:
    rows.append(fmt("restore_stalls_%s_pct" % c, "%.2f" % (100.0 * cause(c) / ret if ret else 0),
                    "%", "stalls", "%d" % cause(c), "-"))
nr = d.get("kvarenad_tier_no_room_returns_total", 0)
if nr:
    hold = lambda h: d.get('kvarenad_tier_no_room_blocks_total{holder="%s"}' % h, 0) / nr
    rows.append(fmt("no_room_running_blocks_mean", "%.0f" % hold("running"), "blocks",
                    "arena_blocks", "%d" % blocks, "-"))
    rows.append(fmt("no_room_idle_later_blocks_mean", "%.0f" % hold("later"), "blocks",
                    "returns", "%d" % nr, "-"))
rows.append(fmt("agents_kv_total_gib", "%.1f" % (kv_total / 2**30), "GiB", "arena_gib",
                "%.1f" % (arena_mb / 1024), "%.1f" % (kv_total / 2**30 / (arena_mb / 1024))))
rows.append(fmt("agents_spilled_gib", "%.1f" % (d.get("kvarenad_tier_spill_bytes_total", 0) / 2**30),
                "GiB", "restored_gib",
                "%.1f" % (d.get("kvarenad_tier_restore_bytes_total", 0) / 2**30), "-"))
rows.append(fmt("agents_recomputed_tokens", "%d" % d.get("kvarenad_tier_recomputed_tokens_total", 0),
                "tokens", "-", "-", "-"))
print("\n".join(rows))
sys.stderr.write("\n".join(rows) + "\n")
EOF
