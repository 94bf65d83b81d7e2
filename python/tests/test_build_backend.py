"""The PEP 517 backend (python/build_backend/streampool_build.py) without building: its refusals
(bad settings, a build folder of another checkout, a harness asked of a build without it), the
metadata hook, and the wheel writer's RECORD (sha256 and size of every file, as pip checks)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import os
import sys
import tempfile
import unittest
import zipfile
from pathlib import Path
from unittest import mock

BACKEND_DIR = Path(__file__).resolve().parents[1] / "build_backend"
sys.path.insert(0, str(BACKEND_DIR))
import streampool_build as backend  # noqa: E402

sys.path.remove(str(BACKEND_DIR))


def fake_build_dir(parent: str, home: str, perf: str = "OFF") -> str:
    build = Path(parent, "build")
    build.mkdir()
    (build / "CMakeCache.txt").write_text(f"CMAKE_HOME_DIRECTORY:INTERNAL={home}\n"
                                          f"STREAMPOOL_BUILD_PERF:BOOL={perf}\n")
    return str(build)


class Refusals(unittest.TestCase):
    def build(self, **env):
        with tempfile.TemporaryDirectory() as out, mock.patch.dict(os.environ, env), \
                contextlib.redirect_stderr(io.StringIO()):
            with self.assertRaises(backend.BuildError) as e:
                backend.build_wheel(out)
        return str(e.exception)

    def test_bad_bench_setting(self):
        self.assertIn("STREAMPOOL_BENCH='maybe'; use auto, on or off", self.build(STREAMPOOL_BENCH="maybe"))

    def test_build_folder_of_another_checkout(self):
        with tempfile.TemporaryDirectory() as d:
            message = self.build(STREAMPOOL_BUILD_DIR=fake_build_dir(d, "/some/other/checkout"))
        self.assertIn("is the build folder of /some/other/checkout", message)

    def test_bench_on_needs_a_build_with_the_harness(self):
        with tempfile.TemporaryDirectory() as d:
            message = self.build(STREAMPOOL_BUILD_DIR=fake_build_dir(d, str(backend.PYTHON_DIR.parent)),
                                 STREAMPOOL_BENCH="on")
        self.assertIn("configured with STREAMPOOL_BUILD_PERF=OFF", message)

    def test_config_settings_override_the_environment(self):
        self.assertEqual(backend._setting({"bench": "off"}, "bench", "auto"), "off")
        with mock.patch.dict(os.environ, {"STREAMPOOL_CMAKE_ARGS": "-DX=1"}):
            self.assertEqual(backend._setting(None, "cmake-args"), "-DX=1")
            self.assertEqual(backend._setting({}, "cmake-args"), "-DX=1")


class Metadata(unittest.TestCase):
    def test_version_comes_from_the_cmake_project(self):
        root = backend._source_dir()
        self.assertRegex(backend._version(root), r"^\d+\.\d+\.\d+$")
        with tempfile.TemporaryDirectory() as d:
            name = backend.prepare_metadata_for_build_wheel(d)
            metadata = Path(d, name, "METADATA").read_text()
        self.assertEqual(name, f"streampool-{backend._version(root)}.dist-info")
        self.assertIn(f"Version: {backend._version(root)}\n", metadata)
        self.assertEqual(backend.get_requires_for_build_wheel(), [])


class WheelWriter(unittest.TestCase):
    def test_record_lists_every_file_with_its_hash(self):
        with tempfile.TemporaryDirectory() as d:
            path = Path(d, "x.whl")
            writer = backend._WheelWriter(path)
            writer.add("pkg/a.py", b"print(1)\n")
            writer.add("pkg/lib.so", b"\x7fELF", executable=True)
            writer.close("pkg-1.dist-info/RECORD")
            with zipfile.ZipFile(path) as z:
                record = z.read("pkg-1.dist-info/RECORD").decode().splitlines()
                self.assertEqual((z.getinfo("pkg/lib.so").external_attr >> 16) & 0o777, 0o755)
                for line in record[:-1]:
                    name, digest, size = line.split(",")
                    data = z.read(name)
                    expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                    self.assertEqual(digest, f"sha256={expected}")
                    self.assertEqual(int(size), len(data))
        self.assertEqual(record[-1], "pkg-1.dist-info/RECORD,,")


if __name__ == "__main__":
    unittest.main()
