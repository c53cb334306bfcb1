# SPDX-License-Identifier: Apache-2.0
"""Variable: variable-width values (strings, binary) as offsets plus bytes.

* Mini-block chunk buffer: ``offsets[count + 1]`` (u32, or u64 when ``offsets`` is Flat64),
  measured from the start of the chunk buffer, so ``offsets[0] == 4 * (count + 1)``; then
  the bytes, padded to 4 (or 8) with 0x48.
* Block form (dictionary items): ``u32 bits_per_offset | u32 bytes_start | offsets[n+1] |
  bytes`` with offsets relative to ``bytes_start`` (the 64-bit form uses u64 headers).
"""

from __future__ import annotations

import struct

import numpy as np

from lance_gpu.cpu import native
from lance_gpu.file.blocks import VariableWidthBlock
from lance_gpu.file.encodings.base import ChunkBuffers, DecodeContext


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


def decode_miniblock(enc, bufs: list[ChunkBuffers], ctx: DecodeContext, select: np.ndarray | None = None) -> VariableWidthBlock:
    cb = bufs[0]
    vstart, vlen = chunk_value_ranges(enc, cb, ctx)
    if select is not None:
        vstart, vlen = vstart[select], vlen[select]
    offsets, data = native.ranges_to_variable(cb.data, vstart, vlen)
    return VariableWidthBlock(offsets, data)


def decode_block(enc, buf: np.ndarray, num_values: int, ctx: DecodeContext) -> VariableWidthBlock:
    bits = offset_bits(enc, ctx)
    raw = buf
    hdr = 8 if bits == 32 else 16
    if raw.size < hdr:
        raise ctx.corrupt("variable block shorter than its header")
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
