#!/bin/sh
# SPDX-License-Identifier: MIT
# run-api.sh - kvarenad's HTTP API suites: the bad-input/load suite
# (api_suite.py) and the official openai npm client (openai_client.mjs).
#
# By default both run against the scripted test server
# (KVD_API_SERVER, built by `make check-api`). To run them against another
# server (e.g. the real kvarenad), either give its command line with
#   KVD_API_SERVER_CMD='... {port} ... {keys} ...'   (see api_suite.py)
# or start it yourself and set
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
	exit $?
fi

# a server of our own for the client: the test server, or KVD_API_SERVER_CMD
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
key=openai-client-key-000001
echo "alpha 7 $key" > "$tmp/keys"
if [ -n "${KVD_API_SERVER_CMD:-}" ]; then
	port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	cmd=$(printf '%s' "$KVD_API_SERVER_CMD" | sed -e "s|{port}|$port|g" -e "s|{keys}|$tmp/keys|g")
	sh -c "exec $cmd" 2>"$tmp/server.log" >/dev/null &
	pid=$!
	scripted=${KVD_API_SCRIPTED:-0}
else
	"$SERVER" --port 0 --port-file "$tmp/port" --keys "$tmp/keys" \
		2>"$tmp/server.log" >/dev/null &
	pid=$!
	i=0
	while [ ! -s "$tmp/port" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
	port=$(cat "$tmp/port" 2>/dev/null || echo 0)
	scripted=1
fi
i=0
until python3 -c "import http.client, sys; c = http.client.HTTPConnection('127.0.0.1', $port, timeout=5); c.request('GET', '/health'); sys.exit(c.getresponse().status != 200)" 2>/dev/null; do
	i=$((i + 1))
	if [ $i -gt 600 ] || ! kill -0 "$pid" 2>/dev/null; then
		echo "run-api: server not healthy"; cat "$tmp/server.log"; exit 1
	fi
	sleep 0.2
done
rc=0
KVD_API_BASE_URL="http://127.0.0.1:$port/v1" KVD_API_KEY=$key \
	KVD_API_SCRIPTED=$scripted node tests/daemon/openai_client.mjs || rc=$?
kill -TERM "$pid"
wait "$pid" || { echo "run-api: server exit status $?"; rc=1; }
pid=
[ $rc -eq 0 ] || tail -30 "$tmp/server.log"
echo "run-api: done in $(( $(date +%s) - t0 ))s"
exit $rc
