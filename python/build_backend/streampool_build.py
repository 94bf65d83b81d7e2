"""streampool's PEP 517 build backend: builds the wheel of the `streampool` Python package by
driving the repository's CMake build (targets streampool_shared, streampool-bench and, for the
PyTorch extension, streampool) and zipping the results with the package's Python files. Standard
library only.

Note [A backend of our own]
pip builds a wheel through the backend named in pyproject.toml. The usual setuptools backend needs
the `wheel` package on setuptools < 70.1, which is missing from some Pythons CI and the GPU machine
use, and nothing may be downloaded there. This backend needs nothing beyond the standard library,
so `pip install ./python` works offline, with or without `--no-build-isolation`, on any Python 3.8+
with pip. It does no compiling of its own: CMake builds, this file packages. A wheel is a zip
with a .dist-info folder (METADATA, WHEEL, RECORD with a sha256 per file); the library goes inside
the package (loaded with ctypes), the harness into the wheel's scripts (pip puts it on PATH).

Note [The harness or a refusal]
The README's loop is record() -> `streampool-bench tune` (or `python -m streampool tune`) -> paste
the config. A wheel silently built without streampool-bench breaks it at "command not found", and
pip shows a backend's messages only with -v or on failure. So with STREAMPOOL_BENCH=auto (the
default) a missing Boost.Program_options fails the build with the fix; STREAMPOOL_BENCH=off builds
without the harness on purpose, and the wheel records it (streampool/_build_info.py: bench = False),
which `python -m streampool` reads to say so.

Note [Wheel tags]
With the extension streampool._C10 inside, the wheel works with one CPython (the extension's ABI)
and is tagged cpXY-<abi>-<platform> of the building interpreter (cp312-cp312-linux_x86_64);
without it nothing in the wheel depends on the Python (libstreampool.so is loaded with ctypes):
py3-none-<platform>. The filename and WHEEL's Tag: line come from one _tag() call.

Note [Progress through pip]
pip captures the backend's stdout and stderr and shows them only with -v or when the build fails,
so a build of many minutes shows nothing but "still running...". Each stage (build folder, configure,
build with its step count and an estimate, extension, wheel) therefore also writes one line to
/dev/tty when it can be opened (a terminal pip runs in); with none (CI), stderr alone. Everything,
ninja's output included, goes to stderr as well, for -v and for pip's failure report.

Settings (environment variables, or pip's --config-settings KEY=VALUE with the lowercase names):
  STREAMPOOL_BUILD_DIR   (build-dir)   the CMake build folder. Default: <repo>/build when it is
                                       configured for this checkout (e.g. by scripts/bench), with
                                       streampool-bench unless bench=off, and no cmake-args are
                                       given; else <repo>/build-python. An existing configured
                                       folder is reused as it is configured.
  STREAMPOOL_CMAKE_ARGS  (cmake-args)  extra configure arguments, e.g. "-DCMAKE_BUILD_TYPE=Release".
  STREAMPOOL_BENCH       (bench)       auto (default) or on: build streampool-bench, and refuse when
                                       Boost.Program_options is missing or the build folder is
                                       configured without it; off: build without it.
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
from typing import Dict, List, Optional, Sequence, Tuple

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


# --- progress (Note [Progress through pip]) ----------------------------------------------------

TTY = "/dev/tty"  # tests point it elsewhere
_tty_used = False


def _progress(message: str) -> None:
    """One stage line: on stderr (pip -v, pip's failure report) and on the terminal when there is one."""
    global _tty_used
    line = "streampool build: " + message
    print(line, file=sys.stderr, flush=True)
    if sys.stderr.isatty():
        return  # the same terminal already shows it
    try:
        with open(TTY, "a") as tty:
            # The first line leaves pip's "Building wheel ... -" line as it is; \r returns over the
            # spinner character pip writes at the start of the next one.
            tty.write(("\r" if _tty_used else "\n") + line + "\n")
        _tty_used = True
    except OSError:
        pass  # no controlling terminal (CI, cron): stderr is all there is


#: scripts/bench's measure: ~130 steps of the library and the harness in 4 min 18 s on 2 busy cores.
SECONDS_PER_STEP_ON_2_CORES = 2.0


def _estimate(steps: Optional[int]) -> str:
    if steps is None:
        return ""
    if steps == 0:
        return ": up to date"
    seconds = steps * SECONDS_PER_STEP_ON_2_CORES
    when = "under a minute" if seconds < 60 else f"about {round(seconds / 60)} min"
    return f": {steps} steps, {when} on 2 cores (less with ccache)"


def _count_steps(build_dir: Path, targets: List[str]) -> Optional[int]:
    """The steps ninja would run for `targets`, or None when that cannot be told (another generator,
    no ninja). A dry run (-n) of build.ninja itself stops at "Re-running CMake..." (the
    CONFIGURE_DEPENDS globs make the manifest look stale to a dry run), so it reads a copy, which no
    rule rebuilds; the build folder's .ninja_log and .ninja_deps still say what is up to date."""
    if (cache_value(build_dir, "CMAKE_GENERATOR") or "") != "Ninja" or not (build_dir / "build.ninja").is_file():
        return None
    ninja = cache_value(build_dir, "CMAKE_MAKE_PROGRAM") or shutil.which("ninja")
    if not ninja:
        return None
    with tempfile.TemporaryDirectory() as temp:
        manifest = Path(temp, "build.ninja")
        shutil.copyfile(build_dir / "build.ninja", manifest)
        try:
            result = subprocess.run([ninja, "-C", str(build_dir), "-f", str(manifest), "-n"] + targets,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            return None
    return _steps_in(result.stdout) if result.returncode == 0 else None


def _steps_in(dry_run_output: str) -> int:
    totals = re.findall(r"^\[\d+/(\d+)\]", dry_run_output, flags=re.MULTILINE)
    return int(totals[-1]) if totals else 0


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


NO_BOOST = ("streampool: streampool-bench (the comparison harness behind `streampool-bench tune` and "
            "`python -m streampool tune`) needs Boost.Program_options, and CMake does not find it here "
            "(the Boost headers alone are not enough: it links the compiled library). Install it "
            "(Debian/Ubuntu: apt-get install libboost-program-options-dev) and run pip again, or build "
            "without the harness: STREAMPOOL_BENCH=off pip install ./python (or --config-settings "
            "bench=off); `streampool-bench` and `python -m streampool tune` are then unavailable.")


def _have_boost_program_options(root: Path, extra: Sequence[str] = ()) -> bool:
    """Whether CMake finds Boost.Program_options here (what streampool-bench needs), given the extra
    configure arguments (-DBOOST_ROOT=... counts). A probe that fails for another reason (no
    compiler, broken CMake) is an error of its own."""
    marker = "streampool probe: no Boost.Program_options"
    with tempfile.TemporaryDirectory() as probe:
        Path(probe, "CMakeLists.txt").write_text(
            "cmake_minimum_required(VERSION 3.25)\nproject(probe LANGUAGES CXX)\n"
            "find_package(Boost QUIET COMPONENTS program_options)\n"
            f"if(NOT Boost_FOUND)\n  message(FATAL_ERROR \"{marker}\")\nendif()\n")
        result = subprocess.run(["cmake", "-S", probe, "-B", str(Path(probe, "b"))] + list(extra),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode == 0:
        return True
    if marker in result.stdout:
        return False
    tail = "\n".join(result.stdout.strip().splitlines()[-15:])
    raise BuildError(f"streampool: the CMake probe for Boost.Program_options failed (exit {result.returncode}) "
                     f"before it could look; a C++ compiler and CMake >= 3.25 are needed:\n{tail}")


def _have_nvcc() -> bool:
    return bool(os.environ.get("CUDACXX") or shutil.which("nvcc") or Path("/usr/local/cuda/bin/nvcc").is_file())


def _perf_on(build_dir: Path) -> bool:
    return (cache_value(build_dir, "STREAMPOOL_BUILD_PERF") or "OFF").upper() in ("ON", "TRUE", "1", "YES")


def _is_build_of(build_dir: Path, root: Path) -> bool:
    home = cache_value(build_dir, "CMAKE_HOME_DIRECTORY")
    return home is not None and Path(home).resolve() == root.resolve()


def _pick_build_dir(config_settings: Optional[Dict[str, str]], root: Path, bench: str,
                    extra: List[str]) -> Tuple[Path, str]:
    """The CMake build folder and a few words on why it is that one."""
    explicit = _setting(config_settings, "build-dir")
    if explicit:
        return Path(explicit).resolve(), "set by STREAMPOOL_BUILD_DIR"
    build = root / "build"
    fallback = root / "build-python"
    if not _is_build_of(build, root):
        return fallback, "the default: no build/ configured for this checkout"
    if extra:
        return fallback, "not build/: STREAMPOOL_CMAKE_ARGS is set, and build/ is only reused as configured"
    if bench != "off" and not _perf_on(build):
        return fallback, "not build/: it is configured without streampool-bench (STREAMPOOL_BUILD_PERF=OFF)"
    return build, "this checkout's configured build/ (as scripts/bench leaves it), reused as configured"


def _build(config_settings: Optional[Dict[str, str]], static_too: bool = False) -> Tuple[Path, Optional[Path]]:
    """Configures (when needed) and builds; returns libstreampool.so and streampool-bench (or None
    with STREAMPOOL_BENCH=off). `static_too` also builds libstreampool.a (what the PyTorch extension
    links). Note [The harness or a refusal]."""
    root = _source_dir()
    bench = _setting(config_settings, "bench", "auto").lower()
    if bench not in ("auto", "on", "off"):
        raise BuildError(f"streampool: STREAMPOOL_BENCH={bench!r}; use auto, on or off")
    extra = shlex.split(_setting(config_settings, "cmake-args"))
    if not shutil.which("cmake"):
        raise BuildError("streampool: cmake is not on PATH; install CMake >= 3.25 (Debian: apt-get install cmake)")
    build_dir, why = _pick_build_dir(config_settings, root, bench, extra)

    configured = cache_value(build_dir, "CMAKE_HOME_DIRECTORY")
    if configured is not None and Path(configured).resolve() != root:
        raise BuildError(f"streampool: {build_dir} is the build folder of {configured}, not of {root}; "
                         "set STREAMPOOL_BUILD_DIR to another folder")
    _progress(f"build folder {build_dir}: {why}")
    if configured is None or extra:
        args = ["cmake", "-S", str(root), "-B", str(build_dir)]
        if configured is None:
            if bench != "off" and not _have_boost_program_options(root, extra):
                raise BuildError(NO_BOOST)
            if shutil.which("ninja"):
                args += ["-G", "Ninja"]
            args += ["-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DSTREAMPOOL_BUILD_TESTS=OFF",
                     "-DSTREAMPOOL_BUILD_MICROBENCH=OFF", f"-DSTREAMPOOL_BUILD_PERF={'OFF' if bench == 'off' else 'ON'}",
                     f"-DSTREAMPOOL_BUILD_KERNELS={'ON' if _have_nvcc() else 'OFF'}"]
        _progress("configuring (CMake)" + (f" with {' '.join(extra)}" if extra else ""))
        _run(args + extra, "CMake configure")

    if bench != "off" and not _perf_on(build_dir):
        raise BuildError(f"streampool: STREAMPOOL_BENCH={bench}, but {build_dir} is configured with "
                         "STREAMPOOL_BUILD_PERF=OFF, so it cannot build streampool-bench; pass "
                         "STREAMPOOL_CMAKE_ARGS=-DSTREAMPOOL_BUILD_PERF=ON (needs Boost.Program_options), "
                         "use another STREAMPOOL_BUILD_DIR, or build without the harness: STREAMPOOL_BENCH=off")
    with_bench = bench != "off"
    targets = ["streampool_shared"] + (["streampool"] if static_too else []) + (["streampool-bench"] if with_bench else [])
    _progress(f"building {len(targets)} targets ({', '.join(targets)}){_estimate(_count_steps(build_dir, targets))}")
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

def _platform_tag() -> str:
    return sysconfig.get_platform().replace("-", "_").replace(".", "_")


def _python_tags(implementation: Optional[str] = None, version: Optional[Tuple[int, int]] = None,
                 soabi: Optional[str] = None, debug: Optional[bool] = None) -> Tuple[str, str]:
    """(interpreter tag, abi tag) of this interpreter (or of the one described), as pip names them:
    ("cp312", "cp312") for CPython 3.12, "cp312d" for a debug build, "cp313t" free-threaded."""
    implementation = implementation or sys.implementation.name
    major, minor = version or sys.version_info[:2]
    if soabi is None:
        soabi = sysconfig.get_config_var("SOABI") or ""
    if implementation == "cpython":
        if soabi.startswith("cpython-"):
            return f"cp{major}{minor}", "cp" + soabi.split("-")[1]
        debug = hasattr(sys, "gettotalrefcount") if debug is None else debug
        return f"cp{major}{minor}", f"cp{major}{minor}{'d' if debug else ''}"
    short = {"pypy": "pp"}.get(implementation, implementation)
    abi = "_".join(soabi.split("-")[:2]).replace(".", "_") if soabi else "none"
    return f"{short}{major}{minor}", abi


def _tag(with_extension: bool) -> str:
    """Note [Wheel tags]."""
    if not with_extension:
        return f"py3-none-{_platform_tag()}"
    interpreter, abi = _python_tags()
    return f"{interpreter}-{abi}-{_platform_tag()}"


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
    """METADATA only: the wheel's tag (its WHEEL file) is known once the build knows whether the
    extension is in it; pip reads METADATA from here."""
    info = directory / _dist_info(version)
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(_metadata(version))
    return info.name


def _wheel_file(tag: str) -> str:
    return f"Wheel-Version: 1.0\nGenerator: streampool_build\nRoot-Is-Purelib: false\nTag: {tag}\n"


def _build_info(bench: bool) -> str:
    """streampool/_build_info.py: what `python -m streampool` reads (Note [The harness or a refusal])."""
    if bench:
        return ("# Written by the build backend: streampool-bench is in this wheel's scripts.\n"
                "bench = True\n")
    return ("# Written by the build backend: built with STREAMPOOL_BENCH=off, so without streampool-bench;\n"
            "# `streampool-bench` and `python -m streampool tune` are unavailable.\n"
            "bench = False\n")


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


GENERATED = ("_version.py", "_build_info.py", "_C10_build.py")  # written by build_wheel, not copied


def _package_files() -> List[Path]:
    package = PYTHON_DIR / NAME
    return sorted(p for p in package.rglob("*.py")
                  if "__pycache__" not in p.parts and not (p.parent == package and p.name in GENERATED))


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
            _progress(f"compiling the PyTorch extension allocator streampool._C10 against torch {torch_version} "
                      f"({len(list(torch_extension_build.CSRC.glob('*.cpp')))} C++ files)")
            try:
                extension = torch_extension_build.build(build_dir, Path(ext_temp.name), torch_version or "",
                                                        _setting(config_settings, "jobs"))
            except RuntimeError as e:
                raise BuildError(str(e)) from e
    except BuildError as e:
        print(str(e), file=sys.stderr)
        raise
    tag = _tag(with_extension=extension is not None)
    name = f"{NAME}-{version}-{tag}.whl"
    writer = _WheelWriter(Path(wheel_directory) / name)
    for path in _package_files():
        writer.add(path.relative_to(PYTHON_DIR).as_posix(), path.read_bytes())
    writer.add(f"{NAME}/_version.py", f'version = "{version}"\n'.encode())
    writer.add(f"{NAME}/_build_info.py", _build_info(bench is not None).encode())
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
    writer.add(f"{info}/WHEEL", _wheel_file(tag).encode())
    writer.add(f"{info}/top_level.txt", f"{NAME}\n".encode())
    writer.close(f"{info}/RECORD")
    _progress(f"wrote {name} (libstreampool.so{', streampool-bench' if bench else ', without streampool-bench'}"
              f"{', the PyTorch extension allocator' if extension else ''})")
    return name
