#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Two tool waits with the toolwait programs attached, then bpftool on what
# they pinned: the commands Documentation/toolwait.md shows.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec build/tests/toolwait/test_toolwait demo "$@" '
set -x
bpftool map dump pinned /sys/fs/bpf/kvarena/classes
bpftool map dump pinned /sys/fs/bpf/kvarena/sessions
bpftool map dump pinned /sys/fs/bpf/kvarena/stats
bpftool map show pinned /sys/fs/bpf/kvarena/events
bpftool prog show name usdt_session_state
bpftool prog show name btf_exit
'
