"""streampool inside PyTorch: as the global CUDA allocator (install) or as a torch.cuda.MemPool.

* ``install()`` makes streampool PyTorch's CUDA allocator, by one of two routes (Note [Two
  routes]). It must run before anything touches CUDA: the first CUDA tensor initialises PyTorch's
  own allocator, which can then no longer be swapped.
* ``mempool()`` keeps PyTorch's allocator global and returns a ``torch.cuda.MemPool`` whose
  segments come from streampool; it works with ``torch.cuda.use_mem_pool(pool)`` and with
  ``torch.cuda.graph(g, pool=pool.id)`` (the route that is safe for CUDA graphs).
"""

from __future__ import annotations

import ctypes
from typing import Any, Dict, Optional

import warnings

from . import _env_watch, interop
from ._extension import active as _extension_active
from ._extension import load as _load_extension
from ._extension import mark_installed as _mark_extension_installed
from ._library import StreampoolError, check, find_library, library


def _import_torch(what: str):
    """torch, or a StreampoolError naming what needs it and how to get it (instead of a bare
    ModuleNotFoundError from deep inside the package)."""
    try:
        import torch
    except ImportError as e:
        raise StreampoolError(f"{what} needs PyTorch, which is not importable here ({e}); install torch, or use "
                              "streampool without it: streampool.init(), streampool.stats(), the C API "
                              "(libstreampool.so) or streampool-bench") from e
    return torch

# Note [Two routes]
# "extension": streampool._C10 (python/csrc) implements c10's CUDAAllocator over a
#   streampool::allocator: every torch.cuda hook reaches streampool (graphs and their private pools,
#   torch.compile's cudagraph trees, memory_stats/memory_summary, empty_cache, record_stream,
#   _record_memory_history/_snapshot, OOM as torch.cuda.OutOfMemoryError). Needs the extension
#   built for the running PyTorch release (Note [Supported PyTorch] in _version_gate.py).
# "pluggable": torch.cuda.memory.CUDAPluggableAllocator over libstreampool.so's C functions; any
#   PyTorch >= 2.1, no compiler needed, but PyTorch tells such an allocator only malloc and free:
#   torch.cuda.memory_* raise, empty_cache/record_stream do not reach it, and CUDA graphs need
#   mempool() (see docs/integrations/pytorch.md).
# install(route="auto") takes the extension when it can and otherwise says why and falls back.
ROUTES = ("auto", "extension", "pluggable")

_pluggable: Dict[str, Any] = {}
_installed_path: Optional[str] = None
_installed_route: Optional[str] = None


class FallbackWarning(RuntimeWarning):
    """install() used the CUDAPluggableAllocator route because the extension cannot be used."""


def pluggable_allocator(path: Optional[str] = None):
    """torch.cuda.memory.CUDAPluggableAllocator over libstreampool.so (one per library file)."""
    torch = _import_torch("streampool.pluggable_allocator()")

    resolved = find_library(path)
    library(resolved)  # declare the signatures on the shared handle and pin the file for this process
    if resolved not in _pluggable:
        _pluggable[resolved] = torch.cuda.memory.CUDAPluggableAllocator(resolved, "streampool_alloc",
                                                                        "streampool_free")
    return _pluggable[resolved]


def _c_api_to_delegate():
    """Note [C API delegate] (src/c_api/c_api_delegate.cpp): on the extension route, the C API of
    libstreampool.so (C and C++ code of the process: streampool/process_allocator.hpp) is served by
    the extension's allocator, the one PyTorch uses. Before the extension is installed, the C API's
    own allocator, unused (install() checked that no streampool.interop allocation lives on it),
    is shut down: this raises if C code holds allocations on it. Returns the library, or None when
    there is none to delegate (no libstreampool.so found: nothing in the process reaches our C API)."""
    try:
        lib = library()
    except StreampoolError:
        return None
    check(lib, lib.streampool_shutdown(), "streampool_shutdown (the C API's own allocator, before the extension "
                                          "takes over)")
    return lib


def install(path: Optional[str] = None, config: Optional[str] = None, route: str = "auto"):
    """Makes streampool PyTorch's CUDA allocator; call it before any CUDA tensor exists.

    `config` (e.g. "backend:cudaMallocAsync") is used instead of the environment
    (STREAMPOOL_ALLOC_CONF, else PYTORCH_CUDA_ALLOC_CONF, else PYTORCH_ALLOC_CONF). `route` is
    "auto" (the extension when it is built for this PyTorch, else the CUDAPluggableAllocator with a
    FallbackWarning saying why), "extension" (raise if it cannot be used) or "pluggable"; also
    settable as STREAMPOOL_TORCH_ROUTE. Returns torch's allocator object (a CUDAPluggableAllocator
    on that route). Raises StreampoolError if CUDA is already initialised (PyTorch cannot swap an
    allocator in use), if the config does not parse, or if another route is already installed."""
    import os

    torch = _import_torch("streampool.install()")

    global _installed_path, _installed_route
    route = os.environ.get("STREAMPOOL_TORCH_ROUTE", route) if route == "auto" else route
    if route not in ROUTES:
        raise StreampoolError(f"streampool.install: route must be one of {', '.join(ROUTES)}, not {route!r}")
    if _installed_route is not None:
        if route not in ("auto", _installed_route):
            raise StreampoolError(f"streampool: already installed through the {_installed_route} route")
        if _installed_route == "extension":
            _env_watch.check()
            return torch.cuda.memory._get_current_allocator()
        resolved = find_library(path)
        if _installed_path != resolved:
            raise StreampoolError(f"streampool: already installed from {_installed_path}")
        _env_watch.check()
        return _pluggable[resolved]
    if torch.cuda.is_initialized():
        raise StreampoolError(
            "streampool: CUDA is already initialised in this process, so PyTorch's allocator can no longer be "
            "swapped. Call streampool.install() before the first CUDA tensor, torch.cuda.init(), "
            "torch.cuda.set_device(), streampool.record() or any other CUDA call.")
    if route in ("auto", "extension"):
        module, reason = _load_extension()
        if module is not None:
            live = interop.live_on_c_api()
            if live:  # Note [One instance per device] in interop.py
                raise StreampoolError(
                    f"streampool.install: {live} allocation(s) made through streampool.interop (streampool.cupy, "
                    "streampool.numba) are live on the C API's allocator; the extension route would give PyTorch a "
                    "second allocator, splitting memory and statistics. Call streampool.install() before the first "
                    "CuPy/Numba allocation, or free those first, or use route=\"pluggable\" (it shares the C API's "
                    "allocator)")
            lib = _c_api_to_delegate()
            try:
                module.install(config)
            except (RuntimeError, ValueError) as e:
                raise StreampoolError(f"streampool: installing the extension allocator failed: {e}") from e
            if lib is not None:
                check(lib, lib.streampool_set_delegate(ctypes.c_void_p(module.c_api_delegate())),
                      "streampool_set_delegate")
            _mark_extension_installed(module)
            _installed_route = "extension"
            _env_watch.use_extension(module.env_mismatch_warnings)
            _env_watch.check()
            return torch.cuda.memory._get_current_allocator()
        if route == "extension":
            raise StreampoolError(reason)
        warnings.warn(f"{reason}. Falling back to the CUDAPluggableAllocator route: streampool serves malloc/free, "
                      "but torch.cuda.memory_stats/memory_summary, empty_cache, record_stream, memory history and "
                      "CUDA-graph pools do not reach it (use streampool.stats(), memory_summary(), mempool(); "
                      "docs/integrations/pytorch.md, \"Two routes\").", FallbackWarning, stacklevel=2)
    resolved = find_library(path)
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
    _installed_route = "pluggable"
    _env_watch.start(config)  # the C API reads the environment at its first allocation, right after this
    _env_watch.check()
    return allocator


def installed_route() -> Optional[str]:
    """"extension", "pluggable", or None before a successful install()."""
    return _installed_route


def is_installed() -> bool:
    """True after a successful install() in this process."""
    return _installed_route is not None


def mempool(path: Optional[str] = None, **kwargs):
    """torch.cuda.MemPool whose segments come from streampool, with PyTorch's own allocator kept
    global: use with `torch.cuda.use_mem_pool(pool)` or `torch.cuda.graph(g, pool=pool.id)`.
    Extra keyword arguments (use_on_oom, no_split, ...) go to MemPool. Keep the pool alive while
    tensors from it are in use. With the extension route installed, streampool already serves
    every pool: this is a plain torch.cuda.MemPool."""
    torch = _import_torch("streampool.mempool()")

    if _extension_active() is not None:
        return torch.cuda.MemPool(**kwargs)
    return torch.cuda.MemPool(pluggable_allocator(path).allocator(), **kwargs)


def record_stream(tensor, stream, path: Optional[str] = None) -> None:
    """Marks the allocation under `tensor` as used by `stream` (a torch.cuda.Stream), as
    Tensor.record_stream does for PyTorch's allocator (which a pluggable allocator does not get;
    on the extension route Tensor.record_stream reaches streampool itself)."""
    if _extension_active() is not None:
        tensor.record_stream(stream)
        return
    lib = library(path)
    ptr = tensor.untyped_storage().data_ptr()  # the allocation's base, not a view's offset
    check(lib, lib.streampool_record_stream(ctypes.c_void_p(ptr), ctypes.c_void_p(stream.cuda_stream)),
          "streampool_record_stream")
