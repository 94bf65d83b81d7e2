"""The pinned host allocator through the package (streampool.host_*). Without a GPU the allocator
cannot pin memory, and every call must say so with the library's message; with one (the same
tests run on the GPU machine) a buffer is allocated, counted, freed and reused."""

from __future__ import annotations

import unittest

import streampool


class HostAllocator(unittest.TestCase):
    def test_zero_bytes_is_refused(self):
        with self.assertRaises(streampool.StreampoolError) as caught:
            streampool.host_alloc(0)
        self.assertTrue(str(caught.exception))

    def test_alloc_free_reuse_or_a_clear_error(self):
        try:
            ptr = streampool.host_alloc(4096)
        except streampool.StreampoolError as e:  # no GPU or driver here: the reason is named
            text = str(e)
            self.assertRegex(text, r"(?i)cuda|device|driver", text)
            return
        self.assertNotEqual(ptr, 0)
        stats = streampool.host_stats()
        self.assertGreaterEqual(stats["allocation.current"], 1, stats)
        streampool.host_free(ptr)
        self.assertEqual(streampool.host_alloc(4096), ptr, "a freed buffer with no stream uses is reused")
        streampool.host_free(ptr)
        with self.assertRaises(streampool.StreampoolError):
            streampool.host_free(ptr)  # double free
        streampool.host_empty_cache()


if __name__ == "__main__":
    unittest.main()
