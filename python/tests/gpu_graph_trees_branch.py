#!/usr/bin/env python3
"""GPU check: torch.compile(mode="reduce-overhead") whose CUDA graph trees branch off a replayed
graph (f then g recorded and replayed, then f then h: h's recording starts from f's replay), with
streampool's extension allocator. The trees then restore the checkpoint of their private pool
(setCheckpointPoolState, Note [Checkpoint of a pool] in python/csrc/torch_allocator_pools.cpp).
Prints the checkpoint calls counted and whether the results equal eager ones.

  python3 python/tests/gpu_graph_trees_branch.py

Needs the package installed with the extension and a GPU; exit 0 when it passed, 1 when it
failed, 3 when torch or a GPU is missing (a skip)."""
from gpu_checks import torch_with_gpu  # beside this script

torch = torch_with_gpu()
import streampool  # noqa: E402
streampool.install(route="extension")
calls = {"set": 0, "get": 0}
real_set, real_get = torch._C._cuda_setCheckpointPoolState, torch._C._cuda_getCheckpointState
def counting_set(*a, **k):
    calls["set"] += 1
    return real_set(*a, **k)
def counting_get(*a, **k):
    calls["get"] += 1
    return real_get(*a, **k)
torch._C._cuda_setCheckpointPoolState = counting_set
torch._C._cuda_getCheckpointState = counting_get

@torch.compile(mode="reduce-overhead")
def f(x):
    return (x * 2).relu() + 1

@torch.compile(mode="reduce-overhead")
def g(y):
    return y.sin() * 3

@torch.compile(mode="reduce-overhead")
def h(y):
    return y.cos() - 1

x = torch.randn(1 << 20, device="cuda")
for _ in range(5):
    torch.compiler.cudagraph_mark_step_begin()
    b = g(f(x)).clone()
for _ in range(5):
    torch.compiler.cudagraph_mark_step_begin()
    c = h(f(x)).clone()
for _ in range(3):
    torch.compiler.cudagraph_mark_step_begin()
    b2 = g(f(x)).clone()
torch.cuda.synchronize()
ref_g = torch.sin((x * 2).relu() + 1) * 3
ref_h = torch.cos((x * 2).relu() + 1) - 1
ok = torch.allclose(b, ref_g) and torch.allclose(c, ref_h) and torch.allclose(b2, ref_g)
passed = ok and calls["set"] > 0
print("checkpoint calls", calls, "results match eager:", ok, "->", "PASS" if passed else "FAIL")
raise SystemExit(0 if passed else 1)
