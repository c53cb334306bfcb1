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
    if bits <= 0:
        raise ctx.corrupt(f"Flat with {bits} bits per value")
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
    if bits <= 0:
        raise ctx.corrupt(f"Flat with {bits} bits per value")
    if enc.HasField("data"):
        buf = general.decompress(enc.data, buf, ctx)
    need = (num_values * bits + 7) // 8
    if buf.size < need:
        raise ctx.corrupt(f"flat buffer of {buf.size} bytes holds fewer than {num_values} values")
    if bits != 1 and bits % 8:
        raise ctx.unsupported(f"Flat with {bits} bits per value")
    return FixedWidthBlock(buf[:need], bits, num_values)


# --------------------------------------------------------------------------------------------
# Encoder

#: Upper bound on a mini-block chunk's value bytes (pylance: 8 KiB minus 6 header bytes).
MAX_MINIBLOCK_BYTES = 8 * 1024 - 6
#: Upper bound on the values of one mini-block chunk.
MAX_MINIBLOCK_VALUES = 4096


def values_per_chunk(bits: int) -> int:
    """Values per mini-block chunk of ``bits``-bit values, as pylance picks them.

    Start from 2 values (8 when ``bits`` is not a whole number of bytes, counting 8 values
    as one ``bits``-byte word) and double while twice the size stays below
    :data:`MAX_MINIBLOCK_BYTES` and the count stays at most :data:`MAX_MINIBLOCK_VALUES`;
    this gives 4 KiB chunks for most widths (f64: 512 values, bool: 4096).
    """
    if bits % 8 == 0:
        size, count = 2 * (bits // 8), 2
    else:
        size, count = 2 * bits, 8
    while 2 * size < MAX_MINIBLOCK_BYTES and 2 * count <= MAX_MINIBLOCK_VALUES:
        size *= 2
        count *= 2
    return count


def encode_miniblock(data: np.ndarray, bits: int, num_values: int, encoding=None):
    """Cut ``num_values`` packed ``bits``-bit values (``data``: exactly their bytes) into
    mini-block chunks; ``encoding`` defaults to ``Flat{bits}``."""
    from lance_gpu._proto import encodings_v2_1_pb2 as pb
    from lance_gpu.file.encodings.base import MiniBlockChunks

    vpc = values_per_chunk(bits)
    nchunks = max(1, -(-num_values // vpc))
    counts = np.full(nchunks, vpc, np.int64)
    counts[-1] = num_values - vpc * (nchunks - 1)
    sizes = (counts * bits + 7) // 8
    sizes[-1] = data.size - int(sizes[:-1].sum())
    if encoding is None:
        encoding = pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=bits))
    return MiniBlockChunks(counts, [(data, sizes)], encoding)
