#!/bin/sh
# SPDX-License-Identifier: MIT
# run-clients.sh - `make check-clients`: the clients people use, installed
# from npm into build/clients/node (package.json and package-lock.json
# here pin every package, dependencies included: `npm ci`), against the real
# kvarenad serving a random-weight model whose context holds the agent
# CLIs' prompts (kva-mkmodel, 64 Ki tokens). Between the clients and the
# daemon a recording proxy (recorder.py) writes every request and the
# status of its answer to build/clients/requests.jsonl; the lane fails on
# any answer >= 400 and prints, per client, what it sent.
#
#   openai_responses.mjs   openai: responses.create/stream with tools, a
#                          previous_response_id round trip (cached_tokens),
#                          json_schema validated with ajv, retrieve/delete
#   agents.mjs             @openai/agents: an agent with two tools to a
#                          final output
#   anthropic.mjs          @anthropic-ai/sdk: messages.create/stream with
#                          tools, a tool_result round trip, countTokens
#   reasoning.mjs          both SDKs parse a thinking family's reasoning
#                          (reasoning_content, the reasoning item, the
#                          thinking block) from the API test server
#                          rendering as qwen3 (its scripted replies open
#                          with a think block; a random model's do not)
#   codex exec             the Codex CLI, a custom provider at kvarenad
#   claude -p              Claude Code, ANTHROPIC_BASE_URL at kvarenad
#
# usage: run-clients.sh KVARENAD KVA-MKMODEL KVD-API-TESTSERVER
set -u
EXE=$1 MK=$2 APISRV=$3
OUT=build/clients
NODE_DIR=$OUT/node
# openai 5.23.2, @openai/agents 0.20.0, @anthropic-ai/sdk 1.16.0, ajv 8.20.0,
# zod 4.6.7, @openai/codex 0.171.0, @anthropic-ai/claude-code 2.1.332
LOCK=tests/daemon/clients
MODEL=$OUT/clients-bpe.gguf
KEY=clients-key-0123456789abcdef
mkdir -p "$OUT"
ROOT=$(pwd)
t0=$(date +%s)

# installed again only when the lock changes (about 1 GiB: minutes)
want=$(cat "$LOCK/package.json" "$LOCK/package-lock.json" | sha256sum | cut -d' ' -f1)
if [ "$(cat "$NODE_DIR/.pkgs" 2>/dev/null)" != "$want" ]; then
	echo "run-clients: npm ci ($LOCK/package-lock.json) into $NODE_DIR"
	rm -rf "$NODE_DIR"
	mkdir -p "$NODE_DIR"
	cp "$LOCK/package.json" "$LOCK/package-lock.json" "$NODE_DIR/"
	(cd "$NODE_DIR" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) ||
		{ echo "run-clients: npm ci failed"; exit 1; }
	echo "$want" > "$NODE_DIR/.pkgs"
fi
NODE_DIR=$(cd "$NODE_DIR" && pwd)
[ -f "$MODEL" ] || "$MK" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 --vocab 512 \
	--ctx 65536 --tokenizer bpe --type f32 --seed 5 -o "$MODEL" >/dev/null || exit 1

free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
tmp=$(mktemp -d /tmp/kvd-clients.XXXXXX)
kpid= rpid= spid=
trap '[ -n "$kpid" ] && kill "$kpid" 2>/dev/null; [ -n "$rpid" ] && kill "$rpid" 2>/dev/null; [ -n "$spid" ] && kill "$spid" 2>/dev/null; rm -rf "$tmp"' EXIT
port=$(free_port)
rport=$(free_port)
cat > "$tmp/kvarenad.conf" <<CONF
[server]
listen = 127.0.0.1:$port
[model]
path = $MODEL
id = kvarena-test
; the random model ends a reply with EOS only by chance: room for it
max_tokens = 4096
[kv]
backend = memfd
toolwait_bpf = no
blocks = 8192
[tenant.clients]
key = $KEY
CONF
"$EXE" --config "$tmp/kvarenad.conf" >"$OUT/kvarenad.log" 2>&1 &
kpid=$!
: > "$OUT/requests.jsonl"
python3 tests/daemon/clients/recorder.py "$rport" "$port" "$OUT/requests.jsonl" &
rpid=$!
i=0
until python3 -c "import http.client, sys; c = http.client.HTTPConnection('127.0.0.1', $port, timeout=5); c.request('GET', '/health'); sys.exit(c.getresponse().status != 200)" 2>/dev/null; do
	i=$((i + 1))
	if [ $i -gt 600 ] || ! kill -0 "$kpid" 2>/dev/null; then
		echo "run-clients: kvarenad not healthy"; tail -20 "$OUT/kvarenad.log"; exit 1
	fi
	sleep 0.2
done

fails=0
run() {	# run NAME CMD...: a client, its output in $OUT/NAME.log
	name=$1
	shift
	s=$(date +%s)
	if "$@" >"$OUT/$name.log" 2>&1; then
		echo "ok   $name ($(( $(date +%s) - s ))s)"
	else
		echo "FAIL $name (exit $?, $(( $(date +%s) - s ))s)"; tail -15 "$OUT/$name.log"
		fails=$((fails + 1))
	fi
	grep -E '^(ok|FAIL|     )' "$OUT/$name.log" | sed 's/^/     /'
}
export KVD_NODE_DIR=$NODE_DIR KVD_API_KEY=$KEY KVD_API_MODEL=kvarena-test
KVD_API_BASE_URL=http://127.0.0.1:$rport/v1 run openai_responses node tests/daemon/clients/openai_responses.mjs
KVD_API_BASE_URL=http://127.0.0.1:$rport/v1 run agents node tests/daemon/clients/agents.mjs
KVD_API_BASE_URL=http://127.0.0.1:$rport run anthropic node tests/daemon/clients/anthropic.mjs

# a thinking family's reasoning, as the SDKs parse it (the API test server
# as qwen3: its scripted replies can open with a think block)
"$APISRV" --port 0 --port-file "$tmp/sport" --chat-template qwen3 >/dev/null 2>"$OUT/reasoning-server.log" &
spid=$!
i=0
while [ ! -s "$tmp/sport" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
KVD_API_BASE_URL=http://127.0.0.1:$(cat "$tmp/sport" 2>/dev/null || echo 0) run reasoning \
	node tests/daemon/clients/reasoning.mjs
kill "$spid" 2>/dev/null
wait "$spid" 2>/dev/null
spid=

# the Codex CLI: a model provider of its own at kvarenad (Responses API)
mkdir -p "$tmp/codex" "$tmp/work" "$tmp/home"
cat > "$tmp/codex/config.toml" <<TOML
model = "kvarena-test"
model_provider = "kvarena"
[model_providers.kvarena]
name = "kvarena"
base_url = "http://127.0.0.1:$rport/v1"
wire_api = "responses"
env_key = "KVARENA_API_KEY"
TOML
codex_run() (
	cd "$tmp/work" && CODEX_HOME="$tmp/codex" KVARENA_API_KEY=$KEY timeout 900 \
		"$NODE_DIR/node_modules/.bin/codex" exec --skip-git-repo-check "Say hello." </dev/null &&
		! grep -q '^ERROR' "$ROOT/$OUT/codex.log"
)
run codex codex_run

# Claude Code: its base URL at kvarenad (Messages API)
claude_run() (
	cd "$tmp/work" && HOME="$tmp/home" ANTHROPIC_BASE_URL=http://127.0.0.1:$rport \
		ANTHROPIC_API_KEY=$KEY ANTHROPIC_MODEL=kvarena-test \
		ANTHROPIC_SMALL_FAST_MODEL=kvarena-test CLAUDE_CODE_MAX_OUTPUT_TOKENS=8000 \
		CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_TELEMETRY=1 DISABLE_AUTOUPDATER=1 \
		timeout 900 "$NODE_DIR/node_modules/.bin/claude" -p "Say hello." </dev/null &&
		! grep -q 'API Error' "$ROOT/$OUT/claude.log"
)
run claude claude_run

# what each client sent, and whether kvarenad took it
python3 - "$OUT/requests.jsonl" <<'PY' || fails=$((fails + 1))
import collections, json, sys
by = collections.defaultdict(list)
for line in open(sys.argv[1]):
    e = json.loads(line)
    ua = e["headers"].get("User-Agent") or e["headers"].get("user-agent") or "?"
    who = ua.split("/")[0].split(" ")[0]
    by[who].append(e)
bad = 0
for who, es in sorted(by.items()):
    keys, tools, st = set(), collections.Counter(), collections.Counter()
    for e in es:
        st[e["status"]] += 1
        b = e.get("body") or {}
        if isinstance(b, dict):
            keys.update(b)
            for t in b.get("tools") or []:
                tools[t.get("type") or "(none)"] += 1
        if e["status"] >= 400:
            # the SDK tests ask for some errors and check them themselves;
            # the agent CLIs must get none
            cli = who in ("codex_exec", "claude-cli")
            bad += cli
            print(f"{'FAIL' if cli else '    '} {who}: {e['method']} {e['path']} {e['status']} "
                  f"{e.get('answer', '')[:300]}{'' if cli else ' (the test asked for it)'}")
    print(f"     {who}: {len(es)} requests {dict(st)}; fields {sorted(keys)}; tool types {dict(tools)}")
sys.exit(1 if bad else 0)
PY
kill "$kpid" "$rpid" 2>/dev/null
wait "$kpid" 2>/dev/null
kpid= rpid=
echo "run-clients: $fails failed, $(( $(date +%s) - t0 ))s"
[ $fails -eq 0 ]
