#!/usr/bin/env python3
"""NCCL buffer registration through the allocator trace tracker, one rank on one GPU (issue 28,
docs/ipc-and-nccl.md): with TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1 ProcessGroupNCCL
attaches its register / deregister hooks (attachAllocatorTraceTracker) and streampool tells them
of its segments (normal segments, and with expandable segments every mapped range). Per config:

  - all-reduce of tensors of 1..256 MiB gives the right sums;
  - streampool._C10.tracker_ranges(): the hooks are attached, and the ranges told equal the
    snapshot's segments (what is mapped); after freeing everything and empty_cache(), none are left;
  - a torch.cuda.MemPool over ProcessGroupNCCL's mem_allocator (ncclMemAlloc), registered with
    register_mem_pool: an all-reduce on a tensor from it;
  - the NCCL log (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,REG) is kept under OUT;
  - the all-reduce time per size with the hook on and off (one rank: NCCL's local path).

Configs: stock PyTorch (reference), streampool native, streampool expandable_segments:True (set in
STREAMPOOL_ALLOC_CONF: PyTorch's own config would turn the hook off, Note in docs/ipc-and-nccl.md).

  python3 python/tests/gpu_nccl_register.py [--out DIR]

Prints PASS/FAIL lines and a summary; exits 1 if any failed, 3 without torch, NCCL or a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
import traceback
from pathlib import Path

MIB = 1 << 20
SIZES_MIB = [1, 4, 16, 64, 256]
CONFIGS = {
    "stock": None,
    "sp_native": "expandable_segments:False",
    "sp_expandable": "expandable_segments:True",
    # The same, with PyTorch's own variable saying expandable_segments:True too: ProcessGroupNCCL
    # (as we read its source) then turns the hook off; checked: no trackers attached.
    "sp_expandable_torch_conf": "expandable_segments:True",
}


def worker(config: str, hook: bool, port: int, log_path: str, result) -> None:
    try:
        os.environ["TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK"] = "1" if hook else "0"
        os.environ["NCCL_DEBUG"] = "INFO"
        os.environ["NCCL_DEBUG_SUBSYS"] = "INIT,REG"
        os.environ["NCCL_DEBUG_FILE"] = log_path
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
        for name in ("STREAMPOOL_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
            os.environ.pop(name, None)
        sp = None
        if config == "sp_expandable_torch_conf":
            os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        if CONFIGS[config] is not None:
            os.environ["STREAMPOOL_ALLOC_CONF"] = CONFIGS[config]
            import streampool as sp

            sp.install(route="extension")
        import torch
        import torch.distributed as dist

        torch.cuda.set_device(0)
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1,
                                device_id=torch.device("cuda", 0))
        out = {"config": config, "hook": hook, "times_ms": {}, "checks": []}
        tensors = []
        for size in SIZES_MIB:
            t = torch.full((size * MIB // 4,), 1.5, device="cuda")
            dist.all_reduce(t)
            torch.cuda.synchronize()
            out["checks"].append(("all_reduce %d MiB" % size, bool((t == 1.5).all())))
            tensors.append(t)
            # Time: 20 all-reduces after 3 warm-up ones.
            for _ in range(3):
                dist.all_reduce(t)
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(20):
                dist.all_reduce(t)
            torch.cuda.synchronize()
            out["times_ms"][size] = 1000 * (time.perf_counter() - start) / 20
        # NCCL's own allocator (ncclMemAlloc) as a torch.cuda.MemPool: the pool's segments come from
        # it (streampool's segment providers), ProcessGroupNCCL registers the pool, all-reduce on it.
        try:
            backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cuda", 0))
            pool = torch.cuda.MemPool(backend.mem_allocator)
            with torch.cuda.use_mem_pool(pool):
                pooled = torch.full((16 * MIB // 4,), 2.0, device="cuda")
            backend.register_mem_pool(pool)
            dist.all_reduce(pooled)
            torch.cuda.synchronize()
            out["checks"].append(("all_reduce on a MemPool of NCCL's mem_allocator", bool((pooled == 2.0).all())))
            backend.deregister_mem_pool(pool)
            del pooled
            torch.cuda.synchronize()
            del pool
        except Exception as e:  # noqa: BLE001 - reported as a failed check with the reason
            if "not supported in this NCCL version" in str(e):  # the installed NCCL's answer, stock PyTorch's too
                out.setdefault("skips", []).append(f"MemPool of NCCL's mem_allocator: {e}")
            else:
                out["checks"].append((f"all_reduce on a MemPool of NCCL's mem_allocator ({type(e).__name__}: {e})", False))
        if sp is not None:
            from streampool import _C10

            trackers, ranges = _C10.tracker_ranges()
            segments = torch.cuda.memory._snapshot()["segments"]
            shown = sorted((s["address"], s["total_size"]) for s in segments)
            told = sorted((a, n) for (_, a, n) in ranges)

            def merged(pairs):
                runs = []
                for a, n in pairs:
                    if runs and runs[-1][1] == a:
                        runs[-1][1] = a + n
                    else:
                        runs.append([a, a + n])
                return runs

            out["trackers"] = trackers
            if config == "sp_expandable_torch_conf":
                out["checks"].append(("PyTorch's own expandable_segments:True keeps the hook off", trackers == 0))
            else:
                out["checks"].append(("hooks attached" if hook else "no hooks attached", (trackers >= 2) == hook))
            if hook and trackers > 0:
                # What existed at attach time was registered by ProcessGroupNCCL from the snapshot;
                # the ranges told are what came after: together they must cover what is mapped.
                covered = merged(sorted(set(told) | set(shown)))
                out["checks"].append(("ranges told lie within the mapped memory",
                                      all(any(lo <= a and a + n <= hi for lo, hi in merged(shown)) for a, n in told)))
                out["checks"].append(("mapped memory covered", covered == merged(shown)))
            del tensors, t
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            _, left = _C10.tracker_ranges()
            segments_left = torch.cuda.memory._snapshot()["segments"]
            out["checks"].append(("after empty_cache no range told is left beyond the segments still held",
                                  len(left) <= len(segments_left)))
        dist.destroy_process_group()
        result.put(("ok", out))
    except Exception:  # noqa: BLE001
        result.put(("error", traceback.format_exc()))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.environ.get("OUT", "gpu-nccl-out"))
    args = parser.parse_args()
    try:
        import torch
        import torch.distributed as dist
        import torch.multiprocessing as mp
    except ImportError:
        print("SKIP: torch is not installed")
        return 3
    if not torch.cuda.is_available() or not dist.is_nccl_available():
        print("SKIP: no CUDA device or no NCCL")
        return 3
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    context = mp.get_context("spawn")
    passed = failed = 0
    figures = []
    for config in CONFIGS:
        for hook in ((True,) if config == "sp_expandable_torch_conf" else (True, False)):
            result = context.Queue()
            log = out / f"nccl-{config}-hook{int(hook)}.log"
            p = context.Process(target=worker, args=(config, hook, free_port(), str(log), result))
            p.start()
            try:
                status, value = result.get(timeout=300)
            except Exception:  # noqa: BLE001
                status, value = "error", "no result within 300 s"
            p.join(30)
            name = f"{config} hook={int(hook)}"
            if status != "ok":
                print(f"FAIL {name}: {value}", flush=True)
                failed += 1
                continue
            figures.append(value)
            for reason in value.get("skips", []):
                print(f"SKIP {name}: {reason}", flush=True)
            for check, ok in value["checks"]:
                print(f"{'PASS' if ok else 'FAIL'} {name}: {check}", flush=True)
                passed += ok
                failed += not ok
            registered = 0
            if log.exists():
                text = log.read_text(errors="replace")
                registered = sum(1 for line in text.splitlines() if "regist" in line.lower())
            value["nccl_log_lines_mentioning_registration"] = registered
            print(f"     {name}: all-reduce ms per size {value['times_ms']}; NCCL log lines on registration: "
                  f"{registered}", flush=True)
    (out / "nccl_register.json").write_text(json.dumps(figures, indent=2))
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
