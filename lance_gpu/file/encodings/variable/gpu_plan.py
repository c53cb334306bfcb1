# SPDX-License-Identifier: Apache-2.0
"""Device planning of Variable values (host side): the offset width the device's
``variable spans`` kernel (:func:`.decode_kernels.variable_spans`) reads.

A mini-block chunk buffer of Variable values is ``offsets[count + 1]`` (u32 for Flat32
offsets, u64 for Flat64), measured from the start of the chunk buffer, then the bytes; the
device turns it into one ``(start, length)`` span per value.  Offsets encoded otherwise, or
values compressed inside the chunk, are not decoded on the device.  A full-zip page of
variable-width values carries its own length words (``bits_per_offset``), read by the
full-zip walk.

Emission (the registered ``var`` family, plain and FSST strings): :func:`emit_values` adds a
``variable spans`` row per chunk, its values to consecutive slots.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lance_gpu.file.encodings.base import DecodeContext, DeviceLeaf, DeviceUnit, DeviceUnsupported, one_chunk_buffer, refuse_values


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


def emit_values(unit: DeviceUnit, enc: Any, arg: int, ch: Any, dst: np.ndarray, ctx: DecodeContext) -> None:
    """The work of Variable chunks (``arg``: offset bytes, :func:`value_form`): chunk ``i``
    of ``ch`` (the device pre-pass's chunks: ``counts``, ``bufs``: chunks x buffers x
    (arena byte, size), the chunk in buffer 0) to value slots from ``dst[i]``, one
    ``variable spans`` row per chunk (the kernel checks its offsets)."""
    starts = np.ascontiguousarray(ch.bufs[:, 0, 0])
    unit.var_chunks.add(start=starts, size=ch.bufs[:, 0, 1], width=arg, count=ch.counts, dst=dst)


__all__ = ["emit_values", "full_zip_form", "offset_bytes", "value_form"]
