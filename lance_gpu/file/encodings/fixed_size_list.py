# SPDX-License-Identifier: Apache-2.0
"""FixedSizeList: ``items_per_value`` items per value, flattened.

The inner ``values`` encoding holds ``n * items_per_value`` items; the result is a fixed
width block of ``items_per_value * item_bits`` bits per value (bit-packed when that is not a
whole number of bytes: fixed-size lists of booleans).  ``has_validity`` (item
validity inside the list) is not written by pylance's defaults.
"""

from __future__ import annotations

import numpy as np

from lance_gpu.file.blocks import FixedWidthBlock
from lance_gpu.file.encodings.base import ChunkBuffers, DecodeContext


def _wrap(block, dim: int, n: int, ctx: DecodeContext) -> FixedWidthBlock:
    if not isinstance(block, FixedWidthBlock):
        raise ctx.unsupported("FixedSizeList of variable-width items")
    return FixedWidthBlock(block.as_bytes(), block.bits_per_value * dim, n)


def decode_miniblock(enc, bufs: list[ChunkBuffers], ctx: DecodeContext) -> FixedWidthBlock:
    from lance_gpu.file.encodings import decode_miniblock as inner_decode

    if enc.has_validity:
        raise ctx.unsupported("FixedSizeList with item validity")
    dim = int(enc.items_per_value)
    inner = [cb.with_counts(cb.counts * dim) for cb in bufs]
    return _wrap(inner_decode(enc.values, inner, ctx), dim, bufs[0].num_values, ctx)


def decode_block(enc, buf: np.ndarray, num_values: int, ctx: DecodeContext) -> FixedWidthBlock:
    from lance_gpu.file.encodings import decode_block as inner_decode

    if enc.has_validity:
        raise ctx.unsupported("FixedSizeList with item validity")
    dim = int(enc.items_per_value)
    return _wrap(inner_decode(enc.values, buf, num_values * dim, ctx), dim, num_values, ctx)


def item_bits(enc, ctx: DecodeContext) -> int:
    """Bits per (whole list) value, for fixed-width per-value layouts."""
    from lance_gpu.file.encodings import fixed_bits

    return int(enc.items_per_value) * fixed_bits(enc.values, ctx)
