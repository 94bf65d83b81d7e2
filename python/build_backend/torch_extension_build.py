"""Building `streampool._C10`, the PyTorch extension allocator (python/csrc), for the wheel.

The PEP 517 backend (streampool_build.py) calls plan() and build(); build() runs this file as a
script in a subprocess, where setuptools and torch.utils.cpp_extension compile python/csrc/*.cpp
against the installed torch and link libstreampool.a (the static library of the same CMake build,
so the module needs no second copy of libstreampool.so beside it). Offline: nothing is downloaded,
and torch is never imported into pip's own process.

Setting STREAMPOOL_TORCH_EXT (config setting torch-ext): auto (default: build when torch is
importable and its release is supported, Note [Supported PyTorch] in streampool/_version_gate.py;
otherwise say why and build the wheel without it), on (fail when it cannot be built), off.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import List, Optional, Tuple

from cmake_cache import cache_value

PYTHON_DIR = Path(__file__).resolve().parents[1]
CSRC = PYTHON_DIR / "csrc"
MODULE = "streampool._C10"


def _version_gate():
    """streampool/_version_gate.py (standard library only), loaded without importing the package."""
    spec = importlib.util.spec_from_file_location("_streampool_version_gate", PYTHON_DIR / "streampool" / "_version_gate.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def probe_torch(python: str = sys.executable) -> Optional[str]:
    """torch.__version__ of `python`, or None when torch is not importable there."""
    result = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    if result.returncode != 0:
        return None
    return result.stdout.strip().splitlines()[-1] if result.stdout.strip() else None


def plan(setting: str, torch_version: Optional[str]) -> Tuple[bool, str]:
    """(build it?, why / why not). Raises ValueError for a bad setting, RuntimeError for "on" that cannot be met."""
    setting = setting.lower() or "auto"
    if setting not in ("auto", "on", "off"):
        raise ValueError(f"streampool: STREAMPOOL_TORCH_EXT={setting!r}; use auto, on or off")
    if setting == "off":
        return False, "STREAMPOOL_TORCH_EXT=off"
    if torch_version is None:
        reason = "torch is not importable by this Python"
    else:
        reason = _version_gate().refusal(torch_version) or ""
    if reason:
        if setting == "on":
            raise RuntimeError(f"streampool: STREAMPOOL_TORCH_EXT=on, but the extension cannot be built: {reason}")
        return False, reason
    return True, f"torch {torch_version}"


def link_inputs(build_dir: Path) -> List[str]:
    """libstreampool.a and what it needs beyond cudart (which CUDAExtension links): zlib when the
    build found it (the trace reader of the replay layer uses it)."""
    inputs = [str(build_dir / "libstreampool.a")]
    zlib = cache_value(build_dir, "ZLIB_LIBRARY_RELEASE") or cache_value(build_dir, "ZLIB_LIBRARY")
    if zlib and not zlib.endswith("NOTFOUND"):
        inputs.append(zlib)
    return inputs


def build(build_dir: Path, out_dir: Path, torch_version: str, jobs: str = "") -> Tuple[Path, str]:
    """Compiles the module into out_dir; returns its path and the _C10_build.py text."""
    out_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    if jobs:
        env["MAX_JOBS"] = jobs
    cmd = [sys.executable, str(Path(__file__).resolve()), json.dumps({"build_dir": str(build_dir),
                                                                      "out_dir": str(out_dir)})]
    print("streampool build: compiling the PyTorch extension allocator: " + " ".join(cmd), file=sys.stderr, flush=True)
    result = subprocess.run(cmd, stdout=sys.stderr, stderr=sys.stderr, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"streampool: building the PyTorch extension allocator failed (exit {result.returncode}); "
                           "the output above says why. STREAMPOOL_TORCH_EXT=off builds the package without it "
                           "(the CUDAPluggableAllocator route remains)")
    built = sorted(out_dir.glob("streampool/_C10*.so"))
    if len(built) != 1:
        raise RuntimeError(f"streampool: the extension build left {len(built)} modules in {out_dir}/streampool")
    major, minor = _version_gate().parse(torch_version)
    return built[0], f"torch_version = ({major}, {minor})\nbuilt_with = {torch_version!r}\n"


def _compile(build_dir: Path, out_dir: Path) -> None:
    """Runs in the subprocess: setuptools + torch.utils.cpp_extension."""
    from setuptools import setup
    from torch.utils.cpp_extension import BuildExtension, CUDAExtension

    root = PYTHON_DIR.parent
    sources = sorted(str(p) for p in CSRC.glob("*.cpp"))
    extension = CUDAExtension(
        name=MODULE, sources=sources, include_dirs=[str(root / "include"), str(CSRC)],
        extra_objects=link_inputs(build_dir),
        # streampool's headers are C++20; the symbols of the static library stay inside the module.
        extra_compile_args={"cxx": ["-std=c++20", "-O2"], "nvcc": []},
        extra_link_args=["-Wl,--exclude-libs,ALL", "-Wl,--strip-debug"])
    with tempfile.TemporaryDirectory() as temp:
        setup(name="streampool-c10", ext_modules=[extension], cmdclass={"build_ext": BuildExtension},
              script_args=["build_ext", "--build-lib", str(out_dir), "--build-temp", temp])


if __name__ == "__main__":
    arguments = json.loads(sys.argv[1])
    _compile(Path(arguments["build_dir"]), Path(arguments["out_dir"]))
