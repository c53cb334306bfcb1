# SPDX-License-Identifier: Apache-2.0
"""Device planning of FixedSizeList values (host side): a FixedSizeList{items_per_value}
without item validity (``has_validity`` false), possibly nested, over Flat{bits} is Flat
items, ``items`` (the product of the nested ``items_per_value``) of them per value, back to
back: planned as Flat values of that many items (:func:`flat_plan.items_form`; the device
copies or spreads them).

One layer of FixedSizeList{items_per_value, has_validity} over Flat{bits} in a mini-block
page (two chunk buffers: the chunk's items' validity bits, LSB first, then its Flat items)
is ``("fsl_valid", (items, bits))``: the values copied (or spread) from buffer 1 as Flat
values are, the validity bits of buffer 0 spread to one byte per item into the leaf's item
validity region (``LeafPlan.item_pos``, ``DeviceColumn.item_validity``).  Its emission is
the registered ``fsl_valid`` family (:func:`emit_values`): per chunk a ``bits`` row (the
validity bits to a byte per item), then its items' rows as Flat values' (``copy``, or
``bits`` for boolean items; ``flat_plan.emit_items``).

The same layer in a full-zip page (each row, after its control word: ``ceil(items / 8)``
bytes of its items' validity bits, LSB first, then its Flat items; what pylance writes
for values of 256 bytes or more) is ``("fsl_valid", (items, bits))`` too: the full-zip
walk spreads each row's bits to a byte per item and copies the items after them.  Nested
item validity (and boolean items with it in full-zip pages) is decoded on the CPU.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lance_gpu.file.encodings.base import DecodeContext, DeviceLeaf, DeviceUnit, DeviceUnsupported, one_chunk_buffer, refuse_values
from lance_gpu.file.encodings.flat import gpu_plan as flat_plan


def flat_items(enc: Any) -> tuple[int, int] | None:
    """``(items per value, bits per item)`` of FixedSizeList(...(Flat)) without item
    validity and without a compressed data section (None: another layout)."""
    items = 1
    while enc.WhichOneof("compression") == "fixed_size_list":
        fsl = enc.fixed_size_list
        if fsl.has_validity:
            return None
        items *= int(fsl.items_per_value)
        enc = fsl.values
    bits = flat_plan.flat_bits(enc)
    return None if bits is None else (items, bits)


def valid_items(enc: Any) -> tuple[int, int] | None:
    """``(items per value, bits per item)`` of one layer of FixedSizeList with item validity
    over Flat items without a compressed data section (None: another layout, nested lists
    included)."""
    fsl = enc.fixed_size_list
    if not fsl.has_validity or fsl.values.WhichOneof("compression") != "flat":
        return None
    bits = flat_plan.flat_bits(fsl.values)
    return None if bits is None else (int(fsl.items_per_value), bits)


def value_form(enc: Any, leaf: DeviceLeaf, nbuf: int) -> tuple:
    """``("flat", (items, bits))`` of a mini-block page's FixedSizeList(Flat) values
    (``enc``, ``nbuf`` chunk buffers) for ``leaf`` (:func:`flat_plan.items_form`), or
    ``("fsl_valid", (items, bits))`` of one layer with item validity (two chunk buffers,
    the module docstring); raises ``DeviceUnsupported`` where the device does not decode
    them."""
    if enc.fixed_size_list.has_validity and leaf.kind != "var":
        got = valid_items(enc)
        if got is None:
            raise DeviceUnsupported("nested fixed-size lists with item validity, or items other than Flat")
        if nbuf != 2:
            raise DeviceUnsupported(f"fixed-size list with item validity in {nbuf} chunk buffers")
        return "fsl_valid", flat_plan.items_form(*got, leaf)[1]
    one_chunk_buffer(nbuf)
    got = flat_items(enc) if leaf.kind != "var" else None
    if got is None:
        raise refuse_values("fixed_size_list", leaf)
    return flat_plan.items_form(*got, leaf)


def full_zip_form(enc: Any) -> tuple | None:
    """``("flat", (items, bits))`` of full-zip FixedSizeList(Flat) values (copied), or
    ``("fsl_valid", (items, bits))`` of one layer with item validity over whole-byte Flat
    items (each row's validity bytes before its items: the module docstring); None with
    nested item validity, boolean items with item validity or another inner encoding."""
    if enc.fixed_size_list.has_validity:
        got = valid_items(enc)
        return None if got is None or got[1] % 8 else ("fsl_valid", got)
    got = flat_items(enc)
    return None if got is None else ("flat", got)


def emit_values(unit: DeviceUnit, enc: Any, arg: tuple[int, int], ch: Any, dst: np.ndarray, ctx: DecodeContext) -> None:
    """The work of mini-block chunks of one layer of fixed-size lists with item validity
    (the ``fsl_valid`` family; ``arg``: ``(items per value, bits per item)``,
    :func:`value_form`): chunk ``i`` of ``ch`` (the device pre-pass's chunks: ``counts``,
    ``value``: its first value's index in its leaf, ``item_base``: where its leaf's item
    validity bytes start in the fixed arena, ``bufs``: chunks x buffers x (arena byte,
    size)) has ``counts[i] * items`` validity bits, LSB first, in buffer 0, spread (the
    ``bits`` family) to the bytes from ``item_base[i] + value[i] * items`` (a byte per item,
    value-major), and its Flat items in buffer 1, to byte ``dst[i]`` of the fixed arena as
    Flat values' are (``flat_plan.emit_items``).  Raises ``ctx.corrupt`` where a chunk's
    validity buffer is shorter than its items' bits or its items buffer is short."""
    dim = arg[0]
    nitems = ch.counts * dim
    if np.any(ch.bufs[:, 0, 1] < (nitems + 7) // 8):
        raise ctx.corrupt("fixed-size-list validity chunk shorter than its items")
    unit.bits.add(src=8 * np.ascontiguousarray(ch.bufs[:, 0, 0]), count=nitems, dst=ch.item_base + ch.value * dim)
    flat_plan.emit_items(unit, arg, ch.counts, np.ascontiguousarray(ch.bufs[:, 1, 0]), ch.bufs[:, 1, 1], dst, ctx)


def validity_bytes(items: int) -> int:
    """Bytes of one value's item validity bits (``items`` of them) in a full-zip row."""
    return (items + 7) // 8


__all__ = ["emit_values", "flat_items", "full_zip_form", "valid_items", "validity_bytes", "value_form"]
