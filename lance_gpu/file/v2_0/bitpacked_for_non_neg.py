# SPDX-License-Identifier: Apache-2.0
"""BitpackedForNonNeg: ``compressed_bits_per_value``, ``uncompressed_bits_per_value``, ``buffer``.

FastLanes bit packing of non-negative integers in blocks of 1024 values (the last block is
zero-padded to 1024): block ``k`` is ``1024 * w / T`` words of ``T =
uncompressed_bits_per_value`` bits at byte ``k * 1024 * w / 8``.  Only the blocks that
hold wanted values are read; they are unpacked with
:func:`cuda_kernels.bitunpack.unpack_blocks`.  pylance 14 does not write it in 2.0 files.
"""

from __future__ import annotations

import numpy as np

from lance_gpu.file.v2_0.blocks import Fixed
from lance_gpu.file.v2_0.page import PageSource

_UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
BLOCK = 1024


def decode(msg, src: PageSource, start: int, stop: int, arrow_type):
    w = int(msg.compressed_bits_per_value)
    t = int(msg.uncompressed_bits_per_value)
    if t not in _UINT:
        raise src.ctx.unsupported(f"2.0 BitpackedForNonNeg to {t}-bit values")
    if not 0 <= w <= t:
        raise src.ctx.corrupt(f"BitpackedForNonNeg width {w} exceeds the value width {t}")
    n = stop - start
    if w == 0 or n == 0:
        return Fixed(np.zeros(n * t // 8, np.uint8), t)
    from cuda_kernels.bitunpack import unpack_blocks
    from cuda_kernels.errors import CorruptInputError

    first_block = start // BLOCK
    end_block = (stop + BLOCK - 1) // BLOCK
    block_bytes = BLOCK * w // 8
    nblocks = end_block - first_block
    raw = src.read(msg.buffer, first_block * block_bytes, nblocks * block_bytes)
    words = raw.copy().view(_UINT[t])  # aligned copy
    words_per_block = block_bytes * 8 // t
    offsets = np.arange(nblocks, dtype=np.int64) * words_per_block
    try:
        values = unpack_blocks(words, offsets, np.full(nblocks, w, np.int64))
    except CorruptInputError as exc:
        raise src.ctx.corrupt(f"BitpackedForNonNeg data ({exc})") from exc
    skip = start - first_block * BLOCK
    out = np.ascontiguousarray(values[skip : skip + n])
    return Fixed(out.view(np.uint8), t)
