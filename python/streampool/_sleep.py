"""Sleep and wake: give a pool's device memory back and take it again at the same addresses
(docs/sleep-wake.md). streampool.sleep(), streampool.wake(), streampool.sleep_state(), and
streampool.region(tag), a context manager that puts the allocations made inside it in a pool of
their own, named by `tag`, that can sleep on its own.

    import streampool, torch
    streampool.install()
    with streampool.region("weights"):
        model = build_model().cuda()
    with streampool.region("kv_cache"):
        cache = torch.empty(...)
    streampool.sleep("weights")                     # offload: bytes kept in pinned host memory
    streampool.sleep("kv_cache", mode="discard")    # dropped
    ...                                             # the other phase has the GPU
    streampool.wake(["weights", "kv_cache"])        # same addresses; weights hold their bytes

A pool is named by None (the default pool: needs expandable_segments:True), a tag, a
torch.cuda.MemPool, a graph pool id (a (first, second) tuple, torch.cuda.graph_pool_handle() or
CUDAGraph.pool()), or a list of these (all sleep, or none: a failure wakes those already asleep).
Without install() the calls reach the C API's allocator (its default pool only, unless ids are given).

Note [Regions are pools]
A tag is a private pool, as in vLLM's CuMemAllocator (one MemPool per tag): what a region allocates
lives in segments of its own, so sleeping it touches no other tensor, and the pool's segments are
VMM (pool_options::sleepable) whatever expandable_segments says. A region is made on first use per
(tag, device) and lives as long as the process; its memory follows the pool's rules (freed
tensors are cached in it, empty_cache returns its free memory).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
from typing import Dict, Iterable, List, Optional, Tuple, Union

from ._extension import active as _extension
from ._library import StreampoolError, check, library, text_call

_MODES = ("offload", "discard")
_regions: Dict[Tuple[str, int], object] = {}  # (tag, device) -> torch.cuda.MemPool


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    ull = ctypes.c_ulonglong
    lib.streampool_sleep.argtypes = [ctypes.c_int, ull, ull, ctypes.c_int, ctypes.c_int]
    lib.streampool_sleep.restype = ctypes.c_int
    lib.streampool_wake.argtypes = [ctypes.c_int, ull, ull]
    lib.streampool_wake.restype = ctypes.c_int
    lib.streampool_sleep_state_json.argtypes = [ctypes.c_int, ull, ull]
    lib.streampool_sleep_state_json.restype = ctypes.c_char_p
    return lib


def _device(device: Optional[int]) -> int:
    if device is None:
        return -1
    if isinstance(device, bool) or not isinstance(device, int):
        raise TypeError(f"streampool: device must be an int (or None for the current device), not {device!r}")
    if device < -1:
        raise ValueError(f"streampool: device {device} is out of range; pass a device index, or -1 / None")
    return device


def _region_device(device: int) -> int:
    if device >= 0:
        return device
    import torch
    return torch.cuda.current_device()


def _pool_id(pool, device: int, what: str) -> Tuple[int, int]:
    """(first, second) of a pool named as the module docstring says."""
    if pool is None:
        return (0, 0)
    if isinstance(pool, str):
        found = _regions.get((pool, _region_device(device) if _extension() is not None else device))
        if found is None:
            known = sorted({tag for tag, _ in _regions})
            raise StreampoolError(f"{what}: no region is tagged {pool!r} on this device (known tags: {known}); "
                                  f"allocate inside `with streampool.region({pool!r}):` first")
        pool = found
    ident = getattr(pool, "id", pool)
    if isinstance(ident, (tuple, list)) and len(ident) == 2 and all(isinstance(x, int) and x >= 0 for x in ident):
        return (int(ident[0]), int(ident[1]))
    raise TypeError(f"{what}: a pool is None (the default pool), a tag, a torch.cuda.MemPool or a (first, second) "
                    f"pool id, not {pool!r}")


def _pools(pool, device: int, what: str) -> List[Tuple[int, int]]:
    if isinstance(pool, (list, set, frozenset)) or (isinstance(pool, tuple) and not
                                                   (len(pool) == 2 and all(isinstance(x, int) for x in pool))):
        ids = [_pool_id(p, device, what) for p in pool]
        if not ids:
            raise ValueError(f"{what}: the list of pools is empty")
        return ids
    return [_pool_id(pool, device, what)]


def _call(what: str, function, *args):
    try:
        return function(*args)
    except (RuntimeError, ValueError, MemoryError) as e:
        raise StreampoolError(f"{what} failed: {e}") from e


def _sleep_one(ident: Tuple[int, int], device: int, discard: bool, keep_backup: bool, path) -> None:
    ext = _extension()
    if ext is not None:
        return _call("streampool.sleep", ext.pool_sleep, device, ident[0], ident[1], discard, keep_backup)
    lib = _declare(library(path))
    check(lib, lib.streampool_sleep(device, ident[0], ident[1], 1 if discard else 0, 1 if keep_backup else 0),
          "streampool_sleep")


def _wake_one(ident: Tuple[int, int], device: int, path) -> None:
    ext = _extension()
    if ext is not None:
        return _call("streampool.wake", ext.pool_wake, device, ident[0], ident[1])
    lib = _declare(library(path))
    check(lib, lib.streampool_wake(device, ident[0], ident[1]), "streampool_wake")


def sleep(pool=None, mode: str = "offload", keep_backup: bool = False, device: Optional[int] = None,
          path: Optional[str] = None) -> None:
    """Puts `pool` (or each of a list) to sleep once the work queued on its memory is done:
    mode "offload" copies its live bytes to pinned host memory, "discard" drops them; the device
    memory goes back to the device, the addresses stay reserved, and allocating from the pool
    raises until wake(). keep_backup=True keeps the pinned buffer after wake for the next sleep.
    Raises StreampoolError (nothing asleep that was awake) when any pool cannot sleep."""
    if mode not in _MODES:
        raise ValueError(f"streampool.sleep: mode must be 'offload' or 'discard', not {mode!r}")
    if not isinstance(keep_backup, bool):
        raise TypeError(f"streampool.sleep: keep_backup must be a bool, not {keep_backup!r}")
    dev = _device(device)
    ids = _pools(pool, dev, "streampool.sleep")
    done: List[Tuple[int, int]] = []
    try:
        for ident in ids:
            _sleep_one(ident, dev, mode == "discard", keep_backup, path)
            done.append(ident)
    except BaseException:
        for ident in reversed(done):  # all or none
            _wake_one(ident, dev, path)
        raise


def wake(pool=None, device: Optional[int] = None, path: Optional[str] = None) -> None:
    """Maps new memory at the addresses of `pool` (or each of a list) and copies offloaded bytes
    back; returns when any stream may use it. A pool the device cannot back now stays asleep (and
    the error says so): free memory and call wake() again."""
    dev = _device(device)
    for ident in _pools(pool, dev, "streampool.wake"):
        _wake_one(ident, dev, path)


def sleep_state(pool=None, device: Optional[int] = None, path: Optional[str] = None) -> dict:
    """{'asleep', 'mode', 'segments', 'released_bytes', 'held_bytes', 'offloaded_bytes',
    'backup_bytes'} of one pool."""
    dev = _device(device)
    ident = _pool_id(pool, dev, "streampool.sleep_state")
    ext = _extension()
    if ext is not None:
        return json.loads(_call("streampool.sleep_state", ext.pool_sleep_state, dev, ident[0], ident[1]))
    lib = _declare(library(path))
    return json.loads(text_call(lib, lambda: lib.streampool_sleep_state_json(dev, ident[0], ident[1]),
                                "streampool_sleep_state_json"))


@contextlib.contextmanager
def region(tag: str, device: Optional[int] = None):
    """Allocations made inside go to the pool of `tag` on the device (Note [Regions are pools]),
    which can sleep and wake on its own: streampool.sleep(tag). Needs torch and install()."""
    if not isinstance(tag, str) or not tag:
        raise TypeError(f"streampool.region: tag must be a non-empty str, not {tag!r}")
    ext = _extension()
    if ext is None:
        raise StreampoolError("streampool.region: regions are torch.cuda.MemPools of streampool's extension; call "
                              "streampool.install() (with torch and the extension built) first")
    import torch
    dev = _region_device(_device(device))
    key = (tag, dev)
    pool = _regions.get(key)
    fresh = pool is None
    if fresh:
        pool = torch.cuda.MemPool()
    with torch.cuda.device(dev), torch.cuda.use_mem_pool(pool):
        if fresh:  # the pool exists on streampool's side once routing began: make it sleepable
            _call("streampool.region", ext.pool_make_sleepable, dev, pool.id[0], pool.id[1])
            _regions[key] = pool
        yield pool


def region_pool(tag: str, device: Optional[int] = None):
    """The torch.cuda.MemPool of `tag` (for torch.cuda.graph(..., pool=...)), or None."""
    return _regions.get((tag, _region_device(_device(device))))
