"""Small stand-ins for the parts of CuPy and Numba that streampool.cupy and streampool.numba use,
so that the adapters' logic runs in CI on the simulated device, without a GPU or the libraries.
Each mirrors the real API's names, signatures and behaviour where the adapters depend on them
(cupy/cuda/memory.pyx of CuPy 14; numba_cuda/numba/cuda/cudadrv/driver.py of numba-cuda 0.30):
CuPy's allocator switch refusing a change inside using_allocator, UnownedMemory keeping its owner,
Numba's AutoFreePointer reference counts, _PendingDeallocs with disable(), HostOnlyCUDAMemoryManager's
reset and defer_cleanup. installed() puts them in sys.modules for the length of a `with` block."""

from __future__ import annotations

import contextlib
import ctypes
import sys
import threading
import types
import weakref
from collections import deque
from typing import Dict, Iterator, List


# --- CuPy --------------------------------------------------------------------------------------

class _CupyOutOfMemoryError(MemoryError):
    def __init__(self, size, total, limit=0):
        self._size, self._total, self._limit = size, total, limit
        super().__init__(f"Out of memory allocating {size:,} bytes")


class _UnownedMemory:
    def __init__(self, ptr, size, owner, device_id=-1):
        if device_id < 0 and ptr == 0:
            raise RuntimeError("UnownedMemory requires explicit device ID for a null pointer.")
        self.ptr, self.size, self._owner, self.device_id = ptr, size, owner, device_id


class _MemoryPointer:
    def __init__(self, mem, offset):
        assert mem.ptr != 0 or offset == 0
        self.mem, self.ptr, self.device_id = mem, mem.ptr + offset, mem.device_id


class _Stream:
    def __init__(self, ptr):
        self.ptr = ptr


class FakeCupyPool:
    """cupy.get_default_memory_pool(): counts what a test says it holds."""

    def __init__(self):
        self.used = 0
        self.cached = 0
        self.freed_all = 0

    def malloc(self, size):  # CuPy's own pool: a different allocator
        raise AssertionError("the fake CuPy pool's malloc is not expected to be called")

    def used_bytes(self):
        return self.used

    def total_bytes(self):
        return self.used + self.cached

    def free_all_blocks(self, stream=None):
        self.cached = 0
        self.freed_all += 1


def make_cupy() -> types.ModuleType:
    cupy = types.ModuleType("cupy")
    cuda = types.ModuleType("cupy.cuda")
    runtime = types.ModuleType("cupy.cuda.runtime")
    memory = types.ModuleType("cupy.cuda.memory")
    state = types.SimpleNamespace(device=0, stream=0, total=80 << 30, pool=FakeCupyPool())
    local = threading.local()

    def default_malloc(size):
        return state.pool.malloc(size)

    state.allocator = default_malloc
    runtime.getDevice = lambda: state.device
    runtime.memGetInfo = lambda: (state.total // 2, state.total)
    memory.OutOfMemoryError = _CupyOutOfMemoryError

    def set_allocator(allocator=None):
        if getattr(local, "allocator", None) is not None:
            raise ValueError("Can't change the global allocator inside `using_allocator` context manager")
        state.allocator = default_malloc if allocator is None else allocator

    def get_allocator():
        allocator = getattr(local, "allocator", None)
        return state.allocator if allocator is None else allocator

    @contextlib.contextmanager
    def using_allocator(allocator=None):
        previous = getattr(local, "allocator", None)
        local.allocator = allocator
        try:
            yield
        finally:
            local.allocator = previous

    cuda.runtime, cuda.memory = runtime, memory
    cuda.UnownedMemory, cuda.MemoryPointer = _UnownedMemory, _MemoryPointer
    cuda.get_current_stream = lambda: _Stream(state.stream)
    cuda.set_allocator, cuda.get_allocator, cuda.using_allocator = set_allocator, get_allocator, using_allocator
    cupy.cuda = cuda
    cupy.get_default_memory_pool = lambda: state.pool
    cupy.fake_state = state
    return cupy


# --- Numba -------------------------------------------------------------------------------------

class _UniqueDict(dict):
    def __setitem__(self, key, value):
        if key in self:
            raise AssertionError(f"key already in dictionary: {key!r}")
        super().__setitem__(key, value)


class _PendingDeallocs:
    """numba's: queued frees, flushed past a count or a byte share unless disabled."""

    def __init__(self, capacity=0):
        self._cons = deque()
        self._disable_count = 0
        self._size = 0
        self.memory_capacity = capacity

    def add_item(self, dtor, handle, size=0):
        self._cons.append((dtor, handle, size))
        self._size += int(size)
        if len(self._cons) > 10 or self._size > int(self.memory_capacity * 0.2):
            self.clear()

    def clear(self):
        if not self.is_disabled:
            while self._cons:
                dtor, handle, _ = self._cons.popleft()
                dtor(handle)
            self._size = 0

    @contextlib.contextmanager
    def disable(self):
        self._disable_count += 1
        try:
            yield
        finally:
            self._disable_count -= 1

    @property
    def is_disabled(self):
        return self._disable_count > 0

    def __len__(self):
        return len(self._cons)


class _CUdeviceptr:
    def __init__(self, value=0):
        self.value = int(value)

    def __int__(self):
        return self.value


class _MemoryPointerN:
    def __init__(self, context, pointer, size, owner=None, finalizer=None):
        if isinstance(pointer, ctypes.c_void_p):
            pointer = _CUdeviceptr(pointer.value or 0)
        self.context, self.device_pointer, self.size = context, pointer, size
        self.is_managed = finalizer is not None
        self.refct = 1
        self.handle = self.device_pointer
        self._owner = owner
        if finalizer is not None:
            self._finalizer = weakref.finalize(self, finalizer)

    @property
    def owner(self):
        return self if self._owner is None else self._owner

    def own(self):
        return _OwnedPointer(weakref.proxy(self))

    def free(self):
        if self.is_managed:
            if not self._finalizer.alive:
                raise RuntimeError("Freeing dead memory")
            self._finalizer()

    def view(self, start, stop=None):
        size = (self.size - start) if stop is None else stop - start
        view = _MemoryPointerN(self.context, _CUdeviceptr(int(self.device_pointer) + start), size,
                               owner=self.owner)
        return _OwnedPointer(weakref.proxy(self.owner), view)

    @property
    def device_pointer_value(self):
        return int(self.device_pointer) or None


class _AutoFreePointer(_MemoryPointerN):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.refct -= 1


class _OwnedPointer:
    def __init__(self, memptr, view=None):
        self._mem = memptr
        self._view = self._mem if view is None else view
        mem = self._mem

        def deref():
            try:
                mem.refct -= 1
                if mem.refct == 0:
                    mem.free()
            except ReferenceError:
                pass

        self._mem.refct += 1
        weakref.finalize(self, deref)

    def __getattr__(self, name):
        return getattr(self._view, name)


class _BaseCUDAMemoryManager:
    def __init__(self, *args, **kwargs):
        if "context" not in kwargs:
            raise RuntimeError("Memory manager requires a context")
        self.context = kwargs.pop("context")


class _HostOnlyCUDAMemoryManager(_BaseCUDAMemoryManager):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.allocations = _UniqueDict()
        self.deallocations = _PendingDeallocs()

    def reset(self):
        self.allocations.clear()
        self.deallocations.clear()

    @contextlib.contextmanager
    def defer_cleanup(self):
        with self.deallocations.disable():
            yield


class FakeIpcHandle:
    def __init__(self, base, handle, size, source_info=None, offset=0):
        self.base, self.handle, self.size, self.source_info, self.offset = base, handle, size, source_info, offset


class FakeNumbaDevice:
    def __init__(self, devnum):
        self.id = devnum
        self.primary_context = None

    def get_device_identity(self):
        return {"pci_bus_id": self.id}


class FakeNumbaContext:
    """numba's Context, as far as the adapter meets it: its device and its memory manager."""

    def __init__(self, device, manager_class):
        self.device = device
        self.deallocations = _PendingDeallocs()
        self.memory_manager = manager_class(context=self)
        self.memory_manager.initialize()

    def memalloc(self, size):
        return self.memory_manager.memalloc(size)

    @contextlib.contextmanager
    def defer_cleanup(self):  # numba's Context.defer_cleanup
        with self.memory_manager.defer_cleanup():
            with self.deallocations.disable():
                yield

    def reset(self):
        self.memory_manager.reset()
        self.deallocations.clear()


def make_numba() -> Dict[str, types.ModuleType]:
    numba = types.ModuleType("numba")
    cuda = types.ModuleType("numba.cuda")
    cudadrv = types.ModuleType("numba.cuda.cudadrv")
    drv = types.ModuleType("numba.cuda.cudadrv.driver")
    binding = types.SimpleNamespace(CUdeviceptr=_CUdeviceptr)
    state = types.SimpleNamespace(total=80 << 30, free=60 << 30, extents={}, ipc_fails=None, manager=None)

    class _Driver:
        def __init__(self):
            self.devices: Dict[int, FakeNumbaDevice] = {}

        def cuMemGetInfo(self):
            return state.free, state.total

        def cuIpcGetMemHandle(self, base):
            if state.ipc_fails:
                raise RuntimeError(state.ipc_fails)
            return ("ipc", int(base))

    def device_extents(memory):
        ptr = int(memory.handle)
        return state.extents.get(ptr, (ptr, ptr + memory.size))

    class GetIpcHandleMixin:
        def get_ipc_handle(self, memory):
            base, _ = device_extents(memory)
            handle = drv.driver.cuIpcGetMemHandle(base)
            return FakeIpcHandle(memory, handle, memory.size, self.context.device.get_device_identity(),
                                 offset=int(memory.handle) - int(base))

    def set_memory_manager(mm_plugin):
        dummy = mm_plugin(context=None)
        if dummy.interface_version != 1:
            raise RuntimeError(f"EMM Plugin interface has version {dummy.interface_version} - version 1 required")
        state.manager = mm_plugin

    def create_context(devnum=0):
        """What numba does at its first CUDA call on a device: a context bound to the manager set now."""
        device = drv.driver.devices.setdefault(devnum, FakeNumbaDevice(devnum))
        manager = state.manager or _DefaultManager
        device.primary_context = FakeNumbaContext(device, manager)
        return device.primary_context

    class _DefaultManager(_HostOnlyCUDAMemoryManager):  # Numba's own, for "already created" checks
        def initialize(self):
            pass

        @property
        def interface_version(self):
            return 1

    from collections import namedtuple
    drv.binding = binding
    drv.driver = _Driver()
    drv.AutoFreePointer = _AutoFreePointer
    drv.MemoryPointer = _MemoryPointerN
    drv.device_extents = device_extents
    cudadrv.driver = drv
    cuda.cudadrv = cudadrv
    cuda.HostOnlyCUDAMemoryManager = _HostOnlyCUDAMemoryManager
    cuda.GetIpcHandleMixin = GetIpcHandleMixin
    cuda.MemoryPointer = _MemoryPointerN
    cuda.MemoryInfo = namedtuple("MemoryInfo", "free,total")
    cuda.IpcHandle = FakeIpcHandle
    cuda.set_memory_manager = set_memory_manager
    cuda.fake_state = state
    cuda.fake_create_context = create_context
    numba.cuda = cuda
    return {"numba": numba, "numba.cuda": cuda, "numba.cuda.cudadrv": cudadrv, "numba.cuda.cudadrv.driver": drv}


# --- sys.modules -------------------------------------------------------------------------------

@contextlib.contextmanager
def installed(modules: Dict[str, types.ModuleType]) -> Iterator[Dict[str, types.ModuleType]]:
    """`modules` importable by name inside the block; whatever was there before comes back after."""
    saved = {name: sys.modules.get(name) for name in modules}
    sys.modules.update(modules)
    try:
        yield modules
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


@contextlib.contextmanager
def absent(names: List[str]) -> Iterator[None]:
    """`import NAME` raises ImportError inside the block for each name (as when not installed)."""
    saved = {name: sys.modules.get(name) for name in names}
    for name in names:
        sys.modules[name] = None  # the import system's "known missing"
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
