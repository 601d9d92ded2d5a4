#!/bin/sh
# SPDX-License-Identifier: MIT
# Runs the model families' libFuzzer harness (build/chat/fuzz_chat, built
# by `make fuzz-chat` with clang -fsanitize=fuzzer,address,undefined) for
# RUNS inputs from a seed corpus: each family's calls as its models write
# them, and templates (a few written here; every llama.cpp template in the
# peer cache when it has been fetched). Any ASan/UBSan report, leak or
# broken property (tests/chat/fuzz_chat.c) stops it with a crash file
# under build/chat/fuzz-chat/artifacts/ (FUZZ_CHAT_DIR: another directory,
# for two runs at once) and a nonzero exit.
#   tests/chat/fuzz-chat.sh [RUNS]      (default 1000000: the hardening lane)
set -eu
cd "$(dirname "$0")/../.."
RUNS=${1:-1000000}
FUZZ=build/chat/fuzz_chat
DIR=${FUZZ_CHAT_DIR:-build/chat/fuzz-chat}	# one per run at a time
TEMPLATES=${KVD_LLAMA_CACHE:-/var/cache/kvarena/llama}/src/models/templates
[ -x "$FUZZ" ] || { echo "fuzz-chat: build first (make fuzz-chat)" >&2; exit 2; }
rm -rf "$DIR/corpus"
mkdir -p "$DIR/corpus" "$DIR/artifacts"
# seeds: a byte for the family (0-6; 8 + n: reasoning split; 7: a
# template), 2 of piece-size seed, then the text
fam() { printf "\\$(printf %03o "$1")\\001\\002"; }
seed() { { fam "$1"; printf '%s' "$3"; } >"$DIR/corpus/$2"; }
call='{"name": "get_weather", "arguments": {"city": "Paris"}}'
hermes="Sure.
<tool_call>
$call
</tool_call>
<tool_call>
{\"name\": \"get_time\", \"arguments\": {}}
</tool_call>"
for f in 0 1 2; do seed $f hermes$f "$hermes"; seed $f plain$f "It is 18C."; done
seed 2 think "<think>
Paris, so get_weather.
</think>

$hermes"
seed 10 think-split "<think>
Paris, so get_weather.
</think>

It is 18C."
seed 3 llama3 "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}"
seed 3 llama3-tag "<|python_tag|>{\"type\": \"function\", \"name\": \"get_weather\", \"parameters\": {}}"
seed 3 plain3 "It is 18C."
seed 4 nemo "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abcdefgh1\"}, {\"name\": \"get_time\", \"arguments\": {}, \"id\": \"abcdefgh2\"}]"
seed 5 small "[TOOL_CALLS]get_weather[CALL_ID]abcdefgh1[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[CALL_ID]abcdefgh2[ARGS]{}"
seed 6 ministral "Let me check.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[ARGS]{}"
seed 6 plain6 "It is 18C."
seed 7 chatml-tmpl "{%- for m in messages %}{{'<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n'}}{%- endfor %}"
seed 7 llama3-tmpl "{{- '<|start_header_id|>system<|end_header_id|>\n\n' }}{{- 'Cutting Knowledge Date: December 2023\n' }}{{- '\"parameters\": dictionary of argument name and its value.' }}{{- '<|eot_id|>' }}"
seed 7 small-tmpl "{%- set default_system_message = 'You are a model. Today is {today}.' %}[SYSTEM_PROMPT][INST][TOOL_CALLS][TOOL_RESULTS][CALL_ID][TOOL_CONTENT][AVAILABLE_TOOLS]["
i=0
for t in "$TEMPLATES"/*.jinja; do
	[ -f "$t" ] || break
	{ fam 7; head -c 65536 "$t"; } >"$DIR/corpus/llama-$i"
	i=$((i + 1))
done
t0=$(date +%s)
"$FUZZ" -runs="$RUNS" -max_len=32768 -dict=tests/chat/fuzz-chat.dict \
	-artifact_prefix="$DIR/artifacts/" -print_final_stats=1 "$DIR/corpus" \
	>"$DIR/log" 2>&1 || { tail -n 60 "$DIR/log"; echo "fuzz-chat: FAIL (log: $DIR/log)"; exit 1; }
done=$(sed -n 's/^stat::number_of_executed_units: *//p' "$DIR/log")
rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$DIR/log")
echo "fuzz-chat: ${done:-?} inputs, no report, $(($(date +%s) - t0)) s (${rate:-?}/s); seeds: $i llama.cpp templates"
