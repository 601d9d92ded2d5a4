#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# A short kva-fuzz run against kvarena.ko in a guest running the Debian
# kernel VERSION (check-fuzz).  Usage: run-fuzz.sh VERSION
# env: FUZZ_OPS (20000), FUZZ_SEED, FUZZ_SECS (300)
set -euo pipefail
cd "$(dirname "$0")/../.."
kver=$1
ko=build/kmod/$kver/kvarena.ko
bin=build/tests/fuzz/kva-fuzz
ops=${FUZZ_OPS:-20000}
seed=${FUZZ_SEED:-0x6b7661}
secs=${FUZZ_SECS:-300}
[ -f "$ko" ] || { echo "run-fuzz: $ko missing (make modules-guest)" >&2; exit 2; }
[ -x "$bin" ] || { echo "run-fuzz: $bin missing (make fuzz)" >&2; exit 2; }
mkdir -p build/tests
echo "== kva-fuzz on $kver: $ops ops, seed $seed =="
start=$(date +%s)
rc=0
tests/vm/run-guest.sh --kver "$kver" --ko "$ko" --bin "$bin" \
	--timeout $((secs + 300)) --mem 1024 --log "build/tests/fuzz-$kver.log" \
	--cmd 'modprobe kvarena max_pinned_mb=256 || exit 90' \
	--cmd 'modprobe vgem' \
	--cmd "kva-fuzz -s $seed -n $ops -t $secs -p 3 -j 3 -z" || rc=$?
echo "== kva-fuzz on $kver: exit $rc, $(($(date +%s) - start)) s =="
exit "$rc"
