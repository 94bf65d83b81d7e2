"""record(path) with streampool's own trace on the simulated device: the file it writes, the
recording switched off afterwards, the file written also when the block raises, the warning when
the ring buffer filled up, and its refusals. (Recording PyTorch's allocator is in gpu_package.py.)"""

from __future__ import annotations

import os
import pickle
import tempfile
import unittest
import warnings

import streampool
from sim_support import SimTestCase
from streampool._snapshot import problems


class RecordStreampool(SimTestCase):
    def setUp(self):
        super().setUp()
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "run.pickle")

    def tearDown(self):
        self.dir.cleanup()
        super().tearDown()

    def load(self):
        with open(self.path, "rb") as f:
            return pickle.load(f)

    def test_records_the_block_and_stops(self):
        before = self.alloc(2048)  # allocated before recording: in the state, not in the trace
        with streampool.record(self.path, source="streampool") as rec:
            p = self.alloc(1000)
            q = self.alloc(1 << 20, device=1)
            self.free(p)
        self.assertEqual(rec.source, "streampool")
        data = self.load()
        self.assertEqual(problems(data), [])
        allocs = [e["addr"] for e in data["device_traces"][0] if e["action"] == "alloc"]
        self.assertEqual(allocs, [p])
        self.assertEqual([e["addr"] for e in data["device_traces"][1] if e["action"] == "alloc"], [q])
        self.assertEqual(rec.events, [len(t) for t in data["device_traces"]])
        self.assertIn(before, {b["address"] for s in data["segments"] for b in s["blocks"]
                               if b["state"] == "active_allocated"})
        self.assertEqual(streampool.trace_csv(0), "action,addr,size,stream,time_us\n")  # recording is off

    def test_file_is_written_when_the_block_raises(self):
        with self.assertRaises(KeyError):
            with streampool.record(self.path, source="streampool"):
                self.free(self.alloc(4096))
                raise KeyError("boom")
        self.assertIn("free_completed", {e["action"] for e in self.load()["device_traces"][0]})

    def test_full_ring_buffer_warns(self):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with streampool.record(self.path, source="streampool", max_entries=3):
                for _ in range(4):
                    self.free(self.alloc(512))
        messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
        self.assertEqual(len(messages), 1, messages)
        self.assertIn("max_entries=3", messages[0])
        self.assertEqual(len(self.load()["device_traces"][0]), 3)

    def test_whole_run_does_not_warn(self):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with streampool.record(self.path, source="streampool", max_entries=100):
                self.free(self.alloc(512))
        self.assertEqual([w for w in caught if issubclass(w.category, RuntimeWarning)], [])

    def test_refusals(self):
        with self.assertRaisesRegex(ValueError, "max_entries must be at least 1"):
            with streampool.record(self.path, max_entries=0, source="streampool"):
                pass
        with self.assertRaisesRegex(ValueError, "source must be"):
            with streampool.record(self.path, source="cuda"):
                pass
        # Stacks of streampool's allocator need the extension route (Note [Stack contexts]).
        with self.assertRaisesRegex(streampool.StreampoolError, r"stacks=True.*install\(\) was not called.*route='extension'"):
            with streampool.record(self.path, source="streampool", stacks=True):
                pass
        self.assertFalse(os.path.exists(self.path))

    def test_auto_without_torch_says_what_to_do(self):
        try:
            import torch  # noqa: F401
        except ImportError:
            pass
        else:
            self.skipTest("torch is importable here: auto records PyTorch's allocator (gpu_package.py tests it)")
        with self.assertRaisesRegex(streampool.StreampoolError, "source='streampool'"):
            with streampool.record(self.path):
                pass


if __name__ == "__main__":
    unittest.main()
