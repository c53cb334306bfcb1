# SPDX-License-Identifier: Apache-2.0
"""Flat: fixed-width little-endian values, ``bits_per_value`` each.

Booleans are 1 bit per value, LSB first; FixedSizeBinary(16) is 128 bits.  In a mini-block
chunk the buffer holds exactly ``count * bits / 8`` bytes (booleans ``ceil(count / 8)``),
padded to 8 by the chunk grammar.  ``data`` (optional) names a general compression applied
to the whole buffer in the block form.
"""

from __future__ import annotations

import numpy as np

from lance_gpu.cpu import native
from lance_gpu.file.blocks import FixedWidthBlock
from lance_gpu.file.encodings import general
from lance_gpu.file.encodings.base import ChunkBuffers, DecodeContext


def decode_miniblock(enc, bufs: list[ChunkBuffers], ctx: DecodeContext) -> FixedWidthBlock:
    bits = int(enc.bits_per_value)
    cb = bufs[0]
    n = cb.num_values
    if enc.HasField("data"):
        raise ctx.unsupported("Flat with buffer compression inside a mini-block chunk")
    if bits == 1:
        need = (cb.counts + 7) // 8
        if np.any(cb.sizes < need):
            raise ctx.corrupt("boolean chunk shorter than its value count")
        if n == 0:
            return FixedWidthBlock(np.zeros(0, np.uint8), 1, 0)
        if np.all(cb.counts[:-1] % 8 == 0):
            data = native.gather_ranges(cb.data, cb.starts, need)
        else:
            data = np.zeros((n + 7) // 8, np.uint8)
            native.bits_concat(cb.data, cb.starts, cb.counts, data)
        return FixedWidthBlock(data, 1, n)
    if bits % 8:
        raise ctx.unsupported(f"Flat with {bits} bits per value")
    width = bits // 8
    need = cb.counts * width
    if np.any(cb.sizes < need):
        raise ctx.corrupt("flat chunk shorter than its value count")
    if len(cb.starts) == 1:
        s = int(cb.starts[0])
        data = cb.data[s : s + int(need[0])]
    else:
        data = native.gather_ranges(cb.data, cb.starts, need)
    return FixedWidthBlock(data, bits, n)


def decode_block(enc, buf: np.ndarray, num_values: int, ctx: DecodeContext) -> FixedWidthBlock:
    bits = int(enc.bits_per_value)
    if enc.HasField("data"):
        buf = general.decompress(enc.data, buf, ctx)
    need = (num_values * bits + 7) // 8
    if buf.size < need:
        raise ctx.corrupt(f"flat buffer of {buf.size} bytes holds fewer than {num_values} values")
    if bits != 1 and bits % 8:
        raise ctx.unsupported(f"Flat with {bits} bits per value")
    return FixedWidthBlock(buf[:need], bits, num_values)
