# SPDX-License-Identifier: Apache-2.0
"""Device decode of page dictionaries: the dictionary indices of many pages to the spans of
the items they name, in one launch.

This package's decode kernels live here; :mod:`.device` holds its device encoders (the
dictionaries of samples), the package itself its CPU decode and :mod:`.gpu_plan` its device
planning (registered in :data:`lance_gpu.file.encodings.ENCODINGS`).

* :func:`dictionary_spans` -- fixed-width items become copy ranges, variable-width items
  (int64 offsets staged in the arena, relative to the items' bytes) value spans.  A page is
  a *segment* found by binary search over the prefix of the pages' index counts.

Written in the ``cuda_kernels._target`` style (plain-Python cores bound at compile time,
so they run on a GPU and under the numba CUDA simulator alike); nothing here imports CUDA
until a kernel is first compiled.  One thread per index; bad input ORs a bit
into the device error flag (``cuda_kernels.errors``) instead of reading out of bounds.
"""

from __future__ import annotations

import numpy as np

from cuda_kernels import _device
from cuda_kernels._target import LAZY_CUDA, gpu_kernel
from cuda_kernels.errors import ERR_OUT_OF_BOUNDS, new_error_flag, raise_if_flagged
from cuda_kernels.segments import _read_le, _segment_of

cuda = LAZY_CUDA

__all__ = ["dictionary_spans"]


@gpu_kernel
def _dictionary_spans_kernel(
    indices, prefix, nseg, s_start, s_items, s_nitems, s_width, s_offsets, s_dst, arena,
    fixed_src, fixed_dst, out_start, out_len, err,
):
    i = cuda.grid(1)
    if i >= np.int64(prefix[nseg]):
        return
    s = _segment_of(prefix, nseg, i)
    k = i - np.int64(prefix[s])
    q = np.int64(s_start[s]) + k
    nitems = np.int64(s_nitems[s])
    v = np.int64(-1)
    if q >= 0 and q < indices.shape[0]:
        v = np.int64(indices[q])
    if v < 0 or v >= nitems:
        cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
        return
    w = np.int64(s_width[s])
    if w > 0:
        # fixed-width items: a copy range of w bytes to byte s_dst + k * w
        fixed_src[i] = np.int64(s_items[s]) + v * w
        fixed_dst[i] = np.int64(s_dst[s]) + k * w
    else:
        # variable-width items: int64 offsets (relative to the items' bytes) staged in the arena
        d = np.int64(s_dst[s]) + k
        op = np.int64(s_offsets[s]) + 8 * v
        if op < 0 or op + 16 > arena.shape[0] or d < 0 or d >= out_start.shape[0]:
            cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
            return
        o0 = _read_le(arena, op, 8)
        o1 = _read_le(arena, op + 8, 8)
        out_start[d] = np.int64(s_items[s]) + o0
        out_len[d] = o1 - o0


def dictionary_spans(indices, segs: dict, arena, fixed_src, fixed_dst, out_start, out_len) -> None:
    """Turn the dictionary indices of many pages into spans of their items (one launch).

    ``indices``: a device array holding every page's indices.  Per page (host int64 arrays
    of ``segs``): ``start`` / ``count`` (its indices in ``indices``), ``items`` (arena
    position of the items' bytes), ``nitems``, ``width`` (bytes per fixed-width item, 0 for
    variable width), ``offsets`` (arena position of the variable-width items' int64
    offsets) and ``dst`` (fixed width: byte position of the first value in the output;
    variable width: the first value slot).  Fixed-width values become copy ranges
    ``fixed_src[i] -> fixed_dst[i]`` of ``width`` bytes (``i`` counts the indices of all
    pages in order); variable-width values become spans ``out_start / out_len[slot]``.
    """
    count = segs["count"]
    prefix = np.zeros(count.size + 1, np.int64)
    np.cumsum(count, out=prefix[1:])
    n = int(prefix[-1])
    if not n:
        return
    dev = _device.to_device
    err = new_error_flag()
    blocks, tpb = _device.launch_dims(n)
    _dictionary_spans_kernel.get()[blocks, tpb](
        indices, dev(prefix), np.int64(count.size), dev(segs["start"]), dev(segs["items"]), dev(segs["nitems"]),
        dev(segs["width"]), dev(segs["offsets"]), dev(segs["dst"]), arena, fixed_src, fixed_dst, out_start, out_len, err,
    )
    raise_if_flagged(err, "dictionary index out of range (dictionary_spans)")
