"""What the GPU scripts share: the PASS/FAIL recorder (gpu_package.py, gpu_pluggable_capture.py):
one line per check, failures kept for the script's exit status; the recorder of checks written as
functions that raise (gpu_sleep.py, gpu_process_memory.py); and the skip when torch or a GPU is
missing (gpu_capture_reuse.py, gpu_graph_trees_branch.py)."""

from __future__ import annotations

import time
import traceback
from typing import Callable, List


def run_check(failures: List[str], name: str, fn: Callable[[], None]) -> None:
    """Runs `fn`: "ok NAME (seconds)" when it returns, "FAIL NAME" and its traceback when it raises
    (the name is added to `failures`)."""
    t0 = time.perf_counter()
    try:
        fn()
        print(f"ok   {name} ({time.perf_counter() - t0:.2f} s)", flush=True)
    except Exception:  # noqa: BLE001 - every check reports
        failures.append(name)
        print(f"FAIL {name}\n{traceback.format_exc()}", flush=True)


def torch_with_gpu():
    """The torch module; prints SKIP and exits with status 3 (a skip) when torch cannot be imported
    or has no CUDA device."""
    try:
        import torch
    except ImportError:
        print("SKIP: torch is not importable")
        raise SystemExit(3)
    if not torch.cuda.is_available():
        print("SKIP: no GPU")
        raise SystemExit(3)
    return torch


class Checks:
    def __init__(self, scenario: str):
        self.scenario = scenario
        self.failures: List[str] = []

    def __call__(self, name: str, ok: bool, detail: str = "") -> bool:
        print(f"{'PASS' if ok else 'FAIL'} {self.scenario}: {name}{' — ' + detail if detail else ''}", flush=True)
        if not ok:
            self.failures.append(name)
        return ok
