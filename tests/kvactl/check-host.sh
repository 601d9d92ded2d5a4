#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# kvactl on the host, without the module: help at every level and -V exit
# 0 on stdout, usage errors exit 2 everywhere, the JSON schema
# (`kvactl help json`) is valid JSON and every key it names is documented
# in kvactl(8).  The listings themselves are tested against the module in
# the guest suite (tests/kmod/test_kvactl.c), validated by the same schema.
# Usage: check-host.sh [KVACTL]
set -uo pipefail
cd "$(dirname "$0")/../.."
k=${1:-build/bin/kvactl}
man=Documentation/man/kvactl.8
fail=0

expect() {	# expect RC "ARGS" [stdout|stderr]: exit status and where text goes
	local want=$1 args=$2 stream=${3:-} out err rc
	out=$($k $args 2>/tmp/kvactl-host.$$)
	rc=$?
	err=$(cat /tmp/kvactl-host.$$)
	if [ "$rc" != "$want" ]; then
		echo "FAIL kvactl $args: exit $rc, want $want ($err)"
		fail=1
	elif [ "$stream" = stdout ] && { [ -z "$out" ] || [ -n "$err" ]; }; then
		echo "FAIL kvactl $args: want text on stdout only"
		fail=1
	elif [ "$stream" = stderr ] && { [ -n "$out" ] || [ -z "$err" ]; }; then
		echo "FAIL kvactl $args: want text on stderr only"
		fail=1
	fi
}

for a in help -h --help "help arena" "help json" "arena help" "arena --help" \
	"arena list --help" "arena show help" "session help" "session list -h" \
	"policy help" "policy set help" "monitor help" "monitor --help" \
	"toolwait help" "toolwait --help" "toolwait -h" "-j arena help" -V --version; do
	expect 0 "$a" stdout
done
for a in "" bogus -x "arena bogus" "arena show" "arena show x" "arena show 1 2" \
	"arena show -1" "arena show 99999999999" "session list --arena" \
	"session list --arena x" "session list --arena 0x" "session list extra" \
	"policy" "policy set 1 fifo" "policy set x lru" "policy set 1 lru low" \
	"policy set 1 lru low -3" "policy get" "monitor --count" \
	"monitor --count x" "monitor --timeout 9999999999" "monitor --bogus 1" \
	"toolwait -a x" "toolwait --arena" "toolwait 5x" "toolwait -1" \
	"toolwait 1 2 3" "toolwait --bogus" "help bogus"; do
	expect 2 "$a" stderr
done
if [ ! -e /sys/module/kvarena ]; then
	expect 1 "arena list" stderr
	expect 1 "-j session list" stderr
fi
$k -V | grep -q "libkvarena $(cat VERSION)" ||
	{ echo "FAIL kvactl -V: $($k -V)"; fail=1; }

# The schema: JSON, and each key documented in kvactl(8).
keys=$($k help json | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
assert set(s["commands"]) == {"arena list", "arena show", "session list",
                              "monitor", "toolwait"}, s["commands"]
for name, obj in s["objects"].items():
    for key, t in obj.items():
        assert t in ("integer", "string", "boolean", "u64") or \
            t.strip("[]") in s["objects"], (name, key, t)
        print(key)
') || { echo "FAIL kvactl help json: not a valid schema"; fail=1; }
for key in $(sort -u <<<"$keys"); do
	grep -Eq "^\.B[R]? ${key}( |$)" "$man" ||
		{ echo "FAIL kvactl(8) does not document JSON key '$key'"; fail=1; }
done
rm -f /tmp/kvactl-host.$$
[ $fail = 0 ] && echo "check-kvactl: help, usage errors, schema and kvactl(8): ok"
exit $fail
