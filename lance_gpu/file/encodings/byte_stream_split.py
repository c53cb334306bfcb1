# SPDX-License-Identifier: Apache-2.0
"""ByteStreamSplit: floats stored as ``width`` byte streams (byte 0 of every value, then
byte 1, ...) per mini-block chunk; the inner encoding is Flat{32|64}."""

from __future__ import annotations

import numpy as np

from lance_gpu.cpu import native
from lance_gpu.file.blocks import FixedWidthBlock
from lance_gpu.file.encodings.base import ChunkBuffers, DecodeContext


def decode_miniblock(enc, bufs: list[ChunkBuffers], ctx: DecodeContext) -> FixedWidthBlock:
    inner = enc.values
    if inner.WhichOneof("compression") != "flat":
        raise ctx.unsupported("ByteStreamSplit over anything but Flat")
    bits = int(inner.flat.bits_per_value)
    if bits % 8:
        raise ctx.unsupported(f"ByteStreamSplit of {bits}-bit values")
    width = bits // 8
    cb = bufs[0]
    if np.any(cb.sizes < cb.counts * width):
        raise ctx.corrupt("byte-stream-split chunk shorter than its value count")
    n = cb.num_values
    out = np.empty(n * width, np.uint8)
    native.byte_stream_unsplit(cb.data, cb.starts, cb.counts, width, out)
    return FixedWidthBlock(out, bits, n)


def decode_block(enc, buf: np.ndarray, num_values: int, ctx: DecodeContext) -> FixedWidthBlock:
    cb = ChunkBuffers(buf, np.zeros(1, np.int64), np.array([buf.size], np.int64), np.array([num_values], np.int64))
    return decode_miniblock(enc, [cb], ctx)
