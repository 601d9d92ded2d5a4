#!/bin/sh
# SPDX-License-Identifier: MIT
# peer.sh - `make check-engine-peer`: the engine against llama.cpp on the
# same files (tests/engine/peer.py says what is checked and within which
# bounds). Fetches the benchmark's peer (node-llama-cpp's prebuilt
# libllama/libggml and its sources, tools/bench/engine/fetch-llama.sh,
# into a cache outside the repository), builds tests/engine/llama-ref.c
# against it and runs peer.py; then tests/engine/vocab_peer.py (the
# tokenizer on llama.cpp's own tokenizer tests) and tests/model/llama-peer.py, the shipped
# agent model's prompts and token ids through llama.cpp's chat code (its
# libllama-common: tests/chat/llama-chat-ref.cpp, built here too) against
# kvarenad's (build/chat/tests/kvd-chat-render). Needs `make engine` first
# (kve-logits, kva-mkmodel). PEER_QUICK=1 runs a subset of peer.py.
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
CHAT_REF=$B/peer/llama-chat-ref
if [ ! -x "$CHAT_REF" ] || [ tests/chat/llama-chat-ref.cpp -nt "$CHAT_REF" ]; then
	${CXX:-c++} -std=c++17 -O1 -I"$CACHE/src/common" -I"$CACHE/src/include" \
		-I"$CACHE/src/ggml/include" -I"$CACHE/src/vendor" tests/chat/llama-chat-ref.cpp \
		-L"$CACHE/lib" -lllama-common -lllama -lggml -lggml-base \
		-Wl,-rpath,"$CACHE/lib" -o "$CHAT_REF"
fi
rc=0
"$PY" tests/engine/peer.py "$REF" $B/tests/kve-logits build/bin/kva-mkmodel \
	$B/peer/work ${PEER_QUICK:+--quick} || rc=1
"$PY" tests/engine/vocab_peer.py "$CACHE/src/models" $B/tests/kve-logits $B/peer/vocab || rc=1
"$PY" tests/model/llama-peer.py "$REF" "$CHAT_REF" build/chat/tests/kvd-chat-render \
	$B/tests/kve-logits $B/peer/agent || rc=1
exit $rc
