"""snapshot() and dump_snapshot(): streampool's segments, blocks and trace as the dict
torch.cuda.memory._snapshot() returns, and as the pickle torch.cuda.memory._dump_snapshot() writes,
so PyTorch's memory_viz (the pytorch.org/memory_viz page and `python -m torch.cuda._memory_viz`)
and `streampool-bench replay/tune --trace` open it. Written with the standard pickle module from
plain dicts, lists, tuples, ints and strings: torch is not needed.

Note [Snapshot shape for memory_viz]
The C API's JSON is already in PyTorch's key names; to_torch_snapshot() makes three adjustments
memory_viz relies on: (1) the blocks of a segment tile it exactly, in address order (the viewer
derives each block's address by adding up the sizes before it, and `_memory_viz stats` asserts the
sum equals total_size), so a gap becomes an "inactive" block; (2) "device_traces" has one list per
device, also for devices with no events (the viewer indexes it by device); (3) pool ids are tuples,
as PyTorch writes them. problems() checks all of it, the keys each record must have, and that the trace replays
backwards from the final state as the viewer's "Allocator State History" replays it.
"""

from __future__ import annotations

import json
import pickle
from typing import Any, Dict, List, Optional

from . import interop
from ._core import backend_name, device_count
from ._extension import active as _extension
from ._library import library, text_call

#: Pickle protocol of dump_snapshot(): pickle.dump's default on Python 3.8-3.13, which torch writes too.
PICKLE_PROTOCOL = 4

SEGMENT_KEYS = ("device", "address", "total_size", "allocated_size", "active_size", "requested_size", "stream",
                "segment_type", "segment_pool_id", "is_expandable", "frames", "blocks")
BLOCK_KEYS = ("address", "size", "requested_size", "state", "frames")
BLOCK_STATES = ("active_allocated", "active_pending_free", "inactive")
TRACE_KEYS = ("action", "size", "stream", "time_us", "frames")  # plus "addr", or "device_free" for "oom"
TRACE_ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map",
                 "segment_unmap", "oom", "snapshot")


def _tuple_id(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _tiled_blocks(segment: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The segment's blocks by address with every gap filled by an inactive block."""
    blocks = sorted(segment.get("blocks", []), key=lambda b: b["address"])
    out: List[Dict[str, Any]] = []
    cursor = segment["address"]
    end = segment["address"] + segment["total_size"]
    for block in blocks:
        if block["address"] > cursor:
            out.append({"address": cursor, "size": block["address"] - cursor, "requested_size": 0,
                        "state": "inactive", "frames": []})
        out.append({"address": block["address"], "size": block["size"], "requested_size": block["requested_size"],
                    "state": block["state"], "frames": list(block.get("frames", []))})
        cursor = block["address"] + block["size"]
    if cursor < end:
        out.append({"address": cursor, "size": end - cursor, "requested_size": 0, "state": "inactive", "frames": []})
    return out


def to_torch_snapshot(raw: Dict[str, Any], devices: int, backend: str = "") -> Dict[str, Any]:
    """The C API's snapshot JSON (parsed) in the exact shape of torch.cuda.memory._snapshot()
    (Note [Snapshot shape for memory_viz]); `devices` is the device count."""
    segments = []
    for seg in raw.get("segments", []):
        out = {key: seg[key] for key in SEGMENT_KEYS if key not in ("blocks", "frames", "segment_pool_id")}
        out["segment_pool_id"] = _tuple_id(seg.get("segment_pool_id", (0, 0)))
        out["frames"] = list(seg.get("frames", []))
        out["blocks"] = _tiled_blocks(seg)
        segments.append(out)
    traces = [list(t) for t in raw.get("device_traces", [])]
    wanted = max([devices, len(traces)] + [s["device"] + 1 for s in segments])
    traces += [[] for _ in range(wanted - len(traces))]
    for trace in traces:
        for entry in trace:
            if "segment_pool_id" in entry:
                entry["segment_pool_id"] = _tuple_id(entry["segment_pool_id"])
            entry.setdefault("frames", [])
    settings = dict(raw.get("allocator_settings", {}))
    if backend:
        settings["streampool_backend"] = backend
    return {
        "segments": segments,
        "device_traces": traces,
        "allocator_settings": settings,
        "external_annotations": list(raw.get("external_annotations", [])),
        # streampool's addition: pages of expandable segments held outside every segment.
        "leftover_pages": list(raw.get("leftover_pages", [])),
    }


def snapshot(path: Optional[str] = None) -> Dict[str, Any]:
    """streampool's segments, blocks and (when recording: record_history() or record()) trace of
    every device, as the dict torch.cuda.memory._snapshot() returns; blocks allocated through
    streampool.interop (streampool.cupy, streampool.numba) carry "origin", the library's name."""
    ext = _extension()
    if ext is not None:  # Note [Two allocators, one answer] in _core.py
        raw = json.loads(ext.snapshot_json())
    else:
        lib = library(path)
        raw = json.loads(text_call(lib, lib.streampool_snapshot_json, "streampool_snapshot_json"))
    # Blocks of streampool.cupy / streampool.numba / interop allocations name their library (Note [Origins]).
    return interop.annotate_snapshot(to_torch_snapshot(raw, device_count(path), backend_name(path)))


def dump_snapshot(filename: str = "dump_snapshot.pickle", path: Optional[str] = None) -> Dict[str, Any]:
    """Writes snapshot() to `filename` as a pickle, as torch.cuda.memory._dump_snapshot() does:
    open it at pytorch.org/memory_viz, with `python -m torch.cuda._memory_viz trace_plot FILE`, or
    give it to `streampool-bench tune --trace FILE`. Returns the snapshot."""
    data = snapshot(path)
    with open(filename, "wb") as f:
        pickle.dump(data, f, protocol=PICKLE_PROTOCOL)
    return data


class _Ranges:
    """Disjoint [start, end) address ranges, merged when adjacent (as memory_viz merges mapped pages)."""

    def __init__(self) -> None:
        self.ranges: List[List[int]] = []

    def add(self, start: int, size: int) -> bool:
        end = start + size
        if any(s < end and start < e for s, e in self.ranges):
            return False
        self.ranges.append([start, end])
        self.ranges.sort()
        merged: List[List[int]] = []
        for r in self.ranges:
            if merged and merged[-1][1] == r[0]:
                merged[-1][1] = r[1]
            else:
                merged.append(r)
        self.ranges = merged
        return True

    def remove(self, start: int, size: int) -> bool:
        end = start + size
        for i, (s, e) in enumerate(self.ranges):
            if s <= start and end <= e:
                self.ranges[i:i + 1] = [r for r in ([s, start], [end, e]) if r[0] < r[1]]
                return True
        return False

    def holds(self, start: int, size: int) -> bool:
        return any(s <= start and start + size <= e for s, e in self.ranges)


def replay_problems(data: Dict[str, Any]) -> List[str]:
    """Walks each device's trace backwards from the snapshot's state, as memory_viz's "Allocator
    State History" does, and reports the first event that does not fit: an alloc or a
    free_requested whose block is not live at that point, a block freed outside every segment, a
    segment created twice or removed while not there or while it still holds live blocks."""
    out: List[str] = []
    for device, trace in enumerate(data["device_traces"]):
        segments = _Ranges()
        blocks: Dict[int, int] = {}
        for seg in data["segments"]:
            if seg["device"] != device:
                continue
            segments.add(seg["address"], seg["total_size"])
            for block in seg["blocks"]:
                if block["state"] != "inactive":
                    blocks[block["address"]] = block["size"]
        for k in range(len(trace) - 1, -1, -1):
            e = trace[k]
            action, where = e["action"], f"device_traces[{device}][{k}] ({e['action']} at {e.get('addr')})"
            problem = ""
            if action == "alloc":
                problem = "" if blocks.pop(e["addr"], None) is not None else "no such live block"
            elif action == "free_requested":
                problem = "" if e["addr"] in blocks else "no such live block"
            elif action == "free_completed":
                blocks[e["addr"]] = e["size"]
                problem = "" if segments.holds(e["addr"], 1) else "the block lies outside every segment"
            elif action in ("segment_free", "segment_unmap"):
                problem = "" if segments.add(e["addr"], e["size"]) else "the range overlaps a segment"
            elif action in ("segment_alloc", "segment_map"):
                inside = [a for a in blocks if e["addr"] <= a < e["addr"] + e["size"]]
                if not segments.remove(e["addr"], e["size"]):
                    problem = "no such segment"
                elif inside:
                    problem = f"{len(inside)} live block(s) still in it"
            if problem:
                out.append(f"{where}: {problem}")
                break
    return out


def problems(data: Any) -> List[str]:
    """What keeps `data` from being a snapshot memory_viz reads (empty list when none): missing
    keys, wrong types, blocks that do not tile their segment, trace entries without their keys."""
    out: List[str] = []
    if not isinstance(data, dict):
        return [f"the snapshot is a {type(data).__name__}, not a dict"]
    for key in ("segments", "device_traces"):
        if not isinstance(data.get(key), list):
            out.append(f"'{key}' is missing or not a list")
    if out:
        return out
    if not isinstance(data.get("allocator_settings", {}), dict):
        out.append("'allocator_settings' is not a dict")
    for i, seg in enumerate(data["segments"]):
        missing = [k for k in SEGMENT_KEYS if k not in seg]
        if missing:
            out.append(f"segment {i} lacks {missing}")
            continue
        if seg["segment_type"] not in ("large", "small"):
            out.append(f"segment {i}: segment_type {seg['segment_type']!r}")
        if not 0 <= seg["device"] < len(data["device_traces"]):
            out.append(f"segment {i}: device {seg['device']} has no list in device_traces")
        cursor = seg["address"]
        for j, block in enumerate(seg["blocks"]):
            lacking = [k for k in BLOCK_KEYS if k not in block]
            if lacking:
                out.append(f"segment {i} block {j} lacks {lacking}")
                break
            if block["address"] != cursor:
                out.append(f"segment {i} block {j} starts at {block['address']}, not {cursor}: blocks must tile")
                break
            if block["state"] not in BLOCK_STATES:
                out.append(f"segment {i} block {j}: state {block['state']!r}")
            if block["requested_size"] > block["size"]:
                out.append(f"segment {i} block {j}: requested_size > size")
            cursor += block["size"]
        else:
            if cursor != seg["address"] + seg["total_size"]:
                out.append(f"segment {i}: blocks cover {cursor - seg['address']} of {seg['total_size']} bytes")
    for device, trace in enumerate(data["device_traces"]):
        if not isinstance(trace, list):
            out.append(f"device_traces[{device}] is not a list")
            continue
        for k, entry in enumerate(trace):
            where = "device_free" if entry.get("action") == "oom" else "addr"
            lacking = [key for key in TRACE_KEYS + (where,) if key not in entry]
            if lacking:
                out.append(f"device_traces[{device}][{k}] lacks {lacking}")
                break
            if entry["action"] not in TRACE_ACTIONS:
                out.append(f"device_traces[{device}][{k}]: action {entry['action']!r}")
                break
    return out or replay_problems(data)
