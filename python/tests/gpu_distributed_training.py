#!/usr/bin/env python3
"""Distributed training with streampool installed (issue 28, part 3): DistributedDataParallel and
FSDP2 (torch.distributed.fsdp.fully_shard) with NCCL, WORLD ranks on WORLD GPUs (default 2), for
stock PyTorch and streampool's native, cudaMallocAsync and compact
(expandable_segments:True,cross_stream_reuse:True) configs, each with
TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=0 and =1. Per run and rank: the loss of every step,
the median step time after 5 warm-up steps, and the peak reserved memory. Compared with stock
PyTorch's run of the same kind and hook setting: losses identical (max |difference| printed),
step time (median ratio), peak reserved per rank. Also stock PyTorch with
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, PyTorch's best config for memory, as the
reference for peak reserved. Writes OUT/distributed.json.

  python3 python/tests/gpu_distributed_training.py [--out DIR] [--world 2] [--steps 20]
      [--kinds ddp,fsdp2] [--modes stock,stock_exp,sp_native,sp_async,sp_compact] [--hooks 0,1]

Exits 1 if a run failed or a streampool run's losses differ from stock's, 3 when torch, NCCL or
WORLD GPUs are missing.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time
import traceback
from pathlib import Path

MODES = {
    "stock": (None, None),
    "stock_exp": (None, "expandable_segments:True"),
    "sp_native": ("", None),
    "sp_async": ("backend:cudaMallocAsync", None),
    "sp_compact": ("expandable_segments:True,cross_stream_reuse:True", None),
}
WIDTH = 2048
LAYERS = 6
BATCH = 64


def build_model(torch):
    torch.manual_seed(1234)
    blocks = []
    for _ in range(LAYERS):
        blocks.append(torch.nn.Sequential(torch.nn.Linear(WIDTH, 4 * WIDTH), torch.nn.GELU(),
                                          torch.nn.Linear(4 * WIDTH, WIDTH)))
    return torch.nn.Sequential(*blocks, torch.nn.Linear(WIDTH, 16)).cuda()


def worker(rank: int, world: int, kind: str, mode: str, hook: int, steps: int, port: int, result) -> None:
    try:
        for name in ("STREAMPOOL_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
            os.environ.pop(name, None)
        os.environ["TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK"] = str(hook)
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
        sp_conf, torch_conf = MODES[mode]
        if torch_conf is not None:
            os.environ["PYTORCH_CUDA_ALLOC_CONF"] = torch_conf
        if sp_conf is not None:
            os.environ["STREAMPOOL_ALLOC_CONF"] = sp_conf
            import streampool

            streampool.install(route="extension")
        import torch
        import torch.distributed as dist

        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                device_id=torch.device("cuda", rank))
        model = build_model(torch)
        if kind == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            model = DistributedDataParallel(model, device_ids=[rank])
        else:
            from torch.distributed.fsdp import fully_shard

            for block in list(model)[:-1]:
                fully_shard(block)
            fully_shard(model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        generator = torch.Generator(device="cuda").manual_seed(100 + rank)
        losses, times = [], []
        torch.cuda.reset_peak_memory_stats()
        for step in range(steps):
            x = torch.randn(BATCH, WIDTH, device="cuda", generator=generator)
            y = torch.randn(BATCH, 16, device="cuda", generator=generator)
            torch.cuda.synchronize()
            start = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
            losses.append(float(loss.detach()))
        out = {"rank": rank, "losses": losses, "median_step_ms": 1000 * statistics.median(times[5:] or times),
               "peak_reserved_mib": torch.cuda.max_memory_reserved() / (1 << 20),
               "peak_allocated_mib": torch.cuda.max_memory_allocated() / (1 << 20)}
        dist.destroy_process_group()
        result.put(("ok", out))
    except Exception:  # noqa: BLE001
        result.put(("error", f"rank {rank}: {traceback.format_exc()}"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(mp, world: int, kind: str, mode: str, hook: int, steps: int):
    context = mp.get_context("spawn")
    result = context.Queue()
    port = free_port()
    procs = [context.Process(target=worker, args=(r, world, kind, mode, hook, steps, port, result)) for r in range(world)]
    for p in procs:
        p.start()
    ranks, errors = {}, []
    for _ in range(world):
        try:
            status, value = result.get(timeout=300)
        except Exception:  # noqa: BLE001
            errors.append("no result within 300 s")
            break
        if status == "ok":
            ranks[value["rank"]] = value
        else:
            errors.append(value)
    for p in procs:
        p.join(30)
        if p.is_alive():
            p.kill()
    return ranks, errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.environ.get("OUT", "gpu-distributed-out"))
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--kinds", default="ddp,fsdp2")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--hooks", default="0,1")
    args = parser.parse_args()
    try:
        import torch
        import torch.distributed as dist
        import torch.multiprocessing as mp
    except ImportError:
        print("SKIP: torch is not installed")
        return 3
    if not dist.is_nccl_available() or torch.cuda.device_count() < args.world:
        print(f"SKIP: needs NCCL and {args.world} GPUs (found {torch.cuda.device_count()})")
        return 3
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table, failed = [], 0
    for kind in args.kinds.split(","):
        for hook in [int(h) for h in args.hooks.split(",")]:
            reference = None
            for mode in args.modes.split(","):
                ranks, errors = run(mp, args.world, kind, mode, hook, args.steps)
                row = {"kind": kind, "hook": hook, "mode": mode, "errors": errors, "ranks": ranks}
                if errors or len(ranks) != args.world:
                    failed += 1
                    print(f"FAIL {kind} hook={hook} {mode}: {errors}", flush=True)
                    table.append(row)
                    continue
                if mode == "stock":
                    reference = ranks
                if reference is not None and mode.startswith("sp_"):
                    diff = max(abs(a - b) for r in ranks for a, b in zip(ranks[r]["losses"], reference[r]["losses"]))
                    ratio = statistics.median(ranks[r]["median_step_ms"] / reference[r]["median_step_ms"] for r in ranks)
                    row["max_loss_diff"] = diff
                    row["step_time_vs_stock"] = ratio
                    ok = diff == 0.0
                    failed += not ok
                    print(f"{'PASS' if ok else 'FAIL'} {kind} hook={hook} {mode}: losses vs stock max |diff| {diff:.3g}, "
                          f"step time x{ratio:.3f} of stock", flush=True)
                peaks = ", ".join(f"rank {r}: {ranks[r]['peak_reserved_mib']:.0f} MiB reserved "
                                  f"({ranks[r]['peak_allocated_mib']:.0f} allocated), {ranks[r]['median_step_ms']:.2f} ms/step"
                                  for r in sorted(ranks))
                print(f"     {kind} hook={hook} {mode}: {peaks}", flush=True)
                table.append(row)
    (out / "distributed.json").write_text(json.dumps(table, indent=2))
    print(f"{len(table) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
