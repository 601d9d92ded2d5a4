#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# run-remote.sh KVARENAD KVARENAD_HOOKS MODEL OTHER_MODEL - kvarenad on two
# "hosts" (network namespaces, tests/remote/netns.sh): test_remote.py runs
# inside namespace A, starts A's kvarenad there and B's in namespace B.
set -u
cd "$(dirname "$0")/../.."
. tests/remote/netns.sh
[ "$(id -u)" -eq 0 ] || { echo "run-remote: needs root (network namespaces)"; exit 1; }
trap netns_down EXIT
netns_up || { echo "run-remote: cannot make network namespaces"; exit 1; }
export NS_A NS_B IF_A IF_B ADDR_A ADDR_B
ip netns exec "$NS_A" /usr/bin/python3 tests/remote/test_remote.py "$(realpath "$1")" \
	"$(realpath "$2")" "$(realpath "$3")" "$(realpath "$4")" \
	"$(realpath tests/remote/kv_subscriber.py)"
