"""streampool.cupy — CuPy's device memory from streampool, the same allocator PyTorch (after
streampool.install()), Numba (streampool.numba) and C code use in this process.

    import cupy, streampool.cupy
    pool = streampool.cupy.install()          # cupy.cuda.set_allocator(pool.malloc), checked
    x = cupy.arange(10)                       # on CuPy's current stream, from streampool
    pool.used_bytes(), pool.total_bytes()     # streampool's statistics of the current device
    pool.free_all_blocks()                    # streampool.empty_cache()

    with cupy.cuda.using_allocator(streampool.cupy.malloc):   # or only inside a block
        y = cupy.zeros(1 << 20)

Each allocation is made on CuPy's current device and stream (cupy.cuda.get_current_stream()) and
freed, when CuPy drops its last reference, in stream order (Note [Stream order of CuPy's memory]).
Importing this module does not import CuPy; the functions that need it raise StreampoolError when
it is absent. See docs/integrations/cupy.md.

Note [Stream order of CuPy's memory]
CuPy's own pool keeps one arena per stream: a freed block serves later allocations on the stream
it was allocated on. streampool does the same (a block belongs to its allocation stream; other
streams get it only after that stream's work is done, with cross_stream_reuse:True, or after
empty_cache), so code that is correct with CuPy's pool is correct here. Memory used on another
stream than its allocation stream needs the same care as with CuPy's pool: synchronise, or
allocate on the stream that uses it.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any, Optional

from . import _core, interop
from ._library import StreampoolError

ORIGIN = "cupy"


def _import_cupy(what: str):
    """cupy, or a StreampoolError naming what needs it (instead of a bare ModuleNotFoundError)."""
    try:
        import cupy
    except ImportError as e:
        raise StreampoolError(f"{what} needs CuPy, which is not importable here ({e}); install it "
                              "(pip install cupy-cuda12x or cupy-cuda13x, matching your CUDA), or use streampool "
                              "without it") from e
    return cupy


class _Owner:
    """Owns one streampool allocation for CuPy's UnownedMemory: freed when CuPy drops the memory."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr

    def __del__(self) -> None:
        if sys.is_finalizing():  # the process is ending: its memory goes with it
            return
        try:
            interop.free(self.ptr)
        except Exception as e:  # a destructor must not raise; say what stays allocated
            warnings.warn(f"streampool.cupy: freeing {self.ptr:#x} failed (it stays allocated): {e}",
                          RuntimeWarning, stacklevel=1)


def malloc(size: int):
    """CuPy's allocator interface (cupy.cuda.set_allocator / using_allocator): a
    cupy.cuda.MemoryPointer to `size` bytes on CuPy's current device and stream, from streampool.
    Raises cupy.cuda.memory.OutOfMemoryError (with streampool's message) when the memory is not there."""
    cupy = _import_cupy("streampool.cupy.malloc")
    device = cupy.cuda.runtime.getDevice()
    if size == 0:  # as CuPy's pool: a null pointer that knows its device
        return cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(0, 0, None, device), 0)
    stream = cupy.cuda.get_current_stream().ptr
    try:
        ptr = interop.allocate(size, device, stream, ORIGIN)
    except interop.OutOfMemoryError as e:
        error = cupy.cuda.memory.OutOfMemoryError(size, -1)
        error.args = (str(e),)  # CuPy's type (callers catch it), streampool's message
        raise error from e
    memory = cupy.cuda.UnownedMemory(ptr, size, _Owner(ptr), device)
    return cupy.cuda.MemoryPointer(memory, 0)


class StreampoolMemoryPool:
    """The parts of cupy.cuda.MemoryPool that CuPy users call, over streampool: malloc (the
    allocator), used_bytes / total_bytes / free_bytes (streampool's statistics of the current
    device: shared by every library using streampool, not CuPy's share alone; see
    streampool.interop.usage() for that), free_all_blocks (streampool.empty_cache(): every
    device, every stream) and set_limit (streampool.set_memory_fraction: one budget for all)."""

    malloc = staticmethod(malloc)  # the module's function itself: pool().malloc is streampool.cupy.malloc

    def _stats(self):
        cupy = _import_cupy("streampool.cupy.StreampoolMemoryPool")
        return _core.stats(cupy.cuda.runtime.getDevice())

    def used_bytes(self) -> int:
        """Bytes in live allocations (allocated_bytes.all.current, rounded sizes)."""
        return int(self._stats()["allocated_bytes.all.current"])

    def total_bytes(self) -> int:
        """Bytes streampool holds from the driver (reserved_bytes.all.current)."""
        return int(self._stats()["reserved_bytes.all.current"])

    def free_bytes(self) -> int:
        """Bytes held but unused, ready for the next allocation (total_bytes - used_bytes)."""
        s = self._stats()
        return int(s["reserved_bytes.all.current"] - s["allocated_bytes.all.current"])

    def free_all_blocks(self, stream: Any = None) -> None:
        """Returns streampool's cached, unused memory to the driver (all streams; `stream` is
        accepted for CuPy's signature)."""
        _core.empty_cache()

    def set_limit(self, size: Optional[int] = None, fraction: Optional[float] = None) -> None:
        """Caps streampool's memory on the current device (all libraries together) at `size`
        bytes or `fraction` of the device, as CuPy's MemoryPool.set_limit: neither, or a limit
        of 0 bytes, means no cap."""
        cupy = _import_cupy("streampool.cupy.StreampoolMemoryPool.set_limit")
        if size is not None and fraction is not None:
            raise ValueError("streampool.cupy: set_limit takes size or fraction, not both")
        total = cupy.cuda.runtime.memGetInfo()[1]
        if fraction is not None:
            if not 0 <= fraction <= 1:
                raise ValueError(f"streampool.cupy: set_limit fraction must be in [0, 1], not {fraction}")
            size = fraction * total
        if size is not None and size < 0:
            raise ValueError(f"streampool.cupy: set_limit size must be >= 0, not {size}")
        capped = 1.0 if not size else min(1.0, size / total)  # CuPy: 0 = no limit
        _core.set_memory_fraction(capped, cupy.cuda.runtime.getDevice())


_pool = StreampoolMemoryPool()


def pool() -> StreampoolMemoryPool:
    """The process's StreampoolMemoryPool (stateless: every one describes the same allocator)."""
    return _pool


def install() -> StreampoolMemoryPool:
    """Makes streampool CuPy's allocator (cupy.cuda.set_allocator(malloc)) and returns the
    pool. Call it before CuPy allocates: raises StreampoolError when CuPy's default pool already
    holds live memory on the current device (those arrays would stay in CuPy's pool, outside
    streampool's budget and statistics); memory CuPy's pool only caches is returned to the driver
    first. Also raises inside cupy.cuda.using_allocator (CuPy refuses the change there)."""
    cupy = _import_cupy("streampool.cupy.install()")
    default = cupy.get_default_memory_pool()
    used = default.used_bytes()
    if used:
        raise StreampoolError(
            f"streampool.cupy.install(): CuPy's own memory pool already holds {used} bytes of live arrays on this "
            "device; they would stay outside streampool (its budget, statistics, and memory the other libraries "
            "could reuse). Call streampool.cupy.install() before the first CuPy allocation, or delete those arrays "
            "first (then cupy.get_default_memory_pool().free_all_blocks())")
    default.free_all_blocks()
    try:
        cupy.cuda.set_allocator(malloc)
    except ValueError as e:
        raise StreampoolError(f"streampool.cupy.install(): CuPy refused the allocator: {e}") from e
    return _pool


def uninstall() -> None:
    """Gives CuPy its default memory pool back (arrays made meanwhile keep their streampool memory)."""
    cupy = _import_cupy("streampool.cupy.uninstall()")
    try:
        cupy.cuda.set_allocator(cupy.get_default_memory_pool().malloc)
    except ValueError as e:
        raise StreampoolError(f"streampool.cupy.uninstall(): CuPy refused the allocator: {e}") from e
