# SPDX-License-Identifier: MIT
"""circuit.py - an induction circuit built into a fresh model's weights.

Copying a name from the question into the reply takes two attention heads
that training forms only late, if at all, at this model's size and token
budget (Documentation/model.md, "Copying drawn names"): one that moves each
token's identity to the next position (the previous-token head) and one
that, at a token A, finds where A stood before and reads the token that
followed it (the induction head). induction_init() writes both into a
newly initialised model, with every other weight left random; training
then starts from a model that already copies and learns when and what to
copy. The weights stay a plain llama model (the engine and llama.cpp run
it): the circuit is an initialisation, not an architecture.

It needs a model of at least 2 layers. Rope rotates every pair of a
head's dimensions (llama.cpp refuses a "llama" model with fewer rope
dimensions than the head's), so the induction head matches content in the
slowest-turning pairs, where the match fades little with the distance
between the two positions, and the previous-token head finds its position
in the fastest ones.

Residual stream layout at initialisation (dim D, content width C = D/2):
  [0, C-1)   the token's embedding (its identity)
  C-1        a constant, the same in every token's embedding: the
             previous-token head's position-only query and key come from it
  [C, 2C-1)  the previous token's embedding, written by layer 0 head 0
"""
import math

import numpy as np
import torch


def prev_amplitudes(cfg, npair, n=1024):
    """Query amplitudes, per rope pair 0..npair-1 (the highest
    frequencies), of a head whose key is the same at every position: the
    score S(d) = sum_p a_p cos((d - 1) theta_p) at distance d should peak at
    d = 1. Maximises min over d in {0, 2..n-1} of S(1) - S(d) for |a| = 1
    by projected subgradient ascent (deterministic)."""
    th = cfg.rope_base ** (-np.arange(npair) * 2 / cfg.rope_dims)
    C = np.cos(np.outer(np.arange(n) - 1, th))
    others = np.r_[0, np.arange(2, n)]
    a = np.ones(npair) / math.sqrt(npair)
    best, best_a = -1e9, a
    for _ in range(5001):
        S = C @ a
        gap = S[1] - S[others]
        if gap.min() > best:
            best, best_a = gap.min(), a.copy()
        k = others[np.argmin(gap)]
        a = np.maximum(a + 0.01 * (C[1] - C[k]), 0)
        a /= np.linalg.norm(a)
    return best_a, best


@torch.no_grad()
def induction_init(model, gen, npos=16, nmatch=10, sharp=200.0, match=6.0, copy_gain=3.0,
                   quiet=0.1):
    """Write a previous-token head (layer 0, head 0) and an induction head
    (layer 1, head 0) into model's fresh weights. gen: a torch.Generator
    (the training seed). npos: the rope pairs (fastest first) that carry
    the previous-token head's positional query and key; nmatch: the pairs
    (slowest last) that carry the induction head's content match, where
    the rotation over a few hundred positions is small (pair 22 of 32 turns
    0.5 rad in 300 positions). sharp: the previous-token scores' scale;
    match: the induction head's; copy_gain: how strongly the induction head
    writes the token it reads; quiet: the other heads' outputs and the two
    layers' feed-forward outputs are scaled by this at the start, so that
    the circuit's signal is not drowned before training shapes them."""
    c = model.cfg
    D, hd, rd = c.dim, c.head_dim, c.rope_dims
    C = D // 2
    m0 = rd - 2 * nmatch                    # first dim of the match pairs
    assert c.n_layers >= 2 and C <= hd + 1 and 2 * npos <= m0, \
        "induction_init: needs 2+ layers, head_dim >= dim/2 - 1, npos + nmatch <= rope pairs"
    std = float(model.embed.weight.std())
    E = model.embed.weight
    E[:, C:] = 0
    E[:, C - 1] = 2 * std                   # the constant
    # RMSNorm of an embedding: the constant's value after it
    rms = math.sqrt(((C - 1) * std * std + 4 * std * std) / D)
    one = 2 * std / rms
    nrm_c = std / rms                       # a content dimension's scale after the norm

    L0, L1 = model.layers[0], model.layers[1]
    for b in (L0, L1):
        b.wo.weight *= quiet
        b.down.weight *= quiet
    # layer 0 head 0: query and key from the constant only, in the fast
    # pairs; the query's pair p leads the key's by theta_p, so q.k peaks
    # when the key is one position back
    amps, _ = prev_amplitudes(c, npos)
    th = c.rope_base ** (-np.arange(npos) * 2 / rd)
    L0.wq.weight[:hd] = 0
    L0.wk.weight[:] *= quiet
    L0.wk.weight[:2 * npos] = 0
    kscale = math.sqrt(sharp)               # query and key weights of one size
    for p in range(npos):
        qa = sharp * amps[p] / kscale
        L0.wq.weight[2 * p, C - 1] = qa * math.cos(-th[p]) / one
        L0.wq.weight[2 * p + 1, C - 1] = qa * math.sin(-th[p]) / one
        L0.wk.weight[2 * p, C - 1] = kscale / one
    # its value: the token's content; its output: into [C, 2C-1)
    L0.wv.weight[:] = 0
    L0.wv.weight[:C - 1, :C - 1].fill_diagonal_(1.0 / nrm_c)
    L0.wo.weight[:, :hd] = 0
    L0.wo.weight[C:2 * C - 1, :C - 1].fill_diagonal_(std)

    # layer 1 head 0: query = the current token's content, key = the
    # previous token's, both projected by the same orthonormal rows R onto
    # the slow pairs: q.k is the content match, nearly whatever the distance
    nu = 2 * nmatch
    R = torch.linalg.qr(torch.randn(C - 1, nu, generator=gen, dtype=torch.float64))[0].t()
    R = R.to(E.dtype)                                   # (nu, C-1), orthonormal rows
    x1 = torch.zeros(D)
    x1[:C - 1], x1[C - 1], x1[C:2 * C - 1] = std, 2 * std, std
    n1 = std / float(x1.pow(2).mean().sqrt())         # content scale after layer 1's norm
    g = math.sqrt(match) / n1
    L1.wq.weight[:hd] = 0
    L1.wq.weight[m0:rd, :C - 1] = R * g
    L1.wk.weight[:] *= quiet
    L1.wk.weight[m0:rd] = 0
    L1.wk.weight[m0:rd, C:2 * C - 1] = R * g
    L1.wv.weight[:] = 0
    L1.wv.weight[:C - 1, :C - 1].fill_diagonal_(1.0 / n1)
    L1.wo.weight[:, :hd] = 0
    L1.wo.weight[:C - 1, :C - 1].fill_diagonal_(copy_gain * std)


def copy_accuracy(model, gen, n, rows=4):
    """The share of tokens the model predicts right (argmax) in the second
    half of rows of n random tokens repeated: what an induction circuit
    does and nothing else can (the tokens are drawn uniformly)."""
    ids = torch.randint(20, model.cfg.vocab, (rows, n), generator=gen)
    x = torch.cat((ids, ids), 1)
    with torch.no_grad():
        pred = model(x)[:, n:-1].argmax(-1)
    return (pred == x[:, n + 1:]).float().mean().item()


def main():
    """--check: a fresh model of the shipped shape copies random tokens
    with the circuit built in and not without it."""
    import argparse
    import sys
    from model import Config, Model
    ap = argparse.ArgumentParser(description="the induction circuit's check")
    ap.add_argument("--check", action="store_true", required=True)
    ap.parse_args()
    ok = True
    for built in (False, True):
        torch.manual_seed(1)
        m = Model(Config(vocab=962, dim=128, n_layers=4, n_heads=2, n_kv_heads=1, ffn=384))
        if built:
            induction_init(m, torch.Generator().manual_seed(1))
        gen = torch.Generator().manual_seed(2)
        accs = [copy_accuracy(m, gen, n) for n in (30, 150, 400)]
        print("%s: random tokens repeated after 30 / 150 / 400, copied %.1f%% / %.1f%% / %.1f%%"
              % ("circuit built in" if built else "random weights  ",
                 *(100 * a for a in accs)))
        ok = ok and (accs[0] >= 0.9 and accs[2] >= 0.5 if built else max(accs) <= 0.05)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
