"""python/tests/gpu_process_memory.py — issue 29: C and C++ code share PyTorch's streampool
allocator. With streampool installed through the extension route, the C API of libstreampool.so is
served by the extension's allocator (Note [C API delegate]): streampool_alloc's memory shows in
torch.cuda.memory_stats, and a C++ library built on streampool/process_allocator.hpp (cuda::mr and
CUB temporary storage: examples/process_memory/process_sum.cu) allocates from it too. Usage:
    python3 python/tests/gpu_process_memory.py LIBPROCESS_SUM_SO
Prints one line per check and exits 1 if any failed. Needs a GPU and torch."""

from __future__ import annotations

import ctypes
import sys

import streampool
from gpu_checks import run_check
from streampool._library import library

failures = []


def check(name, fn):
    run_check(failures, name, fn)


def main() -> int:
    streampool.install(route="extension")
    import torch
    torch.ones(1, device="cuda")  # CUDA and the allocator start
    lib = library()

    def delegated():
        name = lib.streampool_delegate_name()
        assert name is not None and b"PyTorch extension" in name, name
        assert lib.streampool_backend_name() == b"native", lib.streampool_backend_name()

    def c_api_memory_is_torchs():
        stream = torch.cuda.current_stream().cuda_stream
        before = torch.cuda.memory_stats()["allocated_bytes.all.current"]
        ptr = lib.streampool_alloc(3 << 20, 0, ctypes.c_void_p(stream))
        assert ptr, lib.streampool_last_error()
        during = torch.cuda.memory_stats()["allocated_bytes.all.current"]
        assert during - before == 3 << 20, (before, during)
        lib.streampool_free(ctypes.c_void_p(ptr), 3 << 20, 0, ctypes.c_void_p(stream))
        assert lib.streampool_last_status() == 0, lib.streampool_last_error()
        after = torch.cuda.memory_stats()["allocated_bytes.all.current"]
        assert after == before, (before, after)
        assert lib.streampool_free_unsized(ctypes.c_void_p(ptr)) == 1, "a double free is refused"

    def tensor_pointer_is_not_freed_by_c():
        t = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
        assert lib.streampool_free_unsized(ctypes.c_void_p(t.data_ptr())) == 1
        assert b"was not allocated by streampool_alloc" in lib.streampool_last_error()
        t.fill_(3)
        torch.cuda.synchronize()
        assert int(t.sum()) == 3 << 20

    def cpp_library_allocates_from_torchs_allocator():
        proc = ctypes.CDLL(sys.argv[1])
        proc.process_sum.argtypes = [ctypes.c_int, ctypes.c_float, ctypes.c_void_p, ctypes.POINTER(ctypes.c_double)]
        proc.process_sum_error.restype = ctypes.c_char_p
        stats = torch.cuda.memory_stats()
        count_before = stats["allocation.all.allocated"]
        total = ctypes.c_double(0)
        n = 1 << 22
        rc = proc.process_sum(n, 0.5, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream), ctypes.byref(total))
        assert rc == 0, proc.process_sum_error()
        assert total.value == n * 0.5, total.value
        stats = torch.cuda.memory_stats()
        made = stats["allocation.all.allocated"] - count_before
        assert made >= 3, f"input, output and CUB's temporary storage: {made} allocations seen by torch"
        assert stats["allocated_bytes.all.current"] == torch.cuda.memory_allocated()
        print(f"     C++ made {made} allocations in torch's allocator; sum {total.value}")

    def empty_cache_through_c_reaches_torch():
        torch.cuda.empty_cache()
        x = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
        del x
        assert torch.cuda.memory_reserved() >= 64 << 20
        assert lib.streampool_empty_cache() == 0, lib.streampool_last_error()
        assert torch.cuda.memory_reserved() < 64 << 20, torch.cuda.memory_reserved()

    check("the C API is delegated to the extension", delegated)
    check("streampool_alloc's memory is in torch.cuda.memory_stats", c_api_memory_is_torchs)
    check("a tensor's pointer cannot be freed through the C API", tensor_pointer_is_not_freed_by_c)
    check("a C++ library (cuda::mr, CUB) allocates from torch's allocator", cpp_library_allocates_from_torchs_allocator)
    check("streampool_empty_cache empties torch's cache", empty_cache_through_c_reaches_torch)
    print("FAILED: " + ", ".join(failures) if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
