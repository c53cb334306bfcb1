# SPDX-License-Identifier: Apache-2.0
"""Host buffers for decoded values, taken from Arrow's default memory pool.

Decoded pages end up as the buffers of Arrow arrays.  Allocated by numpy (glibc
``malloc``), a buffer of a few MiB is a fresh anonymous mapping: every 4 KiB page of it
faults and is zeroed by the kernel when first written, and is unmapped again when the
array dies, so a process that reads a table repeatedly pays the faults on every read
(a third of the CPU time of a full scan of the 5M-row benchmark table, measured as
``clear_page`` / page-fault time in ``perf``).  Arrow's pool (mimalloc or jemalloc, as
``pyarrow`` is built) keeps freed memory for the next allocation, as the buffers of
tables made by pyarrow and pylance already do.

An array from :func:`empty` is an ordinary writable, C-contiguous numpy array (compiled
kernels take it as they take any other); its ``base`` is the :class:`pyarrow.Buffer`
holding the memory, which goes back to the pool when the last view of it dies.  Arrays
under :data:`POOL_MIN_BYTES` come from numpy (small allocations are served from the heap
anyway).  Its memory is counted by :func:`pyarrow.total_allocated_bytes`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

#: Arrays of at least this many bytes come from Arrow's pool (smaller ones from numpy).
POOL_MIN_BYTES = 1 << 16


def empty(n: int, dtype: Any) -> np.ndarray:
    """An uninitialised writable 1-D array of ``n`` values of ``dtype`` (64-byte aligned
    when taken from the pool)."""
    dt = np.dtype(dtype)
    nbytes = int(n) * dt.itemsize
    if nbytes < POOL_MIN_BYTES:
        return np.empty(int(n), dt)
    return np.frombuffer(pa.allocate_buffer(nbytes), dt)

