# SPDX-License-Identifier: LGPL-2.1-or-later
"""kvarena: Python binding of libkvarena (ctypes, no compiled extension).

Devices, arenas, sessions and blocks over the kernel (kvarena.ko) or memfd
backend, the arena's data fd (a dma-buf on the kernel backend), and
zero-copy views of blocks: a memoryview, or a numpy array over the mapping.

    import kvarena
    with kvarena.Device("auto") as dev:
        with dev.arena(64 << 20, 256 << 10, name="kv") as arena:
            s = arena.session(cookie=42)
            ids = s.alloc(4)
            a = arena.block_array(ids[0], "float16")   # numpy, zero copy
            a[:] = 1.0
            s.set_state("tool_wait", tool_class=3, expected_wait_us=2_000_000)
            s.close()

Errors raise KvaError (an OSError with the errno the library returned).
The library is found as $KVARENA_LIB, else libkvarena.so.0.  Views of an
arena's memory must be dropped before Arena.close(), which refuses while
any is alive (the mapping goes with the arena).
"""
import ctypes
import ctypes.util
import os
import weakref

__all__ = ["KvaError", "Device", "Arena", "Session", "STATES", "POLICIES",
           "lib_version"]

STATES = ("idle", "prefill", "decode", "tool_wait", "ended")
POLICIES = ("toolwait", "lru", "ttl")
_BACKENDS = {"auto": 0, "kernel": 1, "memfd": 2}
_NAME_LEN = 32
_STATE_COUNT = 5
_STATE_SLOTS = 8        # KVA_STATE_SLOTS: state_ns has room for more states
KVA_EXPORT_CLOEXEC = 1
KVA_ALLOC_PARTIAL = 1
KVA_ARENA_NO_MLOCK = 1
KVA_ARENA_MLOCK_TRY = 2
KVA_NUMA_ANY = -1

u32, u64, s32 = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int32


class KvaError(OSError):
    """A libkvarena call failed: .errno is the error, .strerror its text."""


# The UAPI structs (<kvarena/linux/kvarena.h>), as far as this binding
# knows them: every call passes its size (the library's ABI convention), so
# a newer library fills only these fields.
class _Version(ctypes.Structure):
    _fields_ = [("size", u32), ("api_version", u32), ("features", u64),
                ("max_pinned_bytes", u64), ("max_arena_bytes", u64),
                ("pinned_bytes", u64), ("page_size", u32), ("max_batch", u32),
                ("max_sessions", u32), ("pad", u32)]


class _ArenaInfo(ctypes.Structure):
    _fields_ = [("size", u32), ("flags", u32), ("bytes", u64),
                ("arena_id", u32), ("block_size", u32), ("blocks_total", u32),
                ("blocks_free", u32), ("blocks_per_page", u32),
                ("numa_node", s32), ("tenant_id", u32), ("sessions", u32),
                ("dmabuf_attachments", u32), ("dmabuf_mapped", u32),
                ("dmabuf_maps_total", u64), ("created_ns", u64),
                ("sessions_ended", u64), ("idle_block_us", u64),
                ("name", ctypes.c_char * _NAME_LEN),
                ("policy", u32), ("low_wm", u32), ("high_wm", u32),
                ("ttl_ms", u32), ("events_posted", u64),
                ("events_dropped", u64), ("uring_eagain", u64)]


class _SessionInfo(ctypes.Structure):
    _fields_ = [("size", u32), ("flags", u32), ("session_id", u64),
                ("state", u32), ("tool_class", u32), ("blocks_held", u32),
                ("pad", u32), ("expected_wait_us", u64), ("cookie", u64),
                ("created_ns", u64), ("state_since_ns", u64),
                ("transitions", u64), ("idle_block_us", u64),
                ("idle_byte_sec", u64), ("state_ns", u64 * _STATE_SLOTS),
                ("tier", u32), ("pad1", u32)]


class _Tenant(ctypes.Structure):
    _fields_ = [("size", u32), ("flags", u32), ("tenant_id", u32),
                ("arenas", u32), ("quota_bytes", u64), ("used_bytes", u64),
                ("arena_quota_bytes", u64), ("arena_bytes", u64)]


class _ArenaParams(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("bytes", u64),
                ("block_size", u32), ("numa_node", s32), ("tenant_id", u32),
                ("name", ctypes.c_char_p), ("policy", u32), ("low_wm", u32),
                ("high_wm", u32), ("ttl_ms", u32), ("flags", u32)]


def _load():
    path = os.environ.get("KVARENA_LIB") or \
        ctypes.util.find_library("kvarena") or "libkvarena.so.0"
    lib = ctypes.CDLL(path, use_errno=True)
    P = ctypes.POINTER
    vp = ctypes.c_void_p
    sig = {
        "kva_lib_version_string": (ctypes.c_char_p, []),
        "kva_open": (ctypes.c_int, [ctypes.c_int, P(vp)]),
        "kva_close": (None, [vp]),
        "kva_dev_backend": (ctypes.c_int, [vp]),
        "kva_dev_fallback": (ctypes.c_char_p, [vp]),
        "kva_dev_limits": (ctypes.c_char_p, [vp]),
        "kva_dev_version": (ctypes.c_int, [vp, P(_Version)]),
        "kva_tenant_set_quota": (ctypes.c_int, [vp, u32, u64]),
        "kva_tenant_info": (ctypes.c_int, [vp, u32, P(_Tenant)]),
        "kva_arena_new": (ctypes.c_int, [vp, P(_ArenaParams), P(vp)]),
        "kva_arena_destroy": (None, [vp]),
        "kva_arena_fd": (ctypes.c_int, [vp]),
        "kva_arena_get_info": (ctypes.c_int, [vp, P(_ArenaInfo)]),
        "kva_arena_data_fd": (ctypes.c_int, [vp, u32]),
        "kva_arena_export_dmabuf": (ctypes.c_int, [vp, u32]),
        "kva_arena_map": (ctypes.c_int, [vp, P(vp)]),
        "kva_arena_set_policy": (ctypes.c_int, [vp, u32, u32, u32, u32]),
        "kva_block_offset": (u64, [u32, u32]),
        # session ids are 64-bit (libkvarena 0.2)
        "kva_session_open": (ctypes.c_int, [vp, u64, P(u64)]),
        "kva_session_close": (ctypes.c_int, [vp, u64]),
        "kva_session_set_state": (ctypes.c_int, [vp, u64, u32, u32, u64]),
        "kva_session_get_info": (ctypes.c_int, [vp, u64, P(_SessionInfo)]),
        "kva_blocks_alloc": (ctypes.c_int, [vp, u64, u32, P(u32), u32]),
        "kva_blocks_free": (ctypes.c_int, [vp, u64, u32, P(u32)]),
        "kva_blocks_share": (ctypes.c_int, [vp, u64, u32, P(u32)]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    return lib


_lib = _load()


def _check(ret, what):
    if ret < 0:
        raise KvaError(-ret, "%s: %s" % (what, os.strerror(-ret)))
    return ret


def lib_version():
    """The running libkvarena's version, e.g. "0.2.0"."""
    return _lib.kva_lib_version_string().decode()


def _sized(cls):
    s = cls()
    s.size = ctypes.sizeof(cls)
    return s


def _asdict(s):
    out = {}
    for name, _ in s._fields_:
        if name in ("size", "flags", "pad", "pad1"):
            continue
        v = getattr(s, name)
        if isinstance(v, bytes):
            v = v.decode(errors="replace")
        elif isinstance(v, ctypes.Array):
            v = list(v)
        out[name] = v
    return out


def _state(state):
    if isinstance(state, str):
        try:
            return STATES.index(state)
        except ValueError:
            raise ValueError("unknown state %r" % state) from None
    return int(state)


class Device:
    """A libkvarena device handle: backend "auto", "kernel" or "memfd"."""

    def __init__(self, backend="auto"):
        if backend not in _BACKENDS:
            raise ValueError("backend is one of %s" % ", ".join(_BACKENDS))
        h = ctypes.c_void_p()
        _check(_lib.kva_open(_BACKENDS[backend], ctypes.byref(h)), "kva_open")
        self._h = h
        self._arenas = weakref.WeakSet()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Free the handle; its arenas must be closed first."""
        if self._h:
            if len(self._arenas):
                raise RuntimeError("close the device's arenas first")
            _lib.kva_close(self._h)
            self._h = None

    def _handle(self):
        if not self._h:
            raise ValueError("device closed")
        return self._h

    @property
    def backend(self):
        return ("auto", "kernel", "memfd")[_lib.kva_dev_backend(self._handle())]

    @property
    def fallback(self):
        """Why "auto" chose memfd, or None."""
        r = _lib.kva_dev_fallback(self._handle())
        return r.decode() if r else None

    @property
    def limits(self):
        return _lib.kva_dev_limits(self._handle()).decode()

    def version(self):
        v = _sized(_Version)
        _check(_lib.kva_dev_version(self._handle(), ctypes.byref(v)),
               "kva_dev_version")
        return _asdict(v)

    def set_quota(self, tenant, quota_bytes):
        _check(_lib.kva_tenant_set_quota(self._handle(), tenant, quota_bytes),
               "kva_tenant_set_quota")

    def tenant(self, tenant):
        t = _sized(_Tenant)
        _check(_lib.kva_tenant_info(self._handle(), tenant, ctypes.byref(t)),
               "kva_tenant_info")
        return _asdict(t)

    def arena(self, nbytes, block_size, name=None, tenant=0,
              numa_node=KVA_NUMA_ANY, policy="toolwait", low_wm=0, high_wm=0,
              ttl_ms=0, mlock=True):
        """A new arena.  mlock: True (lock or fail), "try", or False
        (memfd backend; the kernel always pins)."""
        p = _sized(_ArenaParams)
        p.bytes, p.block_size, p.tenant_id = nbytes, block_size, tenant
        p.numa_node = numa_node
        p.name = name.encode() if name else None
        p.policy = POLICIES.index(policy)
        p.low_wm, p.high_wm, p.ttl_ms = low_wm, high_wm, ttl_ms
        p.flags = {True: 0, "try": KVA_ARENA_MLOCK_TRY,
                   False: KVA_ARENA_NO_MLOCK}[mlock]
        h = ctypes.c_void_p()
        _check(_lib.kva_arena_new(self._handle(), ctypes.byref(p),
                                  ctypes.byref(h)), "kva_arena_new")
        a = Arena(self, h)
        self._arenas.add(a)
        return a


class Arena:
    """An arena: sessions, blocks, its data fd and views of its memory."""

    def __init__(self, dev, handle):
        self._dev = dev
        self._h = handle
        self._base = None
        self._views = []                # weakrefs to the block buffers
        i = self.info()
        self.bytes, self.block_size = i["bytes"], i["block_size"]
        self.blocks_total, self.arena_id = i["blocks_total"], i["arena_id"]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Destroy the handle (and its mapping): refused while views live."""
        if not self._h:
            return
        self._views = [r for r in self._views if r() is not None]
        alive = len(self._views)
        if alive:
            raise RuntimeError("%d view(s) of the arena's memory still alive"
                               % alive)
        _lib.kva_arena_destroy(self._h)
        self._h = None
        self._dev._arenas.discard(self)

    def _handle(self):
        if not self._h:
            raise ValueError("arena closed")
        return self._h

    @property
    def fd(self):
        """The handle's own arena fd (kernel) or memfd; owned by the handle."""
        return _lib.kva_arena_fd(self._handle())

    def info(self):
        i = _sized(_ArenaInfo)
        _check(_lib.kva_arena_get_info(self._handle(), ctypes.byref(i)),
               "kva_arena_get_info")
        d = _asdict(i)
        d["policy"] = POLICIES[d["policy"]] if d["policy"] < len(POLICIES) \
            else d["policy"]
        d["filled"] = i.size          # bytes the library filled in
        return d

    def data_fd(self, cloexec=True):
        """A new fd for the memory (dma-buf on the kernel backend, else a
        memfd); the caller closes it."""
        return _check(_lib.kva_arena_data_fd(
            self._handle(), KVA_EXPORT_CLOEXEC if cloexec else 0),
            "kva_arena_data_fd")

    def dmabuf_fd(self, cloexec=True):
        """The dma-buf fd (kernel backend; KvaError EOPNOTSUPP on memfd)."""
        return _check(_lib.kva_arena_export_dmabuf(
            self._handle(), KVA_EXPORT_CLOEXEC if cloexec else 0),
            "kva_arena_export_dmabuf")

    def set_policy(self, policy, low_wm=0, high_wm=0, ttl_ms=0):
        _check(_lib.kva_arena_set_policy(self._handle(),
                                         POLICIES.index(policy), low_wm,
                                         high_wm, ttl_ms),
               "kva_arena_set_policy")

    def session(self, cookie=0):
        sid = u64()
        _check(_lib.kva_session_open(self._handle(), cookie,
                                     ctypes.byref(sid)), "kva_session_open")
        return Session(self, sid.value)

    def _address(self):
        if self._base is None:
            base = ctypes.c_void_p()
            _check(_lib.kva_arena_map(self._handle(), ctypes.byref(base)),
                   "kva_arena_map")
            self._base = base.value
        return self._base

    def block_offset(self, block):
        """The block's byte offset in the mapping."""
        return _lib.kva_block_offset(self.block_size, block)

    def block(self, block):
        """A writable memoryview of one block, zero copy."""
        if not 0 <= block < self.blocks_total:
            raise IndexError("block %d not in the arena" % block)
        buf = (ctypes.c_uint8 * self.block_size).from_address(
            self._address() + self.block_offset(block))
        buf._kva_arena = self           # the mapping outlives the view
        self._views = [r for r in self._views if r() is not None]
        self._views.append(weakref.ref(buf))
        return memoryview(buf).cast("B")

    def block_array(self, block, dtype="uint8", shape=None):
        """A numpy array over one block, zero copy (needs numpy)."""
        import numpy as np
        a = np.frombuffer(self.block(block), dtype=dtype)
        return a.reshape(shape) if shape is not None else a


class Session:
    """A session of an arena: its blocks and state."""

    def __init__(self, arena, sid):
        self.arena = arena
        self.id = sid

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _ids(self, ids):
        ids = list(ids)
        return len(ids), (u32 * max(len(ids), 1))(*ids)

    def alloc(self, n, partial=False):
        """Allocate n blocks; their ids (fewer only with partial=True)."""
        arr = (u32 * max(n, 1))()
        got = _check(_lib.kva_blocks_alloc(
            self.arena._handle(), self.id, n, arr,
            KVA_ALLOC_PARTIAL if partial else 0), "kva_blocks_alloc")
        return list(arr[:got])

    def free(self, ids):
        n, arr = self._ids(ids)
        _check(_lib.kva_blocks_free(self.arena._handle(), self.id, n, arr),
               "kva_blocks_free")

    def share(self, ids):
        """Hold blocks another session holds (a shared prefix)."""
        n, arr = self._ids(ids)
        _check(_lib.kva_blocks_share(self.arena._handle(), self.id, n, arr),
               "kva_blocks_share")

    def set_state(self, state, tool_class=0, expected_wait_us=0):
        _check(_lib.kva_session_set_state(self.arena._handle(), self.id,
                                          _state(state), tool_class,
                                          expected_wait_us),
               "kva_session_set_state")

    def info(self):
        i = _sized(_SessionInfo)
        _check(_lib.kva_session_get_info(self.arena._handle(), self.id,
                                         ctypes.byref(i)),
               "kva_session_get_info")
        d = _asdict(i)
        d["state"] = STATES[d["state"]] if d["state"] < len(STATES) \
            else d["state"]
        return d

    def close(self):
        """End the session: its blocks go back (unless shared)."""
        if self.id is not None:
            _check(_lib.kva_session_close(self.arena._handle(), self.id),
                   "kva_session_close")
            self.id = None
