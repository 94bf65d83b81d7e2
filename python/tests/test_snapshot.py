"""snapshot() / dump_snapshot() on the simulated device: the pickle loads back, has the keys and the
shape PyTorch's memory_viz reads (Note [Snapshot shape for memory_viz] in streampool/_snapshot.py),
uses only data opcodes (no import or call: streampool-bench's reader refuses those), and
problems() catches each way a snapshot can be malformed, including a trace that does not replay
backwards to the final state."""

from __future__ import annotations

import copy
import os
import pickle
import pickletools
import tempfile
import unittest

import streampool
from sim_support import SimTestCase
from streampool._snapshot import BLOCK_KEYS, SEGMENT_KEYS, problems, to_torch_snapshot

MIB = 1 << 20
CODE_OPCODES = {"GLOBAL", "STACK_GLOBAL", "REDUCE", "BUILD", "INST", "OBJ", "NEWOBJ", "NEWOBJ_EX", "EXT1", "EXT2",
                "EXT4", "PERSID", "BINPERSID"}


def dumped(path: str):
    with open(path, "rb") as f:
        raw = f.read()
    return pickle.loads(raw), {op.name for op, _, _ in pickletools.genops(raw)}


class DumpSnapshot(SimTestCase):
    def test_pickle_round_trips_with_segments_blocks_and_trace(self):
        streampool.record_history(True, 1000)
        small = self.alloc(1000)
        large = self.alloc(3 * MIB)
        other = self.alloc(5 * MIB, device=1)
        self.free(small)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "snap.pickle")
            returned = streampool.dump_snapshot(path)
            data, opcodes = dumped(path)
        self.assertEqual(data, returned)
        self.assertEqual(problems(data), [])
        self.assertEqual(opcodes & CODE_OPCODES, set())
        self.assertEqual(data["allocator_settings"]["PYTORCH_CUDA_ALLOC_CONF"], "backend:native")
        self.assertEqual(len(data["device_traces"]), 2)
        for seg in data["segments"]:
            self.assertEqual(set(SEGMENT_KEYS) - set(seg), set())
            self.assertIsInstance(seg["segment_pool_id"], tuple)
            for block in seg["blocks"]:
                self.assertEqual(set(BLOCK_KEYS) - set(block), set())
        live = {b["address"]: b for s in data["segments"] for b in s["blocks"] if b["state"] == "active_allocated"}
        self.assertEqual(live[large]["requested_size"], 3 * MIB)
        self.assertEqual(live[other]["requested_size"], 5 * MIB)
        self.assertNotIn(small, live)
        actions = [(e["action"], e["addr"]) for e in data["device_traces"][0] if e["action"] != "segment_alloc"]
        self.assertEqual(actions[:4], [("alloc", small), ("alloc", large), ("free_requested", small),
                                       ("free_completed", small)])
        self.assertTrue(all(e["action"] != "alloc" or e["addr"] == other for e in data["device_traces"][1]))

    def test_without_recording_the_traces_are_empty_lists(self):
        p = self.alloc(1000)
        data = streampool.snapshot()
        self.assertEqual(problems(data), [])
        self.assertEqual(len(data["device_traces"]), 2)
        self.assertEqual(sum(1 for t in data["device_traces"] for e in t if e["action"] == "alloc"), 0)
        self.free(p)


class ExpandableSegments(SimTestCase):
    config = "backend:native,expandable_segments:True"

    def test_expandable_snapshot_is_well_formed(self):
        streampool.record_history(True, 1000)
        a = self.alloc(30 * MIB)
        b = self.alloc(50 * MIB)
        self.free(a)
        data = streampool.snapshot()
        self.assertEqual(problems(data), [])
        self.assertTrue(any(s["is_expandable"] for s in data["segments"]))
        self.assertIn("segment_map", {e["action"] for e in data["device_traces"][0]})
        self.free(b)


class AsyncSnapshot(SimTestCase):
    config = "backend:cudaMallocAsync"

    def test_async_snapshot_is_well_formed(self):
        streampool.record_history(True, 1000)
        p = self.alloc(3000)
        data = streampool.snapshot()
        self.assertEqual(problems(data), [])
        self.assertEqual([s["address"] for s in data["segments"]], [p])
        self.free(p)


def raw_segment(**changes):
    seg = {"device": 0, "address": 4096, "total_size": 4096, "allocated_size": 1024, "active_size": 1024,
           "requested_size": 1000, "stream": 0, "segment_type": "small", "segment_pool_id": [0, 0],
           "is_expandable": False, "frames": [], "blocks": [
               {"address": 5120, "size": 1024, "requested_size": 1000, "state": "active_allocated", "frames": []}]}
    seg.update(changes)
    return seg


class Conversion(unittest.TestCase):
    def test_gaps_become_inactive_blocks(self):
        data = to_torch_snapshot({"segments": [raw_segment()], "device_traces": []}, devices=1)
        blocks = data["segments"][0]["blocks"]
        self.assertEqual([(b["address"], b["size"], b["state"]) for b in blocks],
                         [(4096, 1024, "inactive"), (5120, 1024, "active_allocated"), (6144, 2048, "inactive")])
        self.assertEqual(problems(data), [])
        self.assertEqual(data["device_traces"], [[]])
        self.assertEqual(data["segments"][0]["segment_pool_id"], (0, 0))

    def test_device_traces_cover_every_device(self):
        data = to_torch_snapshot({"segments": [raw_segment(device=2)], "device_traces": [[]]}, devices=1)
        self.assertEqual(len(data["device_traces"]), 3)

    def test_problems_are_found(self):
        good = to_torch_snapshot({"segments": [raw_segment()], "device_traces": [[
            {"action": "alloc", "addr": 5120, "size": 1000, "stream": 0, "time_us": 1, "frames": []},
            {"action": "oom", "device_free": 0, "size": 1 << 40, "stream": 0, "time_us": 2, "frames": []}]]},
            devices=1)
        self.assertEqual(problems(good), [])
        self.assertEqual(problems([]), ["the snapshot is a list, not a dict"])
        self.assertEqual(problems({"segments": []}), ["'device_traces' is missing or not a list"])

        def broken(edit):
            data = copy.deepcopy(good)
            edit(data)
            return " ".join(problems(data))

        self.assertIn("lacks ['total_size']", broken(lambda d: d["segments"][0].pop("total_size")))
        self.assertIn("blocks must tile", broken(lambda d: d["segments"][0]["blocks"].pop(0)))
        self.assertIn("blocks cover 2048 of 4096", broken(lambda d: d["segments"][0]["blocks"].pop()))
        self.assertIn("state 'used'", broken(lambda d: d["segments"][0]["blocks"][1].update(state="used")))
        self.assertIn("requested_size > size",
                      broken(lambda d: d["segments"][0]["blocks"][1].update(requested_size=4000)))
        self.assertIn("no list in device_traces", broken(lambda d: d["device_traces"].clear()))
        self.assertIn("lacks ['addr']", broken(lambda d: d["device_traces"][0][0].pop("addr")))
        self.assertIn("lacks ['device_free']", broken(lambda d: d["device_traces"][0][1].pop("device_free")))
        self.assertIn("action 'teleport'", broken(lambda d: d["device_traces"][0][0].update(action="teleport")))
        self.assertIn("segment_type 'huge'", broken(lambda d: d["segments"][0].update(segment_type="huge")))

    def test_trace_must_replay_backwards_to_the_state(self):
        def event(action, addr, size):
            return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": 0, "frames": []}

        seg = raw_segment()  # [4096, 8192), block [5120, 6144) live
        history = [event("segment_alloc", 4096, 4096), event("alloc", 4096, 1024), event("alloc", 5120, 1024),
                   event("free_requested", 4096, 1024), event("free_completed", 4096, 1024)]

        def check(trace, segments=(seg,)):
            return problems(to_torch_snapshot({"segments": list(segments), "device_traces": [trace]}, devices=1))

        self.assertEqual(check(history), [])
        self.assertIn("(alloc at 6144): no such live block", " ".join(check(history + [event("alloc", 6144, 512)])))
        self.assertIn("(free_requested at 7168): no such live block",
                      " ".join(check(history + [event("free_requested", 7168, 512)])))
        self.assertIn("outside every segment", " ".join(check(history + [event("free_completed", 1 << 20, 512)])))
        self.assertIn("(segment_alloc at 4096): 1 live block(s) still in it", " ".join(check(history[:1])))
        self.assertIn("no such segment", " ".join(check([event("segment_alloc", 1 << 30, 4096)] + history)))
        self.assertIn("overlaps a segment", " ".join(check(history + [event("segment_free", 4096, 4096)])))
        # Expandable segments: pages mapped one after the other form one segment in the state.
        mapped = raw_segment(is_expandable=True)
        pages = [event("segment_map", 4096, 2048), event("segment_map", 6144, 2048), event("alloc", 5120, 1024)]
        self.assertEqual(check(pages, [mapped]), [])


class TraceConsistency(SimTestCase):
    """Random allocations, frees and cache releases, recorded: the trace must replay backwards to
    the final state (what memory_viz's "Allocator State History" does) on every backend."""

    def run_random(self, steps=400):
        import random

        seed = int(os.environ.get("STREAMPOOL_TEST_SEED", random.randrange(1 << 30)))
        print(f"[{type(self).__name__}] seed {seed} (STREAMPOOL_TEST_SEED to repeat)")
        rng = random.Random(seed)
        streampool.record_history(True, 100000)
        live = []
        for _ in range(steps):
            roll = rng.random()
            if roll < 0.55 or not live:
                size = rng.choice([rng.randrange(1, 4096), rng.randrange(1, 1 << 20), rng.randrange(1, 40 << 20)])
                live.append(self.alloc(size, device=rng.randrange(2)))
            elif roll < 0.97:
                self.free(live.pop(rng.randrange(len(live))))
            else:
                streampool.empty_cache()
        data = streampool.snapshot()
        self.assertEqual(problems(data), [], f"seed {seed}")
        self.assertGreater(sum(len(t) for t in data["device_traces"]), steps)


class TraceConsistencyNative(TraceConsistency):
    def test_random_run(self):
        self.run_random()


class TraceConsistencyExpandable(TraceConsistency):
    config = "backend:native,expandable_segments:True"

    def test_random_run(self):
        self.run_random()


class TraceConsistencyAsync(TraceConsistency):
    config = "backend:cudaMallocAsync"

    def test_random_run(self):
        self.run_random()


if __name__ == "__main__":
    unittest.main()
