#!/usr/bin/env python3
"""Tests of the torch-free parts of acceptance.py (comparison, tables, the parent's orchestration
with faked children). Runs without torch, a GPU or libstreampool.so:
python3 examples/torch/test_acceptance_logic.py   (the streampool package's own tests: python/tests)
"""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.dont_write_bytecode = True  # no __pycache__ in the checkout
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "python"))  # the streampool package of this checkout

import acceptance as acc  # noqa: E402
import streampool as sp  # noqa: E402


class CompareLosses(unittest.TestCase):
    def test_identical(self):
        c = acc.compare_losses([1.0, 0.5, 0.25], [1.0, 0.5, 0.25], 0.0)
        self.assertTrue(c["identical"])
        self.assertTrue(c["ok"])
        self.assertEqual(c["max_abs_diff"], 0.0)
        self.assertIsNone(c["first_differing_step"])

    def test_one_ulp_fails_bit_identity_but_passes_tolerance(self):
        b = math.nextafter(0.5, 1.0)
        strict = acc.compare_losses([1.0, 0.5], [1.0, b], 0.0)
        self.assertFalse(strict["identical"])
        self.assertFalse(strict["ok"])
        self.assertEqual(strict["first_differing_step"], 1)
        self.assertGreater(strict["max_abs_diff"], 0.0)
        loose = acc.compare_losses([1.0, 0.5], [1.0, b], 1e-6)
        self.assertTrue(loose["ok"])

    def test_nan_handling(self):
        self.assertTrue(acc.compare_losses([float("nan")], [float("nan")], 0.0)["ok"])
        c = acc.compare_losses([1.0], [float("nan")], 1.0)
        self.assertFalse(c["ok"])
        self.assertEqual(c["max_abs_diff"], math.inf)

    def test_length_mismatch_fails(self):
        c = acc.compare_losses([1.0, 2.0], [1.0], 10.0)
        self.assertFalse(c["ok"])
        self.assertFalse(c["same_length"])
        self.assertIn("different step count", acc.fmt_diff(c))


class Evaluate(unittest.TestCase):
    def rows(self, **results):
        return [{"name": n, "result": r, "note": ""} for n, r in results.items()]

    def test_statuses_and_failures(self):
        ref = {"status": "ok", "losses": [3.0, 2.0]}
        rows = self.rows(**{"torch-native": ref, "sp-native": {"status": "ok", "losses": [3.0, 2.0]},
                            "sp-async": {"status": "ok", "losses": [3.0, 2.5]},
                            "sp-native-expandable": {"status": "error", "error": "boom"},
                            "torch-async": None})
        failures = acc.evaluate(rows, 0.0, ref)
        status = {r["name"]: r["status"] for r in rows}
        self.assertEqual(status, {"torch-native": "ok", "sp-native": "ok", "sp-async": "FAILED",
                                  "sp-native-expandable": "FAILED", "torch-async": "FAILED"})
        self.assertEqual(len(failures), 3)
        self.assertTrue(any("boom" in f for f in failures))
        table = acc.training_table(rows)
        self.assertEqual(len(table.splitlines()), 2 + len(rows))
        for line in table.splitlines():
            self.assertEqual(line.count("|"), 11, line)

    def test_no_reference(self):
        rows = self.rows(**{"sp-native": {"status": "ok", "losses": [1.0]}})
        self.assertEqual(acc.evaluate(rows, 0.0, None), [])
        self.assertEqual(rows[0]["status"], "ok (no reference)")

    def test_graph_rows(self):
        rows = self.rows(**{"graph-sp-native": {"status": "ok", "passed": True, "max_abs_diff": 0.0, "replays": 3,
                                                "bit_identical": True, "streampool_allocs": 40,
                                                "streampool_allocs_during_capture": 0,
                                                "live_allocations_after_teardown": 0},
                            "graph-sp-async": {"status": "ok", "passed": False, "max_abs_diff": 0.5}})
        failures = acc.evaluate(rows, 0.0, None)
        self.assertEqual([r["status"] for r in rows], ["ok", "FAILED"])
        self.assertEqual(len(failures), 1)
        table = acc.graph_table(rows)
        for line in table.splitlines():
            self.assertEqual(line.count("|"), 9, line)

    def test_expandable_note(self):
        self.assertIn("not implemented",
                      acc.expandable_note("sp-native-expandable", {"status": "ok"},
                                          "streampool: warning: " + acc.EXPANDABLE_FALLBACK_MARKER + " in this build"))
        self.assertEqual(acc.expandable_note("sp-native-expandable", {"status": "ok",
                                                                      "expandable_segments_seen": True}, ""),
                         "expandable segments in use")
        self.assertEqual(acc.expandable_note("sp-native", {"status": "ok"}, acc.EXPANDABLE_FALLBACK_MARKER), "")
        note = acc.expandable_note("sp-native-expandable", {"status": "ok"},
                                   "streampool: warning: expandable_segments:True: device 0: no VMM; normal segments\n")
        self.assertIn("library said: streampool: warning: expandable_segments:True: device 0", note)


class ChildSetup(unittest.TestCase):
    def test_env_per_configuration(self):
        with mock.patch.dict(os.environ, {"PYTORCH_CUDA_ALLOC_CONF": "garbage", "STREAMPOOL_ALLOC_CONF": "x"}):
            env = acc.child_env("torch-native", None)
            self.assertNotIn("PYTORCH_CUDA_ALLOC_CONF", env)
            self.assertNotIn("STREAMPOOL_ALLOC_CONF", env)
            self.assertEqual(env["CUBLAS_WORKSPACE_CONFIG"], ":4096:8")
            self.assertEqual(acc.child_env("torch-async", None)["PYTORCH_CUDA_ALLOC_CONF"], "backend:cudaMallocAsync")
            env = acc.child_env("sp-async", "/x/libstreampool.so")
            self.assertEqual(env["STREAMPOOL_ALLOC_CONF"], "backend:cudaMallocAsync")
            self.assertNotIn("PYTORCH_CUDA_ALLOC_CONF", env)
            self.assertEqual(env["STREAMPOOL_LIB"], "/x/libstreampool.so")

    def test_schedule_is_deterministic_and_varied(self):
        a, b = acc.batch_schedule(30, 1234), acc.batch_schedule(30, 1234)
        self.assertEqual(a, b)
        self.assertEqual(len(a), 30)
        self.assertGreater(len(set(a)), 3)


class ParentWithFakeChildren(unittest.TestCase):
    """run_parent end to end, with the torch probe and the child processes faked."""

    def fake_run(self, losses_by_name, fail=()):
        def run(cmd, env=None, stdout=None, stderr=None, timeout=None, **kw):
            name = cmd[cmd.index("--child") + 1]
            out = Path(cmd[cmd.index("--out") + 1])
            if stdout is not None:
                stdout.write("streampool: warning: " + acc.EXPANDABLE_FALLBACK_MARKER + "\n"
                             if name == "sp-native-expandable" else "fine\n")
            if name in fail:
                return subprocess.CompletedProcess(cmd, 1)
            kind = acc.CONFIGS[name][0]
            if kind == "graph":
                result = {"status": "ok", "passed": True, "max_abs_diff": 0.0, "replays": 2, "bit_identical": True,
                          "streampool_allocs": 33, "streampool_allocs_during_capture": 0,
                          "live_allocations_after_teardown": 0}
            else:
                result = {"status": "ok", "losses": losses_by_name.get(name, [2.0, 1.5, 1.0]),
                          "peak_reserved_bytes": 300 << 20, "peak_allocated_bytes": 250 << 20,
                          "mean_step_ms": 12.5, "num_device_alloc": 17, "torch_version": "2.11",
                          "cuda_version": "13.0", "device": "H200"}
            (out / f"{name}.json").write_text(json.dumps(result))
            return subprocess.CompletedProcess(cmd, 0)
        return run

    def run_parent(self, argv, run):
        with tempfile.TemporaryDirectory() as d, \
                mock.patch.object(acc, "probe_torch", return_value=(True, "2.11 13.0 1")), \
                mock.patch.object(sp, "find_library", return_value="/fake/libstreampool.so"), \
                mock.patch.object(acc.subprocess, "run", side_effect=run), \
                mock.patch("sys.stdout", new_callable=io.StringIO):
            code = acc.main(argv + ["--out", d, "--steps", "6"])
            summary = (Path(d) / "summary.md").read_text()
            data = json.loads((Path(d) / "summary.json").read_text())
        return code, summary, data

    def test_all_pass(self):
        code, summary, data = self.run_parent([], self.fake_run({}))
        self.assertEqual(code, 0, summary)
        self.assertIn("All checks passed", summary)
        self.assertIn("warned and ran without it", summary)
        self.assertEqual(len(data["rows"]), len(acc.CONFIGS))

    def test_loss_difference_fails(self):
        code, summary, _ = self.run_parent([], self.fake_run({"sp-async": [2.0, 1.5, 1.0000001]}))
        self.assertEqual(code, 1)
        self.assertIn("sp-async: losses differ", summary)
        code, summary, _ = self.run_parent(["--tolerance", "1e-3"], self.fake_run({"sp-async": [2.0, 1.5, 1.0000001]}))
        self.assertEqual(code, 0, summary)

    def test_crashed_child_fails(self):
        code, summary, _ = self.run_parent(["--only", "torch-native,sp-native"], self.fake_run({}, fail={"sp-native"}))
        self.assertEqual(code, 1)
        self.assertIn("sp-native: exit 1, no JSON", summary)

    def test_unknown_only_is_usage_error(self):
        with mock.patch("sys.stderr", new_callable=io.StringIO):
            code, _, _ = (acc.main(["--only", "nope", "--out", tempfile.mkdtemp()]), None, None)
        self.assertEqual(code, 2)

    def test_skip_without_gpu(self):
        with tempfile.TemporaryDirectory() as d, \
                mock.patch.object(acc, "probe_torch", return_value=(False, "torch is not importable")), \
                mock.patch("sys.stdout", new_callable=io.StringIO):
            self.assertEqual(acc.main(["--out", d]), 0)
            self.assertEqual(acc.main(["--out", d, "--require-gpu"]), 3)
            self.assertIn("SKIPPED", (Path(d) / "summary.md").read_text())


if __name__ == "__main__":
    unittest.main()
