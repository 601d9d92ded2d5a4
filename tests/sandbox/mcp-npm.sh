#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The MCP client against real third-party servers from npm, each run by
# node inside the sandbox under its own tool policy:
# @modelcontextprotocol/server-filesystem (confined to the work directory)
# and @modelcontextprotocol/server-everything. Installs the pinned
# versions into build/sandbox/npm on first use.
set -euo pipefail
cd "$(dirname "$0")/../.."

VER=${KVS_MCP_NPM_VERSION:-2026.8.31}
NPMDIR=$PWD/build/sandbox/npm
CLI=build/sandbox/kvs-mcp-cli
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
[ "${1:-}" = --install ] || [ -x "$CLI" ] || { echo "mcp-npm: $CLI missing (make sandbox)" >&2; exit 2; }
NODE=$(command -v node) || { echo "mcp-npm: node not found (scripts/deps.sh check installs nodejs)" >&2; exit 2; }
NODE=$(realpath "$NODE")
if [ ! -f "$NPMDIR/.installed-$VER" ]; then
	command -v npm >/dev/null || { echo "mcp-npm: npm not found" >&2; exit 2; }
	echo "mcp-npm: installing the MCP servers $VER into $NPMDIR"
	mkdir -p "$NPMDIR"
	npm install --prefix "$NPMDIR" --no-audit --no-fund --loglevel=error \
		"@modelcontextprotocol/server-filesystem@$VER" \
		"@modelcontextprotocol/server-everything@$VER" >/dev/null
	touch "$NPMDIR/.installed-$VER"
fi
M=$NPMDIR/node_modules/@modelcontextprotocol
# --install: only make sure they are there (kvarenad's test_orch uses them)
[ "${1:-}" = --install ] && exit 0

T=$(mktemp -d /tmp/kvs-mcp-npm.XXXXXX)
trap 'rm -rf "$T"' EXIT
chmod 755 "$T"
W=$T/work
mkdir -p "$W"
echo "hello from the host" >"$W/a.txt"
[ "$(id -u)" = 0 ] && chown -R 65534:65534 "$W"
cat >"$T/mcp.ini" <<INI
# node and the installed servers, read-only; the work directory; no network
[mcp-node]
exec = $NODE
ro = $NPMDIR/node_modules
memory = 1G
# node's module loader opens many files at once: more than the 64 a tool
# gets by default on a host without a memory controller
nofile = 1024
pids = 64
timeout = 120
INI

pass=0
fail=0
check() {	# NAME PATTERN: the last output must match PATTERN (grep -E)
	if grep -qE "$2" "$T/out"; then
		pass=$((pass + 1))
		echo "ok   $1: $(grep -E "$2" "$T/out" | head -n 1 | cut -c1-120)"
	else
		fail=$((fail + 1))
		echo "FAIL $1"
		sed 's/^/     | /' "$T/out" | head -n 30
	fi
}

echo "== MCP against the npm servers ($VER), node $("$NODE" --version) in the sandbox"
"$CLI" "$T/mcp.ini" mcp-node "$W" \
	--call read_text_file '{"path":"/home/tool/a.txt"}' \
	--call read_text_file '{"path":"/etc/passwd"}' \
	--call write_file '{"path":"/home/tool/b.txt","content":"written by the server"}' \
	-- "$NODE" "$M/server-filesystem/dist/index.js" /home/tool >"$T/out" 2>&1 || true
check "filesystem: initialize" '^server: secure-filesystem-server'
check "filesystem: tools/list" '^tool: read_text_file$'
check "filesystem: read in the work dir" '^call read_text_file: hello from the host'
check "filesystem: read outside refused" '^call read_text_file: \[isError\] .*(denied|outside)'
check "filesystem: write in the work dir" '^call write_file: '
if [ "$(cat "$W/b.txt" 2>/dev/null)" = "written by the server" ]; then
	pass=$((pass + 1)); echo "ok   filesystem: the file is on the host"
else
	fail=$((fail + 1)); echo "FAIL filesystem: b.txt not written"
fi

"$CLI" "$T/mcp.ini" mcp-node "$W" \
	--call echo '{"message":"hi from kvarena"}' \
	--call get-sum '{"a":2,"b":40}' \
	--call no-such-tool '{}' \
	-- "$NODE" "$M/server-everything/dist/index.js" stdio >"$T/out" 2>&1 || true
check "everything: initialize" '^server: '
check "everything: tools/list" '^tool: echo$'
check "everything: echo" '^call echo: Echo: hi from kvarena'
check "everything: get-sum" '^call get-sum: .*42'
check "everything: unknown tool" '^call no-such-tool: (error|\[isError\])'

echo "== MCP npm servers: $pass passed, $fail failed"
[ "$fail" = 0 ]
