# SPDX-License-Identifier: Apache-2.0
"""Decoded leaves to device columns: levels to validity and offsets, then the field's tree.

Mirrors the CPU's :func:`lance_gpu.file.arrow.assemble` (same layer walk, same checks), with
the levels of each leaf unravelled on the device (``cuda_kernels.unravel_levels_gpu``) and
every buffer a view into the unit's shared device buffers.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

import cuda_kernels as ck
from cuda_kernels.errors import CorruptInputError
from lance_gpu.errors import CorruptFileError
from lance_gpu.gpu import _array
from lance_gpu.gpu.columns import DeviceColumn, _storage
from lance_gpu.gpu.decode import UnitBuffers
from lance_gpu.gpu.plan import FieldPlan, LeafPlan


class _Slots:
    __slots__ = ("validity", "offsets", "count")

    def __init__(self, validity, offsets, count: int) -> None:
        self.validity = validity
        self.offsets = offsets
        self.count = count


class _Leaf:
    __slots__ = ("plan", "slots", "k")

    def __init__(self, plan: LeafPlan, slots: list[_Slots]) -> None:
        self.plan = plan
        self.slots = slots
        self.k = len(slots)


def _unravel(leaf: LeafPlan, bufs: UnitBuffers) -> list[_Slots]:
    if not leaf.has_rep and not leaf.has_def:
        return [_Slots(None, None, leaf.num_levels) for _ in leaf.layers]
    n = leaf.num_levels
    rep = bufs.levels[leaf.rep_pos : leaf.rep_pos + n] if leaf.has_rep else None
    def_ = bufs.levels[leaf.def_pos : leaf.def_pos + n] if leaf.has_def else None
    try:
        result = ck.unravel_levels_gpu(rep, def_, list(leaf.layers), num_levels=n)
    except (CorruptInputError, ValueError) as exc:
        raise CorruptFileError(leaf.path, f"column {leaf.column}: repetition / definition levels do not fit the column's layers ({exc})") from exc
    out = []
    for lr in result.layers:
        validity = None if lr.validity is None else _array.as_device(lr.validity)
        offsets = None if lr.offsets is None else _array.as_device(lr.offsets)
        out.append(_Slots(validity, offsets, int(lr.length)))
    return out


def _leaf_column(t: pa.DataType, leaf: LeafPlan, slots: _Slots, bufs: UnitBuffers) -> DeviceColumn:
    if slots.count != leaf.num_values:
        raise CorruptFileError(leaf.path, f"column {leaf.column}: expected {slots.count} values, decoded {leaf.num_values}")
    n = leaf.num_values
    if leaf.kind == "var":
        offsets = bufs.var_offsets[leaf.slot_lo : leaf.slot_lo + n + 1]
        return DeviceColumn(t, n, slots.validity, bufs.var_bytes, offsets)
    data = bufs.fixed[leaf.value_pos : leaf.value_pos + n * leaf.width]
    return DeviceColumn(t, n, slots.validity, data)


def _build(t: pa.DataType, leaves: list[_Leaf], cursor: list[int], depth: int, bufs: UnitBuffers, path: str) -> DeviceColumn:
    s = _storage(t)
    if pa.types.is_struct(s) or pa.types.is_map(s) or pa.types.is_list(s) or pa.types.is_large_list(s):
        first = leaves[cursor[0]]
        li = first.k - 1 - depth
        if li < 0:
            raise CorruptFileError(path, "column has fewer rep/def layers than its type's nesting")
        slots = first.slots[li]
        if pa.types.is_struct(s):
            children = [_build(s.field(i).type, leaves, cursor, depth + 1, bufs, path) for i in range(s.num_fields)]
            for c in children:
                if c.length != slots.count:
                    raise CorruptFileError(path, f"struct field of {c.length} rows under a struct of {slots.count}")
            return DeviceColumn(t, slots.count, slots.validity, children=children)
        if slots.offsets is None:
            raise CorruptFileError(path, "list column without list levels")
        if pa.types.is_map(s):
            child = _build(pa.struct([s.key_field, s.item_field]), leaves, cursor, depth + 1, bufs, path)
        else:
            child = _build(s.value_type, leaves, cursor, depth + 1, bufs, path)
        return DeviceColumn(t, slots.count, slots.validity, offsets=slots.offsets, children=[child])
    leaf = leaves[cursor[0]]
    cursor[0] += 1
    if leaf.k - 1 - depth != 0:
        raise CorruptFileError(path, "column's rep/def layers do not match its type's nesting")
    return _leaf_column(t, leaf.plan, leaf.slots[0], bufs)


def build_field(fp: FieldPlan, bufs: UnitBuffers) -> DeviceColumn:
    """The device column of one planned field (all physical rows of its fragment)."""
    leaves = [_Leaf(lp, _unravel(lp, bufs)) for lp in fp.leaves]
    path = fp.leaves[0].path if fp.leaves else "<no file>"
    col = _build(fp.arrow_field.type, leaves, [0], 0, bufs, path)
    if col.length != fp.num_rows:
        raise CorruptFileError(path, f"field {fp.name!r} decoded to {col.length} rows where its pages hold {fp.num_rows}")
    return col


def empty_like(t: pa.DataType) -> DeviceColumn:
    return DeviceColumn.from_arrow(pa.array([], type=t))


__all__ = ["build_field", "empty_like"]

_ = np  # numpy is used by callers through this module's types
