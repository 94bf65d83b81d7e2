"""streampool.numba against Numba's own classes, where numba is importable (skipped otherwise; CI
has no Numba): the plugin built on the real HostOnlyCUDAMemoryManager, GetIpcHandleMixin,
AutoFreePointer, OwnedPointer and pending-deallocation list, on the simulated device. No GPU: the
context is a stand-in holding the device, and the few driver calls the plugin reaches
(cuMemGetInfo, and cuMemGetAddressRange / cuIpcGetMemHandle for IPC) are replaced on Numba's
driver object for the test."""

from __future__ import annotations

import gc
import importlib.util
import sys
import types
import unittest

import streampool
import streampool.interop as interop
import streampool.numba as sp_numba
from sim_support import SimTestCase

MIB = 1 << 20


def _real_numba_cuda():
    if importlib.util.find_spec("numba") is None or "numba" in sys.modules and sys.modules["numba"] is None:
        return None
    try:
        from numba import cuda
        from numba.cuda.cudadrv import driver
    except Exception:  # an install that cannot load its CUDA target at all
        return None
    return cuda, driver


REAL = _real_numba_cuda()


class _Device:
    id = 0

    @staticmethod
    def get_device_identity():
        return {"pci_domain_id": 0, "pci_bus_id": 1, "pci_device_id": 0}


class _Context:
    """What the plugin reads of Numba's Context: its device."""

    def __init__(self):
        self.device = _Device()


@unittest.skipIf(REAL is None, "numba is not importable here")
class RealNumbaClasses(SimTestCase):
    def setUp(self):
        super().setUp()
        sp_numba._manager_class = None
        self.cuda, self.driver = REAL
        self.patched = {}
        # Numba makes its driver module's logger when the driver initialises (on a GPU, before any
        # context exists); its pending-deallocation list logs through it.
        self.made_logger = not hasattr(self.driver, "_logger")
        if self.made_logger:
            import logging
            self.driver._logger = logging.getLogger("numba.cuda.cudadrv.driver")

    def tearDown(self):
        for name in self.patched:
            self.driver.driver.__dict__.pop(name, None)
        sp_numba._manager_class = None
        gc.collect()
        if self.made_logger:
            del self.driver._logger
        self.assertEqual(interop.allocations(), [])
        super().tearDown()

    def patch_driver(self, name, function):
        self.patched[name] = True
        setattr(self.driver.driver, name, function)  # an instance attribute wins over Driver.__getattr__

    def manager(self):
        self.context = _Context()
        return sp_numba.manager_class()(context=self.context)

    def test_install_goes_through_numba_s_own_check(self):
        cls = sp_numba.install()  # set_memory_manager instantiates it with context=None
        self.assertTrue(issubclass(cls, self.cuda.HostOnlyCUDAMemoryManager))
        self.assertTrue(issubclass(cls, self.cuda.GetIpcHandleMixin))
        self.assertIs(self.driver._memory_manager, cls)

    def test_install_refused_after_numba_s_own_context(self):
        own = types.SimpleNamespace(id=0, primary_context=types.SimpleNamespace(memory_manager=object()))
        self.driver.driver.devices[0] = own  # as Numba's first CUDA call leaves it
        try:
            with self.assertRaisesRegex(streampool.StreampoolError, "already created its CUDA context on device 0"):
                sp_numba.install()
        finally:
            self.driver.driver.devices.pop(0)

    def test_memalloc_views_and_frees(self):
        manager = self.manager()
        mem = manager.memalloc(1 * MIB)
        ptr = mem.device_ctypes_pointer.value
        self.assertEqual(interop.allocation(ptr).origin, "numba")
        view = mem.view(4096)
        self.assertEqual(view.device_ctypes_pointer.value, ptr + 4096)
        del mem
        gc.collect()
        self.assertIsNotNone(interop.allocation(ptr), "a live view lost its memory")
        del view
        gc.collect()
        self.assertIsNone(interop.allocation(ptr))
        self.assertEqual(streampool.stats(0)["allocated_bytes.all.current"], 0)

    def test_defer_cleanup_and_reset(self):
        manager = self.manager()
        mem = manager.memalloc(1 * MIB)
        ptr = mem.device_ctypes_pointer.value
        with manager.defer_cleanup():
            del mem
            gc.collect()
            self.assertIsNotNone(interop.allocation(ptr))
        self.assertIsNone(interop.allocation(ptr))
        kept = [manager.memalloc(MIB) for _ in range(3)]
        manager.reset()
        self.assertEqual(interop.allocations(), [])
        del kept
        gc.collect()

    def test_memory_info_through_numba_s_driver(self):
        nvidia_bindings = getattr(self.driver, "USE_NV_BINDING", True)  # numba-cuda: always

        def cu_mem_get_info(*args):  # the NVIDIA bindings return the values; ctypes fills byref arguments
            if not args:
                if nvidia_bindings:
                    return 60 * MIB, 80 * MIB
                raise TypeError("this function takes at least 2 arguments (0 given)")
            args[0]._obj.value, args[1]._obj.value = 60 * MIB, 80 * MIB
            return None

        self.patch_driver("cuMemGetInfo", cu_mem_get_info)
        manager = self.manager()
        manager.initialize()
        self.assertEqual(manager.deallocations.memory_capacity, 80 * MIB)
        info = manager.get_memory_info()
        self.assertEqual((info.free, info.total), (60 * MIB, 80 * MIB))

    def test_ipc_handle_offset_from_the_segment_base(self):
        manager = self.manager()
        mem = manager.memalloc(1 * MIB)
        ptr = mem.device_ctypes_pointer.value
        base = ptr - 8192

        def address_range(*args):
            if len(args) == 1:  # the NVIDIA bindings: (base, size)
                return base, 4 * MIB
            args[0]._obj.value, args[1]._obj.value = base, 4 * MIB
            return None

        calls = []

        def ipc_get_mem_handle(*args):
            calls.append(args)
            return types.SimpleNamespace(reserved=b"\0" * 64) if len(args) == 1 else None

        self.patch_driver("cuMemGetAddressRange", address_range)
        self.patch_driver("cuIpcGetMemHandle", ipc_get_mem_handle)
        handle = manager.get_ipc_handle(mem)
        self.assertEqual((handle.offset, handle.size), (8192, 1 * MIB))
        self.assertEqual(handle.source_info, _Device.get_device_identity())
        self.assertEqual(int(getattr(calls[0][-1], "value", calls[0][-1])), base)  # the segment's base
        del mem, handle


if __name__ == "__main__":
    unittest.main()
