# SPDX-License-Identifier: Apache-2.0
"""Host buffers for decoded values: numpy's until the process frees decoded data, then
Arrow's default memory pool.

Decoded pages end up as the buffers of Arrow arrays.  Allocated by numpy (glibc
``malloc``), a buffer of a few MiB is a fresh anonymous mapping: every 4 KiB page of it
faults and is zeroed by the kernel when first written, and is unmapped again when the
array dies, so a process that reads a table repeatedly pays the faults on every read (a
third of the CPU time of a repeated full scan of the 5M-row benchmark table, measured as
``clear_page`` / page-fault time in ``perf``).  Arrow's pool (mimalloc, as ``pyarrow``
is built here) keeps freed memory and hands it out again without a fault.

Fresh memory, though, costs more from the pool than from numpy where transparent huge
pages are granted on ``madvise`` (the common default): mimalloc asks for them, and on a
machine whose memory is mostly page cache a huge page is slow and erratic to get (likely
by reclaim).  Measured on the benchmark machine: +0.4 to +0.8 s of system time for the
first 5M-row read; 400 MiB of fresh 8 MiB buffers 0.2 s from glibc, 0.03 to 1.0 s from
mimalloc, and 0.2 s from mimalloc with huge pages turned off for the process.
A one-shot read frees nothing it could reuse, so the pool would only cost it.  So buffers
come from numpy until a decoded array handed to the caller has been freed (the process
reads again, streams batches, or drops results: :func:`watch`), and from the pool from
then on: repeated reads and streaming passes reuse the pool's pages, a single read pays
glibc's cheaper faults.

An array from :func:`empty` is an ordinary writable, C-contiguous numpy array (compiled
kernels take it as they take any other); from the pool, its ``base`` is the
:class:`pyarrow.Buffer` holding the memory, which goes back to the pool when the last view
of it dies, and its memory is counted by :func:`pyarrow.total_allocated_bytes`.  Arrays
under :data:`POOL_MIN_BYTES` always come from numpy (small allocations are served from the
heap anyway).
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
import pyarrow as pa

#: Arrays of at least this many bytes come from Arrow's pool once the process recycles.
POOL_MIN_BYTES = 1 << 16

#: [whether a decoded array handed to a caller has been freed (:func:`watch`)]: from then on
#: large buffers come from the pool (a list so that tests can set it).
recycles = [False]


def _freed() -> None:
    recycles[0] = True


def empty(n: int, dtype: Any) -> np.ndarray:
    """An uninitialised writable 1-D array of ``n`` values of ``dtype`` (see the module's
    docstring for where its memory comes from)."""
    dt = np.dtype(dtype)
    nbytes = int(n) * dt.itemsize
    if nbytes < POOL_MIN_BYTES or not recycles[0]:
        return np.empty(int(n), dt)
    return np.frombuffer(pa.allocate_buffer(nbytes), dt)


def watch(values: np.ndarray) -> None:
    """Note that ``values`` (the array wrapped as the data buffer of a decoded Arrow array
    handed to the caller) dies with that array: when it does, the process recycles
    decoded memory, and :func:`empty` takes large buffers from the pool from then on."""
    if not recycles[0] and values.nbytes >= POOL_MIN_BYTES:
        weakref.finalize(values, _freed)
