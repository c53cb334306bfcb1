# SPDX-License-Identifier: Apache-2.0
"""Device planning of Variable values (host side): the offset width the device's
``variable spans`` kernel (:func:`.decode_kernels.variable_spans`) reads.

A mini-block chunk buffer of Variable values is ``offsets[count + 1]`` (u32 for Flat32
offsets, u64 for Flat64), measured from the start of the chunk buffer, then the bytes; the
device turns it into one ``(start, length)`` span per value.  Offsets encoded otherwise, or
values compressed inside the chunk, are not decoded on the device.  A full-zip page of
variable-width values carries its own length words (``bits_per_offset``), read by the
full-zip walk.
"""

from __future__ import annotations

from typing import Any

from lance_gpu.file.encodings.base import DeviceLeaf, DeviceUnsupported, one_chunk_buffer, refuse_values


def offset_bytes(enc: Any) -> int:
    """Offset bytes (4 or 8) of a ``CompressiveEncoding`` that is Variable with Flat32 /
    Flat64 offsets and uncompressed values; raises :class:`DeviceUnsupported` for another
    (``"<field> strings"`` where it is not Variable)."""
    name = enc.WhichOneof("compression")
    if name != "variable":
        raise DeviceUnsupported(f"{name} strings")
    var = enc.variable
    if var.HasField("values"):
        raise DeviceUnsupported("Variable with compressed values")
    off = var.offsets
    if off.WhichOneof("compression") != "flat" or int(off.flat.bits_per_value) not in (32, 64):
        raise DeviceUnsupported("Variable offsets other than Flat32 / Flat64")
    return int(off.flat.bits_per_value) // 8


def value_form(enc: Any, leaf: DeviceLeaf, nbuf: int) -> tuple:
    """``("var", offset bytes)``: a mini-block page's Variable values (``enc``, ``nbuf``
    chunk buffers) decoded as value spans for a variable-width ``leaf``; raises
    :class:`DeviceUnsupported` otherwise."""
    one_chunk_buffer(nbuf)
    if leaf.kind != "var":
        raise refuse_values("variable", leaf)
    return "var", offset_bytes(enc)


def full_zip_form(enc: Any) -> tuple:
    """``("var",)``: full-zip Variable values are walked (lengths in the zipped rows)."""
    return ("var",)


__all__ = ["full_zip_form", "offset_bytes", "value_form"]
