#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# kvarenad's orchestrator over kvarena.ko in a QEMU guest running kernel
# VERSION: test_orch with KVD_TEST_BACKEND=kernel (workers map the arena's
# dma-buf; state changes go through io_uring; the kernel's pressure events
# drive eviction), then every byte pinned by the module must be back and
# the module must unload.
# Usage: run-guest-orch.sh VERSION        (make check-orch-guest)
set -euo pipefail
cd "$(dirname "$0")/../.."

kver=$1
ko=build/kmod/$kver/kvarena.ko
bin=build/daemon/tests/test_orch_guest
mk=build/bin/kva-mkmodel
models=build/daemon/guest-models
for f in "$ko" "$bin" "$mk"; do
	[ -e "$f" ] || { echo "run-guest-orch: $f missing" >&2; exit 2; }
done
mkdir -p "$models"
"$mk" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 --vocab 512 --ctx 1024 \
	--tokenizer bpe --type f32 --seed 3 -o "$models/orch.gguf" >/dev/null

sysfs=/sys/class/misc/kvarena
echo "== kvarenad orchestrator over kvarena.ko on $kver =="
start=$(date +%s)
rc=0
tests/vm/run-guest.sh --kver "$kver" --ko "$ko" --bin "$bin" \
	--file "$models:models" --timeout "${KT_GUEST_TIMEOUT:-600}" --mem 1024 \
	--log "build/tests/guest-orch-$kver.log" \
	--cmd "modprobe kvarena max_pinned_mb=256 || exit 90" \
	--cmd "KVD_TEST_BACKEND=kernel KVD_TEST_SMALL=480 KVD_TEST_LEASE_MS=120000 KVD_TEST_ONLY=greedy_and_turns,fork,pressure,dropped_events test_orch_guest models/orch.gguf || exit 91" \
	--cmd "w=0; while [ \$w -lt 5 ] && [ \"\$(cat $sysfs/pinned_bytes)\" != 0 ]; do sleep 1; w=\$((w + 1)); done" \
	--cmd "p=\$(cat $sysfs/pinned_bytes) a=\$(cat $sysfs/arenas) s=\$(cat $sysfs/sessions)" \
	--cmd "echo \"after: pinned_bytes \$p arenas \$a sessions \$s (\${w}s for lingering pages)\"" \
	--cmd "[ \"\$p\" = 0 ] && [ \"\$a\" = 0 ] && [ \"\$s\" = 0 ] || exit 92" \
	--cmd "rmmod kvarena || exit 93" || rc=$?
echo "== kvarenad orchestrator over kvarena.ko on $kver: exit $rc, $(($(date +%s) - start)) s =="
exit "$rc"
