"""examples/interop/reuse.py — who reused whose memory, from streampool's allocation trace: the
pipeline's evidence that memory freed by CuPy serves PyTorch (and the other way round). Pure
Python, no GPU: python/tests/test_interop_reuse.py checks it.

Note [Attributing trace entries]
The trace (streampool.snapshot()["device_traces"][d]) has every allocation of the shared
allocator in order, with its address and requested size, but not which library asked. The
pipeline logs each allocation streampool.interop made (CuPy's, Numba's) in call order; as the
pipeline runs on one thread, those appear in the trace in the same order, so walking the trace
and the log together attributes each "alloc" entry: the next logged (addr, size) is that
library's, any other entry is PyTorch's. A freed block is remembered with its library until an
allocation overlaps it; that allocation "reuses" it, and the table counts reuses and bytes per
(freed by, reused by) pair.
"""

from __future__ import annotations

import bisect
from typing import Dict, Iterable, List, Sequence, Tuple

TORCH = "torch"


class _FreedBlocks:
    """Disjoint freed address ranges, each with the library that freed it."""

    def __init__(self) -> None:
        self.starts: List[int] = []
        self.blocks: Dict[int, Tuple[int, str]] = {}  # start -> (end, origin)

    def add(self, start: int, size: int, origin: str) -> None:
        self.take(start, size)  # a range freed again replaces what was there
        bisect.insort(self.starts, start)
        self.blocks[start] = (start + size, origin)

    def take(self, start: int, size: int) -> List[Tuple[str, int]]:
        """Removes the freed ranges overlapping [start, start + size): (origin, overlap bytes) each."""
        end = start + size
        taken: List[Tuple[str, int]] = []
        i = bisect.bisect_right(self.starts, start) - 1
        i = max(i, 0)
        while i < len(self.starts) and self.starts[i] < end:
            s = self.starts[i]
            e, origin = self.blocks[s]
            if e > start:
                taken.append((origin, min(e, end) - max(s, start)))
                del self.starts[i]
                del self.blocks[s]
                continue
            i += 1
        return taken


def attribute(trace: Iterable[dict], logged: Sequence[Tuple[int, int, str]]) -> List[Tuple[dict, str]]:
    """Each "alloc" entry of `trace` with its library (Note [Attributing trace entries]);
    `logged` is (addr, size, origin) of the interop allocations in call order."""
    out: List[Tuple[dict, str]] = []
    j = 0
    for entry in trace:
        if entry.get("action") != "alloc":
            continue
        if j < len(logged) and (entry["addr"], entry["size"]) == tuple(logged[j][:2]):
            out.append((entry, logged[j][2]))
            j += 1
        else:
            out.append((entry, TORCH))
    if j != len(logged):
        raise ValueError(f"only {j} of the {len(logged)} logged interop allocations are in the trace, in order: "
                         "the trace ring was too small, or allocations came from another thread")
    return out


def reuse_table(trace: Sequence[dict], logged: Sequence[Tuple[int, int, str]]) -> Dict[str, Dict[str, int]]:
    """{"cupy->torch": {"reuses": n, "bytes": b}, ...}: allocations of one library placed in memory
    another library (or itself) freed earlier, from the trace (Note [Attributing trace entries])."""
    origins = {id(entry): origin for entry, origin in attribute(trace, logged)}
    live: Dict[int, Tuple[int, str]] = {}
    freed = _FreedBlocks()
    table: Dict[str, Dict[str, int]] = {}
    for entry in trace:
        action = entry.get("action")
        if action == "alloc":
            origin = origins[id(entry)]
            for freed_by, overlap in freed.take(entry["addr"], entry["size"]):
                row = table.setdefault(f"{freed_by}->{origin}", {"reuses": 0, "bytes": 0})
                row["reuses"] += 1
                row["bytes"] += overlap
            live[entry["addr"]] = (entry["size"], origin)
        elif action in ("free_requested", "free_completed"):
            block = live.pop(entry["addr"], None)
            if block is not None:  # the first of the two marks it (a completed free follows its request)
                freed.add(entry["addr"], block[0], block[1])
    return table
