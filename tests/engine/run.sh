#!/bin/sh
# SPDX-License-Identifier: MIT
# run.sh - `make check-engine`: generates small test models with
# kva-mkmodel, runs the engine's unit tests (built with ASan+UBSan), the
# numpy reference comparison and the GGUF fuzzer, and prints a closing
# "N passed, N failed" line. Full output: build/engine/check.log.
# ENGINE_OUT: another build of the same binaries (make coverage-engine's)
set -u
B=${ENGINE_OUT:-build/engine}
M=$B/models
T=$B/tests
MK=build/bin/kva-mkmodel
PY=${ENGINE_PY:-/usr/bin/python3}
LOG=$B/check.log
FUZZ=${ENGINE_FUZZ_ITERS:-4000}
# ASan fills the first 4 KiB of every allocation with 0xff rather than its
# default 0xbe: code that reads heap memory it never wrote sees NaN and -1.
# (Not all of each allocation: test_engine counts the page faults of a new
# engine's first passes, which a full fill would take at malloc instead.)
ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}malloc_fill_byte=255
export ASAN_OPTIONS
mkdir -p "$M"
: > "$LOG"
extra_fail=0

gen() {	# gen NAME ARGS...: (re)build a model when the maker is newer
	name=$1
	shift
	if [ ! -f "$M/$name" ] || [ "$MK" -nt "$M/$name" ]; then
		"$MK" "$@" -o "$M/$name" >> "$LOG" || extra_fail=$((extra_fail + 1))
	fi
}

# GQA shapes for the three weight types; an odd one (head_dim 12, dims
# not multiples of 8) for the kernels' tails; tiny ones to fuzz.
gen f32-gqa.gguf --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 96 --vocab 512 --ctx 128 --type f32 --seed 11
gen f16-gqa.gguf --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 96 --vocab 512 --ctx 128 --type f16 --tokenizer bpe --seed 12
gen q8-gqa.gguf --dim 64 --layers 2 --heads 4 --kv-heads 1 --ffn 128 --vocab 512 --ctx 128 --type q8_0 --tied --seed 13
gen odd-f32.gguf --dim 72 --layers 2 --heads 6 --kv-heads 3 --ffn 100 --vocab 480 --ctx 128 --type f32 --rope-base 500000 --seed 14
# a GQA group of 6, wider than one attention call (KVE_ATTN_HEADS 4):
# the query heads go in two slices, 4 and 2
gen gqa6-f16.gguf --dim 192 --layers 2 --heads 12 --kv-heads 2 --ffn 128 --vocab 512 --ctx 128 --type f16 --seed 27
gen fz-q8.gguf --dim 32 --layers 1 --heads 2 --ffn 64 --vocab 400 --ctx 64 --type q8_0 --seed 15
# qwen2 (Q/K/V biases, NEOX rope; BPE vocabulary, qwen2 pre-tokenizer):
# GQA for the three weight types, the Q8_0 one with a tied head
gen qwen2-f32.gguf --arch qwen2 --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 96 --vocab 512 --ctx 128 --type f32 --rope-base 1000000 --seed 21
gen qwen2-f16.gguf --arch qwen2 --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 96 --vocab 512 --ctx 128 --type f16 --seed 22
gen qwen2-q8.gguf --arch qwen2 --dim 64 --layers 2 --heads 4 --kv-heads 1 --ffn 128 --vocab 512 --ctx 128 --type q8_0 --tied --seed 23
# partial rope (rope.dimension_count < head dim 16), both rope styles
gen rope8-f32.gguf --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 96 --vocab 512 --ctx 128 --type f32 --rope-dims 8 --seed 25
gen qwen2-rope6-f16.gguf --arch qwen2 --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 96 --vocab 512 --ctx 128 --type f16 --rope-dims 6 --seed 26
# BPE vocabularies under the llama-3 and qwen2 pre-tokenizers; the qwen2 one
# names an unknown token (test_tokenizer: never emitted for a byte)
gen bpe-llama3.gguf --dim 32 --layers 1 --heads 2 --ffn 64 --vocab 512 --ctx 64 --type f32 --tokenizer bpe --pre llama-bpe --seed 17
gen bpe-qwen2.gguf --dim 32 --layers 1 --heads 2 --ffn 64 --vocab 512 --ctx 64 --type f32 --tokenizer bpe --pre qwen2 --seed 18 --unk-id 300
gen fz-bpe.gguf --dim 32 --layers 1 --heads 4 --kv-heads 2 --ffn 64 --vocab 400 --ctx 64 --type f16 --tokenizer bpe --seed 16
gen fz-qwen2.gguf --arch qwen2 --dim 32 --layers 1 --heads 4 --kv-heads 2 --ffn 64 --vocab 400 --ctx 64 --type q8_0 --seed 19
# Q3_K: the smallest K-quant shape
gen fz-q3k.gguf --dim 256 --layers 1 --heads 2 --ffn 256 --vocab 400 --ctx 64 --type q3_k --seed 65
# the 4- to 6-bit types and BF16 (Documentation/engine.md, "Tensor
# types"): K-quants need rows of 256, so dim 256; Q4_K_M as llama.cpp mixes
# it (Q4_K, Q6_K for attn_v/ffn_down of some layers and the head), a qwen3
# Q5_K_M with 64-dim heads, the 32-value types, BF16
gen q4km-gqa.gguf --dim 256 --layers 3 --heads 4 --kv-heads 2 --ffn 512 --vocab 512 --ctx 128 --type q4_k_m --seed 51
gen q5km-qwen3.gguf --arch qwen3 --dim 256 --layers 2 --heads 8 --kv-heads 2 --head-dim 64 --ffn 512 --vocab 512 --ctx 128 --type q5_k_m --seed 52
gen q6k-gqa.gguf --dim 256 --layers 2 --heads 4 --kv-heads 2 --ffn 512 --vocab 512 --ctx 128 --type q6_k --tied --seed 53
# Q3_K: llama.cpp's Q3_K_M mix (Q3_K, Q4_K, Q5_K, Q6_K), and
# every matrix Q3_K with the head tied to a Q3_K embedding
gen q3km-gqa.gguf --dim 256 --layers 2 --heads 4 --kv-heads 2 --ffn 512 --vocab 512 --ctx 128 --type q3_k_m --seed 63
gen q3k-tied.gguf --dim 256 --layers 2 --heads 4 --kv-heads 2 --ffn 512 --vocab 512 --ctx 128 --type q3_k --tied --seed 64
# IQ4_NL (ffn_down, 80 wide, falls back to F16 as llama.cpp's)
gen iq4nl-gqa.gguf --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 80 --vocab 512 --ctx 128 --type iq4_nl --seed 66
# IQ4_XS (ffn_down, 320 wide, falls back to IQ4_NL as llama.cpp's)
gen iq4xs-gqa.gguf --dim 256 --layers 2 --heads 4 --kv-heads 2 --ffn 320 --vocab 512 --ctx 128 --type iq4_xs --seed 67
# llama.cpp's Q2_K mix: Q2_K, attn_v and attn_output Q3_K, the head Q6_K,
# ffn_down (320 wide) Q3_K's fallback Q4_0
gen q2k-gqa.gguf --dim 256 --layers 2 --heads 4 --kv-heads 2 --ffn 320 --vocab 512 --ctx 128 --type q2_k --seed 68
gen q40-gqa.gguf --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 96 --vocab 512 --ctx 128 --type q4_0 --seed 54
gen q51-gqa.gguf --dim 64 --layers 2 --heads 4 --kv-heads 1 --ffn 128 --vocab 512 --ctx 128 --type q5_1 --seed 55
gen bf16-gqa.gguf --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 96 --vocab 512 --ctx 128 --type bf16 --seed 56
# qwen3 (per-head Q/K norms, 128-dim heads wider than dim / heads), llama
# 3's rope_freqs and linear rope scaling, all F32 for the numpy reference
gen qwen3-f32.gguf --arch qwen3 --dim 128 --layers 2 --heads 4 --kv-heads 2 --head-dim 64 --ffn 128 --vocab 512 --ctx 128 --type f32 --seed 57
gen llama3-f32.gguf --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 96 --vocab 512 --ctx 128 --type f32 --rope-freqs --rope-base 500000 --seed 58
gen linrope-f32.gguf --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 96 --vocab 512 --ctx 128 --type f32 --rope-scale 4 --seed 59
# tokenizer.ggml.add_space_prefix false: no SentencePiece dummy prefix
gen nospace-spm.gguf --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 96 --vocab 512 --ctx 128 --type f32 --seed 11 --meta tokenizer.ggml.add_space_prefix=bool:0
# what the loader refuses, naming the architecture and the feature (an
# unknown architecture: test_gguf)
gen no-experts.gguf --dim 64 --layers 1 --heads 4 --ffn 64 --vocab 400 --ctx 64 --meta llama.expert_count=u32:8 --seed 60
gen no-yarn.gguf --arch qwen2 --dim 64 --layers 1 --heads 4 --ffn 64 --vocab 400 --ctx 64 --meta qwen2.rope.scaling.type=str:yarn --seed 61
gen no-vlen.gguf --dim 64 --layers 1 --heads 4 --ffn 64 --vocab 400 --ctx 64 --meta llama.attention.value_length=u32:8 --seed 62

# constrained decoding's property test: one of each tokenizer, room for
# 240 generated tokens
gen cprop-spm.gguf --dim 32 --layers 1 --heads 2 --ffn 64 --vocab 1000 --ctx 384 --type f32 --seed 31
gen cprop-bpe.gguf --dim 32 --layers 1 --heads 2 --ffn 64 --vocab 1000 --ctx 384 --type f16 --tokenizer bpe --seed 32
# a SentencePiece vocabulary with pieces that close two containers ("]]",
# "}]", ...): tokens whose meaning depends on the matcher's stack; and
# ">{", which completes the start tag "<tool_call>" and opens the call
gen brackets-tag-spm.gguf --dim 32 --layers 1 --heads 2 --ffn 64 --vocab 512 --ctx 384 --type f32 --seed 33 --token ']]' --token '}}' --token ']}' --token '}]' --token '>{'

# ENGINE_FAIL_FAST=1 (the mutation lane): stop at the first failure
bail() {
	if [ -n "${ENGINE_FAIL_FAST:-}" ] &&
	   [ $(( $(grep -c '^FAIL' "$LOG") + extra_fail )) -gt 0 ]; then
		echo "ENGINE_FAIL_FAST: stopping at the first failure (log: $LOG)"
		exit 1
	fi
}

run() {	# run LABEL CMD...: log everything, show failures, notes and seconds
	label=$1
	shift
	echo "== $label" >> "$LOG"
	t0=$(date +%s)
	out=$("$@" 2>&1)
	rc=$?
	printf '%s\n' "$out" >> "$LOG"
	printf '%s\n' "$out" | grep -E '^(FAIL|#)' | sed "s/^/  /"
	n_ok=$(printf '%s\n' "$out" | grep -c '^ok')
	n_bad=$(printf '%s\n' "$out" | grep -c '^FAIL')
	if [ $rc -ne 0 ] && [ "$n_bad" -eq 0 ]; then
		echo "FAIL $label exited with status $rc" | tee -a "$LOG"
		extra_fail=$((extra_fail + 1))
	fi
	printf '%-44s %4d ok %3d failed %4d s\n' "$label" "$n_ok" "$n_bad" $(($(date +%s) - t0))
	bail
}

runref() {	# numpy lines are the interesting ones: always show them
	label=$1
	shift
	echo "== $label" >> "$LOG"
	out=$("$@" 2>&1)
	printf '%s\n' "$out" >> "$LOG"
	printf '%s\n' "$out" | sed "s/^/  /"
	if ! printf '%s\n' "$out" | grep -q '^ok'; then
		extra_fail=$((extra_fail + 1))
	fi
	bail
}

# the references (numpy, python regex, python tokenizers) against the
# ASan-built kve-logits
references() {
	echo "numpy reference (float64; max abs error over 24 positions of logits):"
	BOUND=1e-4
	for m in f32-gqa f16-gqa q8-gqa odd-f32 qwen2-f16 qwen2-q8 gqa6-f16; do
		runref "ref $m" "$PY" tests/engine/ref.py logits $M/$m.gguf $T/kve-logits --bound $BOUND
	done
	# --controls: a reference with llama's rope (and one without the biases)
	# must miss by more than the bound, so a rope mix-up cannot pass
	runref "ref qwen2-f32" "$PY" tests/engine/ref.py logits $M/qwen2-f32.gguf $T/kve-logits --bound $BOUND --controls
	# qwen3 (and its per-head norms), llama 3's rope_freqs, linear rope scaling
	runref "ref qwen3-f32 controls" "$PY" tests/engine/ref.py logits $M/qwen3-f32.gguf $T/kve-logits --bound $BOUND --controls
	runref "ref qwen3-f32 c threads" env KVE_ISA=c "$PY" tests/engine/ref.py logits $M/qwen3-f32.gguf $T/kve-logits --bound $BOUND --threads 2 --block 3 --prefill 7
	runref "ref llama3-f32 controls" "$PY" tests/engine/ref.py logits $M/llama3-f32.gguf $T/kve-logits --bound $BOUND --controls
	runref "ref linrope-f32 controls" "$PY" tests/engine/ref.py logits $M/linrope-f32.gguf $T/kve-logits --bound $BOUND --controls
	runref "ref f32-gqa controls" "$PY" tests/engine/ref.py logits $M/f32-gqa.gguf $T/kve-logits --bound $BOUND --controls
	# partial rope: 8 of 16 dims (llama pairs), 6 of 16 (NEOX halves)
	runref "ref rope8-f32 controls" "$PY" tests/engine/ref.py logits $M/rope8-f32.gguf $T/kve-logits --bound $BOUND --controls
	runref "ref qwen2-rope6-f16 controls" env KVE_ISA=c "$PY" tests/engine/ref.py logits $M/qwen2-rope6-f16.gguf $T/kve-logits --bound $BOUND --controls --prefill 7
	runref "ref qwen2 arena f16 kv" env KVE_TEST_KV=arena "$PY" tests/engine/ref.py logits $M/qwen2-f32.gguf $T/kve-logits --bound $BOUND --kv f16 --block 3 --prefill 5
	runref "ref c qwen2 q8" env KVE_ISA=c "$PY" tests/engine/ref.py logits $M/qwen2-q8.gguf $T/kve-logits --bound $BOUND --threads 2 --prefill 20
	runref "ref f16 kv" "$PY" tests/engine/ref.py logits $M/f32-gqa.gguf $T/kve-logits --bound $BOUND --kv f16 --block 4 --prefill 9
	# an 8-bit KV (heads of 64, rotated): 16-token blocks, then 3-token ones
	# (K's fours across 3 rows) at 2 threads, and the portable kernels;
	# bound 2e-3: a value on a rounding boundary can quantise a step apart
	# under another summation order (7e-4 seen), while a float KV is 0.034
	# away (which the check requires to exceed the bound)
	runref "ref q8_0 kv" "$PY" tests/engine/ref.py logits $M/qwen3-f32.gguf $T/kve-logits --bound 2e-3 --kv q8_0 --prefill 9 --controls
	runref "ref q8_0 kv threads" "$PY" tests/engine/ref.py logits $M/qwen3-f32.gguf $T/kve-logits --bound 2e-3 --kv q8_0 --threads 2 --block 3 --prefill 7
	runref "ref c q8_0 kv" env KVE_ISA=c "$PY" tests/engine/ref.py logits $M/qwen3-f32.gguf $T/kve-logits --bound 2e-3 --kv q8_0 --block 5 --prefill 1
	runref "ref c q8" env KVE_ISA=c "$PY" tests/engine/ref.py logits $M/q8-gqa.gguf $T/kve-logits --bound $BOUND --threads 2 --prefill 20
	runref "ref c f16" env KVE_ISA=c "$PY" tests/engine/ref.py logits $M/f16-gqa.gguf $T/kve-logits --bound $BOUND --block 1
	runref "ref gqa6 threads" "$PY" tests/engine/ref.py logits $M/gqa6-f16.gguf $T/kve-logits --bound $BOUND --kv f16 --threads 2 --block 3 --prefill 9
	# KV in arena blocks (kve-logits under KVE_TEST_KV=arena). Q8_0 with fp16
	# KV is not compared: rounding K/V to fp16 moves activations across Q8_0
	# quantisation steps, which the 1e-4 bound cannot absorb
	runref "ref arena q8" env KVE_TEST_KV=arena "$PY" tests/engine/ref.py logits $M/q8-gqa.gguf $T/kve-logits --bound $BOUND --block 4 --prefill 9
	runref "ref arena f16 kv" env KVE_TEST_KV=arena "$PY" tests/engine/ref.py logits $M/f32-gqa.gguf $T/kve-logits --bound $BOUND --kv f16 --block 3 --prefill 5
	echo "== pre-tokenizers" >> "$LOG"
	out=$("$PY" tests/engine/ref.py pretok $T/kve-logits 2>&1)
	printf '%s\n' "$out" >> "$LOG"
	printf '%s\n' "$out" | grep -v '^ok' | sed 's/^/  /'
	printf '%-44s %4d ok %3d failed\n' "BPE pre-tokenizers vs python regex" \
		"$(printf '%s\n' "$out" | grep -c '^ok')" "$(printf '%s\n' "$out" | grep -c '^FAIL')"
	printf '%s\n' "$out" | grep -q '^ok' || extra_fail=$((extra_fail + 1))
	for m in f32-gqa f16-gqa bpe-llama3 bpe-qwen2 qwen2-f32; do
		echo "== tokens $m" >> "$LOG"
		out=$("$PY" tests/engine/ref.py tokens $M/$m.gguf $T/kve-logits 2>&1)
		printf '%s\n' "$out" >> "$LOG"
		printf '%s\n' "$out" | grep -v '^ok' | sed 's/^/  /'
		printf '%-44s %4d ok %3d failed\n' "tokenizer vs python ($m)" \
			"$(printf '%s\n' "$out" | grep -c '^ok')" "$(printf '%s\n' "$out" | grep -c '^FAIL')"
		printf '%s\n' "$out" | grep -q '^ok' || extra_fail=$((extra_fail + 1))
		bail
	done
}

# beside NAME CMD...: CMD as a background job with a log and an output of
# its own, added to the whole in join_beside; in order under ENGINE_FAIL_FAST
beside_jobs=""
beside() {
	name=$1
	shift
	if [ -n "${ENGINE_FAIL_FAST:-}" ]; then
		"$@"
		return
	fi
	(
		LOG=$B/check-$name.log
		: > "$LOG"
		extra_fail=0
		"$@" > "$B/$name.out" 2>&1
		echo "$extra_fail" > "$B/$name.fail"
	) &
	beside_jobs="$beside_jobs $name:$!"
}

join_beside() {
	for j in $beside_jobs; do
		wait "${j#*:}"
		cat "$B/${j%%:*}.out"
		cat "$B/check-${j%%:*}.log" >> "$LOG"
		extra_fail=$((extra_fail + $(cat "$B/${j%%:*}.fail" 2>/dev/null || echo 1)))
	done
}

# two jobs beside the rest, CPU-bound: the references (15-20 s) and the
# allocation failures (40-50 s: test_oom, each failing allocation a run
# of its own)
beside refs references
beside oom run "allocation failures, one at a time" $T/test_oom $M/f32-gqa.gguf $M/fz-bpe.gguf

echo "engine checks"
run "gguf reader + model loader" $T/test_gguf $M/f32-gqa.gguf $M/qwen2-f32.gguf \
	$M/f16-gqa.gguf $M/q8-gqa.gguf $M/q4km-gqa.gguf $M/q5km-qwen3.gguf $M/q6k-gqa.gguf \
	$M/q40-gqa.gguf $M/q51-gqa.gguf $M/bf16-gqa.gguf $M/q3km-gqa.gguf $M/iq4nl-gqa.gguf \
	$M/iq4xs-gqa.gguf $M/q2k-gqa.gguf
refusals() {	# each file asks for what the pass does not do: refused, named
	for c in "no-experts|llama file with 8 experts: mixture of experts is not supported" \
		 "no-yarn|qwen2 file with rope scaling 'yarn': not supported" \
		 "no-vlen|different key and value lengths are not supported"; do
		out=$($T/kve-logits "$M/${c%%|*}.gguf" "$B/refused.bin" 1 2 2>&1)
		rc=$?
		case "$rc:$out" in
		1:*"${c#*|}"*) echo "ok   ${c%%|*}.gguf refused: $out" ;;
		*) echo "FAIL ${c%%|*}.gguf: exit $rc, want \"${c#*|}\": $out" ;;
		esac
	done
}
run "what the loader refuses, by name" refusals
no_space_prefix() {	# the same vocabulary (seed 11) with and without the dummy prefix
	: > "$B/nsp-a.hex"
	: > "$B/nsp-b.hex"
	for t in "hello world" "the sun is up" "a" "x  y" "Hello, tools."; do
		printf '%s' "$t" | od -An -tx1 -v | tr -d ' \n' >> "$B/nsp-a.hex"
		echo >> "$B/nsp-a.hex"
		printf ' %s' "$t" | od -An -tx1 -v | tr -d ' \n' >> "$B/nsp-b.hex"
		echo >> "$B/nsp-b.hex"
	done
	with=$($T/kve-logits --tokenize "$M/f32-gqa.gguf" "$B/nsp-a.hex")
	without=$($T/kve-logits --tokenize "$M/nospace-spm.gguf" "$B/nsp-b.hex")
	bare=$($T/kve-logits --tokenize "$M/nospace-spm.gguf" "$B/nsp-a.hex")
	if [ -n "$with" ] && [ "$with" = "$without" ] && [ "$with" != "$bare" ]; then
		echo "ok   add_space_prefix false: ' ' + text gives the ids the default gives text (5 texts), text alone others"
	else
		echo "FAIL add_space_prefix false: [$with] [$without] [$bare]"
	fi
}
run "SentencePiece without the dummy prefix" no_space_prefix
run "kernels vs double precision, self-check" env KVE_SELFCHECK=1 $T/test_kernels
run "self-check coverage, fault by fault" $T/test_selfcheck
run "worker team: chunks, futex sleep/wake" $T/test_threads
run "sampler: min-p, penalties, biases" $T/test_sample
run "tokenizers" $T/test_tokenizer $M/f32-gqa.gguf $M/f16-gqa.gguf $M/bpe-llama3.gguf $M/bpe-qwen2.gguf $M/qwen2-f32.gguf
# again with unwritten heap memory holding 0x7f bytes, up to 1 MiB of each
# allocation: -1 (0xff) reads as "empty" in the vocabulary's hash table,
# a large positive value as an id far outside it, which faults
FILL_7F="$ASAN_OPTIONS:malloc_fill_byte=127:max_malloc_fill_size=1048576"
run "tokenizers, heap filled with 0x7f" env ASAN_OPTIONS="$FILL_7F" \
	$T/test_tokenizer $M/f32-gqa.gguf $M/f16-gqa.gguf $M/bpe-llama3.gguf $M/bpe-qwen2.gguf $M/qwen2-f32.gguf
run "paged KV, batching, threads, sampling" $T/test_engine $M/f32-gqa.gguf $M/f16-gqa.gguf $M/q8-gqa.gguf $M/odd-f32.gguf $M/qwen2-f16.gguf $M/gqa6-f16.gguf $M/q4km-gqa.gguf $M/q5km-qwen3.gguf $M/q40-gqa.gguf $M/q3k-tied.gguf $M/iq4nl-gqa.gguf $M/iq4xs-gqa.gguf $M/q2k-gqa.gguf
run "same, portable C kernels" env KVE_ISA=c $T/test_engine $M/f32-gqa.gguf $M/q8-gqa.gguf $M/qwen2-q8.gguf $M/q4km-gqa.gguf $M/q51-gqa.gguf $M/q3k-tied.gguf $M/iq4nl-gqa.gguf $M/iq4xs-gqa.gguf $M/q2k-gqa.gguf
run "same, AVX2 kernels" env KVE_ISA=avx2 $T/test_engine $M/q4km-gqa.gguf $M/q6k-gqa.gguf $M/q40-gqa.gguf $M/bf16-gqa.gguf $M/q3km-gqa.gguf $M/iq4nl-gqa.gguf $M/iq4xs-gqa.gguf $M/q2k-gqa.gguf
# the same suite with every KV block a libkvarena arena block (memfd
# backend), then the kv_arena adapter itself: per-session kva_blocks_alloc,
# kva_blocks_share, and a prefill process handing KV to a decode process
run "same, KV blocks in a kvarena arena" env KVE_TEST_KV=arena $T/test_engine $M/f32-gqa.gguf $M/f16-gqa.gguf $M/q8-gqa.gguf $M/odd-f32.gguf $M/qwen2-f16.gguf
run "kvarena sessions, sharing, 2-process hand-over" $T/test_arena $M/f32-gqa.gguf $M/q8-gqa.gguf $M/odd-f32.gguf $M/q4km-gqa.gguf
run "GGUF fuzz ($FUZZ mutations, ASan+UBSan)" $T/test_fuzz "$FUZZ" $M/fz-q8.gguf $M/fz-bpe.gguf $M/fz-qwen2.gguf $M/fz-q3k.gguf

# constrained decoding: unit checks on both tokenizers, then the property
# test: random specs (constrain-prop.js gen), completions sampled under
# them by random-weight models (kvc-gen), validated by ajv
run "constrained decoding (kvconstrain.h)" $T/test_constrain $M/f32-gqa.gguf $M/f16-gqa.gguf $M/brackets-tag-spm.gguf
# again with 0x7f heap bytes: the automaton builder's set hash table is
# another where an unwritten slot reads as "empty" under 0xff
run "constrained decoding, heap filled with 0x7f" env ASAN_OPTIONS="$FILL_7F" \
	$T/test_constrain $M/f32-gqa.gguf $M/f16-gqa.gguf $M/brackets-tag-spm.gguf
constrain_prop() {
	NODE_PATH=/usr/share/nodejs
	export NODE_PATH
	node tests/engine/constrain-prop.js gen "${ENGINE_CPROP_SEED:-1}" "${ENGINE_CPROP_SPECS:-40}" \
		> $B/cprop-specs.jsonl || { echo "FAIL constrain-prop.js gen (node, node-ajv: make deps-engine)"; return; }
	for m in cprop-spm cprop-bpe; do
		$T/kvc-gen $M/$m.gguf $B/cprop-specs.jsonl 2 240 > $B/cprop-$m.jsonl ||
			echo "FAIL kvc-gen $m exited with status $?"
	done
	node tests/engine/constrain-prop.js check $B/cprop-specs.jsonl $B/cprop-cprop-spm.jsonl \
		$B/cprop-cprop-bpe.jsonl
}
run "constrained outputs vs ajv (property test)" constrain_prop

# kve-demo (make demo's engine part): the decode worker, a separate
# process on the arena's fd, generates what one process does
demo_checks() {
	for a in "" "--temp 0.8 --seed 5"; do
		# shellcheck disable=SC2086 # $a is a list of options
		out=$(build/bin/kve-demo $M/f16-gqa.gguf "Hello, arena." --tokens 12 $a 2>&1)
		rc=$?
		if [ $rc -eq 0 ] && printf '%s\n' "$out" | grep -q 'in this process: the same tokens'; then
			echo "ok kve-demo ${a:-greedy}: the decode worker's 12 tokens == one process"
		else
			printf '%s\n' "$out"
			echo "FAIL kve-demo ${a:-greedy}: exit $rc"
		fi
	done
	out=$(build/bin/kve-demo $M/f16-gqa.gguf "Hello" --tokens 200 2>&1)
	rc=$?
	if [ $rc -eq 1 ] && printf '%s\n' "$out" | grep -q "model's context of 128"; then
		echo "ok kve-demo: a generation past the context is refused, naming it"
	else
		echo "FAIL kve-demo --tokens 200 on a 128-token context: exit $rc: $out"
	fi
}
# ENGINE_SKIP_DEMO=1 (the mutation lane, which builds only the sanitized
# library): test_arena covers the same hand-over
if [ -z "${ENGINE_SKIP_DEMO:-}" ]; then
	run "kve-demo: prefill and decode workers" demo_checks
fi

join_beside

pass=$(grep -c '^ok' "$LOG")
fail=$(( $(grep -c '^FAIL' "$LOG") + extra_fail ))
echo "(full log: $LOG)"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
