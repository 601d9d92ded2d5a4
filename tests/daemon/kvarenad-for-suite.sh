#!/bin/sh
# SPDX-License-Identifier: MIT
# Starts the real kvarenad for the HTTP suites (run-api.sh, api_suite.py):
# turns their keys file ("NAME ID KEY..." lines) into [tenant.NAME]
# sections of a kvarenad config and execs the daemon on PORT.
# usage: kvarenad-for-suite.sh KVARENAD MODEL PORT KEYS [kvarenad options]
set -eu
exe=$1 model=$2 port=$3 keys=$4
shift 4
conf=$(mktemp /tmp/kvarenad-suite.XXXXXX)
{
	printf '[server]\nlisten = 127.0.0.1:%s\nconnection_timeout_s = 60\n' "$port"
	printf '[model]\npath = %s\nid = test\n' "$model"
	printf '[kv]\nbackend = memfd\ntoolwait_bpf = no\n'
	# the suite's 1000 concurrent requests all wait for an answer
	printf '[limits]\nmax_queue = 2048\n'
	grep -v '^#' "$keys" | while read -r name id rest; do
		[ -n "$name" ] || continue
		printf '[tenant.%s]\nid = %s\n' "$name" "$id"
		for k in $rest; do printf 'key = %s\n' "$k"; done
	done
} >"$conf"
exec "$exe" --config "$conf" "$@"
