# SPDX-License-Identifier: Apache-2.0
"""A read's result copied to the host in one copy per device allocation, not one per buffer.

A combined read (:func:`lance_gpu.gpu.combine.combine_read`) holds every column's buffers as
views of a handful of allocations: the combining arenas (values, offsets, bitmask words) and
the read arenas the decode wrote into (``scan_device(whole_read=True)``: fixed-width values,
masks, string offsets and bytes, list layers), or a unit's own buffers.  Copying each
buffer back on its own costs a blocking copy per column and buffer kind (and per fragment,
where each fragment's table is exported alone); :class:`HostCopies` instead copies, per
allocation, the one byte range ``[first, last)`` that the views in it span, and hands out
each view as a NumPy view of that host copy.

Layout: views are grouped by ``(allocation, owner range)`` as
:func:`lance_gpu.gpu.combine._extent` finds them (on a GPU a pool block may hold other
arrays: a group is the views of one owning array, so a copy never spans another array's
bytes); the copy of a group is ``whole[first:last]`` of its allocation, the least byte
range holding every view of it.  A view asked for later that lies in no copied range (not
expected: every buffer a column holds is listed first, and the views taken of it are
sub-ranges) is copied on its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from cuda_kernels import _device
from lance_gpu.gpu import _array
from lance_gpu.gpu.combine import CudfColumn, _extent

__all__ = ["HostCopies", "result_to_arrow"]


class HostCopies:
    """Host copies of the allocations holding ``arrays`` (device arrays; None skipped), one
    blocking copy per allocation (see the module docstring); calling it with a device array
    that is a view inside them gives the host bytes of that view, in its dtype and shape."""

    def __init__(self, arrays: Iterable[Any]) -> None:
        spans: dict[tuple[object, int, int], list] = {}  # (allocation, owner lo, hi) -> [whole, first, last]
        for arr in arrays:
            if arr is None or not int(arr.nbytes):
                continue
            key, whole, off, lo, hi = _extent(arr)
            span = spans.setdefault((key, lo, hi), [whole, off, off + int(arr.nbytes)])
            span[1] = min(span[1], off)
            span[2] = max(span[2], off + int(arr.nbytes))
        #: allocation -> [(first, last, host bytes of [first, last))]
        self._copies: dict[object, list[tuple[int, int, np.ndarray]]] = {}
        for (key, _lo, _hi), (whole, first, last) in spans.items():
            self._copies.setdefault(key, []).append((first, last, _array.to_host(whole[first:last])))

    def __call__(self, arr: Any) -> np.ndarray:
        nbytes = int(arr.nbytes)
        key, _whole, off = _device.allocation_of(arr)
        for first, last, host in self._copies.get(key, ()):
            if first <= off and off + nbytes <= last:
                return host[off - first : off - first + nbytes].view(np.dtype(arr.dtype)).reshape(arr.shape)
        return _array.to_host(arr)


def _buffers(col: CudfColumn) -> Iterable[Any]:
    yield col.data
    yield col.offsets
    yield col.mask
    for child in col.children:
        yield from _buffers(child)


def result_to_arrow(cols: Sequence[CudfColumn]) -> list[pa.Array]:
    """``cols`` (a read's columns in cuDF's layout) as Arrow arrays on the host, the device
    buffers of all of them read back in one copy per allocation (:class:`HostCopies`)."""
    fetch = HostCopies(buf for col in cols if col.host is None for buf in _buffers(col))
    return [col.to_arrow(fetch) for col in cols]
