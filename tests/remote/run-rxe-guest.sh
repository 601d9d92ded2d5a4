#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# run-rxe-guest.sh VERSION - the UCX transfer engine over a verbs transport:
# in a QEMU guest running kernel VERSION, two network namespaces joined by
# a veth pair, Soft-RoCE (rdma_rxe) on each end, and test_xfer between
# them with UCX restricted to rc_verbs (ud_verbs for wire-up), each side's
# arena on kvarena.ko. So UCX registers the module's arena mapping with
# ibv_reg_mr (a long-term GUP pin) and the NIC model checks rkeys and
# bounds. Then every pinned byte must be back (registrations included)
# and the module must unload.
# Usage: run-rxe-guest.sh VERSION    (make check-remote-rxe)
set -euo pipefail
cd "$(dirname "$0")/../.."

kver=$1
ko=build/kmod/$kver/kvarena.ko
bin=build/remote/tests/test_xfer_plain
lib=/usr/lib/x86_64-linux-gnu
for f in "$ko" "$bin" /usr/bin/rdma /usr/sbin/ip "$lib/ucx/libuct_ib.so" \
	"$lib/libibverbs/librxe-rdmav34.so"; do
	[ -e "$f" ] || { echo "run-rxe-guest: $f missing" >&2; exit 2; }
done
sysfs=/sys/class/misc/kvarena
ns='ip netns exec'
ucx='UCX_TLS=rc_verbs,ud_verbs'
echo "== UCX over Soft-RoCE between two namespaces, arenas on kvarena.ko, $kver =="
start=$(date +%s)
rc=0
tests/vm/run-guest.sh --kver "$kver" --ko "$ko" --bin "$bin" \
	--bin /usr/bin/rdma --bin /usr/sbin/ip --bin "$lib/ucx/libuct_ib.so" \
	--bin "$lib/libibverbs/librxe-rdmav34.so" \
	--file "$lib/ucx:$lib/ucx" --file "$lib/libibverbs:$lib/libibverbs" \
	--file /etc/libibverbs.d:/etc/libibverbs.d \
	--kmod veth --kmod rdma_rxe --kmod ib_uverbs \
	--timeout "${KT_GUEST_TIMEOUT:-600}" --mem 2048 \
	--log "build/tests/guest-rxe-$kver.log" \
	--cmd "modprobe kvarena max_pinned_mb=256 && modprobe veth && modprobe rdma_rxe && modprobe ib_uverbs || exit 90" \
	--cmd "mkdir -p /run/netns /var/run; mount -t tmpfs none /run 2>/dev/null; mkdir -p /run/netns" \
	--cmd "ip netns add A && ip netns add B && ip link add va type veth peer name vb || exit 91" \
	--cmd "ip link set va netns A && ip link set vb netns B" \
	--cmd "ip -n A addr add 10.9.0.1/24 dev va && ip -n B addr add 10.9.0.2/24 dev vb" \
	--cmd "ip -n A link set lo up; ip -n B link set lo up; ip -n A link set va up; ip -n B link set vb up" \
	--cmd "$ns A rdma link add rxa type rxe netdev va && $ns B rdma link add rxb type rxe netdev vb || exit 92" \
	--cmd "rdma link show" \
	--cmd "$ns A env $ucx UCX_NET_DEVICES=rxa:1 test_xfer_plain serve 7311 > /tmp/serve.log 2>&1 &" \
	--cmd "$ns B env $ucx UCX_NET_DEVICES=rxb:1 test_xfer_plain client 10.9.0.1:7311; r=\$?" \
	--cmd "wait; cat /tmp/serve.log; [ \$r = 0 ] || exit 93" \
	--cmd "w=0; while [ \$w -lt 5 ] && [ \"\$(cat $sysfs/pinned_bytes)\" != 0 ]; do sleep 1; w=\$((w + 1)); done" \
	--cmd "p=\$(cat $sysfs/pinned_bytes) a=\$(cat $sysfs/arenas)" \
	--cmd "echo \"after: pinned_bytes \$p arenas \$a (\${w}s for lingering pages)\"" \
	--cmd "[ \"\$p\" = 0 ] && [ \"\$a\" = 0 ] || exit 94" \
	--cmd "rmmod kvarena || exit 95" || rc=$?
echo "== UCX over Soft-RoCE, $kver: exit $rc, $(($(date +%s) - start)) s =="
exit "$rc"
