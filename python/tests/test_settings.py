"""streampool.set_allocator_settings() / allocator_settings() over the C API on the simulated
device: a runtime change takes effect at the next allocation (PyTorch's _set_allocator_settings
rules), shows in the effective config, and bad input is refused with nothing changed."""

from __future__ import annotations

import unittest

import streampool
from sim_support import SimTestCase

MIB = 1 << 20


def allocated_by(case: SimTestCase, size: int) -> int:
    before = streampool.stats(0)["allocated_bytes.all.current"]
    p = case.alloc(size)
    after = streampool.stats(0)["allocated_bytes.all.current"]
    case.free(p)
    streampool.empty_cache()
    return after - before


class RuntimeSettings(SimTestCase):
    def test_roundup_follows_the_change_and_resets(self):
        self.assertEqual(allocated_by(self, 84 * MIB), 84 * MIB)
        streampool.set_allocator_settings("roundup_power2_divisions:4")
        self.assertEqual(allocated_by(self, 84 * MIB), 96 * MIB)
        streampool.set_allocator_settings("garbage_collection_threshold:0.5")
        self.assertEqual(allocated_by(self, 84 * MIB), 84 * MIB)  # divisions back to the default

    def test_effective_config_says_where_the_value_came_from(self):
        streampool.set_allocator_settings("max_split_size_mb:40")
        text = streampool.allocator_settings()
        line = next(l for l in text.splitlines() if l.strip().startswith("max_split_size_mb"))
        self.assertIn("40", line)
        self.assertIn("set at run time", line)

    def test_bad_input_is_refused_and_changes_nothing(self):
        streampool.set_allocator_settings("roundup_power2_divisions:4")
        with self.assertRaisesRegex(streampool.StreampoolError, "garbage_collection_threshold"):
            streampool.set_allocator_settings("garbage_collection_threshold:1.2")
        with self.assertRaisesRegex(streampool.StreampoolError, "cannot be changed at run time"):
            streampool.set_allocator_settings("large_segment_size_mb:40")
        with self.assertRaises(ValueError):
            streampool.set_allocator_settings("max_split_size_mb:40\0garbage")
        with self.assertRaises(TypeError):
            streampool.set_allocator_settings(4)  # type: ignore[arg-type]
        self.assertEqual(allocated_by(self, 84 * MIB), 96 * MIB)


if __name__ == "__main__":
    unittest.main()
