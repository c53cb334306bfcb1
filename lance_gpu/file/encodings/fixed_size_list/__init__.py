# SPDX-License-Identifier: Apache-2.0
"""FixedSizeList: ``items_per_value`` items per value, flattened.

The inner ``values`` encoding holds ``n * items_per_value`` items; the result is a fixed
width block of ``items_per_value * item_bits`` bits per value (bit-packed when that is not a
whole number of bytes: fixed-size lists of booleans).

``has_validity``: the list's items can be null (pylance writes it when they are), and their
validity travels with the values:

* mini-block: one more chunk buffer per such layer, before the values (outer layer first):
  the chunk's items' validity bits, LSB first, in ``ceil(items / 8)`` bytes;
* full-zip: each value is, per such layer (outer first), ``ceil(dims so far / 8)`` bytes of
  the row's item bits, then the row's value bytes.  Inner-most values ``Constant{}`` (items
  all null) store no value bytes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lance_gpu.file.blocks import FixedWidthBlock, select_block
from lance_gpu.file.encodings import dispatch, flat
from lance_gpu.file.encodings.base import ChunkBuffers, DecodeContext


def _wrap(block, dim: int, n: int, ctx: DecodeContext, valid: np.ndarray | None = None) -> FixedWidthBlock:
    if not isinstance(block, FixedWidthBlock):
        raise ctx.unsupported("FixedSizeList of variable-width items")
    inner = block.fsl_validity
    validity = (valid, *inner) if (valid is not None or inner) else ()
    return FixedWidthBlock(block.as_bytes(), block.bits_per_value * dim, n, validity)


def _chunk_bits(cb: ChunkBuffers, ctx: DecodeContext) -> np.ndarray:
    """The validity bits of every chunk (``counts[i]`` of them in chunk i), concatenated."""
    need = (cb.counts + 7) // 8
    if np.any(cb.sizes < need):
        raise ctx.corrupt("fixed-size-list validity chunk shorter than its items")
    parts = [
        np.unpackbits(cb.data[s : s + z], bitorder="little")[:c]
        for s, z, c in zip(cb.starts.tolist(), need.tolist(), cb.counts.tolist())
    ]
    return (np.concatenate(parts) if parts else np.zeros(0, np.uint8)).astype(np.bool_)


def decode_miniblock(enc, bufs: list[ChunkBuffers], ctx: DecodeContext, select: np.ndarray | None = None) -> FixedWidthBlock:
    """Decode the chunks' lists; with ``select`` (positions among them) only those lists:
    lists of whole-byte flat items without item validity are read straight from the
    chunks, anything else is decoded whole and selected."""
    dim = int(enc.items_per_value)
    if select is not None:
        inner_enc = enc.values
        if (not enc.has_validity and inner_enc.WhichOneof("compression") == "flat" and not inner_enc.flat.HasField("data")
                and int(inner_enc.flat.bits_per_value) % 8 == 0 and int(inner_enc.flat.bits_per_value) > 0 and bufs):
            bits = int(inner_enc.flat.bits_per_value) * dim
            return FixedWidthBlock(flat.select_values(bufs[0], bits // 8, select, ctx), bits, int(select.size))
        return select_block(decode_miniblock(enc, bufs, ctx), select)
    valid = None
    if enc.has_validity:
        if len(bufs) < 2:
            raise ctx.corrupt("FixedSizeList with item validity but no validity chunk buffer")
        valid = _chunk_bits(bufs[0].with_counts(bufs[0].counts * dim), ctx)
        bufs = bufs[1:]
    inner = [cb.with_counts(cb.counts * dim) for cb in bufs]
    return _wrap(dispatch.decode_miniblock(enc.values, inner, ctx), dim, bufs[0].num_values, ctx, valid)


def decode_block(enc, buf: np.ndarray, num_values: int, ctx: DecodeContext) -> FixedWidthBlock:
    if enc.has_validity:
        raise ctx.unsupported("FixedSizeList with item validity as a block encoding")
    dim = int(enc.items_per_value)
    return _wrap(dispatch.decode_block(enc.values, buf, num_values * dim, ctx), dim, num_values, ctx)


def _layers(enc) -> tuple[list[tuple[int, bool]], Any]:
    """(dimension, has_validity) per layer, outer first, and the inner-most values encoding
    (a protobuf message)."""
    layers: list[tuple[int, bool]] = []
    while True:
        layers.append((int(enc.items_per_value), bool(enc.has_validity)))
        inner = enc.values
        if inner.WhichOneof("compression") != "fixed_size_list":
            return layers, inner
        enc = inner.fixed_size_list


def has_validity(enc) -> bool:
    layers, _inner = _layers(enc)
    return any(v for _d, v in layers)


def item_bits(enc, ctx: DecodeContext) -> int:
    """Bits per (whole list) value, for fixed-width per-value layouts: the values' bits plus,
    with item validity, each validity layer's bytes."""
    layers, inner = _layers(enc)
    total = int(np.prod([d for d, _v in layers]))
    bits = 0 if inner.WhichOneof("compression") == "constant" else total * dispatch.fixed_bits(inner, ctx)
    cum = 1
    for dim, valid in layers:
        cum *= dim
        if valid:
            bits += 8 * ((cum + 7) // 8)
    return bits


def unzip_per_value(enc, raw: FixedWidthBlock, ctx: DecodeContext) -> FixedWidthBlock:
    """Full-zip values of fixed-size lists with item validity: split each row into its
    validity bits and its value bytes (see the module docstring)."""
    layers, inner = _layers(enc)
    n = raw.num_values
    row = raw.bits_per_value // 8
    rows = raw.as_bytes()[: n * row].reshape(n, row)
    validity: list[np.ndarray | None] = []
    cum, off = 1, 0
    for dim, valid in layers:
        cum *= dim
        if not valid:
            validity.append(None)
            continue
        nbytes = (cum + 7) // 8
        bits = np.unpackbits(rows[:, off : off + nbytes], axis=1, bitorder="little")[:, :cum]
        validity.append(bits.reshape(-1).astype(np.bool_))
        off += nbytes
    if inner.WhichOneof("compression") == "constant":
        if off != row:
            raise ctx.corrupt("full-zip fixed-size list of null items holds value bytes")
        return FixedWidthBlock(np.zeros(0, np.uint8), 0, n, tuple(validity))
    item = dispatch.fixed_bits(inner, ctx)
    if item % 8:
        raise ctx.unsupported("full-zip fixed-size lists of booleans with item validity")
    data = np.ascontiguousarray(rows[:, off:]).reshape(-1)
    if data.size != n * cum * item // 8:
        raise ctx.corrupt("full-zip fixed-size list row size disagrees with its encoding")
    return FixedWidthBlock(data, cum * item, n, tuple(validity))
