"""streampool.numba — a Numba External Memory Management (EMM) plugin: Numba's device arrays from
streampool, the same allocator PyTorch (after streampool.install()), CuPy (streampool.cupy) and C
code use in this process.

    import streampool.numba
    streampool.numba.install()          # numba.cuda.set_memory_manager(...), checked; before Numba's first CUDA call
    # or, without code: NUMBA_CUDA_MEMORY_MANAGER=streampool.numba

The plugin (StreampoolNumbaManager, a numba.cuda.HostOnlyCUDAMemoryManager: pinned and mapped host
memory stay Numba's) implements memalloc, get_memory_info, get_ipc_handle, reset and
defer_cleanup (Note [Numba's frees]). Importing this module does not import Numba; the class is
built at first use (the module's __getattr__), and StreampoolError says so when Numba is absent.
See docs/integrations/numba.md.

Note [Numba's frees]
Numba's EMM interface passes no stream: allocations are ordered on the legacy default stream
(stream 0), which waits for the work of blocking streams (Numba's cuda.stream()) submitted before
it. Numba's own manager queues frees and runs them in batches (cuMemFree synchronises the device);
streampool's free is stream-ordered and cheap, so a freed array returns to the pool at once, where
PyTorch or CuPy can take it. Inside numba.cuda.defer_cleanup() (and the plugin's own
defer_cleanup) frees are queued in Numba's pending-deallocation list instead and run when the
outermost block exits. As in Numba's manager, each allocation is an AutoFreePointer kept in the
manager's `allocations`, so views keep their memory alive, and reset() (numba.cuda.close(), a
context reset) frees every array of the context.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
import warnings
import weakref
from typing import Any, Optional

from . import _core, interop
from ._library import StreampoolError

ORIGIN = "numba"

_manager_class: Optional[type] = None


def _import_numba_cuda(what: str):
    """(numba.cuda, numba.cuda.cudadrv.driver), or a StreampoolError naming what needs them."""
    try:
        from numba import cuda
        from numba.cuda.cudadrv import driver as numba_driver
    except ImportError as e:
        raise StreampoolError(f"{what} needs Numba's CUDA target (numba.cuda), which is not importable here ({e}); "
                              "install it (pip install numba-cuda), or use streampool without it") from e
    return cuda, numba_driver


def _free_quietly(ptr: int) -> None:
    """Frees from a finalizer, where an exception cannot reach anyone: a failure becomes a warning."""
    if sys.is_finalizing():  # the process is ending: its memory goes with it
        return
    try:
        interop.free(ptr)
    except Exception as e:
        warnings.warn(f"streampool.numba: freeing {ptr:#x} failed (it stays allocated): {e}", RuntimeWarning,
                      stacklevel=1)


def _finalizer(allocations: Any, deallocations: Any, ptr: int, size: int):
    """What an AutoFreePointer runs when its last reference goes (Note [Numba's frees])."""

    def core() -> None:
        if allocations:
            allocations.pop(ptr, None)
        if deallocations.is_disabled:
            deallocations.add_item(_free_quietly, ptr, size)
        else:
            _free_quietly(ptr)

    return core


def _device_pointer(numba_driver: Any, ptr: int) -> Any:
    """`ptr` as the pointer type numba's MemoryPointer takes: a CUdeviceptr with the NVIDIA
    bindings (numba-cuda always; numba < 0.61 when NUMBA_CUDA_USE_NVIDIA_BINDING=1), else c_void_p."""
    if getattr(numba_driver, "USE_NV_BINDING", hasattr(numba_driver, "binding")):
        return numba_driver.binding.CUdeviceptr(ptr)
    return ctypes.c_void_p(ptr)


def _device_memory_info(numba_driver: Any):
    """(free, total) bytes of the current context's device, from the driver Numba uses."""
    try:
        free, total = numba_driver.driver.cuMemGetInfo()  # the NVIDIA bindings return the values
        return int(free), int(total)
    except TypeError:  # numba's ctypes binding fills arguments
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        numba_driver.driver.cuMemGetInfo(ctypes.byref(free), ctypes.byref(total))
        return free.value, total.value


def _build(cuda: Any, numba_driver: Any) -> type:
    class StreampoolNumbaManager(cuda.GetIpcHandleMixin, cuda.HostOnlyCUDAMemoryManager):
        """Numba's device memory from streampool's shared allocator (streampool.numba)."""

        def initialize(self) -> None:
            # As Numba's own manager: the pending-deallocation list flushes at a share of the device.
            if not self.deallocations.memory_capacity:
                self.deallocations.memory_capacity = self.get_memory_info().total

        def memalloc(self, size: int):
            device = int(self.context.device.id)
            ptr = interop.allocate(int(size), device, 0, ORIGIN)  # Note [Numba's frees]: stream 0
            ctx = weakref.proxy(self.context)
            finalizer = _finalizer(self.allocations, self.deallocations, ptr, size) if ptr else None
            mem = numba_driver.AutoFreePointer(ctx, _device_pointer(numba_driver, ptr), size,
                                              finalizer=finalizer)
            if not ptr:  # size 0: nothing to own
                return mem
            self.allocations[ptr] = mem
            return mem.own()

        def get_memory_info(self):
            """Free and total bytes of the device; free counts what streampool holds unused for
            this device (cached blocks serve Numba's next allocations)."""
            free, total = _device_memory_info(numba_driver)
            s = _core.stats(int(self.context.device.id))
            cached = max(0, int(s["reserved_bytes.all.current"]) - int(s["allocated_bytes.all.current"]))
            return cuda.MemoryInfo(free=min(total, free + cached), total=total)

        def get_ipc_handle(self, memory):
            """An IPC handle of the streampool segment under `memory`, with its offset (Numba's
            GetIpcHandleMixin). CUDA exports only memory from cudaMalloc: streampool's native
            backend without expandable_segments."""
            if _core.backend_name() != "native":
                raise StreampoolError("streampool.numba: IPC handles need streampool's native backend (CUDA cannot "
                                      "export cudaMallocAsync pool memory through cuIpcGetMemHandle); this process "
                                      f"uses backend:{_core.backend_name()}")
            try:
                return super().get_ipc_handle(memory)
            except Exception as e:
                raise StreampoolError(f"streampool.numba: CUDA cannot export this memory ({e}); IPC handles need "
                                      "segments from cudaMalloc (expandable_segments:False)") from e

        @contextlib.contextmanager
        def defer_cleanup(self):
            try:
                with super().defer_cleanup():
                    yield
            finally:
                self.deallocations.clear()  # runs the queued frees once no outer defer_cleanup holds them

        @property
        def interface_version(self) -> int:
            return 1

    StreampoolNumbaManager.__module__ = __name__
    return StreampoolNumbaManager


def manager_class() -> type:
    """The EMM plugin class (built once, from the numba.cuda importable here)."""
    global _manager_class
    if _manager_class is None:
        cuda, numba_driver = _import_numba_cuda("streampool.numba")
        _manager_class = _build(cuda, numba_driver)
    return _manager_class


def __getattr__(name: str):
    # NUMBA_CUDA_MEMORY_MANAGER=streampool.numba makes Numba read `_numba_memory_manager`.
    if name in ("StreampoolNumbaManager", "_numba_memory_manager"):
        return manager_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def install() -> type:
    """numba.cuda.set_memory_manager(StreampoolNumbaManager), before Numba creates a CUDA context.
    Raises StreampoolError when Numba already has a context with another memory manager (Numba
    binds a context to its manager when it creates it: that context's arrays would keep using
    Numba's own allocator). Returns the plugin class."""
    cuda, numba_driver = _import_numba_cuda("streampool.numba.install()")
    cls = manager_class()
    for device in list(numba_driver.driver.devices.values()):
        context = getattr(device, "primary_context", None)
        if context is not None and not isinstance(context.memory_manager, cls):
            raise StreampoolError(
                f"streampool.numba.install(): Numba already created its CUDA context on device {device.id} with "
                f"{type(context.memory_manager).__name__}, and keeps it for that context's arrays. Call "
                "streampool.numba.install() before Numba's first CUDA call, or set "
                "NUMBA_CUDA_MEMORY_MANAGER=streampool.numba in the environment")
    cuda.set_memory_manager(cls)
    return cls
