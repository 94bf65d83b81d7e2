"""Shared set-up of the package's CI tests: a fresh streampool allocator on the simulated device for
each test (no GPU, no torch), and raw alloc/free through the C API. The library is the package's
own copy when installed, else $STREAMPOOL_LIB, else the checkout's build folder (the runner sets
one: tests/CMakeLists.txt, scripts/test); not finding it is a failure, not a skip."""

from __future__ import annotations

import unittest
from typing import List, Tuple

import streampool


def fresh_sim(config: str = "backend:native", devices: int = 2, capacity: int = 0) -> None:
    """Destroys the process's allocator (every allocation must be freed) and makes a sim one."""
    streampool.shutdown()
    streampool.init(config, driver="sim", sim_devices=devices, sim_capacity=capacity)


class SimTestCase(unittest.TestCase):
    """Each test starts on a fresh simulated allocator and must free what it allocates."""

    config = "backend:native"

    def setUp(self) -> None:
        fresh_sim(self.config)
        self.lib = streampool.library()
        self.live: List[Tuple[int, int, int]] = []

    def tearDown(self) -> None:
        for ptr, size, device in self.live:
            self.lib.streampool_free(ptr, size, device, None)
        self.live.clear()
        streampool.shutdown()

    def alloc(self, size: int, device: int = 0) -> int:
        ptr = self.lib.streampool_alloc(size, device, None)
        if not ptr:
            raise streampool.StreampoolError(self.lib.streampool_last_error().decode())
        self.live.append((ptr, size, device))
        return ptr

    def free(self, ptr: int) -> None:
        for i, (p, size, device) in enumerate(self.live):
            if p == ptr:
                self.lib.streampool_free(ptr, size, device, None)
                self.assertEqual(self.lib.streampool_last_status(), 0, self.lib.streampool_last_error())
                del self.live[i]
                return
        raise AssertionError(f"{ptr:#x} was not allocated by this test")
