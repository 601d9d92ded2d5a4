#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""train.py - trains the agent model from scratch on the synthetic corpus.

Owns the training recipe: corpus size, vocabulary learning, batching, loss
mask (assistant turns only: their text and the <|im_end|> that ends them),
optimiser and schedule. Everything derives from --seed: the same seed on
the same machine gives the same loss curve, step for step.

  train.py --out DIR [--seed 1] [--steps N] [--threads 1]
writes DIR/ckpt.pt (weights, config, vocabulary) and DIR/tokenizer.json;
the log goes to stdout.
"""
import argparse
import math
import os
import random
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus                      # noqa: E402
from model import Config, Model, n_params   # noqa: E402
from tokenizer import Tokenizer   # noqa: E402

SYS_TEXT = corpus.render([])


def encode_conv(tok, messages):
    """Token ids of a conversation after the system prompt, and the mask of
    the ids the loss is taken on (assistant content and its <|im_end|>)."""
    parts, spans, pos = [], [], 0
    for role, content in messages:
        head = corpus.IM_START + role + "\n"
        body = content + corpus.IM_END
        if role == "assistant":
            spans.append((pos + len(head), pos + len(head) + len(body)))
        parts.append(head + body + "\n")
        pos += len(head) + len(body) + 1
    text = "".join(parts)
    ids, offs = tok.encode(text, offsets=True, dummy=False)
    mask = []
    for s, e in offs:
        inside = any(a <= s and e <= b for a, b in spans)
        straddle = any(s < a < e or s < b < e for a, b in spans)
        assert not straddle, "a token straddles an assistant turn"
        mask.append(1 if inside else 0)
    return ids, mask


def batches(data, batch, rng):
    """Shuffled batches of similar length (less padding)."""
    idx = list(range(len(data)))
    rng.shuffle(idx)
    out = []
    chunk = batch * 16
    for c in range(0, len(idx), chunk):
        part = sorted(idx[c:c + chunk], key=lambda i: len(data[i][0]))
        out += [part[k:k + batch] for k in range(0, len(part), batch)]
    rng.shuffle(out)
    return [b for b in out if len(b) == batch]


def collate(data, b):
    T = max(len(data[i][0]) for i in b)
    ids = torch.zeros((len(b), T), dtype=torch.long)
    tgt_mask = torch.zeros((len(b), T), dtype=torch.float32)
    for r, i in enumerate(b):
        x, m = data[i]
        ids[r, :len(x)] = torch.tensor(x)
        tgt_mask[r, :len(m)] = torch.tensor(m, dtype=torch.float32)
    return ids, tgt_mask


def loss_fn(model, prefix, ids, tmask):
    h, _ = model.forward_prefix(prefix, ids, head=False)
    # position t predicts token t+1; the head runs on those with loss only
    sel = tmask[:, 1:].reshape(-1) > 0
    hs = h[:, :-1].reshape(-1, h.shape[-1])[sel]
    tg = ids[:, 1:].reshape(-1)[sel]
    return torch.nn.functional.cross_entropy(model.head(hs), tg)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--n-train", type=int, default=12000)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=40)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--dim", type=int, default=192)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=512)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--init", help="continue from this checkpoint (same vocabulary and "
                    "shape; a fresh optimiser; the corpus is drawn with --seed + 1 "
                    "and its first --n-train conversations)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    t0 = time.time()

    def log(msg):
        print("[%7.1fs] %s" % (time.time() - t0, msg), flush=True)

    log("args %s" % vars(a))
    init = torch.load(a.init) if a.init else None
    convs = corpus.generate(a.seed + (1 if init else 0), a.n_train, "train")
    if init:
        tok = Tokenizer(init["tokens"], init["scores"], init["types"])
    else:
        tok = Tokenizer.learn([corpus.render(c["messages"]) for c in convs[:3000]], a.vocab)
    tok.save(os.path.join(a.out, "tokenizer.json"))
    prefix = torch.tensor(tok.encode(SYS_TEXT))
    log("vocabulary %d tokens, system prompt %d tokens" % (len(tok.tokens), len(prefix)))
    data = [encode_conv(tok, c["messages"]) for c in convs]
    # the split encoding must be the whole text's
    for c, (x, _) in zip(convs[:50], data[:50]):
        assert tok.encode(corpus.render(c["messages"])) == prefix.tolist() + x
    ntok = sum(len(x) for x, _ in data)
    log("corpus %d conversations, %d tokens after the system prompt (%.1f per conversation, max %d)"
        % (len(data), ntok, ntok / len(data), max(len(x) for x, _ in data)))
    evals = corpus.generate(a.seed + 1000, 256, "eval")
    edata = [encode_conv(tok, c["messages"]) for c in evals]

    cfg = Config(vocab=len(tok.tokens), dim=a.dim, n_layers=a.layers, n_heads=a.heads,
                 n_kv_heads=a.kv_heads, ffn=a.ffn)
    model = Model(cfg)
    if init:
        assert init["cfg"] == cfg.to_dict(), "--init: another model shape"
        model.load_state_dict(init["state"])
        log("continuing from %s (its final loss %.4f)" % (a.init, init["final_loss"]))
    log("model %s: %d parameters" % (cfg.to_dict(), n_params(model)))
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    other = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                             {"params": other, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    rng = random.Random(a.seed)
    queue, step, seen = [], 0, 0
    ema = None
    while step < a.steps:
        if not queue:
            queue = batches(data, a.batch, rng)
        b = queue.pop()
        lr = a.lr * min(1.0, (step + 1) / a.warmup)
        if step >= a.warmup:
            p = (step - a.warmup) / max(1, a.steps - a.warmup)
            lr = a.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * p)))
        for g in opt.param_groups:
            g["lr"] = lr
        ids, tm = collate(data, b)
        loss = loss_fn(model, prefix, ids, tm)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        seen += ids.numel()
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        if step <= 5 or step % a.log_every == 0 or step == a.steps:
            log("step %5d loss %.5f ema %.4f lr %.2e gnorm %.3f tokens %d"
                % (step, loss.item(), ema, lr, gn.item(), seen))
    model.eval()
    with torch.no_grad():
        tot, cnt = 0.0, 0
        for k in range(0, len(edata), 32):
            b = list(range(k, min(k + 32, len(edata))))
            ids, tm = collate(edata, b)
            tot += loss_fn(model, prefix, ids, tm).item() * tm[:, 1:].sum().item()
            cnt += tm[:, 1:].sum().item()
    log("final train loss (ema) %.4f, held-out loss %.4f" % (ema, tot / cnt))
    torch.save({"cfg": cfg.to_dict(), "state": model.state_dict(), "tokens": tok.tokens,
                "scores": tok.scores, "types": tok.types, "args": vars(a),
                "final_loss": ema, "heldout_loss": tot / cnt,
                "train_seconds": time.time() - t0}, os.path.join(a.out, "ckpt.pt"))
    log("saved %s" % os.path.join(a.out, "ckpt.pt"))


if __name__ == "__main__":
    main()
