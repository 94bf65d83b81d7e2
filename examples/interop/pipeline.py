#!/usr/bin/env python3
"""examples/interop/pipeline.py — issue 29's acceptance pipeline, one process per mode (GPU, with
PyTorch, CuPy and Numba):

    python3 examples/interop/pipeline.py --mode shared --steps 300 --out OUT/shared

Each step: CuPy "decodes" a batch of varying size (uint8 images copied to the GPU, converted to
float32 and normalised per channel), a Numba kernel applies a clamped gain, and the result goes to
PyTorch over DLPack for one training step of a small CNN. Modes:

  own               each library its own pool (CuPy's MemoryPool, Numba's manager, PyTorch's allocator)
  shared            streampool.install() (extension route) + streampool.cupy + streampool.numba
  shared-pluggable  the same with install(route="pluggable") (the C API's allocator)

Writes OUT/result.json: per-step losses and output checksums and the model's final parameters'
hash (examples/interop/compare.py checks they are identical across modes), peak device memory in
use (cudaMemGetInfo, sampled after each stage) above the baseline, per-library reserved and live
bytes, step times, and, in the shared modes, streampool's statistics and the reuse table
(reuse.py: memory freed by CuPy that PyTorch allocated next, from streampool's trace).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import time
from pathlib import Path


import numpy_compat  # noqa: E402,F401 - before numba.cuda compiles (see its docstring)


os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS: identical outputs
sys.path.insert(0, str(Path(__file__).resolve().parent))

MODES = ("own", "shared", "shared-pluggable")
SIZE = 64  # images are 3 x SIZE x SIZE
WARMUP = 20  # steps before steady-state statistics count
RECORDED = 60  # steps after WARMUP with streampool's trace on, for the reuse table

# Note [Timed steps]
# The shared modes record streampool's trace (for the reuse table) during RECORDED steps after the
# warm-up; recording costs time per allocation, so step times are taken from the steps after that
# window, in every mode (the same steps), and the time of the memory samples is left out.


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=MODES, required=True)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--config", default=None, help="streampool config for the shared modes (default: environment)")
    p.add_argument("--out", required=True)
    return p.parse_args(argv)


def set_up(mode, config):
    """Installs streampool where the mode says, before any library touches CUDA."""
    import torch

    logged = []
    if mode != "own":
        import streampool
        import streampool.cupy
        import streampool.interop as interop
        import streampool.numba

        streampool.install(config=config, route="extension" if mode == "shared" else "pluggable")
        streampool.cupy.install()
        streampool.numba.install()
        allocate = interop.allocate

        def logged_allocate(size, device, stream=0, origin="python"):  # reuse.py's log (call order)
            ptr = allocate(size, device, stream, origin)
            if ptr:
                logged.append((ptr, size, origin))
            return ptr

        interop.allocate = logged_allocate
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True, warn_only=True)  # a nondeterministic op warns; compare.py judges
    return logged


def build_model(torch):
    """A small CNN of ops with deterministic CUDA kernels forward and backward (strided
    convolutions, a mean: max/adaptive pooling's backward is not deterministic on CUDA)."""
    nn = torch.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.ReLU(),
                nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
                nn.Conv2d(64, 64, 3, stride=2, padding=1), nn.ReLU())
            self.head = nn.Linear(64, 10)

        def forward(self, x):
            return self.head(self.features(x).mean(dim=(2, 3)))

    return Net()


def numba_kernel():
    from numba import cuda

    @cuda.jit
    def gain_clamp(x, out, gain):
        i = cuda.grid(1)
        if i < x.size:
            v = x[i] * gain
            out[i] = min(max(v, -3.0), 3.0)

    return gain_clamp


class Sampler:
    """Device memory in use (cudaMemGetInfo) and per-library bytes, sampled after each stage."""

    def __init__(self, mode, cupy, numba_cuda, torch):
        self.mode, self.cupy, self.numba_cuda, self.torch = mode, cupy, numba_cuda, torch
        free, total = cupy.cuda.runtime.memGetInfo()
        self.baseline = total - free
        self.peak_used = self.baseline
        self.peaks = {}

    def _peak(self, key, value):
        self.peaks[key] = max(self.peaks.get(key, 0), int(value))

    def __call__(self):
        """Takes a sample; returns the seconds it took (left out of the step times)."""
        start = time.perf_counter()
        free, total = self.cupy.cuda.runtime.memGetInfo()
        self.peak_used = max(self.peak_used, total - free)
        if self.mode == "own":
            self._peak("cupy_pool_total_bytes", self.cupy.get_default_memory_pool().total_bytes())
            manager = self.numba_cuda.current_context().memory_manager
            held = sum(int(m.size) for m in manager.allocations.values())
            pending = int(getattr(manager.deallocations, "_size", 0))  # freed by Numba, not yet cuMemFree'd
            self._peak("numba_held_bytes", held + pending)
            self._peak("torch_reserved_bytes", self.torch.cuda.memory_reserved())
        else:
            import streampool
            import streampool.interop as interop

            for origin, v in interop.usage(0).get(0, {}).items():
                self._peak(f"live_bytes.{'torch' if origin == 'other' else origin}", v["bytes"])
            self._peak("streampool_reserved_bytes", streampool.stats(0)["reserved_bytes.all.current"])
        return time.perf_counter() - start


def run(args):
    logged = set_up(args.mode, args.config)
    import cupy
    import numpy as np
    import torch
    import torch.nn.functional as F
    from numba import cuda as numba_cuda

    device = torch.device("cuda", 0)
    torch.manual_seed(args.seed)
    model = build_model(torch).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    kernel = numba_kernel()
    mean = cupy.asarray(np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1))
    std = cupy.asarray(np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1))
    rng = np.random.default_rng(args.seed)
    sizes = rng.integers(16, 257, args.steps)
    torch.cuda.synchronize()
    sample = Sampler(args.mode, cupy, numba_cuda, torch)
    shared = args.mode != "own"
    record_to = min(args.steps, WARMUP + RECORDED)
    reuse, trace_entries = None, 0
    losses, checksums, step_seconds = [], [], []
    for step, batch in enumerate(sizes):
        batch = int(batch)
        images = rng.integers(0, 256, (batch, 3, SIZE, SIZE), dtype=np.uint8)
        labels = torch.from_numpy(rng.integers(0, 10, batch)).to(device)
        if shared and step == WARMUP:
            import streampool
            streampool.reset_accumulated_stats(0)  # steady state from here: segments allocated, ...
            streampool.record_history(True, 1 << 21)  # the reuse table's window (Note [Timed steps])
            logged.clear()  # the trace starts here
        if shared and step == record_to:
            reuse, trace_entries = window_reuse(logged)
        start = time.perf_counter()
        raw = cupy.asarray(images)                               # CuPy: the encoded batch on the GPU
        x = (raw.astype(cupy.float32) / 255.0 - mean) / std      # decode + normalise (temporaries)
        del raw
        sampling = sample()
        flat = x.reshape(-1)
        out = numba_cuda.device_array(flat.shape, dtype=np.float32)  # Numba's allocation
        kernel[(flat.size + 255) // 256, 256](numba_cuda.as_cuda_array(flat), out, np.float32(1.5))
        del x, flat
        sampling += sample()
        inputs = torch.from_dlpack(cupy.asarray(out)).view(batch, 3, SIZE, SIZE)  # to PyTorch over DLPack
        checksums.append(float(inputs.double().sum().item()))
        loss = F.cross_entropy(model(inputs), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        del inputs, out
        losses.append(loss.item())
        torch.cuda.synchronize()
        step_seconds.append(time.perf_counter() - start - sampling)
        sample()
    if shared and reuse is None and args.steps > WARMUP:
        reuse, trace_entries = window_reuse(logged)
    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().cpu().numpy().tobytes())
    steady = step_seconds[record_to:] or step_seconds[WARMUP:] or step_seconds  # Note [Timed steps]
    result = {
        "mode": args.mode, "steps": args.steps, "seed": args.seed, "batch_sizes": [int(b) for b in sizes],
        "losses": losses, "input_checksums": checksums, "parameters_sha256": digest.hexdigest(),
        "baseline_used_bytes": sample.baseline, "peak_used_bytes": sample.peak_used,
        "peak_used_above_baseline_bytes": sample.peak_used - sample.baseline, "peaks": sample.peaks,
        "step_ms": {"median": 1e3 * statistics.median(steady),
                    "p90": 1e3 * sorted(steady)[int(0.9 * (len(steady) - 1))], "mean": 1e3 * statistics.mean(steady)},
    }
    if args.mode == "own":
        result["torch_max_reserved_bytes"] = torch.cuda.max_memory_reserved()
    else:
        import streampool

        s = streampool.stats(0)
        result["streampool"] = {k: s[k] for k in ("reserved_bytes.all.peak", "allocated_bytes.all.peak",
                                                   "segment.all.allocated", "segment.all.freed",
                                                   "allocation.all.allocated", "num_alloc_retries", "num_ooms")}
        result["streampool"]["backend"] = streampool.backend_name()
        result["streampool"]["route"] = streampool.installed_route()
        result["reuse"], result["trace_entries"] = reuse or {}, trace_entries
        result["reuse_window_steps"] = [WARMUP, record_to]
    result["timed_steps"] = len(steady)
    return result


def window_reuse(logged):
    """The reuse table of the steps recorded so far; stops the recording."""
    import streampool
    from reuse import reuse_table

    trace = streampool.snapshot()["device_traces"][0]
    try:
        table = reuse_table(trace, logged)
    except ValueError as e:  # the log and the trace disagree: say so in the result (compare.py fails it)
        table = {"error": str(e)}
    streampool.record_history(False)
    logged.clear()
    return table, len(trace)


def main(argv=None):
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = run(args)
    (out / "result.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: result[k] for k in ("mode", "peak_used_above_baseline_bytes", "peaks", "step_ms")}
                     | ({"reuse": result["reuse"], "streampool": result["streampool"]} if "reuse" in result else {})))
    return 0


if __name__ == "__main__":
    sys.exit(main())
