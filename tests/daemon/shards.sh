#!/bin/sh
# SPDX-License-Identifier: MIT
# shards.sh N CMD [ARG...] - runs a daemon suite (test_orch, test_tiering) as
# N processes side by side, KVD_TEST_SHARD=i/N in each (test_run.h: every
# N-th test from the i-th), so that the suite's tests run once between them.
# Most of those suites' time is waiting out real tool and tier durations,
# which overlap. Each shard's output goes to a file of its own and is
# printed whole, in shard order, once all have ended; fails when any did.
set -u
n=$1
shift
case $n in
'' | *[!0-9]* | 0) echo "shards.sh: N must be a positive number, got '$n'" >&2; exit 2 ;;
esac
dir=$(mktemp -d) || exit 2
trap 'rm -rf "$dir"' EXIT
start=$(date +%s)
i=0
while [ "$i" -lt "$n" ]; do
	(KVD_TEST_SHARD=$i/$n "$@" >"$dir/$i.out" 2>&1; echo $? >"$dir/$i.rc") &
	i=$((i + 1))
done
wait
rc=0
i=0
while [ "$i" -lt "$n" ]; do
	r=$(cat "$dir/$i.rc" 2>/dev/null || echo lost)
	echo "== shard $i/$n: exit $r =="
	cat "$dir/$i.out"
	[ "$r" = 0 ] || rc=1
	i=$((i + 1))
done
if [ "$rc" = 0 ]; then
	echo "== $n shards: all passed in $(($(date +%s) - start)) s =="
else
	echo "== $n shards: FAILED (above) after $(($(date +%s) - start)) s =="
fi
exit "$rc"
