# SPDX-License-Identifier: Apache-2.0
"""Decoded data blocks: what every compressive decoder returns.

A block is the flat, buffer-level result of undoing one compressive encoding, before
structure (validity, lists, structs) is applied:

* :class:`FixedWidthBlock` holds ``num_values`` values of ``bits_per_value`` bits each.
  Widths that are whole bytes are stored as a little-endian byte array of
  ``num_values * bits_per_value / 8`` bytes (viewable as a numpy dtype); 1-bit values
  (booleans) are an LSB-first bitmap of ``ceil(num_values / 8)`` bytes.
* :class:`VariableWidthBlock` holds ``num_values`` byte strings as ``offsets`` (int64,
  ``num_values + 1`` entries, ``offsets[0] == 0``) into ``data``.

A block of fixed-size lists whose items can be null also carries the items' validity
(``FixedWidthBlock.fsl_validity``); the values of null items are don't-care bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast, overload

import numpy as np

from lance_gpu.errors import CorruptFileError


@dataclass(slots=True)
class FixedWidthBlock:
    data: np.ndarray  # uint8, or a typed view of the same bytes
    bits_per_value: int
    num_values: int
    #: fixed-size lists with null items: per list layer (outer first) the validity of that
    #: layer's items (bool, ``num_values * dims so far``), None for a layer without nulls
    fsl_validity: tuple[np.ndarray | None, ...] = ()

    def as_bytes(self) -> np.ndarray:
        return self.data.view(np.uint8) if self.data.dtype != np.uint8 else self.data

    def as_uint(self) -> np.ndarray:
        """The values as unsigned integers of their own width (8, 16, 32 or 64 bits)."""
        dt = _UINT_BY_BITS.get(self.bits_per_value)
        if dt is None:
            msg = f"no integer view for {self.bits_per_value}-bit values"
            raise ValueError(msg)
        return self.as_bytes()[: self.num_values * (self.bits_per_value // 8)].view(dt)


@dataclass(slots=True)
class VariableWidthBlock:
    offsets: np.ndarray  # int64, num_values + 1, starting at 0
    data: np.ndarray  # uint8
    #: set by a decoder that built the offsets itself: they start at 0, never decrease and
    #: end at ``len(data)`` (:mod:`lance_gpu.file.validate` then skips them)
    offsets_valid: bool = False
    #: set by a decoder that validated the bytes as it wrote them: every value is
    #: well-formed UTF-8 (meaningful only with ``offsets_valid``)
    utf8_valid: bool = False

    @property
    def num_values(self) -> int:
        return len(self.offsets) - 1


Block = FixedWidthBlock | VariableWidthBlock

_UINT_BY_BITS = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def uint_dtype(bits: int, path: object = "<page>") -> np.dtype:
    dt = _UINT_BY_BITS.get(bits)
    if dt is None:
        raise CorruptFileError(path, f"unexpected integer width of {bits} bits")
    return np.dtype(dt)


def concat_blocks(blocks: list[Block]) -> Block:
    """Concatenate blocks of the same kind (pages of one column).

    All blocks are of the first one's class (the pages of one column decode to one kind of
    block); the casts below state that contract, they do not check it.
    """
    if len(blocks) == 1:
        return blocks[0]
    first = blocks[0]
    if isinstance(first, VariableWidthBlock):
        var_blocks = cast(list[VariableWidthBlock], blocks)
        sizes = [b.data.size for b in var_blocks]
        shifts = np.cumsum([0, *sizes[:-1]])
        offsets = np.concatenate(
            [first.offsets[:1].astype(np.int64)]
            + [b.offsets[1:].astype(np.int64) + s for b, s in zip(var_blocks, shifts)]
        )
        data = np.concatenate([b.data for b in var_blocks])
        return VariableWidthBlock(offsets, data)
    fixed_blocks = cast(list[FixedWidthBlock], blocks)
    bits = first.bits_per_value
    n = sum(b.num_values for b in fixed_blocks)
    validity = _concat_validity(fixed_blocks)
    if bits % 8:
        # Bit-packed values (booleans, or fixed-size lists of booleans): join as bits.
        bools = np.concatenate(
            [np.unpackbits(b.as_bytes(), bitorder="little")[: b.num_values * bits] for b in fixed_blocks]
        )
        return FixedWidthBlock(np.packbits(bools, bitorder="little"), bits, n, validity)
    nbytes = bits // 8
    data = np.concatenate([b.as_bytes()[: b.num_values * nbytes] for b in fixed_blocks])
    return FixedWidthBlock(data, bits, n, validity)


def _concat_validity(blocks: list[FixedWidthBlock]) -> tuple[np.ndarray | None, ...]:
    """Item validity of concatenated fixed-size-list blocks (all valid where a block has none)."""
    depth = max(len(b.fsl_validity) for b in blocks)
    out: list[np.ndarray | None] = []
    for k in range(depth):
        layer = [b.fsl_validity[k] if k < len(b.fsl_validity) else None for b in blocks]
        if all(v is None for v in layer):
            out.append(None)
            continue
        per_value = next(v.size // b.num_values for v, b in zip(layer, blocks) if v is not None and b.num_values)
        out.append(np.concatenate([v if v is not None else np.ones(b.num_values * per_value, np.bool_) for v, b in zip(layer, blocks)]))
    return tuple(out)


def _select_validity(block: FixedWidthBlock, idx: np.ndarray) -> tuple[np.ndarray | None, ...]:
    n = block.num_values
    return tuple(None if v is None else v.reshape(n, -1)[idx].reshape(-1) for v in block.fsl_validity)


def slice_block(block: Block, start: int, count: int) -> Block:
    """Values ``start .. start + count`` of ``block``, sharing its bytes where whole bytes
    hold them (a variable-width slice copies only its offsets)."""
    if isinstance(block, VariableWidthBlock):
        return _variable_run(block, start, start + count)
    if block.bits_per_value % 8:
        bits = block.bits_per_value
        if (start * bits) % 8 or block.fsl_validity:
            return select_block(block, np.arange(start, start + count, dtype=np.int64))
        # a run starting on a byte (streaming windows of booleans): its bytes, shared; bits
        # past ``count`` in the last byte are not values (Arrow ignores them)
        return FixedWidthBlock(block.as_bytes()[start * bits // 8 : -(-(start + count) * bits // 8)], bits, count)
    width = block.bits_per_value // 8
    validity = tuple(None if v is None else v.reshape(block.num_values, -1)[start : start + count].reshape(-1)
                     for v in block.fsl_validity)
    return FixedWidthBlock(block.as_bytes()[start * width : (start + count) * width], block.bits_per_value, count, validity)


def _variable_run(block: VariableWidthBlock, lo: int, hi: int) -> VariableWidthBlock:
    """Values ``lo .. hi`` of a variable-width block: its offsets rebased to 0 over a view
    of its bytes.  What the decoder established of the block (offsets built by itself,
    every value well-formed UTF-8) holds for any run of its values, so the flags carry over
    and the run is not validated again."""
    offsets = block.offsets[lo : hi + 1]
    first = int(offsets[0])
    return VariableWidthBlock(offsets - first, block.data[first : int(offsets[-1])], block.offsets_valid, block.utf8_valid)


@overload
def select_block(block: FixedWidthBlock, idx: np.ndarray) -> FixedWidthBlock: ...
@overload
def select_block(block: VariableWidthBlock, idx: np.ndarray) -> VariableWidthBlock: ...
@overload
def select_block(block: Block, idx: np.ndarray) -> Block: ...
def select_block(block: Block, idx: np.ndarray) -> Block:
    """The values of ``block`` at positions ``idx`` (in that order); a run of consecutive
    positions is a slice (the bytes are not copied)."""
    run = bool(idx.size) and int(idx[-1]) - int(idx[0]) + 1 == idx.size and (idx.size < 2 or idx[1] > idx[0])
    if isinstance(block, VariableWidthBlock):
        if run:
            return _variable_run(block, int(idx[0]), int(idx[-1]) + 1)
        from cuda_kernels.gather import gather_binary

        offsets, data = gather_binary(block.offsets, block.data, idx)
        return VariableWidthBlock(offsets, data)
    bits = block.bits_per_value
    validity = _select_validity(block, idx)
    if bits % 8:
        bools = np.unpackbits(block.as_bytes(), bitorder="little")[: block.num_values * bits].reshape(-1, bits)
        return FixedWidthBlock(np.packbits(bools[idx].reshape(-1), bitorder="little"), bits, idx.size, validity)
    width = bits // 8
    dt = _UINT_BY_BITS.get(bits)
    raw = block.as_bytes()[: block.num_values * width]
    if run:
        lo = int(idx[0]) * width
        return FixedWidthBlock(raw[lo : lo + idx.size * width], bits, idx.size, validity)
    if dt is not None:
        taken = raw.view(dt)[idx]
    else:
        taken = raw.reshape(-1, width)[idx]
    return FixedWidthBlock(np.ascontiguousarray(taken).view(np.uint8).reshape(-1), bits, idx.size, validity)


def per_bucket(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """How many of the ascending ``values`` fall in each bucket ``[edges[i], edges[i + 1])``
    (``edges`` ascending, ``edges[0] <= values[0]``, ``values[-1] < edges[-1]``): int64, one
    count per bucket.  The searches run in whichever direction is fewer (values in edges,
    or edges in values), so a few rows of many chunks and many rows of a few chunks both
    cost about the smaller of the two sizes."""
    if values.size <= edges.size:
        bucket = np.searchsorted(edges, values, side="right") - 1
        return np.bincount(bucket, minlength=edges.size - 1).astype(np.int64, copy=False)
    return np.diff(np.searchsorted(values, edges, side="left")).astype(np.int64, copy=False)
