# SPDX-License-Identifier: Apache-2.0
"""Variable: variable-width values (strings, binary) as offsets plus bytes.

* Mini-block chunk buffer: ``offsets[count + 1]`` (u32, or u64 when ``offsets`` is Flat64),
  measured from the start of the chunk buffer, so ``offsets[0] == 4 * (count + 1)``; then
  the bytes, padded to 4 (or 8) with 0x48.
* Block form (dictionary items): ``u32 bits_per_offset | u32 bytes_start | offsets[n+1] |
  bytes`` with offsets relative to ``bytes_start`` (the 64-bit form uses u64 headers).

This module is the CPU decode and encoder; the package holds the rest of the encoding:
:mod:`.gpu_plan` (device planning), :mod:`.decode_kernels` (device decoding: value spans),
:mod:`.device` (device encoder) and :mod:`._native` (compiled CPU loops).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from lance_gpu._proto import encodings_v2_1_pb2 as pb
from lance_gpu.cpu import native
from lance_gpu.file.blocks import VariableWidthBlock
from lance_gpu.file.encodings.base import ChunkBuffers, DecodeContext, MiniBlockChunks


def offset_bits(enc, ctx: DecodeContext) -> int:
    off = enc.offsets
    if off.WhichOneof("compression") != "flat" or int(off.flat.bits_per_value) not in (32, 64):
        raise ctx.unsupported("Variable offsets other than Flat32 / Flat64")
    return int(off.flat.bits_per_value)


def chunk_value_ranges(enc, cb: ChunkBuffers, ctx: DecodeContext) -> tuple[np.ndarray, np.ndarray]:
    """Absolute (start, length) of every value in every chunk, without copying bytes."""
    if enc.HasField("values"):
        raise ctx.unsupported("Variable with per-chunk value compression")
    bits = offset_bits(enc, ctx)
    vstart, vlen, ok = native.variable_chunks(cb.data, cb.starts, cb.sizes, cb.counts, bits // 8)
    if not ok:
        raise ctx.corrupt("variable-width chunk offsets out of range")
    return vstart, vlen


def value_ranges(enc, cb: ChunkBuffers, ctx: DecodeContext, select: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Absolute (start, length) of every value of the chunks, or only of the ``select``-ed
    ones (positions among the chunks' values): then only their offsets are read."""
    if select is None:
        return chunk_value_ranges(enc, cb, ctx)
    if enc.HasField("values"):
        raise ctx.unsupported("Variable with per-chunk value compression")
    bits = offset_bits(enc, ctx)
    first = np.zeros(cb.counts.size + 1, np.int64)
    np.cumsum(cb.counts, out=first[1:])
    chunk = np.searchsorted(first, select, side="right") - 1
    if select.size and (int(select.min()) < 0 or int(select.max()) >= int(first[-1])):
        raise ctx.corrupt(f"selected value {int(select.max())} beyond the chunks' {int(first[-1])} values")
    vstart, vlen, ok = native.variable_selected(cb.data, cb.starts, cb.sizes, cb.counts, bits // 8, chunk, select - first[chunk])
    if not ok:
        raise ctx.corrupt("variable-width chunk offsets out of range")
    return vstart, vlen


def decode_miniblock(enc, bufs: list[ChunkBuffers], ctx: DecodeContext, select: np.ndarray | None = None) -> VariableWidthBlock:
    cb = bufs[0]
    vstart, vlen = value_ranges(enc, cb, ctx, select)
    offsets, data, utf8_valid = native.ranges_to_variable(cb.data, vstart, vlen)
    return VariableWidthBlock(offsets, data, True, utf8_valid)


def decode_block(enc, buf: np.ndarray, num_values: int, ctx: DecodeContext) -> VariableWidthBlock:
    bits = offset_bits(enc, ctx)
    raw = buf
    hdr = 8 if bits == 32 else 16
    if raw.size < hdr:
        raise ctx.corrupt("variable block shorter than its header")
    dt: np.dtype
    if bits == 32:
        bpo, start = struct.unpack_from("<II", raw.tobytes()[:8])
        dt = np.dtype("<u4")
    else:
        bpo, start = struct.unpack_from("<QQ", raw.tobytes()[:16])
        dt = np.dtype("<u8")
    if bpo != bits or start > raw.size or hdr + (num_values + 1) * dt.itemsize > start:
        raise ctx.corrupt("variable block header inconsistent with its offsets")
    offs = raw[hdr : hdr + (num_values + 1) * dt.itemsize].view(dt).astype(np.int64)
    data = raw[start:]
    if num_values and (np.any(np.diff(offs) < 0) or offs[-1] > data.size):
        raise ctx.corrupt("variable block offsets out of range")
    base = offs[0] if num_values >= 0 and offs.size else 0
    return VariableWidthBlock(offs - base, data[base : offs[-1]] if offs.size else data[:0])


def decode_blocks32(bufs: list[np.ndarray], num_values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """Many 32-bit block-form buffers (the dictionaries of a column's pages) at once, their
    bytes copied once: ``(blob, item_start, offsets, first_offset)`` where ``blob`` is the
    buffers concatenated, block ``p``'s items start at ``blob[item_start[p]]`` and its
    ``num_values[p] + 1`` int64 offsets (relative to that start, from 0) are
    ``offsets[first_offset[p] : first_offset[p + 1]]``.  The same checks as
    :func:`decode_block` over all blocks in a few NumPy passes; None when a block fails one
    (:func:`decode_block` of each then says which and why)."""
    nblocks = len(bufs)
    n = np.asarray(num_values, np.int64)
    sizes = np.fromiter((b.size for b in bufs), np.int64, nblocks)
    if nblocks == 0 or int(sizes.min()) < 8 or int(n.min()) < 0:
        return None
    blob = np.concatenate(bufs) if nblocks > 1 else np.ascontiguousarray(bufs[0])
    base = np.zeros(nblocks + 1, np.int64)
    np.cumsum(sizes, out=base[1:])
    head = blob[base[:-1, None] + np.arange(8)].view("<u4").astype(np.int64)  # (bits, bytes_start) per block
    bpo, start = head[:, 0], head[:, 1]
    if np.any(bpo != 32) or np.any(start > sizes) or np.any(8 + (n + 1) * 4 > start):
        return None
    first_offset = np.zeros(nblocks + 1, np.int64)
    np.cumsum(n + 1, out=first_offset[1:])
    block_of = np.repeat(np.arange(nblocks), n + 1)
    within = np.arange(int(first_offset[-1]), dtype=np.int64) - first_offset[:-1][block_of]
    at = base[:-1][block_of] + 8 + 4 * within
    offs = blob[at[:, None] + np.arange(4)].view("<u4").reshape(-1).astype(np.int64)
    lo = offs[first_offset[:-1]]
    hi = offs[first_offset[1:] - 1]
    step = np.diff(offs)
    inside = np.ones(step.size, np.bool_)
    inside[first_offset[1:-1] - 1] = False  # the step from one block's last offset to the next's first
    if np.any((step < 0) & inside) or np.any((n > 0) & (hi > sizes - start)):
        return None
    return blob, base[:-1] + start + lo, offs - lo[block_of], first_offset


# --------------------------------------------------------------------------------------------
# Encoders

#: Target size of a variable-width mini-block chunk buffer (offsets plus bytes).
AIM_MINICHUNK_SIZE = 4 * 1024


def chunk_bounds(offsets: np.ndarray, offset_bytes: int) -> np.ndarray:
    """Value index where each mini-block chunk starts, plus ``n`` at the end.

    Like pylance: a chunk takes the largest power-of-two number of values whose offsets
    (``count + 1`` of them) and bytes fit in :data:`AIM_MINICHUNK_SIZE`, or all remaining
    values if they fit; at least one value.
    """
    from lance_gpu.file.encodings.variable import _native

    return _native.variable_chunk_bounds(np.ascontiguousarray(offsets, np.int64), offset_bytes, AIM_MINICHUNK_SIZE)


def miniblock_plan(offsets: np.ndarray, offset_bits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(chunk bounds, values per chunk, chunk buffer sizes)`` of Variable{Flat32|64}
    mini-block chunks (see :func:`encode_miniblock`); ``offsets`` int64 from 0."""
    w = offset_bits // 8
    bounds = chunk_bounds(offsets, w)
    counts = np.diff(bounds)
    head = (counts + 1) * w
    nbytes = offsets[bounds[1:]] - offsets[bounds[:-1]]
    sizes = -(-(head + nbytes) // w) * w
    return bounds, counts.astype(np.int64), sizes.astype(np.int64)


def miniblock_encoding(offset_bits: int):
    """The ``CompressiveEncoding`` of Variable{Flat32|64} values."""

    return pb.CompressiveEncoding(
        variable=pb.Variable(offsets=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=offset_bits)))
    )


def encode_miniblock(offsets: np.ndarray, data: np.ndarray, offset_bits: int):
    """Variable{Flat32|64} mini-block chunks: per chunk ``offsets[count + 1]`` measured from the
    chunk buffer's start, then the bytes, padded to 4 (8 for 64-bit offsets) with 0x48.

    ``offsets`` (int64, ``n + 1``, starting at 0) index into ``data`` (uint8).
    """
    from lance_gpu.file.encodings.variable import _native

    offsets = np.ascontiguousarray(offsets, np.int64)
    bounds, counts, sizes = miniblock_plan(offsets, offset_bits)
    out = _native.variable_chunks_encode(offsets, data, bounds, sizes, offset_bits // 8)
    return MiniBlockChunks(counts, [(out, sizes)], miniblock_encoding(offset_bits))


def encode_block(offsets: np.ndarray, data: np.ndarray, offset_bits: int) -> np.ndarray:
    """Variable block form: ``bits_per_offset | bytes_start | offsets[n+1] | bytes`` (u32
    header words for 32-bit offsets, u64 for 64-bit)."""
    dt = np.dtype("<u4") if offset_bits == 32 else np.dtype("<u8")
    offs = (np.asarray(offsets, np.int64) - int(offsets[0])).astype(dt)
    start = 2 * dt.itemsize + offs.nbytes
    head = np.array([offset_bits, start], dt)
    body = data[int(offsets[0]) : int(offsets[-1])]
    return np.concatenate([head.view(np.uint8), offs.view(np.uint8), np.asarray(body, np.uint8)])


def variable_encoding(offset_bits: int):
    """``Variable{offsets: Flat{offset_bits}}``."""

    return pb.CompressiveEncoding(
        variable=pb.Variable(offsets=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=offset_bits)))
    )


@dataclass(slots=True)
class VariableChunks(MiniBlockChunks):
    """Variable{Flat} chunks not yet serialised: :func:`_miniblock` writes a page without
    levels straight from the values (one copy); anything else calls :meth:`materialize`."""

    offsets: np.ndarray | None = None
    data: np.ndarray | None = None
    bounds: np.ndarray | None = None
    width: int = 4

    def materialize(self) -> None:
        if self.data is not None:
            from lance_gpu.file.encodings.variable import _native

            sizes = self.buffers[0][1]
            out = _native.variable_chunks_encode(self.offsets, self.data, self.bounds, sizes, self.width)
            self.buffers = [(out, sizes)]
            self.data = None


def variable_chunks(offsets: np.ndarray, data: np.ndarray, offset_bits: int) -> VariableChunks:
    offsets = np.ascontiguousarray(offsets, np.int64)
    bounds, counts, sizes = miniblock_plan(offsets, offset_bits)
    empty = np.zeros(0, np.uint8)
    return VariableChunks(
        counts, [(empty, sizes)], miniblock_encoding(offset_bits), offsets, np.ascontiguousarray(data, np.uint8),
        bounds, offset_bits // 8,
    )
