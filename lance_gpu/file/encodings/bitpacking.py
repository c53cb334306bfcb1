# SPDX-License-Identifier: Apache-2.0
"""FastLanes bit-packing: InlineBitpacking (values) and OutOfLineBitpacking (levels).

A FastLanes block is 1024 values of a T-bit unsigned type packed to W bits as
``1024 * W / T`` words of T bits (the transposed lane order is the kernel's business).

* **InlineBitpacking{uncompressed_bits_per_value = T}** (mini-block): each chunk buffer is
  ``ceil(count / 1024)`` blocks, each one T-bit word holding W followed by its packed words;
  the last block is zero-padded to 1024 values.  W = 0 means all zeros.
* **OutOfLineBitpacking{uncompressed_bits_per_value = T, values = Flat{W}}** (block form,
  used for rep/def levels): whole blocks of W bits with no header; the tail of
  ``n mod 1024`` values is either one more padded block or ``n mod 1024`` raw T-bit words,
  told apart by the buffer's length.
"""

from __future__ import annotations

import numpy as np

from lance_gpu.cpu import native
from lance_gpu.file.blocks import FixedWidthBlock, uint_dtype
from lance_gpu.file.encodings.base import ChunkBuffers, DecodeContext


def decode_miniblock(enc, bufs: list[ChunkBuffers], ctx: DecodeContext) -> FixedWidthBlock:
    from cuda_kernels.bitunpack import unpack_blocks

    if enc.HasField("values"):
        raise ctx.unsupported("InlineBitpacking with buffer compression")
    bits = int(enc.uncompressed_bits_per_value)
    dt = uint_dtype(bits, ctx.path)
    cb = bufs[0]
    n = cb.num_values
    word_off, widths, nvals, ok = native.inline_bitpack_blocks(cb.data, cb.starts, cb.counts, bits // 8)
    if not ok:
        raise ctx.corrupt("inline bit-packed chunk is malformed (bad width or truncated)")
    usable = cb.data.size - cb.data.size % (bits // 8)
    words = cb.data[:usable].view(dt)
    unpacked = unpack_blocks(words, word_off, widths)
    if n == unpacked.size:
        out = unpacked
    elif np.all(nvals[:-1] == 1024):
        out = unpacked[:n]
    else:
        out = np.empty(n, dt)
        native.compact_blocks(unpacked, nvals, out)
    return FixedWidthBlock(out.view(np.uint8), bits, n)


def ool_unpack(enc, buf: np.ndarray, num_values: int, ctx: DecodeContext) -> np.ndarray:
    """Unpack one OutOfLineBitpacking buffer of ``num_values`` values to a typed array."""
    from cuda_kernels.bitunpack import unpack_blocks

    bits = int(enc.uncompressed_bits_per_value)
    dt = uint_dtype(bits, ctx.path)
    inner = enc.values
    if inner.WhichOneof("compression") != "flat":
        raise ctx.unsupported("OutOfLineBitpacking over anything but Flat")
    width = int(inner.flat.bits_per_value)
    if not 0 <= width <= bits:
        raise ctx.corrupt(f"bit width {width} above {bits}")
    block_bytes = 128 * width
    nfull, rem = divmod(num_values, 1024)
    padded = rem and buf.size >= (nfull + 1) * block_bytes
    nblocks = nfull + (1 if padded else 0)
    if buf.size < nfull * block_bytes or (rem and not padded and buf.size < nfull * block_bytes + rem * (bits // 8)):
        raise ctx.corrupt("out-of-line bit-packed buffer is truncated")
    word_bytes = bits // 8
    if nblocks:
        aligned = buf if buf.ctypes.data % word_bytes == 0 else buf.copy()
        words = aligned[: (aligned.size // word_bytes) * word_bytes].view(dt)
        offs = np.arange(nblocks, dtype=np.int64) * (block_bytes // word_bytes)
        out = unpack_blocks(words, offs, np.full(nblocks, width, np.int64))
        out = out[: min(out.size, num_values)]
    else:
        out = np.zeros(0, dt)
    if rem and not padded:
        tail = buf[nfull * block_bytes : nfull * block_bytes + rem * word_bytes].copy().view(dt)
        out = np.concatenate([out, tail])
    return out


def decode_block(enc, buf: np.ndarray, num_values: int, ctx: DecodeContext) -> FixedWidthBlock:
    bits = int(enc.uncompressed_bits_per_value)
    out = ool_unpack(enc, buf, num_values, ctx)
    return FixedWidthBlock(out.view(np.uint8), bits, num_values)


def decode_inline_block(enc, buf: np.ndarray, num_values: int, ctx: DecodeContext) -> FixedWidthBlock:
    """InlineBitpacking used as a block: one chunk holding all values."""
    cb = ChunkBuffers(buf, np.zeros(1, np.int64), np.array([buf.size], np.int64), np.array([num_values], np.int64))
    return decode_miniblock(enc, [cb], ctx)
