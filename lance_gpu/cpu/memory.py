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

Buffers of more than :data:`RECYCLE_MIN_BYTES` are recycled here instead: mimalloc hands
blocks that large back to the operating system when they are freed, so every one would be
fresh memory again (a streaming window's 32 MiB of 128-byte embeddings faulted and zeroed
per window: 9% of a ``to_batches`` pass's CPU time in ``perf``).  Such a buffer is a block
of numpy memory lent out through a :class:`memoryview` of it; when the last view of that
memoryview dies, the block returns to a free list of at most :data:`RECYCLE_KEEP_BYTES`,
from which the next request of about its size (a block at most a quarter larger) takes it.
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


#: Buffers of more bytes than this are lent from the free list (see the module's docstring).
RECYCLE_MIN_BYTES = 16 << 20
#: Freed large blocks kept for reuse, at most this many bytes in all (the rest go back to
#: the operating system).
RECYCLE_KEEP_BYTES = 256 << 20

#: id(block) -> block: freed large blocks waiting for reuse.  A dict, not a list under a
#: lock: a block comes back from a finalizer, which may run in any thread, inside any
#: allocation (a garbage collection), so taking and returning are single dict operations.
_free_blocks: dict[int, np.ndarray] = {}


def _give_back(block: np.ndarray) -> None:
    """A lent block's last view died: keep it for reuse if the free list has room."""
    if sum(b.nbytes for b in list(_free_blocks.values())) + block.nbytes <= RECYCLE_KEEP_BYTES:
        _free_blocks[id(block)] = block


def _lend(nbytes: int) -> np.ndarray:
    """A writable uint8 array of ``nbytes`` bytes on a recycled block (a free one of
    ``nbytes`` to ``1.25 * nbytes`` bytes, else a new one), returning to the free list when
    the last view of it dies."""
    block = None
    fitting = [(b.nbytes, key) for key, b in list(_free_blocks.items()) if nbytes <= b.nbytes <= nbytes + nbytes // 4]
    for _size, key in sorted(fitting):
        block = _free_blocks.pop(key, None)  # (None: another thread took it first)
        if block is not None:
            break
    if block is None:
        block = np.empty(nbytes, np.uint8)
    out = np.frombuffer(memoryview(block), np.uint8, count=nbytes)  # type: ignore[arg-type]
    # every view of ``out`` keeps its base (that memoryview) alive: its death is the lease's end
    weakref.finalize(out.base, _give_back, block)
    return out


def _freed() -> None:
    recycles[0] = True


def empty(n: int, dtype: Any) -> np.ndarray:
    """An uninitialised writable 1-D array of ``n`` values of ``dtype`` (see the module's
    docstring for where its memory comes from)."""
    dt = np.dtype(dtype)
    nbytes = int(n) * dt.itemsize
    if nbytes < POOL_MIN_BYTES or not recycles[0]:
        return np.empty(int(n), dt)
    if nbytes > RECYCLE_MIN_BYTES:
        return _lend(nbytes).view(dt)
    return np.frombuffer(pa.allocate_buffer(nbytes), dt)


def watch(values: np.ndarray) -> None:
    """Note that ``values`` (the array wrapped as the data buffer of a decoded Arrow array
    handed to the caller) dies with that array: when it does, the process recycles
    decoded memory, and :func:`empty` takes large buffers from the pool from then on."""
    if not recycles[0] and values.nbytes >= POOL_MIN_BYTES:
        weakref.finalize(values, _freed)
