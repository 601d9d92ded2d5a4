#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# run-remote-bench.sh - make bench BENCH=remote (root: network namespaces).
# Two "hosts" (tests/remote/netns.sh), UCX over TCP on their veth pair,
# the same namespaces, transport and message size for both sides of each
# comparison, in the same run:
#   1. an 8192-token Llama-3-8B-shaped session's KV (512 blocks of 2 MiB,
#      1 GiB) pushed arena to arena by kvr-bench (the daemon's transfer
#      engine), against ucx_perftest ucp_put_bw with 512 messages of
#      2 MiB; the same pulled, against ucp_get; best of 3 each
#   2. tools/bench/remote/ttft.py: the first decoded token with decode on
#      the remote host against decode on one host
# Rows (build/bench/results.tsv): remote_kv_8k_vs_perftest,
# remote_kv_8k_pull_vs_perftest, remote_ttft_vs_local,
# remote_first_decode_fetch_ms.
# Env: BENCH_REMOTE_TOKENS (ttft prompt, 2048), BENCH_REMOTE_REPEATS (3),
# BENCH_REMOTE_NO_TTFT=1 (the transfers only).
set -u
cd "$(dirname "$0")/../../.."
. tests/remote/netns.sh
tsv=build/bench/results.tsv
BENCH=build/bin/kvr-bench
KVD=build/bin/kvarenad
MODEL=build/bench/remote-8b-kv.gguf
REPS=${BENCH_REMOTE_REPEATS:-3}
if [ "$(id -u)" -ne 0 ]; then
	echo "bench remote: needs root (network namespaces); skipped"
	exit 0
fi
trap 'netns_down; rm -rf "$tmp"' EXIT
tmp=$(mktemp -d)
netns_up || { echo "bench remote: no network namespaces"; exit 1; }

best_of() { sort -g | tail -1; }

# $1 push|pull, $2 perftest test
transfer() {
	local dir=$1 test=$2 ours pt i srv
	ip netns exec "$NS_A" env $(ucx_env_a) "$BENCH" serve 13991 >"$tmp/serve.log" 2>&1 &
	srv=$!
	ip netns exec "$NS_B" env $(ucx_env_b) "$BENCH" "$dir" "$ADDR_A:13991" -r "$REPS" \
		>"$tmp/$dir.log" 2>&1
	wait $srv
	cat "$tmp/$dir.log" >&2
	ours=$(sed -n 's/^ROW\tremote_kv_[a-z]*_gbps\t\([0-9.]*\).*/\1/p' "$tmp/$dir.log")
	# perftest's best: its default window and 32 outstanding operations
	# (kvarena's engine issues the whole table, then flushes once)
	for i in $(seq "$REPS"); do
		for win in 0 32; do
			ip netns exec "$NS_A" env $(ucx_env_a) ucx_perftest -p 13992 >/dev/null 2>&1 &
			srv=$!
			sleep 0.5
			ip netns exec "$NS_B" env $(ucx_env_b) timeout 600 ucx_perftest "$ADDR_A" \
				-p 13992 -t "$test" -s 2097152 -n 512 -w 8 -O $win -f 2>/dev/null |
				tail -1 | awk '{ printf "%.3f\n", $6 * 1048576 / 1e9 }'
			kill $srv 2>/dev/null
			wait $srv 2>/dev/null
		done
	done >"$tmp/pt-$dir"
	pt=$(best_of <"$tmp/pt-$dir")
	echo "bench remote: $dir 1 GiB: kvarena $ours GB/s, ucx_perftest $test $pt GB/s" >&2
	awk -v n="$3" -v a="$ours" -v p="$pt" -v t="$test" 'BEGIN {
		if (a > 0 && p > 0) printf "%s\t%s\tGB/s\tucx_perftest_%s\t%s\t%.3f\n", n, a, t, p, a / p }'
}

forget() {
	local t
	t=$(mktemp)
	grep -vE "^($1)" "$tsv" >"$t" || true
	mv "$t" "$tsv"
}

mkdir -p build/bench
touch "$tsv"
forget 'remote_'
echo "bench remote: UCX over tcp between two network namespaces (veth); load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
transfer push ucp_put_bw remote_kv_8k_vs_perftest >>"$tsv"
transfer pull ucp_get remote_kv_8k_pull_vs_perftest >>"$tsv"

if [ -n "${BENCH_REMOTE_NO_TTFT:-}" ]; then
	grep '^remote_' "$tsv"
	exit 0
fi
# an 8B-shaped KV (32 layers, 8 KV heads of 128: 128 KiB a token) on a
# model small enough to prefill thousands of tokens on a CPU
[ -f "$MODEL" ] || build/bin/kva-mkmodel --dim 1024 --layers 32 --heads 8 --kv-heads 8 \
	--ffn 512 --vocab 512 --ctx 8192 --tokenizer bpe --type q8_0 --seed 11 -o "$MODEL" \
	>/dev/null
head -c 48 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/key"
chmod 600 "$tmp/key"
export NS_B IF_A IF_B ADDR_A
ip netns exec "$NS_A" /usr/bin/python3 tools/bench/remote/ttft.py "$(realpath $KVD)" \
	"$(realpath $MODEL)" "${BENCH_REMOTE_TOKENS:-2048}" "$REPS" "$tmp/key" >"$tmp/ttft.log"
cat "$tmp/ttft.log" | grep -v '^ROW' >&2
sed -n 's/^ROW\t//p' "$tmp/ttft.log" >>"$tsv"
grep '^remote_' "$tsv"
