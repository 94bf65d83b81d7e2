#!/usr/bin/env python3
"""Tests of run_pytorch_allocator_tests.py without torch or a GPU: the test selection (from pytest's ids
and from the file's syntax tree), the outcome counts and the stock/streampool comparison, the event log
it resumes from, and the restart after a test that crashes or hangs its process (a fake pytest). When
pytest is importable, also a whole run through pytest and the plugin on a stand-in test file, with a fake
torch and streampool, in both modes. Run: python3 python/tests/test_pytorch_runner_logic.py
"""

from __future__ import annotations

import ast
import io
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest
from contextlib import redirect_stdout
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
sys.dont_write_bytecode = True
sys.path.insert(0, str(HERE))

import run_pytorch_allocator_tests as r  # noqa: E402

REAL_FILE = HERE.parents[1] / ".carry" / "pytorch-tests" / "test_cuda.py"  # fetched by hand; git-ignored
try:
    subprocess.run([sys.executable, "-c", "import pytest"], check=True, capture_output=True)
    HAVE_PYTEST = True
except subprocess.CalledProcessError:
    HAVE_PYTEST = False


class Selection(unittest.TestCase):
    def test_keyword_class(self):
        for name in ("test_graph_capture_simple", "test_out_of_memory_retry", "test_set_per_process_memory_fraction",
                     "test_record_stream", "test_caching_pinned_memory", "test_host_memory_stats"):
            self.assertTrue(r.selected("TestCuda", name), name)
        for name in ("test_gather_bool", "test_cuda_get_device_name", "test_streams", "_test_graphed_optimizer"):
            self.assertFalse(r.selected("TestCuda", name), name)

    def test_whole_classes_and_the_newer_name(self):
        for cls in ("TestCudaMallocAsync", "TestCudaAllocator", "TestBlockStateAbsorption", "TestMemPool",
                    "TestCachingHostAllocatorCudaGraph"):
            self.assertTrue(r.selected(cls, "test_direct_traceback"), cls)
        self.assertFalse(r.selected("TestMemPool", "get_dummy_allocator"))

    def test_optims_per_device_copy_graph_tests_only(self):
        self.assertTrue(r.selected("TestCudaOptimsCUDA", "test_graph_optims_Adam_cuda_float32"))
        self.assertTrue(r.selected("TestCudaOptims", "test_graph_grad_scaling"))
        self.assertFalse(r.selected("TestCudaOptimsCUDA", "test_grad_scaling_autocast_fused_optimizers_Adam_cuda_float32"))

    def test_other_classes_none(self):
        for cls in ("TestCudaAutocast", "TestCompileKernel", "TestCudaDeviceParametrizedCUDA", "TestGDS", ""):
            self.assertFalse(r.selected(cls, "test_memory_graph_pool"), cls)

    def test_split_id(self):
        self.assertEqual(r.split_id("test_cuda.py::TestMemPool::test_mempool_id"), ("TestMemPool", "test_mempool_id"))
        self.assertEqual(r.split_id("TestCuda.test_graph_error"), ("TestCuda", "test_graph_error"))
        self.assertEqual(r.split_id("test_x"), ("", "test_x"))

    def test_ast_listing(self):
        source = textwrap.dedent('''
            class TestCuda(TestCase):
                def test_graph_a(self): pass
                @parametrize("x", [1, 2])
                def test_memory_b(self, x): pass
                def test_streams(self): pass
            class TestMemPool(TestCase):
                def helper(self): pass
                def test_anything(self): pass
            class TestCudaOptims(TestCase):
                @optims([], dtypes=[])
                def test_graph_optims(self, device, dtype, optim_info): pass
                def test_grad_scaling(self, device): pass
            class TestCudaAutocast(TestCase):
                def test_memory(self): pass
            instantiate_device_type_tests(TestCudaOptims, globals())
        ''')
        self.assertEqual(r.ast_test_ids(source), [
            "test_cuda.py::TestCuda::test_graph_a", "test_cuda.py::TestCuda::test_memory_b*",
            "test_cuda.py::TestMemPool::test_anything", "test_cuda.py::TestCudaOptimsCUDA::test_graph_optims*"])

    @unittest.skipUnless(REAL_FILE.exists(), f"no {REAL_FILE}")
    def test_real_file_every_class_found(self):
        counts = {}
        for test_id in r.ast_test_ids(REAL_FILE.read_text()):
            cls = r.split_id(test_id)[0]
            counts[cls] = counts.get(cls, 0) + 1
        for cls in ("TestCuda", "TestBlockStateAbsorption", "TestMemPool", "TestCachingHostAllocatorCudaGraph",
                    "TestCudaOptimsCUDA"):
            self.assertGreater(counts.get(cls, 0), 0, cls)
        self.assertGreater(counts.get("TestCudaMallocAsync", 0) + counts.get("TestCudaAllocator", 0), 0)

    def test_embedded_sources_parse(self):
        ast.parse(r.PLUGIN)
        ast.parse(r.SITECUSTOMIZE)


class Outcomes(unittest.TestCase):
    def test_counts_line(self):
        results = {"a": "passed", "b": "xfailed", "c": "failed", "d": "error", "e": "crashed", "f": "timeout",
                   "g": "skipped", "h": "xpassed"}
        self.assertEqual(r.counts_line(results), "2 passed, 5 failed, 1 skipped")
        self.assertEqual(r.counts_line({}), "0 passed, 0 failed, 0 skipped")

    def test_compare(self):
        stock = {"t1": "passed", "t2": "passed", "t3": "failed", "t4": "passed", "t5": "skipped", "t6": "xfailed"}
        sp = {"t1": "passed", "t2": "crashed", "t3": "passed", "t4": "skipped", "t5": "failed", "t6": "xpassed"}
        regressions, fixed, lost, counts = r.compare(stock, sp)
        self.assertEqual(regressions, ["t2", "t6"])
        self.assertEqual(fixed, ["t3"])
        self.assertEqual(lost, ["t4"])
        self.assertEqual(counts["passed"], (3, 2))
        self.assertEqual(counts["crashed"], (0, 1))
        regressions, _, lost, _ = r.compare({"t7": "passed"}, {})
        self.assertEqual((regressions, lost), ([], ["t7"]))

    def test_compare_report_and_cli(self):
        with tempfile.TemporaryDirectory() as d:
            a, b = Path(d, "a.json"), Path(d, "b.json")
            a.write_text(json.dumps({"x::T::t1": "passed", "x::T::t2": "passed"}))
            b.write_text(json.dumps({"x::T::t1": "failed", "x::T::t2": "passed"}))
            buf = io.StringIO()
            with redirect_stdout(buf):
                self.assertEqual(r.main(["--compare", str(a), str(b)]), 0)
        text = buf.getvalue()
        self.assertIn("ok on stock, failing with streampool (1):\n  failed   x::T::t1", text)
        self.assertTrue(text.rstrip().endswith("1 tests ok on stock fail with streampool"))

    def test_read_events(self):
        with tempfile.TemporaryDirectory() as d:
            p = Path(d, "e.jsonl")
            self.assertEqual(r.read_events(p), (None, {}, None))
            p.write_text('{"route": "extension"}\n{"start": "a", "t": 1.0}\n{"finish": "a", "outcome": "passed"}\n'
                         '{"start": "b", "t": 2.0}\n{"fini')
            self.assertEqual(r.read_events(p), ("extension", {"a": "passed"}, ("b", 2.0)))


FAKE_PYTEST = '''
import json, os, sys, time
events, done = os.environ["STREAMPOOL_RUNNER_EVENTS"], set(json.load(open(os.environ["STREAMPOOL_RUNNER_DONE"])))
def event(**kw):
    with open(events, "a") as f:
        f.write(json.dumps(kw) + "\\n")
for t in ("t::A::test_1", "t::A::test_crash", "t::A::test_hang", "t::A::test_4"):
    if t in done:
        continue
    event(start=t, t=time.time())
    if t.endswith("crash"):
        os._exit(139)
    if t.endswith("hang"):
        time.sleep(60)
    event(finish=t, outcome="passed")
'''


class Restart(unittest.TestCase):
    def test_resumes_after_a_crash_and_a_hang(self):
        with tempfile.TemporaryDirectory() as d:
            fake = Path(d, "fake_python")
            fake.write_text(f"#!{sys.executable}\n{FAKE_PYTEST}")
            fake.chmod(0o755)
            args = SimpleNamespace(test_file=str(Path(d, "t.py")), python=str(fake), k=None, test_timeout=1.0)
            rc = r.run_shard(0, 1, args, dict(os.environ), Path(d))
            self.assertEqual(rc, 0)
            self.assertEqual(r.read_events(Path(d, "events-0.jsonl"))[1], {
                "t::A::test_1": "passed", "t::A::test_crash": "crashed", "t::A::test_hang": "timeout",
                "t::A::test_4": "passed"})
            self.assertEqual(Path(d, "log-0.txt").read_text().count("== shard 0/1, attempt"), 3)


STAND_IN = '''
import os, subprocess, sys, unittest

class TestCuda(unittest.TestCase):
    def test_memory_ok(self):
        pass
    def test_graph_fails(self):
        self.assertEqual(1, 2)
    def test_gather_bool(self):
        pass
    def test_host_child_installs(self):
        # The runner installs streampool in a process right after it imports torch (its sitecustomize).
        out = subprocess.run([sys.executable, "-c", "import torch, streampool; print(streampool.is_installed())"],
                             capture_output=True, text=True, check=True).stdout.strip()
        self.assertEqual(out, os.environ.get("EXPECT_CHILD", "False"))

class TestMemPool(unittest.TestCase):
    def test_skipped(self):
        self.skipTest("no")
    @unittest.expectedFailure
    def test_xfail(self):
        self.assertTrue(False)
    def test_crash(self):
        os._exit(11)
    def test_after_crash(self):
        pass

class TestCudaAutocast(unittest.TestCase):
    def test_memory_not_ours(self):
        pass
'''


@unittest.skipUnless(HAVE_PYTEST, "pytest is not importable")
class WholeRun(unittest.TestCase):
    def run_mode(self, mode, fake_streampool=True, jobs=1):
        d = tempfile.mkdtemp()
        Path(d, "test_cuda.py").write_text(STAND_IN)
        site = Path(d, "site")
        (site / "torch").mkdir(parents=True)
        (site / "torch" / "__init__.py").write_text("")
        if fake_streampool:
            (site / "streampool.py").write_text(
                "_on = False\ndef install():\n    global _on\n    _on = True\n"
                "def is_installed():\n    return _on\ndef installed_route():\n    return 'fake' if _on else None\n")
        env = dict(os.environ, PYTHONPATH=str(site), EXPECT_CHILD=str(mode == "streampool" and fake_streampool))
        out = Path(d, "out")
        proc = subprocess.run([sys.executable, str(HERE / "run_pytorch_allocator_tests.py"), str(Path(d, "test_cuda.py")),
                               "--mode", mode, "--out", str(out), "--jobs", str(jobs)],
                              env=env, capture_output=True, text=True, timeout=300)
        return proc, json.loads((out / "results.json").read_text()), json.loads((out / "meta.json").read_text())

    def expect(self, results, **changes):
        want = {"test_cuda.py::TestCuda::test_memory_ok": "passed", "test_cuda.py::TestCuda::test_graph_fails": "failed",
                "test_cuda.py::TestCuda::test_host_child_installs": "passed",
                "test_cuda.py::TestMemPool::test_skipped": "skipped", "test_cuda.py::TestMemPool::test_xfail": "xfailed",
                "test_cuda.py::TestMemPool::test_crash": "crashed", "test_cuda.py::TestMemPool::test_after_crash": "passed"}
        want.update({f"test_cuda.py::{k.replace('__', '::')}": v for k, v in changes.items()})
        self.assertEqual(results, want)

    def test_stock(self):
        proc, results, meta = self.run_mode("stock")
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
        self.expect(results)
        self.assertIn("\n4 passed, 2 failed, 1 skipped\n", proc.stdout)
        self.assertEqual(meta["streampool_route"], ["None"])

    def test_streampool_installs_in_the_test_process_and_its_children(self):
        proc, results, meta = self.run_mode("streampool", jobs=2)
        self.expect(results)
        self.assertEqual(meta["streampool_route"], ["fake"])

    def test_streampool_missing_errors_every_test(self):
        proc, results, meta = self.run_mode("streampool", fake_streampool=False)
        self.assertEqual(set(results.values()), {"error"}, proc.stdout)
        self.assertEqual(len(results), 7)
        self.assertIn("No module named 'streampool'", meta["streampool_route"][0])


if __name__ == "__main__":
    unittest.main()
