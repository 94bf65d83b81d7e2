"""The PASS/FAIL recorder the GPU scripts share (gpu_package.py, gpu_pluggable_capture.py): one
line per check, failures kept for the script's exit status."""

from __future__ import annotations

from typing import List


class Checks:
    def __init__(self, scenario: str):
        self.scenario = scenario
        self.failures: List[str] = []

    def __call__(self, name: str, ok: bool, detail: str = "") -> bool:
        print(f"{'PASS' if ok else 'FAIL'} {self.scenario}: {name}{' — ' + detail if detail else ''}", flush=True)
        if not ok:
            self.failures.append(name)
        return ok
