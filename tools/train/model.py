# SPDX-License-Identifier: MIT
"""model.py - the agent model in PyTorch: llama architecture (RMSNorm,
rotary position embedding on interleaved pairs as GGUF's "llama" expects,
SwiGLU feed-forward, grouped-query attention, output head tied to the token
embedding).

Owns the module and two forward passes: forward() over whole sequences (the
cross-check's reference) and forward_prefix() for training, where every
conversation starts with the same system prompt: its hidden states are
computed once per batch and its keys/values shared by all rows.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Config:
    def __init__(self, vocab=1024, dim=256, n_layers=6, n_heads=8, n_kv_heads=2,
                 ffn=768, ctx=1024, rope_base=10000.0, eps=1e-5, rope_dims=0):
        self.vocab, self.dim, self.n_layers = vocab, dim, n_layers
        self.n_heads, self.n_kv_heads, self.ffn, self.ctx = n_heads, n_kv_heads, ffn, ctx
        self.rope_base, self.eps = rope_base, eps
        self.head_dim = dim // n_heads
        # rope on the first rope_dims of each head (GGUF rope.dimension_count),
        # the rest unrotated; 0: the whole head
        self.rope_dims = rope_dims or self.head_dim

    def to_dict(self):
        return dict(self.__dict__)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(cfg, n, dtype=torch.float32):
    rd = cfg.rope_dims
    inv = cfg.rope_base ** (-torch.arange(0, rd, 2, dtype=torch.float64) / rd)
    ang = torch.arange(n, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cos(ang).to(dtype), torch.sin(ang).to(dtype)


def rope(x, cos, sin):
    """x: (B, H, T, hd); pairs (2i, 2i+1) of the first rope dims (twice
    cos's width) rotate by angle pos * inv_freq[i], the rest pass."""
    rd = 2 * cos.shape[-1]
    xr = x[..., :rd]
    x0, x1 = xr[..., 0::2], xr[..., 1::2]
    r0 = x0 * cos - x1 * sin
    r1 = x0 * sin + x1 * cos
    r = torch.stack((r0, r1), dim=-1).flatten(-2)
    return r if rd == x.shape[-1] else torch.cat((r, x[..., rd:]), dim=-1)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, hd = cfg.dim, cfg.head_dim
        self.cfg = cfg
        self.attn_norm = RMSNorm(d, cfg.eps)
        self.wq = nn.Linear(d, cfg.n_heads * hd, bias=False)
        self.wk = nn.Linear(d, cfg.n_kv_heads * hd, bias=False)
        self.wv = nn.Linear(d, cfg.n_kv_heads * hd, bias=False)
        self.wo = nn.Linear(cfg.n_heads * hd, d, bias=False)
        self.ffn_norm = RMSNorm(d, cfg.eps)
        self.gate = nn.Linear(d, cfg.ffn, bias=False)
        self.up = nn.Linear(d, cfg.ffn, bias=False)
        self.down = nn.Linear(cfg.ffn, d, bias=False)

    def qkv(self, x, cos, sin):
        c = self.cfg
        B, T, _ = x.shape
        h = self.attn_norm(x)
        q = self.wq(h).view(B, T, c.n_heads, c.head_dim).transpose(1, 2)
        k = self.wk(h).view(B, T, c.n_kv_heads, c.head_dim).transpose(1, 2)
        v = self.wv(h).view(B, T, c.n_kv_heads, c.head_dim).transpose(1, 2)
        return rope(q, cos, sin), rope(k, cos, sin), v

    def attend(self, x, q, k, v, mask):
        c = self.cfg
        B, _, T, _ = q.shape
        rep = c.n_heads // c.n_kv_heads
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(c.head_dim) + mask
        o = (F.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, -1)
        return self.ffn(x + self.wo(o))

    def ffn(self, x):
        h = self.ffn_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def causal_mask(T, prefix=0, dtype=torch.float32):
    m = torch.full((T, prefix + T), float("-inf"), dtype=dtype)
    return torch.triu(m, diagonal=prefix + 1)


class Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.eps)
        nn.init.normal_(self.embed.weight, std=0.02)
        for b in self.layers:
            for lin in (b.wq, b.wk, b.wv, b.gate, b.up):
                nn.init.normal_(lin.weight, std=0.02)
            for lin in (b.wo, b.down):
                nn.init.normal_(lin.weight, std=0.02 / math.sqrt(2 * cfg.n_layers))

    def head(self, x):
        return self.norm(x) @ self.embed.weight.t()

    def forward(self, ids):
        """ids (B, T) from position 0 -> logits (B, T, vocab)."""
        T = ids.shape[1]
        cos, sin = rope_tables(self.cfg, T, self.embed.weight.dtype)
        mask = causal_mask(T, dtype=self.embed.weight.dtype)
        x = self.embed(ids)
        for b in self.layers:
            q, k, v = b.qkv(x, cos, sin)
            x = b.attend(x, q, k, v, mask)
        return self.head(x)

    def forward_prefix(self, prefix, ids, head=True):
        """prefix (P,) shared by every row, ids (B, T) following it ->
        logits (B, T, vocab) of the ids' positions, and (vocab,) of the last
        prefix position; head=False: the final hidden states instead.

        The same function as forward() on each row prefix + ids[b], laid out
        for speed on a CPU: the prefix is computed once, and the rows'
        queries meet the prefix keys in one large matrix product per KV head
        (not B*H small ones, which BLAS runs several times slower)."""
        c = self.cfg
        P, (B, T) = prefix.shape[0], ids.shape
        G, R, hd = c.n_kv_heads, c.n_heads // c.n_kv_heads, c.head_dim
        cos, sin = rope_tables(c, P + T)
        xp = self.embed(prefix)[None]
        xs = self.embed(ids)
        mp, ms = causal_mask(P), causal_mask(T)
        scale = 1.0 / math.sqrt(hd)
        for b in self.layers:
            qp, kp, vp = b.qkv(xp, cos[:P], sin[:P])
            qs, ks, vs = b.qkv(xs, cos[P:], sin[P:])
            # queries grouped by KV head: (B, G, R*T, hd)
            q = qs.reshape(B, G, R * T, hd) * scale
            kp0, vp0 = kp[0], vp[0]                      # (G, P, hd)
            # rows -> prefix: (G, B*R*T, hd) @ (G, hd, P)
            qg = q.transpose(0, 1).reshape(G, B * R * T, hd)
            sp = torch.bmm(qg, kp0.transpose(1, 2)).view(G, B, R * T, P).transpose(0, 1)
            ss = q @ ks.transpose(-1, -2)                # (B, G, R*T, T)
            ss = ss.view(B, G, R, T, T) + ms
            s = torch.cat((sp.reshape(B, G, R, T, P), ss), dim=-1)
            a = F.softmax(s, dim=-1)
            ap, as_ = a[..., :P], a[..., P:]
            op = torch.bmm(ap.transpose(0, 1).reshape(G, B * R * T, P), vp0)
            op = op.view(G, B, R, T, hd).transpose(0, 1)
            os_ = as_ @ vs[:, :, None]                   # (B, G, R, T, hd)
            o = (op + os_).reshape(B, c.n_heads, T, hd).transpose(1, 2).reshape(B, T, -1)
            xs = b.ffn(xs + b.wo(o))
            xp = b.attend(xp, qp, kp, vp, mp)
        if not head:
            return xs, xp[0, -1]
        return self.head(xs), self.head(xp[0, -1])


def n_params(model):
    return sum(p.numel() for p in model.parameters())
