#!/usr/bin/env python3
"""examples/interop/compare.py — judges the pipeline's runs (pipeline.py, one folder per mode):

    python3 examples/interop/compare.py OUT          # OUT/own/result.json, OUT/shared/result.json, ...

Checks that every mode computed exactly what "own" computed (per-step losses, the checksums of
the inputs PyTorch received, the final parameters' hash) and that in each shared mode PyTorch
allocated memory CuPy had freed (the reuse table). Prints a Markdown table of peak device memory
in use, per-library bytes and step times, writes it to OUT/summary.md, and exits 1 when a check
fails (naming it), 2 when a result is missing. Standard library only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Dict, List, Tuple

MIB = 1 << 20
MODES = ("own", "shared", "shared-pluggable")


def load(out: Path) -> Dict[str, dict]:
    results = {}
    for mode in MODES:
        path = out / mode / "result.json"
        if path.is_file():
            results[mode] = json.loads(path.read_text())
    return results


def checks(results: Dict[str, dict]) -> List[Tuple[str, bool, str]]:
    """(name, passed, detail) for each check."""
    out: List[Tuple[str, bool, str]] = []
    reference = results.get("own")
    for mode, r in results.items():
        if mode == "own":
            continue
        if reference is not None:
            for key in ("batch_sizes", "losses", "input_checksums", "parameters_sha256"):
                same = r[key] == reference[key]
                detail = "identical" if same else _first_difference(reference[key], r[key])
                out.append((f"{mode}: {key} as in own", same, detail))
        table = r.get("reuse", {})
        reuse = table.get("cupy->torch", {"reuses": 0, "bytes": 0})
        detail = f"{reuse['reuses']} allocations, {reuse['bytes'] / MIB:.1f} MiB"
        if "error" in table:
            detail += f" (the trace could not be attributed: {table['error']})"
        out.append((f"{mode}: PyTorch allocated memory CuPy freed", reuse["reuses"] > 0, detail))
    return out


def _first_difference(a, b) -> str:
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return f"first difference at step {i}: {x!r} vs {y!r}"
        return f"lengths {len(a)} vs {len(b)}"
    return f"{a!r} vs {b!r}"


def _mib(value) -> str:
    return f"{value / MIB:.1f}"


def table(results: Dict[str, dict]) -> str:
    lines = ["| mode | peak in use above baseline, MiB (cudaMemGetInfo) | reserved, MiB | live peaks, MiB "
             "| step median / p90, ms | segments allocated after warm-up |",
             "|---|---|---|---|---|---|"]
    for mode, r in results.items():
        peaks = r["peaks"]
        if mode == "own":
            reserved = (f"CuPy pool {_mib(peaks.get('cupy_pool_total_bytes', 0))} + Numba "
                        f"{_mib(peaks.get('numba_held_bytes', 0))} + PyTorch {_mib(r['torch_max_reserved_bytes'])}")
            live = "-"
            segments = "-"
        else:
            reserved = f"streampool {_mib(r['streampool']['reserved_bytes.all.peak'])} (all libraries)"
            live = ", ".join(f"{k.split('.', 1)[1]} {_mib(v)}" for k, v in sorted(peaks.items())
                             if k.startswith("live_bytes."))
            segments = str(r["streampool"]["segment.all.allocated"])
        step = r["step_ms"]
        lines.append(f"| {mode} | {_mib(r['peak_used_above_baseline_bytes'])} | {reserved} | {live} | "
                     f"{step['median']:.2f} / {step['p90']:.2f} | {segments} |")
    reuse_rows = [(mode, pair, v) for mode, r in results.items() for pair, v in sorted(r.get("reuse", {}).items())
                  if pair != "error"]
    if reuse_rows:
        lines += ["", "| mode | freed by -> allocated by | allocations | MiB |", "|---|---|---|---|"]
        lines += [f"| {mode} | {pair} | {v['reuses']} | {_mib(v['bytes'])} |" for mode, pair, v in reuse_rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: compare.py OUT (the folder with own/, shared/, shared-pluggable/)", file=sys.stderr)
        return 2
    out = Path(argv[0])
    results = load(out)
    if "own" not in results or len(results) < 2:
        print(f"compare.py: need {out}/own/result.json and at least one shared mode; found {sorted(results)}",
              file=sys.stderr)
        return 2
    found = checks(results)
    text = table(results) + "\n\n" + "\n".join(f"- {'PASS' if ok else 'FAIL'} {name}: {detail}"
                                               for name, ok, detail in found) + "\n"
    (out / "summary.md").write_text(text)
    print(text)
    return 0 if all(ok for _, ok, _ in found) else 1


if __name__ == "__main__":
    sys.exit(main())
