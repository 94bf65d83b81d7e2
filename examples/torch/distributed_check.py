#!/usr/bin/env python3
"""torch.distributed (NCCL) on streampool: one process per GPU (torch.multiprocessing spawn), each
installs libstreampool.so as PyTorch's allocator before touching CUDA, all-reduces tensors that
streampool allocated and checks the sums; rank 0 also checks streampool's statistics saw them.

  python3 examples/torch/distributed_check.py --lib build-gpu/libstreampool.so --out logs/dist

Needs 2+ GPUs; with fewer it prints SKIP and exits 0 (3 with --require-gpus), unless
--allow-single-gpu runs it as one rank (NCCL on one GPU still exercises the allocator path).
Exit codes: 0 passed or skipped, 1 a check failed, 2 usage / library missing, 3 skipped with
--require-gpus. Each rank writes OUT/rank<r>.json; OUT/summary.json collects them.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.dont_write_bytecode = True  # no __pycache__ in the checkout


def import_streampool():
    """The streampool package: the installed one (pip install ./python), else this checkout's python/."""
    try:
        import streampool
    except ImportError:
        sys.path.insert(0, str(HERE.parents[1] / "python"))
        import streampool
    return streampool


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank: int, world: int, lib: str, port: int, out: str, config: str) -> None:
    result = {"rank": rank, "world": world, "status": "error"}
    try:
        sp = import_streampool()

        os.environ["STREAMPOOL_ALLOC_CONF"] = config  # read by the library on first use
        os.environ.setdefault("TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK", "0")  # needs allocator hooks
        sp.install(lib)  # before any CUDA call in this process
        import torch
        import torch.distributed as dist

        torch.cuda.set_device(rank)
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
        before = sp.stats(rank)["allocation.all.allocated"]

        # 1) Constant tensors of several sizes (small and large pool): sum = world*(world+1)/2.
        expected = world * (world + 1) / 2
        checks = []
        for numel in (1, 1000, 1 << 18, (64 << 20) // 4 + 3):
            t = torch.full((numel,), float(rank + 1), device="cuda")
            dist.all_reduce(t)
            checks.append(bool(torch.all(t == expected).item()))

        # 2) Random tensors: all_reduce vs the sum of all_gather'ed copies, on a side stream too.
        g = torch.Generator(device="cuda").manual_seed(100 + rank)
        x = torch.randn(1 << 20, device="cuda", generator=g)
        gathered = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(gathered, x)
        want = torch.stack(gathered).sum(0)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            y = x.clone()
            dist.all_reduce(y)
        torch.cuda.current_stream().wait_stream(side)
        sp.record_stream(y, torch.cuda.current_stream())
        max_diff = (y - want).abs().max().item()
        checks.append(max_diff <= 1e-4 * world)

        dist.barrier()
        torch.cuda.synchronize()
        after = sp.stats(rank)
        result.update({
            "status": "ok",
            "checks": checks,
            "passed": all(checks) and after["allocation.all.allocated"] > before,
            "random_max_abs_diff": max_diff,
            "streampool_allocations": after["allocation.all.allocated"] - before,
            "streampool_peak_reserved": after["reserved_bytes.all.peak"],
            "backend": sp.backend_name(),
            "device": torch.cuda.get_device_name(rank),
        })
        dist.destroy_process_group()
    except Exception as e:  # recorded for the parent; the traceback goes to this rank's stderr
        traceback.print_exc()
        result["error"] = f"{type(e).__name__}: {e}"
    Path(out, f"rank{rank}.json").write_text(json.dumps(result, indent=1))
    if result["status"] != "ok" or not result.get("passed"):
        sys.exit(1)


def probe() -> tuple:
    code = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return None, "probing torch timed out"
    if p.returncode != 0:
        return None, "torch is not importable: " + (p.stderr.strip().splitlines() or ["?"])[-1]
    return int(p.stdout.strip() or 0), ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", help="libstreampool.so (default: $STREAMPOOL_LIB, else the checkout's build folders)")
    ap.add_argument("--out", default="distributed-out")
    ap.add_argument("--world-size", type=int, default=0, help="ranks (default: every visible GPU)")
    ap.add_argument("--config", default=os.environ.get("STREAMPOOL_ALLOC_CONF", "backend:native"),
                    help="streampool config for every rank (default $STREAMPOOL_ALLOC_CONF or backend:native)")
    ap.add_argument("--allow-single-gpu", action="store_true", help="run as one rank when only one GPU is present")
    ap.add_argument("--require-gpus", action="store_true", help="exit 3 instead of 0 when skipping")
    ap.add_argument("--timeout", type=int, default=300)
    args = ap.parse_args()

    sp = import_streampool()

    try:
        lib = sp.find_library(args.lib)
    except sp.StreampoolError as e:
        print(f"distributed_check: {e}", file=sys.stderr)
        return 2
    count, reason = probe()
    if count is None:
        print(f"SKIP: {reason}")
        return 3 if args.require_gpus else 0
    world = args.world_size or count
    minimum = 1 if args.allow_single_gpu else 2
    if count < minimum or world < minimum or world > count:
        print(f"SKIP: needs {minimum}+ GPUs for world size {world}; {count} visible "
              "(--allow-single-gpu runs one rank)")
        return 3 if args.require_gpus else 0

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("rank*.json"):
        old.unlink()
    import torch.multiprocessing as mp

    print(f"== {world} rank(s), NCCL, streampool {args.config!r} from {lib}", flush=True)
    start = time.time()
    context = mp.spawn(worker, args=(world, lib, free_port(), str(out), args.config), nprocs=world, join=False)
    error = None
    try:
        while not context.join(timeout=5):
            if time.time() - start > args.timeout:
                error = f"timed out after {args.timeout} s"
                for p in context.processes:
                    if p.is_alive():
                        p.terminate()
                break
    except Exception as e:  # a rank exited non-zero: spawn raises; the rank JSON says why
        error = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"

    ranks = []
    for r in range(world):
        f = out / f"rank{r}.json"
        ranks.append(json.loads(f.read_text()) if f.exists() else {"rank": r, "status": "missing"})
    passed = error is None and all(r.get("status") == "ok" and r.get("passed") for r in ranks)
    summary = {"world": world, "config": args.config, "passed": passed, "error": error, "ranks": ranks}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print("| rank | status | checks | streampool allocations | peak reserved MiB | error |")
    print("|---|---|---|---|---|---|")
    for r in ranks:
        peak = r.get("streampool_peak_reserved")
        print(f"| {r['rank']} | {r.get('status')}{'' if r.get('passed') else ' (FAILED)'} | {r.get('checks', '-')} | "
              f"{r.get('streampool_allocations', '-')} | {'-' if peak is None else f'{peak / 2**20:.1f}'} | "
              f"{r.get('error', '')} |")
    print(("PASSED" if passed else f"FAILED{': ' + error if error else ''}") + f" in {time.time() - start:.1f} s")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
