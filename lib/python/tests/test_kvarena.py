# SPDX-License-Identifier: LGPL-2.1-or-later
"""The Python binding: devices, arenas, sessions, blocks, states, the data
fd shared with a child process, and zero-copy views (memoryview and numpy)
of blocks.  KVARENA_TEST_BACKEND picks the backend: "memfd" (default; make
check-python on the host, KVARENA_LIB pointing at the library built in the
tree) or "kernel" (make check-python-guest: kvarena.ko in a QEMU guest,
where the data fd is a dma-buf)."""
import errno
import mmap
import os
import unittest

import kvarena

MIB = 1 << 20
BS = 64 << 10
BACKEND = os.environ.get("KVARENA_TEST_BACKEND", "memfd")
KERNEL = BACKEND == "kernel"


class Binding(unittest.TestCase):
    def setUp(self):
        self.dev = kvarena.Device(BACKEND)
        self.arena = self.dev.arena(4 * MIB, BS, name="py", tenant=5)

    def tearDown(self):
        self.arena.close()
        self.dev.close()

    def test_device(self):
        self.assertEqual(self.dev.backend, BACKEND)
        self.assertIsNone(self.dev.fallback)
        v = self.dev.version()
        self.assertEqual(v["api_version"], 1)
        self.assertEqual(v["page_size"], 2 * MIB)
        self.assertRegex(kvarena.lib_version(), r"^\d+\.\d+\.\d+$")
        with self.assertRaises(ValueError):
            kvarena.Device("gpu")

    def test_arena_info_is_the_librarys(self):
        i = self.arena.info()
        # The binding's struct is exactly as big as the library's: every
        # byte filled, none left over.
        self.assertEqual(i["filled"], 160)
        self.assertEqual(i["name"], "py")
        self.assertEqual(i["tenant_id"], 5)
        self.assertEqual(i["blocks_total"], 64)
        self.assertEqual(i["blocks_per_page"], 32)
        self.assertEqual(i["policy"], "toolwait")

    def test_sessions_blocks_states(self):
        s = self.arena.session(cookie=77)
        ids = s.alloc(5)
        self.assertEqual(len(set(ids)), 5)
        self.assertEqual(self.arena.info()["blocks_free"], 59)
        s.set_state("tool_wait", tool_class=3, expected_wait_us=2_000_000)
        i = s.info()
        self.assertEqual((i["state"], i["tool_class"], i["blocks_held"],
                          i["cookie"]), ("tool_wait", 3, 5, 77))
        t = self.arena.session(cookie=78)
        t.share(ids[:2])
        self.assertEqual(t.info()["blocks_held"], 2)
        with self.assertRaises(kvarena.KvaError) as e:
            t.share(ids[:1])            # already held
        self.assertEqual(e.exception.errno, errno.EEXIST)
        # ids are 64-bit, above 2^32, and the info names the same one
        self.assertGreater(s.id, 2 ** 32)
        self.assertLess(s.id, 2 ** 63)
        self.assertGreater(t.id, s.id)
        self.assertEqual(i["session_id"], s.id)
        s.free(ids[2:])
        old = s.id
        s.close()
        t.close()
        self.assertEqual(self.arena.info()["blocks_free"], 64)
        # a stale id (its slot reused or not) names nothing
        u = self.arena.session()
        stale = kvarena.Session(self.arena, old)
        with self.assertRaises(kvarena.KvaError) as e:
            stale.info()
        self.assertEqual(e.exception.errno, errno.ENOENT)
        stale.id = None
        u.close()
        with self.assertRaises(kvarena.KvaError) as e:
            self.arena.session().alloc(65)
        self.assertEqual(e.exception.errno, errno.ENOSPC)

    def test_partial_and_quota(self):
        self.dev.set_quota(5, 3 * BS)
        s = self.arena.session()
        self.assertEqual(len(s.alloc(8, partial=True)), 3)
        t = self.dev.tenant(5)
        self.assertEqual(t["used_bytes"], 3 * BS)
        self.assertEqual(t["arenas"], 1)
        if KERNEL:      # the kernel also charges the arena's own bytes
            self.assertEqual(t["arena_bytes"], 4 * MIB)
            self.assertGreater(t["arena_quota_bytes"], 0)
        s.close()
        self.dev.set_quota(5, 0)

    def test_views_zero_copy(self):
        import numpy as np
        s = self.arena.session()
        ids = s.alloc(3)
        a = self.arena.block_array(ids[1], np.float32)
        self.assertEqual(a.shape, (BS // 4,))
        a[:] = np.arange(a.size, dtype=np.float32)
        m = self.arena.block(ids[1])
        self.assertEqual(np.frombuffer(m, np.float32)[1000], 1000.0)
        # The same bytes through the data fd, mapped on its own.
        fd = self.arena.data_fd()
        try:
            with mmap.mmap(fd, 4 * MIB) as mm:
                off = self.arena.block_offset(ids[1])
                got = np.frombuffer(mm, np.float32, count=a.size, offset=off)
                self.assertTrue((got == a).all())
                del got
        finally:
            os.close(fd)
        h = self.arena.block_array(ids[2], "float16", shape=(16, -1))
        self.assertEqual(h.shape, (16, BS // 2 // 16))
        with self.assertRaises(IndexError):
            self.arena.block(64)
        # Views pin the arena: close refuses until they are gone.
        with self.assertRaises(RuntimeError):
            self.arena.close()
        del a, m, h
        s.close()

    def test_child_process_sees_the_data(self):
        s = self.arena.session()
        (blk,) = s.alloc(1)
        self.arena.block(blk)[:4] = b"kvar"
        fd = self.arena.data_fd(cloexec=False)
        off = self.arena.block_offset(blk)
        pid = os.fork()
        if pid == 0:
            with mmap.mmap(fd, 4 * MIB) as mm:
                ok = mm[off:off + 4] == b"kvar"
                mm[off + 4:off + 8] = b"ena!"
            os._exit(0 if ok else 1)
        _, st = os.waitpid(pid, 0)
        os.close(fd)
        self.assertEqual(os.waitstatus_to_exitcode(st), 0)
        self.assertEqual(bytes(self.arena.block(blk)[:8]), b"kvarena!")
        s.close()

    def test_dmabuf(self):
        if not KERNEL:
            with self.assertRaises(kvarena.KvaError) as e:
                self.arena.dmabuf_fd()
            self.assertEqual(e.exception.errno, errno.EOPNOTSUPP)
            return
        s = self.arena.session()
        (blk,) = s.alloc(1)
        self.arena.block(blk)[:8] = b"dma-buf!"
        fd = self.arena.dmabuf_fd()
        try:
            # A real dma-buf, exported by kvarena.ko ...
            with open("/proc/self/fdinfo/%d" % fd) as f:
                info = f.read()
            self.assertRegex(info, r"exp_name:\s*kvarena")
            # ... whose mapping is the same memory as the block's view.
            off = self.arena.block_offset(blk)
            with mmap.mmap(fd, 4 * MIB) as mm:
                self.assertEqual(mm[off:off + 8], b"dma-buf!")
                mm[off:off + 4] = b"DMA-"
            self.assertEqual(bytes(self.arena.block(blk)[:8]), b"DMA-buf!")
        finally:
            os.close(fd)
        s.close()

    def test_bad_arguments(self):
        with self.assertRaises(kvarena.KvaError) as e:
            self.dev.arena(3 * MIB, BS)          # not whole 2 MiB pages
        self.assertEqual(e.exception.errno, errno.EINVAL)
        with self.assertRaises(ValueError):
            self.arena.session().set_state("sleeping")
        a = self.dev.arena(2 * MIB, BS, mlock="try")
        a.close()


if __name__ == "__main__":
    unittest.main()
