"""Without torch, the functions that need it say so and what to use instead, rather than raising a
bare ModuleNotFoundError from inside the package (issue: the first hour)."""

from __future__ import annotations

import importlib.util
import unittest

import streampool


@unittest.skipIf(importlib.util.find_spec("torch") is not None, "torch is importable here")
class WithoutTorch(unittest.TestCase):
    def test_install_mempool_and_pluggable_name_what_is_missing(self):
        for name, call in (("streampool.install()", streampool.install),
                           ("streampool.mempool()", streampool.mempool),
                           ("streampool.pluggable_allocator()", streampool.pluggable_allocator)):
            with self.subTest(name=name):
                with self.assertRaises(streampool.StreampoolError) as caught:
                    call()
                message = str(caught.exception)
                self.assertIn(name, message)
                self.assertIn("needs PyTorch", message)
                self.assertIn("streampool.init()", message)
                self.assertIsInstance(caught.exception.__cause__, ImportError)


if __name__ == "__main__":
    unittest.main()
