#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Boot the debug kernel (make debug-kernel) with kvarena.ko and run, in one
# guest: the module's guest suite, kva-fuzz, kva-failnth (fault injection),
# then rmmod and two kmemleak scans.  Fails on a failing step or on any
# KASAN / lockdep / kmemleak / DEBUG_OBJECTS / WARN / BUG report.
#
#   tests/debug/check-debug.sh KO      (env: DEBUG_KERNEL_DIR, FUZZ_OPS,
#                                       FUZZ_SECS, FUZZ_SEED, KVA_DEBUG_TIMEOUT,
#                                       FAILNTH_ARGS: kva-failnth scenarios,
#                                       KT_RACE_SECS: the WAIT_EVENT race's
#                                       length (120 s),
#                                       KT_SUITES: guest suites, FUZZ_ARGS: more
#                                       kva-fuzz options, e.g. -x VGEM)
set -euo pipefail
cd "$(dirname "$0")/../.."
ko=$1
dir=${DEBUG_KERNEL_DIR:-/var/cache/kvarena/debug-kernel}
ops=${FUZZ_OPS:-20000}
secs=${FUZZ_SECS:-600}
seed=${FUZZ_SEED:-0x6b7661}
rel=$(cat "$dir/release") || { echo "check-debug: no debug kernel in $dir (make debug-kernel)" >&2; exit 2; }
log=build/tests/debug/guest.log
mkdir -p build/tests/debug
# Generous: KASAN + lockdep under TCG run the suite several times slower.
timeout=${KVA_DEBUG_TIMEOUT:-$((1800 + secs))}

# What fails the lane in the guest's kernel log (the harness adds its own
# Oops|BUG:|WARNING:|general protection|KASAN|kernel BUG|Call Trace).
bad='BUG:|WARNING:|KASAN|Oops|general protection|possible circular locking|possible recursive locking|inconsistent lock state|INFO: |ODEBUG|kmemleak: [0-9]+ new suspected|UBSAN|list_add corruption|list_del corruption|Poison overwritten|Redzone|hung_task|Call Trace'

echo "== check-debug: $rel, $ko, fuzz $ops ops (<= ${secs}s, seed $seed) =="
start=$(date +%s)
rc=0
KVA_VM_PVH=0 tests/vm/run-guest.sh --kver "$rel" --kimage "$dir/bzImage" --modroot "$dir/root" \
	--ko "$ko" --bin build/tests/kmod/test_kmod --bin build/bin/kvactl \
	--bin build/tests/fuzz/kva-fuzz --bin build/tests/debug/kva-failnth \
	--mem 2048 --timeout "$timeout" --log "$log" --append kasan_multi_shot \
	--cmd "export KT_MODPROBE_ARGS='max_pinned_mb=512'" \
	--cmd "export KT_RACE_SECS=${KT_RACE_SECS:-120}   # the WAIT_EVENT race: 15 s catch nothing here" \
	--cmd 'fail=0; step() { echo "KVA-STEP $1 rc=$2"; [ "$2" = 0 ] || fail=1; }' \
	--cmd 'kl=/sys/kernel/debug/kmemleak; [ -w $kl ] || step kmemleak-present 1' \
	--cmd '[ -w $kl ] && { echo scan >$kl; echo clear >$kl; }   # boot-time suspects are not ours' \
	--cmd 'modprobe kvarena $KT_MODPROBE_ARGS || exit 90' \
	--cmd 'modprobe vgem' \
	--cmd "t0=\$(cut -d' ' -f1 /proc/uptime); test_kmod ${KT_SUITES:-}; step suite \$?" \
	--cmd 't1=$(cut -d" " -f1 /proc/uptime); echo "KVA-TIME suite $t0 $t1"' \
	--cmd "kva-fuzz -s $seed -n $ops -t $secs -p 3 -j 3 -z ${FUZZ_ARGS:-}; step fuzz \$?" \
	--cmd 't2=$(cut -d" " -f1 /proc/uptime); echo "KVA-TIME fuzz $t1 $t2"' \
	--cmd "kva-failnth ${FAILNTH_ARGS:-}; r=\$?; [ \$r = 77 ] && r=1; step failnth \$r" \
	--cmd 't3=$(cut -d" " -f1 /proc/uptime); echo "KVA-TIME failnth $t2 $t3"' \
	--cmd '[ -w $kl ] && { sleep 1; echo scan >$kl; sleep 1; echo scan >$kl; cat $kl >/tmp/leaks; }  # symbols resolve' \
	--cmd 'rmmod vgem; rmmod kvarena; step rmmod $?' \
	--cmd '[ -w $kl ] && { sleep 1; echo scan >$kl; sleep 1; echo scan >$kl; cat $kl >>/tmp/leaks; }  # and on unload' \
	--cmd 'if [ -s /tmp/leaks ]; then sed "s/^/KVA-LEAK| /" /tmp/leaks | head -200; step kmemleak 1; else step kmemleak 0; fi' \
	--cmd "n=\$(dmesg | grep -cE '$bad'); dmesg | grep -E '$bad' | head -50 | sed 's/^/KVA-REPORT| /'; step klog \$n" \
	--cmd 'exit $fail' || rc=$?
end=$(date +%s)
echo "== check-debug steps =="
grep -aE 'KVA-STEP|KVA-TIME|kva-fuzz: (seed|PASS|FAIL|[0-9]+ ops)|failnth: .*(ok|FAIL|PASS)' "$log" | tr -d '\r' || true
grep -aE 'KVA-LEAK|KVA-REPORT' "$log" | tr -d '\r' | head -80 || true
echo "== check-debug: exit $rc, $((end - start)) s (serial log: $log) =="
exit "$rc"
