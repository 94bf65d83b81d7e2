"""The pinned host allocator through the C API (streampool_host_*): page-locked host buffers for
fast host<->device copies, cached and reused once the copies that used them are done (the
`pinned_*` keys of the config; docs/pytorch-compatibility.md, "Pinned host memory"). Pointers are
plain integers, as ctypes gives them; pass them to cudaMemcpyAsync or wrap them yourself."""

from __future__ import annotations

import json
from typing import Dict, Optional

from ._library import check, library, raise_last, text_call


def host_init(config: Optional[str] = None, path: Optional[str] = None) -> None:
    """Creates the host allocator now (config None = the environment, as for the device side).
    Raises StreampoolError if it already exists or the config does not parse."""
    lib = library(path)
    check(lib, lib.streampool_host_init(None if config is None else config.encode()), "streampool_host_init")


def host_alloc(size: int, path: Optional[str] = None) -> int:
    """A pinned host buffer of at least `size` bytes (rounded up to a power of two). Raises
    StreampoolError for size 0, when pinned memory runs out, or without a GPU."""
    lib = library(path)
    ptr = lib.streampool_host_alloc(int(size))
    if not ptr:
        raise_last(lib, "streampool_host_alloc")
    return int(ptr)


def host_free(ptr: int, path: Optional[str] = None) -> None:
    """Gives the buffer back; it is reused once every stream recorded for it is done with it."""
    lib = library(path)
    check(lib, lib.streampool_host_free(ptr), "streampool_host_free")


def host_record_stream(ptr: int, stream: int, path: Optional[str] = None) -> None:
    """Marks the buffer as used by copies on `stream` (a cudaStream_t as an integer, e.g.
    torch.cuda.current_stream().cuda_stream)."""
    lib = library(path)
    check(lib, lib.streampool_host_record_stream(ptr, stream), "streampool_host_record_stream")


def host_empty_cache(path: Optional[str] = None) -> None:
    """Returns every cached pinned buffer to the system (live ones stay)."""
    lib = library(path)
    check(lib, lib.streampool_host_empty_cache(), "streampool_host_empty_cache")


def host_stats(path: Optional[str] = None) -> Dict[str, int]:
    """The host allocator's statistics with the names of torch.cuda.host_memory_stats()."""
    lib = library(path)
    return json.loads(text_call(lib, lib.streampool_host_stats_json, "streampool_host_stats_json"))
