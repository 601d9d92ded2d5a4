#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# make check-replay: a short trace replay (tools/replay/kvreplay.py) as a
# smoke test of the tool and its report: four Mooncake conversations made
# agent sessions (three turns, tool waits scaled down), replayed against a
# real kvarenad over HTTP under each policy (toolwait with the disk tier
# and its decisions, lru, ttl) in both tool modes (client: the replayer
# waits the tool's time; server: the daemon runs `sleep` in its sandbox,
# the hooks build taking the scripted call), an arena small enough to
# evict; then the table and the two PNG plots.
# Usage: tests/replay/check-replay.sh KVARENAD KVARENAD_HOOKS MKMODEL
set -euo pipefail
cd "$(dirname "$0")/../.."

kvd=$1 hooks=$2 mk=$3
py=/usr/bin/python3
# the pure parts first: the eviction benchmark's arena rule, time limits
$py tests/replay/test_kvreplay.py
out=build/replay/smoke
rm -rf "$out" && mkdir -p "$out" && chmod 700 "$out"
model=build/replay/tiny-4k.gguf
# 2 KiB of KV per token: the four sessions need more than its 3 pages
# (a session's last turn, about 2100 tokens with its reply, fits alone:
# a request the whole arena cannot hold is a 400, never queued)
[ -f "$model" ] || "$mk" --dim 128 --layers 4 --heads 4 --ffn 256 --vocab 512 \
	--ctx 4096 --tokenizer bpe --type f32 --seed 3 -o "$model" >/dev/null

# the project's shared material: ../shared from the checkout (a worktree's
# is beside the main checkout's); KVA_SHARED overrides
shared=${KVA_SHARED:-../shared}
[ -d "$shared" ] || shared=$(cd "$(git rev-parse --git-common-dir 2>/dev/null)/../.." 2>/dev/null &&
			    pwd)/shared
trace=$shared/data/mooncake/conversation_trace.jsonl
[ -f "$trace" ] || { echo "check-replay: $trace missing (set KVA_SHARED)" >&2; exit 2; }
$py tools/replay/kvreplay.py convert --mooncake "$trace" \
	--sessions 4 --multi-turn-only --min-turns 3 --max-context 1200 --scale-tokens 0.0625 \
	--tool-mix "read:0.5:0.3:0.3,compile:0.5:1.5:0.3" --time-scale 0.0005 --seed 7 \
	>"$out/sessions.jsonl" 2>"$out/convert.log"
[ "$(wc -l <"$out/sessions.jsonl")" = 4 ] || { echo "check-replay: convert made no 4 sessions" >&2; exit 1; }

# a port the kernel says is free now, not a guess (a random base met
# another server's port in a benchmark run)
free_port() {
	$py -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
port=
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; }
trap cleanup EXIT

# $1 label, $2 binary, then config lines
serve() {
	local label=$1 bin=$2 conf=$out/$1.conf i
	shift 2
	{
		echo "[model]"; echo "path = $model"
		echo "[kv]"; echo "backend = memfd"; echo "blocks = $blocks"
		printf '%s\n' "$@"
	} >"$conf"
	port=$(free_port)
	KVD_TEST_REPLY_DIR=$PWD/$out/replies "$bin" --config "$conf" --listen "127.0.0.1:$port" \
		>"$out/$label.log" 2>&1 &
	pid=$!
	for i in $(seq 1 300); do
		# answering, and ours (someone may have taken the port since)
		curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && kill -0 "$pid" 2>/dev/null &&
			return 0
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.2
	done
	echo "check-replay: kvarenad ($label) did not start:" >&2
	tail -5 "$out/$label.log" >&2
	exit 1
}

stop() {
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	pid=
}

mkdir -p "$out/replies" "$out/tools"
chmod 700 "$out/replies"
for mode in client server; do
	bin=$kvd
	tools=()
	blocks=192
	if [ "$mode" = server ]; then
		bin=$hooks
		tools=("[tools]" "enable = sh" "workdir_root = $PWD/$out/tools")
		# a session is one conversation with its tool rounds: its last
		# turn (~3.7k tokens) fits alone, the four do not: in 192
		# blocks a readmitted request of 108 blocks waited behind two
		# queued requests whose conversations held 122 (their KV, not
		# idle while their requests wait), no block free, for good,
		# until the request first in line took that KV (daemon.md,
		# "Admission"; replay.md)
	fi
	for pol in toolwait lru ttl; do
		case $pol in
		toolwait) conf=("policy = toolwait" "low_watermark = 8" "high_watermark = 32"
				"[tier]" "dir = $PWD/$out/spill-$mode" "cap_mb = 64") ;;
		lru) conf=("policy = lru" "low_watermark = 8" "high_watermark = 32"
			   "[tier]" "decisions = no") ;;
		ttl) conf=("policy = ttl" "ttl_ms = 500" "low_watermark = 8"
			   "high_watermark = 32" "[tier]" "decisions = no") ;;
		esac
		serve "$pol-$mode" "$bin" "${conf[@]}" "${tools[@]}"
		$py tools/replay/kvreplay.py run --url "http://127.0.0.1:$port" \
			--sessions "$out/sessions.jsonl" --label "$pol-$mode" --out "$out" \
			--tool-mode "$mode" --reply-dir "$PWD/$out/replies" --scale-tokens 0.0625 \
			--sample-s 0.2 --close --run-id "$mode$pol"
		stop
	done
done

$py tools/replay/kvreplay.py report --out "$out" | tee "$out/report.out"
# the offline bound on a real run's timing (the eviction benchmark's row)
$py tools/replay/kvreplay.py bound --run "$out/lru-client.json" --arena 64 | tee "$out/bound.txt"
$py - "$out" <<'EOF'
import json, os, sys
out = sys.argv[1]
bad = []
for lab in ("toolwait", "lru", "ttl"):
    for mode in ("client", "server"):
        r = json.load(open(os.path.join(out, "%s-%s.json" % (lab, mode))))
        ss = r["sessions"]
        if len(ss) != 4:
            bad.append("%s-%s: %d sessions" % (lab, mode, len(ss)))
        for s in ss:
            # every turn answered with HTTP 200 (a call the random model did
            # not close is a turn answered without a call: counted, allowed)
            if any(q["error"] and not q["error"].startswith("no tool call")
                   for q in s["requests"]):
                bad.append("%s-%s %s: %s" % (lab, mode, s["session"],
                                              [q["error"] for q in s["requests"]]))
        if not r["timeline"]:
            bad.append("%s-%s: no /metrics samples" % (lab, mode))
        d = r["metrics_delta"]
        if mode == "server" and not any(k.startswith("kvarenad_tool_runs_total") and v > 0
                                        for k, v in d.items()):
            bad.append("%s-server: no server-side tool ran" % lab)
        if d.get("kvarenad_tool_waits_total", 0) < 1:
            bad.append("%s-%s: the server measured no tool wait" % (lab, mode))
        # --close: every ended session closed, its KV released (no spill
        # file left, nothing in the arena for it). In server mode too: a
        # turn sends back the server's tool rounds, so the session is one
        # conversation (each turn started one of its own before, and
        # --close closed the last of them only)
        e = r["metrics_end"]
        left = {k: e.get(k, 0) for k in ("kvarenad_tier_files", 'kvarenad_kv_sessions{tier="arena"}',
                                         'kvarenad_kv_sessions{tier="disk"}')}
        if any(left.values()):
            bad.append("%s-%s: closed sessions left %s" % (lab, mode, left))
for p in ("completion-cdf.png", "occupancy.png", "report.txt", "report.tsv"):
    f = os.path.join(out, p)
    if not os.path.exists(f) or os.path.getsize(f) < (2000 if p.endswith(".png") else 100):
        bad.append("missing or empty: %s" % p)
# the best offline ranking never evicts more than recency's
sys.path.insert(0, "tools/replay")
import kvreplay  # noqa: E402
b = kvreplay.eviction_bound(json.load(open(os.path.join(out, "lru-client.json"))), 64)
if b["oracle"] > b["lru"] or b["working_set"] <= b["shared"] or not b["curve"]:
    bad.append("bound: %s" % b)
rows = open(os.path.join(out, "report.txt")).read().splitlines()
if len(rows) != 7:
    bad.append("report: %d lines, want a header and 6 rows" % len(rows))
if bad:
    print("check-replay: FAIL\n  " + "\n  ".join(bad))
    sys.exit(1)
print("check-replay: 3 policies x 2 tool modes replayed; table and plots in %s" % out)
EOF
