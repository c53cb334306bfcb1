# SPDX-License-Identifier: Apache-2.0
"""Device planning of Flat chunks (host side): a Flat{bits} chunk buffer is ``count`` values
of ``bits`` each, back to back; the device copies them (bytes) or spreads them (booleans, one
bit each).  Flat{16} levels (per chunk) are ``count`` u16 levels, copied.

FixedSizeList(Flat) values are Flat items, ``items`` of them per value
(:mod:`lance_gpu.file.encodings.fixed_size_list.gpu_plan`, which forms them with
:func:`items_form`).

Emission (the registered ``flat`` family and Flat16 levels): :func:`emit_values` adds a
``copy`` row per chunk (its bytes to the leaf's fixed-arena bytes) or, for 1-bit items, a
``bits`` row (spread to a byte per item) (:func:`emit_items`, which also emits the items of
fixed-size lists with item validity); :func:`emit_levels` a level ``copy`` row."""

from __future__ import annotations

from typing import Any

import numpy as np

from lance_gpu.file.encodings.base import DecodeContext, DeviceLeaf, DeviceUnit, DeviceUnsupported, one_chunk_buffer, refuse_values


def flat_bits(enc: Any) -> int | None:
    """``bits_per_value`` of a Flat encoding without a compressed data section (None:
    another encoding)."""
    if enc.WhichOneof("compression") != "flat" or enc.flat.HasField("data"):
        return None
    return int(enc.flat.bits_per_value)


def items_form(items: int, bits: int, leaf: DeviceLeaf) -> tuple:
    """``("flat", (items, bits))``: values of ``items`` Flat items of ``bits`` each, copied
    for a fixed-width ``leaf`` of as many bytes per value, spread to one byte per item for a
    boolean leaf of ``items`` 1-bit items; raises :class:`DeviceUnsupported` otherwise."""
    if leaf.kind == "bool" and bits == 1 and items == leaf.width:
        return "flat", (items, bits)
    if leaf.kind == "fixed" and bits % 8 == 0 and items * bits == 8 * leaf.width:
        return "flat", (items, bits)
    raise DeviceUnsupported(f"{bits}-bit Flat values for {leaf.arrow_type}")


def value_form(enc: Any, leaf: DeviceLeaf, nbuf: int) -> tuple:
    """:func:`items_form` of a mini-block page's Flat values (``enc``, ``nbuf`` chunk
    buffers), one item per value; raises :class:`DeviceUnsupported` where the device does
    not decode them for ``leaf``."""
    one_chunk_buffer(nbuf)
    bits = flat_bits(enc) if leaf.kind != "var" else None
    if bits is None:
        raise refuse_values("flat", leaf)
    return items_form(1, bits, leaf)


def level_form(enc: Any) -> str | None:
    """``"flat"`` for Flat{16} levels (:func:`is_level`), else None."""
    return "flat" if is_level(enc) else None


def full_zip_form(enc: Any) -> tuple | None:
    """``("flat", (1, bits))`` of full-zip Flat values (copied), None with a compressed data
    section."""
    bits = flat_bits(enc)
    return None if bits is None else ("flat", (1, bits))


def chunk_bytes(sizes: np.ndarray, counts: np.ndarray, dim: int, bits: int, ctx: DecodeContext) -> np.ndarray:
    """The bytes of Flat chunks of ``counts`` values (``dim`` items of ``bits`` each, bits a
    multiple of 8; booleans: ``bits`` 1, the bytes their bits fill); raises ``ctx.corrupt``
    where a chunk's buffer (``sizes`` bytes) is shorter."""
    if bits == 1:
        need = (counts * dim + 7) // 8
        if np.any(sizes < need):
            raise ctx.corrupt("boolean chunk shorter than its value count")
        return need
    nbytes = counts * dim * (bits // 8)
    if np.any(sizes < nbytes):
        raise ctx.corrupt("flat chunk shorter than its value count")
    return nbytes


def is_level(enc) -> bool:
    """Whether a level encoding is Flat{16} without a compressed data section."""
    return flat_bits(enc) == 16


def level_bytes(sizes: np.ndarray, nlevels: np.ndarray, ctx: DecodeContext) -> np.ndarray:
    """The bytes of Flat{16} level buffers of ``nlevels`` levels; raises ``ctx.corrupt``
    where a buffer (``sizes`` bytes) is shorter."""
    if np.any(sizes < 2 * nlevels):
        raise ctx.corrupt("mini-block level buffer shorter than its levels")
    return 2 * nlevels


def emit_values(unit: DeviceUnit, enc: Any, arg: tuple[int, int], ch: Any, dst: np.ndarray, ctx: DecodeContext) -> None:
    """The work of Flat chunks (``arg``: ``(items per value, bits per item)``,
    :func:`items_form`): chunk ``i`` of ``ch`` (the device pre-pass's chunks: ``counts``,
    ``bufs``: chunks x buffers x (arena byte, size), the items in buffer 0) to byte
    ``dst[i]`` of the fixed arena (:func:`emit_items`)."""
    emit_items(unit, arg, ch.counts, np.ascontiguousarray(ch.bufs[:, 0, 0]), ch.bufs[:, 0, 1], dst, ctx)


def emit_items(unit: DeviceUnit, arg: tuple[int, int], counts: np.ndarray, starts: np.ndarray, sizes: np.ndarray,
               dst: np.ndarray, ctx: DecodeContext) -> None:
    """The work of per-chunk buffers of Flat items (``arg``: ``(items per value, bits per
    item)``): chunk ``i``'s ``counts[i]`` values, at arena byte ``starts[i]`` in ``sizes[i]``
    bytes, to byte ``dst[i]`` of the fixed arena: copied (the ``copy`` family), or, 1-bit
    items, spread to a byte each (the ``bits`` family); raises ``ctx.corrupt`` where a chunk
    is short (:func:`chunk_bytes`).  Flat values' buffer 0, and the items buffer (1) of
    fixed-size lists with item validity (``fixed_size_list.gpu_plan.emit_values``)."""
    dim, bits = arg
    nbytes = chunk_bytes(sizes, counts, dim, bits, ctx)
    if bits == 1:
        unit.bits.add(src=8 * starts, count=counts * dim, dst=dst)
        return
    unit.copy_fixed.add(src=starts, len=nbytes, dst=dst)


def emit_levels(unit: DeviceUnit, form: str, enc: Any, starts: np.ndarray, sizes: np.ndarray, nlevels: np.ndarray,
                dst: np.ndarray, ctx: DecodeContext, blocks: Any = None, runs: np.ndarray | None = None) -> None:
    """Flat{16} level buffers at arena bytes ``starts`` of ``sizes`` bytes: chunk ``i``'s
    ``nlevels[i]`` u16 levels copied to level ``dst[i]`` (:func:`level_bytes` refuses a
    short buffer)."""
    unit.copy_level.add(src=starts, len=level_bytes(sizes, nlevels, ctx), dst=2 * dst)


__all__ = [
    "chunk_bytes", "emit_items", "emit_levels", "emit_values", "flat_bits", "full_zip_form", "is_level", "items_form", "level_bytes",
    "level_form", "value_form",
]
