"""Thin Python calls over the C API of libstreampool.so: initialisation (on the GPU or on the
simulated device), statistics, the cache, the memory fraction and the allocation trace. Each
raises StreampoolError with the library's own message when the C call fails. Every function takes
an optional `path` of the library (see _library.find_library).

Note [Two allocators, one answer]
When install() chose the extension route, PyTorch's allocator is the extension's own
streampool::allocator, not the C API's; these functions then ask the extension (`_ext`), so
stats(), snapshot(), empty_cache(), the trace ... describe the allocator that serves torch.
`path` is not used then."""

from __future__ import annotations

import ctypes
import json
from typing import Dict, Optional

from . import _env_watch
from ._extension import active as _extension
from ._library import StreampoolError, check, library, text_call

def _ext_call(what: str, function, *args):
    """Calls the extension's `function`; its errors become StreampoolError."""
    try:
        return function(*args)
    except (RuntimeError, ValueError) as e:
        raise StreampoolError(f"{what} failed: {e}") from e


#: Trace entries kept per device by record_history() unless told otherwise (the C++ default).
DEFAULT_MAX_ENTRIES = 1 << 20

#: The largest sim_capacity streampool_init_sim can take (a size_t).
_MAX_SIM_CAPACITY = (1 << 64) - 1


def _config_bytes(what: str, config: Optional[str]) -> Optional[bytes]:
    """The config string for the C API, which reads it up to its first NUL byte: a NUL inside would
    silently drop everything after it (issue 31), so it is refused here, naming where it is."""
    if config is None:
        return None
    if not isinstance(config, str):
        raise TypeError(f"{what}: config must be a str or None, not {type(config).__name__}")
    at = config.find("\0")
    if at >= 0:
        raise ValueError(f"{what}: the config string has a NUL byte at position {at}; the C library would read "
                         f"only {config[:at]!r} and silently ignore the rest. Remove the NUL byte")
    return config.encode()


def _sim_arguments(sim_capacity, sim_devices) -> tuple:
    """sim_capacity checked (a negative one used to wrap to a 16 EiB device), sim_devices as an int."""
    capacity = int(sim_capacity)
    if not 0 <= capacity <= _MAX_SIM_CAPACITY:
        raise ValueError(f"streampool.init: sim_capacity {sim_capacity} is out of range; pass the bytes of each "
                         f"simulated device, below 2**64, or 0 for the default (80 GiB)")
    return capacity, int(sim_devices)  # the library checks the device count (1..64) and says so


def init(config: Optional[str] = None, driver: str = "cuda", sim_capacity: int = 0, sim_devices: int = 1,
         path: Optional[str] = None) -> None:
    """Creates the allocator now instead of at the first use.

    `config` is a config string (None = the environment: STREAMPOOL_ALLOC_CONF, else
    PYTORCH_CUDA_ALLOC_CONF, else PYTORCH_ALLOC_CONF). `driver` "cuda" uses the GPU; "sim" uses
    streampool's simulated device (`sim_devices` devices of `sim_capacity` bytes, 0 = 80 GiB): no
    GPU needed, for tests and for trying a config; its pointers are not memory. Raises
    StreampoolError if the allocator already exists, the config does not parse or (driver "cuda")
    no GPU is usable; ValueError for a config with a NUL byte or a sim_capacity outside
    [0, 2**64)."""
    if _extension() is not None:
        raise StreampoolError("streampool.init: the allocator was created by install() (the extension route) and "
                              "is PyTorch's allocator; it cannot be re-created in this process")
    if driver not in ("cuda", "sim"):
        raise ValueError(f"streampool.init: driver must be 'cuda' or 'sim', not {driver!r}")
    encoded = _config_bytes("streampool.init", config)
    if driver == "sim":
        capacity, devices = _sim_arguments(sim_capacity, sim_devices)
    lib = library(path)
    if driver == "cuda":
        check(lib, lib.streampool_init(encoded), "streampool_init")
    else:
        check(lib, lib.streampool_init_sim(encoded, capacity, devices), "streampool_init_sim")
    _env_watch.start(config)  # Note [Config variables watch]


def shutdown(path: Optional[str] = None) -> None:
    """Frees every cached block and destroys the allocator. Nothing creates a new one by itself
    afterwards: the other functions raise StreampoolError (status 7, not initialised) until init()
    is called again. Raises StreampoolError while allocations are live, and with the extension route
    installed (PyTorch's allocator cannot be destroyed while PyTorch runs)."""
    if _extension() is not None:
        raise StreampoolError("streampool.shutdown: streampool is PyTorch's allocator (extension route); it lives "
                              "as long as the process")
    lib = library(path)
    check(lib, lib.streampool_shutdown(), "streampool_shutdown")


def stats(device: int = -1, path: Optional[str] = None) -> Dict[str, int]:
    """streampool's statistics of `device` (-1 = current) with PyTorch's key names, e.g.
    stats()["reserved_bytes.all.peak"] (the keys of torch.cuda.memory_stats()). Warns when a config
    variable changed since the allocator read it (Note [Config variables watch])."""
    _env_watch.check()
    ext = _extension()
    if ext is not None:
        return json.loads(_ext_call("streampool.stats", ext.stats_json, int(device)))
    lib = library(path)
    return json.loads(text_call(lib, lib.streampool_stats_json, "streampool_stats_json", int(device)))


def reset_peak_stats(device: int = -1, path: Optional[str] = None) -> None:
    """Peaks ("*.peak") of `device` become the current values (torch.cuda.reset_peak_memory_stats)."""
    ext = _extension()
    if ext is not None:
        return _ext_call("streampool.reset_peak_stats", ext.reset_peak_stats, int(device))
    lib = library(path)
    check(lib, lib.streampool_reset_peak_stats(int(device)), "streampool_reset_peak_stats")


def reset_accumulated_stats(device: int = -1, path: Optional[str] = None) -> None:
    """Cumulative counters ("*.allocated", "*.freed", num_alloc_retries, num_ooms, ...) of `device`
    go back to 0 (torch.cuda.reset_accumulated_memory_stats)."""
    ext = _extension()
    if ext is not None:
        return _ext_call("streampool.reset_accumulated_stats", ext.reset_accumulated_stats, int(device))
    lib = library(path)
    check(lib, lib.streampool_reset_accumulated_stats(int(device)), "streampool_reset_accumulated_stats")


def empty_cache(path: Optional[str] = None) -> None:
    """Returns streampool's cached, unused memory to the driver (torch.cuda.empty_cache() does the
    same on the extension route; it does not reach a pluggable allocator)."""
    ext = _extension()
    if ext is not None:
        return _ext_call("streampool.empty_cache", ext.empty_cache)
    lib = library(path)
    check(lib, lib.streampool_empty_cache(), "streampool_empty_cache")


def set_memory_fraction(fraction: float, device: int = -1, path: Optional[str] = None) -> None:
    """Caps streampool's memory on `device` at fraction x total (0 <= fraction <= 1)."""
    ext = _extension()
    if ext is not None:
        return _ext_call("streampool.set_memory_fraction", ext.set_memory_fraction, float(fraction), int(device))
    lib = library(path)
    check(lib, lib.streampool_set_memory_fraction(float(fraction), int(device)), "streampool_set_memory_fraction")


def backend_name(path: Optional[str] = None) -> str:
    """"native" or "cudaMallocAsync" (creates the allocator from the environment if needed)."""
    ext = _extension()
    if ext is not None:
        return ext.backend_name()
    lib = library(path)
    return text_call(lib, lib.streampool_backend_name, "streampool_backend_name")


def device_count(path: Optional[str] = None) -> int:
    """Number of devices the allocator sees."""
    ext = _extension()
    if ext is not None:
        return int(ext.device_count())
    lib = library(path)
    count = ctypes.c_int(0)
    check(lib, lib.streampool_device_count(ctypes.byref(count)), "streampool_device_count")
    return count.value


def record_history(enabled: bool, max_entries: int = DEFAULT_MAX_ENTRIES, path: Optional[str] = None) -> None:
    """Starts (keeping the last `max_entries` events per device) or stops streampool's allocation
    trace. Both discard what was recorded: read it first with snapshot() or trace_csv()."""
    ext = _extension()
    if ext is not None:
        return _ext_call("streampool.record_history", ext.record_history, bool(enabled), int(max_entries))
    lib = library(path)
    check(lib, lib.streampool_record_history(1 if enabled else 0, int(max_entries)), "streampool_record_history")


def trace_csv(device: int = -1, path: Optional[str] = None) -> str:
    """The recorded trace of `device` as CSV "action,addr,size,stream,time_us", the format
    `streampool-bench replay --trace` and `tune --trace` read."""
    ext = _extension()
    if ext is not None:
        return _ext_call("streampool.trace_csv", ext.trace_csv, int(device))
    lib = library(path)
    return text_call(lib, lib.streampool_trace_csv, "streampool_trace_csv", int(device))
