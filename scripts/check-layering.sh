#!/bin/sh
# SPDX-License-Identifier: MIT
# The daemon's layering rule (issue 40; Documentation/chat.md, "Layering"):
# the HTTP front ends (daemon/api/) are known only to the program's main
# (daemon/kvarenad/main.c): no other source of the daemon includes one of
# their headers; the model families' room (daemon/chat/) includes only its
# own headers and daemon/common's (it knows no HTTP, no engine, no
# orchestrator). Exit 1 naming each include that breaks it.
set -eu
cd "$(dirname "$0")/.."
bad=0
api_headers=$(cd daemon/api && ls ./*.h | sed 's|^\./||')
for f in daemon/*/*.c daemon/*/*.h; do
	case $f in
	daemon/api/*|daemon/kvarenad/main.c) continue ;;
	esac
	for h in $api_headers; do
		if grep -Eq "^[[:space:]]*#[[:space:]]*include[[:space:]]+\"([^\"]*/)?$h\"" "$f"; then
			echo "check-layering: $f includes the front ends' $h (only daemon/kvarenad/main.c may)"
			bad=1
		fi
	done
done
own=$(cd daemon/chat && ls ./*.h | sed 's|^\./||'; cd ../common && ls ./*.h | sed 's|^\./||')
for f in daemon/chat/*.c daemon/chat/*.h; do
	grep -Eo "^[[:space:]]*#[[:space:]]*include[[:space:]]+\"[^\"]+\"" "$f" |
		sed 's/.*"\(.*\)"/\1/' | while read -r h; do
		if ! echo "$own" | grep -qx "$h"; then
			echo "check-layering: $f includes $h (daemon/chat/ includes only its own and daemon/common's headers)"
			exit 1
		fi
	done || bad=1
done
[ $bad = 0 ] && echo "check-layering: the front ends known only to main.c; daemon/chat/ self-contained"
exit $bad
