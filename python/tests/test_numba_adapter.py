"""streampool.numba on the simulated device with a stand-in Numba (fake_gpu_libs): the EMM plugin's
memalloc (views keep memory alive), defer_cleanup and reset, get_memory_info, get_ipc_handle and its
clear refusals, install()'s check for a context Numba already made, NUMBA_CUDA_MEMORY_MANAGER's
attribute, and the message without Numba."""

from __future__ import annotations

import gc
import unittest

import streampool
import streampool.interop as interop
import streampool.numba as sp_numba
from fake_gpu_libs import absent, installed, make_numba
from sim_support import SimTestCase, fresh_sim

MIB = 1 << 20


class NumbaTestCase(SimTestCase):
    def setUp(self):
        super().setUp()
        sp_numba._manager_class = None  # built from this test's stand-in
        self.modules = make_numba()
        self.cuda = self.modules["numba.cuda"]
        self.context_manager = installed(self.modules)
        self.context_manager.__enter__()

    def tearDown(self):
        self.context_manager.__exit__(None, None, None)
        sp_numba._manager_class = None
        gc.collect()
        self.assertEqual(interop.allocations(), [])
        super().tearDown()

    def context(self, device=0):
        sp_numba.install()
        return self.cuda.fake_create_context(device)

    def requested(self, device=0):
        return streampool.stats(device)["requested_bytes.all.current"]


class Memalloc(NumbaTestCase):
    def test_arrays_come_from_streampool_and_go_back(self):
        ctx = self.context(1)
        mem = ctx.memalloc(3000)
        a = interop.allocation(int(mem.handle))
        self.assertEqual((a.size, a.device, a.stream, a.origin), (3000, 1, 0, "numba"))
        self.assertEqual(self.requested(1), 3000)
        del mem
        gc.collect()
        self.assertEqual(self.requested(1), 0)

    def test_a_view_keeps_the_memory_alive(self):
        ctx = self.context()
        mem = ctx.memalloc(1 * MIB)
        view = mem.view(4096)
        del mem
        gc.collect()
        self.assertEqual(self.requested(), 1 * MIB)  # the view still holds it
        del view
        gc.collect()
        self.assertEqual(self.requested(), 0)

    def test_size_zero_owns_nothing(self):
        ctx = self.context()
        mem = ctx.memalloc(0)
        self.assertEqual(int(mem.handle), 0)
        self.assertEqual(len(ctx.memory_manager.allocations), 0)

    def test_out_of_memory(self):
        fresh_sim(devices=1, capacity=64 * MIB)
        ctx = self.context()
        with self.assertRaises(interop.OutOfMemoryError):
            ctx.memalloc(128 * MIB)


class Cleanup(NumbaTestCase):
    def test_defer_cleanup_holds_frees_until_the_outermost_block_ends(self):
        ctx = self.context()
        first, second = ctx.memalloc(1 * MIB), ctx.memalloc(2 * MIB)
        with ctx.defer_cleanup():
            with ctx.defer_cleanup():
                del first
                gc.collect()
                self.assertEqual(self.requested(), 3 * MIB)
            del second
            gc.collect()
            self.assertEqual(self.requested(), 3 * MIB)  # the outer block still defers
        self.assertEqual(self.requested(), 0)

    def test_frees_run_even_when_the_block_raises(self):
        ctx = self.context()
        mem = ctx.memalloc(1 * MIB)
        with self.assertRaises(KeyError):
            with ctx.memory_manager.defer_cleanup():
                del mem
                gc.collect()
                raise KeyError("inside")
        self.assertEqual(self.requested(), 0)

    def test_reset_frees_every_array_of_the_context(self):
        ctx = self.context()
        kept = [ctx.memalloc(1 * MIB) for _ in range(3)]
        self.assertEqual(self.requested(), 3 * MIB)
        ctx.reset()
        self.assertEqual(self.requested(), 0)
        self.assertEqual(len(ctx.memory_manager.allocations), 0)
        del kept  # their owners are gone: nothing is freed twice
        gc.collect()
        again = ctx.memalloc(1 * MIB)
        self.assertEqual(self.requested(), 1 * MIB)
        del again


class Info(NumbaTestCase):
    def test_memory_info_counts_streampool_s_cache_as_free(self):
        ctx = self.context()
        state = self.cuda.fake_state
        mem = ctx.memalloc(8 * MIB)
        del mem
        gc.collect()
        cached = streampool.stats(0)["reserved_bytes.all.current"] - streampool.stats(0)["allocated_bytes.all.current"]
        self.assertGreater(cached, 0)
        info = ctx.memory_manager.get_memory_info()
        self.assertEqual((info.free, info.total), (state.free + cached, state.total))
        self.assertEqual(ctx.deallocations.memory_capacity, 0)  # the context's own list: Numba's business
        self.assertEqual(ctx.memory_manager.deallocations.memory_capacity, state.total)  # initialize()

    def test_ipc_handle_of_a_block_inside_a_segment(self):
        ctx = self.context()
        mem = ctx.memalloc(1 * MIB)
        ptr = int(mem.handle)
        self.cuda.fake_state.extents[ptr] = (ptr - 4096, ptr + 1 * MIB)  # a block 4 KiB into its segment
        handle = ctx.memory_manager.get_ipc_handle(mem)
        self.assertEqual((handle.handle, handle.offset, handle.size), (("ipc", ptr - 4096), 4096, 1 * MIB))
        del mem, handle

    def test_ipc_refusals_name_the_cause(self):
        ctx = self.context()
        mem = ctx.memalloc(4096)
        self.cuda.fake_state.ipc_fails = "CUDA_ERROR_INVALID_VALUE"
        with self.assertRaisesRegex(streampool.StreampoolError,
                                    r"CUDA cannot export this memory \(CUDA_ERROR_INVALID_VALUE\).*expandable_segments"):
            ctx.memory_manager.get_ipc_handle(mem)
        del mem


class AsyncBackendIpc(NumbaTestCase):
    config = "backend:cudaMallocAsync"

    def test_ipc_needs_the_native_backend(self):
        ctx = self.context()
        mem = ctx.memalloc(4096)
        with self.assertRaisesRegex(streampool.StreampoolError, "IPC handles need streampool's native backend"):
            ctx.memory_manager.get_ipc_handle(mem)
        del mem


class Install(NumbaTestCase):
    def test_refused_after_numba_made_a_context_with_its_own_manager(self):
        self.cuda.fake_create_context(0)  # Numba's first CUDA call, before install()
        with self.assertRaisesRegex(streampool.StreampoolError,
                                    r"Numba already created its CUDA context on device 0 with _DefaultManager"):
            sp_numba.install()
        self.assertIsNone(self.cuda.fake_state.manager)

    def test_install_twice_and_contexts_of_ours_are_fine(self):
        self.context(0)
        self.assertIs(sp_numba.install(), sp_numba.manager_class())
        self.assertIs(self.cuda.fake_state.manager, sp_numba.manager_class())

    def test_the_environment_variable_s_attribute(self):
        # NUMBA_CUDA_MEMORY_MANAGER=streampool.numba: Numba imports the module and reads this.
        self.assertIs(sp_numba._numba_memory_manager, sp_numba.StreampoolNumbaManager)
        self.assertTrue(issubclass(sp_numba._numba_memory_manager, self.cuda.HostOnlyCUDAMemoryManager))
        self.assertEqual(sp_numba._numba_memory_manager(context=None).interface_version, 1)
        with self.assertRaises(AttributeError):
            sp_numba.no_such_name


class WithoutNumba(unittest.TestCase):
    def test_install_and_the_class_say_numba_is_missing(self):
        sp_numba._manager_class = None
        with absent(["numba", "numba.cuda", "numba.cuda.cudadrv"]):
            for name, call in (("streampool.numba.install()", sp_numba.install),
                               ("streampool.numba", lambda: sp_numba.StreampoolNumbaManager)):
                with self.subTest(name=name):
                    with self.assertRaises(streampool.StreampoolError) as caught:
                        call()
                    self.assertIn(f"{name} needs Numba's CUDA target (numba.cuda), which is not importable",
                                  str(caught.exception))
                    self.assertIsInstance(caught.exception.__cause__, ImportError)


if __name__ == "__main__":
    unittest.main()
