# SPDX-License-Identifier: Apache-2.0
"""Constant (compressive): every value equals ``value`` (block form only)."""

from __future__ import annotations

import numpy as np

from lance_gpu.file.blocks import FixedWidthBlock
from lance_gpu.file.encodings.base import ChunkBuffers, DecodeContext


def repeat_value(value: bytes, num_values: int) -> FixedWidthBlock:
    """A fixed-width block of ``num_values`` copies of ``value`` (its width in bytes)."""
    raw = np.frombuffer(value, np.uint8)
    width = raw.size
    if width in (1, 2, 4, 8):
        dt = np.dtype(f"<u{width}")
        data = np.full(num_values, raw.view(dt)[0], dt).view(np.uint8)
    else:
        data = np.tile(raw, num_values)
    return FixedWidthBlock(data, 8 * width, num_values)


def decode_block(enc, buf: np.ndarray, num_values: int, ctx: DecodeContext) -> FixedWidthBlock:
    if not enc.HasField("value"):
        raise ctx.corrupt("Constant encoding without a value")
    return repeat_value(enc.value, num_values)


def decode_miniblock(enc, bufs: list[ChunkBuffers], ctx: DecodeContext) -> FixedWidthBlock:
    return decode_block(enc, np.zeros(0, np.uint8), bufs[0].num_values, ctx)
