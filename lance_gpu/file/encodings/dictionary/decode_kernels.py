# SPDX-License-Identifier: Apache-2.0
"""Device decode of page dictionaries: the dictionary indices of many pages to the spans of
the items they name, in one launch.

This package's decode kernels live here; :mod:`.device` holds its device encoders (the
dictionaries of samples), the package itself its CPU decode and :mod:`.gpu_plan` its device
planning (registered in :data:`lance_gpu.file.encodings.ENCODINGS`).

* :func:`dictionary_spans` -- fixed-width items become copy ranges, variable-width items
  (int64 offsets staged in the arena, relative to the items' bytes) value spans.  A page is
  a *segment* found by a 32-bit binary search over the prefix of the pages' index counts
  (launches of fewer than ``2 ** 31`` indices: more are split at page bounds).

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
from cuda_kernels.segments import MAX_ITEMS32, _read_le, _segment_of32, word_view

cuda = LAZY_CUDA

__all__ = ["dictionary_spans"]

#: The most indices one launch covers (its thread numbers and search are 32-bit); more are
#: split between launches at page bounds.
_MAX_LAUNCH = MAX_ITEMS32


@gpu_kernel
def _dictionary_spans_kernel(
    indices, prefix, nseg, total, i0, s_start, s_items, s_nitems, s_width, s_offsets, s_dst, arena,
    fixed_src, fixed_dst, out_start, out_len, err, arena_w, arena_w0,
):
    """Index ``i0 + i`` (thread ``i`` of ``total < 2 ** 31``): the thread number, the binary
    search over the uint32 ``prefix`` and the index's rank ``k`` in its page are unsigned
    32-bit; byte positions (``s_items + v * w``, ``s_dst + k * w``) stay 64-bit.  A
    variable-width item's two offsets are two 8-byte loads of ``arena_w`` (the arena's
    aligned words, word 0 at byte ``arena_w0``: :func:`cuda_kernels.segments.word_view`)
    where they sit on a word, else sixteen byte loads."""
    i = np.uint32(np.uint32(cuda.blockIdx.x) * np.uint32(cuda.blockDim.x) + np.uint32(cuda.threadIdx.x))
    if i >= np.uint32(total):
        return
    s = _segment_of32(prefix, nseg, i)
    k = np.uint32(i - np.uint32(prefix[s]))
    q = np.int64(s_start[s]) + np.int64(k)
    nitems = np.int64(s_nitems[s])
    v = np.int64(-1)
    if q >= 0 and q < indices.shape[0]:
        v = np.int64(indices[q])
    if v < 0 or v >= nitems:
        cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
        return
    w = np.int64(s_width[s])
    g = np.int64(i0) + np.int64(i)
    if w > 0:
        # fixed-width items: a copy range of w bytes to byte s_dst + k * w
        fixed_src[g] = np.int64(s_items[s]) + v * w
        fixed_dst[g] = np.int64(s_dst[s]) + np.int64(k) * w
    else:
        # variable-width items: int64 offsets (relative to the items' bytes) staged in the arena
        d = np.int64(s_dst[s]) + np.int64(k)
        op = np.int64(s_offsets[s]) + 8 * v
        if op < 0 or op + 16 > arena.shape[0] or d < 0 or d >= out_start.shape[0]:
            cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
            return
        rel = op - arena_w0  # (>= -7: aligned only when >= 0)
        if (rel & 7) == 0 and (rel >> 3) + 1 < arena_w.shape[0]:
            o0 = np.int64(arena_w[rel >> 3])
            o1 = np.int64(arena_w[(rel >> 3) + 1])
        else:
            o0 = _read_le(arena, op, 8)
            o1 = _read_le(arena, op + 8, 8)
        out_start[d] = np.int64(s_items[s]) + o0
        out_len[d] = o1 - o0


def _launch_groups(count: np.ndarray, limit: int) -> list[tuple[int, int]]:
    """Consecutive pages ``[a, b)`` whose index counts sum to at most ``limit`` each (one
    launch each: the kernel counts in 32 bits); a page over ``limit`` alone is refused."""
    groups = []
    a = 0
    run = 0
    for p, c in enumerate(count.tolist()):
        if c > limit:
            msg = f"dictionary_spans: a page of {c} indices, at most {limit} in one launch"
            raise ValueError(msg)
        if run + c > limit:
            groups.append((a, p))
            a, run = p, 0
        run += c
    groups.append((a, count.size))
    return groups


def dictionary_spans(indices, segs: dict, arena, fixed_src, fixed_dst, out_start, out_len) -> None:
    """Turn the dictionary indices of many pages into spans of their items (one launch; one
    per ``2 ** 31 - 1`` indices, split at page bounds, beyond).

    ``indices``: a device array holding every page's indices.  Per page (host int64 arrays
    of ``segs``): ``start`` / ``count`` (its indices in ``indices``), ``items`` (arena
    position of the items' bytes), ``nitems``, ``width`` (bytes per fixed-width item, 0 for
    variable width), ``offsets`` (arena position of the variable-width items' int64
    offsets) and ``dst`` (fixed width: byte position of the first value in the output;
    variable width: the first value slot).  Fixed-width values become copy ranges
    ``fixed_src[i] -> fixed_dst[i]`` of ``width`` bytes (``i`` counts the indices of all
    pages in order); variable-width values become spans ``out_start / out_len[slot]``.
    """
    count = np.asarray(segs["count"], np.int64)
    n = int(count.sum())
    if not n:
        return
    dev = _device.to_device
    err = new_error_flag()
    words = word_view(arena)
    i0 = 0
    for a, b in _launch_groups(count, _MAX_LAUNCH):
        whole = (a, b) == (0, count.size)  # the usual case: the descriptors as they are (a work table's views)
        prefix = np.zeros(b - a + 1, np.uint32)
        np.cumsum(count[a:b], out=prefix[1:])
        total = int(prefix[-1])
        if total:
            blocks, tpb = _device.launch_dims(total)
            _dictionary_spans_kernel.get()[blocks, tpb](
                indices, dev(prefix), np.uint32(b - a), np.uint32(total), np.int64(i0),
                *(dev(segs[key] if whole else segs[key][a:b]) for key in ("start", "items", "nitems", "width", "offsets", "dst")),
                arena, fixed_src, fixed_dst, out_start, out_len, err, *words,
            )
        i0 += total
    raise_if_flagged(err, "dictionary index out of range (dictionary_spans)")
