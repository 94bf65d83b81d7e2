"""streampool.sleep() / wake() / sleep_state() over the C API on the simulated device: the default
pool of an allocator with expandable segments sleeps and wakes, refuses allocations while asleep,
reports its state, and every bad argument is refused with one clear error and nothing changed.
region() needs torch and the extension: without them it says so."""

from __future__ import annotations

import unittest

import streampool
from sim_support import SimTestCase

MIB = 1 << 20


class SleepAndWake(SimTestCase):
    config = "backend:native,expandable_segments:True"

    def test_the_default_pool_sleeps_and_wakes(self):
        self.alloc(4 * MIB)
        self.assertFalse(streampool.sleep_state()["asleep"])
        reserved = streampool.stats(0)["reserved_bytes.all.current"]
        streampool.sleep(device=0)
        state = streampool.sleep_state(device=0)
        self.assertTrue(state["asleep"])
        self.assertEqual(state["mode"], "offload")
        self.assertEqual(state["offloaded_bytes"], 4 * MIB)
        self.assertEqual(state["released_bytes"], reserved)
        self.assertEqual(streampool.stats(0)["reserved_bytes.all.current"], 0)
        with self.assertRaisesRegex(streampool.StreampoolError, "asleep"):
            self.alloc(512)
        streampool.wake(device=0)
        self.assertFalse(streampool.sleep_state(device=0)["asleep"])
        self.assertEqual(streampool.stats(0)["reserved_bytes.all.current"], reserved)
        self.alloc(512)

    def test_discard_and_a_kept_backup(self):
        self.alloc(2 * MIB)
        streampool.sleep(mode="discard", device=0)
        self.assertEqual(streampool.sleep_state(device=0)["offloaded_bytes"], 0)
        streampool.wake(device=0)
        streampool.sleep(keep_backup=True, device=0)
        streampool.wake(device=0)
        self.assertEqual(streampool.sleep_state(device=0)["backup_bytes"], 2 * MIB)

    def test_bad_arguments_are_refused_and_change_nothing(self):
        self.alloc(MIB)
        with self.assertRaisesRegex(ValueError, "'offload' or 'discard'"):
            streampool.sleep(mode="swap")
        with self.assertRaises(TypeError):
            streampool.sleep(keep_backup="yes")  # type: ignore[arg-type]
        with self.assertRaises(TypeError):
            streampool.sleep(3.5)  # type: ignore[arg-type]
        with self.assertRaisesRegex(streampool.StreampoolError, "no region is tagged 'weights'"):
            streampool.sleep("weights")
        with self.assertRaisesRegex(streampool.StreampoolError, "unknown"):
            streampool.sleep((0, 77), device=0)
        with self.assertRaisesRegex(ValueError, "out of range"):
            streampool.wake(device=-5)
        with self.assertRaisesRegex(streampool.StreampoolError, "not asleep"):
            streampool.wake(device=0)
        self.assertFalse(streampool.sleep_state(device=0)["asleep"])

    def test_a_list_sleeps_all_or_none(self):
        self.alloc(MIB)
        with self.assertRaisesRegex(streampool.StreampoolError, "unknown"):
            streampool.sleep([None, (0, 99)], device=0)  # the second fails: the first wakes again
        self.assertFalse(streampool.sleep_state(device=0)["asleep"])


class CudaMallocSegments(SimTestCase):
    def test_cannot_sleep_and_say_what_to_do(self):
        self.alloc(MIB)
        with self.assertRaisesRegex(streampool.StreampoolError, "expandable_segments:True"):
            streampool.sleep(device=0)

    def test_region_needs_the_extension(self):
        with self.assertRaisesRegex((streampool.StreampoolError, TypeError), "install|tag"):
            with streampool.region("weights"):
                pass


if __name__ == "__main__":
    unittest.main()
