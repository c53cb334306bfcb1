# SPDX-License-Identifier: Apache-2.0
"""Device planning of Flat chunks (host side): a Flat{bits} chunk buffer, possibly under
FixedSizeList wrappers without validity, is ``count * items_per_value`` items of ``bits``
each, back to back; the device copies them (bytes) or spreads them (booleans, one bit each).
Flat{16} levels (per chunk) are ``count`` u16 levels, copied.

FixedSizeList(Flat) without validity is planned here too (:func:`fixed_items` peels the
wrappers; the registry names this module FixedSizeList's device planning): its values are
Flat items, ``items_per_value`` of them per value."""

from __future__ import annotations

from typing import Any

import numpy as np

from lance_gpu.file.encodings.base import DecodeContext, DeviceLeaf, DeviceUnsupported, one_chunk_buffer, refuse_values


def fixed_items(enc) -> tuple[int, int] | None:
    """``(items per value, bits per item)`` of Flat or FixedSizeList(...Flat) without a
    validity bitmap or a compressed data section (None: another layout)."""
    dim = 1
    while enc.WhichOneof("compression") == "fixed_size_list":
        fsl = enc.fixed_size_list
        if fsl.has_validity:
            return None
        dim *= int(fsl.items_per_value)
        enc = fsl.values
    if enc.WhichOneof("compression") != "flat" or enc.flat.HasField("data"):
        return None
    return dim, int(enc.flat.bits_per_value)


def value_form(enc: Any, leaf: DeviceLeaf, nbuf: int) -> tuple:
    """``("flat", (items per value, bits per item))`` of a mini-block page's Flat /
    FixedSizeList(Flat) values (``enc``, ``nbuf`` chunk buffers) for ``leaf``: copied for a
    fixed-width leaf of as many bytes per value, spread to one byte per item for a boolean
    leaf of 1-bit items; raises :class:`DeviceUnsupported` otherwise."""
    one_chunk_buffer(nbuf)
    name = enc.WhichOneof("compression")
    ff = fixed_items(enc) if leaf.kind != "var" else None
    if ff is None:
        raise refuse_values(name, leaf)
    dim, bits = ff
    if leaf.kind == "bool" and bits == 1 and dim == leaf.width:
        return "flat", ff
    if leaf.kind == "fixed" and bits % 8 == 0 and dim * bits == 8 * leaf.width:
        return "flat", ff
    raise DeviceUnsupported(f"{bits}-bit Flat values for {leaf.arrow_type}")


def level_form(enc: Any) -> str | None:
    """``"flat"`` for Flat{16} levels (:func:`is_level`), else None."""
    return "flat" if is_level(enc) else None


def full_zip_form(enc: Any) -> tuple | None:
    """``("flat", (items per value, bits per item))`` of full-zip fixed-width values the
    device copies (:func:`fixed_items`), None for another layout."""
    ff = fixed_items(enc)
    return None if ff is None else ("flat", ff)


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
    return enc.WhichOneof("compression") == "flat" and int(enc.flat.bits_per_value) == 16 and not enc.flat.HasField("data")


def level_bytes(sizes: np.ndarray, nlevels: np.ndarray, ctx: DecodeContext) -> np.ndarray:
    """The bytes of Flat{16} level buffers of ``nlevels`` levels; raises ``ctx.corrupt``
    where a buffer (``sizes`` bytes) is shorter."""
    if np.any(sizes < 2 * nlevels):
        raise ctx.corrupt("mini-block level buffer shorter than its levels")
    return 2 * nlevels


__all__ = ["chunk_bytes", "fixed_items", "full_zip_form", "is_level", "level_bytes", "level_form", "value_form"]
