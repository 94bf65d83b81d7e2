"""Running streampool-bench, the comparison harness, for `python -m streampool COMMAND ...`
(__main__.py). Standard library only; nothing here loads libstreampool.so or torch.

Which streampool-bench: $STREAMPOOL_BENCH_EXE when set, else the one pip installed with this
package (the wheel's scripts: the interpreter's scripts folder, sysconfig's "scripts" path of the
default scheme, then of the user scheme for `pip install --user`), else the first on PATH. A wheel
built with STREAMPOOL_BENCH=off has none (streampool/_build_info.py says bench = False, written by
the build backend, Note [The harness or a refusal]); then the message says how to get it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import List, Optional, Sequence

EXE = "streampool-bench"
ENV = "STREAMPOOL_BENCH_EXE"
#: exit status of streampool-bench for bad input (perf/bench_main.cpp); also ours when it is missing.
EXIT_USAGE = 2


def scripts_dirs() -> List[str]:
    """Where pip puts a wheel's scripts for this interpreter, default scheme first."""
    dirs = []
    schemes = [None]
    user_scheme = f"{os.name}_user"
    if user_scheme in sysconfig.get_scheme_names():
        schemes.append(user_scheme)
    for scheme in schemes:
        try:
            path = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
        except KeyError:
            continue
        if path and path not in dirs:
            dirs.append(path)
    return dirs


def find() -> Optional[str]:
    """The streampool-bench to run, or None."""
    explicit = os.environ.get(ENV)
    if explicit:
        return explicit
    for folder in scripts_dirs():
        candidate = Path(folder, EXE)
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which(EXE)


def built_with_bench() -> Optional[bool]:
    """What the wheel recorded (streampool/_build_info.py), or None when there is no record (a
    checkout, or a wheel from before the record)."""
    try:
        from . import _build_info  # type: ignore[attr-defined]
    except ImportError:
        return None
    return bool(getattr(_build_info, "bench", True))


def missing_message(built_with: Optional[bool]) -> str:
    """The one line printed when there is no streampool-bench to run."""
    if built_with is False:
        return ("streampool: this package was built without streampool-bench (STREAMPOOL_BENCH=off); to get it, "
                "install Boost.Program_options (Debian/Ubuntu: apt-get install libboost-program-options-dev) and "
                f"reinstall from the checkout (pip install --no-build-isolation ./python), or set {ENV} to a "
                "streampool-bench")
    where = ", ".join(scripts_dirs()) or "the interpreter's scripts folder"
    return (f"streampool: streampool-bench not found (looked in {where} and on PATH); install the package from "
            "the checkout (pip install --no-build-isolation ./python), or build it (scripts/bench builds "
            f"build/perf/streampool-bench) and set {ENV} to it")


def main(argv: Sequence[str]) -> int:
    """Runs streampool-bench with `argv`; returns its exit status (128 + N when signal N ended it),
    or EXIT_USAGE with one line on stderr when there is none."""
    exe = find()
    if exe is None:
        print(missing_message(built_with_bench()), file=sys.stderr)
        return EXIT_USAGE
    try:
        child = subprocess.Popen([exe, *argv])
    except OSError as e:
        source = f" (from ${ENV})" if os.environ.get(ENV) else ""
        print(f"streampool: cannot run {exe}{source}: {e.strerror or e}", file=sys.stderr)
        return EXIT_USAGE
    while True:
        try:
            status = child.wait()
            break
        except KeyboardInterrupt:  # Ctrl-C reached the harness too; wait for it to finish
            continue
    return 128 - status if status < 0 else status
