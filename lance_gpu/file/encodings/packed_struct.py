# SPDX-License-Identifier: Apache-2.0
"""PackedStruct and VariablePackedStruct: the fields of a struct stored row by row.

Lance writes these for blob descriptors (and small all-fixed-width structs):

* ``PackedStruct`` (mini-block pages): each row is the fields' values back to back,
  ``bits_per_value[i] / 8`` bytes each, little-endian; ``values`` encodes the rows as
  fixed-width values of ``sum(bits_per_value)`` bits (``Flat``). Decoded here to a
  :class:`FixedWidthBlock` of whole rows; the caller splits the fields
  (:func:`split_fixed_rows`).
* ``VariablePackedStruct`` (full-zip pages): each row is, per field, either
  ``bits_per_value / 8`` bytes (a fixed-width field, ``value`` Flat) or a little-endian
  length of ``bits_per_length / 8`` bytes followed by that many bytes (a ``Variable``
  field). The full-zip walk yields one byte string per row; the rows are returned as a
  :class:`VariableWidthBlock` for the caller to split (:func:`split_variable_rows`).
"""

from __future__ import annotations

import numpy as np

from lance_gpu.errors import CorruptFileError
from lance_gpu.file.blocks import Block, FixedWidthBlock
from lance_gpu.file.encodings import dispatch
from lance_gpu.file.encodings.base import ChunkBuffers, DecodeContext, which


def decode_miniblock(enc, bufs: list[ChunkBuffers], ctx: DecodeContext) -> Block:
    """Whole packed rows of a mini-block page (a FixedWidthBlock of sum(bits) bits)."""
    widths = [int(b) for b in enc.bits_per_value]
    if not widths or any(w <= 0 or w % 8 for w in widths):
        raise ctx.unsupported(f"packed struct with field widths {widths}")
    if which(enc.values, ctx) != "flat":
        raise ctx.unsupported(f"packed struct rows stored as {which(enc.values, ctx)}")
    block = dispatch.decode_miniblock(enc.values, bufs, ctx)
    if not isinstance(block, FixedWidthBlock) or block.bits_per_value != sum(widths):
        raise ctx.corrupt(f"packed struct rows are not {sum(widths)}-bit values")
    return block


def split_fixed_rows(rows: np.ndarray, widths_bytes: list[int], path: str) -> list[np.ndarray]:
    """Split ``rows`` (n x row bytes, uint8) into one byte matrix per field."""

    if rows.ndim != 2 or rows.shape[1] != sum(widths_bytes):
        raise CorruptFileError(path, f"packed rows of {rows.shape[-1]} bytes, expected {sum(widths_bytes)}")
    out, pos = [], 0
    for w in widths_bytes:
        out.append(np.ascontiguousarray(rows[:, pos : pos + w]))
        pos += w
    return out


def split_variable_rows(
    offsets: np.ndarray, data: np.ndarray, layout: list[tuple[str, int]], path: str
) -> list[list[bytes | int]]:
    """Per field, the values of every row of a VariablePackedStruct.

    ``layout``: per field ``("fixed", bytes)`` (an unsigned little-endian integer) or
    ``("variable", length bytes)`` (a byte string).
    """

    fields: list[list[bytes | int]] = [[] for _ in layout]
    raw = data.tobytes()
    for i in range(offsets.size - 1):
        pos, end = int(offsets[i]), int(offsets[i + 1])
        for f, (kind, width) in enumerate(layout):
            if pos + width > end:
                raise CorruptFileError(path, f"packed row {i} is shorter than its fields")
            value = int.from_bytes(raw[pos : pos + width], "little")
            pos += width
            if kind == "variable":
                if pos + value > end:
                    raise CorruptFileError(path, f"packed row {i}: a value runs past the row")
                fields[f].append(raw[pos : pos + value])
                pos += value
            else:
                fields[f].append(value)
        if pos != end:
            raise CorruptFileError(path, f"packed row {i} has {end - pos} trailing bytes")
    return fields


def variable_layout(enc, ctx: DecodeContext) -> list[tuple[str, int]]:
    """``[("fixed", bytes) | ("variable", length bytes)]`` of a VariablePackedStruct."""
    out: list[tuple[str, int]] = []
    for f in enc.fields:
        kind = which(f.value, ctx)
        if kind == "flat" and f.bits_per_value % 8 == 0 and f.bits_per_value > 0:
            out.append(("fixed", int(f.bits_per_value) // 8))
        elif kind == "variable" and f.bits_per_length in (8, 16, 32, 64):
            out.append(("variable", int(f.bits_per_length) // 8))
        else:
            raise ctx.unsupported(f"variable packed struct field stored as {kind}")
    return out
