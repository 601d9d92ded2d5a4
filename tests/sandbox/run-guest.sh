#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# make check-sandbox-guest: the sandbox's cgroup v2 lane in a QEMU guest on
# Debian's 6.12 kernel, whose init mounts cgroup2 and enables +cpu +memory
# +pids (this host's cgroups are hybrid): through kva-sandbox
# (guest-limits.sh), then through kvarenad's HTTP API and agent loop
# (guest-daemon.sh, kvarenad-hooks with the memfd backend and a small
# random model). Both always run; the lane fails if either does.
set -euo pipefail
cd "$(dirname "$0")/../.."
for f in build/bin/kva-sandbox build/sandbox/kvs-probe build/daemon/tests/kvarenad-hooks \
	build/daemon/tests/sandbox-guest.gguf; do
	[ -e "$f" ] || { echo "sandbox guest: $f missing (make check-sandbox-guest builds it)" >&2; exit 2; }
done
mkdir -p build/sandbox
# shellcheck disable=SC2016 # $a and $b are the guest shell's
exec tests/vm/run-guest.sh --kver "${KVS_GUEST_KVER:-612}" --timeout "${KVS_GUEST_TIMEOUT:-600}" \
	--mem 1024 --log build/sandbox/guest.log \
	--bin build/bin/kva-sandbox --bin build/sandbox/kvs-probe \
	--bin build/daemon/tests/kvarenad-hooks \
	--file build/daemon/tests/sandbox-guest.gguf:models/sandbox-guest.gguf \
	--bin tests/sandbox/guest-limits.sh --bin tests/sandbox/guest-daemon.sh \
	--cmd 'guest-limits.sh; a=$?' --cmd 'guest-daemon.sh; b=$?' \
	--cmd '[ "$a" = 0 ] && [ "$b" = 0 ]'
