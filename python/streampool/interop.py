"""streampool.interop — raw device memory from the one streampool allocator of this process, for
libraries other than PyTorch (streampool.cupy and streampool.numba are built on it), each
allocation tagged with the library that asked for it.

    import streampool.interop as interop
    ptr = interop.allocate(1 << 20, device=0, stream=stream_handle, origin="mylib")
    ...
    interop.free(ptr)                 # stream-ordered: reusable by `stream` at once, by others later
    interop.usage()                   # {0: {"mylib": {"bytes": ..., "allocations": ...}, "other": ...}}

Note [One instance per device]
PyTorch, CuPy, Numba and C code must draw on one allocator, so that memory one frees serves the
others, one budget (per_process_memory_fraction, set_memory_fraction) bounds them all and one set of
statistics and one snapshot describe them. A process has at most two streampool allocators:
the C API's (libstreampool.so: streampool_alloc/free, which PyTorch's CUDAPluggableAllocator
route, C programs and streampool.init() use) and, after install() took the extension route, the
extension's (python/csrc), which is then PyTorch's c10 CUDA allocator. allocate() picks the one
PyTorch uses: with the extension installed it allocates through c10
(torch.cuda.caching_allocator_alloc, which reaches the extension's raw_alloc_with_stream), else
through the C API. streampool.stats(), snapshot(), empty_cache() and set_memory_fraction() already
answer for that same allocator (Note [Two allocators, one answer] in _core.py). Each allocation
remembers the allocator it came from, so free() returns it there even if install() ran in
between; install() refuses the extension route while allocations made here live on the C API's
allocator (they would split the process over two allocators: _torch.py). On the extension route
the C API itself is served by the extension's allocator (its delegate, Note [C API delegate] in
src/c_api/c_api_delegate.cpp), so C and C++ code of the process (streampool/process_allocator.hpp)
allocates from the allocator PyTorch uses as well.

Note [Origins]
The allocator itself does not know which library asked; this module keeps, for each live
allocation it made, the origin, size, device and stream. usage() sums them per device and origin
("other" is the rest of the device's requested bytes: PyTorch's tensors, C code), and snapshot()
marks the blocks (key "origin") and their "alloc" trace entries ("user_metadata", which
PyTorch's memory_viz shows) of those live allocations (annotate_snapshot below).
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any, Dict, List, NamedTuple, Optional

from ._extension import active as _extension
from ._library import StreampoolError, library

#: C API status of an allocation that found no memory (include/streampool/c_api.h).
_STATUS_OUT_OF_MEMORY = 2

ROUTE_C_API = "c_api"
ROUTE_EXTENSION = "extension"


class OutOfMemoryError(StreampoolError):
    """streampool could not find `size` bytes on the device (the adapters turn it into their
    library's own out-of-memory error)."""

    def __init__(self, message: str, size: int, device: int) -> None:
        super().__init__(message)
        self.size = size
        self.device = device


class Allocation(NamedTuple):
    """A live allocation made through allocate()."""
    ptr: int
    size: int
    device: int
    stream: int
    origin: str
    route: str  # ROUTE_C_API or ROUTE_EXTENSION: the allocator it came from


# Note [Frees from the garbage collector]
# The adapters free from finalizers (CuPy's memory owner, Numba's pointer finalizers), which the
# cyclic garbage collector can run on this thread at any allocation, also while this module holds
# its lock: the lock is re-entrant, and readers iterate over a copy of the table.
_lock = threading.RLock()
_live: Dict[int, Allocation] = {}


def _index(what: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what}: {name} must be an int, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{what}: {name} must be >= 0, not {value}")
    return value


def _origin(what: str, origin: Any) -> str:
    if not isinstance(origin, str) or not origin:
        raise ValueError(f"{what}: origin must be a non-empty str naming the library that asks (e.g. 'cupy'), "
                         f"not {origin!r}")
    return origin


def _allocate_c_api(size: int, device: int, stream: int) -> int:
    lib = library()
    ptr = lib.streampool_alloc(size, device, ctypes.c_void_p(stream) if stream else None)
    if ptr:
        return int(ptr)
    status = lib.streampool_last_status()
    message = (lib.streampool_last_error() or b"").decode(errors="replace")
    if status == _STATUS_OUT_OF_MEMORY:
        raise OutOfMemoryError(f"streampool: out of memory allocating {size} bytes on device {device}: {message}",
                               size, device)
    if not message:
        message = "no memory returned and no error recorded"
    raise StreampoolError(f"streampool: allocating {size} bytes on device {device} failed (status {status}): "
                          f"{message}")


def _allocate_extension(size: int, device: int, stream: int) -> int:
    import torch  # the extension route means torch is loaded

    try:
        return int(torch.cuda.caching_allocator_alloc(size, device, stream))
    except torch.cuda.OutOfMemoryError as e:
        raise OutOfMemoryError(f"streampool: out of memory allocating {size} bytes on device {device}: {e}",
                               size, device) from e
    except (RuntimeError, ValueError, TypeError) as e:
        raise StreampoolError(f"streampool: allocating {size} bytes on device {device} failed: {e}") from e


def allocate(size: int, device: int, stream: int = 0, origin: str = "python") -> int:
    """A device pointer to `size` bytes on `device`, ordered on `stream` (a cudaStream_t as an int;
    0 = the legacy default stream), from the allocator PyTorch uses (Note [One instance per
    device]); `origin` names the library that asks (Note [Origins]). 0 for size 0 (nothing is
    allocated). Raises OutOfMemoryError when the memory is not there, StreampoolError for any other
    failure (no GPU, the allocator shut down, a bad device), TypeError/ValueError for bad arguments."""
    what = "streampool.interop.allocate"
    size = _index(what, "size", size)
    device = _index(what, "device", device)
    stream = _index(what, "stream", stream)
    origin = _origin(what, origin)
    if size == 0:
        return 0
    route = ROUTE_EXTENSION if _extension() is not None else ROUTE_C_API
    ptr = _allocate_extension(size, device, stream) if route == ROUTE_EXTENSION else \
        _allocate_c_api(size, device, stream)
    with _lock:
        _live[ptr] = Allocation(ptr, size, device, stream, origin, route)
    return ptr


def free(ptr: int) -> None:
    """Frees an allocation made by allocate() (0 does nothing), in stream order: its memory serves
    the allocation's stream at once and other streams once that stream's work submitted so far is
    done. A pointer allocate() did not return, or one already freed, raises StreampoolError and
    frees nothing."""
    ptr = _index("streampool.interop.free", "ptr", ptr)
    if ptr == 0:
        return
    with _lock:
        allocation = _live.pop(ptr, None)
    if allocation is None:
        raise StreampoolError(
            f"streampool.interop.free: {ptr:#x} is not a live allocation of streampool.interop (made by "
            "streampool.cupy, streampool.numba or interop.allocate); it was already freed, or belongs to another "
            "allocator (a torch tensor's memory is freed by torch, a CuPy or Numba pool's by that pool). Nothing "
            "was freed")
    if allocation.route == ROUTE_EXTENSION:
        import torch

        try:
            torch.cuda.caching_allocator_delete(ptr)
        except RuntimeError as e:
            raise StreampoolError(f"streampool.interop.free: freeing {ptr:#x} failed: {e}") from e
        return
    lib = library()
    lib.streampool_free(ctypes.c_void_p(ptr), allocation.size, allocation.device,
                        ctypes.c_void_p(allocation.stream) if allocation.stream else None)
    status = lib.streampool_last_status()
    if status != 0:
        message = (lib.streampool_last_error() or b"").decode(errors="replace")
        raise StreampoolError(f"streampool.interop.free: freeing {ptr:#x} failed (status {status}): {message}")


def allocation(ptr: int) -> Optional[Allocation]:
    """The live allocation that starts at `ptr`, or None."""
    with _lock:
        return _live.get(ptr)


def allocations() -> List[Allocation]:
    """Every live allocation made by allocate(), oldest first."""
    with _lock:
        live = _live.copy()  # Note [Frees from the garbage collector]
    return list(live.values())


def live_on_c_api() -> int:
    """How many live allocations came from the C API's allocator (install() checks it)."""
    return sum(1 for a in allocations() if a.route == ROUTE_C_API)


def usage(device: Optional[int] = None) -> Dict[int, Dict[str, Dict[str, int]]]:
    """Live bytes (as requested) and allocations per device and origin (Note [Origins]), e.g.
    {0: {"cupy": {"bytes": 4096, "allocations": 1}, "other": {"bytes": ..., "allocations": ...}}}
    for `device`, or for every device with a live allocation made here (None). "other" (what
    PyTorch and C code hold) is the rest of the device's requested_bytes.all.current and
    allocation.all.current in the allocator's statistics."""
    from ._core import stats  # imported here: _core does not import this module, nor should it need to

    out: Dict[int, Dict[str, Dict[str, int]]] = {}
    if device is not None:
        out[_index("streampool.interop.usage", "device", device)] = {}
    for a in allocations():
        if device is not None and a.device != device:
            continue
        entry = out.setdefault(a.device, {}).setdefault(a.origin, {"bytes": 0, "allocations": 0})
        entry["bytes"] += a.size
        entry["allocations"] += 1
    for d, per_origin in out.items():
        s = stats(d)
        ours_bytes = sum(v["bytes"] for v in per_origin.values())
        ours_count = sum(v["allocations"] for v in per_origin.values())
        per_origin["other"] = {"bytes": max(0, s["requested_bytes.all.current"] - ours_bytes),
                               "allocations": max(0, s["allocation.all.current"] - ours_count)}
    return out


def annotate_snapshot(data: Dict[str, Any]) -> Dict[str, Any]:
    """Marks, in a snapshot in torch's shape (streampool.snapshot()), the blocks of the live
    allocations made here with "origin", and each one's latest "alloc" trace entry with
    "user_metadata" (unless it has one), both the origin's name (Note [Origins])."""
    live = {a.ptr: a for a in allocations()}
    if not live:
        return data
    for segment in data.get("segments", []):
        for block in segment.get("blocks", []):
            a = live.get(block.get("address"))
            if a is not None and a.device == segment.get("device") and block.get("state") != "inactive":
                block["origin"] = a.origin
    for device, trace in enumerate(data.get("device_traces", [])):
        latest: Dict[int, Dict[str, Any]] = {}
        for entry in trace:
            if entry.get("action") == "alloc" and entry.get("addr") in live:
                latest[entry["addr"]] = entry
        for addr, entry in latest.items():
            if live[addr].device == device and not entry.get("user_metadata"):
                entry["user_metadata"] = live[addr].origin
    return data
