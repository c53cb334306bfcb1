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

from lance_gpu._proto import encodings_v2_1_pb2 as pb
from lance_gpu.cpu import memory, native
from lance_gpu.file.blocks import FixedWidthBlock, select_block, uint_dtype
from lance_gpu.file.encodings._native import scatter_ranges
from lance_gpu.file.encodings.base import ChunkBuffers, DecodeContext, MiniBlockChunks


def decode_miniblock(enc, bufs: list[ChunkBuffers], ctx: DecodeContext, select: np.ndarray | None = None) -> FixedWidthBlock:
    """Decode the chunks' values; with ``select`` (positions among them) only those values,
    each unpacked on its own when they are under a quarter of the chunks' values."""
    from cuda_kernels.bitunpack import unpack_blocks, unpack_selected
    from cuda_kernels.errors import CorruptInputError

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
    if select is not None and select.size * 4 <= n:
        # Sparse selections (a take): unpack each value on its own.  Dense ones (streaming
        # windows) unpack whole blocks, which is faster per value, and select afterwards.
        first = np.zeros(nvals.size + 1, np.int64)
        np.cumsum(nvals, out=first[1:])
        if select.size and (int(select.min()) < 0 or int(select.max()) >= n):
            raise ctx.corrupt(f"selected value {int(select.max())} beyond the chunks' {n} values")
        block_of = np.searchsorted(first, select, side="right") - 1
        try:
            picked = unpack_selected(words, word_off, widths, block_of, select - first[block_of])
        except CorruptInputError as exc:
            raise ctx.corrupt(str(exc)) from exc
        return FixedWidthBlock(picked.view(np.uint8), bits, int(select.size))
    if select is not None:
        return select_block(decode_miniblock(enc, bufs, ctx), select)
    unpacked = unpack_blocks(words, word_off, widths, out=memory.empty(word_off.size * 1024, dt))
    if n == unpacked.size:
        out = unpacked
    elif np.all(nvals[:-1] == 1024):
        out = unpacked[:n]
    else:
        out = memory.empty(n, dt)
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
        out = unpack_blocks(words, offs, np.full(nblocks, width, np.int64), out=memory.empty(nblocks * 1024, dt))
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


# --------------------------------------------------------------------------------------------
# Encoders


def bit_length(values: np.ndarray) -> np.ndarray:
    """Bits needed by each (unsigned) value: 0 for 0, else floor(log2(v)) + 1 (int64)."""
    x = values.astype(np.uint64)
    out = np.zeros(x.shape, np.int64)
    for s in (32, 16, 8, 4, 2, 1):
        big = x >= np.uint64(1 << s)
        out[big] += s
        x = np.where(big, x >> np.uint64(s), x)
    out += x > 0
    return out


def block_bit_widths(values: np.ndarray) -> np.ndarray:
    """Bit width of each 1024-value block of unsigned ``values`` (the last block padded with 0)."""
    if values.ndim == 1 and values.dtype.kind == "u" and values.size <= 1024:
        # one block (a small page): the bit length of the OR of its values, without a
        # kernel dispatch
        top = int(np.bitwise_or.reduce(values)) if values.size else 0
        return np.array([top.bit_length()], np.int64)
    from cuda_kernels.bitunpack import block_bit_widths as widths_of

    return widths_of(values)


def inline_size(widths: np.ndarray, bits: int) -> int:
    """Bytes of the InlineBitpacking chunks for these block widths (one width word each)."""
    if widths.size == 1:  # one block (a small page)
        return 128 * int(widths[0]) + bits // 8
    return int((128 * widths).sum()) + widths.size * (bits // 8)


def encode_miniblock(values: np.ndarray, widths: np.ndarray | None = None):
    """InlineBitpacking{T} mini-block chunks: 1024 values per chunk, each chunk one T-bit
    word holding its bit width W followed by ``1024 * W / T`` FastLanes words (the last
    chunk zero-padded to 1024 values).  ``values`` is a uint8/16/32/64 array."""
    from cuda_kernels.bitunpack import pack_chunks

    bits = values.dtype.itemsize * 8
    n = values.size
    if widths is None:
        widths = block_bit_widths(values)
    nblocks = widths.size
    out, words = pack_chunks(values, widths)
    counts = np.full(nblocks, 1024, np.int64)
    counts[-1] = n - 1024 * (nblocks - 1)
    enc = pb.CompressiveEncoding(inline_bitpacking=pb.InlineBitpacking(uncompressed_bits_per_value=bits))
    return MiniBlockChunks(counts, [(out.view(np.uint8), words * (bits // 8))], enc)


def encode_out_of_line(values: np.ndarray, width: int) -> np.ndarray:
    """OutOfLineBitpacking of ``values`` (uintT) at ``width`` bits: whole 1024-value FastLanes
    blocks; the tail is packed into one more (zero-padded) block when the padding costs fewer
    bits than packing saves, otherwise stored as raw T-bit words.  Returns the bytes."""
    from cuda_kernels.bitunpack import pack_blocks

    dt = values.dtype
    bits = dt.itemsize * 8
    n = values.size
    nfull, rem = divmod(n, 1024)
    parts = [pack_blocks(np.ascontiguousarray(values[: nfull * 1024]), width)] if nfull else []
    if rem:
        tail = values[nfull * 1024 :]
        if width * (1024 - rem) < (bits - width) * rem:
            block = np.zeros(1024, dt)
            block[:rem] = tail
            parts.append(pack_blocks(block, width))
        else:
            parts.append(np.ascontiguousarray(tail))
    if not parts:
        return np.zeros(0, np.uint8)
    return np.concatenate(parts).view(np.uint8)


def out_of_line_encoding(bits: int, width: int):
    """``OutOfLineBitpacking{bits, Flat{width}}``."""

    return pb.CompressiveEncoding(
        out_of_line_bitpacking=pb.OutOfLineBitpacking(
            uncompressed_bits_per_value=bits,
            values=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=width)),
        )
    )


def encode_level_chunks(levels: np.ndarray, bounds: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """OutOfLineBitpacking of each chunk's levels: (concatenated bytes, per-chunk sizes)."""
    lens = np.diff(bounds)
    if lens.size and int(lens.max()) < 1024:
        return _short_level_chunks(levels, bounds, lens, width)
    parts = [encode_out_of_line(levels[a:b], width) for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())]
    sizes = np.array([p.size for p in parts], np.int64)
    return (np.concatenate(parts) if parts else np.zeros(0, np.uint8)), sizes


def _short_level_chunks(levels: np.ndarray, bounds: np.ndarray, lens: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_level_chunks` for chunks of fewer than 1024 levels, all at once: each chunk is
    one zero-padded FastLanes block when that is smaller, else its raw words."""
    from cuda_kernels.bitunpack import pack_blocks

    itemsize = levels.dtype.itemsize
    bits = 8 * itemsize
    packed = (lens > 0) & (width * (1024 - lens) < (bits - width) * lens)
    sel = np.flatnonzero(packed)
    block_bytes = 128 * width
    sizes = np.where(packed, block_bytes, lens * itemsize).astype(np.int64)
    if sel.size:
        starts = bounds[:-1][sel]
        pos = np.arange(1024)[None, :]
        take = np.minimum(starts[:, None] + pos, levels.size - 1)
        blocks = np.where(pos < lens[sel][:, None], levels[take], 0).astype(levels.dtype)
        packed_bytes = pack_blocks(blocks.reshape(-1), width).view(np.uint8)
    else:
        packed_bytes = np.zeros(0, np.uint8)
    src = np.concatenate([packed_bytes, np.ascontiguousarray(levels).view(np.uint8)])
    src_starts = np.where(packed, 0, packed_bytes.size + bounds[:-1] * itemsize).astype(np.int64)
    src_starts[sel] = np.arange(sel.size, dtype=np.int64) * block_bytes
    dst_starts = np.zeros(lens.size, np.int64)
    np.cumsum(sizes[:-1], out=dst_starts[1:])
    out = np.empty(int(sizes.sum()), np.uint8)

    scatter_ranges(out, dst_starts, src, src_starts, sizes)
    return out, sizes
