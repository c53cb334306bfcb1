# SPDX-License-Identifier: Apache-2.0
"""FastLanes bit-packing on the GPU: the device twins of this package's encoders.

Same bytes as the CPU encoders (:func:`~lance_gpu.file.encodings.bitpacking.encode_miniblock`
and :func:`~lance_gpu.file.encodings.bitpacking.encode_level_chunks`), built from device
arrays by :mod:`cuda_kernels.encode`; results are :class:`MiniBlockChunks` whose data is a
device array (the per-chunk sizes stay on the host: the page assembly needs them there).
Only the block widths (one int per 1024 values) are read back.
"""

from __future__ import annotations

import numpy as np

from lance_gpu._proto import encodings_v2_1_pb2 as pb
from lance_gpu.file.encodings.base import MiniBlockChunks
from lance_gpu.file.encodings.bitpacking import inline_size

__all__ = ["block_bit_widths", "encode_level_chunks", "encode_miniblock", "inline_size"]


def block_bit_widths(values) -> np.ndarray:
    """Bit width of each 1024-value block of the unsigned device array ``values`` (host)."""
    from cuda_kernels.encode import block_bit_widths_gpu

    return block_bit_widths_gpu(values)


def encode_miniblock(values, widths: np.ndarray) -> MiniBlockChunks:
    """InlineBitpacking{T} chunks of the device uintT ``values`` at the blocks' ``widths``."""
    from cuda_kernels.encode import pack_chunks_gpu

    bits = np.dtype(values.dtype).itemsize * 8
    n = int(values.shape[0])
    out, words = pack_chunks_gpu(values, widths)
    counts = np.full(widths.size, 1024, np.int64)
    counts[-1] = n - 1024 * (widths.size - 1)
    enc = pb.CompressiveEncoding(inline_bitpacking=pb.InlineBitpacking(uncompressed_bits_per_value=bits))
    return MiniBlockChunks(counts, [(out.view(np.uint8), words * (bits // 8))], enc)


def level_chunk_sizes(lens: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per chunk of ``lens`` u16 levels packed OutOfLine at ``width`` bits: (bytes, whole
    1024-level blocks, is the tail packed into one more zero-padded block).  The tail of
    ``r = len mod 1024`` levels is packed when the padding costs fewer bits than packing
    saves (``width * (1024 - r) < (16 - width) * r``), else kept as ``r`` raw u16 words."""
    nfull, rem = np.divmod(lens, 1024)
    packed_tail = (rem > 0) & (width * (1024 - rem) < (16 - width) * rem)
    sizes = (nfull + packed_tail) * (128 * width) + np.where(packed_tail, 0, rem * 2)
    return sizes.astype(np.int64), nfull, packed_tail


def encode_level_chunks(levels, bounds: np.ndarray, width: int):
    """OutOfLineBitpacking of the device u16 ``levels`` per chunk (chunk c holds levels
    ``bounds[c]:bounds[c+1]``): (device bytes, host per-chunk sizes), the bytes
    :func:`lance_gpu.file.encodings.bitpacking.encode_level_chunks` writes."""
    from cuda_kernels import _device as kdev
    from cuda_kernels.encode import pack_level_blocks_gpu
    from cuda_kernels.segments import copy_ranges_gpu

    lens = np.diff(bounds)
    sizes, nfull, packed_tail = level_chunk_sizes(lens, width)
    starts = np.zeros(lens.size, np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    total = int(sizes.sum())
    out = kdev.device_zeros(total // 2, np.uint16)
    # one row per packed block: (first level, levels in it, destination u16 word)
    nblk = nfull + packed_tail
    chunk_of = np.repeat(np.arange(lens.size), nblk)
    k = np.arange(int(nblk.sum())) - np.repeat(np.cumsum(nblk) - nblk, nblk)
    src = bounds[:-1][chunk_of] + 1024 * k
    count = np.minimum(1024, lens[chunk_of] - 1024 * k)
    dst = starts[chunk_of] // 2 + 64 * width * k
    pack_level_blocks_gpu(levels, src, count, dst, width, out)
    raw = np.flatnonzero(~packed_tail & (lens % 1024 > 0))
    if raw.size:
        first = bounds[:-1][raw] + 1024 * nfull[raw]
        copy_ranges_gpu(levels, 2 * first, 2 * (lens[raw] % 1024), out, starts[raw] + 128 * width * nfull[raw])
    return out.view(np.uint8), sizes
