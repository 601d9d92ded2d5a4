#!/bin/sh
# SPDX-License-Identifier: MIT
# fetch-llama.sh - puts the llama.cpp peer for the engine benchmark in a
# cache OUTSIDE the repository (default /var/cache/kvarena/llama, or
# $KVA_LLAMA_CACHE): the node-llama-cpp 3.21.1 npm tarballs (prebuilt
# libllama/libggml and the matching sources as a git bundle), the headers
# cloned from that bundle, and our driver linked against them.
# Prints the cache directory. Nothing here is committed or shipped.
set -eu
CACHE=${KVA_LLAMA_CACHE:-/var/cache/kvarena/llama}
VER=3.21.1
OUT=${1:-build/engine/bench/llama-driver}
mkdir -p "$CACHE"
if [ ! -f "$CACHE/node-llama-cpp-$VER.tgz" ] || [ ! -f "$CACHE/node-llama-cpp-linux-x64-$VER.tgz" ]; then
	(cd "$CACHE" && npm pack --silent "node-llama-cpp@$VER" "@node-llama-cpp/linux-x64@$VER" >/dev/null)
fi
if [ ! -f "$CACHE/lib/libllama.so" ]; then
	rm -rf "$CACHE/x" && mkdir -p "$CACHE/x" "$CACHE/lib"
	tar -xzf "$CACHE/node-llama-cpp-linux-x64-$VER.tgz" -C "$CACHE/x"
	cp "$CACHE"/x/package/bins/linux-x64/*.so "$CACHE/lib/"
	ln -sf libllama.v0.4.0.so "$CACHE/lib/libllama.so"
	ln -sf libggml.v0.4.0.so "$CACHE/lib/libggml.so"
fi
if [ ! -f "$CACHE/src/include/llama.h" ]; then
	mkdir -p "$CACHE/x"
	tar -xzf "$CACHE/node-llama-cpp-$VER.tgz" -C "$CACHE/x" package/llama/gitRelease.bundle
	rm -rf "$CACHE/src"
	git clone -q "$CACHE/x/package/llama/gitRelease.bundle" "$CACHE/src" 2>/dev/null
fi
if [ ! -x "$OUT" ] || [ tools/bench/engine/llama-driver.c -nt "$OUT" ] ||
   [ tools/bench/engine/bench_argmax.h -nt "$OUT" ]; then
	mkdir -p "$(dirname "$OUT")"
	${ENGINE_CC:-cc} -std=c11 -O2 -Wall -Wextra -I"$CACHE/src/include" -I"$CACHE/src/ggml/include" \
		tools/bench/engine/llama-driver.c -L"$CACHE/lib" -lllama -lggml -lggml-base \
		-Wl,-rpath,"$CACHE/lib" -o "$OUT"
fi
echo "$CACHE"
