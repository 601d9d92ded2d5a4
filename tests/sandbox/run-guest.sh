#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# make check-sandbox-guest: the sandbox's cgroup v2 lane (guest-limits.sh)
# in a QEMU guest on Debian's 6.12 kernel, whose init mounts cgroup2 and
# enables +cpu +memory +pids (this host's cgroups are hybrid).
set -euo pipefail
cd "$(dirname "$0")/../.."
for f in build/bin/kva-sandbox build/sandbox/kvs-probe; do
	[ -x "$f" ] || { echo "sandbox guest: $f missing (make sandbox)" >&2; exit 2; }
done
mkdir -p build/sandbox
exec tests/vm/run-guest.sh --kver "${KVS_GUEST_KVER:-612}" --timeout "${KVS_GUEST_TIMEOUT:-600}" \
	--mem 1024 --log build/sandbox/guest.log \
	--bin build/bin/kva-sandbox --bin build/sandbox/kvs-probe \
	--bin tests/sandbox/guest-limits.sh --cmd 'guest-limits.sh'
