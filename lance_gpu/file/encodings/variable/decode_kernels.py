# SPDX-License-Identifier: Apache-2.0
"""Device decode of Variable values: the mini-block ``Variable`` chunk buffers of many pages
to one ``(start, length)`` span per value, in one launch.

This package's decode kernels live here; :mod:`.device` holds its device encoder, the
package itself its CPU decode and :mod:`.gpu_plan` its device planning (which chunks the
kernel reads, registered in :data:`lance_gpu.file.encodings.ENCODINGS`).

* :func:`variable_spans` -- a chunk buffer is ``offsets[count + 1]`` (``width`` bytes each,
  LE, relative to the chunk buffer, so ``offsets[0] == (count + 1) * width``), then bytes;
  one thread per value reads its two offsets.  A chunk is a *segment* found by binary
  search over the prefix of the chunks' value counts.

Written in the ``cuda_kernels._target`` style (plain-Python cores bound at compile time,
so they run on a GPU and under the numba CUDA simulator alike); nothing here imports CUDA
until a kernel is first compiled.  One thread per value; bad input ORs a bit
into the device error flag (``cuda_kernels.errors``) instead of reading out of bounds.
"""

from __future__ import annotations

import numpy as np

from cuda_kernels import _device
from cuda_kernels._target import LAZY_CUDA, gpu_kernel
from cuda_kernels.errors import ERR_OUT_OF_BOUNDS, new_error_flag, raise_if_flagged
from cuda_kernels.segments import _read_le, _segment_of

cuda = LAZY_CUDA

__all__ = ["variable_spans"]


@gpu_kernel
def _variable_spans_kernel(data, c_start, c_size, c_width, c_first, nchunks, c_dst, out_start, out_len, err):
    i = cuda.grid(1)
    if i >= np.int64(c_first[nchunks]):
        return
    c = _segment_of(c_first, nchunks, i)
    j = i - np.int64(c_first[c])
    count = np.int64(c_first[c + 1]) - np.int64(c_first[c])
    base = np.int64(c_start[c])
    size = np.int64(c_size[c])
    w = np.int64(c_width[c])
    d = np.int64(c_dst[c]) + j
    if base < 0 or base + size > data.shape[0] or (count + 1) * w > size or d < 0 or d >= out_start.shape[0]:
        cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
        return
    o0 = _read_le(data, base + j * w, w)
    o1 = _read_le(data, base + (j + 1) * w, w)
    # offsets[0] is where the bytes start: right after the chunk's count + 1 offsets
    if o0 < 0 or o1 < o0 or o1 > size or (j == 0 and o0 != (count + 1) * w):
        cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
        out_start[d] = base
        out_len[d] = 0
        return
    out_start[d] = base + o0
    out_len[d] = o1 - o0


def variable_spans(arena, chunks: dict, out_start, out_len, what: str = "variable_spans") -> None:
    """Fill ``out_start`` / ``out_len`` (int64 device arrays) from Variable chunk buffers.

    ``chunks`` holds host int64 arrays: ``start`` / ``size`` (bytes in ``arena``), ``width``
    (offset bytes, 4 or 8), ``count`` (values) and ``dst`` (index of the chunk's first value).
    """
    count = chunks["count"]
    n = int(count.sum())
    if not n:
        return
    first = np.zeros(count.size + 1, np.int64)
    np.cumsum(count, out=first[1:])
    dev = _device.to_device
    err = new_error_flag()
    blocks, tpb = _device.launch_dims(n)
    _variable_spans_kernel.get()[blocks, tpb](
        arena, dev(chunks["start"]), dev(chunks["size"]), dev(chunks["width"]), dev(first),
        np.int64(count.size), dev(chunks["dst"]), out_start, out_len, err,
    )
    raise_if_flagged(err, what)
