"""examples/interop/numpy_compat.py — numba-cuda's kernel compiler on the GPU machine still reads
np.row_stack, which NumPy 2.4 removed (AttributeError at the first kernel launch, seen
2026-12-02): importing this module gives it the alias NumPy documented (row_stack is vstack)
before numba.cuda compiles anything. Only the examples need it; streampool.numba compiles no kernel."""

import numpy as np

if not hasattr(np, "row_stack"):
    np.row_stack = np.vstack
