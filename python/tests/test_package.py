"""The package itself: finding libstreampool.so (argument, $STREAMPOOL_LIB, the packaged copy),
the C signatures declared on it, the summary formatter, and — when the runner says the package was
installed with pip (STREAMPOOL_EXPECT_INSTALLED=1, STREAMPOOL_EXPECT_BENCH=1: scripts/test) — that
this is the installed copy, with its own library and streampool-bench on PATH (and behind
`python -m streampool`), and that the wheel's record of the harness (_build_info.py) agrees."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

import streampool
from streampool import _library
from streampool._summary import format_bytes, format_count, format_summary


class LibraryLookup(unittest.TestCase):
    def test_missing_explicit_path(self):
        with self.assertRaisesRegex(streampool.StreampoolError, "not found at /nonexistent/libstreampool.so"):
            streampool.find_library("/nonexistent/libstreampool.so")

    def test_env_file_and_directory(self):
        with tempfile.TemporaryDirectory() as d:
            f = Path(d) / "libstreampool.so"
            f.write_bytes(b"")
            with mock.patch.dict(os.environ, {"STREAMPOOL_LIB": d}):
                self.assertEqual(streampool.find_library(), str(f.resolve()))
            with mock.patch.dict(os.environ, {"STREAMPOOL_LIB": str(f)}):
                self.assertEqual(streampool.find_library(), str(f.resolve()))
            with mock.patch.dict(os.environ, {"STREAMPOOL_LIB": d + "/nope.so"}):
                with self.assertRaisesRegex(streampool.StreampoolError, "from the STREAMPOOL_LIB"):
                    streampool.find_library()

    def test_packaged_copy_comes_before_the_checkout(self):
        self.assertEqual(_library._candidates()[0], str(Path(_library.__file__).parent / "libstreampool.so"))

    def test_signatures_are_declared_and_the_library_is_pinned(self):
        lib = streampool.library()
        self.assertIs(streampool.library(), lib)
        self.assertEqual(lib.streampool_record_history.argtypes[1].__name__, "c_ulong")
        with tempfile.TemporaryDirectory() as d:
            other = Path(d) / "libstreampool.so"
            other.write_bytes(b"")
            with self.assertRaisesRegex(streampool.StreampoolError, "already loaded from"):
                streampool.library(str(other))


class Installed(unittest.TestCase):
    def test_installed_package_has_its_library_and_version(self):
        if os.environ.get("STREAMPOOL_EXPECT_INSTALLED") != "1":
            self.skipTest("run from the checkout (scripts/test sets STREAMPOOL_EXPECT_INSTALLED=1 after pip install)")
        package_dir = Path(streampool.__file__).resolve().parent
        self.assertFalse((package_dir.parent / "build_backend").exists(), f"{package_dir} is the checkout's copy")
        streampool.library()
        self.assertEqual(Path(_library.loaded_path()).parent, package_dir)
        self.assertNotEqual(streampool.__version__, "0+checkout")

    def test_bench_is_on_path(self):
        if os.environ.get("STREAMPOOL_EXPECT_BENCH") != "1":
            self.skipTest("set STREAMPOOL_EXPECT_BENCH=1 when the package was built with streampool-bench")
        exe = shutil.which("streampool-bench")
        self.assertIsNotNone(exe)
        result = subprocess.run([exe, "config", "expandable_segments:True"], capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("expandable_segments", result.stdout)

    def test_python_m_streampool_runs_the_installed_bench(self):
        if os.environ.get("STREAMPOOL_EXPECT_BENCH") != "1":
            self.skipTest("set STREAMPOOL_EXPECT_BENCH=1 when the package was built with streampool-bench")
        result = subprocess.run([sys.executable, "-m", "streampool", "config", "expandable_segments:True"],
                                capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("expandable_segments", result.stdout)

    def test_the_wheel_records_whether_it_has_the_bench(self):
        if os.environ.get("STREAMPOOL_EXPECT_INSTALLED") != "1":
            self.skipTest("run from the checkout (scripts/test sets STREAMPOOL_EXPECT_INSTALLED=1 after pip install)")
        from streampool import _build_info
        self.assertEqual(_build_info.bench, os.environ.get("STREAMPOOL_EXPECT_BENCH") == "1")


class SummaryFormat(unittest.TestCase):
    def values(self):
        keys = ["num_ooms", "num_alloc_retries"]
        for prefix in ("allocated_bytes", "active_bytes", "requested_bytes", "reserved_bytes", "inactive_split_bytes",
                       "allocation", "active", "segment", "inactive_split"):
            for pool in ("all", "large_pool", "small_pool"):
                keys += [f"{prefix}.{pool}.{c}" for c in ("current", "peak", "allocated", "freed")]
        keys += [f"{p}.{c}" for p in ("oversize_allocations", "oversize_segments")
                 for c in ("current", "peak", "allocated", "freed")]
        return {k: 0 for k in keys}

    def test_units(self):
        self.assertEqual(format_bytes(512), "512 B")
        self.assertEqual(format_bytes(10239), "10239 B")
        self.assertEqual(format_bytes(10240), "10 KiB")
        self.assertEqual(format_bytes(9 << 30), "9216 MiB")
        self.assertEqual(format_bytes(80 << 30), "80 GiB")
        self.assertEqual(format_bytes(-2048), "-2048 B")
        self.assertEqual(format_count(9999), "9999")
        self.assertEqual(format_count(12_345), "12K")
        self.assertEqual(format_count(12_345_678), "12M")

    def test_layout(self):
        values = self.values()
        values["reserved_bytes.all.peak"] = 3 << 30
        values["num_ooms"] = 2
        text = format_summary(values, 1, "native")
        lines = text.splitlines()
        self.assertTrue(all(len(line) == 77 for line in lines), [line for line in lines if len(line) != 77])
        self.assertIn("OOMs: 2", text)
        reserved = next(line for line in lines if line.startswith("| GPU reserved memory"))
        self.assertEqual(reserved.split("|")[3].strip(), "3072 MiB")
        self.assertEqual(len(lines), 6 + 1 + 9 * 4 + 2 + 1)
        self.assertEqual(len(format_summary(values, 1, "native", abbreviated=True).splitlines()), 6 + 1 + 9 * 2 + 2 + 1)

    def test_missing_statistic_is_named(self):
        values = self.values()
        del values["segment.all.peak"]
        with self.assertRaisesRegex(KeyError, "segment.all.peak"):
            format_summary(values, 0, "native")


if __name__ == "__main__":
    unittest.main()
