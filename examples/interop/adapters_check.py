#!/usr/bin/env python3
"""examples/interop/adapters_check.py — the real CuPy and Numba adapters on a GPU, one fresh
process per case (CUDA state and allocator choices are per process):

    python3 examples/interop/adapters_check.py              # every case, each in its own process
    python3 examples/interop/adapters_check.py --case NAME  # one case in this process

Cases: cupy (allocation on CuPy's current stream, stream-ordered reuse, using_allocator, the
snapshot's origin), numba (arrays and a kernel, views, defer_cleanup, get_memory_info, an IPC
handle opened in a child process), numba_ipc_expandable (the IPC refusal with
expandable segments), shared (streampool.install() + both adapters: one allocator,
one budget: torch's memory fraction stops CuPy), and the bad uses: cupy_after_own_pool,
numba_after_own_context, install_after_cupy (each must raise StreampoolError, not crash).
Prints one PASS/FAIL line per case; exit status 1 if any failed.
"""

from __future__ import annotations

import argparse
import gc
import subprocess
import sys
import time


import numpy_compat  # noqa: E402,F401 - before numba.cuda compiles (see its docstring)


MIB = 1 << 20


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def expect_error(call, *fragments):
    import streampool

    try:
        call()
    except streampool.StreampoolError as e:
        for fragment in fragments:
            check(fragment in str(e), f"message lacks {fragment!r}: {e}")
        return str(e)
    raise AssertionError(f"no StreampoolError from {call}")


def case_cupy():
    import cupy
    import streampool
    import streampool.cupy
    import streampool.interop as interop

    pool = streampool.cupy.install()
    a = cupy.arange(1 << 20, dtype=cupy.int64)
    check(interop.allocation(a.data.ptr).origin == "cupy", "a CuPy array is not streampool's")
    check(int(a.sum()) == (1 << 20) * ((1 << 20) - 1) // 2, "wrong sum")
    check(pool.used_bytes() >= 8 * MIB, f"used_bytes {pool.used_bytes()}")
    blocks = [b for s in streampool.snapshot()["segments"] for b in s["blocks"] if b.get("origin") == "cupy"]
    check(any(b["address"] == a.data.ptr for b in blocks), "the snapshot does not mark the CuPy block")
    del a
    side = cupy.cuda.Stream(non_blocking=True)
    with side:
        b = cupy.empty(8 * MIB, dtype=cupy.uint8)
        check(interop.allocation(b.data.ptr).stream == side.ptr, "not on CuPy's current stream")
        address = b.data.ptr
        b.fill(1)
        del b  # stream-ordered: reusable by `side` at once
        c = cupy.empty(8 * MIB, dtype=cupy.uint8)
        check(c.data.ptr == address, "the block freed on its stream was not reused there")
        del c
    d = cupy.empty(8 * MIB, dtype=cupy.uint8)  # the legacy stream: not the side stream's block
    check(d.data.ptr != address, "a block of another stream was handed out before its work was known done")
    del d
    side.synchronize()
    streampool.cupy.uninstall()
    with cupy.cuda.using_allocator(streampool.cupy.malloc):
        e = cupy.ones(1000)
        check(interop.allocation(e.data.ptr) is not None, "using_allocator did not use streampool")
    f = cupy.ones(1000)
    check(interop.allocation(f.data.ptr) is None, "after uninstall CuPy still used streampool")
    del e, f
    gc.collect()
    check(all(a.origin != "cupy" for a in interop.allocations()), "CuPy memory left allocated")
    pool.free_all_blocks()


def case_numba():
    import numpy as np
    import streampool
    import streampool.interop as interop
    import streampool.numba
    from numba import cuda

    streampool.numba.install()

    @cuda.jit
    def double(x):
        i = cuda.grid(1)
        if i < x.size:
            x[i] *= 2

    host = np.arange(1 << 20, dtype=np.float32)
    arr = cuda.to_device(host)
    ptr = arr.device_ctypes_pointer.value
    check(interop.allocation(ptr).origin == "numba", "a Numba array is not streampool's")
    double[(host.size + 255) // 256, 256](arr)
    check(np.array_equal(arr.copy_to_host(), host * 2), "wrong kernel result")
    view = arr[1000:]
    del arr
    gc.collect()
    check(interop.allocation(ptr) is not None, "a live view lost its memory")
    check(np.array_equal(view.copy_to_host(), host[1000:] * 2), "the view's data changed")
    with cuda.defer_cleanup():
        del view
        gc.collect()
        check(interop.allocation(ptr) is not None, "freed inside defer_cleanup")
    check(interop.allocation(ptr) is None, "not freed after defer_cleanup")
    info = cuda.current_context().get_memory_info()
    check(0 < info.free <= info.total, f"memory info {info}")
    shared = cuda.to_device(host)
    handle = shared.get_ipc_handle()
    import multiprocessing
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as workers:
        total = workers.apply(_ipc_child_sum, (handle,))
    check(total == float(host.sum()), f"the IPC child read {total}, expected {host.sum()}")
    del shared, handle


def _ipc_child_sum(handle):
    with handle as array:
        return float(array.copy_to_host().sum())


def case_shared():
    import torch
    import cupy
    import streampool
    import streampool.cupy
    import streampool.interop as interop
    import streampool.numba
    from numba import cuda

    streampool.install(route="extension")
    streampool.cupy.install()
    streampool.numba.install()
    t = torch.empty(16 * MIB, dtype=torch.uint8, device="cuda")
    c = cupy.empty(8 * MIB, dtype=cupy.uint8)
    n = cuda.device_array(4 * MIB, dtype="uint8")
    usage = interop.usage(0)[0]
    check(usage["cupy"]["bytes"] == 8 * MIB and usage["numba"]["bytes"] == 4 * MIB, f"usage {usage}")
    check(usage["other"]["bytes"] >= 16 * MIB, f"torch's bytes not seen: {usage}")
    check(torch.cuda.memory_allocated() >= 28 * MIB, "torch's statistics do not count CuPy and Numba")
    t2 = torch.from_dlpack(c)  # DLPack keeps CuPy's memory alive
    ptr = c.data.ptr
    del c
    gc.collect()
    check(interop.allocation(ptr) is not None and t2.data_ptr() == ptr, "DLPack lost the memory")
    del t2, t, n
    gc.collect()
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(float(64 * MIB) / total)
    try:
        cupy.empty(128 * MIB, dtype=cupy.uint8)
        raise AssertionError("CuPy went past torch's memory fraction")
    except cupy.cuda.memory.OutOfMemoryError as e:
        check("streampool: out of memory" in str(e), f"CuPy's OOM lacks streampool's message: {e}")
    torch.cuda.set_per_process_memory_fraction(1.0)


def case_numba_ipc_expandable():
    import os

    os.environ["STREAMPOOL_ALLOC_CONF"] = "expandable_segments:True"  # read at the allocator's creation, below
    import numpy as np
    import streampool
    import streampool.numba
    from numba import cuda

    streampool.numba.install()
    arr = cuda.to_device(np.ones(1 << 20, dtype=np.float32))
    lines = [line.split() for line in streampool.allocator_settings().splitlines()]
    check(["expandable_segments", "True"] in [words[:2] for words in lines], "expandable segments not on")
    expect_error(arr.get_ipc_handle, "CUDA cannot export this memory", "expandable_segments")


def case_cupy_after_own_pool():
    import cupy
    import streampool
    import streampool.cupy
    import streampool.interop as interop

    a = cupy.zeros(1000)  # from CuPy's own pool
    expect_error(streampool.cupy.install, "already holds", "before the first CuPy allocation")
    expect_error(lambda: interop.free(a.data.ptr), "not a live allocation of streampool.interop")
    float(a.sum())  # still CuPy's, still valid


def case_numba_after_own_context():
    import numpy as np
    import streampool
    import streampool.numba
    from numba import cuda

    arr = cuda.to_device(np.ones(10))  # Numba's context, with its own manager
    expect_error(streampool.numba.install, "already created its CUDA context", "NUMBA_CUDA_MEMORY_MANAGER")
    check(arr.copy_to_host().sum() == 10, "Numba's own array broke")


def case_install_after_cupy():
    import torch  # noqa: F401  (installed afterwards)
    import cupy
    import streampool
    import streampool.cupy

    streampool.cupy.install()
    a = cupy.zeros(1000)  # on the C API's allocator
    expect_error(lambda: streampool.install(route="extension"), "are live on the C API's allocator")
    del a


CASES = {name[len("case_"):]: f for name, f in globals().items() if name.startswith("case_")}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--case", choices=sorted(CASES))
    p.add_argument("--timeout", type=float, default=120)
    args = p.parse_args(argv)
    if args.case:
        CASES[args.case]()
        print(f"PASS {args.case}")
        return 0
    failed = 0
    for name in CASES:
        start = time.time()
        try:
            r = subprocess.run([sys.executable, __file__, "--case", name], capture_output=True, text=True,
                               timeout=args.timeout)
            ok, tail = r.returncode == 0, (r.stdout + r.stderr).strip().splitlines()[-12:]
        except subprocess.TimeoutExpired:
            ok, tail = False, [f"timed out after {args.timeout} s"]
        failed += not ok
        print(f"{'PASS' if ok else 'FAIL'} {name} ({time.time() - start:.1f} s)")
        if not ok:
            print("    " + "\n    ".join(tail))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
