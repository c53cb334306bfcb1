# SPDX-License-Identifier: Apache-2.0
"""RLE mini-block chunks written on the GPU (the device twin of
:func:`lance_gpu.file.encodings.rle.encode_miniblock`, same bytes).

The chunking is the CPU's rule and is sequential (each chunk starts where the previous one
ended; a chunk holds the largest power-of-two number of values, at most 4096, whose runs --
split at 255 -- fit in ``MAX_MINIBLOCK_BYTES`` of values and u8 lengths), so one device
thread plans the chunks and writes the runs; the values never leave the device and only the
per-chunk counts (one pair per chunk) come back.  RLE is chosen only for pages with fewer
runs than half their values.
"""

from __future__ import annotations

import numpy as np

from cuda_kernels._target import LAZY_CUDA, dual, gpu_kernel
from lance_gpu.file.encodings.base import MiniBlockChunks

cuda = LAZY_CUDA

__all__ = ["encode_miniblock"]


@dual
def _entries(v, a, b):
    """Run entries (runs split at 255) of ``v[a:b]``."""
    if a >= b:
        return 0
    entries = 0
    run = 1
    for i in range(a + 1, b):
        if v[i] == v[i - 1] and run < 255:
            run += 1
        else:
            entries += 1
            run = 1
    return entries + 1


@gpu_kernel
def _rle_kernel(v, value_bytes, max_bytes, max_values, vals, lens, counts, runs, totals):
    if cuda.grid(1) != 0:
        return
    n = v.shape[0]
    k = 0
    c = 0
    pos = 0
    while pos < n:
        size = max_values
        take = 0
        while True:
            take = min(size, n - pos)
            e = _entries(v, pos, pos + take)
            if e * (value_bytes + 1) <= max_bytes or size == 1:
                break
            size //= 2
        start = k
        run = 1
        for i in range(pos + 1, pos + take):
            if v[i] == v[i - 1] and run < 255:
                run += 1
            else:
                vals[k] = v[i - 1]
                lens[k] = run
                k += 1
                run = 1
        vals[k] = v[pos + take - 1]
        lens[k] = run
        k += 1
        counts[c] = take
        runs[c] = k - start
        c += 1
        pos += take
    totals[0] = k
    totals[1] = c


def encode_miniblock(values) -> MiniBlockChunks:
    """``Rle{values: Flat{T}, run_lengths: Flat{8}}`` chunks of the device uintT ``values``
    (per chunk the run values, then the u8 run lengths: two chunk buffers)."""
    from cuda_kernels import _device as kdev
    from lance_gpu._proto import encodings_v2_1_pb2 as pb
    from lance_gpu.file.encodings.flat import MAX_MINIBLOCK_BYTES
    from lance_gpu.file.encodings.rle import MAX_CHUNK_VALUES

    dt = np.dtype(values.dtype)
    width = dt.itemsize
    n = int(values.shape[0])
    vals = kdev.device_empty(n, dt)
    lens = kdev.device_empty(n, np.uint8)
    counts = kdev.device_empty(n, np.int64)
    runs = kdev.device_empty(n, np.int64)
    totals = kdev.device_zeros(2, np.int64)
    _rle_kernel.get()[1, 1](values, np.int64(width), np.int64(MAX_MINIBLOCK_BYTES), np.int64(MAX_CHUNK_VALUES), vals, lens, counts, runs, totals)
    k, c = (int(x) for x in totals.copy_to_host())
    h_counts = counts[:c].copy_to_host()
    h_runs = runs[:c].copy_to_host()
    enc = pb.CompressiveEncoding(
        rle=pb.Rle(
            values=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=8 * width)),
            run_lengths=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=8)),
        )
    )
    return MiniBlockChunks(h_counts, [(vals[:k].view(np.uint8), h_runs * width), (lens[:k], h_runs.copy())], enc)
