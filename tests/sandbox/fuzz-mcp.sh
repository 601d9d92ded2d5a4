#!/bin/sh
# SPDX-License-Identifier: MIT
# Runs the MCP reader's libFuzzer harness (build/sandbox/fuzz_mcp, built by
# `make fuzz-mcp` with clang -fsanitize=fuzzer,address,undefined) for RUNS
# inputs from a seed corpus of well-formed and hostile server output; any
# ASan/UBSan report, leak or framing mismatch stops it with a crash file
# under build/sandbox/fuzz-mcp/ and a nonzero exit.
#   tests/sandbox/fuzz-mcp.sh [RUNS]      (default 1000000: the hardening lane)
set -eu
cd "$(dirname "$0")/../.."
RUNS=${1:-1000000}
FUZZ=build/sandbox/fuzz_mcp
DIR=build/sandbox/fuzz-mcp
[ -x "$FUZZ" ] || { echo "fuzz-mcp: build first (make fuzz-mcp)" >&2; exit 2; }
rm -rf "$DIR/corpus"
mkdir -p "$DIR/corpus" "$DIR/artifacts"
# seeds: 2 bytes of cap, 2 of read-size seed, then what a server writes
seed() { printf "$1" >"$DIR/corpus/$2"; }
seed '\000\100\000\001{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"echo","inputSchema":{"type":"object"}}],"nextCursor":"p2"}}\n' list
seed '\000\040\000\002{"jsonrpc":"2.0","id":"s1","method":"roots/list"}\n{"jsonrpc":"2.0","id":"s2","method":"ping"}\n{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}\n' ask
seed '\000\020\000\003this is not json\n{"broken": \n[1,2,3]\n"a string"\n{"jsonrpc":"2.0","id":999999,"result":{}}\n' garbage
seed '\000\010\000\004AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\nBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB\n{"id":1,"result":{}}\n' skipover
seed '\000\200\000\005{"jsonrpc":"2.0","id":7,"error":{"code":-1,"message":"no"}}\r\n\n{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"hi"}],"isError":false}}\n' error
t0=$(date +%s)
"$FUZZ" -runs="$RUNS" -max_len=16384 -dict=tests/sandbox/fuzz-mcp.dict \
	-artifact_prefix="$DIR/artifacts/" -print_final_stats=1 "$DIR/corpus" \
	>"$DIR/log" 2>&1 || { tail -n 60 "$DIR/log"; echo "fuzz-mcp: FAIL (log: $DIR/log)"; exit 1; }
done=$(sed -n 's/^stat::number_of_executed_units: *//p' "$DIR/log")
rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$DIR/log")
echo "fuzz-mcp: ${done:-?} inputs, no report, $(($(date +%s) - t0)) s (${rate:-?}/s); corpus $(ls "$DIR/corpus" | wc -l) files"
