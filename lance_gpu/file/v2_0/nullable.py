# SPDX-License-Identifier: Apache-2.0
"""Nullable: ``no_nulls{values}``, ``some_nulls{validity, values}`` or ``all_nulls{}``.

``validity`` decodes to one bit per value (1 = valid).  Null slots still take their space
in ``values``, so both children are decoded over the same value range.
"""

from __future__ import annotations

from lance_gpu.file.v2_0 import registry
from lance_gpu.file.v2_0.blocks import AllNull, Bits, Nullable
from lance_gpu.file.v2_0.page import PageSource


def decode(msg, src: PageSource, start: int, stop: int, arrow_type):
    kind = msg.WhichOneof("nullability")
    if kind == "no_nulls":
        return registry.decode(msg.no_nulls.values, src, start, stop, arrow_type)
    if kind == "all_nulls":
        return AllNull(stop - start)
    if kind == "some_nulls":
        validity = registry.decode(msg.some_nulls.validity, src, start, stop, None)
        if not isinstance(validity, Bits) or validity.n != stop - start:
            raise src.ctx.corrupt("Nullable validity must decode to one bit per value")
        values = registry.decode(msg.some_nulls.values, src, start, stop, arrow_type)
        if values.n != stop - start:
            raise src.ctx.corrupt(f"Nullable values: decoded {values.n}, expected {stop - start}")
        return Nullable(values, validity.values)
    raise src.ctx.corrupt("Nullable encoding with no nullability set")
