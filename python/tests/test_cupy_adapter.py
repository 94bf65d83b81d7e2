"""streampool.cupy on the simulated device with a stand-in CuPy (fake_gpu_libs): the allocator on
CuPy's current device and stream, frees when CuPy drops the memory, the memory-pool API over
streampool's statistics, install()'s checks, OOM as CuPy's error, and the message without CuPy."""

from __future__ import annotations

import gc
import unittest

import streampool
import streampool.cupy as sp_cupy
import streampool.interop as interop
from fake_gpu_libs import absent, installed, make_cupy
from sim_support import SimTestCase, fresh_sim

MIB = 1 << 20


class CupyTestCase(SimTestCase):
    def setUp(self):
        super().setUp()
        self.cupy = make_cupy()
        self.modules = installed({"cupy": self.cupy})
        self.modules.__enter__()

    def tearDown(self):
        self.modules.__exit__(None, None, None)
        gc.collect()
        self.assertEqual(interop.allocations(), [])  # every test's memory went back
        super().tearDown()


class Allocator(CupyTestCase):
    def test_install_makes_every_cupy_allocation_streampool_s(self):
        pool = sp_cupy.install()
        self.assertIs(pool, sp_cupy.pool())
        self.assertIs(self.cupy.cuda.get_allocator(), sp_cupy.malloc)
        self.assertIs(pool.malloc, sp_cupy.malloc)
        memptr = self.cupy.cuda.get_allocator()(1000)
        self.assertNotEqual(memptr.ptr, 0)
        self.assertEqual(memptr.device_id, 0)
        self.assertEqual(memptr.mem.size, 1000)
        self.assertEqual(interop.allocation(memptr.ptr).origin, "cupy")
        self.assertEqual(streampool.stats(0)["requested_bytes.all.current"], 1000)
        del memptr  # CuPy drops its last reference: freed
        gc.collect()
        self.assertEqual(streampool.stats(0)["requested_bytes.all.current"], 0)
        sp_cupy.uninstall()
        self.assertIsNot(self.cupy.cuda.get_allocator(), sp_cupy.malloc)

    def test_current_device_and_stream(self):
        self.cupy.fake_state.device, self.cupy.fake_state.stream = 1, 0x5000
        memptr = sp_cupy.malloc(4096)
        a = interop.allocation(memptr.ptr)
        self.assertEqual((a.device, a.stream), (1, 0x5000))
        self.assertEqual(memptr.device_id, 1)
        self.assertEqual(streampool.stats(1)["requested_bytes.all.current"], 4096)
        del memptr

    def test_freed_memory_is_reused_on_its_stream(self):
        first = sp_cupy.malloc(2 * MIB)
        address = first.ptr
        del first
        gc.collect()
        second = sp_cupy.malloc(2 * MIB)
        self.assertEqual(second.ptr, address)
        del second

    def test_using_allocator_only_inside_the_block(self):
        with self.cupy.cuda.using_allocator(sp_cupy.malloc):
            memptr = self.cupy.cuda.get_allocator()(512)
            self.assertIsNotNone(interop.allocation(memptr.ptr))
            with self.assertRaisesRegex(streampool.StreampoolError, "CuPy refused the allocator.*using_allocator"):
                sp_cupy.install()
        self.assertIsNot(self.cupy.cuda.get_allocator(), sp_cupy.malloc)
        del memptr

    def test_size_zero_is_a_null_pointer_on_the_device(self):
        self.cupy.fake_state.device = 1
        memptr = sp_cupy.malloc(0)
        self.assertEqual((memptr.ptr, memptr.device_id), (0, 1))
        self.assertEqual(streampool.stats(1)["allocation.all.allocated"], 0)

    def test_the_owner_frees_once_and_a_failed_free_warns(self):
        memptr = sp_cupy.malloc(256)
        interop.free(memptr.ptr)  # freed behind CuPy's back: the owner's free must not crash
        with self.assertWarnsRegex(RuntimeWarning, "streampool.cupy: freeing 0x[0-9a-f]+ failed"):
            del memptr
            gc.collect()


class PoolApi(CupyTestCase):
    def test_used_total_and_free_bytes_are_streampool_s(self):
        pool = sp_cupy.pool()
        raw = self.alloc(3 * MIB)  # another library's memory: the pool is shared
        memptr = pool.malloc(1 * MIB)
        s = streampool.stats(0)
        self.assertEqual(pool.used_bytes(), s["allocated_bytes.all.current"])
        self.assertEqual(pool.used_bytes(), 4 * MIB)
        self.assertEqual(pool.total_bytes(), s["reserved_bytes.all.current"])
        self.assertEqual(pool.free_bytes(), pool.total_bytes() - pool.used_bytes())
        del memptr
        gc.collect()
        self.assertGreater(pool.free_bytes(), 0)  # cached
        self.free(raw)
        pool.free_all_blocks()  # streampool.empty_cache(): every unused segment goes back
        self.assertEqual((pool.total_bytes(), pool.free_bytes()), (0, 0))
        self.assertEqual(streampool.stats(0)["reserved_bytes.all.current"], 0)

    def test_set_limit_is_one_budget(self):
        fresh_sim(devices=1, capacity=64 * MIB)
        self.cupy.fake_state.total = 64 * MIB
        pool = sp_cupy.pool()
        pool.set_limit(size=16 * MIB)
        with self.assertRaises(self.cupy.cuda.memory.OutOfMemoryError) as caught:
            pool.malloc(20 * MIB)
        self.assertIn("streampool: out of memory allocating 20971520 bytes on device 0", str(caught.exception))
        self.assertIsInstance(caught.exception.__cause__, interop.OutOfMemoryError)
        pool.set_limit(fraction=0.5)
        memptr = pool.malloc(20 * MIB)  # 32 MiB allowed now
        with self.assertRaises(self.cupy.cuda.memory.OutOfMemoryError):
            pool.malloc(20 * MIB)
        for no_cap in ({}, {"size": 0}, {"fraction": 0}):  # as CuPy: a limit of 0 is none
            with self.subTest(no_cap=no_cap):
                pool.set_limit(size=16 * MIB)
                pool.set_limit(**no_cap)
                more = pool.malloc(20 * MIB)
                del more
                gc.collect()
        del memptr
        with self.assertRaisesRegex(ValueError, "size or fraction, not both"):
            pool.set_limit(size=1, fraction=0.5)
        with self.assertRaisesRegex(ValueError, "size must be >= 0"):
            pool.set_limit(size=-1)
        with self.assertRaisesRegex(ValueError, r"fraction must be in \[0, 1\]"):
            pool.set_limit(fraction=1.5)


class InstallChecks(CupyTestCase):
    def test_refused_when_cupy_s_pool_holds_live_arrays(self):
        self.cupy.fake_state.pool.used = 4096
        with self.assertRaisesRegex(streampool.StreampoolError,
                                    r"CuPy's own memory pool already holds 4096 bytes of live arrays.*before the first"):
            sp_cupy.install()
        self.assertIsNot(self.cupy.cuda.get_allocator(), sp_cupy.malloc)

    def test_cupy_s_cached_memory_is_returned_first(self):
        self.cupy.fake_state.pool.cached = 8 * MIB
        sp_cupy.install()
        self.assertIs(self.cupy.cuda.get_allocator(), sp_cupy.malloc)
        self.assertEqual(self.cupy.fake_state.pool.total_bytes(), 0)
        self.assertEqual(self.cupy.fake_state.pool.freed_all, 1)
        sp_cupy.uninstall()


class WithoutCupy(unittest.TestCase):
    def test_each_entry_point_says_cupy_is_missing(self):
        fresh_sim(devices=1)
        try:
            with absent(["cupy"]):
                for name, call in (("streampool.cupy.install()", sp_cupy.install),
                                   ("streampool.cupy.uninstall()", sp_cupy.uninstall),
                                   ("streampool.cupy.malloc", lambda: sp_cupy.malloc(16)),
                                   ("streampool.cupy.StreampoolMemoryPool", sp_cupy.pool().used_bytes)):
                    with self.subTest(name=name):
                        with self.assertRaises(streampool.StreampoolError) as caught:
                            call()
                        self.assertIn(f"{name} needs CuPy, which is not importable here", str(caught.exception))
                        self.assertIsInstance(caught.exception.__cause__, ImportError)
        finally:
            streampool.shutdown()


if __name__ == "__main__":
    unittest.main()
