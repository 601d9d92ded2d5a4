#!/bin/sh
# SPDX-License-Identifier: MIT
# run-api.sh - kvarenad's HTTP API suites: the bad-input/load suite
# (api_suite.py) and the official openai npm client (openai_client.mjs).
#
# By default both run against the scripted test server
# (KVD_API_SERVER, built by `make check-api`). To point them at another
# server (e.g. the real kvarenad), start it yourself and set
#   KVD_API_URL=http://127.0.0.1:PORT  KVD_API_KEY_A=... KVD_API_KEY_A2=...
#   KVD_API_KEY_B=... KVD_API_TENANT_A=... KVD_API_TENANT_B=...
#   KVD_API_MODEL=...   [KVD_API_SCRIPTED=1 if it answers the scripted commands]
# The openai package is installed once into build/api/node (npm).
set -eu

SERVER=${KVD_API_SERVER:-build/api/tests/kvd-api-testserver}
NODE_DIR=${KVD_NODE_DIR:-build/api/node}
OPENAI_VERSION=${OPENAI_VERSION:-5}
export KVD_API_SERVER=$SERVER

t0=$(date +%s)
python3 tests/daemon/api_suite.py

if [ ! -f "$NODE_DIR/node_modules/openai/package.json" ]; then
	mkdir -p "$NODE_DIR"
	echo "run-api: npm install openai@$OPENAI_VERSION into $NODE_DIR"
	npm install --prefix "$NODE_DIR" --no-audit --no-fund --loglevel=error \
		"openai@$OPENAI_VERSION" >/dev/null
fi
export KVD_NODE_DIR="$(cd "$NODE_DIR" && pwd)"

if [ -n "${KVD_API_URL:-}" ]; then
	KVD_API_BASE_URL="$KVD_API_URL/v1" KVD_API_KEY="$KVD_API_KEY_A" \
		node tests/daemon/openai_client.mjs
else
	tmp=$(mktemp -d)
	trap 'kill "$pid" 2>/dev/null || true; rm -rf "$tmp"' EXIT
	echo "alpha 7 openai-client-key-000001" > "$tmp/keys"
	"$SERVER" --port 0 --port-file "$tmp/port" --keys "$tmp/keys" \
		2>"$tmp/server.log" >/dev/null &
	pid=$!
	i=0
	while [ ! -s "$tmp/port" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
	[ -s "$tmp/port" ] || { cat "$tmp/server.log"; exit 1; }
	rc=0
	KVD_API_BASE_URL="http://127.0.0.1:$(cat "$tmp/port")/v1" \
		KVD_API_KEY=openai-client-key-000001 KVD_API_SCRIPTED=1 \
		node tests/daemon/openai_client.mjs || rc=$?
	kill -TERM "$pid"
	wait "$pid" || { echo "run-api: test server exit status $?"; rc=1; }
	[ $rc -eq 0 ] || tail -30 "$tmp/server.log"
	exit $rc
fi
echo "run-api: done in $(( $(date +%s) - t0 ))s"
