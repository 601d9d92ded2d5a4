#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Run the in-guest suite (build/tests/kmod/test_kmod) against kvarena.ko in
# a QEMU guest running kernel VERSION.  Usage: run-suite.sh VERSION [suite...]
set -euo pipefail
cd "$(dirname "$0")/../.."

kver=$1
shift
ko=build/kmod/$kver/kvarena.ko
bin=build/tests/kmod/test_kmod
kvactl=build/bin/kvactl
modargs="max_pinned_mb=512"
# Freed objects of the accounted kmalloc caches (waiters, sessions, arenas)
# are poisoned, so a use-after-free of one faults in the guest log.
slub=${KT_SLUB_DEBUG-slub_debug=P,kmalloc-cg-*}
[ -f "$ko" ] || { echo "run-suite: $ko missing (make modules-guest)" >&2; exit 2; }
[ -x "$bin" ] || { echo "run-suite: $bin missing (make tests)" >&2; exit 2; }

mkdir -p build/tests
echo "== kvarena guest suite on $kver =="
start=$(date +%s)
rc=0
tests/vm/run-guest.sh --kver "$kver" --ko "$ko" --bin "$bin" --bin "$kvactl" \
	--timeout "${KT_GUEST_TIMEOUT:-600}" --mem 1024 --append "$slub" \
	--log "build/tests/guest-$kver.log" \
	--cmd "export KT_MODPROBE_ARGS='$modargs'" \
	--cmd "modprobe kvarena \$KT_MODPROBE_ARGS || exit 90" \
	--cmd "test_kmod $*" || rc=$?
echo "== guest suite on $kver: exit $rc, $(($(date +%s) - start)) s =="
exit "$rc"
