"""Finding and loading libstreampool.so, with the C API's signatures declared for ctypes.

Search order: the ``path`` argument, else ``$STREAMPOOL_LIB`` (a file or a folder), else the copy
installed inside this package (``pip install ./python``), else the build folders of the checkout
this file lives in (running from the source tree), else the system library path.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
from pathlib import Path
from typing import Callable, List, Optional

LIBRARY_NAME = "libstreampool.so"
_PACKAGE_DIR = Path(__file__).resolve().parent
# python/streampool/_library.py -> the repository root, when running from a checkout.
_CHECKOUT_ROOT = _PACKAGE_DIR.parents[1]
_PREFERRED_BUILD_DIRS = ("build-gpu", "build", "build-python")

_lib: Optional[ctypes.CDLL] = None
_lib_path: Optional[str] = None


class StreampoolError(RuntimeError):
    """A streampool C API call failed, or the library cannot be found or set up."""


def _checkout_candidates() -> List[str]:
    if not (_CHECKOUT_ROOT / "CMakeLists.txt").is_file():
        return []
    out = [str(_CHECKOUT_ROOT / d / LIBRARY_NAME) for d in _PREFERRED_BUILD_DIRS]
    others = sorted(glob.glob(str(_CHECKOUT_ROOT / "build*" / LIBRARY_NAME)), key=os.path.getmtime, reverse=True)
    return out + [p for p in others if p not in out]


def _candidates() -> List[str]:
    return [str(_PACKAGE_DIR / LIBRARY_NAME)] + _checkout_candidates()


def find_library(path: Optional[str] = None) -> str:
    """Absolute path of libstreampool.so (see the module's search order).

    Raises StreampoolError when none exists, naming what was tried."""
    explicit = path or os.environ.get("STREAMPOOL_LIB")
    if explicit:
        p = Path(explicit)
        if p.is_dir():
            p = p / LIBRARY_NAME
        if not p.is_file():
            source = "argument" if path else "STREAMPOOL_LIB"
            raise StreampoolError(f"streampool: {LIBRARY_NAME} not found at {p} (from the {source}); "
                                  "install the package (pip install ./python) or build the library "
                                  "(cmake --build <build> --target streampool_shared)")
        return str(p.resolve())
    tried = _candidates()
    for candidate in tried:
        if os.path.isfile(candidate):
            return str(Path(candidate).resolve())
    system = ctypes.util.find_library("streampool")
    if system:
        return system
    raise StreampoolError(f"streampool: {LIBRARY_NAME} not found; install the package (pip install ./python), "
                          "set STREAMPOOL_LIB, or build it (cmake --build build --target streampool_shared). "
                          "Tried: " + ", ".join(tried))


# name: (argument types, result type)
_SIGNATURES = {
    "streampool_init": ([ctypes.c_char_p], ctypes.c_int),
    "streampool_shutdown": ([], ctypes.c_int),
    "streampool_alloc": ([ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p], ctypes.c_void_p),
    "streampool_free": ([ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p], None),
    "streampool_record_stream": ([ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int),
    "streampool_empty_cache": ([], ctypes.c_int),
    "streampool_set_memory_fraction": ([ctypes.c_double, ctypes.c_int], ctypes.c_int),
    "streampool_stats_json": ([ctypes.c_int], ctypes.c_char_p),
    "streampool_snapshot_json": ([], ctypes.c_char_p),
    "streampool_backend_name": ([], ctypes.c_char_p),
    "streampool_last_status": ([], ctypes.c_int),
    "streampool_last_error": ([], ctypes.c_char_p),
    "streampool_reset_peak_stats": ([ctypes.c_int], ctypes.c_int),
    "streampool_reset_accumulated_stats": ([ctypes.c_int], ctypes.c_int),
    "streampool_record_history": ([ctypes.c_int, ctypes.c_size_t], ctypes.c_int),
    "streampool_trace_csv": ([ctypes.c_int], ctypes.c_char_p),
    "streampool_device_count": ([ctypes.POINTER(ctypes.c_int)], ctypes.c_int),
    "streampool_init_sim": ([ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int),
    "streampool_host_init": ([ctypes.c_char_p], ctypes.c_int),
    "streampool_host_alloc": ([ctypes.c_size_t], ctypes.c_void_p),
    "streampool_host_free": ([ctypes.c_void_p], ctypes.c_int),
    "streampool_host_record_stream": ([ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int),
    "streampool_host_empty_cache": ([], ctypes.c_int),
    "streampool_host_stats_json": ([], ctypes.c_char_p),
    "streampool_free_unsized": ([ctypes.c_void_p], ctypes.c_int),
    "streampool_set_delegate": ([ctypes.c_void_p], ctypes.c_int),
    "streampool_delegate_name": ([], ctypes.c_char_p),
}


def library(path: Optional[str] = None) -> ctypes.CDLL:
    """The loaded libstreampool.so with every C API signature declared. Loaded once per process
    (it is the same handle PyTorch's CUDAPluggableAllocator gets, since dlopen of one file is
    shared); asking for a different file afterwards raises StreampoolError."""
    global _lib, _lib_path
    resolved = find_library(path if path is not None else _lib_path)
    if _lib is not None:
        if resolved != _lib_path:
            raise StreampoolError(f"streampool: already loaded from {_lib_path}; cannot also use {resolved}")
        return _lib
    try:
        lib = ctypes.CDLL(resolved)
    except OSError as e:
        raise StreampoolError(f"streampool: cannot load {resolved}: {e}") from e
    missing = [name for name in _SIGNATURES if not hasattr(lib, name)]
    if missing:
        raise StreampoolError(f"streampool: {resolved} lacks {', '.join(missing)}; it is older than this Python "
                              "package: rebuild it, or reinstall the package (pip install ./python)")
    for name, (argtypes, restype) in _SIGNATURES.items():
        function = getattr(lib, name)
        function.argtypes = argtypes
        function.restype = restype
    _lib, _lib_path = lib, resolved
    return lib


def loaded_path() -> Optional[str]:
    """The file library() loaded, or None before the first call."""
    return _lib_path


#: C API statuses the Python messages add a hint to (include/streampool/c_api.h).
STATUS_CUDA = 3
STATUS_NOT_INITIALIZED = 7


def _hint(status: int, message: str) -> str:
    """What to call next, in Python terms, for the failures a new user meets first: no GPU, and
    calls after shutdown()."""
    if status == STATUS_CUDA and "no usable CUDA device" in message:
        return (" Without a GPU, streampool.init(driver=\"sim\") creates the allocator on the simulated device "
                "(to try a config or read statistics); call it before the first use.")
    if status == STATUS_NOT_INITIALIZED:
        return " Call streampool.init(...) (driver=\"sim\" without a GPU) to create the next allocator."
    return ""


def raise_last(lib: ctypes.CDLL, what: str) -> None:
    """Raises StreampoolError with the calling thread's last C API status and message, and a hint
    of what to call when the cause is a missing GPU or a shutdown allocator."""
    message = (lib.streampool_last_error() or b"").decode(errors="replace")
    status = lib.streampool_last_status()
    raise StreampoolError(f"{what} failed (status {status}): {message}{_hint(status, message)}")


def check(lib: ctypes.CDLL, status: int, what: str) -> None:
    """raise_last unless `status` is 0 (STREAMPOOL_OK)."""
    if status != 0:
        raise_last(lib, what)


def text_call(lib: ctypes.CDLL, function: Callable[..., Optional[bytes]], what: str, *args) -> str:
    """Calls a C function that returns text (NULL on failure) and decodes it."""
    text = function(*args)
    if text is None:
        raise_last(lib, what)
    return text.decode()
