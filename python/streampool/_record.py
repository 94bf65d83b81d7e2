"""record(path): a context manager that records every allocator event of a run and writes it as a
snapshot pickle (the format of torch.cuda.memory._dump_snapshot()) when the block ends, for
`streampool-bench replay/tune --trace` and for memory_viz.

Note [Recording a run]
With PyTorch's own allocator (the default when streampool is not installed) it turns on
torch.cuda.memory._record_memory_history(enabled="all", context=None, max_entries=...): the events
without stack traces, which keeps the file small (a few dozen bytes per event instead of several
KiB); `stacks=True` records Python stacks too. With streampool installed as PyTorch's allocator,
or source="streampool", it turns on streampool's own trace (streampool_record_history); with
`stacks=True` it goes through PyTorch's API even then, which the extension allocator serves with
the stacks attached (streampool's own trace has no room for them). Either way
the ring buffer keeps the last `max_entries` events per device; the default keeps them all, so the
trace starts at the first event after record() began. Begin it before the model is built: memory
allocated earlier (weights, optimizer state) is then in the trace, not only in the final state,
and replay/tune see the whole run. The file is written also when the block raises (an
out-of-memory error is the moment one wants the trace).
"""

from __future__ import annotations

import contextlib
import pickle
import sys
import warnings
from typing import Iterator, List, Optional

from ._core import record_history
from ._library import StreampoolError
from ._snapshot import PICKLE_PROTOCOL, snapshot
from ._torch import installed_route, is_installed

#: streampool's ring buffer size when record() is asked to keep every event.
UNBOUNDED = 1 << 62


class Recording:
    """What record() yields: the destination, the allocator recorded, and after the block the
    number of events kept per device."""

    def __init__(self, path: str, source: str, max_entries: Optional[int]):
        self.path = path
        self.source = source
        self.max_entries = max_entries
        self.events: List[int] = []

    def __repr__(self) -> str:
        return f"Recording(path={self.path!r}, source={self.source!r}, events={self.events})"


def _resolve_source(source: str) -> str:
    if source not in ("auto", "torch", "streampool"):
        raise ValueError(f"streampool.record: source must be 'auto', 'torch' or 'streampool', not {source!r}")
    if source != "auto":
        return source
    if is_installed():
        return "streampool"
    try:
        import torch  # noqa: F401
    except ImportError as e:
        raise StreampoolError("streampool.record: torch is not importable, so there is no PyTorch allocator to "
                              "record; pass source='streampool' to record streampool's own allocator") from e
    return "torch"


def _warn_if_full(recording: Recording) -> None:
    limit = recording.max_entries
    if limit is not None and any(n >= limit for n in recording.events):
        warnings.warn(f"streampool.record: the trace holds max_entries={limit} events on a device, so older events "
                      f"were probably dropped and {recording.path} starts mid-run; record with a larger max_entries "
                      "(or None: keep everything) to replay the whole run", RuntimeWarning, stacklevel=3)


@contextlib.contextmanager
def record(path: str, max_entries: Optional[int] = None, source: str = "auto", stacks: bool = False,
           lib_path: Optional[str] = None) -> Iterator[Recording]:
    """Records the allocator's events while the block runs and writes them to `path` (a snapshot
    pickle) when it ends (Note [Recording a run]). Start it before the model is built.

    `source`: "torch" (PyTorch's allocator), "streampool" (streampool's), or "auto" (streampool's
    when install() was called, else PyTorch's). `max_entries`: events kept per device (None = all).
    `stacks`: also record Python stack traces (much larger files; for streampool's allocator only
    through the extension route of install()).
    Raises StreampoolError when the chosen allocator cannot record (e.g. no torch)."""
    if max_entries is not None and max_entries < 1:
        raise ValueError(f"streampool.record: max_entries must be at least 1 (or None), not {max_entries}")
    recording = Recording(str(path), _resolve_source(source), max_entries)
    if stacks and recording.source == "streampool" and installed_route() != "extension":
        how = f"install() took the {installed_route()} route" if is_installed() else "install() was not called"
        raise StreampoolError("streampool.record(stacks=True): stack traces of streampool's allocator are gathered "
                              f"through PyTorch's memory-history hooks, which only the extension route has ({how}); "
                              "call streampool.install(route='extension') first, or record without stacks")
    # Note [Recording a run]: stacks of streampool's allocator come through PyTorch's API, which the
    # extension serves (Note [Stack contexts] in python/csrc/stack_contexts.hpp).
    if recording.source == "torch" or stacks:
        import torch

        torch.cuda.memory._record_memory_history(enabled="all", context="all" if stacks else None,
                                                 stacks="python",
                                                 max_entries=max_entries if max_entries is not None else sys.maxsize)
        try:
            yield recording
        finally:
            data = torch.cuda.memory._snapshot()
            torch.cuda.memory._record_memory_history(enabled=None)
            with open(recording.path, "wb") as f:
                pickle.dump(data, f, protocol=PICKLE_PROTOCOL)
            recording.events = [len(t) for t in data.get("device_traces", [])]
            _warn_if_full(recording)
        return
    record_history(True, max_entries if max_entries is not None else UNBOUNDED, lib_path)
    try:
        yield recording
    finally:
        data = snapshot(lib_path)
        record_history(False, 1, lib_path)
        with open(recording.path, "wb") as f:
            pickle.dump(data, f, protocol=PICKLE_PROTOCOL)
        recording.events = [len(t) for t in data["device_traces"]]
        _warn_if_full(recording)
