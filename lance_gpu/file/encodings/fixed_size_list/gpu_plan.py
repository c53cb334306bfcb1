# SPDX-License-Identifier: Apache-2.0
"""Device planning of FixedSizeList values (host side): a FixedSizeList{items_per_value}
without item validity (``has_validity`` false), possibly nested, over Flat{bits} is Flat
items, ``items`` (the product of the nested ``items_per_value``) of them per value, back to
back: planned as Flat values of that many items (:func:`flat_plan.items_form`; the device
copies or spreads them).

FixedSizeList{items_per_value, has_validity} layers (one or nested) over Flat{bits} in a
mini-block page (a chunk buffer per layer with item validity, outer layer first: the chunk's
items of that layer, ``count * items so far`` of them, as validity bits LSB first; then a
buffer of its Flat items) are ``("fsl_valid", (items, bits, valid))``, ``valid`` holding per
such buffer ``(before, per)``: the layer's item validity region starts ``before * num_values``
bytes after the leaf's (``LeafPlan.item_pos``; the regions of the layers above it, a byte
per item each, layer-major: ``LeafPlan.item_layers``) and holds ``per`` bytes a value.  The
values are copied (or spread) from the last buffer as Flat values are; the validity bits
spread to a byte per item into their layer's region (``DeviceColumn.item_validity`` and,
nested, ``DeviceColumn.inner_item_validity``).  Its emission is the registered
``fsl_valid`` family (:func:`emit_values`): per chunk a ``bits`` row per validity buffer,
then its items' rows as Flat values' (``copy``, or ``bits`` for boolean items;
``flat_plan.emit_items``).  pylance 14 marks each layer by its own nulls: items only (the
inner-most layer), lists of items only (the outer), or both (three buffers).

The same layers in a full-zip page (each row, after its control word, per layer with item
validity, outer first: ``ceil(items so far / 8)`` bytes of that layer's validity bits, LSB
first; then its Flat items; what pylance writes for values of 256 bytes or more) are
``("fsl_valid", (items, bits, valid))`` too, at most two layers with item validity over
whole-byte items: the full-zip walk spreads each row's bits to a byte per item of their
layer (``idim`` / ``idim2``) and copies the items after them.  Boolean items with item
validity are never full-zip in pylance 14 files (it writes them in mini-block pages
whatever their size, and panics when a field asks for full-zip); the device leaves them to
the CPU, as it does three or more layers with item validity.
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


def layers(enc: Any) -> tuple[tuple[int, bool], ...]:
    """``(items per value so far, has_validity)`` per FixedSizeList layer of ``enc``, outer
    first: ``((2, True), (6, False))`` for FixedSizeList{2, has_validity}(FixedSizeList{3}(...))."""
    out = []
    items = 1
    while enc.WhichOneof("compression") == "fixed_size_list":
        fsl = enc.fixed_size_list
        items *= int(fsl.items_per_value)
        out.append((items, bool(fsl.has_validity)))
        enc = fsl.values
    return tuple(out)


def _inner(enc: Any) -> Any:
    while enc.WhichOneof("compression") == "fixed_size_list":
        enc = enc.fixed_size_list.values
    return enc


def valid_layers(enc: Any) -> tuple[int, int, tuple[tuple[int, int], ...]] | None:
    """``(items per value, bits per item, valid)`` of FixedSizeList layers some of which
    carry item validity, over Flat items without a compressed data section (None: no layer
    carries it, or another inner encoding); ``valid``: per layer with item validity, outer
    first, ``(before, per)``: the items per value of the layers above it, summed (where its
    region starts, in values), and its own (the module docstring)."""
    got = layers(enc)
    bits = flat_plan.flat_bits(_inner(enc))
    if bits is None or not any(v for _n, v in got):
        return None
    valid, before = [], 0
    for n, v in got:
        if v:
            valid.append((before, n))
        before += n
    return got[-1][0], bits, tuple(valid)


def value_form(enc: Any, leaf: DeviceLeaf, nbuf: int) -> tuple:
    """``("flat", (items, bits))`` of a mini-block page's FixedSizeList(Flat) values
    (``enc``, ``nbuf`` chunk buffers) for ``leaf`` (:func:`flat_plan.items_form`), or
    ``("fsl_valid", (items, bits, valid))`` of layers with item validity (a chunk buffer per
    such layer, then the items: the module docstring); raises ``DeviceUnsupported`` where
    the device does not decode them."""
    if leaf.kind != "var" and any(v for _n, v in layers(enc)):
        valid = valid_layers(enc)
        if valid is None:
            raise DeviceUnsupported("fixed-size lists with item validity over items other than Flat")
        if nbuf != len(valid[2]) + 1:
            raise DeviceUnsupported(f"fixed-size list with item validity in {nbuf} chunk buffers")
        return "fsl_valid", (*flat_plan.items_form(valid[0], valid[1], leaf)[1], valid[2])
    one_chunk_buffer(nbuf)
    got = flat_items(enc) if leaf.kind != "var" else None
    if got is None:
        raise refuse_values("fixed_size_list", leaf)
    return flat_plan.items_form(got[0], got[1], leaf)


def full_zip_form(enc: Any) -> tuple | None:
    """``("flat", (items, bits))`` of full-zip FixedSizeList(Flat) values (copied), or
    ``("fsl_valid", (items, bits, valid))`` of one or two layers with item validity over
    whole-byte Flat items (each row's validity bytes, layer by layer, before its items: the
    module docstring; ``valid`` as :func:`valid_layers`); None with boolean items with item
    validity, three layers or more with it, or another inner encoding."""
    if any(v for _n, v in layers(enc)):
        got = valid_layers(enc)
        return None if got is None or got[1] % 8 or len(got[2]) > 2 else ("fsl_valid", got)
    flat = flat_items(enc)
    return None if flat is None else ("flat", flat)


def emit_values(unit: DeviceUnit, enc: Any, arg: tuple[int, int, tuple[tuple[int, int], ...]], ch: Any, dst: np.ndarray,
                ctx: DecodeContext) -> None:
    """The work of mini-block chunks of fixed-size lists with item validity (the
    ``fsl_valid`` family; ``arg``: ``(items per value, bits per item, valid)``,
    :func:`value_form`): chunk ``i`` of ``ch`` (the device pre-pass's chunks: ``counts``,
    ``value``: its first value's index in its leaf, ``item_base`` / ``item_values``: where
    its leaf's item validity bytes start in the fixed arena and the leaf's values, ``bufs``:
    chunks x buffers x (arena byte, size)) has, in buffer ``j`` (``valid[j]``: ``(before,
    per)``), ``counts[i] * per`` validity bits, LSB first, spread (the ``bits`` family) to
    the bytes from ``item_base[i] + before * item_values[i] + value[i] * per`` (a byte per
    item of that layer, value-major), and its Flat items in the buffer after them, to byte
    ``dst[i]`` of the fixed arena as Flat values' are (``flat_plan.emit_items``).  Raises
    ``ctx.corrupt`` where a chunk's validity buffer is shorter than its items' bits or its
    items buffer is short."""
    items, bits, valid = arg
    for j, (before, per) in enumerate(valid):
        nitems = ch.counts * per
        if np.any(ch.bufs[:, j, 1] < (nitems + 7) // 8):
            raise ctx.corrupt("fixed-size-list validity chunk shorter than its items")
        unit.bits.add(src=8 * np.ascontiguousarray(ch.bufs[:, j, 0]), count=nitems,
                      dst=ch.item_base + before * ch.item_values + ch.value * per)
    last = len(valid)
    flat_plan.emit_items(unit, (items, bits), ch.counts, np.ascontiguousarray(ch.bufs[:, last, 0]), ch.bufs[:, last, 1], dst, ctx)


def validity_bytes(items: int) -> int:
    """Bytes of one value's item validity bits (``items`` of them) in a full-zip row."""
    return (items + 7) // 8


def row_validity_bytes(valid: tuple[tuple[int, int], ...]) -> int:
    """Bytes of one value's item validity in a full-zip row: every layer's (``valid``, as
    :func:`valid_layers`)."""
    return sum(validity_bytes(per) for _before, per in valid)


__all__ = ["emit_values", "flat_items", "full_zip_form", "layers", "row_validity_bytes", "valid_items", "valid_layers",
           "validity_bytes", "value_form"]
