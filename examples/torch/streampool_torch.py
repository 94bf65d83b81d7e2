"""streampool_torch — use streampool as PyTorch's CUDA allocator (docs/pytorch-compatibility.md §5, docs/integrations/pytorch.md).

Two routes:

* ``install()`` makes libstreampool.so PyTorch's global CUDA allocator through
  ``torch.cuda.memory.CUDAPluggableAllocator`` + ``change_current_allocator``. It must run before
  anything touches CUDA (the first tensor on the GPU initialises PyTorch's own allocator, which can
  then no longer be swapped). PyTorch's ``torch.cuda.memory_*`` functions raise for a pluggable
  allocator; use ``stats()``, ``snapshot()``, ``empty_cache()`` from this module instead.
* ``mempool()`` keeps PyTorch's allocator and returns ``torch.cuda.MemPool`` whose segments come
  from streampool; it works with ``torch.cuda.use_mem_pool(pool)`` and with
  ``torch.cuda.graph(g, pool=pool.id)`` (the graph-safe route of docs/pytorch-compatibility.md §5).

streampool reads its configuration (``STREAMPOOL_ALLOC_CONF``, else ``PYTORCH_CUDA_ALLOC_CONF``,
else ``PYTORCH_ALLOC_CONF``) on first use; ``install(config=...)`` passes one explicitly.

The library is found from the ``path`` argument, else ``$STREAMPOOL_LIB``, else the build folders
of this checkout (build-gpu, build, build-*), else the system's library path.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import json
import os
from pathlib import Path
from typing import Any, Dict, List, Optional

__all__ = [
    "StreampoolError",
    "find_library",
    "library",
    "pluggable_allocator",
    "install",
    "is_installed",
    "mempool",
    "stats",
    "snapshot",
    "empty_cache",
    "set_memory_fraction",
    "record_stream",
    "backend_name",
]

_REPO_ROOT = Path(__file__).resolve().parents[2]
_PREFERRED_BUILD_DIRS = ("build-gpu", "build", "build-integ", "build-lead")

_lib: Optional[ctypes.CDLL] = None
_lib_path: Optional[str] = None
_pluggable: Dict[str, Any] = {}
_installed_path: Optional[str] = None


class StreampoolError(RuntimeError):
    """A streampool C API call failed, or the allocator cannot be set up."""


def _candidates() -> List[str]:
    out = [str(_REPO_ROOT / d / "libstreampool.so") for d in _PREFERRED_BUILD_DIRS]
    others = sorted(glob.glob(str(_REPO_ROOT / "build*" / "libstreampool.so")), key=os.path.getmtime, reverse=True)
    out += [p for p in others if p not in out]
    out += ["/usr/local/lib/libstreampool.so", "/usr/lib/libstreampool.so"]
    return out


def find_library(path: Optional[str] = None) -> str:
    """Absolute path of libstreampool.so: `path`, else $STREAMPOOL_LIB, else a build folder of
    this checkout, else the system library path. Raises StreampoolError when none exists."""
    explicit = path or os.environ.get("STREAMPOOL_LIB")
    if explicit:
        p = Path(explicit)
        if p.is_dir():
            p = p / "libstreampool.so"
        if not p.is_file():
            source = "argument" if path else "STREAMPOOL_LIB"
            raise StreampoolError(f"streampool: libstreampool.so not found at {p} (from the {source}); "
                                  "build it with `cmake --build <build> --target streampool_shared`")
        return str(p.resolve())
    tried = _candidates()
    for candidate in tried:
        if os.path.isfile(candidate):
            return str(Path(candidate).resolve())
    system = ctypes.util.find_library("streampool")
    if system:
        return system
    raise StreampoolError("streampool: libstreampool.so not found; pass its path, set STREAMPOOL_LIB, or build it "
                          "(cmake --build build --target streampool_shared). Tried: " + ", ".join(tried))


def library(path: Optional[str] = None) -> ctypes.CDLL:
    """The loaded libstreampool.so with argument types declared (loaded once per process; the
    same handle PyTorch's CUDAPluggableAllocator gets, since dlopen of one file is shared)."""
    global _lib, _lib_path
    resolved = find_library(path if path is not None else _lib_path)
    if _lib is not None:
        if resolved != _lib_path:
            raise StreampoolError(f"streampool: already loaded from {_lib_path}; cannot also use {resolved}")
        return _lib
    lib = ctypes.CDLL(resolved)
    lib.streampool_init.argtypes = [ctypes.c_char_p]
    lib.streampool_init.restype = ctypes.c_int
    lib.streampool_alloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    lib.streampool_alloc.restype = ctypes.c_void_p
    lib.streampool_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    lib.streampool_free.restype = None
    lib.streampool_record_stream.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.streampool_record_stream.restype = ctypes.c_int
    lib.streampool_empty_cache.argtypes = []
    lib.streampool_empty_cache.restype = ctypes.c_int
    lib.streampool_set_memory_fraction.argtypes = [ctypes.c_double, ctypes.c_int]
    lib.streampool_set_memory_fraction.restype = ctypes.c_int
    lib.streampool_stats_json.argtypes = [ctypes.c_int]
    lib.streampool_stats_json.restype = ctypes.c_char_p
    lib.streampool_snapshot_json.argtypes = []
    lib.streampool_snapshot_json.restype = ctypes.c_char_p
    lib.streampool_backend_name.argtypes = []
    lib.streampool_backend_name.restype = ctypes.c_char_p
    lib.streampool_last_status.argtypes = []
    lib.streampool_last_status.restype = ctypes.c_int
    lib.streampool_last_error.argtypes = []
    lib.streampool_last_error.restype = ctypes.c_char_p
    _lib, _lib_path = lib, resolved
    return lib


def _raise_last(lib: ctypes.CDLL, what: str) -> None:
    message = (lib.streampool_last_error() or b"").decode(errors="replace")
    raise StreampoolError(f"{what} failed (status {lib.streampool_last_status()}): {message}")


def _check(lib: ctypes.CDLL, status: int, what: str) -> None:
    if status != 0:
        _raise_last(lib, what)


def pluggable_allocator(path: Optional[str] = None):
    """torch.cuda.memory.CUDAPluggableAllocator over libstreampool.so (one per library path)."""
    import torch

    resolved = find_library(path)
    library(resolved)  # declare argtypes on the shared handle, and pin the path for this process
    if resolved not in _pluggable:
        _pluggable[resolved] = torch.cuda.memory.CUDAPluggableAllocator(resolved, "streampool_alloc",
                                                                        "streampool_free")
    return _pluggable[resolved]


def install(path: Optional[str] = None, config: Optional[str] = None):
    """Makes streampool PyTorch's CUDA allocator; call before any CUDA tensor exists.

    `config` (e.g. "backend:cudaMallocAsync") is used instead of the environment. Returns the
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
            "swapped. Call streampool_torch.install() before the first CUDA tensor, torch.cuda.init(), "
            "torch.cuda.set_device() or any other CUDA call.")
    lib = library(resolved)
    if config is not None:
        _check(lib, lib.streampool_init(config.encode()), f"streampool_init({config!r})")
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


def stats(device: int = -1, path: Optional[str] = None) -> Dict[str, int]:
    """streampool's statistics of `device` (-1 = current) with PyTorch's key names, e.g.
    stats()["reserved_bytes.all.peak"]."""
    lib = library(path)
    text = lib.streampool_stats_json(device)
    if text is None:
        _raise_last(lib, "streampool_stats_json")
    return json.loads(text.decode())


def snapshot(path: Optional[str] = None) -> Dict[str, Any]:
    """Segments and blocks in the shape of torch.cuda.memory._snapshot()."""
    lib = library(path)
    text = lib.streampool_snapshot_json()
    if text is None:
        _raise_last(lib, "streampool_snapshot_json")
    return json.loads(text.decode())


def empty_cache(path: Optional[str] = None) -> None:
    """Returns streampool's cached, unused memory to the driver (torch.cuda.empty_cache() does not
    reach a pluggable allocator)."""
    lib = library(path)
    _check(lib, lib.streampool_empty_cache(), "streampool_empty_cache")


def set_memory_fraction(fraction: float, device: int = -1, path: Optional[str] = None) -> None:
    """Caps streampool's memory on `device` at fraction × total."""
    lib = library(path)
    _check(lib, lib.streampool_set_memory_fraction(float(fraction), device), "streampool_set_memory_fraction")


def record_stream(tensor, stream, path: Optional[str] = None) -> None:
    """Marks the allocation under `tensor` as used by `stream` (a torch.cuda.Stream), as
    Tensor.record_stream does for PyTorch's allocator (which a pluggable allocator does not get)."""
    lib = library(path)
    ptr = tensor.untyped_storage().data_ptr()  # the allocation's base, not a view's offset
    _check(lib, lib.streampool_record_stream(ctypes.c_void_p(ptr), ctypes.c_void_p(stream.cuda_stream)),
           "streampool_record_stream")


def backend_name(path: Optional[str] = None) -> str:
    """"native" or "cudaMallocAsync" (creates the allocator from the environment if needed)."""
    lib = library(path)
    name = lib.streampool_backend_name()
    if name is None:
        _raise_last(lib, "streampool_backend_name")
    return name.decode()
