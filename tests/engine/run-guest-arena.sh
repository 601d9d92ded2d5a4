#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The engine with its KV in kvarena.ko arenas: test_arena (sessions, shared
# prefixes, batched decode, and a prefill process handing the arena's
# dma-buf and block tables to a decode process) with KVE_TEST_BACKEND=kernel
# in a QEMU guest running kernel VERSION, then every byte pinned by the
# module must be back and the module must unload.
# Usage: run-guest-arena.sh VERSION        (make check-engine-guest)
set -euo pipefail
cd "$(dirname "$0")/../.."

kver=$1
ko=build/kmod/$kver/kvarena.ko
bin=build/engine/tests/test_arena
mk=build/bin/kva-mkmodel
models=build/engine/guest-models
for f in "$ko" "$bin" "$mk"; do
	[ -e "$f" ] || { echo "run-guest-arena: $f missing (make modules-guest engine)" >&2; exit 2; }
done

# Three shapes: GQA F32 with separate head, Q8_0 with one KV head, tied
# head, and heads of 64 (a Q8_0 KV too).
mkdir -p "$models"
"$mk" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 96 --vocab 512 --ctx 128 \
	--type f32 --seed 11 -o "$models/f32-gqa.gguf" >/dev/null
"$mk" --dim 64 --layers 2 --heads 4 --kv-heads 1 --ffn 128 --vocab 512 --ctx 128 \
	--type q8_0 --tied --seed 13 -o "$models/q8-gqa.gguf" >/dev/null
"$mk" --dim 128 --layers 2 --heads 2 --kv-heads 1 --ffn 128 --vocab 512 --ctx 128 \
	--type q8_0 --seed 17 -o "$models/hd64-q8.gguf" >/dev/null

sysfs=/sys/class/misc/kvarena
echo "== engine over kvarena.ko on $kver =="
start=$(date +%s)
rc=0
tests/vm/run-guest.sh --kver "$kver" --ko "$ko" --bin "$bin" \
	--file "$models:models" --timeout "${KT_GUEST_TIMEOUT:-600}" --mem 1024 \
	--log "build/tests/guest-arena-$kver.log" \
	--cmd "modprobe kvarena max_pinned_mb=256 || exit 90" \
	--cmd "KVE_TEST_BACKEND=kernel test_arena models/f32-gqa.gguf models/q8-gqa.gguf models/hd64-q8.gguf || exit 91" \
	--cmd "w=0; while [ \$w -lt 5 ] && [ \"\$(cat $sysfs/pinned_bytes)\" != 0 ]; do sleep 1; w=\$((w + 1)); done" \
	--cmd "p=\$(cat $sysfs/pinned_bytes) a=\$(cat $sysfs/arenas) s=\$(cat $sysfs/sessions)" \
	--cmd "echo \"after: pinned_bytes \$p arenas \$a sessions \$s (\${w}s for lingering pages)\"" \
	--cmd "[ \"\$p\" = 0 ] && [ \"\$a\" = 0 ] && [ \"\$s\" = 0 ] || exit 92" \
	--cmd "rmmod kvarena || exit 93" || rc=$?
echo "== engine over kvarena.ko on $kver: exit $rc, $(($(date +%s) - start)) s =="
exit "$rc"
