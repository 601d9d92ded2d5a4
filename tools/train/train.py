#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""train.py - trains the agent model from scratch on the synthetic corpus.

Owns the training recipe: corpus size (fresh conversations, each seen
once), vocabulary learning, batching, loss mask (assistant turns only:
their text and the <|im_end|> that ends them), the short-prompt
curriculum, optimiser and schedule. Everything derives from --seed: the
same seed on the same machine gives the same loss curve, step for step.

  train.py --out DIR [--seed 1] [--steps N] [--threads 2] [--init CKPT]
writes DIR/ckpt.pt (weights, config, vocabulary) and DIR/tokenizer.json;
the log (losses, tokens/s, load average, held-out checks) goes to stdout.
make model runs it three times (tools/train/model.mk), the first with
--induction-init (circuit.py). Options tried for name copying and not
used by make model (Documentation/model.md, "The induction circuit" and
"Copying drawn names"): --rope-dims, --syllables, --topdirs,
--copy-weight, --copy-what, --families, --copy-drill, --drill-share.
"""
import argparse
import math
import os
import random
import sys
import time

# OpenMP threads sleep rather than spin while they wait: on a shared,
# loaded machine spinning threads burn the CPU time the work needs.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch                       # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus                      # noqa: E402
from circuit import induction_init           # noqa: E402
from model import Config, Model, n_params   # noqa: E402
from tokenizer import SYL_SCORE, Tokenizer   # noqa: E402

SYS_TEXT = corpus.render([])
# The curriculum's first phase: a system turn without the tool block (what
# a server renders for a request without tools). With ~12 tokens before the
# question instead of 352, attention at initialisation is spread over a
# tenth as many positions, so the heads that copy a number or a name from
# the question or the tool result into the reply form many times sooner;
# the second phase moves the skill to the full system prompt.
SHORT_SYS_TEXT = corpus.IM_START + "system\nYou are a helpful assistant." + corpus.IM_END + "\n"


def encode_conv(tok, messages):
    """Token ids of a conversation after the system prompt, and per id the
    number (1, 2, ...) of the assistant turn whose content or closing
    <|im_end|> it is, 0 elsewhere: the loss is taken where it is > 0."""
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
        turn = 0
        for k, (a, b) in enumerate(spans):
            assert not (s < a < e or s < b < e), "a token straddles an assistant turn"
            if a <= s and e <= b:
                turn = k + 1
        mask.append(turn)
    return ids, mask


def batches(data, batch, rng):
    """Shuffled batches of similar length (less padding), each conversation
    in exactly one batch."""
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
    turns = torch.zeros((len(b), T), dtype=torch.long)
    for r, i in enumerate(b):
        x, m = data[i]
        ids[r, :len(x)] = torch.tensor(x)
        turns[r, :len(m)] = torch.tensor(m)
    return ids, turns


def loss_fn(model, prefix, ids, turns, exact=None, weight=None):
    """Mean cross-entropy of the assistant tokens; exact (the id of
    <tool_call>): also, under teacher forcing, the number of tool-call
    turns, how many of them the argmax gets entirely right, and how many
    conversations it gets entirely right (a proxy for greedy decoding,
    stricter: a final answer's phrasing is one of several)."""
    h, _ = model.forward_prefix(prefix, ids, head=False)
    # position t predicts token t+1; the head runs on those with loss only
    tt = turns[:, 1:]
    sel = tt.reshape(-1) > 0
    hs = h[:, :-1].reshape(-1, h.shape[-1])[sel]
    tg = ids[:, 1:].reshape(-1)[sel]
    logits = model.head(hs)
    if weight is None:
        loss = torch.nn.functional.cross_entropy(logits, tg)
    else:
        w = weight[tg]
        loss = (torch.nn.functional.cross_entropy(logits, tg, reduction="none") * w).sum() / w.sum()
    if not exact:
        return loss
    wrong = torch.zeros(tt.shape, dtype=torch.bool)
    wrong.view(-1)[sel.nonzero()[:, 0]] = logits.argmax(-1) != tg
    n_calls = ok_calls = ok_convs = 0
    for r in range(ids.shape[0]):
        conv_ok = True
        for k in range(1, int(tt[r].max()) + 1):
            at = tt[r] == k
            bad = bool(wrong[r][at].any())
            if int(ids[r, 1:][at][0]) == exact:     # a tool-call turn
                n_calls += 1
                ok_calls += not bad
            conv_ok = conv_ok and not bad
        ok_convs += conv_ok
    return loss, n_calls, ok_calls, ok_convs


def final_turns(model, prefix, cdata):
    """The last assistant turn of each conversation under teacher forcing:
    the share whose every token is the argmax, and the cross-entropy per
    character of the turn (comparable across vocabularies). On the file
    families it measures copying drawn names from the tool result."""
    model.eval()
    exact = nats = chars = 0
    with torch.no_grad():
        for k in range(0, len(cdata), 32):
            b = list(range(k, min(k + 32, len(cdata))))
            ids, tm = collate([cdata[i][:2] for i in b], range(len(b)))
            h, _ = model.forward_prefix(prefix, ids, head=False)
            tt, tg = tm[:, 1:], ids[:, 1:]
            for r in range(len(b)):
                at = tt[r] == int(tt[r].max())
                lg = model.head(h[r, :-1][at])
                nats += torch.nn.functional.cross_entropy(lg, tg[r][at], reduction="sum").item()
                exact += bool((lg.argmax(-1) == tg[r][at]).all())
                chars += cdata[b[r]][2]
    model.train()
    return exact / len(cdata), nats / chars


def evaluate(model, prefix, edata, call_id):
    model.eval()
    tot = cnt = n_turns = ok_turns = ok_convs = 0
    with torch.no_grad():
        for k in range(0, len(edata), 32):
            b = list(range(k, min(k + 32, len(edata))))
            ids, tm = collate(edata, b)
            n = (tm[:, 1:] > 0).sum().item()
            loss, nt, ot, oc = loss_fn(model, prefix, ids, tm, exact=call_id)
            tot += loss.item() * n
            cnt += n
            n_turns += nt
            ok_turns += ot
            ok_convs += oc
    model.train()
    return tot / cnt, ok_turns / max(1, n_turns), ok_convs / len(edata)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--n-train", type=int, default=0,
                    help="conversations drawn (default: steps * batch, none seen twice)")
    ap.add_argument("--steps", type=int, default=1800)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--short-steps", type=int, default=900,
                    help="first phase: this many steps after the short system turn")
    ap.add_argument("--lr", type=float, default=4e-3)
    ap.add_argument("--warmup", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--kv-heads", type=int, default=1)
    ap.add_argument("--ffn", type=int, default=384)
    ap.add_argument("--rope-dims", type=int, default=0,
                    help="rope on this many dims of each head, the rest unrotated (0: all; "
                    "llama.cpp refuses a llama model with fewer than all)")
    ap.add_argument("--induction-init", action="store_true",
                    help="start from weights with a previous-token and an induction head built "
                    "in (circuit.py; make model's first run)")
    ap.add_argument("--syllables", action="store_true",
                    help="vocabulary: the corpus's name syllables as tokens (tokenizer.py)")
    ap.add_argument("--copy-weight", type=float, default=1.0,
                    help="loss weight of digit and syllable tokens (what a reply copies)")
    ap.add_argument("--copy-what", choices=("digits,syllables", "syllables"), default="digits,syllables",
                    help="the tokens --copy-weight weights: digits and every token scored from "
                    "SYL_SCORE up (the syllables, and the chat markers with their chains: "
                    "run B), or the syllable tokens only")
    ap.add_argument("--topdirs", action="store_true",
                    help="with --syllables: each top directory (/home, /var/lib) one token")
    ap.add_argument("--families", help="train (and check) on these corpus families only (proxy runs), "
                    "e.g. read_file,list_dir,find_read")
    ap.add_argument("--copy-drill", type=int, default=0,
                    help="the first STEPS steps mix in batches of the copy drill (corpus.drill): "
                    "a share --drill-share at step 0, falling linearly to 0 at STEPS; each "
                    "replaces a corpus batch")
    ap.add_argument("--drill-share", type=float, default=0.5,
                    help="the share of drill batches at step 0 (with --copy-drill)")
    ap.add_argument("--drill-only", type=int, default=0,
                    help="with --copy-drill: the first STEPS steps are all drill batches, the "
                    "share falls from --drill-share after them")
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--eval-every", type=int, default=150)
    ap.add_argument("--n-eval", type=int, default=96)
    ap.add_argument("--save-every-eval", action="store_true",
                    help="also write OUT/ckpt-step.pt at each held-out evaluation")
    ap.add_argument("--init", help="continue from this checkpoint (same vocabulary and "
                    "shape; a fresh optimiser; the corpus is drawn with --seed + 1)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    t0, c0 = time.time(), time.process_time()

    def log(msg):
        print("[%7.1fs] %s" % (time.time() - t0, msg), flush=True)

    log("args %s" % vars(a))
    log("torch %s, %d threads, OMP_WAIT_POLICY=%s, BLAS: %s; load average %.1f %.1f %.1f"
        % (torch.__version__, torch.get_num_threads(), os.environ.get("OMP_WAIT_POLICY"),
           blas_lib(), *os.getloadavg()))
    init = torch.load(a.init) if a.init else None
    n_train = a.n_train or a.steps * a.batch
    if a.families:
        keep = a.families.split(",")
        corpus.Gen.FAMILIES = [(f, w) for f, w in corpus.Gen.FAMILIES if f in keep]
    convs = corpus.generate(a.seed + (1 if init else 0), n_train, "train")
    if init:
        tok = Tokenizer(init["tokens"], init["scores"], init["types"])
    else:
        tok = Tokenizer.learn([corpus.render(c["messages"]) for c in convs[:3000]], a.vocab,
                              syllables=a.syllables, topdirs=a.topdirs)
    tok.save(os.path.join(a.out, "tokenizer.json"))
    prefix = torch.tensor(tok.encode(SYS_TEXT))
    short = torch.tensor(tok.encode(SHORT_SYS_TEXT))
    log("vocabulary %d tokens, system prompt %d tokens (first %d steps: %d)"
        % (len(tok.tokens), len(prefix), a.short_steps, len(short)))
    data = [encode_conv(tok, c["messages"]) for c in convs]
    del convs
    # the split encoding must be the whole text's
    for c, (x, _) in zip(corpus.generate(a.seed + (1 if init else 0), 50, "train"), data):
        assert tok.encode(corpus.render(c["messages"])) == prefix.tolist() + x
    ntok = sum(len(x) for x, _ in data)
    nloss = sum(sum(1 for t in m if t) for _, m in data)
    log("corpus %d conversations, %d tokens after the system prompt (%.1f per conversation, "
        "max %d; %.0f%% of them in assistant turns)"
        % (len(data), ntok, ntok / len(data), max(len(x) for x, _ in data), 100 * nloss / ntok))
    evals = corpus.generate(a.seed + 1000, a.n_eval, "eval")
    edata = [encode_conv(tok, c["messages"]) for c in evals]
    # the copy check: the final answers of held-out file conversations
    cconvs = [c for c in corpus.generate(a.seed + 2000, 6 * a.n_eval, "eval")
              if c["family"] in ("read_file", "list_dir", "find_read")][:a.n_eval]
    cdata = [encode_conv(tok, c["messages"]) + (len(c["messages"][-1][1]) + 1,) for c in cconvs]
    # the copy drill: which steps take a drill batch (spread evenly, no
    # random draw: the corpus batches' order is the same as without it)
    drill_steps, acc = set(), 0.0
    for st in range(a.copy_drill):
        if st < a.drill_only:
            drill_steps.add(st)
            continue
        acc += a.drill_share * (1 - (st - a.drill_only) / (a.copy_drill - a.drill_only))
        if acc >= 1.0:
            acc -= 1.0
            drill_steps.add(st)
    if drill_steps:
        ddata = [encode_conv(tok, c["messages"])
                 for c in corpus.drill(a.seed, (len(drill_steps) + 20) * a.batch, "train")]
        dqueue = batches(ddata, a.batch, random.Random("drill-%d" % a.seed))
        assert len(dqueue) >= len(drill_steps)
        dtok = sum(len(x) for x, _ in ddata)
        log("copy drill: %d of the first %d steps (the first %d all, then a share %.2f falling "
            "to 0), %d conversations, %d tokens (%.1f per conversation)"
            % (len(drill_steps), a.copy_drill, a.drill_only, a.drill_share, len(ddata), dtok,
               dtok / len(ddata)))
        # its check: held-out drill answers (names never trained on)
        dconvs = corpus.drill(a.seed + 2000, a.n_eval, "eval")
        ddcheck = [encode_conv(tok, c["messages"]) + (len(c["messages"][-1][1]) + 1,)
                   for c in dconvs]
    weight = None
    if a.copy_weight != 1.0:
        weight = torch.ones(len(tok.tokens))
        for i, t in enumerate(tok.tokens):
            if a.copy_what == "syllables":
                on = SYL_SCORE <= tok.scores[i] < SYL_SCORE + 100
            else:
                on = (t.isdigit() and len(t) == 1) or tok.scores[i] >= SYL_SCORE
            if on:
                weight[i] = a.copy_weight
        log("loss weight %.1f on %d tokens (%s)" % (a.copy_weight, int((weight != 1).sum()),
                                                    a.copy_what))

    cfg = Config(vocab=len(tok.tokens), dim=a.dim, n_layers=a.layers, n_heads=a.heads,
                 n_kv_heads=a.kv_heads, ffn=a.ffn, rope_dims=a.rope_dims)
    if init:    # the checkpoint's shape, whatever the shape arguments say
        cfg = Config(**{k: v for k, v in init["cfg"].items() if k != "head_dim"})
    model = Model(cfg)
    if init:
        assert init["cfg"] == cfg.to_dict(), "--init: another model shape"
        model.load_state_dict(init["state"])
        log("continuing from %s (its final loss %.4f)" % (a.init, init["final_loss"]))
    elif a.induction_init:
        induction_init(model, torch.Generator().manual_seed(a.seed))
        log("induction circuit built in (layer 0 head 0: previous token; layer 1 head 0: "
            "induction)")
    log("model %s: %d parameters" % (cfg.to_dict(), n_params(model)))
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    other = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                             {"params": other, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    rng = random.Random(a.seed)
    queue, step, seen = [], 0, 0
    ema = None
    t1, c1 = time.time(), time.process_time()
    log("training starts (setup %.0f s)" % (t1 - t0))
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
        if step in drill_steps:
            queue.append(b)     # the corpus batch waits for the next step
            ids, tm = collate(ddata, dqueue.pop())
        else:
            ids, tm = collate(data, b)
        loss = loss_fn(model, short if step < a.short_steps else prefix, ids, tm, weight=weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        seen += ids.numel()
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        if step <= 3 or step % a.log_every == 0 or step == a.steps:
            dt, dc = time.time() - t1, time.process_time() - c1
            log("step %5d loss %.5f ema %.4f lr %.2e gnorm %.3f tokens %d (%.0f tok/s, "
                "%.0f per CPU s; load %.1f)" % (step, loss.item(), ema, lr, gn.item(), seen,
                                                 seen / dt, seen / dc, os.getloadavg()[0]))
        if step % a.eval_every == 0 or step == a.steps:
            for name, p in (("short system turn", short), ("system prompt", prefix)):
                if name == "system prompt" or step <= a.short_steps:
                    el, et, ec = evaluate(model, p, edata, tok.ids["<tool_call>"])
                    log("held-out (%d conversations, %s, teacher forced): loss %.4f, tool "
                        "calls exact %.1f%%, conversations exact %.1f%%"
                        % (len(edata), name, el, 100 * et, 100 * ec))
                    fx, fn = final_turns(model, p, cdata)
                    log("held-out copy (%d file conversations' final answers, %s, teacher "
                        "forced): exact %.1f%%, %.4f nats per character"
                        % (len(cdata), name, 100 * fx, fn))
                    if drill_steps:
                        fx, fn = final_turns(model, p, ddcheck)
                        log("held-out drill (%d drill answers, %s, teacher forced): exact "
                            "%.1f%%, %.4f nats per character" % (len(ddcheck), name, 100 * fx, fn))
            if a.save_every_eval:
                save(model, cfg, tok, a, ema, el, t0, os.path.join(a.out, "ckpt-step.pt"))
    dt, dc = time.time() - t1, time.process_time() - c1
    log("trained %d steps, %d tokens in %.0f s wall (%.0f tok/s), %.0f s CPU (%.0f tok per CPU s); "
        "load average %.1f %.1f %.1f" % (step, seen, dt, seen / dt, dc, seen / dc,
                                          *os.getloadavg()))
    log("final train loss (ema) %.4f, held-out loss %.4f" % (ema, el))
    save(model, cfg, tok, a, ema, el, t0, os.path.join(a.out, "ckpt.pt"))
    log("saved %s" % os.path.join(a.out, "ckpt.pt"))


def save(model, cfg, tok, a, ema, el, t0, path):
    torch.save({"cfg": cfg.to_dict(), "state": model.state_dict(), "tokens": tok.tokens,
                "scores": tok.scores, "types": tok.types, "args": vars(a),
                "final_loss": ema, "heldout_loss": el,
                "train_seconds": time.time() - t0}, path)


def blas_lib():
    """Which BLAS library this process mapped (OpenBLAS: ~25x the
    reference BLAS on this machine)."""
    try:
        with open("/proc/self/maps") as f:
            libs = {line.split()[-1] for line in f if "blas" in line.lower()}
        return ", ".join(sorted(libs)) or "none mapped"
    except OSError:
        return "unknown"


if __name__ == "__main__":
    main()
