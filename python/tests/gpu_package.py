#!/usr/bin/env python3
"""GPU checks of the streampool package with PyTorch (needs torch and a CUDA device; the CI tests
in this folder cover what runs on the simulated device). Each scenario runs in its own process,
because streampool can become PyTorch's allocator only before CUDA is initialised:

  installed   install(); train a small model; stats(), reset_peak_stats(), memory_summary(),
              empty_cache(); record() (streampool's trace) and dump_snapshot(), both checked
              with problems() and opened by `python -m torch.cuda._memory_viz`
              (stats, trace, trace_plot, trace_plot -s, segment_plot)
  torch       record() of PyTorch's own allocator: a pickle with the run's events, opened by
              the same memory_viz commands
  mempool     mempool() + torch.cuda.use_mem_pool: the tensors' memory comes from streampool

  python3 python/tests/gpu_package.py [--out DIR] [--only installed,torch,mempool]

The package is imported as installed (pip install ./python), else from this checkout's python/
(then $STREAMPOOL_LIB or a build folder provides libstreampool.so). Prints one line per check;
exit 0 when all passed, 1 when one failed, 3 when torch or a GPU is missing (a skip).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Dict

from gpu_checks import Checks  # beside this script

HERE = Path(__file__).resolve().parent
MEMORY_VIZ = ("stats", "trace", "trace_plot", "trace_plot_segments", "segment_plot")


def import_streampool():
    try:
        import streampool
    except ImportError:
        sys.path.insert(0, str(HERE.parent))
        import streampool
    return streampool


def memory_viz(check: Checks, pickle_path: str, out: Path, tag: str) -> None:
    """Runs torch's own memory_viz commands on the file; each must exit 0 (and the plots be written)."""
    for command in MEMORY_VIZ:
        args = [sys.executable, "-m", "torch.cuda._memory_viz"]
        html = out / f"{tag}-{command}.html"
        if command == "trace_plot_segments":
            args += ["trace_plot", pickle_path, "-s", "-o", str(html)]
        elif command in ("trace_plot", "segment_plot"):
            args += [command, pickle_path, "-o", str(html)]
        else:
            args += [command, pickle_path]
        result = subprocess.run(args, capture_output=True, text=True, timeout=600)
        (out / f"{tag}-{command}.log").write_text(result.stdout + result.stderr)
        written = command in ("stats", "trace") or (html.is_file() and html.stat().st_size > 1000)
        check(f"memory_viz {command} {Path(pickle_path).name}", result.returncode == 0 and written,
              result.stderr.strip().splitlines()[-1] if result.returncode != 0 and result.stderr.strip() else "")


def train(torch, steps: int = 5) -> float:
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss = torch.zeros(())
    for step in range(steps):
        x = torch.randn(64 * (step + 1), 1024, device="cuda")
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    return float(loss)


def scenario_installed(sp, out: Path, check: Checks) -> None:
    sp.install()
    import torch

    run = out / "installed-record.pickle"
    with sp.record(str(run)) as rec:  # begun before the model is built
        loss = train(torch)
    check("record() used streampool's trace", rec.source == "streampool", str(rec))
    check("training ran", loss == loss, f"loss {loss}")
    with open(run, "rb") as f:
        data = pickle.load(f)
    from streampool._snapshot import problems

    check("record() pickle is well formed", problems(data) == [], "; ".join(problems(data)[:3]))
    allocs = sum(1 for t in data["device_traces"] for e in t if e["action"] == "alloc")
    check("record() pickle has the run's allocations", allocs > 20, f"{allocs} alloc events")
    memory_viz(check, str(run), out, "installed-record")

    stats = sp.stats()
    check("stats() saw the training", stats["allocation.all.allocated"] > 20 and stats["reserved_bytes.all.peak"] > 0,
          f"allocations {stats['allocation.all.allocated']}, peak reserved {stats['reserved_bytes.all.peak']}")
    peak_before = stats["allocated_bytes.all.peak"]
    sp.reset_peak_stats()
    after = sp.stats()
    check("reset_peak_stats() lowers the peak to the current value",
          after["allocated_bytes.all.peak"] == after["allocated_bytes.all.current"] < peak_before,
          f"{peak_before} -> {after['allocated_bytes.all.peak']}")
    summary = sp.memory_summary()
    (out / "installed-summary.txt").write_text(summary)
    check("memory_summary() is a table", "GPU reserved memory" in summary and "device ID 0" in summary)
    snap = out / "installed-dump.pickle"
    dumped = sp.dump_snapshot(str(snap))
    check("dump_snapshot() is well formed", problems(dumped) == [] and len(dumped["segments"]) > 0,
          f"{len(dumped['segments'])} segments")
    memory_viz(check, str(snap), out, "installed-dump")
    torch.cuda.synchronize()
    sp.empty_cache()
    check("empty_cache() returns the unused segments",
          sp.stats()["reserved_bytes.all.current"] < after["reserved_bytes.all.current"])


def scenario_torch(sp, out: Path, check: Checks) -> None:
    import torch

    run = out / "torch-record.pickle"
    with sp.record(str(run)) as rec:
        train(torch)
    check("record() used PyTorch's allocator", rec.source == "torch", str(rec))
    with open(run, "rb") as f:
        data = pickle.load(f)
    allocs = sum(1 for t in data["device_traces"] for e in t if e["action"] == "alloc")
    check("PyTorch's trace has the run's allocations", allocs > 20, f"{allocs} alloc events")
    frames = sum(len(e.get("frames", [])) for t in data["device_traces"] for e in t)
    check("no stack frames without stacks=True (small files)", frames == 0, f"{frames} frames")
    memory_viz(check, str(run), out, "torch-record")


def scenario_mempool(sp, out: Path, check: Checks) -> None:
    import torch

    pool = sp.mempool()
    before = sp.stats()["allocation.all.allocated"]
    with torch.cuda.use_mem_pool(pool):
        x = torch.ones(1 << 24, device="cuda")
    check("tensors in use_mem_pool come from streampool", sp.stats()["allocation.all.allocated"] > before)
    check("the tensor works", float(x.sum()) == float(1 << 24))
    del x


SCENARIOS: Dict[str, Callable] = {"installed": scenario_installed, "torch": scenario_torch,
                                  "mempool": scenario_mempool}


def child(name: str, out: Path) -> int:
    sp = import_streampool()
    check = Checks(name)
    try:
        SCENARIOS[name](sp, out, check)
    except Exception as e:  # noqa: BLE001 — reported as a failed check
        check("no exception", False, f"{type(e).__name__}: {e}")
    (out / f"{name}.json").write_text(json.dumps({"failures": check.failures}))
    return 1 if check.failures else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="folder for the pickles, plots and logs (default: a temp dir)")
    ap.add_argument("--only", default=",".join(SCENARIOS), help="comma-separated scenarios")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="streampool-gpu-"))
    out.mkdir(parents=True, exist_ok=True)
    if args.child:
        return child(args.child, out)
    names = [n for n in args.only.split(",") if n]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        print(f"gpu_package: unknown scenario(s) {unknown}; choose from {list(SCENARIOS)}", file=sys.stderr)
        return 2
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                           capture_output=True, text=True)
    if probe.returncode != 0 or probe.stdout.strip() != "True":
        print("SKIP: torch with a CUDA device is needed")
        return 3
    failed = []
    for name in names:
        code = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", name, "--out", str(out)],
                              env=dict(os.environ), timeout=1800).returncode
        if code != 0:
            failed.append(name)
    print(f"{'FAILED: ' + ', '.join(failed) if failed else 'all passed'} (files in {out})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
