"""The package's calls over the C API on the simulated device: statistics and their resets,
memory_summary, empty_cache, backends, the trace export, and the errors of bad calls."""

from __future__ import annotations

import unittest

import streampool
from sim_support import SimTestCase, fresh_sim

MIB = 1 << 20


class Statistics(SimTestCase):
    def test_stats_follow_allocations(self):
        p = self.alloc(1000)
        s = streampool.stats(0)
        self.assertEqual(s["requested_bytes.all.current"], 1000)
        self.assertEqual(s["allocation.all.current"], 1)
        self.free(p)
        self.assertEqual(streampool.stats(0)["allocated_bytes.all.current"], 0)
        self.assertEqual(streampool.stats(1)["allocation.all.allocated"], 0)  # the other device

    def test_reset_peak_stats(self):
        p = self.alloc(8 * MIB)
        self.free(p)
        self.assertEqual(streampool.stats(0)["allocated_bytes.all.peak"], 8 * MIB)
        streampool.reset_peak_stats(0)
        self.assertEqual(streampool.stats(0)["allocated_bytes.all.peak"], 0)
        self.assertEqual(streampool.stats(0)["allocation.all.allocated"], 1)  # cumulative counters stay
        streampool.reset_accumulated_stats(0)
        self.assertEqual(streampool.stats(0)["allocation.all.allocated"], 0)

    def test_empty_cache_returns_cached_memory(self):
        p = self.alloc(30 * MIB)
        self.free(p)
        self.assertGreater(streampool.stats(0)["reserved_bytes.all.current"], 0)
        streampool.empty_cache()
        self.assertEqual(streampool.stats(0)["reserved_bytes.all.current"], 0)

    def test_memory_summary_is_a_table_of_the_stats(self):
        p = self.alloc(3 * MIB)
        text = streampool.memory_summary(0)
        self.assertIn("streampool memory summary, device ID 0 (native backend)", text)
        allocated = next(line for line in text.splitlines() if line.startswith("| Allocated memory"))
        self.assertEqual([c.strip() for c in allocated.split("|")[2:6]], ["3072 KiB", "3072 KiB", "3072 KiB", "0 B"])
        self.assertIn("from large pool", text)
        self.assertNotIn("from large pool", streampool.memory_summary(0, abbreviated=True))
        self.free(p)

    def test_device_count_and_backend(self):
        self.assertEqual(streampool.device_count(), 2)
        self.assertEqual(streampool.backend_name(), "native")


class AsyncBackend(SimTestCase):
    config = "backend:cudaMallocAsync"

    def test_backend_and_stats(self):
        self.assertEqual(streampool.backend_name(), "cudaMallocAsync")
        p = self.alloc(4096)
        self.assertEqual(streampool.stats(0)["requested_bytes.all.current"], 4096)
        self.assertIn("(cudaMallocAsync backend)", streampool.memory_summary(0))
        self.free(p)


class Trace(SimTestCase):
    def test_trace_csv_has_the_events(self):
        self.assertEqual(streampool.trace_csv(0), "action,addr,size,stream,time_us\n")
        streampool.record_history(True, 100)
        p = self.alloc(1000)
        self.free(p)
        rows = [line.split(",") for line in streampool.trace_csv(0).splitlines()[1:]]
        self.assertEqual([r[0] for r in rows], ["segment_alloc", "alloc", "free_requested", "free_completed"])
        self.assertEqual(int(rows[1][1]), p)
        self.assertEqual(int(rows[1][2]), 1000)
        streampool.record_history(False)
        self.assertEqual(streampool.trace_csv(0), "action,addr,size,stream,time_us\n")


class Errors(unittest.TestCase):
    def tearDown(self):
        streampool.shutdown()

    def test_bad_calls_raise_with_the_library_message(self):
        fresh_sim()
        with self.assertRaisesRegex(streampool.StreampoolError, "already installed"):
            streampool.init(driver="sim")
        with self.assertRaisesRegex(streampool.StreampoolError, "streampool_stats_json failed"):
            streampool.stats(7)
        with self.assertRaisesRegex(streampool.StreampoolError, "max_entries must be at least 1"):
            streampool.record_history(True, 0)
        with self.assertRaisesRegex(streampool.StreampoolError, r"\[0.0, 1.0\]"):
            streampool.set_memory_fraction(2.0)
        with self.assertRaisesRegex(streampool.StreampoolError, "streampool_reset_peak_stats failed"):
            streampool.reset_peak_stats(9)

    def test_bad_init_arguments(self):
        streampool.shutdown()
        with self.assertRaisesRegex(ValueError, "driver must be 'cuda' or 'sim'"):
            streampool.init(driver="gpu")
        with self.assertRaisesRegex(streampool.StreampoolError, "max_split_size_mb"):
            streampool.init("max_split_size_mb:banana", driver="sim")
        with self.assertRaisesRegex(streampool.StreampoolError, "device_count 0 is out of range"):
            streampool.init(driver="sim", sim_devices=0)

    def test_shutdown_with_live_memory_is_refused(self):
        fresh_sim(capacity=64 * MIB, devices=1)
        lib = streampool.library()
        p = lib.streampool_alloc(1 * MIB, 0, None)
        self.assertTrue(p)
        with self.assertRaisesRegex(streampool.StreampoolError, "still live"):
            streampool.shutdown()
        self.assertFalse(lib.streampool_alloc(128 * MIB, 0, None))  # beyond the sim's 64 MiB
        self.assertEqual(lib.streampool_last_status(), 2)  # STREAMPOOL_ERROR_OUT_OF_MEMORY
        lib.streampool_free(p, 1 * MIB, 0, None)


class BadInputs(unittest.TestCase):
    """Issue 31: inputs the C library cannot tell apart from good ones are refused in Python, and
    the first error a user without a GPU meets says what to call."""

    def tearDown(self):
        streampool.shutdown()

    def test_a_nul_byte_in_the_config_is_a_value_error(self):
        streampool.shutdown()
        # The C API reads up to the NUL: "backend:native" alone would have been installed.
        with self.assertRaisesRegex(ValueError, r"NUL byte at position 14; .*'backend:native'.*ignore the rest"):
            streampool.init("backend:native\0,max_split_size_mb:banana", driver="sim")
        with self.assertRaisesRegex(ValueError, "NUL byte at position 0"):
            streampool.init("\0", driver="cuda")
        with self.assertRaisesRegex(streampool.StreampoolError, "status 7"):
            streampool.stats(0)  # nothing was installed
        streampool.init("backend:native", driver="sim")  # a clean string still works
        self.assertEqual(streampool.backend_name(), "native")

    def test_a_negative_or_too_large_sim_capacity_is_a_value_error(self):
        streampool.shutdown()
        for capacity in (-1, -(1 << 20), 1 << 64):
            with self.assertRaisesRegex(ValueError, f"sim_capacity {capacity} is out of range"):
                streampool.init(driver="sim", sim_capacity=capacity)
        with self.assertRaisesRegex(streampool.StreampoolError, "status 7"):
            streampool.stats(0)  # nothing was installed (not a 16 EiB device)
        streampool.init(driver="sim", sim_capacity=64 * MIB, sim_devices=1)
        self.assertEqual(streampool.stats(0)["reserved_bytes.all.current"], 0)

    def test_after_shutdown_calls_say_to_init_again(self):
        fresh_sim()
        streampool.shutdown()
        with self.assertRaisesRegex(streampool.StreampoolError, r"status 7\).*shut down.*streampool\.init\(\.\.\.\)"):
            streampool.stats(0)

    def test_without_a_gpu_stats_names_the_simulated_device(self):
        # A fresh process, as a new user's first call: stats() creates the allocator on the GPU.
        import os
        import subprocess
        import sys
        code = "import streampool\ntry:\n    streampool.stats()\nexcept streampool.StreampoolError as e:\n    print(e)\n"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ),
                             timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        if "failed" not in out.stdout:
            self.skipTest("a GPU is usable here: stats() works")
        self.assertIn("no usable CUDA device", out.stdout)
        self.assertIn('streampool.init(driver="sim")', out.stdout)
        with self.assertRaisesRegex(streampool.StreampoolError, r'streampool\.init\(driver="sim"\)'):
            streampool.shutdown()
            streampool.init(driver="cuda")


if __name__ == "__main__":
    unittest.main()
