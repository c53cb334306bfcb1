"""Columns assembled from pieces of other device buffers, in one launch per source allocation.

A read's result is made of *pieces*: row ranges of columns decoded into the buffers of
several read units (and fragments).  Putting them into one set of final buffers (cuDF's
layout: int32 offsets starting at 0, validity as bitmask words) takes, besides the batched
byte copy (:func:`cuda_kernels.segments.copy_ranges_gpu`), two segmented primitives, each
over every piece of every column that lives in one source allocation:

* :func:`rebase_offsets_segments` -- segment ``s`` writes ``counts[s]`` offsets at
  ``out[dst[s]:]``: ``src[at[s] + i] - base[s] + shift[s]`` when ``at[s] >= 0`` (a piece's
  offsets moved to where its bytes / children land), else the arithmetic run
  ``shift[s] + i * stride[s]`` (the final offset of a column, fixed-size list offsets).
  ``out`` is int32 or int64; ``src`` int64.  A count of one with base 0 and shift 0 is a
  gather of single values (the bounds of pieces whose span the host does not know).
* :func:`pack_bitmask_segments` -- segment ``s`` sets the ``counts[s]`` validity bits
  starting at bit ``dst[s]`` of the uint32 words ``out`` (LSB first, Arrow's order) from
  the bool bytes ``src[at[s]:]`` (``at[s] == -1``: all valid, ``-2``: all null), and adds
  the segment's nulls to ``nulls[column[s]]``.  Words shared by two segments are OR-ed
  atomically, so ``out`` must start zeroed; one thread per destination word of a segment.

A source outside its array flags ``ERR_OUT_OF_BOUNDS`` (``CorruptInputError``), as the other
segment primitives do.  The CPU functions of the same names are the references.
"""

import numpy as np

from . import _device
from ._target import LAZY_CUDA, gpu_kernel
from .errors import ERR_OUT_OF_BOUNDS, CorruptInputError, new_error_flag, raise_if_flagged
from .segments import _descriptor, _i64, _prefix_host, _segment_of

cuda = LAZY_CUDA

__all__ = [
    "pack_bitmask_segments",
    "pack_bitmask_segments_gpu",
    "rebase_offsets_segments",
    "rebase_offsets_segments_gpu",
]


# --------------------------------------------------------------------------
# CPU references
# --------------------------------------------------------------------------


def rebase_offsets_segments(src, at, counts, base, shift, stride, out, dst):
    """CPU reference of :func:`rebase_offsets_segments_gpu` (``out`` written in place)."""
    src = np.asarray(src, np.int64)
    for a, n, b, sh, st, d in zip(*(_i64(x).tolist() for x in (at, counts, base, shift, stride, dst)), strict=True):
        if not n:
            continue
        if a >= 0:
            if a + n > src.size or d < 0 or d + n > out.size:
                raise CorruptInputError("rebase_offsets_segments: a segment reaches outside its arrays", ERR_OUT_OF_BOUNDS)
            out[d : d + n] = src[a : a + n] - b + sh
        else:
            if d < 0 or d + n > out.size:
                raise CorruptInputError("rebase_offsets_segments: a segment reaches outside its arrays", ERR_OUT_OF_BOUNDS)
            out[d : d + n] = sh + np.arange(n, dtype=np.int64) * st
    return out


def pack_bitmask_segments(src, at, counts, dst, column, out, nulls):
    """CPU reference of :func:`pack_bitmask_segments_gpu` (``out`` uint32 words, OR-ed into)."""
    src = np.asarray(src)
    bits = np.unpackbits(out.view(np.uint8), bitorder="little").astype(bool)
    for a, n, d, c in zip(*(_i64(x).tolist() for x in (at, counts, dst, column)), strict=True):
        if not n:
            continue
        if a >= 0:
            if a + n > src.size:
                raise CorruptInputError("pack_bitmask_segments: a segment reaches outside its source", ERR_OUT_OF_BOUNDS)
            valid = src[a : a + n] != 0
        else:
            valid = np.full(n, a == -1)
        bits[d : d + n] |= valid
        nulls[c] += int(n - np.count_nonzero(valid))
    out[:] = np.packbits(bits, bitorder="little").view(out.dtype)
    return out


# --------------------------------------------------------------------------
# GPU kernels
# --------------------------------------------------------------------------


@gpu_kernel
def _rebase_kernel(src, at, base, shift, stride, dst, prefix, nseg, total, out, err):
    k = cuda.grid(1)
    if k >= total:
        return
    s = _segment_of(prefix, nseg, k)
    rel = k - np.int64(prefix[s])
    d = np.int64(dst[s]) + rel
    a = np.int64(at[s])
    if d < 0 or d >= out.shape[0]:
        cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
        return
    if a >= 0:
        i = a + rel
        if i >= src.shape[0]:
            cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
            return
        out[d] = np.int64(src[i]) - np.int64(base[s]) + np.int64(shift[s])
    else:
        out[d] = np.int64(shift[s]) + rel * np.int64(stride[s])


@gpu_kernel
def _bitmask_kernel(src, at, counts, dst, column, prefix, nseg, total, out, nulls, err):
    k = cuda.grid(1)
    if k >= total:
        return
    s = _segment_of(prefix, nseg, k)
    rel = k - np.int64(prefix[s])
    d0 = np.int64(dst[s])
    n = np.int64(counts[s])
    word = (d0 >> 5) + rel
    lo = max(d0, word * 32)
    hi = min(d0 + n, word * 32 + 32)
    a = np.int64(at[s])
    if (a >= 0 and a + (hi - d0) > src.shape[0]) or word >= out.shape[0]:
        cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
        return
    bits = np.uint32(0)
    zeros = np.int64(0)
    for b in range(lo, hi):
        if a >= 0:
            valid = src[a + (b - d0)] != 0
        else:
            valid = a == -1
        if valid:
            bits |= np.uint32(1) << np.uint32(b & 31)
        else:
            zeros += 1
    if bits:
        cuda.atomic.or_(out, word, bits)
    if zeros:
        cuda.atomic.add(nulls, np.int64(column[s]), zeros)


# --------------------------------------------------------------------------
# Wrappers
# --------------------------------------------------------------------------


def rebase_offsets_segments_gpu(src, at, counts, base, shift, stride, out, dst, *, threads_per_block=256):
    """See the module docstring: one launch over every segment (``src`` an int64 device
    array, ``out`` an int32 / int64 device array written in place; descriptors host or
    device).  Returns ``out``."""
    prefix = _prefix_host(counts)
    total = int(prefix[-1])
    if total:
        err = new_error_flag()
        blocks, tpb = _device.launch_dims(total, threads_per_block)
        _rebase_kernel.get()[blocks, tpb](
            _device.to_device(src), _descriptor(at), _descriptor(base), _descriptor(shift), _descriptor(stride),
            _descriptor(dst), _device.to_device(prefix), np.int64(prefix.size - 1), np.int64(total), out, err,
        )
        raise_if_flagged(err, "rebase_offsets_segments_gpu")
    return out


def pack_bitmask_segments_gpu(src, at, counts, dst, column, out, nulls, *, threads_per_block=256):
    """See the module docstring: one launch over every destination word of every segment
    (``src`` a uint8 / bool device array, ``out`` zeroed uint32 device words, ``nulls`` an
    int64 device array of per-column null counts, both updated in place)."""
    counts = _i64(counts)
    dst = _i64(dst)
    first = dst >> 5
    last = (dst + counts - 1) >> 5
    words = np.where(counts > 0, last - first + 1, 0)
    prefix = _prefix_host(words)
    total = int(prefix[-1])
    if total:
        err = new_error_flag()
        blocks, tpb = _device.launch_dims(total, threads_per_block)
        _bitmask_kernel.get()[blocks, tpb](
            _device.to_device(src), _descriptor(at), _descriptor(counts), _descriptor(dst), _descriptor(column),
            _device.to_device(prefix), np.int64(prefix.size - 1), np.int64(total), out, nulls, err,
        )
        raise_if_flagged(err, "pack_bitmask_segments_gpu")
    return out
