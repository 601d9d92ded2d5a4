#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# run-rxe-guest.sh VERSION - the UCX transfer engine over a verbs transport:
# in a QEMU guest running kernel VERSION, Soft-RoCE (rdma_rxe) on one end
# of a veth pair and test_xfer's two processes on it (rxe loops traffic to
# its own address back; these kernels' rxe creates devices only in the
# initial network namespace, so the two-namespace layout of check-remote
# cannot carry it), UCX's RMA on rc_verbs (TCP on the veth for wire-up:
# UCX 1.13's UD wire-up gets no answer over rxe's loopback here and then
# trips an assertion of its own), the rxe packet counter checked,
# each side's arena on kvarena.ko. So UCX registers the module's arena
# mapping with ibv_reg_mr (a long-term GUP pin) and the RDMA device model
# checks rkeys and bounds. Then every pinned byte must be back
# (registrations included) and the module must unload.
# Usage: run-rxe-guest.sh VERSION [SERVER_BACKEND [CLIENT_BACKEND]]
#        (kernel or memfd each, default kernel; make check-remote-rxe)
set -euo pipefail
cd "$(dirname "$0")/../.."

kver=$1
sbackend=${2:-kernel}	# the passive side's arena: kernel (kvarena.ko) or memfd
cbackend=${3:-kernel}	# the active side's
ko=build/kmod/$kver/kvarena.ko
bin=build/remote/tests/test_xfer_plain
lib=/usr/lib/x86_64-linux-gnu
for f in "$ko" "$bin" /usr/bin/rdma /usr/sbin/ip "$lib/ucx/libuct_ib.so" \
	"$lib/libibverbs/librxe-rdmav34.so"; do
	[ -e "$f" ] || { echo "run-rxe-guest: $f missing" >&2; exit 2; }
done
sysfs=/sys/class/misc/kvarena
ip=/opt/kva/bin/ip	# iproute2's (veth)
ucx="UCX_TLS=rc_verbs,tcp UCX_NET_DEVICES=rxa:1,va KVR_TEST_FLUSH_MS=120000"
echo "== UCX over Soft-RoCE, $kver, arenas: passive side $sbackend, active side $cbackend =="
start=$(date +%s)
rc=0
# UCX's transport modules and the rxe verbs provider are dlopen()ed: their
# libraries by hand (run-guest.sh's --bin packs executables' ldd closures)
deps=()
for l in $(ldd "$lib/ucx/libuct_ib.so" "$lib/ucx/libuct_rdmacm.so" \
	"$lib/libibverbs/librxe-rdmav34.so" | awk '/=>/ { print $3 }' | sort -u); do
	deps+=(--file "$l:$l")
	r=$(readlink -f "$l")
	[ "$r" = "$l" ] || deps+=(--file "$r:$r")
done
tests/vm/run-guest.sh --kver "$kver" --ko "$ko" --bin "$bin" \
	--bin /usr/bin/rdma --bin /usr/sbin/ip "${deps[@]}" \
	--file "$lib/ucx:$lib/ucx" --file "$lib/libibverbs:$lib/libibverbs" \
	--file /etc/libibverbs.d:/etc/libibverbs.d \
	--kmod veth --kmod rdma_rxe --kmod ib_uverbs --kmod crc32_generic \
	--timeout "${KT_GUEST_TIMEOUT:-600}" --mem 2048 \
	--log "build/tests/guest-rxe-$kver-$sbackend-$cbackend.log" \
	--cmd "modprobe kvarena max_pinned_mb=256 && modprobe veth && modprobe crc32_generic && modprobe rdma_rxe && modprobe ib_uverbs || exit 90" \
	--cmd "$ip link add va type veth peer name vb && $ip addr add 10.9.0.1/24 dev va || exit 91" \
	--cmd "$ip link set lo up; $ip link set va up; $ip link set vb up" \
	--cmd "/opt/kva/bin/rdma link add rxa type rxe netdev va || exit 92" \
	--cmd "/opt/kva/bin/rdma link show" \
	--cmd "env $ucx KVR_TEST_BACKEND=$sbackend /opt/kva/bin/test_xfer_plain serve 7311 > /tmp/serve.log 2>&1 &" \
	--cmd "env $ucx KVR_TEST_BACKEND=$cbackend /opt/kva/bin/test_xfer_plain client 10.9.0.1:7311; r=\$?" \
	--cmd "wait; cat /tmp/serve.log; [ \$r = 0 ] || { dmesg | tail -25; exit 93; }" \
	--cmd "/opt/kva/bin/rdma statistic show link rxa/1" \
	--cmd "sent=\$(cat /sys/class/infiniband/rxa/ports/1/hw_counters/sent_pkts)" \
	--cmd "echo \"rxe sent \$sent packets\"; [ \"\$sent\" -gt 100 ] || exit 96" \
	--cmd "w=0; while [ \$w -lt 5 ] && [ \"\$(cat $sysfs/pinned_bytes)\" != 0 ]; do sleep 1; w=\$((w + 1)); done" \
	--cmd "p=\$(cat $sysfs/pinned_bytes) a=\$(cat $sysfs/arenas)" \
	--cmd "echo \"after: pinned_bytes \$p arenas \$a (\${w}s for lingering pages)\"" \
	--cmd "[ \"\$p\" = 0 ] && [ \"\$a\" = 0 ] || exit 94" \
	--cmd "rmmod kvarena || exit 95" || rc=$?
echo "== UCX over Soft-RoCE, $kver: exit $rc, $(($(date +%s) - start)) s =="
exit "$rc"
