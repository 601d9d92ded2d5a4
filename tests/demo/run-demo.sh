#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# make demo: boot a Debian guest kernel in QEMU, load kvarena.ko, and run
# kva-share: a prefill process writes KV into arena blocks, a decode process
# receives the arena and its dma-buf over a Unix socket, verifies the bytes
# in place and shares the blocks; then kve-demo: the CPU engine as a prefill
# worker and a decode worker over one kvarena arena, on a small
# random-weight model kva-mkmodel writes; then the module's stats.
# DEMO_KERNEL=61|612 picks the guest kernel (default 612).
set -euo pipefail
cd "$(dirname "$0")/../.."

series=${DEMO_KERNEL:-612}
kver=$(tests/vm/kernels.sh "$series" | awk '{print $2}')
ko=build/kmod/$kver/kvarena.ko
[ -f "$ko" ] || { echo "demo: $ko missing: run 'make demo'" >&2; exit 2; }
model=build/demo/demo-f16.gguf
mkdir -p build/demo
build/bin/kva-mkmodel --dim 256 --layers 4 --heads 8 --kv-heads 2 --ffn 688 \
	--vocab 4096 --ctx 512 --type f16 --seed 7 -o "$model" >/dev/null

cat <<MSG
== kvarena demo on Linux $kver (QEMU guest) ==
   modprobe kvarena; kva-share: prefill and decode processes share one
   pinned 2 MiB-page arena through its dma-buf, with no copy; kve-demo:
   the CPU engine prefills a prompt into arena blocks in one process and
   decodes from them in another.
MSG
tests/vm/run-guest.sh --kver "$kver" --ko "$ko" --bin build/bin/kva-share \
	--bin build/bin/kvactl --bin build/bin/kve-demo --file "$model:/opt/kva/demo.gguf" \
	--timeout 300 --log build/demo.log \
	--cmd 'modprobe kvarena max_pinned_mb=256 || exit 90' \
	--cmd 'echo "# modprobe kvarena: /dev/kvarena $(stat -c "%a" /dev/kvarena), max_pinned_mb=$(cat /sys/module/kvarena/parameters/max_pinned_mb)"' \
	--cmd 'echo "# kvactl monitor (the operator view, over generic netlink):"' \
	--cmd 'kvactl monitor --count 4 --timeout 10 2>/dev/null | sed "s/^/  [monitor] /" & sleep 0.5' \
	--cmd 'kva-share -m 64 -n 32 -s 256 || exit 92' \
	--cmd 'wait' \
	--cmd 'echo; echo "# kve-demo: the engine as prefill and decode workers over one arena"' \
	--cmd 'kve-demo /opt/kva/demo.gguf "The decode worker reads the KV the prefill worker wrote." --tokens 24 || exit 93' \
	--cmd 'echo; echo "# after both processes exit:"; for f in pinned_bytes arenas sessions blocks_used; do printf "  %-13s %s\n" $f "$(cat /sys/class/misc/kvarena/$f)"; done' \
	--cmd 'rmmod kvarena && echo "# rmmod kvarena: ok"' 2>&1 |
	grep -vE '^(SeaBIOS|Booting from|KVA-|\[ *[0-9.]+\] reboot)' || true
grep -q '^KVA-GUEST-RC=0' build/demo.log
