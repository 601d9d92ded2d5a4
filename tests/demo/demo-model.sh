#!/bin/sh
# SPDX-License-Identifier: MIT
# The model make demo serves: DEMO_MODEL, else the trained agent model
# (models/, see Documentation/model.md), else a random-weight model with
# the same shape of tokenizer (whose tool calls will not happen).
set -eu
if [ -n "${DEMO_MODEL:-}" ]; then
	echo "$DEMO_MODEL"
elif [ -f models/kvarena-agent-q8_0.gguf ]; then
	echo models/kvarena-agent-q8_0.gguf
else
	mkdir -p build/demo
	[ -f build/demo/demo-random.gguf ] ||
		build/bin/kva-mkmodel --dim 128 --layers 2 --heads 4 --kv-heads 2 --ffn 256 \
			--vocab 512 --ctx 4096 --tokenizer bpe --type f32 --seed 7 \
			-o build/demo/demo-random.gguf >/dev/null
	echo build/demo/demo-random.gguf
fi
