# SPDX-License-Identifier: Apache-2.0
"""Flat: fixed-width little-endian values, ``bits_per_value`` each.

Booleans are 1 bit per value, LSB first; FixedSizeBinary(16) is 128 bits.  In a mini-block
chunk the buffer holds exactly ``count * bits / 8`` bytes (booleans ``ceil(count / 8)``),
padded to 8 by the chunk grammar.  ``data`` (optional) names a general compression applied
to the whole buffer in the block form.
"""

from __future__ import annotations

import numpy as np

from lance_gpu._proto import encodings_v2_1_pb2 as pb
from lance_gpu.cpu import native
from lance_gpu.file.blocks import FixedWidthBlock, per_bucket, select_block
from lance_gpu.file.encodings import general
from lance_gpu.file.encodings.base import ChunkBuffers, DecodeContext, MiniBlockChunks

#: Value widths (bytes) that a selection gathers as one typed (unsigned) integer each.
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def select_values(cb: ChunkBuffers, width: int, select: np.ndarray, ctx: DecodeContext) -> np.ndarray:
    """The bytes of the values at positions ``select`` among the chunks' values (``width``
    bytes each, ``cb.counts[i]`` of them back to back at ``cb.starts[i]``), gathered
    straight from the chunk data: only the selected values' bytes are read."""
    need = cb.counts * width
    if np.any(cb.sizes < need):
        raise ctx.corrupt("flat chunk shorter than its value count")
    n = cb.num_values
    if not select.size:
        return np.zeros(0, np.uint8)
    if int(select.min()) < 0 or int(select.max()) >= n:
        raise ctx.corrupt(f"selected value {int(select.max())} beyond the chunks' {n} values")
    first = np.zeros(cb.counts.size + 1, np.int64)
    np.cumsum(cb.counts, out=first[1:])
    base = cb.starts - first[:-1] * width  # value v of chunk c sits at base[c] + v * width
    if select.size < 2 or bool(np.all(select[1:] >= select[:-1])):
        at = select * width + np.repeat(base, per_bucket(select, first))
    else:
        at = select * width + base[np.searchsorted(first, select, side="right") - 1]
    data = cb.data
    dt = _UINT.get(width)
    if dt is not None and data.ctypes.data % width == 0 and not np.any(at % width):
        return data[: data.size - data.size % width].view(dt)[at // width].view(np.uint8)
    # any other width: the values as opaque items of ``width`` bytes, one item per byte offset
    items = np.ndarray(shape=(data.size - width + 1,), dtype=np.dtype((np.void, width)), buffer=data, strides=(1,))
    return items[at].view(np.uint8).reshape(-1)


def decode_miniblock(enc, bufs: list[ChunkBuffers], ctx: DecodeContext, select: np.ndarray | None = None) -> FixedWidthBlock:
    """Decode the chunks' values; with ``select`` (positions among them) only those values,
    read straight from the chunks (whole-byte widths) without copying the chunks first."""
    bits = int(enc.bits_per_value)
    if bits <= 0:
        raise ctx.corrupt(f"Flat with {bits} bits per value")
    cb = bufs[0]
    n = cb.num_values
    if enc.HasField("data"):
        raise ctx.unsupported("Flat with buffer compression inside a mini-block chunk")
    if select is not None:
        if bits % 8:
            return select_block(decode_miniblock(enc, bufs, ctx), select)
        return FixedWidthBlock(select_values(cb, bits // 8, select, ctx), bits, int(select.size))
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
    if len(cb.starts) == 1 or bool(np.all(cb.starts[1:] == cb.starts[:-1] + need[:-1])):
        # one chunk, or chunks whose values abut (read into place already): one view
        s = int(cb.starts[0])
        data = cb.data[s : s + int(need.sum())]
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

    vpc = values_per_chunk(bits)
    if num_values <= vpc:  # one chunk (a small page)
        counts = np.array([num_values], np.int64)
        sizes = np.array([data.size], np.int64)
    else:
        nchunks = -(-num_values // vpc)
        counts = np.full(nchunks, vpc, np.int64)
        counts[-1] = num_values - vpc * (nchunks - 1)
        sizes = (counts * bits + 7) // 8
        sizes[-1] = data.size - int(sizes[:-1].sum())
    if encoding is None:
        encoding = pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=bits))
    return MiniBlockChunks(counts, [(data, sizes)], encoding)
