"""memory_summary(): streampool's statistics as a readable table, laid out like
torch.cuda.memory_summary() (the same metrics, rows and columns), so the two can be read side by
side. format_summary() is the pure formatter (tested without the library)."""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple, Union

from ._core import backend_name, stats

_WIDTH = 75  # characters between the outer bars

# (stat prefix, row title, unit) in the order of torch.cuda.memory_summary().
_METRICS: Tuple[Tuple[str, str, str], ...] = (
    ("allocated_bytes", "Allocated memory", "bytes"),
    ("active_bytes", "Active memory", "bytes"),
    ("requested_bytes", "Requested memory", "bytes"),
    ("reserved_bytes", "GPU reserved memory", "bytes"),
    ("inactive_split_bytes", "Non-releasable memory", "bytes"),
    ("allocation", "Allocations", "count"),
    ("active", "Active allocs", "count"),
    ("segment", "GPU reserved segments", "count"),
    ("inactive_split", "Non-releasable allocs", "count"),
)
_OVERSIZE: Tuple[Tuple[str, str], ...] = (
    ("oversize_allocations", "Oversize allocations"),
    ("oversize_segments", "Oversize GPU segments"),
)
_COLUMNS = ("current", "peak", "allocated", "freed")


def format_bytes(value: int) -> str:
    """Bytes in the largest unit that keeps the number below 10240 ("512 B", "7 KiB", "1024 MiB")."""
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
    unit = 0
    magnitude = abs(value)
    while magnitude >= 10240 and unit < len(units) - 1:
        magnitude //= 1024
        unit += 1
    sign = "-" if value < 0 else ""
    return f"{sign}{magnitude} {units[unit]}"


def format_count(value: int) -> str:
    """Counts in thousands or millions once they get long ("9999", "10K", "12M")."""
    magnitude = abs(value)
    sign = "-" if value < 0 else ""
    if magnitude >= 10_000_000:
        return f"{sign}{magnitude // 1_000_000}M"
    if magnitude >= 10_000:
        return f"{sign}{magnitude // 1000}K"
    return f"{sign}{magnitude}"


def _row(title: str, cells: List[str]) -> str:
    return "| " + f"{title:<21}" + " | " + " | ".join(f"{c:>10}" for c in cells) + " |"


def _rule(char: str) -> str:
    return "|" + char * _WIDTH + "|"


def _centered(text: str) -> str:
    return "|" + text.center(_WIDTH) + "|"


def format_summary(values: Dict[str, int], device: Union[int, str], backend: str, abbreviated: bool = False) -> str:
    """The table for one device's statistics `values` (the dict stats() returns).

    Raises KeyError naming the first statistic missing from `values`."""
    lines = [_rule("="), _centered(f"streampool memory summary, device ID {device} ({backend} backend)"),
             _rule("-")]
    half = (_WIDTH - 1) // 2
    ooms = f"  OOMs: {values['num_ooms']:<10}".ljust(half)
    retries = f"device malloc retries: {values['num_alloc_retries']:<10}".rjust(_WIDTH - 1 - half)
    lines += ["|" + ooms + "|" + retries + "|", _rule("="),
              _row("Metric", ["Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed"]), _rule("-")]
    pools = (("all", ""),) if abbreviated else (("all", ""), ("large_pool", "      from large pool"),
                                                  ("small_pool", "      from small pool"))
    for prefix, title, unit in _METRICS:
        fmt: Callable[[int], str] = format_bytes if unit == "bytes" else format_count
        for pool, pool_title in pools:
            cells = [fmt(values[f"{prefix}.{pool}.{column}"]) for column in _COLUMNS]
            lines.append(_row(pool_title or title, cells))
        lines.append(_rule("-"))
    for prefix, title in _OVERSIZE:
        lines.append(_row(title, [format_count(values[f"{prefix}.{column}"]) for column in _COLUMNS]))
    lines.append(_rule("="))
    return "\n".join(lines) + "\n"


def memory_summary(device: int = -1, abbreviated: bool = False, path: Optional[str] = None) -> str:
    """streampool's statistics of `device` (-1 = current) as a table like
    torch.cuda.memory_summary(): allocated, active, requested, reserved and non-releasable memory,
    allocations and segments, each current / peak / total allocated / total freed, split into the
    large and small pools unless `abbreviated`. Print it."""
    values = stats(device, path)
    shown: Union[int, str] = device if device >= 0 else _current_device_label()
    return format_summary(values, shown, backend_name(path), abbreviated)


def _current_device_label() -> Union[int, str]:
    """torch's current device when torch is loaded and CUDA initialised, else "current"."""
    import sys

    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            return int(torch.cuda.current_device())
    except Exception:  # noqa: BLE001 — only a label
        pass
    return "current"
