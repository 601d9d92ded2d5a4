#!/bin/sh
# SPDX-License-Identifier: MIT
# fetch-llama-server.sh - builds llama.cpp's own server (llama-server), the
# serving peer of `make bench BENCH=serve`, in a cache OUTSIDE the
# repository: the sources are the git bundle that
# tools/bench/engine/fetch-llama.sh clones from the node-llama-cpp npm
# tarball (same cache, default /var/cache/kvarena/llama or
# $KVA_LLAMA_CACHE); the build goes to CACHE/server-build, once (about 20
# minutes on 2 cores, niced). Prints the path of the llama-server binary.
# Nothing here is committed or shipped.
set -eu
CACHE=${KVA_LLAMA_CACHE:-/var/cache/kvarena/llama}
BIN="$CACHE/server-build/bin/llama-server"
if [ ! -f "$CACHE/src/CMakeLists.txt" ]; then
	# the bundle and its clone (the engine bench's driver is built too)
	tools/bench/engine/fetch-llama.sh >/dev/null
fi
if [ ! -x "$BIN" ]; then
	command -v cmake >/dev/null || { echo "fetch-llama-server: cmake is missing (scripts/deps.sh)" >&2; exit 1; }
	# flags as FACTS.md ("Added 2026-12-03"): no curl, no tests or
	# examples, no prebuilt web UI (the build would try to download it)
	nice -n 15 cmake -S "$CACHE/src" -B "$CACHE/server-build" -DCMAKE_BUILD_TYPE=Release \
		-DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
		-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF >&2
	nice -n 15 cmake --build "$CACHE/server-build" --target llama-server -j2 >&2
fi
echo "$BIN"
