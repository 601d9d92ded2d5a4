#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The engine against llama.cpp, the reference users trust (make
check-engine-peer; tests/engine/peer.sh builds llama-ref against the
benchmark's peer cache and runs this).

  peer.py LLAMA_REF KVE_LOGITS KVA_MKMODEL WORKDIR [--quick]

1. dequant: random blocks of every type the engine reads (random bytes, so
   random scales, with blocks forced to the extreme scales: 0, +-65504,
   the smallest subnormal, +-inf, NaN), ggml's to_float against the
   engine's kve_dequant_block: bit for bit (a NaN must be a NaN).
2. logits: random F32 models from kva-mkmodel (llama with GQA, qwen2,
   qwen3 with 128-wide heads, llama 3's rope_freqs, linear rope scaling),
   quantised to each type by llama.cpp's own quantiser
   (llama_model_quantize: every matrix that type, or its Q2_K / Q3_K_M /
   Q4_K_M / Q5_K_M mix), and files of each type written by kva-mkmodel itself: the same
   prompt through both engines (prefill of 5 tokens, 7 decode steps),
   logits of every position within BOUND[type] of llama.cpp's. The llama
   and qwen3 F32 files (heads of 64 and 128) again with K and V in Q8_0
   in both engines (llama.cpp's -ctk q8_0 -ctv q8_0, its flash attention
   on; the engine's [kv] dtype = q8_0): both rotate each head of Q, K
   and V by the same Walsh-Hadamard matrix before quantising it (V's sums
   rotated back) and quantise the same Q8_0 blocks, so the median
   position within 1e-4 and every one within 0.1 (a step apart where a
   value sits on a rounding boundary, as for the quantised types); and a
   control: llama.cpp with its rotation off (LLAMA_ATTN_ROT_DISABLE=1)
   must miss by a median over 1e-3.
3. greedy: 32 greedy steps after the prompt, the same tokens; or, at the
   first step where they differ, a near-tie in both engines (the two
   tokens' logits within the bound of each other), which the bound
   allows.

Bounds (max abs difference of any logit at any position; the models'
logits reach |3-4|): F32 1e-4 (summation order). Quantised types: 0.1.
The engine quantises activations exactly as llama.cpp's CPU backend does
(Q8_0 blocks with an fp16 scale for Q8_0/Q4_0/Q5_0, Q8_1's fp16 sum for
Q4_1/Q5_1, Q8_K for the K-quants), so the integer dot products are the
same and most positions agree within 1e-6; but a value that lands within
an ulp of a rounding boundary can quantise one step apart under another
summation order, and that step (about 0.01-0.06 in the logits) stays in
the KV of every later position. BF16: 0.05 (llama.cpp rounds the
activations to bf16 for its BF16 products, the engine keeps them F32:
about 0.013 apart).
Prints 'ok ...' / 'FAIL ...' lines; exit status 1 on failure.
"""
import os
import subprocess
import sys

import numpy as np

TYPES = {  # name: ggml type number, block bytes (dequant)
    "f16": (1, 2), "bf16": (30, 2), "q8_0": (8, 34), "q4_0": (2, 18), "q4_1": (3, 20),
    "q5_0": (6, 22), "q5_1": (7, 24), "q3_k": (11, 110), "q4_k": (12, 144),
    "q5_k": (13, 176), "q6_k": (14, 210), "iq4_nl": (20, 18), "iq4_xs": (23, 136),
    "q2_k": (10, 84),
}
QUANTS = ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_nl",
          "iq4_xs", "bf16", "q2_k", "q3_k_m", "q4_k_m", "q5_k_m"]
PROMPT = [1, 15, 77, 300, 42, 9, 128, 255, 400, 7, 3, 99]
PREFILL = 5
STEPS = 32
VOCAB = 512
fails = 0


def report(ok, msg):
    global fails
    print(("ok   " if ok else "FAIL ") + msg)
    if not ok:
        fails += 1


def bound(t):
    return 1e-4 if t == "f32" else 0.05 if t == "bf16" else 0.1   # q8_0 KV: 0.1


# fp16 scales a block is forced to: 0, +-65504, the smallest subnormal,
# +-inf, NaN
EXTREME = [0x0000, 0x7bff, 0xfbff, 0x0001, 0x7c00, 0xfc00, 0x7e00]


def scale_offsets(t):
    """byte offsets of a block's fp16 scales (d, and m / dmin)"""
    return {"f16": [0], "bf16": [], "q8_0": [0], "q4_0": [0], "q5_0": [0],
            "q4_1": [0, 2], "q5_1": [0, 2], "q3_k": [108], "q4_k": [0, 2], "q5_k": [0, 2],
            "q6_k": [208], "iq4_nl": [0], "iq4_xs": [0], "q2_k": [80, 82]}[t]


def check_dequant(ref, kve, work):
    rng = np.random.default_rng(7)
    for t, (num, bb) in TYPES.items():
        raw = rng.integers(0, 256, size=(600, bb), dtype=np.uint8)
        for i, h in enumerate(EXTREME):     # every extreme on every scale
            for k, o in enumerate(scale_offsets(t)):
                raw[8 * i + k, o:o + 2] = np.array([h & 0xff, h >> 8], dtype=np.uint8)
                raw[8 * i + 4, o:o + 2] = np.array([h & 0xff, h >> 8], dtype=np.uint8)
        blk = os.path.join(work, "blocks-%s.bin" % t)
        raw.tofile(blk)
        a, b = blk + ".kve", blk + ".ggml"
        ra = subprocess.run([kve, "--dequant", str(num), blk, a], capture_output=True, text=True)
        rb = subprocess.run([ref, "dequant", str(num), blk, b], capture_output=True, text=True)
        if ra.returncode or rb.returncode:
            report(False, "dequant %s: %s%s" % (t, ra.stderr.strip(), rb.stderr.strip()))
            continue
        x = np.fromfile(a, dtype=np.float32)
        y = np.fromfile(b, dtype=np.float32)
        same = (x.view(np.uint32) == y.view(np.uint32)) | (np.isnan(x) & np.isnan(y))
        bad = np.flatnonzero(~same) if len(x) == len(y) else [0]
        report(len(bad) == 0 and len(x) == len(y),
               "dequant %s: %d blocks (%d values, NaN/inf/subnormal/0/max scales), "
               "bit for bit with ggml's to_float%s" %
               (t, len(raw), len(y), "" if len(bad) == 0 else
                ": value %d is %r, ggml %r" % (bad[0], x[bad[0]], y[bad[0]])))


def run_kve(kve, model, out, greedy, kv="f32"):
    cmd = [kve, model, out, "--kv", kv, "--prefill", str(len(PROMPT) if greedy else PREFILL)]
    if greedy:
        cmd += ["--greedy", str(STEPS)]
    r = subprocess.run(cmd + [str(x) for x in PROMPT], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError("kve-logits: " + r.stderr.strip()[-300:])
    rows = np.fromfile(out, dtype=np.float32).reshape(-1, VOCAB)
    ids = [int(x) for line in r.stdout.splitlines() if line.startswith("greedy ")
           for x in line.split()[1:]]
    return rows, ids


def run_ref(ref, model, out, greedy, kv="f32"):
    if greedy:
        cmd = [ref, "greedy", model, str(STEPS), out]
    else:
        cmd = [ref, "logits", model, out, str(PREFILL)]
    env = dict(os.environ, KVE_REF_KV=kv.split("/")[0])
    if kv.endswith("/norot"):  # llama.cpp's Hadamard rotation of a quantised KV off
        env["LLAMA_ATTN_ROT_DISABLE"] = "1"
    r = subprocess.run(cmd + [str(x) for x in PROMPT], capture_output=True, text=True, env=env)
    if r.returncode:
        raise RuntimeError("llama-ref: " + r.stderr.strip()[-300:])
    rows = np.fromfile(out, dtype=np.float32).reshape(-1, VOCAB)
    return rows, [int(x) for x in r.stdout.split()]


def compare(ref, kve, work, model, label, t, kv="f32", median_bound=None):
    b = bound(t if kv == "f32" else kv.split("/")[0])
    kk = kv.split("/")[0]
    try:
        ours, _ = run_kve(kve, model, os.path.join(work, "kve.bin"), False, kk)
        theirs, _ = run_ref(ref, model, os.path.join(work, "ref.bin"), False, kv)
        gours, ids_o = run_kve(kve, model, os.path.join(work, "kveg.bin"), True, kk)
        gtheirs, ids_t = run_ref(ref, model, os.path.join(work, "refg.bin"), True, kv)
    except RuntimeError as e:
        report(False, "%s: %s" % (label, e))
        return
    err = np.abs(ours - theirs).max(axis=1)
    report(ours.shape == theirs.shape and err.max() <= b and
           (median_bound is None or np.median(err) <= median_bound),
           "%s: logits of %d positions within %g of llama.cpp's%s (max %.3g, median %.2g, "
           "|logits| up to %.2f)" % (label, len(err), b,
                                      "" if median_bound is None else
                                      ", median within %g" % median_bound,
                                      err.max(), np.median(err), np.abs(theirs).max()))
    if ids_o == ids_t:
        report(True, "%s: %d greedy tokens equal" % (label, STEPS))
        return
    i = next(k for k in range(min(len(ids_o), len(ids_t))) if ids_o[k] != ids_t[k])
    a, c = ids_o[i], ids_t[i]
    lo = gours[-STEPS:][i]
    lt = gtheirs[i]
    gap_o, gap_t = abs(lo[a] - lo[c]), abs(lt[a] - lt[c])
    report(gap_o <= b and gap_t <= b,
           "%s: greedy tokens equal for %d steps, then %d here and %d in llama.cpp: %s "
           "(gaps %.3g and %.3g)" % (label, i, a, c,
                                     "a near-tie within the bound" if gap_o <= b and gap_t <= b
                                     else "not a near-tie", gap_o, gap_t))


def rotation_control(ref, kve, work, model, name):
    """llama.cpp with its rotation of quantised heads off must miss the
    engine by far more than the bound above, or that comparison could not
    see a rotation left out"""
    try:
        ours, _ = run_kve(kve, model, os.path.join(work, "kve.bin"), False, "q8_0")
        theirs, _ = run_ref(ref, model, os.path.join(work, "ref.bin"), False, "q8_0/norot")
    except RuntimeError as e:
        report(False, "%s rotation control: %s" % (name, e))
        return
    med = float(np.median(np.abs(ours - theirs).max(axis=1)))
    report(med > 1e-3, "control: %s f32 with llama.cpp's rotation off "
           "(LLAMA_ATTN_ROT_DISABLE=1) is off by a median %.3g (must exceed 1e-3)" % (name, med))


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    ref, kve, mk, work = sys.argv[1:5]
    quick = "--quick" in sys.argv
    os.makedirs(work, exist_ok=True)
    check_dequant(ref, kve, work)
    shape = ["--dim", "256", "--layers", "2", "--heads", "4", "--kv-heads", "2",
             "--ffn", "512", "--vocab", str(VOCAB), "--ctx", "256"]
    bases = [("llama", ["--seed", "41"]),
             ("qwen2", ["--arch", "qwen2", "--rope-base", "1000000", "--seed", "42"]),
             ("qwen3", ["--arch", "qwen3", "--head-dim", "128", "--seed", "43"]),
             ("llama3-rope-freqs", ["--rope-freqs", "--rope-base", "500000", "--seed", "44"]),
             ("llama-linear-rope", ["--rope-scale", "4", "--seed", "45"])]
    for name, args in bases:
        f32 = os.path.join(work, name + "-f32.gguf")
        subprocess.run([mk] + shape + args + ["--type", "f32", "-o", f32], check=True,
                       capture_output=True)
        compare(ref, kve, work, f32, "%s f32" % name, "f32")
        if name in ("llama", "qwen3"):  # heads of 64 and 128: an 8-bit KV
            compare(ref, kve, work, f32, "%s f32, K and V in Q8_0 (llama.cpp -ctk/-ctv q8_0, "
                    "heads rotated in both)" % name, "f32", "q8_0", 1e-4)
            rotation_control(ref, kve, work, f32, name)
        if name.startswith("llama") and name != "llama":
            continue    # the rope variants: F32 is what they are about
        for t in QUANTS if not quick or name == "llama" else ["q4_k_m"]:
            q = os.path.join(work, "%s-%s.gguf" % (name, t))
            r = subprocess.run([ref, "quantize", f32, q, t], capture_output=True, text=True)
            if r.returncode:
                report(False, "llama.cpp quantize %s %s: %s" % (name, t, r.stderr.strip()))
                continue
            compare(ref, kve, work, q, "%s %s (llama.cpp's quantiser)" % (name, t), t)
    # the engine's own writer: llama.cpp must read its files the same way
    for t in QUANTS if not quick else ["q4_k_m", "q4_0"]:
        q = os.path.join(work, "mk-%s.gguf" % t)
        subprocess.run([mk] + shape + ["--seed", "46", "--type", t, "-o", q], check=True,
                       capture_output=True)
        compare(ref, kve, work, q, "llama %s (kva-mkmodel's writer)" % t, t)
    print("%d failed" % fails)
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
