#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# The toolwait loader test on this host (root): memfd backend, the USDT
# probe, and each kind of sched probe (tp_btf, raw_tp, tracepoint/), then
# bpftool reading the pinned maps by field name.
set -euo pipefail
cd "$(dirname "$0")/../.."

bin=build/tests/toolwait/test_toolwait
if [ "$(id -u)" -ne 0 ]; then
	echo "toolwait: host test needs root (BPF); skipped" >&2
	exit 0
fi
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
[ -d /sys/kernel/tracing/events ] || mount -t tracefs nodev /sys/kernel/tracing
rc=0
for s in tp_btf raw_tp tracepoint; do
	echo "== toolwait host: memfd + USDT, sched $s =="
	"$bin" run -b memfd -s "$s" || rc=1
done

# bpftool prints named fields from the maps' BTF.
echo "== toolwait host: bpftool on the pinned maps =="
"$bin" kvactl -h >/dev/null
out=$(tests/toolwait/bpftool-demo.sh 2>&1) || { echo "$out"; rc=1; }
if grep -q '"slots"' <<<"$out" && grep -q '"idle_byte_sec"' <<<"$out" &&
	grep -q 'usdt_session_st' <<<"$out"; then
	echo "bpftool: named fields and programs: ok"
else
	echo "$out"
	echo "FAIL bpftool output lacks named fields"
	rc=1
fi
exit "$rc"
