"""streampool — a CUDA device-memory allocator (PyTorch's caching allocator, faster, plus a
cudaMallocAsync backend) for PyTorch and any ctypes user, over libstreampool.so's C API.

    import streampool
    streampool.install()                 # first, before any CUDA tensor: streampool becomes torch's allocator
                                         # (the C++ extension route when built for this torch, else the
                                         # CUDAPluggableAllocator route, with a FallbackWarning)
    with streampool.record("run.pickle"):
        model = build_model().cuda()     # start recording before the model is built
        train(model)
    print(streampool.memory_summary())
    # then: streampool-bench tune --trace run.pickle

CuPy and Numba share the same allocator: streampool.cupy.install() and streampool.numba.install()
(after install() when PyTorch is in the process; docs/integrations/cupy.md and numba.md), each
allocation tagged with its library (streampool.interop.usage(), snapshot()'s "origin").

Without install(), record() records PyTorch's own allocator, and mempool() gives a
torch.cuda.MemPool backed by streampool. dump_snapshot() writes a pickle that PyTorch's
memory_viz opens. Configuration: STREAMPOOL_ALLOC_CONF (else PYTORCH_CUDA_ALLOC_CONF, else
PYTORCH_ALLOC_CONF), or init(config=...) / install(config=...). See docs/integrations/pytorch.md.
"""

from ._core import (DEFAULT_MAX_ENTRIES, backend_name, device_count, empty_cache, init, record_history,
                    reset_accumulated_stats, reset_peak_stats, set_memory_fraction, shutdown, stats, trace_csv)
from ._host import host_alloc, host_empty_cache, host_free, host_init, host_record_stream, host_stats
from ._library import StreampoolError, find_library, library
from ._record import Recording, record
from ._settings import allocator_settings, set_allocator_settings
from ._sleep import region, region_pool, sleep, sleep_state, wake
from ._snapshot import dump_snapshot, snapshot
from ._summary import memory_summary
from ._env_watch import ConfigVariableChanged
from ._torch import FallbackWarning, install, installed_route, is_installed, mempool, pluggable_allocator, record_stream
from ._version_gate import SUPPORTED as SUPPORTED_TORCH

try:  # written into the wheel by the build backend, from the CMake project's version
    from ._version import version as __version__
except ImportError:  # running from a checkout
    __version__ = "0+checkout"

__all__ = [
    "host_init",
    "host_alloc",
    "host_free",
    "host_record_stream",
    "host_empty_cache",
    "host_stats",
    "StreampoolError",
    "find_library",
    "library",
    "init",
    "shutdown",
    "install",
    "is_installed",
    "installed_route",
    "FallbackWarning",
    "ConfigVariableChanged",
    "SUPPORTED_TORCH",
    "pluggable_allocator",
    "mempool",
    "record_stream",
    "stats",
    "reset_peak_stats",
    "reset_accumulated_stats",
    "memory_summary",
    "snapshot",
    "dump_snapshot",
    "empty_cache",
    "set_memory_fraction",
    "set_allocator_settings",
    "sleep",
    "wake",
    "sleep_state",
    "region",
    "region_pool",
    "allocator_settings",
    "backend_name",
    "device_count",
    "record",
    "Recording",
    "record_history",
    "trace_csv",
    "DEFAULT_MAX_ENTRIES",
]
