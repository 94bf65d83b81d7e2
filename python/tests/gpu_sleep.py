"""python/tests/gpu_sleep.py — sleep and wake through PyTorch on a GPU (docs/sleep-wake.md), with
streampool installed as torch's allocator: a region's tensors keep their bytes and addresses, its
memory is free on the device while asleep (torch.cuda.mem_get_info), allocating in it raises; a
CUDA graph captured into a region's pool replays with the same result after waking; a discarded
region is usable again; torch.compile'd code runs on woken memory; the cudaMallocAsync backend
refuses (run with STREAMPOOL_ALLOC_CONF=backend:cudaMallocAsync to see it). Prints one line per
check and exits 1 if any failed. Not part of the CPU test run (needs a GPU)."""

from __future__ import annotations

import os
import sys

import streampool
from gpu_checks import run_check

failures = []


def check(name, fn):
    run_check(failures, name, fn)


def main() -> int:
    streampool.install()
    import torch
    async_backend = "cudaMallocAsync" in (os.environ.get("STREAMPOOL_ALLOC_CONF") or "")

    if async_backend:
        def refuses():
            with torch.cuda.device(0):
                try:
                    with streampool.region("w"):
                        torch.ones(1024, device="cuda")
                except streampool.StreampoolError as e:
                    assert "cudaMallocAsync" in str(e), e
                    return
            raise AssertionError("the async backend made a sleepable region")
        check("cudaMallocAsync refuses, saying why", refuses)
        return 1 if failures else 0

    def region_keeps_bytes():
        with streampool.region("weights"):
            x = torch.randn(64 * 2**20, device="cuda")  # 256 MiB
        ptr, before = x.data_ptr(), x.double().sum().item()
        free0, _ = torch.cuda.mem_get_info()
        reserved0 = torch.cuda.memory_reserved()
        streampool.sleep("weights")
        free1, _ = torch.cuda.mem_get_info()
        state = streampool.sleep_state("weights")
        assert state["asleep"] and state["offloaded_bytes"] >= 256 * 2**20, state
        gained = free1 - free0
        assert gained >= 0.99 * state["released_bytes"], (gained, state)
        assert torch.cuda.memory_reserved() == reserved0 - state["released_bytes"]
        try:
            with streampool.region("weights"):
                torch.empty(1024, device="cuda")
            raise AssertionError("allocated in a sleeping region")
        except RuntimeError as e:
            assert "asleep" in str(e), e
        streampool.wake("weights")
        assert x.data_ptr() == ptr and x.double().sum().item() == before
        print(f"     256 MiB region: device had {gained / 2**20:.0f} MiB back while asleep "
              f"({gained / max(1, state['released_bytes']):.4f} of what it released)")
    check("a region's tensors keep their bytes at their addresses; its memory is free while asleep",
          region_keeps_bytes)

    def graph_replays_after_wake():
        with streampool.region("graph"):
            static_in = torch.randn(4096, 4096, device="cuda")
            w = torch.randn(4096, 4096, device="cuda")
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                (static_in @ w).relu_()
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g, pool=streampool.region_pool("graph").id):
            static_out = (static_in @ w).relu_() + 1
        g.replay()
        expected = static_out.clone()
        streampool.sleep("graph")
        streampool.wake("graph")
        static_out.zero_()
        g.replay()
        assert torch.equal(static_out, expected), "graph replay after wake differs"
        streampool.sleep("graph", mode="discard")
        streampool.wake("graph")
        static_in.copy_(torch.ones_like(static_in))
        w.copy_(torch.eye(4096, device="cuda"))
        g.replay()
        assert torch.equal(static_out, torch.full_like(static_out, 2.0)), "replay on refilled inputs after discard"
    check("a CUDA graph captured into a region replays after wake (offload and discard)", graph_replays_after_wake)

    def compiled_code_on_woken_memory():
        with streampool.region("compiled"):
            a = torch.randn(1 << 20, device="cuda")
        f = torch.compile(lambda t: (t * 2).sin().sum())
        before = f(a).item()
        streampool.sleep("compiled")
        streampool.wake("compiled")
        assert f(a).item() == before
    check("torch.compile'd code reads woken memory", compiled_code_on_woken_memory)

    def mempool_of_torch():
        pool = torch.cuda.MemPool()
        with torch.cuda.use_mem_pool(pool):
            t = torch.ones(1 << 20, device="cuda")
        try:
            streampool.sleep(pool)
            raise AssertionError("a MemPool with cudaMalloc segments slept")
        except streampool.StreampoolError as e:
            assert "sleepable" in str(e), e
        del t
    check("a plain torch.cuda.MemPool refuses, naming sleepable", mempool_of_torch)

    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
