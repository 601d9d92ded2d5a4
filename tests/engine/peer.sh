#!/bin/sh
# SPDX-License-Identifier: MIT
# peer.sh - `make check-engine-peer`: the engine against llama.cpp on the
# same files (tests/engine/peer.py says what is checked and within which
# bounds). Fetches the benchmark's peer (node-llama-cpp's prebuilt
# libllama/libggml and its sources, tools/bench/engine/fetch-llama.sh,
# into a cache outside the repository), builds tests/engine/llama-ref.c
# against it and runs peer.py. Needs `make engine` first (kve-logits,
# kva-mkmodel). PEER_QUICK=1 runs a subset.
set -eu
B=${ENGINE_OUT:-build/engine}
PY=${ENGINE_PY:-/usr/bin/python3}
CACHE=$(sh tools/bench/engine/fetch-llama.sh $B/bench/llama-driver)
REF=$B/peer/llama-ref
mkdir -p $B/peer
if [ ! -x "$REF" ] || [ tests/engine/llama-ref.c -nt "$REF" ]; then
	${ENGINE_CC:-cc} -std=c11 -O2 -Wall -Wextra -I"$CACHE/src/include" \
		-I"$CACHE/src/ggml/include" tests/engine/llama-ref.c -L"$CACHE/lib" \
		-lllama -lggml -lggml-base -Wl,-rpath,"$CACHE/lib" -o "$REF"
fi
exec "$PY" tests/engine/peer.py "$REF" $B/tests/kve-logits build/bin/kva-mkmodel \
	$B/peer/work ${PEER_QUICK:+--quick}
