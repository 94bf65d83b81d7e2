"""The GPU pipeline's judging logic without a GPU (examples/interop): reuse.py's attribution of trace
entries to libraries and its reuse table, and compare.py's checks and exit statuses. The trace
here comes from the simulated device, through streampool.interop, as the pipeline's does."""

from __future__ import annotations

import contextlib
import io
import json
import sys
import tempfile
import unittest
from pathlib import Path

import streampool
import streampool.interop as interop
from sim_support import SimTestCase

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "interop"
sys.path.insert(0, str(EXAMPLES))
import compare  # noqa: E402
import reuse  # noqa: E402

MIB = 1 << 20


class ReuseFromTheTrace(SimTestCase):
    def test_memory_freed_by_cupy_then_allocated_by_torch(self):
        streampool.record_history(True, 1000)
        logged = []

        def allocate(size, origin):
            ptr = interop.allocate(size, 0, 0, origin)
            logged.append((ptr, size, origin))
            return ptr

        a = allocate(4 * MIB, "cupy")
        n = allocate(1 * MIB, "numba")
        interop.free(a)
        t = self.alloc(4 * MIB)  # PyTorch's allocation (the C API directly): takes CuPy's block
        self.assertEqual(t, a)
        interop.free(n)
        m = allocate(1 * MIB, "numba")  # Numba takes its own block back
        trace = streampool.snapshot()["device_traces"][0]
        self.assertEqual([o for _, o in reuse.attribute(trace, logged)], ["cupy", "numba", "torch", "numba"])
        self.assertEqual(reuse.reuse_table(trace, logged), {"cupy->torch": {"reuses": 1, "bytes": 4 * MIB},
                                                            "numba->numba": {"reuses": 1, "bytes": 1 * MIB}})
        self.free(t)
        interop.free(m)
        streampool.record_history(False)

    def test_a_log_that_does_not_match_the_trace_is_an_error(self):
        trace = [{"action": "alloc", "addr": 0x1000, "size": 512}]
        with self.assertRaisesRegex(ValueError, "only 0 of the 1 logged interop allocations"):
            reuse.attribute(trace, [(0x2000, 512, "cupy")])

    def test_partial_overlaps_count_their_bytes(self):
        trace = [{"action": "alloc", "addr": 0, "size": 1000}, {"action": "free_requested", "addr": 0},
                 {"action": "free_completed", "addr": 0},
                 {"action": "alloc", "addr": 600, "size": 1000}]
        self.assertEqual(reuse.reuse_table(trace, [(0, 1000, "cupy")]), {"cupy->torch": {"reuses": 1, "bytes": 400}})


def _result(mode, losses=(1.0, 0.5), reuse_count=3):
    r = {"mode": mode, "batch_sizes": [16, 32], "losses": list(losses), "input_checksums": [1.0, 2.0],
         "parameters_sha256": "ab", "peak_used_above_baseline_bytes": 10 * MIB, "peaks": {},
         "step_ms": {"median": 1.0, "p90": 2.0, "mean": 1.5}}
    if mode == "own":
        r["peaks"] = {"cupy_pool_total_bytes": MIB, "numba_held_bytes": MIB}
        r["torch_max_reserved_bytes"] = 4 * MIB
    else:
        r["peaks"] = {"live_bytes.cupy": MIB, "live_bytes.torch": 2 * MIB}
        r["streampool"] = {"reserved_bytes.all.peak": 6 * MIB, "segment.all.allocated": 0}
        r["reuse"] = {"cupy->torch": {"reuses": reuse_count, "bytes": reuse_count * MIB}}
    return r


class Compare(unittest.TestCase):
    def run_compare(self, *results):
        with tempfile.TemporaryDirectory() as out:
            for r in results:
                (Path(out) / r["mode"]).mkdir()
                (Path(out) / r["mode"] / "result.json").write_text(json.dumps(r))
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                status = compare.main([out])
            summary = (Path(out) / "summary.md").read_text() if (Path(out) / "summary.md").exists() else ""
        return status, summary

    def test_identical_runs_with_reuse_pass(self):
        status, summary = self.run_compare(_result("own"), _result("shared"))
        self.assertEqual(status, 0, summary)
        self.assertIn("- PASS shared: losses as in own: identical", summary)
        self.assertIn("| shared | cupy->torch | 3 | 3.0 |", summary)

    def test_a_different_loss_fails_naming_the_step(self):
        status, summary = self.run_compare(_result("own"), _result("shared", losses=(1.0, 0.25)))
        self.assertEqual(status, 1)
        self.assertIn("- FAIL shared: losses as in own: first difference at step 1: 0.5 vs 0.25", summary)

    def test_no_reuse_fails(self):
        status, summary = self.run_compare(_result("own"), _result("shared-pluggable", reuse_count=0))
        self.assertEqual(status, 1)
        self.assertIn("- FAIL shared-pluggable: PyTorch allocated memory CuPy freed: 0 allocations", summary)

    def test_a_trace_that_could_not_be_attributed_fails_saying_why(self):
        broken = _result("shared")
        broken["reuse"] = {"error": "only 3 of the 9 logged interop allocations are in the trace"}
        status, summary = self.run_compare(_result("own"), broken)
        self.assertEqual(status, 1)
        self.assertIn("0 allocations, 0.0 MiB (the trace could not be attributed: only 3 of the 9", summary)

    def test_missing_results(self):
        self.assertEqual(self.run_compare(_result("shared"))[0], 2)


if __name__ == "__main__":
    unittest.main()
