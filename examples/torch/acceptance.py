#!/usr/bin/env python3
"""PyTorch acceptance run for streampool (docs/integrations/pytorch.md).

Trains a small GPT-like model (plain torch.nn, random weights, a deterministic schedule of batch
sizes and sequence lengths) for --steps steps under six allocator configurations, each in its own
subprocess because an allocator can only be chosen before CUDA is initialised:

  torch-native           PyTorch's caching allocator
  torch-expandable       PyTorch, expandable_segments:True
  torch-async            PyTorch, backend:cudaMallocAsync
  sp-native              streampool (CUDAPluggableAllocator), backend:native
  sp-native-expandable   streampool, backend:native,expandable_segments:True
  sp-async               streampool, backend:cudaMallocAsync

and two CUDA-graph checks, where PyTorch's allocator stays global and a torch.cuda.MemPool backed
by streampool holds the graph's memory (docs/pytorch-compatibility.md §5's graph-safe route):

  graph-sp-native, graph-sp-async

Every run writes OUT/<name>.json and OUT/<name>.log; the parent compares each run's per-step losses
with torch-native's (bit for bit unless --tolerance is given), prints a markdown table (also
OUT/summary.md, OUT/summary.json) and exits non-zero when a run failed, losses differ, or a graph
replay differs from eager execution.

  python3 examples/torch/acceptance.py --lib build-gpu/libstreampool.so --out logs/torch

Exit codes: 0 all passed (or skipped without --require-gpu), 1 a check failed, 2 bad usage or
missing library, 3 skipped (no torch / no GPU) with --require-gpu.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

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


# name -> (kind, allocator config, description). kind: "torch" = PyTorch's allocator configured by
# PYTORCH_CUDA_ALLOC_CONF; "streampool" = libstreampool.so installed as the pluggable allocator,
# configured by STREAMPOOL_ALLOC_CONF; "graph" = PyTorch's allocator + a streampool MemPool.
CONFIGS: Dict[str, Tuple[str, Optional[str], str]] = {
    "torch-native": ("torch", None, "PyTorch native"),
    "torch-expandable": ("torch", "expandable_segments:True", "PyTorch expandable_segments:True"),
    "torch-async": ("torch", "backend:cudaMallocAsync", "PyTorch backend:cudaMallocAsync"),
    "sp-native": ("streampool", "backend:native", "streampool native"),
    "sp-native-expandable": ("streampool", "backend:native,expandable_segments:True",
                             "streampool native + expandable_segments:True"),
    "sp-async": ("streampool", "backend:cudaMallocAsync", "streampool cudaMallocAsync"),
    "graph-sp-native": ("graph", "backend:native", "CUDA graph in MemPool(streampool native)"),
    "graph-sp-async": ("graph", "backend:cudaMallocAsync", "CUDA graph in MemPool(streampool cudaMallocAsync)"),
}
REFERENCE = "torch-native"
TRAINING = [n for n, c in CONFIGS.items() if c[0] != "graph"]
GRAPHS = [n for n, c in CONFIGS.items() if c[0] == "graph"]

# Printed by the library when the native backend lacks expandable segments (src/native).
EXPANDABLE_FALLBACK_MARKER = "expandable_segments:True is not yet implemented"
WARMUP_STEPS = 5
MIB = 1024.0 * 1024.0


# ----------------------------------------------------------------------------------------------
# Pure logic (no torch): comparison, notes, table. Unit-tested by test_acceptance_logic.py.
# ----------------------------------------------------------------------------------------------

def compare_losses(reference: List[float], losses: List[float], tolerance: float) -> Dict[str, Any]:
    """Step-by-step comparison. `identical` means bit-identical floats; `ok` means every step is
    within `tolerance` (0 = identical required) and both runs have the same number of steps."""
    n = min(len(reference), len(losses))
    diffs = []
    for a, b in zip(reference[:n], losses[:n]):
        if math.isnan(a) or math.isnan(b):
            diffs.append(0.0 if (math.isnan(a) and math.isnan(b)) else math.inf)
        else:
            diffs.append(abs(a - b))
    max_diff = max(diffs) if diffs else 0.0
    first_diff = next((i for i, d in enumerate(diffs) if d != 0.0), None)
    identical = len(reference) == len(losses) and all(
        (a == b) or (math.isnan(a) and math.isnan(b)) for a, b in zip(reference, losses))
    same_length = len(reference) == len(losses)
    ok = same_length and (identical if tolerance <= 0.0 else max_diff <= tolerance)
    return {"identical": identical, "max_abs_diff": max_diff, "first_differing_step": first_diff,
            "steps_compared": n, "same_length": same_length, "ok": ok}


def expandable_note(name: str, result: Dict[str, Any], log_text: str) -> str:
    """What actually ran for the expandable configurations (the native backend may fall back)."""
    if name != "sp-native-expandable":
        return ""
    if EXPANDABLE_FALLBACK_MARKER in log_text:
        return "expandable_segments not implemented by streampool native: warned and ran without it"
    warnings = [line.strip() for line in log_text.splitlines()
                if "warning" in line and "expandable_segments" in line]
    if result.get("expandable_segments_seen"):
        return "expandable segments in use" + (f"; {warnings[0][:160]}" if warnings else "")
    if warnings:
        return f"no expandable segment seen; library said: {warnings[0][:160]}"
    if result.get("status") == "ok":
        return "no expandable segment seen in the snapshot (fallback?)"
    return ""


def fmt_mib(value: Optional[float]) -> str:
    return "-" if value is None else f"{value / MIB:.1f}"


def fmt_diff(cmp: Optional[Dict[str, Any]]) -> str:
    if cmp is None:
        return "-"
    if cmp["identical"]:
        return "identical"
    text = f"max {cmp['max_abs_diff']:.3g}"
    if cmp["first_differing_step"] is not None:
        text += f" (from step {cmp['first_differing_step']})"
    if not cmp["same_length"]:
        text += ", different step count"
    return text


def training_table(rows: List[Dict[str, Any]]) -> str:
    head = ("| # | configuration | status | losses vs (1) | peak reserved MiB | peak allocated MiB | "
            "reserved/allocated | mean step ms | device mallocs | note |")
    lines = [head, "|" + "---|" * 10]
    for i, r in enumerate(rows, 1):
        res = r.get("result") or {}
        reserved, allocated = res.get("peak_reserved_bytes"), res.get("peak_allocated_bytes")
        ratio = f"{reserved / allocated:.3f}" if reserved and allocated else "-"
        step = res.get("mean_step_ms")
        mallocs = res.get("num_device_alloc")
        lines.append(
            f"| {i} | {CONFIGS[r['name']][2]} | {r['status']} | {fmt_diff(r.get('compare'))} | {fmt_mib(reserved)} | "
            f"{fmt_mib(allocated)} | {ratio} | {'-' if step is None else f'{step:.2f}'} | "
            f"{'-' if mallocs is None else mallocs} | {r.get('note', '')} |")
    return "\n".join(lines)


def graph_table(rows: List[Dict[str, Any]]) -> str:
    lines = ["| configuration | status | replays | max abs diff vs eager | bit-identical | streampool allocs "
             "(during capture) | live after teardown | note |", "|" + "---|" * 8]
    for r in rows:
        res = r.get("result") or {}
        diff = res.get("max_abs_diff")
        lines.append(
            f"| {CONFIGS[r['name']][2]} | {r['status']} | {res.get('replays', '-')} | "
            f"{'-' if diff is None else f'{diff:.3g}'} | {res.get('bit_identical', '-')} | "
            f"{res.get('streampool_allocs', '-')} ({res.get('streampool_allocs_during_capture', '-')}) | "
            f"{res.get('live_allocations_after_teardown', '-')} | {r.get('note', '')} |")
    return "\n".join(lines)


def evaluate(rows: List[Dict[str, Any]], tolerance: float, reference: Optional[Dict[str, Any]]) -> List[str]:
    """Fills in r['compare'] and r['status']; returns the list of failure descriptions."""
    failures = []
    ref_losses = reference.get("losses") if reference and reference.get("status") == "ok" else None
    for r in rows:
        res = r.get("result")
        kind = CONFIGS[r["name"]][0]
        if res is None or res.get("status") != "ok":
            r["status"] = "FAILED" if res is None or res.get("status") != "skipped" else "skipped"
            reason = (res or {}).get("error") or r.get("error") or "no result written"
            r["note"] = (r.get("note", "") + " " + reason).strip()[:300]
            if r["status"] == "FAILED":
                failures.append(f"{r['name']}: {reason}")
            continue
        if kind == "graph":
            r["status"] = "ok" if res.get("passed") else "FAILED"
            if not res.get("passed"):
                failures.append(f"{r['name']}: graph replay differs from eager (max abs diff "
                                f"{res.get('max_abs_diff')})")
            continue
        if ref_losses is None:
            r["status"] = "ok (no reference)"
            r["compare"] = None
            continue
        cmp = compare_losses(ref_losses, res["losses"], tolerance)
        r["compare"] = cmp
        r["status"] = "ok" if cmp["ok"] else "FAILED"
        if not cmp["ok"]:
            failures.append(f"{r['name']}: losses differ from {REFERENCE} ({fmt_diff(cmp)})")
    return failures


# ----------------------------------------------------------------------------------------------
# Child processes (torch imported only here).
# ----------------------------------------------------------------------------------------------

def batch_schedule(steps: int, seed: int) -> List[Tuple[int, int]]:
    """(batch, sequence length) per step: varied, deterministic, same for every configuration."""
    import random

    rng = random.Random(seed)
    shapes = [(32, 64), (16, 128), (8, 256), (4, 512), (24, 96), (12, 200), (6, 384), (20, 160), (2, 512)]
    return [shapes[rng.randrange(len(shapes))] for _ in range(steps)]


def set_determinism(seed: int) -> None:
    import torch

    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


def build_model(vocab: int, d_model: int, heads: int, layers: int, max_len: int):
    """A small GPT: token one-hot @ embedding (no embedding-backward scatter-add), a causal Conv1d
    token mixer (cuDNN), pre-LN blocks with explicit causal attention (matmul + masked softmax, no
    fused SDPA kernels) and an MLP, tied output head. Every op has a deterministic CUDA kernel."""
    import torch
    from torch import nn

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(d_model, 3 * d_model)
            self.proj = nn.Linear(d_model, d_model)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(x).split(c, dim=-1)
            q = q.view(b, t, heads, c // heads).transpose(1, 2)
            k = k.view(b, t, heads, c // heads).transpose(1, 2)
            v = v.view(b, t, heads, c // heads).transpose(1, 2)
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // heads))
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(mask, float("-inf"))
            y = scores.softmax(dim=-1) @ v
            return self.proj(y.transpose(1, 2).reshape(b, t, c))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(d_model)
            self.attn = Attention()
            self.ln2 = nn.LayerNorm(d_model)
            self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class TinyGPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Parameter(torch.randn(vocab, d_model) * 0.02)
            self.pos = nn.Parameter(torch.randn(max_len, d_model) * 0.02)
            self.mix = nn.Conv1d(d_model, d_model, kernel_size=3, padding=2)
            self.blocks = nn.ModuleList([Block() for _ in range(layers)])
            self.ln = nn.LayerNorm(d_model)

        def forward(self, idx):
            b, t = idx.shape
            x = one_hot(idx, vocab, self.tok.dtype) @ self.tok + self.pos[:t]
            x = x + self.mix(x.transpose(1, 2))[:, :, :t].transpose(1, 2)  # causal: left context only
            for block in self.blocks:
                x = block(x)
            return self.ln(x) @ self.tok.t()

    return TinyGPT()


def one_hot(idx, vocab: int, dtype):
    """One-hot by comparison with arange: elementwise only (no scatter, no host sync), so it is
    deterministic and legal inside a CUDA-graph capture."""
    import torch

    return (idx.unsqueeze(-1) == torch.arange(vocab, device=idx.device)).to(dtype)


def lm_loss(logits, targets, vocab: int):
    """Cross entropy without NLLLoss/gather kernels (their CUDA backward is not deterministic)."""
    logp = logits.log_softmax(dim=-1)
    return -(logp * one_hot(targets, vocab, logp.dtype)).sum(dim=-1).mean()


def make_batch(step: int, batch: int, seq: int, vocab: int, seed: int):
    import torch

    g = torch.Generator().manual_seed(seed * 100003 + step)  # CPU generator: independent of CUDA RNG state
    idx = torch.randint(0, vocab, (batch, seq + 1), generator=g)
    idx = idx.cuda()
    return idx[:, :-1].contiguous(), idx[:, 1:].contiguous()


def streampool_peaks(sp) -> Dict[str, Any]:
    s = sp.stats()
    return {"peak_reserved_bytes": s.get("reserved_bytes.all.peak"),
            "peak_allocated_bytes": s.get("allocated_bytes.all.peak"),
            "num_device_alloc": s.get("num_device_alloc"),
            "num_alloc_retries": s.get("num_alloc_retries"),
            "num_ooms": s.get("num_ooms")}


def torch_peaks() -> Dict[str, Any]:
    import torch

    s = torch.cuda.memory_stats()
    return {"peak_reserved_bytes": torch.cuda.max_memory_reserved(),
            "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
            "num_device_alloc": s.get("num_device_alloc"),
            "num_alloc_retries": s.get("num_alloc_retries"),
            "num_ooms": s.get("num_ooms")}


def child_train(args, name: str) -> Dict[str, Any]:
    kind = CONFIGS[name][0]
    sp = import_streampool()
    import torch

    result: Dict[str, Any] = {"name": name, "kind": kind, "torch_version": torch.__version__,
                              "cuda_version": torch.version.cuda}
    if kind == "streampool":
        sp.install(args.lib)  # before any CUDA work; config from STREAMPOOL_ALLOC_CONF (set by the parent)
        result["streampool_library"] = sp.find_library(args.lib)
    set_determinism(args.seed)
    result["device"] = torch.cuda.get_device_name(0)
    if kind == "streampool":
        result["streampool_backend"] = sp.backend_name()
    vocab, d_model, heads, layers, max_len = 1024, 384, 6, 4, 512
    model = build_model(vocab, d_model, heads, layers, max_len).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    schedule = batch_schedule(args.steps, args.seed)
    losses, times = [], []
    for step, (batch, seq) in enumerate(schedule):
        torch.cuda.synchronize()
        start = time.perf_counter()
        x, y = make_batch(step, batch, seq, vocab, args.seed)
        loss = lm_loss(model(x), y, vocab)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        value = loss.item()  # synchronises
        times.append(time.perf_counter() - start)
        losses.append(value)
    with torch.no_grad():
        checksum = float(sum(p.double().sum().item() for p in model.parameters()))
    result.update({
        "status": "ok",
        "steps": args.steps,
        "schedule": schedule,
        "losses": losses,
        "losses_hex": [v.hex() for v in losses],
        "param_checksum": checksum,
        "step_ms": [t * 1e3 for t in times],
        "mean_step_ms": (sum(times[WARMUP_STEPS:]) / max(1, len(times) - WARMUP_STEPS)) * 1e3,
    })
    result.update(sp_stats_or_torch(sp, kind))
    if kind == "streampool":
        segments = sp.snapshot().get("segments", [])
        result["expandable_segments_seen"] = any(s.get("is_expandable") for s in segments)
        result["streampool_segments"] = len(segments)
    return result


def sp_stats_or_torch(sp, kind: str) -> Dict[str, Any]:
    # PyTorch's memory_* functions raise for a pluggable allocator: ask streampool instead.
    return streampool_peaks(sp) if kind == "streampool" else torch_peaks()


def child_graph(args, name: str) -> Dict[str, Any]:
    """Forward+backward captured into a CUDA graph whose memory is a MemPool backed by streampool;
    replays on new inputs must match eager execution."""
    sp = import_streampool()
    import torch

    result: Dict[str, Any] = {"name": name, "kind": "graph", "torch_version": torch.__version__}
    set_determinism(args.seed)
    vocab, d_model, heads, layers, max_len, batch, seq = 512, 256, 4, 2, 128, 8, 128
    model = build_model(vocab, d_model, heads, layers, max_len).cuda()
    params = list(model.parameters())
    result["device"] = torch.cuda.get_device_name(0)

    def fwd_bwd(x, y):
        loss = lm_loss(model(x), y, vocab)
        loss.backward()
        return loss

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    x_static, y_static = make_batch(0, batch, seq, vocab, args.seed)
    # Warm-up on the capture stream, outside the pool: lazily created state (cuBLAS workspaces,
    # autograd) is made here and not in the graph's pool.
    with torch.cuda.stream(s):
        for _ in range(3):
            model.zero_grad(set_to_none=True)
            fwd_bwd(x_static, y_static)
    torch.cuda.synchronize()
    model.zero_grad(set_to_none=True)

    pool = sp.mempool(args.lib)
    result["streampool_backend"] = sp.backend_name()
    # Give the pool cached blocks on the capture stream before capturing, so the capture is served
    # from them: a segment requested during capture would call streampool on a capturing stream.
    reserve_large, reserve_small = args.graph_reserve_mib, 64
    with torch.cuda.stream(s), torch.cuda.use_mem_pool(pool):
        big = torch.empty(reserve_large * 1024 * 1024, dtype=torch.uint8, device="cuda")
        small = [torch.empty(1024 * 1024, dtype=torch.uint8, device="cuda") for _ in range(reserve_small)]
        del big, small
    torch.cuda.synchronize()
    allocs_before_capture = sp.stats()["allocation.all.allocated"]

    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph, pool=pool.id, stream=s):
            static_loss = fwd_bwd(x_static, y_static)
        torch.cuda.synchronize()
    except Exception as e:
        try:
            during = sp.stats()["allocation.all.allocated"] - allocs_before_capture
        except Exception:  # the CUDA context may be unusable after a failed capture
            during = "unknown"
        raise RuntimeError(f"capture failed ({type(e).__name__}: {e}); streampool allocations during the "
                           f"capture: {during} (see --graph-reserve-mib)") from e
    allocs_after_capture = sp.stats()["allocation.all.allocated"]
    static_grads = [p.grad for p in params]

    max_diff, identical = 0.0, True
    got_loss, got_grads, pairs = None, [], []
    for replay in range(args.graph_replays):
        x, y = make_batch(replay + 1, batch, seq, vocab, args.seed)
        x_static.copy_(x)
        y_static.copy_(y)
        graph.replay()
        torch.cuda.synchronize()
        got_loss = static_loss.detach().clone()
        got_grads = [g.detach().clone() for g in static_grads]
        eager_loss = lm_loss(model(x), y, vocab)
        eager_grads = torch.autograd.grad(eager_loss, params)
        pairs = [(got_loss, eager_loss.detach())] + list(zip(got_grads, eager_grads))
        for got, want in pairs:
            max_diff = max(max_diff, (got.double() - want.double()).abs().max().item())
            identical = identical and torch.equal(got, want)
    torch.cuda.synchronize()
    stats_live = sp.stats()
    result.update({
        "replays": args.graph_replays,
        "max_abs_diff": max_diff,
        "bit_identical": identical,
        "passed": max_diff <= args.graph_tolerance,
        "streampool_allocs": stats_live["allocation.all.allocated"],
        "streampool_allocs_during_capture": allocs_after_capture - allocs_before_capture,
        "streampool_reserved_bytes": stats_live["reserved_bytes.all.current"],
    })
    # Teardown: graph, its outputs and the pool; PyTorch then returns the segments to streampool.
    del graph, static_loss, static_grads, got_loss, got_grads, pairs
    model.zero_grad(set_to_none=True)
    del pool
    import gc

    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    result["live_allocations_after_teardown"] = sp.stats()["allocation.all.current"]
    result["status"] = "ok"
    if result["streampool_allocs"] == 0:
        result["passed"] = False
        result["error"] = "the MemPool never called streampool (no allocation seen)"
    return result


def run_child(args) -> int:
    name = args.child
    out = Path(args.out)
    path = out / f"{name}.json"
    try:
        result = child_graph(args, name) if CONFIGS[name][0] == "graph" else child_train(args, name)
    except Exception as e:  # report any failure in the JSON, with the traceback in the log
        import traceback

        traceback.print_exc()
        result = {"name": name, "status": "error", "error": f"{type(e).__name__}: {e}"}
    path.write_text(json.dumps(result, indent=1))
    print(f"{name}: {result['status']}" + (f" ({result.get('error')})" if result.get("error") else ""))
    return 0 if result["status"] == "ok" else 1


# ----------------------------------------------------------------------------------------------
# Parent.
# ----------------------------------------------------------------------------------------------

def child_env(name: str, lib: Optional[str]) -> Dict[str, str]:
    kind, conf, _ = CONFIGS[name]
    env = dict(os.environ)
    for key in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "STREAMPOOL_ALLOC_CONF"):
        env.pop(key, None)
    env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    env["PYTHONHASHSEED"] = "0"
    if kind == "torch":
        if conf:
            env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    else:
        env["STREAMPOOL_ALLOC_CONF"] = conf or ""
    if lib:
        env["STREAMPOOL_LIB"] = lib
    return env


def probe_torch() -> Tuple[bool, str]:
    """(usable, reason), checked in a subprocess so the parent never initialises CUDA."""
    code = ("import torch,sys; ok=torch.cuda.is_available(); "
            "print(torch.__version__, torch.version.cuda, torch.cuda.device_count() if ok else 0); "
            "sys.exit(0 if ok else 3)")
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return False, "probing torch timed out"
    if p.returncode == 0:
        return True, p.stdout.strip()
    if p.returncode == 3:
        return False, f"torch {p.stdout.strip()} sees no CUDA device"
    return False, "torch is not importable: " + (p.stderr.strip().splitlines() or ["?"])[-1]


def run_parent(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    names = TRAINING + GRAPHS if not args.only else [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        print(f"acceptance: unknown configuration(s) {unknown}; known: {', '.join(CONFIGS)}", file=sys.stderr)
        return 2
    if args.no_graph:
        names = [n for n in names if n not in GRAPHS]

    usable, info = probe_torch()
    if not usable:
        print(f"SKIP: {info}")
        (out / "summary.md").write_text(f"SKIPPED: {info}\n")
        return 3 if args.require_gpu else 0
    print(f"torch {info} (version, CUDA, devices)")

    lib = None
    if any(CONFIGS[n][0] != "torch" for n in names):
        sp = import_streampool()

        try:
            lib = sp.find_library(args.lib)
        except sp.StreampoolError as e:
            print(f"acceptance: {e}", file=sys.stderr)
            return 2
        print(f"libstreampool: {lib}")

    rows: List[Dict[str, Any]] = []
    for name in names:
        log_path, json_path = out / f"{name}.log", out / f"{name}.json"
        json_path.unlink(missing_ok=True)
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", name, "--out", str(out),
               "--steps", str(args.steps), "--seed", str(args.seed), "--graph-replays", str(args.graph_replays),
               "--graph-tolerance", str(args.graph_tolerance), "--graph-reserve-mib", str(args.graph_reserve_mib)]
        if lib:
            cmd += ["--lib", lib]
        print(f"== {name}: {CONFIGS[name][2]}", flush=True)
        row: Dict[str, Any] = {"name": name}
        start = time.time()
        with open(log_path, "w") as log:
            try:
                p = subprocess.run(cmd, env=child_env(name, lib), stdout=log, stderr=subprocess.STDOUT,
                                   timeout=args.timeout)
                row["returncode"] = p.returncode
            except subprocess.TimeoutExpired:
                row["error"] = f"timed out after {args.timeout} s"
        row["seconds"] = round(time.time() - start, 1)
        log_text = log_path.read_text(errors="replace")
        row["result"] = json.loads(json_path.read_text()) if json_path.exists() else None
        if row["result"] is None and "error" not in row:
            tail = [line for line in log_text.strip().splitlines() if line.strip()][-1:] or ["(empty log)"]
            row["error"] = f"exit {row.get('returncode')}, no JSON; log: {tail[0][:200]}"
        row["note"] = expandable_note(name, row["result"] or {}, log_text)
        rows.append(row)
        print(f"   done in {row['seconds']} s, log {log_path}", flush=True)

    reference = next((r["result"] for r in rows if r["name"] == REFERENCE), None)
    if reference is None and (out / f"{REFERENCE}.json").exists():
        reference = json.loads((out / f"{REFERENCE}.json").read_text())  # from an earlier run (--only)
    train_rows = [r for r in rows if r["name"] in TRAINING]
    graph_rows = [r for r in rows if r["name"] in GRAPHS]
    failures = evaluate(train_rows, args.tolerance, reference) + evaluate(graph_rows, args.tolerance, None)

    text = []
    if train_rows:
        first = next((r["result"] for r in train_rows if r.get("result") and r["result"].get("status") == "ok"), {})
        text.append(f"### Training: {args.steps} steps, varied batch/sequence, deterministic "
                    f"(torch {first.get('torch_version', '?')}, CUDA {first.get('cuda_version', '?')}, "
                    f"{first.get('device', '?')}); step time = mean after {WARMUP_STEPS} warm-up steps\n")
        text.append(training_table(train_rows))
        text.append("\nLosses compared step by step with (1); "
                    + ("bit-identical required." if args.tolerance <= 0 else f"tolerance {args.tolerance}."))
    if graph_rows:
        text.append(f"\n### CUDA graph in a torch.cuda.MemPool backed by streampool ({args.graph_replays} replays "
                    "vs eager)\n")
        text.append(graph_table(graph_rows))
    text.append("\n" + ("FAILED:\n" + "\n".join(f"- {f}" for f in failures) if failures else "All checks passed."))
    summary = "\n".join(text) + "\n"
    print("\n" + summary)
    (out / "summary.md").write_text(summary)
    (out / "summary.json").write_text(json.dumps({"rows": rows, "failures": failures}, indent=1, default=str))
    return 1 if failures else 0


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", help="path of libstreampool.so (default: $STREAMPOOL_LIB, else build-gpu/, build/, ...)")
    ap.add_argument("--steps", type=int, default=30, help="training steps per configuration (default 30, min 6)")
    ap.add_argument("--out", default="acceptance-out", help="directory for logs, JSON and summary.md")
    ap.add_argument("--only", help="comma-separated configurations: " + ", ".join(CONFIGS))
    ap.add_argument("--no-graph", action="store_true", help="skip the CUDA-graph checks")
    ap.add_argument("--tolerance", type=float, default=0.0,
                    help="allowed max abs loss difference vs torch-native (default 0: bit-identical)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--timeout", type=int, default=600, help="seconds per configuration (default 600)")
    ap.add_argument("--graph-replays", type=int, default=10)
    ap.add_argument("--graph-tolerance", type=float, default=1e-5,
                    help="allowed max abs difference between graph replay and eager (default 1e-5)")
    ap.add_argument("--graph-reserve-mib", type=int, default=512,
                    help="MiB put into the graph's pool before capture (default 512)")
    ap.add_argument("--require-gpu", action="store_true", help="exit 3 instead of 0 when torch or a GPU is missing")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.steps < WARMUP_STEPS + 1:
        ap.error(f"--steps must be at least {WARMUP_STEPS + 1}")
    if args.graph_replays < 1:
        ap.error("--graph-replays must be at least 1")
    if args.child:
        if args.child not in CONFIGS:
            ap.error(f"unknown configuration {args.child}")
        return run_child(args)
    return run_parent(args)


if __name__ == "__main__":
    sys.exit(main())
