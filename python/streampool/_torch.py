"""streampool inside PyTorch: as the global CUDA allocator (install) or as a torch.cuda.MemPool.

* ``install()`` makes libstreampool.so PyTorch's CUDA allocator through
  ``torch.cuda.memory.CUDAPluggableAllocator`` + ``change_current_allocator``. It must run before
  anything touches CUDA: the first CUDA tensor initialises PyTorch's own allocator, which can then
  no longer be swapped. PyTorch's ``torch.cuda.memory_*`` functions raise for a pluggable
  allocator; this package's ``stats()``, ``memory_summary()``, ``snapshot()`` answer instead.
* ``mempool()`` keeps PyTorch's allocator global and returns a ``torch.cuda.MemPool`` whose
  segments come from streampool; it works with ``torch.cuda.use_mem_pool(pool)`` and with
  ``torch.cuda.graph(g, pool=pool.id)`` (the route that is safe for CUDA graphs).
"""

from __future__ import annotations

import ctypes
from typing import Any, Dict, Optional

from ._library import StreampoolError, check, find_library, library

_pluggable: Dict[str, Any] = {}
_installed_path: Optional[str] = None


def pluggable_allocator(path: Optional[str] = None):
    """torch.cuda.memory.CUDAPluggableAllocator over libstreampool.so (one per library file)."""
    import torch

    resolved = find_library(path)
    library(resolved)  # declare the signatures on the shared handle and pin the file for this process
    if resolved not in _pluggable:
        _pluggable[resolved] = torch.cuda.memory.CUDAPluggableAllocator(resolved, "streampool_alloc",
                                                                        "streampool_free")
    return _pluggable[resolved]


def install(path: Optional[str] = None, config: Optional[str] = None):
    """Makes streampool PyTorch's CUDA allocator; call it before any CUDA tensor exists.

    `config` (e.g. "backend:cudaMallocAsync") is used instead of the environment
    (STREAMPOOL_ALLOC_CONF, else PYTORCH_CUDA_ALLOC_CONF, else PYTORCH_ALLOC_CONF). Returns the
    CUDAPluggableAllocator. Raises StreampoolError if CUDA is already initialised (PyTorch cannot
    swap an allocator in use), or if the config does not parse."""
    import torch

    global _installed_path
    resolved = find_library(path)
    if _installed_path is not None:
        if _installed_path != resolved:
            raise StreampoolError(f"streampool: already installed from {_installed_path}")
        return _pluggable[resolved]
    if torch.cuda.is_initialized():
        raise StreampoolError(
            "streampool: CUDA is already initialised in this process, so PyTorch's allocator can no longer be "
            "swapped. Call streampool.install() before the first CUDA tensor, torch.cuda.init(), "
            "torch.cuda.set_device(), streampool.record() or any other CUDA call.")
    lib = library(resolved)
    if config is not None:
        check(lib, lib.streampool_init(config.encode()), f"streampool_init({config!r})")
    allocator = pluggable_allocator(resolved)
    try:
        torch.cuda.memory.change_current_allocator(allocator)
    except RuntimeError as e:
        raise StreampoolError(
            f"streampool: PyTorch refused the allocator swap ({e}). The swap must happen before any CUDA "
            "allocation in this process.") from e
    _installed_path = resolved
    return allocator


def is_installed() -> bool:
    """True after a successful install() in this process."""
    return _installed_path is not None


def mempool(path: Optional[str] = None, **kwargs):
    """torch.cuda.MemPool whose segments come from streampool, with PyTorch's own allocator kept
    global: use with `torch.cuda.use_mem_pool(pool)` or `torch.cuda.graph(g, pool=pool.id)`.
    Extra keyword arguments (use_on_oom, no_split, ...) go to MemPool. Keep the pool alive while
    tensors from it are in use."""
    import torch

    return torch.cuda.MemPool(pluggable_allocator(path).allocator(), **kwargs)


def record_stream(tensor, stream, path: Optional[str] = None) -> None:
    """Marks the allocation under `tensor` as used by `stream` (a torch.cuda.Stream), as
    Tensor.record_stream does for PyTorch's allocator (which a pluggable allocator does not get)."""
    lib = library(path)
    ptr = tensor.untyped_storage().data_ptr()  # the allocation's base, not a view's offset
    check(lib, lib.streampool_record_stream(ctypes.c_void_p(ptr), ctypes.c_void_p(stream.cuda_stream)),
          "streampool_record_stream")
