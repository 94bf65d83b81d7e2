"""Loading `streampool._C10`, the C++ extension that makes streampool PyTorch's CUDA allocator
through c10's allocator interface (python/csrc), and knowing whether it is the installed route.

The extension is built by `pip install --no-build-isolation ./python` when torch is importable and
its release is supported (Note [Supported PyTorch] in _version_gate.py); the build records the
release it compiled against in `_C10_build.py`, checked before the module is loaded.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Optional, Tuple

from ._version_gate import refusal

_installed: Optional[ModuleType] = None


def built_for() -> Optional[Tuple[int, int]]:
    """The (major, minor) of the torch the extension was compiled against; None when not built."""
    try:
        from ._C10_build import torch_version
    except ImportError:
        return None
    return tuple(torch_version)  # type: ignore[return-value]


def load() -> Tuple[Optional[ModuleType], str]:
    """(the module, "") when the extension can serve the running torch, else (None, why not)."""
    import torch

    built = built_for()
    if built is None:
        reason = refusal(torch.__version__)
        if reason:
            return None, reason
        return None, ("streampool: the extension allocator was not built into this install (torch was not "
                      "importable, or the build was turned off, when the package was built); reinstall with "
                      "torch present: pip install --no-build-isolation ./python")
    reason = refusal(torch.__version__, built)
    if reason:
        return None, reason
    try:
        module = importlib.import_module("streampool._C10")
    except ImportError as e:
        return None, f"streampool: the extension allocator does not load ({e})"
    return module, ""


def mark_installed(module: ModuleType) -> None:
    global _installed
    _installed = module


def active() -> Optional[ModuleType]:
    """The extension module when it is PyTorch's allocator in this process (install() chose it)."""
    return _installed
