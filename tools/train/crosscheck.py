#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""crosscheck.py - the engine against PyTorch on the shipped agent model.

Owns two checks, each printing 'ok ...' or 'FAIL ...' (exit status 1 on a
failure):
  tokens: the engine's tokenizer (kve-logits --tokenize) and tokenizer.py,
          built from the GGUF's own tokenizer.ggml.* metadata, give the
          same ids for held-out conversations and awkward strings;
  logits: the engine's logits (kve-logits: a prefill, then decode steps)
          and a float64 PyTorch forward of the same weights (read from the
          GGUF, Q8_0 dequantised) agree within --bound (max abs error) and
          pick the same argmax wherever the reference's top-2 margin
          exceeds twice the bound (an error within the bound cannot flip
          those; near-ties are counted and shown).

  crosscheck.py MODEL --kve-logits BIN --bound B [--prompts N] [--tokens]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus                       # noqa: E402
import gguf_io as G                 # noqa: E402
from model import Config, Model     # noqa: E402
from tokenizer import Tokenizer     # noqa: E402

fails = 0


def report(ok, msg):
    global fails
    print(("ok   " if ok else "FAIL ") + msg, flush=True)
    fails += 0 if ok else 1


def load(path):
    r = G.Reader(path)
    kv = r.kv
    A = kv["general.architecture"]
    cfg = Config(vocab=len(kv["tokenizer.ggml.tokens"]), dim=kv[A + ".embedding_length"],
                 n_layers=kv[A + ".block_count"], n_heads=kv[A + ".attention.head_count"],
                 n_kv_heads=kv[A + ".attention.head_count_kv"],
                 ffn=kv[A + ".feed_forward_length"], ctx=kv[A + ".context_length"],
                 rope_base=kv[A + ".rope.freq_base"],
                 rope_dims=kv.get(A + ".rope.dimension_count", 0),
                 eps=kv[A + ".attention.layer_norm_rms_epsilon"])
    m = Model(cfg).double()
    sd = {"embed.weight": "token_embd.weight", "norm.weight": "output_norm.weight"}
    names = {"attn_norm": "attn_norm", "wq": "attn_q", "wk": "attn_k", "wv": "attn_v",
             "wo": "attn_output", "ffn_norm": "ffn_norm", "gate": "ffn_gate", "up": "ffn_up",
             "down": "ffn_down"}
    for i in range(cfg.n_layers):
        for k, v in names.items():
            sd["layers.%d.%s.weight" % (i, k)] = "blk.%d.%s.weight" % (i, v)
    m.load_state_dict({k: torch.from_numpy(r.tensor(v).astype(np.float64)) for k, v in sd.items()})
    tok = Tokenizer(kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.scores"],
                    kv["tokenizer.ggml.token_type"])
    # the file's dummy-prefix flag, as the engine and llama.cpp read it
    tok.space_prefix = kv.get("tokenizer.ggml.add_space_prefix", True)
    return m, tok


def engine_tokens(kve, model, texts):
    with tempfile.NamedTemporaryFile("w", suffix=".hex") as f:
        for t in texts:
            f.write(t.encode().hex() + "\n")
        f.flush()
        out = subprocess.run([kve, "--tokenize", model, f.name], check=True,
                             capture_output=True, text=True).stdout
    return [[int(x) for x in line.split()] for line in out.splitlines()]


def prompts(n):
    convs = corpus.generate(4242, n, "eval")
    return [corpus.render(c["messages"]) for c in convs]


def check_tokens(kve, model, tok, n):
    texts = prompts(n) + [
        "", " ", "  two  spaces ", "tab\there", "\n\n", "<|im_start|><|im_end|>",
        "<|im_start", "<tool", "<tools></tools>", "a<tool_call>b</tool_call>c",
        "#include <time.h> a < b <= c", "caf\u00e9 \u00fcber \u2581 \U0001F600", "\xff",
        "12345678901234567890", "x" * 300, "He said \"hi\"\\n {\"a\": [1, 2]}",
        "/home/gillamab/omfa/ekcasco.md", "cat /var/lib/shiek/x.log", "{\"path\": \"/usr/share/hoir\"}",
        "/tmp/tmpa /data/datadel /opt/optom /etc/etcetc /srv/shita"]
    eng = engine_tokens(kve, model, texts)   # one hex line per text
    bad = [i for i, t in enumerate(texts) if tok.encode(t, dummy=tok.space_prefix) != eng[i]]
    report(not bad and len(eng) == len(texts),
           "tokenizer: %d texts (%d held-out conversations), engine ids == tokenizer.py ids%s"
           % (len(texts), n, "" if not bad else "; first mismatch: text %d %r" % (bad[0], texts[bad[0]][:80])))


def check_logits(kve, model, m, tok, n, bound, decode):
    worst, agree, total, ties, flips = 0.0, 0, 0, 0, 0
    for text in prompts(n):
        ids = tok.encode(text)
        with torch.no_grad():
            ref = m(torch.tensor([ids]))[0].numpy()
        pre = len(ids) - decode
        with tempfile.NamedTemporaryFile(suffix=".f32") as f:
            subprocess.run([kve, model, f.name, "--prefill", str(pre)] + [str(i) for i in ids],
                           check=True, capture_output=True)
            eng = np.fromfile(f.name, dtype=np.float32).reshape(-1, m.cfg.vocab)
        r = ref[pre - 1:]
        worst = max(worst, float(np.abs(eng - r).max()))
        same = eng.argmax(-1) == r.argmax(-1)
        top2 = np.sort(r, axis=-1)[:, -2:]
        clear = (top2[:, 1] - top2[:, 0]) > 2 * bound
        agree += int(same.sum())
        total += r.shape[0]
        ties += int((~clear).sum())
        flips += int((~same & clear).sum())
    # an error within the bound cannot flip an argmax whose margin exceeds
    # twice the bound: those must all agree
    report(worst <= bound and flips == 0,
           "logits %s: %d prompts, %d positions (prefill + %d decode steps each): "
           "max abs error %.3g (bound %g), argmax agreement %d/%d (%d near-ties)"
           % (os.path.basename(model), n, total, decode, worst, bound, agree, total, ties))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--kve-logits", required=True)
    ap.add_argument("--bound", type=float, required=True)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--decode", type=int, default=24)
    ap.add_argument("--tokens", type=int, default=0, help="also check the tokenizer on N conversations")
    a = ap.parse_args()
    torch.set_num_threads(1)
    m, tok = load(a.model)
    if a.tokens:
        check_tokens(a.kve_logits, a.model, tok, a.tokens)
    check_logits(a.kve_logits, a.model, m, tok, a.prompts, a.bound, a.decode)
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
