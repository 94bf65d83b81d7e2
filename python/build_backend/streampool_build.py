"""streampool's PEP 517 build backend: builds the wheel of the `streampool` Python package by
driving the repository's CMake build (targets streampool_shared and, when it can be built,
streampool-bench) and zipping the results with the package's Python files. Standard library only.

Note [A backend of our own]
pip builds a wheel through the backend named in pyproject.toml. The usual setuptools backend needs
the `wheel` package on setuptools < 70.1, which is missing from some Pythons CI and the GPU machine
use, and nothing may be downloaded there. This backend needs nothing beyond the standard library,
so `pip install ./python` works offline, with or without `--no-build-isolation`, on any Python 3.8+
with pip. It does no compiling of its own: CMake builds, this file packages. A wheel is a zip
with a .dist-info folder (METADATA, WHEEL, RECORD with a sha256 per file); the library goes inside
the package (loaded with ctypes), the harness into the wheel's scripts (pip puts it on PATH).

Settings (environment variables, or pip's --config-settings KEY=VALUE with the lowercase names):
  STREAMPOOL_BUILD_DIR   (build-dir)   the CMake build folder; default <repo>/build-python. An
                                       existing configured folder is reused as it is configured.
  STREAMPOOL_CMAKE_ARGS  (cmake-args)  extra configure arguments, e.g. "-DCMAKE_BUILD_TYPE=Release".
  STREAMPOOL_BENCH       (bench)       auto (default: build streampool-bench when CMake finds
                                       Boost.Program_options), on (required), off.
  STREAMPOOL_JOBS        (jobs)        parallel build jobs (default: CMake's own default).
  STREAMPOOL_TORCH_EXT   (torch-ext)   auto (default: build the PyTorch extension allocator
                                       streampool._C10 when torch is importable and supported), on
                                       (required), off. See torch_extension_build.py.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch_extension_build
from cmake_cache import cache_value

NAME = "streampool"
PYTHON_DIR = Path(__file__).resolve().parents[1]  # python/
SUMMARY = "CUDA device-memory allocator for PyTorch: PyTorch's caching allocator, faster, with tuning and traces"


class BuildError(RuntimeError):
    """The build cannot go on; the message says why and what to do."""


# --- settings ----------------------------------------------------------------------------------

def _setting(config_settings: Optional[Dict[str, str]], key: str, default: str = "") -> str:
    if config_settings and key in config_settings:
        value = config_settings[key]
        return " ".join(value) if isinstance(value, list) else str(value)
    return os.environ.get("STREAMPOOL_" + key.upper().replace("-", "_"), default)


def _source_dir() -> Path:
    """The repository root whose CMake project this package is built from."""
    root = PYTHON_DIR.parent
    cmake_lists = root / "CMakeLists.txt"
    if not cmake_lists.is_file() or "project(streampool" not in cmake_lists.read_text():
        raise BuildError(f"streampool: {PYTHON_DIR} is not inside a streampool checkout ({cmake_lists} is not "
                         "streampool's), so there is no CMake project to build. Install from the checkout: "
                         "`pip install ./python` (pip >= 21.3 builds a local folder in place).")
    return root


def _version(root: Path) -> str:
    match = re.search(r"project\(streampool\s+VERSION\s+([0-9][0-9.]*)", (root / "CMakeLists.txt").read_text())
    if not match:
        raise BuildError("streampool: no `project(streampool VERSION x.y.z)` in CMakeLists.txt")
    return match.group(1)


# --- CMake ---------------------------------------------------------------------------------------

def _run(cmd: List[str], what: str) -> None:
    print("streampool build: " + " ".join(shlex.quote(c) for c in cmd), file=sys.stderr, flush=True)
    try:
        result = subprocess.run(cmd, stdout=sys.stderr, stderr=sys.stderr)
    except FileNotFoundError as e:
        raise BuildError(f"streampool: {what}: {cmd[0]} not found ({e}); install CMake >= 3.25 "
                         "(Debian: apt-get install cmake ninja-build g++)") from e
    if result.returncode != 0:
        raise BuildError(f"streampool: {what} failed (exit {result.returncode}); the output above says why")


def _have_boost_program_options(root: Path) -> bool:
    """Whether CMake finds Boost.Program_options here (what streampool-bench needs)."""
    with tempfile.TemporaryDirectory() as probe:
        Path(probe, "CMakeLists.txt").write_text(
            "cmake_minimum_required(VERSION 3.25)\nproject(probe LANGUAGES CXX)\n"
            "find_package(Boost QUIET COMPONENTS program_options)\n"
            "if(NOT Boost_FOUND)\n  message(FATAL_ERROR \"no Boost.Program_options\")\nendif()\n")
        result = subprocess.run(["cmake", "-S", probe, "-B", str(Path(probe, "b"))],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return result.returncode == 0


def _have_nvcc() -> bool:
    return bool(os.environ.get("CUDACXX") or shutil.which("nvcc") or Path("/usr/local/cuda/bin/nvcc").is_file())


def _build(config_settings: Optional[Dict[str, str]], static_too: bool = False) -> Tuple[Path, Optional[Path]]:
    """Configures (when needed) and builds; returns libstreampool.so and streampool-bench (or None).
    `static_too` also builds libstreampool.a (what the PyTorch extension links)."""
    root = _source_dir()
    build_dir = Path(_setting(config_settings, "build-dir") or root / "build-python").resolve()
    bench = _setting(config_settings, "bench", "auto").lower()
    if bench not in ("auto", "on", "off"):
        raise BuildError(f"streampool: STREAMPOOL_BENCH={bench!r}; use auto, on or off")
    extra = shlex.split(_setting(config_settings, "cmake-args"))
    if not shutil.which("cmake"):
        raise BuildError("streampool: cmake is not on PATH; install CMake >= 3.25 (Debian: apt-get install cmake)")

    configured = cache_value(build_dir, "CMAKE_HOME_DIRECTORY")
    if configured is not None and Path(configured).resolve() != root:
        raise BuildError(f"streampool: {build_dir} is the build folder of {configured}, not of {root}; "
                         "set STREAMPOOL_BUILD_DIR to another folder")
    if configured is None or extra:
        args = ["cmake", "-S", str(root), "-B", str(build_dir)]
        if configured is None:
            perf = {"on": True, "off": False}.get(bench)
            if perf is None:
                perf = _have_boost_program_options(root)
                if not perf:
                    print("streampool build: Boost.Program_options not found: building the package without "
                          "streampool-bench (install libboost-program-options-dev to get it)", file=sys.stderr)
            if shutil.which("ninja"):
                args += ["-G", "Ninja"]
            args += ["-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DSTREAMPOOL_BUILD_TESTS=OFF",
                     "-DSTREAMPOOL_BUILD_MICROBENCH=OFF", f"-DSTREAMPOOL_BUILD_PERF={'ON' if perf else 'OFF'}",
                     f"-DSTREAMPOOL_BUILD_KERNELS={'ON' if _have_nvcc() else 'OFF'}"]
        _run(args + extra, "CMake configure")

    has_perf = (cache_value(build_dir, "STREAMPOOL_BUILD_PERF") or "OFF").upper() in ("ON", "TRUE", "1", "YES")
    if bench == "on" and not has_perf:
        raise BuildError(f"streampool: STREAMPOOL_BENCH=on, but {build_dir} is configured with "
                         "STREAMPOOL_BUILD_PERF=OFF; pass STREAMPOOL_CMAKE_ARGS=-DSTREAMPOOL_BUILD_PERF=ON "
                         "(needs Boost.Program_options) or use another STREAMPOOL_BUILD_DIR")
    with_bench = has_perf and bench != "off"
    targets = ["streampool_shared"] + (["streampool"] if static_too else []) + (["streampool-bench"] if with_bench else [])
    build = ["cmake", "--build", str(build_dir), "--target"] + targets
    jobs = _setting(config_settings, "jobs")
    if jobs:
        build += ["-j", jobs]
    _run(build, "CMake build")

    library = build_dir / "libstreampool.so"
    if not library.is_file():
        raise BuildError(f"streampool: the build did not produce {library}")
    bench_exe = build_dir / "perf" / "streampool-bench" if with_bench else None
    if bench_exe is not None and not bench_exe.is_file():
        raise BuildError(f"streampool: the build did not produce {bench_exe}")
    return library, bench_exe


# --- wheel ---------------------------------------------------------------------------------------

def _tag() -> str:
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"py3-none-{platform}"


def _metadata(version: str) -> str:
    readme = PYTHON_DIR / "README.md"
    lines = ["Metadata-Version: 2.1", f"Name: {NAME}", f"Version: {version}", f"Summary: {SUMMARY}",
             "License: see the repository", "Requires-Python: >=3.8",
             "Description-Content-Type: text/markdown", ""]
    text = "\n".join(lines)
    if readme.is_file():
        text += "\n" + readme.read_text()
    return text


def _dist_info(version: str) -> str:
    return f"{NAME}-{version}.dist-info"


def _write_dist_info(directory: Path, version: str) -> str:
    info = directory / _dist_info(version)
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(_metadata(version))
    (info / "WHEEL").write_text(_wheel_file())
    return info.name


def _wheel_file() -> str:
    return (f"Wheel-Version: 1.0\nGenerator: streampool_build\nRoot-Is-Purelib: false\nTag: {_tag()}\n")


class _WheelWriter:
    """A zip with a RECORD of every file's sha256 and size."""

    def __init__(self, path: Path):
        self.zip = zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED)
        self.records: List[str] = []

    def add(self, name: str, data: bytes, executable: bool = False) -> None:
        info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
        info.external_attr = ((0o755 if executable else 0o644) | 0o100000) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.records.append(f"{name},sha256={digest},{len(data)}")

    def close(self, record_name: str) -> None:
        self.records.append(f"{record_name},,")
        self.zip.writestr(zipfile.ZipInfo(record_name, date_time=(2020, 1, 1, 0, 0, 0)),
                          "\n".join(self.records) + "\n")
        self.zip.close()


def _package_files() -> List[Path]:
    package = PYTHON_DIR / NAME
    return sorted(p for p in package.rglob("*.py") if "__pycache__" not in p.parts)


# --- PEP 517 hooks -------------------------------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    return _write_dist_info(Path(metadata_directory), _version(_source_dir()))


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    try:
        root = _source_dir()
        version = _version(root)
        try:
            torch_version = None
            setting = _setting(config_settings, "torch-ext", "auto")
            if setting.lower() != "off":
                torch_version = torch_extension_build.probe_torch()
            with_ext, why = torch_extension_build.plan(setting, torch_version)
        except (ValueError, RuntimeError) as e:
            raise BuildError(str(e)) from e
        if not with_ext:
            print(f"streampool build: without the PyTorch extension allocator ({why}); install() will use the "
                  "CUDAPluggableAllocator route", file=sys.stderr)
        library, bench = _build(config_settings, static_too=with_ext)
        build_dir = library.parent
        extension: Optional[Tuple[Path, str]] = None
        ext_temp = tempfile.TemporaryDirectory()
        if with_ext:
            try:
                extension = torch_extension_build.build(build_dir, Path(ext_temp.name), torch_version or "",
                                                        _setting(config_settings, "jobs"))
            except RuntimeError as e:
                raise BuildError(str(e)) from e
    except BuildError as e:
        print(str(e), file=sys.stderr)
        raise
    name = f"{NAME}-{version}-{_tag()}.whl"
    writer = _WheelWriter(Path(wheel_directory) / name)
    for path in _package_files():
        writer.add(path.relative_to(PYTHON_DIR).as_posix(), path.read_bytes())
    writer.add(f"{NAME}/_version.py", f'version = "{version}"\n'.encode())
    writer.add(f"{NAME}/libstreampool.so", library.resolve().read_bytes(), executable=True)
    if bench is not None:
        writer.add(f"{NAME}-{version}.data/scripts/streampool-bench", bench.read_bytes(), executable=True)
    if extension is not None:
        module, build_info = extension
        writer.add(f"{NAME}/{module.name}", module.read_bytes(), executable=True)
        writer.add(f"{NAME}/_C10_build.py", build_info.encode())
    ext_temp.cleanup()
    info = _dist_info(version)
    writer.add(f"{info}/METADATA", _metadata(version).encode())
    writer.add(f"{info}/WHEEL", _wheel_file().encode())
    writer.add(f"{info}/top_level.txt", f"{NAME}\n".encode())
    writer.close(f"{info}/RECORD")
    print(f"streampool build: wrote {name} (libstreampool.so{', streampool-bench' if bench else ''}"
          f"{', the PyTorch extension allocator' if extension else ''})",
          file=sys.stderr)
    return name
