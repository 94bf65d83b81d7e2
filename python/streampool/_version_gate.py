"""Which PyTorch releases streampool's extension allocator supports, and the check install() and
the build make. Standard library only (no torch import), so it is tested without torch.

Note [Supported PyTorch]
The extension implements c10's CUDAAllocator interface (c10/cuda/CUDACachingAllocator.h), whose
hooks change between PyTorch releases (recordHistory's arguments, pool hooks, checkpoint hooks).
It is written and checked against PyTorch 2.11 and compiled against the torch that is installed
when the package is built; an extension built for one release is never loaded into another (a C++
ABI mismatch crashes rather than fails). Other releases use the CUDAPluggableAllocator route, which
works with any PyTorch >= 2.1 but gives less (docs/integrations/pytorch.md, "Two routes").
"""

from __future__ import annotations

import re
from typing import Optional, Tuple

#: (major, minor) releases the extension supports; patch releases of these are accepted.
SUPPORTED: Tuple[Tuple[int, int], ...] = ((2, 11),)


def parse(version: str) -> Tuple[int, int]:
    """(major, minor) of a torch version string: "2.11.0+cu130" -> (2, 11), "2.12.0a0+git1" -> (2, 12).

    Raises ValueError for text that does not start with "<major>.<minor>"."""
    match = re.match(r"\s*(\d+)\.(\d+)", version)
    if not match:
        raise ValueError(f"not a PyTorch version: {version!r}")
    return int(match.group(1)), int(match.group(2))


def supported_text() -> str:
    return ", ".join(f"{a}.{b}" for a, b in SUPPORTED)


def refusal(torch_version: str, built_for: Optional[Tuple[int, int]] = None) -> Optional[str]:
    """None when the extension may be used with the running `torch_version`; else why not.

    `built_for` is the (major, minor) the extension was compiled against (its `torch_version`),
    None when there is no built extension to compare."""
    try:
        running = parse(torch_version)
    except ValueError as e:
        return f"streampool: cannot tell the PyTorch release ({e}); the extension supports {supported_text()}"
    if running not in SUPPORTED:
        return (f"streampool: PyTorch {torch_version} is not supported by the extension allocator (supported: "
                f"{supported_text()}; c10's allocator interface differs between releases)")
    if built_for is not None and tuple(built_for) != running:
        return (f"streampool: the extension was built against PyTorch {built_for[0]}.{built_for[1]}, but "
                f"{torch_version} is running; reinstall the package (pip install --no-build-isolation ./python) "
                "with this torch installed")
    return None
