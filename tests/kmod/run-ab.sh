#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Run guest suites against the module as of a base revision, then against
# the working tree's, in one guest boot: a test written for a fix should fail
# on the first and pass on the second.  Usage: run-ab.sh VERSION REV [suite...]
# Prints both CUnit summaries (the working tree's first); exits with the
# working tree's status.
#
# Modules before the UAPI freeze used ioctl magic 0xCA and ignored a
# command's size and direction bits, so the suite for the base module is
# built from the current sources with only the magic set back: each test
# then meets the old module's behaviour, not a renumbering.
set -euo pipefail
cd "$(dirname "$0")/../.."

kver=$1 rev=$2
shift 2
base=build/ab/$rev-$kver
if [ ! -f "$base/kvarena.ko" ]; then
	rm -rf "$base" && mkdir -p "$base"
	git archive "$rev" Kbuild kmod include | tar -x -C "$base"
	make -C "/lib/modules/$kver/build" M="$PWD/$base" modules >"$base/build.log" 2>&1
fi
abbin=build/ab/test_kmod_ca
if grep -q 'KVA_IOC_MAGIC[[:space:]]*0xBC' "$base/include/uapi/linux/kvarena.h"; then
	# The base already speaks this UAPI: the suite itself runs against both.
	mkdir -p build/ab && cp build/tests/kmod/test_kmod "$abbin"
elif [ ! -x "$abbin" ] || [ -n "$(find tests/kmod lib kmod/core include -newer "$abbin" -name '*.[ch]' | head -1)" ]; then
	mkdir -p build/ab/uapi/linux
	sed 's/^\(#define KVA_IOC_MAGIC[[:space:]]*\)0xBC$/\10xCA/' \
		include/uapi/linux/kvarena.h >build/ab/uapi/linux/kvarena.h
	grep -q 'KVA_IOC_MAGIC.*0xCA' build/ab/uapi/linux/kvarena.h
	gcc -std=c11 -D_GNU_SOURCE -O1 -g -Ibuild/ab/uapi -Iinclude/uapi -Ikmod/core -Ilib \
		-I/usr/include/libnl3 -Ibuild/bpf -Ibpf tests/kmod/*.c \
		$(ls lib/*.c | grep -v toolwait_none.c) kmod/core/*.c \
		-o "$abbin" -lcunit -luring -lnl-genl-3 -lnl-3 -lpthread -lbpf -lelf -lz -ljansson
fi
ko=build/kmod/$kver/kvarena.ko
[ -f "$ko" ] || { echo "run-ab: $ko missing (make modules-guest)" >&2; exit 2; }
# The working tree first, then the base, with oops=panic: a test that
# oopses the base module (a use-after-free under slab poisoning) ends the
# guest at once instead of hanging it until the timeout.
log=build/tests/ab-$kver.log
tests/vm/run-guest.sh --kver "$kver" --ko "$ko" --bin build/tests/kmod/test_kmod --bin "$abbin" \
	--bin build/bin/kvactl --file "$base/kvarena.ko:base/kvarena.ko" \
	--timeout "${KT_GUEST_TIMEOUT:-900}" --mem 1024 --allow-warnings \
	--append "${KT_SLUB_DEBUG-slub_debug=P,kmalloc-cg-*} oops=panic" \
	--log "$log" \
	--cmd "modprobe kvarena max_pinned_mb=512 || exit 91" \
	--cmd "echo '== working tree =='; test_kmod $*; echo KVA-AB-TREE-RC=\$?; rmmod kvarena" \
	--cmd "insmod base/kvarena.ko max_pinned_mb=512 || exit 90" \
	--cmd "echo '== base $rev =='; test_kmod_ca $* | grep -E 'Test:|FAIL|^Run Summary|tests  '" || true
grep -aq 'Kernel panic' "$log" && echo "== base $rev: the guest panicked (oops=panic): see $log =="
rc=$(grep -ao 'KVA-AB-TREE-RC=[0-9]*' "$log" | tail -1 | cut -d= -f2)
echo "== working tree: exit ${rc:-none} =="
exit "${rc:-1}"
