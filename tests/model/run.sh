#!/bin/sh
# SPDX-License-Identifier: MIT
# The shipped agent model's checks (make check-model):
#   1. corpus determinism: same seed, same bytes (the corpus and the copy
#      drill); another seed, other bytes; seed 1 still gives the corpus the
#      shipped model was trained on
#   2. tokenizer parity and the torch cross-check of the engine's logits,
#      F32 and Q8_0 with their own bounds (skipped, saying so, without torch)
#   3. the induction circuit make model builds into the initial weights
#      copies (and a model without it does not)
#   4. smoke: one held-out calc question through a real calc round trip
# usage: run.sh KVE_CHAT KVE_LOGITS
set -u
chat=$1
logits=$2
py=${MODEL_PY:-/usr/bin/python3}
dir=tools/train
f32=models/kvarena-agent-f32.gguf
q8=models/kvarena-agent-q8_0.gguf
# sha256 of 'corpus.py --seed 1 --n 200': changes only with the corpus
# design, which then needs a retrained model (make model)
corpus_sha=a55994aa8df657b51a46fd5a784c0124fe2b24382a18f109957e22627c02560b
pass=0
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

result() {	# status message
	if [ "$1" -eq 0 ]; then
		pass=$((pass + 1))
		echo "ok   $2"
	else
		fail=$((fail + 1))
		echo "FAIL $2"
	fi
}

"$py" $dir/corpus.py --seed 7 --n 300 --out "$tmp/a.jsonl" &&
	"$py" $dir/corpus.py --seed 7 --n 300 --out "$tmp/b.jsonl" &&
	cmp -s "$tmp/a.jsonl" "$tmp/b.jsonl"
result $? "corpus: seed 7 twice gives the same bytes"
"$py" $dir/corpus.py --seed 8 --n 300 --out "$tmp/c.jsonl" && ! cmp -s "$tmp/a.jsonl" "$tmp/c.jsonl"
result $? "corpus: seed 8 gives other bytes"
"$py" $dir/corpus.py --seed 7 --n 300 --drill --out "$tmp/d.jsonl" &&
	"$py" $dir/corpus.py --seed 7 --n 300 --drill --out "$tmp/e.jsonl" &&
	cmp -s "$tmp/d.jsonl" "$tmp/e.jsonl"
result $? "corpus: the copy drill, seed 7 twice, gives the same bytes"
got=$("$py" $dir/corpus.py --seed 1 --n 200 | sha256sum | cut -d' ' -f1)
[ "$got" = "$corpus_sha" ]
result $? "corpus: seed 1 is the corpus the shipped model learnt from (sha256 $got)"

if "$py" -c 'import torch' 2>/dev/null; then
	"$py" $dir/circuit.py --check
	result $? "circuit: built into a fresh model it copies random tokens, random weights do not"
	"$py" $dir/crosscheck.py $f32 --kve-logits "$logits" --bound 1e-3 --prompts 2 --tokens 60
	result $? "cross-check F32"
	# Q8_0's error grows with the logits (the engine quantises activations
	# to Q8_0 too), and each retrained model's are sharper: 0.252 measured
	# on the second model, 0.294 on the third (the "/" tokenizer), 0.463 on
	# the fourth (the induction circuit; the same with the portable kernels,
	# mean error 0.037 over logits spanning 23), argmax 50/50, 50/50, 49/50
	# (the one a near-tie); the bound leaves room for other kernel sets'
	# rounding
	"$py" $dir/crosscheck.py $q8 --kve-logits "$logits" --bound 0.6 --prompts 2
	result $? "cross-check Q8_0"
else
	echo "SKIP cross-check: python3-torch is not installed (scripts/deps.sh check installs it)"
fi

# smoke_xfail=1 marks the smoke failure of a model that has not learnt to
# copy numbers as expected (reported, not counted; a pass then fails the
# suite until the mark is removed). The shipped model passes: 0.
smoke_xfail=0
"$py" $dir/eval.py --chat "$chat" --model $q8 --smoke
rc=$?
if [ "$smoke_xfail" -eq 1 ]; then
	if [ $rc -eq 0 ]; then
		result 1 "smoke: $q8 passes: set smoke_xfail=0 in $0"
	else
		echo "XFAIL smoke: $q8 (expected: see Documentation/model.md)"
	fi
else
	result $rc "smoke: $q8"
fi

echo "check-model: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
