# SPDX-License-Identifier: Apache-2.0
"""Variable-width mini-block chunks written on the GPU (the device twin of
:func:`lance_gpu.file.encodings.variable.variable_chunks`).

The chunk plan (which values go in which chunk, each chunk buffer's size) is the CPU's,
made from the value offsets on the host; the kernel then writes every chunk buffer on the
device -- ``count + 1`` offset words (``w`` bytes, LE, counted from the chunk buffer's
start, so the first one is ``(count + 1) * w``), the values' bytes, then 0x48 up to the
planned size -- one thread block per chunk.
"""

from __future__ import annotations

import numpy as np

from cuda_kernels._target import LAZY_CUDA, gpu_kernel
from lance_gpu.file.encodings.base import MiniBlockChunks
from lance_gpu.file.encodings.variable import miniblock_encoding, miniblock_plan

cuda = LAZY_CUDA

__all__ = ["variable_chunks"]


@gpu_kernel
def _chunks_kernel(offsets, data, bounds, pos, w, out):
    c = cuda.blockIdx.x
    t = cuda.threadIdx.x
    step = cuda.blockDim.x
    a = bounds[c]
    b = bounds[c + 1]
    base = (b - a + 1) * w
    first = offsets[a]
    p = pos[c]
    end = pos[c + 1]
    i = a + t
    while i <= b:
        v = offsets[i] - first + base
        o = p + (i - a) * w
        for q in range(w):
            out[o + q] = (v >> (8 * q)) & 0xFF
        i += step
    ln = offsets[b] - first
    d = p + base
    k = t
    while k < ln:
        out[d + k] = data[first + k]
        k += step
    k = d + ln + t
    while k < end:
        out[k] = 0x48
        k += step


def variable_chunks(host_offsets: np.ndarray, d_offsets, d_data, offset_bits: int) -> MiniBlockChunks:
    """``Variable{Flat}`` chunks of values whose int64 offsets are ``d_offsets`` (device,
    indexing ``d_data``) and ``host_offsets`` (the same, counted from 0, on the host)."""
    from cuda_kernels import _device as kdev

    bounds, counts, sizes = miniblock_plan(np.ascontiguousarray(host_offsets, np.int64), offset_bits)
    pos = np.zeros(sizes.size + 1, np.int64)
    np.cumsum(sizes, out=pos[1:])
    out = kdev.device_empty(int(pos[-1]), np.uint8)
    if sizes.size:
        tpb = 32 if kdev.is_simulator() else 128
        _chunks_kernel.get()[int(sizes.size), tpb](
            d_offsets, d_data, kdev.to_device(np.ascontiguousarray(bounds, np.int64)), kdev.to_device(pos),
            np.int64(offset_bits // 8), out,
        )
    return MiniBlockChunks(counts, [(out, sizes)], miniblock_encoding(offset_bits))
