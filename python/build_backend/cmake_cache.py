"""Reading a CMake build directory's cache, for the package's build backend (streampool_build.py)
and the extension build (torch_extension_build.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional


def cache_value(build_dir: Path, name: str) -> Optional[str]:
    """The value of `name` in build_dir/CMakeCache.txt, or None when the cache or the entry is absent."""
    cache = build_dir / "CMakeCache.txt"
    if not cache.is_file():
        return None
    for line in cache.read_text(errors="replace").splitlines():
        if line.startswith(name + ":"):
            return line.split("=", 1)[1]
    return None
