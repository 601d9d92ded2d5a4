#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The KV tiers over kvarena.ko in a QEMU guest running kernel VERSION: the
# disk tier's unit tests on the module's arena mapping (test_tier with
# KVT_TEST_BACKEND=kernel), then kvarenad's tiers end to end
# (test_tiering with KVD_TEST_BACKEND=kernel; its killed daemon with the
# eBPF tool-wait programs loaded), spill files on a tmpfs;
# then every byte pinned by the module must be back and the module must
# unload. The 6.12 guest runs the tier O_DIRECT from and into the
# module's mapping, through registered buffers; the 6.1 guest cannot.
# Usage: run-guest-tier.sh VERSION        (make check-tier-guest)
set -euo pipefail
cd "$(dirname "$0")/../.."

kver=$1
ko=build/kmod/$kver/kvarena.ko
unit=build/tier/tests/test_tier_guest
bin=build/daemon/tests/test_tiering_guest
mk=build/bin/kva-mkmodel
models=build/daemon/guest-models
for f in "$ko" "$unit" "$bin" "$mk"; do
	[ -e "$f" ] || { echo "run-guest-tier: $f missing" >&2; exit 2; }
done
mkdir -p "$models"
"$mk" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 --vocab 512 --ctx 1024 \
	--tokenizer bpe --type f32 --seed 3 -o "$models/orch.gguf" >/dev/null
# 6.1: tmpfs has no O_DIRECT (6.6+), and io_uring refuses registered
# buffers over file-backed mappings other than shmem and hugetlb (the
# module's is an anon-inode file's): the tier runs buffered, plain SQEs
case $kver in
6.1.*) direct=0 fixed=0 ;;
*) direct=1 fixed=1 ;;
esac

sysfs=/sys/class/misc/kvarena
echo "== KV tiers over kvarena.ko on $kver =="
start=$(date +%s)
rc=0
tests/vm/run-guest.sh --kver "$kver" --ko "$ko" --bin "$unit" --bin "$bin" \
	--file "$models:models" --timeout "${KT_GUEST_TIMEOUT:-900}" --mem 1024 \
	--log "build/tests/guest-tier-$kver.log" \
	--cmd "modprobe kvarena max_pinned_mb=256 || exit 90" \
	--cmd "mkdir -p /spill && mount -t tmpfs -o mode=0700 tmpfs /spill || exit 89" \
	--cmd "KVT_TEST_BACKEND=kernel KVT_TEST_DIRECT=$direct KVT_TEST_FIXED=$fixed test_tier_guest /spill/unit || exit 91" \
	--cmd "mount -t bpf bpf /sys/fs/bpf || exit 88" \
	--cmd "KVD_TEST_BACKEND=kernel KVD_TEST_BPF=1 KVD_TEST_SLOW=4 KVD_TEST_ONLY=spill_restore,prefetch,corrupt,overrun,killed test_tiering_guest models/orch.gguf /spill/daemon || exit 92" \
	--cmd "w=0; while [ \$w -lt 5 ] && [ \"\$(cat $sysfs/pinned_bytes)\" != 0 ]; do sleep 1; w=\$((w + 1)); done" \
	--cmd "p=\$(cat $sysfs/pinned_bytes) a=\$(cat $sysfs/arenas) s=\$(cat $sysfs/sessions)" \
	--cmd "echo \"after: pinned_bytes \$p arenas \$a sessions \$s (\${w}s for lingering pages)\"" \
	--cmd "[ \"\$p\" = 0 ] && [ \"\$a\" = 0 ] && [ \"\$s\" = 0 ] || exit 93" \
	--cmd "rmmod kvarena || exit 94" || rc=$?
echo "== KV tiers over kvarena.ko on $kver: exit $rc, $(($(date +%s) - start)) s =="
exit "$rc"
