#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""vocab_peer.py - the engine's tokenizer on llama.cpp's own tokenizer
tests (part of `make check-engine-peer`): the real vocabularies of the
families kvarenad serves, as llama.cpp's sources in the peer cache hold
them (models/ggml-vocab-NAME.gguf, vocabulary only), each with the texts
of its test (NAME.gguf.inp, separated by "__ggml_vocab_test__" lines) and
the ids llama.cpp gives them (NAME.gguf.out: add_special and
parse_special false, as test-tokenizer-0 tokenizes). Every text must give
llama.cpp's ids.

usage: vocab_peer.py VOCAB_DIR KVE_LOGITS WORKDIR
"""
import os
import subprocess
import sys

VOCABS = [
    ("llama-spm", "SentencePiece: Llama 2, Mistral 7B"),
    ("llama-bpe", "byte-level BPE, llama-bpe: Llama 3.x"),
    ("qwen2", "byte-level BPE, qwen2: Qwen2.5, Qwen3"),
    ("phi-3", "SentencePiece: Phi-3"),
]
VDIR, KVE, WORK = sys.argv[1:4]
os.makedirs(WORK, exist_ok=True)
fails = 0
for name, what in VOCABS:
    path = os.path.join(VDIR, "ggml-vocab-%s.gguf" % name)
    try:
        with open(path + ".inp", "rb") as f:
            texts = f.read().split(b"\n__ggml_vocab_test__\n")
        with open(path + ".out") as f:
            want = [[int(x) for x in ln.split()] for ln in f.read().split("\n")]
    except OSError as e:
        print("FAIL %s: %s" % (name, e))
        fails += 1
        continue
    if texts and texts[-1].endswith(b"\n__ggml_vocab_test__"):
        texts[-1] = texts[-1][:-len(b"\n__ggml_vocab_test__")]
    n = min(len(texts), len(want))
    hexf = os.path.join(WORK, name + ".hex")
    with open(hexf, "w") as f:
        for t in texts[:n]:
            f.write(t.hex() + "\n")
    r = subprocess.run([KVE, "--tokenize", path, hexf], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    got = [[int(x) for x in ln.split()] for ln in r.stdout.decode().split("\n")[:n]]
    bad = [i for i in range(n) if i >= len(got) or got[i] != want[i]]
    if r.returncode != 0 or n < 10 or bad:
        fails += 1
        print("FAIL %s (%s): %d of %d texts differ from llama.cpp's ids%s" %
              (name, what, len(bad), n, r.stderr.decode().strip()))
        for i in bad[:3]:
            print("  %r\n    llama.cpp %s\n    engine    %s" %
                  (texts[i][:60], want[i][:20], got[i][:20] if i < len(got) else None))
    else:
        print("ok   %s (%s): %d texts, the engine's ids are llama.cpp's" % (name, what, n))
sys.exit(1 if fails else 0)
