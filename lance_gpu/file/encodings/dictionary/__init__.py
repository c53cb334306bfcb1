# SPDX-License-Identifier: Apache-2.0
"""Dictionary: values stored once, rows hold indices into them.

In 2.1 / 2.2 pages the dictionary is a page-level feature of the mini-block layout (fields
``dictionary`` and ``num_dictionary_items``, items in page buffer 2, decoded whole with the
block decoder named there; in 2.2 always General{LZ4} over Flat or block Variable).  The
chunk values are 0-based indices, usually InlineBitpacking{32}.  The nested
CompressiveEncoding.Dictionary form (indices, items) is decoded the same way.

This module is the CPU decode; the package holds the rest of the encoding:
:mod:`.gpu_plan` (device planning), :mod:`.decode_kernels` (device decoding: indices to item
spans) and :mod:`.device` (device encoders: the dictionaries of samples).
"""

from __future__ import annotations

import numpy as np

from lance_gpu.cpu import memory
from lance_gpu.file.blocks import Block, FixedWidthBlock, VariableWidthBlock
from lance_gpu.file.encodings.base import ChunkBuffers, DecodeContext


def indices_of(block: FixedWidthBlock, ctx: DecodeContext) -> np.ndarray:
    if block.bits_per_value not in (8, 16, 32, 64):
        raise ctx.corrupt(f"dictionary indices of {block.bits_per_value} bits")
    return block.as_uint()


def apply(items: Block, indices: np.ndarray, ctx: DecodeContext) -> Block:
    """Gather dictionary ``items`` at ``indices`` (0-based)."""
    from cuda_kernels.errors import CorruptInputError
    from cuda_kernels.gather import gather_binary, gather_fixed

    try:
        if isinstance(items, VariableWidthBlock):
            offsets, data = gather_binary(items.offsets, items.data, indices, empty=memory.empty)
            return VariableWidthBlock(offsets, data)
        bits = items.bits_per_value
        if bits == 1:
            bools = np.unpackbits(items.as_bytes(), bitorder="little")[: items.num_values]
            taken = gather_fixed(bools, indices)
            return FixedWidthBlock(np.packbits(taken, bitorder="little"), 1, indices.size)
        width = bits // 8
        if bits in (8, 16, 32, 64):
            values = items.as_uint()
        else:
            values = items.as_bytes()[: items.num_values * width].reshape(-1, width)
        taken = gather_fixed(values, indices, empty=memory.empty)
        return FixedWidthBlock(np.ascontiguousarray(taken).view(np.uint8).reshape(-1), bits, indices.size)
    except CorruptInputError as exc:
        raise ctx.corrupt(f"dictionary index out of range ({exc})") from exc


def decode_miniblock(enc, bufs: list[ChunkBuffers], ctx: DecodeContext) -> Block:
    raise ctx.unsupported("nested Dictionary inside mini-block chunk values")


def decode_block(enc, buf: np.ndarray, num_values: int, ctx: DecodeContext) -> Block:
    raise ctx.unsupported("nested Dictionary block encoding")
