# SPDX-License-Identifier: MIT
"""gguf_io.py - a small GGUF v3 writer and reader (numpy only).

Owns the container format as the engine reads it (daemon/engine/gguf.c):
little-endian header, key/value metadata, tensor infos (ne[0] is the
row length), 32-byte aligned data; F32, F16 and Q8_0 (blocks of 32: an
F16 scale d = max|x| / 127 and 32 int8 q = round(x / d)); set_meta()
rewrites a file's metadata and copies its tensors byte for byte.
"""
import struct

import numpy as np

GGUF_U8, GGUF_I8, GGUF_U16, GGUF_I16, GGUF_U32, GGUF_I32, GGUF_F32, GGUF_BOOL, \
    GGUF_STR, GGUF_ARR, GGUF_U64, GGUF_I64, GGUF_F64 = range(13)
GGML_F32, GGML_F16, GGML_Q8_0 = 0, 1, 8
ALIGN = 32
QK = 32

_SCALAR = {GGUF_U8: "<B", GGUF_I8: "<b", GGUF_U16: "<H", GGUF_I16: "<h", GGUF_U32: "<I",
           GGUF_I32: "<i", GGUF_F32: "<f", GGUF_BOOL: "<?", GGUF_U64: "<Q", GGUF_I64: "<q",
           GGUF_F64: "<d"}


def q8_0(a):
    """float32 (rows, cols) -> Q8_0 bytes, cols a multiple of 32."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    assert a.shape[-1] % QK == 0
    b = a.reshape(-1, QK)
    amax = np.abs(b).max(axis=1)
    d = amax / 127.0
    inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1), 0).astype(np.float32)
    # as ggml's reference: roundf, halves away from zero
    x = b * inv[:, None]
    q = (np.sign(x) * np.floor(np.abs(x) + 0.5)).astype(np.int8)
    out = np.empty(b.shape[0], dtype=[("d", "<f2"), ("q", "i1", QK)])
    out["d"] = d.astype(np.float16)
    out["q"] = q
    return out.tobytes()


def dequant_q8_0(raw, n):
    blk = np.frombuffer(raw, dtype=[("d", "<f2"), ("q", "i1", QK)], count=n // QK)
    return (blk["q"].astype(np.float32) * blk["d"].astype(np.float32)[:, None]).reshape(-1)


class Writer:
    def __init__(self):
        self.kv = []        # (key, type, value[, arr_type])
        self.tensors = []   # (name, shape ne, type, bytes)

    def add(self, key, typ, val, arr_type=None):
        self.kv.append((key, typ, val, arr_type))

    def tensor(self, name, arr, typ):
        """arr: numpy float32 with shape (rows, cols) or (n,); ne = reversed."""
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        if typ == GGML_F32:
            raw = arr.tobytes()
        elif typ == GGML_F16:
            raw = arr.astype(np.float16).tobytes()
        else:
            raw = q8_0(arr)
        self.tensors.append((name, tuple(reversed(arr.shape)), typ, raw))

    @staticmethod
    def _str(s):
        b = s.encode() if isinstance(s, str) else s
        return struct.pack("<Q", len(b)) + b

    def _val(self, typ, v, arr_type):
        if typ == GGUF_STR:
            return self._str(v)
        if typ == GGUF_ARR:
            out = struct.pack("<IQ", arr_type, len(v))
            if arr_type == GGUF_STR:
                return out + b"".join(self._str(s) for s in v)
            return out + np.asarray(v, dtype=np.dtype(_SCALAR[arr_type])).tobytes()
        return struct.pack(_SCALAR[typ], v)

    def write(self, path):
        h = [b"GGUF", struct.pack("<IQQ", 3, len(self.tensors), len(self.kv))]
        for k, t, v, at in self.kv:
            h += [self._str(k), struct.pack("<I", t), self._val(t, v, at)]
        off = 0
        offs = []
        for name, ne, typ, raw in self.tensors:
            off = (off + ALIGN - 1) // ALIGN * ALIGN
            offs.append(off)
            h += [self._str(name), struct.pack("<I", len(ne)),
                  b"".join(struct.pack("<Q", n) for n in ne), struct.pack("<IQ", typ, off)]
            off += len(raw)
        head = b"".join(h)
        with open(path, "wb") as f:
            f.write(head)
            f.write(b"\0" * ((-len(head)) % ALIGN))
            pos = 0
            for (name, ne, typ, raw), o in zip(self.tensors, offs):
                f.write(b"\0" * (o - pos))
                f.write(raw)
                pos = o + len(raw)


class Reader:
    def __init__(self, path):
        with open(path, "rb") as f:
            self.buf = f.read()
        self.o = 0
        assert self.buf[:4] == b"GGUF", "not a GGUF file"
        self.o = 4
        ver, nt, nkv = self._u("<IQQ")
        assert ver in (2, 3)
        self.kv = {}
        self.kv_raw = []    # (key, the entry's bytes as in the file)
        for _ in range(nkv):
            start = self.o
            k = self._s()
            (t,) = self._u("<I")
            self.kv[k] = self._v(t)
            self.kv_raw.append((k, self.buf[start:self.o]))
        self.infos_at = self.o
        self.infos = []
        for _ in range(nt):
            name = self._s()
            (nd,) = self._u("<I")
            ne = self._u("<" + "Q" * nd)
            typ, off = self._u("<IQ")
            self.infos.append((name, ne, typ, off))
        self.infos_end = self.o
        align = self.kv.get("general.alignment", ALIGN)
        self.data = (self.o + align - 1) // align * align

    def _u(self, fmt):
        v = struct.unpack_from(fmt, self.buf, self.o)
        self.o += struct.calcsize(fmt)
        return v

    def _s(self):
        (n,) = self._u("<Q")
        s = self.buf[self.o:self.o + n]
        self.o += n
        return s.decode("utf-8", "surrogateescape")

    def _v(self, t):
        if t == GGUF_STR:
            return self._s()
        if t == GGUF_ARR:
            at, n = self._u("<IQ")
            return [self._v(at) for _ in range(n)] if at in (GGUF_STR, GGUF_ARR) else \
                list(self._u("<" + _SCALAR[at][1] * n))
        return self._u(_SCALAR[t])[0]

    def tensor(self, name):
        """The tensor as float32 numpy (rows, cols) / (n,), dequantised."""
        for nm, ne, typ, off in self.infos:
            if nm == name:
                n = int(np.prod(ne))
                p = self.data + off
                if typ == GGML_F32:
                    a = np.frombuffer(self.buf, np.float32, n, p)
                elif typ == GGML_F16:
                    a = np.frombuffer(self.buf, np.float16, n, p).astype(np.float32)
                elif typ == GGML_Q8_0:
                    a = dequant_q8_0(self.buf[p:p + n // QK * 34], n)
                else:
                    raise ValueError("tensor %s: type %d" % (name, typ))
                return a.reshape(tuple(reversed(ne)))
        raise KeyError(name)


def set_meta(src, dst, entries):
    """Writes dst: src with the metadata entries (key, type, value[,
    arr_type]) set (replaced in place, new keys appended), every other
    entry, the tensor infos and the tensor data byte for byte as in src
    (tensor offsets are relative to the aligned data start)."""
    r = Reader(src)
    new = {e[0]: Writer._str(e[0]) + struct.pack("<I", e[1]) + Writer()._val(
        e[1], e[2], e[3] if len(e) > 3 else None) for e in entries}
    kv = [new.pop(k, raw) for k, raw in r.kv_raw] + list(new.values())
    align = r.kv.get("general.alignment", ALIGN)
    head = b"".join([b"GGUF", struct.pack("<IQQ", 3, len(r.infos), len(kv))] + kv +
                    [r.buf[r.infos_at:r.infos_end]])
    with open(dst, "wb") as f:
        f.write(head)
        f.write(b"\0" * ((-len(head)) % align))
        f.write(r.buf[r.data:])
