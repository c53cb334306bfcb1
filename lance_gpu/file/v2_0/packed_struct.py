# SPDX-License-Identifier: Apache-2.0
"""PackedStruct: ``inner`` (one encoding per field), ``buffer``.

Opt-in (field metadata ``lance-encoding:packed``).  The struct's rows are stored
row-major in one buffer: each row is the fields' fixed-width values back to back, in field
order, with no nulls.  The field widths come from the Arrow types, as in pylance (the inner
encodings are only descriptive).  One column holds the whole struct.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lance_gpu.file.v2_0.blocks import Fixed, Struct
from lance_gpu.file.v2_0.page import PageSource


def _byte_width(t: pa.DataType) -> int | None:
    if pa.types.is_fixed_size_list(t):
        inner = _byte_width(t.value_type)
        return None if inner is None else inner * t.list_size
    if pa.types.is_fixed_size_binary(t):
        return t.byte_width
    if pa.types.is_boolean(t):
        return None
    try:
        bw = t.bit_width
    except ValueError:
        return None
    return bw // 8 if bw and bw % 8 == 0 else None


def decode(msg, src: PageSource, start: int, stop: int, arrow_type):
    if arrow_type is None or not pa.types.is_struct(arrow_type):
        raise src.ctx.corrupt(f"PackedStruct page for a field of type {arrow_type}")
    widths = []
    for i in range(arrow_type.num_fields):
        w = _byte_width(arrow_type.field(i).type)
        if w is None:
            raise src.ctx.unsupported(f"2.0 PackedStruct field of type {arrow_type.field(i).type}")
        widths.append(w)
    if len(msg.inner) and len(msg.inner) != len(widths):
        raise src.ctx.corrupt(f"PackedStruct has {len(msg.inner)} inner encodings for {len(widths)} fields")
    row = sum(widths)
    n = stop - start
    raw = src.read(msg.buffer, start * row, n * row)
    rows = raw.reshape(n, row) if row else np.zeros((n, 0), np.uint8)
    children = []
    pos = 0
    for w in widths:
        children.append(Fixed(np.ascontiguousarray(rows[:, pos : pos + w]).reshape(-1), w * 8))
        pos += w
    return Struct(children, n)
