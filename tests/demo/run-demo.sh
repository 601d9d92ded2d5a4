#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# make demo: boot a Debian guest kernel in QEMU, load kvarena.ko, start
# kvarenad (one prefill and one decode worker sharing KV in one kvarena
# arena through its dma-buf) and point an agent client at its
# OpenAI-compatible API: a few conversations at once, multi-turn, streamed,
# with the tools the model calls run by the client and their results sent
# back. Then a summary: per-stage timings, KV reuse, blocks, bytes copied
# between stages (0), the kernel's per-session idle byte-seconds and the
# tool-wait histogram from the eBPF maps.
# DEMO_KERNEL=61|612 picks the guest kernel (default 612); DEMO_MODEL a
# GGUF file (default: the trained agent model when present, else a random
# one). The host variant: make demo-host (memfd backend).
set -euo pipefail
cd "$(dirname "$0")/../.."

series=${DEMO_KERNEL:-612}
kver=$(tests/vm/kernels.sh "$series" | awk '{print $2}')
ko=build/kmod/$kver/kvarena.ko
[ -f "$ko" ] || { echo "demo: $ko missing: run 'make demo'" >&2; exit 2; }
model=$(tests/demo/demo-model.sh)
id=$(basename "$model" .gguf)
mkdir -p build/demo/files
printf 'meeting moved to 10:30, room 4\n' >build/demo/files/notes.txt
printf 'kvarena demo\n' >build/demo/files/readme.txt

cat <<MSG
== kvarena demo on Linux $kver (QEMU guest) ==
   modprobe kvarena; kvarenad serves $id over HTTP with a prefill and a
   decode worker sharing one pinned arena through its dma-buf; kvd-demo
   runs four agent conversations against it at once.
MSG
tests/vm/run-guest.sh --kver "$kver" --ko "$ko" --bin build/bin/kvarenad \
	--bin build/bin/kvd-demo --bin build/bin/kvactl --bin tests/demo/demo-summary.sh \
	--file "$model:/opt/kva/$id.gguf" --file "build/demo/files:/opt/kva/demo" \
	--timeout 900 --mem 1536 --log build/demo.log \
	--cmd 'modprobe kvarena max_pinned_mb=512 || exit 90' \
	--cmd 'echo "# modprobe kvarena: /dev/kvarena $(stat -c "%a" /dev/kvarena)"' \
	--cmd "kvarenad --model /opt/kva/$id.gguf --listen 127.0.0.1:8080 --backend kernel --kv-blocks 2048 >/tmp/kvarenad.log 2>&1 & kvd=\$!" \
	--cmd 'for i in $(seq 1 1200); do wget -q -O /dev/null http://127.0.0.1:8080/health 2>/dev/null && break; kill -0 $kvd || break; sleep 0.5; done' \
	--cmd 'grep -E "KV arena|workers ready|eBPF|serving" /tmp/kvarenad.log | sed "s/^[^ ]* /  [kvarenad] /"' \
	--cmd 'echo; echo "# kvd-demo: four conversations, streamed, tools run by the client"' \
	--cmd "kvd-demo --url http://127.0.0.1:8080 --model $id --dir /opt/kva/demo || { tail -20 /tmp/kvarenad.log; exit 93; }" \
	--cmd 'echo; echo "# kvarenad /metrics:"; wget -q -O - http://127.0.0.1:8080/metrics | demo-summary.sh' \
	--cmd 'echo; echo "# the kernel: sessions (idle byte-seconds: KV held while waiting)"; kvactl session list | head -12' \
	--cmd 'echo; echo "# the eBPF tool-wait maps:"; kvactl toolwait -T 2>&1 | head -30' \
	--cmd 'kill -TERM $kvd; wait $kvd; echo "# kvarenad stopped (exit $?)"' \
	--cmd 'echo "# after: pinned_bytes $(cat /sys/class/misc/kvarena/pinned_bytes) arenas $(cat /sys/class/misc/kvarena/arenas)"' \
	--cmd 'rmmod kvarena && echo "# rmmod kvarena: ok"' 2>&1 |
	grep -avE '^(SeaBIOS|Booting from|KVA-|\[ *[0-9.]+\] )' || true
grep -aq '^KVA-GUEST-RC=0' build/demo.log
