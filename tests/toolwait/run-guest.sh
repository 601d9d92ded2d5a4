#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# The toolwait loader test in a QEMU guest running kernel VERSION, against
# kvarena.ko's tracepoint: raw_tp with tp_btf sched probes, then
# tracepoint/ with raw_tp sched probes.  Usage: run-guest.sh VERSION
set -euo pipefail
cd "$(dirname "$0")/../.."

kver=$1
ko=build/kmod/$kver/kvarena.ko
bin=build/tests/toolwait/test_toolwait
[ -f "$ko" ] || { echo "toolwait: $ko missing (make modules-guest)" >&2; exit 2; }
[ -x "$bin" ] || { echo "toolwait: $bin missing" >&2; exit 2; }

mkdir -p build/tests
echo "== toolwait in the $kver guest =="
start=$(date +%s)
rc=0
tests/vm/run-guest.sh --kver "$kver" --ko "$ko" --bin "$bin" \
	--timeout "${TW_GUEST_TIMEOUT:-240}" --mem 1024 \
	--log "build/tests/toolwait-guest-$kver.log" \
	--cmd "modprobe kvarena max_pinned_mb=256 || exit 90" \
	--cmd "test_toolwait run -b kernel -m raw_tp -s auto || exit 1" \
	--cmd "test_toolwait run -b kernel -m tracepoint -s raw_tp || exit 1" || rc=$?
echo "== toolwait in the $kver guest: exit $rc, $(($(date +%s) - start)) s =="
exit "$rc"
