#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Independent numpy reference for kvarena's CPU engine.

Reads a GGUF file with its own parser (nothing shared with the C code),
runs the llama forward pass (qwen2: with Q/K/V biases and NEOX rope;
qwen3: NEOX rope and per-head Q/K RMS norms; llama 3's rope_freqs and
linear rope scaling where the file has them) in float64 and compares
per-position logits
with what the engine's kve-logits tool wrote; also re-implements both
tokenizers (SentencePiece-style and GPT-2 byte-level BPE) and compares
token ids with the engine's, and the BPE pre-tokenizers' word splits
(applied with the third-party `regex` module, Debian's python3-regex).

  ref.py logits MODEL KVE_LOGITS --bound B [--kv f16] [--prefill K] [--threads N]
                [--block N] [--controls]
  ref.py tokens MODEL KVE_LOGITS
  ref.py pretok KVE_LOGITS
Prints one line per check: 'ok   ...' or 'FAIL ...'; exit status 1 on failure.
"""
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

try:
    import regex
except ImportError:     # reported by the modes that need it
    regex = None

GGML_F32, GGML_F16, GGML_Q8_0 = 0, 1, 8


class Gguf:
    def __init__(self, path):
        with open(path, "rb") as f:
            self.buf = f.read()
        self.off = 0
        assert self.buf[:4] == b"GGUF"
        self.off = 4
        version, = self.rd("<I")
        assert version in (2, 3)
        n_t, n_kv = self.rd("<QQ")
        self.kv = {}
        for _ in range(n_kv):
            k = self.rd_str().decode()
            t, = self.rd("<I")
            self.kv[k] = self.rd_val(t)
        align = self.kv.get("general.alignment", 32)
        self.tensors = {}
        self.types = {}
        infos = []
        for _ in range(n_t):
            name = self.rd_str().decode()
            nd, = self.rd("<I")
            ne = list(self.rd("<" + "Q" * nd))
            t, = self.rd("<I")
            o, = self.rd("<Q")
            infos.append((name, ne, t, o))
        base = (self.off + align - 1) // align * align
        for name, ne, t, o in infos:
            self.tensors[name] = self.load(base + o, ne, t)
            self.types[name] = t

    def rd(self, fmt):
        v = struct.unpack_from(fmt, self.buf, self.off)
        self.off += struct.calcsize(fmt)
        return v

    def rd_str(self):
        n, = self.rd("<Q")
        s = self.buf[self.off:self.off + n]
        self.off += n
        return s

    SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f",
              7: "<?", 10: "<Q", 11: "<q", 12: "<d"}

    def rd_val(self, t):
        if t in self.SCALAR:
            return self.rd(self.SCALAR[t])[0]
        if t == 8:
            return self.rd_str()
        if t == 9:
            et, n = self.rd("<IQ")
            if et == 8:
                return [self.rd_str() for _ in range(n)]
            fmt = self.SCALAR[et]
            size = struct.calcsize(fmt)
            arr = np.frombuffer(self.buf, dtype=np.dtype(fmt), count=n, offset=self.off)
            self.off += n * size
            return arr
        raise ValueError("type %d" % t)

    def load(self, off, ne, t):
        n = int(np.prod(ne))
        if t == GGML_F32:
            a = np.frombuffer(self.buf, np.float32, n, off).astype(np.float64)
        elif t == GGML_F16:
            a = np.frombuffer(self.buf, np.float16, n, off).astype(np.float64)
        elif t == GGML_Q8_0:
            raw = np.frombuffer(self.buf, np.uint8, n // 32 * 34, off).reshape(-1, 34)
            d = raw[:, :2].copy().view(np.float16).astype(np.float64)
            q = raw[:, 2:].copy().view(np.int8).astype(np.float64)
            a = (q * d).reshape(-1)
        else:
            raise ValueError("tensor type %d" % t)
        return a.reshape(list(reversed(ne)))


def quant_act(x):
    """Activations as the engine (and llama.cpp's CPU backend) feeds Q8_0
    matrices: per 32 values, q = round-half-even(x * 127/amax) and
    d = amax/127 rounded to fp16, computed in float32."""
    x32 = x.astype(np.float32).reshape(*x.shape[:-1], -1, 32)
    amax = np.abs(x32).max(axis=-1, keepdims=True)
    d = (amax / np.float32(127)).astype(np.float16).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(amax > 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    q = np.clip(np.rint(x32 * inv), -127, 127)
    return (q.astype(np.float64) * d.astype(np.float64)).reshape(x.shape)


def hadamard(n):
    """the orthonormal Walsh-Hadamard matrix, Sylvester's order"""
    h = np.ones((1, 1))
    while len(h) < n:
        h = np.block([[h, h], [h, -h]])
    return h / np.sqrt(n)


def rotate(x, n):
    """each piece of n values of the last axis times hadamard(n); n 0:
    unchanged"""
    if not n:
        return x
    sh = x.shape
    return (x.reshape(*sh[:-1], -1, n) @ hadamard(n)).reshape(sh)


# general.architecture -> rope style; all read "<arch>.*" keys and add
# blk.N.attn_{q,k,v}.bias when the file has them (qwen3 has none); qwen3
# RMS-normalises each head of Q and K before rope (attn_q_norm/attn_k_norm)
NEOX_ARCHS = {"qwen2", "qwen3"}


def forward(g, tokens, kv_f16=False, q8_act=False, neox=None, biases=True,
            rope_dims=None, qk_norm=True, rope_scale=True):
    """neox / biases / rope_dims / qk_norm / rope_scale override the file's
    rope style, bias use, rotated dims, per-head norms and linear rope
    scaling (the negative controls of --controls)."""
    kv = g.kv
    arch = kv["general.architecture"].decode()
    dim = kv[arch + ".embedding_length"]
    nl = kv[arch + ".block_count"]
    nh = kv[arch + ".attention.head_count"]
    nkv = kv.get(arch + ".attention.head_count_kv", nh)
    hd = kv.get(arch + ".attention.key_length", dim // nh)
    rd = kv.get(arch + ".rope.dimension_count", hd) if rope_dims is None else rope_dims
    base = kv.get(arch + ".rope.freq_base", 10000.0)
    eps = kv.get(arch + ".attention.layer_norm_rms_epsilon", 1e-5)
    # linear rope scaling: positions over the factor
    factor = (kv.get(arch + ".rope.scaling.factor", 0.0) if rope_scale else 0) or 1.0
    scale = kv.get(arch + ".attention.scale", 0.0) or 1 / np.sqrt(hd)
    if neox is None:
        neox = arch in NEOX_ARCHS
    T = g.tensors
    n = len(tokens)

    def rms(x, w):
        return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * w

    pos = np.arange(n, dtype=np.float64) / factor
    inv = base ** (-2.0 * np.arange(rd // 2) / rd)
    if "rope_freqs.weight" in T:    # llama 3.1+: a divisor per pair
        inv = inv / T["rope_freqs.weight"]
    ang = pos[:, None] * inv[None, :]
    cos, sin = np.cos(ang), np.sin(ang)

    def rope(v, heads):
        # pair i is (2i, 2i+1), or (i, i + rd/2) for NEOX (the halves)
        v = v.reshape(n, heads, hd).copy()
        ia = np.arange(rd // 2) if neox else np.arange(0, rd, 2)
        ib = ia + rd // 2 if neox else ia + 1
        a = v[:, :, ia].copy()
        b = v[:, :, ib].copy()
        c, s = cos[:, None, :], sin[:, None, :]
        v[:, :, ia] = a * c - b * s
        v[:, :, ib] = a * s + b * c
        return v

    def proj(x, p, w):
        y = mm(x, p + w + ".weight")
        if biases and p + w + ".bias" in T:
            y = y + T[p + w + ".bias"]
        return y

    def mm(x, name):
        if q8_act and g.types[name] == GGML_Q8_0:
            x = quant_act(x)
        return x @ T[name].T

    def head_norm(v, heads, name):
        v = v.reshape(n, heads, hd)
        if qk_norm and name in T:
            v = rms(v, T[name])
        return v

    x = T["token_embd.weight"][tokens]
    mask = np.triu(np.full((n, n), -np.inf), 1)
    for l in range(nl):
        p = "blk.%d." % l
        xn = rms(x, T[p + "attn_norm.weight"])
        q = rope(head_norm(proj(xn, p, "attn_q"), nh, p + "attn_q_norm.weight"), nh)
        k = rope(head_norm(proj(xn, p, "attn_k"), nkv, p + "attn_k_norm.weight"), nkv)
        v = proj(xn, p, "attn_v").reshape(n, nkv, hd)
        if kv_f16 == "q8_0":
            # an 8-bit KV: each head of Q and K rotated by the Hadamard
            # matrix of the largest power of two from 64 dividing it, V's
            # by that of 64 (none for heads not a multiple of 64), then K
            # and V rows as Q8_0 blocks (32 values of one head), and the
            # queries too for the scores, as the engine (and llama.cpp's
            # quantised cache) do; the output rotated back below
            rk = rv = 0
            if hd % 64 == 0:
                rk, rv = 64, 64
                while hd % (2 * rk) == 0:
                    rk *= 2
            q, k, v = rotate(q, rk), rotate(k, rk), rotate(v, rv)
            k = np.stack([quant_act(k[:, i, :]) for i in range(nkv)], axis=1)
            v = np.stack([quant_act(v[:, i, :]) for i in range(nkv)], axis=1)
            q = np.stack([quant_act(q[:, i, :]) for i in range(nh)], axis=1)
        elif kv_f16:
            k = k.astype(np.float16).astype(np.float64)
            v = v.astype(np.float16).astype(np.float64)
        out = np.zeros((n, nh, hd))
        for h in range(nh):
            g_ = h // (nh // nkv)
            s = q[:, h, :] @ k[:, g_, :].T * scale + mask
            s = np.exp(s - s.max(axis=1, keepdims=True))
            s /= s.sum(axis=1, keepdims=True)
            out[:, h, :] = s @ v[:, g_, :]
        if kv_f16 == "q8_0":
            out = rotate(out, rv)
        x = x + mm(out.reshape(n, nh * hd), p + "attn_output.weight")
        xn = rms(x, T[p + "ffn_norm.weight"])
        gt = mm(xn, p + "ffn_gate.weight")
        up = mm(xn, p + "ffn_up.weight")
        x = x + mm(gt / (1 + np.exp(-gt)) * up, p + "ffn_down.weight")
    head = "output.weight" if "output.weight" in T else "token_embd.weight"
    return mm(rms(x, T["output_norm.weight"]), head)


# ---- tokenizers -------------------------------------------------------

def utf8_chars(b):
    out, i = [], 0
    while i < len(b):
        c = b[i]
        ln = 1 if c < 0x80 else 2 if c & 0xE0 == 0xC0 else 3 if c & 0xF0 == 0xE0 \
            else 4 if c & 0xF8 == 0xF0 else 1
        if i + ln > len(b) or any(x & 0xC0 != 0x80 for x in b[i + 1:i + ln]):
            ln = 1
        out.append(b[i:i + ln])
        i += ln
    return out


def spm_encode(g, text):
    toks = g.kv["tokenizer.ggml.tokens"]
    scores = g.kv["tokenizer.ggml.scores"]
    ids = {}
    for i, t in enumerate(toks):
        ids.setdefault(t, i)
    if not text:        # no dummy prefix for empty text
        return []
    w = b"\xe2\x96\x81" + text.replace(b" ", b"\xe2\x96\x81")
    syms = utf8_chars(w)
    while True:
        best, bi = None, -1
        for i in range(len(syms) - 1):
            t = ids.get(syms[i] + syms[i + 1])
            if t is not None and (best is None or scores[t] > best):
                best, bi = scores[t], i
        if bi < 0:
            break
        syms[bi:bi + 2] = [syms[bi] + syms[bi + 1]]
    out = []
    for s in syms:
        if s in ids:
            out.append(ids[s])
        else:
            out.extend(ids[b"<0x%02X>" % c] for c in s)
    return out


def gpt2_bytes():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c).encode() for b, c in zip(bs, cs)}


# tokenizer.ggml.pre -> the HF tokenizers' pre-tokenizer pattern
_CONTR_CI = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
PRE_PATTERNS = {
    "gpt2": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    "llama-bpe": _CONTR_CI + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen2": _CONTR_CI + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
             r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}
PRE_PATTERNS["tekken"] = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
PRE_PATTERNS["default"] = PRE_PATTERNS["gpt2"]


def pretok_split(name, text):
    """Words of text (bytes) under pre-tokenizer name. Bytes that are not
    well-formed UTF-8 match as U+FFFD (one each) but keep their value in
    the words; text between matches is a word of its own."""
    s = text.decode("utf-8", "surrogateescape")
    clean = "".join("\ufffd" if 0xDC80 <= ord(c) <= 0xDCFF else c for c in s)
    words, at = [], 0
    for m in regex.finditer(PRE_PATTERNS[name], clean):
        if m.start() == m.end():
            continue
        if m.start() > at:
            words.append(s[at:m.start()])
        words.append(s[m.start():m.end()])
        at = m.end()
    if at < len(s):
        words.append(s[at:])
    return [w.encode("utf-8", "surrogateescape") for w in words]


def bpe_encode(g, text):
    toks = g.kv["tokenizer.ggml.tokens"]
    ids = {}
    for i, t in enumerate(toks):
        ids.setdefault(t, i)
    ranks = {}
    for r, m in enumerate(g.kv["tokenizer.ggml.merges"]):
        a, b = m.split(b" ", 1)
        ranks.setdefault((a, b), r)
    bmap = gpt2_bytes()
    pre = g.kv.get("tokenizer.ggml.pre", b"gpt2").decode()
    out = []
    for word in pretok_split(pre, text):
        syms = [bmap[c] for c in word]
        while len(syms) > 1:
            pairs = [(ranks.get((syms[i], syms[i + 1]), 1 << 60), i)
                     for i in range(len(syms) - 1)]
            r, _ = min(pairs)
            if r == 1 << 60:
                break
            a, b = [p for p in ranks if ranks[p] == r][0]
            new, i = [], 0
            while i < len(syms):     # merge every occurrence, left to right
                if i + 1 < len(syms) and syms[i] == a and syms[i + 1] == b:
                    new.append(a + b)
                    i += 2
                else:
                    new.append(syms[i])
                    i += 1
            syms = new
        out.extend(ids[s] for s in syms)
    return out


TEXTS = [b"Hello, world!", b"the blocks of a session", b"  two  spaces  ",
         b"it's they've we'll I'd", b"12 blocks, 345 tokens", b"tabs\tand\nnewlines\n\n",
         "Caf\u00e9 na\u00efve \u00fcber Stra\u00dfe".encode(),
         "\u65e5\u672c\u8a9e \U0001F600 emoji".encode(), b"\xff\xfe invalid utf8 \xc3",
         b"tokenization of the memory layers", b"a", b"", b"!!!???", b"x" * 40,
         b"The decode worker reads them in place, without a copy.",
         # repeated pairs: equal-rank merges must apply leftmost first
         b"lll aaaa Hellllo eee sss ttttt", b"llll", b"ooo",
         # long words: many merge candidates at once (SPM's heap order)
         b"thethethethethethe sessionsessionsession blocksofblocksofblocks",
         b"abababababababababab tokenizationofthememorylayers inplacewithoutacopy",
         b"the decode worker reads the blocks of a session in place, without a copy; " * 3]


# Strings where the three pre-tokenizers differ, or Unicode classes matter
PRE_TEXTS = [
    b"it's IT'S I'm I'M we'll WE'LL they've THEY'VE I'd YOU'RE don't",
    b"1234567", b"12345 and 3.14159 or 2,000,000; a1b22c333d4444",
    "h\u00e9llo w\u00f6rld \u65e5\u672c\u8a9e \u03a9mega".encode(),
    "\U0001F44D\U0001F3FD family \U0001F468\u200d\U0001F469\u200d\U0001F467 ok!".encode(),
    b"\n\n  x", b"tabs\tand\ttext\t", b"trailing spaces   ", b"   leading", b"...!!?\n",
    b"a\r\nb\r\n\r\nc\n", b"x  \n  y", b"(x)=>{ return 'q'; }\n\n",
    "\u0663\u0664\u0665 \u0661\u0662\u0663\u0664 \u00bd\u2167".encode(),
    "non\u00a0breaking\u3000ideographic\u2028line \x85nel".encode(),
    "em\u2014dash \u00abquotes\u00bb \u00bfqu\u00e9? e\u0301 n\u0303o".encode(),
    b"'s at start ''quoted'' x' 'LL", b" ", b"", b"a",
    b"\xff\xfe bad \xc3 x", b"caf\xe9 \xed\xa0\x80 \xc0\xaf \xf4\x90\x80\x80",
    b"ab\xe6\x97 cd \xf0\x9f\x98", b" \xff\xffabc 12\xff34",
] + [
    # each lead byte's first and last well-formed character and the
    # ill-formed ones just past them, between letters and last in the
    # text: a character joins the letters around it as one word (where it
    # is one), an ill-formed byte splits off
    t for c in (
        b"\xc2\x80", b"\xdf\xbf", b"\xc1\xbf", b"\xe0\xa0\x80", b"\xe0\x9f\xbf",
        b"\xe1\x80\x80", b"\xec\xbf\xbf", b"\xed\x9f\xbf", b"\xed\xa0\x80",
        b"\xee\x80\x80", b"\xef\xbf\xbf", b"\xf0\x90\x80\x80", b"\xf0\x8f\xbf\xbf",
        b"\xf1\x80\x80\x80", b"\xf3\xbf\xbf\xbf", b"\xf4\x8f\xbf\xbf", b"\xf4\x90\x80\x80",
        b"\xf5\x80\x80\x80", b"\xe1\x80", b"\xe1\x80\xc0", b"\xf1\x80\x80", b"\xc2",
        "\u00e9".encode(), "\u4e2d".encode(), "\U00020000".encode())
    for t in (b"x" + c + b"y", b"x" + c)]


def compare_lines(texts, got, want_of, what, ref_name):
    """One ok/FAIL line per text: the engine's line i against want_of(text);
    what has a %r for the text. Returns the number of failures."""
    fails = 0
    for i, t in enumerate(texts):
        want = want_of(t)
        ok = i < len(got) and got[i] == want
        fails += not ok
        print("%s %s%s" % ("ok  " if ok else "FAIL", what % (t[:30],),
                           "" if ok else " (engine %s, %s %s)" % (
                               got[i] if i < len(got) else None, ref_name, want)))
    return fails


def check_pretok(tool):
    if regex is None:
        print("FAIL pretok: python3 cannot import regex (apt-get install python3-regex)")
        return 1
    with tempfile.NamedTemporaryFile("w", suffix=".hex", delete=False) as f:
        for t in PRE_TEXTS:
            f.write(t.hex() + "\n")
        name = f.name
    fails = 0
    for pre in ("gpt2", "default", "llama-bpe", "qwen2", "tekken"):
        res = subprocess.run([tool, "--pretok", pre, name], capture_output=True, text=True)
        got = [[bytes.fromhex(w) for w in l.split()] for l in res.stdout.splitlines()]
        if res.returncode:
            print("FAIL pretok %s: %s" % (pre, res.stderr.strip()))
            fails += 1
            continue
        fails += compare_lines(PRE_TEXTS, got, lambda t: pretok_split(pre, t),
                               "%s pre-tokenizer splits %%r as python regex does" % pre, "regex")
    os.unlink(name)
    return 1 if fails else 0


def kind_needs_regex(g):
    return g.kv["tokenizer.ggml.model"] == b"gpt2"


def main():
    mode = sys.argv[1]
    if mode == "pretok":
        return check_pretok(sys.argv[2])
    model, tool = sys.argv[2], sys.argv[3]
    args = sys.argv[4:]
    g = Gguf(model)
    fails = 0
    if mode == "tokens":
        if kind_needs_regex(g) and regex is None:
            print("FAIL tokens: python3 cannot import regex (apt-get install python3-regex)")
            return 1
        kind = g.kv["tokenizer.ggml.model"]
        enc = spm_encode if kind == b"llama" else bpe_encode
        label = kind.decode()
        if kind == b"gpt2":
            label += " (pre %s)" % g.kv.get("tokenizer.ggml.pre", b"gpt2").decode()
        # and 80 random strings of common letters and spaces (fixed seed):
        # long runs with many merge candidates at once, where a wrong merge
        # order (or SPM's candidate heap) would show
        rnd = np.random.default_rng(18)
        letters = np.frombuffer(b"etaoinshrdlucmw  ", dtype=np.uint8)
        texts = TEXTS + PRE_TEXTS + [bytes(rnd.choice(letters, int(rnd.integers(12, 60))))
                                     for _ in range(80)]
        with tempfile.NamedTemporaryFile("w", suffix=".hex", delete=False) as f:
            for t in texts:
                f.write(t.hex() + "\n")
            name = f.name
        res = subprocess.run([tool, "--tokenize", model, name], capture_output=True, text=True)
        os.unlink(name)
        if res.returncode:
            print("FAIL kve-logits --tokenize: " + res.stderr.strip())
            return 1
        got = [list(map(int, l.split())) for l in res.stdout.splitlines()]
        fails = compare_lines(texts, got, lambda t: enc(g, t),
                              "%s tokenizer matches reference on %%r" % label, "ref")
        return 1 if fails else 0

    bound = float(args[args.index("--bound") + 1])
    kv16 = "--kv" in args and args[args.index("--kv") + 1]
    kv16 = kv16 if kv16 in ("f16", "q8_0") else False
    pre = int(args[args.index("--prefill") + 1]) if "--prefill" in args else 1
    vocab = g.tensors["token_embd.weight"].shape[0]
    rng = np.random.default_rng(7)
    tokens = [int(t) for t in rng.integers(0, vocab, 24)]
    with tempfile.NamedTemporaryFile(suffix=".bin", delete=False) as f:
        out = f.name
    controls = "--controls" in args
    bi = args.index("--bound")
    passthru = [a for a in args[:bi] + args[bi + 2:] if a != "--controls"]
    cmd = [tool, model, out] + passthru + [str(t) for t in tokens]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode:
        print("FAIL kve-logits: " + res.stderr.strip())
        return 1
    got = np.fromfile(out, dtype=np.float32).reshape(-1, vocab)
    os.unlink(out)
    q8 = GGML_Q8_0 in g.types.values()
    want = forward(g, tokens, kv16, q8)[pre - 1:]
    err = float(np.abs(got - want).max())
    if q8:   # informational: distance from plain float activations
        plain = float(np.abs(got - forward(g, tokens, kv16, False)[pre - 1:]).max())
        res.stdout = res.stdout.strip() + ", vs unquantised activations %.3g" % plain
    kv_seen = True
    if kv16 == "q8_0":  # and from a float KV: must be more than the bound
        plain = float(np.abs(got - forward(g, tokens, False, q8)[pre - 1:]).max())
        res.stdout = res.stdout.strip() + ", vs a float KV %.3g" % plain
        kv_seen = plain > bound
    scale = float(np.abs(want).max())
    agree = int((got.argmax(1) == want.argmax(1)).sum())
    ok = got.shape == want.shape and err <= bound and kv_seen
    print("%s numpy reference %s %s: max abs error %.3g (bound %g, |logit| max %.3g), "
          "argmax %d/%d, %s" % ("ok  " if ok else "FAIL", os.path.basename(model),
                                " ".join(passthru), err, bound, scale, agree, len(want),
                                res.stdout.strip()))
    if controls:
        # negative controls: a reference with the other rope style, or
        # without the Q/K/V biases, must miss the engine by more than the
        # bound, or this comparison could not catch such a mix-up
        arch = g.kv["general.architecture"].decode()
        neox = arch in NEOX_ARCHS
        variants = [("%s rope instead of %s" % ("NEOX" if not neox else "normal",
                                                 "NEOX" if neox else "normal"),
                     dict(neox=not neox))]
        if any(k.endswith(".attn_q.bias") for k in g.tensors):
            variants.append(("no Q/K/V biases", dict(biases=False)))
        # partial rope: rotating the whole head instead must miss too
        hd = g.kv.get(arch + ".attention.key_length",
                      g.kv[arch + ".embedding_length"] // g.kv[arch + ".attention.head_count"])
        rd = g.kv.get(arch + ".rope.dimension_count", hd)
        if rd < hd:
            variants.append(("rope over all %d head dims instead of %d" % (hd, rd),
                             dict(rope_dims=hd)))
        if g.kv.get(arch + ".rope.scaling.factor", 0) not in (0, 1):
            variants.append(("positions not scaled", dict(rope_scale=False)))
        if any(k.endswith(".attn_q_norm.weight") for k in g.tensors):
            variants.append(("no per-head Q/K norms", dict(qk_norm=False)))
        if "rope_freqs.weight" in g.tensors:    # without llama 3's divisors
            saved = g.tensors.pop("rope_freqs.weight")
            e = float(np.abs(got - forward(g, tokens, kv16, q8)[pre - 1:]).max())
            g.tensors["rope_freqs.weight"] = saved
            good = e > bound
            ok &= good
            print("%s control: %s reference without rope_freqs is off by %.3g (must exceed "
                  "%g)" % ("ok  " if good else "FAIL", os.path.basename(model), e, bound))
        for what, kw in variants:
            e = float(np.abs(got - forward(g, tokens, kv16, q8, **kw)[pre - 1:]).max())
            good = e > bound
            ok &= good
            print("%s control: %s reference with %s is off by %.3g (must exceed %g)" % (
                "ok  " if good else "FAIL", os.path.basename(model), what, e, bound))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
