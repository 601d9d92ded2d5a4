#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# run-xfer.sh TEST_XFER - the UCX transfer engine between two network
# namespaces (tests/remote/netns.sh), UCX over TCP on the veth pair:
#   1. pulls and pushes land exactly, bounds refused (test_xfer client);
#   2. the server SIGKILLed mid-stream: the client's flush fails in
#      bounded time instead of hanging;
#   3. the link cut mid-stream (veth deleted): the same.
set -u
cd "$(dirname "$0")/../.."
. tests/remote/netns.sh
BIN=$(realpath "$1")
[ "$(id -u)" -eq 0 ] || { echo "run-xfer: needs root (network namespaces)"; exit 1; }
trap netns_down EXIT
netns_up || { echo "run-xfer: cannot make network namespaces"; exit 1; }
PORT=7311
fail=0
log=$(mktemp -d)

echo "== transfers between two namespaces (UCX over tcp on the veth pair)"
ip netns exec "$NS_A" env $(ucx_env_a) "$BIN" serve $PORT >"$log/s1" 2>&1 &
srv=$!
ip netns exec "$NS_B" env $(ucx_env_b) timeout 60 "$BIN" client "$ADDR_A:$PORT" >"$log/c1" 2>&1 ||
	fail=1
wait $srv || fail=1
cat "$log/s1" "$log/c1"

stream_case() {	# $1: what ends the server
	ip netns exec "$NS_A" env $(ucx_env_a) "$BIN" serve $PORT >"$log/s2" 2>&1 &
	srv=$!
	ip netns exec "$NS_B" env $(ucx_env_b) timeout 60 "$BIN" client "$ADDR_A:$PORT" --stream \
		>"$log/c2" 2>&1 &
	cli=$!
	for _ in $(seq 100); do grep -q streaming "$log/c2" && break; sleep 0.1; done
	sleep 0.5
	case $1 in
	kill) kill -9 $srv ;;
	cut) netns_cut ;;
	esac
	start=$(date +%s)
	wait $cli
	rc=$?
	end=$(date +%s)
	kill -9 $srv 2>/dev/null
	wait $srv 2>/dev/null
	cat "$log/c2"
	if [ $rc -ne 0 ] || ! grep -q 'peer failure seen' "$log/c2"; then
		echo "FAIL: $1: the client did not see the failure (rc $rc)"
		fail=1
	else
		echo "ok: $1: failure seen $((end - start)) s after it"
	fi
}
echo "== the server killed mid-stream"
stream_case kill
echo "== the link cut mid-stream"
stream_case cut
rm -rf "$log"
[ $fail -eq 0 ] && echo "run-xfer: PASS" || echo "run-xfer: FAIL"
exit $fail
