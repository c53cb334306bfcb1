# SPDX-License-Identifier: Apache-2.0
"""Device planning of page dictionaries (host side): the index encodings the device decodes
and the dictionary items decoded on the host in the layout the device's gather reads.

* Indices: Flat{8/16/32/64}, InlineBitpacking{8/16/32/64} (without a values encoding) or
  Rle{Flat{8/16/32/64}, Flat{8}} (:func:`index_key`); decoded to index scratch of that width.
* Fixed-width items (:func:`fixed_items`): ``width`` bytes per item back to back (a
  boolean leaf: one byte, 0 or 1, per item).
* Variable-width items: the block's bytes and its offsets as int64 (``nitems + 1`` of
  them, relative to the block's bytes).
* Many pages' dictionaries together (:func:`together`): the items of page ``k`` at byte
  ``item_start[k]`` of one blob; variable width: its offsets at int64 ``first_offset[k]``
  of one offsets array (:func:`variable.decode_blocks32`).

Emission: :func:`emit_indices` adds the index work of a page's chunks through the index
encoding's own emission (``unpack``, index ``copy``, ``rle`` rows); where the items and the
index scratch are placed is the planner's (``lance_gpu.gpu.plan``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from lance_gpu.file import encodings
from lance_gpu.file.blocks import FixedWidthBlock, VariableWidthBlock
from lance_gpu.file.encodings import general as general_enc
from lance_gpu.file.encodings import variable as variable_enc
from lance_gpu.file.encodings.base import DecodeContext, DeviceUnit, DeviceUnsupported
from lance_gpu.file.encodings.bitpacking import gpu_plan as bitpacking_plan
from lance_gpu.file.encodings.flat import gpu_plan as flat_plan
from lance_gpu.file.encodings.rle import gpu_plan as rle_plan

#: the index widths the device decodes dictionary indices at (RLE's value words; Flat and
#: InlineBitpacking indices at the same widths, :func:`index_key`): a read unit keeps one
#: index scratch array, and one index copy list, per width (``UnitPlan.index_size``)
INDEX_BITS: tuple[int, ...] = rle_plan.WORD_BITS


def index_key(enc: Any) -> tuple[int, str] | None:
    """``(bits per index, index encoding kind)`` of a dictionary page's ``value_compression``
    the device decodes (None: another encoding)."""
    kind = enc.WhichOneof("compression")
    if kind == "flat":
        bits = int(enc.flat.bits_per_value)
        return (bits, kind) if not enc.flat.HasField("data") and bits in INDEX_BITS else None
    if kind == "inline_bitpacking":
        bits = int(enc.inline_bitpacking.uncompressed_bits_per_value)
        return (bits, kind) if not enc.inline_bitpacking.HasField("values") and bits in INDEX_BITS else None
    if kind == "rle":
        got = rle_plan.value_bits(enc)
        return None if got is None else (got, kind)
    return None


def index_form(enc: Any) -> tuple[int, str]:
    """``(bits per index, kind)`` of a dictionary-index value encoding the GPU decodes
    (:func:`index_key`); raises :class:`DeviceUnsupported` for another."""
    key = index_key(enc)
    if key is None:
        raise DeviceUnsupported(f"{enc.WhichOneof('compression')} dictionary indices")
    return key


def emit_indices(unit: DeviceUnit, enc: Any, dictionary: tuple[int, int], ch: Any, starts: np.ndarray, ctx: DecodeContext) -> None:
    """The dictionary indices of one page's chunks ``ch`` (encoded ``enc``, chunk buffer 0
    at arena bytes ``starts``), to the index scratch from ``dictionary`` (``(index bits,
    first index item)``; ``ch.index_first``, where set, names each chunk's first item):
    unpacked (InlineBitpacking), copied (Flat) or expanded (Rle) by their encoding's emission."""
    bits, ipos = dictionary
    kind = index_form(enc)[1]
    word = bits // 8
    # index items of the page's chunks
    first = ipos + (ch.value - ch.value[0]) if ch.index_first is None else ch.index_first
    if kind == "inline_bitpacking":
        bitpacking_plan.emit_inline(unit, f"index{bits}", bits, first, ch.blocks)
    elif kind == "flat":
        nbytes = flat_plan.chunk_bytes(ch.bufs[:, 0, 1], ch.counts, 1, bits, ctx)
        unit.copy_index[bits].add(src=starts, len=nbytes, dst=first * word)
    else:
        rle_plan.emit_chunks(unit, f"index{bits}", enc, ch, first * word, ctx)


def index_buffers(enc: Any) -> int:
    """Chunk buffers the indices of a dictionary page encoded ``enc`` take: two for Rle
    (run values, run lengths), else one."""
    return 2 if enc.WhichOneof("compression") == "rle" else 1


def fixed_items(items: Any, kind: str, width: int, arrow_type: Any, ctx: DecodeContext) -> np.ndarray:
    """A fixed-width (``kind`` "fixed", ``width`` bytes) or boolean (``kind`` "bool", width
    1) leaf's decoded dictionary block as the gather reads it: ``width`` bytes per item
    (booleans one byte per bit); raises ``ctx.corrupt`` for items of another width or a
    variable-width block."""
    if not isinstance(items, FixedWidthBlock) or kind == "var":
        raise ctx.corrupt("fixed-width dictionary for a variable-width column")
    if kind == "bool":
        if items.bits_per_value != width:
            raise ctx.corrupt(f"decoded {items.bits_per_value}-bit dictionary items for {arrow_type}")
        raw = np.unpackbits(items.as_bytes(), bitorder="little")[: items.num_values * width]
    else:
        if items.bits_per_value != 8 * width:
            raise ctx.corrupt(f"decoded {items.bits_per_value}-bit dictionary items for {arrow_type}")
        raw = items.as_bytes()[: items.num_values * width]
    return np.ascontiguousarray(raw, np.uint8)


def one(mb: Any, buf: np.ndarray, kind: str, width: int, arrow_type: Any,
        ctx: DecodeContext) -> tuple[np.ndarray, np.ndarray | None, int]:
    """The dictionary of one page encoded as ``mb`` (its ``MiniBlockLayout``), dictionary
    buffer ``buf``, decoded (:func:`encodings.decode_block`, refusing what the CPU decoders
    refuse): ``(item bytes, int64 offsets or None for fixed width, item count)``."""
    items = encodings.decode_block(mb.dictionary, buf, int(mb.num_dictionary_items), ctx)
    if isinstance(items, VariableWidthBlock):
        if kind != "var":
            raise ctx.corrupt("variable-width dictionary for a fixed-width column")
        return (np.ascontiguousarray(items.data, np.uint8), np.ascontiguousarray(items.offsets, np.int64),
                items.num_values)
    return fixed_items(items, kind, width, arrow_type, ctx), None, items.num_values


@dataclass(slots=True, frozen=True)
class Together:
    """Many pages' dictionaries as one blob of items (and, variable width, one int64
    offsets array): page ``k``'s items at byte ``item_start[k]`` of ``blob``, ``nitems[k]``
    of them, its offsets from entry ``first_offset[k]`` of ``offsets``."""

    blob: np.ndarray
    item_start: np.ndarray
    nitems: np.ndarray
    offsets: np.ndarray | None
    first_offset: np.ndarray


def variable_blocks(layouts: list, bufs: list[np.ndarray], nitems: np.ndarray, ctx: DecodeContext) -> tuple[np.ndarray, ...] | None:
    """:func:`variable.decode_blocks32` of the Variable (32-bit offsets) dictionary blocks
    ``bufs`` of pages encoded as ``layouts`` (decompressed first where General wraps them);
    None where a page's dictionary is encoded otherwise or a block fails a check."""
    blocks = []
    for mb, buf in zip(layouts, bufs, strict=True):
        enc = mb.dictionary
        general = enc.WhichOneof("compression") == "general"
        if general:  # a compressed block (pylance 2.2: LZ4): decompressed page by page
            enc = enc.general.values
        if enc.WhichOneof("compression") != "variable" or enc.variable.HasField("values"):
            return None
        off = enc.variable.offsets
        if off.WhichOneof("compression") != "flat" or int(off.flat.bits_per_value) != 32:
            return None
        blocks.append(general_enc.decompress(mb.dictionary.general.compression, buf, ctx) if general else buf)
    return variable_enc.decode_blocks32(blocks, nitems)


def together(layouts: list, bufs: list[np.ndarray], kind: str, width: int, arrow_type: Any,
             ctx: DecodeContext) -> Together | None:
    """The dictionaries of pages encoded as ``layouts`` (``MiniBlockLayout``), dictionary
    buffers ``bufs``, of one leaf, decoded together:

    * variable width: every page's Variable (32-bit offsets) block, decompressed first where
      General wraps it, checked by one :func:`variable.decode_blocks32` over all of them
      (:func:`variable_blocks`);
    * fixed width and booleans: every page's block decoded (:func:`encodings.decode_block`,
      refusing what the CPU decoders refuse), then each checked (:func:`fixed_items`) and
      the items put back to back.

    None (each page is decoded alone, :func:`one`) for fewer than two pages, other
    variable-width dictionary encodings, or a Variable block that fails a check."""
    n = len(layouts)
    if n < 2:
        return None
    nitems = np.fromiter((int(mb.num_dictionary_items) for mb in layouts), np.int64, n)
    if kind == "var":
        got = variable_blocks(layouts, bufs, nitems, ctx)
        if got is None:
            return None
        blob, item_start, offsets, first_offset = got
        return Together(blob, item_start[:n], nitems, offsets, first_offset[:n])
    decoded = [encodings.decode_block(mb.dictionary, buf, int(k), ctx) for mb, buf, k in zip(layouts, bufs, nitems.tolist(), strict=True)]
    blocks = [fixed_items(items, kind, width, arrow_type, ctx) for items in decoded]
    sizes = np.fromiter((b.size for b in blocks), np.int64, n)
    item_start = np.zeros(n, np.int64)
    np.cumsum(sizes[:-1], out=item_start[1:])
    nitems = np.fromiter((items.num_values for items in decoded), np.int64, n)
    return Together(np.concatenate(blocks), item_start, nitems, None, np.zeros(n, np.int64))


__all__ = ["INDEX_BITS", "Together", "emit_indices", "fixed_items", "index_buffers", "index_form", "index_key", "one", "together", "variable_blocks"]
