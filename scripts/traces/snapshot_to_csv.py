#!/usr/bin/env python3
"""scripts/traces/snapshot_to_csv.py — turns a PyTorch memory snapshot pickle (what
record_training.py --snapshot, or torch.cuda.memory._dump_snapshot, writes; plain or .gz) into the
allocation-trace CSV that `streampool-bench replay` and the tests read:

    action,addr,size,stream,time_us

keeping the device-0 events alloc, free_requested, free_completed, segment_alloc and segment_free
in their recorded order. The pickle is read with every class refused: a snapshot holds only
dicts, lists, strings and numbers, so a file that needs anything else is not one.

    python3 scripts/traces/snapshot_to_csv.py resnet50_varres.pickle resnet50_varres.trace.csv.gz
"""
import gzip
import pickle
import sys

KEPT = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free")


class _PlainData(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"not a memory snapshot: it needs {module}.{name}")


def _open(path, mode):
    return gzip.open(path, mode) if path.endswith(".gz") else open(path, mode)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: snapshot_to_csv.py SNAPSHOT.pickle[.gz] OUT.trace.csv[.gz]")
    source, target = sys.argv[1], sys.argv[2]
    try:
        with _open(source, "rb") as f:
            snapshot = _PlainData(f).load()
        events = snapshot["device_traces"][0]
    except (OSError, pickle.UnpicklingError, EOFError, KeyError, IndexError, TypeError) as e:
        sys.exit(f"snapshot_to_csv.py: cannot read a snapshot from '{source}': {e}")
    written = 0
    with _open(target, "wt") as out:
        out.write("action,addr,size,stream,time_us\n")
        for e in events:
            if e["action"] in KEPT:
                out.write(f"{e['action']},{e['addr']},{e['size']},{e['stream']},{e['time_us']}\n")
                written += 1
    print(f"{target}: {written} events")


if __name__ == "__main__":
    main()
