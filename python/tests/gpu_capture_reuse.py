#!/usr/bin/env python3
"""GPU check: graph_capture_record_stream_reuse:True through PyTorch's own capture path, with
streampool's extension allocator (docs/graph-capture.md). Inside torch.cuda.graph, a tensor filled
on the capture stream, copied on a side stream (Tensor.record_stream) and freed is not reused by an
allocation before the side stream is joined back, and is reused after; three replays keep the
side stream's copy of the old data intact and the new owner's data in place.

  python3 python/tests/gpu_capture_reuse.py

Needs the package installed with the extension (pip install --no-build-isolation ./python with
torch 2.11) and a GPU. Prints one line; exit 0 when it passed, 1 when it failed, 3 when torch or a
GPU is missing (a skip)."""
import os
os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "graph_capture_record_stream_reuse:True"
from gpu_checks import torch_with_gpu  # beside this script

torch = torch_with_gpu()
import streampool  # noqa: E402
streampool.install(route="extension")
N = 8 << 20
side = torch.cuda.Stream()
g = torch.cuda.CUDAGraph()
torch.cuda.synchronize()
with torch.cuda.graph(g):
    x = torch.empty(N, dtype=torch.uint8, device="cuda")
    x.fill_(7)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = x.clone()
    x.record_stream(side)
    px = x.data_ptr()
    del x
    y = torch.empty(N, dtype=torch.uint8, device="cuda")
    torch.cuda.current_stream().wait_stream(side)
    z = torch.empty(N, dtype=torch.uint8, device="cuda")
    z.fill_(9)
for _ in range(3):
    g.replay()
torch.cuda.synchronize()
ok = y.data_ptr() != px and z.data_ptr() == px and bool(out.eq(7).all()) and bool(z.eq(9).all())
print("freed", hex(px), "before join", hex(y.data_ptr()), "after join", hex(z.data_ptr()),
      "side copy intact", bool(out.eq(7).all()), "->", "PASS" if ok else "FAIL")
raise SystemExit(0 if ok else 1)
