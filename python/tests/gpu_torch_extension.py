#!/usr/bin/env python3
"""GPU acceptance of streampool's extension allocator (streampool._C10) inside PyTorch: run it once
per backend, e.g. with PYTORCH_CUDA_ALLOC_CONF unset and with backend:cudaMallocAsync. Needs the
package installed with the extension (pip install --no-build-isolation ./python with torch 2.11).

  route            install() took the extension route; torch.cuda.memory_stats() answers
  graph_step       torch.cuda.graph capture + 20 replays of a full training step (SGD with momentum,
                   4 batches cycled): losses bit-identical to the same steps run eagerly, lower on
                   the last pass over the batches; the graph's memory is in a private pool of
                   streampool's
  shared_pool      two graphs captured into one graph_pool_handle(), replayed, values checked; the
                   pool's memory is returned by empty_cache() once both graphs are gone
  graphed_callables torch.cuda.make_graphed_callables on a module, 10 training steps vs eager
  compile          torch.compile(mode="reduce-overhead") training loop, 60 steps (cudagraph trees
                   over streampool's pools; prints exactly why when it fails): losses within 1e-3
                   (relative) of the same steps eager, lower on the last pass over the data
  stats            memory_stats()/memory_summary()/max_memory_reserved()/reset_peak_memory_stats()
                   agree with streampool.stats()
  empty_cache      torch.cuda.empty_cache() returns streampool's cache to the device
  record_stream    a slow kernel on a side stream reads and writes a tensor freed on the main stream
                   (Tensor.record_stream): no early reuse, checked on the data
  history          _record_memory_history + _snapshot() (segments, blocks, trace) + _dump_snapshot
                   opened by `python -m torch.cuda._memory_viz stats` and `trace_plot`
  history_stacks   _record_memory_history(context="all", stacks="python"): the alloc and free
                   entries and the live block carry frames naming the Python functions that
                   allocated and freed; memory_viz trace_plot / segment_plot open the file
  record_stacks    streampool.record(stacks=True) with streampool's allocator: the file's alloc
                   entries name the Python function that allocated
  profiler         torch.profiler(profile_memory=True): the device memory of aten::empty and of
                   a dtype conversion, and the frees, are reported per op
  mempool          torch.cuda.MemPool + use_mem_pool: the allocations land in that private pool
  mempool_options  MemPool(no_split=True): two small tensors get a segment each; MemPool(
                   use_on_oom=True): under a memory-fraction cap a general tensor that cannot grow
                   the cache gets the pool's free block (same address); without it, OOM
  mempool_allocator torch.cuda.MemPool(CUDAPluggableAllocator(...).allocator()) (a small C library
                   built with gcc here): the pool's segments come from that allocator and go back
                   to it when the pool is deleted
  ipc              native: a CUDA tensor sent to a spawned process (torch.multiprocessing) that also
                   installed streampool is read there; cudaMallocAsync: the documented refusal
  oom              an impossible request raises torch.cuda.OutOfMemoryError with streampool's
                   diagnosis; the OOM observer is called; a config variable changed mid-program is
                   named in the message; the memory-fraction cap gives an OOM too
  gpt2             transformers.GPT2LMHeadModel (GPT2Config, no download) trains 20 steps in a fresh
                   process with streampool installed and in one with PyTorch's own allocator (same
                   environment): the same losses, peak reserved within 10% + 64 MiB; step times printed
  ddp              DistributedDataParallel (NCCL) over every GPU, one spawned process per GPU with
                   streampool installed, 10 steps; with one GPU the losses equal the same steps eager

  python3 python/tests/gpu_torch_extension.py [--out DIR] [--only a,b,...]

Prints one PASS/FAIL line per check and a summary; exits 1 if any failed, 3 when torch or a GPU is
missing.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Callable, Dict, List, Tuple

MIB = 1 << 20
# Deterministic cuBLAS, for loss comparisons across processes; set before CUDA starts.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


class CheckFailed(Exception):
    pass


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


# --- helpers ---------------------------------------------------------------------------------------

def small_model(torch, seed: int = 0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda()


def batches(torch, n: int, seed: int = 1) -> List[Tuple[object, object]]:
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [(torch.randn(256, 1024, device="cuda", generator=g), torch.randn(256, 1024, device="cuda", generator=g))
            for _ in range(n)]


def private_pool_segments(torch) -> List[dict]:
    return [s for s in torch.cuda.memory._snapshot()["segments"] if tuple(s.get("segment_pool_id", (0, 0))) != (0, 0)]


# --- checks ----------------------------------------------------------------------------------------

def check_route(torch, sp, out: Path) -> str:
    expect(sp.installed_route() == "extension", f"install() took the {sp.installed_route()} route")
    x = torch.empty(MIB, device="cuda")
    stats = torch.cuda.memory_stats()
    expect(stats.get("allocated_bytes.all.current", 0) >= MIB, f"memory_stats() does not see the tensor: {stats}")
    del x
    return f"backend {sp.backend_name()}, allocator {torch.cuda.memory.get_allocator_backend()}"


def check_graph_step(torch, sp, out: Path) -> str:
    # 4 batches, cycled: the loss is compared on the same batches (it is meaningless across
    # different random batches, which made the first version of this check fail on the H200).
    data = batches(torch, 4)
    warm, steps = data[:3], [data[i % 4] for i in range(20)]

    def make():
        model = small_model(torch)
        return model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    # Eager reference: the same 3 warm-up steps and 20 steps.
    model, opt = make()
    eager = []
    for x, y in warm + steps:
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        eager.append(loss.detach().clone())
    eager = eager[3:]

    model, opt = make()
    static_x, static_y = torch.empty_like(warm[0][0]), torch.empty_like(warm[0][1])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for x, y in warm:
            static_x.copy_(x)
            static_y.copy_(y)
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(model(static_x), static_y)
            loss.backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = torch.nn.functional.mse_loss(model(static_x), static_y)
        static_loss.backward()
        opt.step()
    expect(len(private_pool_segments(torch)) > 0, "the graph's allocations are in no private pool of streampool's")
    replayed = []
    for x, y in steps:
        static_x.copy_(x)
        static_y.copy_(y)
        graph.replay()
        replayed.append(static_loss.detach().clone())
    torch.cuda.synchronize()
    diffs = [float((a - b).abs()) for a, b in zip(eager, replayed)]
    expect(all(torch.equal(a, b) for a, b in zip(eager, replayed)),
           f"replayed losses differ from eager: max |diff| {max(diffs):.3e}; eager {[float(v) for v in eager[:3]]}..., "
           f"graph {[float(v) for v in replayed[:3]]}...")
    first = sum(float(v) for v in replayed[:4]) / 4  # each a pass over the same 4 batches
    last = sum(float(v) for v in replayed[-4:]) / 4
    expect(last < first, f"the loss did not go down: mean over the 4 batches {first:.5f} -> {last:.5f}")
    del graph
    return f"20 replays bit-identical to eager, mean loss per pass {first:.4f} -> {last:.4f}"


def check_shared_pool(torch, sp, out: Path) -> str:
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_reserved()
    pool = torch.cuda.graph_pool_handle()
    a = torch.full((8 * MIB,), 2.0, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up as the docs show
        (a * 3).sum()
    torch.cuda.current_stream().wait_stream(s)
    g1, g2 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(g1, pool=pool):
        b = a * 3
    with torch.cuda.graph(g2, pool=pool):
        c = b + 1
    pools = {tuple(seg["segment_pool_id"]) for seg in private_pool_segments(torch)}
    expect(tuple(pool) in pools, f"no segment of pool {tuple(pool)} in the snapshot (pools seen: {pools})")
    a.fill_(5.0)
    g1.replay()
    g2.replay()
    torch.cuda.synchronize()
    expect(torch.all(c == 16.0).item(), f"c = {c[:4].tolist()} after replays, expected 16")
    held = torch.cuda.memory_reserved()
    in_pool = sum(seg["total_size"] for seg in private_pool_segments(torch) if tuple(seg["segment_pool_id"]) == tuple(pool))
    del b, c
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    kept = [seg for seg in private_pool_segments(torch) if tuple(seg["segment_pool_id"]) == tuple(pool)]
    # Both backends: the private pool owns its memory (cudaMallocAsync: Note [Private pools of the
    # cudaMallocAsync backend]), kept while a graph can replay.
    expect(kept, "empty_cache() released the pool while its graphs can still replay")
    g1.replay()
    g2.replay()
    del g1, g2
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    left = [seg for seg in private_pool_segments(torch) if tuple(seg["segment_pool_id"]) == tuple(pool)]
    expect(not left, f"empty_cache() after both graphs died kept {len(left)} segment(s) of the pool")
    after = torch.cuda.memory_reserved()
    del a
    return (f"pool {tuple(pool)} ({in_pool // MIB} MiB) shared by 2 graphs, kept while they live, released after; "
            f"reserved {base // MIB} -> {held // MIB} -> {after // MIB} MiB")


def check_graphed_callables(torch, sp, out: Path) -> str:
    data = batches(torch, 10, seed=3)
    eager_model = small_model(torch, seed=5)
    graphed_model = copy.deepcopy(eager_model)
    sample = torch.randn(256, 1024, device="cuda", requires_grad=False)
    graphed = torch.cuda.make_graphed_callables(graphed_model, (sample,))
    losses = []
    for model, opt in ((eager_model, torch.optim.SGD(eager_model.parameters(), lr=0.01)),
                       (graphed, torch.optim.SGD(graphed_model.parameters(), lr=0.01))):
        run = []
        for x, y in data:
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            run.append(float(loss))
        losses.append(run)
    diff = max(abs(a - b) for a, b in zip(*losses))
    expect(diff <= 1e-5 * max(abs(v) for v in losses[0]), f"graphed losses differ from eager by {diff:.3e}: {losses}")
    return f"10 steps, max |loss diff| vs eager {diff:.2e}"


def check_compile(torch, sp, out: Path) -> str:
    import torch._dynamo.utils as dynamo_utils

    data = batches(torch, 8, seed=9)
    steps = 60

    def train(model, forward, mark_steps: bool) -> List[float]:
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        losses = []
        for step in range(steps):
            x, y = data[step % len(data)]
            if mark_steps:
                torch.compiler.cudagraph_mark_step_begin()
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(forward(x), y)
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
        return losses

    reference = small_model(torch, seed=7)
    eager = train(reference, reference, False)
    model = small_model(torch, seed=7)
    compiled = torch.compile(model, mode="reduce-overhead")
    try:
        losses = train(model, compiled, True)
    except Exception as e:  # noqa: BLE001 — the reason is the result
        traceback.print_exc(file=sys.stdout)
        raise CheckFailed(f"failed: {type(e).__name__}: {e}") from e
    skips = dynamo_utils.counters["inductor"].get("cudagraph_skips", 0)
    expect(skips == 0, f"cudagraphs were skipped {skips} time(s), so streampool's pools were not exercised "
                       f"(counters: {dict(dynamo_utils.counters['inductor'])})")
    # Inductor fuses bias and GELU, so the losses match eager's closely, not bit for bit.
    diff = max(abs(a - b) / abs(b) for a, b in zip(losses, eager))
    expect(all(v == v for v in losses) and diff <= 1e-3,
           f"compiled losses differ from eager by up to {diff:.2e} (relative): {losses[:3]} ... vs {eager[:3]} ...")
    first, last = sum(losses[:8]) / 8, sum(losses[-8:]) / 8  # each a pass over the same 8 batches
    expect(last < first, f"the loss did not go down: mean over the 8 batches {first:.5f} -> {last:.5f}")
    pools = {tuple(s["segment_pool_id"]) for s in private_pool_segments(torch)}
    expect(pools, "no private-pool segment in streampool's snapshot: the cudagraph trees did not use its pools")
    return (f"{steps} steps, mean loss per pass {first:.4f} -> {last:.4f}, max relative diff vs eager {diff:.1e}, "
            f"{len(pools)} private pool(s)")


def check_stats(torch, sp, out: Path) -> str:
    x = torch.empty(64 * MIB, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    ours = sp.stats()
    theirs = torch.cuda.memory_stats()
    for key in ("allocated_bytes.all.current", "reserved_bytes.all.current", "allocation.all.current",
                "segment.all.current", "reserved_bytes.all.peak", "num_ooms"):
        expect(theirs.get(key) == ours.get(key), f"{key}: torch {theirs.get(key)} vs streampool {ours.get(key)}")
    expect(torch.cuda.max_memory_reserved() == ours["reserved_bytes.all.peak"], "max_memory_reserved() differs")
    expect(torch.cuda.memory_allocated() == ours["allocated_bytes.all.current"], "memory_allocated() differs")
    summary = torch.cuda.memory_summary()
    (out / "memory_summary.txt").write_text(summary + "\n\n" + sp.memory_summary())
    expect("Allocated memory" in summary and "GPU reserved memory" in summary, "memory_summary() has no table")
    y = torch.empty(128 * MIB, dtype=torch.uint8, device="cuda")
    del y
    peak_before = torch.cuda.max_memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    after = sp.stats()
    expect(after["allocated_bytes.all.peak"] == after["allocated_bytes.all.current"] < peak_before,
           f"reset_peak_memory_stats(): peak {after['allocated_bytes.all.peak']}, current "
           f"{after['allocated_bytes.all.current']}, peak before {peak_before}")
    del x
    return (f"torch and streampool agree: allocated {ours['allocated_bytes.all.current'] // MIB} MiB, reserved "
            f"{ours['reserved_bytes.all.current'] // MIB} MiB; peak reset {peak_before // MIB} -> "
            f"{after['allocated_bytes.all.peak'] // MIB} MiB")


def check_empty_cache(torch, sp, out: Path) -> str:
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    x = torch.empty(512 * MIB, dtype=torch.uint8, device="cuda")
    del x
    torch.cuda.synchronize()
    cached = torch.cuda.memory_reserved()
    free_before = torch.cuda.mem_get_info()[0]
    torch.cuda.empty_cache()
    released = cached - torch.cuda.memory_reserved()
    gained = torch.cuda.mem_get_info()[0] - free_before
    expect(released >= 512 * MIB, f"empty_cache() released {released // MIB} MiB of {cached // MIB} MiB reserved")
    expect(gained >= 512 * MIB, f"the device gained only {gained // MIB} MiB of free memory")
    expect(sp.stats()["reserved_bytes.all.current"] == torch.cuda.memory_reserved(), "streampool disagrees")
    return f"released {released // MIB} MiB, device free +{gained // MIB} MiB"


def check_record_stream(torch, sp, out: Path) -> str:
    n = 64 * MIB // 4
    main = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    x = torch.full((n,), 3.0, device="cuda")
    y = torch.empty(n, device="cuda")
    x_ptr = x.data_ptr()
    side.wait_stream(main)
    with torch.cuda.stream(side):
        torch.cuda._sleep(1_000_000_000)  # the side stream is busy for a while ...
        x.mul_(2.0)                       # ... then writes x
        y.copy_(x)                        # ... and reads it
    x.record_stream(side)
    del x                                  # freed on the main stream while the side stream still needs it
    reused = []
    for _ in range(4):                     # same-size requests on the main stream, written at once
        z = torch.empty(n, device="cuda")
        z.fill_(7.0)
        reused.append((z.data_ptr(), z))
    torch.cuda.synchronize()
    expect(torch.all(y == 6.0).item(), f"y = {y[:4].tolist()}: the freed tensor was reused before the side "
                                       "stream's kernels were done")
    early = [p for p, _ in reused if p == x_ptr]
    return f"side-stream result intact (6.0); address reused while pending: {'yes (after the event)' if early else 'no'}"


def check_history(torch, sp, out: Path) -> str:
    torch.cuda.memory._record_memory_history(max_entries=100000)
    tensors = [torch.empty(s * MIB, dtype=torch.uint8, device="cuda") for s in (1, 3, 7, 30)]
    del tensors[1]
    snap = torch.cuda.memory._snapshot()
    path = out / "history.pickle"
    torch.cuda.memory._dump_snapshot(str(path))
    torch.cuda.memory._record_memory_history(enabled=None)
    trace = snap["device_traces"][torch.cuda.current_device()]
    actions = {e["action"] for e in trace}
    expect({"alloc", "free_requested"} <= actions, f"trace actions {actions}")
    segments = snap["segments"]
    expect(segments and all("blocks" in s for s in segments), "no segments/blocks in _snapshot()")
    for s in segments:
        expect(sum(b["size"] for b in s["blocks"]) == s["total_size"], f"blocks do not tile segment {s['address']:#x}")
    live = {t.data_ptr() for t in tensors}
    addresses = set()
    for s in segments:
        addr = s["address"]
        for b in s["blocks"]:
            if b["state"] == "active_allocated":
                addresses.add(addr)
            addr += b["size"]
    expect(live <= addresses, f"live tensors {sorted(live - addresses)} not among the snapshot's allocated blocks")
    for command in (["stats"], ["trace_plot", "-o", str(out / "trace_plot.html")]):
        result = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", command[0], str(path)] + command[1:],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        (out / f"memory_viz_{command[0]}.txt").write_text(result.stdout)
        expect(result.returncode == 0, f"_memory_viz {command[0]} failed: {result.stdout[-800:]}")
    del tensors
    return f"{len(trace)} trace entries ({', '.join(sorted(actions))}), {len(segments)} segments; memory_viz ok"


def _allocate_here_for_the_stack_check(torch):
    return [torch.empty(s * MIB, dtype=torch.uint8, device="cuda") for s in (1, 5)]


def _free_here_for_the_stack_check(tensors) -> None:
    del tensors[0]


def check_history_stacks(torch, sp, out: Path) -> str:
    torch.cuda.memory._record_memory_history(context="all", stacks="python", max_entries=100000)
    tensors = _allocate_here_for_the_stack_check(torch)
    _free_here_for_the_stack_check(tensors)
    snap = torch.cuda.memory._snapshot()
    path = out / "history_stacks.pickle"
    torch.cuda.memory._dump_snapshot(str(path))
    torch.cuda.memory._record_memory_history(enabled=None)

    def names(frames) -> set:
        return {f.get("name") for f in frames}

    trace = snap["device_traces"][torch.cuda.current_device()]
    allocs = [e for e in trace
              if e["action"] == "alloc" and "_allocate_here_for_the_stack_check" in names(e.get("frames", []))]
    frees = [e for e in trace
             if e["action"] == "free_requested" and "_free_here_for_the_stack_check" in names(e.get("frames", []))]
    expect(len(allocs) == 2, f"{len(allocs)} alloc entries with the allocating function in their frames, 2 expected")
    expect(len(frees) == 1, f"{len(frees)} free_requested entries with the freeing function in their frames, 1 expected")
    live = tensors[0].data_ptr()
    block_frames = None
    for seg in snap["segments"]:
        addr = seg["address"]
        for b in seg["blocks"]:
            if addr == live and b["state"] == "active_allocated":
                block_frames = b.get("frames", [])
            addr += b["size"]
    expect(block_frames is not None, "the live tensor's block is not in the snapshot")
    expect("_allocate_here_for_the_stack_check" in names(block_frames),
           "the live tensor's block has no frames of the function that allocated it")
    for command in (["trace_plot", "-o", str(out / "stacks_trace_plot.html")],
                    ["segment_plot", "-o", str(out / "stacks_segment_plot.html")]):
        result = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", command[0], str(path)] + command[1:],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        expect(result.returncode == 0, f"_memory_viz {command[0]} failed: {result.stdout[-800:]}")
    depth = max(len(e["frames"]) for e in allocs)
    del tensors
    return f"alloc, free and block frames name their Python functions ({depth} frames deep); memory_viz ok"


def check_record_stacks(torch, sp, out: Path) -> str:
    import pickle

    path = out / "record_stacks.pickle"
    with sp.record(str(path), stacks=True) as rec:
        tensors = _allocate_here_for_the_stack_check(torch)
        del tensors
    with open(path, "rb") as f:
        data = pickle.load(f)
    trace = data["device_traces"][torch.cuda.current_device()]
    named = [e for e in trace if e["action"] == "alloc"
             and any(f.get("name") == "_allocate_here_for_the_stack_check" for f in e.get("frames", []))]
    expect(rec.source == "streampool", f"record() recorded {rec.source}, not streampool's allocator")
    expect(len(named) == 2, f"{len(named)} alloc entries name the allocating function, 2 expected")
    return f"record(stacks=True): {len(trace)} events, the allocations name their Python function"


def check_profiler(torch, sp, out: Path) -> str:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], profile_memory=True) as prof:
        x = torch.empty(16 * MIB, dtype=torch.uint8, device="cuda")
        y = x.to(torch.float16)  # 32 MiB more
        del x, y
    torch.cuda.synchronize()

    def device_memory(event) -> int:
        for name in ("self_device_memory_usage", "self_cuda_memory_usage"):
            if hasattr(event, name):
                return int(getattr(event, name))
        return 0

    by_op = {e.key: device_memory(e) for e in prof.key_averages()}
    (out / "profiler_memory.txt").write_text("\n".join(f"{k}: {v}" for k, v in sorted(by_op.items())))
    expect(by_op.get("aten::empty", 0) >= 16 * MIB, f"aten::empty's device memory {by_op.get('aten::empty')}, 16 MiB expected")
    expect(any(k in by_op and by_op[k] >= 32 * MIB for k in ("aten::to", "aten::_to_copy", "aten::empty_strided")),
           f"no 32 MiB allocation reported for the conversion: {by_op}")
    frees = sum(v for v in by_op.values() if v < 0)
    expect(frees <= -48 * MIB, f"the frees were not reported (sum of negative usage {frees})")
    return f"aten::empty {by_op['aten::empty'] // MIB} MiB; frees {frees // MIB} MiB reported to the profiler"


def check_oom(torch, sp, out: Path) -> str:
    seen = []
    # An observer that reads the allocator (as memory-dump observers do): it must not deadlock.
    torch._C._cuda_attach_out_of_memory_observer(
        lambda *args: seen.append((args, len(torch.cuda.memory._snapshot()["segments"]))))
    old = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "" if old else "backend:cudaMallocAsync"  # the misconception
    total = torch.cuda.get_device_properties(0).total_memory
    try:
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            torch.empty(2 * total, dtype=torch.uint8, device="cuda")
        raise CheckFailed("an allocation of twice the device succeeded")
    except torch.cuda.OutOfMemoryError as e:
        message = str(e)
    finally:
        if old is None:
            os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        else:
            os.environ["PYTORCH_CUDA_ALLOC_CONF"] = old
    (out / "oom_message.txt").write_text(message)
    expect("CUDA out of memory. Tried to allocate" in message and "larger than" in message,
           f"not streampool's diagnosis: {message[:400]}")
    expect("PYTORCH_CUDA_ALLOC_CONF is now" in message, "the changed config variable is not named in the OOM message")
    expect(len(seen) >= 1, "the OOM observer was not called")
    torch.cuda.set_per_process_memory_fraction(0.25)
    try:
        torch.empty(int(total * 0.4), dtype=torch.uint8, device="cuda")
        raise CheckFailed("an allocation above the memory-fraction cap succeeded")
    except torch.cuda.OutOfMemoryError as e:
        capped = str(e)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    expect("cap" in capped, f"fraction OOM without the cap in its text: {capped[:300]}")
    return f"OutOfMemoryError with streampool's text ({len(message)} chars), observer called {len(seen)}x"


def check_mempool(torch, sp, out: Path) -> str:
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        x = torch.empty(16 * MIB, dtype=torch.uint8, device="cuda")
    y = torch.empty(16 * MIB, dtype=torch.uint8, device="cuda")
    owner = {}
    for seg in torch.cuda.memory._snapshot()["segments"]:
        addr = seg["address"]
        for b in seg["blocks"]:
            owner[addr] = tuple(seg["segment_pool_id"])
            addr += b["size"]
    expect(owner.get(x.data_ptr()) == tuple(pool.id), f"x is in pool {owner.get(x.data_ptr())}, not {pool.id}")
    expect(owner.get(y.data_ptr()) == (0, 0), f"y (outside use_mem_pool) is in pool {owner.get(y.data_ptr())}")
    expect(pool.use_count() >= 1, f"use_count {pool.use_count()}")
    del x, y, pool  # ~MemPool: setUseOnOOM(false), releasePool, emptyCache(pool)
    torch.cuda.synchronize()
    return "use_mem_pool allocations land in the MemPool's private pool; the pool is released cleanly"


def check_mempool_options(torch, sp, out: Path) -> str:
    def segments_of(pool_id):
        return [s for s in torch.cuda.memory._snapshot()["segments"] if tuple(s["segment_pool_id"]) == tuple(pool_id)]

    def segment_index(segments, ptr):
        for i, seg in enumerate(segments):
            if seg["address"] <= ptr < seg["address"] + seg["total_size"]:
                return i
        return None

    unsplit = torch.cuda.MemPool(no_split=True)
    with torch.cuda.use_mem_pool(unsplit):
        a = torch.empty(1000, dtype=torch.uint8, device="cuda")
        b = torch.empty(1000, dtype=torch.uint8, device="cuda")
    segments = segments_of(unsplit.id)
    ia, ib = segment_index(segments, a.data_ptr()), segment_index(segments, b.data_ptr())
    expect(ia is not None and ib is not None and ia != ib, f"no_split: a in segment {ia}, b in {ib}")
    if sp.backend_name() == "native":
        blocks = [len(seg["blocks"]) for seg in segments]
        expect(all(n == 1 for n in blocks), f"no_split: blocks per segment {blocks}")
    del a, b, unsplit

    torch.cuda.empty_cache()
    fallback = torch.cuda.MemPool(use_on_oom=True)
    with torch.cuda.use_mem_pool(fallback):
        pooled = torch.empty(64 * MIB, dtype=torch.uint8, device="cuda")
    address = pooled.data_ptr()
    del pooled  # free memory of the pool now
    torch.cuda.synchronize()
    total = torch.cuda.get_device_properties(0).total_memory
    held = torch.cuda.memory_reserved()
    torch.cuda.set_per_process_memory_fraction((held + 16 * MIB) / total)
    try:
        general = torch.empty(48 * MIB, dtype=torch.uint8, device="cuda")
        expect(general.data_ptr() == address,
               f"use_on_oom: the general tensor is at {general.data_ptr():#x}, not the pool's block {address:#x}")
        general.fill_(7)
        torch.cuda.synchronize()
        torch.cuda.set_per_process_memory_fraction(1.0)  # the check below needs memory of its own
        expect(bool((general == 7).all()), "use_on_oom: the borrowed block does not hold its data")
        del general
        del fallback  # ~MemPool: setUseOnOOM(false), releasePool, emptyCache(pool)
        torch.cuda.synchronize()
        plain = torch.cuda.MemPool()
        with torch.cuda.use_mem_pool(plain):
            pooled = torch.empty(64 * MIB, dtype=torch.uint8, device="cuda")
        del pooled
        torch.cuda.synchronize()
        torch.cuda.set_per_process_memory_fraction((torch.cuda.memory_reserved() + 16 * MIB) / total)
        try:
            refused = torch.empty(48 * MIB, dtype=torch.uint8, device="cuda")
            del refused
            raise CheckFailed("without use_on_oom the capped allocation succeeded")
        except torch.cuda.OutOfMemoryError:
            pass
        del plain
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()
    return ("no_split pool: one segment per tensor; use_on_oom pool: a capped general tensor got its free "
            "block and its data; a plain pool: OOM")


_COUNTING_ALLOCATOR_C = r"""
#include <stddef.h>
#include <cuda_runtime_api.h>
static int live, calls;
void* counting_alloc(size_t size, int device, cudaStream_t stream) {
  void* p = 0;
  (void)device; (void)stream;
  if (cudaMalloc(&p, size) != cudaSuccess) return 0;
  ++live; ++calls;
  return p;
}
void counting_free(void* ptr, size_t size, int device, cudaStream_t stream) {
  (void)size; (void)device; (void)stream;
  cudaFree(ptr);
  --live;
}
int counting_live(void) { return live; }
int counting_calls(void) { return calls; }
"""


def check_mempool_allocator(torch, sp, out: Path) -> str:
    import ctypes
    import shutil

    gcc = shutil.which("gcc") or shutil.which("cc")
    cuda = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    expect(gcc is not None and (cuda / "include" / "cuda_runtime_api.h").exists(),
           f"needs gcc and the CUDA headers (gcc {gcc}, {cuda}/include)")
    source = out / "counting_allocator.c"
    library_path = out / "libcounting_allocator.so"
    source.write_text(_COUNTING_ALLOCATOR_C)
    subprocess.run([gcc, "-shared", "-fPIC", "-O1", f"-I{cuda}/include", str(source), "-o", str(library_path),
                    f"-L{cuda}/lib64", "-lcudart"], check=True)
    counting = ctypes.CDLL(str(library_path))
    pluggable = torch.cuda.memory.CUDAPluggableAllocator(str(library_path), "counting_alloc", "counting_free")
    pool = torch.cuda.MemPool(pluggable.allocator())
    with torch.cuda.use_mem_pool(pool):
        x = torch.ones(8 * MIB, dtype=torch.uint8, device="cuda")
        y = torch.ones(1000, dtype=torch.uint8, device="cuda")
    general = torch.ones(8 * MIB, dtype=torch.uint8, device="cuda")
    expect(counting.counting_calls() == 2, f"the pool's segments: {counting.counting_calls()} calls to the "
           "MemPool's allocator, expected 2 (one large, one small segment)")
    expect(int(x.sum()) == 8 * MIB and int(y.sum()) == 1000, "the tensors in the allocator's memory lost data")
    segments = [s for s in torch.cuda.memory._snapshot()["segments"] if tuple(s["segment_pool_id"]) == tuple(pool.id)]
    expect(len(segments) == 2, f"{len(segments)} segments in the pool")
    del x, y
    torch.cuda.synchronize()
    expect(counting.counting_live() == 2, "the pool's segments went back before the pool was deleted")
    del pool  # ~MemPool: releasePool, emptyCache(pool): the segments go back to the allocator
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    expect(counting.counting_live() == 0, f"{counting.counting_live()} segments not given back to the MemPool's "
           "allocator")
    del general
    return "2 segments from the MemPool's allocator (tensors intact), both given back when the pool was deleted"


def _ipc_child(queue, result):
    import streampool

    streampool.install(route="extension")
    tensor = queue.get()
    result.put(float(tensor.sum()))
    del tensor


def check_ipc(torch, sp, out: Path) -> str:
    x = torch.full((4 * MIB,), 2.0, device="cuda")
    if sp.backend_name() != "native":
        try:
            x.untyped_storage()._share_cuda_()
        except RuntimeError as e:
            expect("not supported on the cudaMallocAsync backend" in str(e), f"unexpected error: {e}")
            return "cudaMallocAsync backend: sharing refused with the documented error"
        raise CheckFailed("sharing memory of the cudaMallocAsync backend did not raise")
    import torch.multiprocessing as mp

    context = mp.get_context("spawn")
    queue, result = context.Queue(), context.Queue()
    child = context.Process(target=_ipc_child, args=(queue, result))
    child.start()
    queue.put(x)
    total = result.get(timeout=120)
    child.join(60)
    expect(total == float(x.sum()), f"the child read sum {total}, expected {float(x.sum())}")
    return f"a spawned process with streampool opened the tensor through cudaIpc and read sum {total:.0f}"


def _ddp_worker(rank: int, world: int, port: int, result) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    import streampool

    streampool.install(route="extension")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        model = DistributedDataParallel(small_model(torch), device_ids=[rank])
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        losses = []
        for x, y in batches(torch, 10, seed=11):
            shard = slice(rank * x.shape[0] // world, (rank + 1) * x.shape[0] // world)
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(model(x[shard]), y[shard])
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
        torch.cuda.synchronize()
        result.put((rank, streampool.installed_route(), losses, torch.cuda.memory_stats()["num_alloc_retries"]))
    finally:
        dist.destroy_process_group()


def check_ddp(torch, sp, out: Path) -> str:
    import socket

    import torch.distributed as dist
    import torch.multiprocessing as mp

    expect(dist.is_available() and dist.is_nccl_available(), "torch.distributed with NCCL is not available")
    world = torch.cuda.device_count()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    context = mp.get_context("spawn")
    result = context.Queue()
    workers = [context.Process(target=_ddp_worker, args=(rank, world, port, result)) for rank in range(world)]
    for w in workers:
        w.start()
    got = {}
    deadline = time.monotonic() + 120
    try:
        while len(got) < world and time.monotonic() < deadline:
            try:
                rank, route, losses, _retries = result.get(timeout=5)
            except queue.Empty:
                if not any(w.is_alive() for w in workers):
                    break
                continue
            got[rank] = (route, losses)
    finally:
        for w in workers:
            w.join(30)
            if w.is_alive():
                w.kill()
    expect(len(got) == world and all(w.exitcode == 0 for w in workers),
           f"DDP workers: {len(got)} of {world} reported, exit codes {[w.exitcode for w in workers]}")
    expect(all(route == "extension" for route, _ in got.values()), f"routes {[r for r, _ in got.values()]}")
    # Rank 0's losses against the same steps without DDP (its shard; with the gradient averaged over
    # the ranks the models match only for one rank, so more ranks are compared loosely).
    model = small_model(torch)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    eager = []
    for x, y in batches(torch, 10, seed=11):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        eager.append(float(loss.detach()))
    ranked = got[0][1]
    if world == 1:
        diff = max(abs(a - b) for a, b in zip(ranked, eager))
        expect(diff <= 1e-6 * max(eager), f"DDP losses differ from eager by {diff:.3e}: {ranked[:3]} vs {eager[:3]}")
    expect(ranked[-1] < ranked[0], f"DDP loss did not go down: {ranked}")
    return f"{world} rank(s), NCCL, 10 steps, rank 0 loss {ranked[0]:.4f} -> {ranked[-1]:.4f}"


# --- GPT-2 -----------------------------------------------------------------------------------------

def gpt2_run(torch) -> Dict[str, object]:
    """20 training steps of a GPT-2-sized model; the same in both processes."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.manual_seed(0)
    config = GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=512, vocab_size=50257,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    config._attn_implementation = "eager"  # deterministic attention (SDPA's fused backward is not)
    model = GPT2LMHeadModel(config).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator(device="cuda").manual_seed(1)
    tokens = torch.randint(0, config.vocab_size, (20, 8, 512), device="cuda", generator=g)
    torch.cuda.reset_peak_memory_stats()
    losses, times = [], []
    for step in range(20):
        torch.cuda.synchronize()
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=tokens[step], labels=tokens[step]).loss
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        losses.append(loss.item())
    return {"losses": losses, "peak_reserved": torch.cuda.max_memory_reserved(),
            "step_ms": statistics.median(times[5:]) * 1000}


def gpt2_in_subprocess(which: str) -> Dict[str, object]:
    """gpt2_run in a fresh process (same environment, so the same backend for PyTorch's allocator):
    "pytorch" never imports streampool, "streampool" installs the extension first."""
    result = subprocess.run([sys.executable, __file__, "--gpt2-worker", which], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    if result.returncode != 0:
        raise CheckFailed(f"the {which} GPT-2 process failed: {result.stderr[-1500:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def check_gpt2(torch, sp, out: Path) -> str:
    try:
        import transformers  # noqa: F401
    except ImportError as e:
        raise CheckFailed(f"transformers is not importable here ({e}); the GPT-2 check needs it") from e
    baseline = gpt2_in_subprocess("pytorch")
    ours = gpt2_in_subprocess("streampool")
    (out / "gpt2.json").write_text(json.dumps({"streampool": ours, "pytorch": baseline}, indent=1))
    diff = max(abs(a - b) for a, b in zip(ours["losses"], baseline["losses"]))
    expect(ours["losses"] == baseline["losses"], f"losses differ from PyTorch's allocator (max |diff| {diff:.3e}): "
                                                 f"{ours['losses'][:3]} vs {baseline['losses'][:3]}")
    limit = baseline["peak_reserved"] * 1.10 + 64 * MIB
    expect(ours["peak_reserved"] <= limit, f"peak reserved {ours['peak_reserved'] // MIB} MiB vs PyTorch "
                                           f"{baseline['peak_reserved'] // MIB} MiB")
    return (f"20 identical losses ({ours['losses'][0]:.4f} -> {ours['losses'][-1]:.4f}); peak reserved "
            f"{ours['peak_reserved'] // MIB} MiB vs PyTorch {baseline['peak_reserved'] // MIB} MiB; step "
            f"{ours['step_ms']:.1f} ms vs {baseline['step_ms']:.1f} ms")


CHECKS: Dict[str, Callable] = {
    "route": check_route, "graph_step": check_graph_step, "shared_pool": check_shared_pool,
    "graphed_callables": check_graphed_callables, "compile": check_compile, "stats": check_stats,
    "empty_cache": check_empty_cache, "record_stream": check_record_stream, "history": check_history,
    "history_stacks": check_history_stacks, "record_stacks": check_record_stacks, "profiler": check_profiler,
    "mempool": check_mempool, "mempool_options": check_mempool_options,
    "mempool_allocator": check_mempool_allocator, "ipc": check_ipc, "oom": check_oom,
    "gpt2": check_gpt2, "ddp": check_ddp,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None, help="folder for the artefacts (default: a temporary one)")
    parser.add_argument("--only", default="", help="comma-separated subset of: " + ", ".join(CHECKS))
    parser.add_argument("--gpt2-worker", choices=("pytorch", "streampool"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("SKIP: torch is not importable")
        return 3
    if args.gpt2_worker:
        if args.gpt2_worker == "streampool":
            import streampool

            streampool.install(route="extension")
        print(json.dumps(gpt2_run(torch)))
        return 0
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device")
        return 3
    import streampool as sp

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            sp.install(route="extension")
        except Exception as e:  # noqa: BLE001
            print(f"FAIL install: {type(e).__name__}: {e}")
            print("SUMMARY: 0 passed, 1 failed (the extension route could not be installed)")
            return 1
    for w in caught:
        print(f"note: install warned: {w.message}")
    out = Path(args.out or tempfile.mkdtemp(prefix="sp-torch-ext-"))
    out.mkdir(parents=True, exist_ok=True)
    wanted = [c for c in args.only.split(",") if c] or list(CHECKS)
    unknown = [c for c in wanted if c not in CHECKS]
    if unknown:
        parser.error(f"unknown checks {unknown}")
    print(f"streampool {sp.__version__}, torch {torch.__version__}, backend "
          f"{os.environ.get('PYTORCH_CUDA_ALLOC_CONF') or '(default)'} -> {sp.backend_name()}, artefacts in {out}",
          flush=True)
    failed = 0
    for name in wanted:
        start = time.perf_counter()
        try:
            detail = CHECKS[name](torch, sp, out)
            print(f"PASS {name}: {detail} [{time.perf_counter() - start:.1f}s]", flush=True)
        except Exception as e:  # noqa: BLE001 — every check reports, the run goes on
            failed += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
            if not isinstance(e, CheckFailed):
                traceback.print_exc(file=sys.stdout)
        torch.cuda.synchronize()
    print(f"SUMMARY backend={sp.backend_name()}: {len(wanted) - failed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
