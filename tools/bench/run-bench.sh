#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# make bench [BENCH=name]: run benchmarks, print a table, and write every
# figure to build/bench/results.tsv (name value unit peer peer_value ratio).
# Benchmarks: ioctl (block alloc/free through the ioctl path in each guest
# kernel and on the host memfd backend), uring (batched uring_cmd against
# one ioctl per block), engine (CPU engine vs llama.cpp; engine-arena: only
# its guest row, decode over a kernel arena vs a memfd one), toolwait (the BPF
# programs' cost per session transition), handoff (KV from prefill to
# decode: arena vs copy), serve (kvarenad under agent load),
# sandbox (1000 sandboxed spawns of /bin/true against 1000 plain fork+exec),
# constrained (decode under a tool-call grammar vs free, in the same run,
# and JSON Schema compile time), tier (an 8k-token session spilled and
# restored by the disk tier against fio on the same file system, restore
# against recompute), eviction (the agent-trace replay at half the KV
# working set: toolwait with the disk tier against lru and ttl), agents1000
# (1000 agent conversations of the 110M model, 2k-token contexts, KV eight
# times the arena, through the disk tier; hours, and disk: not in the
# default list), remote (KV host to host over UCX against ucx_perftest, remote decode's first
# token against one host's; root).
set -euo pipefail
cd "$(dirname "$0")/../.."

all=(ioctl uring engine toolwait handoff serve sandbox constrained tier eviction remote)
want=("$@")
[ ${#want[@]} -gt 0 ] || want=("${all[@]}")
tsv=build/bench/results.tsv
mkdir -p build/bench
touch "$tsv"

# Drop a benchmark's old rows (by name prefix) before it writes new ones.
forget() {
	local tmp
	tmp=$(mktemp)
	grep -vE "^($1)" "$tsv" >"$tmp" || true
	mv "$tmp" "$tsv"
}

bench_ioctl() {
	local secs=${BENCH_SECONDS:-2} k series
	forget 'ioctl_alloc_free_'
	build/bin/kva-bench-blocks -b memfd -t "$secs" -p ioctl_alloc_free \
		-s host_memfd 1 64 | sed -n 's/^ROW\t//p' >>"$tsv"
	tests/vm/kernels.sh | while read -r series k; do
		tests/vm/run-guest.sh --kver "$k" --ko "build/kmod/$k/kvarena.ko" \
			--bin build/bin/kva-bench-blocks --timeout 300 \
			--log "build/bench/guest-$k.log" \
			--cmd 'modprobe kvarena || exit 90' \
			--cmd "kva-bench-blocks -b kernel -t $secs -p ioctl_alloc_free -s guest$series 1 64" \
			>/dev/null 2>&1 || { echo "bench: guest $k failed (build/bench/guest-$k.log)" >&2; exit 1; }
		tr -d '\r' <"build/bench/guest-$k.log" | sed -n 's/^ROW\t//p' >>"$tsv"
	done
}

# uring: block alloc+free through io_uring against the ioctl path one call
# per block, in each guest: one SQE carrying 64 ids (the batch row), and
# 64 single-block SQEs per submission; on the host (memfd backend, no
# io_uring) a 64-block call against a single-block one.
ratio_row() {	# name value_row peer_row peer_label
	awk -F'\t' -v n="$1" -v a="$2" -v b="$3" -v l="$4" '
		$1 == a { v = $2 } $1 == b { p = $2 }
		END { if (v && p) printf "%s\t%s\tops/s\t%s\t%s\t%.2f\n", n, v, l, p, v / p }' "$tsv"
}

bench_uring() {
	local secs=${BENCH_SECONDS:-2} k series rows
	forget 'uring_'
	build/bin/kva-bench-blocks -b memfd -t "$secs" -p uring_memfd_call \
		-s host_memfd 1 64 | sed -n 's/^ROW\t//p' >>"$tsv"
	ratio_row uring_batch64_vs_ioctl_host_memfd \
		uring_memfd_call_batch64_host_memfd uring_memfd_call_batch1_host_memfd \
		memfd_single >>"$tsv"
	tests/vm/kernels.sh | while read -r series k; do
		tests/vm/run-guest.sh --kver "$k" --ko "build/kmod/$k/kvarena.ko" \
			--bin build/bin/kva-bench-blocks --timeout 300 \
			--log "build/bench/uring-guest-$k.log" \
			--cmd 'modprobe kvarena || exit 90' \
			--cmd "kva-bench-blocks -b kernel -t $secs -p uring_ioctl -s guest$series 1 64" \
			--cmd "kva-bench-blocks -b kernel -u -t $secs -p uring_sqes -s guest$series 1 8 64" \
			--cmd "kva-bench-blocks -b kernel -u -i 64 -t $secs -p uring_ids64_sqes -s guest$series 1" \
			>/dev/null 2>&1 || { echo "bench: guest $k failed (build/bench/uring-guest-$k.log)" >&2; exit 1; }
		tr -d '\r' <"build/bench/uring-guest-$k.log" | sed -n 's/^ROW\t//p' >>"$tsv"
		ratio_row "uring_batch64_vs_ioctl_guest$series" \
			"uring_ids64_sqes_batch1_guest$series" "uring_ioctl_batch1_guest$series" \
			ioctl_single >>"$tsv"
		ratio_row "uring_64sqes_vs_ioctl_guest$series" \
			"uring_sqes_batch64_guest$series" "uring_ioctl_batch1_guest$series" \
			ioctl_single >>"$tsv"
	done
}

# toolwait: cost per session-state transition with the toolwait BPF
# programs attached vs detached (bpf_stats run_time_ns/run_cnt too), and
# CPU at 10,000 transitions/s: host memfd backend (USDT), guests (raw_tp).
bench_toolwait() {
	local secs=${BENCH_SECONDS:-1} k series
	forget 'toolwait_'
	make --no-print-directory build/tests/toolwait/test_toolwait >/dev/null
	build/tests/toolwait/test_toolwait bench -b memfd -l host_memfd -t "$secs" |
		sed -n 's/^ROW\t//p' >>"$tsv"
	tests/vm/kernels.sh | while read -r series k; do
		tests/vm/run-guest.sh --kver "$k" --ko "build/kmod/$k/kvarena.ko" \
			--bin build/tests/toolwait/test_toolwait --timeout 300 \
			--log "build/bench/toolwait-guest-$k.log" \
			--cmd 'modprobe kvarena || exit 90' \
			--cmd "test_toolwait bench -b kernel -t $secs -l guest$series" \
			>/dev/null 2>&1 || { echo "bench: guest $k failed (build/bench/toolwait-guest-$k.log)" >&2; exit 1; }
		tr -d '\r' <"build/bench/toolwait-guest-$k.log" | sed -n 's/^ROW\t//p' >>"$tsv"
	done
}

# handoff: one session's KV (8B-shaped: 128 KiB per token) from a prefill
# process to a decode process over kvarenad's worker protocol, the arena
# way (block table; the receiver already maps the arena) against the copy
# way (the bytes over the socket into the receiver's own blocks).
bench_handoff() {
	forget 'handoff_'
	make --no-print-directory build/bin/kvd-handoff >/dev/null
	build/bin/kvd-handoff -r "${BENCH_RUNS:-3}" ${BENCH_HANDOFF_TOKENS:-1024 4096 8192 32768} |
		sed -n 's/^ROW\t//p' >>"$tsv"
}

# serve: 16 and 64 concurrent multi-turn agent conversations with one
# system prompt, the 110M Q8_0 model, kvarenad at its defaults against
# llama.cpp's llama-server (built once from the peer cache's sources by
# tools/bench/daemon/fetch-llama-server.sh; SERVE_BENCH_NO_PEER=1 skips
# it), same run; then resuming a 2k-token conversation with its KV kept
# vs recomputed, and the same resume by previous_response_id vs resending
# the history (bytes, TTFT).
bench_serve() {
	local m=build/bench/models/110m_q8_ctx2k.gguf peer=""
	forget '(serve_|resume_|responses_resume_)'
	make --no-print-directory build/bin/kvarenad build/bin/kva-mkmodel >/dev/null
	mkdir -p build/bench/models
	[ -f "$m" ] || build/bin/kva-mkmodel --dim 768 --layers 12 --heads 12 --ffn 2048 \
		--vocab 32000 --ctx 2048 --type q8_0 -o "$m" >/dev/null
	[ -n "${SERVE_BENCH_NO_PEER:-}" ] || peer=$(tools/bench/daemon/fetch-llama-server.sh) ||
		{ echo "bench serve: llama-server could not be built; kvarenad alone" >&2; peer=""; }
	/usr/bin/python3 tools/bench/daemon/serve_bench.py build/bin/kvarenad "$m" "$peer" |
		sed -n 's/^ROW\t//p' >>"$tsv"
}

bench_engine() {
	forget '(prefill|decode|argmax)_'
	make --no-print-directory bench-engine
	bench_engine_arena
}

# The engine's decode with its KV in a kvarena.ko arena (2 MiB pages,
# PMD-mapped) against a memfd arena backed by shmem THP, in each guest
# kernel, same boot, alternating rounds, best of each: issue 35.7's row
# decode_kernel_arena_vs_memfd (6.12; _guest61 for 6.1). TCG's software
# TLB caches 4 KiB translations whatever the guest's page size, so the
# figure shows the page-walk cost only partly: re-measure under KVM.
bench_engine_arena() {
	local k series md=build/bench/models rounds=${ENGINE_ARENA_ROUNDS:-3} name
	make --no-print-directory build/engine/bench/kve-bench build/bin/kva-mkmodel modules-guest >/dev/null
	mkdir -p "$md"
	[ -f "$md/15m_q8.gguf" ] || build/bin/kva-mkmodel --dim 288 --layers 6 --heads 6 --ffn 768 \
		--vocab 32000 --ctx 256 --type q8_0 -o "$md/15m_q8.gguf" >/dev/null
	while read -r series k; do
		tests/vm/run-guest.sh --kver "$k" --ko "build/kmod/$k/kvarena.ko" \
			--bin build/engine/bench/kve-bench --file "$md/15m_q8.gguf:models/15m_q8.gguf" \
			--timeout 900 --mem 1024 --log "build/bench/engine-arena-$k.log" \
			--cmd 'modprobe kvarena max_pinned_mb=256 || exit 90' \
			--cmd 'echo advise >/sys/kernel/mm/transparent_hugepage/shmem_enabled' \
			--cmd "for r in \$(seq $rounds); do for b in kernel memfd; do kve-bench models/15m_q8.gguf --backend \$b --prompt 128 --decode 64 --batch 2 --no-bw | sed -n \"s/^decode_tps=/ARENA \$b /p\"; done; done" \
			>/dev/null 2>&1 || { echo "bench: guest $k failed (build/bench/engine-arena-$k.log)" >&2; exit 1; }
		name=decode_kernel_arena_vs_memfd
		[ "$series" = 612 ] || name=${name}_guest$series
		tr -d '\r' <"build/bench/engine-arena-$k.log" | awk -v n="$name" '
			$1 == "ARENA" && $2 == "kernel" && $3 > k { k = $3 }
			$1 == "ARENA" && $2 == "memfd" && $3 > m { m = $3 }
			END { if (k && m) printf "%s\t%.1f\ttok/s\tmemfd_thp_arena\t%.1f\t%.3f\n", n, k, m, k / m }' >>"$tsv"
	done < <(tests/vm/kernels.sh)
}

# constrained: greedy decode tok/s under a nested tool-call grammar vs
# free, same model and run (two sessions stepping in turn, tok/s over all
# rounds), on the
# engine benchmark's 15M and 110M Q8_0 models; the compile time of a
# 20-property schema (automaton and token sets for the 32000-token
# vocabulary; median of 7 cold compiles, wall clock). Goals: >= 0.9x and
# <= 50 ms.
bench_constrained() {
	local md=build/bench/models m tag out
	forget '(constrained_|schema_compile_)'
	make --no-print-directory build/engine/bench/kvc-bench build/bin/kva-mkmodel >/dev/null
	mkdir -p "$md"
	[ -f "$md/15m_q8.gguf" ] || build/bin/kva-mkmodel --dim 288 --layers 6 --heads 6 --ffn 768 \
		--vocab 32000 --ctx 256 --type q8_0 -o "$md/15m_q8.gguf" >/dev/null
	[ -f "$md/110m_q8.gguf" ] || build/bin/kva-mkmodel --dim 768 --layers 12 --heads 12 --ffn 2048 \
		--vocab 32000 --ctx 1024 --type q8_0 -o "$md/110m_q8.gguf" >/dev/null
	for m in 15m_q8 110m_q8; do
		tag=${m%_q8}
		out=$(build/engine/bench/kvc-bench "$md/$m.gguf" --tokens 128 --rounds 3)
		echo "$out" | sed "s/^/  $m: /"
		get() { echo "$out" | sed -n "s/^$1=//p"; }
		printf 'constrained_decode_%s\t%s\ttok/s\tunconstrained\t%s\t%s\n' "$tag" \
			"$(get constrained_tps)" "$(get unconstrained_tps)" "$(get ratio)" >>"$tsv"
		printf 'constrained_mask_us_%s\t%s\tus/token\tdecode_step_us\t%s\t%s\n' "$tag" \
			"$(get constraint_us_per_token)" "$(get step_us)" \
			"$(awk -v a="$(get constraint_us_per_token)" -v b="$(get step_us)" 'BEGIN { printf "%.4f", a / b }')" >>"$tsv"
		if [ "$m" = 15m_q8 ]; then
			printf 'schema_compile_20props\t%s\tms\t-\t-\t-\n' "$(get schema20_compile_ms)" >>"$tsv"
			printf 'schema_compile_20props_cpu\t%s\tms\t-\t-\t-\n' "$(get schema20_compile_cpu_ms)" >>"$tsv"
		fi
	done
}

# sandbox: 1000 spawns of /bin/true through the launcher with the full
# policy (namespaces, a network namespace each from the pool, cgroup,
# seccomp, Landlock) as kvarenad makes them (through the spawner, in a
# size-capped session work directory), next to 1000 fork+exec of it, in
# one process and run; the 1000 again two at a time; the same direct
# (kva-sandbox's way); then 50 each from a caller with 256 MiB of private
# memory, direct and through the spawner process.
bench_sandbox() {
	forget 'sandbox_'
	make --no-print-directory build/sandbox/kvs-bench >/dev/null
	build/sandbox/kvs-bench -n "${BENCH_SPAWNS:-1000}" -j 2 | sed -n 's/^ROW\t//p' >>"$tsv"
	build/sandbox/kvs-bench -n "${BENCH_SPAWNS:-1000}" -j 2 -d | sed -n 's/^ROW\t//p' >>"$tsv"
	# a caller holding 256 MiB of private memory, as a daemon with a
	# model does: direct spawns (and fork+exec) copy its page tables each
	# time, spawns through the spawner process do not
	build/sandbox/kvs-bench -n 50 -j 2 -m 256 -d | sed -n 's/^ROW\t//p' >>"$tsv"
	build/sandbox/kvs-bench -n 50 -j 2 -m 256 | sed -n 's/^ROW\t//p' >>"$tsv"
}

# tier: one 8k-token session of the 110M Q8_0 model (36 KiB of KV per
# token, 288 MiB) through the disk tier: spill and restore bandwidth
# against fio's sequential O_DIRECT write and read of the same bytes with
# the same block size and queue depth, on the same file system (build/),
# interleaved in one run, medians of 3; restoring it against recomputing
# it (the engine's prefill, one thread). Goal: >= 80% of fio.
bench_tier() {
	local md=build/bench/models dir=build/bench/tier-spill
	forget 'tier_'
	make --no-print-directory build/tier/kvt-bench build/bin/kva-mkmodel >/dev/null
	mkdir -p "$md"
	[ -f "$md/110m_q8_ctx8k.gguf" ] || build/bin/kva-mkmodel --dim 768 --layers 12 --heads 12 \
		--ffn 2048 --vocab 32000 --ctx 8448 --type q8_0 -o "$md/110m_q8_ctx8k.gguf" >/dev/null
	rm -rf "$dir" && mkdir -m 700 "$dir"
	build/tier/kvt-bench --dir "$PWD/$dir" --model "$md/110m_q8_ctx8k.gguf" \
		--tokens "${BENCH_TIER_TOKENS:-8192}" --runs "${BENCH_RUNS:-3}" | tee build/bench/tier.log |
		sed -n 's/^ROW\t//p' >>"$tsv"
	rm -rf "$dir"
}

# eviction: Mooncake conversations replayed as agent sessions
# (tools/replay/, Documentation/replay.md) against kvarenad with an arena
# of half the working set (measured by a first run with room), the same
# sessions under each policy in one run: toolwait with the disk tier, lru
# and ttl without, lru with it. Goals: >= 3x fewer evictions and >= 3.5x
# faster mean session completion than lru, restore stalls < 5%.
bench_eviction() {
	forget '(evictions_|kv_misses_|completion_|ttft_p99_toolwait|restore_stalls_pct_|recomputed_tokens_toolwait|eviction_|server_busy_pct_)'
	make --no-print-directory build/bin/kvarenad build/bin/kva-mkmodel >/dev/null
	tools/replay/eviction-bench.sh build/bin/kvarenad build/bin/kva-mkmodel
}

# agents1000: 1000 agent conversations against one kvarenad whose KV does
# not fit (tools/replay/agents1000-bench.sh; Documentation/replay.md).
# Not in the default list: about an hour on 2 cores, and the spill files
# want up to the KV's size in free disk (capped at the free space less 4 GiB).
bench_agents1000() {
	forget '(agents_|daemon_bytes_per_idle_session|sched_step_p99_us|resume_|restore_stalls_pct[[:space:]]|restore_stalls_(early|no_room|taken_again|reading)_pct|no_room_)'
	make --no-print-directory build/bin/kvarenad build/bin/kva-mkmodel >/dev/null
	tools/replay/agents1000-bench.sh build/bin/kvarenad build/bin/kva-mkmodel
}

# remote: two network namespaces, UCX over TCP (tools/bench/remote/)
bench_remote() {
	make --no-print-directory build/bin/kvr-bench build/bin/kvarenad build/bin/kva-mkmodel \
		>/dev/null
	tools/bench/remote/run-remote-bench.sh >/dev/null
}

for b in "${want[@]}"; do
	case $b in
	ioctl) bench_ioctl ;;
	uring) bench_uring ;;
	engine) bench_engine ;;
	engine-arena) bench_engine_arena ;;	# engine's guest row alone
	toolwait) bench_toolwait ;;
	handoff) bench_handoff ;;
	serve) bench_serve ;;
	sandbox) bench_sandbox ;;
	constrained) bench_constrained ;;
	tier) bench_tier ;;
	eviction) bench_eviction ;;
	agents1000) bench_agents1000 ;;
	remote) bench_remote ;;
	*) echo "bench: unknown benchmark '$b' (have: ${all[*]} agents1000)" >&2; exit 2 ;;
	esac
done

echo
echo "== build/bench/results.tsv =="
awk -F'\t' 'BEGIN { printf "%-44s %14s %-7s %-12s %14s %8s\n", "name", "value", "unit", "peer", "peer_value", "ratio" }
	{ printf "%-44s %14s %-7s %-12s %14s %8s\n", $1, $2, $3, $4, $5, $6 }' "$tsv"
