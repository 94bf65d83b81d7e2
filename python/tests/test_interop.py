"""streampool.interop on the simulated device: allocations on the shared allocator tagged with the
library that asked, usage per origin, the snapshot's "origin" marks, stream-ordered frees, and the
errors of bad use (a foreign pointer, a double free, bad arguments, out of memory, after shutdown);
install()'s refusal to split the process over two allocators, with a stand-in extension."""

from __future__ import annotations

import sys
import types
import unittest

import streampool
import streampool.interop as interop
from sim_support import SimTestCase, fresh_sim

MIB = 1 << 20
SIDE_STREAM = 0x7000  # any value: the simulated device takes unknown stream handles as streams


class Allocations(SimTestCase):
    def tearDown(self):
        for a in interop.allocations():
            interop.free(a.ptr)
        super().tearDown()

    def test_allocations_count_in_the_shared_statistics(self):
        p = interop.allocate(1000, 0, 0, "cupy")
        q = interop.allocate(3 * MIB, 1, 0, "numba")
        self.assertEqual(streampool.stats(0)["requested_bytes.all.current"], 1000)
        self.assertEqual(streampool.stats(1)["requested_bytes.all.current"], 3 * MIB)
        a = interop.allocation(p)
        self.assertEqual((a.size, a.device, a.stream, a.origin, a.route), (1000, 0, 0, "cupy", interop.ROUTE_C_API))
        interop.free(p)
        interop.free(q)
        self.assertEqual(streampool.stats(0)["allocated_bytes.all.current"], 0)
        self.assertEqual(streampool.stats(1)["allocated_bytes.all.current"], 0)
        self.assertEqual(interop.allocations(), [])

    def test_usage_per_origin_and_the_rest(self):
        raw = self.alloc(5000)  # through the C API directly, as PyTorch's pluggable route or C code does
        interop.allocate(1000, 0, 0, "cupy")
        interop.allocate(2000, 0, 0, "cupy")
        interop.allocate(300, 0, 0, "numba")
        self.assertEqual(interop.usage(), {0: {"cupy": {"bytes": 3000, "allocations": 2},
                                               "numba": {"bytes": 300, "allocations": 1},
                                               "other": {"bytes": 5000, "allocations": 1}}})
        self.assertEqual(interop.usage(1), {1: {"other": {"bytes": 0, "allocations": 0}}})
        self.free(raw)

    def test_memory_freed_by_one_library_serves_another(self):
        p = interop.allocate(8 * MIB, 0, 0, "cupy")
        interop.free(p)
        reserved = streampool.stats(0)["reserved_bytes.all.current"]
        q = interop.allocate(8 * MIB, 0, 0, "numba")
        self.assertEqual(q, p)  # the same block, from the cache
        self.assertEqual(streampool.stats(0)["reserved_bytes.all.current"], reserved)
        self.assertEqual(streampool.stats(0)["segment.all.allocated"], 1)

    def test_a_block_freed_on_its_stream_is_not_handed_to_another_stream(self):
        p = interop.allocate(4 * MIB, 0, SIDE_STREAM, "cupy")
        interop.free(p)
        q = interop.allocate(4 * MIB, 0, 0, "cupy")  # the legacy stream: not the freed block
        self.assertNotEqual(q, p)
        r = interop.allocate(4 * MIB, 0, SIDE_STREAM, "cupy")  # its own stream: reused
        self.assertEqual(r, p)

    def test_size_zero_allocates_nothing(self):
        self.assertEqual(interop.allocate(0, 0, 0, "cupy"), 0)
        interop.free(0)
        self.assertEqual(streampool.stats(0)["allocation.all.allocated"], 0)

    def test_snapshot_marks_the_blocks_and_trace_entries_of_each_library(self):
        streampool.record_history(True, 1000)
        raw = self.alloc(4096)
        p = interop.allocate(1 * MIB, 0, 0, "cupy")
        q = interop.allocate(2 * MIB, 0, 0, "numba")
        snap = streampool.snapshot()
        origins = {b["address"]: b.get("origin") for s in snap["segments"] for b in s["blocks"]}
        self.assertEqual(origins[p], "cupy")
        self.assertEqual(origins[q], "numba")
        self.assertIsNone(origins[raw])
        allocs = {e["addr"]: e.get("user_metadata") for e in snap["device_traces"][0] if e["action"] == "alloc"}
        self.assertEqual((allocs[p], allocs[q], allocs[raw]), ("cupy", "numba", None))
        from streampool._snapshot import problems
        self.assertEqual(problems(snap), [])  # still what memory_viz reads
        self.free(raw)
        streampool.record_history(False)


class FreesFromTheCollector(SimTestCase):
    def test_a_free_while_this_thread_holds_the_table_s_lock(self):
        # Note [Frees from the garbage collector]: a finalizer can run inside interop's own locked
        # region; it must not deadlock (run on a thread, so that a regression fails, not hangs).
        import threading
        p = interop.allocate(4096, 0, 0, "cupy")
        done = []

        def body():
            with interop._lock:
                interop.free(p)
                interop.allocations()
            done.append(True)

        worker = threading.Thread(target=body, daemon=True)
        worker.start()
        worker.join(10)
        self.assertEqual(done, [True], "interop.free deadlocked on its own lock")
        self.assertIsNone(interop.allocation(p))


class BadUse(SimTestCase):
    def test_a_foreign_pointer_is_refused_and_nothing_is_freed(self):
        raw = self.alloc(4096)  # live, but not allocated through interop
        with self.assertRaisesRegex(streampool.StreampoolError,
                                    r"0x[0-9a-f]+ is not a live allocation of streampool.interop.*Nothing was freed"):
            interop.free(raw)
        self.assertEqual(streampool.stats(0)["allocation.all.current"], 1)
        self.free(raw)

    def test_a_double_free_is_refused(self):
        p = interop.allocate(4096, 0, 0, "cupy")
        interop.free(p)
        with self.assertRaisesRegex(streampool.StreampoolError, "already freed"):
            interop.free(p)

    def test_bad_arguments(self):
        for args, error, pattern in (((-1, 0), ValueError, "size must be >= 0"),
                                     ((1.5, 0), TypeError, "size must be an int, not float"),
                                     ((True, 0), TypeError, "size must be an int, not bool"),
                                     ((16, -1), ValueError, "device must be >= 0"),
                                     ((16, 0, -5), ValueError, "stream must be >= 0")):
            with self.subTest(args=args):
                with self.assertRaisesRegex(error, pattern):
                    interop.allocate(*args)
        with self.assertRaisesRegex(ValueError, "origin must be a non-empty str"):
            interop.allocate(16, 0, 0, "")
        with self.assertRaisesRegex(TypeError, "ptr must be an int"):
            interop.free("0x10")
        self.assertEqual(interop.allocations(), [])

    def test_a_bad_device_is_the_library_message(self):
        with self.assertRaisesRegex(streampool.StreampoolError, r"allocating 16 bytes on device 5 failed \(status 1\)"):
            interop.allocate(16, 5, 0, "cupy")
        self.assertEqual(interop.allocations(), [])


class OutOfMemory(unittest.TestCase):
    def tearDown(self):
        streampool.shutdown()

    def test_out_of_memory_is_its_own_error(self):
        fresh_sim(devices=1, capacity=64 * MIB)
        with self.assertRaises(interop.OutOfMemoryError) as caught:
            interop.allocate(128 * MIB, 0, 0, "cupy")
        self.assertEqual((caught.exception.size, caught.exception.device), (128 * MIB, 0))
        self.assertIn("out of memory allocating 134217728 bytes on device 0", str(caught.exception))
        self.assertIsInstance(caught.exception, streampool.StreampoolError)

    def test_one_budget_for_every_library(self):
        fresh_sim(devices=1, capacity=64 * MIB)
        streampool.set_memory_fraction(0.5)
        p = interop.allocate(20 * MIB, 0, 0, "cupy")
        with self.assertRaises(interop.OutOfMemoryError):
            interop.allocate(20 * MIB, 0, 0, "numba")  # 40 MiB > half of 64 MiB, whoever asks
        interop.free(p)
        q = interop.allocate(20 * MIB, 0, 0, "numba")
        interop.free(q)

    def test_after_shutdown_allocations_say_to_init_again(self):
        fresh_sim(devices=1)
        streampool.shutdown()
        with self.assertRaisesRegex(streampool.StreampoolError, "status 7.*shut down"):
            interop.allocate(16, 0, 0, "cupy")


class _FakeExtension(types.ModuleType):
    def __init__(self):
        super().__init__("streampool._C10")
        self.installed_with = None

    def install(self, config):
        self.installed_with = config


class InstallRefusesASecondAllocator(SimTestCase):
    """With allocations from interop live on the C API's allocator, install() must not give
    PyTorch the extension's allocator (Note [One instance per device])."""

    def test_refused_with_live_allocations_allowed_without(self):
        import streampool._torch as torch_route
        fake_torch = types.ModuleType("torch")
        fake_torch.cuda = types.SimpleNamespace(is_initialized=lambda: False,
                                                memory=types.SimpleNamespace(_get_current_allocator=lambda: "c10"))
        extension = _FakeExtension()
        saved_torch, saved_load = sys.modules.get("torch"), torch_route._load_extension
        sys.modules["torch"] = fake_torch
        torch_route._load_extension = lambda: (extension, "")
        try:
            p = interop.allocate(4096, 0, 0, "cupy")
            with self.assertRaisesRegex(streampool.StreampoolError,
                                        r"1 allocation\(s\) made through streampool.interop .* are live on the C API"):
                torch_route.install(route="extension")
            self.assertIsNone(extension.installed_with)
            self.assertIsNone(torch_route.installed_route())
            interop.free(p)
        finally:
            torch_route._load_extension = saved_load
            if saved_torch is None:
                sys.modules.pop("torch", None)
            else:
                sys.modules["torch"] = saved_torch


class ExtensionRoute(SimTestCase):
    """With the extension installed, allocations go through c10 (torch.cuda.caching_allocator_*),
    which reaches the extension's allocator, and come back there."""

    def setUp(self):
        super().setUp()
        import streampool._extension as extension_state
        self.calls = []
        calls = self.calls

        class OutOfMemoryError(RuntimeError):
            pass

        def alloc(size, device, stream):
            calls.append(("alloc", size, device, stream))
            if size > 1 << 40:
                raise OutOfMemoryError("CUDA out of memory. Tried to allocate ...")
            return 0x10000 + len(calls)

        def delete(ptr):
            calls.append(("delete", ptr))

        fake_torch = types.ModuleType("torch")
        fake_torch.cuda = types.SimpleNamespace(caching_allocator_alloc=alloc, caching_allocator_delete=delete,
                                                OutOfMemoryError=OutOfMemoryError)
        self.saved_torch = sys.modules.get("torch")
        sys.modules["torch"] = fake_torch
        self.extension_state = extension_state
        self.saved_installed = extension_state._installed
        extension_state._installed = types.ModuleType("streampool._C10")

    def tearDown(self):
        self.extension_state._installed = self.saved_installed
        if self.saved_torch is None:
            sys.modules.pop("torch", None)
        else:
            sys.modules["torch"] = self.saved_torch
        super().tearDown()

    def test_allocate_and_free_through_c10(self):
        p = interop.allocate(4096, 1, SIDE_STREAM, "cupy")
        self.assertEqual(interop.allocation(p).route, interop.ROUTE_EXTENSION)
        interop.free(p)
        self.assertEqual(self.calls, [("alloc", 4096, 1, SIDE_STREAM), ("delete", p)])

    def test_out_of_memory_from_c10(self):
        with self.assertRaises(interop.OutOfMemoryError):
            interop.allocate(1 << 41, 0, 0, "cupy")
        self.assertEqual(interop.allocations(), [])

    def test_a_c_api_allocation_goes_back_to_the_c_api(self):
        saved, self.extension_state._installed = self.extension_state._installed, None
        p = interop.allocate(4096, 0, 0, "cupy")  # before install(): the C API's allocator
        self.extension_state._installed = saved
        interop.free(p)  # after: still freed where it came from
        self.assertEqual(self.calls, [])
        self.extension_state._installed = None  # stats() would ask the stand-in extension
        self.assertEqual(streampool.stats(0)["allocation.all.current"], 0)
        self.extension_state._installed = saved


if __name__ == "__main__":
    unittest.main()
