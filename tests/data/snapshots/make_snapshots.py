#!/usr/bin/env python3
"""Writes the small PyTorch-memory-snapshot pickles the replay tests read (tests/unit/replay).

They have the layout torch.cuda.memory._dump_snapshot() writes (a dict with 'segments',
'device_traces', 'allocator_settings'), built by hand so no torch is needed:
    python3 tests/data/snapshots/make_snapshots.py tests/data/snapshots
Stack frames are shared objects, as in a real snapshot, so the pickles use the memo.
"""
import collections
import gzip
import os
import pickle
import sys

MIB = 1 << 20
STREAM = 94_000_000_000_000  # a plausible cudaStream_t value


def frames(depth):
    return [{"name": "fn%d" % i, "filename": "/very/long/path/to/the/training/script_%d.py" % i,
             "line": 10 + i} for i in range(depth)]


SHARED = frames(3)


def ev(action, addr, size, stream=0, t=0, **extra):
    e = {"action": action, "addr": addr, "size": size, "stream": stream, "time_us": t,
         "frames": SHARED, "compile_context": "", "user_metadata": ""}
    if action == "oom":
        del e["addr"]
        e["device_free"] = addr
    e.update(extra)
    return e


def base_trace():
    """Two allocations on the default stream, one on a side stream freed late (record_stream)."""
    seg = 0x7F0000000000
    return [
        ev("segment_alloc", seg, 20 * MIB, 0, 1),
        ev("alloc", seg, 4 * MIB, 0, 2),
        ev("alloc", seg + 4 * MIB, 8 * MIB, 0, 3),
        ev("alloc", seg + 12 * MIB, 2 * MIB, STREAM, 4),
        ev("free_requested", seg, 4 * MIB, 0, 5),
        ev("free_completed", seg, 4 * MIB, 0, 5),
        ev("free_requested", seg + 12 * MIB, 2 * MIB, STREAM, 6),
        ev("user_defined", 0, 0, 0, 7),
        ev("alloc", seg, 1 * MIB, 0, 8),
        ev("free_completed", seg + 12 * MIB, 2 * MIB, STREAM, 9),
        ev("free_requested", seg, 1 * MIB, 0, 10),
        ev("free_completed", seg, 1 * MIB, 0, 10),
        ev("free_requested", seg + 4 * MIB, 8 * MIB, 0, 11),
        ev("free_completed", seg + 4 * MIB, 8 * MIB, 0, 11),
        ev("oom", 123 * MIB, 64 * MIB, 0, 12),
        ev("snapshot", 0, 0, 0, 13),
    ]


def settings(conf):
    s = {"max_split_size": (1 << 64) - 1, "garbage_collection_threshold": 0.0, "expandable_segments": False,
         "pinned_num_register_threads": 1, "release_lock_on_cudamalloc": False,
         "pinned_use_cuda_host_register": False,
         "roundup_power2_divisions": {str(1 << i): 0 for i in range(16)}}
    if conf is not None:
        s["PYTORCH_CUDA_ALLOC_CONF"] = conf
    return s


def segments():
    return [{"device": 0, "address": 0x7F0000000000, "total_size": 20 * MIB, "allocated_size": 0,
             "active_size": 0, "requested_size": 0, "stream": 0, "segment_type": "large",
             "segment_pool_id": (0, 0), "is_expandable": False, "frames": SHARED,
             "blocks": [{"address": 0x7F0000000000, "size": 20 * MIB, "requested_size": 0,
                         "state": "inactive", "frames": SHARED}]}]


def snapshot(traces, conf="expandable_segments:True,max_split_size_mb:256"):
    return {"segments": segments(), "device_traces": traces, "external_annotations": [],
            "allocator_settings": settings(conf)}


def main(out):
    def write(name, obj, protocol=4, zipped=False):
        data = pickle.dumps(obj, protocol=protocol)
        path = os.path.join(out, name)
        if zipped:
            data = gzip.compress(data, mtime=0)
        with open(path, "wb") as f:
            f.write(data)

    write("snapshot_p4.pickle", snapshot([base_trace()]))
    write("snapshot_p2.pickle", snapshot([base_trace()]), protocol=2)
    write("snapshot_p5.pickle.gz", snapshot([base_trace()]), protocol=5, zipped=True)
    # Device 0 idle, device 1 recorded: an empty list right before a full one.
    write("snapshot_two_devices.snap", snapshot([[], base_trace()]))
    # Older PyTorch: no PYTORCH_CUDA_ALLOC_CONF string, only the parsed values.
    old = snapshot([base_trace()], conf=None)
    old["allocator_settings"]["expandable_segments"] = True
    old["allocator_settings"]["roundup_power2_divisions"]["256"] = 4
    write("snapshot_old_settings.pickle", old)
    # Recording started mid-run: the first events free blocks the trace never allocated.
    wrapped = [ev("free_requested", 0x7E0000000000, 6 * MIB, 0, 0),
               ev("free_completed", 0x7E0000000000, 6 * MIB, 0, 0)] + base_trace()
    write("snapshot_wrapped.pickle", snapshot([wrapped]))
    write("snapshot_no_history.pickle", snapshot([[]]))  # _record_memory_history was never called
    # PyTorch's cudaMallocAsync backend keeps no history: the trace is empty.
    write("snapshot_async_no_history.pickle", snapshot([[]], conf="backend:cudaMallocAsync"))
    no_traces = snapshot([base_trace()])
    del no_traces["device_traces"]
    write("snapshot_no_device_traces.pickle", no_traces)
    newer = base_trace()
    newer.insert(3, ev("segment_teleport", 0x7F0000000000, 2 * MIB, 0, 3))
    write("snapshot_unknown_action.pickle", snapshot([newer]))
    # A pickle that would call code to rebuild its value (GLOBAL + REDUCE): refused, never run.
    write("code.pickle", collections.OrderedDict(a=1))
    truncated = pickle.dumps(snapshot([base_trace()]), protocol=4)
    with open(os.path.join(out, "snapshot_truncated.pickle"), "wb") as f:
        f.write(truncated[: len(truncated) // 2])


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
