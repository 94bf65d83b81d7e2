"""Settings changed while the allocator runs: streampool.set_allocator_settings() and
streampool.allocator_settings(), for programs with or without torch.

The same keys and rules as torch.cuda.memory._set_allocator_settings (which reaches streampool
too once install() has run): max_split_size_mb, max_non_split_rounding_mb, roundup_power2_divisions,
roundup_bypass_threshold_mb, garbage_collection_threshold, expandable_segments (new segments),
release_lock_on_cudamalloc, graph_capture_record_stream_reuse and per_process_memory_fraction; max_split_size_mb,
roundup_power2_divisions and garbage_collection_threshold go back to their defaults unless given.
"""

from __future__ import annotations

import ctypes
from typing import Optional

from ._extension import active as _extension
from ._library import StreampoolError, check, library, text_call


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    lib.streampool_set_settings.argtypes = [ctypes.c_char_p]
    lib.streampool_set_settings.restype = ctypes.c_int
    lib.streampool_settings_text.argtypes = []
    lib.streampool_settings_text.restype = ctypes.c_char_p
    return lib


def _text(config: str) -> bytes:
    if not isinstance(config, str):
        raise TypeError(f"streampool.set_allocator_settings: config must be a str such as "
                        f"'roundup_power2_divisions:4', not {type(config).__name__}")
    if "\0" in config:
        raise ValueError("streampool.set_allocator_settings: config contains a NUL character; pass the config "
                         "string without it")
    return config.encode()


def set_allocator_settings(config: str, path: Optional[str] = None) -> None:
    """Changes the runtime keys of the allocator's config; raises StreampoolError (nothing changed)
    for a bad string or a key that cannot change while the allocator runs."""
    encoded = _text(config)
    ext = _extension()
    if ext is not None:
        try:
            return ext.set_settings(config)
        except (RuntimeError, ValueError) as e:
            raise StreampoolError(f"streampool.set_allocator_settings failed: {e}") from e
    lib = _declare(library(path))
    check(lib, lib.streampool_set_settings(encoded), "streampool_set_settings")


def allocator_settings(path: Optional[str] = None) -> str:
    """The config in effect now, one key a line with where its value came from ("set at run time"
    for changes made with set_allocator_settings or torch's _set_allocator_settings)."""
    ext = _extension()
    if ext is not None:
        return ext.settings_text()
    lib = _declare(library(path))
    return text_call(lib, lib.streampool_settings_text, "streampool_settings_text")
