#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""tokenizer.py - the agent model's SentencePiece-style vocabulary.

Owns learning the vocabulary from the corpus and encoding text exactly as
the engine's "llama" tokenizer does (daemon/engine/tokenizer.c, spm_encode):
a dummy space is prepended, spaces become U+2581, then adjacent pieces are
merged, always the pair whose concatenation is a vocabulary token with the
highest score (ties: leftmost), until none is; pieces left that are not
tokens fall back to <0xXX> byte tokens.

The vocabulary (ids in order):
  <unk> <s> </s>, the chat markers (corpus.MARKERS, one token each), the 256
  byte tokens, one token per character of printable ASCII, U+2581, \\n, \\t,
  the marker "chains" (every prefix of a marker: scored above everything
  learnt, so a marker's characters always join into the marker before any
  other merge touches them), then BPE merges learnt from the corpus, score
  -rank, as long as the pair occurs min_count times (the phrasing's words
  become tokens, the names and paths drawn at random stay in syllable-sized
  pieces the model learns to copy). Digits are never merged (one token per digit, so numbers the
  model has not seen are copied digit by digit), nor is a newline; "/" and
  "." join only the letters after them (path components, extensions).

Because markers always form first and no learnt token contains a marker,
the text between markers encodes independently: encode() works segment by
segment, which is what the engine computes on the whole text.
"""
import collections
import heapq
import json
import re

import corpus

SP = "\u2581"
T_NORMAL, T_UNKNOWN, T_CONTROL, T_USER, T_BYTE = 1, 2, 3, 4, 6
CHAIN_SCORE = 1.0e6
MARKER_RE = re.compile("|".join(re.escape(m) for m in corpus.MARKERS))
# learning only: which characters may end up in one token
# A "/" or "." only starts a piece ("/opt", ".csv"), never continues one, so
# a path is the same tokens after a space in a question and after a quote
# in a call: the model copies it token for token from its first component.
WORD_RE = re.compile(SP + "?[A-Za-z]+|[0-9]|[./][A-Za-z]+|[./]|"
                     + SP + "?[^A-Za-z0-9./" + SP + "\n]+|" + SP + "+|\n")
# The "syllable" vocabulary (learn(syllables=True)): "/" is never merged
# (a path is "/" + its components, whatever precedes it), while "." still
# starts an extension.
WORD_RE_SYL = re.compile(SP + "?[A-Za-z]+|[0-9]|\\.[A-Za-z]+|[./]|"
                         + SP + "?[^A-Za-z0-9./" + SP + "\n]+|" + SP + "+|\n")
SYL_SCORE = 5.0e5
# learn(topdirs=True): each top directory of corpus.TOP stays one token
# ("/home", "/var/lib"), reached by a chain scored between the syllables
# and the learnt merges (TOP_SCORE + length). The chain joins the
# top directory's syllable-cut pieces from the right ("/|ho|m|e": "me",
# "home", "/home"), so its first tokens are a name's rarely adjacent
# leftovers and never "/" + a syllable: a component "/hoir" stays "/|ho|ir".
TOP_SCORE = 1.0e5
WORD_RE_TOP = re.compile("|".join(re.escape(t) for t in sorted(corpus.TOP, key=len, reverse=True))
                         + "|" + WORD_RE_SYL.pattern)


def has_digit(s):
    return any(c.isdigit() for c in s)


class Tokenizer:
    def __init__(self, tokens, scores, types):
        self.tokens, self.scores, self.types = tokens, scores, types
        self.ids = {}
        for i, t in enumerate(tokens):
            self.ids.setdefault(t, i)
        self.byte_id = [self.ids["<0x%02X>" % b] for b in range(256)]
        self.eos = self.ids[corpus.IM_END]

    # ---- learning -------------------------------------------------------
    @classmethod
    def learn(cls, texts, vocab_size, min_count=100, syllables=False, topdirs=False):
        """syllables: the corpus's name syllables (corpus.SYL, lower case
        and capitalised, with their prefixes) are tokens scored above
        every learnt merge, so a drawn name is always its syllables (a
        handful of pieces the model sees often, the same pieces wherever
        the name stands) and the merges are learnt on top of them.
        topdirs (with syllables): each top directory of corpus.TOP is one
        token, the syllables follow it (see TOP_SCORE)."""
        if topdirs and not syllables:
            raise ValueError("topdirs needs syllables")
        tokens = ["<unk>", "<s>", "</s>"] + list(corpus.MARKERS)
        types = [T_UNKNOWN, T_CONTROL, T_CONTROL] + [T_USER] * len(corpus.MARKERS)
        scores = [0.0, 0.0, 0.0] + [CHAIN_SCORE - len(m) for m in corpus.MARKERS]
        tokens += ["<0x%02X>" % b for b in range(256)]
        types += [T_BYTE] * 256
        scores += [0.0] * 256
        chars = [SP, "\n", "\t"] + [chr(c) for c in range(0x21, 0x7f)]
        tokens += chars
        types += [T_NORMAL] * len(chars)
        scores += [0.0] * len(chars)
        seen = set(tokens)
        for m in corpus.MARKERS:
            for k in range(2, len(m)):
                p = m[:k]
                if p not in seen:
                    seen.add(p)
                    tokens.append(p)
                    types.append(T_NORMAL)
                    scores.append(CHAIN_SCORE - k)
        word_re = WORD_RE
        if syllables:
            word_re = WORD_RE_SYL
            for syl in corpus.SYL:
                for v in (syl, syl.capitalize()):
                    for k in range(2, len(v) + 1):
                        p = v[:k]
                        if p not in seen:
                            seen.add(p)
                            tokens.append(p)
                            types.append(T_NORMAL)
                            scores.append(SYL_SCORE + k)
        if topdirs:
            word_re = WORD_RE_TOP
            base = cls(tokens, scores, types)
            for top in corpus.TOP:
                out, offs = [], []
                base._segment(top, 0, out, offs)
                pieces = [top[a:b] for a, b in offs]
                for j in range(len(pieces) - 2, -1, -1):
                    p = "".join(pieces[j:])
                    if p not in seen:
                        seen.add(p)
                        tokens.append(p)
                        types.append(T_NORMAL)
                        scores.append(TOP_SCORE + len(p))
        # BPE over words (word_re pieces of the text between markers),
        # starting from each word as the tokens so far encode it
        words = collections.Counter()
        for t in texts:
            w = SP + t.replace(" ", SP)
            for seg in MARKER_RE.split(w):
                words.update(word_re.findall(seg))
        if syllables:
            base = cls(tokens, scores, types)
            wl = []
            for w, c in words.items():
                out, offs = [], []
                base._segment(w, 0, out, offs)
                wl.append(([w[a:b] for a, b in offs], c))
        else:
            wl = [(list(w), c) for w, c in words.items()]
        rank = 0
        while len(tokens) < vocab_size:
            pairs = collections.Counter()
            for syms, c in wl:
                for a, b in zip(syms, syms[1:]):
                    if not has_digit(a) and not has_digit(b):
                        pairs[(a, b)] += c
            if not pairs:
                break
            (a, b), cnt = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
            if cnt < min_count:
                break   # a rarer pair is a drawn name's, not the phrasing's
            ab = a + b
            if ab not in seen:
                seen.add(ab)
                tokens.append(ab)
                types.append(T_NORMAL)
                scores.append(float(-rank))
            rank += 1
            for syms, _ in wl:
                i = 0
                while i < len(syms) - 1:
                    if syms[i] == a and syms[i + 1] == b:
                        syms[i:i + 2] = [ab]
                    i += 1
        return cls(tokens, scores, types)

    def save(self, path):
        with open(path, "w") as f:
            json.dump({"tokens": self.tokens, "scores": self.scores, "types": self.types}, f)

    @classmethod
    def load(cls, path):
        with open(path) as f:
            d = json.load(f)
        return cls(d["tokens"], d["scores"], d["types"])

    # ---- encoding (the engine's algorithm) --------------------------------
    def _segment(self, s, base, out, offs):
        n = len(s)
        if not n:
            return
        syms = [[i, 1] for i in range(n)]     # [offset, length]; length 0 = merged away
        nxt = list(range(1, n)) + [-1]
        prv = list(range(-1, n - 1))
        heap = []
        ids, scores = self.ids, self.scores

        def tryp(left):
            if left < 0 or nxt[left] < 0:
                return
            r = nxt[left]
            o, ln = syms[left][0], syms[left][1] + syms[r][1]
            tid = ids.get(s[o:o + ln])
            if tid is not None:
                heapq.heappush(heap, (-scores[tid], left, r, ln))

        for k in range(n):
            tryp(k)
        while heap:
            _, l, r, ln = heapq.heappop(heap)
            if not syms[l][1] or not syms[r][1] or nxt[l] != r or syms[l][1] + syms[r][1] != ln:
                continue
            syms[l][1] = ln
            syms[r][1] = 0
            nxt[l] = nxt[r]
            if nxt[r] >= 0:
                prv[nxt[r]] = l
            tryp(prv[l])
            tryp(l)
        k = 0
        while k >= 0:
            o, ln = syms[k]
            piece = s[o:o + ln]
            tid = ids.get(piece)
            if tid is not None:
                out.append(tid)
                offs.append((base + o, base + o + ln))
            else:
                for byte in piece.encode():
                    out.append(self.byte_id[byte])
                    offs.append((base + o, base + o + ln))
            k = nxt[k]

    def encode(self, text, offsets=False, dummy=True):
        """Token ids of text (no BOS), as the engine's kve_tokenize.
        offsets: also (start, end) of each token in text (the dummy prefix
        space maps to (-1, 0)). dummy=False: without the dummy prefix (text
        that continues an encoded text after a marker)."""
        if not text:
            return ([], []) if offsets else []   # the engine: no dummy prefix either
        d = 1 if dummy else 0
        w = (SP if dummy else "") + text.replace(" ", SP)
        out, offs = [], []
        pos = 0
        for m in MARKER_RE.finditer(w):
            self._segment(w[pos:m.start()], pos - d, out, offs)
            out.append(self.ids[m.group(0)])
            offs.append((m.start() - d, m.end() - d))
            pos = m.end()
        self._segment(w[pos:], pos - d, out, offs)
        return (out, offs) if offsets else out

    def token_bytes(self, i):
        t, ty = self.tokens[i], self.types[i]
        if ty in (T_CONTROL, 5):
            return b""
        if ty == T_BYTE:
            return bytes([int(t[3:5], 16)])
        return t.replace(SP, " ").encode()

    def decode(self, ids):
        return b"".join(self.token_bytes(i) for i in ids).decode("utf-8", "replace")
