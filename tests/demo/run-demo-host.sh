#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# make demo-host: the same demo on this host, where kvarena.ko cannot be
# loaded: kvarenad on the memfd backend (it says so in its log).
set -euo pipefail
cd "$(dirname "$0")/../.."
model=$(tests/demo/demo-model.sh)
id=$(basename "$model" .gguf)
mkdir -p build/demo/files
printf 'meeting moved to 10:30, room 4\n' >build/demo/files/notes.txt
printf 'kvarena demo\n' >build/demo/files/readme.txt
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
build/bin/kvarenad --model "$model" --listen "127.0.0.1:$port" --backend memfd \
	--kv-blocks 2048 >build/demo/kvarenad-host.log 2>&1 &
kvd=$!
trap 'kill $kvd 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
	curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
	kill -0 $kvd || { cat build/demo/kvarenad-host.log; exit 1; }
	sleep 0.2
done
echo "== kvarena demo on this host (memfd backend) =="
grep -E "KV arena|serving" build/demo/kvarenad-host.log | sed 's/^[^ ]* /  [kvarenad] /'
build/bin/kvd-demo --url "http://127.0.0.1:$port" --model "$id" --dir "$PWD/build/demo/files"
echo; echo "# kvarenad /metrics:"
curl -s "http://127.0.0.1:$port/metrics" | tests/demo/demo-summary.sh
kill -TERM $kvd; wait $kvd
echo "# kvarenad stopped (exit $?)"
